/* gm_ranks.c — `gpumem report A.db B.db ...` or `gpumem report DIR`: the recordings of the
 * ranks of one job (one database per rank, `run-%r.db`), merged into one report.
 *
 * The question it answers is the one a data-parallel or ZeRO job asks: which rank sets the
 * job's peak, and why. Each database is loaded and swept once (gm_model_load), reduced to a
 * rank summary — peaks, where the peak is (step and NVTX phase), what is live at it grouped by
 * tensor class and phase, the peak allocated of every step, what is alive at the end — and the
 * model is freed before the next one is read, so N ranks cost one model at a time.
 *
 * The merge: the per-rank table; the imbalance (largest over smallest peak allocated, and the
 * spread); the rank with the largest peak and what it holds at its peak that the others do
 * not: for each (class, phase) group, its bytes live at that rank's peak against the mean of
 * the other ranks' at theirs, the largest differences first; the timeline aligned by step
 * number (the step ranges the trainer and frameworks push, "step N"); leaks per rank.
 * The analysis (rank_load, merge) is apart from the two printers (text, JSON). */
#include "snapshot/analyze/gm_report.h"
#include "snapshot/analyze/gm_advise.h"
#include "snapshot/record/rec.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct rk_group {
    char *cls;         /* tensor class (name with digits as '*') or call site */
    const char *phase; /* forward, backward, optimizer, other */
    uint64_t bytes;    /* held bytes live at the rank's peak */
    uint64_t count;
} rk_group;

typedef struct rk_step {
    int64_t step;
    uint64_t peak_allocated;
} rk_step;

typedef struct rk_rank {
    char *path;
    int64_t rank;       /* meta.rank, else the file's position */
    int64_t meta_rank;  /* -1 none */
    int64_t world_size; /* -1 none */
    int complete;       /* closed by the recorder */
    char *ending;       /* why its program did not run to its end (gm_ending_line), NULL if it did */
    uint64_t peak_allocated, peak_reserved;
    int64_t peak_step; /* -1 none */
    char *peak_phase;  /* NVTX path of the allocation that made the peak, "" none */
    uint64_t leaked_bytes, leaked_count; /* by leaks's rule (gm_model_leak_view), device's (as leaks) */
    int device, ndevices, dev_lo, dev_hi; /* the device whose figures these are (-1: one device) */
    int device_asked;                     /* 1: device is --device's, not the busiest */
    char device_why[256];                 /* why device is the one (gm_lead_why) */
    uint64_t torch_peak_allocated;       /* PyTorch's own max_memory_allocated(d) at the end (since
                                            its last reset of d); 0: no history */
    uint64_t torch_whole_run;            /* its whole-run peak allocated on that device */
    int torch_device;                    /* d (-1: one device) */
    gm_torch_reset torch_reset;          /* the program's reset of d's peak stats (count 0: none) */
    char torch_absent[1024];             /* --device's where PyTorch held nothing (gm_torch_absent), "" */
    char *torch_absent_json;             /* its JSON object (gm_torch_absent_json), NULL */
    rk_group *groups;
    size_t ngroups;
    rk_step *steps;
    size_t nsteps;
} rk_rank;

static void rank_free(rk_rank *r)
{
    for (size_t i = 0; i < r->ngroups; i++)
        free(r->groups[i].cls);
    free(r->groups), free(r->steps), free(r->path), free(r->peak_phase), free(r->ending), free(r->torch_absent_json);
}

static const char *phase_name(const char *path)
{
    char comp[128];
    for (const char *p = path; p && *p;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n < sizeof comp) {
            memcpy(comp, p, n), comp[n] = 0;
            int ph = adv_phase_of_name(comp);
            if (ph == ADV_PH_FWD) return "forward";
            if (ph == ADV_PH_BWD) return "backward";
            if (ph == ADV_PH_OPT) return "optimizer";
        }
        p = e ? e + 1 : NULL;
    }
    return "other";
}

static int is_device(uint8_t kind)
{
    return kind == REC_ALLOC || kind == REC_ALLOC_ASYNC;
}

typedef struct rk_ev {
    uint64_t seq;
    int64_t delta;
} rk_ev;

static int cmp_ev(const void *a, const void *b)
{
    const rk_ev *x = a, *y = b;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    return (x->delta > y->delta) - (x->delta < y->delta); /* a free before an alloc at one seq */
}
static int cmp_step_start(const void *a, const void *b)
{
    const gm_step *x = a, *y = b;
    return (x->start_seq > y->start_seq) - (x->start_seq < y->start_seq);
}
static int cmp_group(const void *a, const void *b)
{
    const rk_group *x = a, *y = b;
    int c = strcmp(x->cls, y->cls);
    return c ? c : strcmp(x->phase, y->phase);
}

