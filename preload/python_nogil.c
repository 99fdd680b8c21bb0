/*
 * python_nogil.c — the Python frames of a thread that released the GIL.
 *
 * Most PyTorch ops, and every ctypes.CDLL call, release the GIL before they allocate: the
 * public C API python.c uses (PyEval_GetFrame...) needs the GIL, so those allocations would
 * carry native frames only, and under PyTorch that is the same few C++ frames for everything.
 * This file reads the allocating thread's own frame chain directly, with plain loads, without
 * the GIL and without calling into Python.
 *
 * Why that is sound. The thread reading is the thread whose frames are read, and it is blocked
 * inside the C call that allocates: its interpreter loop is suspended further up its own C
 * stack. Every pointer followed is reached from its thread state through references that the
 * suspended frames own — thread state (PyGILState_GetThisThreadState: a TLS slot, no GIL
 * needed) -> current frame -> previous frames (each executing, kept alive by the loop that
 * runs it) -> the frame's code object (a strong reference of the frame) -> its name, file and
 * line table (strong references of the code object, immutable). Other threads may run Python
 * meanwhile, but none of them frees or changes these: a frame chain is only changed by its
 * own thread, and code objects are immutable after creation (the specialising interpreter
 * rewrites their bytecode, which is never read here). Nothing is reference-counted or
 * allocated, so no interpreter state is touched; the one write is at init: PyCode_Type's
 * tp_dealloc wrapped to count code objects freed (below, "code objects freed").
 *
 * The private layouts. Frames and code objects are private structures: the offsets of the
 * fields read are tabulated below per minor version (3.9 and 3.10: PyFrameObject chains from
 * tstate->frame; 3.11 and 3.12: _PyInterpreterFrame chains from tstate->cframe->current_frame;
 * 3.13: tstate->current_frame), measured with offsetof() against each version's own headers
 * (x86-64 and other LP64 targets; CPython keeps them within a minor version). The line is
 * decoded from the code object's line table as the interpreter does (3.9 co_lnotab, 3.10
 * co_linetable pairs, 3.11+ the location table).
 *
 * Defence. A wrong table, or a daemon thread whose state the interpreter frees while it
 * finalises, must not crash the program: every structure is read only after its pages have
 * been seen readable — once per page, with process_vm_readv on the process itself, which fails
 * with EFAULT instead of faulting, then remembered in a small table of known-readable pages —
 * every code object's type is checked against &PyCode_Type (3.9/3.10 frames against
 * &PyFrame_Type, 3.11+ frames by their owner byte), pointers must be aligned user addresses,
 * and the walk is bounded (REC_MAX_PY_FRAMES kept, 256 visited). Under AddressSanitizer the
 * loads are not instrumented (they read the interpreter's memory, not ours): the page check
 * is what keeps them safe. And the table is checked: the first stack python.c reads through
 * the C API (GIL held) is read again here; if the two differ, this reader turns itself off
 * with one line on stderr.
 *
 * Cost. Code objects are cached by address with what identifies them (the addresses of their
 * name, file and line table, the name's hash, the table's size, the first line): a code object
 * freed and another created at the same address (exec in a loop) is noticed, and its name
 * and file are read and interned again. Lines are cached by (code object, instruction offset).
 * A frame then costs a dozen loads and two probes (BENCH rec.app_ns_python_nogil). Whole stacks
 * are kept by their chain (the chain memo, below): a chain seen before costs its walk's few loads
 * a frame, compared with the kept chain as it is read (memo_again), and each code object's identity check only when a code object was
 * freed since the chain was last checked. The caches are shared by all
 * threads under one lock (gm_spin), taken once per event that has frames.
 */
#include "preload/gm_internal.h"

#ifdef GM_HAVE_REC
#include "snapshot/record/rec.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- the private layouts, per minor version (bytes; -1: no such field) ----------------------- */

enum line_fmt { LINES_LNOTAB, LINES_310, LINES_LOCATIONS };

typedef struct py_layout {
    int minor;
    int ts_frame; /* tstate -> frame (3.9/3.10), -> cframe (3.11/3.12), -> current_frame (3.13) */
    int cf_frame; /* cframe -> current_frame (3.11/3.12), else -1 */
    int fr_back, fr_code, fr_instr; /* instr: f_lasti (int, 3.9/3.10) or the instruction pointer */
    int fr_owner;                   /* _PyInterpreterFrame.owner (char), 3.11+ */
    int fr_size;                    /* bytes of a frame that are read */
    int co_filename, co_name, co_firstlineno, co_lines; /* co_lines: co_lnotab / co_linetable */
    int co_code, co_firsttraceable;                     /* co_code_adaptive, 3.11+ */
    int co_size;
    int str_ascii, str_compact; /* sizeof PyASCIIObject, PyCompactUnicodeObject */
    enum line_fmt lines;
} py_layout;

static const py_layout layouts[] = {
    {9, 24, -1, 24, 32, 104, -1, 112, 104, 112, 40, 120, -1, -1, 128, 48, 72, LINES_LNOTAB},
    {10, 24, -1, 24, 32, 96, -1, 104, 104, 112, 40, 120, -1, -1, 128, 48, 72, LINES_310},
    {11, 56, 8, 48, 32, 56, 69, 72, 112, 120, 72, 136, 184, 168, 184, 48, 72, LINES_LOCATIONS},
    {12, 56, 0, 8, 0, 56, 70, 72, 112, 120, 68, 136, 192, 176, 192, 40, 56, LINES_LOCATIONS},
    {13, 72, -1, 8, 0, 56, 70, 72, 112, 120, 68, 136, 200, 184, 200, 40, 56, LINES_LOCATIONS},
};

enum { OWNED_BY_GENERATOR = 1, OWNED_BY_CSTACK = 3 }; /* _PyInterpreterFrame.owner */
#define STR_LENGTH 16                                 /* PyASCIIObject.length */
#define STR_HASH 24                                   /* PyASCIIObject.hash */
#define STR_STATE 32                                  /* PyASCIIObject.state (bit field) */
#define BYTES_SIZE 16                                 /* PyVarObject.ob_size */
#define BYTES_DATA 32                                 /* PyBytesObject.ob_sval */
#define OB_TYPE 8                                     /* PyObject.ob_type */
#define MAX_VISITED 256

static struct {
    const py_layout *l;
    uintptr_t code_type, frame_type;
    void *(*this_tstate)(void); /* PyGILState_GetThisThreadState */
    int (*is_finalizing)(void); /* _Py_IsFinalizing / Py_IsFinalizing; may be NULL */
} ng;

