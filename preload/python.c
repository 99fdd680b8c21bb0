/*
 * python.c — Python frames in recorded stacks, and the user API the `gpumem` Python module
 * calls (gpumem_range_push / gpumem_range_pop / gpumem_range_replace).
 *
 * Most people who run out of GPU memory write Python, and under PyTorch every allocation's
 * native stack ends in the framework's C++: the user's own `model.py:42 in forward` is only on
 * the Python stack. When the process runs CPython, this file hands the recorder a provider
 * (rec_set_python) that it calls for every event with a stack.
 *
 * Finding the interpreter. Nothing links libpython: the C API is looked up at run time with
 * dlsym(RTLD_DEFAULT) (the python executable exports it, or libpython is loaded), once, on the
 * first event. No interpreter, or GPUMEM_PYTHON=0: no provider, nothing changes. A CPython
 * outside 3.9–3.13 (or a free-threaded build, which has no GIL to rely on): one line on
 * stderr and no Python frames.
 *
 * Reading the stack. Only the public, version-stable API: PyEval_GetFrame (borrowed),
 * PyFrame_GetBack / PyFrame_GetCode (new references), PyFrame_GetLineNumber, Py_DecRef. These
 * need the GIL, so they are used only when the allocating thread holds it (PyGILState_Check,
 * after Py_IsInitialized: PyGILState_Check answers 1 before the interpreter exists). A thread
 * that released the GIL around a native call (ctypes.CDLL functions, most PyTorch ops) has its
 * frames read by python_nogil.c, from the interpreter's private structures, without calling
 * Python; the first stack read here is handed to it to check that it reads the same.
 *
 * Cost. A code object's name and file are read once (PyObject_GetAttrString) and interned as
 * recorder strings at its first frame recorded (a stack read only for python_nogil.c's check
 * interns nothing: no row would refer to its strings); the cache keeps a reference to the code object, so its address can never
 * be reused for another one while it is cached. Per frame then: GetBack, GetCode, the line,
 * two DecRefs and one cache probe (BENCH rec.app_ns_python, tests/bench/python_bench.sh).
 * The cache is only touched with the GIL held, so the GIL is its lock.
 */
#include "preload/gm_internal.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot/record/rec_objrange.h" /* header only: in every build */
#ifdef GM_HAVE_REC
#include "snapshot/record/rec.h"
#endif

typedef struct _object PyObject; /* opaque: only pointers cross this file */

static struct {
    int (*Py_IsInitialized)(void);
    int (*PyGILState_Check)(void);
    const char *(*Py_GetVersion)(void);
    PyObject *(*PyEval_GetFrame)(void);
    PyObject *(*PyFrame_GetBack)(PyObject *);
    PyObject *(*PyFrame_GetCode)(PyObject *);
    int (*PyFrame_GetLineNumber)(PyObject *);
    void (*Py_IncRef)(PyObject *);
    void (*Py_DecRef)(PyObject *);
    PyObject *(*PyObject_GetAttrString)(PyObject *, const char *);
    const char *(*PyUnicode_AsUTF8)(PyObject *);
    void (*PyErr_Fetch)(PyObject **, PyObject **, PyObject **);
    void (*PyErr_Restore)(PyObject *, PyObject *, PyObject *);
    int (*PyFrame_GetLasti)(PyObject *); /* 3.11+ only (may be NULL): keys the line cache */
    int (*PyGC_Disable)(void);           /* 3.10+ (may be NULL); see python_frames */
    int (*PyGC_Enable)(void);
} py;

#ifdef GM_HAVE_REC
/* ---- the code-object cache ---------------------------------------------------------------- */

typedef struct code_ent {
    PyObject *code;          /* a reference we hold; NULL = empty slot */
    uint32_t function, file; /* recorder string ids; 0 = to intern (new, only read for the
                              * check, or after a fork) */
    char *fn_text, *file_text;
} code_ent;

/* Lines by (code object, last instruction), 3.11+: PyFrame_GetLineNumber decodes the code's
 * line table from its start on every call, the largest cost of a frame without this. Direct
 * mapped: a collision only costs a decode. Its code objects are all in the code cache, which
 * holds them, so an address here always means the same code object. */
#define LINE_CACHE_SIZE 16384u
static struct line_ent {
    PyObject *code;
    int lasti, line;
} line_cache[LINE_CACHE_SIZE];

#define CODE_CACHE_MAX (1u << 20)
static code_ent *cache;
static uint32_t cache_mask, cache_count;
static __thread int in_capture __attribute__((tls_model("initial-exec")));

