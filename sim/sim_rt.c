/* sim_rt.c — the virtual GPU's CUDA runtime (libcudart.so.13).
 *
 * Like the real runtime, it reaches the driver only at run time: dlopen("libcuda.so.1"), one
 * dlsym of cuGetProcAddress_v2, then every driver function through cuGetProcAddress_v2. It has
 * no undefined cu* symbol, so an LD_PRELOADed cuGetProcAddress/dlsym hook sees every driver
 * call the runtime makes, exactly as with a real statically or dynamically linked runtime.
 *
 * Per thread it keeps the last error (cudaGetLastError / cudaPeekAtLastError) and makes the
 * primary context current on the thread's first call. Errors are the real cudaError_t codes:
 * the driver's CUresult values map to the runtime code of the same number (that is how the two
 * enums are laid out for every code the sim produces), with cudaErrorUnknown for anything else.
 */
#include <cuda.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_rt_kernels.h"
#include "sim_rt_procs.h" /* generated: SIM_RT_ERRORS */

#define RT_EXPORT __attribute__((visibility("default")))

/* The driver functions the runtime uses, resolved through cuGetProcAddress_v2, each asked for at
 * the version whose signature the header's prototype has (cuCtxSynchronize at 2.0, not 13.0's
 * cuCtxSynchronize_v2(CUcontext)), as the real runtime does. */
#define DRIVER_FUNCS(X)                                                                                                 \
    X(cuInit, 2000)                                                                                                     \
    X(cuDriverGetVersion, 2020)                                                                                         \
    X(cuDeviceGetCount, 2000)                                                                                           \
    X(cuDeviceGet, 2000)                                                                                                \
    X(cuDeviceGetName, 2000) X(cuDeviceTotalMem, 3020) X(cuDeviceGetAttribute, 2000) X(                                 \
        cuDeviceGetUuid, 11040) X(cuDevicePrimaryCtxRetain, 7000) X(cuCtxGetCurrent, 4000)                              \
        X(cuCtxSetCurrent, 4000) X(cuCtxSynchronize, 2000) X(cuMemAlloc, 3020) X(                                       \
            cuMemFree, 3020) X(cuMemAllocAsync,                                                                         \
                               11020) X(cuMemFreeAsync,                                                                 \
                                        11020) X(cuMemAllocFromPoolAsync,                                               \
                                                 11020) X(cuDeviceGetDefaultMemPool,                                    \
                                                          11020) X(cuDeviceGetMemPool, 11020) X(cuDeviceSetMemPool, 11020)                           \
            X(cuMemPoolCreate, 11020) X(cuMemPoolDestroy, 11020)                                                    \
            X(cuMemPoolSetAttribute, 11020) X(cuMemPoolGetAttribute, 11020) X(                                          \
                cuMemPoolTrimTo,                                                                                        \
                11020) X(cuMemAllocManaged,                                                                             \
                         6000) X(cuMemHostAlloc, 3020)                                                                  \
                X(cuMemFreeHost, 2000) X(cuMemHostRegister, 6050) X(cuMemHostUnregister, 4000) X(                       \
                    cuMemHostGetDevicePointer, 3020) X(cuMemGetInfo,                                                    \
                                                       3020) X(cuMemcpy,                                                \
                                                               4000) X(cuMemcpyAsync, 4000) X(cuMemsetD8,               \
                                                                                              3020)                     \
                    X(cuMemsetD8Async, 3020) X(cuStreamCreateWithPriority, 5050) X(                                     \
                        cuStreamDestroy, 4000) X(cuStreamSynchronize, 2000)                                             \
                        X(cuStreamQuery, 2000) X(cuStreamWaitEvent, 3020) X(cuStreamGetFlags, 5050) X(                  \
                            cuStreamGetPriority, 5050) X(cuStreamIsCapturing, 10000)                                    \
                            X(cuEventCreate, 2000) X(cuEventDestroy, 4000) X(cuEventRecord, 2000) X(                    \
                                cuEventRecordWithFlags,                                                                 \
                                11010) X(cuEventQuery,                                                                  \
                                         2000) X(cuEventSynchronize,                                                    \
                                                 2000) X(cuEventElapsedTime,                                            \
                                                         12080) X(cuPointerGetAttributes, 7000) X(cuLaunchKernel, 4000) \
                                X(cuLaunchKernelEx, 11060) X(cuLaunchCooperativeKernel, 9000) X(                        \
                                    cuFuncGetName, 12030) X(cuLaunchHostFunc, 10000)                                    \
                                    X(cuGetProcAddress,                                                                 \
                                      12000) X(cuCtxGetStreamPriorityRange,                                             \
                                               5050) X(cuCtxGetDevice,                                                  \
                                                       2000) X(cuMemcpyHtoD,                                            \
                                                               3020) X(cuMemcpyDtoH,                                    \
                                                                       3020) X(cuMemcpyDtoD, 3020)                      \
                                        X(cuMemcpyHtoDAsync, 3020) X(cuMemcpyDtoHAsync, 3020) X(                        \
                                            cuMemcpyDtoDAsync, 3020) X(cuMemcpyPeer,                                    \
                                                                       4000) X(cuMemcpyPeerAsync, 4000)                 \
                                            X(cuCtxEnablePeerAccess, 4000) X(cuCtxDisablePeerAccess, 4000) X(           \
                                                cuStreamBeginCapture,                                                   \
                                                10010) X(cuStreamEndCapture,                                            \
                                                         10000) X(cuStreamGetCaptureInfo, 12030)                        \
                                                X(cuGraphInstantiateWithFlags, 11040) X(                                \
                                                    cuGraphLaunch,                                                      \
                                                    10000) X(cuGraphDestroy,                                            \
                                                             10000) X(cuGraphExecDestroy, 10000)                        \
                                                    X(cuGraphGetNodes, 10000) X(                                        \
                                                        cuThreadExchangeStreamCaptureMode,                              \
                                                        10010) X(cuMemAllocPitch,                                       \
                                                                 3020) X(cuIpcGetMemHandle,                             \
                                                                         4010) X(cuIpcOpenMemHandle,                    \
                                                                                 11000)                                 \
                                                        X(cuIpcCloseMemHandle, 4010) X(                                 \
                                                            cuFuncGetAttribute,                                         \
                                                            2020) X(cuFuncSetAttribute, 9000)                           \
                                                            X(cuFuncSetCacheConfig, 3000) X(                            \
                                                                cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,   \
                                                                7000)                                                   \
                                                                X(cuOccupancyAvailableDynamicSMemPerBlock,              \
                                                                  10020) X(cuDeviceGetPCIBusId,                         \
                                                                           4010) X(cuGraphCreate,                       \
                                                                                   10000)                               \
                                                                    X(cuGraphAddMemAllocNode, 11040) X(                 \
                                                                        cuGraphAddMemFreeNode,                          \
                                                                        11040) X(cuDeviceGraphMemTrim,                  \
                                                                                 11040)                                 \
                                                                        X(cuDeviceGetGraphMemAttribute,                 \
                                                                          11040)                                        \
                                                                            X(cuDeviceSetGraphMemAttribute,             \
                                                                              11040)                                    \
                                                                                X(cuDevicePrimaryCtxReset,              \
                                                                                  11000)

/* Each pointer has the exact type of the header's prototype (typeof takes no address, so no
 * symbol is referenced). */
static struct {
#define X(name, ver) __typeof__(&name) name;
    DRIVER_FUNCS(X)
#undef X
} drv;
/* The same functions as the per-thread default-stream entry points (the driver's _ptsz/_ptds):
 * what the runtime's own _ptsz/_ptds names call, so that their stream 0 is the calling thread's
 * per-thread default stream. */
static __typeof__(drv) drv_pt;
static __thread int rt_ptds; /* > 0 inside a runtime _ptsz/_ptds entry point */
#define DRV (*(rt_ptds > 0 ? &drv_pt : &drv))

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
static cudaError_t rt_init_error = cudaErrorInitializationError;
#define RT_MAX_DEVICES 16
static CUcontext rt_primary[RT_MAX_DEVICES]; /* retained on first use of each device */
static pthread_mutex_t rt_primary_lock = PTHREAD_MUTEX_INITIALIZER;
/* The sim's own API in the driver (sim.h), looked up by name: NULL with another driver. */
static CUresult (*sim_register_device_kernel_fn)(const char *, int, const size_t *, const size_t *,
                                                 CUfunction *);
