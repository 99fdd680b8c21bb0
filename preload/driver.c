/*
 * driver.c — the real driver and the driver-level hooks.
 *
 * The real driver is loaded once (pthread_once) with dlopen("libcuda.so.1") and its
 * cuGetProcAddress_v2; every entry point gpumem needs is stored in gm_real. gpumem's own
 * backend and every pass-through call go through gm_real only — never through a hooked name —
 * so an allocation gpumem makes for itself is never seen again by its own hooks.
 *
 * How programs meet the hooks: whoever asks the driver for an entry point — the runtime
 * (dynamic or static), cuBLAS, NCCL, PyTorch, a program using the driver API through dlopen —
 * goes through cuGetProcAddress, which gpumem wraps (the wrapper itself is handed out by the
 * exported dlsym, see dlsym.c). The wrapper asks the real cuGetProcAddress and, when the answer
 * is the real pointer of a hooked function (compared by address, so every name, version and
 * per-thread-stream variant that resolves to it is caught), replaces it with gpumem's hook.
 *
 * Hooks pass straight through when the calling thread is inside gpumem (gm_inside): in record
 * mode the runtime-level hook has already counted the cudaMalloc that is now reaching
 * cuMemAlloc_v2 through the real runtime.
 */
#include "preload/gm_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct gm_real gm_real;

typedef CUresult (*getproc_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*getproc_v2_fn)(const char *, void **, int, cuuint64_t,
                                  CUdriverProcAddressQueryResult *);
static getproc_v1_fn real_getproc_v1;
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static int driver_ok;      /* cuInit succeeded */
/* driver_load has run (release): every hook asks, a launch's too, and pthread_once is a call */
static _Atomic int driver_loaded;

/* ---- hooks ---------------------------------------------------------------------------- */

static int gm_pass(void) { return gm_inside || gm_forked_child || gm_mode() == GM_MODE_OFF; }

static CUresult ctx_device(CUdevice *dev)
{
    *dev = 0;
    return gm_real.cuCtxGetDevice ? gm_real.cuCtxGetDevice(dev) : CUDA_SUCCESS;
}

int gm_stream_capturing(CUstream s)
{
    if (s == 0 || s == CU_STREAM_LEGACY || !gm_real.cuStreamIsCapturing)
        return 0; /* the legacy stream cannot be captured */
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return gm_real.cuStreamIsCapturing(s, &st) == CUDA_SUCCESS &&
           st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Per-thread default streams. CU_STREAM_PER_THREAD (cudaStreamPerThread, stream 0 in a _ptsz
 * entry point, every default stream of a --default-stream per-thread build) is one handle value
 * that names a different stream in each thread. The allocator keys pools and fences by stream,
 * so each thread's per-thread stream gets a key of its own: an odd number no CUstream (a pointer)
 * can be, 4n+3. The legacy stream has the two names 0 and CU_STREAM_LEGACY: key 0. */
static _Atomic uintptr_t ptds_next = 1;
static __thread uintptr_t ptds_key __attribute__((tls_model("initial-exec")));
static pthread_key_t ptds_exit_key;
static pthread_once_t ptds_once = PTHREAD_ONCE_INIT;

/* A thread that used its per-thread stream exits: the stream goes with it, and the allocator
 * forgets its key (otherwise every cudaFree would fence every thread that ever lived). */
static void ptds_thread_exit(void *unused)
{
    (void)unused;
    uintptr_t k = ptds_key;
    ptds_key = 0; /* from here on the key names a stream of another thread: the legacy stream */
    if (k && !gm_forked_child && gm_mode_peek() == GM_MODE_REPLACE)
        gm_heap_forget_stream((CUstream)k);
}

static void ptds_once_init(void)
{
    pthread_key_create(&ptds_exit_key, ptds_thread_exit);
}

uintptr_t gm_stream_key(CUstream s)
{
    if (s == CU_STREAM_LEGACY)
        return 0;
    if (s != CU_STREAM_PER_THREAD)
        return (uintptr_t)s;
    if (!ptds_key) {
        ptds_key = atomic_fetch_add(&ptds_next, 1) * 4 + 3;
        pthread_once(&ptds_once, ptds_once_init);
        pthread_setspecific(ptds_exit_key, (void *)1);
    }
    return ptds_key;
}

/* The stream to record an event on for a key. Another thread's per-thread stream cannot be
 * named from here: the legacy stream stands for it, as work on the legacy stream starts only
 * after the work issued before it on every blocking stream, per-thread streams included. */
CUstream gm_stream_of_key(uintptr_t key)
{
    if (key > 3 && (key & 3) == 3)
        return key == ptds_key ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    return (CUstream)key;
}

/* A stream-ordered allocation on a stream being captured belongs to the graph: the driver's
 * allocation node, with an address fixed for the graph's life and memory that exists only from
 * a launch's allocation node to its free (CUDA's graph memory semantics, which the driver keeps
 * and gpumem's caching could not: relaunch rules, auto-free, trim, the graph memory
 * attributes). gpumem passes it through and records it (flag GM_EVF_GRAPH); every preset
 * behaves the same. The free of a graph allocation, in or out of a capture, goes to the driver
 * too (a free on a capturing stream must name a graph allocation: the driver answers). */
static int capturing(CUstream s)
{
    return gm_capture_underway() && gm_stream_capturing(s);
}

static CUresult drv_alloc(CUdeviceptr *dptr, size_t size, CUstream stream, gm_alloc_kind kind,
                          CUresult (*real)(CUdeviceptr *, size_t, CUstream),
                          CUresult (*real_sync)(CUdeviceptr *, size_t))
{
    if (dptr) *dptr = 0; /* a refused call leaves 0, as the real driver does (drv_api.out) */
    gm_stat_add(kind == GM_ALLOC_ASYNC ? GM_ST_DRV_ALLOC_ASYNC : GM_ST_DRV_ALLOC, 1);
    CUdevice dev;
    int graph = kind == GM_ALLOC_ASYNC && capturing(stream);
    /* an allocation the capture rules forbid now (cuMemAlloc, or cuMemAllocAsync on a stream
     * not captured: an H200 refuses both with 900 and invalidates the capture): the driver's own
     * refusal */
    int forbidden = !graph && gm_capture_prohibited();
    /* a stream-ordered allocation on a device whose pool the program chose (cuDeviceSetMemPool):
     * that pool's, the driver's in both modes (program_mem.c) */
    int chosen = kind == GM_ALLOC_ASYNC && !graph && gm_pm_any_chosen_pool() && gm_stream_device(stream, &dev) &&
                 gm_pm_chosen_pool((int)dev);
    if (gm_mode() == GM_MODE_REPLACE && !graph && !forbidden && !chosen) {
        /* the driver's own checks, in its order: the stream, then the arguments (size 0 is
         * CUDA_ERROR_INVALID_VALUE for cuMemAlloc, success and 0 for cuMemAllocAsync, as on an
         * H200); a stream-ordered allocation lives on its stream's device */
        if (kind == GM_ALLOC_ASYNC ? !gm_stream_device(stream, &dev) : 0)
            return CUDA_ERROR_INVALID_HANDLE;
        if (!dptr || (size == 0 && kind != GM_ALLOC_ASYNC))
            return CUDA_ERROR_INVALID_VALUE;
        if (size == 0)
            return CUDA_SUCCESS;
        if (kind != GM_ALLOC_ASYNC) {
            CUresult r = ctx_device(&dev);
            if (r != CUDA_SUCCESS)
                return r;
        }
        CUresult r = gm_heap_alloc(dptr, size, dev, stream, kind);
        if (r == CUDA_SUCCESS && kind == GM_ALLOC_ASYNC)
            gm_heap_pool_note(dev, *dptr, size);
        return r;
    }
    /* record mode, graph allocations, a chosen pool's, forbidden calls: the real allocation,
     * remembered so its free is matched */
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = real ? real(dptr, size, stream) : real_sync(dptr, size);
    /* a stream-ordered allocation is on its stream's device, a plain one on the context's */
    if (!(kind == GM_ALLOC_ASYNC && gm_stream_device(stream, &dev)) && ctx_device(&dev) != CUDA_SUCCESS)
        dev = -1;
    if (r == CUDA_SUCCESS) {
        gm_stat_add(GM_ST_PASSTHROUGH, 1);
        gm_pt_add(*dptr, size,
                  graph    ? GM_PT_GRAPH
                  : chosen ? GM_PT_POOL
                  : kind == GM_ALLOC_ASYNC ? GM_PT_ASYNC
                                           : GM_PT_DEVICE,
                  dev);
        gm_next_alloc_flags = graph ? GM_EVF_GRAPH : chosen ? GM_EVF_POOL : 0;
        gm_event(kind == GM_ALLOC_ASYNC ? GM_EV_ALLOC_ASYNC : GM_EV_ALLOC, dev, stream, *dptr,
                 size, size);
        gm_next_alloc_flags = 0;
    } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        gm_stat_add(GM_ST_OOM, 1);
        gm_event(GM_EV_OOM, dev, stream, 0, 0, size);
    }
    return r;
}

static CUresult drv_free(CUdeviceptr p, CUstream stream, gm_alloc_kind kind,
                         CUresult (*real)(CUdeviceptr, CUstream), CUresult (*real_sync)(CUdeviceptr))
{
    gm_stat_add(kind == GM_ALLOC_ASYNC ? GM_ST_DRV_FREE_ASYNC : GM_ST_DRV_FREE, 1);
    CUresult res;
    /* a free on a capturing stream is a free node (the driver's to take or refuse); a cuMemFree
     * the capture rules forbid is the driver's to refuse: gpumem's block stays allocated */
    int to_driver = (kind == GM_ALLOC_ASYNC && capturing(stream)) || gm_capture_prohibited();
    if (gm_mode() == GM_MODE_REPLACE && p && !to_driver) { /* NULL: the driver's own answer */
        if (kind == GM_ALLOC_ASYNC && !gm_stream_valid(stream))
            return CUDA_ERROR_INVALID_HANDLE;
        if (kind == GM_ALLOC_SYNC && gm_free_sync(0) == GM_SYNC_DONE)
            kind = GM_FREE_SYNCED;
        if (gm_heap_free(p, stream, kind, &res))
            return res;
    }
    if (to_driver && gm_mode() == GM_MODE_REPLACE && gm_heap_lookup(p, &(CUdeviceptr){0},
                                                                      &(size_t){0}))
        return real ? real(p, stream) : real_sync(p); /* refused: nothing to record */
    /* recorded before the real free: once it ran, another thread may be handed the same
     * address, and its allocation must come after this free in the recording */
    size_t size = 0;
    enum gm_pt_kind k;
    int dev = -1;
    if (gm_pt_remove(p, &size, &k, &dev)) {
        gm_stat_add(GM_ST_PASSTHROUGH_FREE, 1);
        gm_event(k == GM_PT_MANAGED          ? GM_EV_MANAGED
                 : kind == GM_ALLOC_ASYNC ? GM_EV_FREE_ASYNC
                                          : GM_EV_FREE,
                 dev, stream, p, size, 0);
    } else if (p) {
        gm_pt_bad_free(p, gm_addr_device(p, stream), stream); /* the driver still knows p */
    }
    CUresult r = real ? real(p, stream) : real_sync(p);
    gm_test_free_yield();
    return r;
}