/* ---- reading memory that may not be there ----------------------------------------------------
 * Pages seen readable, direct mapped by page number (+1; 0 = empty). A hint table: racy
 * updates lose entries, never invent them. Pages are never forgotten: a pointer the invariant
 * above says is live cannot point into a page unmapped since. */
#define PAGE_SLOTS 8192u
static _Atomic uintptr_t known_pages[PAGE_SLOTS];

static inline int page_known(uintptr_t page)
{
    return atomic_load_explicit(&known_pages[(page * 0x9E3779B1u) & (PAGE_SLOTS - 1)],
                                memory_order_relaxed) == page + 1;
}

static void page_remember(uintptr_t page)
{
    atomic_store_explicit(&known_pages[(page * 0x9E3779B1u) & (PAGE_SLOTS - 1)], page + 1,
                          memory_order_relaxed);
}

/* Copies n bytes at src through the kernel: -1 (never a fault) when they are not readable. */
static int safe_copy(void *dst, uintptr_t src, size_t n)
{
    struct iovec local = {dst, n}, remote = {(void *)src, n};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)n ? 0 : -1;
}

/* The slow path of readable(): the kernel tries one byte on each page. */
static __attribute__((noinline)) int readable_slow(uintptr_t addr, size_t n)
{
    uintptr_t p0 = addr >> 12, p1 = (addr + n - 1) >> 12;
    char probe;
    if (safe_copy(&probe, addr, 1) != 0 || (p1 != p0 && safe_copy(&probe, addr + n - 1, 1) != 0))
        return 0;
    page_remember(p0);
    page_remember(p1);
    return 1;
}

/* 1 when [addr, addr + n) may be read with plain loads (n <= one page). */
static inline int readable(uintptr_t addr, size_t n)
{
    if (addr < 65536 || addr >= ((uintptr_t)1 << 47) - n) return 0;
    uintptr_t p0 = addr >> 12, p1 = (addr + n - 1) >> 12;
    if (page_known(p0) && (p1 == p0 || page_known(p1))) return 1;
    return readable_slow(addr, n);
}

/* Loads from the interpreter's memory, after readable(): not instrumented, see the top. */
#define NOSAN __attribute__((no_sanitize("address", "thread", "undefined")))
NOSAN static uintptr_t ld_ptr(uintptr_t a)
{
    return *(const uintptr_t *)a;
}
NOSAN static int64_t ld_i64(uintptr_t a)
{
    return *(const int64_t *)a;
}
NOSAN static int32_t ld_i32(uintptr_t a)
{
    return *(const int32_t *)a;
}
NOSAN static uint8_t ld_u8(uintptr_t a)
{
    return *(const uint8_t *)a;
}

static inline int aligned(uintptr_t p)
{
    return (p & 7) == 0;
}

/* ---- strings and line tables (slow path: first sight of a code object or an offset) -----------
 */

/* The UTF-8 text of a str object into buf (cap bytes with the NUL); 0, or -1. Compact strings
 * only (every code object's name and file is one). */
static int read_str(uintptr_t s, char *buf, size_t cap)
{
    const py_layout *l = ng.l;
    unsigned char head[80];
    if (!aligned(s) ||
        safe_copy(head, s, (size_t)l->str_ascii) != 0) /* no further: may end there */
        return -1;
    int64_t len;
    uint32_t state;
    memcpy(&len, head + STR_LENGTH, sizeof len);
    memcpy(&state, head + STR_STATE, sizeof state);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || len < 0) return -1;
    if (ascii) {
        size_t n = (size_t)len < cap - 1 ? (size_t)len : cap - 1;
        if (safe_copy(buf, s + (uintptr_t)l->str_ascii, n) != 0) return -1;
        buf[n] = 0;
        return 0;
    }
    if (kind != 1 && kind != 2 && kind != 4) return -1;
    /* no UTF-8 copy cached in the object: encode the code points */
    size_t o = 0;
    unsigned char chunk[256];
    for (int64_t i = 0; i < len;) {
        size_t take =
            (size_t)(len - i) * kind < sizeof chunk ? (size_t)(len - i) * kind : sizeof chunk;
        if (safe_copy(chunk, s + (uintptr_t)l->str_compact + (uintptr_t)i * kind, take) != 0)
            return -1;
        for (size_t k = 0; k < take; k += kind, i++) {
            uint32_t c = kind == 1 ? chunk[k]
                         : kind == 2
                             ? (uint32_t)(chunk[k] | chunk[k + 1] << 8)
                             : (uint32_t)chunk[k] | (uint32_t)chunk[k + 1] << 8 |
                                   (uint32_t)chunk[k + 2] << 16 | (uint32_t)chunk[k + 3] << 24;
            unsigned char u[4];
            size_t m;
            if (c < 0x80)
                u[0] = (unsigned char)c, m = 1;
            else if (c < 0x800)
                u[0] = (unsigned char)(0xC0 | c >> 6), u[1] = (unsigned char)(0x80 | (c & 63)),
                m = 2;
            else if (c < 0x10000)
                u[0] = (unsigned char)(0xE0 | c >> 12),
                u[1] = (unsigned char)(0x80 | (c >> 6 & 63)),
                u[2] = (unsigned char)(0x80 | (c & 63)), m = 3;
            else
                u[0] = (unsigned char)(0xF0 | (c >> 18 & 7)),
                u[1] = (unsigned char)(0x80 | (c >> 12 & 63)),
                u[2] = (unsigned char)(0x80 | (c >> 6 & 63)),
                u[3] = (unsigned char)(0x80 | (c & 63)), m = 4;
            if (o + m >= cap) goto done;
            memcpy(buf + o, u, m);
            o += m;
        }
    }
done:
    buf[o] = 0;
    return 0;
}

/* A bytes object's contents read forwards, a chunk at a time. */
typedef struct byte_reader {
    uintptr_t at, end;
    unsigned char buf[256];
    size_t pos, have;
    int bad;
} byte_reader;

static int next_byte(byte_reader *r)
{
    if (r->pos == r->have) {
        if (r->at >= r->end) return -1;
        size_t n = r->end - r->at < sizeof r->buf ? (size_t)(r->end - r->at) : sizeof r->buf;
        if (safe_copy(r->buf, r->at, n) != 0) {
            r->bad = 1;
            r->at = r->end;
            return -1;
        }
        r->at += n, r->have = n, r->pos = 0;
    }
    return r->buf[r->pos++];
}

