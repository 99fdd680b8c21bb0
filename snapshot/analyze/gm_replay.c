/* gm_replay.c — the replay-and-compare layer that `gpumem frag` (its fixes) and `gpumem tune`
 * (its search) both stand on: the recorded trace loaded as the program ran it (the recorded
 * configuration and limit, each OOM's request put back, frees held until their blocks landed),
 * replays of it under many configurations on every core, their driver time priced with the
 * virtual GPU's cost table, and the spelling of a configuration as GPUMEM_CONF and, where
 * PyTorch has it, PYTORCH_CUDA_ALLOC_CONF. Neither frag nor tune is called from here. */
#include "snapshot/analyze/gm_replay.h"

#include "snapshot/record/rec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- the trace */

/* The recording's OOMs put back into the trace as the allocations they were (held to the end:
 * what the program would have done with them is unknown), so that the recorded configuration
 * replays into the same OOM and a fix is a configuration that does not. 0 or -1. */
static int add_ooms(gm_db *d, adv_model *am) {
    sqlite3_stmt *st;
    if (!gm_table_exists(d, "ooms") ||
        sqlite3_prepare_v2(d->db, "SELECT e.t, o.requested, e.stream FROM ooms o JOIN events e ON e.seq = o.seq "
                                  "ORDER BY o.seq", -1, &st, NULL) != SQLITE_OK)
        return 0;
    int rc = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        uint64_t t = (uint64_t)sqlite3_column_int64(st, 0);
        uint64_t size = (uint64_t)sqlite3_column_int64(st, 1);
        uint32_t stream = (uint32_t)sqlite3_column_int64(st, 2);
        if (!size) continue;
        if (am->nallocs == am->allocs_cap) {
            size_t nc = am->allocs_cap ? 2 * am->allocs_cap : 16;
            adv_alloc *n = realloc(am->allocs, nc * sizeof *n);
            if (!n) { rc = -1; break; }
            am->allocs = n, am->allocs_cap = nc;
        }
        adv_ev *evs = realloc(am->evs, (am->nevs + 1) * sizeof *evs);
        if (!evs) { rc = -1; break; }
        am->evs = evs;
        uint32_t a = (uint32_t)am->nallocs++;
        am->allocs[a] = (adv_alloc){.size = size, .stream = stream, .orig = a};
        size_t at = 0; /* before the first event issued after the OOM */
        while (at < am->nevs && am->evs[at].t <= t) at++;
        memmove(&am->evs[at + 1], &am->evs[at], (am->nevs - at) * sizeof *am->evs);
        am->evs[at] = (adv_ev){.a = a, .kind = ADV_EV_ALLOC, .step = -1, .t = t};
        am->nevs++;
    }
    sqlite3_finalize(st);
    return rc;
}

/* The total memory of the recorded device, as the driver said it when gpumem started (the
 * device_info events' requested, which the recording's allocator took as the device's capacity):
 * of the device of the first per-process memory fraction where there is one; 0 where the
 * recording has none. Read only where the configuration has a per_process_memory_fraction key
 * (the scan stops at the rows it needs, the fraction's look-up aside). */
