/* frag_app — an OOM caused by fragmentation, for `gpumem frag` and the report's OOM forensics.
 *
 * Under PyTorch's classic policy (GPUMEM_CONF=preset:pytorch) a 4 MiB request gets a block of a
 * 20 MiB segment. Fifteen of them fill three segments; freeing every other one leaves 36 MiB
 * free in 4 MiB pieces that segments never merge. Under a 64 MiB limit an 8 MiB request then
 * fits no free block and no new segment: an OOM with more than enough memory free in
 * fragments. Prints the calls' results, so a test can check the program saw the OOM. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#define N 15

/* "cross": two streams, blocks allocated on one and freed in stream order on the other (and
 * the other way round), sizes that make the allocator split, merge and grow: the replay of the
 * recorded trace must find the same peak reserved as the run. */
static int cross_streams(void) {
    cudaStream_t s[2];
    if (cudaStreamCreate(&s[0]) != cudaSuccess || cudaStreamCreate(&s[1]) != cudaSuccess) return 1;
    void *p[64] = {0};
    for (int round = 0; round < 6; round++) {
        for (int i = 0; i < 64; i++) {
            size_t sz = ((size_t)(1 + (i * 7 + round * 3) % 23) << 20) + (size_t)(i % 5) * 4096;
            if (cudaMallocAsync(&p[i], sz, s[i % 2]) != cudaSuccess) return 1;
        }
        for (int i = 0; i < 64; i++)
            if (i % 3 != round % 3 && cudaFreeAsync(p[i], s[(i + 1) % 2]) == cudaSuccess) p[i] = NULL;
        cudaStreamSynchronize(s[0]);
        for (int i = 0; i < 64; i++)
            if (p[i] && cudaFreeAsync(p[i], s[i % 2]) == cudaSuccess) p[i] = NULL;
    }
    cudaDeviceSynchronize();
    printf("cross-stream rounds done\n");
    return 0;
}

/* "syncfree": blocks allocated on two streams; each round frees a third of them with a plain
 * cudaFree (under free_sync:device, the default, the device is synchronized first: those blocks
 * are settled at once) and the rest in stream order on the other stream, while a memset is queued
 * on each stream. Sizes grow from round to round, so each new peak runs the release before
 * growth with both kinds of frees cached: the replay must settle the synchronized frees at once,
 * as the run did, and the others only when the recorded markers say so. */
static int sync_frees(void) {
    cudaStream_t s[2];
    if (cudaStreamCreate(&s[0]) != cudaSuccess || cudaStreamCreate(&s[1]) != cudaSuccess) return 1;
    void *p[48] = {0};
    for (int round = 0; round < 8; round++) {
        for (int i = 0; i < 48; i++) {
            size_t sz = ((size_t)(1 + (i * 5 + round * 7) % (9 + 2 * round)) << 20) + (size_t)(i % 3) * 8192;
            if (cudaMallocAsync(&p[i], sz, s[i % 2]) != cudaSuccess) return 1;
            if (cudaMemsetAsync(p[i], 0, 4096, s[i % 2]) != cudaSuccess) return 1;
        }
        for (int i = 0; i < 48; i++) {
            cudaError_t e = i % 3 == round % 3 ? cudaFree(p[i]) : cudaFreeAsync(p[i], s[(i + 1) % 2]);
            if (e != cudaSuccess) return 1;
            p[i] = NULL;
        }
    }
    cudaDeviceSynchronize();
    printf("sync-free rounds done\n");
    return 0;
}

/* "destroy": the cross-stream rounds, each ending with a stream of its own made, used for a block
 * and destroyed. The allocator synchronizes before it forgets a stream that holds memory, which
 * settles every free made before: the next round's release before growth gives back what that
 * settled. The replay must settle there too (it has no line for the stream's end but the
 * synchronization's). */
static int destroy_rounds(void) {
    cudaStream_t s[2];
    if (cudaStreamCreate(&s[0]) != cudaSuccess || cudaStreamCreate(&s[1]) != cudaSuccess) return 1;
    void *p[48] = {0};
    for (int round = 0; round < 8; round++) {
        for (int i = 0; i < 48; i++) {
            size_t sz = ((size_t)(1 + (i * 5 + round * 7) % (9 + 2 * round)) << 20) + (size_t)(i % 3) * 8192;
            if (cudaMallocAsync(&p[i], sz, s[i % 2]) != cudaSuccess) return 1;
            if (cudaMemsetAsync(p[i], 0, 4096, s[i % 2]) != cudaSuccess) return 1;
        }
        for (int i = 0; i < 48; i++) {
            if (cudaFreeAsync(p[i], s[(i + 1) % 2]) != cudaSuccess) return 1;
            p[i] = NULL;
        }
        cudaStream_t t;
        void *q = NULL;
        if (cudaStreamCreate(&t) != cudaSuccess || cudaMallocAsync(&q, (size_t)3 << 20, t) != cudaSuccess ||
            cudaFreeAsync(q, t) != cudaSuccess || cudaStreamDestroy(t) != cudaSuccess)
            return 1;
    }
    cudaDeviceSynchronize();
    printf("destroy rounds done\n");
    return 0;
}

