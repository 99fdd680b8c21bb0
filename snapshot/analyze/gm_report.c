/* gm_report.c — the printers behind `gpumem report` and `gpumem leaks` (text and JSON).
 *
 * Everything here works on the in-memory model from gm_analyze.c: a set of allocations is
 * chosen by a filter over the allocation array (live at the peak, at an OOM, at exit), then
 * grouped by a string key (call site, phase) with one sort — O(n log n) in the set, never a
 * query per row.
 */
#include "snapshot/analyze/gm_report.h"
#include "snapshot/analyze/gm_category.h"
#include "snapshot/read/gm_devused.h"
#include "snapshot/record/rec.h"
#include "snapshot/record/u64map.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- grouping */

typedef struct group {
    const char *key;
    const char *phase; /* NVTX phase of the group's allocations (leaks), NULL: not shown */
    int mixed;         /* the allocations come from more than one phase */
    uint64_t bytes, count;
    size_t sample; /* an allocation of the group (for its stack) */
} group;

static int cmp_key(const void *a, const void *b) {
    const group *x = a, *y = b;
    return strcmp(x->key, y->key);
}
static int cmp_bytes(const void *a, const void *b) {
    const group *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return strcmp(x->key, y->key);
}

/* Sorts by key, merges equal keys, sorts by bytes (descending). Returns the group count. */
static size_t merge_groups(group *g, size_t n) {
    if (!n) return 0;
    gm_sort(g, n, sizeof *g, cmp_key);
    size_t o = 0;
    for (size_t i = 1; i < n; i++) {
        if (strcmp(g[i].key, g[o].key) == 0) {
            g[o].bytes += g[i].bytes;
            g[o].count += g[i].count;
            if (g[o].phase && g[i].phase && (g[i].mixed || strcmp(g[o].phase, g[i].phase) != 0))
                g[o].mixed = 1;
        } else {
            g[++o] = g[i];
        }
    }
    gm_sort(g, o + 1, sizeof *g, cmp_bytes);
    return o + 1;
}

/* Per-stack call-site strings and per-range phase strings, computed once. */
typedef struct labels {
    u64map names;     /* string id -> char * with digit runs as '*' */
    char **site;      /* by stack index */
    long *site_frame; /* by stack index */
    char **phase;     /* by range index; "step N" normalized to "step *" when asked */
    char **op;        /* by range index: the innermost op range at or around it (op_of) */
} labels;

static void normalize_steps(char *p) {
    /* "step 12" -> "step *": the same phase is grouped across steps */
    for (char *s = p; (s = strcasestr(s, "step")) != NULL;) {
        char *q = s + 4;
        while (*q == ' ' || *q == '_' || *q == '-' || *q == '#') q++;
        char *digits = q;
        while (*q >= '0' && *q <= '9') q++;
        if (q > digits && (*q == 0 || *q == '/')) {
            *digits = '*';
            memmove(digits + 1, q, strlen(q) + 1);
            s = digits + 1;
        } else {
            s = s + 4;
        }
    }
}

/* "aten::addmm, seq = 12, sizes = [...]" -> "aten::addmm": PyTorch's emit_nvtx() numbers every
 * op range; without this each call of an op would be a phase of its own */
static void strip_op_seq(char *p) {
    for (char *s = p; (s = strstr(s, ", seq = ")) != NULL || (s = strstr(p, ", stashed seq = ")) != NULL;) {
        char *e = strchr(s, '/');
        memmove(s, e ? e : s + strlen(s), strlen(e ? e : s + strlen(s)) + 1);
    }
}

static void labels_make(const gm_model *m, labels *l, int norm_steps) {
    memset(l, 0, sizeof *l);
    l->site = calloc(m->nstacks + 1, sizeof *l->site);
    l->site_frame = calloc(m->nstacks + 1, sizeof *l->site_frame);
    l->phase = calloc(m->nranges + 1, sizeof *l->phase);
    for (size_t i = 0; i < m->nranges && l->phase; i++) {
        l->phase[i] = strdup(m->ranges[i].path ? m->ranges[i].path : "?");
        if (norm_steps && l->phase[i]) normalize_steps(l->phase[i]), strip_op_seq(l->phase[i]);
    }
}

static void labels_free(const gm_model *m, labels *l) {
    for (uint64_t i = 0; l->names.keys && i <= l->names.mask; i++)
        if (l->names.keys[i] != U64MAP_EMPTY) free((void *)(uintptr_t)l->names.vals[i]);
    u64map_free(&l->names);
    for (size_t i = 0; l->site && i <= m->nstacks; i++) free(l->site[i]);
    for (size_t i = 0; l->phase && i < m->nranges; i++) free(l->phase[i]);
    for (size_t i = 0; l->op && i < m->nranges; i++) free(l->op[i]);
    free(l->site), free(l->site_frame), free(l->phase), free(l->op);
}

static const char *site_of(const gm_model *m, labels *l, uint32_t stack, long *frame) {
    uint64_t *si = stack ? u64map_get(&m->stack_idx, stack) : NULL;
    if (!si || !l->site) {
        if (frame) *frame = -1;
        return stack                ? "(stack not recorded)"
               : m->is_torch_view ? "(no Python frame: made by PyTorch's C++, e.g. autograd's backward)"
                                  : "(no stack: GPUMEM_STACKS=0)";
    }
    if (!l->site[*si]) {
        char buf[2048];
        l->site_frame[*si] = gm_site_desc(m, stack, buf, sizeof buf);
        l->site[*si] = strdup(buf);
    }
    if (frame) *frame = l->site_frame[*si];
    return l->site[*si] ? l->site[*si] : "?";
}

