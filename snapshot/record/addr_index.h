/* addr_index.h — an ordered map from uint64_t keys (addresses) to uint64_t values, with floor
 * lookup: "the entry with the largest key <= x". Internal to snapshot/.
 *
 * The recorder's writer uses it to resolve a kernel argument (an interior pointer) to the live
 * allocation that contains it: floor(word) gives the allocation that starts at or before the
 * word; the word is inside it when word < start + size. A hash map cannot answer that, and
 * tsearch(3) has no floor lookup.
 *
 * It is a B+ tree with nodes of AI_B keys (all entries in leaves, every node's keys[0] the exact
 * minimum of its subtree), so put, del and floor are O(log n) with a few cache lines per level:
 * 10,000 live allocations are three levels. Nodes other than the root hold at least AI_B/4
 * entries (deletion merges or redistributes underfull nodes), so the height never outgrows the
 * number of entries. Single-threaded; every function is O(log n) except free and check.
 */
#ifndef GPUMEM_SNAPSHOT_ADDR_INDEX_H
#define GPUMEM_SNAPSHOT_ADDR_INDEX_H

#include <stdint.h>

typedef struct ai_node ai_node;

typedef struct addr_index {
    ai_node *root;  /* NULL when empty */
    int height;     /* 0: the root is a leaf */
    uint64_t count; /* entries */
    ai_node *spare; /* nodes allocated ahead of an insert (linked through kids[0]) */
    int nspare;
} addr_index;

/* Inserts key -> val, or replaces the value of an existing key. Returns 0, or -1 when out of
 * memory (the index is then unchanged). An all-zero addr_index is a valid empty index. */
int addr_index_put(addr_index *t, uint64_t key, uint64_t val);

/* Removes key. Returns 1 when it was there, 0 when not. Never fails. */
int addr_index_del(addr_index *t, uint64_t key);

/* The entry with the largest key <= x: returns 1 and fills *key and *val (either may be NULL),
 * or returns 0 when every key is greater than x (or the index is empty). */
int addr_index_floor(const addr_index *t, uint64_t x, uint64_t *key, uint64_t *val);

/* Frees every node; the index is empty (and reusable) afterwards. */
void addr_index_free(addr_index *t);

/* Checks every invariant of the structure (key order, exact subtree minima, separators, node
 * fill, equal leaf depth, count). Returns 0 when sound, else a small positive code naming the
 * first violation found. For tests: O(n). */
int addr_index_check(const addr_index *t);

#endif
