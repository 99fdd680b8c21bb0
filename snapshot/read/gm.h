/* gm.h — the reading side of snapshot/: opening a gpumem database safely, symbolizing its
 * frames, the one-pass analysis behind `gpumem report` and `gpumem leaks`, the analyses of
 * access tracking (`uses`: idle at the peak, one tensor's life), and the printers.
 * Internal to the gpumem command (and its tests / fuzz target); the preload never links it. */
#ifndef GPUMEM_SNAPSHOT_GM_H
#define GPUMEM_SNAPSHOT_GM_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

#include "snapshot/record/u64map.h"

/* Exit codes of the gpumem command (documented in snapshot/README.md). */
enum { GM_EXIT_OK = 0, GM_EXIT_LEAKS = 1, GM_EXIT_USAGE = 2, GM_EXIT_BADDB = 3, GM_EXIT_NOLIB = 4 };
/* leaks --fail-on-leak on a recording that dropped events: it cannot say leak or no leak */
#define GM_EXIT_CANNOT_JUDGE GM_EXIT_BADDB

typedef struct gm_db {
    sqlite3 *db;
    int writable;
    int schema_major, schema_minor;
    int closed;       /* meta.state 'closed' or 'interrupted' (the recorder closed it: complete) */
    char state[32];   /* meta.state: recording, closed, interrupted, failed ("" in old files) */
    char failure[512]; /* meta.failure: why a failed recording failed ("" otherwise) */
    char path[4096];
    /* gm_meta_int/gm_meta_text and gm_table_exists, prepared on first use (a report asks
     * dozens of times; a fuzz input's open is mostly such lookups); finalized by gm_db_close */
    sqlite3_stmt *meta_st, *table_st;
} gm_db;

/* Opens and validates. On failure returns -1 with a message for a person in err (what is wrong
 * and what to do). Never crashes on a bad file. */
int gm_db_open(const char *path, gm_db *d, char *err, size_t errsz);
/* The same checks on a database image in memory (sqlite3_deserialize, read-only; data must stay
 * valid and unchanged until gm_db_close; name stands for the path in messages). The fuzzers
 * use it: no file per input. */
int gm_db_open_mem(const char *name, const void *data, size_t size, gm_db *d, char *err,
                   size_t errsz);
/* Databases open read-only for every statement (PRAGMA query_only); on = 1 lets this
 * connection write (returns -1 when the file is not writable), on = 0 forbids it again. */
int gm_db_allow_writes(gm_db *d, int on);
void gm_db_close(gm_db *d);
/* meta lookups: return dflt / "" when absent */
int64_t gm_meta_int(gm_db *d, const char *key, int64_t dflt);
void gm_meta_text(gm_db *d, const char *key, char *out, size_t outsz);
int gm_table_exists(gm_db *d, const char *name);

/* ---- loaded model ---- */
/* A function a frame's code was inlined into, with the file:line of the inlined call. */
typedef struct gm_inline {
    char *function, *file;
    uint32_t line;
} gm_inline;

typedef struct gm_frame {
    int64_t id;
    uint64_t offset;
    uint32_t module;   /* index + 1 into modules, 0 = unknown */
    uint32_t line;
    char *function, *file;
    int symbolized;
    /* inline chain of a recorded frame (table `inlines`), nearest enclosing function first */
    gm_inline *inl;
    uint32_t ninl;
    /* 1: a Python frame (schema 1.3 frames.python): function, file, line of Python code */
    int python;
    /* > 0: a logical frame made by gm_expand_inlines for inl[inl_depth - 1] of the recorded
     * frame just before it in the stack (same module and offset); never written back */
    uint32_t inl_depth;
} gm_frame;

typedef struct gm_module {
    int64_t id;
    char *path, *build_id;
} gm_module;

typedef struct gm_alloc {
    uint64_t birth, death; /* seq; death 0 = alive at end */
    uint64_t size;         /* bytes held (the allocator's rounded block) */
    uint64_t requested;    /* bytes the program asked for */
    uint32_t stack, range, name;
    uint8_t kind;
    int8_t device;
} gm_alloc;

typedef struct gm_range {
    int64_t id, parent;
    char *path;
    int64_t step; /* the "step N" this range is in, -1 when none */
} gm_range;

