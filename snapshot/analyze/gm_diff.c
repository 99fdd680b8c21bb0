/* gm_diff.c — `gpumem diff A.db B.db [--json] [--top N] [--fail-if-peak-grows PCT]`: two
 * recordings side by side with their deltas (B - A): peaks (requested, allocated, reserved),
 * utilization (peak allocated / peak reserved), device allocations, steps and allocations per
 * step, bytes alive at exit, and the tensor classes (names with digits as *) and call sites
 * live at each one's peak allocated moment, ranked by the size of their change.
 * --fail-if-peak-grows PCT makes it a CI gate: exit 1 when B's peak reserved exceeds A's by
 * more than PCT percent.
 *
 * A PyTorch program recorded on PyTorch's allocator (its memory history merged) is compared in
 * PyTorch's view, as report and leaks show it (gm_model_torch_view): its tensors with their
 * names, its max_memory_* peaks, its tensors alive at exit. gpumem's events under it are
 * PyTorch's cached segments (and cuBLAS's workspaces): one "(unnamed)" class whose size is the
 * cache's, not what the program holds. Each side says which view it is in. */
#include "snapshot/analyze/gm_report.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const usage_diff =
    "usage: gpumem diff A.db B.db [--json] [--top N] [--frames user|all] [--fail-if-peak-grows "
    "PCT]\n"
    "                             [--device N]\n"
    "\n"
    "Compares two recordings (B against A): peaks, utilization, allocations per step, bytes\n"
    "alive at exit, and the tensor classes and call sites live at each peak, with deltas.\n"
    "  --json                    one JSON object: a, b, delta, classes, sites, gate\n"
    "  --top N                   rows per table (default 10)\n"
    "  --frames user|all         call sites as in `gpumem report` (default user)\n"
    "  --fail-if-peak-grows PCT  exit 1 when B's peak reserved exceeds A's by more than PCT%\n"
    "                            (a memory-regression gate for CI); JSON gate is null without it\n"
    "A PyTorch program on PyTorch's allocator (its memory history merged) is compared in\n"
    "PyTorch's view, as report and leaks show it: its tensors, names and max_memory_* peaks\n"
    "(the gate on max_memory_reserved(); on the whole-run peak reserved where the program reset\n"
    "its peak stats, from where max_memory_reserved() counts), not the device's segments under it.\n"
    "  --device N                each side's figures are device N's (each side must have held\n"
    "                            memory on it: else exit 2, naming the devices it did use)\n"
    "With memory on several devices, each side's figures are its busiest device's (the highest\n"
    "peak reserved; a PyTorch program's: the busiest of its tensors' devices; --device N for\n"
    "another), never the devices added; the gate compares those.\n"
    "A side whose program did not run to its end (killed, still running, ended by a signal) is\n"
    "said so: its bytes alive at exit are what it held then, not necessarily leaked, and its\n"
    "peak may not have been reached: the gate cannot pass it (exit 3; it fails when B, complete\n"
    "or not, already grew past a complete A).\n"
    "Example: gpumem diff main.db branch.db --fail-if-peak-grows 5\n"
    "Exit code: 0, 1 the peak grew by more than PCT%, 2 usage, 3 a database cannot be read or\n"
    "the gate cannot judge (a side that did not run to its end).\n";

typedef struct kv {
    char *key;
    uint64_t bytes;
} kv;

typedef struct side {
    gm_db d;
    gm_model full; /* the model loaded; m is the view compared (full itself, or its torch view) */
    gm_model m;
    int torch;     /* m is PyTorch's view (its history merged) */
    int device;    /* several devices: m is the busiest one's (gm_model_device_view); -1: one */
    gm_torch_reset reset; /* the program's reset of that device's peak stats (count 0: none) */
    uint64_t nallocs, leaked, nleaked;
    kv *classes, *sites;
    size_t nclasses, nsites;
} side;

static int cmp_kv(const void *a, const void *b)
{
    return strcmp(((const kv *)a)->key, ((const kv *)b)->key);
}

/* sorts by key and sums equal keys */
static size_t aggregate(kv *v, size_t n)
{
    gm_sort(v, n, sizeof *v, cmp_kv);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (o && strcmp(v[o - 1].key, v[i].key) == 0) {
            v[o - 1].bytes += v[i].bytes;
            free(v[i].key);
        } else {
            v[o++] = v[i];
        }
    }
    return o;
}

