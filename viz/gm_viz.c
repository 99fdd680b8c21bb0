/* gpumem viz DB -o run.html: one self-contained HTML page (inline SVG + JavaScript, no network).
 * The data comes from snapshot/'s model (gm_model_load: the same sweep and peaks as `gpumem
 * report`); the page template (viz/page.html) is embedded at build time as viz_page_html.
 * This file: the command, the summary, segment maps, OOMs, leaks and the --with analyses (frag,
 * advise, tune run as their own commands in a child process, their --json embedded as is);
 * the timeline is viz_timeline.c's, the icicles viz_flame.c's. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "snapshot/analyze/gm_advise.h"
#include "snapshot/formats/gm_out.h"
#include "snapshot/read/gm_sig.h"
#include "snapshot/analyze/gm_frag.h"
#include "snapshot/analyze/gm_tune.h"
#include "viz/viz.h"

extern const char viz_page_html[];

#define VIZ_TOP 10
#define VIZ_CLASS_NAMES 1000 /* class names the page can show (tensor tables, tooltips) */
#define VIZ_TENSORS 60000    /* allocations the page describes one by one (viz_tensors.c) */

/* The step number the peak allocated moment falls in; -1 none. */
static long long peak_step(const gm_model *m)
{
    for (size_t i = 0; i < m->nsteps; i++)
        if (m->steps[i].end_seq >= m->peak_allocated_seq) return (long long)m->steps[i].step;
    return -1;
}

static int size_cmp_desc(const void *a, const void *b)
{
    const gm_alloc *x = *(const gm_alloc *const *)a, *y = *(const gm_alloc *const *)b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->birth < y->birth ? -1 : x->birth > y->birth; /* ties: oldest first */
}

static void write_live_at_peak(FILE *o, const gm_model *m, const viz_classes *c,
                               const viz_categories *k, viz_tensors *t)
{
    size_t n = 0;
    const gm_alloc **live = malloc(sizeof *live * (m->nallocs + 1));
    fputs("\"live_at_peak\":[", o);
    if (live) {
        uint64_t p = m->peak_allocated_seq;
        for (size_t i = 0; i < m->nallocs; i++) {
            const gm_alloc *a = &m->allocs[i];
            if (viz_is_device(a) && a->birth <= p && (a->death == 0 || a->death > p)) live[n++] = a;
        }
        gm_sort(live, n, sizeof *live, size_cmp_desc);
        for (size_t i = 0; i < n && i < VIZ_TOP; i++) {
            char site[512] = "", sz[32];
            gm_site_desc(m, live[i]->stack, site, sizeof site);
            gm_fmt_bytes(live[i]->size, sz, sizeof sz);
            fprintf(o, "%s{\"name\":", i ? "," : "");
            viz_json_str(o, live[i]->name ? gm_str(m, live[i]->name) : "(unnamed)");
            fprintf(o, ",\"bytes\":%llu,\"fmt\":", (unsigned long long)live[i]->size);
            viz_json_str(o, sz);
            fputs(",\"site\":", o);
            viz_json_str(o, site);
            fputs(",\"class\":", o);
            size_t ai = (size_t)(live[i] - m->allocs);
            viz_json_str(o, c->of[ai] < c->n ? c->names[c->of[ai]] : "");
            fprintf(o, ",\"category\":\"%s\",\"tensor\":%ld}", viz_cat_name[k->cat[ai]],
                    viz_tensor_ref(t, ai));
        }
        free(live);
    }
    fputc(']', o);
}

/* Allocations made and freed between two moments (either order): what a map taken at one moment
 * lacks for the other. */
static void write_between(FILE *o, const gm_model *m, uint64_t from, uint64_t to)
{
    uint64_t lo = from < to ? from : to, hi = from < to ? to : from;
    size_t nb = 0, nf = 0;
    uint64_t bb = 0, fb = 0;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (!viz_is_device(a)) continue;
        if (a->birth > lo && a->birth <= hi) nb++, bb += a->size;
        if (a->death > lo && a->death <= hi) nf++, fb += a->size;
    }
    fprintf(o, "{\"made\":%zu,\"made_bytes\":%llu,\"freed\":%zu,\"freed_bytes\":%llu}", nb,
            (unsigned long long)bb, nf, (unsigned long long)fb);
}

/* The segment map of the peak snapshot (reason 1) and of each OOM snapshot (reason 2). Blocks:
 * [addr, size, state, class, tensor, category, phase] with state as in the blocks table (0 free,
 * 1 allocated, 2 pending, 3 unmapped), class the rank of its allocation's tensor class, tensor its
 * row in "tensors" (a hover shows what a band shows), category and phase its allocation's (-1:
 * none, or no allocation known). The peak snapshot is the recorder's at the reserved peak, which
 * need not be the peak allocated moment (the timeline's red dot): "between" says what changed
 * from one to the other. */
