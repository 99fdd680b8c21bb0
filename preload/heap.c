/*
 * heap.c — device memory under gpumem.
 *
 * Replace mode: one alloc/ allocator per device, created at the first allocation on that
 * device, over a backend made of the real driver pointers (gm_real): expandable segments with
 * cuMemAddressReserve/cuMemCreate/cuMemMap/cuMemSetAccess, classic segments with
 * cuMemAlloc_v2/cuMemFree_v2, events for stream order. The allocator never sees a hooked
 * function, so nothing it does is caught again.
 *
 * Record mode (and pass-through cases such as memory pools, managed memory, write-combined
 * host memory): the table below remembers what the real functions handed out, so a free can
 * be matched to its allocation and a foreign free told apart.
 */
#include "preload/gm_internal.h"

#include "alloc/alloc.h"
#include "preload/gpumem.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GM_MAX_DEVICES 64
#ifdef GM_HAVE_REC
#include "snapshot/record/rec.h"
_Static_assert(GM_MAX_DEVICES == REC_MAX_DEVICES, "the recorder keeps a peak snapshot per device gpumem serves");
#endif

struct gm_dev {
    CUdevice dev;
    CUcontext ctx; /* the context current when the allocator was created */
    alloc_t *a;
    int posix_fd;  /* the device can export memory as a POSIX file descriptor */
};
static struct gm_dev devs[GM_MAX_DEVICES];
static alloc_t *_Atomic dev_alloc[GM_MAX_DEVICES];
static pthread_mutex_t devs_lock = PTHREAD_MUTEX_INITIALIZER;
extern alloc_config_t gm_alloc_config;

/* ---- backend over the real driver ----------------------------------------------------- */

static int be_code(CUresult r)
{
    if (r == CUDA_SUCCESS)
        return ALLOC_BE_OK;
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return ALLOC_BE_OOM;
    if (r == CUDA_ERROR_NOT_READY)
        return ALLOC_BE_NOT_READY;
    return 1000 + (int)r; /* raw driver code kept for alloc_last_backend_error */
}

/* Backend calls run in the allocator's context: the calling thread may have no current context
 * (a pthread that only calls cudaFree, the exit flush) or another device's (a free of device 1's
 * memory while device 0 is current; an event recorded or queried there would name the wrong
 * device's legacy stream, or fail). The previous context is put back after the call. */
typedef struct {
    CUcontext prev;
    int switched;
    int relaxed;
    CUstreamCaptureMode mode;
} be_ctx_t;

/* While a capture is underway, gpumem's own driver calls (a segment's cuMemAlloc, cuMemCreate,
 * cuMemMap, ...) are made in the relaxed capture interaction mode, as PyTorch's allocator makes
 * its cudaMalloc: they serve the program but are not its calls, so they must neither be refused
 * nor invalidate a global-mode capture of another thread. (A call the program makes that the
 * capture rules forbid is handed to the real function instead: gm_capture_prohibited.) */
static be_ctx_t be_ctx_enter(struct gm_dev *d)
{
    be_ctx_t s = {NULL, 0, 0, CU_STREAM_CAPTURE_MODE_RELAXED};
    if (d->ctx && gm_real.cuCtxGetCurrent(&s.prev) == CUDA_SUCCESS && s.prev != d->ctx &&
        gm_real.cuCtxSetCurrent(d->ctx) == CUDA_SUCCESS)
        s.switched = 1;
    s.relaxed = gm_capture_relax(&s.mode);
    return s;
}

static void be_ctx_leave(be_ctx_t s)
{
    gm_capture_unrelax(s.relaxed, s.mode);
    if (s.switched)
        gm_real.cuCtxSetCurrent(s.prev);
}

#define IN_CTX(d, expr)                                                                            \
    do {                                                                                           \
        be_ctx_t s_ = be_ctx_enter(d);                                                             \
        expr;                                                                                      \
        be_ctx_leave(s_);                                                                          \
    } while (0)

static void be_prop(struct gm_dev *d, CUmemAllocationProp *p)
{
    memset(p, 0, sizeof *p);
    p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->location.id = d->dev;
    /* exportable (cuMemExportToShareableHandle) where the device supports it: CUDA-aware MPI,
     * NCCL buffer registration and other processes can then map gpumem's memory */
    if (d->posix_fd)
        p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

static int be_reserve(void *c, size_t size, size_t align, uint64_t *addr)
{
    CUdeviceptr p = 0;
    int r;
    IN_CTX(c, r = be_code(gm_real.cuMemAddressReserve(&p, size, align, 0, 0)));
    *addr = p;
    return r;
}
static int be_free_range(void *c, uint64_t addr, size_t size)
{
    int r;
    IN_CTX(c, r = be_code(gm_real.cuMemAddressFree(addr, size)));
    return r;
}
static int be_create(void *c, size_t size, uint64_t *handle)
{
    CUmemAllocationProp p;
    be_prop(c, &p);
    CUmemGenericAllocationHandle h = 0;
    int r;
    IN_CTX(c, r = be_code(gm_real.cuMemCreate(&h, size, &p, 0)));
    *handle = h;
    return r;
}
static int be_release(void *c, uint64_t handle)
{
    int r;
    IN_CTX(c, r = be_code(gm_real.cuMemRelease(handle)));
    return r;
}
static int be_map(void *c, uint64_t addr, size_t size, uint64_t handle)
{
    int r;
    IN_CTX(c, r = be_code(gm_real.cuMemMap(addr, size, 0, handle, 0)));
    return r;
}
static int be_set_access(void *c, uint64_t addr, size_t size)
{
    struct gm_dev *d = c;
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = d->dev;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    int r;
    IN_CTX(d, r = be_code(gm_real.cuMemSetAccess(addr, size, &a, 1)));
    return r;
}
static int be_unmap(void *c, uint64_t addr, size_t size)
{
    int r;
    IN_CTX(c, r = be_code(gm_real.cuMemUnmap(addr, size)));
    return r;
}
static size_t be_granularity(void *c)
{
    CUmemAllocationProp p;
    be_prop(c, &p);
    size_t g = 0;
    if (gm_real.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
        CUDA_SUCCESS)
        return 0;
    return g;
}
static int be_seg_alloc(void *c, size_t size, uint64_t *addr)
{
    CUdeviceptr p = 0;
    int r;
    IN_CTX(c, r = be_code(gm_real.cuMemAlloc_v2(&p, size)));
    *addr = p;
    return r;
}
static int be_seg_free(void *c, uint64_t addr, size_t size)
{
    (void)size;
    int r;
    IN_CTX(c, r = be_code(gm_real.cuMemFree_v2(addr)));
    return r;
}
static int be_event_create(void *c, void **ev)
{
    CUevent e = NULL;
    int r;
    IN_CTX(c, r = be_code(gm_real.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING)));
    *ev = e;
    return r;
}
/* `stream` is the allocator's key (gm_stream_key): each thread's per-thread stream has its own */
static int be_event_record(void *c, void *ev, uintptr_t stream)
{
    int r;
    IN_CTX(c, r = be_code(gm_real.cuEventRecord((CUevent)ev, gm_stream_of_key(stream))));
    return r;
}
static int be_event_query(void *c, void *ev)
{
    int r;
    IN_CTX(c, r = be_code(GM_DRV(GM_DRV_EVENT_QUERY, gm_real.cuEventQuery((CUevent)ev))));
    return r;
}
static int be_event_destroy(void *c, void *ev)
{
    int r;
    IN_CTX(c, r = be_code(gm_real.cuEventDestroy_v2((CUevent)ev)));
    return r;
}
static int be_synchronize(void *c)
{
    int r;
    IN_CTX(c, r = be_code(gm_real.cuCtxSynchronize()));
    return r;
}
static int be_mem_info(void *c, size_t *free_b, size_t *total_b)
{
    int r;
    IN_CTX(c, r = be_code(GM_DRV(GM_DRV_MEM_GET_INFO, gm_real.cuMemGetInfo_v2(free_b, total_b))));
    return r;
}

