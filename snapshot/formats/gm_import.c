/* gm_import.c — `gpumem import SNAPSHOT.pickle -o run.db`: a PyTorch memory snapshot
 * (torch.cuda.memory._dump_snapshot / _snapshot() pickled) into a gpumem database, so that
 * report, leaks, frag, tune, advise, export and diff work on PyTorch runs recorded without
 * gpumem.
 *
 * The pickle is read by gm_pickle.c, which never executes anything and bounds its memory. The
 * database is written through the recorder's schema (snapshot/record/schema.sql):
 *   - device_traces (every device, merged in time order: time_us, or a gpumem export's time_ns)
 *     become events: alloc -> alloc (1),
 *     free_requested -> free (2), or at its free_completed when that comes later (a block used on
 *     another stream, which PyTorch does not reuse before then: it stays allocated until then),
 *     segment_alloc / segment_free -> driver_alloc / driver_free (18, 19), segment_map /
 *     segment_unmap -> seg_map / seg_unmap (14, 15), oom -> an oom event (13) and an `ooms` row
 *     (gm_toom_insert, as the merge of a recording's trace: allocated, reserved and the largest
 *     free block at that moment, device_free from the entry);
 *   - the trace is a ring buffer in PyTorch: segments and active blocks of the snapshot that the
 *     trace does not account for (made before its first entry) become events at time 0, before
 *     the trace; a snapshot without traces becomes just those, so its peak is its end state;
 *   - segments and their blocks become the exit snapshot (reason 3), one per device;
 *   - frames ({filename, line, name}, innermost first) become frames and stacks; a frame whose
 *     file ends in ".py" is a Python frame (frames.python = 1), others native frames with their
 *     function, file and line (symbolized = 1, no module);
 *   - streams (CUstream handles) get the database's small stream numbers;
 *   - an alloc entry's size is the REQUESTED size (PyTorch's trace records what was asked for):
 *     the block's size, which PyTorch's allocated_bytes and max_memory_allocated count, is
 *     replayed from the trace's addresses by PyTorch's own block rules (gm_tblocks, gm_torch.h:
 *     rounding, splitting, merges at free_completed, the snapshot's allocator_settings). A
 *     gpumem export says both (size = the block, requested_size = the request) and is taken
 *     as it says.
 * Frees of memory the trace never allocated are left out. */
#include "snapshot/formats/gm_formats.h"
#include "alloc/alloc.h"
#include "snapshot/formats/gm_out.h"
#include "snapshot/formats/gm_pickle.h"
#include "snapshot/formats/gm_torch.h"
#include "snapshot/record/rec.h"
#include "snapshot/record/rec_internal.h" /* the version and schema the recorder writes */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern const char rec_schema_sql[];

static const char *const usage_import =
    "usage: gpumem import SNAPSHOT.pickle -o DB [--force]\n"
    "\n"
    "Reads a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot(), or a pickled\n"
    "torch.cuda.memory._snapshot(), with or without traces and frames) and writes a gpumem\n"
    "database, so that report, leaks, frag, tune, advise, export and diff work on it:\n"
    "  torch.cuda.memory._record_memory_history(max_entries=100000)\n"
    "  ... the training steps ...\n"
    "  torch.cuda.memory._dump_snapshot('snap.pickle')\n"
    "  gpumem import snap.pickle -o run.db && gpumem report run.db\n"
    "The pickle is read without Python and without executing anything: a pickle that asks to\n"
    "load code (os.system, any class) is refused. PyTorch keeps the last max_entries trace\n"
    "entries: memory allocated before the first one is imported as allocated at time 0.\n"
    "  -o DB     the database to write. An existing DB is replaced only when it is a gpumem\n"
    "            database (or empty), never through a symbolic link, never onto the snapshot;\n"
    "            it is written whole or not at all (a temporary file, then renamed)\n"
    "  --force   replace DB even when it is not a gpumem database\n"
    "Exit code: 0, 2 usage, 3 the snapshot cannot be read (damaged, hostile, not a memory\n"
    "snapshot) or DB cannot be written.\n";

/* ---- a table from byte strings to ids (frames by file/line/name, stacks by frame ids) */
typedef struct btab {
    char **keys;
    size_t *lens;
    uint64_t *ids;
    size_t cap, n;
} btab;

static uint64_t fnv(const void *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

/* the id of key (0 when absent); with add, a new id = n + 1 is given; -1 on out of memory */
static int btab_get(btab *t, const void *key, size_t len, int add, uint64_t *id)
{
    if (t->n * 2 >= t->cap) {
        size_t nc = t->cap ? 2 * t->cap : 1024;
        btab nt = {calloc(nc, sizeof(char *)), calloc(nc, sizeof(size_t)),
                   calloc(nc, sizeof(uint64_t)), nc, t->n};
        if (!nt.keys || !nt.lens || !nt.ids) {
            free(nt.keys), free(nt.lens), free(nt.ids);
            return -1;
        }
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->keys[i]) continue;
            size_t j = fnv(t->keys[i], t->lens[i]) & (nc - 1);
            while (nt.keys[j])
                j = (j + 1) & (nc - 1);
            nt.keys[j] = t->keys[i], nt.lens[j] = t->lens[i], nt.ids[j] = t->ids[i];
        }
        free(t->keys), free(t->lens), free(t->ids);
        *t = nt;
    }
    size_t j = fnv(key, len) & (t->cap - 1);
    for (; t->keys[j]; j = (j + 1) & (t->cap - 1))
        if (t->lens[j] == len && memcmp(t->keys[j], key, len) == 0) {
            *id = t->ids[j];
            return 0;
        }
    *id = 0;
    if (!add) return 0;
    if (!(t->keys[j] = malloc(len ? len : 1))) return -1;
    memcpy(t->keys[j], key, len);
    t->lens[j] = len;
    t->ids[j] = *id = ++t->n;
    return 0;
}

static void btab_free(btab *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->keys[i]);
    free(t->keys), free(t->lens), free(t->ids);
}

/* an NVTX range rebuilt from external_annotations: open while its END has not come */
typedef struct irange {
    int64_t id;
    const char *name;
    char *path;
} irange;

typedef struct imp {
    sqlite3 *db;
    sqlite3_stmt *ev, *frame, *stack, *life;
    btab frames, stacks, strs;
    irange *open; /* the ranges open now, innermost last */
    size_t nopen, copen;
    int64_t next_range;
    uint64_t peak_allocated, peak_reserved; /* PyTorch's, as the import sweeps them */
    char conf[1100];                         /* its allocator configuration, as GPUMEM_CONF */
    const char *pyconf; /* its PYTORCH_CUDA_ALLOC_CONF (meta torch_conf); NULL: not PyTorch's */
    u64map streams; /* (device << 48 ^ handle) -> id */
    uint64_t nstreams;
    uint64_t seq;
    unsigned max_depth;
    const char *path;
    size_t input_bytes;
    char err[8192];
} imp;

