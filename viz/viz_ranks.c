/* viz_ranks.c — `gpumem viz A.db B.db ... -o job.html` (or a directory): the ranks of one job
 * on one page, one timeline lane per rank, aligned by step.
 *
 * Ranks record on their own clocks and make different numbers of events, so neither time nor
 * seq lines them up; the step ranges do ("step N", the same N on every rank). The x axis is
 * therefore cut into columns of equal width: what happened before the first step, each step
 * number any rank has, what happened after the last; inside a column each rank's own events
 * spread over its width in seq order. Every lane has the same y scale (the job's largest peak
 * allocated), so the lanes compare at a glance; each lane draws device memory allocated (the
 * largest value per pixel, as the single page's band) and marks its peak. The page is plain
 * SVG with <title> tooltips: no script, no network.
 *
 * Ranks: meta.rank when every database has a distinct one, else the order of the files — as
 * `gpumem report` merges them (snapshot/gm_ranks.c). */
#include "viz/viz.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define LANE_W 1200 /* pixels of the plot */
#define LANE_H 110
#define LEFT 130

typedef struct vr_col {
    uint64_t *maxv; /* per pixel of the column: the largest allocated, 0 when no event */
    uint64_t start; /* allocated when the column starts */
    int any;
} vr_col;

typedef struct vr_rank {
    char *path;
    int64_t rank, meta_rank;
    uint64_t peak_allocated, peak_reserved;
    int64_t peak_step;                /* -1 none */
    int64_t *steps;                   /* its step numbers, ascending */
    uint64_t *step_first, *step_last; /* seq range of each step */
    size_t nsteps;
    struct vr_ev *ev;
    size_t nev;
} vr_rank;

typedef struct vr_ev {
    uint64_t seq;
    int64_t delta;
} vr_ev;

