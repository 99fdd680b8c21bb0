/* alloc_fuzz.c — libFuzzer target for alloc/: the GPUMEM_CONF parser, the trace parser (+ a
 * replay of what parses), and operation sequences on the allocator with alloc_check() every
 * FULL_CHECK_EVERY operations and after the last, and the live-block ledger checked after every
 * operation (quick_check). The first byte picks the mode. A broken invariant, overlapping live blocks or
 * a config that does not round-trip aborts (the fuzzer reports it). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"

#define MiB ((size_t)1 << 20)

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "alloc_fuzz: %s: %s\n", what, detail ? detail : "");
    abort();
}

static void fuzz_config(const uint8_t *d, size_t n)
{
    char *s = malloc(n + 1);
    memcpy(s, d, n);
    s[n] = 0;
    alloc_config_t c, c2;
    char err[512];
    alloc_config_default(&c);
    if (alloc_config_parse(&c, s, err, sizeof(err)) == ALLOC_OK) {
        char buf[2048];
        alloc_config_format(&c, buf, sizeof(buf));
        alloc_config_default(&c2);
        if (alloc_config_parse(&c2, buf, err, sizeof(err)) != ALLOC_OK)
            die("formatted config does not parse", buf);
    } else if (!strstr(err, "GPUMEM_CONF: ") || strchr(err, '\n')) {
        die("error message is not one GPUMEM_CONF line", err);
    }
    size_t sz;
    alloc_parse_size(s, &sz);
    free(s);
}

static void fuzz_trace(const uint8_t *d, size_t n)
{
    alloc_trace_event_t *ev = NULL;
    size_t ne = 0;
    char err[256];
    if (alloc_trace_parse((const char *)d, n, &ev, &ne, err, sizeof(err)) != ALLOC_OK) return;
    if (ne <= 4096) {
        alloc_config_t c;
        alloc_config_preset(&c, alloc_preset_names[n % 4]);
        alloc_replay_opts_t o = {.capacity = 1ull << 32, .continue_after_oom = true};
        alloc_replay_result_t r;
        int rc = alloc_replay(&c, &o, ev, ne, &r, err, sizeof(err));
        if (rc == ALLOC_OK && r.peak_requested > r.peak_reserved)
            die("replay: peak requested above peak reserved", NULL);
        /* the same replay with the live allocations kept by slot */
        uint32_t *slots, ns;
        if (alloc_trace_slots(ev, ne, &slots, &ns) == ALLOC_OK) {
            alloc_replay_result_t q;
            o.slots = slots, o.nslots = ns;
            int qc = alloc_replay(&c, &o, ev, ne, &q, err, sizeof(err));
            if (qc != rc || (rc == ALLOC_OK && (q.events != r.events || q.bad_frees != r.bad_frees ||
                                                q.peak_allocated != r.peak_allocated ||
                                                q.peak_reserved != r.peak_reserved ||
                                                q.driver_calls != r.driver_calls ||
                                                q.held_frees != r.held_frees || q.num_ooms != r.num_ooms)))
                die("replay: by slot differs from by id", NULL);
            free(slots);
        }
    }
    free(ev);
}

typedef struct {
    uint64_t p;
    size_t size, req; /* the block's size (block_info), the size asked for */
} live_t;

/* The full invariant check (alloc_check: every block of every size class of every pool, the
 * trees, the bitmaps, the sums) costs O(size classes + blocks): the classes a pool's index
 * covers, 64 empty ones compared at a time. It ran after every operation, half of this target's
 * time (when it read every class of every pool). It now runs every FULL_CHECK_EVERY
 * operations and after the last one of an input; a broken invariant is state that stays broken
 * until it is checked (the allocator never repairs its own structures), so the same inputs still
 * find it, at most FULL_CHECK_EVERY - 1 operations later. Between full checks, after every
 * operation, quick_check compares the allocator's public ledger with the target's own list of
 * live blocks, O(live blocks): the count of allocations, the requested bytes, the allocated
 * bytes against the block sizes block_info gave, and the stats' own sanity. */
#ifndef FULL_CHECK_EVERY /* -DFULL_CHECK_EVERY=1: the old behaviour, to compare */
#define FULL_CHECK_EVERY 8
#endif

static void quick_check(alloc_t *a, const alloc_config_t *cfg, const live_t *live, int nl)
{
    alloc_stats_t st;
    alloc_get_stats(a, &st);
    int64_t req = 0, bytes = 0;
    for (int k = 0; k < nl; k++) req += (int64_t)live[k].req, bytes += (int64_t)live[k].size;
    char buf[256];
    if (st.allocation.current != nl || st.requested_bytes.current != req ||
        st.allocated_bytes.current != bytes) {
        snprintf(buf, sizeof buf, "%lld allocations, %lld requested, %lld allocated bytes; the "
                 "live list says %d, %lld, %lld", (long long)st.allocation.current,
                 (long long)st.requested_bytes.current, (long long)st.allocated_bytes.current, nl,
                 (long long)req, (long long)bytes);
        die("stats vs live blocks", buf);
    }
    const alloc_stat_t *v[] = {&st.allocated_bytes, &st.requested_bytes, &st.reserved_bytes,
                               &st.active_bytes, &st.inactive_split_bytes, &st.allocation,
                               &st.segment, &st.active, &st.inactive_split};
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
        if (v[k]->current < 0 || v[k]->peak < v[k]->current) die("a stat below 0 or above its peak", NULL);
    if (st.active.current < st.allocation.current || st.active_bytes.current < st.allocated_bytes.current ||
        st.reserved_bytes.current < st.active_bytes.current)
        die("active below allocated, or reserved below active", NULL);
    if (cfg->limit != ALLOC_NO_LIMIT && (size_t)st.reserved_bytes.current > cfg->limit) die("reserved over the limit", NULL);
}

