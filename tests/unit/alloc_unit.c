/* alloc_unit.c — one test per allocator rule (alloc/alloc.h), on the in-memory backend.
 * Every test runs alloc_check() after its operations (via OK_CHECK). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include <cmocka.h>

#include "alloc/alloc.h"
#include "alloc/internal.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

typedef struct {
    alloc_mem_backend_t *m;
    alloc_t *a;
} fx_t;

static fx_t mk(const char *preset, const char *conf, alloc_mem_opts_t mo)
{
    fx_t f;
    alloc_config_t cfg;
    char err[512];
    assert_int_equal(alloc_config_preset(&cfg, preset ? preset : "gpumem"), ALLOC_OK);
    if (alloc_config_parse(&cfg, conf, err, sizeof(err)) != ALLOC_OK)
        fail_msg("config '%s': %s", conf, err);
    f.m = alloc_mem_backend_create(&mo);
    assert_non_null(f.m);
    assert_int_equal(alloc_create(alloc_mem_backend(f.m), &cfg, &f.a), ALLOC_OK);
    return f;
}

static void fx_done(fx_t *f)
{
    alloc_destroy(f->a);
    alloc_mem_backend_destroy(f->m);
}

static void check_ok(alloc_t *a, int line)
{
    char err[256];
    if (alloc_check(a, err, sizeof(err)) != ALLOC_OK)
        fail_msg("line %d: alloc_check: %s", line, err);
}
#define OK_CHECK(a) check_ok((a), __LINE__)

static uint64_t must_alloc(alloc_t *a, size_t size, uintptr_t stream)
{
    uint64_t p = 0;
    int rc = alloc_malloc(a, size, stream, &p);
    if (rc) fail_msg("alloc_malloc(%zu): %s", size, alloc_strerror(rc));
    assert_true(p != 0);
    OK_CHECK(a);
    return p;
}

static size_t block_size(alloc_t *a, uint64_t p)
{
    uint64_t base;
    size_t size;
    assert_int_equal(alloc_block_info(a, p, &base, &size), ALLOC_OK);
    assert_true(base == p);
    return size;
}

static alloc_stats_t stats(alloc_t *a)
{
    alloc_stats_t s;
    alloc_get_stats(a, &s);
    return s;
}

/* Sizes round up to 512 B; roundup_power2_divisions rounds to 1/N of the power-of-two interval. */
static void test_rounding(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL, (alloc_mem_opts_t){0});
    assert_int_equal(block_size(f.a, must_alloc(f.a, 1, 0)), 512);
    assert_int_equal(block_size(f.a, must_alloc(f.a, 513, 0)), 1024);
    assert_int_equal(block_size(f.a, must_alloc(f.a, 3 * MiB + 1, 0)), 3 * MiB + 512);
    uint64_t p0;
    assert_int_equal(alloc_malloc(f.a, 0, 0, &p0), ALLOC_OK);
    assert_true(p0 == 0);
    fx_done(&f);

    f = mk("gpumem", "roundup_power2_divisions:4", (alloc_mem_opts_t){0});
    /* 1.1 MiB lies in [1, 2) MiB: quarters of 1 MiB -> 1.25 MiB */
    assert_int_equal(block_size(f.a, must_alloc(f.a, 1153434, 0)), 1310720);
    /* a power of two stays */
    assert_int_equal(block_size(f.a, must_alloc(f.a, 4 * MiB, 0)), 4 * MiB);
    fx_done(&f);

    /* list form (PyTorch's reading): 1 division below 512 MiB, 2 in [512 MiB, 1 GiB), 8 above */
    f = mk("gpumem", "roundup_power2_divisions:[256:1,512:2,>:8]", (alloc_mem_opts_t){0});
    assert_int_equal(block_size(f.a, must_alloc(f.a, 100 * MiB + 1, 0)), 100 * MiB + 512);
    assert_int_equal(block_size(f.a, must_alloc(f.a, 300 * MiB, 0)), 300 * MiB);
    assert_int_equal(block_size(f.a, must_alloc(f.a, 600 * MiB, 0)), 768 * MiB);
    fx_done(&f);
}

static int count_seg(void *user, const alloc_walk_segment_t *seg, const alloc_walk_block_t *b,
                     size_t n)
{
    (void)b;
    (void)n;
    int *cnt = user;
    cnt[seg->small_pool ? 0 : 1]++;
    return 0;
}

/* Requests <= 1 MiB come from the small pool, larger ones from the large pool. */
static void test_small_large_pools(void **state)
{
    (void)state;
    fx_t f = mk("pytorch", NULL, (alloc_mem_opts_t){0});
    must_alloc(f.a, MiB, 0);
    int cnt[2] = {0, 0};
    alloc_walk(f.a, count_seg, cnt);
    assert_int_equal(cnt[0], 1);
    assert_int_equal(cnt[1], 0);
    must_alloc(f.a, MiB + 1, 0);
    cnt[0] = cnt[1] = 0;
    alloc_walk(f.a, count_seg, cnt);
    assert_int_equal(cnt[0], 1);
    assert_int_equal(cnt[1], 1);
    fx_done(&f);
}

/* Best fit: the smallest free block that fits, lowest address among equal sizes. */
static void test_best_fit(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL, (alloc_mem_opts_t){0});
    size_t sz[] = {16384, 4096, 8192, 8192, 4096};
    uint64_t hole[5], sep[6];
    for (int i = 0; i < 5; i++) {
        sep[i] = must_alloc(f.a, 512, 0);
        hole[i] = must_alloc(f.a, sz[i], 0);
    }
    sep[5] = must_alloc(f.a, 512, 0);
    (void)sep;
    for (int i = 0; i < 5; i++)
        assert_int_equal(alloc_free(f.a, hole[i]), ALLOC_OK);
    OK_CHECK(f.a);
    /* 6 KiB: the 8 KiB holes are the best fit; the lower one wins */
    assert_true(must_alloc(f.a, 6144, 0) == hole[2]);
    assert_true(must_alloc(f.a, 6144, 0) == hole[3]);
    assert_true(must_alloc(f.a, 4096, 0) == hole[1]);
    /* 2 KiB: the 2 KiB remainders of the 8 KiB holes fit exactly; the lower one wins */
    assert_true(must_alloc(f.a, 2048, 0) == hole[2] + 6144);
    assert_true(must_alloc(f.a, 3072, 0) == hole[4]); /* 4 KiB is the best fit left */
    fx_done(&f);
}

/* One class of many holes (equal sizes and sizes 512 B apart, all in the 8 KiB-wide class above
 * 4 MiB): its smallest in the slot, the others in the tree. Exact-size requests and frees in a
 * fixed pseudo-random order; each request must get the lowest free hole of its size, as a
 * list of the holes says, and alloc_check (the slot before the tree's first, the first cached)
 * must hold after every operation. */
static void test_class_slot(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL, (alloc_mem_opts_t){0});
    enum { NH = 24 };
    uint64_t hole[NH];
    size_t hsz[NH];
    bool taken[NH];
    for (int i = 0; i < NH; i++) {
        hsz[i] = ((size_t)4 << 20) + (size_t)512 * (size_t)((i * 7) % 4); /* 4 sizes, 6 each */
        must_alloc(f.a, (size_t)2 << 20, 0); /* a live separator in the same (large) pool */
        hole[i] = must_alloc(f.a, hsz[i], 0);
        taken[i] = false;
    }
    must_alloc(f.a, (size_t)2 << 20, 0);
    for (int i = NH - 1; i >= 0; i--) { /* highest first: each free becomes the class's smallest */
        assert_int_equal(alloc_free(f.a, hole[i]), ALLOC_OK);
        OK_CHECK(f.a);
    }
    uint64_t s = 7;
    for (int op = 0; op < 2000; op++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int i = (int)((s >> 33) % NH);
        if (taken[i]) {
            assert_int_equal(alloc_free(f.a, hole[i]), ALLOC_OK);
            taken[i] = false;
            OK_CHECK(f.a);
            continue;
        }
        int want = -1; /* the lowest free hole of this size */
        for (int j = 0; j < NH; j++)
            if (!taken[j] && hsz[j] == hsz[i] && (want < 0 || hole[j] < hole[want])) want = j;
        uint64_t p = must_alloc(f.a, hsz[i], 0);
        if (p != hole[want])
            fail_msg("op %d: %zu B at %#llx, the lowest free hole of that size is %#llx", op,
                     hsz[i], (unsigned long long)p, (unsigned long long)hole[want]);
        taken[want] = true;
    }
    fx_done(&f);
}

static int count_free(void *user, const alloc_walk_segment_t *seg, const alloc_walk_block_t *b,
                      size_t n)
{
    (void)seg;
    size_t *c = user;
    for (size_t i = 0; i < n; i++) {
        c[0] += b[i].state == ALLOC_BLOCK_FREE;
        c[1]++;
    }
    return 0;
}

/* Split leaves the remainder free; freeing neighbours coalesces them into one block. */
static void test_split_coalesce(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL, (alloc_mem_opts_t){0});
    uint64_t a = must_alloc(f.a, 4096, 0), b = must_alloc(f.a, 4096, 0),
             c = must_alloc(f.a, 4096, 0);
    assert_true(b == a + 4096 && c == b + 4096);
    size_t cnt[2] = {0, 0};
    alloc_walk(f.a, count_free, cnt);
    assert_int_equal(cnt[0], 1); /* the tail remainder of the mapped page */
    assert_int_equal(alloc_free(f.a, b), ALLOC_OK);
    OK_CHECK(f.a);
    assert_int_equal(alloc_free(f.a, a), ALLOC_OK);
    OK_CHECK(f.a);
    cnt[0] = cnt[1] = 0;
    alloc_walk(f.a, count_free, cnt);
    assert_int_equal(cnt[0], 2); /* a+b merged, tail */
    assert_int_equal(cnt[1], 3);
    assert_int_equal(alloc_free(f.a, c), ALLOC_OK);
    cnt[0] = cnt[1] = 0;
    alloc_walk(f.a, count_free, cnt);
    assert_int_equal(cnt[0], 1); /* everything is one free block again */
    assert_int_equal(cnt[1], 1);
    assert_true(must_alloc(f.a, 12288, 0) == a);
    fx_done(&f);
}

