/* sim_devices.c — several virtual devices (GPUMEM_SIM_DEVICES=2): a primary context each, the
 * current context choosing the device of memory calls and default streams, accounting per
 * device, streams on both, cross-device event waits, peer copies and plain copies across
 * devices (unified addressing). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

#define OK(x) assert_int_equal((x), CUDA_SUCCESS)
#define MiB ((size_t)1 << 20)

static CUcontext ctx[2];

static int setup(void **state)
{
    (void)state;
    if (cuInit(0)) return -1;
    for (int d = 0; d < 2; d++)
        if (cuDevicePrimaryCtxRetain(&ctx[d], d)) return -1;
    return 0;
}

/* the properties of VMM device memory on device dev */
static CUmemAllocationProp pinned_on(int dev)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    return prop;
}

static void test_two_devices_two_contexts(void **state)
{
    (void)state;
    int n = 0;
    OK(cuDeviceGetCount(&n));
    assert_int_equal(n, 2);
    assert_int_equal(sim_device_count(), 2);
    CUdevice d;
    OK(cuDeviceGet(&d, 1));
    assert_int_equal(d, 1);
    assert_int_equal(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
    assert_ptr_not_equal(ctx[0], ctx[1]);
    CUuuid u0, u1;
    OK(cuDeviceGetUuid(&u0, 0));
    OK(cuDeviceGetUuid(&u1, 1));
    assert_memory_not_equal(u0.bytes, u1.bytes, 16);
    OK(cuCtxSetCurrent(ctx[1]));
    OK(cuCtxGetDevice(&d));
    assert_int_equal(d, 1);
    OK(cuCtxSetCurrent(ctx[0]));
    OK(cuCtxGetDevice(&d));
    assert_int_equal(d, 0);
    int can = -1;
    OK(cuDeviceCanAccessPeer(&can, 0, 1));
    assert_int_equal(can, 1);
}

static void test_accounting_is_per_device(void **state)
{
    (void)state;
    sim_device_accounting a0, a1, b0, b1;
    OK(sim_device_info(0, &a0));
    OK(sim_device_info(1, &a1));
    assert_int_equal(sim_device_info(2, &b0), CUDA_ERROR_INVALID_DEVICE);
    OK(cuCtxSetCurrent(ctx[1]));
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 3 * MiB));
    CUmemAllocationProp prop = pinned_on(1);
    CUmemGenericAllocationHandle h;
    OK(cuMemCreate(&h, 4 * MiB, &prop, 0)); /* charged to device 1 whatever is current */
    OK(cuCtxSetCurrent(ctx[0]));
    prop.location.id = 2;
    assert_int_equal(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
    OK(sim_device_info(0, &b0));
    OK(sim_device_info(1, &b1));
    assert_int_equal(b0.allocated, a0.allocated);
    assert_int_equal(b1.allocated, a1.allocated + 8 * MiB); /* 3 MiB takes two 2 MiB pages */
    size_t fr, tot;
    OK(cuMemGetInfo(&fr, &tot)); /* device 0 is current */
    assert_int_equal(fr, b0.free);
    OK(cuCtxSetCurrent(ctx[1]));
    OK(cuMemGetInfo(&fr, &tot));
    assert_int_equal(fr, b1.free);
    int ord = -1;
    OK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    assert_int_equal(ord, 1);
    OK(cuMemFree(p));
    OK(cuMemRelease(h));
    OK(sim_device_info(1, &b1));
    assert_int_equal(b1.allocated, a1.allocated);
    OK(cuCtxSetCurrent(ctx[0]));
}