/* The line of byte offset addr (< 0: not started) in a code object's line table, as
 * PyCode_Addr2Line computes it in each version; -1 when there is none. */
static int table_line(uintptr_t table, int64_t size, int first, int64_t addr)
{
    if (addr < 0) return first;
    byte_reader r = {table + BYTES_DATA, table + BYTES_DATA + (uintptr_t)size, {0}, 0, 0, 0};
    int line = first;
    int64_t start = 0;
    switch (ng.l->lines) {
    case LINES_LNOTAB: /* (address delta, signed line delta) pairs */
        for (;;) {
            int a = next_byte(&r), d = next_byte(&r);
            if (a < 0 || d < 0) return r.bad ? -1 : line;
            if ((start += a) > addr) return line;
            line += (signed char)d;
        }
    case LINES_310: /* (length, signed line delta; -128: no line) pairs */
        for (;;) {
            int len = next_byte(&r), d = next_byte(&r);
            if (len < 0 || d < 0) return -1;
            int here = -1;
            if (d != 0x80) here = line += (signed char)d;
            if (addr < (start += len)) return here;
        }
    case LINES_LOCATIONS: { /* entries: a start byte (bit 7: kind, length), then varints */
        int b = next_byte(&r);
        for (;;) {
            if (b < 0 || !(b & 0x80)) return -1;
            int code = (b >> 3) & 15, len = ((b & 7) + 1) * 2, delta = 0;
            b = next_byte(&r);
            if (code == 13 || code == 14) { /* the line delta: a signed varint */
                unsigned v = 0, shift = 0;
                for (;;) {
                    if (b < 0 || shift > 30) return -1;
                    v |= (unsigned)(b & 63) << shift;
                    shift += 6;
                    int more = b & 64;
                    b = next_byte(&r);
                    if (!more) break;
                }
                delta = (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
            } else if (code >= 10 && code <= 12) {
                delta = code - 10;
            }
            line += delta;
            if (addr < (start += len)) return code == 15 ? -1 : line;
            while (b >= 0 && !(b & 0x80))
                b = next_byte(&r);
        }
    }
    }
    return -1;
}

/* ---- the caches (under ng_lock) ------------------------------------------------------------- */

/* What identifies the code object at an address (a code object freed and another made there
 * differs in one of these): its name's, file's and line table's addresses, the name's hash and
 * length, the table's size, the first line. */
typedef struct ng_ident {
    uintptr_t name, file, table;
    int64_t name_hash, name_len, table_size;
    int32_t first;
} ng_ident;

typedef struct ng_code {
    uintptr_t code; /* 0: empty */
    ng_ident id;
    int32_t firsttraceable;
    uint32_t function, file_id; /* recorder strings */
} ng_code;

#define CODE_SLOTS 8192u /* direct mapped: a collision costs reading two strings again */
#define LINE_SLOTS 16384u
static ng_code code_cache[CODE_SLOTS];
static struct ng_line {
    uintptr_t code, table;
    int64_t addr;
    int line;
} line_cache[LINE_SLOTS];
static gm_spin ng_lock;
static __thread int ng_busy __attribute__((tls_model("initial-exec")));
static atomic_int ng_state; /* 0: not yet compared with the C API, 1: agreed, -1: disagreed (off) */
int gm_python_nogil_ok;     /* ng_state 1 with a layout (gm_internal.h): python.c's one test */

/* ---- code objects freed ----------------------------------------------------------------------
 * A code object can be replaced at its address (freed, another made there) only once it has been
 * freed, and every code object is freed through PyCode_Type's tp_dealloc: the type's slot is
 * wrapped (code_frees_count, at init) to count them. A memoized chain checked when the count was
 * c holds while the count is still c: each of its code objects, running in one of the thread's
 * frames now, is the one that was checked then, so its identity checks are skipped (memo_find).
 * The count is read by a thread running a chain whose code objects another thread made: that
 * thread handed them over through the GIL, and the count's update with them. */
#define TP_NAME 24    /* PyTypeObject.tp_name (after PyObject_VAR_HEAD) */
#define TP_DEALLOC 48 /* PyTypeObject.tp_dealloc (after tp_basicsize, tp_itemsize) */
static _Atomic uint64_t code_frees; /* code objects freed since the wrapper went in */
static int code_frees_counted;      /* 1: the wrapper is in; 0: every memo hit checks */
static void (*code_dealloc_real)(void *);

static void code_dealloc_counted(void *code)
{
    atomic_fetch_add_explicit(&code_frees, 1, memory_order_relaxed);
    code_dealloc_real(code);
}

/* Puts code_dealloc_counted in PyCode_Type's tp_dealloc when the type is the one expected (its
 * tp_name "code") and the slot is writable; code_frees_counted says whether it did. An aligned
 * pointer's store: a thread freeing a code object meanwhile calls the old function or the new. */
NOSAN static void code_frees_count(void)
{
    uintptr_t type = ng.code_type, name = 0;
    void *dealloc = NULL;
    char text[5] = {0};
    if (safe_copy(&name, type + TP_NAME, sizeof name) != 0 || safe_copy(text, name, 5) != 0 ||
        memcmp(text, "code", 5) != 0 || safe_copy(&dealloc, type + TP_DEALLOC, sizeof dealloc) != 0 ||
        !dealloc)
        return;
    if (dealloc != (void *)code_dealloc_counted) {
        /* writable: the kernel writes the value already there, or fails (never a fault) */
        struct iovec local = {&dealloc, sizeof dealloc}, remote = {(void *)(type + TP_DEALLOC), sizeof dealloc};
        if (process_vm_writev(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof dealloc) return;
        *(void **)&code_dealloc_real = dealloc;
        __atomic_store_n((void **)(type + TP_DEALLOC), (void *)code_dealloc_counted, __ATOMIC_RELEASE);
    }
    code_frees_counted = 1;
}

static inline uint32_t addr_hash(uintptr_t p)
{
    return (uint32_t)(((uint64_t)p * 0x9E3779B97F4A7C15ull) >> 32);
}

/* 1 when the code object at code, one seen before (its pages known readable, pages are never
 * forgotten: above), is a code object with identity id. Each field is read only once the one
 * before matched, so the name and table read through are id's, known readable. */
static inline __attribute__((always_inline)) int ident_matches(uintptr_t code, const ng_ident *id)
{
    const py_layout *l = ng.l;
    return ld_ptr(code + OB_TYPE) == ng.code_type && ld_ptr(code + (uintptr_t)l->co_name) == id->name &&
           ld_ptr(code + (uintptr_t)l->co_filename) == id->file &&
           ld_ptr(code + (uintptr_t)l->co_lines) == id->table &&
           ld_i32(code + (uintptr_t)l->co_firstlineno) == id->first &&
           ld_i64(id->name + STR_HASH) == id->name_hash && ld_i64(id->name + STR_LENGTH) == id->name_len &&
           ld_i64(id->table + BYTES_SIZE) == id->table_size;
}

/* Reads the code object at code: its identity, first traceable instruction (3.11+, else 0), name
 * and file (fn: 256 bytes, path: 1024); 0, or -1 when it is not a readable code object. was: the
 * cache's entry that held this address (its pages and its name's and table's known readable),
 * or NULL. Touches no cache and interns nothing (the check reads through it too). */
static int code_read(uintptr_t code, const ng_code *was, ng_ident *id, int32_t *firsttraceable,
                     char *fn, char *path)
{
    const py_layout *l = ng.l;
    if (!aligned(code) || (!was && !readable(code, (size_t)l->co_size)) ||
        ld_ptr(code + OB_TYPE) != ng.code_type)
        return -1;
    *id = (ng_ident){.name = ld_ptr(code + (uintptr_t)l->co_name),
                     .file = ld_ptr(code + (uintptr_t)l->co_filename),
                     .table = ld_ptr(code + (uintptr_t)l->co_lines),
                     .first = ld_i32(code + (uintptr_t)l->co_firstlineno)};
    if (!aligned(id->name) || !aligned(id->file) || !aligned(id->table) ||
        ((!was || id->name != was->id.name) && !readable(id->name, 32)) ||
        ((!was || id->table != was->id.table) && !readable(id->table, 24)))
        return -1;
    id->name_hash = ld_i64(id->name + STR_HASH), id->name_len = ld_i64(id->name + STR_LENGTH);
    id->table_size = ld_i64(id->table + BYTES_SIZE);
    if (id->table_size < 0 || read_str(id->name, fn, 256) != 0 || read_str(id->file, path, 1024) != 0)
        return -1;
    *firsttraceable = l->co_firsttraceable >= 0 ? ld_i32(code + (uintptr_t)l->co_firsttraceable) : 0;
    return 0;
}

/* The entry of the code object at code (type and identity checked), filled on first sight;
 * NULL when it is not a readable code object. */
static const ng_code *code_entry(uintptr_t code)
{
    ng_code *e = &code_cache[addr_hash(code) & (CODE_SLOTS - 1)];
    /* An address cached was seen readable, with its name and line table, and pages are never
     * forgotten (above): for those, the readable() probes are skipped, not the identity check. */
    int seen = e->code == code;
    if (seen && ident_matches(code, &e->id)) return e;
    ng_ident id;
    int32_t firsttraceable;
    char fn[256], path[1024];
    if (code_read(code, seen ? e : NULL, &id, &firsttraceable, fn, path) != 0) return NULL;
    e->code = code;
    e->id = id;
    e->firsttraceable = firsttraceable;
    e->function = rec_string(fn);
    e->file_id = rec_string(path);
    return e;
}

static int line_of(const ng_code *e, int64_t addr)
{
    struct ng_line *c =
        &line_cache[(addr_hash(e->code) ^ (uint32_t)addr * 0x9E3779B1u) & (LINE_SLOTS - 1)];
    if (c->code != e->code || c->table != e->id.table || c->addr != addr) {
        c->code = e->code, c->table = e->id.table, c->addr = addr;
        c->line = table_line(e->id.table, e->id.table_size, e->id.first, addr);
    }
    return c->line;
}

/* A chain key's instruction word split: the owner (3.11+, its top byte; else 0) and the raw
 * instruction. */
static inline uintptr_t key_instr(uintptr_t key, int *owner)
{
    if (ng.l->fr_owner < 0) {
        *owner = 0;
        return key;
    }
    *owner = (int)(key >> 56);
    return key & (((uintptr_t)1 << 56) - 1);
}

/* The byte offset of the instruction the frame of code at raw runs (< 0: not started) into
 * *addr; -1 for an incomplete frame (still copying its arguments in), which the C API leaves out
 * too. */
static int frame_addr(uintptr_t code, uintptr_t raw, int owner, int32_t firsttraceable, int64_t *addr)
{
    const py_layout *l = ng.l;
    if (l->fr_owner < 0) {
        int32_t lasti = (int32_t)(uint32_t)raw;
        *addr = lasti < 0 ? -1 : l->lines == LINES_310 ? (int64_t)lasti * 2 : lasti;
        return 0;
    }
    uintptr_t base = code + (uintptr_t)l->co_code;
    if (owner != OWNED_BY_GENERATOR && raw < base + (uintptr_t)firsttraceable * 2) return -1;
    *addr = raw < base ? -1 : (int64_t)((raw - base) & ~(uintptr_t)1);
    return 0;
}

/* What a frame gives, by (code object, raw instruction, owner): the frame kept as out, or left
 * out (an incomplete frame). A hit still checks the code object's type and identity with
 * code_entry's own check (ident_matches; the code object is alive, since a frame runs it), so a
 * code object freed and another made at its address is not mistaken for it; it skips
 * code_entry's and line_of's lookups. Most of an allocation's frames are its callers',
 * suspended where they were for the previous allocation: this is most of a stack's frames. */
typedef struct ng_frame {
    uintptr_t code, instr; /* key (code 0: empty); instr: 3.11+ the instruction pointer,
                            * 3.9/3.10 f_lasti */
    ng_ident id;           /* the code object's identity when cached (its ng_code's) */
    uint8_t owner, skip;
    rec_pyframe out;
} ng_frame;

#define FRAME_SLOTS 4096u
static ng_frame frame_cache[FRAME_SLOTS];

static inline ng_frame *frame_slot(uintptr_t code, uintptr_t instr)
{
    return &frame_cache[addr_hash(code + instr * 0x9E3779B1u) & (FRAME_SLOTS - 1)];
}

static const ng_frame *frame_hit(uintptr_t code, uintptr_t instr, int owner)
{
    const ng_frame *c = frame_slot(code, instr);
    return c->code && c->code == code && c->instr == instr && c->owner == (uint8_t)owner &&
                   ident_matches(code, &c->id)
               ? c
               : NULL;
}

static void frame_put(uintptr_t code, uintptr_t instr, int owner, const ng_code *e, int skip,
                      const rec_pyframe *out)
{
    ng_frame *c = frame_slot(code, instr);
    *c = (ng_frame){.code = code, .instr = instr, .id = e->id, .owner = (uint8_t)owner, .skip = (uint8_t)skip};
    if (out) c->out = *out;
}

/* ---- the walk ------------------------------------------------------------------------------- */

/* The calling thread's innermost frame; 0 when it runs none (autograd's device threads between
 * their Python hooks) or has no thread state. Reads the thread's own state only: no cache. */
/* This thread's last thread state and C frame seen readable (pages are never forgotten); 1, never
 * an aligned address, at first, so that a null one is always checked. */
static __thread uintptr_t ng_ts_read __attribute__((tls_model("initial-exec"))) = 1;
static __thread uintptr_t ng_cf_read __attribute__((tls_model("initial-exec"))) = 1;
static uintptr_t top_frame(void)
{
    const py_layout *l = ng.l;
    uintptr_t ts = (uintptr_t)ng.this_tstate();
    if (ts != ng_ts_read) {
        if (!ts || !aligned(ts) || !readable(ts + (uintptr_t)l->ts_frame, 8)) return 0;
        ng_ts_read = ts;
    }
    uintptr_t f = ld_ptr(ts + (uintptr_t)l->ts_frame);
    if (l->cf_frame >= 0) { /* 3.11/3.12: through the C frame of the running eval loop */
        if (f != ng_cf_read) {
            if (!f || !aligned(f) || !readable(f + (uintptr_t)l->cf_frame, 8)) return 0;
            ng_cf_read = f;
        }
        f = ld_ptr(f + (uintptr_t)l->cf_frame);
    }
    return f;
}

/* The chain from f outwards, as keys: per frame visited (an entry shim left out) the code
 * object's address and the raw instruction with the owner in its top byte (3.11+ an address
 * below 2^47, 3.9/3.10 f_lasti as 32 bits); the keys' count, and in *hash the chain's hash
 * (the chain memo's key, folded in as the keys are read). Reads the thread's own frames only: no
 * cache, no lock. Stops at a frame unaligned, unreadable or not one, or after MAX_VISITED frames
 * visited (shims included). objects: the layout's frames are PyFrameObjects (3.9/3.10), a
 * constant where it is inlined.
 *
 * This loop runs for every frame of every stack (~13 a stack of a tiny GPT-2 step), so a frame
 * costs one test of where it lies: frames sit side by side in the thread's data stack, and the
 * pages last seen readable (readable()) are a window [win_lo, win_lo + 8 * win_n) of aligned
 * frame addresses. (f - win_lo) rotated right by 3 is below win_n exactly when f is in it and
 * aligned (win_lo is a page's start); a null, unaligned or unseen f takes the slow path, which
 * checks it as before and moves the window. win_n 0 at first: no f is in it. */
static inline __attribute__((always_inline)) int collect_as(uintptr_t f, uintptr_t *key, uint64_t *hash,
                                                            const int objects)
{
    const py_layout *l = ng.l;
    const uintptr_t fr_size = (uintptr_t)l->fr_size, fr_back = (uintptr_t)l->fr_back,
                    fr_code = (uintptr_t)l->fr_code, fr_instr = (uintptr_t)l->fr_instr,
                    fr_owner = (uintptr_t)l->fr_owner;
    uint64_t h = 0x9E3779B97F4A7C15ull;
    /* p: the next key; end: key + 2 * (MAX_VISITED - shims left out), so that the frames kept
     * plus the shims are the frames visited */
    uintptr_t *p = key, *end = key + 2 * MAX_VISITED;
    uintptr_t win_lo = 0, win_n = 0;
    while (p < end) {
        uintptr_t d = f - win_lo;
        if (((d >> 3) | (d << 61)) >= win_n) { /* outside the window, or unaligned, or null */
            if (!f || !aligned(f) || !readable(f, (size_t)fr_size)) break;
            win_lo = f & ~(uintptr_t)4095;
            /* the last aligned frame start whose fr_size bytes end in the pages seen */
            win_n = ((((f + fr_size - 1) & ~(uintptr_t)4095) + 4096 - fr_size - win_lo) >> 3) + 1;
        }
        uintptr_t back = ld_ptr(f + fr_back), code = ld_ptr(f + fr_code), raw;
        /* stored ahead of the tests (a frame left out or the end leaves it past the keys kept):
         * the two keys' stores then stay two plain stores */
        p[0] = code;
        if (objects) { /* a PyFrameObject */
            if (ld_ptr(f + OB_TYPE) != ng.frame_type) break;
            raw = (uintptr_t)(uint32_t)ld_i32(f + fr_instr);
        } else {
            uintptr_t owner = ld_u8(f + fr_owner);
            if (__builtin_expect(owner >= OWNED_BY_CSTACK, 0)) {
                if (owner > OWNED_BY_CSTACK) break;
                /* an entry shim (3.12+): as the C API, leave it out */
                end -= 2;
                f = back;
                continue;
            }
            raw = ld_ptr(f + fr_instr) | owner << 56;
        }
        p[1] = raw;
        p += 2;
        /* one multiplication a frame: the next frame's mixes this frame's instruction in */
        h = ((h ^ code) * 0xff51afd7ed558ccdull) ^ raw;
        f = back;
    }
    int k = (int)(p - key);
    h ^= (uint64_t)(k / 2);
    h ^= h >> 29;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 32;
    *hash = h ? h : 1;
    return k / 2;
}

static int collect(uintptr_t f, uintptr_t *key, uint64_t *hash)
{
    return ng.l->fr_owner < 0 ? collect_as(f, key, hash, 1) : collect_as(f, key, hash, 0);
}

/* ---- the chain memo (under ng_lock) ----------------------------------------------------------
 * A training step allocates from the same few dozen Python stacks step after step: a stack is
 * kept whole, keyed on its chain (collect's keys). A chain seen before gives its frames after
 * one comparison of the keys and, when a code object was freed since the chain was last checked
 * (code_frees), the identity check of each frame's code object against the identity it had
 * (ident_matches, frame_hit's check: a code object freed and another made at its address is not
 * taken for the old one, exec in a loop); the per-frame probes, line
 * lookups and copies are skipped. Sets of two ways, chosen by the chain's hash: a chain is looked
 * for in both; a new one goes into the first way, the first way's chain moves to the second, and
 * the second's is dropped. (Direct mapped, two chains a step whose hashes met in one slot put
 * each other out every step, and each was walked again: which ones meet depends on where the
 * interpreter's code objects lie, 2 walks a tiny GPT-2 step in one build of libgpumem, none in the
 * one before.) A slot is allocated at its first chain (a few KiB). */
#define MEMO_SETS 512u
#define MEMO_MAX 64 /* frames visited a kept chain may have */
typedef struct ng_memo {
    uint64_t hash;    /* 0: empty */
    uint64_t tag;     /* this chain's, never given to another (memo_tag) */
    uint64_t checked; /* code_frees when its identities were last checked */
    int nraw, nout;
    uintptr_t key[2 * MEMO_MAX];
    ng_ident id[MEMO_MAX];
    rec_pyframe out[MEMO_MAX];
} ng_memo;
static ng_memo *memo[MEMO_SETS][2];
static uint64_t memo_tag; /* the last tag given; not reset by a fork (a tag is never reused) */

/* The frames of the chain key[0..nraw) (hash h), out of the memo; -1 when it is not there or a
 * code object in it is not the one it was (*tag: the chain's tag). */
static int memo_find(const uintptr_t *key, int nraw, uint64_t h, rec_pyframe *out, int max,
                     uint64_t *tag, uint64_t frees, ng_memo **found)
{
    ng_memo *const *set = memo[h & (MEMO_SETS - 1)];
    ng_memo *m = set[0];
    if (!m || m->hash != h) m = set[1];
    if (!m || m->hash != h || m->nraw != nraw || m->nout > max ||
        memcmp(m->key, key, (size_t)nraw * 2 * sizeof *key) != 0)
        return -1;
    if (!code_frees_counted || m->checked != frees) { /* a code object freed since: check all */
        for (int i = 0; i < nraw; i++)
            if (!ident_matches(key[2 * i], &m->id[i])) return -1;
        m->checked = frees;
    }
    memcpy(out, m->out, (size_t)m->nout * sizeof *out);
    *tag = m->tag;
    *found = m;
    return m->nout;
}

/* Keeps the chain whose every frame walk() resolved (id: each one's code object's identity) and
 * its frames out[0..nout); nothing when there is no memory for its slot. */
static ng_memo *memo_put(const uintptr_t *key, int nraw, uint64_t h, const ng_ident *id,
                         const rec_pyframe *out, int nout, uint64_t *tag, uint64_t frees)
{
    ng_memo **set = memo[h & (MEMO_SETS - 1)], *m;
    if (set[0] && set[0]->hash == h) /* the same chain, its identities changed: kept in place */
        m = set[0];
    else if (set[1] && set[1]->hash == h)
        m = set[1];
    else {
        m = set[1]; /* the second way's chain is dropped */
        if (!m && !(m = malloc(sizeof *m))) return NULL;
        set[1] = set[0];
        set[0] = m;
    }
    m->hash = h, m->tag = *tag = ++memo_tag, m->nraw = nraw, m->nout = nout, m->checked = frees;
    memcpy(m->key, key, (size_t)nraw * 2 * sizeof *key);
    memcpy(m->id, id, (size_t)nraw * sizeof *id);
    memcpy(m->out, out, (size_t)nout * sizeof *out);
    return m;
}

/* ---- a chain seen again, checked as it is read -----------------------------------------------
 * Most stacks of a step are a chain kept in the memo, read again: collect's keys, their hash and
 * the memo's comparison of them cost ~30 instructions a frame (~13 frames a stack, 78 stacks a
 * tiny GPT-2 step on its main thread). memo_top names, by the keys of its TOP_KEYS innermost
 * frames, the two chains last found or kept that begin so (fewer are shared by every caller of a
 * helper: nn.Linear.forward's line under Module._call_impl's and _wrapped_call_impl's, from five
 * callers in a tiny GPT-2, put each other out at every call); memo_again walks the thread's frames comparing each one's key with such a
 * chain's as it reads it, nothing stored, no hash. It answers what collect and memo_find would (the same keys in the same order,
 * shims left out as collect leaves them, the walk ending where collect's ends), or -1: then they
 * are asked, as before. A slot names a memo that may have been given to another chain since
 * (memo_put reuses the second way): the comparison is all that is trusted.
 *
 * The frames are read without collect's test of their pages: only once the tabulated layout has
 * agreed with the C API's reading (gm_python_nogil_ok), when every frame reached from the thread
 * state is one its thread runs (the invariant at the top), whose pages collect's own test answers
 * from its table of pages seen (never forgotten) for the same reason. 3.11+ frames only (3.9/3.10
 * PyFrameObjects take collect's path). */
#define TOP_SLOTS 512u
static ng_memo *memo_top[TOP_SLOTS][2];

#define TOP_KEYS 4
/* by the TOP_KEYS innermost frames' keys (k: 2 * TOP_KEYS words, 0 past the chain's end) */
static inline ng_memo **top_slot(const uintptr_t *k)
{
    uint64_t h = 0;
    for (int i = 0; i < 2 * TOP_KEYS; i += 2)
        h = (h ^ (k[i] + k[i + 1] * 0x9E3779B1u)) * 0xff51afd7ed558ccdull;
    return memo_top[addr_hash((uintptr_t)(h ^ h >> 32)) & (TOP_SLOTS - 1)];
}

/* m, a chain of nraw frames (key: its keys) found or kept, named first for its innermost */
static void top_note(const uintptr_t *key, int nraw, ng_memo *m)
{
    uintptr_t k[2 * TOP_KEYS] = {0};
    memcpy(k, key, (size_t)(nraw < TOP_KEYS ? nraw : TOP_KEYS) * 2 * sizeof *k);
    ng_memo **w = top_slot(k);
    if (w[0] != m) w[1] = w[0], w[0] = m;
}

/* Whether the chain from f (innermost frame: owner, code, raw, not a shim) is m's: its keys, and
 * its end where collect's would be. */
static int chain_is(const ng_memo *m, uintptr_t f, uintptr_t owner, uintptr_t code, uintptr_t raw)
{
    const py_layout *l = ng.l;
    const uintptr_t fr_back = (uintptr_t)l->fr_back, fr_code = (uintptr_t)l->fr_code,
                    fr_instr = (uintptr_t)l->fr_instr, fr_owner = (uintptr_t)l->fr_owner;
    const uintptr_t *k = m->key, *kend = m->key + 2 * m->nraw;
    int shims = 0; /* collect stops after MAX_VISITED frames, shims included; nraw <= MEMO_MAX */
    for (;;) {
        uintptr_t back = ld_ptr(f + fr_back);
        /* a key's top byte is its frame's owner, below OWNED_BY_CSTACK: a shim's, or a frame past
         * it (collect's end), is never one */
        if (__builtin_expect(code != k[0] || raw != k[1], 0)) {
            if (owner != OWNED_BY_CSTACK || ++shims + MEMO_MAX >= MAX_VISITED) return 0;
        } else if ((k += 2) == kend) {
            f = back;
            break;
        }
        if (!(f = back)) return 0; /* a shorter chain */
        owner = ld_u8(f + fr_owner);
        code = ld_ptr(f + fr_code), raw = ld_ptr(f + fr_instr) | owner << 56;
    }
    /* collect goes on past the last frame kept: shims, then the end (no frame, or one that is
     * none: owner past OWNED_BY_CSTACK) */
    for (; f; f = ld_ptr(f + fr_back)) {
        owner = ld_u8(f + fr_owner);
        if (owner > OWNED_BY_CSTACK) break;
        if (owner != OWNED_BY_CSTACK || ++shims + MEMO_MAX >= MAX_VISITED) return 0;
    }
    return 1;
}

/* The frames of the chain from f, when it is one of the chains memo_top names for its innermost
 * frames (see above); -1 otherwise. Under ng_lock. */
static int memo_again(uintptr_t f, rec_pyframe *out, int max, uint64_t *tag)
{
    const py_layout *l = ng.l;
    const uintptr_t fr_back = (uintptr_t)l->fr_back, fr_code = (uintptr_t)l->fr_code,
                    fr_instr = (uintptr_t)l->fr_instr, fr_owner = (uintptr_t)l->fr_owner;
    uintptr_t owner = ld_u8(f + fr_owner);
    if (owner >= OWNED_BY_CSTACK) return -1; /* a shim innermost: collect's path */
    uintptr_t code = ld_ptr(f + fr_code), raw = ld_ptr(f + fr_instr) | owner << 56;
    uintptr_t k[2 * TOP_KEYS] = {code, raw}; /* and the next frames kept, as collect keeps them */
    int shims = 0, i = 2;
    for (uintptr_t g = ld_ptr(f + fr_back); g && i < 2 * TOP_KEYS; g = ld_ptr(g + fr_back)) {
        uintptr_t o = ld_u8(g + fr_owner);
        if (o == OWNED_BY_CSTACK) {
            if (++shims + MEMO_MAX >= MAX_VISITED) return -1;
            continue;
        }
        if (o > OWNED_BY_CSTACK) break;
        k[i] = ld_ptr(g + fr_code), k[i + 1] = ld_ptr(g + fr_instr) | o << 56;
        i += 2;
    }
    ng_memo *const *w = top_slot(k), *m = w[0];
    if (!m || !m->hash || m->nout > max || !chain_is(m, f, owner, code, raw)) {
        m = w[1];
        if (!m || !m->hash || m->nout > max || !chain_is(m, f, owner, code, raw)) return -1;
    }
    uint64_t frees = atomic_load_explicit(&code_frees, memory_order_relaxed);
    if (!code_frees_counted || m->checked != frees) { /* as memo_find */
        for (int j = 0; j < m->nraw; j++)
            if (!ident_matches(m->key[2 * j], &m->id[j])) return -1;
        m->checked = frees;
    }
    memcpy(out, m->out, (size_t)m->nout * sizeof *out);
    *tag = m->tag;
    return m->nout;
}

/* The frames of the chain key[0..nraw) (collect's, its hash chain), at most max. Under ng_lock.
 * *tag: nonzero when the frames are a memoized chain's (the same tag, the same frames), else 0. */
static int walk(const uintptr_t *key, int nraw, uint64_t chain, rec_pyframe *out, int max, uint64_t *tag)
{
    *tag = 0;
    /* read before any identity below: a code object freed after it makes the next hit check */
    uint64_t frees = atomic_load_explicit(&code_frees, memory_order_relaxed);
    uint64_t h = nraw <= MEMO_MAX ? chain : 0;
    ng_memo *found = NULL;
    if (h) {
        int n = memo_find(key, nraw, h, out, max, tag, frees, &found);
        if (n >= 0) {
            top_note(key, nraw, found);
            return n;
        }
    }
    ng_ident id[MEMO_MAX];
    int n = 0, i = 0, whole = h != 0; /* whole: every frame's code object known, so far */
    for (; i < nraw && n < max; i++) {
        int owner;
        uintptr_t code = key[2 * i], raw = key_instr(key[2 * i + 1], &owner);
        const ng_frame *hit = frame_hit(code, raw, owner);
        if (hit) {
            if (whole) id[i] = hit->id;
            if (!hit->skip) out[n++] = hit->out;
            continue;
        }
        const ng_code *e = code_entry(code);
        if (!e) { /* unreadable: as the C API, leave it out */
            whole = 0;
            continue;
        }
        if (whole) id[i] = e->id;
        int64_t addr; /* byte offset of the instruction running, < 0: not started */
        if (frame_addr(code, raw, owner, e->firsttraceable, &addr) != 0) {
            frame_put(code, raw, owner, e, 1, NULL);
            continue;
        }
        int line = line_of(e, addr);
        out[n].function = e->function;
        out[n].file = e->file_id;
        out[n].line = line > 0 ? (uint32_t)line : 0;
        frame_put(code, raw, owner, e, 0, &out[n]);
        n++;
    }
    if (whole && i == nraw && (found = memo_put(key, nraw, h, id, out, n, tag, frees)))
        top_note(key, nraw, found);
    return n;
}

/* ---- the entry points (python.c) ------------------------------------------------------------ */

/* The frames from f, the thread's innermost (gm_python_nogil_frames' work once there is one):
 * out of line, so that a thread running no Python frame (autograd's device threads, 67 stacks
 * asked for a tiny GPT-2 step) does not set up the keys' 4 KiB and the registers the walk
 * keeps. Entered by a jump (tag NULL is taken here, not in the caller's frame): its frame lies
 * where gm_python_nogil_frames' own did, and so do the words it leaves on the thread's stack,
 * which PyTorch's partly filled kernel argument structs pick up (called instead, a tiny GPT-2
 * recording's seqs moved by 2: a launch's word records; tests/bench/README.md, "Tenth pass").
 * A chain kept before is answered by memo_again, which neither collects keys nor calls collect:
 * the keys' words no longer overwrite what lay below, and a foreach launch of each optimizer step
 * carries one or two more of PyTorch's stale words (its seq and the later ones move; the uses
 * are the same; "Thirteenth pass"). */
static __attribute__((noinline)) int frames_from(uintptr_t f, struct rec_pyframe *out, int max, uint64_t *tag)
{
    uint64_t none;
    if (!tag) tag = &none;
    uintptr_t key[2 * MAX_VISITED];
    uint64_t chain;
    int n = -1;
    ng_busy = 1;
    if (gm_python_nogil_ok && ng.l->fr_owner >= 0) { /* memo_again's conditions */
        gm_spin_lock(&ng_lock);
        n = memo_again(f, out, max, tag);
        gm_spin_unlock(&ng_lock);
        if (n >= 0) gm_stat_add(GM_ST_PY_AGAIN, 1);
    }
    if (n < 0) {
        int nraw = collect(f, key, &chain);
        n = 0;
        if (nraw) {
            gm_spin_lock(&ng_lock);
            n = walk(key, nraw, chain, out, max, tag);
            gm_spin_unlock(&ng_lock);
        }
    }
    ng_busy = 0;
    return n;
}

int gm_python_nogil_frames(struct rec_pyframe *out, int max, uint64_t *tag)
{
    if (tag) *tag = 0;
    if (ng_state < 0 || !ng.l || ng_busy || (ng.is_finalizing && ng.is_finalizing())) return 0;
    uintptr_t f = top_frame();
    if (!f) return 0; /* nothing to read: the caches' lock is not taken */
    return frames_from(f, out, max, tag);
}

/* 1 once the tabulated layout has agreed with the C API's reading (gm_python_nogil_check). */
int gm_python_nogil_agreed(void)
{
    return gm_python_nogil_ok;
}

/* 1 once it has disagreed: turned off for good. */
int gm_python_nogil_refused(void)
{
    return ng_state < 0;
}

/* 1 while the check is still to be made. */
int gm_python_nogil_pending(void)
{
    return ng_state == 0 && ng.l;
}

/* 1 when the calling thread's frames, read here, are ref[0..n): the same code objects, names,
 * files and lines, frames left out as walk() leaves them out. Reads through code_read, no cache:
 * nothing is interned for a stack that may never be recorded. */
static int frames_match(const gm_pyref *ref, int n)
{
    uintptr_t f = top_frame();
    if (!f) return 0;
    uintptr_t key[2 * MAX_VISITED];
    uint64_t chain;
    int nraw = collect(f, key, &chain), m = 0;
    for (int i = 0; i < nraw && m < n; i++) {
        int owner;
        uintptr_t code = key[2 * i], raw = key_instr(key[2 * i + 1], &owner);
        ng_ident id;
        int32_t firsttraceable;
        int64_t addr;
        char fn[256], path[1024];
        if (code_read(code, NULL, &id, &firsttraceable, fn, path) != 0 ||
            frame_addr(code, raw, owner, firsttraceable, &addr) != 0)
            continue;
        int line = table_line(id.table, id.table_size, id.first, addr);
        const gm_pyref *r = &ref[m++];
        if (r->code != code || strcmp(r->function, fn) != 0 || strcmp(r->file, path) != 0 ||
            r->line != (line > 0 ? (uint32_t)line : 0))
            return 0;
    }
    return m == n;
}

/* The first stack read with the GIL held, through the C API, is read again here and must come
 * out the same: the tabulated layout is then the interpreter's. Called with the GIL held. */
void gm_python_nogil_check(const gm_pyref *ref, int n)
{
    if (ng_state != 0 || !ng.l || n <= 0) return;
    if (frames_match(ref, n)) {
        ng_state = 1;
        gm_python_nogil_ok = 1; /* ng.l set: checked above */
        return;
    }
    ng_state = -1;
    gm_warn("Python 3.%d: its frames are not laid out as gpumem expects; threads that released "
            "the GIL get native frames only",
            ng.l->minor);
}

static void ng_fork_child(void)
{
    atomic_store(&ng_lock, 0);
    memset(code_cache, 0, sizeof code_cache); /* recorder string ids start again */
    memset(frame_cache, 0, sizeof frame_cache);
    for (unsigned i = 0; i < MEMO_SETS; i++)
        for (int w = 0; w < 2; w++)
            if (memo[i][w]) memo[i][w]->hash = 0;
    memset(memo_top, 0, sizeof memo_top);
}

#define NG_SYM(name) gm_real_dlsym_fn(RTLD_DEFAULT, name)

int gm_python_nogil_init(int minor)
{
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++)
        if (layouts[i].minor == minor) ng.l = &layouts[i];
    if (!ng.l || sizeof(void *) != 8) return 0;
    /* Test hook (python_frames.sh): a layout off by N bytes everywhere, as a patch release that
     * moved the fields would be. The walk must survive it and the check must catch it. */
    static py_layout skewed;
    const char *skew = getenv("GPUMEM_DEBUG_PY_SKEW");
    if (skew && atoi(skew) != 0) {
        int d = atoi(skew);
        skewed = *ng.l;
        skewed.ts_frame += d, skewed.fr_back += d, skewed.fr_code += d, skewed.fr_instr += d;
        skewed.co_filename += d, skewed.co_name += d, skewed.co_lines += d;
        skewed.co_firstlineno += d, skewed.fr_size += d, skewed.co_size += d;
        ng.l = &skewed;
    }
    ng.code_type = (uintptr_t)NG_SYM("PyCode_Type");
    ng.frame_type = (uintptr_t)NG_SYM("PyFrame_Type");
    *(void **)&ng.this_tstate = NG_SYM("PyGILState_GetThisThreadState");
    *(void **)&ng.is_finalizing = NG_SYM(minor >= 13 ? "Py_IsFinalizing" : "_Py_IsFinalizing");
    int probe = 1, copy = 0;
    if (!ng.code_type || !ng.frame_type || !ng.this_tstate) {
        ng.l = NULL;
        return 0;
    }
    if (safe_copy(&copy, (uintptr_t)&probe, sizeof probe) != 0 || copy != 1) {
        gm_warn("process_vm_readv on this process failed: threads that released the GIL get "
                "native frames only");
        ng.l = NULL;
        return 0;
    }
    code_frees_count();
    pthread_atfork(NULL, NULL, ng_fork_child);
    return 1;
}
#endif
