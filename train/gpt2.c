/* train/gpt2.c — GPT-2 with framework tensor lifetimes.
 *
 * The model is llm.c's GPT-2 (pre-LayerNorm, learned positions, tied embeddings, GELU,
 * causal attention) but memory is managed the way a framework's autograd does it, one
 * allocation per tensor, so that a memory tool sees a realistic trace:
 *
 *   parameters     allocated once at start, one tensor each, per layer (h3.qkv_w ...)
 *   activations    allocated by the op that produces them in forward; a forward temporary
 *                  (attproj, fcproj outputs, attention scores) is freed as soon as its
 *                  consumer ran; what backward needs is kept and freed in backward right
 *                  after its last use
 *   backward       each op's input gradient is a fresh tensor freed after its consumer
 *   gradients      created at their first production in the first backward (and again each
 *                  step with --grad-none, which frees them after the optimizer)
 *   AdamW m, v     created at the first optimizer step
 *   logits, probs  separate tensors (B,T,Vp): the largest; kept until the loss backward
 *
 * Allocation is cudaMallocAsync/cudaFreeAsync on the compute stream: stream-ordered, no
 * device synchronization per free, the free is ordered after the kernels that read the
 * tensor (what a caching allocator guarantees), and still one driver-visible allocation per
 * tensor. See train/README.md for the tensor table and the peak formula.
 *
 * The memory techniques all act at one place per layer: at the end of layer l's forward
 * its kept activations are "stashed" (dropped for recompute, offloaded to pinned host memory,
 * or converted to bf16) and at the start of layer l's backward they are "restored"
 * (prefetched, converted back, recomputed by re-running the layer's forward for the dropped
 * groups). The layer input (the previous layer's output) is stashed with layer l, because
 * only layer l's backward needs it.
 *
 * Sharded and mixed-precision parameters (--zero 3, --param-dtype bf16, --offload params) keep
 * the parameters in a form the ops cannot read (a shard, bf16, on the host); the ops then read
 * full fp32 copies, gather.<p>, made per unit (the embedding, each layer, the head) just before
 * the unit's forward and again before its backward, --prefetch K units ahead, and freed after
 * (see "units" below). The update works on the fp32 values (the shard, or master.<p>).
 *
 * --dry-run performs every allocation, free, copy, memset and NVTX range of a real run (one
 * exception: offload's device-to-host copies, see offload()) and, where the backend can
 * (be->dry_launch: the sim build), every kernel launch with its real arguments, only the
 * kernel bodies skipped; the CUDA build's dry run launches nothing. With
 * GPUMEM_SIM_BACKING=virtual (copies into unbacked memory are skipped by the virtual GPU) no
 * tensor memory is ever touched, and a launch-capturing tool still records every use. */
#include "train/gpt2.h"
#include "train/dist.h"

#include <assert.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

/* ---- parameters -------------------------------------------------------------------------- */
enum { P_WTE, P_WPE, P_LNF_W, P_LNF_B, P_GLOBAL };
enum {
    LP_LN1_W, LP_LN1_B, LP_QKV_W, LP_QKV_B, LP_ATTPROJ_W, LP_ATTPROJ_B,
    LP_LN2_W, LP_LN2_B, LP_FC_W, LP_FC_B, LP_FCPROJ_W, LP_FCPROJ_B, LP_COUNT
};
static const char *const lp_names[LP_COUNT] = {
    "ln1_w", "ln1_b", "qkv_w", "qkv_b", "attproj_w", "attproj_b",
    "ln2_w", "ln2_b", "fc_w",  "fc_b",  "fcproj_w",  "fcproj_b"};

/* ---- per-layer kept activations ---------------------------------------------------------- */
enum {
    A_LN1, A_LN1_MEAN, A_LN1_RSTD, A_QKV, A_ATTY, A_LSE, A_RES2,
    A_LN2, A_LN2_MEAN, A_LN2_RSTD, A_FCH, A_FCH_GELU, A_RES3, A_COUNT
};
#define BIT(a) (1u << (a))
#define G_LN1 (BIT(A_LN1) | BIT(A_LN1_MEAN) | BIT(A_LN1_RSTD))
#define G_LN2 (BIT(A_LN2) | BIT(A_LN2_MEAN) | BIT(A_LN2_RSTD))
#define G_ATT (BIT(A_ATTY) | BIT(A_LSE))
#define G_ALL ((1u << A_COUNT) - 1)
/* Large activations that --act-dtype bf16 stores as bf16 (statistics stay fp32). */
#define G_BIG (BIT(A_LN1) | BIT(A_QKV) | BIT(A_ATTY) | BIT(A_RES2) | BIT(A_LN2) | BIT(A_FCH) | \
               BIT(A_FCH_GELU) | BIT(A_RES3))

struct gpt2 {
    gpt2_config c;
    gpt2_opts o;
    const train_backend *be;
    cudaStream_t stream, copy_stream;
    int np; /* number of parameter tensors */
    gpt2_tensor *params, *grads, *adam_m, *adam_v;
    gpt2_tensor *grad_shards; /* --zero 2|3: grad.shard.<p>, from backward to the optimizer */
    gpt2_tensor *masters;     /* --param-dtype bf16: master.<p>, fp32 (a shard at zero >= 1) */
    gpt2_tensor *gathered;    /* units: gather.<p>, the fp32 parameter while a unit uses it */
    unsigned char *unit_in;   /* units: those (unit_of) whose parameters are gathered */
    int units; /* --zero 3, --param-dtype bf16 or --offload params: the ops read parameters
                * gathered per unit */
    int last_micro;           /* backward of the step's last micro-batch (gradients complete) */
    gpt2_tensor encoded, lnf, lnf_mean, lnf_rstd, logits, probs, losses, tokens, targets;
    gpt2_tensor *acts; /* L * A_COUNT */
    gpt2_tensor *leaked;
    int nleaked;
    unsigned drop; /* activation groups dropped after forward (recompute) */
    int B, T;      /* current micro-batch shape */
    int step;      /* optimizer steps done */
    size_t live, peak;
    unsigned long long ncopies, nmemsets; /* issued (LAUNCHES); kernels: be->kernel_launches */
    int be_ready;                         /* be->init ran (fini is owed) */
    float *host_losses;
    int (*name_next_fn)(const char *);
};

static gpt2_tensor *act(gpt2 *m, int l, int a) { return &m->acts[(size_t)l * A_COUNT + a]; }
static gpt2_tensor *layer_input(gpt2 *m, int l)
{
    return l == 0 ? &m->encoded : act(m, l - 1, A_RES3);
}
static int pidx(int l, int lp) { return P_GLOBAL + l * LP_COUNT + lp; }
/* The full fp32 parameter i as the ops read it: with units (--zero 3, --param-dtype bf16)
 * its gathered copy, present only while a unit that uses it is gathered; else the parameter
 * itself. */
static float *P(gpt2 *m, int i)
{
    assert(!m->units || m->gathered[i].p);
    return m->units ? m->gathered[i].p : m->params[i].p;
}

size_t gpt2_live_bytes(const gpt2 *m) { return m->live; }
size_t gpt2_peak_bytes(const gpt2 *m) { return m->peak; }
void gpt2_launch_counts(const gpt2 *m, unsigned long long *kernels, unsigned long long *copies,
                        unsigned long long *memsets)
{
    *kernels = m->be->kernel_launches ? m->be->kernel_launches() : 0;
    *copies = m->ncopies;
    *memsets = m->nmemsets;
}
const gpt2_config *gpt2_get_config(const gpt2 *m) { return &m->c; }

static size_t param_numel(const gpt2_config *c, int i)
{
    const size_t C = (size_t)c->C;
    switch (i) {
    case P_WTE: return (size_t)c->Vp * C;
    case P_WPE: return (size_t)c->maxT * C;
    case P_LNF_W:
    case P_LNF_B: return C;
    }
    switch ((i - P_GLOBAL) % LP_COUNT) {
    case LP_QKV_W: return 3 * C * C;
    case LP_QKV_B: return 3 * C;
    case LP_ATTPROJ_W: return C * C;
    case LP_FC_W: return 4 * C * C;
    case LP_FC_B: return 4 * C;
    case LP_FCPROJ_W: return 4 * C * C;
    default: return C; /* ln weights and biases, attproj_b, fcproj_b */
    }
}

size_t gpt2_num_params(const gpt2 *m)
{
    size_t n = 0;
    for (int i = 0; i < m->np; i++) n += param_numel(&m->c, i);
    return n;
}