/* "adam.m.h11.fc_w" -> "adam.m.h*.fc_w": the same tensor of every layer in one row */
static const char *name_of(const gm_model *m, labels *l, uint32_t name) {
    uint64_t *v = name ? u64map_get(&l->names, name) : NULL;
    if (v) return (const char *)(uintptr_t)*v;
    const char *s = name ? gm_str(m, name) : NULL;
    if (!s || !*s) return "(unnamed)"; /* an empty name (NVTX's region names can be) names nothing */
    char *n = malloc(strlen(s) + 1), *o = n;
    if (!n) return "(unnamed)";
    for (const char *p = s; *p;) {
        if (*p >= '0' && *p <= '9') {
            *o++ = '*';
            while (*p >= '0' && *p <= '9') p++;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    if (u64map_put(&l->names, name, (uint64_t)(uintptr_t)n) != 0) {
        free(n);
        return "(unnamed)";
    }
    return n;
}

static const char *phase_of(const gm_model *m, labels *l, uint32_t range) {
    uint64_t *ri = range ? u64map_get(&m->range_idx, range) : NULL;
    if (!ri || !l->phase || !l->phase[*ri]) return "(outside any NVTX range)";
    return l->phase[*ri];
}

/* "By op": the innermost range that names an operator, as PyTorch's emit_nvtx() pushes one per
 * op ("aten::addmm, seq = 12, sizes = [...]"; backward "AddmmBackward0, seq = 12"): a name with
 * "::" or ", seq = " in it. The label is the name up to its first ", " (one row per op, not per
 * call). A range's own name is its path less its parent's path and the '/'. */
static const char *range_name(const gm_model *m, const gm_range *r) {
    const gm_range *p = r->parent ? gm_range_of(m, (uint64_t)r->parent) : NULL;
    size_t pl = p && p->path ? strlen(p->path) : 0;
    if (!r->path) return NULL;
    if (pl && strncmp(r->path, p->path, pl) == 0 && r->path[pl] == '/') return r->path + pl + 1;
    return r->path;
}

static const char *op_of(const gm_model *m, labels *l, uint32_t range) {
    uint64_t *ri = range ? u64map_get(&m->range_idx, range) : NULL;
    if (!ri) return "(no op)";
    if (!l->op) l->op = calloc(m->nranges + 1, sizeof *l->op);
    if (!l->op) return "(no op)";
    if (!l->op[*ri]) {
        const char *found = NULL;
        const gm_range *r = &m->ranges[*ri];
        for (int hops = 0; r && hops < 4096 && !found; hops++) {
            const char *n = range_name(m, r);
            if (n && (strstr(n, "::") || strstr(n, ", seq = "))) found = n;
            r = r->parent ? gm_range_of(m, (uint64_t)r->parent) : NULL;
        }
        const char *end = found ? strstr(found, ", ") : NULL;
        l->op[*ri] = found ? strndup(found, end ? (size_t)(end - found) : strlen(found)) : strdup("(no op)");
    }
    return l->op[*ri] ? l->op[*ri] : "(no op)";
}

static int live_at(const gm_alloc *a, uint64_t at) {
    return a->birth <= at && (a->death == 0 || a->death > at) && a->kind != REC_HOST_ALLOC &&
           a->kind != REC_MANAGED_ALLOC;
}
static int alive_at_end(const gm_alloc *a) { return a->death == 0; }

/* A set of allocations (indices into m->allocs, in array order), chosen by one pass over the
 * array: the groupings of one report (by site, phase, name, op) walk the set, not the array,
 * which on a long recording is millions of allocations for a few hundred live. */
typedef struct alloc_set {
    size_t *idx;
    size_t n;
} alloc_set;

enum { SET_LIVE_AT, SET_ALIVE_AT_END };

/* The allocations born at or before seq: the model's are in birth order (its sweep's), which is
 * the order of the numbers where no seq is negative (the first birth says; a rowid can be
 * negative, the recorder's never are), so a search finds where they end; else all of them. */
static size_t born_by(const gm_model *m, uint64_t seq) {
    if (!m->nallocs || (int64_t)m->allocs[0].birth < 0) return m->nallocs;
    size_t lo = 0, hi = m->nallocs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->allocs[mid].birth <= seq) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* The allocations live at `at` among the first n (those born by then) from the deaths after it
 * (the model's list, from its nearest mark) and those never freed, put in index order: where
 * they are far fewer than n (a late moment in a long recording) a pass over the n allocations'
 * 56 bytes each would read memory for nothing. 0, or -1 where the model cannot say so or they
 * are not few (the caller passes over the allocations). */
static int select_live_by_deaths(const gm_model *m, uint64_t at, size_t n, alloc_set *s) {
    size_t j, after;
    if (!m->alive_known || gm_first_death_after(m, at, &j, &after) != 0 || after + m->nalive > n / 8) return -1;
    size_t cap = after + m->nalive;
    s->idx = cap ? malloc(cap * sizeof *s->idx) : NULL;
    if (cap && !s->idx) return -1;
    s->n = 0;
    for (; j && s->n < cap; j = m->allocs[j - 1].next_death)
        if (j - 1 < n && live_at(&m->allocs[j - 1], at)) s->idx[s->n++] = j - 1;
    for (size_t k = 0; k < m->nalive && m->alive[k] < n && s->n < cap; k++)
        if (live_at(&m->allocs[m->alive[k]], at)) s->idx[s->n++] = m->alive[k];
    if (s->n) gm_sort(s->idx, s->n, sizeof *s->idx, cmp_size);
    return 0;
}

static alloc_set select_allocs(const gm_model *m, int which, uint64_t at) {
    alloc_set s = {NULL, 0};
    size_t cap = 0;
    if (which == SET_ALIVE_AT_END && m->alive_known && (!m->nalive || (s.idx = malloc(m->nalive * sizeof *s.idx)))) {
        for (; s.n < m->nalive; s.n++) /* the model keeps them */
            s.idx[s.n] = m->alive[s.n];
        return s;
    }
    /* what is live at `at` was born by then: the pass stops there (a stream through every
     * allocation's 56 bytes, a peak early in a long recording leaves most of them unread) */
    size_t n = which == SET_LIVE_AT ? born_by(m, at) : m->nallocs;
    if (which == SET_LIVE_AT && select_live_by_deaths(m, at, n, &s) == 0) return s;
    for (size_t i = 0; i < n; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (which == SET_LIVE_AT ? !live_at(a, at) : !alive_at_end(a)) continue;
        if (s.n == cap) {
            size_t c = cap ? cap * 2 : 256;
            size_t *n = realloc(s.idx, c * sizeof *n);
            if (!n) break;
            s.idx = n, cap = c;
        }
        s.idx[s.n++] = i;
    }
    return s;
}

enum { BY_PHASE = 0, BY_SITE = 1, BY_NAME = 2, BY_OP = 3, BY_MASK = 3,
       G_REQUESTED = 4, /* count requested bytes (what the program asked for), not held */
       G_PHASE = 8 };   /* keep each group's phase (shown with it) */

/* Builds groups by site, phase or name (by_site: BY_* | G_* flags) of the allocations of set. */
static size_t group_allocs(const gm_model *m, labels *l, const alloc_set *set, int by_site,
                           group **out, uint64_t *total, uint64_t *count) {
    int flags = by_site;
    by_site &= BY_MASK;
    group *g = set->n ? malloc(set->n * sizeof *g) : NULL;
    size_t n = 0;
    *total = *count = 0;
    for (size_t k = 0; g && k < set->n; k++) {
        size_t i = set->idx[k];
        const gm_alloc *a = &m->allocs[i];
        g[n].key = by_site == BY_SITE   ? site_of(m, l, a->stack, NULL)
                   : by_site == BY_NAME ? name_of(m, l, a->name)
                   : by_site == BY_OP   ? op_of(m, l, a->range)
                                        : phase_of(m, l, a->range);
        g[n].phase = flags & G_PHASE ? phase_of(m, l, a->range) : NULL;
        g[n].mixed = 0;
        g[n].bytes = flags & G_REQUESTED ? a->requested : a->size;
        g[n].count = 1;
        g[n].sample = i;
        *total += g[n].bytes;
        n++;
        (*count)++;
    }
    *out = g;
    return merge_groups(g, n);
}

static double pct(uint64_t a, uint64_t b) { return b ? 100.0 * (double)a / (double)b : 0.0; }

static void print_groups_text(FILE *out, const char *title, group *g, size_t n, int top,
                              uint64_t total) {
    fprintf(out, "  %s\n", title);
    if (n == 0) fprintf(out, "    (nothing)\n");
    for (size_t i = 0; i < n && (int)i < top; i++) {
        char b[32];
        gm_fmt_bytes(g[i].bytes, b, sizeof b);
        fprintf(out, "    %12s %6.1f%%  %8" PRIu64 "x  %s", b, pct(g[i].bytes, total), g[i].count,
                g[i].key);
        if (g[i].phase) fprintf(out, "  [phase %s%s]", g[i].phase, g[i].mixed ? " and others" : "");
        fputc('\n', out);
    }
    if (n > (size_t)top) fprintf(out, "    ... %zu more (use --top N)\n", n - (size_t)top);
}

static void print_groups_json(FILE *out, const char *name, group *g, size_t n, int top,
                              uint64_t total, const char *keyname) {
    fprintf(out, "\"%s\":[", name);
    for (size_t i = 0; i < n && (int)i < top; i++) {
        fprintf(out, "%s{\"%s\":", i ? "," : "", keyname);
        gm_json_str(out, g[i].key);
        if (g[i].phase) {
            fputs(",\"phase\":", out);
            gm_json_str(out, g[i].phase);
            fprintf(out, ",\"phase_mixed\":%s", g[i].mixed ? "true" : "false");
        }
        fprintf(out, ",\"bytes\":%" PRIu64 ",\"count\":%" PRIu64 ",\"share\":%.4f}", g[i].bytes,
                g[i].count, total ? (double)g[i].bytes / (double)total : 0.0);
    }
    fputc(']', out);
}

/* ---------------------------------------------------------------- idle at the peak */

/* A tensor class (name, digits as *) or call site among the allocations live at the peak,
 * with the median gaps of its allocations: the median over those that have a use before the
 * peak (after it), the lower one for an even count, with that allocation's kernel. The median,
 * not the minimum: the same activation of twelve layers has twelve gaps, and the shortest (the
 * last layer's) would hide the eleven that are worth offloading. */
typedef struct idle_group {
    const char *key;
    uint64_t bytes, count, never, not_again;
    int has_since, has_until;
    uint64_t since_ns, until_ns;
    uint64_t since_seq, until_seq; /* the median allocation's last use before / first use after */
    /* the events (rows of `events`) after the last use up to the peak event, after the peak up to
     * the next use: idle_count_events, for the groups printed; -1 where the count could not be
     * read (a damaged file). Not the difference of the seqs: a launch's argument words take seqs
     * of their own (rec_launch), and names have theirs, with no row in `events`. */
    int64_t since_ev, until_ev;
    uint32_t last_kernel, next_kernel;
} idle_group;

typedef struct idle_key { const char *key; size_t rec; } idle_key;
typedef struct idle_gap { uint64_t gap; size_t rec; } idle_gap;

static int cmp_idle_key(const void *a, const void *b) {
    const idle_key *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->rec > y->rec) - (x->rec < y->rec);
}
static int cmp_idle_gap(const void *a, const void *b) {
    const idle_gap *x = a, *y = b;
    if (x->gap != y->gap) return x->gap < y->gap ? -1 : 1;
    return (x->rec > y->rec) - (x->rec < y->rec);
}
static int cmp_idle_group(const void *a, const void *b) {
    const idle_group *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return strcmp(x->key, y->key);
}

static size_t idle_groups(const gm_model *m, labels *l, const gm_idle *g, int by, idle_group **out) {
    *out = NULL;
    idle_key *k = malloc((g->nallocs ? g->nallocs : 1) * sizeof *k);
    idle_gap *gs = malloc((g->nallocs ? g->nallocs : 1) * sizeof *gs);
    idle_group *gr = calloc(g->nallocs ? g->nallocs : 1, sizeof *gr);
    if (!k || !gs || !gr) {
        free(k), free(gs), free(gr);
        return 0;
    }
    for (size_t i = 0; i < g->nallocs; i++) {
        const gm_alloc *a = &m->allocs[g->allocs[i].alloc];
        k[i].key = by == BY_SITE ? site_of(m, l, a->stack, NULL) : name_of(m, l, a->name);
        k[i].rec = i;
    }
    gm_sort(k, g->nallocs, sizeof *k, cmp_idle_key);
    size_t n = 0;
    for (size_t i = 0; i < g->nallocs;) {
        size_t e = i;
        while (e < g->nallocs && strcmp(k[e].key, k[i].key) == 0) e++;
        idle_group *x = &gr[n++];
        x->key = k[i].key;
        for (int side = 0; side < 2; side++) {
            size_t ng = 0;
            for (size_t j = i; j < e; j++) {
                const gm_idle_alloc *ia = &g->allocs[k[j].rec];
                if (side == 0 && ia->last_seq)
                    gs[ng++] = (idle_gap){g->peak_t > ia->last_t ? g->peak_t - ia->last_t : 0, k[j].rec};
                if (side == 1 && ia->next_seq)
                    gs[ng++] = (idle_gap){ia->next_t > g->peak_t ? ia->next_t - g->peak_t : 0, k[j].rec};
            }
            if (!ng) continue;
            gm_sort(gs, ng, sizeof *gs, cmp_idle_gap);
            const idle_gap *med = &gs[(ng - 1) / 2];
            const gm_idle_alloc *ia = &g->allocs[med->rec];
            if (side == 0) {
                x->has_since = 1, x->since_ns = med->gap, x->last_kernel = ia->last_kernel;
                x->since_seq = ia->last_seq;
            } else {
                x->has_until = 1, x->until_ns = med->gap, x->next_kernel = ia->next_kernel;
                x->until_seq = ia->next_seq;
            }
        }
        for (size_t j = i; j < e; j++) {
            const gm_idle_alloc *ia = &g->allocs[k[j].rec];
            x->bytes += m->allocs[ia->alloc].size;
            x->count++;
            x->never += ia->nuses == 0;
            x->not_again += ia->nuses && ia->last_seq && !ia->next_seq;
        }
        i = e;
    }
    gm_sort(gr, n, sizeof *gr, cmp_idle_group);
    free(k), free(gs);
    *out = gr;
    return n;
}

/* The events between each of the first `top` groups' median uses and the peak event (lo, hi]:
 * one count over a range of `events`' rowids each (the primary key, so a walk of that range's
 * leaves, for the few groups printed, not a pass over the table). */
static void idle_count_events(gm_db *d, uint64_t peak_seq, idle_group *gr, size_t n, int top) {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(d->db, "SELECT count(*) FROM events WHERE seq > ?1 AND seq <= ?2", -1, &s, NULL) != SQLITE_OK)
        s = NULL;
    for (size_t i = 0; i < n && (int)i < top; i++) {
        for (int side = 0; side < 2; side++) {
            int has = side == 0 ? gr[i].has_since : gr[i].has_until;
            uint64_t lo = side == 0 ? gr[i].since_seq : peak_seq, hi = side == 0 ? peak_seq : gr[i].until_seq;
            int64_t c = -1;
            if (has && s) {
                sqlite3_bind_int64(s, 1, (int64_t)lo);
                sqlite3_bind_int64(s, 2, (int64_t)hi);
                if (sqlite3_step(s) == SQLITE_ROW) c = sqlite3_column_int64(s, 0);
                sqlite3_reset(s);
            }
            *(side == 0 ? &gr[i].since_ev : &gr[i].until_ev) = c;
        }
    }
    sqlite3_finalize(s);
}

/* two steps the leaks section prints alike (one line for both) */
static int same_step_figures(const void *ctx, size_t i, size_t j) {
    const gm_step *a = &((const gm_model *)ctx)->steps[i], *b = &((const gm_model *)ctx)->steps[j];
    return a->end_allocated == b->end_allocated && a->leaked == b->leaked;
}

static const char *idle_off_hint(int state) {
    return state == GM_USES_EMPTY
               ? "access tracking was on but recorded no uses: no kernel, copy or memset pointed into "
                 "a live allocation"
               : "access tracking was off: record with GPUMEM_USES=1 (GPUMEM_USES=timed adds device "
                 "times) to see how long the memory live at the peak sat unused";
}

/* One side of an idle group in JSON (the last use before the peak, or the first after): its
 * gap in ns and in events (null where not counted), the use's seq and kernel; all null without
 * one. */
static void idle_side_json(FILE *out, const gm_model *m, gm_demangler *dm, const char *gap, const char *seqkey,
                           const char *kernelkey, int has, uint64_t ns, int64_t ev, uint64_t seq, uint32_t kernel) {
    if (has) fprintf(out, ",\"%s_ns\":%" PRIu64 ",\"%s_events\":", gap, ns, gap);
    else fprintf(out, ",\"%s_ns\":null,\"%s_events\":", gap, gap);
    if (has && ev >= 0) fprintf(out, "%" PRId64, ev);
    else fputs("null", out);
    if (has) fprintf(out, ",\"%s\":%" PRIu64, seqkey, seq);
    else fprintf(out, ",\"%s\":null", seqkey);
    fprintf(out, ",\"%s\":", kernelkey);
    gm_json_str(out, has ? gm_demangle_id(dm, m, kernel) : NULL);
}

static void print_idle_groups_json(FILE *out, const gm_model *m, gm_demangler *dm, const char *name,
                                   const char *keyname, const idle_group *gr, size_t n, int top) {
    fprintf(out, "\"%s\":[", name);
    for (size_t i = 0; i < n && (int)i < top; i++) {
        const idle_group *x = &gr[i];
        fprintf(out, "%s{\"%s\":", i ? "," : "", keyname);
        gm_json_str(out, x->key);
        fprintf(out, ",\"count\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"never_used\":%" PRIu64
                     ",\"not_used_again\":%" PRIu64, x->count, x->bytes, x->never, x->not_again);
        idle_side_json(out, m, dm, "since_last_use", "last_use_seq", "last_kernel", x->has_since, x->since_ns,
                       x->since_ev, x->since_seq, x->last_kernel);
        idle_side_json(out, m, dm, "until_next_use", "next_use_seq", "next_kernel", x->has_until, x->until_ns,
                       x->until_ev, x->until_seq, x->next_kernel);
        fputc('}', out);
    }
    fputc(']', out);
}

static void print_idle_groups_text(FILE *out, const gm_model *m, gm_demangler *dm, const char *title,
                                   const idle_group *gr, size_t n, int top, uint64_t total, int unknown) {
    fprintf(out, "  %s\n", title);
    for (size_t i = 0; i < n && (int)i < top; i++) {
        const idle_group *x = &gr[i];
        char b[32], t[32];
        gm_fmt_bytes(x->bytes, b, sizeof b);
        fprintf(out, "    %12s %6.1f%%  %8" PRIu64 "x  %s", b, pct(x->bytes, total), x->count, x->key);
        if (x->never) fprintf(out, "  (%" PRIu64 " %s)", x->never, unknown ? "without a recorded use" : "never used");
        fputc('\n', out);
        if (x->has_since) {
            gm_fmt_ns(x->since_ns, t, sizeof t);
            if (x->since_ev >= 0)
                fprintf(out, "        last use %s / %" PRId64 " event%s before: %s\n", t, x->since_ev,
                        x->since_ev == 1 ? "" : "s", gm_demangle_id(dm, m, x->last_kernel));
            else /* the events table could not be counted there (damaged): the time alone */
                fprintf(out, "        last use %s before: %s\n", t, gm_demangle_id(dm, m, x->last_kernel));
        } else {
            fprintf(out, "        last use: none before the peak\n");
        }
        if (x->has_until) {
            gm_fmt_ns(x->until_ns, t, sizeof t);
            if (x->until_ev >= 0)
                fprintf(out, "        next use %s / %" PRId64 " event%s after: %s\n", t, x->until_ev,
                        x->until_ev == 1 ? "" : "s", gm_demangle_id(dm, m, x->next_kernel));
            else
                fprintf(out, "        next use %s after: %s\n", t, gm_demangle_id(dm, m, x->next_kernel));
        } else {
            fprintf(out, "        next use: none (not used again before its death or the end)\n");
        }
    }
    if (n > (size_t)top) fprintf(out, "    ... %zu more (use --top N)\n", n - (size_t)top);
}

/* The "Idle at the peak" section, text or JSON (a member "idle_at_peak" of the report). */
static void print_idle(gm_db *d, const gm_model *m, labels *l, const gm_opts *o, FILE *out) {
    gm_idle g;
    char err[8192];
    int ok = gm_idle_at_peak(d, m, &g, err, sizeof err) == 0;
    char unote[768];
    int64_t unread, lost, unknown = gm_uses_unknown(d, &unread, &lost, unote, sizeof unote);
    if (!ok || g.state != GM_USES_ON) {
        /* no uses rows, but launches whose arguments were unreadable or lost: unknown, not "none" */
        int none_read = ok && g.state == GM_USES_EMPTY && unknown > 0;
        const char *hint = !ok ? err : none_read ? unote : idle_off_hint(g.state);
        if (o->json) {
            fprintf(out, "\"idle_at_peak\":{\"uses\":false,\"tracking\":\"%s\",\"hint\":",
                    !ok ? "error" : none_read ? "unread" : g.state == GM_USES_EMPTY ? "empty" : "off");
            gm_json_str(out, hint);
            fputc('}', out);
        } else {
            fprintf(out, "\nIdle at the peak\n  %s%s\n", hint,
                    none_read ? "; no launch gpumem could read touched a live allocation" : "");
        }
        gm_idle_free(&g);
        return;
    }
    gm_demangler dm = {0};
    idle_group *gc = NULL, *gsite = NULL;
    size_t nc = idle_groups(m, l, &g, BY_NAME, &gc);
    size_t nsite = idle_groups(m, l, &g, BY_SITE, &gsite);
    idle_count_events(d, g.peak_seq, gc, nc, o->top);
    idle_count_events(d, g.peak_seq, gsite, nsite, o->top);
    int named = nc > 1 || (nc == 1 && strcmp(gc[0].key, "(unnamed)") != 0);
    /* launches whose argument words the full ring dropped have no uses rows: the tensors they
     * touched look idle longer than they were */
    if (o->json) {
        fprintf(out, "\"idle_at_peak\":{\"uses\":true,\"tracking\":");
        gm_json_str(out, g.mode);
        fprintf(out, ",\"launch_words_lost\":%" PRId64 ",\"launches_unread\":%" PRId64, lost, unread);
        fprintf(out, ",\"peak_seq\":%" PRIu64 ",\"peak_t_ns\":%" PRIu64 ",\"bytes_live\":%" PRIu64
                     ",\"count_live\":%zu,\"bytes_never_used\":%" PRIu64 ",\"count_never_used\":%" PRIu64
                     ",\"bytes_not_used_before\":%" PRIu64 ",\"count_not_used_before\":%" PRIu64
                     ",\"bytes_not_used_again\":%" PRIu64 ",\"count_not_used_again\":%" PRIu64 ",\"buckets\":[",
                g.peak_seq, g.peak_t, g.bytes_live, g.nallocs, g.never_bytes, g.never_count, g.not_before_bytes,
                g.not_before_count, g.not_again_bytes, g.not_again_count);
        for (int b = 0; b < GM_IDLE_NBUCKETS; b++) {
            fprintf(out, "%s{\"gap\":\"%s\",\"max_ns\":", b ? "," : "", gm_idle_bucket_name[b]);
            if (b < GM_IDLE_TIMED - 1) fprintf(out, "%" PRIu64, gm_idle_bucket_max_ns[b]);
            else fputs("null", out);
            fprintf(out, ",\"since_bytes\":%" PRIu64 ",\"since_count\":%" PRIu64 ",\"until_bytes\":%" PRIu64
                         ",\"until_count\":%" PRIu64 "}",
                    g.since_bytes[b], g.since_count[b], g.until_bytes[b], g.until_count[b]);
        }
        fputs("],", out);
        print_idle_groups_json(out, m, &dm, "classes", "name", gc, named ? nc : 0, o->top);
        fputc(',', out);
        print_idle_groups_json(out, m, &dm, "sites", "site", gsite, nsite, o->top);
        fputc('}', out);
    } else {
        char a[32], b1[32], b2[32], t[32];
        gm_fmt_bytes(g.bytes_live, a, sizeof a);
        gm_fmt_ns(g.peak_t, t, sizeof t);
        fprintf(out, "\nIdle at the peak: %s live in %zu allocations at event %" PRIu64 " (%s), by the time since "
                     "their last use and until their next one\n", a, g.nallocs, g.peak_seq, t);
        if (unknown > 0) fprintf(out, "  note: %s, so some gaps are longer than they were\n", unote);
        fprintf(out, "    %-10s %22s   %22s\n", "gap", "since last use", "until next use");
        for (int b = 0; b < GM_IDLE_NBUCKETS; b++) {
            gm_fmt_bytes(g.since_bytes[b], b1, sizeof b1);
            gm_fmt_bytes(g.until_bytes[b], b2, sizeof b2);
            fprintf(out, "    %-10s %12s %8" PRIu64 "x   %12s %8" PRIu64 "x\n", gm_idle_bucket_name[b], b1,
                    g.since_count[b], b2, g.until_count[b]);
        }
        gm_fmt_bytes(g.never_bytes, b1, sizeof b1);
        fprintf(out, "  never used              %12s in %" PRIu64 " allocation%s (%s)\n", b1, g.never_count,
                g.never_count == 1 ? "" : "s",
                unknown > 0 ? "no recorded use: see the note above" : "no kernel, copy or memset touched them");
        gm_fmt_bytes(g.not_before_bytes, b1, sizeof b1);
        fprintf(out, "  first used after peak   %12s in %" PRIu64 " allocation%s (allocated before they were needed)\n",
                b1, g.not_before_count, g.not_before_count == 1 ? "" : "s");
        gm_fmt_bytes(g.not_again_bytes, b1, sizeof b1);
        fprintf(out, "  not used again          %12s in %" PRIu64 " allocation%s (held until death or the end)\n",
                b1, g.not_again_count, g.not_again_count == 1 ? "" : "s");
        if (named)
            print_idle_groups_text(out, m, &dm, "by tensor name (digits as *; median gaps)", gc, nc, o->top, g.bytes_live,
                                   unknown > 0);
        print_idle_groups_text(out, m, &dm, "by call site (median gaps)", gsite, nsite, o->top, g.bytes_live,
                               unknown > 0);
    }
    free(gc), free(gsite);
    gm_demangler_free(&dm);
    gm_idle_free(&g);
}

/* ---------------------------------------------------------------- report */

typedef struct summary {
    uint64_t n_alloc, n_free, n_async, n_host, n_managed, n_oom, n_foreign, n_double;
    uint64_t n_interior; /* of n_foreign: a pointer inside a live allocation (REC_F_INTERIOR) */
    /* pinned host and managed memory, in none of the device's peaks: their bytes in all and the
     * most held at once (pinned memory is page-locked: a host OOM is read in these) */
    uint64_t host_bytes, host_peak, managed_bytes, managed_peak;
    uint64_t driver_calls;
    int driver_calls_counted;  /* 1: the allocator's own count per function (meta stat.driver.*);
                                  0: only the segment events (a killed or older recording) */
    char driver_by_fn[512];    /* "cuMemCreate 3, cuMemMap 3, ..." (most first), "" if unknown */
    double hit_rate; /* < 0: unknown */
    const char *hit_source;
    int64_t dropped, app_ns, writer_cpu_ns, db_bytes, stat_peak_reserved, stat_peak_allocated;
    double seconds;
} summary;

/* The summary's line for pinned host or managed memory (none: no line). */
/* "P at its peak, T in all (N allocations of IS": the held memory's figures, report's line and
 * gpumem record's closing summary's alike */
static void held_figures(FILE *out, const char *is, uint64_t n, uint64_t total, uint64_t peak)
{
    char t[32], p[32];
    gm_fmt_bytes(total, t, sizeof t);
    gm_fmt_bytes(peak, p, sizeof p);
    fprintf(out, "%s at its peak, %s in all (%" PRIu64 " allocations of %s", p, t, n, is);
}

/* the requested bytes and the count of v[0, n) (pinned host blocks: m->host_cache, m->host_held) */
static void host_totals(const gm_alloc *v, size_t n, uint64_t *bytes, uint64_t *blocks) {
    *bytes = 0, *blocks = n;
    for (size_t i = 0; i < n; i++) *bytes += v[i].requested;
}

/* Where the pinned host memory alive at the end was PyTorch's host cache (m->host_cache), the
 * summary says so, with what tensors still held: the cache is not the program's leak. */
static void host_end_line(FILE *out, const gm_model *m) {
    uint64_t cb, cn, hb, hn;
    host_totals(m->host_cache, m->nhost_cache, &cb, &cn);
    host_totals(m->host_held, m->nhost_held, &hb, &hn);
    uint64_t ub, un;
    host_totals(m->host_unknown, m->nhost_unknown, &ub, &un);
    if (un) {
        char u[32];
        gm_fmt_bytes(ub, u, sizeof u);
        fprintf(out, "  pinned at exit      %s in %" PRIu64 " block%s made by PyTorch, whose host cache gpumem's hooks did not "
                     "empty: blocks freed to it cannot be told from those still held (leaks counts them all)\n",
                u, un, un == 1 ? "" : "s");
    }
    if (!cn) return;
    char c[32], h[32];
    gm_fmt_bytes(cb, c, sizeof c);
    gm_fmt_bytes(hb, h, sizeof h);
    fprintf(out, "  pinned at exit      %s in %" PRIu64 " block%s were PyTorch's host cache (freed by the program, kept by "
                 "PyTorch until exit or torch._C._host_emptyCache(); not leaks), %s in %" PRIu64 " still held\n",
            c, cn, cn == 1 ? "" : "s", h, hn);
}

/* The blocks of view v (its allocations: PyTorch's tensors in its view, the device's otherwise)
 * flagged `flag`: copies into *out (malloc'ed; NULL when none or out of memory), their count
 * returned. */
static size_t view_flagged(const gm_model *v, unsigned flag, gm_alloc **out)
{
    size_t n = 0;
    *out = NULL;
    for (size_t i = 0; i < v->nallocs; i++)
        n += (v->allocs[i].flags & flag) != 0;
    if (!n || !(*out = malloc(n * sizeof **out))) return 0;
    n = 0;
    for (size_t i = 0; i < v->nallocs; i++)
        if (v->allocs[i].flags & flag) (*out)[n++] = v->allocs[i];
    return n;
}

/* Those gpumem's hooks freed at exit from PyTorch's cuBLAS and cuBLASLt workspaces
 * (GM_ALLOC_WORKSPACE). Not leaks: PyTorch keeps one per (handle, stream) for the process's life. */
static size_t view_workspaces(const gm_model *v, gm_alloc **ws) { return view_flagged(v, GM_ALLOC_WORKSPACE, ws); }

/* Those cuBLAS made for PyTorch's handles, alive at exit (GM_ALLOC_CUBLAS_HANDLE). Not leaks:
 * PyTorch never destroys its cuBLAS handles. */
static size_t view_cublas_handles(const gm_model *v, gm_alloc **hs) { return view_flagged(v, GM_ALLOC_CUBLAS_HANDLE, hs); }

/* Where PyTorch's cuBLAS workspaces were alive at the end (gpumem's hooks freed them at exit), or
 * cuBLAS's own blocks of PyTorch's handles (never freed), the summary says so: memory at exit
 * that is not the program's leak. */
static void flagged_end_line(FILE *out, const gm_model *v, unsigned flag, const char *label, const char *what)
{
    gm_alloc *fl;
    size_t n = view_flagged(v, flag, &fl);
    uint64_t b, k;
    host_totals(fl, n, &b, &k);
    free(fl);
    if (!k) return;
    char c[32];
    gm_fmt_bytes(b, c, sizeof c);
    fprintf(out, "  %-20s%s in %" PRIu64 " block%s were %s\n", label, c, k, k == 1 ? "" : "s", what);
}
static void workspace_end_line(FILE *out, const gm_model *m)
{
    gm_model v = gm_model_leak_view(m);
    flagged_end_line(out, &v, GM_ALLOC_WORKSPACE, "workspaces at exit",
                     "PyTorch's cuBLAS/cuBLASLt workspaces (one per handle and stream, kept by PyTorch until "
                     "exit or torch._C._cuda_clearCublasWorkspaces(); not leaks)");
    flagged_end_line(out, &v, GM_ALLOC_CUBLAS_HANDLE, "cuBLAS at exit",
                     "cuBLAS's own, made for PyTorch's cuBLAS handles (their default workspaces: PyTorch keeps "
                     "its handles for the process's life and has no call that frees them; not leaks)");
}

static void held_line(FILE *out, const char *what, const char *is, uint64_t n, uint64_t total, uint64_t peak)
{
    if (!n) return;
    fprintf(out, "  %-19s ", what);
    held_figures(out, is, n, total, peak);
    fputs(", in none of the peaks above)\n", out);
}

/* held_line's figures as a line of gpumem record's closing summary */
static void held_line_short(FILE *out, const char *what, const char *is, uint64_t n, uint64_t total, uint64_t peak)
{
    fprintf(out, "gpumem: %s ", what);
    held_figures(out, is, n, total, peak);
    fputs(")\n", out);
}

typedef struct held_step {
    uint64_t seq;
    int64_t bytes; /* + at a birth, - at a death */
} held_step;

static int held_cmp(const void *a, const void *b)
{
    const held_step *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The bytes of m's allocations of one kind (REC_HOST_ALLOC, REC_MANAGED_ALLOC) in all (*total)
 * and the most held at once (*peak): the running sum over their births and deaths. */
static void held_bytes(const gm_model *m, int kind, uint64_t count, uint64_t *total, uint64_t *peak)
{
    *total = *peak = 0;
    if (!count) return;
    held_step *h = malloc(2 * count * sizeof *h);
    size_t n = 0;
    for (size_t i = 0; i < m->nallocs && h; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (a->kind != kind || n + 2 > 2 * count) continue;
        *total += a->size;
        h[n++] = (held_step){a->birth, (int64_t)a->size};
        if (a->death) h[n++] = (held_step){a->death, -(int64_t)a->size};
    }
    if (!h) { /* out of memory: the most at once is unknown, at most all of it */
        *peak = *total;
        return;
    }
    qsort(h, n, sizeof *h, held_cmp);
    int64_t now = 0;
    for (size_t j = 0; j < n; j++)
        if ((now += h[j].bytes) > (int64_t)*peak) *peak = (uint64_t)now;
    free(h);
}

static void make_summary(gm_db *d, gm_model *m, summary *s) {
    memset(s, 0, sizeof *s);
    const uint64_t *k = m->count_kind;
    s->n_alloc = k[REC_ALLOC] + k[REC_ALLOC_ASYNC];
    s->n_async = k[REC_ALLOC_ASYNC];
    s->n_free = k[REC_FREE] + k[REC_FREE_ASYNC];
    s->n_host = k[REC_HOST_ALLOC];
    s->n_managed = k[REC_MANAGED_ALLOC];
    held_bytes(m, REC_HOST_ALLOC, s->n_host, &s->host_bytes, &s->host_peak);
    held_bytes(m, REC_MANAGED_ALLOC, s->n_managed, &s->managed_bytes, &s->managed_peak);
    s->n_oom = k[REC_OOM];
    s->n_foreign = k[REC_FOREIGN_FREE];
    s->n_double = k[REC_DOUBLE_FREE];
    s->n_interior = 0;
    sqlite3_stmt *iq;
    if (s->n_foreign &&
        sqlite3_prepare_v2(d->db, "SELECT count(*) FROM events WHERE kind = 9 AND flags & 256", -1,
                           &iq, NULL) == SQLITE_OK) {
        if (sqlite3_step(iq) == SQLITE_ROW) s->n_interior = (uint64_t)sqlite3_column_int64(iq, 0);
        sqlite3_finalize(iq);
    }
    /* the allocator's own count of every driver call, by function, written at exit; else (a
     * killed or older recording) the segment events, each of which stands for one or more
     * calls (a map is cuMemCreate + cuMemMap per handle, plus cuMemSetAccess) */
    s->driver_by_fn[0] = 0;
    int64_t counted = gm_meta_int(d, "stat.driver_calls", -1);
    s->driver_calls_counted = counted >= 0;
    if (counted >= 0) {
        s->driver_calls = (uint64_t)counted;
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(d->db, "SELECT substr(key, 13), CAST(value AS INTEGER) FROM meta WHERE "
                                      "key LIKE 'stat.driver.%' AND CAST(value AS INTEGER) > 0 "
                                      "ORDER BY CAST(value AS INTEGER) DESC, key", -1, &q, NULL) == SQLITE_OK) {
            size_t o = 0;
            while (sqlite3_step(q) == SQLITE_ROW && o < sizeof s->driver_by_fn - 64) {
                const unsigned char *fn = sqlite3_column_text(q, 0);
                int n = snprintf(s->driver_by_fn + o, sizeof s->driver_by_fn - o, "%s%s %lld", o ? ", " : "",
                                 fn ? (const char *)fn : "?", (long long)sqlite3_column_int64(q, 1));
                if (n > 0) o += (size_t)n;
            }
            sqlite3_finalize(q);
        }
    } else {
        s->driver_calls = k[REC_SEG_MAP] + k[REC_SEG_UNMAP] + k[REC_SEG_RESERVE] + k[REC_SEG_RELEASE] +
                          k[REC_DRIVER_ALLOC] + k[REC_DRIVER_FREE];
    }
    s->hit_rate = -1;
    if (m->cache_hits + m->cache_misses) {
        s->hit_rate = pct(m->cache_hits, m->cache_hits + m->cache_misses);
        s->hit_source = "events";
    } else {
        int64_t h = gm_meta_int(d, "stat.cache_hits", -1), mi = gm_meta_int(d, "stat.cache_misses", -1);
        if (h >= 0 && mi >= 0 && h + mi > 0) {
            s->hit_rate = pct((uint64_t)h, (uint64_t)(h + mi));
            s->hit_source = "allocator stats";
        }
    }
    s->dropped = gm_meta_int(d, "dropped_events", 0);
    s->app_ns = gm_meta_int(d, "app_ns_per_event", -1);
    s->writer_cpu_ns = gm_meta_int(d, "writer_cpu_ns", -1);
    s->stat_peak_reserved = gm_meta_int(d, "stat.peak_reserved", -1);
    s->stat_peak_allocated = gm_meta_int(d, "stat.peak_allocated", -1);
    struct stat st;
    /* the recording is the file and, until a checkpoint folds it in, its WAL */
    s->db_bytes = (stat(d->path, &st) == 0 ? st.st_size : 0) + gm_db_wal_bytes(d->path);
    s->seconds = (double)(m->last_t - m->first_t) / 1e9;
}

static void print_header(gm_db *d, gm_model *m, FILE *out, const char *what) {
    char cmd[512];
    gm_meta_text(d, "cmdline", cmd, sizeof cmd);
    fprintf(out, "gpumem %s: %s\n", what, d->path);
    fprintf(out, "  program   %s (pid %" PRId64 ")\n", cmd[0] ? cmd : "?", gm_meta_int(d, "pid", 0));
    if (strcmp(d->state, "failed") == 0) {
        int64_t lost = gm_meta_int(d, "dropped_events", 0), after = gm_meta_int(d, "failed_after_seq", 0);
        fprintf(out, "  note      the recording FAILED: %s. ", d->failure[0] ? d->failure : "unknown error");
        if (after > 0) fprintf(out, "Everything after event %" PRId64 " was lost", after);
        else fprintf(out, "It failed before its first commit: every event was lost");
        if (lost > 0) fprintf(out, " (%" PRId64 " events dropped)", lost);
        fprintf(out, "; the program itself ran on. This is what was committed, %" PRIu64
                     " events: record again where the database has room\n", m->events);
    } else if (strcmp(d->state, "interrupted") == 0) {
        char sig[96];
        gm_signal_name((int)gm_meta_int(d, "signal", 0), 1, sig, sizeof sig);
        fprintf(out, "  note      the program was ended by %s: the recording was closed then, so what "
                     "was still allocated shows as alive at the end\n", sig);
    } else if (strcmp(d->state, "exec") == 0) {
        char prog[512], next[4096];
        gm_meta_text(d, "exec", prog, sizeof prog);
        rec_exec_next_path(d->path, next, sizeof next);
        fprintf(out, "  note      the program replaced itself (exec of %s) after this: everything up to the "
                     "exec was committed, so what was still allocated shows as alive at the end; the next "
                     "image recorded beside this file (%s, or the next free -execN)\n",
                prog[0] ? prog : "another program", next);
    } else if (!d->closed)
        fprintf(out, "  note      the recording did not end cleanly (process killed, or still "
                     "running): this is what was committed, %" PRIu64 " events\n", m->events);
    if (m->truncated_warning)
        fprintf(out, "  note      the events table is damaged after event %" PRIu64
                     ": the rest could not be read\n", m->max_seq);
}

/* The unit in which the allocator takes memory from the device: its physical handle size
 * (GPUMEM_CONF handle_size, recorded in meta.config), else the 2 MiB mapping granularity of
 * NVIDIA GPUs and of the virtual GPU. */
static uint64_t map_unit(gm_db *d) {
    char conf[1024];
    gm_meta_text(d, "config", conf, sizeof conf);
    const char *h = strstr(conf, "handle_size:");
    if (h) {
        char *end;
        uint64_t v = strtoull(h + 12, &end, 10);
        uint64_t mul = *end == 'K' ? 1u << 10 : *end == 'M' ? 1u << 20 : *end == 'G' ? 1u << 30 : 1;
        if (v && v <= (1ull << 40) / mul) return v * mul;
    }
    return 2u << 20;
}

/* Line `line` of a source file, stripped and cut to 120 characters; 0 when it cannot be read. */
static int source_line(const char *file, uint32_t line, char *out, size_t outsz) {
    FILE *f = file && line ? fopen(file, "r") : NULL;
    if (!f) return 0;
    char buf[4096];
    uint32_t n = 0;
    int found = 0;
    while (fgets(buf, sizeof buf, f) && n < 1000000)
        if (++n == line) {
            found = 1;
            break;
        }
    fclose(f);
    if (!found) return 0;
    char *b = buf, *e;
    while (*b == ' ' || *b == '\t') b++;
    e = b + strlen(b);
    while (e > b && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) *--e = 0;
    if (!*b) return 0;
    for (char *c = b; *c; c++)
        if ((unsigned char)*c < 0x20) *c = ' ';
    snprintf(out, outsz, "%.120s%s", b, strlen(b) > 120 ? "..." : "");
    return 1;
}

/* The Python line an OOM came from and the code on it, the tensor in the program's own words
 * ("loss = F.cross_entropy(logits.view(-1, V), targets)"): the OOM's own Python frame, else (a
 * request PyTorch's C++ made, autograd's backward) the line the program's main thread was on
 * at PyTorch's first OOM (meta torch_oom_python, from gpumem's PyTorch hook). 0 when neither. */
static int oom_python(gm_db *d, const gm_model *m, const gm_oom *oo, int first, char *where, size_t wsz,
                      char *src, size_t ssz, int *from_main) {
    long fi = oo->stack ? gm_stack_site(m, oo->stack) : -1;
    *from_main = 0;
    src[0] = 0;
    if (fi >= 0 && m->frames[fi].python && m->frames[fi].file) {
        const char *b = strrchr(m->frames[fi].file, '/');
        snprintf(where, wsz, "%s:%u in %s", b ? b + 1 : m->frames[fi].file, m->frames[fi].line,
                 m->frames[fi].function ? m->frames[fi].function : "?");
        source_line(m->frames[fi].file, m->frames[fi].line, src, ssz);
        return 1;
    }
    char v[1200] = "";
    if (first) gm_meta_text(d, "torch_oom_python", v, sizeof v);
    if (!v[0]) return 0;
    char *t1 = strchr(v, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
    if (!t2) return 0;
    *t1 = *t2 = 0;
    const char *b = strrchr(v, '/');
    uint32_t line = (uint32_t)strtoul(t1 + 1, NULL, 10);
    snprintf(where, wsz, "%s:%u in %s", b ? b + 1 : v, line, t2 + 1);
    source_line(v, line, src, ssz);
    *from_main = 1;
    return 1;
}

/* Why an allocation failed: the one constraint that bound it, and by how many bytes the request
 * fell short. The allocator could have served the request from its largest free block or by
 * mapping new memory up to the cap (the limit, or what the device had left), in whole mapping
 * units; whichever gives more is what it had, and the rest is the shortfall. */
typedef struct oom_cause {
    const char *kind; /* limit, fraction, granularity, fragmentation, device, too_large */
    uint64_t shortfall;
    char advice[640];
} oom_cause;

/* from: who set the recorded limit (gm_oom_limit_from); gm_alloc: gpumem was PyTorch's allocator
 * (`--allocator gpumem`), so a fraction was applied by gpumem's allocator, in its mapping units */
static void oom_explain(const gm_oom *o, gm_oom_bound from, uint64_t unit, int gm_alloc, oom_cause *c) {
    uint64_t cap_limit = o->limit; /* GM_NO_LIMIT (none) is above every device */
    /* without the device's own figures (device_free 0) the failure itself says growth was
     * refused: no room. An OOM imported from PyTorch's trace knows the device's free bytes but
     * not its total: they count all the same */
    uint64_t cap_dev = o->reserved + o->device_free;
    uint64_t cap = cap_limit < cap_dev ? cap_limit : cap_dev;
    uint64_t headroom = cap > o->reserved ? cap - o->reserved : 0;
    /* PyTorch's fraction check has no granularity (allowed = fraction x total, against what it
     * reserved plus the request): where it bound, every byte of the room counted */
    if (cap_limit <= cap_dev && o->fraction && !gm_alloc) unit = 1;
    uint64_t mappable = headroom / unit * unit;
    uint64_t have = o->largest_free > mappable ? o->largest_free : mappable;
    c->shortfall = o->requested > have ? o->requested - have : 0;
    char rq[32], sh[32], hr[32], mp[32], un[32];
    gm_fmt_bytes(o->requested, rq, sizeof rq);
    gm_fmt_bytes(c->shortfall, sh, sizeof sh);
    /* the room and what it could map, rounded down (never read as more than there was); the
     * limit that would have let this request map what it needs rounded up, with its bytes: a
     * figure typed back as it reads must not fail again */
    gm_fmt_bytes_rounded(headroom, 0, hr, sizeof hr);
    gm_fmt_bytes_rounded(mappable, 0, mp, sizeof mp);
    gm_fmt_bytes(unit, un, sizeof un);
    uint64_t units = (o->requested + unit - 1) / unit;
    char needup[32];
    gm_fmt_bytes_rounded(o->reserved + units * unit, 1, needup, sizeof needup);
    char needb[64];
    snprintf(needb, sizeof needb, "%s (%" PRIu64 " bytes)", needup, o->reserved + units * unit);
    const char *what = cap_limit > cap_dev ? "the device"
                       : o->fraction       ? "PyTorch's per-process memory fraction"
                                           : gm_oom_knob(from);
    char li[32];
    gm_fmt_bytes(o->limit, li, sizeof li);
    if (o->device_total && o->requested > o->device_total) {
        c->kind = "too_large";
        snprintf(c->advice, sizeof c->advice, "the request alone (%s) is larger than the device: "
                 "split the tensor or shard it", rq);
    } else if (o->free_cached >= o->requested && o->largest_free < o->requested && mappable < o->requested) {
        c->kind = "fragmentation";
        snprintf(c->advice, sizeof c->advice, "fragmentation: enough memory was cached (free in "
                 "fragments >= the request) but no block was large enough, and %s left only %s to "
                 "map. Use expandable segments (GPUMEM_CONF=expandable_segments:true, the default "
                 "in replace mode), or allocate the largest tensors first; `gpumem frag` names the "
                 "allocations that pin the fragments and the setting that avoids this OOM", what, hr);
    } else if (headroom >= o->requested && mappable < o->requested) {
        c->kind = "granularity";
        snprintf(c->advice, sizeof c->advice,
                 "mapping granularity: %s left %s above what was "
                 "reserved, but memory is mapped in %s units and only %s of it could be mapped. "
                 "%s",
                 what, hr, un, mp,
                 cap_limit > cap_dev ? "Lower the peak"
                 : o->fraction ? (from == GM_OOM_TORCH_KEY
                                      ? "Raise the fraction (the per_process_memory_fraction key of "
                                        "PYTORCH_CUDA_ALLOC_CONF)"
                                      : "Raise the fraction (torch.cuda.set_per_process_memory_fraction)")
                               : "Raise it to a multiple of the unit");
        if (cap_limit <= cap_dev) {
            size_t l = strlen(c->advice);
            snprintf(c->advice + l, sizeof c->advice - l, " (at least %s here)", needb);
        }
    } else if (cap_limit <= cap_dev && o->fraction) {
        c->kind = "fraction";
        char fr[96] = "";
        /* how the program set it (the key of PYTORCH_CUDA_ALLOC_CONF, or a call) is what to raise */
        const char *how = gm_oom_fraction_how(from) ? gm_oom_fraction_how(from)
                                                     : "torch.cuda.set_per_process_memory_fraction";
        if (o->device_total) { /* the fraction that allows needb on this device, rounded up */
            double f = ceil((double)(o->reserved + units * unit) / (double)o->device_total * 1e4) / 1e4;
            if (from == GM_OOM_TORCH_KEY) snprintf(fr, sizeof fr, ": per_process_memory_fraction:%.4f", f);
            else snprintf(fr, sizeof fr, ", a fraction of %.4f", f);
        }
        snprintf(
            c->advice, sizeof c->advice,
            "PyTorch's per-process memory fraction allows %s "
            "(%s), %s above what %s reserved: the "
            "request never reached the device. Raise the fraction (to allow at least %s for this "
            "request%s), or lower the peak (the call sites live at the OOM are below)",
            li, how, hr, gm_alloc ? "gpumem's allocator (PyTorch's, through --allocator gpumem)" : "PyTorch",
            needb, fr);
    } else if (cap_limit <= cap_dev) {
        c->kind = "limit";
        char fr[96] = "", dt[32];
        if (from == GM_OOM_KEY && o->device_total) { /* the key is a share: the one that allows needb */
            gm_fmt_bytes(o->device_total, dt, sizeof dt);
            snprintf(fr, sizeof fr, ": per_process_memory_fraction:%.4f of the device's %s",
                     ceil((double)(o->reserved + units * unit) / (double)o->device_total * 1e4) / 1e4, dt);
        }
        snprintf(c->advice, sizeof c->advice, "the configured limit was reached: %s left "
                 "%s above what was reserved. Raise it (to at least %s for this request%s), or lower "
                 "the peak (the call sites live at the OOM are below)", gm_oom_knob(from), hr, needb, fr);
    } else {
        c->kind = "device";
        snprintf(c->advice, sizeof c->advice, "the live tensors need more than the device has: "
                 "lower the peak (smaller batch with gradient accumulation, activation recompute, "
                 "CPU offload, bf16 activations: `gpumem advise` predicts each), the call sites "
                 "live at the OOM are what to look at first");
    }
}

/* The allocation born at event seq (its id: gm_alloc_by_id), or NULL. */
static const gm_alloc *alloc_born_at(const gm_model *m, uint64_t seq) {
    long i = gm_alloc_by_id(m, seq);
    return i < 0 ? NULL : &m->allocs[i];
}

/* An event a report cites, said the way a user can find it: the tensor allocated there, its
 * NVTX phase (the step is in it: "step 2/bwd/h1") and the call site. Empty fields are NULL. */
typedef struct event_place {
    const char *name, *phase, *site;
} event_place;

static event_place place_of(const gm_model *m, labels *l, uint64_t seq) {
    event_place p = {NULL, NULL, NULL};
    const gm_alloc *a = alloc_born_at(m, seq);
    if (!a) return p;
    p.name = a->name ? gm_str(m, a->name) : NULL;
    const gm_range *r = a->range ? gm_range_of(m, a->range) : NULL;
    p.phase = r && r->path ? r->path : NULL;
    p.site = a->stack ? site_of(m, l, a->stack, NULL) : NULL;
    return p;
}

static void print_place_text(FILE *out, event_place p) {
    if (!p.name && !p.phase && !p.site) return;
    fprintf(out, "                      when %s was allocated%s%s%s%s\n", p.name ? p.name : "a tensor",
            p.phase ? " in " : " outside any NVTX range", p.phase ? p.phase : "",
            p.site ? " at " : "", p.site ? p.site : "");
}

static void print_place_json(FILE *out, const char *key, uint64_t seq, event_place p) {
    fprintf(out, "\"%s\":{\"seq\":%" PRIu64 ",\"name\":", key, seq);
    gm_json_str(out, p.name);
    fputs(",\"phase\":", out);
    gm_json_str(out, p.phase);
    fputs(",\"site\":", out);
    gm_json_str(out, p.site);
    fputc('}', out);
}

/* The NVTX range path of the OOM event ("step 1/fwd/h12/attn"), NULL when outside ranges. */
static const char *oom_phase(const gm_model *m, const gm_oom *oo) {
    const gm_range *r = oo->range ? gm_range_of(m, oo->range) : NULL;
    return r && r->path ? r->path : NULL;
}

/* Copies and memsets gpumem refused (event kind 30 bad_access, issue 37): one row per kind of
 * access (operation, bytes, allocation size, call site), first occurrence first, with its
 * count. Text: "out-of-bounds memset of 1001 bytes into a 1000-byte allocation" and the site;
 * JSON key "bad_accesses". Older recordings have none. */
static void print_bad_accesses(gm_db *d, gm_model *m, labels *l, const gm_opts *o, FILE *out) {
    uint64_t total = m->count_kind[REC_BAD_ACCESS];
    sqlite3_stmt *q = NULL;
    if (total && sqlite3_prepare_v2(d->db,
                                    "SELECT min(seq), count(*), flags & 1792, size, requested, stack "
                                    "FROM events WHERE kind = 30 GROUP BY flags & 1792, size, "
                                    "requested, stack ORDER BY min(seq) LIMIT ?",
                                    -1, &q, NULL) != SQLITE_OK)
        q = NULL;
    if (q) sqlite3_bind_int(q, 1, o->top > 0 ? o->top : 10);
    if (o->json) fprintf(out, ",\"bad_accesses\":{\"count\":%" PRIu64 ",\"groups\":[", total);
    else if (total)
        fprintf(out, "\nOut-of-bounds copies and memsets (refused with CUDA_ERROR_INVALID_VALUE: %" PRIu64
                     " in all)\n", total);
    int n = 0;
    uint64_t shown = 0;
    while (q && sqlite3_step(q) == SQLITE_ROW) {
        uint64_t seq = (uint64_t)sqlite3_column_int64(q, 0), cnt = (uint64_t)sqlite3_column_int64(q, 1);
        unsigned fl = (unsigned)sqlite3_column_int64(q, 2);
        uint64_t bytes = (uint64_t)sqlite3_column_int64(q, 3), alloc = (uint64_t)sqlite3_column_int64(q, 4);
        uint32_t stack = (uint32_t)sqlite3_column_int64(q, 5);
        const char *op = fl & REC_F_BA_MEMSET ? "memset" : fl & REC_F_BA_WRITE ? "copy_into" : "copy_from";
        const char *site = site_of(m, l, stack, NULL);
        shown += cnt;
        if (o->json) {
            fprintf(out, "%s{\"first_seq\":%" PRIu64 ",\"count\":%" PRIu64 ",\"op\":\"%s\",\"bytes\":%" PRIu64
                         ",\"allocation_bytes\":",
                    n ? "," : "", seq, cnt, op, bytes);
            if (alloc) fprintf(out, "%" PRIu64, alloc);
            else fputs("null", out);
            fprintf(out, ",\"freed\":%s,\"site\":", alloc ? "false" : "true");
            gm_json_str(out, site);
            fputc('}', out);
        } else {
            const char *what = fl & REC_F_BA_MEMSET ? "memset of" : "copy of";
            const char *dir = fl & REC_F_BA_READ ? "from" : "into";
            const char *unit = bytes == 1 ? "byte" : "bytes";
            if (alloc)
                fprintf(out, "  out-of-bounds %s %" PRIu64 " %s %s a %" PRIu64 "-byte allocation", what, bytes,
                        unit, dir, alloc);
            else
                fprintf(out, "  %s %" PRIu64 " %s %s freed memory", what, bytes, unit, dir);
            fprintf(out, " (event %" PRIu64 "%s", seq, cnt > 1 ? ", " : ")");
            if (cnt > 1) fprintf(out, "%" PRIu64 " times)", cnt);
            fprintf(out, "\n    at %s\n", site);
        }
        n++;
    }
    if (q) sqlite3_finalize(q);
    if (o->json) fputs("]}", out);
    else if (total > shown)
        fprintf(out, "  ... and %" PRIu64 " more (gpumem sql: kind 30)\n", total - shown);
}

/* ---------------------------------------------------------------- CUDA graphs' memory */

static int pools_used(const gm_pools *p) { return p->allocs || p->segments; }

static void print_pools_json(FILE *out, const char *key, const char *count_key, int64_t count,
                             const gm_pools *p) {
    fprintf(out, "\"%s\":", key);
    if (!pools_used(p)) {
        fputs("null", out);
        return;
    }
    fprintf(out, "{\"%s\":%" PRId64 ",\"allocations\":%" PRIu64 ",\"allocation_bytes\":%" PRIu64
                 ",\"peak_allocated\":%" PRIu64 ",\"allocated_at_end\":%" PRIu64 ",\"segments\":%" PRIu64
                 ",\"peak_reserved\":%" PRIu64 ",\"reserved_at_end\":%" PRIu64 ",\"reserved_at_peak\":%" PRIu64 "}",
            count_key, count, p->allocs, p->alloc_bytes, p->peak_allocated, p->allocated, p->segments,
            p->peak_reserved, p->reserved, p->reserved_at_peak);
}

/* whose: what the pools' live allocations are (a capture's static tensors; a MemPool's too) */
static void print_pools_text(FILE *out, const char *title, const char *what, int64_t count,
                             const char *peak_of, const char *whose, const gm_pools *p) {
    char ab[32], pa[32], ea[32], pr[32], er[32], rp[32];
    gm_fmt_bytes(p->alloc_bytes, ab, sizeof ab);
    gm_fmt_bytes(p->peak_allocated, pa, sizeof pa);
    gm_fmt_bytes(p->allocated, ea, sizeof ea);
    gm_fmt_bytes(p->peak_reserved, pr, sizeof pr);
    gm_fmt_bytes(p->reserved, er, sizeof er);
    gm_fmt_bytes(p->reserved_at_peak, rp, sizeof rp);
    fprintf(out, "  %-24s %" PRId64 " %s; %" PRIu64 " allocations made in them (%s)\n", title, count, what,
            p->allocs, ab);
    fprintf(out, "  %-24s reserved %s at most, %s at %s peak reserved, %s at the end (%" PRIu64 " segments)\n",
            "", pr, rp, peak_of, er, p->segments);
    fprintf(out, "  %-24s allocated %s at most, %s at the end (%s, while they live)\n", "", pa, ea, whose);
}

/* "CUDA graphs": the memory of graph captures, when the recording has any (JSON key "graphs",
 * null otherwise):
 *   capture_pools  gpumem's pools of each capture (PyTorch with gpumem as its allocator: what
 *                  it allocates while capturing; events flagged REC_F_PRIVATE_POOL); a
 *                  capture's allocations are recorded on the stream handle 4 x id + 1 (its
 *                  capture id), which counts the captures;
 *   torch_pools    PyTorch's private pools (CUDA graphs' and MemPool's), from its merged
 *                  history's pool ids (meta torch_private_pools counts them), by its rules;
 *   memory_nodes   the driver's graph allocations (cudaMallocAsync during a capture, flag
 *                  REC_F_GRAPH), recorded once at their capture. */
static void print_graphs(gm_db *d, gm_model *m, const gm_opts *o, FILE *out) {
    const gm_pools *gp = &m->pools, *tp = &m->torch.pools;
    int any = pools_used(gp) || pools_used(tp) || m->graph_nodes;
    int64_t captures = 0;
    if (pools_used(gp)) {
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(d->db, "SELECT count(*) FROM streams WHERE handle > 1 AND handle % 4 = 1", -1, &q,
                               NULL) == SQLITE_OK) {
            if (sqlite3_step(q) == SQLITE_ROW) captures = sqlite3_column_int64(q, 0);
            sqlite3_finalize(q);
        }
    }
    int64_t tpools = pools_used(tp) ? gm_meta_int(d, "torch_private_pools", 0) : 0;
    if (o->json) {
        fputs(",\"graphs\":", out);
        if (!any) {
            fputs("null", out);
            return;
        }
        fputc('{', out);
        print_pools_json(out, "capture_pools", "captures", captures, gp);
        fputc(',', out);
        print_pools_json(out, "torch_pools", "pools", tpools, tp);
        fputs(",\"memory_nodes\":", out);
        if (m->graph_nodes)
            fprintf(out, "{\"allocations\":%" PRIu64 ",\"bytes\":%" PRIu64 "}", m->graph_nodes, m->graph_node_bytes);
        else
            fputs("null", out);
        fputc('}', out);
        return;
    }
    if (!any) return;
    /* PyTorch's history does not say whether a private pool was a graph's or a MemPool's (both
     * ids are (0, N)): the words are both's where PyTorch's pools are there (a MemPool alone read
     * "the memory of graph captures", "the graphs' static tensors") */
    fprintf(out, pools_used(tp) ? "\nCUDA graphs and MemPools: the memory of private pools\n"
                                : "\nCUDA graphs: the memory of graph captures\n");
    if (pools_used(gp))
        print_pools_text(out, "gpumem's capture pools", captures == 1 ? "capture (PyTorch through gpumem)"
                                                                       : "captures (PyTorch through gpumem)",
                         captures, "the device's", "the graphs' static tensors", gp);
    if (pools_used(tp))
        print_pools_text(out, "PyTorch's private pools", tpools == 1 ? "pool (CUDA graphs, MemPool)"
                                                                     : "pools (CUDA graphs, MemPool)",
                         tpools, "PyTorch's", "a graph's static tensors, a MemPool's tensors", tp);
    if (m->graph_nodes) {
        char b[32];
        gm_fmt_bytes(m->graph_node_bytes, b, sizeof b);
        fprintf(out, "  %-24s %" PRIu64 " graph allocations made by the driver (stream-ordered allocation while "
                     "capturing), %s\n", "memory nodes", m->graph_nodes, b);
    }
}

/* "device used (what nvidia-smi shows)": the block and its JSON key (gm_devused.c) */
static void print_device_used(gm_db *d, gm_model *m, const gm_opts *o, FILE *out) {
    gm_devused u;
    char err[512];
    /* computed in the model's sweep (gm_model_load); read again only when it could not be */
    int ok = m->devused ? (u = *m->devused, 1) : gm_devused_compute(d, &u, err, sizeof err) == 0;
    if (o->json) {
        fputs(",\"device_used\":", out);
        if (ok) gm_devused_print_json(out, m, &u, o->top);
        else fputs("null", out);
    } else if (ok) {
        gm_devused_print_text(out, m, &u, o->top < 10 ? o->top : 10);
    } else {
        fprintf(out, "\nDevice used (what nvidia-smi shows)\n  %s\n", err);
    }
    if (!m->devused) gm_devused_free(&u);
}

/* ---------------------------------------------------------------- PyTorch's view */

/* How the device-wide peak reserved was made up, against PyTorch's own (every byte named):
 *   device peak = PyTorch's reserve then + outside PyTorch's allocator + gpumem's cache and
 *                 rounding + other program VMM
 * and the difference to PyTorch's peak adds what PyTorch held less then than at its own peak. */
typedef struct torch_diff {
    uint64_t seq, device, torch_then, outside, cache, other;
    uint64_t at; /* the moment the two views are compared (seq, or where PyTorch caught up) */
} torch_diff;

/* The moment to compare the device's peak reserved with PyTorch's reserve: the peak is most often
 * the mapping gpumem makes for PyTorch's new segment (its cudaMalloc), written before the
 * allocation itself and before PyTorch records the segment; at the peak's own seq that segment is
 * in neither view and would read as gpumem's cache. So: the first segment PyTorch records after
 * the peak, where the device's reserve has not changed since and that segment is an allocation
 * (or a VMM map) made from the peak on — the segment in flight, now in both views: the
 * allocation at the segment's address, or a map inside the range it records (expandable
 * segments map a segment's pages one by one, PyTorch records them as one range from its first
 * page: the last page, the peak, was at another address, and the segment read as other program
 * VMM, "PyTorch held 260 MiB less then than at its own peak" of a program that held that much).
 * *torch_then gets PyTorch's reserve then. Else the peak itself. */
static uint64_t torch_caught_up(gm_db *d, const gm_model *m, uint64_t *torch_then) {
    uint64_t p = m->peak_device_seq, at = p;
    *torch_then = m->peak_device_torch;
    sqlite3_stmt *st;
    /* a device's view (device_only) compares on that device only: ?2 is it, or -1 for all */
    const char *sql =
        "SELECT t.seq, (SELECT coalesce(sum(CASE WHEN kind = 34 THEN size ELSE -size END), 0) FROM events"
        "               WHERE kind IN (34, 35) AND seq > ?1 AND seq <= t.seq AND (?2 < 0 OR device = ?2))"
        " FROM events t WHERE t.seq = (SELECT min(seq) FROM events WHERE kind = 34 AND seq > ?1"
        "                              AND (?2 < 0 OR device = ?2))"
        " AND NOT EXISTS (SELECT 1 FROM events r WHERE r.seq > ?1 AND r.seq < t.seq"
        "                 AND r.kind IN (11, 12, 14, 15, 18, 19) AND (?2 < 0 OR r.device = ?2))"
        " AND EXISTS (SELECT 1 FROM events a WHERE a.seq >= ?1 AND a.seq < t.seq AND a.kind IN (1, 3, 11)"
        "             AND a.addr >= t.addr AND a.addr < t.addr + t.size)";
    if (sqlite3_prepare_v2(d->db, sql, -1, &st, NULL) != SQLITE_OK) return at;
    sqlite3_bind_int64(st, 1, (int64_t)p);
    sqlite3_bind_int(st, 2, m->device_only - 1);
    if (sqlite3_step(st) == SQLITE_ROW) {
        int64_t delta = sqlite3_column_int64(st, 1);
        at = (uint64_t)sqlite3_column_int64(st, 0);
        *torch_then = delta < 0 && (uint64_t)-delta > *torch_then ? 0 : *torch_then + (uint64_t)delta;
    }
    sqlite3_finalize(st);
    return at;
}

static torch_diff torch_difference(const gm_model *m, const alloc_set *at, uint64_t when, uint64_t torch_then) {
    torch_diff t = {m->peak_device_seq, m->peak_device, torch_then, 0, 0, 0, when};
    uint64_t fw = 0;
    for (size_t i = 0; i < at->n; i++) {
        const gm_alloc *a = &m->allocs[at->idx[i]];
        if (a->flags & GM_ALLOC_FW_SEGMENT) fw += a->size;
        else t.outside += a->size;
    }
    uint64_t gm_reserved = m->peak_device - m->peak_device_vmm;
    t.cache = gm_reserved > fw + t.outside ? gm_reserved - fw - t.outside : 0;
    uint64_t named = t.torch_then + t.outside + t.cache;
    t.other = t.device > named ? t.device - named : 0;
    return t;
}

/* The torch view's block of the report: PyTorch's peaks by its own rules, the difference to the
 * device's named, and its tensors at its peak by phase, site and name. */
/* GPUMEM_CATEGORY_DUMP=FILE: every device allocation's category, one line each, for the checks
 * that compare categories allocation by allocation (tests/integration/categories_trainer.sh,
 * tests/torch/torch_categories.sh): first the steps, "VIEW step N START BWD OPT END" (seqs; -1:
 * the step has no backward / update), then "VIEW INDEX BIRTH DEATH SIZE CATEGORY SOURCE", VIEW
 * "device" or "torch", INDEX the allocation's place among the view's device allocations in birth
 * order, DEATH 0 when alive at the end. */
static void dump_categories(const gm_model *m, const gm_categories *c, const char *view) {
    const char *path = getenv("GPUMEM_CATEGORY_DUMP");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    for (size_t j = 0; j < c->nsteps; j++) /* "VIEW step N START BWD OPT END", -1: none */
        fprintf(f, "%s step %" PRId64 " %" PRIu64 " %" PRId64 " %" PRId64 " %" PRIu64 "\n", view, c->steps[j].number,
                c->steps[j].start, c->steps[j].bwd == UINT64_MAX ? -1 : (int64_t)c->steps[j].bwd,
                c->steps[j].opt == UINT64_MAX ? -1 : (int64_t)c->steps[j].opt, c->steps[j].end);
    size_t k = 0;
    for (size_t i = 0; i < m->nallocs; i++) {
        if (c->cat[i] >= GM_NCATS) continue;
        fprintf(f, "%s %zu %" PRIu64 " %" PRIu64 " %" PRIu64 " %s %s\n", view, k++, m->allocs[i].birth,
                m->allocs[i].death, m->allocs[i].size, gm_cat_key[c->cat[i]], gm_csrc_name[c->src[i]]);
    }
    fclose(f);
}

/* The "by category" block of a model (the device's, or PyTorch's view): text, or the JSON
 * members categories_at_peak, category_source and categories (the caller writes what is around). */
static void print_categories(gm_db *d, const gm_model *m, const gm_opts *o, FILE *out, const char *title,
                             const char *view) {
    gm_categories c;
    char err[256];
    if (gm_categories_build(d, m, &c, err, sizeof err) != 0) {
        if (o->json) fputs("\"categories_at_peak\":null,\"category_source\":null,\"categories\":null", out);
        else fprintf(out, "\n%s: not computed (%s)\n", title, err);
        return;
    }
    dump_categories(m, &c, view);
    if (o->json) gm_categories_print_json(out, &c);
    else {
        gm_categories_print_text(out, &c, title);
    }
    gm_categories_free(&c);
}

/* The text's "since the reset" line: the program's own max_memory_*() from its last
 * reset_peak_memory_stats. dev: the device the figures are (several devices: PyTorch resets one),
 * -1 none named; reserved_whose and tail: what the caller's view adds. */
static void since_reset_line(FILE *out, const gm_torch_reset *rs, int dev, const char *reserved_whose,
                             const char *tail) {
    char ra[32], rr[32], dn[16] = "";
    gm_fmt_bytes(rs->max_allocated, ra, sizeof ra);
    gm_fmt_bytes(rs->max_reserved, rr, sizeof rr);
    if (dev >= 0) snprintf(dn, sizeof dn, "%d", dev);
    fprintf(out, "  since the reset     %s allocated (%" PRIu64 " bytes; max_memory_allocated(%s)), %s reserved (%" PRIu64
                 " bytes; max_memory_reserved(%s)%s): the program reset its peak stats (reset_peak_memory_stats(%s)%s) "
                 "last at event %" PRIu64 ", %.3f s%s\n",
            ra, rs->max_allocated, dn, rr, rs->max_reserved, dn, reserved_whose, dn, rs->count > 1 ? ", several times" : "",
            rs->seq, (double)rs->t_ns / 1e9, tail);
}

void gm_torch_reset_json(FILE *out, const gm_torch_reset *rs) {
    if (rs->count)
        fprintf(out, "\"peak_reset\":{\"count\":%" PRIu64 ",\"seq\":%" PRIu64 ",\"t_ns\":%" PRIu64
                     ",\"max_memory_allocated\":%" PRIu64 ",\"max_memory_reserved\":%" PRIu64 "}",
                rs->count, rs->seq, rs->t_ns, rs->max_allocated, rs->max_reserved);
    else
        fputs("\"peak_reset\":null", out);
}

/* A recording's devices, each with its peaks in the view m (gm_dev_figs): JSON members "device" (the
 * one whose figures the view's top-level keys are: busy, null with a single device) and "devices"
 * (an entry per device that held memory). */
static void print_devices_json(FILE *out, const gm_model *m, int busy, gm_db *torch_db) {
    if (busy >= 0) fprintf(out, "\"device\":%d,\"device_from\":\"%s\",\"devices\":[", busy,
                           gm_device_from_json(gm_lead_from(m, NULL)));
    else fputs("\"device\":null,\"device_from\":null,\"devices\":[", out);
    int first = 1;
    for (int i = 0; m->devs && i < GM_DEVICES; i++) {
        const gm_dev_figs *f = &m->devs[i];
        if (!f->peak_allocated && !f->peak_reserved) continue;
        fprintf(out, "%s{\"device\":%d,\"peak_allocated\":%" PRIu64 ",\"peak_allocated_seq\":%" PRIu64
                     ",\"peak_reserved\":%" PRIu64 ",\"peak_reserved_seq\":%" PRIu64 ",\"peak_requested\":%" PRIu64
                     ",\"peak_requested_seq\":%" PRIu64,
                first ? "" : ",", i, f->peak_allocated, f->peak_allocated_seq, f->peak_reserved,
                f->peak_reserved_seq, f->peak_requested, f->peak_requested_seq);
        if (torch_db) { /* PyTorch's view: its reset of this device (its max_memory_*(d) count from there) */
            gm_torch_reset rs;
            gm_torch_peak_reset(torch_db, i, &rs);
            fputs(",", out);
            gm_torch_reset_json(out, &rs);
        }
        fputc('}', out);
        first = 0;
    }
    fputc(']', out);
}

/* The same in text, where there are several (busy >= 0): which device the figures above are, then
 * each device's peaks. */
static void print_devices_text(FILE *out, const gm_model *m, int busy, const char *what, gm_db *torch_db) {
    if (busy < 0) return;
    int lo, hi, n = gm_model_devices(m, &lo, &hi);
    char why[256];
    fprintf(out, "  devices             %d (%d to %d): the figures above are device %d's (%s), not a sum; "
                 "each device's (%s):\n", n, lo, hi, busy,
            gm_lead_why(m, "the highest peak reserved; --device N for another", why, sizeof why), what);
    for (int i = 0; i < GM_DEVICES; i++) {
        const gm_dev_figs *f = &m->devs[i];
        if (!f->peak_allocated && !f->peak_reserved) continue;
        char a[32], r[32];
        gm_fmt_bytes(f->peak_allocated, a, sizeof a);
        gm_fmt_bytes(f->peak_reserved, r, sizeof r);
        fprintf(out, "    device %-3d        peak allocated %s (%" PRIu64 " bytes, event %" PRIu64 "), peak reserved %s (%" PRIu64
                     " bytes, event %" PRIu64 ")", i, a, f->peak_allocated, f->peak_allocated_seq, r, f->peak_reserved,
                f->peak_reserved_seq);
        gm_torch_reset rs;
        if (torch_db && gm_torch_peak_reset(torch_db, i, &rs)) { /* PyTorch reset this device's peaks */
            gm_fmt_bytes(rs.max_allocated, a, sizeof a);
            gm_fmt_bytes(rs.max_reserved, r, sizeof r);
            fprintf(out, " in the whole run;\n                        since its reset (event %" PRIu64 ") %s allocated (%" PRIu64
                         " bytes), %s reserved (%" PRIu64 " bytes): max_memory_allocated(%d), max_memory_reserved(%d)",
                    rs.seq, a, rs.max_allocated, r, rs.max_reserved, i, i);
        }
        fputc('\n', out);
    }
}

/* The figures a recording leads with, one analysis for report and for record's summary line, so
 * the two can never disagree:
 *   - the device's: the busiest device's view (or --device's: gm_lead_device) where there are
 *     several (a sum of devices is a figure no device had), the model itself otherwise;
 *   - PyTorch's, where its history was merged (torch.present == 1): its tensors' view, again the
 *     busiest device's (its max_memory_*(d) are per device), and where the program reset its peak
 *     stats, the figures since then. */
typedef struct lead_figs {
    gm_model *dev;     /* the device's figures: the model, or &dv */
    gm_model dv;
    int dev_busy;      /* -1: one device (dev is the model) */
    gm_model twhole;   /* PyTorch's view of every device (present == 1) */
    gm_model tv;       /* its lead: twhole, or its busiest device's view */
    int torch_busy;    /* -1: one device */
    gm_torch_reset reset;
} lead_figs;

enum { LEAD_DEVICE = 1, LEAD_TORCH = 2 }; /* which of the two lead_make computes */
static gm_dev_figs hook_lead(const gm_torch_view *tv, int asked, int *busy, int *n);

/* The program's reset of PyTorch's peaks on the device whose figures the hook's are (hook_lead's
 * busy: the lead of several, else the one that held tensors), as gpumem's allocator recorded it. */
static void hook_lead_reset(gm_db *d, const gm_torch_view *tv, int busy, gm_torch_reset *rs) {
    int lead = busy;
    for (int i = 0; lead < 0 && tv->devs && i < GM_DEVICES; i++)
        if (tv->devs[i].peak_allocated) lead = i;
    gm_torch_peak_reset(d, lead < 0 ? 0 : lead, rs);
}

static void lead_make(gm_db *d, gm_model *m, int what, lead_figs *f) {
    memset(f, 0, sizeof *f);
    f->dev = m, f->dev_busy = -1, f->torch_busy = -1;
    if ((what & LEAD_DEVICE) && gm_model_devices(m, NULL, NULL) > 1 &&
        gm_model_device_view(m, gm_lead_device(m), &f->dv) == 0)
        f->dev_busy = f->dv.device_only - 1, f->dev = &f->dv;
    if ((what & LEAD_TORCH) && m->torch.present == 2) { /* --allocator gpumem: its reset, the hook's lead's */
        int hb, hn;
        hook_lead(&m->torch, m->device_asked - 1, &hb, &hn);
        hook_lead_reset(d, &m->torch, hb, &f->reset);
    }
    if (!(what & LEAD_TORCH) || m->torch.present != 1) return;
    f->twhole = gm_model_torch_view(m), f->tv = f->twhole;
    if (gm_model_devices(&f->twhole, NULL, NULL) > 1 &&
        gm_model_device_view(&f->twhole, gm_lead_device(&f->twhole), &f->tv) == 0)
        f->torch_busy = f->tv.device_only - 1;
    /* PyTorch resets one device's peaks: the lead's device's, or any where there is one */
    gm_torch_peak_reset(d, f->torch_busy >= 0 ? f->torch_busy : GM_TORCH_ALL_DEVICES, &f->reset);
}

static void lead_free(lead_figs *f) {
    if (f->dev_busy >= 0) gm_model_device_view_free(&f->dv);
    if (f->torch_busy >= 0) gm_model_device_view_free(&f->tv);
}

/* PyTorch through gpumem (torch.present == 2): the hook's figures of the device whose peak
 * allocated is highest where its tensors were on several (PyTorch's statistics are per device;
 * the view's sums add the devices together, a figure no device held), the view's own otherwise.
 * The device in *busy (-1: one device), how many in *n. */
static gm_dev_figs hook_lead(const gm_torch_view *tv, int asked, int *busy, int *n) {
    gm_dev_figs f = {0};
    f.peak_allocated = tv->peak_allocated, f.peak_allocated_seq = tv->peak_allocated_seq;
    f.peak_requested = tv->peak_requested, f.peak_requested_seq = tv->peak_requested_seq;
    *busy = -1, *n = 0;
    int best = -1;
    for (int i = 0; tv->devs && i < GM_DEVICES; i++) {
        if (!tv->devs[i].peak_allocated) continue;
        (*n)++;
        if (best < 0 || tv->devs[i].peak_allocated > tv->devs[best].peak_allocated) best = i;
    }
    if (*n > 1 && asked >= 0) best = asked; /* --device N */
    if (*n > 1) *busy = best, f = tv->devs[best];
    return f;
}

/* PyTorch's retries at its limit (gm_torch_retries): the run was at its edge, and each one cost a
 * synchronize of the device and a cudaFree of every cached segment */
static void print_retries_text(FILE *out, const gm_torch_retries_t *rt) {
    if (!rt->count) return;
    char b[32];
    gm_fmt_bytes(rt->bytes, b, sizeof b);
    fprintf(out, "  retries             %s%" PRIu64 " allocation%s met PyTorch's limit and %s retried after it freed its "
                 "cache (num_alloc_retries counts these and each OOM; events %" PRIu64 "-%" PRIu64 "): each retry synchronizes the device and "
                 "cudaFrees every cached segment (%" PRIu64 " segments, %s in all), slow, and the run is at the edge of "
                 "an OOM: lower the peak (a smaller batch, checkpointing, gpumem advise) or raise the memory fraction; "
                 "expandable_segments:True lets the cache fit the requests closer%s\n",
            rt->exact ? "" : "at most ", rt->count, rt->count == 1 ? "" : "s", rt->count == 1 ? "was" : "were",
            rt->first_seq, rt->last_seq, rt->segments, b,
            rt->exact ? "" : " (max_split_size_mb's release of the blocks over it and garbage_collection_threshold's "
                             "collection free inside an allocation too, and gpumem's replay of them is not what "
                             "PyTorch did here: some of these may be theirs alone)");
}

static void print_torch(gm_db *d, gm_model *m, labels *l, const gm_opts *o, FILE *out) {
    const gm_torch_view *tv = &m->torch;
    if (!tv->present) {
        if (o->json) fputs(",\"torch\":null", out);
        return;
    }
    char absent[1024];
    if (gm_torch_absent(d, absent, sizeof absent) >= 0) { /* --device N where PyTorch held nothing: said, not another device's figures nor zeros */
        if (o->json) {
            fputs(",\"torch\":", out);
            gm_torch_absent_json(d, out);
        } else {
            fprintf(out, "\n%s\n  %s\n", tv->present == 2 ? "PyTorch through gpumem" : "PyTorch's allocator", absent);
        }
        return;
    }
    if (tv->present == 2) { /* gpumem was PyTorch's allocator: the hook's allocations */
        int hb, hn;
        gm_dev_figs hf = hook_lead(tv, m->device_asked - 1, &hb, &hn);
        gm_torch_reset rs;
        hook_lead_reset(d, tv, hb, &rs);
        if (o->json) {
            fprintf(out, ",\"torch\":{\"allocator\":\"gpumem\",\"peak_requested\":%" PRIu64
                         ",\"peak_allocated\":%" PRIu64 ",\"peak_reserved\":null,\"peak_requested_seq\":%" PRIu64
                         ",\"peak_allocated_seq\":%" PRIu64 ",",
                    hf.peak_requested, hf.peak_allocated, hf.peak_requested_seq, hf.peak_allocated_seq);
            gm_torch_reset_json(out, &rs);
            fputc(',', out);
            if (hb >= 0) fprintf(out, "\"device\":%d,\"devices\":[", hb);
            else fputs("\"device\":null,\"devices\":[", out);
            for (int i = 0, first = 1; tv->devs && i < GM_DEVICES; i++) {
                const gm_dev_figs *f = &tv->devs[i];
                if (!f->peak_allocated) continue;
                fprintf(out, "%s{\"device\":%d,\"peak_allocated\":%" PRIu64 ",\"peak_allocated_seq\":%" PRIu64
                             ",\"peak_requested\":%" PRIu64 ",\"peak_requested_seq\":%" PRIu64 ",",
                        first ? "" : ",", i, f->peak_allocated, f->peak_allocated_seq, f->peak_requested,
                        f->peak_requested_seq);
                gm_torch_reset drs;
                gm_torch_peak_reset(d, i, &drs);
                gm_torch_reset_json(out, &drs);
                fputc('}', out);
                first = 0;
            }
            fputs("]}", out);
        } else {
            char q[32], a[32], on[64] = "";
            gm_fmt_bytes(hf.peak_requested, q, sizeof q);
            gm_fmt_bytes(hf.peak_allocated, a, sizeof a);
            if (hb >= 0) snprintf(on, sizeof on, "; device %d's, %s of %d", hb, m->device_asked ? "as --device asked" : "the busiest", hn);
            fprintf(out, "\nPyTorch through gpumem (its CUDAPluggableAllocator: every tensor served by gpumem)\n"
                         "  peak requested      %s (%" PRIu64 " bytes PyTorch asked for, at event %" PRIu64
                         "; under its own allocator, requested_bytes%s)\n"
                         "  peak allocated      %s (in gpumem's blocks; the rest of the summary is the device's,\n"
                         "                      libraries' own allocations included)\n",
                    q, hf.peak_requested, hf.peak_requested_seq, on, a);
            for (int i = 0; hb >= 0 && tv->devs && i < GM_DEVICES; i++) {
                const gm_dev_figs *f = &tv->devs[i];
                if (!f->peak_allocated) continue;
                gm_fmt_bytes(f->peak_requested, q, sizeof q);
                gm_fmt_bytes(f->peak_allocated, a, sizeof a);
                fprintf(out, "    device %-3d        peak requested %s (%" PRIu64 " bytes, event %" PRIu64
                             "), peak allocated %s (%" PRIu64 " bytes, event %" PRIu64 ")\n",
                        i, q, f->peak_requested, f->peak_requested_seq, a, f->peak_allocated, f->peak_allocated_seq);
            }
            if (rs.count) /* the peaks above are the whole run's; the program's own count from its reset */
                since_reset_line(out, &rs, hb, ", gpumem's on the device", "; the peaks above are the whole run's");
        }
        return;
    }
    /* several devices: PyTorch's statistics are per device (max_memory_allocated(d)); the
     * busiest device's lead, as the device's view does (lead_make) */
    lead_figs lf;
    lead_make(d, m, LEAD_TORCH, &lf);
    gm_model whole = lf.twhole, v = lf.tv;
    int busy = lf.torch_busy;
    const gm_model *pv = &v;
    alloc_set peak = select_allocs(&v, SET_LIVE_AT, pv->peak_allocated_seq);
    group *gp = NULL, *gs = NULL, *gn = NULL;
    uint64_t total = 0, count = 0;
    size_t np = group_allocs(&v, l, &peak, BY_PHASE, &gp, &total, &count);
    size_t ns = group_allocs(&v, l, &peak, BY_SITE, &gs, &total, &count);
    size_t nn = group_allocs(&v, l, &peak, BY_NAME, &gn, &total, &count);
    free(peak.idx);
    /* the device's peak against PyTorch's, on the device whose figures PyTorch's are (its
     * reserve, the allocations outside it and gpumem's cache all of that device: a device's live
     * set against every device's peak added up to no figure) */
    gm_model dview;
    gm_model *dm = m;
    /* PyTorch's tensors on one device of several (the others' memory not PyTorch's): that one */
    int tdev = busy, tlo;
    if (tdev < 0 && gm_model_devices(m, NULL, NULL) > 1 && gm_model_devices(&whole, &tlo, NULL) == 1) tdev = tlo;
    if (tdev >= 0 && gm_model_device_view(m, tdev, &dview) == 0) dm = &dview;
    else tdev = -1;
    uint64_t torch_then, when = torch_caught_up(d, dm, &torch_then);
    alloc_set at_dev = select_allocs(dm, SET_LIVE_AT, when);
    torch_diff df = torch_difference(dm, &at_dev, when, torch_then);
    /* outside PyTorch's allocator at the device's peak, by site */
    alloc_set outside = {NULL, 0};
    outside.idx = at_dev.idx;
    for (size_t i = 0; i < at_dev.n; i++)
        if (!(dm->allocs[at_dev.idx[i]].flags & GM_ALLOC_FW_SEGMENT)) outside.idx[outside.n++] = at_dev.idx[i];
    group *go = NULL;
    uint64_t ot = 0, oc = 0;
    size_t no = group_allocs(dm, l, &outside, BY_SITE, &go, &ot, &oc);
    free(at_dev.idx);
    if (dm != m) gm_model_device_view_free(&dview);
    /* PyTorch's peak reserved on the same device */
    uint64_t gap = df.device > pv->peak_reserved ? df.device - pv->peak_reserved : 0;
    uint64_t less = pv->peak_reserved > df.torch_then ? pv->peak_reserved - df.torch_then : 0;
    char conf[256], ver[64], from[16];
    gm_meta_text(d, "torch_conf", conf, sizeof conf);
    gm_meta_text(d, "torch_version", ver, sizeof ver);
    gm_meta_text(d, "torch_history_from", from, sizeof from); /* gpumem: its tracker's trace */
    gm_torch_retries_t rt;
    gm_torch_retries(d, &rt);
    gm_torch_reset reset = lf.reset; /* the whole run's peaks are not max_memory_*() after a
                                        reset: the device's whose figures these are (lead_make) */
    if (o->json) {
        fprintf(out, ",\"torch\":{\"peak_allocated\":%" PRIu64 ",\"peak_reserved\":%" PRIu64
                     ",\"peak_requested\":%" PRIu64 ",\"peak_allocated_seq\":%" PRIu64
                     ",\"peak_reserved_seq\":%" PRIu64 ",\"peak_requested_seq\":%" PRIu64
                     ",\"tensors\":%zu,",
                pv->peak_allocated, pv->peak_reserved, pv->peak_requested, pv->peak_allocated_seq,
                pv->peak_reserved_seq, pv->peak_requested_seq, tv->nallocs);
        print_devices_json(out, &whole, busy, d);
        fputs(",\"version\":", out);
        gm_json_str(out, ver);
        fputs(",\"conf\":", out);
        gm_json_str(out, conf);
        fputc(',', out);
        gm_torch_reset_json(out, &reset);
        fprintf(out, ",\"blocks_guessed\":%" PRId64 ",\"history_truncated\":%s",
                gm_meta_int(d, "torch_blocks_guessed", 0),
                gm_meta_int(d, "torch_history_truncated", 0) ? "true" : "false");
        fprintf(out, ",\"alloc_retries\":{\"count\":%" PRIu64 ",\"segments_freed\":%" PRIu64
                     ",\"bytes_freed\":%" PRIu64 ",\"first_seq\":%" PRIu64 ",\"last_seq\":%" PRIu64 ",\"exact\":%s}",
                rt.count, rt.segments, rt.bytes, rt.first_seq, rt.last_seq, rt.exact ? "true" : "false");
        fprintf(out, ",\"device_peak\":{\"device\":");
        if (tdev >= 0) fprintf(out, "%d", tdev);
        else fputs("null", out);
        fprintf(out, ",\"seq\":%" PRIu64 ",\"compared_at\":%" PRIu64 ",\"reserved\":%" PRIu64
                     ",\"torch_reserved\":%" PRIu64
                     ",\"outside_torch\":%" PRIu64 ",\"gpumem_cache\":%" PRIu64 ",\"other_vmm\":%" PRIu64
                     ",\"torch_less_than_its_peak\":%" PRIu64 ",",
                df.seq, df.at, df.device, df.torch_then, df.outside, df.cache, df.other, less);
        print_groups_json(out, "outside_by_site", go, no, o->top, ot, "site");
        fprintf(out, "},\"peak\":{\"seq\":%" PRIu64 ",\"live_bytes\":%" PRIu64 ",\"live_count\":%" PRIu64 ",",
                pv->peak_allocated_seq, total, count);
        print_groups_json(out, "by_phase", gp, np, o->top, total, "phase");
        fputc(',', out);
        print_groups_json(out, "by_site", gs, ns, o->top, total, "site");
        fputc(',', out);
        print_groups_json(out, "by_name", gn, nn, o->top, total, "name");
        fputs("},", out);
        print_categories(d, &v, o, out, "PyTorch's tensors by category", "torch");
        fputc('}', out);
    } else {
        char a[32], r[32], q[32], g[32];
        gm_fmt_bytes(pv->peak_allocated, a, sizeof a);
        gm_fmt_bytes(pv->peak_reserved, r, sizeof r);
        gm_fmt_bytes(pv->peak_requested, q, sizeof q);
        fprintf(out, "\nPyTorch's allocator (%s, merged: torch %s%s%s)\n",
                strcmp(from, "gpumem") ? "its own memory history" : "its trace, taken by gpumem's tracker",
                ver[0] ? ver : "?", conf[0] ? ", PYTORCH_CUDA_ALLOC_CONF=" : "", conf);
        fprintf(out, "  peak requested      %s (%" PRIu64 " bytes, at event %" PRIu64 "; %s)\n", q,
                pv->peak_requested, pv->peak_requested_seq, reset.count ? "the whole run" : "memory_stats' requested_bytes");
        fprintf(out, "  peak allocated      %s (%" PRIu64 " bytes, at event %" PRIu64 "; %s)\n", a,
                pv->peak_allocated, pv->peak_allocated_seq, reset.count ? "the whole run" : "max_memory_allocated");
        fprintf(out, "  peak reserved       %s (%" PRIu64 " bytes, at event %" PRIu64 "; %s)\n", r,
                pv->peak_reserved, pv->peak_reserved_seq, reset.count ? "the whole run" : "max_memory_reserved");
        if (reset.count) since_reset_line(out, &reset, busy, "", "");
        fprintf(out, "  utilization         %.1f%%, %zu tensors\n", pct(pv->peak_allocated, pv->peak_reserved),
                tv->nallocs);
        print_retries_text(out, &rt);
        print_devices_text(out, &whole, busy, "max_memory_allocated(d), max_memory_reserved(d)", d);
        if (gm_meta_int(d, "torch_history_truncated", 0))
            fprintf(out, "  note                PyTorch's history is a ring and it was full: its first entries are lost, "
                         "so these peaks may miss the start (record again with GPUMEM_TORCH_MAX_ENTRIES raised)\n");
        int64_t guessed = gm_meta_int(d, "torch_blocks_guessed", 0);
        if (guessed > 0)
            fprintf(out, "  note                %" PRId64 " block sizes were not where the history placed them "
                         "(rounded requests instead)\n", guessed);
        gm_fmt_bytes(gap, g, sizeof g);
        char d1[32], d2[32], d3[32], d4[32], d5[32];
        gm_fmt_bytes(df.device, d1, sizeof d1);
        gm_fmt_bytes(df.torch_then, d2, sizeof d2);
        gm_fmt_bytes(df.outside, d3, sizeof d3);
        gm_fmt_bytes(df.cache, d4, sizeof d4);
        gm_fmt_bytes(less, d5, sizeof d5);
        char caught[96] = "";
        if (df.at != df.seq) /* the segment mapped at the peak, once PyTorch recorded it */
            snprintf(caught, sizeof caught, " (event %" PRIu64 ", once it recorded the segment mapped at the peak)",
                     df.at);
        char on[32] = "";
        if (tdev >= 0) snprintf(on, sizeof on, " on device %d", tdev);
        fprintf(out, "  the device's peak reserved%s (%s, event %" PRIu64 ") is %s more: PyTorch's reserve then %s%s,\n"
                     "    outside PyTorch's allocator %s, gpumem's cache and rounding %s",
                on, d1, df.seq, g, d2, caught, d3, d4);
        if (df.other) {
            char d6[32];
            gm_fmt_bytes(df.other, d6, sizeof d6);
            fprintf(out, ", other program VMM %s", d6);
        }
        fprintf(out, "; PyTorch held %s less then than at its own peak\n", d5);
        if (no) print_groups_text(out, "outside PyTorch's allocator at the device's peak, by call site", go, no,
                                  o->top < 5 ? o->top : 5, ot);
        gm_fmt_bytes(total, a, sizeof a);
        fprintf(out, "  tensors live at PyTorch's peak allocated: %s in %" PRIu64 "\n", a, count);
        print_groups_text(out, "by phase", gp, np, o->top, total);
        print_groups_text(out, "by call site", gs, ns, o->top, total);
        print_groups_text(out, "by tensor name (digits as *)", gn, nn, o->top, total);
        print_categories(d, &v, o, out, "  PyTorch's tensors by category", "torch");
    }
    free(gp), free(gs), free(gn), free(go);
    lead_free(&lf);
}

/* The allocator settings the program ran with but did not use (meta ignored.NAME, written by
 * libgpumem.so as it said so on stderr): JSON "ignored_settings" {NAME: why} ({} for none), or
 * a line each under the summary. */
static void print_ignored(gm_db *d, const gm_opts *o, FILE *out) {
    sqlite3_stmt *q = NULL;
    int n = 0;
    if (o->json) fputs(",\"ignored_settings\":{", out);
    if (sqlite3_prepare_v2(d->db, "SELECT substr(key, 9), value FROM meta WHERE key LIKE 'ignored.%' ORDER BY key",
                           -1, &q, NULL) == SQLITE_OK) {
        while (sqlite3_step(q) == SQLITE_ROW) {
            const char *k = (const char *)sqlite3_column_text(q, 0), *v = (const char *)sqlite3_column_text(q, 1);
            if (!k || !v) continue;
            if (o->json) {
                if (n) fputc(',', out);
                gm_json_str(out, k);
                fputc(':', out);
                gm_json_str(out, v);
            } else {
                fprintf(out, "  ignored setting     %s %s\n", k, v);
            }
            n++;
        }
    }
    sqlite3_finalize(q);
    if (o->json) fputc('}', out);
}

int gm_report(gm_db *d, gm_model *m, const gm_opts *o, FILE *out) {
    summary s;
    make_summary(d, m, &s);
    /* several devices: the peaks, attribution, categories and idle memory are the busiest
     * device's (a sum of devices is a figure no device had), each device's peaks listed, and an
     * OOM's tables its own device's */
    gm_model *whole = m;
    lead_figs lf;
    lead_make(d, m, LEAD_DEVICE, &lf);
    int busy = lf.dev_busy;
    m = lf.dev;
    labels l;
    labels_make(m, &l, 1); /* "step N" grouped as "step *": one row per phase, not per step */
    group *gs = NULL, *gp = NULL;
    uint64_t total, count;
    alloc_set peak = select_allocs(m, SET_LIVE_AT, m->peak_allocated_seq);
    size_t ns = group_allocs(m, &l, &peak, BY_SITE, &gs, &total, &count);
    size_t np = group_allocs(m, &l, &peak, BY_PHASE, &gp, &total, &count);
    group *gn = NULL;
    size_t nn = group_allocs(m, &l, &peak, BY_NAME, &gn, &total, &count);
    int named = nn > 1 || (nn == 1 && strcmp(gn[0].key, "(unnamed)") != 0);
    group *gop = NULL; /* by op: shown when some live allocation is inside an op range */
    size_t nop = group_allocs(m, &l, &peak, BY_OP, &gop, &total, &count);
    free(peak.idx);
    int ops = nop > 1 || (nop == 1 && strcmp(gop[0].key, "(no op)") != 0);
    double util = pct(m->peak_allocated, m->peak_reserved);
    /* the events the program's threads recorded: not what the merge added after the run */
    uint64_t app_events = m->events;
    for (unsigned k = 0; k < sizeof m->count_kind / sizeof m->count_kind[0]; k++)
        if (rec_kind_merged(k)) app_events -= m->count_kind[k] < app_events ? m->count_kind[k] : app_events;
    uint64_t app_total_ns = s.app_ns > 0 ? (uint64_t)s.app_ns * app_events : 0;
    gm_compiled cc; /* torch.compile: what the recording cannot see of a compiled region */
    gm_compiled_read(d, &cc);
    if (o->json) {
        fprintf(out, "{\"database\":");
        gm_json_str(out, d->path);
        fprintf(out, ",\"complete\":%s,\"schema\":\"%d.%d\",", d->closed && !d->damage[0] ? "true" : "false",
                d->schema_major, d->schema_minor);
        fputs("\"damaged\":", out); /* why it is not complete, where pages of it were overwritten */
        gm_json_str(out, d->damage[0] ? d->damage : NULL);
        fputc(',', out);
        fputs("\"state\":", out);
        gm_json_str(out, d->state[0] ? d->state : NULL);
        char ending[256]; /* null, or why the program did not run to its end (gm_ending_line) */
        gm_ending_line(d, ending, sizeof ending);
        fputs(",\"ending\":", out);
        gm_json_str(out, ending[0] ? ending : NULL);
        fputs(",\"failure\":", out);
        gm_json_str(out, d->failure[0] ? d->failure : NULL);
        print_ignored(d, o, out);
        fputs(",\"summary\":{", out);
        fprintf(out, "\"events\":%" PRIu64 ",\"peak_requested\":%" PRIu64 ",\"peak_requested_seq\":%" PRIu64
                     ",\"peak_allocated\":%" PRIu64 ",\"peak_reserved\":%" PRIu64
                     ",\"utilization\":%.4f,\"allocations\":%" PRIu64 ",\"frees\":%" PRIu64
                     ",\"async_allocations\":%" PRIu64 ",\"host_allocations\":%" PRIu64
                     ",\"cache_hit_rate\":",
                m->events, m->peak_requested, m->peak_requested_seq, m->peak_allocated, m->peak_reserved,
                util / 100, s.n_alloc, s.n_free,
                s.n_async, s.n_host);
        if (s.hit_rate >= 0) fprintf(out, "%.4f", s.hit_rate / 100);
        else fputs("null", out);
        fprintf(out, ",\"host_bytes\":%" PRIu64 ",\"peak_host_bytes\":%" PRIu64 ",\"managed_allocations\":%" PRIu64
                     ",\"managed_bytes\":%" PRIu64 ",\"peak_managed_bytes\":%" PRIu64,
                s.host_bytes, s.host_peak, s.n_managed, s.managed_bytes, s.managed_peak);
        /* of the pinned host blocks alive at the end: PyTorch's host cache's (never leaks), and
         * those tensors still held (leaks' .host_cache, .host_held) */
        uint64_t hcb, hcn, hhb, hhn;
        host_totals(m->host_cache, m->nhost_cache, &hcb, &hcn);
        host_totals(m->host_held, m->nhost_held, &hhb, &hhn);
        fprintf(out, ",\"host_cache_bytes\":%" PRIu64 ",\"host_cache_blocks\":%" PRIu64 ",\"host_held_bytes\":%" PRIu64
                     ",\"host_held_blocks\":%" PRIu64, hcb, hcn, hhb, hhn);
        /* of those held: PyTorch's, where its cache was never emptied (leaks' .host_cache_unknown) */
        host_totals(m->host_unknown, m->nhost_unknown, &hhb, &hhn);
        fprintf(out, ",\"host_cache_unknown_bytes\":%" PRIu64 ",\"host_cache_unknown_blocks\":%" PRIu64, hhb, hhn);
        /* PyTorch's cuBLAS workspaces alive at the end, freed by gpumem's hooks (leaks'
         * .torch_workspaces) */
        {
            gm_model lv = gm_model_leak_view(m);
            gm_alloc *ws;
            size_t nws = view_workspaces(&lv, &ws);
            host_totals(ws, nws, &hhb, &hhn);
            free(ws);
            fprintf(out,
                    ",\"torch_workspace_bytes\":%" PRIu64 ",\"torch_workspace_blocks\":%" PRIu64,
                    hhb, hhn);
            /* cuBLAS's own blocks of PyTorch's handles, alive at the end (leaks' .cublas_handles) */
            nws = view_cublas_handles(&lv, &ws);
            host_totals(ws, nws, &hhb, &hhn);
            free(ws);
            fprintf(out, ",\"cublas_handle_bytes\":%" PRIu64 ",\"cublas_handle_blocks\":%" PRIu64, hhb, hhn);
        }
        /* the program's own VMM: held outside the allocator, in none of the peaks above */
        fprintf(out, ",\"peak_program_vmm\":%" PRIu64 ",\"peak_device\":%" PRIu64, m->peak_vmm, m->peak_device);
        fprintf(out, ",\"driver_calls_counted\":%s", s.driver_calls_counted ? "true" : "false");
        fprintf(out, ",\"driver_calls\":%" PRIu64 ",\"ooms\":%" PRIu64 ",\"dropped_events\":%" PRId64
                     ",\"foreign_frees\":%" PRIu64 ",\"interior_frees\":%" PRIu64
                     ",\"double_frees\":%" PRIu64 ",\"app_ns_per_event\":",
                s.driver_calls, s.n_oom, s.dropped, s.n_foreign, s.n_interior, s.n_double);
        if (s.app_ns >= 0) fprintf(out, "%" PRId64, s.app_ns);
        else fputs("null", out); /* not measured */
        fprintf(out, ",\"writer_cpu_ns\":%" PRId64 ",\"db_bytes\":%" PRId64 ",\"duration_s\":%.6f,",
                s.writer_cpu_ns, s.db_bytes, s.seconds);
        print_devices_json(out, whole, busy, NULL);
        fputs("},", out);
        print_place_json(out, "peak_requested_at", m->peak_requested_seq, place_of(m, &l, m->peak_requested_seq));
        fputc(',', out);
        print_place_json(out, "peak_allocated_at", m->peak_allocated_seq, place_of(m, &l, m->peak_allocated_seq));
        fputc(',', out);
        fprintf(out, "\"peak\":{\"seq\":%" PRIu64 ",\"live_bytes\":%" PRIu64 ",\"live_count\":%" PRIu64 ",",
                m->peak_allocated_seq, total, count);
        print_groups_json(out, "by_phase", gp, np, o->top, total, "phase");
        fputc(',', out);
        print_groups_json(out, "by_site", gs, ns, o->top, total, "site");
        fputc(',', out);
        print_groups_json(out, "by_name", gn, named ? nn : 0, o->top, total, "name");
        fputc(',', out);
        print_groups_json(out, "by_op", gop, ops ? nop : 0, o->top, total, "op");
        fputs("},", out);
        print_categories(d, m, o, out, "By category", "device");
        fputc(',', out);
        print_idle(d, m, &l, o, out);
        print_device_used(d, m, o, out);
        print_torch(d, m, &l, o, out);
        print_graphs(d, m, o, out);
        gm_compiled_json(&cc, out);
        print_bad_accesses(d, m, &l, o, out);
        fprintf(out, ",\"ooms\":[");
    } else {
        char a[32], b[32], c[32];
        print_header(d, m, out, "report");
        fprintf(out, "\nSummary\n");
        gm_fmt_bytes(m->peak_allocated, a, sizeof a);
        gm_fmt_bytes(m->peak_reserved, b, sizeof b);
        gm_fmt_bytes(m->peak_requested, c, sizeof c);
        if (!m->peak_requested && !m->peak_allocated) { /* no peak to place: nothing was allocated */
            /* a program that maps its own memory (PyTorch with expandable segments) allocated, but
             * none of it through an allocation: said so, not "nothing" */
            fprintf(out, "  peak requested      0 B (%s)\n",
                    m->peak_vmm ? "no device allocation: the program's device memory was its own VMM, below"
                                : "nothing was allocated");
            fprintf(out, "  peak allocated      0 B\n");
        } else {
            fprintf(out, "  peak requested      %s (%" PRIu64 " bytes asked for by the program, at event %" PRIu64 ")\n",
                    c, m->peak_requested, m->peak_requested_seq);
            print_place_text(out, place_of(m, &l, m->peak_requested_seq));
            fprintf(out, "  peak allocated      %s (%" PRIu64 " bytes in the allocator's rounded blocks, at event %" PRIu64
                         ")\n", a, m->peak_allocated, m->peak_allocated_seq);
            if (m->peak_allocated_seq != m->peak_requested_seq)
                print_place_text(out, place_of(m, &l, m->peak_allocated_seq));
        }
        fprintf(out, "  peak reserved       %s%s\n", b,
                m->have_segments ? ""
                : m->nallocs     ? " (no segment events: allocations went straight to the driver)"
                : m->peak_vmm    ? " (gpumem's allocator reserved nothing: see program VMM)"
                                 : " (the recording holds no allocation)");
        if (m->peak_reserved) fprintf(out, "  utilization         %.1f%% (peak allocated / peak reserved)\n", util);
        else fprintf(out, "  utilization         - (nothing was reserved)\n");
        print_devices_text(out, whole, busy, "allocated and reserved by gpumem's account", NULL);
        if (m->peak_vmm) {
            char v[32], dv[32];
            gm_fmt_bytes(m->peak_vmm, v, sizeof v);
            gm_fmt_bytes(m->peak_device, dv, sizeof dv);
            fprintf(out, "  program VMM         %s at its peak (cuMemMap: held outside gpumem's allocator, in none "
                         "of the peaks above; device-wide peak %s)\n", v, dv);
        }
        fprintf(out, "  allocations         %" PRIu64 " (%" PRIu64 " stream-ordered), frees %" PRIu64
                     ", pinned host %" PRIu64 ", managed %" PRIu64 "\n",
                s.n_alloc, s.n_async, s.n_free, s.n_host, s.n_managed);
        held_line(out, "pinned host", "page-locked host memory", s.n_host, s.host_bytes, s.host_peak);
        host_end_line(out, m);
        workspace_end_line(out, m);
        held_line(out, "managed", "unified memory", s.n_managed, s.managed_bytes, s.managed_peak);
        if (s.hit_rate >= 0) fprintf(out, "  cache hit rate      %.1f%% (from %s)\n", s.hit_rate, s.hit_source);
        else fprintf(out, "  cache hit rate      unknown (no allocator stats recorded)\n");
        if (s.driver_calls_counted)
            fprintf(out, "  driver calls        %" PRIu64 "%s%s%s\n", s.driver_calls, s.driver_by_fn[0] ? " (" : "",
                    s.driver_by_fn, s.driver_by_fn[0] ? ")" : "");
        else
            fprintf(out, "  driver calls        unknown (counted at exit); %" PRIu64 " segment events, each one or "
                         "more calls\n", s.driver_calls);
        fprintf(out, "  OOMs                %" PRIu64 "\n", s.n_oom);
        print_ignored(d, o, out);
        if (s.n_foreign || s.n_double)
        {
            char in[48] = "";
            if (s.n_interior)
                snprintf(in, sizeof in, " (%" PRIu64 " interior)", s.n_interior);
            fprintf(out, "  bad frees           %" PRIu64 " foreign%s, %" PRIu64 " double\n", s.n_foreign, in, s.n_double);
        }
        if (m->count_kind[REC_BAD_ACCESS])
            fprintf(out, "  bad accesses        %" PRIu64 " copies and memsets past an allocation's end or into "
                         "freed memory, refused (below)\n", m->count_kind[REC_BAD_ACCESS]);
        fprintf(out, "  dropped events      %" PRId64 "%s\n", s.dropped,
                !s.dropped                          ? ""
                : strcmp(d->state, "failed") == 0 ? " (the recording failed: see the note above; reports undercount)"
                                                    : " (the ring was full: raise GPUMEM_RING; reports undercount)");
        gm_fmt_bytes((uint64_t)s.db_bytes, c, sizeof c);
        fprintf(out, "  recording overhead  ");
        if (s.app_ns >= 0) fprintf(out, "%" PRId64 " ns/event on app threads (%.3f s total), ", s.app_ns, (double)app_total_ns / 1e9);
        else fputs("app threads not measured (no thread made 64 events, or the run did not end), ", out);
        if (s.writer_cpu_ns >= 0) fprintf(out, "writer thread %.3f s CPU, ", (double)s.writer_cpu_ns / 1e9);
        fprintf(out, "file %s (%.0f bytes/event)\n", c, m->events ? (double)s.db_bytes / (double)m->events : 0.0);
        print_torch(d, m, &l, o, out);
        gm_compiled_text(&cc, out);
        print_graphs(d, m, o, out);
        gm_fmt_bytes(total, a, sizeof a);
        fprintf(out, "\nPeak attribution: live at the peak: %s in %" PRIu64 " allocations\n", a, count);
        print_groups_text(out, "by NVTX phase", gp, np, o->top, total);
        print_groups_text(out, "by call site", gs, ns, o->top, total);
        if (named) print_groups_text(out, "by tensor name (gpumem_name / NVTX naming; digits as *)", gn, nn, o->top, total);
        if (ops) print_groups_text(out, "by op (innermost op range: PyTorch's emit_nvtx(), \"ns::op\" names)", gop, nop, o->top, total);
        print_categories(d, m, o, out, m->torch.present == 1 ? "By category, the device's allocations" : "By category",
                         "device");
        print_idle(d, m, &l, o, out);
        print_device_used(d, m, o, out);
        print_bad_accesses(d, m, &l, o, out);
        fprintf(out, "\nOOM forensics\n");
        if (!m->nooms && !s.n_oom) fprintf(out, "  no out-of-memory errors\n");
    }
    uint64_t unit = m->nooms ? map_unit(d) : 0;
    for (size_t i = 0; i < m->nooms; i++) {
        const gm_oom *oo = &m->ooms[i];
        oom_cause cause;
        gm_oom_bound from = gm_oom_limit_from(d, oo->limit, oo->limit_flags);
        oom_explain(oo, from, unit, m->torch.present == 2, &cause);
        group *go = NULL, *gx = NULL;
        uint64_t ot, oc, xt = 0, xc;
        /* what is live at the OOM is the program's tensors where PyTorch's history is merged
         * (present 1: the device's allocations are PyTorch's segments then, made at whichever
         * line first needed one, cached and cut up for others since); the allocations outside
         * PyTorch's segments (libraries' workspaces) are listed apart */
        int tensors = whole->torch.present == 1;
        size_t no = 0, kept;
        for (int pass = !tensors; pass < 2 && !no; pass++) {
            /* no tensor of PyTorch's on the OOM's device (a C library's device): its allocations */
            tensors = pass == 0;
            gm_model tw = tensors ? gm_model_torch_view(whole) : *whole;
            alloc_set at_oom = select_allocs(&tw, SET_LIVE_AT, oo->seq);
            /* memory on another device cannot help this one: the OOM's device's allocations only */
            kept = 0;
            for (size_t k = 0; k < at_oom.n; k++)
                if (tw.allocs[at_oom.idx[k]].device == oo->device) at_oom.idx[kept++] = at_oom.idx[k];
            at_oom.n = kept;
            free(go), go = NULL;
            no = group_allocs(&tw, &l, &at_oom, BY_SITE, &go, &ot, &oc);
            free(at_oom.idx);
        }
        size_t nx = 0;
        if (tensors) {
            alloc_set outside = select_allocs(whole, SET_LIVE_AT, oo->seq);
            kept = 0;
            for (size_t k = 0; k < outside.n; k++) {
                const gm_alloc *a = &whole->allocs[outside.idx[k]];
                if (a->device == oo->device && !(a->flags & GM_ALLOC_FW_SEGMENT)) outside.idx[kept++] = outside.idx[k];
            }
            outside.n = kept;
            if (kept) nx = group_allocs(whole, &l, &outside, BY_SITE, &gx, &xt, &xc);
            free(outside.idx);
        }
        if (o->json) {
            fprintf(out,
                    "%s{\"seq\":%" PRIu64 ",\"device\":%d,\"requested\":%" PRIu64
                    ",\"allocated\":%" PRIu64 ",\"reserved\":%" PRIu64 ",\"free_cached\":%" PRIu64
                    ",\"largest_free\":%" PRIu64 ",\"device_free\":%" PRIu64
                    ",\"device_total\":%" PRIu64 ",\"limit\":",
                    i ? "," : "", oo->seq, oo->device, oo->requested, oo->allocated, oo->reserved,
                    oo->free_cached, oo->largest_free, oo->device_free, oo->device_total);
            if (oo->limit == GM_NO_LIMIT) fputs("null", out); /* none; 0 is a limit of 0 bytes */
            else fprintf(out, "%" PRIu64, oo->limit);
            fputs(",\"limit_from\":", out);
            gm_json_str(out, gm_oom_json(from));
            fputs(",\"advice\":", out);
            gm_json_str(out, cause.advice);
            fprintf(out, ",\"cause\":\"%s\",\"shortfall\":%" PRIu64 ",\"map_unit\":%" PRIu64,
                    cause.kind, cause.shortfall, unit);
            fputs(",\"name\":", out);
            gm_json_str(out, oo->name ? gm_str(m, oo->name) : NULL);
            fputs(",\"phase\":", out);
            gm_json_str(out, oom_phase(m, oo));
            fputs(",\"site\":", out);
            gm_json_str(out, oo->stack ? site_of(m, &l, oo->stack, NULL) : NULL);
            char where[400], src[160];
            int main_thread, py = oom_python(d, m, oo, i == 0, where, sizeof where, src, sizeof src, &main_thread);
            fputs(",\"python_line\":", out);
            gm_json_str(out, py ? where : NULL);
            fputs(",\"source\":", out);
            gm_json_str(out, py && src[0] ? src : NULL);
            fputc(',', out);
            print_groups_json(out, "live_by_site", go, no, o->top, ot, "site");
            fprintf(out, ",\"live_of\":\"%s\",", tensors ? "tensors" : "allocations");
            print_groups_json(out, "outside_torch_by_site", gx, nx, o->top, xt, "site");
            fputc('}', out);
        } else {
            char r[32], al[32], re[32], fc[32], lf[32];
            gm_fmt_bytes(oo->requested, r, sizeof r);
            gm_fmt_bytes(oo->allocated, al, sizeof al);
            gm_fmt_bytes(oo->reserved, re, sizeof re);
            gm_fmt_bytes(oo->free_cached, fc, sizeof fc);
            gm_fmt_bytes(oo->largest_free, lf, sizeof lf);
            const char *nm = oo->name ? gm_str(m, oo->name) : NULL, *ph = oom_phase(m, oo);
            fprintf(out, "  OOM %zu at event %" PRIu64 " on device %d: requested %s (%" PRIu64 " bytes)%s%s%s%s\n",
                    i + 1, oo->seq, oo->device, r, oo->requested, nm ? " for " : "", nm ? nm : "",
                    ph ? " in " : "", ph ? ph : "");
            if (oo->stack) fprintf(out, "    at %s\n", site_of(m, &l, oo->stack, NULL));
            char where[400], src[160];
            int main_thread;
            if (oom_python(d, m, oo, i == 0, where, sizeof where, src, sizeof src, &main_thread)) {
                if (main_thread) /* the request came from PyTorch's C++, under this line */
                    fprintf(out, "    the Python line: %s%s%s%s (PyTorch's C++ made the request under it, e.g. "
                                 "autograd's backward)\n",
                            where, src[0] ? ": `" : "", src, src[0] ? "`" : "");
                else
                    fprintf(out, "    the tensor: %s%s%s (the Python line: %s)\n", src[0] ? "`" : "",
                            src[0] ? src : "made", src[0] ? "`" : "", where);
            }
            fprintf(out, "    allocated %s, reserved %s, free in fragments %s, largest free block %s", al, re, fc, lf);
            char li[32] = "";
            if (oo->limit != GM_NO_LIMIT) {
                gm_fmt_bytes(oo->limit, li, sizeof li);
                /* who set it, where it bound (a limit the device undercut is not what to change) */
                const char *knob = oo->limit <= oo->reserved + oo->device_free ? gm_oom_knob(from) : NULL;
                fprintf(out, ", limit %s%s%s%s", li, knob || oo->fraction ? " (" : "",
                        knob ? knob : oo->fraction ? "PyTorch's per-process memory fraction" : "",
                        knob || oo->fraction ? ")" : "");
            }
            if (oo->device_total || oo->device_free) { /* an import knows the free bytes only */
                char df[32], dt[32];
                gm_fmt_bytes(oo->device_free, df, sizeof df);
                gm_fmt_bytes(oo->device_total, dt, sizeof dt);
                fprintf(out, ", device free %s%s%s", df, oo->device_total ? " of " : "",
                        oo->device_total ? dt : "");
            }
            char sf[32];
            gm_fmt_bytes(cause.shortfall, sf, sizeof sf);
            fprintf(out,
                    "\n    binding constraint: %s%s%s%s; the request fell short by %s (%" PRIu64
                    " bytes)\n",
                    cause.kind,
                    !strcmp(cause.kind, "fraction")
                        ? " (PyTorch's per-process memory fraction allows "
                        : "",
                    !strcmp(cause.kind, "fraction") ? li : "",
                    !strcmp(cause.kind, "fraction") ? ")" : "", sf, cause.shortfall);
            fprintf(out, "    what to change: %s\n", cause.advice);
            print_groups_text(out, tensors ? "live at the OOM, by call site (PyTorch's tensors)" : "live at the OOM, by call site",
                              go, no, o->top < 5 ? o->top : 5, ot);
            if (nx)
                print_groups_text(out, "outside PyTorch's allocator at the OOM, by call site", gx, nx,
                                  o->top < 5 ? o->top : 5, xt);
        }
        free(go), free(gx);
    }
    if (o->json) fputs("]}\n", out);
    free(gs), free(gp), free(gn), free(gop);
    labels_free(m, &l);
    lead_free(&lf);
    return 0;
}

/* PyTorch's figures in record's summary: report's "PyTorch's allocator" block in one line, from
 * the same lead_figs (its busiest device's, since the reset where the program reset them). */
static void summary_torch_line(gm_model *m, const lead_figs *f, FILE *out) {
    char a[32], r[32], on[64] = "";
    if (m->torch.present == 2) { /* --allocator gpumem: report's "PyTorch through gpumem" */
        char q[32];
        int hb, hn;
        gm_dev_figs hf = hook_lead(&m->torch, m->device_asked - 1, &hb, &hn);
        gm_fmt_bytes(hf.peak_requested, q, sizeof q);
        gm_fmt_bytes(hf.peak_allocated, a, sizeof a);
        if (hb >= 0) snprintf(on, sizeof on, " on device %d (%s of %d)", hb, m->device_asked ? "as --device asked" : "the busiest", hn);
        if (f->reset.count) { /* the figures the program's max_memory_*() read, as report's "since the reset" */
            char ra[32], rr[32];
            gm_fmt_bytes(f->reset.max_allocated, ra, sizeof ra);
            gm_fmt_bytes(f->reset.max_reserved, rr, sizeof rr);
            fprintf(out, "gpumem: PyTorch through gpumem (every tensor served by gpumem's allocator): since the reset "
                         "(reset_peak_memory_stats) %s allocated (max_memory_allocated), %s reserved (max_memory_reserved); "
                         "the whole run%s: peak requested %s, peak allocated %s in gpumem's blocks\n", ra, rr, on, q, a);
            return;
        }
        fprintf(out, "gpumem: PyTorch through gpumem (every tensor served by gpumem's allocator): peak requested %s, "
                     "peak allocated %s in gpumem's blocks%s\n", q, a, on);
        return;
    }
    if (m->torch.present != 1) return;
    const gm_model *v = &f->tv;
    if (f->torch_busy >= 0) {
        int lo, hi, n = gm_model_devices(&f->twhole, &lo, &hi);
        snprintf(on, sizeof on, " on device %d (%s of %d)", f->torch_busy, m->device_asked ? "as --device asked" : "the busiest", n);
    }
    if (f->reset.count) {
        char ra[32], rr[32];
        gm_fmt_bytes(f->reset.max_allocated, ra, sizeof ra);
        gm_fmt_bytes(f->reset.max_reserved, rr, sizeof rr);
        gm_fmt_bytes(v->peak_allocated, a, sizeof a);
        gm_fmt_bytes(v->peak_reserved, r, sizeof r);
        fprintf(out, "gpumem: PyTorch's allocator: since the reset (reset_peak_memory_stats) %s allocated "
                     "(max_memory_allocated), %s reserved (max_memory_reserved); the whole run%s: peak allocated %s, "
                     "peak reserved %s; %zu tensors\n", ra, rr, on, a, r, m->torch.nallocs);
        return;
    }
    gm_fmt_bytes(v->peak_allocated, a, sizeof a);
    gm_fmt_bytes(v->peak_reserved, r, sizeof r);
    fprintf(out, "gpumem: PyTorch's allocator: peak allocated %s (max_memory_allocated), peak reserved %s "
                 "(max_memory_reserved)%s, %.1f%% utilization, %zu tensors\n",
            a, r, on, pct(v->peak_allocated, v->peak_reserved), m->torch.nallocs);
}

int gm_summary_short(gm_db *d, gm_model *m, FILE *out) {
    summary s;
    make_summary(d, m, &s);
    /* the figures report leads with (lead_make): several devices, the busiest device's, named;
     * PyTorch's own, where its history was merged, first: they are the program's */
    lead_figs lf;
    lead_make(d, m, LEAD_DEVICE | LEAD_TORCH, &lf);
    summary_torch_line(m, &lf, out);
    const char *dev = m->torch.present == 1   ? "the device (gpumem's account, PyTorch's segments included): "
                      : m->torch.present == 2 ? "the device (gpumem's account, libraries' own allocations included): "
                                              : "";
    char on[320] = "";
    if (lf.dev_busy >= 0) {
        int lo, hi, ndev = gm_model_devices(m, &lo, &hi), busiest, from = gm_lead_from(m, &busiest);
        char why[256];
        if (from == GM_DEV_TORCH)
            snprintf(on, sizeof on, " on device %d of %d (%s)", lf.dev_busy, ndev, gm_device_why(from, busiest, why, sizeof why));
        else
            snprintf(on, sizeof on, " on device %d (%s of %d)", lf.dev_busy, from == GM_DEV_ASKED ? "as --device asked" : "the busiest", ndev);
    }
    const gm_model *dm = lf.dev;
    char a[32], b[32];
    char c[32];
    gm_fmt_bytes(dm->peak_allocated, a, sizeof a);
    gm_fmt_bytes(dm->peak_reserved, b, sizeof b);
    gm_fmt_bytes(dm->peak_requested, c, sizeof c);
    int failed = strcmp(d->state, "failed") == 0;
    if (!dm->peak_allocated && !dm->peak_reserved && !dm->peak_requested && !dm->peak_vmm && !d->closed && !failed) {
        /* the process ended without closing the recording (kill -9): what it did in the last
         * commit interval is not in the file, so "nothing allocated" would be a guess */
        fprintf(out, "gpumem: %" PRIu64 " allocations committed (%" PRIu64 " frees, %" PRIu64 " OOMs, %" PRId64
                     " dropped events); the last ~100 ms before the program ended were not: the recording was "
                     "not closed\n", s.n_alloc, s.n_free, s.n_oom, s.dropped);
        lead_free(&lf);
        return 0;
    }
    /* the program's own VMM (PyTorch's expandable segments): in none of the peaks, said apart */
    char v[96] = "";
    if (dm->peak_vmm) {
        char vb[32];
        gm_fmt_bytes(dm->peak_vmm, vb, sizeof vb);
        snprintf(v, sizeof v, "program VMM %s at its peak (held outside gpumem's allocator), ", vb);
    }
    /* with events lost (a full disk, a full ring in drop mode) an empty file says nothing of
     * what the program did: its allocations may be among the lost */
    int lost = failed || s.dropped > 0;
    if (!dm->peak_allocated && !dm->peak_reserved && !dm->peak_requested)
        fprintf(out, "gpumem: %s%s%s: %s%" PRIu64 " allocations, %" PRIu64 " frees, %" PRIu64
                     " OOMs, %" PRId64 " dropped events\n", dev,
                lost ? "no allocation was kept (events were lost, not absent)"
                : dm->peak_vmm ? "no device allocation" : "nothing allocated",
                on, v, s.n_alloc, s.n_free, s.n_oom, s.dropped);
    else
        fprintf(out, "gpumem: %speak allocated %s (%s requested), peak reserved %s (%.1f%% utilization)%s, %s%" PRIu64
                     " allocations, %" PRIu64 " frees, %" PRIu64 " OOMs, %" PRId64 " dropped events\n",
                dev, a, c, b, pct(dm->peak_allocated, dm->peak_reserved), on, v, s.n_alloc, s.n_free, s.n_oom,
                s.dropped);
    /* page-locked and managed host memory, in none of the device's peaks: the same figures as
     * report's "pinned host" and "managed" lines (held_line), which the summary had only as a
     * count in report */
    if (s.n_host) held_line_short(out, "pinned host", "page-locked host memory", s.n_host, s.host_bytes, s.host_peak);
    if (s.n_managed) held_line_short(out, "managed", "managed memory", s.n_managed, s.managed_bytes, s.managed_peak);
    /* torch.compile with a cold cache: the peak above may be the autotuning's, said where it is read */
    gm_compiled cc;
    if (gm_compiled_read(d, &cc) && cc.autotune_at_peak) {
        char note[512];
        gm_compiled_note(&cc, note, sizeof note);
        fprintf(out, "gpumem: torch.compile: %s (gpumem report: what a compiled region hides)\n", note);
    }
    lead_free(&lf);
    if (failed)
        fprintf(out, "gpumem: the recording FAILED (%s): only what came before was kept\n",
                d->failure[0] ? d->failure : "unknown error");
    if (!lost) return 1;
    fprintf(out, "gpumem: the counts above are what the database kept, not all the program did");
    if (s.dropped > 0) fprintf(out, " (%" PRId64 " events were lost)", s.dropped);
    fputc('\n', out);
    return 0;
}

/* ---------------------------------------------------------------- leaks */

/* What makes memory grow step by step: the allocations still alive after the last step's last
 * event (even when the program frees them at teardown) whose group (site or name) holds ones made
 * in two steps or more, among them half the steps between the first and the last or more (one at
 * least): step after step made one and kept it through the next. Only the allocations that step
 * after step makes count, not every survivor of the group: an allocation of a step between the
 * first and the last does; one of the first step or the last only where a step between made and
 * kept one of the same size at the same group. The first step makes state lazily (optimizer state,
 * workspaces: PyTorch's first matmul at a line makes cuBLAS's 32 MiB workspace there, at the line
 * whose outputs a loop may leak, and it is not what grows), the last leaves what the next step
 * would have freed (its gradients, before a zero_grad that never came; a final pass's output). A
 * single step's survivor is not growth either (a loop's last input, made before the hooks opened
 * the last step, is the step before it's). An allocation's step is gm_step_index's: one made after
 * a step's range closed (a tensor kept after opt.step()) is that step's; one made before the
 * first step began (the first iteration's, made before its forward opened step 1) is the first
 * step's, on the first step's rule (it was no step's: a loop keeping a tensor made at the top of
 * each of 4 iterations read as 3). *steps_lo and *steps_hi get the first and last step number of
 * what is kept. Grouped by site or name. */
typedef struct kept_ent {
    group g;
    long step;     /* index into m->steps */
    int counts;    /* made by the per-step pattern (see above) */
} kept_ent;
static int cmp_kept(const void *a, const void *b) {
    const kept_ent *x = a, *y = b;
    int c = strcmp(x->g.key, y->g.key);
    return c ? c : (x->step > y->step) - (x->step < y->step);
}
/* by group, then size: a first or last step's allocation is matched with a step between's */
static int cmp_kept_size(const void *a, const void *b) {
    const kept_ent *x = a, *y = b;
    int c = strcmp(x->g.key, y->g.key);
    if (c) return c;
    if (x->g.bytes != y->g.bytes) return x->g.bytes < y->g.bytes ? -1 : 1;
    return (x->step > y->step) - (x->step < y->step);
}
static size_t group_kept(const gm_model *m, labels *l, int by, group **out, uint64_t *total,
                         uint64_t *count, int64_t *steps_lo, int64_t *steps_hi, alloc_set *sel) {
    *out = NULL;
    sel->idx = NULL, sel->n = 0;
    *total = *count = 0;
    *steps_lo = INT64_MAX, *steps_hi = INT64_MIN;
    if (m->nsteps < 2) return 0;
    uint64_t last_end = 0;
    for (size_t i = 0; i < m->nsteps; i++)
        if (m->steps[i].end_seq > last_end) last_end = m->steps[i].end_seq;
    size_t n = 0, cap = 0;
    kept_ent *e = NULL;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (a->death && a->death <= last_end) continue;
        if (a->flags & GM_ALLOC_CUBLAS_HANDLE) continue; /* cuBLAS's, for PyTorch's handles */
        long si = gm_step_index(m, a);
        if (si < 0) si = 0; /* before the first step: the first step's */
        if (n == cap) {
            size_t c = cap ? cap * 2 : 64;
            kept_ent *ne = realloc(e, c * sizeof *ne);
            if (!ne) break;
            e = ne, cap = c;
        }
        group *g = &e[n].g;
        g->key = by == BY_SITE ? site_of(m, l, a->stack, NULL) : name_of(m, l, a->name);
        g->phase = phase_of(m, l, a->range);
        g->mixed = 0;
        g->bytes = a->requested;
        g->count = 1;
        g->sample = i;
        e[n].step = si;
        e[n++].counts = si > 0 && (size_t)si + 1 < m->nsteps;
    }
    /* a first or last step's allocation counts where a step between kept one of its group and size */
    if (n) gm_sort(e, n, sizeof *e, cmp_kept_size);
    for (size_t i = 0, j; i < n; i = j) {
        int between = 0;
        for (j = i; j < n && strcmp(e[j].g.key, e[i].g.key) == 0 && e[j].g.bytes == e[i].g.bytes; j++)
            between |= e[j].counts;
        for (size_t x = i; x < j; x++)
            e[x].counts |= between;
    }
    /* the groups whose allocations come from two steps or more, kept */
    if (n) gm_sort(e, n, sizeof *e, cmp_kept);
    group *g = n ? malloc(n * sizeof *g) : NULL;
    sel->idx = n ? malloc(n * sizeof *sel->idx) : NULL;
    if (!sel->idx) free(g), g = NULL;
    size_t k = 0;
    for (size_t i = 0, j; g && i < n; i = j) {
        /* the distinct steps that made some of them, and those between the first and the last */
        size_t made_in = 0, steps = 0, middle = m->nsteps - 2;
        long prev = -1;
        for (j = i; j < n && strcmp(e[j].g.key, e[i].g.key) == 0; j++) {
            if (!e[j].counts || e[j].step == prev) continue;
            prev = e[j].step, steps++;
            made_in += e[j].step > 0 && (size_t)e[j].step + 1 < m->nsteps;
        }
        if (steps < 2 || !made_in || made_in < (middle + 1) / 2) continue;
        for (size_t x = i; x < j; x++) {
            if (!e[x].counts) continue;
            sel->idx[sel->n++] = e[x].g.sample;
            g[k++] = e[x].g;
            *total += e[x].g.bytes;
            (*count)++;
            int64_t st = m->steps[e[x].step].step;
            if (st < *steps_lo) *steps_lo = st;
            if (st > *steps_hi) *steps_hi = st;
        }
    }
    free(e);
    if (sel->n) gm_sort(sel->idx, sel->n, sizeof *sel->idx, cmp_size);
    *out = g;
    return merge_groups(g, k);
}

