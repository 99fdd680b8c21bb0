/*
 * runtime.c — the exported CUDA runtime allocation functions.
 *
 * These catch programs that link the runtime dynamically (PyTorch, `nvcc -cudart shared`).
 * A program with the runtime linked statically never calls them: its runtime reaches the
 * driver through dlsym + cuGetProcAddress, and driver.c catches it there.
 *
 * Replace mode: gpumem serves the allocation itself; the real runtime never hears of it (so it
 * never reaches the driver's cuMemAlloc for it either). The first call on each thread lets the
 * real runtime initialise itself with cudaFree(NULL) — the usual idiom — so the runtime's
 * primary context is current and the device is the one the program selected.
 * Record mode: the real runtime serves the allocation, with the thread marked inside gpumem so
 * that the driver calls it makes are not counted again; gpumem records the result.
 * Off (or no usable driver): everything goes to the real function untouched, except that the
 * call is counted (GPUMEM_STATS) — which is how a test proves gpumem's cudaMalloc was reached.
 */
#include "preload/gm_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

#define REAL(name, type)                                                                       \
    static type real_##name(void)                                                              \
    {                                                                                          \
        static _Atomic(type) p;                                                                \
        type f = atomic_load_explicit(&p, memory_order_acquire);                               \
        if (!f) {                                                                              \
            f = (type)gm_next_symbol(#name);                                                   \
            atomic_store_explicit(&p, f, memory_order_release);                                \
        }                                                                                      \
        return f;                                                                              \
    }

typedef cudaError_t (*malloc_fn)(void **, size_t);
typedef cudaError_t (*free_fn)(void *);
typedef cudaError_t (*malloc_async_fn)(void **, size_t, cudaStream_t);
typedef cudaError_t (*free_async_fn)(void *, cudaStream_t);
typedef cudaError_t (*pool_fn)(void **, size_t, cudaMemPool_t, cudaStream_t);
typedef cudaError_t (*meminfo_fn)(size_t *, size_t *);
typedef cudaError_t (*hostalloc_fn)(void **, size_t, unsigned int);
typedef cudaError_t (*managed_fn)(void **, size_t, unsigned int);
REAL(cudaMalloc, malloc_fn)
REAL(cudaFree, free_fn)
REAL(cudaMallocAsync, malloc_async_fn)
REAL(cudaMallocAsync_ptsz, malloc_async_fn)
REAL(cudaFreeAsync, free_async_fn)
REAL(cudaFreeAsync_ptsz, free_async_fn)
REAL(cudaMallocFromPoolAsync, pool_fn)
REAL(cudaMallocFromPoolAsync_ptsz, pool_fn)
REAL(cudaMemGetInfo, meminfo_fn)
REAL(cudaMallocHost, malloc_fn)
REAL(cudaHostAlloc, hostalloc_fn)
REAL(cudaFreeHost, free_fn)
REAL(cudaMallocManaged, managed_fn)
typedef cudaError_t (*reset_fn)(void);
REAL(cudaDeviceReset, reset_fn)

/* No runtime behind gpumem (a program that found these names with dlsym in a process without
 * libcudart): the error the runtime gives when it cannot initialise. */
#define NO_RUNTIME cudaErrorInitializationError

static __thread int rt_thread_ready __attribute__((tls_model("initial-exec")));
/* bumped by cudaDeviceReset: every thread lets the runtime re-initialise before serving again */
static _Atomic int rt_reset_gen = 1;
static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

/* Before gpumem decides anything at the first runtime call: let the real runtime initialise
 * (cudaFree(NULL), what the program's own first call would do anyway). It loads the driver the
 * way the runtime finds it, which is then the driver gpumem uses, and registers the runtime's
 * exit teardown, after which gpumem registers its own so that it runs first. */
static void rt_init_once(void)
{
    free_fn f = real_cudaFree();
    if (f) {
        gm_inside_enter();
        (void)f(NULL);
        gm_inside_leave();
    }
    gm_exit_register_late();
}

static gm_mode_t rt_mode(void)
{
    if (gm_inside)
        return GM_MODE_OFF;
    pthread_once(&rt_once, rt_init_once);
    return gm_mode();
}

/* Replace mode, before serving: the runtime initialised on this thread, a context current.
 * Returns the device of the current context. */
static cudaError_t rt_prepare(CUdevice *dev)
{
    int gen = atomic_load_explicit(&rt_reset_gen, memory_order_acquire);
    if (rt_thread_ready != gen) {
        free_fn f = real_cudaFree();
        if (f) {
            gm_inside_enter();
            cudaError_t e = f(NULL);
            gm_inside_leave();
            if (e != cudaSuccess)
                return e;
        }
        rt_thread_ready = gen;
    }
    return gm_rt_error(gm_driver_ensure_context(dev));
}

static int current_device(void)
{
    CUdevice d = 0;
    if (gm_real.cuCtxGetDevice && gm_real.cuCtxGetDevice(&d) != CUDA_SUCCESS)
        return -1;
    return d;
}

/* ---- failures the program must see as the runtime's own ------------------------------------
 * gpumem decided a failure (its allocator's OOM, a double free, a bad stream): the real runtime
 * function is called with the same arguments and the failure armed for the driver hook it will
 * reach (gm_fail_take in driver.c), so the return code, the out-parameters (*p = NULL) and the
 * runtime's last-error state are the runtime's own. Why not set them directly: the runtime
 * keeps its last error privately, and which code and out-parameter each entry point gives for a
 * driver failure (17 for a bad cudaFree, 1 for a bad cudaFreeAsync, ...) is the runtime's
 * business — replaying it cannot drift from the real library, a table would. */
static void fail_arm(enum gm_fail_site site, CUresult r)
{
    gm_fail_code = r;
    gm_fail_site = site;
    gm_inside_enter();
}
/* 1 when the armed failure was consumed by a driver hook */
static int fail_disarm(void)
{
    gm_inside_leave();
    int used = gm_fail_site == GM_FAIL_NONE;
    gm_fail_site = GM_FAIL_NONE;
    return used;
}

/* An allocation entry point's failure. `p` was not written by gpumem. If the runtime did not go
 * through the hook (it allocated for real), its allocation is undone and gpumem answers. */
#define RT_ALLOC_FAILED(site, r, real, free_real, p, ...)                                          \
    do {                                                                                           \
        if (!(real))                                                                               \
            return gm_rt_error(r);                                                                 \
        fail_arm((site), (r));                                                                     \
        cudaError_t e_ = (real)(p, __VA_ARGS__);                                                   \
        if (!fail_disarm() && e_ == cudaSuccess) {                                                 \
            free_fn fr_ = (free_real);                                                             \
            gm_inside_enter();                                                                     \
            if (fr_ && *(p))                                                                       \
                fr_(*(p));                                                                         \
            gm_inside_leave();                                                                     \
            *(p) = NULL;                                                                           \
            return gm_rt_error(r);                                                                 \
        }                                                                                          \
        return e_;                                                                                 \
    } while (0)

/* A free entry point's failure: the runtime answers for the same pointer. */
static cudaError_t rt_free_failed(enum gm_fail_site site, CUresult r, void *p, cudaStream_t s,
                                  int async, free_fn real_sync, free_async_fn real_async)
{
    if (async ? !real_async : !real_sync)
        return gm_rt_error(r);
    fail_arm(site, r);
    cudaError_t e = async ? real_async(p, s) : real_sync(p);
    if (!fail_disarm())
        return gm_rt_error(r);
    return e;
}

/* ---- device memory ------------------------------------------------------------------------- */

/* Serves an allocation; a failure is returned as a driver code in *fail (the caller replays
 * it through the real runtime), cudaSuccess then. */
static cudaError_t rt_alloc(void **p, size_t size, cudaStream_t s, gm_alloc_kind kind,
                            CUresult *fail)
{
    CUdevice dev;
    *fail = CUDA_SUCCESS;
    cudaError_t e = rt_prepare(&dev);
    if (e != cudaSuccess)
        return e;
    /* a stream-ordered allocation lives on its stream's device, whichever is current (the
     * default streams are the current device's: dev already) */
    int special = s == 0 || (CUstream)s == CU_STREAM_LEGACY || (CUstream)s == CU_STREAM_PER_THREAD;
    if (kind == GM_ALLOC_ASYNC && !special && !gm_stream_device((CUstream)s, &dev)) {
        *fail = CUDA_ERROR_INVALID_HANDLE;
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    CUresult r = gm_heap_alloc(&d, size, dev, (CUstream)s, kind);
    if (r != CUDA_SUCCESS) {
        *fail = r;
        return cudaSuccess;
    }
    if (kind == GM_ALLOC_ASYNC)
        gm_heap_pool_note(dev, d, size);
    *p = (void *)(uintptr_t)d;
    return cudaSuccess;
}

/* Record mode: the real function, with the driver hooks told to stand aside. */
static void rt_record_alloc(cudaError_t e, void **p, size_t size, cudaStream_t s,
                            enum gm_pt_kind k, cudaMemPool_t pool)
{
    CUdevice sdev = -1;
    /* a stream-ordered allocation is on its stream's device (the current one may be another, or
     * none on this thread), one from a pool on the pool's (the stream may be another device's,
     * as the driver hook records it: gm_pm_pool_device); pinned host and managed memory are on
     * no device (as the driver API hooks record them) */
    int dev = k == GM_PT_HOST || k == GM_PT_MANAGED ? -1
              : k == GM_PT_POOL                     ? gm_pm_pool_device((CUmemoryPool)pool, (CUstream)s)
              : (k == GM_PT_ASYNC || k == GM_PT_GRAPH) && gm_stream_device((CUstream)s, &sdev)
                  ? (int)sdev
                  : current_device();
    if (e == cudaSuccess && p && *p) {
        gm_stat_add(GM_ST_PASSTHROUGH, 1);
        gm_next_alloc_flags = k == GM_PT_POOL    ? GM_EVF_POOL /* the program's own pool */
                              : k == GM_PT_GRAPH ? GM_EVF_GRAPH
                                                 : 0;
        enum gm_ev ev = k == GM_PT_DEVICE    ? GM_EV_ALLOC
                        : k == GM_PT_MANAGED ? GM_EV_MANAGED
                        : k == GM_PT_HOST    ? GM_EV_HOST_ALLOC
                                             : GM_EV_ALLOC_ASYNC;
        gm_pt_add((uintptr_t)*p, size, k, dev);
        gm_event(ev, dev, (CUstream)s, (uintptr_t)*p, size, size);
        gm_next_alloc_flags = 0;
    } else if (e == cudaErrorMemoryAllocation) {
        gm_stat_add(GM_ST_OOM, 1);
        gm_event(GM_EV_OOM, dev, (CUstream)s, 0, 0, size);
    }
    gm_exit_register_late();
}

/* A free that gpumem's allocator did not own: a passed-through allocation, or a double,
 * interior or foreign free (gm_pt_bad_free; host: cudaFreeHost's, no device). Recorded before
 * the real function runs: once it has, another thread may be handed the same address, and its
 * allocation must come after this free in the recording; and a foreign pointer's device is asked
 * of the driver while it still knows it. */
static void rt_record_free(void *p, cudaStream_t s, int async, int host)
{
    size_t size;
    enum gm_pt_kind k;
    int dev;
    if (gm_pt_remove((uintptr_t)p, &size, &k, &dev)) {
        gm_stat_add(GM_ST_PASSTHROUGH_FREE, 1);
        enum gm_ev ev = k == GM_PT_MANAGED ? GM_EV_MANAGED
                        : k == GM_PT_HOST  ? GM_EV_HOST_FREE
                        : async            ? GM_EV_FREE_ASYNC
                                           : GM_EV_FREE;
        gm_event(ev, dev, (CUstream)s, (uintptr_t)p, size, 0);
    } else {
        dev = host ? -1 : gm_addr_device((CUdeviceptr)(uintptr_t)p, (CUstream)s);
        gm_pt_bad_free((uintptr_t)p, dev, (CUstream)s);
    }
}

/* Every allocation entry point clears its out-parameter first, as CUDA 13 does: a refused call
 * leaves NULL (tests/diff/gpu-h200/rt_errors.out, capture_modes.out). */
#define RT_CLEAR_OUT(p)                                                                            \
    do {                                                                                           \
        if (p) *(p) = NULL;                                                                        \
    } while (0)

static __attribute__((noinline)) cudaError_t rt_malloc(void **p, size_t size, void *caller)
{
    RT_CLEAR_OUT(p);
    gm_stat_add(GM_ST_RT_MALLOC, 1);
    malloc_fn real = real_cudaMalloc();
    gm_mode_t m = rt_mode();
    /* p NULL: the runtime's own refusal, below; a call the capture rules forbid now: the
     * runtime's own refusal too (900, the capture invalidated), recorded should it succeed */
    if (m == GM_MODE_REPLACE && p && gm_capture_prohibited())
        m = GM_MODE_RECORD;
    if (m == GM_MODE_REPLACE && p) {
        if (atomic_load_explicit(&gm_conf_watch, memory_order_relaxed))
            gm_conf_check_caller(caller);
        CUresult fail;
        cudaError_t e = rt_alloc(p, size, 0, GM_ALLOC_SYNC, &fail);
        if (fail != CUDA_SUCCESS)
            RT_ALLOC_FAILED(GM_FAIL_ALLOC, fail, real, real_cudaFree(), p, size);
        return e;
    }
    if (!real)
        return NO_RUNTIME;
    gm_inside_enter();
    cudaError_t e = real(p, size);
    gm_inside_leave();
    if (m == GM_MODE_RECORD)
        rt_record_alloc(e, p, size, 0, GM_PT_DEVICE, NULL);
    return e;
}

GM_EXPORT cudaError_t cudaMalloc(void **p, size_t size)
{
    return GM_SCRUBBED(mem, rt_malloc(p, size, __builtin_return_address(0)));
}

static __attribute__((noinline)) cudaError_t
rt_free(void *p, cudaStream_t s, int async, cudaError_t (*real_sync)(void *),
        cudaError_t (*real_async)(void *, cudaStream_t))
{
    gm_mode_t m = rt_mode();
    /* a free on a capturing stream is a free node, a cudaFree the capture rules forbid is
     * refused: both are the runtime's (and driver's) to answer; gpumem's block stays allocated */
    int to_runtime = m == GM_MODE_REPLACE && p &&
                     ((async && gm_capture_underway() && gm_stream_capturing((CUstream)s)) ||
                      gm_capture_prohibited());
    if (to_runtime && gm_heap_lookup((CUdeviceptr)(uintptr_t)p, &(CUdeviceptr){0}, &(size_t){0})) {
        if (async ? !real_async : !real_sync)
            return NO_RUNTIME;
        gm_inside_enter();
        cudaError_t e = async ? real_async(p, s) : real_sync(p);
        gm_inside_leave();
        return e;
    }
    if (m == GM_MODE_REPLACE && p && !to_runtime) {
        CUresult res;
        if (async && !gm_stream_valid((CUstream)s))
            return rt_free_failed(GM_FAIL_FREE, CUDA_ERROR_INVALID_HANDLE, p, s, async, real_sync,
                                  real_async);
        gm_alloc_kind kind = async                            ? GM_ALLOC_ASYNC
                             : gm_free_sync(0) == GM_SYNC_DONE ? GM_FREE_SYNCED
                                                               : GM_ALLOC_SYNC;
        if (gm_heap_free((CUdeviceptr)(uintptr_t)p, (CUstream)s, kind, &res))
            return res == CUDA_SUCCESS ? cudaSuccess
                                       : rt_free_failed(GM_FAIL_FREE, res, p, s, async, real_sync,
                                                        real_async);
    }
    if (m != GM_MODE_OFF && p)
        rt_record_free(p, s, async, 0);
    if (async ? !real_async : !real_sync)
        return NO_RUNTIME;
    gm_inside_enter();
    cudaError_t e = async ? real_async(p, s) : real_sync(p);
    gm_inside_leave();
    gm_test_free_yield();
    return e;
}

typedef cudaError_t (*ipc_get_fn)(cudaIpcMemHandle_t *, void *);
REAL(cudaIpcGetMemHandle, ipc_get_fn)
/* Legacy IPC handles cannot share gpumem's memory: one line says why and what to do instead. */
GM_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p)
{
    if (rt_mode() == GM_MODE_REPLACE && gm_heap_ipc_refuse("cudaIpcGetMemHandle", (uintptr_t)p))
        return cudaErrorNotSupported;
    ipc_get_fn real = real_cudaIpcGetMemHandle();
    if (!real)
        return NO_RUNTIME;
    return real(h, p);
}

GM_EXPORT cudaError_t cudaFree(void *p)
{
    gm_stat_add(GM_ST_RT_FREE, 1);
    return GM_SCRUBBED(mem, rt_free(p, 0, 0, real_cudaFree(), NULL));
}

static __attribute__((noinline)) cudaError_t rt_malloc_async(void **p, size_t size, cudaStream_t s,
                                                            malloc_async_fn real)
{
    RT_CLEAR_OUT(p);
    gm_stat_add(GM_ST_RT_MALLOC_ASYNC, 1);
    gm_mode_t m = rt_mode();
    /* on a capturing stream: the graph's allocation node, the driver's (driver.c, drv_alloc) */
    int graph = m != GM_MODE_OFF && gm_capture_underway() && gm_stream_capturing((CUstream)s);
    /* on a device whose pool the program chose (cudaDeviceSetMemPool): that pool's, the
     * driver's in both modes, recorded as cudaMallocFromPoolAsync on it is (program_mem.c) */
    CUdevice sdev;
    cudaMemPool_t pool = m != GM_MODE_OFF && !graph && gm_pm_any_chosen_pool() && gm_stream_device((CUstream)s, &sdev)
                             ? (cudaMemPool_t)gm_pm_chosen_pool((int)sdev)
                             : NULL;
    /* on a stream not captured while the capture rules forbid it: the runtime's refusal (900) */
    if (m == GM_MODE_REPLACE && p && !graph && !pool && !gm_capture_prohibited()) {
        CUresult fail;
        cudaError_t e = rt_alloc(p, size, s, GM_ALLOC_ASYNC, &fail);
        if (fail != CUDA_SUCCESS)
            RT_ALLOC_FAILED(GM_FAIL_ALLOC, fail, real, real_cudaFree(), p, size, s);
        return e;
    }
    if (m == GM_MODE_REPLACE)
        m = GM_MODE_RECORD; /* no out-parameter: the runtime's own answer, recorded */
    if (!real)
        return NO_RUNTIME;
    gm_inside_enter();
    cudaError_t e = real(p, size, s);
    gm_inside_leave();
    if (m == GM_MODE_RECORD || graph || pool)
        rt_record_alloc(e, p, size, s, graph ? GM_PT_GRAPH : pool ? GM_PT_POOL : GM_PT_ASYNC, pool);
    return e;
}

GM_EXPORT cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s)
{
    return GM_SCRUBBED(mem, rt_malloc_async(p, size, s, real_cudaMallocAsync()));
}

