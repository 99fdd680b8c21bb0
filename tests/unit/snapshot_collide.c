/* snapshot_collide.c — tables that intern or deduplicate by contents keep two contents of one
 * hash apart. The hashes are narrowed on purpose (the test hook GM_TEST_HASH_BITS, u64map.h):
 * every key collides, and only a comparison of the contents can tell them apart.
 *   - bytemap.h (the merge of PyTorch's history: frames, stacks, strings, streams; every
 *     reading-side table built on it), 2-bit hashes;
 *   - the recorder's stack table (record/rec.c, this test's copy built with 1-bit hashes: every
 *     stack has the same key), two call sites recorded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#define GM_TEST_HASH_BITS 2
#include "snapshot/record/bytemap.h"
#include "snapshot/record/rec.h"
#include "snapshot/record/rec_internal.h"
#include "tests/unit/snapshot_test.h"

/* 600 strings, 600 frame-like keys and 600 stacks of ids, all of 4 hashes: each its own value */
static void bytemap_keeps_collisions_apart(void **state)
{
    (void)state;
    bytemap m = {0};
    char s[64];
    for (uint64_t i = 0; i < 600; i++) {
        snprintf(s, sizeof s, "name.%llu", (unsigned long long)i);
        assert_null(bytemap_get_str(&m, s));
        assert_int_equal(bytemap_put_str(&m, s, i), 0);
        int64_t ids[3] = {(int64_t)i, 7, -1};
        assert_int_equal(bytemap_put(&m, ids, sizeof ids, 1000 + i), 0);
    }
    assert_int_equal(m.n, 1200);
    for (uint64_t i = 0; i < 600; i++) {
        snprintf(s, sizeof s, "name.%llu", (unsigned long long)i);
        uint64_t *v = bytemap_get_str(&m, s);
        assert_non_null(v);
        assert_int_equal(*v, i);
        int64_t ids[3] = {(int64_t)i, 7, -1};
        v = bytemap_get(&m, ids, sizeof ids);
        assert_non_null(v);
        assert_int_equal(*v, 1000 + i);
    }
    /* a prefix, the empty key and one more byte are other keys */
    assert_null(bytemap_get_str(&m, "name."));
    assert_null(bytemap_get(&m, "", 0));
    assert_null(bytemap_get(&m, "name.1", 7));
    bytemap_free(&m);
}

__attribute__((noinline)) void collide_site_alpha(uint64_t a)
{
    rec_event(REC_ALLOC, 0, 0, a, 256, 256, a);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void collide_site_beta(uint64_t a)
{
    rec_event(REC_ALLOC, 0, 0, a, 512, 512, a);
    __asm__ volatile("" ::: "memory");
}

/* the recorder: two call sites of one key are two stacks; each event keeps its own */
static void recorder_stacks_of_one_hash(void **state)
{
    (void)state;
    char path[512];
    snap_path(path, sizeof path, "collide.db");
    unlink(path);
    rec_options o = {.path = path, .stacks = 16, .fork_record = 0, .ring = 4096, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    for (uint64_t i = 0; i < 50; i++) {
        collide_site_alpha(0x10000 + i * 1024);
        collide_site_beta(0x90000 + i * 1024);
    }
    rec_test_reset(); /* closes */
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT stack) FROM events"), 2);
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT stack) FROM stacks"), 2);
    /* the sizes say the site: one stack for each size, never shared */
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT stack) FROM events WHERE size = 256"), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events a JOIN events b ON a.stack = b.stack "
                                  "WHERE a.size = 256 AND b.size = 512"), 0);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bytemap_keeps_collisions_apart),
        cmocka_unit_test(recorder_stacks_of_one_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