static char *class_of(const gm_model *m, uint32_t name)
{
    const char *s = name ? gm_str(m, name) : NULL;
    if (!s) return strdup("(unnamed)");
    char *o = malloc(strlen(s) + 1), *p = o;
    if (!o) return NULL;
    for (; *s; s++) {
        if (isdigit((unsigned char)*s)) {
            while (isdigit((unsigned char)s[1]))
                s++;
            *p++ = '*';
        } else {
            *p++ = *s;
        }
    }
    *p = 0;
    return o;
}

static int load_side(const char *path, side *s, int frames_all, int json, int device)
{
    char err[8192];
    memset(s, 0, sizeof *s);
    if (gm_db_open(path, &s->d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem diff: %s\n", err);
        return GM_EXIT_BADDB;
    }
    gm_lossy_say(&s->d, json ? stderr : stdout); /* events lost: said first */
    gm_ending_say(&s->d, json ? stderr : stdout); /* cut short: its "alive at exit" is not leaks */
    if (gm_model_load(&s->d, &s->full, 1, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem diff: %s\n", err);
        return GM_EXIT_BADDB;
    }
    int damaged = gm_damage_gate(&s->d, "diff", 0, 0, stderr); /* pages overwritten: refused */
    if (damaged) return damaged;
    if (gm_model_pick_device(&s->d, &s->full, device, err, sizeof err) != 0) /* --device N leads */
        return gm_scope_fail("diff", GM_SCOPE_NO_DEVICE, err, "each side's busiest");
    gm_symbolize(&s->d, &s->full);
    s->full.frames_all = frames_all;
    /* --device N where PyTorch held nothing on N: N's memory is compared as the device's, said
     * (gm_torch_absent), never PyTorch's view of another device */
    s->torch = s->full.torch.present == 1 && gm_torch_absent(&s->d, NULL, 0) < 0;
    s->m = s->torch ? gm_model_torch_view(&s->full) : s->full;
    /* several devices: the busiest device's figures (as report's; or --device's), never their
     * sum, which no device held; said first */
    s->device = -1;
    int lo, hi, ndev = gm_model_devices(&s->m, &lo, &hi);
    gm_model dv;
    if (ndev > 1 && gm_model_device_view(&s->m, gm_lead_device(&s->m), &dv) == 0) {
        char why[256]; /* asked of the whole view: the device view holds one device */
        const char *w = gm_lead_why(&s->m, "the highest peak reserved; --device N for another", why, sizeof why);
        s->m = dv, s->device = dv.device_only - 1;
        fprintf(json ? stderr : stdout,
                "gpumem: note: %s: the program held memory on %d devices (%d to %d): its figures here are "
                "device %d's (%s), not a sum; gpumem report gives each device's\n",
                path, ndev, lo, hi, s->device,
                w);
    }
    /* PyTorch's max_memory_*() count from the program's last reset of that device (PyTorch's
     * allocator's, or gpumem's as PyTorch's: --allocator gpumem) */
    gm_torch_peak_reset(&s->d, s->device >= 0 ? s->device : GM_TORCH_ALL_DEVICES, &s->reset);
    const gm_model *m = &s->m;
    size_t nlive = 0;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (!gm_alloc_in_view(m, a)) continue;
        s->nallocs++;
        if (!a->death) s->leaked += a->size, s->nleaked++;
        if (a->birth <= m->peak_allocated_seq && (!a->death || a->death > m->peak_allocated_seq))
            nlive++;
    }
    s->classes = calloc(nlive + 1, sizeof(kv));
    s->sites = calloc(nlive + 1, sizeof(kv));
    if (!s->classes || !s->sites) {
        fprintf(stderr, "gpumem diff: out of memory reading %s\n", path);
        return GM_EXIT_BADDB;
    }
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (!gm_alloc_in_view(m, a)) continue;
        if (a->birth > m->peak_allocated_seq || (a->death && a->death <= m->peak_allocated_seq))
            continue;
        char site[2048];
        if (gm_site_desc(m, a->stack, site, sizeof site) < 0)
            snprintf(site, sizeof site, "(no stack)");
        char *c = class_of(m, a->name), *st = strdup(site);
        if (!c || !st) {
            free(c), free(st);
            fprintf(stderr, "gpumem diff: out of memory reading %s\n", path);
            return GM_EXIT_BADDB;
        }
        s->classes[s->nclasses++] = (kv){c, a->size};
        s->sites[s->nsites++] = (kv){st, a->size};
    }
    s->nclasses = aggregate(s->classes, s->nclasses);
    s->nsites = aggregate(s->sites, s->nsites);
    return 0;
}

