/* internal.h — alloc/'s one internal types header (not installed, not for other modules).
 *
 * Data model
 *   alloc_t ── streams[] ── sstate (one per stream seen) ── pool[2] (small, large)
 *   pool ── segs: classic segments, or the one expandable range of this (stream, pool)
 *   seg  ── blocks in address order (prev/next), tiling [base, base + size) exactly.
 *
 * A block is LIVE (handed out), PENDING (freed, waiting for stream events), FREE (cached,
 * reusable) or UNMAPPED (expandable ranges only: address space with no physical memory).
 * Invariants (alloc_check verifies them): no two FREE neighbours, no two UNMAPPED neighbours;
 * every FREE block is in exactly one size-class tree of its pool, every UNMAPPED block in its
 * pool's unmapped tree, every LIVE/PENDING block in the address map.
 *
 * Free index: size classes (512 exact classes of 512 B, then 512 per power of two) with a bitmap of
 * non-empty classes (and a summary of its non-zero words); each class is a red-black tree keyed by
 * (size, address). Best fit =
 * lower_bound in the request's class, else the first block of the next non-empty class: the
 * smallest block that fits, lowest address among equals, in O(log n).
 */
#ifndef GPUMEM_ALLOC_INTERNAL_H
#define GPUMEM_ALLOC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/alloc.h"

#define A_MIN_BLOCK 512u              /* every size rounds to this */
#define A_SMALL_SIZE (1u << 20)       /* <= this: small pool */
#define A_SMALL_BUFFER (2u << 20)     /* classic small segment */
#define A_LARGE_BUFFER (20u << 20)    /* classic segment for 1..10 MiB requests */
#define A_MIN_LARGE_ALLOC (10u << 20) /* below this a large request gets a 20 MiB segment */
#define A_ROUND_LARGE (2u << 20)      /* classic large segments round to this */

/* Size classes: exact 512 B steps below 2^A_SUB_BITS units, then 2^A_SUB_BITS classes per power
 * of two. Fine classes keep each class's tree small (one to three blocks even with 10k free
 * blocks), so best fit and the reinsertion of a split's remainder touch few cold blocks. With
 * 512 per power of two (classes 0.2% apart) and cache-line-aligned blocks, the pair costs ~12%
 * more at 10k live blocks than at 10 (tests/bench/alloc_bench.c), against ~15% with 256 and
 * unaligned blocks and ~40% with 32; 1024 per power of two cut the 10k case no further and made
 * the 10 case slower (the class entries of the request sizes no longer fit the L1 cache). The
 * index costs 32 bytes per class and pool (~750 KiB for all classes; a pool allocates only up
 * to the largest class it can hold, see pool_t.cls: ~80 KiB for a small pool, ~320 KiB for a
 * large pool mapping 140 GB). */
#define A_SUB_BITS 9
#define A_SUB (1u << A_SUB_BITS)
#define A_NCLS (A_SUB + (55u - A_SUB_BITS) * A_SUB)
#define A_NCLS_WORDS ((A_NCLS + 63) / 64)
#define A_NCLS_SUMMARY ((A_NCLS_WORDS + 63) / 64) /* bit w: bitmap word w is not zero */

/* ---- red-black tree (rbtree.c), intrusive, keyed by (size, addr) of the containing block */
typedef struct rb_node {
    struct rb_node *left, *right, *parent;
    uint8_t red;
    /* spare bytes of the node, used by the containing block so that everything the hot path
     * touches (links, state, size, address) fits in the block's first 64-byte cache line */
    uint8_t st;
    uint8_t split;
    uint8_t named; /* LIVE with uses: alloc_record_stream named one of them (see blk_t.uses) */
    uint16_t cls;  /* FREE: the class whose tree holds it (not recomputed to take it out) */
    uint8_t nb;    /* what the block knows of its address neighbours: NB_* below */
} rb_node_t;

typedef struct rb_tree {
    rb_node_t *root;
    size_t count;
} rb_tree_t;

enum { B_LIVE = 0, B_PENDING = 1, B_FREE = 2, B_UNMAPPED = 3 };

