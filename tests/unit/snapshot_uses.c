/* snapshot_uses.c — access tracking in the recorder (rec_launch, rec_string, the timing
 * resolver; schema 1.2 tables `launches` and `uses`), checked by reading the database. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "snapshot/record/rec.h"
#include "snapshot/record/rec_internal.h"
#include "tests/unit/snapshot_test.h"

static char path[512];

static int open_ring(uint32_t ring) {
    static int n;
    char name[64];
    snprintf(name, sizeof name, "uses%d.db", n++);
    snap_path(path, sizeof path, name);
    unlink(path);
    rec_options o = {.path = path, .stacks = 0, .fork_record = 0, .ring = ring, .quiet = 1};
    return rec_open(&o);
}
static int setup(void **state) {
    (void)state;
    return open_ring(4096);
}
static int setup_big(void **state) {
    (void)state;
    return open_ring(1u << 18);
}
static int setup_tiny(void **state) {
    (void)state;
    int rc = open_ring(8);
    rec_g.ring.wait_ns = 0; /* a full ring drops at once: drops are certain, not just likely */
    return rc;
}
static int teardown(void **state) {
    (void)state;
    rec_test_reset();
    return 0;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static uint64_t launch(uint32_t name, unsigned op, uint64_t bytes, const uint64_t *w,
                       const uint8_t *acc, size_t n, void *timing) {
    rec_launch_info li = {.device = 0, .stream = 0x77, .func = op == REC_OP_KERNEL ? 0xF00D : 0,
                          .name = name, .op = op, .bytes = bytes, .words = w, .access = acc,
                          .nwords = n, .timing = timing};
    return rec_launch(&li);
}

/* uses of allocation `birth` by launch `seq`: the access flags, or -1 when there is no row */
static long long use_of(uint64_t birth, uint64_t seq) {
    char q[256];
    snprintf(q, sizeof q,
             "SELECT coalesce((SELECT access FROM uses WHERE birth=%llu AND seq=%llu), -1)",
             (unsigned long long)birth, (unsigned long long)seq);
    return snap_q(path, q);
}

static long long birth_at(uint64_t addr) {
    char q[256];
    snprintf(q, sizeof q, "SELECT max(seq) FROM events WHERE kind IN (1,3,5,7) AND addr=%llu",
             (unsigned long long)addr);
    return snap_q(path, q);
}

/* An interior pointer, an exact start and the last byte count; one past the end, a freed
 * allocation, memory the program never allocated and 0 do not; several words into one
 * allocation give one row; pinned host memory counts. The launch is an event of kind 20 with
 * func, bytes, the thread's NVTX range and no stack, and a `launches` row. */
static void words_resolve_to_live_allocations(void **state) {
    (void)state;
    const uint64_t A = 0x7f0000100000, B = 0x7f0000200000, C = 0x7f0000300000,
                   D = 0x7f0000400000, H = 0x7e0000000000;
    rec_event(REC_ALLOC, 0, 0, A, 8192, 8000, 1);
    rec_event(REC_ALLOC_ASYNC, 0, 0x77, B, 512, 512, 2);
    rec_event(REC_ALLOC, 0, 0, C, 4096, 4096, 3);
    rec_event(REC_ALLOC, 0, 0, D, 1024, 1024, 4);
    rec_event(REC_FREE, 0, 0, D, 0, 0, 4);
    rec_event(REC_HOST_ALLOC, -1, 0, H, 65536, 65536, 5);
    rec_name(A, "h3.mlp.fc");
    uint32_t k1 = rec_string("gemm_kernel"), k2 = rec_string("gelu_kernel");
    assert_true(k1 > 0 && k2 > 0 && k1 != k2);
    assert_int_equal(rec_string("gemm_kernel"), k1); /* interned: one id per string */
    rec_range_push(NULL, "step 0");
    rec_range_push(NULL, "fwd");
    const uint64_t w1[] = {A + 100, B, C + 4095, C + 4096, D + 8, 0x5555deadbeef, 0, A, A + 8191,
                           H + 16};
    uint64_t s1 = launch(k1, REC_OP_KERNEL, 0, w1, NULL, 10, NULL);
    const uint64_t w2[] = {A + 4096};
    uint64_t s2 = launch(k2, REC_OP_KERNEL, 0, w2, NULL, 1, NULL);
    uint64_t s3 = launch(k2, REC_OP_KERNEL, 0, NULL, NULL, 0, NULL); /* no arguments */
    rec_range_pop();
    rec_range_pop();
    rec_event(REC_FREE, 0, 0, A, 0, 0, 1);
    uint64_t s4 = launch(k1, REC_OP_KERNEL, 0, w2, NULL, 1, NULL); /* A is gone */
    rec_event(REC_LAUNCH, 0, 0, 0xF00D, 0, 0, 0); /* not through rec_event: ignored */
    assert_true(s1 && s2 > s1 && s3 > s2 && s4 > s3);
    rec_close();

    long long a = birth_at(A), b = birth_at(B), c = birth_at(C), h = birth_at(H);
    assert_int_equal(use_of(a, s1), 0); /* kernel arguments: access unknown */
    assert_int_equal(use_of(b, s1), 0);
    assert_int_equal(use_of(c, s1), 0);
    assert_int_equal(use_of(h, s1), 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM uses"), 5); /* those four and A by s2 */
    assert_int_equal(use_of(a, s2), 0);
    char q[512];
    snprintf(q, sizeof q, "SELECT count(*) FROM uses WHERE seq IN (%llu, %llu)",
             (unsigned long long)s3, (unsigned long long)s4);
    assert_int_equal(snap_q(path, q), 0);
    snprintf(q, sizeof q, "SELECT count(*) FROM uses WHERE seq=%llu AND kernel=%u",
             (unsigned long long)s1, k1);
    assert_int_equal(snap_q(path, q), 4);
    /* the launch events */
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE kind=20"), 4);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE kind=20 AND stack IS NULL "
                                  "AND addr=61453 AND requested=0 AND alloc_id=0"), 4);
    snprintf(q, sizeof q, "SELECT count(*) FROM events e JOIN ranges r ON r.id=e.range "
                          "WHERE e.seq IN (%llu,%llu,%llu) AND r.path='step 0/fwd'",
             (unsigned long long)s1, (unsigned long long)s2, (unsigned long long)s3);
    assert_int_equal(snap_q(path, q), 3);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM launches l JOIN events e ON e.seq=l.seq "
                                  "WHERE e.kind=20 AND l.op=0 AND l.start_ns IS NULL"), 4);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events e JOIN streams s ON s.id=e.stream "
                                  "WHERE e.kind=20 AND s.handle=119"), 4);
    /* the README's query */
    char k[64];
    snap_q_text(path, "SELECT group_concat(s, ',') FROM (SELECT DISTINCT s.s FROM uses u "
                      "JOIN alloc_life l ON l.birth=u.birth JOIN strings n ON n.id=l.name "
                      "JOIN strings s ON s.id=u.kernel WHERE n.s='h3.mlp.fc' ORDER BY s.s)",
                k, sizeof k);
    assert_string_equal(k, "gelu_kernel,gemm_kernel");
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='launches'"), 4);
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='launch_words_lost'"), 0);
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='schema_minor'"), 4); /* 1.2 tables, in a 1.4 file */
}

