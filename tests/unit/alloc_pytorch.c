/* alloc_pytorch.c — the `pytorch` and `pytorch-expandable` presets against PyTorch 2.11's
 * CUDACachingAllocator and AllocatorConfig, one test per rule, with the figures worked out by
 * hand from PyTorch's code (round_size, roundup_power2_divisions, should_split, get_free_block,
 * garbage_collect_cached_blocks, release_available_cached_blocks, find_expandable_block). Each
 * test says what gpumem's own policy (or the presets before they followed PyTorch) would do
 * instead, so a regression to it fails. alloc_check() runs after every operation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alloc/alloc.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

typedef struct {
    alloc_mem_backend_t *m;
    alloc_t *a;
} fx_t;

static alloc_config_t conf(const char *c)
{
    alloc_config_t cfg;
    char err[512];
    alloc_config_default(&cfg);
    if (alloc_config_parse(&cfg, c, err, sizeof(err)) != ALLOC_OK)
        fail_msg("config '%s': %s", c, err);
    return cfg;
}

static fx_t mk(const char *c)
{
    fx_t f;
    alloc_config_t cfg = conf(c);
    alloc_mem_opts_t mo = {0};
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

static uint64_t take(alloc_t *a, size_t size, uintptr_t stream)
{
    uint64_t p = 0;
    int rc = alloc_malloc(a, size, stream, &p);
    if (rc) fail_msg("alloc_malloc(%zu): %s", size, alloc_strerror(rc));
    assert_true(p != 0);
    OK_CHECK(a);
    return p;
}

static void give(alloc_t *a, uint64_t p)
{
    assert_int_equal(alloc_free(a, p), ALLOC_OK);
    OK_CHECK(a);
}

static size_t block_size(alloc_t *a, uint64_t p)
{
    uint64_t base;
    size_t size;
    assert_int_equal(alloc_block_info(a, p, &base, &size), ALLOC_OK);
    return size;
}

static alloc_stats_t stats(alloc_t *a)
{
    alloc_stats_t s;
    alloc_get_stats(a, &s);
    return s;
}

/* ---- rounding ------------------------------------------------------------------------------ */

typedef struct {
    size_t in, out;
} row_t;

static void check_table(const char *c, const row_t *t, size_t n)
{
    alloc_config_t cfg = conf(c);
    for (size_t i = 0; i < n; i++) {
        size_t got = alloc_round_size(&cfg, t[i].in);
        if (got != t[i].out)
            fail_msg("%s: round(%zu) = %zu, PyTorch gives %zu", c, t[i].in, got, t[i].out);
    }
}

/* The single-value form: every interval the same; d divisions of [2^k, 2^(k+1)) once the size
 * is above 512 * d, plain 512 B multiples below that and for d = 0 or 1. */
static void test_round_single(void **state)
{
    (void)state;
    const row_t plain[] = {{1, 512}, {512, 512}, {513, 1024}, {3 * MiB + 1, 3 * MiB + 512}};
    check_table("preset:pytorch", plain, 4);
    const row_t one[] = {{300 * MiB + 1, 300 * MiB + 512}, {600 * MiB, 600 * MiB}};
    check_table("preset:pytorch,roundup_power2_divisions:1", one, 2);
    const row_t four[] = {
        {1200, 1536},                     /* not above 512 * 4: 512 B rounding */
        {2100, 2560},                     /* [2048, 4096) in quarters of 512 */
        {1153434, 1310720},               /* 1.1 MiB -> 1.25 MiB */
        {4 * MiB, 4 * MiB},               /* a power of two stays */
        {3 * MiB + 1, 3 * MiB + MiB / 2}, /* quarters of 2 MiB */
        {600 * KiB, 640 * KiB},           /* below 1 MiB too */
    };
    check_table("preset:pytorch,roundup_power2_divisions:4", four, 6);
    const row_t eight[] = {{600 * MiB, 640 * MiB}, {1100 * MiB, 1152 * MiB}};
    check_table("preset:pytorch,roundup_power2_divisions:8", eight, 2);
}

/* The list form, read as PyTorch's AllocatorConfig reads it: key K MiB sets [K, 2K), the first
 * key also covers everything below it, '>' the intervals after the last key. (The reading the
 * presets had before — a key's value applies below it — gives 300 MiB -> 384 MiB and
 * 600 MiB -> 640 MiB here.) */
