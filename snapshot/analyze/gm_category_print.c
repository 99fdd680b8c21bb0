/* gm_category_print.c — the report's "by category" block (text and JSON) from gm_category.c's
 * tables: the bytes of each category at the peak, the source that decided them, and each
 * step's highest moment. */
#include "snapshot/analyze/gm_category.h"

#include <inttypes.h>
#include <string.h>

static const char *how(int from, int steps)
{
    if (from == GM_CSRC_PHASES) return steps ? "\"step N\" ranges (NVTX, or PyTorch's hooks)" : "fwd / bwd / opt ranges";
    if (from == GM_CSRC_INFERENCE)
        return steps ? "the recording's periodicity" : "lifetimes: the backward begins at the step's highest "
                                                       "point, the update after the backward's last free";
    return "none";
}

static int same_point(const gm_cat_point *a, const gm_cat_point *b)
{
    if (a->total != b->total) return 0;
    for (int k = 0; k < GM_NCATS; k++)
        if (a->bytes[k] != b->bytes[k]) return 0;
    return 1;
}

/* one row for the points first .. last (the same figures), labelled "N" or "N-M" (steps) or
 * "@seq" */
static void print_point(FILE *out, const gm_cat_point *first, const gm_cat_point *last)
{
    char lab[48], b[32];
    if (first->step >= 0 && last->step > first->step)
        snprintf(lab, sizeof lab, "%" PRId64 "-%" PRId64, first->step, last->step);
    else if (first->step >= 0)
        snprintf(lab, sizeof lab, "%" PRId64, first->step);
    else
        snprintf(lab, sizeof lab, "@%" PRIu64, first->seq);
    gm_fmt_bytes(first->total, b, sizeof b);
    fprintf(out, "    %-11s %12s", lab, b);
    for (int k = 0; k < GM_NCATS; k++) {
        gm_fmt_bytes(first->bytes[k], b, sizeof b);
        fprintf(out, " %12s", first->bytes[k] ? b : "-");
    }
    fputc('\n', out);
}

void gm_categories_print_text(FILE *out, const gm_categories *c, const char *title)
{
    char b[32];
    gm_fmt_bytes(c->at_total, b, sizeof b);
    fprintf(out, "\n%s (at the peak allocated moment, event %" PRIu64 ": %s)\n", title, c->at_seq, b);
    for (int k = 0; k < GM_NCATS; k++) {
        if (!c->peak[k]) continue;
        gm_fmt_bytes(c->peak[k], b, sizeof b);
        fprintf(out, "  %12s %6.1f%%  %-16s ", b,
                c->at_total ? 100.0 * (double)c->peak[k] / (double)c->at_total : 0.0, gm_cat_word[k]);
        int main_src = gm_category_source(c, k);
        if (main_src == GM_CSRC_NONE) fputs("not decided", out);
        else fprintf(out, "from %s", gm_csrc_name[main_src]);
        for (int s = 0; s < GM_NCSRCS; s++) {
            if (s == main_src || !c->peak_by_src[k][s]) continue;
            gm_fmt_bytes(c->peak_by_src[k][s], b, sizeof b);
            /* GM_CSRC_NONE: bytes no source placed (PyTorch's segments in the device's view,
             * what an OOM unwound), "other" by default: "by nothing" read as a source */
            if (s == GM_CSRC_NONE) fprintf(out, ", %s undecided (no source placed it: \"other\" by default)", b);
            else fprintf(out, ", %s by %s", b, gm_csrc_name[s]);
        }
        fputc('\n', out);
    }
    fprintf(out, "  steps from %s; phases from %s", how(c->steps_from, 1), how(c->phases_from, 0));
    if (c->steps_from == GM_CSRC_INFERENCE)
        fprintf(out, " (%zu steps, %" PRIu64 " allocations each)", c->nsteps, c->period);
    fputc('\n', out);
    if (c->steps_from == GM_CSRC_INFERENCE && c->doubt[0]) fprintf(out, "  steps uncertain: %s\n", c->doubt);
    if (c->phases_from == GM_CSRC_INFERENCE && c->no_backward)
        fputs("  no backward: no step makes something after its highest point while freeing what it made "
              "before (a loop that makes buffers and frees or keeps them): nothing is saved for a backward, "
              "no allocation is an activation\n", out);
    if (c->phases_from == GM_CSRC_INFERENCE && c->no_update)
        fputs("  no update: gpumem record's PyTorch hooks saw no optimizer.step(): what follows a step's backward "
              "is no update, and nothing is optimizer state\n", out);
    if (c->phases_from == GM_CSRC_NONE && c->why[0]) {
        /* PyTorch's segments: its tensors are told in its own view, which has its own line */
        int in_view = strstr(c->why, "PyTorch's segments") != NULL;
        fprintf(out, "  not decided: %s; what names leave is \"other\"%s%s%s\n", c->why, in_view ? "" : " (",
                in_view ? "" : c->hint, in_view ? "" : ")");
    }
    if (c->stopped_at)
        fprintf(out, "  the run stopped at an OOM (event %" PRIu64 "): what was alive then and had not lived through "
                     "a step's end is \"other\" (the batch's input, an activation, a workspace: the stop came "
                     "before its phases could tell)\n", c->stopped_at);
    if (!c->ntimeline) return;
    fprintf(out, "  over time (%s):\n    %-11s %12s", c->nsteps ? "each step's highest moment" : "24 stretches of event numbers",
            c->nsteps ? "step" : "events", "total");
    static const char *const head[GM_NCATS] = {"params", "grads", "opt state", "activations", "temporaries",
                                               "workspaces", "other"};
    for (int k = 0; k < GM_NCATS; k++)
        fprintf(out, " %12s", head[k]);
    fputc('\n', out);
    /* consecutive rows with the same figures are one row ("10-200": a steady run reads as one
     * line); a long run of distinct rows is sampled, about 24, the last always */
    size_t n = c->ntimeline, nruns = 0, shown = 0;
    for (size_t i = 0; i < n; i++)
        nruns += i == 0 || !same_point(&c->timeline[i - 1], &c->timeline[i]);
    size_t every = nruns > 24 ? (nruns + 23) / 24 : 1;
    for (size_t i = 0, r = 0; i < n; r++) {
        size_t j = i + 1;
        while (j < n && same_point(&c->timeline[i], &c->timeline[j]))
            j++;
        if (r % every == 0 || j == n) {
            print_point(out, &c->timeline[i], &c->timeline[j - 1]);
            shown++;
        }
        i = j;
    }
    if (shown < nruns) fprintf(out, "    (%zu of %zu distinct rows, alike neighbours merged: --json has every one)\n",
                               shown, nruns);
    else if (nruns < n) fprintf(out, "    (alike neighbours merged: --json has every one)\n");
}