/* A kernel whose arguments could not be read (no layout from the driver) is a launch with
 * unknown uses: counted in meta.launches_unread, its op kept (the flag is not part of it), no
 * uses rows; readable launches around it are not counted. */
static void unread_launches_counted(void **state) {
    (void)state;
    const uint64_t A = 0x7f0000100000;
    rec_event(REC_ALLOC, 0, 0, A, 1 << 20, 1 << 20, 1);
    uint32_t k = rec_string("opaque_kernel"), ms = rec_string("memset");
    rec_launch_info li = {.device = 0, .stream = 0x77, .func = 0xF00D, .name = k, .op = REC_OP_KERNEL,
                          .unread = 1};
    uint64_t s1 = rec_launch(&li), s2 = rec_launch(&li);
    const uint64_t w[] = {A};
    const uint8_t acc[] = {REC_ACC_WRITE};
    uint64_t s3 = launch(ms, REC_OP_MEMSET, 64, w, acc, 1, NULL);
    uint64_t s4 = launch(k, REC_OP_KERNEL, 0, w, NULL, 1, NULL);
    assert_true(s1 && s2 > s1 && s3 > s2 && s4 > s3);
    rec_close();
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='launches'"), 4);
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='launches_unread'"), 2);
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='launch_words_lost'"), 0);
    char q[256];
    snprintf(q, sizeof q, "SELECT count(*) FROM uses WHERE seq IN (%llu, %llu)", (unsigned long long)s1,
             (unsigned long long)s2);
    assert_int_equal(snap_q(path, q), 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM uses"), 2); /* the memset and s4 */
    snprintf(q, sizeof q, "SELECT count(*) FROM launches WHERE seq IN (%llu, %llu) AND op=0",
             (unsigned long long)s1, (unsigned long long)s2);
    assert_int_equal(snap_q(path, q), 2);
    snprintf(q, sizeof q, "SELECT op FROM launches WHERE seq=%llu", (unsigned long long)s3);
    assert_int_equal(snap_q(path, q), REC_OP_MEMSET);
}

/* Copies and memsets carry their direction; flags of words hitting one allocation are OR-ed
 * (a copy inside one buffer reads and writes it). */
static void copies_carry_access(void **state) {
    (void)state;
    const uint64_t A = 0x7f0000100000, H = 0x7e0000000000;
    rec_event(REC_ALLOC, 0, 0, A, 1 << 20, 1 << 20, 1);
    rec_event(REC_HOST_ALLOC, -1, 0, H, 1 << 20, 1 << 20, 2);
    uint32_t htod = rec_string("memcpy HtoD"), dtod = rec_string("memcpy DtoD"),
             ms = rec_string("memset");
    const uint64_t w1[] = {A + 64, H};
    const uint8_t a1[] = {REC_ACC_WRITE, REC_ACC_READ};
    uint64_t s1 = launch(htod, REC_OP_COPY, 4096, w1, a1, 2, NULL);
    const uint64_t w2[] = {A + 8192, A};
    uint64_t s2 = launch(dtod, REC_OP_COPY, 4096, w2, a1, 2, NULL);
    const uint64_t w3[] = {A};
    const uint8_t a3[] = {REC_ACC_WRITE};
    uint64_t s3 = launch(ms, REC_OP_MEMSET, 1 << 20, w3, a3, 1, NULL);
    rec_close();
    long long a = birth_at(A), h = birth_at(H);
    assert_int_equal(use_of(a, s1), REC_ACC_WRITE);
    assert_int_equal(use_of(h, s1), REC_ACC_READ);
    assert_int_equal(use_of(a, s2), REC_ACC_READ | REC_ACC_WRITE);
    assert_int_equal(use_of(a, s3), REC_ACC_WRITE);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM uses"), 4);
    char q[256];
    snprintf(q, sizeof q, "SELECT count(*) FROM launches WHERE seq=%llu AND op=1 AND bytes=4096 "
                          "AND kernel=%u", (unsigned long long)s1, htod);
    assert_int_equal(snap_q(path, q), 1);
    snprintf(q, sizeof q, "SELECT count(*) FROM launches WHERE seq=%llu AND op=2 AND bytes=%d",
             (unsigned long long)s3, 1 << 20);
    assert_int_equal(snap_q(path, q), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE kind=20 AND size=4096"), 2);
}

/* A word list spanning many word records (23 words: 5 records) resolves completely, last
 * record included, with each word's own access flags. */
static void long_word_lists(void **state) {
    (void)state;
    enum { N = 23 };
    uint64_t w[N];
    uint8_t acc[N];
    for (int i = 0; i < N; i++) {
        uint64_t a = 0x7f0000000000 + (uint64_t)i * 0x100000;
        rec_event(REC_ALLOC, 0, 0, a, 4096, 4096, (uint64_t)i + 1);
        w[i] = a + (uint64_t)i * 8; /* interior */
        acc[i] = (uint8_t)(i % 3 + 1);
    }
    uint64_t s = launch(rec_string("big_kernel"), REC_OP_KERNEL, 0, w, acc, N, NULL);
    rec_close();
    char q[256];
    snprintf(q, sizeof q, "SELECT count(*) FROM uses WHERE seq=%llu", (unsigned long long)s);
    assert_int_equal(snap_q(path, q), N);
    /* the i-th allocation (requested = 4096, alloc_id = i + 1) has the i-th word's flags */
    snprintf(q, sizeof q, "SELECT count(*) FROM uses u JOIN events e ON e.seq=u.birth "
                          "WHERE u.seq=%llu AND u.access = (e.alloc_id - 1) %% 3 + 1",
             (unsigned long long)s);
    assert_int_equal(snap_q(path, q), N);
}

/* The word records' packing, as a table: a kernel's words (no access bytes) go six to a
 * record (the record's t carries the sixth), a copy's five (t carries their access bytes); a
 * launch is written in place with one claim of the ring, or built and pushed in batches when it
 * needs more than a quarter of the ring (6,200 words of a 4,096-slot ring). Every count around
 * the record boundaries resolves every word, each to its own allocation, with its own access
 * flags (0, unknown, for a kernel's). */
static void word_records_table(void **state) {
    (void)state;
    static const struct {
        size_t n;
        int acc; /* 1: access bytes given (a copy's), 0: none (a kernel's) */
    } cases[] = {{1, 0},  {5, 0},  {6, 0},  {7, 0},   {11, 0},  {12, 0},   {13, 0},   {36, 0},
                 {37, 0}, {1, 1},  {5, 1},  {6, 1},   {10, 1},  {11, 1},   {36, 1},   {6200, 0},
                 {6200, 1}};
    enum { NC = sizeof cases / sizeof cases[0] };
    uint64_t seq[NC], birth0[NC];
    uint64_t id = 0;
    static uint64_t w[6200];
    static uint8_t acc[6200];
    for (size_t c = 0; c < NC; c++) {
        birth0[c] = id + 1;
        for (size_t i = 0; i < cases[c].n; i++) {
            uint64_t a = 0x7e0000000000 + ++id * 0x10000;
            rec_event(REC_ALLOC, 0, 0, a, 4096, 4096, id);
            w[i] = a + (i % 7) * 8; /* interior */
            acc[i] = (uint8_t)(i % 3 + 1);
        }
        seq[c] = launch(rec_string(cases[c].acc ? "memcpy" : "packed_kernel"),
                        cases[c].acc ? REC_OP_COPY : REC_OP_KERNEL, 0, w, cases[c].acc ? acc : NULL,
                        cases[c].n, NULL);
        assert_true(seq[c] > 0);
        /* frees after the launch, so that the next case's addresses are its own */
        for (size_t i = 0; i < cases[c].n; i++)
            rec_event(REC_FREE, 0, 0, 0x7e0000000000 + (birth0[c] + i) * 0x10000, 4096, 0, birth0[c] + i);
    }
    rec_close();
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='launch_words_lost'"), 0);
    for (size_t c = 0; c < NC; c++) {
        char q[320];
        /* one row per word, each the allocation of the same index, with the word's flags */
        snprintf(q, sizeof q,
                 "SELECT count(*) FROM uses u JOIN events e ON e.seq=u.birth WHERE u.seq=%llu "
                 "AND e.alloc_id - %llu BETWEEN 0 AND %zu AND u.access = %s",
                 (unsigned long long)seq[c], (unsigned long long)birth0[c], cases[c].n - 1,
                 cases[c].acc ? "(e.alloc_id - " : "0");
        if (cases[c].acc) {
            size_t l = strlen(q);
            snprintf(q + l, sizeof q - l, "%llu) %% 3 + 1", (unsigned long long)birth0[c]);
        }
        int got = snap_q(path, q);
        if (got != (int)cases[c].n)
            fail_msg("%zu words (%s): %d of them resolved with their flags", cases[c].n,
                     cases[c].acc ? "access bytes" : "a kernel's", got);
        snprintf(q, sizeof q, "SELECT count(*) FROM uses WHERE seq=%llu", (unsigned long long)seq[c]);
        assert_int_equal(snap_q(path, q), (int)cases[c].n);
    }
}

/* ---- concurrency and drops: launch i of thread t passes K words into allocations
 * (i + j) % NA, j < K, of thread t's own NA allocations; allocation index in `requested`,
 * launch number in `bytes`, so SQL can check every use row against that rule. */
enum { NA = 40, K = 17, NL = 3000 };

typedef struct worker_arg {
    int t;
    int paced;        /* flush after each allocation (tiny rings: keep the allocations) */
    uint64_t nl;      /* launches */
    uint32_t kernel;
    uint64_t recorded; /* launches rec_launch accepted */
} worker_arg;

static pthread_barrier_t allocated, held; /* launchers and the main thread */
static atomic_uint_fast64_t launched; /* launches made by both threads, for the writer's hold */

static void *launcher(void *p) {
    worker_arg *a = p;
    uint64_t base = 0x7f0000000000 + (uint64_t)a->t * 0x1000000000ull;
    for (uint64_t i = 0; i < NA; i++) {
        rec_event(REC_ALLOC, 0, 0, base + i * 0x10000, 0x8000, i, 0);
        if (a->paced) rec_flush(); /* the ring never holds more than one record per thread */
    }
    pthread_barrier_wait(&allocated); /* launches (and their drops) start once all are in */
    pthread_barrier_wait(&held);      /* and once the main thread holds the writer, if it does */
    for (uint64_t i = 0; i < a->nl; i++) {
        uint64_t w[K];
        for (uint64_t j = 0; j < K; j++) w[j] = base + (i + j) % NA * 0x10000 + j * 8;
        if (launch(a->kernel, REC_OP_KERNEL, i, w, NULL, K, NULL)) a->recorded++;
        atomic_fetch_add(&launched, 1);
    }
    return NULL;
}

static const char *const bad_uses_sql =
    "SELECT count(*) FROM uses u JOIN events a ON a.seq=u.birth JOIN events l ON l.seq=u.seq "
    "WHERE ((a.requested - l.size) % 40 + 40) % 40 >= 17 OR a.thread != l.thread "
    "OR a.kind != 1 OR l.kind != 20";

/* paced: the allocations are flushed one by one (a tiny ring keeps them all), and the writer is
 * held (its db_lock, under which it drains) from after the allocations until half of the
 * launches are made, so that the ring certainly fills and drops; the second half drops as the
 * writer's pace decides. Without the hold, a writer as slow as its producers (ThreadSanitizer
 * slows both) kept a ring of 8 from ever filling, and the test failed in CI. */
static void run_launchers(int paced, uint64_t nl, worker_arg *args) {
    pthread_t th[2];
    atomic_store(&launched, 0);
    pthread_barrier_init(&allocated, NULL, 3);
    pthread_barrier_init(&held, NULL, 3);
    for (int t = 0; t < 2; t++) {
        char name[32];
        snprintf(name, sizeof name, "kernel_t%d", t);
        args[t] = (worker_arg){.t = t, .paced = paced, .nl = nl, .kernel = rec_string(name)};
    }
    for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, launcher, &args[t]);
    pthread_barrier_wait(&allocated);
    if (paced) pthread_mutex_lock(&rec_g.db_lock);
    pthread_barrier_wait(&held);
    if (paced) {
        while (atomic_load(&launched) < nl) sleep_ms(1);
        pthread_mutex_unlock(&rec_g.db_lock);
    }
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&allocated);
    pthread_barrier_destroy(&held);
    rec_close();
}

