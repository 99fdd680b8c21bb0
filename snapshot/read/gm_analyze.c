/* gm_analyze.c — loads a gpumem database into memory and runs the one sweep every report
 * uses.
 *
 * Design. Reports are sweeps, never quadratic queries: the small tables (strings, modules,
 * frames, stacks, ranges, names, ooms) are loaded whole; then `events` is read once in seq
 * order (its rowid order: a sequential scan, no index) — decoded straight from the table's
 * pages by gm_analyze_pages.c where the file is what the recorder writes, through SQLite
 * otherwise (the two give the same rows; GPUMEM_SWEEP=sql forces SQLite) — while a hash map
 * of live allocations keyed by address pairs frees with allocations. The result is one compact
 * record per allocation (birth, death, size, requested, stack, range, name, the range of its
 * free, and the allocation that died next: 56 bytes) plus running peaks, so "what was live at
 * the peak / at an OOM / at exit" is a filter over that array afterwards, and a pass in time
 * order follows the deaths' links instead of sorting them.
 * Lifetimes are therefore always derived on read, which is also what makes a database from a
 * killed process (no alloc_life rows for what was alive) report correctly.
 *
 * Nothing read is trusted: ids that point nowhere resolve to "?", parents that do not come
 * before their child are ignored (so no cycles), kinds out of range are counted as other.
 */
#include "snapshot/read/addr_map.h"
#include "snapshot/read/gm.h"
#include "snapshot/read/gm_analyze_pages.h"
#include "snapshot/read/gm_devused.h"
#include "snapshot/record/bytemap.h"
#include "snapshot/record/rec.h"

#include <ctype.h>
#include <libiberty/demangle.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char *dup_col(sqlite3_stmt *s, int i) {
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? strdup((const char *)t) : NULL;
}

const char *gm_str(const gm_model *m, uint64_t id) {
    uint64_t *i = u64map_get(&m->str_idx, id);
    return i ? m->strs[*i] : NULL;
}

const gm_range *gm_range_of(const gm_model *m, uint64_t id) {
    uint64_t *i = u64map_get(&m->range_idx, id);
    return i ? &m->ranges[*i] : NULL;
}

uint32_t gm_spans_range(const gm_spans *s, uint32_t range, int64_t t_ns) {
    if (range || !s->n || t_ns < s->at[0]) return range;
    size_t lo = 0, hi = s->n; /* the last span begun at or before t_ns */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->at[mid] <= t_ns) lo = mid;
        else hi = mid;
    }
    return s->range[lo];
}

uint32_t gm_event_range(const gm_model *m, uint32_t range, int64_t t_ns) {
    return gm_spans_range(&m->spans, range, t_ns);
}

uint32_t gm_row_range(const gm_model *m, uint32_t range, int64_t t_ns, unsigned kind, unsigned flags) {
    if (rec_is_workspace_free(kind, flags) || rec_is_host_cache_free(kind, flags)) return 0;
    return gm_event_range(m, range, t_ns);
}

typedef struct se_range {
    int64_t start, end; /* end INT64_MAX: still open when the recording stopped */
    uint32_t id;
} se_range;

static int se_by_start(const void *a, const void *b) {
    const se_range *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int span_add(gm_spans *s, size_t *cap, int64_t at, uint32_t range) {
    if (s->n ? s->range[s->n - 1] == range : range == 0) return 0;
    if (s->n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        int64_t *a = realloc(s->at, c * sizeof *a);
        if (!a) return -1;
        s->at = a;
        uint32_t *r = realloc(s->range, c * sizeof *r);
        if (!r) return -1;
        s->range = r;
        *cap = c;
    }
    s->at[s->n] = at, s->range[s->n++] = range;
    return 0;
}

void gm_spans_free(gm_spans *s) {
    free(s->at), free(s->range);
    *s = (gm_spans){0};
}

/* The start/end ranges as spans of time (gm_spans): at each time a range starts or ends, the
 * range that holds what follows is the one begun last among those open. Ranges taken in the
 * order they began go onto a stack, so its top is always the one begun last; one that ended is
 * dropped when it comes to the top (below the top it hides nothing). A file without the kind
 * column, or out of memory: no spans (phases as the push/pop ranges give them). */
void gm_spans_load(gm_db *d, gm_spans *out) {
    *out = (gm_spans){0};
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db, "SELECT id, start_ns, COALESCE(end_ns, 9223372036854775807) FROM ranges "
                                  "WHERE kind = 1 AND start_ns IS NOT NULL", -1, &s, NULL) != SQLITE_OK)
        return;
    se_range *r = NULL;
    size_t n = 0, cap = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(s, 0), a = sqlite3_column_int64(s, 1), b = sqlite3_column_int64(s, 2);
        if (id <= 0 || id > UINT32_MAX || b <= a) continue; /* not an id events can name; empty */
        if (gm_grow((void **)&r, &cap, n + 1, sizeof *r)) break;
        r[n++] = (se_range){a, b, (uint32_t)id};
    }
    sqlite3_finalize(s);
    int64_t *at = n ? malloc(2 * n * sizeof *at) : NULL;
    size_t *open = n ? malloc(n * sizeof *open) : NULL;
    if (!at || !open) goto out;
    gm_sort(r, n, sizeof *r, se_by_start);
    size_t nat = 0;
    for (size_t i = 0; i < n; i++) {
        at[nat++] = r[i].start;
        if (r[i].end != INT64_MAX) at[nat++] = r[i].end;
    }
    gm_sort(at, nat, sizeof *at, cmp_i64);
    size_t next = 0, nopen = 0, scap = 0;
    for (size_t k = 0; k < nat; k++) {
        if (k && at[k] == at[k - 1]) continue;
        for (; next < n && r[next].start <= at[k]; next++) open[nopen++] = next;
        while (nopen && r[open[nopen - 1]].end <= at[k]) nopen--;
        if (span_add(out, &scap, at[k], nopen ? r[open[nopen - 1]].id : 0) != 0) {
            gm_spans_free(out);
            break;
        }
    }
out:
    free(r), free(at), free(open);
}

static int fail(gm_db *d, char *err, size_t errsz, const char *what) {
    snprintf(err, errsz, "%s: cannot read %s: %s (the file is damaged or not a complete gpumem "
             "database)", d->path, what, sqlite3_errmsg(d->db));
    return -1;
}

/* The events could not be read at all: the sweep's own finding where it has one (SQLite's
 * message was reset by the calls after the scan), else SQLite's. */
static int fail_events(gm_db *d, char *err, size_t errsz) {
    if (!d->damage[0]) return fail(d, err, errsz, "events");
    snprintf(err, errsz, "%s: cannot read events: the recording is damaged: %s", d->path, d->damage);
    return -1;
}

int gm_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *n = realloc(*p, c * elem);
    if (!n) return -1;
    *p = n;
    *cap = c;
    return 0;
}

int gm_cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void gm_huge_pages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1), hi = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (p && hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* ignored where THP is off */
#else
    (void)p, (void)bytes;
#endif
}

/* "step 12", "Step_3", "step12" -> 12; else -1 */
static int64_t step_number(const char *name) {
    if (!name || strncasecmp(name, "step", 4) != 0) return -1;
    const char *p = name + 4;
    while (*p == ' ' || *p == '_' || *p == '-' || *p == '#') p++;
    if (!isdigit((unsigned char)*p)) return -1;
    int64_t v = 0;
    for (; isdigit((unsigned char)*p) && v < (1ll << 50); p++) v = v * 10 + (*p - '0');
    return *p == 0 ? v : -1;
}

static int load_small(gm_db *d, gm_model *m, char *err, size_t errsz) {
    sqlite3_stmt *s;
    size_t cap;
    /* strings */
    if (sqlite3_prepare_v2(d->db, "SELECT id, s FROM strings", -1, &s, NULL) != SQLITE_OK)
        return fail(d, err, errsz, "strings");
    cap = 0;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (gm_grow((void **)&m->strs, &cap, m->nstrs + 1, sizeof *m->strs)) break;
        char *t = dup_col(s, 1);
        m->strs[m->nstrs] = t ? t : strdup("");
        u64map_put(&m->str_idx, (uint64_t)sqlite3_column_int64(s, 0), m->nstrs);
        m->nstrs++;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return fail(d, err, errsz, "strings");
    /* modules */
    if (sqlite3_prepare_v2(d->db, "SELECT id, path, build_id FROM modules ORDER BY id", -1, &s, NULL) != SQLITE_OK)
        return fail(d, err, errsz, "modules");
    cap = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (gm_grow((void **)&m->mods, &cap, m->nmods + 1, sizeof *m->mods)) break;
        m->mods[m->nmods].id = sqlite3_column_int64(s, 0);
        m->mods[m->nmods].path = dup_col(s, 1);
        m->mods[m->nmods].build_id = dup_col(s, 2);
        m->nmods++;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return fail(d, err, errsz, "modules");
    u64map mod_idx = {0};
    for (size_t i = 0; i < m->nmods; i++) u64map_put(&mod_idx, (uint64_t)m->mods[i].id, i + 1);
    /* frames (frames.python: schema 1.3; older files have native frames only) */
    if (sqlite3_prepare_v2(d->db, "SELECT id, module, offset, function, file, line, symbolized, python FROM frames",
                           -1, &s, NULL) != SQLITE_OK &&
        sqlite3_prepare_v2(d->db, "SELECT id, module, offset, function, file, line, symbolized, NULL FROM frames",
                           -1, &s, NULL) != SQLITE_OK) {
        u64map_free(&mod_idx);
        return fail(d, err, errsz, "frames");
    }
    cap = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (gm_grow((void **)&m->frames, &cap, m->nframes + 1, sizeof *m->frames)) break;
        gm_frame *f = &m->frames[m->nframes];
        memset(f, 0, sizeof *f);
        f->id = sqlite3_column_int64(s, 0);
        uint64_t *mi = u64map_get(&mod_idx, (uint64_t)sqlite3_column_int64(s, 1));
        f->module = mi ? (uint32_t)*mi : 0;
        f->offset = (uint64_t)sqlite3_column_int64(s, 2);
        f->function = dup_col(s, 3);
        f->file = dup_col(s, 4);
        int64_t line = sqlite3_column_int64(s, 5);
        f->line = line > 0 && line < UINT32_MAX ? (uint32_t)line : 0;
        f->symbolized = sqlite3_column_int(s, 6) != 0;
        f->python = sqlite3_column_int(s, 7) == 1;
        u64map_put(&m->frame_idx, (uint64_t)sqlite3_column_int64(s, 0), m->nframes);
        m->nframes++;
    }
    sqlite3_finalize(s);
    u64map_free(&mod_idx);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return fail(d, err, errsz, "frames");
    /* stacks: rows come in (stack, depth) order (the primary key) */
    if (sqlite3_prepare_v2(d->db, "SELECT stack, depth, frame FROM stacks ORDER BY stack, depth",
                           -1, &s, NULL) != SQLITE_OK)
        return fail(d, err, errsz, "stacks");
    size_t fcap = 0, scap = 0;
    int64_t cur = INT64_MIN;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(s, 0);
        uint64_t *fi = u64map_get(&m->frame_idx, (uint64_t)sqlite3_column_int64(s, 2));
        if (id != cur) {
            if (gm_grow((void **)&m->stack_off, &scap, 2 * (m->nstacks + 1), sizeof *m->stack_off)) break;
            m->stack_off[2 * m->nstacks] = m->nstack_frames;
            m->stack_off[2 * m->nstacks + 1] = 0;
            u64map_put(&m->stack_idx, (uint64_t)id, m->nstacks);
            m->nstacks++;
            cur = id;
        }
        if (gm_grow((void **)&m->stack_frames, &fcap, m->nstack_frames + 1, sizeof *m->stack_frames)) break;
        m->stack_frames[m->nstack_frames++] = fi ? (uint32_t)*fi : UINT32_MAX;
        m->stack_off[2 * (m->nstacks - 1) + 1]++;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return fail(d, err, errsz, "stacks");
    /* ranges, in id order so a parent (always pushed first) is known before its children */
    if (sqlite3_prepare_v2(d->db, "SELECT id, parent, name, path FROM ranges ORDER BY id", -1, &s, NULL) != SQLITE_OK)
        return fail(d, err, errsz, "ranges");
    cap = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (gm_grow((void **)&m->ranges, &cap, m->nranges + 1, sizeof *m->ranges)) break;
        gm_range *r = &m->ranges[m->nranges];
        r->id = sqlite3_column_int64(s, 0);
        r->parent = sqlite3_column_int64(s, 1);
        r->path = dup_col(s, 3);
        r->step = step_number(gm_str(m, (uint64_t)sqlite3_column_int64(s, 2)));
        if (r->step < 0 && r->parent && r->parent < r->id) {
            const gm_range *p = gm_range_of(m, (uint64_t)r->parent);
            if (p) r->step = p->step;
        }
        u64map_put(&m->range_idx, (uint64_t)r->id, m->nranges);
        m->nranges++;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return fail(d, err, errsz, "ranges");
    gm_spans_load(d, &m->spans);
    /* ooms (optional table; its name column is new in 1.1) */
    if (gm_table_exists(d, "ooms")) {
        static const char *const q[2] = {
            "SELECT seq, device, requested, allocated, reserved, free_cached, largest_free, "
            "device_free, device_total, limit_bytes, name FROM ooms ORDER BY seq",
            "SELECT seq, device, requested, allocated, reserved, free_cached, largest_free, "
            "device_free, device_total, limit_bytes, 0 FROM ooms ORDER BY seq"};
        int ok = sqlite3_prepare_v2(d->db, q[0], -1, &s, NULL) == SQLITE_OK ||
                 sqlite3_prepare_v2(d->db, q[1], -1, &s, NULL) == SQLITE_OK;
        cap = 0;
        while (ok && sqlite3_step(s) == SQLITE_ROW) {
            if (gm_grow((void **)&m->ooms, &cap, m->nooms + 1, sizeof *m->ooms)) break;
            gm_oom *o = &m->ooms[m->nooms++];
            memset(o, 0, sizeof *o);
            o->seq = (uint64_t)sqlite3_column_int64(s, 0);
            o->device = sqlite3_column_int(s, 1);
            o->requested = (uint64_t)sqlite3_column_int64(s, 2);
            o->allocated = (uint64_t)sqlite3_column_int64(s, 3);
            o->reserved = (uint64_t)sqlite3_column_int64(s, 4);
            o->free_cached = (uint64_t)sqlite3_column_int64(s, 5);
            o->largest_free = (uint64_t)sqlite3_column_int64(s, 6);
            o->device_free = (uint64_t)sqlite3_column_int64(s, 7);
            o->device_total = (uint64_t)sqlite3_column_int64(s, 8);
            o->limit = gm_oom_limit_col(d, s, 9);
            int64_t nm = sqlite3_column_int64(s, 10);
            o->name = nm > 0 && gm_str(m, (uint64_t)nm) ? (uint64_t)nm : 0; /* as a name_apply's */
        }
        if (ok) sqlite3_finalize(s);
    }
    /* inlined calls per frame (table new in 1.1; written by gm_symbolize) */
    if (gm_table_exists(d, "inlines") &&
        sqlite3_prepare_v2(d->db, "SELECT frame, depth, function, file, line FROM inlines "
                                  "ORDER BY frame, depth", -1, &s, NULL) == SQLITE_OK) {
        while (sqlite3_step(s) == SQLITE_ROW) {
            uint64_t *fi = u64map_get(&m->frame_idx, (uint64_t)sqlite3_column_int64(s, 0));
            if (!fi) continue;
            gm_frame *f = &m->frames[*fi];
            if (f->ninl >= 64) continue; /* deeper than any real inline chain: damaged */
            gm_inline *n = realloc(f->inl, (f->ninl + 1) * sizeof *n);
            if (!n) break;
            f->inl = n;
            int64_t line = sqlite3_column_int64(s, 4);
            n[f->ninl++] = (gm_inline){dup_col(s, 2), dup_col(s, 3),
                                       line > 0 && line < UINT32_MAX ? (uint32_t)line : 0};
        }
        sqlite3_finalize(s);
    }
    return 0;
}

