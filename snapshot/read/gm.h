/* gm.h — the reading side of snapshot/: opening a gpumem database safely, symbolizing its
 * frames, the one-pass analysis behind `gpumem report` and `gpumem leaks`, the analyses of
 * access tracking (`uses`: idle at the peak, one tensor's life), and the printers.
 * Internal to the gpumem command (and its tests / fuzz target); the preload never links it. */
#ifndef GPUMEM_SNAPSHOT_GM_H
#define GPUMEM_SNAPSHOT_GM_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "snapshot/record/u64map.h"

/* What a usage error ends with, after its one line: where the help is (never the whole help,
 * which buries the error). cmd: the command's name, a string literal. */
#define GM_HELP(cmd) "(gpumem " cmd " --help tells more)\n"

/* ---- the values of options (gm_args.c): one rule in every command ----
 * gm_arg_uint: decimal digits only (no sign, space, suffix or hex), from lo to hi, no overflow;
 * gm_arg_real: a plain decimal number (digits first: no sign, "inf", "nan" or hex), finite,
 * from lo to hi. Both return 0 with *out set, or -1 and leave *out alone.
 * gm_usage: the usage error's two lines ("gpumem CMD: ...", where the help is), GM_EXIT_USAGE.
 * gm_arg_top: --top N from 1 to GM_TOP_MAX, else a usage error (its return value).
 */
#define GM_TOP_MAX 1000000
int gm_arg_uint(const char *v, uint64_t lo, uint64_t hi, uint64_t *out);
int gm_arg_real(const char *v, double lo, double hi, double *out);
int gm_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int gm_arg_top(const char *cmd, const char *v, int *top);
/* --device N, spelled and read the same in every command that gives one device's figures
 * (report, leaks, frag, tune, advise, viz, export, diff, ranks): gm_opt_is_device says whether
 * argv[i] is it ("--device N" or "--device=N"); gm_arg_device reads its value (stepping *i over
 * a separate one) into *dev, a device number from 0 to GM_DEVICES - 1, else a usage error (its
 * return value). Whether the recording used that device is checked on reading it
 * (gm_db_scope_one, gm_model_pick_device). */
int gm_opt_is_device(const char *a);
int gm_arg_device(const char *cmd, int argc, char **argv, int *i, int *dev);
/* The rule of every command, checked before its own parser runs (run_command): an option that
 * takes a value, given twice with two values ("report --top 3 --top 5", "--top=3 --top 5",
 * "export --format csv -f torch"), is a usage error (its return value), never the last one
 * silently taken; the same value twice, or a flag twice ("--json --json"), says one thing and
 * is accepted. Stops at "--" (and, for record, at the command recorded). 0 when none. */
int gm_args_repeats(const char *cmd, int argc, char **argv);
/* 1, with the error on stderr, when two of the paths are one file (by device and inode: "a.db
 * ./a.db", a hard link), which a command reading one database per rank must not take as two. */
int gm_args_same_file(const char *cmd, const char *const *paths, size_t n);
/* gm_opt_peek, gm_opt_value: in gm_args.h, which gpumem-replay includes too */
#include "snapshot/read/gm_args.h"

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
    /* "" or why the recording is damaged (its first reason; gm_db_damaged): found by the checks
     * of every sweep over the events (gm_analyze_pages.c) and of the open (the meta table) */
    char damage[512];
    /* gm_meta_int/gm_meta_text and gm_table_exists, prepared on first use (a report asks
     * dozens of times; a fuzz input's open is mostly such lookups); finalized by gm_db_close */
    sqlite3_stmt *meta_st, *table_st;
    /* 0: every reading sees every device. D + 1: gm_db_scope_device made every reading of the
     * recording device D's (TEMP views named events, ooms, snapshots and segments shadow the
     * file's tables, and the sweeps read the events through them: gm_events_pages keeps the
     * rows the events view keeps), so that a command's figures, replays included, are one
     * device's: each device has its own allocator, and their sum is a heap no device held.
     * scope_devices: how many devices the program held memory on (scope_lo to scope_hi) */
    int scoped;
    int scope_devices, scope_lo, scope_hi;
    /* why the scoped device is the one (GM_DEV_*: gm_lead_from's), and the busiest device by
     * gpumem's account (scope_busiest), which gm_scope_say names where it is not the one read */
    int scope_from, scope_busiest;
    /* D + 1: the device was asked for (--device D; gm_db_scope_one), scoped or, on a recording
     * with memory on D alone, read whole; 0: the busiest device's, or one device's */
    int device_asked;
    /* D + 1 where --device D was asked (gm_model_pick_device, gm_db_scope_one) of a recording
     * whose PyTorch history holds nothing on D (its tensors were on other devices: the memory on D
     * was not PyTorch's); 0 otherwise. torch_devs[0 .. ntorch_devs): the devices its tensors were
     * on; torch_absent_allocator: 1 PyTorch's own allocator, 2 gpumem through its hook. Read it
     * through gm_torch_absent, every command the same way. */
    int torch_absent, torch_absent_allocator, ntorch_devs;
    int torch_devs[128];
} gm_db;

/* Opens and validates. On failure returns -1 with a message for a person in err (what is wrong
 * and what to do). Never crashes on a bad file. */
int gm_db_open(const char *path, gm_db *d, char *err, size_t errsz);
/* gm_db_open for a caller that must leave the file exactly as it found it (gpumem record -q's
 * look at how a recording ended): the same checks, and nothing is folded or written — the file,
 * its -wal and its -shm keep their bytes, and no side file is created or removed. A -wal's
 * commits are read (through a private WAL index, never the -shm: snapshot/read/gm_db.c,
 * "gm-asis"); so the file must be one no process is writing (a finished or killed recording). */
int gm_db_open_as_found(const char *path, gm_db *d, char *err, size_t errsz);
/* The same checks on a database image in memory (sqlite3_deserialize, read-only; data must stay
 * valid and unchanged until gm_db_close; name stands for the path in messages). The fuzzers
 * use it: no file per input. */
int gm_db_open_mem(const char *name, const void *data, size_t size, gm_db *d, char *err,
                   size_t errsz);
/* Databases open read-only for every statement (PRAGMA query_only); on = 1 lets this
 * connection write (returns -1 when the file is not writable), on = 0 forbids it again. */
int gm_db_allow_writes(gm_db *d, int on);
void gm_db_close(gm_db *d);
/* The bytes in path's write-ahead log (path-wal, record/rec.h's rec_db_side), 0 when it has none:
 * commits a checkpoint has not folded into the file yet, which belong to the recording. */
