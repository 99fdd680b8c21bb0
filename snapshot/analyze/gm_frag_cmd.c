/* gm_frag_cmd.c — `gpumem frag`: options, the text and JSON printers of gm_frag.c's analysis,
 * and --check (re-run the recorded command under the best fix and compare). Both printers
 * print the same gm_frag, so the text and the JSON cannot disagree. */
#include "snapshot/analyze/gm_frag.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const usage_frag =
    "usage: gpumem frag DB [--top N] [--json] [--search] [--check] [--device N] [--lossy-ok]\n"
    "\n"
    "Where the memory the allocator reserved but the program did not hold went, and which\n"
    "allocator setting gives it back:\n"
    "  - reserved - allocated over time (per step, at the moment the gap was widest; alike\n"
    "    neighbouring steps are one row and a long run keeps its first and last six, as in\n"
    "    leaks' growth table; --json has every step);\n"
    "  - at the reserved peak and at each OOM: free bytes in cached blocks, the largest free\n"
    "    block, free block sizes, each (stream, pool), and every byte of the gap given one\n"
    "    cause (rounding, pending frees, another stream's or pool's cache, classic segments\n"
    "    pinned by a live neighbour or their free tails, mapping granularity, size-class\n"
    "    mismatch, cache kept), with the allocations that pin segments;\n"
    "  - fixes: GPUMEM_CONF changes that reserve less, each predicted by replaying the\n"
    "    recorded trace through the allocator, with the PYTORCH_CUDA_ALLOC_CONF that says the\n"
    "    same when there is one. Each fix is one change on top of the recorded configuration;\n"
    "    the recommendation is the best of them, ranked as gpumem tune ranks (its cost rule\n"
    "    too). gpumem tune searches combinations of keys and may find one that reserves less:\n"
    "    --search runs its search here and recommends its answer (tune's time: tens of seconds\n"
    "    on 10 M events, where frag alone takes a few).\n"
    "  - a program on several devices: the busiest device's events (a PyTorch program's: the\n"
    "    busiest of its tensors' devices), replayed as its own heap (each device has its own\n"
    "    allocator; said first, JSON \"device\", \"devices\", \"device_from\"; --device N for\n"
    "    another's).\n"
    "  - a CUDA graph's private pool (PyTorch's graph pools, torch.cuda.MemPool, gpumem's\n"
    "    capture pools) is a pool row of its own, its free bytes the cause graph_pool (no\n"
    "    setting gives them to other requests), and the replays keep it private.\n"
    "  --top N   rows per table (default 8)\n"
    "  --device N  device N's events instead of the busiest device's, --check's re-run read\n"
    "            the same (a device the program held no memory on: exit 2, naming the ones it\n"
    "            did; memory on N alone: the output is the same as without it)\n"
    "  --json    one JSON object (contract in snapshot/README.md)\n"
    "  --search  recommend gpumem tune's answer (its search, run on the same trace), so that\n"
    "            frag, tune and viz name one configuration; it joins the fixes\n"
    "  --check   re-run the recorded command under `gpumem record` with the recommended\n"
    "            GPUMEM_CONF (the rest of this environment is the re-run's: GPUMEM_SIM_*,\n"
    "            GPUMEM_LIMIT) and print predicted against measured peak reserved; a\n"
    "            failed re-run is said with the last lines of its stderr; it runs in the\n"
    "            recorded directory, argv[0] by the path PATH found it at when recorded\n"
    "  --lossy-ok  analyse a recording that lost events (else refused, exit 3: its peak\n"
    "            and gaps can be wrong); the first line says so\n"
    "A PyTorch program recorded with PyTorch's allocator (its memory history merged): the\n"
    "recommendation is the best PYTORCH_CUDA_ALLOC_CONF for staying on PyTorch's allocator,\n"
    "gpumem's allocator said apart (gpumem record --allocator gpumem); --check\n"
    "re-runs the script under that PYTORCH_CUDA_ALLOC_CONF and compares max_memory_reserved().\n"
    "An imported PyTorch snapshot (gpumem import): the configuration line names its\n"
    "PYTORCH_CUDA_ALLOC_CONF, replayed under the GPUMEM_CONF preset:pytorch with those keys.\n"
    "Exit code: 0 (also --check with no fix to re-run: it says so); 2 usage; 3 unreadable\n"
    "database, or events lost (without --lossy-ok); 1 --check could not re-run.\n";

/* ---------------------------------------------------------------- --check */

/* The recorded command, as a re-run needs it: where and by which path it ran, and its line. */
static void recorded_command(gm_db *d, gm_rerun_origin *o, char *cmd, size_t n) {
    gm_rerun_origin_read(d, o);
    gm_meta_command(d, cmd, n);
}

int gm_frag_rerun(gm_db *d, const char *conf, uint64_t *peak_allocated, uint64_t *peak_reserved,
                  char *err, size_t errsz) {
    gm_rerun_origin o;
    char cmd[8192];
    recorded_command(d, &o, cmd, sizeof cmd);
    return gm_rerun(&o, cmd, NULL, conf, 0, peak_allocated, peak_reserved, err, errsz);
}

