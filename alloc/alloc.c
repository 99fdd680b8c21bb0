/* alloc.c — the caching allocator: pools, best fit, split/coalesce, expandable and classic
 * segments, stream-ordered reuse, the OOM path, garbage collection and the release threshold.
 *
 * The story of one allocation
 *   alloc_malloc rounds the size (512 B, or roundup_power2_divisions), picks the pool of the
 *   stream (small <= 1 MiB, large above), and asks the pool's free index for the best fit. That
 *   is the fast path: one lock, one tree lookup, an optional split, one hash insert. Only when no
 *   cached block fits does the slow path run: garbage collection (if configured), then growth
 *   (map more pages of the pool's expandable range, holes first; or one new classic segment),
 *   and when the device or the limit says no, the OOM path: synchronize, let every pending free
 *   land, try the cache again, release every free page or segment, grow again, and only then
 *   fail with forensics.
 *
 * The story of one free
 *   The block leaves the address map only when it is reusable. With cudaFree semantics an event
 *   goes on every stream the allocator has seen and the block waits (PENDING) in a FIFO of
 *   fences; with cudaFreeAsync on the block's own stream it is reusable at once (stream order
 *   protects it); on another stream one event guards it. A FREE block merges with FREE
 *   neighbours of the same segment — never across segments, never with unmapped space.
 *
 * Expandable ranges are tiled by blocks like classic segments, plus UNMAPPED blocks for address
 * space without physical memory, so "fill holes before growing" and "unmap fully free pages" are
 * both block surgery on the same list. Physical memory is mapped one handle (handle_size) at a
 * time so that any handle can be unmapped on its own later.
 */
#include <errno.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "alloc/internal.h"

#define LOCK(a) a_lock(&(a)->mu)
#define UNLOCK(a) a_unlock(&(a)->mu)