/* Classic segments: PyTorch's sizes (2 MiB small, 20 MiB for 1..10 MiB, else 2 MiB rounding). */
static void test_classic_segment_sizes(void **state)
{
    (void)state;
    fx_t f = mk("pytorch", NULL, (alloc_mem_opts_t){0});
    must_alloc(f.a, 1000, 0);
    assert_int_equal(stats(f.a).reserved_bytes.current, 2 * MiB);
    must_alloc(f.a, 5 * MiB, 0);
    assert_int_equal(stats(f.a).reserved_bytes.current, 22 * MiB);
    must_alloc(f.a, 16 * MiB, 0); /* more than the 15 MiB left in the 20 MiB segment */
    assert_int_equal(stats(f.a).reserved_bytes.current, 38 * MiB);
    assert_int_equal(stats(f.a).segment.current, 3);
    /* a second 5 MiB request fits the remainder of the 20 MiB segment: no new segment */
    must_alloc(f.a, 5 * MiB, 0);
    assert_int_equal(stats(f.a).segment.current, 3);
    fx_done(&f);
}

/* Classic segments never merge: two free neighbouring segments stay two blocks. */
static void test_no_merge_across_segments(void **state)
{
    (void)state;
    fx_t f = mk("pytorch", NULL, (alloc_mem_opts_t){0});
    uint64_t a = must_alloc(f.a, 12 * MiB, 0), b = must_alloc(f.a, 12 * MiB, 0);
    alloc_free(f.a, a);
    alloc_free(f.a, b);
    OK_CHECK(f.a);
    size_t cnt[2] = {0, 0};
    alloc_walk(f.a, count_free, cnt);
    assert_int_equal(cnt[0], 2);
    /* a 24 MiB request cannot use them: a third segment */
    must_alloc(f.a, 24 * MiB, 0);
    assert_int_equal(stats(f.a).segment.current, 3);
    fx_done(&f);
}

/* PyTorch rule: large-pool blocks split only when more than 1 MiB remains. */
static void test_pytorch_split_rule(void **state)
{
    (void)state;
    fx_t f = mk("pytorch", NULL, (alloc_mem_opts_t){0});
    uint64_t a = must_alloc(f.a, 12 * MiB, 0); /* a 12 MiB segment */
    alloc_free(f.a, a);
    /* 11.5 MiB leaves 0.5 MiB: no split, the whole 12 MiB block is handed out */
    uint64_t b = must_alloc(f.a, 11 * MiB + MiB / 2, 0);
    assert_true(b == a);
    assert_int_equal(block_size(f.a, b), 12 * MiB);
    alloc_free(f.a, b);
    /* 10 MiB leaves 2 MiB: split */
    assert_int_equal(block_size(f.a, must_alloc(f.a, 10 * MiB, 0)), 10 * MiB);
    fx_done(&f);

    /* gpumem splits any remainder >= 512 B */
    f = mk("gpumem", NULL, (alloc_mem_opts_t){0});
    a = must_alloc(f.a, 12 * MiB, 0);
    alloc_free(f.a, a);
    assert_int_equal(block_size(f.a, must_alloc(f.a, 11 * MiB + MiB / 2, 0)), 11 * MiB + MiB / 2);
    fx_done(&f);
}

/* max_split_size: oversize blocks are not split and not used for small or much smaller requests. */
static void test_max_split(void **state)
{
    (void)state;
    fx_t f = mk("pytorch", "max_split_size_mb:64", (alloc_mem_opts_t){0});
    uint64_t big = must_alloc(f.a, 100 * MiB, 0);
    alloc_free(f.a, big);
    uint64_t p = must_alloc(f.a, 30 * MiB, 0); /* below max_split: not from the 100 MiB block */
    assert_true(p != big);
    uint64_t q = must_alloc(f.a, 90 * MiB, 0); /* 100 < 90 + 20: reuses it, unsplit */
    assert_true(q == big);
    assert_int_equal(block_size(f.a, q), 100 * MiB);
    alloc_free(f.a, q);
    uint64_t r = must_alloc(f.a, 70 * MiB, 0); /* 100 >= 70 + 20: a new segment */
    assert_true(r != big);
    fx_done(&f);
}

/* Expandable: fully free pages are unmapped by empty_cache, and the hole is filled before the
 * range grows. */
static void test_expandable_holes(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL, (alloc_mem_opts_t){0});
    uint64_t a = must_alloc(f.a, 4 * MiB, 0), b = must_alloc(f.a, 4 * MiB, 0),
             c = must_alloc(f.a, 4 * MiB, 0);
    assert_int_equal(stats(f.a).reserved_bytes.current, 12 * MiB);
    alloc_free(f.a, b);
    assert_int_equal(alloc_empty_cache(f.a), ALLOC_OK);
    OK_CHECK(f.a);
    assert_int_equal(stats(f.a).reserved_bytes.current, 8 * MiB);
    assert_int_equal(stats(f.a).segment.current, 2); /* two mapped runs around the hole */
    uint64_t d = must_alloc(f.a, 3 * MiB, 0);
    assert_true(d == b); /* the hole, not the end of the range */
    assert_int_equal(stats(f.a).reserved_bytes.current, 12 * MiB);
    assert_int_equal(stats(f.a).segment.current, 1);
    alloc_free(f.a, a);
    alloc_free(f.a, c);
    alloc_free(f.a, d);
    alloc_empty_cache(f.a);
    OK_CHECK(f.a);
    assert_int_equal(stats(f.a).reserved_bytes.current, 0);
    assert_int_equal(stats(f.a).segment.current, 0);
    fx_done(&f);
}

/* A free block with part of a page mapped next to a hole grows into the hole: only the missing
 * pages are mapped. */
static void test_expandable_grow_merges_free_neighbour(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL, (alloc_mem_opts_t){0});
    uint64_t a = must_alloc(f.a, MiB + 512, 0); /* large pool, 2 MiB mapped */
    (void)a;
    assert_int_equal(stats(f.a).reserved_bytes.current, 2 * MiB);
    uint64_t b = must_alloc(f.a, 2 * MiB, 0); /* uses the free ~1 MiB tail plus one new page */
    assert_true(b == a + MiB + 512);
    assert_int_equal(stats(f.a).reserved_bytes.current, 4 * MiB);
    fx_done(&f);
}

/* Handle size is a knob: mapping happens in handle-sized steps. */
static void test_handle_size(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", "handle_size:20M", (alloc_mem_opts_t){0});
    must_alloc(f.a, 3 * MiB, 0);
    assert_int_equal(stats(f.a).reserved_bytes.current, 20 * MiB);
    assert_int_equal(stats(f.a).num_device_alloc, 1);
    fx_done(&f);
    f = mk("gpumem", NULL, (alloc_mem_opts_t){0});
    must_alloc(f.a, 20 * MiB, 0);
    assert_int_equal(stats(f.a).num_device_alloc, 10);
    fx_done(&f);
}

/* Backend calls are counted per call, and the counts add up to the total: mapping 20 MiB in
 * 2 MiB handles is one reserve, 10 creates, 10 maps and one set-access; empty_cache gives them
 * back with 10 unmaps and 10 releases. */
static void test_backend_call_counts(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL, (alloc_mem_opts_t){0});
    uint64_t p = must_alloc(f.a, 20 * MiB, 0);
    alloc_stats_t s = stats(f.a);
    assert_int_equal(s.backend_calls[ALLOC_BE_CALL_RESERVE], 1);
    assert_int_equal(s.backend_calls[ALLOC_BE_CALL_CREATE], 10);
    assert_int_equal(s.backend_calls[ALLOC_BE_CALL_MAP], 10);
    assert_int_equal(s.backend_calls[ALLOC_BE_CALL_SET_ACCESS], 1);
    assert_int_equal(s.backend_calls[ALLOC_BE_CALL_UNMAP], 0);
    assert_int_equal(alloc_free(f.a, p), ALLOC_OK);
    assert_int_equal(alloc_empty_cache(f.a), ALLOC_OK);
    s = stats(f.a);
    assert_int_equal(s.backend_calls[ALLOC_BE_CALL_UNMAP], 10);
    assert_int_equal(s.backend_calls[ALLOC_BE_CALL_RELEASE], 10);
    uint64_t sum = 0;
    for (int k = 0; k < ALLOC_BE_NCALLS; k++) {
        assert_non_null(alloc_be_call_name(k));
        sum += s.backend_calls[k];
    }
    assert_int_equal(sum, s.num_backend_calls);
    assert_null(alloc_be_call_name(ALLOC_BE_NCALLS));
    fx_done(&f);
}

/* The limit caps reserved memory; the failure carries forensics. */
static void test_limit_oom(void **state)
{
    (void)state;
    for (int classic = 0; classic < 2; classic++) {
        fx_t f = mk(classic ? "pytorch" : "gpumem", "limit:64M", (alloc_mem_opts_t){0});
        uint64_t p = must_alloc(f.a, 40 * MiB, 0);
        (void)p;
        uint64_t q = 1;
        assert_int_equal(alloc_malloc(f.a, 40 * MiB, 0, &q), ALLOC_ERR_OOM);
        assert_true(q == 0);
        OK_CHECK(f.a);
        alloc_oom_info_t o;
        assert_true(alloc_last_oom(f.a, &o));
        assert_int_equal(o.requested, 40 * MiB);
        assert_int_equal(o.limit, 64 * MiB);
        assert_int_equal(o.allocated, 40 * MiB);
        assert_true(o.reserved <= 64 * MiB);
        alloc_stats_t s = stats(f.a);
        assert_int_equal(s.num_ooms, 1);
        assert_int_equal(s.num_alloc_retries, 1);
        assert_true((size_t)s.reserved_bytes.peak <= 64 * MiB);
        /* 20 MiB still fits */
        must_alloc(f.a, 20 * MiB, 0);
        fx_done(&f);
    }
}

/* OOM path: cached memory is released and the allocation retried before failing. */
static void test_oom_frees_cache(void **state)
{
    (void)state;
    for (int classic = 0; classic < 2; classic++) {
        /* (release_before_grow would give the pages back before even trying: see below) */
        fx_t f = mk(classic ? "pytorch" : "gpumem", "release_before_grow:False",
                    (alloc_mem_opts_t){.capacity = 100 * MiB});
        uint64_t a = must_alloc(f.a, 30 * MiB, 0), b = must_alloc(f.a, 30 * MiB, 0);
        alloc_free(f.a, a);
        (void)b;
        /* 60 MiB: needs the cached 30 MiB given back (classic: segment freed; expandable: the
         * pages unmapped), then fits */
        uint64_t c = must_alloc(f.a, 60 * MiB, 0);
        (void)c;
        alloc_stats_t s = stats(f.a);
        assert_int_equal(s.num_alloc_retries, 1);
        assert_int_equal(s.num_ooms, 0);
        assert_true(s.num_device_free >= 1);
        uint64_t d;
        assert_int_equal(alloc_malloc(f.a, 30 * MiB, 0, &d), ALLOC_ERR_OOM);
        alloc_oom_info_t o;
        assert_true(alloc_last_oom(f.a, &o));
        assert_int_equal(o.device_total, 100 * MiB);
        OK_CHECK(f.a);
        fx_done(&f);
    }
}

