/* gm_tune.c — the search behind `gpumem tune`.
 *
 * Every candidate is the recorded trace replayed through alloc/'s allocator on its in-memory
 * backend (the code that served the program, so rounding, caching, splitting and the OOM path
 * are the real ones), under the limit the program ran with or the one given. A replay answers
 * the peak allocated and reserved, whether it met an OOM, and the backend calls with the bytes
 * each named; the calls are priced with the virtual GPU's cost table (below) into driver time.
 *
 * The search: first the presets as they are and the recorded configuration; then, from the
 * recorded configuration and the best preset, every single-key change (expandable segments,
 * max_split_size_mb for classic segments, roundup_power2_divisions, garbage collection under a
 * limit, handle sizes / release_before_grow / release_threshold for expandable segments,
 * per-stream pools with several streams); the best of each is the start of the next round, up to
 * four rounds or until nothing improves. That is coordinate descent, a few dozen replays rather
 * than the product of every key's values, and each configuration is replayed once (results are
 * kept by their formatted string); one that differs from a replayed one only in keys that
 * replay shows to be inert takes its figures (same_replay). The replays of a round run on every
 * core.
 *
 * Ranking: by peak reserved in steps of 1% of the least one, then driver time (objective
 * reserved), or by driver time, then peak reserved (objective time); a configuration that meets
 * an OOM ranks after every one that does not. On the reserved objective the cost rule comes
 * first (gm_tune.h, GM_TUNE_COSTLY_*): a configuration that saves under 5% of a cheaper one's
 * peak reserved, or under 2 MiB, for 10 times its driver calls or more (preset:nocache saved
 * 1.06 MiB of the demo's 6 MiB at 7,808 times the calls) ranks after every one that is not passed over so, whatever its
 * peak. The rule is decided against the whole set of results, not pair by pair, so the order
 * stays total. It orders the final ranking (gm_tune_rank; frag's own fixes too), not the
 * descent: a round's best (best_of) is by peak and driver time alone. Steered by the rule, the
 * descent walked away from passed-over configurations round after round and replayed 60
 * configurations of rec_bench's 10 M-event trace instead of 37 (tests/bench/README.md,
 * tune.10m_s).
 */
#include "snapshot/analyze/gm_tune.h"

#include "snapshot/analyze/gm_replay.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- the search */

typedef struct search {
    gm_tune *t;
    const gm_tune_opts *o;
    size_t cap;
    const alloc_trace_event_t *trace; /* the replays' input (gm_replay_many) */
    const uint32_t *slots;            /* alloc_trace_slots of it, once for every batch (or NULL) */
    uint32_t nslots;
    size_t ntrace, capacity, device_total; /* device_total: adv_model.device_total */
    bool top_down;
    int threads;
    int streams; /* the trace uses several streams */
    uint64_t limit;
    double memory_fraction; /* the recorded per_process_memory_fraction key: a cap like the limit */
    int torch;   /* PyTorch's allocator recorded: its preset's neighbours stay PyTorch's keys */
    char recorded_key[1024]; /* conf_key of the recorded configuration: its replay takes the
                              * recording's markers (gm_replay_result.markers) */
} search;

static void conf_key(const alloc_config_t *c, char *out, size_t n) { alloc_config_format(c, out, n); }

static long find(const search *s, const alloc_config_t *c) {
    char k[1024], x[1024];
    conf_key(c, k, sizeof k);
    for (size_t i = 0; i < s->t->nresults; i++) {
        conf_key(&s->t->results[i].cfg, x, sizeof x);
        if (!strcmp(k, x)) return (long)i;
    }
    return -1;
}

/* Peaks within 1% of the least one rank as equal on the reserved objective: a configuration that
 * saves 0.5% of memory for ten times the driver calls (nocache, tiny handles) is not a better
 * recommendation. The comparison is on buckets of 1% of the least peak, so that it stays a
 * total order. */
typedef struct rank_ctx {
    int objective;
    int costly; /* the cost rule's marks are read (the final ranking), not in the descent */
    uint64_t least;   /* least peak reserved of the results that do not OOM */
    uint64_t quantum; /* 1% of it */
} rank_ctx;

static uint64_t bucket(const rank_ctx *c, uint64_t reserved) {
    return reserved <= c->least || !c->quantum ? 0 : (reserved - c->least) / c->quantum;
}