/* Per-thread default stream variant: stream 0 is the calling thread's stream. */
GM_EXPORT cudaError_t cudaMallocAsync_ptsz(void **p, size_t size, cudaStream_t s)
{
    return GM_SCRUBBED(mem, rt_malloc_async(p, size, s ? s : cudaStreamPerThread,
                                            real_cudaMallocAsync_ptsz()));
}

GM_EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    gm_stat_add(GM_ST_RT_FREE_ASYNC, 1);
    return GM_SCRUBBED(mem, rt_free(p, s, 1, NULL, real_cudaFreeAsync()));
}

GM_EXPORT cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s)
{
    gm_stat_add(GM_ST_RT_FREE_ASYNC, 1);
    return GM_SCRUBBED(mem, rt_free(p, s ? s : cudaStreamPerThread, 1, NULL,
                                    real_cudaFreeAsync_ptsz()));
}

/* An explicit memory pool is the program's own allocator: passed through and recorded. */
static __attribute__((noinline)) cudaError_t rt_pool(void **p, size_t size, cudaMemPool_t pool,
                                                      cudaStream_t s, pool_fn real)
{
    gm_stat_add(GM_ST_RT_MALLOC_ASYNC, 1);
    if (!real)
        return NO_RUNTIME;
    gm_mode_t m = rt_mode();
    gm_inside_enter();
    cudaError_t e = real(p, size, pool, s);
    gm_inside_leave();
    if (m != GM_MODE_OFF)
        rt_record_alloc(e, p, size, s, GM_PT_POOL, pool);
    return e;
}

