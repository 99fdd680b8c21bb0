/*
 * drv_app — a driver-API program that reaches the driver the way a statically linked CUDA
 * runtime, cuBLAS or NCCL do: dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2"), then every
 * entry point through cuGetProcAddress. No CUDA library is linked. Prints its own counts; the
 * output must be the same with and without LD_PRELOAD=libgpumem.so.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*getproc_t)(const char *, void **, int, cuuint64_t,
                              CUdriverProcAddressQueryResult *);
static getproc_t getproc;
static int bad;

static void *get(const char *name)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    if (getproc(name, &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || !p) {
        printf("drv_app: no %s\n", name);
        exit(2);
    }
    return p;
}

static void ok(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        printf("drv_app: %s failed: %d\n", what, (int)r);
        bad++;
    }
}

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        printf("drv_app: cannot load libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    getproc = (getproc_t)dlsym(h, "cuGetProcAddress_v2");
    if (!getproc) {
        printf("drv_app: no cuGetProcAddress_v2\n");
        return 2;
    }
    CUresult (*init)(unsigned) = get("cuInit");
    CUresult (*dev_get)(CUdevice *, int) = get("cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = get("cuDevicePrimaryCtxRetain");
    CUresult (*set_cur)(CUcontext) = get("cuCtxSetCurrent");
    CUresult (*alloc)(CUdeviceptr *, size_t) = get("cuMemAlloc");
    CUresult (*mfree)(CUdeviceptr) = get("cuMemFree");
    CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream) = get("cuMemAllocAsync");
    CUresult (*free_async)(CUdeviceptr, CUstream) = get("cuMemFreeAsync");
    CUresult (*info)(size_t *, size_t *) = get("cuMemGetInfo");
    CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr) = get("cuMemGetAddressRange");
    CUresult (*stream_create)(CUstream *, unsigned) = get("cuStreamCreate");
    CUresult (*stream_sync)(CUstream) = get("cuStreamSynchronize");
    CUresult (*stream_destroy)(CUstream) = get("cuStreamDestroy");
    CUresult (*htod)(CUdeviceptr, const void *, size_t) = get("cuMemcpyHtoD");
    CUresult (*dtoh)(void *, CUdeviceptr, size_t) = get("cuMemcpyDtoH");
    CUresult (*host_alloc)(void **, size_t) = get("cuMemAllocHost");
    CUresult (*host_free)(void *) = get("cuMemFreeHost");

    ok(init(0), "cuInit");
    CUdevice dev;
    CUcontext ctx;
    ok(dev_get(&dev, 0), "cuDeviceGet");
    ok(retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    ok(set_cur(ctx), "cuCtxSetCurrent");
    CUstream s;
    ok(stream_create(&s, 0), "cuStreamCreate");

    int allocs = 0, frees = 0, async_allocs = 0, async_frees = 0, ranges_ok = 0, data_ok = 0;
    CUdeviceptr live[16] = {0};
    size_t sizes[16] = {0};
    for (int r = 0; r < 64; r++) {
        int slot = r % 16;
        if (live[slot]) {
            if (r % 2) {
                ok(free_async(live[slot], s), "cuMemFreeAsync");
                async_frees++;
            } else {
                ok(mfree(live[slot]), "cuMemFree");
                frees++;
            }
            live[slot] = 0;
        }
        size_t n = (size_t)(1 + (r * 13) % 40) * 8192 + 300;
        CUdeviceptr p = 0;
        if (r % 4 == 3) {
            ok(alloc_async(&p, n, s), "cuMemAllocAsync");
            async_allocs++;
            ok(stream_sync(s), "cuStreamSynchronize");
        } else {
            ok(alloc(&p, n), "cuMemAlloc");
            allocs++;
        }
        live[slot] = p;
        sizes[slot] = n;
        /* an interior pointer: the range is the allocation's */
        CUdeviceptr base = 0;
        size_t sz = 0;
        if (range(&base, &sz, p + n / 2) == CUDA_SUCCESS && base == p && sz >= n)
            ranges_ok++;
        unsigned char in[4096], out[4096];
        for (int i = 0; i < 4096; i++)
            in[i] = (unsigned char)(i * 3 + r);
        ok(htod(p + n - 4096, in, sizeof in), "cuMemcpyHtoD");
        ok(dtoh(out, p + n - 4096, sizeof out), "cuMemcpyDtoH");
        if (!memcmp(in, out, sizeof in))
            data_ok++;
    }
    for (int i = 0; i < 16; i++)
        if (live[i]) {
            ok(mfree(live[i]), "cuMemFree");
            frees++;
        }
    (void)sizes;
    void *hp = NULL;
    ok(host_alloc(&hp, 100000), "cuMemAllocHost");
    if (hp) {
        memset(hp, 1, 100000);
        ok(host_free(hp), "cuMemFreeHost");
    }
    size_t fr = 0, tot = 0;
    ok(info(&fr, &tot), "cuMemGetInfo");
    ok(stream_destroy(s), "cuStreamDestroy");
    printf("drv_app: allocs %d frees %d async_allocs %d async_frees %d ranges_ok %d data_ok %d "
           "meminfo %s errors %d\n",
           allocs, frees, async_allocs, async_frees, ranges_ok, data_ok,
           fr <= tot && tot > 0 ? "ok" : "bad", bad);
    return bad ? 1 : 0;
}