int64_t gm_db_wal_bytes(const char *path);
/* The first column of the one-row query sql, 0 where it fails (a file without that table or column)
 * or gives no row. */
int64_t gm_sql_int(gm_db *d, const char *sql);
/* meta lookups: return dflt / "" when absent */
int64_t gm_meta_int(gm_db *d, const char *key, int64_t dflt);
void gm_meta_text(gm_db *d, const char *key, char *out, size_t outsz);
/* 1 when the recording ran under PyTorch's allocator (its memory history merged, or an imported
 * PyTorch snapshot: meta torch_conf), with its PYTORCH_CUDA_ALLOC_CONF in out ("" unset); 0 when
 * gpumem's allocator or the driver served it (meta.config, a GPUMEM_CONF, says how). */
int gm_meta_pytorch_conf(gm_db *d, char *out, size_t outsz);
/* The recorded peaks allocated and reserved of a recording of gpumem's allocator, as the model
 * counts them (README, "What each figure counts"): the allocator's statistics (meta
 * stat.peak_*), which leave out what was passed through as its own segment (a pool the program
 * chose, a graph's memory node) — so where there is such an allocation, the running sums over
 * the events. */
void gm_recorded_peaks(gm_db *d, uint64_t *allocated, uint64_t *reserved);
/* The recording's device-wide peak as the model counts it (gm_model.peak_device, report's
 * summary.peak_device): gpumem's reserve plus the program's own VMM mappings (PyTorch's
 * expandable segments), for a command that reads no model (advise). The reserved peak where
 * the events cannot be scanned. */
uint64_t gm_recorded_device_peak(gm_db *d);
int gm_table_exists(gm_db *d, const char *name);
/* 1 when `names` has its birth column (the allocation each name names; recorders since it was
 * added within schema 1.3): join names to allocations by it. Without it (older files, and rows
 * whose birth is NULL) a name names the allocation live at its address at its seq. */
int gm_names_have_birth(gm_db *d);

/* Recordings that lost events (meta.dropped_events: a full ring in GPUMEM_RING_FULL=drop mode,
 * a failed disk, a stuck writer). gm_dropped: how many (0: none). gm_lossy_line: the line every
 * analysis of such a recording prints first ("gpumem: WARNING: ... lost N events (why) ..."; ""
 * when none were lost). gm_lossy_gate, for the analyses whose answer the lost events can change
 * (report, leaks, frag, tune, advise; cmd is the command's name): nothing lost, 0; lost and
 * lossy_ok (--lossy-ok), the line is printed on out and 0; else a refusal on stderr (why, and
 * what to do) and GM_EXIT_BADDB. */
uint64_t gm_dropped(gm_db *d);
void gm_lossy_line(gm_db *d, char *out, size_t n);
/* That line on out, when the recording lost events (the analyses that still answer: uses, diff,
 * export and viz, on stderr where their output is not text for a person). */
void gm_lossy_say(gm_db *d, FILE *out);
int gm_lossy_gate(gm_db *d, const char *cmd, int lossy_ok, FILE *out);

/* Recordings of a program that did not run to its end: ended by a signal (meta.state
 * 'interrupted', meta.signal), replaced by an exec, a failed recording, or one killed or still
 * being written ('recording'). What it held then is in the file as alive at the end, which no
 * output may call a leak without saying so. gm_ending: why, in the words every output uses
 * ("ended by SIGHUP", "it replaced itself by exec", "the recording failed", "killed, or still
 * running"), written into buf; NULL when the program ran to its end (state 'closed').
 * gm_ending_line: the one sentence every output built from the recording carries (viz's page and
 * D.summary.ending, diff, the exports, frag, tune, advise, uses, the ranks report, leaks): "the
 * program did not run to its end (WHY): what it held then shows as alive, not necessarily
 * leaked"; "" when it did. gm_ending_say: "gpumem: note: PATH: " and that sentence on out. */
const char *gm_ending(gm_db *d, char *buf, size_t n);
void gm_ending_line(gm_db *d, char *out, size_t n);
void gm_ending_say(gm_db *d, FILE *out);
/* SIGHUP as "SIGHUP" (the real-time ones as kill -l names them: "SIGRTMIN+3"); with hint, what
 * usually sends the common ones ("SIGINT (Ctrl-C)", "SIGHUP (its terminal or session closed)");
 * "a signal" for 0. */
void gm_signal_name(int sig, int hint, char *out, size_t n);

/* Damaged recordings: pages of the file overwritten (a failing disk, a copy gone wrong), found
 * cheaply where the events are read (their seqs must increase; a closed recording holds as many
 * as meta.events says) and where the file opens (its meta table checked). gm_db_damaged records
 * the first reason (printf-style). gm_damage_gate, called after a command's sweep, treats it
 * as gm_lossy_gate treats lost events: nothing found, 0; found and lossy_ok, a warning line on
 * out and 0; else a refusal on stderr and GM_EXIT_BADDB. has_lossy_ok: whether cmd takes
 * --lossy-ok (else the refusal names gpumem report --lossy-ok). */
void gm_db_damaged(gm_db *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int gm_damage_gate(gm_db *d, const char *cmd, int has_lossy_ok, int lossy_ok, FILE *out);
/* Every event read (pages, else SQLite; gm_analyze_pages.c) and dropped: only the checks of a
 * sweep, for a command that reads the events otherwise (export trace, csv); what they find is
 * in d->damage. */
void gm_events_check(gm_db *d);

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
    uint8_t flags; /* GM_ALLOC_* */
    uint32_t death_range; /* the NVTX range of its free (a tensor's: where PyTorch was asked to
                             free it), 0 = none or alive at the end */
    uint32_t next_death;  /* where gm_model.deaths_linked: the allocation that died next after
                             this one, its index + 1 (0 = none); in the struct's padding */
} gm_alloc;
/* a device allocation that is one of PyTorch's segments (its cache, not a tensor) */
#define GM_ALLOC_FW_SEGMENT 1u
/* (the torch view's sweep only) a tensor freed but not yet completed: out of the statistics */
#define GM_ALLOC_FREED 2u
/* made through the framework's allocator hook (PyTorch with gpumem as its allocator) */
#define GM_ALLOC_FRAMEWORK 4u
/* made in a graph capture's private pool (events.flags REC_F_PRIVATE_POOL) */
#define GM_ALLOC_PRIVATE 8u
/* passed through to the driver from a pool the program chose or as a graph's memory node
 * (REC_F_POOL, REC_F_GRAPH): memory the driver gave for exactly this block, its own segment, so
 * in reserved from its allocation to its free (README, "What each figure counts") */
