/*
 * stack_top_app — one call of every entry point that records a call stack, each made by its own
 * function of this program (at_<entry point>) at the same depth below main:
 *     main -> run -> depth_2 -> depth_1 -> at_<entry point> -> the entry point
 * so that a recording with GPUMEM_STACKS=3 must hold, for every event with a stack, the frames
 * at_<entry point>, depth_1, depth_2 and nothing of gpumem's (tests/integration/stack_top.sh).
 * The entry points: the runtime's (by symbol), the driver's by symbol and through
 * cuGetProcAddress, gpumem's API (gpumem_record_stream, gpumem_torch_malloc/free,
 * gpumem_empty_cache, found with dlsym: absent without libgpumem.so), and the same API called
 * through another gpumem object (libgpumem_caller.so, as libgpumem_torch.so calls it).
 * Three rounds (the recorder's memo answers the repeats); prints the entry points it called,
 * one a line ("at_cudaMalloc"), for the test's table.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#define MIB ((size_t)1 << 20)

static int bad;
static volatile int sink; /* written after each call: no call below is a tail call */

#define OK(call)                                                                                   \
    do {                                                                                           \
        long r_ = (long)(call);                                                                    \
        if (r_ != 0) {                                                                             \
            fprintf(stderr, "stack_top_app: %s returned %ld\n", #call, r_);                        \
            bad = 1;                                                                               \
        }                                                                                          \
        sink++;                                                                                    \
    } while (0)

/* the program's state between the steps */
static void *d1, *d2, *h1, *h2, *m1, *t1, *p1;
static CUdeviceptr c1, c2, c3, c4, c5, c6;
static void *ch1, *ch2;
static size_t pitch;
static cudaMemPool_t pool;
static cudaStream_t stream;
static CUresult (*proc_alloc)(CUdeviceptr *, size_t);
static CUresult (*proc_free)(CUdeviceptr);
static CUresult (*proc_alloc_async)(CUdeviceptr *, size_t, CUstream);
static CUresult (*proc_free_async)(CUdeviceptr, CUstream);
static CUresult (*proc_alloc_pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
static int (*api_record_stream)(const void *, cudaStream_t);
static void *(*api_torch_malloc)(ssize_t, int, void *);
static void (*api_torch_free)(void *, ssize_t, int, void *);
static void (*api_empty_cache)(void);
static void *(*caller_malloc)(ssize_t, int, void *);
static void (*caller_free)(void *, ssize_t, int, void *);
static int (*caller_record_stream)(const void *, cudaStream_t);

#define AT(name, body)                                                                             \
    static __attribute__((noinline)) void at_##name(void)                                          \
    {                                                                                              \
        body;                                                                                      \
        sink++;                                                                                    \
    }

AT(cudaMalloc, OK(cudaMalloc(&d1, MIB)))
AT(cudaMallocAsync, OK(cudaMallocAsync(&d2, MIB, stream)))
AT(cudaMallocFromPoolAsync, OK(cudaMallocFromPoolAsync(&p1, MIB, pool, stream)))
AT(cudaMallocHost, OK(cudaMallocHost(&h1, 4096)))
AT(cudaHostAlloc, OK(cudaHostAlloc(&h2, 4096, 0)))
AT(cudaMallocManaged, OK(cudaMallocManaged(&m1, MIB, cudaMemAttachGlobal)))
AT(cuMemAlloc_v2, OK(cuMemAlloc(&c1, MIB)))
AT(cuMemAllocAsync, OK(cuMemAllocAsync(&c2, MIB, (CUstream)stream)))
AT(cuMemAllocFromPoolAsync, OK(cuMemAllocFromPoolAsync(&c5, MIB, (CUmemoryPool)pool, (CUstream)stream)))
AT(proc_cuMemAllocFromPoolAsync, OK(proc_alloc_pool(&c6, MIB, (CUmemoryPool)pool, (CUstream)stream)))
AT(cuMemAllocPitch_v2, OK(cuMemAllocPitch(&c4, &pitch, 1000, 4, 4)))
AT(cuMemAllocHost_v2, OK(cuMemAllocHost(&ch1, 4096)))
AT(cuMemHostAlloc, OK(cuMemHostAlloc(&ch2, 4096, 0)))
AT(proc_cuMemAlloc_v2, OK(proc_alloc(&c3, MIB)))
AT(gpumem_record_stream, OK(api_record_stream(d1, stream)))
AT(gpumem_torch_malloc, t1 = api_torch_malloc(MIB, 0, stream); OK(t1 == NULL))
AT(caller_torch_malloc, void *p = caller_malloc(MIB, 0, stream); OK(p == NULL);
   caller_free(p, MIB, 0, stream))
AT(caller_record_stream, OK(caller_record_stream(t1, stream)))
AT(gpumem_torch_free, api_torch_free(t1, MIB, 0, stream))
AT(cudaFreeAsync, OK(cudaFreeAsync(d2, stream)); OK(cudaFreeAsync(p1, stream)))
AT(cudaFree, OK(cudaFree(d1)))
AT(cudaFreeHost, OK(cudaFreeHost(h1)); OK(cudaFreeHost(h2)))
AT(cuMemFreeHost, OK(cuMemFreeHost(ch1)); OK(cuMemFreeHost(ch2)))
AT(cuMemFreeAsync, OK(cuMemFreeAsync(c2, (CUstream)stream)); OK(cuMemFreeAsync(c5, (CUstream)stream));
   OK(cuMemFreeAsync(c6, (CUstream)stream)))
AT(cuMemFree_v2, OK(cuMemFree(c1)); OK(cuMemFree(c4)))
AT(proc_cuMemFree_v2, OK(proc_free(c3)))
AT(proc_cuMemAllocAsync, OK(proc_alloc_async(&c3, MIB, (CUstream)stream)))
AT(proc_cuMemFreeAsync, OK(proc_free_async(c3, (CUstream)stream)))
AT(gpumem_empty_cache, api_empty_cache())

typedef void (*step_fn)(void);
static const struct {
    const char *name;
    step_fn fn;
    int api; /* needs libgpumem.so's API (1) or libgpumem_caller.so (2) */
} steps[] = {
#define S(n, api) {"at_" #n, at_##n, api}
    S(cudaMalloc, 0),           S(cudaMallocAsync, 0),      S(cudaMallocFromPoolAsync, 0),
    S(cudaMallocHost, 0),       S(cudaHostAlloc, 0),        S(cudaMallocManaged, 0),
    S(cuMemAlloc_v2, 0),        S(cuMemAllocAsync, 0),      S(cuMemAllocPitch_v2, 0),
    S(cuMemAllocFromPoolAsync, 0), S(proc_cuMemAllocFromPoolAsync, 0),
    S(cuMemAllocHost_v2, 0),    S(cuMemHostAlloc, 0),       S(proc_cuMemAlloc_v2, 0),
    S(gpumem_record_stream, 1), S(gpumem_torch_malloc, 1),
    S(caller_torch_malloc, 2),  S(caller_record_stream, 2), S(gpumem_torch_free, 1),
    S(cudaFreeAsync, 0),        S(cudaFree, 0),             S(cudaFreeHost, 0),
    S(cuMemFreeHost, 0),        S(cuMemFreeAsync, 0),       S(cuMemFree_v2, 0),
    S(proc_cuMemFree_v2, 0),    S(proc_cuMemAllocAsync, 0), S(proc_cuMemFreeAsync, 0),
    S(gpumem_empty_cache, 1),
#undef S
};

static __attribute__((noinline)) void depth_1(step_fn fn)
{
    fn();
    sink++;
}
static __attribute__((noinline)) void depth_2(step_fn fn)
{
    depth_1(fn);
    sink++;
}

static __attribute__((noinline)) int run(int have_api, int have_caller, int print)
{
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        if ((steps[i].api == 1 && !have_api) || (steps[i].api == 2 && !have_caller)) continue;
        depth_2(steps[i].fn);
        if (print) printf("%s\n", steps[i].name);
    }
    sink++;
    return bad;
}

int main(int argc, char **argv)
{
    OK(cudaSetDevice(0));
    OK(cudaStreamCreate(&stream));
    struct cudaMemPoolProps props = {0};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    OK(cudaMemPoolCreate(&pool, &props));
    OK(cuInit(0));
    CUdriverProcAddressQueryResult q;
    OK(cuGetProcAddress("cuMemAlloc", (void **)&proc_alloc, 12000, 0, &q));
    OK(cuGetProcAddress("cuMemFree", (void **)&proc_free, 12000, 0, &q));
    OK(cuGetProcAddress("cuMemAllocAsync", (void **)&proc_alloc_async, 12000, 0, &q));
    OK(cuGetProcAddress("cuMemFreeAsync", (void **)&proc_free_async, 12000, 0, &q));
    OK(cuGetProcAddress("cuMemAllocFromPoolAsync", (void **)&proc_alloc_pool, 12000, 0, &q));
    *(void **)&api_record_stream = dlsym(RTLD_DEFAULT, "gpumem_record_stream");
    *(void **)&api_torch_malloc = dlsym(RTLD_DEFAULT, "gpumem_torch_malloc");
    *(void **)&api_torch_free = dlsym(RTLD_DEFAULT, "gpumem_torch_free");
    *(void **)&api_empty_cache = dlsym(RTLD_DEFAULT, "gpumem_empty_cache");
    int have_api = api_record_stream && api_torch_malloc && api_torch_free && api_empty_cache;
    /* argv[1]: libgpumem_caller.so, loaded after the recording started (as Python loads
     * libgpumem_torch.so) */
    void *caller = have_api && argc > 1 ? dlopen(argv[1], RTLD_NOW) : NULL;
    if (argc > 1 && have_api && !caller) {
        fprintf(stderr, "stack_top_app: %s: %s\n", argv[1], dlerror());
        return 2;
    }
    if (caller) {
        *(void **)&caller_malloc = dlsym(caller, "gpumem_caller_malloc");
        *(void **)&caller_free = dlsym(caller, "gpumem_caller_free");
        *(void **)&caller_record_stream = dlsym(caller, "gpumem_caller_record_stream");
    }
    /* three rounds: the same stacks again, as the recorder's memo of walks answers them */
    int rc = 0;
    for (int round = 0; round < 3; round++)
        rc |= run(have_api, caller_malloc && caller_free && caller_record_stream, round == 0);
    OK(cudaStreamSynchronize(stream));
    OK(cudaMemPoolDestroy(pool));
    return rc || bad;
}
