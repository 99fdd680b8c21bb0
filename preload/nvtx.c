/*
 * nvtx.c — NVTX injection: gpumem receives the program's NVTX ranges, marks, domains,
 * registered strings and the memory extension's region names.
 *
 * NVTX3 is header-only: every module (the program, each library) carries its own copy and, on
 * its first NVTX call, dlopens the library named by NVTX_INJECTION64_PATH and calls its
 * InitializeInjectionNvtx2 with that module's export table. So:
 *   - the constructor points NVTX_INJECTION64_PATH at this very library (its own path, from
 *     dladdr) — it must be set before the program's first NVTX call, which can come before any
 *     CUDA call, and that is all the constructor does here;
 *   - when a tool had already set the variable, gpumem remembers it (and passes it on to child
 *     processes in GPUMEM_NVTX_CHAIN) and chains: its InitializeInjectionNvtx2 is called first
 *     with the same export table, the slots it filled are kept as "next" and called after
 *     gpumem's handler. Domain and registered-string handles are the tool's own (gpumem maps
 *     handle -> name), so the tool never sees a foreign handle;
 *   - InitializeInjectionNvtx2 can run once per module: it only fills slots.
 *
 * Per-thread range stacks (push/pop, any domain, innermost first) give each allocation event
 * its phase; the recorder keeps its own per-thread stack from rec_range_push/pop. For tests,
 * GPUMEM_DEBUG_RANGES=path makes gpumem write everything it received to `path` at exit
 * (format in preload/README.md).
 *
 * The memory extension (nvToolsExtMem.h) arrives through InitializeInjectionNvtxExtension:
 * regions registered on a heap and named with nvtxMemRegionsName name the gpumem allocation
 * at that address, exactly like gpumem_name(). It is not forwarded to a chained tool.
 */
#define NVTX_NO_IMPL
#include "preload/gm_internal.h"

#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>

#ifdef GM_HAVE_REC
#include "snapshot/record/rec.h"
#endif

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <wchar.h>

int gm_nvtx_recording(void);
void gm_exit_register_nvtx(void);
int gm_name_internal(const void *ptr, const char *name);

static char self_path[PATH_MAX];
static pid_t ctor_pid;
static char chain_path[PATH_MAX];
static int debug_on;

/* ---- handle -> string maps (domains, registered strings, heaps) ------------------------- */

struct hmap {
    pthread_mutex_t lock;
    const void **keys;
    char **vals;
    size_t cap, n;
};
static struct hmap domains = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, 0};
static struct hmap strings = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, 0};

static size_t hm_hash(const void *k) { return (size_t)(((uintptr_t)k >> 3) * 0x9E3779B97F4A7C15ull); }

static void hm_put(struct hmap *m, const void *k, const char *v)
{
    char *copy = strdup(v ? v : "");
    if (!copy)
        return;
    pthread_mutex_lock(&m->lock);
    if ((m->n + 1) * 2 > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 64;
        const void **nk = calloc(nc, sizeof *nk);
        char **nv = calloc(nc, sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            free(copy);
            pthread_mutex_unlock(&m->lock);
            return;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i])
                continue;
            size_t j = hm_hash(m->keys[i]) & (nc - 1);
            while (nk[j])
                j = (j + 1) & (nc - 1);
            nk[j] = m->keys[i];
            nv[j] = m->vals[i];
        }
        free(m->keys);
        free(m->vals);
        m->keys = nk;
        m->vals = nv;
        m->cap = nc;
    }
    size_t j = hm_hash(k) & (m->cap - 1);
    while (m->keys[j] && m->keys[j] != k)
        j = (j + 1) & (m->cap - 1);
    if (m->keys[j])
        free(m->vals[j]);
    else
        m->n++;
    m->keys[j] = k;
    m->vals[j] = copy;
    pthread_mutex_unlock(&m->lock);
}

/* Copies the value into buf (handles may be used concurrently with registration). */
static const char *hm_get(struct hmap *m, const void *k, char *buf, size_t len)
{
    const char *r = NULL;
    pthread_mutex_lock(&m->lock);
    if (m->cap && k) {
        size_t j = hm_hash(k) & (m->cap - 1);
        while (m->keys[j]) {
            if (m->keys[j] == k) {
                snprintf(buf, len, "%s", m->vals[j]);
                r = buf;
                break;
            }
            j = (j + 1) & (m->cap - 1);
        }
    }
    pthread_mutex_unlock(&m->lock);
    return r;
}

/* ---- debug log (GPUMEM_DEBUG_RANGES) ----------------------------------------------------- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char **log_lines;
static size_t log_n, log_cap;
#define LOG_MAX 1000000

static void dlog_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* the test in the caller: without GPUMEM_DEBUG_RANGES the arguments (the thread id) are not
 * evaluated and nothing is called, on every push and pop */
#define dlog(...)                                                                                  \
    do {                                                                                           \
        if (debug_on) dlog_line(__VA_ARGS__);                                                      \
    } while (0)
