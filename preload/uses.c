/*
 * uses.c — access tracking, capture side: which allocations each kernel launch, copy and
 * memset touches (GPUMEM_USES=0|1|timed).
 *
 * The hooks in driver.c and runtime.c call gm_uses_kernel / gm_uses_copy around the real call.
 * For a kernel the arguments are found from the function's parameter layout
 * (cuFuncGetParamInfo): every 8-byte-aligned word of every parameter is a candidate, so a
 * device pointer inside a by-value struct is seen as well as a plain pointer argument. The
 * recorder's writer resolves candidates exactly against the allocations live at that point of
 * the event order; this side only pre-filters, and must never drop a word that may point into a
 * live allocation. The filter is two address spans that only grow: the lowest and highest
 * address of every device allocation (and VMM map) gpumem has recorded, and the same for pinned
 * host allocations. A word outside both cannot be inside any allocation the database knows;
 * a word inside may be anything (an int, a host pointer) and the writer drops it.
 *
 * Hot path (after a function's first launch): one lock-free hash lookup keyed by the
 * CUfunction (layout + the rec_string id of its name, filled once with cuFuncGetParamInfo and
 * cuFuncGetName), a scan of the argument words against the spans, one rec_launch. No driver
 * query but cuCtxGetDevice, no lock, no allocation (unless a kernel has more than 256 candidate
 * words). The runtime path first maps the kernel's host symbol to its CUfunction with
 * cudaGetFuncBySymbol, cached the same way.
 *
 * Timed mode: two events from a recycled pool are recorded on the launch's stream around the
 * real call; the writer thread resolves them later (uses_timing_resolve), never blocking the
 * program. Device times are placed on the recorder's clock through one reference event,
 * recorded on the legacy stream and synchronized at the moment rec_time_ns() is read.
 */
#include "preload/gm_internal.h"

#ifdef GM_HAVE_REC
#include "snapshot/record/rec.h"
#endif

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* What the hooks do now: GPUMEM_USES once gpumem initialised and records, else off. */
int gm_uses_mode = GM_USES_OFF;

const char *gm_uses_name(int mode)
{
    return mode == GM_USES_TIMED ? "timed" : mode == GM_USES_ON ? "1" : "0";
}

/* ---- stack scrubs (gm_internal.h says why) --------------------------------------------- */

/* Called from the entry point's frame right after its hook returned: this frame lies where the
 * hook's frames were, and its buffer covers BYTES of them. With AVX2, 32-byte stores, unrolled:
 * one instruction a store (a loop of four stores a turn cost ~7 instructions a 128 bytes: the
 * 2,560-byte launch scrub ~146 instructions, unrolled ~88); the empty asm, one a store and no
 * instruction, keeps them stores (gcc would make a memset call of them, and it keeps the dead
 * buffer's stores); else glibc's memset. The dispatch is a tail call: the buffer starts where
 * the scrub's own frame would. */
#if defined(__x86_64__)
#define STACK_SCRUB_AVX2(name, bytes)                                                              \
    __attribute__((noinline, target("avx2"))) static void name##_avx2(void)                        \
    {                                                                                              \
        unsigned char b[bytes] __attribute__((aligned(32)));                                       \
        __m256i z = _mm256_setzero_si256();                                                        \
        _Pragma("GCC unroll 128") for (size_t i = 0; i < sizeof b; i += 32)                        \
        {                                                                                          \
            _mm256_store_si256((__m256i *)(b + i), z);                                             \
            __asm__ volatile("" : "+m"(*(__m256i *)(b + i)));                                      \
        }                                                                                          \
    }
#define STACK_SCRUB_DISPATCH(name)                                                                 \
    if (__builtin_cpu_supports("avx2")) {                                                          \
        name##_avx2();                                                                             \
        return;                                                                                    \
    }