/* The peak allocated of every step: its highest moment, from its first event to its last (of
 * any kind: the model's steps), the bytes it began with included. A step that allocates and
 * frees nothing (PyTorch's later steps, served from its cache) holds what it carried in. */
static int rank_steps(const gm_model *m, rk_rank *r)
{
    if (!m->nsteps) return 0;
    gm_step *st = malloc(m->nsteps * sizeof *st);
    rk_ev *ev = malloc((2 * m->nallocs + 1) * sizeof *ev);
    r->steps = calloc(m->nsteps, sizeof *r->steps);
    if (!st || !ev || !r->steps) {
        free(st), free(ev);
        return -1;
    }
    memcpy(st, m->steps, m->nsteps * sizeof *st);
    gm_sort(st, m->nsteps, sizeof *st, cmp_step_start);
    size_t n = 0;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (!is_device(a->kind)) continue;
        ev[n++] = (rk_ev){a->birth, (int64_t)a->size};
        if (a->death) ev[n++] = (rk_ev){a->death, -(int64_t)a->size};
    }
    gm_sort(ev, n, sizeof *ev, cmp_ev);
    for (size_t k = 0; k < m->nsteps; k++)
        r->steps[k].step = st[k].step;
    r->nsteps = m->nsteps;
    /* steps begin in order; the events up to a step's start give what it carried in */
    int64_t cur = 0;
    size_t i = 0;
    for (size_t k = 0; k < m->nsteps; k++) {
        for (; i < n && ev[i].seq < st[k].start_seq; i++)
            cur += ev[i].delta;
        int64_t peak = cur, lvl = cur;
        for (size_t j = i; j < n && ev[j].seq <= st[k].end_seq; j++) {
            lvl += ev[j].delta;
            if (lvl > peak) peak = lvl;
        }
        r->steps[k].peak_allocated = peak > 0 ? (uint64_t)peak : 0;
    }
    free(st), free(ev);
    return 0;
}

/* What is live at the peak, grouped by (class, phase of birth). */
static int rank_groups(gm_db *d, gm_model *m, rk_rank *r)
{
    uint64_t at = m->peak_allocated_seq;
    size_t cap = 0, n = 0;
    rk_group *g = NULL;
    int symbolized = 0;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (!is_device(a->kind) || a->birth > at || (a->death && a->death <= at)) continue;
        char cls[512];
        const char *name = a->name ? gm_str(m, a->name) : NULL;
        if (name && *name)
            adv_name_class(name, cls, sizeof cls);
        else {
            if (!symbolized) symbolized = 1, gm_symbolize(d, m);
            long fi = gm_stack_site(m, a->stack);
            if (fi >= 0)
                gm_frame_desc(m, fi, cls, sizeof cls);
            else
                snprintf(cls, sizeof cls, "(unnamed)");
        }
        const gm_range *rg = gm_range_of(m, a->range);
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            rk_group *ng = realloc(g, cap * sizeof *g);
            if (!ng) goto nomem;
            g = ng;
        }
        g[n] = (rk_group){strdup(cls), phase_name(rg ? rg->path : NULL), a->size, 1};
        if (!g[n].cls) goto nomem;
        n++;
    }
    gm_sort(g, n, sizeof *g, cmp_group);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (o && !cmp_group(&g[o - 1], &g[i])) {
            g[o - 1].bytes += g[i].bytes, g[o - 1].count++;
            free(g[i].cls);
        } else
            g[o++] = g[i];
    }
    r->groups = g, r->ngroups = o;
    return 0;
nomem:
    for (size_t i = 0; i < n; i++)
        free(g[i].cls);
    free(g);
    return -1;
}

/* Loads one rank's recording and reduces it to its summary. Returns 0 or an exit code (a
 * recording that lost events: refused unless lossy_ok, and then said first, on lossy_out). */