static void (*sim_unsupported_note_fn)(const char *, const char *);
static __thread cudaError_t tls_last_error;
static __thread bool tls_ctx_ready;
static __thread int tls_device;

static const char *const rt_error_names[] = {
#define SIM_X(n) [n] = #n,
    SIM_RT_ERRORS
#undef SIM_X
};
#define RT_NERRORS (sizeof rt_error_names / sizeof rt_error_names[0])

static cudaError_t map_error(CUresult r)
{
    if (r == CUDA_SUCCESS) return cudaSuccess;
    if ((size_t)r < RT_NERRORS && rt_error_names[r]) return (cudaError_t)r;
    return cudaErrorUnknown;
}

/* Every runtime call returns through here: failures become the thread's last error. */
static cudaError_t rt_ret(cudaError_t e)
{
    if (e != cudaSuccess) tls_last_error = e;
    return e;
}

/* The virtual GPU's driver is the libcuda.so.1 next to this library, opened by its path first.
 * By soname, LD_LIBRARY_PATH would outrank this library's rpath, and on a machine with a real
 * GPU (LD_LIBRARY_PATH naming the driver's folder) the real driver would be loaded under the
 * virtual runtime; sanitizer runtimes, which intercept dlopen, also hide the caller's rpath. The
 * soname is the fallback for a layout where the two are not side by side. */
static void *open_driver(void)
{
    Dl_info info;
    if (dladdr((void *)open_driver, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        char path[4096];
        int n = slash ? snprintf(path, sizeof path, "%.*s/libcuda.so.1",
                                 (int)(slash - info.dli_fname), info.dli_fname)
                      : -1;
        void *h = n > 0 && (size_t)n < sizeof path ? dlopen(path, RTLD_NOW | RTLD_GLOBAL) : NULL;
        if (h) return h;
    }
    return dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
}

/* The file a driver function comes from, for messages. */
static const char *driver_path(get_proc_fn gpa)
{
    Dl_info info;
    return dladdr((void *)gpa, &info) && info.dli_fname ? info.dli_fname : "libcuda.so.1";
}

static void rt_load(void)
{
    void *h = open_driver();
    if (!h) {
        const char *why = dlerror();
        fprintf(stderr,
                "gpumem sim runtime: cannot load libcuda.so.1 (%s); build the virtual GPU "
                "(make) or set LD_LIBRARY_PATH to its folder\n",
                why ? why : "not found");
        rt_init_error = cudaErrorInsufficientDriver;
        return;
    }
    get_proc_fn gpa = (get_proc_fn)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        fprintf(stderr, "gpumem sim runtime: libcuda.so.1 has no cuGetProcAddress_v2\n");
        rt_init_error = cudaErrorInsufficientDriver;
        return;
    }
    CUdriverProcAddressQueryResult st;
#define X(name, ver)                                                                               \
    if (gpa(#name, (void **)&drv.name, ver, CU_GET_PROC_ADDRESS_DEFAULT, &st) || !drv.name ||      \
        gpa(#name, (void **)&drv_pt.name, ver, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,      \
            &st) ||                                                                                \
        !drv_pt.name) {                                                                            \
        fprintf(stderr, "gpumem sim runtime: the driver %s has no %s; is it the virtual GPU's?\n", \
                driver_path(gpa), #name);                                                          \
        rt_init_error = cudaErrorInsufficientDriver;                                               \
        return;                                                                                    \
    }
    DRIVER_FUNCS(X)
#undef X
    sim_register_device_kernel_fn = (CUresult(*)(const char *, int, const size_t *, const size_t *, CUfunction *))dlsym(
        h, "sim_register_device_kernel_params");
    sim_unsupported_note_fn = (void (*)(const char *, const char *))dlsym(h, "sim_unsupported_note");
    CUresult r = DRV.cuInit(0);
    if (r == CUDA_SUCCESS) r = DRV.cuDevicePrimaryCtxRetain(&rt_primary[0], 0);
    if (r != CUDA_SUCCESS) {
        rt_init_error =
            r == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice : cudaErrorInitializationError;
        return;
    }
    rt_init_error = cudaSuccess;
}

/* Loads the driver once per process and makes the primary context current once per thread. */
static cudaError_t rt_ready(void)
{
    pthread_once(&rt_once, rt_load);
    if (rt_init_error != cudaSuccess) return rt_init_error;
    if (!tls_ctx_ready) {
        CUcontext cur = NULL;
        DRV.cuCtxGetCurrent(&cur);
        if (!cur) DRV.cuCtxSetCurrent(rt_primary[0]);
        tls_ctx_ready = true;
    }
    return cudaSuccess;
}

#define RT_BEGIN()                                                                                 \
    do {                                                                                           \
        cudaError_t e_ = rt_ready();                                                               \
        if (e_ != cudaSuccess) return rt_ret(e_);                                                  \
    } while (0)
#define RT_CALL(expr) return rt_ret(map_error((CUresult)(expr)))

/* A weak stub in sim_rt_stubs.c calls this for every runtime function not implemented here:
 * counted in the driver's table of what is not modelled (GPUMEM_SIM_STATS) and named once. */
int sim_rt_unsupported(const char *name);
int sim_rt_unsupported(const char *name)
{
    pthread_once(&rt_once, rt_load);
    if (sim_unsupported_note_fn) {
        sim_unsupported_note_fn(name, "cudaErrorNotSupported");
        return rt_ret(cudaErrorNotSupported);
    }
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static const char *seen[256];
    static size_t nseen;
    bool first = true;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nseen && first; i++)
        first = strcmp(seen[i], name) != 0;
    if (first && nseen < sizeof seen / sizeof seen[0]) seen[nseen++] = name;
    pthread_mutex_unlock(&lock);
    if (first)
        fprintf(stderr,
                "gpumem sim: %s is not implemented by the virtual GPU; it returns "
                "cudaErrorNotSupported\n",
                name);
    return rt_ret(cudaErrorNotSupported);
}

/* ---- errors and versions ----------------------------------------------------------------- */

RT_EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t e = tls_last_error;
    tls_last_error = cudaSuccess;
    return e;
}

RT_EXPORT cudaError_t cudaPeekAtLastError(void)
{
    return tls_last_error;
}

RT_EXPORT const char *cudaGetErrorName(cudaError_t e)
{
    if ((size_t)e < RT_NERRORS && rt_error_names[e]) return rt_error_names[e];
    return "unrecognized error code";
}

RT_EXPORT const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInitializationError:
        return "initialization error";
    case cudaErrorCudartUnloading:
        return "driver shutting down";
    case cudaErrorInvalidDevicePointer:
        return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
        return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDeviceFunction:
        return "invalid device function";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorSymbolNotFound:
        return "named symbol not found";
    case cudaErrorNotReady:
        return "device not ready";
    case cudaErrorIllegalAddress:
        return "an illegal memory access was encountered";
    case cudaErrorHostMemoryAlreadyRegistered:
        return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered:
        return "pointer does not correspond to a registered memory region";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure";
    case cudaErrorNotPermitted:
        return "operation not permitted";
    case cudaErrorNotSupported:
        return "operation not supported";
    case cudaErrorUnknown:
        return "unknown error";
    default:
        break;
    }
    if ((size_t)e < RT_NERRORS && rt_error_names[e]) return rt_error_names[e];
    return "unrecognized error code";
}

