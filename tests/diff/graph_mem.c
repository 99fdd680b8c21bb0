/* Issue 37, graph memory: stream-ordered allocation inside a capture makes the graph's own
 * allocations (memory nodes, CUDA programming guide "Graph Memory Nodes"). Their addresses are
 * fixed for the graph's life, their memory exists from a launch's allocation node to its free,
 * and nobody else may get that memory while the graph can use it: between launches, after a
 * free outside the graph, whatever is allocated and freed around it (growth, release, garbage
 * collection). Relaunching a graph whose allocation is still live is cudaErrorInvalidValue
 * unless it was instantiated with cudaGraphInstantiateFlagAutoFreeOnLaunch (what PyTorch uses,
 * with UseNodePriority). A captured cudaFreeAsync must name a graph allocation: memory from
 * outside stays allocated. The graph memory attributes count it all.
 *
 * Contents are checked through a pinned host buffer: a graph that writes into memory someone else
 * now owns shows up as a changed canary. */
#include "tests/diff/diff.h"

#define SZ 1000

static unsigned char host[SZ];

/* All SZ bytes of device memory d equal v? */
static const char *all(void *d, unsigned char v)
{
    memset(host, 0x5a, sizeof host);
    cudaError_t e = cudaMemcpy(host, d, SZ, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return "copy failed";
    for (int i = 0; i < SZ; i++)
        if (host[i] != v) return "changed";
    return "intact";
}

static void attrs(const char *when)
{
    unsigned long long used = 0, reserved = 0, high = 0;
    cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used);
    cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved);
    cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high);
    printf("graph memory %s: used %llu reserved %llu high %llu\n", when, used, reserved, high);
}

/* Allocations and frees around a graph, the kinds that grow, release and collect memory. */
static void churn(cudaStream_t s, void **canary)
{
    void *big[4];
    for (int i = 0; i < 4; i++) cudaMallocAsync(&big[i], (size_t)(i + 1) << 21, s);
    for (int i = 0; i < 4; i++) cudaFreeAsync(big[i], s);
    cudaStreamSynchronize(s);
    void *q;
    cudaMalloc(&q, 64 << 20);
    cudaFree(q);
    cudaMallocAsync(canary, SZ, s);
    cudaMemsetAsync(*canary, 0x11, SZ, s);
    cudaStreamSynchronize(s);
}

