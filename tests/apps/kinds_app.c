/*
 * kinds_app KIND — one kind of memory beside plain device allocations, so that a test can check
 * which of gpumem's peak figures that kind belongs to (tests/integration/snapshot_kinds.sh).
 *
 * Every run: A = cudaMalloc(3 MiB + 100) stays live; B = cudaMalloc(1 MiB) is freed at once (so
 * A + B is the device allocations' peak so far); then, with A live, 8 MiB of KIND, held and given
 * back; then C = cudaMalloc(256 KiB) and A freed. 8 MiB is more than B: a figure that counts KIND
 * wrongly has its peak there, a figure that counts it rightly where the table says.
 *   none     nothing more (the base a test adds rows of its own to)
 *   device   a cudaMalloc (the control: it is a device allocation, the peak moves)
 *   vmm      the program's own cuMemCreate + cuMemMap (4 x 2 MiB handles)
 *   pool     an allocation from a pool the program chose (cuMemAllocFromPoolAsync on the device's
 *            default pool: passed through to the driver)
 *   poolsmall 16 allocations of 64 KiB (1 MiB, not 8) held at once from the default pool through
 *            cudaMallocFromPoolAsync, then freed: small enough that an allocator's cached small
 *            segment (B's) could hold them, which a replay must not let it do (passed through)
 *   graph    a graph's memory node: cudaMallocAsync and cudaFreeAsync captured on a stream of its
 *            own, the graph launched once (passed through to the driver)
 *   graphnode the same memory node made node by node: cudaGraphAddMemAllocNode (device 0's
 *            pool) and cudaGraphAddMemFreeNode on a graph of its own, launched once
 *   graphadd the same memory node made with the generic cuGraphAddNode (node types
 *            CU_GRAPH_NODE_TYPE_MEM_ALLOC and _MEM_FREE), the driver's name called directly
 *   graphdrv cuGraphAddMemAllocNode / cuGraphAddMemFreeNode called directly by their names
 *   graphproc the same two looked up with cudaGetDriverEntryPointByVersion and called through the pointers
 *   setpool  cudaMallocAsync on device 0 after cudaDeviceSetMemPool (device 0's default pool,
 *            the one pool the virtual GPU has): an allocation from a pool the program chose
 *   drvsetpool the same through the driver: cuDeviceSetMemPool, cuMemAllocAsync, cuMemFreeAsync
 *   memsetpool the same with CUDA 13's cuMemSetMemPool (device 0's location, device memory)
 *   pool1    cudaMallocFromPoolAsync from device 1's default pool on a stream of device 0
 *            (GPUMEM_SIM_DEVICES=2): the allocation is on the pool's device, 1
 *   drvpool1 the same through the driver, cuMemAllocFromPoolAsync
 * (CUDA arrays: the virtual GPU has none; the test writes their rows itself)
 *   host     pinned host memory (cudaMallocHost)
 *   managed  managed memory (cudaMallocManaged)
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
#define KIND_BYTES (8 * MIB)

#include "tests/apps/app_check.h"

static int vmm(void) {
    CUdevice dev;
    CHECK_DRV(cuDeviceGet(&dev, 0));
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran;
    CHECK_DRV(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t n = KIND_BYTES / gran;
    CUdeviceptr va;
    CHECK_DRV(cuMemAddressReserve(&va, KIND_BYTES, 0, 0, 0));
    CUmemGenericAllocationHandle h[16];
    if (n > 16) return 1;
    for (size_t i = 0; i < n; i++) {
        CHECK_DRV(cuMemCreate(&h[i], gran, &prop, 0));
        CHECK_DRV(cuMemMap(va + i * gran, gran, 0, h[i], 0));
    }
    CUmemAccessDesc ad = {0};
    ad.location = prop.location;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK_DRV(cuMemSetAccess(va, KIND_BYTES, &ad, 1));
    for (size_t i = 0; i < n; i++) {
        CHECK_DRV(cuMemUnmap(va + i * gran, gran));
        CHECK_DRV(cuMemRelease(h[i]));
    }
    CHECK_DRV(cuMemAddressFree(va, KIND_BYTES));
    return 0;
}

/* graphadd, graphdrv, graphproc: an allocation node and its free node made on a graph of its own
 * by the driver API (cuGraphAddNode; the two named calls; the two through
 * cudaGetDriverEntryPointByVersion), the graph launched once. */