/* Neighbour bits (rb.nb): a free looks at its neighbours' states only where its own bits say
 * they may be FREE, so a block freed between live blocks reads no line of theirs (with 100,000
 * live blocks those two reads were a quarter of the pair's cache misses). Each bit may be set
 * when the fact it stands for is false (the free then reads the neighbour, and clears the bit
 * when the neighbour is LIVE or PENDING), never clear when it is true. For two neighbours
 * P (lower address) and X, P->next == X, alloc_check verifies:
 *   P FREE or UNMAPPED => X has NB_PF;   X FREE or UNMAPPED => P has NB_NF;
 *   X has NB_AP => P has NB_NF;          P has NB_AN => X has NB_PF.
 * NB_AP and NB_AN let a block that becomes FREE skip writing bits its neighbours already have
 * (a block freed again and again between the same live neighbours writes them once). Linking
 * and unlinking set every bit of the edges they make (always true); only a FREE insertion and a
 * free's checks need more (alloc.c: nb_announce, make_free). */
enum {
    NB_PF = 1, /* prev may be FREE or UNMAPPED */
    NB_NF = 2, /* next may be FREE or UNMAPPED */
    NB_AP = 4, /* prev has NB_NF */
    NB_AN = 8, /* next has NB_PF */
    NB_ALL = 15
};

typedef struct blk {
    rb_node_t rb;            /* must be first: tree nodes cast to blocks */
    struct blk *prev, *next; /* address neighbours in the same segment */
    uint64_t addr;
    uint64_t size;
    /* second cache line: colder fields */
    struct seg *seg;
    uint64_t requested;
    uint64_t stamp;   /* LIVE/PENDING: alloc id; FREE: gc epoch when it became free */
    uintptr_t stream; /* stream of the allocation (LIVE/PENDING) */
    /* LIVE: streams other than `stream` that use the block (alloc_record_stream, and
     * alloc_use_streams: access tracking); freed with the block. NULL when none. uses[0] is the
     * count, uses[1] the capacity, then the streams. rb.named: record_stream named one. */
    uintptr_t *uses;
    /* FREE: a_free_seq when it became free by a path that did not wait for the device (0 = the
     * device finished every use before it became free). A release that synchronized at free
     * sequence S may unmap only blocks with fseq <= S: another thread may free a block while the
     * lock is dropped for the synchronization. */
    uint64_t fseq;
} __attribute__((aligned(64))) blk_t; /* 128 bytes, each on its own two cache lines */
_Static_assert(sizeof(blk_t) == 128 && offsetof(blk_t, size) + sizeof(uint64_t) <= 64,
               "blk_t: the hot fields must fill the block's first cache line");
_Static_assert(A_NCLS <= 65536, "rb_node_t.cls holds every class");
/* b->rb.st: B_LIVE, B_PENDING, B_FREE, B_UNMAPPED; b->rb.split: FREE and counted in
 * inactive_split (see a_block_is_split) */

void rb_insert(rb_tree_t *t, blk_t *b);
/* b as the left (or right) child of parent, which has none there and is b's neighbour in key
 * order (NULL: the empty tree's root): an insert without the descent, the same tree */
void rb_insert_at(rb_tree_t *t, blk_t *b, blk_t *parent, bool left);
void rb_erase(rb_tree_t *t, blk_t *b);
blk_t *rb_lower_bound(const rb_tree_t *t, uint64_t size); /* smallest (size, addr) >= size */
blk_t *rb_first(const rb_tree_t *t);
blk_t *rb_last(const rb_tree_t *t);
blk_t *rb_next(const blk_t *b);

struct pool;

typedef struct seg {
    struct seg *next_in_pool, *prev_in_pool;
    struct pool *pool;
    blk_t *first; /* lowest-address block */
    uint64_t base;
    size_t size; /* classic: segment bytes; expandable: reserved range bytes */
    bool expandable;
    /* expandable only: one physical handle per slot of hsize bytes */
    size_t hsize;
    size_t nslots;
    uint64_t *handles;
    uint64_t *mapbits; /* bit per slot: mapped */
    size_t mapped;     /* bytes mapped in this range */
    size_t runs;       /* maximal mapped runs (the "segments" of the stats) */
    /* guard:1 only (classic-like, one block): the reservation [g_va, g_va + g_mapped + gran),
     * its one handle mapped over [g_va, g_va + g_mapped); the block ends at g_va + g_mapped */
    bool guard;
    uint64_t g_va, g_handle;
    size_t g_mapped;
} seg_t;