/* "oom": blocks of 1 to 12 MiB on two streams, five live at a time, each freed in stream order on
 * the other stream, first under a per-process memory fraction of 48 MiB (gpumem's PyTorch entry
 * point; the trace's `l` line): live memory stays under it, but what is cached (pages whose
 * frees the markers have not settled yet) meets it, and the allocator's OOM path synchronizes and
 * gives cached pages back before retrying. Every request is served. Then the cap is lifted and
 * rounds of larger blocks grow reserved memory from what the first phase left cached: the
 * replay reaches the run's peak only if it settled, released and kept what the run did, its
 * synchronizations included, each where the run made it. */
static int oom_rounds(void) {
    void (*fraction)(double, int) = (void (*)(double, int))dlsym(RTLD_DEFAULT, "gpumem_torch_memory_fraction");
    size_t fr = 0, total = 0;
    if (!fraction || cudaMemGetInfo(&fr, &total) != cudaSuccess || !total) {
        printf("gpumem_torch_memory_fraction not found (run under gpumem)\n");
        return 1;
    }
    cudaStream_t s[2];
    if (cudaStreamCreate(&s[0]) != cudaSuccess || cudaStreamCreate(&s[1]) != cudaSuccess) return 1;
    fraction((double)((size_t)48 << 20) / (double)total, 0);
    enum { LIVE = 5 };
    void *p[48] = {0};
    for (int i = 0; i < 240; i++) {
        int k = i % LIVE;
        if (p[k] && cudaFreeAsync(p[k], s[(i + 1) % 2]) != cudaSuccess) return 1;
        size_t sz = ((size_t)(1 + (i * 7) % 12) << 20) + (size_t)(i % 5) * 4096;
        if (cudaMallocAsync(&p[k], sz, s[i % 2]) != cudaSuccess) {
            printf("request %d of %zu bytes refused\n", i, sz);
            return 1;
        }
        if (cudaMemsetAsync(p[k], 0, 4096, s[i % 2]) != cudaSuccess) return 1;
    }
    fraction(1.0, 0);
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 48; i++) {
            if (i >= LIVE || !p[i]) {
                size_t sz = ((size_t)(1 + (i * 5 + round * 7) % (9 + 2 * round)) << 20) + (size_t)(i % 3) * 8192;
                if (cudaMallocAsync(&p[i], sz, s[i % 2]) != cudaSuccess) return 1;
            }
            if (cudaMemsetAsync(p[i], 0, 4096, s[i % 2]) != cudaSuccess) return 1;
        }
        for (int i = 0; i < 48; i++) {
            if (cudaFreeAsync(p[i], s[(i + 1) % 2]) != cudaSuccess) return 1;
            p[i] = NULL;
        }
    }
    cudaDeviceSynchronize();
    printf("oom rounds done\n");
    return 0;
}

/* "torch": allocations through gpumem's PyTorch pluggable-allocator entry points (as PyTorch
 * makes them) beside a library's own cudaMalloc (as cuBLAS makes its workspace): the trace
 * export tells them apart ("a" and "ax"). */
static int torch_and_library(void) {
    void *(*tmalloc)(ssize_t, int, void *) = (void *(*)(ssize_t, int, void *))dlsym(RTLD_DEFAULT, "gpumem_torch_malloc");
    void (*tfree)(void *, ssize_t, int, void *) = (void (*)(void *, ssize_t, int, void *))dlsym(RTLD_DEFAULT, "gpumem_torch_free");
    if (!tmalloc || !tfree) {
        printf("gpumem_torch_malloc not found (run under gpumem)\n");
        return 1;
    }
    void *work = NULL;
    /* the library's workspace: 8 MiB, so that where it sits (gpumem's pool, or outside PyTorch's)
     * changes the reserved peak under both PyTorch presets (snapshot_export.sh) */
    if (cudaMalloc(&work, (size_t)8 << 20) != cudaSuccess) return 1;
    void *t[8];
    for (int i = 0; i < 8; i++) t[i] = tmalloc((ssize_t)(i + 1) << 20, 0, NULL);
    for (int i = 0; i < 8; i++) tfree(t[i], (ssize_t)(i + 1) << 20, 0, NULL);
    cudaFree(work);
    printf("torch and library allocations done\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "cross")) return cross_streams();
    if (argc > 1 && !strcmp(argv[1], "torch")) return torch_and_library();
    if (argc > 1 && !strcmp(argv[1], "syncfree")) return sync_frees();
    if (argc > 1 && !strcmp(argv[1], "oom")) return oom_rounds();
    if (argc > 1 && !strcmp(argv[1], "destroy")) return destroy_rounds();
    void *p[N] = {0};
    for (int i = 0; i < N; i++) {
        cudaError_t e = cudaMalloc(&p[i], (size_t)4 << 20);
        if (e != cudaSuccess) {
            printf("alloc %d failed: %d\n", i, (int)e);
            return 1;
        }
    }
    for (int i = 0; i < N; i += 2) cudaFree(p[i]);
    void *big = NULL;
    cudaError_t e = cudaMalloc(&big, (size_t)8 << 20);
    printf("8 MiB after freeing every other 4 MiB block: %s\n", e == cudaSuccess ? "ok" : "out of memory");
    if (e == cudaSuccess) cudaFree(big);
    for (int i = 1; i < N; i += 2) cudaFree(p[i]);
    return 0;
}