static void param_name(const gpt2 *m, int i, char *buf, size_t n)
{
    static const char *const g[P_GLOBAL] = {"wte", "wpe", "lnf_w", "lnf_b"};
    (void)m;
    if (i < P_GLOBAL)
        snprintf(buf, n, "%s", g[i]);
    else
        snprintf(buf, n, "h%d.%s", (i - P_GLOBAL) / LP_COUNT, lp_names[(i - P_GLOBAL) % LP_COUNT]);
}

/* ---- errors, names, NVTX ----------------------------------------------------------------- */
static int cuda_fail(cudaError_t e, const char *what, const char *name, size_t bytes,
                     const gpt2 *m)
{
    fprintf(stderr, "train_gpt2: CUDA error %s (%s) in %s", cudaGetErrorName(e),
            cudaGetErrorString(e), what);
    if (name) fprintf(stderr, " of %s (%zu bytes)", name, bytes);
    fprintf(stderr, "; trainer's live tensor bytes %zu, peak %zu\n", m->live, m->peak);
    if (e == cudaErrorMemoryAllocation)
        fprintf(stderr, "train_gpt2: out of device memory: use a smaller -B/-T or model, or a "
                        "memory technique (--recompute, --offload, --accum)\n");
    return 2;
}
#define CK(call, what)                                                                          \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) return cuda_fail(e_, what, NULL, 0, m);                          \
    } while (0)
#define TRY(x)                                                                                  \
    do {                                                                                        \
        int r_ = (x);                                                                           \
        if (r_) return r_;                                                                      \
    } while (0)

static void push(const char *fmt, ...)
{
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    nvtxRangePushA(buf);
}
static void pop(void) { nvtxRangePop(); }

/* Every copy and memset the trainer issues goes through these, which count it: a tool that
 * records launches (gpumem with GPUMEM_USES) sees each as one launch, and the LAUNCHES line
 * lets a test check that none was missed. */
static cudaError_t copy_async(gpt2 *m, void *dst, const void *src, size_t n,
                              enum cudaMemcpyKind kind, cudaStream_t s)
{
    m->ncopies++;
    return cudaMemcpyAsync(dst, src, n, kind, s);
}
static cudaError_t copy_sync(gpt2 *m, void *dst, const void *src, size_t n,
                             enum cudaMemcpyKind kind)
{
    m->ncopies++;
    return cudaMemcpy(dst, src, n, kind);
}
static cudaError_t zero_async(gpt2 *m, void *p, size_t n, cudaStream_t s)
{
    m->nmemsets++;
    return cudaMemsetAsync(p, 0, n, s);
}

/* An op: an NVTX range around one backend call. In a dry run the backend launches it with the
 * body skipped when it can (dry_launch); otherwise the call is skipped (range kept). */
static int op_result(gpt2 *m, const char *name, int err)
{
    if (err) {
        fprintf(stderr, "train_gpt2: CUDA error in op %s: %s\n", name, m->be->error_string(err));
        return 2;
    }
    return 0;
}
#define OP(name, call)                                                                          \
    do {                                                                                        \
        nvtxRangePushA(name);                                                                   \
        int r_ = m->o.dry_run && !m->be->dry_launch ? 0 : op_result(m, name, (call));           \
        nvtxRangePop();                                                                         \
        if (r_) return r_;                                                                      \
    } while (0)

/* A collective (train/dist.h) in an NVTX range of its own. Multi-rank and ZeRO runs only: a
 * single-rank run without --zero has no such range, so its trace is unchanged. A dry run
 * keeps the range and skips the communication (there is no data to send). */
#define COMM(name, call)                                                                           \
    do {                                                                                           \
        nvtxRangePushA(name);                                                                      \
        int r_ = m->o.dry_run ? 0 : (call);                                                        \
        nvtxRangePop();                                                                            \
        if (r_) return r_;                                                                         \
    } while (0)

/* ---- tensor allocation ------------------------------------------------------------------- */
static int t_alloc_on(gpt2 *m, gpt2_tensor *t, size_t numel, int bf16, cudaStream_t s,
                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->numel = numel;
    t->bf16 = bf16;
    t->bytes = numel * (bf16 ? 2 : 4);
    if (m->name_next_fn) m->name_next_fn(t->name); /* names the OOM record too, if any */
    cudaError_t e = cudaMallocAsync(&t->p, t->bytes, s);
    if (e != cudaSuccess) {
        t->p = NULL;
        return cuda_fail(e, "cudaMallocAsync", t->name, t->bytes, m);
    }
    m->live += t->bytes;
    if (m->live > m->peak) m->peak = m->live;
    if (m->o.trace_allocs) fprintf(stderr, "alloc %s %zu\n", t->name, t->bytes);
    return 0;
}
#define t_alloc(m, t, numel, ...) t_alloc_on(m, t, numel, 0, (m)->stream, __VA_ARGS__)

static int t_free_on(gpt2 *m, gpt2_tensor *t, cudaStream_t s)
{
    if (!t->p) return 0;
    cudaError_t e = cudaFreeAsync(t->p, s);
    t->p = NULL;
    m->live -= t->bytes;
    if (m->o.trace_allocs) fprintf(stderr, "free %s %zu\n", t->name, t->bytes);
    if (e != cudaSuccess) return cuda_fail(e, "cudaFreeAsync", t->name, t->bytes, m);
    return 0;
}
#define t_free(m, t) t_free_on(m, t, (m)->stream)

/* A gradient, created (zeroed) at its first production. */
static int grad(gpt2 *m, int i, float **out)
{
    gpt2_tensor *g = &m->grads[i];
    if (!g->p) {
        char n[40];
        param_name(m, i, n, sizeof n);
        TRY(t_alloc(m, g, param_numel(&m->c, i), "grad.%s", n));
        CK(zero_async(m, g->p, g->bytes, m->stream), "cudaMemsetAsync");
    }
    *out = g->p;
    return 0;
}

/* --zero 2|3: parameter i's gradient is complete (right after the op that finished it; at
 * zero 2 in the last micro-batch only, at zero 3 in every one): it is reduce-scattered into
 * grad.shard.<p> (this rank's shard, ceil(n / world) elements, made at the first) and the
 * full grad.<p> is freed at once. A later micro-batch (zero 3 with --accum) reduce-scatters
 * in place, into its own part of grad.<p>, and adds that to the shard. */
static int grad_done(gpt2 *m, int i)
{
    if (m->o.zero < 2 || (m->o.zero == 2 && !m->last_micro)) return 0;
    gpt2_tensor *g = &m->grads[i], *sh = &m->grad_shards[i];
    if (!sh->p) {
        char n[40];
        param_name(m, i, n, sizeof n);
        TRY(t_alloc(m, sh, dist_shard_size(g->numel), "grad.shard.%s", n));
        COMM("reduce_scatter", dist_reduce_scatter_sum(g->p, sh->p, g->numel));
    } else {
        size_t off, cnt;
        dist_own(g->numel, &off, &cnt);
        float *part = (float *)g->p + off;
        COMM("reduce_scatter", dist_reduce_scatter_sum(g->p, part, g->numel));
        if (cnt) OP("grad_accum", m->be->residual_fwd(sh->p, sh->p, part, (long)cnt));
    }
    return t_free(m, g);
}
#define GRADS_DONE(i, j)                                                                           \
    do {                                                                                           \
        TRY(grad_done(m, i));                                                                      \
        TRY(grad_done(m, j));                                                                      \
    } while (0)

/* Pinned host copies (the memory techniques, below). */
static int offload(gpt2 *m, gpt2_tensor *t, size_t host_bytes);
static int prefetch(gpt2 *m, gpt2_tensor *t);

/* ---- units: gathering the parameters unit by unit (--zero 3, --param-dtype bf16) ---------
 * At --zero 3 the parameters are kept as shards (gpt2_init_params); with --param-dtype bf16
 * they are stored as bf16 (a shard of it at zero 3) while the ops compute in fp32. Either way
 * the ops read full fp32 copies, made unit by unit. A unit is the set of parameters one
 * part of the model reads: unit 0 the embedding (wte, wpe), unit 1 + l layer l's twelve, unit
 * L + 1 the head (lnf_w, lnf_b and the tied wte). One micro-batch uses them in the order of
 * the positions
 *     0: unit 0 (encoder)   1..L: layers 0..L-1   L+1: head (forward)   L+2: head (backward)
 *     L+3..2L+2: layers L-1..0 (backward)   2L+3: unit 0 (encoder backward)
 * At the start of position s, the units of positions s..s+K (K = --prefetch) not yet gathered
 * are gathered: each of their parameters gets a full buffer gather.<p>, all-gathered from
 * the ranks' shards (NVTX "gather", its collectives "allgather"). At the end of position s its
 * unit's buffers are freed, unless the unit is used again within the next max(K, 1)
 * positions (the head from its forward to its backward; a layer whose backward is that near).
 * A parameter two gathered units share (wte) has one buffer, freed with the last of them.
 * Nothing is kept from one micro-batch to the next. */
