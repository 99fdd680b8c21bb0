/* gm_tune_cmd.c — `gpumem tune`: options, the ranked table (text) and the JSON contract of
 * gm_tune.c's search, and --check (re-run the recorded command under the recommendation). */
#include "snapshot/analyze/gm_tune.h"

#include "snapshot/analyze/gm_frag.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const usage_tune =
    "usage: gpumem tune DB [--objective reserved|time] [--limit SIZE] [--top N] [--json] [--check]\n"
    "                      [--device N] [--lossy-ok]\n"
    "\n"
    "Replays the recorded allocations through gpumem's allocator under its presets (gpumem,\n"
    "pytorch, pytorch-expandable, nocache) and a search over its keys (expandable_segments,\n"
    "max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold, handle_size,\n"
    "release_before_grow, release_threshold, per_stream_pools), on every core (a program on\n"
    "several devices: the busiest device's allocations, as its own heap; a PyTorch program's:\n"
    "the busiest of its tensors' devices; said first, JSON \"device\", \"devices\",\n"
    "\"device_from\"; --device N for another's), and ranks them:\n"
    "peak reserved, utilization, driver calls and their time (the virtual GPU's cost table),\n"
    "and whether the run would meet an OOM under the limit. Ends with the recommended\n"
    "GPUMEM_CONF, and the PYTORCH_CUDA_ALLOC_CONF when PyTorch has the same setting.\n"
    "  --objective reserved   least peak reserved first, then least driver time (default);\n"
    "                         one that saves under 5% (or under 2 MiB) of a cheaper one's peak\n"
    "                         reserved for 10x its driver calls or more is not recommended (said under the\n"
    "                         recommendation: what it saves, at what cost), ranked after the rest\n"
    "  --objective time       least driver time first, then least peak reserved\n"
    "  --limit SIZE           judge every configuration under this cap on reserved memory\n"
    "                         (e.g. 24G; 0 is 0 bytes; none: no limit; default: the limit\n"
    "                         the program ran with, if any)\n"
    "  --top N                rows of the table (default 12)\n"
    "  --device N             device N's allocations instead of the busiest device's, --check's\n"
    "                         re-run read the same (a device the program held no memory on:\n"
    "                         exit 2, naming the ones it did; memory on N alone: no change)\n"
    "  --json                 one JSON object (contract in snapshot/README.md)\n"
    "  --check                re-run the recorded command under `gpumem record` with the\n"
    "                         recommended GPUMEM_CONF and print predicted against measured;\n"
    "                         a failed re-run is said with the last lines of its stderr; it\n"
    "                         runs in the recorded directory, argv[0] by the path PATH found\n"
    "                         it at (a virtual environment's python keeps its environment)\n"
    "  --lossy-ok             replay a recording that lost events (else refused, exit 3: its\n"
    "                         trace misses allocations or frees); the first line says so\n"
    "A PyTorch program recorded with PyTorch's allocator (`gpumem record -- python ...`, its\n"
    "memory history merged): its tensors are replayed, from the PYTORCH_CUDA_ALLOC_CONF it ran\n"
    "with; the recommendation is the best PYTORCH_CUDA_ALLOC_CONF for staying on PyTorch's\n"
    "allocator (only PyTorch's keys), and apart from it what gpumem's allocator would reserve\n"
    "(gpumem record --allocator gpumem); --check re-runs the script with the recommended\n"
    "PYTORCH_CUDA_ALLOC_CONF and prints predicted against measured max_memory_reserved().\n"
    "An imported PyTorch snapshot (gpumem import): the recorded line names its\n"
    "PYTORCH_CUDA_ALLOC_CONF, replayed under the GPUMEM_CONF preset:pytorch with those keys.\n"
    "Exit code: 0; 1 no configuration avoids an OOM under the limit, or --check could not\n"
    "re-run; 2 usage; 3 unreadable database, or events lost (without --lossy-ok).\n";

static void bytes(uint64_t v, char *out, size_t n) { gm_fmt_bytes(v, out, n); }

/* The configurations the cost rule passed over that reserve less than the one named (the
 * recommendation, or the recorded configuration where it stays): what a ranking by peak alone
 * would have named instead. 1 when r is one. */
