/* Edge sizes through every runtime allocation entry point gpumem interposes: 0, 1, 511, 512,
 * 513, 2 MiB - 1, 2 MiB, 2 MiB + 1, and over capacity. For each: the code, whether the pointer
 * is NULL, what cudaPointerGetAttributes says of it, the range the driver reports, and the
 * memory-info delta while it lives and after it is freed. */
#include "tests/diff/diff.h"

typedef cudaError_t (*alloc_fn)(void **, size_t);
static cudaStream_t stream;
static cudaMemPool_t pool;
static cudaError_t a_malloc(void **p, size_t n) { return cudaMalloc(p, n); }
static cudaError_t a_async(void **p, size_t n) { return cudaMallocAsync(p, n, stream); }
static cudaError_t a_async0(void **p, size_t n) { return cudaMallocAsync(p, n, 0); }
static cudaError_t a_pool(void **p, size_t n) { return cudaMallocFromPoolAsync(p, n, pool, stream); }
static cudaError_t a_host(void **p, size_t n) { return cudaMallocHost(p, n); }
static cudaError_t a_hostalloc(void **p, size_t n) { return cudaHostAlloc(p, n, cudaHostAllocPortable | cudaHostAllocMapped); }
static cudaError_t a_managed(void **p, size_t n) { return cudaMallocManaged(p, n, cudaMemAttachGlobal); }
static cudaError_t f_dev(void *p) { return cudaFree(p); }
static cudaError_t f_async(void *p) { return cudaFreeAsync(p, stream); }
static cudaError_t f_host(void *p) { return cudaFreeHost(p); }

int main(void)
{
    DRV(range, cuMemGetAddressRange_v2);
    cudaFree(NULL);
    cudaStreamCreate(&stream);
    cudaDeviceGetDefaultMemPool(&pool, 0);
    mem_baseline();
    struct { const char *name; alloc_fn a; cudaError_t (*f)(void *); int device; } eps[] = {
        {"cudaMalloc", a_malloc, f_dev, 1},         {"cudaMallocAsync(s)", a_async, f_async, 1},
        {"cudaMallocAsync(0)", a_async0, f_async, 1}, {"cudaMallocFromPoolAsync", a_pool, f_async, 1},
        {"cudaMallocHost", a_host, f_host, 0},      {"cudaHostAlloc", a_hostalloc, f_host, 0},
        {"cudaMallocManaged", a_managed, f_dev, 0},
    };
    const size_t M2 = (size_t)2 << 20;
    size_t sizes[] = {0, 1, 511, 512, 513, M2 - 1, M2, M2 + 1, (size_t)1 << 40};
    for (size_t e = 0; e < sizeof eps / sizeof eps[0]; e++) {
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t n = sizes[k];
            if (!eps[e].device && n == ((size_t)1 << 40))
                continue; /* host memory is not capped by the device */
            char what[96];
            snprintf(what, sizeof what, "%s(%zu)", eps[e].name, n);
            void *p = (void *)0x1234;
            cudaError_t r = eps[e].a(&p, n);
            rt_state(what, r);
            printf("  pointer: %s\n", p == NULL ? "NULL" : p == (void *)0x1234 ? "untouched" : "set");
            if (r != cudaSuccess || !p)
                continue;
            struct cudaPointerAttributes at;
            cudaError_t ar = cudaPointerGetAttributes(&at, p);
            printf("  attributes: rc %d type %d device %d devptr %s hostptr %s\n", (int)ar,
                   (int)at.type, at.device, rel((uintptr_t)at.devicePointer, (uintptr_t)p, n),
                   rel((uintptr_t)at.hostPointer, (uintptr_t)p, n));
            CUdeviceptr b = 0;
            size_t sz = 0;
            CUresult rr = range(&b, &sz, (CUdeviceptr)(uintptr_t)p + n - 1);
            printf("  range of last byte: rc %d start %s size %zu\n", (int)rr,
                   rel(b, (uintptr_t)p, n), sz);
            rr = range(&b, &sz, (CUdeviceptr)(uintptr_t)p + n);
            printf("  range one past the end is this allocation: %s\n",
                   !rr && b == (CUdeviceptr)(uintptr_t)p ? "yes" : "no");
            char lw[96];
            snprintf(lw, sizeof lw, "%s live", eps[e].name);
            if (eps[e].device)
                mem_used(lw);
            rt_state("  free", eps[e].f(p));
            cudaStreamSynchronize(stream);
            if (eps[e].device)
                mem_used("after free");
        }
    }
    cudaStreamDestroy(stream);
    return 0;
}