typedef struct gm_oom {
    uint64_t seq, requested, allocated, reserved, free_cached, largest_free, device_free,
        device_total, limit;
    uint64_t name;   /* strings id of the failed allocation's name, 0 = none (schema 1.0) */
    uint32_t range;  /* the OOM event's NVTX range (its phase), 0 = none */
    uint32_t stack;  /* the OOM event's stack */
    int device;
} gm_oom;

typedef struct gm_step {
    int64_t step;
    uint64_t end_allocated; /* allocated bytes after the step's last event */
    uint64_t end_seq;       /* seq of the step's last event */
    uint64_t leaked;        /* bytes requested in the step and alive at the end */
    uint64_t nleaked;
} gm_step;

typedef struct gm_model {
    /* tables */
    u64map str_idx; char **strs; size_t nstrs;
    u64map frame_idx; gm_frame *frames; size_t nframes;
    gm_module *mods; size_t nmods;
    u64map stack_idx; uint32_t *stack_frames; size_t nstack_frames; /* stack id -> start in stack_off */
    uint64_t *stack_off; size_t nstacks;                              /* [2*i]=start, [2*i+1]=len */
    u64map range_idx; gm_range *ranges; size_t nranges;
    gm_alloc *allocs; size_t nallocs, allocs_cap;
    gm_oom *ooms; size_t nooms;
    gm_step *steps; size_t nsteps;
    int inlines_expanded;
    /* call sites: 0 = the user's code (Python's own library, torch and gpumem frames skipped
     * when a stack has Python frames), 1 = every frame as recorded (--frames all) */
    int frames_all;
    /* sweep results */
    uint64_t events, max_seq, first_t, last_t;
    uint64_t count_kind[32];
    uint64_t allocated, reserved, host, managed;
    uint64_t requested; /* requested bytes of live device allocations */
    uint64_t peak_allocated, peak_allocated_seq, peak_reserved, peak_reserved_seq, peak_host;
    uint64_t peak_requested, peak_requested_seq; /* peak of what the program asked for */
    int have_segments;
    uint64_t cache_hits, cache_misses;
    uint64_t unmatched_frees;
    int derived_on_read; /* alloc lifetimes rebuilt from events (always true: one sweep) */
    struct gm_devused *devused; /* the device account (gm_devused.h), computed in the same
                                   sweep by gm_model_load; NULL when it could not be */
    int truncated_warning;
} gm_model;

/* Loads tables and runs the sweep. Returns 0, or -1 with err set. progress: print a progress
 * line on stderr (when it is a terminal). */
int gm_model_load(gm_db *d, gm_model *m, int progress, char *err, size_t errsz);
/* The tables only (strings, modules, frames, stacks, ranges, OOMs), without the sweep of the
 * events: for readers that sweep the events their own way (gpumem frag). 0, or -1 with err. */
int gm_model_load_tables(gm_db *d, gm_model *m, char *err, size_t errsz);
void gm_model_free(gm_model *m);
/* A command's opening of its database: gm_db_open and gm_model_load (with the progress line),
 * then gm_symbolize when symbolize. A failure is printed on stderr as one "gpumem: ..." line,
 * leaves nothing open and returns GM_EXIT_BADDB; 0 otherwise. */
int gm_open_model(const char *path, gm_db *d, gm_model *m, int symbolize);
const char *gm_str(const gm_model *m, uint64_t id);
const gm_range *gm_range_of(const gm_model *m, uint64_t id);

/* Symbolizes frames not yet symbolized with elfutils libdw, inlined calls included; writes
 * back when the database is writable and closed. Then expands inline chains into logical
 * frames (gm_expand_inlines). Returns the number of frames symbolized. */
size_t gm_symbolize(gm_db *d, gm_model *m);
/* Rewrites every stack so that each recorded frame is followed by the functions its code was
 * inlined into (new gm_frame entries with inl_depth > 0). Idempotent. Returns 0 or -1 (out of
 * memory: stacks unchanged). */
int gm_expand_inlines(gm_model *m);

/* The call site of a stack (index into m->frames, or -1). A stack with Python frames: the
 * innermost Python frame of the user's code (not Python's own library, torch or gpumem:
 * gm_python_user_frame), else its innermost Python frame. Otherwise, and with m->frames_all:
 * the first frame outside gpumem and the CUDA libraries. */
long gm_stack_site(const gm_model *m, uint32_t stack);
/* Frame i of a stack (index into m->frames) or -1. */
long gm_stack_frame(const gm_model *m, uint32_t stack, size_t depth, size_t *len);
/* The call site of a stack with its caller, "t_alloc (gpt2.c:200) < layer_forward (gpt2.c:634)";
 * returns the site's frame index (or -1). */
