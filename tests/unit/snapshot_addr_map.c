/* snapshot_addr_map.c — the model's sweep's map of live allocations (snapshot/read/addr_map.h)
 * holds what u64map.h's map holds under the same puts, replacements and deletes: addresses as
 * a program's allocations have them (multiples of 512 bytes and of 2 MiB, which share their low
 * bits), through growth and backward shifts, with the map's count and every key checked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "snapshot/read/addr_map.h"

/* every key of the reference found with its value, and the counts equal */
static void same_contents(const addr_map *m, const u64map *ref) {
    assert_int_equal(m->count, ref->count);
    for (uint64_t i = 0; ref->keys && i <= ref->mask; i++) {
        if (ref->keys[i] == U64MAP_EMPTY) continue;
        uint64_t *v = addr_map_get(m, ref->keys[i]);
        assert_non_null(v);
        assert_int_equal(*v, ref->vals[i]);
    }
}

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void matches_u64map(void **state) {
    (void)state;
    static const uint64_t align[] = {512, 2u << 20};
    for (int a = 0; a < 2; a++) {
        addr_map m;
        u64map ref = {0};
        assert_int_equal(addr_map_init(&m, 16), 0); /* small: grows several times */
        uint64_t seed = 0x9e3779b97f4a7c15ull + (uint64_t)a;
        for (int op = 0; op < 200000; op++) {
            /* a few thousand addresses at most: puts find them again, deletes find some absent */
            uint64_t k = 0x7f0000000000ull + (next_rand(&seed) % 3000) * align[a];
            uint64_t v = (uint64_t)op, old = 0, got = 0, want = 0;
            if (next_rand(&seed) % 3) {
                uint64_t *was = u64map_get(&ref, k);
                int had = was != NULL;
                if (was) want = *was;
                assert_int_equal(addr_map_swap(&m, k, v, &old), had);
                if (had) assert_int_equal(old, want);
                assert_int_equal(u64map_put(&ref, k, v), 0);
            } else {
                int had = u64map_del(&ref, k, &want);
                assert_int_equal(addr_map_del(&m, k, &got), had);
                if (had) assert_int_equal(got, want);
                assert_null(addr_map_get(&m, k));
            }
            if (op % 1000 == 0) same_contents(&m, &ref);
        }
        same_contents(&m, &ref);
        /* the reserved key is never put, and never found */
        uint64_t old;
        assert_int_equal(addr_map_swap(&m, U64MAP_EMPTY, 1, &old), -1);
        assert_null(addr_map_get(&m, U64MAP_EMPTY));
        assert_int_equal(addr_map_del(&m, U64MAP_EMPTY, &old), 0);
        addr_map_free(&m);
        u64map_free(&ref);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_u64map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