/* The last step when it is partial: it lacks a phase (a range directly inside a "step N" range:
 * PyTorch's hooks' fwd, bwd, opt, or a user's own) that every step before it has. An evaluation
 * forward after the last optimizer step is one (the hooks open a step at a forward, and only an
 * optimizer step ends one), as is a step an OOM or a kill cut short: its end is not a step's end
 * like the others', and memory at it (an evaluation batch's activations) is no step's growth.
 * Returns 1 with the phase it lacks in missing (the first such, in the ranges' order). */
static int last_step_partial(const gm_model *m, char *missing, size_t sz) {
    enum { NAMES = 32 };
    missing[0] = 0;
    if (m->nsteps < 2) return 0;
    u64map idx = {0}; /* step number -> index into m->steps */
    for (size_t i = 0; i < m->nsteps; i++)
        if (u64map_put(&idx, (uint64_t)m->steps[i].step, i) != 0) return u64map_free(&idx), 0;
    const char *names[NAMES];
    size_t nn = 0, words = (m->nsteps + 63) / 64, in_all = m->nsteps - 1;
    uint64_t *seen = calloc(NAMES * words, sizeof *seen); /* names x steps: a phase in a step */
    size_t count[NAMES] = {0};                             /* steps before the last with it */
    int partial = 0;
    for (size_t k = 0; seen && k < m->nranges; k++) {
        const gm_range *r = &m->ranges[k];
        const gm_range *p = r->step >= 0 && r->parent ? gm_range_of(m, (uint64_t)r->parent) : NULL;
        if (!p || p->step != r->step || !r->path) continue;
        /* p is the "step N" range itself, not a phase inside it */
        const gm_range *pp = p->parent ? gm_range_of(m, (uint64_t)p->parent) : NULL;
        if (pp && pp->step == p->step) continue;
        uint64_t *si = u64map_get(&idx, (uint64_t)r->step);
        if (!si) continue;
        const char *nm = strrchr(r->path, '/');
        nm = nm ? nm + 1 : r->path;
        size_t j = 0;
        while (j < nn && strcmp(names[j], nm) != 0) j++;
        if (j == nn) {
            if (nn == NAMES) continue;
            names[nn++] = nm;
        }
        uint64_t *w = &seen[j * words + *si / 64], bit = 1ull << (*si % 64);
        if (*w & bit) continue;
        *w |= bit;
        if (*si + 1 < m->nsteps) count[j]++;
    }
    size_t last = m->nsteps - 1;
    for (size_t j = 0; seen && j < nn && !partial; j++)
        if (count[j] == in_all && !(seen[j * words + last / 64] & (1ull << (last % 64)))) {
            snprintf(missing, sz, "%s", names[j]);
            partial = 1;
        }
    free(seen);
    u64map_free(&idx);
    return partial;
}

