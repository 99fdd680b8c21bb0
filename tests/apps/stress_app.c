/*
 * stress_app — 8 threads allocating and freeing concurrently (cudaMalloc/cudaFree on the
 * legacy stream, cudaMallocAsync/cudaFreeAsync on per-thread streams, and frees handed to
 * another thread). Every allocation is filled with its own tag and checked before it is
 * freed: two threads handed overlapping memory would see each other's tag.
 *
 * stress_app oom     the same under a limit (GPUMEM_CONF=...,limit:...): an allocation that fails
 *                    with cudaErrorMemoryAllocation is counted, not a failure, while the other
 *                    threads go on freeing. Prints "stress_app: ok (... N OOMs)".
 *
 * stress_app fraction  as oom, thread 0 only setting the limit, as long as the others run
 *                    (at most 20,000 times), through gpumem_torch_memory_fraction (PyTorch's
 *                    set_per_process_memory_fraction): 0.2% and 0.12% of the device in turn.
 *
 * stress_app trace   TRACE_THREADS threads (a second device's first entry among them) each
 *                    allocate and hand PyTorch-style trace entries to gpumem
 *                    (gpumem_torch_trace_entry, as preload/torch_trace.cpp does: allocations the
 *                    whole way, with a stack; the other actions through the one-exchange lock;
 *                    actions not kept between them), then gpumem_torch_trace_copy: every entry
 *                    kept once, each thread's in the order it made them, each entry's seq between
 *                    gpumem_torch_trace_seq before and after its call. Needs a recording
 *                    (GPUMEM_DB). Prints "stress_app: ok (trace: N entries ...)".
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
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
static int oom_ok;              /* stress_app oom: an allocation may fail for want of memory */
static _Atomic int ooms;        /* how many did */
typedef void (*fraction_fn)(double, int);
static fraction_fn set_fraction; /* stress_app fraction: gpumem_torch_memory_fraction */
static _Atomic int working;      /* threads still allocating */

/* stress_app fraction's thread 0: the limit moves while the others allocate */
static void set_fractions(void)
{
    for (int i = 0; i < 20000 && working > 1; i++)
        set_fraction(i % 2 ? 0.0012 : 0.002, 0);
}

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
    if (set_fraction && id == 0) {
        set_fractions();
        working--;
        cudaStreamDestroy(s);
        return NULL;
    }
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
            if (e == cudaErrorMemoryAllocation && oom_ok) {
                cudaGetLastError(); /* the OOM is expected: not sticky for the next call */
                ooms++;
                slot[k] = NULL;
                continue;
            }
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
    working--;
    return NULL;
}

/* ---- trace entries from several threads ------------------------------------------------------ */

#define TRACE_THREADS 4
#define TRACE_N 3000 /* each: the ring grows from 4096 slots twice meanwhile */
typedef void (*trace_entry_fn)(int, int, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);
typedef size_t (*trace_copy_fn)(void *, size_t, uint64_t *);
typedef uint64_t (*trace_seq_fn)(void);
static trace_entry_fn trace_entry;
static trace_seq_fn trace_seq;
static uint64_t trace_after[TRACE_THREADS][TRACE_N]; /* gpumem_torch_trace_seq after each call */

/* the i-th entry's action: allocations (0) and OOMs (8) take the lock the whole way, the others
 * (1-6) in one exchange */
static int trace_action(int i)
{
    static const int cycle[8] = {0, 1, 2, 3, 4, 5, 6, 8};
    return cycle[i % 8];
}

/* the thread's i-th entry: addr (thread + 1) << 40 | i, stream the thread, size the seq before;
 * the last thread's second half on device 1 */
static void *trace_work(void *arg)
{
    int t = (int)(long)arg;
    for (int i = 0; i < TRACE_N; i++) {
        void *p = NULL;
        if (i % 32 == 0) { /* events recorded: the seq moves on */
            if (cudaMalloc(&p, 512 + (size_t)i) != cudaSuccess || cudaFree(p) != cudaSuccess)
                fail("trace: alloc");
        }
        if (i % 16 == 0)
            trace_entry(7, 0, 1, 1, 1, 1, 1); /* a snapshot mark: not kept, not counted */
        int dev = t == TRACE_THREADS - 1 && i >= TRACE_N / 2;
        uint64_t before = trace_seq();
        trace_entry(trace_action(i), dev, (uint64_t)(t + 1) << 40 | (uint64_t)i, before, (uint64_t)t, 0, 0);
        trace_after[t][i] = trace_seq();
    }
    return NULL;
}