struct sstate;

typedef struct pool {
    struct sstate *owner;
    bool small;
    size_t hsize; /* handle size for expandable ranges of this pool */
    uint64_t bitmap[A_NCLS_WORDS];
    uint64_t summary[A_NCLS_SUMMARY]; /* the non-zero words of bitmap: a search skips empty
                                         stretches of classes 4096 at a time */
    /* per class: its smallest block, held outside the tree, then the tree of the others and
     * its first block, side by side (two classes a cache line). Best fit takes the smallest
     * without touching the tree, and a block that comes back freed as the class's smallest
     * (best fit's block, freed again) takes the slot back: with thousands of equal holes the
     * pair reads the class entry, the block and the tree's first, and neither erases nor
     * rebalances. `min` may be NULL while the tree is not: then the tree's first is the
     * smallest. Best fit in a higher class needs no descent either. Classes 0..ncls-1 only,
     * ncls a multiple of A_SUB: the index covers
     * the largest block the pool can hold (a classic segment's size, an expandable range's
     * mapped bytes), grown before the pool grows (pool_cover). A pool that never held more
     * than a few MiB has ~80 KiB of index, not the ~750 KiB of every class; a class at or
     * above ncls is empty. */
    struct pool_cls {
        rb_tree_t t;        /* the class's blocks but min */
        struct blk *min;    /* the smallest block, not in t; or NULL (then first is) */
        struct blk *first;  /* t's first block, NULL when t is empty; after min */
    } *cls;
    unsigned ncls;
    rb_tree_t unmapped;          /* UNMAPPED blocks, expandable only */
    seg_t *segs;                 /* classic segments and expandable ranges */
    size_t nranges;              /* expandable ranges reserved (usually 0 or 1) */
    size_t free_bytes;           /* FREE bytes in this pool */
} pool_t;

/* One event recorded on a stream for a pending free. Each stream keeps its events in a FIFO:
 * events of one stream complete in order, so a query stops at the first one not done, and one
 * slow stream holds back only the frees that wait for it. */
typedef struct fev {
    struct fev *next;
    void *ev;
    struct fence *f; /* NULL: a marker (sstate_t.mk_head) */
    uint64_t seq;    /* a marker: a->free_seq when it was recorded */
} fev_t;

typedef struct sstate {
    uintptr_t stream;
    bool fenced;     /* a free of a block never given a stream records an event here */
    bool dead;       /* alloc_forget_stream: no more events; pools released once empty */
    bool recorded;   /* named by alloc_record_stream for some block */
    /* a graph capture's private pools (alloc_malloc_captured): a graph may use their memory at
     * every replay, so nothing releases it (release paths, garbage collection, empty_cache)
     * before alloc_release_capture, and shared pools never stand in for them */
    bool graph;
    pool_t pools[2]; /* [0] small, [1] large */
    fev_t *q_head, *q_tail; /* events recorded on this stream, oldest first */
    /* Markers: events recorded on this stream by a release that does not synchronize (release
     * before growth, garbage collection), oldest first, each tagged with a->free_seq at its
     * record. Once one has completed, every use of a FREE block of this stream's pools with
     * fseq <= its tag has finished on the device (mk_done), so its pages may be unmapped
     * without waiting (see blk_settled in alloc.c). */
    fev_t *mk_head, *mk_tail;
    unsigned mk_n; /* markers pending */
    bool mk_want;  /* a release found FREE blocks of this stream's pools not yet settled */
    uint64_t mk_done;
} sstate_t;

/* A pending free: the block becomes FREE when its `left` events completed, or when a device
 * synchronization that started after the fence was made has finished (seq <= the sync's). */
