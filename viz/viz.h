/* viz.h — internal to `gpumem viz` (viz/): the writers of the page's data, one JSON member each.
 * gm_viz.c: the command, summary, segment maps, OOMs, leaks, the --with analyses;
 * viz_timeline.c: tensor classes, memory over time (stacked), what was live per bucket;
 * viz_flame.c: the icicles, from snapshot/'s folded stacks (gm_export_format);
 * viz_category.c: what each byte is (categories and their sources);
 * viz_tensors.c: the allocations shown one by one; viz_bands.c: the zoomed timeline's bands. */
#ifndef GPUMEM_VIZ_VIZ_H
#define GPUMEM_VIZ_VIZ_H

#include <stdint.h>
#include <stdio.h>

#include "snapshot/analyze/gm_report.h"
#include "snapshot/formats/gm_formats.h"

#define VIZ_TOP_CLASSES 10 /* classes with their own layer and colour; the rest are "other" */

/* A JSON string that is safe inside <script>: '<' is written \u003c. */
void viz_json_str(FILE *o, const char *s);
/* Device memory the timeline counts (host and managed allocations are not). */
static inline int viz_is_device(const gm_alloc *a)
{
    return a->device >= 0 && a->kind != 5 && a->kind != 7;
}

/* Tensor classes as `gpumem advise` defines them (adv_name_class: the name with digits as '*');
 * an unnamed allocation's class is "(unnamed) in FUNCTION", its call site's function. */
typedef struct viz_classes {
    char **names; /* ranked: most bytes live at the peak first, then most bytes allocated */
    size_t n;
    uint32_t *of; /* per m->allocs index: its class's rank; UINT32_MAX for non-device memory */
} viz_classes;
int viz_classes_build(const gm_model *m, viz_classes *c);
void viz_classes_free(viz_classes *c);

/* Interns a key (an allocation's index, a stack id, a range id) -> its index in a list written
 * later. ilist_add: the index, or -1 out of memory. */
typedef struct viz_ilist {
    u64map idx;
    uint64_t *keys;
    size_t n, cap;
} viz_ilist;
long viz_ilist_add(viz_ilist *l, uint64_t key);
void viz_ilist_free(viz_ilist *l);

/* (key, allocation index) pairs sorted by key, stably (equal keys keep their order): an LSD
 * radix sort, for millions of them (viz_timeline.c). 0, or -1 out of memory. */
typedef struct viz_kv {
    uint64_t key;
    uint32_t a;
} viz_kv;
int viz_radix_sort(viz_kv *v, size_t n, uint64_t maxkey);

/* What each byte is (viz_category.c): a category per allocation, from the first source that
 * knows it. First gpumem's own categories (snapshot/analyze/gm_category.h, the report's "by
 * category" table: names, phases, inference from lifetimes), then, for what they leave, the
 * page's own reading of the tensor's name and phases. A source is one function in
 * viz_category.c's `sources` table. */
enum {
    VIZ_CAT_NONE,
    VIZ_CAT_PARAM,
    VIZ_CAT_GRAD,
    VIZ_CAT_OPT,
    VIZ_CAT_ACT,
    VIZ_CAT_TEMP,
    VIZ_CAT_WORKSPACE,
    VIZ_CAT_OTHER,
    VIZ_NCATS
};
enum { VIZ_SRC_NONE, VIZ_SRC_NAME, VIZ_SRC_PHASE, VIZ_SRC_INFERENCE, VIZ_NSRCS };
extern const char *const viz_cat_name[VIZ_NCATS];
extern const char *const viz_src_name[VIZ_NSRCS];
typedef struct viz_categories {
    uint8_t *phase;           /* per m->allocs index: the phase of its birth range (ADV_PH_*) */
    uint8_t *cat, *src;       /* per m->allocs index: VIZ_CAT_*, and the VIZ_SRC_* that said so */
    uint64_t peak[VIZ_NSRCS]; /* bytes live at the peak categorised by each source */
    int by_default;           /* 1: the page colours by category first (half the peak or more) */
} viz_categories;
/* d: the recording (its launches place the updates of an unannotated one; NULL: without) */
int viz_categories_build(gm_db *d, const gm_model *m, viz_categories *c);
void viz_categories_free(viz_categories *c);

/* The allocations the page shows one by one (viz_tensors.c): the rows the timeline's live lists,
 * its bands and the segment maps refer to, each with its name, size, call site, birth and death
 * (seq and NVTX path), class, category and stack, written once as "tensors". */
typedef struct viz_tensors {
    viz_ilist rows; /* m->allocs indices */
    size_t cap;     /* at most this many rows; viz_tensor_ref returns -1 beyond */
} viz_tensors;
long viz_tensor_ref(viz_tensors *t, size_t alloc_index);
/* "tensors": {"rows": [[name, bytes, site, birth, death, class, category, source, birth path,
 * death path, stack, phase], ...], "sites", "paths", "stacks": [[frame, ...] innermost first, from
 * where the program called], "frames": [[desc, python], ...]}. 0, or -1 out of memory. */
int viz_write_tensors(FILE *o, gm_db *d, const gm_model *m, const viz_classes *c,
                      const viz_categories *k, viz_tensors *t);
void viz_tensors_free(viz_tensors *t);

/* The window the timeline opens on: the step that holds the peak allocated moment, one step
 * either side (the whole run when the recording has no steps). */
typedef struct viz_focus {
    uint64_t first_seq, last_seq;
    long step; /* index into m->steps of the peak's step; -1 none */
} viz_focus;
void viz_focus_of(const gm_model *m, viz_focus *f);

/* "timeline": {...} (see the design comment of viz_timeline.c). 0, or -1 out of memory. */
int viz_write_timeline(FILE *o, gm_db *d, const gm_model *m, const viz_classes *c,
                       const viz_categories *k, viz_tensors *t);
/* "bands": {...} (viz_bands.c): the allocations drawn one by one when the timeline is zoomed in.
 * 0, or -1 out of memory. */
int viz_write_bands(FILE *o, const gm_model *m, const viz_focus *f, viz_tensors *t);
/* One rank's lane of a multi-rank page: {"first_seq", "last_seq", "buckets": [[first seq,
 * allocated max, reserved max], ...] (at most VIZ_LANE_BUCKETS), "steps": [[step, end seq], ...]}.
 * 0, or -1 out of memory. */
#define VIZ_LANE_BUCKETS 500
int viz_write_lane(FILE *o, gm_db *d, const gm_model *m);
/* "flame_peak" / "flame_total": the folded stacks of `gpumem export --format folded --what
 * peak|total` as a tree; each node says whether it is start-up code (frames below the program's
 * entry). what: 0 peak, 1 total. 0, or -1 (out of memory). */
int viz_write_flame(FILE *o, gm_db *d, gm_model *m, int what);

#endif