/* 1 when a ranks before b */
static int better(const rank_ctx *c, const gm_replay_result *a, const gm_replay_result *b) {
    if (a->oom != b->oom) return !a->oom;
    if (c->costly && a->costly != b->costly) return !a->costly; /* only ever set on the reserved objective */
    if (c->objective == GM_TUNE_TIME) {
        if (a->driver_time_s != b->driver_time_s) return a->driver_time_s < b->driver_time_s;
        if (a->peak_reserved != b->peak_reserved) return a->peak_reserved < b->peak_reserved;
    } else {
        uint64_t x = bucket(c, a->peak_reserved), y = bucket(c, b->peak_reserved);
        if (x != y) return x < y;
        if (a->driver_time_s != b->driver_time_s) return a->driver_time_s < b->driver_time_s;
        if (a->peak_reserved != b->peak_reserved) return a->peak_reserved < b->peak_reserved;
    }
    return strlen(a->conf) < strlen(b->conf);
}

/* 1 when a saves too little peak reserved against b for what it costs (the cost rule): b, which
 * runs, reserves more than a, but less than GM_TUNE_COSTLY_SAVING_PCT% or
 * GM_TUNE_COSTLY_SAVING_BYTES more, and a makes
 * GM_TUNE_COSTLY_CALLS times b's driver calls or more */
static int too_costly(const gm_replay_result *a, const gm_replay_result *b) {
    if (a == b || !a->ok || a->oom || !b->ok || b->oom) return 0;
    uint64_t calls = b->driver_calls ? b->driver_calls : 1;
    if (a->driver_calls / GM_TUNE_COSTLY_CALLS < calls) return 0;
    if (a->peak_reserved >= b->peak_reserved) return 0; /* no saving: the ranking puts it after b already */
    uint64_t saved = b->peak_reserved - a->peak_reserved;
    return saved < GM_TUNE_COSTLY_SAVING_BYTES || saved * 100 < b->peak_reserved * GM_TUNE_COSTLY_SAVING_PCT;
}

/* Marks the results the cost rule passes over (objective reserved; none on time, which ranks by
 * the cost itself), each with the configuration it is weighed against: the least peak reserved
 * among those it is too costly against, one that is not passed over itself first. */
static void mark_costly(gm_tune *t, int objective) {
    gm_replay_result *r = t->results;
    for (size_t i = 0; i < t->nresults; i++) {
        r[i].costly = 0, r[i].cheaper = SIZE_MAX;
        if (objective != GM_TUNE_RESERVED) continue;
        for (size_t j = 0; j < t->nresults && !r[i].costly; j++) r[i].costly = too_costly(&r[i], &r[j]);
    }
    for (size_t i = 0; i < t->nresults; i++) {
        if (!r[i].costly) continue;
        size_t b = SIZE_MAX;
        for (size_t j = 0; j < t->nresults; j++) {
            if (!too_costly(&r[i], &r[j])) continue;
            if (b == SIZE_MAX || r[j].costly < r[b].costly ||
                (r[j].costly == r[b].costly && (r[j].peak_reserved < r[b].peak_reserved ||
                                                (r[j].peak_reserved == r[b].peak_reserved &&
                                                 r[j].driver_calls < r[b].driver_calls))))
                b = j;
        }
        r[i].cheaper = b;
    }
}

static rank_ctx ranking(gm_tune *t, int objective, int costly) {
    if (costly) mark_costly(t, objective);
    rank_ctx c = {objective, costly, UINT64_MAX, 0};
    for (size_t i = 0; i < t->nresults; i++)
        if (t->results[i].ok && !t->results[i].oom && t->results[i].peak_reserved < c.least)
            c.least = t->results[i].peak_reserved;
    if (c.least == UINT64_MAX) c.least = 0;
    c.quantum = c.least / 100;
    return c;
}

/* A replay among the first `upto` results that c's would repeat call for call: c differs from
 * its configuration only in keys that are inert in that replay. NULL when there is none.
 * - release_threshold, when its reserved memory never went above either threshold: a threshold
 *   acts only when cached memory exceeds it (alloc.c, maybe_release), and cached memory never
 *   exceeds reserved, so neither fires;
 * - release_before_grow, except under gpumem's policy with expandable segments and no guard
 *   pages: alloc.c reads it in one place, malloc_slow, past the PyTorch policy's own slow path
 *   and only with expandable ranges (a->vmm), which classic segments and nocache do not have
 *   and which guard pages' path never reaches;
 * - handle_size and handle_size_small under classic segments (no guard pages) and no release
 *   threshold: handles are what expandable ranges map, and apart from them only the release
 *   threshold reads their sizes (alloc.c, max_hsize).
 * Each test holds for the replay with the keys before it changed as well (the same run), so the
 * keys may differ together. */