RT_EXPORT cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (!v) return rt_ret(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaDriverGetVersion(int *v)
{
    if (!v) return rt_ret(cudaErrorInvalidValue);
    pthread_once(&rt_once, rt_load);
    if (rt_init_error != cudaSuccess) {
        *v = 0;
        return cudaSuccess;
    }
    RT_CALL(DRV.cuDriverGetVersion(v));
}

/* ---- devices ----------------------------------------------------------------------------- */

RT_EXPORT cudaError_t cudaGetDeviceCount(int *n)
{
    if (!n) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    RT_CALL(DRV.cuDeviceGetCount(n));
}

/* Device d's primary context, retained once by the runtime (as the real one does). */
static CUresult primary_of(int d, CUcontext *out)
{
    int n = 0;
    DRV.cuDeviceGetCount(&n);
    if (d < 0 || d >= n || d >= RT_MAX_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&rt_primary_lock);
    if (!rt_primary[d]) r = DRV.cuDevicePrimaryCtxRetain(&rt_primary[d], d);
    *out = rt_primary[d];
    pthread_mutex_unlock(&rt_primary_lock);
    return r;
}

RT_EXPORT cudaError_t cudaGetDevice(int *d)
{
    if (!d) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    CUdevice dev;
    if (DRV.cuCtxGetDevice(&dev) == CUDA_SUCCESS) tls_device = dev;
    *d = tls_device;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaSetDevice(int d)
{
    RT_BEGIN();
    CUcontext c;
    CUresult r = primary_of(d, &c);
    if (r == CUDA_ERROR_INVALID_DEVICE) return rt_ret(cudaErrorInvalidDevice);
    if (r) RT_CALL(r);
    tls_device = d;
    RT_CALL(DRV.cuCtxSetCurrent(c));
}

RT_EXPORT cudaError_t cudaInitDevice(int d, unsigned int dflags, unsigned int flags)
{
    (void)dflags;
    (void)flags;
    return cudaSetDevice(d);
}

RT_EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
    (void)flags; /* scheduling flags have no meaning when work runs at issue time */
    RT_BEGIN();
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaGetDeviceFlags(unsigned int *flags)
{
    if (!flags) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    *flags = cudaDeviceMapHost;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int d)
{
    if (!v) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    /* The runtime attribute numbers are the driver's. */
    RT_CALL(DRV.cuDeviceGetAttribute(v, (CUdevice_attribute)attr, (CUdevice)d));
}

RT_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    RT_BEGIN();
    RT_CALL(DRV.cuCtxGetStreamPriorityRange(least, greatest));
}

RT_EXPORT cudaError_t cudaDeviceCanAccessPeer(int *can, int d, int peer)
{
    if (!can) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    int n = 0;
    DRV.cuDeviceGetCount(&n);
    if (d < 0 || d >= n || peer < 0 || peer >= n) return rt_ret(cudaErrorInvalidDevice);
    *can = d != peer;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    RT_BEGIN();
    CUcontext c;
    CUresult r = primary_of(peer, &c);
    if (r == CUDA_ERROR_INVALID_DEVICE) return rt_ret(cudaErrorInvalidDevice);
    if (!r) r = DRV.cuCtxEnablePeerAccess(c, flags);
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaDeviceDisablePeerAccess(int peer)
{
    RT_BEGIN();
    CUcontext c;
    CUresult r = primary_of(peer, &c);
    if (r == CUDA_ERROR_INVALID_DEVICE) return rt_ret(cudaErrorInvalidDevice);
    if (!r) r = DRV.cuCtxDisablePeerAccess(c);
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int d)
{
    if (!id || len <= 0) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    int n = 0;
    DRV.cuDeviceGetCount(&n);
    if (d < 0 || d >= n) return rt_ret(cudaErrorInvalidDevice);
    RT_CALL(DRV.cuDeviceGetPCIBusId(id, len, (CUdevice)d));
}

/* No profiler is attached to the virtual GPU: starting and stopping collection does nothing,
 * as with the real runtime when no profiler runs. */
RT_EXPORT cudaError_t cudaProfilerStart(void)
{
    RT_BEGIN();
    return cudaSuccess;
}
RT_EXPORT cudaError_t cudaProfilerStop(void)
{
    RT_BEGIN();
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    if (!p) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    int n = 0;
    DRV.cuDeviceGetCount(&n);
    if (d < 0 || d >= n) return rt_ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    DRV.cuDeviceGetName(p->name, (int)sizeof p->name, (CUdevice)d);
    DRV.cuDeviceGetUuid(&p->uuid, (CUdevice)d);
    DRV.cuDeviceTotalMem(&p->totalGlobalMem, (CUdevice)d);
    int v;
#define ATTR(field, a) (DRV.cuDeviceGetAttribute(&v, a, (CUdevice)d), p->field = v)
    ATTR(sharedMemPerBlock, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    ATTR(regsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    ATTR(warpSize, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    ATTR(memPitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH);
    ATTR(maxThreadsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    ATTR(maxThreadsDim[0], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
    ATTR(maxThreadsDim[1], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
    ATTR(maxThreadsDim[2], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
    ATTR(maxGridSize[0], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
    ATTR(maxGridSize[1], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
    ATTR(maxGridSize[2], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
    ATTR(totalConstMem, CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
    ATTR(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    ATTR(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    ATTR(textureAlignment, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
    ATTR(multiProcessorCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    ATTR(integrated, CU_DEVICE_ATTRIBUTE_INTEGRATED);
    ATTR(canMapHostMemory, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
    ATTR(concurrentKernels, CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS);
    ATTR(ECCEnabled, CU_DEVICE_ATTRIBUTE_ECC_ENABLED);
    ATTR(asyncEngineCount, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
    ATTR(unifiedAddressing, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
    ATTR(memoryBusWidth, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    ATTR(l2CacheSize, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    ATTR(maxThreadsPerMultiProcessor, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    ATTR(streamPrioritiesSupported, CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED);
    ATTR(sharedMemPerMultiprocessor, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    ATTR(regsPerMultiprocessor, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
    ATTR(managedMemory, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY);
    ATTR(concurrentManagedAccess, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
    ATTR(cooperativeLaunch, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH);
    ATTR(sharedMemPerBlockOptin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    ATTR(maxBlocksPerMultiProcessor, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
    ATTR(hostRegisterSupported, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED);
    ATTR(hostRegisterReadOnlySupported, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED);
    ATTR(memoryPoolsSupported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
#undef ATTR
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    RT_BEGIN();
    RT_CALL(DRV.cuCtxSynchronize());
}

RT_EXPORT cudaError_t cudaDeviceReset(void)
{
    /* The current device's primary context reset: it synchronizes the device and destroys its
     * device allocations, as a GPU's does (tests/diff/gpu-h200/reset.out); the runtime's own
     * state (the retained context, the thread's device) stays usable, as after the real one. */
    RT_BEGIN();
    int dev;
    CUresult r = DRV.cuCtxGetDevice(&dev);
    if (r == CUDA_SUCCESS) r = DRV.cuDevicePrimaryCtxReset(dev);
    RT_CALL(r);
}

/* ---- memory ------------------------------------------------------------------------------ */

RT_EXPORT cudaError_t cudaMalloc(void **p, size_t size)
{
    if (!p) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    if (size == 0) {
        *p = NULL;
        return cudaSuccess;
    } /* as the real runtime */
    CUdeviceptr d = 0;
    CUresult r = DRV.cuMemAlloc(&d, size);
    *p = r == CUDA_SUCCESS ? (void *)d : NULL;
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaFree(void *p)
{
    RT_BEGIN(); /* cudaFree(NULL) is the customary way to initialize the runtime */
    if (!p) return cudaSuccess;
    /* A pointer it does not own (unknown, interior, freed) is cudaErrorInvalidValue, as the
     * CUDA 13 runtime answers on an H200 (tests/diff/gpu-h200/rt_errors.out), not
     * cudaErrorInvalidDevicePointer. */
    RT_CALL(DRV.cuMemFree((CUdeviceptr)p));
}

RT_EXPORT cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s)
{
    if (!p) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    if (size == 0) {
        *p = NULL;
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    CUresult r = DRV.cuMemAllocAsync(&d, size, (CUstream)s);
    *p = r == CUDA_SUCCESS ? (void *)d : NULL;
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    RT_BEGIN();
    /* NULL too goes to the driver: it succeeds, unless the capture rules forbid the call (900
     * on an H200, capture_modes.out) */
    RT_CALL(DRV.cuMemFreeAsync((CUdeviceptr)p, (CUstream)s));
}

RT_EXPORT cudaError_t cudaMallocFromPoolAsync(void **p, size_t size, cudaMemPool_t pool,
                                              cudaStream_t s)
{
    if (!p) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    CUdeviceptr d = 0;
    CUresult r = DRV.cuMemAllocFromPoolAsync(&d, size, (CUmemoryPool)pool, (CUstream)s);
    *p = r == CUDA_SUCCESS ? (void *)d : NULL;
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int d)
{
    RT_BEGIN();
    RT_CALL(DRV.cuDeviceGetDefaultMemPool((CUmemoryPool *)pool, (CUdevice)d));
}

RT_EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *pool, int d)
{
    RT_BEGIN();
    RT_CALL(DRV.cuDeviceGetMemPool((CUmemoryPool *)pool, (CUdevice)d));
}

RT_EXPORT cudaError_t cudaDeviceSetMemPool(int d, cudaMemPool_t pool)
{
    RT_BEGIN();
    RT_CALL(DRV.cuDeviceSetMemPool((CUdevice)d, (CUmemoryPool)pool));
}

RT_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr,
                                              void *value)
{
    RT_BEGIN();
    RT_CALL(DRV.cuMemPoolSetAttribute((CUmemoryPool)pool, (CUmemPool_attribute)attr, value));
}

RT_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr,
                                              void *value)
{
    RT_BEGIN();
    RT_CALL(DRV.cuMemPoolGetAttribute((CUmemoryPool)pool, (CUmemPool_attribute)attr, value));
}

/* A pool of device memory (the runtime's properties are the driver's, field for field). */
RT_EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const struct cudaMemPoolProps *props)
{
    if (!pool || !props) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    CUmemPoolProps p = {0};
    p.allocType = (CUmemAllocationType)props->allocType;
    p.handleTypes = (CUmemAllocationHandleType)props->handleTypes;
    p.location.type = (CUmemLocationType)props->location.type;
    p.location.id = props->location.id;
    p.maxSize = props->maxSize;
    RT_CALL(DRV.cuMemPoolCreate((CUmemoryPool *)pool, &p));
}

RT_EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool)
{
    RT_BEGIN();
    RT_CALL(DRV.cuMemPoolDestroy((CUmemoryPool)pool));
}

/* Every virtual device can access every pool, the program's ones too: the descriptors are
 * checked and nothing changes. */
RT_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const struct cudaMemAccessDesc *d,
                                           size_t count)
{
    if (!pool || (count && !d)) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    int n = 0;
    DRV.cuDeviceGetCount(&n);
    for (size_t i = 0; i < count; i++)
        if (d[i].location.type != cudaMemLocationTypeDevice || d[i].location.id < 0 ||
            d[i].location.id >= n || d[i].flags > cudaMemAccessFlagsProtReadWrite)
            return rt_ret(cudaErrorInvalidValue);
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep)
{
    RT_BEGIN();
    RT_CALL(DRV.cuMemPoolTrimTo((CUmemoryPool)pool, keep));
}

RT_EXPORT cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
    if (!p) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    if (size == 0) {
        *p = NULL;
        return cudaSuccess;
    }
    /* cudaHostAlloc{Portable,Mapped,WriteCombined} are the driver's CU_MEMHOSTALLOC_* bits. */
    RT_CALL(DRV.cuMemHostAlloc(p, size, flags));
}

RT_EXPORT cudaError_t cudaMallocHost(void **p, size_t size)
{
    return cudaHostAlloc(p, size, cudaHostAllocDefault);
}

RT_EXPORT cudaError_t cudaFreeHost(void *p)
{
    RT_BEGIN();
    if (!p) return cudaSuccess;
    RT_CALL(DRV.cuMemFreeHost(p));
}

RT_EXPORT cudaError_t cudaHostRegister(void *p, size_t size, unsigned int flags)
{
    RT_BEGIN();
    RT_CALL(DRV.cuMemHostRegister(p, size, flags));
}

RT_EXPORT cudaError_t cudaHostUnregister(void *p)
{
    RT_BEGIN();
    RT_CALL(DRV.cuMemHostUnregister(p));
}

RT_EXPORT cudaError_t cudaHostGetDevicePointer(void **pd, void *p, unsigned int flags)
{
    if (!pd) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    CUdeviceptr d = 0;
    CUresult r = DRV.cuMemHostGetDevicePointer(&d, p, flags);
    if (r == CUDA_SUCCESS) *pd = (void *)d;
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaMallocManaged(void **p, size_t size, unsigned int flags)
{
    if (!p) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    if (size == 0) {
        *p = NULL;
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    CUresult r = DRV.cuMemAllocManaged(&d, size, flags);
    *p = r == CUDA_SUCCESS ? (void *)d : NULL; /* as the other allocation calls do on failure */
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    RT_BEGIN();
    RT_CALL(DRV.cuMemGetInfo(free_bytes, total));
}

static bool kind_ok(enum cudaMemcpyKind k)
{
    return k >= cudaMemcpyHostToHost && k <= cudaMemcpyDefault;
}

/* Is p device memory (cudaMalloc, VMM; not managed, not host)? */
static bool is_device_memory(const void *p)
{
    unsigned type = 0;
    int managed = 0;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED};
    void *data[] = {&type, &managed};
    if (DRV.cuPointerGetAttributes(2, attrs, data, (CUdeviceptr)p) != CUDA_SUCCESS) return false;
    return type == CU_MEMORYTYPE_DEVICE && !managed;
}

/* A copy in the direction `k`. cudaMemcpyDefault lets the pointers decide (unified addressing).
 * A named direction goes to the driver's copy of that direction, which checks that the device
 * side is memory the device can address (device, managed, or pinned host memory); a host side
 * that is device memory contradicts the direction: cudaErrorInvalidValue, as the real runtime
 * answers ("invalid argument"). */
static CUresult copy_kind(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, bool async,
                          CUstream s)
{
    CUdeviceptr d = (CUdeviceptr)dst, sp = (CUdeviceptr)src;
    if (n == 0) return CUDA_SUCCESS;
    switch (k) {
    case cudaMemcpyHostToHost:
        if (is_device_memory(dst) || is_device_memory(src)) return CUDA_ERROR_INVALID_VALUE;
        return async ? DRV.cuMemcpyAsync(d, sp, n, s) : DRV.cuMemcpy(d, sp, n);
    case cudaMemcpyHostToDevice:
        if (is_device_memory(src)) return CUDA_ERROR_INVALID_VALUE;
        return async ? DRV.cuMemcpyHtoDAsync(d, src, n, s) : DRV.cuMemcpyHtoD(d, src, n);
    case cudaMemcpyDeviceToHost:
        if (is_device_memory(dst)) return CUDA_ERROR_INVALID_VALUE;
        return async ? DRV.cuMemcpyDtoHAsync(dst, sp, n, s) : DRV.cuMemcpyDtoH(dst, sp, n);
    case cudaMemcpyDeviceToDevice:
        return async ? DRV.cuMemcpyDtoDAsync(d, sp, n, s) : DRV.cuMemcpyDtoD(d, sp, n);
    default:
        return async ? DRV.cuMemcpyAsync(d, sp, n, s) : DRV.cuMemcpy(d, sp, n);
    }
}

RT_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k)
{
    RT_BEGIN();
    if (!kind_ok(k)) return rt_ret(cudaErrorInvalidMemcpyDirection);
    RT_CALL(copy_kind(dst, src, n, k, false, NULL));
}

RT_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
                                      cudaStream_t s)
{
    RT_BEGIN();
    if (!kind_ok(k)) return rt_ret(cudaErrorInvalidMemcpyDirection);
    RT_CALL(copy_kind(dst, src, n, k, true, (CUstream)s));
}

/* Pitched allocations go to cuMemAllocPitch (16-byte elements: the widest, so the pitch meets
 * every alignment); the pitch is the width rounded up to the device's texture alignment. */
RT_EXPORT cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height)
{
    if (!p || !pitch) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    CUdeviceptr d = 0;
    CUresult r = DRV.cuMemAllocPitch(&d, pitch, width, height, 16);
    *p = r == CUDA_SUCCESS ? (void *)d : NULL; /* NULL on failure, as CUDA 13 (capture_modes.out) */
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pp, struct cudaExtent e)
{
    if (!pp) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    if (e.depth && e.height > SIZE_MAX / e.depth) return rt_ret(cudaErrorInvalidValue);
    CUdeviceptr d = 0;
    size_t pitch = 0;
    CUresult r = DRV.cuMemAllocPitch(&d, &pitch, e.width, e.height * e.depth, 16);
    if (r == CUDA_SUCCESS) {
        pp->ptr = (void *)d;
        pp->pitch = pitch;
        pp->xsize = e.width;
        pp->ysize = e.height;
    }
    RT_CALL(r);
}

/* Row by row, each row a copy of the given direction (checked as cudaMemcpy checks it). */
static CUresult copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                        size_t height, enum cudaMemcpyKind k, bool async, CUstream s)
{
    for (size_t row = 0; row < height; row++) {
        CUresult r = copy_kind((char *)dst + row * dpitch, (const char *)src + row * spitch, width,
                               k, async, s);
        if (r) return r;
    }
    return CUDA_SUCCESS;
}

RT_EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                   size_t width, size_t height, enum cudaMemcpyKind k)
{
    RT_BEGIN();
    if (!kind_ok(k)) return rt_ret(cudaErrorInvalidMemcpyDirection);
    if (width > dpitch || width > spitch) return rt_ret(cudaErrorInvalidPitchValue);
    RT_CALL(copy_2d(dst, dpitch, src, spitch, width, height, k, false, NULL));
}

RT_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                        size_t width, size_t height, enum cudaMemcpyKind k,
                                        cudaStream_t s)
{
    RT_BEGIN();
    if (!kind_ok(k)) return rt_ret(cudaErrorInvalidMemcpyDirection);
    if (width > dpitch || width > spitch) return rt_ret(cudaErrorInvalidPitchValue);
    RT_CALL(copy_2d(dst, dpitch, src, spitch, width, height, k, true, (CUstream)s));
}

RT_EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dd, const void *src, int sd, size_t n)
{
    RT_BEGIN();
    CUcontext dc, sc;
    if (primary_of(dd, &dc) || primary_of(sd, &sc)) return rt_ret(cudaErrorInvalidDevice);
    RT_CALL(DRV.cuMemcpyPeer((CUdeviceptr)dst, dc, (CUdeviceptr)src, sc, n));
}

RT_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t n,
                                          cudaStream_t s)
{
    RT_BEGIN();
    CUcontext dc, sc;
    if (primary_of(dd, &dc) || primary_of(sd, &sc)) return rt_ret(cudaErrorInvalidDevice);
    RT_CALL(DRV.cuMemcpyPeerAsync((CUdeviceptr)dst, dc, (CUdeviceptr)src, sc, n, (CUstream)s));
}

RT_EXPORT cudaError_t cudaMemset(void *p, int value, size_t n)
{
    RT_BEGIN();
    RT_CALL(DRV.cuMemsetD8((CUdeviceptr)p, (unsigned char)value, n));
}

RT_EXPORT cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s)
{
    RT_BEGIN();
    RT_CALL(DRV.cuMemsetD8Async((CUdeviceptr)p, (unsigned char)value, n, (CUstream)s));
}

RT_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    if (!a) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    unsigned type = 0;
    int ordinal = -2, managed = 0;
    CUdeviceptr dptr = 0;
    void *hptr = NULL;
    CUpointer_attribute attrs[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
        CU_POINTER_ATTRIBUTE_HOST_POINTER};
    void *data[] = {&type, &ordinal, &managed, &dptr, &hptr};
    CUresult r = DRV.cuPointerGetAttributes(5, attrs, data, (CUdeviceptr)p);
    if (r != CUDA_SUCCESS) RT_CALL(r);
    memset(a, 0, sizeof *a);
    if (managed)
        a->type = cudaMemoryTypeManaged;
    else if (type == CU_MEMORYTYPE_DEVICE)
        a->type = cudaMemoryTypeDevice;
    else if (type == CU_MEMORYTYPE_HOST)
        a->type = cudaMemoryTypeHost;
    else
        a->type = cudaMemoryTypeUnregistered;
    a->device = a->type == cudaMemoryTypeUnregistered ? -2 : ordinal;
    a->devicePointer = (void *)dptr;
    a->hostPointer = hptr;
    if (a->type == cudaMemoryTypeUnregistered) a->hostPointer = (void *)p;
    return cudaSuccess;
}

/* ---- streams and events ------------------------------------------------------------------ */

RT_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int prio)
{
    if (!s) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    RT_CALL(DRV.cuStreamCreateWithPriority((CUstream *)s, flags, prio));
}
RT_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    return cudaStreamCreateWithPriority(s, flags, 0);
}
RT_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithPriority(s, 0, 0);
}

RT_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    RT_BEGIN();
    RT_CALL(DRV.cuStreamDestroy((CUstream)s));
}
RT_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    RT_BEGIN();
    RT_CALL(DRV.cuStreamSynchronize((CUstream)s));
}
RT_EXPORT cudaError_t cudaStreamQuery(cudaStream_t s)
{
    RT_BEGIN();
    RT_CALL(DRV.cuStreamQuery((CUstream)s));
}
RT_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    RT_BEGIN();
    RT_CALL(DRV.cuStreamWaitEvent((CUstream)s, (CUevent)e, flags));
}
RT_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned int *flags)
{
    RT_BEGIN();
    RT_CALL(DRV.cuStreamGetFlags((CUstream)s, flags));
}
RT_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t s, int *prio)
{
    RT_BEGIN();
    RT_CALL(DRV.cuStreamGetPriority((CUstream)s, prio));
}
RT_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st)
{
    RT_BEGIN();
    RT_CALL(DRV.cuStreamIsCapturing((CUstream)s, (CUstreamCaptureStatus *)st));
}

RT_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    if (!e) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    RT_CALL(DRV.cuEventCreate((CUevent *)e, flags));
}
RT_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, 0);
}
RT_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    RT_BEGIN();
    RT_CALL(DRV.cuEventDestroy((CUevent)e));
}
RT_EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    RT_BEGIN();
    RT_CALL(DRV.cuEventRecord((CUevent)e, (CUstream)s));
}
RT_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int flags)
{
    RT_BEGIN();
    RT_CALL(DRV.cuEventRecordWithFlags((CUevent)e, (CUstream)s, flags));
}
RT_EXPORT cudaError_t cudaEventQuery(cudaEvent_t e)
{
    RT_BEGIN();
    RT_CALL(DRV.cuEventQuery((CUevent)e));
}
RT_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    RT_BEGIN();
    RT_CALL(DRV.cuEventSynchronize((CUevent)e));
}
RT_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    RT_BEGIN();
    RT_CALL(DRV.cuEventElapsedTime(ms, (CUevent)a, (CUevent)b));
}

