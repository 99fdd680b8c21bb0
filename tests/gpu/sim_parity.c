/* sim_parity.c — probes driver semantics the virtual GPU had to decide without a GPU at hand,
 * and measures the latencies its cost model estimates. Run once against the real driver and once
 * against the sim (tests/gpu/sim_parity.sh diffs the two):
 *
 *   sim_parity LIBCUDA [--time]
 *
 * LIBCUDA is the path (or soname) of the driver to dlopen. Every driver function is obtained
 * through that driver's cuGetProcAddress_v2, as the runtime does. Output lines:
 *   probe <name> <value>            one semantic answer (a CUresult name, or a value)
 *   time <call> <bytes> <us>        with --time: mean wall-clock µs per call
 *   costs GPUMEM_SIM_COSTS=...      with --time: a cost table fitted from the timings
 * Only probes that are safe on a real driver are made (no invalid handles that could crash it).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *);
static gpa_fn gpa;
static void *lib;

#define F(name) static __typeof__(&name) p_##name;
#define FUNCS(X)                                                                                   \
    X(cuInit)                                                                                      \
    X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuMemAlloc) X(cuMemFree)                      \
        X(cuMemGetAddressRange) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate)          \
            X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)                            \
                X(cuMemGetAllocationGranularity) X(cuPointerGetAttribute)                          \
                    X(cuPointerGetAttributes) X(cuMemcpyHtoD) X(cuMemHostRegister)                 \
                        X(cuMemHostUnregister) X(cuEventCreate) X(cuEventDestroy) X(cuEventQuery)  \
                            X(cuEventElapsedTime) X(cuMemAllocAsync) X(cuGetErrorName)             \
                                X(cuCtxSynchronize)
FUNCS(F)

static const char *name_of(CUresult r)
{
    const char *s = NULL;
    if (!p_cuGetErrorName || p_cuGetErrorName(r, &s) != CUDA_SUCCESS || !s) return "UNKNOWN_CODE";
    return s;
}

static void probe(const char *what, CUresult r)
{
    printf("probe %s %s\n", what, name_of(r));
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static CUmemAllocationProp prop(void)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    return p;
}

static CUmemAccessDesc rw(void)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return d;
}

static void probes(void)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    probe("getproc_versioned_name", gpa("cuMemAlloc_v2", &fn, 13000, 0, &st));
    gpa("cuCtxSynchronize", &fn, 13000, 0, &st);
    printf("probe getproc_cuCtxSynchronize_13000_is_v2 %d\n",
           fn == dlsym(lib, "cuCtxSynchronize_v2"));
    gpa("cuCtxSynchronize", &fn, 12000, 0, &st);
    printf("probe getproc_cuCtxSynchronize_12000_is_v1 %d\n", fn == dlsym(lib, "cuCtxSynchronize"));
    probe("getproc_cuMemCreate_10000", gpa("cuMemCreate", &fn, 10000, 0, &st));
    printf("probe getproc_cuMemCreate_10000_status %d\n", (int)st);

    CUdeviceptr d = 0;
    probe("memalloc_zero", p_cuMemAlloc(&d, 0));
    p_cuMemAlloc(&d, 1 << 20);
    probe("memfree_interior", p_cuMemFree(d + 256));
    probe("memfree_ok", p_cuMemFree(d));
    probe("memfree_twice", p_cuMemFree(d));
    CUstream legacy = CU_STREAM_LEGACY;
    probe("allocasync_legacy", p_cuMemAllocAsync(&d, 4096, legacy));
    probe("memfree_of_async", p_cuMemFree(d));

    size_t gran = 0;
    CUmemAllocationProp pr = prop();
    p_cuMemGetAllocationGranularity(&gran, &pr, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    printf("probe granularity_min %zu\n", gran);
    CUdeviceptr va = 0;
    probe("reserve_unaligned_size", p_cuMemAddressReserve(&va, gran + 4096, 0, 0, 0));
    p_cuMemAddressReserve(&va, 8 * gran, 0, 0, 0);
    CUdeviceptr base;
    size_t size;
    probe("addressrange_unmapped_reserved", p_cuMemGetAddressRange(&base, &size, va));
    CUmemGenericAllocationHandle h;
    p_cuMemCreate(&h, 2 * gran, &pr, 0);
    probe("map_ok", p_cuMemMap(va, 2 * gran, 0, h, 0));
    probe("map_overlap", p_cuMemMap(va + gran, gran, 0, h, 0));
    probe("addressrange_mapped", p_cuMemGetAddressRange(&base, &size, va + 16));
    printf("probe addressrange_mapped_is_mapping %d\n", base == va && size == 2 * gran);
    /* which rule map_overlap broke: a part of a handle mapped elsewhere, another handle over the
     * mapping (each undone when it was accepted, so the probes below see the same state) */
    CUresult pr1 = p_cuMemMap(va + 4 * gran, gran, 0, h, 0);
    probe("map_part_of_handle_elsewhere", pr1);
    if (pr1 == CUDA_SUCCESS) p_cuMemUnmap(va + 4 * gran, gran);
    CUmemGenericAllocationHandle h2;
    if (p_cuMemCreate(&h2, gran, &pr, 0) == CUDA_SUCCESS) {
        CUresult pr2 = p_cuMemMap(va + gran, gran, 0, h2, 0);
        probe("map_other_handle_over_mapping", pr2);
        if (pr2 == CUDA_SUCCESS) p_cuMemUnmap(va + gran, gran);
        p_cuMemRelease(h2);
    }
    CUdeviceptr start = 0;
    probe("ptrattr_range_start_mapped",
          p_cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + 16));
    printf("probe ptrattr_range_start_mapped_is_mapping %d\n", start == va);
    char buf[64] = {0};
    probe("copy_into_mapped_no_access", p_cuMemcpyHtoD(va, buf, sizeof buf));
    CUmemAccessDesc acc = rw();
    probe("setaccess_beyond_mapping", p_cuMemSetAccess(va, 3 * gran, &acc, 1));
    probe("setaccess_ok", p_cuMemSetAccess(va, 2 * gran, &acc, 1));
    probe("copy_into_mapped", p_cuMemcpyHtoD(va, buf, sizeof buf));
    probe("unmap_partial", p_cuMemUnmap(va, gran));
    probe("addressfree_while_mapped", p_cuMemAddressFree(va, 8 * gran));
    probe("release_while_mapped", p_cuMemRelease(h));
    probe("copy_after_release_still_mapped", p_cuMemcpyHtoD(va, buf, sizeof buf));
    probe("unmap_ok", p_cuMemUnmap(va, 2 * gran));
    probe("addressfree_ok", p_cuMemAddressFree(va, 8 * gran));

    int local = 0;
    unsigned type = 99;
    probe("ptrattr_unknown",
          p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)&local));
    CUpointer_attribute at[1] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
    void *data[1] = {&type};
    probe("ptrattrs_unknown", p_cuPointerGetAttributes(1, at, data, (CUdeviceptr)&local));
    printf("probe ptrattrs_unknown_type %u\n", type);

    static char page[3 * 4096] __attribute__((aligned(4096)));
    probe("hostregister_ok", p_cuMemHostRegister(page, 2 * 4096, 0));
    probe("hostregister_overlap", p_cuMemHostRegister(page + 4096, 2 * 4096, 0));
    probe("hostunregister_ok", p_cuMemHostUnregister(page));
    probe("hostunregister_unknown", p_cuMemHostUnregister(page));

    CUevent a, b;
    p_cuEventCreate(&a, 0);
    p_cuEventCreate(&b, 0);
    probe("eventquery_never_recorded", p_cuEventQuery(a));
    float ms;
    probe("elapsed_never_recorded", p_cuEventElapsedTime(&ms, a, b));
    p_cuEventDestroy(a);
    p_cuEventDestroy(b);
}

