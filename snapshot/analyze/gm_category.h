/* gm_category.h — what each byte is: parameters, gradients, optimizer state, activations,
 * temporaries, workspaces, other; for every recording, with the source that decided each
 * allocation's category (gm_category.c tells how). Used by `gpumem report` (the "by category"
 * tables, `categories_at_peak`), `gpumem advise` (phases of an unannotated recording) and
 * `gpumem viz` (its first category source). Built on read/gm.h: works on any model, PyTorch's
 * view (gm_model_torch_view) included. */
#ifndef GPUMEM_SNAPSHOT_ANALYZE_GM_CATEGORY_H
#define GPUMEM_SNAPSHOT_ANALYZE_GM_CATEGORY_H

#include "snapshot/read/gm.h"

#include <stddef.h>
#include <stdint.h>

enum { GM_CAT_PARAM, GM_CAT_GRAD, GM_CAT_OPT, GM_CAT_ACT, GM_CAT_TEMP, GM_CAT_WORKSPACE, GM_CAT_OTHER,
       GM_NCATS,
       GM_CAT_NONE = GM_NCATS /* not a device allocation (pinned host, managed) */ };
/* The JSON keys ("parameters", "optimizer_state", ...) and the words for people. */
extern const char *const gm_cat_key[GM_NCATS];
extern const char *const gm_cat_word[GM_NCATS];

/* Sources, best first: the program's names, its phases (NVTX ranges, PyTorch's hooks), then
 * inference from lifetimes and uses over the steps the recording's periodicity shows. */
enum { GM_CSRC_NONE, GM_CSRC_NAMES, GM_CSRC_PHASES, GM_CSRC_INFERENCE, GM_NCSRCS };
extern const char *const gm_csrc_name[GM_NCSRCS]; /* "none", "names", "phases", "inference" */

/* Where an event falls: before every step, in a step's forward, backward or update, after. */
enum { GM_CPH_PRE, GM_CPH_FWD, GM_CPH_BWD, GM_CPH_OPT, GM_CPH_POST };

/* One training step, in event seqs: it runs from start to end (inclusive); its backward begins at
 * bwd and its update at opt (UINT64_MAX: the step has none). */
typedef struct gm_cat_step {
    int64_t number; /* N of "step N", or 1, 2, ... for inferred steps */
    uint64_t start, bwd, opt, end;
    /* inferred phases of a step of several forward-backward passes (micro-batches: bwd is the
     * first one's): gm_categories.passes[pass, pass + npass), 0 where it has one */
    uint32_t pass, npass;
} gm_cat_step;

/* One forward-backward pass of such a step: its forward begins at start, its backward at bwd. */
typedef struct gm_cat_pass {
    uint64_t start, bwd;
} gm_cat_pass;

/* The bytes of each category at one moment. */
typedef struct gm_cat_point {
    int64_t step;  /* the step (its number) whose highest moment this is; -1: a bucket of seqs */
    uint64_t seq;  /* the moment: the highest allocated bytes in the step (or bucket) */
    uint64_t total;
    uint64_t bytes[GM_NCATS];
} gm_cat_point;

typedef struct gm_categories {
    size_t n;            /* m->nallocs */
    uint8_t *cat, *src;  /* per allocation: GM_CAT_*, GM_CSRC_* */
    gm_cat_step *steps;  /* in order */
    size_t nsteps;
    gm_cat_pass *passes; /* the steps' passes, where a step has several (gm_cat_step.pass) */
    size_t npasses;
    int steps_from;      /* GM_CSRC_PHASES ("step N" ranges), GM_CSRC_INFERENCE, GM_CSRC_NONE */
    int phases_from;     /* the same for forward / backward / update */
    uint64_t period;     /* inference: allocations per step (those that do not outlive the run) */
    char why[320];       /* phases_from NONE: why they could not be decided, for a person */
    char hint[400];      /* ... and what would decide them (gm_phases_hint) */
    char doubt[320];     /* steps_from INFERENCE: why the steps found may not be the loop's ("": sure) */
    int no_backward;     /* phases_from INFERENCE: no step shows a forward and a backward (a loop
                            that makes buffers and frees or keeps them): no activation */
    int no_update;       /* phases_from INFERENCE: gpumem record's hooks saw no optimizer.step()
                            (gm_category.c, no_optimizer_step): no update, no optimizer state */
    uint64_t stopped_at; /* the OOM the run stopped at (no step began after it; 0: none): what was
                            alive then and had not lived through a step's end is "other" */
    /* at the peak: the model's peak allocated moment */
    uint64_t at_seq, at_total;
    uint64_t peak[GM_NCATS];
    uint64_t peak_by_src[GM_NCATS][GM_NCSRCS];
    /* over time: each step's highest moment, or 24 buckets of seqs without steps */
    gm_cat_point *timeline;
    size_t ntimeline;
} gm_categories;

/* Categorises every allocation of m (device allocations; pinned host and managed memory get
 * GM_CAT_NONE) and fills the tables at m's peak allocated moment and over time. d, when not
 * NULL, gives the kernel launches that refine where updates begin. 0, or -1 with err (out of
 * memory). */
int gm_categories_build(gm_db *d, const gm_model *m, gm_categories *c, char *err, size_t errsz);
void gm_categories_free(gm_categories *c);
/* 1 where allocation a was alive at the OOM the run stopped at (c->stopped_at): its free, or
 * none, is the stop's, not where its phase would have freed it. */
int gm_category_cut(const gm_categories *c, const gm_alloc *a);
/* The source that decided most of category cat's bytes at the peak (GM_CSRC_NONE: no bytes). */
int gm_category_source(const gm_categories *c, int cat);
/* The phase (GM_CPH_*) and step index (into c->steps; -1 before or after every step) of seq. */
int gm_category_phase_at(const gm_categories *c, uint64_t seq, long *step);

/* What would tell a recording's steps and phases, for a person, where none were found (written
 * into out as one clause, no full stop): the report's "not decided" line and advise's note say
 * it. A Python program that gpumem record ran with its PyTorch hooks on (meta.torch_hooks "1",
 * Python frames in the stacks) had the hooks: what they missed (no nn.Module forward, no
 * optimizer.step(), ranges of its own) is said instead of advising them. d NULL: the plain
 * advice. */
void gm_phases_hint(gm_db *d, char *out, size_t n);

/* The report's "by category" block: text, or the JSON members `"categories_at_peak": {...},
 * "category_source": {...}, "categories": {...}` (no braces around them; the caller writes the
 * separators). */
void gm_categories_print_text(FILE *out, const gm_categories *c, const char *title);
void gm_categories_print_json(FILE *out, const gm_categories *c);

#endif