static int sqlfail(imp *im, const char *what)
{
    snprintf(im->err, sizeof im->err, "writing the database failed (%s): %s", what,
             sqlite3_errmsg(im->db));
    return -1;
}

static int exec(imp *im, const char *sql)
{
    char *e = NULL;
    if (sqlite3_exec(im->db, sql, NULL, NULL, &e) != SQLITE_OK) {
        snprintf(im->err, sizeof im->err, "writing the database failed: %s", e ? e : "?");
        sqlite3_free(e);
        return -1;
    }
    return 0;
}

static int64_t frame_id(imp *im, const gpk_val *f)
{
    const char *file = gpk_as_str(gpk_get(f, "filename"));
    const char *name = gpk_as_str(gpk_get(f, "name"));
    int64_t line = 0;
    if (gpk_as_i64(gpk_get(f, "line"), &line) != 0) line = 0;
    if (!file) file = "??";
    if (!name) name = "??";
    size_t lf = strlen(file), ln = strlen(name);
    char *key = malloc(lf + ln + 32);
    if (!key) return -1;
    size_t kl = (size_t)sprintf(key, "%s%c%" PRId64 "%c%s", file, 1, line, 1, name);
    uint64_t id;
    if (btab_get(&im->frames, key, kl, 0, &id) != 0) id = UINT64_MAX;
    if (id == 0 && btab_get(&im->frames, key, kl, 1, &id) == 0) {
        int py = lf > 3 && strcmp(file + lf - 3, ".py") == 0;
        sqlite3_stmt *s = im->frame;
        sqlite3_bind_int64(s, 1, (int64_t)id);
        sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, file, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 4, line);
        if (py)
            sqlite3_bind_int(s, 5, 1);
        else
            sqlite3_bind_null(s, 5);
        int rc = sqlite3_step(s);
        sqlite3_reset(s);
        if (rc != SQLITE_DONE) id = UINT64_MAX, sqlfail(im, "frames");
    }
    free(key);
    return id == UINT64_MAX ? -1 : (int64_t)id;
}

/* the stack of a list of frames (innermost first); 0 = none, -1 on failure */
static int64_t stack_id(imp *im, const gpk_val *frames)
{
    if (!frames || frames->type != GPK_LIST || frames->len == 0) return 0;
    int64_t *ids = malloc(frames->len * sizeof *ids);
    if (!ids) return -1;
    size_t n = 0;
    for (size_t i = 0; i < frames->len; i++) {
        if (frames->items[i]->type != GPK_DICT) continue;
        int64_t f = frame_id(im, frames->items[i]);
        if (f < 0) {
            free(ids);
            return -1;
        }
        ids[n++] = f;
    }
    uint64_t id = 0;
    if (n && btab_get(&im->stacks, ids, n * sizeof *ids, 0, &id) == 0 && id == 0) {
        if (btab_get(&im->stacks, ids, n * sizeof *ids, 1, &id) != 0) id = UINT64_MAX;
        for (size_t d = 0; d < n && id != UINT64_MAX; d++) {
            sqlite3_bind_int64(im->stack, 1, (int64_t)id);
            sqlite3_bind_int64(im->stack, 2, (int64_t)d);
            sqlite3_bind_int64(im->stack, 3, ids[d]);
            if (sqlite3_step(im->stack) != SQLITE_DONE) id = UINT64_MAX, sqlfail(im, "stacks");
            sqlite3_reset(im->stack);
        }
        if (n > im->max_depth) im->max_depth = (unsigned)n;
    }
    free(ids);
    return id == UINT64_MAX ? -1 : (int64_t)id;
}

static int64_t stream_id(imp *im, int device, uint64_t handle)
{
    uint64_t key = ((uint64_t)(device & 0xffff) << 48) ^ handle;
    if (key == U64MAP_EMPTY) key--;
    const uint64_t *v = u64map_get(&im->streams, key);
    if (v) return (int64_t)*v;
    uint64_t id = ++im->nstreams;
    u64map_put(&im->streams, key, id);
    char sql[160];
    snprintf(sql, sizeof sql, "INSERT INTO streams VALUES (%" PRIu64 ", %d, %" PRId64 ")", id,
             device, (int64_t)handle);
    if (exec(im, sql) != 0) return -1;
    return (int64_t)id;
}

static int event(imp *im, uint64_t t, int kind, int device, int64_t stream, uint64_t addr,
                 uint64_t size, int64_t stack, uint64_t requested)
{
    sqlite3_stmt *s = im->ev;
    sqlite3_bind_int64(s, 1, (int64_t)++im->seq);
    sqlite3_bind_int64(s, 2, (int64_t)t);
    sqlite3_bind_int(s, 3, kind);
    sqlite3_bind_int(s, 4, device);
    sqlite3_bind_int64(s, 5, stream);
    sqlite3_bind_int64(s, 6, (int64_t)addr);
    sqlite3_bind_int64(s, 7, (int64_t)size);
    sqlite3_bind_int64(
        s, 8, (int64_t)(kind == REC_ALLOC || kind == REC_OOM ? (requested ? requested : size) : 0));
    if (stack > 0)
        sqlite3_bind_int64(s, 9, stack);
    else
        sqlite3_bind_null(s, 9);
    if (t && im->nopen) /* time 0: before the trace, outside any range */
        sqlite3_bind_int64(s, 10, im->open[im->nopen - 1].id);
    else
        sqlite3_bind_null(s, 10);
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? 0 : sqlfail(im, "events");
}

/* strings rows, by text: the id (0 on failure) */
static int64_t string_id(imp *im, const char *text)
{
    uint64_t id;
    size_t n = strlen(text);
    if (btab_get(&im->strs, text, n, 0, &id) != 0) return 0;
    if (id) return (int64_t)id;
    if (btab_get(&im->strs, text, n, 1, &id) != 0) return 0;
    char *q = sqlite3_mprintf("INSERT INTO strings VALUES (%lld, %Q)", (long long)id, text);
    int rc = q ? exec(im, q) : -1;
    sqlite3_free(q);
    return rc == 0 ? (int64_t)id : 0;
}

/* external_annotations (a gpumem export's NVTX ranges, PyTorch's record_function names):
 * START opens a range inside the innermost open one, END closes the innermost open range of
 * that name, writing its row (the path of names from the outermost, as the recorder writes it). */