static int is_alloc(unsigned k) {
    return k == REC_ALLOC || k == REC_ALLOC_ASYNC || k == REC_HOST_ALLOC || k == REC_MANAGED_ALLOC;
}
static int is_free(unsigned k) {
    return k == REC_FREE || k == REC_FREE_ASYNC || k == REC_HOST_FREE || k == REC_MANAGED_FREE;
}

static uint64_t *sum_for(gm_model *m, unsigned kind) {
    if (kind == REC_HOST_ALLOC) return &m->host;
    if (kind == REC_MANAGED_ALLOC) return &m->managed;
    return &m->allocated;
}

/* A private pool's allocation, free (its block's bytes) or segment change, in one view. */
static void pools_alloc(gm_pools *p, uint64_t size) {
    p->allocs++;
    p->alloc_bytes += size;
    p->allocated += size;
    if (p->allocated > p->peak_allocated) p->peak_allocated = p->allocated;
}
static void pools_free(gm_pools *p, uint64_t size) { p->allocated -= size < p->allocated ? size : p->allocated; }

/* An allocation's end: its bytes off the sums, a device one's from *allocated and *requested
 * (the model's in sweep_row, sweep_rows' locals: HOT_SUMS), host and managed ones from the
 * model's; a private pool's from the pools. */
/* A device allocation passed through as its own segment (GM_ALLOC_OWN_SEGMENT). */
static inline int is_own_segment(unsigned kind, unsigned flags) {
    return rec_is_own_segment(kind, flags);
}

/* A device's reserved bytes grown (map) or shrunk by size at seq, in figures devs (NULL: none
 * kept). Only segment rows and allocations that are their own segment come here: the slow rows. */
static void dev_reserved(gm_dev_figs *devs, int dev, int map, uint64_t size, uint64_t seq) {
    if (!devs || dev < 0 || dev >= GM_DEVICES) return;
    gm_dev_figs *f = &devs[dev];
    if (!map) {
        f->reserved -= size < f->reserved ? size : f->reserved;
        return;
    }
    f->reserved += size;
    if (f->reserved > f->peak_reserved) f->peak_reserved = f->reserved, f->peak_reserved_seq = seq;
}

/* Device dev's device-wide peak (gm_dev_figs.peak_device) after its reserve or its VMM grew. */
static void dev_device_peak(gm_model *m, int dev, uint64_t seq) {
    if (!m->devs || dev < 0 || dev >= GM_DEVICES) return;
    gm_dev_figs *f = &m->devs[dev];
    if (f->reserved + f->vmm <= f->peak_device) return;
    f->peak_device = f->reserved + f->vmm, f->peak_device_seq = seq, f->peak_device_vmm = f->vmm;
    f->peak_device_torch = m->torch.devs ? m->torch.devs[dev].reserved : 0;
}

static inline void hot_end(gm_model *m, const gm_alloc *a, uint64_t *allocated, uint64_t *requested) {
    if (a->kind == REC_HOST_ALLOC) {
        m->host -= a->size < m->host ? a->size : m->host;
    } else if (a->kind == REC_MANAGED_ALLOC) {
        m->managed -= a->size < m->managed ? a->size : m->managed;
    } else {
        *allocated -= a->size < *allocated ? a->size : *allocated;
        *requested -= a->requested < *requested ? a->requested : *requested;
    }
    if (a->flags & GM_ALLOC_PRIVATE) pools_free(&m->pools, a->size);
    if (a->flags & GM_ALLOC_OWN_SEGMENT) {
        m->reserved -= a->size < m->reserved ? a->size : m->reserved;
        dev_reserved(m->devs, a->device, 0, a->size, 0);
    }
}

static void pools_segment(gm_pools *p, int map, uint64_t size) {
    if (map) {
        p->segments++;
        p->reserved += size;
        if (p->reserved > p->peak_reserved) p->peak_reserved = p->reserved;
    } else {
        p->reserved -= size < p->reserved ? size : p->reserved;
    }
}

/* The entry of step `step`, made at its first event (seq: the sweep meets events in seq order,
 * so that is where the step starts). */
static gm_step *step_in(gm_step **steps, size_t *n, u64map *idx, int64_t step, uint64_t seq, size_t *cap) {
    uint64_t *i = u64map_get(idx, (uint64_t)step);
    if (i) return &(*steps)[*i];
    if (gm_grow((void **)steps, cap, *n + 1, sizeof **steps)) return NULL;
    gm_step *s = &(*steps)[*n];
    memset(s, 0, sizeof *s);
    s->step = step;
    s->start_seq = seq;
    u64map_put(idx, (uint64_t)step, (*n)++);
    return s;
}

static gm_step *step_entry(gm_model *m, u64map *idx, int64_t step, uint64_t seq, size_t *cap) {
    return step_in(&m->steps, &m->nsteps, idx, step, seq, cap);
}

/* An event in no step, after step st's last event (st NULL: none, or a range of no step came
 * between): what it left allocated is st's end (*st_alloc) while it gives back what the step
 * made (the loop's optimizer.zero_grad(), its loss let go: what memory_allocated() says at the
 * end of the iteration, the last one's too), until one raises it (the next batch's input, an
 * evaluation after the loop) or gives back what was made before the step (the loop's input
 * rebound, the program's teardown after its last step): no longer the step's. born: the birth
 * of the allocation the event freed (UINT64_MAX: it freed none). *trail: 1 until then. */
static inline void step_trail(const gm_step *st, uint64_t *st_alloc, uint64_t allocated, uint64_t born, int *trail) {
    if (!st || !*trail) return;
    if (allocated > *st_alloc || born < st->start_seq) *trail = 0;
    else *st_alloc = allocated;
}

int gm_model_load_tables(gm_db *d, gm_model *m, char *err, size_t errsz) {
    memset(m, 0, sizeof *m);
    return load_small(d, m, err, errsz);
}

/* A names row: birth is the allocation it names (0: a file from before names.birth, or no
 * allocation was live at addr; then the one live at addr at seq is meant). */
typedef struct name_ev { uint64_t seq, addr, name, birth; } name_ev;

/* Room for up to `rows` items of an array the sweep fills an item at a time (each item is an
 * event row at most), so it is written once and never moved. Where it is large its pages are
 * transparent huge pages: the allocations written into fresh 4 KiB pages (48 bytes an allocation
 * then) took a page fault every 85 allocations, and a TLB miss on every later pass: a quarter of
 * a long recording's report. Only the pages written become resident. Failing is harmless: the
 * sweep grows the array as it goes. */
static void sweep_reserve(void **p, size_t *cap, uint64_t rows, size_t elem) {
    if (rows < 4096 || rows > SIZE_MAX / elem || rows <= *cap) return;
    size_t bytes = (size_t)rows * elem;
    void *a = realloc(*p, bytes);
    if (!a) return;
    *p = a, *cap = (size_t)rows;
    gm_huge_pages(a, bytes);
}

/* The sweep's state between rows (gm_model_load). */
typedef struct sweep {
    gm_model *m;
    gm_db *d;
    char *err;
    size_t errsz;
    int progress, oom;
    name_ev *names;
    size_t nnames, ni;
    gm_du_sweep *du;
    addr_map live; /* the live allocations by address */
    u64map step_idx;
    size_t step_cap;
    u64map tlive, tstep_idx; /* the torch view's live tensors and steps */
    size_t tstep_cap;
    uint32_t last_range;
    int64_t last_step;
    gm_step *last_st; /* the entry of last_step (NULL: none) */
    /* a step ends after its last event and the frees outside every step that follow it, until
     * something outside a step raises the allocated bytes again (step_trail): trail is 1 while
     * that has not happened since last_st's last event; the torch view's the same, its step by
     * index (tlast_st, -1: none) */
    int trail, ttrail;
    long tlast_st;
    size_t oi;        /* ooms are sorted by seq, like the events */
    size_t last_death; /* the last allocation to die, index + 1 (0: none yet) */
} sweep;

/* A tensor's bytes off its device's figures (its free, or its completion without one). */
static void torch_dev_free(gm_torch_view *v, const gm_alloc *a) {
    if (!v->devs || a->device < 0) return;
    gm_dev_figs *f = &v->devs[a->device];
    f->allocated -= a->size < f->allocated ? a->size : f->allocated;
    f->requested -= a->requested < f->requested ? a->requested : f->requested;
}

/* One event of PyTorch's view (kinds 31-35), by its allocator's rules. */
static int torch_row(sweep *w, uint64_t seq, unsigned kind, unsigned flags, uint64_t addr, uint64_t size,
                     uint32_t stack, uint32_t range, int dev, uint64_t requested) {
    gm_model *m = w->m;
    gm_torch_view *v = &m->torch;
    v->present = 1;
    /* PyTorch's statistics are per device (memory_stats(d)): the same counts on its own figures */
    gm_dev_figs *f = v->devs && dev >= 0 && dev < GM_DEVICES ? &v->devs[dev] : NULL;
    uint64_t born = UINT64_MAX; /* a free's tensor's birth (step_trail) */
    if (kind == REC_TORCH_ALLOC) {
        uint64_t old;
        if (u64map_del(&w->tlive, addr, &old)) v->allocs[old].death = seq; /* its free was not in the history */
        if (gm_grow((void **)&v->allocs, &v->allocs_cap, v->nallocs + 1, sizeof *v->allocs)) {
            snprintf(w->err, w->errsz, "%s: out of memory after %zu tensors", w->d->path, v->nallocs);
            w->oom = 1;
            return -1;
        }
        int priv = (flags & REC_F_PRIVATE_POOL) != 0;
        v->allocs[v->nallocs] = (gm_alloc){seq, 0, size, requested, stack, range, 0, (uint8_t)kind,
                                           (int8_t)(dev > 0 ? dev : 0), priv ? GM_ALLOC_PRIVATE : 0, 0, 0};
        u64map_put(&w->tlive, addr, v->nallocs++);
        v->allocated += size;
        v->requested += requested;
        if (f) f->allocated += size, f->requested += requested;
        if (priv) pools_alloc(&v->pools, size);
    } else if (kind == REC_TORCH_FREE || kind == REC_TORCH_FREE_COMPLETED) {
        uint64_t *ai = u64map_get(&w->tlive, addr);
        if (!ai) return 0;
        gm_alloc *a = &v->allocs[*ai];
        born = a->birth;
        if (rec_is_workspace_free(kind, flags)) a->flags |= GM_ALLOC_WORKSPACE;
        if (kind == REC_TORCH_FREE) {
            /* the statistics drop when the tensor is freed; the block stays the tensor's until
             * its free completes */
            a->death_range = range;
            v->allocated -= a->size < v->allocated ? a->size : v->allocated;
            v->requested -= a->requested < v->requested ? a->requested : v->requested;
            torch_dev_free(v, a);
            if (a->flags & GM_ALLOC_PRIVATE) pools_free(&v->pools, a->size);
            a->flags |= GM_ALLOC_FREED;
        } else {
            if (!(a->flags & GM_ALLOC_FREED)) { /* completed without a request in the history */
                v->allocated -= a->size < v->allocated ? a->size : v->allocated;
                v->requested -= a->requested < v->requested ? a->requested : v->requested;
                torch_dev_free(v, a);
                if (a->flags & GM_ALLOC_PRIVATE) pools_free(&v->pools, a->size);
            }
            a->flags &= (uint8_t)~GM_ALLOC_FREED;
            if (!a->death_range) a->death_range = range;
            a->death = seq;
            u64map_del(&w->tlive, addr, NULL);
        }
    } else if (kind == REC_TORCH_SEG_MAP) {
        v->reserved += size;
        dev_reserved(v->devs, dev, 1, size, seq);
        if (flags & REC_F_PRIVATE_POOL) pools_segment(&v->pools, 1, size);
        uint64_t *ai = addr_map_get(&w->live, addr); /* the cudaMalloc that served the segment */
        if (ai) m->allocs[*ai].flags |= GM_ALLOC_FW_SEGMENT;
    } else if (kind == REC_TORCH_SEG_UNMAP) {
        v->reserved -= size < v->reserved ? size : v->reserved;
        dev_reserved(v->devs, dev, 0, size, seq);
        if (flags & REC_F_PRIVATE_POOL) pools_segment(&v->pools, 0, size);
    }
    if (v->allocated > v->peak_allocated) v->peak_allocated = v->allocated, v->peak_allocated_seq = seq;
    if (v->requested > v->peak_requested) v->peak_requested = v->requested, v->peak_requested_seq = seq;
    if (v->reserved > v->peak_reserved)
        v->peak_reserved = v->reserved, v->peak_reserved_seq = seq, v->pools.reserved_at_peak = v->pools.reserved;
    if (f && f->allocated > f->peak_allocated) f->peak_allocated = f->allocated, f->peak_allocated_seq = seq;
    if (f && f->requested > f->peak_requested) f->peak_requested = f->requested, f->peak_requested_seq = seq;
    if (range && kind <= REC_TORCH_FREE_COMPLETED) {
        const gm_range *r = gm_range_of(m, range);
        gm_step *st = r && r->step >= 0 ? step_in(&v->steps, &v->nsteps, &w->tstep_idx, r->step, seq, &w->tstep_cap) : NULL;
        if (st) st->end_allocated = v->allocated, st->end_seq = seq;
        w->tlast_st = st ? st - v->steps : -1;
        w->ttrail = 1;
    } else if (kind <= REC_TORCH_FREE_COMPLETED && w->tlast_st >= 0) {
        step_trail(&v->steps[w->tlast_st], &v->steps[w->tlast_st].end_allocated, v->allocated, born, &w->ttrail);
    }
    return 0;
}

