/* sim_runtime.c — the virtual GPU's CUDA runtime, in a program that links only libcudart (the
 * driver is loaded by the runtime with dlopen, as with the real runtime): allocation, copies,
 * memsets, streams, events, error codes and the last-error state, device properties, pointer
 * attributes, host and managed memory, memory pools, driver entry points, and launches of host
 * kernels. The sim-only calls are found with dlsym once the runtime has loaded the driver. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cuda.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define OK(x) assert_int_equal((x), cudaSuccess)

/* Runs first: the driver is not loaded until the runtime is used. */
static void test_driver_loaded_by_runtime_only(void **state)
{
    (void)state;
    assert_null(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD));
    OK(cudaFree(NULL)); /* initializes */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    /* ... and it is the sim's driver. */
    assert_non_null(dlsym(h, "sim_register_kernel"));
    dlclose(h);
    int v = 0;
    OK(cudaRuntimeGetVersion(&v));
    assert_int_equal(v, CUDART_VERSION);
    OK(cudaDriverGetVersion(&v));
    assert_int_equal(v, CUDA_VERSION);
}

static void test_malloc_copy_memset_free(void **state)
{
    (void)state;
    void *d = NULL;
    OK(cudaMalloc(&d, 1 << 20));
    assert_non_null(d);
    char in[256], out[256];
    for (int i = 0; i < 256; i++)
        in[i] = (char)i;
    OK(cudaMemcpy(d, in, sizeof in, cudaMemcpyHostToDevice));
    OK(cudaMemset((char *)d + 16, 0x7f, 16));
    OK(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
    assert_memory_equal(out, in, 16);
    assert_int_equal(out[16], 0x7f);
    assert_int_equal(out[31], 0x7f);
    assert_memory_equal(out + 32, in + 32, 224);
    void *d2;
    OK(cudaMalloc(&d2, 256));
    OK(cudaMemcpy(d2, d, 256, cudaMemcpyDefault));
    OK(cudaMemcpy(out, d2, 256, cudaMemcpyDefault));
    assert_int_equal(out[20], 0x7f);
    OK(cudaFree(d2));
    OK(cudaFree(d));
    void *z = (void *)1;
    OK(cudaMalloc(&z, 0)); /* size 0: success and NULL, as the real runtime */
    assert_null(z);
    assert_int_equal(cudaMemcpy(out, in, 4, (enum cudaMemcpyKind)17),
                     cudaErrorInvalidMemcpyDirection);
    (void)cudaGetLastError();
}

static void test_errors_map_and_last_error_is_sticky_until_read(void **state)
{
    (void)state;
    OK(cudaGetLastError());
    size_t fr, total;
    OK(cudaMemGetInfo(&fr, &total));
    void *d = (void *)1;
    /* Out of memory: the driver's CUDA_ERROR_OUT_OF_MEMORY is cudaErrorMemoryAllocation (2). */
    assert_int_equal(cudaMalloc(&d, total + (1 << 30)), cudaErrorMemoryAllocation);
    assert_null(d);
    assert_int_equal(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    assert_int_equal(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    assert_int_equal(cudaGetLastError(), cudaErrorMemoryAllocation);
    OK(cudaGetLastError());
    assert_string_equal(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
    assert_string_equal(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
    assert_string_equal(cudaGetErrorString(cudaErrorNotSupported), "operation not supported");
    assert_string_equal(cudaGetErrorName((cudaError_t)987654), "unrecognized error code");
    /* Other mappings. */
    int x;
    assert_int_equal(cudaFree(&x), cudaErrorInvalidValue); /* CUDA 13 on an H200 */
    assert_int_equal(cudaSetDevice(2), cudaErrorInvalidDevice);
    assert_int_equal(cudaStreamSynchronize((cudaStream_t)(void *)&x),
                     cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaHostUnregister(&x), cudaErrorHostMemoryNotRegistered);
    assert_int_equal(cudaGetLastError(), cudaErrorHostMemoryNotRegistered); /* the latest one */
    /* A runtime function the sim does not implement. */
    assert_int_equal(cudaDeviceSetLimit(cudaLimitStackSize, 1024), cudaErrorNotSupported);
    assert_int_equal(cudaGetLastError(), cudaErrorNotSupported);
}

static void test_devices_and_properties(void **state)
{
    (void)state;
    int n = 0, dev = -1;
    OK(cudaGetDeviceCount(&n));
    assert_int_equal(n, 2); /* GPUMEM_SIM_DEVICES=2 (main) */
    OK(cudaSetDevice(0));
    OK(cudaGetDevice(&dev));
    assert_int_equal(dev, 0);
    struct cudaDeviceProp p;
    OK(cudaGetDeviceProperties(&p, 0));
    assert_non_null(strstr(p.name, "virtual GPU"));
    assert_int_equal(p.major, 8);
    assert_int_equal(p.warpSize, 32);
    size_t fr, total;
    OK(cudaMemGetInfo(&fr, &total));
    assert_int_equal(p.totalGlobalMem, total);
    int v = 0;
    OK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0));
    assert_int_equal(v, p.multiProcessorCount);
    assert_int_equal(cudaGetDeviceProperties(&p, 2), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
    OK(cudaDeviceSynchronize());
}

static void test_streams_events_and_async(void **state)
{
    (void)state;
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    OK(cudaEventCreate(&a));
    OK(cudaEventCreateWithFlags(&b, cudaEventDefault));
    void *d = NULL;
    OK(cudaMallocAsync(&d, 4096, s));
    OK(cudaEventRecord(a, s));
    OK(cudaMemsetAsync(d, 3, 4096, s));
    char out[8];
    OK(cudaMemcpyAsync(out, d, sizeof out, cudaMemcpyDeviceToHost, s));
    OK(cudaEventRecord(b, s));
    OK(cudaStreamWaitEvent(NULL, b, 0));
    OK(cudaStreamSynchronize(s));
    assert_int_equal(out[7], 3);
    OK(cudaEventQuery(b));
    float ms = -1;
    OK(cudaEventElapsedTime(&ms, a, b));
    assert_true(ms >= 0);
    OK(cudaFreeAsync(d, s));
    cudaMemPool_t pool;
    OK(cudaDeviceGetDefaultMemPool(&pool, 0));
    OK(cudaMallocFromPoolAsync(&d, 1024, pool, s));
    OK(cudaFreeAsync(d, s));
    /* Delayed completion, switched on through the sim-only API the driver exports. */
    void (*set_delay)(unsigned) = (void (*)(unsigned))dlsym(RTLD_DEFAULT, "sim_set_event_delay");
    assert_non_null(set_delay);
    set_delay(1);
    OK(cudaEventRecord(a, s));
    assert_int_equal(cudaEventQuery(a), cudaErrorNotReady);
    OK(cudaEventQuery(a));
    OK(cudaEventRecord(a, s));
    assert_int_equal(cudaStreamQuery(s), cudaErrorNotReady);
    OK(cudaStreamQuery(s));
    set_delay(0);
    (void)cudaGetLastError();
    OK(cudaEventDestroy(a));
    OK(cudaEventDestroy(b));
    OK(cudaStreamDestroy(s));
}

static void test_host_managed_and_pointer_attributes(void **state)
{
    (void)state;
    void *h = NULL, *h2 = NULL, *m = NULL, *d = NULL;
    OK(cudaMallocHost(&h, 4096));
    OK(cudaHostAlloc(&h2, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    OK(cudaMallocManaged(&m, 4096, cudaMemAttachGlobal));
    OK(cudaMalloc(&d, 4096));
    ((char *)m)[10] = 5; /* managed memory is host-accessible in the sim */
    struct cudaPointerAttributes at;
    OK(cudaPointerGetAttributes(&at, d));
    assert_int_equal(at.type, cudaMemoryTypeDevice);
    assert_int_equal(at.device, 0);
    assert_ptr_equal(at.devicePointer, d);
    OK(cudaPointerGetAttributes(&at, h));
    assert_int_equal(at.type, cudaMemoryTypeHost);
    OK(cudaPointerGetAttributes(&at, m));
    assert_int_equal(at.type, cudaMemoryTypeManaged);
    int local;
    OK(cudaPointerGetAttributes(&at, &local));
    assert_int_equal(at.type, cudaMemoryTypeUnregistered);
    void *dp = NULL;
    OK(cudaHostGetDevicePointer(&dp, h2, 0));
    assert_ptr_equal(dp, h2);
    char *buf = malloc(8192);
    OK(cudaHostRegister(buf, 8192, cudaHostRegisterDefault));
    OK(cudaPointerGetAttributes(&at, buf + 10));
    assert_int_equal(at.type, cudaMemoryTypeHost);
    assert_int_equal(cudaHostRegister(buf, 8192, 0), cudaErrorHostMemoryAlreadyRegistered);
    (void)cudaGetLastError();
    OK(cudaHostUnregister(buf));
    free(buf);
    OK(cudaFreeHost(h));
    OK(cudaFreeHost(h2));
    OK(cudaFree(m));
    OK(cudaFree(d));
}

static void test_driver_entry_points(void **state)
{
    (void)state;
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
    OK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &st));
    assert_int_equal(st, cudaDriverEntryPointSuccess);
    assert_ptr_equal(fn, dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
    OK(cudaGetDriverEntryPointByVersion("cuNoSuchThing", &fn, 12000, cudaEnableDefault, &st));
    assert_int_equal(st, cudaDriverEntryPointSymbolNotFound);
    assert_null(fn);
    /* The driver function works when called through the pointer. */
    CUresult (*alloc)(CUdeviceptr *, size_t) = NULL;
    CUresult (*dfree)(CUdeviceptr) = NULL;
    OK(cudaGetDriverEntryPointByVersion("cuMemAlloc", (void **)&alloc, 12000, cudaEnableDefault,
                                        &st));
    OK(cudaGetDriverEntryPointByVersion("cuMemFree", (void **)&dfree, 12000, cudaEnableDefault,
                                        &st));
    CUdeviceptr p;
    assert_int_equal(alloc(&p, 4096), CUDA_SUCCESS);
    assert_int_equal(dfree(p), CUDA_SUCCESS);
}

typedef CUresult (*register_fn)(const char *, void (*)(void **), unsigned, const size_t *,
                                CUfunction *);

static void kernel_scale(void **p)
{
    float *x = *(float **)p[0];
    float a = *(float *)p[1];
    for (int i = 0; i < 4; i++)
        x[i] *= a;
}

static void test_launch_host_kernel_through_runtime(void **state)
{
    (void)state;
    register_fn reg = (register_fn)dlsym(RTLD_DEFAULT, "sim_register_kernel");
    assert_non_null(reg);
    size_t sizes[] = {sizeof(float *), sizeof(float)};
    CUfunction f;
    assert_int_equal(reg("scale", kernel_scale, 2, sizes, &f), CUDA_SUCCESS);
    float *d;
    OK(cudaMalloc((void **)&d, 4 * sizeof(float)));
    float h[4] = {1, 2, 3, 4};
    OK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    float a = 2.5f;
    void *args[] = {&d, &a};
    OK(cudaLaunchKernel((const void *)f, (dim3){1, 1, 1}, (dim3){4, 1, 1}, args, 0, NULL));
    OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    assert_true(h[0] == 2.5f && h[3] == 10.0f);
    int not_a_kernel;
    assert_int_equal(
        cudaLaunchKernel(&not_a_kernel, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, NULL),
        cudaErrorInvalidDeviceFunction);
    (void)cudaGetLastError();
    OK(cudaFree(d));
}

/* What nvcc-compiled code does, by hand: a fat binary registers a kernel by its host stub, and
 * the stub then names it in every launch path. The kernel has device code only: launches are
 * skipped and counted, never an error; attributes and occupancy answer; the last error stays
 * clean. */
void **__cudaRegisterFatBinary(void *fatbin);
void __cudaUnregisterFatBinary(void **h);
void __cudaRegisterFunction(void **h, const char *host_fn, char *dev_fn, const char *dev_name,
                            int thread_limit, void *tid, void *bid, void *bdim, void *gdim,
                            int *wsize);
cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *entry);
cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 grid, dim3 block, void **args, size_t shmem,
                               cudaStream_t s);
static void stub_a(void) {}
static void stub_b(void) {}
typedef uint64_t (*launches_fn)(const char *);

static void test_registered_kernels_are_skipped(void **state)
{
    (void)state;
    void **mod = __cudaRegisterFatBinary(NULL);
    char name_a[] = "_Z7kernelAv", name_b[] = "_Z7kernelBv";
    __cudaRegisterFunction(mod, (const char *)(uintptr_t)stub_a, name_a, name_a, -1, NULL, NULL,
                           NULL, NULL, NULL);
    __cudaRegisterFunction(mod, (const char *)(uintptr_t)stub_b, name_b, name_b, -1, NULL, NULL,
                           NULL, NULL, NULL);
    cudaKernel_t ka = NULL, ka2 = NULL, kb = NULL;
    OK(__cudaGetKernel(&ka, (const void *)(uintptr_t)stub_a));
    OK(__cudaGetKernel(&ka2, (const void *)(uintptr_t)stub_a));
    OK(__cudaGetKernel(&kb, (const void *)(uintptr_t)stub_b));
    assert_true(ka && kb && ka == ka2 && ka != kb); /* one distinct handle per kernel */
    dim3 g = {2, 1, 1}, b = {128, 1, 1};
    OK(__cudaLaunchKernel(ka, g, b, NULL, 0, NULL));
    OK(cudaLaunchKernel((const void *)(uintptr_t)stub_a, g, b, NULL, 0, NULL));
    cudaLaunchConfig_t cfg = {.gridDim = g, .blockDim = b};
    OK(cudaLaunchKernelExC(&cfg, (const void *)(uintptr_t)stub_b, NULL));
    OK(cudaPeekAtLastError());
    launches_fn launches = (launches_fn)dlsym(RTLD_DEFAULT, "sim_skipped_launches");
    assert_non_null(launches);
    assert_int_equal(launches("_Z7kernelAv"), 2);
    assert_int_equal(launches("_Z7kernelBv"), 1);
    const char *name = NULL;
    OK(cudaFuncGetName(&name, (const void *)(uintptr_t)stub_b));
    assert_string_equal(name, "_Z7kernelBv");
    struct cudaFuncAttributes fa;
    OK(cudaFuncGetAttributes(&fa, (const void *)(uintptr_t)stub_a));
    assert_int_equal(fa.maxThreadsPerBlock, 1024);
    assert_int_equal(fa.numRegs, 32);
    assert_int_equal(fa.maxDynamicSharedSizeBytes, 48 * 1024);
    OK(cudaFuncSetAttribute((const void *)(uintptr_t)stub_a,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
    OK(cudaFuncGetAttributes(&fa, (const void *)(uintptr_t)stub_a));
    assert_int_equal(fa.maxDynamicSharedSizeBytes, 96 * 1024);
    int n = 0;
    OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, (const void *)(uintptr_t)stub_a, 256, 0));
    assert_int_equal(n, 8);
    cudaFunction_t f;
    OK(cudaGetFuncBySymbol(&f, (const void *)(uintptr_t)stub_a));
    assert_ptr_equal(f, ka);
    /* an invalid configuration is still refused, and becomes the last error */
    dim3 zero = {0, 1, 1};
    assert_int_equal(cudaLaunchKernel((const void *)(uintptr_t)stub_a, zero, b, NULL, 0, NULL),
                     cudaErrorInvalidConfiguration);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidConfiguration);
    __cudaUnregisterFatBinary(mod);
    assert_int_equal(cudaLaunchKernel((const void *)(uintptr_t)stub_a, g, b, NULL, 0, NULL),
                     cudaErrorInvalidDeviceFunction); /* forgotten with its module */
    (void)cudaGetLastError();
}

static int callback_calls;
static void CUDART_CB on_stream(cudaStream_t s, cudaError_t status, void *user)
{
    (void)s;
    if (status == cudaSuccess && user == &callback_calls) callback_calls++;
}

/* The runtime calls PyTorch makes besides launches: stream callbacks, PCI bus ids, the profiler
 * switches, pool access. */
static void test_more_runtime_calls(void **state)
{
    (void)state;
    cudaStream_t s;
    OK(cudaStreamCreate(&s));
    OK(cudaStreamAddCallback(s, on_stream, &callback_calls, 0));
    OK(cudaStreamSynchronize(s));
    assert_int_equal(callback_calls, 1);
    assert_int_equal(cudaStreamAddCallback(s, on_stream, NULL, 1), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    OK(cudaStreamDestroy(s));
    char id[32];
    OK(cudaDeviceGetPCIBusId(id, sizeof id, 0));
    assert_string_equal(id, "0000:00:00.0");
    int bus = -1;
    OK(cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, 0));
    assert_int_equal(bus, 0);
    OK(cudaProfilerStart());
    OK(cudaProfilerStop());
    cudaMemPool_t pool;
    OK(cudaDeviceGetDefaultMemPool(&pool, 0));
    struct cudaMemAccessDesc d = {.location = {.type = cudaMemLocationTypeDevice, .id = 0},
                                  .flags = cudaMemAccessFlagsProtReadWrite};
    OK(cudaMemPoolSetAccess(pool, &d, 1));
    d.location.id = 99;
    assert_int_equal(cudaMemPoolSetAccess(pool, &d, 1), cudaErrorInvalidValue);
    (void)cudaGetLastError();
}

/* Several threads use the runtime at once; each one's last error is its own. */
static void *runtime_worker(void *arg)
{
    intptr_t id = (intptr_t)arg;
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess) return (void *)1;
    for (int i = 0; i < 200; i++) {
        int v[16], back[16];
        for (int k = 0; k < 16; k++)
            v[k] = (int)id * 1000 + i + k;
        void *d;
        if (cudaMallocAsync(&d, sizeof v, s) != cudaSuccess) return (void *)2;
        if (cudaMemcpyAsync(d, v, sizeof v, cudaMemcpyHostToDevice, s) != cudaSuccess)
            return (void *)3;
        if (cudaMemcpyAsync(back, d, sizeof v, cudaMemcpyDeviceToHost, s) != cudaSuccess)
            return (void *)4;
        if (cudaStreamSynchronize(s) != cudaSuccess) return (void *)5;
        if (memcmp(v, back, sizeof v)) return (void *)6;
        if (cudaFreeAsync(d, s) != cudaSuccess) return (void *)7;
    }
    if (id == 0) {
        int x;
        (void)cudaFree(&x); /* an error on this thread only */
        if (cudaGetLastError() != cudaErrorInvalidValue) return (void *)8;
    } else if (cudaPeekAtLastError() != cudaSuccess) {
        return (void *)9;
    }
    cudaStreamDestroy(s);
    return NULL;
}

static void test_threads_use_the_runtime_concurrently(void **state)
{
    (void)state;
    pthread_t th[4];
    for (intptr_t i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, runtime_worker, (void *)i), 0);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        assert_null(r);
    }
}

