/* check.c — the snapshot walk and the invariant checker.
 *
 * alloc_check() recomputes everything the allocator maintains incrementally (tiling of every
 * segment, neighbour rules, index membership, red-black shape, mapped-slot bits, every stat)
 * and compares. Tests call it after every operation, so a bookkeeping slip shows up at the
 * operation that caused it, not thousands of operations later.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/internal.h"

/* ---- walk ---------------------------------------------------------------------------------- */

typedef struct {
    alloc_walk_block_t *v;
    size_t n, cap;
} wbuf_t;

static int wpush(wbuf_t *w, const blk_t *b)
{
    if (w->n == w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 64;
        alloc_walk_block_t *nv = realloc(w->v, nc * sizeof(*nv));
        if (!nv) return -1;
        w->v = nv;
        w->cap = nc;
    }
    alloc_walk_block_t *o = &w->v[w->n++];
    o->addr = b->addr;
    o->size = b->size;
    bool live = b->rb.st == B_LIVE || b->rb.st == B_PENDING;
    o->requested = live ? b->requested : 0;
    o->alloc_id = live ? b->stamp : 0;
    o->state = b->rb.st == B_LIVE      ? ALLOC_BLOCK_LIVE
               : b->rb.st == B_PENDING ? ALLOC_BLOCK_PENDING
                                       : ALLOC_BLOCK_FREE;
    return 0;
}

static int wflush(wbuf_t *w, const seg_t *s, alloc_walk_fn fn, void *user)
{
    if (!w->n) return 0;
    alloc_walk_segment_t g = {0};
    g.addr = w->v[0].addr;
    g.size = w->v[w->n - 1].addr + w->v[w->n - 1].size - g.addr;
    g.stream = s->pool->owner->stream;
    g.small_pool = s->pool->small;
    g.expandable = s->expandable;
    g.nblocks = w->n;
    for (size_t i = 0; i < w->n; i++)
        if (w->v[i].state == ALLOC_BLOCK_LIVE) g.allocated += w->v[i].size;
    int rc = fn(user, &g, w->v, w->n);
    w->n = 0;
    return rc;
}

int alloc_walk(alloc_t *a, alloc_walk_fn fn, void *user)
{
    if (!a || !fn) return ALLOC_ERR_INVALID;
    wbuf_t w = {0};
    int rc = 0;
    a_lock(&a->mu);
    for (size_t i = 0; i < a->nstreams && !rc; i++)
        for (int k = 0; k < 2 && !rc; k++) {
            /* segments in address order: collect and sort the pool's list */
            pool_t *p = &a->streams[i]->pools[k];
            size_t ns = 0;
            for (seg_t *s = p->segs; s; s = s->next_in_pool)
                ns++;
            if (!ns) continue;
            seg_t **v = malloc(ns * sizeof(*v));
            if (!v) {
                rc = ALLOC_ERR_NOMEM;
                break;
            }
            ns = 0;
            for (seg_t *s = p->segs; s; s = s->next_in_pool)
                v[ns++] = s;
            for (size_t x = 1; x < ns; x++) /* few segments: insertion sort */
                for (size_t y = x; y > 0 && v[y - 1]->base > v[y]->base; y--) {
                    seg_t *t = v[y];
                    v[y] = v[y - 1];
                    v[y - 1] = t;
                }
            for (size_t j = 0; j < ns && !rc; j++) {
                for (blk_t *b = v[j]->first; b && !rc; b = b->next) {
                    if (b->rb.st == B_UNMAPPED) {
                        rc = wflush(&w, v[j], fn, user);
                        continue;
                    }
                    if (wpush(&w, b)) rc = ALLOC_ERR_NOMEM;
                }
                if (!rc) rc = wflush(&w, v[j], fn, user);
            }
            free(v);
        }
    a_unlock(&a->mu);
    free(w.v);
    return rc;
}

/* ---- check ----------------------------------------------------------------------------------- */

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return ALLOC_ERR_CORRUPT;
}

static bool less(const blk_t *a, const blk_t *b)
{
    return a->size < b->size || (a->size == b->size && a->addr < b->addr);
}

