/* gpumem viz DB -o run.html: one self-contained HTML page (inline SVG + JavaScript, no network).
 * The data comes from snapshot/'s model (gm_model_load: the same sweep and peaks as `gpumem
 * report`); the page template (viz/page.html) is embedded at build time as viz_page_html. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include "../snapshot/gm.h"

extern const char viz_page_html[];

#define VIZ_BUCKETS 2000
#define VIZ_TOP 10

static void json_str(FILE *o, const char *s) {
    fputc('"', o);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(o, "\\%c", *p);
        else if (*p == '<') fputs("\\u003c", o); /* never close the <script> early */
        else if (*p < 0x20) fprintf(o, "\\u%04x", *p);
        else fputc(*p, o);
    }
    fputc('"', o);
}

typedef struct { uint64_t seq; int64_t delta, rdelta; } viz_ev; /* allocated, requested */
static int ev_cmp(const void *a, const void *b) {
    const viz_ev *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}
static int size_cmp_desc(const void *a, const void *b) {
    const gm_alloc *x = *(const gm_alloc *const *)a, *y = *(const gm_alloc *const *)b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->birth < y->birth ? -1 : x->birth > y->birth; /* ties: oldest first */
}

static int is_device(const gm_alloc *a) { return a->device >= 0 && a->kind != 5 && a->kind != 7; }

/* Timeline: allocated bytes per seq bucket (min/max), from the model's allocation lifetimes. */
static int write_timeline(FILE *o, const gm_model *m) {
    size_t n = 0;
    viz_ev *ev = malloc(sizeof *ev * (m->nallocs * 2 + 1));
    if (!ev) return -1;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (!is_device(a)) continue;
        ev[n++] = (viz_ev){a->birth, (int64_t)a->size, (int64_t)a->requested};
        if (a->death) ev[n++] = (viz_ev){a->death, -(int64_t)a->size, -(int64_t)a->requested};
    }
    qsort(ev, n, sizeof *ev, ev_cmp);
    uint64_t lo = m->max_seq ? 1 : 0, hi = m->max_seq ? m->max_seq : 1;
    double width = (double)(hi - lo + 1) / VIZ_BUCKETS;
    if (width < 1) width = 1;
    fprintf(o, "\"timeline\":{\"first_seq\":%llu,\"last_seq\":%llu,\"buckets\":[",
            (unsigned long long)lo, (unsigned long long)hi);
    int64_t cur = 0, bmin = 0, bmax = 0, rcur = 0, rmax = 0;
    long bucket = -1;
    int first = 1;
    for (size_t i = 0; i <= n; i++) {
        long b = i < n ? (long)((double)(ev[i].seq - lo) / width) : -2;
        if (b != bucket) {
            if (bucket >= 0) {
                fprintf(o, "%s[%llu,%lld,%lld,%lld]", first ? "" : ",",
                        (unsigned long long)(lo + (uint64_t)(bucket * width)), (long long)bmin,
                        (long long)bmax, (long long)rmax);
                first = 0;
            }
            if (i == n) break;
            bucket = b;
            bmin = bmax = cur;
            rmax = rcur;
        }
        cur += ev[i].delta;
        rcur += ev[i].rdelta;
        if (rcur > rmax) rmax = rcur;
        if (cur < bmin) bmin = cur;
        if (cur > bmax) bmax = cur;
    }
    fputs("],\"steps\":[", o);
    for (size_t i = 0; i < m->nsteps; i++)
        fprintf(o, "%s[%lld,%llu]", i ? "," : "", (long long)m->steps[i].step,
                (unsigned long long)m->steps[i].end_seq);
    fputs("]}", o);
    free(ev);
    return 0;
}