static int unit_positions(const gpt2 *m) { return 2 * m->c.L + 4; }
static int unit_of(const gpt2 *m, int pos)
{
    const int L = m->c.L;
    if (pos == 0 || pos == 2 * L + 3) return 0;
    if (pos <= L) return pos;
    if (pos <= L + 2) return L + 1;
    return L - (pos - (L + 3));
}
/* The parameters of unit u into idx (at most LP_COUNT); returns how many. */
static int unit_params(const gpt2 *m, int u, int *idx)
{
    if (u == 0) return idx[0] = P_WTE, idx[1] = P_WPE, 2;
    if (u == m->c.L + 1) return idx[0] = P_LNF_W, idx[1] = P_LNF_B, idx[2] = P_WTE, 3;
    for (int lp = 0; lp < LP_COUNT; lp++) idx[lp] = pidx(u - 1, lp);
    return LP_COUNT;
}
/* Parameter p (device) into g, the full fp32 gather.<p> the ops read. */
static int unit_gather_param(gpt2 *m, gpt2_tensor *g, gpt2_tensor *p)
{
    if (!m->o.param_bf16) { /* zero 3, fp32: the shards gathered into gather.<p> */
        TRY(t_alloc(m, g, p->numel, "gather.%s", p->name));
        if (dist_world() == 1) /* the shard is the whole parameter */
            CK(copy_async(m, g->p, p->p, p->bytes, cudaMemcpyDeviceToDevice, m->stream),
               "cudaMemcpyAsync");
        else
            COMM("allgather", dist_allgather_from(p->p, g->p, p->numel, 4));
        return 0;
    }
    /* bf16: at zero 3 the bf16 shards gathered into gather.<p>.bf16 first (freed once converted;
     * not gather.bf16.<p>: "K.S.<p>" names optimizer state); then into the fp32 gather.<p>. */
    gpt2_tensor wire = {0};
    const void *src = p->p;
    if (m->o.zero == 3) {
        TRY(t_alloc_on(m, &wire, p->numel, 1, m->stream, "gather.%s.bf16", p->name));
        if (dist_world() == 1)
            CK(copy_async(m, wire.p, p->p, p->bytes, cudaMemcpyDeviceToDevice, m->stream),
               "cudaMemcpyAsync");
        else
            COMM("allgather", dist_allgather_from(p->p, wire.p, p->numel, 2));
        src = wire.p;
    }
    TRY(t_alloc(m, g, p->numel, "gather.%s", p->name));
    OP("from_bf16", m->be->from_bf16(g->p, src, (long)p->numel));
    return t_free(m, &wire);
}

static int unit_gather(gpt2 *m, int u)
{
    int idx[LP_COUNT];
    const int n = unit_params(m, u, idx);
    for (int k = 0; k < n; k++) {
        gpt2_tensor *g = &m->gathered[idx[k]], *p = &m->params[idx[k]];
        if (g->p) continue; /* wte, gathered with the other unit that reads it */
        if (m->o.offload_params) { /* the shard brought in from pinned host memory */
            push("prefetch");
            TRY(prefetch(m, p));
            pop();
        }
        TRY(unit_gather_param(m, g, p));
        if (m->o.offload_params) TRY(t_free(m, p)); /* unchanged: the host copy stays */
    }
    m->unit_in[u] = 1;
    return 0;
}
static int unit_release(gpt2 *m, int u)
{
    int idx[LP_COUNT];
    const int n = unit_params(m, u, idx);
    m->unit_in[u] = 0;
    for (int k = 0; k < n; k++) {
        /* wte is kept while the other unit that reads it (embedding, head) is gathered */
        const int shared = idx[k] == P_WTE && m->unit_in[u == 0 ? m->c.L + 1 : 0];
        if (!shared) TRY(t_free(m, &m->gathered[idx[k]]));
    }
    return 0;
}
/* Before position pos: its unit and the next K gathered. */
static int units_begin(gpt2 *m, int pos)
{
    if (!m->units) return 0;
    const int end = pos + m->o.prefetch < unit_positions(m) ? pos + m->o.prefetch
                                                             : unit_positions(m) - 1;
    int any = 0;
    for (int q = pos; q <= end; q++) any |= !m->unit_in[unit_of(m, q)];
    if (!any) return 0;
    push("gather");
    for (int q = pos; q <= end; q++)
        if (!m->unit_in[unit_of(m, q)]) TRY(unit_gather(m, unit_of(m, q)));
    pop();
    return 0;
}
/* After position pos: its unit freed unless used again within the next max(K, 1) positions. */
static int units_end(gpt2 *m, int pos)
{
    if (!m->units) return 0;
    const int u = unit_of(m, pos), K = m->o.prefetch > 1 ? m->o.prefetch : 1;
    for (int q = pos + 1; q <= pos + K && q < unit_positions(m); q++)
        if (unit_of(m, q) == u) return 0;
    return unit_release(m, u);
}

/* ---- model creation ---------------------------------------------------------------------- */
gpt2 *gpt2_create(const gpt2_config *cfg, const gpt2_opts *o, const train_backend *be)
{
    if (cfg->C % cfg->NH) {
        fprintf(stderr, "train_gpt2: channels %d not divisible by heads %d\n", cfg->C, cfg->NH);
        return NULL;
    }
    gpt2 *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->c = *cfg;
    m->o = *o;
    m->be = be;
    m->np = P_GLOBAL + cfg->L * LP_COUNT;
    m->params = calloc((size_t)m->np, sizeof(gpt2_tensor));
    m->grads = calloc((size_t)m->np, sizeof(gpt2_tensor));
    m->adam_m = calloc((size_t)m->np, sizeof(gpt2_tensor));
    m->adam_v = calloc((size_t)m->np, sizeof(gpt2_tensor));
    m->grad_shards = calloc((size_t)m->np, sizeof(gpt2_tensor));
    m->gathered = calloc((size_t)m->np, sizeof(gpt2_tensor));
    m->masters = calloc((size_t)m->np, sizeof(gpt2_tensor));
    m->units = o->zero == 3 || o->param_bf16 || o->offload_params;
    m->unit_in = calloc((size_t)cfg->L + 2, 1);
    m->acts = calloc((size_t)cfg->L * A_COUNT, sizeof(gpt2_tensor));
    m->leaked = calloc((size_t)(o->steps > 0 ? o->steps : 1) * (size_t)(o->accum > 0 ? o->accum : 1),
                       sizeof(gpt2_tensor));
    m->host_losses = malloc(sizeof(float) * (size_t)o->B * (size_t)o->T);
    if (!m->params || !m->grads || !m->adam_m || !m->adam_v || !m->grad_shards || !m->gathered || !m->masters ||
        !m->unit_in || !m->acts || !m->leaked || !m->host_losses) {
        gpt2_destroy(m);
        return NULL;
    }
    unsigned d = 0;
    if (o->recompute & GPT2_RC_GELU) d |= BIT(A_FCH_GELU);
    if (o->recompute & GPT2_RC_LN) d |= G_LN1 | G_LN2;
    if (o->recompute & GPT2_RC_ATTN) d |= G_ATT;
    if (o->recompute & GPT2_RC_MLP) d |= BIT(A_FCH) | BIT(A_FCH_GELU);
    if (o->recompute & GPT2_RC_LAYER) d |= G_ALL & ~BIT(A_RES3);
    m->drop = d;
    /* gpumem's naming call, when the program runs under gpumem (a no-op otherwise). */
    *(void **)&m->name_next_fn = dlsym(RTLD_DEFAULT, "gpumem_name_next");
    return m;
}

