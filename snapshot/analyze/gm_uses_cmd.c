/* gm_uses_cmd.c — `gpumem uses`: one tensor's life, from birth through every kernel, copy and
 * memset that touched it, to its death.
 *
 * The allocations are chosen on the model (gm_analyze.c) by name — exact, or a glob with
 * fnmatch, since a training loop allocates "h3.mlp.fc" once per step and "h*.mlp.fc" once per
 * layer and step — or by id (the birth seq), optionally within one "step N". They are shown in
 * birth order, the first --top (default 3) in full and the rest counted: a name that matches
 * once per step would otherwise print every step of the run. The lives shown are read by
 * gm_lives_load together (one statement for all their uses). Text and JSON print the same
 * gm_life, so they cannot disagree.
 */
#include "snapshot/analyze/gm_report.h"
#include "snapshot/record/rec.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char *const usage_uses =
    "usage: gpumem uses DB (--name PATTERN | --id N) [--step N] [--device N] [--top N] [--json]\n"
    "\n"
    "One tensor's life: when it was born (size, phase, call site), every kernel, copy and\n"
    "memset that used it (time in ms since the recording started, event number, read/write,\n"
    "kernel name demangled, NVTX phase of the launch, and the time it ran on the device when\n"
    "recorded with GPUMEM_USES=timed), and when it died. Uses come from access tracking, on by\n"
    "default when recording (gpumem record -o run.db -- ./prog); GPUMEM_USES=0 turns it off\n"
    "  --name PATTERN  allocations named PATTERN (gpumem_name / NVTX naming): the exact name,\n"
    "                  or a glob ('h*.mlp.fc', 'h[0-3].attn.*')\n"
    "  --id N          the allocation born at event N (its id, as in the allocations view)\n"
    "  --step N        only allocations born inside the NVTX range \"step N\"\n"
    "  --device N      only allocations on device N (a program with memory on several devices;\n"
    "                  a device it never used: exit 2, naming the ones it did)\n"
    "  --top N         allocations shown in full, in birth order (default 3; the rest are counted)\n"
    "  --json          one JSON object instead of text\n"
    "Exit code: 0, 1 no allocation matches, 2 usage (or --device of a device the program never\n"
    "used), 3 unreadable database.\n";

typedef struct uses_opts {
    const char *db, *name;
    int64_t id, step; /* -1: not given */
    int device;       /* -1: every device */
    long top;
    int json;
} uses_opts;

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "gpumem uses: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", GM_HELP("uses"));
    return GM_EXIT_USAGE;
}

/* a number for an option, from min to INT64_MAX (event numbers are SQLite integers); -1 when
 * it is not one */
static int64_t number(const char *v, int64_t min) {
    uint64_t n;
    return gm_arg_uint(v, (uint64_t)min, INT64_MAX, &n) == 0 ? (int64_t)n : -1;
}