#define GM_ALLOC_OWN_SEGMENT 16u
/* a pinned host block freed from PyTorch's host cache at exit by gpumem's hooks: its free flagged
 * REC_F_HOST_CACHE, or (recordings before that flag) with GM_HOST_CACHE_FN in its stack */
#define GM_ALLOC_HOST_CACHE 32u
/* a device block (a tensor in PyTorch's view) freed at exit by gpumem's hooks from PyTorch's
 * cuBLAS / cuBLASLt workspaces (torch._C._cuda_clearCublasWorkspaces()): its free flagged
 * REC_F_TORCH_CACHE (rec.h). PyTorch keeps one per (handle, stream) for the process's life: alive
 * at exit, not a leak the program made (leaks' .torch_workspaces) */
#define GM_ALLOC_WORKSPACE 64u
/* a device block alive at the end that cuBLAS made for one of PyTorch's handles: its stack's
 * innermost frame in cuBLAS (libcublas*: a handle's default workspace, made by cublasCreate),
 * a frame of PyTorch's CUDA library (libtorch_cuda*) above it. PyTorch keeps its cuBLAS handles
 * for the process's life and has no call that destroys them: alive at exit, not a leak the
 * program made (leaks' .cublas_handles; gm_alloc_leaked). Not told without a stack. */
#define GM_ALLOC_CUBLAS_HANDLE 128u
/* Leaks' rule for one allocation of a leak view (gm_model_leak_view): alive at the end, and not
 * a block cuBLAS keeps for a handle PyTorch never destroys (GM_ALLOC_CUBLAS_HANDLE). */
static inline int gm_alloc_leaked(const gm_alloc *a) { return !a->death && !(a->flags & GM_ALLOC_CUBLAS_HANDLE); }
/* the events.flags of such an allocation (kinds 1 and 3; rec_is_own_segment tests them with the
 * kind) */
#define GM_OWN_SEGMENT_FLAGS (REC_F_POOL | REC_F_GRAPH)

/* CUDA graphs' memory in one view (the device's events, or PyTorch's merged history): the
 * allocations and segments of private pools (events flagged REC_F_PRIVATE_POOL — gpumem's pools
 * of a capture, PyTorch's pools other than (0, 0)). Allocated follows the view's rules (the
 * torch view drops a tensor at its free_requested). */
typedef struct gm_pools {
    uint64_t allocs, alloc_bytes;        /* allocations made in private pools, their bytes */
    uint64_t allocated, peak_allocated;  /* live in them: now (at the end, after the sweep), peak */
    uint64_t reserved, peak_reserved;    /* their segments: now, peak */
    uint64_t segments;                   /* segment (or page) maps made for them */
    uint64_t reserved_at_peak;           /* their segments at the view's own peak reserved */
} gm_pools;

typedef struct gm_range {
    int64_t id, parent;
    char *path;
    int64_t step; /* the "step N" this range is in, -1 when none */
} gm_range;

/* An OOM's limit where none was set (ooms.limit_bytes NULL; 0 in a file before schema 1.4, when a
 * limit of 0 bytes could not be set). Every reader of limit_bytes goes through gm_oom_limit_col:
 * a limit of 0 bytes is a limit, never "none". */
#define GM_NO_LIMIT UINT64_MAX
typedef struct gm_oom {
    uint64_t seq, requested, allocated, reserved, free_cached, largest_free, device_free,
        device_total, limit; /* limit: GM_NO_LIMIT none */
    uint64_t name;   /* strings id of the failed allocation's name, 0 = none (schema 1.0) */
    uint32_t range;  /* the OOM event's NVTX range (its phase), 0 = none */
    uint32_t stack;  /* the OOM event's stack */
    int device;
    int fraction; /* limit is PyTorch's per-process memory fraction, not GPUMEM_LIMIT
                   * (the OOM event's REC_F_OOM_FRACTION) */
    unsigned limit_flags; /* the OOM event's REC_F_OOM_FRACTION / REC_F_OOM_KEY: what set limit
                           * (gm_oom_limit_from) */
} gm_oom;

/* The limit an out-of-memory error met: whichever of the device's memory and the configured
 * cap left the allocator less room above what it had reserved. Every command that tells a
 * person what to raise after an OOM asks this, so none names a knob the run never set. */
typedef enum gm_oom_bound {
    GM_OOM_DEVICE,     /* the device was full (a limit, if any, was above what it had) */
    GM_OOM_LIMIT_ENV,  /* GPUMEM_LIMIT */
    GM_OOM_LIMIT_CONF, /* the limit key of GPUMEM_CONF */
    GM_OOM_LIMIT,      /* gpumem's limit, set by either (recordings without meta.limit_from) */
    GM_OOM_FRACTION,   /* PyTorch's per-process memory fraction */
    GM_OOM_KEY,        /* the per_process_memory_fraction key of GPUMEM_CONF (its share of the
                          device, below the limit in bytes) */
    GM_OOM_TORCH_KEY,  /* PyTorch's per-process memory fraction as the per_process_memory_fraction
                          key of PYTORCH_CUDA_ALLOC_CONF set it (its start value; no
                          set_per_process_memory_fraction call replaced it): both flags */
} gm_oom_bound;

/* Column col of statement s, an ooms.limit_bytes of d: the limit in bytes, or GM_NO_LIMIT (NULL;
 * 0 in a file older than schema 1.4). */
uint64_t gm_oom_limit_col(const gm_db *d, sqlite3_stmt *s, int col);
/* Who set the limit an OOM recorded (limit: table ooms' limit_bytes, flags: the event's flags,
 * of which REC_F_OOM_FRACTION and REC_F_OOM_KEY name the fraction and the key; a limit in bytes
 * is told apart by meta.limit_from); GM_OOM_DEVICE where there was none. */
gm_oom_bound gm_oom_limit_from(gm_db *d, uint64_t limit, unsigned flags);
/* The bound: the limit's source, or GM_OOM_DEVICE where the device left less room than the
 * limit (reserved + device_free; without the device's figures, device_free 0, the failure
 * itself says the device had no room). */
gm_oom_bound gm_oom_binding(gm_db *d, uint64_t limit, uint64_t reserved, uint64_t device_free,
                            unsigned flags);
/* The knob that sets the bound, for a person ("GPUMEM_LIMIT", "the limit key of GPUMEM_CONF",
 * ...), NULL for the device. */
