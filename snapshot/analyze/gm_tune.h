/* gm_tune.h — `gpumem tune`: the recorded trace replayed under the allocator's presets and a
 * search over its keys, ranked by peak reserved or by driver time, with the recommended
 * GPUMEM_CONF (and PYTORCH_CUDA_ALLOC_CONF when PyTorch has the setting). Internal to the gpumem
 * command (gm_tune.c: the search; gm_tune_cmd.c: options, printers, --check). */
#ifndef GPUMEM_SNAPSHOT_GM_TUNE_H
#define GPUMEM_SNAPSHOT_GM_TUNE_H

#include "alloc/alloc.h"
#include "snapshot/analyze/gm_replay.h"

#include <stddef.h>
#include <stdint.h>

enum { GM_TUNE_RESERVED = 0, GM_TUNE_TIME = 1 };

/* The cost rule of the reserved objective: a configuration that saves less than
 * GM_TUNE_COSTLY_SAVING_PCT percent of a cheaper configuration's peak reserved, or less than
 * GM_TUNE_COSTLY_SAVING_BYTES (one page of the device's 2 MiB granularity) whatever the peak, for
 * GM_TUNE_COSTLY_CALLS times its driver calls or more (nocache: every free unmaps, every
 * allocation maps), is not recommended over it; it ranks after every configuration the rule does
 * not pass over (gm_replay_result.costly), and tune says what it would have saved at what cost. */
enum { GM_TUNE_COSTLY_SAVING_PCT = 5, GM_TUNE_COSTLY_CALLS = 10 };
#define GM_TUNE_COSTLY_SAVING_BYTES ((uint64_t)2 << 20)

typedef struct gm_tune_opts {
    int objective;    /* GM_TUNE_RESERVED or GM_TUNE_TIME */
    uint64_t limit;   /* judge every configuration under this cap on reserved (0 is 0 bytes; ALLOC_NO_LIMIT: none) */
    int limit_set;    /* limit was given; else the recorded one */
    int threads;      /* replays at once (0: every core) */
    int progress;     /* a progress line on stderr */
} gm_tune_opts;

typedef struct gm_tune {
    char recorded_conf[512];
    uint64_t recorded_peak_reserved; /* measured by the recording */
    uint64_t limit;                  /* the cap the results were judged under (ALLOC_NO_LIMIT none) */
    size_t nevents;
    gm_replay_result *results; /* ranked, best first; every configuration evaluated once */
    size_t nresults;
    size_t best;          /* index of the recommendation in results (SIZE_MAX: none fits): the
                           * one every printer names and --check re-runs; for `torch`, best_torch */
    int recorded_best;    /* best is the recorded configuration: no configuration tried is predicted
                           * to reserve less than the recording did */
    size_t recorded;      /* index of the recorded configuration in results */
    double seconds;       /* wall time of the search */
    int empty;            /* the recording holds no allocation: nothing to replay or rank */
    /* a PyTorch program recorded with PyTorch's allocator (its history merged): the trace is its
     * tensors, the recorded configuration preset:pytorch + its PYTORCH_CUDA_ALLOC_CONF
     * (torch_conf), recorded_peak_reserved its max_memory_reserved(); configurations from
     * PyTorch's preset change only PyTorch's keys */
    int torch;
    gm_torch_reset reset; /* where the program reset PyTorch's peak stats (its allocator's, or gpumem's
                           * as PyTorch's): recorded_peak_reserved and the predictions are the whole
                           * run's, not its max_memory_reserved() */
    gm_compiled compiled; /* torch.compile: inductor's autotuning in the replayed trace (gm_compiled.c) */
    char torch_conf[512]; /* also for pytorch_recorded */
    /* PyTorch's allocator ran it though its trace is gpumem's events (an imported snapshot):
     * the recorded configuration is PyTorch's PYTORCH_CUDA_ALLOC_CONF (torch_conf), which
     * recorded_conf (a GPUMEM_CONF) only replays */
    int pytorch_recorded;
    size_t best_torch;  /* the best configuration PyTorch's allocator can run (SIZE_MAX: none) */
    size_t best_gpumem; /* the best of gpumem's own allocator (SIZE_MAX: none) */
    /* the best configuration PyTorch's allocator can run, judged as PyTorch's own allocator
     * (results' own_*: a library's cudaMalloc outside its pool, where gpumem's pool served it in
     * a recording through the framework's hook): the "under PyTorch" line (SIZE_MAX: none) */
    size_t under_pytorch;
    int served_outside; /* such allocations: how many the trace has (own_* differ from peak_*) */
    /* the recorded configuration has max_split_size_mb with expandable segments (PyTorch's
     * runaway growth): index of the same without max_split_size_mb, SIZE_MAX when not so */
    size_t runaway;
} gm_tune;

/* Loads the trace (gm_replay_trace_load), replays the presets and searches the keys. 0, or -1 with
 * err (an unreadable trace). */
int gm_tune_run(gm_db *d, const gm_tune_opts *o, gm_tune *t, char *err, size_t errsz);
/* Ranks n results in place as tune's final ranking does (objective GM_TUNE_RESERVED or
 * GM_TUNE_TIME): the cost rule's marks (costly, cheaper: indices in the ranked order) on the
 * reserved objective, then the order of gm_tune.c's header. frag ranks its own fixes with it. */
void gm_tune_rank(gm_replay_result *r, size_t n, int objective);
/* The same search on a trace model already loaded (gm_replay_trace_load's, left as it is): what
 * `gpumem frag --search` recommends is this search's answer, so that frag, tune and viz name one
 * configuration for a recording. t->seconds is left 0. 0, or -1 with err. */
int gm_tune_search(gm_db *d, const adv_model *am, const gm_tune_opts *o, gm_tune *t, char *err, size_t errsz);
void gm_tune_free(gm_tune *t);

/* `gpumem tune` (gm_tune_cmd.c): argv[0] is "tune". Returns the exit code. */
int gm_tune_main(int argc, char **argv);

#endif