static __attribute__((noinline)) CUresult hb_cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    CUresult fail;
    if (gm_fail_take(GM_FAIL_ALLOC, &fail))
        return fail;
    if (gm_pass())
        return gm_real.cuMemAlloc_v2(dptr, size);
    return drv_alloc(dptr, size, 0, GM_ALLOC_SYNC, NULL, gm_real.cuMemAlloc_v2);
}

static CUresult h_cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    return GM_SCRUBBED(mem, hb_cuMemAlloc_v2(dptr, size));
}

static __attribute__((noinline)) CUresult hb_cuMemFree_v2(CUdeviceptr p)
{
    CUresult fail;
    if (gm_fail_take(GM_FAIL_FREE, &fail))
        return fail;
    if (gm_pass())
        return gm_real.cuMemFree_v2(p);
    return drv_free(p, 0, GM_ALLOC_SYNC, NULL, gm_real.cuMemFree_v2);
}

static CUresult h_cuMemFree_v2(CUdeviceptr p)
{
    return GM_SCRUBBED(mem, hb_cuMemFree_v2(p));
}

static __attribute__((noinline)) CUresult hb_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s)
{
    CUresult fail;
    if (gm_fail_take(GM_FAIL_ALLOC, &fail))
        return fail;
    if (gm_pass())
        return gm_real.cuMemAllocAsync(dptr, size, s);
    return drv_alloc(dptr, size, s, GM_ALLOC_ASYNC, gm_real.cuMemAllocAsync, NULL);
}

static CUresult h_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s)
{
    return GM_SCRUBBED(mem, hb_cuMemAllocAsync(dptr, size, s));
}

/* The per-thread-default-stream variant: stream 0 means the calling thread's stream. */
static __attribute__((noinline)) CUresult hb_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s)
{
    CUresult fail;
    if (gm_fail_take(GM_FAIL_ALLOC, &fail))
        return fail;
    if (gm_pass())
        return gm_real.cuMemAllocAsync_ptsz(dptr, size, s);
    return drv_alloc(dptr, size, s ? s : CU_STREAM_PER_THREAD, GM_ALLOC_ASYNC,
                     gm_real.cuMemAllocAsync_ptsz, NULL);
}

static CUresult h_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s)
{
    return GM_SCRUBBED(mem, hb_cuMemAllocAsync_ptsz(dptr, size, s));
}

static __attribute__((noinline)) CUresult hb_cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    CUresult fail;
    if (gm_fail_take(GM_FAIL_FREE, &fail))
        return fail;
    if (gm_pass())
        return gm_real.cuMemFreeAsync(p, s);
    return drv_free(p, s, GM_ALLOC_ASYNC, gm_real.cuMemFreeAsync, NULL);
}

static CUresult h_cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    return GM_SCRUBBED(mem, hb_cuMemFreeAsync(p, s));
}

static __attribute__((noinline)) CUresult hb_cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
    CUresult fail;
    if (gm_fail_take(GM_FAIL_FREE, &fail))
        return fail;
    if (gm_pass())
        return gm_real.cuMemFreeAsync_ptsz(p, s);
    return drv_free(p, s ? s : CU_STREAM_PER_THREAD, GM_ALLOC_ASYNC, gm_real.cuMemFreeAsync_ptsz,
                    NULL);
}

static CUresult h_cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
    return GM_SCRUBBED(mem, hb_cuMemFreeAsync_ptsz(p, s));
}

static CUresult h_cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    if (gm_pass() || gm_mode() != GM_MODE_REPLACE)
        return gm_real.cuMemGetInfo_v2(free_b, total_b);
    gm_stat_add(GM_ST_MEMGETINFO, 1);
    return gm_heap_meminfo(free_b, total_b);
}

/* ---- pointer queries ------------------------------------------------------------------
 * The driver knows gpumem's pages (VMM mappings, pinned extents), not the allocations the
 * program asked for. For an address inside a live gpumem allocation the driver is asked as
 * usual (memory type, context, ordinal, flags are the page's and right), then the answers that
 * describe the allocation are replaced: range start and size (the requested bytes), buffer and
 * memory-block id (one per allocation, new after reuse), mapping base and size. An address in
 * gpumem's memory outside any live allocation (freed, past the requested end) is one the
 * driver would not know: the query goes to the real driver for an address it certainly does not
 * know, so the "unknown" answer (error code, zeroed attributes) is the driver's own. */
static char probe_unknown;
#define UNKNOWN_ADDR ((CUdeviceptr)(uintptr_t)&probe_unknown)
static CUresult (*real_cuPointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
static CUresult (*real_cuPointerGetAttributes)(unsigned, CUpointer_attribute *, void **,
                                               CUdeviceptr);

/* 1: *r is the live allocation at p; 0: not gpumem's memory; -1: gpumem's, not allocated */
static int query_find(CUdeviceptr p, struct gm_alloc_ref *r)
{
    if (gm_pass() || gm_mode() != GM_MODE_REPLACE)
        return 0;
    int k = gm_heap_find(p, r);
    return k ? k : gm_pinned_find((const void *)(uintptr_t)p, r);
}

/* What the driver maps an allocation in, as an H200 (driver 580) reports it: whole 2 MiB pages
 * for cuMemAlloc and pinned memory, 32 MiB chunks for a memory pool's allocations
 * (tests/diff/gpu-h200/ptr_query.out; the device account's DU_PAGE / DU_CHUNK, gm_devused.c). */
#define DRIVER_PAGE ((size_t)2 << 20)
#define DRIVER_POOL_CHUNK ((size_t)32 << 20)

static void attr_patch(CUpointer_attribute a, void *data, const struct gm_alloc_ref *r)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = r->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = r->size; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = r->id; break;
    /* a number of its own, as the driver's block ids are (an H200: ptr_query.out) */
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: *(unsigned long long *)data = r->id ^ (1ull << 47); break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *(void **)data = (void *)r->base; break;
    /* a stream-ordered allocation: pool memory is not legacy-IPC capable, and gpumem refuses
     * legacy IPC on its memory anyway (gm_heap_ipc_refuse) */
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        if (r->pooled) *(int *)data = 0;
        break;
    /* what the driver would have mapped for it: whole 2 MiB pages, a pool's 32 MiB chunk */
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: {
        size_t step = r->pooled ? DRIVER_POOL_CHUNK : DRIVER_PAGE;
        *(size_t *)data = (r->size + step - 1) / step * step;
        break;
    }
    default: break;
    }
}

static CUresult h_cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p)
{
    struct gm_alloc_ref r;
    int k = query_find(p, &r);
    if (k < 0)
        return real_cuPointerGetAttribute(data, a, UNKNOWN_ADDR);
    CUresult res = real_cuPointerGetAttribute(data, a, p);
    if (k > 0 && res == CUDA_SUCCESS && data)
        attr_patch(a, data, &r);
    return res;
}

static CUresult h_cuPointerGetAttributes(unsigned n, CUpointer_attribute *attrs, void **data,
                                         CUdeviceptr p)
{
    struct gm_alloc_ref r;
    int k = query_find(p, &r);
    if (k < 0)
        return real_cuPointerGetAttributes(n, attrs, data, UNKNOWN_ADDR);
    CUresult res = real_cuPointerGetAttributes(n, attrs, data, p);
    if (k > 0 && res == CUDA_SUCCESS && attrs && data)
        for (unsigned i = 0; i < n; i++)
            if (data[i])
                attr_patch(attrs[i], data[i], &r);
    return res;
}

static CUresult h_cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr p)
{
    struct gm_alloc_ref r;
    int k = query_find(p, &r);
    if (k > 0) {
        gm_stat_add(GM_ST_ADDR_RANGE, 1);
        if (pbase)
            *pbase = r.base;
        if (psize)
            *psize = r.size;
        return CUDA_SUCCESS;
    }
    return gm_real.cuMemGetAddressRange_v2(pbase, psize, k < 0 ? UNKNOWN_ADDR : p);
}

/* ---- stream handles, device reset ----------------------------------------------------- */
/* A stream-ordered call with a destroyed or made-up stream must fail as the driver's would
 * (CUDA_ERROR_INVALID_HANDLE) before gpumem records an event on it. cuStreamGetFlags is the
 * cheapest question the driver answers for any stream without side effects; the answer is
 * cached per thread until any stream is destroyed. */
static CUresult (*real_cuStreamGetFlags)(CUstream, unsigned *);
static _Atomic unsigned stream_gen = 1;
static __thread CUstream valid_stream __attribute__((tls_model("initial-exec")));
static __thread unsigned valid_gen __attribute__((tls_model("initial-exec")));
static __thread CUdevice valid_dev __attribute__((tls_model("initial-exec")));

/* cuStreamGetDevice (CUDA 12.8+) answers both questions; an older driver is asked the flags, and
 * the stream is taken to be on the current context's device (-1 below). */
int gm_stream_device(CUstream s, CUdevice *dev)
{
    if (s == 0 || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD ||
        (!real_cuStreamGetFlags && !gm_real.cuStreamGetDevice))
        return ctx_device(dev), 1;
    unsigned g = atomic_load_explicit(&stream_gen, memory_order_acquire);
    if (s == valid_stream && g == valid_gen) {
        if (valid_dev < 0)
            return ctx_device(dev), 1;
        *dev = valid_dev;
        return 1;
    }
    CUdevice d = -1;
    if (gm_real.cuStreamGetDevice) {
        if (gm_real.cuStreamGetDevice(s, &d) == CUDA_ERROR_INVALID_HANDLE)
            return 0;
    } else {
        unsigned fl;
        if (real_cuStreamGetFlags(s, &fl) == CUDA_ERROR_INVALID_HANDLE)
            return 0;
    }
    valid_stream = s;
    valid_gen = g;
    valid_dev = d;
    if (d < 0)
        ctx_device(&d);
    *dev = d;
    return 1;
}

int gm_addr_device(CUdeviceptr p, CUstream s)
{
    int ord = -1;
    if (real_cuPointerGetAttribute &&
        real_cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) == CUDA_SUCCESS &&
        ord >= 0)
        return ord;
    CUdevice d;
    return gm_stream_device(s, &d) ? (int)d : -1;
}

int gm_stream_valid(CUstream s)
{
    CUdevice d;
    return gm_stream_device(s, &d);
}

static CUresult (*real_cuDevicePrimaryCtxReset_v2)(CUdevice);
static CUresult h_cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    int pass = gm_pass();
    if (!pass && gm_mode() == GM_MODE_REPLACE) gm_heap_reset(dev);
    CUresult r = real_cuDevicePrimaryCtxReset_v2(dev);
    if (!pass && r == CUDA_SUCCESS) gm_pt_after_reset();
    return r;
}

/* Pinned host memory. Write-combined memory cannot come from a shared pool (the attribute is
 * per allocation), so it is passed through. */
