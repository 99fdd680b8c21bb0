/* sim_graph.c — stream capture and graph launch on the virtual GPU: captured work does not run,
 * the graph replays it (kernels with their captured parameters, copies, memsets) as often as it
 * is launched, a fork/join across two streams keeps its order, and the calls that are illegal
 * during capture fail with the driver's codes and invalidate the capture. The group runs in
 * synchronous mode (a forked child) and in asynchronous mode (GPUMEM_SIM_ASYNC=1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/sim.h"
#include "tests/unit/sim_test.h"

#define OK(x) assert_int_equal((x), CUDA_SUCCESS)
#define N 256

static CUfunction k_add, k_mul;

/* (int *p, int k): p[i] += k for i < N */
static void kernel_add(void **a)
{
    int *p = *(int **)a[0];
    int k = *(int *)a[1];
    for (int i = 0; i < N; i++)
        p[i] += k;
}

/* (int *p, int k): p[i] *= k for i < N */
static void kernel_mul(void **a)
{
    int *p = *(int **)a[0];
    int k = *(int *)a[1];
    for (int i = 0; i < N; i++)
        p[i] *= k;
}

static void launch(CUfunction f, CUstream s, CUdeviceptr p, int k)
{
    int *ptr = (int *)p;
    void *args[] = {&ptr, &k};
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

static int setup(void **state)
{
    (void)state;
    if (sim_test_ctx(0)) return -1;
    size_t sz[] = {sizeof(int *), sizeof(int)};
    if (sim_register_kernel("add", kernel_add, 2, sz, &k_add)) return -1;
    if (sim_register_kernel("mul", kernel_mul, 2, sz, &k_mul)) return -1;
    return 0;
}

static void test_capture_instantiate_replay(void **state)
{
    (void)state;
    CUstream s;
    CUdeviceptr d;
    int *h;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuMemAlloc(&d, N * sizeof(int)));
    OK(cuMemAllocHost((void **)&h, N * sizeof(int)));
    OK(cuMemsetD32(d, 10, N));
    memset(h, 0, N * sizeof(int));

    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus cs;
    OK(cuStreamIsCapturing(s, &cs));
    assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    cuuint64_t id = 0;
    CUgraph g_during = NULL;
    size_t ndeps = 99;
    const CUgraphNode *deps = NULL;
    OK(cuStreamGetCaptureInfo(s, &cs, &id, &g_during, &deps, NULL, &ndeps));
    assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    assert_true(id != 0);
    assert_non_null(g_during);
    assert_int_equal(ndeps, 0);
    launch(k_add, s, d, 1);
    OK(cuMemcpyDtoHAsync(h, d, N * sizeof(int), s));
    OK(cuMemsetD32Async(d + (N - 1) * sizeof(int), 1000, 1, s));
    OK(cuStreamGetCaptureInfo(s, &cs, &id, NULL, &deps, NULL, &ndeps));
    assert_int_equal(ndeps, 1);
    CUgraph g = NULL;
    OK(cuStreamEndCapture(s, &g));
    assert_non_null(g);
    OK(cuStreamIsCapturing(s, &cs));
    assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_NONE);
    /* Nothing captured has run. */
    OK(cuStreamSynchronize(s));
    int v[N];
    OK(cuMemcpyDtoH(v, d, sizeof v));
    assert_int_equal(v[0], 10);
    assert_int_equal(h[0], 0);
    size_t n = 0;
    OK(cuGraphGetNodes(g, NULL, &n));
    assert_int_equal(n, 3);

    CUgraphExec x;
    OK(cuGraphInstantiate(&x, g, 0));
    OK(cuGraphDestroy(g)); /* the executable graph keeps its own copy */
    for (int i = 1; i <= 4; i++) {
        OK(cuMemsetD32(d, 10, N));
        OK(cuGraphLaunch(x, s));
        OK(cuStreamSynchronize(s));
        assert_int_equal(h[0], 11); /* the kernel ran with its captured k = 1, before the copy */
        assert_int_equal(h[N - 1], 11);
        OK(cuMemcpyDtoH(v, d, sizeof v));
        assert_int_equal(v[N - 1], 1000); /* the memset after the copy */
    }
    /* Replays accumulate when nothing resets. */
    OK(cuMemsetD32(d, 0, N));
    for (int i = 0; i < 5; i++)
        OK(cuGraphLaunch(x, s));
    OK(cuStreamSynchronize(s));
    assert_int_equal(h[0], 5);
    OK(cuGraphExecDestroy(x));
    assert_int_equal(cuGraphExecDestroy(x), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFreeHost(h));
    OK(cuMemFree(d));
    OK(cuStreamDestroy(s));
}