/* the lock's slow paths (internal.h): someone holds it; sleep until it is given back */
void a_lock_wait(a_lock_t *l)
{
    while (atomic_exchange_explicit(&l->v, 2, memory_order_acquire) != 0)
        syscall(SYS_futex, &l->v, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

/* given back while someone may wait: wake one */
void a_lock_wake(a_lock_t *l)
{
    atomic_store_explicit(&l->v, 0, memory_order_release);
    syscall(SYS_futex, &l->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* A new classic segment or expandable range at addr: counted as above or below the last one
 * (alloc_address_order). */
static void note_va(alloc_t *a, uint64_t addr)
{
    if (a->last_va) {
        if (addr > a->last_va)
            a->va_up++;
        else
            a->va_down++;
    }
    a->last_va = addr;
}

/* GROW_AGAIN: a synchronization in the slow path landed pending frees; the request starts over
 * (see alloc_malloc_ex) */
enum { GROW_OK = 0, GROW_OOM = 1, GROW_ERR = 2, GROW_NOMEM = 3, GROW_AGAIN = 4 };

const char *alloc_strerror(int err)
{
    switch (err) {
    case ALLOC_OK:
        return "success";
    case ALLOC_ERR_OOM:
        return "out of memory";
    case ALLOC_ERR_INVALID:
        return "invalid argument";
    case ALLOC_ERR_NOT_OWNED:
        return "pointer not owned by this allocator";
    case ALLOC_ERR_DOUBLE_FREE:
        return "double free";
    case ALLOC_ERR_NOT_BASE:
        return "pointer is inside a block, not its start";
    case ALLOC_ERR_BACKEND:
        return "backend (driver) error";
    case ALLOC_ERR_CONFIG:
        return "bad configuration";
    case ALLOC_ERR_CORRUPT:
        return "allocator invariant broken";
    case ALLOC_ERR_NOMEM:
        return "out of host memory for allocator metadata";
    default:
        return "unknown error";
    }
}

/* ---- small helpers -------------------------------------------------------------------------- */

const char *alloc_be_call_name(int call)
{
    static const char *const names[ALLOC_BE_NCALLS] = {
        [ALLOC_BE_CALL_RESERVE] = "reserve",          [ALLOC_BE_CALL_FREE_RANGE] = "free_range",
        [ALLOC_BE_CALL_CREATE] = "create",            [ALLOC_BE_CALL_RELEASE] = "release",
        [ALLOC_BE_CALL_MAP] = "map",                  [ALLOC_BE_CALL_SET_ACCESS] = "set_access",
        [ALLOC_BE_CALL_UNMAP] = "unmap",              [ALLOC_BE_CALL_SEG_ALLOC] = "seg_alloc",
        [ALLOC_BE_CALL_SEG_FREE] = "seg_free",        [ALLOC_BE_CALL_EVENT_CREATE] = "event_create",
        [ALLOC_BE_CALL_EVENT_RECORD] = "event_record", [ALLOC_BE_CALL_SYNCHRONIZE] = "synchronize",
    };
    return call >= 0 && call < ALLOC_BE_NCALLS ? names[call] : NULL;
}

_Static_assert(ALLOC_BE_NCALLS == sizeof(((alloc_stats_t *)0)->backend_calls) / sizeof(uint64_t),
              "alloc_stats_t.backend_calls has one counter per enum alloc_be_call");

/* Counts one backend call of kind k: the total and the per-call figure the reports print. */
static inline void be_count(alloc_t *a, int k)
{
    a->st.num_backend_calls++;
    a->st.backend_calls[k]++;
}

static inline void stat_add(alloc_stat_t *s, int64_t d)
{
    alloc_stat_change(s, d);
}

static inline void stat_sub(alloc_stat_t *s, int64_t d)
{
    alloc_stat_change(s, -d);
}

static inline uint64_t max_u64(uint64_t x, uint64_t y)
{
    return x > y ? x : y;
}

static inline size_t round_up(size_t v, size_t m)
{
    return (v + m - 1) / m * m;
}

static int be_rc(alloc_t *a, int rc)
{
    if (rc != ALLOC_BE_OK && rc != ALLOC_BE_NOT_READY) a->last_be_err = rc;
    return rc;
}

/* ---- block structs: recycled through a free list, allocated in chunks ---------------------- */

#define CHUNK_BLOCKS 256

/* Host memory for the allocator's large arrays, `size` a multiple of A_HUGE: aligned to it and
 * marked for transparent huge pages. With 100,000 live blocks and as many free ones the block
 * structs (25 MB) and the address map (8 MB) span ~8,000 pages of 4 KiB, more than the TLB holds:
 * a cached pair touching five of them at random took a page walk for most, and the pair cost
 * 1.4x what it costs with 10 live blocks; past their first 2 MiB they are 16 TLB entries of
 * 2 MiB (tests/bench/README.md). Small allocators never get here: their arrays stay below A_HUGE. */
#define A_HUGE ((size_t)2 << 20)
static void *huge_alloc(size_t size)
{
    void *p = aligned_alloc(A_HUGE, size);
    if (p) madvise(p, size, MADV_HUGEPAGE); /* advice: without it, 4 KiB pages as before */
    return p;
}

/* One more chunk of block structs on the free list; false when out of host memory. Chunks of
 * 256 blocks (32 KiB) until 2 MiB of them exist, then 2 MiB on huge pages. */
static __attribute__((noinline)) bool blk_refill(alloc_t *a)
{
    bool huge = a->nchunk_blocks * sizeof(blk_t) >= A_HUGE;
    size_t nb = huge ? (A_HUGE - sizeof(blk_chunk_t)) / sizeof(blk_t) : CHUNK_BLOCKS;
    blk_chunk_t *c = huge ? huge_alloc(A_HUGE)
                          : aligned_alloc(64, sizeof(*c) + CHUNK_BLOCKS * sizeof(blk_t));
    if (!c) return false;
    c->next = a->chunks;
    a->chunks = c;
    a->nchunk_blocks += nb;
    for (size_t i = nb; i-- > 0;) {
        c->blocks[i].next = a->free_blks;
        a->free_blks = &c->blocks[i];
    }
    return true;
}

/* A block struct with undefined contents (blk_new zeroes it) */
static inline blk_t *blk_take(alloc_t *a)
{
    if (!a->free_blks && !blk_refill(a)) return NULL;
    blk_t *b = a->free_blks;
    a->free_blks = b->next;
    return b;
}

static blk_t *blk_new(alloc_t *a)
{
    blk_t *b = blk_take(a);
    if (b) memset(b, 0, sizeof(*b));
    return b;
}

static void blk_del(alloc_t *a, blk_t *b)
{
    b->next = a->free_blks;
    a->free_blks = b;
}

/* ---- address map: LIVE and PENDING blocks by start address -------------------------------- */

static inline size_t ptr_hash(const ptrmap_t *m, uint64_t key)
{
    return (size_t)(((key >> 9) * 0x9E3779B97F4A7C15ull) >> m->shift);
}

static int ptrmap_init(ptrmap_t *m, unsigned bits)
{
    m->cap = (size_t)1 << bits;
    m->shift = 64 - bits;
    m->count = 0;
    size_t bytes = m->cap * sizeof(*m->slots);
    if (bytes >= A_HUGE) { /* 128 Ki slots and more: see huge_alloc */
        m->slots = huge_alloc(bytes);
        if (m->slots) memset(m->slots, 0, bytes);
    } else {
        m->slots = calloc(m->cap, sizeof(*m->slots));
    }
    return m->slots ? 0 : -1;
}

/* inline in the free's hot path (through map_get; check.c calls a_map_get) */
static inline blk_t *ptrmap_find(const ptrmap_t *m, uint64_t key)
{
    size_t mask = m->cap - 1;
    for (size_t i = ptr_hash(m, key);; i = (i + 1) & mask) {
        if (m->slots[i].key == key) return m->slots[i].val;
        if (!m->slots[i].key) return NULL;
    }
}

static int ptrmap_put(ptrmap_t *m, uint64_t key, blk_t *v);
static void ptrmap_del(ptrmap_t *m, uint64_t key);

static inline blk_t *map_get(const alloc_t *a, uint64_t addr)
{
    blk_t *f = a->fresh;
    return f && f->addr == addr ? f : ptrmap_find(&a->map, addr);
}

blk_t *a_map_get(const alloc_t *a, uint64_t addr)
{
    return map_get(a, addr);
}

/* b leaves the LIVE and PENDING blocks' look-up */
static inline void map_forget(alloc_t *a, blk_t *b)
{
    if (a->fresh == b) a->fresh = NULL;
    else ptrmap_del(&a->map, b->addr);
}

static int ptrmap_grow(ptrmap_t *m)
{
    ptrmap_t n;
    unsigned bits = 64 - m->shift + 1;
    if (ptrmap_init(&n, bits)) return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key) ptrmap_put(&n, m->slots[i].key, m->slots[i].val);
    free(m->slots);
    *m = n;
    return 0;
}

static int ptrmap_put(ptrmap_t *m, uint64_t key, blk_t *v)
{
    if ((m->count + 1) * 2 > m->cap && ptrmap_grow(m)) return -1;
    size_t mask = m->cap - 1;
    size_t i = ptr_hash(m, key);
    while (m->slots[i].key && m->slots[i].key != key)
        i = (i + 1) & mask;
    if (!m->slots[i].key) m->count++;
    m->slots[i].key = key;
    m->slots[i].val = v;
    return 0;
}

static void ptrmap_del(ptrmap_t *m, uint64_t key)
{
    size_t mask = m->cap - 1;
    size_t i = ptr_hash(m, key);
    while (m->slots[i].key != key) {
        if (!m->slots[i].key) return;
        i = (i + 1) & mask;
    }
    /* backward-shift deletion keeps probe chains intact without tombstones */
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->slots[j].key) break;
        size_t h = ptr_hash(m, m->slots[j].key);
        /* move j back to i unless its home lies cyclically in (i, j] */
        bool stay = (i < j) ? (h > i && h <= j) : (h > i || h <= j);
        if (stay) continue;
        m->slots[i] = m->slots[j];
        i = j;
    }
    m->slots[i].key = 0;
    m->slots[i].val = NULL;
    m->count--;
}

/* ---- free index ------------------------------------------------------------------------------ */

/* The index updates are inlined into the hot path (a cached malloc and its free: make_free and
 * alloc_malloc_ex call free_insert_fast / free_remove_fast); every other caller shares one copy. */
#define A_INLINE static inline __attribute__((always_inline))

/* b becomes FREE: its neighbours' bits toward it must say it may be (internal.h, NB_*); those it
 * set before and nobody cleared are not written again */
A_INLINE void nb_announce(blk_t *b)
{
    if ((b->rb.nb & (NB_AP | NB_AN)) == (NB_AP | NB_AN)) return; /* the usual case */
    if (!(b->rb.nb & NB_AP) && b->prev) b->prev->rb.nb |= NB_NF;
    if (!(b->rb.nb & NB_AN) && b->next) b->next->rb.nb |= NB_PF;
    b->rb.nb |= NB_AP | NB_AN;
}

/* a_block_is_split without reading a neighbour whose bit says it is LIVE or PENDING (so not
 * UNMAPPED) */
A_INLINE bool blk_is_split_nb(const blk_t *b)
{
    if (b->prev && (!(b->rb.nb & NB_PF) || b->prev->rb.st != B_UNMAPPED)) return true;
    return b->next && (!(b->rb.nb & NB_NF) || b->next->rb.st != B_UNMAPPED);
}

/* (size, address) order: best fit's, the trees' */
A_INLINE bool blk_before(const blk_t *x, const blk_t *y)
{
    return x->size < y->size || (x->size == y->size && x->addr < y->addr);
}

/* b into its class's tree (never the class's smallest: that is min's slot) */
A_INLINE void cls_tree_put(struct pool_cls *k, blk_t *b)
{
    blk_t *f = k->first;
    if (!f || blk_before(b, f)) { /* the tree's new first: the left child of the old one */
        rb_insert_at(&k->t, b, f, true);
        k->first = b;
    } else {
        rb_insert(&k->t, b);
    }
}

A_INLINE void free_insert_fast(alloc_t *a, pool_t *p, blk_t *b)
{
    b->rb.st = B_FREE;
    nb_announce(b);
    unsigned c = a_size_class(b->size);
    b->rb.cls = c;
    struct pool_cls *k = &p->cls[c];
    blk_t *m = k->min;
    if (!m) {
        blk_t *f = k->first;
        if (!f) { /* the usual case: classes are fine enough that most hold one block */
            uint64_t *w = &p->bitmap[c >> 6];
            if (!*w) p->summary[c >> 12] |= 1ull << ((c >> 6) & 63);
            *w |= 1ull << (c & 63);
            k->min = b;
        } else if (blk_before(b, f)) { /* best fit's block coming back: its slot again */
            k->min = b;
        } else {
            cls_tree_put(k, b);
        }
    } else if (blk_before(b, m)) { /* the old smallest becomes the tree's first */
        cls_tree_put(k, m);
        k->min = b;
    } else {
        cls_tree_put(k, b);
    }
    p->free_bytes += b->size;
    a->cached_free += b->size;
    b->rb.split = blk_is_split_nb(b);
    if (b->rb.split) {
        stat_add(&a->st.inactive_split_bytes, (int64_t)b->size);
        stat_add(&a->st.inactive_split, 1);
    }
}

A_INLINE void free_remove_fast(alloc_t *a, pool_t *p, blk_t *b)
{
    unsigned c = b->rb.cls;
    struct pool_cls *k = &p->cls[c];
    if (k->min == b) { /* the smallest: the tree is not touched */
        k->min = NULL;
    } else if (k->t.root == &b->rb && !b->rb.left && !b->rb.right) { /* the tree's only block */
        k->t.root = NULL;
        k->t.count = 0;
        k->first = NULL;
    } else {
        if (k->first == b) k->first = rb_next(b);
        rb_erase(&k->t, b);
    }
    if (!k->min && !k->first && !(p->bitmap[c >> 6] &= ~(1ull << (c & 63))))
        p->summary[c >> 12] &= ~(1ull << ((c >> 6) & 63));
    p->free_bytes -= b->size;
    a->cached_free -= b->size;
    if (b->rb.split) {
        stat_sub(&a->st.inactive_split_bytes, (int64_t)b->size);
        stat_sub(&a->st.inactive_split, 1);
        b->rb.split = 0;
    }
}

static void free_insert(alloc_t *a, pool_t *p, blk_t *b)
{
    free_insert_fast(a, p, b);
}

static void free_remove(alloc_t *a, pool_t *p, blk_t *b)
{
    free_remove_fast(a, p, b);
}

static int next_class(const pool_t *p, unsigned c)
{
    if (c >= A_NCLS) return -1;
    unsigned w = c >> 6;
    uint64_t bits = p->bitmap[w] & (~0ull << (c & 63));
    if (bits) return (int)(w * 64 + (unsigned)__builtin_ctzll(bits));
    /* the next non-zero word, through the summary */
    if (++w >= A_NCLS_WORDS) return -1;
    unsigned s = w >> 6;
    uint64_t sb = p->summary[s] & (~0ull << (w & 63));
    for (;;) {
        if (sb) {
            w = s * 64 + (unsigned)__builtin_ctzll(sb);
            return (int)(w * 64 + (unsigned)__builtin_ctzll(p->bitmap[w]));
        }
        if (++s >= A_NCLS_SUMMARY) return -1;
        sb = p->summary[s];
    }
}

static blk_t *largest_free(const pool_t *p)
{
    for (int s = A_NCLS_SUMMARY - 1; s >= 0; s--)
        if (p->summary[s]) {
            unsigned w = (unsigned)s * 64 + 63 - (unsigned)__builtin_clzll(p->summary[s]);
            const struct pool_cls *k =
                &p->cls[w * 64 + 63 - (unsigned)__builtin_clzll(p->bitmap[w])];
            return k->t.root ? rb_last(&k->t) : k->min; /* min is before the tree's blocks */
        }
    return NULL;
}

/* A non-empty class's smallest block (NULL for an empty class) */
static inline blk_t *cls_smallest(const struct pool_cls *k)
{
    return k->min ? k->min : k->first;
}

/* The smallest FREE block >= size in (size, address) order, or NULL. */
static blk_t *lower_bound_free(const pool_t *p, size_t size)
{
    unsigned c = a_size_class(size);
    if (c >= p->ncls) return NULL; /* larger than anything the pool can hold */
    blk_t *b = cls_smallest(&p->cls[c]);
    if (b && b->size < size) /* the class's smallest is too small: search its tree */
        b = rb_lower_bound(&p->cls[c].t, size);
    if (!b) {
        int c2 = next_class(p, c + 1);
        if (c2 < 0) return NULL;
        b = cls_smallest(&p->cls[c2]);
    }
    return b;
}

/* The pool's smallest FREE block (lowest address among equals), or NULL: with free_succ, a walk
 * of every FREE block of the pool and of nothing else. */
static blk_t *first_free(const pool_t *p)
{
    return p->free_bytes ? lower_bound_free(p, 0) : NULL;
}

/* The FREE block after b in (size, address) order, or NULL. */
static blk_t *free_succ(const pool_t *p, const blk_t *b)
{
    const struct pool_cls *k = &p->cls[b->rb.cls];
    blk_t *n = k->min == b ? k->first : rb_next(b);
    if (n) return n;
    int c2 = next_class(p, b->rb.cls + 1);
    return c2 < 0 ? NULL : cls_smallest(&p->cls[c2]);
}

/* PyTorch's "expandable size" of a free block: what it can grow to by mapping the unmapped
 * space right after it. */
static uint64_t expandable_size(const blk_t *b)
{
    return b->size + (b->next && b->next->rb.st == B_UNMAPPED ? b->next->size : 0);
}

/* Best fit: the smallest FREE block >= rs (lowest address among equals). Under the pytorch
 * policy in an expandable range, PyTorch's get_free_block then moves on to larger blocks while
 * their expandable size is smaller, so the block before the range's unmapped tail is kept for
 * requests nothing else fits. Then PyTorch's max_split_size rules: an oversize block
 * (>= max_split_size) is not used for a request below max_split_size, nor for a larger request
 * it exceeds by max_non_split_rounding (20 MiB) or more. */
static blk_t *find_free(alloc_t *a, pool_t *p, size_t rs)
{
    blk_t *b = lower_bound_free(p, rs);
    if (!b) return NULL;
    if (a->cfg.policy == ALLOC_POLICY_PYTORCH && b->seg->expandable)
        for (blk_t *n; (n = free_succ(p, b)) && expandable_size(n) < expandable_size(b);)
            b = n;
    size_t ms = a->cfg.max_split_size;
    if (ms != SIZE_MAX) {
        if (rs < ms && b->size >= ms) return NULL;
        if (rs >= ms && b->size - rs >= a->cfg.max_non_split_rounding) return NULL;
    }
    return b;
}

/* PyTorch's should_split: with expandable segments, and in the small pool, any remainder of
 * 512 B or more; in classic large segments only more than 1 MiB, and never a block serving a
 * request of max_split_size or more. */
static bool should_split(const alloc_t *a, const pool_t *p, size_t rs, size_t rem)
{
    if (a->cfg.policy == ALLOC_POLICY_PYTORCH) {
        if (p->small || a->vmm) return rem >= A_MIN_BLOCK;
        return rs < a->cfg.max_split_size && rem > A_SMALL_SIZE;
    }
    return rem >= A_MIN_BLOCK && rs < a->cfg.max_split_size;
}

/* ---- streams --------------------------------------------------------------------------------- */

static void pool_init(alloc_t *a, pool_t *p, sstate_t *st, bool small)
{
    memset(p, 0, sizeof(*p));
    p->owner = st;
    p->small = small;
    size_t h = small ? a->cfg.handle_size_small : a->cfg.handle_size;
    p->hsize = h;
}

/* Grow p's size-class index to cover a FREE block of `bound` bytes: called before the pool
 * grows (a classic segment of that size, an expandable range whose mapped bytes reach it), so
 * that putting a block into the index never has to allocate. Whole stretches of A_SUB classes;
 * the trees move with the array (no node points at its tree). 0, or -1 when out of host memory. */
static int pool_cover(pool_t *p, uint64_t bound)
{
    unsigned need = a_size_class(bound) + 1;
    if (need <= p->ncls) return 0;
    need = (need + A_SUB - 1) / A_SUB * A_SUB;
    if (need > A_NCLS) need = A_NCLS;
    struct pool_cls *n = realloc(p->cls, need * sizeof(*n));
    if (!n) return -1;
    memset(n + p->ncls, 0, (need - p->ncls) * sizeof(*n));
    p->cls = n;
    p->ncls = need;
    return 0;
}

static void sstate_free(sstate_t *st)
{
    free(st->pools[0].cls);
    free(st->pools[1].cls);
    free(st);
}

static inline size_t stab_slot(const alloc_t *a, uintptr_t stream)
{
    return (size_t)(((uint64_t)stream * 0x9E3779B97F4A7C15ull) >> 32) & a->stab_mask;
}

/* Refill the stream table from streams[], growing it first when streams[] holds more than half
 * its size. Returns false on host OOM (the old table, still valid for the old streams, stays). */
static bool stab_rebuild(alloc_t *a)
{
    size_t cap = a->stab_mask + 1;
    if (!a->stab || a->nstreams * 2 > cap) {
        size_t nc = a->stab ? cap : 16;
        while (a->nstreams * 2 > nc) nc *= 2;
        sstate_t **t = malloc(nc * sizeof(*t));
        if (!t) return false;
        free(a->stab);
        a->stab = t;
        a->stab_mask = nc - 1;
    }
    memset(a->stab, 0, (a->stab_mask + 1) * sizeof(*a->stab));
    for (size_t i = 0; i < a->nstreams; i++) {
        size_t h = stab_slot(a, a->streams[i]->stream);
        while (a->stab[h]) h = (h + 1) & a->stab_mask;
        a->stab[h] = a->streams[i];
    }
    return true;
}

sstate_t *a_stream_find(alloc_t *a, uintptr_t stream)
{
    if (!a->stab) return NULL;
    for (size_t h = stab_slot(a, stream);; h = (h + 1) & a->stab_mask) {
        sstate_t *st = a->stab[h];
        if (!st || st->stream == stream) return st;
    }
}

static sstate_t *stream_get_slow(alloc_t *a, uintptr_t stream);

/* The state of `stream`, made on its first use (NULL: host OOM). The hot path asks for the
 * stream it asked for last. */
static inline sstate_t *stream_get(alloc_t *a, uintptr_t stream)
{
    sstate_t *st = a->last_stream;
    if (st && st->stream == stream && !st->dead) return st;
    return stream_get_slow(a, stream);
}

static sstate_t *stream_get_slow(alloc_t *a, uintptr_t stream)
{
    sstate_t *st = a_stream_find(a, stream);
    if (st) {
        if (st->dead) { /* a new stream with the handle of a forgotten one */
            st->dead = false;
            st->fenced = true;
        }
        a->last_stream = st;
        return st;
    }
    if (a->nstreams == a->cap_streams) {
        size_t nc = a->cap_streams ? a->cap_streams * 2 : 8;
        sstate_t **ns = realloc(a->streams, nc * sizeof(*ns));
        if (!ns) return NULL;
        a->streams = ns;
        a->cap_streams = nc;
    }
    st = calloc(1, sizeof(*st));
    if (!st) return NULL;
    st->stream = stream;
    st->fenced = true;
    pool_init(a, &st->pools[0], st, true);
    pool_init(a, &st->pools[1], st, false);
    a->streams[a->nstreams++] = st;
    if (!stab_rebuild(a)) {
        a->nstreams--;
        sstate_free(st);
        return NULL;
    }
    a->last_stream = st;
    return st;
}

static inline pool_t *pool_for(alloc_t *a, sstate_t *st, size_t rs)
{
    if (!a->cfg.per_stream_pools && !st->graph) {
        if (!a->shared) a->shared = st; /* the first stream that allocates */
        st = a->shared;
    }
    return &st->pools[rs > A_SMALL_SIZE];
}

/* ---- segments: classic ----------------------------------------------------------------------- */

static void seg_link(pool_t *p, seg_t *s)
{
    s->pool = p;
    s->prev_in_pool = NULL;
    s->next_in_pool = p->segs;
    if (p->segs) p->segs->prev_in_pool = s;
    p->segs = s;
}

static void seg_unlink(pool_t *p, seg_t *s)
{
    if (s->prev_in_pool)
        s->prev_in_pool->next_in_pool = s->next_in_pool;
    else
        p->segs = s->next_in_pool;
    if (s->next_in_pool) s->next_in_pool->prev_in_pool = s->prev_in_pool;
}

/* PyTorch's segment sizes (get_allocation_size): a 2 MiB segment for small requests, 20 MiB
 * (large_segment_size_mb) for 1..10 MiB, else the request rounded to 2 MiB. nocache: exactly
 * the request. */
static size_t classic_seg_size(const alloc_t *a, size_t rs)
{
    if (a->cfg.policy == ALLOC_POLICY_NOCACHE) return rs;
    if (rs <= A_SMALL_SIZE) return A_SMALL_BUFFER;
    if (rs < A_MIN_LARGE_ALLOC) return a->cfg.large_segment;
    return round_up(rs, A_ROUND_LARGE);
}

static bool over_limit(const alloc_t *a, size_t more)
{
    return a->cfg.limit != ALLOC_NO_LIMIT &&
           (size_t)a->st.reserved_bytes.current + more > a->cfg.limit;
}

static int grow_classic(alloc_t *a, pool_t *p, size_t rs, blk_t **out)
{
    size_t sz = classic_seg_size(a, rs);
    if (over_limit(a, sz)) return GROW_OOM;
    if (pool_cover(p, sz)) return GROW_NOMEM;
    seg_t *s = calloc(1, sizeof(*s));
    blk_t *b = blk_new(a);
    if (!s || !b) {
        free(s);
        if (b) blk_del(a, b);
        return GROW_NOMEM;
    }
    uint64_t addr = 0;
    be_count(a, ALLOC_BE_CALL_SEG_ALLOC);
    int rc = be_rc(a, a->be.seg_alloc(a->be.ctx, sz, &addr));
    if (rc != ALLOC_BE_OK) {
        free(s);
        blk_del(a, b);
        return rc == ALLOC_BE_OOM ? GROW_OOM : GROW_ERR;
    }
    a->st.num_device_alloc++;
    note_va(a, addr);
    s->base = addr;
    s->size = sz;
    s->first = b;
    seg_link(p, s);
    b->addr = addr;
    b->size = sz;
    b->seg = s;
    stat_add(&a->st.reserved_bytes, (int64_t)sz);
    stat_add(&a->st.segment, 1);
    if (a->hooks.on_segment_map) a->hooks.on_segment_map(a->hooks.user, addr, sz, p->owner->stream);
    *out = b;
    return GROW_OK;
}

static void release_classic_segment(alloc_t *a, pool_t *p, blk_t *b)
{
    seg_t *s = b->seg;
    if (b->rb.st == B_FREE) free_remove(a, p, b);
    be_count(a, ALLOC_BE_CALL_SEG_FREE);
    a->st.num_device_free++;
    be_rc(a, a->be.seg_free(a->be.ctx, s->base, s->size));
    stat_sub(&a->st.reserved_bytes, (int64_t)s->size);
    stat_sub(&a->st.segment, 1);
    if (a->hooks.on_segment_unmap)
        a->hooks.on_segment_unmap(a->hooks.user, s->base, s->size, p->owner->stream);
    seg_unlink(p, s);
    blk_del(a, b);
    free(s);
}

/* ---- segments: guard pages (guard:1) ------------------------------------------------------------
 * Each allocation is a segment of its own: address space for its pages plus one granule, one
 * physical handle mapped over the pages, the block placed at their end so that the first byte
 * past its (512 B rounded) end is the unmapped granule. The segment is the block: nothing is
 * split, cached or merged, and the block's free gives everything back once it lands. */
static int guard_grow(alloc_t *a, pool_t *p, size_t rs, blk_t **out)
{
    size_t g = a->gran, mapped = round_up(rs, g);
    if (mapped < rs || mapped > SIZE_MAX - g) return GROW_OOM;
    if (over_limit(a, mapped)) return GROW_OOM;
    if (pool_cover(p, rs)) return GROW_NOMEM;
    seg_t *s = calloc(1, sizeof(*s));
    blk_t *b = blk_new(a);
    if (!s || !b) {
        free(s);
        if (b) blk_del(a, b);
        return GROW_NOMEM;
    }
    uint64_t va = 0, h = 0;
    be_count(a, ALLOC_BE_CALL_RESERVE);
    int rc = be_rc(a, a->be.reserve(a->be.ctx, mapped + g, g, &va));
    if (rc == ALLOC_BE_OK) {
        be_count(a, ALLOC_BE_CALL_CREATE);
        rc = be_rc(a, a->be.create(a->be.ctx, mapped, &h));
        if (rc == ALLOC_BE_OK) {
            be_count(a, ALLOC_BE_CALL_MAP);
            rc = be_rc(a, a->be.map(a->be.ctx, va, mapped, h));
            if (rc == ALLOC_BE_OK) {
                be_count(a, ALLOC_BE_CALL_SET_ACCESS);
                rc = be_rc(a, a->be.set_access(a->be.ctx, va, mapped));
                if (rc != ALLOC_BE_OK) {
                    be_count(a, ALLOC_BE_CALL_UNMAP);
                    a->be.unmap(a->be.ctx, va, mapped);
                }
            }
            if (rc != ALLOC_BE_OK) {
                be_count(a, ALLOC_BE_CALL_RELEASE);
                a->be.release(a->be.ctx, h);
            }
        }
        if (rc != ALLOC_BE_OK) {
            be_count(a, ALLOC_BE_CALL_FREE_RANGE);
            a->be.free_range(a->be.ctx, va, mapped + g);
        }
    }
    if (rc != ALLOC_BE_OK) {
        free(s);
        blk_del(a, b);
        return rc == ALLOC_BE_OOM ? GROW_OOM : GROW_ERR;
    }
    a->st.num_device_alloc++;
    note_va(a, va);
    s->guard = true;
    s->g_va = va;
    s->g_handle = h;
    s->g_mapped = mapped;
    s->base = va + mapped - rs;
    s->size = rs;
    s->first = b;
    seg_link(p, s);
    b->addr = s->base;
    b->size = rs;
    b->seg = s;
    stat_add(&a->st.reserved_bytes, (int64_t)mapped);
    stat_add(&a->st.segment, 1);
    if (a->hooks.on_segment_map) a->hooks.on_segment_map(a->hooks.user, va, mapped, p->owner->stream);
    *out = b;
    return GROW_OK;
}

/* The guard segment of a block that became free: unmap, release, give the address space back. */
static void guard_release(alloc_t *a, pool_t *p, blk_t *b)
{
    seg_t *s = b->seg;
    be_count(a, ALLOC_BE_CALL_UNMAP);
    be_rc(a, a->be.unmap(a->be.ctx, s->g_va, s->g_mapped));
    be_count(a, ALLOC_BE_CALL_RELEASE);
    be_rc(a, a->be.release(a->be.ctx, s->g_handle));
    be_count(a, ALLOC_BE_CALL_FREE_RANGE);
    be_rc(a, a->be.free_range(a->be.ctx, s->g_va, s->g_mapped + a->gran));
    a->st.num_device_free++;
    stat_sub(&a->st.reserved_bytes, (int64_t)s->g_mapped);
    stat_sub(&a->st.segment, 1);
    if (a->hooks.on_segment_unmap)
        a->hooks.on_segment_unmap(a->hooks.user, s->g_va, s->g_mapped, p->owner->stream);
    seg_unlink(p, s);
    blk_del(a, b);
    free(s);
}

/* ---- segments: expandable ranges ------------------------------------------------------------- */

static inline bool slot_mapped(const seg_t *r, size_t i)
{
    return i < r->nslots && (r->mapbits[i >> 6] >> (i & 63)) & 1;
}

/* Reserve one more address range for the pool, sized to the device. The first range serves
 * almost every program; more appear only when the address space of the existing ones is too
 * fragmented for a request (live blocks in the way). A request larger than the device can never
 * be mapped: it is an OOM at once, before host arrays of a slot per handle are sized to it (a
 * 37 TiB request cost 150 MB of them and 12 s; a larger one, more host memory than there is). */
static int range_create(alloc_t *a, pool_t *p, size_t rs)
{
    if (rs > a->capacity) return GROW_OOM;
    size_t h = p->hsize;
    size_t size = round_up(a->capacity, h);
    seg_t *r = calloc(1, sizeof(*r));
    blk_t *u = blk_new(a);
    if (!r || !u) {
        free(r);
        if (u) blk_del(a, u);
        return GROW_NOMEM;
    }
    r->expandable = true;
    r->hsize = h;
    r->nslots = size / h;
    r->handles = calloc(r->nslots, sizeof(*r->handles));
    r->mapbits = calloc((r->nslots + 63) / 64, sizeof(*r->mapbits));
    if (!r->handles || !r->mapbits) {
        free(r->handles);
        free(r->mapbits);
        free(r);
        blk_del(a, u);
        return GROW_NOMEM;
    }
    uint64_t base = 0;
    be_count(a, ALLOC_BE_CALL_RESERVE);
    /* the driver takes only a power-of-two alignment: the largest one dividing the handle size
     * (20 MiB handles of the pytorch-expandable preset: 4 MiB) keeps every slot aligned */
    int rc = be_rc(a, a->be.reserve(a->be.ctx, size, h & (~h + 1), &base));
    if (rc != ALLOC_BE_OK) {
        free(r->handles);
        free(r->mapbits);
        free(r);
        blk_del(a, u);
        return rc == ALLOC_BE_OOM ? GROW_OOM : GROW_ERR;
    }
    note_va(a, base);
    r->base = base;
    r->size = size;
    u->addr = base;
    u->size = size;
    u->seg = r;
    u->rb.st = B_UNMAPPED;
    r->first = u;
    rb_insert(&p->unmapped, u);
    seg_link(p, r);
    p->nranges++;
    return GROW_OK;
}

static uint64_t cap_around(const blk_t *u)
{
    uint64_t c = u->size;
    if (u->prev && u->prev->rb.st == B_FREE) c += u->prev->size;
    if (u->next && u->next->rb.st == B_FREE) c += u->next->size;
    return c;
}

/* The unmapped block to grow into: smallest hole (with its free neighbours) that fits, so holes
 * fill before the range's tail grows. Ascending sizes from a lower bound that cannot skip a
 * candidate whose neighbours make up the difference; bounded, then the tail (largest). */
static blk_t *pick_unmapped(pool_t *p, size_t rs)
{
    const blk_t *g = largest_free(p);
    uint64_t gs = g ? g->size : 0;
    uint64_t lo = rs > 2 * gs ? rs - 2 * gs : 0;
    blk_t *u = rb_lower_bound(&p->unmapped, lo);
    for (int i = 0; u && i < 64; i++, u = rb_next(u))
        if (cap_around(u) >= rs) return u;
    u = rb_last(&p->unmapped);
    return (u && cap_around(u) >= rs) ? u : NULL;
}

/* Map [addr, addr+len) of range r, one handle per slot; all or nothing. */
static int map_slots(alloc_t *a, seg_t *r, uint64_t addr, size_t len)
{
    size_t h = r->hsize, first = (addr - r->base) / h, n = len / h, i;
    /* a FREE block of the range is mapped memory: no larger than what will be mapped */
    if (pool_cover(r->pool, r->mapped + len)) return GROW_NOMEM;
    int rc = ALLOC_BE_OK;
    for (i = 0; i < n; i++) {
        uint64_t handle = 0, at = addr + i * h;
        be_count(a, ALLOC_BE_CALL_CREATE);
        rc = be_rc(a, a->be.create(a->be.ctx, h, &handle));
        if (rc != ALLOC_BE_OK) break;
        be_count(a, ALLOC_BE_CALL_MAP);
        rc = be_rc(a, a->be.map(a->be.ctx, at, h, handle));
        if (rc != ALLOC_BE_OK) {
            be_count(a, ALLOC_BE_CALL_RELEASE);
            a->be.release(a->be.ctx, handle);
            break;
        }
        a->st.num_device_alloc++;
        r->handles[first + i] = handle;
    }
    if (rc == ALLOC_BE_OK) {
        be_count(a, ALLOC_BE_CALL_SET_ACCESS);
        rc = be_rc(a, a->be.set_access(a->be.ctx, addr, len));
    }
    if (rc != ALLOC_BE_OK) { /* undo what this call mapped */
        for (size_t j = 0; j < i; j++) {
            be_count(a, ALLOC_BE_CALL_UNMAP);
            be_count(a, ALLOC_BE_CALL_RELEASE);
            a->be.unmap(a->be.ctx, addr + j * h, h);
            a->be.release(a->be.ctx, r->handles[first + j]);
            a->st.num_device_free++;
        }
        return rc == ALLOC_BE_OOM ? GROW_OOM : GROW_ERR;
    }
    for (i = 0; i < n; i++)
        r->mapbits[(first + i) >> 6] |= 1ull << ((first + i) & 63);
    size_t left = first > 0 && slot_mapped(r, first - 1);
    size_t right = slot_mapped(r, first + n);
    r->runs = r->runs + 1 - left - right;
    stat_add(&a->st.segment, 1 - (int64_t)left - (int64_t)right);
    r->mapped += len;
    stat_add(&a->st.reserved_bytes, (int64_t)len);
    if (a->hooks.on_segment_map)
        a->hooks.on_segment_map(a->hooks.user, addr, len, r->pool->owner->stream);
    return GROW_OK;
}

static void unmap_slots(alloc_t *a, seg_t *r, uint64_t addr, size_t len)
{
    size_t h = r->hsize, first = (addr - r->base) / h, n = len / h;
    for (size_t i = 0; i < n; i++) {
        be_count(a, ALLOC_BE_CALL_UNMAP);
        be_count(a, ALLOC_BE_CALL_RELEASE);
        a->st.num_device_free++;
        be_rc(a, a->be.unmap(a->be.ctx, addr + i * h, h));
        be_rc(a, a->be.release(a->be.ctx, r->handles[first + i]));
        r->handles[first + i] = 0;
        r->mapbits[(first + i) >> 6] &= ~(1ull << ((first + i) & 63));
    }
    size_t left = first > 0 && slot_mapped(r, first - 1);
    size_t right = slot_mapped(r, first + n);
    r->runs = r->runs + left + right - 1;
    stat_add(&a->st.segment, (int64_t)left + (int64_t)right - 1);
    r->mapped -= len;
    stat_sub(&a->st.reserved_bytes, (int64_t)len);
    if (a->hooks.on_segment_unmap)
        a->hooks.on_segment_unmap(a->hooks.user, addr, len, r->pool->owner->stream);
}

/* Insert a new block after `at` in its segment's address list. The edges made get every
 * neighbour bit (internal.h, NB_*: a set bit is always true). */
static void link_after(blk_t *at, blk_t *n)
{
    n->seg = at->seg;
    n->prev = at;
    n->next = at->next;
    n->rb.nb = NB_ALL;
    if (at->next) {
        at->next->prev = n;
        at->next->rb.nb |= NB_PF | NB_AP;
    }
    at->next = n;
    at->rb.nb |= NB_NF | NB_AN;
}

static void link_before(blk_t *at, blk_t *n)
{
    n->seg = at->seg;
    n->next = at;
    n->prev = at->prev;
    n->rb.nb = NB_ALL;
    if (at->prev) {
        at->prev->next = n;
        at->prev->rb.nb |= NB_NF | NB_AN;
    } else {
        at->seg->first = n;
    }
    at->prev = n;
    at->rb.nb |= NB_PF | NB_AP;
}

static void unlink_blk(blk_t *b)
{
    if (b->prev) {
        b->prev->next = b->next;
        b->prev->rb.nb |= NB_NF | NB_AN;
    } else {
        b->seg->first = b->next;
    }
    if (b->next) {
        b->next->prev = b->prev;
        b->next->rb.nb |= NB_PF | NB_AP;
    }
}

/* ---- expandable growth, PyTorch's way (find_expandable_block / map_block) ----------------- */

static int by_addr(const void *x, const void *y)
{
    const blk_t *a = *(const blk_t *const *)x, *b = *(const blk_t *const *)y;
    return a->addr < b->addr ? -1 : (a->addr > b->addr);
}

/* The lowest-address start of a run of FREE and UNMAPPED blocks adding up to rs: an unmapped
 * block, or the FREE block just before it. Holes are few, so sorting them costs little. */
static blk_t *pick_chain_pytorch(pool_t *p, size_t rs, int *nomem)
{
    size_t n = p->unmapped.count, k = 0;
    *nomem = 0;
    if (!n) return NULL;
    blk_t **v = malloc(n * sizeof(*v));
    if (!v) {
        *nomem = 1;
        return NULL;
    }
    for (blk_t *u = rb_first(&p->unmapped); u && k < n; u = rb_next(u))
        v[k++] = u;
    if (k > 1) qsort(v, k, sizeof(*v), by_addr);
    blk_t *found = NULL;
    for (size_t i = 0; i < k && !found; i++) {
        blk_t *c = v[i]->prev && v[i]->prev->rb.st == B_FREE ? v[i]->prev : v[i];
        uint64_t sum = 0;
        for (blk_t *x = c; x && sum < rs && (x->rb.st == B_FREE || x->rb.st == B_UNMAPPED);
             x = x->next)
            sum += x->size;
        if (sum >= rs) found = c;
    }
    free(v);
    return found;
}

/* Map the low end of unmapped block u, at least len bytes (whole handles, at most u), merge the
 * new FREE piece with FREE neighbours and put it in the index. */
static int map_low(alloc_t *a, pool_t *p, blk_t *u, size_t len, blk_t **merged)
{
    seg_t *r = u->seg;
    uint64_t m = round_up(len, r->hsize);
    if (m > u->size) m = u->size;
    if (over_limit(a, m)) return GROW_OOM;
    blk_t *uhi = NULL;
    if (m < u->size && !(uhi = blk_new(a))) return GROW_NOMEM;
    int rc = map_slots(a, r, u->addr, m);
    if (rc) {
        if (uhi) blk_del(a, uhi);
        return rc;
    }
    rb_erase(&p->unmapped, u);
    if (uhi) {
        uhi->addr = u->addr + m;
        uhi->size = u->size - m;
        uhi->rb.st = B_UNMAPPED;
        link_after(u, uhi);
        rb_insert(&p->unmapped, uhi);
    }
    u->size = m;
    u->rb.st = B_FREE;
    u->stamp = a->epoch;
    if (u->prev && u->prev->rb.st == B_FREE) {
        blk_t *q = u->prev;
        free_remove(a, p, q);
        u->addr = q->addr;
        u->size += q->size;
        unlink_blk(q);
        blk_del(a, q);
    }
    if (u->next && u->next->rb.st == B_FREE) {
        blk_t *q = u->next;
        free_remove(a, p, q);
        u->size += q->size;
        unlink_blk(q);
        blk_del(a, q);
    }
    free_insert(a, p, u);
    *merged = u;
    return GROW_OK;
}

/* PyTorch's try_allocate_expandable_block: the lowest-address chain of FREE and UNMAPPED blocks
 * that holds rs (a new range when none does), mapped upward from its start until the FREE block
 * at its start is rs bytes or more. The limit is checked first against the classic segment size
 * of the request, as PyTorch checks its memory fraction against get_allocation_size. What was
 * mapped before a failure stays mapped and cached, as in PyTorch. */
static int grow_expandable_pytorch(alloc_t *a, pool_t *p, size_t rs, blk_t **out)
{
    if (over_limit(a, classic_seg_size(a, rs))) return GROW_OOM;
    int nomem;
    blk_t *c = pick_chain_pytorch(p, rs, &nomem);
    if (nomem) return GROW_NOMEM;
    if (!c) {
        int rc = range_create(a, p, rs);
        if (rc) return rc;
        c = pick_chain_pytorch(p, rs, &nomem);
        if (nomem) return GROW_NOMEM;
        if (!c) return GROW_OOM;
    }
    if (c->rb.st == B_UNMAPPED) {
        int rc = map_low(a, p, c, rs < c->size ? rs : c->size, &c);
        if (rc) return rc;
    }
    while (c->size < rs) { /* FREE, then UNMAPPED after it: map more and merge */
        blk_t *u = c->next;
        if (!u || u->rb.st != B_UNMAPPED) return GROW_OOM; /* cannot happen: the chain held rs */
        size_t need = rs - c->size;
        int rc = map_low(a, p, u, need < u->size ? need : u->size, &c);
        if (rc) return rc;
    }
    free_remove(a, p, c);
    *out = c;
    return GROW_OK;
}

/* Grow the pool's range so that a FREE run of >= rs bytes exists; returns it out of the index. */
static int grow_expandable(alloc_t *a, pool_t *p, size_t rs, blk_t **out)
{
    if (a->cfg.policy == ALLOC_POLICY_PYTORCH) return grow_expandable_pytorch(a, p, rs, out);
    blk_t *u = pick_unmapped(p, rs);
    if (!u) {
        if (over_limit(a, round_up(rs, p->hsize)))
            return GROW_OOM; /* no new address space for memory we may not map anyway */
        int rc = range_create(a, p, rs);
        if (rc) return rc;
        u = pick_unmapped(p, rs);
        if (!u) return GROW_OOM;
    }
    seg_t *r = u->seg;
    size_t h = r->hsize;
    blk_t *P = (u->prev && u->prev->rb.st == B_FREE) ? u->prev : NULL;
    blk_t *N = (u->next && u->next->rb.st == B_FREE) ? u->next : NULL;
    uint64_t lo, m;
    if (P) {
        uint64_t need = rs > P->size ? rs - P->size : 0;
        m = round_up(need, h);
        if (m > u->size) m = u->size;
        lo = u->addr;
    } else if (N) {
        uint64_t need = rs > N->size ? rs - N->size : 0;
        m = round_up(need, h);
        if (m > u->size) m = u->size;
        lo = u->addr + u->size - m;
    } else {
        m = round_up(rs, h);
        lo = u->addr;
    }
    if (m && over_limit(a, m)) return GROW_OOM;
    /* block structs first, so a host-malloc failure cannot leave a half-done mapping */
    blk_t *ulo = NULL, *uhi = NULL;
    if (lo > u->addr && !(ulo = blk_new(a))) return GROW_NOMEM;
    if (lo + m < u->addr + u->size && !(uhi = blk_new(a))) {
        if (ulo) blk_del(a, ulo);
        return GROW_NOMEM;
    }
    if (m) {
        int rc = map_slots(a, r, lo, m);
        if (rc) {
            if (ulo) blk_del(a, ulo);
            if (uhi) blk_del(a, uhi);
            return rc;
        }
    }
    rb_erase(&p->unmapped, u);
    uint64_t uend = u->addr + u->size;
    if (ulo) {
        ulo->addr = u->addr;
        ulo->size = lo - u->addr;
        ulo->rb.st = B_UNMAPPED;
        link_before(u, ulo);
        rb_insert(&p->unmapped, ulo);
    }
    if (uhi) {
        uhi->addr = lo + m;
        uhi->size = uend - (lo + m);
        uhi->rb.st = B_UNMAPPED;
        link_after(u, uhi);
        rb_insert(&p->unmapped, uhi);
    }
    blk_t *f = u; /* the newly mapped piece */
    f->addr = lo;
    f->size = m;
    f->rb.st = B_FREE;
    f->fseq = 0; /* fresh memory: no stream has used it */
    if (f->prev && f->prev->rb.st == B_FREE) {
        blk_t *q = f->prev;
        free_remove(a, p, q);
        f->addr = q->addr;
        f->size += q->size;
        f->fseq = max_u64(f->fseq, q->fseq);
        unlink_blk(q);
        blk_del(a, q);
    }
    if (f->next && f->next->rb.st == B_FREE) {
        blk_t *q = f->next;
        free_remove(a, p, q);
        f->size += q->size;
        f->fseq = max_u64(f->fseq, q->fseq);
        unlink_blk(q);
        blk_del(a, q);
    }
    if (f->size == 0) { /* nothing mapped and no neighbour: cannot happen, but never hand out 0 */
        unlink_blk(f);
        blk_del(a, f);
        return GROW_OOM;
    }
    *out = f;
    return GROW_OK;
}

/* Unmap the whole handles inside a FREE block of an expandable range (caller synchronized). */
static size_t release_pages(alloc_t *a, pool_t *p, blk_t *b)
{
    seg_t *r = b->seg;
    size_t h = r->hsize;
    uint64_t lo = r->base + round_up(b->addr - r->base, h);
    uint64_t hi = r->base + (b->addr + b->size - r->base) / h * h;
    if (lo >= hi) return 0;
    blk_t *head = NULL, *tail = NULL;
    if (lo > b->addr && !(head = blk_new(a))) return 0;
    if (hi < b->addr + b->size && !(tail = blk_new(a))) {
        if (head) blk_del(a, head);
        return 0;
    }
    free_remove(a, p, b);
    unmap_slots(a, r, lo, hi - lo);
    uint64_t bend = b->addr + b->size;
    if (head) {
        head->addr = b->addr;
        head->size = lo - b->addr;
        head->fseq = b->fseq;
        link_before(b, head);
    }
    if (tail) {
        tail->addr = hi;
        tail->size = bend - hi;
        tail->fseq = b->fseq;
        link_after(b, tail);
    }
    b->addr = lo;
    b->size = hi - lo;
    b->rb.st = B_UNMAPPED;
    if (b->prev && b->prev->rb.st == B_UNMAPPED) {
        blk_t *q = b->prev;
        rb_erase(&p->unmapped, q);
        b->addr = q->addr;
        b->size += q->size;
        unlink_blk(q);
        blk_del(a, q);
    }
    if (b->next && b->next->rb.st == B_UNMAPPED) {
        blk_t *q = b->next;
        rb_erase(&p->unmapped, q);
        b->size += q->size;
        unlink_blk(q);
        blk_del(a, q);
    }
    rb_insert(&p->unmapped, b);
    if (head) free_insert(a, p, head);
    if (tail) free_insert(a, p, tail);
    return hi - lo;
}

/* Give back the memory of one FREE block: its whole pages (expandable) or its segment when the
 * block is the whole segment (classic). Returns bytes released. */
static size_t release_block(alloc_t *a, pool_t *p, blk_t *b)
{
    if (b->seg->expandable) return release_pages(a, p, b);
    if (!b->prev && !b->next) {
        size_t sz = b->seg->size;
        release_classic_segment(a, p, b);
        return sz;
    }
    return 0;
}

/* ---- events and pending frees --------------------------------------------------------------- */

/* Synchronize with the lock held: only alloc_destroy (no other thread may use the allocator). */
static int sync_device_locked(alloc_t *a)
{
    a->st.num_syncs++;
    if (!a->be.synchronize) return ALLOC_BE_OK;
    be_count(a, ALLOC_BE_CALL_SYNCHRONIZE);
    return be_rc(a, a->be.synchronize(a->be.ctx));
}

static void *ev_get(alloc_t *a)
{
    if (a->nev_pool) return a->ev_pool[--a->nev_pool];
    void *ev = NULL;
    be_count(a, ALLOC_BE_CALL_EVENT_CREATE);
    if (be_rc(a, a->be.event_create(a->be.ctx, &ev)) != ALLOC_BE_OK) return NULL;
    return ev;
}

static void ev_put(alloc_t *a, void *ev)
{
    if (a->nev_pool == a->cap_ev_pool) {
        size_t nc = a->cap_ev_pool ? a->cap_ev_pool * 2 : 64;
        void **n = realloc(a->ev_pool, nc * sizeof(*n));
        if (!n) {
            a->be.event_destroy(a->be.ctx, ev);
            return;
        }
        a->ev_pool = n;
        a->cap_ev_pool = nc;
    }
    a->ev_pool[a->nev_pool++] = ev;
}

/* A LIVE or PENDING block becomes FREE: leave the map, merge with FREE neighbours. synced: the
 * device finished every use of the block (a synchronization covered it), so a release may unmap
 * it at once; otherwise it gets the next free sequence number (see blk_t.fseq). */
static void make_free(alloc_t *a, blk_t *b, bool synced)
{
    pool_t *p = b->seg->pool;
    map_forget(a, b);
    stat_sub(&a->st.active_bytes, (int64_t)b->size);
    stat_sub(&a->st.active, 1);
    if (b->uses) { /* most blocks have none: no call into the host allocator for them */
        free(b->uses);
        b->uses = NULL;
    }
    if (b->seg->guard) { /* its work is done: its pages and guard go back */
        for (int i = 0; i < A_ICACHE; i++)
            if (a->icache[i] == b) a->icache[i] = NULL;
        guard_release(a, p, b);
        return;
    }
    b->requested = 0;
    b->stamp = a->epoch;
    b->rb.st = B_FREE;
    b->fseq = synced ? 0 : ++a->free_seq;
    /* a neighbour is read only where b's bit says it may be FREE; one found LIVE or PENDING
     * clears the bit on both sides (NB_PF here, NB_AN there), so a block freed again between
     * the same live neighbours reads neither */
    blk_t *q = b->prev;
    if ((b->rb.nb & NB_PF) && q) {
        if (q->rb.st == B_FREE) {
            free_remove_fast(a, p, q);
            b->addr = q->addr;
            b->size += q->size;
            b->fseq = max_u64(b->fseq, q->fseq);
            unlink_blk(q);
            blk_del(a, q);
        } else if (q->rb.st != B_UNMAPPED) {
            b->rb.nb &= (uint8_t)~NB_PF;
            q->rb.nb &= (uint8_t)~NB_AN;
        }
    }
    q = b->next;
    if ((b->rb.nb & NB_NF) && q) {
        if (q->rb.st == B_FREE) {
            free_remove_fast(a, p, q);
            b->size += q->size;
            b->fseq = max_u64(b->fseq, q->fseq);
            unlink_blk(q);
            blk_del(a, q);
        } else if (q->rb.st != B_UNMAPPED) {
            b->rb.nb &= (uint8_t)~NB_NF;
            q->rb.nb &= (uint8_t)~NB_AP;
        }
    }
    free_insert_fast(a, p, b);
}

static void fence_put(alloc_t *a, fence_t *f)
{
    f->next = a->fence_spare;
    a->fence_spare = f;
}

static void fev_put(alloc_t *a, fev_t *e)
{
    e->next = a->fev_spare;
    a->fev_spare = e;
}

static void fence_land(alloc_t *a, fence_t *f, bool synced)
{
    if (f->prev)
        f->prev->next = f->next;
    else
        a->fence_head = f->next;
    if (f->next)
        f->next->prev = f->prev;
    else
        a->fence_tail = f->prev;
    blk_t *b = f->blk;
    a->pending_bytes -= b->size;
    fence_put(a, f);
    if (synced && a->hooks.on_free_synced)
        a->hooks.on_free_synced(a->hooks.user, b->addr, b->size, b->stream, b->stamp);
    else if (a->hooks.on_free_landed)
        a->hooks.on_free_landed(a->hooks.user, b->addr, b->size, b->stream, b->stamp);
    make_free(a, b, synced);
}

static fev_t *fev_pop(alloc_t *a, sstate_t *st)
{
    fev_t *e = st->q_head;
    st->q_head = e->next;
    if (!st->q_head) st->q_tail = NULL;
    ev_put(a, e->ev);
    return e;
}

/* Land the pending frees whose events completed. Each stream's queue is read from its oldest
 * event and stops at the first one not done (events of one stream complete in order); streams do
 * not wait for each other. Never blocks. A failed query (a broken event) leaves its free pending
 * and asks the next malloc to synchronize (sync_and_land): memory is never held forever, and the
 * device is never synchronized here, under the lock. */
static void process_fences(alloc_t *a)
{
    if (a->captures) return; /* querying events is not allowed while a graph is captured */
    for (size_t i = 0; i < a->nstreams; i++) {
        sstate_t *st = a->streams[i];
        while (st->q_head) {
            int rc = a->be.event_query(a->be.ctx, st->q_head->ev);
            if (rc == ALLOC_BE_NOT_READY) break;
            if (rc != ALLOC_BE_OK) {
                be_rc(a, rc);
                a->broken_event = true;
                break;
            }
            fev_t *e = fev_pop(a, st);
            fence_t *f = e->f;
            fev_put(a, e);
            if (--f->left == 0) fence_land(a, f, false);
        }
    }
}

/* Every fence made before sequence `seq` is complete (a synchronization that started after it
 * has finished): drop their events and land them. Returns how many frees landed. */
static size_t land_upto(alloc_t *a, uint64_t seq)
{
    size_t landed = 0;
    for (size_t i = 0; i < a->nstreams; i++) {
        sstate_t *st = a->streams[i];
        while (st->q_head && st->q_head->f->seq <= seq) {
            fev_t *e = fev_pop(a, st);
            e->f->left--;
            fev_put(a, e);
        }
    }
    for (fence_t *f = a->fence_head, *nx; f && f->seq <= seq; f = nx) {
        nx = f->next;
        if (!f->capture) { /* a graph may still replay the others */
            fence_land(a, f, true);
            landed++;
        }
    }
    return landed;
}

/* A settle point: a release's event queries (settle_free) or a synchronization (sync_land). Inside
 * an allocation it gets the next step (alloc_hooks_t.on_marker), and a replay that takes the
 * trace's marker lines for its queries (mk_scripted) applies those the run made up to this step
 * first: a release early in an allocation must not see what the run only learnt later in it. */
static void mk_point(alloc_t *a)
{
    a->mk_cur = a->mk_in_malloc ? ++a->mk_step : 0;
    if (a->mk_scripted && a->mk_script && a->mk_cur) a->mk_script(a->mk_script_user, a->mk_cur);
}

/* Synchronize the device with the allocator lock dropped (other threads keep allocating and
 * freeing meanwhile), then land every free fenced before the synchronization started. Blocks
 * freed by other threads during the wait keep a free sequence above a->synced_free_seq, so a
 * release that follows does not unmap memory their streams may still use. Returns how many
 * frees landed.
 *
 * `restart_epoch` (non-NULL: called from a malloc's slow path, which starts over when frees
 * landed, see alloc_malloc_ex): the gc clock as the request found it. The frees landed here
 * are stamped with it, as if they had landed before the request, and when any did, the clock
 * goes back to it for the new start (unless another thread moved it during the wait). */
static size_t sync_land(alloc_t *a, const uint64_t *restart_epoch)
{
    mk_point(a);
    if (a->captures) return 0; /* synchronizing would invalidate the capture */
    uint64_t fs = a->fence_seq, frs = a->free_seq, ep = a->epoch, wid = 0;
    int scripted = -1; /* the replay's wait (wait_script): 1 the run started over after it */
    a->st.num_syncs++;
    if (a->be.synchronize) {
        be_count(a, ALLOC_BE_CALL_SYNCHRONIZE);
        /* the allocation in progress is this thread's: another one's may number its own points
         * while the lock is dropped */
        bool in = a->mk_in_malloc;
        unsigned step = a->mk_step, cur = a->mk_cur;
        size_t msz = a->mk_size;
        uintptr_t mst = a->mk_stream;
        /* the wait's start, still under the lock (trace `sw`): what it lands is what was fenced
         * and freed so far; other threads' events written from here on are made during it */
        wid = ++a->wait_seq;
        if (a->hooks.on_wait) a->hooks.on_wait(a->hooks.user, wid, in ? msz : 0, in ? mst : 0, cur);
        /* while the lock is dropped no allocation is in progress for the others: a release or
         * synchronization another thread makes outside an allocation (a stream forgotten, a
         * free's release, empty_cache) is numbered step 0, not a step of this one's (it took
         * this allocation's next step, and the replay held its lines for it) */
        a->mk_in_malloc = false, a->mk_step = 0, a->mk_cur = 0;
        UNLOCK(a);
        if (a->wait_script) scripted = a->wait_script(a->wait_user);
        int rc = a->be.synchronize(a->be.ctx);
        LOCK(a);
        a->mk_in_malloc = in, a->mk_step = step, a->mk_cur = cur, a->mk_size = msz, a->mk_stream = mst;
        be_rc(a, rc);
    }
    bool back = restart_epoch && a->epoch == ep;
    if (back) a->epoch = *restart_epoch;
    size_t landed = land_upto(a, fs);
    if (scripted >= 0 && a->wait_land) landed += a->wait_land(a->wait_user);
    /* the replay's frees (no events) land at the trace's lines: the trace's `sr` says whether
     * the run's landed some */
    if (scripted == 1 && !landed) landed = 1;
    if (back && !landed) a->epoch = ep;
    if (frs > a->synced_free_seq) a->synced_free_seq = frs;
    a->broken_event = false;
    /* for the replay, which must settle here too (trace `sy` / `sr`): a malloc's slow path starts
     * over when frees landed (alloc_malloc_ex), and the replay's allocation is that new start */
    if (a->hooks.on_marker)
        a->hooks.on_marker(a->hooks.user, restart_epoch && landed ? ALLOC_MARKER_RESTART : ALLOC_MARKER_SYNC, wid,
                           a->mk_cur);
    return landed;
}

static void sync_and_land(alloc_t *a)
{
    sync_land(a, NULL);
}

static bool stream_has(const uintptr_t *uses, uintptr_t s)
{
    for (uintptr_t i = 0; uses && i < uses[0]; i++)
        if (uses[2 + i] == s) return true;
    return false;
}

/* The streams a free of b must wait for (see alloc.h, "Stream order"), into *out (malloc'ed when
 * more than `cap` fit in `buf`). Returns the count, or (size_t)-1 on host OOM. */
static size_t fence_streams(alloc_t *a, const blk_t *b, sstate_t *freed_on, sstate_t **buf,
                            size_t cap, sstate_t ***out)
{
    *out = buf;
    size_t n = 0;
    /* a plain cudaFree waits for the whole device in CUDA, so a program may have used the block
     * on any stream without saying so: unless record_stream named its streams, every stream.
     * Streams that only access tracking saw (alloc_use_streams) are added to a stream-ordered
     * free's, never narrow a cudaFree: tracking misses uses (graph launches, pointers kept in
     * device memory), record_stream is the program's word. */
    bool given = (b->uses && b->rb.named) || freed_on;
    if (!given) {
        if (a->nstreams > cap && !(*out = malloc(a->nstreams * sizeof(**out)))) return (size_t)-1;
        for (size_t i = 0; i < a->nstreams; i++)
            if (a->streams[i]->fenced && !a->streams[i]->dead) (*out)[n++] = a->streams[i];
        return n;
    }
    size_t want = (b->uses ? b->uses[0] : 0) + 2;
    if (want > cap && !(*out = malloc(want * sizeof(**out)))) return (size_t)-1;
    /* the allocation stream needs no event when the block goes back to that stream's own pool:
     * only allocations on that stream reuse it, after its earlier work (stream order) */
    bool own_skip =
        a->cfg.per_stream_pools && (b->stream != 0 || (freed_on && freed_on->stream == b->stream));
    uintptr_t cand_n = (b->uses ? b->uses[0] : 0);
    for (uintptr_t i = 0; i < cand_n + 2; i++) {
        uintptr_t s;
        sstate_t *st;
        if (i < cand_n) {
            s = b->uses[2 + i];
            st = a_stream_find(a, s);
        } else if (i == cand_n) {
            if (!freed_on) continue;
            st = freed_on;
            s = st->stream;
            if (stream_has(b->uses, s)) continue;
        } else {
            s = b->stream;
            if (stream_has(b->uses, s) || (freed_on && freed_on->stream == s)) continue;
            st = a_stream_find(a, s);
        }
        if (own_skip && s == b->stream) continue;
        if (!st || st->dead) continue; /* synchronized when it was forgotten */
        (*out)[n++] = st;
    }
    return n;
}

static fev_t *fev_new(alloc_t *a)
{
    fev_t *e = a->fev_spare;
    if (!e) return malloc(sizeof(fev_t));
    a->fev_spare = e->next;
    return e;
}

/* Record one event on each of the n streams for fence f, queued on each stream. Returns false
 * when an event could not be recorded (f keeps the events recorded so far). */
static bool fence_record(alloc_t *a, fence_t *f, sstate_t **ss, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sstate_t *st = ss[i];
        fev_t *e = fev_new(a);
        void *ev = e ? ev_get(a) : NULL;
        if (!ev) {
            if (e) fev_put(a, e);
            return false;
        }
        be_count(a, ALLOC_BE_CALL_EVENT_RECORD);
        int rc = be_rc(a, a->be.event_record(a->be.ctx, ev, st->stream));
        if (rc != ALLOC_BE_OK) {
            /* the stream stays fenced: a failure now (a wrong context, a stream destroyed behind
             * our back) must not leave later frees unprotected; this one synchronizes */
            ev_put(a, ev);
            fev_put(a, e);
            return false;
        }
        a->st.num_events_recorded++;
        e->ev = ev;
        e->f = f;
        e->next = NULL;
        if (st->q_tail)
            st->q_tail->next = e;
        else
            st->q_head = e;
        st->q_tail = e;
        f->left++;
    }
    return true;
}