/* release_before_grow: free pages of a hole are unmapped before new ones are mapped, so reserved
 * memory does not grow while cached memory could cover a request that fits no hole. */
static void test_release_before_grow(void **state)
{
    (void)state;
    for (int on = 0; on < 2; on++) {
        fx_t f = mk("gpumem", on ? NULL : "release_before_grow:False", (alloc_mem_opts_t){0});
        uint64_t a = must_alloc(f.a, 30 * MiB, 0), b = must_alloc(f.a, 30 * MiB, 0);
        alloc_free(f.a, a);
        must_alloc(f.a, 40 * MiB, 0); /* fits no hole */
        alloc_stats_t s = stats(f.a);
        if (on) {
            assert_int_equal(s.reserved_bytes.current, 70 * MiB);
            assert_int_equal(s.num_device_free, 15);
        } else {
            assert_int_equal(s.reserved_bytes.current, 100 * MiB);
            assert_int_equal(s.num_device_free, 0);
        }
        (void)b;
        fx_done(&f);
    }
}

/* release_before_grow never synchronizes (issue 41): on a backend with events, the pages of a
 * block freed with cudaFree semantics are unmapped once its fence has landed and a marker event
 * recorded on its stream has completed, both found by queries. Where work completes at once (the
 * first query), it gives back exactly what it gave back when it synchronized (the case above, on
 * a backend without events) and the backend sees no synchronize; events that stay pending
 * (manual completion) keep the block and its pages: the range grows instead, still without a
 * synchronize. */
static void test_release_before_grow_no_sync(void **state)
{
    (void)state;
    for (int lag = 0; lag < 2; lag++) {
        fx_t f = mk("gpumem", NULL,
                    (alloc_mem_opts_t){.track_events = true,
                                       .event_delay = lag ? ALLOC_MEM_EVENT_MANUAL : 0});
        uint64_t a = must_alloc(f.a, 30 * MiB, 0), b = must_alloc(f.a, 30 * MiB, 0);
        alloc_free(f.a, a);
        must_alloc(f.a, 40 * MiB, 0); /* fits no hole */
        alloc_stats_t s = stats(f.a);
        alloc_mem_counters_t c;
        alloc_mem_backend_counters(f.m, &c);
        assert_int_equal(c.synchronize, 0);
        assert_int_equal(s.num_syncs, 0);
        if (!lag) {
            assert_int_equal(s.reserved_bytes.current, 70 * MiB);
            assert_int_equal(s.num_device_free, 15);
        } else {
            assert_int_equal(s.reserved_bytes.current, 100 * MiB);
            assert_int_equal(s.num_device_free, 0);
        }
        OK_CHECK(f.a);
        (void)b;
        fx_done(&f);
    }
}

/* A pool's size-class index covers only the blocks the pool can hold (pool_t.cls): a stream that
 * held small blocks only has ~60 KiB of index, not ~560 KiB per pool, and the index grows
 * before the pool does, so a large free block lands in its own class and is found again. */
static void test_class_index_covers_pool(void **state)
{
    (void)state;
    for (int classic = 0; classic < 2; classic++) {
        fx_t f = mk(classic ? "pytorch" : "gpumem", NULL, (alloc_mem_opts_t){.capacity = 64 * GiB});
        uint64_t small = must_alloc(f.a, 4096, 7);
        const sstate_t *st = a_stream_find(f.a, 7);
        assert_non_null(st);
        /* a 2 MiB segment, or 2 MiB mapped: classes up to a_size_class(2 MiB), whole stretches */
        assert_true(st->pools[0].ncls > a_size_class(2 * MiB));
        assert_true(st->pools[0].ncls <= a_size_class(2 * MiB) + A_SUB);
        assert_int_equal(st->pools[1].ncls, 0); /* the large pool never grew */
        uint64_t big = must_alloc(f.a, 3 * GiB, 7);
        assert_true(st->pools[1].ncls > a_size_class(3 * GiB));
        assert_true(st->pools[1].ncls < A_NCLS);
        assert_int_equal(alloc_free(f.a, big), ALLOC_OK);
        OK_CHECK(f.a);
        int64_t reserved = stats(f.a).reserved_bytes.current;
        assert_int_equal(must_alloc(f.a, 3 * GiB, 7), big); /* from the cache, its class */
        assert_int_equal(stats(f.a).reserved_bytes.current, reserved);
        assert_int_equal(alloc_free(f.a, small), ALLOC_OK);
        OK_CHECK(f.a);
        fx_done(&f);
    }
}

/* A request larger than the device is an OOM at once: no address range is reserved for it and
 * no host arrays are sized to it (a 37 TiB request cost 150 MB of slot arrays and 12 s; found by
 * the alloc_fuzz campaign, its input in corpus/alloc/). Every preset, every pool. */
static void test_request_above_device_is_oom(void **state)
{
    (void)state;
    const char *presets[] = {"gpumem", "pytorch-expandable", "pytorch", "nocache"};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        fx_t f = mk(presets[i], NULL, (alloc_mem_opts_t){.capacity = 4 * GiB});
        uint64_t p = 0;
        assert_int_equal(alloc_malloc(f.a, 40911409114091ull, 0, &p), ALLOC_ERR_OOM);
        assert_int_equal(alloc_malloc(f.a, 4 * GiB + 2 * MiB, 3, &p), ALLOC_ERR_OOM);
        alloc_stats_t st = stats(f.a);
        assert_int_equal(st.backend_calls[ALLOC_BE_CALL_RESERVE], 0);
        assert_int_equal(st.reserved_bytes.current, 0);
        uint64_t ok = must_alloc(f.a, 3 * GiB, 0); /* what fits still does */
        assert_int_equal(alloc_free(f.a, ok), ALLOC_OK);
        OK_CHECK(f.a);
        fx_done(&f);
    }
}

/* A failing backend allocation takes the retry path and succeeds on the second try. */
static void test_backend_failure_retry(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL, (alloc_mem_opts_t){.fail_call = 2});
    must_alloc(f.a, 2 * MiB, 0);
    must_alloc(f.a, 2 * MiB, 0); /* second create fails once */
    assert_int_equal(stats(f.a).num_alloc_retries, 1);
    assert_int_equal(stats(f.a).num_ooms, 0);
    fx_done(&f);
}

/* Double free, foreign pointer and interior pointer are told apart; nothing crashes. */
static void test_double_free_and_foreign(void **state)
{
    (void)state;
    for (int classic = 0; classic < 2; classic++) {
        fx_t f = mk(classic ? "pytorch" : "gpumem", NULL, (alloc_mem_opts_t){0});
        uint64_t a = must_alloc(f.a, 8192, 0), b = must_alloc(f.a, 8192, 0);
        uint64_t base;
        size_t size;
        assert_int_equal(alloc_block_info(f.a, a + 100, &base, &size), ALLOC_OK);
        assert_true(base == a && size == 8192);
        assert_int_equal(alloc_free(f.a, a + 512), ALLOC_ERR_NOT_BASE);
        assert_int_equal(alloc_free(f.a, 0x1234), ALLOC_ERR_NOT_OWNED);
        assert_int_equal(alloc_block_info(f.a, 0x1234, &base, &size), ALLOC_ERR_NOT_OWNED);
        assert_int_equal(alloc_free(f.a, a), ALLOC_OK);
        assert_int_equal(alloc_free(f.a, a), ALLOC_ERR_DOUBLE_FREE);
        assert_int_equal(alloc_free_async(f.a, a, 0), ALLOC_ERR_DOUBLE_FREE);
        assert_int_equal(alloc_block_info(f.a, a, &base, &size), ALLOC_ERR_DOUBLE_FREE);
        assert_int_equal(alloc_free(f.a, 0), ALLOC_OK);
        OK_CHECK(f.a);
        assert_int_equal(stats(f.a).num_frees, 1);
        assert_int_equal(alloc_free(f.a, b), ALLOC_OK);
        fx_done(&f);
    }
}

/* cudaFree semantics: the block is not reused while an event on any seen stream is pending. */
static void test_free_waits_for_events(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL,
                (alloc_mem_opts_t){.track_events = true, .event_delay = ALLOC_MEM_EVENT_MANUAL});
    uint64_t a = must_alloc(f.a, 4096, 0); /* cudaMalloc: never given a stream */
    must_alloc(f.a, 4096, 2);              /* stream 2 is now known */
    assert_int_equal(alloc_free(f.a, a), ALLOC_OK);
    assert_int_equal(alloc_mem_backend_pending_events(f.m), 2); /* one per stream */
    assert_int_equal(stats(f.a).active_bytes.current, 8192);    /* pending counts as active */
    assert_int_equal(stats(f.a).allocated_bytes.current, 4096);
    uint64_t b = must_alloc(f.a, 4096, 0);
    assert_true(b != a); /* not reused while its events are pending */
    alloc_mem_backend_complete_events(f.m);
    uint64_t c = must_alloc(f.a, 4096, 0);
    assert_true(c == a); /* events done: reused */
    OK_CHECK(f.a);
    /* a stream the allocator was told to forget is no longer fenced */
    alloc_forget_stream(f.a, 2);
    alloc_free(f.a, c);
    assert_int_equal(alloc_mem_backend_pending_events(f.m), 1);
    alloc_mem_backend_complete_events(f.m);
    /* delayed mode: completes after N queries; the block comes back only then */
    fx_done(&f);
    f = mk("gpumem", NULL, (alloc_mem_opts_t){.track_events = true, .event_delay = 3});
    a = must_alloc(f.a, 4096, 0);
    alloc_free(f.a, a);
    int reused_at = -1;
    for (int i = 0; i < 6 && reused_at < 0; i++) {
        uint64_t p = must_alloc(f.a, 4096, 0);
        if (p == a) reused_at = i;
    }
    assert_int_equal(reused_at, 3);
    fx_done(&f);
}

