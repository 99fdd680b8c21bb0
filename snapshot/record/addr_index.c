/* addr_index.c — the B+ tree behind addr_index.h.
 *
 * Layout. A node holds n sorted keys. In a leaf, vals[i] belongs to keys[i]. In an internal
 * node, kids[i] is a subtree and keys[i] is that subtree's exact minimum; so keys[0] of any node
 * is the minimum of everything under it. Keeping the minima exact (refreshed on the way back up
 * from every insert and delete) is what makes floor lookup a single descent: at an internal
 * node, the child to enter is the last one whose minimum is <= x, and it is then guaranteed to
 * hold an entry <= x — no backtracking into a left sibling.
 *
 * Insert splits a full node in two halves before adding to it; a split at the root adds a
 * level. Delete refills a child that fell under AI_MIN entries from a neighbour: the two are
 * merged when they fit in one node, else their entries are shared evenly. An internal root left
 * with one child is replaced by that child, an empty leaf root by nothing.
 */
#include "snapshot/record/addr_index.h"

#include <stdlib.h>
#include <string.h>

#define AI_B 32
#define AI_MIN (AI_B / 4)

struct ai_node {
    uint32_t n;
    uint64_t keys[AI_B];
    union {
        uint64_t vals[AI_B];   /* leaves */
        ai_node *kids[AI_B];   /* internal nodes */
    };
};

/* Index of the last key <= x, or -1 when x is below every key (n >= 1). */
static int last_le(const ai_node *nd, uint64_t x) {
    int lo = 0, hi = (int)nd->n; /* answer in [lo - 1, hi - 1] */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (nd->keys[mid] <= x) lo = mid + 1;
        else hi = mid;
    }
    return lo - 1;
}

/* Moves entries [from, n) of a node into an empty node dst (same kind of node). */
static void move_tail(ai_node *src, uint32_t from, ai_node *dst) {
    uint32_t k = src->n - from;
    memcpy(dst->keys, src->keys + from, k * sizeof src->keys[0]);
    memcpy(dst->vals, src->vals + from, k * sizeof src->vals[0]); /* kids alias vals: same size */
    dst->n = k;
    src->n = from;
}

/* Opens a hole at position pos (shifting pos.. right) and puts key/slot there; n < AI_B. */
static void insert_at(ai_node *nd, uint32_t pos, uint64_t key, uint64_t slot) {
    memmove(nd->keys + pos + 1, nd->keys + pos, (nd->n - pos) * sizeof nd->keys[0]);
    memmove(nd->vals + pos + 1, nd->vals + pos, (nd->n - pos) * sizeof nd->vals[0]);
    nd->keys[pos] = key;
    nd->vals[pos] = slot;
    nd->n++;
}

static void remove_at(ai_node *nd, uint32_t pos) {
    memmove(nd->keys + pos, nd->keys + pos + 1, (nd->n - pos - 1) * sizeof nd->keys[0]);
    memmove(nd->vals + pos, nd->vals + pos + 1, (nd->n - pos - 1) * sizeof nd->vals[0]);
    nd->n--;
}

static uint64_t slot_of(const ai_node *p) { return (uint64_t)(uintptr_t)p; }

/* Insertion never fails half-way: addr_index_put first sets aside enough nodes for a split at
 * every level plus a new root (height + 2), and the split path takes them from there. */
static ai_node *take_spare(addr_index *t) {
    ai_node *nd = t->spare;
    t->spare = nd->kids[0];
    t->nspare--;
    return nd;
}

/* Puts key/slot at position pos of nd; when nd is full, splits it first and returns the new
 * right half (which the caller links into the parent), else NULL. */
static ai_node *put_at(addr_index *t, ai_node *nd, uint32_t pos, uint64_t key, uint64_t slot) {
    if (nd->n < AI_B) {
        insert_at(nd, pos, key, slot);
        return NULL;
    }
    ai_node *right = take_spare(t);
    move_tail(nd, AI_B / 2, right);
    if (pos <= AI_B / 2) insert_at(nd, pos, key, slot); /* pos == B/2: end of the left half */
    else insert_at(right, pos - AI_B / 2, key, slot);
    return right;
}

/* Inserts into the subtree nd of height h; returns a new right sibling when nd split. */
static ai_node *put_rec(addr_index *t, ai_node *nd, int h, uint64_t key, uint64_t val) {
    int i = last_le(nd, key);
    if (h == 0) {
        if (i >= 0 && nd->keys[i] == key) {
            nd->vals[i] = val;
            return NULL;
        }
        t->count++;
        return put_at(t, nd, (uint32_t)(i + 1), key, val);
    }
    if (i < 0) i = 0; /* a new minimum goes into the first child */
    ai_node *split = put_rec(t, nd->kids[i], h - 1, key, val);
    nd->keys[i] = nd->kids[i]->keys[0];
    if (!split) return NULL;
    return put_at(t, nd, (uint32_t)i + 1, split->keys[0], slot_of(split));
}

int addr_index_put(addr_index *t, uint64_t key, uint64_t val) {
    int need = t->root ? t->height + 2 : 1;
    while (t->nspare < need) {
        ai_node *nd = malloc(sizeof *nd);
        if (!nd) return -1; /* nothing changed; the spares stay for the next try */
        nd->kids[0] = t->spare;
        t->spare = nd;
        t->nspare++;
    }
    if (!t->root) {
        ai_node *leaf = take_spare(t);
        leaf->n = 1;
        leaf->keys[0] = key;
        leaf->vals[0] = val;
        t->root = leaf;
        t->height = 0;
        t->count = 1;
        return 0;
    }
    ai_node *split = put_rec(t, t->root, t->height, key, val);
    if (split) {
        ai_node *root = take_spare(t);
        root->n = 2;
        root->keys[0] = t->root->keys[0];
        root->kids[0] = t->root;
        root->keys[1] = split->keys[0];
        root->kids[1] = split;
        t->root = root;
        t->height++;
    }
    return 0;
}