static fence_t *fence_new(alloc_t *a, blk_t *b)
{
    fence_t *f = a->fence_spare;
    if (f) {
        a->fence_spare = f->next;
        memset(f, 0, sizeof(*f));
    } else if (!(f = calloc(1, sizeof(*f)))) {
        return NULL;
    }
    f->blk = b;
    f->seq = ++a->fence_seq;
    f->prev = a->fence_tail;
    if (a->fence_tail)
        a->fence_tail->next = f;
    else
        a->fence_head = f;
    a->fence_tail = f;
    b->rb.st = B_PENDING;
    a->pending_bytes += b->size;
    return f;
}

/* Free block b in stream order: it becomes PENDING behind one event on each stream it must wait
 * for, or FREE at once when there is none. While a graph capture is underway the events wait
 * (recording one on the legacy stream would break the capture): the block stays PENDING until
 * the capture ends. Returns false when an event could not be recorded (the block is then
 * PENDING behind a fence the caller's synchronization lands). */
static bool fence_block(alloc_t *a, blk_t *b, sstate_t *freed_on)
{
    sstate_t *buf[16], **ss;
    size_t n = fence_streams(a, b, freed_on, buf, 16, &ss);
    if (n == 0) {
        make_free(a, b, false);
        return true;
    }
    fence_t *f = n == (size_t)-1 ? NULL : fence_new(a, b);
    if (!f) { /* out of host memory: wait for the device here, the one time the lock is held */
        if (ss != buf && n != (size_t)-1) free(ss);
        sync_device_locked(a);
        make_free(a, b, true);
        return true;
    }
    bool ok = true;
    if (a->captures) {
        f->deferred = true;
        f->async = freed_on != NULL;
        f->freed_on = freed_on ? freed_on->stream : 0;
    } else {
        ok = fence_record(a, f, ss, n);
    }
    if (ss != buf) free(ss);
    return ok;
}

