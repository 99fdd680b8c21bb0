// sim_nvcc_app.cu — an ordinary nvcc-built program (-cudart shared) for tests/unit/sim_nvcc.sh:
// it must load on the virtual GPU's runtime and run its host-side CUDA calls. Its device kernel
// has no host body: by default the launch is skipped and counted (memory keeps what it held),
// under GPUMEM_SIM_KERNELS=strict it fails with cudaErrorInvalidDeviceFunction.
#include <cstdio>
#include <cuda.h>
#include <cuda_runtime.h>

__global__ void add1(int *x) { x[threadIdx.x] += 1; }

// A signature whose layout is known from the C++ rules (natural alignment): int at 0, a pointer
// at 8, a 16-byte struct (char, float[3]; aligned 4) at 16, a short at 32, a pointer at 40. The
// virtual GPU reads it from this program's fat binary, as the driver's cuFuncGetParamInfo does.
struct S {
  char c;
  float f[3];
};
__global__ void layout(int a, double *p, S s, short t, const float *q) {
  if (a) p[0] = s.f[1] + t + q[0];
}
// Parameters past 16 KiB (allowed since CUDA 12.1; PyTorch's multi-tensor kernels pass ~24 KiB):
// nvcc describes them with another record form, which the virtual GPU reads too.
struct Big {
  const int *p[2560];
};
__global__ void big(Big b, float x) {
  if (x > 0) {
    volatile int v = *b.p[threadIdx.x];
    (void)v;
  }
}
typedef CUresult (*param_info_fn)(CUfunction, size_t, size_t *, size_t *);

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
  // the parameter layout, through the driver entry point a runtime program can reach
  param_info_fn info = nullptr;
  cudaDriverEntryPointQueryResult q;
  cudaFunction_t fn = nullptr;
  if (cudaGetDriverEntryPointByVersion("cuFuncGetParamInfo", (void **)&info, 12040, cudaEnableDefault, &q) == cudaSuccess && info &&
      cudaGetFuncBySymbol(&fn, (const void *)layout) == cudaSuccess) {
    for (size_t i = 0; i < 6; i++) {
      size_t off = 0, size = 0;
      CUresult r = info((CUfunction)fn, i, &off, &size);
      if (r == CUDA_SUCCESS) printf("param %zu %zu %zu\n", i, off, size);
      else printf("param %zu error %d\n", i, (int)r);
    }
    if (cudaGetFuncBySymbol(&fn, (const void *)big) == cudaSuccess)
      for (size_t i = 0; i < 3; i++) {
        size_t off = 0, size = 0;
        CUresult r = info((CUfunction)fn, i, &off, &size);
        if (r == CUDA_SUCCESS) printf("big %zu %zu %zu\n", i, off, size);
        else printf("big %zu error %d\n", i, (int)r);
      }
  } else {
    printf("param none\n");
  }
  int h[64] = {0};
  e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  printf("copy %d %d\n", (int)e, h[5]);
  printf("free %d\n", (int)cudaFree(d));
  return 0;
}