static void test_round_list(void **state)
{
    (void)state;
    /* the acceptance figures */
    const row_t acc[] = {{200 * MiB, 209715200},
                         {300 * MiB, 314572800},
                         {600 * MiB, 805306368},
                         {1100 * MiB, 1207959552},
                         {700 * KiB + 1, 700 * KiB + 512}}; /* the first key covers below */
    check_table("preset:pytorch,roundup_power2_divisions:[256:1,512:2,>:8]", acc, 5);
    /* PyTorch's own AllocatorConfig test list: 1024 MiB is in no entry and keeps 0 */
    const row_t pt[] = {
        {65 * MiB, 72 * MiB},     /* 64 MiB interval: 8 divisions (first key covers below) */
        {33 * MiB, 36 * MiB},     /* below the first key: 8 too */
        {300 * MiB, 304 * MiB},   /* [256, 512): 16 */
        {600 * MiB, 600 * MiB},   /* [512, 1024): 1 */
        {1100 * MiB, 1100 * MiB}, /* [1024, 2048): not listed, 0 */
        {2100 * MiB, 2304 * MiB}, /* [2048, 4096): 8 */
        {5000 * MiB, 6144 * MiB}, /* after the last key: 2 */
        {70 * GiB, 96 * GiB},     /* beyond PyTorch's last interval: the last one's 2 */
    };
    check_table("preset:pytorch,roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]", pt, 8);
    /* '>' alone starts after interval 0 ([1, 2) MiB and below keep their value) */
    const row_t gt[] = {{MiB + 1, MiB + 512}, {3 * MiB + 1, 3 * MiB + MiB / 2}};
    check_table("preset:pytorch,roundup_power2_divisions:[>:4]", gt, 2);
    /* keys above PyTorch's 16 intervals clamp to the last */
    const row_t big[] = {{40 * GiB, 40 * GiB}, {3 * MiB + 1, 4 * MiB}};
    check_table("preset:pytorch,roundup_power2_divisions:[2:2,65536:1]", big, 2);

    /* format -> parse keeps the table */
    const char *confs[] = {
        "preset:pytorch,roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]",
        "preset:pytorch,roundup_power2_divisions:[256:1,512:2,>:8]",
        "preset:pytorch,roundup_power2_divisions:[>:4]",
        "preset:pytorch,large_segment_size_mb:32,max_non_split_rounding_mb:64"};
    for (size_t i = 0; i < 4; i++) {
        alloc_config_t x = conf(confs[i]);
        char buf[1024];
        alloc_config_format(&x, buf, sizeof(buf));
        alloc_config_t y = conf(buf);
        assert_memory_equal(x.rp2_div, y.rp2_div, sizeof(x.rp2_div));
        assert_int_equal(x.max_non_split_rounding, y.max_non_split_rounding);
        assert_int_equal(x.large_segment, y.large_segment);
        assert_int_equal(x.handle_size, y.handle_size);
    }
}

/* The newer keys and PyTorch's bounds: max_split_size_mb and max_non_split_rounding_mb at least
 * large_segment_size_mb (20), large_segment_size_mb above 10. */
static void test_config_keys(void **state)
{
    (void)state;
    alloc_config_t c = conf("preset:pytorch,max_split_size_mb:20");
    assert_int_equal(c.max_split_size, 20 * MiB);
    assert_int_equal(c.max_non_split_rounding, 20 * MiB);
    assert_int_equal(c.large_segment, 20 * MiB);
    c = conf("preset:pytorch,max_non_split_rounding_mb:512");
    assert_int_equal(c.max_non_split_rounding, 512 * MiB);
    c = conf("preset:pytorch-expandable,large_segment_size_mb:64");
    assert_int_equal(c.large_segment, 64 * MiB);
    assert_int_equal(c.max_non_split_rounding, 64 * MiB);
    assert_int_equal(c.handle_size, 64 * MiB); /* PyTorch's large-pool page */
    char err[256];
    alloc_config_default(&c);
    assert_int_equal(
        alloc_config_parse(&c, "large_segment_size_mb:32,max_split_size_mb:24", err, sizeof(err)),
        ALLOC_ERR_CONFIG);
    assert_non_null(strstr(err, "at least 32"));

    /* a 1..10 MiB request gets a large_segment_size_mb segment */
    fx_t f = mk("preset:pytorch,large_segment_size_mb:32");
    take(f.a, 2 * MiB, 0);
    assert_int_equal(stats(f.a).reserved_bytes.current, 32 * MiB);
    fx_done(&f);
}

/* PyTorch 2.14.1's grammar (alloc/config.c, "the parser"; driven against torch's own parser in
 * tests/torch/torch_conf_keys.sh): separators are only counted, numbers read as strtoull/strtod
 * read them (but for the ones PyTorch misreads, refused), large_segment_size_mb first wherever it stands, lists in any order, the keys
 * gpumem does not model accepted and named, and per_process_memory_fraction a limit of that share
 * of the device. Each case fails under gpumem's grammar before (which checked separators, wanted
 * ascending lists, refused pinned_* keys and the fraction). */
