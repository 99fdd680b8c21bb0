/* train/backend_sim.c — the CPU ops (ops.h) as host kernels of the virtual GPU.
 *
 * Each op is registered once with sim_register_kernel (name, parameter sizes) and every call
 * goes through cuLaunchKernel with a real kernelParams array (one pointer per parameter), on
 * the compute stream, exactly as a CUDA kernel launch would: a tool that intercepts kernel
 * launches sees the same calls and can read the arguments through cuFuncGetParamInfo. The
 * host-kernel wrappers (hk_*) unpack that array and call the plain C op.
 *
 * A dry run registers the same kernels (same names, same parameter layouts) with one body that
 * returns at once (hk_dry), and launches them exactly as a real run does: a tool that records
 * launches gets the complete use record of a memory-only run (GPT-2 124M ... xl on unbacked
 * virtual memory), with no compute and no tensor memory touched. */
#include "train/backend.h"
#include "train/ops.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#include <stddef.h>
#include <stdio.h>

#include <cuda.h>
#include "sim/sim.h"

enum {
    K_ENCODER_FWD, K_ENCODER_BWD, K_LAYERNORM_FWD, K_LAYERNORM_BWD, K_MATMUL_FWD, K_MATMUL_BWD,
    K_ATTENTION_FWD, K_ATTENTION_BWD, K_RESIDUAL_FWD, K_GELU_FWD, K_GELU_BWD, K_SOFTMAX_FWD,
    K_CROSSENTROPY_FWD, K_CROSSENTROPY_BWD, K_ADAMW, K_TO_BF16, K_FROM_BF16, K_COUNT
};

static CUfunction fns[K_COUNT];
static CUstream stream;
static unsigned long long nlaunches; /* cuLaunchKernel calls issued (the trainer's LAUNCHES) */

#define A(i, T) (*(T *)kp[i])
#define PTR sizeof(void *)
#define I32 sizeof(int)
#define F32 sizeof(float)
#define I64 sizeof(long)

static void hk_encoder_fwd(void **kp)
{
    train_cpu_encoder_fwd(A(0, float *), A(1, const int *), A(2, const float *),
                          A(3, const float *), A(4, int), A(5, int), A(6, int));
}
static void hk_encoder_bwd(void **kp)
{
    train_cpu_encoder_bwd(A(0, float *), A(1, float *), A(2, const float *), A(3, const int *),
                          A(4, int), A(5, int), A(6, int));
}
static void hk_layernorm_fwd(void **kp)
{
    train_cpu_layernorm_fwd(A(0, float *), A(1, float *), A(2, float *), A(3, const float *),
                            A(4, const float *), A(5, const float *), A(6, int), A(7, int));
}
static void hk_layernorm_bwd(void **kp)
{
    train_cpu_layernorm_bwd(A(0, float *), A(1, float *), A(2, float *), A(3, const float *),
                            A(4, const float *), A(5, const float *), A(6, const float *),
                            A(7, const float *), A(8, int), A(9, int));
}
static void hk_matmul_fwd(void **kp)
{
    train_cpu_matmul_fwd(A(0, float *), A(1, const float *), A(2, const float *),
                         A(3, const float *), A(4, int), A(5, int), A(6, int));
}
static void hk_matmul_bwd(void **kp)
{
    train_cpu_matmul_bwd(A(0, float *), A(1, float *), A(2, float *), A(3, const float *),
                         A(4, const float *), A(5, const float *), A(6, int), A(7, int),
                         A(8, int));
}
static void hk_attention_fwd(void **kp)
{
    train_cpu_attention_fwd(A(0, float *), A(1, float *), A(2, float *), A(3, const float *),
                            A(4, int), A(5, int), A(6, int), A(7, int));
}
static void hk_attention_bwd(void **kp)
{
    train_cpu_attention_bwd(A(0, float *), A(1, float *), A(2, const float *),
                            A(3, const float *), A(4, const float *), A(5, int), A(6, int),
                            A(7, int), A(8, int));
}
static void hk_residual_fwd(void **kp)
{
    train_cpu_residual_fwd(A(0, float *), A(1, const float *), A(2, const float *), A(3, long));
}
static void hk_gelu_fwd(void **kp)
{
    train_cpu_gelu_fwd(A(0, float *), A(1, const float *), A(2, long));
}
static void hk_gelu_bwd(void **kp)
{
    train_cpu_gelu_bwd(A(0, float *), A(1, const float *), A(2, const float *), A(3, long));
}
static void hk_softmax_fwd(void **kp)
{
    train_cpu_softmax_fwd(A(0, float *), A(1, const float *), A(2, int), A(3, int), A(4, int));
}
static void hk_crossentropy_fwd(void **kp)
{
    train_cpu_crossentropy_fwd(A(0, float *), A(1, const float *), A(2, const int *), A(3, int),
                               A(4, int));
}
static void hk_crossentropy_bwd(void **kp)
{
    train_cpu_crossentropy_bwd(A(0, float *), A(1, const float *), A(2, const int *), A(3, int),
                               A(4, int), A(5, int), A(6, float));
}
static void hk_adamw(void **kp)
{
    train_cpu_adamw(A(0, float *), A(1, const float *), A(2, float *), A(3, float *), A(4, long),
                    A(5, float), A(6, float), A(7, float), A(8, float), A(9, float), A(10, int));
}
static void hk_to_bf16(void **kp)
{
    train_cpu_to_bf16(A(0, uint16_t *), A(1, const float *), A(2, long));
}
static void hk_from_bf16(void **kp)
{
    train_cpu_from_bf16(A(0, float *), A(1, const uint16_t *), A(2, long));
}
/* Every kernel's body in a dry run: the launch happens, the computation does not. */
static void hk_dry(void **kp)
{
    (void)kp;
}

