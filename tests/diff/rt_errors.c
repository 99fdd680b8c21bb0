/* Finding 1: a failed runtime call leaves its error behind, and its out-parameter as the runtime
 * does. OOM (over capacity), NULL out-pointer, double and interior cudaFree, double
 * cudaFreeAsync, a refused cudaHostAlloc, double cudaFreeHost; the error is not sticky (a later
 * success leaves the last error until read). */
#include "tests/diff/diff.h"

int main(void)
{
    void *p = (void *)0x1234, *q = NULL;
    rt_state("cudaFree(NULL)", cudaFree(NULL));
    rt_state("cudaMalloc(1 TiB)", cudaMalloc(&p, (size_t)1 << 40));
    printf("  out-parameter after failure: %s\n", p == NULL ? "NULL" : p == (void *)0x1234 ? "untouched" : "other");
    rt_state("cudaMalloc(NULL, 1)", cudaMalloc(NULL, 1));
    /* an OOM, then a success: the last error stays until read */
    cudaMalloc(&p, (size_t)1 << 40);
    rt("cudaMalloc(4096) after an OOM", cudaMalloc(&q, 4096));
    printf("  last error: peek %d\n", (int)cudaPeekAtLastError());
    rt_state("cudaGetLastError clears", cudaSuccess);
    rt_state("cudaFree(ok)", cudaFree(q));
    rt_state("cudaFree(double)", cudaFree(q));
    cudaMalloc(&q, 4096);
    rt_state("cudaFree(interior)", cudaFree((char *)q + 512));
    rt_state("cudaFree(base)", cudaFree(q));
    cudaStream_t s;
    cudaStreamCreate(&s);
    void *a = NULL;
    rt_state("cudaMallocAsync(1000)", cudaMallocAsync(&a, 1000, s));
    rt_state("cudaFreeAsync(ok)", cudaFreeAsync(a, s));
    rt_state("cudaFreeAsync(double)", cudaFreeAsync(a, s));
    cudaStreamSynchronize(s);
    p = (void *)0x1234;
    rt_state("cudaMallocAsync(1 TiB)", cudaMallocAsync(&p, (size_t)1 << 40, s));
    printf("  out-parameter after failure: %s\n", p == NULL ? "NULL" : p == (void *)0x1234 ? "untouched" : "other");
    cudaStreamDestroy(s);
    void *h = (void *)0x1234;
    rt_state("cudaHostAlloc(flags 0x80)", cudaHostAlloc(&h, 4096, 0x80));
    printf("  out-parameter after failure: %s\n", h == NULL ? "NULL" : h == (void *)0x1234 ? "untouched" : "other");
    rt_state("cudaMallocHost(4096)", cudaMallocHost(&h, 4096));
    rt_state("cudaFreeHost(ok)", cudaFreeHost(h));
    rt_state("cudaFreeHost(double)", cudaFreeHost(h));
    rt_state("cudaMallocHost(NULL, 1)", cudaMallocHost(NULL, 1));
    return 0;
}
