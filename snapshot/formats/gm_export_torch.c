/* gm_export_torch.c — `gpumem export --format torch [--at peak|end|oom|SEQ]`: PyTorch's memory
 * snapshot (torch.cuda.memory._snapshot(), pickled at protocol 2 by gm_pickle.c), as
 * `python -m torch.cuda._memory_viz` and pytorch.org/memory_viz read it.
 *
 *   {"exporter": "gpumem", "device_traces": [[entry...] per device],
 *    "segments": [segment...], "allocator_settings": {...}, "external_annotations": [...]}
 *
 * One pass over the events in seq order, per device, writes the trace and keeps the allocator's
 * state as the events make it: segments (a plain driver allocation stands alone; pages mapped
 * into an expandable range join the segment beside them, as PyTorch's snapshot shows a mapped
 * run) and blocks (live, or freed and waiting for stream events: active_pending_free). At the
 * chosen moment (`--at`; default the peak allocated moment, what a memory_viz user looks at) the
 * state is copied: those are the snapshot's segments, their blocks tiling each one, the gaps
 * inactive. A recording of a PyTorch program with PyTorch's allocator (its history merged:
 * kinds 31-35) is exported as PyTorch saw it: its tensors and its segments.
 *
 * Each trace entry: action, addr, size (the block), requested_size (the request; PyTorch's own
 * traces carry the request in size, and `gpumem import` reads both), stream (the CUstream
 * handle), time_us (since the recording started; time_ns too, gpumem's, which `gpumem import`
 * orders entries and annotations by), device, frames ([{filename, line, name}],
 * innermost first, Python frames included, gpumem's and the CUDA libraries' cut from the inner
 * end), user_metadata (the tensor's name, "" when none). NVTX ranges are the
 * external_annotations ({stage START/END, name, device, time_us}). allocator_settings say the
 * configuration the recording ran with, in PyTorch's fields. */
#include "snapshot/formats/gm_formats.h"
#include "snapshot/analyze/gm_replay.h" /* gm_conf_pytorch */
#include "snapshot/analyze/gm_tstate.h"
#include "snapshot/formats/gm_pickle.h"
#include "snapshot/record/rec.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"

/* ---------------------------------------------------------------- frames */

static void frame_parts(const gm_model *m, long fi, const char **file, uint32_t *line, char *name,
                        size_t namesz)
{
    const gm_frame *f = &m->frames[fi];
    *line = f->line;
    *file = f->file;
    if (f->function)
        snprintf(name, namesz, "%s", f->function);
    else
        gm_frame_desc(m, fi, name, namesz);
    if (!*file) *file = f->module && f->module <= m->nmods ? m->mods[f->module - 1].path : "??";
}

/* The frames of each stack are written once and referred to through the pickle's memo after
 * that (Python's pickle.load shares the list; the viewers only read it): a trace entry then
 * costs a few bytes for its frames. */
typedef struct tx {
    gm_db *d;
    gm_model *m;
    FILE *out;
    u64map memo; /* stack -> memo index */
    uint32_t next_memo;
    u64map streams; /* stream id -> CUstream handle */
} tx;

static void pk_frames(tx *x, uint32_t stack)
{
    const uint64_t *idx = u64map_get(&x->memo, stack);
    if (idx) {
        gpk_memo_get(x->out, (uint32_t)*idx);
        return;
    }
    gpk_list_begin(x->out);
    size_t len = 0;
    if (stack) gm_stack_frame(x->m, stack, 0, &len);
    for (size_t i = stack ? gm_export_first_depth(x->m, stack, len) : 0; i < len; i++) {
        long fi = gm_stack_frame(x->m, stack, i, NULL);
        if (fi < 0) continue;
        const char *file;
        uint32_t line;
        char name[1024];
        frame_parts(x->m, fi, &file, &line, name, sizeof name);
        gpk_dict_begin(x->out);
        gpk_key(x->out, "filename"), gpk_str(x->out, file);
        gpk_key(x->out, "line"), gpk_uint(x->out, line);
        gpk_key(x->out, "name"), gpk_str(x->out, name);
        gpk_dict_end(x->out);
    }
    gpk_list_end(x->out);
    if (u64map_put(&x->memo, stack, x->next_memo) == 0) gpk_memo_put(x->out, x->next_memo++);
}

