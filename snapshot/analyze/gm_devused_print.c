/* gm_devused_print.c — the report's "device used (what nvidia-smi shows)" block, text and
 * JSON, printed from the account read/gm_devused.c computes in the model's sweep. */
#include "snapshot/analyze/gm_report.h"
#include "snapshot/read/gm_devused.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char *cat_words(int cat)
{
    static const char *const n[GM_DU_NCAT] = {"program VMM", "program pools", "pass-through",
                                              "CUDA arrays"};
    return cat >= 0 && cat < GM_DU_NCAT ? n[cat] : "?";
}

/* ---- the sites as printed ------------------------------------------------------------------- */

/* A row of the by-call-site table: the account's rows are by (what, stack), and stacks that
 * differ below what a call site prints (the Python frames skipped, a library's frames) print the
 * same: a row per (what, printed site), as every other by-site table has it. */
typedef struct shown_site {
    int cat;
    char desc[2048]; /* "" where no stack was recorded */
    uint64_t bytes, count;
} shown_site;

static int cmp_shown(const void *a, const void *b)
{
    const shown_site *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    if (x->cat != y->cat)
        return x->cat - y->cat;
    return strcmp(x->desc, y->desc);
}

/* The device's sites merged by what is printed, largest first, in *out (malloc'ed); how many, or
 * -1 out of memory. */
static long shown_sites(const gm_model *m, const gm_du_device *e, shown_site **out)
{
    *out = NULL;
    if (!e->nsites)
        return 0;
    shown_site *r = malloc(e->nsites * sizeof *r);
    if (!r)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < e->nsites; i++) {
        shown_site t = {.cat = e->sites[i].cat, .bytes = e->sites[i].bytes, .count = e->sites[i].count};
        if (e->sites[i].stack)
            gm_site_desc(m, e->sites[i].stack, t.desc, sizeof t.desc);
        size_t j = 0;
        while (j < n && (r[j].cat != t.cat || strcmp(r[j].desc, t.desc)))
            j++;
        if (j < n)
            r[j].bytes += t.bytes, r[j].count += t.count;
        else
            r[n++] = t;
    }
    gm_sort(r, n, sizeof *r, cmp_shown);
    *out = r;
    return (long)n;
}

/* ---- printers ------------------------------------------------------------------------------ */

static void fmt_signed(int64_t v, char *out, size_t n)
{
    if (v >= 0) {
        gm_fmt_bytes((uint64_t)v, out, n);
        return;
    }
    if (n < 2)
        return;
    out[0] = '-';
    gm_fmt_bytes((uint64_t)-v, out + 1, n - 1);
}

static void row_text(FILE *out, const char *label, const gm_du_point *const p[3], int which)
{
    fprintf(out, "  %-34s", label);
    for (int i = 0; i < 3; i++) {
        char b[32] = "-";
        if (p[i]->have) {
            switch (which) {
            case 0: gm_fmt_bytes(p[i]->used, b, sizeof b); break;
            case 1: gm_fmt_bytes(p[i]->reserved, b, sizeof b); break;
            case 2: gm_fmt_bytes(p[i]->outside_total, b, sizeof b); break;
            case 3: fmt_signed(p[i]->not_recorded, b, sizeof b); break;
            default: gm_fmt_bytes(p[i]->outside[which - 4], b, sizeof b); break;
            }
        }
        fprintf(out, " %14s", b);
    }
    fputc('\n', out);
}