static uint64_t recorded_device_total(gm_db *d) {
    sqlite3_stmt *st;
    uint64_t total = 0;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT requested FROM events WHERE kind = ?1 AND requested > 0 AND device = "
                           "ifnull((SELECT device FROM events WHERE kind = ?2 LIMIT 1), device) LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_int(st, 1, REC_DEVICE_INFO);
    sqlite3_bind_int(st, 2, REC_TORCH_MEMORY_FRACTION);
    if (sqlite3_step(st) == SQLITE_ROW) total = (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return total;
}

/* ---------------------------------------------------------------- PyTorch's own allocator */

/* A recording of a PyTorch program with PyTorch's own allocator (its history merged, kinds
 * 31-35): the trace is its tensors (torch_alloc with the bytes asked for, torch_free when the
 * tensor let go of the block, torch_free_completed when the block was reusable), replayed under
 * preset:pytorch with the PYTORCH_CUDA_ALLOC_CONF it ran with; gpumem's own events there are
 * PyTorch's segments, not allocations to replay. 1 loaded, 0 not such a recording, -1 error. */
static int torch_trace_load(gm_db *d, adv_model *am, char *err, size_t errsz) {
    uint64_t pa, pr;
    if (!gm_torch_peaks(d, &pa, &pr)) return 0;
    memset(am, 0, sizeof *am);
    sqlite3_stmt *st;
    if (!(am->strs = calloc(1, sizeof *am->strs)) || !(am->strs[0] = strdup(""))) {
        free(am->strs);
        am->strs = NULL;
        snprintf(err, errsz, "out of memory");
        return -1;
    }
    am->nstrs = am->strs_cap = 1;
    snprintf(am->mode, sizeof am->mode, "torch");
    gm_meta_command(d, am->cmdline, sizeof am->cmdline); /* what advise --check re-runs */
    gm_meta_text(d, "torch_conf", am->config, sizeof am->config);
    alloc_config_preset(&am->cfg, "pytorch");
    char cerr[1024];
    if (alloc_config_parse(&am->cfg, am->config, cerr, sizeof cerr) != ALLOC_OK) {
        adv_model_free(am);
        snprintf(err, errsz, "%s: PyTorch's recorded configuration does not parse (%s)", d->path, cerr);
        return -1;
    }
    am->rec_peak_allocated = pa, am->rec_peak_reserved = pr;
    if (am->cfg.memory_fraction >= 0) am->device_total = recorded_device_total(d);
    if (sqlite3_prepare_v2(d->db, "SELECT seq, kind, addr, requested, stream, t, size, flags, "
                                  "coalesce(alloc_id, 0) FROM events "
                                  "WHERE kind IN (31, 32, 33, 35, 36, 37) ORDER BY seq", -1, &st, NULL) != SQLITE_OK) {
        adv_model_free(am);
        snprintf(err, errsz, "%s: cannot read PyTorch's events: %s", d->path, sqlite3_errmsg(d->db));
        return -1;
    }
    u64map live = {0}; /* address -> allocation index, until the free completes */
    adv_pool_ids pools = {0};
    int rc = 1;
    size_t cev = 0;
    while (rc == 1 && sqlite3_step(st) == SQLITE_ROW) {
        int kind = sqlite3_column_int(st, 1);
        uint64_t addr = (uint64_t)sqlite3_column_int64(st, 2);
        uint64_t t = (uint64_t)sqlite3_column_int64(st, 5);
        uint32_t a;
        /* PyTorch gave segments back (empty_cache, before an OOM's retry, expandable segments'
         * unmaps, a private pool's end), the program asked it to (an empty_cache that gave
         * nothing back when recorded may under another configuration), or capped it: advise's
         * decoding of those rows */
        int own = adv_torch_cache_row(am, kind, (uint64_t)sqlite3_column_int64(st, 7),
                                      (uint64_t)sqlite3_column_int64(st, 8), (uint32_t)sqlite3_column_int64(st, 4), t,
                                      (uint64_t)sqlite3_column_int64(st, 6), (uint64_t)sqlite3_column_int64(st, 3), &cev,
                                      &pools);
        if (own < 0) rc = -1;
        if (own) continue;
        if (kind == REC_TORCH_ALLOC) {
            if (am->nallocs == am->allocs_cap) {
                size_t nc = am->allocs_cap ? 2 * am->allocs_cap : 1024;
                adv_alloc *n = realloc(am->allocs, nc * sizeof *n);
                if (!n) { rc = -1; break; }
                am->allocs = n, am->allocs_cap = nc;
            }
            a = (uint32_t)am->nallocs++;
            am->allocs[a] = (adv_alloc){.size = (uint64_t)sqlite3_column_int64(st, 3),
                                        .stream = (uint32_t)sqlite3_column_int64(st, 4), .orig = a};
            if (u64map_put(&live, addr, a) != 0) { rc = -1; break; }
            if (adv_pool_note(am, a, kind, (uint64_t)sqlite3_column_int64(st, 7),
                              (uint64_t)sqlite3_column_int64(st, 8), &pools) != 0) { rc = -1; break; }
        } else {
            const uint64_t *v = u64map_get(&live, addr);
            if (!v) continue; /* before the history began */
            a = (uint32_t)*v;
            if (kind == REC_TORCH_FREE_COMPLETED) u64map_del(&live, addr, NULL);
        }
        if (gm_grow_fast((void **)&am->evs, &cev, am->nevs + 1, sizeof *am->evs)) { rc = -1; break; }
        am->evs[am->nevs++] = (adv_ev){.a = a, .kind = kind == REC_TORCH_ALLOC ? ADV_EV_ALLOC
                                                    : kind == REC_TORCH_FREE   ? ADV_EV_FREE
                                                                               : ADV_EV_FREE_DONE,
                                      .step = -1, .t = t};
    }
    sqlite3_finalize(st);
    u64map_free(&live);
    adv_pool_ids_free(&pools);
    if (rc < 0) {
        adv_model_free(am);
        snprintf(err, errsz, "out of memory");
    }
    return rc;
}

int gm_replay_trace_load(gm_db *d, adv_model *am, char *err, size_t errsz) {
    return gm_replay_trace_load_tap(d, am, NULL, NULL, err, errsz);
}

int gm_replay_trace_load_tap(gm_db *d, adv_model *am, const adv_tap *tap, int *tapped, char *err, size_t errsz) {
    if (tapped) *tapped = 0;
    int torch = torch_trace_load(d, am, err, errsz);
    if (torch < 0) return -1;
    /* PyTorch's own allocator's OOMs too (its fraction's, the key of PYTORCH_CUDA_ALLOC_CONF's
     * included, which the recorded configuration and the load's fraction events cap it at, as
     * PyTorch did): the recorded configuration replays into them */
    if (torch > 0) {
        if (add_ooms(d, am) == 0) return 0;
        adv_model_free(am);
        snprintf(err, errsz, "out of memory");
        return -1;
    }
    /* the model advise replays (gpumem's capture pools' ends and its empty_cache calls are the
     * load's own events, and so are the streams it forgot), with the recorded configuration's
     * markers and syncs, which advise leaves out (ADV_LOAD_MARKERS) */
    if (adv_model_load_tap(d, am, ADV_LOAD_MARKERS, tap, err, errsz) != 0) return -1;
    if (tapped) *tapped = 1;
    /* the frees' landings (read by the load) in the events: frag and tune count the trace by them */
    if (adv_fc_merge(am) != 0) {
        adv_model_free(am);
        snprintf(err, errsz, "out of memory");
        return -1;
    }
    /* advise's model drops the caps (adv_cfg_uncapped: it predicts how much is needed);
     * configurations are judged under the ones the program ran with: the limit and the
     * per_process_memory_fraction key */
    alloc_config_t rc;
    alloc_config_default(&rc);
    char conf[1024];
    gm_meta_text(d, "config", conf, sizeof conf);
    if (conf[0] && alloc_config_parse_recorded(&rc, conf, NULL, 0) == ALLOC_OK)
        am->cfg.limit = rc.limit, am->cfg.memory_fraction = rc.memory_fraction;
    /* the per-process memory fractions gpumem's allocator applied (the load's ADV_EV_LIMIT events
     * of a gpumem recording) under the limit in bytes, as alloc_set_memory_fraction applied them
     * (alloc_fraction_limit; ADV_LIMIT_MAX: a fraction of 1): each replaces the
     * per_process_memory_fraction key's share of the recorded device's total, which frag's and
     * tune's replays start from (alloc_conf_limit of alloc_replay_opts.device_total) */
    if (rc.memory_fraction >= 0) am->device_total = recorded_device_total(d);
    if (am->torch != 1)
        for (size_t i = 0; i < am->nevs; i++) {
            adv_ev *e = &am->evs[i];
            if (e->kind != ADV_EV_LIMIT) continue;
            uint64_t cap = adv_ev_limit(e);
            adv_ev_set_limit(e, alloc_fraction_limit((size_t)cap, cap == ADV_LIMIT_MAX, rc.limit));
        }
    if (add_ooms(d, am) != 0) {
        adv_model_free(am);
        snprintf(err, errsz, "out of memory");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- configurations */

int gm_conf_same(const alloc_config_t *a, const alloc_config_t *b) {
    char x[1024], y[1024];
    alloc_config_format(a, x, sizeof x);
    alloc_config_format(b, y, sizeof y);
    return strcmp(x, y) == 0;
}

void gm_conf_short(const alloc_config_t *cfg, char *out, size_t outsz) {
    char full[1024];
    alloc_config_format(cfg, full, sizeof full);
    /* the keys after the preset, as the formatter writes them */
    char *toks[64];
    size_t nt = 0;
    char *save = NULL;
    for (char *t = strtok_r(full, ",", &save); t && nt < 64; t = strtok_r(NULL, ",", &save)) {
        /* a list value ("[256:1,512:2]") was cut at its commas: glue it back */
        if (nt && strchr(toks[nt - 1], '[') && !strchr(toks[nt - 1], ']')) {
            t[-1] = ',';
            continue;
        }
        toks[nt++] = t;
    }
    char best[1024] = "";
    for (size_t p = 0; alloc_preset_names[p]; p++) {
        int keep[64];
        for (size_t i = 0; i < nt; i++) keep[i] = strncmp(toks[i], "preset:", 7) != 0;
        /* drop every key the preset already implies, one at a time */
        for (size_t i = 0; i < nt; i++) {
            if (!keep[i]) continue;
            keep[i] = 0;
            char trial[1024];
            int n = snprintf(trial, sizeof trial, "preset:%s", alloc_preset_names[p]);
            for (size_t j = 0; j < nt; j++)
                if (keep[j]) n += snprintf(trial + n, sizeof trial - (size_t)n, ",%s", toks[j]);
            alloc_config_t c;
            alloc_config_default(&c);
            if (alloc_config_parse(&c, trial, NULL, 0) != ALLOC_OK || !gm_conf_same(&c, cfg)) keep[i] = 1;
        }
        char cand[1024];
        int n = snprintf(cand, sizeof cand, "preset:%s", alloc_preset_names[p]);
        for (size_t j = 0; j < nt; j++)
            if (keep[j]) n += snprintf(cand + n, sizeof cand - (size_t)n, ",%s", toks[j]);
        alloc_config_t c;
        alloc_config_default(&c);
        if (alloc_config_parse(&c, cand, NULL, 0) != ALLOC_OK || !gm_conf_same(&c, cfg)) continue;
        if (!best[0] || strlen(cand) < strlen(best)) snprintf(best, sizeof best, "%s", cand);
    }
    if (!best[0]) alloc_config_format(cfg, best, sizeof best);
    snprintf(out, outsz, "%s", best);
}

int gm_conf_pytorch(const alloc_config_t *cfg, char *out, size_t outsz) {
    alloc_config_t c = *cfg;
    c.limit = ALLOC_NO_LIMIT; /* a memory fraction in PyTorch, not a configuration key */
    char s[1024];
    gm_conf_short(&c, s, sizeof s);
    const char *rest;
    char py[1024] = "";
    if (strncmp(s, "preset:pytorch-expandable", 25) == 0 && (s[25] == ',' || !s[25])) {
        snprintf(py, sizeof py, "expandable_segments:True");
        rest = s + 25;
    } else if (strncmp(s, "preset:pytorch", 14) == 0 && (s[14] == ',' || !s[14])) {
        rest = s + 14;
    } else {
        return 0;
    }
    static const char *const keys[] = {"expandable_segments:", "max_split_size_mb:",
                                        "roundup_power2_divisions:", "garbage_collection_threshold:",
                                        "large_segment_size_mb:", "max_non_split_rounding_mb:",
                                        "per_process_memory_fraction:"};
    while (*rest == ',') {
        rest++;
        int ok = 0;
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            if (strncmp(rest, keys[k], strlen(keys[k])) == 0) ok = 1;
        if (!ok) return 0; /* a gpumem-only key */
        const char *e = rest;
        int depth = 0;
        while (*e && (*e != ',' || depth)) {
            if (*e == '[') depth++;
            if (*e == ']') depth--;
            e++;
        }
        size_t l = strlen(py);
        snprintf(py + l, sizeof py - l, "%s%.*s", l ? "," : "", (int)(e - rest), rest);
        rest = e;
    }
    snprintf(out, outsz, "%s", py);
    return 1;
}

/* The virtual GPU's default costs for the calls an allocator makes (sim/sim_state.c,
 * default_costs; the figures and their sources are in sim/README.md, "Cost model"): fixed
 * microseconds per call and microseconds per MiB of the size it names. */
typedef struct call_cost {
    double fixed_us, per_mib_us;
} call_cost;
static const call_cost cost_reserve = {10.0, 0.0}, cost_free_range = {10.0, 0.0},
                       cost_create = {20.0, 1.0}, cost_release = {10.0, 0.5}, cost_map = {10.0, 0.1},
                       cost_unmap = {15.0, 0.5}, cost_set_access = {20.0, 0.5},
                       cost_seg_alloc = {20.0, 0.5}, cost_seg_free = {25.0, 0.25},
                       cost_event_record = {2.0, 0.0}, cost_event_query = {1.0, 0.0},
                       cost_synchronize = {10.0, 0.0};

static double price(call_cost c, uint64_t calls, uint64_t bytes) {
    return c.fixed_us * (double)calls + c.per_mib_us * ((double)bytes / 1048576.0);
}

double gm_replay_driver_seconds(const alloc_mem_counters_t *c) {
    double us = price(cost_reserve, c->reserve, 0) + price(cost_free_range, c->free_range, 0) +
                price(cost_create, c->create, c->create_bytes) + price(cost_release, c->release, c->release_bytes) +
                price(cost_map, c->map, c->map_bytes) + price(cost_unmap, c->unmap, c->unmap_bytes) +
                price(cost_set_access, c->set_access, c->set_access_bytes) +
                price(cost_seg_alloc, c->seg_alloc, c->seg_alloc_bytes) +
                price(cost_seg_free, c->seg_free, c->seg_free_bytes) +
                price(cost_event_record, c->event_record, 0) + price(cost_event_query, c->event_query, 0) +
                price(cost_synchronize, c->synchronize, 0);
    return us * 1e-6;
}

/* ---------------------------------------------------------------- parallel replays */

/* Each thread takes the next item in order until none is left. */
typedef struct pfor {
    void (*fn)(void *ctx, size_t i);
    void *ctx;
    size_t n;
    atomic_size_t next;
} pfor;

static void *pfor_worker(void *arg) {
    pfor *p = arg;
    for (size_t i; (i = atomic_fetch_add(&p->next, 1)) < p->n;) p->fn(p->ctx, i);
    return NULL;
}

void gm_parallel_for(size_t n, int threads, void (*fn)(void *ctx, size_t i), void *ctx) {
    pfor p = {.fn = fn, .ctx = ctx, .n = n};
    atomic_init(&p.next, 0);
    if (threads <= 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        threads = ncpu > 0 ? (int)ncpu : 1;
    }
    if (threads > 64) threads = 64;
    if ((size_t)threads > n) threads = (int)n;
    pthread_t tid[64];
    int started = 0;
    for (int i = 1; i < threads; i++) /* the calling thread is one of them */
        if (pthread_create(&tid[started], NULL, pfor_worker, &p) == 0) started++;
    pfor_worker(&p);
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
}

typedef struct job {
    const alloc_trace_event_t *trace;
    size_t n;
    size_t capacity, device_total;
    bool top_down;
    bool below;            /* gm_replay_below: the others stop at res[0]'s peak */
    atomic_size_t bar;     /* res[0]'s peak reserved once it replayed without an OOM; 0 before */
    size_t from;           /* item i is res[from + i] */
    bool no_fc;            /* the trace has no ALLOC_TR_FREE_DONE: looked for once, not per replay */
    bool own;              /* gm_replay_framework_only: into the own_* figures */
    const uint32_t *slots; /* alloc_trace_slots of the trace, once for every replay; or NULL */
    uint32_t nslots;
    gm_replay_result *res; /* the batch */
} job;

/* alloc_replay's keep_going under gm_replay_below: on while below res[0]'s peak (or not known) */
static bool below_bar(void *user, size_t peak_reserved) {
    size_t bar = atomic_load_explicit(&((job *)user)->bar, memory_order_relaxed);
    return !bar || peak_reserved < bar;
}

static void replay_one(job *j, gm_replay_result *r) {
    alloc_replay_opts_t o = {.capacity = j->capacity, .device_total = j->device_total, .top_down = j->top_down, .no_free_done = j->no_fc,
                             .slots = j->slots, .nslots = j->nslots, .framework_only = j->own,
                             .markers = r->markers != 0};
    if (j->below && r != &j->res[0]) o.keep_going = below_bar, o.keep_going_user = j;
    alloc_replay_result_t out;
    char err[256];
    if (j->own) {
        int ok = alloc_replay(&r->cfg, &o, j->trace, j->n, &out, err, sizeof err) == ALLOC_OK;
        r->own_ok = ok;
        r->own_oom = !ok || out.oom_index >= 0;
        r->own_peak_allocated = ok ? out.peak_allocated : 0;
        r->own_peak_reserved = ok ? out.peak_reserved : 0;
        return;
    }
    if (alloc_replay(&r->cfg, &o, j->trace, j->n, &out, err, sizeof err) != ALLOC_OK) {
        r->ok = 0;
        r->oom = 1;
        return;
    }
    r->ok = 1;
    r->stopped = out.stopped;
    r->oom = out.oom_index >= 0;
    r->peak_allocated = out.peak_allocated;
    r->peak_reserved = out.peak_reserved;
    r->utilization = out.utilization;
    r->driver_calls = out.driver_calls;
    r->driver_time_s = gm_replay_driver_seconds(&out.backend);
}

static void replay_item(void *ctx, size_t i) {
    job *j = ctx;
    i += j->from;
    replay_one(j, &j->res[i]);
    /* the peak the others are to stay under, from now on */
    if (j->below && i == 0 && j->res[0].ok && !j->res[0].oom && j->res[0].peak_reserved)
        atomic_store_explicit(&j->bar, (size_t)j->res[0].peak_reserved, memory_order_relaxed);
}

static size_t rounds(size_t n, size_t threads) { return (n + threads - 1) / threads; }

static void replay_batch(const alloc_trace_event_t *trace, size_t n, const uint32_t *slots, uint32_t nslots,
                         size_t capacity, size_t device_total, bool top_down, gm_replay_result *res, size_t nres,
                         int threads, bool below, bool framework_only) {
    job j = {.trace = trace, .n = n, .capacity = capacity, .device_total = device_total, .top_down = top_down, .below = below, .res = res,
             .slots = slots, .nslots = nslots, .own = framework_only};
    atomic_init(&j.bar, 0);
    j.no_fc = true;
    for (size_t i = 0; i < n && j.no_fc; i++) j.no_fc = trace[i].kind != ALLOC_TR_FREE_DONE;
    /* the live allocations numbered once for the batch, unless the caller did for all of its
     * batches: each replay then keeps them in an array by slot, not in a table keyed by id (out
     * of memory: the table) */
    uint32_t *own = NULL;
    if (!slots && nres > 1 && alloc_trace_slots(trace, n, &own, &j.nslots) == ALLOC_OK) j.slots = own;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    size_t t = threads > 0 ? (size_t)threads : ncpu > 0 ? (size_t)ncpu : 1;
    /* res[0] alone first where that takes no longer (3 replays on 2 cores take two rounds either
     * way): every other replay then starts with its peak known */
    if (below && nres > 1 && 1 + rounds(nres - 1, t) <= rounds(nres, t)) {
        replay_item(&j, 0);
        j.from = 1;
        gm_parallel_for(nres - 1, threads, replay_item, &j);
    } else {
        gm_parallel_for(nres, threads, replay_item, &j);
    }
    free(own);
}

int gm_replay_many(const alloc_trace_event_t *trace, size_t n, const uint32_t *slots, uint32_t nslots,
                   size_t capacity, size_t device_total, bool top_down, gm_replay_result *res, size_t nres,
                   int threads) {
    replay_batch(trace, n, slots, nslots, capacity, device_total, top_down, res, nres, threads, false, false);
    return 0;
}

int gm_replay_framework_only(const alloc_trace_event_t *trace, size_t n, size_t capacity, size_t device_total,
                             bool top_down, gm_replay_result *res, size_t nres, int threads) {
    replay_batch(trace, n, NULL, 0, capacity, device_total, top_down, res, nres, threads, false, true);
    return 0;
}

/* Each allocation of am (by index) -> its row's rank among the recording's allocation rows
 * (kinds 1, 3 in seq order), from 1; 0: not an allocation. The load makes allocations of its own
 * between the recorded ones (a stream marker's, an empty_cache's, a memory fraction's, a pool's
 * end: adv_add_*, none of them allocated in the trace), so an allocation's index is its row's
 * rank only until the first of those: the rows' allocations are the ones the trace allocates,
 * made in the rows' order (an OOM's request, added after them all, ranks past the rows). NULL:
 * out of memory. */
static uint32_t *row_ranks(const adv_model *am, const alloc_trace_event_t *trace, size_t n) {
    uint32_t *rank = calloc(am->nallocs ? am->nallocs : 1, sizeof *rank);
    if (!rank) return NULL;
    for (size_t i = 0; i < n; i++) {
        uint32_t k = trace[i].kind;
        if ((k == ALLOC_TR_ALLOC || k == ALLOC_TR_ALLOC_PRIVATE || k == ALLOC_TR_ALLOC_DRIVER) && trace[i].id >= 1 &&
            trace[i].id <= am->nallocs)
            rank[trace[i].id - 1] = 1;
    }
    uint32_t k = 0;
    for (size_t a = 0; a < am->nallocs; a++)
        if (rank[a]) rank[a] = ++k;
    return rank;
}

long gm_replay_mark_served(gm_db *d, const adv_model *am, alloc_trace_event_t *trace, size_t n) {
    sqlite3_stmt *st;
    /* the load's answer where it read every row: the scan's, when no row has the flag, goes
     * through the whole table (through SQLite's map of the file: on 10 M events 500 MB of it
     * resident beside the replays) */
    int hooked = am->hooked_rows == ADV_HOOKED_SOME;
    if (am->hooked_rows == ADV_HOOKED_UNKNOWN) {
        if (sqlite3_prepare_v2(d->db, "SELECT 1 FROM events WHERE kind IN (1, 3) AND (flags & 4096) != 0 LIMIT 1",
                               -1, &st, NULL) != SQLITE_OK)
            return -1;
        hooked = sqlite3_step(st) == SQLITE_ROW;
        sqlite3_finalize(st);
    }
    if (!hooked) return 0; /* no framework allocator in the recording: every allocation is its */
    if (sqlite3_prepare_v2(d->db, "SELECT flags FROM events WHERE kind IN (1, 3) ORDER BY seq", -1, &st, NULL) !=
        SQLITE_OK)
        return -1;
    /* by rank: 1 where the allocation came through the framework's hook */
    unsigned char *fw = NULL;
    size_t na = 0, cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (gm_grow_fast((void **)&fw, &cap, na + 1, 1)) {
            sqlite3_finalize(st);
            free(fw);
            return -1;
        }
        fw[na++] = (sqlite3_column_int64(st, 0) & REC_F_FRAMEWORK) != 0;
    }
    sqlite3_finalize(st);
    uint32_t *rank = row_ranks(am, trace, n);
    if (!rank) {
        free(fw);
        return -1;
    }
    long marked = 0;
    for (size_t i = 0; i < n; i++) {
        if (trace[i].kind != ALLOC_TR_ALLOC || trace[i].id < 1 || trace[i].id > am->nallocs) continue;
        uint32_t r = rank[trace[i].id - 1];
        if (r >= 1 && r <= na && !fw[r - 1]) {
            trace[i].kind = ALLOC_TR_ALLOC_SERVED;
            marked++;
        }
    }
    free(rank);
    free(fw);
    return marked;
}

int gm_replay_below(const alloc_trace_event_t *trace, size_t n, size_t capacity, size_t device_total,
                    bool top_down, gm_replay_result *res, size_t nres, int threads) {
    replay_batch(trace, n, NULL, 0, capacity, device_total, top_down, res, nres, threads, true, false);
    return 0;
}
