/* rec_internal.h — state shared by the recorder's application side (rec.c) and its writer
 * thread (rec_writer.c). Not installed; nothing outside snapshot/ includes it. */
#ifndef GPUMEM_SNAPSHOT_REC_INTERNAL_H
#define GPUMEM_SNAPSHOT_REC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sqlite3.h>

#include "snapshot/record/rec.h"
#include "snapshot/record/rec_ring.h"

/* The recorder's own record kinds in the ring (not stored in events.kind). */
enum {
    REC_R_BASE = 64,
    REC_R_RANGE_PUSH = 64, /* addr = range id, size = parent, requested = domain sid, alloc_id = name sid */
    REC_R_RANGE_POP = 65,  /* addr = range id */
    REC_R_RANGE_START = 66,/* like PUSH, no parent */
    REC_R_RANGE_END = 67,  /* addr = range id */
    REC_R_MARK = 68,       /* size = parent, requested = domain sid, alloc_id = name sid */
    REC_R_NAME = 69,       /* addr, alloc_id = name sid */
    REC_R_WORDS = 70,      /* argument words of a launch that follows: see below */
};

/* rec_launch's encoding in the ring. A launch with n words is ceil(n / 5) REC_R_WORDS records
 * followed by one REC_LAUNCH record, all pushed by the calling thread, so the writer sees them
 * in that order (a thread's records keep their order in the ring); other threads' records may
 * come in between.
 *   REC_R_WORDS: thread; stack = the launch's tag (the thread's launch counter); range = chunk
 *                number (0, 1, ...); device = words in this record (1..5, or 1..6 with
 *                REC_WORDS_T_WORD); the words in addr, size, requested, alloc_id, stream (and t);
 *                t = their access bytes (REC_ACC_*), word i in bits 8i..8i+7, or, with
 *                REC_WORDS_T_WORD set in device (a launch without access bytes: a kernel's),
 *                the sixth word (access unknown, 0).
 *   REC_LAUNCH:  t, stream, device, thread, range as any event (no stack); addr = func,
 *                size = bytes; requested = the timing token (0: untimed); alloc_id = name sid
 *                (low 32 bits) | tag (high 32 bits); stack = nwords (low 24 bits) | op << 24.
 * The writer collects a thread's chunks and attaches them to the thread's next launch only when
 * the tags match and every chunk arrived (0, 1, ... with no gap, nwords words in all): a dropped
 * record (full ring) loses that launch's uses, never gives them to another launch. */
#define REC_WORDS_PER_REC 5
#define REC_WORDS_PER_REC_T 6      /* without access bytes: t is a word too */
#define REC_WORDS_T_WORD 0x100u    /* in a REC_R_WORDS record's device: t is its sixth word */
#define REC_LAUNCH_MAX_WORDS ((1u << 24) - 1)
/* a REC_LAUNCH record's stack: the word count (low 24 bits), the op (7 bits), and the top bit
 * set when the kernel's arguments could not be read (rec_launch_info.unread) */
#define REC_LAUNCH_OP_MASK 0x7fu
#define REC_LAUNCH_UNREAD (1u << 31)

#define REC_MAX_FRAMES 64
#define REC_SCHEMA_MAJOR 1
#define REC_SCHEMA_MINOR 4 /* 1.1: ooms.name, inlines; 1.2: launches, uses.access; 1.3: frames.python, kinds 21..28, flags 1024/2048; 1.4: ooms.limit_bytes NULL for none (0 is 0 bytes) */
#define REC_VERSION "0.1.0"

/* Items handed from application threads to the writer outside the ring (rare, variable size).
 * One singly linked list per kind, appended under g.lock, taken whole by the writer. */