GM_EXPORT cudaError_t cudaMallocFromPoolAsync(void **p, size_t size, cudaMemPool_t pool,
                                              cudaStream_t s)
{
    return GM_SCRUBBED(mem, rt_pool(p, size, pool, s, real_cudaMallocFromPoolAsync()));
}

GM_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **p, size_t size, cudaMemPool_t pool,
                                                   cudaStream_t s)
{
    return GM_SCRUBBED(mem, rt_pool(p, size, pool, s ? s : cudaStreamPerThread,
                                    real_cudaMallocFromPoolAsync_ptsz()));
}

GM_EXPORT cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    gm_mode_t m = rt_mode();
    if (m == GM_MODE_REPLACE) {
        CUdevice dev;
        cudaError_t e = rt_prepare(&dev);
        if (e != cudaSuccess)
            return e;
        gm_stat_add(GM_ST_MEMGETINFO, 1);
        return gm_rt_error(gm_heap_meminfo(free_b, total_b));
    }
    meminfo_fn real = real_cudaMemGetInfo();
    if (!real)
        return NO_RUNTIME;
    gm_inside_enter();
    cudaError_t e = real(free_b, total_b);
    gm_inside_leave();
    return e;
}

static __attribute__((noinline)) cudaError_t rt_malloc_managed(void **p, size_t size,
                                                              unsigned int flags)
{
    managed_fn real = real_cudaMallocManaged();
    if (!real)
        return NO_RUNTIME;
    gm_mode_t m = rt_mode();
    gm_inside_enter();
    cudaError_t e = real(p, size, flags);
    gm_inside_leave();
    if (m != GM_MODE_OFF) {
        if (e == cudaSuccess)
            gm_stat_add(GM_ST_MANAGED, 1);
        rt_record_alloc(e, p, size, 0, GM_PT_MANAGED, NULL);
    }
    return e;
}