static void write_segments(FILE *o, gm_db *d, const gm_model *m, const viz_classes *c,
                           const viz_categories *k, viz_tensors *t)
{
    fputs("\"snapshots\":[", o);
    if (!gm_table_exists(d, "snapshots")) {
        fputc(']', o);
        return;
    }
    sqlite3_stmt *s = NULL, *g = NULL, *b = NULL;
    sqlite3_prepare_v2(d->db,
                       "SELECT id, seq, reason FROM snapshots WHERE reason IN (1,2) ORDER BY id",
                       -1, &s, NULL);
    sqlite3_prepare_v2(
        d->db, "SELECT idx, addr, size, mapped FROM segments WHERE snapshot = ? ORDER BY idx", -1,
        &g, NULL);
    sqlite3_prepare_v2(d->db,
                       "SELECT addr, size, state FROM blocks WHERE snapshot = ? AND "
                       "segment = ? ORDER BY addr",
                       -1, &b, NULL);
    int fs = 1;
    while (s && g && b && sqlite3_step(s) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(s, 0);
        uint64_t seq = (uint64_t)sqlite3_column_int64(s, 1);
        int peak = sqlite3_column_int(s, 2) == 1;
        fprintf(o, "%s{\"id\":%lld,\"seq\":%llu,\"reason\":\"%s\",\"between\":", fs ? "" : ",",
                (long long)id, (unsigned long long)seq, peak ? "peak" : "oom");
        write_between(o, m, seq, m->peak_allocated_seq);
        fputs(",\"segments\":[", o);
        fs = 0;
        /* each block's allocation by identity (the allocator's id), not by address: the
         * address was handed out again after the snapshot */
        u64map owners = {0};
        gm_snapshot_owners(d, id, &owners);
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
                int state = sqlite3_column_int(b, 2);
                const uint64_t *birth = state == 1 ? u64map_get(&owners, (uint64_t)sqlite3_column_int64(b, 0)) : NULL;
                long ai = birth ? gm_alloc_by_id(m, *birth) : -1;
                int dev = ai >= 0 && c->of[ai] != UINT32_MAX;
                long cls = dev ? (long)c->of[ai] : -1;
                long ti = dev ? viz_tensor_ref(t, (size_t)ai) : -1;
                fprintf(o, "%s[%lld,%lld,%d,%ld,%ld,%d,%d]", fb ? "" : ",",
                        (long long)sqlite3_column_int64(b, 0),
                        (long long)sqlite3_column_int64(b, 1), state, cls, ti,
                        dev ? k->cat[ai] : -1, dev ? k->phase[ai] : -1);
                fb = 0;
            }
            fputs("]}", o);
        }
        fputs("]}", o);
        u64map_free(&owners);
    }
    sqlite3_finalize(s);
    sqlite3_finalize(g);
    sqlite3_finalize(b);
    fputc(']', o);
}

/* Each OOM with its figures and the limit it met, named by what set it where it bound (report's
 * rule: gm_oom_limit_from, the knob where the device left more room than the limit) */
static void write_ooms(FILE *o, gm_db *d, const gm_model *m)
{
    fputs("\"ooms\":[", o);
    for (size_t i = 0; i < m->nooms; i++) {
        const gm_oom *x = &m->ooms[i];
        char r[32], a[32], v[32], li[32], lim[320] = "none";
        gm_fmt_bytes(x->requested, r, sizeof r);
        gm_fmt_bytes(x->allocated, a, sizeof a);
        gm_fmt_bytes(x->reserved, v, sizeof v);
        if (x->limit != GM_NO_LIMIT) {
            const char *knob = x->limit <= x->reserved + x->device_free
                                   ? gm_oom_knob(gm_oom_limit_from(d, x->limit, x->limit_flags))
                                   : NULL;
            gm_fmt_bytes(x->limit, li, sizeof li);
            snprintf(lim, sizeof lim, "%s%s%s%s", li, knob ? " (" : "", knob ? knob : "", knob ? ")" : "");
        }
        fprintf(o, "%s{\"seq\":%llu,\"requested\":", i ? "," : "", (unsigned long long)x->seq);
        viz_json_str(o, r);
        fputs(",\"allocated\":", o);
        viz_json_str(o, a);
        fputs(",\"reserved\":", o);
        viz_json_str(o, v);
        fputs(",\"limit\":", o);
        viz_json_str(o, lim);
        fputs(",\"name\":", o);
        viz_json_str(o, x->name ? gm_str(m, x->name) : "");
        fputc('}', o);
    }
    fputc(']', o);
}