/* Two threads launching at once, many words each: exactly the right uses, none crossing from
 * one thread's launch to the other's allocations. */
static void concurrent_launches(void **state) {
    (void)state;
    worker_arg args[2];
    run_launchers(0, NL, args);
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='dropped_events'"), 0);
    assert_int_equal(args[0].recorded + args[1].recorded, 2 * NL);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM uses"), 2 * NL * K);
    assert_int_equal(snap_q(path, bad_uses_sql), 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM (SELECT seq FROM uses GROUP BY seq "
                                  "HAVING count(*) != 17)"), 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM uses u JOIN launches l ON l.seq=u.seq "
                                  "WHERE u.kernel != l.kernel"), 0);
}

/* A ring of 8 records drops plenty: a launch then has all its uses or none, never a wrong or a
 * partial set; every launch without uses is counted in meta.launch_words_lost. meta.dropped_events
 * counts events: the launches that were not recorded, exactly (only launches are made while it
 * drops), never their argument-word records, which meta.dropped_word_records counts apart (it
 * counted both as events). */
static void drops_never_misattach(void **state) {
    (void)state;
    worker_arg args[2];
    run_launchers(1, NL / 5, args); /* a ring of 8 is slow going: fewer suffice */
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE kind=1"), 2 * NA);
    long long dropped = snap_q(path, "SELECT value FROM meta WHERE key='dropped_events'");
    assert_true(dropped > 0); /* the test must really drop records to mean anything */
    assert_int_equal(dropped, 2 * (NL / 5) - (long long)(args[0].recorded + args[1].recorded));
    assert_true(snap_q(path, "SELECT value FROM meta WHERE key='dropped_word_records'") > 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM launches"), args[0].recorded + args[1].recorded);
    assert_int_equal(snap_q(path, bad_uses_sql), 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM (SELECT seq FROM uses GROUP BY seq "
                                  "HAVING count(*) != 17)"), 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM launches l WHERE NOT EXISTS "
                                  "(SELECT 1 FROM uses u WHERE u.seq=l.seq)"),
                     snap_q(path, "SELECT value FROM meta WHERE key='launch_words_lost'"));
}