static int passed_over(const gm_tune *t, size_t named, const gm_replay_result *r) {
    return named != SIZE_MAX && r->costly && r->cheaper != SIZE_MAX &&
           r->peak_reserved < t->results[named].peak_reserved;
}

static double calls_ratio(const gm_tune *t, const gm_replay_result *r) {
    uint64_t c = t->results[r->cheaper].driver_calls;
    return (double)r->driver_calls / (double)(c ? c : 1);
}

/* "preset:nocache saves 1.0 MiB at 2013 times the driver calls; not recommended", for each
 * configuration passed over (at most three, the least peak first: the results' order) */
/* A row's name as the tables give it: PyTorch's settings on a PyTorch recording (its defaults
 * where none were set), else its GPUMEM_CONF. */
static const char *row_name(const gm_tune *t, const gm_replay_result *r) {
    if (t->torch && r->has_pytorch) return r->pytorch[0] ? r->pytorch : "PyTorch's defaults";
    return r->conf;
}

static void print_passed_over(const gm_tune *t, size_t named, FILE *out) {
    int n = 0;
    for (size_t i = 0; i < t->nresults && n < 3; i++) {
        const gm_replay_result *r = &t->results[i];
        if (!passed_over(t, named, r)) continue;
        const gm_replay_result *c = &t->results[r->cheaper];
        char saved[32];
        bytes(c->peak_reserved - r->peak_reserved, saved, sizeof saved);
        if (!n++)
            fprintf(out, "  not recommended (saves under %d%% of peak reserved or under %" PRIu64 " MiB, for %dx the driver "
                         "calls or more):\n",
                    GM_TUNE_COSTLY_SAVING_PCT, GM_TUNE_COSTLY_SAVING_BYTES >> 20, GM_TUNE_COSTLY_CALLS);
        fprintf(out, "    %s saves %s (%.1f%%) at %.0fx the driver calls of %s (%" PRIu64 " against %" PRIu64 ")\n",
                row_name(t, r), saved,
                100.0 * (double)(c->peak_reserved - r->peak_reserved) / (double)(c->peak_reserved ? c->peak_reserved : 1),
                calls_ratio(t, r), row_name(t, c), r->driver_calls, c->driver_calls);
    }
}

/* PyTorch's runaway growth, named: the recorded max_split_size_mb with expandable segments */
static void print_runaway(const gm_tune *t, FILE *out) {
    if (t->runaway == SIZE_MAX || t->recorded == SIZE_MAX) return;
    char a[32], b[32];
    bytes(t->results[t->recorded].peak_reserved, a, sizeof a);
    bytes(t->results[t->runaway].peak_reserved, b, sizeof b);
    fprintf(out, "\n  runaway growth: max_split_size_mb with expandable_segments:True reserves %s, %s without\n"
                 "  max_split_size_mb: a free block of max_split_size or more is never split or handed to a\n"
                 "  smaller request, so the expandable segment maps new pages beside it (PyTorch's own\n"
                 "  behaviour, replayed); drop max_split_size_mb when expandable segments are on\n",
            a, b);
}

/* A PyTorch program on PyTorch's allocator: the recommendation for staying there, and gpumem's. */
static void print_torch(const gm_tune *t, FILE *out) {
    char re[32];
    if (t->best_torch == SIZE_MAX) {
        fprintf(out, "\n  no PYTORCH_CUDA_ALLOC_CONF avoids an OOM under the limit\n");
    } else if (t->recorded_best) {
        bytes(t->results[t->best].peak_reserved, re, sizeof re);
        fprintf(out, "\n  for PyTorch's allocator: the recorded configuration is already the best of those tried\n"
                     "               (replayed: %s %s)\n", gm_torch_peak_name(&t->reset, 1), re);
    } else {
        const gm_replay_result *b = &t->results[t->best_torch];
        bytes(b->peak_reserved, re, sizeof re);
        fprintf(out, "\n  recommended for PyTorch's allocator: PYTORCH_CUDA_ALLOC_CONF=%s\n", b->pytorch);
        fprintf(out, "               predicted %s %s", gm_torch_peak_name(&t->reset, 1), re);
        if (t->recorded_peak_reserved)
            fprintf(out, " (%+.1f%% against the recording)",
                    100.0 * ((double)b->peak_reserved - (double)t->recorded_peak_reserved) /
                        (double)t->recorded_peak_reserved);
        fputc('\n', out);
    }
    print_passed_over(t, t->best_torch, out);
    if (t->best_gpumem != SIZE_MAX) {
        const gm_replay_result *g = &t->results[t->best_gpumem];
        bytes(g->peak_reserved, re, sizeof re);
        fprintf(out, "  with gpumem as PyTorch's allocator (gpumem record --allocator gpumem): GPUMEM_CONF=%s\n"
                     "               would reserve %s for the same tensors\n",
                g->conf, re);
    }
    print_runaway(t, out);
}