/* An allocation through the framework's hook (gpumem as PyTorch's allocator): PyTorch's own
 * requests, counted apart from the libraries' (cuBLAS's handles) beside them. */
static void framework_alloc(gm_model *m, uint64_t seq, uint64_t size, uint64_t requested, int dev) {
    gm_torch_view *v = &m->torch;
    v->present = 2;
    v->allocated += size;
    v->requested += requested;
    if (v->allocated > v->peak_allocated) v->peak_allocated = v->allocated, v->peak_allocated_seq = seq;
    if (v->requested > v->peak_requested) v->peak_requested = v->requested, v->peak_requested_seq = seq;
    /* per device, as PyTorch counts them (memory_stats(d)): the sums add the devices together */
    if (!v->devs || dev < 0 || dev >= GM_DEVICES) return;
    gm_dev_figs *f = &v->devs[dev];
    f->allocated += size, f->requested += requested;
    if (f->allocated > f->peak_allocated) f->peak_allocated = f->allocated, f->peak_allocated_seq = seq;
    if (f->requested > f->peak_requested) f->peak_requested = f->requested, f->peak_requested_seq = seq;
}

/* A hook's allocation freed (torch.present == 2): off PyTorch's sums and its device's. */
static void framework_free(gm_model *m, const gm_alloc *a) {
    gm_torch_view *v = &m->torch;
    v->allocated -= a->size < v->allocated ? a->size : v->allocated;
    v->requested -= a->requested < v->requested ? a->requested : v->requested;
    torch_dev_free(v, a);
}

long gm_alloc_by_id(const gm_model *m, uint64_t id) {
    size_t lo = 0, hi = m->nallocs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->allocs[mid].birth < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < m->nallocs && m->allocs[lo].birth == id ? (long)lo : -1;
}

/* A name given at its seq, before the events after it: to the allocation it names by birth
 * (the allocations are in birth order), else to the one live at its address then. */
static void name_apply(sweep *w, const name_ev *n) {
    gm_model *m = w->m;
    /* a name whose string is not in `strings` (a damaged or edited file) names nothing: every
     * reader may then take a.name != 0 to mean gm_str gives a string */
    if (n->name > UINT32_MAX || !gm_str(m, n->name)) return;
    if (n->birth) {
        long i = gm_alloc_by_id(m, n->birth);
        if (i >= 0) {
            m->allocs[i].name = (uint32_t)n->name;
        } else { /* a tensor of PyTorch's view (the merge names them by birth too) */
            gm_model tv = gm_model_torch_view(m);
            i = gm_alloc_by_id(&tv, n->birth);
            if (i >= 0) m->torch.allocs[i].name = (uint32_t)n->name;
        }
        return;
    }
    /* a tensor of PyTorch's view first: its first tensor in a segment starts where the
     * segment does (the merged history's names carry no birth) */
    uint64_t *ti = u64map_get(&w->tlive, n->addr);
    uint64_t *ai = ti ? NULL : addr_map_get(&w->live, n->addr);
    if (ti) m->torch.allocs[*ti].name = (uint32_t)n->name;
    else if (ai) m->allocs[*ai].name = (uint32_t)n->name;
}

/* Allocation i died at the row being swept: linked after the last one to die (the list is
 * dropped for good, the readers ordering deaths themselves, where an index does not fit). */
/* Allocation i died next: linked after the last one to die (gm_model.deaths_linked), the list's
 * state (linked, last_death) where the caller keeps it (sweep_rows: in locals over a leaf's rows) */
/* The GM_DEATH_MARK-th death since the last mark: allocation i marked. Without memory the mark
 * is left out, and gm_first_death_after, which counts them, uses none. */
static __attribute__((noinline)) void death_mark(gm_model *m, size_t i) {
    if (gm_grow((void **)&m->death_marks, &m->death_marks_cap, m->ndeath_marks + 1, sizeof *m->death_marks) == 0)
        m->death_marks[m->ndeath_marks++] = (uint32_t)i;
}

static inline __attribute__((always_inline)) void link_death(gm_model *m, gm_alloc *allocs, int *linked,
                                                             size_t *last_death, size_t *ndeaths, size_t i) {
    if (i >= UINT32_MAX) *linked = 0;
    if (!*linked) return;
    if (*last_death) allocs[*last_death - 1].next_death = (uint32_t)(i + 1);
    else m->first_death = i + 1;
    *last_death = i + 1;
    if (!(++*ndeaths & (GM_DEATH_MARK - 1))) death_mark(m, i);
}

static inline void death_note(sweep *w, size_t i) {
    link_death(w->m, w->m->allocs, &w->m->deaths_linked, &w->last_death, &w->m->ndeaths, i);
}

int gm_first_death_after(const gm_model *m, uint64_t seq, size_t *first, size_t *after) {
    if (!m->deaths_linked || m->ndeath_marks != m->ndeaths / GM_DEATH_MARK) return -1;
    /* the marks' deaths are in seq order, as the list's: the last at or before seq */
    size_t lo = 0, hi = m->ndeath_marks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->allocs[m->death_marks[mid]].death <= seq) lo = mid + 1;
        else hi = mid;
    }
    size_t j = lo ? (size_t)m->death_marks[lo - 1] + 1 : m->first_death;
    size_t n = lo ? m->ndeaths - lo * GM_DEATH_MARK + 1 : m->ndeaths;
    for (; j && m->allocs[j - 1].death <= seq; n--)
        j = m->allocs[j - 1].next_death;
    *first = j, *after = j ? n : 0;
    return 0;
}

/* A new allocation at addr, as the next one: room for it, and the one still live at addr (handed
 * out again without a free in between) ended here, its bytes off *allocated and *requested
 * (hot_end). Its index is m->nallocs; the caller fills and counts it. -1: out of memory (w->err
 * says so, w->oom set). */
static __attribute__((noinline, cold)) int alloc_oom(sweep *w) {
    snprintf(w->err, w->errsz, "%s: out of memory after %zu allocations", w->d->path, w->m->nallocs);
    w->oom = 1;
    return -1;
}
static inline __attribute__((always_inline)) int alloc_open(sweep *w, uint64_t addr, uint64_t seq,
                                                            uint64_t *allocated, uint64_t *requested) {
    gm_model *m = w->m;
    if (m->nallocs == m->allocs_cap &&
        gm_grow((void **)&m->allocs, &m->allocs_cap, m->nallocs + 1, sizeof *m->allocs))
        return alloc_oom(w);
    uint64_t old;
    if (addr_map_swap(&w->live, addr, m->nallocs, &old) == 1) {
        gm_alloc *o = &m->allocs[old];
        o->death = seq;
        death_note(w, old);
        hot_end(m, o, allocated, requested);
        m->unmatched_frees++;
    }
    return 0;
}

/* fn(m, k, f) on the frames of a stack, innermost first (k its depth; f NULL where unknown),
 * until it answers non-zero: that answer, or 0 (none, or no stack). */
static int stack_ask(const gm_model *m, uint32_t stack, int (*fn)(const gm_model *, size_t, const gm_frame *)) {
    size_t len = 0;
    if (!stack) return 0;
    gm_stack_frame(m, stack, 0, &len);
    for (size_t k = 0; k < len; k++) {
        long fi = gm_stack_frame(m, stack, k, NULL);
        int r = fn(m, k, fi >= 0 ? &m->frames[fi] : NULL);
        if (r) return r;
    }
    return 0;
}

/* Whether a free's stack is gpumem's hooks emptying PyTorch's pinned host cache at exit: a
 * Python frame of GM_HOST_CACHE_FN in gpumem's module. How recordings made before the free's
 * flag (REC_F_HOST_CACHE) are read; that flag needs no stack. */
static int host_cache_frame(const gm_model *m, size_t k, const gm_frame *f) {
    (void)m, (void)k;
    return f && f->python && f->function && strcmp(f->function, GM_HOST_CACHE_FN) == 0 && f->file &&
           strstr(f->file, "gpumem");
}
static int host_cache_free(const gm_model *m, uint32_t stack) { return stack_ask(m, stack, host_cache_frame) == 1; }

/* Whether a device block's stack says cuBLAS made it for one of PyTorch's handles
 * (GM_ALLOC_CUBLAS_HANDLE, gm.h): the innermost frame in a libcublas* object, one in a
 * libtorch_cuda* object above it. */
static int torch_cublas_frame(const gm_model *m, size_t k, const gm_frame *f) {
    const char *path = f && !f->python && f->module && f->module <= m->nmods ? m->mods[f->module - 1].path : NULL;
    const char *slash = path ? strrchr(path, '/') : NULL, *base = slash ? slash + 1 : path;
    if (k == 0) return base && strncmp(base, "libcublas", 9) == 0 ? 0 : -1;
    return base && strncmp(base, "libtorch_cuda", 13) == 0;
}
static int torch_cublas_block(const gm_model *m, uint32_t stack) { return stack_ask(m, stack, torch_cublas_frame) == 1; }

/* One events row, in seq order. Inlined into the loop over a leaf's rows (sweep_rows): the call
 * of ten arguments was a tenth of the sweep's instructions. */
static inline __attribute__((always_inline)) int sweep_row(sweep *w, uint64_t seq, unsigned kind, unsigned flags,
                                                           uint64_t addr, uint64_t size, uint32_t stack,
                                                           uint32_t range, int dev, uint64_t requested) {
    gm_model *m = w->m;
    int device = is_alloc(kind) && dev > 0 ? dev : 0;
    uint64_t born = UINT64_MAX; /* a free's allocation's birth (step_trail) */
    if (!is_alloc(kind) && kind != REC_TORCH_ALLOC) requested = 0;
    m->events++;
    if (seq > m->max_seq) m->max_seq = seq;
    m->count_kind[kind < 64 ? kind : 0]++;
    /* the cache flags' bits are other flags on other kinds (an OOM's, an interior free's) */
    m->cache_hits += (uint64_t)rec_is_cache_hit(kind, flags);
    m->cache_misses += (uint64_t)rec_is_cache_miss(kind, flags);
    for (; w->ni < w->nnames && w->names[w->ni].seq < seq; w->ni++) name_apply(w, &w->names[w->ni]);
    if (kind >= REC_TORCH_ALLOC && kind <= REC_TORCH_SEG_UNMAP) {
        if (torch_row(w, seq, kind, flags, addr, size, stack, range, dev, requested) != 0) return -1;
    } else if (is_alloc(kind)) {
        if (alloc_open(w, addr, seq, &m->allocated, &m->requested) != 0) return -1;
        gm_alloc *a = &m->allocs[m->nallocs++];
        /* host and managed allocations too: the bits are the device allocations' (rec.h) */
        int fw = rec_is_framework_alloc(kind, flags), priv = rec_is_private_pool(kind, flags);
        int own = is_own_segment(kind, flags);
        *a = (gm_alloc){seq, 0, size, requested, stack, range, 0, (uint8_t)kind, (int8_t)device,
                        (uint8_t)((fw ? GM_ALLOC_FRAMEWORK : 0) | (priv ? GM_ALLOC_PRIVATE : 0) |
                                  (own ? GM_ALLOC_OWN_SEGMENT : 0)),
                        0, 0};
        if (own) m->reserved += size, dev_reserved(m->devs, device, 1, size, seq), dev_device_peak(m, device, seq);
        if (priv) pools_alloc(&m->pools, size);
        if (rec_is_graph_node(kind, flags)) m->graph_nodes++, m->graph_node_bytes += size;
        uint64_t *sum = sum_for(m, kind);
        *sum += size;
        if (sum == &m->allocated) m->requested += requested;
        if (fw && !m->torch.allocs) framework_alloc(m, seq, size, requested, device);
    } else if (is_free(kind)) {
        uint64_t ai;
        if (addr_map_del(&w->live, addr, &ai)) {
            gm_alloc *a = &m->allocs[ai];
            born = a->birth;
            a->death = seq;
            a->death_range = range;
            /* the recorder's flag; before it, the stack (empty with GPUMEM_STACKS=0) */
            if (rec_is_host_cache_free(kind, flags) || (kind == REC_HOST_FREE && host_cache_free(m, stack)))
                a->flags |= GM_ALLOC_HOST_CACHE;
            else if (rec_is_workspace_free(kind, flags))
                a->flags |= GM_ALLOC_WORKSPACE;
            death_note(w, ai);
            hot_end(m, a, &m->allocated, &m->requested);
            if ((a->flags & GM_ALLOC_FRAMEWORK) && m->torch.present == 2) framework_free(m, a);
        } else {
            m->unmatched_frees++;
        }
    } else if (kind == REC_OOM) {
        for (; w->oi < m->nooms && m->ooms[w->oi].seq < seq; w->oi++) {}
        if (w->oi < m->nooms && m->ooms[w->oi].seq == seq) {
            gm_oom *o = &m->ooms[w->oi];
            o->range = range, o->stack = stack, o->fraction = (flags & REC_F_OOM_FRACTION) != 0;
            o->limit_flags = flags & (REC_F_OOM_FRACTION | REC_F_OOM_KEY);
        }
    } else if (kind == REC_SEG_MAP || kind == REC_DRIVER_ALLOC) {
        m->have_segments = 1;
        m->reserved += size;
        dev_reserved(m->devs, dev, 1, size, seq);
        dev_device_peak(m, dev, seq);
        if (flags & REC_F_PRIVATE_POOL) pools_segment(&m->pools, 1, size);
    } else if (kind == REC_SEG_UNMAP || kind == REC_DRIVER_FREE) {
        m->have_segments = 1;
        m->reserved -= size < m->reserved ? size : m->reserved;
        dev_reserved(m->devs, dev, 0, size, seq);
        if (flags & REC_F_PRIVATE_POOL) pools_segment(&m->pools, 0, size);
    } else if (kind == REC_VMM_MAP) {
        /* the program's own virtual memory (PyTorch's expandable segments): on the device, but
         * not one of the allocator's blocks, nor an allocation with a life the views can show:
         * held outside the allocator, as the device account has it, and in the device-wide peak
         * only (it was in allocated, requested and reserved once, and the summary's peaks then
         * disagreed with every view built from the allocations) */
        m->vmm += size;
        if (m->vmm > m->peak_vmm) m->peak_vmm = m->vmm;
        if (m->devs && dev >= 0 && dev < GM_DEVICES) m->devs[dev].vmm += size, dev_device_peak(m, dev, seq);
    } else if (kind == REC_VMM_UNMAP) {
        m->vmm -= size < m->vmm ? size : m->vmm;
        if (m->devs && dev >= 0 && dev < GM_DEVICES) {
            gm_dev_figs *f = &m->devs[dev];
            f->vmm -= size < f->vmm ? size : f->vmm;
        }
    }
    if (m->allocated > m->peak_allocated) {
        m->peak_allocated = m->allocated;
        m->peak_allocated_seq = seq;
    }
    if (m->requested > m->peak_requested) {
        m->peak_requested = m->requested;
        m->peak_requested_seq = seq;
    }
    if (m->reserved > m->peak_reserved) {
        m->peak_reserved = m->reserved;
        m->peak_reserved_seq = seq;
        m->pools.reserved_at_peak = m->pools.reserved;
    }
    if (m->reserved + m->vmm > m->peak_device) {
        m->peak_device = m->reserved + m->vmm, m->peak_device_seq = seq;
        m->peak_device_vmm = m->vmm, m->peak_device_torch = m->torch.reserved;
    }
    if (m->allocated + m->vmm > m->peak_held) {
        m->peak_held = m->allocated + m->vmm, m->peak_held_seq = seq;
        m->peak_held_vmm = m->vmm, m->peak_held_torch = m->torch.reserved;
    }
    if (m->host > m->peak_host) m->peak_host = m->host;
    if (range) {
        /* consecutive events mostly share a range: remember the last lookup and its step */
        if (range != w->last_range) {
            const gm_range *r = gm_range_of(m, range);
            w->last_range = range;
            w->last_step = r && r->step >= 0 ? r->step : -1;
            w->last_st = w->last_step >= 0 ? step_entry(m, &w->step_idx, w->last_step, seq, &w->step_cap) : NULL;
        }
        if (w->last_st) {
            w->last_st->end_allocated = m->allocated;
            w->last_st->end_seq = seq;
        }
        w->trail = 1;
    } else if (w->last_st) {
        step_trail(w->last_st, &w->last_st->end_allocated, m->allocated, born, &w->trail);
    }
    if (w->progress && (m->events & ((1u << 20) - 1)) == 0)
        fprintf(stderr, "\rgpumem: reading events... %.1fM", (double)m->events / 1e6);
    return 0;
}