static const gm_replay_result *same_replay(const search *s, const alloc_config_t *c, size_t upto) {
    char k[1024], x[1024];
    conf_key(c, k, sizeof k);
    for (size_t i = 0; i < upto; i++) {
        const gm_replay_result *r = &s->t->results[i];
        if (!r->ok || r->oom) continue;
        alloc_config_t y = r->cfg;
        size_t t = y.release_threshold, least = t < c->release_threshold ? t : c->release_threshold;
        if (r->peak_reserved <= least) y.release_threshold = c->release_threshold;
        int classic = !y.expandable_segments && !c->expandable_segments && !y.guard && !c->guard;
        if (classic || y.policy != ALLOC_POLICY_GPUMEM || y.guard) y.release_before_grow = c->release_before_grow;
        if (classic && y.release_threshold == SIZE_MAX && c->release_threshold == SIZE_MAX)
            y.handle_size = c->handle_size, y.handle_size_small = c->handle_size_small;
        conf_key(&y, x, sizeof x);
        if (!strcmp(k, x)) return r;
    }
    return NULL;
}

/* How long a replay takes, roughly, against the others (rec_bench's 10 M events, gpumem-replay):
 * an allocator that maps and unmaps on most calls (nocache; gpumem's policy releasing free pages
 * before the expandable range grows) about twice a caching one (0.8-0.95 s against 0.45-0.6 s). */
static int replay_weight(const alloc_config_t *c) {
    if (c->policy == ALLOC_POLICY_NOCACHE) return 2;
    return c->policy == ALLOC_POLICY_GPUMEM && c->expandable_segments && c->release_before_grow && !c->guard ? 2 : 1;
}

/* Adds configurations (not yet evaluated) to the results and replays them (those same_replay
 * finds take its figures). Returns the index of the first added, nresults before the call. -1:
 * out of memory. */
static long evaluate(search *s, const alloc_config_t *cfgs, size_t n) {
    size_t first = s->t->nresults;
    for (size_t i = 0; i < n; i++) {
        alloc_config_t c = cfgs[i];
        c.limit = s->limit, c.memory_fraction = s->memory_fraction;
        if (find(s, &c) >= 0) continue;
        if (s->t->nresults == s->cap) {
            size_t nc = s->cap ? 2 * s->cap : 32;
            gm_replay_result *r = realloc(s->t->results, nc * sizeof *r);
            if (!r) return -1;
            s->t->results = r, s->cap = nc;
        }
        gm_replay_result *r = &s->t->results[s->t->nresults++];
        memset(r, 0, sizeof *r);
        r->cfg = c;
        gm_conf_short(&c, r->conf, sizeof r->conf);
        r->has_pytorch = gm_conf_pytorch(&c, r->pytorch, sizeof r->pytorch);
    }
    /* the ones to replay, side by side in a batch of their own */
    size_t added = s->t->nresults - first, nrun = 0;
    gm_replay_result *run = malloc((added ? added : 1) * sizeof *run);
    size_t *at = malloc((added ? added : 1) * sizeof *at);
    if (!run || !at) {
        free(run), free(at);
        return -1;
    }
    for (size_t i = first; i < s->t->nresults; i++) {
        gm_replay_result *r = &s->t->results[i];
        const gm_replay_result *same = same_replay(s, &r->cfg, first);
        if (same) {
            r->ok = same->ok, r->oom = same->oom;
            r->peak_allocated = same->peak_allocated, r->peak_reserved = same->peak_reserved;
            r->utilization = same->utilization, r->driver_calls = same->driver_calls;
            r->driver_time_s = same->driver_time_s;
            continue;
        }
        at[nrun] = i;
        run[nrun] = *r;
        char k[1024];
        conf_key(&r->cfg, k, sizeof k);
        run[nrun++].markers = !strcmp(k, s->recorded_key);
    }
    /* the slow replays first: the cores take the next replay as they finish one, and a slow one
     * started last keeps one core busy while the other idles at the round's end */
    for (size_t k = 1; k < nrun; k++)
        for (size_t m = k; m > 0 && replay_weight(&run[m].cfg) > replay_weight(&run[m - 1].cfg); m--) {
            gm_replay_result x = run[m];
            size_t y = at[m];
            run[m] = run[m - 1], at[m] = at[m - 1];
            run[m - 1] = x, at[m - 1] = y;
        }
    gm_replay_many(s->trace, s->ntrace, s->slots, s->nslots, s->capacity, s->device_total, s->top_down, run, nrun,
                   s->threads);
    for (size_t k = 0; k < nrun; k++) s->t->results[at[k]] = run[k];
    free(run), free(at);
    if (s->o->progress)
        fprintf(stderr, "\rgpumem tune: %zu configurations replayed...", s->t->nresults);
    return (long)first;
}

