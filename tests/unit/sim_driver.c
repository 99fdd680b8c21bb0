/* sim_driver.c — the virtual GPU's driver API: initialization, device and context queries,
 * cuGetProcAddress, error strings, cuMemAlloc family, host memory, pointer queries, copies,
 * memsets, streams, events (with delayed completion), host kernels, not-supported reporting and
 * the cost counters. Links build/sim/libcuda.so directly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/sim.h"

#define OK(x) assert_int_equal((x), CUDA_SUCCESS)

/* Runs first, before anything initialized the driver. */
static void test_calls_before_cuInit_fail_not_initialized(void **state)
{
    (void)state;
    CUdeviceptr p;
    int n;
    assert_int_equal(cuMemAlloc(&p, 4096), CUDA_ERROR_NOT_INITIALIZED);
    assert_int_equal(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    int v = 0;
    OK(cuDriverGetVersion(&v)); /* allowed before cuInit, as on the real driver */
    assert_int_equal(v, CUDA_VERSION);
    assert_int_equal(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    OK(cuInit(0));
    /* Memory calls need a current context, as on the real driver. */
    assert_int_equal(cuMemAlloc(&p, 4096), CUDA_ERROR_INVALID_CONTEXT);
    size_t fr, tot;
    assert_int_equal(cuMemGetInfo(&fr, &tot), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuMemsetD8(p, 0, 1), CUDA_ERROR_INVALID_CONTEXT);
}

static void test_device_queries(void **state)
{
    (void)state;
    int n = 0;
    OK(cuDeviceGetCount(&n));
    assert_int_equal(n, 1);
    CUdevice d = -1;
    OK(cuDeviceGet(&d, 0));
    assert_int_equal(d, 0);
    assert_int_equal(cuDeviceGet(&d, 1), CUDA_ERROR_INVALID_DEVICE);
    char name[128];
    OK(cuDeviceGetName(name, sizeof name, 0));
    assert_non_null(strstr(name, "virtual GPU"));
    size_t total = 0, fr = 0, tot2 = 0;
    OK(cuDeviceTotalMem(&total, 0));
    CUcontext ctx;
    OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    OK(cuCtxSetCurrent(ctx));
    OK(cuMemGetInfo(&fr, &tot2));
    OK(cuCtxSetCurrent(NULL));
    OK(cuDevicePrimaryCtxRelease(0));
    assert_int_equal(total, tot2);
    assert_true(fr <= total);
    int v;
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
    assert_int_equal(v, 8);
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0));
    assert_int_equal(v, 32);
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    assert_int_equal(v, 1);
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0));
    assert_int_equal(v, 1);
    assert_int_equal(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 3),
                     CUDA_ERROR_INVALID_DEVICE);
}

static void test_primary_context(void **state)
{
    (void)state;
    CUcontext c = NULL, cur = (CUcontext)1;
    OK(cuCtxGetCurrent(&cur));
    assert_null(cur); /* nothing made a context current on this thread yet */
    OK(cuDevicePrimaryCtxRetain(&c, 0));
    assert_non_null(c);
    CUcontext c2 = NULL;
    OK(cuDevicePrimaryCtxRetain(&c2, 0));
    assert_ptr_equal(c, c2); /* one primary context per device */
    OK(cuCtxSetCurrent(c));
    OK(cuCtxGetCurrent(&cur));
    assert_ptr_equal(cur, c);
    CUdevice d = -1;
    OK(cuCtxGetDevice(&d));
    assert_int_equal(d, 0);
    OK(cuCtxSynchronize());
    unsigned flags;
    int active;
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    assert_int_equal(active, 1);
    assert_int_equal(cuCtxSetCurrent((CUcontext)&d), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuDevicePrimaryCtxRelease(0));
    OK(cuDevicePrimaryCtxRelease(0));
    OK(cuDevicePrimaryCtxRetain(&c, 0)); /* keep one reference for the rest of the tests */
}

static void *sym(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}