long gm_site_desc(const gm_model *m, uint32_t stack, char *out, size_t outsz);
/* 1 when a Python frame is the user's code: not Python's standard library (a file under
 * .../lib/pythonX.Y/ outside site-packages, or "<frozen ...>"), not torch (a top-level package
 * torch* under site-packages or dist-packages) and not the gpumem module. */
int gm_python_user_frame(const gm_frame *f);
/* "function (file:line)" or "module+0xoff"; a Python frame: "file:line in function" */
void gm_frame_desc(const gm_model *m, long fi, char *out, size_t outsz);

/* ---- --check (gm_rerun.c) ---- */
/* Runs the recorded command again (exe: the recorded executable, used for argv[0] when it
 * exists; cmdline: the recorded command line, space-separated) under `gpumem record`, with
 * extra_args appended (NULL none) and GPUMEM_CONF=conf (NULL: this environment's), and reads
 * the re-run's measured peaks. ranks 0 runs it directly; N runs it under
 * `mpirun -np N --oversubscribe`, and the peaks are the largest rank's. 0, or -1 with err
 * (exit 127 under mpirun: no mpirun). */
int gm_rerun(const char *exe, const char *cmdline, const char *extra_args, const char *conf, unsigned ranks,
             uint64_t *peak_allocated, uint64_t *peak_reserved, char *err, size_t errsz);

/* ---- access tracking (table `uses`, gm_uses.c) ---- */

/* Kernel names as a person reads them (gm_demangle.c): the Itanium C++ ABI name demangled with
 * libiberty ("_Z6matmulPfPKfS1_ii" -> "matmul(float*, float const*, float const*, int, int)");
 * a name that is not mangled ("memcpy HtoD", a C kernel) comes back unchanged. malloc'ed. */
char *gm_demangle(const char *name);
/* The demangled form of strings id `id`, computed once per id; "?" for an unknown id. */
typedef struct gm_demangler { u64map names; } gm_demangler;
const char *gm_demangle_id(gm_demangler *dm, const gm_model *m, uint64_t id);
void gm_demangler_free(gm_demangler *dm);

/* Whether the database has uses: meta.uses ("1", "timed"; missing or "0": tracking was off)
 * and at least one row in `uses`. */
enum { GM_USES_OFF = 0, GM_USES_EMPTY = 1, GM_USES_ON = 2 };
int gm_uses_state(gm_db *d, char *mode, size_t modesz);

/* One allocation live at the peak and its uses around it. */
typedef struct gm_idle_alloc {
    size_t alloc;                      /* index into m->allocs */
    uint64_t nuses;                    /* uses the sweep saw; 0 = never used in its life */
    uint64_t last_seq, next_seq;       /* last use at or before the peak, first after; 0 = none */
    uint64_t last_t, next_t;           /* their events.t */
    uint32_t last_kernel, next_kernel; /* strings ids */
} gm_idle_alloc;

/* Gap buckets: < 1 ms, 1-10 ms, 10-100 ms, 100 ms-1 s, >= 1 s, then "none" (no use before the
 * peak / none after it). */
enum { GM_IDLE_TIMED = 5, GM_IDLE_NONE = 5, GM_IDLE_NBUCKETS = 6 };
extern const char *const gm_idle_bucket_name[GM_IDLE_NBUCKETS];
extern const uint64_t gm_idle_bucket_max_ns[GM_IDLE_TIMED]; /* exclusive upper bounds */
int gm_idle_bucket(uint64_t gap_ns);

/* Idle at the peak (gm_idle_at_peak): the device allocations live at the peak allocated moment,
 * with the time since their last use and until their next one. */
typedef struct gm_idle {
    int state;     /* GM_USES_*: the rest is filled only for GM_USES_ON */
    char mode[16]; /* meta.uses */
    uint64_t peak_seq, peak_t;
    gm_idle_alloc *allocs; /* in birth order */
    size_t nallocs;
    uint64_t bytes_live;
    uint64_t since_bytes[GM_IDLE_NBUCKETS], since_count[GM_IDLE_NBUCKETS];
    uint64_t until_bytes[GM_IDLE_NBUCKETS], until_count[GM_IDLE_NBUCKETS];
    uint64_t never_bytes, never_count;         /* no use in their whole life */
    uint64_t not_before_bytes, not_before_count; /* used, but only after the peak */
    uint64_t not_again_bytes, not_again_count;   /* used before the peak, never after it */
} gm_idle;
/* One read of `uses` in its primary-key (launch) order, from the oldest live allocation's birth
 * until every live allocation is settled, and one lookup of the times of the uses it keeps:
 * never a query per allocation. Returns 0, or -1 with err set (damaged uses table). */
