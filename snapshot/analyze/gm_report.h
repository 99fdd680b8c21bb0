/* gm_report.h — the analyses of analyze/ that more than one command prints: --check's re-run,
 * access tracking (idle at the peak, one tensor's life), the report and leaks printers, the
 * device account's block, and the commands' entry points. Built on read/gm.h (the model);
 * nothing in read/ includes this. */
#ifndef GPUMEM_SNAPSHOT_ANALYZE_GM_REPORT_H
#define GPUMEM_SNAPSHOT_ANALYZE_GM_REPORT_H

#include "snapshot/read/gm.h"
#include "snapshot/read/gm_devused.h"

/* ---- --check (gm_rerun.c) ---- */
/* Where and through which path the recorded command ran: what a re-run needs besides its
 * arguments to run as it ran. */
typedef struct gm_rerun_origin {
    char argv0_path[4096]; /* meta.argv0_path: argv[0] as the exec found it (PATH), links kept;
                              "" in recordings made before gpumem wrote it */
    char exe[4096];        /* meta.exe: the executable, links resolved */
    char cwd[4096];        /* meta.cwd: the working directory at the program's start; "" in older
                              recordings */
    int argv_exact;        /* 1: meta.argv holds the arguments exactly; 0: an older recording, whose
                              meta.cmdline is split at spaces (a re-run says so once on stderr) */
    char path[4096];       /* the recording (for that note) */
    int device;            /* the device --device asked for (gm_db.device_asked), whose figures a re-run
                              reads too; -1: the busiest, in the re-run as in the recording */
} gm_rerun_origin;
void gm_rerun_origin_read(gm_db *d, gm_rerun_origin *o);

/* The recorded command as a re-run runs it, one line of words (every re-run path takes it from
 * here, and adds or replaces words with gm_cmd_split / gm_cmd_join): meta.argv's arguments
 * exactly, each quoted as gm_cmd_quote writes it, returning 1; an older recording's meta.cmdline
 * split at spaces (as re-runs always split it), returning 0. "" when neither is recorded. */
int gm_meta_command(gm_db *d, char *out, size_t n);
/* One word as a line of words writes it: as it is when it holds only [A-Za-z0-9_@%+=:,./-] and
 * bytes >= 0x80, else in single quotes with a quote in it written '\'' (what a POSIX shell reads
 * back too: a person may paste it). -1 when out was too small (the word is then cut). */
int gm_cmd_quote(const char *word, char *out, size_t n);
/* nw words joined by spaces, each gm_cmd_quote'd; -1 when out was too small. */
int gm_cmd_join(char *const *words, int nw, char *out, size_t n);
/* Reads a line of words back (gm_cmd_join's, or a shell's: spaces, tabs and newlines between
 * words; '...' literal; \c the character c): the words in buf, pointers in words. The number
 * of words, or -1 when a quote is not closed, buf is too small or there are more than max. */
int gm_cmd_split(const char *line, char *buf, size_t bufsz, char **words, int max);
/* The program a re-run of cmdline runs (into buf, returned): meta.argv0_path; without it (an
 * older recording), the recorded argv[0] when it is a path that runs, else the program PATH
 * finds for it now when its links lead to meta.exe, else meta.exe, else argv[0] itself. */
const char *gm_rerun_program(const gm_rerun_origin *o, const char *cmdline, char *buf, size_t n);

/* Runs the recorded command again (o: where and through which path it ran, gm_rerun_program;
 * cmdline: the recorded command line, gm_meta_command's, with words added or replaced as
 * gm_cmd_split / gm_cmd_join read and write them) under `gpumem record` in the recorded
 * working directory, with
 * extra_args appended (NULL none) and GPUMEM_CONF=conf (NULL: this environment's), and reads
 * the re-run's measured peaks. ranks 0 runs it directly; N runs it under
 * `mpirun -np N --oversubscribe` (with gm_mpirun_root_flag), and the peaks are the largest
 * rank's. 0, or -1 with err: how the re-run ended, the last lines of its stderr and the command
 * to run by hand (err should hold 2 KiB). */
int gm_rerun(const gm_rerun_origin *o, const char *cmdline, const char *extra_args, const char *conf, unsigned ranks,
             uint64_t *peak_allocated, uint64_t *peak_reserved, char *err, size_t errsz);
/* "--allow-run-as-root" when this process is root and `mpirun` is Open MPI's (which refuses
 * root without it), else "": for the re-runs and for every mpirun line printed for the user. */
const char *gm_mpirun_root_flag(void);
/* gm_rerun under mpirun -np ranks (this environment's configuration), with the smallest rank's
 * peaks too: every rank's peak lies between min and max. */