/* Pinned host blocks (or PyTorch's cuBLAS workspaces: view_workspaces) by call site, most bytes
 * first (groups keyed by site_of's call site, merged by merge_groups): those PyTorch's host cache
 * held at exit (m->host_cache: blocks the program
 * freed to PyTorch's CachingHostAllocator, which keeps them until exit or
 * torch._C._host_emptyCache(); never leaks, gpumem's hooks gave them back at exit) or those
 * tensors still held (m->host_held). *sites: malloc'ed, NULL when none or out of memory. */
static size_t host_sites(const gm_model *m, labels *l, const gm_alloc *v, size_t nv, group **sites) {
    *sites = nv ? calloc(nv, sizeof **sites) : NULL;
    if (!*sites) return 0;
    for (size_t i = 0; i < nv; i++)
        /* a workspace is one of the view's own allocations: site_of names its missing stack as the
         * view does (PyTorch's C++ in PyTorch's); a pinned block's is the device recording's */
        (*sites)[i] = (group){.key = v[i].stack || (v[i].flags & GM_ALLOC_WORKSPACE)
                                         ? site_of(m, l, v[i].stack, NULL)
                                         : "(no stack: GPUMEM_STACKS=0)",
                              .bytes = v[i].requested,
                              .count = 1};
    return merge_groups(*sites, nv);
}