/* Every single-key change of base that parses to a different configuration. */
static size_t neighbours(const search *s, const alloc_config_t *base, alloc_config_t *out, size_t max) {
    static const char *const always[] = {
        "expandable_segments:True", "expandable_segments:False", "roundup_power2_divisions:0",
        "roundup_power2_divisions:2", "roundup_power2_divisions:4", "roundup_power2_divisions:8"};
    static const char *const classic[] = {"max_split_size_mb:64", "max_split_size_mb:128", "max_split_size_mb:256",
                                          "max_split_size_mb:512", "max_split_size_mb:inf"};
    static const char *const expandable[] = {"handle_size:0", "handle_size:8M", "handle_size:32M",
                                             "handle_size:128M", "release_before_grow:True",
                                             "release_before_grow:False", "release_threshold:none",
                                             "release_threshold:1G"};
    static const char *const gc[] = {"garbage_collection_threshold:0", "garbage_collection_threshold:0.6",
                                     "garbage_collection_threshold:0.8", "garbage_collection_threshold:0.95"};
    static const char *const streams[] = {"per_stream_pools:True", "per_stream_pools:False"};
    const char *const *lists[] = {always, classic, expandable, gc, streams};
    size_t lens[] = {6, 5, 8, 4, 2};
    int pt = s->torch && base->policy == ALLOC_POLICY_PYTORCH; /* keys PyTorch has, only */
    int use[] = {1, !base->expandable_segments, base->expandable_segments && !pt, s->limit != ALLOC_NO_LIMIT, s->streams && !pt};
    size_t n = 0;
    if (base->policy == ALLOC_POLICY_NOCACHE) return 0; /* no cache: no key changes anything */
    for (size_t l = 0; l < 5; l++) {
        if (!use[l]) continue;
        for (size_t i = 0; i < lens[l] && n < max; i++) {
            alloc_config_t c = *base;
            /* PyTorch's keys have no value for "none": those three are set here */
            if (!strcmp(lists[l][i], "max_split_size_mb:inf"))
                c.max_split_size = SIZE_MAX;
            else if (!strcmp(lists[l][i], "garbage_collection_threshold:0"))
                c.gc_threshold = 0;
            else if (!strcmp(lists[l][i], "roundup_power2_divisions:0"))
                memset(c.rp2_div, 0, sizeof c.rp2_div);
            else if (alloc_config_parse(&c, lists[l][i], NULL, 0) != ALLOC_OK)
                continue;
            c.limit = s->limit, c.memory_fraction = s->memory_fraction;
            char a[1024], b[1024];
            conf_key(&c, a, sizeof a);
            conf_key(base, b, sizeof b);
            if (strcmp(a, b)) out[n++] = c;
        }
    }
    return n;
}

static size_t best_of(const search *s, const size_t *idx, size_t n) {
    rank_ctx c = ranking(s->t, s->o->objective, 0);
    size_t b = idx[0];
    for (size_t i = 1; i < n; i++)
        if (better(&c, &s->t->results[idx[i]], &s->t->results[b])) b = idx[i];
    return b;
}

static int rank_cmp(const void *x, const void *y, void *arg) {
    const gm_replay_result *a = x, *b = y;
    const rank_ctx *c = arg;
    if (better(c, a, b)) return -1;
    if (better(c, b, a)) return 1;
    return 0;
}