static void test_streams_on_both_devices_and_peer_copies(void **state)
{
    (void)state;
    CUstream s0, s1;
    CUdeviceptr p0, p1;
    OK(cuCtxSetCurrent(ctx[0]));
    OK(cuStreamCreate(&s0, 0));
    OK(cuMemAlloc(&p0, MiB));
    OK(cuCtxSetCurrent(ctx[1]));
    OK(cuStreamCreate(&s1, 0));
    OK(cuMemAlloc(&p1, MiB));
    CUdevice d = -1;
    OK(cuStreamGetDevice(s0, &d));
    assert_int_equal(d, 0);
    OK(cuStreamGetDevice(s1, &d));
    assert_int_equal(d, 1);
    CUcontext c;
    OK(cuStreamGetCtx(s0, &c));
    assert_ptr_equal(c, ctx[0]);
    /* Work on device 1's stream after an event on device 0's stream. */
    CUevent e;
    OK(cuEventCreate(&e, 0));
    OK(cuMemsetD8Async(p0, 0x42, MiB, s0));
    OK(cuEventRecord(e, s0));
    OK(cuStreamWaitEvent(s1, e, 0));
    OK(cuMemcpyPeerAsync(p1, ctx[1], p0, ctx[0], MiB, s1));
    OK(cuStreamSynchronize(s1));
    unsigned char h[8];
    OK(cuMemcpyDtoH(h, p1 + MiB - 8, 8));
    assert_int_equal(h[7], 0x42);
    /* Back, synchronously, and a plain copy across devices (unified addressing). */
    OK(cuMemsetD8(p1, 0x17, 64));
    OK(cuMemcpyPeer(p0, ctx[0], p1, ctx[1], 64));
    OK(cuMemcpyDtoH(h, p0, 8));
    assert_int_equal(h[0], 0x17);
    OK(cuMemsetD8(p1, 0x23, 64));
    OK(cuMemcpyDtoD(p0, p1, 64));
    OK(cuMemcpy((CUdeviceptr)h, p0, 8));
    assert_int_equal(h[5], 0x23);
    assert_int_equal(cuMemcpyPeer(p0, (CUcontext)&h, p1, ctx[1], 64), CUDA_ERROR_INVALID_CONTEXT);
    /* Peer access bookkeeping, with the driver's codes. */
    OK(cuCtxEnablePeerAccess(ctx[0], 0));
    assert_int_equal(cuCtxEnablePeerAccess(ctx[0], 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    assert_int_equal(cuCtxEnablePeerAccess(ctx[1], 0), CUDA_ERROR_INVALID_DEVICE);
    OK(cuCtxDisablePeerAccess(ctx[0]));
    assert_int_equal(cuCtxDisablePeerAccess(ctx[0]), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    OK(cuCtxSynchronize());
    OK(cuCtxSynchronize_v2(ctx[0]));
    /* Default pools are per device. */
    CUmemoryPool pool0, pool1;
    OK(cuDeviceGetDefaultMemPool(&pool0, 0));
    OK(cuDeviceGetDefaultMemPool(&pool1, 1));
    assert_ptr_not_equal(pool0, pool1);
    CUdeviceptr q;
    OK(cuMemAllocFromPoolAsync(&q, MiB, pool0, s1));
    OK(cuPointerGetAttribute(&d, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, q));
    assert_int_equal(d, 0);
    OK(cuMemFreeAsync(q, s1));
    OK(cuStreamSynchronize(s1));
    OK(cuEventDestroy(e));
    OK(cuMemFree(p1));
    OK(cuStreamDestroy(s1));
    OK(cuCtxSetCurrent(ctx[0]));
    OK(cuMemFree(p0));
    OK(cuStreamDestroy(s0));
}

static void test_pool_high_water_marks(void **state)
{
    (void)state;
    OK(cuCtxSetCurrent(ctx[0]));
    CUmemoryPool pool;
    OK(cuDeviceGetDefaultMemPool(&pool, 0));
    cuuint64_t zero = 0, v = 0, high = 0;
    OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    CUdeviceptr a, b;
    OK(cuMemAllocAsync(&a, 4 * MiB, NULL));
    OK(cuMemAllocAsync(&b, 2 * MiB, NULL));
    OK(cuMemFreeAsync(a, NULL));
    OK(cuStreamSynchronize(NULL));
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
    assert_int_equal(v, 2 * MiB);
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high));
    assert_int_equal(high, 6 * MiB); /* the mark, not the current use */
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high));
    assert_int_equal(high, 32 * MiB); /* the pool reserves 32 MiB chunks (an H200's) */
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v));
    assert_int_equal(v, 32 * MiB);
    cuuint64_t one = 1;
    assert_int_equal(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &one),
                     CUDA_ERROR_INVALID_VALUE); /* only 0 resets */
    OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high));
    assert_int_equal(high, 32 * MiB); /* reset to the current reservation */
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high));
    assert_int_equal(high, 6 * MiB); /* the two marks are reset apart */
    OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high));
    assert_int_equal(high, 2 * MiB);
    OK(cuMemFreeAsync(b, NULL));
    OK(cuStreamSynchronize(NULL));
}