static void dlog_line(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *line = strdup(buf);
    if (!line)
        return;
    pthread_mutex_lock(&log_lock);
    if (log_n == log_cap && log_n < LOG_MAX) {
        size_t nc = log_cap ? log_cap * 2 : 256;
        char **n = realloc(log_lines, nc * sizeof *n);
        if (n) {
            log_lines = n;
            log_cap = nc;
        }
    }
    if (log_n < log_cap)
        log_lines[log_n++] = line;
    else
        free(line);
    pthread_mutex_unlock(&log_lock);
}

void gm_nvtx_dump(void)
{
    const char *path = getenv("GPUMEM_DEBUG_RANGES");
    if (!debug_on || !path || !*path)
        return;
    char own[PATH_MAX];
    if (getpid() != ctor_pid) { /* a forked child writes its own file */
        snprintf(own, sizeof own, "%s.%d", path, (int)getpid());
        path = own;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        gm_warn("GPUMEM_DEBUG_RANGES: cannot write '%s'", path);
        return;
    }
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < log_n; i++)
        fprintf(f, "%s\n", log_lines[i]);
    pthread_mutex_unlock(&log_lock);
    fclose(f);
}

/* ---- per-thread range stacks ------------------------------------------------------------- */

#define MAX_DEPTH 128
#define PATH_LEN 4096
struct tstack {
    int depth;                 /* may exceed MAX_DEPTH: deeper levels are counted only */
    size_t len[MAX_DEPTH + 1]; /* path length at each depth */
    char path[PATH_LEN];       /* "outer/inner/..." */
    long tid;
};
static __thread struct tstack ts __attribute__((tls_model("initial-exec")));

static long my_tid(void)
{
    if (!ts.tid)
        ts.tid = (long)syscall(SYS_gettid);
    return ts.tid;
}

/* A wide NVTX string (UTF-32 on Linux) as UTF-8, cut at a whole character to fit len; a value
 * that is no Unicode scalar (a surrogate, past U+10FFFF, negative) becomes '?'. */
static void narrow(const wchar_t *w, char *out, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; w && w[i]; i++) {
        uint32_t c = (uint32_t)w[i];
        unsigned char b[4];
        size_t n;
        if (c < 0x80) {
            b[0] = (unsigned char)c;
            n = 1;
        } else if (c < 0x800) {
            b[0] = (unsigned char)(0xc0 | c >> 6);
            b[1] = (unsigned char)(0x80 | (c & 0x3f));
            n = 2;
        } else if (c < 0x10000 && (c < 0xd800 || c > 0xdfff)) {
            b[0] = (unsigned char)(0xe0 | c >> 12);
            b[1] = (unsigned char)(0x80 | (c >> 6 & 0x3f));
            b[2] = (unsigned char)(0x80 | (c & 0x3f));
            n = 3;
        } else if (c >= 0x10000 && c <= 0x10ffff) {
            b[0] = (unsigned char)(0xf0 | c >> 18);
            b[1] = (unsigned char)(0x80 | (c >> 12 & 0x3f));
            b[2] = (unsigned char)(0x80 | (c >> 6 & 0x3f));
            b[3] = (unsigned char)(0x80 | (c & 0x3f));
            n = 4;
        } else {
            b[0] = '?';
            n = 1;
        }
        if (o + n >= len)
            break;
        memcpy(out + o, b, n);
        o += n;
    }
    if (len)
        out[o] = 0;
}

/* The message of an event attribute structure as text. */
static const char *attr_text(const nvtxEventAttributes_t *a, char *buf, size_t len)
{
    if (!a)
        return "";
    switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
        return a->message.ascii ? a->message.ascii : "";
    case NVTX_MESSAGE_TYPE_UNICODE:
        narrow(a->message.unicode, buf, len);
        return buf;
    case NVTX_MESSAGE_TYPE_REGISTERED: {
        const char *s = hm_get(&strings, a->message.registered, buf, len);
        return s ? s : "";
    }
    default:
        return "";
    }
}

static const char *domain_name(nvtxDomainHandle_t d, char *buf, size_t len)
{
    if (!d)
        return NULL;
    return hm_get(&domains, d, buf, len);
}

static int range_push_sid(const char *domain, const char *name, const void *key);

static int range_push(const char *domain, const char *name) { return range_push_sid(domain, name, NULL); }

#ifdef GM_HAVE_REC
/* The recorder's id of a name pushed under a kept key (gm_nvtx_user_push_kept): PyTorch's module
 * hooks push the same ~25 module paths each step, and interning each again (the recorder's
 * per-thread cache holds 8) cost a hash, the recorder's lock and a compare, ~200 instructions
 * a push. Two ways a set, by a mix of the key's bits: direct-mapped by the top bits of key *
 * 2^64/phi, keys that lie at a fixed spacing (the path objects, one allocator size class
 * apart) met in a few slots and put each other out at every push (4 to 6 names interned again
 * a step on each thread, ~270 instructions each, as the heap's layout had it; with four ways,
 * 5 keys in one set still did). A key found in the second way moves to the first; a new one
 * takes the first and moves its holder to the second. Per thread, so that the callers need no lock
 * (torch_hooks.c pushes from autograd's thread without the GIL). */
#define SID_SETS 128
static __thread struct sid_way {
    const void *key;
    uint32_t sid, gen;
} kept_sid[SID_SETS][2] __attribute__((tls_model("initial-exec")));

