/* train/ops.h — the GPT-2 ops as plain C functions on host memory (the CPU implementation).
 *
 * Each op is a forward or a backward of one layer type, in llm.c's layout (row-major,
 * B batch, T time, C channels, NH heads, V vocabulary, Vp padded vocabulary). Shapes are
 * written next to every argument. Conventions that the model relies on:
 *   - a backward's "dinp" output is a fresh tensor and is OVERWRITTEN (=), except
 *     layernorm_bwd, whose dinp is the residual-stream gradient and is ACCUMULATED (+=);
 *   - weight and bias gradients are always ACCUMULATED (+=), so gradient accumulation over
 *     micro-batches and the tied embedding (wte used twice) need nothing special;
 *   - every op is deterministic: each output element is summed in a fixed order whatever
 *     the number of OpenMP threads, so runs are bit-reproducible.
 * The CUDA implementation (backend_cuda.cu) follows the same contracts; the sim backend
 * (backend_sim.c) launches these functions as host kernels through cuLaunchKernel. */
#ifndef TRAIN_OPS_H
#define TRAIN_OPS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out (B,T,C) = wte[tok] + wpe[t]; tok (B,T) int32, wte (Vp,C), wpe (maxT,C) */
void train_cpu_encoder_fwd(float *out, const int *tok, const float *wte, const float *wpe, int B,
                           int T, int C);
/* dwte (Vp,C) +=, dwpe (maxT,C) += from dout (B,T,C) */
void train_cpu_encoder_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int B,
                           int T, int C);
/* out (N,C), mean (N), rstd (N) from inp (N,C), w (C), b (C); N = B*T */
void train_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                             const float *w, const float *b, int N, int C);
/* dinp (N,C) +=, dw (C) +=, db (C) += */
void train_cpu_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                             const float *inp, const float *w, const float *mean,
                             const float *rstd, int N, int C);
/* out (N,OC) = inp (N,C) x w^T, w (OC,C), bias (OC) or NULL */
void train_cpu_matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int N,
                          int C, int OC);
/* dinp (N,C) =, dw (OC,C) +=, db (OC) += (db may be NULL) */
void train_cpu_matmul_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, int N, int C, int OC);
/* Causal self-attention. qkv (B,T,3C) -> out (B,T,C), lse (B,NH,T) the log-sum-exp of each
 * score row (all backward needs besides qkv), scratch (B,NH,T,T) holds the probabilities. */
void train_cpu_attention_fwd(float *out, float *lse, float *scratch, const float *qkv, int B,
                             int T, int C, int NH);
/* dqkv (B,T,3C) = from dout (B,T,C); scratch (B,NH,T,T) for recomputed probabilities. */
void train_cpu_attention_bwd(float *dqkv, float *scratch, const float *dout, const float *qkv,
                             const float *lse, int B, int T, int C, int NH);
/* out (n) = a + b */
void train_cpu_residual_fwd(float *out, const float *a, const float *b, long n);
/* GELU, tanh approximation (GPT-2's) */
void train_cpu_gelu_fwd(float *out, const float *inp, long n);
/* dinp (n) = gelu'(inp) * dout */
void train_cpu_gelu_bwd(float *dinp, const float *inp, const float *dout, long n);
/* probs (N,Vp) = softmax over the first V logits (N,Vp); padding gets 0 */
void train_cpu_softmax_fwd(float *probs, const float *logits, int N, int V, int Vp);
/* losses (N) = -log probs[target] */
void train_cpu_crossentropy_fwd(float *losses, const float *probs, const int *targets, int N,
                                int Vp);
/* dlogits (N,Vp) = (probs - onehot(target)) * dloss; padding 0 (fused softmax+CE backward) */
void train_cpu_crossentropy_bwd(float *dlogits, const float *probs, const int *targets, int N,
                                int V, int Vp, float dloss);
/* AdamW with bias correction; t is the 1-based step */
void train_cpu_adamw(float *p, const float *g, float *m, float *v, long n, float lr, float beta1,
                     float beta2, float eps, float wd, int t);
/* bf16 storage of activations: round to nearest even, and back */
void train_cpu_to_bf16(uint16_t *dst, const float *src, long n);
void train_cpu_from_bf16(float *dst, const uint16_t *src, long n);

#ifdef __cplusplus
}
#endif
#endif
