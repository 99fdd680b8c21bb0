/*
 * drv_sym_app — a driver-API program written the way NVIDIA's CUDA samples are (vectorAddMMAP's
 * simpleMallocMultiDeviceMmap helper, simplePitchLinearTexture's pitched buffer, the pinned
 * staging buffers of the bandwidth test), linked with -lcuda and calling every driver function
 * by symbol: no dlopen, no cuGetProcAddress.
 *
 *   cuMemAlloc (cuMemAlloc_v2)          a vector, copied in and out
 *   cuMemAllocPitch (cuMemAllocPitch_v2) a W x H float image, row by row at the returned pitch
 *   cuMemCreate + cuMemAddressReserve + cuMemMap + cuMemSetAccess   the sample's VMM helper:
 *                                        the handle is released right after mapping, as the
 *                                        sample does (the mapping keeps the memory)
 *   cuMemAllocHost (cuMemAllocHost_v2), cuMemHostAlloc   pinned staging buffers
 *   cuMemAllocFromPoolAsync             a buffer from the device's pool, chosen explicitly
 *
 * stdout: what the program computed (identical with and without gpumem). With
 * DRV_SYM_ACCOUNT=path it also writes, at its peak (everything allocated) and at exit, the
 * virtual GPU's own accounting of its device ("peak|exit used <bytes> context <bytes>") through
 * its sim-only query: a test compares gpumem's "device used" with it. DRV_SYM_NO_PITCH=1 skips the pitched part (a driver without
 * cuMemAllocPitch_v2).
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

/* Weak: the program also builds against NVIDIA's libcuda, where these sim-only queries do not
 * exist (DRV_SYM_ACCOUNT and DRV_SYM_WORKSPACE then do nothing). */
#pragma weak sim_device_info
#pragma weak sim_set_context_bytes

#define checkCudaErrors(call)                                                                  \
    do {                                                                                       \
        CUresult err_ = (call);                                                                \
        if (err_ != CUDA_SUCCESS) {                                                            \
            const char *s_ = NULL;                                                             \
            cuGetErrorString(err_, &s_);                                                       \
            fprintf(stderr, "drv_sym_app: %s failed: %d (%s) at line %d\n", #call, (int)err_,  \
                    s_ ? s_ : "?", __LINE__);                                                  \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* ---- the virtual GPU's own accounting (its sim-only query) ------------------------------- */
static void account(const char *when)
{
    const char *path = getenv("DRV_SYM_ACCOUNT");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    sim_device_accounting a;
    const char *d = getenv("DRV_SYM_DEVICE");
    if (sim_device_info && sim_device_info(d ? atoi(d) : 0, &a) == CUDA_SUCCESS)
        fprintf(f, "%s used %zu context %zu\n", when, a.context_bytes + a.allocated,
                a.context_bytes);
    fclose(f);
}
static void account_exit(void) { account("exit"); }

/* vectorAddMMAP's helper, for one device: reserve, create, map, release, set access. */
static void simpleMallocMmap(CUdeviceptr *dptr, size_t *allocationSize, size_t size, CUdevice dev)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)dev;
    size_t granularity = 0;
    checkCudaErrors(
        cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size = ((size + granularity - 1) / granularity) * granularity;
    checkCudaErrors(cuMemAddressReserve(dptr, size, 0, 0, 0));
    CUmemGenericAllocationHandle handle;
    checkCudaErrors(cuMemCreate(&handle, size, &prop, 0));
    checkCudaErrors(cuMemMap(*dptr, size, 0, handle, 0));
    /* the mapping keeps the memory: the handle is not needed any more */
    checkCudaErrors(cuMemRelease(handle));
    CUmemAccessDesc access;
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    checkCudaErrors(cuMemSetAccess(*dptr, size, &access, 1));
    *allocationSize = size;
}

static void simpleFreeMmap(CUdeviceptr dptr, size_t size)
{
    checkCudaErrors(cuMemUnmap(dptr, size));
    checkCudaErrors(cuMemAddressFree(dptr, size));
}

static double sum(const float *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i];
    return s;
}