static uint32_t name_sid(const void *key, const char *name)
{
    uint64_t k = (uintptr_t)key;
    k ^= k >> 33, k *= 0xff51afd7ed558ccdull, k ^= k >> 33; /* murmur3's finalizer, in part */
    struct sid_way *w = kept_sid[k & (SID_SETS - 1)];
    uint32_t gen = rec_generation();
    if (w[0].key == key && w[0].gen == gen && w[0].sid)
        return w[0].sid;
    if (w[1].key == key && w[1].gen == gen && w[1].sid) {
        struct sid_way hit = w[1];
        w[1] = w[0], w[0] = hit;
        return hit.sid;
    }
    uint32_t sid = rec_string(name);
    if (sid)
        w[1] = w[0], w[0] = (struct sid_way){key, sid, gen};
    return sid;
}
#endif

/* The thread's path with "/name" appended at the current depth, cut at PATH_LEN - 1; not
 * snprintf, whose format parsing cost more than the rest of the push (~800 instructions;
 * PyTorch's hooks push ~50 a step). Then one level deeper. The text is the debug log's alone
 * (dlog's lines): without GPUMEM_DEBUG_RANGES, read once by the constructor before any push, only
 * the depth is kept (the strlen and copy cost ~70 instructions a push, ~65 module range changes
 * a tiny GPT-2 step; tests/bench/README.md, "Thirteenth pass"). */
static void path_push(const char *name)
{
    if (debug_on && ts.depth < MAX_DEPTH) {
        size_t at = ts.len[ts.depth], room = PATH_LEN - 1 - at, nl = strlen(name);
        if (at && room) ts.path[at++] = '/', room--;
        if (nl > room) nl = room;
        memcpy(ts.path + at, name, nl);
        ts.path[at + nl] = 0;
        ts.len[ts.depth + 1] = at + nl;
    }
    ts.depth++;
}

/* One level up (ts.depth > 0). */
static void path_pop(void)
{
    ts.depth--;
    if (debug_on && ts.depth <= MAX_DEPTH)
        ts.path[ts.len[ts.depth < MAX_DEPTH ? ts.depth : MAX_DEPTH]] = 0;
}

static int range_push_sid(const char *domain, const char *name, const void *key)
{
    gm_stat_add(GM_ST_NVTX_RANGES, 1);
    path_push(name);
    dlog("push %ld %d %s %s", my_tid(), ts.depth, domain ? domain : "-", ts.path);
#ifdef GM_HAVE_REC
    if (gm_nvtx_recording()) {
        if (key && !domain)
            rec_range_push_sid(name_sid(key, name), name);
        else
            rec_range_push(domain, name);
    }
#else
    (void)key;
#endif
    return ts.depth - 1; /* nvtxRangePush returns the zero-based level of the new range */
}

static int range_pop(const char *domain)
{
    if (ts.depth <= 0)
        return -1;
    dlog("pop %ld %d %s %s", my_tid(), ts.depth, domain ? domain : "-", ts.path);
    path_pop();
#ifdef GM_HAVE_REC
    if (gm_nvtx_recording())
        rec_range_pop();
#endif
    return ts.depth;
}

/* range_pop(NULL) then range_push_sid(NULL, name, key) in one call, the recorder's two records
 * claimed together (rec_range_swap_sid): the same stack, log and records. */
static int range_swap_kept(const char *name, const void *key)
{
    if (ts.depth <= 0)
        return range_push_sid(NULL, name, key);
    dlog("pop %ld %d %s %s", my_tid(), ts.depth, "-", ts.path);
    path_pop();
    gm_stat_add(GM_ST_NVTX_RANGES, 1);
    path_push(name);
    dlog("push %ld %d %s %s", my_tid(), ts.depth, "-", ts.path);
#ifdef GM_HAVE_REC
    if (gm_nvtx_recording())
        rec_range_swap_sid(name_sid(key, name), name);
#else
    (void)key;
#endif
    return ts.depth - 1;
}

static _Atomic unsigned long long range_ids;

static nvtxRangeId_t range_start(const char *domain, const char *name)
{
    gm_stat_add(GM_ST_NVTX_RANGES, 1);
    nvtxRangeId_t id = 0;
#ifdef GM_HAVE_REC
    if (gm_nvtx_recording())
        id = rec_range_start(domain, name);
#endif
    if (!id)
        id = ++range_ids | (1ull << 63);
    dlog("start %llu %ld %s %s", (unsigned long long)id, my_tid(), domain ? domain : "-", name);
    return id;
}

static void range_end(nvtxRangeId_t id)
{
    dlog("end %llu %ld", (unsigned long long)id, my_tid());
#ifdef GM_HAVE_REC
    if (gm_nvtx_recording() && !(id >> 63))
        rec_range_end(id);
#endif
}

static void mark(const char *domain, const char *name)
{
    gm_stat_add(GM_ST_NVTX_MARKS, 1);
    dlog("mark %ld %s %s", my_tid(), domain ? domain : "-", name);
#ifdef GM_HAVE_REC
    if (gm_nvtx_recording())
        rec_mark(domain, name);
#endif
}

/* ---- chained tool ------------------------------------------------------------------------ */