/* For PyTorch's per-process memory fraction (GM_OOM_FRACTION, GM_OOM_TORCH_KEY), how the program
 * set it: "torch.cuda.set_per_process_memory_fraction" or "the per_process_memory_fraction key of
 * PYTORCH_CUDA_ALLOC_CONF"; NULL for a limit that is not the fraction. */
const char *gm_oom_fraction_how(gm_oom_bound b);
const char *gm_oom_knob(gm_oom_bound b);
/* What lets a rerun get past the OOM: "rerun with GPUMEM_LIMIT raised", or for the device
 * "rerun on a device with more memory (GPUMEM_SIM_MEMORY on the virtual GPU)". */
const char *gm_oom_rerun(gm_oom_bound b);
/* The JSON word for a limit's source (report's and advise's .limit_from): "GPUMEM_LIMIT",
 * "GPUMEM_CONF", "per_process_memory_fraction", "GPUMEM_CONF:per_process_memory_fraction",
 * "PYTORCH_CUDA_ALLOC_CONF:per_process_memory_fraction"; NULL for GM_OOM_DEVICE (no limit). */
const char *gm_oom_json(gm_oom_bound b);

/* One device's figures in one view (gm_model.devs, gm_torch_view.devs), each as its view's
 * model-wide one counts them but over that device's allocations and segments only: on a
 * recording with several devices the model-wide figures add the devices together (a moment's
 * sum, which no device held), so every output that names a peak takes it from here
 * (gm_busiest_device) or reads that device's events alone (gm_db_scope_one). */
typedef struct gm_dev_figs {
    uint64_t allocated, reserved, requested; /* at the end */
    uint64_t peak_allocated, peak_allocated_seq, peak_reserved, peak_reserved_seq;
    uint64_t peak_requested, peak_requested_seq;
    /* the device-wide peak of this device (gm_model.peak_device's rule: reserved + the program's
     * own VMM mappings), with the VMM and PyTorch's reserve on it then; vmm: its VMM now. Kept in
     * the model's devs only (a view's are 0) */
    uint64_t vmm, peak_device, peak_device_seq, peak_device_vmm, peak_device_torch;
} gm_dev_figs;
/* devices a model keeps figures of: events.device 0..GM_DEVICES-1 (an allocation's is an int8_t) */
#define GM_DEVICES 128

typedef struct gm_step {
    int64_t step;
    uint64_t end_allocated; /* allocated bytes at the step's end: after its last event and the frees
                               of its own that follow it outside every step (step_trail) */
    uint64_t start_seq;     /* seq of the step's first event (of any kind: a step whose ranges
                               hold no allocation still spans its launches, marks, tensors) */
    uint64_t end_seq;       /* seq of the step's last event */
    uint64_t leaked;        /* bytes requested in the step and alive at the end */
    uint64_t nleaked;
} gm_step;

/* PyTorch's own view of its caching allocator, from its memory history merged into the
 * recording (kinds 31-35; formats/gm_torch.h): its tensors, and its statistics by its rules —
 * block sizes, allocated and requested dropping when a tensor is freed (free_requested),
 * reserved = its segments. A tensor's death is its free_completed. */
typedef struct gm_torch_view {
    int present; /* 1: PyTorch's history merged; 2: gpumem served PyTorch (its allocator hook):
                    then only the requested and allocated figures, of the hook's allocations */
    gm_alloc *allocs; /* tensors, in birth order (kind REC_TORCH_ALLOC) */
    size_t nallocs, allocs_cap;
    uint64_t allocated, requested, reserved;
    uint64_t peak_allocated, peak_allocated_seq, peak_requested, peak_requested_seq;
    uint64_t peak_reserved, peak_reserved_seq;
    gm_step *steps; /* per step, as the model's, over tensors */
    size_t nsteps;
    gm_pools pools; /* PyTorch's private pools (CUDA graphs, MemPool) */
    gm_dev_figs *devs; /* per device (GM_DEVICES of them), NULL when out of memory */
} gm_torch_view;

/* NVTX start/end ranges (ranges.kind 1) as spans of time: span i begins at at[i] (ns, the
 * events' clock) and lasts until at[i + 1] (the last one, for ever); range[i] is the start/end
 * range that holds it (0: none). What every reader of an event's phase asks (gm_spans_range),
 * whether it loads the model (gm_event_range) or reads the events itself (advise's model). */
typedef struct gm_spans {
    int64_t *at;
    uint32_t *range;
    size_t n;
} gm_spans;

