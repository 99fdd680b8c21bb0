/* viz_tensors.c — the allocations the page shows one by one.
 *
 * The timeline's live lists, its bands and the segment maps' blocks refer to rows of one table
 * ("tensors"), so an allocation is written once however many places show it, and a hover shows
 * the same thing wherever it happens: name, size, class, category (and its source), call site,
 * birth and death (seq and NVTX path) and the stack.
 *
 * Stacks are written from where the program called (gpumem's own frames and the CUDA
 * libraries' at the inner end are left out, as in the report's call sites), innermost first,
 * Python frames before native ones when both were recorded, and with the count of outermost
 * frames that are process start-up (beyond `main`: _start, __libc_start_main...), which the page
 * folds into one line. */
#include <stdlib.h>
#include <string.h>

#include "viz/viz.h"

#define VIZ_STACK_MAX 48 /* frames written per stack: deeper ones are rarely read in a tooltip */

long viz_ilist_add(viz_ilist *l, uint64_t key)
{
    uint64_t *hit = u64map_get(&l->idx, key);
    if (hit) return (long)*hit;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 256;
        uint64_t *nk = realloc(l->keys, nc * sizeof *nk);
        if (!nk) return -1;
        l->keys = nk, l->cap = nc;
    }
    if (u64map_put(&l->idx, key, l->n)) return -1;
    l->keys[l->n] = key;
    return (long)l->n++;
}

void viz_ilist_free(viz_ilist *l)
{
    u64map_free(&l->idx);
    free(l->keys);
    memset(l, 0, sizeof *l);
}

long viz_tensor_ref(viz_tensors *t, size_t alloc_index)
{
    if (t->rows.n >= t->cap && !u64map_get(&t->rows.idx, alloc_index)) return -1;
    return viz_ilist_add(&t->rows, alloc_index);
}

void viz_tensors_free(viz_tensors *t)
{
    viz_ilist_free(&t->rows);
}

/* One stack: [[frame, ...], start-up count]; frames index the "frames" list. */
static int write_stack(FILE *o, const gm_model *m, uint32_t stack, viz_ilist *frames)
{
    size_t len = 0, k0 = 0;
    gm_stack_frame(m, stack, 0, &len);
    /* gpumem's own frames and CUDA's (libraries, header wrappers), as the exports leave them out */
    while (k0 < len && gm_frame_internal(m, gm_stack_frame(m, stack, k0, NULL)))
        k0++;
    if (k0 == len) k0 = 0;
    /* native start-up: the frames outward of the outermost native `main` */
    size_t main_at = len;
    for (size_t k = k0; k < len; k++) {
        long fi = gm_stack_frame(m, stack, k, NULL);
        if (fi >= 0 && !m->frames[fi].python && m->frames[fi].function &&
            !strcmp(m->frames[fi].function, "main"))
            main_at = k;
    }
    size_t nstart = 0, nout = 0;
    fputs("[[", o);
    for (int pass = 0; pass < 2; pass++) /* Python frames first, then native ones */
        for (size_t k = k0; k < len; k++) {
            long fi = gm_stack_frame(m, stack, k, NULL);
            int py = fi >= 0 && m->frames[fi].python;
            if (py != !pass) continue;
            if (!py && main_at < len && k > main_at) {
                nstart++;
                continue;
            }
            if (nout == VIZ_STACK_MAX) continue;
            long ix = viz_ilist_add(frames, fi >= 0 ? (uint64_t)fi : UINT64_MAX - 1);
            if (ix < 0) return -1;
            fprintf(o, "%s%ld", nout++ ? "," : "", ix);
        }
    fprintf(o, "],%zu]", nstart);
    return 0;
}

int viz_write_tensors(FILE *o, gm_db *d, const gm_model *m, const viz_classes *c,
                      const viz_categories *k, viz_tensors *t)
{
    viz_ilist sites = {0}, paths = {0}, stacks = {0}, frames = {0};
    sqlite3_stmt *rs = NULL; /* the NVTX range of a death (its free event's) */
    int rc = -1;
    sqlite3_prepare_v2(d->db, "SELECT range, t, kind, flags FROM events WHERE seq = ?", -1, &rs, NULL);
    if (viz_ilist_add(&paths, 0) < 0) goto out; /* path 0: none */
    fputs("\"tensors\":{\"rows\":[", o);
    for (size_t r = 0; r < t->rows.n; r++) {
        size_t i = t->rows.keys[r];
        const gm_alloc *a = &m->allocs[i];
        uint32_t drange = 0;
        if (rs && a->death) {
            sqlite3_reset(rs);
            sqlite3_bind_int64(rs, 1, (int64_t)a->death);
            if (sqlite3_step(rs) == SQLITE_ROW)
                drange = gm_row_range(m, (uint32_t)sqlite3_column_int64(rs, 0), sqlite3_column_int64(rs, 1),
                                      (unsigned)sqlite3_column_int(rs, 2), (unsigned)sqlite3_column_int(rs, 3));
        }
        long si = viz_ilist_add(&sites, a->stack), bp = viz_ilist_add(&paths, a->range),
             dp = viz_ilist_add(&paths, drange), st = viz_ilist_add(&stacks, a->stack);
        if (si < 0 || bp < 0 || dp < 0 || st < 0) goto out;
        fputs(r ? ",[" : "[", o);
        viz_json_str(o, a->name ? gm_str(m, a->name) : "(unnamed)");
        fprintf(o, ",%llu,%ld,%llu,%llu,%ld,%u,%u,%ld,%ld,%ld,%u]", (unsigned long long)a->size, si,
                (unsigned long long)a->birth, (unsigned long long)a->death,
                c->of[i] == UINT32_MAX ? -1L : (long)c->of[i], k->cat[i], k->src[i], bp, dp, st,
                k->phase[i]);
    }
    fputs("],\"sites\":[", o);
    for (size_t s = 0; s < sites.n; s++) {
        char site[512] = "";
        gm_site_desc(m, (uint32_t)sites.keys[s], site, sizeof site);
        if (s) fputc(',', o);
        viz_json_str(o, site);
    }
    fputs("],\"paths\":[", o);
    for (size_t p = 0; p < paths.n; p++) {
        const gm_range *g = paths.keys[p] ? gm_range_of(m, (uint32_t)paths.keys[p]) : NULL;
        if (p) fputc(',', o);
        viz_json_str(o, g && g->path ? g->path : "");
    }
    fputs("],\"stacks\":[", o);
    for (size_t s = 0; s < stacks.n; s++) {
        if (s) fputc(',', o);
        if (write_stack(o, m, (uint32_t)stacks.keys[s], &frames)) goto out;
    }
    fputs("],\"frames\":[", o); /* [desc, 1 for a Python frame] */
    for (size_t f = 0; f < frames.n; f++) {
        char desc[1024];
        long fi = frames.keys[f] == UINT64_MAX - 1 ? -1 : (long)frames.keys[f];
        gm_frame_desc(m, fi, desc, sizeof desc);
        fputs(f ? ",[" : "[", o);
        viz_json_str(o, desc);
        fprintf(o, ",%d]", fi >= 0 && m->frames[fi].python);
    }
    fputs("]}", o);
    rc = 0;
out:
    sqlite3_finalize(rs);
    viz_ilist_free(&sites), viz_ilist_free(&paths), viz_ilist_free(&stacks);
    viz_ilist_free(&frames);
    return rc;
}
