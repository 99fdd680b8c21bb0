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

static inline int u64map_init(u64map *m, uint64_t cap) {
    uint64_t n = 16;
    while (n < cap * 2) n <<= 1;
    m->keys = malloc(n * sizeof *m->keys);
    m->vals = malloc(n * sizeof *m->vals);
    if (!m->keys || !m->vals) {
        free(m->keys), free(m->vals);
        m->keys = m->vals = NULL;
        return -1;
    }
    memset(m->keys, 0xff, n * sizeof *m->keys);
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

/* Removes k; returns 1 if it was there (value in *v when v != NULL). */
static inline int u64map_del(u64map *m, uint64_t k, uint64_t *v) {
    if (!m->keys || k == U64MAP_EMPTY) return 0;
    uint64_t i = u64map_hash(k) & m->mask;
    while (m->keys[i] != k) {
        if (m->keys[i] == U64MAP_EMPTY) return 0;
        i = (i + 1) & m->mask;
    }
    if (v) *v = m->vals[i];
    /* backward shift: move later entries of the probe run into the hole */
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & m->mask;
        if (m->keys[j] == U64MAP_EMPTY) break;
        uint64_t home = u64map_hash(m->keys[j]) & m->mask;
        /* can entry j move to i? only if its home is not in (i, j] cyclically */
        if (((j - home) & m->mask) >= ((j - i) & m->mask)) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->keys[i] = U64MAP_EMPTY;
    m->count--;
    return 1;
}

#endif