/* ---- launches ---------------------------------------------------------------------------- */

/* A kernel is named by its host stub (nvcc-compiled code: registered with
 * __cudaRegisterFunction; the driver's function for it is made at first use and has device code
 * only, so its launches are skipped and counted) or, for the sim's host kernels, by its
 * CUfunction cast to const void *. Returns the CUfunction to hand the driver: for anything not
 * registered, the pointer itself, which the driver then checks. A registered kernel the driver
 * refuses (GPUMEM_SIM_KERNELS=strict) is cudaErrorInvalidDeviceFunction. */
static pthread_mutex_t rt_func_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaError_t function_of(const void *sym, CUfunction *out)
{
    rt_kernel *e = sym ? rt_kernel_find(sym) : NULL;
    if (!e) {
        *out = (CUfunction)(uintptr_t)sym;
        return cudaSuccess;
    }
    pthread_mutex_lock(&rt_func_lock);
    if (!e->f && !e->failed) {
        /* with its parameter layout from the fat binary when that gives one (the real driver's
         * cuFuncGetParamInfo answers from it too) */
        const sim_fatbin_kernel *l = rt_kernel_layout(e);
        e->failed = !sim_register_device_kernel_fn ||
                    sim_register_device_kernel_fn(e->name, l ? (int)l->nparams : -1, l ? l->sizes : NULL,
                                                  l ? l->offsets : NULL, &e->f) != CUDA_SUCCESS;
    }
    CUfunction f = e->f;
    pthread_mutex_unlock(&rt_func_lock);
    if (!f) return cudaErrorInvalidDeviceFunction;
    *out = f;
    return cudaSuccess;
}

