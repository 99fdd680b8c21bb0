/* train/ops_cpu.c — the CPU implementation of train/ops.h (C + OpenMP).
 *
 * Speed comes almost entirely from the matrix products, so they share one blocked kernel,
 * gemm(): the right-hand matrix is packed, one 16-column panel at a time, into a contiguous
 * K x 16 buffer (so the inner loop reads it sequentially and gcc vectorizes across the 16
 * columns), and a 6 x 16 block of outputs is kept in registers while k runs. No reduction is
 * vectorized across k, so no -ffast-math is needed and every output is summed in k order:
 * results do not depend on the thread count or the machine's vector width beyond FMA
 * contraction. On x86-64 the kernel is compiled twice (target_clones): a baseline clone and
 * an AVX2+FMA clone picked at load time, so the binary stays portable (no -march=native).
 *
 * Threads split work over disjoint outputs only (panels of columns, rows, channels), so each
 * output element is written by one thread in a fixed order: deterministic results. */
#include "train/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GEMM_MR 6
#define GEMM_NR 16

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define TRAIN_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define TRAIN_CLONES
#endif

static inline int imin(int a, int b) { return a < b ? a : b; }

/* Work below these sizes runs on the calling thread: a parallel region costs a fork and a
 * barrier, and on a loaded machine a barrier waits for a descheduled thread, which for the
 * tiny model costs far more than the work. Results do not depend on it (see the top). */
#ifndef PAR_FLOPS
#define PAR_FLOPS (1L << 20)
#endif
#ifndef PAR_ELEMS
#define PAR_ELEMS (1L << 15)
#endif

/* Eight floats as one GNU C vector: AVX2 registers in the x86-64-v3 clone, pairs of SSE
 * registers in the baseline one. acc += a * b below is a fused multiply-add where the target
 * has FMA (GNU C's default -ffp-contract=fast). */
typedef float v8f __attribute__((vector_size(32)));

/* One MR x NR block: c (rows mh, cols nw) (=|+=) sum_k a(r,k) * pack(k, j). The 6 x 2
 * accumulator vectors stay in registers for the whole k loop. */
static inline __attribute__((always_inline)) void gemm_block(float *c, long ldc, const float *a,
                                                             long sam, long sak,
                                                             const float *pack, int K, int mh,
                                                             int nw, int accumulate)
{
    v8f acc[GEMM_MR][2];
    const float *ar[GEMM_MR];
    for (int r = 0; r < GEMM_MR; r++) {
        /* Rows past the edge recompute the last row; their results are discarded. */
        ar[r] = a + (long)imin(r, mh - 1) * sam;
        acc[r][0] = (v8f){0};
        acc[r][1] = (v8f){0};
    }
    for (int k = 0; k < K; k++) {
        v8f b0, b1;
        memcpy(&b0, pack + (long)k * GEMM_NR, sizeof b0);
        memcpy(&b1, pack + (long)k * GEMM_NR + 8, sizeof b1);
#pragma GCC unroll 6
        for (int r = 0; r < GEMM_MR; r++) {
            const float av = ar[r][(long)k * sak];
            acc[r][0] += av * b0;
            acc[r][1] += av * b1;
        }
    }
    for (int r = 0; r < mh; r++) {
        float *cr = c + (long)r * ldc, tmp[GEMM_NR];
        memcpy(tmp, &acc[r][0], sizeof acc[r][0]);
        memcpy(tmp + 8, &acc[r][1], sizeof acc[r][1]);
        if (accumulate)
            for (int j = 0; j < nw; j++) cr[j] += tmp[j];
        else
            for (int j = 0; j < nw; j++) cr[j] = tmp[j];
    }
}

