/* Finding 6: frees in an atexit handler registered before the first CUDA call (the handler runs
 * after gpumem's exit flush). The runner also checks that the recording has no leak. */
#include "tests/diff/diff.h"

static void *dev, *host;
static void late_free(void)
{
    rt("atexit cudaFree", cudaFree(dev));
    rt("atexit cudaFreeHost", cudaFreeHost(host));
    fflush(stdout);
}

int main(void)
{
    atexit(late_free); /* before any CUDA call */
    rt("cudaMalloc", cudaMalloc(&dev, 1 << 20));
    rt("cudaMallocHost", cudaMallocHost(&host, 4096));
    void *tmp;
    cudaMalloc(&tmp, 512);
    rt("cudaFree", cudaFree(tmp));
    return 0;
}
