/* sim_async.c — completion in stream order and cross-stream dependencies on the virtual GPU.
 *
 * Asynchronous mode (GPUMEM_SIM_ASYNC=1, the parent process): each stream's work runs on its own
 * worker thread. A "gate" kernel blocks until the test opens its gate, so what can and cannot
 * have run while it is closed is known exactly, without timing anything:
 *  - a kernel on stream B that waits (cuStreamWaitEvent) on an event recorded after A's gated
 *    kernel cannot run, and B reports NOT_READY, until the gate opens; then it runs after A's;
 *  - without the wait, B's kernel runs and B synchronizes while A is still blocked: it ran first;
 *  - the legacy default stream waits for blocking streams (and not for non-blocking ones);
 *  - cuMemFreeAsync frees only when its stream reaches it.
 * Synchronous mode (the default, a forked child): work runs at issue time, and completion is in
 * stream order: an event recorded on B after a wait on A's delayed event is not complete before
 * A's event is.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/sim.h"
#include "tests/unit/sim_test.h"

#define OK(x) assert_int_equal((x), CUDA_SUCCESS)

static atomic_int gate_open;
static char order[64];
static atomic_int norder;
static CUfunction k_gate, k_mark;

static void log_char(char c)
{
    int i = atomic_fetch_add(&norder, 1);
    if (i < (int)sizeof order - 1) order[i] = c;
}

/* (char tag): waits for the gate, then logs its tag. */
static void kernel_gate(void **p)
{
    char tag = *(char *)p[0];
    while (!atomic_load(&gate_open))
        usleep(100);
    log_char(tag);
}

/* (char tag): logs its tag. */
static void kernel_mark(void **p)
{
    log_char(*(char *)p[0]);
}

static void reset_log(void)
{
    memset(order, 0, sizeof order);
    atomic_store(&norder, 0);
    atomic_store(&gate_open, 0);
}

static void launch(CUfunction f, CUstream s, char tag)
{
    void *args[] = {&tag}; /* copied at launch: the local may be gone when the kernel runs */
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

static int setup(void **state)
{
    (void)state;
    if (sim_test_ctx(0)) return -1;
    size_t sz[] = {sizeof(char)};
    if (sim_register_kernel("gate", kernel_gate, 1, sz, &k_gate)) return -1;
    if (sim_register_kernel("mark", kernel_mark, 1, sz, &k_mark)) return -1;
    return 0;
}

static void test_mode_is_async(void **state)
{
    (void)state;
    assert_int_equal(sim_async_enabled(), 1);
}

static void test_wait_event_orders_kernels_across_streams(void **state)
{
    (void)state;
    reset_log();
    CUstream a, b;
    CUevent e;
    OK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    launch(k_gate, a, 'A');
    OK(cuEventRecord(e, a));
    OK(cuStreamWaitEvent(b, e, 0));
    launch(k_mark, b, 'B');
    /* A is blocked at its gate, so B (behind the wait) cannot have run. */
    for (int i = 0; i < 50; i++) {
        assert_int_equal(cuStreamQuery(b), CUDA_ERROR_NOT_READY);
        assert_int_equal(cuEventQuery(e), CUDA_ERROR_NOT_READY);
        usleep(200);
    }
    assert_int_equal(atomic_load(&norder), 0);
    atomic_store(&gate_open, 1);
    OK(cuStreamSynchronize(b));
    assert_string_equal(order, "AB");
    OK(cuEventQuery(e)); /* B's work completed after the wait, so the event has too */
    OK(cuEventDestroy(e));
    OK(cuStreamDestroy(a));
    OK(cuStreamDestroy(b));
}

static void test_without_wait_b_runs_before_a(void **state)
{
    (void)state;
    reset_log();
    CUstream a, b;
    OK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    launch(k_gate, a, 'A');
    launch(k_mark, b, 'B');
    OK(cuStreamSynchronize(b)); /* returns while A is still blocked at its gate */
    assert_string_equal(order, "B");
    assert_int_equal(cuStreamQuery(a), CUDA_ERROR_NOT_READY);
    atomic_store(&gate_open, 1);
    OK(cuStreamSynchronize(a));
    assert_string_equal(order, "BA");
    OK(cuStreamDestroy(a));
    OK(cuStreamDestroy(b));
}

static void test_stream_order_within_a_stream(void **state)
{
    (void)state;
    reset_log();
    CUstream a;
    OK(cuStreamCreate(&a, 0));
    launch(k_gate, a, '1');
    launch(k_mark, a, '2');
    launch(k_mark, a, '3');
    assert_int_equal(cuStreamQuery(a), CUDA_ERROR_NOT_READY);
    atomic_store(&gate_open, 1);
    OK(cuStreamSynchronize(a));
    assert_string_equal(order, "123");
    OK(cuStreamDestroy(a));
}

static void test_legacy_stream_waits_for_blocking_streams_only(void **state)
{
    (void)state;
    reset_log();
    CUstream blocking, nonblocking;
    OK(cuStreamCreate(&blocking, 0));
    OK(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));
    launch(k_gate, nonblocking, 'N');
    launch(k_mark, NULL, 'L');                     /* does not wait for a non-blocking stream */
    OK(cuStreamSynchronize(CU_STREAM_PER_THREAD)); /* unrelated stream: nothing to wait for */
    OK(cuStreamQuery(CU_STREAM_PER_THREAD));
    OK(cuStreamSynchronize(NULL)); /* the legacy stream and the blocking streams only */
    assert_string_equal(order, "L");
    assert_int_equal(cuStreamQuery(nonblocking), CUDA_ERROR_NOT_READY);
    atomic_store(&gate_open, 1);
    OK(cuStreamSynchronize(nonblocking));
    assert_string_equal(order, "LN");

    reset_log();
    launch(k_gate, blocking, 'G');
    launch(k_mark, NULL, 'L'); /* waits for the blocking stream's gate */
    for (int i = 0; i < 50; i++) {
        assert_int_equal(cuStreamQuery(NULL), CUDA_ERROR_NOT_READY);
        usleep(200);
    }
    assert_int_equal(atomic_load(&norder), 0);
    atomic_store(&gate_open, 1);
    OK(cuStreamSynchronize(NULL));
    assert_string_equal(order, "GL");
    OK(cuStreamDestroy(blocking));
    OK(cuStreamDestroy(nonblocking));
}