/* ---- timing */

typedef struct tok {
    int ready_after;    /* answers 0 this many times, then ready */
    int result;         /* 1 or -1 when ready */
    uint64_t s, e;
    /* written by the writer thread, read by the test while it records: atomics */
    _Atomic int asks, finals, released;
    _Atomic int first_ask, resolved_at; /* order of the calls (global counter) */
} tok;
static _Atomic int calls;
static _Atomic int closing, finals_before_close;

static int resolver(void *token, int final, uint64_t *s, uint64_t *e) {
    tok *t = token;
    int n = atomic_fetch_add(&calls, 1) + 1;
    if (!t->asks) t->first_ask = n;
    t->asks++;
    if (final) {
        t->finals++;
        if (!atomic_load(&closing)) atomic_fetch_add(&finals_before_close, 1);
    }
    if (!final && t->asks <= t->ready_after) return 0;
    t->released++;
    t->resolved_at = n;
    if (t->result == 1) *s = t->s, *e = t->e;
    return t->result;
}

static long long time_of(uint64_t seq, const char *col) {
    char q[256];
    snprintf(q, sizeof q, "SELECT coalesce((SELECT %s FROM launches WHERE seq=%llu), -1)", col,
             (unsigned long long)seq);
    return snap_q(path, q);
}