static NvtxFunctionPointer next_core[NVTX_CBID_CORE_SIZE];
static NvtxFunctionPointer next_core2[NVTX_CBID_CORE2_SIZE];
#define NEXT(tab, id, type) ((type)(tab)[id])

/* ---- core handlers ----------------------------------------------------------------------- */

typedef void (*mark_ex_fn)(const nvtxEventAttributes_t *);
typedef void (*mark_a_fn)(const char *);
typedef void (*mark_w_fn)(const wchar_t *);
typedef nvtxRangeId_t (*start_ex_fn)(const nvtxEventAttributes_t *);
typedef nvtxRangeId_t (*start_a_fn)(const char *);
typedef nvtxRangeId_t (*start_w_fn)(const wchar_t *);
typedef void (*end_fn)(nvtxRangeId_t);
typedef int (*push_ex_fn)(const nvtxEventAttributes_t *);
typedef int (*push_a_fn)(const char *);
typedef int (*push_w_fn)(const wchar_t *);
typedef int (*pop_fn)(void);
typedef void (*name_thread_a_fn)(uint32_t, const char *);
typedef void (*name_thread_w_fn)(uint32_t, const wchar_t *);

static void h_MarkEx(const nvtxEventAttributes_t *a)
{
    char b[512];
    mark(NULL, attr_text(a, b, sizeof b));
    if (next_core[NVTX_CBID_CORE_MarkEx])
        NEXT(next_core, NVTX_CBID_CORE_MarkEx, mark_ex_fn)(a);
}
static void h_MarkA(const char *m)
{
    mark(NULL, m ? m : "");
    if (next_core[NVTX_CBID_CORE_MarkA])
        NEXT(next_core, NVTX_CBID_CORE_MarkA, mark_a_fn)(m);
}
static void h_MarkW(const wchar_t *m)
{
    char b[512];
    narrow(m, b, sizeof b);
    mark(NULL, b);
    if (next_core[NVTX_CBID_CORE_MarkW])
        NEXT(next_core, NVTX_CBID_CORE_MarkW, mark_w_fn)(m);
}
static nvtxRangeId_t h_RangeStartEx(const nvtxEventAttributes_t *a)
{
    char b[512];
    nvtxRangeId_t id = range_start(NULL, attr_text(a, b, sizeof b));
    if (next_core[NVTX_CBID_CORE_RangeStartEx])
        return NEXT(next_core, NVTX_CBID_CORE_RangeStartEx, start_ex_fn)(a);
    return id;
}
static nvtxRangeId_t h_RangeStartA(const char *m)
{
    nvtxRangeId_t id = range_start(NULL, m ? m : "");
    if (next_core[NVTX_CBID_CORE_RangeStartA])
        return NEXT(next_core, NVTX_CBID_CORE_RangeStartA, start_a_fn)(m);
    return id;
}
static nvtxRangeId_t h_RangeStartW(const wchar_t *m)
{
    char b[512];
    narrow(m, b, sizeof b);
    nvtxRangeId_t id = range_start(NULL, b);
    if (next_core[NVTX_CBID_CORE_RangeStartW])
        return NEXT(next_core, NVTX_CBID_CORE_RangeStartW, start_w_fn)(m);
    return id;
}
/* With a chained tool the range id handed out is the tool's (it must get its ids back), so
 * gpumem's own start/end pairing is lost to its recorder; the debug log keeps both. */
static void h_RangeEnd(nvtxRangeId_t id)
{
    range_end(id);
    if (next_core[NVTX_CBID_CORE_RangeEnd])
        NEXT(next_core, NVTX_CBID_CORE_RangeEnd, end_fn)(id);
}
static int h_RangePushEx(const nvtxEventAttributes_t *a)
{
    char b[512];
    int r = range_push(NULL, attr_text(a, b, sizeof b));
    if (next_core[NVTX_CBID_CORE_RangePushEx])
        NEXT(next_core, NVTX_CBID_CORE_RangePushEx, push_ex_fn)(a);
    return r;
}
static int h_RangePushA(const char *m)
{
    int r = range_push(NULL, m ? m : "");
    if (next_core[NVTX_CBID_CORE_RangePushA])
        NEXT(next_core, NVTX_CBID_CORE_RangePushA, push_a_fn)(m);
    return r;
}
/* gpumem_range_push / gpumem_range_pop (python.c): gpumem's own API, the same per-thread
 * stack as NVTX push/pop, not forwarded to a chained tool (the program did not call NVTX).
 * The exit handler is registered by the first (gm_exit_register_nvtx's exchange, a locked
 * instruction and a call, was paid on each of PyTorch's hooks' ~65 pushes a step). */
static _Atomic int user_exit_registered;
static inline void user_exit_register(void)
{
    if (__builtin_expect(!atomic_load_explicit(&user_exit_registered, memory_order_relaxed), 0)) {
        gm_exit_register_nvtx();
        atomic_store_explicit(&user_exit_registered, 1, memory_order_relaxed);
    }
}
int gm_nvtx_user_push(const char *name)
{
    user_exit_register();
    return range_push(NULL, name);
}
int gm_nvtx_user_push_kept(const void *key, const char *name)
{
    user_exit_register();
    return range_push_sid(NULL, name, key);
}
int gm_nvtx_user_pop(void) { return range_pop(NULL); }
int gm_nvtx_user_swap_kept(const void *key, const char *name)
{
    user_exit_register();
    return range_swap_kept(name, key);
}