/* "KEY":{"bytes":N,"blocks":N,"by_site":[{site, bytes, count}]MORE} */
static void host_json(const gm_model *m, labels *l, const gm_alloc *v, size_t nv, FILE *out, const char *key, int top,
                      const char *more) {
    group *hs;
    uint64_t bytes, blocks;
    size_t n = host_sites(m, l, v, nv, &hs);
    host_totals(v, nv, &bytes, &blocks);
    fprintf(out, "\"%s\":{\"bytes\":%" PRIu64 ",\"blocks\":%" PRIu64 ",\"by_site\":[", key, bytes, blocks);
    for (size_t i = 0; i < n && (int)i < top; i++) {
        fprintf(out, "%s{\"site\":", i ? "," : "");
        gm_json_str(out, hs[i].key);
        fprintf(out, ",\"bytes\":%" PRIu64 ",\"count\":%" PRIu64 "}", hs[i].bytes, hs[i].count);
    }
    fprintf(out, "]%s}", more);
    free(hs);
}

/* HEAD (with the bytes and blocks; nothing when there are none), then v by call site */
static void host_text(const gm_model *m, labels *l, const gm_alloc *v, size_t nv, FILE *out, const char *head, int top) {
    group *hs;
    uint64_t bytes, blocks;
    size_t n = host_sites(m, l, v, nv, &hs);
    host_totals(v, nv, &bytes, &blocks);
    if (blocks) {
        char b[32];
        gm_fmt_bytes(bytes, b, sizeof b);
        fprintf(out, head, b, blocks, blocks == 1 ? "" : "s");
    }
    for (size_t i = 0; i < n && (int)i < top; i++) {
        char b[32];
        gm_fmt_bytes(hs[i].bytes, b, sizeof b);
        fprintf(out, "  %s in %" PRIu64 " block%s at %s\n", b, hs[i].count, hs[i].count == 1 ? "" : "s", hs[i].key);
    }
    if (n > (size_t)top) fprintf(out, "  ... %zu more call sites (use --top N)\n", n - (size_t)top);
    free(hs);
}