static int cmp_ev(const void *a, const void *b)
{
    const vr_ev *x = a, *y = b;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    return (x->delta > y->delta) - (x->delta < y->delta);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void rank_free(vr_rank *r)
{
    free(r->path), free(r->steps), free(r->step_first), free(r->step_last), free(r->ev);
}

/* One database: its device allocations and frees in seq order, and the seq range of each step
 * (its allocations' births and the step's last event). */
static int rank_load(const char *path, size_t index, vr_rank *r)
{
    memset(r, 0, sizeof *r);
    char err[4096];
    gm_db d;
    gm_model m;
    if (gm_db_open(path, &d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem viz: %s\n", err);
        return GM_EXIT_BADDB;
    }
    if (gm_model_load(&d, &m, 0, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem viz: %s\n", err);
        gm_model_free(&m);
        gm_db_close(&d);
        return GM_EXIT_BADDB;
    }
    r->path = strdup(path);
    r->rank = (int64_t)index;
    r->meta_rank = gm_meta_int(&d, "rank", -1);
    r->peak_allocated = m.peak_allocated;
    r->peak_reserved = m.peak_reserved;
    r->peak_step = -1;
    r->nsteps = m.nsteps;
    r->steps = malloc((m.nsteps + 1) * sizeof *r->steps);
    r->step_first = malloc((m.nsteps + 1) * sizeof *r->step_first);
    r->step_last = malloc((m.nsteps + 1) * sizeof *r->step_last);
    r->ev = malloc((2 * m.nallocs + 1) * sizeof *r->ev);
    int rc = 0;
    if (!r->path || !r->steps || !r->step_first || !r->step_last || !r->ev) {
        rc = GM_EXIT_BADDB;
        fprintf(stderr, "gpumem viz: out of memory reading %s\n", path);
        goto out;
    }
    for (size_t k = 0; k < m.nsteps; k++)
        r->steps[k] = m.steps[k].step;
    qsort(r->steps, r->nsteps, sizeof *r->steps, cmp_i64);
    for (size_t k = 0; k < m.nsteps; k++) {
        r->step_first[k] = UINT64_MAX;
        r->step_last[k] = 0;
    }
    for (size_t k = 0; k < m.nsteps; k++) { /* last events, in step-number order */
        int64_t *p = bsearch(&m.steps[k].step, r->steps, r->nsteps, sizeof *r->steps, cmp_i64);
        if (p) r->step_last[p - r->steps] = m.steps[k].end_seq;
    }
    for (size_t i = 0; i < m.nallocs; i++) {
        const gm_alloc *a = &m.allocs[i];
        const gm_range *rg = gm_range_of(&m, a->range);
        if (rg && rg->step >= 0) {
            int64_t *p = bsearch(&rg->step, r->steps, r->nsteps, sizeof *r->steps, cmp_i64);
            if (p && a->birth < r->step_first[p - r->steps]) r->step_first[p - r->steps] = a->birth;
            if (a->birth == m.peak_allocated_seq) r->peak_step = rg->step;
        }
        if (!viz_is_device(a)) continue;
        r->ev[r->nev++] = (vr_ev){a->birth, (int64_t)a->size};
        if (a->death) r->ev[r->nev++] = (vr_ev){a->death, -(int64_t)a->size};
    }
    qsort(r->ev, r->nev, sizeof *r->ev, cmp_ev);
out:
    gm_model_free(&m);
    gm_db_close(&d);
    return rc;
}

/* The column of an event at seq: 0 before the first step, 1 + i for step number cols[i] when
 * seq falls in that step's range on this rank, ncols - 1 after the last; between two steps of
 * the rank it joins the next step. */
static size_t column_of(const vr_rank *r, const int64_t *cols, size_t nsc, uint64_t seq)
{
    if (!r->nsteps || seq < (r->step_first[0] == UINT64_MAX ? 0 : r->step_first[0])) return 0;
    for (size_t k = 0; k < r->nsteps; k++)
        if (seq <= r->step_last[k]) {
            int64_t *p = bsearch(&r->steps[k], cols, nsc, sizeof *cols, cmp_i64);
            return p ? 1 + (size_t)(p - cols) : 0;
        }
    return nsc + 1;
}

static void html_text(FILE *o, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", o);
        else if (*s == '>')
            fputs("&gt;", o);
        else if (*s == '&')
            fputs("&amp;", o);
        else if (*s == '"')
            fputs("&quot;", o);
        else
            fputc(*s, o);
    }
}

static void write_lane(FILE *o, const vr_rank *r, int is_top, const int64_t *cols, size_t nsc,
                       uint64_t ymax)
{
    size_t ncols = nsc + 2;
    double cw = (double)LANE_W / (double)ncols;
    size_t px = (size_t)cw;
    if (px < 1) px = 1;
    uint64_t *maxv = calloc(ncols * px, sizeof *maxv);
    size_t *cnt = calloc(ncols, sizeof *cnt), *seen = calloc(ncols, sizeof *seen);
    uint64_t *startv = calloc(ncols, sizeof *startv);
    char a[32], b[32];
    gm_fmt_bytes(r->peak_allocated, a, sizeof a), gm_fmt_bytes(r->peak_reserved, b, sizeof b);
    fprintf(o,
            "<div class=\"lane%s\" data-rank=\"%" PRId64 "\" data-peak=\"%" PRIu64
            "\" data-peak-reserved=\"%" PRIu64 "\" data-peak-step=\"%" PRId64 "\" data-steps=\"",
            is_top ? " top" : "", r->rank, r->peak_allocated, r->peak_reserved, r->peak_step);
    for (size_t k = 0; k < r->nsteps; k++)
        fprintf(o, "%s%" PRId64, k ? "," : "", r->steps[k]);
    fprintf(o, "\"><h3>rank %" PRId64 "%s: peak %s allocated, %s reserved", r->rank,
            is_top ? " (sets the job's peak)" : "", a, b);
    if (r->peak_step >= 0) fprintf(o, ", in step %" PRId64, r->peak_step);
    fputs(" <small>", o);
    html_text(o, r->path);
    fprintf(o, "</small></h3>\n<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">",
            LEFT + LANE_W + 10, LANE_H + 20, LEFT + LANE_W + 10, LANE_H + 20);
    if (!maxv || !cnt || !seen || !startv) goto out;
    /* events per column, then spread each column's events over its pixels */
    for (size_t i = 0; i < r->nev; i++)
        cnt[column_of(r, cols, nsc, r->ev[i].seq)]++;
    int64_t cur = 0;
    uint64_t peak_x = 0, peak_v = 0;
    size_t last_col = 0;
    for (size_t i = 0; i < r->nev; i++) {
        size_t c = column_of(r, cols, nsc, r->ev[i].seq);
        if (c != last_col || i == 0) {
            for (size_t k = last_col + 1; k <= c && i; k++)
                startv[k] = (uint64_t)cur;
            last_col = c;
        }
        cur += r->ev[i].delta;
        size_t p = cnt[c] ? seen[c] * px / cnt[c] : 0;
        seen[c]++;
        uint64_t v = cur > 0 ? (uint64_t)cur : 0;
        if (v > maxv[c * px + p]) maxv[c * px + p] = v;
        if (v > peak_v) peak_v = v, peak_x = (uint64_t)(LEFT + (double)c * cw + (double)p);
    }
    for (size_t k = last_col + 1; k < ncols; k++)
        startv[k] = (uint64_t)cur;
    /* the area: a pixel without an event keeps the value before it */
    fprintf(o, "<path class=\"alloc\" d=\"M%d %d", LEFT, LANE_H);
    for (size_t c = 0; c < ncols; c++) {
        uint64_t v = startv[c];
        for (size_t p = 0; p < px; p++) {
            if (maxv[c * px + p]) v = maxv[c * px + p];
            double x = LEFT + (double)c * cw + (double)p;
            double y = LANE_H - (ymax ? (double)v / (double)ymax * (LANE_H - 8) : 0);
            fprintf(o, " L%.1f %.1f", x, y);
        }
    }
    fprintf(o, " L%d %d Z\"/>", LEFT + LANE_W, LANE_H);
    /* columns: step numbers, and the rank's own absent steps shaded */
    for (size_t c = 0; c < ncols; c++) {
        double x = LEFT + (double)c * cw;
        fprintf(o, "<line class=\"col\" x1=\"%.1f\" y1=\"0\" x2=\"%.1f\" y2=\"%d\"/>", x, x,
                LANE_H);
        char lab[32];
        if (c == 0)
            snprintf(lab, sizeof lab, "start");
        else if (c == ncols - 1)
            snprintf(lab, sizeof lab, "end");
        else
            snprintf(lab, sizeof lab, "step %" PRId64, cols[c - 1]);
        fprintf(o, "<text class=\"collab\" x=\"%.1f\" y=\"%d\">%s</text>", x + 3, LANE_H + 14, lab);
    }
    gm_fmt_bytes(ymax, a, sizeof a);
    fprintf(o,
            "<text class=\"ylab\" x=\"4\" y=\"12\">%s</text><text class=\"ylab\" x=\"4\" "
            "y=\"%d\">0</text>",
            a, LANE_H);
    gm_fmt_bytes(peak_v, a, sizeof a);
    fprintf(o,
            "<circle class=\"peak\" data-bytes=\"%" PRIu64 "\" cx=\"%" PRIu64
            "\" cy=\"%.1f\" r=\"4\"><title>rank %" PRId64 " peak: %s allocated</title></circle>",
            peak_v, peak_x, LANE_H - (ymax ? (double)peak_v / (double)ymax * (LANE_H - 8) : 0),
            r->rank, a);
out:
    fputs("</svg></div>\n", o);
    free(maxv), free(cnt), free(seen), free(startv);
}

static int cmp_rank(const void *a, const void *b)
{
    const vr_rank *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}
static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int add_path(char ***v, size_t *n, size_t *cap, const char *p)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        char **nv = realloc(*v, *cap * sizeof *nv);
        if (!nv) return -1;
        *v = nv;
    }
    return ((*v)[(*n)++] = strdup(p)) ? 0 : -1;
}

