/* bytemap.h — byte strings (a text, a frame's fields, a stack's frame ids) to uint64_t values,
 * found by their contents. A 64-bit hash finds the entry and the bytes decide: two keys of one
 * hash are two entries (the second takes the next key of the hash chain, bytemap_rekey), never
 * one. Every table that interns or deduplicates by contents on the reading side uses it (the
 * merge of PyTorch's history, advise's strings, the categories' parameter names, the viz's
 * classes and flame names). Header-only, like u64map.h.
 *
 * Test hook: built with -DGM_TEST_HASH_BITS=k, the hashes keep only k bits, so that distinct
 * keys collide on purpose (tests/unit/snapshot_collide.c). */
#ifndef GPUMEM_SNAPSHOT_BYTEMAP_H
#define GPUMEM_SNAPSHOT_BYTEMAP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot/record/u64map.h"

typedef struct bytemap {
    u64map idx;           /* hash (or a key of its chain) -> entry */
    unsigned char **keys; /* entry -> its bytes (a copy) */
    size_t *lens;
    uint64_t *vals;
    size_t n, cap;
} bytemap;

static inline uint64_t bytemap_hash(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    h = GM_NARROW_HASH(h);
    return h == U64MAP_EMPTY ? 0 : h;
}

/* The key tried after k when k's entry holds other contents. Full width even under the test
 * hook (a chain of k-bit keys would run out): a collision is forced on the first key only. */
static inline uint64_t bytemap_rekey(uint64_t k)
{
    k = u64map_hash(k + 0x9E3779B97F4A7C15ull);
    return k == U64MAP_EMPTY ? 0 : k;
}

/* The value of the key p[0..n), or NULL. */
static inline uint64_t *bytemap_get(const bytemap *m, const void *p, size_t n)
{
    for (uint64_t k = bytemap_hash(p, n);; k = bytemap_rekey(k)) {
        const uint64_t *e = u64map_get(&m->idx, k);
        if (!e) return NULL;
        if (m->lens[*e] == n && (!n || memcmp(m->keys[*e], p, n) == 0)) return &m->vals[*e];
    }
}

/* Puts p[0..n) -> v (replacing the value of the same bytes). 0, or -1 (out of memory). */
static inline int bytemap_put(bytemap *m, const void *p, size_t n, uint64_t v)
{
    uint64_t k = bytemap_hash(p, n);
    for (;; k = bytemap_rekey(k)) {
        const uint64_t *e = u64map_get(&m->idx, k);
        if (!e) break;
        if (m->lens[*e] == n && (!n || memcmp(m->keys[*e], p, n) == 0)) {
            m->vals[*e] = v;
            return 0;
        }
    }
    if (m->n == m->cap) {
        size_t c = m->cap ? 2 * m->cap : 64;
        unsigned char **nk = realloc(m->keys, c * sizeof *nk);
        if (nk) m->keys = nk;
        size_t *nl = nk ? realloc(m->lens, c * sizeof *nl) : NULL;
        if (nl) m->lens = nl;
        uint64_t *nv = nl ? realloc(m->vals, c * sizeof *nv) : NULL;
        if (!nv) return -1;
        m->vals = nv, m->cap = c;
    }
    unsigned char *copy = malloc(n ? n : 1);
    if (!copy) return -1;
    if (n) memcpy(copy, p, n);
    if (u64map_put(&m->idx, k, m->n) != 0) {
        free(copy);
        return -1;
    }
    m->keys[m->n] = copy, m->lens[m->n] = n, m->vals[m->n] = v;
    m->n++;
    return 0;
}

/* Strings (their bytes without the terminator). */
static inline uint64_t *bytemap_get_str(const bytemap *m, const char *s) { return bytemap_get(m, s, strlen(s)); }
static inline int bytemap_put_str(bytemap *m, const char *s, uint64_t v) { return bytemap_put(m, s, strlen(s), v); }

static inline void bytemap_free(bytemap *m)
{
    for (size_t i = 0; i < m->n; i++) free(m->keys[i]);
    free(m->keys), free(m->lens), free(m->vals);
    u64map_free(&m->idx);
    memset(m, 0, sizeof *m);
}

#endif