static int range_start(imp *im, const char *name, uint64_t t)
{
    if (im->nopen == im->copen) {
        size_t nc = im->copen ? 2 * im->copen : 16;
        irange *n = realloc(im->open, nc * sizeof *n);
        if (!n) return snprintf(im->err, sizeof im->err, "out of memory"), -1;
        im->open = n, im->copen = nc;
    }
    const char *parent = im->nopen ? im->open[im->nopen - 1].path : NULL;
    size_t len = strlen(name) + (parent ? strlen(parent) + 1 : 0) + 1;
    char *path = malloc(len);
    if (!path) return snprintf(im->err, sizeof im->err, "out of memory"), -1;
    snprintf(path, len, "%s%s%s", parent ? parent : "", parent ? "/" : "", name);
    int64_t id = ++im->next_range, pid = im->nopen ? im->open[im->nopen - 1].id : 0;
    im->open[im->nopen++] = (irange){id, name, path};
    int64_t sid = string_id(im, name);
    char pbuf[32] = "NULL";
    if (pid) snprintf(pbuf, sizeof pbuf, "%lld", (long long)pid);
    char *q = sqlite3_mprintf("INSERT INTO ranges (id, parent, thread, kind, domain, name, "
                              "start_ns, end_ns, path) VALUES (%lld, %s, 0, 0, NULL, %lld, %llu, "
                              "NULL, %Q)",
                              (long long)id, pbuf, (long long)sid, (unsigned long long)t, path);
    int rc = q && sid ? exec(im, q) : -1;
    if (!q || !sid) snprintf(im->err, sizeof im->err, "out of memory");
    sqlite3_free(q);
    return rc;
}

static int range_end(imp *im, const char *name, uint64_t t)
{
    size_t k = im->nopen;
    while (k && strcmp(im->open[k - 1].name, name)) k--;
    if (!k) return 0; /* never opened in the snapshot */
    irange r = im->open[k - 1];
    memmove(&im->open[k - 1], &im->open[k], (im->nopen - k) * sizeof *im->open);
    im->nopen--;
    char sql[160];
    snprintf(sql, sizeof sql, "UPDATE ranges SET end_ns = %llu WHERE id = %lld", (unsigned long long)t,
             (long long)r.id);
    free(r.path);
    return exec(im, sql);
}

static uint64_t u64_of(const gpk_val *d, const char *k)
{
    uint64_t v = 0;
    if (gpk_as_u64(gpk_get(d, k), &v) != 0) v = 0;
    return v;
}

/* the frames of a block: "frames" (PyTorch 2), else the last entry of "history" (1.13) */
static const gpk_val *block_frames(const gpk_val *b)
{
    const gpk_val *f = gpk_get(b, "frames");
    if (f) return f;
    const gpk_val *h = gpk_get(b, "history");
    if (h && h->type == GPK_LIST && h->len) return gpk_get(h->items[h->len - 1], "frames");
    return NULL;
}

/* an entry's time in ns: a gpumem export's time_ns, else PyTorch's time_us */
static uint64_t time_ns_of(const gpk_val *e)
{
    uint64_t ns;
    if (gpk_as_u64(gpk_get(e, "time_ns"), &ns) == 0) return ns;
    uint64_t us = 0;
    if (gpk_as_u64(gpk_get(e, "time_us"), &us) != 0) us = 0;
    return us > UINT64_MAX / 1000 ? UINT64_MAX : us * 1000;
}

typedef struct tref {
    uint64_t t_ns; /* time_ns_of */
    int device;
    size_t idx;
} tref;

