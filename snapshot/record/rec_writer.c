/* rec_writer.c — the recorder's writer thread: drains the ring into SQLite.
 *
 * Design. One thread owns the SQLite connection. Each round it takes the side items (strings,
 * stacks, threads, snapshots, OOM details, metadata), drains up to a batch of ring records
 * into the open transaction with prepared statements, takes the side items again (so that
 * everything an event refers to is in the same commit), and commits when the transaction is
 * 25 ms old: a process killed with SIGKILL loses at most ~100 ms of events (the fault campaign:
 * 76 ms at worst with every core busy; at 50 ms it lost up to 118 ms there). The database is
 * in WAL mode with synchronous=NORMAL (no fsync per commit; a killed process loses nothing
 * that was committed, only a power cut can).
 *
 * While it goes, the writer derives allocation lifetimes (alloc_life: birth seq, death seq,
 * name) from a hash map of live allocations keyed by address, so no post-pass is needed; at
 * close the allocations still alive get their row with death NULL. It also maps stream
 * handles to small ids, keeps the '/'-joined path of each open NVTX range, and turns captured
 * return addresses into module-relative frames (module path, build-id, offset) with
 * dl_iterate_phdr, so symbolization can happen later, elsewhere, with libdw.
 *
 * Access tracking (rec_launch; encoding in rec_internal.h). Each launch record becomes an
 * `events` row (kind 20) and a `launches` row; its argument words, collected per thread from
 * the word records that precede it, are resolved against the allocations live at the launch's
 * place in the event order: an address-ordered index of the live allocations (addr_index.h,
 * built on the first launch and kept from then on, so recordings without launches pay nothing)
 * gives the allocation starting at or below the word, and the word counts when it lies inside
 * the allocation's held size. Each allocation hit gives one `uses` row per launch, with the
 * access flags of its words OR-ed. Candidates are the allocations the writer pairs frees with:
 * device (alloc, alloc_async), managed, and pinned host memory (host_alloc), since a copy to or
 * from a pinned buffer is a use of that buffer (offload advice needs exactly those).
 *
 * Timing (GPUMEM_USES=timed): a launch with a timing token joins a FIFO. After each round, with
 * db_lock released (the resolver is the preload's code and may take its own locks), the writer
 * asks the resolver about the oldest launches in order until one is not finished; the answers
 * are written in the next round (into the pending `launches` row when it is still buffered,
 * else by writing the row again with its times, batched: one UPDATE per launch cost ~3.5 us). The FIFO holds at most TIMING_BOUND unresolved launches: beyond that the
 * oldest are asked with final = 1 (resolved or given up), so a device that never reports
 * cannot grow it. At close every launch left is asked with final = 1.
 *
 * Fork safety: the writer holds db_lock while it is inside SQLite; the atfork prepare handler
 * takes it, so no SQLite call is ever in flight when the process forks.
 */
#include "snapshot/record/rec_internal.h"
#include "snapshot/record/addr_index.h"
#include "snapshot/record/rec_rows.h"
#include "snapshot/record/bytemap.h" /* bytemap_rekey */
#include "snapshot/record/u64map.h"
#include "snapshot/record/rec_objrange.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BATCH 65536
#define WAIT_NS (10ull * 1000000u) /* longest sleep of the writer between drains */
#define COMMIT_NS (25ull * 1000000u)
#define PEAK_SNAPSHOT_NS (1000ull * 1000000u)
#define TIMING_BOUND 65536 /* unresolved timed launches kept (see the design note above) */

typedef struct live_alloc {
    uint64_t birth, size;
    uint32_t name;
    uint32_t next_free;
} live_alloc;

typedef struct module_ent {
    uint64_t lo, hi, bias;
    char *path;
    char build_id[41];
    int64_t row; /* 0 until inserted */
} module_ent;

/* Events and lifetimes are buffered and inserted EV_MULTI (LIFE_MULTI) rows per statement,
 * read in place through the gm_rows virtual table (rec_rows.h): the per-statement cost of
 * SQLite (step, reset, VDBE setup) is paid once for many rows, and no cell is bound.
 * The columns that often repeat through a batch (one device, stream and thread; no stack; the
 * same NVTX range; seq appended without a gap) are given once, as parameters, when they do
 * (rec_rows.h, const_cols): one statement per set of repeating columns, EV_VARIANTS
 * (LIFE_VARIANTS) at most, each prepared when first needed. */
#define EV_MULTI 256
#define EV_COLS 13
#define EV_SAME_COLS (1u << 0 | 1u << 4 | 1u << 5 | 1u << 6 | 1u << 11 | 1u << 12)
#define EV_VARIANTS 64 /* 2^(bits of EV_SAME_COLS) */
#define LIFE_MULTI 256
#define LIFE_SAME_COLS (1u << 2)
#define LIFE_VARIANTS 2
enum {
    S_STRING, S_THREAD, S_STREAM, S_MODULE, S_FRAME, S_STACK, S_RANGE, S_RANGE_END,
    S_NAME, S_OOM, S_SNAPSHOT, S_SEGMENT, S_BLOCK, S_META, S_DEL_SNAP, S_DEL_SEGS,
    S_DEL_BLOCKS, S_THREAD_NAME, S_LAUNCH, S_LAUNCH_MULTI, S_USE,
    S_USE_MULTI, S_LAUNCH_TIME, S_LAUNCH_TIME_MULTI, S_PYFRAME, S_RANGE_MULTI,
    S_EVENT, /* + variant: EV_VARIANTS statements (stmt) */
    S_LIFE = S_EVENT + EV_VARIANTS,
    S_COUNT_ = S_LIFE + LIFE_VARIANTS
};
static const char *const stmt_sql[S_COUNT_] = {
    [S_STRING] = "INSERT OR REPLACE INTO strings VALUES (?,?)",
    [S_THREAD] = "INSERT OR REPLACE INTO threads VALUES (?,?,?)",
    [S_STREAM] = "INSERT OR REPLACE INTO streams VALUES (?,?,?)",
    [S_MODULE] = "INSERT INTO modules VALUES (?,?,?,?,?)",
    [S_FRAME] = "INSERT INTO frames (id, module, offset) VALUES (?,?,?)",
    [S_PYFRAME] = "INSERT INTO frames (id, function, file, line, symbolized, python) "
                  "VALUES (?,?,?,?,1,1)",
    [S_STACK] = "INSERT OR REPLACE INTO stacks VALUES (?,?,?)",
    [S_RANGE] = "INSERT OR REPLACE INTO ranges VALUES (?,?,?,?,?,?,?,?,?)",
    [S_RANGE_END] = "UPDATE ranges SET end_ns = ? WHERE id = ?",
    [S_NAME] = "INSERT OR REPLACE INTO names VALUES (?,?,?,?)",
    [S_OOM] = "INSERT OR REPLACE INTO ooms VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
    [S_SNAPSHOT] = "INSERT INTO snapshots VALUES (?,?,?,?,?)",
    [S_SEGMENT] = "INSERT OR REPLACE INTO segments VALUES (?,?,?,?,?,?,?,?)",
    [S_BLOCK] = "INSERT OR REPLACE INTO blocks VALUES (?,?,?,?,?,?,?)",
    [S_META] = "INSERT OR REPLACE INTO meta VALUES (?,?)",
    [S_DEL_SNAP] = "DELETE FROM snapshots WHERE id = ?",
    [S_DEL_SEGS] = "DELETE FROM segments WHERE snapshot = ?",
    [S_DEL_BLOCKS] = "DELETE FROM blocks WHERE snapshot = ?",
    [S_THREAD_NAME] = "UPDATE threads SET name = ? WHERE tid = ?",
    [S_LAUNCH] = "INSERT INTO launches VALUES (?,?,?,?,?,?)",
    [S_LAUNCH_MULTI] = NULL, /* built at open: RB_MULTI rows */
    [S_USE] = "INSERT INTO uses VALUES (?,?,?,?)",
    [S_USE_MULTI] = NULL, /* built at open: RB_MULTI rows */
    /* the row again, with its times: REPLACE in batches costs a fifth of one UPDATE per row */
    [S_LAUNCH_TIME] = "INSERT OR REPLACE INTO launches VALUES (?,?,?,?,?,?)",
    [S_LAUNCH_TIME_MULTI] = NULL, /* built at open: RB_MULTI rows */
    [S_RANGE_MULTI] = NULL,       /* built at open: RANGE_MULTI rows */
};

/* Rows of the access-tracking tables are buffered and inserted RB_MULTI per statement, like
 * events. RB_NULL in a cell is written as NULL. */
#define RB_MULTI 64
/* Closed ranges wait for a batch of RANGE_MULTI rows (one statement), like those: a statement
 * per range was ~8,000 instructions of the writer, 70 ranges a step of a small PyTorch model */
#define RANGE_MULTI 16
#define RB_COLS 6
#define RB_NULL INT64_MIN
typedef struct rowbuf {
    int s1, sn, cols, n; /* single-row and multi-row statements, columns, rows buffered */
    const char *what;
    int64_t rows[RB_MULTI][RB_COLS];
} rowbuf;

/* A thread's argument words collected for its next launch (see rec_internal.h). */
typedef struct pending_words {
    uint32_t tag;        /* the launch they belong to */
    uint32_t next_chunk; /* chunks 0 .. next_chunk-1 arrived */
    int valid;           /* no chunk missing so far */
    uint32_t n, cap;
    uint64_t *w;
    uint8_t *acc;
} pending_words;

typedef struct use_hit {
    uint64_t birth;
    uint32_t acc;
} use_hit;

enum { TL_PENDING = 0, TL_DONE, TL_NONE };
typedef struct timed_launch {
    uint64_t seq, bytes; /* with op and kernel: the launches row, written again with its times */
    void *token;
    uint64_t start, end;
    uint32_t kernel;
    uint8_t op, state;
} timed_launch;