/* The last block allocated is held outside the address map until the next allocation
 * (alloc_t.fresh): every look-up finds it there, a free takes it from there, and a PENDING
 * free of it stays findable (a second free is a double free) until the next allocation moves
 * it into the map. alloc_check counts it with the map's entries after every step. */
static void test_last_block_outside_map(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL,
                (alloc_mem_opts_t){.track_events = true, .event_delay = ALLOC_MEM_EVENT_MANUAL});
    uint64_t base;
    size_t size;
    uint64_t x = must_alloc(f.a, 8192, 0); /* the last block: not in the map */
    assert_int_equal(alloc_block_info(f.a, x, &base, &size), ALLOC_OK);
    assert_int_equal(alloc_block_info(f.a, x + 100, &base, &size), ALLOC_OK);
    assert_true(base == x && size == 8192);
    assert_int_equal(alloc_free(f.a, x + 512), ALLOC_ERR_NOT_BASE);
    assert_int_equal(alloc_free_async(f.a, x, 0), ALLOC_OK); /* never entered the map */
    OK_CHECK(f.a);
    assert_int_equal(alloc_free(f.a, x), ALLOC_ERR_DOUBLE_FREE);
    assert_int_equal(alloc_block_info(f.a, x, &base, &size), ALLOC_ERR_DOUBLE_FREE);
    /* a PENDING free of the last block: held back by stream 2's event */
    uint64_t y = must_alloc(f.a, 8192, 0);
    assert_int_equal(alloc_record_stream(f.a, y, 2), ALLOC_OK);
    assert_int_equal(alloc_free_async(f.a, y, 0), ALLOC_OK);
    OK_CHECK(f.a);
    assert_int_equal(alloc_free(f.a, y), ALLOC_ERR_DOUBLE_FREE);
    uint64_t z = must_alloc(f.a, 8192, 0); /* y, still PENDING, goes into the map */
    assert_true(z != y);
    assert_int_equal(alloc_free_async(f.a, y, 0), ALLOC_ERR_DOUBLE_FREE);
    alloc_mem_backend_complete_events(f.m);
    uint64_t w = must_alloc(f.a, 8192, 0); /* y's events done: it lands, leaves the map */
    assert_int_equal(alloc_free_async(f.a, z, 0), ALLOC_OK); /* z from the map */
    assert_int_equal(alloc_free_async(f.a, w, 0), ALLOC_OK); /* w the last block */
    OK_CHECK(f.a);
    assert_int_equal(stats(f.a).active_bytes.current, 0);
    fx_done(&f);
}

/* cudaFreeAsync: reusable at once on the same stream; on another stream only after an event. */
static void test_free_async(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL,
                (alloc_mem_opts_t){.track_events = true, .event_delay = ALLOC_MEM_EVENT_MANUAL});
    uint64_t a = must_alloc(f.a, 4096, 1);
    assert_int_equal(alloc_free_async(f.a, a, 1), ALLOC_OK);
    assert_int_equal(alloc_mem_backend_pending_events(f.m), 0);
    assert_true(must_alloc(f.a, 4096, 1) == a);
    uint64_t b = must_alloc(f.a, 4096, 1);
    assert_int_equal(alloc_free_async(f.a, b, 2), ALLOC_OK); /* freed on another stream */
    assert_int_equal(alloc_mem_backend_pending_events(f.m), 1);
    uint64_t c = must_alloc(f.a, 4096, 1);
    assert_true(c != b);
    alloc_mem_backend_complete_events(f.m);
    assert_true(must_alloc(f.a, 4096, 1) == b);
    fx_done(&f);
}

/* Per-stream pools: a block freed on stream 1 is never handed to stream 2. */
static void test_per_stream_pools(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL, (alloc_mem_opts_t){0});
    uint64_t a = must_alloc(f.a, 4096, 1);
    alloc_free_async(f.a, a, 1);
    uint64_t b = must_alloc(f.a, 4096, 2);
    assert_true(b != a);
    alloc_block_query_t q;
    assert_int_equal(alloc_block_query(f.a, b, &q), ALLOC_OK);
    assert_true(q.stream == 2 && q.requested == 4096 && q.alloc_id == 2);
    assert_true(must_alloc(f.a, 4096, 1) == a);
    fx_done(&f);
}

/* The _ex variants report what the plain calls do: id, rounded size, cache hit, freed block. */
static void test_ex_variants(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL, (alloc_mem_opts_t){0});
    uint64_t p, q;
    alloc_malloc_info_t mi;
    assert_int_equal(alloc_malloc_ex(f.a, 1000, 3, &p, &mi), ALLOC_OK);
    assert_true(mi.alloc_id == 1 && mi.size == 1024 && !mi.cache_hit);
    alloc_block_query_t fq;
    assert_int_equal(alloc_free_ex(f.a, p, true, 3, &fq), ALLOC_OK);
    assert_true(fq.base == p && fq.size == 1024 && fq.requested == 1000 && fq.stream == 3 &&
                fq.alloc_id == 1);
    assert_int_equal(alloc_malloc_ex(f.a, 1000, 3, &q, &mi), ALLOC_OK);
    assert_true(q == p && mi.alloc_id == 2 && mi.cache_hit);
    assert_int_equal(alloc_free_ex(f.a, q, false, 0, &fq), ALLOC_OK);
    assert_int_equal(alloc_free_ex(f.a, q, false, 0, &fq), ALLOC_ERR_DOUBLE_FREE);
    OK_CHECK(f.a);
    fx_done(&f);
}

/* Garbage collection: past threshold * limit, old cached memory is given back on a miss. */
static void test_garbage_collection(void **state)
{
    (void)state;
    for (int classic = 0; classic < 2; classic++) {
        fx_t f = mk(classic ? "pytorch" : "gpumem", "limit:100M,garbage_collection_threshold:0.5",
                    (alloc_mem_opts_t){0});
        uint64_t a = must_alloc(f.a, 40 * MiB, 0);
        uint64_t b = must_alloc(f.a, 20 * MiB, 0);
        alloc_free(f.a, a);
        assert_int_equal(stats(f.a).reserved_bytes.current, 60 * MiB);
        alloc_free(f.a, must_alloc(f.a, 10 * MiB, 0)); /* a cache hit: no GC */
        assert_int_equal(stats(f.a).num_gc_runs, 0);
        uint64_t c = must_alloc(f.a, 45 * MiB, 0); /* miss, reserved 60 > 50: GC first */
        (void)b;
        (void)c;
        assert_true((size_t)stats(f.a).reserved_bytes.current <= 65 * MiB + 2 * MiB);
        alloc_stats_t s = stats(f.a);
        assert_int_equal(s.num_gc_runs, 1);
        assert_true(s.num_device_free >= 1);
        OK_CHECK(f.a);
        fx_done(&f);
    }
}

/* Release threshold: cached memory above it is unmapped (oldest first). */
static void test_release_threshold(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", "release_threshold:8M", (alloc_mem_opts_t){0});
    uint64_t a = must_alloc(f.a, 64 * MiB, 0);
    uint64_t b = must_alloc(f.a, 2 * MiB, 0);
    alloc_free(f.a, a);
    OK_CHECK(f.a);
    alloc_stats_t s = stats(f.a);
    assert_int_equal(s.num_releases, 1);
    assert_true((size_t)s.reserved_bytes.current <= 2 * MiB + 8 * MiB);
    (void)b;
    fx_done(&f);
}

/* nocache: one backend allocation per request, freed at free. */
static void test_nocache(void **state)
{
    (void)state;
    fx_t f = mk("nocache", NULL, (alloc_mem_opts_t){0});
    uint64_t a = must_alloc(f.a, 1000, 0), b = must_alloc(f.a, 1000, 0);
    alloc_free(f.a, a);
    alloc_free(f.a, b);
    OK_CHECK(f.a);
    alloc_stats_t s = stats(f.a);
    assert_int_equal(s.num_device_alloc, 2);
    assert_int_equal(s.num_device_free, 2);
    assert_int_equal(s.reserved_bytes.current, 0);
    assert_int_equal(s.reserved_bytes.peak, 2048);
    fx_done(&f);
}

/* Stats: allocated/active/reserved/inactive-split with peaks; reset moves peaks to current. */
static void test_stats(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL, (alloc_mem_opts_t){0});
    uint64_t a = must_alloc(f.a, 1000, 0), b = must_alloc(f.a, 3000, 0);
    alloc_stats_t s = stats(f.a);
    assert_int_equal(s.allocated_bytes.current, 1024 + 3072);
    assert_int_equal(s.requested_bytes.current, 4000);
    assert_int_equal(s.allocation.current, 2);
    assert_int_equal(s.reserved_bytes.current, 2 * MiB);
    assert_int_equal(s.inactive_split.current, 1);
    assert_int_equal(s.inactive_split_bytes.current, 2 * MiB - 4096);
    assert_int_equal(s.cache_misses, 1);
    assert_int_equal(s.cache_hits, 1);
    alloc_free(f.a, a);
    alloc_free(f.a, b);
    s = stats(f.a);
    assert_int_equal(s.allocated_bytes.current, 0);
    assert_int_equal(s.allocated_bytes.peak, 4096);
    assert_int_equal(s.inactive_split.current, 0); /* one free block = the whole run */
    alloc_reset_peak_stats(f.a);
    assert_int_equal(stats(f.a).allocated_bytes.peak, 0);
    fx_done(&f);
}

/* The program's peaks (PyTorch's reset_peak_memory_stats under --allocator gpumem) restart at the
 * current values while the whole-run peaks, which the allocator's release decisions and the
 * recording read, stay; each stat's accumulated sums (PyTorch's "allocated" / "freed") add every
 * increase and decrease, allocated - freed = current (alloc_check checks it after every call). */