static uint64_t stream_handle(tx *x, int64_t id)
{
    const uint64_t *h = u64map_get(&x->streams, (uint64_t)id);
    if (h) return *h;
    uint64_t v = 0;
    sqlite3_stmt *s;
    if (gm_table_exists(x->d, "streams") &&
        sqlite3_prepare_v2(x->d->db, "SELECT handle FROM streams WHERE id = ?", -1, &s, NULL) ==
            SQLITE_OK) {
        sqlite3_bind_int64(s, 1, id);
        if (sqlite3_step(s) == SQLITE_ROW) v = (uint64_t)sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    u64map_put(&x->streams, (uint64_t)id, v);
    return v;
}

static void entry(tx *x, const char *action, uint64_t addr, uint64_t size, uint64_t requested,
                  uint64_t stream, uint64_t t_ns, int device, uint32_t stack, const char *meta)
{
    FILE *o = x->out;
    gpk_dict_begin(o);
    gpk_key(o, "action"), gpk_str(o, action);
    gpk_key(o, "addr"), gpk_uint(o, addr);
    gpk_key(o, "size"), gpk_uint(o, size);
    if (requested) gpk_key(o, "requested_size"), gpk_uint(o, requested);
    gpk_key(o, "stream"), gpk_uint(o, stream);
    gpk_key(o, "time_us"), gpk_uint(o, t_ns / 1000);
    gpk_key(o, "time_ns"), gpk_uint(o, t_ns); /* gpumem's: the order against the annotations */
    gpk_key(o, "device"), gpk_int(o, device);
    gpk_key(o, "user_metadata"), gpk_str(o, meta ? meta : "");
    gpk_key(o, "frames"), pk_frames(x, stack);
    gpk_dict_end(o);
}

/* ---------------------------------------------------------------- the allocator's state */

/* The state itself (segments, blocks, the copy at the moment) is analyze/gm_tstate.c's, which
 * frag rebuilds PyTorch's state with too. */

/* The end of a block that was its own segment (gm_tblk.own_segment): the segment goes with it,
 * a segment_free after its free, as PyTorch shows a cudaFree of a one-block segment. */
static int own_segment_end(tx *x, gm_tstate *s, const gm_tblk *b, uint64_t stream, uint64_t t, int dev)
{
    uint64_t addr = b->addr, size = b->size;
    if (gm_tstate_unmap(s, addr, size) != 0) return -1;
    entry(x, "segment_free", addr, size, 0, stream, t, dev, 0, NULL);
    return 0;
}

/* 1 when device dev has one of gpumem's segments (a map or a driver allocation, kinds 14/15/18/19)
 * anywhere in the recording; 1 too when that cannot be read (the export then keeps the
 * allocations inside the segments the events show). */
static int device_has_segments(gm_db *d, int dev)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db, "SELECT 1 FROM events WHERE device = ?1 AND kind IN (14, 15, 18, 19) LIMIT 1",
                           -1, &s, NULL) != SQLITE_OK)
        return 1;
    sqlite3_bind_int(s, 1, dev);
    int has = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
    return has;
}

