/* gm_frag.c — the analysis behind `gpumem frag`.
 *
 * The question: the allocator reserved R bytes while the program held A; where did R − A go,
 * and what setting gives it back? Three sources answer it.
 *
 * 1. The allocator's own state (for a PyTorch program on PyTorch's allocator: PyTorch's, rebuilt
 *    from its merged trace, torch_snap; the timeline then counts PyTorch's too). The recorder writes every segment and block at the reserved
 *    peak and right after each OOM (tables snapshots/segments/blocks), from the same walk the
 *    allocator's invariant checker uses, so the blocks tile every mapped byte. Each free byte
 *    is given exactly one cause, the first that applies (enum gm_frag_cause, in order):
 *    pending frees wait for stream work; a block cached in another stream's pool or in the
 *    other size pool cannot serve the request of the moment; in a classic segment (one driver
 *    allocation) that still holds live blocks, free space is either the segment's tail or held
 *    between live neighbours — segments never merge, so the live block that dies last keeps all
 *    of it; in an expandable segment, free bytes in a page that also holds live bytes cannot be
 *    unmapped (granularity); free segments or pages each smaller than the request of the moment
 *    while together larger are the size-class mismatch that made the allocator grow; what is
 *    left is cache the allocator kept rather than gave back. "The request of the moment" is the
 *    OOM's request, and at the peak the allocation that made reserved grow to it: the last
 *    allocation before the snapshot that needed the driver (events.flags 512).
 * 2. One sweep of the events: reserved and allocated over time (the timeline, per step, at the
 *    moment the gap was widest), and which allocation was live at each address at the snapshot
 *    (so a pinning block is named by its tensor and call site). The rows come from the events
 *    table's pages (read/gm_analyze_pages.c), as the report's do: through SQLite they were a
 *    quarter of frag's time on a 10-million-event recording. The sweep is shown the rows of the
 *    replays' model as it loads (gm_replay_trace_load_tap), so the events are read once.
 * 3. Replays of the recorded trace (gm_advise.c's model, alloc/'s allocator on its in-memory
 *    backend, the same code that ran in the program) under the recorded configuration and under
 *    candidate changes. A change is a fix when its replayed peak reserved is below the recorded
 *    configuration's replay; the recorded configuration's replay is checked against the
 *    recording and the difference, if any, is said.
 */
#include "snapshot/analyze/gm_frag.h"

#include "snapshot/analyze/gm_advise.h"
#include "snapshot/analyze/gm_replay.h"
#include "snapshot/analyze/gm_tstate.h"
#include "snapshot/analyze/gm_tune.h"
#include "snapshot/read/gm_analyze_pages.h"
#include "snapshot/record/rec.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const gm_frag_cause_name[GM_FC_N] = {
    "rounding",   "pending_free", "graph_pool", "other_stream", "other_pool", "pinned",
    "segment_tail", "granularity", "size_class", "cached",     "unattributed"};

/* free block sizes: upper bounds (inclusive) of each bucket but the last */
static const uint64_t hist_max[GM_FRAG_NHIST - 1] = {
    (uint64_t)64 << 10, (uint64_t)1 << 20, (uint64_t)2 << 20, (uint64_t)8 << 20, (uint64_t)32 << 20,
    (uint64_t)128 << 20, (uint64_t)512 << 20, (uint64_t)2 << 30};
const char *const gm_frag_hist_name[GM_FRAG_NHIST] = {
    "<= 64 KiB", "<= 1 MiB", "<= 2 MiB", "<= 8 MiB", "<= 32 MiB", "<= 128 MiB", "<= 512 MiB", "<= 2 GiB", "> 2 GiB"};

#define SMALL_REQUEST ((uint64_t)1 << 20) /* the allocator's small pool: requests <= 1 MiB */
#define PAGE_DEFAULT ((uint64_t)2 << 20)  /* mapping granularity when the config says 0 */
#define TIMELINE_BUCKETS 24

typedef struct snap_seg {
    uint64_t stream, addr, size, mapped;
    uint64_t pool; /* its private pool (gm_frag_pool.private_pool), 0 none */
    int device;
    uint32_t flags;
    uint64_t live;     /* bytes of live blocks */
    uint64_t live_end; /* end of its last live block (0: none) */
    size_t last_pin;   /* block index of its live block that dies last, SIZE_MAX none */
} snap_seg;

typedef struct snap_block {
    uint64_t addr, size, requested;
    uint64_t alloc_id; /* the allocator's id of its allocation (0: unknown, e.g. an import) */
    uint32_t segment, state;
    uint64_t birth; /* allocation live at addr at the snapshot (sweep), 0 unknown */
    uint64_t death; /* its free (sweep), 0 alive at the end */
} snap_block;

typedef struct snap {
    int64_t id;
    uint64_t seq;
    int device, reason;
    snap_seg *segs;
    size_t nsegs;
    snap_block *blocks;
    size_t nblocks;
    /* filled by the sweep */
    int resolved;
    int need_known;
    uint64_t need_seq, need_size, need_stream_id, need_addr;
    uint64_t need_pool; /* the private pool the request was made in, 0 none */
    /* OOM: its row */
    uint64_t oom_requested, oom_stream_id;
} snap;

static void snap_free(snap *s) {
    free(s->segs);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}

static int fail_sql(gm_db *d, char *err, size_t errsz, const char *what) {
    snprintf(err, errsz, "%s: cannot read %s: %s", d->path, what, sqlite3_errmsg(d->db));
    return -1;
}

/* gpumem's pools of a graph capture are keyed by the capture (preload/driver.c's capture_key_of:
 * its id * 4 + 1), never a stream handle (a pointer, aligned): their segments are a private pool,
 * the capture's. */
static int capture_key(uint64_t stream) { return stream > 1 && (stream & 3) == 1; }

static int snap_load(gm_db *d, snap *s, char *err, size_t errsz) {
    sqlite3_stmt *st;
    size_t cap = 0;
    if (sqlite3_prepare_v2(d->db, "SELECT idx, stream, addr, size, mapped, flags, device FROM segments "
                                  "WHERE snapshot = ? ORDER BY idx", -1, &st, NULL) != SQLITE_OK)
        return fail_sql(d, err, errsz, "segments");
    sqlite3_bind_int64(st, 1, s->id);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t idx = sqlite3_column_int64(st, 0);
        if (idx < 0 || idx > 1 << 24) continue;
        if ((size_t)idx >= cap) {
            size_t nc = cap ? cap : 64;
            while (nc <= (size_t)idx) nc *= 2;
            snap_seg *n = realloc(s->segs, nc * sizeof *n);
            if (!n) {
                sqlite3_finalize(st);
                snprintf(err, errsz, "out of memory reading segments");
                return -1;
            }
            memset(n + cap, 0, (nc - cap) * sizeof *n);
            s->segs = n, cap = nc;
        }
        snap_seg *g = &s->segs[idx];
        g->stream = (uint64_t)sqlite3_column_int64(st, 1);
        g->addr = (uint64_t)sqlite3_column_int64(st, 2);
        g->size = (uint64_t)sqlite3_column_int64(st, 3);
        g->mapped = (uint64_t)sqlite3_column_int64(st, 4);
        g->flags = (uint32_t)sqlite3_column_int64(st, 5);
        g->device = sqlite3_column_int(st, 6);
        g->pool = capture_key(g->stream) ? g->stream : 0;
        g->last_pin = SIZE_MAX;
        if ((size_t)idx + 1 > s->nsegs) s->nsegs = (size_t)idx + 1;
    }
    sqlite3_finalize(st);
    cap = 0;
    if (sqlite3_prepare_v2(d->db, "SELECT addr, segment, state, size, requested, alloc_id FROM blocks "
                                  "WHERE snapshot = ? ORDER BY addr", -1, &st, NULL) != SQLITE_OK)
        return fail_sql(d, err, errsz, "blocks");
    sqlite3_bind_int64(st, 1, s->id);
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (s->nblocks == cap) {
            size_t nc = cap ? 2 * cap : 256;
            snap_block *n = realloc(s->blocks, nc * sizeof *n);
            if (!n) {
                sqlite3_finalize(st);
                snprintf(err, errsz, "out of memory reading blocks");
                return -1;
            }
            s->blocks = n, cap = nc;
        }
        snap_block *b = &s->blocks[s->nblocks];
        b->addr = (uint64_t)sqlite3_column_int64(st, 0);
        int64_t seg = sqlite3_column_int64(st, 1);
        b->state = (uint32_t)sqlite3_column_int64(st, 2);
        b->size = (uint64_t)sqlite3_column_int64(st, 3);
        b->requested = (uint64_t)sqlite3_column_int64(st, 4);
        b->alloc_id = (uint64_t)sqlite3_column_int64(st, 5);
        b->birth = 0;
        if (seg < 0 || (size_t)seg >= s->nsegs) continue; /* a block of no segment: skip it */
        b->segment = (uint32_t)seg;
        s->nblocks++;
    }
    sqlite3_finalize(st);
    return 0;
}

