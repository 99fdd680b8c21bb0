/* gm_export_fmt.c — `gpumem export --format chrome|folded|speedscope|csv` (torch:
 * gm_export_torch.c).
 *
 * All but csv read the loaded model (stacks, frames, ranges, the sweep's peak) and make one
 * pass over `events` in seq order with a map of live allocations by address, like the report,
 * so a database from a killed process exports the same way.
 *
 * The view (--view, GM_VIEW_*): a PyTorch program recorded on PyTorch's allocator is exported as
 * report, leaks and diff show it, in PyTorch's view (gm_model_torch_view): its tensors with their
 * names and Python call sites, its peak allocated (max_memory_allocated()). Its device
 * allocations are PyTorch's cached segments and cuBLAS's workspaces, unnamed, made wherever the
 * cache happened to grow: a flame graph of those says where the cache grew, not what holds the
 * memory. --view device keeps that picture. Each output says which view it is in where its
 * format has room: folded's comment line, a "view" key in chrome's and speedscope's JSON; csv's
 * rows carry their kind (31, torch_alloc: a tensor).
 *
 * folded: "root;...;leaf bytes" lines (flamegraph.pl, inferno, speedscope): --what peak = the
 * device bytes live at the report's peak allocated moment (the lines sum to it), --what total =
 * every device allocation's bytes.
 * speedscope: its file format (https://www.speedscope.app/file-format-schema.json), a "sampled"
 * profile in bytes per --what (peak and total, both when --what is not given).
 * chrome: trace-event JSON: a counter per device (allocated, reserved; the device's view), and
 * for a PyTorch program on PyTorch's allocator "PyTorch device N memory" beside it (PyTorch's own
 * statistics, from its merged history), NVTX push/pop and
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

/* gpumem's own frames and CUDA's (libraries and header wrappers) at the innermost end of a
 * stack are left out of the exports, by the report's rule (gm_frame_internal): a stack starts
 * where the program called */
