/* gm_export_fmt.c — `gpumem export --format torch|chrome|folded|speedscope|csv`.
 *
 * All but csv read the loaded model (stacks, frames, ranges, the sweep's peak) and make one
 * pass over `events` in seq order with a map of live allocations by address, like the report,
 * so a database from a killed process exports the same way.
 *
 * torch: PyTorch's memory snapshot (torch.cuda.memory._snapshot()), pickled at protocol 2 by
 * gm_pickle.c: {"segments": [...], "device_traces": [[...] per device], "allocator_settings":
 * {...}}. Segments and blocks are the exit snapshot's (reason 3; else the last snapshot);
 * total_size is the mapped part of a segment (PyTorch's blocks cover it; expandable segments'
 * unmapped tail is not listed, as in PyTorch); device_traces hold one entry per event: alloc
 * (cudaMalloc, cudaMallocAsync), free_requested and free_completed (a free; a free that waited
 * for stream events completes where the recording saw its block land, below), segment_map /
 * segment_unmap (the allocator mapped or unmapped memory into a segment), segment_alloc /
 * segment_free (a plain driver allocation), oom. Each entry has action, addr, size, stream (the
 * CUstream handle), time_us (since the recording started), device, frames ([{filename, line,
 * name}], innermost first, Python frames included).
 *
 * folded: "root;...;leaf bytes" lines (flamegraph.pl, inferno, speedscope): --what peak = the
 * device bytes live at the report's peak allocated moment (the lines sum to it), --what total =
 * every device allocation's bytes.
 * speedscope: its file format (https://www.speedscope.app/file-format-schema.json), a "sampled"
 * profile in bytes per --what (peak and total, both when --what is not given).
 * chrome: trace-event JSON: a counter per device (allocated, reserved), NVTX push/pop and
 * start/end ranges as complete slices on their thread, marks as instant events, every device
 * allocation as an async slice from alloc to free (name = the tensor's name, else its size),
 * OOMs as global instant events.
 * csv: the `allocations` view, a header line, RFC 4180 quoting. */
#include "snapshot/formats/gm_formats.h"
#include "snapshot/formats/gm_out.h"
#include "snapshot/formats/gm_pickle.h"
#include "snapshot/record/rec.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static int is_dev_alloc(int k)
{
    return k == REC_ALLOC || k == REC_ALLOC_ASYNC;
}
static int is_dev_free(int k)
{
    return k == REC_FREE || k == REC_FREE_ASYNC;
}

