/* Issue 37, frees during another thread's capture: cudaFree, cuMemFree and cudaFreeHost imply a
 * synchronization, yet in relaxed and thread-local mode they are allowed while another thread
 * captures, and the real ones do not end that capture. Under gpumem the free must not either
 * (a device synchronization would invalidate it: 901 at its end). The graph captured meanwhile
 * instantiates and replays; the freed memory goes back to the program only as the graph allows.
 *
 * What a real cudaFree also does, completing the work issued before it on the other streams, is
 * printed ("event after ...") and listed in expected-differences.txt: gpumem does not
 * synchronize the device while a capture is underway (preload/README.md). */
#include <pthread.h>

#include "tests/diff/diff.h"

static pthread_barrier_t bar;
static cudaStream_t ts;
static enum cudaStreamCaptureMode tmode;
static cudaError_t t_begin, t_end, t_inst, t_launch;
static int t_quit;
static unsigned char *t_host; /* pinned: the graph copies into it */
static void *t_dev;

static void *capturer(void *arg)
{
    (void)arg;
    cudaStreamCreateWithFlags(&ts, cudaStreamNonBlocking);
    cudaMallocHost((void **)&t_host, 256);
    cudaMalloc(&t_dev, 256);
    for (;;) {
        pthread_barrier_wait(&bar);
        if (t_quit) break;
        t_begin = cudaStreamBeginCapture(ts, tmode);
        cudaMemsetAsync(t_dev, 0x5c, 256, ts);
        pthread_barrier_wait(&bar); /* main frees */
        pthread_barrier_wait(&bar);
        cudaMemcpyAsync(t_host, t_dev, 256, cudaMemcpyDeviceToHost, ts);
        cudaGraph_t g = NULL;
        cudaGraphExec_t x = NULL;
        t_end = cudaStreamEndCapture(ts, &g);
        t_inst = g ? cudaGraphInstantiate(&x, g, 0) : cudaErrorInvalidValue;
        memset(t_host, 0, 256);
        t_launch = x ? cudaGraphLaunch(x, ts) : cudaErrorInvalidValue;
        cudaStreamSynchronize(ts);
        if (x) cudaGraphExecDestroy(x);
        if (g) cudaGraphDestroy(g);
        pthread_barrier_wait(&bar);
    }
    cudaFreeHost(t_host);
    cudaFree(t_dev);
    cudaStreamDestroy(ts);
    return NULL;
}

int main(void)
{
    cudaFree(NULL);
    /* the virtual GPU's delayed completion (on a GPU the memset below is simply in flight) */
    void (*delay)(unsigned) = (void (*)(unsigned))dlsym(RTLD_DEFAULT, "sim_set_event_delay");
    pthread_barrier_init(&bar, NULL, 2);
    pthread_t t;
    pthread_create(&t, NULL, capturer, NULL);
    DRV(dalloc, cuMemAlloc_v2);
    DRV(dfree, cuMemFree_v2);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEvent_t ev;
    cudaEventCreate(&ev);
    enum cudaStreamCaptureMode modes[] = {cudaStreamCaptureModeRelaxed,
                                          cudaStreamCaptureModeThreadLocal};
    for (int k = 0; k < 2; k++) {
        printf("-- the other thread captures in mode %d\n", (int)modes[k]);
        /* the calling thread in relaxed mode too when the capture is global elsewhere: here its
         * mode stays global, which the two capture modes above allow */
        void *a = NULL, *h = NULL, *keep = NULL;
        CUdeviceptr d = 0;
        cudaMalloc(&a, 1 << 20);
        cudaMalloc(&keep, 1 << 20);
        cudaMemset(keep, 0x77, 1 << 20);
        cudaMallocHost(&h, 4096);
        dalloc(&d, 1 << 20);
        tmode = modes[k];
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar);
        printf("  begin %d\n", (int)t_begin);
        if (delay) delay(1000);
        cudaMemsetAsync(keep, 0x77, 1 << 20, s);
        cudaEventRecord(ev, s);
        rt_state("cudaFree", cudaFree(a));
        rt("event after cudaFree during another thread's capture", cudaEventQuery(ev));
        cudaGetLastError(); /* a query's cudaErrorNotReady is the last error either way */
        rt_state("cudaFreeHost", cudaFreeHost(h));
        cu("cuMemFree_v2", dfree(d));
        enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
        rt("is capturing", cudaStreamIsCapturing(ts, &st));
        printf("  status %d\n", (int)st);
        /* new allocations of the sizes just freed */
        void *a2 = NULL, *h2 = NULL;
        CUdeviceptr d2 = 0;
        rt("cudaMalloc", cudaMalloc(&a2, 1 << 20));
        rt("cudaMallocHost", cudaMallocHost(&h2, 4096));
        cu("cuMemAlloc_v2", dalloc(&d2, 1 << 20));
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar);
        printf("  end %d %s, instantiate %d, launch %d\n", (int)t_end, cudaGetErrorName(t_end),
               (int)t_inst, (int)t_launch);
        int ok = 1;
        for (int i = 0; i < 256; i++) ok &= t_host[i] == 0x5c;
        printf("  the graph ran: %s\n", ok ? "yes" : "no");
        if (delay) delay(0);
        cudaDeviceSynchronize();
        unsigned char b[16];
        cudaMemcpy(b, keep, sizeof b, cudaMemcpyDeviceToHost);
        printf("  untouched allocation: %s\n", b[0] == 0x77 && b[15] == 0x77 ? "intact" : "changed");
        cudaFree(a2);
        cudaFree(keep);
        cudaFreeHost(h2);
        dfree(d2);
    }
    t_quit = 1;
    pthread_barrier_wait(&bar);
    pthread_join(t, NULL);
    cudaEventDestroy(ev);
    cudaStreamDestroy(s);
    return 0;
}