typedef struct gm_model {
    /* tables */
    u64map str_idx; char **strs; size_t nstrs;
    u64map frame_idx; gm_frame *frames; size_t nframes;
    gm_module *mods; size_t nmods;
    u64map stack_idx; uint32_t *stack_frames; size_t nstack_frames; /* stack id -> start in stack_off */
    uint64_t *stack_off; size_t nstacks;                              /* [2*i]=start, [2*i+1]=len */
    u64map range_idx; gm_range *ranges; size_t nranges;
    gm_spans spans; /* the start/end ranges, for gm_event_range */
    gm_alloc *allocs; size_t nallocs, allocs_cap;
    /* the pinned host blocks PyTorch's host cache held at exit (GM_HOST_CACHE_FN): copies, owned
     * here, shared by the views (the torch view's allocs hold no host blocks) */
    gm_alloc *host_cache; size_t nhost_cache;
    /* the pinned host blocks alive at the end (tensors still held them), copies as host_cache */
    gm_alloc *host_held; size_t nhost_held;
    /* those of host_held that PyTorch made (its pinned host allocator in their stacks) in a
     * recording where gpumem's hooks never emptied PyTorch's host cache (no meta
     * torch_host_cache: python -E, -I or -S kept gpumem record's sitecustomize out, or recorded
     * without gpumem record): the cache's blocks are among them, not told apart. Copies as
     * host_cache; none where the hooks ran */
    gm_alloc *host_unknown; size_t nhost_unknown;
    /* deaths_linked: the allocations that died are linked in the order they died (the sweep
     * meets deaths in seq order), from allocs[first_death - 1] on through their next_death, so
     * a pass in time order merges births and deaths without sorting. 0 where the model has no
     * such list (a view, 2^32 allocations or more, a negative seq): a reader then orders the
     * deaths itself. */
    int deaths_linked;
    size_t first_death;
    /* where deaths_linked: ndeaths deaths in the list, and each GM_DEATH_MARK-th one's allocation
     * (death_marks[k]: the index of the (k + 1) * GM_DEATH_MARK-th), so that the deaths after a
     * moment are found from the nearest mark before it (gm_first_death_after), not from the
     * list's start */
    uint32_t *death_marks;
    size_t ndeath_marks, death_marks_cap, ndeaths;
    /* the allocations never freed (death 0), in index order, where alive_known (the sweep's live
     * map held every one of them) */
    uint32_t *alive;
    size_t nalive;
    int alive_known;
    gm_oom *ooms; size_t nooms;
    gm_step *steps; size_t nsteps;
    int inlines_expanded;
    /* gm_symbolize_sites: frames are symbolized as a call site's description reads them
     * (gm_sym_frame), stacks left as recorded; NULL when gm_symbolize did them all */
    struct gm_sym_lazy *sym_lazy;
    /* call sites: 0 = the user's code (Python's own library, torch and gpumem frames skipped
     * when a stack has Python frames), 1 = every frame as recorded (--frames all) */
    int frames_all;
    /* sweep results */
    uint64_t events, max_seq, first_t, last_t;
    uint64_t count_kind[64];
    uint64_t allocated, reserved, host, managed;
    uint64_t requested; /* requested bytes of live device allocations */
    uint64_t peak_allocated, peak_allocated_seq, peak_reserved, peak_reserved_seq, peak_host;
    uint64_t peak_requested, peak_requested_seq; /* peak of what the program asked for */
    /* The program's own VMM mappings (cuMemMap: PyTorch's expandable segments, for one): held
     * outside gpumem's allocator, so in none of the figures above (README, "What each figure
     * counts"); vmm now, peak_vmm their high. The device-wide peak adds them to gpumem's reserved
     * (to the allocations where no segment was recorded): peak_device at peak_device_seq, with
     * the VMM and PyTorch's reserve then (PyTorch's view names every byte of it).
     * peak_held*: the same of allocated + vmm, which is the device-wide one without segments. */
    uint64_t vmm, peak_vmm;
    uint64_t peak_device, peak_device_seq, peak_device_vmm, peak_device_torch;
    uint64_t peak_held, peak_held_seq, peak_held_vmm, peak_held_torch;
    int have_segments;
    gm_pools pools; /* gpumem's pools of graph captures (PyTorch with gpumem as its allocator) */
    uint64_t graph_nodes, graph_node_bytes; /* the driver's graph memory nodes (REC_F_GRAPH) */
    uint64_t cache_hits, cache_misses;
    uint64_t unmatched_frees;
    int derived_on_read; /* alloc lifetimes rebuilt from events (always true: one sweep) */
    struct gm_devused *devused; /* the device account (gm_devused.h), computed in the same
                                   sweep by gm_model_load; NULL when it could not be */
    int truncated_warning;
    gm_torch_view torch; /* present when PyTorch's history was merged */
    int is_torch_view;   /* made by gm_model_torch_view: its allocations are PyTorch's tensors */
    /* the view's figures per device (GM_DEVICES of them; the torch view's are m->torch.devs),
     * NULL when out of memory; device_only: made by gm_model_device_view, device_only - 1 the
     * device (its allocs its own array) */
    gm_dev_figs *devs;
    int device_only;
    int device_asked; /* D + 1: --device D leads (gm_model_pick_device); 0: the busiest */
} gm_model;

/* How many devices the model's view holds memory on (allocated or reserved at some moment), and
 * the lowest and highest of them in *lo, *hi (either may be NULL); 0 on an empty recording. */
int gm_model_devices(const gm_model *m, int *lo, int *hi);
/* The device whose peak reserved is highest in the model's view (then its peak allocated, then the
 * lowest number): the one whose figures a multi-device report leads with. 0 without figures. */
int gm_busiest_device(const gm_model *m);
/* The device a command reads when --device is not given: where PyTorch's history was merged
 * (torch.present == 1) and its tensors held memory, the busiest of their devices (its
 * max_memory_reserved(d)), even where another device held more outside them (a library's
 * workspace, a cudaMalloc through ctypes): the question asked of a PyTorch program is where its
 * memory went; where gpumem served PyTorch (torch.present == 2, --allocator gpumem), the same of
 * the hook's allocations (their peak allocated by device); else the busiest (gm_busiest_device). */
int gm_default_device(const gm_model *m);
/* The device whose figures lead: the one asked for (gm_model_pick_device), else gm_default_device. */
int gm_lead_device(const gm_model *m);
/* Why gm_lead_device(m) is the one: GM_DEV_ASKED (--device), GM_DEV_BUSIEST (the busiest),
 * GM_DEV_TORCH (PyTorch's tensors' busiest device, which is not the busiest); *busiest (may be
 * NULL): gm_busiest_device(m). */
enum { GM_DEV_BUSIEST = 0, GM_DEV_ASKED = 1, GM_DEV_TORCH = 2 };
int gm_lead_from(const gm_model *m, int *busiest);
/* gm_lead_from's answer in words for a person, into buf (room for n), every command the same:
 * "as --device asked", "the busiest; --device N gives another's", or "the busiest of PyTorch's
 * tensors' devices; device B held more by gpumem's account, PyTorch's tensors less: --device B
 * for its figures". Returns buf. */
const char *gm_device_why(int from, int busiest, char *buf, size_t n);
/* The same for the model's lead device, where a command words "the busiest" its own way
 * (busiest: those words): "as --device asked", busiest, or gm_device_why's PyTorch sentence. */
const char *gm_lead_why(const gm_model *m, const char *busiest, char *buf, size_t n);
/* gm_lead_from's answer for JSON (the "device_from" key): "asked", "busiest", "torch". */
const char *gm_device_from_json(int from);
/* The device asked for (--device N: gm_model_pick_device, gm_db_scope_one, which note it in d)
 * where PyTorch's history holds nothing on it: its tensors were on other devices, and PyTorch's
 * view of device N is empty, not another device's figures nor zeros to print. -1 otherwise
 * (nothing asked, no history, or tensors on N). With line (room for n): the sentence every
 * command says it with, naming the devices its tensors were on. */
int gm_torch_absent(const gm_db *d, char *line, size_t n);
/* The recording's PyTorch hooks left a node that a module shares with the child whose output it
 * returned as is to the child (meta torch_bwd_ranges "innermost"): its backward ranges are named
 * right. 0 for a recording made before, whose such ranges gm_model_load reads under the child's
 * name (gm_analyze.c, torch_bwd_names) and advise too (gm_advise.c, bwd_of_returned_child). */
