/* pools_app — memory pools the program creates, beside gpumem-served cudaMalloc
 * (tests/integration/snapshot_pools.sh). One fixed plan, sizes in MiB, each step checked against
 * what the driver says (the pool's attributes, the current pool) and, on the virtual GPU, what
 * the device holds (sim_device_info, the driver's own accounting: gpumem's cuMemGetInfo answers
 * with its view):
 *
 *   A = cudaMalloc 4                      gpumem's
 *   P = cudaMemPoolCreate (device 0)      holds nothing yet
 *   p1 = cudaMallocFromPoolAsync 8 (P)    P reserves one 32 MiB chunk
 *   B = cudaMalloc 2                      gpumem's
 *   cudaDeviceSetMemPool(0, P); p2 = cudaMallocAsync 3   from P (the device's current pool)
 *   free p1                               P keeps its chunk (p2 is in it)
 *   P's release threshold 64 MiB; p3 = cudaMallocFromPoolAsync 40 (P): 64 MiB reserved;
 *   free p3: P keeps 64 MiB (the threshold); cudaMemPoolTrimTo(P, 0): back to 32
 *   free B
 *   cudaMemPoolDestroy(P) with p2 outstanding: the device's current pool is its default again,
 *   P's handle is refused, its chunk stays until p2 is freed
 *   p4 = cudaMallocAsync 1                the default pool's: gpumem's again
 *   free p2                               P's memory goes back to the device
 *   Q = cudaMemPoolCreate; q1 = cudaMallocFromPoolAsync 5 (Q), never freed: a leak
 *   free p4, free A
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>

#include "sim/sim.h"
#include "tests/apps/app_check.h"

#define MIB ((size_t)1 << 20)

static CUresult (*device_info)(int, sim_device_accounting *);

/* The bytes device 0 holds for allocations, from the virtual GPU. */
static size_t held(void)
{
    sim_device_accounting a = {0};
    return device_info(0, &a) == CUDA_SUCCESS ? a.allocated : 0;
}

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "pools_app: ");                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int attr_is(cudaMemPool_t p, enum cudaMemPoolAttr a, size_t want, const char *what)
{
    cuuint64_t v = 0;
    CHECK_RT(cudaMemPoolGetAttribute(p, a, &v));
    EXPECT(v == want, "%s is %llu, expected %zu", what, (unsigned long long)v, want);
    return 0;
}

/* Device 0's change in held bytes since `before` is `mib` MiB (checked on the virtual GPU). */
static int held_moved(size_t before, long mib, const char *step)
{
    long long d = (long long)held() - (long long)before;
    EXPECT(d == mib * (long long)MIB, "%s: the device holds %lld B more, expected %ld MiB", step,
           d, mib);
    return 0;
}

int main(void)
{
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY); /* the one the runtime loads */
    device_info = drv ? (CUresult(*)(int, sim_device_accounting *))dlsym(drv, "sim_device_info") : NULL;
    EXPECT(device_info, "sim_device_info not found: run on the virtual GPU (build/sim)");
    void *a, *b, *p1, *p2, *p3, *p4, *q1;
    CHECK_RT(cudaMalloc(&a, 4 * MIB));

    struct cudaMemPoolProps props = {0};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool, dflt, cur;
    size_t h0 = held();
    CHECK_RT(cudaMemPoolCreate(&pool, &props));
    CHECK_RT(cudaDeviceGetDefaultMemPool(&dflt, 0));
    EXPECT(pool != dflt, "the created pool is the default pool");
    if (held_moved(h0, 0, "pool created")) return 1;

    h0 = held();
    CHECK_RT(cudaMallocFromPoolAsync(&p1, 8 * MIB, pool, 0));
    if (held_moved(h0, 32, "8 MiB from the pool") || attr_is(pool, cudaMemPoolAttrUsedMemCurrent, 8 * MIB, "used") ||
        attr_is(pool, cudaMemPoolAttrReservedMemCurrent, 32 * MIB, "reserved"))
        return 1;
    CHECK_RT(cudaMalloc(&b, 2 * MIB));

    CHECK_RT(cudaDeviceSetMemPool(0, pool));
    CHECK_RT(cudaDeviceGetMemPool(&cur, 0));
    EXPECT(cur == pool, "the device's current pool is not the one set");
    h0 = held();
    CHECK_RT(cudaMallocAsync(&p2, 3 * MIB, 0));
    if (held_moved(h0, 0, "3 MiB more in the chunk") ||
        attr_is(pool, cudaMemPoolAttrUsedMemCurrent, 11 * MIB, "used after cudaMallocAsync"))
        return 1;
    CHECK_RT(cudaFreeAsync(p1, 0));
    CHECK_RT(cudaStreamSynchronize(0));
    if (attr_is(pool, cudaMemPoolAttrReservedMemCurrent, 32 * MIB, "reserved after a free"))
        return 1;

    cuuint64_t threshold = 64 * MIB;
    CHECK_RT(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    h0 = held();
    CHECK_RT(cudaMallocFromPoolAsync(&p3, 40 * MIB, pool, 0));
    CHECK_RT(cudaFreeAsync(p3, 0));
    CHECK_RT(cudaStreamSynchronize(0));
    if (held_moved(h0, 32, "kept up to the release threshold") ||
        attr_is(pool, cudaMemPoolAttrReservedMemCurrent, 64 * MIB, "reserved under the threshold") ||
        attr_is(pool, cudaMemPoolAttrUsedMemHigh, 43 * MIB, "used high"))
        return 1;
    CHECK_RT(cudaMemPoolTrimTo(pool, 0));
    if (held_moved(h0, 0, "trimmed") ||
        attr_is(pool, cudaMemPoolAttrReservedMemCurrent, 32 * MIB, "reserved after the trim"))
        return 1;
    CHECK_RT(cudaFree(b));

    h0 = held();
    CHECK_RT(cudaMemPoolDestroy(pool));
    CHECK_RT(cudaDeviceGetMemPool(&cur, 0));
    EXPECT(cur == dflt, "the destroyed pool is still the device's current one");
    EXPECT(cudaMallocFromPoolAsync(&p4, MIB, pool, 0) == cudaErrorInvalidValue,
           "an allocation from the destroyed pool was not refused");
    (void)cudaGetLastError();
    EXPECT(cudaMemPoolDestroy(dflt) == cudaErrorInvalidValue, "the default pool was destroyed");
    (void)cudaGetLastError();
    if (held_moved(h0, 0, "destroyed with an allocation outstanding")) return 1;
    CHECK_RT(cudaMallocAsync(&p4, MIB, 0));
    h0 = held();
    CHECK_RT(cudaFreeAsync(p2, 0));
    CHECK_RT(cudaStreamSynchronize(0));
    if (held_moved(h0, -32, "the destroyed pool's last allocation freed")) return 1;

    cudaMemPool_t q;
    CHECK_RT(cudaMemPoolCreate(&q, &props));
    CHECK_RT(cudaMallocFromPoolAsync(&q1, 5 * MIB, q, 0));
    CHECK_RT(cudaFreeAsync(p4, 0));
    CHECK_RT(cudaStreamSynchronize(0));
    CHECK_RT(cudaFree(a));
    printf("pools_app: done\n");
    return 0;
}
