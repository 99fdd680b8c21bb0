/* train/backend_cuda.cu — the CUDA implementation of train/backend.h.
 *
 * Matrix products go to cuBLAS (fp32 SGEMM, default math mode: no TF32, so results can be
 * checked against the CPU ops); attention uses strided-batched SGEMM per batch row for the
 * score and value products (heads are the batch: consecutive heads are hs floats apart in the
 * qkv layout) and simple row kernels for the causal softmax and its backward. Everything else
 * is one small kernel per op. Reductions that produce weight gradients run one thread per
 * output channel over the rows in order (no atomics), so the CUDA build is deterministic too.
 *
 * Row-major llm.c tensors are handed to column-major cuBLAS as their transposes: a row-major
 * R x K matrix is a column-major K x R matrix with leading dimension K. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "train/backend.h"

static cudaStream_t g_stream;
static cublasHandle_t g_blas;
/* Kernel launches issued (the trainer's LAUNCHES line): one per <<<>>> and one per cuBLAS
 * GEMM call (cuBLAS may launch more than one kernel for a call, e.g. a split-K reduction;
 * a tool that intercepts the driver then sees more than this count). */
static unsigned long long g_kernels;
#define BLAS_ERR_BASE 100000

/* A kernel launch on the compute stream, counted. */
#define LAUNCH(kernel, grid, block, shmem, ...)                                                 \
    (g_kernels++, kernel<<<(grid), (block), (shmem), g_stream>>>(__VA_ARGS__))

static int last_launch(void) { return (int)cudaGetLastError(); }
static int blas(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? 0 : BLAS_ERR_BASE + (int)s; }
/* A cuBLAS GEMM (already issued when this runs: its status is the argument), counted. */
static int gemm(cublasStatus_t s)
{
    g_kernels++;
    return blas(s);
}
static unsigned blocks(long n, int t) { return (unsigned)((n + t - 1) / t); }

static int cu_init(void *stream, int threads, int dry_run)
{
    (void)threads, (void)dry_run; /* never called for a dry run: dry_launch is 0 */
    g_stream = (cudaStream_t)stream;
    int e = blas(cublasCreate(&g_blas));
    if (e) return e;
    e = blas(cublasSetStream(g_blas, g_stream));
    if (e) return e;
    return blas(cublasSetMathMode(g_blas, CUBLAS_DEFAULT_MATH));
}
static unsigned long long cu_kernel_launches(void) { return g_kernels; }
static void cu_fini(void)
{
    if (g_blas) cublasDestroy(g_blas);
    g_blas = NULL;
}
static const char *cu_error_string(int err)
{
    static char buf[96];
    if (err >= BLAS_ERR_BASE) {
        snprintf(buf, sizeof buf, "cuBLAS %s",
                 cublasGetStatusName((cublasStatus_t)(err - BLAS_ERR_BASE)));
        return buf;
    }
    snprintf(buf, sizeof buf, "%s (%s)", cudaGetErrorName((cudaError_t)err),
             cudaGetErrorString((cudaError_t)err));
    return buf;
}

/* ---- kernels ------------------------------------------------------------------------------ */
__device__ static float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ static float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Sum / max over a block of 256 threads (all threads get the result). */
__device__ static float block_sum(float v, float *sh)
{
    v = warp_sum(v);
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < (int)(blockDim.x / 32) ? sh[l] : 0.0f;
    return warp_sum(v);
}
__device__ static float block_max(float v, float *sh)
{
    v = warp_max(v);
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < (int)(blockDim.x / 32) ? sh[l] : -INFINITY;
    return warp_max(v);
}