static int h_RangePushW(const wchar_t *m)
{
    char b[512];
    narrow(m, b, sizeof b);
    int r = range_push(NULL, b);
    if (next_core[NVTX_CBID_CORE_RangePushW])
        NEXT(next_core, NVTX_CBID_CORE_RangePushW, push_w_fn)(m);
    return r;
}
static int h_RangePop(void)
{
    int r = range_pop(NULL);
    if (next_core[NVTX_CBID_CORE_RangePop])
        NEXT(next_core, NVTX_CBID_CORE_RangePop, pop_fn)();
    return r;
}
/* the thread's name, also in the recording (threads.name), as the program gave it */
static void name_thread(uint32_t tid, const char *name)
{
    dlog("thread %u %s", tid, name);
#ifdef GM_HAVE_REC
    if (gm_nvtx_recording())
        rec_thread_name(tid, name);
#endif
}

static void h_NameOsThreadA(uint32_t tid, const char *name)
{
    name_thread(tid, name ? name : "");
    if (next_core[NVTX_CBID_CORE_NameOsThreadA])
        NEXT(next_core, NVTX_CBID_CORE_NameOsThreadA, name_thread_a_fn)(tid, name);
}
static void h_NameOsThreadW(uint32_t tid, const wchar_t *name)
{
    char b[256];
    narrow(name, b, sizeof b);
    name_thread(tid, b);
    if (next_core[NVTX_CBID_CORE_NameOsThreadW])
        NEXT(next_core, NVTX_CBID_CORE_NameOsThreadW, name_thread_w_fn)(tid, name);
}

/* ---- core2 (domains) handlers -------------------------------------------------------------- */

typedef void (*dmark_fn)(nvtxDomainHandle_t, const nvtxEventAttributes_t *);
typedef nvtxRangeId_t (*dstart_fn)(nvtxDomainHandle_t, const nvtxEventAttributes_t *);
typedef void (*dend_fn)(nvtxDomainHandle_t, nvtxRangeId_t);
typedef int (*dpush_fn)(nvtxDomainHandle_t, const nvtxEventAttributes_t *);
typedef int (*dpop_fn)(nvtxDomainHandle_t);
typedef nvtxStringHandle_t (*dregA_fn)(nvtxDomainHandle_t, const char *);
typedef nvtxStringHandle_t (*dregW_fn)(nvtxDomainHandle_t, const wchar_t *);
typedef nvtxDomainHandle_t (*dcreateA_fn)(const char *);
typedef nvtxDomainHandle_t (*dcreateW_fn)(const wchar_t *);
typedef void (*ddestroy_fn)(nvtxDomainHandle_t);

static void h_DomainMarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char b[512], db[256];
    mark(domain_name(d, db, sizeof db), attr_text(a, b, sizeof b));
    if (next_core2[NVTX_CBID_CORE2_DomainMarkEx])
        NEXT(next_core2, NVTX_CBID_CORE2_DomainMarkEx, dmark_fn)(d, a);
}
static nvtxRangeId_t h_DomainRangeStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char b[512], db[256];
    nvtxRangeId_t id = range_start(domain_name(d, db, sizeof db), attr_text(a, b, sizeof b));
    if (next_core2[NVTX_CBID_CORE2_DomainRangeStartEx])
        return NEXT(next_core2, NVTX_CBID_CORE2_DomainRangeStartEx, dstart_fn)(d, a);
    return id;
}
static void h_DomainRangeEnd(nvtxDomainHandle_t d, nvtxRangeId_t id)
{
    range_end(id);
    if (next_core2[NVTX_CBID_CORE2_DomainRangeEnd])
        NEXT(next_core2, NVTX_CBID_CORE2_DomainRangeEnd, dend_fn)(d, id);
}
static int h_DomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char b[512], db[256];
    int r = range_push(domain_name(d, db, sizeof db), attr_text(a, b, sizeof b));
    if (next_core2[NVTX_CBID_CORE2_DomainRangePushEx])
        NEXT(next_core2, NVTX_CBID_CORE2_DomainRangePushEx, dpush_fn)(d, a);
    return r;
}
static int h_DomainRangePop(nvtxDomainHandle_t d)
{
    char db[256];
    int r = range_pop(domain_name(d, db, sizeof db));
    if (next_core2[NVTX_CBID_CORE2_DomainRangePop])
        NEXT(next_core2, NVTX_CBID_CORE2_DomainRangePop, dpop_fn)(d);
    return r;
}

/* Handles: the chained tool's when it made one (it must get its own back), else a fresh
 * allocation of gpumem's that only serves as a key. */
static void *own_handle(void)
{
    return malloc(1);
}