typedef struct writer {
    sqlite3 *db;
    sqlite3_stmt *st[S_COUNT_];
    int in_txn;
    uint64_t txn_start;
    uint64_t events, last_seq;
    uint64_t device_infos; /* gpumem's own device_info events (24): not the program's */
    uint64_t own_segment_allocs; /* allocations the driver served outside the allocator (pool, graph) */
    uint64_t gpumem_peak_resets; /* PyTorch's peak stats reset by gpumem's allocator, its own (38 flagged 4096) */
    uint64_t dropped_written;
    /* the counts of launches whose uses are unknown, as last written to meta: kept current at
     * each commit (as dropped_events), so that a killed recording still says its uses are
     * incomplete (readers: gm_uses_unknown) */
    uint64_t lost_written, unread_written;
    /* live allocations: addr -> index into la */
    u64map live;
    live_alloc *la;
    uint32_t la_cap, la_used, la_free; /* la_free: 1 + first free index, 0 = none */
    /* streams: key -> id */
    u64map streams;
    uint64_t nstreams;
    uint64_t stream_key1, stream_id1; /* the last stream looked up, key + 1 (0: none) */
    /* open ranges: id -> open_range * (its row until written, its path); how many unwritten */
    u64map open_ranges;
    uint64_t ranges_unwritten;
    /* closed ranges (their rows, end_ns set) waiting for their batch: range_flush */
    struct open_range *closed[RANGE_MULTI];
    int nclosed;
    /* strings by id (writer's own copies, for range paths) */
    char **strs;
    uint32_t nstrs, strs_cap;
    /* frames: absolute pc -> frame id */
    u64map frames;
    uint64_t nframes;
    /* Python frames: hash of (function, file, line) -> index into pyf (each written once) */
    u64map pyframes;
    struct py_frame_ent { uint32_t function, file, line; uint64_t id; } *pyf;
    size_t npyf, pyf_cap;
    module_ent *mods;
    size_t nmods, mods_cap;
    int64_t nmod_rows;
    /* latest not-yet-written peak snapshot per device (item), and the written one's id */
    rec_item *peak_pending[REC_MAX_DEVICES];
    int64_t peak_written_id[REC_MAX_DEVICES];
    uint64_t peak_written_ns[REC_MAX_DEVICES];
    int64_t nsnapshots;
    int failed;
    int setting_up;      /* rec_writer_open_db runs: a failure is its, said once by it */
    char setup_why[512]; /* the first failure while setting up */
    /* Disk full or I/O error: what is committed stays, the failure is written into meta with
     * the room kept by reserve_fd (an unlinked, preallocated file: closing it frees its space
     * for that last commit), and every event popped afterwards is counted as dropped. */
    int reserve_fd;          /* fd + 1 (0: none, so a zeroed writer has none); its first half is
                                freed for the failure commit, the rest at the end for the count
                                of lost events */
    uint64_t lost;           /* events thrown away after the failure */
    rec_state *g;
    u64map tid_names; /* kernel tid -> char * given by rec_thread_name */
    int64_t evbuf[EV_MULTI][EV_COLS]; /* pending event rows; 0 in stack/range means NULL */
    int nev;
    rec_rows ev_rows;                 /* evbuf as gm_rows reads it (seq appends) */
    int64_t lifebuf[LIFE_MULTI][3];   /* pending alloc_life rows; 0 in death/name means NULL */
    int nlife;
    /* access tracking */
    addr_index idx;          /* live allocations by address -> index into la (once idx_on) */
    int idx_on;
    pending_words *pw;       /* by thread number */
    uint32_t npw;
    use_hit *hits;
    uint32_t hits_cap;
    rowbuf launches, uses, retimed; /* retimed: launches rows already inserted, now with times */
    uint64_t n_launches, n_uses, words_lost, unread, untimed;
    timed_launch *tl;        /* FIFO, circular: tl_len entries from tl_head; the first tl_done */
    uint64_t tl_head, tl_len, tl_cap, tl_done; /* of them are resolved, not yet written */
} writer;

static writer W;

/* Bytes kept free for the two commits a failed recording still makes: one page of meta in
 * the WAL each (8 KiB pages plus frame headers). */
#define RESERVE_BYTES (32u << 10)

static void reserve_space(writer *w, const char *db_path) {
    char p[4200];
    snprintf(p, sizeof p, "%s-reserve", db_path);
    w->reserve_fd = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            if (errno == EEXIST) { unlink(p); continue; } /* a crash between open and unlink */
            return;
        }
        unlink(p); /* nothing is left behind, even by kill -9: the space lives with the fd */
        if (posix_fallocate(fd, 0, RESERVE_BYTES) == 0) w->reserve_fd = fd + 1;
        else close(fd);
        return;
    }
}

/* half = 0: free the first half of the reserve (punched out, where the file system can), so
 * that the rest stays for the end; half = 1 (or no hole punching): free all of it. */
static void release_reserve(writer *w, int half) {
    if (w->reserve_fd <= 0) return;
    if (half == 0 && fallocate(w->reserve_fd - 1, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                               RESERVE_BYTES / 2) == 0)
        return;
    close(w->reserve_fd - 1);
    w->reserve_fd = 0;
}

/* Once, at the first failure: roll back what was not committed, free the reserve, and commit
 * state = failed with the reason (errno named: ENOSPC, EIO) and the last event that made it. */

/* The events the ring dropped: its dropped records but a launch's argument-word records (the
 * ring's aux_kind, REC_R_WORDS), which are no events: they are meta dropped_word_records, and
 * their launches' uses unknown (launch_words_lost). Read quiescent at the end; while producers
 * drop, the two counters may be one apart (never below 0). */
static uint64_t ring_dropped_events(const rec_ring *q) {
    uint64_t aux = atomic_load(&q->dropped_aux), all = atomic_load(&q->dropped);
    return all > aux ? all - aux : 0;
}
static void write_failure(writer *w, const char *what) {
    if (!w->db) return;
    int code = sqlite3_extended_errcode(w->db), sys = sqlite3_system_errno(w->db);
    char why[512];
    if ((code & 0xff) == SQLITE_FULL || sys == ENOSPC)
        snprintf(why, sizeof why, "no space left on device (ENOSPC) while %s", what);
    else if ((code & 0xff) == SQLITE_IOERR)
        snprintf(why, sizeof why, "I/O error (%s%s) while %s", sys ? strerror(sys) : "EIO",
                 sys == EIO ? ", EIO" : "", what);
    else
        snprintf(why, sizeof why, "SQLite error while %s: %s", what, sqlite3_errmsg(w->db));
    if (w->setting_up) { /* nothing was committed yet: the set-up says so, and removes the file */
        snprintf(w->setup_why, sizeof w->setup_why, "%s", why);
        if (w->in_txn) sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
        w->in_txn = 0;
        return;
    }
    rec_warn("%s; recording stops here (what was committed stays; the program runs on)", why);
    if (w->in_txn) sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
    w->in_txn = 0;
    release_reserve(w, 0);
    uint64_t at = w->g ? atomic_load(&w->g->committed_seq) : 0;
    /* the records of the rolled-back transaction are lost too: count them with the dropped */
    w->lost += w->last_seq > at ? w->last_seq - at : 0;
    uint64_t dropped = (w->g ? ring_dropped_events(&w->g->ring) : 0) + w->lost;
    uint64_t words = w->g ? atomic_load(&w->g->ring.dropped_aux) : 0;
    char *sql = sqlite3_mprintf("BEGIN; INSERT OR REPLACE INTO meta VALUES ('state', 'failed'), "
                                "('failure', %Q), ('failed_after_seq', %llu), ('dropped_events', %llu), "
                                "('dropped_word_records', %llu); COMMIT;",
                                why, (unsigned long long)at, (unsigned long long)dropped, (unsigned long long)words);
    if (sql && sqlite3_exec(w->db, sql, NULL, NULL, NULL) != SQLITE_OK)
        sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_free(sql);
}

static int sql_fail(writer *w, const char *what) {
    if (!w->failed) {
        w->failed = 1;
        write_failure(w, what);
    }
    return -1;
}

/* The multi-row statements' SQL, built once (multi_sql). */
static char lamulti[RB_MULTI * 16 + 64], umulti[RB_MULTI * 12 + 64], rmulti[RB_MULTI * 16 + 64],
    rgmulti[RANGE_MULTI * 24 + 64];

/* The bits of a set of columns (a subset of cols) packed in the order of cols' bits, and back:
 * the number of a rows statement's variant (S_EVENT + n) and its constant columns. */
static uint32_t bits_pack(uint32_t set, uint32_t cols) {
    uint32_t n = 0;
    for (int k = 0; cols; cols &= cols - 1, k++)
        if (set & cols & -cols) n |= 1u << k;
    return n;
}
static uint32_t bits_expand(uint32_t n, uint32_t cols) {
    uint32_t set = 0;
    for (int k = 0; cols; cols &= cols - 1, k++)
        if ((n >> k) & 1) set |= cols & -cols;
    return set;
}

/* Statement i, prepared on its first use: a short recording uses a third of them (events,
 * strings, ranges, meta...), and preparing all 27 at open was a tenth of its CPU. NULL once the
 * recording failed (SQLite's bind and step calls refuse a NULL statement harmlessly). */
static sqlite3_stmt *stmt(writer *w, int i) {
    if (!w->st[i] && w->db && !w->failed) {
        const char *sql = i == S_LAUNCH_MULTI ? lamulti : i == S_USE_MULTI ? umulti
                        : i == S_LAUNCH_TIME_MULTI ? rmulti : i == S_RANGE_MULTI ? rgmulti : stmt_sql[i];
        char rows_sql[256];
        if (i >= S_EVENT) {
            int ev = i < S_LIFE;
            uint32_t same = ev ? bits_expand((uint32_t)(i - S_EVENT), EV_SAME_COLS)
                               : bits_expand((uint32_t)(i - S_LIFE), LIFE_SAME_COLS);
            rec_rows_sql(rows_sql, sizeof rows_sql, ev ? "events" : "alloc_life", ev ? EV_COLS : 3,
                         same);
            sql = rows_sql;
        }
        if (sqlite3_prepare_v3(w->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &w->st[i], NULL) != SQLITE_OK) {
            sqlite3_finalize(w->st[i]);
            w->st[i] = NULL;
            sql_fail(w, "preparing statements");
        }
    }
    return w->st[i];
}

static int step(writer *w, int s, const char *what) {
    sqlite3_stmt *st = stmt(w, s);
    if (!st) return -1;
    int rc = sqlite3_step(st);
    sqlite3_reset(st); /* every statement binds all its parameters: no clear_bindings */
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return sql_fail(w, what);
    return 0;
}

