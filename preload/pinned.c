/*
 * pinned.c — pinned host memory: a caching allocator on a jemalloc arena.
 *
 * cudaMallocHost / cudaHostAlloc / cuMemAllocHost / cuMemHostAlloc are slow (page-locking is a
 * kernel operation) and programs call them in loops. gpumem serves them from a private jemalloc
 * arena whose extent hooks obtain memory with mmap and pin it with the real
 * cuMemHostRegister_v2. Small requests share pinned slabs, large ones get pinned extents, and
 * freed memory stays pinned and cached in the arena (decay is disabled for it): a pinned page
 * is paid for once.
 *
 * jemalloc is linked from Debian's static libjemalloc_pic.a with its public names renamed to
 * gm_je_* (objcopy --redefine-syms, see module.mk) and hidden by the version script: the
 * program's own malloc stays glibc's (or whatever it was), and gpumem only ever talks to
 * jemalloc through mallctl/mallocx/dallocx with an explicit arena and no thread cache.
 *
 * Extent rules that keep the pinning exact:
 *   - every alloc hook call is one mmap + one registration, remembered in `regs`;
 *   - merge is allowed only inside one registration (jemalloc may otherwise join two adjacent
 *     mappings and later hand back a range no single cuMemHostUnregister covers);
 *   - split is allowed (pieces stay inside their registration);
 *   - dalloc/destroy unpin and unmap only a whole registration; for a piece they decline and
 *     jemalloc keeps it (it stays pinned and cached) — decommit and purge are declined too.
 *
 * Live pointers are kept in a small hash set, so a double cudaFreeHost is answered with
 * cudaErrorInvalidValue instead of corrupting jemalloc.
 */