#else
#define STACK_SCRUB_AVX2(name, bytes)
#define STACK_SCRUB_DISPATCH(name)
#endif
#define STACK_SCRUB(linkage, name, bytes, before)                                                \
    _Static_assert((bytes) % 128 == 0, #name ": a multiple of 128 bytes");                         \
    STACK_SCRUB_AVX2(name, bytes)                                                                  \
    __attribute__((noinline)) static void name##_plain(void)                                       \
    {                                                                                              \
        unsigned char b[bytes] __attribute__((aligned(32)));                                       \
        memset(b, 0, sizeof b);                                                                    \
        __asm__ volatile("" : : "r"(b) : "memory");                                                \
    }                                                                                              \
    __attribute__((noinline)) linkage void name(void)                                              \
    {                                                                                              \
        before STACK_SCRUB_DISPATCH(name)                                                          \
        name##_plain();                                                                            \
    }
/* After a stack capture that walked (rec_stack_walked, rec.h): the walk's depth instead, and
 * the bit cleared. A tail call too. */
STACK_SCRUB(static, scrub_after_unwind, GM_SCRUB_UNWIND_BYTES, )
#define AFTER_WALKS                                                                                \
    if (__builtin_expect(rec_stack_walked != 0, 0)) {                                              \
        rec_stack_walked = 0;                                                                      \
        scrub_after_unwind();                                                                      \
        return;                                                                                    \
    }
STACK_SCRUB(, gm_stack_scrub_launch, GM_SCRUB_LAUNCH_BYTES, AFTER_WALKS)
STACK_SCRUB(, gm_stack_scrub_copy, GM_SCRUB_COPY_BYTES, AFTER_WALKS)
/* PyTorch's trace entry takes no stack through the recorder: its own reader, its own bound */
STACK_SCRUB(, gm_stack_scrub_trace, GM_SCRUB_TRACE_BYTES, )
STACK_SCRUB(, gm_stack_scrub_mem, GM_SCRUB_MEM_BYTES, AFTER_WALKS)
#undef AFTER_WALKS
#undef STACK_SCRUB
#undef STACK_SCRUB_AVX2
#undef STACK_SCRUB_DISPATCH

/* ---- the pre-filter: spans of memory the database can know ---------------------------- */

struct span {
    _Atomic uintptr_t lo, hi; /* [lo, hi); empty while lo >= hi */
};
static struct span dev_span = {UINTPTR_MAX, 0}, host_span = {UINTPTR_MAX, 0};

static void span_widen(struct span *sp, uintptr_t a, size_t n)
{
    uintptr_t e = a + n < a ? UINTPTR_MAX : a + n;
    uintptr_t lo = atomic_load_explicit(&sp->lo, memory_order_relaxed);
    while (a < lo && !atomic_compare_exchange_weak_explicit(&sp->lo, &lo, a, memory_order_relaxed,
                                                             memory_order_relaxed))
        ;
    uintptr_t hi = atomic_load_explicit(&sp->hi, memory_order_relaxed);
    while (e > hi && !atomic_compare_exchange_weak_explicit(&sp->hi, &hi, e, memory_order_relaxed,
                                                             memory_order_relaxed))
        ;
}

void gm_uses_note_range(uintptr_t addr, size_t size, int host)
{
    if (addr && size)
        span_widen(host ? &host_span : &dev_span, addr, size);
}

/* The spans as a launch or a copy reads them, once. The allocation is recorded (gm_event_id)
 * before its pointer is returned to the program, so by the time a launch can carry the pointer
 * the span covers it: relaxed loads suffice on the launching thread that received the pointer;
 * another thread got it through some synchronization of the program's, which orders the
 * widening before too. */
struct spans {
    uintptr_t dlo, dlen, hlo, hlen; /* as offsets: [lo, lo + len); an empty span has len 0 */
};

static inline void spans_load(struct spans *sp)
{
    uintptr_t lo = atomic_load_explicit(&dev_span.lo, memory_order_relaxed);
    uintptr_t hi = atomic_load_explicit(&dev_span.hi, memory_order_relaxed);
    sp->dlo = lo;
    sp->dlen = hi > lo ? hi - lo : 0;
    lo = atomic_load_explicit(&host_span.lo, memory_order_relaxed);
    hi = atomic_load_explicit(&host_span.hi, memory_order_relaxed);
    sp->hlo = lo;
    sp->hlen = hi > lo ? hi - lo : 0;
}

/* w - lo < len: one subtraction and one comparison per span, no branch */
static inline int in_device_span(const struct spans *sp, uint64_t v)
{
    return (uintptr_t)v - sp->dlo < sp->dlen;
}

static inline int candidate(const struct spans *sp, uint64_t v)
{
    return in_device_span(sp, v) | ((uintptr_t)v - sp->hlo < sp->hlen);
}

/* The bits one of which every candidate has: a span's addresses are at least its start, so a
 * word below the highest power of two at or under the lowest start of a span in use is none. A
 * word of a launch's parameters is mostly a size, a stride, a divisor or zero, all far below any
 * address: sixteen of them or-ed and tested against these bits skip the spans' comparisons
 * (scan_avx2_spans). All ones when there is no span (nothing is a candidate: the test then
 * skips only zeros, which are none either); 0 when a span starts at 0 (no word is below it). */
static inline uint64_t spans_high_bits(const struct spans *sp)
{
    uintptr_t lo = UINTPTR_MAX;
    if (sp->dlen) lo = sp->dlo;
    if (sp->hlen && sp->hlo < lo) lo = sp->hlo;
    if (lo == UINTPTR_MAX) return ~(uint64_t)0;
    if (!lo) return 0;
    return ~((UINT64_C(1) << (63 - __builtin_clzll((unsigned long long)lo))) - 1);
}

#ifdef GM_HAVE_REC

/* ---- per-function cache ----------------------------------------------------------------- */

struct param {
    uint32_t off, size;
};
/* The names below are recorder string ids, valid for one recording (a forked child that records
 * starts its ids again). They are kept without a generation check because they are only ever
 * taken while gpumem runs (gm_uses_on), and a child forked after gpumem started runs with it off
 * (core.c, fork_child): no child's recording can meet them (preload_fork_ids.sh, "after"). */
/* A parameter of one word or more: its index in the layout and its words (size / 8). */
struct word_param {
    uint32_t idx, words;
};
struct fn_info {
    uint32_t name;      /* rec_string id of the (mangled) kernel name */
    int layout;         /* 1: params[] is the function's layout; 0: unknown */
    int fits;           /* with a layout: all its words fit a level's buffer (collect) */
    unsigned nparams;
    /* the layout's parameters of a word or more, in order (collect_fit_spans): a parameter
     * under 8 bytes (an int, a flag: a third of a PyTorch launch's) holds no address and costs
     * no turn of the launch's loop; after p[], in the same allocation */
    unsigned nscan;
    const struct word_param *scan;
    struct param p[];
};

/* Open addressing, linear probing, never deleted (a CUfunction lives as long as its module;
 * see README "limits" for unloaded modules). A slot is claimed by CAS on its key, then its
 * value is published with a release store; a reader that finds the key but no value yet builds
 * its own copy for this one launch. 16384 slots (256 KiB of zero pages until used): a large
 * PyTorch program launches a few thousand distinct kernels, so probes stay short; past a full
 * table a launch still works, it just queries the driver each time. */
#define TAB_SLOTS 16384u
struct slot {
    _Atomic uintptr_t key;
    _Atomic(void *) val;
};
static struct slot fn_tab[TAB_SLOTS]; /* CUfunction -> struct fn_info * */
static struct slot sym_tab[TAB_SLOTS]; /* runtime kernel symbol -> CUfunction (+1, 0 = none) */

static inline unsigned slot_hash(uintptr_t k)
{
    k ^= k >> 29;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 32;
    return (unsigned)k & (TAB_SLOTS - 1);
}

/* inline: two of these are a launch's (the runtime's symbol, then the function) */
__attribute__((always_inline)) static inline void *tab_get(struct slot *t, uintptr_t key,
                                                          int *found)
{
    unsigned h = slot_hash(key);
    for (unsigned i = 0; i < TAB_SLOTS; i++) {
        struct slot *s = &t[(h + i) & (TAB_SLOTS - 1)];
        uintptr_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == key) {
            void *v = atomic_load_explicit(&s->val, memory_order_acquire);
            *found = v != NULL;
            return v;
        }
        if (!k)
            break;
    }
    *found = 0;
    return NULL;
}