static void test_get_proc_address_answers_base_names(void **state)
{
    (void)state;
    /* name asked, symbol expected */
    static const char *pairs[][2] = {
        {"cuMemAlloc", "cuMemAlloc_v2"},
        {"cuMemFree", "cuMemFree_v2"},
        {"cuMemGetInfo", "cuMemGetInfo_v2"},
        {"cuMemGetAddressRange", "cuMemGetAddressRange_v2"},
        {"cuMemAllocAsync", "cuMemAllocAsync"},
        {"cuMemFreeAsync", "cuMemFreeAsync"},
        {"cuMemCreate", "cuMemCreate"},
        {"cuMemMap", "cuMemMap"},
        {"cuMemUnmap", "cuMemUnmap"},
        {"cuMemRelease", "cuMemRelease"},
        {"cuMemSetAccess", "cuMemSetAccess"},
        {"cuMemAddressReserve", "cuMemAddressReserve"},
        {"cuMemAddressFree", "cuMemAddressFree"},
        {"cuMemGetAllocationGranularity", "cuMemGetAllocationGranularity"},
        {"cuMemHostAlloc", "cuMemHostAlloc"},
        {"cuMemAllocHost", "cuMemAllocHost_v2"},
        {"cuMemHostRegister", "cuMemHostRegister_v2"},
        {"cuMemHostUnregister", "cuMemHostUnregister"},
        {"cuMemcpyHtoD", "cuMemcpyHtoD_v2"},
        {"cuMemsetD8", "cuMemsetD8_v2"},
        {"cuStreamCreate", "cuStreamCreate"},
        {"cuStreamDestroy", "cuStreamDestroy_v2"},
        {"cuEventDestroy", "cuEventDestroy_v2"},
        {"cuEventElapsedTime", "cuEventElapsedTime_v2"},
        {"cuLaunchKernel", "cuLaunchKernel"},
        {"cuFuncGetParamInfo", "cuFuncGetParamInfo"},
        {"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2"},
        {"cuDeviceTotalMem", "cuDeviceTotalMem_v2"},
        {"cuPointerGetAttribute", "cuPointerGetAttribute"},
        {"cuCtxSynchronize", "cuCtxSynchronize_v2"},
        {"cuInit", "cuInit"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        OK(cuGetProcAddress(pairs[i][0], &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st));
        assert_int_equal(st, CU_GET_PROC_ADDRESS_SUCCESS);
        void *want = sym(pairs[i][1]);
        assert_non_null(want);
        if (fn != want) fail_msg("cuGetProcAddress(%s) is not %s", pairs[i][0], pairs[i][1]);
    }
    /* (a versioned name is answered too: below, with the versions) */
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    assert_int_equal(cuGetProcAddress("cuNoSuchFunction", &fn, CUDA_VERSION, 0, &st),
                     CUDA_ERROR_NOT_FOUND);
    /* cuGetProcAddress itself: the 12.0 version has the status argument. */
    OK(cuGetProcAddress("cuGetProcAddress", &fn, 12000, 0, &st));
    assert_ptr_equal(fn, sym("cuGetProcAddress_v2"));
    OK(cuGetProcAddress("cuGetProcAddress", &fn, 11030, 0, &st));
    assert_ptr_equal(fn, sym("cuGetProcAddress"));
    /* Versions: the newest variant introduced at or before the requested version. */
    OK(cuGetProcAddress("cuCtxSynchronize", &fn, 12000, 0, &st));
    assert_ptr_equal(fn, sym("cuCtxSynchronize"));
    OK(cuGetProcAddress("cuEventElapsedTime", &fn, 12000, 0, &st));
    assert_ptr_equal(fn, sym("cuEventElapsedTime"));
    /* too old a version: success, no function, and the status says so (the real driver) */
    fn = (void *)1;
    OK(cuGetProcAddress("cuMemCreate", &fn, 10000, 0, &st));
    assert_null(fn);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    /* a versioned name is that variant (the real driver) */
    OK(cuGetProcAddress("cuMemAlloc_v2", &fn, 13000, 0, &st));
    assert_ptr_equal(fn, sym("cuMemAlloc_v2"));
    assert_int_equal(st, CU_GET_PROC_ADDRESS_SUCCESS);
    assert_int_equal(cuGetProcAddress("cuMemAlloc_v9", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    /* The per-thread-default-stream flag answers the _ptsz/_ptds variant where there is one. */
    OK(cuGetProcAddress("cuMemcpyAsync", &fn, CUDA_VERSION,
                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    assert_ptr_equal(fn, sym("cuMemcpyAsync_ptsz"));
    OK(cuGetProcAddress("cuMemcpyHtoD", &fn, CUDA_VERSION,
                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    assert_ptr_equal(fn, sym("cuMemcpyHtoD_v2_ptds"));
    OK(cuGetProcAddress("cuMemAlloc", &fn, CUDA_VERSION,
                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    assert_ptr_equal(fn, sym("cuMemAlloc_v2")); /* no stream, no variant */
    assert_int_equal(cuGetProcAddress("cuInit", &fn, CUDA_VERSION, 0x100, &st),
                     CUDA_ERROR_INVALID_VALUE);
    /* The per-thread default-stream symbols exist; they are their own functions (NULL is the
     * per-thread stream there: tests/unit/sim_async). */
    static const char *pt[][2] = {{"cuMemcpyAsync_ptsz", "cuMemcpyAsync"},
                                  {"cuMemcpy_ptds", "cuMemcpy"},
                                  {"cuLaunchKernel_ptsz", "cuLaunchKernel"},
                                  {"cuMemAllocAsync_ptsz", "cuMemAllocAsync"},
                                  {"cuStreamSynchronize_ptsz", "cuStreamSynchronize"},
                                  {"cuEventRecord_ptsz", "cuEventRecord"}};
    for (size_t i = 0; i < sizeof pt / sizeof pt[0]; i++) {
        assert_non_null(sym(pt[i][0]));
        assert_ptr_not_equal(sym(pt[i][0]), sym(pt[i][1]));
    }
    assert_non_null(sym("cuStreamAddCallback_ptsz")); /* unimplemented ones exist too */
}

/* Captures what fn writes to stderr. */
static char *capture_stderr(void (*fn)(void *), void *arg)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    off_t len = lseek(fileno(tmp), 0, SEEK_END);
    assert_true(len >= 0);
    char *buf = calloc(1, (size_t)len + 1);
    assert_int_equal(pread(fileno(tmp), buf, (size_t)len, 0), len);
    fclose(tmp);
    return buf;
}

static void call_unsupported_twice(void *arg)
{
    CUresult (*fn)(void) = (CUresult(*)(void))arg;
    assert_int_equal(fn(), CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(fn(), CUDA_ERROR_NOT_SUPPORTED);
}

static void test_unimplemented_functions_say_so_once(void **state)
{
    (void)state;
    /* cuArrayCreate is a real driver function the sim does not implement: reachable by name and
     * by symbol, returns NOT_SUPPORTED, and says so on stderr the first time only. */
    void *fn = NULL;
    OK(cuGetProcAddress("cuArrayCreate", &fn, CUDA_VERSION, 0, NULL));
    assert_ptr_equal(fn, sym("cuArrayCreate_v2"));
    char *out = capture_stderr(call_unsupported_twice, fn);
    assert_non_null(strstr(out, "cuArrayCreate_v2 is not implemented"));
    assert_null(strstr(strstr(out, "cuArrayCreate_v2") + 1, "cuArrayCreate_v2")); /* once */
    free(out);
    const void *table = (void *)1;
    CUuuid id = {{0}};
    assert_int_equal(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
    assert_null(table);
}

static void test_error_strings(void **state)
{
    (void)state;
    const char *s = NULL;
    OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    assert_string_equal(s, "CUDA_ERROR_OUT_OF_MEMORY");
    OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    assert_string_equal(s, "out of memory");
    OK(cuGetErrorName(CUDA_ERROR_NOT_SUPPORTED, &s));
    assert_string_equal(s, "CUDA_ERROR_NOT_SUPPORTED");
    OK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
    assert_string_equal(s, "invalid argument");
    OK(cuGetErrorName(CUDA_ERROR_STUB_LIBRARY, &s)); /* every code in cuda.h has its name */
    assert_string_equal(s, "CUDA_ERROR_STUB_LIBRARY");
    assert_int_equal(cuGetErrorName((CUresult)123456, &s), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuGetErrorString((CUresult)123456, &s), CUDA_ERROR_INVALID_VALUE);
}

static void test_mem_alloc_free_and_info(void **state)
{
    (void)state;
    size_t free0, free1, free2, total;
    OK(cuMemGetInfo(&free0, &total));
    CUdeviceptr p = 0;
    OK(cuMemAlloc(&p, 1000000));
    assert_true(p % 256 == 0);
    OK(cuMemGetInfo(&free1, &total));
    assert_int_equal(free0 - free1, 2 << 20); /* charged: whole 2 MiB pages, as on an H200 */
    CUdeviceptr base;
    size_t size;
    OK(cuMemGetAddressRange(&base, &size, p + 1234));
    assert_int_equal(base, p);
    assert_int_equal(size, 1000000);
    assert_int_equal(cuMemFree(p + 16), CUDA_ERROR_INVALID_VALUE); /* interior pointer */
    OK(cuMemFree(p));
    assert_int_equal(cuMemFree(p), CUDA_ERROR_INVALID_VALUE); /* double free */
    OK(cuMemGetInfo(&free2, &total));
    assert_int_equal(free2, free0);
    assert_int_equal(cuMemGetAddressRange(&base, &size, p), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(0)); /* freeing NULL is a no-op */
}

static void test_mem_alloc_async_and_pool(void **state)
{
    (void)state;
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p = 0, q = 0;
    OK(cuMemAllocAsync(&p, 4096, s));
    CUmemoryPool pool = NULL, pool2 = NULL;
    OK(cuDeviceGetDefaultMemPool(&pool, 0));
    OK(cuDeviceGetMemPool(&pool2, 0));
    assert_ptr_equal(pool, pool2);
    OK(cuMemAllocFromPoolAsync(&q, 8192, pool, s));
    CUmemoryPool owner = NULL;
    OK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
    assert_ptr_equal(owner, pool);
    cuuint64_t used = 0;
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    assert_int_equal(used, 4096 + 8192);
    OK(cuMemFreeAsync(p, s));
    OK(cuMemFreeAsync(q, CU_STREAM_LEGACY));
    assert_int_equal(cuMemAllocAsync(&p, 4096, (CUstream)(void *)&used), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuMemAllocFromPoolAsync(&p, 4096, (CUmemoryPool)(void *)&used, s),
                     CUDA_ERROR_INVALID_VALUE);
    OK(cuStreamDestroy(s));
}

static void test_pointer_attributes(void **state)
{
    (void)state;
    CUdeviceptr d;
    void *h;
    OK(cuMemAlloc(&d, 1 << 20));
    OK(cuMemHostAlloc(&h, 1 << 16, CU_MEMHOSTALLOC_DEVICEMAP));
    unsigned type = 0;
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 100));
    assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)h));
    assert_int_equal(type, CU_MEMORYTYPE_HOST);
    CUdeviceptr start;
    size_t rsize;
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 100));
    assert_int_equal(start, d);
    OK(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 100));
    assert_int_equal(rsize, 1 << 20);
    int ordinal = -1;
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
    assert_int_equal(ordinal, 0);
    int stack_var;
    assert_int_equal(
        cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)&stack_var),
        CUDA_ERROR_INVALID_VALUE);
    /* The plural form answers for unknown memory with zeros instead of failing. */
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    CU_POINTER_ATTRIBUTE_IS_MANAGED};
    int managed = 7;
    type = 7;
    void *data[2] = {&type, &managed};
    OK(cuPointerGetAttributes(2, attrs, data, (CUdeviceptr)&stack_var));
    assert_int_equal(type, 0);
    assert_int_equal(managed, 0);
    CUdeviceptr m;
    OK(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
    OK(cuPointerGetAttributes(2, attrs, data, m));
    assert_int_equal(managed, 1);
    *(int *)m = 42; /* managed memory is host-accessible */
    OK(cuMemFree(m));
    CUdeviceptr hd;
    OK(cuMemHostGetDevicePointer(&hd, h, 0));
    assert_int_equal(hd, (CUdeviceptr)h);
    OK(cuMemFreeHost(h));
    OK(cuMemFree(d));
}