#define RT_FUNCTION(f, sym)                                                                        \
    CUfunction f;                                                                                  \
    do {                                                                                           \
        cudaError_t fe_ = function_of(sym, &f);                                                    \
        if (fe_ != cudaSuccess) return rt_ret(fe_);                                                \
    } while (0)

/* The driver's launch errors as the runtime names them. */
static cudaError_t launch_ret(CUresult r)
{
    if (r == CUDA_ERROR_INVALID_HANDLE) return rt_ret(cudaErrorInvalidDeviceFunction);
    if (r == CUDA_ERROR_INVALID_VALUE) return rt_ret(cudaErrorInvalidConfiguration);
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                                       size_t shmem, cudaStream_t s)
{
    RT_BEGIN();
    RT_FUNCTION(f, func);
    return launch_ret(DRV.cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                         (unsigned)shmem, (CUstream)s, args, NULL));
}

/* cudaLaunchAttribute and CUlaunchAttribute share their layout (id, padding, value union), as
 * the real runtime relies on: the attributes are handed to the driver as they are. */
_Static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute),
               "runtime and driver launch attributes differ in size");
RT_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                          void **args)
{
    if (!config) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    RT_FUNCTION(f, func);
    CUlaunchConfig c = {
        .gridDimX = config->gridDim.x,
        .gridDimY = config->gridDim.y,
        .gridDimZ = config->gridDim.z,
        .blockDimX = config->blockDim.x,
        .blockDimY = config->blockDim.y,
        .blockDimZ = config->blockDim.z,
        .sharedMemBytes = (unsigned)config->dynamicSmemBytes,
        .hStream = (CUstream)config->stream,
        .attrs = (CUlaunchAttribute *)(void *)config->attrs,
        .numAttrs = config->numAttrs,
    };
    return launch_ret(DRV.cuLaunchKernelEx(&c, f, args, NULL));
}