typedef struct rec_item {
    struct rec_item *next;
    int type;          /* REC_I_* */
    uint64_t id;       /* string id, stack id, thread id, oom seq, snapshot seq */
    uint64_t a, b;     /* per type */
    size_t n, n2;      /* counts (frames; segments, blocks) */
    void *p, *p2;      /* payloads (owned by the item; a stack's are borrowed: rec_item_free) */
    char text[];       /* strings, meta key\0value */
} rec_item;
enum { REC_I_STRING = 1, REC_I_STACK, REC_I_THREAD, REC_I_OOM, REC_I_SNAPSHOT, REC_I_META,
       REC_I_THREAD_NAME };

/* An item and the payloads it owns. A stack's frames (p: native, p2: Python) are the stack
 * table's (stack_id_slow), which keeps them to the end of the recording: the writer is joined
 * (rec_close) or absent (a forked child) before forget_state empties the table. */
static inline void rec_item_free(rec_item *it) {
    if (it->type != REC_I_STACK) free(it->p), free(it->p2);
    free(it);
}

typedef struct rec_state {
    _Atomic int state;            /* REC_ST_* */
    pthread_mutex_t lock;         /* interning, stack slow path, the item list */
    pthread_mutex_t db_lock;      /* held by the writer while it uses SQLite (fork safety) */
    rec_item *items, **items_tail;
    rec_ring ring;
    uint64_t start_ns;            /* CLOCK_MONOTONIC origin */
    char start_cwd[4096];         /* the working directory at the program's start ("" unknown:
                                     rec_note_start) */
    int64_t start_unix_ns;        /* CLOCK_REALTIME at that origin (meta start_unix_ns) */
    int use_tsc;                  /* timestamps are TSC ticks (invariant TSC, calibrated) */
    uint64_t tsc0;                /* TSC at start_ns */
    double ns_per_tick;
    int stacks;                   /* frames per stack, 0 = off */
    int no_unw_memo;              /* tests and benchmarks: 1 = every stack walked, no memo (rec_unwind.h) */
    int fork_record;
    int quiet;
    int names;                    /* GPUMEM_NAMES: 0 = names given by the program are not kept */
    int ranges;                   /* GPUMEM_NVTX: 0 = NVTX and gpumem ranges are not kept */
    int reopen;                   /* a forked child reopening: keep the settings */
    _Atomic uint32_t gen;         /* bumped in a forked child: thread-local state is stale */
    _Atomic uint32_t nthreads;
    _Atomic uint64_t nranges;
    _Atomic uint64_t app_ns_sum, app_ns_samples;
    _Atomic uint64_t stack_table_full;
    _Atomic(rec_timing_fn) timing_fn; /* rec_set_timing_resolver; called by the writer only */
    uint32_t nstrings;            /* under lock */
    uint32_t nstacks;             /* under lock */
    /* stack dedup table: open addressing, key = 64-bit hash | 1, published with release; the
     * entry's frames (set before its key) decide a match, so two stacks of one hash are two
     * entries */
    struct rec_stack_ent {
        _Atomic uint64_t key;
        _Atomic uint32_t id;
        const struct rec_stack_frames *frames; /* owned; freed when the table is emptied */
    } *stab;
    uint64_t stab_mask;
    /* string intern table (chained, under lock) */
    struct rec_str_ent { struct rec_str_ent *next; uint64_t h; uint32_t id; char s[]; } **strtab;
    uint64_t strtab_mask;
    /* writer */
    pthread_t writer;
    _Atomic int writer_stop;
    _Atomic int writer_running;   /* the writer thread has started its loop (see rec_writer_start) */
    _Atomic int writer_done;      /* ... and has closed the database (the signal handler waits) */
    _Atomic uint64_t writer_progress; /* bumped by the writer as it works (a round that drained
                                         records, a commit, every few thousand SQLite steps): the
                                         waits on the way out wait while it moves (rec.c wait_writer) */
    _Atomic int interrupted;      /* the ending signal (rec_signal_ends) that closed the recording, 0 if none */
    _Atomic int end_signal;       /* the ending signal whose handler handed the close over to the
                                     writer and returned (rec.c on_terminating_signal: the writer
                                     stalled on a lock the interrupted thread holds): the writer,
                                     closed, ends the process with it (rec_end_signal_deliver) */
    _Atomic int end_timer;        /* the kernel timer that delivers end_signal should the writer
                                     stop making progress (-1: none; rec_end_timer_push) */
    uint64_t end_since;           /* when the close was handed over (the 60 s cap counts from it) */
    _Atomic int frozen;           /* REC_HOLD_*: held by the thread closing in a signal handler, which
                                     never goes back to its section (rec.c rec_close_ending): the
                                     writer goes on without them (rec_writer.c writer_lock) */
    _Atomic uint64_t committed_seq; /* every record with seq <= this is in the file */
    _Atomic uint64_t flush_seq;     /* rec_flush() waits for this seq: commit as soon as drained */
    _Atomic uint64_t flush_req;     /* rec_flush()'s requests, numbered: items queued before one */
    _Atomic uint64_t flush_done;    /* ... are committed once the writer sets this to its number */
    _Atomic int writer_failed;      /* SQLite failed (disk full, I/O error): nothing more will be
                                       committed, so rec_flush() waits for nothing */
    int lock_fd;
    char path[4096];
    char tmpl[4096];
    long pid;
    /* the first process of the program's tree that loaded libgpumem.so (GPUMEM_RECORD_ROOT,
     * rec_note_start); 0: not known (the recorder opened without the preload) */
    long root_pid;
    /* at a whole close, the writer's count of what the program did on the GPU: events other
     * than gpumem's own device_info, launches, copies and memsets, and dropped records.
     * UINT64_MAX until then (rec.c rec_close: a child's file that holds none is removed) */
    uint64_t gpu_records;
    sqlite3 *db;
} rec_state;

