/* viz_bands.c — the allocations the zoomed timeline draws one by one.
 *
 * Zoomed in, the page draws every allocation live in the window as a band, as PyTorch's
 * memory_viz does: stacked in birth order, each one as tall as its size, moving down when one
 * below it is freed; hovering one shows its name, category, size, phases and stack. That needs
 * each allocation's birth and death (a row of viz_tensors.c's table), not per-bucket maxima.
 *
 * Which allocations the page carries: all of them when the recording has at most VIZ_BANDS
 * device allocations (then every window can be drawn band by band); otherwise those live in the
 * window the page opens on (viz_focus: the peak's step and one either side), at most VIZ_BANDS
 * of them, largest first. What is left out of that window (too many, or past the table's cap) is
 * summed into one series, "elided" (at most VIZ_ELIDED points, each its bucket's highest sum),
 * which the page draws as one band under the others: the bands' top is allocated memory. */
#include <stdlib.h>
#include <string.h>

#include "viz/viz.h"

#define VIZ_BANDS 20000
#define VIZ_ELIDED 1000

int viz_write_bands(FILE *o, const gm_model *m, const viz_focus *f, viz_tensors *t)
{
    size_t ndev = 0, nc = 0, ne = 0;
    uint64_t maxsize = 0;
    for (size_t i = 0; i < m->nallocs; i++)
        if (viz_is_device(&m->allocs[i])) {
            ndev++;
            if (m->allocs[i].size > maxsize) maxsize = m->allocs[i].size;
        }
    uint64_t r0 = m->max_seq ? 1 : 0, r1 = m->max_seq ? m->max_seq : 1;
    if (ndev > VIZ_BANDS) r0 = f->first_seq, r1 = f->last_seq;
    viz_kv *v = malloc(sizeof *v * (ndev + 1)), *ev = NULL;
    uint8_t *keep = calloc(m->nallocs + 1, 1);
    int64_t *el = NULL;
    int rc = -1;
    if (!v || !keep) goto out;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (viz_is_device(a) && a->birth <= r1 && (!a->death || a->death > r0))
            v[nc++] = (viz_kv){maxsize - a->size, (uint32_t)i}; /* largest first, then oldest */
    }
    if (nc > VIZ_BANDS && viz_radix_sort(v, nc, maxsize)) goto out;
    for (size_t j = 0; j < nc && j < VIZ_BANDS; j++)
        keep[v[j].a] = 1;
    fprintf(o, "\"bands\":{\"first_seq\":%llu,\"last_seq\":%llu,\"all\":%s,\"n\":%zu,\"ids\":[",
            (unsigned long long)r0, (unsigned long long)r1, ndev > VIZ_BANDS ? "false" : "true",
            nc);
    size_t nw = 0;
    for (size_t i = 0; i < m->nallocs; i++) { /* birth order */
        if (!keep[i]) continue;
        long ti = viz_tensor_ref(t, i);
        if (ti < 0) {
            keep[i] = 0; /* the table is full: summed with the rest */
            continue;
        }
        fprintf(o, "%s%ld", nw++ ? "," : "", ti);
    }
    fprintf(o, "],\"elided\":{\"n\":%zu", nc - nw);
    if (nc > nw) {
        /* the sum of the allocations left out, over [r0, r1]: deaths before births at a seq */
        ev = malloc(sizeof *ev * 2 * (nc - nw + 1));
        double width = (double)(r1 - r0 + 1) / VIZ_ELIDED;
        if (width < 1) width = 1;
        size_t nb = (size_t)((double)(r1 - r0) / width) + 1;
        el = calloc(nb + 1, sizeof *el);
        if (!ev || !el) goto out;
        for (size_t j = 0; j < nc; j++) {
            const gm_alloc *a = &m->allocs[v[j].a];
            if (keep[v[j].a]) continue;
            uint64_t b = a->birth > r0 ? a->birth : r0;
            ev[ne++] = (viz_kv){(b - r0) * 2 + 1, v[j].a};
            if (a->death && a->death <= r1) ev[ne++] = (viz_kv){(a->death - r0) * 2, v[j].a};
        }
        if (viz_radix_sort(ev, ne, (r1 - r0) * 2 + 1)) goto out;
        int64_t cur = 0;
        size_t cb = 0;
        for (size_t j = 0; j < ne; j++) {
            size_t bk = (size_t)((double)(ev[j].key / 2) / width);
            if (bk >= nb) bk = nb - 1;
            for (; cb < bk; cb++) /* buckets without a change hold the sum as it was */
                if (el[cb + 1] < cur) el[cb + 1] = cur;
            cur += (ev[j].key & 1 ? 1 : -1) * (int64_t)m->allocs[ev[j].a].size;
            if (cur > el[bk]) el[bk] = cur;
        }
        for (; cb + 1 < nb; cb++)
            if (el[cb + 1] < cur) el[cb + 1] = cur;
        fprintf(o, ",\"width\":%.6f,\"v\":[", width);
        for (size_t j = 0; j < nb; j++)
            fprintf(o, "%s%lld", j ? "," : "", (long long)el[j]);
        fputc(']', o);
    }
    fputs("}}", o);
    rc = 0;
out:
    free(v), free(keep), free(ev), free(el);
    return rc;
}