/* Mean µs per call of each allocation-path call, for a handle/allocation size. */
static void time_size(size_t bytes, double out[8])
{
    enum { N = 50 };
    CUmemAllocationProp pr = prop();
    CUmemAccessDesc acc = rw();
    CUdeviceptr va, d[N];
    CUmemGenericAllocationHandle h[N];
    double t;
    p_cuMemAddressReserve(&va, bytes * N, 0, 0, 0);
    t = now_us();
    for (int i = 0; i < N; i++)
        p_cuMemAlloc(&d[i], bytes);
    out[0] = (now_us() - t) / N;
    t = now_us();
    for (int i = 0; i < N; i++)
        p_cuMemFree(d[i]);
    out[1] = (now_us() - t) / N;
    t = now_us();
    for (int i = 0; i < N; i++)
        p_cuMemCreate(&h[i], bytes, &pr, 0);
    out[2] = (now_us() - t) / N;
    t = now_us();
    for (int i = 0; i < N; i++)
        p_cuMemMap(va + (size_t)i * bytes, bytes, 0, h[i], 0);
    out[3] = (now_us() - t) / N;
    t = now_us();
    for (int i = 0; i < N; i++)
        p_cuMemSetAccess(va + (size_t)i * bytes, bytes, &acc, 1);
    out[4] = (now_us() - t) / N;
    t = now_us();
    for (int i = 0; i < N; i++)
        p_cuMemUnmap(va + (size_t)i * bytes, bytes);
    out[5] = (now_us() - t) / N;
    t = now_us();
    for (int i = 0; i < N; i++)
        p_cuMemRelease(h[i]);
    out[6] = (now_us() - t) / N;
    p_cuMemAddressFree(va, bytes * N);
    out[7] = 0;
}