int gm_torch_bwd_innermost(gm_db *d);
/* A range of PyTorch's hooks as gm_torch_bwd_child reads it: its module's path (NULL: not a
 * module range of a step's pass), its pass ('f' forward, 'b' backward), the pass range it is in
 * (ranges of one pass in their order), its step, and whether allocations were made in it. */
typedef struct gm_hooks_range {
    const char *mod;
    uint64_t pass_id;
    int64_t step;
    char pass;
    uint8_t made;
} gm_hooks_range;
/* The one rule by which a recording made before gm_torch_bwd_innermost names such a backward
 * range (gm_model_load's ranges, advise's): r[0, n) in their order; each backward range found to
 * hold a child's backward takes that child's module (r[k].mod set to the child's path, again
 * for a grandparent). The number renamed, or -1 out of memory (what was renamed by then stays). */
long gm_torch_bwd_child(gm_hooks_range *r, size_t n);
/* Where gm_torch_absent says so: the JSON object of PyTorch's view on that device, one shape
 * for every command (report's and frag's and tune's .torch, the others' .torch_absent):
 * {"allocator","device","on_device":false,"tensor_devices":[...],"peak_requested":null,
 * "peak_allocated":null,"peak_reserved":null,"note"}; "null" otherwise. */
void gm_torch_absent_json(const gm_db *d, FILE *out);
/* The model (or a view of it) restricted to device dev: its allocations that device's (a new
 * array), its figures that device's; ooms, steps and tables shared. 0, or -1 out of memory (*v
 * untouched). Free it with gm_model_device_view_free, never gm_model_free. */
int gm_model_device_view(const gm_model *m, int dev, gm_model *v);
void gm_model_device_view_free(gm_model *v);
/* How many devices the program held memory on (allocations, segments, PyTorch's tensors and
 * segments in events; not the streams table, where a stream made on a device it never allocated
 * on has a row), lowest and highest in *lo, *hi. 0 when none. The streams bound it (every event
 * names a stream row of its device); events are looked at only where they show two or more, for the
 * commands that read no model (export); a model's is gm_model_devices, the same devices. */
int gm_db_devices(gm_db *d, int *lo, int *hi);
/* The same devices, listed in devs (up to max of them, lowest first); how many. */
int gm_db_device_list(gm_db *d, int *devs, int max);
/* Every reading of d from here on is device dev's (gm_db.scoped): TEMP views over the file's
 * events, ooms, snapshots and segments keep the rows of that device (and the events of none:
 * device NULL or -1), and the sweeps read the events of the view (gm_events_pages: the table's
 * pages, the same rows kept; else SQLite). 0, or -1 (SQLite refused
 * the views: nothing changed). */
int gm_db_scope_device(gm_db *d, int dev);
/* "VIEW TABLE AS SELECT * FROM main.TABLE WHERE ..." into buf (n bytes): the view over the file's
 * TABLE that gm_db_scope_device creates (CREATE TEMP and this), device dev's rows and those of no
 * device; SQLite keeps its text as "CREATE " and this, which is how the page reader knows the view
 * it reads for (gm_analyze_pages.c). 0, or -1 (buf too small). */
int gm_db_scope_view(char *buf, size_t n, const char *table, int dev);
/* For a command that reads one device's figures (leaks, export, frag, tune, advise, viz): where
 * the program held memory on several devices (gm_db_devices), scopes d to device `want` (--device;
 * -1: none asked) or else the device gpumem report leads with (gm_default_device: PyTorch's
 * tensors' busiest where its history is merged, else the busiest; noted in d->scope_from), from the
 * model `have` (loaded from d unscoped) or, NULL, one sweep of its own. 1 scoped (a model loaded
 * before is every device's: load it again), 0 one device (nothing done: asked for that device,
 * the output is the same), GM_SCOPE_NO_DEVICE where the program held no memory on `want` (err
 * lists the devices it did use), or -1 with a message for a person in err. */
enum { GM_SCOPE_NO_DEVICE = -2 };
int gm_db_scope_one(gm_db *d, const gm_model *have, int want, char *err, size_t errsz);
/* gm_db_scope_one's (or gm_model_pick_device's) failure, said: "gpumem CMD: ERR" on stderr, and
 * where ERR names devices to give, " (or leave it out for WITHOUT)": what the command shows without
 * --device ("the busiest", "every device", ...: each command's own); its exit code, GM_EXIT_USAGE
 * for a device the recording never used, GM_EXIT_BADDB otherwise. */
int gm_scope_fail(const char *cmd, int sc, const char *err, const char *without);
/* For a command that reads the model (report, diff, ranks): the device `want` (--device; -1:
 * none asked, nothing done) leads instead of the busiest (gm_lead_device), in m and every view
 * made of it. 0, or GM_SCOPE_NO_DEVICE where the program held no memory on it (err lists the
 * devices it did use; PATH is d's). */
int gm_model_pick_device(gm_db *d, gm_model *m, int want, char *err, size_t errsz);
/* On a scoped d: "gpumem: note: PATH: the program held memory on N devices (lo to hi): FIGURES
 * are device D's, WHY ..." (gm_device_why: the busiest, as --device asked, or PyTorch's tensors'
 * busiest device with the busiest named) on out, then, where PyTorch's
 * history has nothing on D, "gpumem: note: PATH: " and gm_torch_absent's sentence; nothing
 * otherwise. */
void gm_scope_say(gm_db *d, const char *figures, FILE *out);
/* On a scoped d: `BEFORE"device":D,"devices":N,"device_from":FROMAFTER` on out (whose figures a
 * JSON output's are, how many devices held memory, and why D: "asked", "busiest" or "torch", then
 * with `,"busiest_device":B`: gm_device_from_json), with `,"torch_absent":{...}` (gm_torch_absent_json) before
 * AFTER where PyTorch's history has nothing on D; nothing otherwise, so one device's JSON keeps
 * its bytes. gm_scope_say says the same sentence in text. */
void gm_scope_json(const gm_db *d, FILE *out, const char *before, const char *after);

/* The model as PyTorch's allocator saw it: a shallow copy of m whose allocations, peaks and
 * steps are the torch view's (tables shared; never free it, free m). Every analysis of the
 * model runs on it unchanged: the report's tables of tensors are the same code as its tables of
 * device allocations. */
gm_model gm_model_torch_view(const gm_model *m);
/* The allocations a reading of the model counts, one rule for diff and the exports: in PyTorch's
 * view (is_torch_view) its tensors (kind REC_TORCH_ALLOC), else the device allocations
 * (cudaMalloc and cudaMallocAsync: PyTorch's segments, on a PyTorch program on its allocator). */