/* Allocations alive at the end, largest first (at most VIZ_LEAKS rows; the count is all), by
 * leaks's rule (gm_model_leak_view: a PyTorch program's tensors, not its cached segments;
 * gm_alloc_leaked: nor cuBLAS's blocks of its handles; gm_view_host_held: with the pinned host
 * blocks kept to the end, which PyTorch's view holds apart), each with the memory it is. Until
 * 2026-12-07 device memory only: one pinned block a program kept was in leaks' count, not here. */
#define VIZ_LEAKS 200
static const char *leak_memory(const gm_alloc *a)
{
    return a->kind == 5 ? "pinned host" : a->kind == 7 ? "managed" : "device"; /* rec.h: REC_HOST_ALLOC, REC_MANAGED_ALLOC */
}
static void write_leaks(FILE *o, const gm_model *dm)
{
    gm_model lv = gm_model_leak_view(dm);
    const gm_model *m = &lv;
    size_t n = 0, nheld = m->is_torch_view ? m->nhost_held : 0;
    const gm_alloc **v = malloc(sizeof *v * (m->nallocs + nheld + 1));
    if (v) {
        for (size_t i = 0; i < m->nallocs; i++)
            if (gm_alloc_leaked(&m->allocs[i])) v[n++] = &m->allocs[i];
        for (size_t i = 0; i < nheld; i++)
            v[n++] = &m->host_held[i];
        gm_sort(v, n, sizeof *v, size_cmp_desc);
    }
    fprintf(o, "\"nleaks\":%zu,\"leaks\":[", n);
    for (size_t i = 0; i < n && i < VIZ_LEAKS; i++) {
        const gm_alloc *a = v[i];
        char site[512] = "";
        gm_site_desc(m, a->stack, site, sizeof site);
        fprintf(o, "%s{\"bytes\":%llu,\"memory\":\"%s\",\"name\":", i ? "," : "", (unsigned long long)a->size,
                leak_memory(a));
        viz_json_str(o, a->name ? gm_str(m, a->name) : "(unnamed)");
        fputs(",\"site\":", o);
        viz_json_str(o, site);
        fputc('}', o);
    }
    fputc(']', o);
    free(v);
}

static const char *const usage_viz =
    "usage: gpumem viz DB -o FILE.html [--force] [--with frag,advise,tune] [--device N]\n"
    "       gpumem viz A.db B.db ... | DIR -o FILE.html [--with ...]   (the ranks of one job)\n"
    "\n"
    "One self-contained HTML page (inline SVG and JavaScript, no network; open it from disk):\n"
    "  - peak requested, allocated and reserved, as `gpumem report` prints them (a program on\n"
    "    several devices: the busiest device's (a PyTorch program's: the busiest of its\n"
    "    tensors' devices), or --device N's, and every picture its own; the page says which\n"
    "    and why);\n"
    "  - memory over time, opening on the step of the peak (one step either side): each\n"
    "    allocation a band (hover: name, category, size, phases, stack; click pins it; arrow\n"
    "    keys step, +/- zoom); all steps one click away as a min/max envelope; coloured by\n"
    "    category (where names or phases say it), phase or tensor class;\n"
    "  - icicles of the bytes live at the peak by stack and of all bytes allocated by stack,\n"
    "    from the program's entry (start-up frames folded; a switch shows them);\n"
    "  - the segment map at the peak and at each OOM, to scale, blocks coloured as the bands;\n"
    "  - the OOM forensics and the allocations alive at the end; for a program that did not\n"
    "    run to its end (killed, still running, ended by a signal) the note report and leaks\n"
    "    give, in the summary and over those allocations: alive then, not necessarily leaked.\n"
    "  --with LIST  the analyses to run and show in a panel (comma-separated), instead of the\n"
    "               default: frag (`gpumem frag --json`, with --search when tune runs too: one\n"
    "               recommendation on the page), advise (`gpumem advise --json`), tune\n"
    "               (`gpumem tune --json`), or none (alone). By default each runs when the recording is\n"
    "               small enough for it to take under about 2 s: frag up to 500000 events, tune\n"
    "               up to 200000, advise up to 10000 (the page says which did not, and how to\n"
    "               add them)\n"
    "Several databases (or a directory: its *.db files), one per rank: a lane per rank on top\n"
    "(allocated and reserved over time, aligned by step, one scale for all; a rank on several\n"
    "devices: its busiest device's, or --device N's, said on stderr), ranked by meta.rank\n"
    "(else in the order given), and the rank that sets the job's peak allocated in detail below.\n"
    "  -o FILE.html  the page; '-' for standard output. An existing FILE is replaced only when\n"
    "               it is a page gpumem viz wrote (or empty); never through a symbolic link,\n"
    "               never onto a database read; written whole or not at all (a temporary\n"
    "               file, then renamed)\n"
    "  --force      replace FILE even when it is not a gpumem viz page\n"
    "  --device N   device N's page, its analyses' panels too, instead of the busiest device's\n"
    "               (a device the program held no memory on: exit 2, naming the ones it did;\n"
    "               memory on N alone: the page is the same as without it)\n"
    "Exit code: 0; 2 usage or FILE refused; 3 unreadable database or the page cannot be\n"
    "written.\n";