static void test_torch_grammar(void **state)
{
    (void)state;
    char err[512], names[512];
    alloc_config_t c = conf("preset:pytorch,max_split_size_mb,128"); /* any separator */
    assert_int_equal(c.max_split_size, 128 * MiB);
    c = conf("preset:pytorch,max_split _size_mb: 128"); /* white space dropped */
    assert_int_equal(c.max_split_size, 128 * MiB);
    /* what PyTorch reads as another number than the one written ("128abc" is 128, "-5" wraps to
     * "no limit") is refused, saying so: the one place gpumem's grammar is stricter */
    static const char *const misread[] = {"max_split_size_mb:128abc", "max_split_size_mb:-5",
                                          "large_segment_size_mb:-1", "roundup_power2_divisions:[256:-2]",
                                          "garbage_collection_threshold:0.6abc"};
    for (size_t i = 0; i < sizeof misread / sizeof *misread; i++) {
        alloc_config_default(&c);
        assert_int_equal(alloc_config_parse(&c, misread[i], err, sizeof err), ALLOC_ERR_CONFIG);
        assert_non_null(strstr(err, "PyTorch would misread it"));
    }
    c = conf("preset:pytorch,max_split_size_mb:15,large_segment_size_mb:11"); /* bound: 11 */
    assert_int_equal(c.max_split_size, 15 * MiB);
    assert_int_equal(c.large_segment, 11 * MiB);
    c = conf("preset:pytorch,garbage_collection_threshold:0x0.8p0"); /* a hexadecimal 0.5 */
    assert_true(c.gc_threshold == 0.5);
    /* [512:2,256:1]: 2 up to 512 MiB's interval, then 256 MiB's interval set to 1 */
    c = conf("preset:pytorch,roundup_power2_divisions:[512:2,256:1]");
    assert_int_equal(c.rp2_div[20], 2);
    assert_int_equal(c.rp2_div[28], 1);
    assert_int_equal(c.rp2_div[29], 2);
    c = conf("preset:pytorch,roundup_power2_divisions:[256,1]"); /* the list's ':' not looked at */
    assert_int_equal(c.rp2_div[28], 1);
    /* 2^63 divisions: PyTorch's 512 * d wraps to 0 and every size rounds to the next power of 2 */
    c = conf("preset:pytorch,roundup_power2_divisions:9223372036854775808");
    assert_int_equal(alloc_round_size(&c, 3 * MiB), 4 * MiB);
    const char *bad[] = {"max_split_size_mb:128:4", /* '4' is read as a key */
                         "max_split_size_mb:99999999999999999999", /* ERANGE */
                         "large_segment_size_mb:11,large_segment_size_mb:30,max_split_size_mb:15",
                         "garbage_collection_threshold:1e-400", "roundup_power2_divisions:[256:1",
                         "roundup_power2_divisions:[256]", "roundup_power2_divisions:[256:1,,512:2]",
                         ",max_split_size_mb:128", "per_process_memory_fraction:1.5"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        alloc_config_default(&c);
        if (alloc_config_parse(&c, bad[i], err, sizeof(err)) == ALLOC_OK)
            fail_msg("'%s' was accepted; PyTorch 2.14.1 refuses it", bad[i]);
    }
    /* accepted, not modelled, named */
    c = conf("pinned_use_cuda_host_register:True,backend:cudaMallocAsync,throw_on_cudamalloc_oom:False");
    assert_int_equal(alloc_config_unmodelled(&c, names, sizeof(names)), 3);
    assert_non_null(strstr(names, "pinned_use_cuda_host_register"));
    assert_non_null(strstr(names, "backend:cudaMallocAsync"));
    c = conf("preset:pytorch,backend:native,expandable_segments:False");
    assert_int_equal(alloc_config_unmodelled(&c, names, sizeof(names)), 0);
    /* the formatter writes what the grammar reads back: no 'inf', no threshold 0 */
    c = conf("preset:pytorch,per_process_memory_fraction:0.5");
    char buf[1024];
    alloc_config_format(&c, buf, sizeof(buf));
    assert_null(strstr(buf, "inf"));
    assert_null(strstr(buf, "garbage_collection_threshold"));
    alloc_config_t d = conf(buf);
    assert_true(d.memory_fraction == 0.5);
    /* the fraction of the device (80 GiB in the in-memory backend) is the limit */
    alloc_mem_opts_t mo = {.capacity = 4 * GiB};
    fx_t f;
    f.m = alloc_mem_backend_create(&mo);
    assert_non_null(f.m);
    assert_int_equal(alloc_create(alloc_mem_backend(f.m), &c, &f.a), ALLOC_OK);
    take(f.a, 1900 * MiB, 0);
    uint64_t p = 0;
    assert_int_equal(alloc_malloc(f.a, 200 * MiB, 0, &p), ALLOC_ERR_OOM); /* 2 GiB is the limit */
    fx_done(&f);
}

/* ---- split and oversize --------------------------------------------------------------------- */

/* Classic: a large-pool block is split only when more than 1 MiB remains; with expandable
 * segments any remainder of 512 B or more is split (max_split_size_mb does not stop it). */
static void test_split(void **state)
{
    (void)state;
    for (int exp = 0; exp < 2; exp++) {
        fx_t f = mk(exp ? "preset:pytorch-expandable" : "preset:pytorch");
        uint64_t p = take(f.a, 19 * MiB + MiB / 2, 0);
        /* classic: a 20 MiB segment, 0.5 MiB left: not split; expandable: one 20 MiB page */
        assert_int_equal(block_size(f.a, p), exp ? 19 * MiB + MiB / 2 : 20 * MiB);
        uint64_t q = take(f.a, 2 * MiB, 0); /* 1..10 MiB: classic segment 20 MiB, split */
        assert_int_equal(block_size(f.a, q), 2 * MiB);
        uint64_t s = take(f.a, 1000, 0); /* small pool: 512 B remainders split in both */
        assert_int_equal(block_size(f.a, s), 1024);
        assert_int_equal(block_size(f.a, take(f.a, 512, 0)), 512);
        fx_done(&f);

        /* a request of max_split_size or more: classic never splits, expandable does */
        f = mk(exp ? "preset:pytorch-expandable,max_split_size_mb:64"
                   : "preset:pytorch,max_split_size_mb:64");
        uint64_t big = take(f.a, 100 * MiB, 0);
        give(f.a, big);
        uint64_t r = take(f.a, 90 * MiB, 0); /* 100 < 90 + 20: served by the 100 MiB block */
        assert_true(r == big);
        assert_int_equal(block_size(f.a, r), exp ? 90 * MiB : 100 * MiB);
        fx_done(&f);
    }
}

/* Oversize blocks (>= max_split_size) serve neither smaller requests nor requests they exceed by
 * max_non_split_rounding_mb (20 MiB by default), with and without expandable segments. */