/* stream id -> CUstream handle */
static uint64_t stream_handle(gm_db *d, u64map *cache, int64_t id)
{
    const uint64_t *h = u64map_get(cache, (uint64_t)id);
    if (h) return *h;
    uint64_t v = 0;
    sqlite3_stmt *s;
    if (gm_table_exists(d, "streams") &&
        sqlite3_prepare_v2(d->db, "SELECT handle FROM streams WHERE id = ?", -1, &s, NULL) ==
            SQLITE_OK) {
        sqlite3_bind_int64(s, 1, id);
        if (sqlite3_step(s) == SQLITE_ROW) v = (uint64_t)sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    u64map_put(cache, (uint64_t)id, v);
    return v;
}

/* a frame's filename, line and name as PyTorch writes them */
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

/* gpumem's own frames and the CUDA libraries' at the innermost end of a stack are left out of
 * the exports (as in the report's call sites): a stack starts where the program called */
static int internal_frame(const gm_model *m, long fi)
{
    if (fi < 0) return 0;
    const gm_frame *f = &m->frames[fi];
    if (!f->module || f->module > m->nmods || !m->mods[f->module - 1].path) return 0;
    const char *p = m->mods[f->module - 1].path, *b = strrchr(p, '/');
    b = b ? b + 1 : p;
    return strncmp(b, "libgpumem", 9) == 0 || strncmp(b, "libcudart", 9) == 0 ||
           strncmp(b, "libcuda.", 8) == 0 || strncmp(b, "libcuda-", 8) == 0;
}

static size_t first_depth(const gm_model *m, uint32_t stack, size_t len)
{
    size_t k = 0;
    while (k < len && internal_frame(m, gm_stack_frame(m, stack, k, NULL)))
        k++;
    return k == len ? 0 : k;
}

/* The frames of each stack are written once and referred to through the pickle's memo after
 * that (Python's pickle.load shares the list; the viewers only read it): a trace entry then
 * costs a few bytes for its frames. */
typedef struct pk_memo {
    u64map stacks; /* stack -> memo index */
    uint32_t next;
} pk_memo;
static pk_memo g_memo;

static void pk_frames(FILE *out, const gm_model *m, uint32_t stack)
{
    const uint64_t *idx = u64map_get(&g_memo.stacks, stack);
    if (idx) {
        gpk_memo_get(out, (uint32_t)*idx);
        return;
    }
    gpk_list_begin(out);
    size_t len = 0;
    gm_stack_frame(m, stack, 0, &len);
    for (size_t i = first_depth(m, stack, len); i < len; i++) {
        long fi = gm_stack_frame(m, stack, i, NULL);
        if (fi < 0) continue;
        const char *file;
        uint32_t line;
        char name[1024];
        frame_parts(m, fi, &file, &line, name, sizeof name);
        gpk_dict_begin(out);
        gpk_key(out, "filename"), gpk_str(out, file);
        gpk_key(out, "line"), gpk_uint(out, line);
        gpk_key(out, "name"), gpk_str(out, name);
        gpk_dict_end(out);
    }
    gpk_list_end(out);
    if (u64map_put(&g_memo.stacks, stack, g_memo.next) == 0) gpk_memo_put(out, g_memo.next++);
}

typedef struct live_alloc {
    uint64_t size, requested;
    uint32_t stack;
} live_alloc;

/* ---------------------------------------------------------------- torch */

static int snapshot_to_export(gm_db *d, int64_t *snap_id)
{
    sqlite3_stmt *s;
    *snap_id = -1;
    if (!gm_table_exists(d, "snapshots")) return 0;
    if (sqlite3_prepare_v2(
            d->db, "SELECT id FROM snapshots ORDER BY reason = 3 DESC, seq DESC, id DESC LIMIT 1",
            -1, &s, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_step(s) == SQLITE_ROW) *snap_id = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return 0;
}

static int torch_segments(gm_db *d, gm_model *m, FILE *out, u64map *streams)
{
    int64_t snap;
    (void)streams;
    gpk_list_begin(out);
    if (snapshot_to_export(d, &snap) != 0) return -1;
    if (snap < 0) {
        gpk_list_end(out);
        return 0;
    }
    /* each block's frames are its own allocation's, found by identity: the last allocation at
     * its address is another one when the snapshot is not the exit's */
    u64map owners = {0};
    if (gm_snapshot_owners(d, snap, &owners) != 0) {
        u64map_free(&owners);
        return -1;
    }
    sqlite3_stmt *sg, *bl;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT idx, device, stream, addr, mapped, flags FROM segments WHERE "
                           "snapshot = ?1 ORDER BY addr",
                           -1, &sg, NULL) != SQLITE_OK) {
        u64map_free(&owners);
        return -1;
    }
    if (sqlite3_prepare_v2(d->db,
                           "SELECT addr, state, size, requested FROM blocks WHERE snapshot = ?1 "
                           "AND segment = ?2 ORDER BY addr",
                           -1, &bl, NULL) != SQLITE_OK) {
        sqlite3_finalize(sg);
        u64map_free(&owners);
        return -1;
    }
    sqlite3_bind_int64(sg, 1, snap);
    while (sqlite3_step(sg) == SQLITE_ROW) {
        int64_t idx = sqlite3_column_int64(sg, 0);
        uint64_t flags = (uint64_t)sqlite3_column_int64(sg, 5);
        uint64_t allocated = 0, active = 0;
        /* first pass: sums */
        sqlite3_bind_int64(bl, 1, snap);
        sqlite3_bind_int64(bl, 2, idx);
        while (sqlite3_step(bl) == SQLITE_ROW) {
            int st = sqlite3_column_int(bl, 1);
            uint64_t sz = (uint64_t)sqlite3_column_int64(bl, 2);
            if (st == REC_BLOCK_ALLOCATED) allocated += sz;
            if (st == REC_BLOCK_ALLOCATED || st == REC_BLOCK_PENDING) active += sz;
        }
        sqlite3_reset(bl);
        gpk_dict_begin(out);
        gpk_key(out, "device"), gpk_int(out, sqlite3_column_int(sg, 1));
        gpk_key(out, "address"), gpk_uint(out, (uint64_t)sqlite3_column_int64(sg, 3));
        gpk_key(out, "total_size"), gpk_uint(out, (uint64_t)sqlite3_column_int64(sg, 4));
        gpk_key(out, "stream"),
            gpk_uint(out, (uint64_t)sqlite3_column_int64(sg, 2)); /* segments.stream: the handle */
        gpk_key(out, "segment_type"),
            gpk_str(out, flags & REC_SEG_F_SMALL_POOL ? "small" : "large");
        gpk_key(out, "segment_pool_id"), gpk_list_begin(out), gpk_int(out, 0), gpk_int(out, 0),
            gpk_list_end(out);
        gpk_key(out, "is_expandable"), gpk_bool(out, (flags & REC_SEG_F_EXPANDABLE) != 0);
        gpk_key(out, "allocated_size"), gpk_uint(out, allocated);
        gpk_key(out, "active_size"), gpk_uint(out, active);
        gpk_key(out, "requested_size"), gpk_uint(out, allocated);
        gpk_key(out, "blocks");
        gpk_list_begin(out);
        while (sqlite3_step(bl) == SQLITE_ROW) {
            int st = sqlite3_column_int(bl, 1);
            if (st == REC_BLOCK_UNMAPPED) continue; /* PyTorch lists only mapped memory */
            uint64_t addr = (uint64_t)sqlite3_column_int64(bl, 0);
            gpk_dict_begin(out);
            gpk_key(out, "address"), gpk_uint(out, addr);
            gpk_key(out, "size"), gpk_uint(out, (uint64_t)sqlite3_column_int64(bl, 2));
            gpk_key(out, "requested_size"),
                gpk_uint(out, st == REC_BLOCK_FREE ? 0 : (uint64_t)sqlite3_column_int64(bl, 3));
            gpk_key(out, "state"), gpk_str(out, st == REC_BLOCK_ALLOCATED ? "active_allocated"
                                                : st == REC_BLOCK_PENDING ? "active_pending_free"
                                                                          : "inactive");
            const uint64_t *birth = st == REC_BLOCK_ALLOCATED ? u64map_get(&owners, addr) : NULL;
            long ai = birth ? gm_alloc_by_id(m, *birth) : -1;
            gpk_key(out, "frames");
            if (ai >= 0)
                pk_frames(out, m, m->allocs[ai].stack);
            else
                gpk_list_begin(out), gpk_list_end(out);
            gpk_dict_end(out);
        }
        sqlite3_reset(bl);
        gpk_list_end(out);
        gpk_dict_end(out);
    }
    sqlite3_finalize(sg);
    sqlite3_finalize(bl);
    u64map_free(&owners);
    gpk_list_end(out);
    return 0;
}

