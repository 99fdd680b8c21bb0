/*
 * order_app — many threads reusing the same few addresses on every free path at once, for the
 * order of frees and reuses in a recording (tests/integration/preload_order.sh).
 *
 * 8 threads start together; thread t uses free path t % 4: cudaMalloc/cudaFree, cudaMallocAsync/
 * cudaFreeAsync on its own stream, cudaMallocHost/cudaFreeHost, cuMemAlloc_v2/cuMemFree_v2 (the
 * driver, by symbol). Each keeps 2 allocations live, of 3 sizes only, so a block one thread frees
 * is soon handed to another thread. With a digit as argument, every thread takes that path
 * (0 sync, 1 async, 2 host, 3 driver). With `bad` as argument it then makes one double free and
 * one interior free on each path (sync, async, host, driver), in this order, and prints each
 * return code (for the bad-free table of the same script). `bad DEV` allocates on device DEV
 * and makes the refused frees with device 0 current (GPUMEM_SIM_DEVICES=2): a refused free of
 * memory gpumem knows is recorded on that memory's device, not on the caller's.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 8
#define OPS 1500
#define LIVE 2

static pthread_barrier_t start;
static int failures;
static int only_path = -1; /* `order_app PATH`: every thread on that path */

static void *work(void *arg)
{
    long t = (long)arg;
    int path = only_path >= 0 ? only_path : (int)(t % 4);
    cudaStream_t s = 0;
    if (path == 1 && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    void *live[LIVE] = {0};
    cudaFree(NULL); /* the primary context current on this thread, for the driver path */
    pthread_barrier_wait(&start);
    for (int i = 0; i < OPS; i++) {
        int k = i % LIVE;
        size_t size = (size_t)512 << (i % 3); /* 3 sizes: the same blocks over and over */
        int e = 0;
        if (live[k]) {
            switch (path) {
            case 0: e = cudaFree(live[k]); break;
            case 1: e = cudaFreeAsync(live[k], s); break;
            case 2: e = cudaFreeHost(live[k]); break;
            default: e = cuMemFree_v2((CUdeviceptr)(uintptr_t)live[k]); break;
            }
            live[k] = NULL;
        }
        CUdeviceptr d = 0;
        switch (path) {
        case 0: e |= cudaMalloc(&live[k], size); break;
        case 1: e |= cudaMallocAsync(&live[k], size, s); break;
        case 2: e |= cudaMallocHost(&live[k], size); break;
        default:
            e |= cuMemAlloc_v2(&d, size);
            live[k] = (void *)(uintptr_t)d;
            break;
        }
        if (e)
            __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    }
    for (int k = 0; k < LIVE; k++)
        switch (path) {
        case 0: cudaFree(live[k]); break;
        case 1: cudaFreeAsync(live[k], s); break;
        case 2: cudaFreeHost(live[k]); break;
        default: cuMemFree_v2((CUdeviceptr)(uintptr_t)live[k]); break;
        }
    if (s) {
        cudaStreamSynchronize(s);
        cudaStreamDestroy(s);
    }
    return NULL;
}

/* One double free and one interior free on each path; the codes go to stdout. The memory is
 * on device dev; the refused frees are made with device 0 current. */
static void bad_frees(int dev)
{
    const char *names[4] = {"sync", "async", "host", "driver"};
    for (int path = 0; path < 4; path++) {
        void *p = NULL, *q = NULL;
        CUdeviceptr d = 0, dq = 0;
        int e1, e2;
        cudaSetDevice(dev);
        switch (path) {
        case 0:
            cudaMalloc(&p, 4096), cudaMalloc(&q, 4096);
            cudaFree(p);
            cudaSetDevice(0);
            e1 = cudaFree(p);
            e2 = cudaFree((char *)q + 16);
            cudaGetLastError();
            cudaSetDevice(dev);
            cudaFree(q);
            break;
        case 1:
            cudaMallocAsync(&p, 4096, 0), cudaMallocAsync(&q, 4096, 0);
            cudaFreeAsync(p, 0);
            cudaSetDevice(0);
            e1 = cudaFreeAsync(p, 0);
            e2 = cudaFreeAsync((char *)q + 16, 0);
            cudaGetLastError();
            cudaSetDevice(dev);
            cudaFreeAsync(q, 0);
            cudaStreamSynchronize(0);
            break;
        case 2:
            cudaMallocHost(&p, 4096), cudaMallocHost(&q, 4096);
            cudaFreeHost(p);
            cudaSetDevice(0);
            e1 = cudaFreeHost(p);
            e2 = cudaFreeHost((char *)q + 16);
            cudaGetLastError();
            cudaFreeHost(q);
            break;
        default:
            cuMemAlloc_v2(&d, 4096), cuMemAlloc_v2(&dq, 4096);
            cuMemFree_v2(d);
            cudaSetDevice(0);
            e1 = cuMemFree_v2(d);
            e2 = cuMemFree_v2(dq + 16);
            cudaSetDevice(dev);
            cuMemFree_v2(dq);
            break;
        }
        printf("order_app: %s double %d interior %d\n", names[path], e1, e2);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "bad") == 0) {
        cudaFree(NULL);
        bad_frees(argc > 2 ? atoi(argv[2]) : 0);
        return 0;
    }
    if (argc > 1)
        only_path = argv[1][0] - '0';
    if (only_path > 3) {
        fprintf(stderr, "usage: order_app [0-3 | bad]\n");
        return 2;
    }
    cudaFree(NULL); /* the runtime's context, before the threads race */
    pthread_barrier_init(&start, NULL, NTHREADS);
    pthread_t th[NTHREADS];
    for (long t = 0; t < NTHREADS; t++)
        pthread_create(&th[t], NULL, work, (void *)t);
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);
    printf("order_app: %d failures\n", failures);
    return failures != 0;
}
