/* gm_frag.h — `gpumem frag`: where the memory between what the program holds and what the
 * allocator reserved went, and which allocator setting gives it back. Internal to the gpumem
 * command (gm_frag.c: the analysis; gm_frag_cmd.c: options and printers). The analysis reads
 * the allocator states the recorder wrote (snapshots/segments/blocks at the reserved peak and
 * at each OOM), one sweep of the events for the timeline and for who was live where, and
 * replays the trace (gm_advise.c's model, alloc/'s allocator) under candidate configurations.
 * See the design comment at the top of gm_frag.c. */
#ifndef GPUMEM_SNAPSHOT_GM_FRAG_H
#define GPUMEM_SNAPSHOT_GM_FRAG_H

#include "alloc/alloc.h"
#include "snapshot/analyze/gm_report.h"
#include "snapshot/analyze/gm_advise.h"

#include <stddef.h>
#include <stdint.h>

/* Why reserved bytes are not the program's, one name per cause (the JSON "cause" strings).
 * Every byte of reserved − allocated lands in exactly one cause, the first that applies in
 * this order; rounding (allocated − requested) is the part inside the program's blocks. */
enum gm_frag_cause {
    GM_FC_ROUNDING = 0,  /* live blocks larger than asked for */
    GM_FC_PENDING,       /* freed, waiting for stream work before reuse */
    GM_FC_GRAPH_POOL,    /* cached in a private pool (a CUDA graph's, a MemPool) the request was not
                          * made in, or outside the private pool it was made in: only that
                          * pool's allocations may use it while the pool lives, whatever the
                          * configuration */
    GM_FC_OTHER_STREAM,  /* cached in another stream's pool */
    GM_FC_OTHER_POOL,    /* cached in the other size pool (small <= 1 MiB vs large) */
    GM_FC_PINNED,        /* free space of a classic segment held by a live neighbour */
    GM_FC_TAIL,          /* the free end of a classic segment that holds live blocks */
    GM_FC_GRANULARITY,   /* free bytes inside mapped pages that also hold live bytes */
    GM_FC_SIZE_CLASS,    /* free segments/pages each smaller than the request while together larger */
    GM_FC_CACHED,        /* free segments/pages the allocator kept instead of giving back */
    GM_FC_UNATTRIBUTED,  /* in reserved but in no block of the snapshot */
    GM_FC_N
};
extern const char *const gm_frag_cause_name[GM_FC_N];

/* A live allocation that keeps free space of its segment from being reused or given back. */
typedef struct gm_frag_pin {
    uint64_t birth;      /* its allocation (the seq of its alloc event), 0 when not found */
    uint64_t addr;       /* its block */
    uint64_t death;      /* the seq of its free, 0: alive at the end */
    uint64_t size;
    uint64_t free_bytes; /* free bytes of its segment it holds (pinned + tail) */
    uint64_t segment;    /* that segment's size */
} gm_frag_pin;

/* private_pool of a PyTorch recording merged before its rows named their pool */
#define GM_FRAG_POOL_UNNAMED UINT64_MAX

/* One (stream, pool) of the allocator at a snapshot. */
typedef struct gm_frag_pool {
    uint64_t stream; /* the stream handle the pool serves */
    int small;       /* 1: small pool (requests <= 1 MiB) */
    uint64_t private_pool; /* 0: the allocator's own pools; else the private pool (a CUDA
                            * graph's, torch.cuda.MemPool) they are of: PyTorch's pool_id (a, b)
                            * as a << 32 | b, or gpumem's capture key */
    size_t segments;
    uint64_t reserved, allocated, free, largest;
} gm_frag_pool;

#define GM_FRAG_NHIST 9
extern const char *const gm_frag_hist_name[GM_FRAG_NHIST];

/* The allocator at one moment (the reserved peak, or an OOM). */
typedef struct gm_frag_state {
    int oom;      /* 0: at the reserved peak; 1: at an OOM */
    uint64_t seq; /* the snapshot's last event */
    int device;
    uint64_t requested, allocated, reserved; /* live requested / live blocks / mapped */
    uint64_t free_cached, largest_free;      /* free (and pending) blocks */
    size_t nsegments, nfree;
    uint64_t hist_bytes[GM_FRAG_NHIST], hist_count[GM_FRAG_NHIST];
    gm_frag_pool *pools;
    size_t npools;
    int torch_pools; /* private_pool values are PyTorch's pool ids (else gpumem's capture keys) */
    uint64_t causes[GM_FC_N];
    /* what the allocator was asked for then: the OOM's request, or at the peak the allocation
     * that made reserved grow to it */
    int need_known;
    uint64_t need_seq, need_size, need_stream, need_addr;
    int need_small;
    uint64_t need_private_pool; /* the private pool it was made in (0: none) */
    uint64_t need_pool_free, need_pool_largest; /* free in that request's pool */
    int fragmentation; /* OOM: free in fragments >= request, largest free block < request */
    gm_frag_pin *pins; /* most free bytes first */
    size_t npins;
} gm_frag_state;