static void test_host_memory_and_registration(void **state)
{
    (void)state;
    void *h = NULL;
    OK(cuMemAllocHost(&h, 12345));
    memset(h, 0xab, 12345); /* pinned host memory is ordinary host memory */
    OK(cuMemFreeHost(h));
    assert_int_equal(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);

    size_t n0 = sim_host_registered_count();
    char *buf = malloc(1 << 16);
    OK(cuMemHostRegister(buf, 1 << 16, CU_MEMHOSTREGISTER_PORTABLE));
    assert_int_equal(sim_host_registered_count(), n0 + 1);
    void *base = NULL;
    size_t size = 0;
    assert_true(sim_host_registered_find(buf + 100, &base, &size));
    assert_ptr_equal(base, buf);
    assert_int_equal(size, 1 << 16);
    assert_false(sim_host_registered_find(buf + (1 << 16), NULL, NULL));
    assert_int_equal(cuMemHostRegister(buf + 4096, 4096, 0),
                     CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    unsigned type;
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)buf));
    assert_int_equal(type, CU_MEMORYTYPE_HOST);
    OK(cuMemHostUnregister(buf));
    assert_int_equal(sim_host_registered_count(), n0);
    assert_int_equal(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    free(buf);
}

static void test_copies_and_memsets(void **state)
{
    (void)state;
    CUdeviceptr a, b;
    OK(cuMemAlloc(&a, 4096));
    OK(cuMemAlloc(&b, 4096));
    char src[4096], dst[4096];
    for (int i = 0; i < 4096; i++)
        src[i] = (char)(i * 7);
    OK(cuMemcpyHtoD(a, src, sizeof src));
    OK(cuMemcpyDtoD(b, a, sizeof src));
    memset(dst, 0, sizeof dst);
    OK(cuMemcpyDtoH(dst, b, sizeof dst));
    assert_memory_equal(src, dst, sizeof src);
    OK(cuMemsetD8(a, 0x5a, 10));
    OK(cuMemsetD16(a + 16, 0x1234, 4));
    OK(cuMemsetD32(a + 32, 0xdeadbeef, 2));
    OK(cuMemcpy((CUdeviceptr)dst, a, 64));
    assert_int_equal((unsigned char)dst[9], 0x5a);
    assert_int_equal((unsigned char)dst[10], (unsigned char)src[10]);
    assert_int_equal(((uint16_t *)(dst + 16))[3], 0x1234);
    assert_int_equal(((uint32_t *)(dst + 32))[1], 0xdeadbeef);
    assert_int_equal(cuMemsetD32(a + 2, 0, 1), CUDA_ERROR_INVALID_VALUE); /* misaligned */
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    OK(cuMemcpyHtoDAsync(a, src + 100, 100, s));
    OK(cuMemsetD8Async(b, 1, 100, s));
    OK(cuMemcpyAsync((CUdeviceptr)dst, a, 100, s));
    OK(cuStreamSynchronize(s));
    assert_memory_equal(dst, src + 100, 100);
    /* Device-side bounds and kinds are checked. */
    assert_int_equal(cuMemcpyHtoD(a + 4000, src, 200), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemcpyHtoD((CUdeviceptr)dst, src, 10), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemcpyDtoH(dst, (CUdeviceptr)src, 10), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemcpyAsync(a, b, 10, (CUstream)(void *)src), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuMemsetD8((CUdeviceptr)dst, 0, 10), CUDA_ERROR_INVALID_VALUE); /* pageable */
    /* Managed and pinned host memory are addressable by the device (unified addressing). */
    CUdeviceptr m;
    void *pinned;
    OK(cuMemAllocManaged(&m, 256, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemHostAlloc(&pinned, 256, 0));
    OK(cuMemcpyHtoD(m, src, 256));
    OK(cuMemcpyDtoD((CUdeviceptr)pinned, m, 256));
    OK(cuMemsetD8(m, 9, 4));
    assert_memory_equal(pinned, src, 256);
    assert_int_equal(((char *)m)[3], 9);
    OK(cuMemFree(m));
    OK(cuMemFreeHost(pinned));
    OK(cuStreamDestroy(s));
    OK(cuMemFree(a));
    OK(cuMemFree(b));
}

static void test_streams_and_events(void **state)
{
    (void)state;
    CUstream s;
    OK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -1));
    unsigned flags;
    int prio;
    OK(cuStreamGetFlags(s, &flags));
    assert_int_equal(flags, CU_STREAM_NON_BLOCKING);
    OK(cuStreamGetPriority(s, &prio));
    assert_int_equal(prio, -1);
    CUevent a, b, nt;
    OK(cuEventCreate(&a, 0));
    OK(cuEventCreate(&b, 0));
    OK(cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING));
    OK(cuEventQuery(a)); /* never recorded: complete */
    OK(cuEventRecord(a, s));
    OK(cuEventRecord(nt, s));
    OK(cuStreamWaitEvent(NULL, a, 0));
    OK(cuEventRecord(b, s));
    OK(cuEventSynchronize(b));
    OK(cuStreamQuery(s));
    float ms = -1;
    OK(cuEventElapsedTime(&ms, a, b));
    assert_true(ms >= 0);
    assert_int_equal(cuEventElapsedTime(&ms, a, nt), CUDA_ERROR_INVALID_HANDLE);
    OK(cuEventDestroy(a));
    assert_int_equal(cuEventDestroy(a), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuEventRecord(a, s), CUDA_ERROR_INVALID_HANDLE);
    OK(cuEventDestroy(b));
    OK(cuEventDestroy(nt));
    OK(cuStreamDestroy(s));
    assert_int_equal(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
    OK(cuStreamSynchronize(NULL));
    OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
}