static int parse(int argc, char **argv, uses_opts *o) {
    *o = (uses_opts){.id = -1, .step = -1, .device = -1, .top = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (gm_opt_is_device(a)) {
            int rc = gm_arg_device("uses", argc, argv, &i, &o->device);
            if (rc) return rc;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t klen = a[0] == '-' && a[1] == '-' && eq ? (size_t)(eq - a) : strlen(a);
        int takes = (klen == 6 && strncmp(a, "--name", 6) == 0) || (klen == 4 && strncmp(a, "--id", 4) == 0) ||
                    (klen == 6 && strncmp(a, "--step", 6) == 0) || (klen == 5 && strncmp(a, "--top", 5) == 0);
        const char *v = NULL;
        if (takes) {
            v = eq && klen < strlen(a) ? eq + 1 : gm_opt_value(argc, argv, &i);
            if (!v) return usage_error("%s needs a value", a);
        }
        if (strcmp(a, "--json") == 0) o->json = 1;
        else if (takes && a[2] == 'n') o->name = v;
        else if (takes && a[2] == 'i') {
            if ((o->id = number(v, 1)) < 0) return usage_error("--id needs an allocation id (a positive event number), got '%s'", v);
        } else if (takes && a[2] == 's') {
            if ((o->step = number(v, 0)) < 0) return usage_error("--step needs a step number, got '%s'", v);
        } else if (takes) {
            int top, rc = gm_arg_top("uses", v, &top);
            if (rc) return rc;
            o->top = top;
        } else if (a[0] == '-' && a[1]) return usage_error("unknown option '%s'", a);
        else if (!o->db) o->db = a;
        else return usage_error("one database only; '%s' is extra", a);
    }
    if (!o->db) return usage_error("%s", "which database? give its path");
    if (!o->name && o->id < 0) return usage_error("%s", "which tensor? give --name PATTERN or --id N");
    if (o->name && o->id >= 0) return usage_error("%s", "give --name or --id, not both");
    if (o->name && !*o->name) return usage_error("%s", "--name needs a non-empty pattern");
    return 0;
}

static int matches(const gm_model *m, const gm_alloc *a, const uses_opts *o) {
    if (o->id >= 0 && a->birth != (uint64_t)o->id) return 0;
    if (o->device >= 0 && a->device != o->device) return 0;
    if (o->name) {
        const char *n = a->name ? gm_str(m, a->name) : NULL;
        /* exact first: a name may hold glob characters ("w[0]") that fnmatch reads as a set */
        if (!n || (strcmp(n, o->name) != 0 && fnmatch(o->name, n, 0) != 0)) return 0;
    }
    if (o->step >= 0) {
        const gm_range *r = a->range ? gm_range_of(m, a->range) : NULL;
        if (!r || r->step != o->step) return 0;
    }
    return 1;
}

static const char *access_name(int acc, int json) {
    switch (acc & 3) {
    case REC_ACC_READ: return "read";
    case REC_ACC_WRITE: return "write";
    case REC_ACC_READ | REC_ACC_WRITE: return json ? "read_write" : "rw";
    default: return json ? "unknown" : "?";
    }
}

static const char *op_name(int op) {
    return op == REC_OP_KERNEL ? "kernel" : op == REC_OP_COPY ? "copy" : op == REC_OP_MEMSET ? "memset" : NULL;
}

static const char *phase(const gm_model *m, uint32_t range) {
    const gm_range *r = range ? gm_range_of(m, range) : NULL;
    return r && r->path ? r->path : NULL;
}

static void site(const gm_model *m, const gm_alloc *a, char *out, size_t outsz) {
    if (!a->stack) snprintf(out, outsz, "(no stack: GPUMEM_STACKS=0)");
    else gm_site_desc(m, a->stack, out, outsz);
}

/* Hints for a name that matched nothing: a few names the recording has. */
static void print_names_hint(const gm_model *m, FILE *err) {
    u64map seen = {0};
    int shown = 0;
    for (size_t i = 0; i < m->nallocs && shown < 6; i++) {
        uint32_t n = m->allocs[i].name;
        if (!n || u64map_get(&seen, n) || !gm_str(m, n)) continue;
        if (u64map_put(&seen, n, 1) != 0) break;
        fprintf(err, "%s%s", shown ? ", " : "gpumem: names in this recording include ", gm_str(m, n));
        shown++;
    }
    if (shown) fprintf(err, " (gpumem report lists them by name, digits as *)\n");
    else fprintf(err, "gpumem: no allocation in this recording has a name: name them with gpumem_name() or the NVTX memory extension, or use --id N\n");
    u64map_free(&seen);
}

static void print_life_text(const gm_model *m, gm_demangler *dm, const gm_life *l, int tracking, int64_t unknown,
                            FILE *out) {
    const gm_alloc *a = &m->allocs[l->alloc];
    char sz[32], where[2048], buf[32];
    gm_fmt_bytes(a->size, sz, sizeof sz);
    const char *nm = a->name ? gm_str(m, a->name) : NULL;
    fprintf(out, "\n%s (id %" PRIu64 "): %s (%" PRIu64 " bytes requested) on device %d\n", nm ? nm : "(unnamed)",
            a->birth, sz, a->requested, a->device);
    const char *ph = phase(m, a->range);
    site(m, a, where, sizeof where);
    fprintf(out, "  %10.3f ms  event %-8" PRIu64 "  born          [%s]  at %s\n", (double)l->birth_t / 1e6, a->birth,
            ph ? ph : "outside NVTX ranges", where);
    unsigned nacc[4] = {0};
    for (size_t i = 0; i < l->nuses; i++) {
        const gm_use *u = &l->uses[i];
        ph = phase(m, u->range);
        nacc[u->access & 3]++;
        fprintf(out, "  %10.3f ms  event %-8" PRIu64 "  use   %-5s  %s  [%s]", (double)u->t / 1e6, u->seq,
                access_name(u->access, 0), gm_demangle_id(dm, m, u->kernel), ph ? ph : "outside NVTX ranges");
        if (u->start_ns >= 0) {
            gm_fmt_ns(u->end_ns > u->start_ns ? (uint64_t)(u->end_ns - u->start_ns) : 0, buf, sizeof buf);
            fprintf(out, "  ran %s", buf);
        }
        fputc('\n', out);
    }
    if (!l->nuses)
        fprintf(out, !tracking ? "  (uses unknown: access tracking was off; record with GPUMEM_USES=1)\n"
                     : unknown ? "  (no use recorded; launches whose arguments gpumem could not read may have used it)\n"
                               : "  (never used: no kernel, copy or memset touched it)\n");
    if (a->death) {
        ph = phase(m, l->death_range);
        gm_fmt_ns(l->death_t > l->birth_t ? l->death_t - l->birth_t : 0, buf, sizeof buf);
        fprintf(out, "  %10.3f ms  event %-8" PRIu64 "  died          [%s]  after %s\n", (double)l->death_t / 1e6,
                a->death, ph ? ph : "outside NVTX ranges", buf);
    } else {
        fprintf(out, "  still alive when the recording ended\n");
    }
    if (l->nuses)
        fprintf(out, "  %zu use%s: %u read, %u write, %u read+write, %u unknown\n", l->nuses, l->nuses == 1 ? "" : "s",
                nacc[REC_ACC_READ], nacc[REC_ACC_WRITE], nacc[3], nacc[0]);
}

static void print_life_json(const gm_model *m, gm_demangler *dm, const gm_life *l, FILE *out) {
    const gm_alloc *a = &m->allocs[l->alloc];
    char where[2048];
    site(m, a, where, sizeof where);
    fprintf(out, "{\"id\":%" PRIu64 ",\"name\":", a->birth);
    gm_json_str(out, a->name ? gm_str(m, a->name) : NULL);
    fprintf(out, ",\"size\":%" PRIu64 ",\"requested\":%" PRIu64 ",\"device\":%d,\"site\":", a->size, a->requested,
            a->device);
    gm_json_str(out, where);
    fprintf(out, ",\"birth\":{\"seq\":%" PRIu64 ",\"t_ns\":%" PRIu64 ",\"phase\":", a->birth, l->birth_t);
    gm_json_str(out, phase(m, a->range));
    fputs("},\"death\":", out);
    if (a->death) {
        fprintf(out, "{\"seq\":%" PRIu64 ",\"t_ns\":%" PRIu64 ",\"phase\":", a->death, l->death_t);
        gm_json_str(out, phase(m, l->death_range));
        fputc('}', out);
    } else {
        fputs("null", out);
    }
    fputs(",\"uses\":[", out);
    for (size_t i = 0; i < l->nuses; i++) {
        const gm_use *u = &l->uses[i];
        fprintf(out, "%s{\"seq\":%" PRIu64 ",\"t_ns\":%" PRIu64 ",\"kernel\":", i ? "," : "", u->seq, u->t);
        gm_json_str(out, gm_demangle_id(dm, m, u->kernel));
        fputs(",\"kernel_mangled\":", out);
        gm_json_str(out, gm_str(m, u->kernel));
        fputs(",\"op\":", out);
        gm_json_str(out, op_name(u->op));
        fprintf(out, ",\"access\":\"%s\",\"phase\":", access_name(u->access, 1));
        gm_json_str(out, phase(m, u->range));
        if (u->start_ns >= 0)
            fprintf(out, ",\"start_ns\":%" PRId64 ",\"end_ns\":%" PRId64 ",\"device_ns\":%" PRId64 "}", u->start_ns,
                    u->end_ns, u->end_ns > u->start_ns ? u->end_ns - u->start_ns : 0);
        else
            fputs(",\"start_ns\":null,\"end_ns\":null,\"device_ns\":null}", out);
    }
    fputs("]}", out);
}

int gm_cmd_uses(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_uses, stdout);
            return 0;
        }
    uses_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    char err[8192], mode[16];
    gm_db d;
    gm_model m;
    if ((rc = gm_open_model(o.db, &d, &m, 1)) != 0) return rc;
    if ((rc = gm_damage_gate(&d, "uses", 0, 0, stderr)) != 0) { /* pages overwritten: refused */
        gm_model_free(&m);
        gm_db_close(&d);
        return rc;
    }
    /* --device N: a device the program held memory on (else exit 2, naming those), and the
     * allocations on it alone (matches). The reading is not scoped to it: a use is a launch,
     * which may run on another device (peer access) and still has its time */
    if (gm_model_pick_device(&d, &m, o.device, err, sizeof err) != 0) {
        rc = gm_scope_fail("uses", GM_SCOPE_NO_DEVICE, err, "every device");
        gm_model_free(&m);
        gm_db_close(&d);
        return rc;
    }
    gm_lossy_say(&d, o.json ? stderr : stdout); /* events lost: said first */
    gm_ending_say(&d, o.json ? stderr : stdout); /* cut short: "still alive" is when it ended */
    int state = gm_uses_state(&d, mode, sizeof mode);
    char unote[768] = "";
    int64_t unread = 0, unknown = state == GM_USES_OFF ? 0 : gm_uses_unknown(&d, &unread, NULL, unote, sizeof unote);
    size_t matched = 0, shown = 0;
    for (size_t i = 0; i < m.nallocs; i++) matched += matches(&m, &m.allocs[i], &o);
    if (!matched) {
        char what[600];
        if (o.name) snprintf(what, sizeof what, "named '%s'", o.name);
        else snprintf(what, sizeof what, "born at event %" PRId64, o.id);
        if (o.step >= 0) snprintf(what + strlen(what), sizeof what - strlen(what), " in step %" PRId64, o.step);
        if (o.device >= 0) snprintf(what + strlen(what), sizeof what - strlen(what), " on device %d", o.device);
        fprintf(stderr, "gpumem: no allocation %s in %s\n", what, o.db);
        if (m.torch.present == 1)
            /* PyTorch's tensors are named and numbered in its view (report's tensor tables), but a
             * launch's arguments were matched to what gpumem saw: the segments of its cache */
            fprintf(stderr, "gpumem: this is a PyTorch recording under PyTorch's own allocator: uses "
                            "follows the allocations gpumem saw, the segments of PyTorch's cache, not its "
                            "tensors (a kernel's arguments were matched to the segments). Give --id N of "
                            "a segment (gpumem report's device allocations), or record with `gpumem record "
                            "--allocator gpumem` to follow each tensor\n");
        else if (o.name) print_names_hint(&m, stderr);
        else fprintf(stderr, "gpumem: allocation ids are birth event numbers: gpumem sql %s -c 'SELECT id, name, size FROM allocations LIMIT 20'\n", o.db);
        gm_model_free(&m);
        gm_db_close(&d);
        return 1;
    }
    gm_demangler dm = {0};
    FILE *out = stdout;
    if (o.json) {
        fputs("{\"database\":", out);
        gm_json_str(out, d.path);
        char ending[256]; /* null, or why the program did not run to its end (gm_ending_line) */
        gm_ending_line(&d, ending, sizeof ending);
        fputs(",\"ending\":", out);
        gm_json_str(out, ending[0] ? ending : NULL);
        fprintf(out, ",\"uses\":%s,\"tracking\":\"%s\",\"launches_unread\":%" PRId64 ",\"pattern\":",
                state == GM_USES_ON ? "true" : "false",
                state == GM_USES_OFF ? "off" : state == GM_USES_EMPTY ? (unknown > 0 ? "unread" : "empty") : mode, unread);
        gm_json_str(out, o.name);
        fputs(",\"id\":", out);
        if (o.id >= 0) fprintf(out, "%" PRId64, o.id);
        else fputs("null", out);
        fputs(",\"step\":", out);
        if (o.step >= 0) fprintf(out, "%" PRId64, o.step);
        else fputs("null", out);
        fprintf(out, ",\"matched\":%zu,\"allocations\":[", matched);
    } else {
        fprintf(out, "gpumem uses: %s\n", d.path);
        if (state == GM_USES_OFF)
            fprintf(out, "  note: access tracking was off in this recording: births and deaths only "
                         "(record with GPUMEM_USES=1 to see every kernel that used a tensor)\n");
        else if (unknown > 0)
            fprintf(out, "  note: %s\n", unote);
        fprintf(out, "  %zu allocation%s", matched, matched == 1 ? " matches" : "s match");
        if (matched > (size_t)o.top && o.top == 1) fprintf(out, "; the first in birth order is shown (--top N, --step N)");
        else if (matched > (size_t)o.top) fprintf(out, "; the first %ld in birth order are shown (--top N, --step N)", o.top);
        fputc('\n', out);
    }
    size_t want = matched < (size_t)o.top ? matched : (size_t)o.top;
    size_t *pick = malloc(want * sizeof *pick);
    gm_life *lives = calloc(want, sizeof *lives);
    for (size_t i = 0, k = 0; pick && i < m.nallocs && k < want; i++)
        if (matches(&m, &m.allocs[i], &o)) pick[k++] = i;
    rc = 0;
    if (!pick || !lives || gm_lives_load(&d, &m, pick, want, lives, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", pick && lives ? err : "out of memory");
        rc = GM_EXIT_BADDB;
    }
    for (size_t k = 0; !rc && k < want; k++, shown++) {
        if (o.json) {
            if (shown) fputc(',', out);
            print_life_json(&m, &dm, &lives[k], out);
        } else {
            print_life_text(&m, &dm, &lives[k], state != GM_USES_OFF, unknown, out);
        }
    }
    for (size_t k = 0; lives && k < want; k++) gm_life_free(&lives[k]);
    free(lives), free(pick);
    if (o.json) fprintf(out, "],\"shown\":%zu}\n", shown);
    else if (matched > shown && !rc) fprintf(out, "\n... %zu more allocation%s (--top N shows more, --step N picks one step)\n",
                                             matched - shown, matched - shown == 1 ? " matches" : "s match");
    gm_demangler_free(&dm);
    gm_model_free(&m);
    gm_db_close(&d);
    return rc;
}