enum { VIZ_FRAG = 1, VIZ_ADVISE = 2, VIZ_TUNE = 4 };
static const char *const analysis_name[3] = {"frag", "advise", "tune"};
/* By default an analysis runs when the recording has at most this many events: where it takes
 * under about 2 s (measured on the included trainer's recordings and rec_bench's synthetic ones,
 * on 2 busy cores). Decided by size, not by timing it, so the page does not depend on the load. */
static const uint64_t analysis_auto_events[3] = {500000, 10000, 200000};

/* Runs `gpumem NAME DB --json` (the command's own main) in a child process, so that a failing
 * analysis can only lose its panel, and embeds its JSON as "NAME":{...}, or "NAME":{"error":
 * "..."} with the first line it printed on stderr. search: frag with --search. */
static void write_analysis(FILE *o, const char *name, const char *db, int device, int search)
{
    FILE *out = tmpfile(), *err = tmpfile();
    int status = -1;
    fflush(NULL); /* nothing buffered is copied into the child */
    pid_t pid = out && err ? gm_sig_fork() : -1;
    if (pid == 0) {
        dup2(fileno(out), 1);
        dup2(fileno(err), 2);
        /* the page's device: --device's, passed on (else each finds the same busiest one) */
        char dev[32];
        snprintf(dev, sizeof dev, "--device=%d", device);
        char *args[5] = {(char *)name, (char *)db, (char *)"--json", NULL, NULL};
        int nargs = 3;
        if (device >= 0) args[nargs++] = dev;
        if (search) args[nargs++] = (char *)"--search";
        int rc = !strcmp(name, "frag")     ? gm_frag_main(nargs, args)
                 : !strcmp(name, "advise") ? gm_advise_main(nargs, args)
                                           : gm_tune_main(nargs, args);
        fflush(stdout); /* only these: the page's FILE was flushed before the fork and must */
        fflush(stderr); /* not be written twice */
        _exit(rc);
    }
    /* told to stop: the analysis is told too, and the page's temporary file removed */
    int sig = pid > 0 ? gm_sig_wait_child(pid, &status) : 0;
    if (sig) gm_sig_die(sig);
    fprintf(o, "\"%s\":", name);
    int ok = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) != GM_EXIT_USAGE &&
             WEXITSTATUS(status) != GM_EXIT_BADDB;
    long n = out ? ftell(out) : 0;
    if (ok && n > 1) {
        rewind(out);
        int ch;
        while ((ch = fgetc(out)) != EOF) {
            if (ch == '<')
                fputs("\\u003c", o); /* only inside strings in JSON */
            else if (ch != '\n')
                fputc(ch, o);
        }
    } else {
        char line[512] = "";
        if (err) {
            rewind(err);
            if (!fgets(line, sizeof line, err)) line[0] = 0;
            line[strcspn(line, "\n")] = 0;
        }
        char msg[700];
        snprintf(msg, sizeof msg, "gpumem %s failed%s%s", name, line[0] ? ": " : "", line);
        fputs("{\"error\":", o);
        viz_json_str(o, msg);
        fputc('}', o);
    }
    if (out) fclose(out);
    if (err) fclose(err);
}

/* The page of one database: the detail; lanes (may be NULL): the "ranks" member's JSON. */
/* Where the page goes: the path and the output rule's inputs (every database read) and --force. */
typedef struct viz_out {
    const char *path;
    const char *const *inputs;
    size_t ninputs;
    int force;
    int device; /* --device N: N's timeline and peaks; -1: the busiest device's */
} viz_out;