static int exec(writer *w, const char *sql) {
    /* After a failure only its own two commits write (write_failure, the count at close): a
     * BEGIN here would open a transaction that nothing commits, and the count would go in it. */
    if (w->failed) return -1;
    if (sqlite3_exec(w->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        char what[96];
        snprintf(what, sizeof what, "running %.60s", sql);
        return sql_fail(w, what);
    }
    return 0;
}

static void bind_i(sqlite3_stmt *s, int i, int64_t v) { sqlite3_bind_int64(s, i, v); }
static void bind_opt(sqlite3_stmt *s, int i, int64_t v) {
    if (v) sqlite3_bind_int64(s, i, v);
    else sqlite3_bind_null(s, i);
}
static void bind_t(sqlite3_stmt *s, int i, const char *t) {
    if (t) sqlite3_bind_text(s, i, t, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(s, i);
}

static void meta_int(writer *w, const char *k, int64_t v) {
    bind_t(stmt(w, S_META), 1, k);
    bind_i(stmt(w, S_META), 2, v);
    step(w, S_META, "writing meta");
}
static void meta_text(writer *w, const char *k, const char *v) {
    bind_t(stmt(w, S_META), 1, k);
    bind_t(stmt(w, S_META), 2, v);
    step(w, S_META, "writing meta");
}

/* ---------------------------------------------------------------- open */

static void read_cmdline(char *buf, size_t n) {
    buf[0] = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t r = read(fd, buf, n - 1);
    close(fd);
    if (r <= 0) return;
    for (ssize_t i = 0; i < r; i++)
        if (buf[i] == 0) buf[i] = ' ';
    while (r > 0 && buf[r - 1] == ' ') r--;
    buf[r] = 0;
}

/* meta.argv: the arguments exactly, as a JSON array of strings (meta.cmdline joins them with
 * spaces for people, and cannot be split back: an argument may hold a space, a quote, a
 * newline or nothing). The bytes are the program's own; '"', '\\' and control characters are
 * escaped. NULL when /proc/self/cmdline cannot be read; the caller frees it. */
static char *read_argv_json(void) {
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    size_t cap = 4096, len = 0;
    char *raw = malloc(cap);
    for (ssize_t r; raw; len += (size_t)r) {
        if (len == cap) {
            char *g = cap < (1u << 24) ? realloc(raw, cap * 2) : NULL; /* ARG_MAX is far below */
            if (!g) break;
            raw = g, cap *= 2;
        }
        r = read(fd, raw + len, cap - len);
        if (r <= 0) break;
    }
    close(fd);
    if (!raw) return NULL;
    /* at most 6 bytes per byte (\u00XX), the brackets, the quotes and commas */
    char *js = malloc(len * 6 + 3 * len + 8);
    if (!js) {
        free(raw);
        return NULL;
    }
    size_t o = 0;
    js[o++] = '[';
    for (size_t i = 0; i < len;) { /* each argument ends with its NUL */
        if (o > 1) js[o++] = ',';
        js[o++] = '"';
        for (; i < len && raw[i]; i++) {
            unsigned char c = (unsigned char)raw[i];
            if (c == '"' || c == '\\') js[o++] = '\\', js[o++] = (char)c;
            else if (c == '\n') js[o++] = '\\', js[o++] = 'n';
            else if (c == '\t') js[o++] = '\\', js[o++] = 't';
            else if (c < 0x20 || c == 0x7f) o += (size_t)sprintf(js + o, "\\u%04x", c);
            else js[o++] = (char)c;
        }
        js[o++] = '"';
        i++; /* its NUL */
    }
    js[o++] = ']';
    js[o] = 0;
    free(raw);
    return js;
}

/* The path the program was run through (meta.argv0_path): its argv[0] as the exec found it, a
 * name without '/' looked up in PATH, made absolute with the working directory but with its
 * links kept, since a program may find its surroundings through the path it was run by and
 * not through /proc/self/exe (a virtual environment's python finds pyvenv.cfg beside
 * bin/python, a link to the system's python, whose resolved path runs without the
 * environment). Kept only when its links lead to exe (the program did not rewrite its
 * argv[0]); "" otherwise. cwd: this process's working directory. */
static void argv0_path(const char *exe, const char *cwd, char *out, size_t n) {
    char argv0[1024], cand[4096], real[4096];
    out[0] = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t r = read(fd, argv0, sizeof argv0 - 1);
    close(fd);
    if (r <= 0) return;
    argv0[r] = 0; /* the first NUL ends argv[0] */
    if (!argv0[0] || !exe[0]) return;
    const char *path = strchr(argv0, '/') ? "" : getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin"; /* execvp's default without PATH */
    for (const char *dir = path;;) {
        const char *end = strchr(dir, ':');
        size_t dl = end ? (size_t)(end - dir) : strlen(dir);
        int w;
        if (strchr(argv0, '/')) /* run by its path: relative to the working directory */
            w = argv0[0] == '/' ? snprintf(cand, sizeof cand, "%s", argv0)
                                : snprintf(cand, sizeof cand, "%s/%s", cwd, argv0);
        else if (dl == 0) /* an empty PATH entry is the working directory */
            w = snprintf(cand, sizeof cand, "%s/%s", cwd, argv0);
        else if (dir[0] == '/')
            w = snprintf(cand, sizeof cand, "%.*s/%s", (int)dl, dir, argv0);
        else
            w = snprintf(cand, sizeof cand, "%s/%.*s/%s", cwd, (int)dl, dir, argv0);
        if (w > 0 && (size_t)w < sizeof cand && access(cand, X_OK) == 0 && realpath(cand, real) &&
            !strcmp(real, exe)) {
            snprintf(out, n, "%s", cand);
            return;
        }
        if (!end || strchr(argv0, '/')) return;
        dir = end + 1;
    }
}

/* "<insert> VALUES (?,..),(?,..)..." with rows rows of cols columns. */
static void multi_sql(char *out, size_t n, const char *insert, int rows, int cols) {
    size_t o = (size_t)snprintf(out, n, "%s VALUES ", insert);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            o += (size_t)snprintf(out + o, n - o, "%s%s%s", c ? "," : r ? ",(" : "(", "?",
                                  c == cols - 1 ? ")" : "");
}

/* The empty schema as a database image (sqlite3_serialize inside the first recording's schema
 * transaction, before any meta row), kept for the process's life (168 KB: 21 pages of 8 KiB;
 * reachable). Each later recording of the process (a forked child's own, and each one after
 * rec_test_reset: the tests, tests/fuzz/nvtx_fuzz) starts by writing it into its fresh file:
 * SQLite then parses the schema once, on open, instead of executing its ~25 CREATE statements
 * (each of which updates sqlite_master with a nested statement and parses the schema again):
 * that execution was half of the CPU of a short recording. The image is of a WAL-mode database
 * with the page size, application_id and user_version of a new recording, so the file is known
 * as ours from its first write on, as before. */
static unsigned char *schema_image;
static sqlite3_int64 schema_image_len;

/* 1: the image is in the (empty) file; 0: no image, or it could not be written (disk full): the
 * file is left empty and the recording creates its schema itself. */
static int write_schema_image(rec_state *g) {
    if (!schema_image || g->lock_fd < 0) return 0;
    sqlite3_int64 off = 0;
    while (off < schema_image_len) {
        ssize_t n = pwrite(g->lock_fd, schema_image + off, (size_t)(schema_image_len - off), off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            /* empty again, for the schema's own creation (which then reports a full disk) */
            if (ftruncate(g->lock_fd, 0) != 0) rec_warn("cannot empty %s: %s", g->path, strerror(errno));
            return 0;
        }
        off += n;
    }
    return 1;
}

/* The writer's progress, which the waits on the way out follow (rec.c wait_writer): a close
 * that is slow but moving (a long backlog, a large index at close, a loaded disk) is waited for;
 * one that stopped moving is not. */
static void progress(rec_state *g) {
    atomic_fetch_add_explicit(&g->writer_progress, 1, memory_order_relaxed);
    rec_end_timer_push(g);
}

/* SQLite's progress handler: a single long statement (the index built at close, the lifetimes
 * of a large run) is progress too. Every 10000 virtual machine steps: nothing next to a row's
 * cost. */
static int sqlite_progress(void *g) {
    progress(g);
    return 0;
}

int rec_writer_open_db(rec_state *g) {
    writer *w = &W;
    memset(w, 0, sizeof *w);
    w->g = g;
    for (int i = 0; i < REC_MAX_DEVICES; i++) w->peak_written_id[i] = 0;
    /* SQLite's memory statistics take a global mutex on every malloc; we never read them.
     * (Fails harmlessly when the program already initialized SQLite itself.) */
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    int from_image = write_schema_image(g), replaced = 0;
    /* Not SQLITE_OPEN_NOFOLLOW: it refuses a link anywhere in the path, so a database under a
     * linked directory ($HOME or /scratch often is one) could not be set up at all, after
     * gpumem record's check had let the program run. The rule is about the last name only:
     * create_db_file opened that with O_NOFOLLOW and locks it; what SQLite opened must be that
     * very file, still under its name and not a link put there since. */
    int rc = sqlite3_open_v2(g->path, &w->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    w->setting_up = 1;
    if (rc != SQLITE_OK) {
        snprintf(w->setup_why, sizeof w->setup_why, "SQLite cannot open it: %s",
                 w->db ? sqlite3_errmsg(w->db) : sqlite3_errstr(rc));
        goto fail;
    }
    sqlite3_progress_handler(w->db, 10000, sqlite_progress, g);
    struct stat named, locked;
    if (lstat(g->path, &named) != 0 || fstat(g->lock_fd, &locked) != 0 || !S_ISREG(named.st_mode) ||
        named.st_dev != locked.st_dev || named.st_ino != locked.st_ino) {
        snprintf(w->setup_why, sizeof w->setup_why,
                 "it was replaced (by a symbolic link or another file) after it was created");
        replaced = 1; /* what is under the name now is not ours to remove */
        goto fail;
    }
    /* A small page cache (4 MiB): the writer only appends, so it needs the right edge of each
     * b-tree, and pages recycled from a small cache are still warm in the CPU's caches (8% less
     * writer CPU per event than 16 MiB). The index built at close gets a larger one (finish).
     * application_id first, while the journal is still a rollback journal: it is then in the
     * file's header from the first write on, so even a recording killed at once is known as
     * ours (rec_db_replaceable) and the next run may replace it. */
    char pragmas[320];
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA page_size=8192; PRAGMA application_id=%d; PRAGMA user_version=1;"
             "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
             "PRAGMA wal_autocheckpoint=16384; PRAGMA cache_size=-4096;",
             REC_APPLICATION_ID);
    if (rec_rows_register(w->db) != SQLITE_OK) {
        sql_fail(w, "registering gm_rows");
        goto fail;
    }
    /* the image carries page_size, application_id, user_version and the WAL format; the
     * connection's own settings follow them (the pragmas after the header's) */
    if (exec(w, from_image ? strstr(pragmas, "PRAGMA journal_mode") : pragmas) != 0 ||
        exec(w, "BEGIN") != 0 || (!from_image && exec(w, rec_schema_sql) != 0))
        goto fail;
    if (!from_image && !schema_image) {
        sqlite3_int64 len = 0;
        unsigned char *img = sqlite3_serialize(w->db, "main", &len, 0);
        if (img && len > 100) schema_image = img, schema_image_len = len;
        else sqlite3_free(img); /* no image: every recording creates its schema */
    }
    /* events.seq only grows, and only the writer inserts: appends (see rec_rows.h) */
    w->ev_rows = (rec_rows){.cells = &w->evbuf[0][0], .cols = EV_COLS,
                            .null_cols = 1u << 11 | 1u << 12, .null_value = 0,
                            .append_key = 1, .prev_key = INT64_MIN};
    if (!lamulti[0]) {
        /* OR FAIL: no statement journal (see rec_rows_sql in rec_rows.h) */
        multi_sql(lamulti, sizeof lamulti, "INSERT OR FAIL INTO launches", RB_MULTI, 6);
        multi_sql(rmulti, sizeof rmulti, "INSERT OR REPLACE INTO launches", RB_MULTI, 6);
        multi_sql(umulti, sizeof umulti, "INSERT OR FAIL INTO uses", RB_MULTI, 4);
        multi_sql(rgmulti, sizeof rgmulti, "INSERT OR REPLACE INTO ranges", RANGE_MULTI, 9);
    }
    w->launches = (rowbuf){.s1 = S_LAUNCH, .sn = S_LAUNCH_MULTI, .cols = 6, .what = "writing launches"};
    w->uses = (rowbuf){.s1 = S_USE, .sn = S_USE_MULTI, .cols = 4, .what = "writing uses"};
    w->retimed = (rowbuf){.s1 = S_LAUNCH_TIME, .sn = S_LAUNCH_TIME_MULTI, .cols = 6,
                          .what = "timing launches"};
    /* statements are prepared on first use (stmt()) */
    char buf[8192];
    meta_int(w, "schema_major", REC_SCHEMA_MAJOR);
    meta_int(w, "schema_minor", REC_SCHEMA_MINOR);
    meta_text(w, "gpumem_version", REC_VERSION);
    meta_int(w, "pid", g->pid);
    meta_int(w, "ppid", (int64_t)getppid());
    /* the `gpumem record` run this process belongs to: its other processes never replace this
     * file (rec.c, part_of_this_run) */
    const char *run = getenv("GPUMEM_RECORD_RUN");
    if (run && *run) meta_text(w, "record_run", run);
    read_cmdline(buf, sizeof buf);
    meta_text(w, "cmdline", buf);
    char *argv_json = read_argv_json();
    if (argv_json) meta_text(w, "argv", argv_json);
    free(argv_json);
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    meta_text(w, "exe", buf);
    {
        /* what `--check` needs to run the command again as it ran here: the working directory
         * its relative paths are from (the one it started in: rec_note_start), and the path
         * argv[0] was found at */
        char cwd[4096], a0[4096];
        if (g->start_cwd[0]) snprintf(cwd, sizeof cwd, "%s", g->start_cwd);
        else if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
        meta_text(w, "cwd", cwd);
        argv0_path(buf, cwd, a0, sizeof a0);
        meta_text(w, "argv0_path", a0);
    }
    meta_int(w, "start_unix_ns", g->start_unix_ns);
    meta_int(w, "start_ns", (int64_t)g->start_ns);
    if (gethostname(buf, 256) != 0) buf[0] = 0;
    buf[255] = 0;
    meta_text(w, "hostname", buf);
    meta_int(w, "stacks", g->stacks);
    meta_int(w, "names", g->names);
    meta_int(w, "nvtx", g->ranges);
    /* what gpumem record set for a Python program's PyTorch hooks ("1" on, "0" --no-torch-hooks;
     * absent: not run by gpumem record): a reader told there are no steps must not advise
     * recording with the hooks a recording had (gm_phases_hint) */
    const char *hooks = getenv("GPUMEM_TORCH_HOOKS");
    if (hooks && (!strcmp(hooks, "0") || !strcmp(hooks, "1"))) meta_text(w, "torch_hooks", hooks);
    meta_int(w, "ring", (int64_t)(g->ring.mask + 1));
    /* what a full ring did: waited for the writer (lossless, the default) or dropped */
    meta_text(w, "ring_full", g->ring.wait_ns == REC_RING_WAIT_FOREVER ? "wait" : "drop");
    meta_text(w, "state", "recording");
    meta_int(w, "dropped_events", 0);
    meta_int(w, "dropped_word_records", 0);
    rec_rank rk; /* a launcher's rank (mpirun, torchrun, srun): gpumem report merges ranks */
    if (rec_launch_rank(&rk) && rk.rank >= 0) {
        meta_int(w, "rank", rk.rank);
        if (rk.world_size > 0) meta_int(w, "world_size", rk.world_size);
        if (rk.local_rank >= 0) meta_int(w, "local_rank", rk.local_rank);
        meta_text(w, "rank_from", rk.from);
    }
    if (w->failed || exec(w, "COMMIT") != 0) goto fail;
    /* after the schema: on a nearly full disk the recording still starts, and when the disk
     * fills up later this is the room for saying so */
    reserve_space(w, g->path);
    w->setting_up = 0;
    g->db = w->db;
    return 0;
fail:
    for (int i = 0; i < S_COUNT_; i++) sqlite3_finalize(w->st[i]);
    sqlite3_close(w->db);
    w->db = NULL;
    release_reserve(w, 1);
    w->setting_up = 0;
    /* The file was made (or emptied: an earlier run's) for this recording a moment ago and no
     * event reached it: a file that holds nothing but a header would only be reported on as "a
     * recording that stopped before its first commit". It goes, with its side files. */
    if (!replaced) {
        unlink(g->path);
        rec_db_unlink_sides(g->path);
    }
    char why[1800]; /* one status line is at most 1 KiB: the path is cut, not the reason */
    snprintf(why, sizeof why, "cannot set up %.1000s: %.600s; not recording%s", g->path,
             w->setup_why[0] ? w->setup_why : "SQLite failed",
             replaced ? " (what is there now is left alone)" : " (the file is removed: it held nothing)");
    rec_warn("%s", why);
    rec_status("unwritten", why); /* gpumem record: the recording could not be written */
    return -1;
}

/* ---------------------------------------------------------------- modules and frames */

typedef struct phdr_ctx {
    writer *w;
} phdr_ctx;

static void build_id_of(struct dl_phdr_info *info, char out[41]) {
    out[0] = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
        const unsigned char *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            size_t name_sz = (nh->n_namesz + 3) & ~3u, desc_sz = (nh->n_descsz + 3) & ~3u;
            const unsigned char *name = p + sizeof *nh, *desc = name + name_sz;
            if (desc + desc_sz > end) break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                size_t k = nh->n_descsz > 20 ? 20 : nh->n_descsz;
                for (size_t j = 0; j < k; j++) snprintf(out + 2 * j, 3, "%02x", desc[j]);
                return;
            }
            p = desc + desc_sz;
        }
    }
}

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    writer *w = ((phdr_ctx *)arg)->w;
    uintptr_t lo, hi;
    rec_object_range(info, 0, &lo, &hi);
    if (lo >= hi) return 0;
    for (size_t i = 0; i < w->nmods; i++)
        if (w->mods[i].lo == lo && w->mods[i].hi == hi) return 0;
    if (w->nmods == w->mods_cap) {
        size_t c = w->mods_cap ? w->mods_cap * 2 : 32;
        module_ent *m = realloc(w->mods, c * sizeof *m);
        if (!m) return 1;
        w->mods = m;
        w->mods_cap = c;
    }
    module_ent *m = &w->mods[w->nmods];
    memset(m, 0, sizeof *m);
    char exe[4096];
    const char *name = info->dlpi_name;
    if (!name || !*name) {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
        name = exe;
    }
    m->path = strdup(name);
    if (!m->path) return 1;
    m->lo = lo, m->hi = hi, m->bias = info->dlpi_addr;
    build_id_of(info, m->build_id);
    w->nmods++;
    return 0;
}