static void test_stats_program_peaks(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", NULL, (alloc_mem_opts_t){0});
    uint64_t a = must_alloc(f.a, 1000, 0), b = must_alloc(f.a, 3000, 0);
    alloc_free(f.a, b);
    alloc_reset_program_peaks(f.a, NULL, NULL);
    OK_CHECK(f.a);
    alloc_stats_t s = stats(f.a);
    assert_int_equal(s.allocated_bytes.peak, 4096);         /* the whole run's: kept */
    assert_int_equal(s.allocated_bytes.reset_peak, 1024);   /* the program's: now */
    assert_int_equal(s.requested_bytes.reset_peak, 1000);
    assert_int_equal(s.allocation.reset_peak, 1);
    assert_int_equal(s.reserved_bytes.reset_peak, s.reserved_bytes.current);
    uint64_t c = must_alloc(f.a, 2000, 0);
    s = stats(f.a);
    assert_int_equal(s.allocated_bytes.reset_peak, 1024 + 2048); /* the next top, from there */
    assert_int_equal(s.allocated_bytes.peak, 4096);
    assert_int_equal(s.allocated_bytes.allocated, 1024 + 3072 + 2048);
    assert_int_equal(alloc_stat_freed(&s.allocated_bytes), 3072);
    assert_int_equal(s.allocation.allocated, 3);
    assert_int_equal(alloc_stat_freed(&s.allocation), 1);
    assert_int_equal(s.requested_bytes.allocated, 1000 + 3000 + 2000);
    alloc_free(f.a, a);
    alloc_free(f.a, c);
    OK_CHECK(f.a);
    fx_done(&f);
}

/* Memory-info view: free = total - reserved + cached idle; total capped by the limit. */
static void test_mem_info(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", "limit:1G", (alloc_mem_opts_t){.capacity = 4 * GiB});
    size_t fr, tot;
    alloc_mem_info(f.a, &fr, &tot);
    assert_int_equal(tot, GiB);
    assert_int_equal(fr, GiB);
    uint64_t a = must_alloc(f.a, 100 * MiB, 0);
    alloc_mem_info(f.a, &fr, &tot);
    assert_int_equal(fr, GiB - 100 * MiB);
    alloc_free(f.a, a);
    alloc_mem_info(f.a, &fr, &tot);
    assert_int_equal(fr, GiB); /* cached memory counts as free */
    fx_done(&f);
}

typedef struct {
    int64_t mapped;
    int oom_calls;
    alloc_t *a;
    size_t walked;
    int locked_calls; /* on_oom_locked's, each before its on_oom */
} hook_t;

/* A callback that must run under the allocator's lock: a second thread asking for the stats
 * (which takes the lock) is still waiting 30 ms later. The prober is joined by probe_join. */
typedef struct {
    alloc_t *a;
    pthread_t th;
    atomic_int done;
    int held; /* 1: the prober was still waiting when the callback returned */
} probe_t;
static void *probe_stats(void *u)
{
    probe_t *p = u;
    alloc_stats_t st;
    alloc_get_stats(p->a, &st);
    atomic_store(&p->done, 1);
    return NULL;
}
static void probe_in_callback(probe_t *p)
{
    atomic_store(&p->done, 0);
    assert_int_equal(pthread_create(&p->th, NULL, probe_stats, p), 0);
    usleep(30000);
    p->held = !atomic_load(&p->done);
}
static void probe_join(probe_t *p)
{
    pthread_join(p->th, NULL);
    assert_true(p->held);
    assert_true(atomic_load(&p->done));
}
static probe_t oom_probe;
static void on_oom_locked(void *u, const alloc_oom_info_t *o)
{
    hook_t *h = u;
    assert_int_equal(h->oom_calls, h->locked_calls); /* before on_oom */
    h->locked_calls++;
    assert_int_equal(o->requested, 64 * MiB);
    probe_in_callback(&oom_probe);
}
static void fraction_set(void *u, size_t cap)
{
    *(size_t *)u = cap;
    probe_in_callback(&oom_probe);
}
static void emptying(void *u)
{
    (*(int *)u)++;
    probe_in_callback(&oom_probe);
}

static int walk_count(void *u, const alloc_walk_segment_t *seg, const alloc_walk_block_t *b,
                      size_t n)
{
    (void)seg;
    (void)b;
    *(size_t *)u += n;
    return 0;
}

static void on_map(void *u, uint64_t addr, size_t size, uintptr_t s)
{
    (void)addr;
    (void)s;
    ((hook_t *)u)->mapped += (int64_t)size;
}
static void on_unmap(void *u, uint64_t addr, size_t size, uintptr_t s)
{
    (void)addr;
    (void)s;
    ((hook_t *)u)->mapped -= (int64_t)size;
}
static void on_oom(void *u, const alloc_oom_info_t *o)
{
    hook_t *h = u;
    h->oom_calls++;
    assert_int_equal(o->requested, 64 * MiB);
    /* the hook runs without the allocator lock: a snapshot walk from it must not deadlock */
    assert_int_equal(alloc_walk(h->a, walk_count, &h->walked), ALLOC_OK);
}

/* Hooks see every map/unmap (their sum is reserved) and each OOM. */
static void test_hooks(void **state)
{
    (void)state;
    fx_t f = mk("gpumem", "limit:32M", (alloc_mem_opts_t){0});
    hook_t h = {0, 0, f.a, 0, 0};
    alloc_hooks_t hk = {
        .user = &h, .on_segment_map = on_map, .on_segment_unmap = on_unmap, .on_oom = on_oom,
        .on_oom_locked = on_oom_locked};
    oom_probe.a = f.a;
    alloc_set_hooks(f.a, &hk);
    uint64_t a = must_alloc(f.a, 10 * MiB, 0);
    must_alloc(f.a, 3 * MiB, 0);
    alloc_free(f.a, a);
    alloc_empty_cache(f.a);
    assert_int_equal(h.mapped, stats(f.a).reserved_bytes.current);
    uint64_t x;
    assert_int_equal(alloc_malloc(f.a, 64 * MiB, 0, &x), ALLOC_ERR_OOM);
    assert_int_equal(h.oom_calls, 1);
    assert_true(h.walked >= 1);
    /* the recorder's events are written from these, under the lock: in the order the allocator
     * made them among other threads' calls (tests/integration/replay_threads.sh) */
    assert_int_equal(h.locked_calls, 1);
    probe_join(&oom_probe);
    size_t cap = 0, got = 0;
    assert_int_equal(alloc_set_memory_fraction_notify(f.a, 0.5, &got, fraction_set, &cap), ALLOC_OK);
    assert_true(cap > 0);
    assert_int_equal(cap, got);
    probe_join(&oom_probe);
    int emptied = 0;
    assert_int_equal(alloc_empty_cache_notify(f.a, emptying, &emptied), ALLOC_OK);
    assert_int_equal(emptied, 1);
    probe_join(&oom_probe);
    fx_done(&f);
}

/* Config: valid strings apply, the bad key / bad value error is one line naming them. */
static void test_config(void **state)
{
    (void)state;
    alloc_config_t c;
    char err[512];
    alloc_config_default(&c);
    assert_int_equal(alloc_config_parse(&c,
                                        "expandable_segments:False,max_split_size_mb:256,"
                                        "garbage_collection_threshold:0.8,"
                                        "roundup_power2_divisions:4,limit:24G,"
                                        "release_threshold:1G,handle_size:20MiB",
                                        err, sizeof(err)),
                     ALLOC_OK);
    assert_false(c.expandable_segments);
    assert_int_equal(c.max_split_size, 256 * MiB);
    assert_true(c.gc_threshold > 0.79 && c.gc_threshold < 0.81);
    assert_int_equal(c.rp2_div[25], 4);
    assert_int_equal(c.limit, 24 * GiB);
    assert_int_equal(c.release_threshold, GiB);
    assert_int_equal(c.handle_size, 20 * MiB);

    alloc_config_t before = c;
    assert_int_equal(alloc_config_parse(&c, "bogus_key:1", err, sizeof(err)), ALLOC_ERR_CONFIG);
    assert_non_null(strstr(err, "bogus_key"));
    assert_non_null(strstr(err, "expandable_segments"));
    assert_non_null(strstr(err, "garbage_collection_threshold"));
    assert_null(strchr(err, '\n'));
    assert_memory_equal(&c, &before, sizeof(c)); /* unchanged on error */

    const char *bad[][2] = {
        {"expandable_segments:maybe", "True, False"},
        {"max_split_size_mb:10", "at least 20"},
        {"max_non_split_rounding_mb:19", "at least 20"},
        {"large_segment_size_mb:10", "greater than 10"},
        {"garbage_collection_threshold:1.5", "between 0 and 1"},
        {"roundup_power2_divisions:3", "power of two"},
        {"roundup_power2_divisions:0", "power of two"},
        {"limit:lots", "byte size"},
        {"backend:Native", "native, cudaMallocAsync"},
        {"preset:tensorflow", "pytorch-expandable"},
        {"expandable_segments", "no value"},
        {"expandable_segments:true", "True, False"},
        {"max_split_size_mb:inf", "leave the key out"},
        {"garbage_collection_threshold:0", "between 0 and 1"},
        {"pinned_num_register_threads:256", "up to 128"},
        {"expandable_segments_reserve:10", "unknown key"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(alloc_config_parse(&c, bad[i][0], err, sizeof(err)), ALLOC_ERR_CONFIG);
        if (!strstr(err, bad[i][1]))
            fail_msg("'%s' gave '%s', expected it to mention '%s'", bad[i][0], err, bad[i][1]);
    }
    /* format -> parse round-trips */
    const char *confs[] = {"preset:pytorch,roundup_power2_divisions:[256:1,512:2,>:8]",
                           "preset:pytorch-expandable,max_split_size_mb:512,limit:3G",
                           "preset:gpumem,per_stream_pools:False,release_threshold:64M",
                           "preset:nocache"};
    for (size_t i = 0; i < 4; i++) {
        alloc_config_t x, y;
        alloc_config_default(&x);
        assert_int_equal(alloc_config_parse(&x, confs[i], err, sizeof(err)), ALLOC_OK);
        char buf[1024];
        alloc_config_format(&x, buf, sizeof(buf));
        alloc_config_default(&y);
        if (alloc_config_parse(&y, buf, err, sizeof(err)))
            fail_msg("format gave '%s' which does not parse: %s", buf, err);
        assert_memory_equal(&x, &y, sizeof(x));
    }
    size_t sz;
    assert_int_equal(alloc_parse_size("24G", &sz), ALLOC_OK);
    assert_int_equal(sz, 24 * GiB);
    assert_int_equal(alloc_parse_size("512KiB", &sz), ALLOC_OK);
    assert_int_equal(sz, 512 * 1024);
    assert_int_equal(alloc_parse_size("12", &sz), ALLOC_OK);
    assert_int_equal(sz, 12);
    assert_int_equal(alloc_parse_size("-1G", &sz), ALLOC_ERR_CONFIG);
    assert_int_equal(alloc_parse_size("1X", &sz), ALLOC_ERR_CONFIG);
    /* a fraction only with a unit, in whole bytes; no space, sign or exponent anywhere */
    assert_int_equal(alloc_parse_size("1.5G", &sz), ALLOC_OK);
    assert_int_equal(sz, 3 * GiB / 2);
    assert_int_equal(alloc_parse_size("0.1K", &sz), ALLOC_OK);
    assert_int_equal(sz, 102);
    static const char *const refused[] = {" 16", "16 ", "1.5", "0.9", "1.5B", ".5G", "1.G", "+16", "1e3", "1.5e3G",
                                          "18446744073709551616", "16777216T", ""};
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++)
        if (alloc_parse_size(refused[k], &sz) != ALLOC_ERR_CONFIG) fail_msg("'%s' was read as %zu", refused[k], sz);
}