__global__ static void k_encoder_fwd(float *out, const int *tok, const float *wte,
                                     const float *wpe, int B, int T, int C)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)B * T * C) return;
    const long bt = i / C;
    const int c = (int)(i % C), t = (int)(bt % T);
    out[i] = wte[(long)tok[bt] * C + c] + wpe[(long)t * C + c];
}
__global__ static void k_encoder_bwd(float *dwte, float *dwpe, const float *dout, const int *tok,
                                     int B, int T, int C)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (long bt = 0; bt < (long)B * T; bt++) {
        const float d = dout[bt * C + c];
        dwte[(long)tok[bt] * C + c] += d;
        dwpe[(bt % T) * C + c] += d;
    }
}
/* one warp per row */
__global__ static void k_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                                       const float *w, const float *b, int N, int C)
{
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (long)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    const float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
    const float r = rsqrtf(warp_sum(v) / C + 1e-5f);
    float *o = out + (long)row * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + b[c];
    if (lane == 0) mean[row] = m, rstd[row] = r;
}
__global__ static void k_layernorm_bwd_inp(float *dinp, const float *dout, const float *inp,
                                           const float *w, const float *mean, const float *rstd,
                                           int N, int C)
{
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (long)row * C, *dy = dout + (long)row * C;
    const float m = mean[row], r = rstd[row];
    float a = 0.0f, bsum = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float dn = w[c] * dy[c];
        a += dn;
        bsum += dn * (x[c] - m) * r;
    }
    a = warp_sum(a) / C;
    bsum = warp_sum(bsum) / C;
    float *dx = dinp + (long)row * C;
    for (int c = lane; c < C; c += 32) dx[c] += (w[c] * dy[c] - a - (x[c] - m) * r * bsum) * r;
}
__global__ static void k_layernorm_bwd_w(float *dw, float *db, const float *dout, const float *inp,
                                         const float *mean, const float *rstd, int N, int C)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int i = 0; i < N; i++) {
        const float dy = dout[(long)i * C + c];
        sw += (inp[(long)i * C + c] - mean[i]) * rstd[i] * dy;
        sb += dy;
    }
    dw[c] += sw;
    db[c] += sb;
}
__global__ static void k_add_bias(float *out, const float *bias, long n, int OC)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += bias[i % OC];
}
__global__ static void k_bias_grad(float *db, const float *dout, int N, int OC)
{
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float s = 0.0f;
    for (int n = 0; n < N; n++) s += dout[(long)n * OC + o];
    db[o] += s;
}
/* one block per score row (b, h, t): causal softmax of the scaled scores, lse saved */
__global__ static void k_attn_softmax(float *S, float *lse, int T, float scale)
{
    __shared__ float sh[32];
    const long row = blockIdx.x;
    const int t = (int)(row % T);
    float *s = S + row * T;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j <= t; j += blockDim.x) mx = fmaxf(mx, s[j] * scale);
    mx = block_max(mx, sh);
    float sum = 0.0f;
    for (int j = threadIdx.x; j <= t; j += blockDim.x) sum += expf(s[j] * scale - mx);
    sum = block_sum(sum, sh);
    const float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < T; j += blockDim.x)
        s[j] = j <= t ? expf(s[j] * scale - mx) * inv : 0.0f;
    if (threadIdx.x == 0) lse[row] = mx + logf(sum);
}
/* P rebuilt from the scores and lse, in place */
__global__ static void k_attn_probs(float *S, const float *lse, int T, float scale)
{
    const long row = blockIdx.x;
    const int t = (int)(row % T);
    const float l = lse[row];
    float *s = S + row * T;
    for (int j = threadIdx.x; j < T; j += blockDim.x) s[j] = j <= t ? expf(s[j] * scale - l) : 0.0f;
}
/* dS = P * (dP - sum_j P dP), dP_j = dO_t . V_j; in place over P. One block per row. */
__global__ static void k_attn_dscores(float *P, const float *dout, const float *qkv, int T, int C,
                                      int NH)
{
    extern __shared__ float dp[];
    __shared__ float sh[32];
    const long row = blockIdx.x;
    const int t = (int)(row % T), h = (int)((row / T) % NH), b = (int)(row / ((long)T * NH));
    const int hs = C / NH;
    const float *dy = dout + ((long)b * T + t) * C + h * hs;
    float *p = P + row * T;
    float D = 0.0f;
    for (int j = threadIdx.x; j <= t; j += blockDim.x) {
        const float *v = qkv + ((long)b * T + j) * 3 * C + 2 * C + h * hs;
        float d = 0.0f;
        for (int i = 0; i < hs; i++) d += dy[i] * v[i];
        dp[j] = d;
        D += p[j] * d;
    }
    D = block_sum(D, sh);
    for (int j = threadIdx.x; j <= t; j += blockDim.x) p[j] = p[j] * (dp[j] - D);
}
__global__ static void k_residual(float *out, const float *a, const float *b, long n)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
#define GELU_K 0.7978845608028654f
__global__ static void k_gelu_fwd(float *out, const float *inp, long n)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
}
__global__ static void k_gelu_bwd(float *dinp, const float *inp, const float *dout, long n)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = inp[i];
    const float th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    const float g = 0.5f * (1.0f + th) +
                    0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = g * dout[i];
}
__global__ static void k_softmax(float *probs, const float *logits, int V, int Vp)
{
    __shared__ float sh[32];
    const long row = blockIdx.x;
    const float *z = logits + row * Vp;
    float *p = probs + row * Vp;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
    mx = block_max(mx, sh);
    float sum = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(z[v] - mx);
    sum = block_sum(sum, sh);
    const float inv = 1.0f / sum;
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) p[v] = v < V ? expf(z[v] - mx) * inv : 0.0f;
}
__global__ static void k_ce_fwd(float *losses, const float *probs, const int *targets, int N, int Vp)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) losses[i] = -logf(probs[(long)i * Vp + targets[i]]);
}
__global__ static void k_ce_bwd(float *dlogits, const float *probs, const int *targets, long n,
                                int V, int Vp, float dloss)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const long row = i / Vp;
    const int v = (int)(i % Vp);
    dlogits[i] = v < V ? (probs[i] - (v == targets[row] ? 1.0f : 0.0f)) * dloss : 0.0f;
}
__global__ static void k_adamw(float *p, const float *g, float *m, float *v, long n, float lr,
                               float b1, float b2, float eps, float wd, float c1, float c2)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float gi = g[i];
    const float mi = b1 * m[i] + (1.0f - b1) * gi, vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
}
__global__ static void k_to_bf16(uint16_t *dst, const float *src, long n)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t u = __float_as_uint(src[i]);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) {
        dst[i] = (uint16_t)((u >> 16) | 0x40);
        return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    dst[i] = (uint16_t)(u >> 16);
}
__global__ static void k_from_bf16(float *dst, const uint16_t *src, long n)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __uint_as_float((uint32_t)src[i] << 16);
}