/* Returns 1 when v was stored (the table owns it), 0 when the table is full or another thread
 * stored the key first (the caller keeps or frees v). */
static int tab_put(struct slot *t, uintptr_t key, void *v)
{
    unsigned h = slot_hash(key);
    for (unsigned i = 0; i < TAB_SLOTS; i++) {
        struct slot *s = &t[(h + i) & (TAB_SLOTS - 1)];
        uintptr_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (!k) {
            uintptr_t zero = 0;
            if (atomic_compare_exchange_strong_explicit(&s->key, &zero, key,
                                                        memory_order_acq_rel,
                                                        memory_order_acquire)) {
                atomic_store_explicit(&s->val, v, memory_order_release);
                return 1;
            }
            k = zero;
        }
        if (k == key)
            return 0;
    }
    return 0;
}

static uint32_t unknown_name(void)
{
    static _Atomic uint32_t id;
    uint32_t v = atomic_load_explicit(&id, memory_order_relaxed);
    if (!v) {
        v = rec_string("<unknown kernel>");
        atomic_store_explicit(&id, v, memory_order_relaxed);
    }
    return v;
}

/* The slow path, once per function: its layout and name from the driver. */
static struct fn_info *fn_info_build(CUfunction f)
{
    unsigned n = 0;
    size_t off, size;
    if (f && gm_real.cuFuncGetParamInfo)
        while (n < 4096 && gm_real.cuFuncGetParamInfo(f, n, &off, &size) == CUDA_SUCCESS)
            n++;
    struct fn_info *fi = calloc(1, sizeof *fi + n * (sizeof fi->p[0] + sizeof(struct word_param)));
    if (!fi)
        return NULL;
    fi->layout = f && gm_real.cuFuncGetParamInfo &&
                 (n > 0 || gm_real.cuFuncGetParamInfo(f, 0, &off, &size) ==
                               CUDA_ERROR_INVALID_VALUE);
    for (unsigned i = 0; i < n; i++) {
        if (gm_real.cuFuncGetParamInfo(f, i, &off, &size) != CUDA_SUCCESS) {
            fi->layout = 0;
            break;
        }
        fi->p[i].off = (uint32_t)off;
        fi->p[i].size = (uint32_t)size;
    }
    fi->nparams = fi->layout ? n : 0;
    size_t words = 0;
    struct word_param *scan = (struct word_param *)&fi->p[n];
    for (unsigned i = 0; i < fi->nparams; i++) {
        words += fi->p[i].size / 8;
        if (fi->p[i].size / 8)
            scan[fi->nscan++] = (struct word_param){i, fi->p[i].size / 8};
    }
    fi->scan = scan;
    fi->fits = fi->layout && words <= GM_USES_FIT_WORDS;
    const char *name = NULL;
    if (f && gm_real.cuFuncGetName && gm_real.cuFuncGetName(&name, f) == CUDA_SUCCESS && name)
        fi->name = rec_string(name);
    if (!fi->name)
        fi->name = unknown_name();
    return fi;
}

/* *tmp is set when the returned info is private to this launch (the caller frees it). */
static const struct fn_info *fn_info_get(CUfunction f, struct fn_info **tmp)
{
    int found;
    *tmp = NULL;
    const struct fn_info *fi = tab_get(fn_tab, (uintptr_t)f, &found);
    if (found)
        return fi;
    struct fn_info *nfi = fn_info_build(f);
    if (!nfi)
        return NULL;
    if (f && tab_put(fn_tab, (uintptr_t)f, nfi))
        return nfi;
    *tmp = nfi;
    return nfi;
}

int gm_uses_device(void)
{
    CUdevice d = 0;
    if (gm_real.cuCtxGetDevice && gm_real.cuCtxGetDevice(&d) != CUDA_SUCCESS)
        return -1;
    return (int)d;
}

typedef cudaError_t (*getfunc_fn)(cudaFunction_t *, const void *);

CUfunction gm_uses_func_of_symbol(const void *sym, int device)
{
    /* one kernel symbol has one CUfunction per device (per context): the key is the pair itself,
     * the device + 1 in the top byte above the symbol's address (a user-space address is below
     * 2^56 even with 5-level page tables), so two pairs never share a key (a sum could). A pair
     * that does not fit (key 0) is asked of the runtime each time, never cached. */
    uintptr_t key = (uint64_t)(uintptr_t)sym >> 56 == 0 && device >= -1 && device < 255
                        ? (uintptr_t)sym | (uintptr_t)(device + 1) << 56
                        : 0;
    int found = 0;
    void *v = key ? tab_get(sym_tab, key, &found) : NULL;
    if (found)
        return (CUfunction)((uintptr_t)v - 1);
    static _Atomic(getfunc_fn) getfunc;
    getfunc_fn g = atomic_load_explicit(&getfunc, memory_order_acquire);
    if (!g) {
        g = (getfunc_fn)gm_next_symbol("cudaGetFuncBySymbol");
        atomic_store_explicit(&getfunc, g, memory_order_release);
    }
    cudaFunction_t fn = NULL;
    gm_inside_enter(); /* the runtime's own driver calls are not the program's */
    if (!g || !sym || g(&fn, sym) != cudaSuccess)
        fn = NULL;
    gm_inside_leave();
    if (fn && sym && key)
        tab_put(sym_tab, key, (void *)((uintptr_t)fn + 1));
    return (CUfunction)fn;
}

/* ---- candidate words ----------------------------------------------------------------- */

