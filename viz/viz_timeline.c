/* viz_timeline.c — the data behind the page's memory-over-time chart.
 *
 * A recording can hold tens of millions of events; the page gets at most VIZ_BUCKETS buckets of
 * consecutive seqs (about one per pixel), each with what a pixel column needs:
 *   - allocated bytes as a min..max band, requested and reserved bytes as their max;
 *   - the moment allocated was highest in the bucket ("at"), and there allocated split by phase
 *     (forward / backward / optimizer / other, as `gpumem advise` names NVTX ranges) and by tensor
 *     class (the VIZ_TOP_CLASSES largest at the peak, then "other"): the stacked areas reach the
 *     band's top exactly;
 *   - the VIZ_LIVE_TOP largest allocations live at that moment (name, bytes, call site, birth and
 *     death), so a click anywhere shows what was live there without shipping every allocation.
 *
 * One merge of three sorted streams: births (the model's allocations are in birth order),
 * deaths (sorted here) and, when the recording has them, the allocator's segment map / unmap
 * events (reserved, as gpumem report sweeps it). The top-K per bucket is offline: allocations
 * largest first, each added to the buckets whose moment it is live at and that are not full yet;
 * full buckets are skipped with a union-find "next bucket not full", so the cost is a sort plus
 * K entries per bucket, never buckets x allocations. */
#include <stdlib.h>
#include <string.h>

#include "snapshot/analyze/gm_advise.h"
#include "snapshot/read/utf8.h"
#include "snapshot/record/bytemap.h"
#include "viz/viz.h"

#define VIZ_BUCKETS 2000
#define VIZ_LIVE_TOP 8
#define VIZ_LAYERS (VIZ_TOP_CLASSES + 1)
#define VIZ_PHASES 4 /* index = ADV_PH_* */

static const char *const phase_label[VIZ_PHASES] = {"other", "forward", "backward", "optimizer"};

void viz_json_str(FILE *o, const char *s)
{
    fputc('"', o);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(o, "\\%c", *p);
        else if (*p == '<')
            fputs("\\u003c", o); /* never close the <script> early */
        else if (*p < 0x20)
            fprintf(o, "\\u%04x", *p);
        else if (*p < 0x80)
            fputc(*p, o);
        else {
            /* a name is the program's bytes: UTF-8 kept, any other byte U+FFFD */
            int n = gm_utf8_len(p);
            if (n) {
                fwrite(p, 1, (size_t)n, o);
                p += n - 1;
            } else
                fputs("\\ufffd", o);
        }
    }
    fputc('"', o);
}

static int live_at(const gm_alloc *a, uint64_t seq)
{
    return a->birth <= seq && (!a->death || a->death > seq);
}

/* ---------------------------------------------------------------- tensor classes */

static void class_of(const gm_model *m, const gm_alloc *a, char *out, size_t outsz)
{
    if (a->name) {
        adv_name_class(gm_str(m, a->name), out, outsz);
        return;
    }
    long fi = gm_stack_site(m, a->stack);
    if (fi >= 0) gm_sym_frame(m, fi);
    const char *fn = fi >= 0 ? m->frames[fi].function : NULL;
    /* a C++ frame (PyTorch's allocator's) named as the report names it, not by its symbol */
    char *dm = gm_readable_function(fn);
    snprintf(out, outsz, fn ? "(unnamed) in %s" : "(unnamed)", dm ? dm : fn);
    free(dm);
}

typedef struct cls_rank {
    uint64_t peak, total;
    size_t k;
} cls_rank;
static int rank_cmp(const void *x, const void *y, void *names)
{
    const cls_rank *a = x, *b = y;
    if (a->peak != b->peak) return a->peak < b->peak ? 1 : -1;
    if (a->total != b->total) return a->total < b->total ? 1 : -1;
    return strcmp(((char **)names)[a->k], ((char **)names)[b->k]);
}