void gm_tune_rank(gm_replay_result *r, size_t n, int objective) {
    gm_tune t = {.results = r, .nresults = n};
    rank_ctx c = ranking(&t, objective, 1);
    qsort_r(r, n, sizeof *r, rank_cmp, &c);
    mark_costly(&t, objective); /* the same marks, their indices in the ranked results */
}

/* The search on trace, the model's events as the replay engine's (ntrace of them, taken: freed
 * here); nevents: the model's (m's own may be gone already: gm_tune_run frees them before the
 * replays start). */
static int search_trace(gm_db *d, const adv_model *m, size_t nevents, alloc_trace_event_t *trace, size_t ntrace,
                        const gm_tune_opts *o, gm_tune *t, char *err, size_t errsz);

/* A recording without allocations: a valid answer (nothing to tune), not an error */
static void tune_empty(const adv_model *m, const gm_tune_opts *o, gm_tune *t) {
    t->limit = o->limit ? o->limit : m->cfg.limit; /* its JSON has every key, limit included */
    t->empty = 1;
}

int gm_tune_run(gm_db *d, const gm_tune_opts *o, gm_tune *t, char *err, size_t errsz) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    adv_model am;
    if (gm_replay_trace_load(d, &am, err, errsz) != 0) {
        memset(t, 0, sizeof *t);
        t->best = t->recorded = SIZE_MAX;
        return -1;
    }
    memset(t, 0, sizeof *t);
    t->best = t->recorded = SIZE_MAX;
    int rc = 0;
    if (!am.nevs) {
        tune_empty(&am, o, t);
    } else {
        size_t ntrace = 0, nevents = am.nevs;
        alloc_trace_event_t *trace = adv_to_trace(&am, &ntrace);
        /* the replays read the trace alone: the model's events (40 bytes each, more than the
         * trace's 32) go before they start */
        free(am.evs), am.evs = NULL, am.nevs = 0;
        if (!trace) {
            snprintf(err, errsz, "out of memory for a %zu-event trace", nevents);
            rc = -1;
        } else {
            rc = search_trace(d, &am, nevents, trace, ntrace, o, t, err, errsz);
        }
    }
    adv_model_free(&am);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    t->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return rc;
}

int gm_tune_search(gm_db *d, const adv_model *model, const gm_tune_opts *o, gm_tune *t, char *err, size_t errsz) {
    memset(t, 0, sizeof *t);
    t->best = t->recorded = SIZE_MAX;
    if (!model->nevs) {
        tune_empty(model, o, t);
        return 0;
    }
    size_t ntrace = 0;
    alloc_trace_event_t *trace = adv_to_trace(model, &ntrace);
    if (!trace) {
        snprintf(err, errsz, "out of memory for a %zu-event trace", model->nevs);
        return -1;
    }
    return search_trace(d, model, model->nevs, trace, ntrace, o, t, err, errsz);
}