static void write_live_at_peak(FILE *o, const gm_model *m) {
    size_t n = 0;
    const gm_alloc **live = malloc(sizeof *live * (m->nallocs + 1));
    fputs("\"live_at_peak\":[", o);
    if (live) {
        uint64_t p = m->peak_allocated_seq;
        for (size_t i = 0; i < m->nallocs; i++) {
            const gm_alloc *a = &m->allocs[i];
            if (is_device(a) && a->birth <= p && (a->death == 0 || a->death > p)) live[n++] = a;
        }
        qsort(live, n, sizeof *live, size_cmp_desc);
        for (size_t i = 0; i < n && i < VIZ_TOP; i++) {
            char site[512] = "", sz[32];
            gm_site_desc(m, live[i]->stack, site, sizeof site);
            gm_fmt_bytes(live[i]->size, sz, sizeof sz);
            fprintf(o, "%s{\"name\":", i ? "," : "");
            json_str(o, live[i]->name ? gm_str(m, live[i]->name) : "(unnamed)");
            fprintf(o, ",\"bytes\":%llu,\"fmt\":", (unsigned long long)live[i]->size);
            json_str(o, sz);
            fputs(",\"site\":", o);
            json_str(o, site);
            fputc('}', o);
        }
        free(live);
    }
    fputc(']', o);
}

/* The segment map of the peak snapshot (reason 1) and of each OOM snapshot (reason 2). */
static void write_segments(FILE *o, gm_db *d) {
    fputs("\"snapshots\":[", o);
    if (!gm_table_exists(d, "snapshots")) { fputc(']', o); return; }
    sqlite3_stmt *s = NULL, *g = NULL, *b = NULL;
    sqlite3_prepare_v2(d->db, "SELECT id, seq, reason FROM snapshots WHERE reason IN (1,2) ORDER BY id",
                       -1, &s, NULL);
    sqlite3_prepare_v2(d->db, "SELECT idx, addr, size, mapped FROM segments WHERE snapshot = ? ORDER BY idx",
                       -1, &g, NULL);
    sqlite3_prepare_v2(d->db, "SELECT addr, size, state FROM blocks WHERE snapshot = ? AND segment = ? ORDER BY addr",
                       -1, &b, NULL);
    int fs = 1;
    while (s && g && b && sqlite3_step(s) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(s, 0);
        fprintf(o, "%s{\"id\":%lld,\"seq\":%lld,\"reason\":\"%s\",\"segments\":[", fs ? "" : ",",
                (long long)id, (long long)sqlite3_column_int64(s, 1),
                sqlite3_column_int(s, 2) == 1 ? "peak" : "oom");
        fs = 0;
        sqlite3_reset(g);
        sqlite3_bind_int64(g, 1, id);
        int fg = 1;
        while (sqlite3_step(g) == SQLITE_ROW) {
            int64_t idx = sqlite3_column_int64(g, 0);
            fprintf(o, "%s{\"addr\":%lld,\"size\":%lld,\"mapped\":%lld,\"blocks\":[", fg ? "" : ",",
                    (long long)sqlite3_column_int64(g, 1), (long long)sqlite3_column_int64(g, 2),
                    (long long)sqlite3_column_int64(g, 3));
            fg = 0;
            sqlite3_reset(b);
            sqlite3_bind_int64(b, 1, id);
            sqlite3_bind_int64(b, 2, idx);
            int fb = 1;
            while (sqlite3_step(b) == SQLITE_ROW) {
                fprintf(o, "%s[%lld,%lld,%d]", fb ? "" : ",", (long long)sqlite3_column_int64(b, 0),
                        (long long)sqlite3_column_int64(b, 1), sqlite3_column_int(b, 2));
                fb = 0;
            }
            fputs("]}", o);
        }
        fputs("]}", o);
    }
    sqlite3_finalize(s);
    sqlite3_finalize(g);
    sqlite3_finalize(b);
    fputc(']', o);
}

static void write_ooms(FILE *o, const gm_model *m) {
    fputs("\"ooms\":[", o);
    for (size_t i = 0; i < m->nooms; i++) {
        const gm_oom *x = &m->ooms[i];
        char r[32], a[32], v[32];
        gm_fmt_bytes(x->requested, r, sizeof r);
        gm_fmt_bytes(x->allocated, a, sizeof a);
        gm_fmt_bytes(x->reserved, v, sizeof v);
        fprintf(o, "%s{\"seq\":%llu,\"requested\":", i ? "," : "", (unsigned long long)x->seq);
        json_str(o, r);
        fputs(",\"allocated\":", o);
        json_str(o, a);
        fputs(",\"reserved\":", o);
        json_str(o, v);
        fputs(",\"name\":", o);
        json_str(o, x->name ? gm_str(m, x->name) : "");
        fputc('}', o);
    }
    fputc(']', o);
}