/* Two devices: each has its own context and accounting; peer copies and plain copies across
 * devices (unified addressing) move the bytes; a copy direction that contradicts the pointers
 * fails as on the real runtime, cudaMemcpyDefault infers it. */
static void test_two_devices_peer_copies_and_copy_kinds(void **state)
{
    (void)state;
    int can = 0, dev = -1;
    OK(cudaDeviceCanAccessPeer(&can, 0, 1));
    assert_int_equal(can, 1);
    OK(cudaDeviceCanAccessPeer(&can, 0, 0));
    assert_int_equal(can, 0);
    assert_int_equal(cudaSetDevice(2), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
    size_t free0a, tot, free1a, free0b, free1b;
    OK(cudaSetDevice(0));
    OK(cudaMemGetInfo(&free0a, &tot));
    void *d0, *d1;
    OK(cudaMalloc(&d0, 1 << 20));
    OK(cudaSetDevice(1));
    OK(cudaGetDevice(&dev));
    assert_int_equal(dev, 1);
    OK(cudaMemGetInfo(&free1a, &tot));
    OK(cudaMalloc(&d1, 1 << 20));
    OK(cudaMemGetInfo(&free1b, &tot));
    assert_int_equal(free1a - free1b, 2 << 20); /* charged to device 1 only (a 2 MiB page) */
    OK(cudaSetDevice(0));
    OK(cudaMemGetInfo(&free0b, &tot));
    assert_int_equal(free0a - free0b, 2 << 20);
    struct cudaPointerAttributes pa;
    OK(cudaPointerGetAttributes(&pa, d1));
    assert_int_equal(pa.device, 1);
    OK(cudaDeviceEnablePeerAccess(1, 0));
    assert_int_equal(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    (void)cudaGetLastError();
    /* A stream on each device; peer copies both ways. */
    cudaStream_t s0, s1;
    OK(cudaStreamCreate(&s0));
    OK(cudaSetDevice(1));
    OK(cudaStreamCreate(&s1));
    OK(cudaMemset(d1, 0x5a, 1 << 20));
    OK(cudaMemcpyPeerAsync(d0, 0, d1, 1, 1 << 20, s1));
    OK(cudaStreamSynchronize(s1));
    unsigned char h[16];
    OK(cudaMemcpy(h, d0, sizeof h, cudaMemcpyDeviceToHost)); /* device 0 memory, device 1 current */
    assert_int_equal(h[0], 0x5a);
    assert_int_equal(h[15], 0x5a);
    OK(cudaSetDevice(0));
    OK(cudaMemsetAsync(d0, 0x11, 4096, s0));
    OK(cudaStreamSynchronize(s0));
    OK(cudaMemcpyPeer(d1, 1, d0, 0, 4096));
    OK(cudaMemcpy(h, d1, sizeof h, cudaMemcpyDefault));
    assert_int_equal(h[3], 0x11);
    assert_int_equal(cudaMemcpyPeer(d1, 5, d0, 0, 16), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
    /* Copy kinds are checked against the pointers. */
    assert_int_equal(cudaMemcpy(h, d0, sizeof h, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    assert_int_equal(cudaMemcpy(d0, h, sizeof h, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    assert_int_equal(cudaMemcpy(d0, h, sizeof h, cudaMemcpyHostToHost), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    assert_int_equal(cudaMemcpy(d0, h, sizeof h, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    unsigned char h2[16];
    OK(cudaMemcpy(h2, h, sizeof h, cudaMemcpyHostToHost));
    OK(cudaMemcpy(d0, h, sizeof h, cudaMemcpyDefault));
    OK(cudaMemcpy(h2, d0, sizeof h, cudaMemcpyDefault));
    assert_memory_equal(h, h2, sizeof h);
    OK(cudaStreamDestroy(s0));
    OK(cudaStreamDestroy(s1));
    OK(cudaFree(d0));
    OK(cudaFree(d1));
    OK(cudaDeviceDisablePeerAccess(1));
}

/* Stream capture through the runtime: captured work runs only when the graph is launched. */
static void test_runtime_capture_and_graph_launch(void **state)
{
    (void)state;
    OK(cudaSetDevice(0));
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned char *d, h[64];
    OK(cudaMalloc((void **)&d, 64));
    OK(cudaMemset(d, 0, 64));
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    enum cudaStreamCaptureStatus cs;
    unsigned long long id = 0;
    OK(cudaStreamGetCaptureInfo(s, &cs, &id, NULL, NULL, NULL, NULL));
    assert_int_equal(cs, cudaStreamCaptureStatusActive);
    OK(cudaMemsetAsync(d, 7, 64, s));
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    (void)cudaGetLastError();
    cudaGraph_t g;
    assert_int_equal(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    (void)cudaGetLastError();
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    OK(cudaMemsetAsync(d, 7, 64, s));
    OK(cudaStreamEndCapture(s, &g));
    OK(cudaMemcpy(h, d, 64, cudaMemcpyDeviceToHost));
    assert_int_equal(h[0], 0); /* not run by the capture */
    cudaGraphExec_t x;
    OK(cudaGraphInstantiate(&x, g, 0));
    for (int i = 0; i < 3; i++) {
        OK(cudaMemset(d, 0, 64));
        OK(cudaGraphLaunch(x, s));
        OK(cudaStreamSynchronize(s));
        OK(cudaMemcpy(h, d, 64, cudaMemcpyDeviceToHost));
        assert_int_equal(h[63], 7);
    }
    OK(cudaGraphExecDestroy(x));
    OK(cudaGraphDestroy(g));
    OK(cudaFree(d));
    OK(cudaStreamDestroy(s));
}

/* Pitched and 3D allocations: the pitch is the width rounded up to the texture alignment and
 * meets the pitch-alignment attribute; 2D copies respect both pitches. */
static void test_pitched_and_3d_allocations(void **state)
{
    (void)state;
    OK(cudaSetDevice(0));
    int talign = 0, palign = 0;
    OK(cudaDeviceGetAttribute(&talign, cudaDevAttrTextureAlignment, 0));
    OK(cudaDeviceGetAttribute(&palign, cudaDevAttrTexturePitchAlignment, 0));
    assert_true(palign > 0 && talign % palign == 0);
    size_t fr0, fr1, tot, pitch = 0;
    OK(cudaMemGetInfo(&fr0, &tot));
    unsigned char *d;
    OK(cudaMallocPitch((void **)&d, &pitch, 100, 10));
    assert_int_equal(pitch, (size_t)talign); /* 100 rounded up to 512 */
    assert_int_equal(pitch % (size_t)palign, 0);
    OK(cudaMemGetInfo(&fr1, &tot));
    assert_int_equal(fr0 - fr1, 2 << 20); /* pitch * 10 bytes, in a whole 2 MiB page */
    unsigned char h[10][100], back[10][100];
    for (int r = 0; r < 10; r++)
        for (int c = 0; c < 100; c++)
            h[r][c] = (unsigned char)(r * 7 + c);
    OK(cudaMemcpy2D(d, pitch, h, 100, 100, 10, cudaMemcpyHostToDevice));
    unsigned char row3[4];
    OK(cudaMemcpy(row3, d + 3 * pitch, 4, cudaMemcpyDeviceToHost));
    assert_int_equal(row3[2], 3 * 7 + 2); /* row 3 starts one pitch in */
    memset(back, 0, sizeof back);
    OK(cudaMemcpy2D(back, 100, d, pitch, 100, 10, cudaMemcpyDeviceToHost));
    assert_memory_equal(h, back, sizeof h);
    assert_int_equal(cudaMemcpy2D(back, 50, d, pitch, 100, 10, cudaMemcpyDeviceToHost),
                     cudaErrorInvalidPitchValue);
    (void)cudaGetLastError();
    assert_int_equal(cudaMemcpy2D(d, pitch, h, 100, 100, 10, cudaMemcpyDeviceToHost),
                     cudaErrorInvalidValue); /* the direction contradicts the pointers */
    (void)cudaGetLastError();
    OK(cudaFree(d));
    struct cudaPitchedPtr pp;
    struct cudaExtent ext = {.width = 600, .height = 4, .depth = 3};
    OK(cudaMalloc3D(&pp, ext));
    assert_int_equal(pp.pitch, 1024);
    assert_int_equal(pp.xsize, 600);
    assert_int_equal(pp.ysize, 4);
    OK(cudaMemGetInfo(&fr1, &tot));
    assert_int_equal(fr0 - fr1, 2 << 20); /* 1024 * 4 * 3 bytes in a 2 MiB page */
    OK(cudaMemset(pp.ptr, 1, 1024 * 12));
    OK(cudaFree(pp.ptr));
    assert_int_equal(cudaMallocPitch((void **)&d, &pitch, 0, 10), cudaErrorInvalidValue);
    (void)cudaGetLastError();
}

/* cudaIpc*: a forked child opens the parent's cudaMalloc memory and writes into it. */
static void test_runtime_ipc(void **state)
{
    (void)state;
    OK(cudaSetDevice(0));
    unsigned char *d;
    OK(cudaMalloc((void **)&d, 4096));
    OK(cudaMemset(d, 3, 4096));
    cudaIpcMemHandle_t h;
    OK(cudaIpcGetMemHandle(&h, d));
    pid_t pid = fork();
    if (pid == 0) {
        void *p;
        unsigned char c = 0;
        if (cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess)) _exit(2);
        if (cudaMemcpy(&c, p, 1, cudaMemcpyDeviceToHost) || c != 3) _exit(3);
        if (cudaMemset(p, 9, 16) || cudaIpcCloseMemHandle(p)) _exit(4);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    unsigned char c = 0;
    OK(cudaMemcpy(&c, d, 1, cudaMemcpyDeviceToHost));
    assert_int_equal(c, 9);
    OK(cudaFree(d));
}

/* The runtime's _ptsz/_ptds names (what --default-stream per-thread code calls): stream 0 is the
 * calling thread's per-thread default stream, which, unlike the legacy stream, can be captured. */
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode m);
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaMemsetAsync_ptsz(void *p, int v, size_t n, cudaStream_t s);
cudaError_t cudaMemset_ptds(void *p, int v, size_t n);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s);

static void test_runtime_per_thread_default_stream(void **state)
{
    (void)state;
    OK(cudaSetDevice(0));
    unsigned char *d, h = 0;
    OK(cudaMalloc((void **)&d, 64));
    assert_int_equal(cudaStreamBeginCapture(0, cudaStreamCaptureModeRelaxed),
                     cudaErrorInvalidValue); /* the legacy stream */
    (void)cudaGetLastError();
    OK(cudaStreamBeginCapture_ptsz(0, cudaStreamCaptureModeRelaxed));
    enum cudaStreamCaptureStatus cs;
    OK(cudaStreamIsCapturing(cudaStreamPerThread, &cs));
    assert_int_equal(cs, cudaStreamCaptureStatusActive);
    OK(cudaStreamIsCapturing(0, &cs));
    assert_int_equal(cs, cudaStreamCaptureStatusNone);
    OK(cudaMemsetAsync_ptsz(d, 4, 64, 0)); /* captured, not run */
    cudaGraph_t g;
    OK(cudaStreamEndCapture_ptsz(0, &g));
    OK(cudaMemset_ptds(d, 1, 64));
    OK(cudaStreamSynchronize_ptsz(0));
    OK(cudaMemcpy(&h, d, 1, cudaMemcpyDeviceToHost));
    assert_int_equal(h, 1);
    cudaGraphExec_t x;
    OK(cudaGraphInstantiate(&x, g, 0));
    OK(cudaGraphLaunch(x, cudaStreamPerThread));
    OK(cudaStreamSynchronize(cudaStreamPerThread));
    OK(cudaMemcpy(&h, d, 1, cudaMemcpyDeviceToHost));
    assert_int_equal(h, 4);
    OK(cudaGraphExecDestroy(x));
    OK(cudaGraphDestroy(g));
    OK(cudaFree(d));
}

int main(void)
{
    setenv("GPUMEM_SIM_DEVICES", "2", 1);
    unsetenv("GPUMEM_SIM_BACKING");
    unsetenv("GPUMEM_SIM_FAULTS");
    unsetenv("GPUMEM_SIM_EVENT_DELAY");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_driver_loaded_by_runtime_only),
        cmocka_unit_test(test_malloc_copy_memset_free),
        cmocka_unit_test(test_errors_map_and_last_error_is_sticky_until_read),
        cmocka_unit_test(test_devices_and_properties),
        cmocka_unit_test(test_streams_events_and_async),
        cmocka_unit_test(test_host_managed_and_pointer_attributes),
        cmocka_unit_test(test_driver_entry_points),
        cmocka_unit_test(test_launch_host_kernel_through_runtime),
        cmocka_unit_test(test_registered_kernels_are_skipped),
        cmocka_unit_test(test_more_runtime_calls),
        cmocka_unit_test(test_threads_use_the_runtime_concurrently),
        cmocka_unit_test(test_two_devices_peer_copies_and_copy_kinds),
        cmocka_unit_test(test_runtime_capture_and_graph_launch),
        cmocka_unit_test(test_pitched_and_3d_allocations),
        cmocka_unit_test(test_runtime_ipc),
        cmocka_unit_test(test_runtime_per_thread_default_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
