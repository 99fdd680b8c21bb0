/* Issue 37, out-of-bounds copies and memsets: the driver checks a copy or memset against the
 * allocation it lies in, and refuses one that runs past its end, or touches freed memory, with
 * cudaErrorInvalidValue (CUDA_ERROR_INVALID_VALUE), writing nothing. gpumem's allocations are
 * parts of larger mappings, so without its own check such a write would land in the
 * neighbouring allocation (or in memory the cache hands out next) and succeed. Every entry point:
 * the runtime's copies and memsets (synchronous, async, per-thread), the driver's by dlsym and
 * through cuGetProcAddress; starts and interior pointers; one byte past the end. */
#include "tests/diff/diff.h"

#define SZ 1024

static const char *intact(void *d, unsigned char v, size_t n)
{
    static unsigned char h[4096];
    if (cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) != cudaSuccess) return "copy failed";
    for (size_t i = 0; i < n; i++)
        if (h[i] != v) return "changed";
    return "intact";
}

int main(void)
{
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    void *a = NULL, *b = NULL, *small = NULL;
    cudaMalloc(&a, SZ);
    cudaMalloc(&b, SZ);
    cudaMalloc(&small, 1000);
    cudaMemset(a, 0x11, SZ);
    cudaMemset(b, 0x22, SZ);
    cudaMemset(small, 0x33, 1000);
    unsigned char host[2 * SZ];
    memset(host, 0x44, sizeof host);

    printf("-- runtime\n");
    rt_state("cudaMemset(small, 1000)", cudaMemset(small, 1, 1000));
    rt_state("cudaMemset(small, 1001)", cudaMemset(small, 2, 1001));
    rt_state("cudaMemset(small + 999, 1)", cudaMemset((char *)small + 999, 3, 1));
    rt_state("cudaMemset(small + 999, 2)", cudaMemset((char *)small + 999, 3, 2));
    rt_state("cudaMemset(small + 1000, 1)", cudaMemset((char *)small + 1000, 3, 1));
    rt_state("cudaMemset(a, 1025)", cudaMemset(a, 5, SZ + 1));
    rt_state("cudaMemsetAsync(a, 2048)", cudaMemsetAsync(a, 5, 2 * SZ, s));
    rt_state("cudaMemset(a, 0 bytes past nothing)", cudaMemset(a, 5, 0));
    rt_state("cudaMemcpy HtoD 1025 into a", cudaMemcpy(a, host, SZ + 1, cudaMemcpyHostToDevice));
    rt_state("cudaMemcpy DtoH 1025 from a", cudaMemcpy(host, a, SZ + 1, cudaMemcpyDeviceToHost));
    rt_state("cudaMemcpy DtoD 1025 a -> b", cudaMemcpy(b, a, SZ + 1, cudaMemcpyDeviceToDevice));
    rt_state("cudaMemcpy default 1025 host -> a", cudaMemcpy(a, host, SZ + 1, cudaMemcpyDefault));
    rt_state("cudaMemcpyAsync DtoD 513 into a + 512",
             cudaMemcpyAsync((char *)a + 512, b, 513, cudaMemcpyDeviceToDevice, s));
    rt_state("cudaMemcpyAsync DtoD 512 into a + 512",
             cudaMemcpyAsync((char *)a + 512, b, 512, cudaMemcpyDeviceToDevice, s));
    cudaStreamSynchronize(s);
    printf("  b: %s\n", intact(b, 0x22, SZ));

    printf("-- driver\n");
    DRV(dset8, cuMemsetD8_v2);
    DRV(dset32, cuMemsetD32_v2);
    DRV(dhtod, cuMemcpyHtoD_v2);
    PROC(pset8, cuMemsetD8_v2, "cuMemsetD8");
    PROC(pset16a, cuMemsetD16Async, "cuMemsetD16Async");
    PROC(pdtod, cuMemcpyDtoD_v2, "cuMemcpyDtoD");
    CUdeviceptr da = (CUdeviceptr)(uintptr_t)a, db = (CUdeviceptr)(uintptr_t)b;
    cu("cuMemsetD8 (dlsym) 1025", dset8(da, 1, SZ + 1));
    cu("cuMemsetD32 (dlsym) 257 words", dset32(da, 1, SZ / 4 + 1));
    cu("cuMemsetD32 (dlsym) 256 words", dset32(da, 0x11111111, SZ / 4));
    cu("cuMemcpyHtoD (dlsym) 1025", dhtod(da, host, SZ + 1));
    cu("cuMemsetD8 (cuGetProcAddress) 1025", pset8(da, 1, SZ + 1));
    cu("cuMemsetD16Async (cuGetProcAddress) 513 halves", pset16a(da, 1, SZ / 2 + 1, (CUstream)s));
    cu("cuMemcpyDtoD (cuGetProcAddress) 1025", pdtod(db, da, SZ + 1));
    cudaStreamSynchronize(s);
    printf("  a: %s, b: %s\n", intact(a, 0x11, SZ), intact(b, 0x22, SZ));

    printf("-- freed memory\n");
    cudaFree(small);
    rt_state("cudaMemset of a freed allocation", cudaMemset(small, 0, 16));
    rt_state("cudaMemcpy from a freed allocation",
             cudaMemcpy(host, small, 16, cudaMemcpyDeviceToHost));
    cudaFreeAsync(b, s);
    cudaStreamSynchronize(s);
    cu("cuMemsetD8 of a freed stream-ordered allocation", pset8(db, 0, 16));
    void *c = NULL;
    cudaMalloc(&c, SZ);
    rt_state("cudaMemset of a new allocation", cudaMemset(c, 0x55, SZ));
    printf("  c: %s\n", intact(c, 0x55, SZ));
    printf("  a: %s\n", intact(a, 0x11, SZ));
    cudaFree(a);
    cudaFree(c);
    cudaStreamDestroy(s);
    return 0;
}