static CUresult host_alloc(void **pp, size_t size, unsigned flags, int has_flags)
{
    /* (*pp was cleared by the entry points below: a refused call leaves NULL) */
    if (!pp)
        return CUDA_ERROR_INVALID_VALUE;
    /* forbidden by the capture rules now: the driver's own refusal (below) */
    if (gm_mode() == GM_MODE_REPLACE && !(flags & CU_MEMHOSTALLOC_WRITECOMBINED) &&
        !gm_capture_prohibited()) {
        if (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP))
            return CUDA_ERROR_INVALID_VALUE; /* what the driver answers */
        if (size == 0)
            return CUDA_SUCCESS; /* NULL, as the driver answers on an H200 (drv_api.out) */
        CUresult r = gm_pinned_alloc(pp, size);
        return r;
    }
    CUresult r = has_flags ? gm_real.cuMemHostAlloc(pp, size, flags)
                           : gm_real.cuMemAllocHost_v2(pp, size);
    if (r == CUDA_SUCCESS) {
        gm_stat_add(GM_ST_HOST_PASSTHROUGH, 1);
        gm_pt_add((uintptr_t)*pp, size, GM_PT_HOST, -1);
        gm_event(GM_EV_HOST_ALLOC, -1, 0, (uintptr_t)*pp, size, size);
    }
    return r;
}
static __attribute__((noinline)) CUresult hb_cuMemAllocHost_v2(void **pp, size_t size)
{
    if (pp) *pp = NULL; /* a refused call leaves NULL, as the real driver does (drv_api.out) */
    CUresult fail;
    if (gm_fail_take(GM_FAIL_HOST_ALLOC, &fail))
        return fail;
    if (gm_pass())
        return gm_real.cuMemAllocHost_v2(pp, size);
    return host_alloc(pp, size, 0, 0);
}

static CUresult h_cuMemAllocHost_v2(void **pp, size_t size)
{
    return GM_SCRUBBED(mem, hb_cuMemAllocHost_v2(pp, size));
}
static __attribute__((noinline)) CUresult hb_cuMemHostAlloc(void **pp, size_t size, unsigned flags)
{
    if (pp) *pp = NULL;
    CUresult fail;
    if (gm_fail_take(GM_FAIL_HOST_ALLOC, &fail))
        return fail;
    if (gm_pass())
        return gm_real.cuMemHostAlloc(pp, size, flags);
    return host_alloc(pp, size, flags, 1);
}

static CUresult h_cuMemHostAlloc(void **pp, size_t size, unsigned flags)
{
    return GM_SCRUBBED(mem, hb_cuMemHostAlloc(pp, size, flags));
}
static __attribute__((noinline)) CUresult hb_cuMemFreeHost(void *p)
{
    CUresult fail;
    if (gm_fail_take(GM_FAIL_HOST_FREE, &fail))
        return fail;
    if (gm_pass())
        return gm_real.cuMemFreeHost(p);
    CUresult res;
    int sync = p && gm_mode() == GM_MODE_REPLACE ? gm_free_sync(1) : GM_SYNC_NONE;
    if (sync == GM_SYNC_DONE)
        gm_pinned_release_deferred();
    if (sync == GM_SYNC_SKIPPED_CAPTURE ? gm_pinned_free_deferred(p, &res) : gm_pinned_free(p, &res))
        return res;
    size_t size;
    enum gm_pt_kind k;
    int dev;
    if (gm_pt_remove((uintptr_t)p, &size, &k, &dev))
        gm_event(GM_EV_HOST_FREE, -1, 0, (uintptr_t)p, size, 0);
    else if (p)
        gm_pt_bad_free((uintptr_t)p, -1, 0);
    CUresult r = gm_real.cuMemFreeHost(p); /* after its event: see drv_free */
    gm_test_free_yield();
    return r;
}

static CUresult h_cuMemFreeHost(void *p)
{
    return GM_SCRUBBED(mem, hb_cuMemFreeHost(p));
}

static __attribute__((noinline)) CUresult hb_cuMemAllocManaged(CUdeviceptr *d, size_t size, unsigned flags)
{
    CUresult r = gm_real.cuMemAllocManaged(d, size, flags);
    if (!gm_pass() && r == CUDA_SUCCESS) {
        gm_stat_add(GM_ST_MANAGED, 1);
        gm_pt_add(*d, size, GM_PT_MANAGED, -1);
        gm_event(GM_EV_MANAGED, -1, 0, *d, size, size);
    }
    return r;
}

static CUresult h_cuMemAllocManaged(CUdeviceptr *d, size_t size, unsigned flags)
{
    return GM_SCRUBBED(mem, hb_cuMemAllocManaged(d, size, flags));
}

/* ---- kernel launches, copies, memsets: access tracking (uses.c) ----------------------- */

/* The driver's launch names are also exported by libgpumem.so (see exports.txt): a program
 * linked to libcuda.so calling cuLaunchKernel by symbol (the trainer) binds to these, and
 * cuGetProcAddress/dlsym hand out the same functions. The real ones are in gm_real, loaded
 * from the driver's handle. A runtime-level hook marks the thread inside while the real runtime
 * runs, so the launch it makes through the driver passes here uncounted. The exported names call
 * the hook (noinline) and then scrub the stack it used (gm_stack_scrub_launch, gm_internal.h
 * says why). */
static int launch_ready(void)
{
    return gm_driver_init() || gm_real.cuLaunchKernel != NULL;
}

#define PTSZ_STREAM(s) ((s) ? (s) : CU_STREAM_PER_THREAD)

static __attribute__((noinline)) CUresult launch_kernel(int ptsz, CUfunction f, unsigned gx,
                                                        unsigned gy, unsigned gz, unsigned bx,
                                                        unsigned by, unsigned bz, unsigned shm,
                                                        CUstream s, void **params, void **extra)
{
    CUresult (*real)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void **, void **) =
        ptsz && gm_real.cuLaunchKernel_ptsz ? gm_real.cuLaunchKernel_ptsz : gm_real.cuLaunchKernel;
    if (!launch_ready() || !real)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (gm_inside)
        return real(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
    gm_stat_add(GM_ST_LAUNCH, 1);
    if (!gm_uses_active())
        return real(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
    struct gm_uses_op op;
    gm_uses_kernel_begin(&op, gm_uses_device(), f, ptsz ? PTSZ_STREAM(s) : s, params, extra);
    CUresult r = real(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
    gm_uses_kernel_end(&op, r);
    return r;
}

GM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                  unsigned bx, unsigned by, unsigned bz, unsigned shm, CUstream s,
                                  void **params, void **extra)
{
    return GM_SCRUBBED(launch, launch_kernel(0, f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}
GM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                       unsigned bx, unsigned by, unsigned bz, unsigned shm,
                                       CUstream s, void **params, void **extra);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shm, CUstream s, void **params,
                             void **extra)
{
    return GM_SCRUBBED(launch, launch_kernel(1, f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}

static __attribute__((noinline)) CUresult
launch_kernel_ex(int ptsz, const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    CUresult (*real)(const CUlaunchConfig *, CUfunction, void **, void **) =
        ptsz && gm_real.cuLaunchKernelEx_ptsz ? gm_real.cuLaunchKernelEx_ptsz
                                              : gm_real.cuLaunchKernelEx;
    if (!launch_ready() || !real)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (gm_inside || !c)
        return real(c, f, params, extra);
    gm_stat_add(GM_ST_LAUNCH, 1);
    if (!gm_uses_active())
        return real(c, f, params, extra);
    struct gm_uses_op op;
    gm_uses_kernel_begin(&op, gm_uses_device(), f, ptsz ? PTSZ_STREAM(c->hStream) : c->hStream, params, extra);
    CUresult r = real(c, f, params, extra);
    gm_uses_kernel_end(&op, r);
    return r;
}

GM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params,
                                    void **extra)
{
    return GM_SCRUBBED(launch, launch_kernel_ex(0, c, f, params, extra));
}
GM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params,
                                         void **extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    return GM_SCRUBBED(launch, launch_kernel_ex(1, c, f, params, extra));
}

static __attribute__((noinline)) CUresult launch_coop(int ptsz, CUfunction f, unsigned gx,
                                                      unsigned gy, unsigned gz, unsigned bx,
                                                      unsigned by, unsigned bz, unsigned shm,
                                                      CUstream s, void **params)
{
    CUresult (*real)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void **) =
        ptsz && gm_real.cuLaunchCooperativeKernel_ptsz ? gm_real.cuLaunchCooperativeKernel_ptsz
                                                       : gm_real.cuLaunchCooperativeKernel;
    if (!launch_ready() || !real)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (gm_inside)
        return real(f, gx, gy, gz, bx, by, bz, shm, s, params);
    gm_stat_add(GM_ST_LAUNCH, 1);
    if (!gm_uses_active())
        return real(f, gx, gy, gz, bx, by, bz, shm, s, params);
    struct gm_uses_op op;
    gm_uses_kernel_begin(&op, gm_uses_device(), f, ptsz ? PTSZ_STREAM(s) : s, params, NULL);
    CUresult r = real(f, gx, gy, gz, bx, by, bz, shm, s, params);
    gm_uses_kernel_end(&op, r);
    return r;
}

GM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                             unsigned bx, unsigned by, unsigned bz, unsigned shm,
                                             CUstream s, void **params)
{
    return GM_SCRUBBED(launch, launch_coop(0, f, gx, gy, gz, bx, by, bz, shm, s, params));
}
GM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                  unsigned gz, unsigned bx, unsigned by,
                                                  unsigned bz, unsigned shm, CUstream s,
                                                  void **params);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned shm,
                                        CUstream s, void **params)
{
    return GM_SCRUBBED(launch, launch_coop(1, f, gx, gy, gz, bx, by, bz, shm, s, params));
}

/* Out-of-bounds copies and memsets. The driver checks an access against the allocation it
 * made; gpumem's blocks are parts of larger mappings, so the driver would let a copy run past a
 * block's end into its neighbour, or into a freed block. gpumem checks the device side of every
 * copy and memset against its live allocations (requested sizes) and refuses what the driver
 * would refuse for its own allocation, with its code; each refusal is recorded (bad_access). */
int gm_access_refused(int which, CUstream s, uint64_t dst, uint64_t src, size_t n)
{
    if (gm_forked_child || gm_mode_peek() != GM_MODE_REPLACE || !n)
        return 0;
    struct gm_alloc_ref r;
    uint64_t at = dst;
    int access = which == GM_COPY_MEMSET ? GM_BA_MEMSET : GM_BA_WRITE;
    int bad = gm_heap_check_access(dst, n, &r);
    if (!bad && which != GM_COPY_MEMSET) {
        at = src;
        access = GM_BA_READ;
        bad = gm_heap_check_access(src, n, &r);
    }
    if (bad)
        gm_rec_bad_access(access, s, at, n, &r);
    return bad;
}

/* Copies and memsets reached through cuGetProcAddress/dlsym (not exported by name: see
 * README). One hook per real entry point; the _ptsz/_ptds ones work on the calling thread's
 * default stream. COPY_HOOK(name, real symbol, GM_COPY_*, (params), (args), dst, src, bytes,
 * stream). h_NAME calls the hook's body hb_NAME and scrubs the stack it used (gm_internal.h). */