int viz_classes_build(const gm_model *m, viz_classes *c)
{
    memset(c, 0, sizeof *c);
    u64map by_name = {0}, by_stack = {0};
    bytemap by_str = {0}; /* a class's text, by its bytes -> its index */
    cls_rank *rk = NULL;
    size_t cap = 0;
    int rc = -1;
    c->of = malloc(sizeof *c->of * (m->nallocs + 1));
    if (!c->of) goto out;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        c->of[i] = UINT32_MAX;
        if (!viz_is_device(a)) continue;
        u64map *by = a->name ? &by_name : &by_stack;
        uint64_t key = a->name ? a->name : a->stack;
        uint64_t *hit = u64map_get(by, key);
        size_t k;
        if (hit) {
            k = (size_t)*hit;
        } else {
            char buf[512];
            class_of(m, a, buf, sizeof buf);
            uint64_t *same = bytemap_get_str(&by_str, buf);
            if (same) {
                k = (size_t)*same;
            } else {
                if (c->n == cap) {
                    size_t nc = cap ? cap * 2 : 64;
                    char **nn = realloc(c->names, nc * sizeof *nn);
                    cls_rank *nr = nn ? realloc(rk, nc * sizeof *nr) : NULL;
                    if (nn) c->names = nn;
                    if (!nr) goto out;
                    rk = nr, cap = nc;
                }
                if (!(c->names[c->n] = strdup(buf))) goto out;
                rk[c->n] = (cls_rank){0, 0, c->n};
                k = c->n++;
                if (bytemap_put_str(&by_str, buf, k)) goto out;
            }
            if (u64map_put(by, key, k)) goto out;
        }
        c->of[i] = (uint32_t)k;
        rk[k].total += a->size;
        if (live_at(a, m->peak_allocated_seq)) rk[k].peak += a->size;
    }
    if (c->n) {
        qsort_r(rk, c->n, sizeof *rk, rank_cmp, c->names);
        uint32_t *rank_of = malloc(sizeof *rank_of * c->n);
        char **sorted = malloc(sizeof *sorted * c->n);
        if (!rank_of || !sorted) {
            free(rank_of), free(sorted);
            goto out;
        }
        for (size_t r = 0; r < c->n; r++)
            rank_of[rk[r].k] = (uint32_t)r, sorted[r] = c->names[rk[r].k];
        for (size_t i = 0; i < m->nallocs; i++)
            if (c->of[i] != UINT32_MAX) c->of[i] = rank_of[c->of[i]];
        free(c->names);
        c->names = sorted;
        free(rank_of);
    }
    rc = 0;
out:
    u64map_free(&by_name), u64map_free(&by_stack), bytemap_free(&by_str);
    free(rk);
    if (rc) viz_classes_free(c);
    return rc;
}

void viz_classes_free(viz_classes *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->names[i]);
    free(c->names), free(c->of);
    memset(c, 0, sizeof *c);
}

/* ---------------------------------------------------------------- the sweep */

/* (key, allocation) pairs, sorted by key with an LSD radix sort (stable: equal keys keep the
 * allocations' birth order). Millions of them: qsort alone took about a second here. */
typedef viz_kv kv;
int viz_radix_sort(viz_kv *v, size_t n, uint64_t maxkey)
{
    kv *tmp = malloc(sizeof *tmp * (n + 1));
    if (!tmp) return -1;
    size_t cnt[2048];
    for (unsigned shift = 0; shift < 64 && (maxkey >> shift); shift += 11) {
        memset(cnt, 0, sizeof cnt);
        for (size_t i = 0; i < n; i++)
            cnt[(v[i].key >> shift) & 2047]++;
        for (size_t d = 0, sum = 0; d < 2048; d++) {
            size_t c = cnt[d];
            cnt[d] = sum, sum += c;
        }
        for (size_t i = 0; i < n; i++)
            tmp[cnt[(v[i].key >> shift) & 2047]++] = v[i];
        memcpy(v, tmp, sizeof *v * n);
    }
    free(tmp);
    return 0;
}
typedef struct res_ev {
    uint64_t seq;
    int64_t delta;
} res_ev;

typedef struct bucket {
    uint64_t seq, at; /* first seq of the bucket; the moment allocated was highest */
    int64_t amin, amax, rqmax, rsmax;
    uint32_t at_range;
    int64_t phase[VIZ_PHASES], cls[VIZ_LAYERS], cat[VIZ_NCATS];
    uint32_t live[VIZ_LIVE_TOP];
    uint32_t nlive;
} bucket;

static int res_ev_cmp(const void *a, const void *b)
{
    uint64_t x = ((const res_ev *)a)->seq, y = ((const res_ev *)b)->seq;
    return x < y ? -1 : x > y;
}

/* Reserved changes (segment map / unmap, driver alloc / free; an allocation passed through as
 * its own segment, from its birth to its death), as gm_model_load sweeps them. */