int gm_frag_rerun_torch(gm_db *d, const char *pytorch_conf, uint64_t *peak_allocated, uint64_t *peak_reserved,
                        char *err, size_t errsz) {
    gm_rerun_origin o;
    char cmd[8192];
    recorded_command(d, &o, cmd, sizeof cmd);
    return gm_rerun_torch(&o, cmd, pytorch_conf, peak_allocated, peak_reserved, err, errsz);
}

/* ---------------------------------------------------------------- words */

static void bytes(uint64_t v, char *out, size_t n) { gm_fmt_bytes(v, out, n); }

#define FRAG_JSON_PINS 20 /* pinned_by lists the allocations keeping the most free bytes */

/* "d_logits in step 19/bwd at t_alloc_on (gpt2.c:235) < backward (gpt2.c:826) (event N)": the
 * allocation born at event birth at addr (alive until death, 0: the end), read from the
 * database (frag loads no per-allocation model). */
static void alloc_words(gm_db *d, const gm_model *m, uint64_t birth, uint64_t addr, uint64_t death, char *out,
                        size_t n) {
    sqlite3_stmt *st;
    uint32_t stack = 0, range = 0;
    uint64_t name = 0;
    int found = 0;
    if (birth && sqlite3_prepare_v2(d->db, "SELECT stack, range, t FROM events WHERE seq = ?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, (int64_t)birth);
        if (sqlite3_step(st) == SQLITE_ROW) {
            stack = (uint32_t)sqlite3_column_int64(st, 0);
            range = gm_event_range(m, (uint32_t)sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2));
            found = 1;
        }
        sqlite3_finalize(st);
    }
    if (!found) {
        snprintf(out, n, "an allocation not in the events");
        return;
    }
    /* its name: the last one given to it, by identity (names.birth); in a file without it, the
     * last one given to its address while it lived (up to the next event at that address) */
    int by_birth = gm_table_exists(d, "names") && gm_names_have_birth(d);
    if (!by_birth && !death && gm_table_exists(d, "names") &&
        sqlite3_prepare_v2(d->db, "SELECT seq FROM events WHERE seq > ?1 AND addr = ?2 AND kind IN (1, 2, 3, 4) "
                                  "ORDER BY seq LIMIT 1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, (int64_t)birth);
        sqlite3_bind_int64(st, 2, (int64_t)addr);
        if (sqlite3_step(st) == SQLITE_ROW) death = (uint64_t)sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    if (gm_table_exists(d, "names") &&
        sqlite3_prepare_v2(d->db, by_birth ? "SELECT name FROM names WHERE seq > ?2 AND (?3 = 0 OR seq < ?3) AND "
                                             "(birth = ?2 OR (birth IS NULL AND addr = ?1)) ORDER BY seq DESC LIMIT 1"
                                           : "SELECT name FROM names WHERE addr = ?1 AND seq > ?2 AND (?3 = 0 OR seq < ?3) "
                                             "ORDER BY seq DESC LIMIT 1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, (int64_t)addr);
        sqlite3_bind_int64(st, 2, (int64_t)birth);
        sqlite3_bind_int64(st, 3, (int64_t)death);
        if (sqlite3_step(st) == SQLITE_ROW) name = (uint64_t)sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    char site[512] = "";
    if (stack) gm_site_desc(m, stack, site, sizeof site);
    const gm_range *r = range ? gm_range_of(m, range) : NULL;
    snprintf(out, n, "%s%s%s%s%s (event %" PRIu64 ")", name ? gm_str(m, name) : "an allocation",
             r && r->path ? " in " : "", r && r->path ? r->path : "", site[0] ? " at " : "", site, birth);
}

/* two points of the timeline that print alike (one row for both) */
static int same_point(const void *ctx, size_t i, size_t j) {
    const gm_frag_point *a = &((const gm_frag *)ctx)->timeline[i], *b = &((const gm_frag *)ctx)->timeline[j];
    return a->reserved == b->reserved && a->allocated == b->allocated;
}

/* A pool row's private pool, in the program's words: PyTorch's pool_id, or gpumem's capture. */
static const char *private_pool_words(uint64_t pool, int torch) {
    static char w[64];
    if (!pool) return "";
    if (torch && pool == GM_FRAG_POOL_UNNAMED) snprintf(w, sizeof w, "  graph pool");
    else if (torch) snprintf(w, sizeof w, "  graph pool (%" PRIu64 ", %" PRIu64 ")", pool >> 32, pool & 0xffffffffu);
    else snprintf(w, sizeof w, "  graph capture's pool");
    return w;
}

static void cause_detail(gm_db *d, const gm_model *m, const gm_frag_state *s, int c, char *out, size_t n) {
    char need[32], pf[32], pl[32];
    bytes(s->need_size, need, sizeof need);
    bytes(s->need_pool_free, pf, sizeof pf);
    bytes(s->need_pool_largest, pl, sizeof pl);
    switch (c) {
    case GM_FC_ROUNDING:
        snprintf(out, n, "live blocks are larger than the program asked for (512 B rounding, "
                         "roundup_power2_divisions, whole blocks kept unsplit)");
        break;
    case GM_FC_PENDING:
        snprintf(out, n, "freed but waiting for work on a stream to finish before reuse");
        break;
    case GM_FC_GRAPH_POOL:
        /* a graph's pool: the blocks its capture freed are where each replay writes the graph's
         * intermediates again (that is why the pool is private), so they are not lost bytes
         * while the graph is replayed (torch.compile's mode="reduce-overhead") */
        snprintf(out, n, "%s: a private pool serves only the allocations made in it (a graph's capture, a "
                         "MemPool's scope) and is given back only when it is released (the graph destroyed, "
                         "then empty_cache); no allocator setting lets the %s request use it%s",
                 s->need_private_pool ? "free outside the private pool (and stream) the request was made in"
                                      : "cached in a CUDA graph's private pool",
                 need,
                 s->need_private_pool ? ""
                                      : "; a graph's replays write the intermediates its capture freed there at "
                                        "the same addresses, so while the graph is replayed (torch.compile's "
                                        "mode=\"reduce-overhead\", torch.cuda.graphs) these bytes are its working "
                                        "memory, not a loss (a MemPool's are cached)");
        break;
    case GM_FC_OTHER_STREAM:
        snprintf(out, n, "cached in another stream's pool, which the %s request could not use "
                         "(per_stream_pools:False shares one pool)", need);
        break;
    case GM_FC_OTHER_POOL:
        snprintf(out, n, "cached in the %s pool, which serves only %s requests", s->need_small ? "large" : "small",
                 s->need_small ? "> 1 MiB" : "<= 1 MiB");
        break;
    case GM_FC_PINNED:
    case GM_FC_TAIL: {
        char who[1024] = "";
        if (s->npins) alloc_words(d, m, s->pins[0].birth, s->pins[0].addr, s->pins[0].death, who, sizeof who);
        snprintf(out, n, "%s; classic segments are never merged or given back while one block in them "
                         "is live%s%s",
                 c == GM_FC_PINNED ? "free space between live blocks of a classic segment"
                                   : "the free end of a classic segment that still holds live blocks",
                 who[0] ? "; most is held by " : "", who);
        break;
    }
    case GM_FC_GRANULARITY:
        snprintf(out, n, "free bytes in mapped pages that also hold live bytes: a page is unmapped whole");
        break;
    case GM_FC_SIZE_CLASS:
        snprintf(out, n, "free segments or pages each smaller than the %s request while %s was free "
                         "in its pool (largest %s): the allocator had to grow",
                 need, pf, pl);
        break;
    case GM_FC_CACHED:
        snprintf(out, n, "free memory the allocator kept cached instead of giving it back "
                         "(garbage_collection_threshold, release_threshold, empty_cache)");
        break;
    default:
        snprintf(out, n, "reserved bytes in no block of the snapshot");
        break;
    }
}

static double attributed_pct(const gm_frag_state *s) {
    uint64_t gap = s->reserved > s->allocated ? s->reserved - s->allocated : 0;
    if (!gap) return 100.0;
    uint64_t named = 0;
    for (int c = GM_FC_PENDING; c < GM_FC_UNATTRIBUTED; c++) named += s->causes[c];
    return 100.0 * (double)named / (double)gap;
}

/* ---------------------------------------------------------------- text */

static void print_state_text(gm_db *d, const gm_model *m, const gm_frag_state *s, int top, FILE *out) {
    char rq[32], al[32], re[32], fc[32], lf[32], gap[32];
    bytes(s->requested, rq, sizeof rq);
    bytes(s->allocated, al, sizeof al);
    bytes(s->reserved, re, sizeof re);
    bytes(s->free_cached, fc, sizeof fc);
    bytes(s->largest_free, lf, sizeof lf);
    bytes(s->reserved > s->requested ? s->reserved - s->requested : 0, gap, sizeof gap);
    fprintf(out, "  live: requested %s, allocated %s; reserved %s: %s reserved beyond what was asked for\n", rq, al,
            re, gap);
    fprintf(out, "  free in cached blocks %s in %zu block%s, largest %s; %zu segment%s\n", fc, s->nfree,
            s->nfree == 1 ? "" : "s", lf, s->nsegments, s->nsegments == 1 ? "" : "s");
    if (s->need_known) {
        char need[32], who[1024] = "";
        bytes(s->need_size, need, sizeof need);
        if (!s->oom) alloc_words(d, m, s->need_seq, s->need_addr, 0, who, sizeof who);
        fprintf(out, "  %s %s%s%s\n", s->oom ? "the request that failed:" : "the request that grew reserved:", need,
                who[0] ? ", " : "", who);
    }
    if (s->oom && s->fragmentation)
        fprintf(out, "  fragmentation: free in fragments (%s) >= the request, but the largest free block (%s) "
                     "is smaller than it\n", fc, lf);
    if (s->nfree) {
        fprintf(out, "  free block sizes\n");
        for (int h = 0; h < GM_FRAG_NHIST; h++) {
            if (!s->hist_count[h]) continue;
            char b[32];
            bytes(s->hist_bytes[h], b, sizeof b);
            fprintf(out, "    %-11s %6" PRIu64 " block%s %12s\n", gm_frag_hist_name[h], s->hist_count[h],
                    s->hist_count[h] == 1 ? " " : "s", b);
        }
    }
    if (s->npools) {
        fprintf(out, "  pools (stream, size pool; a private pool's apart)\n");
        for (size_t i = 0; i < s->npools && (int)i < top; i++) {
            const gm_frag_pool *p = &s->pools[i];
            char r[32], a[32], f[32], l[32];
            bytes(p->reserved, r, sizeof r);
            bytes(p->allocated, a, sizeof a);
            bytes(p->free, f, sizeof f);
            bytes(p->largest, l, sizeof l);
            fprintf(out, "    stream 0x%-14" PRIx64 " %-5s %5zu segment%s reserved %11s allocated %11s free %11s largest %11s%s\n",
                    p->stream, p->small ? "small" : "large", p->segments, p->segments == 1 ? " " : "s", r, a, f, l,
                    private_pool_words(p->private_pool, s->torch_pools));
        }
        if (s->npools > (size_t)top) fprintf(out, "    ... %zu more (--top N)\n", s->npools - (size_t)top);
    }
    uint64_t total = s->reserved > s->requested ? s->reserved - s->requested : 0;
    /* nothing reserved beyond what was asked for: no cause to name, and no share of nothing */
    if (total) fprintf(out, "  causes (share of reserved - requested)\n");
    for (int c = 0; total && c < GM_FC_N; c++) {
        if (!s->causes[c]) continue;
        char b[32], det[2048];
        bytes(s->causes[c], b, sizeof b);
        cause_detail(d, m, s, c, det, sizeof det);
        fprintf(out, "    %11s %5.1f%%  %-13s %s\n", b, total ? 100.0 * (double)s->causes[c] / (double)total : 0.0,
                gm_frag_cause_name[c], det);
    }
    if (s->reserved > s->allocated)
        fprintf(out, "  attributed to named causes: %.1f%% of reserved - allocated\n", attributed_pct(s));
    if (s->npins) {
        fprintf(out, "  live allocations pinning classic segments (free bytes they keep)\n");
        for (size_t i = 0; i < s->npins && (int)i < top; i++) {
            char fb[32], sg[32], who[1024];
            bytes(s->pins[i].free_bytes, fb, sizeof fb);
            bytes(s->pins[i].segment, sg, sizeof sg);
            alloc_words(d, m, s->pins[i].birth, s->pins[i].addr, s->pins[i].death, who, sizeof who);
            fprintf(out, "    %11s free of a %s segment, kept by %s\n", fb, sg, who);
        }
        if (s->npins > (size_t)top) fprintf(out, "    ... %zu more (--top N)\n", s->npins - (size_t)top);
    }
}

/* Without --search the recommendation is the best single change: where tune's answer may be
 * another, the reader is told how to get it. */
static void search_hint(const gm_frag *f, FILE *out) {
    if (!f->searched)
        fputs("  (the best single change; gpumem tune searches combinations of keys and may reserve less:\n"
              "   frag --search names its answer)\n",
              out);
}

/* The one recommendation (f->best). A PyTorch program on PyTorch's allocator is told the
 * PYTORCH_CUDA_ALLOC_CONF (what tune tells it), and gpumem's allocator apart, as tune says it. */
static void print_recommendation(const gm_frag *f, FILE *out) {
    char r[32];
    if (!f->nfixes) return;
    if (!f->torch) {
        if (f->best == SIZE_MAX) { /* nothing better than the recording */
            fprintf(out, "\n  recommended: the recorded configuration (%s)\n",
                    f->searched ? "no configuration gpumem tune tries reserves less"
                                : "each fix above saves too little for its driver calls: tune's cost rule");
            search_hint(f, out);
            return;
        }
        const gm_frag_fix *b = &f->fixes[f->best];
        fprintf(out, "\n  recommended: GPUMEM_CONF=%s\n", b->conf);
        /* PyTorch users can only set what PyTorch has: the best such fix */
        for (size_t i = 0; i < f->nfixes; i++)
            if (f->fixes[i].has_pytorch) {
                bytes(f->fixes[i].peak_reserved, r, sizeof r);
                if (i) fprintf(out, "  under PyTorch: PYTORCH_CUDA_ALLOC_CONF=%s (%s)\n", f->fixes[i].pytorch[0] ? f->fixes[i].pytorch : "", r);
                break;
            }
        search_hint(f, out);
        return;
    }
    if (f->best == SIZE_MAX) {
        fprintf(out, "\n  for PyTorch's allocator: no PYTORCH_CUDA_ALLOC_CONF %s reserves less than the recorded one\n",
                f->searched ? "gpumem tune tries" : "of the fixes above");
    } else {
        const gm_frag_fix *b = &f->fixes[f->best];
        bytes(b->peak_reserved, r, sizeof r);
        fprintf(out, "\n  recommended for PyTorch's allocator: PYTORCH_CUDA_ALLOC_CONF=%s\n"
                     "               predicted %s %s\n",
                b->pytorch[0] ? b->pytorch : "(unset: its defaults)", gm_torch_peak_name(&f->reset, 1), r);
    }
    if (f->best_gpumem != SIZE_MAX) {
        const gm_frag_fix *g = &f->fixes[f->best_gpumem];
        bytes(g->peak_reserved, r, sizeof r);
        fprintf(out, "  with gpumem as PyTorch's allocator (gpumem record --allocator gpumem): GPUMEM_CONF=%s\n"
                     "               would reserve %s for the same tensors\n",
                g->conf, r);
    }
    search_hint(f, out);
}

static void print_text(gm_db *d, const gm_model *m, const gm_frag *f, int top, FILE *out) {
    fprintf(out, "gpumem frag: %s\n", d->path);
    char note[512];
    gm_torch_reset_note(&f->reset, note, sizeof note);
    if (f->torch)
        fprintf(out, "  configuration  PyTorch's allocator, PYTORCH_CUDA_ALLOC_CONF=%s (its tensors replayed from its memory history)\n%s%s%s",
                f->torch_conf[0] ? f->torch_conf : "(unset)", note[0] ? "  note           " : "", note, note[0] ? "\n" : "");
    else if (f->pytorch_recorded)
        fprintf(out, "  configuration  PyTorch's allocator (an imported snapshot), PYTORCH_CUDA_ALLOC_CONF=%s (replayed as GPUMEM_CONF=%s)\n",
                f->torch_conf[0] ? f->torch_conf : "(unset)", f->recorded_conf);
    else if (f->recorded_conf[0]) /* gpumem as PyTorch's allocator: the program's reset said too */
        fprintf(out, "  configuration  GPUMEM_CONF=%s\n%s%s%s", f->recorded_conf, note[0] ? "  note           " : "", note,
                note[0] ? "\n" : "");
    gm_compiled_replay_note(&f->compiled, "  note           ", out);
    if (f->ntimeline) {
        uint64_t maxgap = 1;
        for (size_t i = 0; i < f->ntimeline; i++) {
            uint64_t g = f->timeline[i].reserved - f->timeline[i].allocated;
            if (g > maxgap) maxgap = g;
        }
        fprintf(out, "\nReserved - allocated over time (%s, at the widest gap)\n", f->by_step ? "per step" : "per 1/24 of the event numbers");
        fprintf(out, "  %9s %12s %12s %12s\n", f->by_step ? "step" : "part", "reserved", "allocated", "gap");
        /* report's rule for per-step tables: alike neighbours are one row, a long run's middle
         * is left out (--json has every point) */
        gm_step_row *rows = malloc(f->ntimeline * sizeof *rows);
        size_t nrows = rows ? gm_step_rows(f->ntimeline, same_point, f, rows) : 0;
        for (size_t k = 0; k < nrows; k++) {
            const gm_frag_point *p = &f->timeline[rows[k].first];
            char r[32], a[32], g[32], bar[41], lab[48];
            if (rows[k].gap_before) fprintf(out, "  ...\n");
            bytes(p->reserved, r, sizeof r);
            bytes(p->allocated, a, sizeof a);
            bytes(p->reserved - p->allocated, g, sizeof g);
            gm_fmt_step_label(p->step, f->timeline[rows[k].last].step, lab, sizeof lab);
            int w = (int)(40 * (p->reserved - p->allocated) / maxgap);
            memset(bar, '#', (size_t)w);
            bar[w] = 0;
            fprintf(out, "  %9s %12s %12s %12s %s\n", lab, r, a, g, bar);
        }
        free(rows);
    }
    if (f->have_peak) {
        fprintf(out, "\nAt the reserved peak (event %" PRIu64 ")\n", f->peak.seq);
        print_state_text(d, m, &f->peak, top, out);
    } else {
        fprintf(out, "\nAt the reserved peak: no allocator snapshot in this recording (record mode, or an "
                     "older gpumem): the causes need one\n");
    }
    for (size_t i = 0; i < f->nooms; i++) {
        fprintf(out, "\nAt OOM %zu (event %" PRIu64 ")\n", i + 1, f->ooms[i].seq);
        print_state_text(d, m, &f->ooms[i], top, out);
    }
    fprintf(out, "\nFixes (the recorded trace replayed through the allocator under each configuration)\n");
    if (f->replay_peak_reserved) {
        char r[32], rr[32];
        bytes(f->recorded_peak_reserved, r, sizeof r);
        bytes(f->replay_peak_reserved, rr, sizeof rr);
        if (f->replay_oom)
            fprintf(out, "  recorded configuration: the replay meets the recorded OOM too (peak reserved %s before "
                         "it); a fix is a configuration under which it does not\n", rr);
        else
            fprintf(out, "  recorded configuration: peak reserved %s recorded, %s replayed%s\n", r, rr,
                    f->recorded_peak_reserved == f->replay_peak_reserved ? " (exact)" : "");
    }
    if (!f->nfixes) fprintf(out, "  none: %s\n", f->fix_note);
    for (size_t i = 0; i < f->nfixes && (int)i < top; i++) {
        const gm_frag_fix *x = &f->fixes[i];
        char r[32];
        bytes(x->peak_reserved, r, sizeof r);
        double pct = f->replay_peak_reserved && !f->replay_oom
                         ? 100.0 * ((double)x->peak_reserved - (double)f->replay_peak_reserved) / (double)f->replay_peak_reserved
                         : 0.0;
        if (f->replay_oom) fprintf(out, "  %11s  no OOM  GPUMEM_CONF=%s\n", r, x->conf);
        else fprintf(out, "  %11s %+6.1f%%  GPUMEM_CONF=%s\n", r, pct, x->conf);
        if (f->torch && !x->torch_runs)
            fprintf(out, "  %11s %7s  %s; only with gpumem as PyTorch's allocator (gpumem record --allocator gpumem)\n",
                    "", "", x->change);
        else
            fprintf(out, "  %11s %7s  %s; PyTorch: %s%s\n", "", "", x->change,
                    x->has_pytorch ? "PYTORCH_CUDA_ALLOC_CONF=" : "no equivalent",
                    x->has_pytorch ? (x->pytorch[0] ? x->pytorch : "(its defaults)") : "");
    }
    print_recommendation(f, out);
}

/* ---------------------------------------------------------------- JSON */

static void print_state_json(gm_db *d, const gm_model *m, const gm_frag_state *s, FILE *out) {
    fprintf(out,
            "{\"seq\":%" PRIu64 ",\"device\":%d,\"requested\":%" PRIu64 ",\"allocated\":%" PRIu64
            ",\"reserved\":%" PRIu64 ",\"free_cached\":%" PRIu64 ",\"largest_free\":%" PRIu64
            ",\"segments\":%zu,\"free_blocks\":%zu,\"attributed_pct\":%.2f,\"causes\":[",
            s->seq, s->device, s->requested, s->allocated, s->reserved, s->free_cached, s->largest_free,
            s->nsegments, s->nfree, attributed_pct(s));
    int first = 1;
    for (int c = 0; c < GM_FC_N; c++) {
        if (!s->causes[c]) continue;
        char det[2048];
        cause_detail(d, m, s, c, det, sizeof det);
        fprintf(out, "%s{\"cause\":\"%s\",\"bytes\":%" PRIu64 ",\"detail\":", first ? "" : ",", gm_frag_cause_name[c],
                s->causes[c]);
        gm_json_str(out, det);
        fputc('}', out);
        first = 0;
    }
    fputs("],\"request\":", out);
    if (s->need_known)
        fprintf(out, "{\"seq\":%" PRIu64 ",\"size\":%" PRIu64 ",\"stream\":%" PRIu64 ",\"pool\":\"%s\",\"pool_free\":%" PRIu64
                     ",\"pool_largest_free\":%" PRIu64 ",\"private_pool\":%" PRIu64 "}",
                s->need_seq, s->need_size, s->need_stream, s->need_small ? "small" : "large", s->need_pool_free,
                s->need_pool_largest, s->need_private_pool);
    else
        fputs("null", out);
    /* a documented key is always there: null at the peak (fragmentation is an OOM's verdict) */
    fprintf(out, ",\"fragmentation\":%s", !s->oom ? "null" : s->fragmentation ? "true" : "false");
    fputs(",\"histogram\":[", out);
    first = 1;
    for (int h = 0; h < GM_FRAG_NHIST; h++) {
        if (!s->hist_count[h]) continue;
        fprintf(out, "%s{\"bucket\":\"%s\",\"count\":%" PRIu64 ",\"bytes\":%" PRIu64 "}", first ? "" : ",",
                gm_frag_hist_name[h], s->hist_count[h], s->hist_bytes[h]);
        first = 0;
    }
    fputs("],\"pools\":[", out);
    for (size_t i = 0; i < s->npools; i++) {
        const gm_frag_pool *p = &s->pools[i];
        fprintf(out, "%s{\"stream\":%" PRIu64 ",\"pool\":\"%s\",\"segments\":%zu,\"reserved\":%" PRIu64
                     ",\"allocated\":%" PRIu64 ",\"free\":%" PRIu64 ",\"largest_free\":%" PRIu64
                     ",\"private_pool\":%" PRIu64 "}",
                i ? "," : "", p->stream, p->small ? "small" : "large", p->segments, p->reserved, p->allocated,
                p->free, p->largest, p->private_pool);
    }
    fputs("],\"pinned_by\":[", out);
    for (size_t i = 0; i < s->npins && i < FRAG_JSON_PINS; i++) {
        char who[1024];
        alloc_words(d, m, s->pins[i].birth, s->pins[i].addr, s->pins[i].death, who, sizeof who);
        fprintf(out, "%s{\"alloc_id\":%" PRIu64 ",\"size\":%" PRIu64 ",\"free_bytes\":%" PRIu64 ",\"segment\":%" PRIu64
                     ",\"what\":",
                i ? "," : "", s->pins[i].birth, s->pins[i].size, s->pins[i].free_bytes, s->pins[i].segment);
        gm_json_str(out, who);
        fputc('}', out);
    }
    fputs("]}", out);
}

static void print_json(gm_db *d, const gm_model *m, const gm_frag *f, const uint64_t *meas, FILE *out) {
    fputs("{\"database\":", out);
    gm_json_str(out, d->path);
    gm_scope_json(d, out, ",", ""); /* several devices: whose events were replayed */
    char ending[256]; /* null, or why the program did not run to its end (gm_ending_line) */
    gm_ending_line(d, ending, sizeof ending);
    fputs(",\"ending\":", out);
    gm_json_str(out, ending[0] ? ending : NULL);
    fputs(",\"recorded\":{\"conf\":", out);
    gm_json_str(out, f->recorded_conf[0] ? f->recorded_conf : NULL);
    fputs(",\"pytorch_conf\":", out); /* PyTorch's allocator ran it: its own setting */
    gm_json_str(out, f->torch || f->pytorch_recorded ? f->torch_conf : NULL);
    fprintf(out, ",\"peak_reserved\":%" PRIu64 ",\"replayed_peak_reserved\":%" PRIu64 ",\"replay_oom\":%s,",
            f->recorded_peak_reserved, f->replay_peak_reserved, f->replay_oom ? "true" : "false");
    gm_torch_reset_json(out, &f->reset); /* whichever allocator was PyTorch's: the peaks are the whole run's */
    fputc('}', out);
    fprintf(out, ",\"timeline_by\":\"%s\",\"timeline\":[", f->by_step ? "step" : "bucket");
    for (size_t i = 0; i < f->ntimeline; i++) {
        const gm_frag_point *p = &f->timeline[i];
        fprintf(out, "%s{\"%s\":%" PRId64 ",\"seq\":%" PRIu64 ",\"reserved\":%" PRIu64 ",\"allocated\":%" PRIu64 "}",
                i ? "," : "", f->by_step ? "step" : "bucket", p->step, p->seq, p->reserved, p->allocated);
    }
    fputs("],\"at_peak\":", out);
    if (f->have_peak) print_state_json(d, m, &f->peak, out);
    else fputs("null", out);
    fputs(",\"ooms\":[", out);
    for (size_t i = 0; i < f->nooms; i++) {
        if (i) fputc(',', out);
        print_state_json(d, m, &f->ooms[i], out);
    }
    fputs("],\"fixes\":[", out);
    for (size_t i = 0; i < f->nfixes; i++) {
        const gm_frag_fix *x = &f->fixes[i];
        fputs(i ? ",{\"conf\":" : "{\"conf\":", out);
        gm_json_str(out, x->conf);
        fputs(",\"pytorch_conf\":", out);
        gm_json_str(out, x->has_pytorch ? x->pytorch : NULL);
        fputs(",\"change\":", out);
        gm_json_str(out, x->change);
        fprintf(out, ",\"predicted_peak_reserved\":%" PRIu64 ",\"predicted_peak_allocated\":%" PRIu64 "}",
                x->peak_reserved, x->peak_allocated);
    }
    fputs("],\"recommended\":", out);
    if (f->best == SIZE_MAX) {
        fputs("null", out);
    } else {
        const gm_frag_fix *b = &f->fixes[f->best];
        fputs("{\"conf\":", out);
        gm_json_str(out, b->conf);
        fputs(",\"pytorch_conf\":", out);
        gm_json_str(out, b->has_pytorch ? b->pytorch : NULL);
        fprintf(out, ",\"predicted_peak_reserved\":%" PRIu64 "}", b->peak_reserved);
    }
    fputs(",\"searched\":", out);
    fputs(f->searched ? "true" : "false", out);
    fputs(",\"torch\":", out);
    if (!f->torch) {
        gm_torch_absent_json(d, out); /* null, or --device N where PyTorch held nothing on N */
    } else {
        fputs("{\"recorded_conf\":", out);
        gm_json_str(out, f->torch_conf);
        fputc(',', out);
        gm_torch_reset_json(out, &f->reset);
        fputs(",\"gpumem\":", out);
        if (f->best_gpumem == SIZE_MAX) {
            fputs("null", out);
        } else {
            fputs("{\"conf\":", out);
            gm_json_str(out, f->fixes[f->best_gpumem].conf);
            fprintf(out, ",\"peak_reserved\":%" PRIu64 "}", f->fixes[f->best_gpumem].peak_reserved);
        }
        fputc('}', out);
    }
    /* documented keys are always there: check is null without --check (or when it could not run) */
    fputs(",\"check\":", out);
    if (meas) {
        const gm_frag_fix *b = &f->fixes[f->best];
        fputs("{\"conf\":", out);
        gm_json_str(out, b->conf);
        fputs(",\"pytorch_conf\":", out);
        gm_json_str(out, b->has_pytorch ? b->pytorch : NULL);
        fprintf(out, ",\"measured_by\":\"%s\",\"predicted_peak_reserved\":%" PRIu64 ",\"measured_peak_reserved\":%" PRIu64
                     ",\"measured_peak_allocated\":%" PRIu64 "}",
                f->torch ? "pytorch" : "gpumem", b->peak_reserved, meas[1], meas[0]);
    } else {
        fputs("null", out);
    }
    fputs("}\n", out);
}

/* ---------------------------------------------------------------- the command */

int gm_frag_main(int argc, char **argv) {
    const char *db = NULL;
    int json = 0, check = 0, search = 0, lossy_ok = 0, device = -1;
    int top = 8;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_frag, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--check")) {
            check = 1;
        } else if (!strcmp(a, "--search")) {
            search = 1;
        } else if (!strcmp(a, "--lossy-ok")) {
            lossy_ok = 1;
        } else if (!strcmp(a, "--top")) {
            int rc = gm_arg_top("frag", gm_opt_value(argc, argv, &i), &top);
            if (rc) return rc;
        } else if (gm_opt_is_device(a)) {
            int rc = gm_arg_device("frag", argc, argv, &i, &device);
            if (rc) return rc;
        } else if (a[0] == '-') {
            fprintf(stderr, "gpumem frag: unknown option '%s'\n%s", a, GM_HELP("frag"));
            return GM_EXIT_USAGE;
        } else if (!db) {
            db = a;
        } else {
            fprintf(stderr, "gpumem frag: one database at a time ('%s' and '%s')\n", db, a);
            return GM_EXIT_USAGE;
        }
    }
    if (!db) {
        fprintf(stderr, "gpumem frag: which database?\n%s", GM_HELP("frag"));
        return GM_EXIT_USAGE;
    }
    char err[8192];
    gm_db d;
    gm_model m;
    if (gm_db_open(db, &d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        return GM_EXIT_BADDB;
    }
    int lossy = gm_lossy_gate(&d, "frag", lossy_ok, json ? stderr : stdout);
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
        return gm_scope_fail("frag", sc, err, "the busiest");
    }
    gm_scope_say(&d, "the peaks, the fragmentation and the replays", json ? stderr : stdout);
    if (gm_model_load_tables(&d, &m, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        gm_model_free(&m);
        gm_db_close(&d);
        return GM_EXIT_BADDB;
    }
    gm_frag f;
    if (gm_frag_analyze(&d, &m, search, &f, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        gm_model_free(&m);
        gm_db_close(&d);
        return GM_EXIT_BADDB;
    }
    /* pages overwritten, found by the sweep: refused, or (--lossy-ok) said first */
    int damaged = gm_damage_gate(&d, "frag", 1, lossy_ok, json ? stderr : stdout);
    if (damaged) {
        gm_frag_free(&f);
        gm_model_free(&m);
        gm_db_close(&d);
        return damaged;
    }
    /* call sites are named only in the allocator states' blocks (alloc_words): without a state
     * the binaries' debug information is not read (a fixed twentieth of frag on 1 M events) */
    if (f.have_peak || f.nooms) gm_symbolize(&d, &m);
    int rc = 0;
    uint64_t meas[2] = {0, 0};
    int have_meas = 0;
    if (check) {
        if (f.best == SIZE_MAX) {
            /* the recorded configuration is already the best tried: a CI gate on --check must
             * pass there, as it passes where the fix measured as predicted */
            const char *why = !f.nfixes  ? f.fix_note
                              : f.searched ? (f.torch ? "no PYTORCH_CUDA_ALLOC_CONF gpumem tune tries reserves less for "
                                                        "PyTorch's allocator"
                                                      : "gpumem tune's search finds the recorded configuration the best")
                              : f.torch    ? "no PYTORCH_CUDA_ALLOC_CONF among the fixes reserves less for PyTorch's allocator"
                                           : "each fix saves too little for its driver calls: tune's cost rule";
            fprintf(stderr, "gpumem frag: --check: nothing to check, no fix to re-run (%s)\n", why);
        } else if (f.torch ? gm_frag_rerun_torch(&d, f.fixes[f.best].pytorch, &meas[0], &meas[1], err, sizeof err) != 0
                           : gm_frag_rerun(&d, f.fixes[f.best].conf, &meas[0], &meas[1], err, sizeof err) != 0) {
            fprintf(stderr, "gpumem frag: --check: %s\n", err);
            rc = 1;
        } else {
            have_meas = 1;
        }
    }
    if (json) {
        print_json(&d, &m, &f, have_meas ? meas : NULL, stdout);
    } else {
        print_text(&d, &m, &f, (int)top, stdout);
        if (have_meas) {
            const gm_frag_fix *b = &f.fixes[f.best];
            char p[32], r[32];
            bytes(b->peak_reserved, p, sizeof p);
            bytes(meas[1], r, sizeof r);
            double e = b->peak_reserved ? 100.0 * ((double)meas[1] - (double)b->peak_reserved) / (double)b->peak_reserved : 0.0;
            if (f.torch)
                printf("  check: re-run under PYTORCH_CUDA_ALLOC_CONF=%s: %s %s measured, %s predicted "
                       "(error %+.2f%%)\n", b->pytorch, gm_torch_peak_name(&f.reset, 1), r, p, e);
            else
                printf("  check: re-run under GPUMEM_CONF=%s: peak reserved %s measured, %s predicted (error %+.2f%%)\n",
                       b->conf, r, p, e);
        }
    }
    gm_frag_free(&f);
    gm_model_free(&m);
    gm_db_close(&d);
    return rc;
}