RT_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block,
                                                  void **args, size_t shmem, cudaStream_t s)
{
    RT_BEGIN();
    RT_FUNCTION(f, func);
    return launch_ret(DRV.cuLaunchCooperativeKernel(f, grid.x, grid.y, grid.z, block.x, block.y,
                                                    block.z, (unsigned)shmem, (CUstream)s, args));
}

/* The function behind a kernel's symbol: a registered stub's, or a sim host kernel's own
 * CUfunction, once the driver confirms it is a kernel. */
static cudaError_t checked_function(const void *symbol, CUfunction *f)
{
    if (!symbol) return cudaErrorInvalidDeviceFunction;
    cudaError_t e = function_of(symbol, f);
    const char *name = NULL;
    if (e == cudaSuccess && DRV.cuFuncGetName(&name, *f) != CUDA_SUCCESS)
        e = cudaErrorInvalidDeviceFunction;
    return e;
}

RT_EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t *fn, const void *symbol)
{
    if (!fn) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    CUfunction f;
    cudaError_t e = checked_function(symbol, &f);
    if (e != cudaSuccess) return rt_ret(e);
    *fn = (cudaFunction_t)f;
    return cudaSuccess;
}

/* A cudaKernel_t is the driver's CUfunction here (one handle per registered kernel). */
RT_EXPORT cudaError_t cudaGetKernel(cudaKernel_t *k, const void *entry)
{
    if (!k) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    CUfunction f;
    cudaError_t e = checked_function(entry, &f);
    if (e != cudaSuccess) return rt_ret(e);
    *k = (cudaKernel_t)f;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaFuncGetName(const char **name, const void *func)
{
    if (!name) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    CUfunction f;
    cudaError_t e = checked_function(func, &f);
    if (e != cudaSuccess) return rt_ret(e);
    RT_CALL(DRV.cuFuncGetName(name, f));
}

/* ---- function attributes and occupancy ------------------------------------------------------ */
/* The driver answers with a typical compiled kernel's figures on the device profile in use (see
 * sim_func.c); a symbol that is no kernel is cudaErrorInvalidDeviceFunction. */

static cudaError_t func_ret(CUresult r)
{
    if (r == CUDA_ERROR_INVALID_HANDLE) return rt_ret(cudaErrorInvalidDeviceFunction);
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *func)
{
    if (!a) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    CUfunction f;
    cudaError_t e = checked_function(func, &f);
    if (e != cudaSuccess) return rt_ret(e);
    memset(a, 0, sizeof *a);
    int v = 0;
#define FATTR(field, attr) (DRV.cuFuncGetAttribute(&v, attr, f), a->field = v)
    FATTR(sharedSizeBytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
    FATTR(constSizeBytes, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
    FATTR(localSizeBytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
    FATTR(maxThreadsPerBlock, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    FATTR(numRegs, CU_FUNC_ATTRIBUTE_NUM_REGS);
    FATTR(ptxVersion, CU_FUNC_ATTRIBUTE_PTX_VERSION);
    FATTR(binaryVersion, CU_FUNC_ATTRIBUTE_BINARY_VERSION);
    FATTR(cacheModeCA, CU_FUNC_ATTRIBUTE_CACHE_MODE_CA);
    FATTR(maxDynamicSharedSizeBytes, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
    FATTR(preferredShmemCarveout, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT);
    FATTR(clusterDimMustBeSet, CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET);
    FATTR(requiredClusterWidth, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH);
    FATTR(requiredClusterHeight, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT);
    FATTR(requiredClusterDepth, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH);
    FATTR(clusterSchedulingPolicyPreference,
          CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE);
    FATTR(nonPortableClusterSizeAllowed, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED);
#undef FATTR
    return cudaSuccess;
}

/* cudaFuncAttribute values are the CUfunction_attribute values of the same names. */
RT_EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr,
                                           int value)
{
    RT_BEGIN();
    CUfunction f;
    cudaError_t e = checked_function(func, &f);
    if (e != cudaSuccess) return rt_ret(e);
    return func_ret(DRV.cuFuncSetAttribute(f, (CUfunction_attribute)attr, value));
}

RT_EXPORT cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t k, enum cudaFuncAttribute attr,
                                                      int value, int device)
{
    RT_BEGIN();
    int n = 0;
    DRV.cuDeviceGetCount(&n);
    if (device < 0 || device >= n) return rt_ret(cudaErrorInvalidDevice);
    return func_ret(DRV.cuFuncSetAttribute((CUfunction)k, (CUfunction_attribute)attr, value));
}

RT_EXPORT cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache config)
{
    RT_BEGIN();
    CUfunction f;
    cudaError_t e = checked_function(func, &f);
    if (e != cudaSuccess) return rt_ret(e);
    return func_ret(DRV.cuFuncSetCacheConfig(f, (CUfunc_cache)config));
}

RT_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n,
                                                                             const void *func,
                                                                             int block,
                                                                             size_t smem,
                                                                             unsigned int flags)
{
    RT_BEGIN();
    CUfunction f;
    cudaError_t e = checked_function(func, &f);
    if (e != cudaSuccess) return rt_ret(e);
    return func_ret(DRV.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, f, block, smem,
                                                                             flags));
}

RT_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *func,
                                                                    int block, size_t smem)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, func, block, smem, 0);
}

RT_EXPORT cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *smem, const void *func,
                                                                int nblocks, int block)
{
    RT_BEGIN();
    CUfunction f;
    cudaError_t e = checked_function(func, &f);
    if (e != cudaSuccess) return rt_ret(e);
    return func_ret(DRV.cuOccupancyAvailableDynamicSMemPerBlock(smem, f, nblocks, block));
}

/* The legacy callback form: a host function in stream order that also gets the stream and a
 * status (always cudaSuccess: work here does not fail asynchronously). */
typedef struct {
    cudaStreamCallback_t cb;
    cudaStream_t stream;
    void *user;
} stream_callback;

static void run_stream_callback(void *arg)
{
    stream_callback c = *(stream_callback *)arg;
    free(arg);
    c.cb(c.stream, cudaSuccess, c.user);
}

RT_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void *user,
                                            unsigned int flags)
{
    if (!cb || flags) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    stream_callback *c = malloc(sizeof *c);
    if (!c) return rt_ret(cudaErrorMemoryAllocation);
    *c = (stream_callback){cb, s, user};
    CUresult r = DRV.cuLaunchHostFunc((CUstream)s, run_stream_callback, c);
    if (r != CUDA_SUCCESS) free(c);
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *user)
{
    RT_BEGIN();
    RT_CALL(DRV.cuLaunchHostFunc((CUstream)s, (CUhostFn)fn, user));
}

/* ---- driver entry points ----------------------------------------------------------------- */

static cudaError_t entry_point(const char *sym, void **fn, int version, unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *status)
{
    if (!sym || !fn) return rt_ret(cudaErrorInvalidValue);
    /* The runtime is loaded, but the calling thread is not given the primary context: on an H200
     * a thread whose first call this is has no current context, and cuMemAlloc through the entry
     * point is CUDA_ERROR_INVALID_CONTEXT (tests/diff/gpu-h200/entry_ctx.out). */
    pthread_once(&rt_once, rt_load);
    if (rt_init_error != cudaSuccess) return rt_ret(rt_init_error);
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r;
    /* A versioned name ("cuMemAlloc_v2") is not found through the runtime, though the driver's
     * own cuGetProcAddress answers it (entry_ctx.out, tests/gpu/sim_parity.sh). */
    const char *v = strrchr(sym, '_');
    if (v && v[1] == 'v' && v[2] >= '0' && v[2] <= '9' &&
        strspn(v + 2, "0123456789") == strlen(v + 2)) {
        *fn = NULL;
        r = CUDA_ERROR_NOT_FOUND;
    } else {
        r = DRV.cuGetProcAddress(sym, fn, version, (cuuint64_t)flags, &st);
    }
    if (status)
        *status = st == CU_GET_PROC_ADDRESS_SUCCESS ? cudaDriverEntryPointSuccess
                  : st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                      ? cudaDriverEntryPointVersionNotSufficent
                      : cudaDriverEntryPointSymbolNotFound;
    /* Like the real runtime: a symbol that is not found is reported through the status, and
     * the call itself succeeds when a status pointer was given. */
    if (r == CUDA_ERROR_NOT_FOUND && status) return cudaSuccess;
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *sym, void **fn, unsigned long long flags,
                                              enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point(sym, fn, CUDART_VERSION, flags, status);
}