/* Packs B(k0 .. k0+kc, n0 .. n0+nw) into pack[k][16], zero columns past nw. */
static inline __attribute__((always_inline)) void gemm_pack(float *pack, const float *B, long sbk,
                                                            long sbn, int k0, int kc, int n0,
                                                            int nw)
{
    if (sbn == 1 && nw == GEMM_NR) { /* rows of B contiguous in n: two vector moves per k */
        for (int k = 0; k < kc; k++) {
            const float *br = B + (long)(k0 + k) * sbk + n0;
            v8f x0, x1;
            memcpy(&x0, br, sizeof x0);
            memcpy(&x1, br + 8, sizeof x1);
            memcpy(pack + (long)k * GEMM_NR, &x0, sizeof x0);
            memcpy(pack + (long)k * GEMM_NR + 8, &x1, sizeof x1);
        }
    } else if (sbk == 1) { /* columns of B contiguous in k: read along k */
        for (int j = 0; j < GEMM_NR; j++) {
            const float *bc = B + (long)(n0 + j) * sbn + k0;
            for (int k = 0; k < kc; k++) pack[(long)k * GEMM_NR + j] = j < nw ? bc[k] : 0.0f;
        }
    } else {
        for (int k = 0; k < kc; k++) {
            const float *br = B + (long)(k0 + k) * sbk + (long)n0 * sbn;
            for (int j = 0; j < GEMM_NR; j++)
                pack[(long)k * GEMM_NR + j] = j < nw ? br[(long)j * sbn] : 0.0f;
        }
    }
}

/* k is cut in blocks of GEMM_KC so the packed panel (16 KiB) stays in L1; each output still
 * sums its k blocks in order. */
#define GEMM_KC 256

/* Cm (M,N; row stride ldc) (=|+=) A x B with A(m,k) = A[m*sam + k*sak] and
 * B(k,n) = B[k*sbk + n*sbn]: the strides express the transposes the matmul ops need. */
TRAIN_CLONES
static void gemm(float *Cm, long ldc, const float *A, long sam, long sak, const float *B,
                 long sbk, long sbn, int M, int N, int K, int accumulate)
{
    const int npanels = (N + GEMM_NR - 1) / GEMM_NR;
#pragma omp parallel if ((long)M * N * K >= PAR_FLOPS)
    {
        float *pack = aligned_alloc(64, sizeof(float) * GEMM_KC * GEMM_NR);
#pragma omp for schedule(static)
        for (int p = 0; p < npanels; p++) {
            const int n0 = p * GEMM_NR, nw = imin(GEMM_NR, N - n0);
            for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
                const int kc = imin(GEMM_KC, K - k0);
                gemm_pack(pack, B, sbk, sbn, k0, kc, n0, nw);
                for (int m0 = 0; m0 < M; m0 += GEMM_MR)
                    gemm_block(Cm + (long)m0 * ldc + n0, ldc, A + (long)m0 * sam + (long)k0 * sak,
                               sam, sak, pack, kc, imin(GEMM_MR, M - m0), nw,
                               accumulate || k0 > 0);
            }
        }
        free(pack);
    }
}

void train_cpu_encoder_fwd(float *out, const int *tok, const float *wte, const float *wpe, int B,
                           int T, int C)
{
#pragma omp parallel for collapse(2) schedule(static) if ((long)B * T * C >= PAR_ELEMS)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((long)b * T + t) * C;
            const float *we = wte + (long)tok[b * T + t] * C, *wp = wpe + (long)t * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + wp[c];
        }
}

void train_cpu_encoder_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int B,
                           int T, int C)
{
    /* Threads own channel ranges, rows run in order: the same token in two rows sums in a
     * fixed order. */
#pragma omp parallel if ((long)B * T * C >= PAR_ELEMS)
    {
#pragma omp for schedule(static)
        for (int c = 0; c < C; c++)
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    const float d = dout[((long)b * T + t) * C + c];
                    dwte[(long)tok[b * T + t] * C + c] += d;
                    dwpe[(long)t * C + c] += d;
                }
    }
}

void train_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                             const float *w, const float *b, int N, int C)
{
#pragma omp parallel for schedule(static) if ((long)N * C >= PAR_ELEMS)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (long)i * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) {
            const float d = x[c] - m;
            v += d * d;
        }
        v /= C;
        const float s = 1.0f / sqrtf(v + 1e-5f);
        float *o = out + (long)i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