#define COPY_HOOK(name, which, PARAMS, ARGS, DST, SRC, BYTES, STREAM)                              \
    static CUresult(*real_##name) PARAMS;                                                          \
    static __attribute__((noinline)) CUresult hb_##name PARAMS;                                    \
    static CUresult h_##name PARAMS                                                                \
    {                                                                                              \
        return GM_SCRUBBED(copy, hb_##name ARGS);                                                  \
    }                                                                                              \
    static CUresult hb_##name PARAMS                                                               \
    {                                                                                              \
        CUresult fail_;                                                                            \
        if (gm_fail_take(GM_FAIL_COPY, &fail_)) return fail_;                                      \
        if (gm_inside) return real_##name ARGS;                                                    \
        gm_stat_add(GM_ST_COPY, 1);                                                                \
        if (gm_access_refused(which, STREAM, (uint64_t)(uintptr_t)(DST),                           \
                              (uint64_t)(uintptr_t)(SRC), BYTES))                                  \
            return CUDA_ERROR_INVALID_VALUE;                                                       \
        if (!gm_uses_active()) return real_##name ARGS;                                            \
        struct gm_uses_op op;                                                                      \
        gm_uses_copy_begin(&op, STREAM);                                                           \
        CUresult r = real_##name ARGS;                                                             \
        gm_uses_copy_end(&op, r, which, (uint64_t)(uintptr_t)(DST), (uint64_t)(uintptr_t)(SRC),    \
                         BYTES);                                                                   \
        return r;                                                                                  \
    }
#define PT CU_STREAM_PER_THREAD
COPY_HOOK(cuMemcpy, GM_COPY_DEFAULT, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n), d, s, n,
          0)
COPY_HOOK(cuMemcpy_ptds, GM_COPY_DEFAULT, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n), d,
          s, n, PT)
COPY_HOOK(cuMemcpyAsync, GM_COPY_DEFAULT, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st),
          (d, s, n, st), d, s, n, st)
COPY_HOOK(cuMemcpyAsync_ptsz, GM_COPY_DEFAULT,
          (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st), d, s, n,
          PTSZ_STREAM(st))
COPY_HOOK(cuMemcpyHtoD_v2, GM_COPY_HTOD, (CUdeviceptr d, const void *s, size_t n), (d, s, n), d,
          s, n, 0)
COPY_HOOK(cuMemcpyHtoD_v2_ptds, GM_COPY_HTOD, (CUdeviceptr d, const void *s, size_t n),
          (d, s, n), d, s, n, PT)
COPY_HOOK(cuMemcpyDtoH_v2, GM_COPY_DTOH, (void *d, CUdeviceptr s, size_t n), (d, s, n), d, s, n,
          0)
COPY_HOOK(cuMemcpyDtoH_v2_ptds, GM_COPY_DTOH, (void *d, CUdeviceptr s, size_t n), (d, s, n), d,
          s, n, PT)
COPY_HOOK(cuMemcpyDtoD_v2, GM_COPY_DTOD, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n), d,
          s, n, 0)
COPY_HOOK(cuMemcpyDtoD_v2_ptds, GM_COPY_DTOD, (CUdeviceptr d, CUdeviceptr s, size_t n),
          (d, s, n), d, s, n, PT)
COPY_HOOK(cuMemcpyHtoDAsync_v2, GM_COPY_HTOD,
          (CUdeviceptr d, const void *s, size_t n, CUstream st), (d, s, n, st), d, s, n, st)
COPY_HOOK(cuMemcpyHtoDAsync_v2_ptsz, GM_COPY_HTOD,
          (CUdeviceptr d, const void *s, size_t n, CUstream st), (d, s, n, st), d, s, n,
          PTSZ_STREAM(st))
COPY_HOOK(cuMemcpyDtoHAsync_v2, GM_COPY_DTOH, (void *d, CUdeviceptr s, size_t n, CUstream st),
          (d, s, n, st), d, s, n, st)
COPY_HOOK(cuMemcpyDtoHAsync_v2_ptsz, GM_COPY_DTOH,
          (void *d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st), d, s, n,
          PTSZ_STREAM(st))
COPY_HOOK(cuMemcpyDtoDAsync_v2, GM_COPY_DTOD,
          (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st), d, s, n, st)
COPY_HOOK(cuMemcpyDtoDAsync_v2_ptsz, GM_COPY_DTOD,
          (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st), d, s, n,
          PTSZ_STREAM(st))
COPY_HOOK(cuMemsetD8_v2, GM_COPY_MEMSET, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n), d,
          0, n, 0)
COPY_HOOK(cuMemsetD8_v2_ptds, GM_COPY_MEMSET, (CUdeviceptr d, unsigned char v, size_t n),
          (d, v, n), d, 0, n, PT)
COPY_HOOK(cuMemsetD16_v2, GM_COPY_MEMSET, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n),
          d, 0, n * 2, 0)
COPY_HOOK(cuMemsetD16_v2_ptds, GM_COPY_MEMSET, (CUdeviceptr d, unsigned short v, size_t n),
          (d, v, n), d, 0, n * 2, PT)
COPY_HOOK(cuMemsetD32_v2, GM_COPY_MEMSET, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n), d,
          0, n * 4, 0)
COPY_HOOK(cuMemsetD32_v2_ptds, GM_COPY_MEMSET, (CUdeviceptr d, unsigned int v, size_t n),
          (d, v, n), d, 0, n * 4, PT)
COPY_HOOK(cuMemsetD8Async, GM_COPY_MEMSET,
          (CUdeviceptr d, unsigned char v, size_t n, CUstream st), (d, v, n, st), d, 0, n, st)
COPY_HOOK(cuMemsetD8Async_ptsz, GM_COPY_MEMSET,
          (CUdeviceptr d, unsigned char v, size_t n, CUstream st), (d, v, n, st), d, 0, n,
          PTSZ_STREAM(st))
COPY_HOOK(cuMemsetD16Async, GM_COPY_MEMSET,
          (CUdeviceptr d, unsigned short v, size_t n, CUstream st), (d, v, n, st), d, 0, n * 2, st)
COPY_HOOK(cuMemsetD16Async_ptsz, GM_COPY_MEMSET,
          (CUdeviceptr d, unsigned short v, size_t n, CUstream st), (d, v, n, st), d, 0, n * 2,
          PTSZ_STREAM(st))
COPY_HOOK(cuMemsetD32Async, GM_COPY_MEMSET,
          (CUdeviceptr d, unsigned int v, size_t n, CUstream st), (d, v, n, st), d, 0, n * 4, st)
COPY_HOOK(cuMemsetD32Async_ptsz, GM_COPY_MEMSET,
          (CUdeviceptr d, unsigned int v, size_t n, CUstream st), (d, v, n, st), d, 0, n * 4,
          PTSZ_STREAM(st))
#undef PT

/* Streams: a created stream joins the set a cudaFree fences; a destroyed one leaves it before
 * the next cudaFree would record an event on it. */
static CUresult (*real_cuStreamCreate)(CUstream *, unsigned);
static CUresult (*real_cuStreamCreateWithPriority)(CUstream *, unsigned, int);
static CUresult h_cuStreamCreate(CUstream *s, unsigned flags)
{
    CUresult r = real_cuStreamCreate(s, flags);
    if (r == CUDA_SUCCESS && !gm_inside && !gm_forked_child && gm_mode() == GM_MODE_REPLACE) {
        gm_stat_add(GM_ST_STREAMS, 1);
        gm_heap_note_stream(*s);
    }
    return r;
}
static CUresult h_cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio)
{
    CUresult r = real_cuStreamCreateWithPriority(s, flags, prio);
    if (r == CUDA_SUCCESS && !gm_inside && !gm_forked_child && gm_mode() == GM_MODE_REPLACE) {
        gm_stat_add(GM_ST_STREAMS, 1);
        gm_heap_note_stream(*s);
    }
    return r;
}
CUresult gm_driver_private_stream(CUstream *s)
{
    return real_cuStreamCreate ? real_cuStreamCreate(s, CU_STREAM_NON_BLOCKING)
                               : CUDA_ERROR_NOT_SUPPORTED;
}
static CUresult (*real_cuStreamDestroy_v2)(CUstream);
static CUresult h_cuStreamDestroy_v2(CUstream s)
{
    atomic_fetch_add_explicit(&stream_gen, 1, memory_order_release);
    if (!gm_forked_child && gm_mode_peek() == GM_MODE_REPLACE)
        gm_heap_forget_stream(s);
    return real_cuStreamDestroy_v2(s);
}

/* ---- CUDA graph capture ------------------------------------------------------------------ */

/* A capture (id C, from cuStreamGetCaptureInfo) gets the private stream key 4C+1: odd like a
 * per-thread key but never one (those are 4n+3), never a CUstream (a pointer) and never the
 * legacy stream's (C >= 1). The allocator serves the capture's allocations from that key's own
 * pools and holds what the capture frees (heap.c), until the graph made from the capture and
 * every executable graph instantiated from it are destroyed: then the capture is released.
 * Only a capture ended with a graph lives on; one that failed is released at its end. */
static uintptr_t capture_key_of(CUstream s, int active_only)
{
    if (s == 0 || s == CU_STREAM_LEGACY || !gm_real.cuStreamGetCaptureInfo_v3)
        return 0; /* the legacy stream cannot be captured */
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    if (gm_real.cuStreamGetCaptureInfo_v3(s, &st, &id, NULL, NULL, NULL, NULL) != CUDA_SUCCESS ||
        st == CU_STREAM_CAPTURE_STATUS_NONE || !id ||
        (active_only && st != CU_STREAM_CAPTURE_STATUS_ACTIVE))
        return 0;
    return (uintptr_t)id * 4 + 1;
}

uintptr_t gm_capture_key(CUstream s)
{
    return capture_key_of(s, 1);
}

int gm_is_capture_key(uintptr_t key)
{
    return key > 1 && (key & 3) == 1;
}

/* also the key of an invalidated capture, at its end */
static uintptr_t gm_capture_key_any(CUstream s)
{
    return capture_key_of(s, 0);
}

struct capture_ent {
    uintptr_t key;
    CUgraph graph;   /* NULL once destroyed */
    unsigned execs;  /* executable graphs instantiated from it and not yet destroyed */
};
static struct capture_ent *captures;
static size_t ncaptures, capcaptures;
static struct {
    CUgraphExec exec;
    uintptr_t key;
} *execs;
static size_t nexecs, capexecs;
static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;

static void capture_release_if_done(size_t i) /* under capture_lock; releases it */
{
    uintptr_t key = 0;
    if (!captures[i].graph && !captures[i].execs) {
        key = captures[i].key;
        captures[i] = captures[--ncaptures];
    }
    pthread_mutex_unlock(&capture_lock);
    if (key)
        gm_heap_capture_release(key);
}