int gm_alloc_in_view(const gm_model *m, const gm_alloc *a);
/* The one rule for "leaked" (leaks, the ranks report, viz): the allocations alive at the end of
 * the model this returns. With PyTorch's history merged (torch.present == 1) that is the torch
 * view: its tensors, since PyTorch's cached segments outlive them all by design and are not
 * leaks; otherwise m itself (a shallow copy; never free it, free m). */
gm_model gm_model_leak_view(const gm_model *m);
/* The pinned host blocks still held at the end (m->host_held) that the leaks of the leak view v
 * count beside its allocations: a block the program kept to its end is alive at exit, which is
 * what leaks lists, whichever view. The device's view has them among its allocations already
 * (0 here); PyTorch's view holds its device tensors only, and adds them: *bytes requested,
 * *blocks, *held the blocks' bytes. */
void gm_view_host_held(const gm_model *v, uint64_t *bytes, uint64_t *blocks, uint64_t *held);
/* The step an allocation belongs to: the last of m->steps (in the order they began, which is
 * seq order) begun at or before its birth, so one made between two steps' ranges (a tensor kept
 * after opt.step(), when the hook's range has closed) is the step before it's; -1 before the
 * first step. An index into m->steps. */
long gm_step_index(const gm_model *m, const gm_alloc *a);
/* A C++ function's name as a person reads it ("c10::cuda::...::alloc_block", without the
 * parameters); malloc'ed, or NULL when fn is not a mangled name. */
char *gm_readable_function(const char *fn);

/* The Python function of gpumem's PyTorch hooks that gives PyTorch's pinned host cache back at
 * exit (preload/python/gpumem/_torch.py): a pinned block whose free's stack holds it was one the
 * program had freed to PyTorch's CachingHostAllocator, which keeps its blocks until exit or
 * torch._C._host_emptyCache() (a freed tensor makes no CUDA call); a pinned block alive at the
 * end is one a tensor still held. The sweep flags the former GM_ALLOC_HOST_CACHE, and
 * gm_model_load copies them into m->host_cache. Recordings since the free's flag
 * (REC_F_HOST_CACHE, rec.h) need no stack: this name is for the ones before it. */
#define GM_HOST_CACHE_FN "_host_cache_at_exit"
/* Deaths between two marks of gm_model.death_marks. */
#define GM_DEATH_MARK 4096u
/* The first death after seq in m's list of deaths (deaths_linked): *first its allocation's
 * index + 1 (0: none after seq), *after how many deaths the list holds from there on. Found from
 * the nearest mark at or before seq, at most GM_DEATH_MARK steps along the list. 0, or -1 where
 * m has no list or not every mark (a view, no memory for them). */
int gm_first_death_after(const gm_model *m, uint64_t seq, size_t *first, size_t *after);

/* Loads tables and runs the sweep. Returns 0, or -1 with err set. progress: print a progress
 * line on stderr (when it is a terminal). */
int gm_model_load(gm_db *d, gm_model *m, int progress, char *err, size_t errsz);
/* The tables only (strings, modules, frames, stacks, ranges, OOMs), without the sweep of the
 * events: for readers that sweep the events their own way (gpumem frag). 0, or -1 with err. */
int gm_model_load_tables(gm_db *d, gm_model *m, char *err, size_t errsz);
void gm_model_free(gm_model *m);
/* Grows *p (an array of elem-byte items, *cap of them) to hold at least need, doubling from 64;
 * 0, or -1 out of memory (*p untouched). The readers and analyses share it. */
int gm_grow(void **p, size_t *cap, size_t need, size_t elem);
/* qsort's comparison of two uint64_t, ascending. */
int gm_cmp_u64(const void *a, const void *b);
/* qsort of n items, nothing when there are fewer than two: an empty array is often NULL, which
 * qsort's declaration forbids whatever n is (UBSan: "null pointer passed as argument 1"). Every
 * sort of the reading side goes through it. */
static inline void gm_sort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *)) {
    if (n > 1) qsort(base, n, size, cmp);
}
/* Advises the 2 MiB pages inside [p, p + bytes) to be transparent huge pages, for an array of
 * an item per event or allocation not yet written: a long recording's would otherwise take a
 * page fault every 4 KiB (advice: nothing where THP is off, or the array is small). */
void gm_huge_pages(void *p, size_t bytes);
/* gm_grow with its check inline, for the arrays grown an item per event or allocation. */
static inline int gm_grow_fast(void **p, size_t *cap, size_t need, size_t elem) {
    return need <= *cap ? 0 : gm_grow(p, cap, need, elem);
}
/* A command's opening of its database: gm_db_open and gm_model_load (with the progress line),
 * then gm_symbolize when symbolize. A failure is printed on stderr as one "gpumem: ..." line,
 * leaves nothing open and returns GM_EXIT_BADDB; 0 otherwise. */
int gm_open_model(const char *path, gm_db *d, gm_model *m, int symbolize);
const char *gm_str(const gm_model *m, uint64_t id);
const gm_range *gm_range_of(const gm_model *m, uint64_t id);
/* The NVTX range that is an event's phase: range (events.range, the innermost push/pop range of
 * the event's thread) where it is one; else the start/end range open at the event's time t_ns
 * (events.t) — the one begun last of those open then, since start/end ranges belong to the
 * process, not to a thread, and need not nest; else 0 (outside every range). Every reader that
 * names an event's phase asks this (the model's sweep for allocations, frees, OOMs and steps;
 * uses, frag, advise and viz for the events they read themselves), so none calls an event inside
 * a start/end range "outside any NVTX range". */
uint32_t gm_event_range(const gm_model *m, uint32_t range, int64_t t_ns);
/* gm_event_range for an events row of kind and flags: 0 for a free made by gpumem's exit hooks
 * (rec_is_host_cache_free, rec_is_workspace_free), which comes after the program ended and is in
 * none of its phases, whatever range it left open (an OOM leaves its step's). Recorded with no
 * range since 2026-12-07; a file before that gave it the range open then. */
uint32_t gm_row_range(const gm_model *m, uint32_t range, int64_t t_ns, unsigned kind, unsigned flags);
/* The same rule on spans read without the model: gm_spans_load reads them from the recording
 * (none where the file has no start/end ranges, no kind column, or memory runs out: phases are
 * then the push/pop ranges alone); gm_spans_free frees them. */