GM_EXPORT cudaError_t cudaMallocManaged(void **p, size_t size, unsigned int flags)
{
    return GM_SCRUBBED(mem, rt_malloc_managed(p, size, flags));
}

/* A device reset destroys every allocation of the device: gpumem's allocator gives its memory
 * back first and starts afresh (heap.c), then the real reset runs. */
GM_EXPORT cudaError_t cudaDeviceReset(void)
{
    reset_fn real = real_cudaDeviceReset();
    if (rt_mode() == GM_MODE_REPLACE) {
        CUdevice dev;
        if (rt_prepare(&dev) == cudaSuccess)
            gm_heap_reset(dev);
        atomic_fetch_add_explicit(&rt_reset_gen, 1, memory_order_release);
    }
    if (!real)
        return NO_RUNTIME;
    gm_inside_enter();
    cudaError_t e = real();
    gm_inside_leave();
    if (e == cudaSuccess && rt_mode() != GM_MODE_OFF) gm_pt_after_reset();
    return e;
}

/* ---- pinned host memory ------------------------------------------------------------------ */

static __attribute__((noinline)) cudaError_t rt_host_alloc(void **p, size_t size, unsigned flags,
                                                          int has_flags)
{
    RT_CLEAR_OUT(p);
    gm_mode_t m = rt_mode();
    /* forbidden by the capture rules now: the runtime's own refusal (below) */
    if (m == GM_MODE_REPLACE && p && !(flags & cudaHostAllocWriteCombined) &&
        !gm_capture_prohibited()) {
        CUdevice dev;
        cudaError_t e = rt_prepare(&dev);
        if (e != cudaSuccess)
            return e;
        CUresult r = flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped)
                         ? CUDA_ERROR_INVALID_VALUE
                         : gm_pinned_alloc(p, size);
        if (r == CUDA_SUCCESS)
            return cudaSuccess;
        if (has_flags)
            RT_ALLOC_FAILED(GM_FAIL_HOST_ALLOC, r, real_cudaHostAlloc(), real_cudaFreeHost(), p,
                            size, flags);
        RT_ALLOC_FAILED(GM_FAIL_HOST_ALLOC, r, real_cudaMallocHost(), real_cudaFreeHost(), p, size);
    }
    cudaError_t e;
    gm_inside_enter();
    if (has_flags) {
        hostalloc_fn real = real_cudaHostAlloc();
        e = real ? real(p, size, flags) : NO_RUNTIME;
    } else {
        malloc_fn real = real_cudaMallocHost();
        e = real ? real(p, size) : NO_RUNTIME;
    }
    gm_inside_leave();
    if (m != GM_MODE_OFF) {
        if (e == cudaSuccess)
            gm_stat_add(GM_ST_HOST_PASSTHROUGH, 1);
        rt_record_alloc(e, p, size, 0, GM_PT_HOST, NULL);
    }
    return e;
}