static void trace_entry(FILE *out, gm_model *m, const char *action, uint64_t addr, uint64_t size,
                        uint64_t stream, uint64_t t_ns, int device, uint32_t stack,
                        uint64_t requested)
{
    gpk_dict_begin(out);
    gpk_key(out, "action"), gpk_str(out, action);
    gpk_key(out, "addr"), gpk_uint(out, addr);
    gpk_key(out, "size"), gpk_uint(out, size);
    /* not in PyTorch's traces (its viewers ignore it): the bytes asked for, for gpumem import */
    if (requested) gpk_key(out, "requested_size"), gpk_uint(out, requested);
    gpk_key(out, "stream"), gpk_uint(out, stream);
    gpk_key(out, "time_us"), gpk_uint(out, t_ns / 1000);
    gpk_key(out, "device"), gpk_int(out, device);
    gpk_key(out, "frames"), pk_frames(out, m, stack);
    gpk_dict_end(out);
}

/* Frees that waited for stream events (REC_F_PENDING): their free_completed is written where
 * the recording saw the block land (kind 29 REC_FREE_COMPLETED, matched by address and the
 * allocator's id), or just before the block is handed out again, as in PyTorch's own traces;
 * one still waiting at the end has none (the block was never reusable in the run). */
typedef struct {
    uint64_t size, stream;
    uint32_t stack;
} torch_pending;

typedef struct {
    u64map at;    /* address -> index into v */
    u64map key;   /* address -> the allocator's id of the free waiting there */
    u64map early; /* ids whose REC_FREE_COMPLETED came before their free: landed at once */
    torch_pending *v;
    size_t n, cap;
} torch_pend;

static int pending_add(torch_pend *p, uint64_t addr, uint64_t key, torch_pending e)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        torch_pending *v = realloc(p->v, cap * sizeof *v);
        if (!v) return -1;
        p->v = v, p->cap = cap;
    }
    p->v[p->n] = e;
    if (u64map_put(&p->at, addr, p->n) != 0 || u64map_put(&p->key, addr, key) != 0) return -1;
    p->n++;
    return 0;
}

/* The free waiting at addr, if any, completes at t. */
static void pending_land(FILE *out, gm_model *m, torch_pend *p, uint64_t addr, uint64_t t, int dev)
{
    uint64_t i;
    if (!u64map_del(&p->at, addr, &i)) return;
    u64map_del(&p->key, addr, NULL);
    trace_entry(out, m, "free_completed", addr, p->v[i].size, p->v[i].stream, t, dev, p->v[i].stack, 0);
}