static void write_segments(tx *x, const gm_tcapture *caps, int ndev)
{
    FILE *o = x->out;
    gpk_list_begin(o);
    for (int dev = 0; dev < ndev; dev++) {
        const gm_tcapture *c = &caps[dev];
        size_t b = 0;
        for (size_t i = 0; i < c->nsegs; i++) {
            const gm_tseg *g = &c->segs[i];
            uint64_t end = g->addr + g->size;
            while (b < c->nblocks && c->blocks[b].addr < g->addr)
                b++;
            uint64_t allocated = 0, active = 0, requested = 0;
            for (size_t k = b; k < c->nblocks && c->blocks[k].addr < end; k++) {
                const gm_tblk *bl = &c->blocks[k];
                if (!bl->pending) allocated += bl->size, requested += bl->requested;
                active += bl->size;
            }
            gpk_dict_begin(o);
            gpk_key(o, "device"), gpk_int(o, dev);
            gpk_key(o, "address"), gpk_uint(o, g->addr);
            gpk_key(o, "total_size"), gpk_uint(o, g->size);
            gpk_key(o, "allocated_size"), gpk_uint(o, allocated);
            gpk_key(o, "active_size"), gpk_uint(o, active);
            gpk_key(o, "requested_size"), gpk_uint(o, requested);
            gpk_key(o, "stream"), gpk_uint(o, g->stream);
            /* PyTorch's small pool holds blocks of at most 1 MiB */
            gpk_key(o, "segment_type"),
                gpk_str(o, g->largest && g->largest <= ((uint64_t)1 << 20) ? "small" : "large");
            /* the pool the recording names (PyTorch's pool_id, as the merge packed it: a << 32 ^ b) */
            gpk_key(o, "segment_pool_id"), gpk_list_begin(o), gpk_uint(o, g->pool >> 32),
                gpk_uint(o, g->pool & 0xffffffffu), gpk_list_end(o);
            gpk_key(o, "is_expandable"), gpk_bool(o, g->expandable);
            gpk_key(o, "frames"), gpk_list_begin(o), gpk_list_end(o);
            gpk_key(o, "blocks");
            gpk_list_begin(o);
            uint64_t at = g->addr;
            for (; b < c->nblocks && c->blocks[b].addr < end; b++) {
                const gm_tblk *bl = &c->blocks[b];
                if (bl->addr < at) continue; /* overlaps what is written: not PyTorch's */
                uint64_t bend = bl->addr + bl->size > end ? end : bl->addr + bl->size;
                if (bl->addr > at) { /* a gap: free memory */
                    gpk_dict_begin(o);
                    gpk_key(o, "address"), gpk_uint(o, at);
                    gpk_key(o, "size"), gpk_uint(o, bl->addr - at);
                    gpk_key(o, "requested_size"), gpk_uint(o, 0);
                    gpk_key(o, "state"), gpk_str(o, "inactive");
                    gpk_key(o, "frames"), gpk_list_begin(o), gpk_list_end(o);
                    gpk_dict_end(o);
                }
                gpk_dict_begin(o);
                gpk_key(o, "address"), gpk_uint(o, bl->addr);
                gpk_key(o, "size"), gpk_uint(o, bend - bl->addr);
                gpk_key(o, "requested_size"), gpk_uint(o, bl->requested <= bend - bl->addr
                                                              ? bl->requested
                                                              : bend - bl->addr);
                gpk_key(o, "state"),
                    gpk_str(o, bl->pending ? "active_pending_free" : "active_allocated");
                gpk_key(o, "frames"), pk_frames(x, bl->stack);
                gpk_dict_end(o);
                at = bend;
            }
            if (at < end) {
                gpk_dict_begin(o);
                gpk_key(o, "address"), gpk_uint(o, at);
                gpk_key(o, "size"), gpk_uint(o, end - at);
                gpk_key(o, "requested_size"), gpk_uint(o, 0);
                gpk_key(o, "state"), gpk_str(o, "inactive");
                gpk_key(o, "frames"), gpk_list_begin(o), gpk_list_end(o);
                gpk_dict_end(o);
            }
            gpk_list_end(o);
            gpk_dict_end(o);
        }
    }
    gpk_list_end(o);
}

/* ---------------------------------------------------------------- settings and annotations */

/* PyTorch's own allocator_settings, kept as it wrote them (an imported snapshot, a merged
 * history: meta torch_allocator_settings, gm_torch.h), written back field for field. 1 written,
 * 0 none kept (or not readable: the settings are then rebuilt). */
static int write_kept_settings(tx *x)
{
    sqlite3_stmt *s;
    int done = 0;
    if (sqlite3_prepare_v2(x->d->db, "SELECT value FROM meta WHERE key = 'torch_allocator_settings'", -1, &s,
                           NULL) != SQLITE_OK)
        return 0;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) == SQLITE_BLOB) {
        gpk_doc doc = {0};
        char err[256];
        const unsigned char *b = sqlite3_column_blob(s, 0);
        if (gpk_parse(b, (size_t)sqlite3_column_bytes(s, 0), 0, &doc, err, sizeof err) == 0 && doc.root &&
            doc.root->type == GPK_DICT) {
            gpk_write_val(x->out, doc.root);
            done = 1;
        }
        gpk_free(&doc);
    }
    sqlite3_finalize(s);
    return done;
}

/* The configuration the recording ran with, in PyTorch's fields: PyTorch's own (kept as it
 * wrote them, else from its merged history: meta torch_conf) or, for gpumem's allocator, the
 * PYTORCH_CUDA_ALLOC_CONF with the same effect ("" where none has: meta.config is a GPUMEM_CONF,
 * which PyTorch refuses) and gpumem's own in GPUMEM_CONF; expandable_segments as the events say
 * it was used (pages mapped), not as asked. */