/* Trace text format: all event kinds parse; errors name the line. */
static void test_trace_parse(void **state)
{
    (void)state;
    const char *t = "# comment\n a 1 4096\na 2 100 7 # on stream 7\n\nf 1\nfa 2 7\ne\n";
    alloc_trace_event_t *ev;
    size_t n;
    char err[256];
    assert_int_equal(alloc_trace_parse(t, strlen(t), &ev, &n, err, sizeof(err)), ALLOC_OK);
    assert_int_equal(n, 5);
    assert_int_equal(ev[0].kind, ALLOC_TR_ALLOC);
    assert_int_equal(ev[0].size, 4096);
    assert_int_equal(ev[1].stream, 7);
    assert_int_equal(ev[2].kind, ALLOC_TR_FREE);
    assert_int_equal(ev[3].kind, ALLOC_TR_FREE_ASYNC);
    assert_int_equal(ev[3].stream, 7);
    assert_int_equal(ev[4].kind, ALLOC_TR_EMPTY_CACHE);
    free(ev);
    const char *bad = "a 1 10\nx 3\n";
    assert_int_equal(alloc_trace_parse(bad, strlen(bad), &ev, &n, err, sizeof(err)),
                     ALLOC_ERR_INVALID);
    assert_non_null(strstr(err, "line 2"));
    const char *bad2 = "a 1\n";
    assert_int_equal(alloc_trace_parse(bad2, strlen(bad2), &ev, &n, err, sizeof(err)),
                     ALLOC_ERR_INVALID);
    assert_non_null(strstr(err, "line 1"));
}

/* `cb`/`ce` bound a capture (gpumem's): between them the replay, as the live allocator, releases
 * nothing freed since its last release (no event may be queried, no device synchronized), so a
 * capture growing its pool maps new memory beside the default pool's cache; without the lines
 * the replay gives that cache back first and reserves less than the run did. Both lines
 * round-trip through the text format; a pool key of 0 is refused. */
static void test_replay_capture(void **state)
{
    (void)state;
    const char *cap = "a 1 8388608 1\nf 1\ncb 4294967298\nap 2 8388608 4294967298\nce 4294967298\n";
    const char *free_run = "a 1 8388608 1\nf 1\nap 2 8388608 4294967298\n";
    alloc_trace_event_t *ev, *fv, *back;
    size_t n, nf, nb;
    char err[256];
    assert_int_equal(alloc_trace_parse(cap, strlen(cap), &ev, &n, err, sizeof(err)), ALLOC_OK);
    assert_int_equal(alloc_trace_parse(free_run, strlen(free_run), &fv, &nf, err, sizeof(err)), ALLOC_OK);
    assert_int_equal(n, 5);
    assert_true(ev[2].kind == ALLOC_TR_CAPTURE_BEGIN && ev[2].stream == 4294967298ull);
    assert_true(ev[4].kind == ALLOC_TR_CAPTURE_END && ev[4].stream == 4294967298ull);
    const char *path = "/tmp/gpumem_unit_capture.trace";
    assert_int_equal(alloc_trace_write(path, ev, n), ALLOC_OK);
    assert_int_equal(alloc_trace_load(path, &back, &nb, err, sizeof(err)), ALLOC_OK);
    unlink(path);
    assert_int_equal(nb, n);
    for (size_t i = 0; i < n; i++) assert_true(back[i].kind == ev[i].kind && back[i].stream == ev[i].stream);
    free(back);
    alloc_config_t c;
    alloc_config_default(&c);
    alloc_replay_result_t rc = {0}, rf = {0};
    assert_int_equal(alloc_replay(&c, NULL, ev, n, &rc, err, sizeof(err)), ALLOC_OK);
    assert_int_equal(alloc_replay(&c, NULL, fv, nf, &rf, err, sizeof(err)), ALLOC_OK);
    assert_int_equal(rc.peak_reserved, (size_t)16 << 20); /* the cache kept through the capture */
    assert_int_equal(rf.peak_reserved, (size_t)8 << 20);  /* given back before the pool grew */
    free(ev), free(fv);
    const char *zero_cb = "cb 0\n", *zero_ce = "ce 0\n";
    assert_int_equal(alloc_trace_parse(zero_cb, strlen(zero_cb), &ev, &n, err, sizeof(err)), ALLOC_ERR_INVALID);
    assert_int_equal(alloc_trace_parse(zero_ce, strlen(zero_ce), &ev, &n, err, sizeof(err)), ALLOC_ERR_INVALID);
}

/* A private pool's allocation (`ap`, a CUDA graph's) is served from that pool only: under every
 * preset, one pool per stream or one for all, a block freed in it is never handed to a request
 * of the default pool or of another private pool, and a default pool's free block never to it;
 * the same trace with `a` lines reuses the block (the test can fail). `ap` round-trips through
 * the text format; a pool key of 0 is refused. */
static void test_replay_private_pool(void **state)
{
    (void)state;
    const char *priv = "ap 1 4194304 4294967297\nf 1\na 2 4194304 1\nap 3 4194304 8589934593\n"
                       "f 2\nap 4 4194304 4294967297\n";
    const char *shared = "a 1 4194304 1\nf 1\na 2 4194304 1\na 3 4194304 1\nf 2\na 4 4194304 1\n";
    alloc_trace_event_t *ev, *sv, *back;
    size_t n, ns, nb;
    char err[256];
    assert_int_equal(alloc_trace_parse(priv, strlen(priv), &ev, &n, err, sizeof(err)), ALLOC_OK);
    assert_int_equal(alloc_trace_parse(shared, strlen(shared), &sv, &ns, err, sizeof(err)), ALLOC_OK);
    assert_int_equal(ev[0].kind, ALLOC_TR_ALLOC_PRIVATE);
    assert_int_equal(ev[0].stream, 4294967297ull);
    const char *path = "/tmp/gpumem_unit_private.trace";
    assert_int_equal(alloc_trace_write(path, ev, n), ALLOC_OK);
    assert_int_equal(alloc_trace_load(path, &back, &nb, err, sizeof(err)), ALLOC_OK);
    unlink(path);
    assert_int_equal(nb, n);
    for (size_t i = 0; i < n; i++)
        assert_true(back[i].kind == ev[i].kind && back[i].id == ev[i].id && back[i].size == ev[i].size &&
                    back[i].stream == ev[i].stream);
    free(back);
    const char *confs[] = {"preset:pytorch", "preset:pytorch,per_stream_pools:False", "preset:gpumem",
                           "preset:gpumem,per_stream_pools:False", "preset:pytorch-expandable"};
    for (size_t i = 0; i < sizeof(confs) / sizeof(*confs); i++) {
        alloc_config_t c;
        alloc_config_default(&c);
        assert_int_equal(alloc_config_parse(&c, confs[i], err, sizeof(err)), ALLOC_OK);
        alloc_replay_result_t rp = {0}, rs = {0}, r1 = {0};
        assert_int_equal(alloc_replay(&c, NULL, ev, n, &rp, err, sizeof(err)), ALLOC_OK);
        assert_int_equal(alloc_replay(&c, NULL, sv, ns, &rs, err, sizeof(err)), ALLOC_OK);
        assert_int_equal(alloc_replay(&c, NULL, sv, 1, &r1, err, sizeof(err)), ALLOC_OK); /* one block's */
        assert_int_equal(rp.bad_frees, 0);
        /* private: pool 1's block, the default pool's and pool 2's each reserved apart (pool 1's
         * reused by its own last request); shared: the freed block serves the next request */
        assert_true(rp.peak_reserved >= 3 * r1.peak_reserved);
        assert_true(rs.peak_reserved < 3 * r1.peak_reserved);
    }
    free(ev), free(sv);
    const char *zero = "ap 1 4096 0\n";
    assert_int_equal(alloc_trace_parse(zero, strlen(zero), &ev, &n, err, sizeof(err)), ALLOC_ERR_INVALID);
    const char *zero_pr = "pr 0\n";
    assert_int_equal(alloc_trace_parse(zero_pr, strlen(zero_pr), &ev, &n, err, sizeof(err)), ALLOC_ERR_INVALID);
    /* `pr` ends the pool: its memory goes back (a block freed before it at once, one live at it
     * once freed and the cache emptied), so the default pool's later request does not sit beside
     * it; without the line the pool keeps it to the end */
    const char *ended = "ap 1 4194304 4294967297\nap 2 4194304 4294967297\nf 1\npr 4294967297\nf 2\ne\n"
                        "a 3 8388608 1\nf 3\n";
    const char *kept = "ap 1 4194304 4294967297\nap 2 4194304 4294967297\nf 1\nf 2\ne\na 3 8388608 1\nf 3\n";
    assert_int_equal(alloc_trace_parse(ended, strlen(ended), &ev, &n, err, sizeof(err)), ALLOC_OK);
    assert_int_equal(alloc_trace_parse(kept, strlen(kept), &sv, &ns, err, sizeof(err)), ALLOC_OK);
    assert_int_equal(ev[3].kind, ALLOC_TR_POOL_RELEASE);
    assert_int_equal(ev[3].stream, 4294967297ull);
    assert_int_equal(alloc_trace_write(path, ev, n), ALLOC_OK);
    assert_int_equal(alloc_trace_load(path, &back, &nb, err, sizeof(err)), ALLOC_OK);
    unlink(path);
    assert_int_equal(nb, n);
    assert_true(back[3].kind == ALLOC_TR_POOL_RELEASE && back[3].stream == ev[3].stream);
    free(back);
    for (size_t i = 0; i < sizeof(confs) / sizeof(*confs); i++) {
        alloc_config_t c;
        alloc_config_default(&c);
        assert_int_equal(alloc_config_parse(&c, confs[i], err, sizeof(err)), ALLOC_OK);
        alloc_replay_result_t re = {0}, rk = {0}, rpool = {0}, rlater = {0};
        assert_int_equal(alloc_replay(&c, NULL, ev, n, &re, err, sizeof(err)), ALLOC_OK);
        assert_int_equal(alloc_replay(&c, NULL, sv, ns, &rk, err, sizeof(err)), ALLOC_OK);
        assert_int_equal(alloc_replay(&c, NULL, ev, 6, &rpool, err, sizeof(err)), ALLOC_OK);
        assert_int_equal(alloc_replay(&c, NULL, ev + 6, n - 6, &rlater, err, sizeof(err)), ALLOC_OK);
        assert_int_equal(re.bad_frees, 0);
        assert_true(re.peak_reserved < rk.peak_reserved);
        /* the pool's or the later request's, never both */
        assert_int_equal(re.peak_reserved,
                         rpool.peak_reserved > rlater.peak_reserved ? rpool.peak_reserved : rlater.peak_reserved);
    }
    free(ev), free(sv);
}