/* Launches are timed in order, without blocking: one that is not finished holds back the ones
 * after it and is asked again later; -1 leaves it untimed; what is left at close gets
 * final = 1; every token is handed back exactly once; untimed launches are never asked. */
static void timing_resolver(void **state) {
    (void)state;
    atomic_store(&calls, 0);
    atomic_store(&closing, 0);
    rec_set_timing_resolver(resolver);
    uint32_t k = rec_string("k");
    tok t1 = {.ready_after = 3, .result = 1, .s = 100, .e = 200};
    tok t2 = {.ready_after = 0, .result = -1};
    tok t3 = {.ready_after = 1 << 30, .result = 1, .s = 300, .e = 400}; /* only at close */
    uint64_t s1 = launch(k, REC_OP_KERNEL, 0, NULL, NULL, 0, &t1);
    uint64_t s2 = launch(k, REC_OP_KERNEL, 0, NULL, NULL, 0, &t2);
    uint64_t s4 = launch(k, REC_OP_KERNEL, 0, NULL, NULL, 0, NULL);
    uint64_t s3 = launch(k, REC_OP_KERNEL, 0, NULL, NULL, 0, &t3);
    assert_true(s1 && s2 && s3 && s4);
    /* the writer asks after each round (every ~10 ms): t1 becomes ready and is written while
     * the recording goes on */
    for (int i = 0; i < 300 && time_of(s1, "start_ns") != 100; i++) {
        rec_flush();
        sleep_ms(10);
    }
    assert_int_equal(time_of(s1, "start_ns"), 100);
    assert_int_equal(time_of(s1, "end_ns"), 200);
    assert_int_equal(t1.finals, 0);
    assert_int_equal(t1.asks, 4);
    assert_true(t2.first_ask > t1.resolved_at); /* in order */
    assert_int_equal(t3.released, 0);
    assert_int_equal(time_of(s3, "start_ns"), -1);
    atomic_store(&closing, 1);
    rec_close();
    assert_int_equal(time_of(s3, "start_ns"), 300);
    assert_int_equal(time_of(s3, "end_ns"), 400);
    assert_int_equal(t3.finals, 1);
    assert_int_equal(time_of(s2, "start_ns"), -1);
    assert_int_equal(time_of(s4, "start_ns"), -1);
    assert_int_equal(t1.released, 1);
    assert_int_equal(t2.released, 1);
    assert_int_equal(t3.released, 1);
    assert_int_equal(atomic_load(&finals_before_close), 0);
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='launches_untimed'"), 1);
}