/* The running sums every device allocation and free changes, kept in locals over a leaf's rows
 * (sweep_rows): in the model they were a load and a store each per event, which the stores
 * into the allocations (the same type, uint64_t) kept the compiler from holding in registers.
 * (max_seq: sweep_rows takes it once a batch, rows_max_seq.) */
#define HOT_SUMS(X)                                                                                \
    X(max_seq) X(allocated) X(requested) X(peak_allocated) X(peak_allocated_seq)           \
    X(peak_requested) X(peak_requested_seq) X(vmm) X(peak_held) X(peak_held_seq)
#define HOT_LOAD(f) f = m->f;
#define HOT_STORE(f) m->f = f;
#define HOT_DECL(f) uint64_t f;

/* k more rows swept in sweep_rows (not by sweep_row): counted, with the progress line where
 * they reach a multiple of 2^20 events, as sweep_row prints it at each. */
static void count_rows(sweep *w, size_t k) {
    gm_model *m = w->m;
    uint64_t before = m->events;
    m->events += k;
    if (w->progress && k && (m->events >> 20) != (before >> 20))
        fprintf(stderr, "\rgpumem: reading events... %.1fM", (double)((m->events >> 20) << 20) / 1e6);
}

/* The rest of the sweep's state the fast rows below change, in locals over a leaf's rows too,
 * for the same reason (the allocation record's byte fields are stores that may alias anything
 * to the compiler, which loaded every field of w and m again after each): written back before
 * anything else reads it (sweep_row, name_apply, growing the allocations) and loaded again
 * after. The last step's end (end_allocated, end_seq) is kept as its last row left it and
 * written when the step changes. */
#define SWEEP_STORE                                                                                \
    HOT_SUMS(HOT_STORE)                                                                            \
    m->nallocs = nallocs, w->last_death = last_death, m->deaths_linked = linked;                   \
    m->ndeaths = ndeaths;                                                                          \
    w->last_range = last_range, w->last_st = last_st, w->trail = trail;                            \
    if (last_st) last_st->end_allocated = st_alloc, last_st->end_seq = st_seq;
#define SWEEP_LOAD                                                                                 \
    HOT_SUMS(HOT_LOAD)                                                                             \
    allocs = m->allocs, nallocs = m->nallocs;                                                      \
    last_death = w->last_death, linked = m->deaths_linked, ndeaths = m->ndeaths;                   \
    last_range = w->last_range, last_st = w->last_st, trail = w->trail;                            \
    st_alloc = last_st ? last_st->end_allocated : 0, st_seq = last_st ? last_st->end_seq : 0;      \
    name_seq = w->ni < w->nnames ? w->names[w->ni].seq : UINT64_MAX;

/* The largest of n rows' seqs (n > 0) taken as unsigned, as gm_model.max_seq: the rows come in
 * seq order (signed: the table's rowids), so it is the last row's, or the last negative one's
 * where there are both (no recorder writes a negative seq). */
static uint64_t rows_max_seq(const gm_event_row *r, size_t n) {
    if (r[0].seq >= 0 || r[n - 1].seq < 0) return (uint64_t)r[n - 1].seq;
    size_t i = n - 1;
    while (r[i].seq >= 0) i--;
    return (uint64_t)r[i].seq;
}

/* Row r to the device account (gm_devused.c, its own state). Its filter of addresses, or NULL:
 * out of memory, the report goes on without the account. */
static __attribute__((noinline)) const uint64_t *devused_row(sweep *w, const gm_event_row *r) {
    if (gm_devused_rows(w->du, w->m->devused, r, 1) == 0) return gm_devused_addr_filter(w->du);
    gm_devused_end(w->du);
    w->du = NULL;
    gm_devused_free(w->m->devused);
    free(w->m->devused);
    w->m->devused = NULL;
    return NULL;
}

/* The rows of one leaf page of events (gm_analyze_pages.c), or a batch SQLite hands over: each
 * to the device account where it reads the row (devused_row: not gpumem's own allocations, nor
 * frees whose address no allocation outside gpumem had; a leaf's loop of its own was 19 instructions an
 * event), and to sweep_row, converted as SQLite's values convert. The two kinds of almost
 * every row, a device allocation (not PyTorch's hook's, not a private pool's or a graph's) and a device
 * free, are swept here with the sums and the sweep's state in locals, as sweep_row sweeps them:
 * what they cannot change (reserved, host memory, their peaks) is not looked at; every other
 * row goes to sweep_row with the state written back. */
static int sweep_rows(void *ctx, const gm_event_row *r, size_t n) {
    sweep *w = ctx;
    gm_model *m = w->m;
    /* the device account's rows: those it reads (gm_devused_addr_filter), in order */
    const uint64_t *du_seen = w->du ? gm_devused_addr_filter(w->du) : NULL;
    HOT_SUMS(HOT_DECL)
    /* rows by their cache flags (flags / REC_F_CACHE_HIT & 3: neither, hit, miss, both; a free's
     * row neither, the bits being no cache flags but on a device allocation, rec_is_cache_hit),
     * one count a row, added to m->cache_hits and m->cache_misses at the end (nothing reads those
     * during the sweep; sweep_row adds its own rows' to them) */
    _Static_assert(REC_F_CACHE_MISS == 2 * REC_F_CACHE_HIT, "the two cache flags side by side");
    uint64_t by_cache[4] = {0};
    gm_alloc *allocs;
    size_t nallocs, last_death, ndeaths;
    int linked;
    uint32_t last_range;
    gm_step *last_st;
    uint64_t st_alloc, st_seq, name_seq;
    int trail;
    SWEEP_LOAD
    const unsigned slow_flags = REC_F_FRAMEWORK | REC_F_PRIVATE_POOL | GM_OWN_SEGMENT_FLAGS;
    /* an event outside every push/pop range of its thread is in the start/end range open at its
     * time, if one is (gm_event_range): the rows then carry t (not the lean reader) */
    const int spans = m->spans.n != 0;
    /* m->events counts the rows before `counted` (sweep_row counts its own): the swept rows are
     * added a run at a time, not one at a time in a register the loop cannot spare */
    const gm_event_row *const rows = r, *const end = r + n, *counted = r;
    for (; r < end; r++) {
        uint64_t seq = (uint64_t)r->seq, addr = (uint64_t)r->addr;
        uint64_t born = UINT64_MAX; /* a free's allocation's birth (step_trail) */
        unsigned kind = (unsigned)(int)r->kind, flags = (unsigned)(int)r->flags;
        /* NULL (none) reads as -1 from the pages, 0 through SQLite */
        uint32_t range = r->range > 0 ? (uint32_t)r->range : 0;
        /* a free by gpumem's exit hooks in none of the program's phases (gm_row_range: a step
         * range left open, as an OOM leaves it, would take it and run the step on past the OOM) */
        if (!range && spans) range = gm_event_range(m, 0, r->t);
        if (rec_is_workspace_free(kind, flags) || rec_is_host_cache_free(kind, flags)) range = 0;
        int alloc = (kind == REC_ALLOC || kind == REC_ALLOC_ASYNC) && !(flags & slow_flags);
        if (!alloc && kind != REC_FREE && kind != REC_FREE_ASYNC) {
            if (du_seen) du_seen = devused_row(w, r);
            SWEEP_STORE
            count_rows(w, (size_t)(r - counted));
            counted = r + 1;
            int rc = sweep_row(w, seq, kind, flags, addr, (uint64_t)r->size, (uint32_t)r->stack, range,
                               (int)r->device, (uint64_t)r->requested);
            SWEEP_LOAD
            if (rc != 0) {
                m->cache_hits += by_cache[1] + by_cache[3], m->cache_misses += by_cache[2] + by_cache[3];
                return -1;
            }
            continue;
        }
        m->count_kind[kind]++;
        by_cache[alloc ? flags / REC_F_CACHE_HIT & 3 : 0]++;
        if (name_seq < seq) {
            SWEEP_STORE
            for (; w->ni < w->nnames && w->names[w->ni].seq < seq; w->ni++) name_apply(w, &w->names[w->ni]);
            SWEEP_LOAD
        }
        if (du_seen) {
            uint32_t b = gm_devused_addr_bit(addr);
            if (alloc ? !rec_is_served(kind, flags) : du_seen[b >> 6] >> (b & 63) & 1)
                du_seen = devused_row(w, r);
        }
        if (alloc) {
            uint64_t size = (uint64_t)r->size, req = (uint64_t)r->requested;
            int dev = (int)r->device;
            if (nallocs == m->allocs_cap) {
                SWEEP_STORE
                int rc =
                    gm_grow((void **)&m->allocs, &m->allocs_cap, nallocs + 1, sizeof *m->allocs) ? alloc_oom(w) : 0;
                SWEEP_LOAD
                if (rc != 0) {
                    count_rows(w, (size_t)(r + 1 - counted));
                    m->cache_hits += by_cache[1] + by_cache[3], m->cache_misses += by_cache[2] + by_cache[3];
                    return -1;
                }
            }
            /* alloc_open's, with the state in locals */
            uint64_t old;
            if (addr_map_swap(&w->live, addr, nallocs, &old) == 1) {
                gm_alloc *o = &allocs[old];
                o->death = seq;
                link_death(m, allocs, &linked, &last_death, &ndeaths, old);
                hot_end(m, o, &allocated, &requested);
                m->unmatched_frees++;
            }
            allocs[nallocs++] = (gm_alloc){seq, 0, size, req, (uint32_t)r->stack, range, 0, (uint8_t)kind,
                                           (int8_t)(dev > 0 ? dev : 0), 0, 0, 0};
            allocated += size;
            requested += req;
            if (allocated > peak_allocated) peak_allocated = allocated, peak_allocated_seq = seq;
            if (requested > peak_requested) peak_requested = requested, peak_requested_seq = seq;
            /* the device-wide peak without segments (vmm: no fast row changes it) */
            if (allocated + vmm > peak_held) {
                peak_held = allocated + vmm, peak_held_seq = seq;
                m->peak_held_vmm = vmm, m->peak_held_torch = m->torch.reserved;
            }
        } else {
            uint64_t ai;
            if (addr_map_del(&w->live, addr, &ai)) {
                gm_alloc *a = &allocs[ai];
                born = a->birth;
                a->death = seq;
                a->death_range = range;
                /* a cuBLAS workspace gpumem's hooks freed at exit (sweep_row's rule) */
                if (flags & REC_F_TORCH_CACHE) a->flags |= GM_ALLOC_WORKSPACE;
                link_death(m, allocs, &linked, &last_death, &ndeaths, ai);
                hot_end(m, a, &allocated, &requested);
                if ((a->flags & GM_ALLOC_FRAMEWORK) && m->torch.present == 2) framework_free(m, a);
            } else {
                m->unmatched_frees++;
            }
        }
        if (range) {
            if (range != last_range) {
                if (last_st) last_st->end_allocated = st_alloc, last_st->end_seq = st_seq;
                const gm_range *rg = gm_range_of(m, range);
                last_range = range;
                w->last_step = rg && rg->step >= 0 ? rg->step : -1;
                last_st = w->last_step >= 0 ? step_entry(m, &w->step_idx, w->last_step, seq, &w->step_cap) : NULL;
            }
            st_alloc = allocated, st_seq = seq;
            trail = 1;
        } else {
            step_trail(last_st, &st_alloc, allocated, born, &trail);
        }
    }
    if (n && rows_max_seq(rows, n) > max_seq) max_seq = rows_max_seq(rows, n);
    SWEEP_STORE
    count_rows(w, (size_t)(end - counted));
    m->cache_hits += by_cache[1] + by_cache[3], m->cache_misses += by_cache[2] + by_cache[3];
    return 0;
}

/* death order of two allocations' indexes (dev_allocated) */
static const gm_alloc *g_death_allocs;
static int cmp_death(const void *a, const void *b) {
    uint64_t x = g_death_allocs[*(const uint32_t *)a].death, y = g_death_allocs[*(const uint32_t *)b].death;
    return x < y ? -1 : x > y;
}

/* The device allocations' figures per device (m->devs), from the allocations' lives once the
 * sweep is over: the sweep's fast rows keep one sum (a per-device one there cost every event of
 * every recording), and a recording of one device needs none (its figures are the model's).
 * Births in birth order merged with deaths in death order; a death at a birth's seq (its address
 * handed out again without a free) comes first, as in the sweep. Reserved is counted in the sweep
 * (segment rows are slow rows); without segments it is allocated, as the model's. */