static void json_from(FILE *out, const char *key, int from)
{
    fprintf(out, "\"%s\":", key);
    if (from == GM_CSRC_NONE) fputs("null", out);
    else fprintf(out, "\"%s\"", gm_csrc_name[from]);
}

void gm_categories_print_json(FILE *out, const gm_categories *c)
{
    fputs("\"categories_at_peak\":{", out);
    for (int k = 0; k < GM_NCATS; k++)
        fprintf(out, "%s\"%s\":%" PRIu64, k ? "," : "", gm_cat_key[k], c->peak[k]);
    fputs("},\"category_source\":{", out);
    for (int k = 0; k < GM_NCATS; k++) {
        int s = gm_category_source(c, k);
        fprintf(out, "%s\"%s\":", k ? "," : "", gm_cat_key[k]);
        if (!c->peak[k]) fputs("null", out);
        else fprintf(out, "\"%s\"", gm_csrc_name[s]);
    }
    fprintf(out, "},\"categories\":{\"seq\":%" PRIu64 ",\"total\":%" PRIu64 ",", c->at_seq, c->at_total);
    json_from(out, "steps_from", c->steps_from);
    fputc(',', out);
    json_from(out, "phases_from", c->phases_from);
    fprintf(out, ",\"steps\":%zu,\"period\":", c->nsteps);
    if (c->steps_from == GM_CSRC_INFERENCE) fprintf(out, "%" PRIu64, c->period);
    else fputs("null", out);
    fputs(",\"steps_uncertain\":", out); /* inferred steps: why the count may be wrong, or null */
    gm_json_str(out, c->steps_from == GM_CSRC_INFERENCE && c->doubt[0] ? c->doubt : NULL);
    fputs(",\"why\":", out);
    gm_json_str(out, c->phases_from == GM_CSRC_NONE && c->why[0] ? c->why : NULL);
    fputs(",\"hint\":", out);
    gm_json_str(out, c->phases_from == GM_CSRC_NONE && c->hint[0] ? c->hint : NULL);
    fputs(",\"backward\":", out); /* inferred phases: whether a step shows a backward */
    fputs(c->phases_from != GM_CSRC_INFERENCE ? "null" : c->no_backward ? "false" : "true", out);
    fputs(",\"update\":", out); /* inferred phases: false where no optimizer.step() ran */
    fputs(c->phases_from != GM_CSRC_INFERENCE ? "null" : c->no_backward || c->no_update ? "false" : "true", out);
    fputs(",\"stopped_at_oom\":", out);
    if (c->stopped_at) fprintf(out, "%" PRIu64, c->stopped_at);
    else fputs("null", out);
    fputs(",\"sources_at_peak\":{", out);
    for (int k = 0; k < GM_NCATS; k++) {
        fprintf(out, "%s\"%s\":{", k ? "," : "", gm_cat_key[k]);
        for (int s = 0; s < GM_NCSRCS; s++)
            fprintf(out, "%s\"%s\":%" PRIu64, s ? "," : "", gm_csrc_name[s], c->peak_by_src[k][s]);
        fputc('}', out);
    }
    fprintf(out, "},\"over_time_by\":\"%s\",\"over_time\":[", c->nsteps ? "step" : "bucket");
    for (size_t i = 0; i < c->ntimeline; i++) {
        const gm_cat_point *p = &c->timeline[i];
        fprintf(out, "%s{\"step\":", i ? "," : "");
        if (p->step >= 0) fprintf(out, "%" PRId64, p->step);
        else fputs("null", out);
        fprintf(out, ",\"seq\":%" PRIu64 ",\"total\":%" PRIu64, p->seq, p->total);
        for (int k = 0; k < GM_NCATS; k++)
            fprintf(out, ",\"%s\":%" PRIu64, gm_cat_key[k], p->bytes[k]);
        fputc('}', out);
    }
    fputs("]}", out);
}
