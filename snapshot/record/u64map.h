/* u64map.h — a small open-addressing hash map from uint64_t keys to uint64_t values, with
 * linear probing and backward-shift deletion (no tombstones, so a long run of inserts and
 * deletes — allocations and frees — never degrades). Used by the writer and the readers.
 * Key UINT64_MAX is reserved (empty slot marker). Header-only: snapshot/, and preload/torch_trace.c
 * (which links the recorder). */
#ifndef GPUMEM_SNAPSHOT_U64MAP_H
#define GPUMEM_SNAPSHOT_U64MAP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define U64MAP_EMPTY UINT64_MAX

/* A content hash as a table that interns by contents uses it: whole, or only k bits of it when
 * built with -DGM_TEST_HASH_BITS=k, so that distinct contents collide on purpose (the test hook
 * of tests/unit/snapshot_collide.c). */
#ifdef GM_TEST_HASH_BITS
#define GM_NARROW_HASH(h) ((uint64_t)(h) & ((1ull << (GM_TEST_HASH_BITS)) - 1))
#else
#define GM_NARROW_HASH(h) ((uint64_t)(h))
#endif

typedef struct u64map {
    uint64_t *keys, *vals;
    uint64_t mask, count;
} u64map;

static inline uint64_t u64map_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

/* n empty slots: *keys all U64MAP_EMPTY, *vals; 0, or -1 (out of memory: both NULL). Shared with
 * addr_map.h. */
static inline int u64map_slots(uint64_t n, uint64_t **keys, uint64_t **vals) {
    *keys = malloc(n * sizeof **keys);
    *vals = malloc(n * sizeof **vals);
    if (!*keys || !*vals) {
        free(*keys), free(*vals);
        *keys = *vals = NULL;
        return -1;
    }
    memset(*keys, 0xff, n * sizeof **keys);
    return 0;
}

static inline int u64map_init(u64map *m, uint64_t cap) {
    uint64_t n = 16;
    while (n < cap * 2) n <<= 1;
    if (u64map_slots(n, &m->keys, &m->vals) != 0) return -1;
    m->mask = n - 1;
    m->count = 0;
    return 0;
}

static inline void u64map_free(u64map *m) {
    free(m->keys), free(m->vals);
    m->keys = m->vals = NULL;
    m->count = m->mask = 0;
}

/* Returns a pointer to the value, or NULL. */
static inline uint64_t *u64map_get(const u64map *m, uint64_t k) {
    if (!m->keys || k == U64MAP_EMPTY) return NULL;
    for (uint64_t i = u64map_hash(k) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == k) return &m->vals[i];
        if (m->keys[i] == U64MAP_EMPTY) return NULL;
    }
}

static inline int u64map_grow(u64map *m) {
    u64map n;
    if (u64map_init(&n, (m->mask + 1)) != 0) return -1;
    for (uint64_t i = 0; i <= m->mask; i++) {
        if (m->keys[i] == U64MAP_EMPTY) continue;
        uint64_t j = u64map_hash(m->keys[i]) & n.mask;
        while (n.keys[j] != U64MAP_EMPTY) j = (j + 1) & n.mask;
        n.keys[j] = m->keys[i];
        n.vals[j] = m->vals[i];
    }
    n.count = m->count;
    u64map_free(m);
    *m = n;
    return 0;
}

/* Inserts or replaces. Returns 0, or -1 (out of memory, or the reserved key). */
static inline int u64map_put(u64map *m, uint64_t k, uint64_t v) {
    if (k == U64MAP_EMPTY) return -1;
    if (!m->keys && u64map_init(m, 64) != 0) return -1;
    if ((m->count + 1) * 4 > (m->mask + 1) * 3 && u64map_grow(m) != 0) return -1;
    uint64_t i = u64map_hash(k) & m->mask;
    while (m->keys[i] != U64MAP_EMPTY && m->keys[i] != k) i = (i + 1) & m->mask;
    if (m->keys[i] == U64MAP_EMPTY) m->count++;
    m->keys[i] = k;
    m->vals[i] = v;
    return 0;
}

/* Puts k -> v with one probe, saying what it held: 1 when k was there (its old value in *old),
 * 0 when it was not, -1 when it could not be put (out of memory, or the reserved key). */
static inline int u64map_swap(u64map *m, uint64_t k, uint64_t v, uint64_t *old) {
    if (k == U64MAP_EMPTY) return -1;
    if (!m->keys && u64map_init(m, 64) != 0) return -1;
    uint64_t i = u64map_hash(k) & m->mask;
    while (m->keys[i] != U64MAP_EMPTY && m->keys[i] != k) i = (i + 1) & m->mask;
    if (m->keys[i] == k) { /* replaced: never grows, so never fails */
        *old = m->vals[i];
        m->vals[i] = v;
        return 1;
    }
    if ((m->count + 1) * 4 > (m->mask + 1) * 3) { /* as u64map_put grows */
        if (u64map_grow(m) != 0) return -1;
        for (i = u64map_hash(k) & m->mask; m->keys[i] != U64MAP_EMPTY;) i = (i + 1) & m->mask;
    }
    m->keys[i] = k, m->vals[i] = v, m->count++;
    return 0;
}

/* Linear probing's deletion of the key in slot i (of mask + 1): the later entries of its probe
 * run move back into the hole, each only where its home slot (home(ctx, key)) is not in (i, j]
 * cyclically, and the last hole is emptied. Shared with addr_map.h, whose homes differ. */
static inline __attribute__((always_inline)) void u64map_unprobe(uint64_t *keys, uint64_t *vals, uint64_t mask,
                                                                 uint64_t i,
                                                                 uint64_t (*home)(const void *, uint64_t),
                                                                 const void *ctx) {
    for (uint64_t j = i;;) {
        j = (j + 1) & mask;
        if (keys[j] == U64MAP_EMPTY) break;
        uint64_t h = home(ctx, keys[j]);
        if (((j - h) & mask) >= ((j - i) & mask)) {
            keys[i] = keys[j];
            vals[i] = vals[j];
            i = j;
        }
    }
    keys[i] = U64MAP_EMPTY;
}

static inline uint64_t u64map_home(const void *m, uint64_t k) {
    return u64map_hash(k) & ((const u64map *)m)->mask;
}

/* Removes k; returns 1 if it was there (value in *v when v != NULL). */
static inline int u64map_del(u64map *m, uint64_t k, uint64_t *v) {
    if (!m->keys || k == U64MAP_EMPTY) return 0;
    uint64_t i = u64map_hash(k) & m->mask;
    while (m->keys[i] != k) {
        if (m->keys[i] == U64MAP_EMPTY) return 0;
        i = (i + 1) & m->mask;
    }
    if (v) *v = m->vals[i];
    u64map_unprobe(m->keys, m->vals, m->mask, i, u64map_home, m);
    m->count--;
    return 1;
}

#endif