static int rank_load(const char *path, size_t index, rk_rank *r, int lossy_ok, int frames_all, int device,
                     FILE *lossy_out)
{
    memset(r, 0, sizeof *r);
    gm_db d;
    gm_model m;
    int rc = gm_open_model(path, &d, &m, 0);
    if (rc) return rc;
    if ((rc = gm_lossy_gate(&d, "report", lossy_ok, lossy_out)) != 0 ||
        (rc = gm_damage_gate(&d, "report", 1, lossy_ok, lossy_out)) != 0) {
        gm_model_free(&m);
        gm_db_close(&d);
        return rc;
    }
    char err[8192];
    if (gm_model_pick_device(&d, &m, device, err, sizeof err) != 0) { /* --device N leads */
        gm_model_free(&m);
        gm_db_close(&d);
        return gm_scope_fail("report", GM_SCOPE_NO_DEVICE, err, "each rank's busiest");
    }
    /* --frames: the call site an unnamed allocation is grouped under, as in one rank's report */
    m.frames_all = frames_all;
    r->path = strdup(path);
    r->meta_rank = gm_meta_int(&d, "rank", -1);
    r->world_size = gm_meta_int(&d, "world_size", -1);
    r->rank = (int64_t)index;
    r->complete = d.closed && !d.damage[0]; /* damaged (--lossy-ok): rows are missing */
    char ending[256];
    gm_ending_line(&d, ending, sizeof ending);
    r->ending = ending[0] ? strdup(ending) : NULL;
    /* several devices in the rank: its figures are its busiest device's (or --device's), as its
     * own report's (a sum of devices is a figure no device held), its leaks too (as gpumem leaks
     * counts them) */
    gm_model dv, *pm = &m;
    r->device = -1, r->device_asked = device >= 0;
    r->ndevices = gm_model_devices(&m, &r->dev_lo, &r->dev_hi);
    if (r->ndevices > 1) {
        gm_symbolize(&d, &m); /* the view shares the model's frames: named once, on the model */
        if (gm_model_device_view(&m, gm_lead_device(&m), &dv) == 0) r->device = dv.device_only - 1, pm = &dv;
        char why[256];
        snprintf(r->device_why, sizeof r->device_why, "%s", gm_lead_why(&m, "the highest peak reserved", why, sizeof why));
    }
    r->peak_allocated = pm->peak_allocated;
    r->peak_reserved = pm->peak_reserved;
    r->peak_step = -1;
    long pa = pm->peak_allocated ? gm_alloc_by_id(pm, pm->peak_allocated_seq) : -1;
    const gm_range *rg = pa >= 0 ? gm_range_of(pm, pm->allocs[pa].range) : NULL;
    r->peak_phase = strdup(rg && rg->path ? rg->path : "");
    if (rg) r->peak_step = rg->step;
    gm_model lv = gm_model_leak_view(&m);
    /* gpumem leaks' device (gm_db_scope_one): PyTorch's view's busiest where its tensors are */
    int ld = r->device;
    if (ld >= 0 && lv.is_torch_view && gm_model_devices(&lv, NULL, NULL) > 1) ld = gm_lead_device(&lv);
    for (size_t i = 0; i < lv.nallocs; i++)
        if (gm_alloc_leaked(&lv.allocs[i]) && (ld < 0 || lv.allocs[i].device == ld)) r->leaked_bytes += lv.allocs[i].requested, r->leaked_count++;
    uint64_t hb, hn, hh; /* pinned host blocks kept to the end, beside PyTorch's tensors (as leaks) */
    gm_view_host_held(&lv, &hb, &hn, &hh);
    r->leaked_bytes += hb, r->leaked_count += hn;
    /* PyTorch's own figure: its busiest device's max_memory_allocated(d), which counts from the
     * program's last reset of d (reset_peak_memory_stats(d)) */
    r->torch_device = -1;
    r->torch_absent[0] = 0; /* --device N where PyTorch held nothing: none of its figures, said */
    if (gm_torch_absent(&d, r->torch_absent, sizeof r->torch_absent) >= 0) {
        size_t len;
        FILE *mf = open_memstream(&r->torch_absent_json, &len);
        if (mf) gm_torch_absent_json(&d, mf), fclose(mf);
    } else if (m.torch.present) {
        gm_model tw = gm_model_torch_view(&m);
        r->torch_whole_run = m.torch.peak_allocated;
        if (gm_model_devices(&tw, NULL, NULL) > 1) {
            r->torch_device = gm_lead_device(&tw);
            r->torch_whole_run = m.torch.devs[r->torch_device].peak_allocated;
        }
        r->torch_peak_allocated = r->torch_whole_run;
        if (gm_torch_peak_reset(&d, r->torch_device >= 0 ? r->torch_device : GM_TORCH_ALL_DEVICES, &r->torch_reset))
            r->torch_peak_allocated = r->torch_reset.max_allocated;
    }
    rc = !r->path || !r->peak_phase || (r->torch_absent[0] && !r->torch_absent_json) || rank_steps(pm, r) || rank_groups(&d, pm, r) ? -1 : 0;
    if (pm == &dv) gm_model_device_view_free(&dv);
    gm_model_free(&m);
    gm_db_close(&d);
    if (rc) {
        fprintf(stderr, "gpumem: %s: out of memory\n", path);
        return GM_EXIT_BADDB;
    }
    return 0;
}

/* ---------------------------------------------------------------- the merge */

typedef struct rk_diff {
    const rk_group *g; /* the peak rank's group (NULL: held by others only) */
    const char *cls, *phase;
    uint64_t bytes;     /* at the peak rank's peak */
    double others_mean; /* mean over the other ranks at their peaks */
    double excess;      /* bytes - others_mean */
} rk_diff;