void gm_devused_print_text(FILE *out, const gm_model *m, const gm_devused *u, int top)
{
    fprintf(out, "\nDevice used (what nvidia-smi shows): the driver's own cuMemGetInfo, explained\n");
    if (!u->ndev) {
        fprintf(out, "  not sampled (recorded before schema 1.3, or no CUDA context was current "
                     "when device memory changed)\n");
        return;
    }
    for (size_t di = 0; di < u->ndev; di++) {
        const gm_du_device *e = &u->dev[di];
        const gm_du_point *p[3] = {&e->start, &e->peak, &e->exit};
        const gm_du_point *any = e->peak.have ? &e->peak : e->exit.have ? &e->exit : &e->start;
        char t[32], label[64];
        gm_fmt_bytes(any->total, t, sizeof t);
        snprintf(label, sizeof label, "device %d (%s total)", e->device, t);
        fprintf(out, "  %-34s %14s %14s %14s\n", label, "at start", "at the peak", "at exit");
        row_text(out, "device used", p, 0);
        row_text(out, "= reserved by gpumem", p, 1);
        row_text(out, "+ recorded outside gpumem", p, 2);
        static const char *const sub[GM_DU_NCAT] = {"    program VMM", "    program pools",
                                                    "    pass-through", "    CUDA arrays"};
        for (int c = 0; c < GM_DU_NCAT; c++) {
            int show = 0;
            for (int i = 0; i < 3; i++)
                show |= p[i]->have && p[i]->outside[c];
            if (show)
                row_text(out, sub[c], p, 4 + c);
        }
        row_text(out, "+ not recorded", p, 3);
        if (e->start.have) {
            char c[32];
            fmt_signed(e->start.not_recorded, c, sizeof c);
            fprintf(out, "  CUDA context measured at start: %s (%" PRId64 " bytes: device used "
                         "before any recorded memory; includes other processes on the "
                         "device)\n",
                    c, e->start.not_recorded);
        }
        const gm_du_point *ref = e->peak.have ? &e->peak : e->exit.have ? &e->exit : &e->start;
        if (ref->not_recorded > 0) {
            static const char causes[] =
                "library workspaces (cuBLAS, cuDNN, NCCL buffers), modules loaded later, memory a "
                "pool keeps cached after frees, an allocator not interposed, or another process "
                "on the same device";
            char nr[32];
            gm_fmt_bytes((uint64_t)ref->not_recorded, nr, sizeof nr);
            fprintf(out, "  not recorded %s%s: ", nr,
                    ref == &e->peak ? " at the peak" : ref == &e->exit ? " at exit" : " at start");
            if (e->start.have) {
                char ctx[32];
                fmt_signed(e->start.not_recorded, ctx, sizeof ctx);
                int64_t extra = ref->not_recorded - e->start.not_recorded;
                fprintf(out, "likely the CUDA context (%s at start)", ctx);
                if (extra > 0) {
                    char x[32];
                    gm_fmt_bytes((uint64_t)extra, x, sizeof x);
                    fprintf(out, ", plus %s that appeared since: %s", x, causes);
                }
            } else {
                fprintf(out, "the CUDA context (not measured: no sample at start), %s", causes);
            }
            fputs("\n", out);
        }
        shown_site *ss;
        long ns = shown_sites(m, e, &ss);
        if (ns)
            fprintf(out, "  held outside gpumem's allocator at the peak, by call site\n");
        if (ns < 0)
            fprintf(out, "    (not listed: out of memory)\n");
        for (long i = 0; i < ns && i < top; i++) {
            char b[32];
            gm_fmt_bytes(ss[i].bytes, b, sizeof b);
            fprintf(out, "    %10s  %-14s %" PRIu64 "x  %s\n", b, cat_words(ss[i].cat), ss[i].count,
                    ss[i].desc[0] ? ss[i].desc : "(no stack recorded)");
        }
        free(ss);
    }
}

static void point_json(FILE *out, const char *key, const gm_du_point *p)
{
    fprintf(out, "\"%s\":", key);
    if (!p->have) {
        fputs("null", out);
        return;
    }
    fprintf(out,
            "{\"seq\":%" PRIu64 ",\"used\":%" PRIu64 ",\"free\":%" PRIu64 ",\"total\":%" PRIu64
            ",\"reserved_by_gpumem\":%" PRIu64 ",\"recorded_outside\":%" PRIu64 ",\"outside\":{",
            p->seq, p->used, p->free, p->total, p->reserved, p->outside_total);
    for (int c = 0; c < GM_DU_NCAT; c++)
        fprintf(out, "%s\"%s\":%" PRIu64, c ? "," : "", gm_devused_cat_name(c), p->outside[c]);
    fprintf(out, "},\"not_recorded\":%" PRId64 "}", p->not_recorded);
}

void gm_devused_print_json(FILE *out, const gm_model *m, const gm_devused *u, int top)
{
    fputs("{\"devices\":[", out);
    for (size_t di = 0; di < u->ndev; di++) {
        const gm_du_device *e = &u->dev[di];
        fprintf(out, "%s{\"device\":%d,\"context_at_start\":", di ? "," : "", e->device);
        if (e->start.have)
            fprintf(out, "%" PRId64, e->start.not_recorded);
        else
            fputs("null", out);
        fputc(',', out);
        point_json(out, "start", &e->start);
        fputc(',', out);
        point_json(out, "peak", &e->peak);
        fputc(',', out);
        point_json(out, "exit", &e->exit);
        fputs(",\"outside_at_peak_by_site\":[", out);
        shown_site *ss;
        long ns = shown_sites(m, e, &ss);
        for (long i = 0; i < ns && i < top; i++) {
            fprintf(out, "%s{\"what\":\"%s\",\"bytes\":%" PRIu64 ",\"count\":%" PRIu64 ",\"site\":",
                    i ? "," : "", gm_devused_cat_name(ss[i].cat), ss[i].bytes, ss[i].count);
            gm_json_str(out, ss[i].desc[0] ? ss[i].desc : NULL);
            fputc('}', out);
        }
        free(ss);
        fputs("]}", out);
    }
    fputs("]}", out);
}