static void pending_free(torch_pend *p)
{
    u64map_free(&p->at), u64map_free(&p->key), u64map_free(&p->early);
    free(p->v);
    memset(p, 0, sizeof *p);
}

int gm_export_torch(gm_db *d, gm_model *m, FILE *out)
{
    /* devices with events */
    int ndev = 1;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT max(device) FROM events WHERE device >= 0 AND device < 1024", -1,
                           &s, NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
            ndev = sqlite3_column_int(s, 0) + 1;
        sqlite3_finalize(s);
    }
    u64map streams = {0}, live = {0};
    g_memo = (pk_memo){0};
    live_alloc *la = NULL;
    size_t nla = 0, cla = 0;
    gpk_begin(out);
    gpk_dict_begin(out);
    /* first, so that the output rule knows the file as ours (gm_out.h: GM_OUT_TORCH's marker) */
    gpk_key(out, "exporter"), gpk_str(out, "gpumem");
    gpk_key(out, "device_traces");
    gpk_list_begin(out);
    int rc = 0;
    for (int dev = 0; dev < ndev && rc == 0; dev++) {
        torch_pend pend = {0};
        gpk_list_begin(out);
        if (sqlite3_prepare_v2(
                d->db,
                "SELECT e.seq, e.t, e.kind, e.addr, e.size, e.requested, e.stream, e.stack, "
                "o.device_free, e.flags, e.alloc_id FROM events e LEFT JOIN ooms o ON o.seq = e.seq "
                "WHERE e.device = ?1 AND e.kind IN (1,2,3,4,13,14,15,18,19,29) ORDER BY e.seq",
                -1, &s, NULL) != SQLITE_OK) {
            rc = -1;
            break;
        }
        sqlite3_bind_int(s, 1, dev);
        while (sqlite3_step(s) == SQLITE_ROW) {
            uint64_t t = (uint64_t)sqlite3_column_int64(s, 1);
            int kind = sqlite3_column_int(s, 2) & 0xff;
            uint64_t addr = (uint64_t)sqlite3_column_int64(s, 3);
            uint64_t size = (uint64_t)sqlite3_column_int64(s, 4);
            uint64_t stream = stream_handle(d, &streams, sqlite3_column_int64(s, 6));
            uint32_t stack = (uint32_t)sqlite3_column_int64(s, 7);
            if (is_dev_alloc(kind)) {
                if (nla == cla) {
                    cla = cla ? 2 * cla : 1024;
                    live_alloc *n = realloc(la, cla * sizeof *la);
                    if (!n) {
                        rc = -2;
                        break;
                    }
                    la = n;
                }
                pending_land(out, m, &pend, addr, t, dev); /* handed out again: it had landed */
                la[nla] = (live_alloc){size, (uint64_t)sqlite3_column_int64(s, 5), stack};
                u64map_put(&live, addr, nla++);
                trace_entry(out, m, "alloc", addr, size, stream, t, dev, stack,
                            la[nla - 1].requested);
            } else if (is_dev_free(kind)) {
                uint64_t i;
                if (!u64map_del(&live, addr, &i)) continue; /* not allocated in the recording */
                trace_entry(out, m, "free_requested", addr, la[i].size, stream, t, dev, stack, 0);
                uint64_t key = (uint64_t)sqlite3_column_int64(s, 10);
                int waits = (sqlite3_column_int64(s, 9) & REC_F_PENDING) && !u64map_del(&pend.early, key, NULL);
                if (!waits)
                    trace_entry(out, m, "free_completed", addr, la[i].size, stream, t, dev, stack, 0);
                else if (pending_add(&pend, addr, key, (torch_pending){la[i].size, stream, stack}) != 0) {
                    rc = -2;
                    break;
                }
            } else if (kind == REC_FREE_COMPLETED) {
                uint64_t key = (uint64_t)sqlite3_column_int64(s, 10);
                const uint64_t *k = u64map_get(&pend.key, addr);
                if (k && *k == key)
                    pending_land(out, m, &pend, addr, t, dev);
                else if (u64map_put(&pend.early, key, 1) != 0) { /* before its own free */
                    rc = -2;
                    break;
                }
            } else if (kind == REC_OOM) {
                gpk_dict_begin(out);
                gpk_key(out, "action"), gpk_str(out, "oom");
                gpk_key(out, "addr"), gpk_uint(out, 0);
                gpk_key(out, "size"), gpk_uint(out, (uint64_t)sqlite3_column_int64(s, 5)
                                                        ? (uint64_t)sqlite3_column_int64(s, 5)
                                                        : size);
                gpk_key(out, "stream"), gpk_uint(out, stream);
                gpk_key(out, "time_us"), gpk_uint(out, t / 1000);
                gpk_key(out, "device"), gpk_int(out, dev);
                gpk_key(out, "device_free"), gpk_uint(out, (uint64_t)sqlite3_column_int64(s, 8));
                gpk_key(out, "frames"), pk_frames(out, m, stack);
                gpk_dict_end(out);
            } else {
                const char *a = kind == REC_SEG_MAP        ? "segment_map"
                                : kind == REC_SEG_UNMAP    ? "segment_unmap"
                                : kind == REC_DRIVER_ALLOC ? "segment_alloc"
                                                           : "segment_free";
                trace_entry(out, m, a, addr, size, stream, t, dev, stack, 0);
            }
        }
        sqlite3_finalize(s);
        pending_free(&pend);
        gpk_list_end(out);
    }
    gpk_list_end(out);
    if (rc == 0) {
        gpk_key(out, "segments");
        if (torch_segments(d, m, out, &streams) != 0) rc = -1;
    }
    if (rc == 0) {
        char conf[1024];
        gm_meta_text(d, "conf", conf, sizeof conf);
        gpk_key(out, "allocator_settings");
        gpk_dict_begin(out);
        gpk_key(out, "PYTORCH_CUDA_ALLOC_CONF"), gpk_str(out, conf);
        gpk_key(out, "max_split_size"), gpk_int(out, -1);
        gpk_key(out, "garbage_collection_threshold"), gpk_float(out, 0.0);
        gpk_key(out, "expandable_segments"),
            gpk_bool(out, strstr(conf, "expandable_segments:True") != NULL);
        gpk_key(out, "pinned_num_register_threads"), gpk_int(out, 1);
        gpk_key(out, "release_lock_on_cudamalloc"), gpk_bool(out, 0);
        gpk_key(out, "pinned_use_cuda_host_register"), gpk_bool(out, 0);
        gpk_key(out, "roundup_power2_divisions"), gpk_dict_begin(out), gpk_dict_end(out);
        gpk_dict_end(out);
    }
    gpk_dict_end(out);
    gpk_end(out);
    free(la);
    u64map_free(&live);
    u64map_free(&streams);
    u64map_free(&g_memo.stacks);
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