int viz_ranks_main(int argc, char **argv)
{
    int npos = 0, dirs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--with"))
            i++;
        else if (argv[i][0] != '-')
            npos++, dirs += is_dir(argv[i]);
    }
    if (npos < 2 && !dirs) return -1; /* one database: the single page */
    const char *out = NULL;
    char **paths = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc)
            out = argv[++i];
        else if (argv[i][0] == '-') {
            fprintf(
                stderr,
                "gpumem viz: '%s' is not an option of the page of several ranks (-o FILE.html)\n",
                argv[i]);
            rc = GM_EXIT_USAGE;
        } else if (is_dir(argv[i])) {
            DIR *dh = opendir(argv[i]);
            struct dirent *e;
            size_t before = n;
            while (dh && (e = readdir(dh))) {
                size_t l = strlen(e->d_name);
                if (l < 4 || strcmp(e->d_name + l - 3, ".db") || e->d_name[0] == '.') continue;
                char p[4096];
                snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
                if (add_path(&paths, &n, &cap, p)) rc = GM_EXIT_BADDB;
            }
            if (dh) closedir(dh);
            qsort(paths + before, n - before, sizeof *paths, cmp_str);
            if (n == before) {
                fprintf(stderr, "gpumem viz: %s has no *.db file\n", argv[i]);
                rc = GM_EXIT_BADDB;
            }
        } else if (add_path(&paths, &n, &cap, argv[i]))
            rc = GM_EXIT_BADDB;
    }
    if (!rc && !out) {
        fputs("gpumem viz: usage: gpumem viz A.db B.db ... -o job.html (or a directory of "
              "databases)\n",
              stderr);
        rc = GM_EXIT_USAGE;
    }
    vr_rank *rs = rc ? NULL : calloc(n + 1, sizeof *rs);
    if (!rc && !rs) rc = GM_EXIT_BADDB;
    for (size_t i = 0; !rc && i < n; i++)
        rc = rank_load(paths[i], i, &rs[i]);
    FILE *o = NULL;
    if (!rc) {
        int all = 1; /* meta.rank when every database has a distinct one */
        for (size_t i = 0; i < n && all; i++) {
            all = rs[i].meta_rank >= 0;
            for (size_t j = 0; j < i && all; j++)
                all = rs[j].meta_rank != rs[i].meta_rank;
        }
        for (size_t i = 0; i < n; i++)
            rs[i].rank = all ? rs[i].meta_rank : (int64_t)i;
        qsort(rs, n, sizeof *rs, cmp_rank);
        size_t top = 0, ns = 0;
        uint64_t ymax = 0;
        for (size_t i = 0; i < n; i++) {
            if (rs[i].peak_allocated > rs[top].peak_allocated) top = i;
            if (rs[i].peak_allocated > ymax) ymax = rs[i].peak_allocated;
            ns += rs[i].nsteps;
        }
        int64_t *cols = malloc((ns + 1) * sizeof *cols);
        size_t nc = 0;
        for (size_t i = 0; cols && i < n; i++)
            for (size_t k = 0; k < rs[i].nsteps; k++)
                cols[nc++] = rs[i].steps[k];
        if (cols) qsort(cols, nc, sizeof *cols, cmp_i64);
        size_t u = 0;
        for (size_t i = 0; i < nc; i++)
            if (!u || cols[u - 1] != cols[i]) cols[u++] = cols[i];
        o = cols ? fopen(out, "w") : NULL;
        if (!o) {
            fprintf(stderr, "gpumem viz: cannot write %s\n", out);
            rc = GM_EXIT_USAGE;
        } else {
            fprintf(
                o,
                "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>gpumem: %zu "
                "ranks</title>\n"
                "<style>body{font:13px sans-serif;margin:16px}h3{margin:14px 0 2px;font-size:13px}"
                "small{color:#777;font-weight:normal}.alloc{fill:#4a7fd6;opacity:.8}"
                ".top .alloc{fill:#d6634a}.col{stroke:#bbb;stroke-dasharray:2 "
                "3}.collab,.ylab{font-size:10px;"
                "fill:#555}.peak{fill:#c00}</style></head><body>\n",
                n);
            char a[32], b[32];
            uint64_t mn = UINT64_MAX;
            for (size_t i = 0; i < n; i++)
                if (rs[i].peak_allocated < mn) mn = rs[i].peak_allocated;
            gm_fmt_bytes(rs[top].peak_allocated, a, sizeof a), gm_fmt_bytes(ymax - mn, b, sizeof b);
            fprintf(o,
                    "<h2>%zu ranks, one lane each, aligned by step</h2>\n<p id=\"summary\" "
                    "data-peak-rank=\"%" PRId64 "\">Rank %" PRId64
                    " sets the job's peak: %s allocated. Imbalance: largest / smallest peak "
                    "%.3fx, spread %s. Same scale on every lane; <code>gpumem report</code> with "
                    "the same databases "
                    "says why.</p>\n",
                    n, rs[top].rank, rs[top].rank, a, mn ? (double)ymax / (double)mn : 0.0, b);
            for (size_t i = 0; i < n; i++)
                write_lane(o, &rs[i], i == top, cols, u, ymax);
            fputs("</body></html>\n", o);
            if (fclose(o) != 0) {
                fprintf(stderr, "gpumem viz: cannot write %s\n", out);
                rc = GM_EXIT_USAGE;
            } else
                fprintf(stderr, "gpumem viz: wrote %s (%zu ranks)\n", out, n);
        }
        free(cols);
    }
    for (size_t i = 0; rs && i < n; i++)
        rank_free(&rs[i]);
    free(rs);
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
    return rc;
}