static inline uint32_t code_hash(const void *p)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

static char *attr_text(PyObject *code, const char *name)
{
    PyObject *o = py.PyObject_GetAttrString(code, name);
    if (!o) return NULL;
    const char *s = py.PyUnicode_AsUTF8(o);
    char *copy = s ? strdup(s) : NULL;
    py.Py_DecRef(o);
    return copy;
}

static int cache_grow(void)
{
    uint32_t cap = cache ? (cache_mask + 1) * 2 : 4096;
    if (cap > CODE_CACHE_MAX) return -1;
    code_ent *n = calloc(cap, sizeof *n);
    if (!n) return -1;
    for (uint32_t i = 0; cache && i <= cache_mask; i++) {
        if (!cache[i].code) continue;
        uint32_t j = code_hash(cache[i].code) & (cap - 1);
        while (n[j].code)
            j = (j + 1) & (cap - 1);
        n[j] = cache[i];
    }
    free(cache);
    cache = n;
    cache_mask = cap - 1;
    return 0;
}

/* The entry of a code object, created on first sight (with the GIL held); NULL when the cache
 * is full or the attributes cannot be read. Its texts are read, not interned: code_strings does
 * that for a frame that is recorded. */
static code_ent *code_lookup(PyObject *code)
{
    uint32_t i = code_hash(code) & cache_mask;
    for (;;) {
        code_ent *e = &cache[i];
        if (e->code == code) return e;
        if (!e->code) break;
        i = (i + 1) & cache_mask;
    }
    if ((cache_count + 1) * 2 > cache_mask + 1) {
        if (cache_grow() != 0) return NULL;
        return code_lookup(code);
    }
    /* reading attributes must not disturb an exception the program has in flight */
    PyObject *et, *ev, *tb;
    py.PyErr_Fetch(&et, &ev, &tb);
    char *fn = attr_text(code, "co_name"), *file = attr_text(code, "co_filename");
    py.PyErr_Restore(et, ev, tb);
    if (!fn || !file) {
        free(fn), free(file);
        return NULL;
    }
    code_ent *e = &cache[i];
    py.Py_IncRef(code);
    e->code = code;
    e->fn_text = fn, e->file_text = file;
    cache_count++;
    return e;
}

/* The recorder's strings of a code object's frame, interned at the first frame recorded. */
static void code_strings(code_ent *e, rec_pyframe *out)
{
    if (!e->function) {
        e->function = rec_string(e->fn_text);
        e->file = rec_string(e->file_text);
    }
    out->function = e->function;
    out->file = e->file;
}

/* The calling thread's Python frames through the C API (the GIL held), innermost first, at most
 * max: into out (may be NULL), whose names are interned, and into ref (may be NULL; max <=
 * REC_MAX_PY_FRAMES), as texts; ref's are handed to python_nogil.c's check. A stack read only
 * for the check (out NULL) interns nothing: it is never recorded. */
static int python_frames_capi(rec_pyframe *out, gm_pyref *ref, int max)
{
    in_capture = 1;
    /* 3.11 creates frame objects for the frames it is asked about, and such an allocation may
     * run the garbage collector on the spot; a finalizer that frees device memory would then
     * re-enter gpumem, possibly under the allocator's lock (segment events are recorded there).
     * No collection while we walk (3.12+ only schedules it; 3.9/3.10 allocate nothing here). */
    int gc_was = py.PyGC_Disable ? py.PyGC_Disable() : 0;
    int n = 0;
    PyObject *f = py.PyEval_GetFrame(); /* borrowed */
    if (f) py.Py_IncRef(f);
    while (f && n < max) {
        PyObject *code = py.PyFrame_GetCode(f);
        code_ent *e = code ? code_lookup(code) : NULL;
        if (e) {
            int line, lasti = py.PyFrame_GetLasti ? py.PyFrame_GetLasti(f) : -1;
            if (lasti >= 0) {
                struct line_ent *le =
                    &line_cache[(code_hash(code) ^ (uint32_t)lasti * 0x9E3779B1u) &
                                (LINE_CACHE_SIZE - 1)];
                if (le->code != code || le->lasti != lasti) {
                    le->code = code;
                    le->lasti = lasti;
                    le->line = py.PyFrame_GetLineNumber(f);
                }
                line = le->line;
            } else {
                line = py.PyFrame_GetLineNumber(f);
            }
            uint32_t at = line > 0 ? (uint32_t)line : 0;
            if (out) {
                code_strings(e, &out[n]);
                out[n].line = at;
            }
            if (ref)
                ref[n] = (gm_pyref){(uintptr_t)code, e->fn_text, e->file_text, at};
            n++;
        }
        if (code) py.Py_DecRef(code);
        PyObject *back = py.PyFrame_GetBack(f);
        py.Py_DecRef(f);
        f = back;
    }
    if (f) py.Py_DecRef(f);
    if (gc_was > 0) py.PyGC_Enable();
    if (ref) gm_python_nogil_check(ref, n);
    in_capture = 0;
    return n;
}