/* The last capture ended: record the events of the frees made during captures. */
static void fence_deferred(alloc_t *a)
{
    bool failed = false;
    for (fence_t *f = a->fence_head, *nx; f; f = nx) {
        nx = f->next;
        if (!f->deferred) continue;
        f->deferred = false;
        sstate_t *buf[16], **ss;
        sstate_t *fo = f->async ? a_stream_find(a, f->freed_on) : NULL;
        size_t n = fence_streams(a, f->blk, fo, buf, 16, &ss);
        if (n == (size_t)-1) {
            failed = true;
            continue;
        }
        if (n == 0) {
            fence_land(a, f, false);
            continue;
        }
        if (!fence_record(a, f, ss, n)) failed = true;
        if (ss != buf) free(ss);
    }
    if (failed) sync_and_land(a);
}

/* ---- markers: releasing memory without synchronizing ---------------------------------------
 *
 * A FREE block may still be in use on the device: a block freed in stream order on its own
 * stream is reusable there at once (stream order protects the next user), but unmapping its
 * pages is not ordered with the kernels still queued on that stream. The sync-free releases
 * (before growth, garbage collection) record a marker event on each stream whose pools hold
 * such blocks, tagged with the free sequence number (a->free_seq); a marker that has completed
 * settles every block of that stream freed before it (fseq <= tag). Markers are only queried,
 * never waited for: what is not settled yet stays cached until a later release finds its marker
 * complete, or a synchronization (the OOM path, empty_cache) settles everything. */