static void fuzz_ops(const uint8_t *d, size_t n)
{
    if (n < 3) return;
    alloc_config_t cfg;
    alloc_config_preset(&cfg, alloc_preset_names[d[0] & 3]);
    if (d[0] & 4) cfg.limit = (16 + (size_t)(d[1] & 63)) * MiB;
    if (d[0] & 8) cfg.release_threshold = (size_t)(d[1] >> 4) * MiB;
    if (d[0] & 16) cfg.max_split_size = 32 * MiB;
    if (d[0] & 32) cfg.rp2_div[20] = cfg.rp2_div[21] = cfg.rp2_div[22] = 4;
    if ((d[0] & 64) && cfg.limit != ALLOC_NO_LIMIT) cfg.gc_threshold = 0.5;
    if (d[0] & 128) cfg.handle_size = 4 * MiB;
    alloc_mem_opts_t mo = {.capacity = (32 + (size_t)d[2]) * MiB,
                           .no_vmm = (d[1] & 3) == 3,
                           .track_events = (d[2] & 1) != 0,
                           .event_delay = (d[2] & 2) ? ALLOC_MEM_EVENT_MANUAL : (d[2] >> 6)};
    alloc_mem_backend_t *m = alloc_mem_backend_create(&mo);
    alloc_t *a;
    if (alloc_create(alloc_mem_backend(m), &cfg, &a) != ALLOC_OK) die("alloc_create", NULL);
    live_t live[64];
    int nl = 0;
    unsigned nops = 0;
    char err[256];
    for (size_t i = 3; i + 3 < n; i += 4) {
        uint8_t op = d[i] % 8;
        uintptr_t stream = d[i + 1] % 3;
        size_t size = ((size_t)d[i + 2] << 8 | d[i + 3]) << (d[i + 1] >> 4);
        if (op < 4 && nl < 64) {
            uint64_t p;
            if (alloc_malloc(a, size, stream, &p) == ALLOC_OK && p) {
                uint64_t base;
                size_t bs;
                if (alloc_block_info(a, p, &base, &bs) != ALLOC_OK || base != p || bs < size)
                    die("block_info of a new block", NULL);
                for (int k = 0; k < nl; k++)
                    if (p < live[k].p + live[k].size && live[k].p < p + bs)
                        die("overlapping live blocks", NULL);
                live[nl++] = (live_t){p, bs, size};
            }
        } else if (op < 6 && nl) {
            int k = d[i + 2] % nl;
            int rc = op == 4 ? alloc_free(a, live[k].p) : alloc_free_async(a, live[k].p, stream);
            if (rc != ALLOC_OK) die("free of a live block", alloc_strerror(rc));
            uint64_t again = live[k].p;
            live[k] = live[--nl];
            if (d[i + 3] & 1) {
                int r2 = alloc_free(a, again);
                bool reused = false;
                for (int j = 0; j < nl; j++)
                    reused |= live[j].p == again;
                if (!reused && r2 != ALLOC_ERR_DOUBLE_FREE && r2 != ALLOC_ERR_NOT_OWNED &&
                    r2 != ALLOC_ERR_NOT_BASE)
                    die("double free not detected", alloc_strerror(r2));
            }
        } else if (op == 6) {
            alloc_empty_cache(a);
        } else {
            alloc_mem_backend_complete_events(m);
            uint64_t base;
            size_t bs;
            alloc_block_info(a, ((uint64_t)d[i + 2] << 32) | d[i + 3], &base, &bs);
        }
        /* the full check every FULL_CHECK_EVERY operations and after the last one; the O(1)
         * ledger checks after every operation (see quick_check) */
        if ((++nops % FULL_CHECK_EVERY == 0 || i + 7 >= n) && alloc_check(a, err, sizeof(err)) != ALLOC_OK)
            die("alloc_check", err);
        quick_check(a, &cfg, live, nl);
    }
    alloc_destroy(a);
    alloc_mem_backend_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 1) return 0;
    switch (d[0] % 4) {
    case 0:
        fuzz_config(d + 1, n - 1);
        break;
    case 1:
        fuzz_trace(d + 1, n - 1);
        break;
    default:
        fuzz_ops(d + 1, n - 1);
        break;
    }
    return 0;
}