int gm_rerun_ranks(const gm_rerun_origin *o, const char *cmdline, const char *extra_args, unsigned ranks,
                   uint64_t *max_allocated, uint64_t *max_reserved, uint64_t *min_allocated, uint64_t *min_reserved,
                   char *err, size_t errsz);
/* The same for a PyTorch program on PyTorch's allocator: PYTORCH_CUDA_ALLOC_CONF=pytorch_conf
 * (the variable PyTorch reads first), and the peaks are PyTorch's own from the re-run's merged
 * history (max_memory_allocated / max_memory_reserved). 0, or -1 with err. */
int gm_rerun_torch(const gm_rerun_origin *o, const char *cmdline, const char *pytorch_conf, uint64_t *peak_allocated,
                   uint64_t *peak_reserved, char *err, size_t errsz);

/* PyTorch's peaks by its own rules (block sizes, allocated dropping at free_requested, reserved =
 * its segments) from a merged history: 1 with them, 0 when the recording has none. */
int gm_torch_peaks(gm_db *d, uint64_t *peak_allocated, uint64_t *peak_reserved);
/* PyTorch's retries of an allocation at its limit that succeeded (memory_stats'
 * num_alloc_retries is these and each OOM outside a graph capture, its failed last try): each freed every wholly free cached segment it held first (its
 * release_cached_blocks: a device-wide synchronize and a cudaFree each), then allocated.
 * gm_torch_retries: 1 with some, 0 with none or no history, -1 out of memory. */
typedef struct gm_torch_retries_t {
    uint64_t count;          /* allocations retried after such a release */
    uint64_t segments, bytes; /* the segments those releases gave back, their bytes */
    uint64_t first_seq, last_seq; /* the first and last release's first segment free */
    int exact;               /* 0: where a release may be max_split_size_mb's release of the
                                blocks over it or garbage_collection_threshold's collection alone,
                                which free inside an allocation too, and gpumem's replay of them
                                is unlike the history (gm_report.c, split_release_retried,
                                gc_replay_retried): count is at most */
} gm_torch_retries_t;
int gm_torch_retries(gm_db *d, gm_torch_retries_t *r);
/* Where the program reset PyTorch's peak stats (torch.cuda.reset_peak_memory_stats(d), event 38
 * on device d): from there its max_memory_allocated(d) / max_memory_reserved(d) count only what
 * follows, so a whole-run peak must not be quoted under those names. PyTorch resets one device's
 * statistics at a time: a reset of device 1 leaves device 0's max_memory_*() whole-run. */
typedef struct gm_torch_reset {
    uint64_t count;                      /* resets recorded (0: none; the rest is then unset) */
    uint64_t seq, t_ns;                  /* the last one */
    uint64_t max_allocated, max_reserved; /* PyTorch's max_memory_*() at the end: since the last
                                            reset (the whole run's when there is none) */
    int device;                          /* whose: a device, or GM_TORCH_ALL_DEVICES */
} gm_torch_reset;
/* gm_torch_peak_reset's device for a command that reads the recording as it is (one device, or
 * one device's events alone: gm_db_scope_one): resets on any device it reads counted,
 * max_allocated / max_reserved each such device's max_memory_*(d) added. */
#define GM_TORCH_ALL_DEVICES (-1)
/* Device dev's resets and figures (or every device's, GM_TORCH_ALL_DEVICES): 1 when the recording
 * has a reset there (rs filled), 0 when not (rs->count 0). */
int gm_torch_peak_reset(gm_db *d, int dev, gm_torch_reset *rs);
/* The name a whole-run PyTorch peak goes by: "max_memory_reserved()" (reserved 1) or
 * "max_memory_allocated()", or "whole-run peak reserved/allocated" when the program reset them. */
const char *gm_torch_peak_name(const gm_torch_reset *rs, int reserved);
/* The one line that says so (when, and PyTorch's own figures since), "" when there was no reset. */
void gm_torch_reset_note(const gm_torch_reset *rs, char *out, size_t n);
/* The JSON member "peak_reset" (no comma before it): PyTorch's reset of its peak stats ({count,
 * seq, t_ns, max_memory_allocated, max_memory_reserved}: its own figures since the last), null
 * without. Every command's JSON writes it through this. */
void gm_torch_reset_json(FILE *out, const gm_torch_reset *rs);

/* A PyTorch script re-run (advise --check on a torch recording): under gpumem record with its
 * hooks (or not), gpumem as PyTorch's allocator (or not), PYTORCH_CUDA_ALLOC_CONF=alloc_conf
 * ("" unset). Measured: PyTorch's own peaks (its merged history: what max_memory_allocated /
 * max_memory_reserved print), gpumem's recorded ones when gpumem was its allocator, and the
 * device's beside them. */