static const struct kdef {
    const char *name;
    sim_host_kernel_fn fn;
    unsigned n;
    size_t sizes[11];
} kdefs[K_COUNT] = {
    [K_ENCODER_FWD] = {"train_encoder_fwd", hk_encoder_fwd, 7, {PTR, PTR, PTR, PTR, I32, I32, I32}},
    [K_ENCODER_BWD] = {"train_encoder_bwd", hk_encoder_bwd, 7, {PTR, PTR, PTR, PTR, I32, I32, I32}},
    [K_LAYERNORM_FWD] = {"train_layernorm_fwd", hk_layernorm_fwd, 8,
                         {PTR, PTR, PTR, PTR, PTR, PTR, I32, I32}},
    [K_LAYERNORM_BWD] = {"train_layernorm_bwd", hk_layernorm_bwd, 10,
                         {PTR, PTR, PTR, PTR, PTR, PTR, PTR, PTR, I32, I32}},
    [K_MATMUL_FWD] = {"train_matmul_fwd", hk_matmul_fwd, 7, {PTR, PTR, PTR, PTR, I32, I32, I32}},
    [K_MATMUL_BWD] = {"train_matmul_bwd", hk_matmul_bwd, 9,
                      {PTR, PTR, PTR, PTR, PTR, PTR, I32, I32, I32}},
    [K_ATTENTION_FWD] = {"train_attention_fwd", hk_attention_fwd, 8,
                         {PTR, PTR, PTR, PTR, I32, I32, I32, I32}},
    [K_ATTENTION_BWD] = {"train_attention_bwd", hk_attention_bwd, 9,
                         {PTR, PTR, PTR, PTR, PTR, I32, I32, I32, I32}},
    [K_RESIDUAL_FWD] = {"train_residual_fwd", hk_residual_fwd, 4, {PTR, PTR, PTR, I64}},
    [K_GELU_FWD] = {"train_gelu_fwd", hk_gelu_fwd, 3, {PTR, PTR, I64}},
    [K_GELU_BWD] = {"train_gelu_bwd", hk_gelu_bwd, 4, {PTR, PTR, PTR, I64}},
    [K_SOFTMAX_FWD] = {"train_softmax_fwd", hk_softmax_fwd, 5, {PTR, PTR, I32, I32, I32}},
    [K_CROSSENTROPY_FWD] = {"train_crossentropy_fwd", hk_crossentropy_fwd, 5,
                            {PTR, PTR, PTR, I32, I32}},
    [K_CROSSENTROPY_BWD] = {"train_crossentropy_bwd", hk_crossentropy_bwd, 7,
                            {PTR, PTR, PTR, I32, I32, I32, F32}},
    [K_ADAMW] = {"train_adamw", hk_adamw, 11,
                 {PTR, PTR, PTR, PTR, I64, F32, F32, F32, F32, F32, I32}},
    [K_TO_BF16] = {"train_to_bf16", hk_to_bf16, 3, {PTR, PTR, I64}},
    [K_FROM_BF16] = {"train_from_bf16", hk_from_bf16, 3, {PTR, PTR, I64}},
};

static int launch(int k, void **params)
{
    nlaunches++;
    return (int)cuLaunchKernel(fns[k], 1, 1, 1, 1, 1, 1, 0, stream, params, NULL);
}

static int sim_init(void *s, int threads, int dry_run)
{
    stream = (CUstream)s;
#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads(threads);
#else
    (void)threads; /* a SAN=thread build: the ops run on one thread (train/module.mk) */
#endif
    for (int k = 0; k < K_COUNT; k++) {
        CUresult r = sim_register_kernel(kdefs[k].name, dry_run ? hk_dry : kdefs[k].fn, kdefs[k].n,
                                         kdefs[k].sizes, &fns[k]);
        if (r != CUDA_SUCCESS) return (int)r;
    }
    return 0;
}

static unsigned long long sim_kernel_launches(void)
{
    return nlaunches;
}

static const char *sim_error_string(int err)
{
    const char *name = NULL, *str = NULL;
    cuGetErrorName((CUresult)err, &name);
    cuGetErrorString((CUresult)err, &str);
    static __thread char buf[160];
    snprintf(buf, sizeof buf, "%s (%s)", name ? name : "CUDA_ERROR_UNKNOWN", str ? str : "?");
    return buf;
}