GM_EXPORT cudaError_t cudaMallocHost(void **p, size_t size)
{
    return GM_SCRUBBED(mem, rt_host_alloc(p, size, 0, 0));
}

GM_EXPORT cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
    return GM_SCRUBBED(mem, rt_host_alloc(p, size, flags, 1));
}

static __attribute__((noinline)) cudaError_t rt_free_host(void *p)
{
    gm_mode_t m = rt_mode();
    if (m == GM_MODE_REPLACE && p) {
        CUresult res;
        int sync = gm_free_sync(1);
        if (sync == GM_SYNC_DONE)
            gm_pinned_release_deferred();
        if (sync == GM_SYNC_SKIPPED_CAPTURE ? gm_pinned_free_deferred(p, &res)
                                            : gm_pinned_free(p, &res))
            return res == CUDA_SUCCESS
                       ? cudaSuccess
                       : rt_free_failed(GM_FAIL_HOST_FREE, res, p, 0, 0, real_cudaFreeHost(), NULL);
    }
    if (m != GM_MODE_OFF && p)
        rt_record_free(p, 0, 0, 1);
    free_fn real = real_cudaFreeHost();
    if (!real)
        return NO_RUNTIME;
    gm_inside_enter();
    cudaError_t e = real(p);
    gm_inside_leave();
    gm_test_free_yield();
    return e;
}