static void print_text(const gm_db *d, const gm_tune *t, int objective, int top, FILE *out) {
    fprintf(out, "gpumem tune: %s\n", d->path);
    char rr[32], lim[32];
    bytes(t->recorded_peak_reserved, rr, sizeof rr);
    if (t->torch) {
        char note[512];
        gm_torch_reset_note(&t->reset, note, sizeof note);
        fprintf(out, "  recorded   PyTorch's allocator, PYTORCH_CUDA_ALLOC_CONF=%s, %s %s\n"
                     "             (its tensors replayed from its memory history)\n%s%s%s",
                t->torch_conf[0] ? t->torch_conf : "(unset)", gm_torch_peak_name(&t->reset, 1), rr,
                note[0] ? "  note       " : "", note, note[0] ? "\n" : "");
    }
    else if (t->pytorch_recorded)
        fprintf(out, "  recorded   PyTorch's allocator (an imported snapshot), PYTORCH_CUDA_ALLOC_CONF=%s, peak reserved %s\n"
                     "             (replayed as GPUMEM_CONF=%s)\n",
                t->torch_conf[0] ? t->torch_conf : "(unset)", rr, t->recorded_conf);
    else {
        char note[512]; /* gpumem as PyTorch's allocator: the program's max_memory_*() count from its reset */
        gm_torch_reset_note(&t->reset, note, sizeof note);
        fprintf(out, "  recorded   GPUMEM_CONF=%s, peak reserved %s\n%s%s%s", t->recorded_conf, rr,
                note[0] ? "  note       " : "", note, note[0] ? "\n" : "");
    }
    gm_compiled_replay_note(&t->compiled, "  note       ", out);
    if (t->limit != ALLOC_NO_LIMIT) {
        bytes(t->limit, lim, sizeof lim);
        fprintf(out, "  limit      %s (a configuration that needs more meets an OOM)\n", lim);
    }
    /* the order the rows are in, exactly (gm_tune.c, better()) */
    fprintf(out, "  %zu configurations replayed over %zu events in %.1f s, ranked by %s; those that meet an OOM last\n\n",
            t->nresults, t->nevents, t->seconds,
            objective == GM_TUNE_TIME ? "driver time, then peak reserved"
                                      : "peak reserved in steps of 1% of the least (closer counts as equal), then driver time;\n"
                                        "  one that saves under 5% or 2 MiB of a cheaper one's peak for 10x its driver calls or more after those");
    fprintf(out, "  %4s %12s %12s %6s %9s %10s %4s  %s\n", "rank", "reserved", "allocated", "util", "calls", "driver ms",
            "OOM", "GPUMEM_CONF");
    for (size_t i = 0; i < t->nresults; i++) {
        const gm_replay_result *r = &t->results[i];
        int show = (int)i < top || i == t->recorded || r->preset;
        if (!show) continue;
        char re[32], al[32];
        bytes(r->peak_reserved, re, sizeof re);
        bytes(r->peak_allocated, al, sizeof al);
        fprintf(out, "  %4zu %12s %12s %5.1f%% %9" PRIu64 " %10.1f %4s  %s%s%s\n", i + 1, re, al, 100.0 * r->utilization,
                r->driver_calls, r->driver_time_s * 1e3, !r->ok ? "err" : r->oom ? "yes" : "no", r->conf,
                i == t->recorded ? "  (recorded)" : "", r->preset && i != t->recorded ? "  (preset)" : "");
        if (r->costly && r->cheaper != SIZE_MAX)
            fprintf(out, "  %4s %*s%.0fx the driver calls of rank %zu for %.1f%% less reserved: not recommended\n", "", 12, "",
                    calls_ratio(t, r), r->cheaper + 1,
                    100.0 * ((double)t->results[r->cheaper].peak_reserved - (double)r->peak_reserved) /
                        (double)(t->results[r->cheaper].peak_reserved ? t->results[r->cheaper].peak_reserved : 1));
    }
    if (t->torch) {
        print_torch(t, out);
        return;
    }
    if (t->best == SIZE_MAX) {
        fprintf(out, "\n  no configuration avoids an OOM under the limit: the live tensors need more (gpumem advise)\n");
        return;
    }
    const gm_replay_result *b = &t->results[t->best];
    char re[32];
    bytes(b->peak_reserved, re, sizeof re);
    if (t->recorded_best) {
        fprintf(out, "\n  the recorded configuration is already the best of those tried (replayed: peak reserved %s)\n", re);
        print_passed_over(t, t->best, out);
        print_runaway(t, out);
        return;
    }
    fprintf(out, "\n  recommended: GPUMEM_CONF=%s\n", b->conf);
    fprintf(out, "               predicted peak reserved %s", re);
    if (t->recorded_peak_reserved)
        fprintf(out, " (%+.1f%% against the recording)",
                100.0 * ((double)b->peak_reserved - (double)t->recorded_peak_reserved) / (double)t->recorded_peak_reserved);
    fputc('\n', out);
    print_passed_over(t, t->best, out);
    if (t->served_outside) {
        /* gpumem's pool held the libraries' allocations; PyTorch's own allocator would not */
        if (t->under_pytorch != SIZE_MAX) {
            const gm_replay_result *r = &t->results[t->under_pytorch];
            bytes(r->own_peak_reserved, re, sizeof re);
            fprintf(out, "  under PyTorch: PYTORCH_CUDA_ALLOC_CONF=%s (predicted max_memory_reserved() %s; "
                         "cuBLAS's and other libraries' own allocations outside it)\n",
                    r->pytorch[0] ? r->pytorch : "(unset: its defaults)", re);
        }
    } else if (b->has_pytorch) {
        fprintf(out, "  under PyTorch: PYTORCH_CUDA_ALLOC_CONF=%s\n", b->pytorch[0] ? b->pytorch : "(unset: its defaults)");
    } else {
        /* the best that PyTorch can express, for PyTorch users */
        for (size_t i = 0; i < t->nresults; i++) {
            const gm_replay_result *r = &t->results[i];
            if (!r->has_pytorch || r->oom || !r->ok) continue;
            bytes(r->peak_reserved, re, sizeof re);
            fprintf(out, "  under PyTorch: PYTORCH_CUDA_ALLOC_CONF=%s (predicted peak reserved %s)\n",
                    r->pytorch[0] ? r->pytorch : "(unset: its defaults)", re);
            break;
        }
    }
    print_runaway(t, out);
}

