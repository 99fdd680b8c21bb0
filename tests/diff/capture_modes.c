/* Issue 37, capture-mode rules: during a stream capture CUDA prohibits "potentially unsafe" calls
 * (cudaMalloc, cudaFree, cudaMallocHost, cudaMallocPitch, ...) as cudaStreamCaptureMode says
 * (cuda_runtime_api.h, cudaThreadExchangeStreamCaptureMode): a thread whose interaction mode is
 * relaxed is never prohibited; otherwise it is when it has a capture of its own not begun
 * relaxed, or, its mode being global, when another thread has a global-mode capture. A
 * prohibited call returns cudaErrorStreamCaptureUnsupported (900), invalidates the capture
 * (cudaStreamEndCapture: 901) and changes nothing: a prohibited cudaFree leaves the memory
 * allocated. Captures run on a second thread, driven step by step (barriers), so the output is
 * deterministic. */
#include <pthread.h>

#include "tests/diff/diff.h"

static pthread_barrier_t bar;
static cudaStream_t ts;                 /* the capturing thread's stream */
static enum cudaStreamCaptureMode tmode; /* the mode it begins its next capture in */
static cudaError_t t_begin, t_end;
static int t_quit;

/* The other thread: begin a capture, let main act, end it. */
static void *capturer(void *arg)
{
    (void)arg;
    cudaStreamCreateWithFlags(&ts, cudaStreamNonBlocking);
    for (;;) {
        pthread_barrier_wait(&bar); /* 1: a mode was chosen */
        if (t_quit) break;
        t_begin = cudaStreamBeginCapture(ts, tmode);
        pthread_barrier_wait(&bar); /* 2: main acts */
        pthread_barrier_wait(&bar); /* 3: main is done */
        cudaGraph_t g = NULL;
        t_end = cudaStreamEndCapture(ts, &g);
        if (g) cudaGraphDestroy(g);
        pthread_barrier_wait(&bar); /* 4: main reads the result */
    }
    cudaStreamDestroy(ts);
    return NULL;
}

static void other_begins(enum cudaStreamCaptureMode m)
{
    tmode = m;
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    printf(" [other thread's capture, mode %d: begin %d]\n", (int)m, (int)t_begin);
}

static void other_ends(void)
{
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(ts, &st);
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    printf(" [capture status before its end %d, end %d %s]\n", (int)st, (int)t_end,
           cudaGetErrorName(t_end));
}

static const char *out(void *p, void *before)
{
    return p == NULL ? "NULL" : p == before ? "untouched" : "set";
}

/* The calls, each while the other thread captures in mode m. */
static void unsafe_calls(enum cudaStreamCaptureMode m)
{
    void *sentinel = (void *)(uintptr_t)0x1234, *p;
    size_t pitch = 0;

    other_begins(m);
    p = sentinel;
    rt_state("cudaMalloc", cudaMalloc(&p, 4096));
    printf("  out: %s\n", out(p, sentinel));
    void *keep = p != sentinel ? p : NULL;
    other_ends();
    if (keep) cudaFree(keep);

    other_begins(m);
    p = sentinel;
    rt_state("cudaMallocHost", cudaMallocHost(&p, 4096));
    printf("  out: %s\n", out(p, sentinel));
    keep = p != sentinel ? p : NULL;
    other_ends();
    if (keep) cudaFreeHost(keep);

    other_begins(m);
    p = sentinel;
    rt_state("cudaMallocPitch", cudaMallocPitch(&p, &pitch, 100, 4));
    printf("  out: %s\n", out(p, sentinel));
    keep = p != sentinel ? p : NULL;
    other_ends();
    if (keep) cudaFree(keep);

    DRV(dalloc, cuMemAlloc_v2);
    DRV(dfree, cuMemFree_v2);
    other_begins(m);
    CUdeviceptr d = 0x1234;
    cu("cuMemAlloc_v2", dalloc(&d, 4096));
    printf("  out: %s\n", d == 0 ? "0" : d == 0x1234 ? "untouched" : "set");
    other_ends();
    if (d && d != 0x1234) dfree(d);

    /* frees: the memory stays allocated when the free is refused */
    void *live = NULL;
    cudaMalloc(&live, 4096);
    other_begins(m);
    rt_state("cudaFree", cudaFree(live));
    other_ends();
    rt_state("memset of it afterwards", cudaMemset(live, 1, 4096));
    rt_state("cudaFree afterwards", cudaFree(live));

    /* a pointer the driver does not know: is the capture checked first? (gpumem hands a
     * refused free of its own memory to the driver, which must answer as for this one) */
    char local[16];
    other_begins(m);
    rt_state("cudaFree of an unknown pointer", cudaFree(local));
    other_ends();

    CUdeviceptr dl = 0;
    dalloc(&dl, 4096);
    other_begins(m);
    cu("cuMemFree_v2", dfree(dl));
    other_ends();
    rt_state("memset of it afterwards", cudaMemset((void *)dl, 1, 4096));
    cu("cuMemFree_v2 afterwards", dfree(dl));

    /* a stream-ordered allocation on a stream not captured is prohibited too (900 on an H200,
     * the capture invalidated), and so is freeing NULL there */
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    other_begins(m);
    p = NULL;
    rt_state("cudaMallocAsync on an uncaptured stream", cudaMallocAsync(&p, 4096, s));
    rt_state("cudaFreeAsync on an uncaptured stream", cudaFreeAsync(p, s));
    other_ends();
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
}

