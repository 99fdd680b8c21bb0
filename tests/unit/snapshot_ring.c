/* snapshot_ring.c — the recorder's lock-free MPSC ring (snapshot/record/rec_ring.c).
 * Properties: FIFO with gap-free seq numbers from 1; by default (lossless) a full ring makes
 * the producer wait until the consumer makes room, and gives up only when waiting cannot end
 * (no consumer, a fork being prepared, the consumer itself pushing, no progress for stall_ns);
 * in the opt-in bounded mode a full ring drops (and counts) instead of blocking past its wait
 * budget; with many producers and one consumer every record arrives exactly once and each
 * producer's records arrive in the order it pushed them, with no retry in lossless mode. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot/record/rec_ring.h"

static void fifo_and_seq(void **state) {
    (void)state;
    rec_ring q;
    assert_int_equal(rec_ring_init(&q, 8, 1000), 0);
    rec_rec r = {0}, out;
    for (int round = 0; round < 5; round++) { /* wraps the ring several times */
        for (uint64_t i = 0; i < 8; i++) {
            r.addr = round * 100 + i;
            assert_int_equal(rec_ring_push(&q, &r), round * 8 + i + 1);
        }
        for (uint64_t i = 0; i < 8; i++) {
            assert_int_equal(rec_ring_pop(&q, &out), round * 8 + i + 1);
            assert_int_equal(out.addr, round * 100 + i);
        }
        assert_int_equal(rec_ring_pop(&q, &out), 0);
    }
    rec_ring_free(&q);
}

static void full_ring_drops_and_counts(void **state) {
    (void)state;
    rec_ring q;
    assert_int_equal(rec_ring_init(&q, 4, 100000 /* 0.1 ms */), 0);
    rec_rec r = {0}, out;
    for (int i = 0; i < 4; i++) assert_int_not_equal(rec_ring_push(&q, &r), 0);
    assert_int_equal(rec_ring_push(&q, &r), 0);
    assert_int_equal(rec_ring_push(&q, &r), 0);
    assert_int_equal(atomic_load(&q.dropped), 2);
    /* after the consumer makes room, pushing works again and seq continues without gaps */
    assert_int_equal(rec_ring_pop(&q, &out), 1);
    assert_int_equal(rec_ring_push(&q, &r), 5);
    rec_ring_free(&q);
}

/* Bounded back-pressure: the first producer to find the ring full waits (wait_ns), the ones
 * after it drop at once while it stays full, and waiting resumes once a quarter is free. */
static void drop_mode_waits_once(void **state) {
    (void)state;
    rec_ring q;
    const uint64_t wait = 100000000; /* 100 ms: unmistakable against a drop without waiting, and
                                        longer than a loaded machine keeps a thread off a core */
    assert_int_equal(rec_ring_init(&q, 8, wait), 0);
    rec_rec r = {0}, out;
    for (int i = 0; i < 8; i++) assert_int_not_equal(rec_ring_push(&q, &r), 0);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    assert_int_equal(rec_ring_push(&q, &r), 0); /* waits its 100 ms, then drops */
    clock_gettime(CLOCK_MONOTONIC, &b);
    double first = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    assert_true(first >= (double)wait);
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < 100; i++) assert_int_equal(rec_ring_push(&q, &r), 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double rest = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    assert_true(rest < (double)wait); /* 100 drops in less than one wait: none of them waited */
    assert_int_equal(atomic_load(&q.dropped), 101);
    /* one pop: room for one, but drop mode holds until a quarter (2 of 8) is free */
    assert_int_not_equal(rec_ring_pop(&q, &out), 0);
    assert_int_equal(atomic_load(&q.dropping), 1);
    assert_int_not_equal(rec_ring_push(&q, &r), 0); /* there is room: pushed */
    assert_int_not_equal(rec_ring_pop(&q, &out), 0);
    assert_int_not_equal(rec_ring_pop(&q, &out), 0);
    assert_int_equal(atomic_load(&q.dropping), 0);
    rec_ring_free(&q);
}

