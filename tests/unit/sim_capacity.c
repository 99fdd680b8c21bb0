/* sim_capacity.c — capacity accounting (exhaustion returns CUDA_ERROR_OUT_OF_MEMORY and recovers
 * after frees, for cuMemAlloc and cuMemCreate alike) and fault injection (nth allocation,
 * oom_at, plan syntax). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "tests/unit/sim_test.h"

#define OK(x) assert_int_equal((x), CUDA_SUCCESS)
#define MiB ((size_t)1 << 20)

static CUmemAllocationProp prop(void)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    return p;
}

static int setup(void **state)
{
    (void)state;
    unsetenv("GPUMEM_SIM_FAULTS");
    if (sim_test_ctx(0) != CUDA_SUCCESS) return -1;
    /* A 64 MiB device, no context charge (test_context_is_charged sets its own). */
    if (sim_set_context_bytes(0) != CUDA_SUCCESS) return -1;
    return sim_set_capacity(64 * MiB) == CUDA_SUCCESS ? 0 : -1;
}

static void test_capacity_is_what_was_set(void **state)
{
    (void)state;
    size_t fr, total, dt;
    OK(cuMemGetInfo(&fr, &total));
    assert_int_equal(total, 64 * MiB);
    assert_int_equal(fr, 64 * MiB);
    OK(cuDeviceTotalMem(&dt, 0));
    assert_int_equal(dt, 64 * MiB);
    sim_stats st;
    sim_stats_get(&st);
    assert_int_equal(st.capacity, 64 * MiB);
}