typedef struct gm_rerun_script {
    int allocator_gpumem, hooks;
    char alloc_conf[600];
    uint64_t peak_allocated, peak_reserved;
    uint64_t device_peak_allocated, device_peak_reserved;
} gm_rerun_script;
int gm_rerun_torch_script(const gm_rerun_origin *o, const char *cmdline, gm_rerun_script *t, char *err, size_t errsz);

/* ---- access tracking (table `uses`, gm_uses.c) ---- */
/* Whether the database has uses: meta.uses ("1", "timed"; missing or "0": tracking was off)
 * and at least one row in `uses`. */
enum { GM_USES_OFF = 0, GM_USES_EMPTY = 1, GM_USES_ON = 2 };
int gm_uses_state(gm_db *d, char *mode, size_t modesz);
/* Launches whose uses are unknown: meta.launches_unread (kernels whose arguments could not be
 * read: the driver gave no parameter layout) and meta.launch_words_lost (the full ring dropped
 * their words). A tensor that only such launches touched looks unused. Sets *unread and *lost
 * (either may be NULL), writes the one note that says so for the text outputs into buf ("" when
 * none is missing) and returns their sum: what every reader of uses asks. */
int64_t gm_uses_unknown(gm_db *d, int64_t *unread, int64_t *lost, char *buf, size_t n);

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

/* The `gpumem uses` command (gm_uses_cmd.c): argv[0] is "uses". Returns the exit code. */
int gm_cmd_uses(int argc, char **argv);

/* Printers. */
typedef struct gm_opts {
    int json;
    int top;
    int fail_on_leak;
    int lossy_ok; /* --lossy-ok: analyse a recording that lost events (gm_lossy_gate) */
} gm_opts;
int gm_report(gm_db *d, gm_model *m, const gm_opts *o, FILE *out);
int gm_leaks(gm_db *d, gm_model *m, const gm_opts *o, FILE *out, uint64_t *leaked_bytes);
/* record's one-line summary (and the failure, if any). Returns 1 when its counts are the whole
 * run, 0 when events were lost (a failed recording, a full ring) or may have been (a recording
 * never closed, with no allocation committed: never called "nothing allocated"): then it says so. */
int gm_summary_short(gm_db *d, gm_model *m, FILE *out);
int gm_cmd_diff(int argc, char **argv);


/* The report's "device used" block (gm_devused_print.c): text, or the value of the
 * "device_used" JSON key. */
void gm_devused_print_text(FILE *out, const gm_model *m, const gm_devused *u, int top);
void gm_devused_print_json(FILE *out, const gm_model *m, const gm_devused *u, int top);

/* ---- torch.compile (gm_compiled.c) ---- */
/* What a recording of a torch.compile program holds and cannot hold: the compiled module's
 * ranges (its children's hooks do not fire), inductor's autotuning (compile-time tensors made
 * in the first step) with the tensors' peak with and without them, a CUDA graph's private pool. */
typedef struct gm_compiled {
    int compiled;               /* a range of torch.compile's wrapper, or stacks through Dynamo / inductor */
    int64_t compiled_ranges;    /* ranges named OptimizedModule */
    int64_t autotune_count;     /* tensors (allocations) made by inductor's benchmarking */
    uint64_t autotune_bytes;    /* their sizes summed */
    int64_t autotune_first_step, autotune_last_step; /* their "step N" ranges; 0: none */
    uint64_t peak, peak_seq;    /* the tensors' peak (PyTorch's history, else the device's allocations) */
    uint64_t autotune_at_peak;  /* of it, the autotuning's */
    uint64_t peak_without;      /* the peak with the autotuning's tensors left out */
    int private_pools;          /* a private pool (mode="reduce-overhead": CUDA graphs) was allocated in */
} gm_compiled;
/* 1 for a compiled program (c filled), 0 for another (c zeroed). */
int gm_compiled_read(gm_db *d, gm_compiled *c);
/* One paragraph for a page (viz's summary): the module hooks' sentence, the autotuning's, the
 * private pool's. */
void gm_compiled_summary(const gm_compiled *c, char *out, size_t n);
/* The autotuning's sentence (advise's note, report's line). */
void gm_compiled_note(const gm_compiled *c, char *out, size_t n);
/* report's block (nothing for a program that is not compiled) and its JSON key "torch_compile"
 * (null then), with its leading comma. */
void gm_compiled_text(const gm_compiled *c, FILE *out);
void gm_compiled_json(const gm_compiled *c, FILE *out);
/* frag's and tune's line (prefix: their label column) where the replayed trace holds the
 * autotuning's tensors: their figures are the cold run's; nothing otherwise. */
void gm_compiled_replay_note(const gm_compiled *c, const char *prefix, FILE *out);

#endif