void train_cpu_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                             const float *inp, const float *w, const float *mean,
                             const float *rstd, int N, int C)
{
#pragma omp parallel if ((long)N * C >= PAR_ELEMS)
    {
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++) {
            const float *x = inp + (long)i * C, *dy = dout + (long)i * C;
            const float m = mean[i], s = rstd[i];
            float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
            for (int c = 0; c < C; c++) {
                const float dnorm = w[c] * dy[c];
                dnorm_mean += dnorm;
                dnorm_norm_mean += dnorm * (x[c] - m) * s;
            }
            dnorm_mean /= C;
            dnorm_norm_mean /= C;
            float *dx = dinp + (long)i * C;
            for (int c = 0; c < C; c++) {
                const float norm = (x[c] - m) * s;
                dx[c] += (w[c] * dy[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
            }
        }
        /* Weight gradients sum over rows: threads own channels, rows in order. */
#pragma omp for schedule(static)
        for (int c = 0; c < C; c++) {
            float sw = 0.0f, sb = 0.0f;
            for (int i = 0; i < N; i++) {
                const float dy = dout[(long)i * C + c];
                sw += (inp[(long)i * C + c] - mean[i]) * rstd[i] * dy;
                sb += dy;
            }
            dw[c] += sw;
            db[c] += sb;
        }
    }
}

void train_cpu_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int N,
                          int C, int OC)
{
    /* out(n,o) = sum_c inp(n,c) * w(o,c): B(k=c, n=o) = w[o*C + c] */
    gemm(out, OC, inp, C, 1, w, 1, C, N, OC, C, 0);
    if (bias) {
#pragma omp parallel for schedule(static) if ((long)N * OC >= PAR_ELEMS)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(long)n * OC + o] += bias[o];
    }
}

void train_cpu_matmul_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, int N, int C, int OC)
{
    /* dinp(n,c) = sum_o dout(n,o) * w(o,c) */
    gemm(dinp, C, dout, OC, 1, w, C, 1, N, C, OC, 0);
    /* dw(o,c) += sum_n dout(n,o) * inp(n,c): A(m=o,k=n) = dout[n*OC + o] */
    gemm(dw, C, dout, 1, OC, inp, C, 1, OC, C, N, 1);
    if (db) {
#pragma omp parallel for schedule(static) if ((long)N * OC >= PAR_ELEMS)
        for (int o = 0; o < OC; o++) {
            float s = 0.0f;
            for (int n = 0; n < N; n++) s += dout[(long)n * OC + o];
            db[o] += s;
        }
    }
}

void train_cpu_attention_fwd(float *out, float *lse, float *scratch, const float *qkv, int B,
                             int T, int C, int NH)
{
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    const long C3 = 3L * C;
#pragma omp parallel for collapse(3) schedule(static) if ((long)B * NH * T * T * hs >= PAR_FLOPS)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((long)b * T + t) * C3 + h * hs;
                float *p = scratch + (((long)b * NH + h) * T + t) * T;
                float mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((long)b * T + j) * C3 + C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    s *= scale;
                    p[j] = s;
                    if (s > mx) mx = s;
                }
                float sum = 0.0f;
                for (int j = 0; j <= t; j++) {
                    p[j] = expf(p[j] - mx);
                    sum += p[j];
                }
                const float inv = 1.0f / sum;
                for (int j = 0; j <= t; j++) p[j] *= inv;
                for (int j = t + 1; j < T; j++) p[j] = 0.0f;
                lse[((long)b * NH + h) * T + t] = mx + logf(sum);
                float *o = out + ((long)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int j = 0; j <= t; j++) {
                    const float *v = qkv + ((long)b * T + j) * C3 + 2L * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] += p[j] * v[i];
                }
            }
}

void train_cpu_attention_bwd(float *dqkv, float *scratch, const float *dout, const float *qkv,
                             const float *lse, int B, int T, int C, int NH)
{
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    const long C3 = 3L * C;
    /* A (b,h) pair owns its slices of dq, dk, dv over all t: no two threads write the same
     * element. The probabilities are rebuilt from q, k and the saved log-sum-exp. */
#pragma omp parallel for collapse(2) schedule(static) if ((long)B * NH * T * T * hs >= PAR_FLOPS)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++)
                for (int part = 0; part < 3; part++)
                    memset(dqkv + ((long)b * T + t) * C3 + part * C + h * hs, 0,
                           sizeof(float) * hs);
            float *dp = malloc(sizeof(float) * (size_t)T); /* dL/dp of one row */
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((long)b * T + t) * C3 + h * hs;
                const float *dy = dout + ((long)b * T + t) * C + h * hs;
                float *dq = dqkv + ((long)b * T + t) * C3 + h * hs;
                float *p = scratch + (((long)b * NH + h) * T + t) * T;
                const float l = lse[((long)b * NH + h) * T + t];
                float D = 0.0f; /* sum_j p_j dp_j, the softmax backward's row term */
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((long)b * T + j) * C3 + C + h * hs;
                    const float *v = k + C;
                    float s = 0.0f, d = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        s += q[i] * k[i];
                        d += dy[i] * v[i];
                    }
                    p[j] = expf(s * scale - l);
                    dp[j] = d;
                    D += p[j] * d;
                }
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((long)b * T + j) * C3 + C + h * hs;
                    const float ds = p[j] * (dp[j] - D) * scale;
                    float *dk = dqkv + ((long)b * T + j) * C3 + C + h * hs;
                    float *dv = dk + C;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += ds * k[i];
                        dk[i] += ds * q[i];
                        dv[i] += p[j] * dy[i];
                    }
                }
            }
            free(dp);
        }
}