static module_ent *module_of(writer *w, uint64_t pc) {
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < w->nmods; i++)
            if (pc >= w->mods[i].lo && pc < w->mods[i].hi) return &w->mods[i];
        if (pass == 0) {
            phdr_ctx c = {w};
            dl_iterate_phdr(phdr_cb, &c); /* something new was loaded: rescan */
        }
    }
    return NULL;
}

static const char *str_of(writer *w, uint64_t id);
static uint64_t frame_id(writer *w, uint64_t pc) {
    uint64_t *v = u64map_get(&w->frames, pc);
    if (v) return *v;
    module_ent *m = module_of(w, pc);
    int64_t mrow = 0;
    uint64_t off = pc;
    if (m) {
        if (!m->row) {
            m->row = ++w->nmod_rows;
            sqlite3_stmt *s = stmt(w, S_MODULE);
            bind_i(s, 1, m->row);
            bind_t(s, 2, m->path);
            bind_t(s, 3, m->build_id[0] ? m->build_id : NULL);
            bind_i(s, 4, (int64_t)m->bias);
            bind_i(s, 5, (int64_t)(m->hi - m->lo));
            step(w, S_MODULE, "writing modules");
        }
        mrow = m->row;
        off = pc - m->bias;
    }
    uint64_t id = ++w->nframes;
    sqlite3_stmt *s = stmt(w, S_FRAME);
    bind_i(s, 1, (int64_t)id);
    bind_opt(s, 2, mrow);
    bind_i(s, 3, (int64_t)off);
    step(w, S_FRAME, "writing frames");
    u64map_put(&w->frames, pc, id);
    return id;
}

/* A Python frame's row: one per distinct (function, file, line), written with its text (the
 * strings were interned before the stack that names them, so they are known here). */
static uint64_t py_frame_id(writer *w, const rec_pyframe *p) {
    uint64_t k = ((uint64_t)p->function * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)p->file << 32) ^ p->line;
    k = GM_NARROW_HASH(u64map_hash(k)) & ~1ull; /* never U64MAP_EMPTY; narrowed by the test hook */
    /* the triple decides: another triple of the same key takes the chain's next key (a frame
     * written once, never a row each time it comes again) */
    for (const uint64_t *v; (v = u64map_get(&w->pyframes, k)) != NULL; k = bytemap_rekey(k)) {
        if (*v >= w->npyf) continue;
        const struct py_frame_ent *e = &w->pyf[*v];
        if (e->function == p->function && e->file == p->file && e->line == p->line) return e->id;
    }
    uint64_t id = ++w->nframes;
    sqlite3_stmt *s = stmt(w, S_PYFRAME);
    bind_i(s, 1, (int64_t)id);
    bind_t(s, 2, str_of(w, p->function));
    bind_t(s, 3, str_of(w, p->file));
    bind_opt(s, 4, p->line);
    step(w, S_PYFRAME, "writing frames");
    if (w->npyf == w->pyf_cap) {
        size_t c = w->pyf_cap ? w->pyf_cap * 2 : 256;
        struct py_frame_ent *n = realloc(w->pyf, c * sizeof *n);
        if (!n) return id; /* no memory: the triple gets rows as it comes */
        w->pyf = n, w->pyf_cap = c;
    }
    w->pyf[w->npyf] = (struct py_frame_ent){p->function, p->file, p->line, id};
    if (u64map_put(&w->pyframes, k, w->npyf) == 0) w->npyf++;
    return id;
}

/* ---------------------------------------------------------------- side items */

static const char *str_of(writer *w, uint64_t id) {
    return id && id <= w->nstrs ? w->strs[id - 1] : NULL;
}

static void write_snapshot(writer *w, rec_item *it, int64_t id) {
    const rec_segment *segs = it->p;
    const rec_block *blocks = it->p2;
    sqlite3_stmt *s = stmt(w, S_SNAPSHOT);
    bind_i(s, 1, id);
    bind_i(s, 2, (int64_t)it->id);
    bind_i(s, 3, (int64_t)rec_ticks_to_ns(&rec_g, it->b));
    bind_i(s, 4, (int64_t)it->a);
    bind_i(s, 5, it->n ? segs[0].device : 0);
    step(w, S_SNAPSHOT, "writing snapshots");
    for (size_t i = 0; i < it->n; i++) {
        s = stmt(w, S_SEGMENT);
        bind_i(s, 1, id);
        bind_i(s, 2, (int64_t)i);
        bind_i(s, 3, segs[i].device);
        bind_i(s, 4, (int64_t)segs[i].stream);
        bind_i(s, 5, (int64_t)segs[i].addr);
        bind_i(s, 6, (int64_t)segs[i].size);
        bind_i(s, 7, (int64_t)segs[i].mapped);
        bind_i(s, 8, segs[i].flags);
        step(w, S_SEGMENT, "writing segments");
    }
    for (size_t i = 0; i < it->n2; i++) {
        s = stmt(w, S_BLOCK);
        bind_i(s, 1, id);
        bind_i(s, 2, (int64_t)blocks[i].addr);
        bind_i(s, 3, blocks[i].segment);
        bind_i(s, 4, blocks[i].state);
        bind_i(s, 5, (int64_t)blocks[i].size);
        bind_i(s, 6, (int64_t)blocks[i].requested);
        bind_i(s, 7, (int64_t)blocks[i].alloc_id);
        step(w, S_BLOCK, "writing blocks");
    }
}

/* The latest peak snapshot of a device replaces the one written before (at most once a
 * second; the last one is always written at close). */
static void flush_peak(writer *w, int dev, int force) {
    rec_item *it = w->peak_pending[dev];
    if (!it) return;
    uint64_t now = rec_now_ns();
    if (!force && w->peak_written_id[dev] && now - w->peak_written_ns[dev] < PEAK_SNAPSHOT_NS) return;
    int64_t old = w->peak_written_id[dev];
    if (old) {
        for (int s = S_DEL_SNAP; s <= S_DEL_BLOCKS; s++) {
            bind_i(stmt(w, s), 1, old);
            step(w, s, "replacing the peak snapshot");
        }
    }
    int64_t id = ++w->nsnapshots;
    write_snapshot(w, it, id);
    w->peak_written_id[dev] = id;
    w->peak_written_ns[dev] = now;
    w->peak_pending[dev] = NULL;
    rec_item_free(it);
}