static void dev_allocated(gm_model *m) {
    if (!m->devs) return;
    int several = 0;
    for (size_t i = 1; i < m->nallocs && !several; i++) several = m->allocs[i].device != m->allocs[0].device;
    gm_dev_figs *f0 = m->nallocs ? &m->devs[m->allocs[0].device < 0 ? 0 : m->allocs[0].device] : NULL;
    if (!several) { /* one device: the model's own sums are its */
        if (f0) {
            f0->allocated = m->allocated, f0->requested = m->requested;
            f0->peak_allocated = m->peak_allocated, f0->peak_allocated_seq = m->peak_allocated_seq;
            f0->peak_requested = m->peak_requested, f0->peak_requested_seq = m->peak_requested_seq;
        }
    } else {
        size_t nd = 0;
        uint32_t *deaths = m->nallocs < UINT32_MAX ? malloc(m->nallocs * sizeof *deaths) : NULL;
        if (!deaths) { /* out of memory: no figures per device rather than wrong ones */
            free(m->devs);
            m->devs = NULL;
            return;
        }
        for (size_t i = 0; i < m->nallocs; i++)
            if (m->allocs[i].death) deaths[nd++] = (uint32_t)i;
        g_death_allocs = m->allocs;
        gm_sort(deaths, nd, sizeof *deaths, cmp_death);
        size_t di = 0;
        for (size_t i = 0; i < m->nallocs; i++) {
            const gm_alloc *a = &m->allocs[i];
            for (; di < nd && m->allocs[deaths[di]].death <= a->birth; di++) {
                const gm_alloc *e = &m->allocs[deaths[di]];
                if (e->kind != REC_ALLOC && e->kind != REC_ALLOC_ASYNC) continue;
                gm_dev_figs *f = &m->devs[e->device < 0 ? 0 : e->device];
                f->allocated -= e->size < f->allocated ? e->size : f->allocated;
                f->requested -= e->requested < f->requested ? e->requested : f->requested;
            }
            if (a->kind != REC_ALLOC && a->kind != REC_ALLOC_ASYNC) continue;
            gm_dev_figs *f = &m->devs[a->device < 0 ? 0 : a->device];
            f->allocated += a->size, f->requested += a->requested;
            if (f->allocated > f->peak_allocated) f->peak_allocated = f->allocated, f->peak_allocated_seq = a->birth;
            if (f->requested > f->peak_requested) f->peak_requested = f->requested, f->peak_requested_seq = a->birth;
        }
        for (; di < nd; di++) {
            const gm_alloc *e = &m->allocs[deaths[di]];
            if (e->kind != REC_ALLOC && e->kind != REC_ALLOC_ASYNC) continue;
            gm_dev_figs *f = &m->devs[e->device < 0 ? 0 : e->device];
            f->allocated -= e->size < f->allocated ? e->size : f->allocated;
            f->requested -= e->requested < f->requested ? e->requested : f->requested;
        }
        free(deaths);
    }
    if (!m->have_segments)
        for (int i = 0; i < GM_DEVICES; i++) {
            gm_dev_figs *f = &m->devs[i];
            f->reserved = f->allocated, f->peak_reserved = f->peak_allocated;
            f->peak_reserved_seq = f->peak_allocated_seq;
        }
}

int gm_model_devices(const gm_model *m, int *lo, int *hi) {
    int n = 0;
    if (lo) *lo = 0;
    if (hi) *hi = 0;
    for (int i = 0; m->devs && i < GM_DEVICES; i++) {
        if (!m->devs[i].peak_allocated && !m->devs[i].peak_reserved) continue;
        if (lo && !n) *lo = i;
        if (hi) *hi = i;
        n++;
    }
    return n;
}

int gm_busiest_device(const gm_model *m) {
    int best = 0;
    for (int i = 1; m->devs && i < GM_DEVICES; i++) {
        const gm_dev_figs *f = &m->devs[i], *b = &m->devs[best];
        if (f->peak_reserved > b->peak_reserved ||
            (f->peak_reserved == b->peak_reserved && f->peak_allocated > b->peak_allocated))
            best = i;
    }
    return best;
}

int gm_model_device_view(const gm_model *m, int dev, gm_model *v) {
    if (!m->devs || dev < 0 || dev >= GM_DEVICES) return -1;
    size_t n = 0;
    for (size_t i = 0; i < m->nallocs; i++) n += m->allocs[i].device == dev;
    gm_alloc *a = malloc((n ? n : 1) * sizeof *a);
    if (!a) return -1;
    n = 0;
    for (size_t i = 0; i < m->nallocs; i++)
        if (m->allocs[i].device == dev) a[n++] = m->allocs[i];
    *v = *m;
    v->allocs = a, v->nallocs = v->allocs_cap = n;
    /* the indexes of the whole model's lists mean nothing in this array */
    v->deaths_linked = 0, v->first_death = 0;
    v->death_marks = NULL, v->ndeath_marks = v->death_marks_cap = v->ndeaths = 0;
    v->alive = NULL, v->nalive = 0, v->alive_known = 0;
    const gm_dev_figs *f = &m->devs[dev];
    v->allocated = f->allocated, v->requested = f->requested, v->reserved = f->reserved;
    v->peak_allocated = f->peak_allocated, v->peak_allocated_seq = f->peak_allocated_seq;
    v->peak_requested = f->peak_requested, v->peak_requested_seq = f->peak_requested_seq;
    v->peak_reserved = f->peak_reserved, v->peak_reserved_seq = f->peak_reserved_seq;
    v->vmm = f->vmm;
    v->peak_device = f->peak_device, v->peak_device_seq = f->peak_device_seq;
    v->peak_device_vmm = f->peak_device_vmm, v->peak_device_torch = f->peak_device_torch;
    v->device_only = dev + 1;
    return 0;
}

int gm_default_device(const gm_model *m) {
    /* a PyTorch program's memory is its tensors: a device they never were on (a library's
     * workspace, a cudaMalloc through ctypes) is not where its memory went, however big */
    if (m->torch.present == 1 && m->torch.devs) {
        gm_model tv = gm_model_torch_view(m);
        if (gm_model_devices(&tv, NULL, NULL) > 0) return gm_busiest_device(&tv);
    }
    /* gpumem served PyTorch (its allocator hook): its tensors are the hook's allocations, whose
     * per-device figures (framework_alloc: allocated and requested, no reserve of PyTorch's
     * own) say the same of them */
    if (m->torch.present == 2 && m->torch.devs) {
        gm_model hv = {.devs = m->torch.devs};
        if (gm_model_devices(&hv, NULL, NULL) > 0) return gm_busiest_device(&hv);
    }
    return gm_busiest_device(m);
}

int gm_lead_device(const gm_model *m) { return m->device_asked ? m->device_asked - 1 : gm_default_device(m); }

int gm_lead_from(const gm_model *m, int *busiest) {
    int b = gm_busiest_device(m);
    if (busiest) *busiest = b;
    if (m->device_asked) return GM_DEV_ASKED;
    return gm_default_device(m) == b ? GM_DEV_BUSIEST : GM_DEV_TORCH;
}

const char *gm_device_why(int from, int busiest, char *buf, size_t n) {
    if (from == GM_DEV_ASKED) snprintf(buf, n, "as --device asked");
    else if (from == GM_DEV_TORCH)
        snprintf(buf, n, "the busiest of PyTorch's tensors' devices; device %d held more by gpumem's account, "
                         "PyTorch's tensors less: --device %d for its figures", busiest, busiest);
    else snprintf(buf, n, "the busiest; --device N gives another's");
    return buf;
}

const char *gm_lead_why(const gm_model *m, const char *busiest, char *buf, size_t n) {
    int b, from = gm_lead_from(m, &b);
    if (from == GM_DEV_TORCH) return gm_device_why(from, b, buf, n);
    return from == GM_DEV_ASKED ? "as --device asked" : busiest;
}

const char *gm_device_from_json(int from) {
    return from == GM_DEV_ASKED ? "asked" : from == GM_DEV_TORCH ? "torch" : "busiest";
}

_Static_assert(sizeof ((gm_db *)0)->torch_devs / sizeof(int) == GM_DEVICES, "gm_db.torch_devs: one per device");

/* Notes in d that PyTorch's history holds nothing on the device asked for (want), from the
 * devices its tensors were on (on[i]: PyTorch held memory on device i), by gm_torch_absent's rule. */
static void torch_note_absent(gm_db *d, int want, const unsigned char *on, int allocator) {
    d->torch_absent = 0, d->ntorch_devs = 0;
    if (want < 0 || want >= GM_DEVICES || on[want]) return;
    for (int i = 0; i < GM_DEVICES; i++)
        if (on[i]) d->torch_devs[d->ntorch_devs++] = i;
    if (!d->ntorch_devs) return; /* no history at all: nothing of PyTorch's to say */
    d->torch_absent = want + 1, d->torch_absent_allocator = allocator;
}

/* The model's rule for "PyTorch held memory on device i": its view's figures there. */
static void torch_note_model(gm_db *d, const gm_model *m, int want) {
    unsigned char on[GM_DEVICES] = {0};
    if (!m->torch.present || !m->torch.devs) return;
    for (int i = 0; i < GM_DEVICES; i++) on[i] = m->torch.devs[i].peak_allocated || m->torch.devs[i].peak_reserved;
    torch_note_absent(d, want, on, m->torch.present);
}

/* The same from the file's events (before a scope hides the other devices'), for the commands
 * that read no model first: PyTorch's tensors (31) and segments (34) on each device. Only where
 * PyTorch's history was merged (meta torch_history): a recording without it costs no scan. */
static void torch_note_events(gm_db *d, const int *devs, int n, int want) {
    unsigned char on[GM_DEVICES] = {0};
    if (gm_meta_int(d, "torch_history", 0) <= 0) return;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db, "SELECT 1 FROM main.events WHERE device = ?1 AND kind IN (31, 34) LIMIT 1", -1,
                           &s, NULL) != SQLITE_OK)
        return;
    for (int i = 0; i < n; i++) {
        if (devs[i] < 0 || devs[i] >= GM_DEVICES) continue;
        sqlite3_bind_int(s, 1, devs[i]);
        on[devs[i]] = sqlite3_step(s) == SQLITE_ROW;
        sqlite3_reset(s);
    }
    sqlite3_finalize(s);
    torch_note_absent(d, want, on, 1);
}

int gm_torch_absent(const gm_db *d, char *line, size_t n) {
    if (!d->torch_absent) return -1;
    int want = d->torch_absent - 1, nd = d->ntorch_devs;
    if (line && n) {
        int k = snprintf(line, n, "PyTorch's memory history has nothing on device %d: its tensors were on device%s", want,
                         nd == 1 ? "" : "s");
        for (int j = 0; j < nd && k > 0 && (size_t)k < n; j++)
            k += snprintf(line + k, n - (size_t)k, "%s%d", !j ? " " : j == nd - 1 ? " and " : ", ", d->torch_devs[j]);
        if (k > 0 && (size_t)k < n)
            snprintf(line + k, n - (size_t)k, " (device %d's figures here are the device's: gpumem's account; "
                                              "leave --device out, or give one of those, for PyTorch's view)", want);
    }
    return want;
}

void gm_torch_absent_json(const gm_db *d, FILE *out) {
    char line[1024];
    int dev = gm_torch_absent(d, line, sizeof line);
    if (dev < 0) {
        fputs("null", out);
        return;
    }
    fprintf(out, "{\"allocator\":\"%s\",\"device\":%d,\"on_device\":false,\"tensor_devices\":[",
            d->torch_absent_allocator == 2 ? "gpumem" : "pytorch", dev);
    for (int j = 0; j < d->ntorch_devs; j++) fprintf(out, "%s%d", j ? "," : "", d->torch_devs[j]);
    fputs("],\"peak_requested\":null,\"peak_allocated\":null,\"peak_reserved\":null,\"note\":", out);
    gm_json_str(out, line);
    fputc('}', out);
}

/* The scope's notes (gm.h), here beside the rules they say: gm_db.c, below this file, scopes. */
void gm_scope_say(gm_db *d, const char *figures, FILE *out) {
    if (!d->scoped)
        return;
    char why[256];
    fprintf(out, "gpumem: note: %s: the program held memory on %d devices (%d to %d): %s are device %d's, "
                 "%s (each device has its own allocator: their sum is a heap no device held); "
                 "gpumem report gives each device's peaks\n",
            d->path, d->scope_devices, d->scope_lo, d->scope_hi, figures, d->scoped - 1,
            gm_device_why(d->device_asked ? GM_DEV_ASKED : d->scope_from, d->scope_busiest, why, sizeof why));
    char absent[1024]; /* and PyTorch's view there, where its history has nothing on that device */
    if (gm_torch_absent(d, absent, sizeof absent) >= 0) fprintf(out, "gpumem: note: %s: %s\n", d->path, absent);
}

void gm_scope_json(const gm_db *d, FILE *out, const char *before, const char *after) {
    if (!d->scoped) return;
    fprintf(out, "%s\"device\":%d,\"devices\":%d,\"device_from\":\"%s\"", before, d->scoped - 1, d->scope_devices,
            gm_device_from_json(d->device_asked ? GM_DEV_ASKED : d->scope_from));
    if (!d->device_asked && d->scope_from == GM_DEV_TORCH) fprintf(out, ",\"busiest_device\":%d", d->scope_busiest);
    if (d->torch_absent) { /* --device N where PyTorch held nothing on N: said (gm_torch_absent) */
        fputs(",\"torch_absent\":", out);
        gm_torch_absent_json(d, out);
    }
    fputs(after, out);
}

/* --device's refusal: the devices the program did hold memory on, in words a person can act on. */
static int device_unused(const char *path, int want, const int *devs, int n, char *err, size_t errsz) {
    char held[512] = "", give[512] = "";
    size_t ah = 0, ag = 0;
    for (int i = 0; i < n && ah < sizeof held - 16 && ag < sizeof give - 16; i++) {
        const char *sep = !i ? "" : i == n - 1 ? " and " : ", ";
        ah += (size_t)snprintf(held + ah, sizeof held - ah, "%s%d", sep, devs[i]);
        ag += (size_t)snprintf(give + ag, sizeof give - ag, "%s%d", !i ? "" : i == n - 1 ? " or " : ", ", devs[i]);
    }
    if (!n)
        snprintf(err, errsz, "%s: the program held no memory on device %d; it held no device memory at all: "
                             "leave --device out", path, want);
    else
        snprintf(err, errsz, "%s: the program held no memory on device %d; it held memory on device%s %s: "
                             "give --device %s",
                 path, want, n == 1 ? "" : "s", held, give);
    return GM_SCOPE_NO_DEVICE;
}

/* The devices the model's view holds memory on (gm_model_devices' rule), lowest first. */
static int model_device_list(const gm_model *m, int *devs) {
    int n = 0;
    for (int i = 0; m->devs && i < GM_DEVICES; i++)
        if (m->devs[i].peak_allocated || m->devs[i].peak_reserved) devs[n++] = i;
    return n;
}

