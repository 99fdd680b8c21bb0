/*
 * streams_app — stream handling of gpumem's allocator, one property per mode
 * (tests/integration/preload_streams.sh). Prints "streams_app: <mode> ok" and exits 0, or
 * names what went wrong and exits 1.
 *
 *   streams_app ptds     per-thread default streams are distinct streams: a block freed in
 *                        stream order on thread A's per-thread stream is reused by A at once and
 *                        never handed to thread B's per-thread stream while A's may still use it;
 *                        the legacy stream's two names (0, cudaStreamLegacy) are one stream.
 *   streams_app record   gpumem_record_stream (looked up with dlsym): 0 on a gpumem block, -1 on
 *                        a host pointer; prints "record <ptr> <stream>" for the test's SQL.
 *   streams_app multidev two devices, a stream on each, peer copies, each device's memory
 *                        freed while the other is current (fenced in its own context).
 *   streams_app churn N  N streams created (in batches of 64), each used for one allocation
 *                        and destroyed: the address space reserved for each comes back.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int bad;

static void check(int ok, const char *what)
{
    if (!ok) {
        printf("streams_app: %s\n", what);
        bad++;
    }
}
#define RT(call) check((call) == cudaSuccess, #call)

/* ---- per-thread default streams ------------------------------------------------------------ */

#define PTDS_SIZE (64 * 1024)
static void *a_block;

static void *thread_a(void *arg)
{
    (void)arg;
    void *p = NULL, *q = NULL;
    RT(cudaMallocAsync(&p, PTDS_SIZE, cudaStreamPerThread));
    RT(cudaFreeAsync(p, cudaStreamPerThread));
    RT(cudaMallocAsync(&q, PTDS_SIZE, cudaStreamPerThread));
    check(q == p, "thread A did not get its own freed block back on its per-thread stream");
    RT(cudaFreeAsync(q, cudaStreamPerThread));
    a_block = q;
    return NULL;
}

static void *thread_b(void *arg)
{
    (void)arg;
    void *p = NULL;
    RT(cudaMallocAsync(&p, PTDS_SIZE, cudaStreamPerThread));
    check(p != a_block, "thread B's per-thread stream got the block thread A freed on its own "
                        "per-thread stream (the two streams were taken for one)");
    RT(cudaFreeAsync(p, cudaStreamPerThread));
    return NULL;
}

static void ptds(void)
{
    pthread_t t;
    pthread_create(&t, NULL, thread_a, NULL);
    pthread_join(t, NULL);
    pthread_create(&t, NULL, thread_b, NULL);
    pthread_join(t, NULL);
    /* the legacy stream: 0 and cudaStreamLegacy name the same stream */
    void *p = NULL, *q = NULL;
    RT(cudaMallocAsync(&p, PTDS_SIZE, cudaStreamLegacy));
    RT(cudaFreeAsync(p, 0));
    RT(cudaMallocAsync(&q, PTDS_SIZE, 0));
    check(q == p, "a block freed on the legacy stream as 0 was not reused on cudaStreamLegacy");
    RT(cudaFree(q));
}

/* ---- record_stream ------------------------------------------------------------------------- */

static void record(void)
{
    int (*rs)(const void *, void *) = (int (*)(const void *, void *))dlsym(RTLD_DEFAULT,
                                                                             "gpumem_record_stream");
    if (!rs) {
        printf("streams_app: gpumem_record_stream not found (run under LD_PRELOAD=libgpumem.so)\n");
        bad++;
        return;
    }
    cudaStream_t s1, s2;
    RT(cudaStreamCreate(&s1));
    RT(cudaStreamCreate(&s2));
    void *p = NULL;
    RT(cudaMallocAsync(&p, 1 << 20, s1));
    check(rs((char *)p + 4096, s2) == 0, "gpumem_record_stream refused an interior pointer");
    int host;
    check(rs(&host, s2) == -1, "gpumem_record_stream accepted a host pointer");
    printf("record %llu %llu\n", (unsigned long long)(uintptr_t)p, (unsigned long long)(uintptr_t)s2);
    RT(cudaFreeAsync(p, s1));
    RT(cudaDeviceSynchronize());
    RT(cudaStreamDestroy(s1));
    RT(cudaStreamDestroy(s2));
}