GM_EXPORT cudaError_t cudaFreeHost(void *p)
{
    return GM_SCRUBBED(mem, rt_free_host(p));
}

/* ---- kernel launches, copies, memsets (access tracking, uses.c) -------------------------- */
/* The real runtime reaches the driver's launch and copy entry points through the pointers
 * cuGetProcAddress handed it (gpumem's driver hooks): the thread is marked inside while it
 * runs, so each launch is counted and recorded once, here, where the program's arguments are.
 * A kernel's host symbol becomes its CUfunction through cudaGetFuncBySymbol (cached per
 * symbol), which is what the layout and the name are queried on. */

typedef cudaError_t (*launch_fn)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
typedef cudaError_t (*launch_ex_fn)(const cudaLaunchConfig_t *, const void *, void **);
typedef cudaError_t (*memcpy_fn)(void *, const void *, size_t, enum cudaMemcpyKind);
typedef cudaError_t (*memcpy_async_fn)(void *, const void *, size_t, enum cudaMemcpyKind,
                                       cudaStream_t);
typedef cudaError_t (*memset_fn)(void *, int, size_t);
typedef cudaError_t (*memset_async_fn)(void *, int, size_t, cudaStream_t);
REAL(cudaLaunchKernel, launch_fn)
REAL(cudaLaunchKernel_ptsz, launch_fn)
REAL(cudaLaunchCooperativeKernel, launch_fn)
REAL(cudaLaunchCooperativeKernel_ptsz, launch_fn)
REAL(cudaLaunchKernelExC, launch_ex_fn)
REAL(cudaLaunchKernelExC_ptsz, launch_ex_fn)
REAL(cudaMemcpy, memcpy_fn)
REAL(cudaMemcpy_ptds, memcpy_fn)
REAL(cudaMemcpyAsync, memcpy_async_fn)
REAL(cudaMemcpyAsync_ptsz, memcpy_async_fn)
REAL(cudaMemset, memset_fn)
REAL(cudaMemset_ptds, memset_fn)
REAL(cudaMemsetAsync, memset_async_fn)
REAL(cudaMemsetAsync_ptsz, memset_async_fn)

/* A CUresult carrying a runtime error through gm_uses_*_end, which only tests for success. */
#define RT_AS_CU(e) ((e) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN)
#define RT_STREAM(ptsz, s) ((CUstream)((ptsz) && !(s) ? cudaStreamPerThread : (s)))