int gm_model_pick_device(gm_db *d, gm_model *m, int want, char *err, size_t errsz) {
    if (want < 0) return 0;
    int devs[GM_DEVICES], n = model_device_list(m, devs);
    int used = 0;
    for (int i = 0; i < n; i++) used |= devs[i] == want;
    if (!used) return device_unused(d->path, want, devs, n, err, errsz);
    m->device_asked = want + 1;
    torch_note_model(d, m, want);
    return 0;
}

int gm_scope_fail(const char *cmd, int sc, const char *err, const char *without) {
    /* a device to give: and what leaving --device out gives, which is each command's own */
    int give = sc == GM_SCOPE_NO_DEVICE && without && strstr(err, ": give --device ");
    fprintf(stderr, "gpumem %s: %s%s%s%s\n", cmd, err, give ? " (or leave it out for " : "", give ? without : "",
            give ? ")" : "");
    if (sc == GM_SCOPE_NO_DEVICE) {
        fprintf(stderr, GM_HELP("%s"), cmd);
        return GM_EXIT_USAGE;
    }
    return GM_EXIT_BADDB;
}

int gm_db_scope_one(gm_db *d, const gm_model *have, int want, char *err, size_t errsz) {
    if (want >= 0) {
        /* the device asked for: one the program held memory on, named by the model's rule
         * where a model is at hand, else the events' (gm_db_devices); no sweep for it */
        int devs[GM_DEVICES], n = have ? model_device_list(have, devs) : gm_db_device_list(d, devs, GM_DEVICES);
        int used = 0;
        for (int i = 0; i < n && i < GM_DEVICES; i++) used |= devs[i] == want;
        if (!used) return device_unused(d->path, want, devs, n < GM_DEVICES ? n : GM_DEVICES, err, errsz);
        d->device_asked = want + 1;
        if (n <= 1 || d->scoped) return 0; /* memory on that device alone: the whole recording is its */
        /* PyTorch's tensors elsewhere: said by every command (gm_torch_absent), noted before the
         * scope hides the other devices' events */
        if (have) torch_note_model(d, have, want);
        else torch_note_events(d, devs, n < GM_DEVICES ? n : GM_DEVICES, want);
        if (gm_db_scope_device(d, want) != 0) {
            snprintf(err, errsz, "%s: cannot read device %d's events alone (%s)", d->path, want, sqlite3_errmsg(d->db));
            return -1;
        }
        d->scope_devices = n, d->scope_lo = devs[0], d->scope_hi = devs[(n < GM_DEVICES ? n : GM_DEVICES) - 1];
        d->scope_from = GM_DEV_ASKED, d->scope_busiest = want;
        return 1;
    }
    int lo, hi, n = have ? gm_model_devices(have, &lo, &hi) : gm_db_devices(d, &lo, &hi);
    if (n <= 1 || d->scoped) return 0;
    gm_model own;
    const gm_model *m = have;
    if (!m) {
        if (gm_model_load(d, &own, 1, err, errsz) != 0) {
            gm_model_free(&own);
            return -1;
        }
        m = &own;
    }
    /* the model's count is the one report says (the events' bound it) */
    n = gm_model_devices(m, &lo, &hi);
    int busiest, from = gm_lead_from(m, &busiest), dev = gm_default_device(m);
    if (m == &own) gm_model_free(&own);
    if (n <= 1) return 0;
    if (gm_db_scope_device(d, dev) != 0) {
        snprintf(err, errsz, "%s: cannot read device %d's events alone (%s)", d->path, dev, sqlite3_errmsg(d->db));
        return -1;
    }
    d->scope_devices = n, d->scope_lo = lo, d->scope_hi = hi;
    d->scope_from = from, d->scope_busiest = busiest;
    return 1;
}

void gm_model_device_view_free(gm_model *v) {
    if (v->device_only) free(v->allocs);
    v->allocs = NULL, v->nallocs = 0;
}


/* model_load's answer when the page reader gave up after rows were swept (not an errno, not
 * -1) */
enum { LOAD_RESTART = 2 };

/* gm_model_load with the events read from their pages (pages = 1; LOAD_RESTART when that gave
 * up after rows were swept: the model is to be freed and loaded again with pages = 0) or
 * through SQLite. */
/* ---- backward ranges of PyTorch's hooks, as recorded before they named them right ---------- */

/* The module of a hooks' module range r ("step N/fwd/<module>", "step N/bwd/<module>": its
 * parent p the pass, "step N/fwd" or "step N/bwd"), and its pass ('f', 'b'); 0 for any other
 * range (a forward inside a backward, checkpointing's, included). */
static int hooks_mod_range(const gm_range *r, const gm_range *p, const char **mod) {
    if (!p || !p->path || !r->path || strncmp(p->path, "step ", 5) != 0) return 0;
    const char *q = p->path + 5;
    if (!isdigit((unsigned char)*q)) return 0;
    while (isdigit((unsigned char)*q)) q++;
    int pass = !strcmp(q, "/fwd") ? 'f' : !strcmp(q, "/bwd") ? 'b' : 0;
    size_t pl = (size_t)(q - p->path) + 4;
    if (!pass || strncmp(r->path, p->path, pl) != 0 || r->path[pl] != '/' || !r->path[pl + 1] ||
        strchr(r->path + pl + 1, '/'))
        return 0;
    *mod = r->path + pl + 1;
    return pass;
}

/* Is module path c inside module p: its children's paths begin with p's and a dot, and every
 * module is inside the root's, whose path (its class name) is no prefix of theirs: root, the
 * step's first forward module range's. */
static int hooks_inside(const char *p, const char *root, const char *c) {
    size_t n = strlen(p);
    return !strcmp(p, root) || (!strncmp(c, p, n) && c[n] == '.');
}

/* PyTorch's hooks (preload/torch_hooks.c) open a module's backward range when autograd runs the
 * node that made the module's output. A module that returns its last child's output as it is (an
 * nn.Sequential, a root whose forward ends in its head) shares that node with the child; until
 * the hooks left that node to the child (gm_torch_bwd_innermost), the parent's hook, run right
 * after the child's, replaced the child's range at once and left the parent's open over the
 * child's backward: "step N/bwd/Tied" held the head's matmul, "step N/bwd/body" the
 * Sequential's last Linear, in every command's phases. That is what such a range looks like: the
 * backward range before it is a module's inside it, and made nothing (a module's own output node
 * runs before any node of its children's, so its range comes first otherwise). It is read as
 * the hooks name it now, under that child's name (again for a grandparent: tied's root after its
 * Sequential after its last Linear), and a module that returned its child's output and made more
 * after it (GPT-2's model: the loss after lm_head's logits) is found so too: gm_torch_bwd_child,
 * the one rule, which advise's ranges are read with as well (analyze/gm_advise.c,
 * bwd_of_returned_child). Only where the hooks ran (meta torch_hooks 1): a program's own NVTX
 * ranges keep their names. Out of memory: the paths as recorded. */
int gm_torch_bwd_innermost(gm_db *d) {
    char v[32];
    gm_meta_text(d, "torch_bwd_ranges", v, sizeof v);
    return !strcmp(v, "innermost");
}

long gm_torch_bwd_child(gm_hooks_range *r, size_t n) {
    u64map last = {0}; /* a backward pass range's id -> its latest module range (index) */
    u64map root = {0}; /* a step -> its first forward module range (index) */
    long renamed = 0;
    for (size_t k = 0; k < n; k++) {
        gm_hooks_range *x = &r[k];
        if (!x->mod) continue;
        if (x->pass == 'f' && !u64map_get(&root, (uint64_t)x->step) && u64map_put(&root, (uint64_t)x->step, k) != 0)
            goto nomem;
        if (x->pass != 'b') continue;
        uint64_t *pk = u64map_get(&last, x->pass_id), *rk = u64map_get(&root, (uint64_t)x->step);
        size_t before = pk ? (size_t)*pk : n;
        if (u64map_put(&last, x->pass_id, k) != 0) goto nomem;
        if (before == n || !rk || r[before].made || !strcmp(r[before].mod, x->mod) ||
            !hooks_inside(x->mod, r[*rk].mod, r[before].mod))
            continue;
        x->mod = r[before].mod;
        renamed++;
    }
    u64map_free(&last);
    u64map_free(&root);
    return renamed;
nomem:
    u64map_free(&last);
    u64map_free(&root);
    return -1;
}

static void torch_bwd_names(gm_db *d, gm_model *m) {
    size_t n = m->nranges;
    char hooks[8];
    gm_meta_text(d, "torch_hooks", hooks, sizeof hooks); /* the hooks ran: gpumem record's */
    if (!n || strcmp(hooks, "1") != 0 || gm_torch_bwd_innermost(d)) return;
    gm_hooks_range *h = calloc(n, sizeof *h);
    if (!h) return;
    for (int view = 0; view < 2; view++) {
        const gm_alloc *a = view ? m->torch.allocs : m->allocs;
        size_t na = view ? m->torch.nallocs : m->nallocs;
        for (size_t i = 0; i < na; i++) {
            uint64_t *k = a[i].range ? u64map_get(&m->range_idx, a[i].range) : NULL;
            if (k) h[*k].made = 1;
        }
    }
    for (size_t k = 0; k < n; k++) {
        const gm_range *r = &m->ranges[k];
        const gm_range *p = r->parent ? gm_range_of(m, (uint64_t)r->parent) : NULL;
        h[k].pass = (char)(r->step >= 0 ? hooks_mod_range(r, p, &h[k].mod) : 0);
        if (!h[k].pass) h[k].mod = NULL;
        h[k].pass_id = p ? (uint64_t)p->id : 0, h[k].step = r->step;
    }
    /* out of memory: what was renamed by then, the rest as recorded. A module taken points into
     * the path of a range that kept its own (the chain's first), never one replaced below */
    gm_torch_bwd_child(h, n);
    for (size_t k = 0; k < n; k++) {
        gm_range *r = &m->ranges[k];
        const char *own = NULL;
        if (!h[k].mod || !hooks_mod_range(r, r->parent ? gm_range_of(m, (uint64_t)r->parent) : NULL, &own) ||
            h[k].mod == own)
            continue;
        size_t pl = (size_t)(own - r->path);
        char *path = malloc(pl + strlen(h[k].mod) + 1);
        if (!path) continue;
        memcpy(path, r->path, pl);
        strcpy(path + pl, h[k].mod);
        h[k].mod = path + pl;
        free(r->path);
        r->path = path;
    }
    free(h);
}