/* The thread's candidate buffers, one per nesting level of kernel hooks (level 0 the
 * program's launch; a launch made while a hook runs, if any, takes the next level; deeper
 * than USES_LEVELS, memory of its own). Off the stack: the hook's frames leave no candidate
 * there, and the stack scrub's bound covers the hook's small frames only. */
enum { USES_LEVELS = 2 };
static __thread struct {
    unsigned depth;
    uint64_t w[USES_LEVELS][GM_USES_FIT_WORDS];
} levels __attribute__((tls_model("initial-exec")));

/* Takes the buffer of the next level (words_free gives it back); cap is GM_USES_FIT_WORDS but
 * where memory ran out for a level beyond USES_LEVELS (then `pair`, and words_room grows it). */
static void words_init(struct gm_uses_op *ws)
{
    unsigned d = levels.depth++;
    ws->n = 0;
    ws->own = 0;
    if (__builtin_expect(d < USES_LEVELS, 1)) {
        ws->w = levels.w[d];
        ws->cap = GM_USES_FIT_WORDS;
        return;
    }
    ws->w = malloc(GM_USES_FIT_WORDS * sizeof *ws->w);
    if (ws->w) {
        ws->own = 2;
        ws->cap = GM_USES_FIT_WORDS;
    } else {
        ws->w = ws->pair;
        ws->cap = sizeof ws->pair / sizeof ws->pair[0];
    }
}

/* The thread's buffer for launches with more candidates than a level's buffer holds (a
 * multi-tensor kernel's: PyTorch's foreach AdamW passes four lists of up to 110 addresses),
 * kept from launch to launch: a malloc and free per such launch cost more than its whole scan.
 * Taken while a launch uses it (a launch inside another's hook, if any, takes memory of its
 * own). */
static __thread struct {
    uint64_t *w;
    size_t cap;
    int taken;
} spill __attribute__((tls_model("initial-exec")));

static pthread_key_t spill_key;
static pthread_once_t spill_once = PTHREAD_ONCE_INIT;

static void spill_key_make(void)
{
    (void)pthread_key_create(&spill_key, free);
}

/* Room for `need` more words: the buffer doubled when full (out of the level's buffer into the
 * thread's spill buffer when it is free, else into memory of its own), so a launch costs no
 * malloc unless it has more candidates than the level's buffer and the spill buffer hold; 0
 * when memory ran out (the words that fit are kept). */
static int words_room(struct gm_uses_op *ws, size_t need)
{
    if (ws->cap - ws->n >= need)
        return 1;
    size_t cap = ws->cap * 2;
    while (cap - ws->n < need)
        cap *= 2;
    if (ws->own == 0 && !spill.taken) {
        if (spill.cap < cap) {
            pthread_once(&spill_once, spill_key_make);
            uint64_t *r = realloc(spill.w, cap * sizeof *r);
            if (!r)
                return 0;
            (void)pthread_setspecific(spill_key, r); /* freed when the thread exits */
            spill.w = r, spill.cap = cap;
        }
        spill.taken = 1;
        memcpy(spill.w, ws->w, ws->n * sizeof *spill.w);
        ws->w = spill.w;
        ws->cap = spill.cap;
        ws->own = 1;
        return 1;
    }
    if (ws->own == 1) { /* the spill buffer outgrown: grown in place, kept */
        uint64_t *r = realloc(spill.w, cap * sizeof *r);
        if (!r)
            return 0;
        (void)pthread_setspecific(spill_key, r);
        spill.w = ws->w = r, spill.cap = ws->cap = cap;
        return 1;
    }
    uint64_t *p = ws->own == 2 ? realloc(ws->w, cap * sizeof *p) : malloc(cap * sizeof *p);
    if (!p)
        return 0;
    if (ws->own == 0)
        memcpy(p, ws->w, ws->n * sizeof *p);
    ws->w = p;
    ws->cap = cap;
    ws->own = 2;
    return 1;
}

/* Gives back what words_init and words_room took (every kernel hook's collect has one). */
static void words_free(struct gm_uses_op *ws)
{
    levels.depth--;
    if (ws->own == 1)
        spill.taken = 0;
    else if (ws->own == 2)
        free(ws->w);
}

/* A PyTorch kernel's parameters are mostly sizes, strides and zeros (a TensorIterator's offset
 * calculators: kilobytes a launch, ~2,400 instructions of a tiny GPT-2 step's launch when
 * tested a word at a time), so this loop is the launch's cost. Where the CPU has AVX2, sixteen
 * words are tested at once (scan_avx2_spans) and the candidates of a block that has some are
 * kept by the comparison's mask; the rest goes through the scalar loop, branch-free: every word
 * stored, the count moved by the test. Both store at most one word per word scanned: scan gives them room for a chunk of
 * words at a time. */
__attribute__((always_inline)) static inline size_t
scan_words_spans(uint64_t *w, size_t n, const struct spans *sp, const unsigned char *base,
                 size_t words, int both)
{
    for (size_t i = 0; i < words; i++) {
        uint64_t v;
        memcpy(&v, base + 8 * i, 8); /* kernel arguments need not be 8-aligned in host memory */
        w[n] = v;
        n += both ? candidate(sp, v) : in_device_span(sp, v);
    }
    return n;
}

static size_t scan_words(uint64_t *w, size_t n, const struct spans *sp, const unsigned char *base,
                         size_t words)
{
    return scan_words_spans(w, n, sp, base, words, 1);
}

#if defined(__x86_64__)
/* Compaction of a group of four words by its comparison's mask (bit i: word i): the 32-bit lanes
 * that move the kept words, in order, to the front (vpermd), and how many are kept. */