static int write_page(const char *db, const viz_out *vo, int with, const char *lanes)
{
    char err[1024];
    gm_db d;
    if (gm_db_open(db, &d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem viz: %s\n", err);
        return GM_EXIT_BADDB;
    }
    gm_lossy_say(&d, stderr); /* events lost: said first (the page says it too) */
    gm_ending_say(&d, stderr); /* did not run to its end: the page says it too */
    /* several devices: the busiest device's (or --device's) timeline and peaks (each device its
     * own memory) */
    int sc = gm_db_scope_one(&d, NULL, vo->device, err, sizeof err);
    if (sc < 0) {
        gm_db_close(&d);
        return gm_scope_fail("viz", sc, err, "the busiest");
    }
    gm_scope_say(&d, "the page's timeline and peaks", stderr);
    gm_model m;
    int unread = gm_model_load(&d, &m, 0, err, sizeof err) != 0;
    if (unread) fprintf(stderr, "gpumem viz: %s\n", err);
    if (unread || gm_damage_gate(&d, "viz", 0, 0, stderr)) { /* pages overwritten: refused */
        gm_model_free(&m);
        gm_db_close(&d);
        return GM_EXIT_BADDB;
    }
    gm_symbolize(&d, &m); /* sites as `gpumem report` names them (file:line) */
    viz_classes cls;
    viz_categories cat;
    viz_tensors tens = {.cap = VIZ_TENSORS};
    if (viz_classes_build(&m, &cls) != 0) {
        fprintf(stderr, "gpumem viz: out of memory reading %s\n", db);
        gm_model_free(&m);
        gm_db_close(&d);
        return GM_EXIT_BADDB;
    }
    if (viz_categories_build(&d, &m, &cat) != 0) {
        fprintf(stderr, "gpumem viz: out of memory reading %s\n", db);
        viz_classes_free(&cls);
        gm_model_free(&m);
        gm_db_close(&d);
        return GM_EXIT_BADDB;
    }
    gm_out out;
    int rc = gm_out_open(&out, vo->path, GM_OUT_HTML, vo->force, vo->inputs, vo->ninputs, err,
                         sizeof err);
    if (rc) {
        fprintf(stderr, "gpumem viz: %s\n", err);
        viz_classes_free(&cls);
        viz_categories_free(&cat);
        gm_model_free(&m);
        gm_db_close(&d);
        return rc;
    }
    FILE *o = out.f;
    const char *mark = strstr(viz_page_html, "/*GM_DATA*/");
    fwrite(viz_page_html, 1, (size_t)(mark - viz_page_html), o);
    char pr[32], pa[32], pv[32];
    gm_fmt_bytes(m.peak_requested, pr, sizeof pr);
    gm_fmt_bytes(m.peak_allocated, pa, sizeof pa);
    gm_fmt_bytes(m.peak_reserved, pv, sizeof pv);
    fputs("{\"summary\":{", o);
    gm_scope_json(&d, o, "", ","); /* several devices: whose figures the page's are */
    fputs("\"peak_requested\":", o);
    viz_json_str(o, pr);
    fputs(",\"peak_allocated\":", o);
    viz_json_str(o, pa);
    fputs(",\"peak_reserved\":", o);
    viz_json_str(o, pv);
    /* the program's own VMM (PyTorch's expandable segments): in none of the peaks above, so a
     * run that only mapped its own memory does not read as one that held nothing */
    char pm[32];
    gm_fmt_bytes(m.peak_vmm, pm, sizeof pm);
    fputs(",\"program_vmm\":", o);
    viz_json_str(o, pm);
    fprintf(o, ",\"peak_program_vmm_bytes\":%llu", (unsigned long long)m.peak_vmm);
    fprintf(
        o,
        ",\"peak_allocated_bytes\":%llu,\"peak_allocated_seq\":%llu,\"peak_reserved_bytes\":%llu,"
        "\"peak_reserved_seq\":%llu,\"events\":%llu,\"dropped_events\":%llu,\"peak_step\":%lld",
        (unsigned long long)m.peak_allocated, (unsigned long long)m.peak_allocated_seq,
        (unsigned long long)m.peak_reserved, (unsigned long long)m.peak_reserved_seq,
        (unsigned long long)m.events, (unsigned long long)gm_dropped(&d), peak_step(&m));
    fputs(",\"program\":", o);
    char cmd[1024];
    gm_meta_text(&d, "cmdline", cmd, sizeof cmd);
    viz_json_str(o, cmd);
    fputs(",\"db\":", o);
    viz_json_str(o, db);
    /* a program that did not run to its end (killed, still running, ended by a signal): what it
     * held then is in the file as alive at the end; the page says so beside the summary and the
     * leaks, in the words report and leaks use (gm_ending_line) */
    char ending[256];
    gm_ending_line(&d, ending, sizeof ending);
    fputs(",\"state\":", o);
    viz_json_str(o, d.state[0] ? d.state : NULL);
    fputs(",\"ending\":", o);
    if (ending[0]) viz_json_str(o, ending);
    else fputs("null", o);
    /* torch.compile: what the page cannot show of a compiled region, report's words */
    gm_compiled cc;
    char compiled[1024] = "";
    if (gm_compiled_read(&d, &cc)) gm_compiled_summary(&cc, compiled, sizeof compiled);
    fputs(",\"torch_compile\":", o);
    if (compiled[0]) viz_json_str(o, compiled);
    else fputs("null", o);
    /* categories: which sources said them, and bytes at the peak each covers */
    fprintf(o, "},\"categories\":{\"by_default\":%s,\"names\":[",
            cat.by_default ? "true" : "false");
    for (int q = 0; q < VIZ_NCATS; q++)
        fprintf(o, "%s\"%s\"", q ? "," : "", viz_cat_name[q]);
    fputs("],\"sources\":[", o);
    for (int q = 0; q < VIZ_NSRCS; q++)
        fprintf(o, "%s{\"name\":\"%s\",\"peak_bytes\":%llu}", q ? "," : "", viz_src_name[q],
                (unsigned long long)cat.peak[q]);
    fputs("]},", o);
    int bad = viz_write_timeline(o, &d, &m, &cls, &cat, &tens);
    fputc(',', o);
    write_live_at_peak(o, &m, &cls, &cat, &tens);
    fputs(",\"classes\":[", o); /* ranked; the first VIZ_TOP_CLASSES have their own colour */
    for (size_t i = 0; i < cls.n && i < VIZ_CLASS_NAMES; i++) {
        if (i) fputc(',', o);
        viz_json_str(o, cls.names[i]);
    }
    fputs("],\"flame_peak\":", o);
    bad |= viz_write_flame(o, &d, &m, 0);
    fputs(",\"flame_total\":", o);
    bad |= viz_write_flame(o, &d, &m, 1);
    fputc(',', o);
    write_segments(o, &d, &m, &cls, &cat, &tens);
    fputc(',', o);
    write_ooms(o, &d, &m);
    fputc(',', o);
    write_leaks(o, &m);
    fputs(",\"analyses\":{", o);
    int asked = with >= 0, skipped = 0;
    if (!asked) /* by size: each analysis whose limit the recording is within */
        for (int k = with = 0; k < 3; k++)
            if (m.events <= analysis_auto_events[k]) with |= 1 << k;
    for (int k = 0, first = 1; k < 3; k++) {
        if (!(with & (1 << k))) continue;
        if (!first) fputc(',', o);
        /* frag beside tune: tune's answer (frag --search), so the page's panels name one
         * configuration */
        write_analysis(o, analysis_name[k], db, vo->device, k == 0 && (with & VIZ_TUNE));
        first = 0;
    }
    fprintf(o, "},\"analyses_how\":{\"asked\":%s,\"events\":%llu,\"skipped\":[",
            asked ? "true" : "false", (unsigned long long)m.events);
    for (int k = 0; k < 3 && !asked; k++)
        if (!(with & (1 << k)))
            fprintf(o, "%s{\"name\":\"%s\",\"limit\":%llu}", skipped++ ? "," : "", analysis_name[k],
                    (unsigned long long)analysis_auto_events[k]);
    fputs("]},", o);
    bad |= viz_write_tensors(o, &d, &m, &cls, &cat, &tens);
    if (lanes) fprintf(o, ",\"ranks\":%s", lanes);
    fputc('}', o);
    fputs(mark + strlen("/*GM_DATA*/"), o);
    if (bad) {
        char fate[PATH_MAX + 64];
        gm_out_discard(&out);
        fprintf(stderr, "gpumem viz: out of memory writing the page; %s\n",
                gm_out_fate(&out, fate, sizeof fate));
        rc = GM_EXIT_BADDB;
    } else if ((rc = gm_out_commit(&out, err, sizeof err)) != 0) {
        fprintf(stderr, "gpumem viz: %s\n", err);
    }
    viz_classes_free(&cls);
    viz_categories_free(&cat);
    viz_tensors_free(&tens);
    gm_model_free(&m);
    gm_db_close(&d);
    return rc;
}

/* ---------------------------------------------------------------- several ranks */

typedef struct rank_db {
    const char *path;
    long rank; /* meta.rank; -1 when absent */
    size_t order;
    uint64_t peak_allocated, peak_reserved;
    long long peak_step; /* the step the peak allocated falls in; -1 none */
    char *lane;          /* viz_write_lane's JSON */
    size_t lane_len;
} rank_db;

static int rank_cmp(const void *a, const void *b)
{
    const rank_db *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int ends_with_db(const char *s)
{
    size_t n = strlen(s);
    return n > 3 && !strcmp(s + n - 3, ".db");
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* DIR's *.db files, sorted, appended to *paths (malloc'd strings, owned by the caller). */
static int list_dir(const char *dir, char ***paths, size_t *n)
{
    DIR *dd = opendir(dir);
    if (!dd) {
        fprintf(stderr, "gpumem viz: %s: %s\n", dir, strerror(errno));
        return GM_EXIT_BADDB;
    }
    size_t first = *n;
    for (struct dirent *e; (e = readdir(dd));) {
        if (!ends_with_db(e->d_name)) continue;
        char **np = realloc(*paths, sizeof *np * (*n + 1));
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(len);
        if (!np || !p) {
            free(p);
            if (np) *paths = np;
            closedir(dd);
            fputs("gpumem viz: out of memory\n", stderr);
            return GM_EXIT_USAGE;
        }
        snprintf(p, len, "%s/%s", dir, e->d_name);
        *paths = np;
        (*paths)[(*n)++] = p;
    }
    closedir(dd);
    if (*n > first) gm_sort(*paths + first, *n - first, sizeof **paths, str_cmp);
    if (*n == first) {
        fprintf(stderr,
                "gpumem viz: %s holds no *.db file (one database per rank: GPUMEM_DB=run-%%r.db)\n",
                dir);
        return GM_EXIT_BADDB;
    }
    return 0;
}

/* One pass per database (one model in memory at a time): its lane and peaks; a rank with memory
 * on several devices, its busiest device's (or device's, --device), as the detail page's. */
static int load_rank(rank_db *r, int device)
{
    char err[1024];
    gm_db d;
    if (gm_db_open(r->path, &d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem viz: %s\n", err);
        return GM_EXIT_BADDB;
    }
    gm_lossy_say(&d, stderr); /* events lost: said first */
    r->rank = (long)gm_meta_int(&d, "rank", -1);
    int sc = gm_db_scope_one(&d, NULL, device, err, sizeof err);
    if (sc < 0) {
        gm_db_close(&d);
        return gm_scope_fail("viz", sc, err, "each rank's busiest");
    }
    gm_scope_say(&d, "its lane and peaks", stderr);
    gm_model m;
    int unread = gm_model_load(&d, &m, 0, err, sizeof err) != 0;
    if (unread) fprintf(stderr, "gpumem viz: %s\n", err);
    if (unread || gm_damage_gate(&d, "viz", 0, 0, stderr)) { /* pages overwritten: refused */
        gm_model_free(&m);
        gm_db_close(&d);
        return GM_EXIT_BADDB;
    }
    r->peak_allocated = m.peak_allocated, r->peak_reserved = m.peak_reserved;
    r->peak_step = -1;
    for (size_t i = 0; i < m.nsteps; i++)
        if (m.steps[i].end_seq >= m.peak_allocated_seq) {
            r->peak_step = (long long)m.steps[i].step;
            break;
        }
    FILE *ms = open_memstream(&r->lane, &r->lane_len);
    int bad = !ms || viz_write_lane(ms, &d, &m) != 0;
    if (ms && fclose(ms) != 0) bad = 1;
    gm_model_free(&m);
    gm_db_close(&d);
    if (bad) {
        fprintf(stderr, "gpumem viz: out of memory reading %s\n", r->path);
        return GM_EXIT_USAGE;
    }
    return 0;
}

/* "ranks": {"detail": index, "by": "meta.rank"|"order", "lanes": [{"rank", "db", "peak_allocated",
 * "peak_allocated_fmt", "peak_reserved", "peak_reserved_fmt", "peak_step", "lane"}]} */
static int viz_ranks(char **paths, size_t n, const viz_out *out, int with)
{
    rank_db *r = calloc(n, sizeof *r);
    int rc = 0;
    if (!r) {
        fputs("gpumem viz: out of memory\n", stderr);
        return GM_EXIT_USAGE;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        r[i].path = paths[i], r[i].order = i;
        rc = load_rank(&r[i], out->device);
    }
    if (rc) goto out;
    /* meta.rank when every database has a distinct one; else the order given */
    int by_meta = 1;
    for (size_t i = 0; i < n; i++) {
        if (r[i].rank < 0) by_meta = 0;
        for (size_t j = 0; j < i; j++)
            if (r[j].rank == r[i].rank) by_meta = 0;
    }
    if (!by_meta) {
        fprintf(stderr, "gpumem viz: not every database names a distinct rank (meta.rank); ranks "
                        "are numbered in the order given\n");
        for (size_t i = 0; i < n; i++)
            r[i].rank = (long)i;
    }
    gm_sort(r, n, sizeof *r, rank_cmp);
    size_t detail = 0;
    for (size_t i = 1; i < n; i++)
        if (r[i].peak_allocated > r[detail].peak_allocated) detail = i;
    char *json = NULL;
    size_t len = 0;
    FILE *ms = open_memstream(&json, &len);
    if (!ms) {
        fputs("gpumem viz: out of memory\n", stderr);
        rc = GM_EXIT_USAGE;
        goto out;
    }
    fprintf(ms, "{\"detail\":%zu,\"by\":\"%s\",\"lanes\":[", detail,
            by_meta ? "meta.rank" : "order");
    for (size_t i = 0; i < n; i++) {
        char pa[32], pr[32];
        gm_fmt_bytes(r[i].peak_allocated, pa, sizeof pa);
        gm_fmt_bytes(r[i].peak_reserved, pr, sizeof pr);
        fprintf(ms, "%s{\"rank\":%ld,\"db\":", i ? "," : "", r[i].rank);
        viz_json_str(ms, r[i].path);
        fprintf(ms, ",\"peak_allocated\":%llu,\"peak_allocated_fmt\":",
                (unsigned long long)r[i].peak_allocated);
        viz_json_str(ms, pa);
        fprintf(ms, ",\"peak_reserved\":%llu,\"peak_reserved_fmt\":",
                (unsigned long long)r[i].peak_reserved);
        viz_json_str(ms, pr);
        fprintf(ms, ",\"peak_step\":%lld,\"lane\":", r[i].peak_step);
        fwrite(r[i].lane, 1, r[i].lane_len, ms);
        fputc('}', ms);
    }
    fputs("]}", ms);
    if (fclose(ms) != 0) {
        free(json);
        fputs("gpumem viz: out of memory\n", stderr);
        rc = GM_EXIT_USAGE;
        goto out;
    }
    rc = write_page(r[detail].path, out, with, json);
    free(json);
out:
    for (size_t i = 0; i < n; i++)
        free(r[i].lane);
    free(r);
    return rc;
}

int gm_viz_main(int argc, char **argv)
{
    const char *out = NULL;
    char **dbs = NULL; /* malloc'd copies */
    size_t ndb = 0;
    int with = -1, rc = 0, force = 0, device = -1; /* with: -1 the default (by the recording's size) */
    for (int i = 1; i < argc && !rc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_viz, stdout);
            goto done;
        } else if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--with")) && !gm_opt_peek(argc, argv, i)) {
            /* a known option without its value: say which value, never "unknown option" */
            fprintf(stderr, "gpumem viz: %s needs %s\n%s", argv[i],
                    argv[i][1] == 'o' ? "the page's file name (-o run.html)"
                                      : "a list of analyses: frag, advise, tune (comma-separated)",
                    GM_HELP("viz"));
            rc = GM_EXIT_USAGE;
        } else if (gm_opt_is_device(argv[i])) {
            rc = gm_arg_device("viz", argc, argv, &i, &device);
        } else if (strcmp(argv[i], "-o") == 0) {
            out = argv[++i]; /* given twice with two values: refused before (gm_args_repeats) */
        } else if (strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if (strcmp(argv[i], "--with") == 0) {
            char list[256];
            i++;
            snprintf(list, sizeof list, "%s", argv[i]);
            /* none is the list alone: "none,frag" says two things; "" or "," says nothing */
            if (!strcmp(list, "none")) {
                with = 0;
                continue;
            }
            if (!list[strspn(list, ",")] || strstr(list, "none")) {
                fprintf(stderr, "gpumem viz: --with '%s': give frag, advise, tune (comma-separated), or none alone\n%s",
                        list, GM_HELP("viz"));
                rc = GM_EXIT_USAGE;
                goto done;
            }
            with = 0;
            for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
                int k = 0;
                while (k < 3 && strcmp(t, analysis_name[k]))
                    k++;
                if (k == 3) {
                    fprintf(stderr,
                            "gpumem viz: --with '%s': unknown analysis; use frag, advise, tune "
                            "(comma-separated) or none\n%s",
                            t, GM_HELP("viz"));
                    rc = GM_EXIT_USAGE;
                    goto done;
                }
                with |= 1 << k;
            }
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "gpumem viz: unknown option '%s'\n%s", argv[i], GM_HELP("viz"));
            rc = GM_EXIT_USAGE;
        } else {
            struct stat st;
            if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
                rc = list_dir(argv[i], &dbs, &ndb);
            } else {
                char **np = realloc(dbs, sizeof *np * (ndb + 1));
                char *p = strdup(argv[i]);
                if (!np || !p) {
                    free(p);
                    if (np) dbs = np;
                    fputs("gpumem viz: out of memory\n", stderr);
                    rc = GM_EXIT_USAGE;
                    goto done;
                }
                dbs = np;
                dbs[ndb++] = p;
            }
        }
    }
    if (!rc && gm_args_same_file("viz", (const char *const *)dbs, ndb)) rc = GM_EXIT_USAGE;
    if (rc) goto done;
    if (!ndb || !out) {
        fprintf(stderr, "gpumem viz: %s\n%s", !ndb ? "which database? give its path" : "where to? give -o FILE.html",
                GM_HELP("viz"));
        rc = GM_EXIT_USAGE;
        goto done;
    }
    char err[PATH_MAX + 256];
    viz_out vo = {out, (const char *const *)dbs, ndb, force, device};
    /* refused now, before minutes of loading, and checked again when the page is written */
    if ((rc = gm_out_check(out, GM_OUT_HTML, force, vo.inputs, ndb, err, sizeof err)) != 0) {
        fprintf(stderr, "gpumem viz: %s\n", err);
        goto done;
    }
    rc = ndb == 1 ? write_page(dbs[0], &vo, with, NULL) : viz_ranks(dbs, ndb, &vo, with);
done:
    for (size_t i = 0; i < ndb; i++)
        free(dbs[i]);
    free(dbs);
    return rc;
}