static void write_settings(tx *x, int torch, int mapped)
{
    FILE *o = x->out;
    if (write_kept_settings(x)) return;
    char conf[1024] = "", pyconf[1024] = "";
    alloc_config_t c;
    alloc_config_default(&c);
    if (torch) {
        gm_meta_text(x->d, "torch_conf", pyconf, sizeof pyconf);
        alloc_config_preset(&c, "pytorch");
        alloc_config_parse(&c, pyconf, NULL, 0);
    } else {
        gm_meta_text(x->d, "config", conf, sizeof conf);
        if (conf[0]) alloc_config_parse_recorded(&c, conf, NULL, 0);
        if (!gm_conf_pytorch(&c, pyconf, sizeof pyconf)) pyconf[0] = 0;
    }
    gpk_dict_begin(o);
    gpk_key(o, "PYTORCH_CUDA_ALLOC_CONF"), gpk_str(o, pyconf);
    if (!torch) gpk_key(o, "GPUMEM_CONF"), gpk_str(o, conf);
    gpk_key(o, "max_split_size"),
        gpk_int(o, c.max_split_size == SIZE_MAX ? -1 : (int64_t)c.max_split_size);
    gpk_key(o, "garbage_collection_threshold"), gpk_float(o, c.gc_threshold);
    gpk_key(o, "expandable_segments"), gpk_bool(o, mapped);
    gpk_key(o, "pinned_num_register_threads"), gpk_int(o, 1);
    gpk_key(o, "release_lock_on_cudamalloc"), gpk_bool(o, 0);
    gpk_key(o, "pinned_use_cuda_host_register"), gpk_bool(o, 0);
    gpk_key(o, "graph_capture_record_stream_reuse"), gpk_bool(o, 0);
    gpk_key(o, "roundup_power2_divisions");
    gpk_dict_begin(o);
    for (unsigned k = 0; k < 16; k++) {
        char key[16];
        snprintf(key, sizeof key, "%u", 1u << k);
        gpk_key(o, key), gpk_uint(o, c.rp2_div[20 + k]);
    }
    gpk_dict_end(o);
    gpk_dict_end(o);
}

typedef struct tann {
    uint64_t t, id;
    int start;
    const char *name;
} tann;

static int cmp_ann(const void *a, const void *b)
{
    const tann *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->start != y->start) return x->start - y->start; /* ends first */
    if (x->start) return x->id < y->id ? -1 : x->id > y->id;
    return x->id > y->id ? -1 : x->id < y->id; /* the inner range ends first */
}

/* NVTX ranges (push/pop and start/end; not marks) as PyTorch's external_annotations */
static int write_annotations(tx *x)
{
    FILE *o = x->out;
    sqlite3_stmt *s;
    tann *v = NULL;
    size_t n = 0, cap = 0;
    char **names = NULL;
    int rc = 0;
    gpk_list_begin(o);
    if (sqlite3_prepare_v2(x->d->db,
                           "SELECT r.id, r.start_ns, r.end_ns, s.s FROM ranges r LEFT JOIN strings s "
                           "ON s.id = r.name WHERE r.kind IS NOT 2 ORDER BY r.id",
                           -1, &s, NULL) == SQLITE_OK) {
        while (sqlite3_step(s) == SQLITE_ROW) {
            if (n + 2 > cap) {
                size_t nc = cap ? 2 * cap : 256;
                tann *nv = realloc(v, nc * sizeof *nv);
                char **nn = realloc(names, nc / 2 * sizeof *nn);
                if (nv) v = nv;
                if (nn) names = nn;
                if (!nv || !nn) {
                    rc = -1;
                    break;
                }
                cap = nc;
            }
            const char *nm = (const char *)sqlite3_column_text(s, 3);
            char *dup = strdup(nm ? nm : "?");
            if (!dup) {
                rc = -1;
                break;
            }
            names[n / 2] = dup;
            uint64_t id = (uint64_t)sqlite3_column_int64(s, 0);
            uint64_t start = (uint64_t)sqlite3_column_int64(s, 1);
            uint64_t end = sqlite3_column_type(s, 2) == SQLITE_NULL
                               ? x->m->last_t
                               : (uint64_t)sqlite3_column_int64(s, 2);
            v[n++] = (tann){start, id, 1, dup};
            v[n++] = (tann){end < start ? start : end, id, 0, dup};
        }
        sqlite3_finalize(s);
    }
    if (rc == 0) {
        if (n) gm_sort(v, n, sizeof *v, cmp_ann); /* v is NULL without annotations */
        for (size_t i = 0; i < n; i++) {
            gpk_dict_begin(o);
            gpk_key(o, "stage"), gpk_str(o, v[i].start ? "START" : "END");
            gpk_key(o, "name"), gpk_str(o, v[i].name);
            gpk_key(o, "device"), gpk_int(o, 0);
            gpk_key(o, "time_us"), gpk_uint(o, v[i].t / 1000);
            gpk_key(o, "time_ns"), gpk_uint(o, v[i].t);
            gpk_dict_end(o);
        }
    }
    gpk_list_end(o);
    for (size_t i = 0; i < n / 2; i++) free(names[i]);
    free(names), free(v);
    return rc;
}

