/* train/backend.h — the one op interface the model calls, with two implementations:
 *   backend_sim.c  : the CPU ops of ops.h registered as host kernels on the virtual GPU
 *                    (sim_register_kernel) and launched with cuLaunchKernel and a real
 *                    kernelParams array, in order on the compute stream;
 *   backend_cuda.cu: CUDA kernels, cuBLAS for the matrix products.
 * Every op takes device pointers and enqueues its work on the compute stream given to init;
 * it returns 0 or a CUDA error code (cudaError_t for the runtime, CUresult for launches),
 * which the model reports through train_backend.error_string. The contracts on each op
 * (overwrite or accumulate, shapes) are those of train/ops.h. */
#ifndef TRAIN_BACKEND_H
#define TRAIN_BACKEND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct train_backend {
    const char *name; /* "cpu-sim" or "cuda" */
    int uses_openmp;  /* the ops run on OpenMP threads (main.c sets their wait policy) */
    /* 1: in a --dry-run the ops are still launched, with their real arguments, and only the
     * kernel bodies are skipped (a launch-capturing tool records every use of every tensor);
     * 0: a dry run calls no op and init is not called (the CUDA build: cuBLAS calls cannot
     * have their bodies skipped, and its dry run must also run on the virtual GPU). */
    int dry_launch;
    /* stream: the compute stream (a cudaStream_t); dry_run: launch with the bodies skipped
     * (only called with dry_run = 1 when dry_launch is 1). Returns 0 or an error code. */
    int (*init)(void *stream, int threads, int dry_run);
    void (*fini)(void);
    const char *(*error_string)(int err);
    /* Kernel launches issued so far (every cuLaunchKernel / <<<>>> / cuBLAS call). */
    unsigned long long (*kernel_launches)(void);
    int (*encoder_fwd)(float *out, const int *tok, const float *wte, const float *wpe, int B,
                       int T, int C);
    int (*encoder_bwd)(float *dwte, float *dwpe, const float *dout, const int *tok, int B, int T,
                       int C);
    int (*layernorm_fwd)(float *out, float *mean, float *rstd, const float *inp, const float *w,
                         const float *b, int N, int C);
    int (*layernorm_bwd)(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                         const float *w, const float *mean, const float *rstd, int N, int C);
    int (*matmul_fwd)(float *out, const float *inp, const float *w, const float *bias, int N,
                      int C, int OC);
    int (*matmul_bwd)(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                      const float *w, int N, int C, int OC);
    int (*attention_fwd)(float *out, float *lse, float *scratch, const float *qkv, int B, int T,
                         int C, int NH);
    int (*attention_bwd)(float *dqkv, float *scratch, const float *dout, const float *qkv,
                         const float *lse, int B, int T, int C, int NH);
    int (*residual_fwd)(float *out, const float *a, const float *b, long n);
    int (*gelu_fwd)(float *out, const float *inp, long n);
    int (*gelu_bwd)(float *dinp, const float *inp, const float *dout, long n);
    int (*softmax_fwd)(float *probs, const float *logits, int N, int V, int Vp);
    int (*crossentropy_fwd)(float *losses, const float *probs, const int *targets, int N,
                            int Vp);
    int (*crossentropy_bwd)(float *dlogits, const float *probs, const int *targets, int N, int V,
                            int Vp, float dloss);
    int (*adamw)(float *p, const float *g, float *m, float *v, long n, float lr, float beta1,
                 float beta2, float eps, float wd, int t);
    int (*to_bf16)(uint16_t *dst, const float *src, long n);
    int (*from_bf16)(float *dst, const uint16_t *src, long n);
    /* 1: device pointers are host memory (the virtual GPU), so MPI may read and write them
     * after a stream synchronization (train/dist.c); 0 (the CUDA build): they are not. */
    int host_memory;
} train_backend;

/* The implementation linked into this binary. */
const train_backend *train_backend_get(void);

#ifdef __cplusplus
}
#endif
#endif