static void test_event_delay_until_queries_or_sync(void **state)
{
    (void)state;
    sim_set_event_delay(3);
    CUstream s, other;
    OK(cuStreamCreate(&s, 0));
    OK(cuStreamCreate(&other, 0));
    CUevent e, f;
    OK(cuEventCreate(&e, 0));
    OK(cuEventCreate(&f, 0));
    /* Completes after exactly 3 NOT_READY queries. */
    OK(cuEventRecord(e, s));
    assert_int_equal(sim_events_pending(), 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    OK(cuEventQuery(e));
    assert_int_equal(sim_events_pending(), 0);
    /* Elapsed time waits for completion too. */
    OK(cuEventRecord(e, s));
    OK(cuEventRecord(f, s));
    float ms;
    assert_int_equal(cuEventElapsedTime(&ms, e, f), CUDA_ERROR_NOT_READY);
    /* Synchronizing the stream completes its events, not another stream's. */
    OK(cuEventRecord(f, other));
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    OK(cuStreamSynchronize(s));
    OK(cuEventQuery(e));
    assert_int_equal(cuEventQuery(f), CUDA_ERROR_NOT_READY);
    OK(cuEventSynchronize(f));
    OK(cuEventQuery(f));
    /* The context synchronization completes everything. */
    OK(cuEventRecord(e, s));
    OK(cuEventRecord(f, other));
    OK(cuCtxSynchronize());
    assert_int_equal(sim_events_pending(), 0);
    /* cuMemFree synchronizes the device, as the real one does. */
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 512));
    OK(cuEventRecord(e, s));
    assert_int_equal(sim_events_pending(), 1);
    OK(cuMemFree(p));
    assert_int_equal(sim_events_pending(), 0);
    /* cuMemFreeAsync does not. */
    OK(cuMemAllocAsync(&p, 512, s));
    OK(cuEventRecord(e, s));
    OK(cuMemFreeAsync(p, s));
    assert_int_equal(sim_events_pending(), 1);
    sim_set_event_delay(0);
    OK(cuCtxSynchronize());
    OK(cuEventDestroy(e));
    OK(cuEventDestroy(f));
    OK(cuStreamDestroy(s));
    OK(cuStreamDestroy(other));
}

