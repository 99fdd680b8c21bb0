/* gm_compiled.c — what a recording of a torch.compile program holds, and what it cannot hold.
 *
 * gpumem's phases come from PyTorch's module hooks, and Dynamo traces a compiled module's
 * children without calling their hooks: the whole compiled region is one range, named by the
 * compiled module (torch.compile's wrapper, OptimizedModule, when the model itself is
 * compiled). Inductor's kernels and buffers are named only by the generated code's lines.
 *
 * The first call of a compiled function also compiles it, and inductor benchmarks its kernel
 * choices then (autotuning: Triton configurations, pad_mm, max-autotune's templates) with real
 * tensors and a cache-flushing buffer, all made inside the first step's forward or backward.
 * Those tensors are compile time, not the step's: a run whose compile cache is warm makes none
 * of them (tests/torch/torch_compile.sh: 130.54 MiB at the cold run's peak, 88.58 MiB warm).
 * They are known by their stacks' Python frames (inductor's benchmarking modules), so this
 * needs stacks with Python frames, which `gpumem record` takes for a Python program. One made
 * there that is never freed is no benchmark's: a library's cache the first op of its kind makes
 * whenever it runs (PyTorch's cuBLAS workspace, made by pad_mm's benchmark of a matmul when
 * cold, by the first matmul when warm); it stays the program's.
 *
 * The readers print what this finds: report (JSON key "torch_compile"), advise (notes, and the
 * techniques it withholds), frag and tune (a note on their replays), viz (its summary). The
 * tensors of every device are swept together. */
#include <stdio.h>
#include <string.h>

#include "snapshot/analyze/gm_report.h"

/* the stacks inductor's autotuning allocates from (any Python frame in these files); a format
 * string: each % doubled */
#define AUTOTUNE_STACKS                                                                            \
    "SELECT DISTINCT s.stack FROM stacks s JOIN frames f ON f.id = s.frame "                       \
    "WHERE f.python = 1 AND (f.file LIKE '%%/torch/_inductor/runtime/benchmarking.py' "            \
    "OR f.file LIKE '%%/torch/_inductor/select_algorithm.py' "                                     \
    "OR f.file LIKE '%%/torch/_inductor/autotune_process.py')"

/* a tensor made there that the program freed: one gpumem's exit hook freed from a PyTorch cache
 * (REC_F_TORCH_CACHE on its free, rec_is_workspace_free: the cuBLAS workspace pad_mm's benchmark
 * made when cold, which a warm run makes at its first matmul) is the program's, as one never
 * freed was before that hook */
#define AUTOTUNE_DIED                                                                              \
    "l.death IS NOT NULL AND NOT EXISTS (SELECT 1 FROM events x WHERE x.seq = l.death "             \
    "AND x.flags & 512 AND x.kind IN (2, 4, 32, 33))"

/* Is it a compiled program at all: a range of torch.compile's wrapper, or a stack through
 * inductor (a compiled submodule keeps its own name: its range is not called OptimizedModule,
 * its allocations' stacks pass through inductor's generated code). Not Dynamo's frames: an
 * eager optimizer's step runs through torch/_dynamo/eval_frame.py too (torch._disable_dynamo). */
static int compiled_program(gm_db *d, gm_compiled *c)
{
    if (!gm_table_exists(d, "ranges") || !gm_table_exists(d, "frames")) return 0;
    /* the ranges are scanned only where the name is among the strings (a large NVTX recording
     * that is not compiled pays one string lookup) */
    if (gm_sql_int(d, "SELECT EXISTS (SELECT 1 FROM strings WHERE s = 'OptimizedModule')"))
        c->compiled_ranges = gm_sql_int(d, "SELECT count(*) FROM ranges WHERE name IN "
                                        "(SELECT id FROM strings WHERE s = 'OptimizedModule')");
    return c->compiled_ranges > 0 ||
           gm_sql_int(d, "SELECT EXISTS (SELECT 1 FROM frames WHERE python = 1 AND "
                      "file LIKE '%/torch/_inductor/%')");
}

/* The tensors' peak with and without the autotuning's, in one ordered sweep: PyTorch's tensors
 * (its merged history, kind 31) where there is one, else those gpumem's allocator served through
 * PyTorch's hook (flag 4096; the libraries' workspaces beside them are not tensors), else the
 * device allocations */
