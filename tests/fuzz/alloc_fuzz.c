/* alloc_fuzz.c — libFuzzer target for alloc/: the GPUMEM_CONF parser, the trace parser (+ a
 * replay of what parses), and operation sequences on the allocator with alloc_check() after
 * every operation. The first byte picks the mode. A broken invariant, overlapping live blocks or
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
        if (alloc_replay(&c, &o, ev, ne, &r, err, sizeof(err)) == ALLOC_OK &&
            r.peak_requested > r.peak_reserved)
            die("replay: peak requested above peak reserved", NULL);
    }
    free(ev);
}

typedef struct {
    uint64_t p;
    size_t size;
} live_t;

static void fuzz_ops(const uint8_t *d, size_t n)
{
    if (n < 3) return;
    alloc_config_t cfg;
    alloc_config_preset(&cfg, alloc_preset_names[d[0] & 3]);
    if (d[0] & 4) cfg.limit = (16 + (size_t)(d[1] & 63)) * MiB;
    if (d[0] & 8) cfg.release_threshold = (size_t)(d[1] >> 4) * MiB;
    if (d[0] & 16) cfg.max_split_size = 32 * MiB;
    if (d[0] & 32) cfg.rp2_div[20] = cfg.rp2_div[21] = cfg.rp2_div[22] = 4;
    if ((d[0] & 64) && cfg.limit) cfg.gc_threshold = 0.5;
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
                live[nl++] = (live_t){p, bs};
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
        if (alloc_check(a, err, sizeof(err)) != ALLOC_OK) die("alloc_check", err);
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
