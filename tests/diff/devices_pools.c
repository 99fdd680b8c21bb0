/* Issue 37, devices, pinned memory, pools, pitch:
 *  - a stream-ordered allocation lives on its stream's device, whichever device is current
 *    (cudaMallocAsync: "allocated on the device associated with the stream");
 *  - cudaHostUnregister of cudaMallocHost memory is cudaErrorHostMemoryNotRegistered (713) and
 *    changes nothing: the memory stays pinned (pointer type, device pointer);
 *  - the default memory pool's attributes count the stream-ordered allocations (used, reserved,
 *    their high-water marks, which reset to 0 only);
 *  - pitched allocations are padded to the device's texture alignment (512 B, what the driver
 *    gives; cudaDevAttrTexturePitchAlignment is another figure), with the driver's limits and
 *    codes (a pitch above cudaDevAttrMaxPitch, a size that overflows, a bad element size).
 * Runs with two virtual devices (GPUMEM_SIM_DEVICES, set before the first CUDA call); with one
 * device only the device count is printed. */
#include "tests/diff/diff.h"

static void pool_figures(const char *when, cudaMemPool_t pool)
{
    unsigned long long v[4] = {0};
    enum cudaMemPoolAttr a[4] = {cudaMemPoolAttrUsedMemCurrent, cudaMemPoolAttrUsedMemHigh,
                                 cudaMemPoolAttrReservedMemCurrent,
                                 cudaMemPoolAttrReservedMemHigh};
    for (int i = 0; i < 4; i++) cudaMemPoolGetAttribute(pool, a[i], &v[i]);
    printf("pool %s: used %llu high %llu reserved %llu high %llu\n", when, v[0], v[1], v[2], v[3]);
}

static void where(const char *what, void *p)
{
    struct cudaPointerAttributes at;
    memset(&at, 0, sizeof at);
    cudaError_t e = cudaPointerGetAttributes(&at, p);
    printf("%s: rc %d type %d device %d\n", what, (int)e, (int)at.type, at.device);
}