/* ---------------------------------------------------------------- the moment */

int gm_export_at_seq(gm_model *m, const char *at, uint64_t *seq, char *err, size_t errsz)
{
    int torch = m->torch.present == 1;
    if (!at || !strcmp(at, "peak")) {
        *seq = torch ? m->torch.peak_allocated_seq : m->peak_allocated_seq;
        return 0;
    }
    if (!strcmp(at, "end")) {
        *seq = UINT64_MAX;
        return 0;
    }
    if (!strcmp(at, "oom")) {
        if (!m->nooms) {
            snprintf(err, errsz, "--at oom: the recording has no OOM");
            return -1;
        }
        *seq = m->ooms[0].seq;
        return 0;
    }
    uint64_t v;
    if (gm_arg_uint(at, 0, UINT64_MAX, &v) != 0) {
        snprintf(err, errsz, "--at takes peak, end, oom or an event's seq number, got '%s'", at);
        return -1;
    }
    /* a seq past the last event would silently be --at end */
    if (v > m->max_seq) {
        snprintf(err, errsz, "--at %s is past the recording's last event (seq %llu): give a seq up to it, or --at end",
                 at, (unsigned long long)m->max_seq);
        return -1;
    }
    *seq = v;
    return 0;
}

/* ---------------------------------------------------------------- the export */

/* name of the allocation born at seq (binary search: allocations are in birth order) */
static const char *name_at(const gm_model *m, const gm_alloc *a, size_t n, uint64_t birth)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a[mid].birth < birth)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && a[lo].birth == birth && a[lo].name ? gm_str(m, a[lo].name) : NULL;
}