enum { A_MAX_MARKERS = 8 }; /* pending markers per stream: a busy stream does not pile up events */

/* May the pages of FREE block b be unmapped now? Every use of it on the device has finished: a
 * synchronization began after it became free, or a marker recorded after that has completed.
 * With per-stream pools a block's other streams were waited for by its fence before it became
 * FREE, so only the pool's own stream is left; the shared pools' blocks (per_stream_pools:False)
 * may have been used on any live stream. Without events (the replay's backend), work completes
 * at issue, and a release settles every free made before it (settle_free), as the markers of a
 * device whose work is done do; but during a graph capture the live allocator can settle
 * nothing, so neither does this: a block freed since the last release or synchronization stays
 * cached until the capture ends (the replay of a capture kept to the run's peak). */
static bool blk_settled(const alloc_t *a, const blk_t *b)
{
    if (b->fseq <= a->synced_free_seq) return true;
    if (!a->events && !a->mk_scripted) return !a->captures || b->fseq <= a->mk_all_done;
    const sstate_t *o = b->seg->pool->owner;
    return b->fseq <= (o != a->shared ? o->mk_done : a->mk_all_done);
}

/* The stream's oldest marker, off its list: completed (it settles what it covers; its event is
 * reused), or broken (its event destroyed, settling nothing). */
static void marker_pop(alloc_t *a, sstate_t *st, bool completed)
{
    fev_t *e = st->mk_head;
    st->mk_head = e->next;
    if (!st->mk_head) st->mk_tail = NULL;
    st->mk_n--;
    if (completed) {
        if (e->seq > st->mk_done) st->mk_done = e->seq;
        if (e->ev) ev_put(a, e->ev); /* none: a scripted marker (a_marker_scripted) */
    } else {
        a->be.event_destroy(a->be.ctx, e->ev);
    }
    fev_put(a, e);
}

/* The shared pools' settled point: the lowest mk_done over the live streams. */
static void mk_all_update(alloc_t *a)
{
    uint64_t all = UINT64_MAX;
    for (size_t i = 0; i < a->nstreams; i++) {
        const sstate_t *st = a->streams[i];
        if (!st->dead && st->mk_done < all) all = st->mk_done;
    }
    a->mk_all_done = all == UINT64_MAX ? a->free_seq : all;
}

/* e (its event ev, NULL for a scripted one) as the newest marker of st, covering every free up
 * to seq. */
static void mk_push(sstate_t *st, fev_t *e, void *ev, uint64_t seq)
{
    *e = (fev_t){.ev = ev, .seq = seq};
    if (st->mk_tail)
        st->mk_tail->next = e;
    else
        st->mk_head = e;
    st->mk_tail = e;
    st->mk_n++;
}

/* Collect the markers that have completed (each stream's oldest first: they complete in order).
 * Never blocks. A failed query drops its marker (its event destroyed, not reused) and asks the
 * next malloc to synchronize, which settles what it would have. */
static void markers_poll(alloc_t *a)
{
    for (size_t i = 0; i < a->nstreams; i++) {
        sstate_t *st = a->streams[i];
        while (st->mk_head) {
            int rc = a->be.event_query(a->be.ctx, st->mk_head->ev);
            if (rc == ALLOC_BE_NOT_READY) break;
            if (rc != ALLOC_BE_OK) {
                be_rc(a, rc);
                a->broken_event = true;
            }
            marker_pop(a, st, rc == ALLOC_BE_OK);
            if (rc == ALLOC_BE_OK && a->hooks.on_marker) a->hooks.on_marker(a->hooks.user, ALLOC_MARKER_DONE, st->stream, a->mk_cur);
        }
    }
    mk_all_update(a);
}

void a_sync_scripted(alloc_t *a)
{
    a_sync_scripted_upto(a, a->free_seq);
}

void a_sync_scripted_upto(alloc_t *a, uint64_t free_seq)
{
    if (free_seq > a->synced_free_seq) a->synced_free_seq = free_seq;
}

uint64_t a_free_seq(const alloc_t *a)
{
    return a->free_seq;
}

void a_marker_scripted(alloc_t *a, uintptr_t stream, bool done)
{
    sstate_t *st = a_stream_find(a, stream);
    if (!st) return;
    if (done) {
        if (st->mk_head) marker_pop(a, st, true);
        mk_all_update(a);
        return;
    }
    fev_t *e = fev_new(a);
    if (!e) return; /* out of host memory: its `md` settles nothing more (pages stay cached) */
    mk_push(st, e, NULL, a->free_seq);
}

/* A marker on every stream a release found unsettled blocks for (all live streams for the shared
 * pools), unless one recorded since the newest free already covers them. */
static void markers_record(alloc_t *a)
{
    bool all = a->mk_want_all;
    a->mk_want_all = false;
    for (size_t i = 0; i < a->nstreams; i++) {
        sstate_t *st = a->streams[i];
        bool want = st->mk_want || all;
        st->mk_want = false;
        if (!want || st->dead || st->mk_n >= A_MAX_MARKERS) continue;
        if ((st->mk_tail ? st->mk_tail->seq : st->mk_done) >= a->free_seq) continue;
        fev_t *e = fev_new(a);
        void *ev = e ? ev_get(a) : NULL;
        if (!ev) {
            if (e) fev_put(a, e);
            return; /* out of memory for events: what is not settled stays cached */
        }
        be_count(a, ALLOC_BE_CALL_EVENT_RECORD);
        if (be_rc(a, a->be.event_record(a->be.ctx, ev, st->stream)) != ALLOC_BE_OK) {
            ev_put(a, ev);
            fev_put(a, e);
            continue;
        }
        a->st.num_events_recorded++;
        if (a->hooks.on_marker) a->hooks.on_marker(a->hooks.user, ALLOC_MARKER_RECORD, st->stream, a->mk_cur);
        mk_push(st, e, ev, a->free_seq);
    }
}

/* Before a release that does not synchronize: find the streams whose pools hold FREE blocks not
 * settled yet, record a marker on each, then collect every marker that has completed (the new
 * ones too: on an idle stream, or where work completes at issue, they are done at once and the
 * release gives back what a synchronization would have). */
static void settle_free(alloc_t *a)
{
    mk_point(a);
    if (a->captures) return; /* no event query while a graph is captured */
    if (a->mk_scripted) { /* the trace's marker lines are the queries' answers */
        mk_all_update(a);
        return;
    }
    if (!a->events) { /* work completes at issue: every free so far is settled */
        a->mk_all_done = a->free_seq;
        return;
    }
    for (size_t i = 0; i < a->nstreams; i++) {
        sstate_t *st = a->streams[i];
        if (st->graph) continue;
        bool found = false;
        for (int k = 0; k < 2 && !found; k++)
            for (blk_t *b = first_free(&st->pools[k]); b && !found; b = free_succ(&st->pools[k], b))
                found = !blk_settled(a, b);
        if (!found) continue;
        if (st == a->shared)
            a->mk_want_all = true;
        else
            st->mk_want = true;
    }
    markers_record(a);
    markers_poll(a);
}

/* ---- release policies: everything, garbage collection, release threshold ------------------- */

typedef struct {
    blk_t *b;
    pool_t *p;
} fb_t;

/* Collect FREE blocks that could give memory back. They are read from the pools' free indexes,
 * which hold every FREE block and nothing else, not from the segments' block lists: those hold
 * every live block too, and a release before growth runs at every new peak of reserved memory
 * (a replay of 10 M events spent a fifth of its time walking live blocks here). */
static fb_t *collect_free(alloc_t *a, fb_t *buf, size_t cap, size_t *n)
{
    size_t cnt = 0;
    fb_t *v = buf;
    for (size_t i = 0; i < a->nstreams; i++)
        for (int k = 0; k < 2 && !a->streams[i]->graph; k++) {
            pool_t *p = &a->streams[i]->pools[k];
            for (blk_t *b = first_free(p); b; b = free_succ(p, b)) {
                if (!b->seg->expandable && (b->prev || b->next)) continue;
                /* its stream may still use it: freed after the last synchronization
                 * began (perhaps while the lock was dropped for it) and no marker since */
                if (!blk_settled(a, b)) continue;
                if (cnt == cap) {
                    fb_t *nv = v == buf ? malloc(cap * 2 * sizeof(*v)) : realloc(v, cap * 2 * sizeof(*v));
                    if (!nv) {
                        *n = cnt;
                        return v;
                    }
                    if (v == buf) memcpy(nv, buf, cnt * sizeof(*v));
                    v = nv;
                    cap *= 2;
                }
                v[cnt++] = (fb_t){b, p};
            }
        }
    *n = cnt;
    return v;
}

static int by_stamp(const void *x, const void *y)
{
    const fb_t *a = x, *b = y;
    if (a->b->stamp != b->b->stamp) return a->b->stamp < b->b->stamp ? -1 : 1;
    return a->b->addr < b->b->addr ? -1 : (a->b->addr > b->b->addr);
}

/* Release FREE memory, oldest first, until the targets are met: only blocks no work on the
 * device may still use (collect_free: after a synchronization, or settled by markers). Block
 * pointers stay valid across release_block of other blocks: release_block only merges a block
 * with UNMAPPED neighbours, never with FREE ones. */
static void release_until_except(alloc_t *a, size_t reserved_target, size_t cached_target,
                                 const blk_t *keep1, const blk_t *keep2)
{
    /* A release before growth runs at every new peak and finds a handful of free blocks: they
     * are collected on the stack and put in order by insertion (qsort's merge sort allocates and
     * cost ~500 instructions for four blocks). by_stamp is a total order (addresses differ), so
     * the order is the same whichever sort makes it. */
    enum { FB_STACK = 64, FB_INSERTION = 32 };
    fb_t buf[FB_STACK];
    size_t n = 0;
    fb_t *v = collect_free(a, buf, FB_STACK, &n);
    if (n <= FB_INSERTION) {
        for (size_t i = 1; i < n; i++) {
            fb_t x = v[i];
            size_t j = i;
            for (; j > 0 && by_stamp(&x, &v[j - 1]) < 0; j--) v[j] = v[j - 1];
            v[j] = x;
        }
    } else {
        if (n > 1) qsort(v, n, sizeof(*v), by_stamp);
    }
    for (size_t i = 0; i < n; i++) {
        if ((size_t)a->st.reserved_bytes.current <= reserved_target &&
            a->cached_free <= cached_target)
            break;
        if (v[i].b != keep1 && v[i].b != keep2) release_block(a, v[i].p, v[i].b);
    }
    if (v != buf) free(v);
}

static void release_until(alloc_t *a, size_t reserved_target, size_t cached_target)
{
    release_until_except(a, reserved_target, cached_target, NULL, NULL);
}

static void release_all(alloc_t *a)
{
    release_until(a, 0, 0);
}

/* From a malloc's slow path: when reserved memory exceeds the threshold, give back the oldest
 * cached memory whose frees have landed on the device (settle_free: no synchronize, as
 * PyTorch's collection does not synchronize either) until it is under the threshold. */
static void garbage_collect(alloc_t *a)
{
    size_t allowed = a->cfg.limit != ALLOC_NO_LIMIT ? a->cfg.limit : a->capacity;
    size_t target = (size_t)(a->cfg.gc_threshold * (double)allowed);
    if ((size_t)a->st.reserved_bytes.current <= target) return;
    a->st.num_gc_runs++;
    settle_free(a);
    release_until(a, target, 0);
}

/* PyTorch's garbage_collect_cached_blocks, which runs only when a memory fraction is set (here:
 * a limit) and a request misses the cache: when reserved memory exceeds threshold x limit, the
 * whole-segment free blocks of the large pool (never split ones, never expandable ones) whose
 * age is at least the average age are freed, in the pool's (stream, size, address) order, and
 * again with the average of those left, until reserved memory is under the threshold or nothing
 * more can be freed. Age is counted in searches of the large pool (PyTorch's
 * get_free_blocks_call_count; here a->epoch under the pytorch policy). No synchronize. */
typedef struct {
    blk_t *b;
    pool_t *p;
    uintptr_t stream;
} gcb_t;