/* ---- several devices ----------------------------------------------------------------------- */

/* k_slow_check(unsigned char *p, uint64_t n, int *ok): after 50 ms, are all n bytes 0xab? A host
 * kernel of the virtual GPU (sim_register_kernel, found in the driver with dlsym). */
static void k_slow_check(void **a)
{
    volatile unsigned char *p = *(unsigned char **)a[0];
    uint64_t n = *(uint64_t *)a[1];
    int *ok = *(int **)a[2];
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    int good = 1;
    for (uint64_t i = 0; i < n; i++)
        good &= p[i] == 0xab;
    *ok = good;
}

typedef int (*register_fn)(const char *, void (*)(void **), unsigned, const size_t *, void **);

/* Device 1's memory is freed while device 0 is current, with a slow kernel still reading it on
 * device 1's legacy stream; device 1 then reuses what it can and overwrites it from a
 * non-blocking stream. The free's fence must go on device 1's legacy stream (its context), not
 * device 0's: otherwise the block comes back at once and the kernel reads the new owner's
 * bytes. Meaningful on the asynchronous virtual GPU. */
static void cross_device_free(void)
{
    void *drv = dlopen("libcuda.so.1", RTLD_NOW);
    register_fn reg = drv ? (register_fn)dlsym(drv, "sim_register_kernel") : NULL;
    if (!reg) {
        printf("streams_app: no sim_register_kernel (not the virtual GPU)\n");
        bad++;
        return;
    }
    size_t sz[] = {sizeof(void *), sizeof(uint64_t), sizeof(int *)};
    void *f = NULL;
    check(reg("k_slow_check", k_slow_check, 3, sz, &f) == 0, "sim_register_kernel");
    enum { N = 1 << 16 };
    cudaStream_t nb;
    void *c1 = NULL, *q = NULL;
    static int ok = -1;
    RT(cudaSetDevice(1));
    RT(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    RT(cudaMalloc(&c1, N));
    RT(cudaMemset(c1, 0xab, N));
    uint64_t n = N;
    int *okp = &ok;
    void *args[] = {&c1, &n, &okp};
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    RT(cudaLaunchKernel(f, g, b, args, 0, 0)); /* device 1's legacy stream */
    RT(cudaSetDevice(0));
    RT(cudaFree(c1));
    /* long enough for a fence on an idle stream to complete, well inside the kernel's 50 ms */
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    RT(cudaSetDevice(1));
    RT(cudaMalloc(&q, N));
    if (getenv("STREAMS_APP_DEBUG")) printf("c1 %p q %p\n", c1, q);
    RT(cudaMemsetAsync(q, 0x11, N, nb));
    RT(cudaDeviceSynchronize());
    check(ok == 1, "a kernel on device 1 saw its block overwritten: the free of device 1's "
                   "memory while device 0 was current did not wait for device 1's stream");
    RT(cudaFree(q));
    RT(cudaStreamDestroy(nb));
    RT(cudaSetDevice(0));
}

/* Two devices (GPUMEM_SIM_DEVICES=2), a stream on each, a peer copy from device 0's block into
 * device 1's, and frees of each device's memory while the other device is current: gpumem must
 * fence each block in its own device's context. The test's stats say no free fell back to a
 * device synchronization (which a failed event record would cause). */
static void multidev(void)
{
    int n = 0;
    RT(cudaGetDeviceCount(&n));
    if (n < 2) {
        printf("streams_app: multidev needs 2 devices (GPUMEM_SIM_DEVICES=2), found %d\n", n);
        bad++;
        return;
    }
    enum { N = 1 << 20 };
    cudaStream_t s0, s1;
    void *p0 = NULL, *p1 = NULL, *c0 = NULL, *c1 = NULL;
    RT(cudaSetDevice(0));
    RT(cudaStreamCreate(&s0));
    RT(cudaMallocAsync(&p0, N, s0));
    RT(cudaMalloc(&c0, N)); /* a cudaMalloc'ed block: its cudaFree fences every stream */
    RT(cudaMemsetAsync(p0, 0xab, N, s0));
    RT(cudaStreamSynchronize(s0));
    RT(cudaSetDevice(1));
    RT(cudaDeviceEnablePeerAccess(0, 0));
    RT(cudaStreamCreate(&s1));
    RT(cudaMallocAsync(&p1, N, s1));
    RT(cudaMalloc(&c1, N));
    RT(cudaMemcpyPeerAsync(p1, 1, p0, 0, N, s1));
    RT(cudaMemcpyPeerAsync(c1, 1, p0, 0, N, s1));
    unsigned char h[64];
    RT(cudaMemcpyAsync(h, (char *)p1 + N - 64, sizeof h, cudaMemcpyDeviceToHost, s1));
    RT(cudaStreamSynchronize(s1));
    for (size_t i = 0; i < sizeof h; i++)
        if (h[i] != 0xab) {
            check(0, "the peer copy did not arrive");
            break;
        }
    /* device 1 current: free device 0's memory (cudaFree fences every stream of device 0) */
    RT(cudaFree(c0));
    RT(cudaFree(p0));
    RT(cudaSetDevice(0));
    RT(cudaFree(c1));
    RT(cudaFree(p1));
    /* reuse on each device */
    void *q0 = NULL, *q1 = NULL;
    RT(cudaMallocAsync(&q0, N, s0));
    RT(cudaSetDevice(1));
    RT(cudaMallocAsync(&q1, N, s1));
    RT(cudaFreeAsync(q1, s1));
    RT(cudaStreamSynchronize(s1));
    RT(cudaStreamDestroy(s1));
    RT(cudaSetDevice(0));
    RT(cudaFreeAsync(q0, s0));
    RT(cudaStreamSynchronize(s0));
    RT(cudaStreamDestroy(s0));
    cross_device_free();
}

/* ---- address space ------------------------------------------------------------------------- */

/* Streams are created in batches of 64 (live together, so that their handles differ: a destroyed
 * stream's handle is often the next one created), then each is used for one allocation and
 * destroyed; n streams in all. */
static void churn(int n)
{
    enum { BATCH = 64 };
    cudaStream_t s[BATCH];
    for (int done = 0; done < n && !bad; done += BATCH) {
        int k = n - done < BATCH ? n - done : BATCH;
        for (int i = 0; i < k; i++)
            RT(cudaStreamCreate(&s[i]));
        for (int i = 0; i < k && !bad; i++) {
            void *p = NULL;
            cudaError_t e = cudaMallocAsync(&p, 4096, s[i]);
            if (e != cudaSuccess) {
                printf("streams_app: stream %d of %d: cudaMallocAsync: %s\n", done + i, n,
                       cudaGetErrorString(e));
                bad++;
            }
            if (p) RT(cudaFreeAsync(p, s[i]));
            RT(cudaStreamDestroy(s[i]));
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: streams_app ptds|record|multidev|churn N\n");
        return 2;
    }
    if (!strcmp(argv[1], "ptds"))
        ptds();
    else if (!strcmp(argv[1], "record"))
        record();
    else if (!strcmp(argv[1], "multidev"))
        multidev();
    else if (!strcmp(argv[1], "churn") && argc > 2)
        churn(atoi(argv[2]));
    else {
        fprintf(stderr, "streams_app: unknown mode '%s'\n", argv[1]);
        return 2;
    }
    if (!bad) printf("streams_app: %s ok\n", argv[1]);
    return bad ? 1 : 0;
}