static void test_free_async_happens_in_stream_order(void **state)
{
    (void)state;
    reset_log();
    CUstream a;
    OK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    sim_device_accounting before, during, after;
    OK(sim_device_info(0, &before));
    CUdeviceptr p;
    OK(cuMemAllocAsync(&p, 1 << 20, a));
    launch(k_gate, a, 'F');
    OK(cuMemFreeAsync(p, a));
    assert_int_equal(cuMemFreeAsync(p, a), CUDA_ERROR_INVALID_VALUE); /* already being freed */
    OK(sim_device_info(0, &during));
    /* still held: the pool's 32 MiB chunk, as an H200 reserves it */
    assert_int_equal(during.allocated, before.allocated + (32 << 20));
    atomic_store(&gate_open, 1);
    OK(cuStreamSynchronize(a));
    OK(sim_device_info(0, &after));
    assert_int_equal(after.allocated, before.allocated);
    OK(cuStreamDestroy(a));
}

static void test_copies_run_in_stream_order(void **state)
{
    (void)state;
    reset_log();
    CUstream a;
    OK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 4096));
    OK(cuMemsetD8(d, 1, 4096));
    char *host;
    OK(cuMemAllocHost((void **)&host, 4096));
    memset(host, 0, 4096);
    launch(k_gate, a, 'C');
    OK(cuMemsetD8Async(d, 7, 4096, a));
    OK(cuMemcpyDtoHAsync(host, d, 4096, a));
    for (int i = 0; i < 20; i++) {
        assert_int_equal(host[0], 0); /* queued behind the gate */
        usleep(200);
    }
    atomic_store(&gate_open, 1);
    OK(cuStreamSynchronize(a));
    assert_int_equal(host[0], 7);
    assert_int_equal(host[4095], 7);
    OK(cuMemFreeHost(host));
    OK(cuMemFree(d));
    OK(cuStreamDestroy(a));
}

/* (const int *p, int expect, int *seen): waits for the gate, then records what p holds. The
 * slow reader of a block that an allocator must not hand out again too early. */
static CUfunction k_canary;
static void kernel_canary(void **a)
{
    const volatile int *p = *(const int **)a[0];
    int *seen = *(int **)a[2];
    while (!atomic_load(&gate_open))
        usleep(100);
    *seen = *p;
}