static int search_trace(gm_db *d, const adv_model *m, size_t nevents, alloc_trace_event_t *trace, size_t ntrace,
                        const gm_tune_opts *o, gm_tune *t, char *err, size_t errsz) {
    const adv_model am = *m; /* read only: the search replays its trace */
    /* gpumem as PyTorch's allocator served cuBLAS's workspaces from its pool; PyTorch's own
     * allocator never sees them: the rows replay the recording, the "under PyTorch" figure
     * replays them outside (below) */
    long served = gm_replay_is_torch(&am) ? 0 : gm_replay_mark_served(d, &am, trace, ntrace);
    t->served_outside = served > 0 ? (int)served : 0;
    search s = {.t = t, .o = o};
    s.limit = o->limit_set ? o->limit : am.cfg.limit;
    /* every configuration keeps the caps the program ran under: the limit, and the
     * per_process_memory_fraction key's share of the device (a preset has neither) */
    s.memory_fraction = am.cfg.memory_fraction;
    t->limit = s.limit;
    t->nevents = nevents;
    t->torch = gm_replay_is_torch(&am);
    /* PyTorch's allocator's reset, or gpumem's as PyTorch's (--allocator gpumem): the same words */
    gm_torch_peak_reset(d, GM_TORCH_ALL_DEVICES, &t->reset);
    gm_compiled_read(d, &t->compiled);
    s.torch = t->torch;
    t->best_torch = t->best_gpumem = t->runaway = t->under_pytorch = SIZE_MAX;
    snprintf(t->torch_conf, sizeof t->torch_conf, "%.511s", t->torch ? am.config : "");
    if (!t->torch) t->pytorch_recorded = gm_meta_pytorch_conf(d, t->torch_conf, sizeof t->torch_conf);
    uint64_t rec_allocated, rec_reserved;
    if (!t->torch) gm_recorded_peaks(d, &rec_allocated, &rec_reserved);
    t->recorded_peak_reserved = t->torch ? am.rec_peak_reserved : rec_reserved;
    for (size_t i = 1; i < am.nallocs && !s.streams; i++) s.streams = am.allocs[i].stream != am.allocs[0].stream;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    s.threads = o->threads > 0 ? o->threads : ncpu > 0 ? (int)ncpu : 1;
    size_t cap = (size_t)80 << 30;
    if (2 * am.rec_peak_reserved > cap) cap = (size_t)(2 * am.rec_peak_reserved);
    if (s.limit != ALLOC_NO_LIMIT && 2 * s.limit > cap) cap = (size_t)(2 * s.limit);
    s.trace = trace, s.ntrace = ntrace, s.capacity = cap, s.device_total = am.device_total, s.top_down = am.top_down;
    uint32_t *slots = NULL; /* out of memory: each batch numbers them (or keeps the id table) */
    if (alloc_trace_slots(trace, ntrace, &slots, &s.nslots) == ALLOC_OK) s.slots = slots;
    alloc_config_t recorded = am.cfg;
    recorded.limit = s.limit;
    gm_conf_short(&recorded, t->recorded_conf, sizeof t->recorded_conf);
    conf_key(&recorded, s.recorded_key, sizeof s.recorded_key);
    /* round 0: the recorded configuration and the presets */
    alloc_config_t batch[64];
    size_t nb = 0;
    batch[nb++] = recorded;
    for (size_t p = 0; alloc_preset_names[p] && nb < 16; p++) {
        alloc_config_t c;
        alloc_config_default(&c);
        if (alloc_config_preset(&c, alloc_preset_names[p]) != ALLOC_OK) continue;
        batch[nb++] = c;
    }
    /* max_split_size_mb with expandable segments: the same without it, to name the growth */
    alloc_config_t no_split = recorded;
    int runaway = recorded.policy == ALLOC_POLICY_PYTORCH && recorded.expandable_segments &&
                  recorded.max_split_size != SIZE_MAX;
    if (runaway) no_split.max_split_size = SIZE_MAX, batch[nb++] = no_split;
    int rc = -1;
    if (evaluate(&s, batch, nb) < 0) goto oom;
    long ri = find(&s, &recorded);
    t->recorded = ri >= 0 ? (size_t)ri : SIZE_MAX;
    size_t pidx[16], np = 0;
    for (size_t i = 1; i < nb; i++) {
        alloc_config_t c = batch[i];
        c.limit = s.limit, c.memory_fraction = s.memory_fraction;
        long k = find(&s, &c);
        if (k >= 0) {
            t->results[k].preset = 1;
            if (c.policy != ALLOC_POLICY_NOCACHE) pidx[np++] = (size_t)k;
        }
    }
    /* rounds: coordinate descent from the recorded configuration and the best preset */
    size_t starts[2] = {t->recorded, np ? best_of(&s, pidx, np) : t->recorded};
    size_t nstarts = starts[0] == starts[1] || starts[0] == SIZE_MAX ? 1 : 2;
    if (starts[0] == SIZE_MAX) starts[0] = starts[1];
    for (size_t k = 0; k < nstarts; k++) {
        size_t cur = starts[k];
        for (int round = 0; round < 4 && cur != SIZE_MAX; round++) {
            alloc_config_t base = t->results[cur].cfg;
            nb = neighbours(&s, &base, batch, 64);
            long first = evaluate(&s, batch, nb);
            if (first < 0) goto oom;
            size_t idx[65], ni = 0;
            idx[ni++] = cur;
            for (size_t i = 0; i < nb; i++) {
                long f = find(&s, &batch[i]);
                if (f >= 0) idx[ni++] = (size_t)f;
            }
            size_t nb_best = best_of(&s, idx, ni);
            if (nb_best == cur) break;
            cur = nb_best;
        }
    }
    if (o->progress) fprintf(stderr, "\r%60s\r", "");
    /* rank; keep where the recorded configuration went */
    char rk[1024];
    conf_key(&recorded, rk, sizeof rk);
    gm_tune_rank(t->results, t->nresults, o->objective);
    for (size_t i = 0; i < t->nresults; i++) {
        char x[1024];
        conf_key(&t->results[i].cfg, x, sizeof x);
        if (!strcmp(x, rk)) t->recorded = i;
    }
    t->best = t->nresults && t->results[0].ok && !t->results[0].oom ? 0 : SIZE_MAX;
    for (size_t i = 0; i < t->nresults; i++) {
        const gm_replay_result *r = &t->results[i];
        if (!r->ok || r->oom) continue;
        if (t->best_torch == SIZE_MAX && r->cfg.policy == ALLOC_POLICY_PYTORCH && r->has_pytorch) t->best_torch = i;
        if (t->best_gpumem == SIZE_MAX && r->cfg.policy == ALLOC_POLICY_GPUMEM) t->best_gpumem = i;
    }
    /* the "under PyTorch" prediction: PyTorch's own allocator, cuBLAS's workspaces outside */
    for (size_t i = 0; i < t->nresults; i++) {
        gm_replay_result *r = &t->results[i];
        r->own_ok = r->ok, r->own_oom = r->oom;
        r->own_peak_allocated = r->peak_allocated, r->own_peak_reserved = r->peak_reserved;
    }
    if (t->served_outside) {
        size_t np = 0;
        for (size_t i = 0; i < t->nresults; i++)
            if (t->results[i].has_pytorch && t->results[i].cfg.policy == ALLOC_POLICY_PYTORCH) np++;
        gm_replay_result *own = np ? malloc(np * sizeof *own) : NULL;
        if (np && !own) goto oom;
        for (size_t i = 0, k = 0; i < t->nresults; i++)
            if (t->results[i].has_pytorch && t->results[i].cfg.policy == ALLOC_POLICY_PYTORCH) own[k++] = t->results[i];
        gm_replay_framework_only(trace, ntrace, cap, am.device_total, am.top_down, own, np, s.threads);
        for (size_t i = 0, k = 0; i < t->nresults; i++) {
            gm_replay_result *r = &t->results[i];
            if (!(r->has_pytorch && r->cfg.policy == ALLOC_POLICY_PYTORCH)) continue;
            r->own_ok = own[k].own_ok, r->own_oom = own[k].own_oom;
            r->own_peak_allocated = own[k].own_peak_allocated, r->own_peak_reserved = own[k].own_peak_reserved;
            k++;
            /* ranked by what PyTorch would reserve; ties keep the search's order */
            if (r->own_ok && !r->own_oom &&
                (t->under_pytorch == SIZE_MAX || r->own_peak_reserved < t->results[t->under_pytorch].own_peak_reserved))
                t->under_pytorch = i;
        }
        free(own);
    }
    /* one recommendation, what every printer names and --check re-runs: for a PyTorch program on
     * PyTorch's allocator the best PYTORCH_CUDA_ALLOC_CONF (gpumem's own allocator is the
     * alternative, best_gpumem) */
    if (t->torch) t->best = t->best_torch;
    /* never one predicted to reserve more than the recording did (ranked by reserved): the
     * recorded configuration stays, and is said to */
    if (t->best != SIZE_MAX && t->recorded != SIZE_MAX && t->results[t->recorded].ok && !t->results[t->recorded].oom &&
        (t->best == t->recorded ||
         (o->objective == GM_TUNE_RESERVED && t->recorded_peak_reserved &&
          t->results[t->best].peak_reserved > t->recorded_peak_reserved))) {
        t->best = t->recorded;
        t->recorded_best = 1;
        if (t->torch) t->best_torch = t->recorded;
    }
    if (runaway) {
        long k = find(&s, &no_split);
        /* named when dropping max_split_size_mb saves at least 1% */
        if (k >= 0 && t->recorded != SIZE_MAX && t->results[k].ok &&
            t->results[k].peak_reserved * 100 < t->results[t->recorded].peak_reserved * 99)
            t->runaway = (size_t)k;
    }
    rc = 0;
oom:
    if (rc) snprintf(err, errsz, "out of memory");
    free(slots);
    free(trace);
    return rc;
}

void gm_tune_free(gm_tune *t) {
    free(t->results);
    memset(t, 0, sizeof *t);
}