static int cmp_diff(const void *a, const void *b)
{
    const rk_diff *x = a, *y = b;
    return (x->excess < y->excess) - (x->excess > y->excess);
}
static int cmp_rank(const void *a, const void *b)
{
    const rk_rank *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static uint64_t group_bytes(const rk_rank *r, const char *cls, const char *phase)
{
    size_t lo = 0, hi = r->ngroups;
    rk_group key = {(char *)cls, phase, 0, 0};
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = cmp_group(&r->groups[mid], &key);
        if (!c) return r->groups[mid].bytes;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* Every (class, phase) of any rank, the peak rank's bytes against the others' mean. */
static rk_diff *peak_diffs(const rk_rank *rs, size_t n, size_t top, size_t *nd)
{
    size_t cap = 0;
    for (size_t i = 0; i < n; i++)
        cap += rs[i].ngroups;
    rk_diff *d = calloc(cap + 1, sizeof *d);
    if (!d) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < rs[i].ngroups; j++) {
            const rk_group *g = &rs[i].groups[j];
            int seen = 0; /* counted already from an earlier rank */
            for (size_t e = 0; e < i && !seen; e++)
                seen = group_bytes(&rs[e], g->cls, g->phase) > 0;
            if (seen) continue;
            rk_diff x = {.cls = g->cls, .phase = g->phase};
            double sum = 0;
            for (size_t e = 0; e < n; e++) {
                uint64_t b = group_bytes(&rs[e], g->cls, g->phase);
                if (e == top)
                    x.bytes = b;
                else
                    sum += (double)b;
            }
            x.others_mean = n > 1 ? sum / (double)(n - 1) : 0;
            x.excess = (double)x.bytes - x.others_mean;
            d[k++] = x;
        }
    gm_sort(d, k, sizeof *d, cmp_diff);
    *nd = k;
    return d;
}

/* The peak rank's peak allocated less the mean of the other ranks' (0 for one rank). */
static double peak_difference(const rk_rank *rs, size_t n, size_t top)
{
    if (n < 2) return 0;
    double others = 0;
    for (size_t i = 0; i < n; i++)
        if (i != top) others += (double)rs[i].peak_allocated;
    return (double)rs[top].peak_allocated - others / (double)(n - 1);
}

/* ---------------------------------------------------------------- printers */

static void json_out(FILE *out, const rk_rank *rs, size_t n, size_t top, const rk_diff *d,
                     size_t nd, size_t ntop, const int64_t *steps, size_t nsteps)
{
    uint64_t mx = 0, mn = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        if (rs[i].peak_allocated > mx) mx = rs[i].peak_allocated;
        if (rs[i].peak_allocated < mn) mn = rs[i].peak_allocated;
    }
    fputs("{\"ranks\":[", out);
    for (size_t i = 0; i < n; i++) {
        const rk_rank *r = &rs[i];
        fprintf(out, "%s\n {\"rank\":%" PRId64 ",\"path\":", i ? "," : "", r->rank);
        gm_json_str(out, r->path);
        fprintf(out, ",\"rank_from\":\"%s\"", r->meta_rank >= 0 ? "meta" : "file_order");
        if (r->world_size > 0)
            fprintf(out, ",\"world_size\":%" PRId64, r->world_size);
        else
            fputs(",\"world_size\":null", out);
        fprintf(out, ",\"complete\":%s,\"peak_allocated\":%" PRIu64 ",\"peak_reserved\":%" PRIu64,
                r->complete ? "true" : "false", r->peak_allocated, r->peak_reserved);
        fputs(",\"ending\":", out);
        gm_json_str(out, r->ending);
        if (r->peak_step >= 0)
            fprintf(out, ",\"peak_step\":%" PRId64, r->peak_step);
        else
            fputs(",\"peak_step\":null", out);
        fputs(",\"peak_phase\":", out);
        gm_json_str(out, r->peak_phase);
        if (r->device >= 0)
            fprintf(out, ",\"device\":%d,\"devices\":%d", r->device, r->ndevices);
        else
            fprintf(out, ",\"device\":null,\"devices\":%d", r->ndevices);
        if (r->torch_peak_allocated || r->torch_whole_run)
            fprintf(out, ",\"torch_peak_allocated\":%" PRIu64 ",\"torch_whole_run_peak_allocated\":%" PRIu64,
                    r->torch_peak_allocated, r->torch_whole_run);
        else
            fputs(",\"torch_peak_allocated\":null,\"torch_whole_run_peak_allocated\":null", out);
        if (r->torch_device >= 0) fprintf(out, ",\"torch_device\":%d", r->torch_device);
        else fputs(",\"torch_device\":null", out);
        if (r->torch_reset.count)
            fprintf(out, ",\"torch_peak_reset\":{\"count\":%" PRIu64 ",\"seq\":%" PRIu64 ",\"t_ns\":%" PRIu64 "}",
                    r->torch_reset.count, r->torch_reset.seq, r->torch_reset.t_ns);
        else
            fputs(",\"torch_peak_reset\":null", out);
        fprintf(out, ",\"torch_absent\":%s", r->torch_absent_json ? r->torch_absent_json : "null");
        fprintf(out, ",\"leaked_bytes\":%" PRIu64 ",\"leaked_allocations\":%" PRIu64 ",\"steps\":[",
                r->leaked_bytes, r->leaked_count);
        for (size_t k = 0; k < r->nsteps; k++)
            fprintf(out, "%s{\"step\":%" PRId64 ",\"peak_allocated\":%" PRIu64 "}", k ? "," : "",
                    r->steps[k].step, r->steps[k].peak_allocated);
        fputs("]}", out);
    }
    fprintf(out,
            "\n],\"imbalance\":{\"max_over_min\":%.4f,\"spread_bytes\":%" PRIu64
            "},\"peak_rank\":%" PRId64
            ",\"peak_rank_reason\":{\"against\":\"mean of the other ranks at their peaks\","
            "\"difference_bytes\":%.0f,\"groups\":[",
            mn ? (double)mx / (double)mn : 0, mx - mn, rs[top].rank, peak_difference(rs, n, top));
    size_t shown = 0;
    for (size_t i = 0; i < nd && shown < ntop; i++) {
        if (d[i].excess <= 0) break;
        fprintf(out, "%s{\"class\":", shown ? "," : "");
        gm_json_str(out, d[i].cls);
        fprintf(out,
                ",\"phase\":\"%s\",\"bytes\":%" PRIu64
                ",\"others_mean_bytes\":%.0f,\"excess_bytes\":%.0f}",
                d[i].phase, d[i].bytes, d[i].others_mean, d[i].excess);
        shown++;
    }
    fputs("]},\"timeline\":[", out);
    for (size_t s = 0; s < nsteps; s++) {
        fprintf(out, "%s\n {\"step\":%" PRId64 ",\"peak_allocated\":[", s ? "," : "", steps[s]);
        for (size_t i = 0; i < n; i++) {
            const rk_rank *r = &rs[i];
            size_t k = 0;
            for (; k < r->nsteps && r->steps[k].step != steps[s]; k++) {
            }
            if (k < r->nsteps)
                fprintf(out, "%s%" PRIu64, i ? "," : "", r->steps[k].peak_allocated);
            else
                fprintf(out, "%snull", i ? "," : "");
        }
        fputs("]}", out);
    }
    fputs("\n]}\n", out);
}

