/* Every driver allocation entry point gpumem interposes, reached as a program without a link
 * to libcuda reaches them (dlopen + dlsym, and cuGetProcAddress): edge sizes including 0 (the
 * driver refuses it: CUDA_ERROR_INVALID_VALUE), over capacity (and what happens to the
 * out-parameter), double and interior frees, NULL, memory info after each. */
#include "tests/diff/diff.h"

int main(void)
{
    DRV(init, cuInit);
    DRV(retain, cuDevicePrimaryCtxRetain);
    DRV(setcur, cuCtxSetCurrent);
    DRV(malloc_, cuMemAlloc_v2);
    DRV(free_, cuMemFree_v2);
    PROC(malloc_p, cuMemAlloc_v2, "cuMemAlloc");
    PROC(free_p, cuMemFree_v2, "cuMemFree");
    DRV(amalloc, cuMemAllocAsync);
    DRV(afree, cuMemFreeAsync);
    DRV(pmalloc, cuMemAllocFromPoolAsync);
    DRV(defpool, cuDeviceGetDefaultMemPool);
    DRV(hmalloc, cuMemAllocHost_v2);
    DRV(halloc, cuMemHostAlloc);
    DRV(hfree, cuMemFreeHost);
    DRV(managed, cuMemAllocManaged);
    DRV(info, cuMemGetInfo_v2);
    DRV(screate, cuStreamCreate);
    DRV(ssync, cuStreamSynchronize);
    DRV(sdestroy, cuStreamDestroy_v2);
    CUcontext ctx;
    cu("cuInit", init(0));
    cu("cuDevicePrimaryCtxRetain", retain(&ctx, 0));
    setcur(ctx);
    CUstream s;
    screate(&s, 0);
    CUmemoryPool pool;
    defpool(&pool, 0);
    size_t f0, t0;
    info(&f0, &t0);
    const size_t M2 = (size_t)2 << 20;
    size_t sizes[] = {0, 1, 511, 512, 513, M2 - 1, M2, M2 + 1, (size_t)1 << 40};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        char w[96];
        CUdeviceptr d = 0x1234;
        snprintf(w, sizeof w, "cuMemAlloc_v2(%zu)", n);
        CUresult r = malloc_(&d, n);
        cu(w, r);
        printf("  out: %s\n", d == 0 ? "0" : d == 0x1234 ? "untouched" : "set");
        size_t f, t;
        info(&f, &t);
        printf("  used %+lld B\n", (long long)f0 - (long long)f);
        if (r == CUDA_SUCCESS) {
            cu("  cuMemFree_v2", free_(d));
            cu("  cuMemFree_v2(double)", free_(d));
        }
        d = 0x1234;
        snprintf(w, sizeof w, "cuMemAlloc via cuGetProcAddress(%zu)", n);
        r = malloc_p(&d, n);
        cu(w, r);
        if (r == CUDA_SUCCESS) {
            cu("  cuMemFree_v2(interior)", free_p(d + 1));
            cu("  cuMemFree_v2", free_p(d));
        }
        d = 0x1234;
        snprintf(w, sizeof w, "cuMemAllocAsync(%zu)", n);
        r = amalloc(&d, n, s);
        cu(w, r);
        printf("  out: %s\n", d == 0 ? "0" : d == 0x1234 ? "untouched" : "set");
        if (r == CUDA_SUCCESS) {
            cu("  cuMemFreeAsync", afree(d, s));
            cu("  cuMemFreeAsync(double)", afree(d, s));
        }
        d = 0x1234;
        snprintf(w, sizeof w, "cuMemAllocFromPoolAsync(%zu)", n);
        r = pmalloc(&d, n, pool, s);
        cu(w, r);
        if (r == CUDA_SUCCESS)
            cu("  cuMemFreeAsync", afree(d, s));
        ssync(s);
        info(&f, &t);
        printf("  used after frees %+lld B\n", (long long)f0 - (long long)f);
        if (n == ((size_t)1 << 40))
            continue;
        void *h = (void *)0x1234;
        snprintf(w, sizeof w, "cuMemAllocHost_v2(%zu)", n);
        r = hmalloc(&h, n);
        cu(w, r);
        if (r == CUDA_SUCCESS) {
            cu("  cuMemFreeHost", hfree(h));
            cu("  cuMemFreeHost(double)", hfree(h));
        }
        snprintf(w, sizeof w, "cuMemHostAlloc(%zu, PORTABLE)", n);
        r = halloc(&h, n, CU_MEMHOSTALLOC_PORTABLE);
        cu(w, r);
        if (r == CUDA_SUCCESS)
            cu("  cuMemFreeHost", hfree(h));
        snprintf(w, sizeof w, "cuMemAllocManaged(%zu)", n);
        r = managed(&d, n, CU_MEM_ATTACH_GLOBAL);
        cu(w, r);
        if (r == CUDA_SUCCESS)
            cu("  cuMemFree_v2(managed)", free_(d));
    }
    cu("cuMemFree_v2(0)", free_(0));
    cu("cuMemFreeAsync(0)", afree(0, s));
    cu("cuMemFreeHost(NULL)", hfree(NULL));
    cu("cuMemAlloc_v2(NULL out)", malloc_(NULL, 16));
    sdestroy(s);
    return 0;
}