typedef struct fence {
    struct fence *next, *prev; /* all fences, oldest first */
    blk_t *blk;
    unsigned left;     /* events not yet complete */
    uint64_t seq;      /* a->fence_seq when made */
    uint64_t capture;  /* nonzero: freed inside this graph capture; held until it is released */
    bool deferred;     /* made while a capture was underway: its events are recorded after it */
    bool async;        /* the free was in stream order on `freed_on` */
    uintptr_t freed_on;
} fence_t;

/* address -> LIVE/PENDING block: open addressing, linear probing, backward-shift delete */
typedef struct ptrmap_slot {
    uint64_t key; /* 0 = empty */
    blk_t *val;
} ptrmap_slot_t;

typedef struct ptrmap {
    ptrmap_slot_t *slots; /* key and value side by side: one cache miss per probe */
    size_t cap, count;
    unsigned shift;
} ptrmap_t;

typedef struct blk_chunk {
    struct blk_chunk *next;
    blk_t blocks[]; /* from offset 64 of a 64-byte-aligned chunk: each block starts a cache line */
} blk_chunk_t;

/* The allocator's lock: a futex mutex (0 free, 1 held, 2 held and maybe waited for; Drepper,
 * "Futexes are tricky", the third mutex). Uncontended, taking and giving it back are one atomic
 * instruction each, inline: a cached malloc + free pair takes it twice, and glibc's
 * pthread_mutex_lock/unlock calls were ~100 of the pair's ~1,000 instructions. A waiter sleeps
 * in the kernel at once (the holder may be inside a driver call). */