int gm_export_torch(gm_db *d, gm_model *m, FILE *out, uint64_t at)
{
    tx x = {.d = d, .m = m, .out = out};
    int torch = m->torch.present == 1; /* PyTorch's allocator: its own view */
    const gm_alloc *names = torch ? m->torch.allocs : m->allocs;
    size_t nnames = torch ? m->torch.nallocs : m->nallocs;
    int torch_exp = torch && gm_meta_int(d, "torch_expandable", 0) != 0;
    int ndev = 1;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db, "SELECT max(device) FROM events WHERE device >= 0 AND device < 64",
                           -1, &s, NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
            ndev = sqlite3_column_int(s, 0) + 1;
        sqlite3_finalize(s);
    }
    gm_tcapture caps[64];
    memset(caps, 0, sizeof caps);
    gpk_begin(out);
    gpk_dict_begin(out);
    /* first, so that the output rule knows the file as ours (gm_out.h: GM_OUT_TORCH's marker) */
    gpk_key(out, "exporter"), gpk_str(out, "gpumem");
    /* None, or why the program did not run to its end: what it held then is in device_traces and
     * segments as alive, not necessarily leaked (a key PyTorch's viewers ignore) */
    char ending[256];
    gm_ending_line(d, ending, sizeof ending);
    gpk_key(out, "gpumem_ending"), gpk_str(out, ending[0] ? ending : NULL);
    gpk_key(out, "device_traces");
    gpk_list_begin(out);
    int rc = 0, mapped = 0;
    const char *q = torch ? "SELECT e.seq, e.t, e.kind, e.addr, e.size, e.requested, e.stream, "
                            "e.stack, o.device_free, e.flags, e.alloc_id FROM events e LEFT JOIN "
                            "ooms o ON o.seq = e.seq WHERE e.device = ?1 AND e.kind IN "
                            "(13,31,32,33,34,35) ORDER BY e.seq"
                          : "SELECT e.seq, e.t, e.kind, e.addr, e.size, e.requested, e.stream, "
                            "e.stack, o.device_free, e.flags, e.alloc_id FROM events e LEFT JOIN "
                            "ooms o ON o.seq = e.seq WHERE e.device = ?1 AND e.kind IN "
                            "(1,2,3,4,13,14,15,18,19,29) ORDER BY e.seq";
    for (int dev = 0; dev < ndev && rc == 0; dev++) {
        gm_tstate st = {0};
        u64map pend_key = {0}, early = {0}; /* gpumem's pending frees: addr -> allocator id */
        /* have_segs: an allocator's segments were seen (maps, driver allocations); a segment of
         * one allocation passed through is not one, so that without them the capture still makes
         * the other live blocks segments of their own */
        int captured = 0, have_segs = 0;
        /* no allocator's segment on this device in the whole recording (record mode: the
         * program's allocator served everything): each device allocation is memory the driver
         * gave for it alone, a segment of its own as the report counts it in reserved
         * (gm_model.have_segments), so its trace entries say so too: segment_alloc before its
         * alloc, segment_free after its free_completed, the same segments `segments` shows */
        int plain_own = !torch && !device_has_segments(d, dev);
        gpk_list_begin(out);
        if (sqlite3_prepare_v2(d->db, q, -1, &s, NULL) != SQLITE_OK) {
            rc = -1;
            break;
        }
        sqlite3_bind_int(s, 1, dev);
        while (rc == 0 && sqlite3_step(s) == SQLITE_ROW) {
            uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0);
            if (!captured && seq > at) {
                if (gm_tstate_capture(&st, dev, !have_segs, &caps[dev]) != 0) rc = -2;
                captured = 1;
            }
            uint64_t t = (uint64_t)sqlite3_column_int64(s, 1);
            int kind = sqlite3_column_int(s, 2) & 0xff;
            uint64_t addr = (uint64_t)sqlite3_column_int64(s, 3);
            uint64_t size = (uint64_t)sqlite3_column_int64(s, 4);
            uint64_t req = (uint64_t)sqlite3_column_int64(s, 5);
            uint64_t stream = stream_handle(&x, sqlite3_column_int64(s, 6));
            uint32_t stack = (uint32_t)sqlite3_column_int64(s, 7);
            uint64_t key = (uint64_t)sqlite3_column_int64(s, 10);
            if (kind == REC_ALLOC || kind == REC_ALLOC_ASYNC || kind == REC_TORCH_ALLOC) {
                gm_tblk *old = gm_tstate_block_at(&st, addr);
                if (old && old->pending) { /* handed out again: its free had landed */
                    entry(&x, "free_completed", addr, old->size, 0, stream, t, dev, old->stack, NULL);
                    u64map_del(&pend_key, addr, NULL);
                    if (old->own_segment && own_segment_end(&x, &st, old, stream, t, dev) != 0) rc = -2;
                }
                const char *nm = name_at(m, names, nnames, seq);
                /* passed through as its own segment (GM_ALLOC_OWN_SEGMENT): a segment_alloc before
                 * it, so that an import counts it in reserved as the report does */
                uint8_t own = kind != REC_TORCH_ALLOC &&
                              (rec_is_own_segment((unsigned)kind, (unsigned)sqlite3_column_int64(s, 9)) || plain_own);
                gm_tblk b = {.addr = addr, .size = size, .requested = req ? req : size, .birth = seq, .stack = stack,
                             .own_segment = own};
                if (own) {
                    if (gm_tstate_map(&st, addr, size, 0, dev, stream, 0) != 0) rc = -2;
                    entry(&x, "segment_alloc", addr, size, 0, stream, t, dev, 0, NULL);
                }
                if (gm_tstate_block_add(&st, &b) != 0) rc = -2;
                entry(&x, "alloc", addr, size, req, stream, t, dev, stack, nm);
            } else if (kind == REC_FREE || kind == REC_FREE_ASYNC || kind == REC_TORCH_FREE) {
                gm_tblk *b = gm_tstate_block_at(&st, addr);
                if (!b || b->pending) continue; /* not allocated in the recording */
                entry(&x, "free_requested", addr, b->size, 0, stream, t, dev, b->stack, NULL);
                int waits = kind == REC_TORCH_FREE ||
                            ((sqlite3_column_int64(s, 9) & REC_F_PENDING) && !u64map_del(&early, key, NULL));
                if (!waits) {
                    entry(&x, "free_completed", addr, b->size, 0, stream, t, dev, b->stack, NULL);
                    if (b->own_segment && own_segment_end(&x, &st, b, stream, t, dev) != 0) rc = -2;
                    gm_tstate_block_drop(&st, addr);
                } else {
                    b->pending = 1;
                    if (kind != REC_TORCH_FREE && u64map_put(&pend_key, addr, key) != 0) rc = -2;
                }
            } else if (kind == REC_TORCH_FREE_COMPLETED || kind == REC_FREE_COMPLETED) {
                gm_tblk *b = gm_tstate_block_at(&st, addr);
                if (kind == REC_FREE_COMPLETED) { /* gpumem's: matched by the allocator's id */
                    const uint64_t *k = u64map_get(&pend_key, addr);
                    if (!b || !b->pending || !k || *k != key) {
                        if (u64map_put(&early, key, 1) != 0) rc = -2; /* before its own free */
                        continue;
                    }
                    u64map_del(&pend_key, addr, NULL);
                }
                if (!b || !b->pending) continue;
                entry(&x, "free_completed", addr, b->size, 0, stream, t, dev, b->stack, NULL);
                if (b->own_segment && own_segment_end(&x, &st, b, stream, t, dev) != 0) rc = -2;
                gm_tstate_block_drop(&st, addr);
            } else if (kind == REC_OOM) {
                gpk_dict_begin(out);
                gpk_key(out, "action"), gpk_str(out, "oom");
                gpk_key(out, "addr"), gpk_uint(out, 0);
                gpk_key(out, "size"), gpk_uint(out, req ? req : size);
                gpk_key(out, "stream"), gpk_uint(out, stream);
                gpk_key(out, "time_us"), gpk_uint(out, t / 1000);
                gpk_key(out, "device"), gpk_int(out, dev);
                gpk_key(out, "device_free"), gpk_uint(out, (uint64_t)sqlite3_column_int64(s, 8));
                gpk_key(out, "user_metadata"), gpk_str(out, "");
                gpk_key(out, "frames"), pk_frames(&x, stack);
                gpk_dict_end(out);
            } else {
                int grow = kind == REC_SEG_MAP || kind == REC_DRIVER_ALLOC || kind == REC_TORCH_SEG_MAP;
                int exp = torch ? torch_exp : kind == REC_SEG_MAP || kind == REC_SEG_UNMAP;
                mapped |= exp && grow;
                have_segs = 1;
                const char *a = grow ? (exp ? "segment_map" : "segment_alloc")
                                     : (exp ? "segment_unmap" : "segment_free");
                /* a private pool's segment: PyTorch's history names its pool in alloc_id */
                uint64_t pool = kind == REC_TORCH_SEG_MAP && (sqlite3_column_int64(s, 9) & REC_F_PRIVATE_POOL) ? (key ? key : 1) : 0;
                if ((grow ? gm_tstate_map(&st, addr, size, exp, dev, stream, pool) : gm_tstate_unmap(&st, addr, size)) != 0)
                    rc = -2;
                entry(&x, a, addr, size, 0, stream, t, dev, 0, NULL);
            }
        }
        sqlite3_finalize(s);
        if (rc == 0 && !captured && gm_tstate_capture(&st, dev, !have_segs, &caps[dev]) != 0) rc = -2;
        gm_tstate_free(&st);
        u64map_free(&pend_key), u64map_free(&early);
        gpk_list_end(out);
    }
    gpk_list_end(out);
    if (rc == 0) {
        gpk_key(out, "segments");
        write_segments(&x, caps, ndev);
        gpk_key(out, "allocator_settings");
        write_settings(&x, torch, mapped);
        gpk_key(out, "external_annotations");
        if (write_annotations(&x) != 0) rc = -2;
    }
    gpk_dict_end(out);
    gpk_end(out);
    for (int i = 0; i < 64; i++) gm_tcapture_free(&caps[i]);
    u64map_free(&x.memo), u64map_free(&x.streams);
    if (rc == -2) {
        fprintf(stderr, "gpumem: out of memory exporting %s\n", d->path);
        return GM_EXIT_BADDB;
    }
    if (rc) {
        fprintf(stderr, "gpumem: %s: cannot read it for the export: %s\n", d->path,
                sqlite3_errmsg(d->db));
        return GM_EXIT_BADDB;
    }
    return 0;
}
