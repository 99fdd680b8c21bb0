/* addr_map.h — the model's sweep's map of live allocations: address -> index in the model's
 * allocations. u64map.h's map (linear probing, backward-shift deletion, UINT64_MAX the empty
 * key) with a cheaper hash, for the one map every device allocation and free probes.
 *
 * Why its own. u64map's hash mixes every bit into the low ones its mask keeps (two multiplies,
 * three shifts and three xors: 9 instructions a probe, three probes an allocation and its free
 * on a long recording). Here the slot is the high bits of the address times 2^64 / phi
 * (Fibonacci hashing: a multiply and a shift), which spreads an arithmetic run of keys — device
 * addresses, multiples of 512 bytes or of 2 MiB — evenly over the slots. The map is private to
 * gm_analyze.c's sweep; u64map keeps its hash, so no other map's order changes. Header-only. */
#ifndef GPUMEM_SNAPSHOT_ADDR_MAP_H
#define GPUMEM_SNAPSHOT_ADDR_MAP_H

#include "snapshot/record/u64map.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct addr_map {
    uint64_t *keys, *vals; /* 1 << (64 - shift) slots each; U64MAP_EMPTY: a free slot */
    uint64_t mask, count;
    uint64_t limit; /* count at which the map grows: three quarters of its slots, as u64map */
    unsigned shift;
} addr_map;

static inline uint64_t addr_map_slot(const addr_map *m, uint64_t k) {
    return (k * 0x9e3779b97f4a7c15ull) >> m->shift;
}

static inline uint64_t addr_map_home(const void *m, uint64_t k) {
    return addr_map_slot(m, k);
}

/* Room for cap keys at a load of at most a half. 0, or -1 (out of memory). Made before any
 * other call: they do not make it (one test less an allocation and a free). */
static inline int addr_map_init(addr_map *m, uint64_t cap) {
    unsigned bits = 4;
    while ((1ull << bits) < cap * 2) bits++;
    uint64_t n = 1ull << bits;
    if (u64map_slots(n, &m->keys, &m->vals) != 0) return -1;
    m->mask = n - 1, m->count = 0, m->limit = n / 4 * 3, m->shift = 64 - bits;
    return 0;
}

static inline void addr_map_free(addr_map *m) {
    free(m->keys), free(m->vals);
    m->keys = m->vals = NULL;
    m->count = m->mask = m->limit = 0;
}

/* A pointer to k's value, or NULL. */
static inline uint64_t *addr_map_get(const addr_map *m, uint64_t k) {
    if (k == U64MAP_EMPTY) return NULL;
    for (uint64_t i = addr_map_slot(m, k);; i = (i + 1) & m->mask) {
        if (m->keys[i] == k) return &m->vals[i];
        if (m->keys[i] == U64MAP_EMPTY) return NULL;
    }
}

static __attribute__((noinline, cold)) int addr_map_grow(addr_map *m) {
    addr_map n;
    if (addr_map_init(&n, m->mask + 1) != 0) return -1;
    for (uint64_t i = 0; i <= m->mask; i++) {
        if (m->keys[i] == U64MAP_EMPTY) continue;
        uint64_t j = addr_map_slot(&n, m->keys[i]);
        while (n.keys[j] != U64MAP_EMPTY) j = (j + 1) & n.mask;
        n.keys[j] = m->keys[i];
        n.vals[j] = m->vals[i];
    }
    n.count = m->count;
    addr_map_free(m);
    *m = n;
    return 0;
}

/* u64map_swap's: puts k -> v with one probe; 1 when k was there (its old value in *old), 0 when
 * it was not, -1 when it could not be put (out of memory, or the reserved key). */
static inline __attribute__((always_inline)) int addr_map_swap(addr_map *m, uint64_t k, uint64_t v, uint64_t *old) {
    if (k == U64MAP_EMPTY) return -1;
    uint64_t i = addr_map_slot(m, k);
    while (m->keys[i] != U64MAP_EMPTY && m->keys[i] != k) i = (i + 1) & m->mask;
    if (m->keys[i] == k) { /* replaced: never grows, so never fails */
        *old = m->vals[i];
        m->vals[i] = v;
        return 1;
    }
    if (m->count >= m->limit) {
        if (addr_map_grow(m) != 0) return -1;
        for (i = addr_map_slot(m, k); m->keys[i] != U64MAP_EMPTY;) i = (i + 1) & m->mask;
    }
    m->keys[i] = k, m->vals[i] = v, m->count++;
    return 0;
}

/* Removes k; 1 when it was there (its value in *v), else 0. */
static inline __attribute__((always_inline)) int addr_map_del(addr_map *m, uint64_t k, uint64_t *v) {
    if (k == U64MAP_EMPTY) return 0;
    uint64_t i = addr_map_slot(m, k);
    while (m->keys[i] != k) {
        if (m->keys[i] == U64MAP_EMPTY) return 0;
        i = (i + 1) & m->mask;
    }
    *v = m->vals[i];
    u64map_unprobe(m->keys, m->vals, m->mask, i, addr_map_home, m);
    m->count--;
    return 1;
}

#endif