/* ,"not_recommended": null, or the cost rule's verdict: against what, saving what, at what cost */
static void print_costly_json(const gm_tune *t, const gm_replay_result *r, FILE *out) {
    fputs(",\"not_recommended\":", out);
    if (!r->costly || r->cheaper == SIZE_MAX) {
        fputs("null", out);
        return;
    }
    const gm_replay_result *c = &t->results[r->cheaper];
    fputs("{\"against\":", out);
    gm_json_str(out, c->conf);
    fprintf(out, ",\"saves\":%" PRId64 ",\"calls_ratio\":%.1f}", (int64_t)c->peak_reserved - (int64_t)r->peak_reserved,
            calls_ratio(t, r));
}

static void print_result_json(const gm_tune *t, const gm_replay_result *r, FILE *out) {
    fputs("{\"conf\":", out);
    gm_json_str(out, r->conf);
    fputs(",\"pytorch_conf\":", out);
    gm_json_str(out, r->has_pytorch ? r->pytorch : NULL);
    fprintf(out,
            ",\"peak_allocated\":%" PRIu64 ",\"peak_reserved\":%" PRIu64 ",\"utilization\":%.4f,\"driver_calls\":%" PRIu64
            ",\"driver_time_s\":%.6f,\"oom\":%s,\"preset\":%s",
            r->peak_allocated, r->peak_reserved, r->utilization, r->driver_calls, r->driver_time_s,
            r->oom ? "true" : "false", r->preset ? "true" : "false");
    print_costly_json(t, r, out);
    fputc('}', out);
}