/* Child i of nd (height >= 1) has fewer than AI_MIN entries: merge it with a neighbour when
 * both fit in one node, else share their entries evenly (both then have >= AI_B/2). */
static void refill(ai_node *nd, int i) {
    int j = i + 1 < (int)nd->n ? i + 1 : i - 1;
    int li = i < j ? i : j, ri = li + 1;
    ai_node *l = nd->kids[li], *r = nd->kids[ri];
    uint32_t total = l->n + r->n;
    if (total <= AI_B) {
        memcpy(l->keys + l->n, r->keys, r->n * sizeof l->keys[0]);
        memcpy(l->vals + l->n, r->vals, r->n * sizeof l->vals[0]);
        l->n = total;
        free(r);
        remove_at(nd, (uint32_t)ri);
    } else if (l->n > r->n) {
        uint32_t k = l->n - total / 2; /* move l's last k entries to the front of r */
        memmove(r->keys + k, r->keys, r->n * sizeof r->keys[0]);
        memmove(r->vals + k, r->vals, r->n * sizeof r->vals[0]);
        memcpy(r->keys, l->keys + l->n - k, k * sizeof r->keys[0]);
        memcpy(r->vals, l->vals + l->n - k, k * sizeof r->vals[0]);
        r->n += k;
        l->n -= k;
        nd->keys[ri] = r->keys[0];
    } else {
        uint32_t k = r->n - total / 2; /* move r's first k entries to the end of l */
        memcpy(l->keys + l->n, r->keys, k * sizeof l->keys[0]);
        memcpy(l->vals + l->n, r->vals, k * sizeof l->vals[0]);
        memmove(r->keys, r->keys + k, (r->n - k) * sizeof r->keys[0]);
        memmove(r->vals, r->vals + k, (r->n - k) * sizeof r->vals[0]);
        l->n += k;
        r->n -= k;
        nd->keys[ri] = r->keys[0];
    }
    nd->keys[li] = l->keys[0];
}

static int del_rec(ai_node *nd, int h, uint64_t key) {
    int i = last_le(nd, key);
    if (i < 0) return 0;
    if (h == 0) {
        if (nd->keys[i] != key) return 0;
        remove_at(nd, (uint32_t)i);
        return 1;
    }
    ai_node *kid = nd->kids[i];
    if (!del_rec(kid, h - 1, key)) return 0;
    if (kid->n > 0) nd->keys[i] = kid->keys[0];
    if (kid->n < AI_MIN && nd->n > 1) refill(nd, i);
    return 1;
}

int addr_index_del(addr_index *t, uint64_t key) {
    if (!t->root || !del_rec(t->root, t->height, key)) return 0;
    t->count--;
    ai_node *root = t->root;
    if (t->height > 0 && root->n == 1) {
        t->root = root->kids[0];
        t->height--;
        free(root);
    } else if (t->height == 0 && root->n == 0) {
        t->root = NULL;
        free(root);
    }
    return 1;
}

int addr_index_floor(const addr_index *t, uint64_t x, uint64_t *key, uint64_t *val) {
    const ai_node *nd = t->root;
    if (!nd) return 0;
    for (int h = t->height;; h--) {
        int i = last_le(nd, x);
        if (i < 0) return 0; /* x is below the minimum of the whole tree (only at the root) */
        if (h == 0) {
            if (key) *key = nd->keys[i];
            if (val) *val = nd->vals[i];
            return 1;
        }
        nd = nd->kids[i];
    }
}

static void free_rec(ai_node *nd, int h) {
    if (h > 0)
        for (uint32_t i = 0; i < nd->n; i++) free_rec(nd->kids[i], h - 1);
    free(nd);
}

void addr_index_free(addr_index *t) {
    if (t->root) free_rec(t->root, t->height);
    while (t->spare) free(take_spare(t));
    memset(t, 0, sizeof *t);
}

/* Checks the subtree at nd (height h) whose keys must lie in [lo, hi] ; counts its entries. */
static int check_rec(const ai_node *nd, int h, int is_root, uint64_t lo, uint64_t hi,
                     uint64_t *count) {
    if (nd->n > AI_B) return 1;
    if (!is_root && nd->n < AI_MIN) return 2;
    if (is_root && nd->n < (h > 0 ? 2u : 1u)) return 3;
    for (uint32_t i = 0; i < nd->n; i++) {
        if (nd->keys[i] < lo || nd->keys[i] > hi) return 4;
        if (i > 0 && nd->keys[i] <= nd->keys[i - 1]) return 5;
    }
    if (h == 0) {
        *count += nd->n;
        return 0;
    }
    for (uint32_t i = 0; i < nd->n; i++) {
        const ai_node *kid = nd->kids[i];
        if (!kid || kid->n == 0) return 6;
        if (kid->keys[0] != nd->keys[i]) return 7; /* the separator is the child's exact minimum */
        uint64_t khi = i + 1 < nd->n ? nd->keys[i + 1] - 1 : hi;
        int rc = check_rec(kid, h - 1, 0, nd->keys[i], khi, count);
        if (rc) return rc;
    }
    return 0;
}

int addr_index_check(const addr_index *t) {
    if (!t->root) return t->count == 0 && t->height == 0 ? 0 : 8;
    uint64_t n = 0;
    int rc = check_rec(t->root, t->height, 1, 0, UINT64_MAX, &n);
    if (rc) return rc;
    return n == t->count ? 0 : 9;
}
