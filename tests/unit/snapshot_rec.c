/* snapshot_rec.c — the recorder through its public API (snapshot/record/rec.h) with synthetic events,
 * checked by reading the database it writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <time.h>

#include "snapshot/record/rec.h"
#include "snapshot/record/rec_internal.h"
#include "tests/unit/snapshot_test.h"

static char path[512];

static int setup(void **state) {
    (void)state;
    static int n;
    char name[64];
    snprintf(name, sizeof name, "rec%d.db", n++);
    snap_path(path, sizeof path, name);
    unlink(path);
    rec_options o = {.path = path, .stacks = 0, .fork_record = 0, .ring = 4096, .quiet = 1};
    return rec_open(&o);
}

static int teardown(void **state) {
    (void)state;
    rec_test_reset();
    return 0;
}

/* The writer gives the columns that repeat through a batch of rows once per statement
 * (device, stream, thread, stack, range and an unbroken run of seq in events; name in
 * alloc_life): batches where they repeat, change midway or change on every row all read back
 * as recorded. Event i carries alloc_id i + 1; its device changes every 300 events, its
 * stream every row in the middle third; NVTX ranges open and close (gaps in seq) in places. */
static void repeating_columns_read_back(void **state) {
    (void)state;
    const int n = 3000;
    for (int i = 0; i < n; i++) {
        if (i < 600 && i % 50 == 0) rec_range_push(NULL, i % 100 ? "b" : "a");
        if (i == 1500) rec_range_push(NULL, "long");
        uint64_t stream = i < 1000 ? 0x5000 : i < 2000 ? 0x5000 + (uint64_t)(i % 3) : 0x6000;
        uint64_t addr = 0x100000 + (uint64_t)(i / 2) * 0x1000;
        rec_event(i % 2 ? REC_FREE : REC_ALLOC, (i / 300) % 2, stream, addr, 4096, i % 2 ? 0 : 4000,
                  (uint64_t)i + 1);
        if (i == 2200) rec_name(addr, "named");
        if (i < 600 && i % 50 == 49) rec_range_pop();
        if (i == 2499) rec_range_pop();
    }
    rec_close();
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events"), n);
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT seq) FROM events"), n);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events a JOIN events b ON b.alloc_id = "
                                  "a.alloc_id + 1 WHERE b.seq <= a.seq"), 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE device = ((alloc_id - 1) / 300) % 2"), n);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events e JOIN streams s ON s.id = e.stream "
                                  "AND s.device = e.device WHERE s.handle = CASE "
                                  "WHEN alloc_id <= 1000 THEN 20480 WHEN alloc_id <= 2000 "
                                  "THEN 20480 + (alloc_id - 1) % 3 ELSE 24576 END"), n);
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT thread) FROM events WHERE thread IS NOT NULL"), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE stack IS NULL"), n);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events e JOIN ranges r ON r.id = e.range "
                                  "WHERE r.name = (SELECT id FROM strings WHERE s = CASE "
                                  "WHEN alloc_id <= 600 THEN (CASE WHEN (alloc_id - 1) / 50 % 2 "
                                  "THEN 'b' ELSE 'a' END) ELSE 'long' END)"), 600 + 1000);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE range IS NULL"), n - 1600);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE typeof(range) = 'integer' "
                                  "AND alloc_id BETWEEN 601 AND 1500"), 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM alloc_life l JOIN events e ON e.seq = l.birth "
                                  "JOIN events f ON f.seq = l.death WHERE f.alloc_id = e.alloc_id + 1"), n / 2);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM alloc_life WHERE name IS NOT NULL"), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM alloc_life l JOIN events e ON e.seq = l.birth "
                                  "JOIN strings s ON s.id = l.name WHERE e.alloc_id = 2201 AND s.s = 'named'"), 1);
}

/* Every event arrives, frees pair with allocations into alloc_life, ranges nest and events
 * carry their thread's innermost range. */