/* Every documented key, whatever the options and the recording (null where it does not apply):
 * an empty recording gets the same object, with a note saying why nothing was tuned. */
static void print_json(const gm_db *d, const gm_tune *t, int objective, const uint64_t *meas, FILE *out) {
    fputs("{\"database\":", out);
    gm_json_str(out, d->path);
    gm_scope_json(d, out, ",", ""); /* several devices: whose events were replayed */
    char ending[256]; /* null, or why the program did not run to its end (gm_ending_line) */
    gm_ending_line((gm_db *)d, ending, sizeof ending);
    fputs(",\"ending\":", out);
    gm_json_str(out, ending[0] ? ending : NULL);
    fputs(",\"recorded\":{\"conf\":", out);
    gm_json_str(out, t->recorded_conf);
    fputs(",\"pytorch_conf\":", out); /* PyTorch's allocator ran it: its own setting */
    gm_json_str(out, t->torch || t->pytorch_recorded ? t->torch_conf : NULL);
    /* the program's reset of PyTorch's peaks, whichever allocator was PyTorch's: peak_reserved is the whole run's */
    fprintf(out, ",\"peak_reserved\":%" PRIu64 ",", t->recorded_peak_reserved);
    gm_torch_reset_json(out, &t->reset);
    fprintf(out, "},\"objective\":\"%s\",\"limit\":", objective == GM_TUNE_TIME ? "time" : "reserved");
    if (t->limit != ALLOC_NO_LIMIT) fprintf(out, "%" PRIu64, t->limit);
    else fputs("null", out);
    fprintf(out, ",\"events\":%zu,\"seconds\":%.3f,\"results\":[", t->nevents, t->seconds);
    for (size_t i = 0; i < t->nresults; i++) {
        if (i) fputc(',', out);
        print_result_json(t, &t->results[i], out);
    }
    fprintf(out, "],\"cost_rule\":{\"max_saving_percent\":%d,\"max_saving_bytes\":%" PRIu64 ",\"min_calls_ratio\":%d},"
                 "\"passed_over\":[",
            GM_TUNE_COSTLY_SAVING_PCT, GM_TUNE_COSTLY_SAVING_BYTES, GM_TUNE_COSTLY_CALLS);
    size_t named = t->torch ? t->best_torch : t->best;
    for (size_t i = 0, n = 0; i < t->nresults; i++)
        if (passed_over(t, named, &t->results[i])) {
            if (n++) fputc(',', out);
            print_result_json(t, &t->results[i], out);
        }
    fputs("],\"recommended\":", out);
    if (t->best == SIZE_MAX) {
        fputs("null", out);
    } else {
        const gm_replay_result *b = &t->results[t->best];
        fputs("{\"conf\":", out);
        gm_json_str(out, b->conf);
        fputs(",\"pytorch_conf\":", out);
        gm_json_str(out, b->has_pytorch ? b->pytorch : NULL);
        fprintf(out, ",\"predicted\":{\"peak_allocated\":%" PRIu64 ",\"peak_reserved\":%" PRIu64 "}}", b->peak_allocated,
                b->peak_reserved);
    }
    fprintf(out, ",\"recorded_is_best\":%s", t->recorded_best ? "true" : "false");
    /* the best PYTORCH_CUDA_ALLOC_CONF as PyTorch's own allocator would run it (a recording
     * through gpumem as PyTorch's allocator: libraries' allocations outside its pool) */
    fputs(",\"under_pytorch\":", out);
    size_t up = t->served_outside ? t->under_pytorch : t->torch ? t->best_torch : SIZE_MAX;
    if (!t->served_outside && !t->torch)
        for (size_t i = 0; i < t->nresults && up == SIZE_MAX; i++)
            if (t->results[i].has_pytorch && t->results[i].ok && !t->results[i].oom) up = i;
    if (up == SIZE_MAX) {
        fputs("null", out);
    } else {
        const gm_replay_result *r = &t->results[up];
        fputs("{\"pytorch_conf\":", out);
        gm_json_str(out, r->pytorch);
        fprintf(out, ",\"max_memory_allocated\":%" PRIu64 ",\"max_memory_reserved\":%" PRIu64 "}",
                r->own_peak_allocated, r->own_peak_reserved);
    }
    /* documented keys are always there: check is null without --check */
    if (meas)
        fprintf(out, ",\"check\":{\"measured\":{\"peak_allocated\":%" PRIu64 ",\"peak_reserved\":%" PRIu64 "}}", meas[0],
                meas[1]);
    else
        fputs(",\"check\":null", out);
    fputs(",\"runaway_growth\":", out);
    if (t->runaway == SIZE_MAX || t->recorded == SIZE_MAX)
        fputs("null", out);
    else
        fprintf(out, "{\"peak_reserved\":%" PRIu64 ",\"without_max_split\":%" PRIu64 "}",
                t->results[t->recorded].peak_reserved, t->results[t->runaway].peak_reserved);
    fputs(",\"torch\":", out);
    if (!t->torch) {
        gm_torch_absent_json(d, out); /* null, or --device N where PyTorch held nothing on N */
    } else {
        fputs("{\"recorded_conf\":", out);
        gm_json_str(out, t->torch_conf);
        fprintf(out, ",\"max_memory_reserved\":%" PRIu64, t->recorded_peak_reserved);
        fputc(',', out);
        gm_torch_reset_json(out, &t->reset); /* after a reset, the figures here are the whole run's */
        fputs(",\"recommended\":", out);
        if (t->best_torch == SIZE_MAX) {
            fputs("null", out);
        } else {
            const gm_replay_result *b = &t->results[t->best_torch];
            fputs("{\"pytorch_conf\":", out);
            gm_json_str(out, b->pytorch);
            fprintf(out, ",\"predicted\":{\"max_memory_allocated\":%" PRIu64 ",\"max_memory_reserved\":%" PRIu64 "}}",
                    b->peak_allocated, b->peak_reserved);
        }
        fputs(",\"gpumem\":", out);
        if (t->best_gpumem == SIZE_MAX) {
            fputs("null", out);
        } else {
            const gm_replay_result *g = &t->results[t->best_gpumem];
            fputs("{\"conf\":", out);
            gm_json_str(out, g->conf);
            fprintf(out, ",\"peak_reserved\":%" PRIu64 "}", g->peak_reserved);
        }
        if (meas)
            fprintf(out, ",\"check\":{\"measured\":{\"max_memory_allocated\":%" PRIu64
                         ",\"max_memory_reserved\":%" PRIu64 "}}",
                    meas[0], meas[1]);
        else
            fputs(",\"check\":null", out);
        fputc('}', out);
    }
    fputs(",\"note\":", out);
    gm_json_str(out, t->empty ? "no allocation to replay" : NULL);
    fputs("}\n", out);
}