static int cmp_tref(const void *a, const void *b)
{
    const tref *x = a, *y = b;
    if (x->t_ns != y->t_ns) return x->t_ns < y->t_ns ? -1 : 1;
    if (x->device != y->device) return x->device < y->device ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* A free_requested whose free_completed comes later (the block was used on another stream:
 * PyTorch does not reuse it before then): the free is imported at its completion, so that the
 * database's allocations, and its trace for gpumem-replay, hold the block as long as PyTorch
 * did. A completion right after the request, or none found, frees at the request. */
static int completes_later(const gpk_val *list, size_t idx, uint64_t addr)
{
    for (size_t j = idx + 1; j < list->len && j < idx + 100000; j++) {
        const gpk_val *e = list->items[j];
        const char *a = gpk_as_str(gpk_get(e, "action"));
        if (!a || u64_of(e, "addr") != addr) continue;
        if (!strcmp(a, "free_completed")) return j > idx + 1;
        if (!strcmp(a, "alloc") || !strcmp(a, "free_requested")) return 0;
    }
    return 0;
}

typedef struct lv {
    uint64_t seq, size;
    int device;
} lv;

/* Addresses and sizes as a device has them: an address is an integer in [0, 2^64), a size one
 * in [0, 2^50] (a petabyte: more than any device holds). A field that is there must be one of
 * those (a missing one reads as 0, as before); anything else — -1, 2**70, a size of -5, a
 * string — refuses the snapshot, naming the field, instead of importing a 0 in its place. */
#define MAX_SIZE ((uint64_t)1 << 50)
static int bad_number(imp *im, const gpk_val *d, const char *k, int is_size, const char *where, size_t i)
{
    const gpk_val *v = gpk_get(d, k);
    uint64_t x;
    if (!v || v->type == GPK_NONE) return 0;
    if (gpk_as_u64(v, &x) == 0 && (!is_size || x <= MAX_SIZE)) return 0;
    char val[64];
    if (v->type == GPK_INT && !v->big) snprintf(val, sizeof val, "%" PRId64, v->i);
    else if (v->type == GPK_INT) snprintf(val, sizeof val, "an integer beyond 64 bits");
    else snprintf(val, sizeof val, "not an integer");
    snprintf(im->err, sizeof im->err, "not a memory snapshot a device can have: %s %zu has %s %s (%s %s)", where, i,
             k, val, is_size ? "a size is an integer from 0 to" : "an address is an integer from 0 to",
             is_size ? "2**50" : "2**64-1");
    return 1;
}

static int check_numbers(imp *im, const gpk_val *segs, const gpk_val *traces)
{
    for (size_t i = 0; i < segs->len; i++) {
        const gpk_val *sg = segs->items[i];
        if (bad_number(im, sg, "address", 0, "segment", i) || bad_number(im, sg, "total_size", 1, "segment", i) ||
            bad_number(im, sg, "allocated_size", 1, "segment", i) || bad_number(im, sg, "active_size", 1, "segment", i))
            return -1;
        const gpk_val *bl = gpk_get(sg, "blocks");
        for (size_t j = 0; bl && bl->type == GPK_LIST && j < bl->len; j++)
            if (bad_number(im, bl->items[j], "address", 0, "a block of segment", i) ||
                bad_number(im, bl->items[j], "size", 1, "a block of segment", i) ||
                bad_number(im, bl->items[j], "requested_size", 1, "a block of segment", i))
                return -1;
    }
    for (size_t d = 0; traces && d < traces->len; d++) {
        const gpk_val *l = traces->items[d];
        for (size_t i = 0; l && l->type == GPK_LIST && i < l->len; i++)
            if (bad_number(im, l->items[i], "addr", 0, "trace entry", i) ||
                bad_number(im, l->items[i], "size", 1, "trace entry", i) ||
                bad_number(im, l->items[i], "requested_size", 1, "trace entry", i))
                return -1;
    }
    return 0;
}

static int import_doc(imp *im, const gpk_val *root)
{
    const gpk_val *segs = gpk_get(root, "segments");
    const gpk_val *traces = gpk_get(root, "device_traces");
    if (!segs || segs->type != GPK_LIST) {
        snprintf(im->err, sizeof im->err,
                 "not a PyTorch memory snapshot: the pickle has no 'segments' list "
                 "(write it with torch.cuda.memory._dump_snapshot)");
        return -1;
    }
    if (traces && traces->type != GPK_LIST) traces = NULL;
    /* A PyTorch snapshot holds each segment, block and trace entry once, each a dict of its
     * own in a list of its own; the pickle's memo lets a few bytes refer to one of them over and
     * over (848 references to one block in each of 88 references to its segment: 74,712
     * events from 2 KB, seconds of work). Such a pickle is refused, so that the events grow
     * with the input's bytes. Frame lists may repeat (PyTorch shares one among the entries of
     * one traceback): the frames visited are bounded by the input's size, as a real
     * snapshot's are. An empty list may repeat too (no work). */
    u64map seen = {0};
    const gpk_val *twice = NULL;
    const char *what = NULL;
#define ONCE(V, WHAT)                                                                              \
    do {                                                                                           \
        if (!twice && ((V)->type == GPK_DICT || ((V)->type == GPK_LIST && (V)->len))) {            \
            if (u64map_get(&seen, (uint64_t)(uintptr_t)(V)))                                       \
                twice = (V), what = (WHAT);                                                        \
            else if (u64map_put(&seen, (uint64_t)(uintptr_t)(V), 1) != 0)                          \
                twice = (V), what = NULL;                                                          \
        }                                                                                          \
    } while (0)
    uint64_t visits = 0, max_visits = 4 * (uint64_t)im->input_bytes + 100000;
    ONCE(segs, "the segments list");
    for (size_t i = 0; i < segs->len && visits <= max_visits && !twice; i++) {
        ONCE(segs->items[i], "one segment");
        const gpk_val *bl = gpk_get(segs->items[i], "blocks");
        if (bl) ONCE(bl, "one segment's blocks");
        visits += 1 + (bl && bl->type == GPK_LIST ? bl->len : 0);
        for (size_t j = 0; bl && bl->type == GPK_LIST && j < bl->len && !twice; j++) {
            ONCE(bl->items[j], "one block");
            const gpk_val *f = block_frames(bl->items[j]);
            visits += f && f->type == GPK_LIST ? f->len : 0;
        }
    }
    if (traces) ONCE(traces, "the device_traces list");
    for (size_t dv = 0; traces && dv < traces->len && visits <= max_visits && !twice; dv++) {
        const gpk_val *l = traces->items[dv];
        if (l->type != GPK_LIST) continue;
        ONCE(l, "one device's trace");
        visits += l->len;
        for (size_t i = 0; i < l->len && visits <= max_visits && !twice; i++) {
            ONCE(l->items[i], "one trace entry");
            const gpk_val *f = gpk_get(l->items[i], "frames");
            visits += f && f->type == GPK_LIST ? f->len : 0;
        }
    }
    const gpk_val *anns = gpk_get(root, "external_annotations");
    if (anns && anns->type != GPK_LIST) anns = NULL;
    if (anns) ONCE(anns, "the external_annotations list");
    for (size_t i = 0; anns && i < anns->len && visits <= max_visits && !twice; i++, visits++)
        ONCE(anns->items[i], "one annotation");
#undef ONCE
    u64map_free(&seen);
    if (twice) {
        if (what)
            snprintf(im->err, sizeof im->err,
                     "the pickle refers to %s more than once (a PyTorch snapshot holds each "
                     "segment, block and trace entry once): refused as hostile",
                     what);
        else
            snprintf(im->err, sizeof im->err, "out of memory");
        return -1;
    }
    if (visits > max_visits) {
        snprintf(im->err, sizeof im->err,
                 "the pickle refers to the same lists over and over (more than %" PRIu64
                 " blocks, trace entries and frames from %zu bytes): refused as hostile, not a "
                 "PyTorch snapshot",
                 max_visits, im->input_bytes);
        return -1;
    }
    /* each value visited once now (above): the numbers can be checked in one pass */
    if (check_numbers(im, segs, traces) != 0) return -1;
    /* the trace entries of every device, merged by time */
    size_t nref = 0;
    for (size_t dv = 0; traces && dv < traces->len; dv++)
        if (traces->items[dv]->type == GPK_LIST) nref += traces->items[dv]->len;
    tref *refs = calloc(nref ? nref : 1, sizeof *refs);
    if (!refs) return snprintf(im->err, sizeof im->err, "out of memory"), -1;
    nref = 0;
    for (size_t dv = 0; traces && dv < traces->len; dv++) {
        const gpk_val *l = traces->items[dv];
        if (l->type != GPK_LIST) continue;
        for (size_t i = 0; i < l->len; i++)
            refs[nref++] = (tref){time_ns_of(l->items[i]), (int)dv, i};
    }
    gm_sort(refs, nref, sizeof *refs, cmp_tref);
    uint64_t t0 = nref ? refs[0].t_ns : 0;
    /* PyTorch's block structure, for the block sizes its trace does not carry */
    gm_tsettings tset;
    gm_tsettings_read(gpk_get(root, "allocator_settings"), &tset);
    /* the configuration it ran with, for tune, frag and advise: PyTorch's preset and its
     * PYTORCH_CUDA_ALLOC_CONF (GPUMEM_CONF reads PyTorch's keys as PyTorch does) */
    const gpk_val *as = gpk_get(root, "allocator_settings");
    const char *pyconf = gpk_as_str(gpk_get(as, "PYTORCH_CUDA_ALLOC_CONF"));
    /* a gpumem export of a recording under gpumem's allocator says its GPUMEM_CONF beside
     * PyTorch's fields: that allocator ran, not PyTorch's */
    const char *gconf = gpk_as_str(gpk_get(as, "GPUMEM_CONF"));
    alloc_config_t probe;
    alloc_config_default(&probe);
    if (gconf && strlen(gconf) < sizeof im->conf && alloc_config_parse_recorded(&probe, gconf, NULL, 0) == ALLOC_OK) {
        snprintf(im->conf, sizeof im->conf, "%s", gconf);
    } else {
        im->pyconf = pyconf ? pyconf : "";
        snprintf(im->conf, sizeof im->conf, "preset:pytorch%s%.1000s", pyconf && *pyconf ? "," : "",
                 pyconf ? pyconf : "");
        alloc_config_default(&probe);
        if (alloc_config_parse(&probe, im->conf, NULL, 0) != ALLOC_OK)
            snprintf(im->conf, sizeof im->conf, "preset:pytorch%s", tset.expandable ? ",expandable_segments:True" : "");
    }
    gm_tblocks tb;
    gm_tblocks_init(&tb, &tset);
    /* pass 1: the addresses whose first trace entry makes the block (alloc) or the segment
     * (segment_alloc, segment_map): what the snapshot holds there is the trace's own, whenever
     * the snapshot was taken (PyTorch's at the end, a gpumem export at its --at moment); a
     * snapshot block at an address whose first entry frees it, or that has none, was made
     * before the trace began */
    u64map end_allocs = {0}, end_segs = {0}; /* addr -> 1 made by the trace, 0 freed first */
    for (size_t r = 0; r < nref; r++) {
        const gpk_val *e = traces->items[refs[r].device]->items[refs[r].idx];
        const char *a = gpk_as_str(gpk_get(e, "action"));
        uint64_t addr = u64_of(e, "addr");
        if (!a || addr == U64MAP_EMPTY) continue;
        int blk = !strcmp(a, "alloc") || !strcmp(a, "free_requested") || !strcmp(a, "free_completed");
        int seg = !strncmp(a, "segment_", 8);
        u64map *mp = blk ? &end_allocs : seg ? &end_segs : NULL;
        if (mp && !u64map_get(mp, addr))
            u64map_put(mp, addr, !strcmp(a, "alloc") || !strcmp(a, "segment_alloc") || !strcmp(a, "segment_map"));
    }
    int have_seg_events = 0;
    for (size_t r = 0; r < nref && !have_seg_events; r++) {
        const char *a =
            gpk_as_str(gpk_get(traces->items[refs[r].device]->items[refs[r].idx], "action"));
        have_seg_events = a && !strncmp(a, "segment_", 8);
    }
    u64map live = {0};
    lv *lives = NULL;
    size_t nl = 0, cl = 0;
    uint64_t allocated = 0, reserved = 0;
    int rc = 0;
#define ADD_LIFE(S, SZ, DEV)                                                                       \
    do {                                                                                           \
        if (nl == cl) {                                                                            \
            cl = cl ? 2 * cl : 1024;                                                               \
            lv *n_ = realloc(lives, cl * sizeof *lives);                                           \
            if (!n_) {                                                                             \
                snprintf(im->err, sizeof im->err, "out of memory");                                \
                rc = -1;                                                                           \
                break;                                                                             \
            }                                                                                      \
            lives = n_;                                                                            \
        }                                                                                          \
        lives[nl] = (lv){(S), (SZ), (DEV)};                                                        \
    } while (0)
    /* time 0: what the snapshot holds that the trace does not account for */
    for (size_t i = 0; i < segs->len && rc == 0; i++) {
        const gpk_val *sg = segs->items[i];
        if (sg->type != GPK_DICT) continue;
        int64_t dev = 0;
        if (gpk_as_i64(gpk_get(sg, "device"), &dev) != 0 || dev < 0 || dev > 1023) dev = 0;
        int64_t st = stream_id(im, (int)dev, u64_of(sg, "stream"));
        if (st < 0) {
            rc = -1;
            break;
        }
        uint64_t saddr = u64_of(sg, "address"), ssize = u64_of(sg, "total_size");
        const uint64_t *made = u64map_get(&end_segs, saddr);
        if (!have_seg_events || !made || !*made) {
            if (event(im, 0, REC_DRIVER_ALLOC, (int)dev, st, saddr, ssize, 0, 0)) {
                rc = -1;
                break;
            }
            reserved += ssize;
            if (allocated > im->peak_allocated) im->peak_allocated = allocated;
            if (reserved > im->peak_reserved) im->peak_reserved = reserved;
            const gpk_val *ex = gpk_get(sg, "is_expandable");
            if (gm_tblocks_map(&tb, saddr, ssize, ex && ex->type == GPK_BOOL && ex->i) != 0) {
                snprintf(im->err, sizeof im->err, "out of memory");
                rc = -1;
                break;
            }
        }
        const gpk_val *bl = gpk_get(sg, "blocks");
        for (size_t j = 0; bl && bl->type == GPK_LIST && j < bl->len && rc == 0; j++) {
            const gpk_val *b = bl->items[j];
            const char *state = gpk_as_str(gpk_get(b, "state"));
            uint64_t baddr = u64_of(b, "address");
            const uint64_t *mine = u64map_get(&end_allocs, baddr);
            if (!state || strncmp(state, "active_", 7) != 0 || (mine && *mine) ||
                baddr == U64MAP_EMPTY)
                continue;
            int64_t stk = stack_id(im, block_frames(b));
            if (stk < 0) {
                rc = -1;
                break;
            }
            uint64_t sz = u64_of(b, "size");
            gm_tblocks_alloc(&tb, baddr, sz);
            if (event(im, 0, REC_ALLOC, (int)dev, st, baddr, sz, stk,
                      u64_of(b, "requested_size"))) {
                rc = -1;
                break;
            }
            ADD_LIFE(im->seq, sz, (int)dev);
            if (rc) break;
            u64map_put(&live, baddr, nl++);
            allocated += sz;
            if (allocated > im->peak_allocated) im->peak_allocated = allocated;
            if (reserved > im->peak_reserved) im->peak_reserved = reserved;
        }
    }
    /* the annotations, in time order (stable: their list's order within a microsecond) */
    tref *ar = calloc(anns && anns->len ? anns->len : 1, sizeof *ar);
    size_t nar = 0, ai = 0;
    if (!ar) rc = -1, snprintf(im->err, sizeof im->err, "out of memory");
    for (size_t i = 0; ar && anns && nref && i < anns->len; i++) {
        const gpk_val *x = anns->items[i];
        const char *stage = gpk_as_str(gpk_get(x, "stage")), *nm = gpk_as_str(gpk_get(x, "name"));
        if (x->type != GPK_DICT || !stage || !nm || (strcmp(stage, "START") && strcmp(stage, "END")))
            continue;
        uint64_t tu = time_ns_of(x);
        ar[nar++] = (tref){tu < t0 ? t0 : tu, 0, i};
    }
    if (nar) gm_sort(ar, nar, sizeof *ar, cmp_tref);
#define ANNOTATE(LIMIT_NS, ENDS_TOO)                                                                 \
    for (; rc == 0 && ai < nar && ar[ai].t_ns <= (LIMIT_NS); ai++) {                          \
        const gpk_val *x_ = anns->items[ar[ai].idx];                                              \
        int start_ = !strcmp(gpk_as_str(gpk_get(x_, "stage")), "START");                         \
        if (!start_ && !(ENDS_TOO) && ar[ai].t_ns == (LIMIT_NS)) break;                        \
        uint64_t t_ = ar[ai].t_ns - t0 + 1;                                                     \
        const char *n_ = gpk_as_str(gpk_get(x_, "name"));                                          \
        if ((start_ ? range_start(im, n_, t_) : range_end(im, n_, t_)) != 0) rc = -1;            \
    }
    /* the trace: at each entry, the ranges started by its time (ended before it) are applied */
    for (size_t r = 0; r < nref && rc == 0; r++) {
        const gpk_val *e = traces->items[refs[r].device]->items[refs[r].idx];
        const char *a = gpk_as_str(gpk_get(e, "action"));
        if (!a) continue;
        ANNOTATE(refs[r].t_ns, 0)
        if (rc) break;
        int dev = refs[r].device;
        uint64_t addr = u64_of(e, "addr"), size = u64_of(e, "size");
        uint64_t t = refs[r].t_ns - t0 + (nref ? 1 : 0);
        int64_t st = stream_id(im, dev, u64_of(e, "stream"));
        if (st < 0) {
            rc = -1;
            break;
        }
        if (addr == U64MAP_EMPTY) continue;
        if (!strcmp(a, "alloc")) {
            int64_t stk = stack_id(im, gpk_get(e, "frames"));
            if (stk < 0) {
                rc = -1;
                break;
            }
            uint64_t old;
            if (u64map_del(&live, addr, &old)) { /* reused without a free in the trace */
                allocated -= lives[old].size;
            }
            /* PyTorch's size is the request; a gpumem export gives the block and the request */
            uint64_t requested = u64_of(e, "requested_size"), blk = gm_tblocks_alloc(&tb, addr, size);
            if (!requested) {
                requested = size;
                if (!blk) {
                    snprintf(im->err, sizeof im->err, "out of memory");
                    rc = -1;
                    break;
                }
                size = blk;
            }
            if (event(im, t, REC_ALLOC, dev, st, addr, size, stk, requested)) {
                rc = -1;
                break;
            }
            ADD_LIFE(im->seq, size, dev);
            if (rc) break;
            u64map_put(&live, addr, nl++);
            allocated += size;
            if (allocated > im->peak_allocated) im->peak_allocated = allocated;
            if (reserved > im->peak_reserved) im->peak_reserved = reserved;
            const char *meta = gpk_as_str(gpk_get(e, "user_metadata"));
            if (meta && *meta) { /* a gpumem export's tensor name */
                int64_t sid = string_id(im, meta);
                char sql[160];
                snprintf(sql, sizeof sql, "INSERT INTO names (seq, addr, name) VALUES (%" PRIu64 ", %" PRIu64 ", %lld)",
                         im->seq, addr, (long long)sid);
                if (!sid || exec(im, sql) != 0) {
                    rc = -1;
                    break;
                }
            }
        } else if (!strcmp(a, "free_requested") || !strcmp(a, "free_completed")) {
            uint64_t i;
            if (a[5] == 'c') gm_tblocks_free_block(&tb, addr); /* PyTorch merges it then */
            if (a[5] == 'r' && completes_later(traces->items[dev], refs[r].idx, addr)) continue;
            if (!u64map_del(&live, addr, &i)) continue;
            if (event(im, t, REC_FREE, dev, st, addr, lives[i].size, 0, 0)) {
                rc = -1;
                break;
            }
            sqlite3_bind_int64(im->life, 1, (int64_t)lives[i].seq);
            sqlite3_bind_int64(im->life, 2, (int64_t)im->seq);
            if (sqlite3_step(im->life) != SQLITE_DONE) rc = sqlfail(im, "alloc_life");
            sqlite3_reset(im->life);
            lives[i].seq = 0;
            allocated -= lives[i].size;
        } else if (!strcmp(a, "segment_alloc") || !strcmp(a, "segment_map")) {
            if (gm_tblocks_map(&tb, addr, size, a[8] == 'm') != 0) {
                snprintf(im->err, sizeof im->err, "out of memory");
                rc = -1;
                break;
            }
            if (event(im, t, a[8] == 'a' ? REC_DRIVER_ALLOC : REC_SEG_MAP, dev, st, addr, size, 0,
                      0)) {
                rc = -1;
                break;
            }
            reserved += size;
            if (allocated > im->peak_allocated) im->peak_allocated = allocated;
            if (reserved > im->peak_reserved) im->peak_reserved = reserved;
        } else if (!strcmp(a, "segment_free") || !strcmp(a, "segment_unmap")) {
            gm_tblocks_unmap(&tb, addr, size);
            if (event(im, t, a[8] == 'f' ? REC_DRIVER_FREE : REC_SEG_UNMAP, dev, st, addr, size, 0,
                      0)) {
                rc = -1;
                break;
            }
            reserved -= size < reserved ? size : reserved;
        } else if (!strcmp(a, "oom")) {
            int64_t stk = stack_id(im, gpk_get(e, "frames"));
            if (stk < 0) {
                rc = -1;
                break;
            }
            if (event(im, t, REC_OOM, dev, st, 0, size, stk, 0)) {
                rc = -1;
                break;
            }
            gm_toom o = {.seq = im->seq,
                         .device = dev,
                         .stream = st,
                         .requested = size,
                         .allocated = allocated,
                         .reserved = reserved,
                         .largest_free = gm_tblocks_largest_free(&tb),
                         .device_free = gm_toom_device_free(e),
                         .limit = REC_NO_LIMIT}; /* a snapshot holds no cap */
            if (gm_toom_insert(im->db, &o, im->err, sizeof im->err) != 0) {
                rc = -1;
                break;
            }
        }
    }
    if (nref) ANNOTATE(UINT64_MAX, 1)
#undef ANNOTATE
    free(ar);
    /* alive at the end */
    for (size_t i = 0; i < nl && rc == 0; i++) {
        if (!lives[i].seq) continue;
        sqlite3_bind_int64(im->life, 1, (int64_t)lives[i].seq);
        sqlite3_bind_null(im->life, 2);
        if (sqlite3_step(im->life) != SQLITE_DONE) rc = sqlfail(im, "alloc_life");
        sqlite3_reset(im->life);
    }
    /* the exit snapshot: one per device */
    int64_t snap_of_dev[1024] = {0};
    int64_t nsnap = 0, idx = 0;
    sqlite3_stmt *ss = NULL, *bs = NULL;
    if (rc == 0 &&
        (sqlite3_prepare_v2(im->db, "INSERT INTO segments VALUES (?,?,?,?,?,?,?,?)", -1, &ss,
                            NULL) != SQLITE_OK ||
         sqlite3_prepare_v2(im->db, "INSERT OR REPLACE INTO blocks VALUES (?,?,?,?,?,?,?)", -1, &bs,
                            NULL) != SQLITE_OK))
        rc = sqlfail(im, "preparing the snapshot");
    for (size_t i = 0; i < segs->len && rc == 0; i++) {
        const gpk_val *sg = segs->items[i];
        if (sg->type != GPK_DICT) continue;
        int64_t dev = 0;
        if (gpk_as_i64(gpk_get(sg, "device"), &dev) != 0 || dev < 0 || dev > 1023) dev = 0;
        if (!snap_of_dev[dev]) {
            snap_of_dev[dev] = ++nsnap;
            char sql[200];
            snprintf(sql, sizeof sql,
                     "INSERT INTO snapshots VALUES (%" PRId64 ", %" PRIu64 ", %" PRIu64
                     ", 3, %" PRId64 ")",
                     nsnap, im->seq, nref ? refs[nref - 1].t_ns - t0 + 1 : 0, dev);
            if (exec(im, sql)) {
                rc = -1;
                break;
            }
        }
        const gpk_val *exp = gpk_get(sg, "is_expandable");
        const char *type = gpk_as_str(gpk_get(sg, "segment_type"));
        int flags = (exp && exp->type == GPK_BOOL && exp->i ? REC_SEG_F_EXPANDABLE : 0) |
                    (type && !strcmp(type, "small") ? REC_SEG_F_SMALL_POOL : 0);
        uint64_t saddr = u64_of(sg, "address"), ssize = u64_of(sg, "total_size"), mapped = 0;
        const gpk_val *bl = gpk_get(sg, "blocks");
        for (size_t j = 0; bl && bl->type == GPK_LIST && j < bl->len; j++)
            mapped += u64_of(bl->items[j], "size");
        ++idx;
        sqlite3_bind_int64(ss, 1, snap_of_dev[dev]);
        sqlite3_bind_int64(ss, 2, idx);
        sqlite3_bind_int64(ss, 3, dev);
        sqlite3_bind_int64(
            ss, 4,
            (int64_t)u64_of(sg,
                            "stream")); /* segments.stream: the handle, as the recorder writes it */
        sqlite3_bind_int64(ss, 5, (int64_t)saddr);
        sqlite3_bind_int64(ss, 6, (int64_t)ssize);
        sqlite3_bind_int64(ss, 7, (int64_t)(mapped < ssize ? mapped : ssize));
        sqlite3_bind_int(ss, 8, flags);
        if (sqlite3_step(ss) != SQLITE_DONE) rc = sqlfail(im, "segments");
        sqlite3_reset(ss);
        uint64_t next = saddr;
        for (size_t j = 0; bl && bl->type == GPK_LIST && j < bl->len && rc == 0; j++) {
            const gpk_val *b = bl->items[j];
            const char *state = gpk_as_str(gpk_get(b, "state"));
            uint64_t baddr = gpk_get(b, "address") ? u64_of(b, "address") : next,
                     bsz = u64_of(b, "size");
            next = baddr + bsz;
            int s = !state                                  ? REC_BLOCK_FREE
                    : !strcmp(state, "active_allocated")    ? REC_BLOCK_ALLOCATED
                    : !strcmp(state, "active_pending_free") ? REC_BLOCK_PENDING
                                                            : REC_BLOCK_FREE;
            sqlite3_bind_int64(bs, 1, snap_of_dev[dev]);
            sqlite3_bind_int64(bs, 2, (int64_t)baddr);
            sqlite3_bind_int64(bs, 3, idx);
            sqlite3_bind_int(bs, 4, s);
            sqlite3_bind_int64(bs, 5, (int64_t)bsz);
            sqlite3_bind_int64(bs, 6,
                               (int64_t)(s == REC_BLOCK_FREE           ? 0
                                         : u64_of(b, "requested_size") ? u64_of(b, "requested_size")
                                                                       : bsz));
            sqlite3_bind_int64(bs, 7, 0);
            if (sqlite3_step(bs) != SQLITE_DONE) rc = sqlfail(im, "blocks");
            sqlite3_reset(bs);
        }
    }
    sqlite3_finalize(ss);
    sqlite3_finalize(bs);
#undef ADD_LIFE
    gm_tblocks_free(&tb);
    free(refs);
    free(lives);
    u64map_free(&live);
    u64map_free(&end_allocs);
    u64map_free(&end_segs);
    return rc;
}

int gm_import_pickle(const unsigned char *buf, size_t n, const char *source, const char *dbpath,
                     uint64_t *events, char *err, size_t errsz)
{
    gpk_doc doc;
    if (gpk_parse(buf, n, 0, &doc, err, errsz) != 0) {
        gpk_free(&doc);
        return -1;
    }
    if (!doc.root || doc.root->type != GPK_DICT) {
        snprintf(err, errsz, "not a PyTorch memory snapshot (the pickle holds no dict)");
        gpk_free(&doc);
        return -1;
    }
    imp im = {.path = source, .input_bytes = n};
    int rc = -1;
    if (sqlite3_open(dbpath, &im.db) != SQLITE_OK) {
        snprintf(im.err, sizeof im.err, "cannot create %s: %s", dbpath,
                 im.db ? sqlite3_errmsg(im.db) : "out of memory");
    } else {
        char pragmas[200];
        snprintf(pragmas, sizeof pragmas,
                 "PRAGMA page_size=8192; PRAGMA application_id=%d; PRAGMA user_version=1;",
                 REC_APPLICATION_ID);
        if (exec(&im, pragmas) == 0 && exec(&im, "BEGIN") == 0 && exec(&im, rec_schema_sql) == 0 &&
            u64map_init(&im.streams, 64) == 0 &&
            sqlite3_prepare_v2(im.db,
                               "INSERT INTO events (seq, t, kind, flags, device, stream, thread, "
                               "addr, size, requested, stack, range) "
                               "VALUES (?1, ?2, ?3, 0, ?4, ?5, 0, ?6, ?7, ?8, ?9, ?10)",
                               -1, &im.ev, NULL) == SQLITE_OK &&
            sqlite3_prepare_v2(im.db,
                               "INSERT INTO frames (id, function, file, line, symbolized, python) "
                               "VALUES (?1, ?2, ?3, ?4, 1, ?5)",
                               -1, &im.frame, NULL) == SQLITE_OK &&
            sqlite3_prepare_v2(im.db, "INSERT INTO stacks VALUES (?, ?, ?)", -1, &im.stack, NULL) ==
                SQLITE_OK &&
            sqlite3_prepare_v2(im.db, "INSERT INTO alloc_life (birth, death) VALUES (?, ?)", -1,
                               &im.life, NULL) == SQLITE_OK) {
            if (import_doc(&im, doc.root) == 0) {
                char sql[8000], *q = sqlite3_mprintf("%q", im.path), *cq = sqlite3_mprintf("%q", im.conf);
                snprintf(sql, sizeof sql,
                         "INSERT INTO meta VALUES ('schema_major', %d), ('schema_minor', %d), "
                         "('gpumem_version', '%s'),"
                         "('state', 'closed'), ('dropped_events', 0), ('start_ns', 0), ('events', "
                         "%" PRIu64 "),"
                         "('stacks', %u), ('cmdline', 'gpumem import %s'), ('imported_from', "
                         "'PyTorch memory snapshot %s'), ('config', '%s'), ('stat.peak_allocated', %" PRIu64
                         "), ('stat.peak_reserved', %" PRIu64 ");"
                         "INSERT INTO threads VALUES (0, 0, 'main');",
                         REC_SCHEMA_MAJOR, REC_SCHEMA_MINOR, REC_VERSION, im.seq, im.max_depth,
                         q ? q : "", q ? q : "", cq ? cq : "", im.peak_allocated, im.peak_reserved);
                sqlite3_free(q), sqlite3_free(cq);
                /* PyTorch's own words for its configuration, kept apart from meta.config (the
                 * GPUMEM_CONF that replays it): what tune and frag name as recorded, and what an
                 * export writes back */
                char *tq = im.pyconf ? sqlite3_mprintf("INSERT INTO meta VALUES ('torch_conf', %Q)", im.pyconf) : NULL;
                int ok = exec(&im, sql) == 0 && (!tq || exec(&im, tq) == 0);
                sqlite3_free(tq);
                if (ok && gm_tsettings_store(im.db, gpk_get(doc.root, "allocator_settings")) != 0) {
                    sqlfail(&im, "keeping the snapshot's allocator_settings");
                    ok = 0;
                }
                if (ok && exec(&im, "COMMIT") == 0) rc = 0;
            }
        } else if (!im.err[0]) {
            sqlfail(&im, "creating the schema");
        }
    }
    sqlite3_finalize(im.ev), sqlite3_finalize(im.frame), sqlite3_finalize(im.stack),
        sqlite3_finalize(im.life);
    if (im.db) sqlite3_close(im.db);
    btab_free(&im.frames);
    btab_free(&im.stacks);
    btab_free(&im.strs);
    for (size_t i = 0; i < im.nopen; i++) free(im.open[i].path);
    free(im.open);
    u64map_free(&im.streams);
    *events = im.seq;
    gpk_free(&doc);
    if (rc != 0) snprintf(err, errsz, "%s", im.err[0] ? im.err : "import failed");
    return rc;
}

int gm_cmd_import(int argc, char **argv)
{
    const char *in = NULL, *outp = NULL;
    int force = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_import, stdout);
            return 0;
        } else if (!strcmp(a, "-o")) {
            if (!(outp = gm_opt_value(argc, argv, &i)))
                return fprintf(stderr, "gpumem import: -o needs a file name\n%s", GM_HELP("import")),
                       GM_EXIT_USAGE;
        } else if (!strcmp(a, "--force"))
            force = 1;
        else if (a[0] == '-' && a[1])
            return fprintf(stderr, "gpumem import: unknown option '%s'\n%s", a, GM_HELP("import")),
                   GM_EXIT_USAGE;
        else if (!in)
            in = a;
        else
            return fprintf(stderr, "gpumem import: one snapshot only; '%s' is extra\n%s", a,
                           GM_HELP("import")),
                   GM_EXIT_USAGE;
    }
    if (!in)
        return fprintf(stderr, "gpumem import: which snapshot? give its path\n%s", GM_HELP("import")),
               GM_EXIT_USAGE;
    if (!outp)
        return fprintf(stderr, "gpumem import: where to? give -o DB\n%s", GM_HELP("import")),
               GM_EXIT_USAGE;
    char err[8192];
    const char *inputs[] = {in};
    int bad = gm_out_check(outp, GM_OUT_DB, force, inputs, 1, err, sizeof err);
    if (bad) {
        fprintf(stderr, "gpumem import: %s\n", err);
        return bad;
    }
    struct stat st;
    /* O_NONBLOCK: a FIFO opens at once, with no writer, and is refused below by its type; a
     * plain open would wait for a writer that may never come */
    int fd = open(in, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "gpumem import: cannot open %s: %s\n", in, strerror(errno));
        return GM_EXIT_BADDB;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > ((off_t)4 << 30)) {
        fprintf(stderr, "gpumem import: %s is not a regular file of at most 4 GiB\n", in);
        close(fd);
        return GM_EXIT_BADDB;
    }
    FILE *f = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        fprintf(stderr, "gpumem import: cannot open %s: %s\n", in, strerror(errno));
        close(fd);
        return GM_EXIT_BADDB;
    }
    size_t n = (size_t)st.st_size;
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        fprintf(stderr, "gpumem import: cannot read %s: %s\n", in,
                buf ? strerror(errno) : "out of memory");
        free(buf);
        fclose(f);
        return GM_EXIT_BADDB;
    }
    fclose(f);
    if (n >= 16 && memcmp(buf, "SQLite format 3", 16) == 0) { /* a recording given for a snapshot */
        free(buf);
        fprintf(stderr, "gpumem import: %s is an SQLite file (a gpumem database?), not a PyTorch snapshot: "
                        "nothing to import; give it to the commands directly (gpumem report %s)\n", in, in);
        return GM_EXIT_BADDB;
    }
    gm_out out;
    if ((bad = gm_out_open(&out, outp, GM_OUT_DB, force, inputs, 1, err, sizeof err)) != 0) {
        free(buf);
        fprintf(stderr, "gpumem import: %s\n", err);
        return bad;
    }
    gm_out_release_file(&out); /* SQLite writes the temporary file by its name */
    uint64_t nev = 0;
    int rc = gm_import_pickle(buf, n, in, out.tmp, &nev, err, sizeof err);
    free(buf);
    if (rc != 0) {
        char fate[PATH_MAX + 64];
        gm_out_discard(&out);
        fprintf(stderr, "gpumem import: %s: %s; %s\n", in, err, gm_out_fate(&out, fate, sizeof fate));
        return GM_EXIT_BADDB;
    }
    if ((rc = gm_out_commit(&out, err, sizeof err)) != 0) {
        fprintf(stderr, "gpumem import: %s\n", err);
        return rc;
    }
    fprintf(stderr, "gpumem import: %s -> %s (%" PRIu64 " events)\n", in, outp, nev);
    return 0;
}