static int model_load(gm_db *d, gm_model *m, int progress, int pages, char *err, size_t errsz) {
    memset(m, 0, sizeof *m);
    if (load_small(d, m, err, errsz) != 0) return -1;
    sweep w = {.m = m, .d = d, .err = err, .errsz = errsz, .progress = progress && isatty(2),
               .last_step = -1, .tlast_st = -1};
    /* figures per device (gm_dev_figs): without memory for them the report has only the sums */
    m->devs = calloc(GM_DEVICES, sizeof *m->devs);
    m->torch.devs = calloc(GM_DEVICES, sizeof *m->torch.devs);
    m->deaths_linked = 1; /* death_note */
    /* the live map sparse from the start (a load of a few percent where a program holds a few
     * hundred allocations): an allocation's or a free's probe then mostly ends at its first slot,
     * and a free's backward shift at the next one */
    if (addr_map_init(&w.live, 4096) != 0) {
        snprintf(err, errsz, "%s: out of memory reading events", d->path);
        return -1;
    }
    /* names, merged into the sweep by seq */
    size_t ncap = 0;
    sqlite3_stmt *s;
    if (gm_table_exists(d, "names") &&
        sqlite3_prepare_v2(d->db, gm_names_have_birth(d) ? "SELECT seq, addr, name, birth FROM names ORDER BY seq"
                                                         : "SELECT seq, addr, name, NULL FROM names ORDER BY seq",
                           -1, &s, NULL) == SQLITE_OK) {
        while (sqlite3_step(s) == SQLITE_ROW) {
            if (gm_grow((void **)&w.names, &ncap, w.nnames + 1, sizeof *w.names)) break;
            w.names[w.nnames++] = (name_ev){(uint64_t)sqlite3_column_int64(s, 0),
                                            (uint64_t)sqlite3_column_int64(s, 1),
                                            (uint64_t)sqlite3_column_int64(s, 2),
                                            (uint64_t)sqlite3_column_int64(s, 3)};
        }
        sqlite3_finalize(s);
    }
    /* first and last time apart: the sweep reads only what it needs per row; the first and
     * last seq and the file's size bound the number of rows (sweep_reserve) */
    if (sqlite3_prepare_v2(d->db, "SELECT (SELECT t FROM events ORDER BY seq LIMIT 1), "
                                  "(SELECT t FROM events ORDER BY seq DESC LIMIT 1), "
                                  "(SELECT seq FROM events ORDER BY seq LIMIT 1), "
                                  "(SELECT seq FROM events ORDER BY seq DESC LIMIT 1), "
                                  "(SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size())",
                           -1, &s, NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW) {
            m->first_t = (uint64_t)sqlite3_column_int64(s, 0);
            m->last_t = (uint64_t)sqlite3_column_int64(s, 1);
            int64_t lo = sqlite3_column_int64(s, 2), hi = sqlite3_column_int64(s, 3);
            int64_t bytes = sqlite3_column_int64(s, 4);
            /* rowids are distinct, and a row takes at least 16 bytes of a page */
            uint64_t rows = hi >= lo ? (uint64_t)hi - (uint64_t)lo + 1 : 0;
            if (bytes > 0 && rows > (uint64_t)bytes / 16) rows = (uint64_t)bytes / 16;
            sweep_reserve((void **)&m->allocs, &m->allocs_cap, rows, sizeof *m->allocs);
        }
        sqlite3_finalize(s);
    }
    /* the device account (gm_devused.c) in this same sweep: `gpumem report` reads the events
     * once; schema 1.3 recorded its samples, older files have none (an empty account) */
    m->devused = calloc(1, sizeof *m->devused);
    w.du = m->devused && !(d->schema_major == 1 && d->schema_minor < 3) ? gm_devused_begin() : NULL;
    /* the lean reader leaves t out, which start/end ranges need (gm_event_range) */
    int rc, pr = !pages ? GM_PAGES_NO
                        : m->spans.n ? gm_events_pages(d, sweep_rows, &w) : gm_events_pages_lean(d, sweep_rows, &w);
    if (pr == GM_PAGES_NO) pr = gm_events_sql(d, sweep_rows, &w);
    if (pr == GM_PAGES_DONE) rc = SQLITE_DONE;
    else if (pr == GM_PAGES_STOPPED) rc = SQLITE_NOMEM;
    else if (pr == GM_SQL_ERROR) rc = SQLITE_ERROR; /* a damaged tail */
    else rc = -1;
    if (rc == -1) { /* no query, or the page reader gave up part way */
        gm_devused_end(w.du);
        free(w.names);
        addr_map_free(&w.live);
        u64map_free(&w.step_idx);
        u64map_free(&w.tlive);
        u64map_free(&w.tstep_idx);
        if (w.progress) fprintf(stderr, "\r%40s\r", "");
        return pr == GM_PAGES_RESTART ? LOAD_RESTART : fail_events(d, err, errsz);
    }
    if (w.oom) rc = SQLITE_NOMEM;
    if (w.progress) fprintf(stderr, "\r%40s\r", "");
    gm_devused_end(w.du);
    /* names given after the last event (a tensor named right after the recording's last
     * allocation) still name what is live */
    for (; rc == SQLITE_DONE && w.ni < w.nnames; w.ni++) name_apply(&w, &w.names[w.ni]);
    free(w.names);
    if (rc != SQLITE_DONE) {
        addr_map_free(&w.live);
        u64map_free(&w.step_idx);
        u64map_free(&w.tlive);
        u64map_free(&w.tstep_idx);
        if (rc == SQLITE_NOMEM) {
            if (!w.oom) snprintf(err, errsz, "%s: out of memory reading events", d->path);
            return -1;
        }
        if (m->events == 0) return fail_events(d, err, errsz);
        /* a damaged tail: report what was read, and say so */
        m->truncated_warning = 1;
    }
    /* deaths in seq order are in increasing order as numbers only where no seq is negative (a
     * rowid can be; the recorder's never are): the first allocation's birth says */
    if (m->nallocs && (int64_t)m->allocs[0].birth < 0) m->deaths_linked = 0;
    dev_allocated(m);
    if (!m->have_segments) {
        m->peak_reserved = m->peak_allocated;
        m->peak_reserved_seq = m->peak_allocated_seq;
        m->reserved = m->allocated;
        m->peak_device = m->peak_held, m->peak_device_seq = m->peak_held_seq;
        m->peak_device_vmm = m->peak_held_vmm, m->peak_device_torch = m->peak_held_torch;
    }
    /* each device's device-wide peak: one device's is the model's; without segments (no reserve
     * counted per device) a device's allocated peak */
    int ndev = gm_model_devices(m, NULL, NULL);
    for (int i = 0; m->devs && i < GM_DEVICES; i++) {
        gm_dev_figs *f = &m->devs[i];
        if (!f->peak_allocated && !f->peak_reserved) continue;
        if (ndev == 1)
            f->peak_device = m->peak_device, f->peak_device_seq = m->peak_device_seq,
            f->peak_device_vmm = m->peak_device_vmm, f->peak_device_torch = m->peak_device_torch;
        else if (!m->have_segments)
            f->peak_device = f->peak_allocated, f->peak_device_seq = f->peak_allocated_seq,
            f->peak_device_vmm = 0, f->peak_device_torch = 0;
    }
    /* bytes leaked per step: what is still live is what the live map holds (a walk of every
     * allocation cost a tenth of the report on a long recording) */
    /* ... and the allocations never freed: in the map, every one of them where its count is
     * every allocation less the deaths (an allocation the map had no room for is not) */
    size_t nalive = 0;
    m->alive = w.live.count && m->deaths_linked ? malloc(w.live.count * sizeof *m->alive) : NULL;
    for (uint64_t k = 0; w.live.keys && k <= w.live.mask; k++) {
        if (w.live.keys[k] == U64MAP_EMPTY) continue;
        gm_alloc *a = &m->allocs[w.live.vals[k]];
        if (m->alive && !a->death && nalive < w.live.count) m->alive[nalive++] = (uint32_t)w.live.vals[k];
        if (a->death) continue;
        if (a->kind != REC_HOST_ALLOC && a->kind != REC_MANAGED_ALLOC && torch_cublas_block(m, a->stack)) {
            a->flags |= GM_ALLOC_CUBLAS_HANDLE; /* alive, but no leak: no step's */
            continue;
        }
        /* its step by gm_step_index's rule: one made between two steps is the step before it's */
        long si = gm_step_index(m, a);
        if (si >= 0) {
            m->steps[si].leaked += a->requested;
            m->steps[si].nleaked++;
        }
    }
    /* the same for tensors (the torch view) */
    gm_model tv = gm_model_torch_view(m);
    for (uint64_t k = 0; w.tlive.keys && k <= w.tlive.mask; k++) {
        if (w.tlive.keys[k] == U64MAP_EMPTY) continue;
        gm_alloc *a = &m->torch.allocs[w.tlive.vals[k]];
        /* freed by the program, its free not completed by the end (a block used on another
         * stream, record_stream, whose events PyTorch had not processed yet): no longer the
         * program's (memory_allocated() dropped at the free), so no leak; its block stays
         * PyTorch's to the end, as a completed free's stays until it completes */
        if (a->flags & GM_ALLOC_FREED) a->death = m->max_seq + 1;
        a->flags &= (uint8_t)~GM_ALLOC_FREED;
        if (a->death) continue;
        long si = gm_step_index(&tv, a);
        if (si >= 0) {
            m->torch.steps[si].leaked += a->requested;
            m->torch.steps[si].nleaked++;
        }
    }
    if (m->deaths_linked && (m->alive || !m->nallocs) && nalive + m->ndeaths == m->nallocs) {
        if (nalive) gm_sort(m->alive, nalive, sizeof *m->alive, cmp_u32);
        m->nalive = nalive, m->alive_known = 1;
    } else {
        free(m->alive);
        m->alive = NULL;
    }
    addr_map_free(&w.live);
    u64map_free(&w.step_idx);
    u64map_free(&w.tlive);
    u64map_free(&w.tstep_idx);
    m->derived_on_read = 1;
    torch_bwd_names(d, m);
    return 0;
}

long gm_step_index(const gm_model *m, const gm_alloc *a) {
    size_t lo = 0, hi = m->nsteps; /* steps[lo - 1] began at or before the birth, steps[hi] after */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->steps[mid].start_seq <= a->birth) lo = mid + 1;
        else hi = mid;
    }
    return (long)lo - 1;
}

gm_model gm_model_leak_view(const gm_model *m) {
    /* --device N where PyTorch held nothing on N (gm_torch_absent): N's memory is not its cache,
     * and its allocations are what N leaked, as gpumem leaks --device N reads them */
    int asked = m->device_asked - 1;
    if (asked >= 0 && m->torch.devs && !m->torch.devs[asked].peak_allocated && !m->torch.devs[asked].peak_reserved)
        return *m;
    return m->torch.present == 1 ? gm_model_torch_view(m) : *m;
}

void gm_view_host_held(const gm_model *v, uint64_t *bytes, uint64_t *blocks, uint64_t *held) {
    *bytes = *blocks = *held = 0;
    if (!v->is_torch_view) return;
    for (size_t i = 0; i < v->nhost_held; i++)
        *bytes += v->host_held[i].requested, *held += v->host_held[i].size;
    *blocks = v->nhost_held;
}

int gm_alloc_in_view(const gm_model *m, const gm_alloc *a) {
    return m->is_torch_view ? a->kind == REC_TORCH_ALLOC : a->kind == REC_ALLOC || a->kind == REC_ALLOC_ASYNC;
}

gm_model gm_model_torch_view(const gm_model *m) {
    gm_model v = *m;
    const gm_torch_view *t = &m->torch;
    v.allocs = t->allocs, v.nallocs = t->nallocs, v.allocs_cap = t->allocs_cap;
    v.deaths_linked = 0, v.first_death = 0;
    v.death_marks = NULL, v.ndeath_marks = v.death_marks_cap = v.ndeaths = 0;
    v.alive = NULL, v.nalive = 0, v.alive_known = 0;
    v.allocated = t->allocated, v.requested = t->requested, v.reserved = t->reserved;
    v.peak_allocated = t->peak_allocated, v.peak_allocated_seq = t->peak_allocated_seq;
    v.peak_requested = t->peak_requested, v.peak_requested_seq = t->peak_requested_seq;
    v.peak_reserved = t->peak_reserved, v.peak_reserved_seq = t->peak_reserved_seq;
    v.steps = t->steps, v.nsteps = t->nsteps;
    v.pools = t->pools;
    v.have_segments = 1;
    v.devused = NULL;
    v.is_torch_view = 1;
    v.devs = t->devs;
    memset(&v.torch, 0, sizeof v.torch);
    return v;
}

/* Copies of m's allocations that keep(a) says (*v, *n; none out of memory: the readers then say
 * nothing of them). */
static void allocs_copy(const gm_model *m, int (*keep)(const gm_alloc *), gm_alloc **v, size_t *n) {
    size_t k = 0;
    for (size_t i = 0; i < m->nallocs; i++) k += keep(&m->allocs[i]) != 0;
    if (!k || !(*v = malloc(k * sizeof **v))) return;
    for (size_t i = 0; i < m->nallocs; i++)
        if (keep(&m->allocs[i])) (*v)[(*n)++] = m->allocs[i];
}

static int is_host_cache(const gm_alloc *a) { return (a->flags & GM_ALLOC_HOST_CACHE) != 0; }
static int is_host_held(const gm_alloc *a) { return a->kind == REC_HOST_ALLOC && !a->death; }

/* Whether frame fi is PyTorch's: a native frame of its libraries (libtorch*.so, libc10*.so), or
 * a Python frame of its package (a DataLoader's pin thread in torch/utils/data). */
static int torch_frame(const gm_model *m, long fi) {
    const gm_frame *f = fi >= 0 ? &m->frames[fi] : NULL;
    if (!f) return 0;
    if (f->python) return f->file && strstr(f->file, "/torch/") != NULL;
    const char *mod = f->module && f->module <= m->nmods ? m->mods[f->module - 1].path : NULL;
    const char *base = mod ? strrchr(mod, '/') : NULL;
    base = base ? base + 1 : mod;
    return base && (strncmp(base, "libtorch", 8) == 0 || strncmp(base, "libc10", 6) == 0);
}

/* a pinned block PyTorch made (its CachingHostAllocator, or pin_memory's thread): a frame of
 * PyTorch's in its stack */
static int torch_host_block(const gm_model *m, const gm_alloc *a) {
    size_t len = 0;
    if (!a->stack) return 0;
    gm_stack_frame(m, a->stack, 0, &len);
    for (size_t k = 0; k < len; k++)
        if (torch_frame(m, gm_stack_frame(m, a->stack, k, NULL))) return 1;
    return 0;
}

/* m->host_cache (the pinned blocks PyTorch's host cache held at exit) and m->host_held (those
 * tensors still held): copies the views share, whatever allocations they read (PyTorch's view
 * holds its device tensors only). The cache's blocks are freed either way, never leaks. Where
 * gpumem's hooks never emptied the cache (no meta torch_host_cache, no block of the cache's: a
 * recording before that meta has it from the stacks), m->host_unknown: the blocks alive at the
 * end that PyTorch made, the cache's among them. */
static void host_blocks_collect(gm_db *d, gm_model *m) {
    allocs_copy(m, is_host_cache, &m->host_cache, &m->nhost_cache);
    allocs_copy(m, is_host_held, &m->host_held, &m->nhost_held);
    char emptied[16];
    gm_meta_text(d, "torch_host_cache", emptied, sizeof emptied);
    if (emptied[0] || m->nhost_cache || !m->nhost_held) return;
    size_t k = 0;
    for (size_t i = 0; i < m->nhost_held; i++) k += torch_host_block(m, &m->host_held[i]);
    if (!k || !(m->host_unknown = malloc(k * sizeof *m->host_unknown))) return;
    for (size_t i = 0; i < m->nhost_held; i++)
        if (torch_host_block(m, &m->host_held[i])) m->host_unknown[m->nhost_unknown++] = m->host_held[i];
}

int gm_model_load(gm_db *d, gm_model *m, int progress, char *err, size_t errsz) {
    int rc = model_load(d, m, progress, 1, err, errsz);
    if (rc == LOAD_RESTART) {
        gm_model_free(m);
        rc = model_load(d, m, progress, 0, err, errsz);
    }
    if (rc == 0) host_blocks_collect(d, m);
    return rc;
}

void gm_model_free(gm_model *m) {
    gm_sym_lazy_free(m);
    for (size_t i = 0; i < m->nstrs; i++) free(m->strs[i]);
    free(m->strs);
    for (size_t i = 0; i < m->nframes; i++) {
        gm_frame *f = &m->frames[i];
        free(f->function), free(f->file);
        for (uint32_t k = 0; k < f->ninl; k++) free(f->inl[k].function), free(f->inl[k].file);
        free(f->inl);
    }
    free(m->frames);
    for (size_t i = 0; i < m->nmods; i++) free(m->mods[i].path), free(m->mods[i].build_id);
    free(m->mods);
    for (size_t i = 0; i < m->nranges; i++) free(m->ranges[i].path);
    free(m->ranges);
    gm_spans_free(&m->spans);
    free(m->stack_frames);
    free(m->stack_off);
    free(m->allocs);
    free(m->host_cache);
    free(m->host_held);
    free(m->host_unknown);
    free(m->death_marks);
    free(m->alive);
    free(m->ooms);
    free(m->steps);
    free(m->torch.allocs);
    free(m->torch.steps);
    free(m->devs);
    free(m->torch.devs);
    u64map_free(&m->str_idx);
    u64map_free(&m->frame_idx);
    u64map_free(&m->stack_idx);
    u64map_free(&m->range_idx);
    if (m->devused) gm_devused_free(m->devused);
    free(m->devused);
    memset(m, 0, sizeof *m);
}

long gm_stack_frame(const gm_model *m, uint32_t stack, size_t depth, size_t *len) {
    uint64_t *si = u64map_get(&m->stack_idx, stack);
    if (!si) {
        if (len) *len = 0;
        return -1;
    }
    uint64_t off = m->stack_off[2 * *si], n = m->stack_off[2 * *si + 1];
    if (len) *len = n;
    if (depth >= n) return -1;
    uint32_t f = m->stack_frames[off + depth];
    return f == UINT32_MAX || f >= m->nframes ? -1 : (long)f;
}

static int internal_module(const gm_model *m, const gm_frame *f) {
    if (!f->module || f->module > m->nmods) return 0;
    const char *p = m->mods[f->module - 1].path;
    if (!p) return 0;
    const char *b = strrchr(p, '/');
    b = b ? b + 1 : p;
    return strncmp(b, "libgpumem", 9) == 0 || strncmp(b, "libcudart", 9) == 0 ||
           strncmp(b, "libcuda.", 8) == 0 || strncmp(b, "libcuda-", 8) == 0;
}