RT_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn,
                                                       unsigned int version,
                                                       unsigned long long flags,
                                                       enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point(sym, fn, (int)version, flags, status);
}

/* ---- IPC --------------------------------------------------------------------------------- */

RT_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p)
{
    if (!h) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    _Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle), "IPC handle sizes");
    RT_CALL(DRV.cuIpcGetMemHandle((CUipcMemHandle *)(void *)h, (CUdeviceptr)p));
}

RT_EXPORT cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned int flags)
{
    if (!p) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    CUipcMemHandle ch;
    memcpy(&ch, &h, sizeof ch);
    CUdeviceptr d = 0;
    CUresult r = DRV.cuIpcOpenMemHandle(&d, ch, flags);
    if (r == CUDA_SUCCESS) *p = (void *)d;
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaIpcCloseMemHandle(void *p)
{
    RT_BEGIN();
    RT_CALL(DRV.cuIpcCloseMemHandle((CUdeviceptr)p));
}

/* ---- stream capture and graphs ------------------------------------------------------------ */

RT_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    RT_BEGIN();
    RT_CALL(DRV.cuStreamBeginCapture((CUstream)s, (CUstreamCaptureMode)mode));
}

RT_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    RT_BEGIN();
    RT_CALL(DRV.cuStreamEndCapture((CUstream)s, (CUgraph *)g));
}

RT_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *st,
                                               unsigned long long *id, cudaGraph_t *g,
                                               const cudaGraphNode_t **deps,
                                               const cudaGraphEdgeData **edges, size_t *ndeps)
{
    RT_BEGIN();
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t cid = 0;
    if (!st) return rt_ret(cudaErrorInvalidValue);
    CUresult r =
        DRV.cuStreamGetCaptureInfo((CUstream)s, &cs, &cid, (CUgraph *)g, (const CUgraphNode **)deps,
                                   (const CUgraphEdgeData **)edges, ndeps);
    if (r == CUDA_SUCCESS) {
        *st = (enum cudaStreamCaptureStatus)cs;
        if (id) *id = cid;
    }
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    RT_BEGIN();
    RT_CALL(DRV.cuThreadExchangeStreamCaptureMode((CUstreamCaptureMode *)mode));
}

RT_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g,
                                           unsigned long long flags)
{
    RT_BEGIN();
    RT_CALL(DRV.cuGraphInstantiateWithFlags((CUgraphExec *)x, (CUgraph)g, flags));
}

RT_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *x, cudaGraph_t g,
                                                    unsigned long long flags)
{
    return cudaGraphInstantiate(x, g, flags);
}

RT_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s)
{
    RT_BEGIN();
    RT_CALL(DRV.cuGraphLaunch((CUgraphExec)x, (CUstream)s));
}

RT_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
    RT_BEGIN();
    RT_CALL(DRV.cuGraphExecDestroy((CUgraphExec)x));
}

RT_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    RT_BEGIN();
    RT_CALL(DRV.cuGraphDestroy((CUgraph)g));
}

RT_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *n)
{
    RT_BEGIN();
    RT_CALL(DRV.cuGraphGetNodes((CUgraph)g, (CUgraphNode *)nodes, n));
}

RT_EXPORT cudaError_t cudaGraphCreate(cudaGraph_t *g, unsigned int flags)
{
    RT_BEGIN();
    RT_CALL(DRV.cuGraphCreate((CUgraph *)g, flags));
}

/* The runtime's parameters, field by field into the driver's (the layouts are the same today,
 * but only the fields are promised). */
RT_EXPORT cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *node, cudaGraph_t g,
                                               const cudaGraphNode_t *deps, size_t ndeps,
                                               struct cudaMemAllocNodeParams *params)
{
    if (!params) return rt_ret(cudaErrorInvalidValue);
    RT_BEGIN();
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = (CUmemAllocationType)params->poolProps.allocType;
    p.poolProps.handleTypes = (CUmemAllocationHandleType)params->poolProps.handleTypes;
    p.poolProps.location.type = (CUmemLocationType)params->poolProps.location.type;
    p.poolProps.location.id = params->poolProps.location.id;
    p.poolProps.maxSize = params->poolProps.maxSize;
    p.accessDescs = (const CUmemAccessDesc *)params->accessDescs;
    p.accessDescCount = params->accessDescCount;
    p.bytesize = params->bytesize;
    CUresult r = DRV.cuGraphAddMemAllocNode((CUgraphNode *)node, (CUgraph)g,
                                            (const CUgraphNode *)deps, ndeps, &p);
    if (r == CUDA_SUCCESS) params->dptr = (void *)p.dptr;
    RT_CALL(r);
}

RT_EXPORT cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *node, cudaGraph_t g,
                                              const cudaGraphNode_t *deps, size_t ndeps,
                                              void *dptr)
{
    RT_BEGIN();
    RT_CALL(DRV.cuGraphAddMemFreeNode((CUgraphNode *)node, (CUgraph)g, (const CUgraphNode *)deps,
                                      ndeps, (CUdeviceptr)dptr));
}

RT_EXPORT cudaError_t cudaDeviceGraphMemTrim(int device)
{
    RT_BEGIN();
    RT_CALL(DRV.cuDeviceGraphMemTrim((CUdevice)device));
}

/* cudaGraphMemAttributeType values are the driver's CUgraphMem_attribute values. */
RT_EXPORT cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType a,
                                                     void *value)
{
    RT_BEGIN();
    RT_CALL(DRV.cuDeviceGetGraphMemAttribute((CUdevice)device, (CUgraphMem_attribute)a, value));
}

RT_EXPORT cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType a,
                                                     void *value)
{
    RT_BEGIN();
    RT_CALL(DRV.cuDeviceSetGraphMemAttribute((CUdevice)device, (CUgraphMem_attribute)a, value));
}

/* ---- per-thread default stream (_ptsz / _ptds) variants ----------------------------------- */
/* Programs built with --default-stream per-thread call these names; the sim has one default
 * stream model, so they are the same functions. */
#define PT_ALIAS(name, target) RT_EXPORT __typeof__(target) name __attribute__((alias(#target)));
#define RT_PT(name, base, params, args)                                                            \
    RT_EXPORT cudaError_t name params;                                                             \
    cudaError_t name params                                                                        \
    {                                                                                              \
        rt_ptds++;                                                                                 \
        cudaError_t r_ = base args;                                                                \
        rt_ptds--;                                                                                 \
        return r_;                                                                                 \
    }
RT_PT(cudaMallocAsync_ptsz, cudaMallocAsync, (void **p, size_t n, cudaStream_t s), (p, n, s))
RT_PT(cudaFreeAsync_ptsz, cudaFreeAsync, (void *p, cudaStream_t s), (p, s))
RT_PT(cudaMallocFromPoolAsync_ptsz, cudaMallocFromPoolAsync,
      (void **p, size_t n, cudaMemPool_t m, cudaStream_t s), (p, n, m, s))
RT_PT(cudaMemcpyAsync_ptsz, cudaMemcpyAsync,
      (void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t t), (d, s, n, k, t))
RT_PT(cudaMemsetAsync_ptsz, cudaMemsetAsync, (void *p, int v, size_t n, cudaStream_t s),
      (p, v, n, s))
RT_PT(cudaMemcpy_ptds, cudaMemcpy, (void *d, const void *s, size_t n, enum cudaMemcpyKind k),
      (d, s, n, k))
RT_PT(cudaMemset_ptds, cudaMemset, (void *p, int v, size_t n), (p, v, n))
RT_PT(cudaMemcpyPeer_ptds, cudaMemcpyPeer, (void *d, int dd, const void *s, int sd, size_t n),
      (d, dd, s, sd, n))