/* ---- random init (host, deterministic from the seed) ------------------------------------- */
static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static void fill_normal(float *x, size_t n, float std, uint64_t *s)
{
    for (size_t i = 0; i < n; i += 2) {
        const double u1 = ((rng_next(s) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
        const double u2 = (rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
        const double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(r * cos(2 * M_PI * u2) * std);
        if (i + 1 < n) x[i + 1] = (float)(r * sin(2 * M_PI * u2) * std);
    }
}

/* llm.c checkpoint: 256 int32 header, then the 16 parameter groups, each layer-major. */
#define CKPT_MAGIC 20240326
#define CKPT_VERSION 3
static const int ckpt_group_lp[12] = {LP_LN1_W, LP_LN1_B, LP_QKV_W, LP_QKV_B, LP_ATTPROJ_W,
                                      LP_ATTPROJ_B, LP_LN2_W, LP_LN2_B, LP_FC_W, LP_FC_B,
                                      LP_FCPROJ_W, LP_FCPROJ_B};

int gpt2_read_checkpoint_config(const char *path, gpt2_config *cfg)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "train_gpt2: cannot open checkpoint %s: %m\n", path);
        return 1;
    }
    int h[256];
    size_t got = fread(h, sizeof(int), 256, f);
    fclose(f);
    if (got != 256 || h[0] != CKPT_MAGIC) {
        fprintf(stderr, "train_gpt2: %s is not an llm.c checkpoint (magic %d expected)\n", path,
                CKPT_MAGIC);
        return 1;
    }
    if (h[1] != CKPT_VERSION) {
        fprintf(stderr, "train_gpt2: %s is checkpoint version %d; only version 3 (fp32) is "
                        "supported (bf16 checkpoints: convert with llm.c's tools)\n", path, h[1]);
        return 1;
    }
    *cfg = (gpt2_config){.maxT = h[2], .V = h[3], .L = h[4], .NH = h[5], .C = h[6], .Vp = h[7]};
    if (cfg->maxT <= 0 || cfg->V <= 0 || cfg->L <= 0 || cfg->NH <= 0 || cfg->C <= 0 ||
        cfg->Vp < cfg->V || cfg->C % cfg->NH || cfg->L > 1000 || cfg->C > 65536 ||
        cfg->Vp > (1 << 24) || cfg->maxT > (1 << 20)) {
        fprintf(stderr, "train_gpt2: %s has an invalid header (L %d C %d NH %d V %d Vp %d maxT %d)\n",
                path, cfg->L, cfg->C, cfg->NH, cfg->V, cfg->Vp, cfg->maxT);
        return 1;
    }
    return 0;
}

/* Walks the checkpoint order: calls fn for every (tensor, element offset, count) slice. */
typedef int (*ckpt_visit)(gpt2 *m, int pi, FILE *f, float *stage);
static int ckpt_walk(gpt2 *m, FILE *f, float *stage, ckpt_visit fn)
{
    TRY(fn(m, P_WTE, f, stage));
    TRY(fn(m, P_WPE, f, stage));
    for (int g = 0; g < 12; g++)
        for (int l = 0; l < m->c.L; l++) TRY(fn(m, pidx(l, ckpt_group_lp[g]), f, stage));
    TRY(fn(m, P_LNF_W, f, stage));
    TRY(fn(m, P_LNF_B, f, stage));
    return 0;
}
/* Where parameter i's fp32 values live: the master weights with --param-dtype bf16, else
 * the parameter itself; and whether they are this rank's shard only (at offset 0): the
 * parameter at zero 3, the master weights (sharded like the AdamW state) at zero >= 1. */
static gpt2_tensor *fp32_values(gpt2 *m, int i)
{
    return m->o.param_bf16 ? &m->masters[i] : &m->params[i];
}
static int values_sharded(const gpt2 *m)
{
    return m->o.zero == 3 || (m->o.param_bf16 && m->o.zero >= 1);
}

/* Parameter i's device tensors: `<p>` (this rank's shard at zero 3, full size otherwise: the
 * rule of train/dist.h; numel stays the full size), bf16 with --param-dtype bf16, and then
 * its fp32 master weights master.<p>, sharded like the AdamW state. */
static int param_make(gpt2 *m, int i)
{
    char n[40];
    param_name(m, i, n, sizeof n);
    const size_t k = param_numel(&m->c, i);
    TRY(t_alloc_on(m, &m->params[i], m->o.zero == 3 ? dist_shard_size(k) : k, m->o.param_bf16,
                   m->stream, "%s", n));
    m->params[i].numel = k;
    if (m->o.param_bf16)
        TRY(t_alloc(m, &m->masters[i], m->o.zero ? dist_shard_size(k) : k, "master.%s", n));
    return 0;
}
/* When parameters or master weights go to pinned host memory, each parameter is made,
 * filled, rounded and offloaded before the next is made: the device never holds them all,
 * not even at start. */
static int one_at_a_time(const gpt2 *m)
{
    return m->o.offload_params || (m->o.param_bf16 && m->o.offload_opt);
}
static int publish_param(gpt2 *m, int i);

/* Parameter pi from its full host values: all of them, or this rank's part. */
static int put_param(gpt2 *m, int pi, const float *full)
{
    if (one_at_a_time(m)) {
        TRY(param_make(m, pi));
        CK(cudaStreamSynchronize(m->stream), "cudaStreamSynchronize"); /* made in stream order */
    }
    gpt2_tensor *t = fp32_values(m, pi);
    size_t off = 0, cnt = m->params[pi].numel;
    if (values_sharded(m)) dist_own(m->params[pi].numel, &off, &cnt);
    if (cnt)
        CK(copy_sync(m, t->p, full + off, sizeof(float) * cnt, cudaMemcpyHostToDevice),
           "cudaMemcpy");
    if (!one_at_a_time(m)) return 0;
    CK(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); /* the copy from pageable memory */
    if (m->o.param_bf16) TRY(publish_param(m, pi));
    if (m->o.param_bf16 && m->o.offload_opt)
        TRY(offload(m, &m->masters[pi], m->masters[pi].bytes));
    if (m->o.offload_params) TRY(offload(m, &m->params[pi], m->params[pi].bytes));
    return 0;
}

/* --param-dtype bf16: the bf16 parameter from the fp32 master weights: this rank's part
 * rounded (to_bf16), then at zero 1|2 all-gathered in bf16 so that every rank holds it all
 * (at zero 0 every rank updates all of it, at zero 3 the parameter is the shard). */
static int publish_param(gpt2 *m, int i)
{
    gpt2_tensor *p = &m->params[i], *w = &m->masters[i];
    const int gather = m->o.zero == 1 || m->o.zero == 2;
    size_t off = 0, cnt = p->numel;
    if (m->o.zero) dist_own(p->numel, &off, &cnt);
    if (cnt)
        OP("to_bf16", m->be->to_bf16((uint16_t *)p->p + (gather ? off : 0), w->p, (long)cnt));
    if (gather) COMM("allgather", dist_allgather(p->p, p->numel, 2));
    return 0;
}
static int load_one(gpt2 *m, int pi, FILE *f, float *stage)
{
    const size_t n = param_numel(&m->c, pi); /* the tensor may not be made yet */
    if (fread(stage, sizeof(float), n, f) != n) {
        char name[40];
        param_name(m, pi, name, sizeof name);
        fprintf(stderr, "train_gpt2: checkpoint is truncated (reading %s)\n", name);
        return 1;
    }
    return put_param(m, pi, stage);
}
/* Parameter pi's fp32 values, whole, into stage (host). Sharded values on several ranks are
 * all-gathered into a device buffer save.<p> first (every rank takes part; an offloaded
 * shard is brought in for it). */