/* Takes m (REC_HOLD_* bit), or returns 0 without it once the thread that holds it is closing
 * the recording in a signal handler (g->frozen, set by rec.c rec_close_ending): that thread
 * never goes back to its section and nobody else can take the lock, so what it guards is the
 * writer's alone, and waiting would only run out the handler's wait. Uncontended, one trylock. */
static int writer_lock(rec_state *g, pthread_mutex_t *m, int bit) {
    if (pthread_mutex_trylock(m) == 0) return 1;
    for (;;) {
        if (atomic_load(&g->frozen) & bit) return 0;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 2000000;
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        if (pthread_mutex_timedlock(m, &until) == 0) return 1;
    }
}

static void take_items(writer *w, rec_state *g) {
    int held = writer_lock(g, &g->lock, REC_HOLD_LOCK);
    rec_item *it = g->items;
    g->items = NULL;
    g->items_tail = &g->items;
    if (held) pthread_mutex_unlock(&g->lock);
    while (it) {
        rec_item *next = it->next;
        int keep = 0;
        sqlite3_stmt *s;
        switch (it->type) {
        case REC_I_STRING:
            s = stmt(w, S_STRING);
            bind_i(s, 1, (int64_t)it->id);
            bind_t(s, 2, it->text);
            step(w, S_STRING, "writing strings");
            if (it->id == (uint64_t)w->nstrs + 1) {
                if (w->nstrs == w->strs_cap) {
                    uint32_t c = w->strs_cap ? w->strs_cap * 2 : 256;
                    char **n = realloc(w->strs, c * sizeof *n);
                    if (n) w->strs = n, w->strs_cap = c;
                }
                if (w->nstrs < w->strs_cap) w->strs[w->nstrs++] = strdup(it->text);
            }
            break;
        case REC_I_THREAD: {
            uint64_t *given = u64map_get(&w->tid_names, it->a);
            s = stmt(w, S_THREAD);
            bind_i(s, 1, (int64_t)it->id);
            bind_i(s, 2, (int64_t)it->a);
            bind_t(s, 3, given ? (const char *)(uintptr_t)*given : it->text[0] ? it->text : NULL);
            step(w, S_THREAD, "writing threads");
            break;
        }
        case REC_I_THREAD_NAME: {
            char *copy = strdup(it->text);
            uint64_t old;
            if (u64map_del(&w->tid_names, it->a, &old)) free((void *)(uintptr_t)old);
            if (copy && u64map_put(&w->tid_names, it->a, (uint64_t)(uintptr_t)copy) != 0) free(copy);
            s = stmt(w, S_THREAD_NAME);
            bind_t(s, 1, it->text);
            bind_i(s, 2, (int64_t)it->a);
            step(w, S_THREAD_NAME, "naming threads");
            break;
        }
        case REC_I_STACK: {
            void **pcs = it->p;
            for (size_t d = 0; d < it->n; d++) {
                uint64_t f = frame_id(w, (uint64_t)(uintptr_t)pcs[d]);
                s = stmt(w, S_STACK);
                bind_i(s, 1, (int64_t)it->id);
                bind_i(s, 2, (int64_t)d);
                bind_i(s, 3, (int64_t)f);
                step(w, S_STACK, "writing stacks");
            }
            const rec_pyframe *py = it->p2;
            for (size_t d = 0; d < it->n2; d++) {
                uint64_t f = py_frame_id(w, &py[d]);
                s = stmt(w, S_STACK);
                bind_i(s, 1, (int64_t)it->id);
                bind_i(s, 2, (int64_t)(it->n + d));
                bind_i(s, 3, (int64_t)f);
                step(w, S_STACK, "writing stacks");
            }
            break;
        }
        case REC_I_OOM: {
            const rec_oom_info *o = it->p;
            s = stmt(w, S_OOM);
            bind_i(s, 1, (int64_t)it->id);
            bind_i(s, 2, o->device);
            bind_i(s, 3, (int64_t)o->stream);
            bind_i(s, 4, (int64_t)o->requested);
            bind_i(s, 5, (int64_t)o->allocated);
            bind_i(s, 6, (int64_t)o->reserved);
            bind_i(s, 7, (int64_t)o->free_cached);
            bind_i(s, 8, (int64_t)o->largest_free);
            bind_i(s, 9, (int64_t)o->device_free);
            bind_i(s, 10, (int64_t)o->device_total);
            if (o->limit == REC_NO_LIMIT) sqlite3_bind_null(s, 11); /* none; 0 is 0 bytes */
            else bind_i(s, 11, (int64_t)o->limit);
            if (it->a) bind_i(s, 12, (int64_t)it->a);
            else sqlite3_bind_null(s, 12);
            step(w, S_OOM, "writing ooms");
            break;
        }
        case REC_I_SNAPSHOT: {
            int dev = it->n ? ((const rec_segment *)it->p)[0].device : 0;
            if (it->a == REC_SNAP_PEAK && dev >= 0 && dev < REC_MAX_DEVICES) {
                if (w->peak_pending[dev]) rec_item_free(w->peak_pending[dev]);
                w->peak_pending[dev] = it;
                keep = 1;
                flush_peak(w, dev, 0);
            } else {
                write_snapshot(w, it, ++w->nsnapshots);
            }
            break;
        }
        case REC_I_META: {
            const char *k = it->text, *v = it->text + it->n + 1;
            if (it->a) meta_int(w, k, (int64_t)strtoull(v, NULL, 10));
            else meta_text(w, k, v);
            break;
        }
        }
        if (!keep) rec_item_free(it);
        it = next;
    }
}

/* ---------------------------------------------------------------- ring records */

static int is_alloc_kind(unsigned k) {
    return k == REC_ALLOC || k == REC_ALLOC_ASYNC || k == REC_HOST_ALLOC || k == REC_MANAGED_ALLOC;
}
static int is_free_kind(unsigned k) {
    return k == REC_FREE || k == REC_FREE_ASYNC || k == REC_HOST_FREE || k == REC_MANAGED_FREE;
}

static void flush_life(writer *w) {
    if (w->nlife == 0) return;
    rec_rows rows = {.cells = &w->lifebuf[0][0], .n = w->nlife, .cols = 3,
                     .null_cols = 1u << 1 | 1u << 2, .null_value = 0};
    rows.const_cols = rec_rows_same(&rows, LIFE_SAME_COLS);
    sqlite3_stmt *st = stmt(w, S_LIFE + (int)bits_pack(rows.const_cols, LIFE_SAME_COLS));
    if (rec_rows_insert(st, &rows) != SQLITE_DONE) sql_fail(w, "writing alloc_life");
    w->nlife = 0;
}

static void life_row(writer *w, uint64_t birth, uint64_t death, uint32_t name) {
    int64_t *row = w->lifebuf[w->nlife++];
    row[0] = (int64_t)birth, row[1] = (int64_t)death, row[2] = name;
    if (w->nlife == LIFE_MULTI) flush_life(w);
}

static int64_t stream_id(writer *w, int device, uint64_t handle) {
    uint64_t key = handle ^ ((uint64_t)(uint16_t)device << 48);
    if (key + 1 == w->stream_key1) return (int64_t)w->stream_id1; /* runs of one stream */
    uint64_t *v = u64map_get(&w->streams, key);
    if (v) {
        w->stream_key1 = key + 1, w->stream_id1 = *v;
        return (int64_t)*v;
    }
    uint64_t id = w->nstreams++;
    if (u64map_put(&w->streams, key, id) == 0) w->stream_key1 = key + 1, w->stream_id1 = id;
    sqlite3_stmt *s = stmt(w, S_STREAM);
    bind_i(s, 1, (int64_t)id);
    bind_i(s, 2, device);
    bind_i(s, 3, (int64_t)handle);
    step(w, S_STREAM, "writing streams");
    return (int64_t)id;
}

static void flush_events(writer *w) {
    if (w->nev == 0) return;
    w->ev_rows.n = w->nev;
    w->ev_rows.const_cols = rec_rows_same(&w->ev_rows, EV_SAME_COLS);
    sqlite3_stmt *st = stmt(w, S_EVENT + (int)bits_pack(w->ev_rows.const_cols, EV_SAME_COLS));
    if (rec_rows_insert(st, &w->ev_rows) != SQLITE_DONE) sql_fail(w, "writing events");
    w->nev = 0;
}

static void event_row(writer *w, uint64_t seq, const rec_rec *r, uint64_t size);

static void on_event(writer *w, uint64_t seq, rec_rec *r) {
    unsigned k = r->kind & 0xffu;
    uint64_t size = r->size;
    if (is_alloc_kind(k)) {
        uint64_t idx;
        if (w->la_free) {
            idx = w->la_free - 1;
            w->la_free = w->la[idx].next_free;
        } else {
            if (w->la_used == w->la_cap) {
                if (w->la_cap >= (1u << 31)) goto write;
                uint32_t c = w->la_cap ? w->la_cap * 2 : 4096;
                live_alloc *n = realloc(w->la, (size_t)c * sizeof *n);
                if (!n) goto write;
                w->la = n;
                w->la_cap = c;
            }
            idx = w->la_used++;
        }
        uint64_t old;
        if (u64map_del(&w->live, r->addr, &old)) {
            /* the same address handed out twice without a free: close the old lifetime */
            life_row(w, w->la[old].birth, 0, w->la[old].name);
            w->la[old].next_free = w->la_free;
            w->la_free = (uint32_t)old + 1;
        }
        w->la[idx] = (live_alloc){seq, size, 0, 0};
        u64map_put(&w->live, r->addr, idx);
        /* out of memory here only loses uses: a word inside the missing allocation finds an
         * earlier one that ends below it (live allocations do not overlap) and counts nothing */
        if (w->idx_on) addr_index_put(&w->idx, r->addr, idx);
    } else if (is_free_kind(k)) {
        uint64_t idx;
        if (u64map_del(&w->live, r->addr, &idx)) {
            if (w->idx_on) addr_index_del(&w->idx, r->addr);
            if (size == 0) size = w->la[idx].size;
            life_row(w, w->la[idx].birth, seq, w->la[idx].name);
            w->la[idx].next_free = w->la_free;
            w->la_free = (uint32_t)idx + 1;
        }
    }
write:
    event_row(w, seq, r, size);
}

/* Buffers the `events` row of a ring record (size: as written, after pairing). */
static void event_row(writer *w, uint64_t seq, const rec_rec *r, uint64_t size) {
    unsigned k = r->kind & 0xffu;
    int64_t *row = w->evbuf[w->nev++];
    row[0] = (int64_t)seq;
    row[1] = (int64_t)rec_ticks_to_ns(&rec_g, r->t);
    row[2] = k;
    row[3] = r->kind & REC_F_FLAGS_MASK;
    row[4] = r->device;
    row[5] = stream_id(w, r->device, r->stream);
    row[6] = r->thread;
    row[7] = (int64_t)r->addr;
    row[8] = (int64_t)size;
    row[9] = (int64_t)r->requested;
    row[10] = (int64_t)r->alloc_id;
    row[11] = r->stack;
    row[12] = r->range;
    if (w->nev == EV_MULTI) flush_events(w);
    w->events++;
    w->device_infos += k == REC_DEVICE_INFO;
    w->own_segment_allocs += rec_is_own_segment(k, (unsigned)r->kind);
    w->gpumem_peak_resets += k == REC_TORCH_RESET_PEAK && (r->kind & REC_F_FRAMEWORK);
}

/* ---------------------------------------------------------------- access tracking */