static void timings(void)
{
    static const char *names[] = {"cuMemAlloc",     "cuMemFree",  "cuMemCreate", "cuMemMap",
                                  "cuMemSetAccess", "cuMemUnmap", "cuMemRelease"};
    size_t small = (size_t)2 << 20, big = (size_t)64 << 20;
    double ts[8], tb[8];
    time_size(small, ts); /* warm-up pass, discarded */
    time_size(small, ts);
    time_size(big, tb);
    for (int i = 0; i < 7; i++) {
        printf("time %s %zu %.2f\n", names[i], small, ts[i]);
        printf("time %s %zu %.2f\n", names[i], big, tb[i]);
    }
    /* fixed + per_MiB x MiB through the two points */
    printf("costs GPUMEM_SIM_COSTS=");
    for (int i = 0; i < 7; i++) {
        double per = (tb[i] - ts[i]) / 62.0;
        if (per < 0) per = 0;
        double fixed = ts[i] - 2 * per;
        if (fixed < 0) fixed = 0;
        printf("%s%s=%.2f+%.3f", i ? "," : "", names[i], fixed, per);
    }
    printf("\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s LIBCUDA [--time]\n", argv[0]);
        return 2;
    }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "sim_parity: cannot load %s: %s\n", argv[1], dlerror());
        return 2;
    }
    gpa = (gpa_fn)dlsym(lib, "cuGetProcAddress_v2");
    if (!gpa) {
        fprintf(stderr, "sim_parity: %s has no cuGetProcAddress_v2\n", argv[1]);
        return 2;
    }
    CUdriverProcAddressQueryResult st;
    /* Each at the version whose signature the header's prototype has. */
#define GET(name, ver)                                                                             \
    if (gpa(#name, (void **)&p_##name, ver, 0, &st) || !p_##name) {                                \
        fprintf(stderr, "sim_parity: no %s in %s\n", #name, argv[1]);                              \
        return 2;                                                                                  \
    }
    GET(cuGetErrorName, 6000)
    GET(cuInit, 2000) GET(cuDevicePrimaryCtxRetain, 7000) GET(cuCtxSetCurrent, 4000)
        GET(cuMemAlloc, 3020) GET(cuMemFree, 3020) GET(cuMemGetAddressRange, 3020)
            GET(cuMemAddressReserve, 10020) GET(cuMemAddressFree, 10020) GET(cuMemCreate, 10020)
                GET(cuMemRelease, 10020) GET(cuMemMap, 10020) GET(cuMemUnmap, 10020)
                    GET(cuMemSetAccess, 10020) GET(cuMemGetAllocationGranularity, 10020)
                        GET(cuPointerGetAttribute, 4000) GET(cuPointerGetAttributes, 7000)
                            GET(cuMemcpyHtoD, 3020) GET(cuMemHostRegister, 6050)
                                GET(cuMemHostUnregister, 4000) GET(cuEventCreate, 2000)
                                    GET(cuEventDestroy, 4000) GET(cuEventQuery, 2000)
                                        GET(cuEventElapsedTime, 12080) GET(cuMemAllocAsync, 11020)
                                            GET(cuCtxSynchronize, 2000) CUcontext ctx;
    if (p_cuInit(0) || p_cuDevicePrimaryCtxRetain(&ctx, 0) || p_cuCtxSetCurrent(ctx)) {
        fprintf(stderr, "sim_parity: no usable device behind %s\n", argv[1]);
        return 2;
    }
    probes();
    if (argc > 2 && !strcmp(argv[2], "--time")) timings();
    return 0;
}
