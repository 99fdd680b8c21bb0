/* rec_ring.h — the recorder's bounded lock-free MPSC ring of fixed-size records (internal).
 *
 * Many application threads push, one writer thread pops. It is Vyukov's bounded queue: every
 * slot carries a sequence number that says whose turn it is, so a producer claims a slot with
 * one CAS on `head` and publishes it with one release store; the consumer reads in claim order.
 * A producer with several records (a launch and its argument words) claims them together with
 * one CAS when the ring has room for all (rec_ring_push_n).
 * The claim position + 1 is the record's global sequence number (events.seq), so seq costs
 * nothing extra and is gap-free among the records that were not dropped.
 *
 * Back-pressure. By default a full ring makes the producer wait for the consumer: nothing is
 * lost (as memray and heaptrack do). A waiting producer sleeps on a futex (room_word) that the
 * consumer bumps as it frees slots (every quarter of the ring, and after each drain, but only
 * while someone waits: a pop costs one relaxed load more), with a 1 ms timeout so no wake-up
 * can be missed for long. It gives up and drops (counted) only when waiting cannot end:
 *   - no_wait says so: the consumer is gone (closed, or never started), or a fork is being
 *     prepared (the consumer is parked then, and the forking thread may need a lock this
 *     producer holds);
 *   - it is the consumer thread itself (rec_ring_consumer_thread);
 *   - the consumer made no room for stall_ns (REC_RING_STALL_NS, 10 s): something holds it
 *     (REC_RING_STALLED is set in no_wait, so later producers drop at once until the consumer
 *     moves again; the consumer warns).
 * A producer never waits while holding anything of the ring: it may hold its caller's locks
 * (the allocator's), which the consumer must therefore never take.
 *
 * Bounded (opt-in, wait_ns != REC_RING_WAIT_FOREVER): a full ring makes the first producer
 * yield for up to `wait_ns` (the writer is woken at once and usually makes room within it). If
 * it does not, the record is dropped and counted in `dropped`, and the ring enters drop mode:
 * while it stays full, every producer drops at once, without waiting, until the consumer has
 * freed a quarter of it. A stalled writer therefore costs the program one wait per episode, not
 * one per event.
 */
#ifndef GPUMEM_SNAPSHOT_REC_RING_H
#define GPUMEM_SNAPSHOT_REC_RING_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

/* Advice for a large buffer of anonymous memory that the recording threads fill or look up as
 * they go (the event ring, the stack table, the PyTorch trace tracker's ring): huge pages where
 * the kernel offers them (transparent_hugepage "madvise"), one page fault per 2 MiB where 4 KiB
 * pages took 512 (a tiny PyTorch step faulted ~7 pages of the two rings before: tests/bench/
 * README.md), and fewer TLB misses in a table looked up at random. Only advice: refused,
 * nothing changes. */
static inline void rec_mem_advise_huge(void *p, size_t bytes) {
    if (bytes >= (2u << 20)) (void)madvise(p, bytes, MADV_HUGEPAGE);
}

/* One record: 64 bytes of payload. Event kinds use enum rec_kind (+ flags); the recorder's
 * own record kinds (ranges, names) start at REC_R_BASE. */
typedef struct rec_rec {
    uint64_t t;        /* ns since recording start */
    uint64_t addr, size, requested, alloc_id, stream;
    uint16_t kind;     /* rec_kind | REC_F_* flags, or REC_R_* */
    int16_t device;
    uint32_t thread;
    uint32_t stack;
    uint32_t range;
} rec_rec;

typedef struct rec_slot {
    _Atomic uint64_t turn;
    rec_rec r;
} rec_slot;