static int by_stream_size_addr(const void *x, const void *y)
{
    const gcb_t *a = x, *b = y;
    if (a->stream != b->stream) return a->stream < b->stream ? -1 : 1;
    if (a->b->size != b->b->size) return a->b->size < b->b->size ? -1 : 1;
    return a->b->addr < b->b->addr ? -1 : (a->b->addr > b->b->addr);
}

static void garbage_collect_pytorch(alloc_t *a)
{
    size_t thr = (size_t)(a->cfg.gc_threshold * (double)a->cfg.limit);
    size_t total = (size_t)a->st.reserved_bytes.current;
    if (total <= thr) return;
    a->st.num_gc_runs++;
    size_t target = total - thr, reclaimed = 0, n = 0, cap = 0;
    gcb_t *v = NULL;
    for (size_t i = 0; i < a->nstreams; i++) {
        pool_t *p = &a->streams[i]->pools[1];
        if (a->streams[i]->graph) continue; /* a graph's memory: kept until its release */
        for (seg_t *s = p->segs; s; s = s->next_in_pool)
            for (blk_t *b = s->first; b; b = b->next) {
                if (b->rb.st != B_FREE || b->prev || b->next) continue;
                if (n == cap) {
                    size_t nc = cap ? cap * 2 : 64;
                    gcb_t *nv = realloc(v, nc * sizeof(*v));
                    if (!nv) break;
                    v = nv;
                    cap = nc;
                }
                v[n++] = (gcb_t){b, p, a->streams[i]->stream};
            }
    }
    if (!n) {
        free(v);
        return;
    }
    if (n > 1) qsort(v, n, sizeof(*v), by_stream_size_addr);
    uint64_t total_age = 0;
    size_t count = n;
    for (size_t i = 0; i < n; i++)
        total_age += a->epoch - v[i].b->stamp;
    bool freed = true;
    while (reclaimed < target && freed && count > 0) {
        double age_threshold = (double)total_age / (double)count;
        freed = false;
        for (size_t i = 0; i < n; i++) {
            blk_t *b = v[i].b;
            if (!b || b->seg->expandable) continue;
            uint64_t age = a->epoch - b->stamp;
            if ((double)age < age_threshold) continue;
            freed = true;
            reclaimed += b->size;
            total_age -= age;
            count--;
            release_classic_segment(a, v[i].p, b);
            v[i].b = NULL;
        }
    }
    free(v);
}

/* PyTorch's release_available_cached_blocks (first step of its OOM path, only when
 * max_split_size_mb is set): free the smallest whole cached block of at least
 * max(request, max_split_size) of this pool; when there is none, free oversize blocks from the
 * largest down until as much as that is freed. True if the request may now fit. Expandable
 * blocks are never freed here (PyTorch skips them), so under pytorch-expandable this step is a
 * no-op. */
static int by_size_addr(const void *x, const void *y)
{
    const blk_t *a = *(const blk_t *const *)x, *b = *(const blk_t *const *)y;
    if (a->size != b->size) return a->size < b->size ? -1 : 1;
    return a->addr < b->addr ? -1 : (a->addr > b->addr);
}

static bool release_available_pytorch(alloc_t *a, pool_t *p, size_t rs)
{
    size_t ms = a->cfg.max_split_size;
    if (ms == SIZE_MAX || a->vmm || p->owner->graph) return false;
    size_t key = rs < ms ? ms : rs;
    blk_t *b = lower_bound_free(p, key);
    if (b) {
        if (b->prev || b->next) return false; /* oversize blocks are whole segments */
        release_classic_segment(a, p, b);
        return true;
    }
    size_t n = 0, cap = 0, released = 0;
    blk_t **v = NULL;
    for (b = lower_bound_free(p, ms); b; b = free_succ(p, b)) {
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            blk_t **nv = realloc(v, nc * sizeof(*v));
            if (!nv) break;
            v = nv;
            cap = nc;
        }
        v[n++] = b;
    }
    if (n) qsort(v, n, sizeof(*v), by_size_addr);
    for (size_t i = n; i-- > 0 && released < key;) {
        if (v[i]->prev || v[i]->next) continue;
        released += v[i]->size;
        release_classic_segment(a, p, v[i]);
    }
    free(v);
    return released >= key;
}

static size_t max_hsize(const alloc_t *a)
{
    size_t h = a->cfg.handle_size > a->cfg.handle_size_small ? a->cfg.handle_size
                                                             : a->cfg.handle_size_small;
    return h > A_LARGE_BUFFER ? h : A_LARGE_BUFFER;
}

/* Release threshold: when cached (free, mapped) bytes exceed it, give back the oldest free
 * memory down to it. The floor keeps us from synchronizing on every free when what stays cached
 * is unreleasable partial pages. */
static void maybe_release(alloc_t *a)
{
    size_t t = a->cfg.release_threshold;
    if (t == SIZE_MAX || a->cached_free <= t ||
        a->cached_free <= a->release_floor + 2 * max_hsize(a))
        return;
    a->st.num_releases++;
    sync_and_land(a);
    release_until(a, SIZE_MAX, t);
    a->release_floor = a->cached_free;
}

/* ---- OOM forensics ------------------------------------------------------------------------- */

static void device_info(alloc_t *a, size_t *fr, size_t *tot)
{
    size_t f = 0, t = 0;
    if (a->be.mem_info && a->be.mem_info(a->be.ctx, &f, &t) == ALLOC_BE_OK) {
        *fr = f;
        *tot = t;
        return;
    }
    *tot = a->capacity;
    size_t r = (size_t)a->st.reserved_bytes.current;
    *fr = a->capacity > r ? a->capacity - r : 0;
}

static void fill_oom(alloc_t *a, size_t size, size_t rs, uintptr_t stream, int be_err)
{
    alloc_oom_info_t *o = &a->oom;
    memset(o, 0, sizeof(*o));
    o->requested = size;
    o->rounded = rs;
    o->stream = stream;
    o->allocated = (size_t)a->st.allocated_bytes.current;
    o->reserved = (size_t)a->st.reserved_bytes.current;
    o->free_cached = a->cached_free;
    o->pending = a->pending_bytes;
    o->limit = a->cfg.limit; /* ALLOC_NO_LIMIT: none (0 is 0 bytes) */
    o->limit_from = a->cfg.limit == ALLOC_NO_LIMIT ? ALLOC_LIMIT_NONE
                    : a->fraction_bound          ? ALLOC_LIMIT_FRACTION
                    : a->key_bound               ? ALLOC_LIMIT_KEY
                                                 : ALLOC_LIMIT_BYTES;
    o->backend_error = be_err;
    for (size_t i = 0; i < a->nstreams; i++)
        for (int k = 0; k < 2; k++) {
            const blk_t *b = largest_free(&a->streams[i]->pools[k]);
            if (b && b->size > o->largest_free_block) o->largest_free_block = b->size;
        }
    device_info(a, &o->device_free, &o->device_total);
    a->has_oom = true;
    a->st.num_ooms++;
}

/* ---- malloc ---------------------------------------------------------------------------------- */

static int grow(alloc_t *a, pool_t *p, size_t rs, blk_t **out)
{
    return a->vmm ? grow_expandable(a, p, rs, out) : grow_classic(a, p, rs, out);
}

/* Before mapping new pages for a request no free block fits, unmap whole free pages elsewhere
 * (oldest first) so that reserved memory does not grow while cached memory could cover the
 * request: the physical memory of scattered holes is, in effect, remapped where it is needed.
 * This is what virtual memory buys over classic segments. It runs only when the growth would
 * set a new peak of reserved memory (so a steady state never churns), when enough memory is
 * cached, and it spares the free neighbours the growth itself will merge with. It never
 * synchronizes: only pages whose frees have landed on the device are unmapped (settle_free: a
 * marker event per stream, queried, not waited for); the others stay cached until a later
 * release finds their markers complete, or the OOM path synchronizes. On a GPU a synchronize
 * here stalled the launching thread until every queued kernel had finished, at every new peak
 * (issue 41). */

/* What release_before_grow would give back for a request of rs bytes: the bytes to unmap
 * (0: nothing worth it), and the free neighbours of the range the growth will use (*keep1,
 * *keep2), which it spares. */
static size_t rbg_need(const alloc_t *a, pool_t *p, size_t rs, const blk_t **keep1,
                       const blk_t **keep2)
{
    const blk_t *u = pick_unmapped(p, rs);
    size_t have = 0;
    *keep1 = *keep2 = NULL;
    if (u) {
        if (u->prev && u->prev->rb.st == B_FREE) have += (*keep1 = u->prev)->size;
        if (u->next && u->next->rb.st == B_FREE) have += (*keep2 = u->next)->size;
    }
    size_t need = rs > have ? round_up(rs - have, p->hsize) : 0;
    return need && a->cached_free - have >= p->hsize ? need : 0;
}

/* Returns true when it released (then a block may fit: the caller searches again). */
static bool release_before_grow(alloc_t *a, pool_t *p, size_t rs)
{
    size_t h = p->hsize;
    size_t reserved = (size_t)a->st.reserved_bytes.current;
    if (a->cached_free < 2 * h || reserved + round_up(rs, h) <= (size_t)a->st.reserved_bytes.peak)
        return false;
    const blk_t *keep1, *keep2;
    size_t need = rbg_need(a, p, rs, &keep1, &keep2);
    if (!need) return false;
    settle_free(a);
    release_until_except(a, reserved > need ? reserved - need : 0, SIZE_MAX, keep1, keep2);
    return true;
}

/* PyTorch's malloc after get_free_block failed: garbage collection (only with a limit), then
 * alloc_block; on OOM release_available_cached_blocks and alloc_block again; then
 * release_cached_blocks (synchronize, land every pending free, free every whole cached segment
 * and unmap every free page) and a last alloc_block. The cache is not searched again in between:
 * PyTorch does not. */
static int malloc_slow_pytorch(alloc_t *a, pool_t *p, size_t rs, blk_t **out)
{
    if (a->cfg.gc_threshold > 0 && a->cfg.limit != ALLOC_NO_LIMIT) garbage_collect_pytorch(a);
    int rc = grow(a, p, rs, out);
    if (rc != GROW_OOM) return rc;
    if (release_available_pytorch(a, p, rs)) {
        rc = grow(a, p, rs, out);
        if (rc != GROW_OOM) return rc;
    }
    a->st.num_alloc_retries++;
    sync_and_land(a); /* drops the lock while the device synchronizes */
    release_all(a);
    return grow(a, p, rs, out);
}

/* Slow path: nothing cached fits. Returns a FREE block (out of the index) of >= rs bytes, or
 * GROW_AGAIN when one of its synchronizations landed pending frees before it changed anything
 * else (the request starts over, see alloc_malloc_ex). epoch0: the gc clock as the request
 * found it; NULL: no new start (go on with what landed). */
static int malloc_slow(alloc_t *a, pool_t *p, size_t rs, blk_t **out, const uint64_t *epoch0)
{
    a->st.cache_misses++;
    if (a->cfg.policy == ALLOC_POLICY_PYTORCH) return malloc_slow_pytorch(a, p, rs, out);
    if (a->cfg.gc_threshold > 0) {
        garbage_collect(a);
        blk_t *b = find_free(a, p, rs); /* the collection may have merged free blocks */
        if (b) {
            free_remove(a, p, b);
            *out = b;
            return GROW_OK;
        }
    }
    if (a->vmm && a->cfg.release_before_grow && release_before_grow(a, p, rs)) {
        blk_t *b = find_free(a, p, rs); /* the release may have merged free blocks */
        if (b) {
            free_remove(a, p, b);
            *out = b;
            return GROW_OK;
        }
    }
    int rc = grow(a, p, rs, out);
    if (rc != GROW_OOM) return rc;
    /* OOM path: let every pending free land (and start over when any did), try the cache, give
     * everything back, retry */
    if (sync_land(a, epoch0) && epoch0) {
        a->st.cache_misses--;
        return GROW_AGAIN;
    }
    a->st.num_alloc_retries++;
    blk_t *b = find_free(a, p, rs);
    if (b) {
        free_remove(a, p, b);
        *out = b;
        return GROW_OK;
    }
    release_all(a);
    return grow(a, p, rs, out);
}

static int guard_malloc(alloc_t *a, pool_t *p, size_t rs, blk_t **out)
{
    a->st.cache_misses++;
    int rc = guard_grow(a, p, rs, out);
    if (rc == GROW_OOM && a->fence_head) { /* frees waiting for their work give pages back */
        a->st.num_alloc_retries++;
        sync_and_land(a);
        rc = guard_grow(a, p, rs, out);
    }
    return rc;
}

static int nocache_malloc(alloc_t *a, pool_t *p, size_t rs, blk_t **out)
{
    a->st.cache_misses++;
    int rc = grow_classic(a, p, rs, out);
    if (rc == GROW_OOM && a->fence_head) {
        a->st.num_alloc_retries++;
        sync_and_land(a);
        rc = grow_classic(a, p, rs, out);
    }
    return rc;
}

/* Called with the lock held after fill_oom; releases it and runs the on_oom hook on a copy of the
 * forensics (the hook may call the allocator, e.g. alloc_walk for a snapshot). */
static void report_oom(alloc_t *a)
{
    alloc_oom_info_t o = a->oom;
    alloc_hooks_t h = a->hooks;
    /* still under the lock: the OOM's event before any later call's (on_oom_locked) */
    if (h.on_oom_locked) h.on_oom_locked(h.user, &o);
    UNLOCK(a);
    if (h.on_oom) h.on_oom(h.user, &o);
}

int alloc_malloc(alloc_t *a, size_t size, uintptr_t stream, uint64_t *ptr)
{
    return alloc_malloc_ex(a, size, stream, ptr, NULL);
}

int alloc_malloc_ex(alloc_t *a, size_t size, uintptr_t stream, uint64_t *ptr,
                    alloc_malloc_info_t *info)
{
    return alloc_malloc_notify(a, size, stream, 0, ptr, info, NULL, NULL);
}