/* ---- allocator hooks: segment maps and OOM go to the recorder ------------------------- */


/* The lowest and highest address of device memory gpumem's allocators ever mapped: a copy
 * outside it needs no lookup (gm_heap_check_access). Only grows. */
static _Atomic uint64_t span_lo = UINT64_MAX, span_hi;

static void hk_map(void *user, uint64_t addr, size_t size, uintptr_t stream)
{
    uint64_t lo = atomic_load(&span_lo), hi = atomic_load(&span_hi);
    while (addr < lo && !atomic_compare_exchange_weak(&span_lo, &lo, addr))
        ;
    while (addr + size > hi && !atomic_compare_exchange_weak(&span_hi, &hi, addr + size))
        ;
    gm_rec_segment((int)(intptr_t)user, 1, addr, size, stream);
}
static void hk_unmap(void *user, uint64_t addr, size_t size, uintptr_t stream)
{
    gm_rec_segment((int)(intptr_t)user, 0, addr, size, stream);
}
/* Under the allocator's lock (on_oom_locked): the OOM's event among the other threads'
 * allocations and frees where the allocator failed it. Written after the unlock (on_oom), frees
 * other threads made meanwhile came first, and the replay served what the run failed. */
static void hk_oom(void *user, const alloc_oom_info_t *info)
{
    gm_rec_oom((int)(intptr_t)user, info);
}
/* a fenced free landed: the moment its block became reusable, for the replay (trace `fc`) */
static void hk_free_landed(void *user, uint64_t addr, size_t size, uintptr_t stream,
                           uint64_t alloc_id)
{
#ifdef GM_HAVE_REC
    gm_event_raw(REC_FREE_COMPLETED, (int)(intptr_t)user, stream, addr, size, 0, alloc_id);
#else
    (void)user, (void)addr, (void)size, (void)stream, (void)alloc_id;
#endif
}

/* a fenced free landed by a synchronization of the allocator's: settled there (trace `fy`) */
static void hk_free_synced(void *user, uint64_t addr, size_t size, uintptr_t stream,
                           uint64_t alloc_id)
{
#ifdef GM_HAVE_REC
    gm_event_raw(REC_FREE_COMPLETED | REC_F_LANDED_SYNCED, (int)(intptr_t)user, stream, addr, size, 0, alloc_id);
#else
    (void)user, (void)addr, (void)size, (void)stream, (void)alloc_id;
#endif
}

/* a release's marker recorded on stream or found complete, a synchronization of the allocator's,
 * a stream it forgot: for the replay (trace `mr` / `md` / `sy` / `sr` / `sf`); size holds the step
 * within the allocation */
static void hk_marker(void *user, unsigned what, uintptr_t stream, unsigned step)
{
#ifdef GM_HAVE_REC
    unsigned kind = what == ALLOC_MARKER_RECORD          ? REC_MARKER_RECORD
                    : what == ALLOC_MARKER_DONE          ? REC_MARKER_DONE
                    : what == ALLOC_MARKER_SYNC          ? REC_ALLOC_SYNC
                    : what == ALLOC_MARKER_RESTART       ? REC_ALLOC_SYNC | REC_F_SYNC_RESTART
                                                         : REC_STREAM_FORGET;
    /* a synchronization's wait number (on_wait's) is in addr: stream stays the device's 0 */
    bool sync = what == ALLOC_MARKER_SYNC || what == ALLOC_MARKER_RESTART;
    gm_event_raw(kind, (int)(intptr_t)user, sync ? 0 : stream, sync ? stream : 0, step, 0, 0);
#else
    (void)user, (void)what, (void)stream, (void)step;
#endif
}

/* a synchronization of the allocator's is about to drop its lock and wait (kind 43, the trace's
 * `sw`): written under the lock, so that the events other threads make during the wait come after
 * it, and the replay lands at the wait's `sy` only what was freed before it began */
static void hk_wait(void *user, uint64_t wait, size_t size, uintptr_t stream, unsigned step)
{
#ifdef GM_HAVE_REC
    gm_event_raw(REC_ALLOC_WAIT, (int)(intptr_t)user, stream, wait, step, size, 0);
#else
    (void)user, (void)wait, (void)size, (void)stream, (void)step;
#endif
}

/* Every stream the program created (cuStreamCreate*), with its device (the current context's
 * when it was created), so that a cudaFree fences them all even when no allocation was ever
 * made on them: work on any stream of the block's device may still use the block. A stream is
 * noted only in its own device's allocator: an event cannot be recorded on another device's
 * stream. Under devs_lock. */
struct noted_stream {
    CUstream s;
    CUdevice dev;
};
static struct noted_stream *streams;
static size_t nstreams, capstreams;

void gm_heap_note_stream(CUstream s)
{
    CUdevice dev = 0;
    if (gm_real.cuCtxGetDevice)
        gm_real.cuCtxGetDevice(&dev);
    pthread_mutex_lock(&devs_lock);
    if (nstreams == capstreams) {
        size_t nc = capstreams ? capstreams * 2 : 64;
        struct noted_stream *n = realloc(streams, nc * sizeof *n);
        if (n) {
            streams = n;
            capstreams = nc;
        }
    }
    if (nstreams < capstreams)
        streams[nstreams++] = (struct noted_stream){s, dev};
    if (dev >= 0 && dev < GM_MAX_DEVICES && devs[dev].a)
        alloc_note_stream(devs[dev].a, (uintptr_t)s);
    pthread_mutex_unlock(&devs_lock);
}

/* Graph captures underway (cuStreamBeginCapture .. cuStreamEndCapture), in every allocator
 * too: while one is, allocations and frees ask whether their stream is capturing. */
static _Atomic int captures_underway;

_Atomic unsigned gm_heap_streams_gen;

/* Release, after the change it announces (the allocator's one_stream or mixed_streams stored,
 * dev_alloc stored or cleared): a launching thread that reads the new value with acquire
 * (uses.c, use_streams) then reads the change in gm_heap_streams_settled. Relaxed, a thread could
 * read the new value and the old flags (a weakly ordered CPU reorders the two loads; x86 does
 * not), remember "nothing to add" under the new value, and skip the launch that reads a block
 * another thread just made on another stream. On x86 the same instructions either way. */
static void streams_gen_bump(void)
{
    atomic_fetch_add_explicit(&gm_heap_streams_gen, 1, memory_order_release);
}

/* an allocator's blocks' streams changed (alloc_one_stream): called with its lock held */
static void hk_streams_change(void *user)
{
    (void)user;
    streams_gen_bump();
}

void gm_heap_capture_begin(void)
{
    pthread_mutex_lock(&devs_lock);
    atomic_fetch_add(&captures_underway, 1);
    for (int i = 0; i < GM_MAX_DEVICES; i++)
        if (devs[i].a)
            alloc_capture_begin(devs[i].a);
    pthread_mutex_unlock(&devs_lock);
}

void gm_heap_capture_end(void)
{
    pthread_mutex_lock(&devs_lock);
    if (atomic_load(&captures_underway) > 0) {
        atomic_fetch_sub(&captures_underway, 1);
        for (int i = 0; i < GM_MAX_DEVICES; i++)
            if (devs[i].a)
                alloc_capture_end(devs[i].a);
    }
    pthread_mutex_unlock(&devs_lock);
}

int gm_capture_underway(void)
{
    return atomic_load_explicit(&captures_underway, memory_order_relaxed) > 0;
}

/* The graph and every executable graph of the capture are destroyed. */
void gm_heap_capture_release(uintptr_t key)
{
    for (int i = 0; i < GM_MAX_DEVICES; i++) {
        alloc_t *a = atomic_load_explicit(&dev_alloc[i], memory_order_acquire);
        if (a)
            alloc_release_capture(a, key);
    }
}