static void rb_flush(writer *w, rowbuf *b) {
    int multi = b->n == RB_MULTI;
    for (int r = 0; r < b->n; r++) {
        sqlite3_stmt *s = stmt(w, multi ? b->sn : b->s1);
        int base = multi ? r * b->cols : 0;
        for (int c = 0; c < b->cols; c++) {
            if (b->rows[r][c] == RB_NULL) sqlite3_bind_null(s, base + c + 1);
            else sqlite3_bind_int64(s, base + c + 1, b->rows[r][c]);
        }
        if (!multi) step(w, b->s1, b->what);
    }
    if (multi) step(w, b->sn, b->what);
    b->n = 0;
}

static int64_t *rb_row(writer *w, rowbuf *b) {
    if (b->n == RB_MULTI) rb_flush(w, b);
    return b->rows[b->n++];
}

/* The address index starts with the first launch: built once from the live map, then kept in
 * step with it by on_event. */
static void index_build(writer *w) {
    w->idx_on = 1;
    for (uint64_t i = 0; w->live.keys && i <= w->live.mask; i++)
        if (w->live.keys[i] != U64MAP_EMPTY) addr_index_put(&w->idx, w->live.keys[i], w->live.vals[i]);
}

static pending_words *words_of(writer *w, uint32_t thread) {
    if (thread >= w->npw) {
        uint32_t n = w->npw ? w->npw : 16;
        while (n <= thread) n *= 2;
        pending_words *p = realloc(w->pw, n * sizeof *p);
        if (!p) return NULL;
        memset(p + w->npw, 0, (n - w->npw) * sizeof *p);
        w->pw = p;
        w->npw = n;
    }
    return &w->pw[thread];
}

/* A REC_R_WORDS record: appended to its thread's pending words when it is the next chunk of
 * the same launch; chunk 0 starts a new set; anything else (a chunk was dropped) spoils the set
 * until the next chunk 0. */
static void on_words(writer *w, const rec_rec *r) {
    pending_words *p = words_of(w, r->thread);
    if (!p) return;
    uint32_t dev = (uint16_t)r->device, k = dev & ~REC_WORDS_T_WORD, chunk = r->range;
    uint32_t per = dev & REC_WORDS_T_WORD ? REC_WORDS_PER_REC_T : REC_WORDS_PER_REC;
    if (chunk == 0) {
        p->tag = r->stack;
        p->next_chunk = 0;
        p->n = 0;
        p->valid = 1;
    }
    if (!p->valid || p->tag != r->stack || chunk != p->next_chunk || k < 1 || k > per) {
        p->valid = 0;
        return;
    }
    if (p->n + k > p->cap) {
        uint32_t c = p->cap ? p->cap * 2 : 64;
        uint64_t *nw = realloc(p->w, c * sizeof *nw);
        if (nw) p->w = nw;
        uint8_t *na = nw ? realloc(p->acc, c) : NULL;
        if (na) p->acc = na;
        if (!nw || !na) {
            p->valid = 0;
            return;
        }
        p->cap = c;
    }
    const uint64_t v[REC_WORDS_PER_REC_T] = {r->addr, r->size, r->requested, r->alloc_id, r->stream, r->t};
    for (uint32_t j = 0; j < k; j++) {
        p->w[p->n + j] = v[j];
        p->acc[p->n + j] = per == REC_WORDS_PER_REC_T ? 0 : (uint8_t)(r->t >> (8 * j));
    }
    p->n += k;
    p->next_chunk++;
}

/* The hits by birth, in place: a shell sort (Ciura's gaps), inline on the key. A PyTorch foreach
 * kernel's lists give a launch a few hundred hits; qsort's merge sort, its comparisons called
 * through a pointer, took a sixth of the writer's time on a recorded PyTorch step. */
static void hits_sort(use_hit *h, uint32_t n) {
    static const uint32_t gaps[] = {1750, 701, 301, 132, 57, 23, 10, 4, 1};
    for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
        uint32_t gap = gaps[g];
        for (uint32_t i = gap; i < n; i++) {
            use_hit t = h[i];
            uint32_t j = i;
            for (; j >= gap && h[j - gap].birth > t.birth; j -= gap) h[j] = h[j - gap];
            h[j] = t;
        }
    }
}

/* One `uses` row per live allocation that some word points into (access OR-ed). */
static void resolve_words(writer *w, uint64_t seq, uint32_t kernel, const uint64_t *words,
                          const uint8_t *acc, uint32_t n) {
    if (!w->idx_on) index_build(w);
    if (n > w->hits_cap) {
        use_hit *h = realloc(w->hits, n * sizeof *h);
        if (!h) return;
        w->hits = h;
        w->hits_cap = n;
    }
    /* Words that point into the allocation the word before pointed into (PyTorch's tensors are
     * parts of a few segments, so a launch's ~20 words land in one or two allocations) take
     * that allocation without a search, and join its hit instead of adding one: the rest are
     * few enough to be merged without the sort. */
    uint32_t nh = 0;
    uint64_t last_start = 0, last_size = 0, last_birth = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t birth;
        if (words[i] - last_start < last_size) {
            birth = last_birth;
        } else {
            uint64_t start, idx;
            if (!addr_index_floor(&w->idx, words[i], &start, &idx)) continue;
            if (words[i] - start >= w->la[idx].size) continue; /* past its end: not inside */
            last_start = start, last_size = w->la[idx].size, last_birth = birth = w->la[idx].birth;
        }
        if (nh && w->hits[nh - 1].birth == birth) w->hits[nh - 1].acc |= acc[i];
        else w->hits[nh++] = (use_hit){birth, acc[i]};
    }
    if (nh > 8) hits_sort(w->hits, nh);
    for (uint32_t i = 0; i < nh; i++) {
        if (w->hits[i].birth == 0) continue; /* merged into an earlier one */
        uint32_t a = w->hits[i].acc;
        for (uint32_t j = i + 1; j < nh; j++) {
            if (w->hits[j].birth == w->hits[i].birth) {
                a |= w->hits[j].acc;
                w->hits[j].birth = 0;
            } else if (nh > 8) {
                break; /* sorted: no more of this birth */
            }
        }
        int64_t *row = rb_row(w, &w->uses);
        row[0] = (int64_t)w->hits[i].birth;
        row[1] = (int64_t)seq;
        row[2] = kernel ? (int64_t)kernel : RB_NULL;
        row[3] = a;
        w->n_uses++;
    }
}

static void timed_push(writer *w, uint64_t seq, void *token, unsigned op, uint32_t kernel,
                       uint64_t bytes) {
    if (w->tl_len == w->tl_cap) {
        /* grows to TIMING_BOUND + one drain's worth at most: the bound is enforced after each
         * round (timing_ask) */
        uint64_t c = w->tl_cap ? w->tl_cap * 2 : 1024;
        timed_launch *n = malloc(c * sizeof *n);
        if (!n) {
            w->untimed++; /* the token is lost with it: out of memory */
            return;
        }
        for (uint64_t i = 0; i < w->tl_len; i++) n[i] = w->tl[(w->tl_head + i) % w->tl_cap];
        free(w->tl);
        w->tl = n;
        w->tl_cap = c;
        w->tl_head = 0;
    }
    w->tl[(w->tl_head + w->tl_len) % w->tl_cap] =
        (timed_launch){seq, bytes, token, 0, 0, kernel, (uint8_t)op, TL_PENDING};
    w->tl_len++;
}

/* Asks the resolver about pending timed launches, oldest first, until one is not finished.
 * Runs WITHOUT db_lock. final: every launch left must be resolved or given up (at close). */
static void timing_ask(writer *w, int final) {
    rec_timing_fn fn = atomic_load_explicit(&rec_g.timing_fn, memory_order_acquire);
    for (uint64_t i = w->tl_done; i < w->tl_len; i++) {
        timed_launch *e = &w->tl[(w->tl_head + i) % w->tl_cap];
        int force = final || w->tl_len - i > TIMING_BOUND;
        int rc = -1;
        if (fn) rc = fn(e->token, force, &e->start, &e->end);
        else if (!force) break; /* no resolver (yet): nothing to ask, keep waiting */
        if (rc == 0 && !force) break;
        e->state = rc == 1 ? TL_DONE : TL_NONE; /* a 0 with final = 1 breaks the contract: none */
        w->tl_done++;
    }
}

/* Writes the answers timing_ask got (under db_lock). A launch row still in the buffer gets its
 * times there; one already inserted is written again, whole, with them (INSERT OR REPLACE in
 * batches, after the launches buffer: see commit). */
static void timing_write(writer *w) {
    if (w->tl_done > 0 && !w->in_txn) {
        /* answers can come when no record does: they open the transaction that the commit
         * cadence then closes (~25 ms), like events */
        if (exec(w, "BEGIN") != 0) return;
        w->in_txn = 1;
        w->txn_start = rec_now_ns();
    }
    for (; w->tl_done > 0; w->tl_done--, w->tl_len--, w->tl_head = (w->tl_head + 1) % w->tl_cap) {
        timed_launch *e = &w->tl[w->tl_head];
        if (e->state != TL_DONE) {
            w->untimed++;
            continue;
        }
        int in_buf = 0;
        for (int r = 0; r < w->launches.n && !in_buf; r++)
            if (w->launches.rows[r][0] == (int64_t)e->seq) {
                w->launches.rows[r][4] = (int64_t)e->start;
                w->launches.rows[r][5] = (int64_t)e->end;
                in_buf = 1;
            }
        if (in_buf) continue;
        int64_t *row = rb_row(w, &w->retimed);
        row[0] = (int64_t)e->seq;
        row[1] = e->op;
        row[2] = e->kernel ? (int64_t)e->kernel : RB_NULL;
        row[3] = (int64_t)e->bytes;
        row[4] = (int64_t)e->start;
        row[5] = (int64_t)e->end;
    }
}

/* After a failure (or when the writer stops without a database): every token still held is
 * handed back with final = 1 so that the resolver can release it. */
static void timing_abandon(writer *w) {
    timing_ask(w, 1);
    w->untimed += w->tl_len;
    w->tl_len = w->tl_done = w->tl_head = 0;
}

/* A REC_LAUNCH record: its event, its `launches` row, its uses, its timing. */
static void on_launch(writer *w, uint64_t seq, rec_rec *r) {
    uint32_t n = r->stack & REC_LAUNCH_MAX_WORDS, op = r->stack >> 24 & REC_LAUNCH_OP_MASK;
    uint32_t kernel = (uint32_t)r->alloc_id, tag = (uint32_t)(r->alloc_id >> 32);
    void *token = (void *)(uintptr_t)r->requested;
    rec_rec ev = *r;
    ev.stack = 0;
    ev.requested = 0;
    ev.alloc_id = 0;
    event_row(w, seq, &ev, r->size);
    int64_t *row = rb_row(w, &w->launches);
    row[0] = (int64_t)seq;
    row[1] = op;
    row[2] = kernel ? (int64_t)kernel : RB_NULL;
    row[3] = (int64_t)r->size;
    row[4] = row[5] = RB_NULL;
    w->n_launches++;
    if (r->stack & REC_LAUNCH_UNREAD) w->unread++; /* its uses are unknown, not none */
    pending_words *p = r->thread < w->npw ? &w->pw[r->thread] : NULL;
    if (n > 0) {
        if (p && p->valid && p->tag == tag && p->n == n) resolve_words(w, seq, kernel, p->w, p->acc, n);
        else w->words_lost++; /* a word record was dropped: this launch's uses are unknown */
    }
    if (p) p->valid = 0, p->n = 0; /* consumed (or spoilt): never attached to a later launch */
    if (token) timed_push(w, seq, token, op, kernel, r->size);
}

