/* rec.c — the recorder's application side: the hot path and everything application threads
 * call (see rec.h for the contract).
 *
 * Design. An application thread turns each call into one 64-byte record and pushes it into a
 * lock-free ring (rec_ring.c); the writer thread (rec_writer.c) drains the ring into SQLite.
 * Nothing here touches SQLite, so an application thread never waits on disk. What does not fit
 * a fixed-size record (a new string, a new call stack, snapshots, OOM details, metadata) goes
 * through a mutex-protected list of items; those are rare (each distinct string/stack once).
 *
 * Per-thread state (thread number, the NVTX range stack) lives in initial-exec TLS; a fork
 * bumps a generation number so a child re-registers its thread in its own database.
 *
 * Call stacks are captured with libunwind's unw_backtrace (fast trace cache), or given by the
 * per-thread memo of walks when the same stack comes again (rec_unwind.h), and deduplicated
 * by a 64-bit hash in a lock-free open-addressing table: the common case (a stack seen before)
 * is lookup-only; a new stack takes the lock once to get an id and queue its frames.
 */
#include "snapshot/record/rec_internal.h"
#include "snapshot/record/rec_settings.h"
#include "snapshot/record/rec_unwind.h"
#include "snapshot/record/u64map.h" /* GM_NARROW_HASH */

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#define REC_TLS_DEPTH 48 /* small: initial-exec TLS must fit the static TLS surplus when libgpumem.so is dlopen()ed (PyTorch) */

typedef struct rec_tls {
    uint32_t gen;    /* == rec_g.gen once registered in this process */
    uint32_t thread; /* events.thread */
    uint32_t depth;  /* open push/pop ranges (may exceed REC_TLS_DEPTH: then not stored) */
    uint32_t sample; /* counts events to time one in 64 */
    uint32_t launch_tag; /* rec_launch's counter: ties a launch to its word records */
    uint32_t held;       /* rec_stack_hold: its events take held_stack instead of a walk */
    uint32_t held_stack;
    uint32_t ranges[REC_TLS_DEPTH];
} rec_tls;
static __thread rec_tls tls __attribute__((tls_model("initial-exec")));
__thread unsigned char rec_stack_walked __attribute__((tls_model("initial-exec")));



void rec_item_push(rec_item *it) {
    it->next = NULL;
    /* the item whole before it is linked: a close from a signal handler may take the list as
     * the section it interrupted left it (rec_close_ending) */
    atomic_signal_fence(memory_order_seq_cst);
    *rec_g.items_tail = it;
    rec_g.items_tail = &it->next;
}

static void insert_pid(const char *in, long pid, char *out, size_t outsz) {
    char ins[32];
    snprintf(ins, sizeof ins, "-%ld", pid);
    rec_insert_before_ext(in, ins, out, outsz);
}

static int path_is_templated(const char *t) { return strstr(t, "%p") != NULL; }

/* The last file this image created: a recording it closed and opens again is its own to
 * replace, whatever its meta.pid says. */
static char created_here[sizeof rec_g.path];

/* What an existing, unlocked gpumem database at path is to this process:
 *  1: its own, from before it exec'd: its meta.pid is ours and this image did not create it
 *     (the lock's descriptor closed at the exec, O_CLOEXEC);
 *  2: another process's of this same `gpumem record` run (meta.record_run is ours, the pid
 *     another): a launcher script's earlier step, `bash -c "python a.py; python b.py"`;
 *  0: a finished or abandoned database from an earlier run, to be replaced.
 * 1 and 2 are parts of this run, never stale files: the caller records beside them. */
static int part_of_this_run(const char *path, long pid, const char *run) {
    if (!strcmp(path, created_here)) return 0;
    sqlite3 *db = NULL;
    int part = 0;
    /* Reading a WAL database makes its -wal and -shm files, which a read-only connection leaves
     * behind at its close: when it made them (none was there, the -wal is still empty), they
     * go again, or every later process of a launcher's run would leave two files beside the
     * first one's recording. The caller holds the file's lock: no recorder is writing there. */
    char wal[4200], shm[4200];
    struct stat st;
    int had_sides = rec_db_side(path, REC_SIDE_WAL, wal, sizeof wal) != 0 ||
                    rec_db_side(path, REC_SIDE_SHM, shm, sizeof shm) != 0 || lstat(wal, &st) == 0 ||
                    lstat(shm, &st) == 0;
    /* the caller found a regular file at the name (lstat) and holds it open and locked; a
     * NOFOLLOW open would also refuse a linked directory above it, and the run's earlier part
     * would then be taken for a stale file and replaced */
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt *s;
        if (sqlite3_prepare_v2(db, "SELECT (SELECT value FROM meta WHERE key = 'pid'), "
                                   "(SELECT value FROM meta WHERE key = 'record_run')", -1, &s, NULL) == SQLITE_OK) {
            if (sqlite3_step(s) == SQLITE_ROW) {
                const unsigned char *theirs = sqlite3_column_text(s, 1);
                if (sqlite3_column_int64(s, 0) == pid) part = 1;
                else if (run && *run && theirs && !strcmp((const char *)theirs, run)) part = 2;
            }
            sqlite3_finalize(s);
        }
    }
    sqlite3_close(db);
    if (!had_sides && lstat(wal, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
        unlink(wal);
        unlink(shm);
    }
    return part;
}

/* Creates (or takes over a stale) database file: mode 0600, never through a symlink, and
 * flock()ed for as long as we record so that a second process with the same GPUMEM_DB (an
 * exec'd child, a rerun while the first still runs) picks another name instead of clobbering. */
static int create_db_file(rec_state *g) {
    char path[sizeof g->path];
    if (rec_expand_path(g->tmpl, g->pid, path, sizeof path) != 0 || !path[0]) {
        rec_warn("GPUMEM_DB path is empty or too long; not recording");
        return -1;
    }
    for (int attempt = 0; attempt < 3; attempt++) {
        struct stat st;
        int fd;
        if (lstat(path, &st) == 0) {
            if (S_ISLNK(st.st_mode)) {
                rec_warn("%s is a symbolic link; refusing to follow it (point GPUMEM_DB at a "
                         "plain file); not recording", path);
                return -1;
            }
            if (!S_ISREG(st.st_mode)) {
                rec_warn("%s exists and is not a regular file; not recording", path);
                return -1;
            }
            fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0) {
                rec_warn("cannot open %s: %s; not recording", path, strerror(errno));
                return -1;
            }
            if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
                /* another process is recording into it: use a name of our own */
                close(fd);
                char alt[sizeof g->path];
                insert_pid(path, g->pid, alt, sizeof alt);
                if (strcmp(alt, path) == 0) {
                    rec_warn("%s is being written by another process; not recording", path);
                    return -1;
                }
                rec_warn("%s is being written by another process; recording to %s", path, alt);
                snprintf(path, sizeof path, "%s", alt);
                continue;
            }
            /* a finished or abandoned database from an earlier run: replace it; anything else
             * (a source file given as GPUMEM_DB by mistake) is the user's and stays untouched */
            const char *force = getenv("GPUMEM_DB_FORCE");
            int ours = rec_db_replaceable(fd);
            if (ours != 1 && !(force && strcmp(force, "1") == 0)) {
                if (ours < 0)
                    rec_warn("cannot read %s: %s; not recording", path, strerror(errno));
                else
                    rec_warn("%s exists and is not a gpumem database; not overwriting it (choose "
                             "another GPUMEM_DB, or set GPUMEM_DB_FORCE=1 to replace it); not "
                             "recording", path);
                close(fd);
                return -1;
            }
            int part = ours == 1 ? part_of_this_run(path, g->pid, getenv("GPUMEM_RECORD_RUN")) : 0;
            if (part) {
                /* a part of this run: it stays, this one goes beside it. After an exec, the first
                 * free "-exec<k>" (rec_exec_image_path); after another process, "-<pid>" */
                close(fd);
                char alt[sizeof g->path];
                struct stat ast;
                if (part == 2) insert_pid(path, g->pid, alt, sizeof alt);
                for (int k = 1; part == 1 && k < 1000; k++) {
                    rec_exec_image_path(path, k, alt, sizeof alt);
                    if (lstat(alt, &ast) != 0) break;
                }
                rec_warn(part == 1 ? "%s holds this process's recording from before it exec'd; recording to %s"
                                   : "%s holds the recording of another process of this run; recording to %s",
                         path, alt);
                snprintf(path, sizeof path, "%s", alt);
                continue;
            }
            if (ftruncate(fd, 0) != 0 || fchmod(fd, 0600) != 0) {
                rec_warn("cannot reuse %s: %s; not recording", path, strerror(errno));
                close(fd);
                return -1;
            }
        } else {
            fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            if (fd < 0) {
                if (errno == EEXIST) continue;
                rec_warn("cannot create %s: %s; not recording", path, strerror(errno));
                return -1;
            }
            if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
                close(fd);
                continue;
            }
        }
        /* stale side files of an earlier run would be replayed into ours */
        rec_db_unlink_sides(path); /* -journal too: killed while the file was created */
        g->lock_fd = fd;
        snprintf(g->path, sizeof g->path, "%s", path);
        snprintf(created_here, sizeof created_here, "%s", path);
        return 0;
    }
    rec_warn("could not create a database file from GPUMEM_DB=%s; not recording", g->tmpl);
    return -1;
}

/* ---------------------------------------------------------------- open / close */

/* A number setting the preload checked already (rec_settings_read): its value, or dflt. */
static long env_long(const char *name, long dflt, long lo, long hi) {
    return rec_env_num(name, dflt, lo, hi, NULL, NULL, 0);
}

/* The wall-clock time of the origin: read beside it (not when the database is set up, which
 * can be tens of ms later on a loaded machine), so start_unix_ns + t is each event's wall time. */
static int64_t unix_now_ns(void) {
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    return (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec;
}

/* Uses the TSC when the CPU says it is invariant, calibrated against CLOCK_MONOTONIC over
 * 5 ms (relative error ~1e-5: far below what a memory timeline needs). GPUMEM_TSC=0 turns it
 * off. */
static void calibrate_clock(rec_state *g) {
    g->use_tsc = 0;
    g->start_unix_ns = unix_now_ns();
    g->start_ns = rec_now_ns();
#if defined(__x86_64__)
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000000u), "c"(0));
    if (a < 0x80000007u || !env_long("GPUMEM_TSC", 1, 0, 1)) return;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000007u), "c"(0));
    if (!(d & (1u << 8))) return; /* no invariant TSC */
    int64_t u1 = unix_now_ns();
    uint64_t n1 = rec_now_ns(), c1 = __rdtsc();
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
    uint64_t n2 = rec_now_ns(), c2 = __rdtsc();
    if (c2 <= c1 || n2 <= n1) return;
    double r = (double)(n2 - n1) / (double)(c2 - c1);
    if (r < 0.02 || r > 10) return; /* not a plausible clock: keep clock_gettime */
    g->ns_per_tick = r;
    g->tsc0 = c1;
    g->start_ns = n1;
    g->start_unix_ns = u1;
    g->use_tsc = 1;