static res_ev *load_reserved(gm_db *d, const gm_model *m, size_t *n)
{
    sqlite3_stmt *s;
    res_ev *v = NULL;
    size_t nv = 0, cap = 0;
    *n = 0;
    if (sqlite3_prepare_v2(
            d->db, "SELECT seq, kind, size FROM events WHERE kind IN (14, 15, 18, 19) ORDER BY seq",
            -1, &s, NULL) != SQLITE_OK)
        return NULL;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (nv == cap) {
            size_t nc = cap ? cap * 2 : 1024;
            res_ev *nn = realloc(v, nc * sizeof *nn);
            if (!nn) break;
            v = nn, cap = nc;
        }
        int kind = sqlite3_column_int(s, 1);
        int64_t sz = sqlite3_column_int64(s, 2);
        v[nv++] =
            (res_ev){(uint64_t)sqlite3_column_int64(s, 0), kind == 14 || kind == 18 ? sz : -sz};
    }
    sqlite3_finalize(s);
    size_t nseg = nv;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (!(a->flags & GM_ALLOC_OWN_SEGMENT)) continue;
        for (int end = 0; end < (a->death ? 2 : 1); end++) {
            if (nv == cap) {
                size_t nc = cap ? cap * 2 : 1024;
                res_ev *nn = realloc(v, nc * sizeof *nn);
                if (!nn) break;
                v = nn, cap = nc;
            }
            v[nv++] = (res_ev){end ? a->death : a->birth, end ? -(int64_t)a->size : (int64_t)a->size};
        }
    }
    if (nv > nseg) qsort(v, nv, sizeof *v, res_ev_cmp);
    *n = nv;
    return v;
}

static size_t uf_find(uint32_t *next, size_t j)
{
    size_t r = j;
    while (next[r] != r)
        r = next[r];
    while (next[j] != r) { /* path compression */
        size_t up = next[j];
        next[j] = (uint32_t)r;
        j = up;
    }
    return r;
}

/* Fills each bucket's live[] with its VIZ_LIVE_TOP largest allocations live at its moment. */
static int fill_live(const gm_model *m, bucket *b, size_t nb)
{
    size_t n = 0;
    kv *v = malloc(sizeof *v * (m->nallocs + 1));
    uint32_t *next = malloc(sizeof *next * (nb + 1));
    uint64_t maxsize = 0;
    if (!v || !next) {
        free(v), free(next);
        return -1;
    }
    /* only allocations live at some bucket's moment can be listed: one pass in birth order
     * (moments are in order too) leaves out the short-lived rest before the sort */
    for (size_t i = 0, p = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (!viz_is_device(a)) continue;
        while (p < nb && b[p].at < a->birth)
            p++;
        if (p == nb) break;
        if (a->death && b[p].at >= a->death) continue;
        v[n++] = (kv){a->size, (uint32_t)i};
        if (a->size > maxsize) maxsize = a->size;
    }
    for (size_t i = 0; i < n; i++) /* largest first; ties: oldest first */
        v[i].key = maxsize - v[i].key;
    if (viz_radix_sort(v, n, maxsize)) {
        free(v), free(next);
        return -1;
    }
    for (size_t j = 0; j <= nb; j++)
        next[j] = (uint32_t)j; /* next[nb]: past the end */
    for (size_t i = 0; i < n && uf_find(next, 0) < nb; i++) {
        const gm_alloc *a = &m->allocs[v[i].a];
        size_t lo = 0, hi = nb; /* first bucket whose moment is at or after the birth */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (b[mid].at < a->birth)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t j = uf_find(next, lo); j < nb && (!a->death || b[j].at < a->death);
             j = uf_find(next, j + 1)) {
            b[j].live[b[j].nlive++] = v[i].a;
            if (b[j].nlive == VIZ_LIVE_TOP) next[j] = (uint32_t)(j + 1);
        }
    }
    free(v), free(next);
    return 0;
}

static void write_values(FILE *o, const int64_t *v, size_t n)
{
    fputc('[', o);
    for (size_t k = 0; k < n; k++)
        fprintf(o, "%s%lld", k ? "," : "", (long long)v[k]);
    fputc(']', o);
}