static void capacity_rounds_up(void **state) {
    (void)state;
    rec_ring q;
    assert_int_equal(rec_ring_init(&q, 5, 1000), 0);
    assert_int_equal(q.mask + 1, 8);
    rec_ring_free(&q);
}

#define PRODUCERS 4
#define PER_PRODUCER 50000

typedef struct prod_arg { rec_ring *q; uint32_t id; } prod_arg;

static void *producer(void *p) {
    prod_arg *a = p;
    rec_rec r = {0};
    r.thread = a->id;
    for (uint64_t i = 1; i <= PER_PRODUCER; i++) {
        r.addr = i;
        while (rec_ring_push(a->q, &r) == 0) {} /* dropped: the test wants them all, retry */
    }
    return NULL;
}

static void many_producers_one_consumer(void **state) {
    (void)state;
    rec_ring q;
    assert_int_equal(rec_ring_init(&q, 1024, 1000000), 0);
    pthread_t t[PRODUCERS];
    prod_arg args[PRODUCERS];
    for (uint32_t i = 0; i < PRODUCERS; i++) {
        args[i] = (prod_arg){&q, i};
        assert_int_equal(pthread_create(&t[i], NULL, producer, &args[i]), 0);
    }
    uint64_t next[PRODUCERS] = {0}, got = 0, last_seq = 0;
    rec_rec out;
    while (got < (uint64_t)PRODUCERS * PER_PRODUCER) {
        uint64_t seq = rec_ring_pop(&q, &out);
        if (!seq) continue;
        assert_true(seq > last_seq); /* seq increases in pop order */
        last_seq = seq;
        assert_true(out.thread < PRODUCERS);
        assert_int_equal(out.addr, next[out.thread] + 1); /* per-producer order, no loss, no dup */
        next[out.thread] = out.addr;
        got++;
    }
    for (int i = 0; i < PRODUCERS; i++) pthread_join(t[i], NULL);
    assert_int_equal(rec_ring_pop(&q, &out), 0);
    rec_ring_free(&q);
}

/* ---- lossless (the recorder's default) */

typedef struct pusher { rec_ring *q; int n; _Atomic int done; uint64_t last; } pusher;
static void *push_n(void *p) {
    pusher *a = p;
    rec_rec r = {0};
    for (int i = 0; i < a->n; i++) {
        r.addr = 1000 + (uint64_t)i;
        a->last = rec_ring_push(a->q, &r);
    }
    atomic_store(&a->done, 1);
    return NULL;
}
static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* A full ring holds the producer until the consumer pops: nothing is dropped, seq has no gap. */
static void lossless_waits_for_room(void **state) {
    (void)state;
    rec_ring q;
    assert_int_equal(rec_ring_init(&q, 8, REC_RING_WAIT_FOREVER), 0);
    atomic_store(&q.no_wait, 0); /* a consumer is there (this thread) */
    rec_rec r = {0}, out;
    for (int i = 0; i < 8; i++) assert_int_not_equal(rec_ring_push(&q, &r), 0);
    pusher a = {&q, 100, 0, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, push_n, &a), 0);
    sleep_ms(30);
    assert_int_equal(atomic_load(&a.done), 0); /* still waiting: the ring is full */
    uint64_t seq, expect = 1, n = 0;
    while (n < 108) {
        if (!(seq = rec_ring_pop(&q, &out))) continue;
        assert_int_equal(seq, expect++);
        if (n >= 8) assert_int_equal(out.addr, 1000 + n - 8);
        n++;
    }
    pthread_join(t, NULL);
    assert_int_equal(a.last, 108);
    assert_int_equal(atomic_load(&q.dropped), 0);
    rec_ring_free(&q);
}

/* Waiting that cannot end drops at once (counted): no consumer, a fork being prepared, the
 * consumer's own thread; and a consumer that makes no room for stall_ns. */
