/* snapshot_ring.c — the recorder's lock-free MPSC ring (snapshot/record/rec_ring.c).
 * Properties: FIFO with gap-free seq numbers from 1; a full ring drops (and counts) instead of
 * blocking past its wait budget; with many producers and one consumer every record arrives
 * exactly once and each producer's records arrive in the order it pushed them. */
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
    const uint64_t wait = 20000000; /* 20 ms: unmistakable against a drop without waiting */
    assert_int_equal(rec_ring_init(&q, 8, wait), 0);
    rec_rec r = {0}, out;
    for (int i = 0; i < 8; i++) assert_int_not_equal(rec_ring_push(&q, &r), 0);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    assert_int_equal(rec_ring_push(&q, &r), 0); /* waits its 20 ms, then drops */
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fifo_and_seq),
        cmocka_unit_test(full_ring_drops_and_counts),
        cmocka_unit_test(drop_mode_waits_once),
        cmocka_unit_test(capacity_rounds_up),
        cmocka_unit_test(many_producers_one_consumer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