int main(void)
{
    atexit(account_exit); /* before any CUDA call: runs after gpumem's own exit handler */
    const int pitched = !getenv("DRV_SYM_NO_PITCH");
    CUdevice dev;
    CUcontext ctx;
    checkCudaErrors(cuInit(0));
    const char *devs = getenv("DRV_SYM_DEVICE"); /* the device to use (default 0) */
    checkCudaErrors(cuDeviceGet(&dev, devs ? atoi(devs) : 0));
    /* DRV_SYM_ONLY_INIT=1: stop here (the driver used, nothing allocated); =2: also ask the
     * driver for an entry point, which goes through gpumem's cuGetProcAddress (a lookup: no
     * recording opens); =3: also call a function gpumem hooks, cuMemGetInfo (a recording with
     * no allocation in it) */
    const char *only = getenv("DRV_SYM_ONLY_INIT");
    if (only && *only) {
        if (!strcmp(only, "2") || !strcmp(only, "3")) {
            void *fn = NULL;
            checkCudaErrors(cuGetProcAddress("cuMemAlloc", &fn, 12000, 0, NULL));
        }
        if (!strcmp(only, "3")) {
            size_t fr = 0, tot = 0;
            checkCudaErrors(cuDevicePrimaryCtxRetain(&ctx, dev));
            checkCudaErrors(cuCtxSetCurrent(ctx));
            checkCudaErrors(cuMemGetInfo(&fr, &tot));
        }
        printf("drv_sym_app: initialised only\n");
        return 0;
    }
    checkCudaErrors(cuDevicePrimaryCtxRetain(&ctx, dev));
    checkCudaErrors(cuCtxSetCurrent(ctx));

    /* pinned staging buffers */
    const size_t N = 1 << 20; /* floats */
    float *hA = NULL, *hB = NULL;
    checkCudaErrors(cuMemAllocHost((void **)&hA, N * sizeof(float)));
    checkCudaErrors(cuMemHostAlloc((void **)&hB, N * sizeof(float), CU_MEMHOSTALLOC_PORTABLE));
    for (size_t i = 0; i < N; i++)
        hA[i] = (float)(i % 1000) * 0.5f;

    /* a plain vector */
    CUdeviceptr dA;
    checkCudaErrors(cuMemAlloc(&dA, N * sizeof(float)));
    checkCudaErrors(cuMemcpyHtoD(dA, hA, N * sizeof(float)));
    /* DRV_SYM_WORKSPACE=bytes: device memory appears that no allocator records (as a library's
     * workspace would): the virtual GPU's context charge grows by that much */
    const char *ws = getenv("DRV_SYM_WORKSPACE");
    if (ws && *ws && sim_device_info && sim_set_context_bytes) {
        sim_device_accounting a;
        checkCudaErrors(sim_device_info((int)dev, &a));
        checkCudaErrors(sim_set_context_bytes(a.context_bytes_configured + strtoull(ws, NULL, 10)));
    }

    /* a pitched image, W x H floats */
    const size_t W = 1000, H = 64;
    CUdeviceptr dP = 0;
    size_t pitch = 0;
    if (pitched) {
        checkCudaErrors(cuMemAllocPitch(&dP, &pitch, W * sizeof(float), H, sizeof(float)));
        if (pitch < W * sizeof(float) || pitch % sizeof(float)) {
            fprintf(stderr, "drv_sym_app: bad pitch %zu for rows of %zu bytes\n", pitch,
                    W * sizeof(float));
            return 1;
        }
        fprintf(stderr, "drv_sym_app: pitch %zu\n", pitch); /* the allocator's choice */
        for (size_t r = 0; r < H; r++)
            checkCudaErrors(cuMemcpyHtoD(dP + r * pitch, hA + r * W, W * sizeof(float)));
    }

    /* the sample's VMM buffer */
    CUdeviceptr dV;
    size_t vsize = 0;
    simpleMallocMmap(&dV, &vsize, N * sizeof(float), dev);
    checkCudaErrors(cuMemcpyDtoD(dV, dA, N * sizeof(float)));

    /* a stream-ordered buffer from the device's pool, chosen explicitly */
    CUmemoryPool pool;
    CUdeviceptr dQ;
    checkCudaErrors(cuDeviceGetDefaultMemPool(&pool, dev));
    checkCudaErrors(cuMemAllocFromPoolAsync(&dQ, N * sizeof(float), pool, 0));
    checkCudaErrors(cuMemcpyDtoDAsync(dQ, dA, N * sizeof(float), 0));
    checkCudaErrors(cuStreamSynchronize(0));
    account("peak"); /* everything is allocated */

    /* results back through the pinned buffers */
    checkCudaErrors(cuMemcpyDtoH(hB, dV, N * sizeof(float)));
    printf("vector: %zu floats, sum %.1f\n", N, sum(hB, N));
    if (pitched) {
        double s = 0;
        for (size_t r = 0; r < H; r++) {
            checkCudaErrors(cuMemcpyDtoH(hB, dP + r * pitch, W * sizeof(float)));
            s += sum(hB, W);
        }
        printf("image: %zu x %zu floats, sum %.1f\n", W, H, s);
    }
    printf("vmm: mapped %zu bytes\n", vsize);
    checkCudaErrors(cuMemcpyDtoH(hB, dQ, N * sizeof(float)));
    printf("pool: %zu floats, sum %.1f\n", N, sum(hB, N));
    checkCudaErrors(cuMemFreeAsync(dQ, 0));
    checkCudaErrors(cuStreamSynchronize(0));

    simpleFreeMmap(dV, vsize);
    if (pitched)
        checkCudaErrors(cuMemFree(dP));
    checkCudaErrors(cuMemFree(dA));
    checkCudaErrors(cuMemFreeHost(hA));
    checkCudaErrors(cuMemFreeHost(hB));
    printf("drv_sym_app: PASSED\n");
    return 0;
}
