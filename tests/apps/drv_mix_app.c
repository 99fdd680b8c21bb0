/*
 * drv_mix_app — one program, three paths to device memory, one buffer each:
 *   1. cudaMalloc (the runtime)
 *   2. cuMemAlloc_v2 found with cudaGetDriverEntryPoint (the driver's cuGetProcAddress)
 *   3. cuMemAlloc_v2 called by symbol (linked with -lcuda)
 * freed the same three ways; then a cudaMallocPitch and a cudaMalloc3D buffer, and one from
 * a pool (cudaMallocFromPoolAsync). Each buffer has its own size so that a test can find every
 * allocation in the database and check it is there exactly once. stdout: the sizes and what
 * each buffer held after a copy in and out (identical with and without gpumem).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "tests/apps/app_check.h"

enum { SZ_RT = 1 << 20, SZ_PROC = (1 << 20) + 512, SZ_SYM = (1 << 20) + 1024 };

static int roundtrip(CUdeviceptr d, size_t n, unsigned char v)
{
    static unsigned char h[SZ_SYM];
    memset(h, v, n);
    if (cudaMemcpy((void *)(uintptr_t)d, h, n, cudaMemcpyHostToDevice) != cudaSuccess)
        return -1;
    memset(h, 0, n);
    if (cudaMemcpy(h, (void *)(uintptr_t)d, n, cudaMemcpyDeviceToHost) != cudaSuccess)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (h[i] != v)
            return -1;
    return 0;
}

int main(void)
{
    /* 1. the runtime */
    void *a = NULL;
    CHECK_RT(cudaMalloc(&a, SZ_RT));
    /* 2. the driver through the runtime's entry-point query (cuGetProcAddress) */
    CUresult (*proc_alloc)(CUdeviceptr *, size_t) = NULL;
    CUresult (*proc_free)(CUdeviceptr) = NULL;
    enum cudaDriverEntryPointQueryResult q;
    CHECK_RT(cudaGetDriverEntryPointByVersion("cuMemAlloc", (void **)&proc_alloc, 12000,
                                              cudaEnableDefault, &q));
    CHECK_RT(cudaGetDriverEntryPointByVersion("cuMemFree", (void **)&proc_free, 12000,
                                              cudaEnableDefault, &q));
    CUdeviceptr b = 0;
    CHECK_DRV(proc_alloc(&b, SZ_PROC));
    /* 3. the driver by symbol */
    CUdeviceptr c = 0;
    CHECK_DRV(cuMemAlloc(&c, SZ_SYM));

    printf("runtime %d: %s\n", SZ_RT, roundtrip((CUdeviceptr)(uintptr_t)a, SZ_RT, 1) ? "bad" : "ok");
    printf("getproc %d: %s\n", SZ_PROC, roundtrip(b, SZ_PROC, 2) ? "bad" : "ok");
    printf("symbol %d: %s\n", SZ_SYM, roundtrip(c, SZ_SYM, 3) ? "bad" : "ok");

    /* pitched and 3D through the runtime (the runtime reaches cuMemAllocPitch_v2 through
     * cuGetProcAddress): one allocation each */
    void *pitched = NULL;
    size_t pitch = 0;
    CHECK_RT(cudaMallocPitch(&pitched, &pitch, 1000, 10));
    struct cudaPitchedPtr pp;
    CHECK_RT(cudaMalloc3D(&pp, make_cudaExtent(1000, 4, 3)));
    printf("pitched: %s, 3d: %s\n", pitch >= 1000 ? "ok" : "bad",
           pp.pitch >= 1000 && pp.xsize == 1000 && pp.ysize == 4 ? "ok" : "bad");
    fprintf(stderr, "drv_mix_app: pitch %zu 3d pitch %zu\n", pitch, pp.pitch);
    CHECK_RT(cudaFree(pitched));
    CHECK_RT(cudaFree(pp.ptr));

    /* a buffer from a pool the program chose (the runtime's form) */
    cudaMemPool_t pool;
    void *fromPool = NULL;
    CHECK_RT(cudaDeviceGetDefaultMemPool(&pool, 0));
    CHECK_RT(cudaMallocFromPoolAsync(&fromPool, (1 << 20) + 2048, pool, 0));
    CHECK_RT(cudaFreeAsync(fromPool, 0));
    CHECK_RT(cudaStreamSynchronize(0));

    CHECK_RT(cudaFree(a));
    CHECK_DRV(proc_free(b));
    CHECK_DRV(cuMemFree(c));
    printf("drv_mix_app: done\n");
    return 0;
}