/* PyTorch's torch.cuda.empty_cache() with gpumem as its allocator (gpumem_empty_cache): every
 * device's cached memory goes back, and with it the pools of released captures whose last block
 * was freed after their graphs were destroyed (alloc_empty_cache reaps them). */
/* Under the allocator's lock, before empty_cache synchronizes and releases (the unmaps it brings
 * follow): a replay empties its cache where the run did (the trace's `e`), after every allocation
 * and free made before the call took the lock. Written before the lock, another thread's
 * allocation or free made before the release could come after it. Flagged as gpumem's own, apart
 * from PyTorch's call merged from its hooks. What stays approximate: alloc/README.md. */
static void heap_emptying(void *arg)
{
#ifdef GM_HAVE_REC
    gm_event_raw(REC_TORCH_EMPTY_CACHE | REC_F_FRAMEWORK, (int)(intptr_t)arg, 0, 0, 0, 0, 0);
#else
    (void)arg;
#endif
}

void gm_heap_empty_cache(void)
{
    for (int i = 0; i < GM_MAX_DEVICES; i++) {
        alloc_t *a = atomic_load_explicit(&dev_alloc[i], memory_order_acquire);
        if (a)
            alloc_empty_cache_notify(a, heap_emptying, (void *)(intptr_t)i);
    }
}

/* The allocator's key for a stream: the capture's private key while the stream is captured */
static uintptr_t heap_key(CUstream s, uintptr_t *capture)
{
    *capture = atomic_load_explicit(&captures_underway, memory_order_relaxed) ? gm_capture_key(s)
                                                                               : 0;
    return *capture ? *capture : gm_stream_key(s);
}

static alloc_t *dev_get(CUdevice dev)
{
    if (dev < 0 || dev >= GM_MAX_DEVICES)
        return NULL;
    alloc_t *a = atomic_load_explicit(&dev_alloc[dev], memory_order_acquire);
    if (a)
        return a;
    pthread_mutex_lock(&devs_lock);
    a = atomic_load_explicit(&dev_alloc[dev], memory_order_relaxed);
    if (!a) {
        struct gm_dev *d = &devs[dev];
        d->dev = dev;
        /* the device's own (primary) context: a stream-ordered allocation on another device's
         * stream creates that device's allocator from a thread whose current context is not it */
        CUdevice cur = -1;
        CUdevice h;
        if (gm_real.cuCtxGetDevice && gm_real.cuCtxGetDevice(&cur) == CUDA_SUCCESS && cur == dev)
            gm_real.cuCtxGetCurrent(&d->ctx);
        else if (gm_real.cuDeviceGet(&h, dev) != CUDA_SUCCESS ||
                 gm_real.cuDevicePrimaryCtxRetain(&d->ctx, h) != CUDA_SUCCESS)
            d->ctx = NULL;
        int fd_ok = 0;
        if (gm_real.cuDeviceGetAttribute &&
            gm_real.cuDeviceGetAttribute(
                &fd_ok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) ==
                CUDA_SUCCESS)
            d->posix_fd = fd_ok != 0;
        alloc_backend_t be;
        memset(&be, 0, sizeof be);
        be.ctx = d;
        if (gm_real.cuMemAddressReserve && gm_real.cuMemAddressFree && gm_real.cuMemCreate &&
            gm_real.cuMemRelease && gm_real.cuMemMap && gm_real.cuMemSetAccess &&
            gm_real.cuMemUnmap && gm_real.cuMemGetAllocationGranularity) {
            be.reserve = be_reserve;
            be.free_range = be_free_range;
            be.create = be_create;
            be.release = be_release;
            be.map = be_map;
            be.set_access = be_set_access;
            be.unmap = be_unmap;
            be.granularity = be_granularity;
        }
        be.seg_alloc = be_seg_alloc;
        be.seg_free = be_seg_free;
        if (gm_real.cuEventCreate && gm_real.cuEventRecord && gm_real.cuEventQuery &&
            gm_real.cuEventDestroy_v2) {
            be.event_create = be_event_create;
            be.event_record = be_event_record;
            be.event_query = be_event_query;
            be.event_destroy = be_event_destroy;
        }
        if (gm_real.cuCtxSynchronize)
            be.synchronize = be_synchronize;
        if (gm_real.cuMemGetInfo_v2)
            be.mem_info = be_mem_info;
        if (alloc_create(&be, &gm_alloc_config, &a) == ALLOC_OK) {
            alloc_hooks_t hk = {(void *)(intptr_t)dev, hk_map, hk_unmap, NULL, hk_free_landed,
                                hk_streams_change, hk_marker, hk_oom, hk_wait, hk_free_synced};
            alloc_set_hooks(a, &hk);
            alloc_config_t cfg;
            alloc_get_config(a, &cfg);
            alloc_note_stream(a, 0); /* the legacy stream: where cudaMalloc'ed memory is used */
            for (size_t k = 0; k < nstreams; k++)
                if (streams[k].dev == dev)
                    alloc_note_stream(a, (uintptr_t)streams[k].s);
            for (int k = atomic_load(&captures_underway); k > 0; k--)
                alloc_capture_begin(a);
            gm_rec_note_device(dev, cfg.expandable_segments);
            d->a = a;
            atomic_store_explicit(&dev_alloc[dev], a, memory_order_release);
            streams_gen_bump();
        } else {
            a = NULL;
        }
    }
    pthread_mutex_unlock(&devs_lock);
    /* the device before gpumem's first segment on it: report's "at start" column */
    if (a)
        gm_devused_start(dev);
    return a;
}

/* ---- PyTorch's statistics of gpumem as its allocator ------------------------------------
 * With gpumem as PyTorch's allocator (gpumem_torch_malloc / gpumem_torch_free), PyTorch keeps no
 * figures of its own: torch.cuda.memory_stats() and every name built on it read these
 * (gpumem_torch_stats, core.c). The tensors' figures are counted here, per device, in the
 * allocator's callbacks with its lock held, so in the order the recording has the events: the
 * same sums, to the byte, as the report's PyTorch-through-gpumem figures (the hook's allocations,
 * flag 4096). The device's figures (reserved, segments, active, OOMs) are its allocator's own.
 * PyTorch's resets: peaks through alloc_reset_program_peaks (the whole-run peaks stay), the
 * accumulated figures as a base subtracted from them (the allocator's counters stay whole: the
 * recording's exit statistics read them). */
static struct torch_figs {
    alloc_stat_t allocated; /* gpumem's block sizes of PyTorch's live tensors */
    alloc_stat_t requested; /* the sizes PyTorch asked for */
    alloc_stat_t allocation; /* how many */
    struct torch_figs_base {  /* the accumulated figures at the last reset */
        alloc_stat_t allocated, requested, allocation;
        alloc_stats_t device;
    } base;
} torch_figs[GM_MAX_DEVICES];
/* innermost: taken inside an allocator's lock (the callbacks), never around one */
static pthread_mutex_t torch_figs_lock = PTHREAD_MUTEX_INITIALIZER;

static void torch_figs_change(int dev, int64_t block, int64_t requested, int64_t n)
{
    if (dev < 0 || dev >= GM_MAX_DEVICES)
        return;
    pthread_mutex_lock(&torch_figs_lock);
    alloc_stat_change(&torch_figs[dev].allocated, block);
    alloc_stat_change(&torch_figs[dev].requested, requested);
    alloc_stat_change(&torch_figs[dev].allocation, n);
    pthread_mutex_unlock(&torch_figs_lock);
}

/* A device reset destroyed every tensor of the device, and its allocator with its counters: the
 * tensors' current figures fall to 0 (the report's too: the reset's frees), the base restarts. */
static void torch_figs_device_gone(int dev)
{
    pthread_mutex_lock(&torch_figs_lock);
    struct torch_figs *f = &torch_figs[dev];
    alloc_stat_change(&f->allocated, -f->allocated.current);
    alloc_stat_change(&f->requested, -f->requested.current);
    alloc_stat_change(&f->allocation, -f->allocation.current);
    memset(&f->base.device, 0, sizeof f->base.device);
    pthread_mutex_unlock(&torch_figs_lock);
}