#include "preload/gm_internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- the renamed jemalloc API (declared here: jemalloc.h would declare malloc & co) ------ */
typedef struct gm_extent_hooks gm_extent_hooks_t;
struct gm_extent_hooks {
    void *(*alloc)(gm_extent_hooks_t *, void *, size_t, size_t, bool *, bool *, unsigned);
    bool (*dalloc)(gm_extent_hooks_t *, void *, size_t, bool, unsigned);
    void (*destroy)(gm_extent_hooks_t *, void *, size_t, bool, unsigned);
    bool (*commit)(gm_extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
    bool (*decommit)(gm_extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
    bool (*purge_lazy)(gm_extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
    bool (*purge_forced)(gm_extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
    bool (*split)(gm_extent_hooks_t *, void *, size_t, size_t, size_t, bool, unsigned);
    bool (*merge)(gm_extent_hooks_t *, void *, size_t, void *, size_t, bool, unsigned);
};
int gm_je_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
void *gm_je_mallocx(size_t size, int flags);
void gm_je_dallocx(void *ptr, int flags);
size_t gm_je_sallocx(const void *ptr, int flags);
#define GM_MALLOCX_LG_ALIGN(la) ((int)(la))
#define GM_MALLOCX_TCACHE_NONE ((int)((-1 + 2) << 8))
#define GM_MALLOCX_ARENA(a) ((((int)(a)) + 1) << 20)

/* Options for gpumem's private jemalloc: one automatic arena (unused), no thread caches, no
 * background threads. Overrides the weak definition in the renamed archive. */
GM_HIDDEN const char *gm_je_malloc_conf = "narenas:1,tcache:false,background_thread:false";

/* ---- registrations ------------------------------------------------------------------------ */
#define MAX_REGS 4096
struct reg {
    uintptr_t base;
    size_t size;
};
static struct reg regs[MAX_REGS];
static size_t nregs;
static pthread_mutex_t regs_lock = PTHREAD_MUTEX_INITIALIZER;

static long reg_find(uintptr_t p) /* under regs_lock */
{
    for (size_t i = 0; i < nregs; i++)
        if (p >= regs[i].base && p < regs[i].base + regs[i].size)
            return (long)i;
    return -1;
}

static _Atomic unsigned host_register_flags =
    CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;

static void *eh_alloc(gm_extent_hooks_t *h, void *new_addr, size_t size, size_t alignment,
                      bool *zero, bool *commit, unsigned ind)
{
    (void)h, (void)ind;
    if (new_addr || !gm_real.cuMemHostRegister_v2)
        return NULL; /* growing in place is not supported: jemalloc then allocates anew */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t align = alignment < page ? page : alignment;
    size_t len = size + align;
    char *raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    uintptr_t p = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
    if (p > (uintptr_t)raw)
        munmap(raw, p - (uintptr_t)raw);
    size_t tail = (uintptr_t)raw + len - (p + size);
    if (tail)
        munmap((void *)(p + size), tail);
    /* Pin first, without regs_lock: the driver takes its own lock, and the fork handlers take
     * the driver's before ours (handlers run in reverse registration order), so holding
     * regs_lock across a driver call could deadlock a fork. */
    unsigned fl = atomic_load(&host_register_flags);
    CUstreamCaptureMode saved;
    int relaxed = gm_capture_relax(&saved); /* gpumem's call, not the program's */
    CUresult r = GM_DRV(GM_DRV_HOST_REGISTER, gm_real.cuMemHostRegister_v2((void *)p, size, fl));
    if (r == CUDA_ERROR_INVALID_VALUE && fl) {
        atomic_store(&host_register_flags, 0u); /* a driver that only takes the plain form */
        r = GM_DRV(GM_DRV_HOST_REGISTER, gm_real.cuMemHostRegister_v2((void *)p, size, 0));
    }
    gm_capture_unrelax(relaxed, saved);
    if (r != CUDA_SUCCESS) {
        munmap((void *)p, size);
        return NULL;
    }
    pthread_mutex_lock(&regs_lock);
    if (nregs == MAX_REGS) {
        pthread_mutex_unlock(&regs_lock);
        GM_DRV(GM_DRV_HOST_UNREGISTER, gm_real.cuMemHostUnregister((void *)p));
        munmap((void *)p, size);
        return NULL;
    }
    regs[nregs].base = p;
    regs[nregs].size = size;
    nregs++;
    pthread_mutex_unlock(&regs_lock);
    gm_stat_add(GM_ST_HOST_REGISTER, 1);
    *zero = true;
    *commit = true;
    return (void *)p;
}

static bool unpin_whole(void *addr, size_t size)
{
    pthread_mutex_lock(&regs_lock);
    long i = reg_find((uintptr_t)addr);
    if (i < 0 || regs[i].base != (uintptr_t)addr || regs[i].size != size) {
        pthread_mutex_unlock(&regs_lock);
        return false;
    }
    regs[i] = regs[--nregs];
    pthread_mutex_unlock(&regs_lock);
    GM_DRV(GM_DRV_HOST_UNREGISTER, gm_real.cuMemHostUnregister(addr));
    gm_stat_add(GM_ST_HOST_UNREGISTER, 1);
    munmap(addr, size);
    return true;
}

static bool eh_dalloc(gm_extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned ind)
{
    (void)h, (void)committed, (void)ind;
    return !unpin_whole(addr, size); /* false = done; true = declined, jemalloc keeps it */
}

static void eh_destroy(gm_extent_hooks_t *h, void *addr, size_t size, bool committed,
                       unsigned ind)
{
    (void)h, (void)committed, (void)ind;
    unpin_whole(addr, size);
}

static bool eh_commit(gm_extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len,
                      unsigned ind)
{
    (void)h, (void)addr, (void)size, (void)off, (void)len, (void)ind;
    return false; /* pinned memory is always committed */
}

static bool eh_decommit(gm_extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len,
                        unsigned ind)
{
    (void)h, (void)addr, (void)size, (void)off, (void)len, (void)ind;
    return true; /* declined */
}

static bool eh_split(gm_extent_hooks_t *h, void *addr, size_t size, size_t a, size_t b,
                     bool committed, unsigned ind)
{
    (void)h, (void)addr, (void)size, (void)a, (void)b, (void)committed, (void)ind;
    return false;
}

static bool eh_merge(gm_extent_hooks_t *h, void *a, size_t sa, void *b, size_t sb, bool committed,
                     unsigned ind)
{
    (void)h, (void)sa, (void)sb, (void)committed, (void)ind;
    pthread_mutex_lock(&regs_lock);
    long ia = reg_find((uintptr_t)a), ib = reg_find((uintptr_t)b);
    pthread_mutex_unlock(&regs_lock);
    return !(ia >= 0 && ia == ib);
}

static gm_extent_hooks_t hooks = {eh_alloc, eh_dalloc, eh_destroy, eh_commit, eh_decommit,
                                  NULL,     NULL,      eh_split,   eh_merge};
static unsigned arena = 0;
static int arena_ok;
static pthread_once_t arena_once = PTHREAD_ONCE_INIT;

static void arena_create(void)
{
    gm_extent_hooks_t *hp = &hooks;
    unsigned ind = 0;
    size_t sz = sizeof ind;
    if (gm_je_mallctl("arenas.create", &ind, &sz, &hp, sizeof hp) != 0) {
        gm_warn("pinned host pool unavailable (jemalloc arenas.create failed); "
                "pinned allocations go to the driver");
        return;
    }
    /* never purge: the point of the pool is to keep pages pinned */
    char name[64];
    ssize_t never = -1;
    snprintf(name, sizeof name, "arena.%u.dirty_decay_ms", ind);
    gm_je_mallctl(name, NULL, NULL, &never, sizeof never);
    snprintf(name, sizeof name, "arena.%u.muzzy_decay_ms", ind);
    gm_je_mallctl(name, NULL, NULL, &never, sizeof never);
    arena = ind;
    arena_ok = 1;
}

/* ---- live pointers ------------------------------------------------------------------------ */
/* Each live allocation with the size the program asked for and a process-unique id: pointer
 * queries answer for it (cuPointerGetAttribute & co. would otherwise see the pinned extent). */
struct live_ent {
    uintptr_t p; /* 0 empty, TOMB removed */
    size_t size;
    unsigned long long id;
};
static struct live_ent *live;
static size_t live_cap, live_used, live_n;
static unsigned long long live_next_id;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
#define TOMB ((uintptr_t)1)

static size_t live_hash(uintptr_t p) { return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull); }

static int live_rehash(void)
{
    size_t ncap = live_n * 4 > live_cap ? (live_cap ? live_cap * 2 : 256) : (live_cap ? live_cap : 256);
    struct live_ent *n = calloc(ncap, sizeof *n);
    if (!n)
        return -1;
    for (size_t i = 0; i < live_cap; i++) {
        if (live[i].p <= TOMB)
            continue;
        size_t j = live_hash(live[i].p) & (ncap - 1);
        while (n[j].p)
            j = (j + 1) & (ncap - 1);
        n[j] = live[i];
    }
    free(live);
    live = n;
    live_cap = ncap;
    live_used = live_n;
    return 0;
}

static int live_add(uintptr_t p, size_t size)
{
    pthread_mutex_lock(&live_lock);
    if ((live_used + 1) * 2 > live_cap && live_rehash()) {
        pthread_mutex_unlock(&live_lock);
        return -1;
    }
    size_t j = live_hash(p) & (live_cap - 1);
    while (live[j].p > TOMB)
        j = (j + 1) & (live_cap - 1);
    if (!live[j].p)
        live_used++;
    live[j].p = p;
    live[j].size = size;
    live[j].id = ++live_next_id;
    live_n++;
    pthread_mutex_unlock(&live_lock);
    return 0;
}

static int live_remove(uintptr_t p)
{
    int found = 0;
    pthread_mutex_lock(&live_lock);
    if (live_cap) {
        size_t j = live_hash(p) & (live_cap - 1);
        while (live[j].p) {
            if (live[j].p == p) {
                live[j].p = TOMB;
                live_n--;
                found = 1;
                break;
            }
            j = (j + 1) & (live_cap - 1);
        }
    }
    pthread_mutex_unlock(&live_lock);
    return found;
}

/* ---- API ---------------------------------------------------------------------------------- */

static int flags_for(size_t size)
{
    /* page alignment for page-sized and larger requests (what cudaMallocHost gives), 256 B
     * below (the alignment CUDA guarantees for any allocation) */
    int lg = size >= 4096 ? 12 : 8;
    return GM_MALLOCX_ARENA(arena) | GM_MALLOCX_TCACHE_NONE | GM_MALLOCX_LG_ALIGN(lg);
}

CUresult gm_pinned_alloc(void **out, size_t size)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (size == 0) {
        *out = NULL;
        return CUDA_SUCCESS;
    }
    pthread_once(&arena_once, arena_create);
    if (!arena_ok) {
        CUresult r = GM_DRV(GM_DRV_HOST_ALLOC, gm_real.cuMemAllocHost_v2(out, size));
        if (r == CUDA_SUCCESS) {
            gm_stat_add(GM_ST_HOST_PASSTHROUGH, 1);
            gm_pt_add((uintptr_t)*out, size, GM_PT_HOST, -1);
            gm_event(GM_EV_HOST_ALLOC, -1, 0, (uintptr_t)*out, size, size);
        }
        return r;
    }
    int fl = flags_for(size);
    void *p = gm_je_mallocx(size, fl);
    if (!p) {
        gm_stat_add(GM_ST_OOM, 1);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (live_add((uintptr_t)p, size)) {
        gm_je_dallocx(p, fl);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    gm_stat_add(GM_ST_HOST_ALLOC, 1);
    gm_event(GM_EV_HOST_ALLOC, -1, 0, (uintptr_t)p, gm_je_sallocx(p, fl), size);
    *out = p;
    return CUDA_SUCCESS;
}

int gm_pinned_owns(const void *ptr)
{
    if (!arena_ok || !ptr)
        return 0;
    pthread_mutex_lock(&regs_lock);
    long i = reg_find((uintptr_t)ptr);
    pthread_mutex_unlock(&regs_lock);
    return i >= 0;
}

/* The live pinned allocation containing ptr: its start by hash, an interior pointer by a scan
 * (pointer queries on interior pinned addresses are rare). */
int gm_pinned_find(const void *ptr, struct gm_alloc_ref *out)
{
    if (!gm_pinned_owns(ptr))
        return 0;
    uintptr_t p = (uintptr_t)ptr;
    int found = -1;
    pthread_mutex_lock(&live_lock);
    if (live_cap) {
        size_t j = live_hash(p) & (live_cap - 1);
        struct live_ent *hit = NULL;
        while (live[j].p && !hit) {
            if (live[j].p == p)
                hit = &live[j];
            j = (j + 1) & (live_cap - 1);
        }
        for (size_t i = 0; i < live_cap && !hit; i++)
            if (live[i].p > TOMB && p >= live[i].p && p - live[i].p < live[i].size)
                hit = &live[i];
        if (hit) {
            out->base = hit->p;
            out->size = hit->size;
            out->id = (3ull << 62) | hit->id;
            out->device = -1;
            out->pooled = 0;
            found = 1;
        }
    }
    pthread_mutex_unlock(&live_lock);
    return found;
}

/* Blocks freed while a capture was underway (no implied synchronization then): the pool hands
 * them out again only after a later cudaFreeHost has synchronized the device. */
static void **deferred;
static _Atomic size_t ndeferred;
static size_t capdeferred;
static pthread_mutex_t deferred_lock = PTHREAD_MUTEX_INITIALIZER;

static int pinned_free(void *ptr, CUresult *res, int defer)
{
    if (!gm_pinned_owns(ptr))
        return 0;
    if (!live_remove((uintptr_t)ptr)) {
        /* inside the pool but not a live allocation's start: inside one (interior), or freed
         * twice */
        struct gm_alloc_ref in;
        if (gm_pinned_find(ptr, &in) == 1) {
            gm_stat_add(GM_ST_FAILED, 1);
            gm_rec_interior_free(-1, 0, (uintptr_t)ptr, 0); /* host events carry no id */
        } else {
            gm_stat_add(GM_ST_DOUBLE_FREE, 1);
            gm_event(GM_EV_DOUBLE_FREE, -1, 0, (uintptr_t)ptr, 0, 0);
        }
        *res = CUDA_ERROR_INVALID_VALUE;
        return 1;
    }
    int fl = GM_MALLOCX_ARENA(arena) | GM_MALLOCX_TCACHE_NONE;
    size_t sz = gm_je_sallocx(ptr, fl);
    /* the event before the block goes back to the arena: once it has, another thread's
     * cudaMallocHost may get the same address and record it, and a free written after that
     * would pair with the wrong allocation */
    gm_stat_add(GM_ST_HOST_FREE, 1);
    gm_event(GM_EV_HOST_FREE, -1, 0, (uintptr_t)ptr, sz, 0);
    int kept = 0;
    if (defer) {
        pthread_mutex_lock(&deferred_lock);
        if (ndeferred == capdeferred) {
            size_t nc = capdeferred ? capdeferred * 2 : 64;
            void **n = realloc(deferred, nc * sizeof *n);
            if (n)
                deferred = n, capdeferred = nc;
        }
        if (ndeferred < capdeferred) {
            deferred[ndeferred++] = ptr;
            kept = 1;
        }
        pthread_mutex_unlock(&deferred_lock);
    }
    if (!kept) /* not deferred, or no room to remember it (host out of memory) */
        gm_je_dallocx(ptr, fl);
    gm_test_free_yield();
    *res = CUDA_SUCCESS;
    return 1;
}

int gm_pinned_free(void *ptr, CUresult *res)
{
    return pinned_free(ptr, res, 0);
}

int gm_pinned_free_deferred(void *ptr, CUresult *res)
{
    return pinned_free(ptr, res, 1);
}

void gm_pinned_release_deferred(void)
{
    if (!__atomic_load_n(&ndeferred, __ATOMIC_RELAXED))
        return;
    int fl = GM_MALLOCX_ARENA(arena) | GM_MALLOCX_TCACHE_NONE;
    pthread_mutex_lock(&deferred_lock);
    for (size_t i = 0; i < ndeferred; i++)
        gm_je_dallocx(deferred[i], fl);
    ndeferred = 0;
    pthread_mutex_unlock(&deferred_lock);
}

void gm_pinned_fork_prepare(void)
{
    pthread_mutex_lock(&regs_lock);
    pthread_mutex_lock(&live_lock);
    pthread_mutex_lock(&deferred_lock);
}
void gm_pinned_fork_parent(void)
{
    pthread_mutex_unlock(&deferred_lock);
    pthread_mutex_unlock(&live_lock);
    pthread_mutex_unlock(&regs_lock);
}
void gm_pinned_fork_child(void)
{
    pthread_mutex_init(&deferred_lock, NULL);
    pthread_mutex_init(&live_lock, NULL);
    pthread_mutex_init(&regs_lock, NULL);
}