/* A primary context reset destroys the device allocations made through that device's context
 * (cuMemAlloc, the stream-ordered pool), as an H200's does, and nothing else: not the other
 * device's, not VMM memory, not pinned host memory. The context stays usable. */
static void test_reset_frees_the_device_allocations(void **state)
{
    (void)state;
    sim_device_accounting a0, a1, b0, b1;
    OK(sim_device_info(0, &a0));
    OK(sim_device_info(1, &a1));
    OK(cuCtxSetCurrent(ctx[0]));
    CUdeviceptr other;
    OK(cuMemAlloc(&other, MiB));
    OK(cuCtxSetCurrent(ctx[1]));
    CUdeviceptr p, q, va;
    OK(cuMemAlloc(&p, 3 * MiB));
    OK(cuMemAllocAsync(&q, MiB, NULL));
    OK(cuStreamSynchronize(NULL));
    CUmemAllocationProp prop = pinned_on(1);
    CUmemGenericAllocationHandle h;
    OK(cuMemCreate(&h, 2 * MiB, &prop, 0));
    OK(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
    OK(cuMemMap(va, 2 * MiB, 0, h, 0));
    void *host;
    OK(cuMemAllocHost(&host, 4096));

    OK(cuDevicePrimaryCtxReset(1));
    OK(sim_device_info(1, &b1));
    assert_int_equal(b1.allocated, a1.allocated + 2 * MiB); /* the VMM handle only */
    CUdeviceptr base;
    size_t size;
    assert_int_equal(cuMemGetAddressRange(&base, &size, p), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(cuMemFree(p), CUDA_ERROR_INVALID_VALUE); /* already gone */
    assert_int_equal(cuMemFree(q), CUDA_ERROR_INVALID_VALUE);
    OK(sim_device_info(0, &b0));
    assert_int_equal(b0.allocated, a0.allocated + 2 * MiB); /* device 0's stays */
    OK(cuMemAlloc(&p, MiB));                                /* the context is still usable */
    OK(cuMemFree(p));
    OK(cuMemUnmap(va, 2 * MiB));
    OK(cuMemAddressFree(va, 2 * MiB));
    OK(cuMemRelease(h));
    OK(cuMemFreeHost(host));
    OK(cuCtxSetCurrent(ctx[0]));
    OK(cuMemFree(other));
    OK(sim_device_info(0, &b0));
    OK(sim_device_info(1, &b1));
    assert_int_equal(b0.allocated, a0.allocated);
    assert_int_equal(b1.allocated, a1.allocated);
}

int main(void)
{
    setenv("GPUMEM_SIM_DEVICES", "2", 1);
    unsetenv("GPUMEM_SIM_FAULTS");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_devices_two_contexts),
        cmocka_unit_test(test_accounting_is_per_device),
        cmocka_unit_test(test_streams_on_both_devices_and_peer_copies),
        cmocka_unit_test(test_pool_high_water_marks),
        cmocka_unit_test(test_reset_frees_the_device_allocations),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