int gm_cuda_header(const char *file) {
    if (!file) return 0;
    const char *b = strrchr(file, '/');
    b = b ? b + 1 : file;
    if (!strcmp(b, "cuda_runtime.h") || !strcmp(b, "cuda_runtime_api.h")) return 1;
    /* the toolkit's include folder, however the compiler spelled it: /usr/local/cuda/include,
     * /usr/local/cuda-13.0/include, /usr/local/cuda/bin/../targets/x86_64-linux/include */
    for (const char *p = strstr(file, "/cuda"); p; p = strstr(p + 1, "/cuda")) {
        const char *q = p + 5;
        if (*q != '/' && *q != '-') continue;
        q = strchr(q, '/');
        if (!q) return 0;
        if (!strncmp(q, "/include/", 9)) return 1;
        if (!strncmp(q, "/bin/../", 8)) q += 7;
        if (!strncmp(q, "/targets/", 9) && (q = strchr(q + 9, '/')) && !strncmp(q, "/include/", 9))
            return 1;
    }
    return 0;
}

/* How many of a frame's functions, innermost first (its own, then the functions it was inlined
 * into: inl[]), are CUDA's header wrappers (cudaMalloc<float> from cuda_runtime.h, inlined into
 * the program's code); 1 + ninl when all are. A frame of gm_expand_inlines is one function. */
static uint32_t cuda_header_functions(const gm_model *m, const gm_frame *f) {
    if (!gm_cuda_header(f->file)) return 0;
    /* stacks expanded (gm_expand_inlines): the chain's functions follow as frames of their own */
    uint32_t n = m->sym_lazy ? f->ninl : 0, k = 1;
    while (k <= n && gm_cuda_header(f->inl[k - 1].file)) k++;
    return k;
}

int gm_frame_internal(const gm_model *m, long fi) {
    if (fi < 0 || (size_t)fi >= m->nframes) return 0;
    const gm_frame *f = &m->frames[fi];
    if (f->python) return 0;
    if (internal_module(m, f)) return 1;
    gm_sym_frame(m, fi); /* the file is known once symbolized */
    return cuda_header_functions(m, f) == 1 + (m->sym_lazy ? f->ninl : 0);
}

/* the directory component after "site-packages/" or "dist-packages/", if the path has one */
static const char *package_of(const char *file) {
    const char *p = strstr(file, "-packages/");
    if (!p || p - file < 5 || (strncmp(p - 4, "site", 4) != 0 && strncmp(p - 4, "dist", 4) != 0))
        return NULL;
    return p + 10;
}

int gm_python_user_frame(const gm_frame *f) {
    if (!f->python) return 0;
    const char *file = f->file ? f->file : "";
    if (strncmp(file, "<frozen", 7) == 0) return 0;
    const char *pkg = package_of(file);
    if (pkg) /* torch, torchvision, ... */
        return strncmp(pkg, "torch", 5) != 0 && strncmp(pkg, "functorch", 9) != 0 &&
               strncmp(pkg, "gpumem/", 7) != 0;
    /* the standard library: .../lib/python3.11/... */
    const char *l = strstr(file, "/lib/python");
    if (l && l[11] >= '2' && l[11] <= '3' && l[12] == '.') return 0;
    /* the gpumem module wherever it is installed: .../gpumem/__init__.py */
    const char *b = strrchr(file, '/');
    if (b && b - file >= 7 && strncmp(b - 7, "/gpumem", 7) == 0) return 0;
    return 1;
}

/* The innermost Python frame at or after depth `from` that is the user's code (any Python frame
 * when any_python), its depth in *at; -1 when none. */
static long python_frame_from(const gm_model *m, uint32_t stack, size_t from, int any_python,
                              size_t *at) {
    size_t n;
    gm_stack_frame(m, stack, 0, &n);
    for (size_t i = from; i < n; i++) {
        long f = gm_stack_frame(m, stack, i, NULL);
        if (f < 0 || !m->frames[f].python) continue;
        if (any_python || gm_python_user_frame(&m->frames[f])) {
            if (at) *at = i;
            return f;
        }
    }
    return -1;
}

long gm_stack_site(const gm_model *m, uint32_t stack) {
    size_t n;
    long first = gm_stack_frame(m, stack, 0, &n);
    if (!m->frames_all) {
        long f = python_frame_from(m, stack, 0, 0, NULL);
        if (f < 0) f = python_frame_from(m, stack, 0, 1, NULL);
        if (f >= 0) return f;
    }
    for (size_t i = 0; i < n; i++) {
        long f = gm_stack_frame(m, stack, i, NULL);
        if (f >= 0 && !gm_frame_internal(m, f)) return f;
    }
    return first;
}

/* A C++ function's name as a person reads it: "c10::cuda::CUDACachingAllocator::Native::
 * DeviceCachingAllocator::alloc_block", not its mangled symbol (libiberty, without the
 * parameters: a call site names a function, not its overload); malloc'ed, or NULL when the
 * name is not a mangled one. */
char *gm_readable_function(const char *fn) {
    if (!fn || fn[0] != '_' || fn[1] != 'Z') return NULL;
    return cplus_demangle(fn, DMGL_ANSI);
}

static void frame_desc(const gm_model *m, const gm_frame *f, char *out, size_t outsz) {
    if (f->python) {
        const char *file = f->file ? f->file : "?";
        const char *fb = strrchr(file, '/');
        snprintf(out, outsz, "%s:%u in %s", fb ? fb + 1 : file, f->line, f->function ? f->function : "?");
        return;
    }
    const char *mod = f->module && f->module <= m->nmods && m->mods[f->module - 1].path
                          ? m->mods[f->module - 1].path : "?";
    const char *mb = strrchr(mod, '/');
    mb = mb ? mb + 1 : mod;
    /* a recorded frame whose code is a CUDA header wrapper inlined into the program's: named by
     * the program's function, as gm_expand_inlines' frames are once the wrapper's is skipped */
    uint32_t h = cuda_header_functions(m, f);
    const char *func = f->function, *file = f->file;
    unsigned line = f->line;
    if (h && m->sym_lazy && h <= f->ninl) func = f->inl[h - 1].function, file = f->inl[h - 1].file, line = f->inl[h - 1].line;
    char *dm = gm_readable_function(func);
    const char *fn = dm ? dm : func;
    if (fn && file) {
        const char *fb = strrchr(file, '/');
        snprintf(out, outsz, "%s (%s:%u)", fn, fb ? fb + 1 : file, line);
    } else if (fn) {
        snprintf(out, outsz, "%s (%s)", fn, mb);
    } else {
        snprintf(out, outsz, "%s+0x%llx", mb, (unsigned long long)f->offset);
    }
    free(dm);
}

void gm_frame_desc(const gm_model *m, long fi, char *out, size_t outsz) {
    if (fi < 0 || (size_t)fi >= m->nframes) {
        snprintf(out, outsz, "(unknown)");
        return;
    }
    gm_sym_frame(m, fi);
    frame_desc(m, &m->frames[fi], out, outsz);
}

/* " < caller" after out's text, when it fits */
static void append_caller(const gm_model *m, long c, const gm_frame *cf, char *out, size_t outsz) {
    size_t o = strlen(out);
    if (o + 4 >= outsz) return;
    snprintf(out + o, outsz - o, " < ");
    if (cf) frame_desc(m, cf, out + o + 3, outsz - o - 3);
    else gm_frame_desc(m, c, out + o + 3, outsz - o - 3);
}

long gm_site_desc(const gm_model *m, uint32_t stack, char *out, size_t outsz) {
    /* the call site and its caller: allocation wrappers (t_alloc, my_alloc...) are common, and
     * the caller is what tells them apart */
    long f = gm_stack_site(m, stack);
    gm_frame_desc(m, f, out, outsz);
    size_t len;
    gm_stack_frame(m, stack, 0, &len);
    if (!m->frames_all && f >= 0 && m->frames[f].python) {
        /* a Python site's caller is the next frame of the user's code: the library frames in
         * between (torch.nn's _call_impl, ...) are skipped */
        size_t at = 0;
        for (size_t d = 0; d < len; d++)
            if (gm_stack_frame(m, stack, d, NULL) == f) {
                at = d;
                break;
            }
        long c = python_frame_from(m, stack, at + 1, 0, NULL);
        size_t o = strlen(out);
        if (c >= 0 && o + 4 < outsz) {
            snprintf(out + o, outsz - o, " < ");
            gm_frame_desc(m, c, out + o + 3, outsz - o - 3);
        }
        return f;
    }
    for (size_t d = 0; d < len; d++)
        if (gm_stack_frame(m, stack, d, NULL) == f) {
            /* stacks as recorded (gm_symbolize_sites): the site's inline chain comes first, as
             * gm_expand_inlines puts it after the site */
            const gm_frame *sf = f >= 0 ? &m->frames[f] : NULL;
            uint32_t h = sf ? cuda_header_functions(m, sf) : 0; /* named by inl[h - 1] */
            if (m->sym_lazy && sf && sf->ninl > h) {
                gm_frame in = {.module = sf->module, .offset = sf->offset, .symbolized = 1,
                               .function = sf->inl[h].function, .file = sf->inl[h].file,
                               .line = sf->inl[h].line, .inl_depth = h + 1};
                append_caller(m, -1, &in, out, outsz);
            } else if (d + 1 < len) {
                long c = gm_stack_frame(m, stack, d + 1, NULL);
                if (c >= 0) append_caller(m, c, NULL, out, outsz);
            }
            break;
        }
    return f;
}

/* ---------------------------------------------------------------- the limit an OOM met */

uint64_t gm_oom_limit_col(const gm_db *d, sqlite3_stmt *s, int col) {
    if (sqlite3_column_type(s, col) == SQLITE_NULL) return GM_NO_LIMIT;
    uint64_t v = (uint64_t)sqlite3_column_int64(s, col);
    int before_1_4 = d->schema_major < 1 || (d->schema_major == 1 && d->schema_minor < 4);
    return v == 0 && before_1_4 ? GM_NO_LIMIT : v;
}

gm_oom_bound gm_oom_limit_from(gm_db *d, uint64_t limit, unsigned flags) {
    if (limit == GM_NO_LIMIT) return GM_OOM_DEVICE;
    /* PyTorch's fraction: its start value from PYTORCH_CUDA_ALLOC_CONF's key (both flags: the
     * merge's, gm_torch.c), or a set_per_process_memory_fraction call's */
    if (flags & REC_F_OOM_FRACTION) return flags & REC_F_OOM_KEY ? GM_OOM_TORCH_KEY : GM_OOM_FRACTION;
    /* the key's share below the limit in bytes: the recorder flags it (recordings before the
     * flag name the limit, GM_OOM_LIMIT's words say either) */
    if (flags & REC_F_OOM_KEY) return GM_OOM_KEY;
    /* GPUMEM_LIMIT overrides GPUMEM_CONF's limit key in the recorded config, so the config
     * alone cannot say which one the program ran with: the recorder writes it down */
    char from[32];
    gm_meta_text(d, "limit_from", from, sizeof from);
    return !strcmp(from, "GPUMEM_LIMIT")  ? GM_OOM_LIMIT_ENV
           : !strcmp(from, "GPUMEM_CONF") ? GM_OOM_LIMIT_CONF
                                          : GM_OOM_LIMIT;
}

gm_oom_bound gm_oom_binding(gm_db *d, uint64_t limit, uint64_t reserved, uint64_t device_free,
                            unsigned flags) {
    /* the same comparison as report's binding constraint: a limit binds where it left no more
     * room than the device did */
    if (limit == GM_NO_LIMIT || limit > reserved + device_free) return GM_OOM_DEVICE;
    return gm_oom_limit_from(d, limit, flags);
}

const char *gm_oom_knob(gm_oom_bound b) {
    switch (b) {
    case GM_OOM_LIMIT_ENV: return "GPUMEM_LIMIT";
    case GM_OOM_LIMIT_CONF: return "the limit key of GPUMEM_CONF";
    case GM_OOM_LIMIT: return "GPUMEM_LIMIT (or the limit key of GPUMEM_CONF)";
    case GM_OOM_KEY: return "the per_process_memory_fraction key of GPUMEM_CONF";
    case GM_OOM_FRACTION:
        return "PyTorch's per-process memory fraction (torch.cuda.set_per_process_memory_fraction)";
    case GM_OOM_TORCH_KEY:
        return "PyTorch's per-process memory fraction (the per_process_memory_fraction key of "
               "PYTORCH_CUDA_ALLOC_CONF)";
    case GM_OOM_DEVICE: break;
    }
    return NULL;
}

const char *gm_oom_fraction_how(gm_oom_bound b) {
    return b == GM_OOM_FRACTION    ? "torch.cuda.set_per_process_memory_fraction"
           : b == GM_OOM_TORCH_KEY ? "the per_process_memory_fraction key of PYTORCH_CUDA_ALLOC_CONF"
                                   : NULL;
}

const char *gm_oom_rerun(gm_oom_bound b) {
    switch (b) {
    case GM_OOM_LIMIT_ENV: return "rerun with GPUMEM_LIMIT raised";
    case GM_OOM_LIMIT_CONF: return "rerun with the limit key of GPUMEM_CONF raised";
    case GM_OOM_LIMIT: return "rerun with GPUMEM_LIMIT (or the limit key of GPUMEM_CONF) raised";
    case GM_OOM_KEY: return "rerun with the per_process_memory_fraction key of GPUMEM_CONF raised";
    case GM_OOM_FRACTION:
        return "rerun with PyTorch's per-process memory fraction raised "
               "(torch.cuda.set_per_process_memory_fraction)";
    case GM_OOM_TORCH_KEY:
        return "rerun with the per_process_memory_fraction key of PYTORCH_CUDA_ALLOC_CONF raised";
    case GM_OOM_DEVICE: break;
    }
    /* no knob of the run's raises the device: a smaller run or a larger device does */
    return "the device was full: rerun with a lower peak (a smaller batch or sequence) or on a "
           "device with more memory (GPUMEM_SIM_MEMORY on the virtual GPU)";
}

const char *gm_oom_json(gm_oom_bound b) {
    switch (b) {
    case GM_OOM_LIMIT_ENV:
    case GM_OOM_LIMIT: return "GPUMEM_LIMIT";
    case GM_OOM_LIMIT_CONF: return "GPUMEM_CONF";
    case GM_OOM_FRACTION: return "per_process_memory_fraction";
    case GM_OOM_KEY: return "GPUMEM_CONF:per_process_memory_fraction";
    case GM_OOM_TORCH_KEY: return "PYTORCH_CUDA_ALLOC_CONF:per_process_memory_fraction";
    case GM_OOM_DEVICE: break;
    }
    return NULL;
}