/* Red-black shape: returns black height, -1 on violation; counts nodes. */
static int rb_verify(const rb_node_t *x, const rb_node_t *parent, size_t *count)
{
    if (!x) return 1;
    if (x->parent != parent) return -1;
    if (x->red && ((x->left && x->left->red) || (x->right && x->right->red))) return -1;
    if (x->left && !less((const blk_t *)x->left, (const blk_t *)x)) return -1;
    if (x->right && !less((const blk_t *)x, (const blk_t *)x->right)) return -1;
    int l = rb_verify(x->left, x, count), r = rb_verify(x->right, x, count);
    if (l < 0 || r < 0 || l != r) return -1;
    (*count)++;
    return l + !x->red;
}

static bool rb_contains(const rb_tree_t *t, const blk_t *b)
{
    const rb_node_t *x = t->root;
    while (x) {
        if (x == &b->rb) return true;
        x = less(b, (const blk_t *)x) ? x->left : x->right;
    }
    return false;
}

/* Are slots first..last (inclusive) all mapped (val) or all unmapped (!val)? Word at a time. */
/* The neighbour bits of P and X, P->next == X (internal.h, NB_*): a clear bit is never wrong */
static bool nb_ok(const blk_t *P, const blk_t *X)
{
    bool pf = P->rb.st == B_FREE || P->rb.st == B_UNMAPPED;
    bool xf = X->rb.st == B_FREE || X->rb.st == B_UNMAPPED;
    if (pf && !(X->rb.nb & NB_PF)) return false;
    if (xf && !(P->rb.nb & NB_NF)) return false;
    if ((X->rb.nb & NB_AP) && !(P->rb.nb & NB_NF)) return false;
    if ((P->rb.nb & NB_AN) && !(X->rb.nb & NB_PF)) return false;
    return true;
}

static bool bits_all(const seg_t *r, size_t first, size_t last, bool val)
{
    for (size_t w = first >> 6; w <= last >> 6; w++) {
        uint64_t mask = ~0ull;
        if (w == first >> 6) mask &= ~0ull << (first & 63);
        if (w == last >> 6 && (last & 63) != 63) mask &= (1ull << ((last & 63) + 1)) - 1;
        uint64_t x = r->mapbits[w] & mask;
        if (val ? x != mask : x != 0) return false;
    }
    return true;
}

typedef struct {
    int64_t allocated, requested, allocations, active_bytes, active, reserved, segments;
    int64_t split_bytes, split_count;
    size_t cached, pending, live_pending_blocks, pending_blocks;
} sums_t;