static nvtxStringHandle_t h_DomainRegisterStringA(nvtxDomainHandle_t d, const char *s)
{
    nvtxStringHandle_t h = NULL;
    if (next_core2[NVTX_CBID_CORE2_DomainRegisterStringA])
        h = NEXT(next_core2, NVTX_CBID_CORE2_DomainRegisterStringA, dregA_fn)(d, s);
    if (!h)
        h = own_handle();
    if (h)
        hm_put(&strings, h, s);
    return h;
}
static nvtxStringHandle_t h_DomainRegisterStringW(nvtxDomainHandle_t d, const wchar_t *s)
{
    char b[512];
    narrow(s, b, sizeof b);
    nvtxStringHandle_t h = NULL;
    if (next_core2[NVTX_CBID_CORE2_DomainRegisterStringW])
        h = NEXT(next_core2, NVTX_CBID_CORE2_DomainRegisterStringW, dregW_fn)(d, s);
    if (!h)
        h = own_handle();
    if (h)
        hm_put(&strings, h, b);
    return h;
}
static nvtxDomainHandle_t h_DomainCreateA(const char *name)
{
    nvtxDomainHandle_t h = NULL;
    if (next_core2[NVTX_CBID_CORE2_DomainCreateA])
        h = NEXT(next_core2, NVTX_CBID_CORE2_DomainCreateA, dcreateA_fn)(name);
    if (!h)
        h = own_handle();
    if (h)
        hm_put(&domains, h, name);
    dlog("domain %s", name ? name : "");
    return h;
}
static nvtxDomainHandle_t h_DomainCreateW(const wchar_t *name)
{
    char b[256];
    narrow(name, b, sizeof b);
    nvtxDomainHandle_t h = NULL;
    if (next_core2[NVTX_CBID_CORE2_DomainCreateW])
        h = NEXT(next_core2, NVTX_CBID_CORE2_DomainCreateW, dcreateW_fn)(name);
    if (!h)
        h = own_handle();
    if (h)
        hm_put(&domains, h, b);
    dlog("domain %s", b);
    return h;
}
static void h_DomainDestroy(nvtxDomainHandle_t d)
{
    /* the name stays mapped: events may still be in flight with this handle */
    if (next_core2[NVTX_CBID_CORE2_DomainDestroy])
        NEXT(next_core2, NVTX_CBID_CORE2_DomainDestroy, ddestroy_fn)(d);
}

/* ---- installation ---------------------------------------------------------------------- */

struct slot_def {
    unsigned id;
    NvtxFunctionPointer fn;
};
static const struct slot_def core_slots[] = {
    {NVTX_CBID_CORE_MarkEx, (NvtxFunctionPointer)h_MarkEx},
    {NVTX_CBID_CORE_MarkA, (NvtxFunctionPointer)h_MarkA},
    {NVTX_CBID_CORE_MarkW, (NvtxFunctionPointer)h_MarkW},
    {NVTX_CBID_CORE_RangeStartEx, (NvtxFunctionPointer)h_RangeStartEx},
    {NVTX_CBID_CORE_RangeStartA, (NvtxFunctionPointer)h_RangeStartA},
    {NVTX_CBID_CORE_RangeStartW, (NvtxFunctionPointer)h_RangeStartW},
    {NVTX_CBID_CORE_RangeEnd, (NvtxFunctionPointer)h_RangeEnd},
    {NVTX_CBID_CORE_RangePushEx, (NvtxFunctionPointer)h_RangePushEx},
    {NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)h_RangePushA},
    {NVTX_CBID_CORE_RangePushW, (NvtxFunctionPointer)h_RangePushW},
    {NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)h_RangePop},
    {NVTX_CBID_CORE_NameOsThreadA, (NvtxFunctionPointer)h_NameOsThreadA},
    {NVTX_CBID_CORE_NameOsThreadW, (NvtxFunctionPointer)h_NameOsThreadW},
};
static const struct slot_def core2_slots[] = {
    {NVTX_CBID_CORE2_DomainMarkEx, (NvtxFunctionPointer)h_DomainMarkEx},
    {NVTX_CBID_CORE2_DomainRangeStartEx, (NvtxFunctionPointer)h_DomainRangeStartEx},
    {NVTX_CBID_CORE2_DomainRangeEnd, (NvtxFunctionPointer)h_DomainRangeEnd},
    {NVTX_CBID_CORE2_DomainRangePushEx, (NvtxFunctionPointer)h_DomainRangePushEx},
    {NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)h_DomainRangePop},
    {NVTX_CBID_CORE2_DomainRegisterStringA, (NvtxFunctionPointer)h_DomainRegisterStringA},
    {NVTX_CBID_CORE2_DomainRegisterStringW, (NvtxFunctionPointer)h_DomainRegisterStringW},
    {NVTX_CBID_CORE2_DomainCreateA, (NvtxFunctionPointer)h_DomainCreateA},
    {NVTX_CBID_CORE2_DomainCreateW, (NvtxFunctionPointer)h_DomainCreateW},
    {NVTX_CBID_CORE2_DomainDestroy, (NvtxFunctionPointer)h_DomainDestroy},
};

static void *chain_h;
static pthread_once_t chain_once = PTHREAD_ONCE_INIT;
static void open_chain(void)
{
    if (!chain_path[0])
        return;
    chain_h = dlopen(chain_path, RTLD_NOW | RTLD_LOCAL);
    if (!chain_h)
        gm_warn("NVTX: cannot load the tool in NVTX_INJECTION64_PATH (%s): %s; continuing "
                "without it",
                chain_path, dlerror());
}

