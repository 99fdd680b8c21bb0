/* churn_app — a loop that is no training loop: each step makes K device buffers of pseudo-random
 * sizes and frees them all; no loss, no backward, no gradient, no optimizer. For what gpumem
 * advise says of such a program (tests/integration/advise_unannotated.sh).
 * Arguments: STEPS K [MODE]. MODE letters: n — each step inside an NVTX "step N" range (the
 * steps from NVTX, the phases in them for gpumem to infer); r — every step the same sizes
 * (without it the sizes run on across steps, so no two steps are alike); w — each step ends with
 * 2 ms of work that allocates nothing, inside its range (a step lasts longer than its
 * allocations). The "step N" range of every other kind (tests/integration/preload_nvtx.sh):
 * s — a start/end range (nvtxRangeStartA / nvtxRangeEnd, process-wide); x — a start/end range
 * started on the main thread, the step's buffers made and freed and the range ended on another
 * thread; e — a push/pop range inside one start/end range "epoch" around every step. */
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void **p;
static int k;
static unsigned seed = 1;

/* One step's buffers: made, then freed. 0, or 1 when a cudaMalloc failed. */
static int step_buffers(void)
{
    for (int i = 0; i < k; i++) {
        seed = seed * 1103515245u + 12345u;
        /* 10,000 sizes: two neighbours alike in about one step of a hundred, by chance */
        if (cudaMalloc(&p[i], 512 * (1 + (seed >> 8) % 10000)) != cudaSuccess) {
            fprintf(stderr, "churn_app: cudaMalloc failed\n");
            for (int j = 0; j < i; j++)
                cudaFree(p[j]);
            return 1;
        }
    }
    for (int i = 0; i < k; i++)
        cudaFree(p[i]);
    return 0;
}

/* x: the step on another thread, which ends the range the main thread started */
static nvtxRangeId_t cross_id;
static int cross_rc, work;
static void *cross_step(void *arg)
{
    (void)arg;
    cross_rc = step_buffers();
    if (work) nanosleep(&(struct timespec){0, 2000000}, NULL);
    nvtxRangeEnd(cross_id);
    return NULL;
}

int main(int argc, char **argv)
{
    long steps = argc > 1 ? atol(argv[1]) : 10;
    k = argc > 2 ? atoi(argv[2]) : 100;
    const char *mode = argc > 3 ? argv[3] : "";
    int repeat = strchr(mode, 'r') != NULL;
    work = strchr(mode, 'w') != NULL;
    /* the kind of the "step N" range, if any */
    char kind = strchr(mode, 'n') ? 'n' : strchr(mode, 's') ? 's' : strchr(mode, 'x') ? 'x' : strchr(mode, 'e') ? 'e' : 0;
    if (steps < 1 || k < 1 || k > 100000) {
        fprintf(stderr, "usage: churn_app STEPS K [n|s|x|e][r][w]\n");
        return 2;
    }
    p = calloc((size_t)k, sizeof *p);
    nvtxRangeId_t epoch = kind == 'e' ? nvtxRangeStartA("epoch") : 0;
    for (long s = 0; s < steps && p; s++) {
        char name[32];
        snprintf(name, sizeof name, "step %ld", s);
        nvtxRangeId_t se = 0;
        if (kind == 'n' || kind == 'e') nvtxRangePushA(name);
        if (kind == 's') se = nvtxRangeStartA(name);
        if (repeat) seed = 1;
        if (kind == 'x') {
            pthread_t th;
            cross_id = nvtxRangeStartA(name);
            if (pthread_create(&th, NULL, cross_step, NULL) != 0) {
                fprintf(stderr, "churn_app: pthread_create failed\n");
                return 1;
            }
            pthread_join(th, NULL);
            if (cross_rc) return 1;
        } else if (step_buffers() != 0) {
            return 1;
        }
        if (work && kind != 'x') nanosleep(&(struct timespec){0, 2000000}, NULL);
        if (kind == 'n' || kind == 'e') nvtxRangePop();
        if (kind == 's') nvtxRangeEnd(se);
    }
    if (kind == 'e') nvtxRangeEnd(epoch);
    free(p);
    printf("churn_app: %ld steps of %d buffers\n", steps, k);
    return 0;
}
