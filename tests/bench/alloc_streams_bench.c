/* alloc_streams_bench.c — the cost of a free when many streams exist (`make bench`).
 *
 * BENCH alloc.free_fence_ratio: the cost of freeing (cudaFree semantics) a block that one stream
 * used, with 64 streams in existence, divided by the cost of the same free with that one stream
 * only. A free waits only for the streams recorded for the block, so the ratio stays near 1; an
 * allocator that fences every stream it has seen pays 64 event records instead (acceptance: <= 2).
 * The block is allocated on stream 0 and alloc_record_stream names the one stream that used it
 * (PyTorch's record_stream), then alloc_free: events on that stream and the legacy stream.
 * Also printed: the same with the block allocated on the stream and freed in stream order on it
 * (cudaFreeAsync, PyTorch's pluggable free): no event at all. Best of 5 rounds each.
 * The in-memory backend with events (an event completes at its first query). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "alloc/alloc.h"

#define N 4096
#define ROUNDS 5

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* ns per free, best of ROUNDS rounds of N frees */
static double free_cost(unsigned nstreams, int recorded)
{
    alloc_mem_opts_t mo = {0};
    mo.track_events = true;
    alloc_mem_backend_t *m = alloc_mem_backend_create(&mo);
    alloc_t *a;
    if (!m || alloc_create(alloc_mem_backend(m), NULL, &a)) {
        fprintf(stderr, "alloc_streams_bench: cannot create the allocator\n");
        exit(1);
    }
    const uintptr_t used = 0x1000;
    for (unsigned i = 0; i < nstreams; i++)
        alloc_note_stream(a, used + 16 * i);
    static uint64_t p[N];
    double best = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < N; i++) {
            if (alloc_malloc(a, 4096 + (size_t)(i % 8) * 512, recorded ? 0 : used, &p[i])) exit(1);
            if (recorded) alloc_record_stream(a, p[i], used);
        }
        double t0 = now_ns();
        for (int i = 0; i < N; i++)
            if (recorded)
                alloc_free(a, p[i]);
            else
                alloc_free_async(a, p[i], used);
        double t = (now_ns() - t0) / N;
        if (t < best) best = t;
        alloc_empty_cache(a); /* same state for every round */
    }
    alloc_destroy(a);
    alloc_mem_backend_destroy(m);
    return best;
}

int main(void)
{
    double rone = free_cost(1, 1), rmany = free_cost(64, 1);
    double one = free_cost(1, 0), many = free_cost(64, 0);
    printf("BENCH alloc.free_ns_1stream %.1f ns\n", rone);
    printf("BENCH alloc.free_ns_64streams %.1f ns\n", rmany);
    printf("BENCH alloc.free_fence_ratio %.2f x\n", rmany / rone);
    printf("BENCH alloc.free_async_ns_1stream %.1f ns\n", one);
    printf("BENCH alloc.free_async_ns_64streams %.1f ns\n", many);
    printf("BENCH alloc.free_async_fence_ratio %.2f x\n", many / one);
    if (many / one > 2 || rmany / rone > 2) {
        fprintf(stderr, "alloc_streams_bench: a free with 64 streams costs more than twice the "
                        "same free with one stream\n");
        return 1;
    }
    return 0;
}
