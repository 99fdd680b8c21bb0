/* frag_app — an OOM caused by fragmentation, for `gpumem frag` and the report's OOM forensics.
 *
 * Under PyTorch's classic policy (GPUMEM_CONF=preset:pytorch) a 4 MiB request gets a block of a
 * 20 MiB segment. Fifteen of them fill three segments; freeing every other one leaves 36 MiB
 * free in 4 MiB pieces that segments never merge. Under a 64 MiB limit an 8 MiB request then
 * fits no free block and no new segment: an OOM with more than enough memory free in
 * fragments. Prints the calls' results, so a test can check the program saw the OOM. */
#include <cuda_runtime_api.h>
#include <stdio.h>

#define N 15

int main(void) {
    void *p[N] = {0};
    for (int i = 0; i < N; i++) {
        cudaError_t e = cudaMalloc(&p[i], (size_t)4 << 20);
        if (e != cudaSuccess) {
            printf("alloc %d failed: %d\n", i, (int)e);
            return 1;
        }
    }
    for (int i = 0; i < N; i += 2) cudaFree(p[i]);
    void *big = NULL;
    cudaError_t e = cudaMalloc(&big, (size_t)8 << 20);
    printf("8 MiB after freeing every other 4 MiB block: %s\n", e == cudaSuccess ? "ok" : "out of memory");
    if (e == cudaSuccess) cudaFree(big);
    for (int i = 1; i < N; i += 2) cudaFree(p[i]);
    return 0;
}
