/*
 * rt_app — a CUDA runtime program (linked to the virtual GPU's libcudart.so.13) that allocates
 * and frees device memory on several streams and threads, checks the memory holds what was
 * copied in, and prints its own counts. Run with and without LD_PRELOAD=libgpumem.so: the
 * output must be identical (tests/integration/preload_rt.sh).
 *
 *   rt_app            the normal workload
 *   rt_app big        asks for 2 GiB, prints the error code, then carries on (GPUMEM_LIMIT test)
 *   rt_app errors     double free, foreign free, and prints the codes (run under gpumem)
 *   rt_app first      cudaMalloc is the program's very first CUDA call; then a stream is
 *                     created, used, destroyed, and the memory freed
 *   rt_app name       names two allocations: one through the NVTX memory extension, one
 *                     through gpumem_name found with dlsym (absent without gpumem)
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExtMem.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 3
#define NSTREAMS 3
#define ROUNDS 40

struct counts {
    int allocs, frees, async_allocs, async_frees, host_allocs, host_frees, bad;
};

static int check(cudaError_t e, const char *what, struct counts *c)
{
    if (e != cudaSuccess) {
        printf("rt_app: %s failed: %d (%s)\n", what, (int)e, cudaGetErrorName(e));
        c->bad++;
        return 0;
    }
    return 1;
}

/* Writes a pattern through a device buffer and reads it back. */
static void roundtrip(void *dev, size_t n, unsigned seed, cudaStream_t s, struct counts *c)
{
    unsigned char *h = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++)
        h[i] = (unsigned char)(seed + i * 7);
    if (check(cudaMemcpyAsync(dev, h, n, cudaMemcpyHostToDevice, s), "memcpy HtoD", c) &&
        check(cudaMemcpyAsync(back, dev, n, cudaMemcpyDeviceToHost, s), "memcpy DtoH", c) &&
        check(cudaStreamSynchronize(s), "sync", c) && memcmp(h, back, n) != 0) {
        printf("rt_app: data mismatch\n");
        c->bad++;
    }
    free(h);
    free(back);
}

struct worker {
    int id;
    struct counts c;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    struct counts *c = &w->c;
    cudaStream_t streams[NSTREAMS];
    for (int i = 0; i < NSTREAMS; i++)
        check(cudaStreamCreate(&streams[i]), "stream create", c);
    void *live[8] = {0};
    for (int r = 0; r < ROUNDS; r++) {
        int slot = r % 8;
        cudaStream_t s = streams[r % NSTREAMS];
        if (live[slot]) {
            if ((r / 8) % 2) {
                if (check(cudaFreeAsync(live[slot], s), "cudaFreeAsync", c))
                    c->async_frees++;
            } else if (check(cudaFree(live[slot]), "cudaFree", c)) {
                c->frees++;
            }
            live[slot] = NULL;
        }
        size_t n = (size_t)(1 + (r * 37 + w->id * 11) % 64) * 4096 + (size_t)(r % 5) * 100;
        void *p = NULL;
        if (r % 3 == 0) {
            if (check(cudaMallocAsync(&p, n, s), "cudaMallocAsync", c))
                c->async_allocs++;
        } else if (check(cudaMalloc(&p, n), "cudaMalloc", c)) {
            c->allocs++;
        }
        if (p) {
            roundtrip(p, n < 8192 ? n : 8192, (unsigned)(r + w->id), s, c);
            live[slot] = p;
        }
        if (r % 10 == 0) {
            void *h = NULL;
            if (check(r % 20 ? cudaMallocHost(&h, n) : cudaHostAlloc(&h, n, cudaHostAllocPortable),
                      "host alloc", c)) {
                c->host_allocs++;
                memset(h, 0x5a, n); /* pinned memory is ordinary host memory to the CPU */
                if (check(cudaFreeHost(h), "cudaFreeHost", c))
                    c->host_frees++;
            }
        }
    }
    for (int i = 0; i < 8; i++)
        if (live[i] && check(cudaFree(live[i]), "cudaFree", c))
            c->frees++;
    for (int i = 0; i < NSTREAMS; i++)
        check(cudaStreamDestroy(streams[i]), "stream destroy", c);
    return NULL;
}

static int run_big(void)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, (size_t)2 << 30);
    printf("rt_app: cudaMalloc(2 GiB) = %d (%s)\n", (int)e, cudaGetErrorName(e));
    if (e == cudaSuccess)
        cudaFree(p);
    /* the program goes on after the failure */
    void *q = NULL;
    e = cudaMalloc(&q, 1 << 20);
    printf("rt_app: then cudaMalloc(1 MiB) = %d\n", (int)e);
    if (e == cudaSuccess)
        cudaFree(q);
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    printf("rt_app: cudaMemGetInfo total %zu\n", tot);
    return 0;
}

static int run_errors(void)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, 4096);
    printf("rt_app: alloc %d\n", (int)e);
    e = cudaFree(p);
    printf("rt_app: free %d\n", (int)e);
    e = cudaFree(p);
    printf("rt_app: double free %d\n", (int)e);
    void *h = NULL;
    e = cudaMallocHost(&h, 1000);
    printf("rt_app: host alloc %d\n", (int)e);
    e = cudaFreeHost(h);
    printf("rt_app: host free %d\n", (int)e);
    e = cudaFreeHost(h);
    printf("rt_app: host double free %d\n", (int)e);
    void *m = NULL;
    e = cudaMallocManaged(&m, 8192, cudaMemAttachGlobal); /* passed through, recorded */
    printf("rt_app: managed alloc %d\n", (int)e);
    e = cudaFree(m);
    printf("rt_app: managed free %d\n", (int)e);
    int local;
    e = cudaFree(&local); /* a pointer nobody allocated: foreign, goes to the real runtime */
    printf("rt_app: foreign free %d\n", (int)e);
    cudaGetLastError();
    e = cudaMalloc(&p, 1 << 20);
    printf("rt_app: still works %d\n", (int)e);
    cudaFree(p);
    return 0;
}