/* A resolver that never says "ready": the FIFO stays bounded (the oldest launches are asked
 * with final = 1 while recording goes on) and every token still comes back exactly once. */
static void timing_fifo_bounded(void **state) {
    (void)state;
    enum { N = 70000 };
    atomic_store(&calls, 0);
    atomic_store(&closing, 0);
    atomic_store(&finals_before_close, 0);
    rec_set_timing_resolver(resolver);
    tok *t = calloc(N, sizeof *t);
    assert_non_null(t);
    uint32_t k = rec_string("k");
    for (int i = 0; i < N; i++) {
        t[i] = (tok){.ready_after = 1 << 30, .result = 1, .s = (uint64_t)i, .e = (uint64_t)i + 1};
        if (!launch(k, REC_OP_KERNEL, 0, NULL, NULL, 0, &t[i])) t[i].released = 1; /* dropped: ours */
        if (i % 4096 == 0) rec_flush();
    }
    rec_flush();
    for (int i = 0; i < 100 && atomic_load(&finals_before_close) < N - 65536; i++) sleep_ms(10);
    assert_true(atomic_load(&finals_before_close) >= N - 65536);
    atomic_store(&closing, 1);
    rec_close();
    for (int i = 0; i < N; i++) assert_int_equal(t[i].released, 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM launches WHERE end_ns = start_ns + 1"),
                     snap_q(path, "SELECT count(*) FROM launches"));
    free(t);
}