int alloc_malloc_notify(alloc_t *a, size_t size, uintptr_t stream, uintptr_t capture,
                        uint64_t *ptr, alloc_malloc_info_t *info, alloc_malloced_fn fn, void *arg)
{
    if (!a || !ptr) return ALLOC_ERR_INVALID;
    if (capture) {
        stream = capture; /* the capture's private pools (alloc_malloc_captured) */
        LOCK(a);
        sstate_t *cs = stream_get(a, capture);
        if (cs) cs->graph = true;
        UNLOCK(a);
        if (!cs) return ALLOC_ERR_NOMEM;
    }
    *ptr = 0;
    if (size == 0) return ALLOC_OK;
    size_t rs = a_round_size(&a->cfg, size);
    LOCK(a);
    sstate_t *st = stream_get(a, stream);
    if (!st) {
        UNLOCK(a);
        return ALLOC_ERR_NOMEM;
    }
    if (rs == 0 || rs > ((size_t)1 << 56)) { /* cannot exist on any device */
        fill_oom(a, size, rs, stream, 0);
        report_oom(a); /* unlocks */
        return ALLOC_ERR_OOM;
    }
    /* make room in the address map first (for the last block and this one), so nothing after
     * the block surgery can fail */
    if ((a->map.count + 2) * 2 > a->map.cap && ptrmap_grow(&a->map)) {
        UNLOCK(a);
        return ALLOC_ERR_NOMEM;
    }
    if (a->broken_event) sync_and_land(a);
    a->mk_in_malloc = true; /* its settle points are numbered from here (mk_point) */
    a->mk_step = 0;
    a->mk_size = size, a->mk_stream = stream; /* for a wait's start (on_wait) */
    /* A synchronization in the slow path (release before growth, garbage collection, the OOM
     * path) may land pending frees after the request has looked at the cache and decided on
     * what it saw. A recording can only put those frees' free_completed events before the
     * allocation, and a replay lands them there, so the request starts over from the state it
     * found plus what landed (gc clock and release floor as they were): the allocator's state
     * then changes in the order the trace says, and a free block the landing made is used
     * rather than memory released and mapped anew. Bounded: each start lands a free; after
     * MAX_RESTARTS the slow path goes on with what landed (only when other threads keep
     * freeing during the waits). */
    enum { MAX_RESTARTS = 16 };
    const uint64_t epoch0 = a->epoch;
    const size_t floor0 = a->release_floor;
    pool_t *p;
    blk_t *b;
    int rc;
    /* this call's own cache hit: the counter also moves with other threads' hits while a
     * synchronization of this one has dropped the lock (they made such an allocation look
     * served from the cache in a recording, and its replay) */
    bool hit = false;
    for (int restarts = 0;; restarts++) {
        if (a->fence_head) process_fences(a);
        if (a->cached_free < a->release_floor) a->release_floor = a->cached_free;
        size_t floor1 = a->release_floor;
        p = pool_for(a, st, rs);
        b = NULL;
        hit = false;
        if (a->guard) {
            rc = guard_malloc(a, p, rs, &b);
        } else if (a->cfg.policy == ALLOC_POLICY_NOCACHE) {
            rc = nocache_malloc(a, p, rs, &b);
        } else {
            /* fast path; under the pytorch policy the gc clock counts searches of the large pool */
            if (a->cfg.policy == ALLOC_POLICY_PYTORCH && !p->small) a->epoch++;
            b = find_free(a, p, rs);
            if (b) {
                /* start the cache misses we will take anyway: the block's cold half, and the
                 * address map's slot for the last block allocated, if it is still live (it goes
                 * into the map below), while the index is being updated */
                __builtin_prefetch(&b->seg, 1);
                if (a->fresh) __builtin_prefetch(&a->map.slots[ptr_hash(&a->map, a->fresh->addr)], 1);
                if ((b->rb.nb & NB_PF) && b->prev) /* the free of this block will look at it */
                    __builtin_prefetch(b->prev);
                free_remove_fast(a, p, b);
                a->st.cache_hits++;
                hit = true;
                rc = GROW_OK;
            } else {
                if (a->cfg.policy != ALLOC_POLICY_PYTORCH) a->epoch++;
                rc = malloc_slow(a, p, rs, &b, restarts < MAX_RESTARTS ? &epoch0 : NULL);
            }
        }
        if (rc != GROW_AGAIN) break;
        a->mk_step = 0; /* the new start's points: the replay's allocation starts here (`sr`) */
        if (a->release_floor == floor1)
            a->release_floor = floor0; /* unless another thread moved it */
    }
    a->mk_in_malloc = false;
    a->mk_cur = 0;
    if (rc != GROW_OK) {
        int err = rc == GROW_NOMEM ? ALLOC_ERR_NOMEM
                  : rc == GROW_ERR ? ALLOC_ERR_BACKEND
                                   : ALLOC_ERR_OOM;
        if (err == ALLOC_ERR_NOMEM) {
            UNLOCK(a);
            return err;
        }
        fill_oom(a, size, rs, stream, rc == GROW_ERR ? a->last_be_err : 0);
        report_oom(a); /* unlocks */
        return err;
    }
    if (b->size > rs && should_split(a, p, rs, b->size - rs)) {
        /* every field set here or by link_after and free_insert: no memset on the hot path */
        blk_t *r = blk_take(a);
        if (r) {
            r->rb.named = 0;
            r->addr = b->addr + rs;
            r->size = b->size - rs;
            r->requested = 0;
            r->stamp = 0;
            r->stream = 0;
            r->uses = NULL;
            r->fseq = b->fseq;
            b->size = rs;
            b->rb.st = B_LIVE;
            /* link_after, except that r's bits say at once that b is not FREE */
            r->seg = b->seg;
            r->prev = b;
            r->next = b->next;
            r->rb.nb = NB_AP | NB_NF | NB_AN;
            if (b->next) {
                b->next->prev = r;
                b->next->rb.nb |= NB_PF | NB_AP;
            }
            b->next = r;
            b->rb.nb = (uint8_t)((b->rb.nb | NB_NF) & ~NB_AN);
            free_insert_fast(a, p, r);
        }
    }
    b->rb.st = B_LIVE;
    b->requested = size;
    b->stream = stream;
    /* the first block names the stream; another one mixes */
    if (stream != atomic_load_explicit(&a->one_stream, memory_order_relaxed) &&
        !atomic_load_explicit(&a->mixed_streams, memory_order_relaxed)) {
        if (a->next_id) atomic_store_explicit(&a->mixed_streams, true, memory_order_relaxed);
        else atomic_store_explicit(&a->one_stream, stream, memory_order_relaxed);
        if (a->hooks.on_streams_change) a->hooks.on_streams_change(a->hooks.user);
    }
    b->stamp = ++a->next_id;
    if (a->fresh) ptrmap_put(&a->map, a->fresh->addr, a->fresh); /* room was made before */
    a->fresh = b;
    stat_add(&a->st.allocated_bytes, (int64_t)b->size);
    stat_add(&a->st.requested_bytes, (int64_t)size);
    stat_add(&a->st.allocation, 1);
    stat_add(&a->st.active_bytes, (int64_t)b->size);
    stat_add(&a->st.active, 1);
    a->st.num_mallocs++;
    *ptr = b->addr;
    alloc_malloc_info_t got = {.alloc_id = b->stamp, .size = b->size,
                               .cache_hit = hit};
    if (info) *info = got;
    /* still under the lock: a recorder's event comes before any later call's (fn's comment) */
    if (fn) fn(arg, b->addr, &got);
    UNLOCK(a);
    return ALLOC_OK;
}

/* ---- free
 * ---------------------------------------------------------------------------------------- */

/* The block containing ptr, any state, or NULL (linear in the segment: error/query path only). */
static blk_t *find_containing(alloc_t *a, uint64_t ptr)
{
    for (size_t i = 0; i < a->nstreams; i++)
        for (int k = 0; k < 2; k++)
            for (seg_t *s = a->streams[i]->pools[k].segs; s; s = s->next_in_pool) {
                if (ptr < s->base || ptr >= s->base + s->size) continue;
                for (blk_t *b = s->first; b; b = b->next)
                    if (ptr >= b->addr && ptr < b->addr + b->size) return b;
            }
    return NULL;
}

static int classify_unknown(alloc_t *a, uint64_t ptr)
{
    blk_t *b = find_containing(a, ptr);
    if (!b) return ALLOC_ERR_NOT_OWNED;
    return b->rb.st == B_LIVE ? ALLOC_ERR_NOT_BASE : ALLOC_ERR_DOUBLE_FREE;
}

static void nocache_free(alloc_t *a, blk_t *b)
{
    map_forget(a, b);
    stat_sub(&a->st.active_bytes, (int64_t)b->size);
    stat_sub(&a->st.active, 1);
    free(b->uses);
    b->uses = NULL;
    /* cuMemFree itself waits for the device: no fence needed */
    release_classic_segment(a, b->seg->pool, b);
}

static int do_free(alloc_t *a, uint64_t ptr, bool async, uintptr_t stream, uintptr_t capture,
                   alloc_block_query_t *freed, alloc_freed_fn fn, void *arg)
{
    alloc_block_query_t local;
    if (fn && !freed) freed = &local;
    if (!a) return ALLOC_ERR_INVALID;
    if (!ptr) return ALLOC_OK;
    LOCK(a);
    blk_t *b = map_get(a, ptr);
    if (!b) {
        int rc = classify_unknown(a, ptr);
        UNLOCK(a);
        return rc;
    }
    if (b->rb.st != B_LIVE) {
        UNLOCK(a);
        return ALLOC_ERR_DOUBLE_FREE;
    }
    if ((b->rb.nb & NB_PF) && b->prev) /* make_free will look at it */
        __builtin_prefetch(b->prev);
    if (freed)
        *freed = (alloc_block_query_t){b->addr, b->size, b->requested, b->stream, b->stamp, false};
    sstate_t *fs = async ? stream_get(a, stream) : NULL;
    stat_sub(&a->st.allocated_bytes, (int64_t)b->size);
    stat_sub(&a->st.requested_bytes, (int64_t)b->requested);
    stat_sub(&a->st.allocation, 1);
    a->st.num_frees++;
    size_t pending0 = a->pending_bytes;
    bool must_sync = false;
    bool nocache_graph = a->cfg.policy == ALLOC_POLICY_NOCACHE && b->seg->pool->owner->graph;
    if ((capture && b->stream != capture) || nocache_graph) {
        /* freed inside a graph capture, allocated before it: the graph may use it at every
         * replay, so nobody gets it until the graph is released (alloc_release_capture); and
         * under nocache a graph's own block would give its segment back at once: held too */
        fence_t *f = fence_new(a, b);
        if (f)
            f->capture = capture && b->stream != capture ? capture : b->seg->pool->owner->stream;
        else
            make_free(a, b, false); /* out of host memory: cannot hold it (documented) */
    } else if (a->cfg.policy == ALLOC_POLICY_NOCACHE && !b->seg->guard) {
        nocache_free(a, b);
    } else if (!a->events || (!async && stream == ALLOC_FREE_SYNCED)) {
        /* no events, or the caller synchronized the device (free_sync); without events the free
         * is numbered all the same, so that a capture can tell it from those settled before
         * (blk_settled) */
        make_free(a, b, a->events || (!async && stream == ALLOC_FREE_SYNCED));
    } else if (!fence_block(a, b, fs)) {
        must_sync = true; /* could not record events: wait as cudaFree does, below */
    }
    if (freed) freed->pending = a->pending_bytes > pending0;
    /* the caller hears of the free while nobody can have the block yet: its record takes its
     * place in the order before any reuse (and before the landing the sync below may bring) */
    if (fn) fn(arg, freed);
    if (must_sync) sync_and_land(a); /* lock dropped while it waits */
    maybe_release(a);
    UNLOCK(a);
    return ALLOC_OK;
}

int alloc_free(alloc_t *a, uint64_t ptr)
{
    return do_free(a, ptr, false, 0, 0, NULL, NULL, NULL);
}

int alloc_free_async(alloc_t *a, uint64_t ptr, uintptr_t stream)
{
    return do_free(a, ptr, true, stream, 0, NULL, NULL, NULL);
}

int alloc_free_ex(alloc_t *a, uint64_t ptr, bool async, uintptr_t stream,
                  alloc_block_query_t *freed)
{
    return do_free(a, ptr, async, stream, 0, freed, NULL, NULL);
}

int alloc_free_notify(alloc_t *a, uint64_t ptr, bool async, uintptr_t stream, uintptr_t capture,
                      alloc_block_query_t *freed, alloc_freed_fn fn, void *arg)
{
    if (capture) return do_free(a, ptr, true, capture, capture, freed, fn, arg);
    return do_free(a, ptr, async, stream, 0, freed, fn, arg);
}

/* ---- CUDA graphs ----------------------------------------------------------------------------- */

int alloc_capture_begin(alloc_t *a)
{
    if (!a) return ALLOC_ERR_INVALID;
    LOCK(a);
    a->captures++;
    UNLOCK(a);
    return ALLOC_OK;
}

int alloc_capture_end(alloc_t *a)
{
    if (!a) return ALLOC_ERR_INVALID;
    LOCK(a);
    if (a->captures && --a->captures == 0) fence_deferred(a);
    UNLOCK(a);
    return ALLOC_OK;
}

int alloc_malloc_captured(alloc_t *a, size_t size, uintptr_t capture, uint64_t *ptr,
                          alloc_malloc_info_t *info)
{
    if (!a || !capture) return ALLOC_ERR_INVALID;
    return alloc_malloc_notify(a, size, capture, capture, ptr, info, NULL, NULL);
}

int alloc_free_captured(alloc_t *a, uint64_t ptr, uintptr_t capture, alloc_block_query_t *freed)
{
    if (!capture) return ALLOC_ERR_INVALID;
    return do_free(a, ptr, true, capture, capture, freed, NULL, NULL);
}

static void reap_dead_streams(alloc_t *a);

int alloc_release_capture(alloc_t *a, uintptr_t capture)
{
    if (!a || !capture) return ALLOC_ERR_INVALID;
    LOCK(a);
    bool held = false;
    for (fence_t *f = a->fence_head; f; f = f->next)
        if (f->capture == capture) {
            f->capture = 0; /* landed by the synchronization below */
            held = true;
        }
    sstate_t *st = a_stream_find(a, capture);
    if (st) {
        st->fenced = false;
        st->dead = true;
        st->graph = false; /* its memory may go back now */
    }
    /* the graph's last replay may still run, on any stream: wait for the device once */
    if (held || (st && (st->pools[0].segs || st->pools[1].segs))) {
        sync_and_land(a);
        reap_dead_streams(a);
    }
    UNLOCK(a);
    return ALLOC_OK;
}

int alloc_note_stream(alloc_t *a, uintptr_t stream)
{
    if (!a) return ALLOC_ERR_INVALID;
    LOCK(a);
    sstate_t *st = stream_get(a, stream);
    if (st) st->fenced = true;
    UNLOCK(a);
    return st ? ALLOC_OK : ALLOC_ERR_NOMEM;
}

/* Does any block of st's pools hold memory a program still owns (LIVE or PENDING), or a FREE
 * block freed after the last synchronization? */
static bool stream_pools_busy(const alloc_t *a, const sstate_t *st)
{
    for (int k = 0; k < 2; k++)
        for (const seg_t *s = st->pools[k].segs; s; s = s->next_in_pool)
            for (const blk_t *b = s->first; b; b = b->next)
                if (b->rb.st == B_LIVE || b->rb.st == B_PENDING ||
                    (b->rb.st == B_FREE && b->fseq > a->synced_free_seq))
                    return true;
    return false;
}

/* Give back an expandable range with nothing mapped in it: its address space returns to the
 * device. */
static void range_destroy(alloc_t *a, pool_t *p, seg_t *r)
{
    blk_t *u = r->first;
    rb_erase(&p->unmapped, u);
    blk_del(a, u);
    be_count(a, ALLOC_BE_CALL_FREE_RANGE);
    be_rc(a, a->be.free_range(a->be.ctx, r->base, r->size));
    seg_unlink(p, r);
    p->nranges--;
    free(r->handles);
    free(r->mapbits);
    free(r);
}

/* Release the pools of forgotten streams that hold nothing any more: free pages, classic
 * segments, the reserved address ranges, then the stream's state. Caller synchronized (every
 * FREE block to release has fseq <= synced_free_seq). Without this, each stream created and
 * destroyed would keep a device-sized address range reserved for good. The shared pools of
 * per_stream_pools:False live on the stream that allocated first: when that stream is gone and
 * they hold nothing in use, they go the same way (the next allocation, on any stream, starts
 * new ones), or a program that destroys its streams before it exits would keep every page it
 * ever cached mapped under this mode alone. */
static void reap_dead_streams(alloc_t *a)
{
    for (size_t i = 0; i < a->nstreams; i++) {
        sstate_t *st = a->streams[i];
        if (!st->dead || st->q_head || st->mk_head) continue;
        if (stream_pools_busy(a, st)) continue;
        bool empty = true;
        for (int k = 0; k < 2; k++) {
            pool_t *p = &st->pools[k];
            for (;;) { /* release_block changes the lists: look for the next FREE block anew */
                blk_t *fb = NULL;
                for (seg_t *s = p->segs; s && !fb; s = s->next_in_pool)
                    for (blk_t *b = s->first; b && !fb; b = b->next)
                        if (b->rb.st == B_FREE) fb = b;
                if (!fb || !release_block(a, p, fb)) break;
            }
            for (seg_t *s = p->segs, *nx; s; s = nx) {
                nx = s->next_in_pool;
                if (s->expandable && !s->first->next && s->first->rb.st == B_UNMAPPED)
                    range_destroy(a, p, s);
            }
            if (p->segs) empty = false;
        }
        if (!empty) continue;
        if (a->last_stream == st) a->last_stream = NULL;
        if (a->shared == st) a->shared = NULL;
        a->streams[i] = a->streams[--a->nstreams];
        sstate_free(st);
        stab_rebuild(a); /* no larger than before: cannot fail */
        i--;
    }
}

static blk_t *live_block(alloc_t *a, uint64_t ptr, int *rc);

int alloc_forget_stream(alloc_t *a, uintptr_t stream)
{
    if (!a) return ALLOC_ERR_INVALID;
    LOCK(a);
    sstate_t *st = a_stream_find(a, stream);
    if (st) {
        st->fenced = false;
        st->dead = true;
        /* The program is about to destroy the stream. Work already queued on it keeps running,
         * and no event can be recorded on it afterwards: wait for it now, once, if the stream
         * holds memory or pending frees (a stream that only ran kernels costs nothing). Frees
         * whose blocks name the stream then need no event on it. */
        bool holds =
            st->q_head || st->mk_head || st->pools[0].segs || st->pools[1].segs || st->recorded;
        if (!holds && a->events && !a->captures) {
            /* work still queued on it may use a cudaMalloc'ed block that a later cudaFree,
             * which no longer fences this stream, would hand out: an idle stream costs one
             * event, a busy one a synchronization */
            void *ev = ev_get(a);
            holds = !ev || be_rc(a, a->be.event_record(a->be.ctx, ev, stream)) != ALLOC_BE_OK ||
                    a->be.event_query(a->be.ctx, ev) != ALLOC_BE_OK;
            if (ev) ev_put(a, ev);
        }
        if (holds) {
            /* the synchronization drops the lock: another thread's forget may reap this
             * stream's state meanwhile, so st is not read after it */
            sync_and_land(a);
            markers_poll(a); /* complete now: the dead streams' states can go */
            reap_dead_streams(a);
            /* for the replay (trace `sf`): what it released, and releases from now on */
            if (a->hooks.on_marker) a->hooks.on_marker(a->hooks.user, ALLOC_MARKER_FORGET, stream, 0);
        }
    }
    UNLOCK(a);
    return ALLOC_OK;
}

