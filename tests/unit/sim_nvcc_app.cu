// sim_nvcc_app.cu — an ordinary nvcc-built program (-cudart shared) for tests/unit/sim_nvcc.sh:
// it must load on the virtual GPU's runtime, run its host-side CUDA calls, and see its device
// kernel launch fail cleanly (the sim has no device code).
#include <cstdio>
#include <cuda_runtime.h>

__global__ void add1(int *x) { x[threadIdx.x] += 1; }

int main() {
  int *d = nullptr;
  cudaError_t e = cudaMalloc(&d, 64 * sizeof(int));
  printf("malloc %d\n", (int)e);
  e = cudaMemset(d, 7, 64 * sizeof(int));
  printf("memset %d\n", (int)e);
  add1<<<1, 64>>>(d);
  e = cudaGetLastError();
  printf("launch %d %s\n", (int)e, cudaGetErrorName(e));
  int h[64] = {0};
  e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  printf("copy %d %d\n", (int)e, h[5]);
  printf("free %d\n", (int)cudaFree(d));
  return 0;
}