/* ---------------------------------------------------------------- the sweep */

/* A live allocation of the sweep: its birth seq, block size and gm_alloc_key (0: none, or no
 * snapshot ahead to ask for it). */
typedef struct sweep_live {
    uint64_t birth, size, key;
    int own; /* its own segment (GM_ALLOC_OWN_SEGMENT): in reserved until its free */
} sweep_live;

/* Resolves which allocation each allocated block of s belongs to: by identity (the block's
 * alloc_id, ids: key -> birth of the live allocations), else (no id: an import) the one live at
 * its address now (live: addr -> slot of lv). Their frees are watched for (watch: birth -> death
 * seq, 0 until it comes). */
static void snap_resolve(snap *s, const u64map *live, const sweep_live *lv, const u64map *ids,
                         u64map *watch) {
    for (size_t i = 0; i < s->nblocks; i++) {
        snap_block *b = &s->blocks[i];
        if (b->state != REC_BLOCK_ALLOCATED) continue;
        uint64_t key = gm_alloc_key(s->segs[b->segment].device, b->alloc_id);
        const uint64_t *v = key ? u64map_get(ids, key) : NULL;
        const uint64_t *slot = v ? NULL : u64map_get(live, b->addr);
        if (slot) v = &lv[*slot].birth;
        if (v) {
            b->birth = *v;
            if (!u64map_get(watch, *v)) u64map_put(watch, *v, 0);
        }
    }
    s->resolved = 1;
}

static void snap_need(snap *s, const uint64_t *miss, const uint64_t *any) {
    if (s->reason != REC_SNAP_PEAK) return;
    const uint64_t *w = miss[0] ? miss : any; /* seq, size, stream, addr */
    s->need_known = w[0] != 0;
    s->need_seq = w[0], s->need_size = w[1], s->need_stream_id = w[2], s->need_addr = w[3];
}

/* What the sweep wrote into s, undone (the pages gave up: SQLite sweeps again from the start). */
static void snap_unresolve(snap *s) {
    for (size_t i = 0; i < s->nblocks; i++) s->blocks[i].birth = 0;
    s->resolved = 0;
    if (s->reason != REC_SNAP_PEAK) return;
    s->need_known = 0;
    s->need_seq = s->need_size = s->need_stream_id = s->need_addr = 0;
}

static int is_dev_alloc(unsigned k) { return k == REC_ALLOC || k == REC_ALLOC_ASYNC; }
static int is_dev_free(unsigned k) { return k == REC_FREE || k == REC_FREE_ASYNC; }

enum { NDEV = 64 }; /* devices told apart by the request of the moment; others count as 0 */

/* The sweep's state between rows. */
typedef struct fsweep {
    const gm_model *m;
    snap *snaps;
    size_t nsnaps, si; /* snaps[si..] not reached yet */
    uint64_t span;
    u64map live;       /* addr -> slot in lv, of the live allocation there */
    sweep_live *lv;    /* slots; the free ones chained through birth */
    size_t nlv, lvcap;
    uint64_t lv_free;  /* first free slot, UINT64_MAX none */
    u64map ids;        /* gm_alloc_key -> birth seq, of the live allocations (while a
                        * snapshot is ahead) */
    u64map watch;      /* birth -> death, for the allocations live at a snapshot */
    int by_step;
    gm_frag_point *pts;
    size_t npoints, cap;
    u64map step_idx;   /* step -> its point */
    uint32_t last_range;
    size_t last_ix;    /* the point of last_range's step, SIZE_MAX none */
    uint64_t allocated, reserved, peak_reserved;
    int have_segments;
    int torch;         /* PyTorch's allocator (its trace merged): its tensors and segments */
    /* last allocation that needed the driver, and last allocation, per device (snapshots are
     * per device): seq, size, stream, addr */
    uint64_t miss[NDEV][4], any[NDEV][4];
    int stopped;       /* out of memory: the timeline stops at that row */
    int nomem;         /* a fresh state could not be made */
} fsweep;

static void fsweep_free(fsweep *w) {
    u64map_free(&w->live);
    u64map_free(&w->ids);
    u64map_free(&w->watch);
    u64map_free(&w->step_idx);
    free(w->lv);
    free(w->pts);
}

/* A fresh state (w->m, snaps, nsnaps and span set). 0, or -1 (out of memory). */
static int fsweep_start(fsweep *w) {
    w->by_step = 0;
    for (size_t i = 0; i < w->m->nranges && !w->by_step; i++) w->by_step = w->m->ranges[i].step >= 0;
    w->npoints = w->cap = w->by_step ? 0 : TIMELINE_BUCKETS;
    w->pts = calloc(w->npoints ? w->npoints : 1, sizeof *w->pts);
    if (!w->pts) return -1;
    for (size_t i = 0; i < w->npoints; i++) w->pts[i].step = (int64_t)i;
    w->lv_free = UINT64_MAX;
    w->last_ix = SIZE_MAX;
    return 0;
}

/* The point of step `step`, made when it is new. SIZE_MAX: out of memory. */
static size_t step_point(fsweep *w, int64_t step) {
    uint64_t *ix = u64map_get(&w->step_idx, (uint64_t)step);
    if (ix) return (size_t)*ix;
    if (w->npoints == w->cap) {
        size_t nc = w->cap ? 2 * w->cap : 64;
        gm_frag_point *n = realloc(w->pts, nc * sizeof *n);
        if (!n) return SIZE_MAX;
        w->pts = n, w->cap = nc;
    }
    memset(&w->pts[w->npoints], 0, sizeof *w->pts);
    w->pts[w->npoints].step = step;
    if (u64map_put(&w->step_idx, (uint64_t)step, w->npoints) != 0) return SIZE_MAX;
    return w->npoints++;
}

/* The snapshots taken before seq (all: every one left, at the end) resolved. */
static void snaps_reached(fsweep *w, uint64_t seq, int all) {
    for (; w->si < w->nsnaps && (all || w->snaps[w->si].seq < seq); w->si++) {
        snap *s = &w->snaps[w->si];
        int dv = s->device >= 0 && s->device < NDEV ? s->device : 0;
        snap_resolve(s, &w->live, w->lv, &w->ids, &w->watch);
        snap_need(s, w->miss[dv], w->any[dv]);
    }
}