/* ---------------------------------------------------------------- folded / speedscope */

typedef struct stack_bytes {
    uint32_t stack;
    uint64_t bytes;
} stack_bytes;

/* bytes per stack: what = 0 live at the peak allocated moment, 1 every allocation */
static stack_bytes *bytes_by_stack(const gm_model *m, int what, size_t *n)
{
    u64map idx = {0};
    stack_bytes *v = NULL;
    size_t nv = 0, cv = 0;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (!is_dev_alloc(a->kind)) continue;
        if (what == 0 &&
            (a->birth > m->peak_allocated_seq || (a->death && a->death <= m->peak_allocated_seq)))
            continue;
        const uint64_t *j = u64map_get(&idx, a->stack);
        if (j) {
            v[*j].bytes += a->size;
            continue;
        }
        if (nv == cv) {
            cv = cv ? 2 * cv : 256;
            stack_bytes *nn = realloc(v, cv * sizeof *v);
            if (!nn) {
                free(v);
                u64map_free(&idx);
                *n = 0;
                return NULL;
            }
            v = nn;
        }
        v[nv] = (stack_bytes){a->stack, a->size};
        u64map_put(&idx, a->stack, nv++);
    }
    u64map_free(&idx);
    *n = nv;
    return v;
}

static void folded_name(const gm_model *m, long fi, char *out, size_t outsz)
{
    if (fi < 0)
        snprintf(out, outsz, "??");
    else
        gm_frame_desc(m, fi, out, outsz);
    for (char *p = out; *p; p++)
        if (*p == ';' || *p == '\n' || *p == '\r') *p = ',';
}

static int write_folded(const gm_model *m, int what, FILE *out)
{
    size_t n;
    stack_bytes *v = bytes_by_stack(m, what, &n);
    if (!v && n) return -1;
    /* one comment line, the output rule's marker (gm_out.h); flamegraph.pl, inferno and
     * speedscope skip a line without a count */
    fprintf(out, "%s: %s\n", gm_out_marker[GM_OUT_FOLDED].bytes,
            what ? "every device allocation's bytes by stack"
                 : "device bytes live at the peak allocated moment by stack");
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        gm_stack_frame(m, v[i].stack, 0, &len);
        size_t k0 = first_depth(m, v[i].stack, len);
        if (len == 0) fputs("[no stack]", out);
        for (size_t k = len; k-- > k0;) {
            char name[1024];
            folded_name(m, gm_stack_frame(m, v[i].stack, k, NULL), name, sizeof name);
            fprintf(out, "%s%s", k + 1 == len ? "" : ";", name);
        }
        fprintf(out, " %" PRIu64 "\n", v[i].bytes);
    }
    free(v);
    return 0;
}