int main(void)
{
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    void *pinned = NULL;
    cudaMallocHost(&pinned, SZ);
    cudaGraph_t g;
    cudaGraphExec_t x;
    size_t n = 0;

    /* 1. allocate, use, free inside the graph; allocate on the stream between launches */
    printf("-- allocated and freed in the graph\n");
    void *a = NULL;
    rt("begin capture", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    rt_state("cudaMallocAsync in capture", cudaMallocAsync(&a, SZ, s));
    printf("  out: %s\n", a ? "set" : "NULL");
    rt("memset in capture", cudaMemsetAsync(a, 0xab, SZ, s));
    rt("copy in capture", cudaMemcpyAsync(pinned, a, SZ, cudaMemcpyDeviceToHost, s));
    rt("cudaFreeAsync in capture", cudaFreeAsync(a, s));
    rt_state("cudaFreeAsync again in capture", cudaFreeAsync(a, s));
    rt("end capture", cudaStreamEndCapture(s, &g));
    rt("nodes", cudaGraphGetNodes(g, NULL, &n));
    printf("  %zu nodes\n", n);
    rt("instantiate", cudaGraphInstantiate(&x, g, 0));
    cudaGraphExec_t x2;
    rt_state("second instantiation", cudaGraphInstantiate(&x2, g, 0));
    void *canary[4] = {0};
    for (int round = 0; round < 4; round++) {
        memset(pinned, 0, SZ);
        rt("launch", cudaGraphLaunch(x, s));
        rt("sync", cudaStreamSynchronize(s));
        int ok = 1;
        for (int i = 0; i < SZ; i++) ok &= ((unsigned char *)pinned)[i] == 0xab;
        printf("  graph's result: %s\n", ok ? "0xab" : "wrong");
        for (int k = 0; k < round; k++) printf("  canary %d: %s\n", k, all(canary[k], 0x11));
        churn(s, &canary[round]);
        printf("  an allocation at the graph's address: %s\n",
               canary[round] == a ? "yes" : "no");
        rt_state("memset of the graph's memory between launches", cudaMemset(a, 0, SZ));
    }
    attrs("after the launches");
    rt("exec destroy", cudaGraphExecDestroy(x));
    rt("graph destroy", cudaGraphDestroy(g));
    for (int k = 0; k < 4; k++) cudaFreeAsync(canary[k], s);
    cudaStreamSynchronize(s);
    rt("trim", cudaDeviceGraphMemTrim(0));
    attrs("after trim");

    /* 2. an allocation the graph does not free: used after the launch, freed outside, relaunched */
    printf("-- outliving the launch\n");
    void *b = NULL;
    rt("begin capture", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    rt("cudaMallocAsync in capture", cudaMallocAsync(&b, SZ, s));
    rt("memset in capture", cudaMemsetAsync(b, 0x22, SZ, s));
    rt("end capture", cudaStreamEndCapture(s, &g));
    rt("instantiate", cudaGraphInstantiate(&x, g, 0));
    rt("launch", cudaGraphLaunch(x, s));
    rt("sync", cudaStreamSynchronize(s));
    printf("  graph's allocation after the launch: %s\n", all(b, 0x22));
    rt_state("relaunch while it is live", cudaGraphLaunch(x, s));
    rt("cudaFree of the graph's allocation", cudaFree(b));
    void *c = NULL, *d = NULL;
    churn(s, &c);
    cudaMalloc(&d, SZ);
    cudaMemset(d, 0x33, SZ);
    printf("  an allocation at the graph's address: %s\n", c == b || d == b ? "yes" : "no");
    rt("relaunch after cudaFree", cudaGraphLaunch(x, s));
    rt("sync", cudaStreamSynchronize(s));
    printf("  graph's allocation: %s\n", all(b, 0x22));
    printf("  canary (stream-ordered): %s\n", all(c, 0x11));
    printf("  canary (cudaMalloc): %s\n", all(d, 0x33));
    attrs("while live");
    rt("cudaFreeAsync of the graph's allocation", cudaFreeAsync(b, s));
    rt_state("cudaFreeAsync again", cudaFreeAsync(b, s));
    rt("relaunch after cudaFreeAsync", cudaGraphLaunch(x, s));
    rt("sync", cudaStreamSynchronize(s));
    rt("exec destroy", cudaGraphExecDestroy(x));

    /* 3. PyTorch's flags: each launch frees what the previous one left */
    printf("-- AutoFreeOnLaunch | UseNodePriority\n");
    rt("instantiate with flags",
       cudaGraphInstantiateWithFlags(&x, g,
                                     cudaGraphInstantiateFlagAutoFreeOnLaunch |
                                         cudaGraphInstantiateFlagUseNodePriority));
    for (int round = 0; round < 3; round++) {
        rt("launch", cudaGraphLaunch(x, s));
        void *e = NULL;
        cudaMallocAsync(&e, SZ, s);
        cudaMemsetAsync(e, 0x44, SZ, s);
        rt("sync", cudaStreamSynchronize(s));
        printf("  graph's allocation: %s, the other one: %s\n", all(b, 0x22), all(e, 0x44));
        cudaFreeAsync(e, s);
    }
    attrs("auto-free");
    rt("exec destroy", cudaGraphExecDestroy(x));
    rt("graph destroy", cudaGraphDestroy(g));
    printf("  still allocated after the graph's destruction: %s\n", all(b, 0x22));
    rt("cudaFree", cudaFree(b));
    attrs("all freed");

    /* 4. a captured free of memory allocated outside the graph */
    printf("-- captured free of outside memory\n");
    void *o = NULL, *m = NULL;
    cudaMallocAsync(&o, SZ, s);
    cudaMalloc(&m, SZ);
    cudaStreamSynchronize(s);
    rt("begin capture", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    rt_state("cudaFreeAsync(cudaMallocAsync'ed) in capture", cudaFreeAsync(o, s));
    rt_state("cudaFreeAsync(cudaMalloc'ed) in capture", cudaFreeAsync(m, s));
    enum cudaStreamCaptureStatus cs;
    cudaStreamIsCapturing(s, &cs);
    printf("  capture status %d\n", (int)cs);
    rt("end capture", cudaStreamEndCapture(s, &g));
    if (g) rt("graph destroy", cudaGraphDestroy(g));
    rt("memset of it", cudaMemset(o, 1, SZ));
    rt_state("cudaFree of it afterwards", cudaFree(o));
    rt_state("cudaFree of the cudaMalloc'ed one", cudaFree(m));

    cudaFreeHost(pinned);
    cudaStreamDestroy(s);
    return 0;
}