/* One events row. 0, or -1 (out of memory: the sweep stops there). */
static int fsweep_row(fsweep *w, const gm_event_row *e) {
    uint64_t seq = (uint64_t)e->seq;
    snaps_reached(w, seq, 0);
    unsigned kind = (unsigned)e->kind;
    /* NULL reads as -1 from the pages and as 0 through SQLite: the key takes it as device 0 */
    int dev = e->device < 0 ? 0 : (int)e->device;
    int dv = dev < NDEV ? dev : 0;
    if (w->by_step) {
        /* every row's step, whatever its kind: a step begins at its first event (a launch, a
         * range, a tensor), with what was live then. Most steps of a PyTorch run allocate and
         * free no device memory (its cache serves them), and hold what they carried in. The
         * row's phase as every reader takes it (gm_event_range): its push/pop range (NULL reads
         * as -1 from the pages, 0 through SQLite), else the start/end range open at its time;
         * none for a free by gpumem's exit hooks (gm_row_range), though an OOM left one open */
        uint32_t range = gm_row_range(w->m, e->range > 0 && e->range <= UINT32_MAX ? (uint32_t)e->range : 0, e->t,
                                      kind, (unsigned)e->flags);
        if (range != w->last_range) {
            const gm_range *r = range ? gm_range_of(w->m, range) : NULL;
            size_t np = w->npoints;
            w->last_range = range;
            w->last_ix = r && r->step >= 0 ? step_point(w, r->step) : SIZE_MAX;
            if (r && r->step >= 0 && w->last_ix == SIZE_MAX) return -1;
            if (w->npoints > np) { /* a new step: the moment before this row */
                uint64_t res = w->have_segments ? w->reserved : w->allocated;
                gm_frag_point *p = &w->pts[w->last_ix];
                p->seq = seq > 1 ? seq - 1 : 1;
                p->reserved = res, p->allocated = w->allocated < res ? w->allocated : res;
            }
        }
    }
    if (w->torch) {
        /* PyTorch's statistics, as its max_memory_reserved() counts: a tensor's block from its
         * alloc to its free, its segments; gpumem's own events are those segments again */
        uint64_t size = (uint64_t)e->size;
        if (kind == REC_TORCH_ALLOC) w->allocated += size;
        else if (kind == REC_TORCH_FREE) w->allocated -= size < w->allocated ? size : w->allocated;
        else if (kind == REC_TORCH_SEG_MAP) w->reserved += size, w->have_segments = 1;
        else if (kind == REC_TORCH_SEG_UNMAP) w->reserved -= size < w->reserved ? size : w->reserved;
        else return 0;
    } else if (is_dev_alloc(kind) || is_dev_free(kind)) {
        uint64_t addr = (uint64_t)e->addr, slot;
        int ahead = w->si < w->nsnaps; /* ids are read by a snapshot still to come */
        if (u64map_del(&w->live, addr, &slot)) {
            sweep_live *l = &w->lv[slot];
            w->allocated -= l->size < w->allocated ? l->size : w->allocated;
            if (l->own) w->reserved -= l->size < w->reserved ? l->size : w->reserved;
            if (l->key) u64map_del(&w->ids, l->key, NULL);
            if (w->watch.count) {
                uint64_t *x = u64map_get(&w->watch, l->birth);
                if (x && !*x) *x = seq;
            }
            l->birth = w->lv_free, w->lv_free = slot;
        }
        if (is_dev_alloc(kind)) {
            uint64_t size = (uint64_t)e->size;
            if (w->lv_free != UINT64_MAX) {
                slot = w->lv_free, w->lv_free = w->lv[slot].birth;
            } else {
                if (w->nlv == w->lvcap) {
                    size_t nc = w->lvcap ? 2 * w->lvcap : 1024;
                    sweep_live *n = realloc(w->lv, nc * sizeof *n);
                    if (!n) return -1;
                    w->lv = n, w->lvcap = nc;
                }
                slot = w->nlv++;
            }
            uint64_t key = ahead ? gm_alloc_key(dev, (uint64_t)e->alloc_id) : 0;
            if (key && u64map_put(&w->ids, key, seq) != 0) key = 0;
            int own = rec_is_own_segment(kind, (unsigned)e->flags);
            w->lv[slot] = (sweep_live){seq, size, key, own};
            if (u64map_put(&w->live, addr, slot) != 0) return -1;
            w->allocated += size;
            if (own) w->reserved += size;
            uint64_t ev[4] = {seq, size, (uint64_t)e->stream, addr};
            memcpy(w->any[dv], ev, sizeof ev);
            if (rec_is_cache_miss(kind, (unsigned)e->flags)) memcpy(w->miss[dv], ev, sizeof ev);
        }
    } else if (kind == REC_SEG_MAP || kind == REC_DRIVER_ALLOC) {
        w->reserved += (uint64_t)e->size, w->have_segments = 1;
    } else if (kind == REC_SEG_UNMAP || kind == REC_DRIVER_FREE) {
        uint64_t size = (uint64_t)e->size;
        w->reserved -= size < w->reserved ? size : w->reserved, w->have_segments = 1;
    } else {
        return 0;
    }
    uint64_t res = w->have_segments ? w->reserved : w->allocated;
    if (res > w->peak_reserved) w->peak_reserved = res;
    gm_frag_point *p = NULL;
    if (w->by_step) {
        if (w->last_ix != SIZE_MAX) p = &w->pts[w->last_ix];
    } else {
        uint64_t span = w->span;
        size_t b = (size_t)((seq >= span ? span - 1 : seq) * TIMELINE_BUCKETS / span);
        p = &w->pts[b < TIMELINE_BUCKETS ? b : TIMELINE_BUCKETS - 1];
    }
    uint64_t al = w->allocated < res ? w->allocated : res;
    if (p && (!p->seq || res - al > p->reserved - p->allocated ||
              (res - al == p->reserved - p->allocated && res > p->reserved))) {
        p->seq = seq;
        p->reserved = res;
        p->allocated = al;
    }
    return 0;
}

static int fsweep_rows(void *ctx, const gm_event_row *rows, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fsweep_row(ctx, &rows[i]) != 0) return -1;
    return 0;
}

/* The model's rows, as the sweep's own read would hand them (a failed row stops the timeline
 * there, as it stopped that read; the model's load goes on). */
static int fsweep_tap_rows(void *ctx, const gm_event_row *rows, size_t n) {
    fsweep *w = ctx;
    if (!w->stopped && !w->nomem && fsweep_rows(w, rows, n) != 0) w->stopped = 1;
    return 0;
}

/* What the sweep made of the rows so far, dropped (they come again from the first). */
static void fsweep_restart(void *ctx) {
    fsweep *w = ctx;
    fsweep_free(w);
    for (size_t i = 0; i < w->nsnaps; i++) snap_unresolve(&w->snaps[i]);
    *w = (fsweep){.m = w->m, .snaps = w->snaps, .nsnaps = w->nsnaps, .span = w->span, .torch = w->torch};
    if (fsweep_start(w) != 0) w->nomem = 1;
}

/* The replays' trace model (gm_replay_trace_load), loaded in the sweep's pass. */
typedef struct fix_model {
    adv_model am;
    int ok;         /* loaded */
    char err[512];  /* else why not */
} fix_model;

/* One pass over the events: the timeline, reserved at its peak, and the state each snapshot
 * needs (who is live where and when it dies, which request grew reserved). snaps sorted by seq.
 * The rows are the replays' model's, as it loads (fm); where that load does not show them all
 * (a PyTorch history, an error), the sweep reads them itself: from the table's pages
 * (gm_analyze_pages.c) or, where the file is not what the recorder writes, through SQLite. The
 * same rows every way. */