void train_cpu_residual_fwd(float *out, const float *a, const float *b, long n)
{
#pragma omp parallel for schedule(static) if (n >= PAR_ELEMS)
    for (long i = 0; i < n; i++) out[i] = a[i] + b[i];
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* tanh through one expf: libm's tanhf costs several times more and GELU runs on 8BTC values a
 * step. 1 - 2/(e^2u + 1) loses relative precision near 0, but GELU only uses 1 + tanh and
 * 1 - tanh^2, where the absolute error (~1e-7) is what counts; saturates to +-1 correctly. */
static inline float fast_tanh(float u) { return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f); }

void train_cpu_gelu_fwd(float *out, const float *inp, long n)
{
#pragma omp parallel for schedule(static) if (n >= PAR_ELEMS)
    for (long i = 0; i < n; i++) {
        const float x = inp[i];
        out[i] = 0.5f * x * (1.0f + fast_tanh(GELU_K * (x + 0.044715f * x * x * x)));
    }
}

void train_cpu_gelu_bwd(float *dinp, const float *inp, const float *dout, long n)
{
#pragma omp parallel for schedule(static) if (n >= PAR_ELEMS)
    for (long i = 0; i < n; i++) {
        const float x = inp[i];
        const float u = GELU_K * (x + 0.044715f * x * x * x);
        const float th = fast_tanh(u);
        const float sech2 = 1.0f - th * th;
        const float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = g * dout[i];
    }
}

void train_cpu_softmax_fwd(float *probs, const float *logits, int N, int V, int Vp)
{
#pragma omp parallel for schedule(static) if ((long)N * Vp >= PAR_ELEMS)
    for (int i = 0; i < N; i++) {
        const float *z = logits + (long)i * Vp;
        float *p = probs + (long)i * Vp;
        float mx = -INFINITY;
        for (int v = 0; v < V; v++)
            if (z[v] > mx) mx = z[v];
        float sum = 0.0f;
        for (int v = 0; v < V; v++) {
            p[v] = expf(z[v] - mx);
            sum += p[v];
        }
        const float inv = 1.0f / sum;
        for (int v = 0; v < V; v++) p[v] *= inv;
        for (int v = V; v < Vp; v++) p[v] = 0.0f;
    }
}

void train_cpu_crossentropy_fwd(float *losses, const float *probs, const int *targets, int N,
                                int Vp)
{
    for (int i = 0; i < N; i++) losses[i] = -logf(probs[(long)i * Vp + targets[i]]);
}

void train_cpu_crossentropy_bwd(float *dlogits, const float *probs, const int *targets, int N,
                                int V, int Vp, float dloss)
{
#pragma omp parallel for schedule(static) if ((long)N * Vp >= PAR_ELEMS)
    for (int i = 0; i < N; i++) {
        const float *p = probs + (long)i * Vp;
        float *d = dlogits + (long)i * Vp;
        for (int v = 0; v < V; v++) d[v] = p[v] * dloss;
        d[targets[i]] -= dloss;
        for (int v = V; v < Vp; v++) d[v] = 0.0f;
    }
}

void train_cpu_adamw(float *p, const float *g, float *m, float *v, long n, float lr, float beta1,
                     float beta2, float eps, float wd, int t)
{
    const float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
#pragma omp parallel for schedule(static) if (n >= PAR_ELEMS)
    for (long i = 0; i < n; i++) {
        const float gi = g[i];
        const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
    }
}

void train_cpu_to_bf16(uint16_t *dst, const float *src, long n)
{
#pragma omp parallel for schedule(static) if (n >= PAR_ELEMS)
    for (long i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) { /* NaN stays NaN */
            dst[i] = (uint16_t)((u >> 16) | 0x40);
            continue;
        }
        u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
        dst[i] = (uint16_t)(u >> 16);
    }
}

void train_cpu_from_bf16(float *dst, const uint16_t *src, long n)
{
#pragma omp parallel for schedule(static) if (n >= PAR_ELEMS)
    for (long i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}