static void test_exhaustion_returns_oom_and_recovers_after_frees(void **state)
{
    (void)state;
    CUdeviceptr p[4], extra;
    for (int i = 0; i < 4; i++)
        OK(cuMemAlloc(&p[i], 16 * MiB));
    assert_int_equal(cuMemAlloc(&extra, 512), CUDA_ERROR_OUT_OF_MEMORY);
    size_t fr, total;
    OK(cuMemGetInfo(&fr, &total));
    assert_int_equal(fr, 0);
    /* Below the capacity again: allocations succeed. */
    OK(cuMemFree(p[2]));
    OK(cuMemAlloc(&extra, 8 * MiB));
    OK(cuMemAlloc(&p[2], 8 * MiB));
    CUdeviceptr refused = 1;
    assert_int_equal(cuMemAlloc(&refused, 512), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(refused, 0); /* a refused allocation leaves 0, as the real driver does */
    /* Physical handles draw on the same capacity. */
    CUmemAllocationProp pr = prop();
    CUmemGenericAllocationHandle h;
    assert_int_equal(cuMemCreate(&h, 2 * MiB, &pr, 0), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemFree(p[0]));
    OK(cuMemCreate(&h, 16 * MiB, &pr, 0));
    assert_int_equal(cuMemAlloc(&p[0], 512), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemRelease(h));
    OK(cuMemAlloc(&p[0], 16 * MiB));
    OK(cuMemFree(p[0]));
    OK(cuMemFree(p[1]));
    OK(cuMemFree(p[2]));
    OK(cuMemFree(p[3]));
    OK(cuMemFree(extra));
    OK(cuMemGetInfo(&fr, &total));
    assert_int_equal(fr, total);
    /* Capacity cannot drop below what is in use. */
    OK(cuMemAlloc(&p[0], 32 * MiB));
    assert_int_equal(sim_set_capacity(16 * MiB), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(p[0]));
}

static void test_fail_nth_allocation(void **state)
{
    (void)state;
    sim_stats st0, st1;
    sim_stats_get(&st0);
    OK(sim_faults_set("alloc:3,alloc:5"));
    CUdeviceptr p[6];
    CUmemAllocationProp pr = prop();
    CUmemGenericAllocationHandle h;
    OK(cuMemAlloc(&p[0], 4096));                                         /* 1 */
    OK(cuMemAllocAsync(&p[1], 4096, NULL));                              /* 2 */
    assert_int_equal(cuMemAlloc(&p[2], 4096), CUDA_ERROR_OUT_OF_MEMORY); /* 3 */
    OK(cuMemCreate(&h, 2 * MiB, &pr, 0));                                /* 4 */
    assert_int_equal(cuMemAlloc(&p[3], 4096), CUDA_ERROR_OUT_OF_MEMORY); /* 5 */
    OK(cuMemAlloc(&p[4], 4096));                                         /* 6 */
    sim_stats_get(&st1);
    assert_int_equal(st1.faults_injected - st0.faults_injected, 2);
    OK(sim_faults_set(""));
    OK(cuMemFree(p[0]));
    OK(cuMemFreeAsync(p[1], NULL));
    OK(cuMemFree(p[4]));
    OK(cuMemRelease(h));
}

static void test_oom_at_threshold(void **state)
{
    (void)state;
    OK(sim_faults_set("oom_at:10M"));
    CUdeviceptr a, b, c;
    OK(cuMemAlloc(&a, 6 * MiB));
    assert_int_equal(cuMemAlloc(&b, 6 * MiB), CUDA_ERROR_OUT_OF_MEMORY); /* 12M > 10M */
    OK(cuMemAlloc(&b, 4 * MiB)); /* exactly 10M is allowed */
    assert_int_equal(cuMemAlloc(&c, 512), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemFree(a));
    OK(cuMemAlloc(&c, 512)); /* back under the threshold */
    OK(sim_faults_set(NULL));
    OK(cuMemFree(b));
    OK(cuMemFree(c));
}

static void test_bad_fault_syntax_is_rejected_and_plan_kept(void **state)
{
    (void)state;
    OK(sim_faults_set("alloc:2"));
    const char *bad[] = {"alloc",       "alloc:0", "alloc:x",     "map:-1",
                         "oom_at:lots", "boom:3",  "alloc:2,,x:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(sim_faults_set(bad[i]), CUDA_ERROR_INVALID_VALUE);
    /* The earlier plan still holds: the 2nd allocation fails. */
    CUdeviceptr a, b;
    OK(cuMemAlloc(&a, 512));
    assert_int_equal(cuMemAlloc(&b, 512), CUDA_ERROR_OUT_OF_MEMORY);
    OK(sim_faults_set(NULL));
    OK(cuMemFree(a));
}

static void test_peak_tracks_highest_use(void **state)
{
    (void)state;
    sim_stats_reset();
    CUdeviceptr a, b;
    OK(cuMemAlloc(&a, 8 * MiB));
    OK(cuMemAlloc(&b, 16 * MiB));
    OK(cuMemFree(b));
    sim_stats st;
    sim_stats_get(&st);
    assert_int_equal(st.used, 8 * MiB);
    assert_int_equal(st.peak, 24 * MiB);
    OK(cuMemFree(a));
}

/* Freed cuMemAlloc backing is recycled on the host: live allocations never overlap, their data
 * is theirs, and the device accounting is exactly as if every allocation were fresh. */
static void test_recycled_backing_keeps_accounting_and_isolation(void **state)
{
    (void)state;
    size_t free0, total;
    OK(cuMemGetInfo(&free0, &total));
    for (int round = 0; round < 50; round++) {
        CUdeviceptr a, b;
        OK(cuMemAlloc(&a, 3 * MiB));
        OK(cuMemAlloc(&b, 3 * MiB));
        assert_true(a + 3 * MiB <= b || b + 3 * MiB <= a);
        memset((void *)(uintptr_t)a, 0xAA, 3 * MiB);
        memset((void *)(uintptr_t)b, 0x55, 3 * MiB);
        assert_int_equal(((unsigned char *)(uintptr_t)a)[3 * MiB - 1], 0xAA);
        size_t f;
        OK(cuMemGetInfo(&f, &total));
        assert_true(f <= free0 - 6 * MiB);
        OK(cuMemFree(a));
        OK(cuMemFree(b));
        assert_int_equal(cuMemFree(a), CUDA_ERROR_INVALID_VALUE); /* gone for the program */
    }
    size_t free1;
    OK(cuMemGetInfo(&free1, &total));
    assert_int_equal(free1, free0);
}

/* The CUDA context's memory: free = capacity - context - allocations while the primary context
 * is active; none once it is released; a context that does not fit fails to activate. */
static void test_context_is_charged(void **state)
{
    (void)state;
    OK(sim_set_context_bytes(8 * MiB));
    sim_device_accounting acc;
    OK(sim_device_info(0, &acc));
    assert_int_equal(acc.context_bytes, 8 * MiB); /* sim_test_ctx retained it */
    size_t fr, total;
    OK(cuMemGetInfo(&fr, &total));
    assert_int_equal(total, 64 * MiB);
    assert_int_equal(fr, 56 * MiB);
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4 * MiB));
    OK(cuMemGetInfo(&fr, &total));
    assert_int_equal(fr, 52 * MiB);
    OK(sim_device_info(0, &acc));
    assert_int_equal(acc.free, fr);
    assert_int_equal(acc.capacity - acc.context_bytes - acc.allocated, fr);
    CUdeviceptr q;
    assert_int_equal(cuMemAlloc(&q, 56 * MiB), CUDA_ERROR_OUT_OF_MEMORY);        /* 52 MiB left */
    assert_int_equal(sim_set_capacity(12 * MiB - 1), CUDA_ERROR_INVALID_VALUE);  /* 4 + 8 */
    assert_int_equal(sim_set_context_bytes(61 * MiB), CUDA_ERROR_INVALID_VALUE); /* 60 free */
    /* Released to zero references, the context gives its memory back. */
    OK(cuDevicePrimaryCtxRelease(0));
    OK(sim_device_info(0, &acc));
    assert_int_equal(acc.context_bytes, 0);
    assert_int_equal(acc.free, 60 * MiB);
    CUcontext c;
    OK(cuDevicePrimaryCtxRetain(&c, 0));
    OK(cuCtxSetCurrent(c));
    OK(cuMemFree(p));
    OK(sim_set_context_bytes(0));
    assert_int_equal(sim_set_context_bytes(65 * MiB), CUDA_ERROR_INVALID_VALUE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context_is_charged),
        cmocka_unit_test(test_capacity_is_what_was_set),
        cmocka_unit_test(test_exhaustion_returns_oom_and_recovers_after_frees),
        cmocka_unit_test(test_fail_nth_allocation),
        cmocka_unit_test(test_oom_at_threshold),
        cmocka_unit_test(test_bad_fault_syntax_is_rejected_and_plan_kept),
        cmocka_unit_test(test_peak_tracks_highest_use),
        cmocka_unit_test(test_recycled_backing_keeps_accounting_and_isolation),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
