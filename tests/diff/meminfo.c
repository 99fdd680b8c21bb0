/* Finding 3: cudaMemGetInfo / cuMemGetInfo_v2 count memory freed and synchronized as free:
 * after cudaFree, after cudaFreeAsync + a stream sync, after eight frees, with work pending on
 * another stream when the frees were made (delayed event completion), and while a block is
 * freed in stream order but its stream has not finished. */
#include "tests/diff/diff.h"

static void drv_used(const char *when)
{
    static __typeof__(&cuMemGetInfo_v2) info;
    if (!info)
        info = (__typeof__(info))drv_proc("cuMemGetInfo");
    size_t f = 0, t = 0;
    CUresult r = info(&f, &t);
    printf("cuMemGetInfo %s: rc %d used %+lld B\n", when, (int)r,
           (long long)mem_base_free - (long long)f);
}

int main(void)
{
    cudaFree(NULL);
    mem_baseline();
    size_t t = 0, f = 0;
    cudaMemGetInfo(&f, &t);
    size_t dt = 0;
    DRV(total, cuDeviceTotalMem_v2);
    total(&dt, 0);
    printf("total is the device's: %s\n", t == dt ? "yes" : "no");
    void *p[8];
    for (int i = 0; i < 8; i++)
        cudaMalloc(&p[i], (size_t)(i + 1) << 20);
    mem_used("after 8 cudaMalloc (36 MiB)");
    for (int i = 0; i < 8; i++)
        cudaFree(p[i]);
    mem_used("after 8 cudaFree");
    drv_used("after 8 cudaFree");
    cudaStream_t s;
    cudaStreamCreate(&s);
    void *a;
    cudaMallocAsync(&a, (size_t)8 << 20, s);
    mem_used("after cudaMallocAsync(8 MiB)");
    cudaFreeAsync(a, s);
    cudaStreamSynchronize(s);
    mem_used("after cudaFreeAsync + cudaStreamSynchronize");
    cudaMallocAsync(&a, (size_t)8 << 20, s);
    cudaFreeAsync(a, s);
    cudaDeviceSynchronize();
    mem_used("after cudaFreeAsync + cudaDeviceSynchronize");
    /* work pending on a stream (the virtual GPU completes events only when asked N times) */
    void (*delay)(unsigned) = (void (*)(unsigned))dlsym(RTLD_DEFAULT, "sim_set_event_delay");
    if (delay)
        delay(3);
    cudaEvent_t ev;
    cudaEventCreate(&ev);
    cudaMalloc(&a, (size_t)4 << 20);
    cudaEventRecord(ev, s);
    cudaFree(a);
    printf("event after cudaFree: %d\n", (int)cudaEventQuery(ev));
    mem_used("after cudaFree with work pending");
    cudaDeviceSynchronize();
    mem_used("after cudaDeviceSynchronize");
    if (delay)
        delay(0);
    cudaEventDestroy(ev);
    cudaStreamDestroy(s);
    return 0;
}