static int sweep(gm_db *d, const gm_model *m, snap *snaps, size_t nsnaps, int torch, gm_frag *f, fix_model *fm,
                 char *err, size_t errsz) {
    sqlite3_stmt *st;
    uint64_t span = 1;
    if (sqlite3_prepare_v2(d->db, "SELECT max(seq) FROM events", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW) span = (uint64_t)sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    if (!span) span = 1;
    fsweep w = {.m = m, .snaps = snaps, .nsnaps = nsnaps, .span = span, .torch = torch};
    if (fsweep_start(&w) != 0) {
        fsweep_free(&w);
        snprintf(err, errsz, "out of memory");
        return -1;
    }
    adv_tap tap = {.rows = fsweep_tap_rows, .restart = fsweep_restart, .ctx = &w};
    int tapped;
    fm->ok = gm_replay_trace_load_tap(d, &fm->am, &tap, &tapped, fm->err, sizeof fm->err) == 0;
    if (!tapped) { /* read apart: whatever the tap was shown is dropped */
        fsweep_restart(&w);
        int pr = w.nomem ? GM_PAGES_STOPPED : gm_events_pages(d, fsweep_rows, &w);
        if (pr == GM_PAGES_RESTART) fsweep_restart(&w);
        if (!w.nomem && (pr == GM_PAGES_NO || pr == GM_PAGES_RESTART)) pr = gm_events_sql(d, fsweep_rows, &w);
        if (pr == GM_SQL_NOQUERY) {
            fsweep_free(&w);
            return fail_sql(d, err, errsz, "events");
        }
        /* GM_SQL_ERROR, a damaged tail: the timeline stops where the file does */
    }
    if (w.nomem) {
        fsweep_free(&w);
        snprintf(err, errsz, "out of memory");
        return -1;
    }
    snaps_reached(&w, 0, 1);
    for (size_t i = 0; i < nsnaps; i++)
        for (size_t k = 0; k < snaps[i].nblocks; k++) {
            snap_block *b = &snaps[i].blocks[k];
            const uint64_t *x = b->birth ? u64map_get(&w.watch, b->birth) : NULL;
            b->death = x ? *x : 0;
        }
    /* buckets never reached (a short recording) are dropped */
    size_t k = 0;
    for (size_t i = 0; i < w.npoints; i++)
        if (w.pts[i].seq) w.pts[k++] = w.pts[i];
    f->timeline = w.pts;
    f->ntimeline = k;
    f->by_step = w.by_step;
    f->recorded_peak_reserved = w.peak_reserved;
    w.pts = NULL;
    fsweep_free(&w);
    return 0;
}

/* ---------------------------------------------------------------- classification */

static uint64_t stream_handle(gm_db *d, uint64_t id, int *known) {
    sqlite3_stmt *st;
    uint64_t h = 0;
    *known = 0;
    if (sqlite3_prepare_v2(d->db, "SELECT handle FROM streams WHERE id = ?", -1, &st, NULL) != SQLITE_OK) return 0;
    sqlite3_bind_int64(st, 1, (int64_t)id);
    if (sqlite3_step(st) == SQLITE_ROW) {
        h = (uint64_t)sqlite3_column_int64(st, 0);
        *known = 1;
    }
    sqlite3_finalize(st);
    return h;
}

/* When a block's allocation is freed (UINT64_MAX: never, 0: unknown allocation). */
static uint64_t death_of(const snap_block *b) {
    if (!b->birth) return 0;
    return b->death ? b->death : UINT64_MAX;
}

static int hist_bucket(uint64_t size) {
    int i = 0;
    while (i < GM_FRAG_NHIST - 1 && size > hist_max[i]) i++;
    return i;
}

static int pin_cmp(const void *a, const void *b) {
    const gm_frag_pin *x = a, *y = b;
    return x->free_bytes < y->free_bytes ? 1 : x->free_bytes > y->free_bytes ? -1 : 0;
}

static int classify(gm_db *d, snap *s, uint64_t page, gm_frag_state *o, char *err,
                    size_t errsz) {
    memset(o, 0, sizeof *o);
    o->oom = s->reason == REC_SNAP_OOM;
    o->seq = s->seq;
    o->device = s->device;
    /* per segment: live bytes, end of the last live block, the live block that dies last */
    for (size_t i = 0; i < s->nblocks; i++) {
        snap_block *b = &s->blocks[i];
        snap_seg *g = &s->segs[b->segment];
        if (b->state != REC_BLOCK_ALLOCATED) continue;
        g->live += b->size;
        if (b->addr + b->size > g->live_end) g->live_end = b->addr + b->size;
        if (g->last_pin == SIZE_MAX || death_of(b) > death_of(&s->blocks[g->last_pin]))
            g->last_pin = i;
    }
    for (size_t i = 0; i < s->nsegs; i++) o->reserved += s->segs[i].mapped;
    o->nsegments = s->nsegs;
    /* the request of the moment */
    int hk = 0;
    if (o->oom) {
        o->need_known = 1;
        o->need_seq = s->need_seq;
        o->need_size = (s->oom_requested + 511) / 512 * 512;
        o->need_stream = stream_handle(d, s->oom_stream_id, &hk);
    } else if (s->need_known) {
        o->need_known = 1;
        o->need_seq = s->need_seq;
        o->need_size = s->need_size;
        o->need_stream = stream_handle(d, s->need_stream_id, &hk);
        o->need_addr = s->need_addr;
    }
    int stream_known = o->need_known && hk;
    o->need_small = o->need_size <= SMALL_REQUEST;
    /* gpumem's request in a capture is made on the capture's key; PyTorch's names its pool */
    o->need_private_pool = s->need_pool ? s->need_pool : capture_key(o->need_stream) ? o->need_stream : 0;
    /* pools, histogram, and the free bytes of the request's pool */
    size_t pcap = 0;
    for (size_t i = 0; i < s->nsegs; i++) {
        snap_seg *g = &s->segs[i];
        int small = (g->flags & REC_SEG_F_SMALL_POOL) != 0;
        size_t k = 0;
        for (; k < o->npools; k++)
            if (o->pools[k].stream == g->stream && o->pools[k].small == small && o->pools[k].private_pool == g->pool)
                break;
        if (k == o->npools) {
            if (o->npools == pcap) {
                size_t nc = pcap ? 2 * pcap : 8;
                gm_frag_pool *n = realloc(o->pools, nc * sizeof *n);
                if (!n) {
                    snprintf(err, errsz, "out of memory");
                    return -1;
                }
                o->pools = n, pcap = nc;
            }
            memset(&o->pools[k], 0, sizeof o->pools[k]);
            o->pools[k].stream = g->stream;
            o->pools[k].small = small;
            o->pools[k].private_pool = g->pool;
            o->npools++;
        }
        o->pools[k].segments++;
        o->pools[k].reserved += g->mapped;
    }
    for (size_t i = 0; i < s->nblocks; i++) {
        snap_block *b = &s->blocks[i];
        snap_seg *g = &s->segs[b->segment];
        int small = (g->flags & REC_SEG_F_SMALL_POOL) != 0;
        gm_frag_pool *p = NULL;
        for (size_t k = 0; k < o->npools && !p; k++)
            if (o->pools[k].stream == g->stream && o->pools[k].small == small && o->pools[k].private_pool == g->pool)
                p = &o->pools[k];
        if (b->state == REC_BLOCK_ALLOCATED) {
            o->allocated += b->size;
            o->requested += b->requested < b->size ? b->requested : b->size;
            if (p) p->allocated += b->size;
        } else if (b->state == REC_BLOCK_FREE || b->state == REC_BLOCK_PENDING) {
            o->free_cached += b->size;
            o->nfree++;
            if (b->size > o->largest_free) o->largest_free = b->size;
            int h = hist_bucket(b->size);
            o->hist_bytes[h] += b->size;
            o->hist_count[h]++;
            if (p) {
                p->free += b->size;
                if (b->size > p->largest) p->largest = b->size;
            }
            if (b->state == REC_BLOCK_FREE && o->need_known && small == o->need_small && g->pool == o->need_private_pool &&
                (!stream_known || g->stream == o->need_stream)) {
                o->need_pool_free += b->size;
                if (b->size > o->need_pool_largest) o->need_pool_largest = b->size;
            }
        }
    }
    if (o->oom) {
        uint64_t rq = s->oom_requested;
        o->fragmentation = o->free_cached >= rq && o->largest_free < rq;
    }
    int mismatch = o->need_known && o->need_pool_free >= o->need_size && o->need_pool_largest < o->need_size;
    /* every free byte, one cause */
    gm_frag_pin *pins = calloc(s->nsegs ? s->nsegs : 1, sizeof *pins);
    if (!pins) {
        snprintf(err, errsz, "out of memory");
        return -1;
    }
    uint64_t *c = o->causes;
    c[GM_FC_ROUNDING] = o->allocated - o->requested;
    uint64_t classified = 0;
    for (size_t i = 0; i < s->nblocks; i++) {
        snap_block *b = &s->blocks[i];
        snap_seg *g = &s->segs[b->segment];
        if (b->state != REC_BLOCK_FREE && b->state != REC_BLOCK_PENDING) continue;
        classified += b->size;
        int small = (g->flags & REC_SEG_F_SMALL_POOL) != 0;
        if (b->state == REC_BLOCK_PENDING) {
            c[GM_FC_PENDING] += b->size;
        } else if (g->pool != o->need_private_pool || (g->pool && stream_known && g->stream != o->need_stream)) {
            /* a private pool serves only its own graph's (or MemPool's) allocations, and the
             * allocator gives its memory back only once the pool is released: before another
             * stream or size pool, no setting changes it (per_stream_pools:False shares the
             * allocator's own pools, never a private one's: also its blocks of another stream) */
            c[GM_FC_GRAPH_POOL] += b->size;
        } else if (stream_known && g->stream != o->need_stream) {
            c[GM_FC_OTHER_STREAM] += b->size;
        } else if (o->need_known && small != o->need_small) {
            c[GM_FC_OTHER_POOL] += b->size;
        } else if (g->live && !(g->flags & REC_SEG_F_EXPANDABLE)) {
            if (b->addr >= g->live_end) c[GM_FC_TAIL] += b->size;
            else c[GM_FC_PINNED] += b->size;
            pins[b->segment].free_bytes += b->size;
        } else if (g->live) {
            /* expandable: the parts of the block in pages that also hold live bytes. A page
             * is shared when a live block overlaps it: the block's first and last page are
             * the only candidates (pages inside the block are its own). */
            uint64_t lo = b->addr, hi = b->addr + b->size;
            uint64_t first_end = (lo / page + 1) * page, last_start = (hi - 1) / page * page;
            uint64_t shared = 0;
            int lo_shared = lo % page != 0, hi_shared = hi % page != 0;
            if (first_end >= hi) {
                shared = lo_shared || hi_shared ? b->size : 0;
            } else {
                if (lo_shared) shared += first_end - lo;
                if (hi_shared) shared += hi - last_start;
            }
            c[GM_FC_GRANULARITY] += shared;
            uint64_t whole = b->size - shared;
            if (mismatch && b->size < o->need_size) c[GM_FC_SIZE_CLASS] += whole;
            else c[GM_FC_CACHED] += whole;
        } else if (mismatch && b->size < o->need_size) {
            c[GM_FC_SIZE_CLASS] += b->size;
        } else {
            c[GM_FC_CACHED] += b->size;
        }
    }
    uint64_t gap = o->reserved > o->allocated ? o->reserved - o->allocated : 0;
    c[GM_FC_UNATTRIBUTED] = gap > classified ? gap - classified : 0;
    /* the pinning allocations, most free bytes held first */
    size_t np = 0;
    for (size_t i = 0; i < s->nsegs; i++) {
        if (!pins[i].free_bytes || s->segs[i].last_pin == SIZE_MAX) continue;
        const snap_block *pb = &s->blocks[s->segs[i].last_pin];
        pins[np] = (gm_frag_pin){pb->birth, pb->addr, pb->death, pb->size, pins[i].free_bytes, s->segs[i].mapped};
        np++;
    }
    gm_sort(pins, np, sizeof *pins, pin_cmp);
    o->pins = pins;
    o->npins = np;
    return 0;
}

/* ---------------------------------------------------------------- configurations */


/* ---------------------------------------------------------------- fixes by replay */

typedef struct cand {
    const char *change; /* in words */
    const char *conf;   /* applied on top of the recorded configuration */
    int classic_only, expandable_only, streams_only, gc;
} cand;

static const cand cands[] = {
    {"expandable segments (map pages into one growing range instead of whole segments)",
     "expandable_segments:True", 1, 0, 0, 0},
    {"expandable segments, with free pages unmapped before growing",
     "expandable_segments:True,release_before_grow:True", 0, 0, 0, 0},
    {"gpumem's own policy", "preset:gpumem", 0, 0, 0, 0},
    {"do not split blocks over 128 MiB", "max_split_size_mb:128", 1, 0, 0, 0},
    {"do not split blocks over 512 MiB", "max_split_size_mb:512", 1, 0, 0, 0},
    {"round sizes to 4 divisions per power of two", "roundup_power2_divisions:4", 0, 0, 0, 0},
    {"garbage-collect cached blocks above 80% of the limit", "garbage_collection_threshold:0.8", 0, 0, 0, 1},
    {"one pool for every stream", "per_stream_pools:False", 0, 0, 1, 0},
    /* PyTorch's keys have no word for "no limit": set by hand below */
    /* a free block of max_split_size or more is never split or given to a smaller request, so the
     * expandable segment maps new pages beside it */
    {"drop max_split_size_mb: PyTorch's runaway growth with expandable segments",
     "max_split_size_mb:none", 0, 1, 0, 0},
};

static int fix_cmp(const void *a, const void *b) {
    const gm_frag_fix *x = a, *y = b;
    if (x->peak_reserved != y->peak_reserved) return x->peak_reserved < y->peak_reserved ? -1 : 1;
    return strlen(x->conf) < strlen(y->conf) ? -1 : strlen(x->conf) > strlen(y->conf);
}

/* fx made from one of tune's results */
static void fix_of_result(gm_frag_fix *fx, const gm_replay_result *r, const char *change) {
    memset(fx, 0, sizeof *fx);
    snprintf(fx->conf, sizeof fx->conf, "%s", r->conf);
    fx->has_pytorch = gm_conf_pytorch(&r->cfg, fx->pytorch, sizeof fx->pytorch);
    fx->torch_runs = fx->has_pytorch && r->cfg.policy == ALLOC_POLICY_PYTORCH;
    fx->gpumem_policy = r->cfg.policy == ALLOC_POLICY_GPUMEM;
    snprintf(fx->change, sizeof fx->change, "%s", change);
    fx->peak_reserved = r->peak_reserved;
    fx->peak_allocated = r->peak_allocated;
}

static size_t fix_find(const gm_frag *f, const char *conf) {
    for (size_t i = 0; i < f->nfixes; i++)
        if (!strcmp(f->fixes[i].conf, conf)) return i;
    return SIZE_MAX;
}

/* The recommendation: gpumem tune's, from its search on the same trace (gm_tune_search), so that
 * frag, tune and viz name one configuration for a recording; frag's own candidates explain what
 * each change does, but a search over the keys finds what no single change on top of the recorded
 * configuration does (expandable segments without the recorded max_split_size_mb). On PyTorch's
 * allocator: the best PYTORCH_CUDA_ALLOC_CONF, and gpumem's allocator apart (best_gpumem). Tune's
 * answers join the fixes when no candidate said the same; none when the recorded configuration is
 * already the best (tune's recorded_best). The fixes are sorted here. */
static void tune_answer(gm_frag *f, gm_db *d, const adv_model *am) {
    gm_tune_opts o = {.objective = GM_TUNE_RESERVED};
    gm_tune t;
    char err[256];
    char best[512] = "", gpumem[512] = "";
    if (gm_tune_search(d, am, &o, &t, err, sizeof err) == 0 && !t.empty) {
        size_t b = f->torch ? t.best_torch : t.best;
        if (b != SIZE_MAX && !t.recorded_best) {
            snprintf(best, sizeof best, "%s", t.results[b].conf);
            if (fix_find(f, best) == SIZE_MAX)
                fix_of_result(&f->fixes[f->nfixes++], &t.results[b], "the best configuration of gpumem tune's search");
        }
        if (f->torch && t.best_gpumem != SIZE_MAX) {
            snprintf(gpumem, sizeof gpumem, "%s", t.results[t.best_gpumem].conf);
            if (fix_find(f, gpumem) == SIZE_MAX)
                fix_of_result(&f->fixes[f->nfixes++], &t.results[t.best_gpumem],
                              "the best configuration of gpumem's own allocator in gpumem tune's search");
        }
    }
    gm_tune_free(&t);
    if (f->nfixes > 1) gm_sort(f->fixes, f->nfixes, sizeof *f->fixes, fix_cmp);
    if (best[0]) f->best = fix_find(f, best);
    if (gpumem[0]) f->best_gpumem = fix_find(f, gpumem);
}

/* The recommendation among frag's own fixes (without --search): the first of them in tune's
 * final ranking (gm_tune_rank: the cost rule, then peak reserved in 1% steps, then driver time)
 * that ranks before the recorded configuration's replay (res[0]); on PyTorch's allocator the
 * first PyTorch's allocator runs, gpumem's allocator apart. res: the replays (res[0] the
 * baseline; a candidate stopped at its peak is not a fix and not ranked). The fixes are sorted
 * here. */
static void own_answer(gm_frag *f, const gm_replay_result *res, size_t nres) {
    gm_replay_result *r = calloc(nres ? nres : 1, sizeof *r);
    char base[512], best[512] = "", gpumem[512] = "";
    if (f->nfixes > 1) gm_sort(f->fixes, f->nfixes, sizeof *f->fixes, fix_cmp);
    if (!r || !nres) {
        free(r);
        return; /* out of memory: the fixes without a recommendation */
    }
    size_t n = 0;
    for (size_t i = 0; i < nres; i++) {
        r[n] = res[i];
        gm_conf_short(&r[n].cfg, r[n].conf, sizeof r[n].conf);
        if (i && fix_find(f, r[n].conf) == SIZE_MAX) continue; /* not a fix */
        r[n].has_pytorch = gm_conf_pytorch(&r[n].cfg, r[n].pytorch, sizeof r[n].pytorch);
        n++;
    }
    snprintf(base, sizeof base, "%s", r[0].conf);
    gm_tune_rank(r, n, GM_TUNE_RESERVED);
    for (size_t i = 0; i < n && strcmp(r[i].conf, base); i++) {
        int pytorch = r[i].has_pytorch && r[i].cfg.policy == ALLOC_POLICY_PYTORCH;
        if (!best[0] && (!f->torch || pytorch)) snprintf(best, sizeof best, "%s", r[i].conf);
        if (f->torch && !gpumem[0] && r[i].cfg.policy == ALLOC_POLICY_GPUMEM) snprintf(gpumem, sizeof gpumem, "%s", r[i].conf);
    }
    free(r);
    if (best[0]) f->best = fix_find(f, best);
    if (gpumem[0]) f->best_gpumem = fix_find(f, gpumem);
}

/* The fixes, replayed on fm's trace (freed here); search: the recommendation is gpumem tune's
 * (tune_answer), else the best of the fixes (own_answer). */
static void find_fixes(gm_frag *f, gm_db *d, fix_model *fm, int search) {
    if (!fm->ok) {
        snprintf(f->fix_note, sizeof f->fix_note, "no replay: %s", fm->err);
        return;
    }
    fm->ok = 0;
    adv_model am = fm->am;
    gm_conf_short(&am.cfg, f->recorded_conf, sizeof f->recorded_conf);
    f->torch = gm_replay_is_torch(&am);
    if (f->torch) snprintf(f->torch_conf, sizeof f->torch_conf, "%.511s", am.config);
    size_t ntrace = 0;
    alloc_trace_event_t *trace = am.nevs ? adv_to_trace(&am, &ntrace) : NULL;
    enum { NC = sizeof cands / sizeof *cands };
    gm_replay_result *res = calloc(NC + 1, sizeof *res);
    f->fixes = calloc(NC + 2, sizeof *f->fixes); /* and tune's two answers (tune_answer) */
    if (!trace || !res || !f->fixes) {
        snprintf(f->fix_note, sizeof f->fix_note, "no replay: %s", am.nevs ? "out of memory" : "no allocations");
        free(trace), free(res);
        adv_model_free(&am);
        return;
    }
    int streams = 0;
    for (size_t i = 1; i < am.nallocs && !streams; i++) streams = am.allocs[i].stream != am.allocs[0].stream;
    const alloc_config_t recorded = am.cfg;
    /* res[0]: the recorded configuration (the baseline); then each candidate that changes it */
    size_t nres = 0, which[NC + 1];
    res[nres].cfg = recorded, which[nres] = SIZE_MAX;
    res[nres++].markers = 1; /* its replay takes the recording's markers (alloc_replay_opts_t) */
    for (size_t i = 0; i < NC; i++) {
        const cand *k = &cands[i];
        if (k->classic_only && recorded.expandable_segments) continue;
        if (k->streams_only && !streams) continue;
        if (k->gc && recorded.limit == ALLOC_NO_LIMIT) continue; /* collection only means something under a limit */
        if (k->expandable_only && !recorded.expandable_segments) continue;
        alloc_config_t c = recorded;
        if (!strcmp(k->conf, "max_split_size_mb:none")) {
            if (recorded.max_split_size == SIZE_MAX) continue;
            c.max_split_size = SIZE_MAX;
        } else if (alloc_config_parse(&c, k->conf, NULL, 0) != ALLOC_OK) {
            continue;
        }
        /* a preset keeps the caps the program ran under: the limit, the per_process_memory_fraction key */
        c.limit = recorded.limit, c.memory_fraction = recorded.memory_fraction;
        if (gm_conf_same(&c, &recorded)) continue;
        res[nres].cfg = c, which[nres++] = i;
    }
    size_t cap = (size_t)80 << 30;
    if (2 * am.rec_peak_reserved > cap) cap = (size_t)(2 * am.rec_peak_reserved);
    /* only a configuration that reserves less than the recorded one's replay is a fix: the others
     * stop when they reach its peak (when it met no OOM; else a fix is one that meets none) */
    gm_replay_below(trace, ntrace, cap, am.device_total, am.top_down, res, nres, 0);
    const gm_replay_result *base = &res[0];
    if (!base->ok) {
        snprintf(f->fix_note, sizeof f->fix_note, "no replay: the recorded configuration could not be replayed");
    } else {
        f->replay_peak_reserved = base->peak_reserved;
        f->replay_oom = base->oom;
        for (size_t r = 1; r < nres; r++) {
            const gm_replay_result *x = &res[r];
            /* a fix reserves less; on a recording that met an OOM under its limit, a fix is one
             * that does not (the recorded replay stops at its OOM, so its peak is no baseline) */
            if (!x->ok || x->oom) continue;
            if (!base->oom && x->peak_reserved >= base->peak_reserved) continue;
            gm_frag_fix *fx = &f->fixes[f->nfixes++];
            gm_conf_short(&x->cfg, fx->conf, sizeof fx->conf);
            fx->has_pytorch = gm_conf_pytorch(&x->cfg, fx->pytorch, sizeof fx->pytorch);
            fx->torch_runs = fx->has_pytorch && x->cfg.policy == ALLOC_POLICY_PYTORCH;
            fx->gpumem_policy = x->cfg.policy == ALLOC_POLICY_GPUMEM;
            snprintf(fx->change, sizeof fx->change, "%s", cands[which[r]].change);
            fx->peak_reserved = x->peak_reserved;
            fx->peak_allocated = x->peak_allocated;
        }
        f->searched = search;
        if (search)
            tune_answer(f, d, &am);
        else
            own_answer(f, res, nres);
        if (!f->nfixes)
            snprintf(f->fix_note, sizeof f->fix_note, "%s",
                     f->replay_oom ? "no candidate configuration avoids the OOM under the recorded limit: the live "
                                     "tensors need more (gpumem advise)"
                                   : "no candidate configuration reserves less on this trace");
    }
    free(trace);
    free(res);
    adv_model_free(&am);
}

/* ---------------------------------------------------------------- PyTorch's own state */

/* A PyTorch recording on PyTorch's allocator (kinds 31-35): gpumem's snapshots there are of
 * gpumem serving PyTorch's segments (one expandable range, every segment a live block: nothing
 * to say), so the state at the peak is PyTorch's, rebuilt from its trace as `gpumem export
 * --format torch` rebuilds it: its segments (an expandable run of mapped pages one segment, as
 * PyTorch's snapshot lists it), its tensors' blocks (pending from their free to its completion),
 * the gaps free. The moment is PyTorch's reserved peak, right after the request that grew
 * reserved to it (its first allocation after that segment). */
/* s made from the captured segments and the blocks (sorted by address) live in them. */
static int tp_fill(gm_db *d, snap *s, const gm_tcapture *c, int expandable) {
    const gm_tseg *g = c->segs;
    const gm_tblk *b = c->blocks;
    size_t ng = c->nsegs, nb = c->nblocks;
    s->segs = calloc(ng ? ng : 1, sizeof *s->segs);
    s->blocks = calloc(2 * nb + ng + 1, sizeof *s->blocks);
    if (!s->segs || !s->blocks) return -1;
    size_t k = 0;
    for (size_t i = 0; i < ng; i++) {
        int known;
        snap_seg *o = &s->segs[i];
        o->stream = stream_handle(d, g[i].stream, &known);
        o->addr = g[i].addr, o->size = o->mapped = g[i].size, o->device = g[i].device, o->last_pin = SIZE_MAX;
        o->pool = g[i].pool;
        o->flags = expandable ? REC_SEG_F_EXPANDABLE : 0;
        uint64_t at = g[i].addr, end = g[i].addr + g[i].size, largest = 0;
        while (k < nb && b[k].addr < g[i].addr) k++;
        for (; k < nb && b[k].addr < end; k++) {
            if (b[k].addr > at) s->blocks[s->nblocks++] = (snap_block){.addr = at, .size = b[k].addr - at, .segment = (uint32_t)i, .state = REC_BLOCK_FREE};
            s->blocks[s->nblocks++] = (snap_block){b[k].addr, b[k].size, b[k].requested, 0, (uint32_t)i,
                                                   b[k].pending ? REC_BLOCK_PENDING : REC_BLOCK_ALLOCATED,
                                                   b[k].birth, b[k].death};
            if (b[k].size > largest) largest = b[k].size;
            at = b[k].addr + b[k].size;
        }
        if (at < end) s->blocks[s->nblocks++] = (snap_block){.addr = at, .size = end - at, .segment = (uint32_t)i, .state = REC_BLOCK_FREE};
        /* PyTorch's small pool: its 2 MiB segments, or an expandable one of small blocks */
        if (expandable ? largest && largest <= SMALL_REQUEST : g[i].size == PAGE_DEFAULT) o->flags |= REC_SEG_F_SMALL_POOL;
    }
    s->nsegs = ng;
    return 0;
}

/* The state at the moment kept (every device's segments: frag's state is of the whole
 * recording); live then maps each captured block still held (not freed) to its index, for its
 * free to be found. 0, or -1 out of memory. */
static int tp_capture(gm_tstate *st, gm_tcapture *c, u64map *live) {
    if (gm_tstate_capture(st, -1, 0, c) != 0) return -1;
    u64map_free(live);
    for (size_t i = 0; i < c->nblocks; i++)
        if (!c->blocks[i].pending && u64map_put(live, c->blocks[i].addr, i) != 0) return -1;
    return 0;
}

/* PyTorch's state at its reserved peak into s (reason REC_SNAP_PEAK). 1 made, 0 no segment in the
 * trace, -1 error. */
static int torch_snap(gm_db *d, snap *s, char *err, size_t errsz) {
    sqlite3_stmt *q;
    uint64_t res = 0, peak = 0, peak_seq = 0;
    memset(s, 0, sizeof *s);
    if (sqlite3_prepare_v2(d->db, "SELECT seq, kind, size FROM events WHERE kind IN (34, 35) ORDER BY seq", -1, &q,
                           NULL) != SQLITE_OK)
        return fail_sql(d, err, errsz, "PyTorch's segments");
    while (sqlite3_step(q) == SQLITE_ROW) {
        uint64_t size = (uint64_t)sqlite3_column_int64(q, 2);
        if (sqlite3_column_int(q, 1) == REC_TORCH_SEG_MAP) res += size;
        else res -= size < res ? size : res;
        if (res > peak) peak = res, peak_seq = (uint64_t)sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    if (!peak) return 0;
    if (sqlite3_prepare_v2(d->db, "SELECT seq, kind, addr, size, requested, stream, device, flags, "
                                  "coalesce(alloc_id, 0) FROM events "
                                  "WHERE kind BETWEEN 31 AND 35 ORDER BY seq", -1, &q, NULL) != SQLITE_OK)
        return fail_sql(d, err, errsz, "PyTorch's events");
    int expandable = gm_meta_int(d, "torch_expandable", 0) != 0, captured = 0, rc = 0;
    gm_tstate st = {0};
    gm_tcapture c = {0};
    u64map live = {0}; /* after the capture: the captured blocks still to be freed */
    while (rc == 0 && sqlite3_step(q) == SQLITE_ROW) {
        uint64_t seq = (uint64_t)sqlite3_column_int64(q, 0);
        int kind = sqlite3_column_int(q, 1);
        uint64_t addr = (uint64_t)sqlite3_column_int64(q, 2), size = (uint64_t)sqlite3_column_int64(q, 3);
        /* a private pool's row: its pool named in alloc_id (a recording merged before it was: one
         * unnamed pool) */
        uint64_t name = (uint64_t)sqlite3_column_int64(q, 8);
        uint64_t pool = (sqlite3_column_int64(q, 7) & REC_F_PRIVATE_POOL) ? (name ? name : GM_FRAG_POOL_UNNAMED) : 0;
        int need = !captured && seq > peak_seq && kind == REC_TORCH_ALLOC;
        if (!captured && seq > peak_seq && !need) { /* the moment passed with no allocation in it */
            captured = 1;
            rc = tp_capture(&st, &c, &live);
        }
        if (captured) { /* the captured blocks' frees, for the pins */
            uint64_t i;
            if (kind == REC_TORCH_FREE && u64map_del(&live, addr, &i)) c.blocks[i].death = seq;
            continue;
        }
        if (kind == REC_TORCH_ALLOC) {
            gm_tblk b = {.addr = addr, .size = size, .requested = (uint64_t)sqlite3_column_int64(q, 4), .birth = seq};
            rc = gm_tstate_block_add(&st, &b);
        } else if (kind == REC_TORCH_FREE || kind == REC_TORCH_FREE_COMPLETED) {
            gm_tblk *b = gm_tstate_block_at(&st, addr);
            if (b && kind == REC_TORCH_FREE) b->pending = 1;
            if (b && kind == REC_TORCH_FREE_COMPLETED) gm_tstate_block_drop(&st, addr);
        } else if (kind == REC_TORCH_SEG_MAP) {
            rc = gm_tstate_map(&st, addr, size, expandable, sqlite3_column_int(q, 6), (uint64_t)sqlite3_column_int64(q, 5),
                               pool);
        } else {
            rc = gm_tstate_unmap(&st, addr, size);
        }
        if (need && rc == 0) { /* the request that grew reserved to its peak: the moment */
            s->need_known = 1;
            s->need_seq = s->seq = seq, s->need_size = size, s->need_addr = addr;
            s->need_stream_id = (uint64_t)sqlite3_column_int64(q, 5);
            s->need_pool = pool;
            captured = 1;
            rc = tp_capture(&st, &c, &live);
        }
    }
    sqlite3_finalize(q);
    if (rc == 0 && !captured) rc = tp_capture(&st, &c, &live); /* the moment is the end */
    if (!s->seq) s->seq = peak_seq;
    s->reason = REC_SNAP_PEAK;
    s->resolved = 1;
    if (rc == 0 && tp_fill(d, s, &c, expandable) != 0) rc = -1;
    gm_tstate_free(&st);
    gm_tcapture_free(&c);
    u64map_free(&live);
    if (rc != 0) {
        snap_free(s);
        snprintf(err, errsz, "out of memory rebuilding PyTorch's state at its peak");
        return -1;
    }
    return 1;
}

/* ---------------------------------------------------------------- entry */

static int snap_cmp(const void *a, const void *b) {
    const snap *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int gm_frag_analyze(gm_db *d, const gm_model *m, int search, gm_frag *f, char *err, size_t errsz) {
    memset(f, 0, sizeof *f);
    f->best = f->best_gpumem = SIZE_MAX;
    fix_model fm = {.ok = 0};
    snap *snaps = NULL;
    size_t nsnaps = 0, cap = 0;
    sqlite3_stmt *st;
    int rc = -1;
    uint64_t tpa, tpr;
    int torch = gm_torch_peaks(d, &tpa, &tpr);
    if (torch) { /* PyTorch's allocator: its own state at its peak, not gpumem's (torch_snap) */
        snaps = calloc(1, sizeof *snaps);
        if (!snaps) {
            snprintf(err, errsz, "out of memory");
            return -1;
        }
        int made = torch_snap(d, snaps, err, errsz);
        if (made < 0) {
            free(snaps);
            return -1;
        }
        nsnaps = (size_t)made;
    } else if (gm_table_exists(d, "snapshots")) {
        /* the peak snapshot with the most reserved (one per device), and every OOM snapshot */
        if (sqlite3_prepare_v2(d->db,
                               "SELECT s.id, s.seq, s.reason, s.device, "
                               "(SELECT coalesce(sum(mapped), 0) FROM segments g WHERE g.snapshot = s.id) "
                               "FROM snapshots s WHERE s.reason IN (1, 2) ORDER BY s.seq",
                               -1, &st, NULL) != SQLITE_OK)
            return fail_sql(d, err, errsz, "snapshots");
        uint64_t best_res = 0;
        int64_t best_peak = -1;
        uint64_t *res = NULL;
        while (sqlite3_step(st) == SQLITE_ROW) {
            if (nsnaps == cap) {
                size_t nc = cap ? 2 * cap : 8;
                snap *n = realloc(snaps, nc * sizeof *n);
                uint64_t *nr = n ? realloc(res, nc * sizeof *nr) : NULL;
                if (!n || !nr) {
                    sqlite3_finalize(st);
                    free(n ? n : snaps), free(res);
                    snprintf(err, errsz, "out of memory");
                    return -1;
                }
                snaps = n, res = nr, cap = nc;
            }
            snap *s = &snaps[nsnaps];
            memset(s, 0, sizeof *s);
            s->id = sqlite3_column_int64(st, 0);
            s->seq = (uint64_t)sqlite3_column_int64(st, 1);
            s->reason = sqlite3_column_int(st, 2);
            s->device = sqlite3_column_int(st, 3);
            res[nsnaps] = (uint64_t)sqlite3_column_int64(st, 4);
            if (s->reason == REC_SNAP_PEAK && (best_peak < 0 || res[nsnaps] > best_res))
                best_peak = (int64_t)nsnaps, best_res = res[nsnaps];
            nsnaps++;
        }
        /* keep the OOMs and the one peak with the most reserved (there is one per device) */
        size_t k = 0;
        for (size_t i = 0; i < nsnaps; i++)
            if (snaps[i].reason == REC_SNAP_OOM || (int64_t)i == best_peak) snaps[k++] = snaps[i];
        nsnaps = k;
        free(res);
        sqlite3_finalize(st);
    }
    if (nsnaps > 1) gm_sort(snaps, nsnaps, sizeof *snaps, snap_cmp);
    /* each OOM snapshot's request, from the ooms row it follows */
    for (size_t i = 0; i < nsnaps && !torch; i++) {
        snap *s = &snaps[i];
        if (snap_load(d, s, err, errsz) != 0) goto out;
        if (s->reason != REC_SNAP_OOM) continue;
        if (sqlite3_prepare_v2(d->db, "SELECT seq, requested, stream FROM ooms WHERE seq <= ? "
                                      "AND device = ? ORDER BY seq DESC LIMIT 1", -1, &st, NULL) != SQLITE_OK) {
            fail_sql(d, err, errsz, "ooms");
            goto out;
        }
        sqlite3_bind_int64(st, 1, (int64_t)s->seq);
        sqlite3_bind_int(st, 2, s->device);
        if (sqlite3_step(st) == SQLITE_ROW) {
            s->need_seq = (uint64_t)sqlite3_column_int64(st, 0);
            s->oom_requested = (uint64_t)sqlite3_column_int64(st, 1);
            s->oom_stream_id = (uint64_t)sqlite3_column_int64(st, 2);
        }
        sqlite3_finalize(st);
    }
    /* the sweep resolves gpumem's snapshots; PyTorch's was resolved as it was rebuilt */
    if (sweep(d, m, snaps, torch ? 0 : nsnaps, torch, f, &fm, err, errsz) != 0) goto out;
    alloc_config_t cfg;
    alloc_config_default(&cfg);
    char conf[1024];
    gm_meta_text(d, "config", conf, sizeof conf);
    if (conf[0]) alloc_config_parse_recorded(&cfg, conf, NULL, 0);
    uint64_t page = cfg.handle_size ? cfg.handle_size : PAGE_DEFAULT;
    for (size_t i = 0; i < nsnaps; i++) {
        snap *s = &snaps[i];
        gm_frag_state o;
        if (classify(d, s, page, &o, err, errsz) != 0) goto out;
        o.torch_pools = torch;
        if (s->reason == REC_SNAP_PEAK) {
            f->peak = o;
            f->have_peak = 1;
        } else {
            gm_frag_state *n = realloc(f->ooms, (f->nooms + 1) * sizeof *n);
            if (!n) {
                free(o.pools), free(o.pins);
                snprintf(err, errsz, "out of memory");
                goto out;
            }
            f->ooms = n;
            f->ooms[f->nooms++] = o;
        }
    }
    find_fixes(f, d, &fm, search);
    /* PyTorch's allocator's reset, or gpumem's as PyTorch's (--allocator gpumem): the same words */
    gm_torch_peak_reset(d, GM_TORCH_ALL_DEVICES, &f->reset);
    gm_compiled_read(d, &f->compiled);
    if (!f->torch) f->pytorch_recorded = gm_meta_pytorch_conf(d, f->torch_conf, sizeof f->torch_conf);
    rc = 0;
out:
    if (fm.ok) adv_model_free(&fm.am);
    for (size_t i = 0; i < nsnaps; i++) snap_free(&snaps[i]);
    free(snaps);
    return rc;
}

static void state_free(gm_frag_state *s) {
    free(s->pools);
    free(s->pins);
}

void gm_frag_free(gm_frag *f) {
    free(f->timeline);
    if (f->have_peak) state_free(&f->peak);
    for (size_t i = 0; i < f->nooms; i++) state_free(&f->ooms[i]);
    free(f->ooms);
    free(f->fixes);
    memset(f, 0, sizeof *f);
}
