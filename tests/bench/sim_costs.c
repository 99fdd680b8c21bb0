/* sim_costs.c — what the virtual GPU's cost model says common allocation patterns cost the
 * driver, side by side, plus what the sim itself costs on the host per call. Prints
 * `BENCH <name> <value> <unit>` lines (make bench).
 *
 * Figures from the cost table (what a driver would have spent, not measured) are named sim.*:
 *   sim.cudaMalloc_free_20MiB_us     one cuMemAlloc + cuMemFree of 20 MiB
 *   sim.vmm_20MiB_one_handle_us      reserve-free path: 1 x 20 MiB handle
 *                                    create+map+access+unmap+release
 *   sim.vmm_20MiB_ten_handles_us     the same 20 MiB as 10 x 2 MiB handles
 *   sim.vmm_ten_vs_one_handle_ratio  how much more ten small handles cost (driver cost grows
 *                                    with the number of physical chunks)
 * and one measured figure:
 *   simhost.alloc_free_ns            real host time of one cuMemAlloc+cuMemFree pair in the sim
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sim/sim.h"

#define MiB ((size_t)1 << 20)

static double total_us(void)
{
    sim_stats st;
    sim_stats_get(&st);
    return st.total_us;
}

static int vmm_cycle(size_t handle_size, int nhandles, CUdeviceptr va)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUmemGenericAllocationHandle h[16];
    for (int i = 0; i < nhandles; i++) {
        if (cuMemCreate(&h[i], handle_size, &p, 0)) return -1;
        if (cuMemMap(va + (size_t)i * handle_size, handle_size, 0, h[i], 0)) return -1;
    }
    if (cuMemSetAccess(va, handle_size * (size_t)nhandles, &d, 1)) return -1;
    for (int i = 0; i < nhandles; i++) {
        if (cuMemUnmap(va + (size_t)i * handle_size, handle_size)) return -1;
        if (cuMemRelease(h[i])) return -1;
    }
    return 0;
}

int main(void)
{
    CUcontext ctx;
    if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx)) {
        fprintf(stderr, "sim_costs: cuInit or the primary context failed\n");
        return 1;
    }
    CUdeviceptr va, p;
    if (cuMemAddressReserve(&va, 64 * MiB, 0, 0, 0)) return 1;

    double t0 = total_us();
    if (cuMemAlloc(&p, 20 * MiB) || cuMemFree(p)) return 1;
    double malloc_us = total_us() - t0;

    t0 = total_us();
    if (vmm_cycle(20 * MiB, 1, va)) return 1;
    double one_us = total_us() - t0;

    t0 = total_us();
    if (vmm_cycle(2 * MiB, 10, va)) return 1;
    double ten_us = total_us() - t0;

    enum { N = 20000 };
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < N; i++)
        if (cuMemAlloc(&p, 4096) || cuMemFree(p)) return 1;
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / N;

    printf("BENCH sim.cudaMalloc_free_20MiB_us %.1f us\n", malloc_us);
    printf("BENCH sim.vmm_20MiB_one_handle_us %.1f us\n", one_us);
    printf("BENCH sim.vmm_20MiB_ten_handles_us %.1f us\n", ten_us);
    printf("BENCH sim.vmm_ten_vs_one_handle_ratio %.2f x\n", ten_us / one_us);
    printf("BENCH simhost.alloc_free_ns %.0f ns\n", ns);
    return cuMemAddressFree(va, 64 * MiB) ? 1 : 0;
}