/* s as PyTorch sees it: the peak since its last reset_peak_memory_stats, the sums since its last
 * reset_accumulated_memory_stats (base: the sums then) */
static gpumem_torch_stat_t torch_stat(const alloc_stat_t *s, const alloc_stat_t *base)
{
    return (gpumem_torch_stat_t){s->current, s->reset_peak, s->allocated - base->allocated,
                                 alloc_stat_freed(s) - alloc_stat_freed(base)};
}

static int64_t since_u64(uint64_t v, uint64_t base)
{
    return v >= base ? (int64_t)(v - base) : 0;
}

int gm_heap_torch_stats(int dev, gpumem_torch_stats_t *out)
{
    if (dev < 0 || dev >= GM_MAX_DEVICES)
        return -1;
    alloc_stats_t st;
    if (gm_heap_stats(dev, &st) != 0)
        memset(&st, 0, sizeof st); /* nothing allocated on the device yet: its figures are 0 */
    pthread_mutex_lock(&torch_figs_lock);
    const struct torch_figs *f = &torch_figs[dev];
    const alloc_stats_t *b = &f->base.device;
    out->allocated_bytes = torch_stat(&f->allocated, &f->base.allocated);
    out->requested_bytes = torch_stat(&f->requested, &f->base.requested);
    out->allocation = torch_stat(&f->allocation, &f->base.allocation);
    out->reserved_bytes = torch_stat(&st.reserved_bytes, &b->reserved_bytes);
    out->segment = torch_stat(&st.segment, &b->segment);
    out->active_bytes = torch_stat(&st.active_bytes, &b->active_bytes);
    out->active = torch_stat(&st.active, &b->active);
    out->inactive_split_bytes = torch_stat(&st.inactive_split_bytes, &b->inactive_split_bytes);
    out->inactive_split = torch_stat(&st.inactive_split, &b->inactive_split);
    out->num_alloc_retries = since_u64(st.num_alloc_retries, b->num_alloc_retries);
    out->num_ooms = since_u64(st.num_ooms, b->num_ooms);
    out->num_device_alloc = since_u64(st.num_device_alloc, b->num_device_alloc);
    out->num_device_free = since_u64(st.num_device_free, b->num_device_free);
    out->num_sync_all_streams = since_u64(st.num_syncs, b->num_syncs);
    out->max_split_size = gm_alloc_config.max_split_size == SIZE_MAX ? -1 : (int64_t)gm_alloc_config.max_split_size;
    pthread_mutex_unlock(&torch_figs_lock);
    return 0;
}

/* Under the device allocator's lock (where its callbacks count the tensors): the tensors' peaks
 * restart with the allocator's, and the recording marks the reset there (event 38 flagged as
 * gpumem's), among the allocations and frees as they came, so that report's "since the reset"
 * figures (.torch.peak_reset) are the program's own max_memory_allocated() / _reserved(). */
static void heap_peaks_reset(void *arg)
{
    int dev = (int)(intptr_t)arg;
    pthread_mutex_lock(&torch_figs_lock);
    struct torch_figs *f = &torch_figs[dev];
    f->allocated.reset_peak = f->allocated.current;
    f->requested.reset_peak = f->requested.current;
    f->allocation.reset_peak = f->allocation.current;
    pthread_mutex_unlock(&torch_figs_lock);
#ifdef GM_HAVE_REC
    gm_event_raw(REC_TORCH_RESET_PEAK | REC_F_FRAMEWORK, dev, 0, 0, 0, 0, 0);
#endif
}

void gm_heap_torch_reset_peaks(int dev)
{
    if (dev < 0 || dev >= GM_MAX_DEVICES)
        return;
    alloc_t *a = atomic_load_explicit(&dev_alloc[dev], memory_order_acquire);
    if (a)
        alloc_reset_program_peaks(a, heap_peaks_reset, (void *)(intptr_t)dev);
    else
        heap_peaks_reset((void *)(intptr_t)dev); /* nothing allocated there yet: the mark alone */
}

void gm_heap_torch_reset_accumulated(int dev)
{
    if (dev < 0 || dev >= GM_MAX_DEVICES)
        return;
    alloc_stats_t st;
    if (gm_heap_stats(dev, &st) != 0)
        memset(&st, 0, sizeof st);
    pthread_mutex_lock(&torch_figs_lock);
    struct torch_figs *f = &torch_figs[dev];
    f->base.allocated = f->allocated;
    f->base.requested = f->requested;
    f->base.allocation = f->allocation;
    f->base.device = st;
    pthread_mutex_unlock(&torch_figs_lock);
}

/* What heap_malloced needs to write an allocation's event from inside the allocator's lock. */
struct heap_alloc_note {
    int dev;
    CUstream stream;
    size_t requested;
    int ev; /* the event kind and GM_EVF_CAPTURE */
};

/* Called by the allocator with its lock held, the block just made live: the allocation's event
 * takes its place here, in the order the allocator served it among every other thread's
 * allocations and frees (whose events heap_freed writes under the same lock). Written after the
 * allocator returned, a thread descheduled in between had its allocation ordered after frees
 * (and allocations) other threads made later, and the replay of the recorded configuration served
 * it from blocks the run had not freed yet (alloc_malloc_notify). Its stack was taken before the
 * lock (gm_heap_alloc). */
static void heap_malloced(void *arg, uint64_t ptr, const alloc_malloc_info_t *info)
{
    const struct heap_alloc_note *n = arg;
    if (n->requested == 0)
        return; /* no block, no event (as before) */
    if (gm_next_alloc_flags & GM_EVF_FRAMEWORK) /* read before gm_event_id consumes it */
        torch_figs_change(n->dev, (int64_t)info->size, (int64_t)n->requested, 1);
    gm_event_id((enum gm_ev)(n->ev | (info->cache_hit ? GM_EVF_CACHE_HIT : GM_EVF_CACHE_MISS)),
                n->dev, n->stream, ptr, info->size ? info->size : n->requested, n->requested,
                info->alloc_id);
}