/* What the asynchronous mode exists for: a block still read by a slow kernel on stream A is
 * handed to stream B. Without a fence B's write lands before A's read and the canary is gone;
 * with B waiting on an event recorded after A's kernel (what a correct allocator does before
 * reuse across streams), A reads its own data. */
static void test_canary_catches_reuse_without_a_fence(void **state)
{
    (void)state;
    size_t sz[] = {sizeof(int *), sizeof(int), sizeof(int *)};
    OK(sim_register_kernel("canary", kernel_canary, 3, sz, &k_canary));
    CUstream a, b;
    CUevent done;
    OK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
    CUdeviceptr block;
    int *seen;
    OK(cuMemAlloc(&block, sizeof(int)));
    OK(cuMemAllocHost((void **)&seen, sizeof(int)));
    for (int fenced = 0; fenced < 2; fenced++) {
        reset_log();
        *seen = 0;
        OK(cuMemsetD32(block, 0xC0FFEE, 1)); /* the owner's canary */
        int *p = (int *)block, expect = 0xC0FFEE;
        void *args[] = {&p, &expect, &seen};
        OK(cuLaunchKernel(k_canary, 1, 1, 1, 1, 1, 1, 0, a, args, NULL));
        if (fenced) {
            OK(cuEventRecord(done, a));
            OK(cuStreamWaitEvent(b, done, 0));
        }
        OK(cuMemsetD32Async(block, 0xBAD, 1, b)); /* the block's next owner writes */
        if (!fenced) OK(cuStreamSynchronize(b));  /* lands while A's reader is still waiting */
        atomic_store(&gate_open, 1);
        OK(cuCtxSynchronize());
        assert_int_equal(*seen, fenced ? 0xC0FFEE : 0xBAD);
    }
    OK(cuMemFreeHost(seen));
    OK(cuMemFree(block));
    OK(cuEventDestroy(done));
    OK(cuStreamDestroy(a));
    OK(cuStreamDestroy(b));
}

/* The per-thread default-stream entry points (declared by cuda.h only under
 * CUDA_API_PER_THREAD_DEFAULT_STREAM). */
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned sh, CUstream s, void **p, void **x);
CUresult cuStreamSynchronize_ptsz(CUstream s);
CUresult cuStreamGetId_ptsz(CUstream s, unsigned long long *id);

static unsigned long long other_thread_stream_id;

static void *ptds_thread(void *arg)
{
    (void)arg;
    char tag = 'T';
    void *args[] = {&tag};
    CUcontext c;
    if (cuDevicePrimaryCtxRetain(&c, 0) || cuCtxSetCurrent(c)) return (void *)1;
    if (cuLaunchKernel_ptsz(k_mark, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL)) return (void *)2;
    /* Its own per-thread stream: done although the main thread's is blocked at its gate. */
    if (cuStreamSynchronize_ptsz(NULL)) return (void *)3;
    if (cuStreamGetId_ptsz(NULL, &other_thread_stream_id)) return (void *)4;
    return NULL;
}

/* With the _ptsz names, NULL is the calling thread's per-thread default stream: two threads'
 * default streams are distinct and run independently. */