static void free_side(side *s)
{
    for (size_t i = 0; i < s->nclasses; i++)
        free(s->classes[i].key);
    for (size_t i = 0; i < s->nsites; i++)
        free(s->sites[i].key);
    free(s->classes), free(s->sites);
    if (s->device >= 0) gm_model_device_view_free(&s->m); /* its own array of allocations */
    gm_model_free(&s->full); /* the view shares its tables */
    gm_db_close(&s->d);
}

typedef struct row {
    const char *key;
    uint64_t a, b;
} row;

static int cmp_row(const void *x, const void *y)
{
    const row *p = x, *q = y;
    uint64_t dp = p->a > p->b ? p->a - p->b : p->b - p->a,
             dq = q->a > q->b ? q->a - q->b : q->b - q->a;
    if (dp != dq) return dp > dq ? -1 : 1;
    uint64_t mp = p->a > p->b ? p->a : p->b, mq = q->a > q->b ? q->a : q->b;
    if (mp != mq) return mp > mq ? -1 : 1;
    return strcmp(p->key, q->key);
}

/* merges two sorted lists into rows ranked by |delta| */
static row *merge(const kv *a, size_t na, const kv *b, size_t nb, size_t *n)
{
    row *r = calloc(na + nb + 1, sizeof *r);
    if (!r) return NULL;
    size_t i = 0, j = 0, o = 0;
    while (i < na || j < nb) {
        int c = i >= na ? 1 : j >= nb ? -1 : strcmp(a[i].key, b[j].key);
        if (c < 0)
            r[o++] = (row){a[i].key, a[i].bytes, 0}, i++;
        else if (c > 0)
            r[o++] = (row){b[j].key, 0, b[j].bytes}, j++;
        else
            r[o++] = (row){a[i].key, a[i].bytes, b[j].bytes}, i++, j++;
    }
    gm_sort(r, o, sizeof *r, cmp_row);
    *n = o;
    return r;
}

static void fmt_delta(int64_t d, char *out, size_t outsz)
{
    char b[48];
    gm_fmt_bytes((uint64_t)(d < 0 ? -d : d), b, sizeof b);
    snprintf(out, outsz, "%s%s", d < 0 ? "-" : d > 0 ? "+" : "", b);
}

static void pct_str(uint64_t a, uint64_t b, char *out, size_t outsz)
{
    if (!a)
        snprintf(out, outsz, "%s", b ? "new" : "");
    else
        snprintf(out, outsz, "%+.1f%%", 100.0 * ((double)b - (double)a) / (double)a);
}

static void bytes_line(FILE *out, const char *what, uint64_t a, uint64_t b)
{
    char sa[64], sb[64], sd[80], sp[32];
    gm_fmt_bytes(a, sa, sizeof sa);
    gm_fmt_bytes(b, sb, sizeof sb);
    fmt_delta((int64_t)b - (int64_t)a, sd, sizeof sd);
    pct_str(a, b, sp, sizeof sp);
    fprintf(out, "  %-20s %14s %14s %14s %9s\n", what, sa, sb, sd, sp);
}

static void count_line(FILE *out, const char *what, double a, double b, int frac)
{
    char sp[32];
    pct_str((uint64_t)(a * 100), (uint64_t)(b * 100), sp, sizeof sp);
    if (frac)
        fprintf(out, "  %-20s %14.1f %14.1f %+14.1f %9s\n", what, a, b, b - a, sp);
    else
        fprintf(out, "  %-20s %14.0f %14.0f %+14.0f %9s\n", what, a, b, b - a, sp);
}

static void table(FILE *out, const char *title, row *r, size_t n, int top)
{
    fprintf(out, "\n%s (live at each peak, by size of change):\n", title);
    if (!n) fprintf(out, "  (none)\n");
    for (size_t i = 0; i < n && i < (size_t)top; i++) {
        char sa[64], sb[64], sd[80];
        gm_fmt_bytes(r[i].a, sa, sizeof sa);
        gm_fmt_bytes(r[i].b, sb, sizeof sb);
        fmt_delta((int64_t)r[i].b - (int64_t)r[i].a, sd, sizeof sd);
        fprintf(out, "  %12s %12s %13s  %s\n", sa, sb, sd, r[i].key);
    }
    if (n > (size_t)top) fprintf(out, "  ... %zu more (use --top N)\n", n - (size_t)top);
}

