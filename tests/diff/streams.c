/* Finding 4: stream handles. Stream-ordered calls on a created stream, the legacy and
 * per-thread default streams, a destroyed stream and a made-up handle: the code (400 =
 * cudaErrorInvalidResourceHandle / 400 = CUDA_ERROR_INVALID_HANDLE), the out-parameter, the
 * last error — through the runtime and the driver. */
#include "tests/diff/diff.h"

int main(void)
{
    DRV(amalloc, cuMemAllocAsync);
    DRV(afree, cuMemFreeAsync);
    cudaStream_t s, dead;
    cudaStreamCreate(&s);
    cudaStreamCreateWithFlags(&dead, cudaStreamNonBlocking);
    void *p = NULL;
    rt_state("cudaMallocAsync on dead-to-be stream", cudaMallocAsync(&p, 4096, dead));
    rt_state("cudaFreeAsync", cudaFreeAsync(p, dead));
    rt_state("cudaStreamDestroy", cudaStreamDestroy(dead));
    cudaStream_t fake = (cudaStream_t)(uintptr_t)0xdead0;
    struct { const char *name; cudaStream_t st; } ss[] = {
        {"created", s}, {"legacy (0)", 0}, {"cudaStreamLegacy", cudaStreamLegacy},
        {"cudaStreamPerThread", cudaStreamPerThread}, {"destroyed", dead}, {"made-up", fake}};
    for (size_t i = 0; i < sizeof ss / sizeof ss[0]; i++) {
        char w[128];
        p = (void *)0x1234;
        snprintf(w, sizeof w, "cudaMallocAsync(4096, %s)", ss[i].name);
        cudaError_t e = cudaMallocAsync(&p, 4096, ss[i].st);
        rt_state(w, e);
        printf("  out: %s\n", p == NULL ? "NULL" : p == (void *)0x1234 ? "untouched" : "set");
        void *q = NULL;
        cudaMalloc(&q, 4096);
        snprintf(w, sizeof w, "cudaFreeAsync(cudaMalloc'ed, %s)", ss[i].name);
        e = cudaFreeAsync(q, ss[i].st);
        rt_state(w, e);
        if (e != cudaSuccess)
            cudaFree(q);
        if (p && p != (void *)0x1234)
            cudaFreeAsync(p, s);
        CUdeviceptr d = 0x1234;
        snprintf(w, sizeof w, "cuMemAllocAsync(4096, %s)", ss[i].name);
        CUresult r = amalloc(&d, 4096, (CUstream)ss[i].st);
        cu(w, r);
        printf("  out: %s\n", d == 0 ? "0" : d == 0x1234 ? "untouched" : "set");
        if (r == CUDA_SUCCESS) {
            snprintf(w, sizeof w, "cuMemFreeAsync(%s)", ss[i].name);
            cu(w, afree(d, (CUstream)ss[i].st));
        } else {
            cudaMalloc(&q, 64);
            snprintf(w, sizeof w, "cuMemFreeAsync(cudaMalloc'ed, %s)", ss[i].name);
            r = afree((CUdeviceptr)(uintptr_t)q, (CUstream)ss[i].st);
            cu(w, r);
            if (r != CUDA_SUCCESS)
                cudaFree(q);
        }
    }
    /* per-thread default stream names */
    p = NULL;
    rt_state("cudaStreamSynchronize", cudaStreamSynchronize(s));
    rt_state("cudaStreamDestroy", cudaStreamDestroy(s));
    rt_state("cudaDeviceSynchronize", cudaDeviceSynchronize());
    return 0;
}