int gm_tune_main(int argc, char **argv) {
    const char *db = NULL;
    int json = 0, check = 0, lossy_ok = 0, device = -1;
    int top = 12;
    gm_tune_opts o = {.objective = GM_TUNE_RESERVED};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_tune, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--check")) {
            check = 1;
        } else if (!strcmp(a, "--lossy-ok")) {
            lossy_ok = 1;
        } else if (!strcmp(a, "--objective")) {
            const char *v = gm_opt_value(argc, argv, &i);
            if (!v) v = "";
            if (!strcmp(v, "reserved")) o.objective = GM_TUNE_RESERVED;
            else if (!strcmp(v, "time")) o.objective = GM_TUNE_TIME;
            else {
                fprintf(stderr, "gpumem tune: --objective takes reserved or time, not '%s'\n%s", v, GM_HELP("tune"));
                return GM_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--limit")) {
            /* read as the limit key reads it: 0 is 0 bytes (every configuration meets an OOM),
             * none judges without the recorded limit */
            size_t v = ALLOC_NO_LIMIT;
            const char *s = gm_opt_value(argc, argv, &i);
            if (!s || (strcmp(s, "none") && (alloc_parse_size(s, &v) != ALLOC_OK || v == ALLOC_NO_LIMIT))) {
                fprintf(stderr, "gpumem tune: --limit needs a size (" ALLOC_SIZE_RULE "; 0 is 0 bytes), or none "
                                "for no limit, not '%s'\n%s", s ? s : "", GM_HELP("tune"));
                return GM_EXIT_USAGE;
            }
            o.limit = v, o.limit_set = 1;
        } else if (!strcmp(a, "--top")) {
            int rc = gm_arg_top("tune", gm_opt_value(argc, argv, &i), &top);
            if (rc) return rc;
        } else if (gm_opt_is_device(a)) {
            int rc = gm_arg_device("tune", argc, argv, &i, &device);
            if (rc) return rc;
        } else if (a[0] == '-') {
            fprintf(stderr, "gpumem tune: unknown option '%s'\n%s", a, GM_HELP("tune"));
            return GM_EXIT_USAGE;
        } else if (!db) {
            db = a;
        } else {
            fprintf(stderr, "gpumem tune: one database at a time ('%s' and '%s')\n", db, a);
            return GM_EXIT_USAGE;
        }
    }
    if (!db) {
        fprintf(stderr, "gpumem tune: which database?\n%s", GM_HELP("tune"));
        return GM_EXIT_USAGE;
    }
    char err[8192];
    gm_db d;
    if (gm_db_open(db, &d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        return GM_EXIT_BADDB;
    }
    int lossy = gm_lossy_gate(&d, "tune", lossy_ok, json ? stderr : stdout);
    if (lossy) {
        gm_db_close(&d);
        return lossy;
    }
    gm_ending_say(&d, json ? stderr : stdout); /* cut short: said first, as lost events are */
    /* several devices: the busiest device's events (or --device's), replayed as its own heap
     * (each device has its own allocator) */
    int sc = gm_db_scope_one(&d, NULL, device, err, sizeof err);
    if (sc < 0) {
        gm_db_close(&d);
        return gm_scope_fail("tune", sc, err, "the busiest");
    }
    gm_scope_say(&d, "the recorded and replayed peaks", json ? stderr : stdout);
    o.progress = isatty(2);
    gm_tune t;
    if (gm_tune_run(&d, &o, &t, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        gm_db_close(&d);
        return GM_EXIT_BADDB;
    }
    /* pages overwritten, found by the sweep: refused, or (--lossy-ok) said first */
    int damaged = gm_damage_gate(&d, "tune", 1, lossy_ok, json ? stderr : stdout);
    if (damaged) {
        gm_tune_free(&t);
        gm_db_close(&d);
        return damaged;
    }
    if (t.empty) { /* as frag and advise: nothing to change, exit 0 */
        if (json) {
            print_json(&d, &t, o.objective, NULL, stdout);
        } else {
            printf("gpumem tune: %s\n  nothing to tune: the recording holds no allocation\n", d.path);
        }
        gm_tune_free(&t);
        gm_db_close(&d);
        return 0;
    }
    size_t best = t.best;
    int rc = best == SIZE_MAX ? 1 : 0;
    uint64_t meas[2];
    int have = 0;
    if (check && best != SIZE_MAX) {
        if (t.torch ? gm_frag_rerun_torch(&d, t.results[best].pytorch, &meas[0], &meas[1], err, sizeof err) != 0
                    : gm_frag_rerun(&d, t.results[best].conf, &meas[0], &meas[1], err, sizeof err) != 0) {
            fprintf(stderr, "gpumem tune: --check: %s\n", err);
            rc = 1;
        } else {
            have = 1;
        }
    }
    if (json) {
        print_json(&d, &t, o.objective, have ? meas : NULL, stdout);
    } else {
        print_text(&d, &t, o.objective, (int)top, stdout);
        if (have) {
            const gm_replay_result *b = &t.results[best];
            char p[32], m[32];
            bytes(b->peak_reserved, p, sizeof p);
            bytes(meas[1], m, sizeof m);
            printf("  check: re-run under it: %s %s measured, %s predicted (error %+.2f%%)\n",
                   t.torch ? gm_torch_peak_name(&t.reset, 1) : "peak reserved", m, p,
                   b->peak_reserved ? 100.0 * ((double)meas[1] - (double)b->peak_reserved) / (double)b->peak_reserved : 0.0);
        }
    }
    gm_tune_free(&t);
    gm_db_close(&d);
    return rc;
}
