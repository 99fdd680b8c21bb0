/* The graph memory attributes step by step, to pin down how a driver counts graph memory. An H200
 * answered graph_mem.c with 32 MiB steps and memory still "used" after frees (five figures, which
 * do not pin down a model: tests/diff/gpu-differences.txt); here every attribute is printed after
 * each step of a graph's life — instantiation, launch, a free inside or outside the graph, exec
 * and graph destruction, trim — for allocations below and above 32 MiB, one graph and two, and
 * the high-water marks reset. The virtual GPU counts allocations at their 512 B rounding today;
 * tests/gpu/diff_all.sh records a GPU's answers the next time one is lent. */
#include "tests/diff/diff.h"

static void attrs(const char *when)
{
    unsigned long long v[4] = {0};
    const enum cudaGraphMemAttributeType a[4] = {
        cudaGraphMemAttrUsedMemCurrent, cudaGraphMemAttrReservedMemCurrent,
        cudaGraphMemAttrUsedMemHigh, cudaGraphMemAttrReservedMemHigh};
    for (int i = 0; i < 4; i++) cudaDeviceGetGraphMemAttribute(0, a[i], &v[i]);
    printf("%-44s used %llu reserved %llu high %llu reserved high %llu\n", when, v[0], v[1], v[2],
           v[3]);
}

/* a graph that allocates size bytes and, when freed_inside, frees them again */
static cudaGraph_t capture(cudaStream_t s, size_t size, int freed_inside, void **p)
{
    cudaGraph_t g = NULL;
    *p = NULL;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    cudaMallocAsync(p, size, s);
    cudaMemsetAsync(*p, 0x5c, size, s);
    if (freed_inside) cudaFreeAsync(*p, s);
    rt("  end capture", cudaStreamEndCapture(s, &g));
    return g;
}

/* gives the freed graph memory back to the device, then shows the attributes */
static void trim(void)
{
    rt("  trim", cudaDeviceGraphMemTrim(0));
    attrs("trimmed");
}

static void launch(cudaGraphExec_t x, cudaStream_t s)
{
    rt("  launch", cudaGraphLaunch(x, s));
    rt("  sync", cudaStreamSynchronize(s));
}

int main(void)
{
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaGraph_t g, g2;
    cudaGraphExec_t x, x2;
    void *p, *p2;
    attrs("start");

    printf("-- 1000 B, freed in the graph\n");
    g = capture(s, 1000, 1, &p);
    attrs("captured");
    rt("  instantiate", cudaGraphInstantiate(&x, g, 0));
    attrs("instantiated");
    launch(x, s);
    attrs("launched once");
    launch(x, s);
    attrs("launched twice");
    rt("  exec destroy", cudaGraphExecDestroy(x));
    attrs("exec destroyed");
    rt("  graph destroy", cudaGraphDestroy(g));
    attrs("graph destroyed");
    trim();

    printf("-- 40 MiB, freed in the graph\n");
    g = capture(s, (size_t)40 << 20, 1, &p);
    rt("  instantiate", cudaGraphInstantiate(&x, g, 0));
    attrs("instantiated");
    launch(x, s);
    attrs("launched");
    rt("  exec destroy", cudaGraphExecDestroy(x));
    rt("  graph destroy", cudaGraphDestroy(g));
    attrs("destroyed");
    trim();

    printf("-- 1000 B, freed outside the graph\n");
    g = capture(s, 1000, 0, &p);
    rt("  instantiate", cudaGraphInstantiate(&x, g, 0));
    launch(x, s);
    attrs("launched (allocation live)");
    rt("  cudaFreeAsync", cudaFreeAsync(p, s));
    rt("  sync", cudaStreamSynchronize(s));
    attrs("freed outside, exec alive");
    launch(x, s);
    attrs("relaunched (live again)");
    rt("  exec destroy", cudaGraphExecDestroy(x));
    attrs("exec destroyed, allocation live");
    rt("  cudaFree", cudaFree(p));
    attrs("freed outside, exec destroyed");
    rt("  graph destroy", cudaGraphDestroy(g));
    attrs("graph destroyed");
    trim();

    printf("-- two graphs of 1000 B each, freed in the graph\n");
    g = capture(s, 1000, 1, &p);
    g2 = capture(s, 1000, 1, &p2);
    rt("  instantiate", cudaGraphInstantiate(&x, g, 0));
    rt("  instantiate the second", cudaGraphInstantiate(&x2, g2, 0));
    launch(x, s);
    attrs("first launched");
    launch(x2, s);
    attrs("both launched");
    unsigned long long high0 = 0; /* a cuuint64_t, as the attribute is read */
    rt("  reset used high", cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high0));
    rt("  reset reserved high",
       cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &high0));
    attrs("high-water marks reset");
    rt("  exec destroy", cudaGraphExecDestroy(x));
    attrs("first exec destroyed");
    rt("  exec destroy the second", cudaGraphExecDestroy(x2));
    rt("  graph destroy", cudaGraphDestroy(g));
    rt("  graph destroy the second", cudaGraphDestroy(g2));
    attrs("both destroyed");
    trim();
    cudaStreamDestroy(s);
    return 0;
}
