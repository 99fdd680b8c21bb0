/*
 * streams_app — stream handling of gpumem's allocator, one property per mode
 * (tests/integration/preload_streams.sh). Prints "streams_app: <mode> ok" and exits 0, or
 * names what went wrong and exits 1.
 *
 *   streams_app ptds     per-thread default streams are distinct streams: a block freed in
 *                        stream order on thread A's per-thread stream is reused by A at once and
 *                        never handed to thread B's per-thread stream while A's may still use it;
 *                        the legacy stream's two names (0, cudaStreamLegacy) are one stream.
 *   streams_app ptds-exit N  N threads use their per-thread stream and exit, then 50 cudaMalloc /
 *                        cudaFree pairs: the exited threads' streams are not fenced any more.
 *   streams_app record   gpumem_record_stream (looked up with dlsym): 0 on a gpumem block, -1 on
 *                        a host pointer; prints "record <ptr> <stream>" for the test's SQL.
 *   streams_app multidev two devices, a stream on each, peer copies, each device's memory
 *                        freed while the other is current (fenced in its own context).
 *   streams_app graph    a CUDA graph captured with allocations inside it, instantiated and
 *                        replayed while the program allocates around it.
 *   streams_app ipc      cudaIpcGetMemHandle on a gpumem block (twice): prints "ipc <code> <name>"
 *                        per call; under gpumem the reason it is refused goes to stderr once.
 *                        Then the way that works: the block's handle exported as a POSIX fd,
 *                        imported and mapped again shows its bytes ("ipc-export ok").
 *   streams_app churn N  N streams created (in batches of 64), each used for one allocation
 *                        and destroyed: the address space reserved for each comes back.
 *   streams_app uses     a block allocated on stream A is read by a slow kernel on stream B (no
 *                        record_stream), freed in stream order on A and allocated again on A:
 *                        with access tracking the new owner's bytes never reach the kernel
 *                        (meaningful on the asynchronous virtual GPU). Prints "uses reused
 *                        <0|1>" (whether the new allocation got the old block's address).
 *   streams_app uses-memo fresh|mixed|reset
 *                        the same read on stream B after a kernel on B that the launch hook
 *                        found with nothing to add (its per-thread memo, preload/uses.c
 *                        use_streams), the block then made where B is not its only stream:
 *                        fresh: B's kernel ran before the device had an allocator, the block is
 *                        cudaMalloc'ed (the legacy stream) and freed in order on it; mixed:
 *                        every block was on B, the block is the first on A; reset: every block
 *                        was on B, then cudaDeviceReset, and the block as in fresh.
 *   streams_app uses-memo-threads ROUNDS
 *                        the same with two threads: one launches on B (first a kernel with
 *                        nothing to add, then one after another) while the main thread makes the
 *                        block on another stream and hands it over; rounds alternate fresh and
 *                        mixed, each after the first from a cudaDeviceReset. Prints
 *                        "uses-memo-threads: R rounds, K overwritten, L launches ...".
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
/* Built as streams_app_ptsz with CUDA_API_PER_THREAD_DEFAULT_STREAM (what nvcc
 * --default-stream per-thread does): stream 0 is then the calling thread's own stream, through
 * the runtime's _ptsz entry points. The same property as ptds, with 0 for the stream. */
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#define PTDS_STREAM ((cudaStream_t)0)
#else
#define PTDS_STREAM cudaStreamPerThread
#endif
static void *a_block;

static void *thread_b(void *arg);

static void *thread_a(void *arg)
{
    (void)arg;
    void *p = NULL, *q = NULL;
    RT(cudaMallocAsync(&p, PTDS_SIZE, PTDS_STREAM));
    RT(cudaFreeAsync(p, PTDS_STREAM));
    RT(cudaMallocAsync(&q, PTDS_SIZE, PTDS_STREAM));
    check(q == p, "thread A did not get its own freed block back on its per-thread stream");
    RT(cudaFreeAsync(q, PTDS_STREAM));
    a_block = q;
    /* thread B runs while A lives: once A has exited, its stream is gone and its memory may
     * rightly be handed to anyone */
    pthread_t t;
    pthread_create(&t, NULL, thread_b, NULL);
    pthread_join(t, NULL);
    return NULL;
}