#define KEEP_LANES(a, b, c, d) {2 * (a), 2 * (a) + 1, 2 * (b), 2 * (b) + 1, 2 * (c), 2 * (c) + 1, 2 * (d), 2 * (d) + 1}
static const int32_t keep_lanes[16][8] __attribute__((aligned(32))) = {
    KEEP_LANES(0, 0, 0, 0), KEEP_LANES(0, 0, 0, 0), KEEP_LANES(1, 0, 0, 0), KEEP_LANES(0, 1, 0, 0),
    KEEP_LANES(2, 0, 0, 0), KEEP_LANES(0, 2, 0, 0), KEEP_LANES(1, 2, 0, 0), KEEP_LANES(0, 1, 2, 0),
    KEEP_LANES(3, 0, 0, 0), KEEP_LANES(0, 3, 0, 0), KEEP_LANES(1, 3, 0, 0), KEEP_LANES(0, 1, 3, 0),
    KEEP_LANES(2, 3, 0, 0), KEEP_LANES(0, 2, 3, 0), KEEP_LANES(1, 2, 3, 0), KEEP_LANES(0, 1, 2, 3),
};
#undef KEEP_LANES
static const unsigned char keep_count[16] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};
/* the lanes of the kept words once moved (the first keep_count[m]): the store's mask */
#define KEEP_STORE(k) {(k) > 0 ? -1 : 0, (k) > 1 ? -1 : 0, (k) > 2 ? -1 : 0, (k) > 3 ? -1 : 0}
static const int64_t keep_store[16][4] __attribute__((aligned(32))) = {
    KEEP_STORE(0), KEEP_STORE(1), KEEP_STORE(1), KEEP_STORE(2), KEEP_STORE(1), KEEP_STORE(2),
    KEEP_STORE(2), KEEP_STORE(3), KEEP_STORE(1), KEEP_STORE(2), KEEP_STORE(2), KEEP_STORE(3),
    KEEP_STORE(2), KEEP_STORE(3), KEEP_STORE(3), KEEP_STORE(4),
};
#undef KEEP_STORE

/* The words of the group at p whose comparison hit (hit: all ones in a kept word's lane), in
 * order, at w + n: the four words moved in one permutation and stored under a mask, so nothing
 * past the kept words is written. (When the buffer was on the hook's stack, a whole store left
 * copies of device pointers where a later launch's uninitialized argument bytes picked them up;
 * the buffer is the thread's now, and the masked store costs no more.) */
__attribute__((target("avx2"), always_inline)) static inline size_t keep4(uint64_t *w, size_t n,
                                                                         const unsigned char *p,
                                                                         __m256i hit)
{
    unsigned m = (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(hit));
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m256i lanes = _mm256_load_si256((const __m256i *)(const void *)keep_lanes[m]);
    __m256i store = _mm256_load_si256((const __m256i *)(const void *)keep_store[m]);
    _mm256_maskstore_epi64((long long *)(void *)(w + n), store, _mm256_permutevar8x32_epi32(v, lanes));
    return n + keep_count[m];
}

/* both: test the host span too (a program with pinned host memory); without it, the device
 * span alone (PyTorch's steps pin nothing).
 *
 * "w - lo < len" unsigned is "(w - lo) ^ MIN < len ^ MIN" signed, and (w - lo) ^ MIN is w +
 * (MIN - lo) (adding the sign bit flips it): one addition and one signed comparison a vector.
 * Sixteen words are tested at once (four vectors, their hits or-ed, one test and one branch),
 * since a launch's words are rarely candidates (an offset calculator's divisors and strides,
 * sizes); in a block with a hit, each group's comparison mask says which words to keep (the same
 * test as the scalar loop's, exact), in order, moved into place by one permutation a group (keep4:
 * a foreach launch's pointer lists hit in every group, and a word at a time cost ~7 instructions
 * a kept word, a group ~6 whatever it keeps); the words past the last group of four go through
 * the scalar loop. A zero is never a candidate (no span starts at 0), so the zero words that
 * fill an offset calculator's unused dimensions need no test of their own. Before the
 * comparisons, the sixteen words or-ed are tested against the bits every candidate has one of
 * (spans_high_bits): a block of sizes, strides and zeros then costs four loads, three ors and one
 * test. */
__attribute__((target("avx2"), always_inline)) static inline __m256i
hits4(const unsigned char *p, __m256i dbias, __m256i dlen, __m256i hbias, __m256i hlen, int both)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m256i hit = _mm256_cmpgt_epi64(dlen, _mm256_add_epi64(v, dbias));
    if (both)
        hit = _mm256_or_si256(hit, _mm256_cmpgt_epi64(hlen, _mm256_add_epi64(v, hbias)));
    return hit;
}

__attribute__((target("avx2"), always_inline)) static inline size_t
scan_avx2_spans(uint64_t *w, size_t n, const struct spans *sp, const unsigned char *base, size_t words,
                int both, uint64_t high_bits)
{
    const __m256i dbias = _mm256_set1_epi64x((long long)((uint64_t)INT64_MIN - sp->dlo));
    const __m256i hbias = _mm256_set1_epi64x((long long)((uint64_t)INT64_MIN - sp->hlo));
    const __m256i dlen = _mm256_set1_epi64x((long long)(sp->dlen ^ (uint64_t)INT64_MIN));
    const __m256i hlen = _mm256_set1_epi64x((long long)(sp->hlen ^ (uint64_t)INT64_MIN));
    const __m256i high = _mm256_set1_epi64x((long long)high_bits);
    size_t i = 0;
    for (; i + 16 <= words; i += 16) {
        const unsigned char *p = base + 8 * i;
        __m256i any = _mm256_or_si256(
            _mm256_or_si256(_mm256_loadu_si256((const __m256i *)(const void *)p),
                            _mm256_loadu_si256((const __m256i *)(const void *)(p + 32))),
            _mm256_or_si256(_mm256_loadu_si256((const __m256i *)(const void *)(p + 64)),
                            _mm256_loadu_si256((const __m256i *)(const void *)(p + 96))));
        if (__builtin_expect(_mm256_testz_si256(any, high), 1))
            continue;
        __m256i h0 = hits4(p, dbias, dlen, hbias, hlen, both), h1 = hits4(p + 32, dbias, dlen, hbias, hlen, both),
                h2 = hits4(p + 64, dbias, dlen, hbias, hlen, both), h3 = hits4(p + 96, dbias, dlen, hbias, hlen, both);
        __m256i hit = _mm256_or_si256(_mm256_or_si256(h0, h1), _mm256_or_si256(h2, h3));
        if (__builtin_expect(_mm256_testz_si256(hit, hit), 1))
            continue;
        n = keep4(w, n, p, h0);
        n = keep4(w, n, p + 32, h1);
        n = keep4(w, n, p + 64, h2);
        n = keep4(w, n, p + 96, h3);
    }
    for (; i + 4 <= words; i += 4) {
        __m256i hit = hits4(base + 8 * i, dbias, dlen, hbias, hlen, both);
        if (!_mm256_testz_si256(hit, hit))
            n = keep4(w, n, base + 8 * i, hit);
    }
    return scan_words_spans(w, n, sp, base + 8 * i, words - i, both);
}