static int check_pool(alloc_t *a, pool_t *p, sums_t *s, char *err, size_t errlen)
{
    size_t nfree = 0, nunmapped = 0, free_bytes = 0;
    for (unsigned w = 0; w < A_NCLS_WORDS; w++)
        if ((p->bitmap[w] != 0) != ((p->summary[w >> 6] >> (w & 63)) & 1))
            return fail(err, errlen, "bitmap word %u: summary bit disagrees", w);
    if (p->ncls > A_NCLS || p->ncls % A_SUB || (p->ncls && !p->cls))
        return fail(err, errlen, "size-class index of %u classes", p->ncls);
    /* classes the index does not cover are empty: no bitmap bit beyond ncls */
    for (unsigned w = p->ncls / 64; w < A_NCLS_WORDS; w++)
        if (p->bitmap[w])
            return fail(err, errlen, "bitmap word %u: a class the index does not cover (%u)", w,
                        p->ncls);
    /* an empty class is all zero (no smallest, no root, no first, count 0): the 64 classes of a zero
     * bitmap word are compared as one stretch of memory (most words are zero) */
    static const struct pool_cls zero[64];
    for (unsigned c = 0; c < p->ncls; c++) {
        if (!(c & 63) && !p->bitmap[c >> 6]) {
            if (memcmp(&p->cls[c], zero, sizeof(zero)))
                for (unsigned k = c; k < c + 64; k++)
                    if (memcmp(&p->cls[k], zero, sizeof(zero[0])))
                        return fail(err, errlen, "class %u: bitmap bit 0 but %s", k,
                                    p->cls[k].t.root ? "tree non-empty"
                                                     : "a minimum or a count in an empty tree");
            c += 63;
            continue;
        }
        const struct pool_cls *k = &p->cls[c];
        bool bit = (p->bitmap[c >> 6] >> (c & 63)) & 1;
        if (bit != (k->min || k->t.root))
            return fail(err, errlen, "class %u: bitmap bit %d but the class is %s", c, bit,
                        bit ? "empty" : "not empty");
        if (!bit) { /* most classes are empty: checked inline, the walk below is for trees */
            if (k->first || k->t.count)
                return fail(err, errlen, "class %u: empty tree with a first block or a count", c);
            continue;
        }
        size_t cnt = 0;
        if (k->t.root && (k->t.root->parent || k->t.root->red))
            return fail(err, errlen, "class %u: bad root", c);
        if (rb_verify(k->t.root, NULL, &cnt) < 0)
            return fail(err, errlen, "class %u: red-black tree broken", c);
        if (k->first != rb_first(&k->t))
            return fail(err, errlen, "class %u: cached first is not the tree's first block", c);
        if (cnt != k->t.count)
            return fail(err, errlen, "class %u: tree has %zu nodes, count says %zu", c, cnt,
                        k->t.count);
        if (k->min) { /* the smallest, outside the tree */
            const blk_t *m = k->min;
            if (m->rb.st != B_FREE || m->rb.cls != c || rb_contains(&k->t, m))
                return fail(err, errlen, "class %u: its smallest block %#llx is %s", c,
                            (unsigned long long)m->addr,
                            m->rb.st != B_FREE ? "not FREE"
                            : m->rb.cls != c   ? "of another class"
                                               : "also in the tree");
            if (k->first && !less(m, k->first))
                return fail(err, errlen, "class %u: its smallest block %#llx is not before the "
                            "tree's first", c, (unsigned long long)m->addr);
            cnt++;
        }
        nfree += cnt;
    }
    size_t ucnt = 0;
    if (rb_verify(p->unmapped.root, NULL, &ucnt) < 0 || ucnt != p->unmapped.count)
        return fail(err, errlen, "unmapped tree broken");

    size_t seen_free = 0;
    for (seg_t *g = p->segs; g; g = g->next_in_pool) {
        if (g->pool != p)
            return fail(err, errlen, "segment %#llx: wrong pool", (unsigned long long)g->base);
        uint64_t at = g->base;
        const blk_t *prev = NULL;
        size_t mapped_bytes = 0;
        for (const blk_t *b = g->first; b; prev = b, b = b->next) {
            if (b->seg != g || b->prev != prev)
                return fail(err, errlen, "block %#llx: bad links", (unsigned long long)b->addr);
            if (b->addr != at)
                return fail(err, errlen, "segment %#llx: gap or overlap at %#llx (block at %#llx)",
                            (unsigned long long)g->base, (unsigned long long)at,
                            (unsigned long long)b->addr);
            if (!b->size || b->size % A_MIN_BLOCK)
                return fail(err, errlen, "block %#llx: size %llu not a positive multiple of 512",
                            (unsigned long long)b->addr, (unsigned long long)b->size);
            at += b->size;
            if (prev && !nb_ok(prev, b))
                return fail(err, errlen, "blocks %#llx and %#llx: neighbour bits %#x, %#x wrong",
                            (unsigned long long)prev->addr, (unsigned long long)b->addr,
                            prev->rb.nb, b->rb.nb);
            if (prev && prev->rb.st == b->rb.st && (b->rb.st == B_FREE || b->rb.st == B_UNMAPPED))
                return fail(err, errlen, "blocks %#llx and %#llx: two %s neighbours",
                            (unsigned long long)prev->addr, (unsigned long long)b->addr,
                            b->rb.st == B_FREE ? "free" : "unmapped");
            if (g->expandable) {
                size_t first = (b->addr - g->base) / g->hsize;
                size_t last = (b->addr + b->size - 1 - g->base) / g->hsize;
                if (!bits_all(g, first, last, b->rb.st != B_UNMAPPED))
                    return fail(err, errlen, "block %#llx (state %d): slots %zu..%zu not all %s",
                                (unsigned long long)b->addr, b->rb.st, first, last,
                                b->rb.st != B_UNMAPPED ? "mapped" : "unmapped");
                if (b->rb.st == B_UNMAPPED &&
                    ((b->addr - g->base) % g->hsize || b->size % g->hsize))
                    return fail(err, errlen, "unmapped block %#llx not slot-aligned",
                                (unsigned long long)b->addr);
            } else if (b->rb.st == B_UNMAPPED) {
                return fail(err, errlen, "unmapped block in a classic segment");
            }
            switch (b->rb.st) {
            case B_LIVE:
            case B_PENDING:
                if (a_map_get(a, b->addr) != b)
                    return fail(err, errlen, "%s block %#llx missing from the address map",
                                b->rb.st == B_LIVE ? "live" : "pending",
                                (unsigned long long)b->addr);
                s->active_bytes += (int64_t)b->size;
                s->active++;
                s->live_pending_blocks++;
                if (b->rb.st == B_LIVE) {
                    s->allocated += (int64_t)b->size;
                    s->requested += (int64_t)b->requested;
                    s->allocations++;
                } else {
                    s->pending += b->size;
                    s->pending_blocks++;
                }
                mapped_bytes += b->size;
                break;
            case B_FREE:
                if (a_size_class(b->size) >= p->ncls || b->rb.cls != a_size_class(b->size) ||
                    (p->cls[b->rb.cls].min != b && !rb_contains(&p->cls[b->rb.cls].t, b)))
                    return fail(err, errlen, "free block %#llx (size %llu) not in its index",
                                (unsigned long long)b->addr, (unsigned long long)b->size);
                if (b->rb.split != a_block_is_split(b))
                    return fail(err, errlen, "free block %#llx: inactive-split flag stale",
                                (unsigned long long)b->addr);
                if (b->rb.split) {
                    s->split_bytes += (int64_t)b->size;
                    s->split_count++;
                }
                seen_free++;
                free_bytes += b->size;
                mapped_bytes += b->size;
                break;
            case B_UNMAPPED:
                if (!rb_contains(&p->unmapped, b))
                    return fail(err, errlen, "unmapped block %#llx not in the unmapped index",
                                (unsigned long long)b->addr);
                nunmapped++;
                break;
            default:
                return fail(err, errlen, "block %#llx: bad state %d", (unsigned long long)b->addr,
                            b->rb.st);
            }
        }
        if (at != g->base + g->size)
            return fail(err, errlen, "segment %#llx: blocks end at %#llx, segment at %#llx",
                        (unsigned long long)g->base, (unsigned long long)at,
                        (unsigned long long)(g->base + g->size));
        if (g->expandable) {
            size_t nm = 0, runs = 0;
            uint64_t carry = 0; /* was the slot before this word mapped? */
            for (size_t w = 0; w < (g->nslots + 63) / 64; w++) {
                uint64_t x = g->mapbits[w];
                nm += (size_t)__builtin_popcountll(x);
                runs += (size_t)__builtin_popcountll(x & ~((x << 1) | carry));
                carry = x >> 63;
            }
            if (nm * g->hsize != g->mapped || g->mapped != mapped_bytes)
                return fail(err, errlen, "range %#llx: %zu slots mapped, mapped=%zu, blocks=%zu",
                            (unsigned long long)g->base, nm, g->mapped, mapped_bytes);
            if (runs != g->runs)
                return fail(err, errlen, "range %#llx: %zu runs, counter says %zu",
                            (unsigned long long)g->base, runs, g->runs);
            if (g->mapped && a_size_class(g->mapped) >= p->ncls)
                return fail(err, errlen, "range %#llx: %zu bytes mapped, index covers %u classes",
                            (unsigned long long)g->base, g->mapped, p->ncls);
            s->reserved += (int64_t)g->mapped;
            s->segments += (int64_t)runs;
        } else {
            if (a_size_class(g->size) >= p->ncls)
                return fail(err, errlen, "segment %#llx of %zu bytes, index covers %u classes",
                            (unsigned long long)g->base, g->size, p->ncls);
            s->reserved += (int64_t)(g->guard ? g->g_mapped : g->size);
            s->segments++;
        }
    }
    if (seen_free != nfree)
        return fail(err, errlen, "pool: %zu free blocks in segments, %zu in the index", seen_free,
                    nfree);
    if (nunmapped != ucnt)
        return fail(err, errlen, "pool: %zu unmapped blocks, %zu in the index", nunmapped, ucnt);
    if (free_bytes != p->free_bytes)
        return fail(err, errlen, "pool: free bytes %zu, counter says %zu", free_bytes,
                    p->free_bytes);
    s->cached += free_bytes;
    return ALLOC_OK;
}