static void autotune_peaks(gm_db *d, gm_compiled *c)
{
    const char *kinds =
        gm_sql_int(d, "SELECT EXISTS (SELECT 1 FROM events WHERE kind = 31)") ? "(31)"
        : gm_sql_int(d, "SELECT EXISTS (SELECT 1 FROM events WHERE kind IN (1, 3) AND flags & 4096)")
            ? "(1, 3) AND e.flags & 4096"
            : "(1, 3)";
    char sql[2048];
    snprintf(
        sql, sizeof sql,
        "WITH at(stack) AS (" AUTOTUNE_STACKS "), "
        "t AS (SELECT l.birth AS b, l.death AS dd, e.size AS sz, "
        "      e.stack IN (SELECT stack FROM at) AND " AUTOTUNE_DIED " AS tune "
        "      FROM alloc_life l JOIN events e ON e.seq = l.birth WHERE e.kind IN %s), "
        "dl AS (SELECT b AS seq, sz AS da, CASE WHEN tune THEN 0 ELSE sz END AS dw FROM t "
        "       UNION ALL SELECT dd, -sz, CASE WHEN tune THEN 0 ELSE -sz END FROM t WHERE dd IS "
        "NOT NULL), "
        "r AS (SELECT seq, sum(da) OVER w AS al, sum(dw) OVER w AS wo FROM dl "
        "      WINDOW w AS (ORDER BY seq ROWS UNBOUNDED PRECEDING)) "
        "SELECT seq, al, al - wo, (SELECT max(wo) FROM r) FROM r ORDER BY al DESC, seq LIMIT 1",
        kinds);
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(d->db, sql, -1, &q, NULL) != SQLITE_OK) return;
    if (sqlite3_step(q) == SQLITE_ROW) {
        c->peak_seq = (uint64_t)sqlite3_column_int64(q, 0);
        c->peak = (uint64_t)sqlite3_column_int64(q, 1);
        c->autotune_at_peak = (uint64_t)sqlite3_column_int64(q, 2);
        c->peak_without = (uint64_t)sqlite3_column_int64(q, 3);
    }
    sqlite3_finalize(q);
    snprintf(
        sql, sizeof sql,
        "WITH at(stack) AS (" AUTOTUNE_STACKS ") "
        "SELECT count(*), coalesce(sum(e.size), 0), "
        "       min(CASE WHEN r.path LIKE 'step %%' THEN CAST(substr(r.path, 6) AS INTEGER) END), "
        "       max(CASE WHEN r.path LIKE 'step %%' THEN CAST(substr(r.path, 6) AS INTEGER) END) "
        "FROM alloc_life l JOIN events e ON e.seq = l.birth LEFT JOIN ranges r ON r.id = e.range "
        "WHERE e.kind IN %s AND e.stack IN (SELECT stack FROM at) AND " AUTOTUNE_DIED,
        kinds);
    if (sqlite3_prepare_v2(d->db, sql, -1, &q, NULL) != SQLITE_OK) return;
    if (sqlite3_step(q) == SQLITE_ROW) {
        c->autotune_count = sqlite3_column_int64(q, 0);
        c->autotune_bytes = (uint64_t)sqlite3_column_int64(q, 1);
        c->autotune_first_step = sqlite3_column_int64(q, 2);
        c->autotune_last_step = sqlite3_column_int64(q, 3);
    }
    sqlite3_finalize(q);
}

int gm_compiled_read(gm_db *d, gm_compiled *c)
{
    memset(c, 0, sizeof *c);
    if (!compiled_program(d, c)) return 0;
    c->compiled = 1;
    if (gm_table_exists(d, "alloc_life") && gm_table_exists(d, "stacks")) autotune_peaks(d, c);
    c->private_pools =
        gm_meta_int(d, "torch_private_pools", 0) > 0 ||
        gm_sql_int(d, "SELECT EXISTS (SELECT 1 FROM events WHERE flags & 32768 AND kind IN (1, 3))");
    return 1;
}