RT_PT(cudaMemcpy2D_ptds, cudaMemcpy2D,
      (void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, enum cudaMemcpyKind k),
      (d, dp, s, sp, w, h, k))
RT_PT(cudaMemcpy2DAsync_ptsz, cudaMemcpy2DAsync,
      (void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, enum cudaMemcpyKind k,
       cudaStream_t t),
      (d, dp, s, sp, w, h, k, t))
RT_PT(cudaStreamBeginCapture_ptsz, cudaStreamBeginCapture,
      (cudaStream_t s, enum cudaStreamCaptureMode m), (s, m))
RT_PT(cudaStreamEndCapture_ptsz, cudaStreamEndCapture, (cudaStream_t s, cudaGraph_t *g), (s, g))
RT_PT(cudaStreamGetCaptureInfo_ptsz, cudaStreamGetCaptureInfo,
      (cudaStream_t s, enum cudaStreamCaptureStatus *st, unsigned long long *id, cudaGraph_t *g,
       const cudaGraphNode_t **d, const cudaGraphEdgeData **e, size_t *n),
      (s, st, id, g, d, e, n))
RT_PT(cudaGraphLaunch_ptsz, cudaGraphLaunch, (cudaGraphExec_t x, cudaStream_t s), (x, s))
RT_PT(cudaMemcpyPeerAsync_ptsz, cudaMemcpyPeerAsync,
      (void *d, int dd, const void *s, int sd, size_t n, cudaStream_t t), (d, dd, s, sd, n, t))
RT_PT(cudaStreamSynchronize_ptsz, cudaStreamSynchronize, (cudaStream_t s), (s))
RT_PT(cudaStreamQuery_ptsz, cudaStreamQuery, (cudaStream_t s), (s))
RT_PT(cudaStreamWaitEvent_ptsz, cudaStreamWaitEvent, (cudaStream_t s, cudaEvent_t e, unsigned f),
      (s, e, f))
RT_PT(cudaEventRecord_ptsz, cudaEventRecord, (cudaEvent_t e, cudaStream_t s), (e, s))
RT_PT(cudaEventRecordWithFlags_ptsz, cudaEventRecordWithFlags,
      (cudaEvent_t e, cudaStream_t s, unsigned f), (e, s, f))
RT_PT(cudaLaunchKernel_ptsz, cudaLaunchKernel,
      (const void *f, dim3 g, dim3 b, void **a, size_t sh, cudaStream_t s), (f, g, b, a, sh, s))
RT_PT(cudaLaunchKernelExC_ptsz, cudaLaunchKernelExC,
      (const cudaLaunchConfig_t *c, const void *f, void **a), (c, f, a))
RT_PT(cudaLaunchCooperativeKernel_ptsz, cudaLaunchCooperativeKernel,
      (const void *f, dim3 g, dim3 b, void **a, size_t sh, cudaStream_t s), (f, g, b, a, sh, s))
RT_PT(cudaStreamAddCallback_ptsz, cudaStreamAddCallback,
      (cudaStream_t s, cudaStreamCallback_t cb, void *u, unsigned f), (s, cb, u, f))
RT_PT(cudaLaunchHostFunc_ptsz, cudaLaunchHostFunc, (cudaStream_t s, cudaHostFn_t f, void *u),
      (s, f, u))
RT_PT(cudaStreamGetFlags_ptsz, cudaStreamGetFlags, (cudaStream_t s, unsigned *f), (s, f))
RT_PT(cudaStreamGetPriority_ptsz, cudaStreamGetPriority, (cudaStream_t s, int *p), (s, p))
RT_PT(cudaStreamIsCapturing_ptsz, cudaStreamIsCapturing,
      (cudaStream_t s, enum cudaStreamCaptureStatus *c), (s, c))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
PT_ALIAS(cudaGetDriverEntryPoint_ptsz, cudaGetDriverEntryPoint)
#pragma GCC diagnostic pop
PT_ALIAS(cudaGetDriverEntryPointByVersion_ptsz, cudaGetDriverEntryPointByVersion)

/* ---- what nvcc-generated host code calls ------------------------------------------------- */
/* A program compiled by nvcc registers its fat binary and kernels at start-up. The sim cannot
 * run device code: each kernel becomes, at first use, a driver function with device code only,
 * whose launches are checked, counted per name and skipped (GPUMEM_SIM_KERNELS=strict: they
 * fail with cudaErrorInvalidDeviceFunction). The host part runs for real. Registration does no
 * driver work: a library that registers thousands of kernels loads as fast as without the sim. */
static char fatbin_oom_token;

RT_EXPORT void **__cudaRegisterFatBinary(void *fatbin)
{
    rt_module *m = rt_module_new(fatbin);
    return m ? (void **)(void *)m : (void **)(void *)&fatbin_oom_token;
}
RT_EXPORT void __cudaRegisterFatBinaryEnd(void **h)
{
    (void)h;
}
RT_EXPORT void __cudaUnregisterFatBinary(void **h)
{
    if (h && h != (void **)(void *)&fatbin_oom_token) rt_module_free((rt_module *)(void *)h);
}
RT_EXPORT void __cudaRegisterFunction(void **h, const char *host_fn, char *dev_fn,
                                      const char *dev_name, int thread_limit, void *tid, void *bid,
                                      void *bdim, void *gdim, int *wsize)
{
    (void)dev_fn;
    (void)thread_limit;
    (void)tid;
    (void)bid;
    (void)bdim;
    (void)gdim;
    (void)wsize;
    if (h && h != (void **)(void *)&fatbin_oom_token)
        rt_kernel_add((rt_module *)(void *)h, host_fn, dev_name);
}
RT_EXPORT void __cudaRegisterVar(void **h, char *host_var, char *dev_addr, const char *dev_name,
                                 int ext, size_t size, int constant, int global)
{
    (void)h;
    (void)host_var;
    (void)dev_addr;
    (void)dev_name;
    (void)ext;
    (void)size;
    (void)constant;
    (void)global;
}
RT_EXPORT void __cudaRegisterManagedVar(void **h, void **host_var, char *dev_addr,
                                        const char *dev_name, int ext, size_t size, int constant,
                                        int global)
{
    (void)h;
    (void)host_var;
    (void)dev_addr;
    (void)dev_name;
    (void)ext;
    (void)size;
    (void)constant;
    (void)global;
}
RT_EXPORT char __cudaInitModule(void **h)
{
    (void)h;
    return 0;
}
RT_EXPORT void __cudaRegisterHostVar(void **h, const char *dev_name, char *host_var, size_t size)
{
    (void)h;
    (void)dev_name;
    (void)host_var;
    (void)size;
}
RT_EXPORT void __cudaRegisterUnifiedTable(void **h, void *table)
{
    (void)h;
    (void)table;
}
/* nvcc 13's launch stubs resolve a kernel handle once (__cudaGetKernel), then launch it
 * (__cudaLaunchKernel). The handle is the driver's function for the kernel. */
RT_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *entry)
{
    if (!k) return rt_ret(cudaErrorInvalidValue);
    *k = NULL;
    return cudaGetKernel(k, entry);
}
RT_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 grid, dim3 block, void **args,
                                         size_t shmem, cudaStream_t s)
{
    RT_BEGIN();
    return launch_ret(DRV.cuLaunchKernel((CUfunction)k, grid.x, grid.y, grid.z, block.x, block.y,
                                         block.z, (unsigned)shmem, (CUstream)s, args, NULL));
}
RT_PT(__cudaLaunchKernel_ptsz, __cudaLaunchKernel,
      (cudaKernel_t k, dim3 g, dim3 b, void **a, size_t sh, cudaStream_t s), (k, g, b, a, sh, s))

RT_EXPORT struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w,
                                                             enum cudaChannelFormatKind f)
{
    struct cudaChannelFormatDesc d = {x, y, z, w, f};
    return d;
}

static __thread struct {
    dim3 grid, block;
    size_t shmem;
    void *stream;
} tls_launch_cfg;
RT_EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, void *stream)
{
    tls_launch_cfg.grid = grid;
    tls_launch_cfg.block = block;
    tls_launch_cfg.shmem = shmem;
    tls_launch_cfg.stream = stream;
    return 0;
}
RT_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem,
                                                 void *stream)
{
    if (grid) *grid = tls_launch_cfg.grid;
    if (block) *block = tls_launch_cfg.block;
    if (shmem) *shmem = tls_launch_cfg.shmem;
    if (stream) *(void **)stream = tls_launch_cfg.stream;
    return cudaSuccess;
}
