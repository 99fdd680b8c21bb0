/*
 * stress_app — 8 threads allocating and freeing concurrently (cudaMalloc/cudaFree on the
 * legacy stream, cudaMallocAsync/cudaFreeAsync on per-thread streams, and frees handed to
 * another thread). Every allocation is filled with its own tag and checked before it is
 * freed: two threads handed overlapping memory would see each other's tag.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 8
#define OPS 300
#define SLOTS 12

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    unsigned char tag;
} handoff[NTHREADS * 4];
static int nhandoff;
static int failures;

static int verify(void *p, unsigned char tag)
{
    unsigned char b[256];
    if (cudaMemcpy(b, p, sizeof b, cudaMemcpyDeviceToHost) != cudaSuccess)
        return 0;
    for (size_t i = 0; i < sizeof b; i++)
        if (b[i] != tag)
            return 0;
    return 1;
}

static void fail(const char *what)
{
    pthread_mutex_lock(&q_lock);
    failures++;
    if (failures < 10)
        printf("stress_app: %s\n", what);
    pthread_mutex_unlock(&q_lock);
}

static void *work(void *arg)
{
    unsigned id = (unsigned)(long)arg;
    unsigned seed = 12345u + id * 7919u;
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess) {
        fail("stream create");
        return NULL;
    }
    void *slot[SLOTS] = {0};
    unsigned char tags[SLOTS] = {0};
    int async[SLOTS] = {0};
    for (int op = 0; op < OPS; op++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 8) % SLOTS);
        if (slot[k]) {
            if (!verify(slot[k], tags[k]))
                fail("tag mismatch: memory shared between live allocations");
            int give = ((seed >> 20) % 8) == 0;
            pthread_mutex_lock(&q_lock);
            if (give && nhandoff < NTHREADS * 4) {
                handoff[nhandoff].p = slot[k];
                handoff[nhandoff].tag = tags[k];
                nhandoff++;
                slot[k] = NULL;
            }
            pthread_mutex_unlock(&q_lock);
            if (slot[k]) {
                cudaError_t e = async[k] ? cudaFreeAsync(slot[k], s) : cudaFree(slot[k]);
                if (e != cudaSuccess)
                    fail("free");
                slot[k] = NULL;
            }
        } else {
            size_t n = 256 + (size_t)((seed >> 4) % (3u << 20));
            async[k] = (seed >> 28) & 1;
            cudaError_t e = async[k] ? cudaMallocAsync(&slot[k], n, s) : cudaMalloc(&slot[k], n);
            if (e != cudaSuccess) {
                fail("alloc");
                slot[k] = NULL;
                continue;
            }
            tags[k] = (unsigned char)(id * 31 + (unsigned)op);
            if (cudaMemsetAsync(slot[k], tags[k], n, s) != cudaSuccess ||
                cudaStreamSynchronize(s) != cudaSuccess)
                fail("memset");
        }
        /* free someone else's allocation now and then */
        pthread_mutex_lock(&q_lock);
        void *other = NULL;
        unsigned char otag = 0;
        if (nhandoff && ((seed >> 12) % 4) == 0) {
            nhandoff--;
            other = handoff[nhandoff].p;
            otag = handoff[nhandoff].tag;
        }
        pthread_mutex_unlock(&q_lock);
        if (other) {
            if (!verify(other, otag))
                fail("handed-off tag mismatch");
            if (cudaFree(other) != cudaSuccess)
                fail("free handed-off");
        }
    }
    for (int k = 0; k < SLOTS; k++)
        if (slot[k] && cudaFree(slot[k]) != cudaSuccess)
            fail("final free");
    cudaStreamDestroy(s);
    return NULL;
}

int main(void)
{
    pthread_t t[NTHREADS];
    for (long i = 0; i < NTHREADS; i++)
        pthread_create(&t[i], NULL, work, (void *)i);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < nhandoff; i++)
        cudaFree(handoff[i].p);
    printf("stress_app: %s (%d threads x %d ops)\n", failures ? "FAILED" : "ok", NTHREADS, OPS);
    return failures ? 1 : 0;
}