static void json_rows(FILE *out, const char *name, const char *keyname, row *r, size_t n, int top)
{
    fprintf(out, ",\"%s\":[", name);
    for (size_t i = 0; i < n && i < (size_t)top; i++) {
        fprintf(out, "%s{\"%s\":", i ? "," : "", keyname);
        gm_json_str(out, r[i].key);
        fprintf(out, ",\"a\":%" PRIu64 ",\"b\":%" PRIu64 ",\"delta\":%" PRId64 "}", r[i].a, r[i].b,
                (int64_t)r[i].b - (int64_t)r[i].a);
    }
    fputc(']', out);
}

static double util(const gm_model *m)
{
    return m->peak_reserved ? 100.0 * (double)m->peak_allocated / (double)m->peak_reserved : 0;
}
static double per_step(const side *s)
{
    /* no "step N" ranges (an imported snapshot, a program without NVTX): no per-step figure,
     * never the whole count as if it were one step */
    return s->m.nsteps ? (double)s->nallocs / (double)s->m.nsteps : NAN;
}

/* a figure, or null where there is none (NAN) */
static void json_num(FILE *out, double v)
{
    if (isfinite(v)) fprintf(out, "%.2f", v);
    else fputs("null", out);
}

static void json_side(FILE *out, const side *s)
{
    fprintf(out, "{\"path\":");
    gm_json_str(out, s->d.path);
    fprintf(out, ",\"view\":\"%s\"", s->torch ? "torch" : "device");
    fprintf(out,
            ",\"peak_requested\":%" PRIu64 ",\"peak_allocated\":%" PRIu64
            ",\"peak_reserved\":%" PRIu64 ",\"utilization_pct\":%.2f,\"allocations\":%" PRIu64
            ",\"steps\":%zu,\"allocations_per_step\":",
            s->m.peak_requested, s->m.peak_allocated, s->m.peak_reserved, util(&s->m), s->nallocs,
            s->m.nsteps);
    json_num(out, per_step(s));
    fprintf(out, ",\"alive_at_exit\":%" PRIu64 ",\"alive_at_exit_count\":%" PRIu64, s->leaked, s->nleaked);
    if (s->device >= 0) fprintf(out, ",\"device\":%d", s->device);
    else fputs(",\"device\":null", out);
    fputs(",\"torch_absent\":", out);
    gm_torch_absent_json(&s->d, out);
    fputc(',', out);
    gm_torch_reset_json(out, &s->reset);
    char ending[256]; /* null, or why the program did not run to its end (gm_ending_line) */
    gm_ending_line((gm_db *)&s->d, ending, sizeof ending);
    fputs(",\"ending\":", out);
    gm_json_str(out, ending[0] ? ending : NULL);
    fputc('}', out);
}