static void events_ranges_lifetimes(void **state) {
    (void)state;
    for (int i = 0; i < 500; i++) {
        char step[32];
        snprintf(step, sizeof step, "step %d", i);
        assert_int_equal(rec_range_push(NULL, step), 1);
        assert_int_equal(rec_range_push("dom", "fwd"), 2);
        rec_event(REC_ALLOC | REC_F_CACHE_HIT, 0, 0, 0x1000 + i * 4096, 4096, 4000, i + 1);
        assert_int_equal(rec_range_pop(), 2);
        rec_event(REC_FREE, 0, 0, 0x1000 + i * 4096, 0, 0, i + 1);
        assert_int_equal(rec_range_pop(), 1);
    }
    assert_int_equal(rec_range_pop(), -1); /* nothing open */
    rec_close();
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events"), 1000);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE kind=1 AND flags=256"), 500);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM alloc_life WHERE death IS NOT NULL"), 500);
    /* a free recorded with size 0 gets the allocation's size */
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE kind=2 AND size=4096"), 500);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges WHERE kind=0"), 1000);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges c JOIN ranges p ON p.id=c.parent "
                                  "WHERE c.path = p.path || '/fwd'"), 500);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges WHERE end_ns IS NULL"), 0);
    /* allocations happen inside fwd, frees inside the step only */
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events e JOIN ranges r ON r.id=e.range "
                                  "WHERE e.kind=1 AND r.path LIKE 'step %/fwd'"), 500);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events e JOIN ranges r ON r.id=e.range "
                                  "WHERE e.kind=2 AND r.path NOT LIKE '%/%'"), 500);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM allocations WHERE phase LIKE 'step %/fwd' AND death_ns >= birth_ns"), 500);
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='schema_major'"), 1);
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='events'"), 1000);
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='dropped_events'"), 0);
    char st[32];
    snap_q_text(path, "SELECT value FROM meta WHERE key='state'", st, sizeof st);
    assert_string_equal(st, "closed");
    /* events are ordered by seq and time does not go backwards on one thread */
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events a JOIN events b ON b.seq = "
                                  "(SELECT min(seq) FROM events WHERE seq > a.seq) WHERE b.t < a.t"), 0);
}

/* rec_range_swap_sid records what rec_range_pop then rec_range_push_sid record: with nothing
 * open a push; else the innermost range closed (before the new one starts), the new one under
 * the same parent, events inside it carrying it; by id or by name. */
static void range_swap_is_pop_push(void **state) {
    (void)state;
    assert_int_equal(rec_range_swap_sid(0, "first"), 1); /* nothing open: a push */
    assert_int_equal(rec_range_push(NULL, "outer"), 2);
    assert_int_equal(rec_range_push(NULL, "a"), 3);
    uint32_t sid_b = rec_string("b");
    assert_true(sid_b > 0);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(rec_range_swap_sid(i % 2 ? 0 : sid_b, i % 2 ? "a" : "b"), 3);
        rec_event(REC_ALLOC, 0, 0, 0x1000 + i * 4096, 4096, 4096, i + 1);
    }
    assert_int_equal(rec_range_pop(), 3);
    assert_int_equal(rec_range_pop(), 2);
    assert_int_equal(rec_range_swap_sid(0, "last"), 1); /* "first" closed, "last" at the top */
    assert_int_equal(rec_range_pop(), 1);
    assert_int_equal(rec_range_pop(), -1);
    rec_close();
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges WHERE kind = 0 AND end_ns IS NOT NULL"), 104);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges WHERE parent IS NULL AND path IN ('first', 'last')"), 2);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges c JOIN ranges p ON p.id = c.parent JOIN strings s "
                                  "ON s.id = c.name WHERE p.path = 'first/outer' AND c.path = 'first/outer/' || s.s "
                                  "AND s.s IN ('a', 'b')"), 101);
    /* the outer's children one after the other: each ended before the next started */
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges x JOIN ranges y ON y.parent = x.parent AND y.id > x.id "
                                  "WHERE x.path LIKE 'first/outer/%' AND y.start_ns < x.end_ns"), 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges x JOIN ranges y ON y.path = 'last' "
                                  "WHERE x.path = 'first' AND y.start_ns < x.end_ns"), 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events e JOIN ranges r ON r.id = e.range JOIN strings s "
                                  "ON s.id = r.name WHERE s.s = CASE WHEN e.alloc_id % 2 THEN 'b' ELSE 'a' END"), 100);
}