static void text_out(FILE *out, const rk_rank *rs, size_t n, size_t top, const rk_diff *d,
                     size_t nd, size_t ntop, const int64_t *steps, size_t nsteps, int file_order)
{
    char a[32], b[32], c[32];
    fprintf(out, "gpumem report: %zu rank%s%s\n\n", n, n == 1 ? "" : "s",
            file_order ? " (ranks in the order of the files: the databases carry no meta.rank)"
                       : "");
    fprintf(out, "  %-6s %15s %15s %6s  %-32s %14s  %s\n", "rank", "peak allocated",
            "peak reserved", "step", "where (NVTX) at the peak", "leaked", "database");
    for (size_t i = 0; i < n; i++) {
        const rk_rank *r = &rs[i];
        gm_fmt_bytes(r->peak_allocated, a, sizeof a), gm_fmt_bytes(r->peak_reserved, b, sizeof b);
        gm_fmt_bytes(r->leaked_bytes, c, sizeof c);
        char step[24], leak[48];
        if (r->peak_step >= 0)
            snprintf(step, sizeof step, "%" PRId64, r->peak_step);
        else
            snprintf(step, sizeof step, "-");
        snprintf(leak, sizeof leak, "%s in %" PRIu64, c, r->leaked_count);
        fprintf(out, "  %-4" PRId64 "%s %15s %15s %6s  %-32.32s %14s  %s%s\n", r->rank,
                i == top ? " *" : "  ", a, b, step, r->peak_phase[0] ? r->peak_phase : "-", leak,
                r->path, r->complete ? "" : " (not closed)");
    }
    /* a rank cut short: its "leaked" is what it held then */
    for (size_t i = 0; i < n; i++)
        if (rs[i].ending) fprintf(out, "  note: rank %" PRId64 " (%s): %s\n", rs[i].rank, rs[i].path, rs[i].ending);
    /* a rank with memory on several devices: its figures are one device's, said */
    for (size_t i = 0; i < n; i++)
        if (rs[i].device >= 0)
            fprintf(out, "  note: rank %" PRId64 " (%s) held memory on %d devices (%d to %d): its peaks, step, phase, "
                         "timeline and leaks are device %d's (%s), not a sum; gpumem report %s gives "
                         "each device's peaks\n",
                    rs[i].rank, rs[i].path, rs[i].ndevices, rs[i].dev_lo, rs[i].dev_hi, rs[i].device,
                    rs[i].device_why, rs[i].path);
    /* the peaks above are the device's (PyTorch's segments, its cache included); a PyTorch
     * program's own figure is its allocator's */
    int torch = 0;
    for (size_t i = 0; i < n; i++)
        torch |= rs[i].torch_peak_allocated != 0;
    for (size_t i = 0, said = 0; i < n; i++) /* --device N where PyTorch held nothing: none of its figures */
        if (rs[i].torch_absent[0]) fprintf(out, "%s  rank %" PRId64 ": %s\n", said++ ? "" : "\n", rs[i].rank, rs[i].torch_absent);
    if (torch) {
        fputs("\nPyTorch's own peak allocated (max_memory_allocated; leaked: its tensors alive at the end, "
              "its cached segments are not leaks):", out);
        for (size_t i = 0; i < n; i++) {
            const rk_rank *r = &rs[i];
            if (!r->torch_peak_allocated && !r->torch_whole_run) continue;
            gm_fmt_bytes(r->torch_peak_allocated, a, sizeof a);
            fprintf(out, "%s rank %" PRId64 " %s", i ? "," : "", r->rank, a);
            if (r->torch_device >= 0) fprintf(out, " (device %d's)", r->torch_device);
            if (r->torch_reset.count) { /* max_memory_allocated(d) counts from the reset */
                gm_fmt_bytes(r->torch_whole_run, b, sizeof b);
                fprintf(out, " since its reset_peak_memory_stats at event %" PRIu64 " (whole run %s)", r->torch_reset.seq,
                        b);
            }
        }
        fputc('\n', out);
    }
    uint64_t mx = 0, mn = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        if (rs[i].peak_allocated > mx) mx = rs[i].peak_allocated;
        if (rs[i].peak_allocated < mn) mn = rs[i].peak_allocated;
    }
    gm_fmt_bytes(mx - mn, a, sizeof a);
    fprintf(out, "\nImbalance (peak allocated): largest / smallest %.3fx, spread %s\n",
            mn ? (double)mx / (double)mn : 0.0, a);
    const rk_rank *t = &rs[top];
    gm_fmt_bytes(t->peak_allocated, a, sizeof a);
    fprintf(out, "\nRank %" PRId64 " sets the job's peak: %s allocated", t->rank, a);
    if (t->peak_step >= 0) fprintf(out, " in step %" PRId64, t->peak_step);
    if (t->peak_phase[0]) fprintf(out, " (%s)", t->peak_phase);
    fputs(".\n", out);
    if (n > 1 && mx == mn)
        fputs("Every rank peaks at the same bytes: no rank holds more than the others.\n", out);
    else if (n > 1) {
        gm_fmt_bytes((uint64_t)peak_difference(rs, n, top), a, sizeof a);
        fprintf(out,
                "What it holds at its peak that the others do not (against the mean of the other "
                "ranks at\n"
                "their peaks: %s more in all), largest differences:\n",
                a);
        size_t shown = 0;
        for (size_t i = 0; i < nd && shown < ntop; i++) {
            if (d[i].excess <= 0) break;
            gm_fmt_bytes((uint64_t)d[i].excess, a, sizeof a), gm_fmt_bytes(d[i].bytes, b, sizeof b);
            gm_fmt_bytes((uint64_t)d[i].others_mean, c, sizeof c);
            fprintf(out, "  +%-12s %-40s %-9s  rank %" PRId64 ": %s, others: %s\n", a, d[i].cls,
                    d[i].phase, t->rank, b, c);
            shown++;
        }
        if (!shown) fputs("  nothing: every class is as large on another rank\n", out);
    }
    if (nsteps) {
        /* a long run: at most about 40 rows, the last step always (--json has every one) */
        size_t stride = (nsteps + 39) / 40;
        fputs("\nTimeline: peak allocated per step", out);
        if (stride > 1) fprintf(out, " (one step in %zu, and the last; --json has all)", stride);
        fputs("\n  step  ", out);
        for (size_t i = 0; i < n; i++)
            fprintf(out, " %12s%-" PRId64 "", "rank ", rs[i].rank);
        fputc('\n', out);
        for (size_t s = 0; s < nsteps; s++) {
            if (s % stride && s + 1 < nsteps) continue;
            fprintf(out, "  %-5" PRId64 " ", steps[s]);
            for (size_t i = 0; i < n; i++) {
                const rk_rank *r = &rs[i];
                size_t k = 0;
                for (; k < r->nsteps && r->steps[k].step != steps[s]; k++) {
                }
                if (k < r->nsteps)
                    gm_fmt_bytes(r->steps[k].peak_allocated, a, sizeof a);
                else
                    snprintf(a, sizeof a, "-");
                fprintf(out, " %13s", a);
            }
            fputc('\n', out);
        }
    }
    fputs("\nLeaks per rank (alive at the end, requested bytes):", out);
    for (size_t i = 0; i < n; i++) {
        gm_fmt_bytes(rs[i].leaked_bytes, a, sizeof a);
        fprintf(out, "%s rank %" PRId64 " %s in %" PRIu64, i ? "," : "", rs[i].rank, a,
                rs[i].leaked_count);
    }
    fputs("\n", out);
}

