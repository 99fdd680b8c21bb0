/*
 * driver_sym.c — the driver's memory entry points under their real names, for programs that
 * link libcuda.so and call them by symbol.
 *
 * A program built against the driver API (NVIDIA's samples, anything linked with -lcuda) calls
 * cuMemAlloc_v2, cuMemCreate, cuMemAllocHost_v2 ... directly: the dynamic linker binds those
 * calls to the first library in the search order that defines the name, and a preloaded
 * libgpumem.so comes first. Each name here forwards to the same hook that cuGetProcAddress and
 * dlsym hand out (driver.c's table, found by name once and cached), so an allocation is served
 * and recorded the same whichever of the three paths reached it, and never twice:
 *
 *   - the hooks pass straight through on a thread inside gpumem (a runtime-level hook running
 *     the real runtime), so a cudaMalloc that the runtime turns into cuMemAlloc_v2 is one
 *     allocation;
 *   - gpumem's own allocator and every pass-through call the real driver through the pointers
 *     stored in gm_real (loaded from the driver's own handle), never through these names;
 *   - the virtual GPU is linked -Bsymbolic-functions and the real libcuda calls itself
 *     internally, so a driver never re-enters these names for its own work.
 *
 * When the driver cannot be loaded by gpumem (or lacks an entry point) the name forwards to
 * the next definition in the search order (the program's own libcuda), untouched.
 * cuGetProcAddress itself is exported too, so a -lcuda program asking the driver for an entry
 * point gets the hooks like a runtime does.
 */
#include "preload/gm_internal.h"

#include <stdatomic.h>

/* The hook behind `name`, else the next definition of `name` (the real driver's). */
static void *resolve(const char *name)
{
    void *f = gm_driver_sym_hook(name);
    return f ? f : gm_next_symbol(name);
}