static __attribute__((noinline)) cudaError_t rt_launch(launch_fn real, int ptsz, const void *func,
                                                       dim3 g, dim3 b, void **args, size_t shm,
                                                       cudaStream_t s)
{
    if (!real)
        return NO_RUNTIME;
    int track = !gm_inside;
    if (track)
        gm_stat_add(GM_ST_LAUNCH, 1);
    struct gm_uses_op op;
    track = track && gm_uses_active();
    if (track) {
        int dev = gm_uses_device();
        gm_uses_kernel_begin(&op, dev, gm_uses_func_of_symbol(func, dev), RT_STREAM(ptsz, s),
                             args, NULL);
    }
    gm_inside_enter();
    cudaError_t e = real(func, g, b, args, shm, s);
    gm_inside_leave();
    if (track)
        gm_uses_kernel_end(&op, RT_AS_CU(e));
    return e;
}

GM_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t shm,
                                       cudaStream_t s)
{
    return GM_SCRUBBED(launch, rt_launch(real_cudaLaunchKernel(), 0, func, g, b, args, shm, s));
}
GM_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 g, dim3 b, void **args,
                                            size_t shm, cudaStream_t s);
cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 g, dim3 b, void **args, size_t shm,
                                  cudaStream_t s)
{
    return GM_SCRUBBED(launch,
                       rt_launch(real_cudaLaunchKernel_ptsz(), 1, func, g, b, args, shm, s));
}
GM_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 g, dim3 b, void **args,
                                                  size_t shm, cudaStream_t s)
{
    return GM_SCRUBBED(launch,
                       rt_launch(real_cudaLaunchCooperativeKernel(), 0, func, g, b, args, shm, s));
}
GM_EXPORT cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 g, dim3 b,
                                                       void **args, size_t shm, cudaStream_t s);
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 g, dim3 b, void **args,
                                             size_t shm, cudaStream_t s)
{
    return GM_SCRUBBED(launch,
                       rt_launch(real_cudaLaunchCooperativeKernel_ptsz(), 1, func, g, b, args, shm, s));
}

static __attribute__((noinline)) cudaError_t rt_launch_ex(launch_ex_fn real, int ptsz,
                                                          const cudaLaunchConfig_t *c,
                                                          const void *func, void **args)
{
    if (!real)
        return NO_RUNTIME;
    int track = !gm_inside && c;
    if (track)
        gm_stat_add(GM_ST_LAUNCH, 1);
    struct gm_uses_op op;
    track = track && gm_uses_active();
    if (track) {
        int dev = gm_uses_device();
        gm_uses_kernel_begin(&op, dev, gm_uses_func_of_symbol(func, dev),
                             RT_STREAM(ptsz, c->stream), args, NULL);
    }
    gm_inside_enter();
    cudaError_t e = real(c, func, args);
    gm_inside_leave();
    if (track)
        gm_uses_kernel_end(&op, RT_AS_CU(e));
    return e;
}

GM_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *func,
                                          void **args)
{
    return GM_SCRUBBED(launch, rt_launch_ex(real_cudaLaunchKernelExC(), 0, c, func, args));
}
GM_EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *c, const void *func,
                                               void **args);
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *c, const void *func, void **args)
{
    return GM_SCRUBBED(launch, rt_launch_ex(real_cudaLaunchKernelExC_ptsz(), 1, c, func, args));
}

static int copy_which(enum cudaMemcpyKind k)
{
    switch (k) {
    case cudaMemcpyHostToDevice: return GM_COPY_HTOD;
    case cudaMemcpyDeviceToHost: return GM_COPY_DTOH;
    case cudaMemcpyDeviceToDevice: return GM_COPY_DTOD;
    case cudaMemcpyHostToHost: return GM_COPY_HTOH;
    default: return GM_COPY_DEFAULT;
    }
}

/* One shape for the eight copy and memset entry points: `call` runs the real function. */
#define RT_COPY(real, which, stream, dst, src, n, call)                                            \
    do {                                                                                           \
        if (!(real))                                                                               \
            return NO_RUNTIME;                                                                     \
        int track_ = !gm_inside;                                                                   \
        if (track_)                                                                                \
            gm_stat_add(GM_ST_COPY, 1);                                                            \
        if (!gm_inside && gm_access_refused((which), (stream), (uint64_t)(uintptr_t)(dst),         \
                                            (uint64_t)(uintptr_t)(src), (n))) {                    \
            /* the runtime's own answer to the driver's refusal (code, last error) */              \
            fail_arm(GM_FAIL_COPY, CUDA_ERROR_INVALID_VALUE);                                      \
            cudaError_t f_ = call;                                                                 \
            return fail_disarm() ? f_ : gm_rt_error(CUDA_ERROR_INVALID_VALUE);                     \
        }                                                                                          \
        struct gm_uses_op op_;                                                                     \
        track_ = track_ && gm_uses_active();                                                       \
        if (track_)                                                                                \
            gm_uses_copy_begin(&op_, (stream));                                                    \
        gm_inside_enter();                                                                         \
        cudaError_t e_ = call;                                                                     \
        gm_inside_leave();                                                                         \
        if (track_)                                                                                \
            gm_uses_copy_end(&op_, RT_AS_CU(e_), (which), (uint64_t)(uintptr_t)(dst),              \
                             (uint64_t)(uintptr_t)(src), (n));                                     \
        return e_;                                                                                 \
    } while (0)