static int b_encoder_fwd(float *out, const int *tok, const float *wte, const float *wpe, int B,
                         int T, int C)
{
    void *p[] = {&out, &tok, &wte, &wpe, &B, &T, &C};
    return launch(K_ENCODER_FWD, p);
}
static int b_encoder_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int B,
                         int T, int C)
{
    void *p[] = {&dwte, &dwpe, &dout, &tok, &B, &T, &C};
    return launch(K_ENCODER_BWD, p);
}
static int b_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C)
{
    void *p[] = {&out, &mean, &rstd, &inp, &w, &b, &N, &C};
    return launch(K_LAYERNORM_FWD, p);
}
static int b_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C)
{
    void *p[] = {&dinp, &dw, &db, &dout, &inp, &w, &mean, &rstd, &N, &C};
    return launch(K_LAYERNORM_BWD, p);
}
static int b_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int N,
                        int C, int OC)
{
    void *p[] = {&out, &inp, &w, &bias, &N, &C, &OC};
    return launch(K_MATMUL_FWD, p);
}
static int b_matmul_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC)
{
    void *p[] = {&dinp, &dw, &db, &dout, &inp, &w, &N, &C, &OC};
    return launch(K_MATMUL_BWD, p);
}
static int b_attention_fwd(float *out, float *lse, float *scratch, const float *qkv, int B,
                           int T, int C, int NH)
{
    void *p[] = {&out, &lse, &scratch, &qkv, &B, &T, &C, &NH};
    return launch(K_ATTENTION_FWD, p);
}
static int b_attention_bwd(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *lse, int B, int T, int C, int NH)
{
    void *p[] = {&dqkv, &scratch, &dout, &qkv, &lse, &B, &T, &C, &NH};
    return launch(K_ATTENTION_BWD, p);
}
static int b_residual_fwd(float *out, const float *a, const float *b, long n)
{
    void *p[] = {&out, &a, &b, &n};
    return launch(K_RESIDUAL_FWD, p);
}
static int b_gelu_fwd(float *out, const float *inp, long n)
{
    void *p[] = {&out, &inp, &n};
    return launch(K_GELU_FWD, p);
}
static int b_gelu_bwd(float *dinp, const float *inp, const float *dout, long n)
{
    void *p[] = {&dinp, &inp, &dout, &n};
    return launch(K_GELU_BWD, p);
}
static int b_softmax_fwd(float *probs, const float *logits, int N, int V, int Vp)
{
    void *p[] = {&probs, &logits, &N, &V, &Vp};
    return launch(K_SOFTMAX_FWD, p);
}
static int b_crossentropy_fwd(float *losses, const float *probs, const int *targets, int N,
                              int Vp)
{
    void *p[] = {&losses, &probs, &targets, &N, &Vp};
    return launch(K_CROSSENTROPY_FWD, p);
}
static int b_crossentropy_bwd(float *dlogits, const float *probs, const int *targets, int N,
                              int V, int Vp, float dloss)
{
    void *p[] = {&dlogits, &probs, &targets, &N, &V, &Vp, &dloss};
    return launch(K_CROSSENTROPY_BWD, p);
}
static int b_adamw(float *pp, const float *g, float *m, float *v, long n, float lr, float beta1,
                   float beta2, float eps, float wd, int t)
{
    void *p[] = {&pp, &g, &m, &v, &n, &lr, &beta1, &beta2, &eps, &wd, &t};
    return launch(K_ADAMW, p);
}
static int b_to_bf16(uint16_t *dst, const float *src, long n)
{
    void *p[] = {&dst, &src, &n};
    return launch(K_TO_BF16, p);
}
static int b_from_bf16(float *dst, const uint16_t *src, long n)
{
    void *p[] = {&dst, &src, &n};
    return launch(K_FROM_BF16, p);
}

static const train_backend sim_backend = {
    .name = "cpu-sim",
    .uses_openmp = 1,
    .dry_launch = 1,
    .host_memory = 1,
    .init = sim_init,
    .fini = NULL,
    .error_string = sim_error_string,
    .kernel_launches = sim_kernel_launches,
    .encoder_fwd = b_encoder_fwd,
    .encoder_bwd = b_encoder_bwd,
    .layernorm_fwd = b_layernorm_fwd,
    .layernorm_bwd = b_layernorm_bwd,
    .matmul_fwd = b_matmul_fwd,
    .matmul_bwd = b_matmul_bwd,
    .attention_fwd = b_attention_fwd,
    .attention_bwd = b_attention_bwd,
    .residual_fwd = b_residual_fwd,
    .gelu_fwd = b_gelu_fwd,
    .gelu_bwd = b_gelu_bwd,
    .softmax_fwd = b_softmax_fwd,
    .crossentropy_fwd = b_crossentropy_fwd,
    .crossentropy_bwd = b_crossentropy_bwd,
    .adamw = b_adamw,
    .to_bf16 = b_to_bf16,
    .from_bf16 = b_from_bf16,
};

const train_backend *train_backend_get(void) { return &sim_backend; }