#define SYM_FN(name, params, args)                                                             \
    GM_EXPORT CUresult name params;                                                            \
    CUresult name params                                                                       \
    {                                                                                          \
        static void *_Atomic fn;                                                               \
        void *f = atomic_load_explicit(&fn, memory_order_acquire);                             \
        if (!f) {                                                                              \
            f = resolve(#name);                                                                \
            if (!f)                                                                            \
                return CUDA_ERROR_NOT_INITIALIZED;                                             \
            atomic_store_explicit(&fn, f, memory_order_release);                              \
        }                                                                                      \
        return ((CUresult(*) params)f) args;                                                   \
    }

/* A per-thread-default-stream variant: its own hook when the driver has a distinct one, else
 * the legacy hook with stream 0 read as the calling thread's stream. */
#define SYM_PTSZ(name, legacy, params, args, sarg)                                             \
    GM_EXPORT CUresult name params;                                                            \
    CUresult name params                                                                       \
    {                                                                                          \
        static void *_Atomic fn;                                                               \
        static _Atomic int own;                                                                \
        void *f = atomic_load_explicit(&fn, memory_order_acquire);                             \
        if (!f) {                                                                              \
            f = gm_driver_sym_hook(#name);                                                     \
            if (f)                                                                             \
                atomic_store(&own, 1);                                                         \
            else                                                                               \
                f = resolve(#legacy);                                                          \
            if (!f)                                                                            \
                return CUDA_ERROR_NOT_INITIALIZED;                                             \
            atomic_store_explicit(&fn, f, memory_order_release);                               \
        }                                                                                      \
        if (!atomic_load_explicit(&own, memory_order_relaxed) && !sarg)                        \
            sarg = CU_STREAM_PER_THREAD;                                                       \
        return ((CUresult(*) params)f) args;                                                   \
    }

/* device memory */
SYM_FN(cuMemAlloc_v2, (CUdeviceptr * d, size_t n), (d, n))
SYM_FN(cuMemFree_v2, (CUdeviceptr p), (p))
SYM_FN(cuMemAllocPitch_v2, (CUdeviceptr * d, size_t *pitch, size_t w, size_t h, unsigned int e),
       (d, pitch, w, h, e))
SYM_FN(cuMemAllocManaged, (CUdeviceptr * d, size_t n, unsigned int fl), (d, n, fl))
SYM_FN(cuMemGetInfo_v2, (size_t * free_b, size_t *total_b), (free_b, total_b))
/* stream-ordered, and the program's pools */
SYM_FN(cuMemAllocAsync, (CUdeviceptr * d, size_t n, CUstream s), (d, n, s))
SYM_PTSZ(cuMemAllocAsync_ptsz, cuMemAllocAsync, (CUdeviceptr * d, size_t n, CUstream s),
         (d, n, s), s)
SYM_FN(cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))
SYM_PTSZ(cuMemFreeAsync_ptsz, cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s), s)
SYM_FN(cuMemAllocFromPoolAsync, (CUdeviceptr * d, size_t n, CUmemoryPool pool, CUstream s),
       (d, n, pool, s))
SYM_PTSZ(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync,
         (CUdeviceptr * d, size_t n, CUmemoryPool pool, CUstream s), (d, n, pool, s), s)
SYM_FN(cuMemPoolCreate, (CUmemoryPool * pool, const CUmemPoolProps *props), (pool, props))
SYM_FN(cuMemPoolDestroy, (CUmemoryPool pool), (pool))
SYM_FN(cuDeviceSetMemPool, (CUdevice dev, CUmemoryPool pool), (dev, pool))
SYM_FN(cuMemSetMemPool, (CUmemLocation * loc, CUmemAllocationType type, CUmemoryPool pool), (loc, type, pool))
/* a graph's memory nodes made by name (the hooks record them whatever the path) */
SYM_FN(cuGraphAddMemAllocNode,
       (CUgraphNode * node, CUgraph g, const CUgraphNode *deps, size_t n, CUDA_MEM_ALLOC_NODE_PARAMS *params),
       (node, g, deps, n, params))
SYM_FN(cuGraphAddMemFreeNode, (CUgraphNode * node, CUgraph g, const CUgraphNode *deps, size_t n, CUdeviceptr p),
       (node, g, deps, n, p))
SYM_FN(cuGraphAddNode_v2,
       (CUgraphNode * node, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n,
        CUgraphNodeParams *params),
       (node, g, deps, edges, n, params))
/* the program's own virtual memory */
SYM_FN(cuMemCreate,
       (CUmemGenericAllocationHandle * h, size_t n, const CUmemAllocationProp *prop,
        unsigned long long fl),
       (h, n, prop, fl))
SYM_FN(cuMemRelease, (CUmemGenericAllocationHandle h), (h))
SYM_FN(cuMemMap,
       (CUdeviceptr va, size_t n, size_t off, CUmemGenericAllocationHandle h,
        unsigned long long fl),
       (va, n, off, h, fl))
SYM_FN(cuMemUnmap, (CUdeviceptr va, size_t n), (va, n))
SYM_FN(cuMemAddressReserve,
       (CUdeviceptr * p, size_t n, size_t align, CUdeviceptr addr, unsigned long long fl),
       (p, n, align, addr, fl))
SYM_FN(cuMemAddressFree, (CUdeviceptr p, size_t n), (p, n))
SYM_FN(cuMemSetAccess, (CUdeviceptr p, size_t n, const CUmemAccessDesc *desc, size_t count),
       (p, n, desc, count))
/* arrays */
SYM_FN(cuArrayCreate_v2, (CUarray * a, const CUDA_ARRAY_DESCRIPTOR *d), (a, d))
SYM_FN(cuArray3DCreate_v2, (CUarray * a, const CUDA_ARRAY3D_DESCRIPTOR *d), (a, d))
SYM_FN(cuArrayDestroy, (CUarray a), (a))
/* pinned host memory */
SYM_FN(cuMemAllocHost_v2, (void **p, size_t n), (p, n))
SYM_FN(cuMemHostAlloc, (void **p, size_t n, unsigned int fl), (p, n, fl))
SYM_FN(cuMemFreeHost, (void *p), (p))

/* cuGetProcAddress by symbol: gpumem's wrappers (driver.c), which hand out the hooks. */
#undef cuGetProcAddress
GM_EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *st);
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *st)
{
    CUresult (*w)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))
            gm_driver_getproc_wrapper("cuGetProcAddress_v2");
    return w(sym, pfn, ver, flags, st);
}
GM_EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags);
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
    CUresult (*w)(const char *, void **, int, cuuint64_t) =
        (CUresult(*)(const char *, void **, int, cuuint64_t))gm_driver_getproc_wrapper(
            "cuGetProcAddress");
    return w(sym, pfn, ver, flags);
}

/* ---- what gpumem record says when nothing was recorded -------------------------------------
 * At exit, a process that never opened a recording tells `gpumem record` why (rec_status), so
 * that a program whose allocations gpumem could not see is never reported as one that made no
 * allocation: the driver loaded in the process but never loaded by gpumem means its calls went
 * around gpumem. */
#ifdef GM_HAVE_REC
#include "snapshot/record/rec.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

__attribute__((destructor)) static void gm_sym_unseen_at_exit(void)
{
    if (gm_forked_child || gm_rec_opened())
        return;
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return; /* no driver in the process: it made no CUDA call (record says so) */
    /* loaded is not used: the virtual GPU's driver is preloaded into every recorded Python, and
     * a library may link the driver without calling it. A driver never initialized answers
     * CUDA_ERROR_NOT_INITIALIZED, which says the program made no driver call at all. */
    CUresult (*count)(int *) = (CUresult(*)(int *))dlsym(h, "cuDeviceGetCount");
    int n = 0;
    int unused = count && count(&n) == CUDA_ERROR_NOT_INITIALIZED;
    dlclose(h);
    if (unused)
        return;
    if (!gm_real.cuGetProcAddress_v2)
        rec_status("msg", "the program used the CUDA driver (libcuda.so.1 was loaded) but none "
                          "of its driver calls reached gpumem, so any allocation it made could "
                          "not be seen: it calls driver functions gpumem does not interpose "
                          "(see Known limits in the README)");
    else if (!getenv("GPUMEM_MODE") || strcmp(getenv("GPUMEM_MODE"), "off") != 0)
        rec_status("msg", "the program's CUDA calls reached gpumem, but it made no device or "
                          "pinned allocation");
}
#endif