static void test_oversize(void **state)
{
    (void)state;
    for (int exp = 0; exp < 2; exp++) {
        const char *base = exp ? "preset:pytorch-expandable" : "preset:pytorch";
        char c[256];
        snprintf(c, sizeof(c), "%s,max_split_size_mb:64", base);
        fx_t f = mk(c);
        uint64_t big = take(f.a, 100 * MiB, 0);
        take(f.a, 2 * MiB, 0); /* keeps the big block from being the range's tail */
        give(f.a, big);
        assert_true(take(f.a, 30 * MiB, 0) != big); /* below max_split */
        assert_true(take(f.a, 70 * MiB, 0) != big); /* 100 >= 70 + 20 */
        fx_done(&f);

        snprintf(c, sizeof(c), "%s,max_split_size_mb:64,max_non_split_rounding_mb:40", base);
        f = mk(c);
        big = take(f.a, 100 * MiB, 0);
        take(f.a, 2 * MiB, 0);
        give(f.a, big);
        assert_true(take(f.a, 70 * MiB, 0) == big); /* 100 < 70 + 40 */
        fx_done(&f);
    }
}

/* get_free_block with expandable segments: among blocks that fit, one whose expandable size (its
 * size plus the unmapped space after it) is smaller is preferred to the best fit before the
 * unmapped tail. gpumem's own best fit takes the 4 MiB block at the tail. */
static void test_expandable_best_fit(void **state)
{
    (void)state;
    fx_t f = mk("preset:pytorch-expandable");
    uint64_t x1 = take(f.a, 6 * MiB, 0);  /* page 0: [0, 6) */
    uint64_t x2 = take(f.a, 10 * MiB, 0); /* [6, 16); [16, 20) free, then the unmapped tail */
    (void)x2;
    give(f.a, x1);
    uint64_t p = take(f.a, 3 * MiB, 0);
    assert_true(p == x1);
    fx_done(&f);
}

/* find_expandable_block: the lowest-address hole, not the smallest; and a chain of holes and free
 * blocks is mapped as one block. gpumem's own choice: the smallest hole (with free neighbours)
 * that fits, else the range's tail. */
static void test_expandable_holes(void **state)
{
    (void)state;
    fx_t f = mk("preset:pytorch-expandable");
    uint64_t a[6];
    for (int i = 0; i < 6; i++)
        a[i] = take(f.a, 20 * MiB, 0); /* one 20 MiB page each, contiguous */
    assert_true(a[1] == a[0] + 20 * MiB);
    give(f.a, a[1]);
    give(f.a, a[2]);
    give(f.a, a[4]);
    assert_int_equal(alloc_empty_cache(f.a), ALLOC_OK); /* holes: [20, 60) and [80, 100) */
    OK_CHECK(f.a);
    assert_int_equal(stats(f.a).reserved_bytes.current, 60 * MiB);
    uint64_t p = take(f.a, 10 * MiB, 0);
    assert_true(p == a[1]); /* lowest address, not the 20 MiB hole at 80 */
    give(f.a, p);
    alloc_empty_cache(f.a);
    OK_CHECK(f.a);
    /* a[3] freed between the holes: hole 40 + free 20 + hole 20 = 80 >= 70 */
    give(f.a, a[3]);
    uint64_t q = take(f.a, 70 * MiB, 0);
    assert_true(q == a[1]);
    assert_int_equal(stats(f.a).reserved_bytes.current, 120 * MiB); /* no growth at the tail */
    fx_done(&f);
}

/* ---- garbage collection ---------------------------------------------------------------------- */

/* Setup shared by the GC tests: four 40 MiB segments on stream 0 and a 12 MiB one on stream 1,
 * aged by searches of the large pool (PyTorch's unit). Returns E's stats after a 60 MiB request
 * misses the cache with reserved memory at 172 MiB. Ages at that moment: A 18, B 3, C 2, X 1. */
static alloc_stats_t gc_scenario(const char *c, bool *x_cached)
{
    fx_t f = mk(c);
    uint64_t A = take(f.a, 40 * MiB, 0), B = take(f.a, 40 * MiB, 0), C = take(f.a, 40 * MiB, 0);
    take(f.a, 40 * MiB, 0);            /* D stays live */
    give(f.a, take(f.a, 12 * MiB, 1)); /* X */
    give(f.a, A);
    for (int i = 0; i < 15; i++)
        give(f.a, take(f.a, 12 * MiB, 1));
    give(f.a, B);
    give(f.a, take(f.a, 12 * MiB, 1));
    give(f.a, C);
    give(f.a, take(f.a, 12 * MiB, 1));
    take(f.a, 60 * MiB, 0); /* E: a miss */
    alloc_stats_t s = stats(f.a);
    uint64_t hits = s.cache_hits;
    take(f.a, 12 * MiB, 1);
    *x_cached = stats(f.a).cache_hits == hits + 1;
    fx_done(&f);
    return s;
}

/* With a limit of 260 MiB and threshold 0.5 (130 MiB), the miss at 172 MiB reserved must reclaim
 * 42 MiB. Pass 1 frees every whole large-pool block at or above the average age 6 (A: 40 MiB),
 * short of the target; pass 2 recomputes the average over B, C, X (2) and frees B and C, not X.
 * Reserved: 172 - 120 + 60 = 112 MiB. (Oldest first until under the target would free A and B:
 * 152 MiB; a single pass only A: 192 MiB.) */
static void test_gc_order(void **state)
{
    (void)state;
    bool x_cached;
    alloc_stats_t s =
        gc_scenario("preset:pytorch,limit:260M,garbage_collection_threshold:0.5", &x_cached);
    assert_int_equal(s.reserved_bytes.current, 112 * MiB);
    assert_int_equal(s.num_device_free, 3);
    assert_true(s.num_gc_runs >= 1);
    assert_true(x_cached); /* the youngest block survived */
}

