/* alloc_streams_bench.c — the cost of a free when many streams exist (`make bench`).
 *
 * BENCH alloc.free_fence_ratio: the cost of freeing (cudaFree semantics) a block that one stream
 * used, with 64 streams in existence, divided by the cost of the same free with that one stream
 * only. A free waits only for the streams recorded for the block, so the ratio stays near 1; an
 * allocator that fences every stream it has seen pays 64 event records instead (acceptance: <= 1.5;
 * the bench fails above it).
 * The block is allocated on stream 0 and alloc_record_stream names the one stream that used it
 * (PyTorch's record_stream), then alloc_free: events on that stream and the legacy stream.
 * Also printed: the same with the block allocated on the stream and freed in stream order on it
 * (cudaFreeAsync, PyTorch's pluggable free): no event at all. Best of 41 rounds each, the four
 * cases' rounds interleaved. The streams are found through a hash table (alloc/internal.h,
 * `stab`): with a list scanned in order the legacy stream, created after the 64, cost 1.4-2.1x.
 * The in-memory backend with events (an event completes at its first query). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "alloc/alloc.h"

#define N 4096
#define ROUNDS 41

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

typedef struct {
    alloc_mem_backend_t *m;
    alloc_t *a;
    int recorded;
    double best;
} case_t;

static const uintptr_t used = 0x1000;
static case_t g_cases[4];

static void case_init(case_t *c, unsigned nstreams, int recorded)
{
    alloc_mem_opts_t mo = {0};
    mo.track_events = true;
    c->m = alloc_mem_backend_create(&mo);
    if (!c->m || alloc_create(alloc_mem_backend(c->m), NULL, &c->a)) {
        fprintf(stderr, "alloc_streams_bench: cannot create the allocator\n");
        exit(1);
    }
    for (unsigned i = 0; i < nstreams; i++)
        alloc_note_stream(c->a, used + 16 * i);
    c->recorded = recorded;
    c->best = 1e30;
}

/* One round of N frees; keeps the best ns per free. */
static void case_round(case_t *c)
{
    static uint64_t p[N];
    for (int i = 0; i < N; i++) {
        if (alloc_malloc(c->a, 4096 + (size_t)(i % 8) * 512, c->recorded ? 0 : used, &p[i])) {
            fprintf(stderr, "alloc_streams_bench: allocation failed\n");
            exit(1);
        }
        if (c->recorded) alloc_record_stream(c->a, p[i], used);
    }
    double t0 = now_ns();
    for (int i = 0; i < N; i++)
        if (c->recorded)
            alloc_free(c->a, p[i]);
        else
            alloc_free_async(c->a, p[i], used);
    double t = (now_ns() - t0) / N;
    if (t < c->best) c->best = t;
    alloc_empty_cache(c->a); /* same state for every round */
}

static void case_done(case_t *c)
{
    char err[256];
    if (alloc_check(c->a, err, sizeof(err))) {
        fprintf(stderr, "alloc_streams_bench: alloc_check: %s\n", err);
        exit(1);
    }
    alloc_destroy(c->a);
    alloc_mem_backend_destroy(c->m);
}

int main(void)
{
    /* rone, rmany: record_stream + cudaFree with 1 / 64 streams; one, many: cudaFreeAsync */
    case_t *c = g_cases;
    case_init(&c[0], 1, 1);
    case_init(&c[1], 64, 1);
    case_init(&c[2], 1, 0);
    case_init(&c[3], 64, 0);
    /* rounds alternate between the four, so a burst of load elsewhere hits a round of each
     * rather than one figure's every round; each figure is its best round (the least disturbed) */
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < 4; k++)
            case_round(&c[(k + r) % 4]); /* each case first in turn */
    double rone = c[0].best, rmany = c[1].best, one = c[2].best, many = c[3].best;
    for (int k = 0; k < 4; k++)
        case_done(&c[k]);
    printf("BENCH alloc.free_ns_1stream %.1f ns\n", rone);
    printf("BENCH alloc.free_ns_64streams %.1f ns\n", rmany);
    printf("BENCH alloc.free_fence_ratio %.2f x\n", rmany / rone);
    printf("BENCH alloc.free_async_ns_1stream %.1f ns\n", one);
    printf("BENCH alloc.free_async_ns_64streams %.1f ns\n", many);
    printf("BENCH alloc.free_async_fence_ratio %.2f x\n", many / one);
    if (many / one > 1.5 || rmany / rone > 1.5) {
        fprintf(stderr, "alloc_streams_bench: a free with 64 streams costs more than 1.5 times the "
                        "same free with one stream\n");
        return 1;
    }
    return 0;
}