typedef struct rec_ring {
    alignas(64) _Atomic uint64_t head; /* next claim position (producers) */
    alignas(64) uint64_t tail;         /* next read position (the one consumer) */
    alignas(64) _Atomic uint64_t dropped;
    /* of those, records of kind aux_kind (0: none set): records that carry part of another (a
     * launch's argument words, REC_R_WORDS), so that what was lost can be counted as events and
     * word records apart. Set aux_kind after rec_ring_init. */
    _Atomic uint64_t dropped_aux;
    uint16_t aux_kind;
    _Atomic int dropping;       /* drop mode: full producers do not wait (see above) */
    _Atomic uint32_t wake_word; /* futex: bumped to wake the consumer (rec_ring_wake) */
    _Atomic uint32_t room_word; /* futex: bumped by the consumer when it made room for waiters */
    _Atomic uint32_t waiters;   /* producers asleep on room_word */
    _Atomic int no_wait;        /* REC_RING_* bits: a full ring drops at once (see above) */
    uint64_t wake_mask;         /* producers wake the consumer every wake_mask+1 events */
    uint64_t mask;
    uint64_t wait_ns;
    uint64_t stall_ns;          /* lossless: no room for this long gives up (REC_RING_STALL_NS) */
    rec_slot *slots;
    size_t bytes;
} rec_ring;

/* wait_ns: a full ring waits for room as long as the consumer makes progress (lossless) */
#define REC_RING_WAIT_FOREVER UINT64_MAX
#define REC_RING_STALL_NS (10ull * 1000000000u)
/* no_wait bits */
#define REC_RING_NO_CONSUMER 1 /* the consumer is gone or not started */
#define REC_RING_FORKING 2     /* a fork is being prepared */
#define REC_RING_STALLED 4     /* the consumer made no room for REC_RING_STALL_NS */

/* cap is rounded up to a power of two (>= 2). Memory from mmap (not freed by rec_ring_free
 * callers that may still race with late producers). wait_ns: REC_RING_WAIT_FOREVER (lossless)
 * or the bounded wait of drop mode. Returns 0 or -1. */
int rec_ring_init(rec_ring *q, uint64_t cap, uint64_t wait_ns);
/* Forget all contents (used in a forked child). */
void rec_ring_reset(rec_ring *q);
void rec_ring_free(rec_ring *q);
/* Push; returns the record's seq (>= 1) or 0 when dropped. */
uint64_t rec_ring_push(rec_ring *q, const rec_rec *r);

/* Pushes r[0..n-1] as consecutive records with one claim (one CAS) when the ring has room for
 * all of them; otherwise one by one (rec_ring_push, with its back-pressure), when other
 * threads' records may come in between. Returns the last record's sequence number (0: it was
 * dropped). */
uint64_t rec_ring_push_n(rec_ring *q, const rec_rec *r, size_t n);
/* Pop the next record in order; returns its seq, or 0 when the next one is not published. */
uint64_t rec_ring_pop(rec_ring *q, rec_rec *out);
/* The consumer sleeps in rec_ring_wait until timeout_ns pass or someone calls rec_ring_wake;
 * producers call it themselves each time a quarter of the ring has been filled, so a consumer
 * that sleeps long (few wake-ups: it shares the cores with the program) never lets it fill. */
void rec_ring_wait(rec_ring *q, uint64_t timeout_ns);
void rec_ring_wake(rec_ring *q);
/* The consumer, after a drain: wakes the producers waiting for room, if any. */
void rec_ring_room(rec_ring *q);
/* Marks the calling thread as the consumer: it never waits for room (it would wait for itself). */
void rec_ring_consumer_thread(void);
/* Seq of the last claimed record (0 if none). */
static inline uint64_t rec_ring_last_seq(rec_ring *q) {
    return atomic_load_explicit(&q->head, memory_order_acquire);
}

/* Slots asked for ahead of a claim (72 bytes each: 18 cache lines). The ring's slots are cold,
 * the writer read them a whole ring ago: without it the next claim's locked instruction waits
 * for this record's store to miss. */
#define REC_RING_AHEAD 16