#endif
}

/* SIGINT / SIGTERM (Ctrl-C, kill, a batch system's time limit), SIGHUP (the terminal or ssh
 * session closed: how long interactive runs usually die) and every other signal whose default
 * action ends the process would end the program without its exit handlers, leaving a database
 * without the lifetimes of what was alive and without the last ~100 ms of events. Where the
 * program kept the default action, the recorder closes the recording first: the handler (only
 * async-signal-safe calls) stops recording, has the writer drain the ring and close with
 * state = 'interrupted', waits for it (while it makes progress: wait_writer), then dies of the
 * same signal as before (or hands a stalled close over to the writer: hand_over).
 * A program that handles the signal itself and then kills itself with it (Python on Ctrl-C:
 * its handler raises KeyboardInterrupt, and at exit it puts the default action back and sends
 * SIGINT to itself) gets the same close from the preload's kill() (preload/core.c).
 * GPUMEM_SIGNALS=0 leaves the signals alone, both ways. */
static _Atomic int signals_on; /* GPUMEM_SIGNALS (1 by default), read when the recording opened */

/* 1 in the process that opened the recording; 0 in a vfork child, which shares this memory
 * (and may _exit or exec) but must not close or flush the parent's recording */
static int in_recording_process(void) { return (long)getpid() == rec_g.pid; }

int rec_signals_handled(void) { return atomic_load(&signals_on); }

/* ---------------------------------------------------------------- sections of the lock
 *
 * A signal handler runs on the thread it interrupted, and that thread may be inside a section
 * of rec_g.lock (a new string, a new stack, a new thread, an item) or of db_lock (the fork
 * handlers, which hold both). The writer's close needs both (take_items, and every SQLite
 * round), so a handler that waited for the close there waited for itself: its wait ran out and
 * the file said 'recording'. Each thread therefore says, in initial-exec TLS, when it is in
 * such a section; only the slow paths that take the lock do, never an event's fast path.
 * What the handlers do with it: rec_close_ending. */
static __thread struct {
    volatile sig_atomic_t in;      /* in a section, or entering or leaving one (a sent signal waits) */
    volatile sig_atomic_t owns;    /* REC_HOLD_*: held right now (set once taken, cleared before release) */
    volatile sig_atomic_t pending; /* the signal that waits for the end of the section, 0 if none */
    volatile long pending_pid;     /* the process it was sent to (a forked child's copy is not its own) */
} sect __attribute__((tls_model("initial-exec")));

/* The test hook (GPUMEM_TEST_SIGNAL_IN_LOCK, tests/integration/snapshot_signal_locks.sh). */
static void test_signal_in_section(int where);
static int test_sig_how;

/* A signal waited at the end of a section: sent again to this thread now (the raw system call,
 * not the preload's raise()), so that its handler runs where it holds nothing. */
static __attribute__((noinline)) void sect_resend(void) {
    int sig = sect.pending;
    long pid = sect.pending_pid;
    sect.pending = 0;
    if (pid != (long)getpid()) return; /* it waited in the parent, before a fork: the parent's */
    int e = errno;
    syscall(SYS_tgkill, (pid_t)pid, (pid_t)gettid(), sig);
    errno = e;
}

static inline void sect_enter(void) {
    sect.in++;
    atomic_signal_fence(memory_order_seq_cst);
}

static inline void sect_leave(void) {
    atomic_signal_fence(memory_order_seq_cst);
    if (--sect.in == 0 && __builtin_expect(sect.pending != 0, 0)) sect_resend();
}

static inline void app_lock(void) {
    sect_enter();
    pthread_mutex_lock(&rec_g.lock);
    atomic_signal_fence(memory_order_seq_cst);
    sect.owns |= REC_HOLD_LOCK;
}

static inline void app_unlock(void) {
    if (__builtin_expect(test_sig_how != 0, 0)) test_signal_in_section(REC_HOLD_LOCK);
    sect.owns &= ~REC_HOLD_LOCK;
    atomic_signal_fence(memory_order_seq_cst);
    pthread_mutex_unlock(&rec_g.lock);
    sect_leave();
}

/* A signal that may wait for the end of the section its thread is in: one sent to the process
 * (kill from a shell, a batch system, another thread; a timer). Not one this thread sent itself
 * (raise, abort: SI_TKILL from this process): the code that sent it runs on top of the section
 * and may never go back to it. */
static int sect_defer(int sig, const siginfo_t *info) {
    if (!sect.in || (info && info->si_code == SI_TKILL && info->si_pid == getpid())) return 0;
    if (!sect.pending) {
        sect.pending_pid = (long)getpid();
        sect.pending = sig;
    }
    return 1;
}

/* The signals whose default action ends the process (signal(7): "Term" and "Core"), less the
 * crashes (fatal_sigs below: a fault may recur, and runtimes take them by design) and SIGTRAP
 * and SIGSYS (a debugger's breakpoints, a seccomp filter's traps: the program's machinery, not
 * a request to end). SIGKILL and SIGSTOP cannot be caught. The real-time signals end the
 * process too, by default, and are in (SIGRTMIN..SIGRTMAX: those glibc keeps for itself are
 * below SIGRTMIN). */
static const int ending_sigs[] = {SIGHUP,  SIGINT,  SIGQUIT,   SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGPIPE,
                                  SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO,   SIGPWR,  SIGSTKFLT};
#define N_ENDING (sizeof ending_sigs / sizeof ending_sigs[0])

int rec_signal_ends(int sig) {
    for (size_t i = 0; i < N_ENDING; i++)
        if (ending_sigs[i] == sig) return 1;
    return sig >= SIGRTMIN && sig <= SIGRTMAX;
}

/* The waits for the writer on the way out (rec_close_ending, rec_flush). A fixed time (it was
 * 3 s for the close, 10 s for a flush) cut short a close that was slow but moving: a loaded
 * machine, a long backlog, a large index at close; the file then said 'recording'. Now the
 * wait ends when the writer is done, goes on while it makes progress (writer_progress: records
 * drained, commits, SQLite's steps), and gives up after WAIT_IDLE_NS without any: a writer
 * that stopped (a lock that is not ours held by the interrupted thread, a disk that hangs)
 * must not keep a dying process. WAIT_CAP_NS bounds it in all: a batch system's SIGKILL follows
 * its SIGTERM after a grace period (tens of seconds), and nothing is written after that.
 * Async-signal-safe: an atomic, clock_gettime and nanosleep. */
#define WAIT_IDLE_NS REC_WAIT_IDLE_NS
#define WAIT_CAP_NS REC_WAIT_CAP_NS

/* The close at the program's exit gives up after this long without the writer's progress
 * (rec_close). */
#define EXIT_IDLE_MS 30000
/* A signal's handler waits this long without progress before it hands the close over to the
 * writer and returns (on_terminating_signal). */
#define WAIT_HANDOVER_NS (300ull * 1000000u)

typedef struct {
    uint64_t start, since, seen, idle, cap;
} wait_writer;

static void wait_writer_begin(wait_writer *o, uint64_t idle_ns) {
    o->start = o->since = rec_now_ns();
    o->seen = atomic_load(&rec_g.writer_progress);
    o->idle = idle_ns;
    o->cap = WAIT_CAP_NS;
}

/* Sleeps sleep_ns, then says whether to wait on (1) or give up (0). */
static int wait_writer_on(wait_writer *o, long sleep_ns) {
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
    uint64_t now = rec_now_ns(), p = atomic_load(&rec_g.writer_progress);
    if (p != o->seen) o->seen = p, o->since = now;
    return now - o->since < o->idle && now - o->start < o->cap;
}

/* Waits for the writer's end (wait_writer's rules, cap_ns in all); whether it ended. */
static int wait_writer_done_cap(uint64_t idle_ns, uint64_t cap_ns) {
    wait_writer o;
    wait_writer_begin(&o, idle_ns);
    o.cap = cap_ns;
    while (!atomic_load(&rec_g.writer_done) && wait_writer_on(&o, 10000000)) {
    }
    return atomic_load(&rec_g.writer_done);
}
static void wait_writer_done(uint64_t idle_ns) { wait_writer_done_cap(idle_ns, WAIT_CAP_NS); }

/* ---- a close handed over to the writer ---------------------------------------------------
 * A signal that lands while its thread holds a lock that is not the recorder's but that the
 * writer's close needs stops the close: the dynamic linker's (the thread inside dl_iterate_phdr,
 * as libunwind's walk is on a new call site, while the writer meets a stack through an object
 * it has not seen and lists the loaded objects again), the C library's allocator's, stdio's.
 * The handler waited out its 3 s and the file said 'recording' (about 1 delivery in 100 in full
 * test runs until 2026-12-07; tests/apps/crash_app.c "loader_lock" makes it every time). Such a
 * thread has to go on to let go of the lock. So a handler whose wait sees no progress for
 * WAIT_HANDOVER_NS hands the close over: the default action put back, end_signal set, a kernel
 * timer armed to deliver the signal should the writer stop (3 s after its last progress, 60 s
 * in all, as the wait's bounds), and it returns. The writer, closed, sends the signal
 * (rec_end_signal_deliver): the process ends of it, with its exit status, as without gpumem,
 * only later by the rest of the close; meanwhile the program runs on unrecorded (its events
 * after the signal are not in the file, as they would not have happened). A program that ends
 * meanwhile (exit, _exit, an exec) first waits for the close and ends of the signal
 * (finish_handed_over). */

/* Hands the close of signal sig over to the writer (above); its default action is back. */
static void hand_over(rec_state *g, int sig) {
    g->end_since = rec_now_ns();
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = sig;
    int id = -1;
    if (syscall(SYS_timer_create, CLOCK_MONOTONIC, &sev, &id) == 0 && id >= 0) {
        atomic_store(&g->end_timer, id);
        rec_end_timer_push(g);
    }
    atomic_store(&g->end_signal, sig);
    /* the writer may have finished before it could see end_signal */
    if (atomic_load(&g->writer_done)) raise(sig);
}

/* A process that ends while a handed-over close runs: the close first, then the signal. */
static void finish_handed_over(void) {
    int sig = atomic_load(&rec_g.end_signal);
    if (!sig || !in_recording_process()) return;
    wait_writer_done(WAIT_IDLE_NS);
    raise(sig);
}