/* The calling thread's Python frames, innermost first; *tag as gm_python_nogil_frames' (0 when
 * read through the C API). The first read with the GIL held makes python_nogil.c's check. */
static int python_frames_tagged(rec_pyframe *out, int max, uint64_t *tag)
{
    *tag = 0;
    if (in_capture || !py.Py_IsInitialized()) return 0;
    if (!py.PyGILState_Check()) return gm_python_nogil_frames(out, max, tag);
    gm_pyref ref[REC_MAX_PY_FRAMES];
    if (max > REC_MAX_PY_FRAMES) max = REC_MAX_PY_FRAMES;
    return python_frames_capi(out, gm_python_nogil_pending() ? ref : NULL, max);
}

/* The check alone (gpumem_python_check, gm_python_start): the stack is read through both
 * readers and compared, nothing recorded, nothing interned. */
static void python_check_now(void)
{
    gm_pyref ref[REC_MAX_PY_FRAMES];
    if (in_capture || !py.Py_IsInitialized() || !py.PyGILState_Check() || !gm_python_nogil_pending())
        return;
    python_frames_capi(NULL, ref, REC_MAX_PY_FRAMES);
}

/* The provider (rec.h). */
static int python_frames(rec_pyframe *out, int max)
{
    uint64_t tag;
    return python_frames_tagged(out, max, &tag);
}

static int python_on; /* the provider is registered (gm_python_start) */

/* Frames for a caller outside the recorder's events (PyTorch's trace entries, preload/
 * torch_trace.c). The private-structure reader once it has agreed with the C API: a dozen loads
 * a frame, where the C API makes (3.11+) and reference-counts a frame object for each. */
int gm_python_frames_now(rec_pyframe *out, int max, uint64_t *tag)
{
    /* agreed (only once gm_python_start registered the provider): the reader at once, one test
     * of a flag and a jump, for every stack a step asks for */
    if (__builtin_expect(gm_python_nogil_ok, 1)) return gm_python_nogil_frames(out, max, tag);
    *tag = 0;
    if (!python_on) return 0;
    return python_frames_tagged(out, max, tag);
}

/* The check python_nogil.c's reader waits for (gm_python_nogil_check), made now: the calling
 * thread's stack read through the C API when it holds the GIL, then read again by the reader.
 * gpumem/_torch.py calls it through ctypes.PyDLL (the GIL held) when it attaches the trace's
 * tracker, as PyTorch initializes CUDA: PyTorch's ops release the GIL, so a program may never
 * allocate holding it, and until the check is made every stack of gm_python_frames_now goes
 * through the C API's layers first (Py_IsInitialized, PyGILState_Check) and the reader is used
 * unchecked. gpumem starts here if no CUDA call has reached it yet (the program's first
 * allocation follows; gm_python_start then makes the check). 1 when the reader has agreed (now
 * or before), 0 when not (no GIL held, no frame, not recording), -1 when it disagreed (turned
 * off, with its one line on stderr). */
GM_EXPORT int gpumem_python_check(void)
{
    if (gm_mode() == GM_MODE_OFF || !python_on) return 0;
    python_check_now();
    return gm_python_nogil_agreed() ? 1 : gm_python_nogil_refused() ? -1 : 0;
}

/* A forked child records into its own database: its string ids start again. */
static void python_fork_child(void)
{
    for (uint32_t i = 0; cache && i <= cache_mask; i++)
        cache[i].function = cache[i].file = 0;
}

/* ---- finding the interpreter ----------------------------------------------------------------- */

/* The address range of the object that holds the interpreter loop (its native frames are what
 * the Python frames replace in a stack). */
struct range_ctx {
    uintptr_t addr, lo, hi;
};
static int range_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct range_ctx *c = arg;
    uintptr_t lo, hi;
    if (rec_object_range(info, c->addr, &lo, &hi)) {
        c->lo = lo, c->hi = hi;
        return 1;
    }
    return 0;
}