static __attribute__((noinline)) cudaError_t rtb_cudaMemcpy(void *d, const void *s, size_t n,
                                                            enum cudaMemcpyKind k)
{
    memcpy_fn real = real_cudaMemcpy();
    RT_COPY(real, copy_which(k), (CUstream)0, d, s, n, real(d, s, n, k));
}
static __attribute__((noinline)) cudaError_t rtb_cudaMemcpy_ptds(void *d, const void *s, size_t n,
                                                                 enum cudaMemcpyKind k)
{
    memcpy_fn real = real_cudaMemcpy_ptds();
    RT_COPY(real, copy_which(k), CU_STREAM_PER_THREAD, d, s, n, real(d, s, n, k));
}
static __attribute__((noinline)) cudaError_t
rtb_cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st)
{
    memcpy_async_fn real = real_cudaMemcpyAsync();
    RT_COPY(real, copy_which(k), (CUstream)st, d, s, n, real(d, s, n, k, st));
}
static __attribute__((noinline)) cudaError_t
rtb_cudaMemcpyAsync_ptsz(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st)
{
    memcpy_async_fn real = real_cudaMemcpyAsync_ptsz();
    RT_COPY(real, copy_which(k), RT_STREAM(1, st), d, s, n, real(d, s, n, k, st));
}
static __attribute__((noinline)) cudaError_t rtb_cudaMemset(void *d, int v, size_t n)
{
    memset_fn real = real_cudaMemset();
    RT_COPY(real, GM_COPY_MEMSET, (CUstream)0, d, 0, n, real(d, v, n));
}
static __attribute__((noinline)) cudaError_t rtb_cudaMemset_ptds(void *d, int v, size_t n)
{
    memset_fn real = real_cudaMemset_ptds();
    RT_COPY(real, GM_COPY_MEMSET, CU_STREAM_PER_THREAD, d, 0, n, real(d, v, n));
}
static __attribute__((noinline)) cudaError_t rtb_cudaMemsetAsync(void *d, int v, size_t n,
                                                                 cudaStream_t st)
{
    memset_async_fn real = real_cudaMemsetAsync();
    RT_COPY(real, GM_COPY_MEMSET, (CUstream)st, d, 0, n, real(d, v, n, st));
}
static __attribute__((noinline)) cudaError_t rtb_cudaMemsetAsync_ptsz(void *d, int v, size_t n,
                                                                      cudaStream_t st)
{
    memset_async_fn real = real_cudaMemsetAsync_ptsz();
    RT_COPY(real, GM_COPY_MEMSET, RT_STREAM(1, st), d, 0, n, real(d, v, n, st));
}

/* The exported copies and memsets: the body (noinline), then the scrub of the stack it used
 * (gm_internal.h says why). */
GM_EXPORT cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k)
{
    return GM_SCRUBBED(copy, rtb_cudaMemcpy(d, s, n, k));
}
GM_EXPORT cudaError_t cudaMemcpy_ptds(void *d, const void *s, size_t n, enum cudaMemcpyKind k);
cudaError_t cudaMemcpy_ptds(void *d, const void *s, size_t n, enum cudaMemcpyKind k)
{
    return GM_SCRUBBED(copy, rtb_cudaMemcpy_ptds(d, s, n, k));
}
GM_EXPORT cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                                      cudaStream_t st)
{
    return GM_SCRUBBED(copy, rtb_cudaMemcpyAsync(d, s, n, k, st));
}
GM_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                                           cudaStream_t st);
cudaError_t cudaMemcpyAsync_ptsz(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                                 cudaStream_t st)
{
    return GM_SCRUBBED(copy, rtb_cudaMemcpyAsync_ptsz(d, s, n, k, st));
}
GM_EXPORT cudaError_t cudaMemset(void *d, int v, size_t n)
{
    return GM_SCRUBBED(copy, rtb_cudaMemset(d, v, n));
}
GM_EXPORT cudaError_t cudaMemset_ptds(void *d, int v, size_t n);
cudaError_t cudaMemset_ptds(void *d, int v, size_t n)
{
    return GM_SCRUBBED(copy, rtb_cudaMemset_ptds(d, v, n));
}
GM_EXPORT cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st)
{
    return GM_SCRUBBED(copy, rtb_cudaMemsetAsync(d, v, n, st));
}
GM_EXPORT cudaError_t cudaMemsetAsync_ptsz(void *d, int v, size_t n, cudaStream_t st);
cudaError_t cudaMemsetAsync_ptsz(void *d, int v, size_t n, cudaStream_t st)
{
    return GM_SCRUBBED(copy, rtb_cudaMemsetAsync_ptsz(d, v, n, st));
}