static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;

static void install(NvtxFunctionTable t, unsigned size, const struct slot_def *defs, size_t n,
                    NvtxFunctionPointer *next, unsigned next_size, NvtxFunctionPointer *before)
{
    for (size_t i = 0; i < n; i++) {
        unsigned id = defs[i].id;
        if (id >= size || !t[id])
            continue;
        /* a slot the chained tool changed is the tool's handler */
        if (before && id < next_size && *t[id] != before[id] && *t[id] && !next[id])
            next[id] = *t[id];
        *t[id] = defs[i].fn;
    }
}

GM_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
    if (!get)
        return 0;
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
    if (!cb || cb->struct_size < sizeof *cb || !cb->GetModuleFunctionTable)
        return 0;
    NvtxFunctionTable core = NULL, core2 = NULL;
    unsigned ncore = 0, ncore2 = 0;
    if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &ncore))
        core = NULL;
    if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &ncore2))
        core2 = NULL;

    gm_exit_register_nvtx();
    pthread_mutex_lock(&install_lock);
    NvtxFunctionPointer before_core[NVTX_CBID_CORE_SIZE] = {0};
    NvtxFunctionPointer before_core2[NVTX_CBID_CORE2_SIZE] = {0};
    int chained = 0;
    pthread_once(&chain_once, open_chain);
    if (chain_h) {
        NvtxInitializeInjectionNvtxFunc_t tool_init =
            (NvtxInitializeInjectionNvtxFunc_t)gm_real_dlsym_fn(chain_h, "InitializeInjectionNvtx2");
        if (tool_init) {
            for (unsigned i = 0; core && i < ncore && i < NVTX_CBID_CORE_SIZE; i++)
                before_core[i] = core[i] ? *core[i] : NULL;
            for (unsigned i = 0; core2 && i < ncore2 && i < NVTX_CBID_CORE2_SIZE; i++)
                before_core2[i] = core2[i] ? *core2[i] : NULL;
            chained = tool_init(get) != 0;
        }
    }
    if (core)
        install(core, ncore, core_slots, sizeof core_slots / sizeof core_slots[0], next_core,
                NVTX_CBID_CORE_SIZE, chained ? before_core : NULL);
    if (core2)
        install(core2, ncore2, core2_slots, sizeof core2_slots / sizeof core2_slots[0],
                next_core2, NVTX_CBID_CORE2_SIZE, chained ? before_core2 : NULL);
    pthread_mutex_unlock(&install_lock);
    return 1;
}

/* ---- memory extension ------------------------------------------------------------------- */

static nvtxMemHeapHandle_t m_HeapRegister(nvtxDomainHandle_t d, const nvtxMemHeapDesc_t *desc)
{
    (void)d;
    nvtxMemHeapHandle_t h = own_handle();
    if (desc && desc->type == NVTX_MEM_TYPE_VIRTUAL_ADDRESS && desc->typeSpecificDesc) {
        const nvtxMemVirtualRangeDesc_t *r = desc->typeSpecificDesc;
        dlog("heap %p %zu", r->ptr, r->size);
    }
    return h;
}
static void m_HeapUnregister(nvtxDomainHandle_t d, nvtxMemHeapHandle_t h)
{
    (void)d, (void)h;
}
static void m_HeapReset(nvtxDomainHandle_t d, nvtxMemHeapHandle_t h)
{
    (void)d, (void)h;
}
static void m_RegionsRegister(nvtxDomainHandle_t d, const nvtxMemRegionsRegisterBatch_t *b)
{
    (void)d;
    if (!b || b->regionType != NVTX_MEM_TYPE_VIRTUAL_ADDRESS || !b->regionDescElements)
        return;
    size_t es = b->regionDescElementSize ? b->regionDescElementSize
                                         : sizeof(nvtxMemVirtualRangeDesc_t);
    for (size_t i = 0; i < b->regionCount; i++) {
        const nvtxMemVirtualRangeDesc_t *r =
            (const void *)((const char *)b->regionDescElements + i * es);
        /* a region's handle is its address: names can refer to either */
        if (b->regionHandleElementsOut)
            b->regionHandleElementsOut[i] = (nvtxMemRegionHandle_t)(uintptr_t)r->ptr;
        dlog("region %p %zu", r->ptr, r->size);
    }
}
static void m_RegionsUnregister(nvtxDomainHandle_t d, const nvtxMemRegionsUnregisterBatch_t *b)
{
    (void)d, (void)b;
}
static void m_RegionsName(nvtxDomainHandle_t d, const nvtxMemRegionsNameBatch_t *b)
{
    (void)d;
    if (!b || !b->regionElements)
        return;
    size_t es = b->regionElementSize ? b->regionElementSize : sizeof(nvtxMemRegionNameDesc_t);
    for (size_t i = 0; i < b->regionCount; i++) {
        const nvtxMemRegionNameDesc_t *e =
            (const void *)((const char *)b->regionElements + i * es);
        const void *ptr = e->regionRefType == NVTX_MEM_REGION_REF_TYPE_HANDLE
                              ? (const void *)e->region.handle
                              : e->region.pointer;
        char buf[512];
        const char *name = "";
        if (e->nameType == NVTX_MESSAGE_TYPE_ASCII && e->name.ascii)
            name = e->name.ascii;
        else if (e->nameType == NVTX_MESSAGE_TYPE_UNICODE) {
            narrow(e->name.unicode, buf, sizeof buf);
            name = buf;
        } else if (e->nameType == NVTX_MESSAGE_TYPE_REGISTERED) {
            const char *s = hm_get(&strings, e->name.registered, buf, sizeof buf);
            name = s ? s : "";
        }
        int r = gm_name_internal(ptr, name);
        dlog("name %p %s %s", ptr, name, r == 0 ? "ok" : "unknown");
    }
}