/* The timeline: per step (or per time bucket without steps), the moment the gap was widest. */
typedef struct gm_frag_point {
    int64_t step; /* "step N", or the bucket index when there are no steps */
    uint64_t seq, reserved, allocated;
} gm_frag_point;

/* A configuration that reserves less on this trace, by replay. */
typedef struct gm_frag_fix {
    char conf[512];    /* the whole GPUMEM_CONF, shortest form */
    char pytorch[256]; /* the PYTORCH_CUDA_ALLOC_CONF that says the same, when has_pytorch */
    int has_pytorch;
    int torch_runs;    /* PyTorch's own allocator can run it (its policy, PyTorch's keys only) */
    int gpumem_policy; /* gpumem's own allocation policy (preset:gpumem and its keys) */
    char change[160]; /* what changes, in words */
    uint64_t peak_reserved, peak_allocated;
} gm_frag_fix;

typedef struct gm_frag {
    gm_frag_point *timeline;
    size_t ntimeline;
    int by_step; /* timeline points are steps (else buckets of events) */
    int have_peak;
    gm_frag_state peak;
    gm_frag_state *ooms;
    size_t nooms;
    /* fixes */
    char recorded_conf[512]; /* the recording's configuration, shortest form */
    uint64_t recorded_peak_reserved; /* reserved at its peak in the events */
    uint64_t replay_peak_reserved;   /* the trace replayed under it (the fixes' baseline) */
    int replay_oom;                  /* that replay met an OOM (a recorded limit): fixes avoid it */
    gm_frag_fix *fixes; /* most saving first */
    size_t nfixes;
    char fix_note[1024]; /* why there are no fixes, when none could be computed */
    /* The one recommendation every printer names and --check re-runs (index in fixes, SIZE_MAX:
     * none). A PyTorch program recorded on PyTorch's allocator (torch: its history merged, the
     * trace its tensors) can only be told a PYTORCH_CUDA_ALLOC_CONF: GPUMEM_CONF does nothing to
     * it. So there `best` is the best fix PyTorch's allocator runs, as tune's recommendation is,
     * and gpumem's own allocator (gpumem record --allocator gpumem) is said apart: best_gpumem. */
    size_t best;
    int searched; /* best (and best_gpumem) are gpumem tune's search's answer (--search) */
    int torch;
    char torch_conf[512]; /* torch: the PYTORCH_CUDA_ALLOC_CONF it ran with ("" its defaults) */
    int pytorch_recorded; /* PyTorch's allocator ran it, its trace gpumem's events (an imported
                           * snapshot): torch_conf is its setting, recorded_conf only replays it */
    size_t best_gpumem;   /* torch: the best fix of gpumem's allocator (SIZE_MAX: none) */
    gm_torch_reset reset; /* where the program reset PyTorch's peak stats (PyTorch's allocator, or
                           * gpumem's as PyTorch's): the peaks here are then the whole run's, not
                           * its max_memory_reserved() */
    gm_compiled compiled; /* torch.compile: inductor's autotuning in the replayed trace (gm_compiled.c) */
} gm_frag;

/* Runs the whole analysis. m: the loaded model (gm_model_load). Returns 0, or -1 with err. */
/* search: the recommendation is gpumem tune's search's (gm_tune_search on the same trace, as
 * `frag --search`), else the best of frag's own fixes (each one change on top of the recorded
 * configuration, ranked by tune's final ranking). */
int gm_frag_analyze(gm_db *d, const gm_model *m, int search, gm_frag *f, char *err, size_t errsz);
/* m: the tables only (gm_model_load_tables) are enough: frag sweeps the events itself. */
void gm_frag_free(gm_frag *f);

/* `gpumem frag` (gm_frag_cmd.c): argv[0] is "frag". Returns the exit code. */
int gm_frag_main(int argc, char **argv);
/* Re-runs the recorded command (meta argv0_path/exe, argv (gm_meta_command), cwd: gm_rerun_origin) under `gpumem record` with GPUMEM_CONF=conf
 * and reads its measured peaks. 0, or -1 with err. Shared with `gpumem tune --check`. */
int gm_frag_rerun(gm_db *d, const char *conf, uint64_t *peak_allocated, uint64_t *peak_reserved,
                  char *err, size_t errsz);
/* The same for a PyTorch program on PyTorch's allocator: re-run with PYTORCH_CUDA_ALLOC_CONF=
 * pytorch_conf (gm_rerun_torch) and read PyTorch's own peaks (max_memory_allocated/_reserved).
 * Shared with `gpumem tune --check`. */
int gm_frag_rerun_torch(gm_db *d, const char *pytorch_conf, uint64_t *peak_allocated, uint64_t *peak_reserved,
                        char *err, size_t errsz);

#endif