static int trace(void)
{
    trace_entry = (trace_entry_fn)dlsym(RTLD_DEFAULT, "gpumem_torch_trace_entry");
    trace_copy_fn copy = (trace_copy_fn)dlsym(RTLD_DEFAULT, "gpumem_torch_trace_copy");
    trace_seq = (trace_seq_fn)dlsym(RTLD_DEFAULT, "gpumem_torch_trace_seq");
    if (!trace_entry || !copy || !trace_seq) {
        printf("stress_app: trace: gpumem_torch_trace_entry/_copy/_seq not found (run under gpumem)\n");
        return 1;
    }
    pthread_t th[TRACE_THREADS];
    for (long i = 0; i < TRACE_THREADS; i++)
        pthread_create(&th[i], NULL, trace_work, (void *)i);
    for (int i = 0; i < TRACE_THREADS; i++)
        pthread_join(th[i], NULL);
    uint64_t seen = 0;
    size_t bytes = copy(NULL, 0, &seen), n = bytes / 72; /* tt_entry: 72 bytes */
    unsigned char *ents = malloc(bytes ? bytes : 1);
    if (!ents)
        return 1;
    copy(ents, bytes, &seen);
    if (seen != TRACE_THREADS * TRACE_N || n != TRACE_THREADS * TRACE_N)
        fail("trace: entries seen or kept are not the ones made");
    int next[TRACE_THREADS] = {0}, moved = 0;
    uint64_t last_seq[TRACE_THREADS] = {0};
    for (size_t k = 0; k < n && !failures; k++) {
        uint64_t w[5]; /* addr, size, seq, t_ns, stream */
        int32_t action, device;
        memcpy(w, ents + k * 72, sizeof w);
        memcpy(&action, ents + k * 72 + 56, 4);
        memcpy(&device, ents + k * 72 + 60, 4);
        uint64_t t = (w[0] >> 40) - 1, i = w[0] & ((1ull << 40) - 1);
        char what[200];
        if (t >= TRACE_THREADS || w[4] != t) {
            snprintf(what, sizeof what, "trace: entry %zu is no thread's (addr %#llx stream %llu)", k,
                     (unsigned long long)w[0], (unsigned long long)w[4]);
            fail(what);
        } else if (i != (uint64_t)next[t]) {
            snprintf(what, sizeof what, "trace: entry %zu is thread %llu's %llu-th, %d-th expected (lost, twice "
                     "or out of order)", k, (unsigned long long)t, (unsigned long long)i, next[t]);
            fail(what);
        } else if (action != trace_action((int)i) || device != (t == TRACE_THREADS - 1 && i >= TRACE_N / 2)) {
            snprintf(what, sizeof what, "trace: entry %zu (thread %llu's %llu-th) has action %d device %d", k,
                     (unsigned long long)t, (unsigned long long)i, action, device);
            fail(what);
        } else if (w[2] < w[1] || w[2] > trace_after[t][i] || w[2] < last_seq[t]) {
            snprintf(what, sizeof what, "trace: entry %zu (thread %llu's %llu-th) has seq %llu, not within "
                     "[%llu, %llu] and from %llu on", k, (unsigned long long)t, (unsigned long long)i,
                     (unsigned long long)w[2], (unsigned long long)w[1], (unsigned long long)trace_after[t][i],
                     (unsigned long long)last_seq[t]);
            fail(what);
        } else {
            next[t]++;
            moved += w[2] != last_seq[t];
            last_seq[t] = w[2];
        }
    }
    free(ents);
    if (!moved)
        fail("trace: no entry's seq moved (no recording? set GPUMEM_DB)");
    printf("stress_app: %s (trace: %zu entries from %d threads, seq moved %d times)\n", failures ? "FAILED" : "ok",
           n, TRACE_THREADS, moved);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "trace"))
        return trace();
    int frac = argc > 1 && !strcmp(argv[1], "fraction");
    oom_ok = frac || (argc > 1 && !strcmp(argv[1], "oom"));
    if (argc > 1 && !oom_ok) {
        fprintf(stderr, "usage: stress_app [trace|oom|fraction]\n");
        return 2;
    }
    if (frac && !(set_fraction = (fraction_fn)dlsym(RTLD_DEFAULT, "gpumem_torch_memory_fraction"))) {
        printf("stress_app: fraction: gpumem_torch_memory_fraction not found (run under gpumem)\n");
        return 1;
    }
    pthread_t t[NTHREADS];
    working = NTHREADS;
    for (long i = 0; i < NTHREADS; i++)
        pthread_create(&t[i], NULL, work, (void *)i);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < nhandoff; i++)
        cudaFree(handoff[i].p);
    if (oom_ok)
        printf("stress_app: %s (%d threads x %d ops, %d OOMs)\n", failures ? "FAILED" : "ok",
               NTHREADS, OPS, (int)ooms);
    else
        printf("stress_app: %s (%d threads x %d ops)\n", failures ? "FAILED" : "ok", NTHREADS, OPS);
    return failures ? 1 : 0;
}