static CUresult heap_alloc_held(CUdeviceptr *out, size_t size, CUdevice dev, CUstream stream,
                                gm_alloc_kind kind)
{
    alloc_t *a = dev_get(dev);
    if (!a) {
        gm_stat_add(GM_ST_FAILED, 1);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t p = 0;
    alloc_malloc_info_t info = {0};
    uintptr_t capture;
    /* each thread's per-thread stream is its own; a capture has a key of its own */
    stream = (CUstream)heap_key(stream, &capture);
    /* the block's size and id, and whether the cache served it, come with the allocation: no
     * second lookup; the flag goes into events.flags (cache hit / miss) */
    struct heap_alloc_note note = {
        dev, stream, size,
        (kind == GM_ALLOC_ASYNC ? GM_EV_ALLOC_ASYNC : GM_EV_ALLOC) | (capture ? GM_EVF_CAPTURE : 0)};
    int e = alloc_malloc_notify(a, size, (uintptr_t)stream, capture, &p, &info, heap_malloced,
                                &note);
    if (e == ALLOC_OK) {
        *out = p;
        if (size == 0)
            return CUDA_SUCCESS;
        gm_stat_add(GM_ST_SERVED, 1);
        gm_rec_alloc_peak(dev, info.cache_hit, a);
        return CUDA_SUCCESS;
    }
    if (e == ALLOC_ERR_OOM) {
        gm_stat_add(GM_ST_OOM, 1);
        gm_rec_peak_settle(a, dev);
        gm_rec_snapshot(a, dev, 2);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    gm_stat_add(GM_ST_FAILED, 1);
    if (e == ALLOC_ERR_INVALID)
        return CUDA_ERROR_INVALID_VALUE;
    return e == ALLOC_ERR_NOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
}

/* What heap_freed needs to write a free's event from inside the allocator's lock. */
struct heap_free_note {
    int dev;
    CUstream stream;
    gm_alloc_kind kind;
    int synced; /* after free_sync's synchronization of this device: settled at once */
    int framework; /* PyTorch's free of a tensor (gm_heap_torch_free): off its figures */
};

/* Called by the allocator with its lock held, the block just out of the live state: the free's
 * event (and the pool's view) take their place here, before any other thread can be handed the
 * block, land its fence or give its segment back. Written after the allocator returned, a free
 * descheduled in between was ordered after another thread's reuse of the same address, and every
 * reader (which pairs allocations and frees by address in seq order) saw two allocations live at
 * once and a free that never came. Its stack was taken before the lock (gm_heap_free). */
static void heap_freed(void *arg, const alloc_block_query_t *q)
{
    const struct heap_free_note *n = arg;
    gm_heap_pool_forget(q->base);
    if (n->framework)
        torch_figs_change(n->dev, -(int64_t)q->size, -(int64_t)q->requested, -1);
    gm_event_id((enum gm_ev)((n->kind == GM_ALLOC_ASYNC ? GM_EV_FREE_ASYNC : GM_EV_FREE) |
                             (q->pending ? GM_EVF_PENDING : 0) | (n->synced ? GM_EVF_SYNCED : 0)),
                n->dev, n->stream, q->base, q->size, 0, q->alloc_id);
}

static int heap_free_held(CUdeviceptr ptr, CUstream stream, gm_alloc_kind kind, int framework,
                          CUresult *res)
{
    uintptr_t capture = 0;
    int synced_device = -1;
    CUdevice cur;
    if (kind == GM_FREE_SYNCED && gm_real.cuCtxGetDevice && gm_real.cuCtxGetDevice(&cur) == CUDA_SUCCESS)
        synced_device = (int)cur;
    stream = kind == GM_ALLOC_ASYNC ? (CUstream)heap_key(stream, &capture)
                                    : (CUstream)gm_stream_key(stream);
    for (int i = 0; i < GM_MAX_DEVICES; i++) {
        alloc_t *a = atomic_load_explicit(&dev_alloc[i], memory_order_acquire);
        if (!a)
            continue;
        alloc_block_query_t q;
        gm_rec_peak_settle(a, i); /* a pending peak snapshot sees the state before this free */
        /* free_sync synchronized the current context's device: that covers the block only
         * when it lives there (a cudaFree of another device's memory is fenced instead) */
        int synced = kind == GM_FREE_SYNCED && synced_device == i;
        struct heap_free_note note = {i, stream, kind, synced, framework};
        /* freed on a capturing stream: the graph may use the block at every replay */
        int e = alloc_free_notify(a, ptr, kind == GM_ALLOC_ASYNC,
                                  synced ? ALLOC_FREE_SYNCED : (uintptr_t)stream, capture, &q,
                                  heap_freed, &note);
        if (e == ALLOC_ERR_NOT_OWNED)
            continue;
        gm_test_free_yield(); /* test hook: another thread may reuse the block now */
        if (e == ALLOC_OK) {
            gm_stat_add(GM_ST_RELEASED, 1);
            *res = CUDA_SUCCESS;
        } else if (e == ALLOC_ERR_DOUBLE_FREE) {
            gm_stat_add(GM_ST_DOUBLE_FREE, 1);
            gm_event(GM_EV_DOUBLE_FREE, i, stream, ptr, 0, 0);
            *res = CUDA_ERROR_INVALID_VALUE;
        } else if (e == ALLOC_ERR_NOT_BASE) {
            /* an interior pointer of a live allocation: the real driver refuses it too */
            gm_stat_add(GM_ST_FAILED, 1);
            alloc_block_query_t in;
            gm_rec_interior_free(i, stream, ptr,
                                 alloc_block_query(a, ptr, &in) == ALLOC_OK ? in.alloc_id : 0);
            *res = CUDA_ERROR_INVALID_VALUE;
        } else {
            gm_stat_add(GM_ST_FAILED, 1); /* a backend failure */
            *res = CUDA_ERROR_INVALID_VALUE;
        }
        return 1;
    }
    return 0;
}

/* The two entry points take the caller's stack before the allocator's lock: the events written
 * inside it (a free's, in heap_freed; a segment's map or unmap as the range grows or is given
 * back) carry it, so no thread waits out another's stack walk. */
CUresult gm_heap_alloc(CUdeviceptr *out, size_t size, CUdevice dev, CUstream stream,
                       gm_alloc_kind kind)
{
    int held = gm_rec_stack_hold();
    CUresult r = heap_alloc_held(out, size, dev, stream, kind);
    gm_rec_stack_release(held);
    return r;
}

static int heap_free(CUdeviceptr ptr, CUstream stream, gm_alloc_kind kind, int framework, CUresult *res)
{
    if (!ptr) {
        *res = CUDA_SUCCESS;
        return 1;
    }
    int held = gm_rec_stack_hold();
    int r = heap_free_held(ptr, stream, kind, framework, res);
    gm_rec_stack_release(held);
    return r;
}

int gm_heap_free(CUdeviceptr ptr, CUstream stream, gm_alloc_kind kind, CUresult *res)
{
    return heap_free(ptr, stream, kind, 0, res);
}

int gm_heap_torch_free(CUdeviceptr ptr, CUstream stream, CUresult *res)
{
    return heap_free(ptr, stream, GM_ALLOC_ASYNC, 1, res);
}

/* ---- the default pool's view of gpumem's stream-ordered allocations ------------------------
 * Which live blocks cudaMallocAsync / cuMemAllocAsync made (open addressing on the pointer), and
 * per device their bytes as the pool counts them (512 B multiples) with a high-water mark. */
struct pool_ent {
    uintptr_t ptr; /* 0 empty, 1 tombstone */
    size_t bytes;
    int dev;
};
static struct pool_ent *pool_set;
static size_t pool_cap, pool_used_slots;
static _Atomic size_t pool_live;
static unsigned long long pool_used[GM_MAX_DEVICES], pool_high[GM_MAX_DEVICES];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t pool_hash(uintptr_t p) { return (size_t)((p >> 9) * 0x9E3779B97F4A7C15ull); }

static void pool_rehash(void) /* under pool_lock */
{
    size_t nc = pool_cap ? pool_cap * 2 : 256;
    if (atomic_load(&pool_live) * 4 < pool_cap)
        nc = pool_cap; /* mostly tombstones */
    struct pool_ent *n = calloc(nc, sizeof *n);
    if (!n)
        return;
    for (size_t i = 0; i < pool_cap; i++)
        if (pool_set[i].ptr > 1) {
            size_t j = pool_hash(pool_set[i].ptr) & (nc - 1);
            while (n[j].ptr)
                j = (j + 1) & (nc - 1);
            n[j] = pool_set[i];
        }
    free(pool_set);
    pool_set = n;
    pool_cap = nc;
    pool_used_slots = atomic_load(&pool_live);
}

void gm_heap_pool_note(int dev, uintptr_t ptr, size_t size)
{
    if (dev < 0 || dev >= GM_MAX_DEVICES || ptr <= 1)
        return;
    size_t bytes = (size + 511) & ~(size_t)511;
    pthread_mutex_lock(&pool_lock);
    if ((pool_used_slots + 1) * 2 > pool_cap)
        pool_rehash();
    if (pool_cap && (pool_used_slots + 1) * 2 <= pool_cap) {
        size_t j = pool_hash(ptr) & (pool_cap - 1);
        while (pool_set[j].ptr > 1)
            j = (j + 1) & (pool_cap - 1);
        if (!pool_set[j].ptr)
            pool_used_slots++;
        pool_set[j] = (struct pool_ent){ptr, bytes, dev};
        atomic_fetch_add(&pool_live, 1);
        pool_used[dev] += bytes;
        if (pool_used[dev] > pool_high[dev])
            pool_high[dev] = pool_used[dev];
    }
    pthread_mutex_unlock(&pool_lock);
}

/* ptr's entry in the set, NULL when it is not a live stream-ordered allocation; pool_lock held */
static struct pool_ent *pool_find(uintptr_t ptr)
{
    for (size_t j = pool_cap ? pool_hash(ptr) & (pool_cap - 1) : 0; pool_cap && pool_set[j].ptr;
         j = (j + 1) & (pool_cap - 1))
        if (pool_set[j].ptr == ptr)
            return &pool_set[j];
    return NULL;
}

/* 1: ptr is a live stream-ordered allocation of gpumem's */
static int pool_has(uintptr_t ptr)
{
    if (!atomic_load_explicit(&pool_live, memory_order_relaxed))
        return 0;
    pthread_mutex_lock(&pool_lock);
    int found = pool_find(ptr) != NULL;
    pthread_mutex_unlock(&pool_lock);
    return found;
}

void gm_heap_pool_forget(uintptr_t ptr)
{
    if (!atomic_load_explicit(&pool_live, memory_order_relaxed))
        return; /* the common case: no stream-ordered allocation is live */
    pthread_mutex_lock(&pool_lock);
    struct pool_ent *e = pool_find(ptr);
    if (e) {
        int d = e->dev;
        pool_used[d] -= e->bytes < pool_used[d] ? e->bytes : pool_used[d];
        e->ptr = 1;
        atomic_fetch_sub(&pool_live, 1);
    }
    pthread_mutex_unlock(&pool_lock);
}

void gm_heap_pool_figures(int dev, unsigned long long *used, unsigned long long *high)
{
    *used = *high = 0;
    if (dev < 0 || dev >= GM_MAX_DEVICES)
        return;
    pthread_mutex_lock(&pool_lock);
    *used = pool_used[dev];
    *high = pool_high[dev];
    pthread_mutex_unlock(&pool_lock);
}

void gm_heap_pool_reset_high(int dev)
{
    if (dev < 0 || dev >= GM_MAX_DEVICES)
        return;
    pthread_mutex_lock(&pool_lock);
    pool_high[dev] = pool_used[dev];
    pthread_mutex_unlock(&pool_lock);
}

struct heap_fraction_note {
    int dev;
    double fraction;
};

/* Under the allocator's lock, the new limit in force (alloc_set_memory_fraction_notify): the
 * trace's `l` between the allocations the old limit capped and those the new one caps. Written
 * after the unlock, another thread's allocation (or OOM) under the new limit could come before
 * it. The fields PyTorch's own fraction has there (the merge's 37): its cap and the fraction in
 * millionths; the limit it makes is the lower of the cap and the configured limit. */
static void heap_fraction_set(void *arg, size_t cap)
{
#ifdef GM_HAVE_REC
    const struct heap_fraction_note *n = arg;
    gm_event_raw(REC_TORCH_MEMORY_FRACTION | REC_F_FRAMEWORK, n->dev, 0, 0, cap,
                 (uint64_t)(n->fraction * 1e6 + 0.5), 0);
#else
    (void)arg, (void)cap;
#endif
}

int gm_heap_memory_fraction(int dev, double fraction)
{
    alloc_t *a = dev_get(dev);
    struct heap_fraction_note note = {dev, fraction};
    if (!a || alloc_set_memory_fraction_notify(a, fraction, NULL, heap_fraction_set, &note) !=
                  ALLOC_OK)
        return -1;
    gm_test_free_yield(); /* test hook: another thread may allocate under the new limit now */
    return 0;
}

/* The per-process memory fraction in force on dev (PyTorch's getMemoryFraction): the last
 * set_per_process_memory_fraction's, else the per_process_memory_fraction key's, else 1 (none). */
double gm_heap_memory_fraction_get(int dev)
{
    alloc_t *a = dev >= 0 && dev < GM_MAX_DEVICES ? atomic_load_explicit(&dev_alloc[dev], memory_order_acquire)
                                                  : NULL;
    double f = gm_alloc_config.memory_fraction;
    if (a) {
        alloc_config_t cfg;
        alloc_get_config(a, &cfg);
        f = cfg.memory_fraction;
    }
    return f >= 0 && f <= 1 ? f : 1.0;
}

/* gpumem_record_stream: the block holding ptr is used on stream too; its free waits for that
 * stream's work. The device, or -1 when no allocator owns a live block at ptr. */
int gm_heap_record_stream(CUdeviceptr ptr, CUstream stream)
{
    uintptr_t key = gm_stream_key(stream);
    for (int i = 0; i < GM_MAX_DEVICES; i++) {
        alloc_t *a = atomic_load_explicit(&dev_alloc[i], memory_order_acquire);
        if (a && alloc_record_stream(a, ptr, key) == ALLOC_OK)
            return i;
    }
    return -1;
}

void gm_heap_use_streams(int dev, CUstream s, const uint64_t *words, size_t n)
{
    if (dev < 0 || dev >= GM_MAX_DEVICES || !n) return;
    alloc_t *a = atomic_load_explicit(&dev_alloc[dev], memory_order_acquire);
    if (!a) return;
    /* work captured into a graph runs at its replays: the capture's blocks are held until the
     * graph is destroyed instead (alloc_free_captured) */
    if (atomic_load_explicit(&captures_underway, memory_order_relaxed) && gm_stream_capturing(s))
        return;
    alloc_use_streams(a, words, n, gm_stream_key(s));
}

/* A launch on a capturing stream adds nothing either way (gm_heap_use_streams), so a capture
 * changes no answer of this. */
int gm_heap_streams_settled(int dev, CUstream s)
{
    if (dev < 0 || dev >= GM_MAX_DEVICES) return 1;
    alloc_t *a = atomic_load_explicit(&dev_alloc[dev], memory_order_acquire);
    return !a || alloc_one_stream(a, gm_stream_key(s));
}

int gm_heap_ipc_refuse(const char *fn, uintptr_t ptr)
{
    CUdeviceptr base;
    size_t size;
    if (!gm_heap_lookup(ptr, &base, &size))
        return 0;
    static atomic_int said;
    if (!atomic_exchange(&said, 1))
        fprintf(stderr,
                "gpumem: %s: this memory comes from gpumem's allocator (virtual memory), which "
                "legacy IPC handles cannot share; export it with cuMemRetainAllocationHandle + "
                "cuMemExportToShareableHandle (POSIX fd, on devices that support it), or run "
                "with GPUMEM_MODE=record so that the driver allocates it\n",
                fn);
    return 1;
}

int gm_heap_lookup(CUdeviceptr ptr, CUdeviceptr *base, size_t *size)
{
    for (int i = 0; i < GM_MAX_DEVICES; i++) {
        alloc_t *a = atomic_load_explicit(&dev_alloc[i], memory_order_acquire);
        if (!a)
            continue;
        uint64_t b;
        size_t s;
        if (alloc_block_info(a, ptr, &b, &s) == ALLOC_OK) {
            *base = b;
            *size = s;
            return 1;
        }
    }
    return 0;
}

/* The allocation the program asked for, for pointer queries: the block's requested bytes, not
 * its rounded size nor gpumem's page; ids are the allocator's per-allocation stamps with the top
 * bit set (never equal to a driver buffer id of the pass-through allocations) and the device. */
int gm_heap_find(CUdeviceptr ptr, struct gm_alloc_ref *out)
{
    for (int i = 0; i < GM_MAX_DEVICES; i++) {
        alloc_t *a = atomic_load_explicit(&dev_alloc[i], memory_order_acquire);
        if (!a)
            continue;
        alloc_block_query_t q;
        int e = alloc_block_query(a, ptr, &q);
        if (e == ALLOC_ERR_NOT_OWNED)
            continue;
        if (e != ALLOC_OK || ptr - q.base >= (q.requested ? q.requested : 1))
            return -1;
        out->base = q.base;
        out->size = q.requested;
        out->id = (1ull << 63) | ((unsigned long long)i << 48) | q.alloc_id;
        out->device = i;
        out->pooled = pool_has(q.base);
        return 1;
    }
    return 0;
}

int gm_heap_check_access(uint64_t p, size_t n, struct gm_alloc_ref *ref)
{
    memset(ref, 0, sizeof *ref);
    if (!n || p < atomic_load_explicit(&span_lo, memory_order_relaxed) ||
        p >= atomic_load_explicit(&span_hi, memory_order_relaxed))
        return 0;
    for (int i = 0; i < GM_MAX_DEVICES; i++) {
        alloc_t *a = atomic_load_explicit(&dev_alloc[i], memory_order_acquire);
        if (!a)
            continue;
        alloc_block_query_t q;
        int e = alloc_block_query(a, p, &q);
        if (e == ALLOC_ERR_NOT_OWNED)
            continue;
        ref->device = i;
        if (e != ALLOC_OK)
            return 1; /* freed memory (or a free block of a segment) */
        ref->base = q.base;
        ref->size = q.requested;
        ref->id = q.alloc_id;
        uint64_t off = p - q.base;
        return off >= q.requested || n > q.requested - off;
    }
    return 0;
}

static int reset_walk(void *user, const alloc_walk_segment_t *seg, const alloc_walk_block_t *b,
                      size_t nb)
{
    (void)seg;
    int dev = (int)(intptr_t)user;
    for (size_t i = 0; i < nb; i++)
        if (b[i].state == ALLOC_BLOCK_LIVE) {
            gm_heap_pool_forget(b[i].addr);
            gm_stat_add(GM_ST_RELEASED, 1);
            gm_event_id(GM_EV_FREE, dev, 0, b[i].addr, b[i].size, 0, b[i].alloc_id);
        }
    return 0;
}

/* A device reset destroys every allocation of the device's primary context: gpumem gives its
 * memory back first (while the context still exists), records the live blocks as freed, and
 * starts a fresh allocator at the next allocation. */
void gm_heap_reset(int dev)
{
    if (dev < 0 || dev >= GM_MAX_DEVICES)
        return;
    pthread_mutex_lock(&devs_lock);
    alloc_t *a = atomic_exchange(&dev_alloc[dev], NULL);
    devs[dev].a = NULL;
    streams_gen_bump();
    pthread_mutex_unlock(&devs_lock);
    if (!a)
        return;
    gm_rec_peak_settle(a, dev);
    alloc_walk(a, reset_walk, (void *)(intptr_t)dev);
    alloc_destroy(a);
    torch_figs_device_gone(dev);
}

CUresult gm_heap_meminfo(size_t *free_b, size_t *total_b)
{
    CUdevice dev = 0;
    if (gm_real.cuCtxGetDevice)
        gm_real.cuCtxGetDevice(&dev);
    alloc_t *a = dev_get(dev);
    if (!a)
        return gm_real.cuMemGetInfo_v2(free_b, total_b);
    size_t f, t;
    alloc_mem_info(a, &f, &t);
    if (free_b)
        *free_b = f;
    if (total_b)
        *total_b = t;
    return CUDA_SUCCESS;
}

/* Naming is accepted for anything live that gpumem knows: its own blocks, passed-through
 * allocations and pinned host memory. The name itself goes to the recorder (core.c). */
int gm_heap_name(CUdeviceptr ptr, uintptr_t *start)
{
    CUdeviceptr base;
    size_t size;
    uintptr_t pbase;
    if (gm_heap_lookup(ptr, &base, &size)) {
        *start = base;
        return 0;
    }
    if (gm_pt_lookup(ptr, &pbase, &size, NULL)) {
        *start = pbase;
        return 0;
    }
    if (gm_pinned_owns((const void *)(uintptr_t)ptr)) {
        *start = ptr; /* pinned pointers are named as given (the pool has no interior lookup) */
        return 0;
    }
    return -1;
}

void gm_heap_forget_stream(CUstream s)
{
    pthread_mutex_lock(&devs_lock);
    for (size_t k = 0; k < nstreams; k++)
        if (streams[k].s == s) {
            streams[k] = streams[--nstreams];
            break;
        }
    pthread_mutex_unlock(&devs_lock);
    /* outside devs_lock: forgetting a stream that holds memory waits for the device */
    for (int i = 0; i < GM_MAX_DEVICES; i++) {
        alloc_t *a = atomic_load_explicit(&dev_alloc[i], memory_order_acquire);
        if (a)
            alloc_forget_stream(a, (uintptr_t)s);
    }
}

/* At exit: snapshots for the recorder. Memory stays mapped: the program may still run
 * destructors that touch it, and the driver frees everything at process end. */
void gm_heap_exit(void)
{
    for (int i = 0; i < GM_MAX_DEVICES; i++) {
        alloc_t *a = atomic_load_explicit(&dev_alloc[i], memory_order_acquire);
        if (a) {
            gm_rec_peak_settle(a, i);
            gm_rec_snapshot(a, i, 3);
        }
    }
}

void gm_heap_print_stats(FILE *f)
{
    for (int i = 0; i < GM_MAX_DEVICES; i++) {
        alloc_t *a = atomic_load_explicit(&dev_alloc[i], memory_order_acquire);
        if (!a)
            continue;
        alloc_stats_t st;
        alloc_get_stats(a, &st);
        fprintf(f, "gpumem-stats %d dev%d.num_mallocs %llu\n", (int)getpid(), i,
                (unsigned long long)st.num_mallocs);
        fprintf(f, "gpumem-stats %d dev%d.num_frees %llu\n", (int)getpid(), i,
                (unsigned long long)st.num_frees);
        fprintf(f, "gpumem-stats %d dev%d.peak_allocated %lld\n", (int)getpid(), i,
                (long long)st.allocated_bytes.peak);
        fprintf(f, "gpumem-stats %d dev%d.peak_reserved %lld\n", (int)getpid(), i,
                (long long)st.reserved_bytes.peak);
        fprintf(f, "gpumem-stats %d dev%d.allocated_now %lld\n", (int)getpid(), i,
                (long long)st.allocated_bytes.current);
        fprintf(f, "gpumem-stats %d dev%d.cache_hits %llu\n", (int)getpid(), i,
                (unsigned long long)st.cache_hits);
        fprintf(f, "gpumem-stats %d dev%d.device_allocs %llu\n", (int)getpid(), i,
                (unsigned long long)st.num_device_alloc);
        fprintf(f, "gpumem-stats %d dev%d.ooms %llu\n", (int)getpid(), i,
                (unsigned long long)st.num_ooms);
        fprintf(f, "gpumem-stats %d dev%d.events_recorded %llu\n", (int)getpid(), i,
                (unsigned long long)st.num_events_recorded);
        fprintf(f, "gpumem-stats %d dev%d.syncs %llu\n", (int)getpid(), i,
                (unsigned long long)st.num_syncs);
    }
}

/* Per-device stats for the recorder's exit summary. */
int gm_heap_stats(int dev, alloc_stats_t *st)
{
    alloc_t *a = dev >= 0 && dev < GM_MAX_DEVICES
                     ? atomic_load_explicit(&dev_alloc[dev], memory_order_acquire)
                     : NULL;
    if (!a)
        return -1;
    alloc_get_stats(a, st);
    return 0;
}

int gm_heap_last_oom(int dev, alloc_oom_info_t *out)
{
    alloc_t *a = dev >= 0 && dev < GM_MAX_DEVICES
                     ? atomic_load_explicit(&dev_alloc[dev], memory_order_acquire)
                     : NULL;
    return a && alloc_last_oom(a, out) ? 0 : -1;
}

/* Which way round the driver handed out the allocators' address ranges and segments, over every
 * device (alloc_address_order): -1 downwards, 1 upwards, 0 not known. */
int gm_heap_address_order(void)
{
    int sum = 0;
    for (int i = 0; i < GM_MAX_DEVICES; i++) {
        alloc_t *a = atomic_load_explicit(&dev_alloc[i], memory_order_acquire);
        if (a)
            sum += alloc_address_order(a);
    }
    return sum < 0 ? -1 : sum > 0;
}

/* ---- pass-through table: open addressing on the pointer, one lock ----------------------
 * What the real functions handed out (record mode, pools, managed, ...), and what they took back:
 * a freed entry stays, marked dead, until its address is handed out again, so that a second free
 * of it is told apart from a pointer gpumem never saw (a double free, not a foreign one, as in
 * replace mode). Dead entries are bounded: past PT_DEAD_MAX, a rehash forgets them all (a double
 * free of an address freed long ago is then a foreign free). */

struct pt_ent {
    uintptr_t ptr; /* 0 empty, 1 tombstone */
    size_t size;
    enum gm_pt_kind kind;
    int dead; /* freed: kept to classify a later free of the same address */
    int device; /* its free is recorded on it: where it is freed, the current device is unknown */
};
static struct pt_ent *pt;
static size_t pt_cap, pt_used, pt_live, pt_dead;
static pthread_mutex_t pt_lock = PTHREAD_MUTEX_INITIALIZER;
#define PT_DEAD_MAX (1u << 16)

static size_t pt_hash(uintptr_t p) { return (size_t)((p >> 8) * 0x9E3779B97F4A7C15ull); }

static void pt_grow(void)
{
    int keep_dead = pt_dead <= PT_DEAD_MAX;
    size_t kept = pt_live + (keep_dead ? pt_dead : 0);
    size_t ncap = 1024;
    while (ncap < kept * 4)
        ncap *= 2;
    struct pt_ent *n = calloc(ncap, sizeof *n);
    if (!n)
        return;
    for (size_t i = 0; i < pt_cap; i++) {
        if (pt[i].ptr <= 1 || (pt[i].dead && !keep_dead))
            continue;
        size_t j = pt_hash(pt[i].ptr) & (ncap - 1);
        while (n[j].ptr)
            j = (j + 1) & (ncap - 1);
        n[j] = pt[i];
    }
    free(pt);
    pt = n;
    pt_cap = ncap;
    if (!keep_dead)
        pt_dead = 0;
    pt_used = pt_live + pt_dead;
}

/* ptr's entry, live or dead, or NULL; pt_lock held */
static struct pt_ent *pt_find(uintptr_t ptr)
{
    if (!pt || ptr <= 1)
        return NULL;
    for (size_t j = pt_hash(ptr) & (pt_cap - 1); pt[j].ptr; j = (j + 1) & (pt_cap - 1))
        if (pt[j].ptr == ptr)
            return &pt[j];
    return NULL;
}

void gm_pt_add(uintptr_t ptr, size_t size, enum gm_pt_kind kind, int device)
{
    if (ptr <= 1)
        return;
    pthread_mutex_lock(&pt_lock);
    struct pt_ent *e = pt_find(ptr);
    if (!e) {
        if ((pt_used + 1) * 2 > pt_cap)
            pt_grow();
        if (pt) {
            size_t j = pt_hash(ptr) & (pt_cap - 1);
            while (pt[j].ptr > 1)
                j = (j + 1) & (pt_cap - 1);
            if (pt[j].ptr == 0)
                pt_used++;
            e = &pt[j];
            e->ptr = ptr;
            e->dead = 1; /* counted live below */
            pt_dead++;
        }
    }
    if (e) {
        if (e->dead) {
            e->dead = 0;
            pt_dead--;
            pt_live++;
        }
        e->size = size;
        e->kind = kind;
        e->device = device;
    }
    pthread_mutex_unlock(&pt_lock);
}

int gm_pt_remove(uintptr_t ptr, size_t *size, enum gm_pt_kind *kind, int *device)
{
    int found = 0;
    pthread_mutex_lock(&pt_lock);
    struct pt_ent *e = pt_find(ptr);
    if (e && !e->dead) {
        *size = e->size;
        *kind = e->kind;
        *device = e->device;
        e->dead = 1;
        pt_live--;
        pt_dead++;
        found = 1;
    }
    pthread_mutex_unlock(&pt_lock);
    return found;
}

/* Interior lookups scan the table: only used for naming and refused frees, which are rare. */
int gm_pt_lookup(uintptr_t ptr, uintptr_t *base, size_t *size, int *device)
{
    int found = 0;
    pthread_mutex_lock(&pt_lock);
    for (size_t i = 0; pt && i < pt_cap; i++) {
        if (pt[i].ptr > 1 && !pt[i].dead && ptr >= pt[i].ptr &&
            ptr < pt[i].ptr + (pt[i].size ? pt[i].size : 1)) {
            *base = pt[i].ptr;
            *size = pt[i].size;
            if (device)
                *device = pt[i].device;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&pt_lock);
    return found;
}

/* A free of ptr that no live passed-through allocation starts at, recorded as what it is, as
 * replace mode tells them: a double free (an allocation the real functions handed out started
 * there and was freed), an interior free (inside a live one), or a foreign free (an address
 * gpumem never saw). The real function answers it afterwards. device: the caller's answer for
 * an address gpumem never saw; a double or interior free is on the device of the allocation it
 * names, which the table kept (the driver no longer knows a freed address). */
void gm_pt_bad_free(uintptr_t ptr, int device, CUstream stream)
{
    pthread_mutex_lock(&pt_lock);
    struct pt_ent *e = pt_find(ptr);
    int twice = e && e->dead;
    if (twice)
        device = e->device;
    pthread_mutex_unlock(&pt_lock);
    uintptr_t base;
    size_t size;
    if (twice) {
        gm_stat_add(GM_ST_DOUBLE_FREE, 1);
        gm_event(GM_EV_DOUBLE_FREE, device, stream, ptr, 0, 0);
    } else if (gm_pt_lookup(ptr, &base, &size, &device)) {
        gm_stat_add(GM_ST_FAILED, 1);
        gm_rec_interior_free(device, stream, ptr, 0);
    } else {
        gm_stat_add(GM_ST_FOREIGN_FREE, 1);
        gm_event(GM_EV_FOREIGN_FREE, device, stream, ptr, 0, 0);
    }
}

/* After a device reset the driver has destroyed that device's allocations (tests/diff/gpu-h200/
 * reset.out): each passed-through device allocation it no longer knows (its address range is
 * CUDA_ERROR_NOT_FOUND) leaves the table and is recorded as freed, so that a recording does not
 * call it leaked. Which ones the reset took is the driver's answer, not gpumem's guess; managed
 * and host memory are not asked. */
void gm_pt_after_reset(void)
{
    if (!gm_real.cuMemGetAddressRange_v2) return;
    for (;;) {
        uintptr_t batch[64];
        size_t n = 0;
        pthread_mutex_lock(&pt_lock);
        for (size_t i = 0; pt && i < pt_cap && n < 64; i++) {
            if (pt[i].ptr <= 1 || pt[i].dead || (pt[i].kind != GM_PT_DEVICE && pt[i].kind != GM_PT_ASYNC &&
                                   pt[i].kind != GM_PT_POOL))
                continue;
            CUdeviceptr base;
            size_t size;
            if (gm_real.cuMemGetAddressRange_v2(&base, &size, pt[i].ptr) == CUDA_ERROR_NOT_FOUND)
                batch[n++] = pt[i].ptr; /* not an error of the query itself (no context...) */
        }
        pthread_mutex_unlock(&pt_lock);
        for (size_t i = 0; i < n; i++) {
            size_t size;
            enum gm_pt_kind k;
            int dev;
            if (gm_pt_remove(batch[i], &size, &k, &dev))
                gm_event(k == GM_PT_DEVICE ? GM_EV_FREE : GM_EV_FREE_ASYNC, dev, 0, batch[i], size,
                         0);
        }
        if (n < 64) return;
    }
}

void gm_pt_fork_prepare(void) { pthread_mutex_lock(&pt_lock); }
void gm_pt_fork_parent(void) { pthread_mutex_unlock(&pt_lock); }
void gm_pt_fork_child(void) { pthread_mutex_init(&pt_lock, NULL); }