static void speedscope_profile(const gm_model *m, int what, FILE *out, u64map *fidx)
{
    size_t n;
    stack_bytes *v = bytes_by_stack(m, what, &n);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += v[i].bytes;
    fprintf(out,
            "{\"type\":\"sampled\",\"name\":\"%s\",\"unit\":\"bytes\",\"startValue\":0,"
            "\"endValue\":%" PRIu64 ",\"samples\":[",
            what == 0 ? "device bytes live at the peak" : "device bytes allocated in total", total);
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        gm_stack_frame(m, v[i].stack, 0, &len);
        fputs(i ? ",[" : "[", out);
        /* speedscope: root first; frame index = position of the frame in shared.frames,
         * m->nframes for "[no stack]" and m->nframes + 1 for an unknown frame */
        size_t k0 = first_depth(m, v[i].stack, len);
        if (len == 0) fprintf(out, "%zu", m->nframes);
        for (size_t k = len; k-- > k0;) {
            long fi = gm_stack_frame(m, v[i].stack, k, NULL);
            fprintf(out, "%s%zu", k + 1 == len ? "" : ",", fi < 0 ? m->nframes + 1 : (size_t)fi);
        }
        fputc(']', out);
    }
    fputs("],\"weights\":[", out);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s%" PRIu64, i ? "," : "", v[i].bytes);
    fputs("]}", out);
    free(v);
    (void)fidx;
}

static void write_speedscope(const gm_model *m, int what, const char *dbname, FILE *out)
{
    fwrite(gm_out_marker[GM_OUT_SPEEDSCOPE].bytes, 1, gm_out_marker[GM_OUT_SPEEDSCOPE].len, out);
    fputs(",\"name\":", out);
    gm_json_str(out, dbname);
    fputs(",\"activeProfileIndex\":0,\"shared\":{\"frames\":[", out);
    for (size_t i = 0; i < m->nframes; i++) {
        char name[1024];
        gm_frame_desc(m, (long)i, name, sizeof name);
        const gm_frame *f = &m->frames[i];
        fputs(i ? ",{\"name\":" : "{\"name\":", out);
        gm_json_str(out, name);
        if (f->file) {
            fputs(",\"file\":", out);
            gm_json_str(out, f->file);
            if (f->line) fprintf(out, ",\"line\":%u", f->line);
        }
        fputc('}', out);
    }
    fprintf(out, "%s{\"name\":\"[no stack]\"},{\"name\":\"??\"}]},\"profiles\":[",
            m->nframes ? "," : "");
    if (what != 1) speedscope_profile(m, 0, out, NULL);
    if (what == -1) fputc(',', out);
    if (what != 0) speedscope_profile(m, 1, out, NULL);
    fputs("]}\n", out);
}

/* ---------------------------------------------------------------- chrome */

