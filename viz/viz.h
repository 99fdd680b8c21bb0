/* viz.h — internal to `gpumem viz` (viz/): the writers of the page's data, one JSON member each.
 * gm_viz.c: the command, summary, segment maps, OOMs, leaks, the --with analyses;
 * viz_timeline.c: tensor classes, memory over time (stacked), what was live per bucket;
 * viz_flame.c: the icicles, from snapshot/'s folded stacks (gm_export_format). */
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
int viz_is_device(const gm_alloc *a);

/* Tensor classes as `gpumem advise` defines them (adv_name_class: the name with digits as '*');
 * an unnamed allocation's class is "(unnamed) in FUNCTION", its call site's function. */
typedef struct viz_classes {
    char **names; /* ranked: most bytes live at the peak first, then most bytes allocated */
    size_t n;
    uint32_t *of; /* per m->allocs index: its class's rank; UINT32_MAX for non-device memory */
} viz_classes;
int viz_classes_build(const gm_model *m, viz_classes *c);
void viz_classes_free(viz_classes *c);

/* "timeline": {...} (see the design comment of viz_timeline.c). 0, or -1 out of memory. */
int viz_write_timeline(FILE *o, gm_db *d, const gm_model *m, const viz_classes *c);
/* One rank's lane of a multi-rank page: {"first_seq", "last_seq", "buckets": [[first seq,
 * allocated max, reserved max], ...] (at most VIZ_LANE_BUCKETS), "steps": [[step, end seq], ...]}.
 * 0, or -1 out of memory. */
#define VIZ_LANE_BUCKETS 500
int viz_write_lane(FILE *o, gm_db *d, const gm_model *m);
/* "flame_peak" / "flame_total": the folded stacks of `gpumem export --format folded --what
 * peak|total` as a tree. what: 0 peak, 1 total. 0, or -1 (out of memory). */
int viz_write_flame(FILE *o, gm_db *d, gm_model *m, int what);

#endif
