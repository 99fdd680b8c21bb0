/* rec_ring.c — bounded lock-free MPSC ring (see rec_ring.h for the design). */
#include "snapshot/record/rec_ring.h"

#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t ring_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int rec_ring_init(rec_ring *q, uint64_t cap, uint64_t wait_ns) {
    uint64_t n = 2;
    while (n < cap && n < (1ull << 30)) n <<= 1;
    memset(q, 0, sizeof *q);
    q->bytes = n * sizeof(rec_slot);
    /* mmap: pages are touched only as the ring fills, and LeakSanitizer does not track it,
     * which matters because a ring is never unmapped while producers might still race. */
    void *p = mmap(NULL, q->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return -1;
    rec_mem_advise_huge(p, q->bytes); /* filled slot by slot on the recording threads */
    q->slots = p;
    q->mask = n - 1;
    q->wake_mask = n >= 8 ? n / 4 - 1 : 0;
    q->wait_ns = wait_ns;
    q->stall_ns = REC_RING_STALL_NS;
    rec_ring_reset(q);
    return 0;
}

/* the consumer's thread: it never waits for room */
static __thread int ring_consumer __attribute__((tls_model("initial-exec")));
void rec_ring_consumer_thread(void) { ring_consumer = 1; }

void rec_ring_reset(rec_ring *q) {
    for (uint64_t i = 0; i <= q->mask; i++)
        atomic_store_explicit(&q->slots[i].turn, i, memory_order_relaxed);
    atomic_store_explicit(&q->head, 0, memory_order_relaxed);
    q->tail = 0;
    atomic_store_explicit(&q->dropped, 0, memory_order_release);
    atomic_store_explicit(&q->dropped_aux, 0, memory_order_release);
    atomic_store_explicit(&q->dropping, 0, memory_order_relaxed);
    atomic_store_explicit(&q->waiters, 0, memory_order_relaxed);
    atomic_store_explicit(&q->no_wait, REC_RING_NO_CONSUMER, memory_order_release); /* until one starts */
}

void rec_ring_free(rec_ring *q) {
    if (q->slots) munmap(q->slots, q->bytes);
    q->slots = NULL;
}

static void futex_wait(_Atomic uint32_t *w, uint32_t v, uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, v, &ts, NULL, 0);
}

/* Lossless back-pressure: sleep until the consumer frees the slot at pos. Returns 0 to try
 * again, -1 when waiting cannot end (rec_ring.h): the caller drops. */
static int wait_for_room(rec_ring *q, uint64_t pos, uint64_t *since, uint32_t *room0) {
    if (ring_consumer || atomic_load_explicit(&q->no_wait, memory_order_acquire)) return -1;
    uint64_t now = ring_now_ns();
    uint32_t room = atomic_load_explicit(&q->room_word, memory_order_acquire);
    if (!*since || room != *room0) *since = now, *room0 = room; /* progress: the clock restarts */
    else if (now - *since >= q->stall_ns) {
        atomic_fetch_or_explicit(&q->no_wait, REC_RING_STALLED, memory_order_release);
        return -1;
    }
    /* waiters before the last look at the slot, the consumer's pop before its look at waiters
     * (both seq_cst): a pop this producer does not see is a pop that sees this waiter */
    atomic_fetch_add(&q->waiters, 1);
    rec_ring_wake(q);
    uint64_t turn = atomic_load(&q->slots[pos & q->mask].turn);
    if ((int64_t)(turn - pos) < 0) futex_wait(&q->room_word, room, 1000000);
    atomic_fetch_sub(&q->waiters, 1);
    return 0;
}

/* r was dropped: counted, and apart where it is a record of aux_kind */
static void count_drop(rec_ring *q, const rec_rec *r) {
    if (q->aux_kind && r->kind == q->aux_kind) atomic_fetch_add_explicit(&q->dropped_aux, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&q->dropped, 1, memory_order_relaxed);
}

