/* gm.h — the reading side of snapshot/: opening a gpumem database safely, symbolizing its
 * frames, the one-pass analysis behind `gpumem report` and `gpumem leaks`, and the printers.
 * Internal to the gpumem command (and its tests / fuzz target); the preload never links it. */
#ifndef GPUMEM_SNAPSHOT_GM_H
#define GPUMEM_SNAPSHOT_GM_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

#include "snapshot/u64map.h"

/* Exit codes of the gpumem command (documented in snapshot/README.md). */
enum { GM_EXIT_OK = 0, GM_EXIT_LEAKS = 1, GM_EXIT_USAGE = 2, GM_EXIT_BADDB = 3, GM_EXIT_NOLIB = 4 };
/* leaks --fail-on-leak on a recording that dropped events: it cannot say leak or no leak */
#define GM_EXIT_CANNOT_JUDGE GM_EXIT_BADDB

typedef struct gm_db {
    sqlite3 *db;
    int writable;
    int schema_major, schema_minor;
    int closed;       /* meta.state == 'closed' (clean end of recording) */
    char path[4096];
} gm_db;

/* Opens and validates. On failure returns -1 with a message for a person in err (what is wrong
 * and what to do). Never crashes on a bad file. */
int gm_db_open(const char *path, gm_db *d, char *err, size_t errsz);
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
    int truncated_warning;
} gm_model;

/* Loads tables and runs the sweep. Returns 0, or -1 with err set. progress: print a progress
 * line on stderr (when it is a terminal). */
int gm_model_load(gm_db *d, gm_model *m, int progress, char *err, size_t errsz);
void gm_model_free(gm_model *m);
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

/* The call site of a stack: the first frame outside gpumem and the CUDA libraries
 * (index into m->frames, or -1). */
long gm_stack_site(const gm_model *m, uint32_t stack);
/* Frame i of a stack (index into m->frames) or -1. */
long gm_stack_frame(const gm_model *m, uint32_t stack, size_t depth, size_t *len);
/* "function (file:line)" or "module+0xoff" */
void gm_frame_desc(const gm_model *m, long fi, char *out, size_t outsz);

/* Printers. */
typedef struct gm_opts {
    int json;
    int top;
    int fail_on_leak;
} gm_opts;
int gm_report(gm_db *d, gm_model *m, const gm_opts *o, FILE *out);
int gm_leaks(gm_db *d, gm_model *m, const gm_opts *o, FILE *out, uint64_t *leaked_bytes);
void gm_summary_short(gm_db *d, gm_model *m, FILE *out);
/* The replay engine's text trace (alloc/README): "a <birth seq> <requested> <stream id>",
 * "f <birth seq>", "fa <birth seq> <stream id>" for device allocations and their frees, in
 * seq order. Returns 0, or GM_EXIT_BADDB with a message on stderr. */
int gm_export_trace(gm_db *d, FILE *out);

/* Formatting */
void gm_fmt_bytes(uint64_t v, char *out, size_t outsz);
void gm_json_str(FILE *out, const char *s);

#endif