/* The close when the process is about to end without its exit handlers: from the recorder's
 * handlers and from the preload's kill, killpg, raise, _exit and _Exit. The caller's thread may
 * be inside a section of rec_g.lock or db_lock (above), which the writer needs to close. Two
 * ways out, both keeping the file whole:
 *   - a signal sent to the process that lands in a section waits for its end (sect_defer: the
 *     handler notes it and returns; the section ends, takes nothing more, and sends it again to
 *     its thread, whose handler then holds nothing). The section completes what it started (an
 *     id and the item that writes its row), so every id a written event refers to is written.
 *     This is the usual case (kill from a shell or a batch system) and costs nothing elsewhere.
 *   - where it cannot wait (the program's own handler, on top of the section, kills or _exits
 *     the process or aborts; a fault in the section), this thread never goes back to the
 *     section: the process ends when we return. It tells the writer so (rec_g.frozen, the locks
 *     it holds), and the writer goes on without those locks (rec_writer.c, writer_lock): nobody
 *     else can take them, so what they guard is the writer's alone. The item list is then as
 *     the section left it: every item pushed before is taken; one being pushed is either linked
 *     or not, and its id was never given to an event (a stack's id is published after its item,
 *     a string's id is only returned after it).
 * Taking the items without the lock and writing less (dropping what it could not take) was the
 * other way: it would leave events whose string or stack rows were never written, and the
 * readers join on those ids.
 * Still bounded (wait_writer: 3 s without progress, 60 s in all): a lock that is not ours (the C
 * library's allocator, the dynamic linker's, the driver's) held by the interrupted thread can
 * still stop the writer; the ending signals' handler then hands the close over (hand_over),
 * the kill, raise and _exit hooks (the program's own call, holding no such lock) wait. */
/* Starts the close of a process about to end of sig: 1 when this call started it. */
static int close_ending_begin(int sig) {
    rec_state *g = &rec_g;
    int expect = REC_ST_OPEN;
    if (!in_recording_process() || !atomic_compare_exchange_strong(&g->state, &expect, REC_ST_CLOSED))
        return 0;
    atomic_store(&g->interrupted, sig);
    if (sect.owns) atomic_store(&g->frozen, (int)sect.owns);
    atomic_store(&g->writer_stop, 1);
    rec_ring_wake(&g->ring);
    return 1;
}

void rec_close_ending(int sig) {
    if (close_ending_begin(sig)) wait_writer_done(WAIT_IDLE_NS);
    else finish_handed_over();
}

/* The ending signals' handler. It waits for the close, then dies of the signal; a close that
 * stops moving while this thread may hold a lock it needs is handed over (above), unless this
 * thread holds the recorder's own (sect.owns: it never goes back to that section). */
static void on_terminating_signal(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    if (sect_defer(sig, info)) return;
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    if (close_ending_begin(sig)) {
        wait_writer_done(sect.owns ? WAIT_IDLE_NS : WAIT_HANDOVER_NS);
        if (!atomic_load(&rec_g.writer_done) && !sect.owns) {
            sigaction(sig, &dfl, NULL);
            hand_over(&rec_g, sig);
            return;
        }
    } else {
        finish_handed_over();
    }
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

/* SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL: a crash. The events of the last ~100 ms are in the
 * ring, not yet committed; without this a program that allocated and crashed at once would be
 * told it allocated nothing. The handler commits them first. Then:
 *   - the program's own handler (installed before the recording opened) runs, as it would have,
 *     the recording not closed, since that handler may recover or be a crash reporter that
 *     re-raises. Before a handler of SIGABRT the recording is flushed; before one of the others
 *     it is not: runtimes take SIGSEGV, SIGBUS, SIGFPE and SIGILL by design (a JIT's null checks
 *     and safepoints, a garbage collector's barriers), thousands of times a run, and a flush per
 *     fault (a commit, milliseconds) would slow them down; a crash through such a handler loses
 *     the last ~100 ms, as a kill does;
 *   - or, with the default action, the recording is closed (state 'interrupted', every lifetime
 *     written, as for SIGTERM), the default action put back and the signal delivered again: a
 *     fault recurs when the handler returns, a sent signal (abort(), kill) is raised again.
 * A handler the program installs after the recording opened replaces this one: its choice.
 * A signal sent from elsewhere that lands in a section of the recorder's lock waits for its end,
 * as an ending one does (rec_close_ending); the program's handler then gets it from this thread
 * (SI_TKILL). No flush where this thread holds the lock: the writer needs it, and the section
 * may go on if the program's handler returns.
 * Only async-signal-safe work (atomics, nanosleep, bounded waits: the writer may wait for a
 * slot the crashed thread never published). SA_ONSTACK: the program's alternate stack, if it
 * set one, also serves a stack overflow. */
static const int fatal_sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
#define N_FATAL (sizeof fatal_sigs / sizeof fatal_sigs[0])
static struct sigaction fatal_prev[N_FATAL];

static void on_fatal_signal(int sig, siginfo_t *info, void *ctx) {
    size_t k = 0;
    while (k < N_FATAL && fatal_sigs[k] != sig) k++;
    if (k == N_FATAL) return;
    /* a fault in a section cannot wait (the instruction faults again): rec_close_ending */
    if (info && info->si_code <= 0 && sect_defer(sig, info)) return;
    const struct sigaction *prev = &fatal_prev[k];
    if ((prev->sa_flags & SA_SIGINFO) && prev->sa_sigaction) {
        if (sig == SIGABRT && !sect.owns) rec_flush();
        prev->sa_sigaction(sig, info, ctx);
        return;
    }
    if (!(prev->sa_flags & SA_SIGINFO) && prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
        if (sig == SIGABRT && !sect.owns) rec_flush();
        prev->sa_handler(sig);
        return;
    }
    rec_close_ending(sig);
    sigaction(sig, prev, NULL);
    /* sent rather than caused by the instruction (si_code <= 0: kill, raise, abort's raise) */
    if (!info || info->si_code <= 0) raise(sig);
}

/* GPUMEM_TEST_SIGNAL_IN_LOCK=how:sig:where (tests only): once, inside a section (above), this
 * thread sends sig the way `how` says: "sent" as another process would (kill from a shell: a
 * SI_USER signal from the parent), "kill" (kill(getpid(), sig)), "raise", "abort" (sig unused)
 * or "_exit" (sig the status); the last four as a program's handler would, running on top of
 * the section. where: n, the n-th section of rec_g.lock in this process, or "fork", the fork
 * handlers' (db_lock and the lock). */
enum { TEST_SENT = 1, TEST_KILL, TEST_RAISE, TEST_ABORT, TEST_EXIT };
static int test_sig_num;
static long test_sig_at; /* -1: the fork's section */
static _Atomic long test_sig_seen;

static void test_signal_read(void) {
    const char *v = getenv("GPUMEM_TEST_SIGNAL_IN_LOCK");
    static const char *const hows[] = {"", "sent", "kill", "raise", "abort", "_exit"};
    char how[8] = "", where[16] = "";
    int sig = 0;
    test_sig_how = 0;
    if (!v || sscanf(v, "%7[^:]:%d:%15s", how, &sig, where) != 3) return;
    for (int i = 1; i < 6; i++)
        if (!strcmp(how, hows[i])) test_sig_how = i;
    test_sig_num = sig;
    test_sig_at = !strcmp(where, "fork") ? -1 : atol(where);
    atomic_store(&test_sig_seen, 0);
}

static void test_signal_in_section(int where) {
    if (where == REC_HOLD_DB ? test_sig_at != -1
                             : test_sig_at <= 0 || atomic_fetch_add(&test_sig_seen, 1) + 1 != test_sig_at)
        return;
    int how = test_sig_how, sig = test_sig_num;
    test_sig_how = 0; /* once */
    if (how == TEST_SENT) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        si.si_signo = sig;
        si.si_code = SI_USER;
        si.si_pid = getppid();
        si.si_uid = getuid();
        syscall(SYS_rt_tgsigqueueinfo, getpid(), gettid(), sig, &si);
    } else if (how == TEST_KILL) {
        kill(getpid(), sig);
    } else if (how == TEST_RAISE) {
        raise(sig);
    } else if (how == TEST_ABORT) {
        abort();
    } else if (how == TEST_EXIT) {
        _exit(sig);
    }
}