/* Replay is deterministic and reports the OOM position under a limit. */
static void test_replay(void **state)
{
    (void)state;
    alloc_trace_event_t *ev;
    size_t n;
    assert_int_equal(alloc_trace_synth("jitter", 6, 7, &ev, &n), ALLOC_OK);
    alloc_config_t c;
    alloc_replay_result_t r1 = {0}, r2 = {0};
    char err[256];
    for (int p = 0; alloc_preset_names[p]; p++) {
        alloc_config_preset(&c, alloc_preset_names[p]);
        assert_int_equal(alloc_replay(&c, NULL, ev, n, &r1, err, sizeof(err)), ALLOC_OK);
        assert_int_equal(alloc_replay(&c, NULL, ev, n, &r2, err, sizeof(err)), ALLOC_OK);
        assert_int_equal(r1.events, n);
        assert_int_equal(r1.peak_reserved, r2.peak_reserved);
        assert_int_equal(r1.driver_calls, r2.driver_calls);
        assert_int_equal(r1.bad_frees, 0);
        assert_true(r1.peak_requested <= r1.peak_reserved);
        assert_true(r1.utilization > 0.5 && r1.utilization <= 1.0);
        assert_int_equal(r1.oom_index, -1);
    }
    alloc_config_preset(&c, "gpumem");
    c.limit = r1.peak_requested / 2;
    assert_int_equal(alloc_replay(&c, NULL, ev, n, &r1, err, sizeof(err)), ALLOC_OK);
    assert_true(r1.oom_index > 0);
    assert_int_equal(r1.events, (uint64_t)r1.oom_index + 1);
    assert_int_equal(ev[r1.oom_index].kind, ALLOC_TR_ALLOC);
    assert_int_equal(r1.oom.limit, c.limit);
    assert_true(r1.oom.reserved <= c.limit);
    free(ev);
}

static void replay_same(const alloc_replay_result_t *a, const alloc_replay_result_t *b)
{
    assert_int_equal(a->events, b->events);
    assert_int_equal(a->allocs, b->allocs);
    assert_int_equal(a->frees, b->frees);
    assert_int_equal(a->bad_frees, b->bad_frees);
    assert_int_equal(a->peak_requested, b->peak_requested);
    assert_int_equal(a->peak_allocated, b->peak_allocated);
    assert_int_equal(a->peak_reserved, b->peak_reserved);
    assert_int_equal(a->driver_calls, b->driver_calls);
    assert_int_equal(a->cache_hits, b->cache_hits);
    assert_int_equal(a->cache_misses, b->cache_misses);
    assert_int_equal(a->oom_index, b->oom_index);
    assert_int_equal(a->num_ooms, b->num_ooms);
    assert_int_equal(a->other_allocs, b->other_allocs);
    assert_int_equal(a->peak_other, b->peak_other);
    assert_int_equal(a->held_frees, b->held_frees);
    assert_memory_equal(&a->backend, &b->backend, sizeof(a->backend));
}

/* Test traces k = 0..2: synthetic ones, one with ids allocated again while live, stray frees, rs
 * and ax lines (every 7th event's id repeated, every 11th a free of an id never allocated), one
 * with fc; k = 3: an id's fc before its next free, which is then not held. */
static void synth_test_trace(int k, alloc_trace_event_t **evp, size_t *np)
{
    alloc_trace_event_t *ev;
    size_t n;
    if (k == 3) { /* an id freed with an fc, allocated again, then freed without one: not held */
        const char *t = "a 1 30000000\nf 1\na 2 30000000\nfc 1\na 1 30000000\nf 1\na 3 30000000\n";
        char err[256];
        assert_int_equal(alloc_trace_parse(t, strlen(t), evp, np, err, sizeof(err)), ALLOC_OK);
        return;
    }
    assert_int_equal(alloc_trace_synth(k == 2 ? "fixed" : "jitter", 4, 3, &ev, &n), ALLOC_OK);
    if (k == 1) {
        for (size_t i = 7; i < n; i += 7)
            if (ev[i].kind == ALLOC_TR_ALLOC && ev[i - 1].kind == ALLOC_TR_ALLOC) ev[i].id = ev[i - 1].id;
        for (size_t i = 11; i < n; i += 11)
            if (ev[i].kind == ALLOC_TR_FREE) ev[i].id = UINT64_MAX - i;
        for (size_t i = 5; i < n; i += 13)
            if (ev[i].kind == ALLOC_TR_ALLOC) ev[i].kind = ALLOC_TR_ALLOC_OTHER;
    }
    if (k == 2) { /* each third free waits for an fc two events later; each fifth has rs */
        alloc_trace_event_t *m = malloc(2 * n * sizeof(*m));
        assert_non_null(m);
        size_t o = 0;
        uint64_t pend = 0;
        int late = 0;
        for (size_t i = 0; i < n; i++) {
            m[o++] = ev[i];
            if (late && --late == 0) m[o++] = (alloc_trace_event_t){.id = pend, .kind = ALLOC_TR_FREE_DONE};
            if (ev[i].kind == ALLOC_TR_ALLOC && i % 5 == 0)
                m[o++] = (alloc_trace_event_t){.id = ev[i].id, .stream = 7, .kind = ALLOC_TR_RECORD_STREAM};
            if (ev[i].kind == ALLOC_TR_FREE && i % 3 == 0 && !late) pend = ev[i].id, late = 2;
        }
        free(ev);
        ev = m;
        n = o;
    }
    *evp = ev, *np = n;
}

/* alloc_trace_slots: as many slots as allocations live at once, an id's slot from its allocation
 * to its free, and nothing for a free of an id not live; a replay with the slots is the replay
 * with the id table, also where ids repeat while live, frees name no live id, an allocation fails
 * and later ones go on (continue_after_oom), and frees wait for record_stream or fc lines. */
static void test_replay_slots(void **state)
{
    (void)state;
    const char *t = "a 10 1000\na 20 3000000\nf 10\na 30 500\nf 99\nf 20\nf 30\na 30 700\n"
                    "a 30 900\nf 30\nf 30\n";
    alloc_trace_event_t *ev;
    size_t n;
    char err[256];
    assert_int_equal(alloc_trace_parse(t, strlen(t), &ev, &n, err, sizeof(err)), ALLOC_OK);
    uint32_t *slots, ns;
    assert_int_equal(alloc_trace_slots(ev, n, &slots, &ns), ALLOC_OK);
    uint32_t want[] = {0, 1, 0, 0, ALLOC_NO_SLOT, 1, 0, 0, 0, 0, ALLOC_NO_SLOT};
    assert_int_equal(ns, 2);
    assert_int_equal(n, sizeof(want) / sizeof(*want));
    for (size_t i = 0; i < n; i++) assert_int_equal(slots[i], want[i]);
    free(slots);
    free(ev);

    for (int k = 0; k < 3; k++) {
        synth_test_trace(k, &ev, &n);
        assert_int_equal(alloc_trace_slots(ev, n, &slots, &ns), ALLOC_OK);
        for (int p = 0; alloc_preset_names[p]; p++) {
            alloc_config_t c;
            alloc_config_preset(&c, alloc_preset_names[p]);
            alloc_replay_result_t r1, r2;
            alloc_replay_opts_t o = {.continue_after_oom = true};
            assert_int_equal(alloc_replay(&c, &o, ev, n, &r1, err, sizeof(err)), ALLOC_OK);
            o.slots = slots, o.nslots = ns;
            assert_int_equal(alloc_replay(&c, &o, ev, n, &r2, err, sizeof(err)), ALLOC_OK);
            replay_same(&r1, &r2);
            /* under a limit: allocations fail, the trace goes on */
            c.limit = r1.peak_reserved / 2;
            o.slots = NULL;
            assert_int_equal(alloc_replay(&c, &o, ev, n, &r1, err, sizeof(err)), ALLOC_OK);
            o.slots = slots;
            assert_int_equal(alloc_replay(&c, &o, ev, n, &r2, err, sizeof(err)), ALLOC_OK);
            replay_same(&r1, &r2);
            if (k == 1) assert_true(r1.bad_frees > 0);
            if (p == 0) assert_true(r1.num_ooms > 0);
        }
        free(slots);
        free(ev);
    }
}

typedef struct bar_seen {
    size_t bar, calls, last;
} bar_seen;

static bool below_bar(void *user, size_t peak_reserved)
{
    bar_seen *b = user;
    b->calls++;
    assert_true(peak_reserved >= b->last); /* a peak so far never drops */
    b->last = peak_reserved;
    return peak_reserved < b->bar;
}

/* alloc_replay_begin / feed / end: the replay of a trace fed in pieces of any size, with its fc
 * events given up front, is alloc_replay's of the whole (a free is held by an fc after it in the
 * whole trace, not in its piece): on every test trace, preset, with and
 * without slots, going on after OOMs or stopping at the first (under a limit), in pieces of 1, 3,
 * 64 events or all at once. */
