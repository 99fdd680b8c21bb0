/* Finding 7: cudaDeviceReset. Everything freed before the reset, then memory info, new
 * allocations that work (written and read back) and answer pointer queries; the runtime's error
 * state across the reset; an allocation live across a reset (see expected-differences.txt). */
#include "tests/diff/diff.h"

int main(void)
{
    cudaFree(NULL);
    mem_baseline();
    void *a, *b, *c;
    cudaMalloc(&a, 3 << 20);
    cudaMalloc(&b, 1000);
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaMallocAsync(&c, 5000, s);
    mem_used("before the reset");
    cudaFree(a);
    cudaFree(b);
    cudaFreeAsync(c, s);
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    cudaMalloc(&a, (size_t)1 << 40); /* an error left behind */
    rt_state("cudaDeviceReset", cudaDeviceReset());
    mem_used("after the reset");
    for (int i = 0; i < 2; i++) {
        rt_state("cudaMalloc(1 MiB)", cudaMalloc(&a, 1 << 20));
        mem_used("with 1 MiB live");
        unsigned char buf[256], back[256];
        for (int k = 0; k < 256; k++)
            buf[k] = (unsigned char)(k * 7 + i);
        rt("cudaMemcpy HtoD", cudaMemcpy(a, buf, sizeof buf, cudaMemcpyHostToDevice));
        rt("cudaMemcpy DtoH", cudaMemcpy(back, a, sizeof back, cudaMemcpyDeviceToHost));
        printf("  round trip: %s\n", memcmp(buf, back, sizeof buf) ? "differs" : "same");
        struct cudaPointerAttributes at;
        rt("cudaPointerGetAttributes", cudaPointerGetAttributes(&at, a));
        printf("  type %d\n", (int)at.type);
        rt("cudaFree", cudaFree(a));
        mem_used("after cudaFree");
        rt_state("cudaDeviceReset again", cudaDeviceReset());
    }
    /* an allocation live across the reset: a real reset destroys it */
    mem_baseline();
    rt_state("cudaMalloc(2 MiB) kept across a reset", cudaMalloc(&a, 2 << 20));
    mem_used("before the reset, 2 MiB live");
    rt_state("cudaDeviceReset with 2 MiB live", cudaDeviceReset());
    mem_used("after the reset, 2 MiB were live");
    rt_state("cudaMalloc(1000) after it", cudaMalloc(&b, 1000));
    rt_state("cudaFree", cudaFree(b));
    return 0;
}