static int graph_nodes(const char *k) {
    typedef CUresult (*add_alloc_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *);
    typedef CUresult (*add_free_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr);
    add_alloc_fn add_alloc = cuGraphAddMemAllocNode;
    add_free_fn add_free = cuGraphAddMemFreeNode;
    if (!strcmp(k, "graphproc")) {
        enum cudaDriverEntryPointQueryResult q;
        CHECK_RT(cudaGetDriverEntryPointByVersion("cuGraphAddMemAllocNode", (void **)&add_alloc, 12000, cudaEnableDefault, &q));
        CHECK_RT(cudaGetDriverEntryPointByVersion("cuGraphAddMemFreeNode", (void **)&add_free, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !add_alloc || !add_free) return 1;
    }
    cudaStream_t s;
    CUgraph g;
    CUgraphNode an, fn;
    CUgraphExec ge;
    CUDA_MEM_ALLOC_NODE_PARAMS ap;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ap.poolProps.location.id = 0;
    ap.bytesize = KIND_BYTES;
    CHECK_RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK_DRV(cuGraphCreate(&g, 0));
    if (!strcmp(k, "graphadd")) {
        CUgraphNodeParams np;
        memset(&np, 0, sizeof np);
        np.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
        np.alloc.poolProps = ap.poolProps;
        np.alloc.bytesize = KIND_BYTES;
        CHECK_DRV(cuGraphAddNode(&an, g, NULL, NULL, 0, &np));
        CUdeviceptr d = np.alloc.dptr;
        memset(&np, 0, sizeof np);
        np.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
        np.free.dptr = d;
        CHECK_DRV(cuGraphAddNode(&fn, g, &an, NULL, 1, &np));
    } else {
        CHECK_DRV(add_alloc(&an, g, NULL, 0, &ap));
        CHECK_DRV(add_free(&fn, g, &an, 1, ap.dptr));
    }
    CHECK_DRV(cuGraphInstantiateWithFlags(&ge, g, 0));
    CHECK_DRV(cuGraphLaunch(ge, (CUstream)s));
    CHECK_RT(cudaStreamSynchronize(s));
    CHECK_DRV(cuGraphExecDestroy(ge));
    CHECK_DRV(cuGraphDestroy(g));
    CHECK_RT(cudaStreamDestroy(s));
    return 0;
}

static int kind(const char *k) {
    void *p;
    if (!strcmp(k, "none")) {
        return 0;
    } else if (!strcmp(k, "device")) {
        CHECK_RT(cudaMalloc(&p, KIND_BYTES));
        CHECK_RT(cudaFree(p));
    } else if (!strcmp(k, "vmm")) {
        return vmm();
    } else if (!strcmp(k, "pool")) {
        CUmemoryPool pool;
        CUdeviceptr d;
        CHECK_DRV(cuDeviceGetDefaultMemPool(&pool, 0));
        CHECK_DRV(cuMemAllocFromPoolAsync(&d, KIND_BYTES, pool, 0));
        CHECK_DRV(cuMemFreeAsync(d, 0));
        CHECK_RT(cudaStreamSynchronize(0));
    } else if (!strcmp(k, "poolsmall")) {
        cudaMemPool_t pool;
        void *q[16];
        CHECK_RT(cudaDeviceGetDefaultMemPool(&pool, 0));
        for (int i = 0; i < 16; i++) CHECK_RT(cudaMallocFromPoolAsync(&q[i], 64 << 10, pool, 0));
        for (int i = 0; i < 16; i++) CHECK_RT(cudaFreeAsync(q[i], 0));
        CHECK_RT(cudaStreamSynchronize(0));
    } else if (!strcmp(k, "graph")) {
        cudaStream_t s;
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CHECK_RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CHECK_RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        CHECK_RT(cudaMallocAsync(&p, KIND_BYTES, s));
        CHECK_RT(cudaFreeAsync(p, s));
        CHECK_RT(cudaStreamEndCapture(s, &g));
        CHECK_RT(cudaGraphInstantiate(&ge, g, 0));
        CHECK_RT(cudaGraphLaunch(ge, s));
        CHECK_RT(cudaStreamSynchronize(s));
        CHECK_RT(cudaGraphExecDestroy(ge));
        CHECK_RT(cudaGraphDestroy(g));
        CHECK_RT(cudaStreamDestroy(s));
    } else if (!strcmp(k, "graphnode")) {
        cudaStream_t s;
        cudaGraph_t g;
        cudaGraphExec_t ge;
        cudaGraphNode_t an, fn;
        struct cudaMemAllocNodeParams ap;
        memset(&ap, 0, sizeof ap);
        ap.poolProps.allocType = cudaMemAllocationTypePinned;
        ap.poolProps.location.type = cudaMemLocationTypeDevice;
        ap.poolProps.location.id = 0;
        ap.bytesize = KIND_BYTES;
        CHECK_RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CHECK_RT(cudaGraphCreate(&g, 0));
        CHECK_RT(cudaGraphAddMemAllocNode(&an, g, NULL, 0, &ap));
        CHECK_RT(cudaGraphAddMemFreeNode(&fn, g, &an, 1, ap.dptr));
        CHECK_RT(cudaGraphInstantiate(&ge, g, 0));
        CHECK_RT(cudaGraphLaunch(ge, s));
        CHECK_RT(cudaStreamSynchronize(s));
        CHECK_RT(cudaGraphExecDestroy(ge));
        CHECK_RT(cudaGraphDestroy(g));
        CHECK_RT(cudaStreamDestroy(s));
    } else if (!strcmp(k, "graphadd") || !strcmp(k, "graphdrv") || !strcmp(k, "graphproc")) {
        return graph_nodes(k);
    } else if (!strcmp(k, "setpool")) {
        cudaMemPool_t pool;
        CHECK_RT(cudaDeviceGetDefaultMemPool(&pool, 0));
        CHECK_RT(cudaDeviceSetMemPool(0, pool));
        CHECK_RT(cudaMallocAsync(&p, KIND_BYTES, 0));
        CHECK_RT(cudaFreeAsync(p, 0));
        CHECK_RT(cudaStreamSynchronize(0));
    } else if (!strcmp(k, "drvsetpool") || !strcmp(k, "memsetpool")) {
        CUmemoryPool pool;
        CUdeviceptr d;
        CHECK_DRV(cuDeviceGetDefaultMemPool(&pool, 0));
        if (!strcmp(k, "drvsetpool")) {
            CHECK_DRV(cuDeviceSetMemPool(0, pool));
        } else {
            CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
            CHECK_DRV(cuMemSetMemPool(&loc, CU_MEM_ALLOCATION_TYPE_PINNED, pool));
        }
        CHECK_DRV(cuMemAllocAsync(&d, KIND_BYTES, 0));
        CHECK_DRV(cuMemFreeAsync(d, 0));
        CHECK_RT(cudaStreamSynchronize(0));
    } else if (!strcmp(k, "pool1") || !strcmp(k, "drvpool1")) {
        cudaMemPool_t pool;
        cudaStream_t s; /* device 0's */
        CHECK_RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CHECK_RT(cudaDeviceGetDefaultMemPool(&pool, 1));
        if (!strcmp(k, "pool1")) {
            CHECK_RT(cudaMallocFromPoolAsync(&p, KIND_BYTES, pool, s));
        } else {
            CUdeviceptr d;
            CHECK_DRV(cuMemAllocFromPoolAsync(&d, KIND_BYTES, (CUmemoryPool)pool, (CUstream)s));
            p = (void *)d;
        }
        CHECK_RT(cudaFreeAsync(p, s));
        CHECK_RT(cudaStreamSynchronize(s));
        CHECK_RT(cudaStreamDestroy(s));
    } else if (!strcmp(k, "host")) {
        CHECK_RT(cudaMallocHost(&p, KIND_BYTES));
        CHECK_RT(cudaFreeHost(p));
    } else if (!strcmp(k, "managed")) {
        CHECK_RT(cudaMallocManaged(&p, KIND_BYTES, cudaMemAttachGlobal));
        CHECK_RT(cudaFree(p));
    } else {
        fprintf(stderr, "kinds_app: unknown kind '%s' (none, device, vmm, pool, poolsmall, graph, graphnode, graphadd, graphdrv, graphproc, setpool, drvsetpool, memsetpool, pool1, drvpool1, host, managed)\n", k);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: kinds_app none|device|vmm|pool|poolsmall|graph|graphnode|graphadd|graphdrv|graphproc|setpool|drvsetpool|memsetpool|pool1|drvpool1|host|managed\n");
        return 2;
    }
    void *a, *b, *c;
    CHECK_RT(cudaMalloc(&a, 3 * MIB + 100));
    CHECK_RT(cudaMalloc(&b, MIB));
    CHECK_RT(cudaFree(b));
    int rc = kind(argv[1]);
    if (rc) return rc;
    CHECK_RT(cudaMalloc(&c, 256 << 10));
    CHECK_RT(cudaFree(c));
    CHECK_RT(cudaFree(a));
    return 0;
}