static void install_signal_handlers(void) {
    test_signal_read();
    atomic_store(&signals_on, (int)env_long("GPUMEM_SIGNALS", 1, 0, 1));
    if (!atomic_load(&signals_on)) return;
    for (size_t i = 0; i < N_FATAL; i++) {
        struct sigaction cur;
        if (sigaction(fatal_sigs[i], NULL, &cur) != 0 || (cur.sa_flags & SA_SIGINFO && cur.sa_sigaction == on_fatal_signal))
            continue; /* already ours (a recording reopened after fork or exec) */
        fatal_prev[i] = cur;
        struct sigaction sa = {.sa_sigaction = on_fatal_signal, .sa_flags = SA_SIGINFO | SA_ONSTACK};
        sigemptyset(&sa.sa_mask);
        sigaction(fatal_sigs[i], &sa, NULL);
    }
    for (int sig = 1; sig <= SIGRTMAX; sig++) {
        struct sigaction old;
        if (!rec_signal_ends(sig) || sigaction(sig, NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
            (old.sa_flags & SA_SIGINFO))
            continue; /* the program handles it, or ignores it: its choice */
        /* SA_RESTART: a handler that returns (a sent signal deferred to a section's end, a close
         * handed over) leaves the program's interrupted system call to go on */
        struct sigaction sa = {.sa_sigaction = on_terminating_signal, .sa_flags = SA_SIGINFO | SA_RESTART};
        sigemptyset(&sa.sa_mask);
        sigaction(sig, &sa, NULL);
    }
}

static void atfork_prepare(void);
static void atfork_parent(void);
static void atfork_child(void);
/* Fallback when nobody calls rec_close(): a destructor runs from _dl_fini, after every atexit
 * handler (the preload's exit path included), so late stats and snapshots still get in. */
__attribute__((destructor)) static void rec_fini(void) { rec_close(); }

static int open_now(const rec_options *opt) {
    rec_state *g = &rec_g;
    uint64_t ring = g->ring.slots ? g->ring.mask + 1 : 65536;
    if (!g->reopen || opt) {
        const char *tmpl = opt && opt->path ? opt->path : getenv("GPUMEM_DB");
        if (!tmpl || !*tmpl) tmpl = REC_DEFAULT_DB;
        /* a relative name is from where the program started (rec_note_start), not from where it
         * happens to be now: it may have chdir'd before its first CUDA call */
        char here[sizeof g->start_cwd];
        const char *from = g->start_cwd[0] ? g->start_cwd : getcwd(here, sizeof here) ? here : "";
        if (g->tmpl[0] == 0 || opt) {
            if (!strcmp(tmpl, "none") || !strcmp(tmpl, "off")) snprintf(g->tmpl, sizeof g->tmpl, "%s", tmpl);
            else if (rec_path_from(from, tmpl, g->tmpl, sizeof g->tmpl) != 0) {
                rec_warn("GPUMEM_DB=%s is too long once made absolute (from %s); not recording", tmpl, from);
                return -1;
            }
        }
        g->stacks = opt && opt->stacks >= 0 ? opt->stacks : (int)env_long("GPUMEM_STACKS", 16, 0, REC_MAX_FRAMES);
        if (g->stacks > REC_MAX_FRAMES) g->stacks = REC_MAX_FRAMES;
        if (opt && opt->fork_record >= 0) g->fork_record = opt->fork_record;
        else {
            const char *f = getenv("GPUMEM_FORK");
            g->fork_record = !(f && strcmp(f, "off") == 0);
        }
        g->quiet = opt && opt->quiet >= 0 ? opt->quiet : (int)env_long("GPUMEM_QUIET", 0, 0, 1);
        g->names = (int)env_long("GPUMEM_NAMES", 1, 0, 1);
        g->ranges = (int)env_long("GPUMEM_NVTX", 1, 0, 1);
        ring = opt && opt->ring ? opt->ring : (uint64_t)env_long("GPUMEM_RING", 65536, 2, 1L << 26);

    }
    g->reopen = 0;
    g->pid = (long)getpid();
    char bad[512];
    if (rec_check_env(bad, sizeof bad) != 0) {
        rec_warn("%s; not recording (gpumem records only with settings it can read)", bad);
        return -1;
    }
    /* GPUMEM_DB=none (or off): recording is off on purpose, quietly (gpumem as an allocator). */
    if (!strcmp(g->tmpl, "none") || !strcmp(g->tmpl, "off")) {
        rec_status("msg", "GPUMEM_DB=none: recording is off (gpumem serves allocations only)");
        return -1;
    }

    g->gpu_records = UINT64_MAX; /* the writer counts them at a whole close */
    if (create_db_file(g) != 0) return -1;
    /* A full ring: wait for the writer (lossless, the default), or with GPUMEM_RING_FULL=drop
     * wait at most GPUMEM_RING_WAIT_US once per episode, then drop and count (rec_ring.h) */
    uint64_t wait_ns = REC_RING_WAIT_FOREVER;
    const char *full = getenv("GPUMEM_RING_FULL");
    if (full && !strcmp(full, "drop"))
        wait_ns = (uint64_t)env_long("GPUMEM_RING_WAIT_US", 200, 0, 1000000) * 1000;

    if (!g->ring.slots && rec_ring_init(&g->ring, ring, wait_ns) != 0) {
        rec_warn("cannot allocate the event ring (%llu events); not recording", (unsigned long long)ring);
        return -1;
    }
    g->ring.aux_kind = REC_R_WORDS; /* a dropped launch's words are no events (meta dropped_word_records) */
    if (!g->stab) {
        g->stab_mask = (1u << 18) - 1;
        void *p = mmap(NULL, (g->stab_mask + 1) * sizeof *g->stab, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            rec_warn("cannot allocate the stack table; not recording");
            return -1;
        }
        rec_mem_advise_huge(p, (g->stab_mask + 1) * sizeof *g->stab); /* 4 MiB, looked up at random */
#if defined(__SANITIZE_ADDRESS__)
        /* the table holds each stack's frames (malloc'd, stack_id_slow) until it is emptied:
         * LeakSanitizer scans no mmap'd memory it was not told of, and would call them leaked */
        __lsan_register_root_region(p, (g->stab_mask + 1) * sizeof *g->stab);
#endif
        g->stab = p;
    }
    if (!g->strtab) {
        g->strtab_mask = (1u << 14) - 1;
        g->strtab = calloc(g->strtab_mask + 1, sizeof *g->strtab);
        if (!g->strtab) return -1;
    }
    g->items_tail = &g->items;
    calibrate_clock(g);
    if (rec_writer_open_db(g) != 0) return -1;
    if (rec_writer_start(g) != 0) return -1;
    static int registered;
    if (!registered) {
        registered = 1;
        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    }
    install_signal_handlers();
    if (!g->quiet) fprintf(stderr, "gpumem: recording to %s\n", g->path);
    rec_status("db", g->path);
    return 0;
}

int rec_open(const rec_options *opt) {
    int expect = REC_ST_NEW;
    if (!atomic_compare_exchange_strong(&rec_g.state, &expect, REC_ST_OPENING)) {
        while (expect == REC_ST_OPENING) {
            sched_yield();
            expect = atomic_load(&rec_g.state);
        }
        return expect == REC_ST_OPEN ? 0 : -1;
    }
    int rc = open_now(opt);
    if (rc != 0 && rec_g.lock_fd >= 0) {
        close(rec_g.lock_fd);
        rec_g.lock_fd = -1;
    }
    atomic_store_explicit(&rec_g.state, rc == 0 ? REC_ST_OPEN : REC_ST_OFF, memory_order_release);
    return rc;
}

static __attribute__((noinline)) int ready_slow(void) {
    int st = atomic_load_explicit(&rec_g.state, memory_order_acquire);
    if (st == REC_ST_NEW) {
        rec_open(NULL);
        st = atomic_load_explicit(&rec_g.state, memory_order_acquire);
    }
    while (st == REC_ST_OPENING) {
        sched_yield();
        st = atomic_load_explicit(&rec_g.state, memory_order_acquire);
    }
    return st == REC_ST_OPEN;
}

static inline int ready(void) {
    return __builtin_expect(atomic_load_explicit(&rec_g.state, memory_order_acquire) == REC_ST_OPEN, 1)
           || ready_slow();
}

int rec_enabled(void) { return atomic_load(&rec_g.state) == REC_ST_OPEN; }
const char *rec_path(void) { return rec_enabled() ? rec_g.path : ""; }

/* A process the program started (a compile worker of torch.compile, a tokenizer's pool, a
 * `python -c` probe) opens its recording at its first CUDA call, which may be no more than a
 * device query: a file that holds none of its own GPU work is clutter nobody asked for, so it
 * goes, with its side files, and gpumem record is told ("empty") not to list it. The first
 * process of the tree keeps its file whatever it holds: `gpumem record` reports on it, and
 * says when it made no allocation. Lock held (the file's flock), SQLite closed. */
static void remove_if_unused(rec_state *g) {
    if (!g->root_pid || g->pid == g->root_pid || g->gpu_records != 0) return;
    if (unlink(g->path) != 0) return;
    rec_db_unlink_sides(g->path);
    rec_status("empty", g->path);
}

void rec_close(void) {
    int expect = REC_ST_OPEN;
    if (!atomic_compare_exchange_strong(&rec_g.state, &expect, REC_ST_CLOSED)) {
        /* never opened (or off): make sure nothing opens after close */
        expect = REC_ST_NEW;
        atomic_compare_exchange_strong(&rec_g.state, &expect, REC_ST_CLOSED);
        finish_handed_over();
        return;
    }
    /* The close at the program's exit waits for the writer while it moves, with no bound in
     * all (a long recording's close, its index and lifetimes, takes what it takes), and gives up
     * after EXIT_IDLE_NS without progress: a disk that stopped answering, or a lock the writer
     * needs that another of the program's threads holds and never gives back, kept the program
     * from ending, for ever (pthread_join). The file then stays 'recording', as a killed run's
     * (the readers say so), and the program ends. GPUMEM_TEST_EXIT_IDLE_MS shortens it (tests:
     * snapshot_signals.sh). */
    atomic_store(&rec_g.writer_stop, 1);
    rec_ring_wake(&rec_g.ring);
    long idle_ms = env_long("GPUMEM_TEST_EXIT_IDLE_MS", EXIT_IDLE_MS, 1, 86400000);
    if (!wait_writer_done_cap((uint64_t)idle_ms * 1000000u, UINT64_MAX)) {
        rec_warn("the recording's close made no progress for %.0f s (a disk that does not answer, or a lock "
                 "another thread holds): the program ends without it; %s stays 'recording', read as a "
                 "killed run's",
                 (double)idle_ms / 1e3, rec_g.path);
        return; /* the writer is left to the process's end: nothing here touches its file */
    }
    rec_writer_stop(&rec_g);
    remove_if_unused(&rec_g);
    if (rec_g.lock_fd >= 0) close(rec_g.lock_fd); /* after SQLite closed: see create_db_file */
    rec_g.lock_fd = -1;
}

/* Waits until every record pushed and every item queued before the call is committed: the
 * records by seq, the items (meta, strings, ...) by the request's number, which the writer
 * answers after a round that took them. Bounded as the close is (wait_writer). Not at all once
 * the writer has failed (disk full, I/O error): it commits nothing more, and the exit handler's
 * flush would hold every such program for the wait's bound at its exit. */
void rec_flush(void) {
    if (!rec_enabled() || !in_recording_process()) return;
    uint64_t target = rec_ring_last_seq(&rec_g.ring);
    uint64_t want = atomic_load(&rec_g.flush_seq);
    while (want < target && !atomic_compare_exchange_weak(&rec_g.flush_seq, &want, target)) {
    }
    uint64_t req = atomic_fetch_add(&rec_g.flush_req, 1) + 1;
    rec_ring_wake(&rec_g.ring);
    wait_writer o;
    wait_writer_begin(&o, WAIT_IDLE_NS);
    while ((atomic_load(&rec_g.committed_seq) < target || atomic_load(&rec_g.flush_done) < req) &&
           rec_enabled() && !atomic_load(&rec_g.writer_failed) && wait_writer_on(&o, 500000)) {
    }
}

/* exec: the image ends if it succeeds. The file says so (state 'exec', meta.exec the program)
 * before the flush commits it; a failed exec puts 'recording' back and the recording goes on.
 * Only the recording's own process: a vfork child shares the parent's memory. */
void rec_exec_begin(const char *path) {
    finish_handed_over(); /* a signal's close under way: the program ends of it, no exec */
    if (!rec_enabled() || !in_recording_process()) return;
    rec_meta("exec", path ? path : "?");
    rec_meta("state", "exec");
    rec_flush();
}

void rec_exec_failed(void) {
    if (!rec_enabled() || !in_recording_process()) return;
    rec_meta("state", "recording");
    rec_meta("exec", "");
}

/* ---------------------------------------------------------------- threads, strings */

static __attribute__((noinline)) void thread_register(rec_tls *t) {
    rec_item *it = calloc(1, sizeof *it + 32);
    t->gen = atomic_load(&rec_g.gen);
    t->thread = atomic_fetch_add(&rec_g.nthreads, 1) + 1;
    t->depth = 0;
    t->held = 0; /* a stack id of the recording before this one means nothing in this one */
    if (!it) return;
    it->type = REC_I_THREAD;
    it->id = t->thread;
    it->a = (uint64_t)gettid();
    if (pthread_getname_np(pthread_self(), it->text, 32) != 0) it->text[0] = 0;
    app_lock();
    rec_item_push(it);
    app_unlock();
}

static inline rec_tls *my_tls(void) {
    rec_tls *t = &tls;
    if (__builtin_expect(t->gen != atomic_load_explicit(&rec_g.gen, memory_order_relaxed), 0))
        thread_register(t);
    return t;
}

static uint64_t str_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* A thread's strings interned last, by their address, each with a copy of its text (the address
 * may hold another string by the next call) and the recording's generation (ids start again in
 * a forked child): a range pushed again (PyTorch's module hooks push the same paths every step)
 * costs a compare instead of a hash, the lock and the table's compare. */
#define ICACHE_SLOTS 8
#define ICACHE_TEXT 48
static __thread struct icache_ent {
    const char *p;
    uint32_t id, gen;
    char text[ICACHE_TEXT];
} icache[ICACHE_SLOTS] __attribute__((tls_model("initial-exec")));

static uint32_t intern_slow(const char *s);

/* Returns the string's id (>= 1), 0 on allocation failure. Each distinct string gets one id
 * for the whole recording (and one `strings` row, queued here for the writer). */
static uint32_t intern(const char *s) {
    if (!s) return 0;
    struct icache_ent *c = &icache[((uintptr_t)s * 0x9E3779B97F4A7C15ull) >> 61];
    uint32_t gen = atomic_load_explicit(&rec_g.gen, memory_order_relaxed);
    if (c->p == s && c->gen == gen && c->id && strcmp(c->text, s) == 0) return c->id;
    uint32_t id = intern_slow(s);
    size_t n = strlen(s);
    if (id && n < ICACHE_TEXT) {
        c->p = s, c->id = id, c->gen = gen;
        memcpy(c->text, s, n + 1);
    }
    return id;
}

static uint32_t intern_slow(const char *s) {
    uint64_t h = str_hash(s);
    app_lock();
    struct rec_str_ent **b = &rec_g.strtab[h & rec_g.strtab_mask], *e;
    for (e = *b; e; e = e->next)
        if (e->h == h && strcmp(e->s, s) == 0) break;
    uint32_t id = 0;
    if (e) id = e->id;
    else {
        size_t n = strlen(s);
        e = malloc(sizeof *e + n + 1);
        rec_item *it = calloc(1, sizeof *it + n + 1);
        if (e && it) {
            memcpy(e->s, s, n + 1);
            e->h = h;
            e->id = id = ++rec_g.nstrings;
            e->next = *b;
            *b = e;
            it->type = REC_I_STRING;
            it->id = id;
            memcpy(it->text, s, n + 1);
            rec_item_push(it);
        } else {
            free(e);
            free(it);
        }
    }
    app_unlock();
    return id;
}

uint32_t rec_string(const char *s) {
    if (!ready() || !s) return 0;
    return intern(s);
}

static void strtab_clear(void) {
    if (!rec_g.strtab) return;
    for (uint64_t i = 0; i <= rec_g.strtab_mask; i++) {
        struct rec_str_ent *e = rec_g.strtab[i];
        while (e) {
            struct rec_str_ent *n = e->next;
            free(e);
            e = n;
        }
        rec_g.strtab[i] = NULL;
    }
    rec_g.nstrings = 0;
}

/* ---------------------------------------------------------------- stacks */

/* The Python frames provider (rec_set_python): set once, read on every stack capture. */
static _Atomic(rec_pyframes_fn) py_fn;
static uint64_t py_lo, py_hi;

void rec_set_python(rec_pyframes_fn fn, uint64_t interp_lo, uint64_t interp_hi) {
    py_lo = interp_lo;
    py_hi = interp_hi;
    atomic_store_explicit(&py_fn, fn, memory_order_release);
}

/* gpumem's own code (rec_add_own_code): a range is written whole before n_own counts it, and
 * read without a lock on every capture. own_depth: the most of its frames seen at a stack's top
 * (below the capture's two), how far past the N frames asked for a walk goes so that N of the
 * program's remain. It only grows (the memo's walks are made for one depth: unw_block). */
#define REC_OWN_FRAMES_MAX 16
static struct {
    _Atomic uint64_t lo, hi;
} own_code[REC_MAX_OWN_CODE];
static _Atomic int n_own, own_depth;
static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;

int rec_add_own_code(uint64_t lo, uint64_t hi) {
    int r = -1;
    pthread_mutex_lock(&own_lock);
    int n = atomic_load_explicit(&n_own, memory_order_relaxed);
    for (int i = 0; i < n; i++)
        if (atomic_load_explicit(&own_code[i].lo, memory_order_relaxed) == lo &&
            atomic_load_explicit(&own_code[i].hi, memory_order_relaxed) == hi)
            r = 0;
    if (r != 0 && n < REC_MAX_OWN_CODE && lo < hi) {
        atomic_store_explicit(&own_code[n].lo, lo, memory_order_relaxed);
        atomic_store_explicit(&own_code[n].hi, hi, memory_order_relaxed);
        atomic_store_explicit(&n_own, n + 1, memory_order_release);
        r = 0;
    }
    pthread_mutex_unlock(&own_lock);
    return r;
}

static inline int own_pc(uint64_t pc, int n) {
    for (int i = 0; i < n; i++)
        if (pc >= atomic_load_explicit(&own_code[i].lo, memory_order_relaxed) &&
            pc < atomic_load_explicit(&own_code[i].hi, memory_order_relaxed))
            return 1;
    return 0;
}

int rec_own_code(uint64_t pc) {
    return own_pc(pc, atomic_load_explicit(&n_own, memory_order_acquire));
}

/* A stack's frames as the table keeps them (one allocation): n native, then npy Python frames. */
struct rec_stack_frames {
    uint32_t n, npy;
    void *pcs[];
};

static inline int stack_is(const struct rec_stack_frames *s, void *const *pcs, int n, const rec_pyframe *py, int npy) {
    return s && s->n == (uint32_t)n && s->npy == (uint32_t)npy &&
           memcmp(s->pcs, pcs, (size_t)n * sizeof *pcs) == 0 &&
           (!npy || memcmp(s->pcs + n, py, (size_t)npy * sizeof *py) == 0);
}

static __attribute__((noinline)) uint32_t stack_id_slow(uint64_t key, void **pcs, int n, const rec_pyframe *py, int npy) {
    uint32_t id = 0;
    app_lock();
    uint64_t i = key & rec_g.stab_mask;
    for (int probe = 0; probe < 64; probe++, i = (i + 1) & rec_g.stab_mask) {
        uint64_t k = atomic_load_explicit(&rec_g.stab[i].key, memory_order_acquire);
        if (k == key && stack_is(rec_g.stab[i].frames, pcs, n, py, npy)) {
            id = atomic_load_explicit(&rec_g.stab[i].id, memory_order_relaxed);
            break;
        }
        if (k == 0) {
            /* one copy of the frames: the table's, which the writer's item borrows (the table
             * lives to the end of the recording, rec_item_free) */
            rec_item *it = calloc(1, sizeof *it);
            struct rec_stack_frames *kept =
                malloc(sizeof *kept + (size_t)n * sizeof(void *) + (size_t)npy * sizeof *py);
            if (!it || !kept) {
                free(it);
                free(kept);
                break;
            }
            kept->n = (uint32_t)n, kept->npy = (uint32_t)npy;
            memcpy(kept->pcs, pcs, (size_t)n * sizeof(void *));
            if (npy) memcpy(kept->pcs + n, py, (size_t)npy * sizeof *py);
            id = ++rec_g.nstacks;
            it->type = REC_I_STACK;
            it->id = id;
            it->n = (size_t)n;
            it->p = kept->pcs;
            it->n2 = (size_t)npy;
            it->p2 = npy ? (void *)(kept->pcs + n) : NULL;
            rec_item_push(it);
            rec_g.stab[i].frames = kept;
            atomic_store_explicit(&rec_g.stab[i].id, id, memory_order_relaxed);
            atomic_store_explicit(&rec_g.stab[i].key, key, memory_order_release);
            break;
        }
    }
    if (id == 0) atomic_fetch_add(&rec_g.stack_table_full, 1);
    app_unlock();
    return id;
}

/* Called by the rec_* entry points (rec_event, rec_oom), so frames [0] and [1] of a walk are
 * the recorder's. Its own frame pointer (__builtin_frame_address makes the compiler set one up
 * here, before anything below runs) gives the memo's key: the address of this frame, whose two
 * words above are the entry point's rbp and the return address into it (rec_unwind.h).
 * The walk goes own_depth frames further than the N asked for; the frames in gpumem's own code
 * at its top are then left out (rec_add_own_code), and what follows is cut to N. A walk that
 * met more of them than own_depth, and so kept fewer than N of the program's, raises own_depth
 * and walks again (once for each deeper path of gpumem's: a few times a run). */
static __attribute__((noinline)) uint32_t capture_stack(void) {
    void *pcs[REC_MAX_FRAMES + REC_OWN_FRAMES_MAX + 2];
    void **f;
    int n;
    const uint64_t *fp = __builtin_frame_address(0);
    int depth = atomic_load_explicit(&own_depth, memory_order_relaxed);
    int walk = rec_g.stacks + depth; /* frames from the entry point's caller on */
    rec_unw *m = rec_unw_tls;
    rec_unw_ent *e = m && m->frames == walk && !rec_g.no_unw_memo
                         ? rec_unw_lookup(m, (uint64_t)(uintptr_t)fp, fp[1])
                         : NULL;
    rec_pyframes_fn pfn = atomic_load_explicit(&py_fn, memory_order_acquire);
    const uint32_t gen = atomic_load_explicit(&rec_g.gen, memory_order_relaxed);
    /* the same frames as last time, no Python frames: the same stack id, while the recording
     * that gave it lasts (forget_state bumps gen when it empties the stack table) */
    if (e && !pfn && e->id && e->id_gen == gen) {
        m->hits++;
        return e->id;
    }
    const int nown = atomic_load_explicit(&n_own, memory_order_acquire);
    int skip = 0;
    if (e) {
        f = e->pcs;
        n = (int)e->npcs;
        m->hits++;
        while (skip < n && own_pc((uint64_t)(uintptr_t)f[skip], nown))
            skip++;
    } else {
        for (;;) {
            n = unw_backtrace(pcs, walk + 2);
            if (n < 2) n = 2;
            f = pcs + 2;
            n -= 2;
            skip = 0;
            while (skip < n && own_pc((uint64_t)(uintptr_t)f[skip], nown))
                skip++;
            if (skip <= depth || n < walk || depth >= REC_OWN_FRAMES_MAX) break;
            depth = skip < REC_OWN_FRAMES_MAX ? skip : REC_OWN_FRAMES_MAX;
            int was = atomic_load_explicit(&own_depth, memory_order_relaxed);
            while (was < depth && !atomic_compare_exchange_weak_explicit(
                                      &own_depth, &was, depth, memory_order_relaxed,
                                      memory_order_relaxed)) {
            }
            walk = rec_g.stacks + depth;
        }
        if (!rec_g.no_unw_memo)
            rec_unw_learn(&rec_unw_tls, walk, (uint64_t)(uintptr_t)fp, fp[1], f, n);
        rec_stack_walked |= REC_WALKED_UNWIND;
    }
    f += skip;
    n -= skip;
    if (n > rec_g.stacks) n = rec_g.stacks;
    /* Python frames: they replace the interpreter's own native frames (rec.h) */
    rec_pyframe py[REC_MAX_PY_FRAMES];
    int npy = 0;
    if (pfn) {
        npy = pfn(py, REC_MAX_PY_FRAMES);
        if (npy < 0 || npy > REC_MAX_PY_FRAMES) npy = 0;
        if (npy)
            for (int i = 0; i < n; i++)
                if ((uint64_t)(uintptr_t)f[i] >= py_lo && (uint64_t)(uintptr_t)f[i] < py_hi) {
                    n = i;
                    break;
                }
    }
    if (n == 0 && npy == 0) return 0;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n ^ ((uint64_t)npy << 32);
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)(uintptr_t)f[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    for (int i = 0; i < npy; i++) {
        h ^= (uint64_t)py[i].function | (uint64_t)py[i].line << 32;
        h *= 0xff51afd7ed558ccdull;
        h ^= (uint64_t)py[i].file;
        h *= 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 33;
    }
    uint64_t key = GM_NARROW_HASH(h) | 1;
    uint64_t i = key & rec_g.stab_mask;
    uint32_t id = 0;
    int found = 0;
    for (int probe = 0; probe < 64; probe++, i = (i + 1) & rec_g.stab_mask) {
        uint64_t k = atomic_load_explicit(&rec_g.stab[i].key, memory_order_acquire);
        /* the frames decide: another stack of the same hash is another entry */
        if (k == key && stack_is(rec_g.stab[i].frames, f, n, py, npy)) {
            id = atomic_load_explicit(&rec_g.stab[i].id, memory_order_relaxed);
            found = 1;
            break;
        }
        if (k == 0) break;
    }
    if (!found) id = stack_id_slow(key, f, n, py, npy);
    if (e && !npy && id) e->id = id, e->id_gen = gen;
    return id;
}

/* ---------------------------------------------------------------- the hot path */

/* emit's with_stack bit: the event belongs to none of the thread's open ranges (rec_event) */
#define EMIT_NO_RANGE 2

static inline __attribute__((always_inline)) uint64_t emit(rec_tls *t, unsigned kind, int device,
                                                           uint64_t stream, uint64_t addr,
                                                           uint64_t size, uint64_t requested,
                                                           uint64_t alloc_id, int with_stack) {
    uint64_t t0 = rec_ticks();
    uint32_t d = t->depth < REC_TLS_DEPTH ? t->depth : REC_TLS_DEPTH;
    uint32_t range = d && !(with_stack & EMIT_NO_RANGE) ? t->ranges[d - 1] : 0;
    uint32_t stack = 0;
    if ((with_stack & 1) && rec_g.stacks) stack = t->held ? t->held_stack : capture_stack();
    /* the record is written into its slot (rec_ring_claim), or, when the ring is full, built
     * here and pushed (rec_ring_push waits for room or drops) */
    uint64_t pos, seq;
    rec_slot *s = rec_ring_claim(&rec_g.ring, &pos);
    rec_rec tmp, *r = s ? &s->r : &tmp;
    r->t = t0;
    r->addr = addr;
    r->size = size;
    r->requested = requested;
    r->alloc_id = alloc_id;
    r->stream = stream;
    r->kind = (uint16_t)kind;
    r->device = (int16_t)device;
    r->thread = t->thread;
    r->stack = stack;
    r->range = range;
    if (s) seq = rec_ring_publish(&rec_g.ring, s, pos);
    else seq = rec_ring_push(&rec_g.ring, &tmp);
    if (__builtin_expect((++t->sample & 63) == 0, 0)) {
        /* in ticks; the writer converts */
        atomic_fetch_add_explicit(&rec_g.app_ns_sum, rec_ticks() - t0, memory_order_relaxed);
        atomic_fetch_add_explicit(&rec_g.app_ns_samples, 1, memory_order_relaxed);
    }
    return seq;
}

void rec_event(unsigned kind, int device, uint64_t stream, uint64_t addr, uint64_t size,
               uint64_t requested, uint64_t alloc_id) {
    if (!ready()) return;
    unsigned k = kind & 0xffu;
    /* REC_LAUNCH records have their own layout (rec_internal.h): only rec_launch writes them.
     * PyTorch's kinds are the merge's, except an empty_cache gpumem's own allocator made
     * (gpumem_empty_cache: 36 flagged REC_F_FRAMEWORK) and a fraction it applied
     * (gpumem_torch_memory_fraction: 37 flagged REC_F_FRAMEWORK) and a reset of PyTorch's peaks it
     * made (gpumem_torch_reset_peak_stats: 38 flagged REC_F_FRAMEWORK); its allocator's markers
     * (39, 40), synchronizations (41) and forgotten streams (42) come after them */
    if (k == 0 ||
        (k >= REC_KIND_MAX_ && k != REC_TORCH_EMPTY_CACHE && k != REC_TORCH_MEMORY_FRACTION &&
         k != REC_TORCH_RESET_PEAK &&
         k != REC_MARKER_RECORD && k != REC_MARKER_DONE && k != REC_ALLOC_SYNC && k != REC_STREAM_FORGET &&
         k != REC_ALLOC_WAIT) ||
        k == REC_LAUNCH)
        return;
    /* a free made by gpumem's exit hooks (a PyTorch cache emptied, REC_F_HOST_CACHE /
     * REC_F_TORCH_CACHE): after the program ended, so in none of its phases, whatever range it
     * left open (an OOM leaves its step's open): recorded with range 0, so that no reader takes
     * it for that step's */
    unsigned f = kind & REC_F_FLAGS_MASK;
    int no_range = __builtin_expect((f & REC_F_HOST_CACHE) != 0, 0) &&
                   (rec_is_host_cache_free(k, f) || rec_is_workspace_free(k, f));
    emit(my_tls(), kind & (0xffu | REC_F_FLAGS_MASK), device, stream, addr, size, requested,
         alloc_id, 1 | (no_range ? EMIT_NO_RANGE : 0));
}

/* The stack is taken here, before the caller takes the lock inside which its events are
 * written (the allocator's, for a free's event; pm_order): a walk that misses the memo costs
 * ~1,900 instructions, which every other thread freeing would otherwise wait out. */
__attribute__((noinline)) int rec_stack_hold(void) {
    if (!ready() || !rec_g.stacks) return 0;
    rec_tls *t = my_tls();
    if (t->held) return 0; /* an outer hold's stack is this call's too */
    t->held_stack = capture_stack();
    t->held = 1;
    return 1;
}

void rec_stack_release(int held) {
    if (held) tls.held = 0;
}

/* Access tracking. The encoding (word records first, then the launch record, tied by a
 * per-thread tag) is described in rec_internal.h. Cost: one claim of the ring for all of a
 * launch's records, written in place, no lock, no allocation, no stack capture (the launch's
 * position in the event order and its NVTX range say where it was; a stack per launch would cost
 * microseconds). A kernel's words carry no access bytes, so a record's t holds a sixth word:
 * PyTorch's foreach launches pass hundreds of words, and a record is ~20 instructions however
 * many of its fields are words. */

/* Chunk `chunk` of li's n words (from word i, per a record) into r. */
__attribute__((always_inline)) static inline void launch_words_fill(rec_rec *r, const rec_launch_info *li, size_t i,
                                                                   size_t n, size_t per, uint32_t thread,
                                                                   uint32_t tag, uint32_t chunk) {
    size_t k = n - i < per ? n - i : per;
    /* the first five words of a chunk are the record's five consecutive fields addr .. stream */
    _Static_assert(offsetof(rec_rec, stream) - offsetof(rec_rec, addr) ==
                       (REC_WORDS_PER_REC - 1) * sizeof(uint64_t),
                   "REC_R_WORDS: the words fill addr, size, requested, alloc_id, stream");
    uint64_t v[REC_WORDS_PER_REC_T] = {0};
    const uint64_t *w = li->words + i;
    if (__builtin_expect(k < per, 0)) {
        memcpy(v, w, k * sizeof(uint64_t));
        w = v;
    }
    memcpy(&r->addr, w, REC_WORDS_PER_REC * sizeof(uint64_t));
    if (li->access) {
        uint64_t acc = 0;
        for (size_t j = 0; j < k; j++) acc |= (uint64_t)li->access[i + j] << (8 * j);
        r->t = acc;
    } else {
        r->t = w[REC_WORDS_PER_REC]; /* the sixth word (0 past the last) */
    }
    r->kind = REC_R_WORDS;
    r->device = (int16_t)(k | (li->access ? 0u : REC_WORDS_T_WORD));
    r->thread = thread;
    r->stack = tag;
    r->range = chunk;
}

/* The launch record itself, after its words. */
static inline void launch_fill(rec_rec *r, const rec_launch_info *li, const rec_tls *t, uint32_t tag, size_t n) {
    r->t = rec_ticks();
    r->addr = li->func;
    r->size = li->bytes;
    r->requested = (uint64_t)(uintptr_t)li->timing;
    r->alloc_id = (uint64_t)li->name | (uint64_t)tag << 32;
    r->stream = li->stream;
    r->kind = REC_LAUNCH;
    r->device = (int16_t)li->device;
    r->thread = t->thread;
    r->stack = (uint32_t)n | (li->op & REC_LAUNCH_OP_MASK) << 24 | (li->unread ? REC_LAUNCH_UNREAD : 0u);
    uint32_t d = t->depth < REC_TLS_DEPTH ? t->depth : REC_TLS_DEPTH;
    r->range = d ? t->ranges[d - 1] : 0;
}

uint64_t rec_launch(const rec_launch_info *li) {
    if (!ready() || !li) return 0;
    rec_tls *t = my_tls();
    uint32_t tag = ++t->launch_tag;
    size_t n = li->words ? li->nwords : 0;
    if (n > REC_LAUNCH_MAX_WORDS) n = REC_LAUNCH_MAX_WORDS; /* 128 MiB of arguments: never */
    size_t per = li->access ? REC_WORDS_PER_REC : REC_WORDS_PER_REC_T;
    size_t nrec = (n + per - 1) / per + 1;
    rec_ring *q = &rec_g.ring;
    /* the ring's slots and mask in locals (read before the claim, which reads them too), each
     * turn stored here: through rec_ring_publish_n the release stores had both loaded again twice
     * a record; the wake it makes at the last record is made once, after the launch's
     * (rec_ring_published_n) */
    rec_slot *const slots = q->slots;
    const uint64_t mask = q->mask;
    uint64_t pos = rec_ring_claim_n(q, nrec);
    if (__builtin_expect(pos != UINT64_MAX, 1)) { /* the usual: room for all, written in place */
        uint32_t chunk = 0;
        size_t i = 0;
        if (!li->access) { /* a kernel's full records of six words: nothing but copies */
            const uint64_t *w = li->words;
            uint32_t thread = t->thread;
            for (; i + REC_WORDS_PER_REC_T <= n; i += REC_WORDS_PER_REC_T, chunk++) {
                rec_slot *s = &slots[(pos + chunk) & mask];
                memcpy(&s->r.addr, w + i, REC_WORDS_PER_REC * sizeof(uint64_t));
                s->r.t = w[i + REC_WORDS_PER_REC];
                s->r.kind = REC_R_WORDS;
                s->r.device = (int16_t)(REC_WORDS_PER_REC_T | REC_WORDS_T_WORD);
                s->r.thread = thread;
                s->r.stack = tag;
                s->r.range = chunk;
                atomic_store_explicit(&s->turn, pos + chunk + 1, memory_order_release);
            }
            if (i < n) { /* the last 1..5 words, zeros after them (t: the sixth, always 0 here) */
                _Static_assert(REC_WORDS_PER_REC == 5, "the partial record's copy is of up to five words");
                rec_slot *s = &slots[(pos + chunk) & mask];
                rec_rec *r = &s->r;
                uint64_t v[REC_WORDS_PER_REC] = {0};
                switch (n - i) { /* a copy of variable length cost a small launch ~25 instructions */
                case 5: v[4] = w[i + 4]; __attribute__((fallthrough));
                case 4: v[3] = w[i + 3]; __attribute__((fallthrough));
                case 3: v[2] = w[i + 2]; __attribute__((fallthrough));
                case 2: v[1] = w[i + 1]; __attribute__((fallthrough));
                default: v[0] = w[i];
                }
                memcpy(&r->addr, v, sizeof v);
                r->t = 0;
                r->kind = REC_R_WORDS;
                r->device = (int16_t)((n - i) | REC_WORDS_T_WORD);
                r->thread = thread;
                r->stack = tag;
                r->range = chunk;
                atomic_store_explicit(&s->turn, pos + chunk + 1, memory_order_release);
                i = n, chunk++;
            }
        }
        for (; i < n; i += per, chunk++) { /* copies' records, with access bytes (a kernel's are all above) */
            rec_slot *s = &slots[(pos + chunk) & mask];
            launch_words_fill(&s->r, li, i, n, per, t->thread, tag, chunk);
            atomic_store_explicit(&s->turn, pos + chunk + 1, memory_order_release);
        }
        rec_slot *s = &slots[(pos + chunk) & mask];
        launch_fill(&s->r, li, t, tag, n);
        atomic_store_explicit(&s->turn, pos + chunk + 1, memory_order_release);
        return rec_ring_published_n(q, pos, nrec);
    }
    /* no room for all of them now (or more than a quarter of the ring): built here and pushed in
     * batches of REC_LAUNCH_BATCH, rec_ring_push_n waiting for room or dropping */
    enum { REC_LAUNCH_BATCH = 8 };
    rec_rec rs[REC_LAUNCH_BATCH];
    size_t nr = 0;
    uint32_t chunk = 0;
    for (size_t i = 0; i < n; i += per, chunk++) {
        launch_words_fill(&rs[nr++], li, i, n, per, t->thread, tag, chunk);
        /* a dropped chunk is noticed by the writer (gap in the chunk numbers): no check here */
        if (nr == REC_LAUNCH_BATCH) {
            rec_ring_push_n(q, rs, nr);
            nr = 0;
        }
    }
    launch_fill(&rs[nr++], li, t, tag, n);
    return rec_ring_push_n(q, rs, nr);
}

void rec_set_timing_resolver(rec_timing_fn fn) {
    atomic_store_explicit(&rec_g.timing_fn, fn, memory_order_release);
}

/* Observations, not events: they never open the recording (ready() would, lazily). Nothing
 * recorded yet is seq 0 and no clock; and a forked child where gpumem is off (preload/core.c's
 * gm_forked_child) but the recorder waits to open (GPUMEM_FORK on: REC_ST_NEW) must open
 * nothing when PyTorch's trace hook or _torch.py asks (preload/torch_trace.c). */
uint64_t rec_time_ns(void) {
    if (!rec_enabled()) return 0;
    return rec_ticks_to_ns(&rec_g, rec_ticks());
}

uint64_t rec_last_seq(void) {
    if (!rec_enabled()) return 0;
    return rec_ring_last_seq(&rec_g.ring);
}

uint64_t rec_last_seq_ticks(uint64_t *ticks) {
    if (atomic_load_explicit(&rec_g.state, memory_order_acquire) != REC_ST_OPEN) {
        *ticks = 0;
        return 0;
    }
    uint64_t seq = rec_ring_last_seq(&rec_g.ring); /* seq before time, as rec_last_seq's callers */
    *ticks = rec_ticks();
    return seq;
}

void rec_last_seq_ticks_into(uint64_t *st) {
    if (atomic_load_explicit(&rec_g.state, memory_order_acquire) != REC_ST_OPEN) {
        st[0] = st[1] = 0;
        return;
    }
    st[0] = rec_ring_last_seq(&rec_g.ring); /* seq before time */
    st[1] = rec_ticks();
}

uint64_t rec_ticks_ns(uint64_t ticks) {
    return ticks ? rec_ticks_to_ns(&rec_g, ticks) : 0;
}

/* ---------------------------------------------------------------- ranges, names */

/* A range's or a name's record: its fields, the rest zero. */
static inline void record_fill(rec_rec *r, uint32_t thread, unsigned kind, uint64_t addr, uint64_t size,
                               uint64_t requested, uint64_t alloc_id) {
    *r = (rec_rec){.t = rec_ticks(), .addr = addr, .size = size, .requested = requested,
                   .alloc_id = alloc_id, .kind = (uint16_t)kind, .thread = thread};
}

/* Written in the slot it claims (rec_ring_claim), not built on the stack and copied: a module's
 * range is a pop and a push, ~90 a tiny PyTorch step (tests/bench/README.md, "Eighth pass").
 * A full ring: built here, and rec_ring_push waits or drops as for any record. */
static uint64_t push_record(unsigned kind, uint64_t addr, uint64_t size, uint64_t requested,
                            uint64_t alloc_id) {
    rec_tls *t = my_tls();
    rec_ring *q = &rec_g.ring;
    uint64_t pos;
    rec_slot *s = rec_ring_claim(q, &pos);
    if (__builtin_expect(s != NULL, 1)) {
        record_fill(&s->r, t->thread, kind, addr, size, requested, alloc_id);
        return rec_ring_publish(q, s, pos);
    }
    rec_rec r;
    record_fill(&r, t->thread, kind, addr, size, requested, alloc_id);
    return rec_ring_push(q, &r);
}

/* name_sid: the name's id when the caller has it (rec_range_push_sid), else 0 and name interned */
/* The thread's innermost open range (0: none, or deeper than the ranges kept), a push's parent */
static inline uint32_t range_parent(const rec_tls *t) {
    uint32_t d = t->depth < REC_TLS_DEPTH ? t->depth : REC_TLS_DEPTH;
    return d ? t->ranges[d - 1] : 0;
}

/* A range opened on the thread: one level deeper, its id kept while the level is one kept */
static inline int range_enter(rec_tls *t, uint32_t id) {
    if (t->depth < REC_TLS_DEPTH) t->ranges[t->depth] = id;
    return (int)++t->depth;
}

static int range_push(const char *domain, const char *name, uint32_t name_sid) {
    if (!ready()) return -1;
    rec_tls *t = my_tls();
    uint32_t parent = range_parent(t);
    uint32_t id = 0; /* GPUMEM_NVTX=0: the level is kept (a pop answers as NVTX does), no range */
    if (rec_g.ranges) {
        id = (uint32_t)(atomic_fetch_add(&rec_g.nranges, 1) + 1);
        push_record(REC_R_RANGE_PUSH, id, parent, intern(domain),
                    name_sid ? name_sid : intern(name ? name : ""));
    }
    return range_enter(t, id);
}

int rec_range_push(const char *domain, const char *name) { return range_push(domain, name, 0); }

int rec_range_push_sid(uint32_t name_sid, const char *name) { return range_push(NULL, name, name_sid); }

uint32_t rec_generation(void) { return atomic_load_explicit(&rec_g.gen, memory_order_relaxed); }

int rec_range_pop(void) {
    if (!ready()) return -1;
    rec_tls *t = my_tls();
    if (t->depth == 0) return -1;
    uint32_t level = t->depth;
    t->depth--;
    if (t->depth < REC_TLS_DEPTH && t->ranges[t->depth])
        push_record(REC_R_RANGE_POP, t->ranges[t->depth], 0, 0, 0);
    return (int)level;
}

/* rec_range_pop then rec_range_push_sid, the two records claimed together (one CAS); the same
 * records, ids, parents and depths as the two calls. */
int rec_range_swap_sid(uint32_t name_sid, const char *name) {
    if (!ready()) return -1;
    rec_tls *t = my_tls();
    uint32_t popped = 0;
    if (t->depth) {
        t->depth--;
        if (t->depth < REC_TLS_DEPTH) popped = t->ranges[t->depth];
    }
    if (!popped || !rec_g.ranges) { /* a record or none: as the two calls make it */
        if (popped) push_record(REC_R_RANGE_POP, popped, 0, 0, 0);
        return range_push(NULL, name, name_sid);
    }
    uint32_t parent = range_parent(t);
    uint32_t id = (uint32_t)(atomic_fetch_add(&rec_g.nranges, 1) + 1);
    uint32_t sid = name_sid ? name_sid : intern(name ? name : "");
    rec_ring *q = &rec_g.ring;
    uint64_t pos = rec_ring_claim_n(q, 2);
    if (__builtin_expect(pos != UINT64_MAX, 1)) {
        record_fill(&q->slots[pos & q->mask].r, t->thread, REC_R_RANGE_POP, popped, 0, 0, 0);
        rec_ring_publish_n(q, pos, 0, 2);
        record_fill(&q->slots[(pos + 1) & q->mask].r, t->thread, REC_R_RANGE_PUSH, id, parent, 0, sid);
        rec_ring_publish_n(q, pos, 1, 2);
    } else {
        push_record(REC_R_RANGE_POP, popped, 0, 0, 0);
        push_record(REC_R_RANGE_PUSH, id, parent, 0, sid);
    }
    return range_enter(t, id);
}

uint64_t rec_range_start(const char *domain, const char *name) {
    if (!ready() || !rec_g.ranges) return 0;
    uint32_t id = (uint32_t)(atomic_fetch_add(&rec_g.nranges, 1) + 1);
    push_record(REC_R_RANGE_START, id, 0, intern(domain), intern(name ? name : ""));
    return id;
}

void rec_range_end(uint64_t id) {
    if (!ready() || id == 0) return;
    push_record(REC_R_RANGE_END, id, 0, 0, 0);
}

void rec_mark(const char *domain, const char *name) {
    if (!ready() || !rec_g.ranges) return;
    rec_tls *t = my_tls();
    uint32_t d = t->depth < REC_TLS_DEPTH ? t->depth : REC_TLS_DEPTH;
    uint32_t id = (uint32_t)(atomic_fetch_add(&rec_g.nranges, 1) + 1);
    push_record(REC_R_MARK, id, d ? t->ranges[d - 1] : 0, intern(domain), intern(name ? name : ""));
}

void rec_thread_name(uint64_t tid, const char *name) {
    if (!ready() || !name) return;
    size_t n = strlen(name);
    rec_item *it = calloc(1, sizeof *it + n + 1);
    if (!it) return;
    it->type = REC_I_THREAD_NAME;
    it->a = tid;
    memcpy(it->text, name, n + 1);
    app_lock();
    rec_item_push(it);
    app_unlock();
}

void rec_name(uint64_t addr, const char *name) {
    if (!ready() || !name || !rec_g.names) return;
    push_record(REC_R_NAME, addr, 0, 0, intern(name));
}

/* ---------------------------------------------------------------- snapshots, OOM, stats, meta */

int rec_snapshot(enum rec_snap_reason reason, const rec_segment *segs, size_t nsegs,
                 const rec_block *blocks, size_t nblocks) {
    if (!ready()) return -1;
    if ((nsegs && !segs) || (nblocks && !blocks)) return -1;
    rec_item *it = calloc(1, sizeof *it);
    void *s = nsegs ? malloc(nsegs * sizeof *segs) : NULL;
    void *b = nblocks ? malloc(nblocks * sizeof *blocks) : NULL;
    if (!it || (nsegs && !s) || (nblocks && !b)) {
        free(it), free(s), free(b);
        return -1;
    }
    if (nsegs) memcpy(s, segs, nsegs * sizeof *segs);
    if (nblocks) memcpy(b, blocks, nblocks * sizeof *blocks);
    it->type = REC_I_SNAPSHOT;
    it->id = rec_ring_last_seq(&rec_g.ring);
    it->a = (uint64_t)reason;
    it->b = rec_ticks();
    it->n = nsegs;
    it->n2 = nblocks;
    it->p = s;
    it->p2 = b;
    app_lock();
    rec_item_push(it);
    app_unlock();
    return 0;
}

void rec_oom(const rec_oom_info *info) {
    if (!ready() || !info) return;
    rec_item *it = calloc(1, sizeof *it);
    rec_oom_info *c = malloc(sizeof *c);
    uint64_t seq = emit(my_tls(), REC_OOM | (info->flags & (REC_F_OOM_FRACTION | REC_F_OOM_KEY)), info->device, info->stream, 0, info->requested,
                        info->requested, 0, 1);
    if (!it || !c || seq == 0) {
        free(it), free(c);
        return;
    }
    *c = *info;
    /* the name travels as a string id (interned like range names); the copy keeps no pointer */
    c->name = NULL;
    it->a = info->name && rec_g.names ? intern(info->name) : 0;
    it->type = REC_I_OOM;
    it->id = seq;
    it->p = c;
    app_lock();
    rec_item_push(it);
    app_unlock();
}

static void meta_item(const char *key, const char *value, int is_int) {
    size_t kn = strlen(key), vn = strlen(value);
    rec_item *it = calloc(1, sizeof *it + kn + vn + 2);
    if (!it) return;
    it->type = REC_I_META;
    it->a = (uint64_t)is_int;
    it->n = kn;
    memcpy(it->text, key, kn + 1);
    memcpy(it->text + kn + 1, value, vn + 1);
    app_lock();
    rec_item_push(it);
    app_unlock();
}

void rec_meta(const char *key, const char *value) {
    if (!ready() || !key || !value) return;
    meta_item(key, value, 0);
}

void rec_stats(const rec_alloc_stats *st) {
    if (!ready() || !st) return;
    const struct { const char *k; uint64_t v; } kv[] = {
        {"stat.peak_allocated", st->peak_allocated}, {"stat.peak_reserved", st->peak_reserved},
        {"stat.allocated_now", st->allocated_now},   {"stat.reserved_now", st->reserved_now},
        {"stat.n_alloc", st->n_alloc},               {"stat.n_free", st->n_free},
        {"stat.cache_hits", st->cache_hits},         {"stat.cache_misses", st->cache_misses},
        {"stat.driver_alloc_calls", st->driver_alloc_calls},
        {"stat.driver_free_calls", st->driver_free_calls},
        {"stat.driver_map_calls", st->driver_map_calls},
        {"stat.driver_unmap_calls", st->driver_unmap_calls},
        {"stat.n_oom", st->n_oom},                   {"stat.foreign_frees", st->foreign_frees},
        {"stat.double_frees", st->double_frees},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        char v[32];
        snprintf(v, sizeof v, "%llu", (unsigned long long)kv[i].v);
        meta_item(kv[i].k, v, 1);
    }
    uint64_t total = 0;
    for (size_t i = 0; i < 32 && st->driver_call_names[i]; i++) {
        char k[80], v[32];
        snprintf(k, sizeof k, "stat.driver.%s", st->driver_call_names[i]);
        snprintf(v, sizeof v, "%llu", (unsigned long long)st->driver_calls[i]);
        meta_item(k, v, 1);
        total += st->driver_calls[i];
    }
    if (st->driver_call_names[0]) {
        char v[32];
        snprintf(v, sizeof v, "%llu", (unsigned long long)total);
        meta_item("stat.driver_calls", v, 1);
    }
}

/* ---------------------------------------------------------------- fork */

/* Drops everything that belongs to the recording in progress (ring contents, ids, queued
 * items) without touching SQLite. Used by a forked child and by tests. */
static void forget_state(rec_state *g) {
    g->db = NULL;
    rec_item *it = g->items;
    while (it) {
        rec_item *n = it->next;
        rec_item_free(it);
        it = n;
    }
    g->items = NULL;
    g->items_tail = &g->items;
    if (g->ring.slots) rec_ring_reset(&g->ring);
    if (g->stab) { /* after the items, which borrow the frames of their stacks */
        for (uint64_t i = 0; i <= g->stab_mask; i++) free((void *)g->stab[i].frames);
        memset(g->stab, 0, (g->stab_mask + 1) * sizeof *g->stab);
    }
    g->nstacks = 0;
    strtab_clear();
    atomic_store(&g->nthreads, 0);
    atomic_store(&g->nranges, 0);
    atomic_store(&g->app_ns_sum, 0);
    atomic_store(&g->app_ns_samples, 0);
    atomic_store(&g->committed_seq, 0);
    atomic_store(&g->flush_seq, 0);
    atomic_store(&g->flush_req, 0);
    atomic_store(&g->flush_done, 0);
    atomic_store(&g->writer_failed, 0);
    atomic_store(&g->writer_stop, 0);
    atomic_fetch_add(&g->gen, 1);
}

static int fork_held;

static void atfork_prepare(void) {
    /* Quiesce the writer so that no SQLite call (and none of SQLite's global mutexes) is in
     * flight at the fork; the child then can open its own database safely. */
    fork_held = atomic_load(&rec_g.state) == REC_ST_OPEN;
    /* the writer is parked until the fork is done, and a producer waiting for room may hold a
     * lock the other fork handlers take: such producers drop instead (rec_ring.h) */
    if (fork_held) atomic_fetch_or(&rec_g.ring.no_wait, REC_RING_FORKING);
    /* from here to the parent's or child's handler: a section of both locks (rec_close_ending) */
    sect_enter();
    if (fork_held) pthread_mutex_lock(&rec_g.db_lock);
    pthread_mutex_lock(&rec_g.lock);
    atomic_signal_fence(memory_order_seq_cst);
    sect.owns |= REC_HOLD_LOCK | (fork_held ? REC_HOLD_DB : 0);
    if (__builtin_expect(test_sig_how != 0, 0)) test_signal_in_section(REC_HOLD_DB);
}

static void atfork_parent(void) {
    sect.owns &= ~(REC_HOLD_LOCK | REC_HOLD_DB);
    atomic_signal_fence(memory_order_seq_cst);
    pthread_mutex_unlock(&rec_g.lock);
    if (fork_held) pthread_mutex_unlock(&rec_g.db_lock);
    if (fork_held) atomic_fetch_and(&rec_g.ring.no_wait, ~REC_RING_FORKING);
    sect_leave(); /* a signal that waited for the fork: the parent's, sent again here */
}

static void atfork_child(void) {
    rec_state *g = &rec_g;
    sect.owns &= ~(REC_HOLD_LOCK | REC_HOLD_DB);
    atomic_signal_fence(memory_order_seq_cst);
    pthread_mutex_unlock(&g->lock);
    if (fork_held) pthread_mutex_unlock(&g->db_lock);
    sect_leave(); /* not a signal that waited in the parent (sect_resend: its pid) */
    if (atomic_load(&g->state) != REC_ST_OPEN) return;
    /* The parent's connection, ring contents, ids and items are the parent's: forget them
     * without touching SQLite (closing the copied connection could checkpoint or delete the
     * parent's WAL). The copied connection is deliberately leaked. */
    forget_state(g);
    rec_writer_forget();
    if (g->lock_fd >= 0) close(g->lock_fd);
    g->lock_fd = -1;
    if (g->fork_record) {
        if (!path_is_templated(g->tmpl)) {
            char t[sizeof g->tmpl];
            rec_insert_before_ext(g->tmpl, "-%p", t, sizeof t);
            snprintf(g->tmpl, sizeof g->tmpl, "%s", t);
        }
        g->reopen = 1; /* same settings as the parent, not re-read from the environment */
        atomic_store(&g->state, REC_ST_NEW); /* opens lazily, with the child's pid */
    } else {
        atomic_store(&g->state, REC_ST_OFF);
    }
}

void rec_test_reset(void) {
    rec_close();
    forget_state(&rec_g);
    rec_ring_free(&rec_g.ring); /* the next rec_open sizes it from its options (no producers now) */
    rec_g.tmpl[0] = 0;
    atomic_store(&rec_g.timing_fn, NULL);
    atomic_store(&rec_g.state, REC_ST_NEW);
}