/* PyTorch collects only when a memory fraction is set: without a limit nothing is collected. */
static void test_gc_needs_limit(void **state)
{
    (void)state;
    bool x_cached;
    alloc_stats_t s = gc_scenario("preset:pytorch,garbage_collection_threshold:0.5", &x_cached);
    assert_int_equal(s.num_gc_runs, 0);
    assert_int_equal(s.num_device_free, 0);
    assert_int_equal(s.reserved_bytes.current, 232 * MiB);
}

/* Only the large pool: a free small-pool segment is never collected. (Expandable segments are
 * excluded too, but their free blocks always border unmapped space or other blocks, so they are
 * never whole segments in the first place.) */
static void test_gc_pools(void **state)
{
    (void)state;
    fx_t f = mk("preset:pytorch,limit:60M,garbage_collection_threshold:0.3"); /* 18 MiB */
    give(f.a, take(f.a, 4096, 0)); /* a whole free 2 MiB small segment, as old as it gets */
    take(f.a, 12 * MiB, 0);        /* miss at 2 MiB reserved */
    take(f.a, 8 * MiB, 0);         /* miss at 14 MiB: a 20 MiB segment, 12 MiB of it cached */
    take(f.a, 14 * MiB, 0);        /* miss at 34 MiB > 18 MiB: GC, nothing in the large pool */
    alloc_stats_t s = stats(f.a);
    assert_true(s.num_gc_runs >= 1);
    assert_int_equal(s.num_device_free, 0);
    assert_int_equal(s.reserved_bytes.current, 48 * MiB);
    fx_done(&f);
}

/* ---- OOM path ------------------------------------------------------------------------------ */

/* release_available_cached_blocks first: with max_split_size_mb set, the smallest cached block of
 * at least max(request, max_split_size) is freed and the allocation retried, before anything
 * else is released. gpumem's own path would release every cached segment (reserved 50 MiB). */
static void test_oom_release_available(void **state)
{
    (void)state;
    fx_t f = mk("preset:pytorch,max_split_size_mb:64,limit:230M");
    uint64_t o1 = take(f.a, 100 * MiB, 0), o2 = take(f.a, 80 * MiB, 0), s = take(f.a, 30 * MiB, 0);
    give(f.a, o1);
    give(f.a, o2);
    give(f.a, s);
    uint64_t r = take(f.a, 50 * MiB, 0); /* 80 MiB is oversize for it; 260 > 230: OOM path */
    alloc_stats_t st = stats(f.a);
    assert_int_equal(st.reserved_bytes.current, 180 * MiB); /* only the 80 MiB block went */
    assert_int_equal(st.num_alloc_retries, 0);              /* release_cached_blocks not needed */
    give(f.a, r);
    assert_true(take(f.a, 100 * MiB, 0) == o1); /* still cached */
    fx_done(&f);

    /* no single block is large enough: oversize blocks from the largest down until the request's
     * size is freed; the 30 MiB block is not oversize and stays */
    f = mk("preset:pytorch,max_split_size_mb:64,limit:200M");
    uint64_t a = take(f.a, 70 * MiB, 0), b = take(f.a, 65 * MiB, 0);
    s = take(f.a, 30 * MiB, 0);
    give(f.a, a);
    give(f.a, b);
    give(f.a, s);
    take(f.a, 90 * MiB, 0);
    st = stats(f.a);
    assert_int_equal(st.reserved_bytes.current, 120 * MiB);
    assert_int_equal(st.num_device_free, 2);
    uint64_t hits = st.cache_hits;
    assert_true(take(f.a, 30 * MiB, 0) == s);
    assert_int_equal(stats(f.a).cache_hits, hits + 1);
    fx_done(&f);
}

/* Then release_cached_blocks (every whole cached segment, after synchronizing) and one retry,
 * which is what PyTorch counts in num_alloc_retries; without max_split_size_mb the first step is
 * skipped. */
static void test_oom_release_cached(void **state)
{
    (void)state;
    fx_t f = mk("preset:pytorch,limit:100M");
    uint64_t a = take(f.a, 40 * MiB, 0), b = take(f.a, 40 * MiB, 0);
    give(f.a, a);
    give(f.a, b);
    take(f.a, 60 * MiB, 0);
    alloc_stats_t st = stats(f.a);
    assert_int_equal(st.num_alloc_retries, 1);
    assert_int_equal(st.num_device_free, 2);
    assert_int_equal(st.reserved_bytes.current, 60 * MiB);
    /* a request that cannot fit even then fails with the forensics */
    uint64_t p;
    assert_int_equal(alloc_malloc(f.a, 60 * MiB, 0, &p), ALLOC_ERR_OOM);
    assert_int_equal(stats(f.a).num_alloc_retries, 2);
    OK_CHECK(f.a);
    fx_done(&f);
}

/* ---- replay: record_stream and allocations outside the framework ------------------------------
 */

static alloc_replay_result_t replay(const char *c, const char *trace, unsigned lag)
{
    alloc_trace_event_t *ev;
    size_t n;
    char err[256];
    if (alloc_trace_parse(trace, strlen(trace), &ev, &n, err, sizeof(err)))
        fail_msg("trace: %s", err);
    alloc_config_t cfg = conf(c);
    alloc_replay_opts_t o = {.stream_lag = lag};
    alloc_replay_result_t r;
    assert_int_equal(alloc_replay(&cfg, &o, ev, n, &r, err, sizeof(err)), ALLOC_OK);
    free(ev);
    return r;
}

