/* gm_tune.h — `gpumem tune`: the recorded trace replayed under the allocator's presets and a
 * search over its keys, ranked by peak reserved or by driver time, with the recommended
 * GPUMEM_CONF (and PYTORCH_CUDA_ALLOC_CONF when PyTorch has the setting). Internal to the gpumem
 * command (gm_tune.c: the search; gm_tune_cmd.c: options, printers, --check). */
#ifndef GPUMEM_SNAPSHOT_GM_TUNE_H
#define GPUMEM_SNAPSHOT_GM_TUNE_H

#include "alloc/alloc.h"
#include "snapshot/read/gm.h"

#include <stddef.h>
#include <stdint.h>

enum { GM_TUNE_RESERVED = 0, GM_TUNE_TIME = 1 };

typedef struct gm_tune_result {
    alloc_config_t cfg;
    char conf[512];    /* shortest GPUMEM_CONF */
    char pytorch[256]; /* when has_pytorch */
    int has_pytorch;
    int preset;        /* one of the presets as they are (with the limit) */
    uint64_t peak_allocated, peak_reserved;
    double utilization;
    uint64_t driver_calls;
    double driver_time_s; /* the calls priced with the virtual GPU's cost table */
    int oom;              /* the replay met an OOM under the limit */
    int ok;               /* replayed (0: the replay itself failed) */
} gm_tune_result;

typedef struct gm_tune_opts {
    int objective;    /* GM_TUNE_RESERVED or GM_TUNE_TIME */
    uint64_t limit;   /* judge every configuration under this cap on reserved (0: the recorded one) */
    int threads;      /* replays at once (0: every core) */
    int progress;     /* a progress line on stderr */
} gm_tune_opts;

typedef struct gm_tune {
    char recorded_conf[512];
    uint64_t recorded_peak_reserved; /* measured by the recording */
    uint64_t limit;                  /* the cap the results were judged under (0 none) */
    size_t nevents;
    gm_tune_result *results; /* ranked, best first; every configuration evaluated once */
    size_t nresults;
    size_t best;          /* index of the recommendation in results (SIZE_MAX: none fits) */
    size_t recorded;      /* index of the recorded configuration in results */
    double seconds;       /* wall time of the search */
} gm_tune;

/* Loads the trace (gm_frag_trace_load), replays the presets and searches the keys. 0, or -1 with
 * err (an unreadable trace). */
int gm_tune_run(gm_db *d, const gm_tune_opts *o, gm_tune *t, char *err, size_t errsz);
void gm_tune_free(gm_tune *t);

/* The driver time of a replay's backend calls under the virtual GPU's default cost table
 * (sim/README.md, "Cost model": fixed microseconds per call plus microseconds per MiB). */
double gm_tune_driver_seconds(const alloc_mem_counters_t *c);

/* Replays trace under each res[i].cfg (on `threads` threads, 0: every core) and fills the rest
 * of each result (peaks, oom, calls, driver time; ok = 0 when a replay failed). capacity: the
 * in-memory device's size; top_down: it hands out addresses downwards, as the recording's did
 * (adv_model.top_down). Returns 0. */
int gm_tune_replay_many(const alloc_trace_event_t *trace, size_t n, size_t capacity, bool top_down,
                        gm_tune_result *res, size_t nres, int threads);

/* `gpumem tune` (gm_tune_cmd.c): argv[0] is "tune". Returns the exit code. */
int gm_tune_main(int argc, char **argv);

#endif
