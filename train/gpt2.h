/* train/gpt2.h — the GPT-2 model: configuration, tensors with framework lifetimes, and the
 * forward / backward / optimizer schedule. Internal to train/ (used by main.c). */
#ifndef TRAIN_GPT2_H
#define TRAIN_GPT2_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "train/backend.h"

typedef struct gpt2_config {
    int L, C, NH, V, Vp, maxT; /* layers, channels, heads, vocabulary, padded vocab, max T */
} gpt2_config;

/* --recompute choices (a bit set); the activation groups each one drops after forward */
enum {
    GPT2_RC_GELU = 1,  /* fch_gelu (4BTC) */
    GPT2_RC_LN = 2,    /* ln1, ln2 (2BTC) and their mean/rstd (4BT) */
    GPT2_RC_ATTN = 4,  /* atty (BTC) and lse (B NH T) */
    GPT2_RC_MLP = 8,   /* fch, fch_gelu (8BTC) */
    GPT2_RC_LAYER = 16 /* everything but the layer input (full checkpointing) */
};

typedef struct gpt2_opts {
    int B, T, steps, accum, dry_run, recompute, offload_acts, offload_opt, grad_none, bf16, leak,
        seq_jitter, trace_allocs, threads;
    int zero;       /* ZeRO stage 0, 1, 2, 3 across the ranks of train/dist.h (train/README.md) */
    int prefetch;   /* --zero 3: units gathered ahead of the one in use (train/README.md) */
    int param_bf16; /* --param-dtype bf16: parameters stored bf16, fp32 master weights */
    int offload_params; /* --offload params: parameters (shards) in pinned host memory */
    float lr, wd;       /* AdamW learning rate and (decoupled) weight decay */
    uint64_t seed;
} gpt2_opts;

/* One tensor = one device allocation (cudaMallocAsync on the compute stream). */
typedef struct gpt2_tensor {
    void *p;           /* device pointer, NULL while not resident */
    size_t bytes;      /* bytes on the device while resident */
    size_t numel;      /* elements (the fp32 size is numel * 4) */
    void *host;        /* pinned host copy (offload), kept across steps */
    size_t host_bytes; /* its size: the largest `bytes` the slot can have (the -T of the flags) */
    int bf16;          /* 1 while stored as bf16 on the device */
    char name[48];
} gpt2_tensor;

typedef struct gpt2 gpt2;

/* Builds the model (no device work yet). Returns NULL with a message on bad arguments. */
gpt2 *gpt2_create(const gpt2_config *cfg, const gpt2_opts *o, const train_backend *be);
/* Allocates the parameters and fills them: from the llm.c checkpoint `load` (NULL: random
 * init from the seed). Returns 0, 1 for a bad file (message printed), 2 for a CUDA error. */
int gpt2_init_params(gpt2 *m, const char *load);
/* One optimizer step over the batch tok/tgt (B*T int32 each, T = Tstep <= opts.T; B is this
 * rank's part of the global batch). *loss gets the mean loss over all ranks' tokens (NaN in a
 * dry run). Returns 0 or 2 (CUDA error, printed). */
int gpt2_step(gpt2 *m, const int *tok, const int *tgt, int Tstep, float *loss);
/* Writes the parameters in llm.c's checkpoint format (v3, fp32): rank 0 writes; when the
 * fp32 values are sharded (--zero 3, or --param-dtype bf16 with --zero >= 1) every rank must
 * call it (the values are all-gathered). 0, 1 (I/O), 2 (CUDA). */
int gpt2_save(gpt2 *m, const char *path);
/* Frees everything (also after an error). */
void gpt2_destroy(gpt2 *m);

size_t gpt2_live_bytes(const gpt2 *m);
size_t gpt2_peak_bytes(const gpt2 *m);
/* What the trainer has issued so far: kernel launches (the backend's count), copies and
 * memsets (cudaMemcpy/cudaMemcpyAsync/cudaMemsetAsync calls). Each is one launch to a tool
 * that intercepts launches. */
void gpt2_launch_counts(const gpt2 *m, unsigned long long *kernels, unsigned long long *copies,
                        unsigned long long *memsets);
size_t gpt2_num_params(const gpt2 *m);
const gpt2_config *gpt2_get_config(const gpt2 *m);

/* Reads an llm.c checkpoint header: fills cfg. 0, or 1 with a message. */
int gpt2_read_checkpoint_config(const char *path, gpt2_config *cfg);

#endif