enum { REC_HOLD_LOCK = 1, REC_HOLD_DB = 2 }; /* rec_state.lock, rec_state.db_lock */

enum { REC_ST_NEW = 0, REC_ST_OPENING, REC_ST_OPEN, REC_ST_OFF, REC_ST_CLOSED };

extern rec_state rec_g;

uint64_t rec_now_ns(void);

/* Timestamps on the hot path: the raw TSC where it is invariant (a third of the cost of
 * clock_gettime on a VM), else CLOCK_MONOTONIC ns. The writer converts to ns since start. */
#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t rec_ticks(void) { return rec_g.use_tsc ? __rdtsc() : rec_now_ns(); }
#else
static inline uint64_t rec_ticks(void) { return rec_now_ns(); }
#endif
static inline uint64_t rec_ticks_to_ns(const rec_state *g, uint64_t t) {
    if (g->use_tsc) return t > g->tsc0 ? (uint64_t)((double)(t - g->tsc0) * g->ns_per_tick) : 0;
    return t > g->start_ns ? t - g->start_ns : 0;
}
void rec_item_push(rec_item *it); /* caller holds rec_g.lock */
void rec_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* For tests: close, forget everything, and allow a new rec_open() in this process. */
void rec_test_reset(void);

/* The waits for the writer on the way out (rec.c wait_writer): given up after this long without
 * its progress, or this long in all. */
#define REC_WAIT_IDLE_NS (3ull * 1000000000u)
#define REC_WAIT_CAP_NS (60ull * 1000000000u)
/* A signal's close handed over to the writer (rec.c hand_over; rec_state.c): the writer moves
 * the timer that ends the process should it stop (at each progress: to REC_WAIT_IDLE_NS from
 * now, at most REC_WAIT_CAP_NS from the hand-over), and once closed ends the process with the
 * signal. Async-signal-safe. */
void rec_end_timer_push(rec_state *g);
void rec_end_signal_deliver(rec_state *g);

/* rec_writer.c */
int rec_writer_open_db(rec_state *g); /* create schema and meta; 0 or -1 (warned) */
int rec_writer_start(rec_state *g);
void rec_writer_stop(rec_state *g);   /* drain, derive, close */
void rec_writer_forget(void);         /* forked child: drop the parent's writer state */
extern const char rec_schema_sql[];   /* generated from schema.sql */

#endif