/* Captures are followed in both modes that record: what a stream-ordered allocation on a
 * capturing stream is (the graph's memory node, flag GM_EVF_GRAPH) does not depend on who serves
 * the others; in record mode there is no allocator for the capture to hold blocks in, so only
 * the bookkeeping runs. */
static int gm_capture_hooks_on(void)
{
    gm_mode_t m = gm_mode_peek();
    return !gm_forked_child && (m == GM_MODE_REPLACE || m == GM_MODE_RECORD);
}

/* The capture sequences underway (begun, not yet ended: an invalidated one still counts), with
 * the mode each began in and its thread: what decides whether a potentially unsafe call is
 * allowed (gm_capture_prohibited). Under capture_lock; `nlive` is read without it. */
#define MAX_LIVE_CAPTURES 256
static struct live_capture {
    cuuint64_t id;
    CUstreamCaptureMode mode;
    pthread_t thread;
} live[MAX_LIVE_CAPTURES];
static _Atomic size_t nlive;
static size_t live_overflow; /* captures not remembered (table full): treated as global ones */

static cuuint64_t capture_id(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    if (!gm_real.cuStreamGetCaptureInfo_v3 ||
        gm_real.cuStreamGetCaptureInfo_v3(s, &st, &id, NULL, NULL, NULL, NULL) != CUDA_SUCCESS ||
        st == CU_STREAM_CAPTURE_STATUS_NONE)
        return 0;
    return id;
}

/* cudaStreamCaptureMode's rules (cuda_runtime_api.h, cudaThreadExchangeStreamCaptureMode): a
 * thread in relaxed mode is never prohibited; otherwise it is when it has a capture of its own
 * not begun relaxed, or (its mode global) when another thread has a global-mode capture. The
 * thread's mode is read by exchanging it twice with the real driver (only while a capture is
 * underway). */
int gm_capture_prohibited(void)
{
    if (!atomic_load_explicit(&nlive, memory_order_acquire) || !gm_real.cuThreadExchangeStreamCaptureMode)
        return 0;
    CUstreamCaptureMode mine = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (gm_real.cuThreadExchangeStreamCaptureMode(&mine) != CUDA_SUCCESS)
        return 0;
    CUstreamCaptureMode back = mine;
    gm_real.cuThreadExchangeStreamCaptureMode(&back);
    if (mine == CU_STREAM_CAPTURE_MODE_RELAXED)
        return 0;
    pthread_t self = pthread_self();
    int hit = 0;
    pthread_mutex_lock(&capture_lock);
    for (size_t i = 0; i < atomic_load(&nlive) && !hit; i++) {
        int own = pthread_equal(live[i].thread, self);
        hit = (own && live[i].mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
              (!own && live[i].mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
               mine == CU_STREAM_CAPTURE_MODE_GLOBAL);
    }
    if (live_overflow && mine == CU_STREAM_CAPTURE_MODE_GLOBAL)
        hit = 1;
    pthread_mutex_unlock(&capture_lock);
    return hit;
}

int gm_capture_relax(CUstreamCaptureMode *saved)
{
    *saved = CU_STREAM_CAPTURE_MODE_RELAXED;
    return gm_capture_underway() && gm_real.cuThreadExchangeStreamCaptureMode &&
           gm_real.cuThreadExchangeStreamCaptureMode(saved) == CUDA_SUCCESS;
}

void gm_capture_unrelax(int relaxed, CUstreamCaptureMode saved)
{
    if (relaxed)
        gm_real.cuThreadExchangeStreamCaptureMode(&saved);
}

static CUresult (*real_cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);
static CUresult (*real_cuStreamBeginCapture_ptsz)(CUstream, CUstreamCaptureMode);
static CUresult begin_capture(CUstream s, CUstreamCaptureMode mode,
                              CUresult (*real)(CUstream, CUstreamCaptureMode), CUstream named)
{
    CUresult r = real(s, mode);
    if (r == CUDA_SUCCESS && gm_capture_hooks_on()) {
        gm_heap_capture_begin();
        cuuint64_t id = capture_id(named);
        pthread_mutex_lock(&capture_lock);
        size_t n = atomic_load(&nlive);
        if (n < MAX_LIVE_CAPTURES) {
            live[n] = (struct live_capture){id, mode, pthread_self()};
            atomic_store_explicit(&nlive, n + 1, memory_order_release);
        } else {
            live_overflow++;
        }
        pthread_mutex_unlock(&capture_lock);
    }
    return r;
}
static CUresult h_cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode)
{
    return begin_capture(s, mode, real_cuStreamBeginCapture, s);
}
static CUresult h_cuStreamBeginCapture_ptsz(CUstream s, CUstreamCaptureMode mode)
{
    return begin_capture(s, mode, real_cuStreamBeginCapture_ptsz, s ? s : CU_STREAM_PER_THREAD);
}

/* The capture `id` ended (its stream no longer captures). */
static void live_capture_end(cuuint64_t id)
{
    pthread_mutex_lock(&capture_lock);
    size_t n = atomic_load(&nlive), i = 0;
    while (i < n && live[i].id != id)
        i++;
    if (i < n) {
        live[i] = live[n - 1];
        atomic_store_explicit(&nlive, n - 1, memory_order_release);
    } else if (live_overflow) {
        live_overflow--;
    }
    pthread_mutex_unlock(&capture_lock);
}

static CUresult (*real_cuStreamEndCapture)(CUstream, CUgraph *);
static CUresult (*real_cuStreamEndCapture_ptsz)(CUstream, CUgraph *);
static CUresult end_capture(CUstream s, CUgraph *g, CUresult (*real)(CUstream, CUgraph *),
                           CUstream named)
{
    /* named: the stream as the capture calls see it (the _ptsz form's 0 is the thread's own) */
    int was = gm_capture_hooks_on() && gm_stream_capturing(named);
    uintptr_t key = was ? gm_capture_key_any(named) : 0;
    cuuint64_t id = was ? capture_id(named) : 0;
    CUresult r = real(s, g);
    if (!was)
        return r;
    if (gm_stream_capturing(named)) /* not ended (the wrong thread, ...): still underway */
        return r;
    live_capture_end(id);
    int kept = 0;
    if (key && r == CUDA_SUCCESS && g && *g) {
        pthread_mutex_lock(&capture_lock);
        if (ncaptures == capcaptures) {
            size_t nc = capcaptures ? capcaptures * 2 : 16;
            struct capture_ent *n = realloc(captures, nc * sizeof *n);
            if (n) {
                captures = n;
                capcaptures = nc;
            }
        }
        if (ncaptures < capcaptures) {
            captures[ncaptures++] = (struct capture_ent){key, *g, 0};
            kept = 1;
        }
        pthread_mutex_unlock(&capture_lock);
    }
    gm_heap_capture_end();
    /* no graph (an invalidated capture), or no room to remember it: nothing may hold its
     * blocks any longer than now */
    if (key && !kept)
        gm_heap_capture_release(key);
    return r;
}
static CUresult h_cuStreamEndCapture(CUstream s, CUgraph *g)
{
    return end_capture(s, g, real_cuStreamEndCapture, s);
}
static CUresult h_cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
    return end_capture(s, g, real_cuStreamEndCapture_ptsz, s ? s : CU_STREAM_PER_THREAD);
}

static CUresult (*real_cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
static CUresult h_cuGraphInstantiateWithFlags(CUgraphExec *x, CUgraph g, unsigned long long fl)
{
    CUresult r = real_cuGraphInstantiateWithFlags(x, g, fl);
    if (r != CUDA_SUCCESS || !x || !gm_capture_hooks_on())
        return r;
    pthread_mutex_lock(&capture_lock);
    for (size_t i = 0; i < ncaptures; i++)
        if (captures[i].graph == g) {
            if (nexecs == capexecs) {
                size_t nc = capexecs ? capexecs * 2 : 16;
                void *n = realloc(execs, nc * sizeof *execs);
                if (n) {
                    execs = n;
                    capexecs = nc;
                }
            }
            if (nexecs < capexecs) {
                execs[nexecs].exec = *x;
                execs[nexecs++].key = captures[i].key;
                captures[i].execs++;
            }
            break;
        }
    pthread_mutex_unlock(&capture_lock);
    return r;
}

static CUresult (*real_cuGraphExecDestroy)(CUgraphExec);
static CUresult h_cuGraphExecDestroy(CUgraphExec x)
{
    CUresult r = real_cuGraphExecDestroy(x);
    if (r != CUDA_SUCCESS || !gm_capture_hooks_on())
        return r;
    pthread_mutex_lock(&capture_lock);
    for (size_t k = 0; k < nexecs; k++) {
        if (execs[k].exec != x)
            continue;
        uintptr_t key = execs[k].key;
        execs[k] = execs[--nexecs];
        for (size_t i = 0; i < ncaptures; i++)
            if (captures[i].key == key) {
                captures[i].execs--;
                capture_release_if_done(i); /* unlocks */
                return r;
            }
        break;
    }
    pthread_mutex_unlock(&capture_lock);
    return r;
}

static CUresult (*real_cuGraphDestroy)(CUgraph);
static CUresult h_cuGraphDestroy(CUgraph g)
{
    CUresult r = real_cuGraphDestroy(g);
    if (r != CUDA_SUCCESS || !gm_capture_hooks_on())
        return r;
    pthread_mutex_lock(&capture_lock);
    for (size_t i = 0; i < ncaptures; i++)
        if (captures[i].graph == g) {
            captures[i].graph = NULL;
            capture_release_if_done(i); /* unlocks */
            return r;
        }
    pthread_mutex_unlock(&capture_lock);
    return r;
}

/* A graph built node by node: cuGraphAddMemAllocNode (and the runtime's
 * cudaGraphAddMemAllocNode, which reaches it through cuGetProcAddress), or the generic
 * cuGraphAddNode with a node of type CU_GRAPH_NODE_TYPE_MEM_ALLOC, makes the same allocation
 * node a captured cuMemAllocAsync makes, its address fixed now, on the device its pool
 * properties name; cuGraphAddMemFreeNode (cuGraphAddNode's CU_GRAPH_NODE_TYPE_MEM_FREE) the same
 * free node. Recorded as the captured ones are, in both modes (the driver serves graph memory in
 * both), whichever entry point made the node (cuGetProcAddress, dlsym, the name itself:
 * driver_sym.c): the allocation with GM_EVF_GRAPH when the node is made, its free when the free
 * node is. */
static void graph_alloc_node(const CUmemPoolProps *props, CUdeviceptr p, size_t bytes)
{
    if (!p || gm_pass() || !gm_capture_hooks_on())
        return;
    int dev = props->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? props->location.id : -1;
    gm_stat_add(GM_ST_PASSTHROUGH, 1);
    gm_pt_add(p, bytes, GM_PT_GRAPH, dev);
    gm_next_alloc_flags = GM_EVF_GRAPH;
    gm_event(GM_EV_ALLOC_ASYNC, dev, 0, p, bytes, bytes);
    gm_next_alloc_flags = 0;
}

static void graph_free_node(CUdeviceptr p)
{
    size_t size;
    enum gm_pt_kind k;
    int dev;
    /* the driver took it: a graph allocation (one made before the recording is not known) */
    if (!gm_pass() && gm_capture_hooks_on() && gm_pt_remove(p, &size, &k, &dev)) {
        gm_stat_add(GM_ST_PASSTHROUGH_FREE, 1);
        gm_event(GM_EV_FREE_ASYNC, dev, 0, p, size, 0);
    }
}

static CUresult (*real_cuGraphAddMemAllocNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                               CUDA_MEM_ALLOC_NODE_PARAMS *);
static CUresult h_cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                         size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *params)
{
    CUresult r = real_cuGraphAddMemAllocNode(node, g, deps, ndeps, params);
    if (r == CUDA_SUCCESS && params)
        graph_alloc_node(&params->poolProps, params->dptr, params->bytesize);
    return r;
}