static void test_fork_join_across_streams(void **state)
{
    (void)state;
    CUstream s1, s2;
    CUevent fork, join;
    CUdeviceptr d;
    OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    OK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
    OK(cuMemAlloc(&d, N * sizeof(int)));
    OK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    launch(k_add, s1, d, 3);
    OK(cuEventRecord(fork, s1));
    assert_int_equal(cuEventQuery(fork), CUDA_ERROR_CAPTURED_EVENT); /* illegal: invalidates */
    CUstreamCaptureStatus cs;
    OK(cuStreamIsCapturing(s1, &cs));
    assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CUgraph g = (CUgraph)1;
    assert_int_equal(cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    assert_null(g);

    OK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    launch(k_add, s1, d, 3);
    OK(cuEventRecord(fork, s1));
    OK(cuStreamWaitEvent(s2, fork, 0)); /* s2 joins the capture */
    OK(cuStreamIsCapturing(s2, &cs));
    assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    launch(k_mul, s2, d, 2);
    OK(cuEventRecord(join, s2));
    OK(cuStreamWaitEvent(s1, join, 0)); /* and is joined back */
    launch(k_add, s1, d, 1);
    OK(cuStreamEndCapture(s1, &g));
    assert_non_null(g);
    OK(cuStreamIsCapturing(s2, &cs));
    assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_NONE);
    CUgraphExec x;
    OK(cuGraphInstantiate(&x, g, 0));
    OK(cuMemsetD32(d, 5, N));
    OK(cuGraphLaunch(x, s1));
    OK(cuStreamSynchronize(s1));
    int v[N];
    OK(cuMemcpyDtoH(v, d, sizeof v));
    assert_int_equal(v[0], (5 + 3) * 2 + 1);
    OK(cuGraphExecDestroy(x));
    OK(cuGraphDestroy(g));

    /* A joined stream whose work the origin never waits for: unjoined. */
    OK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(cuEventRecord(fork, s1));
    OK(cuStreamWaitEvent(s2, fork, 0));
    launch(k_mul, s2, d, 2);
    assert_int_equal(cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
    assert_null(g);
    OK(cuStreamIsCapturing(s2, &cs));
    assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_NONE);
    OK(cuMemFree(d));
    OK(cuEventDestroy(fork));
    OK(cuEventDestroy(join));
    OK(cuStreamDestroy(s1));
    OK(cuStreamDestroy(s2));
}

