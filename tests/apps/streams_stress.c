/*
 * streams_stress — many threads and streams allocating, launching and freeing across streams,
 * with host kernels that check every block's canary (tests/integration/preload_streams_stress.sh).
 *
 *   streams_stress SECONDS [THREADS [STREAMS]]     defaults: 8 threads, 4 streams each
 *
 * Each thread owns STREAMS streams plus its per-thread default stream. In a loop, for SECONDS:
 * it allocates a block on one of them (cudaMallocAsync, sometimes cudaMalloc), fills it with a
 * canary of its own (thread, sequence number) with a kernel on that stream, checks it with a
 * slower kernel on the same stream, sometimes hands the block to a second stream (event + wait,
 * gpumem_record_stream, another check there), and frees it (cudaFreeAsync on the allocation
 * stream, or cudaFree). A check kernel that finds anything but its owner's canary means the
 * allocator handed the block to someone else while work issued before its free could still run.
 * On the virtual GPU's asynchronous mode (kernels run later, on each stream's worker) that is a
 * real race; with work that runs at issue time the test cannot fail, and says so.
 *
 * Prints "streams_stress: ok <allocations> allocations, <kernels> kernels, <threads> threads"
 * or "streams_stress: FAIL ..." and exits 1.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim/sim.h"

static CUfunction k_fill_fn, k_check_fn;
static int (*record_stream)(const void *, void *);
static atomic_long bad_words, checks_run, allocs, kernels, api_errors;
static double deadline;
static int nstreams = 4;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* k_fill(uint64_t *p, uint64_t nwords, uint64_t canary) */
static void k_fill(void **a)
{
    uint64_t *p = *(uint64_t **)a[0];
    uint64_t n = *(uint64_t *)a[1], c = *(uint64_t *)a[2];
    for (uint64_t i = 0; i < n; i++)
        p[i] = c ^ i;
}

/* k_check(uint64_t *p, uint64_t nwords, uint64_t canary): slow on purpose (reads twice with a
 * pause between), so that work queued after it has every chance to overtake it if allowed */
static void k_check(void **a)
{
    volatile uint64_t *p = *(uint64_t **)a[0];
    uint64_t n = *(uint64_t *)a[1], c = *(uint64_t *)a[2];
    long badw = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (uint64_t i = 0; i < n; i++)
            badw += p[i] != (c ^ i);
        if (pass == 0) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
    if (badw) atomic_fetch_add(&bad_words, badw);
    atomic_fetch_add(&checks_run, 1);
}

static void rt_check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        if (atomic_fetch_add(&api_errors, 1) < 5)
            printf("streams_stress: %s: %s\n", what, cudaGetErrorString(e));
    }
}
#define RT(call) rt_check((call), #call)

static void launch(CUfunction f, uint64_t *p, uint64_t n, uint64_t canary, cudaStream_t s)
{
    void *args[] = {&p, &n, &canary};
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    RT(cudaLaunchKernel((const void *)f, g, b, args, 0, s));
    atomic_fetch_add(&kernels, 1);
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    uint64_t seed = 0x9E3779B97F4A7C15ull * (id + 1);
    cudaStream_t s[16];
    cudaEvent_t ev;
    for (int i = 0; i < nstreams; i++)
        RT(cudaStreamCreate(&s[i]));
    s[nstreams] = cudaStreamPerThread; /* the thread's own default stream */
    RT(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    uint64_t seq = 0;
    while (now_s() < deadline) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        unsigned r = (unsigned)(seed >> 33);
        cudaStream_t as = s[r % (unsigned)(nstreams + 1)];
        size_t nwords = 64 + (r >> 8) % 8192; /* 512 B .. 64 KiB */
        uint64_t canary = ((uint64_t)id << 48) | ++seq;
        uint64_t *p = NULL;
        int plain = (r >> 24) % 8 == 0;
        cudaError_t e = plain ? cudaMalloc((void **)&p, nwords * 8)
                              : cudaMallocAsync((void **)&p, nwords * 8, as);
        if (plain) as = 0; /* cudaMalloc'ed memory is used on the legacy stream here */
        rt_check(e, "malloc");
        if (e != cudaSuccess) continue;
        atomic_fetch_add(&allocs, 1);
        launch(k_fill_fn, p, nwords, canary, as);
        launch(k_check_fn, p, nwords, canary, as);
        if ((r >> 20) % 3 == 0) { /* a second stream reads it too, after the fill */
            cudaStream_t s2 = s[(r >> 4) % (unsigned)nstreams];
            RT(cudaEventRecord(ev, as));
            RT(cudaStreamWaitEvent(s2, ev, 0));
            launch(k_check_fn, p, nwords, canary, s2);
            if (record_stream) record_stream(p, s2);
        }
        if (plain)
            RT(cudaFree(p));
        else
            RT(cudaFreeAsync(p, as));
    }
    for (int i = 0; i < nstreams; i++) {
        RT(cudaStreamSynchronize(s[i]));
        RT(cudaStreamDestroy(s[i]));
    }
    RT(cudaStreamSynchronize(cudaStreamPerThread));
    RT(cudaEventDestroy(ev));
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: streams_stress SECONDS [THREADS [STREAMS]]\n");
        return 2;
    }
    double secs = atof(argv[1]);
    int nthreads = argc > 2 ? atoi(argv[2]) : 8;
    nstreams = argc > 3 ? atoi(argv[3]) : 4;
    if (secs <= 0 || nthreads < 1 || nthreads > 64 || nstreams < 1 || nstreams > 15) {
        fprintf(stderr,
                "streams_stress: bad arguments (SECONDS > 0, THREADS 1..64, STREAMS 1..15)\n");
        return 2;
    }
    size_t fill_sz[] = {sizeof(uint64_t *), sizeof(uint64_t), sizeof(uint64_t)};
    if (sim_register_kernel("k_fill", k_fill, 3, fill_sz, &k_fill_fn) != CUDA_SUCCESS ||
        sim_register_kernel("k_check", k_check, 3, fill_sz, &k_check_fn) != CUDA_SUCCESS) {
        printf("streams_stress: cannot register the host kernels\n");
        return 1;
    }
    record_stream = (int (*)(const void *, void *))dlsym(RTLD_DEFAULT, "gpumem_record_stream");
    deadline = now_s() + secs;
    pthread_t t[64];
    for (int i = 0; i < nthreads; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    RT(cudaDeviceSynchronize());
    long bw = atomic_load(&bad_words), ae = atomic_load(&api_errors);
    if (bw || ae) {
        printf("streams_stress: FAIL %ld words seen with another owner's data, %ld API errors "
               "(%ld allocations, %ld kernels)\n",
               bw, ae, atomic_load(&allocs), atomic_load(&kernels));
        return 1;
    }
    if (atomic_load(&checks_run) == 0) {
        printf("streams_stress: FAIL no check kernel ran\n");
        return 1;
    }
    printf("streams_stress: ok %ld allocations, %ld kernels, %d threads\n", atomic_load(&allocs),
           atomic_load(&kernels), nthreads);
    return 0;
}
