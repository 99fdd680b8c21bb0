/* rec_bench.c — recorder and report benchmarks (BENCH lines, see DESIGN.md).
 *
 *   rec_bench micro DIR           rec.app_ns_nostack, rec.app_ns_stack16,
 *                                 rec.writer_events_per_s (per second of the writer thread's
 *                                 CPU, best of 3), rec.bytes_per_event,
 *                                 rec.launch_app_ns (rec_launch with 8 words), and on stderr the
 *                                 writer's cost per launch (6 words into live allocations)
 *   rec_bench writer DIR [RUNS] rec.writer_events_per_s and rec.bytes_per_event alone (RUNS
 *                                 recordings, default 3): for profiling the writer
 *   rec_bench app DIR N WHAT      the application side alone, for callgrind (rec_instr.sh): N
 *                                 events without stacks (WHAT nostack), with 16 frames
 *                                 (stack16) or N launches of 8 words (launch)
 *   rec_bench gen DB N [DEVICES]  writes a synthetic N-event training-like database through the
 *                                 recorder itself (ranges, stacks, names, a slow leak); DEVICES
 *                                 (default 1): the events dealt in turn to that many devices, each
 *                                 with its own addresses and live blocks (the leak on device 0),
 *                                 for the commands' one-device reading (gm_db_scope_one)
 *   rec_bench report GPUMEM DB    report.10m_s (CPU seconds, best of 3) and report.10m_rss_mib:
 *                                 runs `GPUMEM report DB`
 *   rec_bench floor DIR N         N `events` rows whose cells are all NULL, the writer's way, for
 *                                 callgrind (rec_instr.sh: rec.sqlite_row_floor_instr)
 *
 * Each recorder figure is a separate recording in this process (rec_test_reset between).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "snapshot/record/rec.h"
#include "snapshot/record/rec_rows.h"
#include "snapshot/record/rec_internal.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void open_or_die(const char *path, int stacks, uint32_t ring) {
    unlink(path);
    rec_options o = {.path = path, .stacks = stacks, .fork_record = 0, .ring = ring, .quiet = 1};
    if (rec_open(&o) != 0) {
        fprintf(stderr, "rec_bench: cannot open %s\n", path);
        exit(1);
    }
}

/* Keeps the producer within the ring so that a benchmark never measures drops. */
static void pace(uint64_t cap) {
    while (rec_ring_last_seq(&rec_g.ring) - atomic_load(&rec_g.committed_seq) > cap / 2) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

static uint64_t addr_of(uint64_t i) { return 0x7f3a00000000ull + (i % 4096) * 0x100000ull; }

/* n events as alloc/free pairs; returns ns per event on this thread (paced outside timing) */
static double time_events(uint64_t n) {
    double t0 = now_s();
    for (uint64_t i = 0; i < n; i += 2) {
        uint64_t a = addr_of(i), sz = 512 + (i % 97) * 4096;
        rec_event(REC_ALLOC | REC_F_CACHE_HIT, 0, 0, a, sz, sz - 100, i + 1);
        rec_event(REC_FREE, 0, 0, a, sz, 0, i + 1);
    }
    return (now_s() - t0) * 1e9 / (double)n;
}

/* n launches of 8 words, each word inside one of 4096 live allocations (interior pointers);
 * returns ns per rec_launch on this thread */
static double time_launches(uint64_t n, uint32_t name, int nwords) {
    uint64_t w[8];
    rec_launch_info li = {.device = 0, .stream = 0, .func = 0xF00D, .name = name,
                          .op = REC_OP_KERNEL, .words = w, .nwords = (size_t)nwords};
    double t0 = now_s();
    for (uint64_t i = 0; i < n; i++) {
        for (int j = 0; j < nwords; j++) w[j] = addr_of(i * 8 + (uint64_t)j) + 64 * (uint64_t)j;
        rec_launch(&li);
    }
    return (now_s() - t0) * 1e9 / (double)n;
}

static void alloc_all(void) {
    for (uint64_t i = 0; i < 4096; i++) rec_event(REC_ALLOC, 0, 0, addr_of(i), 0x100000, 0x100000, i + 1);
}

/* recursion so that a 16-frame stack exists above the call */
static __attribute__((noinline)) double deep(int d, uint64_t n) {
    if (d > 0) {
        double r = deep(d - 1, n);
        __asm__ volatile("" ::: "memory"); /* not a tail call */
        return r;
    }
    return time_events(n);
}

static double median(double *v, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (v[j] < v[i]) { double t = v[i]; v[i] = v[j]; v[j] = t; }
    return v[n / 2];
}

/* rec.writer_events_per_s and rec.bytes_per_event: 1M events without stacks, in steps with
 * NVTX ranges, `runs` recordings. The figure is the writer's capacity: events per second of
 * the writer thread's own CPU time (meta writer_cpu_ns, from open to close), the best of the
 * runs. Wall time would measure the machine's load instead: on a shared machine the writer
 * waits for a core much of the time (the wall rate goes to stderr).
 * st: the last recording's file. */
static int writer_rate(const char *dir, int runs, struct stat *st) {
    const uint64_t n = 1000000;
    double best_cpu = 0, best_wall = 0;
    uint64_t dropped = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/rec_bench_writer.db", dir);
    for (int run = 0; run < runs; run++) {
        open_or_die(path, 0, 1u << 21);
        double t0 = now_s();
        for (uint64_t i = 0; i < n; i += 2000) {
            char step[32];
            snprintf(step, sizeof step, "step %" PRIu64, i / 2000);
            rec_range_push(NULL, step);
            rec_range_push(NULL, "fwd");
            time_events(2000);
            rec_range_pop();
            rec_range_pop();
            pace(1u << 21);
        }
        rec_flush();
        double dt = now_s() - t0;
        dropped += atomic_load(&rec_g.ring.dropped);
        rec_test_reset(); /* closes: WAL checkpointed into the file */
        int64_t rows = -1, cpu_ns = -1;
        sqlite3 *db;
        if (sqlite3_open(path, &db) == SQLITE_OK) {
            sqlite3_stmt *q;
            if (sqlite3_prepare_v2(db, "SELECT (SELECT count(*) FROM events), "
                                       "(SELECT value FROM meta WHERE key='writer_cpu_ns')",
                                   -1, &q, NULL) == SQLITE_OK &&
                sqlite3_step(q) == SQLITE_ROW)
                rows = sqlite3_column_int64(q, 0), cpu_ns = sqlite3_column_int64(q, 1);
            sqlite3_finalize(q);
            sqlite3_close(db);
        }
        if (rows != (int64_t)n) {
            fprintf(stderr, "rec_bench: %" PRId64 " events in the file, expected %" PRIu64 "\n", rows, n);
            return 1;
        }
        if (cpu_ns <= 0 || stat(path, st) != 0) return 1;
        double cpu_rate = 1e9 * (double)n / (double)cpu_ns, wall_rate = (double)n / dt;
        fprintf(stderr, "# writer run %d: %.0f ns CPU per event (%.0f events/s per core), "
                        "%.0f events/s wall\n", run + 1, (double)cpu_ns / (double)n, cpu_rate, wall_rate);
        if (cpu_rate > best_cpu) best_cpu = cpu_rate;
        if (wall_rate > best_wall) best_wall = wall_rate;
        if (run < runs - 1) unlink(path);
    }
    printf("BENCH rec.writer_events_per_s %.0f events/s\n", best_cpu);
    fprintf(stderr, "# writer: best wall rate %.0f events/s (with the producer, on this machine's load)\n", best_wall);
    printf("BENCH rec.bytes_per_event %.1f bytes\n", (double)st->st_size / (double)n);
    if (dropped) fprintf(stderr, "rec_bench: %" PRIu64 " events dropped\n", dropped);
    if (!getenv("REC_BENCH_KEEP")) unlink(path);
    return 0;

}

static int micro(const char *dir) {
    char path[4096];
    const uint32_t ring = 1u << 20;
    const uint64_t batch = 100000;
    double v[7];
    /* app-thread cost without stacks: batches smaller than the ring, flushed between */
    snprintf(path, sizeof path, "%s/rec_bench_nostack.db", dir);
    open_or_die(path, 0, ring);
    for (int r = 0; r < 7; r++) {
        v[r] = time_events(batch);
        rec_flush();
    }
    printf("BENCH rec.app_ns_nostack %.1f ns\n", median(v, 7));
    rec_test_reset();
    snprintf(path, sizeof path, "%s/rec_bench_stack16.db", dir);
    open_or_die(path, 16, ring);
    for (int r = 0; r < 7; r++) {
        v[r] = deep(20, batch / 4);
        rec_flush();
    }
    printf("BENCH rec.app_ns_stack16 %.1f ns\n", median(v, 7));
    rec_test_reset();
    /* writer throughput and size (writer_rate) */
    struct stat st;
    if (writer_rate(dir, 3, &st) != 0) return 1;
    snprintf(path, sizeof path, "%s/rec_bench_nostack.db", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/rec_bench_stack16.db", dir);
    unlink(path);

    /* access tracking: app-side cost of rec_launch with 8 words (3 ring records), batches
     * smaller than the ring, flushed between */
    snprintf(path, sizeof path, "%s/rec_bench_launch.db", dir);
    open_or_die(path, 0, ring);
    alloc_all();
    uint32_t kname = rec_string("bench_kernel");
    for (int r = 0; r < 7; r++) {
        v[r] = time_launches(batch / 4, kname, 8);
        rec_flush();
    }
    printf("BENCH rec.launch_app_ns %.1f ns\n", median(v, 7));
    rec_test_reset();
    unlink(path);

    /* bounded back-pressure (GPUMEM_RING_FULL=drop, opt-in): the app-side cost of an event
     * while the ring is full and the writer makes no progress (held off its lock): one producer
     * wait per episode, then drops at once. (By default the producer would wait for the writer.) */
    snprintf(path, sizeof path, "%s/rec_bench_full.db", dir);
    setenv("GPUMEM_RING_FULL", "drop", 1);
    open_or_die(path, 0, 4096);
    unsetenv("GPUMEM_RING_FULL");
    pthread_mutex_lock(&rec_g.db_lock);
    time_events(4096); /* fills the ring */
    const uint64_t nfull = 200000;
    double full_ns = time_events(nfull);
    uint64_t dropped_full = atomic_load(&rec_g.ring.dropped);
    pthread_mutex_unlock(&rec_g.db_lock);
    rec_test_reset();
    unlink(path);
    fprintf(stderr, "rec_bench: full ring: %" PRIu64 " of %" PRIu64 " events dropped\n", dropped_full, nfull);
    printf("BENCH rec.full_ring_app_ns %.1f ns\n", full_ns);
    /* the writer's side: launches of 6 words (2 ring records each), each word in a live
     * allocation, as fast as the writer takes them; writer CPU per launch (on stderr: a figure
     * to watch, not a BENCH line) */
    snprintf(path, sizeof path, "%s/rec_bench_launch_w.db", dir);
    open_or_die(path, 0, 1u << 21);
    alloc_all();
    const uint64_t nlaunch = 300000;
    double t0 = now_s();
    for (uint64_t i = 0; i < nlaunch; i += 2000) {
        time_launches(2000, kname, 6);
        pace(1u << 21);
    }
    rec_flush();
    double dt = now_s() - t0;
    rec_test_reset();
    sqlite3 *mdb;
    if (sqlite3_open(path, &mdb) == SQLITE_OK) {
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(mdb, "SELECT (SELECT value FROM meta WHERE key='writer_cpu_ns'), "
                                    "(SELECT count(*) FROM uses)", -1, &q, NULL) == SQLITE_OK &&
            sqlite3_step(q) == SQLITE_ROW)
            fprintf(stderr, "# writer thread: %.0f ns CPU per 6-word launch (%.0f launches/s "
                            "wall, %lld uses rows)\n",
                    (double)sqlite3_column_int64(q, 0) / (double)nlaunch, (double)nlaunch / dt,
                    (long long)sqlite3_column_int64(q, 1));
        sqlite3_finalize(q);
        sqlite3_close(mdb);
    }
    if (!getenv("REC_BENCH_KEEP")) unlink(path);
    return 0;
}

/* The application side alone, for instruction counts (tests/bench/rec_instr.sh runs it under
 * callgrind with --toggle-collect=rec_event or =rec_launch): n events without stacks
 * ("nostack"), n with a 16-frame stack above the call ("stack16"), or n launches of 8 words into
 * live allocations ("launch"), flushed at the end (the ring holds them all). */
static int app(const char *dir, uint64_t n, const char *what) {
    char path[4096];
    int stack16 = strcmp(what, "stack16") == 0, launch = strcmp(what, "launch") == 0;
    if (!stack16 && !launch && strcmp(what, "nostack") != 0) {
        fprintf(stderr, "rec_bench app: WHAT is nostack, stack16 or launch, not '%s'\n", what);
        return 2;
    }
    if (n == 0 || n > (1u << 19)) {
        fprintf(stderr, "rec_bench app: N must be 1 .. %u (the ring holds them all)\n", 1u << 19);
        return 2;
    }
    snprintf(path, sizeof path, "%s/rec_bench_app.db", dir);
    open_or_die(path, stack16 ? 16 : 0, 1u << 21);
    if (launch) {
        alloc_all();
        time_launches(n, rec_string("bench_kernel"), 8);
    } else if (stack16) {
        deep(20, n);
    } else {
        time_events(n);
    }
    rec_flush();
    uint64_t dropped = atomic_load(&rec_g.ring.dropped);
    rec_test_reset();
    unlink(path);
    if (dropped) {
        fprintf(stderr, "rec_bench app: %" PRIu64 " records dropped\n", dropped);
        return 1;
    }
    return 0;
}

/* ---- synthetic training-like database ---- */

static __attribute__((noinline)) void site_alloc(int which, int dev, uint64_t a, uint64_t sz, uint64_t id) {
    /* a few distinct call sites, as in a real program */
    switch (which & 3) {
    case 0: rec_event(REC_ALLOC | REC_F_CACHE_HIT, dev, 0, a, sz, sz, id); break;
    case 1: rec_event(REC_ALLOC | REC_F_CACHE_HIT, dev, 0, a, sz, sz, id); break;
    case 2: rec_event(REC_ALLOC_ASYNC | REC_F_CACHE_MISS, dev, 0x5555000, a, sz, sz, id); break;
    default: rec_event(REC_ALLOC | REC_F_CACHE_HIT, dev, 0, a, sz, sz, id); break;
    }
}

enum { GEN_MAX_DEVICES = 8 };
static int gen(const char *path, uint64_t n, int ndev) {
    if (ndev < 1 || ndev > GEN_MAX_DEVICES) {
        fprintf(stderr, "rec_bench gen: DEVICES must be 1 to %d, not %d\n", GEN_MAX_DEVICES, ndev);
        return 2;
    }
    const uint32_t ring = 1u << 20;
    open_or_die(path, 4, ring);
    uint64_t ev = 0, id = 0, leak_addr = 0x7e0000000000ull;
    uint64_t live_of[GEN_MAX_DEVICES][64];
    int nlive_of[GEN_MAX_DEVICES] = {0};
    for (uint64_t step = 0; ev < n; step++) {
        char s[32];
        snprintf(s, sizeof s, "step %" PRIu64, step);
        rec_range_push(NULL, s);
        static const char *const phase[] = {"fwd", "bwd", "opt"};
        for (int p = 0; p < 3 && ev < n; p++) {
            rec_range_push(NULL, phase[p]);
            for (int k = 0; k < 1000 && ev < n; k++) {
                /* device dev's turn: its own live blocks, its addresses 256 GiB above the last's */
                int dev = (int)(ev % (uint64_t)ndev), *nlive = &nlive_of[dev];
                uint64_t *live = live_of[dev];
                if (*nlive < 64 && (k % 3 != 2 || *nlive == 0)) {
                    uint64_t a = 0x7f0000000000ull + ((uint64_t)dev << 38) + ((id * 7919) % 65536) * 0x200000ull;
                    site_alloc(k, dev, a, 4096 + (k % 64) * 65536, ++id);
                    live[(*nlive)++] = a;
                } else {
                    rec_event(REC_FREE, dev, 0, live[--*nlive], 0, 0, 0);
                }
                ev++;
                if ((ev & 4095) == 0) pace(ring);
            }
            rec_range_pop();
        }
        if (step % 10 == 0) { /* a slow leak: 1 MiB every 10 steps */
            rec_event(REC_ALLOC, 0, 0, leak_addr, 1 << 20, 1 << 20, ++id);
            leak_addr += 1 << 20;
            ev++;
        }
        rec_range_pop();
    }
    rec_close();
    return 0;
}

/* report.10m_s: the CPU time (user + system) of `gpumem report` on the database, best of 3
 * runs. CPU time is what the report costs; on a shared machine its wall time is mostly waiting
 * for a core (the wall time of each run goes to stderr). */
static int report(const char *gpumem, const char *db) {
    double best = 0, best_wall = 0, rss_mib = 0;
    for (int run = 0; run < 3; run++) {
        double t0 = now_s();
        pid_t pid = fork();
        if (pid == 0) {
            if (!freopen("/dev/null", "w", stdout)) _exit(126);
            execl(gpumem, gpumem, "report", db, (char *)NULL);
            _exit(127);
        }
        int st;
        struct rusage ru;
        if (pid < 0 || wait4(pid, &st, 0, &ru) != pid) {
            fprintf(stderr, "rec_bench: cannot run gpumem report\n");
            return 1;
        }
        double wall = now_s() - t0;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rec_bench: gpumem report failed (status %d)\n", st);
            return 1;
        }
        double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                     (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
        fprintf(stderr, "# report run %d: %.2f s CPU, %.2f s wall\n", run + 1, cpu, wall);
        if (run == 0 || cpu < best) best = cpu;
        if (run == 0 || wall < best_wall) best_wall = wall;
        if ((double)ru.ru_maxrss / 1024.0 > rss_mib) rss_mib = (double)ru.ru_maxrss / 1024.0;
    }
    printf("BENCH report.10m_s %.2f s\n", best);
    printf("BENCH report.10m_rss_mib %.0f MiB\n", rss_mib);
    fprintf(stderr, "# report: best wall %.2f s (on this machine's load)\n", best_wall);
    return 0;
}

/* SQLite's own floor for an `events` row (tests/bench/rec_instr.sh, callgrind
 * --toggle-collect=rec_rows_insert): n rows of the recorder's schema whose 13 cells are all NULL
 * (seq appended), inserted the writer's way (gm_rows, 256 rows per statement, every column a
 * constant parameter, so no cell is read through xColumn; a commit every 25,600 rows), into a
 * file with the writer's settings. No writer's code runs per row: what callgrind counts is what
 * SQLite spends on a row that carries nothing. */
static int row_floor(const char *dir, uint64_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/rec_bench_floor.db", dir);
    unlink(path);
    sqlite3 *db;
    sqlite3_stmt *st = NULL;
    char sql[512];
    static int64_t cells[256][13];
    int ok = sqlite3_open(path, &db) == SQLITE_OK && rec_rows_register(db) == SQLITE_OK &&
             sqlite3_exec(db, "PRAGMA page_size=8192; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                              "PRAGMA wal_autocheckpoint=16384; PRAGMA cache_size=-4096;",
                          NULL, NULL, NULL) == SQLITE_OK &&
             sqlite3_exec(db, rec_schema_sql, NULL, NULL, NULL) == SQLITE_OK &&
             rec_rows_sql(sql, sizeof sql, "events", 13, (1u << 13) - 1) == 0 &&
             sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
             sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    rec_rows r = {.cells = &cells[0][0], .cols = 13, .n = 256, .append_key = 1, .prev_key = 0,
                  .null_cols = ((1u << 13) - 1) & ~1u, .null_value = 0,
                  .const_cols = (1u << 13) - 1};
    for (uint64_t done = 0; ok && done < n; done += 256) {
        for (int i = 0; i < 256; i++) cells[i][0] = (int64_t)(done + (uint64_t)i + 1);
        ok = rec_rows_insert(st, &r) == SQLITE_DONE;
        if (ok && (done / 256) % 100 == 99) ok = sqlite3_exec(db, "COMMIT; BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    }
    if (ok) ok = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK;
    if (!ok) fprintf(stderr, "rec_bench floor: %s\n", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_close(db);
    if (ok && sqlite3_open(path, &db) == SQLITE_OK) { /* every row went in, all NULL but seq */
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(db, "SELECT count(*), max(seq), count(t) + count(range) FROM events", -1,
                               &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
            ok = sqlite3_column_int64(q, 0) == sqlite3_column_int64(q, 1) &&
                 (uint64_t)sqlite3_column_int64(q, 0) >= n && sqlite3_column_int64(q, 2) == 0;
        sqlite3_finalize(q);
        sqlite3_close(db);
        if (!ok) fprintf(stderr, "rec_bench floor: the rows read back are not the ones written\n");
    }
    unlink(path);
    rec_db_unlink_sides(path);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "micro") == 0) return micro(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "writer") == 0) { /* the writer's figure alone (profiling) */
        struct stat st;
        return writer_rate(argv[2], argc >= 4 ? atoi(argv[3]) : 3, &st);
    }
    if (argc >= 5 && strcmp(argv[1], "app") == 0) return app(argv[2], strtoull(argv[3], NULL, 10), argv[4]);
    if (argc >= 4 && strcmp(argv[1], "gen") == 0)
        return gen(argv[2], strtoull(argv[3], NULL, 10), argc >= 5 ? atoi(argv[4]) : 1);
    if (argc >= 4 && strcmp(argv[1], "report") == 0) return report(argv[2], argv[3]);
    if (argc >= 4 && strcmp(argv[1], "floor") == 0) return row_floor(argv[2], strtoull(argv[3], NULL, 10));
    fprintf(stderr, "usage: rec_bench micro DIR | writer DIR [RUNS] | app DIR N nostack|stack16|launch | gen DB N [DEVICES] | report GPUMEM DB | floor DIR N\n");
    return 2;
}