/* Allocations alive at the end, largest first (at most VIZ_LEAKS rows; the count is all). */
#define VIZ_LEAKS 200
static void write_leaks(FILE *o, const gm_model *m) {
    size_t n = 0;
    const gm_alloc **v = malloc(sizeof *v * (m->nallocs + 1));
    if (v)
        for (size_t i = 0; i < m->nallocs; i++)
            if (is_device(&m->allocs[i]) && !m->allocs[i].death) v[n++] = &m->allocs[i];
    if (v) qsort(v, n, sizeof *v, size_cmp_desc);
    fprintf(o, "\"nleaks\":%zu,\"leaks\":[", n);
    for (size_t i = 0; i < n && i < VIZ_LEAKS; i++) {
        const gm_alloc *a = v[i];
        char site[512] = "";
        gm_site_desc(m, a->stack, site, sizeof site);
        fprintf(o, "%s{\"bytes\":%llu,\"name\":", i ? "," : "", (unsigned long long)a->size);
        json_str(o, a->name ? gm_str(m, a->name) : "(unnamed)");
        fputs(",\"site\":", o);
        json_str(o, site);
        fputc('}', o);
    }
    fputc(']', o);
    free(v);
}

int gm_viz_main(int argc, char **argv) {
    const char *db = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) out = argv[++i];
        else if (argv[i][0] == '-') {
            fprintf(stderr, "gpumem viz: unknown option '%s'; usage: gpumem viz DB -o run.html\n", argv[i]);
            return GM_EXIT_USAGE;
        } else db = argv[i];
    }
    if (!db || !out) {
        fputs("gpumem viz: usage: gpumem viz DB -o run.html\n", stderr);
        return GM_EXIT_USAGE;
    }
    char err[1024];
    gm_db d;
    if (gm_db_open(db, &d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem viz: %s\n", err);
        return GM_EXIT_BADDB;
    }
    gm_model m;
    if (gm_model_load(&d, &m, 0, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem viz: %s\n", err);
        gm_model_free(&m);
        gm_db_close(&d);
        return GM_EXIT_BADDB;
    }
    gm_symbolize(&d, &m); /* sites as `gpumem report` names them (file:line) */
    FILE *o = fopen(out, "w");
    if (!o) {
        fprintf(stderr, "gpumem viz: cannot write %s; check the directory exists and is writable\n", out);
        gm_model_free(&m);
        gm_db_close(&d);
        return GM_EXIT_USAGE;
    }
    const char *mark = strstr(viz_page_html, "/*GM_DATA*/");
    fwrite(viz_page_html, 1, (size_t)(mark - viz_page_html), o);
    char pr[32], pa[32], pv[32];
    gm_fmt_bytes(m.peak_requested, pr, sizeof pr);
    gm_fmt_bytes(m.peak_allocated, pa, sizeof pa);
    gm_fmt_bytes(m.peak_reserved, pv, sizeof pv);
    fputs("{\"summary\":{\"peak_requested\":", o);
    json_str(o, pr);
    fputs(",\"peak_allocated\":", o);
    json_str(o, pa);
    fputs(",\"peak_reserved\":", o);
    json_str(o, pv);
    fprintf(o, ",\"peak_allocated_bytes\":%llu,\"peak_allocated_seq\":%llu,\"events\":%llu},",
            (unsigned long long)m.peak_allocated, (unsigned long long)m.peak_allocated_seq,
            (unsigned long long)m.events);
    write_timeline(o, &m);
    fputc(',', o);
    write_live_at_peak(o, &m);
    fputc(',', o);
    write_segments(o, &d);
    fputc(',', o);
    write_ooms(o, &m);
    fputc(',', o);
    write_leaks(o, &m);
    fputc('}', o);
    fputs(mark + strlen("/*GM_DATA*/"), o);
    int bad = ferror(o);
    if (fclose(o) != 0 || bad) {
        fprintf(stderr, "gpumem viz: writing %s failed (disk full?)\n", out);
        bad = 1;
    }
    gm_model_free(&m);
    gm_db_close(&d);
    return bad ? GM_EXIT_USAGE : 0;
}
