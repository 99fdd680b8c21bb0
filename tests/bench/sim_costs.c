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
 * and measured figures:
 *   simhost.alloc_free_ns            real host time of one cuMemAlloc+cuMemFree pair in the sim
 *   simhost.vmm_page_cost_16k_over_1k  host CPU time per 2 MiB page (create + map, then unmap +
 *                                    release front-first) with 16384 pages in one reservation,
 *                                    over the same with 1024, in this run: ~1 when the sim's
 *                                    bookkeeping costs the same per page whatever the count
 *                                    (slot table and handle hash); sorted arrays with memmove
 *                                    made it grow with the count (a terabyte-sized dry run took
 *                                    minutes to release its pages). Measured in a child with
 *                                    GPUMEM_SIM_BACKING=virtual, so that the figure is the sim's
 *                                    own bookkeeping, not the kernel's mmap costs; the bench
 *                                    fails above 3 (bar of issue 43's 70B-class recording).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* this thread's CPU time: what the page-cost ratio compares. In wall time a loaded machine's
 * preemptions fall on the long 16384-page rounds more than on the short 1024-page ones (3.44
 * in a loaded make bench, 1.06 quiet) */
static double cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Host CPU ns per page of n 2 MiB pages created and mapped one by one into a fresh reservation,
 * then unmapped and released front-first (the order gpumem's allocator releases in); best of
 * five rounds. -1 on a failed call. */
static double page_cost_ns(size_t n)
{
    static CUmemGenericAllocationHandle h[16384];
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUdeviceptr va;
    if (n > sizeof h / sizeof *h || cuMemAddressReserve(&va, n * 2 * MiB, 0, 0, 0)) return -1;
    double best = -1;
    for (int round = 0; round < 5; round++) {
        double t0 = cpu_ns();
        for (size_t i = 0; i < n; i++)
            if (cuMemCreate(&h[i], 2 * MiB, &p, 0) ||
                cuMemMap(va + i * 2 * MiB, 2 * MiB, 0, h[i], 0))
                return -1;
        for (size_t i = 0; i < n; i++)
            if (cuMemUnmap(va + i * 2 * MiB, 2 * MiB) || cuMemRelease(h[i])) return -1;
        double ns = (cpu_ns() - t0) / (double)n;
        if (best < 0 || ns < best) best = ns;
    }
    return cuMemAddressFree(va, n * 2 * MiB) ? -1 : best;
}

/* The page-cost ratio, measured in a child on a virtual-backed device (the backing is read at
 * the first driver call, which the parent has not made yet). -1 on failure. */
static double page_cost_ratio(void)
{
    int fds[2];
    if (pipe(fds)) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(fds[0]);
        setenv("GPUMEM_SIM_BACKING", "virtual", 1);
        double r[2] = {-1, -1};
        CUcontext ctx;
        /* 16384 pages are 32 GiB of device memory: the device is made big enough for them */
        if (!cuInit(0) && !cuDevicePrimaryCtxRetain(&ctx, 0) && !cuCtxSetCurrent(ctx) &&
            !sim_set_capacity((size_t)64 << 30)) {
            r[0] = page_cost_ns(1024);
            r[1] = page_cost_ns(16384);
        }
        _exit(write(fds[1], r, sizeof r) == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fds[1]);
    double r[2] = {-1, -1};
    ssize_t got = read(fds[0], r, sizeof r);
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    if (got != (ssize_t)sizeof r || r[0] <= 0 || r[1] <= 0) return -1;
    fprintf(stderr, "sim_costs: %.0f ns a page at 1024 pages, %.0f at 16384 (virtual backing)\n",
            r[0], r[1]);
    return r[1] / r[0];
}

int main(void)
{
    double page_ratio = page_cost_ratio();
    if (page_ratio < 0) {
        fprintf(stderr, "sim_costs: mapping 2 MiB pages failed\n");
        return 1;
    }
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
    printf("BENCH simhost.vmm_page_cost_16k_over_1k %.2f x\n", page_ratio);
    if (page_ratio > 3) {
        fprintf(stderr,
                "sim_costs: a page costs %.2f times more among 16384 than among 1024 (bar: 3): "
                "the sim's page bookkeeping grows with the page count\n",
                page_ratio);
        return 1;
    }
    return cuMemAddressFree(va, 64 * MiB) ? 1 : 0;
}
