/* gm_torch.c — PyTorch's allocator trace merged into a gpumem recording (gm_torch.h).
 *
 * `gpumem record -- python3 train.py` leaves PyTorch's allocator in place: gpumem records the
 * segments it asks cudaMalloc for (and everything else on the device), while PyTorch's trace,
 * dumped at exit by gpumem's hook, knows every tensor. The trace is the entries gpumem's trace
 * tracker took (preload/torch_trace.c: each with the recorder's last seq and clock, its stream,
 * pool and Python stack; gm_trace.history in the dump) or, without the tracker, PyTorch's own
 * memory history (device_traces). This file puts the two in one database, so that a report
 * reads a PyTorch program tensor by tensor:
 *
 *   1. the trace entries of every device, in time order, get their block sizes from a replay of
 *      PyTorch's block structure (gm_tblocks: the trace carries requested sizes only);
 *   2. each entry, and each name the hook gave a tensor, is placed right after the events the
 *      recording had when PyTorch made it: the tracker's entries carry that seq, and so do the
 *      names (meta.torch_placement "exact"); PyTorch's history, when it is on too
 *      (GPUMEM_TORCH_PYTORCH_HISTORY=1), is paired with the tracker's entries entry by entry
 *      (pair_trace). Without the tracker (not built, or its entries do not match the history),
 *      by time: after the last recorded event at or before the
 *      entry's time (PyTorch's clock is its approximate clock converted to wall time, in
 *      microseconds, and is first moved onto the recording's by the gaps between its segments'
 *      entries and their recorded cudaMalloc, followed through the run: clock_anchors; the
 *      recording's is nanoseconds since meta.start_unix_ns; meta.torch_placement "clock"). A
 *      segment's entry goes right after the cudaMalloc that made it and its free right before
 *      the cudaFree, whatever the clocks say;
 *   3. every table that holds a seq is renumbered to make room (seq keeps its order; a table
 *      keyed by seq is rebuilt in key order rather than updated), and the entries are inserted
 *      as events of kinds 31-35 with their Python frames, their stream and the NVTX range open
 *      at their time (the innermost: the one that started last among those open, on any
 *      thread; PyTorch's entries carry no thread);
 *   4. names become `names` rows, tensors `alloc_life` rows; meta records what was merged
 *      (torch_history_from: gpumem or pytorch).
 * All in one transaction: a failure leaves the recording as it was. */
#include "snapshot/formats/gm_torch.h"
#include "snapshot/formats/gm_out.h"

#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "snapshot/record/bytemap.h"
#include "snapshot/record/rec.h"

/* ---------------------------------------------------------------- PyTorch's block rules */

enum { T_MIN_BLOCK = 512, T_SMALL = 1 << 20 };

void gm_tsettings_read(const gpk_val *a, gm_tsettings *s)
{
    memset(s, 0, sizeof *s);
    s->max_split = UINT64_MAX;
    if (!a) return;
    const gpk_val *e = gpk_get(a, "expandable_segments");
    s->expandable = e && (e->type == GPK_BOOL || e->type == GPK_INT) && e->i != 0;
    int64_t ms;
    if (gpk_as_i64(gpk_get(a, "max_split_size"), &ms) == 0 && ms > 0) s->max_split = (uint64_t)ms;
    const gpk_val *d = gpk_get(a, "roundup_power2_divisions");
    if (d && d->type == GPK_DICT) {
        for (size_t i = 0; i < d->len; i++) {
            const char *k = gpk_as_str(d->items[2 * i]);
            int64_t v;
            if (!k || gpk_as_i64(d->items[2 * i + 1], &v) != 0 || v < 0) continue;
            unsigned long mb = strtoul(k, NULL, 10);
            for (unsigned b = 0; b < 16; b++)
                if (mb == 1ul << b) s->divisions[b] = (unsigned)v;
        }
    } else if (d && d->type == GPK_INT && d->i > 0) {
        for (unsigned b = 0; b < 16; b++) s->divisions[b] = (unsigned)d->i;
    }
}

int gm_tsettings_store(sqlite3 *db, const gpk_val *a)
{
    if (!a || a->type != GPK_DICT) return 0;
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return -1;
    gpk_begin(f);
    gpk_write_val(f, a);
    gpk_end(f);
    int bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) return free(buf), -1;
    sqlite3_stmt *st;
    int rc = -1;
    if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO meta VALUES ('torch_allocator_settings', ?)", -1, &st,
                           NULL) == SQLITE_OK) {
        sqlite3_bind_blob(st, 1, buf, (int)n, SQLITE_STATIC);
        rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
        sqlite3_finalize(st);
    }
    free(buf);
    return rc;
}

static unsigned log2_floor(uint64_t v) { return 63u - (unsigned)__builtin_clzll(v); }

uint64_t gm_tround(const gm_tsettings *s, uint64_t size)
{
    if (size < T_MIN_BLOCK) return T_MIN_BLOCK;
    /* the power-of-two intervals start at 1 MiB: the interval of size, the last one above */
    unsigned lg = log2_floor(size), idx = lg > 20 ? lg - 20 : 0;
    unsigned div = s->divisions[idx > 15 ? 15 : idx];
    if (div > 1 && size > (uint64_t)T_MIN_BLOCK * div) {
        if ((size & (size - 1)) == 0) return size;
        uint64_t floor2 = (uint64_t)1 << lg, step = floor2 >> log2_floor(div);
        if (!step) return floor2 << 1;
        uint64_t down = size & ~(step - 1);
        return down == size ? size : down + step;
    }
    return (size + T_MIN_BLOCK - 1) / T_MIN_BLOCK * T_MIN_BLOCK;
}

void gm_tblocks_init(gm_tblocks *b, const gm_tsettings *s)
{
    memset(b, 0, sizeof *b);
    b->set = *s;
}

void gm_tblocks_free(gm_tblocks *b)
{
    free(b->nodes);
    u64map_free(&b->by_start);
    u64map_free(&b->by_end);
    memset(b, 0, sizeof *b);
}

static uint32_t node_new(gm_tblocks *b, uint64_t addr, uint64_t size, int is_free)
{
    uint32_t i;
    if (b->spare) {
        i = b->spare;
        b->spare = b->nodes[i].next;
    } else {
        if (b->nnodes + 1 >= b->cap) {
            size_t nc = b->cap ? 2 * b->cap : 256;
            gm_tnode *n = realloc(b->nodes, nc * sizeof *n);
            if (!n) return 0;
            b->nodes = n, b->cap = nc;
        }
        if (!b->nnodes) b->nnodes = 1; /* index 0: none */
        i = (uint32_t)b->nnodes++;
    }
    b->nodes[i] = (gm_tnode){addr, size, 0, 0, (uint8_t)is_free};
    if (u64map_put(&b->by_start, addr, i) != 0 || u64map_put(&b->by_end, addr + size, i) != 0)
        return 0;
    return i;
}

static void node_drop(gm_tblocks *b, uint32_t i)
{
    gm_tnode *n = &b->nodes[i];
    u64map_del(&b->by_start, n->addr, NULL);
    u64map_del(&b->by_end, n->addr + n->size, NULL);
    n->next = b->spare;
    b->spare = i;
}

static uint32_t node_at(const u64map *m, uint64_t key)
{
    const uint64_t *v = u64map_get(m, key);
    return v ? (uint32_t)*v : 0;
}

/* a absorbs its right neighbour c (both free, adjacent) */
static void node_absorb(gm_tblocks *b, uint32_t a, uint32_t c)
{
    uint32_t after = b->nodes[c].next;
    uint64_t csize = b->nodes[c].size;
    u64map_del(&b->by_end, b->nodes[a].addr + b->nodes[a].size, NULL);
    node_drop(b, c);
    gm_tnode *x = &b->nodes[a];
    x->size += csize;
    x->next = after;
    if (after) b->nodes[after].prev = a;
    u64map_put(&b->by_end, x->addr + x->size, a);
}

/* merges free node i with free neighbours; returns the node now holding its memory */
static uint32_t node_coalesce(gm_tblocks *b, uint32_t i)
{
    if (b->nodes[i].next && b->nodes[b->nodes[i].next].free) node_absorb(b, i, b->nodes[i].next);
    uint32_t p = b->nodes[i].prev;
    if (p && b->nodes[p].free) {
        node_absorb(b, p, i);
        return p;
    }
    return i;
}

int gm_tblocks_map(gm_tblocks *b, uint64_t addr, uint64_t size, int grow)
{
    if (!size) return 0;
    /* a new segment stands alone, even when cudaMalloc put it right after another; pages mapped
     * into an expandable segment join the blocks beside them */
    uint32_t left = grow ? node_at(&b->by_end, addr) : 0, right = grow ? node_at(&b->by_start, addr + size) : 0;
    uint32_t i = node_new(b, addr, size, 1);
    if (!i) return -1;
    if (left) b->nodes[left].next = i, b->nodes[i].prev = left;
    if (right) b->nodes[right].prev = i, b->nodes[i].next = right;
    node_coalesce(b, i);
    return 0;
}

void gm_tblocks_unmap(gm_tblocks *b, uint64_t addr, uint64_t size)
{
    /* the free block that holds [addr, addr + size): found from either end */
    uint32_t i = node_at(&b->by_start, addr);
    if (!i) {
        i = node_at(&b->by_end, addr + size);
        if (!i) return;
    }
    gm_tnode n = b->nodes[i];
    if (!n.free || addr < n.addr || addr + size > n.addr + n.size) return;
    uint32_t prev = n.prev, next = n.next;
    node_drop(b, i);
    uint32_t lo = 0, hi = 0;
    if (addr > n.addr) lo = node_new(b, n.addr, addr - n.addr, 1);
    if (addr + size < n.addr + n.size) hi = node_new(b, addr + size, n.addr + n.size - addr - size, 1);
    /* what stays is cut off from what went: neighbours only on its own side */
    if (lo) {
        b->nodes[lo].prev = prev;
        if (prev) b->nodes[prev].next = lo;
    } else if (prev) {
        b->nodes[prev].next = 0;
    }
    if (hi) {
        b->nodes[hi].next = next;
        if (next) b->nodes[next].prev = hi;
    } else if (next) {
        b->nodes[next].prev = 0;
    }
}

uint64_t gm_tblocks_alloc(gm_tblocks *b, uint64_t addr, uint64_t requested)
{
    uint64_t size = gm_tround(&b->set, requested);
    uint32_t i = node_at(&b->by_start, addr);
    if (!i || !b->nodes[i].free || b->nodes[i].size < size) {
        b->guessed++;
        return size;
    }
    gm_tnode *n = &b->nodes[i];
    uint64_t remaining = n->size - size;
    int small = size <= T_SMALL;
    int split = small || b->set.expandable ? remaining >= T_MIN_BLOCK
                                           : size < b->set.max_split && remaining > T_SMALL;
    if (split) {
        uint32_t next = n->next;
        u64map_del(&b->by_end, n->addr + n->size, NULL);
        n->size = size;
        u64map_put(&b->by_end, addr + size, i);
        uint32_t r = node_new(b, addr + size, remaining, 1);
        if (!r) return 0;
        n = &b->nodes[i];
        n->next = r;
        b->nodes[r].prev = i;
        b->nodes[r].next = next;
        if (next) b->nodes[next].prev = r;
    }
    n->free = 0;
    return n->size;
}

void gm_tblocks_free_block(gm_tblocks *b, uint64_t addr)
{
    uint32_t i = node_at(&b->by_start, addr);
    if (!i || b->nodes[i].free) return;
    b->nodes[i].free = 1;
    node_coalesce(b, i);
}

uint64_t gm_tblocks_largest_free(const gm_tblocks *b)
{
    uint64_t best = 0;
    for (size_t i = 1; i < b->nnodes; i++) {
        const gm_tnode *n = &b->nodes[i];
        if (!n->free || n->size <= best || node_at(&b->by_start, n->addr) != i)
            continue; /* spare */
        best = n->size;
    }
    return best;
}

/* ---------------------------------------------------------------- PyTorch's OOMs */

uint64_t gm_toom_device_free(const gpk_val *entry)
{
    uint64_t v = 0;
    if (gpk_as_u64(gpk_get(entry, "device_free"), &v) == 0) return v;
    if (gpk_as_u64(gpk_get(entry, "addr"), &v) == 0) return v;
    return 0;
}

