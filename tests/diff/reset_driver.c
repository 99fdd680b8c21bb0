/* A device reset through the driver (cuDevicePrimaryCtxReset), as reset.c does through the
 * runtime: allocations made with cuMemAlloc and cuMemAllocAsync before it, asked about after it
 * (address range, a free), and the context used again. The diff suite's runner also checks
 * that a recording of it has no leak: what the reset destroyed is recorded freed. */
#include "tests/diff/diff.h"

int main(void)
{
    DRV(init, cuInit);
    DRV(retain, cuDevicePrimaryCtxRetain);
    DRV(setcur, cuCtxSetCurrent);
    DRV(reset, cuDevicePrimaryCtxReset_v2);
    DRV(malloc_, cuMemAlloc_v2);
    DRV(free_, cuMemFree_v2);
    DRV(amalloc, cuMemAllocAsync);
    DRV(sync, cuCtxSynchronize);
    DRV(range, cuMemGetAddressRange_v2);
    CUcontext ctx;
    cu("cuInit", init(0));
    cu("cuDevicePrimaryCtxRetain", retain(&ctx, 0));
    cu("cuCtxSetCurrent", setcur(ctx));
    CUdeviceptr a = 0, b = 0, base;
    size_t size;
    cu("cuMemAlloc(2 MiB)", malloc_(&a, 2 << 20));
    cu("cuMemAllocAsync(1 MiB)", amalloc(&b, 1 << 20, NULL));
    cu("cuCtxSynchronize", sync());
    cu("cuDevicePrimaryCtxReset", reset(0));
    cu("cuCtxSetCurrent after it", setcur(ctx));
    cu("cuMemGetAddressRange of the cuMemAlloc'ed", range(&base, &size, a));
    cu("cuMemGetAddressRange of the cuMemAllocAsync'ed", range(&base, &size, b));
    cu("cuMemFree of the cuMemAlloc'ed", free_(a));
    CUdeviceptr c = 0;
    cu("cuMemAlloc after it", malloc_(&c, 1000));
    cu("cuMemFree of that", free_(c));
    return 0;
}
