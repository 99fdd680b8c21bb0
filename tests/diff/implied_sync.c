/* Finding 5: the synchronizations cudaFree and cudaFreeHost imply. Work is left pending on a
 * stream (the virtual GPU completes an event only after N queries); a cudaFree / cudaFreeHost /
 * cuMemFree then completes it, as a real one synchronizes the device. A program reading
 * managed or zero-copy results right after a free relies on this. */
#include "tests/diff/diff.h"

int main(void)
{
    cudaFree(NULL); /* the runtime loads the driver, which has the sim's own calls */
    void (*delay)(unsigned) = (void (*)(unsigned))dlsym(RTLD_DEFAULT, "sim_set_event_delay");
    if (!delay) {
        printf("not the virtual GPU\n");
        return 0;
    }
    DRV(dfree, cuMemFree_v2);
    DRV(dalloc, cuMemAlloc_v2);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEvent_t ev;
    cudaEventCreate(&ev);
    void *a, *h, *h2, *m;
    cudaMalloc(&a, 1 << 20);
    cudaMallocHost(&h, 1 << 20);
    cudaMallocManaged(&m, 4096, cudaMemAttachGlobal);
    delay(1000);
    /* cudaFree */
    cudaMemsetAsync(m, 7, 4096, s);
    cudaEventRecord(ev, s);
    rt("event before cudaFree", cudaEventQuery(ev));
    rt("cudaFree", cudaFree(a));
    rt("event after cudaFree", cudaEventQuery(ev));
    /* cudaFreeHost, then the same size again: an async copy may still read the old buffer */
    cudaEventRecord(ev, s);
    rt("cudaFreeHost", cudaFreeHost(h));
    rt("event after cudaFreeHost", cudaEventQuery(ev));
    rt("cudaMallocHost again", cudaMallocHost(&h2, 1 << 20));
    /* cuMemFree */
    CUdeviceptr d;
    dalloc(&d, 4096);
    cudaEventRecord(ev, s);
    cu("cuMemFree_v2", dfree(d));
    rt("event after cuMemFree", cudaEventQuery(ev));
    /* cudaFreeAsync implies nothing */
    cudaMalloc(&a, 4096);
    cudaEventRecord(ev, s);
    rt("cudaFreeAsync", cudaFreeAsync(a, s));
    rt("event after cudaFreeAsync", cudaEventQuery(ev));
    delay(0);
    cudaDeviceSynchronize();
    cudaFreeHost(h2);
    cudaFree(m);
    cudaEventDestroy(ev);
    cudaStreamDestroy(s);
    return 0;
}
