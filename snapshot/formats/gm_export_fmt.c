/* gm_export_fmt.c — `gpumem export --format chrome|folded|speedscope|csv` (torch:
 * gm_export_torch.c).
 *
 * All but csv read the loaded model (stacks, frames, ranges, the sweep's peak) and make one
 * pass over `events` in seq order with a map of live allocations by address, like the report,
 * so a database from a killed process exports the same way.
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

size_t gm_export_first_depth(const gm_model *m, uint32_t stack, size_t len)
{
    size_t k = 0;
    while (k < len && internal_frame(m, gm_stack_frame(m, stack, k, NULL)))
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
        size_t k0 = gm_export_first_depth(m, v[i].stack, len);
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
            /* passed through as its own segment: in reserved to its free, as the model has it */
            uint64_t own = a && (a->flags & GM_ALLOC_OWN_SEGMENT);
            alloc_dev[dev] += size;
            if (own) res_dev[dev] += size;
            changed = 1;
            u64map_put(&live, addr, size << 1 | own);
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
            uint64_t v;
            if (!u64map_del(&live, addr, &v)) continue;
            uint64_t sz = v >> 1;
            alloc_dev[dev] -= sz < alloc_dev[dev] ? sz : alloc_dev[dev];
            if (v & 1) res_dev[dev] -= sz < res_dev[dev] ? sz : res_dev[dev];
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