/* The calling thread's own capture. */
static void own_capture(enum cudaStreamCaptureMode m)
{
    printf("-- own capture in mode %d\n", (int)m);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    void *pre = NULL, *p = NULL;
    cudaMalloc(&pre, 4096);
    rt("begin", cudaStreamBeginCapture(s, m));
    rt_state("cudaMalloc", cudaMalloc(&p, 4096));
    printf("  out: %s\n", p ? "set" : "NULL");
    rt_state("cudaFree", cudaFree(pre));
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    rt("exchange to relaxed", cudaThreadExchangeStreamCaptureMode(&mode));
    printf("  previous mode %d\n", (int)mode);
    void *q = NULL;
    rt_state("cudaMalloc in relaxed mode", cudaMalloc(&q, 4096));
    rt_state("cudaFree in relaxed mode", cudaFree(q));
    rt("exchange back", cudaThreadExchangeStreamCaptureMode(&mode));
    printf("  previous mode %d\n", (int)mode);
    cudaGraph_t g = NULL;
    rt("end", cudaStreamEndCapture(s, &g));
    if (g) cudaGraphDestroy(g);
    /* what was refused is still allocated */
    rt_state("memset of the first allocation", cudaMemset(pre, 0, 4096));
    cudaGetLastError();
    cudaFree(pre); /* refused above, or a double free: the state is printed above */
    cudaGetLastError();
    if (p) cudaFree(p);
    cudaStreamDestroy(s);
}

int main(void)
{
    cudaFree(NULL);
    pthread_barrier_init(&bar, NULL, 2);
    pthread_t t;
    pthread_create(&t, NULL, capturer, NULL);

    printf("-- another thread captures in global mode; this thread's mode is global\n");
    unsafe_calls(cudaStreamCaptureModeGlobal);
    printf("-- another thread captures in thread-local mode\n");
    unsafe_calls(cudaStreamCaptureModeThreadLocal);
    printf("-- another thread captures in relaxed mode\n");
    unsafe_calls(cudaStreamCaptureModeRelaxed);
    printf("-- another thread captures in global mode; this thread's mode is thread-local\n");
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
    rt("exchange", cudaThreadExchangeStreamCaptureMode(&mode));
    unsafe_calls(cudaStreamCaptureModeGlobal);
    rt("exchange back", cudaThreadExchangeStreamCaptureMode(&mode));

    t_quit = 1;
    pthread_barrier_wait(&bar);
    pthread_join(t, NULL);

    own_capture(cudaStreamCaptureModeGlobal);
    own_capture(cudaStreamCaptureModeThreadLocal);
    own_capture(cudaStreamCaptureModeRelaxed);
    return 0;
}
