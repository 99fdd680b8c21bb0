/* sim_threads.c — the virtual GPU under concurrent use: several threads allocate, copy, map,
 * record events, create streams and launch kernels at once. Every call must succeed, each
 * thread must read back exactly what it wrote, and at the end all memory is accounted back.
 * Run under ThreadSanitizer too (TSAN_UNIT_TESTS). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "tests/unit/sim_test.h"

#define MiB ((size_t)1 << 20)
#define NTHREADS 4
#define ITERS 150

static CUfunction add_kernel;

/* out[i] += k for i < n */
static void kernel_add(void **p)
{
    int *out = *(int **)p[0];
    int k = *(int *)p[1];
    int n = *(int *)p[2];
    for (int i = 0; i < n; i++)
        out[i] += k;
}

typedef struct {
    int id;
    int failures;
} worker_arg;

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if ((x) != CUDA_SUCCESS) {                                                                 \
            a->failures++;                                                                         \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static void *worker(void *arg)
{
    worker_arg *a = arg;
    CUcontext ctx;
    CUstream s = NULL;
    CUevent e = NULL;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (int it = 0; it < ITERS; it++) {
        int host[64], back[64];
        for (int i = 0; i < 64; i++)
            host[i] = a->id * 100000 + it * 100 + i;
        CUdeviceptr p;
        CHECK(cuMemAllocAsync(&p, sizeof host, s));
        CHECK(cuMemcpyHtoDAsync(p, host, sizeof host, s));
        int k = 3, n = 64;
        void *params[] = {&p, &k, &n};
        CHECK(cuLaunchKernel(add_kernel, 1, 1, 1, 64, 1, 1, 0, s, params, NULL));
        CHECK(cuEventRecord(e, s));
        CHECK(cuEventSynchronize(e));
        CHECK(cuMemcpyDtoH(back, p, sizeof back));
        for (int i = 0; i < 64; i++)
            if (back[i] != host[i] + 3) {
                a->failures++;
                goto out;
            }
        CHECK(cuMemFreeAsync(p, s));

        CUdeviceptr va;
        CUmemGenericAllocationHandle h;
        CHECK(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0));
        CHECK(cuMemCreate(&h, 2 * MiB, &prop, 0));
        CHECK(cuMemMap(va, 2 * MiB, 0, h, 0));
        CHECK(cuMemSetAccess(va, 2 * MiB, &d, 1));
        ((int *)va)[it] = it;
        if (((int *)va)[it] != it) {
            a->failures++;
            goto out;
        }
        CHECK(cuMemUnmap(va, 2 * MiB));
        CHECK(cuMemRelease(h));
        CHECK(cuMemAddressFree(va, 4 * MiB));
        if (it % 25 == 0) {
            CUstream tmp;
            CHECK(cuStreamCreate(&tmp, 0));
            CHECK(cuStreamSynchronize(tmp));
            CHECK(cuStreamDestroy(tmp));
            sim_stats st;
            sim_stats_get(&st);
        }
    }
out:
    if (e) cuEventDestroy(e);
    if (s) cuStreamDestroy(s);
    return NULL;
}

static void test_concurrent_use_is_safe_and_accounted(void **state)
{
    (void)state;
    assert_int_equal(sim_test_ctx(0), CUDA_SUCCESS);
    size_t sizes[] = {sizeof(int *), sizeof(int), sizeof(int)};
    assert_int_equal(sim_register_kernel("add", kernel_add, 3, sizes, &add_kernel), CUDA_SUCCESS);
    size_t free0, free1, total;
    assert_int_equal(cuMemGetInfo(&free0, &total), CUDA_SUCCESS);
    pthread_t th[NTHREADS];
    worker_arg args[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        args[i] = (worker_arg){.id = i, .failures = 0};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    assert_int_equal(cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
    assert_int_equal(free1, free0);
    sim_stats st;
    sim_stats_get(&st);
    assert_int_equal(st.op[SIM_OP_MEM_MAP].calls, NTHREADS * ITERS);
    assert_int_equal(st.op[SIM_OP_LAUNCH].calls, NTHREADS * ITERS);
}

int main(void)
{
    unsetenv("GPUMEM_SIM_BACKING");
    unsetenv("GPUMEM_SIM_FAULTS");
    unsetenv("GPUMEM_SIM_EVENT_DELAY");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_use_is_safe_and_accounted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