static int write_chrome(gm_db *d, gm_model *m, FILE *out)
{
    fwrite(gm_out_marker[GM_OUT_CHROME].bytes, 1, gm_out_marker[GM_OUT_CHROME].len, out);
    fputs(",\"traceEvents\":[\n", out);
    int first = 1;
#define SEP() (first ? (first = 0, "") : ",\n")
    sqlite3_stmt *s;
    /* thread names */
    if (gm_table_exists(d, "threads") &&
        sqlite3_prepare_v2(d->db, "SELECT id, tid, name FROM threads", -1, &s, NULL) == SQLITE_OK) {
        while (sqlite3_step(s) == SQLITE_ROW) {
            char nm[256];
            const char *tn = (const char *)sqlite3_column_text(s, 2);
            snprintf(nm, sizeof nm, "%s (tid %lld)", tn ? tn : "thread",
                     (long long)sqlite3_column_int64(s, 1));
            fprintf(
                out,
                "%s{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":",
                SEP(), sqlite3_column_int(s, 0));
            gm_json_str(out, nm);
            fputs("}}", out);
        }
        sqlite3_finalize(s);
    }
    fprintf(out,
            "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":0,\"args\":{\"name\":\"GPU memory "
            "(gpumem)\"}}",
            SEP());
    /* NVTX ranges */
    if (sqlite3_prepare_v2(
            d->db,
            "SELECT r.thread, r.kind, r.start_ns, r.end_ns, s.s, r.path FROM ranges r "
            "LEFT JOIN strings s ON s.id = r.name ORDER BY r.start_ns",
            -1, &s, NULL) == SQLITE_OK) {
        while (sqlite3_step(s) == SQLITE_ROW) {
            int kind = sqlite3_column_int(s, 1);
            double ts = (double)sqlite3_column_int64(s, 2) / 1000.0;
            const char *nm = (const char *)sqlite3_column_text(s, 4);
            const char *path = (const char *)sqlite3_column_text(s, 5);
            int has_end = sqlite3_column_type(s, 3) != SQLITE_NULL;
            double dur =
                has_end ? (double)(sqlite3_column_int64(s, 3) - sqlite3_column_int64(s, 2)) / 1000.0
                        : (double)(m->last_t > (uint64_t)sqlite3_column_int64(s, 2)
                                       ? m->last_t - (uint64_t)sqlite3_column_int64(s, 2)
                                       : 0) /
                              1000.0;
            if (kind == 2)
                fprintf(out,
                        "%s{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"nvtx\",\"pid\":0,\"tid\":%d,\"ts\":%"
                        ".3f,\"name\":",
                        SEP(), sqlite3_column_int(s, 0), ts);
            else
                fprintf(out,
                        "%s{\"ph\":\"X\",\"cat\":\"nvtx\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":"
                        "%.3f,\"name\":",
                        SEP(), sqlite3_column_int(s, 0), ts, dur);
            gm_json_str(out, nm ? nm : "?");
            fputs(",\"args\":{\"path\":", out);
            gm_json_str(out, path);
            fputs("}}", out);
        }
        sqlite3_finalize(s);
    }
    /* counters, allocations, OOMs: one sweep */
    if (sqlite3_prepare_v2(
            d->db,
            "SELECT e.seq, e.t, e.kind, e.addr, e.size, e.device, e.thread, o.requested "
            "FROM events e LEFT JOIN ooms o ON o.seq = e.seq "
            "WHERE e.kind IN (1,2,3,4,13,14,15,18,19) ORDER BY e.seq",
            -1, &s, NULL) != SQLITE_OK) {
        fprintf(stderr, "gpumem: %s: cannot read events: %s\n", d->path, sqlite3_errmsg(d->db));
        return GM_EXIT_BADDB;
    }
    uint64_t alloc_dev[64] = {0}, res_dev[64] = {0};
    u64map live = {0};
    size_t ai = 0; /* m->allocs are in birth order, like this sweep */
    while (sqlite3_step(s) == SQLITE_ROW) {
        uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0);
        double ts = (double)sqlite3_column_int64(s, 1) / 1000.0;
        int kind = sqlite3_column_int(s, 2) & 0xff;
        uint64_t addr = (uint64_t)sqlite3_column_int64(s, 3);
        uint64_t size = (uint64_t)sqlite3_column_int64(s, 4);
        int dev = sqlite3_column_int(s, 5) & 63;
        int changed = 0;
        if (is_dev_alloc(kind)) {
            for (; ai < m->nallocs && m->allocs[ai].birth < seq; ai++) {
            }
            const gm_alloc *a =
                ai < m->nallocs && m->allocs[ai].birth == seq ? &m->allocs[ai] : NULL;
            alloc_dev[dev] += size;
            changed = 1;
            u64map_put(&live, addr, size);
            char nm[256];
            const char *given = a && a->name ? gm_str(m, a->name) : NULL;
            if (given)
                snprintf(nm, sizeof nm, "%s", given);
            else
                gm_fmt_bytes(size, nm, sizeof nm);
            fprintf(out,
                    "%s{\"ph\":\"b\",\"cat\":\"alloc\",\"id\":\"0x%" PRIx64
                    "\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"name\":",
                    SEP(), seq, sqlite3_column_int(s, 6), ts);
            gm_json_str(out, nm);
            fprintf(out,
                    ",\"args\":{\"size\":%" PRIu64 ",\"addr\":\"0x%" PRIx64 "\",\"device\":%d}}",
                    size, addr, dev);
            /* remember the name under the async id: the end event needs the same name and id */
        } else if (is_dev_free(kind)) {
            uint64_t sz;
            if (!u64map_del(&live, addr, &sz)) continue;
            alloc_dev[dev] -= sz < alloc_dev[dev] ? sz : alloc_dev[dev];
            changed = 1;
        } else if (kind == REC_OOM) {
            fprintf(out,
                    "%s{\"ph\":\"i\",\"s\":\"g\",\"cat\":\"oom\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
                    "\"name\":\"OOM\",\"args\":{\"requested\":%lld,\"device\":%d}}",
                    SEP(), sqlite3_column_int(s, 6), ts, (long long)sqlite3_column_int64(s, 7),
                    dev);
        } else if (kind == REC_SEG_MAP || kind == REC_DRIVER_ALLOC) {
            res_dev[dev] += size, changed = 1;
        } else {
            res_dev[dev] -= size < res_dev[dev] ? size : res_dev[dev], changed = 1;
        }
        if (changed)
            fprintf(out,
                    "%s{\"ph\":\"C\",\"name\":\"device %d "
                    "memory\",\"pid\":0,\"ts\":%.3f,\"args\":{\"allocated\":%" PRIu64
                    ",\"reserved\":%" PRIu64 "}}",
                    SEP(), dev, ts, alloc_dev[dev],
                    m->have_segments ? res_dev[dev] : alloc_dev[dev]);
    }
    sqlite3_finalize(s);
    u64map_free(&live);
    /* the ends of the async slices, from the model's lifetimes (same id and name as the start) */
    if (sqlite3_prepare_v2(d->db, "SELECT t, thread FROM events WHERE seq = ?", -1, &s, NULL) ==
        SQLITE_OK) {
        for (size_t i = 0; i < m->nallocs; i++) {
            const gm_alloc *a = &m->allocs[i];
            if (!is_dev_alloc(a->kind)) continue;
            uint64_t t = m->last_t;
            int tid = 0;
            if (a->death) {
                sqlite3_bind_int64(s, 1, (int64_t)a->death);
                if (sqlite3_step(s) == SQLITE_ROW)
                    t = (uint64_t)sqlite3_column_int64(s, 0), tid = sqlite3_column_int(s, 1);
                sqlite3_reset(s);
            }
            char nm[256];
            const char *given = a->name ? gm_str(m, a->name) : NULL;
            if (given)
                snprintf(nm, sizeof nm, "%s", given);
            else
                gm_fmt_bytes(a->size, nm, sizeof nm);
            fprintf(out,
                    "%s{\"ph\":\"e\",\"cat\":\"alloc\",\"id\":\"0x%" PRIx64
                    "\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"name\":",
                    SEP(), a->birth, tid, (double)t / 1000.0);
            gm_json_str(out, nm);
            fputc('}', out);
        }
        sqlite3_finalize(s);
    }