int gm_toom_insert(sqlite3 *db, const gm_toom *o, char *err, size_t errsz)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(
            db,
            "INSERT INTO ooms (seq, device, stream, requested, allocated, reserved, free_cached, "
            "largest_free, device_free, device_total, limit_bytes) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            -1, &s, NULL) != SQLITE_OK) {
        snprintf(err, errsz, "at ooms: %s", sqlite3_errmsg(db));
        return -1;
    }
    int64_t v[] = {(int64_t)o->seq,
                   o->device,
                   o->stream,
                   (int64_t)o->requested,
                   (int64_t)o->allocated,
                   (int64_t)o->reserved,
                   (int64_t)(o->reserved > o->allocated ? o->reserved - o->allocated : 0),
                   (int64_t)o->largest_free,
                   (int64_t)o->device_free,
                   (int64_t)o->device_total,
                   (int64_t)o->limit};
    for (int i = 0; i < (int)(sizeof v / sizeof *v); i++)
        sqlite3_bind_int64(s, i + 1, v[i]);
    if (o->limit == REC_NO_LIMIT) sqlite3_bind_null(s, 11); /* none (schema 1.4); 0 is 0 bytes */
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) {
        snprintf(err, errsz, "at ooms: %s", sqlite3_errmsg(db));
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- the merge */

/* PyTorch's TraceEntry actions (the tracker's numbers; 7, snapshot, is not kept), then ours */
enum {
    TA_ALLOC,
    TA_FREE_REQ,
    TA_FREE_DONE,
    TA_SEG_ALLOC,
    TA_SEG_FREE,
    TA_SEG_MAP,
    TA_SEG_UNMAP,
    TA_OOM = 8,
    TA_NAME,
    TA_EMPTY_CACHE,
    TA_FRACTION,
    TA_RESET_PEAK,
    TA_OTHER
};

/* the trace actions an item is made of: 0-6 and the OOM */
static int ta_kept(int a)
{
    return (a >= TA_ALLOC && a <= TA_SEG_UNMAP) || a == TA_OOM;
}

/* One thing to insert: a trace entry or a name. */
typedef struct titem {
    int64_t t;          /* ns on the recording's clock */
    uint64_t after;     /* inserted after the recorded event with this seq (0: before all) */
    uint64_t addr, size, requested, stream; /* TA_OOM: addr is the device's free bytes */
    uint64_t allocated, reserved, largest;  /* TA_OOM: PyTorch's bytes on its device then, and
                                             * its largest free block */
    const gpk_val *frames;
    const unsigned char *tframes; /* or the tracker's stack of it (tframes_n frames of three
                                   * uint32: function and file string ids, line) */
    uint32_t tframes_n;
    const char *name;   /* TA_NAME */
    int action, device;
    unsigned flags;     /* REC_F_PRIVATE_POOL: in a private pool (pool_id other than (0, 0));
                           TA_FRACTION: REC_F_FRACTION_START, the key's at the start */
    uint64_t pool;      /* that pool, as one number (0: the default pool) */
    size_t order;       /* PyTorch's own order, across devices by time */
    uint64_t ord;       /* TA_ALLOC: how many allocations its device's trace made before it */
    uint64_t seq;       /* its seq in the merged recording */
    uint64_t xseq;      /* exact: the recorder's last seq when PyTorch recorded it */
    int exact;          /* placed by xseq, t on the recording's clock (the tracker's pair) */
} titem;

typedef struct rec_ev { uint64_t seq; int64_t t; } rec_ev;
typedef struct addr_ev { uint64_t addr, seq; int64_t t; } addr_ev;

typedef struct merge {
    sqlite3 *db;
    char *err;
    size_t errsz;
    titem *it;
    size_t n, cap;
    rec_ev *ev; /* the recording's events, by seq */
    size_t nev;
    rec_ev *ooms; /* the recording's oom events (seq; t holds the device), by seq */
    size_t nooms;
    const gpk_val *oom_limits; /* the hook's (device, cap, fraction) per OOM, in order */
    addr_ev *allocs, *frees; /* device allocations and frees, by (addr, seq) */
    size_t nallocs, nfrees;
    int64_t clock_offset, clock_drift; /* ns added to PyTorch's times (the middle anchor's), and
                                        * how much that varied over the run (clock_anchors()) */
    uint64_t nexact, ntrace; /* trace entries placed exactly (pair_trace()), of all entries */
    uint64_t nstack_torch, nstack_gpumem; /* allocations whose stack came from PyTorch's history,
                                           * or from gpumem's tracker */
    const unsigned char **tstack; /* the tracker's stacks by index - 1 (tt_stacks()) */
    size_t ntstack;
    sqlite3_stmt *string_text;    /* the recording's strings by id */
    u64map string_at;             /* id -> index in stext: each string read once */
    char **stext;
    size_t nstext, cstext;
    int stext_oom;                /* a string could not be kept (out of memory) */
    uint64_t *shift_at; /* renumbering: old seq s gets s + (items placed after seqs below s) */
    size_t nshift;
    int64_t next_frame, next_stack, next_string, next_stream;
    bytemap frames, stacks, strings, streams; /* their contents -> id (bytemap.h) */
    u64map tstack_ids; /* the tracker's stack (its frames' address in the dump) -> stack id */
} merge;

static int mfail(merge *m, const char *what)
{
    snprintf(m->err, m->errsz, "at %s: %s", what, sqlite3_errmsg(m->db)); /* (the caller says what was merged) */
    return -1;
}

static int mexec(merge *m, const char *sql)
{
    char *e = NULL;
    if (sqlite3_exec(m->db, sql, NULL, NULL, &e) != SQLITE_OK) {
        snprintf(m->err, m->errsz, "%s", e ? e : "?");
        sqlite3_free(e);
        return -1;
    }
    return 0;
}

static int64_t query_i64(merge *m, const char *sql, int64_t dflt)
{
    sqlite3_stmt *s;
    int64_t v = dflt;
    if (sqlite3_prepare_v2(m->db, sql, -1, &s, NULL) != SQLITE_OK) return dflt;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

static titem *item_add(merge *m)
{
    if (m->n == m->cap) {
        size_t nc = m->cap ? 2 * m->cap : 1024;
        titem *p = realloc(m->it, nc * sizeof *p);
        if (!p) return NULL;
        m->it = p, m->cap = nc;
    }
    titem *t = &m->it[m->n];
    memset(t, 0, sizeof *t);
    t->order = m->n++;
    return t;
}

static int action_of(const char *a)
{
    static const char *const names[] = {
        "alloc",        "free_requested", "free_completed", "segment_alloc",
        "segment_free", "segment_map",    "segment_unmap",  "",
        "oom"};
    for (int i = 0; i < 9; i++)
        if (a && a[0] && !strcmp(a, names[i])) return i;
    return TA_OTHER;
}

static uint64_t u64_in(const gpk_val *d, const char *k)
{
    uint64_t v = 0;
    if (gpk_as_u64(gpk_get(d, k), &v) != 0) v = 0;
    return v;
}

/* a history entry's address, as the tracker keeps it: an OOM's is the device's free bytes */
static uint64_t entry_addr(const gpk_val *d, int action)
{
    return action == TA_OOM ? gm_toom_device_free(d) : u64_in(d, "addr");
}

/* PyTorch's pool (a, b) of a trace entry (pool_id, or the tracker's entry's) or a segment
 * (segment_pool_id): (0, 0) is the device's default pool; any other is private — a CUDA graph's (torch.cuda.graph,
 * make_graphed_callables) or a torch.cuda.MemPool. Histories older than the key read as
 * default. */
static void pool_set(titem *t, uint64_t a, uint64_t b)
{
    if (!a && !b) return;
    t->flags = REC_F_PRIVATE_POOL;
    t->pool = (a << 32 ^ b) & (U64MAP_EMPTY - 1); /* ids are small counters: distinct */
    if (!t->pool) t->pool = 1;
}

static void pool_of(titem *t, const gpk_val *v)
{
    uint64_t a, b;
    if (v && (v->type == GPK_TUPLE || v->type == GPK_LIST) && v->len == 2 && gpk_as_u64(v->items[0], &a) == 0 &&
        gpk_as_u64(v->items[1], &b) == 0)
        pool_set(t, a, b);
}

/* a dump's flag (True, or an int other than 0) */
static int flag_in(const gpk_val *d, const char *k)
{
    const gpk_val *v = d ? gpk_get(d, k) : NULL;
    return v && (v->type == GPK_BOOL || v->type == GPK_INT) && v->i != 0;
}

/* How many private pools the history names (meta torch_private_pools) */
static uint64_t private_pools(const merge *m)
{
    u64map seen = {0};
    uint64_t n = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->it[i].pool && !u64map_get(&seen, m->it[i].pool)) {
            if (u64map_put(&seen, m->it[i].pool, 1) != 0) break;
            n++;
        }
    u64map_free(&seen);
    return n;
}

static int cmp_time(const void *a, const void *b)
{
    const titem *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int cmp_addr_ev(const void *a, const void *b)
{
    const addr_ev *x = a, *y = b;
    if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The recorded events' seq and t, and the device allocations and frees by address. */
static int load_recorded(merge *m)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(m->db, "SELECT seq, t, kind, addr, device FROM events ORDER BY seq", -1,
                           &s, NULL) != SQLITE_OK)
        return mfail(m, "reading events");
    size_t cap = 0, ca = 0, cf = 0, co = 0;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0);
        int64_t t = sqlite3_column_int64(s, 1);
        int kind = sqlite3_column_int(s, 2);
        uint64_t addr = (uint64_t)sqlite3_column_int64(s, 3);
        if (m->nev == cap) {
            cap = cap ? 2 * cap : 4096;
            rec_ev *p = realloc(m->ev, cap * sizeof *p);
            if (!p) break;
            m->ev = p;
        }
        m->ev[m->nev++] = (rec_ev){seq, t};
        /* the driver refused a request (or gpumem's allocator or GPUMEM_LIMIT did) */
        if (kind == REC_OOM) {
            if (m->nooms == co) {
                co = co ? 2 * co : 16;
                rec_ev *p = realloc(m->ooms, co * sizeof *p);
                if (!p) break;
                m->ooms = p;
            }
            m->ooms[m->nooms++] = (rec_ev){seq, sqlite3_column_int(s, 4)};
        }
        addr_ev **list = NULL;
        size_t *n = NULL, *c = NULL;
        if (kind == REC_ALLOC || kind == REC_ALLOC_ASYNC) list = &m->allocs, n = &m->nallocs, c = &ca;
        else if (kind == REC_FREE || kind == REC_FREE_ASYNC) list = &m->frees, n = &m->nfrees, c = &cf;
        if (!list) continue;
        if (*n == *c) {
            *c = *c ? 2 * *c : 256;
            addr_ev *p = realloc(*list, *c * sizeof *p);
            if (!p) break;
            *list = p;
        }
        (*list)[(*n)++] = (addr_ev){addr, seq, t};
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) {
        if (rc == SQLITE_ROW) snprintf(m->err, m->errsz, "out of memory reading the recording");
        else mfail(m, "reading events");
        return -1;
    }
    if (m->nallocs > 1) qsort(m->allocs, m->nallocs, sizeof *m->allocs, cmp_addr_ev);
    if (m->nfrees > 1) qsort(m->frees, m->nfrees, sizeof *m->frees, cmp_addr_ev);
    return 0;
}

/* The last recorded event at or before t (its seq; 0 before all). */
static uint64_t after_time(const merge *m, int64_t t)
{
    size_t lo = 0, hi = m->nev;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->ev[mid].t <= t) lo = mid + 1;
        else hi = mid;
    }
    return lo ? m->ev[lo - 1].seq : 0;
}

/* The recorded event of list at addr closest in time to t (its seq; 0 none). */
static uint64_t nearest_at(const addr_ev *list, size_t n, uint64_t addr, int64_t t)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (list[mid].addr < addr) lo = mid + 1;
        else hi = mid;
    }
    uint64_t best = 0;
    int64_t bestd = INT64_MAX;
    for (size_t i = lo; i < n && list[i].addr == addr; i++) {
        int64_t d = list[i].t > t ? list[i].t - t : t - list[i].t;
        if (d < bestd) bestd = d, best = list[i].seq;
    }
    return best;
}

/* PyTorch's clock against the recording's. PyTorch's time_us is its approximate clock (the
 * TSC) converted to wall time: measured 0.1-1.6 ms off the wall clock the recording starts
 * from, and drifting within a run (on gpt2, the first segments 63 us off, the later ones 109
 * us). Its passes can be that short (tiny models), so uncorrected a tensor could land in the
 * range after its own. The anchors are the segments the trace made with cudaMalloc: each gives
 * the recorded cudaMalloc's time minus the entry's. Each anchor's offset is the median of the
 * 9 anchors around it (a slow cudaMalloc is one outlier), and an entry gets the offset
 * interpolated between the anchors before and after it in time. */
typedef struct clk_anchor { int64_t t, d; } clk_anchor;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_anchor(const void *a, const void *b)
{
    const clk_anchor *x = a, *y = b;
    return (x->t > y->t) - (x->t < y->t);
}

/* the anchors, in time order, each with its local offset; NULL (n 0) when none */
static clk_anchor *clock_anchors(const merge *m, size_t *nout)
{
    size_t n = 0;
    *nout = 0;
    for (size_t i = 0; i < m->n; i++) n += m->it[i].action == TA_SEG_ALLOC;
    clk_anchor *a = n ? malloc(n * sizeof *a) : NULL;
    int64_t *d = n ? malloc(n * sizeof *d) : NULL;
    if (!a || !d) {
        free(a), free(d);
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++) {
        const titem *t = &m->it[i];
        if (t->action != TA_SEG_ALLOC) continue;
        /* the recorded cudaMalloc of that address nearest in time (the skew is far shorter than
         * the time between two segments at one address) */
        size_t lo = 0, hi = m->nallocs;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (m->allocs[mid].addr < t->addr) lo = mid + 1;
            else hi = mid;
        }
        int64_t best = INT64_MAX;
        for (size_t j = lo; j < m->nallocs && m->allocs[j].addr == t->addr; j++) {
            int64_t dj = m->allocs[j].t - t->t;
            if (best == INT64_MAX || llabs(dj) < llabs(best)) best = dj;
        }
        if (best != INT64_MAX) a[k++] = (clk_anchor){t->t, best};
    }
    if (k > 1) qsort(a, k, sizeof *a, cmp_anchor);
    for (size_t i = 0; i < k; i++) d[i] = a[i].d;
    enum { HALF = 4 };
    int64_t w[2 * HALF + 1];
    for (size_t i = 0; i < k; i++) {
        size_t from = i > HALF ? i - HALF : 0, to = i + HALF < k ? i + HALF : k - 1, nw = 0;
        for (size_t j = from; j <= to; j++) w[nw++] = d[j];
        if (nw > 1) qsort(w, nw, sizeof *w, cmp_i64);
        a[i].d = w[nw / 2];
    }
    free(d);
    *nout = k;
    if (!k) free(a), a = NULL;
    return a;
}

/* the offset at PyTorch's time t: interpolated between the anchors around it */
static int64_t clock_at(const clk_anchor *a, size_t n, int64_t t)
{
    if (!n) return 0;
    size_t lo = 0, hi = n;
    while (lo < hi) { /* the first anchor after t */
        size_t mid = (lo + hi) / 2;
        if (a[mid].t <= t) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return a[0].d;
    if (lo == n) return a[n - 1].d;
    const clk_anchor *p = &a[lo - 1], *q = &a[lo];
    if (q->t == p->t) return p->d;
    return p->d + (int64_t)((double)(q->d - p->d) * (double)(t - p->t) / (double)(q->t - p->t));
}

/* How many recorded events come before seq (m->ev is by seq). */
static size_t ev_below(const merge *m, uint64_t seq)
{
    size_t lo = 0, hi = m->nev;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->ev[mid].seq < seq) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* the recorded event just before seq (0: none) */
static uint64_t seq_before(const merge *m, uint64_t seq)
{
    size_t k = ev_below(m, seq);
    return k ? m->ev[k - 1].seq : 0;
}

/* old seq -> new seq: each item placed after a seq below s moves s up by one */
static uint64_t new_seq(const merge *m, uint64_t s)
{
    size_t lo = 0, hi = m->nshift;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->shift_at[mid] < s) lo = mid + 1;
        else hi = mid;
    }
    return s + lo;
}

/* gm_newseq(s): a seq renumbered; NULL, 0 (none) and anything not a seq as they are */
static void sql_newseq(sqlite3_context *ctx, int argc, sqlite3_value **v)
{
    (void)argc;
    if (sqlite3_value_type(v[0]) != SQLITE_INTEGER || sqlite3_value_int64(v[0]) <= 0) {
        sqlite3_result_value(ctx, v[0]);
        return;
    }
    sqlite3_result_int64(ctx, (int64_t)new_seq(sqlite3_user_data(ctx), (uint64_t)sqlite3_value_int64(v[0])));
}