int gm_cmd_diff(int argc, char **argv)
{
    const char *pa = NULL, *pb = NULL;
    int json = 0, top = 10, frames_all = 0, device = -1;
    double gate = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_diff, stdout);
            return 0;
        } else if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "--top") || !strcmp(a, "--fail-if-peak-grows") ||
                 !strcmp(a, "--frames")) {
            const char *v = gm_opt_value(argc, argv, &i);
            if (!strcmp(a, "--frames")) {
                if (v && !strcmp(v, "all"))
                    frames_all = 1;
                else if (!v || strcmp(v, "user"))
                    return fprintf(stderr, "gpumem diff: --frames takes user or all\n%s",
                                   GM_HELP("diff")),
                           GM_EXIT_USAGE;
            } else if (!strcmp(a, "--top")) {
                int rc = gm_arg_top("diff", v, &top);
                if (rc) return rc;
            } else {
                double p;
                if (gm_arg_real(v, 0, 1e6, &p) != 0)
                    return fprintf(stderr,
                                   "gpumem diff: --fail-if-peak-grows needs a percentage (like 5 "
                                   "or 2.5), got '%s'\n%s",
                                   v ? v : "", GM_HELP("diff")),
                           GM_EXIT_USAGE;
                gate = p;
            }
        } else if (gm_opt_is_device(a)) {
            int rc = gm_arg_device("diff", argc, argv, &i, &device);
            if (rc) return rc;
        } else if (a[0] == '-' && a[1])
            return fprintf(stderr, "gpumem diff: unknown option '%s'\n%s", a, GM_HELP("diff")),
                   GM_EXIT_USAGE;
        else if (!pa)
            pa = a;
        else if (!pb)
            pb = a;
        else
            return fprintf(stderr, "gpumem diff: two databases only; '%s' is extra\n%s", a,
                           GM_HELP("diff")),
                   GM_EXIT_USAGE;
    }
    if (!pb)
        return fprintf(stderr, "gpumem diff: give two databases, A (the baseline) and B\n%s",
                       GM_HELP("diff")),
               GM_EXIT_USAGE;
    side A, B;
    int rc = load_side(pa, &A, frames_all, json, device);
    if (rc) {
        free_side(&A);
        return rc;
    }
    if ((rc = load_side(pb, &B, frames_all, json, device)) != 0) {
        free_side(&A);
        free_side(&B);
        return rc;
    }
    size_t nc = 0, ns = 0;
    row *rc_ = merge(A.classes, A.nclasses, B.classes, B.nclasses, &nc);
    row *rs = merge(A.sites, A.nsites, B.sites, B.nsites, &ns);
    double growth = A.m.peak_reserved
                        ? 100.0 * ((double)B.m.peak_reserved - (double)A.m.peak_reserved) /
                              (double)A.m.peak_reserved
                        : (B.m.peak_reserved ? INFINITY : 0);
    int failed = gate >= 0 && B.m.peak_reserved > A.m.peak_reserved && growth > gate;
    /* a side cut short may not have reached its peak: a pass (or a failure against a cut-short
     * A, whose peak may be too low) says nothing. B's growth past a complete A is real: a peak
     * reached stays reached. */
    char why_a[128], why_b[128];
    int a_cut = gm_ending(&A.d, why_a, sizeof why_a) != NULL, b_cut = gm_ending(&B.d, why_b, sizeof why_b) != NULL;
    int unjudged = gate >= 0 && (a_cut || b_cut) && !(failed && !a_cut);
    /* what the gate compares: PyTorch's max_memory_reserved() where both sides are in its view,
     * unless a program reset its peak stats: then the whole-run peak reserved (what the run needed;
     * its max_memory_reserved() counts from the reset), under that name */
    int reset = A.reset.count || B.reset.count;
    const char *gate_on = A.torch && B.torch && !reset ? "max_memory_reserved" : "peak_reserved";
    const char *gate_words = A.torch && B.torch ? (reset ? "PyTorch's whole-run peak reserved"
                                                         : "PyTorch's max_memory_reserved()")
                                                : "peak reserved";
    char dev_words[64] = ""; /* several devices: whose peak */
    if (A.device >= 0 || B.device >= 0) {
        if (A.device == B.device) snprintf(dev_words, sizeof dev_words, " (device %d's)", A.device);
        else snprintf(dev_words, sizeof dev_words, " (the busiest device's: A's %d, B's %d)", A.device < 0 ? 0 : A.device,
                      B.device < 0 ? 0 : B.device);
    }
    FILE *out = stdout;
    if (json) {
        fputs("{\"a\":", out);
        json_side(out, &A);
        fputs(",\"b\":", out);
        json_side(out, &B);
        fprintf(out,
                ",\"delta\":{\"peak_requested\":%" PRId64 ",\"peak_allocated\":%" PRId64
                ",\"peak_reserved\":%" PRId64
                ",\"peak_reserved_pct\":%.3f,\"utilization_pts\":%.2f,\"allocations\":%" PRId64
                ",\"allocations_per_step\":",
                (int64_t)(B.m.peak_requested - A.m.peak_requested),
                (int64_t)(B.m.peak_allocated - A.m.peak_allocated),
                (int64_t)(B.m.peak_reserved - A.m.peak_reserved), isfinite(growth) ? growth : 1e308,
                util(&B.m) - util(&A.m), (int64_t)(B.nallocs - A.nallocs));
        json_num(out, per_step(&B) - per_step(&A));
        fprintf(out, ",\"alive_at_exit\":%" PRId64 "}", (int64_t)(B.leaked - A.leaked));
        if (rc_) json_rows(out, "classes", "class", rc_, nc, top);
        if (rs) json_rows(out, "sites", "site", rs, ns, top);
        /* documented keys are always there: gate is null without --fail-if-peak-grows */
        if (gate >= 0)
            fprintf(out, ",\"gate\":{\"max_growth_pct\":%g,\"on\":\"%s\",\"failed\":%s,\"judged\":%s}", gate,
                    gate_on, failed ? "true" : "false", unjudged ? "false" : "true");
        else
            fputs(",\"gate\":null", out);
        fputs("}\n", out);
    } else {
        fprintf(out, "gpumem diff: A = %s, B = %s\n", A.d.path, B.d.path);
        if (dev_words[0]) fprintf(out, "  the figures are one device's%s, not the devices added\n", dev_words);
        if (A.torch || B.torch)
            fprintf(out, "  %s\n", A.torch && B.torch
                                       ? (reset ? "PyTorch's view (its memory history): its tensors, names and whole-run "
                                                  "peaks, its tensors alive at exit"
                                                : "PyTorch's view (its memory history): its tensors, names and peaks "
                                                  "(max_memory_allocated/_reserved), its tensors alive at exit")
                                       : "views differ: A is in PyTorch's view (its tensors), B the device's, or the "
                                         "other way round: the figures compare different things");
        for (const side *x = &A; x; x = x == &A ? &B : NULL) { /* PyTorch held nothing on --device's */
            char absent[1024];
            if (gm_torch_absent(&x->d, absent, sizeof absent) >= 0) fprintf(out, "  %s: %s\n", x == &A ? "A" : "B", absent);
        }
        for (const side *x = &A; x; x = x == &A ? &B : NULL) /* its max_memory_*() are not the peaks here */
            if (x->reset.count) {
                char ra[32], rr[32];
                gm_fmt_bytes(x->reset.max_allocated, ra, sizeof ra);
                gm_fmt_bytes(x->reset.max_reserved, rr, sizeof rr);
                /* several devices: PyTorch's statistics, and this reset, are the side's device's */
                char dn[16] = "";
                if (x->device >= 0) snprintf(dn, sizeof dn, "%d", x->device);
                fprintf(out, "  %s: the program reset PyTorch's peak stats (reset_peak_memory_stats(%s), last at event %" PRIu64
                             "): the peaks below are the whole run's; its max_memory_allocated(%s) / "
                             "max_memory_reserved(%s) since: %s / %s\n",
                        x == &A ? "A" : "B", dn, x->reset.seq, dn, dn, ra, rr);
            }
        fputc('\n', out);
        fprintf(out, "  %-20s %14s %14s %14s %9s\n", "", "A", "B", "B - A", "change");
        bytes_line(out, "peak requested", A.m.peak_requested, B.m.peak_requested);
        bytes_line(out, "peak allocated", A.m.peak_allocated, B.m.peak_allocated);
        bytes_line(out, "peak reserved", A.m.peak_reserved, B.m.peak_reserved);
        fprintf(out, "  %-20s %13.1f%% %13.1f%% %+11.1f pts\n", "utilization", util(&A.m),
                util(&B.m), util(&B.m) - util(&A.m));
        count_line(out, "allocations", (double)A.nallocs, (double)B.nallocs, 0);
        count_line(out, "steps", (double)A.m.nsteps, (double)B.m.nsteps, 0);
        if (isfinite(per_step(&A)) && isfinite(per_step(&B)))
            count_line(out, "allocations/step", per_step(&A), per_step(&B), 1);
        else { /* a side without steps has no per-step figure: no change to compute */
            char a[32] = "-", b[32] = "-";
            if (isfinite(per_step(&A))) snprintf(a, sizeof a, "%.1f", per_step(&A));
            if (isfinite(per_step(&B))) snprintf(b, sizeof b, "%.1f", per_step(&B));
            fprintf(out, "  %-20s %14s %14s %14s %9s\n", "allocations/step", a, b, "-", "n/a");
        }

        bytes_line(out, "alive at exit", A.leaked, B.leaked);
        if (rc_) table(out, "tensor classes", rc_, nc, top);
        if (rs) table(out, "call sites", rs, ns, top);
    }
    if (gate >= 0) {
        char a[64], b[64];
        gm_fmt_bytes(A.m.peak_reserved, a, sizeof a);
        gm_fmt_bytes(B.m.peak_reserved, b, sizeof b);
        if (unjudged)
            fprintf(stderr, "gpumem diff: the gate cannot judge: the program of %s did not run to its end "
                            "(%s), so its %s may not have been reached. Record it again to its end\n",
                    a_cut ? A.d.path : B.d.path, a_cut ? why_a : why_b, gate_words);
        else if (failed)
            fprintf(stderr, "gpumem diff: %s%s grew %.1f%% (%s -> %s), more than the %g%% allowed\n",
                    gate_words, dev_words, growth, a, b, gate);
        else if (!json)
            fprintf(out, "\n%s%s %s -> %s (%+.1f%%): within the %g%% allowed\n", gate_words, dev_words, a, b,
                    isfinite(growth) ? growth : 0.0, gate);
    }
    free(rc_);
    free(rs);
    free_side(&A);
    free_side(&B);
    return unjudged ? GM_EXIT_CANNOT_JUDGE : failed ? 1 : 0;
}