__attribute__((target("avx2"))) static size_t scan_avx2(uint64_t *w, size_t n,
                                                        const struct spans *sp,
                                                        const unsigned char *base, size_t words)
{
    uint64_t high = spans_high_bits(sp);
    if (!high) /* a span starting at 0: no word is below it */
        return scan_words(w, n, sp, base, words);
    return sp->hlen ? scan_avx2_spans(w, n, sp, base, words, 1, high)
                    : scan_avx2_spans(w, n, sp, base, words, 0, high);
}
#endif

/* A run of words, vectorized where the CPU can; w has room for `words` more. */
static size_t scan_run(uint64_t *w, size_t n, const struct spans *sp, const unsigned char *base,
                       size_t words)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2"))
        return scan_avx2(w, n, sp, base, words);
#endif
    return scan_words(w, n, sp, base, words);
}

/* Room for every word of the parameter first (the thread's spill buffer keeps it from launch to
 * launch), so that the scan runs over it in one call: a PyTorch launch's offset calculators are
 * hundreds of words, and a room check and a call per 64 of them cost a fifth of the scan. Where
 * that much memory cannot be had, 64 words at a time, as many as fit. */
static void scan_long(struct gm_uses_op *ws, const struct spans *sp, const unsigned char *base,
                      size_t words)
{
    if (words_room(ws, words)) {
        ws->n = scan_run(ws->w, ws->n, sp, base, words);
        return;
    }
    for (size_t i = 0; i < words;) {
        size_t k = words - i < 64 ? words - i : 64;
        if (!words_room(ws, k)) { /* out of memory: as many words as the room left can take */
            k = ws->cap - ws->n < k ? ws->cap - ws->n : k;
            if (!k)
                break;
        }
        ws->n = scan_run(ws->w, ws->n, sp, base + 8 * i, k);
        i += k;
    }
}

/* A parameter of a few words (a pointer, an int: most kernels') is tested here, inline; a wide
 * one (a struct of kilobytes) in scan_long. */
static inline void scan(struct gm_uses_op *ws, const struct spans *sp, const unsigned char *base,
                        size_t size)
{
    size_t words = size / 8;
    if (words < 8 && ws->cap - ws->n >= words)
        ws->n = scan_words(ws->w, ws->n, sp, base, words);
    else
        scan_long(ws, sp, base, words);
}

/* The packed buffer of the `extra` form, or NULL. */
static const unsigned char *extra_buffer(void **extra, size_t *size)
{
    const unsigned char *buf = NULL;
    *size = 0;
    for (size_t i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END && i < 64; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
            *size = *(const size_t *)extra[i + 1];
    }
    return buf;
}

/* The usual launch: a kernelParams array and a layout whose words all fit a level's buffer
 * (fi->fits: a few pointers, sizes, a small struct), so no room is checked. Only the parameters
 * of a word or more are visited (fi->scan: an int is passed over when the layout is read). A
 * parameter of one word (a pointer, a size) is tested here without a loop, against the device span alone when
 * there is no host span (both: there is); a narrow struct word by word, a wide one by the
 * vector scan. */
__attribute__((always_inline)) static inline size_t
collect_fit_spans(uint64_t *w, const struct fn_info *fi, void **params, const struct spans *sp,
                  int both)
{
    size_t n = 0;
    const struct word_param *s = fi->scan, *end = s + fi->nscan;
    for (; s < end; s++) {
        const unsigned char *p = params[s->idx];
        size_t words = s->words;
        if (__builtin_expect(p == NULL, 0))
            continue;
        if (__builtin_expect(words == 1, 1)) {
            n = scan_words_spans(w, n, sp, p, 1, both);
            continue;
        }
        n = words < 8 ? scan_words_spans(w, n, sp, p, words, both) : scan_run(w, n, sp, p, words);
    }
    return n;
}

static void collect(struct gm_uses_op *ws, const struct fn_info *fi, void **params, void **extra)
{
    struct spans sp;
    spans_load(&sp);
    ws->unread = 0;
    words_init(ws);
    if (params && fi && fi->fits && ws->cap >= GM_USES_FIT_WORDS) {
        ws->n = sp.hlen ? collect_fit_spans(ws->w, fi, params, &sp, 1)
                        : collect_fit_spans(ws->w, fi, params, &sp, 0);
        return;
    }
    size_t bsize = 0;
    const unsigned char *buf = params ? NULL : extra_buffer(extra, &bsize);
    if (fi && fi->layout) {
        for (unsigned i = 0; i < fi->nparams; i++) {
            const unsigned char *p = params ? (const unsigned char *)params[i]
                                   : buf && fi->p[i].off + (size_t)fi->p[i].size <= bsize
                                       ? buf + fi->p[i].off
                                       : NULL;
            if (p)
                scan(ws, &sp, p, fi->p[i].size);
        }
        return;
    }
    /* No layout: a kernelParams array cannot be walked (its length is unknown), but a packed
     * buffer can, word by word. An array left unread makes the launch one whose uses are
     * unknown (meta.launches_unread), not one that touched nothing. */
    ws->unread = params != NULL;
    if (buf)
        scan(ws, &sp, buf, bsize);
}