/* A file name that is CPython's for code with no source file: "<string>" (exec, compile,
 * python -c), "<stdin>", "<ipython-input-3-...>" (a notebook's cell), "<frozen ...>". */
static int python_pseudo_file(const char *file)
{
    size_t n = strlen(file);
    return n > 2 && file[0] == '<' && file[n - 1] == '>';
}

/* a frame's id (function, file, line; python: 1 for a Python frame), inserted once */
static int64_t frame_text(merge *m, const char *file, const char *fn, int64_t line, int python)
{
    if (!file) file = "??";
    if (!fn) fn = "??";
    /* the key: the Python flag, file and function with their terminators, the line */
    size_t lf = strlen(file), ln = strlen(fn), nk = 1 + lf + 1 + ln + 1 + sizeof line;
    unsigned char stackkey[512], *key = nk <= sizeof stackkey ? stackkey : malloc(nk);
    if (!key) return mfail(m, "frames");
    key[0] = (unsigned char)python;
    memcpy(key + 1, file, lf + 1);
    memcpy(key + 2 + lf, fn, ln + 1);
    memcpy(key + 3 + lf + ln, &line, sizeof line);
    const uint64_t *v = bytemap_get(&m->frames, key, nk);
    int64_t id = v ? (int64_t)*v : m->next_frame++;
    if (!v) {
        sqlite3_stmt *s;
        int rc = SQLITE_ERROR;
        if (sqlite3_prepare_v2(m->db, "INSERT INTO frames (id, function, file, line, symbolized, python) "
                                      "VALUES (?, ?, ?, ?, 1, ?)", -1, &s, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(s, 1, id);
            sqlite3_bind_text(s, 2, fn, -1, SQLITE_STATIC);
            sqlite3_bind_text(s, 3, file, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 4, line);
            if (python) sqlite3_bind_int(s, 5, 1);
            else sqlite3_bind_null(s, 5);
            rc = sqlite3_step(s);
            sqlite3_finalize(s);
        }
        if (rc != SQLITE_DONE || bytemap_put(&m->frames, key, nk, (uint64_t)id) != 0) id = mfail(m, "frames");
    }
    if (key != stackkey) free(key);
    return id;
}

/* A frame of PyTorch's history (a dict: filename, name, line). gpumem asks for Python stacks
 * (stacks="python"); a program that asked for "all" adds C++ frames, which carry a source file
 * (.cpp, .h, "??"), so a frame is Python when its file is a .py or CPython's name for code
 * without a file (python_pseudo_file). */
static int64_t frame_of(merge *m, const gpk_val *f)
{
    int64_t line = 0;
    if (gpk_as_i64(gpk_get(f, "line"), &line) != 0) line = 0;
    const char *file = gpk_as_str(gpk_get(f, "filename"));
    size_t lf = file ? strlen(file) : 0;
    int py = file && ((lf > 3 && !strcmp(file + lf - 3, ".py")) || python_pseudo_file(file));
    return frame_text(m, file, gpk_as_str(gpk_get(f, "name")), line, py);
}

/* the text of the recording's string id (the tracker's frames name their function and file by
 * the recorder's strings), read from the database once and kept until merge_end; NULL when there
 * is none */
static const char *string_text(merge *m, uint32_t id)
{
    const uint64_t *v = u64map_get(&m->string_at, id);
    if (v) return m->stext[*v];
    if (!m->string_text &&
        sqlite3_prepare_v2(m->db, "SELECT s FROM strings WHERE id = ?", -1, &m->string_text, NULL) != SQLITE_OK)
        return NULL;
    sqlite3_reset(m->string_text);
    sqlite3_bind_int64(m->string_text, 1, id);
    const char *t = sqlite3_step(m->string_text) == SQLITE_ROW ? (const char *)sqlite3_column_text(m->string_text, 0)
                                                                 : NULL;
    char *copy = t ? strdup(t) : NULL;
    /* the capacity follows every growth, also one realloc made in place (the same address) */
    char **g = m->stext;
    if (m->nstext == m->cstext && (g = realloc(m->stext, (2 * m->cstext + 16) * sizeof *g)))
        m->stext = g, m->cstext = 2 * m->cstext + 16;
    if ((t && !copy) || !g || u64map_put(&m->string_at, id, m->nstext) != 0) {
        free(copy);
        m->stext_oom = 1;
        return NULL;
    }
    m->stext[m->nstext++] = copy;
    return copy;
}

/* A frame of the tracker's (preload/torch_trace.c: function and file string ids, line) as text
 * (NULL where a string is missing, or out of memory). */
static void tframe_text(merge *m, const unsigned char *p, const char **fn, const char **file, uint32_t *line)
{
    uint32_t v[3];
    memcpy(v, p, sizeof v);
    *fn = string_text(m, v[0]);
    *file = string_text(m, v[1]);
    *line = v[2];
}

/* a frame of the tracker's, inserted once */
static int64_t tframe_of(merge *m, const unsigned char *p)
{
    const char *fn, *file;
    uint32_t line;
    tframe_text(m, p, &fn, &file, &line);
    if (m->stext_oom) {
        snprintf(m->err, m->errsz, "out of memory reading the recording's strings");
        return -1;
    }
    return frame_text(m, file, fn, line, 1); /* the recorder's Python frames (rec_pyframe) */
}

/* Everything a merge holds but its database connection (which the caller may still roll back
 * and close): the merge and the OOM snapshot's writer end with it. */
static void merge_end(merge *m)
{
    sqlite3_finalize(m->string_text);
    m->string_text = NULL;
    for (size_t i = 0; i < m->nstext; i++) free(m->stext[i]);
    free(m->stext);
    m->stext = NULL;
    m->nstext = m->cstext = 0;
    u64map_free(&m->string_at);
    free(m->it), free(m->ev), free(m->ooms), free(m->allocs), free(m->frees), free(m->shift_at),
        free(m->tstack);
    m->it = NULL, m->ev = NULL, m->ooms = NULL, m->allocs = m->frees = NULL, m->shift_at = NULL,
    m->tstack = NULL;
    bytemap_free(&m->frames), bytemap_free(&m->stacks), bytemap_free(&m->strings), bytemap_free(&m->streams);
    u64map_free(&m->tstack_ids);
}

/* the stack of a trace entry's frames (innermost first): the history's, else the tracker's;
 * 0: none */
static int64_t stack_of(merge *m, const titem *t)
{
    const gpk_val *frames = t->frames;
    size_t len = frames && frames->type == GPK_LIST ? frames->len : 0;
    int tracker = !len && t->tframes_n;
    if (tracker) len = t->tframes_n;
    if (!len) return 0;
    if (tracker) m->nstack_gpumem++;
    else m->nstack_torch++;
    /* the tracker's stacks are already one per distinct stack: each looked up once */
    const uint64_t *known = tracker ? u64map_get(&m->tstack_ids, (uint64_t)(uintptr_t)t->tframes) : NULL;
    if (known) return (int64_t)*known;
    int64_t *ids = malloc(len * sizeof *ids);
    if (!ids) return -1;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (!tracker && frames->items[i]->type != GPK_DICT) continue;
        int64_t f = tracker ? tframe_of(m, t->tframes + i * 12) : frame_of(m, frames->items[i]);
        if (f < 0) {
            free(ids);
            return -1;
        }
        ids[n++] = f;
    }
    const uint64_t *v = n ? bytemap_get(&m->stacks, ids, n * sizeof *ids) : NULL;
    int64_t id = v ? (int64_t)*v : 0;
    if (n && !v) {
        id = m->next_stack++;
        sqlite3_stmt *s;
        if (sqlite3_prepare_v2(m->db, "INSERT INTO stacks VALUES (?, ?, ?)", -1, &s, NULL) != SQLITE_OK) {
            free(ids);
            return mfail(m, "stacks");
        }
        for (size_t d = 0; d < n; d++) {
            sqlite3_bind_int64(s, 1, id);
            sqlite3_bind_int64(s, 2, (int64_t)d);
            sqlite3_bind_int64(s, 3, ids[d]);
            if (sqlite3_step(s) != SQLITE_DONE) id = -1;
            sqlite3_reset(s);
        }
        sqlite3_finalize(s);
        if (id < 0 || bytemap_put(&m->stacks, ids, n * sizeof *ids, (uint64_t)id) != 0) id = mfail(m, "stacks");
    }
    free(ids);
    if (tracker && id > 0 && u64map_put(&m->tstack_ids, (uint64_t)(uintptr_t)t->tframes, (uint64_t)id) != 0)
        id = mfail(m, "stacks");
    return id;
}