static void test_timed_event_delay_runs_on_the_simulated_clock(void **state)
{
    (void)state;
    CUevent e;
    OK(cuEventCreate(&e, 0));
    sim_set_event_delay_us(100);
    /* Polling: each query advances the simulated clock, so the event completes after about
     * 100 us worth of queries (1 us each), and not before. */
    double t0 = sim_clock_us();
    OK(cuEventRecord(e, NULL));
    int queries = 0;
    while (cuEventQuery(e) == CUDA_ERROR_NOT_READY)
        queries++;
    assert_true(queries >= 90 && queries <= 100);
    assert_true(sim_clock_us() - t0 >= 100);
    /* Synchronizing waits out the rest at once and charges it as waiting time. */
    sim_stats a, b;
    sim_stats_get(&a);
    OK(cuEventRecord(e, NULL));
    assert_int_equal(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    assert_int_equal(sim_events_pending(), 1);
    OK(cuEventSynchronize(e));
    OK(cuEventQuery(e));
    sim_stats_get(&b);
    assert_true(b.op[SIM_OP_EVENT_SYNC].us - a.op[SIM_OP_EVENT_SYNC].us >= 95);
    /* A device-wide synchronization waits for the latest deadline. */
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    OK(cuEventRecord(e, s));
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    OK(cuCtxSynchronize());
    OK(cuStreamQuery(s));
    sim_set_event_delay_us(0);
    OK(cuEventRecord(e, s));
    OK(cuEventQuery(e));
    OK(cuStreamDestroy(s));
    OK(cuEventDestroy(e));
}

/* ---- host kernels ---- */

struct three_floats {
    float x, y, z;
};
static int seen_calls;

/* axpy-like kernel: out[0] = a * x + y + (c) + v.x + v.y + v.z, through the real params array */
static void kernel_mix(void **params)
{
    int a = *(int *)params[0];
    double x = *(double *)params[1];
    char c = *(char *)params[2];
    struct three_floats v = *(struct three_floats *)params[3];
    double *out = *(double **)params[4];
    out[0] = a * x + c + v.x + v.y + v.z;
    seen_calls++;
}

static void test_host_kernel_launch_sees_arguments(void **state)
{
    (void)state;
    size_t sizes[] = {sizeof(int), sizeof(double), sizeof(char), sizeof(struct three_floats),
                      sizeof(double *)};
    CUfunction f = NULL, f2 = NULL;
    OK(sim_register_kernel("mix", kernel_mix, 5, sizes, &f));
    OK(sim_register_kernel("mix", kernel_mix, 5, sizes, &f2));
    assert_ptr_equal(f, f2); /* registering twice returns the same function */
    /* Natural alignment: int@0, double@8, char@16, float3@20 (4-aligned), pointer@32. */
    size_t want_off[] = {0, 8, 16, 20, 32};
    for (size_t i = 0; i < 5; i++) {
        size_t off = 99, sz = 99;
        OK(cuFuncGetParamInfo(f, i, &off, &sz));
        assert_int_equal(off, want_off[i]);
        assert_int_equal(sz, sizes[i]);
    }
    size_t off;
    assert_int_equal(cuFuncGetParamInfo(f, 5, &off, NULL), CUDA_ERROR_INVALID_VALUE);
    const char *name = NULL;
    OK(cuFuncGetName(&name, f));
    assert_string_equal(name, "mix");

    CUdeviceptr out;
    OK(cuMemAlloc(&out, sizeof(double)));
    int a = 3;
    double x = 1.5;
    char c = 2;
    struct three_floats v = {0.25f, 0.5f, 1.0f};
    void *params[] = {&a, &x, &c, &v, &out};
    seen_calls = 0;
    OK(cuLaunchKernel(f, 4, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
    double result = 0;
    OK(cuMemcpyDtoH(&result, out, sizeof result));
    assert_true(result == 3 * 1.5 + 2 + 0.25 + 0.5 + 1.0);
    assert_int_equal(seen_calls, 1);

    /* The packed `extra` form, laid out by the offsets cuFuncGetParamInfo reported. */
    char buf[40] = {0};
    a = 10;
    memcpy(buf + 0, &a, sizeof a);
    memcpy(buf + 8, &x, sizeof x);
    memcpy(buf + 16, &c, sizeof c);
    memcpy(buf + 20, &v, sizeof v);
    memcpy(buf + 32, &out, sizeof out);
    size_t bufsize = sizeof buf;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bufsize,
                     CU_LAUNCH_PARAM_END};
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra));
    OK(cuMemcpyDtoH(&result, out, sizeof result));
    assert_true(result == 10 * 1.5 + 2 + 0.25 + 0.5 + 1.0);

    /* Bad launches are rejected without calling the kernel. */
    seen_calls = 0;
    assert_int_equal(cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, NULL, params, NULL),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(
        cuLaunchKernel((CUfunction)(void *)&a, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
        CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(seen_calls, 0);
    assert_int_equal(sim_register_kernel("bad", kernel_mix, 1, (size_t[]){0}, &f),
                     CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(out));
}

static void host_fn(void *p)
{
    *(int *)p += 1;
}

static void test_launch_host_func_runs_in_order(void **state)
{
    (void)state;
    int counter = 0;
    OK(cuLaunchHostFunc(NULL, host_fn, &counter));
    OK(cuLaunchHostFunc(NULL, host_fn, &counter));
    assert_int_equal(counter, 2);
}

static void test_cost_counters(void **state)
{
    (void)state;
    sim_stats_reset();
    sim_stats st;
    sim_stats_get(&st);
    assert_int_equal(st.op[SIM_OP_MEM_ALLOC].calls, 0);
    assert_true(st.total_us == 0);
    CUdeviceptr p, q;
    OK(cuMemAlloc(&p, 1 << 20));
    OK(cuMemAlloc(&q, 64 << 20));
    OK(cuMemFree(p));
    OK(cuMemFree(q));
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    OK(cuStreamSynchronize(s));
    OK(cuStreamDestroy(s));
    sim_stats_get(&st);
    assert_int_equal(st.op[SIM_OP_MEM_ALLOC].calls, 2);
    assert_int_equal(st.op[SIM_OP_MEM_ALLOC].bytes, (1 << 20) + (64 << 20));
    assert_int_equal(st.op[SIM_OP_MEM_FREE].calls, 2);
    assert_int_equal(st.op[SIM_OP_STREAM_SYNC].calls, 1);
    /* Every call costs something, and a bigger allocation costs more than a small one. */
    assert_true(st.op[SIM_OP_MEM_ALLOC].us > 2 * 5.0);
    assert_true(st.op[SIM_OP_MEM_FREE].us > 0);
    double sum = 0;
    for (int i = 0; i < SIM_OP_COUNT; i++)
        sum += st.op[i].us;
    assert_true(sum > 0 && sum - st.total_us < 1e-6 && st.total_us - sum < 1e-6);
    assert_true(st.peak >= st.used + (64 << 20));
    assert_string_equal(sim_op_name(SIM_OP_MEM_MAP), "cuMemMap");
    assert_string_equal(sim_op_name(-1), "?");
    sim_stats_reset();
    sim_stats_get(&st);
    assert_int_equal(st.op[SIM_OP_MEM_FREE].calls, 0);
    assert_int_equal(st.peak, st.used);
}

static double alloc_cost_of(size_t size)
{
    sim_stats a, b;
    CUdeviceptr p;
    sim_stats_get(&a);
    assert_int_equal(cuMemAlloc(&p, size), CUDA_SUCCESS);
    sim_stats_get(&b);
    assert_int_equal(cuMemFree(p), CUDA_SUCCESS);
    return b.op[SIM_OP_MEM_ALLOC].us - a.op[SIM_OP_MEM_ALLOC].us;
}

static void test_cost_formula_and_overrides(void **state)
{
    (void)state;
    double fixed, per;
    OK(sim_cost_get(SIM_OP_MEM_ALLOC, &fixed, &per));
    assert_true(fixed > 0 && per > 0);
    /* cost = fixed + per_MiB x size in MiB */
    double c = alloc_cost_of(8 << 20);
    assert_true(c > fixed + 8 * per - 1e-9 && c < fixed + 8 * per + 1e-9);
    OK(sim_costs_set("cuMemAlloc=100")); /* fixed only: per-MiB kept */
    c = alloc_cost_of(2 << 20);
    assert_true(c > 100 + 2 * per - 1e-9 && c < 100 + 2 * per + 1e-9);
    OK(sim_costs_set("cuMemAlloc=1+2, cuMemMap=3"));
    c = alloc_cost_of(4 << 20);
    assert_true(c > 9 - 1e-9 && c < 9 + 1e-9);
    double mf;
    OK(sim_cost_get(SIM_OP_MEM_MAP, &mf, NULL));
    assert_true(mf == 3);
    /* Bad specs change nothing. */
    assert_int_equal(sim_costs_set("cuMemAlloc"), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(sim_costs_set("cuNothing=1"), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(sim_costs_set("cuMemAlloc=-1"), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(sim_costs_set("cuMemAlloc=1+x"), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(sim_costs_set("cuMemAlloc=nan"), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(sim_costs_set("cuMemAlloc=1+inf"), CUDA_ERROR_INVALID_VALUE);
    c = alloc_cost_of(4 << 20);
    assert_true(c > 9 - 1e-9 && c < 9 + 1e-9);
    OK(sim_costs_set(NULL)); /* defaults back */
    double f2, p2;
    OK(sim_cost_get(SIM_OP_MEM_ALLOC, &f2, &p2));
    assert_true(f2 == fixed && p2 == per);
    assert_int_equal(sim_cost_get(SIM_OP_COUNT, &f2, &p2), CUDA_ERROR_INVALID_VALUE);
}

static void test_alloc_pitch(void **state)
{
    (void)state;
    CUdeviceptr p, base;
    size_t pitch = 0, size = 0;
    assert_int_equal(cuMemAllocPitch(&p, &pitch, 64, 4, 3), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemAllocPitch(&p, &pitch, 0, 4, 4), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocPitch(&p, &pitch, 513, 3, 8));
    assert_int_equal(pitch, 1024);
    OK(cuMemGetAddressRange(&base, &size, p + 1500));
    assert_int_equal(base, p);
    assert_int_equal(size, 1024 * 3);
    OK(cuMemFree(p));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calls_before_cuInit_fail_not_initialized),
        cmocka_unit_test(test_device_queries),
        cmocka_unit_test(test_primary_context),
        cmocka_unit_test(test_get_proc_address_answers_base_names),
        cmocka_unit_test(test_unimplemented_functions_say_so_once),
        cmocka_unit_test(test_error_strings),
        cmocka_unit_test(test_mem_alloc_free_and_info),
        cmocka_unit_test(test_mem_alloc_async_and_pool),
        cmocka_unit_test(test_pointer_attributes),
        cmocka_unit_test(test_host_memory_and_registration),
        cmocka_unit_test(test_copies_and_memsets),
        cmocka_unit_test(test_streams_and_events),
        cmocka_unit_test(test_event_delay_until_queries_or_sync),
        cmocka_unit_test(test_timed_event_delay_runs_on_the_simulated_clock),
        cmocka_unit_test(test_host_kernel_launch_sees_arguments),
        cmocka_unit_test(test_launch_host_func_runs_in_order),
        cmocka_unit_test(test_cost_counters),
        cmocka_unit_test(test_cost_formula_and_overrides),
        cmocka_unit_test(test_alloc_pitch),
    };
    /* A virtual-backing environment would make the data checks meaningless. */
    unsetenv("GPUMEM_SIM_BACKING");
    unsetenv("GPUMEM_SIM_FAULTS");
    unsetenv("GPUMEM_SIM_EVENT_DELAY");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