int main(void)
{
    setenv("GPUMEM_SIM_DEVICES", "2", 0); /* unless told otherwise (tests/gpu/graphs_parity.sh) */
    int n = 0;
    rt("device count", cudaGetDeviceCount(&n));
    printf("  %d devices\n", n);
    if (n < 2) return 0;

    /* 1. the stream's device */
    printf("-- stream-ordered allocation on another device's stream\n");
    cudaStream_t s1;
    rt("set device 1", cudaSetDevice(1));
    rt("stream on device 1", cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    size_t f1a = 0, f1b = 0, t1 = 0;
    cudaMemGetInfo(&f1a, &t1);
    rt("set device 0", cudaSetDevice(0));
    void *p = NULL;
    rt_state("cudaMallocAsync(4 MiB, device 1's stream)", cudaMallocAsync(&p, 4 << 20, s1));
    where("  its memory", p);
    rt("memset on its stream", cudaMemsetAsync(p, 3, 4 << 20, s1));
    rt("sync", cudaStreamSynchronize(s1));
    cudaSetDevice(1);
    cudaMemGetInfo(&f1b, &t1);
    printf("  device 1 used by it: %s\n", f1a - f1b >= (4u << 20) ? "yes" : "no");
    cudaSetDevice(0);
    DRV(dalloc_async, cuMemAllocAsync);
    CUdeviceptr dp = 0;
    cu("cuMemAllocAsync(1 MiB, device 1's stream)", dalloc_async(&dp, 1 << 20, (CUstream)s1));
    where("  its memory", (void *)dp);
    rt("cudaFreeAsync from device 0", cudaFreeAsync(p, s1));
    rt("cudaFreeAsync of the driver's", cudaFreeAsync((void *)dp, s1));
    rt("sync", cudaStreamSynchronize(s1));

    /* 2. cudaHostUnregister of pinned memory from cudaMallocHost */
    printf("-- cudaHostUnregister of cudaMallocHost memory\n");
    void *h = NULL, *h2 = NULL;
    rt("cudaMallocHost", cudaMallocHost(&h, 4096));
    rt_state("cudaHostUnregister", cudaHostUnregister(h));
    DRV(dunreg, cuMemHostUnregister);
    cu("cuMemHostUnregister", dunreg(h));
    where("  afterwards", h);
    void *hd = NULL;
    rt("cudaHostGetDevicePointer", cudaHostGetDevicePointer(&hd, h, 0));
    printf("  device pointer: %s\n", hd == h ? "the host address" : hd ? "other" : "none");
    rt("another cudaMallocHost", cudaMallocHost(&h2, 4096));
    where("  it", h2);
    char local[64];
    rt_state("cudaHostRegister of plain memory", cudaHostRegister(local, sizeof local, 0));
    rt_state("cudaHostUnregister of it", cudaHostUnregister(local));
    rt_state("cudaHostUnregister again", cudaHostUnregister(local));
    cudaFreeHost(h);
    cudaFreeHost(h2);

    /* 3. the default pool's attributes */
    printf("-- the default pool's attributes\n");
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMemPool_t pool;
    rt("default pool", cudaDeviceGetDefaultMemPool(&pool, 0));
    pool_figures("at the start", pool);
    void *a[4];
    for (int i = 0; i < 4; i++) cudaMallocAsync(&a[i], 1 << 20, s);
    void *odd = NULL;
    cudaMallocAsync(&odd, 1000, s);
    pool_figures("after 4 MiB + 1000 B", pool);
    for (int i = 0; i < 2; i++) cudaFreeAsync(a[i], s);
    cudaStreamSynchronize(s);
    pool_figures("after freeing 2 MiB", pool);
    unsigned long long zero = 0, one = 1;
    rt_state("reset used high to 1", cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &one));
    rt("reset used high", cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
    rt("reset reserved high", cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
    pool_figures("after the resets", pool);
    cudaFree(a[2]); /* a plain cudaFree of pool memory */
    cudaFreeAsync(a[3], s);
    cudaFreeAsync(odd, s);
    cudaStreamSynchronize(s);
    pool_figures("all freed", pool);
    void *m = NULL;
    cudaMalloc(&m, 1 << 20);
    pool_figures("with a cudaMalloc live", pool);
    cudaFree(m);

    /* 4. pitch */
    printf("-- pitched allocations\n");
    int tpa = 0, ta = 0, mp = 0;
    cudaDeviceGetAttribute(&tpa, cudaDevAttrTexturePitchAlignment, 0);
    cudaDeviceGetAttribute(&ta, cudaDevAttrTextureAlignment, 0);
    cudaDeviceGetAttribute(&mp, cudaDevAttrMaxPitch, 0);
    printf("texture pitch alignment %d, texture alignment %d, max pitch %d\n", tpa, ta, mp);
    size_t widths[] = {1, 32, 511, 512, 513, 4000};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        size_t pitch = 0;
        void *q = NULL;
        cudaError_t e = cudaMallocPitch(&q, &pitch, widths[i], 3);
        printf("cudaMallocPitch(w=%zu, h=3) = %d pitch %zu\n", widths[i], (int)e, pitch);
        if (q) cudaFree(q);
    }
    struct cudaPitchedPtr pp;
    memset(&pp, 0, sizeof pp);
    rt("cudaMalloc3D(300 x 2 x 2)", cudaMalloc3D(&pp, (struct cudaExtent){300, 2, 2}));
    printf("  pitch %zu xsize %zu ysize %zu\n", pp.pitch, pp.xsize, pp.ysize);
    if (pp.ptr) cudaFree(pp.ptr);
    DRV(dpitch, cuMemAllocPitch_v2);
    PROC(ppitch, cuMemAllocPitch_v2, "cuMemAllocPitch");
    __typeof__(&cuMemAllocPitch_v2) fns[2] = {dpitch, ppitch};
    for (int k = 0; k < 2; k++) {
        printf("%s\n", k ? "cuMemAllocPitch through cuGetProcAddress" : "cuMemAllocPitch by dlsym");
        CUdeviceptr d = 0;
        size_t pitch = 0;
        cu("  w=100 h=2 elem 4", fns[k](&d, &pitch, 100, 2, 4));
        printf("  pitch %zu\n", pitch);
        if (d) cudaFree((void *)d);
        d = 0;
        cu("  elem 3", fns[k](&d, &pitch, 100, 2, 3));
        cu("  width 0", fns[k](&d, &pitch, 0, 2, 4));
        cu("  width above the maximum pitch", fns[k](&d, &pitch, (size_t)mp + 1, 1, 4));
        cu("  width that rounds above it", fns[k](&d, &pitch, (size_t)mp - 1, 1, 4));
        cu("  pitch x height overflows", fns[k](&d, &pitch, 1024, SIZE_MAX / 512, 4));
        printf("  out: %s\n", d ? "set" : "0");
    }
    size_t pitch = 0;
    void *q = (void *)(uintptr_t)0x1234;
    rt_state("cudaMallocPitch overflowing", cudaMallocPitch(&q, &pitch, 1024, SIZE_MAX / 512));
    printf("  out: %s\n", q == NULL ? "NULL" : q == (void *)(uintptr_t)0x1234 ? "untouched" : "set");
    cudaStreamDestroy(s);
    cudaStreamDestroy(s1);
    return 0;
}