static void *thread_b(void *arg)
{
    (void)arg;
    void *p = NULL;
    RT(cudaMallocAsync(&p, PTDS_SIZE, PTDS_STREAM));
    check(p != a_block, "thread B's per-thread stream got the block thread A freed on its own "
                        "per-thread stream (the two streams were taken for one)");
    RT(cudaFreeAsync(p, PTDS_STREAM));
    return NULL;
}


static void ptds(void)
{
    pthread_t t;
    pthread_create(&t, NULL, thread_a, NULL);
    pthread_join(t, NULL);
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
    return; /* 0 is not the legacy stream in this build */
#endif
    /* the legacy stream: 0 and cudaStreamLegacy name the same stream */
    void *p = NULL, *q = NULL;
    RT(cudaMallocAsync(&p, PTDS_SIZE, cudaStreamLegacy));
    RT(cudaFreeAsync(p, 0));
    RT(cudaMallocAsync(&q, PTDS_SIZE, 0));
    check(q == p, "a block freed on the legacy stream as 0 was not reused on cudaStreamLegacy");
    RT(cudaFree(q));
}

/* Threads that used their per-thread stream and exited leave nothing for later frees to fence:
 * n such threads, then 50 cudaMalloc/cudaFree pairs (the test counts the events recorded). */
static void *ptds_user(void *arg)
{
    (void)arg;
    void *p = NULL;
    RT(cudaMallocAsync(&p, 4096, cudaStreamPerThread));
    RT(cudaFreeAsync(p, cudaStreamPerThread));
    RT(cudaStreamSynchronize(cudaStreamPerThread));
    return NULL;
}

static void ptds_exit(int n)
{
    for (int i = 0; i < n; i++) {
        pthread_t t;
        pthread_create(&t, NULL, ptds_user, NULL);
        pthread_join(t, NULL);
    }
    for (int i = 0; i < 50; i++) {
        void *p = NULL;
        RT(cudaMalloc(&p, 4096));
        RT(cudaFree(p));
    }
}

/* ---- record_stream ------------------------------------------------------------------------- */

static void record(void)
{
    int (*rs)(const void *, void *) =
        (int (*)(const void *, void *))dlsym(RTLD_DEFAULT, "gpumem_record_stream");
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
    printf("record %llu %llu\n", (unsigned long long)(uintptr_t)p,
           (unsigned long long)(uintptr_t)s2);
    RT(cudaFreeAsync(p, s1));
    RT(cudaDeviceSynchronize());
    RT(cudaStreamDestroy(s1));
    RT(cudaStreamDestroy(s2));
}

/* ---- several devices ----------------------------------------------------------------------- */

/* k_slow_check(unsigned char *p, uint64_t n, int *ok): after slow_check_ms (50 ms; uses: 250), are
 * all n bytes 0xab? A host kernel of the virtual GPU (sim_register_kernel, found in the driver with
 * dlsym). */