static const char host_cache_head[] =
    "\nPyTorch's pinned host cache at exit (not leaks): %s in %" PRIu64 " block%s\n"
    "  pinned host blocks the program had freed to PyTorch's cache, which keeps them until exit\n"
    "  (gpumem gave them back then); if that page-locked memory matters, call\n"
    "  torch._C._host_emptyCache() once the program no longer needs them\n";
/* PyTorch's view lists its device tensors: a pinned block a tensor still holds is said here, and
 * counted in the summary (alive at exit, as leaks' meaning is) */
static const char workspace_head[] =
    "\nPyTorch's cuBLAS workspaces at exit (not leaks): %s in %" PRIu64 " block%s\n"
    "  one per (cuBLAS or cuBLASLt handle, stream) that ran a matmul, which PyTorch keeps for the\n"
    "  process's life (gpumem freed them at exit); if that memory matters, call\n"
    "  torch._C._cuda_clearCublasWorkspaces() once the program is done with matmuls, or make them\n"
    "  smaller (CUBLAS_WORKSPACE_CONFIG=:4096:8, CUBLASLT_WORKSPACE_SIZE in KiB)\n";
static const char cublas_handle_head[] =
    "\ncuBLAS's own memory of PyTorch's cuBLAS handles at exit (not leaks): %s in %" PRIu64 " block%s\n"
    "  made by cuBLAS itself for each handle PyTorch created (cublasCreate's default workspace);\n"
    "  PyTorch keeps its handles for the process's life and has no call that frees them\n";