/* rec_time_ns is the clock of events.t. */
static void time_ns_is_event_clock(void **state) {
    (void)state;
    uint64_t before = rec_time_ns();
    rec_event(REC_ALLOC, 0, 0, 0x1000, 512, 512, 1);
    uint64_t after = rec_time_ns();
    assert_true(after >= before);
    rec_close();
    long long t = snap_q(path, "SELECT t FROM events");
    assert_true(t >= (long long)before && t <= (long long)after);
    assert_int_equal(rec_time_ns(), 0);    /* closed */
    assert_int_equal(rec_string("x"), 0);  /* closed */
    assert_int_equal(launch(1, 0, 0, NULL, NULL, 0, NULL), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(words_resolve_to_live_allocations, setup, teardown),
        cmocka_unit_test_setup_teardown(copies_carry_access, setup, teardown),
        cmocka_unit_test_setup_teardown(unread_launches_counted, setup, teardown),
        cmocka_unit_test_setup_teardown(long_word_lists, setup, teardown),
        cmocka_unit_test_setup_teardown(word_records_table, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_launches, setup_big, teardown),
        cmocka_unit_test_setup_teardown(drops_never_misattach, setup_tiny, teardown),
        cmocka_unit_test_setup_teardown(timing_resolver, setup, teardown),
        cmocka_unit_test_setup_teardown(timing_fifo_bounded, setup_big, teardown),
        cmocka_unit_test_setup_teardown(time_ns_is_event_clock, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", snap_tmpdir());
    if (system(cmd) != 0) return 1;
    return rc;
}