/* A block used on another stream (rs) is not reusable until that stream's work is done: at its
 * `fc` when the trace has them, else stream_lag allocations later. */
static void test_replay_record_stream(void **state)
{
    (void)state;
    const char *plain = "a 1 41943040\nf 1\na 2 41943040\n";
    const char *rs = "a 1 41943040\nrs 1 7\nf 1\na 2 41943040\n";
    const char *rs_fc = "a 1 41943040\nrs 1 7\nf 1\na 2 41943040\nfc 1\na 3 41943040\n";
    alloc_replay_result_t r = replay("preset:pytorch", plain, 0);
    assert_int_equal(r.peak_reserved, 40 * MiB);
    r = replay("preset:pytorch", rs, 0); /* the other stream finished by the next malloc */
    assert_int_equal(r.peak_reserved, 40 * MiB);
    assert_int_equal(r.held_frees, 1);
    r = replay("preset:pytorch", rs, 1); /* not yet at the next malloc */
    assert_int_equal(r.peak_reserved, 80 * MiB);
    r = replay("preset:pytorch", rs_fc, 0); /* fc: exactly there, lag ignored */
    assert_int_equal(r.peak_reserved, 80 * MiB);
    assert_int_equal(r.peak_allocated, 80 * MiB);
    assert_int_equal(r.allocs, 3);
    /* record_stream on the allocation's own stream is no use of another stream */
    r = replay("preset:pytorch", "a 1 41943040\nrs 1 0\nf 1\na 2 41943040\n", 1);
    assert_int_equal(r.peak_reserved, 40 * MiB);
    /* peak allocated is counted at the program's free, as PyTorch's allocated_bytes */
    r = replay("preset:pytorch", "a 1 41943040\nrs 1 7\nf 1\na 2 20971520\n", 1);
    assert_int_equal(r.peak_allocated, 40 * MiB);
}

/* gpumem's free_completed (`fc`): a free in stream order on another stream whose block came back
 * later in the recording is held until its `fc`, under every preset; a free with no `fc` after it
 * (reusable at once in the run, or one whose `fc` was recorded first) is not held. Without `fc`
 * lines nothing is held (older recordings replay as before). */
static void test_replay_free_completed(void **state)
{
    (void)state;
    const char *plain = "a 1 41943040 1\nfa 1 2\na 2 41943040 1\n";
    const char *held = "a 1 41943040 1\nfa 1 2\na 2 41943040 1\nfc 1\na 3 41943040 1\n";
    const char *first = "a 1 41943040 1\nfc 1\nfa 1 2\na 2 41943040 1\na 3 1048576 1\nfc 3\n";
    const char *names[] = {"preset:gpumem", "preset:pytorch", "preset:pytorch-expandable"};
    for (size_t i = 0; i < 3; i++) {
        alloc_replay_result_t r = replay(names[i], plain, 0);
        assert_int_equal(r.peak_reserved, 40 * MiB);
        assert_int_equal(r.held_frees, 0);
        r = replay(names[i], held, 0);
        assert_int_equal(r.peak_reserved, 80 * MiB); /* a 2 could not reuse 1's block */
        assert_int_equal(r.held_frees, 1);
        assert_int_equal(r.peak_allocated, 80 * MiB);
        r = replay(names[i], first, 0);
        assert_int_equal(r.peak_reserved, 42 * MiB); /* 2 reuses 1; 3 maps a small page */
        assert_int_equal(r.held_frees, 0);
    }
}

/* ax: a library's own cudaMalloc is not PyTorch's: not cached, not in reserved, under the pytorch
 * presets; gpumem serves it like any allocation. */
static void test_replay_other_allocator(void **state)
{
    (void)state;
    const char *t = "ax 1 104857600\nf 1\na 2 41943040\nax 3 52428800 1\n";
    alloc_replay_result_t r = replay("preset:pytorch", t, 0);
    assert_int_equal(r.peak_reserved, 40 * MiB);
    assert_int_equal(r.peak_allocated, 40 * MiB);
    assert_int_equal(r.other_allocs, 2);
    assert_int_equal(r.peak_other, 100 * MiB);
    r = replay("preset:gpumem", t, 0);
    assert_int_equal(r.other_allocs, 0);
    assert_true(r.peak_reserved >= 100 * MiB);
    /* the device is shared: a library's memory can make PyTorch run out */
    alloc_trace_event_t *ev;
    size_t n;
    char err[128];
    const char *full = "ax 1 85888860160\na 2 41943040\n"; /* 80 GiB - 10 MiB, then 40 MiB */
    assert_int_equal(alloc_trace_parse(full, strlen(full), &ev, &n, err, sizeof(err)), ALLOC_OK);
    alloc_config_t cfg = conf("preset:pytorch");
    alloc_replay_opts_t o = {.capacity = 80 * GiB};
    assert_int_equal(alloc_replay(&cfg, &o, ev, n, &r, err, sizeof(err)), ALLOC_OK);
    assert_int_equal(r.oom_index, 1);
    free(ev);
}

/* l: PyTorch's per-process memory fraction, set while the trace runs. Under the pytorch presets
 * a request over the cap frees the cache and retries (PyTorch's OOM path), and one that still does
 * not fit is an OOM; what was reserved before the cap is kept; a cap of the device's size lifts it,
 * and `l 0` is a cap of 0 bytes (PyTorch's fraction 0), never "no cap". gpumem's allocator
 * as PyTorch's pluggable one is capped the same (gpumem_torch_memory_fraction): live memory
 * over the cap is an OOM there too. */