void a_forget_scripted(alloc_t *a, uintptr_t stream)
{
    sstate_t *st = a_stream_find(a, stream);
    if (!st) return;
    st->fenced = false;
    st->dead = true;
    /* the run's synchronization and the markers it then found complete came as the lines before */
    reap_dead_streams(a);
}

/* Add `stream` to the streams that use live block b (nothing when it is the allocation stream
 * or there already). named: alloc_record_stream said so (see fence_streams). */
static int uses_add(alloc_t *a, blk_t *b, uintptr_t stream, bool named)
{
    if (stream == b->stream || stream_has(b->uses, stream)) {
        if (named && b->uses) b->rb.named = 1;
        return ALLOC_OK;
    }
    sstate_t *st = stream_get(a, stream);
    if (!st) return ALLOC_ERR_NOMEM;
    uintptr_t n = b->uses ? b->uses[0] : 0, cap = b->uses ? b->uses[1] : 0;
    if (n == cap) {
        uintptr_t nc = cap ? cap * 2 : 2;
        uintptr_t *u = realloc(b->uses, (2 + nc) * sizeof(*u));
        if (!u) return ALLOC_ERR_NOMEM;
        if (!b->uses) b->rb.named = 0;
        u[0] = n;
        u[1] = nc;
        b->uses = u;
    }
    b->uses[2 + b->uses[0]++] = stream;
    if (named) b->rb.named = 1;
    st->recorded = true;
    return ALLOC_OK;
}

int alloc_record_stream(alloc_t *a, uint64_t ptr, uintptr_t stream)
{
    if (!a) return ALLOC_ERR_INVALID;
    int rc;
    LOCK(a);
    blk_t *b = live_block(a, ptr, &rc);
    if (b) rc = uses_add(a, b, stream, true);
    UNLOCK(a);
    return rc;
}

/* The live block holding addr, or NULL: the start address is one hash lookup; an interior address
 * asks the last block found this way first (a kernel's arguments point into the same few blocks
 * launch after launch), then walks the containing segment. */
/* The LIVE or PENDING block holding an interior address (not a block start), or NULL: the
 * interior cache, else a walk of the containing segment (remembered when LIVE). */
static blk_t *interior_block(alloc_t *a, uint64_t addr)
{
    blk_t **slot = &a->icache[(addr >> 16) & (A_ICACHE - 1)];
    blk_t *c = *slot;
    if (c && addr > c->addr && addr < c->addr + c->size && map_get(a, c->addr) == c)
        return c;
    blk_t *b = find_containing(a, addr);
    if (b && b->rb.st == B_LIVE) *slot = b;
    return b;
}

static blk_t *use_block(alloc_t *a, uint64_t addr)
{
    blk_t *b = map_get(a, addr);
    if (!b) b = interior_block(a, addr);
    return b && b->rb.st == B_LIVE ? b : NULL;
}

/* alloc_use_streams past its shortcut: the lock, a lookup per address (a function of its own,
 * so that the shortcut saves no registers) */
static __attribute__((noinline)) size_t use_streams_locked(alloc_t *a, const uint64_t *addrs,
                                                           size_t n, uintptr_t stream)
{
    size_t gained = 0;
    LOCK(a);
    for (size_t i = 0; i < n; i++) {
        blk_t *b = use_block(a, addrs[i]);
        if (!b || b->stream == stream || stream_has(b->uses, stream)) continue;
        if (uses_add(a, b, stream, false) == ALLOC_OK) gained++;
    }
    UNLOCK(a);
    return gained;
}

size_t alloc_use_streams(alloc_t *a, const uint64_t *addrs, size_t n, uintptr_t stream)
{
    if (!a || !n) return 0;
    /* Every live block is on this stream (or there is none): nothing to add, and no lock taken
     * (the usual launch: PyTorch's one stream). Without the lock a malloc running now on
     * another thread may go unseen, but its block cannot be among addrs: the program got the
     * address from a malloc that returned before this call, and the writes of that malloc (the
     * first block's one_stream, a later one's mixed_streams) happen before it; both flags
     * change at most once. */
    if (alloc_one_stream(a, stream)) return 0;
    return use_streams_locked(a, addrs, n, stream);
}

bool alloc_one_stream(alloc_t *a, uintptr_t stream)
{
    return !atomic_load_explicit(&a->mixed_streams, memory_order_relaxed) &&
           atomic_load_explicit(&a->one_stream, memory_order_relaxed) == stream;
}

/* ---- queries --------------------------------------------------------------------------------- */

static blk_t *live_block(alloc_t *a, uint64_t ptr, int *rc)
{
    blk_t *b = map_get(a, ptr);
    if (!b) b = interior_block(a, ptr);
    if (!b) {
        *rc = ALLOC_ERR_NOT_OWNED;
        return NULL;
    }
    if (b->rb.st != B_LIVE) {
        *rc = ALLOC_ERR_DOUBLE_FREE;
        return NULL;
    }
    *rc = ALLOC_OK;
    return b;
}

int alloc_block_info(alloc_t *a, uint64_t ptr, uint64_t *base, size_t *size)
{
    if (!a) return ALLOC_ERR_INVALID;
    int rc;
    LOCK(a);
    blk_t *b = live_block(a, ptr, &rc);
    if (b) {
        if (base) *base = b->addr;
        if (size) *size = b->size;
    }
    UNLOCK(a);
    return rc;
}

int alloc_block_query(alloc_t *a, uint64_t ptr, alloc_block_query_t *out)
{
    if (!a || !out) return ALLOC_ERR_INVALID;
    int rc;
    LOCK(a);
    blk_t *b = live_block(a, ptr, &rc);
    if (b) {
        out->base = b->addr;
        out->size = b->size;
        out->requested = b->requested;
        out->stream = b->stream;
        out->alloc_id = b->stamp;
    }
    UNLOCK(a);
    return rc;
}

int alloc_empty_cache(alloc_t *a)
{
    return alloc_empty_cache_notify(a, NULL, NULL);
}

int alloc_empty_cache_notify(alloc_t *a, alloc_locked_fn fn, void *arg)
{
    if (!a) return ALLOC_ERR_INVALID;
    LOCK(a);
    if (fn) fn(arg); /* before the synchronization drops the lock (alloc.h) */
    sync_and_land(a);
    release_all(a);
    reap_dead_streams(a);
    a->release_floor = a->cached_free;
    UNLOCK(a);
    return ALLOC_OK;
}

int alloc_set_limit(alloc_t *a, size_t limit)
{
    if (!a) return ALLOC_ERR_INVALID;
    LOCK(a);
    /* the caller's limit in bytes, in place of the configured one: the ceiling of a later
     * fraction call too, which a fraction of 1 gives back (alloc_fraction_limit) */
    a->cfg.limit = a->bytes_limit = limit;
    a->fraction_bound = a->key_bound = false;
    UNLOCK(a);
    return ALLOC_OK;
}

int alloc_set_memory_fraction(alloc_t *a, double fraction, size_t *cap)
{
    return alloc_set_memory_fraction_notify(a, fraction, cap, NULL, NULL);
}

int alloc_set_memory_fraction_notify(alloc_t *a, double fraction, size_t *cap, alloc_limit_fn fn,
                                     void *arg)
{
    if (!a || !(fraction >= 0 && fraction <= 1)) return ALLOC_ERR_INVALID;
    LOCK(a);
    size_t c = (size_t)(fraction * (double)a->capacity); /* PyTorch's setMemoryFraction */
    /* PyTorch's rule: the call replaces the fraction in force, the key's share included */
    a->cfg.limit = alloc_fraction_limit(c, fraction >= 1, a->bytes_limit);
    a->fraction_bound = a->cfg.limit < a->bytes_limit;
    a->key_bound = false;
    a->cfg.memory_fraction = fraction;
    if (fn) fn(arg, c); /* the new limit's event before any allocation it caps (alloc.h) */
    UNLOCK(a);
    if (cap) *cap = c;
    return ALLOC_OK;
}

int alloc_last_backend_error(alloc_t *a)
{
    LOCK(a);
    int e = a->last_be_err;
    UNLOCK(a);
    return e;
}

int alloc_address_order(alloc_t *a)
{
    if (!a) return 0;
    LOCK(a);
    int o = a->va_down > a->va_up ? -1 : a->va_up > a->va_down ? 1 : 0;
    UNLOCK(a);
    return o;
}

void alloc_get_stats(alloc_t *a, alloc_stats_t *out)
{
    LOCK(a);
    *out = a->st;
    UNLOCK(a);
}

void alloc_reset_peak_stats(alloc_t *a)
{
    LOCK(a);
    alloc_stat_t *s[ALLOC_NSTATS];
    for (size_t i = 0, n = a_stat_counters(&a->st, s); i < n; i++)
        s[i]->peak = s[i]->reset_peak = s[i]->current;
    UNLOCK(a);
}

void alloc_reset_program_peaks(alloc_t *a, void (*fn)(void *), void *arg)
{
    LOCK(a);
    alloc_stat_t *s[ALLOC_NSTATS];
    for (size_t i = 0, n = a_stat_counters(&a->st, s); i < n; i++)
        s[i]->reset_peak = s[i]->current;
    if (fn) fn(arg);
    UNLOCK(a);
}

bool alloc_last_oom(alloc_t *a, alloc_oom_info_t *out)
{
    LOCK(a);
    bool has = a->has_oom;
    if (has && out) *out = a->oom;
    UNLOCK(a);
    return has;
}

void alloc_mem_info(alloc_t *a, size_t *free_bytes, size_t *total_bytes)
{
    LOCK(a);
    /* frees whose work has completed count as free as soon as anyone asks (cudaMemGetInfo) */
    if (a->be.event_query) process_fences(a);
    size_t dfree, dtotal;
    device_info(a, &dfree, &dtotal);
    size_t total = dtotal;
    if (a->cfg.limit < total) total = a->cfg.limit; /* ALLOC_NO_LIMIT is never below */
    size_t reserved = (size_t)a->st.reserved_bytes.current;
    size_t fr = (total > reserved ? total - reserved : 0) + a->cached_free;
    if (a->be.mem_info && dfree + a->cached_free < fr) fr = dfree + a->cached_free;
    if (fr > total) fr = total;
    UNLOCK(a);
    if (free_bytes) *free_bytes = fr;
    if (total_bytes) *total_bytes = total;
}

void alloc_get_config(alloc_t *a, alloc_config_t *cfg)
{
    LOCK(a);
    *cfg = a->cfg;
    UNLOCK(a);
}

void alloc_set_hooks(alloc_t *a, const alloc_hooks_t *hooks)
{
    LOCK(a);
    if (hooks)
        a->hooks = *hooks;
    else
        memset(&a->hooks, 0, sizeof(a->hooks));
    UNLOCK(a);
}

/* ---- lifetime ------------------------------------------------------------------------------- */

int alloc_create(const alloc_backend_t *be, const alloc_config_t *cfg, alloc_t **out)
{
    if (!be || !out) return ALLOC_ERR_INVALID;
    *out = NULL;
    alloc_t *a = calloc(1, sizeof(*a));
    if (!a) return ALLOC_ERR_NOMEM;
    a->be = *be;
    if (cfg)
        a->cfg = *cfg;
    else
        alloc_config_default(&a->cfg);
    bool has_vmm = be->reserve && be->free_range && be->create && be->release && be->map &&
                   be->set_access && be->unmap && be->granularity;
    a->vmm = a->cfg.expandable_segments && has_vmm && a->cfg.policy != ALLOC_POLICY_NOCACHE;
    if (!a->vmm && !be->seg_alloc) {
        free(a);
        return ALLOC_ERR_INVALID;
    }
    a->cfg.expandable_segments = a->vmm;
    if (a->cfg.guard && !has_vmm) { /* guard pages need the virtual-memory calls */
        free(a);
        return ALLOC_ERR_CONFIG;
    }
    a->guard = a->cfg.guard;
    a->events = be->event_create && be->event_record && be->event_query && be->event_destroy;
    a->gran = has_vmm ? be->granularity(be->ctx) : A_SMALL_BUFFER;
    if (!a->gran || (a->gran & (A_MIN_BLOCK - 1))) {
        free(a);
        return ALLOC_ERR_BACKEND;
    }
    size_t f = 0, t = 0;
    if (be->mem_info && be->mem_info(be->ctx, &f, &t) == ALLOC_BE_OK && t)
        a->capacity = t;
    else
        a->capacity = (size_t)1 << 40;
    a->bytes_limit = a->cfg.limit;
    a->cfg.limit = alloc_conf_limit(&a->cfg, a->capacity); /* the key's share: PyTorch's */
    a->key_bound = a->cfg.limit < a->bytes_limit;
    a->cfg.handle_size = round_up(a->cfg.handle_size ? a->cfg.handle_size : a->gran, a->gran);
    a->cfg.handle_size_small =
        round_up(a->cfg.handle_size_small ? a->cfg.handle_size_small : a->gran, a->gran);
    if (ptrmap_init(&a->map, 10)) {
        free(a);
        return ALLOC_ERR_NOMEM;
    }
    atomic_init(&a->mu.v, 0);
    *out = a;
    return ALLOC_OK;
}

void alloc_destroy(alloc_t *a)
{
    if (!a) return;
    LOCK(a);
    a->destroying = true;
    sync_device_locked(a);
    land_upto(a, UINT64_MAX);
    /* what land_upto leaves: the frees a capture holds for a graph never released (no event of
     * theirs is queued); their blocks go with the segments below */
    while (a->fence_head) {
        fence_t *f = a->fence_head;
        a->fence_head = f->next;
        free(f);
    }
    a->fence_tail = NULL;
    for (size_t i = 0; i < a->nstreams; i++)
        while (a->streams[i]->mk_head) marker_pop(a, a->streams[i], true);
    for (size_t i = 0; i < a->nstreams; i++) {
        for (int k = 0; k < 2; k++) {
            pool_t *p = &a->streams[i]->pools[k];
            seg_t *s = p->segs;
            while (s) {
                seg_t *nx = s->next_in_pool;
                for (blk_t *b = s->first; b; b = b->next)
                    free(b->uses);
                if (s->guard) {
                    a->be.unmap(a->be.ctx, s->g_va, s->g_mapped);
                    a->be.release(a->be.ctx, s->g_handle);
                    a->be.free_range(a->be.ctx, s->g_va, s->g_mapped + a->gran);
                    if (a->hooks.on_segment_unmap)
                        a->hooks.on_segment_unmap(a->hooks.user, s->g_va, s->g_mapped,
                                                  p->owner->stream);
                } else if (s->expandable) {
                    for (size_t j = 0; j < s->nslots; j++)
                        if (slot_mapped(s, j)) unmap_slots(a, s, s->base + j * s->hsize, s->hsize);
                    be_count(a, ALLOC_BE_CALL_FREE_RANGE);
                    a->be.free_range(a->be.ctx, s->base, s->size);
                    free(s->handles);
                    free(s->mapbits);
                } else {
                    a->be.seg_free(a->be.ctx, s->base, s->size);
                    if (a->hooks.on_segment_unmap)
                        a->hooks.on_segment_unmap(a->hooks.user, s->base, s->size,
                                                  p->owner->stream);
                }
                free(s);
                s = nx;
            }
        }
        sstate_free(a->streams[i]);
    }
    free(a->streams);
    free(a->stab);
    for (size_t i = 0; i < a->nev_pool; i++)
        a->be.event_destroy(a->be.ctx, a->ev_pool[i]);
    free(a->ev_pool);
    while (a->chunks) {
        blk_chunk_t *c = a->chunks;
        a->chunks = c->next;
        free(c);
    }
    free(a->map.slots);
    while (a->fence_spare) {
        fence_t *f = a->fence_spare;
        a->fence_spare = f->next;
        free(f);
    }
    while (a->fev_spare) {
        fev_t *e = a->fev_spare;
        a->fev_spare = e->next;
        free(e);
    }
    UNLOCK(a);
    free(a);
}