void viz_focus_of(const gm_model *m, viz_focus *f)
{
    uint64_t lo = m->max_seq ? 1 : 0, hi = m->max_seq ? m->max_seq : 1;
    f->first_seq = lo, f->last_seq = hi, f->step = -1;
    size_t n = m->nsteps, k = 0;
    if (!n) return;
    while (k < n && m->steps[k].end_seq < m->peak_allocated_seq)
        k++;
    /* step k runs from the end of step k-1 (+1) to its end; past the last step: to the end */
    f->step = k < n ? (long)k : -1;
    f->first_seq = k >= 2 ? m->steps[k - 2].end_seq + 1 : lo;
    f->last_seq = k + 1 < n ? m->steps[k + 1].end_seq : hi;
}

int viz_write_timeline(FILE *o, gm_db *d, const gm_model *m, const viz_classes *c,
                       const viz_categories *k, viz_tensors *t)
{
    size_t nd = 0, nr = 0, nb = 0;
    kv *dv = malloc(sizeof *dv * (m->nallocs + 1));
    const uint8_t *phase = k->phase;
    bucket *b = calloc(VIZ_BUCKETS + 1, sizeof *b);
    res_ev *rv = m->have_segments ? load_reserved(d, m, &nr) : NULL;
    viz_ilist paths = {0};
    int rc = -1;
    if (!dv || !b) goto out;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (viz_is_device(a) && a->death) dv[nd++] = (kv){a->death, (uint32_t)i};
    }
    if (viz_radix_sort(dv, nd, m->max_seq)) goto out;

    uint64_t lo = m->max_seq ? 1 : 0, hi = m->max_seq ? m->max_seq : 1;
    double width = (double)(hi - lo + 1) / VIZ_BUCKETS;
    if (width < 1) width = 1;
    int64_t cur = 0, rq = 0, rs = 0, ph[VIZ_PHASES] = {0}, cl[VIZ_LAYERS] = {0},
            ct[VIZ_NCATS] = {0};
    uint64_t last_seq = 0;
    uint32_t last_range = 0;
    size_t bi = 0, di = 0, ri = 0; /* next birth (m->allocs), death, reserved change */
    long cb = -1;
    bucket *B = NULL;
    /* The layers at a bucket's highest moment: copied when that moment is over (at the next
     * death, or the bucket's end), not at each new high: a ramp of births is one copy. */
    int pending = 0;
#define TAKE_LAYERS()                                                                              \
    do {                                                                                           \
        memcpy(B->phase, ph, sizeof ph), memcpy(B->cls, cl, sizeof cl);                            \
        memcpy(B->cat, ct, sizeof ct);                                                             \
        pending = 0;                                                                               \
    } while (0)
    for (;;) {
        while (bi < m->nallocs && !viz_is_device(&m->allocs[bi]))
            bi++;
        uint64_t sb = bi < m->nallocs ? m->allocs[bi].birth : UINT64_MAX;
        uint64_t sd = di < nd ? dv[di].key : UINT64_MAX;
        uint64_t sr = ri < nr ? rv[ri].seq : UINT64_MAX;
        uint64_t seq = sd <= sb ? sd : sb; /* a death at a birth's seq ends the old one first */
        if (sr < seq) seq = sr;
        if (seq == UINT64_MAX) break;
        long bk = (long)((double)(seq - lo) / width);
        if (bk >= VIZ_BUCKETS) bk = VIZ_BUCKETS - 1;
        if (bk != cb) {
            if (pending) TAKE_LAYERS();
            cb = bk;
            B = &b[nb++];
            B->seq = lo + (uint64_t)((double)bk * width);
            B->at = last_seq, B->at_range = last_range;
            B->amin = B->amax = cur, B->rqmax = rq;
            B->rsmax = m->have_segments ? rs : cur;
            memcpy(B->phase, ph, sizeof ph), memcpy(B->cls, cl, sizeof cl);
            memcpy(B->cat, ct, sizeof ct);
        }
        if (sr == seq) {
            rs += rv[ri++].delta;
            if (rs < 0) rs = 0;
        } else {
            int born = sd != seq;
            if (!born && pending) TAKE_LAYERS();
            uint32_t ai = born ? (uint32_t)bi++ : dv[di++].a;
            const gm_alloc *a = &m->allocs[ai];
            int64_t sgn = born ? 1 : -1;
            cur += sgn * (int64_t)a->size;
            rq += sgn * (int64_t)a->requested;
            ph[phase[ai]] += sgn * (int64_t)a->size;
            cl[c->of[ai] < VIZ_TOP_CLASSES ? c->of[ai] : VIZ_TOP_CLASSES] += sgn * (int64_t)a->size;
            ct[k->cat[ai]] += sgn * (int64_t)a->size;
            if (born) last_range = a->range;
        }
        last_seq = seq;
        if (cur < B->amin) B->amin = cur;
        if (cur > B->amax) {
            B->amax = cur, B->at = seq, B->at_range = last_range;
            pending = 1;
        }
        if (rq > B->rqmax) B->rqmax = rq;
        int64_t r = m->have_segments ? rs : cur;
        if (r > B->rsmax) B->rsmax = r;
    }
    if (pending) TAKE_LAYERS();