typedef struct a_lock {
    atomic_int v;
    /* one thread owns what the lock guards (a replay's allocator and backend, set before their
     * first use): no atomics, which cost a replay 10-20% of its time (two per call, uncontended) */
    bool off;
} a_lock_t;
void a_lock_wait(a_lock_t *l);
void a_lock_wake(a_lock_t *l);
static inline void a_lock(a_lock_t *l)
{
    if (l->off) return;
    int c = 0;
    if (!atomic_compare_exchange_strong_explicit(&l->v, &c, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        a_lock_wait(l);
}
static inline void a_unlock(a_lock_t *l)
{
    if (l->off) return;
    if (atomic_fetch_sub_explicit(&l->v, 1, memory_order_release) != 1) a_lock_wake(l);
}

struct alloc {
    a_lock_t mu;
    alloc_backend_t be;
    alloc_config_t cfg;
    alloc_hooks_t hooks;
    bool vmm;    /* expandable segments in effect */
    bool guard;  /* guard:1 in effect (alloc.h) */
    bool events; /* backend tracks events */
    size_t gran;
    size_t capacity; /* device total bytes */
    size_t bytes_limit; /* the limit in bytes configured (GPUMEM_LIMIT, the limit key) or set
                           (alloc_set_limit, which replaces it), the
                           ceiling of every per-process memory fraction: the key's share at
                           create (alloc_conf_limit), then the calls' (alloc_fraction_limit) */
    bool fraction_bound; /* cfg.limit is alloc_set_memory_fraction's, below bytes_limit */
    bool key_bound;      /* cfg.limit is the per_process_memory_fraction key's share of the
                            device, below bytes_limit (alloc_conf_limit); no call replaced it */

    sstate_t **streams;
    size_t nstreams, cap_streams;
    /* the stream of the first block ever allocated (next_id 0: none yet), and whether any
     * block since was allocated on another (sticky): while not, every live block is on
     * one_stream, and access tracking on that stream has nothing to add (alloc_use_streams;
     * PyTorch's single stream). Written under the lock, each at most once; atomic because
     * alloc_use_streams reads them without it */
    _Atomic uintptr_t one_stream;
    _Atomic bool mixed_streams;
    sstate_t *last_stream; /* one-entry cache for the hot path */
    /* the same streams by handle: open addressing, linear probing, a power-of-two size at least
     * twice nstreams; rebuilt whenever streams[] changes (a stream's first use, its reaping), so
     * a lookup costs the same with 1 or 1,000 streams (a free fenced on a named stream) */
    sstate_t **stab;
    size_t stab_mask;
    sstate_t *shared;      /* per_stream_pools:False: the stream state whose pools all share */
    /* interior addresses (alloc_use_streams, alloc_block_query: views into a block, a copy's
     * bounds check): the blocks last found for them, direct-mapped by address (64 KiB
     * granules); an entry is trusted only while the address map still holds that block */
#define A_ICACHE 256
    blk_t *icache[A_ICACHE];

    /* LIVE and PENDING blocks by start address: the map, and the last block allocated, held
     * here until the next allocation puts it into the map (a block freed before that, as a
     * temporary is, never enters the map: with 100,000 live blocks its slot was a cache miss
     * at the malloc and another at the free). Look-ups go through a_map_get. */
    ptrmap_t map;
    blk_t *fresh;
    blk_t *free_blks; /* recycled block structs */
    blk_chunk_t *chunks;
    size_t nchunk_blocks; /* block structs in chunks */

    fence_t *fence_head, *fence_tail;
    /* recycled fence and fev structs (linked through next): a fenced free takes its structs
     * from here, not from malloc, whose heap trimming made a free cost 0.1-1.6 us by chance */
    fence_t *fence_spare;
    fev_t *fev_spare;
    uint64_t fence_seq;  /* fences made so far */
    uint64_t free_seq;   /* blocks made FREE without waiting for the device (see blk_t.fseq) */
    uint64_t synced_free_seq; /* free_seq when the last completed synchronization started */
    /* per_stream_pools:False: the lowest mk_done over the live streams (a block of the shared
     * pools may have been used on any of them), and a release wants markers on all of them */
    uint64_t mk_all_done;
    bool mk_want_all;
    /* a replay of the recorded configuration with the trace's marker lines (alloc_replay_opts_t
     * .markers): no events, yet a block is settled only by its stream's markers, which those
     * lines record and complete (a_marker_scripted), never by settle_free itself */
    bool mk_scripted;
    /* the settle points of the allocation in progress (alloc_hooks_t.on_marker's step):
     * mk_in_malloc while alloc_malloc_ex runs (after its broken-event synchronization), mk_step
     * the points so far since its start or last new start, mk_cur the point underway (0: none) */
    bool mk_in_malloc;
    unsigned mk_step, mk_cur;
    /* the allocation in progress's request (mk_in_malloc), for a wait's start (on_wait) */
    size_t mk_size;
    uintptr_t mk_stream;
    uint64_t wait_seq; /* synchronizations that dropped the lock so far: a wait's number */
    /* a replay of a trace with wait lines (`sw`): called where sync_land has dropped the lock,
     * before it synchronizes. The replay may run other events of the trace meanwhile (those the
     * run's other threads made during the wait) and returns 1 where the trace says the run
     * started over after the wait (`sr`), 0 where not, -1 where it waited for nothing (the
     * synchronization is made in place, the trace's `sy` settling as before) */
    int (*wait_script)(void *user);
    /* then, where the run's synchronization landed its frees (after the gc clock went back for
     * a new start): the replay frees those the trace says it landed (`fy`), settled; returns
     * how many */
    size_t (*wait_land)(void *user);
    void *wait_user;
    /* mk_scripted: called at each settle point of an allocation with its step, before the point
     * looks at what is settled: the replay applies the trace's lines made at that point or
     * before (a_marker_scripted, a_sync_scripted) */
    void (*mk_script)(void *user, unsigned step);
    void *mk_script_user;
    bool broken_event;   /* an event query failed: the next malloc synchronizes */
    unsigned captures;   /* graph captures underway: no event query, no synchronization */
    void **ev_pool; /* idle events for reuse */
    size_t nev_pool, cap_ev_pool;

    alloc_stats_t st;
    size_t pending_bytes;
    size_t cached_free;   /* FREE bytes over all pools (mapped, reusable) */
    size_t release_floor; /* see maybe_release() */
    uint64_t next_id;
    uint64_t epoch; /* gc clock: bumps on each malloc that misses the cache */
    /* where the backend put each new range or classic segment relative to the one before:
     * alloc_address_order() */
    uint64_t last_va, va_up, va_down;

    bool destroying;
    bool has_oom;
    alloc_oom_info_t oom;
    int last_be_err;
};

/* Every current/peak counter of the stats, for code that treats them all alike (peak reset,
 * the invariant checker). Fills out[] (ALLOC_NSTATS entries) and returns the count. */
#define ALLOC_NSTATS 9
static inline size_t a_stat_counters(alloc_stats_t *st, alloc_stat_t *out[ALLOC_NSTATS])
{
    alloc_stat_t *all[ALLOC_NSTATS] = {&st->allocated_bytes, &st->requested_bytes,
                                       &st->reserved_bytes,  &st->active_bytes,
                                       &st->inactive_split_bytes, &st->allocation,
                                       &st->segment,         &st->active,
                                       &st->inactive_split};
    for (size_t i = 0; i < ALLOC_NSTATS; i++)
        out[i] = all[i];
    return ALLOC_NSTATS;
}

/* alloc.c internals shared with check.c */
sstate_t *a_stream_find(alloc_t *a, uintptr_t stream);
/* A trace's marker line (mk_scripted): a marker recorded on stream now (done false: tagged with
 * the free sequence so far), or that stream's oldest marker complete (done true). A stream the
 * allocator does not know is passed over. */
void a_marker_scripted(alloc_t *a, uintptr_t stream, bool done);
/* A trace's sync line (mk_scripted): the recording's allocator synchronized; every free so far
 * is settled. */
void a_sync_scripted(alloc_t *a);
/* The same for a synchronization whose wait began when the free sequence was free_seq (the
 * trace's `sw` outside an allocation): only what was freed before it is settled. */
void a_sync_scripted_upto(alloc_t *a, uint64_t free_seq);
uint64_t a_free_seq(const alloc_t *a);
/* A trace's forget line (mk_scripted): the program destroyed stream, which held memory; the
 * recording's allocator forgot it and released what the forgotten streams' pools held, as
 * alloc_forget_stream does after its synchronization (the trace's `sy` and `md` came first). */
void a_forget_scripted(alloc_t *a, uintptr_t stream);
/* the LIVE or PENDING block that starts at addr (alloc_t.fresh, then the map), or NULL */
blk_t *a_map_get(const alloc_t *a, uint64_t addr);
/* the size class of a block of `size` bytes (inline: the hot path computes it three times) */
static inline unsigned a_size_class(uint64_t size)
{
    uint64_t u = size >> 9;
    if (u < A_SUB) return (unsigned)u;
    unsigned e = 63u - (unsigned)__builtin_clzll(u); /* >= A_SUB_BITS */
    return A_SUB + (e - A_SUB_BITS) * A_SUB + (unsigned)((u >> (e - A_SUB_BITS)) & (A_SUB - 1));
}
/* FREE and not a whole segment or mapped run (counted in inactive_split) */
static inline bool a_block_is_split(const blk_t *b)
{
    return (b->prev && b->prev->rb.st != B_UNMAPPED) || (b->next && b->next->rb.st != B_UNMAPPED);
}

/* a request's block size: 512 B steps, or roundup_power2_divisions (inline: every malloc rounds) */
static inline size_t a_round_size(const alloc_config_t *cfg, size_t size)
{
    if (size <= A_MIN_BLOCK) return A_MIN_BLOCK;
    unsigned lg = 63u - (unsigned)__builtin_clzll((unsigned long long)size);
    uint64_t div = cfg->rp2_div[lg];
    if (div > 1 && size > (size_t)A_MIN_BLOCK * (size_t)div) {
        if ((size & (size - 1)) == 0) return size;
        size_t floor2 = (size_t)1 << lg;
        size_t step = floor2 >> (63u - (unsigned)__builtin_clzll((unsigned long long)div));
        if (!step) return floor2 << 1;
        size_t down = size & ~(step - 1);
        return down == size ? size : down + step;
    }
    if (size > SIZE_MAX - A_MIN_BLOCK) return 0;
    return (size + A_MIN_BLOCK - 1) / A_MIN_BLOCK * A_MIN_BLOCK;
}

#endif
