/* alloc_pairs.c — alloc_bench's cached pairs at one live count, for valgrind (not a bench: it
 * prints no BENCH line). The same size sequence and the same setup as alloc_bench.c's
 * alloc.pair_ns_live<N> (N live blocks and as many free holes between them, five warm batches),
 * then PAIRS malloc + free pairs inside pairs_run(), so that a tool counts them alone:
 *
 *   valgrind --tool=callgrind --cache-sim=yes --toggle-collect=pairs_run \
 *       build/tests/bench/alloc_pairs 100000 100000
 *
 * then instructions, D1 misses (and LL misses: --LL=1048576,8,64 models this machine's L2) per
 * pair are the totals over PAIRS (tests/bench/README.md, the allocator's own figures).
 */
#include <stdio.h>
#include <stdlib.h>

#include "alloc/alloc.h"

#define NSIZES 4096

static size_t g_sizes[NSIZES];

static uint64_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 17;
}

/* noinline: the function callgrind's --toggle-collect names */
__attribute__((noinline)) static void pairs_run(alloc_t *a, long n, size_t *pos)
{
    size_t j = *pos;
    for (long i = 0; i < n; i++) {
        uint64_t p;
        if (alloc_malloc(a, g_sizes[j], 0, &p) || alloc_free_async(a, p, 0)) {
            fprintf(stderr, "alloc_pairs: allocation failed\n");
            exit(1);
        }
        j = (j + 1) & (NSIZES - 1);
    }
    *pos = j;
}

int main(int argc, char **argv)
{
    if (argc != 3 || atol(argv[1]) < 1 || atol(argv[2]) < 1) {
        fprintf(stderr, "usage: alloc_pairs LIVE PAIRS\n");
        return 2;
    }
    long live = atol(argv[1]), pairs = atol(argv[2]);
    uint64_t s = 12345; /* alloc_bench.c's sizes */
    for (int i = 0; i < NSIZES; i++) {
        unsigned lg = 9 + (unsigned)(rnd(&s) % 13);
        g_sizes[i] = ((size_t)1 << lg) + rnd(&s) % ((size_t)1 << lg);
    }
    alloc_config_t cfg;
    alloc_config_preset(&cfg, "gpumem");
    alloc_mem_opts_t mo = {.capacity = (size_t)512 << 30};
    alloc_mem_backend_t *m = alloc_mem_backend_create(&mo);
    alloc_t *a = NULL;
    if (!m || alloc_create(alloc_mem_backend(m), &cfg, &a)) {
        fprintf(stderr, "alloc_pairs: cannot create the allocator\n");
        return 1;
    }
    /* alloc_bench.c's setup_live: 2 * live blocks, every other one freed */
    uint64_t *blk = malloc(sizeof(uint64_t) * (size_t)live * 2);
    if (!blk) return 1;
    s = 99;
    for (long i = 0; i < live * 2; i++)
        if (alloc_malloc(a, g_sizes[rnd(&s) & (NSIZES - 1)], 0, &blk[i])) {
            fprintf(stderr, "alloc_pairs: setup allocation failed\n");
            return 1;
        }
    for (long i = 0; i < live * 2; i += 2)
        alloc_free_async(a, blk[i], 0);
    free(blk);
    size_t pos = 0;
    pairs_run(a, 0, &pos);          /* not inlined into main */
    for (int w = 0; w < 5; w++) /* alloc_bench's warm batches of 1,000 */
        for (int i = 0; i < 1000; i++) {
            uint64_t p;
            alloc_malloc(a, g_sizes[pos], 0, &p);
            alloc_free_async(a, p, 0);
            pos = (pos + 1) & (NSIZES - 1);
        }
    pairs_run(a, pairs, &pos);
    char err[256];
    if (alloc_check(a, err, sizeof(err))) {
        fprintf(stderr, "alloc_pairs: alloc_check: %s\n", err);
        return 1;
    }
    alloc_destroy(a);
    alloc_mem_backend_destroy(m);
    return 0;
}