#undef SEP
    fputs("\n]}\n", out);
    return 0;
}

/* ---------------------------------------------------------------- csv */

static void csv_field(FILE *out, const char *v)
{
    if (!v) return;
    if (!strpbrk(v, ",\"\n\r")) {
        fputs(v, out);
        return;
    }
    fputc('"', out);
    for (; *v; v++) {
        if (*v == '"') fputc('"', out);
        fputc(*v, out);
    }
    fputc('"', out);
}

static int write_csv(gm_db *d, FILE *out)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db, "SELECT * FROM allocations ORDER BY id", -1, &s, NULL) !=
        SQLITE_OK) {
        fprintf(stderr, "gpumem: %s: cannot read the allocations view: %s\n", d->path,
                sqlite3_errmsg(d->db));
        return GM_EXIT_BADDB;
    }
    int nc = sqlite3_column_count(s);
    for (int i = 0; i < nc; i++) {
        if (i) fputc(',', out);
        csv_field(out, sqlite3_column_name(s, i));
    }
    fputc('\n', out);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        for (int i = 0; i < nc; i++) {
            if (i) fputc(',', out);
            csv_field(out, (const char *)sqlite3_column_text(s, i));
        }
        fputc('\n', out);
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) {
        fprintf(stderr, "gpumem: %s: the allocations are damaged: %s\n", d->path,
                sqlite3_errmsg(d->db));
        return GM_EXIT_BADDB;
    }
    return 0;
}

int gm_export_format(gm_db *d, gm_model *m, const char *format, int what, FILE *out)
{
    if (strcmp(format, "torch") == 0) return gm_export_torch(d, m, out);
    if (strcmp(format, "chrome") == 0) return write_chrome(d, m, out);
    if (strcmp(format, "folded") == 0) {
        if (write_folded(m, what == 1, out) != 0) {
            fprintf(stderr, "gpumem: out of memory exporting %s\n", d->path);
            return GM_EXIT_BADDB;
        }
        return 0;
    }
    if (strcmp(format, "speedscope") == 0) {
        const char *b = strrchr(d->path, '/');
        write_speedscope(m, what, b ? b + 1 : d->path, out);
        return 0;
    }
    if (strcmp(format, "csv") == 0) return write_csv(d, out);
    return GM_EXIT_USAGE;
}