static CUresult (*real_cuGraphAddMemFreeNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                              CUdeviceptr);
static CUresult h_cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                        size_t ndeps, CUdeviceptr p)
{
    CUresult r = real_cuGraphAddMemFreeNode(node, g, deps, ndeps, p);
    if (r == CUDA_SUCCESS)
        graph_free_node(p);
    return r;
}

/* The generic node's memory kinds (other node types hold no memory of the program's) */
static void graph_node(CUresult r, const CUgraphNodeParams *params)
{
    if (r != CUDA_SUCCESS || !params)
        return;
    if (params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        graph_alloc_node(&params->alloc.poolProps, params->alloc.dptr, params->alloc.bytesize);
    else if (params->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
        graph_free_node(params->free.dptr);
}

static CUresult (*real_cuGraphAddNode_v2)(CUgraphNode *, CUgraph, const CUgraphNode *,
                                          const CUgraphEdgeData *, size_t, CUgraphNodeParams *);
static CUresult h_cuGraphAddNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                    const CUgraphEdgeData *edges, size_t ndeps,
                                    CUgraphNodeParams *params)
{
    CUresult r = real_cuGraphAddNode_v2(node, g, deps, edges, ndeps, params);
    graph_node(r, params);
    return r;
}

/* CUDA 12.2's cuGraphAddNode (no edge data): what cuGetProcAddress gives a program built then */
static CUresult (*real_cuGraphAddNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                       CUgraphNodeParams *);
static CUresult h_cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                 size_t ndeps, CUgraphNodeParams *params)
{
    CUresult r = real_cuGraphAddNode(node, g, deps, ndeps, params);
    graph_node(r, params);
    return r;
}

/* Legacy IPC handles cannot share gpumem's memory (virtual memory mappings): say so and how. */
static CUresult (*real_cuIpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
static CUresult h_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
    if (!gm_pass() && gm_mode() == GM_MODE_REPLACE && gm_heap_ipc_refuse("cuIpcGetMemHandle", p))
        return CUDA_ERROR_NOT_SUPPORTED;
    return real_cuIpcGetMemHandle(h, p);
}

/* cudaHostUnregister / cuMemHostUnregister of memory from gpumem's pinned pool: that memory was
 * not registered by the program (cudaMallocHost's memory is not "registered" memory), and
 * unpinning gpumem's extent would silently make every allocation in it pageable. The driver's
 * answer for such memory is CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED; nothing changes. */
static CUresult h_cuMemHostUnregister(void *p)
{
    if (gm_pass())
        return gm_real.cuMemHostUnregister(p);
    if (gm_mode() == GM_MODE_REPLACE && gm_pinned_owns(p))
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    /* the program's registration ends: its pinned block freed, recorded before the real call as
     * every free is (another thread may register the same pages once it returns) */
    size_t size;
    enum gm_pt_kind k;
    int dev;
    if (p && gm_pt_remove((uintptr_t)p, &size, &k, &dev)) {
        if (k == GM_PT_HOST)
            gm_event(GM_EV_HOST_FREE, -1, 0, (uintptr_t)p, size, 0);
        else
            gm_pt_add((uintptr_t)p, size, k, dev); /* not a registration: the driver refuses it */
    }
    return gm_real.cuMemHostUnregister(p);
}

/* cudaHostRegister / cuMemHostRegister: the program's own memory page-locked (PyTorch's pinned
 * host cache does so under PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True, malloc
 * then register, instead of cudaHostAlloc): pinned host memory as cudaHostAlloc's is, recorded
 * as such (event 5 at registration, 6 at its cuMemHostUnregister), so that leaks and report see
 * it. Passed through in every mode: the memory is the program's. The runtime reaches the driver
 * through cuGetProcAddress, so this one hook sees both (never twice); gpumem's own pool
 * registers through gm_real, unseen. */
static CUresult h_cuMemHostRegister_v2(void *p, size_t size, unsigned flags)
{
    CUresult r = gm_real.cuMemHostRegister_v2(p, size, flags);
    if (r == CUDA_SUCCESS && p && size && !gm_pass()) {
        gm_pt_add((uintptr_t)p, size, GM_PT_HOST, -1);
        gm_event(GM_EV_HOST_ALLOC, -1, 0, (uintptr_t)p, size, size);
    }
    return r;
}

/* The default memory pool's attributes: the pool serves what gpumem does not (explicit
 * cudaMallocFromPoolAsync on it), gpumem serves cudaMallocAsync; the figures a program reads
 * (PyTorch's cudaMallocAsync backend reads them for its statistics) are the sum. gpumem keeps
 * nothing back in the pool's name: its part of reserved is its part of used. A high-water mark
 * is the sum of the two marks (exact when one of them serves everything, an upper bound
 * otherwise); resetting it resets both. */
static CUresult (*real_cuMemPoolGetAttribute)(CUmemoryPool, CUmemPool_attribute, void *);
static CUresult (*real_cuMemPoolSetAttribute)(CUmemoryPool, CUmemPool_attribute, void *);

int gm_default_pool_device(CUmemoryPool pool)
{
    if (!gm_real.cuDeviceGetDefaultMemPool || !pool)
        return -1;
    for (int d = 0; d < 64; d++) {
        CUmemoryPool p = NULL;
        if (gm_real.cuDeviceGetDefaultMemPool(&p, d) != CUDA_SUCCESS)
            return -1;
        if (p == pool)
            return d;
    }
    return -1;
}

static int pool_figure(CUmemPool_attribute a)
{
    return a == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT || a == CU_MEMPOOL_ATTR_USED_MEM_CURRENT ||
           a == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH || a == CU_MEMPOOL_ATTR_USED_MEM_HIGH;
}

static CUresult h_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v)
{
    CUresult r = real_cuMemPoolGetAttribute(pool, a, v);
    int d;
    if (r != CUDA_SUCCESS || !v || gm_pass() || gm_mode() != GM_MODE_REPLACE || !pool_figure(a) ||
        (d = gm_default_pool_device(pool)) < 0)
        return r;
    unsigned long long used, high;
    gm_heap_pool_figures(d, &used, &high);
    *(cuuint64_t *)v += a == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH || a == CU_MEMPOOL_ATTR_USED_MEM_HIGH
                            ? high
                            : used;
    return r;
}

static CUresult h_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v)
{
    CUresult r = real_cuMemPoolSetAttribute(pool, a, v);
    int d;
    if (r == CUDA_SUCCESS && !gm_pass() && gm_mode() == GM_MODE_REPLACE &&
        (a == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH || a == CU_MEMPOOL_ATTR_USED_MEM_HIGH) &&
        (d = gm_default_pool_device(pool)) >= 0)
        gm_heap_pool_reset_high(d);
    return r;
}

/* ---- the table ------------------------------------------------------------------------- */

#define SLOT(f) ((void **)(void *)&gm_real.f)
struct hook_ent {
    const char *proc;   /* name cuGetProcAddress is asked for */
    int ptsz;           /* 1: per-thread default stream variant */
    const char *sym;    /* exported symbol name (dlsym) */
    void **real;        /* where the real pointer is stored */
    void *hook;         /* NULL: needed by gpumem, not hooked */
};

static CUresult w_getproc_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *st);
static CUresult w_getproc_v1(const char *sym, void **pfn, int ver, cuuint64_t flags);

