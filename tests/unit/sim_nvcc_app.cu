// sim_nvcc_app.cu — an ordinary nvcc-built program (-cudart shared) for tests/unit/sim_nvcc.sh:
// it must load on the virtual GPU's runtime and run its host-side CUDA calls. Its device kernel
// has no host body: by default the launch is skipped and counted (memory keeps what it held),
// under GPUMEM_SIM_KERNELS=strict it fails with cudaErrorInvalidDeviceFunction.
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
  cudaFuncAttributes a = {};
  e = cudaFuncGetAttributes(&a, add1);
  printf("attrs %d %d %d\n", (int)e, a.maxThreadsPerBlock, a.numRegs);
  int n = -1;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, add1, 64, 0);
  printf("occupancy %d %d\n", (int)e, n);
  e = cudaFuncSetAttribute(add1, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536);
  printf("setattr %d\n", (int)e);
  add1<<<2, 64, 65536>>>(d);
  e = cudaGetLastError();
  printf("launch_shmem %d\n", (int)e);
  (void)cudaGetLastError();
  int h[64] = {0};
  e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  printf("copy %d %d\n", (int)e, h[5]);
  printf("free %d\n", (int)cudaFree(d));
  return 0;
}