/* An open range: its row, held until it closes or the transaction commits (a module's range
 * opens and closes within one commit's window, and one INSERT with its end then replaces an
 * INSERT and an UPDATE by id: half the range's cost to the writer), and its path, which its
 * children's paths extend. */
typedef struct open_range {
    uint64_t id, parent, domain, name;
    uint32_t thread, kind;
    int64_t start, end; /* end: once closed (a mark's is its start) */
    int written; /* in the file already (end_ns NULL): its close updates it */
    char path[];
} open_range;

/* A range's row as parameters base+1 .. base+9 of s; path (not copied) must last until s has
 * run. */
static void range_bind(sqlite3_stmt *s, int base, const open_range *o, const char *path,
                       const int64_t *end) {
    bind_i(s, base + 1, (int64_t)o->id);
    bind_opt(s, base + 2, (int64_t)o->parent);
    bind_i(s, base + 3, o->thread);
    bind_i(s, base + 4, o->kind);
    bind_opt(s, base + 5, (int64_t)o->domain);
    bind_opt(s, base + 6, (int64_t)o->name);
    bind_i(s, base + 7, o->start);
    if (end) bind_i(s, base + 8, *end);
    else sqlite3_bind_null(s, base + 8);
    if (path) sqlite3_bind_text(s, base + 9, path, -1, SQLITE_STATIC);
    else sqlite3_bind_null(s, base + 9);
}

static void range_row(writer *w, const open_range *o, const char *path, const int64_t *end) {
    range_bind(stmt(w, S_RANGE), 0, o, path, end);
    step(w, S_RANGE, "writing ranges");
}

/* The closed ranges waiting for their batch go in: one statement for a full batch, one each
 * otherwise (at a commit). Before any other row of ranges is written, so that a row written
 * later for the same id (a range id used again) replaces theirs, as it would have. */
static void range_flush(writer *w) {
    if (!w->nclosed) return;
    if (!w->in_txn && exec(w, "BEGIN") == 0) w->in_txn = 1;
    if (w->nclosed == RANGE_MULTI) {
        sqlite3_stmt *s = stmt(w, S_RANGE_MULTI);
        for (int i = 0; i < RANGE_MULTI; i++) range_bind(s, 9 * i, w->closed[i], w->closed[i]->path, &w->closed[i]->end);
        step(w, S_RANGE_MULTI, "writing ranges");
    } else {
        for (int i = 0; i < w->nclosed; i++) range_row(w, w->closed[i], w->closed[i]->path, &w->closed[i]->end);
    }
    for (int i = 0; i < w->nclosed; i++) free(w->closed[i]);
    w->nclosed = 0;
}

/* A closed range, not in the file yet, joins the batch (which takes it). */
static void range_closed(writer *w, open_range *o, int64_t end) {
    o->end = end;
    w->closed[w->nclosed++] = o;
    if (w->nclosed == RANGE_MULTI) range_flush(w);
}

/* At a commit: every range still open and not in the file goes in with end_ns NULL, so that a
 * kill loses no more of them than of the events. */
static void flush_ranges(writer *w) {
    range_flush(w);
    if (!w->ranges_unwritten) return;
    if (!w->in_txn && exec(w, "BEGIN") == 0) w->in_txn = 1;
    for (uint64_t i = 0; i <= w->open_ranges.mask; i++) {
        if (w->open_ranges.keys[i] == U64MAP_EMPTY) continue;
        open_range *o = (open_range *)(uintptr_t)w->open_ranges.vals[i];
        if (!o->written) range_row(w, o, o->path, NULL), o->written = 1;
    }
    w->ranges_unwritten = 0;
}

static void on_range(writer *w, rec_state *g, rec_rec *r) {
    unsigned k = r->kind;
    if (k == REC_R_RANGE_PUSH || k == REC_R_RANGE_START || k == REC_R_MARK) {
        uint64_t name = r->alloc_id, domain = r->requested;
        if ((name && name > w->nstrs) || (domain && domain > w->nstrs))
            take_items(w, g); /* the string was queued before this record: fetch it */
        const char *nm = str_of(w, name);
        if (!nm) nm = "";
        uint64_t *pp = k != REC_R_RANGE_START && r->size ? u64map_get(&w->open_ranges, r->size) : NULL;
        const char *pa = pp ? ((const open_range *)(uintptr_t)*pp)->path : NULL;
        size_t a = pa ? strlen(pa) + 1 : 0, b = strlen(nm);
        const open_range row = {.id = r->addr, .parent = r->size, .domain = domain, .name = name,
                                .thread = r->thread, .kind = k == REC_R_RANGE_PUSH ? 0 : k == REC_R_RANGE_START ? 1 : 2,
                                .start = (int64_t)rec_ticks_to_ns(g, r->t)};
        open_range *o = malloc(sizeof *o + a + b + 1);
        if (o) {
            *o = row;
            if (pa) memcpy(o->path, pa, a - 1), o->path[a - 1] = '/';
            memcpy(o->path + a, nm, b + 1);
        }
        uint64_t old;
        if (k != REC_R_MARK && u64map_del(&w->open_ranges, r->addr, &old)) { /* an id again */
            w->ranges_unwritten -= !((open_range *)(uintptr_t)old)->written;
            free((void *)(uintptr_t)old);
        }
        if (o && k == REC_R_MARK) {
            range_closed(w, o, o->start); /* a mark: its end is its start */
        } else if (!o || u64map_put(&w->open_ranges, r->addr, (uint64_t)(uintptr_t)o) != 0) {
            /* no memory to hold it: written now (after the batch, which is older) */
            range_flush(w);
            range_row(w, &row, o ? o->path : NULL, k == REC_R_MARK ? &row.start : NULL);
            free(o);
        } else {
            w->ranges_unwritten++;
        }
    } else if (k == REC_R_RANGE_POP || k == REC_R_RANGE_END) {
        int64_t end = (int64_t)rec_ticks_to_ns(g, r->t);
        uint64_t held;
        open_range *o = u64map_del(&w->open_ranges, r->addr, &held) ? (open_range *)(uintptr_t)held : NULL;
        if (o && !o->written) { /* not in the file yet: one whole row, in the next batch */
            range_closed(w, o, end);
            o = NULL;
            w->ranges_unwritten--;
        } else {
            sqlite3_stmt *s = stmt(w, S_RANGE_END);
            bind_i(s, 1, end);
            bind_i(s, 2, (int64_t)r->addr);
            step(w, S_RANGE_END, "closing ranges");
        }
        free(o);
    }
}

/* A name names the allocation live at its address now: its row carries that allocation's birth,
 * so that readers join by identity, not by an address handed out again later. */
static void on_name(writer *w, uint64_t seq, rec_rec *r) {
    uint64_t *idx = u64map_get(&w->live, r->addr);
    if (idx) w->la[*idx].name = (uint32_t)r->alloc_id;
    sqlite3_stmt *s = stmt(w, S_NAME);
    bind_i(s, 1, (int64_t)seq);
    bind_i(s, 2, (int64_t)r->addr);
    bind_i(s, 3, (int64_t)r->alloc_id);
    if (idx) bind_i(s, 4, (int64_t)w->la[*idx].birth);
    else sqlite3_bind_null(s, 4);
    step(w, S_NAME, "writing names");
}

static size_t drain(writer *w, rec_state *g, size_t max) {
    rec_rec r;
    size_t n = 0;
    uint64_t seq;
    while (n < max && (seq = rec_ring_pop(&g->ring, &r)) != 0) {
        if (!w->in_txn) {
            if (exec(w, "BEGIN") != 0) return n;
            w->in_txn = 1;
            w->txn_start = rec_now_ns();
        }
        if (r.kind == REC_R_WORDS) {
            on_words(w, &r);
        } else if (r.kind == REC_LAUNCH) {
            on_launch(w, seq, &r);
        } else if ((r.kind & 0xffu) >= REC_R_BASE) {
            if (r.kind == REC_R_NAME) on_name(w, seq, &r);
            else on_range(w, g, &r);
        } else {
            on_event(w, seq, &r);
        }
        w->last_seq = seq;
        n++;
        if (w->failed) {
            /* this record's write failed: it is lost too (write_failure counted those before
             * it); the rest of the ring is popped and counted by the failed loop */
            if (r.kind != REC_R_WORDS) w->lost++;
            break;
        }
    }
    return n;
}

static void commit(writer *w, rec_state *g) {
    flush_ranges(w);
    flush_events(w);
    flush_life(w);
    rb_flush(w, &w->launches); /* before retimed: a row is replaced only once it is in */
    rb_flush(w, &w->uses);
    rb_flush(w, &w->retimed);
    uint64_t dropped = atomic_load(&g->ring.dropped); /* events and word records: either changed */
    if (dropped != w->dropped_written || w->words_lost != w->lost_written ||
        w->unread != w->unread_written) {
        if (!w->in_txn && exec(w, "BEGIN") == 0) w->in_txn = 1;
        meta_int(w, "dropped_events", (int64_t)ring_dropped_events(&g->ring));
        meta_int(w, "dropped_word_records", (int64_t)atomic_load(&g->ring.dropped_aux));
        meta_int(w, "launch_words_lost", (int64_t)w->words_lost);
        meta_int(w, "launches_unread", (int64_t)w->unread);
        w->dropped_written = dropped;
        w->lost_written = w->words_lost;
        w->unread_written = w->unread;
    }
    if (w->in_txn) {
        exec(w, "COMMIT");
        w->in_txn = 0;
    }
    atomic_store(&g->committed_seq, w->last_seq);
    progress(g);
}