/* ---------------------------------------------------------------- the command */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The databases to merge: their paths, and whether each came from a directory (then one that
 * is not a rank of the job is left out, where one named on the command line is refused). */
typedef struct rk_paths {
    char **p;
    unsigned char *from_dir;
    size_t n, cap;
} rk_paths;

static int add_path(rk_paths *ps, char *p, int from_dir)
{
    if (!p) return -1;
    if (ps->n == ps->cap) {
        size_t nc = ps->cap ? 2 * ps->cap : 16;
        char **np = realloc(ps->p, nc * sizeof *np);
        if (np) ps->p = np;
        unsigned char *nf = np ? realloc(ps->from_dir, nc) : NULL;
        if (!np || !nf) {
            free(p);
            return -1;
        }
        ps->from_dir = nf, ps->cap = nc;
    }
    ps->from_dir[ps->n] = (unsigned char)from_dir;
    ps->p[ps->n++] = p;
    return 0;
}

/* The databases of a directory: its *.db files, in name order. */
static int dir_dbs(const char *dir, rk_paths *ps)
{
    DIR *dh = opendir(dir);
    if (!dh) return -1;
    struct dirent *e;
    size_t first = ps->n;
    while ((e = readdir(dh))) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 3, ".db") || e->d_name[0] == '.') continue;
        size_t sz = strlen(dir) + l + 2;
        char *p = malloc(sz);
        if (p) snprintf(p, sz, "%s/%s", dir, e->d_name);
        if (add_path(ps, p, 1) != 0) break;
    }
    closedir(dh);
    gm_sort(ps->p + first, ps->n - first, sizeof *ps->p, cmp_str);
    return 0;
}