/* Names attach to the live allocation; what is alive at close gets death NULL. */
static void names_and_alive_at_close(void **state) {
    (void)state;
    rec_event(REC_ALLOC, 0, 0, 0xA000, 1 << 20, 1 << 20, 1);
    rec_name(0xA000, "weights");
    rec_event(REC_ALLOC, 0, 0, 0xB000, 512, 100, 2);
    rec_event(REC_FREE, 0, 0, 0xB000, 512, 0, 2);
    rec_close();
    assert_int_equal(snap_q(path, "SELECT count(*) FROM alloc_life WHERE death IS NULL"), 1);
    char nm[64];
    snap_q_text(path, "SELECT name FROM allocations WHERE death_seq IS NULL", nm, sizeof nm);
    assert_string_equal(nm, "weights");
    assert_int_equal(snap_q(path, "SELECT size FROM allocations WHERE death_seq IS NULL"), 1 << 20);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM names WHERE addr=40960"), 1);
}

/* Snapshots, OOM forensics, allocator stats and metadata are stored. */
static void snapshots_oom_stats_meta(void **state) {
    (void)state;
    rec_segment segs[2] = {{0, 0, 0x100000, 1 << 21, 1 << 21, REC_SEG_F_EXPANDABLE},
                           {0, 7, 0x400000, 1 << 20, 1 << 19, 0}};
    rec_block blocks[3] = {{0, REC_BLOCK_ALLOCATED, 0x100000, 4096, 4000, 1},
                           {0, REC_BLOCK_FREE, 0x101000, 8192, 0, 0},
                           {1, REC_BLOCK_PENDING, 0x400000, 512, 0, 0}};
    rec_event(REC_SEG_MAP, 0, 0, 0x100000, 1 << 21, 0, 0);
    assert_int_equal(rec_snapshot(REC_SNAP_OOM, segs, 2, blocks, 3), 0);
    assert_int_equal(rec_snapshot(REC_SNAP_PEAK, segs, 2, blocks, 3), 0);
    assert_int_equal(rec_snapshot(REC_SNAP_PEAK, segs, 1, blocks, 1), 0); /* replaces */
    char oom_name[32] = "h3.mlp.fc";
    rec_oom_info o = {.device = 0, .requested = 1ull << 30, .allocated = 5, .reserved = 6,
                      .free_cached = 1, .largest_free = 1, .device_total = 80ull << 30,
                      .name = oom_name};
    rec_oom(&o);
    memset(oom_name, 'x', sizeof oom_name - 1); /* the recorder copied the name */
    o.name = NULL;
    rec_oom(&o); /* unnamed: NULL in the table */
    rec_alloc_stats s = {.peak_allocated = 123, .peak_reserved = 456, .cache_hits = 9};
    rec_stats(&s);
    rec_meta("mode", "replace");
    rec_close();
    assert_int_equal(snap_q(path, "SELECT count(*) FROM snapshots"), 2); /* OOM + latest peak */
    assert_int_equal(snap_q(path, "SELECT count(*) FROM blocks b JOIN snapshots s ON s.id=b.snapshot WHERE s.reason=2"), 3);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM blocks b JOIN snapshots s ON s.id=b.snapshot WHERE s.reason=1"), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM segments WHERE mapped=524288 AND stream=7"), 1);
    assert_int_equal(snap_q(path, "SELECT min(requested) FROM ooms"), 1ll << 30);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events e JOIN ooms o ON o.seq=e.seq WHERE e.kind=13"), 2);
    char nm[32];
    snap_q_text(path, "SELECT s.s FROM ooms o JOIN strings s ON s.id = o.name ORDER BY o.seq LIMIT 1", nm, sizeof nm);
    assert_string_equal(nm, "h3.mlp.fc");
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ooms WHERE name IS NULL"), 1);
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='schema_minor'"), REC_SCHEMA_MINOR);
    assert_int_equal(snap_q(path, "SELECT value FROM meta WHERE key='stat.peak_reserved'"), 456);
    char m[32];
    snap_q_text(path, "SELECT value FROM meta WHERE key='mode'", m, sizeof m);
    assert_string_equal(m, "replace");
}