/* ---- ops ---------------------------------------------------------------------------------- */
static int b_encoder_fwd(float *out, const int *tok, const float *wte, const float *wpe, int B,
                         int T, int C)
{
    LAUNCH(k_encoder_fwd, blocks((long)B * T * C, 256), 256, 0, out, tok, wte, wpe, B, T, C);
    return last_launch();
}
static int b_encoder_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int B,
                         int T, int C)
{
    LAUNCH(k_encoder_bwd, blocks(C, 128), 128, 0, dwte, dwpe, dout, tok, B, T, C);
    return last_launch();
}
static int b_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C)
{
    LAUNCH(k_layernorm_fwd, blocks(N, 8), 256, 0, out, mean, rstd, inp, w, b, N, C);
    return last_launch();
}
static int b_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C)
{
    LAUNCH(k_layernorm_bwd_inp, blocks(N, 8), 256, 0, dinp, dout, inp, w, mean, rstd, N, C);
    LAUNCH(k_layernorm_bwd_w, blocks(C, 128), 128, 0, dw, db, dout, inp, mean, rstd, N, C);
    return last_launch();
}
static int b_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int N,
                        int C, int OC)
{
    const float one = 1.0f, zero = 0.0f;
    int e = gemm(cublasSgemm(g_blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, w, C, inp, C,
                             &zero, out, OC));
    if (e || !bias) return e;
    LAUNCH(k_add_bias, blocks((long)N * OC, 256), 256, 0, out, bias, (long)N * OC, OC);
    return last_launch();
}
static int b_matmul_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC)
{
    const float one = 1.0f, zero = 0.0f;
    int e = gemm(cublasSgemm(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, w, C, dout, OC,
                             &zero, dinp, C));
    if (!e)
        e = gemm(cublasSgemm(g_blas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout, OC,
                             &one, dw, C));
    if (e || !db) return e;
    LAUNCH(k_bias_grad, blocks(OC, 128), 128, 0, db, dout, N, OC);
    return last_launch();
}
/* scores S (col-major T x T per head, = row-major S[t][j]) = K^T-view x Q-view, per batch row */
static int scores(float *S, const float *qkv, int b, int T, int C, int NH)
{
    const int hs = C / NH;
    const float one = 1.0f, zero = 0.0f;
    const float *q = qkv + (long)b * T * 3 * C, *k = q + C;
    return gemm(cublasSgemmStridedBatched(g_blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &one, k,
                                          3 * C, hs, q, 3 * C, hs, &zero,
                                          S + (long)b * NH * T * T, T, (long long)T * T, NH));
}
static int b_attention_fwd(float *out, float *lse, float *scratch, const float *qkv, int B,
                           int T, int C, int NH)
{
    const int hs = C / NH;
    const float one = 1.0f, zero = 0.0f, scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        int e = scores(scratch, qkv, b, T, C, NH);
        if (e) return e;
    }
    LAUNCH(k_attn_softmax, (unsigned)((long)B * NH * T), 256, 0, scratch, lse, T, scale);
    int e = last_launch();
    for (int b = 0; b < B && !e; b++) {
        const float *v = qkv + (long)b * T * 3 * C + 2 * C;
        e = gemm(cublasSgemmStridedBatched(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &one, v,
                                           3 * C, hs, scratch + (long)b * NH * T * T, T,
                                           (long long)T * T, &zero, out + (long)b * T * C, C, hs,
                                           NH));
    }
    return e;
}
static int b_attention_bwd(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *lse, int B, int T, int C, int NH)
{
    const int hs = C / NH;
    const float one = 1.0f, zero = 0.0f, scale = 1.0f / sqrtf((float)hs);
    int e = 0;
    for (int b = 0; b < B && !e; b++) e = scores(scratch, qkv, b, T, C, NH);
    if (e) return e;
    LAUNCH(k_attn_probs, (unsigned)((long)B * NH * T), 256, 0, scratch, lse, T, scale);
    if ((e = last_launch())) return e;
    for (int b = 0; b < B && !e; b++) { /* dV = P^T dO */
        e = gemm(cublasSgemmStridedBatched(g_blas, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, &one,
                                           dout + (long)b * T * C, C, hs,
                                           scratch + (long)b * NH * T * T, T, (long long)T * T,
                                           &zero, dqkv + (long)b * T * 3 * C + 2 * C, 3 * C, hs,
                                           NH));
    }
    if (e) return e;
    LAUNCH(k_attn_dscores, (unsigned)((long)B * NH * T), 256, sizeof(float) * T, scratch, dout,
           qkv, T, C, NH);
    if ((e = last_launch())) return e;
    for (int b = 0; b < B && !e; b++) {
        const float *q = qkv + (long)b * T * 3 * C, *k = q + C;
        float *dq = dqkv + (long)b * T * 3 * C, *dk = dq + C;
        const float *dS = scratch + (long)b * NH * T * T;
        e = gemm(cublasSgemmStridedBatched(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &scale, k,
                                           3 * C, hs, dS, T, (long long)T * T, &zero, dq, 3 * C,
                                           hs, NH));
        if (!e)
            e = gemm(cublasSgemmStridedBatched(g_blas, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, &scale,
                                               q, 3 * C, hs, dS, T, (long long)T * T, &zero, dk,
                                               3 * C, hs, NH));
    }
    return e;
}
static int b_residual_fwd(float *out, const float *a, const float *b, long n)
{
    LAUNCH(k_residual, blocks(n, 256), 256, 0, out, a, b, n);
    return last_launch();
}
static int b_gelu_fwd(float *out, const float *inp, long n)
{
    LAUNCH(k_gelu_fwd, blocks(n, 256), 256, 0, out, inp, n);
    return last_launch();
}
static int b_gelu_bwd(float *dinp, const float *inp, const float *dout, long n)
{
    LAUNCH(k_gelu_bwd, blocks(n, 256), 256, 0, dinp, inp, dout, n);
    return last_launch();
}
static int b_softmax_fwd(float *probs, const float *logits, int N, int V, int Vp)
{
    LAUNCH(k_softmax, (unsigned)N, 256, 0, probs, logits, V, Vp);
    return last_launch();
}
static int b_crossentropy_fwd(float *losses, const float *probs, const int *targets, int N,
                              int Vp)
{
    LAUNCH(k_ce_fwd, blocks(N, 256), 256, 0, losses, probs, targets, N, Vp);
    return last_launch();
}
static int b_crossentropy_bwd(float *dlogits, const float *probs, const int *targets, int N,
                              int V, int Vp, float dloss)
{
    const long n = (long)N * Vp;
    LAUNCH(k_ce_bwd, blocks(n, 256), 256, 0, dlogits, probs, targets, n, V, Vp, dloss);
    return last_launch();
}
static int b_adamw(float *p, const float *g, float *m, float *v, long n, float lr, float b1,
                   float b2, float eps, float wd, int t)
{
    const float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    LAUNCH(k_adamw, blocks(n, 256), 256, 0, p, g, m, v, n, lr, b1, b2, eps, wd, c1, c2);
    return last_launch();
}
static int b_to_bf16(uint16_t *dst, const float *src, long n)
{
    LAUNCH(k_to_bf16, blocks(n, 256), 256, 0, dst, src, n);
    return last_launch();
}
static int b_from_bf16(float *dst, const uint16_t *src, long n)
{
    LAUNCH(k_from_bf16, blocks(n, 256), 256, 0, dst, src, n);
    return last_launch();
}

/* Positional: C++17 has no designated initializers; the order is train_backend's. */
static const train_backend cuda_backend = {
    "cuda",          0 /* uses_openmp */, 0 /* dry_launch */, cu_init,  cu_fini,
    cu_error_string, cu_kernel_launches, b_encoder_fwd,     b_encoder_bwd,     b_layernorm_fwd,
    b_layernorm_bwd, b_matmul_fwd,       b_matmul_bwd,      b_attention_fwd,   b_attention_bwd,
    b_residual_fwd,  b_gelu_fwd,         b_gelu_bwd,        b_softmax_fwd,     b_crossentropy_fwd,
    b_crossentropy_bwd, b_adamw,         b_to_bf16,         b_from_bf16,
};

extern "C" const train_backend *train_backend_get(void) { return &cuda_backend; }
