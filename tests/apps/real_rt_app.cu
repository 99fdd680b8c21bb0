// real_rt_app — built with nvcc -cudart shared against the real libcudart.so.13. Without a GPU
// the runtime cannot initialise, so cudaMalloc fails; under LD_PRELOAD=libgpumem.so the call
// must reach gpumem's cudaMalloc (counted in GPUMEM_STATS) and come back with the same error
// code, without a crash. On a machine with a GPU it allocates, checks the memory, and frees.
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, 1 << 20);
    printf("real_rt_app: cudaMalloc = %d (%s)\n", (int)e, cudaGetErrorName(e));
    if (e == cudaSuccess) {
        char in[256], out[256];
        memset(in, 7, sizeof in);
        cudaMemcpy(p, in, sizeof in, cudaMemcpyHostToDevice);
        cudaMemcpy(out, p, sizeof out, cudaMemcpyDeviceToHost);
        printf("real_rt_app: memory %s\n", memcmp(in, out, sizeof in) ? "bad" : "ok");
        e = cudaFree(p);
        printf("real_rt_app: cudaFree = %d\n", (int)e);
    }
    printf("real_rt_app: done\n");
    return 0;
}