int gm_idle_at_peak(gm_db *d, const gm_model *m, gm_idle *out, char *err, size_t errsz);
void gm_idle_free(gm_idle *g);

/* One tensor's life for `gpumem uses`: its birth, every use, its death. */
typedef struct gm_use {
    uint64_t seq, t;
    uint32_t kernel, range; /* strings id; the launch event's NVTX range */
    int access;             /* REC_ACC_* bits; 0 unknown (and always 0 in schema 1.1) */
    int op;                 /* launches.op (REC_OP_*), -1 unknown */
    int64_t start_ns, end_ns; /* on the device (GPUMEM_USES=timed), -1 when not timed */
} gm_use;
typedef struct gm_life {
    size_t alloc; /* index into m->allocs */
    uint64_t birth_t, death_t;
    uint32_t death_range;
    gm_use *uses;
    size_t nuses;
} gm_life;
/* The lives of allocations allocs[0..n) (indices into m->allocs, distinct) into lives[0..n);
 * each life's uses in seq order. Returns 0, or -1 with err set (free the lives either way). */
int gm_lives_load(gm_db *d, const gm_model *m, const size_t *allocs, size_t n, gm_life *lives, char *err,
                  size_t errsz);
void gm_life_free(gm_life *l);
/* Index of the allocation born at seq `id` (binary search: allocs are in birth order), or -1. */
long gm_alloc_by_id(const gm_model *m, uint64_t id);

/* The `gpumem uses` command (gm_uses_cmd.c): argv[0] is "uses". Returns the exit code. */
int gm_cmd_uses(int argc, char **argv);

/* Printers. */
typedef struct gm_opts {
    int json;
    int top;
    int fail_on_leak;
} gm_opts;
int gm_report(gm_db *d, gm_model *m, const gm_opts *o, FILE *out);
int gm_leaks(gm_db *d, gm_model *m, const gm_opts *o, FILE *out, uint64_t *leaked_bytes);
/* record's one-line summary (and the failure, if any). Returns 1 when its counts are the whole
 * run, 0 when events were lost (a failed recording, a full ring): then it says so. */
int gm_summary_short(gm_db *d, gm_model *m, FILE *out);
/* The replay engine's text trace (alloc/README): "a <birth seq> <requested> <stream id>",
 * "f <birth seq>", "fa <birth seq> <stream id>" for device allocations and their frees, in
 * seq order. Returns 0, or GM_EXIT_BADDB with a message on stderr. */
int gm_export_trace(gm_db *d, FILE *out);
/* `gpumem export --format torch|chrome|folded|speedscope|csv` (gm_export_fmt.c) on a loaded,
 * symbolized model. what: folded/speedscope -1 both (speedscope) / peak, 0 peak, 1 total.
 * Returns 0, GM_EXIT_BADDB with a message, GM_EXIT_USAGE for an unknown format. */
int gm_export_format(gm_db *d, gm_model *m, const char *format, int what, FILE *out);
int gm_export_torch(gm_db *d, gm_model *m, FILE *out);
/* `gpumem import` (gm_import.c) and `gpumem diff` (gm_diff.c): argv[0] is the command. */
int gm_cmd_import(int argc, char **argv);
/* The pickle buf[0..n) (a PyTorch memory snapshot; source names it in meta) into a new database
 * at dbpath. Returns 0 with the number of events, or -1 with a one-line reason in err. */
int gm_import_pickle(const unsigned char *buf, size_t n, const char *source, const char *dbpath, uint64_t *events,
                     char *err, size_t errsz);
int gm_cmd_diff(int argc, char **argv);

/* Formatting */
void gm_fmt_bytes(uint64_t v, char *out, size_t outsz);
void gm_json_str(FILE *out, const char *s);
/* A duration for a person: "850 ns", "12.5 us", "3.25 ms", "1.500 s". */
void gm_fmt_ns(uint64_t ns, char *out, size_t outsz);

#endif