static void *consumer_pushes(void *p) {
    rec_ring *q = p;
    rec_ring_consumer_thread();
    rec_rec r = {0};
    return (void *)(uintptr_t)rec_ring_push(q, &r);
}
static void lossless_gives_up(void **state) {
    (void)state;
    rec_ring q;
    assert_int_equal(rec_ring_init(&q, 4, REC_RING_WAIT_FOREVER), 0);
    rec_rec r = {0};
    for (int i = 0; i < 4; i++) assert_int_not_equal(rec_ring_push(&q, &r), 0);
    assert_int_equal(rec_ring_push(&q, &r), 0); /* a new ring: no consumer yet */
    atomic_store(&q.no_wait, REC_RING_FORKING);
    assert_int_equal(rec_ring_push(&q, &r), 0);
    atomic_store(&q.no_wait, 0);
    pthread_t t;
    void *ret;
    assert_int_equal(pthread_create(&t, NULL, consumer_pushes, &q), 0);
    pthread_join(t, &ret);
    assert_int_equal((uintptr_t)ret, 0);
    q.stall_ns = 50000000; /* 50 ms */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    assert_int_equal(rec_ring_push(&q, &r), 0); /* waits 50 ms for a consumer that never pops */
    clock_gettime(CLOCK_MONOTONIC, &b);
    double waited = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    assert_true(waited >= 50e6);
    assert_true(atomic_load(&q.no_wait) & REC_RING_STALLED);
    assert_int_equal(rec_ring_push(&q, &r), 0); /* stalled: at once */
    assert_int_equal(atomic_load(&q.dropped), 5);
    rec_ring_free(&q);
}

static void *producer_lossless(void *p) {
    prod_arg *a = p;
    rec_rec r = {0};
    r.thread = a->id;
    for (uint64_t i = 1; i <= PER_PRODUCER; i++) {
        r.addr = i;
        if (rec_ring_push(a->q, &r) == 0) abort(); /* lossless: never dropped */
    }
    return NULL;
}

/* Many producers on a small lossless ring, one consumer: all arrive, in order, none retried. */
static void many_producers_lossless(void **state) {
    (void)state;
    rec_ring q;
    assert_int_equal(rec_ring_init(&q, 64, REC_RING_WAIT_FOREVER), 0);
    atomic_store(&q.no_wait, 0);
    pthread_t t[PRODUCERS];
    prod_arg args[PRODUCERS];
    for (uint32_t i = 0; i < PRODUCERS; i++) {
        args[i] = (prod_arg){&q, i};
        assert_int_equal(pthread_create(&t[i], NULL, producer_lossless, &args[i]), 0);
    }
    uint64_t next[PRODUCERS] = {0}, got = 0, last_seq = 0;
    rec_rec out;
    while (got < (uint64_t)PRODUCERS * PER_PRODUCER) {
        uint64_t seq = rec_ring_pop(&q, &out);
        if (!seq) {
            rec_ring_room(&q); /* drained: as the writer does after each drain */
            continue;
        }
        assert_int_equal(seq, last_seq + 1); /* gap-free: nothing dropped */
        last_seq = seq;
        assert_int_equal(out.addr, next[out.thread] + 1);
        next[out.thread] = out.addr;
        got++;
    }
    for (int i = 0; i < PRODUCERS; i++) pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&q.dropped), 0);
    rec_ring_free(&q);
}

/* rec_ring_push_n: batches of 1..7 records from many producers on a small lossless ring (64
 * slots: a batch of up to 16 takes one claim when there is room, and goes one by one when there
 * is not). Every record arrives once, gap-free, each producer's in its order; a batch that took
 * one claim arrives unbroken (its records carry the batch's first number in `size`). */
static void *producer_batches(void *p) {
    prod_arg *a = p;
    rec_rec rs[7];
    uint64_t i = 1;
    for (int b = 0; i <= PER_PRODUCER; b++) {
        size_t n = 1 + (size_t)(b % 7);
        if (n > PER_PRODUCER - i + 1) n = PER_PRODUCER - i + 1;
        for (size_t j = 0; j < n; j++) {
            memset(&rs[j], 0, sizeof rs[j]);
            rs[j].thread = a->id;
            rs[j].addr = i + j;
            rs[j].size = i;              /* the batch's first record */
            rs[j].requested = n;         /* the batch's length */
        }
        uint64_t seq = rec_ring_push_n(a->q, rs, n);
        if (seq == 0) abort(); /* lossless: never dropped */
        i += n;
    }
    return NULL;
}

