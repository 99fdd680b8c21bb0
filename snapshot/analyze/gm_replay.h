/* gm_replay.h — the replay-and-compare layer below `gpumem frag` and `gpumem tune`
 * (gm_replay.c): the recorded trace as the program ran it, many replays of it at once, their
 * driver time, and configurations spelled for people. */
#ifndef GPUMEM_SNAPSHOT_ANALYZE_GM_REPLAY_H
#define GPUMEM_SNAPSHOT_ANALYZE_GM_REPLAY_H

#include "alloc/alloc.h"
#include "snapshot/analyze/gm_advise.h"
#include "snapshot/analyze/gm_report.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* One configuration's replay. */
typedef struct gm_replay_result {
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
    int stopped;          /* gm_replay_below stopped it at res[0]'s peak: the figures are those
                           * of that moment */
    /* gm_replay_framework_only's: the same configuration as PyTorch's own allocator, which
     * leaves a library's cudaMalloc (cuBLAS's workspaces) outside its pool: its
     * max_memory_allocated() / max_memory_reserved() */
    uint64_t own_peak_allocated, own_peak_reserved;
    int own_oom, own_ok;
    /* gm_tune's cost rule (gm_tune.h, GM_TUNE_COSTLY_*): this configuration saves too little peak
     * reserved for its driver calls against a cheaper one, and ranks after every configuration
     * that is not so. cheaper: that configuration's index in the tune's results (valid once they
     * are ranked), SIZE_MAX when the rule did not pass this one over */
    int costly;
    size_t cheaper;
    /* in: cfg is the recorded configuration: the replay takes the trace's marker lines for its
     * releases' event queries (alloc_replay_opts_t.markers); the caller sets it */
    int markers;
} gm_replay_result;

/* The recorded trace as advise's model, ready to replay as the program ran: the recorded
 * configuration with its limit, and each OOM's request put back as the allocation it was (held
 * to the end), so that the recorded configuration replays into the same OOM. 0, or -1 with err. */
int gm_replay_trace_load(gm_db *d, adv_model *am, char *err, size_t errsz);
/* The same, with tap (adv_model_load_tap) shown every events row of the model's pass, for a
 * caller that reads the events too (frag's timeline) and so reads them once. *tapped: 1 when
 * tap saw the whole read, 0 when it did not (a PyTorch history's trace is read apart, or the
 * load failed, maybe after rows were shown): the caller then reads the events itself, having
 * dropped what it made of any rows shown. */
int gm_replay_trace_load_tap(gm_db *d, adv_model *am, const adv_tap *tap, int *tapped, char *err, size_t errsz);
/* A recording of a PyTorch program with PyTorch's allocator (its memory history merged):
 * gm_replay_trace_load makes the trace of its tensors instead, under preset:pytorch and the
 * PYTORCH_CUDA_ALLOC_CONF it ran with (am->mode "torch", am->config that string), and
 * am->rec_peak_* are PyTorch's own (max_memory_allocated / max_memory_reserved). */
static inline int gm_replay_is_torch(const adv_model *am) { return strcmp(am->mode, "torch") == 0; }
/* gm_torch_peaks, gm_torch_peak_reset: gm_report.h */

/* ---- configuration strings ---- */
/* 1 when two configurations parse to the same settings. */
int gm_conf_same(const alloc_config_t *a, const alloc_config_t *b);
/* The shortest GPUMEM_CONF that parses to *cfg: a preset and only the keys that differ from it. */
void gm_conf_short(const alloc_config_t *cfg, char *out, size_t outsz);
/* The PYTORCH_CUDA_ALLOC_CONF with the same effect, if there is one: 1 and out filled ("" for
 * PyTorch's defaults), else 0. The limit is left out (in PyTorch it is
 * torch.cuda.set_per_process_memory_fraction, not a configuration key). */
int gm_conf_pytorch(const alloc_config_t *cfg, char *out, size_t outsz);

/* The driver time of a replay's backend calls under the virtual GPU's default cost table
 * (sim/README.md, "Cost model": fixed microseconds per call plus microseconds per MiB). */
double gm_replay_driver_seconds(const alloc_mem_counters_t *c);

/* fn(ctx, i) for every i in [0, n), on `threads` threads (0: every core; at most 64, the calling
 * thread one of them), each taking the next i in order; returns when all are done. */
void gm_parallel_for(size_t n, int threads, void (*fn)(void *ctx, size_t i), void *ctx);

/* Replays trace under each res[i].cfg (on `threads` threads, 0: every core) and fills the rest
 * of each result (peaks, oom, calls, driver time; ok = 0 when a replay failed). capacity: the
 * in-memory device's size; device_total: the recorded device's (adv_model.device_total, 0
 * unknown), of which the per_process_memory_fraction key takes its share as when recorded
 * (alloc_replay_opts_t.device_total); top_down: it hands out addresses downwards, as the recording's did
 * (adv_model.top_down). slots: alloc_trace_slots of the trace, for a caller with several batches
 * of one trace; NULL: numbered here for the batch. Returns 0. */
int gm_replay_many(const alloc_trace_event_t *trace, size_t n, const uint32_t *slots, uint32_t nslots,
                   size_t capacity, size_t device_total, bool top_down, gm_replay_result *res, size_t nres,
                   int threads);
/* gm_replay_many for a search of the configurations that reserve less than res[0]'s (frag's
 * fixes): res[0] is taken first (alone, where that takes no more rounds of the cores: 3 replays
 * on 2), and once it has replayed without an OOM, any other replay stops
 * as soon as its reserved peak reaches res[0]'s (stopped = 1, peak_reserved at least res[0]'s):
 * what it would have done after that cannot make it reserve less. The figures of those that
 * did not stop are gm_replay_many's. */
int gm_replay_below(const alloc_trace_event_t *trace, size_t n, size_t capacity, size_t device_total,
                    bool top_down, gm_replay_result *res, size_t nres, int threads);
/* gm_replay_many with alloc_replay_opts_t.framework_only: fills each result's own_* figures. */
int gm_replay_framework_only(const alloc_trace_event_t *trace, size_t n, size_t capacity, size_t device_total,
                             bool top_down, gm_replay_result *res, size_t nres, int threads);
/* In a recording through the framework's allocator hook (gpumem as PyTorch's allocator), the
 * trace's allocations that did not come through it (a library's cudaMalloc, which gpumem's pool
 * served) become ALLOC_TR_ALLOC_SERVED: replayed as recorded, or outside the pool under the
 * pytorch presets with framework_only. trace is adv_to_trace of the model gm_replay_trace_load
 * made of d (id - 1: the model's allocation; its row is found by the rank of its ADV_EV_ALLOC
 * among the model's, not by its index), am that model (its hooked_rows: the events are scanned
 * only where the load could not say whether any came through the hook, or where some did). Returns how many, or -1 (the events could not be read). */
long gm_replay_mark_served(gm_db *d, const adv_model *am, alloc_trace_event_t *trace, size_t n);

#endif