int gm_ranks_main(int argc, char **argv)
{
    int json = 0, npos = 0, dirs = 0, lossy_ok = 0, frames_all = 0, device = -1;
    int ntop = 5;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] != '-' || !argv[i][1])
            npos++, dirs += is_dir(argv[i]);
        else if ((!strcmp(argv[i], "--top") || !strcmp(argv[i], "--frames") || !strcmp(argv[i], "--device")) &&
                 gm_opt_peek(argc, argv, i))
            i++;
    }
    if (npos < 2 && !dirs) return -1; /* one database: the single report */
    rk_paths ps = {0};
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "--lossy-ok"))
            lossy_ok = 1;
        else if (!strcmp(a, "--top")) {
            rc = gm_arg_top("report", gm_opt_peek(argc, argv, i), &ntop);
            i++;
        } else if (!strcmp(a, "--frames") || !strncmp(a, "--frames=", 9)) {
            /* the call sites of unnamed allocations, as the single report reads them */
            const char *v = a[8] == '=' ? a + 9 : gm_opt_value(argc, argv, &i);
            if (v && !strcmp(v, "all")) frames_all = 1;
            else if (v && !strcmp(v, "user")) frames_all = 0;
            else rc = gm_usage("report", "--frames takes user or all, got '%s'", v ? v : "");
        } else if (!strncmp(a, "--top=", 6)) {
            rc = gm_arg_top("report", a + 6, &ntop);
        } else if (gm_opt_is_device(a)) {
            rc = gm_arg_device("report", argc, argv, &i, &device);
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr,
                    "gpumem report: '%s' is not an option of the merged report of several ranks "
                    "(--json, --top N, --frames user|all, --device N, --lossy-ok)\n",
                    a);
            rc = GM_EXIT_USAGE;
        } else if (is_dir(a)) {
            size_t before = ps.n;
            if (dir_dbs(a, &ps) != 0) {
                fprintf(stderr, "gpumem: cannot read the directory %s\n", a);
                rc = GM_EXIT_BADDB;
            } else if (ps.n == before) {
                fprintf(stderr, "gpumem: %s has no *.db file: give the ranks' databases\n", a);
                rc = GM_EXIT_BADDB;
            }
        } else if (add_path(&ps, strdup(a), 0) != 0) {
            rc = GM_EXIT_BADDB;
        }
    }
    if (!rc && gm_args_same_file("report", (const char *const *)ps.p, ps.n)) rc = GM_EXIT_USAGE;
    char **paths = ps.p;
    size_t n = ps.n;
    rk_rank *rs = rc ? NULL : calloc(n + 1, sizeof *rs);
    if (!rc && !rs) rc = GM_EXIT_BADDB;
    for (size_t i = 0; !rc && i < n; i++) {
        rc = rank_load(paths[i], i, &rs[i], lossy_ok, frames_all, device, json ? stderr : stdout);
    }
    /* Ranks of one job: when some databases carry meta.rank (a launcher's), one without it, or
     * of another world size, is not one of them (a demo recording left in the directory): left
     * out of a directory with a line saying so, refused when named on the command line. */
    if (!rc) {
        int64_t ws = -1;
        int any_rank = 0;
        for (size_t i = 0; i < n; i++)
            if (rs[i].meta_rank >= 0) {
                any_rank = 1;
                if (ws < 0) ws = rs[i].world_size;
            }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            int other = any_rank && (rs[i].meta_rank < 0 || (ws >= 0 && rs[i].world_size >= 0 && rs[i].world_size != ws));
            if (!other) {
                rs[k++] = rs[i];
                continue;
            }
            char why[96];
            if (rs[i].meta_rank < 0) snprintf(why, sizeof why, "it carries no meta.rank");
            else snprintf(why, sizeof why, "it is rank %" PRId64 " of %" PRId64 " ranks, the others of %" PRId64,
                          rs[i].meta_rank, rs[i].world_size, ws);
            if (ps.from_dir[i]) {
                fprintf(stderr, "gpumem report: left out %s: %s, so it is not a rank of the job the others "
                                "recorded\n", rs[i].path, why);
            } else {
                fprintf(stderr, "gpumem report: %s is not a rank of the job the others recorded (%s): leave "
                                "it out\n", rs[i].path, why);
                rc = GM_EXIT_USAGE;
            }
            rank_free(&rs[i]);
        }
        if (!rc && k == 0) {
            fprintf(stderr, "gpumem report: no rank left to merge\n");
            rc = GM_EXIT_BADDB;
        }
        for (size_t i = k; i < n; i++) memset(&rs[i], 0, sizeof rs[i]);
        n = k;
    }
    int file_order = 0;
    if (!rc) {
        /* ranks from meta.rank when every database has a distinct one, else the files' order */
        int all = 1;
        for (size_t i = 0; i < n && all; i++) {
            all = rs[i].meta_rank >= 0;
            for (size_t j = 0; j < i && all; j++)
                all = rs[j].meta_rank != rs[i].meta_rank;
        }
        for (size_t i = 0; i < n; i++) {
            rs[i].rank = all ? rs[i].meta_rank : (int64_t)i;
            if (!all) rs[i].meta_rank = -1;
        }
        file_order = !all;
        gm_sort(rs, n, sizeof *rs, cmp_rank);
        size_t top = 0;
        for (size_t i = 1; i < n; i++)
            if (rs[i].peak_allocated > rs[top].peak_allocated) top = i;
        size_t nd = 0;
        rk_diff *d = peak_diffs(rs, n, top, &nd);
        /* the step numbers of every rank, in order */
        size_t ns = 0;
        for (size_t i = 0; i < n; i++)
            ns += rs[i].nsteps;
        int64_t *steps = malloc((ns + 1) * sizeof *steps);
        size_t k = 0;
        for (size_t i = 0; steps && i < n; i++)
            for (size_t j = 0; j < rs[i].nsteps; j++)
                steps[k++] = rs[i].steps[j].step;
        if (!d || !steps)
            rc = GM_EXIT_BADDB, fprintf(stderr, "gpumem: out of memory\n");
        else {
            for (size_t i = 1; i < k; i++) /* insertion sort: steps are few */
                for (size_t j = i; j > 0 && steps[j - 1] > steps[j]; j--) {
                    int64_t t = steps[j];
                    steps[j] = steps[j - 1], steps[j - 1] = t;
                }
            size_t u = 0;
            for (size_t i = 0; i < k; i++)
                if (!u || steps[u - 1] != steps[i]) steps[u++] = steps[i];
            if (json)
                json_out(stdout, rs, n, top, d, nd, (size_t)ntop, steps, u);
            else
                text_out(stdout, rs, n, top, d, nd, (size_t)ntop, steps, u, file_order);
        }
        free(d), free(steps);
    }
    for (size_t i = 0; rs && i < ps.n; i++)
        rank_free(&rs[i]);
    free(rs);
    for (size_t i = 0; i < ps.n; i++)
        free(ps.p[i]);
    free(ps.p);
    free(ps.from_dir);
    return rc;
}