static void steps_text(const gm_compiled *c, char *out, size_t n)
{
    if (!c->autotune_first_step)
        snprintf(out, n, "outside the steps");
    else if (c->autotune_first_step == c->autotune_last_step)
        snprintf(out, n, "in step %lld", (long long)c->autotune_first_step);
    else
        snprintf(out, n, "in steps %lld-%lld", (long long)c->autotune_first_step,
                 (long long)c->autotune_last_step);
}

void gm_compiled_note(const gm_compiled *c, char *out, size_t n)
{
    char a[32], p[32], w[32], st[48];
    gm_fmt_bytes(c->autotune_at_peak, a, sizeof a);
    gm_fmt_bytes(c->peak, p, sizeof p);
    gm_fmt_bytes(c->peak_without, w, sizeof w);
    steps_text(c, st, sizeof st);
    snprintf(
        out, n,
        "inductor's autotuning (compile time, %s) made %lld tensors; %s of them were live at the "
        "tensors' peak of %s (event %llu): without them the peak is %s, what a run whose compile "
        "cache is "
        "warm allocates",
        st, (long long)c->autotune_count, a, p, (unsigned long long)c->peak_seq, w);
}

void gm_compiled_summary(const gm_compiled *c, char *out, size_t n)
{
    char tune[512] = "";
    if (c->autotune_count) gm_compiled_note(c, tune, sizeof tune);
    snprintf(
        out, n,
        "PyTorch's module hooks do not fire inside a compiled region: its memory is the compiled "
        "module's "
        "range, with no per-layer phase below it%s%s%s",
        tune[0] ? "; " : "", tune,
        c->private_pools
            ? "; a step that replays a captured graph allocates nothing: its tensors stay in the "
              "graph's private pool"
            : "");
}

void gm_compiled_text(const gm_compiled *c, FILE *out)
{
    if (!c->compiled) return;
    fprintf(out, "\ntorch.compile: what gpumem cannot see inside a compiled region\n");
    fprintf(out,
            "  module ranges       PyTorch's module hooks do not fire inside a compiled region: "
            "its memory is "
            "the compiled module's range%s, with no per-layer phase below it; inductor's fused "
            "kernels and its "
            "buffers are named by the generated code's lines (its call sites)\n",
            c->compiled_ranges ? " (fwd/OptimizedModule, bwd/OptimizedModule)" : "");
    if (c->autotune_count) {
        char note[512], b[32];
        gm_fmt_bytes(c->autotune_bytes, b, sizeof b);
        gm_compiled_note(c, note, sizeof note);
        fprintf(out,
                "  autotuning          %s (%s allocated in all); they are counted in that step's "
                "figures "
                "below\n",
                note, b);
    }
    if (c->private_pools)
        fprintf(out, "  CUDA graphs         a step that replays a captured graph allocates "
                     "nothing: the graph's "
                     "tensors stay in its private pool (below), in no later step's figures\n");
}

void gm_compiled_json(const gm_compiled *c, FILE *out)
{
    fputs(",\"torch_compile\":", out);
    if (!c->compiled) {
        fputs("null", out);
        return;
    }
    fprintf(
        out,
        "{\"compiled_module_ranges\":%lld,\"autotune_allocations\":%lld,\"autotune_bytes\":%llu",
        (long long)c->compiled_ranges, (long long)c->autotune_count,
        (unsigned long long)c->autotune_bytes);
    if (c->autotune_first_step)
        fprintf(out, ",\"autotune_steps\":[%lld,%lld]", (long long)c->autotune_first_step,
                (long long)c->autotune_last_step);
    else
        fputs(",\"autotune_steps\":null", out);
    fprintf(
        out,
        ",\"peak\":%llu,\"peak_seq\":%llu,\"autotune_at_peak\":%llu,\"peak_without_autotune\":%llu"
        ",\"private_pools\":%s}",
        (unsigned long long)c->peak, (unsigned long long)c->peak_seq,
        (unsigned long long)c->autotune_at_peak, (unsigned long long)c->peak_without,
        c->private_pools ? "true" : "false");
}

void gm_compiled_replay_note(const gm_compiled *c, const char *prefix, FILE *out)
{
    if (!c->autotune_count) return;
    char note[512];
    gm_compiled_note(c, note, sizeof note);
    fprintf(out,
            "%s%s; every replay below holds them as recorded: its figures are this cold-compile "
            "run's, and a "
            "run with the compile cache warm makes none of them\n",
            prefix, note);
}
