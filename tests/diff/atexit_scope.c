/* What the CUDA runtime and driver answer in an atexit handler registered before the first CUDA
 * call, which runs after the runtime's own teardown on a GPU: an H200 answered atexit_free.c's
 * frees with cudaErrorCudartUnloading (4); here the other calls a program makes at exit — an
 * allocation, memory info, the device, a synchronization, the last error — and the driver's
 * (the current context, cuMemAlloc / cuMemFree). The virtual GPU has no runtime teardown yet
 * (tests/diff/gpu-differences.txt); tests/gpu/diff_all.sh records a GPU's answers the next time
 * one is lent, the data a model of the teardown needs. */
#include "tests/diff/diff.h"

static void late(void)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, 1 << 20);
    rt("atexit cudaMalloc", e);
    if (e == cudaSuccess) rt("atexit cudaFree of it", cudaFree(p));
    size_t fr, tot;
    rt("atexit cudaMemGetInfo", cudaMemGetInfo(&fr, &tot));
    int dev = -1;
    rt("atexit cudaGetDevice", cudaGetDevice(&dev));
    rt("atexit cudaDeviceSynchronize", cudaDeviceSynchronize());
    rt("atexit cudaGetLastError", cudaGetLastError());
    DRV(ctx_get, cuCtxGetCurrent);
    DRV(mem_alloc, cuMemAlloc_v2);
    DRV(mem_free, cuMemFree_v2);
    CUcontext ctx = NULL;
    cu("atexit cuCtxGetCurrent", ctx_get(&ctx));
    printf("  a context current: %s\n", ctx ? "yes" : "no");
    CUdeviceptr d = 0;
    CUresult r = mem_alloc(&d, 1 << 20);
    cu("atexit cuMemAlloc", r);
    if (r == CUDA_SUCCESS) cu("atexit cuMemFree of it", mem_free(d));
    fflush(stdout);
}

int main(void)
{
    atexit(late); /* before any CUDA call */
    void *p;
    rt("cudaMalloc", cudaMalloc(&p, 1 << 20));
    rt("cudaFree", cudaFree(p));
    return 0;
}
