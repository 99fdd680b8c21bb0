/* What a device reset takes: one allocation of each kind made before cudaDeviceReset (cudaMalloc,
 * cudaMallocAsync, cudaMallocHost, cudaMallocManaged), then asked about after it (pointer
 * attributes, a free). An H200 has answered reset.c (device memory is destroyed); the kinds here
 * are the ones no GPU has answered yet: the virtual GPU frees cudaMalloc'ed and stream-ordered
 * memory and keeps pinned host and managed memory (sim/README.md, Limits), and gpumem keeps its
 * pinned-host pool. tests/gpu/diff_all.sh records a GPU's answers the next time one is lent. Memory
 * is only asked about after the reset, never touched (a destroyed pinned buffer may be unmapped). */
#include "tests/diff/diff.h"

static void after(const char *what, void *p)
{
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    printf("%s after the reset: attributes rc %d, type %d\n", what, (int)e,
           e == cudaSuccess ? (int)a.type : -1);
    cudaGetLastError();
}

int main(void)
{
    cudaFree(NULL);
    void *dev = NULL, *async = NULL, *host = NULL, *managed = NULL;
    rt("cudaMalloc", cudaMalloc(&dev, 1 << 20));
    rt("cudaMallocAsync", cudaMallocAsync(&async, 1 << 20, 0));
    rt("cudaStreamSynchronize", cudaStreamSynchronize(0));
    rt("cudaMallocHost", cudaMallocHost(&host, 4096));
    rt("cudaMallocManaged", cudaMallocManaged(&managed, 4096, cudaMemAttachGlobal));
    rt_state("cudaDeviceReset", cudaDeviceReset());
    after("cudaMalloc'ed", dev);
    after("cudaMallocAsync'ed", async);
    after("cudaMallocHost'ed", host);
    after("cudaMallocManaged'ed", managed);
    rt_state("cudaFree of the cudaMalloc'ed", cudaFree(dev));
    rt_state("cudaFreeAsync of the cudaMallocAsync'ed", cudaFreeAsync(async, 0));
    rt_state("cudaStreamSynchronize", cudaStreamSynchronize(0));
    rt_state("cudaFreeHost", cudaFreeHost(host));
    rt_state("cudaFree of the managed", cudaFree(managed));
    return 0;
}