static const char host_held_head[] =
    "\nPinned host memory still held at exit: %s in %" PRIu64 " block%s\n"
    "  page-locked host memory tensors still held (not PyTorch's cache); PyTorch's view lists its\n"
    "  device tensors above, and these here: both are in the summary below\n";

/* No sign that gpumem's hooks emptied PyTorch's cache (m->host_unknown): the cached blocks are
 * alive at exit, with those tensors held */
static const char host_unknown_head[] =
    "\nPinned host memory alive at exit that PyTorch made, its host cache not emptied: %s in %" PRIu64 " block%s\n"
    "  gpumem's PyTorch hooks did not empty PyTorch's pinned host cache at exit (they did not run:\n"
    "  python -E, -I or -S keeps gpumem record's sitecustomize out; a recording before 2026-12-07\n"
    "  does not say), so blocks the program had freed to that cache cannot be told from blocks\n"
    "  tensors still held: all are counted in the summary below; record again without those\n"
    "  options to tell them apart\n";

int gm_leaks(gm_db *d, gm_model *m, const gm_opts *o, FILE *out, uint64_t *leaked_bytes) {
    labels l;
    labels_make(m, &l, 1);
    group *gs = NULL, *gp = NULL, *gn = NULL;
    uint64_t total, count, held = 0;
    /* leaked bytes are what the program asked for and never gave back (the allocator's
     * rounding is shown beside it) */
    alloc_set end = select_allocs(m, SET_ALIVE_AT_END, 0);
    { /* leaks' rule (gm_alloc_leaked): cuBLAS's blocks of PyTorch's handles are listed apart */
        size_t k = 0;
        for (size_t i = 0; i < end.n; i++)
            if (gm_alloc_leaked(&m->allocs[end.idx[i]])) end.idx[k++] = end.idx[i];
        end.n = k;
    }
    size_t ns = group_allocs(m, &l, &end, BY_SITE | G_REQUESTED | G_PHASE, &gs, &total, &count);
    size_t nn = group_allocs(m, &l, &end, BY_NAME | G_REQUESTED | G_PHASE, &gn, &total, &count);
    size_t np = group_allocs(m, &l, &end, BY_PHASE | G_REQUESTED, &gp, &total, &count);
    int named = nn > 1 || (nn == 1 && strcmp(gn[0].key, "(unnamed)") != 0);
    for (size_t k = 0; k < end.n; k++) held += m->allocs[end.idx[k]].size;
    free(end.idx);
    /* the summary's figures: with the pinned host blocks kept to the end that the view does not
     * hold among its allocations (PyTorch's: its device tensors), listed apart (host_held_head) */
    uint64_t hbytes, hblocks, hheld;
    gm_view_host_held(m, &hbytes, &hblocks, &hheld);
    uint64_t sum_bytes = total + hbytes, sum_count = count + hblocks;
    held += hheld;
    *leaked_bytes = sum_bytes;
    gm_alloc *ws; /* PyTorch's cuBLAS workspaces, freed at exit by gpumem's hooks: listed apart */
    size_t nws = view_workspaces(m, &ws);
    gm_alloc *chs; /* cuBLAS's own blocks of PyTorch's handles, alive at exit: listed apart */
    size_t nchs = view_cublas_handles(m, &chs);
    int64_t dropped = gm_meta_int(d, "dropped_events", 0);
    /* leaks are what a program that ran to its end never freed: a recording cut short (a
     * signal, a kill, still being written) or with events missing cannot say */
    int ended = strcmp(d->state, "closed") == 0;
    int judgeable = ended && !dropped && !d->damage[0]; /* damaged (--lossy-ok): rows are missing */
    group *gk = NULL, *gkn = NULL;
    uint64_t ktotal, kcount;
    int64_t klo, khi;
    alloc_set kept;
    /* what grows is chosen by call site (a name like "(unnamed)" spans unrelated allocations);
     * the same allocations are then shown by name */
    size_t kn = group_kept(m, &l, BY_SITE, &gk, &ktotal, &kcount, &klo, &khi, &kept);
    uint64_t kt2, kc2;
    size_t knn = kept.n ? group_allocs(m, &l, &kept, BY_NAME | G_REQUESTED | G_PHASE, &gkn, &kt2, &kc2) : 0;
    /* how many of them were made between two steps: after their step's last event, before the
     * next step's first (kept after opt.step(), or the next step's input made before its
     * forward): each counts as the step before it, said so beside the steps they name; and
     * before the first step (the first iteration's, before its forward): the first step's */
    uint64_t kbetween = 0, kbefore = 0;
    for (size_t i = 0; i < kept.n; i++) {
        const gm_alloc *a = &m->allocs[kept.idx[i]];
        long si = gm_step_index(m, a);
        kbetween += si >= 0 && a->birth > m->steps[si].end_seq;
        kbefore += si < 0;
    }
    free(kept.idx);
    /* growth across steps: least-squares slope of the allocated bytes at each step's end, over
     * the whole steps (a trailing partial step left out: last_step_partial) */
    char lacks[64];
    int partial = last_step_partial(m, lacks, sizeof lacks);
    size_t nfit = m->nsteps - (size_t)partial;
    double slope = 0;
    if (nfit >= 2) {
        double sx = 0, sy = 0, sxx = 0, sxy = 0, n = (double)nfit;
        for (size_t i = 0; i < nfit; i++) {
            double x = (double)i, y = (double)m->steps[i].end_allocated;
            sx += x, sy += y, sxx += x * x, sxy += x * y;
        }
        double den = n * sxx - sx * sx;
        slope = den != 0 ? (n * sxy - sx * sy) / den : 0;
        if (!isfinite(slope)) slope = 0; /* only a damaged file gets here; JSON has no nan */
    }
    if (o->json) {
        fprintf(out, "{\"database\":");
        gm_json_str(out, d->path);
        gm_scope_json(d, out, ",", ""); /* several devices: whose leaks these are */
        fprintf(out, ",\"complete\":%s,\"damaged\":", d->closed && !d->damage[0] ? "true" : "false");
        gm_json_str(out, d->damage[0] ? d->damage : NULL);
        char ending[256]; /* null, or why the program did not run to its end: then these are not
                           * necessarily leaks (gm_ending_line) */
        gm_ending_line(d, ending, sizeof ending);
        fputs(",\"ending\":", out);
        gm_json_str(out, ending[0] ? ending : NULL);
        fputs(",\"leaks\":[", out);
        for (size_t i = 0; i < ns && (int)i < o->top; i++) {
            const gm_alloc *a = &m->allocs[gs[i].sample];
            fprintf(out, "%s{\"site\":", i ? "," : "");
            gm_json_str(out, gs[i].key);
            fputs(",\"phase\":", out);
            gm_json_str(out, gs[i].phase);
            fprintf(out, ",\"phase_mixed\":%s,\"name\":", gs[i].mixed ? "true" : "false");
            gm_json_str(out, a->name ? gm_str(m, a->name) : NULL);
            fprintf(out, ",\"bytes\":%" PRIu64 ",\"count\":%" PRIu64 ",\"stack\":[", gs[i].bytes, gs[i].count);
            size_t len;
            gm_stack_frame(m, a->stack, 0, &len);
            for (size_t k = 0; k < len; k++) {
                long fi = gm_stack_frame(m, a->stack, k, NULL);
                const gm_frame *f = fi >= 0 ? &m->frames[fi] : NULL;
                fprintf(out, "%s{\"function\":", k ? "," : "");
                gm_json_str(out, f ? f->function : NULL);
                fputs(",\"file\":", out);
                gm_json_str(out, f ? f->file : NULL);
                fprintf(out, ",\"line\":%u,\"module\":", f ? f->line : 0);
                gm_json_str(out, f && f->module && f->module <= m->nmods ? m->mods[f->module - 1].path : NULL);
                fprintf(out, ",\"offset\":%" PRIu64 ",\"inlined\":%s,\"python\":%s}", f ? f->offset : 0,
                        f && f->inl_depth ? "true" : "false", f && f->python ? "true" : "false");
            }
            fputs("]}", out);
        }
        fputs("],", out);
        print_groups_json(out, "by_phase", gp, np, o->top, total, "phase");
        fputc(',', out);
        print_groups_json(out, "by_name", gn, named ? nn : 0, o->top, total, "name");
        /* the steps the growth per step is fitted over: a trailing partial step left out */
        fprintf(out, ",\"growth_over\":{\"steps\":%zu,\"left_out\":", nfit);
        if (partial) {
            fprintf(out, "{\"step\":%" PRId64 ",\"lacks\":", m->steps[m->nsteps - 1].step);
            gm_json_str(out, lacks);
            fputs("}}", out);
        } else {
            fputs("null}", out);
        }
        fputs(",\"steps\":[", out);
        for (size_t i = 0; i < m->nsteps; i++)
            fprintf(out, "%s{\"step\":%" PRId64 ",\"allocated_at_end\":%" PRIu64 ",\"leaked\":%" PRIu64 "}",
                    i ? "," : "", m->steps[i].step, m->steps[i].end_allocated, m->steps[i].leaked);
        fprintf(out, "],\"growth_per_step\":%.0f,\"grows\":%s,\"kept_beyond_steps\":{\"bytes\":%" PRIu64 ",", slope,
                nfit >= 2 && slope >= 1024 && kn ? "true" : "false", kn ? ktotal : 0);
        if (kn)
            fprintf(out, "\"steps\":[%" PRId64 ",%" PRId64 "],\"made_between_steps\":%" PRIu64 ",", klo, khi, kbetween);
        else
            fputs("\"steps\":null,\"made_between_steps\":0,", out);
        fprintf(out, "\"made_before_first_step\":%" PRIu64 ",", kn ? kbefore : 0);
        print_groups_json(out, "by_site", gk, kn, o->top, ktotal, "site");
        fputc(',', out);
        print_groups_json(out, "by_name", gkn, knn, o->top, ktotal, "name");
        fputs("},", out);
        host_json(m, &l, m->host_cache, m->nhost_cache, out, "host_cache", o->top, "");
        fputc(',', out);
        /* in_leaks: leaked_bytes counts them, in every view (among the device view's leaks; beside
         * PyTorch's tensors, gm_view_host_held); in_leaks_list: .leaks lists them (the device's
         * view) or .host_held alone does (PyTorch's) */
        host_json(m, &l, m->host_held, m->nhost_held, out, "host_held", o->top,
                  m->is_torch_view ? ",\"in_leaks\":true,\"in_leaks_list\":false"
                                   : ",\"in_leaks\":true,\"in_leaks_list\":true");
        fputc(',', out);
        host_json(m, &l, m->host_unknown, m->nhost_unknown, out, "host_cache_unknown", o->top, "");
        fputc(',', out);
        host_json(m, &l, ws, nws, out, "torch_workspaces", o->top, "");
        fputc(',', out);
        host_json(m, &l, chs, nchs, out, "cublas_handles", o->top, "");
        fprintf(out, ",\"leaked_bytes\":%" PRIu64 ",\"leaked_allocations\":%" PRIu64
                     ",\"leaked_held_bytes\":%" PRIu64 ",\"dropped_events\":%" PRId64
                     ",\"judgeable\":%s}\n", sum_bytes, sum_count, held, dropped, judgeable ? "true" : "false");
    } else {
        print_header(d, m, out, "leaks");
        if (m->is_torch_view)
            fprintf(out, "  view      PyTorch's tensors, from its allocator trace (gpumem record merged it);\n"
                         "            its cached segments are not leaks and are not listed\n");
        fprintf(out, "\nAlive at exit, by call site\n");
        if (ns == 0) fprintf(out, "  nothing: every allocation was freed\n");
        for (size_t i = 0; i < ns && (int)i < o->top; i++) {
            char b[32];
            gm_fmt_bytes(gs[i].bytes, b, sizeof b);
            fprintf(out, "  %s in %" PRIu64 " allocation%s at %s\n", b, gs[i].count, gs[i].count == 1 ? "" : "s", gs[i].key);
            const gm_alloc *a = &m->allocs[gs[i].sample];
            long site;
            site_of(m, &l, a->stack, &site);
            size_t len;
            gm_stack_frame(m, a->stack, 0, &len);
            /* after = 1 at the site itself; the frame after it is the caller, already named in
             * the site's label: the list starts with the caller's caller. A Python site (in the
             * default --frames user) lists only the user's frames, as its label does. */
            int shown = 0, after = 0;
            int py_user = !m->frames_all && site >= 0 && m->frames[site].python;
            for (size_t k = 0; k < len && shown < 6; k++) {
                long fi = gm_stack_frame(m, a->stack, k, NULL);
                if (fi == site && !after) { after = 1; continue; }
                if (py_user && after && (fi < 0 || !gm_python_user_frame(&m->frames[fi]))) continue;
                if (!after || after++ == 1) continue;
                char fd[1024];
                gm_frame_desc(m, fi, fd, sizeof fd);
                /* a frame made from an inline chain: the code above was inlined into it */
                fprintf(out, "      called from %s%s\n", fd,
                        fi >= 0 && m->frames[fi].inl_depth ? " (inlined call)" : "");
                shown++;
            }
            const char *nm = gm_str(m, a->name);
            fprintf(out, "      phase: %s%s%s%s\n", gs[i].phase, gs[i].mixed ? " and others" : "",
                    nm ? ", named " : "", nm ? nm : "");
        }
        if (ns > (size_t)o->top) fprintf(out, "  ... %zu more call sites (use --top N)\n", ns - (size_t)o->top);
        if (np) fprintf(out, "\nAlive at exit, by phase\n");
        for (size_t i = 0; i < np && (int)i < o->top; i++) {
            char b[32];
            gm_fmt_bytes(gp[i].bytes, b, sizeof b);
            fprintf(out, "  %12s in %6" PRIu64 "  %s\n", b, gp[i].count, gp[i].key);
        }
        if (named) {
            fprintf(out, "\nAlive at exit, by tensor name (digits as *)\n");
            for (size_t i = 0; i < nn && (int)i < o->top; i++) {
                char b[32];
                gm_fmt_bytes(gn[i].bytes, b, sizeof b);
                fprintf(out, "  %12s in %6" PRIu64 "  %s  [phase %s%s]\n", b, gn[i].count, gn[i].key,
                        gn[i].phase, gn[i].mixed ? " and others" : "");
            }
        }
        if (m->nsteps) {
            fprintf(out, "\nGrowth across steps (%zu step%s; a step runs until the next one begins: what is made "
                         "after its update and before the next step's forward counts as it)\n",
                    m->nsteps, m->nsteps == 1 ? "" : "s");
            /* one rule for every per-step table (gm_step_rows) */
            gm_step_row *rows = malloc(m->nsteps * sizeof *rows);
            size_t nrows = rows ? gm_step_rows(m->nsteps, same_step_figures, m, rows) : 0;
            for (size_t r = 0; r < nrows; r++) {
                const gm_step *s0 = &m->steps[rows[r].first];
                char e[32], k[32], lab[48];
                if (rows[r].gap_before) fprintf(out, "  ...\n");
                gm_fmt_bytes(s0->end_allocated, e, sizeof e);
                gm_fmt_bytes(s0->leaked, k, sizeof k);
                gm_fmt_step_label(s0->step, m->steps[rows[r].last].step, lab, sizeof lab);
                fprintf(out, "  step %-9s allocated at its end %12s, still alive at exit %12s\n", lab, e, k);
            }
            free(rows);
            char g[32];
            /* |slope| can reach 2^64 on a damaged file (sizes near 2^63): clamp, a double out of
             * uint64_t's range must never be converted */
            double mag = fabs(slope);
            gm_fmt_bytes(mag >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)mag, g, sizeof g);
            /* growth is claimed only where something made in one step is kept through the next
             * (the slope alone also rises with a last pass that keeps its output) */
            char over[64] = "";
            if (partial) {
                fprintf(out, "  step %" PRId64 " has no %s phase, as every step before it has: a partial step (an "
                             "evaluation forward after the last optimizer step, or a step cut short), left out "
                             "of the growth per step\n", m->steps[m->nsteps - 1].step, lacks);
                snprintf(over, sizeof over, " (steps %" PRId64 "-%" PRId64 ")", m->steps[0].step,
                         m->steps[nfit - 1].step);
            }
            if (nfit >= 2 && slope >= 1024 && kn)
                fprintf(out, "  memory grows by %s per step%s: something allocated each step is kept\n", g, over);
            else if (nfit < 2 && partial)
                fprintf(out, "  one whole step only: growth across steps is not judged\n");
            else if (m->nsteps < 2)
                /* one step has no "across": "no steady growth" claimed a loop's growth was none
                 * (an inference loop is one step to the PyTorch hooks: no optimizer step ends it) */
                fprintf(out, "  one step only: growth across steps is not judged (steps are \"step N\" ranges, "
                             "and PyTorch's hooks end one at each optimizer step: a loop with none, as "
                             "inference, is one step); to judge it, mark each iteration with "
                             "`with gpumem.range(\"step %%d\" %% i):` or an NVTX range \"step N\"\n");
            else
                fprintf(out, "  no steady growth across steps%s\n", over);
            if (kn) {
                char kb[32];
                gm_fmt_bytes(ktotal, kb, sizeof kb);
                char between[300] = "";
                /* made after a step's last event and before the next one's first: counted as the
                 * step before, which a person reads as "made in step k" unless told; made before
                 * the first step: counted as it */
                char before[80] = "";
                if (kbefore)
                    snprintf(before, sizeof before, "; %" PRIu64 " made before step %" PRId64 "'s first event, "
                             "counted as it", kbefore, m->steps[0].step);
                if (kbetween == kcount)
                    snprintf(between, sizeof between, " (each made between two steps: after step k's "
                             "update, before step k+1's forward; counted as step k)");
                else if (kbetween)
                    snprintf(between, sizeof between, " (%" PRIu64 " of them made between two steps: after step "
                             "k's update, before step k+1's forward; counted as step k%s)", kbetween, before);
                else if (kbefore)
                    snprintf(between, sizeof between, " (%s)", before + 2);
                fprintf(out, "  allocated in steps %" PRId64 "-%" PRId64 "%s, one step after another, and still alive after "
                             "step %" PRId64 " (what grows): %s in %" PRIu64 " allocation%s\n",
                        klo, khi, between, m->steps[m->nsteps - 1].step, kb, kcount, kcount == 1 ? "" : "s");
                print_groups_text(out, "by call site", gk, kn, o->top, ktotal);
                if (knn > 1 || (knn == 1 && strcmp(gkn[0].key, "(unnamed)") != 0))
                    print_groups_text(out, "by tensor name", gkn, knn, o->top, ktotal);
            }
        }
        host_text(m, &l, m->host_cache, m->nhost_cache, out, host_cache_head, o->top);
        if (m->is_torch_view) host_text(m, &l, m->host_held, m->nhost_held, out, host_held_head, o->top);
        host_text(m, &l, m->host_unknown, m->nhost_unknown, out, host_unknown_head, o->top);
        host_text(m, &l, ws, nws, out, workspace_head, o->top);
        host_text(m, &l, chs, nchs, out, cublas_handle_head, o->top);
        char hb[32];
        gm_fmt_bytes(held, hb, sizeof hb);
        if (sum_count) fprintf(out, "\nLeaked bytes are the bytes requested; the allocator holds %s for them.\n", hb);
        if (dropped)
            fprintf(out, "\nwarning: %" PRId64 " events were dropped while recording (the ring was "
                         "full): frees may be missing, so some of these allocations may have been "
                         "freed. Record again with a larger GPUMEM_RING to judge.\n", dropped);
        char note[256];
        gm_ending_line(d, note, sizeof note);
        if (note[0]) fprintf(out, "\nwarning: %s.\n", note);
        fprintf(out, "\nLEAK SUMMARY: %" PRIu64 " bytes leaked in %" PRIu64 " allocations\n", sum_bytes, sum_count);
    }
    free(gs), free(gp), free(gn), free(gk), free(gkn), free(ws), free(chs);
    labels_free(m, &l);
    /* with events missing, neither "leaks" nor "no leaks" can be said (a dropped free looks
     * like a leak, a dropped allocation hides one): CI gets its own exit code */
    if (o->fail_on_leak && !judgeable) return GM_EXIT_CANNOT_JUDGE;
    return (o->fail_on_leak && count > 0) ? GM_EXIT_LEAKS : GM_EXIT_OK;
}

/* ---------------------------------------------------------------- PyTorch's own peaks */

/* PyTorch's statistics swept over its merged history, per device as PyTorch keeps them: the
 * whole run's peaks, and where the program reset a device's (kind 38 on that device:
 * reset_peak_memory_stats(d) resets d's alone), that device's peaks since its last reset, which
 * PyTorch starts from the current values. dev >= 0: that device's figures and resets; dev < 0
 * (GM_TORCH_ALL_DEVICES) every device the reading holds added together (one, on a recording of
 * one device or a reading scoped to one: gm_db_scope_one), a reset on any of them counted. 1 with them, 0 when the recording has none. */
static int torch_peaks_sweep(gm_db *d, int dev, uint64_t *peak_allocated, uint64_t *peak_reserved, gm_torch_reset *rs) {
    *peak_allocated = *peak_reserved = 0;
    memset(rs, 0, sizeof *rs);
    if (gm_meta_int(d, "torch_history", 0) <= 0) return 0;
    typedef struct {
        uint64_t a, r, peak_a, peak_r, since_a, since_r, count, seq, t;
    } tdev;
    tdev *t = calloc(GM_DEVICES, sizeof *t);
    sqlite3_stmt *st;
    if (!t || sqlite3_prepare_v2(d->db, "SELECT kind, size, seq, t, device FROM events WHERE kind IN (31, 32, 34, 35, 38) "
                                        "ORDER BY seq", -1, &st, NULL) != SQLITE_OK) {
        free(t);
        return 0;
    }
    int any = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int kind = sqlite3_column_int(st, 0), on = sqlite3_column_int(st, 4);
        uint64_t size = (uint64_t)sqlite3_column_int64(st, 1);
        tdev *v = &t[on < 0 || on >= GM_DEVICES ? 0 : on];
        any |= kind == REC_TORCH_ALLOC;
        if (kind == REC_TORCH_RESET_PEAK) {
            v->count++;
            v->seq = (uint64_t)sqlite3_column_int64(st, 2), v->t = (uint64_t)sqlite3_column_int64(st, 3);
            v->since_a = v->a, v->since_r = v->r;
            continue;
        }
        /* PyTorch's statistics: allocated drops at free_requested, reserved with its segments */
        if (kind == REC_TORCH_ALLOC) v->a += size;
        else if (kind == REC_TORCH_FREE) v->a -= size < v->a ? size : v->a;
        else if (kind == REC_TORCH_SEG_MAP) v->r += size;
        else v->r -= size < v->r ? size : v->r;
        if (v->a > v->peak_a) v->peak_a = v->a;
        if (v->r > v->peak_r) v->peak_r = v->r;
        if (v->a > v->since_a) v->since_a = v->a;
        if (v->r > v->since_r) v->since_r = v->r;
    }
    sqlite3_finalize(st);
    /* one device's, or the sum's: the whole run's peaks of the sum are a running sum's, swept
     * again below only when asked for every device */
    for (int i = 0; i < GM_DEVICES; i++) {
        const tdev *v = &t[i];
        if (dev >= 0 && i != dev) continue;
        rs->count += v->count;
        if (v->count && v->seq >= rs->seq) rs->seq = v->seq, rs->t_ns = v->t;
        rs->max_allocated += v->since_a, rs->max_reserved += v->since_r;
        if (dev >= 0) *peak_allocated = v->peak_a, *peak_reserved = v->peak_r;
    }
    free(t);
    if (dev < 0) { /* the running sum's peaks, as the model's whole-run figures of several devices */
        if (sqlite3_prepare_v2(d->db, "SELECT kind, size FROM events WHERE kind IN (31, 32, 34, 35) ORDER BY seq", -1,
                               &st, NULL) == SQLITE_OK) {
            uint64_t a = 0, r = 0;
            while (sqlite3_step(st) == SQLITE_ROW) {
                int kind = sqlite3_column_int(st, 0);
                uint64_t size = (uint64_t)sqlite3_column_int64(st, 1);
                if (kind == REC_TORCH_ALLOC) a += size;
                else if (kind == REC_TORCH_FREE) a -= size < a ? size : a;
                else if (kind == REC_TORCH_SEG_MAP) r += size;
                else r -= size < r ? size : r;
                if (a > *peak_allocated) *peak_allocated = a;
                if (r > *peak_reserved) *peak_reserved = r;
            }
            sqlite3_finalize(st);
        }
    }
    if (!rs->count) rs->max_allocated = *peak_allocated, rs->max_reserved = *peak_reserved;
    rs->device = dev;
    return any;
}