#undef TAKE_LAYERS
    if (fill_live(m, b, nb)) goto out;

    /* the time of each bucket's moment (ns since the first event): one lookup per bucket */
    sqlite3_stmt *ts = NULL;
    sqlite3_prepare_v2(d->db, "SELECT t FROM events WHERE seq = ?", -1, &ts, NULL);
    fprintf(o,
            "\"timeline\":{\"first_seq\":%llu,\"last_seq\":%llu,\"have_reserved\":%s,\"buckets\":[",
            (unsigned long long)lo, (unsigned long long)hi, m->have_segments ? "true" : "false");
    for (size_t j = 0; j < nb; j++) {
        int64_t t = -1;
        if (ts && b[j].at) {
            sqlite3_reset(ts);
            sqlite3_bind_int64(ts, 1, (int64_t)b[j].at);
            if (sqlite3_step(ts) == SQLITE_ROW)
                t = sqlite3_column_int64(ts, 0) - (int64_t)m->first_t;
        }
        long pi = viz_ilist_add(&paths, b[j].at_range);
        fprintf(o, "%s[%llu,%lld,%lld,%lld,%lld,%llu,%lld,%ld]", j ? "," : "",
                (unsigned long long)b[j].seq, (long long)b[j].amin, (long long)b[j].amax,
                (long long)b[j].rqmax, (long long)b[j].rsmax, (unsigned long long)b[j].at,
                (long long)t, pi);
    }
    sqlite3_finalize(ts);
    fputs("],\"paths\":[", o);
    for (size_t k = 0; k < paths.n; k++) {
        const gm_range *r = paths.keys[k] ? gm_range_of(m, (uint32_t)paths.keys[k]) : NULL;
        if (k) fputc(',', o);
        viz_json_str(o, r && r->path ? r->path : "");
    }
    fputs("],\"steps\":[", o);
    for (size_t i = 0; i < m->nsteps; i++)
        fprintf(o, "%s[%lld,%llu]", i ? "," : "", (long long)m->steps[i].step,
                (unsigned long long)m->steps[i].end_seq);
    viz_focus f;
    viz_focus_of(m, &f);
    fprintf(o, "],\"focus\":{\"first_seq\":%llu,\"last_seq\":%llu,\"step\":%ld}",
            (unsigned long long)f.first_seq, (unsigned long long)f.last_seq, f.step);
    fputs(",\"stack\":{\"phase\":{\"names\":[", o);
    for (int k = 0; k < VIZ_PHASES; k++)
        fprintf(o, "%s\"%s\"", k ? "," : "", phase_label[k]);
    fputs("],\"v\":[", o);
    for (size_t j = 0; j < nb; j++) {
        if (j) fputc(',', o);
        write_values(o, b[j].phase, VIZ_PHASES);
    }
    fputs("]},\"class\":{\"names\":[", o);
    size_t ncl = c->n < VIZ_TOP_CLASSES ? c->n : VIZ_TOP_CLASSES;
    for (size_t k = 0; k < ncl; k++) {
        if (k) fputc(',', o);
        viz_json_str(o, c->names[k]);
    }
    if (c->n > VIZ_TOP_CLASSES) fputs(",\"other\"", o);
    fputs("],\"v\":[", o);
    for (size_t j = 0; j < nb; j++) {
        if (j) fputc(',', o);
        write_values(o, b[j].cls, c->n > VIZ_TOP_CLASSES ? VIZ_LAYERS : ncl);
    }
    fputs("]},\"category\":{\"names\":[", o);
    for (int q = 0; q < VIZ_NCATS; q++)
        fprintf(o, "%s\"%s\"", q ? "," : "", viz_cat_name[q]);
    fputs("],\"v\":[", o);
    for (size_t j = 0; j < nb; j++) {
        if (j) fputc(',', o);
        write_values(o, b[j].cat, VIZ_NCATS);
    }
    fputs("]}},\"live\":[", o);
    for (size_t j = 0; j < nb; j++) {
        fputs(j ? ",[" : "[", o);
        for (uint32_t q = 0, w = 0; q < b[j].nlive; q++) {
            long ti = viz_tensor_ref(t, b[j].live[q]);
            if (ti >= 0) fprintf(o, "%s%ld", w++ ? "," : "", ti);
        }
        fputc(']', o);
    }
    fputs("],", o);
    if (viz_write_bands(o, m, &f, t)) goto out;
    fputc('}', o);
    rc = 0;