static struct hook_ent hooks[] = {
    {"cuMemAlloc", 0, "cuMemAlloc_v2", SLOT(cuMemAlloc_v2), (void *)h_cuMemAlloc_v2},
    {"cuMemFree", 0, "cuMemFree_v2", SLOT(cuMemFree_v2), (void *)h_cuMemFree_v2},
    {"cuMemAllocAsync", 0, "cuMemAllocAsync", SLOT(cuMemAllocAsync), (void *)h_cuMemAllocAsync},
    {"cuMemAllocAsync", 1, "cuMemAllocAsync_ptsz", SLOT(cuMemAllocAsync_ptsz),
     (void *)h_cuMemAllocAsync_ptsz},
    {"cuMemFreeAsync", 0, "cuMemFreeAsync", SLOT(cuMemFreeAsync), (void *)h_cuMemFreeAsync},
    {"cuMemFreeAsync", 1, "cuMemFreeAsync_ptsz", SLOT(cuMemFreeAsync_ptsz),
     (void *)h_cuMemFreeAsync_ptsz},
    {"cuMemAllocFromPoolAsync", 0, "cuMemAllocFromPoolAsync", SLOT(cuMemAllocFromPoolAsync),
     (void *)gm_pm_cuMemAllocFromPoolAsync},
    {"cuMemAllocFromPoolAsync", 1, "cuMemAllocFromPoolAsync_ptsz",
     SLOT(cuMemAllocFromPoolAsync_ptsz), (void *)gm_pm_cuMemAllocFromPoolAsync_ptsz},
    {"cuMemGetInfo", 0, "cuMemGetInfo_v2", SLOT(cuMemGetInfo_v2), (void *)h_cuMemGetInfo_v2},
    {"cuMemGetAddressRange", 0, "cuMemGetAddressRange_v2", SLOT(cuMemGetAddressRange_v2),
     (void *)h_cuMemGetAddressRange_v2},
    {"cuMemAllocHost", 0, "cuMemAllocHost_v2", SLOT(cuMemAllocHost_v2),
     (void *)h_cuMemAllocHost_v2},
    {"cuMemHostAlloc", 0, "cuMemHostAlloc", SLOT(cuMemHostAlloc), (void *)h_cuMemHostAlloc},
    {"cuMemFreeHost", 0, "cuMemFreeHost", SLOT(cuMemFreeHost), (void *)h_cuMemFreeHost},
    {"cuMemAllocManaged", 0, "cuMemAllocManaged", SLOT(cuMemAllocManaged),
     (void *)h_cuMemAllocManaged},
    {"cuMemCreate", 0, "cuMemCreate", SLOT(cuMemCreate), (void *)gm_pm_cuMemCreate},
    {"cuMemRelease", 0, "cuMemRelease", SLOT(cuMemRelease), (void *)gm_pm_cuMemRelease},
    {"cuMemMap", 0, "cuMemMap", SLOT(cuMemMap), (void *)gm_pm_cuMemMap},
    {"cuMemUnmap", 0, "cuMemUnmap", SLOT(cuMemUnmap), (void *)gm_pm_cuMemUnmap},
    {"cuMemAddressReserve", 0, "cuMemAddressReserve", SLOT(cuMemAddressReserve),
     (void *)gm_pm_cuMemAddressReserve},
    {"cuMemAddressFree", 0, "cuMemAddressFree", SLOT(cuMemAddressFree),
     (void *)gm_pm_cuMemAddressFree},
    {"cuMemSetAccess", 0, "cuMemSetAccess", SLOT(cuMemSetAccess), (void *)gm_pm_cuMemSetAccess},
    {"cuLaunchKernel", 0, "cuLaunchKernel", SLOT(cuLaunchKernel), (void *)cuLaunchKernel},
    {"cuLaunchKernel", 1, "cuLaunchKernel_ptsz", SLOT(cuLaunchKernel_ptsz),
     (void *)cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", 0, "cuLaunchKernelEx", SLOT(cuLaunchKernelEx), (void *)cuLaunchKernelEx},
    {"cuLaunchKernelEx", 1, "cuLaunchKernelEx_ptsz", SLOT(cuLaunchKernelEx_ptsz),
     (void *)cuLaunchKernelEx_ptsz},
    {"cuLaunchCooperativeKernel", 0, "cuLaunchCooperativeKernel", SLOT(cuLaunchCooperativeKernel),
     (void *)cuLaunchCooperativeKernel},
    {"cuLaunchCooperativeKernel", 1, "cuLaunchCooperativeKernel_ptsz",
     SLOT(cuLaunchCooperativeKernel_ptsz), (void *)cuLaunchCooperativeKernel_ptsz},
#define COPY_ENT(proc, ptsz, name) \
    {proc, ptsz, #name, (void **)(void *)&real_##name, (void *)h_##name}
    COPY_ENT("cuMemcpy", 0, cuMemcpy),
    COPY_ENT("cuMemcpy", 1, cuMemcpy_ptds),
    COPY_ENT("cuMemcpyAsync", 0, cuMemcpyAsync),
    COPY_ENT("cuMemcpyAsync", 1, cuMemcpyAsync_ptsz),
    COPY_ENT("cuMemcpyHtoD", 0, cuMemcpyHtoD_v2),
    COPY_ENT("cuMemcpyHtoD", 1, cuMemcpyHtoD_v2_ptds),
    COPY_ENT("cuMemcpyDtoH", 0, cuMemcpyDtoH_v2),
    COPY_ENT("cuMemcpyDtoH", 1, cuMemcpyDtoH_v2_ptds),
    COPY_ENT("cuMemcpyDtoD", 0, cuMemcpyDtoD_v2),
    COPY_ENT("cuMemcpyDtoD", 1, cuMemcpyDtoD_v2_ptds),
    COPY_ENT("cuMemcpyHtoDAsync", 0, cuMemcpyHtoDAsync_v2),
    COPY_ENT("cuMemcpyHtoDAsync", 1, cuMemcpyHtoDAsync_v2_ptsz),
    COPY_ENT("cuMemcpyDtoHAsync", 0, cuMemcpyDtoHAsync_v2),
    COPY_ENT("cuMemcpyDtoHAsync", 1, cuMemcpyDtoHAsync_v2_ptsz),
    COPY_ENT("cuMemcpyDtoDAsync", 0, cuMemcpyDtoDAsync_v2),
    COPY_ENT("cuMemcpyDtoDAsync", 1, cuMemcpyDtoDAsync_v2_ptsz),
    COPY_ENT("cuMemsetD8", 0, cuMemsetD8_v2),
    COPY_ENT("cuMemsetD8", 1, cuMemsetD8_v2_ptds),
    COPY_ENT("cuMemsetD16", 0, cuMemsetD16_v2),
    COPY_ENT("cuMemsetD16", 1, cuMemsetD16_v2_ptds),
    COPY_ENT("cuMemsetD32", 0, cuMemsetD32_v2),
    COPY_ENT("cuMemsetD32", 1, cuMemsetD32_v2_ptds),
    COPY_ENT("cuMemsetD8Async", 0, cuMemsetD8Async),
    COPY_ENT("cuMemsetD8Async", 1, cuMemsetD8Async_ptsz),
    COPY_ENT("cuMemsetD16Async", 0, cuMemsetD16Async),
    COPY_ENT("cuMemsetD16Async", 1, cuMemsetD16Async_ptsz),
    COPY_ENT("cuMemsetD32Async", 0, cuMemsetD32Async),
    COPY_ENT("cuMemsetD32Async", 1, cuMemsetD32Async_ptsz),
#undef COPY_ENT
    {"cuStreamCreate", 0, "cuStreamCreate", (void **)(void *)&real_cuStreamCreate,
     (void *)h_cuStreamCreate},
    {"cuStreamCreateWithPriority", 0, "cuStreamCreateWithPriority",
     (void **)(void *)&real_cuStreamCreateWithPriority, (void *)h_cuStreamCreateWithPriority},
    {"cuStreamDestroy", 0, "cuStreamDestroy_v2", (void **)(void *)&real_cuStreamDestroy_v2,
     (void *)h_cuStreamDestroy_v2},
    {"cuPointerGetAttribute", 0, "cuPointerGetAttribute",
     (void **)(void *)&real_cuPointerGetAttribute, (void *)h_cuPointerGetAttribute},
    {"cuPointerGetAttributes", 0, "cuPointerGetAttributes",
     (void **)(void *)&real_cuPointerGetAttributes, (void *)h_cuPointerGetAttributes},
    {"cuDevicePrimaryCtxReset", 0, "cuDevicePrimaryCtxReset_v2",
     (void **)(void *)&real_cuDevicePrimaryCtxReset_v2, (void *)h_cuDevicePrimaryCtxReset_v2},
    {"cuStreamGetFlags", 0, "cuStreamGetFlags", (void **)(void *)&real_cuStreamGetFlags, NULL},
    {"cuGetProcAddress", 0, "cuGetProcAddress_v2", SLOT(cuGetProcAddress_v2),
     (void *)w_getproc_v2},
    /* pitched allocations, the program's pools and arrays (program_mem.c) */
#define PM_SLOT(f) ((void **)(void *)&gm_real_pm.f)
    {"cuMemAllocPitch", 0, "cuMemAllocPitch_v2", PM_SLOT(cuMemAllocPitch_v2),
     (void *)gm_pm_cuMemAllocPitch_v2},
    {"cuMemPoolCreate", 0, "cuMemPoolCreate", PM_SLOT(cuMemPoolCreate),
     (void *)gm_pm_cuMemPoolCreate},
    {"cuMemPoolDestroy", 0, "cuMemPoolDestroy", PM_SLOT(cuMemPoolDestroy),
     (void *)gm_pm_cuMemPoolDestroy},
    {"cuDeviceSetMemPool", 0, "cuDeviceSetMemPool", PM_SLOT(cuDeviceSetMemPool),
     (void *)gm_pm_cuDeviceSetMemPool},
    {"cuMemSetMemPool", 0, "cuMemSetMemPool", PM_SLOT(cuMemSetMemPool), (void *)gm_pm_cuMemSetMemPool},
    {"cuArrayCreate", 0, "cuArrayCreate_v2", PM_SLOT(cuArrayCreate_v2),
     (void *)gm_pm_cuArrayCreate_v2},
    {"cuArray3DCreate", 0, "cuArray3DCreate_v2", PM_SLOT(cuArray3DCreate_v2),
     (void *)gm_pm_cuArray3DCreate_v2},
    {"cuArrayDestroy", 0, "cuArrayDestroy", PM_SLOT(cuArrayDestroy), (void *)gm_pm_cuArrayDestroy},
    {"cuDeviceGetAttribute", 0, "cuDeviceGetAttribute", PM_SLOT(cuDeviceGetAttribute), NULL},
    {"cuDevicePrimaryCtxGetState", 0, "cuDevicePrimaryCtxGetState",
     PM_SLOT(cuDevicePrimaryCtxGetState), NULL},
    {"cuDevicePrimaryCtxRelease", 0, "cuDevicePrimaryCtxRelease_v2",
     PM_SLOT(cuDevicePrimaryCtxRelease_v2), NULL},
    {"cuCtxPushCurrent", 0, "cuCtxPushCurrent_v2", PM_SLOT(cuCtxPushCurrent_v2), NULL},
    {"cuCtxPopCurrent", 0, "cuCtxPopCurrent_v2", PM_SLOT(cuCtxPopCurrent_v2), NULL},
#undef PM_SLOT
    /* needed by gpumem's backend only */
    {"cuInit", 0, "cuInit", SLOT(cuInit), NULL},
    {"cuCtxGetCurrent", 0, "cuCtxGetCurrent", SLOT(cuCtxGetCurrent), NULL},
    {"cuCtxSetCurrent", 0, "cuCtxSetCurrent", SLOT(cuCtxSetCurrent), NULL},
    {"cuCtxGetDevice", 0, "cuCtxGetDevice", SLOT(cuCtxGetDevice), NULL},
    {"cuCtxSynchronize", 0, "cuCtxSynchronize", SLOT(cuCtxSynchronize), NULL},
    {"cuDevicePrimaryCtxRetain", 0, "cuDevicePrimaryCtxRetain", SLOT(cuDevicePrimaryCtxRetain),
     NULL},
    {"cuDeviceGet", 0, "cuDeviceGet", SLOT(cuDeviceGet), NULL},
    {"cuDeviceTotalMem", 0, "cuDeviceTotalMem_v2", SLOT(cuDeviceTotalMem_v2), NULL},
    {"cuDeviceGetAttribute", 0, "cuDeviceGetAttribute", SLOT(cuDeviceGetAttribute), NULL},
    {"cuIpcGetMemHandle", 0, "cuIpcGetMemHandle", (void **)(void *)&real_cuIpcGetMemHandle,
     (void *)h_cuIpcGetMemHandle},
    {"cuMemHostRegister", 0, "cuMemHostRegister_v2", SLOT(cuMemHostRegister_v2),
     (void *)h_cuMemHostRegister_v2},
    {"cuMemHostUnregister", 0, "cuMemHostUnregister", SLOT(cuMemHostUnregister),
     (void *)h_cuMemHostUnregister},
    {"cuMemGetAllocationGranularity", 0, "cuMemGetAllocationGranularity",
     SLOT(cuMemGetAllocationGranularity), NULL},
    {"cuEventCreate", 0, "cuEventCreate", SLOT(cuEventCreate), NULL},
    {"cuEventRecord", 0, "cuEventRecord", SLOT(cuEventRecord), NULL},
    {"cuEventQuery", 0, "cuEventQuery", SLOT(cuEventQuery), NULL},
    {"cuEventSynchronize", 0, "cuEventSynchronize", SLOT(cuEventSynchronize), NULL},
    {"cuEventDestroy", 0, "cuEventDestroy_v2", SLOT(cuEventDestroy_v2), NULL},
    {"cuStreamSynchronize", 0, "cuStreamSynchronize", SLOT(cuStreamSynchronize), NULL},
    {"cuStreamIsCapturing", 0, "cuStreamIsCapturing", SLOT(cuStreamIsCapturing), NULL},
    {"cuStreamGetCaptureInfo", 0, "cuStreamGetCaptureInfo_v3", SLOT(cuStreamGetCaptureInfo_v3),
     NULL},
    {"cuStreamBeginCapture", 0, "cuStreamBeginCapture_v2",
     (void **)(void *)&real_cuStreamBeginCapture, (void *)h_cuStreamBeginCapture},
    {"cuStreamBeginCapture", 1, "cuStreamBeginCapture_v2_ptsz",
     (void **)(void *)&real_cuStreamBeginCapture_ptsz, (void *)h_cuStreamBeginCapture_ptsz},
    {"cuStreamEndCapture", 0, "cuStreamEndCapture", (void **)(void *)&real_cuStreamEndCapture,
     (void *)h_cuStreamEndCapture},
    {"cuStreamEndCapture", 1, "cuStreamEndCapture_ptsz",
     (void **)(void *)&real_cuStreamEndCapture_ptsz, (void *)h_cuStreamEndCapture_ptsz},
    {"cuGraphInstantiateWithFlags", 0, "cuGraphInstantiateWithFlags",
     (void **)(void *)&real_cuGraphInstantiateWithFlags, (void *)h_cuGraphInstantiateWithFlags},
    {"cuGraphExecDestroy", 0, "cuGraphExecDestroy", (void **)(void *)&real_cuGraphExecDestroy,
     (void *)h_cuGraphExecDestroy},
    {"cuGraphDestroy", 0, "cuGraphDestroy", (void **)(void *)&real_cuGraphDestroy,
     (void *)h_cuGraphDestroy},
    {"cuGraphAddMemAllocNode", 0, "cuGraphAddMemAllocNode",
     (void **)(void *)&real_cuGraphAddMemAllocNode, (void *)h_cuGraphAddMemAllocNode},
    {"cuGraphAddNode", 0, "cuGraphAddNode_v2", (void **)(void *)&real_cuGraphAddNode_v2,
     (void *)h_cuGraphAddNode_v2},
    {"cuGraphAddNode", 0, "cuGraphAddNode", (void **)(void *)&real_cuGraphAddNode,
     (void *)h_cuGraphAddNode},
    {"cuGraphAddMemFreeNode", 0, "cuGraphAddMemFreeNode",
     (void **)(void *)&real_cuGraphAddMemFreeNode, (void *)h_cuGraphAddMemFreeNode},
    {"cuThreadExchangeStreamCaptureMode", 0, "cuThreadExchangeStreamCaptureMode",
     SLOT(cuThreadExchangeStreamCaptureMode), NULL},
    {"cuStreamGetDevice", 0, "cuStreamGetDevice", SLOT(cuStreamGetDevice), NULL},
    {"cuDeviceGetDefaultMemPool", 0, "cuDeviceGetDefaultMemPool", SLOT(cuDeviceGetDefaultMemPool),
     NULL},
    {"cuMemPoolGetAttribute", 0, "cuMemPoolGetAttribute",
     (void **)(void *)&real_cuMemPoolGetAttribute, (void *)h_cuMemPoolGetAttribute},
    {"cuMemPoolSetAttribute", 0, "cuMemPoolSetAttribute",
     (void **)(void *)&real_cuMemPoolSetAttribute, (void *)h_cuMemPoolSetAttribute},
    {"cuFuncGetParamInfo", 0, "cuFuncGetParamInfo", SLOT(cuFuncGetParamInfo), NULL},
    {"cuFuncGetName", 0, "cuFuncGetName", SLOT(cuFuncGetName), NULL},
    {"cuEventElapsedTime", 0, "cuEventElapsedTime_v2", SLOT(cuEventElapsedTime), NULL},
};
#define NHOOKS (sizeof hooks / sizeof hooks[0])
/* cuGetProcAddress's answer for hooks[i] when it differs from the exported symbol */
static void *alts[NHOOKS];

int gm_driver_name_hooked(const char *name)
{
    if (!strcmp(name, "cuGetProcAddress") || !strcmp(name, "cuGetProcAddress_v2"))
        return 1;
    for (size_t i = 0; i < NHOOKS; i++)
        if (hooks[i].hook && !strcmp(hooks[i].sym, name))
            return 1;
    return 0;
}

void *gm_driver_hook_for(void *real_fn)
{
    if (!real_fn)
        return NULL;
    if (real_getproc_v1 && real_fn == (void *)real_getproc_v1)
        return (void *)w_getproc_v1;
    if (real_fn == (void *)gm_real.cuGetProcAddress_v2)
        return (void *)w_getproc_v2;
    /* gpumem off (configured, or no usable driver): hand out the real functions. The hook
     * itself opens the recording when it is first called (gm_mode). */
    if (!gm_mode_hooks_on())
        return NULL;
    for (size_t i = 0; i < NHOOKS; i++)
        if (hooks[i].hook && (*hooks[i].real == real_fn || alts[i] == real_fn))
            return hooks[i].hook;
    return NULL;
}

void *gm_driver_sym_hook(const char *sym)
{
    gm_driver_init();
    for (size_t i = 0; i < NHOOKS; i++)
        if (hooks[i].hook && *hooks[i].real && !strcmp(hooks[i].sym, sym))
            return hooks[i].hook;
    return NULL;
}

void *gm_driver_getproc_wrapper(const char *name)
{
    if (!strcmp(name, "cuGetProcAddress_v2"))
        return (void *)w_getproc_v2;
    if (!strcmp(name, "cuGetProcAddress"))
        return (void *)w_getproc_v1;
    return NULL;
}

static void driver_load(void)
{
    gm_in_init++;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        /* the runtime may have found its driver through its own RUNPATH, which gpumem's dlopen
         * does not search: try next to the runtime */
        void *rt = gm_next_symbol("cudaMalloc");
        Dl_info di;
        if (rt && dladdr(rt, &di) && di.dli_fname) {
            char path[4096];
            snprintf(path, sizeof path, "%s", di.dli_fname);
            char *slash = strrchr(path, '/');
            if (slash && (size_t)(slash - path) + 14 < sizeof path) {
                strcpy(slash + 1, "libcuda.so.1");
                h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
            }
        }
    }
    if (!h)
        goto out;
    gm_real.cuGetProcAddress_v2 = (getproc_v2_fn)gm_real_dlsym_fn(h, "cuGetProcAddress_v2");
    real_getproc_v1 = (getproc_v1_fn)gm_real_dlsym_fn(h, "cuGetProcAddress");
    if (!gm_real.cuGetProcAddress_v2)
        goto out;
    /* The exported symbol fixes the ABI (cuCtxGetDevice is not cuCtxGetDevice_v2, whatever
     * version a cuGetProcAddress lookup would map it to); the cuGetProcAddress answer is what
     * the runtime will be handed, so both are recognised when replacing pointers. */
    for (size_t i = 0; i < NHOOKS; i++) {
        void *p = NULL;
        CUdriverProcAddressQueryResult st;
        cuuint64_t fl = hooks[i].ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                      : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
        void *exported = gm_real_dlsym_fn(h, hooks[i].sym);
        if (gm_real.cuGetProcAddress_v2(hooks[i].proc, &p, CUDA_VERSION, fl, &st) != CUDA_SUCCESS)
            p = NULL;
        if (hooks[i].real == SLOT(cuGetProcAddress_v2))
            continue; /* keep the dlsym answer: that is what the runtime will be handed */
        *hooks[i].real = exported ? exported : p;
        alts[i] = p != *hooks[i].real ? p : NULL;
    }
    /* a ptsz variant the driver does not distinguish is the legacy function */
    if (gm_real.cuMemAllocAsync_ptsz == gm_real.cuMemAllocAsync)
        gm_real.cuMemAllocAsync_ptsz = NULL;
    if (gm_real.cuMemFreeAsync_ptsz == gm_real.cuMemFreeAsync)
        gm_real.cuMemFreeAsync_ptsz = NULL;
    if (gm_real.cuMemAllocFromPoolAsync_ptsz == gm_real.cuMemAllocFromPoolAsync)
        gm_real.cuMemAllocFromPoolAsync_ptsz = NULL;
    if (gm_real.cuLaunchKernel_ptsz == gm_real.cuLaunchKernel)
        gm_real.cuLaunchKernel_ptsz = NULL;
    if (gm_real.cuLaunchKernelEx_ptsz == gm_real.cuLaunchKernelEx)
        gm_real.cuLaunchKernelEx_ptsz = NULL;
    if (gm_real.cuLaunchCooperativeKernel_ptsz == gm_real.cuLaunchCooperativeKernel)
        gm_real.cuLaunchCooperativeKernel_ptsz = NULL;
    if (gm_real.cuInit && gm_real.cuInit(0) == CUDA_SUCCESS && gm_real.cuMemAlloc_v2 &&
        gm_real.cuMemFree_v2 && gm_real.cuCtxGetCurrent && gm_real.cuCtxSetCurrent &&
        gm_real.cuDevicePrimaryCtxRetain && gm_real.cuDeviceGet)
        driver_ok = 1;
out:
    gm_in_init--;
    atomic_store_explicit(&driver_loaded, 1, memory_order_release);
}

int gm_driver_init(void)
{
    if (!atomic_load_explicit(&driver_loaded, memory_order_acquire))
        pthread_once(&driver_once, driver_load);
    return driver_ok;
}

CUresult gm_driver_ensure_context(CUdevice *dev)
{
    CUcontext c = NULL;
    CUresult r = gm_real.cuCtxGetCurrent(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!c) {
        CUdevice d;
        r = gm_real.cuDeviceGet(&d, 0);
        if (r == CUDA_SUCCESS)
            r = gm_real.cuDevicePrimaryCtxRetain(&c, d);
        if (r == CUDA_SUCCESS)
            r = gm_real.cuCtxSetCurrent(c);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return ctx_device(dev);
}

/* ---- cuGetProcAddress wrappers -------------------------------------------------------- */

static CUresult w_getproc_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *st)
{
    gm_driver_init();
    if (!gm_real.cuGetProcAddress_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = gm_real.cuGetProcAddress_v2(sym, pfn, ver, flags, st);
    /* Hooks are handed out even to a thread inside gpumem (a runtime initialising within
     * gpumem's cudaFree(NULL) keeps its pointers for ever); the hooks themselves pass through
     * while the calling thread is inside. */
    if (r == CUDA_SUCCESS && pfn && *pfn && !gm_in_init) {
        void *h = gm_driver_hook_for(*pfn);
        if (h) {
            *pfn = h;
            gm_stat_add(GM_ST_PROC_HOOKED, 1);
        }
    }
    return r;
}

static CUresult w_getproc_v1(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
    gm_driver_init();
    if (!real_getproc_v1)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real_getproc_v1(sym, pfn, ver, flags);
    if (r == CUDA_SUCCESS && pfn && *pfn && !gm_in_init) {
        void *h = gm_driver_hook_for(*pfn);
        if (h) {
            *pfn = h;
            gm_stat_add(GM_ST_PROC_HOOKED, 1);
        }
    }
    return r;
}
