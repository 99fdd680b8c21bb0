/* churn_app — a loop that is no training loop: each step makes K device buffers of pseudo-random
 * sizes and frees them all; no loss, no backward, no gradient, no optimizer. For what gpumem
 * advise says of such a program (tests/integration/advise_unannotated.sh).
 * Arguments: STEPS K [MODE]. MODE letters: n — each step inside an NVTX "step N" range (the
 * steps from NVTX, the phases in them for gpumem to infer); r — every step the same sizes
 * (without it the sizes run on across steps, so no two steps are alike); w — each step ends with
 * 2 ms of work that allocates nothing, inside its range (a step lasts longer than its
 * allocations). */
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv)
{
    long steps = argc > 1 ? atol(argv[1]) : 10;
    int k = argc > 2 ? atoi(argv[2]) : 100;
    const char *mode = argc > 3 ? argv[3] : "";
    int nvtx = strchr(mode, 'n') != NULL, repeat = strchr(mode, 'r') != NULL, work = strchr(mode, 'w') != NULL;
    if (steps < 1 || k < 1 || k > 100000) {
        fprintf(stderr, "usage: churn_app STEPS K [n][r][w]\n");
        return 2;
    }
    void **p = calloc((size_t)k, sizeof *p);
    unsigned seed = 1;
    for (long s = 0; s < steps && p; s++) {
        char name[32];
        snprintf(name, sizeof name, "step %ld", s);
        if (nvtx) nvtxRangePushA(name);
        if (repeat) seed = 1;
        for (int i = 0; i < k; i++) {
            seed = seed * 1103515245u + 12345u;
            /* 10,000 sizes: two neighbours alike in about one step of a hundred, by chance */
            if (cudaMalloc(&p[i], 512 * (1 + (seed >> 8) % 10000)) != cudaSuccess) {
                fprintf(stderr, "churn_app: cudaMalloc failed\n");
                return 1;
            }
        }
        for (int i = 0; i < k; i++)
            cudaFree(p[i]);
        if (work) nanosleep(&(struct timespec){0, 2000000}, NULL);
        if (nvtx) nvtxRangePop();
    }
    free(p);
    printf("churn_app: %ld steps of %d buffers\n", steps, k);
    return 0;
}