static void test_replay_limit(void **state)
{
    (void)state;
    const char *body = "a 1 25165824\na 2 25165824\nf 1\nf 2\na 3 41943040\n"; /* 24, 24, then 40 MiB */
    char t[256];
    alloc_replay_result_t r = replay("preset:pytorch", body, 0);
    assert_int_equal(r.peak_reserved, 88 * MiB); /* no cap: two 24 MiB segments kept, one of 40 */
    snprintf(t, sizeof t, "l 67108864\n%s", body); /* 64 MiB */
    r = replay("preset:pytorch", t, 0);
    assert_int_equal(r.peak_reserved, 48 * MiB); /* the cache given back before the 40 MiB */
    assert_int_equal(r.oom_index, -1);
    r = replay("preset:gpumem", t, 0);
    assert_int_equal(r.oom_index, -1);
    assert_true(r.peak_reserved <= 64 * MiB);
    /* set after the first two: the 48 MiB reserved stay, the next request meets the cap */
    snprintf(t, sizeof t, "a 1 25165824\na 2 25165824\nl 67108864\nf 1\nf 2\na 3 41943040\n");
    r = replay("preset:pytorch", t, 0);
    assert_int_equal(r.peak_reserved, 48 * MiB);
    snprintf(t, sizeof t, "l 67108864\nl 85899345920\n%s", body); /* lifted: 80 GiB */
    assert_int_equal(replay("preset:pytorch", t, 0).peak_reserved, 88 * MiB);
    snprintf(t, sizeof t, "l 67108864\nl 0\n%s", body); /* fraction 0: nothing may be reserved */
    r = replay("preset:pytorch", t, 0);
    assert_int_equal(r.oom_index, 2);
    assert_int_equal(r.peak_reserved, 0);
    /* live memory over the cap: an OOM, under either allocator */
    r = replay("preset:pytorch", "l 33554432\na 1 25165824\na 2 25165824\n", 0);
    assert_int_equal(r.oom_index, 2);
    assert_int_equal(replay("preset:gpumem", "a 1 25165824\na 2 25165824\n", 0).oom_index, -1);
    r = replay("preset:gpumem", "l 33554432\na 1 25165824\na 2 25165824\n", 0);
    assert_int_equal(r.oom_index, 2);
}

/* The limit in force on a (failed) request over the device: alloc_last_oom's, exact (no cap
 * is ALLOC_NO_LIMIT, not the device's size), and what set it. */
static size_t oom_limit(alloc_t *a, alloc_limit_from_t *from)
{
    uint64_t p = 0;
    alloc_oom_info_t o;
    assert_int_not_equal(alloc_malloc(a, 2 * GiB, 0, &p), ALLOC_OK);
    assert_true(alloc_last_oom(a, &o));
    if (from) *from = o.limit_from;
    return o.limit;
}

/* One rule for the limit a per-process memory fraction leaves (alloc_fraction_limit), as
 * alloc_set_memory_fraction applies it on a 1 GiB device and as a replay of a recording's fractions
 * reads it: the fraction's cap (fraction x total, truncated) where the fraction is under 1 and the
 * cap is below the limit in bytes (the limit key), else that limit (a fraction of 1 gives it back,
 * none included). As in PyTorch, a call replaces the fraction in force in either direction: an
 * earlier call's, and the per_process_memory_fraction key's share (alloc_conf_limit, the limit
 * before any call), which is only the starting fraction. The OOM names what set its limit: the
 * fraction only where its cap is the limit, the key where its share is, else the limit in bytes
 * (none: no limit). A limit in bytes set at run time (alloc_set_limit, after the first call)
 * replaces the configured one as the ceiling of the later call: the later fraction is capped by
 * it, a later 1 gives it back, a higher one lifts the configured limit, ALLOC_NO_LIMIT removes it. */