static long slow_check_ms = 50;
static void k_slow_check(void **a)
{
    volatile unsigned char *p = *(unsigned char **)a[0];
    uint64_t n = *(uint64_t *)a[1];
    int *ok = *(int **)a[2];
    struct timespec ts = {slow_check_ms / 1000, slow_check_ms % 1000 * 1000 * 1000};
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

/* ---- CUDA graphs ---------------------------------------------------------------------------- */

/* k_set(float *p, uint64_t n, float v); k_add(float *acc, const float *x, uint64_t n) */
static void k_set(void **a)
{
    float *p = *(float **)a[0];
    uint64_t n = *(uint64_t *)a[1];
    float v = *(float *)a[2];
    for (uint64_t i = 0; i < n; i++)
        p[i] = v;
}
static void k_add(void **a)
{
    float *acc = *(float **)a[0];
    const float *x = *(const float **)a[1];
    uint64_t n = *(uint64_t *)a[2];
    for (uint64_t i = 0; i < n; i++)
        acc[i] += x[i];
}

static void *sim_kernel(const char *name, void (*fn)(void **), unsigned np, const size_t *sz)
{
    /* the runtime loads the driver first: then dlopen finds it by its soname, also under a
     * sanitizer (whose dlopen does not apply this program's RUNPATH) */
    RT(cudaFree(NULL));
    void *drv = dlopen("libcuda.so.1", RTLD_NOW);
    register_fn reg = drv ? (register_fn)dlsym(drv, "sim_register_kernel") : NULL;
    void *f = NULL;
    if (!reg || reg(name, fn, np, sz, &f) != 0) {
        printf("streams_app: cannot register %s (not the virtual GPU?)\n", name);
        bad++;
    }
    return f;
}

static void launch3(void *f, void *a0, void *a1, void *a2, cudaStream_t s)
{
    void *args[] = {a0, a1, a2};
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    RT(cudaLaunchKernel(f, g, b, args, 0, s));
}

/* A graph captured with allocations inside it (memory nodes): a block allocated, used and freed
 * in the capture and another allocated after that free (which may reuse it: graph order is
 * stream order), and a block allocated before the capture and used inside it (a captured free
 * must name a graph allocation: it is freed once the graph is gone). After the capture the
 * program allocates and scribbles on new memory between replays; none of it may be memory the
 * graph uses, so every replay adds exactly 7 + 1 + 2 to acc. */
static void graph(void)
{
    enum { N = 4096 };
    size_t set_sz[] = {sizeof(float *), sizeof(uint64_t), sizeof(float)};
    size_t add_sz[] = {sizeof(float *), sizeof(float *), sizeof(uint64_t)};
    void *kset = sim_kernel("k_set", k_set, 3, set_sz),
         *kadd = sim_kernel("k_add", k_add, 3, add_sz);
    if (bad) return;
    cudaStream_t s;
    RT(cudaStreamCreate(&s)); /* a blocking stream: the legacy stream is off limits meanwhile */
    float *acc = NULL, *old = NULL, *a = NULL, *b = NULL;
    uint64_t n = N;
    float seven = 7, one = 1, two = 2;
    RT(cudaMalloc((void **)&acc, N * sizeof(float)));
    RT(cudaMemset(acc, 0, N * sizeof(float)));
    RT(cudaMalloc((void **)&old, N * sizeof(float)));
    RT(cudaMemset(old, 0, N * sizeof(float)));
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    RT(cudaMallocAsync((void **)&a, N * sizeof(float), s));
    launch3(kset, &a, &n, &seven, s);
    launch3(kadd, &acc, &a, &n, s);
    RT(cudaFreeAsync(a, s));
    RT(cudaMallocAsync((void **)&b, N * sizeof(float), s));
    launch3(kset, &b, &n, &one, s);
    launch3(kadd, &acc, &b, &n, s);
    RT(cudaFreeAsync(b, s));
    launch3(kset, &old, &n, &two, s);
    launch3(kadd, &acc, &old, &n, s);
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    RT(cudaStreamEndCapture(s, &g));
    RT(cudaGraphInstantiate(&x, g, 0));
    if (bad) return;
    void *junk[4] = {0};
    for (int r = 0; r < 3; r++) {
        /* new memory between replays, of the sizes the graph uses, scribbled over */
        RT(cudaMalloc(&junk[r], N * sizeof(float)));
        RT(cudaMemset(junk[r], 0x7f, N * sizeof(float)));
        RT(cudaGraphLaunch(x, s));
        RT(cudaStreamSynchronize(s));
    }
    float h[N];
    RT(cudaMemcpy(h, acc, sizeof h, cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < N; i++)
        wrong += h[i] != 30.0f;
    if (wrong) {
        printf("streams_app: after 3 replays %d of %d sums are wrong (acc[0] = %g, expected 30): "
               "memory the graph uses was handed out meanwhile\n",
               wrong, N, h[0]);
        bad++;
    }
    for (int r = 0; r < 3; r++)
        check(junk[r] != (void *)old && junk[r] != (void *)a && junk[r] != (void *)b,
              "a block the graph uses was handed out while the graph lives");
    RT(cudaGraphExecDestroy(x));
    RT(cudaGraphDestroy(g));
    for (int r = 0; r < 3; r++)
        RT(cudaFree(junk[r]));
    RT(cudaFree(old));
    RT(cudaFree(acc));
    RT(cudaStreamDestroy(s));
}

/* ---- IPC ------------------------------------------------------------------------------------ */

/* cudaIpcGetMemHandle on a cudaMalloc'ed block, twice: under gpumem it is refused with
 * cudaErrorNotSupported (the reason goes to stderr once, the test reads it). */
typedef CUresult (*retain_fn)(CUmemGenericAllocationHandle *, void *);
typedef CUresult (*export_fn)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                              unsigned long long);
typedef CUresult (*import_fn)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long);
typedef CUresult (*access_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);