out:
    free(dv), free(b), free(rv);
    viz_ilist_free(&paths);
    return rc;
}

/* ---------------------------------------------------------------- one rank's lane */

int viz_write_lane(FILE *o, gm_db *d, const gm_model *m)
{
    size_t nd = 0, nr = 0, nb = 0;
    kv *dv = malloc(sizeof *dv * (m->nallocs + 1));
    res_ev *rv = m->have_segments ? load_reserved(d, m, &nr) : NULL;
    int64_t(*b)[3] = calloc(VIZ_LANE_BUCKETS + 1, sizeof *b); /* first seq, allocated, reserved */
    int rc = -1;
    if (!dv || !b) goto out;
    for (size_t i = 0; i < m->nallocs; i++)
        if (viz_is_device(&m->allocs[i]) && m->allocs[i].death)
            dv[nd++] = (kv){m->allocs[i].death, (uint32_t)i};
    if (viz_radix_sort(dv, nd, m->max_seq)) goto out;
    uint64_t lo = m->max_seq ? 1 : 0, hi = m->max_seq ? m->max_seq : 1;
    double width = (double)(hi - lo + 1) / VIZ_LANE_BUCKETS;
    if (width < 1) width = 1;
    int64_t cur = 0, rs = 0;
    size_t bi = 0, di = 0, ri = 0;
    long cb = -1;
    for (;;) { /* the timeline's sweep, keeping only the maxima */
        while (bi < m->nallocs && !viz_is_device(&m->allocs[bi]))
            bi++;
        uint64_t sb = bi < m->nallocs ? m->allocs[bi].birth : UINT64_MAX;
        uint64_t sd = di < nd ? dv[di].key : UINT64_MAX;
        uint64_t sr = ri < nr ? rv[ri].seq : UINT64_MAX;
        uint64_t seq = sd <= sb ? sd : sb;
        if (sr < seq) seq = sr;
        if (seq == UINT64_MAX) break;
        long bk = (long)((double)(seq - lo) / width);
        if (bk >= VIZ_LANE_BUCKETS) bk = VIZ_LANE_BUCKETS - 1;
        if (bk != cb) {
            cb = bk;
            nb++;
            b[nb - 1][0] = (int64_t)(lo + (uint64_t)((double)bk * width));
            b[nb - 1][1] = cur, b[nb - 1][2] = m->have_segments ? rs : cur;
        }
        if (sr == seq) {
            rs += rv[ri++].delta;
            if (rs < 0) rs = 0;
        } else if (sd != seq) {
            cur += (int64_t)m->allocs[bi++].size;
        } else {
            cur -= (int64_t)m->allocs[dv[di++].a].size;
        }
        if (cur > b[nb - 1][1]) b[nb - 1][1] = cur;
        int64_t r = m->have_segments ? rs : cur;
        if (r > b[nb - 1][2]) b[nb - 1][2] = r;
    }
    fprintf(o, "{\"first_seq\":%llu,\"last_seq\":%llu,\"buckets\":[", (unsigned long long)lo,
            (unsigned long long)hi);
    for (size_t j = 0; j < nb; j++)
        fprintf(o, "%s[%lld,%lld,%lld]", j ? "," : "", (long long)b[j][0], (long long)b[j][1],
                (long long)b[j][2]);
    fputs("],\"steps\":[", o);
    for (size_t i = 0; i < m->nsteps; i++)
        fprintf(o, "%s[%lld,%llu]", i ? "," : "", (long long)m->steps[i].step,
                (unsigned long long)m->steps[i].end_seq);
    fputs("]}", o);
    rc = 0;
out:
    free(dv), free(rv), free(b);
    return rc;
}