/* rec_close twice is harmless; events after close are ignored, never a crash. */
static void close_twice_and_late_events(void **state) {
    (void)state;
    rec_event(REC_ALLOC, 0, 0, 0x10, 16, 16, 1);
    rec_close();
    rec_close();
    rec_event(REC_ALLOC, 0, 0, 0x20, 16, 16, 2);
    assert_int_equal(rec_range_push(NULL, "late"), -1);
    assert_int_equal(rec_enabled(), 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events"), 1);
}

/* Without rec_flush or close, a reader sees events within ~100 ms (commit cadence). */
static void committed_within_100ms(void **state) {
    (void)state;
    for (int i = 0; i < 100; i++) rec_event(REC_ALLOC, 0, 0, 0x1000 + i * 64, 64, 64, i + 1);
    struct timespec ts = {0, 200 * 1000000}; /* commits every 25 ms; margin for a loaded box */
    nanosleep(&ts, NULL);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events"), 100);
}

/* Timestamps are nanoseconds since the start (TSC-based or not): two events 50 ms apart are
 * 50 ms apart in the file, and ranges are timed on the same clock. */
static void timestamps_in_ns(void **state) {
    (void)state;
    rec_range_push(NULL, "timed");
    rec_event(REC_ALLOC, 0, 0, 0x10, 16, 16, 1);
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
    rec_event(REC_FREE, 0, 0, 0x10, 16, 0, 1);
    rec_range_pop();
    rec_close();
    long long dt = snap_q(path, "SELECT max(t) - min(t) FROM events");
    assert_true(dt >= 49 * 1000000ll);
    assert_true(dt < 500 * 1000000ll);
    long long rd = snap_q(path, "SELECT end_ns - start_ns FROM ranges");
    assert_true(rd >= dt);
    assert_true(snap_q(path, "SELECT min(t) FROM events") >= 0);
    assert_true(snap_q(path, "SELECT value FROM meta WHERE key='end_ns'") >= snap_q(path, "SELECT max(t) FROM events"));
}

/* A range's row waits for its close, within a commit's window: a range still open at a flush is
 * in the file (end_ns NULL) and its close fills its end in; one opened and closed between two
 * flushes goes in whole, once; a range open at the close stays open. Paths, parents and
 * kinds as pushed. */
static void ranges_in_file_at_each_commit(void **state) {
    (void)state;
    assert_int_equal(rec_range_push(NULL, "outer"), 1);
    rec_event(REC_ALLOC, 0, 0, 0x10, 16, 16, 1);
    rec_flush();
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges WHERE path = 'outer' AND end_ns IS NULL"), 1);
    assert_int_equal(rec_range_push(NULL, "inner"), 2);
    rec_event(REC_FREE, 0, 0, 0x10, 16, 0, 1);
    rec_range_pop();
    uint64_t st = rec_range_start("dom", "across"); /* start/end: kind 1, closed later */
    rec_flush();
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges WHERE path = 'outer/inner' AND parent = 1 AND "
                                  "end_ns >= start_ns"), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges WHERE kind = 1 AND end_ns IS NULL"), 1);
    rec_range_pop();
    rec_range_end(st);
    assert_int_equal(rec_range_push(NULL, "left open"), 1); /* the depth */
    rec_close();
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges"), 4);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges WHERE end_ns IS NULL"), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges WHERE path = 'left open' AND end_ns IS NULL"), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges WHERE path = 'outer' AND end_ns >= start_ns"), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events e JOIN ranges r ON r.id = e.range "
                                  "WHERE (e.kind = 1 AND r.path = 'outer') OR (e.kind = 2 AND r.path = 'outer/inner')"), 2);
}

