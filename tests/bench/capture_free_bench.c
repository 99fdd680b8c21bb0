/* capture_free_bench — what a cudaFree costs under gpumem while another thread captures a CUDA
 * graph (issue 37), against the same free with no capture underway, side by side in one run.
 *
 *   LD_PRELOAD=libgpumem.so capture_free_bench [FREES_PER_ROUND] [ROUNDS]
 *
 * Each round allocates FREES_PER_ROUND blocks of 64 KiB (untimed) and times their cudaFree one by
 * one: rounds alternate between no capture and a relaxed capture held open by a second thread
 * (its stream has captured work; it ends the capture after the round and the graph is
 * destroyed). The best round of each kind is reported (ns per free) and their ratio; without a
 * capture a free synchronizes the device (cudaFree's implied synchronization), during one it is
 * fenced instead (preload/README.md, "CUDA graphs"). Bar (issue 37): ratio <= 2.
 * Prints BENCH lines; exit status 1 when a capture did not survive its round. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_barrier_t bar;
static int quit;
static cudaError_t end_rc;

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void *capturer(void *arg)
{
    (void)arg;
    cudaStream_t s;
    void *d = NULL;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMalloc(&d, 4096);
    for (;;) {
        pthread_barrier_wait(&bar);
        if (quit) break;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
        cudaMemsetAsync(d, 1, 4096, s);
        pthread_barrier_wait(&bar); /* main frees */
        pthread_barrier_wait(&bar);
        cudaGraph_t g = NULL;
        end_rc = cudaStreamEndCapture(s, &g);
        if (g) cudaGraphDestroy(g);
        pthread_barrier_wait(&bar);
    }
    cudaFree(d);
    cudaStreamDestroy(s);
    return NULL;
}

static double round_ns(void **p, int n)
{
    for (int i = 0; i < n; i++)
        if (cudaMalloc(&p[i], 64 << 10) != cudaSuccess) return -1;
    double best = 0, t0 = now_ns();
    for (int i = 0; i < n; i++) cudaFree(p[i]);
    best = (now_ns() - t0) / n;
    return best;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000, rounds = argc > 2 ? atoi(argv[2]) : 7;
    if (n <= 0 || rounds <= 0) return 2;
    void **p = calloc((size_t)n, sizeof *p);
    if (!p) return 2;
    cudaStream_t side;
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking); /* a stream cudaFree must cover */
    pthread_barrier_init(&bar, NULL, 2);
    pthread_t t;
    pthread_create(&t, NULL, capturer, NULL);
    double best_plain = -1, best_cap = -1;
    int broken = 0;
    round_ns(p, n); /* warm-up: the allocator's pages exist */
    for (int r = 0; r < rounds; r++) {
        double a = round_ns(p, n);
        if (a > 0 && (best_plain < 0 || a < best_plain)) best_plain = a;
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar); /* the capture is underway */
        double b = round_ns(p, n);
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar); /* it ended */
        if (end_rc != cudaSuccess) broken++;
        if (b > 0 && (best_cap < 0 || b < best_cap)) best_cap = b;
    }
    quit = 1;
    pthread_barrier_wait(&bar);
    pthread_join(t, NULL);
    cudaStreamDestroy(side);
    free(p);
    if (best_plain <= 0 || best_cap <= 0) {
        fprintf(stderr, "capture_free_bench: allocation failed\n");
        return 2;
    }
    printf("BENCH alloc.free_ns_no_capture %.0f ns\n", best_plain);
    printf("BENCH alloc.free_ns_capture_active %.0f ns\n", best_cap);
    printf("BENCH alloc.free_capture_active_ratio %.2f x\n", best_cap / best_plain);
    if (broken) fprintf(stderr, "capture_free_bench: %d captures were invalidated\n", broken);
    return broken ? 1 : 0;
}