static int fetch_values(gpt2 *m, int pi, float *stage)
{
    gpt2_tensor *t = fp32_values(m, pi);
    const size_t n = m->params[pi].numel;
    if (values_sharded(m) && dist_world() > 1) {
        gpt2_tensor full = {0};
        const int in = !t->p;
        if (in) TRY(prefetch(m, t));
        TRY(t_alloc(m, &full, n, "save.%s", m->params[pi].name));
        COMM("allgather", dist_allgather_from(t->p, full.p, n, 4));
        CK(cudaStreamSynchronize(m->stream), "cudaStreamSynchronize");
        CK(copy_sync(m, stage, full.p, sizeof(float) * n, cudaMemcpyDeviceToHost), "cudaMemcpy");
        TRY(t_free(m, &full));
        if (in) TRY(t_free(m, t)); /* unchanged: the host copy stays */
        return 0;
    }
    if (!t->p && t->host) /* offloaded (parameters, or masters with the optimizer state) */
        memcpy(stage, t->host, sizeof(float) * n);
    else
        CK(copy_sync(m, stage, t->p, sizeof(float) * n, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return 0;
}
static int save_one(gpt2 *m, int pi, FILE *f, float *stage)
{
    const size_t n = m->params[pi].numel;
    TRY(fetch_values(m, pi, stage));
    if (f && fwrite(stage, sizeof(float), n, f) != n) { /* f: rank 0 writes */
        fprintf(stderr, "train_gpt2: write error saving checkpoint: %m\n");
        return 1;
    }
    return 0;
}

int gpt2_init_params(gpt2 *m, const char *load)
{
    CK(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    CK(cudaStreamCreateWithFlags(&m->copy_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    /* As frameworks using cudaMallocAsync do (PyTorch's cudaMallocAsync backend): let the
     * driver's pool keep freed memory instead of returning it at every synchronization.
     * Not essential (the virtual GPU accepts and ignores it), so a failure is not fatal. */
    cudaMemPool_t pool;
    int dev = 0;
    (void)cudaGetDevice(&dev); /* a rank's device (dist_init), else 0 */
    if (cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
        uint64_t keep = UINT64_MAX;
        if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess)
            (void)cudaGetLastError();
    } else {
        (void)cudaGetLastError();
    }
    /* A dry run on a backend that cannot skip kernel bodies launches nothing, so it needs no
     * backend (no cuBLAS handle): the CUDA build's dry run then also runs on the virtual GPU. */
    if (m->be->init && (!m->o.dry_run || m->be->dry_launch)) {
        int e = m->be->init(m->stream, m->o.threads, m->o.dry_run);
        if (e) {
            fprintf(stderr, "train_gpt2: backend %s: %s\n", m->be->name, m->be->error_string(e));
            return 2;
        }
        m->be_ready = 1;
    }
    size_t maxn = 0;
    for (int i = 0; i < m->np; i++) {
        const size_t k = param_numel(&m->c, i);
        if (k > maxn) maxn = k;
        if (!one_at_a_time(m)) TRY(param_make(m, i)); /* else in put_param */
    }
    TRY(dist_setup(m->stream, m->be->host_memory, maxn, m->o.dry_run));
    /* The parameters were allocated in stream order: make them usable by the synchronous
     * copies below (legacy stream). */
    CK(cudaStreamSynchronize(m->stream), "cudaStreamSynchronize");
    /* One staging buffer; in a dry run it is never written or read (copies into the
     * virtual GPU's unbacked memory are skipped), so it costs no resident memory. */
    float *stage = malloc(sizeof(float) * maxn);
    if (!stage) {
        fprintf(stderr, "train_gpt2: out of host memory for a %zu-byte staging buffer\n", maxn * 4);
        return 1;
    }
    int rc = 0;
    if (load) {
        FILE *f = fopen(load, "rb");
        if (!f) {
            fprintf(stderr, "train_gpt2: cannot open checkpoint %s: %m\n", load);
            free(stage);
            return 1;
        }
        fseek(f, 256 * sizeof(int), SEEK_SET);
        rc = ckpt_walk(m, f, stage, load_one);
        fclose(f);
    } else {
        uint64_t s = m->o.seed * 0x2545F4914F6CDD1Dull + 1;
        const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)m->c.L);
        for (int i = 0; i < m->np && !rc; i++) {
            const size_t numel = param_numel(&m->c, i); /* not made yet if one at a time */
            if (!m->o.dry_run) {
                const int lp = i < P_GLOBAL ? -1 : (i - P_GLOBAL) % LP_COUNT;
                if (i == P_LNF_W || lp == LP_LN1_W || lp == LP_LN2_W)
                    for (size_t k = 0; k < numel; k++) stage[k] = 1.0f;
                else if (i == P_LNF_B || lp == LP_LN1_B || lp == LP_LN2_B || lp == LP_QKV_B ||
                         lp == LP_ATTPROJ_B || lp == LP_FC_B || lp == LP_FCPROJ_B)
                    memset(stage, 0, sizeof(float) * numel);
                else
                    fill_normal(stage, numel,
                                (lp == LP_ATTPROJ_W || lp == LP_FCPROJ_W) ? proj_std : std, &s);
                if (i == P_WTE) /* padded vocabulary rows stay zero */
                    memset(stage + (size_t)m->c.V * m->c.C, 0,
                           sizeof(float) * (size_t)(m->c.Vp - m->c.V) * m->c.C);
            }
            rc = put_param(m, i, stage);
        }
    }
    free(stage);
    /* A copy from pageable memory may return before its DMA finished; the compute stream is
     * non-blocking, so wait here before the first kernel reads the parameters. */
    if (!rc) CK(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    /* --param-dtype bf16: the bf16 parameters from the masters (one at a time: done). */
    for (int i = 0; !rc && m->o.param_bf16 && !one_at_a_time(m) && i < m->np; i++)
        rc = publish_param(m, i);
    if (!rc && (m->o.param_bf16 || one_at_a_time(m))) {
        CK(cudaStreamSynchronize(m->stream), "cudaStreamSynchronize");
        CK(cudaStreamSynchronize(m->copy_stream), "cudaStreamSynchronize");
    }
    return rc;
}

int gpt2_save(gpt2 *m, const char *path)
{
    /* Rank 0 writes; with sharded values every rank calls this and takes part in gathers. */
    if (dist_rank() != 0) {
        size_t maxn = 0;
        for (int i = 0; i < m->np; i++)
            if (m->params[i].numel > maxn) maxn = m->params[i].numel;
        float *stage = malloc(sizeof(float) * maxn);
        int rc = stage ? ckpt_walk(m, NULL, stage, save_one) : 1;
        free(stage);
        return rc;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "train_gpt2: cannot create checkpoint %s: %m\n", path);
        return 1;
    }
    int h[256] = {0};
    h[0] = CKPT_MAGIC, h[1] = CKPT_VERSION, h[2] = m->c.maxT, h[3] = m->c.V, h[4] = m->c.L;
    h[5] = m->c.NH, h[6] = m->c.C, h[7] = m->c.Vp;
    size_t maxn = 0;
    for (int i = 0; i < m->np; i++)
        if (m->params[i].numel > maxn) maxn = m->params[i].numel;
    float *stage = malloc(sizeof(float) * maxn);
    int rc = stage ? 0 : 1;
    if (!rc && fwrite(h, sizeof h, 1, f) != 1) rc = 1;
    if (!rc) rc = ckpt_walk(m, f, stage, save_one);
    if (fclose(f) != 0 && !rc) rc = 1;
    if (rc == 1) fprintf(stderr, "train_gpt2: could not write checkpoint %s\n", path);
    free(stage);
    return rc;
}

/* ---- stash / restore (the memory techniques) --------------------------------------------- */
/* Copies t to its pinned host buffer and frees the device copy. The buffer is made at the
 * slot's first offload with host_bytes (>= t->bytes), then reused every step: an activation
 * slot passes its size at the largest T (--seq-jitter draws a new T each step, and a later
 * step may draw a larger one than the first), the optimizer state its own size. */
static int offload(gpt2 *m, gpt2_tensor *t, size_t host_bytes)
{
    if (!t->host) {
        CK(cudaMallocHost(&t->host, host_bytes), "cudaMallocHost");
        t->host_bytes = host_bytes;
        if (m->o.trace_allocs) fprintf(stderr, "host-alloc %s %zu\n", t->name, host_bytes);
    }
    assert(t->bytes <= t->host_bytes);
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    CK(cudaEventRecord(ev, m->stream), "cudaEventRecord");
    CK(cudaStreamWaitEvent(m->copy_stream, ev, 0), "cudaStreamWaitEvent");
    /* Not in a dry run: the virtual GPU fills the destination of a copy from unbacked memory
     * with zeros, which would make gigabytes of pinned buffers resident for nothing. */
    if (!m->o.dry_run)
        CK(copy_async(m, t->host, t->p, t->bytes, cudaMemcpyDeviceToHost, m->copy_stream),
           "cudaMemcpyAsync");
    CK(cudaEventDestroy(ev), "cudaEventDestroy");
    /* The free is ordered after the copy on the copy stream. */
    return t_free_on(m, t, m->copy_stream);
}

static int prefetch(gpt2 *m, gpt2_tensor *t)
{
    char name[48];
    memcpy(name, t->name, sizeof name);
    /* the size it had on the device (a ZeRO-3 parameter's numel is the full tensor's) */
    const size_t numel = t->numel;
    TRY(t_alloc_on(m, t, t->bytes / (t->bf16 ? 2 : 4), t->bf16, m->copy_stream, "%s", name));
    t->numel = numel;
    CK(copy_async(m, t->p, t->host, t->bytes, cudaMemcpyHostToDevice, m->copy_stream),
       "cudaMemcpyAsync");
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    CK(cudaEventRecord(ev, m->copy_stream), "cudaEventRecord");
    CK(cudaStreamWaitEvent(m->stream, ev, 0), "cudaStreamWaitEvent");
    CK(cudaEventDestroy(ev), "cudaEventDestroy");
    return 0;
}

/* fp32 <-> bf16 storage: a new tensor of the other type, the old one freed at once. */
static int convert(gpt2 *m, gpt2_tensor *t, int to_bf16)
{
    gpt2_tensor n = {0};
    n.host = t->host;
    n.host_bytes = t->host_bytes; /* the slot's pinned buffer travels with it */
    TRY(t_alloc_on(m, &n, t->numel, to_bf16, m->stream, "%s", t->name));
    if (to_bf16)
        OP("to_bf16", m->be->to_bf16(n.p, t->p, (long)t->numel));
    else
        OP("from_bf16", m->be->from_bf16(n.p, t->p, (long)t->numel));
    TRY(t_free(m, t));
    *t = n;
    return 0;
}

/* The tensors stashed with layer l: its kept activations but its output, plus its input. */
static int stash_set(gpt2 *m, int l, gpt2_tensor **set, int *big)
{
    int n = 0;
    for (int a = 0; a < A_COUNT; a++)
        if (a != A_RES3 && !(m->drop & BIT(a))) {
            big[n] = (G_BIG >> a) & 1;
            set[n++] = act(m, l, a);
        }
    big[n] = 1;
    set[n++] = layer_input(m, l);
    return n;
}

static int stash_layer(gpt2 *m, int l)
{
    for (int a = 0; a < A_COUNT; a++)
        if (m->drop & BIT(a)) TRY(t_free(m, act(m, l, a)));
    if (!m->o.offload_acts && !m->o.bf16) return 0;
    gpt2_tensor *set[A_COUNT + 1];
    int big[A_COUNT + 1];
    const int n = stash_set(m, l, set, big);
    if (m->o.bf16) {
        push("to_bf16");
        for (int i = 0; i < n; i++)
            if (big[i] && set[i]->p && !set[i]->bf16) TRY(convert(m, set[i], 1));
        pop();
    }
    if (m->o.offload_acts) {
        push("offload");
        for (int i = 0; i < n; i++)
            /* Activations are linear in T (B T C, B T, B NH T elements): bytes / T * maxT is
             * exact. */
            if (set[i]->p)
                TRY(offload(m, set[i], set[i]->bytes / (size_t)m->T * (size_t)m->o.T));
        pop();
    }
    return 0;
}

static int layer_forward(gpt2 *m, int l, unsigned need);

static int restore_layer(gpt2 *m, int l)
{
    gpt2_tensor *set[A_COUNT + 1];
    int big[A_COUNT + 1];
    const int n = stash_set(m, l, set, big);
    if (m->o.offload_acts) {
        push("prefetch");
        for (int i = 0; i < n; i++)
            if (!set[i]->p && set[i]->host) TRY(prefetch(m, set[i]));
        pop();
    }
    if (m->o.bf16) {
        push("from_bf16");
        for (int i = 0; i < n; i++)
            if (set[i]->p && set[i]->bf16) TRY(convert(m, set[i], 0));
        pop();
    }
    if (m->drop) {
        push("recompute");
        TRY(layer_forward(m, l, m->drop));
        pop();
    }
    return 0;
}

/* ---- forward ----------------------------------------------------------------------------- */
/* Computes the activations of layer l named in `need` (all in forward; the dropped groups
 * when recomputing), from the layer input and the kept ones. */
static int layer_forward(gpt2 *m, int l, unsigned need)
{
    const int B = m->B, T = m->T, C = m->c.C, NH = m->c.NH, BT = B * T;
    const size_t btc = (size_t)BT * C;
    float *in = layer_input(m, l)->p;
#define A(a) act(m, l, a)
#define AP(a) ((float *)act(m, l, a)->p)
#define LW(lp) P(m, pidx(l, lp))
    if (need & G_LN1) {
        TRY(t_alloc(m, A(A_LN1), btc, "h%d.ln1", l));
        TRY(t_alloc(m, A(A_LN1_MEAN), BT, "h%d.ln1.mean", l));
        TRY(t_alloc(m, A(A_LN1_RSTD), BT, "h%d.ln1.rstd", l));
        OP("ln1", m->be->layernorm_fwd(AP(A_LN1), AP(A_LN1_MEAN), AP(A_LN1_RSTD), in,
                                       LW(LP_LN1_W), LW(LP_LN1_B), BT, C));
    }
    if (need & BIT(A_QKV)) {
        TRY(t_alloc(m, A(A_QKV), 3 * btc, "h%d.attn.qkv", l));
        OP("qkv", m->be->matmul_fwd(AP(A_QKV), AP(A_LN1), LW(LP_QKV_W), LW(LP_QKV_B), BT, C, 3 * C));
    }
    if (need & G_ATT) {
        gpt2_tensor scores = {0};
        TRY(t_alloc(m, A(A_ATTY), btc, "h%d.attn.out", l));
        TRY(t_alloc(m, A(A_LSE), (size_t)B * NH * T, "h%d.attn.lse", l));
        TRY(t_alloc(m, &scores, (size_t)B * NH * T * T, "h%d.attn.scores", l));
        OP("attn", m->be->attention_fwd(AP(A_ATTY), AP(A_LSE), scores.p, AP(A_QKV), B, T, C, NH));
        TRY(t_free(m, &scores));
    }
    if (need & BIT(A_RES2)) {
        gpt2_tensor proj = {0};
        TRY(t_alloc(m, &proj, btc, "h%d.attn.proj", l));
        OP("attproj", m->be->matmul_fwd(proj.p, AP(A_ATTY), LW(LP_ATTPROJ_W), LW(LP_ATTPROJ_B),
                                        BT, C, C));
        TRY(t_alloc(m, A(A_RES2), btc, "h%d.res2", l));
        OP("residual", m->be->residual_fwd(AP(A_RES2), in, proj.p, (long)btc));
        TRY(t_free(m, &proj));
    }
    if (need & G_LN2) {
        TRY(t_alloc(m, A(A_LN2), btc, "h%d.ln2", l));
        TRY(t_alloc(m, A(A_LN2_MEAN), BT, "h%d.ln2.mean", l));
        TRY(t_alloc(m, A(A_LN2_RSTD), BT, "h%d.ln2.rstd", l));
        OP("ln2", m->be->layernorm_fwd(AP(A_LN2), AP(A_LN2_MEAN), AP(A_LN2_RSTD), AP(A_RES2),
                                       LW(LP_LN2_W), LW(LP_LN2_B), BT, C));
    }
    if (need & BIT(A_FCH)) {
        TRY(t_alloc(m, A(A_FCH), 4 * btc, "h%d.mlp.fc", l));
        OP("fc", m->be->matmul_fwd(AP(A_FCH), AP(A_LN2), LW(LP_FC_W), LW(LP_FC_B), BT, C, 4 * C));
    }
    if (need & BIT(A_FCH_GELU)) {
        TRY(t_alloc(m, A(A_FCH_GELU), 4 * btc, "h%d.mlp.gelu", l));
        OP("gelu", m->be->gelu_fwd(AP(A_FCH_GELU), AP(A_FCH), (long)(4 * btc)));
    }
    if (need & BIT(A_RES3)) {
        gpt2_tensor proj = {0};
        TRY(t_alloc(m, &proj, btc, "h%d.mlp.proj", l));
        OP("fcproj", m->be->matmul_fwd(proj.p, AP(A_FCH_GELU), LW(LP_FCPROJ_W), LW(LP_FCPROJ_B),
                                       BT, 4 * C, C));
        TRY(t_alloc(m, A(A_RES3), btc, "h%d.res3", l));
        OP("residual", m->be->residual_fwd(AP(A_RES3), AP(A_RES2), proj.p, (long)btc));
        TRY(t_free(m, &proj));
    }
    return 0;
}

static int forward(gpt2 *m, const int *tok, const int *tgt, float *loss)
{
    const int B = m->B, T = m->T, C = m->c.C, BT = B * T, Vp = m->c.Vp;
    const size_t btc = (size_t)BT * C;
    push("fwd");
    TRY(t_alloc(m, &m->tokens, BT, "tokens"));
    TRY(t_alloc(m, &m->targets, BT, "targets"));
    CK(copy_async(m, m->tokens.p, tok, sizeof(int) * BT, cudaMemcpyHostToDevice, m->stream),
       "cudaMemcpyAsync");
    CK(copy_async(m, m->targets.p, tgt, sizeof(int) * BT, cudaMemcpyHostToDevice, m->stream),
       "cudaMemcpyAsync");
    TRY(units_begin(m, 0));
    TRY(t_alloc(m, &m->encoded, btc, "encoded"));
    OP("encoder", m->be->encoder_fwd(m->encoded.p, m->tokens.p, P(m, P_WTE), P(m, P_WPE), B, T, C));
    TRY(units_end(m, 0));
    for (int l = 0; l < m->c.L; l++) {
        push("h%d", l);
        TRY(units_begin(m, 1 + l));
        TRY(layer_forward(m, l, G_ALL));
        TRY(units_end(m, 1 + l));
        TRY(stash_layer(m, l));
        pop();
    }
    TRY(units_begin(m, m->c.L + 1));
    float *last = act(m, m->c.L - 1, A_RES3)->p;
    TRY(t_alloc(m, &m->lnf, btc, "lnf"));
    TRY(t_alloc(m, &m->lnf_mean, BT, "lnf.mean"));
    TRY(t_alloc(m, &m->lnf_rstd, BT, "lnf.rstd"));
    OP("lnf", m->be->layernorm_fwd(m->lnf.p, m->lnf_mean.p, m->lnf_rstd.p, last, P(m, P_LNF_W),
                                   P(m, P_LNF_B), BT, C));
    TRY(t_alloc(m, &m->logits, (size_t)BT * Vp, "logits"));
    OP("lm_head", m->be->matmul_fwd(m->logits.p, m->lnf.p, P(m, P_WTE), NULL, BT, C, Vp));
    TRY(t_alloc(m, &m->probs, (size_t)BT * Vp, "probs"));
    OP("softmax", m->be->softmax_fwd(m->probs.p, m->logits.p, BT, m->c.V, Vp));
    TRY(t_alloc(m, &m->losses, BT, "losses"));
    OP("crossentropy", m->be->crossentropy_fwd(m->losses.p, m->probs.p, m->targets.p, BT, Vp));
    CK(copy_async(m, m->host_losses, m->losses.p, sizeof(float) * BT, cudaMemcpyDeviceToHost,
                  m->stream),
       "cudaMemcpyAsync");
    CK(cudaStreamSynchronize(m->stream), "cudaStreamSynchronize");
    double s = 0;
    for (int i = 0; i < BT; i++) s += m->host_losses[i];
    *loss = m->o.dry_run ? NAN : (float)(s / BT);
    /* The planted leak: one loss tensor per step (the first micro-batch's) kept to the end. */
    if (m->o.leak && m->nleaked == m->step)
        m->leaked[m->nleaked++] = m->losses, m->losses = (gpt2_tensor){0};
    else
        TRY(t_free(m, &m->losses));
    TRY(units_end(m, m->c.L + 1));
    pop();
    return 0;
}

/* ---- backward ---------------------------------------------------------------------------- */
static int layer_backward(gpt2 *m, int l, float *d)
{
    const int B = m->B, T = m->T, C = m->c.C, NH = m->c.NH, BT = B * T;
    const size_t btc = (size_t)BT * C;
    float *g1, *g2;
    push("h%d", l);
    const int pos = 2 * m->c.L + 2 - l; /* zero3_unit's order: layers L-1..0 after the head */
    TRY(units_begin(m, pos)); /* before restore_layer: a recompute reads the weights */
    TRY(restore_layer(m, l));
    gpt2_tensor t1 = {0}, t2 = {0}, t3 = {0};

    TRY(t_alloc(m, &t1, 4 * btc, "h%d.mlp.d_gelu", l));
    TRY(grad(m, pidx(l, LP_FCPROJ_W), &g1));
    TRY(grad(m, pidx(l, LP_FCPROJ_B), &g2));
    OP("fcproj", m->be->matmul_bwd(t1.p, g1, g2, d, AP(A_FCH_GELU), LW(LP_FCPROJ_W), BT, 4 * C, C));
    GRADS_DONE(pidx(l, LP_FCPROJ_W), pidx(l, LP_FCPROJ_B));
    TRY(t_free(m, A(A_FCH_GELU)));

    TRY(t_alloc(m, &t2, 4 * btc, "h%d.mlp.d_fc", l));
    OP("gelu", m->be->gelu_bwd(t2.p, AP(A_FCH), t1.p, (long)(4 * btc)));
    TRY(t_free(m, &t1));
    TRY(t_free(m, A(A_FCH)));

    TRY(t_alloc(m, &t1, btc, "h%d.d_ln2", l));
    TRY(grad(m, pidx(l, LP_FC_W), &g1));
    TRY(grad(m, pidx(l, LP_FC_B), &g2));
    OP("fc", m->be->matmul_bwd(t1.p, g1, g2, t2.p, AP(A_LN2), LW(LP_FC_W), BT, C, 4 * C));
    GRADS_DONE(pidx(l, LP_FC_W), pidx(l, LP_FC_B));
    TRY(t_free(m, &t2));
    TRY(t_free(m, A(A_LN2)));

    TRY(grad(m, pidx(l, LP_LN2_W), &g1));
    TRY(grad(m, pidx(l, LP_LN2_B), &g2));
    OP("ln2", m->be->layernorm_bwd(d, g1, g2, t1.p, AP(A_RES2), LW(LP_LN2_W), AP(A_LN2_MEAN),
                                   AP(A_LN2_RSTD), BT, C));
    GRADS_DONE(pidx(l, LP_LN2_W), pidx(l, LP_LN2_B));
    TRY(t_free(m, &t1));
    TRY(t_free(m, A(A_LN2_MEAN)));
    TRY(t_free(m, A(A_LN2_RSTD)));
    TRY(t_free(m, A(A_RES2)));

    TRY(t_alloc(m, &t1, btc, "h%d.attn.d_out", l));
    TRY(grad(m, pidx(l, LP_ATTPROJ_W), &g1));
    TRY(grad(m, pidx(l, LP_ATTPROJ_B), &g2));
    OP("attproj", m->be->matmul_bwd(t1.p, g1, g2, d, AP(A_ATTY), LW(LP_ATTPROJ_W), BT, C, C));
    GRADS_DONE(pidx(l, LP_ATTPROJ_W), pidx(l, LP_ATTPROJ_B));
    TRY(t_free(m, A(A_ATTY)));

    TRY(t_alloc(m, &t2, 3 * btc, "h%d.attn.d_qkv", l));
    TRY(t_alloc(m, &t3, (size_t)B * NH * T * T, "h%d.attn.d_scores", l));
    OP("attn", m->be->attention_bwd(t2.p, t3.p, t1.p, AP(A_QKV), AP(A_LSE), B, T, C, NH));
    TRY(t_free(m, &t3));
    TRY(t_free(m, &t1));
    TRY(t_free(m, A(A_LSE)));

    TRY(t_alloc(m, &t1, btc, "h%d.d_ln1", l));
    TRY(grad(m, pidx(l, LP_QKV_W), &g1));
    TRY(grad(m, pidx(l, LP_QKV_B), &g2));
    OP("qkv", m->be->matmul_bwd(t1.p, g1, g2, t2.p, AP(A_LN1), LW(LP_QKV_W), BT, C, 3 * C));
    GRADS_DONE(pidx(l, LP_QKV_W), pidx(l, LP_QKV_B));
    TRY(t_free(m, &t2));
    TRY(t_free(m, A(A_QKV)));
    TRY(t_free(m, A(A_LN1)));

    TRY(grad(m, pidx(l, LP_LN1_W), &g1));
    TRY(grad(m, pidx(l, LP_LN1_B), &g2));
    OP("ln1", m->be->layernorm_bwd(d, g1, g2, t1.p, layer_input(m, l)->p, LW(LP_LN1_W),
                                   AP(A_LN1_MEAN), AP(A_LN1_RSTD), BT, C));
    GRADS_DONE(pidx(l, LP_LN1_W), pidx(l, LP_LN1_B));
    TRY(t_free(m, &t1));
    TRY(t_free(m, A(A_LN1_MEAN)));
    TRY(t_free(m, A(A_LN1_RSTD)));
    TRY(t_free(m, layer_input(m, l)));
    TRY(units_end(m, pos));
    pop();
    return 0;
#undef A
#undef AP
#undef LW
}

static int backward(gpt2 *m, float dloss)
{
    const int B = m->B, T = m->T, C = m->c.C, BT = B * T, Vp = m->c.Vp;
    const size_t btc = (size_t)BT * C;
    float *g1, *g2;
    gpt2_tensor dlogits = {0}, dlnf = {0}, dres = {0};
    push("bwd");
    TRY(units_begin(m, m->c.L + 2));
    TRY(t_alloc(m, &dlogits, (size_t)BT * Vp, "d_logits"));
    OP("crossentropy", m->be->crossentropy_bwd(dlogits.p, m->probs.p, m->targets.p, BT, m->c.V,
                                               Vp, dloss));
    TRY(t_free(m, &m->probs));
    TRY(t_free(m, &m->logits));
    TRY(t_alloc(m, &dlnf, btc, "d_lnf"));
    TRY(grad(m, P_WTE, &g1));
    OP("lm_head", m->be->matmul_bwd(dlnf.p, g1, NULL, dlogits.p, m->lnf.p, P(m, P_WTE), BT, C, Vp));
    TRY(t_free(m, &dlogits));
    TRY(t_free(m, &m->lnf));
    TRY(t_alloc(m, &dres, btc, "d_residual"));
    CK(zero_async(m, dres.p, dres.bytes, m->stream), "cudaMemsetAsync");
    TRY(grad(m, P_LNF_W, &g1));
    TRY(grad(m, P_LNF_B, &g2));
    gpt2_tensor *last = act(m, m->c.L - 1, A_RES3);
    OP("lnf", m->be->layernorm_bwd(dres.p, g1, g2, dlnf.p, last->p, P(m, P_LNF_W), m->lnf_mean.p,
                                   m->lnf_rstd.p, BT, C));
    GRADS_DONE(P_LNF_W, P_LNF_B);
    TRY(t_free(m, &dlnf));
    TRY(t_free(m, &m->lnf_mean));
    TRY(t_free(m, &m->lnf_rstd));
    TRY(t_free(m, last));
    TRY(units_end(m, m->c.L + 2));
    for (int l = m->c.L - 1; l >= 0; l--) TRY(layer_backward(m, l, dres.p));
    TRY(units_begin(m, 2 * m->c.L + 3));
    TRY(grad(m, P_WTE, &g1));
    TRY(grad(m, P_WPE, &g2));
    OP("encoder", m->be->encoder_bwd(g1, g2, dres.p, m->tokens.p, B, T, C));
    GRADS_DONE(P_WTE, P_WPE); /* wte is tied: lm_head's backward was its first half */
    TRY(units_end(m, 2 * m->c.L + 3));
    TRY(t_free(m, &dres));
    TRY(t_free(m, &m->tokens));
    TRY(t_free(m, &m->targets));
    pop();
    return 0;
}

/* ---- optimizer --------------------------------------------------------------------------- */
static int optimizer(gpt2 *m)
{
    const int t = m->step + 1;
    push("opt");
    for (int i = 0; i < m->np; i++) {
        gpt2_tensor *p = &m->params[i], *mm = &m->adam_m[i], *vv = &m->adam_v[i];
        gpt2_tensor *w = fp32_values(m, i); /* what AdamW updates: p, or its master weights */
        const int bf16 = m->o.param_bf16;
        char n[40];
        param_name(m, i, n, sizeof n);
        const int lp = i < P_GLOBAL ? -1 : (i - P_GLOBAL) % LP_COUNT;
        if (lp == 0) push("h%d", (i - P_GLOBAL) / LP_COUNT); /* a layer's parameters */
        const int first = !mm->p && !mm->host;
        /* --zero 1|2|3: AdamW state and the update cover this rank's shard only (at zero 3
         * the parameter is that shard itself). */
        const int zero = m->o.zero, comm = zero || dist_world() > 1;
        size_t off = 0, cnt = p->numel;
        if (zero) dist_own(p->numel, &off, &cnt);
        if (first) {
            const size_t k = zero ? dist_shard_size(p->numel) : p->numel;
            TRY(t_alloc(m, mm, k, "adam.m.%s", n));
            TRY(t_alloc(m, vv, k, "adam.v.%s", n));
            CK(zero_async(m, mm->p, mm->bytes, m->stream), "cudaMemsetAsync");
            CK(zero_async(m, vv->p, vv->bytes, m->stream), "cudaMemsetAsync");
        } else if (m->o.offload_opt) {
            push("prefetch");
            TRY(prefetch(m, mm));
            TRY(prefetch(m, vv));
            pop();
        }
        if ((bf16 && m->o.offload_opt) || m->o.offload_params) {
            /* offloaded from the start: the masters, the parameter shard */
            push("prefetch");
            if (bf16 && m->o.offload_opt) TRY(prefetch(m, w));
            if (m->o.offload_params) TRY(prefetch(m, p));
            pop();
        }
        /* The gradient summed over ranks: all of it (zero 0), this rank's shard (zero 1, in
         * place in grad.<p>), or the shard made in backward (zero 2). Every rank's gradient
         * is already divided by the global batch (gpt2_step), so the sum is the mean. */
        float *g = m->grads[i].p;
        if (zero >= 2) {
            g = m->grad_shards[i].p;
        } else if (zero == 1) {
            COMM("reduce_scatter", dist_reduce_scatter_sum(g, g + off, p->numel));
            g += off;
        } else if (comm) {
            COMM("allreduce", dist_allreduce_sum(g, p->numel));
        }
        if (cnt)
            OP("adamw", m->be->adamw((float *)w->p + (values_sharded(m) ? 0 : off), g, mm->p,
                                     vv->p, (long)cnt, m->o.lr, 0.9f, 0.999f, 1e-8f, m->o.wd, t));
        if (bf16) TRY(publish_param(m, i));
        if (m->o.offload_opt) {
            push("offload");
            TRY(offload(m, mm, mm->bytes));
            TRY(offload(m, vv, vv->bytes));
            if (bf16) TRY(offload(m, w, w->bytes));
            pop();
        }
        if (zero >= 2)
            TRY(t_free(m, &m->grad_shards[i]));
        else if (m->o.grad_none)
            TRY(t_free(m, &m->grads[i]));
        else
            CK(zero_async(m, m->grads[i].p, m->grads[i].bytes, m->stream), "cudaMemsetAsync");
        if (!bf16 && (zero == 1 || zero == 2)) COMM("allgather", dist_allgather(p->p, p->numel, 4));
        if (m->o.offload_params) { /* the updated shard back to the host */
            push("offload");
            TRY(offload(m, p, p->bytes));
            pop();
        }
        if (lp == LP_COUNT - 1) pop();
    }
    pop();
    return 0;
}

int gpt2_step(gpt2 *m, const int *tok, const int *tgt, int Tstep, float *loss)
{
    const int K = m->o.accum, Bm = m->o.B / K, W = dist_world();
    push("step %d", m->step + 1);
    double sum = 0;
    for (int k = 0; k < K; k++) {
        float l = 0;
        m->B = Bm, m->T = Tstep;
        m->last_micro = k == K - 1;
        TRY(forward(m, tok + (size_t)k * Bm * Tstep, tgt + (size_t)k * Bm * Tstep, &l));
        sum += l;
        /* d(mean over the global batch)/d(loss of a token): the ranks' gradients then sum
         * to the global batch's (the all-reduce or reduce-scatter is the average). */
        TRY(backward(m, 1.0f / ((float)Bm * Tstep * K * W)));
    }
    TRY(optimizer(m));
    CK(cudaStreamSynchronize(m->stream), "cudaStreamSynchronize");
    CK(cudaStreamSynchronize(m->copy_stream), "cudaStreamSynchronize");
    pop();
    m->step++;
    *loss = m->o.dry_run || W == 1 ? (float)(sum / K) : (float)(dist_sum_host(sum / K) / W);
    return 0;
}

static void release(gpt2 *m, gpt2_tensor *t)
{
    if (t->p) t_free(m, t);
    if (t->host) cudaFreeHost(t->host);
    t->host = NULL;
}

void gpt2_destroy(gpt2 *m)
{
    if (!m) return;
    if (m->stream) {
        cudaStreamSynchronize(m->stream);
        cudaStreamSynchronize(m->copy_stream);
        for (int i = 0; m->params && i < m->np; i++) {
            release(m, &m->params[i]);
            release(m, &m->grads[i]);
            release(m, &m->adam_m[i]);
            release(m, &m->adam_v[i]);
            release(m, &m->grad_shards[i]);
            release(m, &m->gathered[i]);
            release(m, &m->masters[i]);
        }
        for (int i = 0; m->acts && i < m->c.L * A_COUNT; i++) release(m, &m->acts[i]);
        gpt2_tensor *g[] = {&m->encoded, &m->lnf,   &m->lnf_mean, &m->lnf_rstd, &m->logits,
                            &m->probs,   &m->losses, &m->tokens,  &m->targets};
        for (size_t i = 0; i < sizeof g / sizeof *g; i++) release(m, g[i]);
        /* --leak: the planted leak is a real one, never freed: the program ends holding it,
         * as a leaking program does, so a memory tool finds it alive at exit. */
        cudaStreamSynchronize(m->stream);
        cudaStreamSynchronize(m->copy_stream);
        if (m->be->fini && m->be_ready) m->be->fini();
        cudaStreamDestroy(m->stream);
        cudaStreamDestroy(m->copy_stream);
    }
    free(m->params), free(m->grads), free(m->adam_m), free(m->adam_v), free(m->grad_shards);
    free(m->gathered), free(m->unit_in), free(m->masters);
    free(m->acts);
    free(m->leaked), free(m->host_losses);
    free(m);
}