static void test_illegal_calls_during_capture(void **state)
{
    (void)state;
    CUstream s, other, blocking;
    CUevent outside;
    CUdeviceptr d;
    CUgraph g;
    CUstreamCaptureStatus cs;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&blocking, 0));
    OK(cuEventCreate(&outside, 0));
    OK(cuEventRecord(outside, other));
    assert_int_equal(cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_ERROR_INVALID_VALUE); /* not on the legacy stream */
    assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);

    /* Synchronizing a capturing stream. */
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    OK(cuStreamIsCapturing(s, &cs));
    assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    assert_int_equal(cuMemsetD8Async(0, 0, 0, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    /* Querying a capturing stream; the device; a potentially unsafe call. */
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(cuMemAlloc(&d, 4096), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    /* The relaxed interaction mode allows it (as PyTorch's allocator does around cudaMalloc). */
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    OK(cuThreadExchangeStreamCaptureMode(&mode));
    assert_int_equal(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
    OK(cuMemAlloc(&d, 4096));
    OK(cuThreadExchangeStreamCaptureMode(&mode));
    OK(cuMemsetD8Async(d, 1, 4096, s));
    /* Waiting on uncaptured work needs CU_EVENT_WAIT_EXTERNAL. */
    OK(cuStreamWaitEvent(s, outside, CU_EVENT_WAIT_EXTERNAL));
    OK(cuStreamEndCapture(s, &g));
    OK(cuGraphDestroy(g));
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(cuStreamWaitEvent(s, outside, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
    assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    /* The legacy stream while a blocking stream captures: implicit dependency. */
    OK(cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_RELAXED));
    assert_int_equal(cuMemsetD8Async(d, 2, 16, NULL), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    assert_int_equal(cuStreamEndCapture(blocking, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    /* ... but not while only a non-blocking one does. */
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(cuMemsetD8Async(d, 2, 16, NULL));
    OK(cuStreamEndCapture(s, &g));
    OK(cuGraphDestroy(g));
    OK(cuMemFree(d));
    OK(cuEventDestroy(outside));
    OK(cuStreamDestroy(s));
    OK(cuStreamDestroy(other));
    OK(cuStreamDestroy(blocking));
}

static cuuint64_t graph_mem(CUgraphMem_attribute a)
{
    cuuint64_t v = 12345;
    OK(cuDeviceGetGraphMemAttribute(0, a, &v));
    return v;
}

/* Memory nodes as CUDA's programming guide describes them ("Graph Memory Nodes"): the address is
 * fixed at capture, the memory exists from the allocation node to the free, the graph's own free
 * node ends it at every launch, the device keeps it reserved until trimmed. */
static void test_memory_nodes_freed_in_graph(void **state)
{
    (void)state;
    CUstream s;
    CUgraph g;
    CUgraphExec x;
    int *h;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuMemAllocHost((void **)&h, N * sizeof(int)));
    size_t free0, total;
    OK(cuMemGetInfo(&free0, &total));
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr p = 0;
    OK(cuMemAllocAsync(&p, N * sizeof(int), s));
    assert_true(p != 0);
    /* an address, not memory yet: nothing is allocated at capture (the legacy stream may be
     * used: only a non-blocking stream captures) */
    assert_int_equal(cuMemsetD8(p, 0, 4), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemsetD32Async(p, 3, N, s));
    launch(k_add, s, p, 4);
    OK(cuMemcpyDtoHAsync(h, p, N * sizeof(int), s));
    OK(cuMemFreeAsync(p, s));
    assert_int_equal(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE); /* twice in one graph */
    OK(cuStreamEndCapture(s, &g));
    size_t n = 0;
    OK(cuGraphGetNodes(g, NULL, &n));
    assert_int_equal(n, 5);
    size_t f;
    OK(cuMemGetInfo(&f, &total));
    assert_int_equal(f, free0);
    OK(cuGraphInstantiateWithFlags(&x, g, 0));
    CUgraphExec x2;
    assert_int_equal(cuGraphInstantiateWithFlags(&x2, g, 0),
                     CUDA_ERROR_NOT_SUPPORTED); /* 801 on an H200 */
    for (int round = 0; round < 3; round++) {
        memset(h, 0, N * sizeof(int));
        OK(cuGraphLaunch(x, s));
        OK(cuStreamSynchronize(s));
        assert_int_equal(h[0], 7);
        assert_int_equal(h[N - 1], 7);
        /* freed by its own graph: outside its lifetime it is no memory at all */
        assert_int_equal(cuMemsetD8(p, 0, 4), CUDA_ERROR_INVALID_VALUE);
        assert_int_equal(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
        CUdeviceptr base;
        assert_int_equal(cuMemGetAddressRange(&base, NULL, p), CUDA_ERROR_NOT_FOUND);
    }
    assert_int_equal(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0);
    assert_int_equal(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), N * sizeof(int));
    assert_int_equal(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), N * sizeof(int));
    OK(cuMemGetInfo(&f, &total));
    assert_int_equal(f, free0 - N * sizeof(int)); /* kept for graphs */
    OK(cuDeviceGraphMemTrim(0));
    assert_int_equal(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0);
    OK(cuMemGetInfo(&f, &total));
    assert_int_equal(f, free0);
    cuuint64_t zero = 0, one = 1;
    assert_int_equal(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &one),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero),
                     CUDA_ERROR_INVALID_VALUE);
    OK(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
    assert_int_equal(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), 0);
    OK(cuGraphExecDestroy(x));
    OK(cuGraphInstantiateWithFlags(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY));
    OK(cuGraphExecDestroy(x));
    assert_int_equal(cuGraphInstantiateWithFlags(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD),
                     CUDA_ERROR_INVALID_VALUE);
    OK(cuGraphDestroy(g));
    OK(cuMemFreeHost(h));
    OK(cuStreamDestroy(s));
}

/* An allocation its graph does not free outlives the launch: usable by later stream work, freed
 * by cuMemFreeAsync or cuMemFree; the graph cannot be launched again before that, unless it was
 * instantiated with AUTO_FREE_ON_LAUNCH. Destroying the graph does not free it. */
static void test_memory_nodes_outliving_the_launch(void **state)
{
    (void)state;
    CUstream s;
    CUgraph g;
    CUgraphExec x;
    int *h;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuMemAllocHost((void **)&h, N * sizeof(int)));
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CUdeviceptr p = 0;
    OK(cuMemAllocAsync(&p, N * sizeof(int), s));
    OK(cuMemsetD32Async(p, 5, N, s));
    OK(cuStreamEndCapture(s, &g));
    OK(cuGraphInstantiateWithFlags(&x, g, 0));
    OK(cuGraphLaunch(x, s));
    launch(k_mul, s, p, 2);
    OK(cuMemcpyDtoHAsync(h, p, N * sizeof(int), s));
    OK(cuStreamSynchronize(s));
    assert_int_equal(h[N - 1], 10);
    assert_int_equal(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), N * sizeof(int));
    assert_int_equal(cuGraphLaunch(x, s), CUDA_ERROR_INVALID_VALUE); /* still allocated */
    OK(cuMemFreeAsync(p, s));
    assert_int_equal(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);
    OK(cuGraphLaunch(x, s)); /* the same address again */
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH(h, p, sizeof(int)));
    assert_int_equal(h[0], 5);
    OK(cuMemFree(p)); /* at once */
    assert_int_equal(cuMemsetD8(p, 0, 4), CUDA_ERROR_INVALID_VALUE);
    OK(cuGraphExecDestroy(x));

    OK(cuGraphInstantiateWithFlags(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    for (int round = 0; round < 3; round++)
        OK(cuGraphLaunch(x, s));
    OK(cuStreamSynchronize(s));
    assert_int_equal(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), N * sizeof(int));
    OK(cuGraphExecDestroy(x));
    OK(cuGraphDestroy(g));
    /* the graph is gone, its allocation is not */
    OK(cuMemsetD32(p, 9, N));
    OK(cuMemcpyDtoH(h, p, sizeof(int)));
    assert_int_equal(h[0], 9);
    OK(cuMemFree(p));
    assert_int_equal(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0);
    OK(cuDeviceGraphMemTrim(0));

    /* A captured free must name a graph allocation: memory from cuMemAlloc stays allocated. */
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 4096));
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(cuMemFreeAsync(d, s), CUDA_ERROR_INVALID_VALUE);
    OK(cuStreamEndCapture(s, &g));
    OK(cuGraphDestroy(g));
    OK(cuMemsetD8(d, 1, 4096));
    OK(cuMemFree(d));
    OK(cuMemFreeHost(h));
    OK(cuStreamDestroy(s));
}

