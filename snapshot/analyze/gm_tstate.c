/* gm_tstate.c — segments and blocks rebuilt from a recording's rows (gm_tstate.h): what the
 * torch export writes and frag classifies for PyTorch's allocator. Segments are a sorted array
 * (a binary search finds the one an address falls in; maps and unmaps are rare beside blocks),
 * blocks an array indexed by address through a hash map. */
#include "snapshot/analyze/gm_tstate.h"

#include <stdlib.h>
#include <string.h>

#include "snapshot/read/gm.h" /* gm_sort */

static size_t seg_find(const gm_tstate *s, uint64_t addr) /* first segment ending after addr */
{
    size_t lo = 0, hi = s->nsegs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->segs[mid].addr + s->segs[mid].size <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int gm_tstate_map(gm_tstate *s, uint64_t addr, uint64_t size, int expandable, int device, uint64_t stream,
                  uint64_t pool)
{
    if (!size) return 0;
    size_t i = seg_find(s, addr);
    if (expandable) { /* joins an expandable neighbour of the same device: one mapped run */
        gm_tseg *l = i > 0 ? &s->segs[i - 1] : NULL, *r = i < s->nsegs ? &s->segs[i] : NULL;
        int jl = l && l->expandable && l->device == device && l->pool == pool && l->addr + l->size == addr;
        int jr = r && r->expandable && r->device == device && r->pool == pool && r->addr == addr + size;
        if (jl && jr) {
            l->size += size + r->size;
            if (r->largest > l->largest) l->largest = r->largest;
            memmove(r, r + 1, (s->nsegs - i - 1) * sizeof *r);
            s->nsegs--;
            return 0;
        }
        if (jl) return l->size += size, 0;
        if (jr) return r->addr = addr, r->size += size, 0;
    }
    if (s->nsegs == s->csegs) {
        size_t nc = s->csegs ? 2 * s->csegs : 64;
        gm_tseg *n = realloc(s->segs, nc * sizeof *n);
        if (!n) return -1;
        s->segs = n, s->csegs = nc;
    }
    memmove(&s->segs[i + 1], &s->segs[i], (s->nsegs - i) * sizeof *s->segs);
    s->segs[i] = (gm_tseg){addr, size, stream, 0, pool, device, (uint8_t)(expandable != 0)};
    s->nsegs++;
    return 0;
}

int gm_tstate_unmap(gm_tstate *s, uint64_t addr, uint64_t size)
{
    size_t i = seg_find(s, addr);
    if (i == s->nsegs || s->segs[i].addr > addr) return 0;
    gm_tseg g = s->segs[i];
    uint64_t end = addr + size, gend = g.addr + g.size;
    if (end > gend) end = gend;
    if (addr == g.addr && end == gend) {
        memmove(&s->segs[i], &s->segs[i + 1], (s->nsegs - i - 1) * sizeof *s->segs);
        s->nsegs--;
    } else if (addr == g.addr) {
        s->segs[i].addr = end, s->segs[i].size = gend - end;
    } else if (end == gend) {
        s->segs[i].size = addr - g.addr;
    } else { /* a hole in the middle: two runs, the right one as expandable as the left */
        s->segs[i].size = addr - g.addr;
        if (gm_tstate_map(s, end, gend - end, 0, g.device, g.stream, g.pool) != 0) return -1;
        gm_tseg *t = &s->segs[seg_find(s, end)];
        t->expandable = g.expandable, t->largest = g.largest;
    }
    return 0;
}

int gm_tstate_block_add(gm_tstate *s, const gm_tblk *b)
{
    uint64_t old;
    if (u64map_del(&s->at, b->addr, &old)) s->blocks[old].size = 0; /* reused unseen */
    if (s->nblocks == s->cblocks) {
        size_t nc = s->cblocks ? 2 * s->cblocks : 256;
        gm_tblk *n = realloc(s->blocks, nc * sizeof *n);
        if (!n) return -1;
        s->blocks = n, s->cblocks = nc;
    }
    s->blocks[s->nblocks] = *b;
    if (u64map_put(&s->at, b->addr, s->nblocks) != 0) return -1;
    s->nblocks++;
    size_t i = seg_find(s, b->addr);
    if (i < s->nsegs && s->segs[i].addr <= b->addr && b->size > s->segs[i].largest) s->segs[i].largest = b->size;
    return 0;
}

gm_tblk *gm_tstate_block_at(gm_tstate *s, uint64_t addr)
{
    const uint64_t *i = u64map_get(&s->at, addr);
    return i ? &s->blocks[*i] : NULL;
}

void gm_tstate_block_drop(gm_tstate *s, uint64_t addr)
{
    uint64_t i;
    if (u64map_del(&s->at, addr, &i)) s->blocks[i].size = 0;
}

void gm_tstate_free(gm_tstate *s)
{
    free(s->segs), free(s->blocks);
    u64map_free(&s->at);
    memset(s, 0, sizeof *s);
}

static int cmp_block(const void *a, const void *b)
{
    const gm_tblk *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* The blocks array keeps dropped entries (size 0) until it is compacted here. */
static int blocks_compact(gm_tstate *s)
{
    size_t o = 0;
    for (size_t i = 0; i < s->nblocks; i++)
        if (s->blocks[i].size) s->blocks[o++] = s->blocks[i];
    s->nblocks = o;
    u64map_free(&s->at);
    for (size_t i = 0; i < s->nblocks; i++)
        if (u64map_put(&s->at, s->blocks[i].addr, i) != 0) return -1;
    return 0;
}

int gm_tstate_capture(gm_tstate *s, int device, int blocks_as_segments, gm_tcapture *c)
{
    memset(c, 0, sizeof *c);
    if (blocks_compact(s) != 0) return -1;
    /* only the blocks no segment holds: a recording passed through (record mode) has segments
     * for a pool's or a graph's allocations alone, and its plain allocations, live beside
     * them, are segments of their own too */
    for (size_t i = 0; blocks_as_segments && i < s->nblocks; i++) {
        size_t j = seg_find(s, s->blocks[i].addr);
        if (j < s->nsegs && s->segs[j].addr <= s->blocks[i].addr) continue;
        if (gm_tstate_map(s, s->blocks[i].addr, s->blocks[i].size, 0, device, 0, 0) != 0) return -1;
    }
    c->segs = malloc((s->nsegs ? s->nsegs : 1) * sizeof *c->segs);
    c->blocks = malloc((s->nblocks ? s->nblocks : 1) * sizeof *c->blocks);
    if (!c->segs || !c->blocks) return -1;
    for (size_t i = 0; i < s->nsegs; i++)
        if (device < 0 || s->segs[i].device == device) c->segs[c->nsegs++] = s->segs[i];
    if (s->nblocks) memcpy(c->blocks, s->blocks, s->nblocks * sizeof *c->blocks); /* (NULL when none) */
    c->nblocks = s->nblocks;
    if (c->nblocks) gm_sort(c->blocks, c->nblocks, sizeof *c->blocks, cmp_block);
    return 0;
}

void gm_tcapture_free(gm_tcapture *c)
{
    free(c->segs), free(c->blocks);
    memset(c, 0, sizeof *c);
}