/* The hot path of a push (rec_ring_push's too), for a caller that fills the record in place:
 * claims the next slot when it is free, or returns NULL with *pos_out the position found full
 * (build the record and rec_ring_push it, which waits or drops). A claimed slot holds the
 * consumer back until rec_ring_publish: fill it with plain stores and nothing else between. */
static inline rec_slot *rec_ring_claim(rec_ring *q, uint64_t *pos_out) {
    uint64_t pos = atomic_load_explicit(&q->head, memory_order_relaxed);
    for (;;) {
        rec_slot *s = &q->slots[pos & q->mask];
        int64_t dif = (int64_t)(atomic_load_explicit(&s->turn, memory_order_acquire) - pos);
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&q->head, &pos, pos + 1,
                                                      memory_order_relaxed,
                                                      memory_order_relaxed)) {
                __builtin_prefetch(&q->slots[(pos + REC_RING_AHEAD) & q->mask], 1);
                *pos_out = pos;
                return s;
            }
        } else if (dif < 0) {
            *pos_out = pos;
            return NULL;
        } else {
            pos = atomic_load_explicit(&q->head, memory_order_relaxed);
        }
    }
}

/* n consecutive slots claimed with one CAS, for a caller that fills them in place (rec_launch's
 * word records and its launch record): the position of the first, or UINT64_MAX when the ring
 * has no room for all n now (or n is over a quarter of it: then build the records and
 * rec_ring_push_n them, which waits or drops). Each slot is published with rec_ring_publish_n
 * once filled, in order; as with rec_ring_claim, nothing but plain stores in between. */
static inline uint64_t rec_ring_claim_n(rec_ring *q, size_t n) {
    /* the slots and the mask read once (they live as long as the ring): the acquire load and
     * the CAS would have them read again */
    rec_slot *const slots = q->slots;
    const uint64_t mask = q->mask;
    if (n == 0 || n > (mask + 1) / 4) return UINT64_MAX;
    uint64_t pos = atomic_load_explicit(&q->head, memory_order_relaxed);
    for (int tries = 0; tries < 4; tries++) {
        /* the consumer frees slots in order: the last of the n free for this lap means all are */
        rec_slot *last = &slots[(pos + n - 1) & mask];
        if (atomic_load_explicit(&last->turn, memory_order_acquire) != pos + n - 1) return UINT64_MAX;
        if (atomic_compare_exchange_weak_explicit(&q->head, &pos, pos + n, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            __builtin_prefetch(&slots[(pos + n - 1 + REC_RING_AHEAD) & mask], 1);
            return pos;
        }
    }
    return UINT64_MAX;
}

/* Publishes slot pos + i of a rec_ring_claim_n of n; returns its seq. The consumer is woken as
 * by single pushes (each time a multiple of wake_mask + 1 is passed), once per claim. */
static inline uint64_t rec_ring_publish_n(rec_ring *q, uint64_t pos, size_t i, size_t n) {
    atomic_store_explicit(&q->slots[(pos + i) & q->mask].turn, pos + i + 1, memory_order_release);
    if (i + 1 == n && (pos & q->wake_mask) + n > q->wake_mask) rec_ring_wake(q);
    return pos + i + 1;
}

/* For a caller that stored the turns of a rec_ring_claim_n's n slots itself, in order, each
 * slot's pos + i + 1 once filled (rec_launch: the ring's slots and mask kept in registers): the
 * wake rec_ring_publish_n makes at the last one. Returns the last one's seq. */
static inline uint64_t rec_ring_published_n(rec_ring *q, uint64_t pos, size_t n) {
    if ((pos & q->wake_mask) + n > q->wake_mask) rec_ring_wake(q);
    return pos + n;
}

/* Publishes the record rec_ring_claim gave the slot of; returns its seq. */
static inline uint64_t rec_ring_publish(rec_ring *q, rec_slot *s, uint64_t pos) {
    atomic_store_explicit(&s->turn, pos + 1, memory_order_release);
    if (((pos + 1) & q->wake_mask) == 0) rec_ring_wake(q);
    return pos + 1;
}

#endif