/* The explicit API: cuGraphCreate, cuGraphAddMemAllocNode, cuGraphAddMemFreeNode; another
 * graph's free node frees an allocation a graph left live. */
static void test_memory_nodes_explicit(void **state)
{
    (void)state;
    CUstream s;
    CUgraph g, g2;
    CUgraphExec x, x2;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    assert_int_equal(cuGraphCreate(&g, 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuGraphCreate(&g, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS ap;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ap.bytesize = 1 << 20;
    CUgraphNode an, fn;
    OK(cuGraphAddMemAllocNode(&an, g, NULL, 0, &ap));
    assert_true(ap.dptr != 0);
    CUgraphNode bogus = (CUgraphNode)(uintptr_t)0x10;
    assert_int_equal(cuGraphAddMemFreeNode(&fn, g, &bogus, 1, ap.dptr), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuGraphAddMemFreeNode(&fn, g, &an, 1, ap.dptr + 8), CUDA_ERROR_INVALID_VALUE);
    ap.bytesize = 0;
    assert_int_equal(cuGraphAddMemAllocNode(&fn, g, NULL, 0, &ap), CUDA_ERROR_INVALID_VALUE);
    OK(cuGraphCreate(&g2, 0));
    OK(cuGraphAddMemFreeNode(&fn, g2, NULL, 0, ap.dptr));
    OK(cuGraphInstantiateWithFlags(&x, g, 0));
    OK(cuGraphInstantiateWithFlags(&x2, g2, 0));
    OK(cuGraphLaunch(x, s));
    OK(cuMemsetD8Async(ap.dptr, 1, 1 << 20, s));
    OK(cuGraphLaunch(x2, s)); /* frees it */
    OK(cuStreamSynchronize(s));
    assert_int_equal(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0);
    OK(cuGraphLaunch(x, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemFree(ap.dptr));
    OK(cuGraphExecDestroy(x));
    OK(cuGraphExecDestroy(x2));
    OK(cuGraphDestroy(g));
    OK(cuGraphDestroy(g2));
    OK(cuDeviceGraphMemTrim(0));
    OK(cuStreamDestroy(s));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_instantiate_replay),
        cmocka_unit_test(test_fork_join_across_streams),
        cmocka_unit_test(test_illegal_calls_during_capture),
        cmocka_unit_test(test_memory_nodes_freed_in_graph),
        cmocka_unit_test(test_memory_nodes_outliving_the_launch),
        cmocka_unit_test(test_memory_nodes_explicit),
    };
    pid_t pid = fork();
    if (pid == 0) {
        unsetenv("GPUMEM_SIM_ASYNC");
        _exit(cmocka_run_group_tests_name("sim_graph (synchronous mode)", tests, setup, NULL) != 0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 1;
    setenv("GPUMEM_SIM_ASYNC", "1", 1);
    int rc = cmocka_run_group_tests_name("sim_graph (asynchronous mode)", tests, setup, NULL);
    return rc || !WIFEXITED(st) || WEXITSTATUS(st);
}