GM_EXPORT int InitializeInjectionNvtxExtension(nvtxExtModuleInfo_t *info)
{
    if (!info || info->moduleId != NVTX_EXT_MODULEID_MEM || info->segmentsCount < 1 ||
        !info->segments)
        return 1; /* other extensions: nothing to install, not a failure */
    if (info->compatId != NVTX_EXT_COMPATID_MEM)
        return 1;
    nvtxExtModuleSegment_t *seg = &info->segments[0];
    struct {
        unsigned id;
        intptr_t fn;
    } defs[] = {
        {NVTX3EXT_CBID_nvtxMemHeapRegister, (intptr_t)m_HeapRegister},
        {NVTX3EXT_CBID_nvtxMemHeapUnregister, (intptr_t)m_HeapUnregister},
        {NVTX3EXT_CBID_nvtxMemHeapReset, (intptr_t)m_HeapReset},
        {NVTX3EXT_CBID_nvtxMemRegionsRegister, (intptr_t)m_RegionsRegister},
        {NVTX3EXT_CBID_nvtxMemRegionsUnregister, (intptr_t)m_RegionsUnregister},
        {NVTX3EXT_CBID_nvtxMemRegionsName, (intptr_t)m_RegionsName},
    };
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        if (defs[i].id < seg->slotCount)
            seg->functionSlots[defs[i].id] = defs[i].fn;
    return 1;
}

/* ---- constructor, fork ------------------------------------------------------------------- */

void gm_nvtx_constructor(void)
{
    const char *dbg = getenv("GPUMEM_DEBUG_RANGES");
    debug_on = dbg && *dbg;
    ctor_pid = getpid();
    Dl_info di;
    if (!dladdr((void *)gm_nvtx_constructor, &di) || !di.dli_fname)
        return;
    if (!realpath(di.dli_fname, self_path))
        snprintf(self_path, sizeof self_path, "%s", di.dli_fname);
    const char *prev = getenv("NVTX_INJECTION64_PATH");
    const char *inherited = getenv("GPUMEM_NVTX_CHAIN");
    if (prev && *prev) {
        char rp[PATH_MAX];
        const char *cmp = realpath(prev, rp) ? rp : prev;
        if (strcmp(cmp, self_path) != 0) {
            snprintf(chain_path, sizeof chain_path, "%s", prev);
            setenv("GPUMEM_NVTX_CHAIN", chain_path, 1); /* children chain to it as well */
        } else if (inherited && *inherited) {
            snprintf(chain_path, sizeof chain_path, "%s", inherited);
        }
    }
    setenv("NVTX_INJECTION64_PATH", self_path, 1);
}

/* For tests and the NVTX fuzzer (tests/fuzz/nvtx_fuzz.c), so that each input starts where the
 * first did: forgets the domain and registered-string maps (their handles are gpumem's own:
 * no chained tool may be loaded), the debug log, the calling thread's range stack and the
 * range-id counter. Never called by the library itself. */
static void hm_forget(struct hmap *m)
{
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) {
            free((void *)m->keys[i]);
            free(m->vals[i]);
        }
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->n = 0;
    pthread_mutex_unlock(&m->lock);
}

void gm_nvtx_test_reset(void)
{
    if (chain_h)
        return; /* the maps' handles are the tool's: not ours to free */
    hm_forget(&domains);
    hm_forget(&strings);
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < log_n; i++)
        free(log_lines[i]);
    free(log_lines);
    log_lines = NULL;
    log_n = log_cap = 0;
    pthread_mutex_unlock(&log_lock);
    memset(&ts, 0, sizeof ts);
    atomic_store(&range_ids, 0);
}

void gm_nvtx_fork_prepare(void)
{
    pthread_mutex_lock(&log_lock);
    pthread_mutex_lock(&domains.lock);
    pthread_mutex_lock(&strings.lock);
}
void gm_nvtx_fork_parent(void)
{
    pthread_mutex_unlock(&strings.lock);
    pthread_mutex_unlock(&domains.lock);
    pthread_mutex_unlock(&log_lock);
}
void gm_nvtx_fork_child(void)
{
    pthread_mutex_init(&strings.lock, NULL);
    pthread_mutex_init(&domains.lock, NULL);
    pthread_mutex_init(&log_lock, NULL);
    ts.tid = 0; /* the child's thread has a new id */
    /* the child writes its own dump: start from an empty log (the parent's lines are the
     * parent's to write) */
    for (size_t i = 0; i < log_n; i++)
        free(log_lines[i]);
    log_n = 0;
}