static int run_first(void)
{
    void *p = NULL, *q = NULL;
    cudaStream_t s;
    int ok = cudaMalloc(&p, 1 << 20) == cudaSuccess && cudaStreamCreate(&s) == cudaSuccess &&
             cudaMallocAsync(&q, 4096, s) == cudaSuccess && cudaFreeAsync(q, s) == cudaSuccess &&
             cudaStreamDestroy(s) == cudaSuccess && cudaFree(p) == cudaSuccess;
    void *r = NULL;
    ok = ok && cudaMalloc(&r, 1 << 20) == cudaSuccess && cudaFree(r) == cudaSuccess;
    printf("rt_app: first %s\n", ok ? "ok" : "bad");
    return !ok;
}

static int run_name(void)
{
    void *w = NULL, *a = NULL;
    if (cudaMalloc(&w, 1 << 20) != cudaSuccess || cudaMalloc(&a, 2 << 20) != cudaSuccess)
        return 1;
    /* NVTX memory extension: register the region on the process-wide heap, then name it */
    nvtxMemVirtualRangeDesc_t range = {1 << 20, w};
    nvtxMemRegionsRegisterBatch_t reg;
    memset(&reg, 0, sizeof reg);
    reg.extCompatID = NVTX_EXT_COMPATID_MEM;
    reg.structSize = sizeof reg;
    reg.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    reg.heap = NVTX_MEM_HEAP_HANDLE_PROCESS_WIDE;
    reg.regionCount = 1;
    reg.regionDescElementSize = sizeof range;
    reg.regionDescElements = &range;
    nvtxMemRegionsRegister(NULL, &reg);
    nvtxMemRegionNameDesc_t nd;
    memset(&nd, 0, sizeof nd);
    nd.regionRefType = NVTX_MEM_REGION_REF_TYPE_POINTER;
    nd.nameType = NVTX_MESSAGE_TYPE_ASCII;
    nd.region.pointer = w;
    nd.name.ascii = "weights";
    nvtxMemRegionsNameBatch_t nb;
    memset(&nb, 0, sizeof nb);
    nb.extCompatID = NVTX_EXT_COMPATID_MEM;
    nb.structSize = sizeof nb;
    nb.regionCount = 1;
    nb.regionElementSize = sizeof nd;
    nb.regionElements = &nd;
    nvtxMemRegionsName(NULL, &nb);
    /* the user API, optional: found at run time */
    int (*name)(const void *, const char *) =
        (int (*)(const void *, const char *))dlsym(RTLD_DEFAULT, "gpumem_name");
    if (name)
        printf("rt_app: gpumem_name %d, unknown pointer %d\n", name((char *)a + 100, "activations"),
               name(&range, "nothing"));
    else
        printf("rt_app: gpumem_name absent\n");
    cudaFree(w);
    cudaFree(a);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "big"))
        return run_big();
    if (argc > 1 && !strcmp(argv[1], "errors"))
        return run_errors();
    if (argc > 1 && !strcmp(argv[1], "first"))
        return run_first();
    if (argc > 1 && !strcmp(argv[1], "name"))
        return run_name();
    pthread_t t[NTHREADS];
    struct worker w[NTHREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < NTHREADS; i++) {
        w[i].id = i;
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    struct counts tot = {0};
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(t[i], NULL);
        tot.allocs += w[i].c.allocs;
        tot.frees += w[i].c.frees;
        tot.async_allocs += w[i].c.async_allocs;
        tot.async_frees += w[i].c.async_frees;
        tot.host_allocs += w[i].c.host_allocs;
        tot.host_frees += w[i].c.host_frees;
        tot.bad += w[i].c.bad;
    }
    /* the driver through the runtime's entry-point query (what cuBLAS-style code does). The
     * query gives this thread no context (an H200 answered cuMemAlloc with 201 here), so the
     * runtime initializes the thread first, as a library does before it calls the driver. */
    cudaFree(NULL);
    CUresult (*drv_alloc)(CUdeviceptr *, size_t) = NULL;
    CUresult (*drv_free)(CUdeviceptr) = NULL;
    enum cudaDriverEntryPointQueryResult st;
    CUdeviceptr d = 0;
    int entry_ok = cudaGetDriverEntryPointByVersion("cuMemAlloc", (void **)&drv_alloc, 13000,
                                                    cudaEnableDefault, &st) == cudaSuccess &&
                   cudaGetDriverEntryPointByVersion("cuMemFree", (void **)&drv_free, 13000,
                                                    cudaEnableDefault, &st) == cudaSuccess &&
                   drv_alloc && drv_free && drv_alloc(&d, 1 << 20) == CUDA_SUCCESS &&
                   drv_free(d) == CUDA_SUCCESS;
    printf("rt_app: driver entry point alloc %s\n", entry_ok ? "ok" : "bad");
    size_t fr = 0, total = 0;
    cudaError_t e = cudaMemGetInfo(&fr, &total);
    printf("rt_app: memgetinfo %s\n", e == cudaSuccess && fr <= total ? "ok" : "bad");
    printf("rt_app: allocs %d frees %d async_allocs %d async_frees %d host_allocs %d "
           "host_frees %d errors %d\n",
           tot.allocs, tot.frees, tot.async_allocs, tot.async_frees, tot.host_allocs,
           tot.host_frees, tot.bad);
    return tot.bad || !entry_ok ? 1 : 0;
}