/* ---- timing (GPUMEM_USES=timed) --------------------------------------------------------- */

struct timing {
    CUcontext ctx;
    CUevent a, b;
    struct timing *next;
};
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct timing *pool;
static CUevent ref_event;
static uint64_t ref_ns;
static _Atomic int ref_state; /* 0 not yet, 1 ready, 2 failed */

static void pool_put(struct timing *t)
{
    pthread_mutex_lock(&pool_lock);
    t->next = pool;
    pool = t;
    pthread_mutex_unlock(&pool_lock);
}

static struct timing *pool_take(CUcontext ctx)
{
    pthread_mutex_lock(&pool_lock);
    struct timing **pp = &pool, *t = NULL;
    for (int i = 0; *pp && i < 8; i++, pp = &(*pp)->next)
        if ((*pp)->ctx == ctx) {
            t = *pp;
            *pp = t->next;
            break;
        }
    pthread_mutex_unlock(&pool_lock);
    if (t)
        return t;
    t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->ctx = ctx;
    if (gm_real.cuEventCreate(&t->a, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        free(t);
        return NULL;
    }
    if (gm_real.cuEventCreate(&t->b, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        gm_real.cuEventDestroy_v2(t->a);
        free(t);
        return NULL;
    }
    return t;
}

/* The reference: an event recorded on a private non-blocking stream (idle, so the event is
 * reached at once; and never the legacy stream, which a capture elsewhere in the program forbids
 * touching), synchronized, then read against rec_time_ns(). Once, on the first timed launch
 * made with a current context. */
static int ref_ready(void)
{
    int st = atomic_load_explicit(&ref_state, memory_order_acquire);
    if (st)
        return st == 1;
    CUcontext ctx = NULL;
    if (gm_real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
        return 0; /* not yet: the runtime makes the context current in its first call */
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    st = atomic_load(&ref_state);
    if (!st) {
        st = 2;
        CUstream rs = NULL;
        if (gm_real.cuEventCreate && gm_real.cuEventElapsedTime &&
            gm_driver_private_stream(&rs) == CUDA_SUCCESS &&
            gm_real.cuEventCreate(&ref_event, CU_EVENT_DEFAULT) == CUDA_SUCCESS) {
            if (GM_DRV(GM_DRV_EVENT_RECORD, gm_real.cuEventRecord(ref_event, rs)) == CUDA_SUCCESS &&
                GM_DRV(GM_DRV_EVENT_SYNC, gm_real.cuEventSynchronize(ref_event)) == CUDA_SUCCESS) {
                ref_ns = rec_time_ns();
                st = 1;
            }
        }
        if (st == 2)
            gm_warn("GPUMEM_USES=timed: cannot record a reference event; launches are "
                    "recorded without device times");
        atomic_store_explicit(&ref_state, st, memory_order_release);
    }
    pthread_mutex_unlock(&lock);
    return st == 1;
}

static struct timing *timing_begin_timed(CUstream s)
{
    if (!ref_ready())
        return NULL;
    CUcontext ctx = NULL;
    if (gm_real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
        return NULL;
    /* work captured into a graph runs later, if ever: nothing to time now, and events queried
     * during a capture would be the capture's */
    if (gm_stream_capturing(s))
        return NULL;
    struct timing *t = pool_take(ctx);
    if (t && GM_DRV(GM_DRV_EVENT_RECORD, gm_real.cuEventRecord(t->a, s)) != CUDA_SUCCESS) {
        pool_put(t);
        t = NULL;
    }
    return t;
}

/* untimed (GPUMEM_USES=1): one compare, inline */
static inline struct timing *timing_begin(CUstream s)
{
    return gm_uses_mode == GM_USES_TIMED ? timing_begin_timed(s) : NULL;
}

static struct timing *timing_end(struct timing *t, CUstream s, CUresult launch_result)
{
    if (!t)
        return NULL;
    if (launch_result != CUDA_SUCCESS || GM_DRV(GM_DRV_EVENT_RECORD, gm_real.cuEventRecord(t->b, s)) != CUDA_SUCCESS) {
        pool_put(t);
        return NULL;
    }
    return t;
}

/* The writer thread's resolver (rec_set_timing_resolver). Never blocks unless final. */
static int uses_timing_resolve(void *token, int final, uint64_t *start_ns, uint64_t *end_ns)
{
    struct timing *t = token;
    /* the events' context on the calling thread (the recorder's writer): asked each time, not
     * kept in a thread-local, since the resolver may also run on the thread closing the file */
    CUcontext cur = NULL;
    if (t->ctx && (gm_real.cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != t->ctx))
        gm_real.cuCtxSetCurrent(t->ctx);
    CUresult q = GM_DRV(GM_DRV_EVENT_QUERY, gm_real.cuEventQuery(t->b));
    if (q == CUDA_ERROR_NOT_READY) {
        if (!final)
            return 0;
        q = GM_DRV(GM_DRV_EVENT_SYNC, gm_real.cuEventSynchronize(t->b));
    }
    float ms_start = 0, ms_len = 0;
    int ok = q == CUDA_SUCCESS &&
             gm_real.cuEventElapsedTime(&ms_start, ref_event, t->a) == CUDA_SUCCESS &&
             gm_real.cuEventElapsedTime(&ms_len, t->a, t->b) == CUDA_SUCCESS;
    if (ok) {
        /* start from the reference (float ms: coarse late in a long run), the duration from
         * the pair itself (precise); a negative value is clock noise between the two */
        double s = ms_start > 0 ? (double)ms_start * 1e6 : 0;
        double len = ms_len > 0 ? (double)ms_len * 1e6 : 0;
        *start_ns = ref_ns + (uint64_t)s;
        *end_ns = *start_ns + (uint64_t)len;
    }
    pool_put(t);
    return ok ? 1 : -1;
}

void gm_uses_start(void)
{
    if (gm_uses_mode == GM_USES_TIMED)
        rec_set_timing_resolver(uses_timing_resolve);
}

/* ---- the entry points ---------------------------------------------------------------- */


void gm_uses_kernel_begin(struct gm_uses_op *op, int device, CUfunction f, CUstream s,
                          void **params, void **extra)
{
    struct fn_info *tmp;
    op->device = device;
    const struct fn_info *fi = fn_info_get(f, &tmp);
    op->f = f;
    op->s = s;
    op->name = fi ? fi->name : 0;
    op->tmp = tmp;
    collect(op, fi, params, extra);
    op->timing = timing_begin(s);
}

/* The stream and device of the thread's last launch for which gm_heap_streams_settled said
 * that nothing can be added (PyTorch's: its one stream, every block on it), and
 * gm_heap_streams_gen then: while it holds, the next launches there skip gm_heap_use_streams
 * (~55 instructions a launch). */
static __thread struct {
    CUstream s;
    int device;
    int ok;
    unsigned gen;
} streams_memo __attribute__((tls_model("initial-exec")));

__attribute__((noinline)) static void use_streams_call(int device, CUstream s, const uint64_t *w,
                                                       size_t n, unsigned gen)
{
    gm_heap_use_streams(device, s, w, n);
    streams_memo.ok = gm_heap_streams_settled(device, s);
    streams_memo.s = s;
    streams_memo.device = device;
    streams_memo.gen = gen;
}

/* gm_heap_use_streams unless the memo says it adds nothing: a leaf, the call a tail call. Out of
 * line, with gm_heap_use_streams' arguments, so that launch_record's frame stays as it was (what
 * the hook's frames leave on the stack is read by PyTorch's partly filled argument structs:
 * tests/bench/README.md, "Tenth pass"). */
__attribute__((noinline)) static void use_streams(int device, CUstream s, const uint64_t *w, size_t n)
{
    /* acquire: gm_heap_streams_settled reads what the bump announced (heap.c, streams_gen_bump) */
    unsigned gen = atomic_load_explicit(&gm_heap_streams_gen, memory_order_acquire);
    if (streams_memo.ok && streams_memo.gen == gen && streams_memo.s == s &&
        streams_memo.device == device)
        return;
    use_streams_call(device, s, w, n, gen);
}

static void launch_record(struct gm_uses_op *op, CUresult r, unsigned kind, uint32_t name,
                          uint64_t bytes, const uint8_t *access)
{
    struct timing *t = timing_end(op->timing, op->s, r);
    if (r == CUDA_SUCCESS) {
        /* the allocator learns the stream too, before the hook returns (so before any free the
         * program orders after this launch): a block used here is not reused ahead of it */
        use_streams(op->device, op->s, op->w, op->n);
        rec_launch_info li = {
            .device = op->device,
            .stream = (uint64_t)(uintptr_t)op->s,
            .func = (uint64_t)(uintptr_t)op->f,
            .name = name,
            .op = kind,
            .bytes = bytes,
            .words = op->w,
            .access = access,
            .nwords = op->n,
            .unread = op->unread,
            .timing = t,
        };
        if (!rec_launch(&li) && t)
            pool_put(t); /* not recorded: the resolver will never see the token */
    }
}

void gm_uses_kernel_end(struct gm_uses_op *op, CUresult r)
{
    launch_record(op, r, REC_OP_KERNEL, op->name, 0, NULL);
    words_free(op);
    if (op->tmp) /* a layout private to this launch (rare): no call into malloc otherwise */
        free(op->tmp);
}

static uint32_t op_name(int which)
{
    static const char *const names[] = {"memcpy", "memcpy HtoD", "memcpy DtoH", "memcpy DtoD",
                                        "memcpy HtoH", "memset"};
    static _Atomic uint32_t ids[sizeof names / sizeof names[0]];
    if (which < 0 || which >= (int)(sizeof names / sizeof names[0]))
        which = 0;
    uint32_t v = atomic_load_explicit(&ids[which], memory_order_relaxed);
    if (!v) {
        v = rec_string(names[which]);
        atomic_store_explicit(&ids[which], v, memory_order_relaxed);
    }
    return v;
}

void gm_uses_copy_begin(struct gm_uses_op *op, CUstream s)
{
    op->device = gm_uses_device();
    op->unread = 0;
    op->f = NULL;
    op->s = s;
    op->timing = timing_begin(s);
}

void gm_uses_copy_end(struct gm_uses_op *op, CUresult r, int which, uint64_t dst, uint64_t src,
                      size_t bytes)
{
    uint8_t acc[2];
    op->w = op->pair;
    op->n = 0;
    struct spans sp;
    spans_load(&sp);
    if (candidate(&sp, dst)) {
        op->w[op->n] = dst;
        acc[op->n++] = REC_ACC_WRITE;
    }
    if (which != GM_COPY_MEMSET && candidate(&sp, src)) {
        op->w[op->n] = src;
        acc[op->n++] = REC_ACC_READ;
    }
    launch_record(op, r, which == GM_COPY_MEMSET ? REC_OP_MEMSET : REC_OP_COPY, op_name(which),
                  bytes, acc);
}

#else /* no recorder linked: nothing to record */

void gm_uses_start(void) {}
CUfunction gm_uses_func_of_symbol(const void *sym, int device)
{
    (void)sym, (void)device;
    return NULL;
}
int gm_uses_device(void) { return -1; }
void gm_uses_kernel_begin(struct gm_uses_op *op, int device, CUfunction f, CUstream s,
                          void **params, void **extra)
{
    (void)op, (void)device, (void)f, (void)s, (void)params, (void)extra;
}
void gm_uses_kernel_end(struct gm_uses_op *op, CUresult r) { (void)op, (void)r; }
void gm_uses_copy_begin(struct gm_uses_op *op, CUstream s) { (void)op, (void)s; }
void gm_uses_copy_end(struct gm_uses_op *op, CUresult r, int which, uint64_t dst, uint64_t src,
                      size_t bytes)
{
    (void)op, (void)r, (void)which, (void)dst, (void)src, (void)bytes;
}
#endif