static int64_t string_of(merge *m, const char *str)
{
    const uint64_t *v = bytemap_get_str(&m->strings, str);
    if (v) return (int64_t)*v;
    sqlite3_stmt *s;
    int64_t id = 0;
    if (sqlite3_prepare_v2(m->db, "SELECT id FROM strings WHERE s = ?", -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, str, -1, SQLITE_STATIC);
        if (sqlite3_step(s) == SQLITE_ROW) id = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    if (!id) {
        id = m->next_string++;
        if (sqlite3_prepare_v2(m->db, "INSERT INTO strings VALUES (?, ?)", -1, &s, NULL) != SQLITE_OK)
            return mfail(m, "strings");
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_text(s, 2, str, -1, SQLITE_STATIC);
        int rc = sqlite3_step(s);
        sqlite3_finalize(s);
        if (rc != SQLITE_DONE) return mfail(m, "strings");
    }
    if (bytemap_put_str(&m->strings, str, (uint64_t)id) != 0) return -1;
    return id;
}

static int64_t stream_of(merge *m, int device, uint64_t handle)
{
    struct { int64_t device; uint64_t handle; } key = {device, handle};
    const uint64_t *v = bytemap_get(&m->streams, &key, sizeof key);
    if (v) return (int64_t)*v;
    sqlite3_stmt *s;
    int64_t id = 0;
    if (sqlite3_prepare_v2(m->db, "SELECT id FROM streams WHERE device = ? AND handle = ?", -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_int(s, 1, device);
        sqlite3_bind_int64(s, 2, (int64_t)handle);
        if (sqlite3_step(s) == SQLITE_ROW) id = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    if (!id) {
        id = m->next_stream++;
        char sql[160];
        snprintf(sql, sizeof sql, "INSERT INTO streams VALUES (%" PRId64 ", %d, %" PRId64 ")", id, device,
                 (int64_t)handle);
        if (mexec(m, sql) != 0) return -1;
    }
    if (bytemap_put(&m->streams, &key, sizeof key, (uint64_t)id) != 0) return mfail(m, "streams");
    return id;
}

/* ranges by start, for "the innermost range open at t" */
typedef struct trange { int64_t start, end; int64_t id; } trange;

static int cmp_range_start(const void *a, const void *b)
{
    const trange *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Gives each item (in time order) the range that started last among those open at its time: a
 * max-heap by start of the ranges started so far, the ended ones dropped from its top. */
static int ranges_for(merge *m, int64_t *range_of)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(m->db, "SELECT id, start_ns, COALESCE(end_ns, 9223372036854775807) FROM ranges "
                                  "WHERE kind = 0", -1, &s, NULL) != SQLITE_OK)
        return 0; /* no ranges table (an old file): no phases */
    trange *r = NULL;
    size_t nr = 0, cr = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (nr == cr) {
            cr = cr ? 2 * cr : 256;
            trange *p = realloc(r, cr * sizeof *p);
            if (!p) break;
            r = p;
        }
        r[nr++] = (trange){sqlite3_column_int64(s, 1), sqlite3_column_int64(s, 2), sqlite3_column_int64(s, 0)};
    }
    sqlite3_finalize(s);
    if (nr > 1) qsort(r, nr, sizeof *r, cmp_range_start);
    size_t *heap = malloc((nr ? nr : 1) * sizeof *heap), nh = 0, next = 0;
    if (!heap) {
        free(r);
        return -1;
    }
    for (size_t i = 0; i < m->n; i++) {
        int64_t t = m->it[i].t;
        for (; next < nr && r[next].start <= t; next++) { /* push: sift up */
            size_t k = nh++;
            heap[k] = next;
            while (k && r[heap[(k - 1) / 2]].start < r[heap[k]].start) {
                size_t p = (k - 1) / 2, x = heap[p];
                heap[p] = heap[k], heap[k] = x, k = p;
            }
        }
        while (nh && r[heap[0]].end <= t) { /* pop the ended: sift down */
            heap[0] = heap[--nh];
            for (size_t k = 0;;) {
                size_t c = 2 * k + 1, best = k;
                if (c < nh && r[heap[c]].start > r[heap[best]].start) best = c;
                if (c + 1 < nh && r[heap[c + 1]].start > r[heap[best]].start) best = c + 1;
                if (best == k) break;
                size_t x = heap[best];
                heap[best] = heap[k], heap[k] = x, k = best;
            }
        }
        range_of[i] = nh ? r[heap[0]].id : 0;
    }
    free(heap);
    free(r);
    return 0;
}

static const int kind_of_action[] = {[TA_ALLOC] = REC_TORCH_ALLOC,
                                     [TA_FREE_REQ] = REC_TORCH_FREE,
                                     [TA_FREE_DONE] = REC_TORCH_FREE_COMPLETED,
                                     [TA_SEG_ALLOC] = REC_TORCH_SEG_MAP,
                                     [TA_SEG_FREE] = REC_TORCH_SEG_UNMAP,
                                     [TA_SEG_MAP] = REC_TORCH_SEG_MAP,
                                     [TA_SEG_UNMAP] = REC_TORCH_SEG_UNMAP,
                                     [TA_OOM] = REC_OOM,
                                     [TA_EMPTY_CACHE] = REC_TORCH_EMPTY_CACHE,
                                     [TA_FRACTION] = REC_TORCH_MEMORY_FRACTION,
                                     [TA_RESET_PEAK] = REC_TORCH_RESET_PEAK};

/* The tracker's entries (preload/torch_trace.c), little-endian: 72 bytes each (addr, size, seq,
 * t_ns, stream, pool[2], action, device, stack, pad); 48 before 2026-12-05 (addr, size, seq, t_ns,
 * action, device, stack, pad) and 40 before that (no stack). Two uses:
 *   - the trace itself (the dump's gm_trace.history: PyTorch's history was off): every entry
 *     of actions 0-6 is an item, placed exactly (trace_items);
 *   - paired with PyTorch's history (pair_trace), for the history's items of one device
 *     it[0..n-1]. PyTorch hands each entry to the trackers and then to its history in the same
 *     call, so the history is a run of the tracker's entries of that device (the history's ring
 *     may have lost the first ones; the tracker's copy, taken after the snapshot, may hold later
 *     ones). The run is found by its last item, then checked whole (action, address and size of
 *     every pair); a run that does not match leaves the items to the clocks. */
typedef struct tt_rec {
    uint64_t addr, size, seq, t_ns, stream, pool[2];
    int32_t action, device;
    uint32_t stack;
    uint32_t flags; /* the tracker's TT_F_CACHE (1): a free made while gpumem's hooks emptied one
                     * of PyTorch's caches at exit (72-byte entries since 2026-12-07; 0 before) */
} tt_rec;

static uint64_t le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t le32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* entry p of es bytes (72, 48 or 40) */
static tt_rec tt_at(const unsigned char *p, size_t es)
{
    tt_rec r = {.addr = le64(p), .size = le64(p + 8), .seq = le64(p + 16), .t_ns = le64(p + 24)};
    const unsigned char *q = p + 32;
    if (es == 72) {
        r.stream = le64(p + 32), r.pool[0] = le64(p + 40), r.pool[1] = le64(p + 48);
        q = p + 56;
    }
    r.action = (int32_t)le32(q), r.device = (int32_t)le32(q + 4);
    r.stack = es >= 48 ? le32(q + 8) : 0;
    r.flags = es == 72 ? le32(q + 12) : 0;
    return r;
}

/* The tracker's entry bytes and their size (40, 48 or 72); NULL when the dump has none usable. */
static const unsigned char *tt_entries(const gpk_val *trace, size_t *es, size_t *n)
{
    const gpk_val *b = trace ? gpk_get(trace, "entries") : NULL;
    int64_t size = 40;
    if (trace && gpk_as_i64(gpk_get(trace, "entry_size"), &size) != 0) size = 40;
    *es = (size_t)size, *n = 0;
    if (!b || b->type != GPK_BYTES || (size != 40 && size != 48 && size != 72) || b->len % (size_t)size) return NULL;
    *n = b->len / (size_t)size;
    return (const unsigned char *)b->s;
}

/* The tracker's stacks (gpumem_torch_trace_stacks: per stack a uint32 count, then its frames)
 * indexed; a stack that runs past the bytes ends the index there. */
static int tt_stacks(merge *m, const gpk_val *trace)
{
    const gpk_val *b = trace ? gpk_get(trace, "stacks") : NULL;
    if (!b || b->type != GPK_BYTES) return 0;
    const unsigned char *p = (const unsigned char *)b->s, *end = p + b->len;
    size_t cap = 0;
    while (end - p >= 4) {
        uint32_t n = le32(p);
        if ((size_t)(end - p - 4) / 12 < n) break;
        if (m->ntstack == cap) {
            cap = cap ? cap * 2 : 256;
            const unsigned char **r = realloc(m->tstack, cap * sizeof *r);
            if (!r) return -1;
            m->tstack = r;
        }
        m->tstack[m->ntstack++] = p;
        p += 4 + (size_t)n * 12;
    }
    return 0;
}

/* One history entry as pairing compares it. */
typedef struct tt_key { int action; uint64_t addr, size; } tt_key;

static int tt_same(const tt_rec *e, const tt_key *k)
{
    return e->action == k->action && e->addr == k->addr && e->size == k->size;
}

/* The tracker's entries of device dev in trace that are the history's k[0..n-1], one for one,
 * into e[0..n-1]: 0, or -1 when they are not there (the items then go by the clocks). */
static int pair_run(const gpk_val *trace, int dev, const tt_key *k, size_t n, tt_rec *e)
{
    size_t es, ne;
    const unsigned char *raw = tt_entries(trace, &es, &ne);
    if (!n || !raw) return -1;
    size_t nd = 0;
    /* this device's entries of actions 0-6 and 8 */
    uint32_t *idx = malloc((ne ? ne : 1) * sizeof *idx);
    if (!idx) return -1;
    for (size_t i = 0; i < ne; i++) {
        tt_rec r = tt_at(raw + i * es, es);
        if (r.device == dev && ta_kept(r.action)) idx[nd++] = (uint32_t)i;
    }
    int tries = 0, rc = -1;
    for (size_t last = nd; last-- > 0 && last + 1 >= n && tries < 64;) {
        e[n - 1] = tt_at(raw + (size_t)idx[last] * es, es);
        if (!tt_same(&e[n - 1], &k[n - 1])) continue;
        tries++;
        size_t base = last + 1 - n, i = 0;
        for (; i < n; i++) {
            e[i] = tt_at(raw + (size_t)idx[base + i] * es, es);
            if (!tt_same(&e[i], &k[i])) break;
        }
        if (i == n) {
            rc = 0;
            break;
        }
    }
    free(idx);
    return rc;
}

/* The tracker's stack (index from 1) as an item's frames. */
static void tstack_set(const merge *m, uint32_t stack, const unsigned char **frames, uint32_t *n)
{
    if (!stack || stack > m->ntstack) return;
    *n = le32(m->tstack[stack - 1]);
    *frames = m->tstack[stack - 1] + 4;
}

/* Item t placed exactly by the tracker's entry e: after the events recorded before it, at the
 * recorder's time then, with the entry's Python stack. */
static void place_exact(merge *m, titem *t, const tt_rec *e)
{
    t->t = (int64_t)e->t_ns;
    t->xseq = e->seq;
    t->exact = 1;
    tstack_set(m, e->stack, &t->tframes, &t->tframes_n);
    /* a workspace freed by gpumem's exit hook (rec.h, REC_F_TORCH_CACHE) */
    if ((e->flags & 1u) && (t->action == TA_FREE_REQ || t->action == TA_FREE_DONE))
        t->flags |= REC_F_TORCH_CACHE;
    m->nexact++;
}

/* The trace from the tracker alone (the dump's gm_trace.history: PyTorch's history was off):
 * each entry of actions 0-6 and 8 (OOM) an item, placed exactly, with its stream, pool and stack;
 * the allocations numbered per device as the history numbers them. */
static int trace_items(merge *m, const gpk_val *trace)
{
    size_t es, ne;
    const unsigned char *raw = tt_entries(trace, &es, &ne);
    uint64_t nalloc[128] = {0}; /* c10::DeviceIndex is an int8_t */
    for (size_t i = 0; raw && i < ne; i++) {
        tt_rec r = tt_at(raw + i * es, es);
        if (!ta_kept(r.action) || r.device < 0 || r.device >= 128) continue;
        titem *t = item_add(m);
        if (!t) return -1;
        t->action = r.action;
        t->device = r.device;
        t->addr = r.addr;
        t->size = t->requested = r.size;
        t->stream = r.stream;
        pool_set(t, r.pool[0], r.pool[1]);
        place_exact(m, t, &r);
        if (r.action == TA_ALLOC) t->ord = nalloc[r.device]++;
        m->ntrace++;
    }
    return 0;
}

static void pair_trace(merge *m, const gpk_val *trace, int dev, titem *it, size_t n)
{
    tt_key *k = malloc((n ? n : 1) * sizeof *k);
    tt_rec *e = malloc((n ? n : 1) * sizeof *e);
    for (size_t i = 0; k && i < n; i++) k[i] = (tt_key){it[i].action, it[i].addr, it[i].requested};
    if (k && e && pair_run(trace, dev, k, n, e) == 0)
        for (size_t i = 0; i < n; i++) place_exact(m, &it[i], &e[i]);
    free(k), free(e);
}

/* An item the program's hooks made (a name, a mark), not an entry of PyTorch's trace: on the wall
 * clock, never moved by PyTorch's. */
static int is_hook_item(const titem *t)
{
    return t->action == TA_NAME || t->action == TA_EMPTY_CACHE || t->action == TA_FRACTION ||
           t->action == TA_RESET_PEAK;
}

/* A hook's stamp on item t: wall ns w, and, where the tracker ran, the recorder's seq and clock
 * (preload/torch_trace.c: gpumem_torch_trace_seq / _time): placed exactly, after the events
 * recorded before it, at the recorder's time then (the tracker's entries are ordered by it). */
static void stamp_set(merge *m, titem *t, uint64_t w, uint64_t xseq, uint64_t tn, int64_t start_unix_ns)
{
    t->t = (int64_t)w - start_unix_ns;
    if (!xseq) return;
    size_t k = ev_below(m, xseq + 1);
    t->xseq = xseq;
    t->exact = 1;
    t->t = tn ? (int64_t)tn : k ? m->ev[k - 1].t : 0;
}

/* The dump's marks: the program's calls that change PyTorch's cache and are not all in its trace
 * (preload/python/gpumem/_torch.py), each (what, wall ns, device, value, seq, t_ns) with seq and
 * t_ns 0 where no tracker ran: ("empty_cache", ..., 0, ...) for torch.cuda.empty_cache(), whose
 * trace entries are only the segments it gave back (none under expandable segments, where it
 * unmapped nothing: the call itself is what another configuration's replay needs), and
 * ("memory_fraction", ..., bytes, ..., millionths[, "start"]) for set_per_process_memory_fraction,
 * or with "start" the fraction in force when CUDA started (PYTORCH_CUDA_ALLOC_CONF's key: flagged
 * REC_F_FRACTION_START): bytes PyTorch's cap on reserved, and ("reset_peak", ..., 0, ...) for
 * torch.cuda.reset_peak_memory_stats(), which PyTorch's trace does not show either (its
 * max_memory_*() count from there). A mark of another shape is skipped. */
static int marks_collect(merge *m, const gpk_val *marks, int64_t start_unix_ns)
{
    for (size_t i = 0; marks && marks->type == GPK_LIST && i < marks->len; i++) {
        const gpk_val *r = marks->items[i];
        if ((r->type != GPK_TUPLE && r->type != GPK_LIST) || r->len < 6) continue;
        const char *what = gpk_as_str(r->items[0]);
        uint64_t w, value, xseq, tn, millionths = 0;
        int64_t dev;
        if (!what || gpk_as_u64(r->items[1], &w) != 0 || gpk_as_i64(r->items[2], &dev) != 0 || dev < 0 || dev > 127 ||
            gpk_as_u64(r->items[3], &value) != 0 || gpk_as_u64(r->items[4], &xseq) != 0 ||
            gpk_as_u64(r->items[5], &tn) != 0)
            continue;
        int action = !strcmp(what, "empty_cache")       ? TA_EMPTY_CACHE
                     : !strcmp(what, "memory_fraction") ? TA_FRACTION
                     : !strcmp(what, "reset_peak")      ? TA_RESET_PEAK
                                                        : -1;
        if (action < 0) continue;
        if (action == TA_FRACTION && (r->len < 7 || gpk_as_u64(r->items[6], &millionths) != 0)) continue;
        titem *t = item_add(m);
        if (!t) return -1;
        t->action = action;
        t->device = (int)dev;
        t->size = value;
        t->requested = millionths;
        const char *tag = action == TA_FRACTION && r->len >= 8 ? gpk_as_str(r->items[7]) : NULL;
        if (tag && !strcmp(tag, "start")) t->flags = REC_F_FRACTION_START;
        stamp_set(m, t, w, xseq, tn, start_unix_ns);
    }
    return 0;
}

/* The trace entries of every device, the names and the marks, in time order, with block sizes. */
static int collect(merge *m, const gpk_val *snap, const gpk_val *names, const gpk_val *marks, const gpk_val *trace,
                   int64_t start_unix_ns, gm_tblocks *tb)
{
    const gpk_val *traces = gpk_get(snap, "device_traces");
    int from_tracker = flag_in(trace, "history");
    if (!from_tracker && (!traces || traces->type != GPK_LIST)) {
        snprintf(m->err, m->errsz, "PyTorch's snapshot has no device_traces (was its memory history on?)");
        return -1;
    }
    if (tt_stacks(m, trace) != 0) {
        snprintf(m->err, m->errsz, "out of memory reading gpumem's trace stacks");
        return -1;
    }
    if (from_tracker && trace_items(m, trace) != 0) goto oom;
    for (size_t dev = 0; !from_tracker && dev < traces->len; dev++) {
        const gpk_val *list = traces->items[dev];
        if (list->type != GPK_LIST) continue;
        uint64_t nalloc = 0;
        size_t first = m->n;
        for (size_t i = 0; i < list->len; i++) {
            const gpk_val *e = list->items[i];
            int a = action_of(gpk_as_str(gpk_get(e, "action")));
            if (a == TA_OTHER) continue;
            titem *t = item_add(m);
            if (!t) goto oom;
            t->action = a;
            t->device = (int)dev;
            t->t = (int64_t)(u64_in(e, "time_us") * 1000) - start_unix_ns;
            t->addr = entry_addr(e, a);
            t->size = t->requested = u64_in(e, "size");
            t->stream = u64_in(e, "stream");
            t->frames = gpk_get(e, "frames");
            pool_of(t, gpk_get(e, "pool_id"));
            if (a == TA_ALLOC) t->ord = nalloc++;
        }
        m->ntrace += m->n - first;
        pair_trace(m, trace, (int)dev, m->it + first, m->n - first);
    }
    for (size_t i = 0; names && names->type == GPK_LIST && i < names->len; i++) {
        const gpk_val *r = names->items[i];
        /* (wall ns, address, label) or, stamped with the recorder's seq (preload/torch_trace.c),
         * (wall ns, address, label, seq), and since 2026-12-06 its clock: (..., seq, t_ns) */
        if ((r->type != GPK_TUPLE && r->type != GPK_LIST) || r->len < 3 || r->len > 5) continue;
        uint64_t tns, addr, xseq = 0;
        const char *label = gpk_as_str(r->items[2]);
        if (gpk_as_u64(r->items[0], &tns) != 0 || gpk_as_u64(r->items[1], &addr) != 0 || !label) continue;
        titem *t = item_add(m);
        if (!t) goto oom;
        t->action = TA_NAME;
        t->addr = addr;
        t->name = label;
        /* exact where stamped: a name made right after an allocation goes after the
         * allocation's entries, which have its seq too */
        uint64_t tn = 0;
        if (r->len < 4 || gpk_as_u64(r->items[3], &xseq) != 0) xseq = 0;
        if (r->len < 5 || gpk_as_u64(r->items[4], &tn) != 0) tn = 0;
        stamp_set(m, t, tns, xseq, tn, start_unix_ns);
    }
    if (marks_collect(m, marks, start_unix_ns) != 0) goto oom;
    /* PyTorch's times on the recording's clock (the names' and the marks' are the wall clock
     * already); the tracker's trace has none of PyTorch's times */
    size_t nanch = 0;
    clk_anchor *anch = from_tracker ? NULL : clock_anchors(m, &nanch);
    if (nanch) {
        m->clock_offset = anch[nanch / 2].d;
        int64_t lo = anch[0].d, hi = anch[0].d;
        for (size_t i = 1; i < nanch; i++) {
            if (anch[i].d < lo) lo = anch[i].d;
            if (anch[i].d > hi) hi = anch[i].d;
        }
        m->clock_drift = hi - lo;
    }
    for (size_t i = 0; i < m->n; i++)
        if (!is_hook_item(&m->it[i]) && !m->it[i].exact) m->it[i].t += clock_at(anch, nanch, m->it[i].t);
    free(anch);
    /* a ring that was full lost its first entries: the segments the snapshot still holds but
     * the trace never made were made before it, and come first */
    int64_t first_t = INT64_MAX;
    u64map made = {0};
    for (size_t i = 0; i < m->n; i++) {
        if (!is_hook_item(&m->it[i]) && m->it[i].t < first_t) first_t = m->it[i].t;
        if ((m->it[i].action == TA_SEG_ALLOC || m->it[i].action == TA_SEG_MAP) && u64map_put(&made, m->it[i].addr, 1) != 0)
            goto oom_made;
    }
    const gpk_val *segs = gpk_get(snap, "segments");
    for (size_t i = 0; segs && segs->type == GPK_LIST && i < segs->len; i++) {
        const gpk_val *sg = segs->items[i];
        uint64_t addr = u64_in(sg, "address"), size = u64_in(sg, "total_size");
        int64_t dev = 0;
        if (!addr || !size || u64map_get(&made, addr)) continue;
        if (gpk_as_i64(gpk_get(sg, "device"), &dev) != 0) dev = 0;
        titem *t = item_add(m);
        if (!t) goto oom_made;
        t->action = TA_SEG_ALLOC;
        t->device = (int)dev;
        t->t = first_t == INT64_MAX ? 0 : first_t - 1;
        t->addr = addr;
        t->size = t->requested = size;
        t->stream = u64_in(sg, "stream");
        pool_of(t, gpk_get(sg, "segment_pool_id"));
    }
    u64map_free(&made);
    if (m->n > 1) qsort(m->it, m->n, sizeof *m->it, cmp_time);
    /* block sizes: the block structure replayed in PyTorch's order; a free carries its block's.
     * PyTorch's allocated (blocks, dropping at free_requested) and reserved bytes per device, for
     * its OOMs */
    u64map blk = {0};
    uint64_t allocated[128] = {0}, reserved[128] = {0};
    for (size_t i = 0; i < m->n; i++) {
        titem *t = &m->it[i];
        int d = t->device >= 0 && t->device < 128 ? t->device : 0;
        switch (t->action) {
        case TA_SEG_ALLOC:
        case TA_SEG_MAP:
            if (gm_tblocks_map(tb, t->addr, t->size, t->action == TA_SEG_MAP) != 0) goto oom;
            reserved[d] += t->size;
            break;
        case TA_SEG_FREE:
        case TA_SEG_UNMAP:
            gm_tblocks_unmap(tb, t->addr, t->size);
            reserved[d] -= t->size < reserved[d] ? t->size : reserved[d];
            break;
        case TA_ALLOC:
            if (!(t->size = gm_tblocks_alloc(tb, t->addr, t->requested)) || u64map_put(&blk, t->addr, t->size) != 0) {
                u64map_free(&blk);
                goto oom;
            }
            allocated[d] += t->size;
            break;
        case TA_FREE_REQ:
        case TA_FREE_DONE: {
            const uint64_t *bs = u64map_get(&blk, t->addr);
            if (bs) t->size = *bs;
            if (t->action == TA_FREE_DONE) gm_tblocks_free_block(tb, t->addr);
            else if (bs)
                allocated[d] -= *bs < allocated[d] ? *bs : allocated[d];
            break;
        }
        case TA_OOM: /* the replay is at this moment */
            t->allocated = allocated[d], t->reserved = reserved[d];
            t->largest = gm_tblocks_largest_free(tb);
            break;
        default: break;
        }
    }
    u64map_free(&blk);
    return 0;
oom_made:
    u64map_free(&made);
oom:
    snprintf(m->err, m->errsz, "out of memory reading PyTorch's history");
    return -1;
}

/* Where each item goes: after the last recorded event at or before its time; a segment's
 * entries next to the cudaMalloc / cudaFree that served them; never before an earlier item. */
static int place(merge *m)
{
    uint64_t floor = 0;
    for (size_t i = 0; i < m->n; i++) {
        titem *t = &m->it[i];
        uint64_t at = t->exact ? seq_before(m, t->xseq + 1) : after_time(m, t->t), anchor = 0;
        if (t->action == TA_SEG_ALLOC) {
            anchor = nearest_at(m->allocs, m->nallocs, t->addr, t->t);
            if (anchor) at = anchor;
        } else if (t->action == TA_SEG_FREE) {
            anchor = nearest_at(m->frees, m->nfrees, t->addr, t->t);
            if (anchor) at = seq_before(m, anchor);
        }
        if (at < floor) at = floor;
        t->after = floor = at;
    }
    m->shift_at = malloc((m->n ? m->n : 1) * sizeof *m->shift_at);
    if (!m->shift_at) return -1;
    for (size_t i = 0; i < m->n; i++) m->shift_at[i] = m->it[i].after;
    m->nshift = m->n;
    /* seq of each item: right after its anchor's new seq, in order (anchors never decrease, so
     * the items of one anchor are a run; run: where the current one started) */
    for (size_t i = 0, run = 0; i < m->n; i++) {
        titem *t = &m->it[i];
        uint64_t base = t->after ? new_seq(m, t->after) : 0;
        if (i && m->it[i - 1].after != t->after) run = i;
        t->seq = base + 1 + (i - run);
    }
    return 0;
}

/* Every seq the recording holds, renumbered (gm_newseq: monotonic, so order is kept). A column
 * outside any key is updated in place. A table keyed by seq is rebuilt instead: its rows copied
 * out, the table emptied, and the rows put back renumbered in key order. Each row goes in at the
 * b-tree's right edge, where an UPDATE of the key would delete it and insert it again in the
 * middle (twice, through negative numbers, so that no row lands on one not yet moved). */
static int rebuild_renumbered(merge *m, const char *table, const char *const *seqcols)
{
    sqlite3_stmt *ti = NULL;
    char q[160];
    snprintf(q, sizeof q, "SELECT name FROM pragma_table_info('%s') ORDER BY cid", table);
    if (sqlite3_prepare_v2(m->db, q, -1, &ti, NULL) != SQLITE_OK) return mfail(m, "reading a table's columns");
    char cols[1024] = "", vals[2048] = "";
    size_t lc = 0, lv = 0;
    int src;
    while ((src = sqlite3_step(ti)) == SQLITE_ROW) {
        const char *c = (const char *)sqlite3_column_text(ti, 0);
        int renum = 0;
        for (const char *const *s = seqcols; *s; s++) renum |= !strcmp(*s, c);
        lc += (size_t)snprintf(cols + lc, sizeof cols - lc, "%s\"%s\"", lc ? "," : "", c);
        lv += (size_t)snprintf(vals + lv, sizeof vals - lv, renum ? "%sgm_newseq(\"%s\")" : "%s\"%s\"", lv ? "," : "",
                               c);
        if (lc >= sizeof cols || lv >= sizeof vals) break;
    }
    sqlite3_finalize(ti);
    if (src == SQLITE_ROW) {
        snprintf(m->err, m->errsz, "table %s has more columns than the merge can renumber", table);
        return -1;
    }
    if (src != SQLITE_DONE) return mfail(m, "reading a table's columns");
    char *sql = sqlite3_mprintf("CREATE TEMP TABLE gm_renumber AS SELECT * FROM main.\"%w\";"
                                "DELETE FROM main.\"%w\";"
                                "INSERT INTO main.\"%w\" (%s) SELECT %s FROM temp.gm_renumber ORDER BY rowid;"
                                "DROP TABLE temp.gm_renumber",
                                table, table, table, cols, vals);
    int rc = sql ? mexec(m, sql) : -1;
    sqlite3_free(sql);
    return rc;
}

static int renumber(merge *m)
{
    if (sqlite3_create_function(m->db, "gm_newseq", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, m, sql_newseq,
                                NULL, NULL) != SQLITE_OK)
        return mfail(m, "registering gm_newseq");
    /* each table, whether a seq is (part of) its key, and its seq columns */
    static const struct { const char *table; int keyed; const char *cols[3]; } tabs[] = {
        {"events", 1, {"seq"}},           {"names", 1, {"seq", "birth"}}, {"ooms", 1, {"seq"}},
        {"launches", 1, {"seq"}},         {"uses", 1, {"seq", "birth"}},  {"snapshots", 0, {"seq"}},
        {"alloc_life", 0, {"birth", "death"}}};
    for (size_t i = 0; i < sizeof tabs / sizeof tabs[0]; i++) {
        const char *cols[3] = {0};
        size_t n = 0;
        for (size_t c = 0; c < 3 && tabs[i].cols[c]; c++) {
            char sql[256];
            snprintf(sql, sizeof sql, "SELECT 1 FROM pragma_table_info('%s') WHERE name = '%s'", tabs[i].table,
                     tabs[i].cols[c]);
            if (query_i64(m, sql, 0) == 1) cols[n++] = tabs[i].cols[c]; /* a column an older schema lacks */
        }
        if (!n) continue;
        if (tabs[i].keyed) {
            if (rebuild_renumbered(m, tabs[i].table, cols) != 0) return -1;
            continue;
        }
        char sql[256];
        size_t l = (size_t)snprintf(sql, sizeof sql, "UPDATE %s SET ", tabs[i].table);
        for (size_t c = 0; c < n; c++)
            l += (size_t)snprintf(sql + l, sizeof sql - l, "%s%s = gm_newseq(%s)", c ? ", " : "", cols[c], cols[c]);
        if (mexec(m, sql) != 0) return -1;
    }
    char sql[200];
    snprintf(sql, sizeof sql,
             "UPDATE meta SET value = gm_newseq(value) WHERE key = 'failed_after_seq' AND typeof(value) = 'integer'");
    return mexec(m, sql);
}

typedef struct tlive { uint64_t seq; int64_t name; } tlive;

/* Whether the recording holds a refusal of device dev's request placed after seq lo and at or
 * before hi (old seqs): the driver, gpumem's allocator or GPUMEM_LIMIT refused it, PyTorch
 * gave up on it, and that OOM is the recorded one. PyTorch asks more than once for one request
 * (its retry after freeing its cache is a second refusal): the refusals before the last are
 * deleted (events and `ooms`, by their new seqs: renumber has run), so that every command counts
 * the one OOM PyTorch counts (memory_stats()["num_ooms"]) and shows it as the last refusal, the
 * moment PyTorch gave up. 1 recorded, 0 not, -1 on a database error. */
static int oom_recorded(merge *m, int dev, uint64_t lo, uint64_t hi)
{
    size_t last = SIZE_MAX;
    for (size_t i = 0; i < m->nooms; i++)
        if (m->ooms[i].t == dev && m->ooms[i].seq > lo && m->ooms[i].seq <= hi) last = i;
    if (last == SIZE_MAX) return 0;
    for (size_t i = 0; i < last; i++) {
        if (m->ooms[i].t != dev || m->ooms[i].seq <= lo) continue;
        char q[200];
        uint64_t s = new_seq(m, m->ooms[i].seq);
        snprintf(q, sizeof q, "DELETE FROM events WHERE seq = %" PRIu64 " AND kind = %d; DELETE FROM ooms WHERE seq = %" PRIu64,
                 s, REC_OOM, s);
        if (mexec(m, q) != 0) return -1;
    }
    return 1;
}

/* The per-process memory fraction's bytes at device dev's OOM k of n (the trace's, in order;
 * the trace's ring may have lost the first ones, the hook's list keeps all: the two are paired
 * from the end), or REC_NO_LIMIT where no fraction below 1 was set: the cap PyTorch's OOM
 * observer was called with (_torch.py, _on_oom); a fraction of 0 is a cap of 0 bytes. *key: the
 * fraction was PYTORCH_CUDA_ALLOC_CONF's per_process_memory_fraction key, the program having
 * set none (the hook's fourth item "key"; a dump without it says a call set it). */
static uint64_t oom_fraction_limit(const merge *m, int dev, size_t k, size_t n, int *key)
{
    const gpk_val *l = m->oom_limits;
    size_t have = 0;
    *key = 0;
    for (size_t i = 0; l && l->type == GPK_LIST && i < l->len; i++) {
        const gpk_val *x = l->items[i];
        int64_t d;
        if ((x->type == GPK_TUPLE || x->type == GPK_LIST) && x->len >= 3 &&
            gpk_as_i64(x->items[0], &d) == 0 && d == dev)
            have++;
    }
    if (have < n) return REC_NO_LIMIT;
    size_t want = have - n + k, j = 0;
    for (size_t i = 0; i < l->len; i++) {
        const gpk_val *x = l->items[i];
        int64_t d;
        uint64_t cap;
        if ((x->type != GPK_TUPLE && x->type != GPK_LIST) || x->len < 3 ||
            gpk_as_i64(x->items[0], &d) != 0 || d != dev)
            continue;
        if (j++ != want) continue;
        const gpk_val *f = x->items[2];
        double frac = f->type == GPK_FLOAT ? f->f : f->type == GPK_INT ? (double)f->i : 1.0;
        if (!(frac < 1.0 && gpk_as_u64(x->items[1], &cap) == 0)) return REC_NO_LIMIT;
        const char *who = x->len >= 4 ? gpk_as_str(x->items[3]) : NULL;
        *key = who && !strcmp(who, "key");
        return cap;
    }
    return REC_NO_LIMIT;
}

/* PyTorch's OOM item t, unless the recording has it already: an oom event (kind 13, with the
 * fraction's flag where that was the cap) and its `ooms` row. k of n: its place among its
 * device's OOMs; last_req: the recorded seq its device's previous request was placed after. */
static int insert_oom(merge *m, sqlite3_stmt *ev, const titem *t, int64_t range, size_t k, size_t n,
                      uint64_t last_req)
{
    int rec = oom_recorded(m, t->device, last_req, t->after);
    if (rec) return rec < 0 ? -1 : 0;
    int64_t stack = stack_of(m, t), stream = stream_of(m, t->device, t->stream);
    if (stack < 0 || stream < 0) return -1;
    gm_toom o = {.seq = t->seq,
                 .device = t->device,
                 .stream = stream,
                 .requested = t->requested,
                 .allocated = t->allocated,
                 .reserved = t->reserved,
                 .largest_free = t->largest,
                 .device_free = t->addr};
    int key;
    o.limit = oom_fraction_limit(m, t->device, k, n, &key);
    char q[160];
    snprintf(
        q, sizeof q,
        "SELECT requested FROM events WHERE kind = %d AND device = %d ORDER BY seq DESC LIMIT 1",
        REC_DEVICE_INFO, t->device);
    o.device_total = (uint64_t)query_i64(m, q, 0);
    sqlite3_bind_int64(ev, 1, (int64_t)t->seq);
    sqlite3_bind_int64(ev, 2, t->t);
    sqlite3_bind_int(ev, 3, REC_OOM);
    /* the fraction's flag, and the key's where PYTORCH_CUDA_ALLOC_CONF set it (rec.h) */
    sqlite3_bind_int(ev, 4, (int)(t->flags | (o.limit == REC_NO_LIMIT ? 0
                                              : key                  ? REC_F_OOM_FRACTION | REC_F_OOM_KEY
                                                                     : REC_F_OOM_FRACTION)));
    sqlite3_bind_int(ev, 5, t->device);
    sqlite3_bind_int64(ev, 6, stream);
    sqlite3_bind_int64(ev, 7, 0);
    sqlite3_bind_int64(ev, 8, (int64_t)t->requested);
    sqlite3_bind_int64(ev, 9, (int64_t)t->requested);
    sqlite3_bind_null(ev, 10);
    if (stack)
        sqlite3_bind_int64(ev, 11, stack);
    else
        sqlite3_bind_null(ev, 11);
    if (range)
        sqlite3_bind_int64(ev, 12, range);
    else
        sqlite3_bind_null(ev, 12);
    int rc = sqlite3_step(ev);
    sqlite3_reset(ev);
    if (rc != SQLITE_DONE) return mfail(m, "events");
    return gm_toom_insert(m->db, &o, m->err, m->errsz);
}

static int insert_items(merge *m)
{
    int64_t *range_of = calloc(m->n ? m->n : 1, sizeof *range_of);
    if (!range_of || ranges_for(m, range_of) != 0) {
        free(range_of);
        snprintf(m->err, m->errsz, "out of memory placing PyTorch's events in ranges");
        return -1;
    }
    sqlite3_stmt *ev = NULL, *nm = NULL, *life = NULL;
    int rc = -1;
    if (sqlite3_prepare_v2(m->db, "INSERT INTO events (seq, t, kind, flags, device, stream, thread, addr, size, "
                                  "requested, alloc_id, stack, range) VALUES (?,?,?,?,?,?,NULL,?,?,?,?,?,?)",
                           -1, &ev, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(m->db, query_i64(m, "SELECT 1 FROM pragma_table_info('names') WHERE name = 'birth'", 0)
                                      ? "INSERT INTO names (seq, addr, name, birth) VALUES (?,?,?,?)"
                                      : "INSERT INTO names (seq, addr, name) VALUES (?,?,?)",
                           -1, &nm, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(m->db, "INSERT INTO alloc_life (birth, death, name) VALUES (?,?,?)", -1, &life, NULL) !=
            SQLITE_OK) {
        mfail(m, "preparing the inserts");
        goto done;
    }
    /* tensors live by address (one address space for every device) until their free completes:
     * for alloc_life and names */
    u64map live = {0};
    tlive *lv = NULL;
    size_t nlv = 0, clv = 0;
    size_t noom[128] = {0}, koom[128] = {0};
    uint64_t last_req[128] = {0}; /* per device: where its last request (alloc or OOM) was placed */
    for (size_t i = 0; i < m->n; i++)
        if (m->it[i].action == TA_OOM && m->it[i].device >= 0 && m->it[i].device < 128)
            noom[m->it[i].device]++;
    for (size_t i = 0; i < m->n; i++) {
        titem *t = &m->it[i];
        if (t->action == TA_OOM) {
            int d = t->device >= 0 && t->device < 128 ? t->device : 0;
            if (insert_oom(m, ev, t, range_of[i], koom[d]++, noom[d], last_req[d]) != 0)
                goto done_live;
            last_req[d] = t->after;
            continue;
        }
        if (t->action == TA_ALLOC && t->device >= 0 && t->device < 128)
            last_req[t->device] = t->after;
        if (t->action == TA_NAME) {
            int64_t sid = string_of(m, t->name);
            if (sid < 0) goto done_live;
            const uint64_t *li = u64map_get(&live, t->addr);
            sqlite3_bind_int64(nm, 1, (int64_t)t->seq);
            sqlite3_bind_int64(nm, 2, (int64_t)t->addr);
            sqlite3_bind_int64(nm, 3, sid);
            if (sqlite3_bind_parameter_count(nm) == 4) { /* the tensor it names, by its birth */
                if (li) sqlite3_bind_int64(nm, 4, (int64_t)lv[*li].seq);
                else sqlite3_bind_null(nm, 4);
            }
            if (sqlite3_step(nm) != SQLITE_DONE) {
                mfail(m, "names");
                goto done_live;
            }
            sqlite3_reset(nm);
            if (li) lv[*li].name = sid;
            continue;
        }
        int64_t stack = t->action == TA_ALLOC ? stack_of(m, t) : 0;
        int64_t stream = stream_of(m, t->device, t->stream);
        if (stack < 0 || stream < 0) goto done_live;
        sqlite3_bind_int64(ev, 1, (int64_t)t->seq);
        sqlite3_bind_int64(ev, 2, t->t);
        sqlite3_bind_int(ev, 3, kind_of_action[t->action]);
        sqlite3_bind_int(ev, 4, (int)t->flags);
        sqlite3_bind_int(ev, 5, t->device);
        sqlite3_bind_int64(ev, 6, stream);
        sqlite3_bind_int64(ev, 7, (int64_t)t->addr);
        sqlite3_bind_int64(ev, 8, (int64_t)t->size);
        sqlite3_bind_int64(ev, 9, t->action == TA_ALLOC || t->action == TA_FREE_REQ || t->action == TA_FRACTION
                                      ? (int64_t)t->requested
                                      : 0);
        /* a private pool's rows name it (the analyses keep each pool apart, as PyTorch does) */
        if (t->pool) sqlite3_bind_int64(ev, 10, (int64_t)t->pool);
        else sqlite3_bind_null(ev, 10);
        if (stack) sqlite3_bind_int64(ev, 11, stack);
        else sqlite3_bind_null(ev, 11);
        /* a workspace freed by gpumem's exit hook (REC_F_TORCH_CACHE): after the program ended,
         * in none of its ranges, though one it left open (an OOM's step) holds its time */
        if (range_of[i] && !rec_is_workspace_free((unsigned)kind_of_action[t->action], t->flags))
            sqlite3_bind_int64(ev, 12, range_of[i]);
        else sqlite3_bind_null(ev, 12);
        if (sqlite3_step(ev) != SQLITE_DONE) {
            mfail(m, "events");
            goto done_live;
        }
        sqlite3_reset(ev);
        if (t->action == TA_ALLOC) {
            if (nlv == clv) {
                clv = clv ? 2 * clv : 256;
                tlive *p = realloc(lv, clv * sizeof *p);
                if (!p) goto done_live;
                lv = p;
            }
            lv[nlv] = (tlive){t->seq, 0};
            u64map_put(&live, t->addr, nlv++);
        } else if (t->action == TA_FREE_DONE) {
            uint64_t li;
            if (u64map_del(&live, t->addr, &li)) {
                sqlite3_bind_int64(life, 1, (int64_t)lv[li].seq);
                sqlite3_bind_int64(life, 2, (int64_t)t->seq);
                if (lv[li].name) sqlite3_bind_int64(life, 3, lv[li].name);
                else sqlite3_bind_null(life, 3);
                if (sqlite3_step(life) != SQLITE_DONE) {
                    mfail(m, "alloc_life");
                    goto done_live;
                }
                sqlite3_reset(life);
            }
        }
    }
    /* alive at the end */
    for (uint64_t k = 0; live.keys && k <= live.mask; k++) {
        if (live.keys[k] == U64MAP_EMPTY) continue;
        tlive *x = &lv[live.vals[k]];
        sqlite3_bind_int64(life, 1, (int64_t)x->seq);
        sqlite3_bind_null(life, 2);
        if (x->name) sqlite3_bind_int64(life, 3, x->name);
        else sqlite3_bind_null(life, 3);
        if (sqlite3_step(life) != SQLITE_DONE) {
            mfail(m, "alloc_life");
            goto done_live;
        }
        sqlite3_reset(life);
    }
    rc = 0;
done_live:
    u64map_free(&live);
    free(lv);
done:
    sqlite3_finalize(ev), sqlite3_finalize(nm), sqlite3_finalize(life);
    free(range_of);
    return rc;
}

/* ---------------------------------------------------------------- the op log

 * GPUMEM_TORCH_OPS (`gpumem record --torch-ops`): the hook logged, per aten op, how many
 * allocations its device's allocator had made when the op returned (n) and the tensors of its
 * outputs and inputs (storage data pointer and bytes, dtype, the tensor's own bytes). A storage is the allocation made last at its
 * address among the first n of that device's trace: its birth, exactly, whatever the clocks.
 * Each op is placed at the seq of its n-th allocation (the last one before it returned). */
typedef struct opref { uint64_t n; int dev; size_t idx; } opref;

static int cmp_opref(const void *a, const void *b)
{
    const opref *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

enum { OP_MAX_DEV = 64 };

/* One op's storages as torch_op_args rows (at: address -> the birth seq of the allocation live
 * there when the op ran); *unmatched counts those no allocation was found for. */
static int insert_op_args(merge *m, sqlite3_stmt *ins, size_t id, int out, const gpk_val *list,
                          const u64map *at, uint64_t *unmatched)
{
    for (size_t k = 0; list && (list->type == GPK_LIST || list->type == GPK_TUPLE) && k < list->len; k++) {
        const gpk_val *st = list->items[k];
        uint64_t ptr, bytes, tbytes;
        const char *dt = (st->type == GPK_TUPLE || st->type == GPK_LIST) && st->len >= 3 ? gpk_as_str(st->items[2]) : NULL;
        if (!dt || gpk_as_u64(st->items[0], &ptr) != 0 || gpk_as_u64(st->items[1], &bytes) != 0) continue;
        if (st->len < 4 || gpk_as_u64(st->items[3], &tbytes) != 0) tbytes = bytes;
        /* its shape, "8,12,1024,64" (older logs have none) */
        char shape[160];
        size_t sl = 0;
        const gpk_val *sh = st->len >= 5 ? st->items[4] : NULL;
        for (size_t d = 0; sh && (sh->type == GPK_TUPLE || sh->type == GPK_LIST) && d < sh->len && sl + 24 < sizeof shape; d++) {
            uint64_t v;
            if (gpk_as_u64(sh->items[d], &v) != 0) break;
            sl += (size_t)snprintf(shape + sl, sizeof shape - sl, "%s%llu", d ? "," : "", (unsigned long long)v);
        }
        shape[sl] = 0;
        int64_t sid = string_of(m, dt);
        if (sid < 0) return -1;
        const uint64_t *o = bytes ? u64map_get(at, ptr) : NULL;
        sqlite3_bind_int64(ins, 1, (int64_t)id);
        sqlite3_bind_int(ins, 2, out);
        sqlite3_bind_int64(ins, 3, (int64_t)k);
        if (o) sqlite3_bind_int64(ins, 4, (int64_t)*o);
        else {
            sqlite3_bind_null(ins, 4);
            *unmatched += bytes != 0; /* an absent gradient (a backward node's) is no tensor */
        }
        sqlite3_bind_int64(ins, 5, (int64_t)ptr);
        sqlite3_bind_int64(ins, 6, (int64_t)bytes);
        sqlite3_bind_int64(ins, 7, sid);
        sqlite3_bind_int64(ins, 8, (int64_t)tbytes);
        if (sh && (sh->type == GPK_TUPLE || sh->type == GPK_LIST)) sqlite3_bind_text(ins, 9, shape, -1, SQLITE_TRANSIENT);
        else sqlite3_bind_null(ins, 9);
        if (sqlite3_step(ins) != SQLITE_DONE) return mfail(m, "torch_op_args");
        sqlite3_reset(ins);
    }
    return 0;
}

static const char OPS_DDL[] =
    "CREATE TABLE IF NOT EXISTS torch_ops (id INTEGER PRIMARY KEY, seq INTEGER, device INTEGER, "
    "op INTEGER, node INTEGER);"
    "CREATE TABLE IF NOT EXISTS torch_op_args (op INTEGER, out INTEGER, pos INTEGER, birth INTEGER, "
    "addr INTEGER, bytes INTEGER, dtype INTEGER, tensor_bytes INTEGER, shape TEXT);";

/* One op as a torch_ops row (seq: the last allocation's made before it, 0 none) and its args. */
static int insert_op(merge *m, sqlite3_stmt *op, sqlite3_stmt *arg, size_t idx, const gpk_val *o, int dev,
                     uint64_t seq, const u64map *at, uint64_t *unmatched)
{
    int64_t sid = string_of(m, gpk_as_str(o->items[2]));
    if (sid < 0) return -1;
    sqlite3_bind_int64(op, 1, (int64_t)idx + 1);
    if (seq) sqlite3_bind_int64(op, 2, (int64_t)seq);
    else sqlite3_bind_null(op, 2);
    sqlite3_bind_int(op, 3, dev);
    sqlite3_bind_int64(op, 4, sid);
    int64_t node = -1;
    if (o->len < 6 || gpk_as_i64(o->items[5], &node) != 0 || node < 0) sqlite3_bind_null(op, 5);
    else sqlite3_bind_int64(op, 5, node);
    if (sqlite3_step(op) != SQLITE_DONE) return mfail(m, "torch_ops");
    sqlite3_reset(op);
    if (insert_op_args(m, arg, idx + 1, 1, o->items[3], at, unmatched) != 0 ||
        insert_op_args(m, arg, idx + 1, 0, o->items[4], at, unmatched) != 0)
        return -1;
    return 0;
}

static int prepare_ops(merge *m, sqlite3_stmt **op, sqlite3_stmt **arg)
{
    if (sqlite3_prepare_v2(m->db, "INSERT INTO torch_ops (id, seq, device, op, node) VALUES (?,?,?,?,?)", -1, op,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(m->db, "INSERT INTO torch_op_args (op, out, pos, birth, addr, bytes, dtype, "
                                  "tensor_bytes, shape) VALUES (?,?,?,?,?,?,?,?,?)", -1, arg, NULL) != SQLITE_OK)
        return mfail(m, "preparing the op log's inserts");
    return 0;
}

/* An op log item's (count, device), or -1 when it is not one. */
static int op_item(const gpk_val *o, uint64_t *n, int *dev)
{
    int64_t d;
    if ((o->type != GPK_TUPLE && o->type != GPK_LIST) || o->len < 5 || gpk_as_u64(o->items[0], n) != 0 ||
        gpk_as_i64(o->items[1], &d) != 0 || d < 0 || d >= OP_MAX_DEV || !gpk_as_str(o->items[2]))
        return -1;
    *dev = (int)d;
    return 0;
}

/* The op log of a recording where gpumem was PyTorch's allocator (no history: the log's counts are
 * the recorder's last seq when each op returned, _torch.py): each storage is the last allocation
 * recorded at its address at or before that seq. */
static int insert_ops_by_seq(merge *m, const gpk_val *ops, uint64_t *nops, uint64_t *unmatched)
{
    *nops = *unmatched = 0;
    if (mexec(m, OPS_DDL) != 0) return -1;
    if (!ops || ops->type != GPK_LIST) return 0;
    sqlite3_stmt *ev = NULL, *op = NULL, *arg = NULL;
    u64map at = {0};
    int rc = -1, erc;
    uint64_t last = 0;
    opref *order = malloc((ops->len ? ops->len : 1) * sizeof *order);
    if (!order) goto oom;
    size_t nord = 0;
    for (size_t i = 0; i < ops->len; i++) {
        uint64_t n;
        int dev;
        if (op_item(ops->items[i], &n, &dev) == 0) order[nord++] = (opref){n, 0, i};
    }
    if (nord > 1) qsort(order, nord, sizeof *order, cmp_opref);
    if (sqlite3_prepare_v2(m->db, "SELECT seq, addr FROM events WHERE kind IN (1, 3) ORDER BY seq", -1, &ev, NULL) !=
            SQLITE_OK) {
        mfail(m, "reading the allocations");
        goto out;
    }
    if (prepare_ops(m, &op, &arg) != 0) goto out;
    erc = sqlite3_step(ev);
    for (size_t j = 0; j < nord; j++) {
        for (; erc == SQLITE_ROW && (uint64_t)sqlite3_column_int64(ev, 0) <= order[j].n; erc = sqlite3_step(ev)) {
            last = (uint64_t)sqlite3_column_int64(ev, 0);
            if (u64map_put(&at, (uint64_t)sqlite3_column_int64(ev, 1), last) != 0) goto oom;
        }
        const gpk_val *o = ops->items[order[j].idx];
        uint64_t n;
        int dev;
        op_item(o, &n, &dev);
        if (insert_op(m, op, arg, order[j].idx, o, dev, last, &at, unmatched) != 0) goto out;
        ++*nops;
    }
    if (erc != SQLITE_ROW && erc != SQLITE_DONE) {
        mfail(m, "reading the allocations");
        goto out;
    }
    rc = 0;
    goto out;
oom:
    snprintf(m->err, m->errsz, "out of memory merging PyTorch's op log");
out:
    sqlite3_finalize(ev), sqlite3_finalize(op), sqlite3_finalize(arg);
    u64map_free(&at);
    free(order);
    return rc;
}

static int insert_ops(merge *m, const gpk_val *ops, int truncated, uint64_t *nops, uint64_t *unmatched)
{
    *nops = *unmatched = 0;
    if (!ops || ops->type != GPK_LIST) return 0;
    if (mexec(m, OPS_DDL) != 0) return -1;
    if (truncated) return 0; /* the counts no longer start where the trace does */
    /* each device's allocations by their ordinal */
    size_t count[OP_MAX_DEV] = {0};
    for (size_t i = 0; i < m->n; i++)
        if (m->it[i].action == TA_ALLOC && m->it[i].device >= 0 && m->it[i].device < OP_MAX_DEV)
            count[m->it[i].device]++;
    const titem **by_ord[OP_MAX_DEV] = {0};
    opref *order = malloc((ops->len ? ops->len : 1) * sizeof *order);
    u64map at[OP_MAX_DEV] = {{0}};
    sqlite3_stmt *op = NULL, *arg = NULL;
    int rc = -1;
    if (!order) goto oom;
    for (int d = 0; d < OP_MAX_DEV; d++)
        if (count[d] && !(by_ord[d] = calloc(count[d], sizeof *by_ord[d]))) goto oom;
    for (size_t i = 0; i < m->n; i++) {
        const titem *t = &m->it[i];
        if (t->action == TA_ALLOC && t->device >= 0 && t->device < OP_MAX_DEV && t->ord < count[t->device])
            by_ord[t->device][t->ord] = t;
    }
    size_t nord = 0;
    for (size_t i = 0; i < ops->len; i++) {
        uint64_t n;
        int dev;
        if (op_item(ops->items[i], &n, &dev) == 0) order[nord++] = (opref){n, dev, i};
    }
    if (nord > 1) qsort(order, nord, sizeof *order, cmp_opref);
    if (prepare_ops(m, &op, &arg) != 0) goto out;
    uint64_t cursor[OP_MAX_DEV] = {0};
    for (size_t j = 0; j < nord; j++) {
        const opref *r = &order[j];
        const gpk_val *o = ops->items[r->idx];
        int d = r->dev;
        uint64_t n = r->n < count[d] ? r->n : count[d];
        for (; cursor[d] < n; cursor[d]++)
            if (u64map_put(&at[d], by_ord[d][cursor[d]]->addr, by_ord[d][cursor[d]]->seq) != 0) goto oom;
        if (insert_op(m, op, arg, r->idx, o, d, n ? by_ord[d][n - 1]->seq : 0, &at[d], unmatched) != 0) goto out;
        ++*nops;
    }
    rc = 0;
    goto out;
oom:
    snprintf(m->err, m->errsz, "out of memory merging PyTorch's op log");
out:
    sqlite3_finalize(op), sqlite3_finalize(arg);
    for (int d = 0; d < OP_MAX_DEV; d++) free(by_ord[d]), u64map_free(&at[d]);
    free(order);
    return rc;
}

int gm_torch_merge(const char *dbpath, const unsigned char *buf, size_t n, uint64_t *merged, char *err,
                   size_t errsz)
{
    gpk_doc doc;
    merge m = {.err = err, .errsz = errsz};
    gm_tblocks tb = {0};
    int rc = -1, began = 0;
    *merged = 0;
    if (gpk_parse(buf, n, 0, &doc, err, errsz) != 0) goto out;
    const gpk_val *root = doc.root, *snap = gpk_get(root, "snapshot");
    const char *pos = gpk_as_str(gpk_get(root, "ops_position"));
    /* the op log alone: gpumem was PyTorch's allocator (no history; _torch.py's _dump_ops) */
    int ops_only = !snap && pos && !strcmp(pos, "seq");
    if ((!snap && !ops_only) || !gpk_get(root, "gpumem_torch")) {
        snprintf(err, errsz, "not a dump of gpumem's PyTorch hook (no gpumem_torch / snapshot)");
        goto out;
    }
    /* The recording is written in place, under the name the recorder made: never through a
     * link put at that name. A linked directory above it is fine, which SQLITE_OPEN_NOFOLLOW
     * would refuse too; so the last name is checked here. One thread uses this connection: no
     * SQLite mutexes. */
    struct stat named;
    if (lstat(dbpath, &named) != 0 || !S_ISREG(named.st_mode)) {
        snprintf(err, errsz, "%s is no longer the recording's regular file; not writing through it", dbpath);
        goto out;
    }
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(dbpath, &m.db, flags, NULL) != SQLITE_OK) {
        snprintf(err, errsz, "cannot open %s: %s", dbpath, m.db ? sqlite3_errmsg(m.db) : "out of memory");
        goto out;
    }
    sqlite3_busy_timeout(m.db, 5000);
    if (mexec(&m, "BEGIN IMMEDIATE") != 0) goto out;
    began = 1;
    if (query_i64(&m, "SELECT count(*) FROM meta WHERE key IN ('torch_history', 'torch_ops')", 0)) {
        snprintf(err, errsz, "%s already holds a merged PyTorch history or op log", dbpath);
        goto out;
    }
    /* the dtypes of the torch.autocast regions the program entered on CUDA (_torch.py,
     * _autocast_seen): meta torch_autocast, "float16,bfloat16"; none entered, no row */
    char autocast[128] = "";
    const gpk_val *ac = gpk_get(root, "autocast");
    for (size_t i = 0; ac && ac->type == GPK_LIST && i < ac->len; i++) {
        const char *dt = gpk_as_str(ac->items[i]);
        size_t at = strlen(autocast);
        if (dt && strspn(dt, "abcdefghijklmnopqrstuvwxyz0123456789_") == strlen(dt))
            snprintf(autocast + at, sizeof autocast - at, "%s%s", at ? "," : "", dt);
    }
    if (autocast[0]) {
        char *q = sqlite3_mprintf("INSERT OR REPLACE INTO meta VALUES ('torch_autocast', %Q)", autocast);
        int qrc = q ? mexec(&m, q) : -1;
        sqlite3_free(q);
        if (qrc != 0) goto out;
    }
    if (ops_only) {
        m.next_string = query_i64(&m, "SELECT max(id) FROM strings", 0) + 1;
        uint64_t nops = 0, unmatched = 0;
        const gpk_val *ops = gpk_get(root, "ops");
        const char *ver = gpk_as_str(gpk_get(root, "torch_version"));
        if (insert_ops_by_seq(&m, ops, &nops, &unmatched) != 0) goto out;
        char *q = sqlite3_mprintf("INSERT OR REPLACE INTO meta VALUES ('torch_ops', %llu), ('torch_ops_logged', %llu), "
                                  "('torch_op_args_unmatched', %llu), ('torch_ops_position', 'seq'), "
                                  "('torch_version', %Q)",
                                  (unsigned long long)nops,
                                  (unsigned long long)(ops && ops->type == GPK_LIST ? ops->len : 0),
                                  (unsigned long long)unmatched, ver ? ver : "");
        int qrc = q ? mexec(&m, q) : -1;
        sqlite3_free(q);
        if (qrc != 0 || mexec(&m, "COMMIT") != 0) goto out;
        began = 0;
        *merged = nops;
        rc = 0;
        goto out;
    }
    int64_t start_unix_ns = query_i64(&m, "SELECT value FROM meta WHERE key = 'start_unix_ns'", -1);
    if (start_unix_ns < 0) {
        snprintf(err, errsz, "%s has no start time (meta.start_unix_ns): cannot place PyTorch's events", dbpath);
        goto out;
    }
    m.oom_limits = gpk_get(root, "oom_limits");
    gm_tsettings set;
    gm_tsettings_read(gpk_get(snap, "allocator_settings"), &set);
    gm_tblocks_init(&tb, &set);
    if (load_recorded(&m) != 0 || collect(&m, snap, gpk_get(root, "names"), gpk_get(root, "marks"), gpk_get(root, "gm_trace"), start_unix_ns, &tb) != 0 ||
        place(&m) != 0 || renumber(&m) != 0)
        goto out;
    m.next_frame = query_i64(&m, "SELECT max(id) FROM frames", 0) + 1;
    m.next_stack = query_i64(&m, "SELECT max(stack) FROM stacks", 0) + 1;
    m.next_string = query_i64(&m, "SELECT max(id) FROM strings", 0) + 1;
    m.next_stream = query_i64(&m, "SELECT max(id) FROM streams", 0) + 1;
    if (insert_items(&m) != 0) goto out;
    /* the program's own Python line at the first OOM (the hook's oom_python: the main thread's
     * stack, innermost first): the innermost frame outside torch, gpumem and Python's library */
    char oom_line[1200] = "";
    const gpk_val *op = gpk_get(root, "oom_python");
    for (size_t i = 0; op && op->type == GPK_LIST && i < op->len && !oom_line[0]; i++) {
        const char *file = gpk_as_str(gpk_get(op->items[i], "filename"));
        const char *fn = gpk_as_str(gpk_get(op->items[i], "name"));
        int64_t line = 0;
        if (!file || gpk_as_i64(gpk_get(op->items[i], "line"), &line) != 0) continue;
        int stdlib = strstr(file, "/lib/python3.") && !strstr(file, "-packages/");
        if (file[0] == '<' || stdlib || strstr(file, "-packages/torch") || strstr(file, "/gpumem/")) continue;
        snprintf(oom_line, sizeof oom_line, "%.900s\t%lld\t%.200s", file, (long long)line, fn ? fn : "?");
    }
    const gpk_val *as = gpk_get(snap, "allocator_settings");
    const char *conf = gpk_as_str(gpk_get(as, "PYTORCH_CUDA_ALLOC_CONF"));
    const char *ver = gpk_as_str(gpk_get(root, "torch_version")), *why = gpk_as_str(gpk_get(root, "why"));
    uint64_t entries = 0, ring = 0, longest = 0, stacks_lost = 0;
    if (gpk_as_u64(gpk_get(gpk_get(root, "gm_trace"), "stacks_lost"), &stacks_lost) != 0) stacks_lost = 0;
    for (size_t i = 0; i < m.n; i++) entries += !is_hook_item(&m.it[i]);
    /* PyTorch's history is a ring per device: a full one has lost its first entries; the
     * tracker's, when it is the trace, kept fewer entries than it saw */
    const gpk_val *gt = gpk_get(root, "gm_trace");
    int from_tracker = flag_in(gt, "history"), truncated;
    if (from_tracker) {
        size_t es, kept;
        uint64_t seen = 0;
        tt_entries(gt, &es, &kept);
        truncated = gpk_as_u64(gpk_get(gt, "seen"), &seen) == 0 && seen > kept;
    } else {
        const gpk_val *traces = gpk_get(snap, "device_traces");
        for (size_t d = 0; traces && traces->type == GPK_LIST && d < traces->len; d++)
            if (traces->items[d]->len > longest) longest = traces->items[d]->len;
        if (gpk_as_u64(gpk_get(root, "max_entries"), &ring) != 0) ring = 0;
        truncated = ring && longest >= ring;
    }
    uint64_t nops = 0, unmatched = 0;
    const gpk_val *ops = gpk_get(root, "ops");
    if (insert_ops(&m, ops, truncated, &nops, &unmatched) != 0) goto out;
    if (ops && ops->type == GPK_LIST) {
        char *q = sqlite3_mprintf("INSERT OR REPLACE INTO meta VALUES ('torch_ops', %llu), ('torch_ops_logged', %llu), "
                                  "('torch_op_args_unmatched', %llu)",
                                  (unsigned long long)nops, (unsigned long long)ops->len,
                                  (unsigned long long)unmatched);
        int qrc = q ? mexec(&m, q) : -1;
        sqlite3_free(q);
        if (qrc != 0) goto out;
    }
    /* how the entries were placed: "exact" (every one paired with the tracker's), "clock" (none:
     * no tracker, or its entries did not match), or "exact N of M" */
    char placement[64];
    if (m.nexact && m.nexact == m.ntrace) snprintf(placement, sizeof placement, "exact");
    else if (!m.nexact) snprintf(placement, sizeof placement, "clock");
    else snprintf(placement, sizeof placement, "exact %llu of %llu", (unsigned long long)m.nexact,
                  (unsigned long long)m.ntrace);
    char *sql = sqlite3_mprintf(
        "INSERT OR IGNORE INTO kinds VALUES (31,'torch_alloc'),(32,'torch_free'),(33,'torch_free_completed'),"
        "(34,'torch_segment_map'),(35,'torch_segment_unmap');"
        "INSERT OR REPLACE INTO meta VALUES ('torch_history', %llu), ('torch_version', %Q), ('torch_conf', %Q),"
        "('torch_expandable', %d), ('torch_blocks_guessed', %llu), ('torch_dumped_at', %Q), "
        "('torch_history_truncated', %d), ('torch_private_pools', %llu), ('events', (SELECT count(*) FROM events)), "
        "('torch_oom_python', %Q), ('torch_clock_offset_ns', %lld), ('torch_clock_drift_ns', %lld), "
        "('torch_placement', %Q), ('torch_stacks', %Q), ('torch_stacks_lost', %llu), ('torch_history_from', %Q)",
        (unsigned long long)entries, ver ? ver : "", conf ? conf : "", set.expandable,
        (unsigned long long)tb.guessed, why ? why : "exit", truncated,
        (unsigned long long)private_pools(&m), oom_line, (long long)m.clock_offset,
        (long long)m.clock_drift, placement,
        m.nstack_gpumem && m.nstack_torch ? "both" : m.nstack_gpumem ? "gpumem" : m.nstack_torch ? "pytorch" : "none",
        (unsigned long long)stacks_lost, from_tracker ? "gpumem" : "pytorch");
    int mrc = sql ? mexec(&m, sql) : -1;
    sqlite3_free(sql);
    if (mrc == 0 && gm_tsettings_store(m.db, as) != 0) {
        snprintf(err, errsz, "%s: cannot keep PyTorch's allocator_settings: %s", dbpath, sqlite3_errmsg(m.db));
        goto out;
    }
    if (mrc != 0 || mexec(&m, "COMMIT") != 0) goto out;
    began = 0;
    *merged = entries;
    rc = 0;
out:
    merge_end(&m);
    if (began) sqlite3_exec(m.db, "ROLLBACK", NULL, NULL, NULL);
    if (m.db) sqlite3_close(m.db);
    gpk_free(&doc);
    gm_tblocks_free(&tb);
    return rc;
}

/* ---------------------------------------------------------------- the snapshot at an OOM */

/* ---------------------------------------------------------------- the snapshot at an OOM */

/* The tracker's frames fr[0..n) as PyTorch writes a stack: [{filename, line, name}, ...]. */
static void write_tframes(merge *m, FILE *f, const unsigned char *fr, uint32_t n)
{
    gpk_list_begin(f);
    for (uint32_t i = 0; i < n; i++) {
        const char *fn, *file;
        uint32_t line;
        tframe_text(m, fr + (size_t)i * 12, &fn, &file, &line); /* out of memory: a nameless frame */
        gpk_dict_begin(f);
        gpk_key(f, "filename"), gpk_str(f, file);
        gpk_key(f, "line"), gpk_int(f, line);
        gpk_key(f, "name"), gpk_str(f, fn);
        gpk_dict_end(f);
    }
    gpk_list_end(f);
}

/* Dict d written again, its "frames" the tracker's stack (index from 1) where d has none (no
 * key, or an empty list); as it is otherwise. */
static void write_with_frames(merge *m, FILE *f, const gpk_val *d, uint32_t stack)
{
    const gpk_val *fr = gpk_get(d, "frames");
    const unsigned char *tf = NULL;
    uint32_t n = 0;
    tstack_set(m, stack, &tf, &n);
    if (!n || d->type != GPK_DICT || (fr && fr->type == GPK_LIST && fr->len)) {
        gpk_write_val(f, d);
        return;
    }
    gpk_dict_begin(f);
    for (size_t i = 0; i < d->len; i++) {
        const char *k = gpk_as_str(d->items[2 * i]);
        if (k && !strcmp(k, "frames")) continue;
        gpk_write_val(f, d->items[2 * i]);
        gpk_write_val(f, d->items[2 * i + 1]);
    }
    gpk_key(f, "frames");
    write_tframes(m, f, tf, n);
    gpk_dict_end(f);
}

/* device_traces with each allocation's frames from the tracker (paired as the merge pairs);
 * last: address -> the stack of the last allocation there, for the blocks */
static void write_traces(merge *m, FILE *f, const gpk_val *traces, const gpk_val *trace, u64map *last)
{
    gpk_list_begin(f);
    for (size_t dev = 0; dev < traces->len; dev++) {
        const gpk_val *list = traces->items[dev];
        size_t n = list->type == GPK_LIST ? list->len : 0, nk = 0;
        tt_key *k = malloc((n ? n : 1) * sizeof *k);
        tt_rec *e = malloc((n ? n : 1) * sizeof *e);
        uint32_t *stack = calloc(n ? n : 1, sizeof *stack);
        size_t *pos = malloc((n ? n : 1) * sizeof *pos);
        for (size_t i = 0; k && pos && i < n; i++) {
            const gpk_val *d = list->items[i];
            int a = action_of(gpk_as_str(gpk_get(d, "action")));
            if (a == TA_OTHER) continue;
            pos[nk] = i;
            k[nk++] = (tt_key){a, entry_addr(d, a), u64_in(d, "size")};
        }
        if (k && e && stack && pos && pair_run(trace, (int)dev, k, nk, e) == 0)
            for (size_t j = 0; j < nk; j++) {
                if (e[j].action != TA_ALLOC) continue;
                stack[pos[j]] = e[j].stack;
                if (e[j].stack) u64map_put(last, e[j].addr, e[j].stack); /* no room: that block keeps none */
            }
        if (!n || !stack) {
            gpk_write_val(f, list);
        } else {
            gpk_list_begin(f);
            for (size_t i = 0; i < n; i++) write_with_frames(m, f, list->items[i], stack[i]);
            gpk_list_end(f);
        }
        free(k), free(e), free(stack), free(pos);
    }
    gpk_list_end(f);
}

/* device_traces made from the tracker's entries (the trace, when PyTorch's history was off) as
 * PyTorch writes its history's: per device, each entry's action, addr, size, stream, time_us
 * (the wall clock: start_ns, the recording's start, plus the entry's time), compile_context,
 * user_metadata, pool_id and frames (an allocation's stack; none for the rest); ndev lists at
 * least (PyTorch's own count). last: address -> the stack of the last allocation there, for
 * the blocks. */
static void write_tracker_traces(merge *m, FILE *f, const gpk_val *trace, size_t ndev, int64_t start_ns, u64map *last)
{
    static const char *const action[] = {"alloc",        "free_requested", "free_completed",
                                         "segment_alloc", "segment_free",  "segment_map",
                                         "segment_unmap", "snapshot",      "oom"};
    size_t es, ne;
    const unsigned char *raw = tt_entries(trace, &es, &ne);
    for (size_t i = 0; raw && i < ne; i++) {
        tt_rec r = tt_at(raw + i * es, es);
        if (r.device >= 0 && r.device < 128 && (size_t)r.device >= ndev) ndev = (size_t)r.device + 1;
    }
    gpk_list_begin(f);
    for (size_t dev = 0; dev < ndev; dev++) {
        gpk_list_begin(f);
        for (size_t i = 0; raw && i < ne; i++) {
            tt_rec r = tt_at(raw + i * es, es);
            if (r.device != (int32_t)dev || r.action < 0 || r.action > 8 || r.action == 7) continue;
            gpk_dict_begin(f);
            gpk_key(f, "action"), gpk_str(f, action[r.action]);
            /* PyTorch writes an OOM's addr_ (the device's free bytes) as device_free, which
             * memory_viz reads */
            gpk_key(f, r.action == TA_OOM ? "device_free" : "addr"), gpk_uint(f, r.addr);
            gpk_key(f, "size"), gpk_uint(f, r.size);
            gpk_key(f, "stream"), gpk_uint(f, r.stream);
            gpk_key(f, "time_us"), gpk_int(f, (start_ns + (int64_t)r.t_ns) / 1000);
            gpk_key(f, "compile_context"), gpk_str(f, "N/A");
            gpk_key(f, "user_metadata"), gpk_str(f, "");
            gpk_key(f, "pool_id");
            gpk_list_begin(f);
            gpk_uint(f, r.pool[0]), gpk_uint(f, r.pool[1]);
            gpk_list_end(f);
            const unsigned char *tf = NULL;
            uint32_t n = 0;
            if (r.action == TA_ALLOC || r.action == TA_OOM) tstack_set(m, r.stack, &tf, &n);
            if (n && r.action == TA_ALLOC)
                u64map_put(last, r.addr, r.stack); /* no room: that block keeps none */
            else if (r.action == TA_ALLOC) u64map_del(last, r.addr, NULL);
            gpk_key(f, "frames");
            write_tframes(m, f, tf, n);
            gpk_dict_end(f);
        }
        gpk_list_end(f);
    }
    gpk_list_end(f);
}

/* segments with each allocated block's frames, where it has none, from the last allocation at
 * its address */
static void write_segments(merge *m, FILE *f, const gpk_val *segs, const u64map *last)
{
    gpk_list_begin(f);
    for (size_t i = 0; i < segs->len; i++) {
        const gpk_val *sg = segs->items[i], *blocks = gpk_get(sg, "blocks");
        if (sg->type != GPK_DICT || !blocks || blocks->type != GPK_LIST) {
            gpk_write_val(f, sg);
            continue;
        }
        gpk_dict_begin(f);
        for (size_t j = 0; j < sg->len; j++) {
            const char *key = gpk_as_str(sg->items[2 * j]);
            gpk_write_val(f, sg->items[2 * j]);
            if (!key || strcmp(key, "blocks")) {
                gpk_write_val(f, sg->items[2 * j + 1]);
                continue;
            }
            gpk_list_begin(f);
            for (size_t b = 0; b < blocks->len; b++) {
                const gpk_val *bl = blocks->items[b];
                const char *state = gpk_as_str(gpk_get(bl, "state"));
                const uint64_t *st = state && !strcmp(state, "active_allocated") ? u64map_get(last, u64_in(bl, "address")) : NULL;
                write_with_frames(m, f, bl, st ? (uint32_t)*st : 0);
            }
            gpk_list_end(f);
        }
        gpk_dict_end(f);
    }
    gpk_list_end(f);
}

int gm_torch_write_oom(const char *dbpath, const unsigned char *buf, size_t n, char *path,
                       size_t pathsz, char *err, size_t errsz)
{
    size_t l = strlen(dbpath);
    int db = l > 3 && !strcmp(dbpath + l - 3, ".db");
    snprintf(path, pathsz, "%.*s.oom.pickle", (int)(db ? l - 3 : l), dbpath);
    gpk_doc doc;
    if (gpk_parse(buf, n, 0, &doc, err, errsz) != 0) {
        gpk_free(&doc);
        return -1;
    }
    const gpk_val *snap = gpk_get(doc.root, "snapshot");
    if (!snap || snap->type != GPK_DICT) {
        gpk_free(&doc);
        snprintf(err, errsz, "the dump at the OOM holds no snapshot");
        return -1;
    }
    /* PyTorch's history keeps no stacks when gpumem's tracker reads them (preload/torch_trace.c):
     * the frames go back in from the tracker's copy in the same dump, the strings they name from
     * the recording, so that memory_viz and `gpumem import` see them as PyTorch would write them
     * (opened to write, though nothing is written: a read-only last connection would leave the
     * recording's -wal and -shm files behind) */
    const gpk_val *trace = gpk_get(doc.root, "gm_trace");
    int from_tracker = flag_in(trace, "history"); /* the trace is the tracker's: device_traces made */
    merge m = {0};
    u64map last = {0};
    int64_t start_ns = 0;
    if (trace && gpk_get(trace, "stacks") &&
        (sqlite3_open_v2(dbpath, &m.db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK || tt_stacks(&m, trace) != 0))
        m.ntstack = 0; /* no frames added: the snapshot as PyTorch wrote it */
    if (from_tracker && m.db) start_ns = query_i64(&m, "SELECT value FROM meta WHERE key = 'start_unix_ns'", 0);
    gm_out out;
    const char *inputs[] = {dbpath};
    int rc = gm_out_open(&out, path, GM_OUT_TORCH, 0, inputs, 1, err, errsz);
    if (rc == 0) {
        gpk_begin(out.f);
        gpk_dict_begin(out.f);
        gpk_key(out.f, "exporter"), gpk_str(out.f, "gpumem"); /* the output rule's marker */
        const gpk_val *traces = gpk_get(snap, "device_traces"), *segs = gpk_get(snap, "segments");
        int listed = traces && traces->type == GPK_LIST, fill = from_tracker || (m.ntstack && listed);
        if (fill) { /* first: the blocks take their frames from the traces */
            gpk_key(out.f, "device_traces");
            if (from_tracker)
                write_tracker_traces(&m, out.f, trace, listed ? traces->len : 1, start_ns, &last);
            else
                write_traces(&m, out.f, traces, trace, &last);
        }
        for (size_t i = 0; i < snap->len; i++) {
            const char *k = gpk_as_str(snap->items[2 * i]);
            if (k && (!strcmp(k, "exporter") || (fill && !strcmp(k, "device_traces")))) continue;
            gpk_write_val(out.f, snap->items[2 * i]);
            if (fill && m.ntstack && k && !strcmp(k, "segments") && segs->type == GPK_LIST)
                write_segments(&m, out.f, segs, &last);
            else
                gpk_write_val(out.f, snap->items[2 * i + 1]);
        }
        gpk_dict_end(out.f);
        gpk_end(out.f);
        rc = gm_out_commit(&out, err, errsz);
    }
    u64map_free(&last);
    merge_end(&m);
    if (m.db) sqlite3_close(m.db);
    gpk_free(&doc);
    return rc ? -1 : 0;
}
