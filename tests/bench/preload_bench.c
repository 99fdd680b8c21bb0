/*
 * preload_bench — a cudaMalloc/cudaFree churn (64 live slots, 512 B .. 4 MiB, mixed with
 * cudaMallocAsync/cudaFreeAsync on one stream), the allocation pattern of a training step.
 * Prints "ops <n> ns <elapsed>"; tests/bench/preload_bench.sh runs it with and without gpumem
 * and turns the two runs into BENCH lines (wall time per call, simulated driver time).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    void *slot[64] = {0};
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess)
        return 1;
    unsigned seed = 42;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 8) % 64);
        int async = (seed >> 30) & 1;
        if (slot[k]) {
            if ((async ? cudaFreeAsync(slot[k], s) : cudaFree(slot[k])) != cudaSuccess)
                return 1;
            slot[k] = NULL;
        } else {
            size_t sz = 512u << ((seed >> 12) % 14); /* 512 B .. 4 MiB */
            sz += (seed >> 4) % sz;
            if ((async ? cudaMallocAsync(&slot[k], sz, s) : cudaMalloc(&slot[k], sz)) != cudaSuccess)
                return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int k = 0; k < 64; k++)
        if (slot[k])
            cudaFree(slot[k]);
    cudaStreamDestroy(s);
    long long ns = (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
    printf("ops %d ns %lld\n", n, ns);
    return 0;
}
