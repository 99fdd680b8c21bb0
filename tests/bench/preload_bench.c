/*
 * preload_bench — a cudaMalloc/cudaFree churn (64 live slots, 512 B .. 4 MiB, mixed with
 * cudaMallocAsync/cudaFreeAsync on one stream), the allocation pattern of a training step.
 * Prints "ops <n> ns <elapsed> frees <of them frees>"; tests/bench/preload_bench.sh runs it with and without gpumem
 * and turns the two runs into BENCH lines (wall time per call, simulated driver time).
 *
 * preload_bench launch N: N cudaLaunchKernel calls of an empty host kernel with 8 pointer
 * parameters, each into its own allocation (what access tracking must resolve per launch).
 * Prints "launches <n> ns <elapsed> cpu_ns <the launching thread's CPU time>": the second
 * leaves out the time the thread waited for a core (the recorder's writer and the virtual GPU's
 * worker share the machine's cores with it).
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void k_empty(void **params) { (void)params; }

static long long since_ns(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (long long)(t1.tv_sec - t0->tv_sec) * 1000000000LL + (t1.tv_nsec - t0->tv_nsec);
}

static int launch_bench(int n)
{
    if (cudaFree(NULL) != cudaSuccess)
        return 1;
    /* the virtual GPU's registration call, in the driver the runtime loaded (absent on a GPU) */
    CUresult (*reg)(const char *, void (*)(void **), unsigned, const size_t *, CUfunction *) =
        (CUresult(*)(const char *, void (*)(void **), unsigned, const size_t *,
                     CUfunction *))dlsym(RTLD_DEFAULT, "sim_register_kernel");
    if (!reg) {
        fprintf(stderr, "preload_bench: launch needs the virtual GPU (sim_register_kernel)\n");
        return 1;
    }
    size_t sz[8];
    void *bufs[8], *args[8];
    for (int i = 0; i < 8; i++) {
        sz[i] = sizeof(void *);
        if (cudaMalloc(&bufs[i], 4096) != cudaSuccess)
            return 1;
        args[i] = &bufs[i];
    }
    CUfunction f;
    if (reg("bench_kernel8", k_empty, 8, sz, &f) != CUDA_SUCCESS)
        return 1;
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    for (int i = 0; i < 100; i++) /* first launch: layout and name queries, not measured */
        if (cudaLaunchKernel((const void *)f, g, b, args, 0, 0) != cudaSuccess)
            return 1;
    struct timespec t0, c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++)
        if (cudaLaunchKernel((const void *)f, g, b, args, 0, 0) != cudaSuccess)
            return 1;
    long long ns = since_ns(&t0);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    long long cpu = (long long)(c1.tv_sec - c0.tv_sec) * 1000000000LL + (c1.tv_nsec - c0.tv_nsec);
    for (int i = 0; i < 8; i++)
        cudaFree(bufs[i]);
    printf("launches %d ns %lld cpu_ns %lld\n", n, ns, cpu);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "launch"))
        return launch_bench(argc > 2 ? atoi(argv[2]) : 10000);
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    void *slot[64] = {0};
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess)
        return 1;
    unsigned seed = 42;
    struct timespec t0, t1;
    int frees = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 8) % 64);
        int async = (seed >> 30) & 1;
        if (slot[k]) {
            if ((async ? cudaFreeAsync(slot[k], s) : cudaFree(slot[k])) != cudaSuccess)
                return 1;
            slot[k] = NULL;
            frees++;
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
    printf("ops %d ns %lld frees %d\n", n, ns, frees);
    return 0;
}