/* The way that works: the physical handle behind a gpumem block, exported as a POSIX file
 * descriptor and imported again (here, in the same process: a second mapping of the same
 * memory), shows the bytes written through the block. gpumem maps one handle per 2 MiB slot of
 * a range aligned to it, so the block lies at p mod 2 MiB inside its handle. Prints
 * "ipc-export ok" or why not. */
static void ipc_export(void *p, size_t n)
{
    void *drv = dlopen("libcuda.so.1", RTLD_NOW);
    retain_fn retain = drv ? (retain_fn)dlsym(drv, "cuMemRetainAllocationHandle") : NULL;
    export_fn exp = drv ? (export_fn)dlsym(drv, "cuMemExportToShareableHandle") : NULL;
    import_fn imp = drv ? (import_fn)dlsym(drv, "cuMemImportFromShareableHandle") : NULL;
    reserve_fn reserve = drv ? (reserve_fn)dlsym(drv, "cuMemAddressReserve") : NULL;
    map_fn map = drv ? (map_fn)dlsym(drv, "cuMemMap") : NULL;
    access_fn access = drv ? (access_fn)dlsym(drv, "cuMemSetAccess") : NULL;
    unmap_fn unmap = drv ? (unmap_fn)dlsym(drv, "cuMemUnmap") : NULL;
    release_fn release = drv ? (release_fn)dlsym(drv, "cuMemRelease") : NULL;
    if (!retain || !exp || !imp || !reserve || !map || !access || !unmap || !release) {
        printf("streams_app: the driver lacks the VMM sharing calls\n");
        bad++;
        return;
    }
    const size_t slot = 2u << 20;
    RT(cudaMemset(p, 0x5a, n));
    RT(cudaDeviceSynchronize());
    CUmemGenericAllocationHandle h = 0, h2 = 0;
    int fd = -1;
    CUresult r = retain(&h, p);
    if (r == CUDA_SUCCESS) r = exp(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) {
        printf("streams_app: the block's handle cannot be exported as a POSIX fd (CUresult %d)\n",
               (int)r);
        bad++;
        if (h) release(h);
        return;
    }
    CUdeviceptr va = 0;
    check(imp(&h2, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0,
          "cuMemImportFromShareableHandle");
    check(reserve(&va, slot, slot, 0, 0) == 0, "cuMemAddressReserve");
    check(map(va, slot, 0, h2, 0) == 0, "cuMemMap of the imported handle");
    CUmemAccessDesc ad = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    check(access(va, slot, &ad, 1) == 0, "cuMemSetAccess");
    unsigned char got[256];
    size_t off = (uintptr_t)p % slot;
    RT(cudaMemcpy(got, (void *)(uintptr_t)(va + off), sizeof got, cudaMemcpyDeviceToHost));
    int same = 1;
    for (size_t i = 0; i < sizeof got; i++)
        same &= got[i] == 0x5a;
    check(same, "the imported handle does not show the block's bytes");
    unmap(va, slot);
    release(h2);
    release(h);
    close(fd);
    if (same) printf("ipc-export ok\n");
}

static void ipc(void)
{
    void *p = NULL;
    RT(cudaMalloc(&p, 1 << 20));
    cudaIpcMemHandle_t h;
    for (int i = 0; i < 2; i++) {
        cudaError_t e = cudaIpcGetMemHandle(&h, (char *)p + (i ? 4096 : 0));
        printf("ipc %d %s\n", (int)e, cudaGetErrorName(e));
    }
    ipc_export(p, 1 << 20);
    RT(cudaFree(p));
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

/* ---- uses seen by access tracking ----------------------------------------------------------- */

/* A block allocated and freed in stream order on A while a kernel on B still reads it: nothing
 * but access tracking tells gpumem about B (the program never calls record_stream, as a program
 * that forgot it would not). The kernel checks a canary written by the block's owner before the
 * free; the next owner, on A, overwrites what it gets at once. */
static void uses(void)
{
    size_t sz[] = {sizeof(void *), sizeof(uint64_t), sizeof(int *)};
    void *f = sim_kernel("k_slow_check", k_slow_check, 3, sz);
    if (bad) return;
    slow_check_ms = 250; /* the next owner's memset on A has ample time to run meanwhile */
    enum { N = 1 << 16 };
    cudaStream_t sa, sb;
    void *p = NULL, *q = NULL;
    static int ok = -1;
    RT(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    RT(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
    RT(cudaMallocAsync(&p, N, sa));
    RT(cudaMemsetAsync(p, 0xab, N, sa));
    RT(cudaStreamSynchronize(sa));
    uint64_t n = N;
    int *okp = &ok;
    void *args[] = {&p, &n, &okp};
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    RT(cudaLaunchKernel(f, g, b, args, 0, sb)); /* reads p after 250 ms, on B */
    RT(cudaFreeAsync(p, sa));
    /* long enough for a fence on an idle stream to complete, well inside the kernel's sleep */
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    RT(cudaMallocAsync(&q, N, sa));
    RT(cudaMemsetAsync(q, 0x11, N, sa));
    RT(cudaStreamSynchronize(sa));
    RT(cudaStreamSynchronize(sb));
    printf("uses reused %d\n", p == q);
    check(ok == 1, "uses: the kernel on stream B saw its block overwritten: the block was handed "
                   "out again on stream A before B's work was done");
    RT(cudaFreeAsync(q, sa));
    RT(cudaStreamSynchronize(sa));
    RT(cudaStreamDestroy(sa));
    RT(cudaStreamDestroy(sb));
}

static void k_nop(void **a) { (void)a; }
/* k_fill(unsigned char *p, uint64_t n): the canary, 0xab */
static void k_fill(void **a) { memset(*(unsigned char **)a[0], 0xab, *(uint64_t *)a[1]); }

/* uses-memo: a kernel on B that gives the launch hook nothing to add, then the uses case on a
 * block whose stream is not B (the hook must ask the allocator again: the memo is stale) */
static void uses_memo(const char *how)
{
    size_t sz[] = {sizeof(void *), sizeof(uint64_t), sizeof(int *)}, nsz[] = {sizeof(void *)};
    void *f = sim_kernel("k_slow_check", k_slow_check, 3, sz), *fnop = sim_kernel("k_nop", k_nop, 1, nsz),
         *ffill = sim_kernel("k_fill", k_fill, 2, sz);
    if (bad) return;
    slow_check_ms = 250;
    enum { N = 1 << 16 };
    int fresh = !strcmp(how, "fresh"), mixed = !strcmp(how, "mixed"), reset = !strcmp(how, "reset");
    if (!fresh && !mixed && !reset) {
        check(0, "uses-memo: fresh, mixed or reset");
        return;
    }
    cudaStream_t sa = 0, sb;
    void *x = NULL, *p = NULL, *q = NULL;
    static int ok = -1;
    RT(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
    if (mixed)
        RT(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    if (!fresh)
        RT(cudaMallocAsync(&x, N, sb)); /* every block on B */
    void *nargs[] = {&x};
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    RT(cudaLaunchKernel(fnop, g, b, nargs, 0, sb)); /* nothing to add: B is every block's stream */
    RT(cudaStreamSynchronize(sb));
    if (reset) {
        RT(cudaFreeAsync(x, sb));
        RT(cudaStreamSynchronize(sb));
        RT(cudaDeviceReset());
        RT(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
        RT(cudaLaunchKernel(fnop, g, b, nargs, 0, sb)); /* no allocator now: nothing to add */
        RT(cudaStreamSynchronize(sb));
    }
    RT(cudaMallocAsync(&p, N, sa));
    RT(cudaStreamSynchronize(sa));
    uint64_t n = N;
    int *okp = &ok;
    void *args[] = {&p, &n, &okp};
    /* the canary written on B too: no work on another stream in between, which would have the
     * hook ask the allocator again whatever it remembered */
    RT(cudaLaunchKernel(ffill, g, b, args, 0, sb));
    RT(cudaLaunchKernel(f, g, b, args, 0, sb)); /* reads p after 250 ms, on B */
    RT(cudaFreeAsync(p, sa));
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    RT(cudaMallocAsync(&q, N, sa));
    RT(cudaMemsetAsync(q, 0x11, N, sa));
    RT(cudaStreamSynchronize(sa));
    RT(cudaStreamSynchronize(sb));
    printf("uses-memo %s reused %d\n", how, p == q);
    check(ok == 1, "uses-memo: the kernel on stream B saw its block overwritten: the launch hook "
                   "skipped telling the allocator about B after the blocks' streams changed");
    RT(cudaFreeAsync(q, sa));
    if (mixed) RT(cudaFreeAsync(x, sb));
    RT(cudaDeviceSynchronize());
    if (mixed) RT(cudaStreamDestroy(sa));
    RT(cudaStreamDestroy(sb));
}

/* uses-memo-threads ROUNDS: the memo's case with two threads. A launching thread (memo_launcher)
 * runs kernels on its stream B, the first of them with nothing to add (so it remembers B), then
 * one launch after another while the main thread makes a block on another stream A (the
 * allocator's streams change: gm_heap_streams_gen is bumped as the launcher reads it); the block
 * is handed to the launcher (a mutex: the malloc happens before the launch that reads it), which
 * fills and reads it on B; the main thread frees it in order on A and takes it again there. A
 * launcher that kept its memo would not tell the allocator about B, and the new owner's bytes
 * would reach the slow kernel. Rounds alternate: fresh (no allocator when B's first kernel ran;
 * the block cudaMalloc'ed, on the legacy stream) and mixed (every block on B, the new one the
 * first on A); each round after the first starts with cudaDeviceReset (a fresh allocator). */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int phase; /* 0 idle, 1 go (remember B), 2 remembered, 3 the block is posted, 4 launched, 5 quit */
    cudaStream_t sb;
    void *x, *p;
    void *fnop, *ffill, *fcheck;
    int ok, failed; /* the slow kernel's answer; the launcher's failed calls */
    unsigned long spins; /* launches made while waiting for the block */
} ml = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void ml_set(int phase)
{
    pthread_mutex_lock(&ml.mu);
    ml.phase = phase;
    pthread_cond_broadcast(&ml.cv);
    pthread_mutex_unlock(&ml.mu);
}

static void ml_wait(int phase)
{
    pthread_mutex_lock(&ml.mu);
    while (ml.phase != phase && ml.phase != 5)
        pthread_cond_wait(&ml.cv, &ml.mu);
    pthread_mutex_unlock(&ml.mu);
}

static void *memo_launcher(void *arg)
{
    (void)arg;
    dim3 g = {1, 1, 1}, b = {1, 1, 1};
    uint64_t n = 1 << 16;
    int *okp = &ml.ok;
    for (;;) {
        ml_wait(1);
        pthread_mutex_lock(&ml.mu);
        int quit = ml.phase == 5;
        cudaStream_t sb = ml.sb;
        void *x = ml.x;
        pthread_mutex_unlock(&ml.mu);
        if (quit) break;
        void *nargs[] = {&x};
        int failed = cudaLaunchKernel(ml.fnop, g, b, nargs, 0, sb) != cudaSuccess; /* nothing to add */
        ml_set(2);
        void *p = NULL;
        unsigned long spins = 0;
        while (!p) { /* launches on B while the main thread allocates on A */
            failed += cudaLaunchKernel(ml.fnop, g, b, nargs, 0, sb) != cudaSuccess;
            spins++;
            pthread_mutex_lock(&ml.mu);
            if (ml.phase == 3) p = ml.p;
            pthread_mutex_unlock(&ml.mu);
        }
        void *args[] = {&p, &n, &okp};
        failed += cudaLaunchKernel(ml.ffill, g, b, args, 0, sb) != cudaSuccess;
        failed += cudaLaunchKernel(ml.fcheck, g, b, args, 0, sb) != cudaSuccess; /* reads p after 250 ms */
        pthread_mutex_lock(&ml.mu);
        ml.failed += failed;
        ml.spins += spins;
        ml.phase = 4;
        pthread_cond_broadcast(&ml.cv);
        pthread_mutex_unlock(&ml.mu);
    }
    return NULL;
}

static void uses_memo_threads(int rounds)
{
    size_t sz[] = {sizeof(void *), sizeof(uint64_t), sizeof(int *)}, nsz[] = {sizeof(void *)};
    ml.fcheck = sim_kernel("k_slow_check", k_slow_check, 3, sz);
    ml.fnop = sim_kernel("k_nop", k_nop, 1, nsz);
    ml.ffill = sim_kernel("k_fill", k_fill, 2, sz);
    if (bad) return;
    slow_check_ms = 250;
    enum { N = 1 << 16 };
    pthread_t t;
    check(pthread_create(&t, NULL, memo_launcher, NULL) == 0, "uses-memo-threads: pthread_create");
    if (bad) return;
    int seen_bad = 0;
    for (int r = 0; r < rounds; r++) {
        int mixed = r % 2;
        if (r) RT(cudaDeviceReset());
        cudaStream_t sa = 0, sb;
        void *x = NULL, *p = NULL, *q = NULL;
        RT(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
        if (mixed) {
            RT(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
            RT(cudaMallocAsync(&x, N, sb)); /* every block on B */
            RT(cudaStreamSynchronize(sb));
        }
        pthread_mutex_lock(&ml.mu);
        ml.sb = sb, ml.x = x, ml.p = NULL, ml.ok = -1;
        pthread_mutex_unlock(&ml.mu);
        ml_set(1);
        ml_wait(2);
        /* the streams change while the launcher launches on B */
        if (mixed)
            RT(cudaMallocAsync(&p, N, sa));
        else
            RT(cudaMalloc(&p, N));
        pthread_mutex_lock(&ml.mu);
        ml.p = p, ml.phase = 3;
        pthread_cond_broadcast(&ml.cv);
        pthread_mutex_unlock(&ml.mu);
        ml_wait(4);
        RT(cudaFreeAsync(p, sa));
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        RT(cudaMallocAsync(&q, N, sa));
        RT(cudaMemsetAsync(q, 0x11, N, sa));
        RT(cudaStreamSynchronize(sa));
        RT(cudaStreamSynchronize(sb));
        pthread_mutex_lock(&ml.mu);
        int ok = ml.ok;
        pthread_mutex_unlock(&ml.mu);
        if (ok != 1 && !seen_bad++)
            printf("uses-memo-threads: round %d (%s, block %s): the kernel on B saw its block overwritten: the "
                   "launching thread skipped telling the allocator about B after another thread's block changed "
                   "the blocks' streams\n",
                   r, mixed ? "mixed" : "fresh", p == q ? "reused" : "not reused");
        RT(cudaFreeAsync(q, sa));
        if (mixed) RT(cudaFreeAsync(x, sb));
        RT(cudaDeviceSynchronize());
        if (mixed) RT(cudaStreamDestroy(sa));
        RT(cudaStreamDestroy(sb));
    }
    ml_set(5);
    pthread_join(t, NULL);
    check(!seen_bad, "uses-memo-threads: a block read on B was reused under the kernel");
    check(!ml.failed, "uses-memo-threads: a launch on the launching thread failed");
    printf("uses-memo-threads: %d rounds, %d overwritten, %lu launches while the block was made\n", rounds,
           seen_bad, ml.spins);
}

/* ---- guard pages ---------------------------------------------------------------------------- */

/* k_write(unsigned char *p, uint64_t n): p[i] = 0xee for i < n, as a kernel that miscounts */
static void k_write(void **a)
{
    unsigned char *p = *(unsigned char **)a[0];
    uint64_t n = *(uint64_t *)a[1];
    for (uint64_t i = 0; i < n; i++)
        p[i] = 0xee;
}

/* A kernel writes `over` bytes past the end of a 1000-byte allocation (its block is 1024 bytes:
 * over > 24 leaves it). With GPUMEM_CONF=guard:1 that write faults (SIGSEGV here, an illegal
 * address on a GPU); without, it silently lands in whatever follows. Prints whether the
 * neighbour allocated right after it changed, when it survives. */
static void guard(int over)
{
    size_t sz[] = {sizeof(unsigned char *), sizeof(uint64_t)};
    void *kw = sim_kernel("k_write", k_write, 2, sz);
    if (bad) return;
    unsigned char *a = NULL, *b = NULL;
    RT(cudaMalloc((void **)&a, 1000));
    RT(cudaMalloc((void **)&b, 1000));
    RT(cudaMemset(b, 0x11, 1000));
    uint64_t n = 1000 + (uint64_t)over;
    void *args[] = {&a, &n};
    dim3 g = {1, 1, 1}, blk = {1, 1, 1};
    printf("guard: writing %d bytes past the end\n", over);
    fflush(stdout);
    RT(cudaLaunchKernel(kw, g, blk, args, 0, 0));
    RT(cudaDeviceSynchronize());
    unsigned char h[1000];
    RT(cudaMemcpy(h, b, sizeof h, cudaMemcpyDeviceToHost));
    int changed = 0;
    for (int i = 0; i < 1000; i++)
        changed |= h[i] != 0x11;
    printf("guard: survived, neighbour %s\n", changed ? "changed" : "intact");
    RT(cudaFree(a));
    RT(cudaFree(b));
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr,
                "usage: streams_app ptds|ptds-exit N|record|multidev|graph|ipc|churn N|uses|"
                "uses-memo fresh|mixed|reset|uses-memo-threads ROUNDS|guard N\n");
        return 2;
    }
    if (!strcmp(argv[1], "ptds"))
        ptds();
    else if (!strcmp(argv[1], "record"))
        record();
    else if (!strcmp(argv[1], "ptds-exit") && argc > 2)
        ptds_exit(atoi(argv[2]));
    else if (!strcmp(argv[1], "ipc"))
        ipc();
    else if (!strcmp(argv[1], "graph"))
        graph();
    else if (!strcmp(argv[1], "multidev"))
        multidev();
    else if (!strcmp(argv[1], "churn") && argc > 2)
        churn(atoi(argv[2]));
    else if (!strcmp(argv[1], "uses"))
        uses();
    else if (!strcmp(argv[1], "uses-memo") && argc > 2)
        uses_memo(argv[2]);
    else if (!strcmp(argv[1], "uses-memo-threads") && argc > 2)
        uses_memo_threads(atoi(argv[2]));
    else if (!strcmp(argv[1], "guard") && argc > 2)
        guard(atoi(argv[2]));
    else {
        fprintf(stderr, "streams_app: unknown mode '%s'\n", argv[1]);
        return 2;
    }
    if (!bad) printf("streams_app: %s ok\n", argv[1]);
    return bad ? 1 : 0;
}