#define PY_SYM(name) (*(void **)&py.name = gm_real_dlsym_fn(RTLD_DEFAULT, #name))

/* 1 when Python frames are on; fills what rec_set_python needs. Prints at most one line. */
static int python_find(uintptr_t *lo, uintptr_t *hi)
{
    const char *env = getenv("GPUMEM_PYTHON");
    if (env && strcmp(env, "0") == 0) return 0;
    /* another value turned gpumem off before this runs (core.c, read_config) */
    PY_SYM(Py_IsInitialized);
    PY_SYM(Py_GetVersion);
    if (!py.Py_IsInitialized || !py.Py_GetVersion) return 0; /* not a Python process */
    const char *v = py.Py_GetVersion();
    int major = 0, minor = 0;
    if (!v || sscanf(v, "%d.%d", &major, &minor) != 2) major = 0;
    if (major != 3 || minor < 9 || minor > 13 || strstr(v, "free-threading")) {
        gm_warn("Python %.*s is not supported for Python frames (CPython 3.9 to 3.13 with the "
                "GIL); recording native frames only",
                v ? (int)strcspn(v, " ") : 1, v ? v : "?");
        return 0;
    }
    PY_SYM(PyGILState_Check);
    PY_SYM(PyEval_GetFrame);
    PY_SYM(PyFrame_GetBack);
    PY_SYM(PyFrame_GetCode);
    PY_SYM(PyFrame_GetLineNumber);
    PY_SYM(Py_IncRef);
    PY_SYM(Py_DecRef);
    PY_SYM(PyObject_GetAttrString);
    PY_SYM(PyUnicode_AsUTF8);
    PY_SYM(PyErr_Fetch);
    PY_SYM(PyErr_Restore);
    void **all = (void **)&py;
    for (size_t i = 0; i < offsetof(__typeof__(py), PyFrame_GetLasti) / sizeof(void *); i++)
        if (!all[i]) {
            gm_warn("Python %d.%d: a C API function gpumem needs is missing; recording native "
                    "frames only",
                    major, minor);
            return 0;
        }
    gm_python_nogil_init(minor);
    if (minor >= 11) PY_SYM(PyFrame_GetLasti);
    if (minor >= 10) {
        PY_SYM(PyGC_Disable);
        PY_SYM(PyGC_Enable);
        if (!py.PyGC_Enable) py.PyGC_Disable = NULL;
    }
    struct range_ctx c = {(uintptr_t)(void *)py.PyEval_GetFrame, 0, 0};
    dl_iterate_phdr(range_cb, &c);
    *lo = c.lo, *hi = c.hi;
    return 1;
}

/* Called once recording has started (core.c). */
void gm_python_start(void)
{
    uintptr_t lo = 0, hi = 0;
    if (!python_find(&lo, &hi) || cache_grow() != 0) return;
    pthread_atfork(NULL, NULL, python_fork_child);
    rec_set_python(python_frames, lo, hi);
    python_on = 1;
    /* python_nogil.c's layout is checked at the first stack read with the GIL held: now, when
     * this thread holds it (a program whose allocations all release it may never do so). */
    python_check_now();
}
#else
void gm_python_start(void) {}
int gm_python_frames_now(struct rec_pyframe *out, int max, uint64_t *tag)
{
    (void)out, (void)max;
    *tag = 0;
    return 0;
}
GM_EXPORT int gpumem_python_check(void)
{
    return 0;
}
#endif

/* ---- ranges for the gpumem Python module -------------------------------------------------------
 * `with gpumem.range("phase"):` and gpumem.annotate(model) push and pop through these, so no
 * NVTX library is needed from Python. They are NVTX push/pop ranges in every respect (the same
 * per-thread stack, the same `ranges` rows). */
GM_EXPORT int gpumem_range_push(const char *name)
{
    if (!name) return -1;
    return gm_nvtx_user_push(name);
}

GM_EXPORT int gpumem_range_pop(void)
{
    return gm_nvtx_user_pop();
}

/* The innermost range closed and `name` opened in its place, in one call: the PyTorch hooks keep
 * one module range open at a time (gpumem/_torch.py), and a call from Python through ctypes costs
 * more than the push and the pop themselves. With no range open it is a push. */
GM_EXPORT int gpumem_range_replace(const char *name)
{
    if (!name) return -1;
    gm_nvtx_user_pop();
    return gm_nvtx_user_push(name);
}
