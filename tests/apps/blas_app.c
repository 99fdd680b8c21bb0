/*
 * blas_app — one GEMM through the virtual GPU's cuBLAS stand-in (linked as a program links the
 * real library): C = A B on three device buffers. Under gpumem's access tracking the GEMM's
 * launch uses A, B and C, as a real cuBLAS kernel's arguments carry them
 * (tests/integration/snapshot_uses_unread.sh).
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>

int main(void)
{
    enum { N = 64 };
    float *a = NULL, *b = NULL, *c = NULL;
    if (cudaMalloc((void **)&a, N * N * sizeof(float)) || cudaMalloc((void **)&b, N * N * sizeof(float)) ||
        cudaMalloc((void **)&c, N * N * sizeof(float)))
        return 1;
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 2;
    const float one = 1, zero = 0;
    cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a, N, b, N, &zero, c, N);
    printf("blas_app: sgemm %d\n", (int)st);
    cublasDestroy(h);
    cudaFree(a), cudaFree(b), cudaFree(c);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : 3;
}