#define THREADS 4
#define PER_THREAD 5000

static void *worker(void *arg) {
    long id = (long)arg;
    char name[32];
    snprintf(name, sizeof name, "thread %ld", id);
    rec_range_push(NULL, name);
    for (int i = 0; i < PER_THREAD; i++) {
        uint64_t a = ((uint64_t)id << 32) + (uint64_t)i * 64;
        rec_event(REC_ALLOC, 0, (uint64_t)id, a, 64, 64, 0);
        rec_event(REC_FREE, 0, (uint64_t)id, a, 64, 0, 0);
    }
    rec_range_pop();
    return NULL;
}

/* Concurrent producers: nothing lost or duplicated, each event has its own thread's range. */
static void concurrent_threads(void **state) {
    (void)state;
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    rec_flush();
    rec_close();
    /* the ring is small: some records may be dropped, but then they are counted (range
     * records count too, so events + dropped >= what was sent) */
    long long dropped = snap_q(path, "SELECT value FROM meta WHERE key='dropped_events'");
    long long events = snap_q(path, "SELECT count(*) FROM events");
    assert_true(events <= 2 * THREADS * PER_THREAD);
    assert_true(events + dropped >= 2 * THREADS * PER_THREAD);
    assert_true(events + dropped <= 2 * THREADS * PER_THREAD + 2 * THREADS);
    assert_int_equal(snap_q(path, "SELECT count(DISTINCT seq) FROM events"), events);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events e JOIN ranges r ON r.id=e.range WHERE r.thread != e.thread"), 0);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE range IS NULL"), 0);
    /* with drops (bounded back-pressure: once the ring stays full, producers drop without
     * waiting), a fast thread may lose all its events; without, every thread is there */
    long long threads = snap_q(path, "SELECT count(DISTINCT thread) FROM events");
    assert_true(threads >= 1 && threads <= THREADS);
    if (dropped == 0) {
        assert_int_equal(threads, THREADS);
        assert_int_equal(snap_q(path, "SELECT count(*) FROM streams"), THREADS);
    }
}

static uint64_t cross_id;
static void *ender(void *arg) {
    (void)arg;
    rec_range_end(cross_id);
    return NULL;
}

/* start/end ranges may end on another thread and do not become the events' range. */
static void start_end_cross_thread(void **state) {
    (void)state;
    cross_id = rec_range_start("d", "load");
    assert_true(cross_id > 0);
    rec_event(REC_ALLOC, 0, 0, 0x40, 64, 64, 1);
    rec_mark(NULL, "tick");
    pthread_t t;
    pthread_create(&t, NULL, ender, NULL);
    pthread_join(t, NULL);
    rec_close();
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges WHERE kind=1 AND end_ns IS NOT NULL AND path='load'"), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM ranges WHERE kind=2 AND end_ns=start_ns"), 1);
    assert_int_equal(snap_q(path, "SELECT count(*) FROM events WHERE range IS NULL"), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(events_ranges_lifetimes, setup, teardown),
        cmocka_unit_test_setup_teardown(range_swap_is_pop_push, setup, teardown),
        cmocka_unit_test_setup_teardown(repeating_columns_read_back, setup, teardown),
        cmocka_unit_test_setup_teardown(names_and_alive_at_close, setup, teardown),
        cmocka_unit_test_setup_teardown(snapshots_oom_stats_meta, setup, teardown),
        cmocka_unit_test_setup_teardown(close_twice_and_late_events, setup, teardown),
        cmocka_unit_test_setup_teardown(committed_within_100ms, setup, teardown),
        cmocka_unit_test_setup_teardown(timestamps_in_ns, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(start_end_cross_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(ranges_in_file_at_each_commit, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", snap_tmpdir());
    if (system(cmd) != 0) return 1;
    return rc;
}