int alloc_check(alloc_t *a, char *err, size_t errlen)
{
    if (!a) return ALLOC_ERR_INVALID;
    if (err && errlen) err[0] = 0;
    sums_t s = {0};
    int rc = ALLOC_OK;
    a_lock(&a->mu);
    for (size_t i = 0; i < a->nstreams && !rc; i++)
        for (int k = 0; k < 2 && !rc; k++)
            rc = check_pool(a, &a->streams[i]->pools[k], &s, err, errlen);
    if (rc) goto out;
    /* the stream table finds every stream and holds no other */
    size_t in_tab = 0;
    for (size_t h = 0; a->stab && h <= a->stab_mask; h++) in_tab += a->stab[h] != NULL;
    if (in_tab != a->nstreams) {
        rc = fail(err, errlen, "stream table holds %zu streams, streams[] %zu", in_tab,
                  a->nstreams);
        goto out;
    }
    for (size_t i = 0; i < a->nstreams; i++)
        if (a_stream_find(a, a->streams[i]->stream) != a->streams[i]) {
            rc = fail(err, errlen, "stream %#lx is not found in the stream table",
                      (unsigned long)a->streams[i]->stream);
            goto out;
        }
#define EQ(name, have, want)                                                                       \
    if ((int64_t)(have) != (int64_t)(want)) {                                                      \
        rc = fail(err, errlen, "stat %s is %lld, blocks say %lld", name, (long long)(have),        \
                  (long long)(want));                                                              \
        goto out;                                                                                  \
    }
    EQ("allocated_bytes", a->st.allocated_bytes.current, s.allocated);
    EQ("requested_bytes", a->st.requested_bytes.current, s.requested);
    EQ("allocation", a->st.allocation.current, s.allocations);
    EQ("active_bytes", a->st.active_bytes.current, s.active_bytes);
    EQ("active", a->st.active.current, s.active);
    EQ("reserved_bytes", a->st.reserved_bytes.current, s.reserved);
    EQ("segment", a->st.segment.current, s.segments);
    EQ("inactive_split_bytes", a->st.inactive_split_bytes.current, s.split_bytes);
    EQ("inactive_split", a->st.inactive_split.current, s.split_count);
    EQ("cached_free", a->cached_free, s.cached);
    EQ("pending_bytes", a->pending_bytes, s.pending);
    EQ("address map entries", a->map.count + (a->fresh != NULL), s.live_pending_blocks);
    size_t nf = 0;
    for (fence_t *f = a->fence_head; f; f = f->next) {
        if (f->blk->rb.st != B_PENDING) {
            rc = fail(err, errlen, "fence holds block %#llx that is not pending",
                      (unsigned long long)f->blk->addr);
            goto out;
        }
        nf++;
    }
    EQ("pending blocks vs fences", nf, s.pending_blocks);
    {
        alloc_stat_t *v[ALLOC_NSTATS];
        for (size_t i = 0, n = a_stat_counters(&a->st, v); i < n; i++)
            if (v[i]->peak < v[i]->current || v[i]->reset_peak < v[i]->current ||
                v[i]->reset_peak > v[i]->peak || v[i]->current < 0 || v[i]->allocated < v[i]->current) {
                rc = fail(err, errlen, "stat #%zu: current %lld, peak %lld, since the reset %lld, "
                          "allocated %lld", i, (long long)v[i]->current,
                          (long long)v[i]->peak, (long long)v[i]->reset_peak,
                          (long long)v[i]->allocated);
                goto out;
            }
    }
    if ((size_t)a->st.reserved_bytes.current > a->cfg.limit) { /* ALLOC_NO_LIMIT: never */
        rc = fail(err, errlen, "reserved %lld over the limit %zu",
                  (long long)a->st.reserved_bytes.current, a->cfg.limit);
        goto out;
    }
#undef EQ
out:
    a_unlock(&a->mu);
    return rc;
}