static void test_replay_pieces(void **state)
{
    (void)state;
    char err[256];
    const size_t pieces[] = {1, 3, 64, SIZE_MAX};
    for (int k = 0; k < 4; k++) {
        alloc_trace_event_t *ev;
        size_t n;
        synth_test_trace(k, &ev, &n);
        uint32_t *slots, ns;
        assert_int_equal(alloc_trace_slots(ev, n, &slots, &ns), ALLOC_OK);
        alloc_trace_fc_t *fc = malloc((n + 1) * sizeof(*fc));
        assert_non_null(fc);
        size_t nfc = 0;
        for (size_t i = n; i-- > 0;) /* any order: backwards */
            if (ev[i].kind == ALLOC_TR_FREE_DONE) fc[nfc++] = (alloc_trace_fc_t){ev[i].id, i};
        assert_true(k < 2 || nfc > 0);
        for (int p = 0; alloc_preset_names[p]; p++)
            for (int lim = 0; lim < 2; lim++)
                for (int sl = 0; sl < 2; sl++)
                    for (size_t q = 0; q < sizeof(pieces) / sizeof(*pieces); q++) {
                        alloc_config_t c;
                        alloc_config_preset(&c, alloc_preset_names[p]);
                        alloc_replay_result_t whole, fed;
                        alloc_replay_opts_t o = {.continue_after_oom = k == 1 || k == 2, .slots = sl ? slots : NULL,
                                                 .nslots = sl ? ns : 0};
                        assert_int_equal(alloc_replay(&c, &o, ev, n, &whole, err, sizeof(err)), ALLOC_OK);
                        if (lim) { /* allocations fail: the trace goes on, or stops at the first */
                            c.limit = whole.peak_reserved / 2;
                            assert_int_equal(alloc_replay(&c, &o, ev, n, &whole, err, sizeof(err)), ALLOC_OK);
                            if (p == 0 && k < 3) assert_true(whole.oom_index >= 0);
                        }
                        alloc_replay_run_t *run;
                        assert_int_equal(alloc_replay_begin(&c, &o, fc, nfc, &run, err, sizeof(err)), ALLOC_OK);
                        for (size_t at = 0; at < n; at += pieces[q]) {
                            size_t len = n - at < pieces[q] ? n - at : pieces[q];
                            bool on = alloc_replay_feed(run, ev + at, len);
                            /* it says it stopped once it stopped */
                            assert_true(on || (whole.oom_index >= 0 && !o.continue_after_oom));
                        }
                        assert_int_equal(alloc_replay_end(run, &fed, err, sizeof(err)), ALLOC_OK);
                        replay_same(&whole, &fed);
                    }
        free(fc);
        free(slots);
        free(ev);
    }
}

/* keep_going: asked only after allocations the cache did not serve, with the peak so far; a
 * replay it never stops is the replay without it; one it stops ends there (stopped), at a peak
 * at least the bar, and only where the whole replay's peak reaches the bar. */
static void test_replay_keep_going(void **state)
{
    (void)state;
    alloc_trace_event_t *ev;
    size_t n;
    assert_int_equal(alloc_trace_synth("jitter", 6, 7, &ev, &n), ALLOC_OK);
    char err[256];
    for (int p = 0; alloc_preset_names[p]; p++) {
        alloc_config_t c;
        alloc_config_preset(&c, alloc_preset_names[p]);
        alloc_replay_result_t full = {0}, r = {0};
        assert_int_equal(alloc_replay(&c, NULL, ev, n, &full, err, sizeof(err)), ALLOC_OK);
        assert_false(full.stopped);
        /* no_free_done on a trace without fc events: the same replay */
        alloc_replay_opts_t nf = {.no_free_done = true};
        assert_int_equal(alloc_replay(&c, &nf, ev, n, &r, err, sizeof(err)), ALLOC_OK);
        assert_int_equal(r.peak_reserved, full.peak_reserved);
        assert_int_equal(r.driver_calls, full.driver_calls);
        assert_int_equal(r.held_frees, full.held_frees);
        /* a bar above the peak: the same replay, asked once per cache miss at most */
        bar_seen b = {.bar = full.peak_reserved + 1};
        alloc_replay_opts_t o = {.keep_going = below_bar, .keep_going_user = &b};
        assert_int_equal(alloc_replay(&c, &o, ev, n, &r, err, sizeof(err)), ALLOC_OK);
        assert_false(r.stopped);
        assert_int_equal(r.events, full.events);
        assert_int_equal(r.peak_reserved, full.peak_reserved);
        assert_int_equal(r.peak_allocated, full.peak_allocated);
        assert_int_equal(r.driver_calls, full.driver_calls);
        assert_true(b.calls > 0 && b.calls <= full.cache_misses);
        assert_int_equal(b.last, full.peak_reserved);
        /* a bar at the peak: stopped where it is reached, not before */
        b = (bar_seen){.bar = full.peak_reserved};
        assert_int_equal(alloc_replay(&c, &o, ev, n, &r, err, sizeof(err)), ALLOC_OK);
        assert_true(r.stopped);
        assert_int_equal(r.peak_reserved, full.peak_reserved);
        assert_true(r.events <= full.events);
        /* a bar at half the peak: stopped earlier, at or above it */
        b = (bar_seen){.bar = full.peak_reserved / 2};
        assert_int_equal(alloc_replay(&c, &o, ev, n, &r, err, sizeof(err)), ALLOC_OK);
        assert_true(r.stopped);
        assert_true(r.peak_reserved >= b.bar && r.peak_reserved <= full.peak_reserved);
        assert_true(r.events < full.events);
    }
    free(ev);
}

/* guard:1 (issue 37): each allocation has pages of its own, ends where they end, and the granule
 * after them is not mapped; nothing is cached; a free gives pages and address space back; the
 * mode needs the virtual-memory calls; it parses and formats back. */
static void test_guard_pages(void **state)
{
    (void)state;
    alloc_mem_opts_t mo = {0};
    mo.capacity = 1 * GiB;
    for (int preset = 0; preset < 3; preset++) {
        const char *pre[] = {"gpumem", "pytorch", "nocache"};
        fx_t f = mk(pre[preset], "guard:1", mo);
        alloc_mem_counters_t c0, c1;
        alloc_mem_backend_counters(f.m, &c0);
        uint64_t p[3];
        size_t sz[3] = {1000, 2 * MiB, 3 * MiB + 4096};
        for (int i = 0; i < 3; i++) {
            p[i] = must_alloc(f.a, sz[i], 0);
            size_t rs = (sz[i] + 511) / 512 * 512;
            assert_int_equal(block_size(f.a, p[i]), rs);
            assert_int_equal((p[i] + rs) % (2 * MiB), 0); /* it ends where its pages end */
        }
        for (int i = 0; i < 3; i++) /* a granule of unmapped address space after each */
            for (int j = 0; j < 3; j++)
                assert_false(p[j] + 2 * MiB > p[i] + block_size(f.a, p[i]) - 1 &&
                             p[j] < p[i] + block_size(f.a, p[i]) + 2 * MiB && i != j);
        alloc_mem_backend_counters(f.m, &c1);
        assert_int_equal(c1.map - c0.map, 3);
        assert_int_equal(c1.reserve - c0.reserve, 3);
        alloc_stats_t st = stats(f.a);
        assert_int_equal(st.reserved_bytes.current, (2 + 2 + 4) * MiB);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(alloc_free(f.a, p[i]), ALLOC_OK);
            OK_CHECK(f.a);
        }
        uint64_t again = must_alloc(f.a, 1000, 0);
        assert_int_equal(stats(f.a).cache_hits, 0); /* nothing cached */
        assert_int_equal(alloc_free(f.a, again), ALLOC_OK);
        alloc_mem_backend_counters(f.m, &c1);
        assert_int_equal(c1.unmap - c0.unmap, 4);
        assert_int_equal(c1.free_range - c0.free_range, 4);
        assert_int_equal(stats(f.a).reserved_bytes.current, 0);
        OK_CHECK(f.a);
        fx_done(&f);
    }
    /* without virtual-memory calls there are no guard pages to have: refused, not ignored */
    alloc_mem_backend_t *m = alloc_mem_backend_create(&mo);
    alloc_backend_t be = *alloc_mem_backend(m);
    be.reserve = NULL;
    alloc_config_t cfg;
    alloc_config_default(&cfg);
    char err[256];
    assert_int_equal(alloc_config_parse(&cfg, "guard:True", err, sizeof err), ALLOC_OK);
    alloc_t *a = NULL;
    assert_int_equal(alloc_create(&be, &cfg, &a), ALLOC_ERR_CONFIG);
    assert_null(a);
    char buf[1024];
    alloc_config_format(&cfg, buf, sizeof buf);
    assert_non_null(strstr(buf, "guard:True"));
    alloc_config_t back;
    alloc_config_default(&back);
    assert_int_equal(alloc_config_parse(&back, buf, err, sizeof err), ALLOC_OK);
    assert_true(back.guard);
    assert_int_equal(alloc_config_parse(&cfg, "guard:maybe", err, sizeof err), ALLOC_ERR_CONFIG);
    assert_non_null(strstr(err, "guard"));
    alloc_mem_backend_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounding),
        cmocka_unit_test(test_small_large_pools),
        cmocka_unit_test(test_best_fit),
        cmocka_unit_test(test_class_slot),
        cmocka_unit_test(test_split_coalesce),
        cmocka_unit_test(test_classic_segment_sizes),
        cmocka_unit_test(test_no_merge_across_segments),
        cmocka_unit_test(test_pytorch_split_rule),
        cmocka_unit_test(test_max_split),
        cmocka_unit_test(test_expandable_holes),
        cmocka_unit_test(test_expandable_grow_merges_free_neighbour),
        cmocka_unit_test(test_handle_size),
        cmocka_unit_test(test_limit_oom),
        cmocka_unit_test(test_oom_frees_cache),
        cmocka_unit_test(test_release_before_grow),
        cmocka_unit_test(test_release_before_grow_no_sync),
        cmocka_unit_test(test_class_index_covers_pool),
        cmocka_unit_test(test_request_above_device_is_oom),
        cmocka_unit_test(test_backend_failure_retry),
        cmocka_unit_test(test_double_free_and_foreign),
        cmocka_unit_test(test_free_waits_for_events),
        cmocka_unit_test(test_last_block_outside_map),
        cmocka_unit_test(test_free_async),
        cmocka_unit_test(test_per_stream_pools),
        cmocka_unit_test(test_ex_variants),
        cmocka_unit_test(test_garbage_collection),
        cmocka_unit_test(test_release_threshold),
        cmocka_unit_test(test_nocache),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_stats_program_peaks),
        cmocka_unit_test(test_mem_info),
        cmocka_unit_test(test_hooks),
        cmocka_unit_test(test_backend_call_counts),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_trace_parse),
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_replay_private_pool),
        cmocka_unit_test(test_replay_capture),
        cmocka_unit_test(test_replay_keep_going),
        cmocka_unit_test(test_replay_slots),
        cmocka_unit_test(test_replay_pieces),
        cmocka_unit_test(test_guard_pages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
