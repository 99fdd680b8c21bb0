/* alloc_prop.c — property tests: thousands of seeded random operation sequences over random
 * configs and backends, alloc_check() after every operation, plus a shadow model that checks
 * what the invariant checker cannot see from inside:
 *   - live blocks never overlap, and each is at least as large as requested;
 *   - a block freed with cudaFree semantics (or async on another stream) is not handed out again
 *     while its events are pending (manual-completion backend; a synchronize clears them);
 *   - a block freed async on its own stream goes only to that stream;
 *   - double frees, interior and foreign pointers get the right error codes;
 *   - allocated bytes equal the shadow's sum; everything is given back at the end.
 * Set ALLOC_PROP_SEQS to change the number of sequences (default 5000). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alloc/alloc.h"

#define MiB ((size_t)1 << 20)
#define MAXLIVE 64

typedef struct {
    uint64_t p;
    size_t size; /* block size from alloc_block_info */
    size_t req;
    uintptr_t stream;
} live_t;

typedef struct {
    uint64_t p;
    size_t size;
    int only_stream; /* -1: nobody may reuse it yet; else only this stream */
} quar_t;

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static bool overlap(uint64_t a, size_t as, uint64_t b, size_t bs)
{
    return a < b + bs && b < a + as;
}

static void run_sequence(uint64_t seed, int nops)
{
    uint64_t r = seed * 7919 + 17;
    char conf[512], err[512];
    static const char *presets[] = {"gpumem", "pytorch", "pytorch-expandable", "nocache"};
    const char *preset = presets[rng_next(&r) % 4];
    size_t o = 0;
    conf[0] = 0;
#define ADD(...) o += (size_t)snprintf(conf + o, sizeof(conf) - o, __VA_ARGS__)
    if (rng_next(&r) % 4 == 0)
        ADD("roundup_power2_divisions:%s,", rng_next(&r) % 2 ? "4" : "[2:1,8:2,>:4]");
    if (rng_next(&r) % 5 == 0) ADD("max_split_size_mb:%u,", 21 + (unsigned)(rng_next(&r) % 60));
    bool limited = rng_next(&r) % 3 == 0;
    if (limited) ADD("limit:%uM,", 16 + (unsigned)(rng_next(&r) % 200));
    if (limited && rng_next(&r) % 2)
        ADD("garbage_collection_threshold:0.%u,", 3 + (unsigned)(rng_next(&r) % 6));
    if (rng_next(&r) % 5 == 0) ADD("release_threshold:%uM,", 1 + (unsigned)(rng_next(&r) % 32));
    if (rng_next(&r) % 4 == 0) ADD("handle_size:%uM,", 2 * (1 + (unsigned)(rng_next(&r) % 5)));
    bool shared_pools = rng_next(&r) % 8 == 0;
    if (shared_pools) ADD("per_stream_pools:False,");
#undef ADD
    alloc_config_t cfg;
    assert_int_equal(alloc_config_preset(&cfg, preset), ALLOC_OK);
    if (alloc_config_parse(&cfg, conf, err, sizeof(err)))
        fail_msg("seed %llu: conf '%s': %s", (unsigned long long)seed, conf, err);

    alloc_mem_opts_t mo = {0};
    mo.capacity = (64 + rng_next(&r) % 448) * MiB;
    mo.no_vmm = rng_next(&r) % 6 == 0;
    mo.track_events = rng_next(&r) % 2;
    bool manual = mo.track_events && rng_next(&r) % 2;
    mo.event_delay = manual ? ALLOC_MEM_EVENT_MANUAL : (unsigned)(rng_next(&r) % 3);
    if (rng_next(&r) % 6 == 0) mo.fail_call = 1 + rng_next(&r) % 20;
    alloc_mem_backend_t *m = alloc_mem_backend_create(&mo);
    alloc_t *a;
    assert_int_equal(alloc_create(alloc_mem_backend(m), &cfg, &a), ALLOC_OK);

    live_t live[MAXLIVE];
    int nlive = 0;
    quar_t quar[4 * MAXLIVE];
    int nquar = 0;
    uint64_t freed[16];
    int nfreed = 0;
    bool nocache = !strcmp(preset, "nocache");
    alloc_mem_counters_t mc;
    alloc_mem_backend_counters(m, &mc);
    uint64_t syncs = mc.synchronize;

    for (int op = 0; op < nops; op++) {
        unsigned k = (unsigned)(rng_next(&r) % 100);
        uintptr_t stream = (uintptr_t)(rng_next(&r) % 3);
        if (k < 50 && nlive < MAXLIVE) {
            unsigned lg = (unsigned)(rng_next(&r) % 25); /* 1 B .. 16 MiB, log-uniform */
            size_t size = ((size_t)1 << lg) + (size_t)(rng_next(&r) % ((size_t)1 << lg));
            if (rng_next(&r) % 50 == 0) size = 0;
            uint64_t p = 0;
            int rc = alloc_malloc(a, size, stream, &p);
            alloc_mem_backend_counters(m, &mc);
            if (mc.synchronize != syncs) { /* the OOM path synchronized: events complete */
                syncs = mc.synchronize;
                nquar = 0;
            }
            if (rc == ALLOC_ERR_OOM) {
                alloc_oom_info_t oi;
                assert_true(alloc_last_oom(a, &oi));
                assert_int_equal(oi.requested, size);
                assert_true(p == 0);
            } else {
                if (rc)
                    fail_msg("seed %llu op %d: malloc(%zu): %s", (unsigned long long)seed, op, size,
                             alloc_strerror(rc));
                if (size == 0) {
                    assert_true(p == 0);
                } else {
                    uint64_t base;
                    size_t bs;
                    assert_int_equal(alloc_block_info(a, p, &base, &bs), ALLOC_OK);
                    assert_true(base == p && bs >= size && p % 512 == 0);
                    for (int i = 0; i < nlive; i++)
                        if (overlap(p, bs, live[i].p, live[i].size))
                            fail_msg("seed %llu op %d: new block %#llx+%zu overlaps live %#llx",
                                     (unsigned long long)seed, op, (unsigned long long)p, bs,
                                     (unsigned long long)live[i].p);
                    for (int i = 0; i < nquar; i++) {
                        if (!overlap(p, bs, quar[i].p, quar[i].size)) continue;
                        if (quar[i].only_stream == (int)stream) {
                            quar[i--] = quar[--nquar]; /* legitimately reused by its stream */
                            continue;
                        }
                        fail_msg("seed %llu op %d (%s, conf '%s'): block %#llx on stream %d "
                                 "reuses memory still guarded by events (freed %#llx, reusable "
                                 "by stream %d only)",
                                 (unsigned long long)seed, op, preset, conf, (unsigned long long)p,
                                 (int)stream, (unsigned long long)quar[i].p, quar[i].only_stream);
                    }
                    live[nlive++] = (live_t){p, bs, size, stream};
                }
            }
        } else if (k < 75 && nlive) {
            int i = (int)(rng_next(&r) % (uint64_t)nlive);
            live_t l = live[i];
            live[i] = live[--nlive];
            bool async = rng_next(&r) % 2;
            int rc = async ? alloc_free_async(a, l.p, stream) : alloc_free(a, l.p);
            assert_int_equal(rc, ALLOC_OK);
            if (manual && !nocache && nquar < 4 * MAXLIVE) {
                if (async && stream == l.stream && !shared_pools)
                    quar[nquar++] = (quar_t){l.p, l.size, (int)stream};
                else
                    quar[nquar++] = (quar_t){l.p, l.size, -1};
            }
            if (nfreed < 16)
                freed[nfreed++] = l.p;
            else
                freed[rng_next(&r) % 16] = l.p;
        } else if (k < 80 && nfreed) {
            uint64_t p = freed[rng_next(&r) % (uint64_t)nfreed];
            bool is_live = false, inside = false;
            for (int i = 0; i < nlive; i++) {
                is_live |= live[i].p == p;
                inside |= p > live[i].p && p < live[i].p + live[i].size;
            }
            if (!is_live) {
                int rc = alloc_free(a, p);
                if (inside)
                    assert_int_equal(rc, ALLOC_ERR_NOT_BASE);
                else if (rc != ALLOC_ERR_DOUBLE_FREE && rc != ALLOC_ERR_NOT_OWNED)
                    fail_msg("seed %llu op %d: second free gave %s", (unsigned long long)seed, op,
                             alloc_strerror(rc));
            }
        } else if (k < 85) {
            alloc_mem_backend_complete_events(m);
            nquar = 0;
        } else if (k < 88) {
            assert_int_equal(alloc_empty_cache(a), ALLOC_OK);
        } else if (k < 94 && nlive) {
            live_t *l = &live[rng_next(&r) % (uint64_t)nlive];
            uint64_t base;
            size_t bs;
            uint64_t q = l->p + rng_next(&r) % l->size;
            assert_int_equal(alloc_block_info(a, q, &base, &bs), ALLOC_OK);
            assert_true(base == l->p && bs == l->size);
        } else {
            alloc_stats_t st;
            alloc_get_stats(a, &st);
            int64_t sum = 0, req = 0;
            for (int i = 0; i < nlive; i++) {
                sum += (int64_t)live[i].size;
                req += (int64_t)live[i].req;
            }
            assert_int_equal(st.allocated_bytes.current, sum);
            assert_int_equal(st.requested_bytes.current, req);
            assert_int_equal(st.allocation.current, nlive);
            size_t fr, tot;
            alloc_mem_info(a, &fr, &tot);
            assert_true(fr <= tot);
        }
        alloc_mem_backend_counters(m, &mc);
        if (mc.synchronize != syncs) { /* the allocator synchronized: all events complete */
            syncs = mc.synchronize;
            nquar = 0;
        }
        if (alloc_check(a, err, sizeof(err)) != ALLOC_OK)
            fail_msg("seed %llu op %d (preset %s, conf '%s', vmm %d, events %d): %s",
                     (unsigned long long)seed, op, preset, conf, !mo.no_vmm, mo.track_events, err);
    }
    for (int i = 0; i < nlive; i++)
        assert_int_equal(alloc_free(a, live[i].p), ALLOC_OK);
    assert_int_equal(alloc_empty_cache(a), ALLOC_OK);
    assert_int_equal(alloc_check(a, err, sizeof(err)), ALLOC_OK);
    alloc_stats_t st;
    alloc_get_stats(a, &st);
    assert_int_equal(st.allocated_bytes.current, 0);
    assert_int_equal(st.active_bytes.current, 0);
    assert_int_equal(st.reserved_bytes.current, 0); /* everything given back */
    alloc_destroy(a);
    alloc_mem_backend_counters(m, &mc);
    assert_int_equal(mc.physical_in_use, 0); /* destroy released every handle and segment */
    alloc_mem_backend_destroy(m);
}

static void test_random_sequences(void **state)
{
    (void)state;
    const char *e = getenv("ALLOC_PROP_SEQS");
    int n = e ? atoi(e) : 5000;
    for (int s = 0; s < n; s++)
        run_sequence((uint64_t)s, 40 + s % 41);
}

/* Long sequences on a few seeds, to reach deep states (many holes, many streams' pools). */
static void test_long_sequences(void **state)
{
    (void)state;
    for (int s = 0; s < 8; s++)
        run_sequence(1000000 + (uint64_t)s, 3000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_sequences),
        cmocka_unit_test(test_long_sequences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