static void test_per_thread_default_streams_are_distinct(void **state)
{
    (void)state;
    reset_log();
    char tag = 'A';
    void *args[] = {&tag};
    OK(cuLaunchKernel_ptsz(k_gate, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, ptds_thread, NULL), 0);
    void *r = (void *)9;
    pthread_join(t, &r);
    assert_null(r);
    assert_string_equal(order, "T");
    unsigned long long mine = 0, legacy = 0;
    OK(cuStreamGetId_ptsz(NULL, &mine));
    OK(cuStreamGetId(NULL, &legacy));
    assert_true(mine != other_thread_stream_id && mine != legacy);
    OK(cuStreamGetId(CU_STREAM_PER_THREAD, &legacy));
    assert_true(mine == legacy);
    /* cuGetProcAddress with the per-thread flag answers the _ptsz variant. */
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    OK(cuGetProcAddress("cuLaunchKernel", &fn, CUDA_VERSION,
                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    assert_ptr_equal(fn, (void *)cuLaunchKernel_ptsz);
    OK(cuGetProcAddress("cuLaunchKernel", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    assert_ptr_equal(fn, (void *)cuLaunchKernel);
    atomic_store(&gate_open, 1);
    OK(cuStreamSynchronize_ptsz(NULL));
    assert_string_equal(order, "TA");
}

/* ---- synchronous mode (the default) --------------------------------------------------------- */

static int setup_sync(void **state)
{
    (void)state;
    return sim_test_ctx(0) ? -1 : 0;
}

static void test_default_mode_is_synchronous(void **state)
{
    (void)state;
    assert_int_equal(sim_async_enabled(), 0);
}

/* Completion in stream order: B's event, recorded after B waited for A's delayed event, is not
 * complete before A's event is, though B's own record has no delay. */
static void test_completion_follows_wait_dependencies(void **state)
{
    (void)state;
    CUstream a, b;
    CUevent ea, eb, eb2;
    OK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&ea, 0));
    OK(cuEventCreate(&eb, 0));
    OK(cuEventCreate(&eb2, 0));
    sim_set_event_delay(3);
    OK(cuEventRecord(ea, a));
    sim_set_event_delay(0);
    OK(cuEventRecord(eb2, b)); /* before the wait: complete at once */
    OK(cuStreamWaitEvent(b, ea, 0));
    OK(cuEventRecord(eb, b));
    OK(cuEventQuery(eb2));
    int not_ready = 0;
    while (cuEventQuery(eb) == CUDA_ERROR_NOT_READY && not_ready < 100)
        not_ready++;
    assert_int_equal(not_ready, 3); /* each query of eb counts as one of ea */
    OK(cuEventQuery(ea));
    assert_int_equal(cuStreamQuery(b), CUDA_SUCCESS);

    /* A later record on the same stream does not complete before an earlier delayed one. */
    sim_set_event_delay(2);
    OK(cuEventRecord(ea, a));
    sim_set_event_delay(0);
    OK(cuEventRecord(eb, a));
    assert_int_equal(cuEventQuery(eb), CUDA_ERROR_NOT_READY);
    OK(cuEventSynchronize(eb)); /* completes ea too */
    OK(cuEventQuery(ea));
    assert_int_equal(sim_events_pending(), 0);

    /* Synchronizing B completes what B waits for on A. */
    sim_set_event_delay(5);
    OK(cuEventRecord(ea, a));
    sim_set_event_delay(0);
    OK(cuStreamWaitEvent(b, ea, 0));
    assert_int_equal(cuStreamQuery(b), CUDA_ERROR_NOT_READY);
    OK(cuStreamSynchronize(b));
    OK(cuEventQuery(ea));
    OK(cuEventDestroy(ea));
    OK(cuEventDestroy(eb));
    OK(cuEventDestroy(eb2));
    OK(cuStreamDestroy(a));
    OK(cuStreamDestroy(b));
}

int main(void)
{
    const struct CMUnitTest sync_tests[] = {
        cmocka_unit_test(test_default_mode_is_synchronous),
        cmocka_unit_test(test_completion_follows_wait_dependencies),
    };
    const struct CMUnitTest async_tests[] = {
        cmocka_unit_test(test_mode_is_async),
        cmocka_unit_test(test_wait_event_orders_kernels_across_streams),
        cmocka_unit_test(test_without_wait_b_runs_before_a),
        cmocka_unit_test(test_stream_order_within_a_stream),
        cmocka_unit_test(test_legacy_stream_waits_for_blocking_streams_only),
        cmocka_unit_test(test_free_async_happens_in_stream_order),
        cmocka_unit_test(test_copies_run_in_stream_order),
        cmocka_unit_test(test_per_thread_default_streams_are_distinct),
        cmocka_unit_test(test_canary_catches_reuse_without_a_fence),
    };
    /* The mode is read once per process: the synchronous group runs in a child. */
    pid_t pid = fork();
    if (pid == 0) {
        unsetenv("GPUMEM_SIM_ASYNC");
        unsetenv("GPUMEM_SIM_EVENT_DELAY");
        _exit(cmocka_run_group_tests_name("sim_async (synchronous mode)", sync_tests, setup_sync,
                                          NULL) != 0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 1;
    setenv("GPUMEM_SIM_ASYNC", "1", 1);
    unsetenv("GPUMEM_SIM_EVENT_DELAY");
    int rc = cmocka_run_group_tests_name("sim_async (asynchronous mode)", async_tests, setup, NULL);
    return rc || !WIFEXITED(st) || WEXITSTATUS(st);
}
