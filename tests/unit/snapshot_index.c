/* snapshot_index.c — the writer's address index (snapshot/record/addr_index.h): an ordered map with
 * floor lookup, checked against a plain sorted array under random inserts, replacements and
 * deletes, with the structure's invariant checker after every operation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "snapshot/record/addr_index.h"

/* The reference: a sorted array of (key, val). */
typedef struct ref {
    uint64_t *k, *v;
    size_t n, cap;
} ref;

static size_t ref_lower(const ref *r, uint64_t x) { /* first index with k >= x */
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (r->k[m] < x) lo = m + 1;
        else hi = m;
    }
    return lo;
}

static void ref_put(ref *r, uint64_t k, uint64_t v) {
    size_t i = ref_lower(r, k);
    if (i < r->n && r->k[i] == k) {
        r->v[i] = v;
        return;
    }
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 64;
        r->k = realloc(r->k, r->cap * sizeof *r->k);
        r->v = realloc(r->v, r->cap * sizeof *r->v);
        assert_non_null(r->k);
        assert_non_null(r->v);
    }
    memmove(r->k + i + 1, r->k + i, (r->n - i) * sizeof *r->k);
    memmove(r->v + i + 1, r->v + i, (r->n - i) * sizeof *r->v);
    r->k[i] = k, r->v[i] = v;
    r->n++;
}

static int ref_del(ref *r, uint64_t k) {
    size_t i = ref_lower(r, k);
    if (i == r->n || r->k[i] != k) return 0;
    memmove(r->k + i, r->k + i + 1, (r->n - i - 1) * sizeof *r->k);
    memmove(r->v + i, r->v + i + 1, (r->n - i - 1) * sizeof *r->v);
    r->n--;
    return 1;
}

static void expect_floor(const addr_index *t, const ref *r, uint64_t x) {
    size_t i = ref_lower(r, x);
    if (i < r->n && r->k[i] == x) i++; /* i = number of keys <= x */
    uint64_t k = 0, v = 0;
    int found = addr_index_floor(t, x, &k, &v);
    if (i == 0) {
        assert_int_equal(found, 0);
    } else {
        assert_int_equal(found, 1);
        assert_int_equal(k, r->k[i - 1]);
        assert_int_equal(v, r->v[i - 1]);
    }
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Random operations on a key space small enough that deletes and replacements hit: the index
 * always equals the reference, floor answers equal the reference's, invariants always hold. */
static void matches_reference(void **state) {
    (void)state;
    static const uint64_t spaces[] = {50, 3000, 1ull << 40};
    for (size_t s = 0; s < sizeof spaces / sizeof spaces[0]; s++) {
        addr_index t = {0};
        ref r = {0};
        for (int op = 0; op < 40000; op++) {
            uint64_t k = next_rand() % spaces[s] * 512; /* addresses: 512-byte granules */
            uint64_t roll = next_rand() % 100;
            /* phases: grow, then mostly shrink, then mixed (exercises merges and height loss) */
            int grow = op < 15000 ? 70 : op < 30000 ? 25 : 50;
            if ((int)roll < grow) {
                uint64_t v = next_rand();
                assert_int_equal(addr_index_put(&t, k, v), 0);
                ref_put(&r, k, v);
            } else {
                assert_int_equal(addr_index_del(&t, k), ref_del(&r, k));
            }
            assert_int_equal(t.count, r.n);
            if (r.n < 2000 || op % 97 == 0) assert_int_equal(addr_index_check(&t), 0);
            expect_floor(&t, &r, next_rand() % (spaces[s] * 512 + 1024));
            if (r.n) {
                size_t i = next_rand() % r.n;
                expect_floor(&t, &r, r.k[i]);     /* exact hit */
                expect_floor(&t, &r, r.k[i] + 1); /* interior */
                expect_floor(&t, &r, r.k[i] - 1); /* just below: the previous entry */
            }
        }
        /* delete everything that is left: the tree shrinks back to empty */
        while (r.n) {
            uint64_t k = r.k[next_rand() % r.n];
            assert_int_equal(addr_index_del(&t, k), 1);
            ref_del(&r, k);
            if (r.n % 64 == 0) assert_int_equal(addr_index_check(&t), 0);
        }
        assert_null(t.root);
        assert_int_equal(t.height, 0);
        assert_int_equal(addr_index_floor(&t, UINT64_MAX, NULL, NULL), 0);
        addr_index_free(&t);
        free(r.k), free(r.v);
    }
}

/* Sequential keys (the usual pattern of a bump allocator) and the extreme keys 0 and
 * UINT64_MAX; the height stays logarithmic: 100,000 entries fit in a few levels. */
static void sequential_and_extremes(void **state) {
    (void)state;
    addr_index t = {0};
    assert_int_equal(addr_index_floor(&t, 5, NULL, NULL), 0);
    for (uint64_t i = 0; i < 100000; i++) assert_int_equal(addr_index_put(&t, 0x7f0000000000ull + i * 4096, i), 0);
    assert_int_equal(addr_index_check(&t), 0);
    assert_true(t.height <= 4);
    uint64_t k, v;
    assert_int_equal(addr_index_floor(&t, 0x7f0000000000ull + 5 * 4096 + 100, &k, &v), 1);
    assert_int_equal(k, 0x7f0000000000ull + 5 * 4096);
    assert_int_equal(v, 5);
    assert_int_equal(addr_index_floor(&t, 0x7f0000000000ull - 1, &k, &v), 0);
    assert_int_equal(addr_index_put(&t, 0, 11), 0);
    assert_int_equal(addr_index_put(&t, UINT64_MAX, 12), 0);
    assert_int_equal(addr_index_floor(&t, 1, &k, &v), 1);
    assert_int_equal(v, 11);
    assert_int_equal(addr_index_floor(&t, UINT64_MAX, &k, &v), 1);
    assert_int_equal(v, 12);
    assert_int_equal(addr_index_put(&t, UINT64_MAX, 13), 0); /* replace: count unchanged */
    assert_int_equal(t.count, 100002);
    for (uint64_t i = 0; i < 100000; i += 2) assert_int_equal(addr_index_del(&t, 0x7f0000000000ull + i * 4096), 1);
    assert_int_equal(addr_index_check(&t), 0);
    assert_int_equal(addr_index_del(&t, 0x7f0000000000ull), 0); /* already gone */
    assert_int_equal(addr_index_floor(&t, 0x7f0000000000ull + 4096 * 4 + 1, &k, &v), 1);
    assert_int_equal(v, 3); /* 4 was deleted: the floor is 3 */
    addr_index_free(&t);
    assert_int_equal(t.count, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_reference),
        cmocka_unit_test(sequential_and_extremes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