static void finish(writer *w, rec_state *g) {
    if (!w->in_txn && exec(w, "BEGIN") == 0) w->in_txn = 1;
    for (uint64_t i = 0; w->live.keys && i <= w->live.mask; i++)
        if (w->live.keys[i] != U64MAP_EMPTY) life_row(w, w->la[w->live.vals[i]].birth, 0, w->la[w->live.vals[i]].name);
    for (int d = 0; d < REC_MAX_DEVICES; d++) flush_peak(w, d, 1);
    uint64_t samples = atomic_load(&g->app_ns_samples);
    meta_int(w, "events", (int64_t)w->events);
    /* readers take the allocator's statistics as the recorded peaks where this is 0, without a
     * scan of the events for such rows (gm_recorded_peaks) */
    meta_int(w, "own_segment_allocs", (int64_t)w->own_segment_allocs);
    /* readers find gpumem's resets of PyTorch's peaks without a scan where this is 0 (gm_torch_peak_reset) */
    meta_int(w, "gpumem_peak_resets", (int64_t)w->gpumem_peak_resets);
    meta_int(w, "launches", (int64_t)w->n_launches);
    meta_int(w, "uses_rows", (int64_t)w->n_uses);
    meta_int(w, "launch_words_lost", (int64_t)w->words_lost);
    meta_int(w, "launches_unread", (int64_t)w->unread);
    meta_int(w, "launches_untimed", (int64_t)w->untimed);
    meta_int(w, "dropped_events", (int64_t)ring_dropped_events(&g->ring));
    meta_int(w, "dropped_word_records", (int64_t)atomic_load(&g->ring.dropped_aux));
    double app_sum = (double)atomic_load(&g->app_ns_sum) * (g->use_tsc ? g->ns_per_tick : 1.0);
    /* sampled every 64th event of a thread: a run with fewer on every thread (a PyTorch program
     * under its own allocator makes a few segment events) has no figure, which readers say */
    if (samples) meta_int(w, "app_ns_per_event", (int64_t)(app_sum / (double)samples));
    meta_int(w, "clock_tsc", g->use_tsc);
    meta_int(w, "stack_table_full", (int64_t)atomic_load(&g->stack_table_full));
    meta_int(w, "end_ns", (int64_t)(rec_now_ns() - g->start_ns));
    struct timespec cpu;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    meta_int(w, "writer_cpu_ns", (int64_t)cpu.tv_sec * 1000000000 + cpu.tv_nsec);
    /* the index by allocation, sorted once here rather than kept up during the run (see
     * schema.sql, table uses) */
    exec(w, "PRAGMA cache_size=-65536"); /* the sort's memory (see the open's cache_size) */
    exec(w, "CREATE INDEX IF NOT EXISTS uses_birth ON uses (birth)");
    /* a SIGINT/SIGTERM closed it (rec.c): complete all the same, and said so */
    int sig = atomic_load(&g->interrupted);
    meta_text(w, "state", sig ? "interrupted" : "closed");
    if (sig) meta_int(w, "signal", sig);
    commit(w, g);
    sqlite3_wal_checkpoint_v2(w->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    if (!w->failed)
        g->gpu_records = w->events - w->device_infos + w->n_launches + ring_dropped_events(&g->ring) +
                         atomic_load(&g->ring.dropped_aux) + w->words_lost;
}

static void writer_cleanup(writer *w) {
    release_reserve(w, 1);
    for (int i = 0; i < S_COUNT_; i++) sqlite3_finalize(w->st[i]);
    if (w->db) sqlite3_close(w->db);
    w->db = NULL;
    for (uint64_t i = 0; w->open_ranges.keys && i <= w->open_ranges.mask; i++)
        if (w->open_ranges.keys[i] != U64MAP_EMPTY) free((void *)(uintptr_t)w->open_ranges.vals[i]);
    for (int i = 0; i < w->nclosed; i++) free(w->closed[i]);
    w->nclosed = 0;
    u64map_free(&w->open_ranges);
    for (uint64_t i = 0; w->tid_names.keys && i <= w->tid_names.mask; i++)
        if (w->tid_names.keys[i] != U64MAP_EMPTY) free((void *)(uintptr_t)w->tid_names.vals[i]);
    u64map_free(&w->tid_names);
    u64map_free(&w->live);
    u64map_free(&w->streams);
    u64map_free(&w->frames);
    u64map_free(&w->pyframes);
    free(w->pyf);
    for (uint32_t i = 0; i < w->nstrs; i++) free(w->strs[i]);
    free(w->strs);
    for (size_t i = 0; i < w->nmods; i++) free(w->mods[i].path);
    free(w->mods);
    free(w->la);
    addr_index_free(&w->idx);
    for (uint32_t i = 0; i < w->npw; i++) free(w->pw[i].w), free(w->pw[i].acc);
    free(w->pw);
    free(w->hits);
    free(w->tl);
    for (int d = 0; d < REC_MAX_DEVICES; d++)
        if (w->peak_pending[d]) rec_item_free(w->peak_pending[d]);
    memset(w, 0, sizeof *w);
}

/* GPUMEM_TEST_SLOW_CLOSE=ms:n (tests only: tests/integration/snapshot_signals.sh,
 * record_exec.sh). At the first close or flush the program asks for, the writer first spends n
 * steps of ms each, each one progress, as a close that writes a long backlog a slice at a time
 * on a loaded disk would; n = 0: one step of ms without progress, a writer stuck in a system
 * call. The program's waits for it (rec.c, wait_writer) must see the first through and still
 * end with the second. Read at each start of the writer (a forked child's too). */
static long test_slow_ms, test_slow_n;

static void test_slow_read(void) {
    const char *v = getenv("GPUMEM_TEST_SLOW_CLOSE");
    test_slow_ms = test_slow_n = 0;
    if (v && sscanf(v, "%ld:%ld", &test_slow_ms, &test_slow_n) != 2) test_slow_ms = 0;
}

static void test_slow_close(rec_state *g) {
    long ms = test_slow_ms;
    test_slow_ms = 0; /* once */
    for (long i = 0; i < (test_slow_n ? test_slow_n : 1); i++) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
        if (test_slow_n) progress(g);
    }
}

static void *writer_main(void *arg) {
    rec_state *g = arg;
    writer *w = &W;
    /* The writer runs at the program's own priority. It once ran at nice +10 (a tenth of a
     * core's share when every core is busy): on a loaded machine it then fell seconds behind,
     * and a kill -9 lost all of that. Its wake-ups are few (a commit every 25 ms, a drain when a
     * quarter of the ring fills), so a fair share costs the program little (make bench, demo.*). */
    rec_ring_consumer_thread(); /* a record pushed from here never waits for room */
    atomic_fetch_and(&g->ring.no_wait, ~(REC_RING_NO_CONSUMER | REC_RING_STALLED));
    atomic_store(&g->writer_running, 1);
    int stall_said = 0;
    for (;;) {
        int stopping = atomic_load(&g->writer_stop);
        if (__builtin_expect(test_slow_ms != 0, 0) &&
            (stopping || atomic_load(&g->flush_req) > atomic_load(&g->flush_done)))
            test_slow_close(g);
        int db_held = writer_lock(g, &g->db_lock, REC_HOLD_DB);
        size_t n = 0;
        if (!w->failed) {
            uint64_t req = atomic_load(&g->flush_req); /* before the items its caller queued */
            take_items(w, g);
            n = drain(w, g, BATCH);
            if (n) progress(g);
            take_items(w, g);
            timing_write(w);
            /* Commit on the clock, not whenever the ring runs dry: a training loop drains in
             * small bursts, and a commit per burst cost ~10 us of writer CPU per event, taken
             * from the program's own threads on a busy machine. A waiting rec_flush() gets
             * its commit as soon as the ring is drained. */
            uint64_t want = atomic_load(&g->flush_seq);
            int flush = (want > atomic_load(&g->committed_seq) || req > atomic_load(&g->flush_done)) &&
                        w->last_seq >= want;
            if (w->in_txn && (flush || rec_now_ns() - w->txn_start >= COMMIT_NS)) commit(w, g);
            else if (!w->in_txn) atomic_store(&g->committed_seq, w->last_seq);
            if (flush && !w->in_txn) atomic_store(&g->flush_done, req);
        } else {
            /* SQLite failed: keep the ring moving so producers never wait on us, and hand the
             * timing tokens back to the resolver (they hold the preload's resources); a
             * rec_flush() waits no more */
            atomic_store(&g->writer_failed, 1);
            rec_rec r;
            while (rec_ring_pop(&g->ring, &r)) {
                n++;
                if (r.kind != REC_R_WORDS) w->lost++;
                if (r.kind == REC_LAUNCH && r.requested)
                    timed_push(w, 0, (void *)(uintptr_t)r.requested, 0, 0, 0);
            }
        }
        if (stopping && n == 0) {
            if (db_held) pthread_mutex_unlock(&g->db_lock);
            /* every timed launch left gets its final answer, outside db_lock like the others */
            if (w->failed) timing_abandon(w);
            else timing_ask(w, 1);
            db_held = writer_lock(g, &g->db_lock, REC_HOLD_DB);
            if (!w->failed) {
                timing_write(w);
                finish(w, g);
            } else if (w->db) {
                /* how much was thrown away, in the second reserve's room */
                release_reserve(w, 1);
                char *sql = sqlite3_mprintf("INSERT OR REPLACE INTO meta VALUES ('dropped_events', %llu), "
                                            "('dropped_word_records', %llu)",
                                            (unsigned long long)(ring_dropped_events(&g->ring) + w->lost),
                                            (unsigned long long)atomic_load(&g->ring.dropped_aux));
                if (sql) sqlite3_exec(w->db, sql, NULL, NULL, NULL);
                sqlite3_free(sql);
                /* no checkpoint at close on a disk that failed: a checkpoint cut short by ENOSPC
                 * would only grow the main file; the WAL already holds every commit */
                sqlite3_db_config(w->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
            }
            if (db_held) pthread_mutex_unlock(&g->db_lock);
            break;
        }
        if (db_held) pthread_mutex_unlock(&g->db_lock);
        /* producers waiting for room (the default back-pressure) go on now */
        if (atomic_load_explicit(&g->ring.no_wait, memory_order_acquire) & REC_RING_STALLED) {
            if (!stall_said++)
                rec_warn("the program waited %llu s for the writer without progress; events are dropped "
                         "(and counted) while it is that far behind",
                         (unsigned long long)(REC_RING_STALL_NS / 1000000000u));
            if (n) atomic_fetch_and(&g->ring.no_wait, ~REC_RING_STALLED); /* moving again */
        }
        rec_ring_room(&g->ring);
        if (w->failed) timing_abandon(w);
        else if (w->tl_len > w->tl_done) timing_ask(w, 0);
        /* The ring is drained (a full batch means more may wait: go on at once). Sleep until
         * the next commit is due, or a producer has filled a quarter of the ring, or a flush
         * or close asks: the writer shares the cores with the program, and every wake-up of
         * its thread can stall a parallel region of the program's. */
        if (n < BATCH) rec_ring_wait(&g->ring, WAIT_NS);
    }
    /* nobody drains from here on: a producer that still finds the ring full drops */
    atomic_fetch_or(&g->ring.no_wait, REC_RING_NO_CONSUMER);
    rec_ring_room(&g->ring);
    writer_cleanup(w);
    atomic_store(&g->writer_done, 1);
    rec_end_signal_deliver(g); /* a signal's close handed over to us (rec.c): it ends the process */
    return NULL;
}

/* In a forked child: the parent's writer state (connection, statements, maps) must not be
 * used or freed through SQLite. It is parked, still reachable, so that leak checkers in the
 * child do not report the parent's memory, and the child starts from zero. */
static writer *volatile parked_writer;
void rec_writer_forget(void) {
    static writer parked;
    release_reserve(&W, 1); /* the parent's space stays the parent's */
    parked = W;
    parked_writer = &parked; /* volatile: the copy is kept, and kept reachable */
    memset(&W, 0, sizeof W);
}

int rec_writer_start(rec_state *g) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the writer takes no signals of the program */
    atomic_store(&g->writer_stop, 0);
    atomic_store(&g->frozen, 0);
    atomic_store(&g->writer_running, 0);
    atomic_store(&g->writer_done, 0);
    test_slow_read();
    int rc = pthread_create(&g->writer, NULL, writer_main, g);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        rec_warn("cannot start the writer thread: %s; not recording", strerror(rc));
        writer_cleanup(&W);
        return -1;
    }
    /* Return only once the new thread is in its loop: while a thread starts, the C library (and
     * a sanitizer runtime) allocate in it without any lock of ours, and a fork() of the program
     * in that window would leave the child an allocator lock nobody will release. In its loop
     * the writer allocates only under db_lock, which the fork handlers hold. */
    for (int i = 0; i < 200000 && !atomic_load(&g->writer_running); i++) sched_yield();
    pthread_setname_np(g->writer, "gpumem-writer");
    return 0;
}

void rec_writer_stop(rec_state *g) {
    atomic_store(&g->writer_stop, 1);
    rec_ring_wake(&g->ring);
    pthread_join(g->writer, NULL);
    g->db = NULL;
}