static void many_producers_batches(void **state) {
    (void)state;
    rec_ring q;
    assert_int_equal(rec_ring_init(&q, 64, REC_RING_WAIT_FOREVER), 0);
    atomic_store(&q.no_wait, 0);
    pthread_t t[PRODUCERS];
    prod_arg args[PRODUCERS];
    for (uint32_t i = 0; i < PRODUCERS; i++) {
        args[i] = (prod_arg){&q, i};
        assert_int_equal(pthread_create(&t[i], NULL, producer_batches, &args[i]), 0);
    }
    uint64_t next[PRODUCERS] = {0}, got = 0, last_seq = 0, whole = 0, batches = 0;
    rec_rec out, first = {0};
    uint64_t run = 0; /* records of the current batch seen back to back */
    while (got < (uint64_t)PRODUCERS * PER_PRODUCER) {
        uint64_t seq = rec_ring_pop(&q, &out);
        if (!seq) {
            rec_ring_room(&q);
            continue;
        }
        assert_int_equal(seq, last_seq + 1);
        last_seq = seq;
        assert_int_equal(out.addr, next[out.thread] + 1);
        next[out.thread] = out.addr;
        got++;
        if (out.addr == out.size) { /* a batch begins */
            first = out;
            run = 1;
            batches++;
        } else if (run && out.thread == first.thread && out.size == first.size) {
            run++;
        } else {
            run = 0; /* another producer's record came in between: a batch pushed one by one */
        }
        if (run == out.requested) whole++;
    }
    for (int i = 0; i < PRODUCERS; i++) pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&q.dropped), 0);
    assert_true(whole > 0 && whole <= batches);
    rec_ring_free(&q);
}

/* One producer, nothing else in between: each batch is one claim, its records consecutive and
 * the returned number the last one's; a batch larger than a quarter of the ring goes one by one
 * (and still arrives whole, in order). */
static void push_n_one_claim(void **state) {
    (void)state;
    rec_ring q;
    assert_int_equal(rec_ring_init(&q, 16, 1000), 0);
    rec_rec rs[8], out;
    memset(rs, 0, sizeof rs);
    for (int i = 0; i < 8; i++) rs[i].addr = 10 + (uint64_t)i;
    assert_int_equal(rec_ring_push_n(&q, rs, 3), 3);
    assert_int_equal(rec_ring_push_n(&q, rs, 4), 7);
    assert_int_equal(rec_ring_push_n(&q, rs, 8), 15); /* > 16 / 4: one by one */
    assert_int_equal(rec_ring_push_n(&q, rs, 0), 0);
    const uint64_t want[] = {10, 11, 12, 10, 11, 12, 13, 10, 11, 12, 13, 14, 15, 16, 17};
    for (uint64_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_int_equal(rec_ring_pop(&q, &out), i + 1);
        assert_int_equal(out.addr, want[i]);
    }
    assert_int_equal(rec_ring_pop(&q, &out), 0);
    /* wraps: a claim across the ring's end */
    assert_int_equal(rec_ring_push_n(&q, rs, 4), 19);
    for (uint64_t i = 0; i < 4; i++) {
        assert_int_equal(rec_ring_pop(&q, &out), 16 + i);
        assert_int_equal(out.addr, 10 + i);
    }
    rec_ring_free(&q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fifo_and_seq),
        cmocka_unit_test(full_ring_drops_and_counts),
        cmocka_unit_test(drop_mode_waits_once),
        cmocka_unit_test(capacity_rounds_up),
        cmocka_unit_test(many_producers_one_consumer),
        cmocka_unit_test(lossless_waits_for_room),
        cmocka_unit_test(lossless_gives_up),
        cmocka_unit_test(many_producers_lossless),
        cmocka_unit_test(push_n_one_claim),
        cmocka_unit_test(many_producers_batches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