size_t gm_export_first_depth(const gm_model *m, uint32_t stack, size_t len)
{
    size_t k = 0;
    while (k < len && gm_frame_internal(m, gm_stack_frame(m, stack, k, NULL)))
        k++;
    return k == len ? 0 : k;
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
        if (!gm_alloc_in_view(m, a)) continue;
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

/* An allocation without a stack; in PyTorch's view a tensor without a Python frame: PyTorch's
 * C++ made it (autograd's backward), as the report says of it. */
static const char *no_stack(const gm_model *m)
{
    return m->is_torch_view ? "[no Python frame: made by PyTorch's C++, e.g. autograd's backward]" : "[no stack]";
}

static int write_folded(const gm_model *m, int what, FILE *out)
{
    size_t n;
    stack_bytes *v = bytes_by_stack(m, what, &n);
    if (!v && n) return -1;
    /* one comment line, the output rule's marker (gm_out.h); flamegraph.pl, inferno and
     * speedscope skip a line without a count */
    fprintf(out, "%s: %s\n", gm_out_marker[GM_OUT_FOLDED].bytes,
            m->is_torch_view ? (what ? "PyTorch's view: every tensor's bytes by stack"
                                     : "PyTorch's view: tensor bytes live at its peak allocated moment "
                                       "(max_memory_allocated()) by stack")
            : what           ? "every device allocation's bytes by stack"
                             : "device bytes live at the peak allocated moment by stack");
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        gm_stack_frame(m, v[i].stack, 0, &len);
        size_t k0 = gm_export_first_depth(m, v[i].stack, len);
        if (len == 0) fputs(no_stack(m), out);
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
            m->is_torch_view ? (what == 0 ? "PyTorch's tensor bytes live at its peak" : "PyTorch's tensor bytes allocated in total")
            : what == 0      ? "device bytes live at the peak"
                             : "device bytes allocated in total",
            total);
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        gm_stack_frame(m, v[i].stack, 0, &len);
        fputs(i ? ",[" : "[", out);
        /* speedscope: root first; frame index = position of the frame in shared.frames,
         * m->nframes for "[no stack]" and m->nframes + 1 for an unknown frame */
        size_t k0 = gm_export_first_depth(m, v[i].stack, len);
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

/* "ending": null, or why the recorded program did not run to its end (gm_ending_line: what it
 * held then is in the export as alive at the end, not necessarily leaked). A key the viewers
 * ignore (Perfetto, chrome://tracing and speedscope read only the keys they know). */
static void write_ending(gm_db *d, FILE *out)
{
    char ending[256];
    gm_ending_line(d, ending, sizeof ending);
    gm_json_str(out, ending[0] ? ending : NULL);
}

static void write_speedscope(gm_db *d, const gm_model *m, int what, const char *dbname, FILE *out)
{
    fwrite(gm_out_marker[GM_OUT_SPEEDSCOPE].bytes, 1, gm_out_marker[GM_OUT_SPEEDSCOPE].len, out);
    /* which view (speedscope reads only the keys it knows) */
    fprintf(out, ",\"view\":\"%s\",\"ending\":", m->is_torch_view ? "torch" : "device");
    write_ending(d, out);
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
    fprintf(out, "%s{\"name\":\"%s\"},{\"name\":\"??\"}]},\"profiles\":[", m->nframes ? "," : "", no_stack(m));
    if (what != 1) speedscope_profile(m, 0, out, NULL);
    if (what == -1) fputc(',', out);
    if (what != 0) speedscope_profile(m, 1, out, NULL);
    fputs("]}\n", out);
}

/* ---------------------------------------------------------------- chrome */

/* The start of an allocation's async slice (id = its birth seq; name = its name, else its size).
 * *ai walks v->allocs, in birth order like the sweep, to the one born at seq. */
static void slice_begin(FILE *out, const char *sep, const gm_model *v, size_t *ai, uint64_t seq, int tid,
                        double ts, uint64_t size, uint64_t addr, int dev)
{
    while (*ai < v->nallocs && v->allocs[*ai].birth < seq)
        ++*ai;
    const gm_alloc *a = *ai < v->nallocs && v->allocs[*ai].birth == seq ? &v->allocs[*ai] : NULL;
    char nm[256];
    const char *given = a && a->name ? gm_str(v, a->name) : NULL;
    if (given)
        snprintf(nm, sizeof nm, "%s", given);
    else
        gm_fmt_bytes(size, nm, sizeof nm);
    fprintf(out,
            "%s{\"ph\":\"b\",\"cat\":\"alloc\",\"id\":\"0x%" PRIx64 "\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"name\":",
            sep, seq, tid, ts);
    gm_json_str(out, nm);
    fprintf(out, ",\"args\":{\"size\":%" PRIu64 ",\"addr\":\"0x%" PRIx64 "\",\"device\":%d}}", size, addr, dev);
}

/* m: the model (the counters are the device's, and PyTorch's beside them); v: the view whose
 * allocations are the async slices (m itself, or its torch view: PyTorch's tensors) */
static int write_chrome(gm_db *d, gm_model *m, const gm_model *v, FILE *out)
{
    fwrite(gm_out_marker[GM_OUT_CHROME].bytes, 1, gm_out_marker[GM_OUT_CHROME].len, out);
    fprintf(out, ",\"view\":\"%s\",\"ending\":", v->is_torch_view ? "torch" : "device");
    write_ending(d, out);
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
            "SELECT e.seq, e.t, e.kind, e.addr, e.size, e.device, e.thread, o.requested, e.flags "
            "FROM events e LEFT JOIN ooms o ON o.seq = e.seq "
            "WHERE e.kind IN (1,2,3,4,13,14,15,18,19,31,32,34,35) ORDER BY e.seq",
            -1, &s, NULL) != SQLITE_OK) {
        fprintf(stderr, "gpumem: %s: cannot read events: %s\n", d->path, sqlite3_errmsg(d->db));
        return GM_EXIT_BADDB;
    }
    uint64_t alloc_dev[64] = {0}, res_dev[64] = {0};
    /* a PyTorch program on PyTorch's allocator (its history merged): the device counter is the
     * device's view (PyTorch's segments and the libraries' workspaces as allocations), so
     * PyTorch's own statistics get their counter beside it, by its rules (allocated drops at
     * free_requested, reserved = its segments): what max_memory_allocated/_reserved() read */
    uint64_t talloc_dev[64] = {0}, tres_dev[64] = {0};
    u64map live = {0}, tlive = {0};
    size_t ai = 0; /* v->allocs are in birth order, like this sweep */
    while (sqlite3_step(s) == SQLITE_ROW) {
        uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0);
        double ts = (double)sqlite3_column_int64(s, 1) / 1000.0;
        int kind = sqlite3_column_int(s, 2) & 0xff;
        uint64_t addr = (uint64_t)sqlite3_column_int64(s, 3);
        uint64_t size = (uint64_t)sqlite3_column_int64(s, 4);
        int dev = sqlite3_column_int(s, 5) & 63;
        int changed = 0;
        if (kind >= REC_TORCH_ALLOC && kind <= REC_TORCH_SEG_UNMAP) {
            uint64_t sz;
            if (kind == REC_TORCH_ALLOC)
                u64map_put(&tlive, addr, size), talloc_dev[dev] += size;
            else if (kind == REC_TORCH_FREE && u64map_del(&tlive, addr, &sz))
                talloc_dev[dev] -= sz < talloc_dev[dev] ? sz : talloc_dev[dev];
            else if (kind == REC_TORCH_SEG_MAP)
                tres_dev[dev] += size;
            else if (kind == REC_TORCH_SEG_UNMAP)
                tres_dev[dev] -= size < tres_dev[dev] ? size : tres_dev[dev];
            fprintf(out,
                    "%s{\"ph\":\"C\",\"name\":\"PyTorch device %d memory\",\"pid\":0,\"ts\":%.3f,"
                    "\"args\":{\"allocated\":%" PRIu64 ",\"reserved\":%" PRIu64 "}}",
                    SEP(), dev, ts, talloc_dev[dev], tres_dev[dev]);
            if (kind == REC_TORCH_ALLOC && v->is_torch_view)
                slice_begin(out, SEP(), v, &ai, seq, sqlite3_column_int(s, 6), ts, size, addr, dev);
            continue;
        }
        if (is_dev_alloc(kind)) {
            /* passed through as its own segment: in reserved to its free, as the model has it
             * (GM_ALLOC_OWN_SEGMENT; from the row, since the slices may be another view's) */
            uint64_t own = (uint64_t)rec_is_own_segment((unsigned)kind, (unsigned)sqlite3_column_int64(s, 8));
            alloc_dev[dev] += size;
            if (own) res_dev[dev] += size;
            changed = 1;
            u64map_put(&live, addr, size << 1 | own);
            if (!v->is_torch_view)
                slice_begin(out, SEP(), v, &ai, seq, sqlite3_column_int(s, 6), ts, size, addr, dev);
        } else if (is_dev_free(kind)) {
            uint64_t packed; /* size << 1 | own */
            if (!u64map_del(&live, addr, &packed)) continue;
            uint64_t sz = packed >> 1;
            alloc_dev[dev] -= sz < alloc_dev[dev] ? sz : alloc_dev[dev];
            if (packed & 1) res_dev[dev] -= sz < res_dev[dev] ? sz : res_dev[dev];
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
    u64map_free(&tlive);
    /* the ends of the async slices, from the model's lifetimes (same id and name as the start) */
    if (sqlite3_prepare_v2(d->db, "SELECT t, thread FROM events WHERE seq = ?", -1, &s, NULL) ==
        SQLITE_OK) {
        for (size_t i = 0; i < v->nallocs; i++) {
            const gm_alloc *a = &v->allocs[i];
            if (!gm_alloc_in_view(v, a)) continue;
            uint64_t t = m->last_t;
            int tid = 0;
            /* a free ends the slice on the freeing thread; a leak at the end, on the thread that
             * allocated it (its begin's), so that Perfetto keeps the slice on that thread */
            sqlite3_bind_int64(s, 1, (int64_t)(a->death ? a->death : a->birth));
            if (sqlite3_step(s) == SQLITE_ROW) {
                if (a->death) t = (uint64_t)sqlite3_column_int64(s, 0);
                tid = sqlite3_column_int(s, 1);
            }
            sqlite3_reset(s);
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

/* torch: PyTorch's view, its tensors (kind 31); else every other row of the view (the device's
 * allocations, pinned host memory...): the two never mix, so that a column's sum means one thing */
static int write_csv(gm_db *d, int torch, FILE *out)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db,
                           torch ? "SELECT * FROM allocations WHERE kind = 31 ORDER BY id"
                                 : "SELECT * FROM allocations WHERE kind != 31 ORDER BY id",
                           -1, &s, NULL) != SQLITE_OK) {
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

/* PyTorch's memory history merged (kinds 31-35): the model's rule (torch.present == 1), asked of
 * the database where no model was loaded (csv) */
static int has_torch_history(gm_db *d, const gm_model *m)
{
    if (m) return m->torch.present == 1;
    sqlite3_stmt *s;
    int has = 0;
    if (sqlite3_prepare_v2(d->db, "SELECT 1 FROM events WHERE kind BETWEEN 31 AND 35 LIMIT 1", -1, &s, NULL) ==
        SQLITE_OK) {
        has = sqlite3_step(s) == SQLITE_ROW;
        sqlite3_finalize(s);
    }
    return has;
}

int gm_export_format(gm_db *d, gm_model *m, const char *format, int what, int view, FILE *out)
{
    int torch = has_torch_history(d, m);
    char absent[1024]; /* --device N where PyTorch held nothing on N: its view there is empty */
    int none = gm_torch_absent(d, absent, sizeof absent);
    if (view == GM_VIEW_TORCH && none >= 0) {
        fprintf(stderr, "gpumem export: --view torch: %s: %s; leave --view out for device %d's allocations\n", d->path,
                absent, none);
        return GM_EXIT_USAGE;
    }
    if (view == GM_VIEW_TORCH && !torch) {
        fprintf(stderr,
                "gpumem export: --view torch: %s has no PyTorch memory history (a PyTorch program "
                "recorded by `gpumem record` on PyTorch's allocator has it); leave --view out for the "
                "device's view\n",
                d->path);
        return GM_EXIT_USAGE;
    }
    torch = torch && view != GM_VIEW_DEVICE;
    if (strcmp(format, "csv") == 0) return write_csv(d, torch, out);
    if (!m) return GM_EXIT_USAGE;
    gm_model v = torch ? gm_model_torch_view(m) : *m; /* shares m's tables: never freed */
    if (strcmp(format, "chrome") == 0) return write_chrome(d, m, &v, out);
    if (strcmp(format, "folded") == 0) {
        if (write_folded(&v, what == 1, out) != 0) {
            fprintf(stderr, "gpumem: out of memory exporting %s\n", d->path);
            return GM_EXIT_BADDB;
        }
        return 0;
    }
    if (strcmp(format, "speedscope") == 0) {
        const char *b = strrchr(d->path, '/');
        write_speedscope(d, &v, what, b ? b + 1 : d->path, out);
        return 0;
    }
    return GM_EXIT_USAGE;
}
