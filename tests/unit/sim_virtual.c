/* sim_virtual.c — GPUMEM_SIM_BACKING=virtual with GPUMEM_SIM_MEMORY=80G: an 80 GB device on a
 * machine with far less memory accepts 70 GB of maps (and cuMemAlloc), refuses what exceeds
 * 80 GB, costs no host memory, and still faults on access; copies from it into pinned memory
 * read as zeros and give host pages back. The environment is set in main()
 * before the first driver call, since the driver reads it once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/sim.h"
#include "tests/unit/sim_test.h"

#define OK(x) assert_int_equal((x), CUDA_SUCCESS)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static CUmemAllocationProp prop(void)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    return p;
}

/* Resident set size of this process in bytes. */
static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    unsigned long size = 0, resident = 0;
    assert_int_equal(fscanf(f, "%lu %lu", &size, &resident), 2);
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

static void test_virtual_device_is_80g(void **state)
{
    (void)state;
    assert_int_equal(sim_backing_is_virtual(), 1);
    size_t fr, total;
    OK(cuMemGetInfo(&fr, &total));
    assert_int_equal(total, 80 * GiB);
    /* The active primary context takes the default context size (README: 426 MiB, measured on
     * a real driver), so free = capacity - context before any allocation. */
    sim_device_accounting acc;
    OK(sim_device_info(0, &acc));
    assert_int_equal(acc.context_bytes, 426 * MiB);
    assert_int_equal(fr, total - acc.context_bytes);
    assert_int_equal(acc.free, fr);
}

static void test_70g_of_maps_fit_and_more_than_80g_does_not(void **state)
{
    (void)state;
    size_t rss0 = rss_bytes();
    CUmemAllocationProp p = prop();
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, 96 * GiB, 0, 0, 0));
    enum { N = 35 };
    CUmemGenericAllocationHandle h[N];
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (int i = 0; i < N; i++) { /* 35 x 2 GiB = 70 GiB */
        OK(cuMemCreate(&h[i], 2 * GiB, &p, 0));
        OK(cuMemMap(va + (size_t)i * 2 * GiB, 2 * GiB, 0, h[i], 0));
    }
    OK(cuMemSetAccess(va, 70 * GiB, &d, 1));
    /* Plus many small 2 MiB handles, the allocator's usual page size: 4 GiB more. */
    enum { M = 2048 };
    static CUmemGenericAllocationHandle small[M];
    for (int i = 0; i < M; i++) {
        OK(cuMemCreate(&small[i], 2 * MiB, &p, 0));
        OK(cuMemMap(va + 70 * GiB + (size_t)i * 2 * MiB, 2 * MiB, 0, small[i], 0));
    }
    OK(cuMemSetAccess(va + 70 * GiB, 4 * GiB, &d, 1));
    size_t fr, total;
    OK(cuMemGetInfo(&fr, &total));
    const size_t ctx = 426 * MiB; /* the context charge (test_virtual_device_is_80g) */
    assert_int_equal(fr, 6 * GiB - ctx);
    CUmemGenericAllocationHandle big;
    assert_int_equal(cuMemCreate(&big, 8 * GiB, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CUdeviceptr dp;
    assert_int_equal(cuMemAlloc(&dp, 6 * GiB), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemAlloc(&dp, 6 * GiB - ctx));
    /* None of it costs host memory. */
    assert_true(rss_bytes() - rss0 < 256 * MiB);
    OK(cuMemFree(dp));
    OK(cuMemUnmap(va + 70 * GiB, 4 * GiB));
    for (int i = 0; i < M; i++)
        OK(cuMemRelease(small[i]));
    OK(cuMemUnmap(va, 70 * GiB));
    for (int i = 0; i < N; i++)
        OK(cuMemRelease(h[i]));
    OK(cuMemAddressFree(va, 96 * GiB));
    OK(cuMemGetInfo(&fr, &total));
    assert_int_equal(fr, total - ctx);
}

static void touch(volatile char *p)
{
    p[0] = 1;
}

static void test_virtual_memory_has_no_bytes(void **state)
{
    (void)state;
    CUdeviceptr dp;
    OK(cuMemAlloc(&dp, 64 * MiB));
    /* Copies and memsets into device memory succeed without storing anything; reading back gives
     * defined (zero) host bytes. */
    char buf[64];
    memset(buf, 'x', sizeof buf);
    OK(cuMemcpyHtoD(dp, buf, sizeof buf));
    OK(cuMemsetD8(dp, 0xff, 64 * MiB));
    OK(cuMemcpyDtoH(buf, dp, sizeof buf));
    assert_int_equal(buf[0], 0);
    assert_int_equal(buf[63], 0);
    assert_int_equal(cuMemcpyHtoD(dp + 64 * MiB - 8, buf, 64),
                     CUDA_ERROR_INVALID_VALUE); /* bounds */
    /* Touching it faults: there is nothing behind the addresses. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        touch((volatile char *)dp);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    OK(cuMemFree(dp));
    /* Host memory stays real. */
    void *h;
    OK(cuMemHostAlloc(&h, 4096, 0));
    memset(h, 1, 4096);
    OK(cuMemFreeHost(h));
}

/* A device -> host copy into the sim's own pinned memory reads as zeros without writing them:
 * whole pages are given back (PyTorch's save_on_cpu offloads gigabytes this way), so the
 * process gets smaller, not bigger; the partial pages at the ends are cleared. */
static void test_copy_to_pinned_gives_pages_back(void **state)
{
    (void)state;
    CUdeviceptr dp;
    OK(cuMemAlloc(&dp, 64 * MiB));
    char *h;
    OK(cuMemHostAlloc((void **)&h, 64 * MiB, 0));
    memset(h, 0xab, 64 * MiB);
    size_t before = rss_bytes();
    OK(cuMemcpyDtoH(h + 100, dp, 64 * MiB - 200));
    size_t after = rss_bytes();
    assert_true(after + 60 * MiB < before);
    assert_int_equal(h[99], (char)0xab); /* outside the copy */
    assert_int_equal(h[100], 0);
    assert_int_equal(h[4096], 0);
    assert_int_equal(h[64 * MiB - 101], 0);
    assert_int_equal(h[64 * MiB - 100], (char)0xab);
    OK(cuMemFreeHost(h));
    OK(cuMemFree(dp));
}

int main(void)
{
    setenv("GPUMEM_SIM_BACKING", "virtual", 1);
    setenv("GPUMEM_SIM_MEMORY", "80G", 1);
    unsetenv("GPUMEM_SIM_FAULTS");
    if (sim_test_ctx(0) != CUDA_SUCCESS) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_virtual_device_is_80g),
        cmocka_unit_test(test_70g_of_maps_fit_and_more_than_80g_does_not),
        cmocka_unit_test(test_virtual_memory_has_no_bytes),
        cmocka_unit_test(test_copy_to_pinned_gives_pages_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