static void test_fraction_limit(void **state)
{
    (void)state;
    const alloc_limit_from_t N = ALLOC_LIMIT_NONE, B = ALLOC_LIMIT_BYTES, K = ALLOC_LIMIT_KEY,
                             F = ALLOC_LIMIT_FRACTION;
    const struct { /* automatic: initialized from the names above */
        const char *conf;
        double first, fraction; /* first: a call before (< 0: none) */
        size_t cap, limit;      /* the fraction's bytes, then the limit in force */
        alloc_limit_from_t from; /* what set the limit (alloc_oom_info.limit_from) */
        alloc_limit_from_t start_from; /* what set it before the calls (the key: its share) */
        bool set;                      /* alloc_set_limit(set_limit) after first, before fraction */
        size_t set_limit;
    } rows[] = {
        {"", -1, 0.5, 512 * MiB, 512 * MiB, F, N, false, 0},
        {"limit:256M", -1, 0.5, 512 * MiB, 256 * MiB, B, B, false, 0},          /* the limit is lower */
        {"limit:512M", -1, 0.25, 256 * MiB, 256 * MiB, F, B, false, 0},         /* the fraction is lower */
        {"limit:512M", -1, 0.5, 512 * MiB, 512 * MiB, B, B, false, 0},          /* equal: the limit's */
        {"limit:256M", -1, 1, GiB, 256 * MiB, B, B, false, 0},                  /* 1: the limit back */
        {"limit:2G", -1, 1, GiB, 2 * GiB, B, B, false, 0},                      /* even above the device */
        {"", -1, 1, GiB, ALLOC_NO_LIMIT, N, N, false, 0},                       /* 1, no limit: none */
        {"", -1, 0, 0, 0, F, N, false, 0},                                      /* 0: nothing may be reserved */
        {"limit:512M", 0.25, 1, GiB, 512 * MiB, B, B, false, 0},                /* a later 1 lifts an earlier cap */
        {"limit:512M", 0.25, 0.375, 384 * MiB, 384 * MiB, F, B, false, 0},      /* a later one replaces it */
        {"per_process_memory_fraction:0.5", -1, 0.75, 768 * MiB, 768 * MiB, F, K, false, 0}, /* replaces the key's, up */
        {"per_process_memory_fraction:0.5", -1, 0.25, 256 * MiB, 256 * MiB, F, K, false, 0}, /* and down */
        {"limit:640M,per_process_memory_fraction:0.5", -1, 0.75, 768 * MiB, 640 * MiB, B, K, false, 0}, /* the limit stays */
        {"limit:768M,per_process_memory_fraction:0.5", -1, 1, GiB, 768 * MiB, B, K, false, 0}, /* 1: the limit, not the key */
        {"limit:256M,per_process_memory_fraction:0.5", -1, 1, GiB, 256 * MiB, B, B, false, 0}, /* the limit, lower */
        {"per_process_memory_fraction:0.5", 0.25, 0.75, 768 * MiB, 768 * MiB, F, K, false, 0}, /* the last call's */
        {"", -1, 0.5, 512 * MiB, 256 * MiB, B, N, true, 256 * MiB},            /* the set limit is lower */
        {"", -1, 0.25, 256 * MiB, 256 * MiB, F, N, true, 512 * MiB},           /* the fraction is */
        {"", -1, 1, GiB, 256 * MiB, B, N, true, 256 * MiB},                    /* 1: the set limit back */
        {"limit:256M", -1, 0.5, 512 * MiB, 512 * MiB, F, B, true, 768 * MiB},  /* a higher one lifts it */
        {"limit:256M", -1, 0.5, 512 * MiB, 512 * MiB, F, B, true, ALLOC_NO_LIMIT}, /* none: removed */
        {"limit:256M", -1, 1, GiB, ALLOC_NO_LIMIT, N, B, true, ALLOC_NO_LIMIT},
        {"", 0.25, 1, GiB, 640 * MiB, B, N, true, 640 * MiB},                  /* after a fraction */
        {"per_process_memory_fraction:0.5", -1, 0.75, 768 * MiB, 640 * MiB, B, K, true, 640 * MiB},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        alloc_config_t cfg = conf(rows[i].conf);
        alloc_mem_opts_t mo = {.capacity = GiB};
        alloc_mem_backend_t *m = alloc_mem_backend_create(&mo);
        alloc_t *a;
        assert_non_null(m);
        assert_int_equal(alloc_create(alloc_mem_backend(m), &cfg, &a), ALLOC_OK);
        alloc_limit_from_t from;
        size_t start_limit = oom_limit(a, &from), cap = 1;
        assert_int_equal(from, rows[i].start_from);
        /* the limit before any call, the key's share included, is alloc_conf_limit's of the device */
        assert_int_equal(alloc_conf_limit(&cfg, GiB), start_limit);
        if (rows[i].first >= 0) assert_int_equal(alloc_set_memory_fraction(a, rows[i].first, NULL), ALLOC_OK);
        size_t bytes = cfg.limit; /* the limit in bytes the call meets */
        if (rows[i].set) {
            assert_int_equal(alloc_set_limit(a, rows[i].set_limit), ALLOC_OK);
            bytes = rows[i].set_limit;
            assert_int_equal(oom_limit(a, &from), bytes); /* in force at once */
            assert_int_equal(from, bytes == ALLOC_NO_LIMIT ? N : B);
        }
        assert_int_equal(alloc_set_memory_fraction(a, rows[i].fraction, &cap), ALLOC_OK);
        size_t limit = oom_limit(a, &from);
        if (cap != rows[i].cap || limit != rows[i].limit || from != rows[i].from)
            fail_msg("row %zu (%s, fraction %g): cap %zu limit %zu from %d, want %zu %zu %d", i, rows[i].conf,
                     rows[i].fraction, cap, limit, (int)from, rows[i].cap, rows[i].limit, (int)rows[i].from);
        /* the rule itself, as a reader applies it to a recorded cap under the limit in bytes */
        assert_int_equal(alloc_fraction_limit(cap, rows[i].fraction >= 1, bytes), rows[i].limit);
        alloc_destroy(a);
        alloc_mem_backend_destroy(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_single),
        cmocka_unit_test(test_round_list),
        cmocka_unit_test(test_config_keys),
        cmocka_unit_test(test_torch_grammar),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_oversize),
        cmocka_unit_test(test_expandable_best_fit),
        cmocka_unit_test(test_expandable_holes),
        cmocka_unit_test(test_gc_order),
        cmocka_unit_test(test_gc_needs_limit),
        cmocka_unit_test(test_gc_pools),
        cmocka_unit_test(test_oom_release_available),
        cmocka_unit_test(test_oom_release_cached),
        cmocka_unit_test(test_replay_record_stream),
        cmocka_unit_test(test_replay_free_completed),
        cmocka_unit_test(test_replay_other_allocator),
        cmocka_unit_test(test_replay_limit),
        cmocka_unit_test(test_fraction_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