uint32_t gm_spans_range(const gm_spans *s, uint32_t range, int64_t t_ns);
void gm_spans_load(gm_db *d, gm_spans *s);
void gm_spans_free(gm_spans *s);

/* Symbolizes frames not yet symbolized with elfutils libdw, inlined calls included, in memory
 * (readers never write the recording). Then expands inline chains into logical frames
 * (gm_expand_inlines). Returns the number of frames symbolized. */
size_t gm_symbolize(gm_db *d, gm_model *m);
/* For a command that names stacks only by their call sites and callers (gm_site_desc,
 * gm_stack_site: `gpumem report`): frames are symbolized when a site's description first reads
 * them, each module opened at its first such frame. A module no printed site or caller is in is
 * never read (a recording's libc frames under main: libdw inflates libc6-dbg's compressed
 * DWARF whole, 0.2 G instructions). Stacks stay as recorded (no gm_expand_inlines): a site's
 * caller is then its own inline chain's first function where it has one. Falls back to
 * gm_symbolize under GPUMEM_SYM_VERIFY=1, on stacks already expanded, on inline chains read
 * from the file, or out of memory. Returns 1 when lazy, 0 when every frame was symbolized. */
int gm_symbolize_sites(gm_db *d, gm_model *m);
/* Under gm_symbolize_sites, symbolizes frame fi if it is not yet (the model's frames are its
 * cache, filled in through a const model); otherwise nothing. */
void gm_sym_frame(const gm_model *m, long fi);
/* Closes gm_symbolize_sites' modules (gm_model_free calls it). */
void gm_sym_lazy_free(gm_model *m);
/* The symbolized frames as TEMP tables frames and inlines and a TEMP view stack_frames, which
 * shadow the file's in the connection's queries (gpumem sql), and a TEMP table stack_sites (each
 * stack's call site, gm_stack_site); the file is not written. m must be symbolized eagerly
 * (gm_symbolize). 0 or -1. */
int gm_symbols_temp(gm_db *d, const gm_model *m);
/* Rewrites every stack so that each recorded frame is followed by the functions its code was
 * inlined into (new gm_frame entries with inl_depth > 0). Idempotent. Returns 0 or -1 (out of
 * memory: stacks unchanged). */
int gm_expand_inlines(gm_model *m);

/* The call site of a stack (index into m->frames, or -1). A stack with Python frames: the
 * innermost Python frame of the user's code (not Python's own library, torch or gpumem:
 * gm_python_user_frame), else its innermost Python frame. Otherwise, and with m->frames_all:
 * the first frame outside gpumem, the CUDA libraries and CUDA's headers (gm_frame_internal). */
long gm_stack_site(const gm_model *m, uint32_t stack);
/* Whether frame fi is gpumem's or CUDA's, never the program's call site: in libgpumem, the CUDA
 * runtime or driver, or wholly in CUDA's headers (gm_cuda_header: the template wrappers
 * cudaMalloc<T> and the like, inlined into the caller or not). The one rule every command that
 * names "where the program allocated" follows (sites, exports' stacks). */
int gm_frame_internal(const gm_model *m, long fi);
/* Whether a source file is one of the CUDA toolkit's headers (cuda_runtime.h,
 * cuda_runtime_api.h, anything under the toolkit's include folder). */
int gm_cuda_header(const char *file);
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

/* ---- allocations by identity ---- */

/* Index of the allocation born at seq `id` (its identity in the model: binary search, allocs
 * are in birth order), or -1. */
long gm_alloc_by_id(const gm_model *m, uint64_t id);
/* An allocation's identity across the recording: its device and the allocator's id (the same on
 * its alloc event, its free and its block in a snapshot); 0 when it has none (alloc_id 0). */
uint64_t gm_alloc_key(int device, uint64_t alloc_id);
/* Which allocation each allocated block of snapshot `snap` (snapshots.id) belongs to, by identity
 * (gm_owners.c): owners gets block address -> birth seq of its allocation (never the address
 * alone: it was handed out again later). One pass over the events. 0, or -1 (out of memory, a
 * query failed: owners may hold part). */
int gm_snapshot_owners(gm_db *d, int64_t snap, u64map *owners);

/* ---- names and numbers for people ---- */

/* Kernel names as a person reads them (gm_demangle.c): the Itanium C++ ABI name demangled with
 * libiberty ("_Z6matmulPfPKfS1_ii" -> "matmul(float*, float const*, float const*, int, int)");
 * a name that is not mangled ("memcpy HtoD", a C kernel) comes back unchanged. malloc'ed. */
char *gm_demangle(const char *name);
/* The demangled form of strings id `id`, computed once per id; "?" for an unknown id. */
typedef struct gm_demangler { u64map names; } gm_demangler;
const char *gm_demangle_id(gm_demangler *dm, const gm_model *m, uint64_t id);
void gm_demangler_free(gm_demangler *dm);

/* Formatting */
void gm_fmt_bytes(uint64_t v, char *out, size_t outsz);
/* The same, rounded to the hundredth shown up (up = 1) or down (0), never to the nearest: a
 * figure a person types back (a limit to raise to: "at least 3.01 GiB" where 3.00 GiB fails) or
 * a room that must not read larger than it was. */
void gm_fmt_bytes_rounded(uint64_t v, int up, char *out, size_t outsz);
void gm_json_str(FILE *out, const char *s);
/* A duration for a person: "850 ns", "12.5 us", "3.25 ms", "1.500 s". */
void gm_fmt_ns(uint64_t ns, char *out, size_t outsz);

/* The one rule of every per-step table (report's growth, frag's timeline): neighbouring
 * steps whose figures print alike are one row ("step 2-200"); of more than
 * GM_STEP_ROWS_MAX distinct rows, the first and the last GM_STEP_ROWS_MAX / 2, with "..."
 * between. A run of 200 identical steps is one row, a table never grows with the run. */
enum { GM_STEP_ROWS_MAX = 12 };
typedef struct gm_step_row {
    size_t first, last; /* the steps (indexes) this row stands for */
    int gap_before;     /* rows were left out just before this one: print "..." first */
} gm_step_row;
/* Fills rows (room for n) for n steps, same(ctx, i, j) saying steps i and j print alike;
 * returns how many rows to print. */
size_t gm_step_rows(size_t n, int (*same)(const void *ctx, size_t i, size_t j), const void *ctx, gm_step_row *rows);
/* "12" or "2-200" */
void gm_fmt_step_label(int64_t first, int64_t last, char *out, size_t outsz);


#endif