int gm_torch_peaks(gm_db *d, uint64_t *peak_allocated, uint64_t *peak_reserved) {
    gm_torch_reset rs;
    return torch_peaks_sweep(d, GM_TORCH_ALL_DEVICES, peak_allocated, peak_reserved, &rs);
}

/* gpumem as PyTorch's allocator (--allocator gpumem): the program's resets of PyTorch's peaks (event
 * 38 flagged REC_F_FRAMEWORK, gpumem_torch_reset_peak_stats: written under the device allocator's
 * lock, among its allocations and frees) and what its max_memory_allocated(d) /
 * max_memory_reserved(d) read at the end, which gpumem's allocator gave it: the peak of the hook's
 * allocations (gpumem's blocks) since the last reset, and the device's reserved (its mapped runs or
 * segments) since then, each from its value at the reset. The hook's allocations are paired with
 * their frees by address, as the model pairs them (an address handed out again ends the one before).
 * dev and the sums as torch_peaks_sweep's. A closed recording counts these resets (meta
 * gpumem_peak_resets): where it is 0 nothing is scanned. */
static void hook_peaks_sweep(gm_db *d, int dev, gm_torch_reset *rs) {
    memset(rs, 0, sizeof *rs);
    rs->device = dev;
    if (gm_meta_int(d, "gpumem_peak_resets", -1) == 0) return;
    typedef struct {
        uint64_t a, r, since_a, since_r, count, seq, t;
    } hdev;
    sqlite3_stmt *st;
    char sql[192];
    snprintf(sql, sizeof sql, "SELECT 1 FROM events WHERE kind = %d AND (flags & %u) != 0 LIMIT 1", REC_TORCH_RESET_PEAK,
             (unsigned)REC_F_FRAMEWORK);
    if (sqlite3_prepare_v2(d->db, sql, -1, &st, NULL) != SQLITE_OK) return;
    int any = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    hdev *t = any ? calloc(GM_DEVICES, sizeof *t) : NULL;
    snprintf(sql, sizeof sql, "SELECT seq, t, kind, flags, device, addr, size FROM events WHERE kind IN (%d, %d, %d, %d, %d, "
                              "%d, %d, %d, %d) ORDER BY seq", REC_ALLOC, REC_ALLOC_ASYNC, REC_FREE, REC_FREE_ASYNC,
             REC_SEG_MAP, REC_SEG_UNMAP, REC_DRIVER_ALLOC, REC_DRIVER_FREE, REC_TORCH_RESET_PEAK);
    if (!t || sqlite3_prepare_v2(d->db, sql, -1, &st, NULL) != SQLITE_OK) {
        free(t);
        return;
    }
    u64map live = {0}; /* a hook's allocation's address -> its size << 8 | its device */
    while (sqlite3_step(st) == SQLITE_ROW) {
        unsigned kind = (unsigned)sqlite3_column_int(st, 2), flags = (unsigned)sqlite3_column_int(st, 3);
        int on = sqlite3_column_int(st, 4);
        uint64_t addr = (uint64_t)sqlite3_column_int64(st, 5), size = (uint64_t)sqlite3_column_int64(st, 6), old;
        hdev *v = &t[on < 0 || on >= GM_DEVICES ? 0 : on];
        if (kind == REC_TORCH_RESET_PEAK) {
            if (!(flags & REC_F_FRAMEWORK)) continue; /* PyTorch's own allocator's, merged: not gpumem's */
            v->count++;
            v->seq = (uint64_t)sqlite3_column_int64(st, 0), v->t = (uint64_t)sqlite3_column_int64(st, 1);
            v->since_a = v->a, v->since_r = v->r;
            continue;
        }
        if (kind == REC_SEG_MAP || kind == REC_DRIVER_ALLOC) v->r += size;
        else if (kind == REC_SEG_UNMAP || kind == REC_DRIVER_FREE) v->r -= size < v->r ? size : v->r;
        else if ((kind == REC_FREE || kind == REC_FREE_ASYNC || rec_is_device_alloc(kind)) && u64map_del(&live, addr, &old)) {
            hdev *w = &t[old & 0xff]; /* the hook's allocation there ends: freed, or its address handed out again */
            w->a -= old >> 8 < w->a ? old >> 8 : w->a;
        }
        if (rec_is_framework_alloc(kind, flags) && u64map_put(&live, addr, size << 8 | (uint64_t)(v - t)) == 0) v->a += size;
        if (v->a > v->since_a) v->since_a = v->a;
        if (v->r > v->since_r) v->since_r = v->r;
    }
    sqlite3_finalize(st);
    u64map_free(&live);
    for (int i = 0; i < GM_DEVICES; i++) {
        const hdev *v = &t[i];
        if (dev >= 0 && i != dev) continue;
        rs->count += v->count;
        if (v->count && v->seq >= rs->seq) rs->seq = v->seq, rs->t_ns = v->t;
        rs->max_allocated += v->since_a, rs->max_reserved += v->since_r;
    }
    free(t);
}

/* Either way a reset was recorded: merged from PyTorch's own allocator's history, or written by
 * gpumem's allocator as PyTorch's (a recording has one or the other), so that no reader misses one. */
int gm_torch_peak_reset(gm_db *d, int dev, gm_torch_reset *rs) {
    uint64_t a, r;
    torch_peaks_sweep(d, dev, &a, &r, rs);
    if (gm_meta_int(d, "torch_history", 0) <= 0) hook_peaks_sweep(d, dev, rs);
    return rs->count > 0;
}

const char *gm_torch_peak_name(const gm_torch_reset *rs, int reserved) {
    if (rs && rs->count) return reserved ? "whole-run peak reserved" : "whole-run peak allocated";
    return reserved ? "max_memory_reserved()" : "max_memory_allocated()";
}

void gm_torch_reset_note(const gm_torch_reset *rs, char *out, size_t n) {
    out[0] = 0;
    if (!rs || !rs->count) return;
    char a[32], r[32];
    gm_fmt_bytes(rs->max_allocated, a, sizeof a);
    gm_fmt_bytes(rs->max_reserved, r, sizeof r);
    snprintf(out, n,
             "the program reset PyTorch's peak stats (torch.cuda.reset_peak_memory_stats%s, last at event %" PRIu64
             ", %.3f s): its max_memory_allocated() / max_memory_reserved() count from there (%s / %s at the end); "
             "the peaks here are the whole run's",
             rs->count > 1 ? ", several times" : "", rs->seq, (double)rs->t_ns / 1e9, a, r);
}

/* ---------------------------------------------------------------- PyTorch's retries */

/* PyTorch's caching allocator, at its limit (a memory fraction, or the device full), frees
 * every cached segment it holds whole (release_cached_blocks: a device-wide synchronize and a
 * cudaFree each) and tries the allocation again; memory_stats()["num_alloc_retries"] counts
 * these. Its history shows them as segment frees inside an allocation (the next of its entries
 * the allocation's segment_alloc or alloc) after which no segment it holds is wholly free. An
 * empty_cache (36, noted by gpumem's hooks before its frees) frees the same way outside an
 * allocation; the releases that are no retry (garbage_collection_threshold's collection, the
 * blocks over max_split_size_mb at the cap) free some whole segments and most often leave
 * others (the collection's that do not are told apart by the cap, gc_release_retried; the
 * blocks' by replaying their choice, split_release_retried). A
 * release an OOM follows was a retry that failed: num_alloc_retries counts every OOM outside a
 * graph capture too, and report lists those apart (its OOMs). A retry whose release freed
 * nothing is one of those: the cap, or the device, refuses the same request again. */
typedef struct tseg {
    uint64_t addr, size, stream;
    uint64_t live; /* blocks handed out and not free_completed */
    uint64_t base; /* large-pool allocations before it was last wholly freed: its age's origin */
} tseg;

static size_t tseg_find(const tseg *s, size_t n, uint64_t addr)
{
    size_t lo = 0, hi = n; /* the first segment whose end is past addr */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s[mid].addr + s[mid].size <= addr) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && s[lo].addr <= addr ? lo : n;
}

static int tseg_add(tseg **s, size_t *n, size_t *cap, uint64_t addr, uint64_t size, uint64_t stream)
{
    if (gm_grow_fast((void **)s, cap, *n + 1, sizeof **s)) return -1;
    size_t i = *n;
    while (i > 0 && (*s)[i - 1].addr > addr) {
        (*s)[i] = (*s)[i - 1];
        i--;
    }
    (*s)[i] = (tseg){addr, size, stream, 0, 0};
    (*n)++;
    return 0;
}

static int tseg_any_free(const tseg *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!s[i].live) return 1;
    return 0;
}

/* garbage_collection_threshold's collection (garbage_collect_cached_blocks) runs only under a
 * memory fraction, before the allocation's first try, when PyTorch's reserve is over the
 * threshold's share of the fraction's cap; it gives back wholly free segments of the large pool
 * only (never the small pool's 2 MiB ones, never an expandable segment), round by round, the
 * older blocks first, until it has given back the reserve's excess over that share, or all it
 * can. A retry's release after a failed first try gives back every wholly free segment left, of
 * both pools. In the history both are segment frees inside the allocation, the collection's
 * first; the failed first try between them leaves no entry. The cap tells them apart: the first
 * try fails when the reserve after the collection and the new segment pass it. Frees that reach
 * the excess and leave room for the segment under the cap were the collection's alone (it frees
 * no fewer); frees of the small pool, or under the threshold, were a retry's. Only where the
 * frees that reach the excess leave no room, and more follow, it may be either: the collection
 * stops at the end of a round, and its rounds go by the blocks' ages (gc_replay_retried).
 * 1 a retry, 0 none, -1 either.
 * sizes: the segments freed, in order; r0: the reserve before them; seg: the new segment. */
#define TORCH_SMALL_SEGMENT (2u << 20) /* kSmallBuffer: a small-pool segment; a large one is >= 10 MiB */
#define TORCH_SMALL_SIZE (1u << 20)    /* kSmallSize: the largest block of the small pool */
static int gc_release_retried(const uint64_t *sizes, size_t n, uint64_t r0, uint64_t cap, double threshold,
                              uint64_t seg)
{
    uint64_t share = (uint64_t)(threshold * (double)cap);
    if (!cap || r0 <= share) return 1; /* no collection: no fraction, or under its share */
    for (size_t i = 0; i < n; i++)
        if (sizes[i] == TORCH_SMALL_SEGMENT) return 1;
    uint64_t freed = 0;
    size_t k = 0;
    while (k < n && freed < r0 - share)
        freed += sizes[k++];
    if (k == n || r0 - freed + seg <= cap) return 0;
    return -1;
}

/* The collection's frees replayed, where the cap leaves the release undecided
 * (gc_release_retried's -1): the collection considers the wholly free segments of the large pool
 * (c: address, size and base, taken before the release's first free) and frees, round by round
 * until it has the reserve's excess over the threshold's share, every one at least as old as
 * their mean age. A block's age is the large pool's allocations since it was freed whole
 * (get_free_block's count less the count when the pool took it back), so "at least the mean
 * age" is "a base at most the mean base". Then the retry is the first try that fails: the
 * reserve after the collection and the new segment over the cap. Its frees must be among those
 * recorded (all of them where no retry follows), else -1: the replay is not PyTorch's. */
typedef struct gc_cand {
    uint64_t addr, size, base, stream;
} gc_cand;

/* the collection's rounds on c: marks gone what it gives back (ngone of them), returns their
 * bytes; nothing without a threshold, a cap, or over the share */
static uint64_t gc_collect(const gc_cand *c, size_t n, uint8_t *gone, size_t *ngone, uint64_t r0, uint64_t cap,
                           double threshold)
{
    uint64_t share = (uint64_t)(threshold * (double)cap), reclaimed = 0, sum = 0;
    if (threshold <= 0 || !cap || r0 <= share) return 0;
    size_t count = n;
    for (size_t i = 0; i < n; i++)
        sum += c[i].base;
    for (int any = 1; reclaimed < r0 - share && any && count;) {
        uint64_t sum0 = sum, count0 = count; /* the round's mean: sum0 / count0 */
        any = 0;
        for (size_t i = 0; i < n; i++)
            if (!gone[i] && c[i].base * count0 <= sum0) {
                gone[i] = 1, any = 1, (*ngone)++;
                reclaimed += c[i].size, sum -= c[i].base, count--;
            }
    }
    return reclaimed;
}

/* Whether every candidate a replay gave back (gone) is among the first m recorded frees */
static int replay_frees_recorded(const gc_cand *c, size_t n, const uint8_t *gone, const uint64_t *freed_addr, size_t m)
{
    for (size_t i = 0; i < n; i++) {
        int found = !gone[i];
        for (size_t j = 0; j < m && !found; j++)
            found = freed_addr[j] == c[i].addr;
        if (!found) return 0;
    }
    return 1;
}

static int gc_replay_retried(const gc_cand *c, size_t n, const uint64_t *freed_addr, size_t nfreed, uint64_t r0,
                             uint64_t cap, double threshold, uint64_t seg)
{
    uint8_t *gone = calloc(n + 1, 1);
    if (!gone) return -1;
    size_t ngone = 0;
    uint64_t reclaimed = gc_collect(c, n, gone, &ngone, r0, cap, threshold);
    int retried = r0 - reclaimed + seg > cap;
    int ok = (retried ? ngone < nfreed : ngone == nfreed) && replay_frees_recorded(c, n, gone, freed_addr, nfreed);
    free(gone);
    return ok ? retried : -1;
}

/* PyTorch's allocator configuration's garbage_collection_threshold, 0 without it */
static double torch_gc_threshold(const char *conf)
{
    const char *k = strstr(conf, "garbage_collection_threshold:");
    return k ? strtod(k + strlen("garbage_collection_threshold:"), NULL) : 0;
}

/* its max_split_size_mb in bytes (MiB, as PyTorch reads it), 0 without it */
static uint64_t torch_max_split(const char *conf)
{
    const char *k = strstr(conf, "max_split_size_mb:");
    return k ? strtoull(k + strlen("max_split_size_mb:"), NULL, 10) << 20 : 0;
}

/* max_split_size_mb's release (release_available_cached_blocks), replayed where it may have freed
 * inside an allocation. After the first try failed PyTorch gives back blocks of at least
 * max_split_size of the allocation's pool and stream, and those are wholly free segments (a
 * request under max_split_size never takes such a block, one over it never splits it): the
 * smallest one of at least key (the request, or max_split_size where it is less; the request's
 * segment stands for it, block sizes being 2 MiB multiples), the lowest address among equals; or
 * where none is that large, the largest ones (the highest address first among equals) until they
 * add up to key, and where they do not, it has freed them for nothing. Where it succeeded the
 * allocation tries again, no retry (num_alloc_retries counts none); where that try fails, or the
 * release did, the full release (release_cached_blocks) gives back every wholly free segment
 * left, and alloc_block(isRetry) counts one. Under garbage_collection_threshold its collection
 * (gc_collect) comes first, before the first try. The history holds the frees in that order, and
 * a try that failed is one more free after it: a try with nothing freed since the last failed
 * one meets the same refusal (the cap, or the device) and ends in an OOM, not here. The cap
 * checks it: a try over it failed. A small-pool request (its segment 2 MiB) has no block that
 * large: the full release follows. c: the wholly free large-pool segments before the first free;
 * freed_addr: the nfreed segments freed, in order; r0: the reserve before them; seg: the new
 * segment. 1 a retry, 0 none, -1 the recorded frees are not this replay's. */
static int split_release_retried(const gc_cand *c, size_t n, uint64_t stream, const uint64_t *freed_addr,
                                 size_t nfreed, uint64_t r0, uint64_t cap, double threshold, uint64_t max_split,
                                 uint64_t seg)
{
    uint8_t *gone = calloc(n + 1, 1);
    if (!gone) return -1;
    size_t ngone = 0;
    uint64_t reclaimed = gc_collect(c, n, gone, &ngone, r0, cap, threshold), released = 0;
    int over = cap && r0 - reclaimed + seg > cap; /* the first try met the cap */
    int retried = 0, ok = nfreed == ngone && !over; /* the first try succeeded */
    if (nfreed > ngone) {
        uint64_t key = seg > max_split ? seg : max_split;
        size_t best = n;
        for (size_t i = 0; i < n && seg != TORCH_SMALL_SEGMENT; i++)
            if (!gone[i] && c[i].stream == stream && c[i].size >= key &&
                (best == n || c[i].size < c[best].size || (c[i].size == c[best].size && c[i].addr < c[best].addr)))
                best = i;
        if (best < n) gone[best] = 1, ngone++, released = c[best].size;
        while (released < key && seg != TORCH_SMALL_SEGMENT) { /* the largest oversize block left */
            size_t big = n;
            for (size_t i = 0; i < n; i++) /* the highest address first among equals */
                if (!gone[i] && c[i].stream == stream && c[i].size >= max_split &&
                    (big == n || c[i].size > c[big].size || (c[i].size == c[big].size && c[i].addr > c[big].addr)))
                    big = i;
            if (big == n) break;
            gone[big] = 1, ngone++, released += c[big].size;
        }
        over = cap && r0 - (reclaimed + released < r0 ? reclaimed + released : r0) + seg > cap; /* the next try's */
        retried = released < key || nfreed > ngone;
        ok = released < key ? nfreed >= ngone : nfreed > ngone || (nfreed == ngone && !over);
    }
    /* the recorded frees begin with the replay's */
    ok = ok && replay_frees_recorded(c, n, gone, freed_addr, ngone < nfreed ? ngone : nfreed);
    free(gone);
    return ok ? retried : -1;
}

#define TORCH_RETRY_DEVICES 64 /* devices whose cap and reserve the collection's test follows */

int gm_torch_retries(gm_db *d, gm_torch_retries_t *r)
{
    memset(r, 0, sizeof *r);
    r->exact = 1;
    if (gm_meta_int(d, "torch_history", 0) <= 0) return 0;
    char conf[512];
    gm_meta_text(d, "torch_conf", conf, sizeof conf);
    /* max_split_size_mb's release of the blocks over it (after a failed first try) and
     * garbage_collection_threshold's collection (before it) free inside an allocation too, and may
     * leave no segment wholly free: they are replayed (split_release_retried under
     * max_split_size_mb, the collection first where both are set; gc_release_retried and
     * gc_replay_retried under the threshold alone). Neither gives back an expandable segment's
     * blocks, so under expandable segments (meta torch_expandable: PyTorch's setting for the run)
     * every release inside an allocation is a retry's. "No segment wholly free" cannot tell it
     * there: the history's segments are then the ranges PyTorch mapped, and a block counts in the
     * one where it starts, so those under the rest of a block look free. */
    int expandable = gm_meta_int(d, "torch_expandable", 0) != 0;
    uint64_t split = torch_max_split(conf);
    double gc = expandable ? 0 : torch_gc_threshold(conf);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(d->db, "SELECT kind, addr, size, seq, device, flags, stream FROM events WHERE kind IN "
                                  "(13, 31, 33, 34, 35, 36, 37) ORDER BY seq", -1, &st, NULL) != SQLITE_OK)
        return 0;
    tseg *seg = NULL;
    size_t n = 0, cap = 0;
    /* freed: the segments given back since the last allocation, their sizes and the device's
     * reserve before them; asked: by an empty_cache */
    uint64_t freed = 0, freed_bytes = 0, first = 0, r0 = 0;
    uint64_t *sizes = NULL, *faddr = NULL; /* the release's segments: sizes, addresses */
    size_t scap = 0, acap = 0;
    gc_cand *cand = NULL; /* the wholly free large-pool segments before the release */
    size_t ncand = 0, ccap = 0;
    uint64_t large = 0; /* large-pool allocations so far (the collection's clock) */
    uint64_t fraction[TORCH_RETRY_DEVICES] = {0}, reserved[TORCH_RETRY_DEVICES] = {0};
    int asked = 0, rc = 1;
    while (rc > 0 && sqlite3_step(st) == SQLITE_ROW) {
        int kind = sqlite3_column_int(st, 0);
        uint64_t addr = (uint64_t)sqlite3_column_int64(st, 1), size = (uint64_t)sqlite3_column_int64(st, 2);
        uint64_t seq = (uint64_t)sqlite3_column_int64(st, 3);
        int dev = sqlite3_column_int(st, 4);
        uint64_t flags = (uint64_t)sqlite3_column_int64(st, 5), stream = (uint64_t)sqlite3_column_int64(st, 6);
        uint64_t *res = dev >= 0 && dev < TORCH_RETRY_DEVICES ? &reserved[dev] : NULL;
        addr += (uint64_t)dev << 56; /* devices' addresses apart */
        size_t i = n;
        if (kind == REC_TORCH_MEMORY_FRACTION) { /* PyTorch's cap (gpumem's allocator's: flagged) */
            if (res && !(flags & REC_F_FRAMEWORK)) fraction[dev] = size;
        } else if (kind == REC_TORCH_EMPTY_CACHE) asked = 1;
        else if (kind == REC_OOM) { /* the retry failed too: an OOM, which report lists apart */
            freed = freed_bytes = 0, asked = 0;
            if (size > TORCH_SMALL_SIZE) large++;
            continue;
        } else if (kind == REC_TORCH_SEG_UNMAP) {
            if (!freed) {
                first = seq, r0 = res ? *res : 0, ncand = 0;
                for (size_t j = 0; (gc > 0 || split) && j < n && rc > 0; j++)
                    if (!seg[j].live && seg[j].size != TORCH_SMALL_SEGMENT && seg[j].addr >> 56 == (uint64_t)dev) {
                        if (gm_grow_fast((void **)&cand, &ccap, ncand + 1, sizeof *cand)) rc = -1;
                        else cand[ncand++] = (gc_cand){seg[j].addr, seg[j].size, seg[j].base, seg[j].stream};
                    }
            }
            if (gm_grow_fast((void **)&sizes, &scap, freed + 1, sizeof *sizes) ||
                gm_grow_fast((void **)&faddr, &acap, freed + 1, sizeof *faddr))
                rc = -1;
            else
                sizes[freed] = size, faddr[freed] = addr;
            freed++, freed_bytes += size;
            if (res) *res -= size < *res ? size : *res;
            if ((i = tseg_find(seg, n, addr)) < n && seg[i].addr == addr && seg[i].size == size) {
                memmove(&seg[i], &seg[i + 1], (n - i - 1) * sizeof *seg);
                n--;
            } else if (i < n) { /* part of an expandable segment unmapped: the rest stays */
                seg[i].size = addr > seg[i].addr ? addr - seg[i].addr : seg[i].size;
            }
            continue;
        } else if (kind == REC_TORCH_FREE_COMPLETED) {
            if ((i = tseg_find(seg, n, addr)) < n && seg[i].live && !--seg[i].live) seg[i].base = large;
            continue;
        } else { /* an allocation: the frees since the last one were inside it */
            /* a full release leaves no segment wholly free; expandable segments: above */
            int retried = freed && !asked && (expandable || !tseg_any_free(seg, n));
            if (retried && kind == REC_TORCH_SEG_MAP && gc > 0 && !split) {
                /* a new segment after the frees: the collection, if any, tells by the cap */
                retried = res && rc > 0 ? gc_release_retried(sizes, (size_t)freed, r0, fraction[dev], gc, size) : -1;
                if (retried < 0 && res && rc > 0)
                    retried = gc_replay_retried(cand, ncand, faddr, (size_t)freed, r0, fraction[dev], gc, size);
            } else if (freed && !asked && split && !expandable) {
                /* max_split_size_mb's release first: the new segment's size is the request's */
                int replayed = kind == REC_TORCH_SEG_MAP && rc > 0 && (res || gc == 0)
                                   ? split_release_retried(cand, ncand, stream, faddr, (size_t)freed, r0,
                                                           res ? fraction[dev] : 0, gc, split, size)
                                   : -1;
                if (replayed == 0 || (replayed > 0 && retried)) retried = replayed;
                else if (retried || replayed > 0) r->exact = 0; /* the release may be the blocks' alone */
            }
            if (retried) {
                if (!r->count) r->first_seq = first;
                r->count++, r->segments += freed, r->bytes += freed_bytes, r->last_seq = first;
            }
            if (retried < 0) r->exact = 0;
            freed = freed_bytes = 0, asked = 0;
            if (kind == REC_TORCH_SEG_MAP) {
                if (res) *res += size;
                if (tseg_add(&seg, &n, &cap, addr, size, stream)) rc = -1;
            } else if ((i = tseg_find(seg, n, addr)) < n) {
                seg[i].live++;
            }
            if (kind == REC_TORCH_ALLOC && size > TORCH_SMALL_SIZE) large++;
        }
    }
    sqlite3_finalize(st);
    free(seg), free(sizes), free(faddr), free(cand);
    return rc < 0 ? -1 : r->count > 0;
}