uint64_t rec_ring_push(rec_ring *q, const rec_rec *r) {
    uint64_t deadline = 0, since = 0;
    uint32_t room0 = 0;
    for (;;) {
        uint64_t pos;
        rec_slot *s = rec_ring_claim(q, &pos);
        if (s) {
            s->r = *r;
            return rec_ring_publish(q, s, pos);
        }
        /* Full at pos: the writer is behind by a whole ring. Lossless: wait for room. */
        if (q->wait_ns == REC_RING_WAIT_FOREVER) {
            if (wait_for_room(q, pos, &since, &room0) != 0) {
                count_drop(q, r);
                return 0;
            }
            continue;
        }
        /* Bounded: wait a little, once. */
        if (atomic_load_explicit(&q->dropping, memory_order_relaxed)) {
            count_drop(q, r);
            return 0;
        }
        uint64_t now = ring_now_ns();
        if (deadline == 0) deadline = now + q->wait_ns;
        else if (now >= deadline) {
            atomic_store_explicit(&q->dropping, 1, memory_order_relaxed);
            count_drop(q, r);
            return 0;
        }
        rec_ring_wake(q);
        sched_yield();
    }
}

uint64_t rec_ring_push_n(rec_ring *q, const rec_rec *r, size_t n) {
    if (n == 0) return 0;
    if (n <= (q->mask + 1) / 4) {
        uint64_t pos = atomic_load_explicit(&q->head, memory_order_relaxed);
        for (int tries = 0; tries < 4; tries++) {
            /* The consumer frees slots in order, so when the last of the n is free for this lap
             * (its turn is its position), the ones before it are free too (the acquire orders
             * their frees before this load). */
            rec_slot *last = &q->slots[(pos + n - 1) & q->mask];
            if (atomic_load_explicit(&last->turn, memory_order_acquire) != pos + n - 1) break;
            if (atomic_compare_exchange_weak_explicit(&q->head, &pos, pos + n, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                for (size_t i = 0; i < n; i++) {
                    __builtin_prefetch(&q->slots[(pos + i + REC_RING_AHEAD) & q->mask], 1);
                    rec_slot *s = &q->slots[(pos + i) & q->mask];
                    s->r = r[i];
                    atomic_store_explicit(&s->turn, pos + i + 1, memory_order_release);
                }
                /* the consumer is woken as often as by single pushes: each time a claim
                 * passes a multiple of wake_mask + 1 */
                if ((pos & q->wake_mask) + n > q->wake_mask) rec_ring_wake(q);
                return pos + n;
            }
            /* lost the race: pos was reloaded by the CAS */
        }
    }
    uint64_t seq = 0;
    for (size_t i = 0; i < n; i++) seq = rec_ring_push(q, &r[i]);
    return seq;
}

uint64_t rec_ring_pop(rec_ring *q, rec_rec *out) {
    uint64_t pos = q->tail;
    rec_slot *s = &q->slots[pos & q->mask];
    uint64_t turn = atomic_load_explicit(&s->turn, memory_order_acquire);
    if (turn != pos + 1) return 0;
    *out = s->r;
    atomic_store(&s->turn, pos + q->mask + 1); /* seq_cst: before the look at waiters */
    q->tail = pos + 1;
    /* producers waiting for room: wake them each quarter of the ring (and after each drain,
     * rec_ring_room), not at every pop (a system call each) */
    if (((pos + 1) & q->wake_mask) == 0 && atomic_load(&q->waiters)) {
        atomic_fetch_add_explicit(&q->room_word, 1, memory_order_release);
        syscall(SYS_futex, &q->room_word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
    }
    /* drop mode ends once a quarter of the ring is free again */
    if (atomic_load_explicit(&q->dropping, memory_order_relaxed) &&
        atomic_load_explicit(&q->head, memory_order_relaxed) - q->tail <= q->mask + 1 - (q->mask + 1) / 4)
        atomic_store_explicit(&q->dropping, 0, memory_order_relaxed);
    return pos + 1;
}

void rec_ring_room(rec_ring *q) {
    if (!atomic_load(&q->waiters)) return;
    atomic_fetch_add_explicit(&q->room_word, 1, memory_order_release);
    syscall(SYS_futex, &q->room_word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

void rec_ring_wake(rec_ring *q) {
    atomic_fetch_add_explicit(&q->wake_word, 1, memory_order_release);
    syscall(SYS_futex, &q->wake_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

void rec_ring_wait(rec_ring *q, uint64_t timeout_ns) {
    uint32_t w = atomic_load_explicit(&q->wake_word, memory_order_acquire);
    struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
    syscall(SYS_futex, &q->wake_word, FUTEX_WAIT_PRIVATE, w, &ts, NULL, 0);
}
