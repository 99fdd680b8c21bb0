/* gm_advise_autocast.c — torch.autocast(dtype=torch.bfloat16) predicted op by op, from the
 * forward's op log of a PyTorch recording (`gpumem record --torch-ops`: tables torch_ops and
 * torch_op_args, snapshot/README.md). ADVISE.md, "PyTorch recordings", says what it models.
 * Also from the op log: what save_on_cpu packs beyond the activations' storages (adv_pack_saved),
 * the staging of a bias gradient's sum (adv_reduce_bufs) and what does not shrink with the batch
 * (adv_batch_fixed), at the end.
 *
 * Autocast acts per op (PyTorch's documentation, torch.amp, "Autocast Op Reference"): an op on
 * its lower-precision list (the matmuls, convolutions, scaled_dot_product_attention) casts its
 * fp32 inputs to bf16 and computes in bf16; one on its fp32 list (layer_norm, nll_loss, the
 * reductions and losses) casts bf16 inputs to fp32; every other op runs in the type of its
 * inputs (type promotion: fp32 with bf16 gives fp32). A cast of a leaf that requires a gradient
 * (a parameter) is cached for the autocast region, one forward. The log is of aten ops, below
 * autocast: `linear` is logged as `t` and `addmm`, `layer_norm` as `native_layer_norm`,
 * `cross_entropy` as `_log_softmax` and `nll_loss_forward`, and the lists are read at that level
 * (ops_lowp, ops_fp32 below). `log_softmax` and `softmax` are on the fp32 list only when called
 * without a dtype; cross_entropy calls log_softmax with its input's dtype (it runs in bf16), and
 * the log cannot tell the two calls apart: `_log_softmax` and `_softmax` follow their input here.
 *
 * On the recorded fp32 trace:
 *   - a lower-precision op's first output is bf16 (half its bytes: an attention's log-sum-exp
 *     and random state stay as they are), and each fp32 input it reads gets a bf16 copy, born
 *     before the op's outputs: a parameter's once per forward pass (the cache), dying with the
 *     op's saved activation (its backward node releases both); an activation's for each op,
 *     taking over the activation's recorded death (the op saves the copy now), and the fp32
 *     activation itself dies after the last op that reads it when every reader casts it (and its
 *     producer does not keep its output: softmax, exp, tanh...), or when the module whose frame
 *     holds it returns;
 *   - an fp32-list op's bf16 inputs get fp32 copies (born before its outputs; dying with the
 *     input when the op keeps its input for the backward, else right after the op);
 *   - any other op's new outputs are bf16 when every floating input is;
 *   - an op computing in fp32 from a bf16 input (type promotion) has its node's gradient for that
 *     input converted to bf16, a copy the fp32 recording did not make (mixed_grad_copies);
 *   - the backward is left as recorded (fp32 gradients): the log covers the forward only (a
 *     TorchDispatchMode in the backward makes autograd allocate otherwise: _torch.py), but for
 *     the gradients of cast tensors: the reader's node makes the gradient of the copy (in the
 *     copy's precision) where the recording made the tensor's gradient, and the cast's node
 *     (ToCopyBackward0) converts it after the reader's node has ended and let go of what it
 *     saved (the cast made last in the forward converted first, autograd's order), freeing the
 *     copy's gradient. Measured on gpt2 124M: the bf16 gradient of the tied embedding's copy
 *     made beside it and the fp32 one after the lm_head's node had freed the logits' gradient;
 *     made the other way round, a later block split a free 1.5 GiB segment and PyTorch's
 *     allocator mapped a fourth one (with checkpointing: +19.5% reserved predicted, now 0.1%).
 * A parameter's cached copy that checkpointing drops (gm_advise.c, adv_stash) is still held by
 * the cache until the autocast region exits with the forward.
 */
#include "snapshot/analyze/gm_advise.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ the op lists */


static int in_list(const char *name, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(name, *list)) return 1;
    return 0;
}

/* autocast's lower-precision list (CUDA), as the aten ops it reaches */
static const char *const ops_lowp[] = {
    "addbmm", "addmm", "addmv", "addr", "baddbmm", "bmm", "mm", "mv", "matmul", "linear", "chain_matmul",
    "linalg_multi_dot", "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "cudnn_convolution", "cudnn_convolution_transpose", "prelu",
    "_prelu_kernel", "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math", "_efficient_attention_forward",
    "_flash_attention_forward", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", NULL};
/* its fp32 list, as the aten ops it reaches */
static const char *const ops_fp32[] = {
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "softplus", "native_layer_norm", "layer_norm", "native_group_norm", "group_norm",
    "norm", "linalg_vector_norm", "nll_loss_forward", "nll_loss2d_forward", "nll_loss", "mse_loss", "l1_loss",
    "smooth_l1_loss", "huber_loss", "binary_cross_entropy_with_logits", "kl_div", "_cdist_forward", "cdist",
    "_pdist_forward", "pdist", "dist", "cumprod", "cumsum", "prod", "sum", "renorm", "cosine_similarity",
    "margin_ranking_loss", "soft_margin_loss", "multilabel_margin_loss_forward", "multi_margin_loss",
    "hinge_embedding_loss", "poisson_nll_loss", "triplet_margin_loss", "cosine_embedding_loss", NULL};
/* fp32-list ops whose backward needs no input (the others keep it, and so its fp32 copy) */
static const char *const fp32_no_input[] = {"exp", "expm1", "reciprocal", "rsqrt", "sum", "cumsum", NULL};
/* ops whose backward keeps their output */
static const char *const keeps_output[] = {"_softmax", "_log_softmax", "exp", "expm1", "tanh", "sigmoid",
                                           "rsqrt", "sqrt", "relu", "reciprocal", NULL};

enum { OPK_OTHER = 0, OPK_LOWP = 1, OPK_FP32 = 2 };
typedef struct opclass {
    uint8_t kind;      /* OPK_*: which of autocast's lists the op is on */
    uint8_t saves_in;  /* an fp32-list op that keeps its (cast) input for its backward */
    uint8_t saves_out; /* keeps its output for its backward (softmax, exp, tanh...) */
} opclass;

static opclass classify(const char *op)
{
    char nb[96];
    const char *name = adv_op_base(op, nb, sizeof nb);
    opclass c = {0};
    c.kind = in_list(name, ops_lowp) ? OPK_LOWP : in_list(name, ops_fp32) ? OPK_FP32 : OPK_OTHER;
    c.saves_in = c.kind == OPK_FP32 && !in_list(name, fp32_no_input);
    c.saves_out = (uint8_t)in_list(name, keeps_output);
    return c;
}

/* The order autocast casts an op's inputs in: its wrapper casts the arguments of the op it wraps
 * as one call's arguments, which GCC (PyTorch's wheels) evaluates right to left. The log holds
 * the aten op below: `linear(input, weight, bias)` is logged as `t` and `addmm(bias, input,
 * weight.t())`, so an add-matmul (the linear's, by far the most common) casts its first input
 * (the bias) first, then the others right to left; any other op all of them right to left. The
 * k-th input cast, of an op whose nout outputs come first among its n arguments. */
static const char *const ops_add_mm[] = {"addmm", "addmv", "addbmm", "baddbmm", NULL}; /* added term first */
static const char *const ops_mm[] = {"mm", "bmm", "mv", "matmul", NULL};
static const char *const ops_norm[] = {"native_layer_norm", "native_group_norm", NULL}; /* input, weight, bias */

static int add_op(const char *op)
{
    char nb[96];
    return in_list(adv_op_base(op, nb, sizeof nb), ops_add_mm);
}

static uint32_t cast_order(uint32_t q, uint32_t nout, uint32_t n, int add_first)
{
    if (q < nout) return q;
    uint32_t k = q - nout;
    if (add_first) return k == 0 ? nout : n - k;
    return n - 1 - k;
}

/* ------------------------------------------------------------------ the rewrite */

/* an event for allocation a inserted at anchor (adv_rw: gm_advise.c's edit list), among those
 * at one place after the ones with a smaller prio */
static void ac_add_prio(adv_rw *w, const adv_model *m, size_t anchor, int where, uint32_t prio, uint32_t a,
                        uint8_t kind)
{
    adv_rw_add(w, anchor, where, prio, adv_ev_like(&m->evs[anchor], a, kind, m->allocs[a].stream));
}

static void ac_add(adv_rw *w, const adv_model *m, size_t anchor, int where, uint32_t a, uint8_t kind)
{
    ac_add_prio(w, m, anchor, where, UINT32_MAX, a, kind);
}

/* where the backward node running at event i has ended: before the first allocation after the
 * last one it made (starts: each node's start, as the last allocation before it, sorted; its
 * frees of what it saved come between); SIZE_MAX when none follows */
static size_t after_node(const adv_model *m, const size_t *starts, size_t nstarts, size_t i)
{
    size_t lo = 0, hi = nstarts;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (starts[mid] < i)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == nstarts) return SIZE_MAX;
    for (size_t j = starts[lo] + 1; j < m->nevs; j++)
        if (m->evs[j].kind == ADV_EV_ALLOC) return j;
    return SIZE_MAX;
}


/* deaths[c] for copy c, the array grown (SIZE_MAX where none is set) to hold it */
static int death_slot(size_t **deaths, size_t *cap, size_t c)
{
    size_t old = *cap;
    if (gm_grow((void **)deaths, cap, c + 1, sizeof **deaths)) return -1;
    for (size_t i = old; i < *cap; i++)
        (*deaths)[i] = SIZE_MAX;
    return 0;
}

/* where a cast's node makes the gradient recorded at event b (dying at event d): after the node
 * that made it has ended, before its own death (a node that frees it before allocating) */
static size_t made_at(const adv_model *m, const size_t *starts, size_t nstarts, size_t b, size_t d)
{
    size_t at = after_node(m, starts, nstarts, b);
    return at == SIZE_MAX ? d : d == SIZE_MAX || at < d ? at : d;
}

/* The gradient g of a tensor a reader cast: the reader's node makes the gradient of the copy
 * (bytes, in the precision the reader computed in) where the recording made g, and the cast's
 * node (ToCopyBackward0) converts it into g after the reader's node has ended, freeing it; the
 * cast made last in the forward runs first (autograd's order). at: where the reader's node ends
 * (made_at), SIZE_MAX unknown: g is then made where recorded, the temporary around it. */
static int cast_grad_temp(adv_model *m, adv_rw *w, size_t g_birth, uint32_t g, uint64_t bytes, size_t at,
                          size_t cast_at)
{
    uint32_t c = adv_new_alloc(m, bytes, m->allocs[g].stream, m->allocs[g].cls, 0, g);
    if (c == UINT32_MAX) return -1;
    ac_add(w, m, g_birth, -1, c, ADV_EV_ALLOC);
    if (at == SIZE_MAX) {
        ac_add(w, m, g_birth, 1, c, ADV_EV_FREE_ASYNC);
        return 0;
    }
    w->drop[g_birth] = 1;
    uint32_t prio = UINT32_MAX - 1 - (uint32_t)(cast_at < UINT32_MAX - 1 ? cast_at : 0);
    ac_add_prio(w, m, at, -1, prio, g, ADV_EV_ALLOC);
    ac_add_prio(w, m, at, -1, prio, c, ADV_EV_FREE_ASYNC);
    return 0;
}

/* Each forward op's backward node, from the op log's backward tops (a node's top holds the last
 * allocation made before it started): start[i], that allocation's event (start NULL: not
 * wanted), and end[i], the node's own last allocation's (the next node's start; its start when
 * no node follows), for forward op i; SIZE_MAX where unknown. The node lets go of what it saved
 * when it has run: after end[i]. */
static void node_spans(const adv_model *m, const size_t *birth, size_t nrec, size_t *start, size_t *end)
{
    size_t nt = m->ntops;
    for (size_t i = 0; i < nt; i++) {
        end[i] = SIZE_MAX;
        if (start) start[i] = SIZE_MAX;
    }
    for (size_t i = 0; i < nt; i++) {
        const adv_top *t = &m->tops[i];
        if (!t->bwd || t->fwd >= nt) continue;
        size_t j = i + 1;
        while (j < nt && !m->tops[j].bwd)
            j++;
        const adv_top *next = j < nt ? &m->tops[j] : t;
        if (start && t->last_a < nrec && birth[t->last_a] != SIZE_MAX) start[t->fwd] = birth[t->last_a];
        if (next->last_a < nrec && birth[next->last_a] != SIZE_MAX) end[t->fwd] = birth[next->last_a];
    }
}

/* each allocation's event in *birth (SIZE_MAX: none) and each forward op's node in *start and
 * *end (node_spans), in arrays made here for the caller to free (all three, also on failure:
 * NULL where not made); -1 out of memory */
static int births_spans(const adv_model *m, size_t nrec, size_t **birth, size_t **start, size_t **end)
{
    size_t nt = m->ntops;
    *birth = malloc((m->nallocs + 1) * sizeof **birth);
    *start = malloc((nt + 1) * sizeof **start), *end = malloc((nt + 1) * sizeof **end);
    if (!*birth || !*start || !*end) return -1;
    for (size_t a = 0; a < m->nallocs; a++)
        (*birth)[a] = SIZE_MAX;
    for (size_t i = 0; i < m->nevs; i++)
        if (m->evs[i].kind == ADV_EV_ALLOC) (*birth)[m->evs[i].a] = i;
    node_spans(m, *birth, nrec, *start, *end);
    return 0;
}

/* ------------------------------------------------------------------ FlashAttention */

/* In bf16, PyTorch's scaled_dot_product_attention runs FlashAttention (flash-attn 2, in
 * aten/src/ATen/native/transformers/cuda/flash_attn), where the fp32 recording ran the
 * memory-efficient kernel, and their temporaries differ. Forward: when the batch's blocks of 64
 * queries (B x H x ceil(T / 64)) fill less than 0.8 of the device's 2 x SMs blocks and dropout
 * is off, the keys are split in n (the first split count whose waves are at least 0.85 as
 * efficient as the best's, among those that change the keys' blocks per split), with two fp32
 * accumulators (n x B x H x T, and that x the head size rounded up to 32) made after the
 * output and freed when the kernel is queued. Backward: an fp32 dq accumulator (B x T x H x the
 * rounded head size, T rounded up to 128) and the softmax's row sums (B x H x T, rounded), for
 * the efficient kernel's temporaries. */
enum { FLASH_SMS = 132 /* the virtual GPU's H100 profile (REDUCE_SMS) */ };

unsigned adv_flash_splits(uint64_t batch, uint64_t heads, uint64_t seq, uint64_t head_dim)
{
    uint64_t block_n = head_dim <= 64 ? 256 : head_dim <= 128 ? 128 : 64, n_blocks = (seq + block_n - 1) / block_n;
    uint64_t blocks = batch * heads * ((seq + 63) / 64), sms = 2 * FLASH_SMS;
    if (!blocks || (double)blocks >= 0.8 * (double)sms) return 1;
    uint64_t top = n_blocks < 128 ? n_blocks : 128; /* at most 128 splits, one block of keys each */
    double eff[129] = {0}, best = 0;
    for (uint64_t n = 1; n <= top; n++) {
        /* n splits the keys' blocks differently from n - 1 */
        if (n > 1 && (n_blocks + n - 1) / n == (n_blocks + n - 2) / (n - 1)) continue;
        double waves = (double)(blocks * n) / (double)sms, full = (double)(uint64_t)waves;
        if (full < waves) full += 1;
        eff[n] = waves / full;
        if (eff[n] > best) best = eff[n];
    }
    for (uint64_t n = 1; n <= top; n++)
        if (eff[n] > 0 && eff[n] >= 0.85 * best) return (unsigned)n;
    return 1;
}

static uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

/* The efficient kernel of sdpa op t replaced by FlashAttention's (above), at the recorded batch,
 * with the split decided at the micro-batch's (the recorded batch / k: accumulation shrinks what
 * is made here with the rest). 1 done, 0 not an efficient sdpa with its query's shape logged. */
static int flash_attention(adv_model *m, adv_rw *w, const adv_top *t, const size_t *birth, const size_t *death,
                           size_t nstart, size_t nend, size_t nrec, unsigned k)
{
    char nb[96];
    if (strcmp(adv_op_base(adv_str(m, t->name), nb, sizeof nb), "_scaled_dot_product_efficient_attention")) return 0;
    const adv_targ *out = NULL, *lse = NULL, *q = NULL;
    for (uint32_t i = 0; i < t->nargs; i++) {
        const adv_targ *g = &m->targs[t->arg0 + i];
        if (g->out && !out) out = g;
        else if (g->out && !lse) lse = g;
        else if (!g->out && !q) q = g;
    }
    if (!out || !lse || !q || q->ndim != 4 || out->a >= nrec || lse->a >= nrec || birth[lse->a] == SIZE_MAX)
        return 0;
    uint64_t B = q->dims[0], H = q->dims[1], T = q->dims[2], D = q->dims[3];
    if (!B || !H || !T || !D || D % 8 || D > 256) return 0; /* not a shape FlashAttention runs */
    uint64_t Dr = round_up(D, D <= 128 ? 32 : 64), Tr = round_up(T, 128), kb = k ? k : 1;
    /* forward: the split accumulators, after the outputs */
    unsigned n = adv_flash_splits(B / kb ? B / kb : 1, H, T, D);
    if (n > 1) {
        size_t at = birth[lse->a];
        uint32_t l = adv_new_alloc(m, (uint64_t)n * B * H * T * 4, m->allocs[lse->a].stream, m->allocs[lse->a].cls, 0,
                                   lse->a);
        uint32_t o = l == UINT32_MAX ? l : adv_new_alloc(m, (uint64_t)n * B * H * T * Dr * 4, m->allocs[lse->a].stream,
                                                         m->allocs[lse->a].cls, 0, lse->a);
        if (o == UINT32_MAX) return -1;
        ac_add(w, m, at, 1, l, ADV_EV_ALLOC);
        ac_add(w, m, at, 1, o, ADV_EV_ALLOC);
        ac_add(w, m, at, 1, l, ADV_EV_FREE_ASYNC);
        ac_add(w, m, at, 1, o, ADV_EV_FREE_ASYNC);
    }
    /* backward: what the node made and freed before letting go of what it saved */
    if (nstart == SIZE_MAX || nend == SIZE_MAX) return 1;
    uint32_t tmp[16];
    size_t ntmp = 0; /* in the order they were made */
    for (size_t i = nstart + 1; i <= nend && i < m->nevs; i++) {
        const adv_ev *e = &m->evs[i];
        if (e->kind != ADV_EV_ALLOC || e->a >= nrec || death[e->a] == SIZE_MAX || ntmp == 16) continue;
        size_t d = death[e->a];
        int inside = 1; /* freed before the node let go of anything older than it */
        for (size_t j = i + 1; j < d && inside; j++)
            inside = !(m->evs[j].kind != ADV_EV_ALLOC && m->evs[j].a < nrec && birth[m->evs[j].a] <= nstart);
        if (!inside) continue;
        tmp[ntmp++] = e->a;
    }
    if (ntmp < 2) return 1;
    /* the last two made stay where they are, as the softmax's sums and the dq accumulator (the
     * last one may be where the op log places the next node: it stays), the others go */
    for (size_t x = 0; x + 2 < ntmp; x++)
        w->drop[birth[tmp[x]]] = w->drop[death[tmp[x]]] = 1;
    m->allocs[tmp[ntmp - 2]].size = B * H * Tr * 4;
    m->allocs[tmp[ntmp - 1]].size = B * Tr * H * Dr * 4;
    return 1;
}

/* Forward op f computed in fp32 from a bf16 input (type promotion: the residual's add of a bf16
 * projection to the fp32 stream): its node passes its fp32 gradient on, and autograd converts the
 * one for the bf16 input to that input's type. The fp32 recording passed one tensor to both; here
 * a bf16 copy is made when f's node has run (after what it let go of) and let go of when the node
 * of the op that made the input has. Measured on gpt2-medium at B 2 with checkpointing: a 4 MiB
 * copy before each block's two projections' AddmmBackward0. 0, or -1 out of memory. */
static int mixed_grad_copies(adv_model *m, adv_rw *w, uint32_t f, const opclass *cls, const uint8_t *low,
                             const size_t *prod, const size_t *node_end, size_t nrec)
{
    const adv_top *t = &m->tops[f];
    if (cls[f].kind != OPK_OTHER || !t->nargs || node_end[f] == SIZE_MAX) return 0;
    const adv_targ *y = &m->targs[t->arg0];
    if (!y->out || y->dtype != ADV_DT_F32 || (y->a < nrec && low[y->a])) return 0;
    for (uint32_t k = 1; k < t->nargs; k++) {
        const adv_targ *g = &m->targs[t->arg0 + k];
        if (g->out || g->a >= nrec || (g->dtype != ADV_DT_LOW && !(g->dtype == ADV_DT_F32 && low[g->a]))) continue;
        size_t p = prod[g->a];
        if (p == SIZE_MAX || node_end[p] == SIZE_MAX || node_end[p] <= node_end[f]) continue;
        uint64_t bytes = g->dtype == ADV_DT_LOW ? g->bytes : (g->bytes + 1) / 2;
        uint32_t c = adv_new_alloc(m, bytes, m->allocs[g->a].stream, m->allocs[g->a].cls, 0, g->a);
        if (c == UINT32_MAX) return -1;
        size_t at = node_end[f] + 1; /* before the next allocation: after what f's node let go of */
        while (at < node_end[p] && m->evs[at].kind != ADV_EV_ALLOC)
            at++;
        ac_add(w, m, at, -1, c, ADV_EV_ALLOC);
        ac_add(w, m, node_end[p], 1, c, ADV_EV_FREE_ASYNC);
    }
    return 0;
}

int adv_autocast(adv_model *m, adv_autocast_stats *st, uint8_t *in_place, unsigned k)
{
    memset(st, 0, sizeof *st);
    if (!m->ntops) return 0;
    if (adv_model_own(m) != 0) return -1;
    size_t nrec = m->nrecorded ? m->nrecorded : m->nallocs, nev = m->nevs, nt = m->ntops;
    size_t *birth = malloc((m->nallocs + 1) * sizeof *birth), *death = malloc((m->nallocs + 1) * sizeof *death);
    size_t *bwd_before = malloc((nev + 1) * sizeof *bwd_before); /* backward events before each event */
    /* per recorded allocation: bf16 under autocast; read by an op that does not cast it; kept by
     * its producer for the backward; cast to bf16 by a reader / to fp32 by one; a forward tensor;
     * a gradient already rewritten */
    uint8_t *low = calloc(nrec + 1, 1), *other_reader = calloc(nrec + 1, 1), *kept = calloc(nrec + 1, 1);
    uint8_t *cast_low = calloc(nrec + 1, 1), *cast_f32 = calloc(nrec + 1, 1), *fwd_tensor = calloc(nrec + 1, 1);
    uint8_t *done = calloc(nrec + 1, 1), *cast_grad = calloc(nrec + 1, 1); /* made by a cast's node */
    size_t *last_lowp = malloc((nrec + 1) * sizeof *last_lowp); /* the last lower-precision op reading it */
    size_t *node_end = malloc((nt + 1) * sizeof *node_end); /* where a forward op's backward node ended */
    size_t *node_start = malloc((nt + 1) * sizeof *node_start); /* and started */
    uint32_t *cache = malloc((nrec + 1) * sizeof *cache); /* a parameter's bf16 copy in this pass */
    size_t *cast_at = malloc((nrec + 1) * sizeof *cast_at); /* where its last cast copy was made */
    size_t nstarts = 0, *starts = adv_node_starts(m, &nstarts); /* backward nodes' starts */
    size_t *cache_pass = malloc((nrec + 1) * sizeof *cache_pass), *copy_death = NULL;
    size_t *prod = adv_op_makers(m); /* the forward op that made it */
    size_t ncopy_cap = 0;
    opclass *cls = malloc((nt + 1) * sizeof *cls); /* each op's place on autocast's lists */
    adv_rw w; /* (its drop: the recorded events dropped; NULL when out of memory) */
    int rc = -1;
    adv_rw_init(&w, m);
    uint8_t *drop = w.drop;
    if (cls)
        for (size_t i = 0; i < nt; i++)
            cls[i] = classify(adv_str(m, m->tops[i].name));
    if (!cls || !birth || !death || !bwd_before || !low || !other_reader || !kept || !cast_low || !cast_f32 ||
        !fwd_tensor || !done || !cast_grad || !last_lowp || !node_end || !drop || !cache || !cache_pass || !cast_at ||
        !starts || !node_start || !prod)
        goto out;
    for (size_t a = 0; a < m->nallocs; a++)
        birth[a] = death[a] = SIZE_MAX;
    for (size_t i = 0, nb = 0; i < nev; i++) {
        const adv_ev *e = &m->evs[i];
        if (e->kind == ADV_EV_ALLOC) birth[e->a] = i;
        else death[e->a] = i;
        bwd_before[i] = nb;
        nb += e->phase == ADV_PH_BWD;
    }
    for (size_t a = 0; a < nrec; a++)
        last_lowp[a] = SIZE_MAX, cache_pass[a] = SIZE_MAX, cast_at[a] = SIZE_MAX;
    /* each forward op's backward node ends where the next node starts (its saved tensors are let
     * go when it has run) */
    node_spans(m, birth, nrec, node_start, node_end);
    /* who reads each recorded tensor: casting readers only, or some other op too */
    for (size_t i = 0; i < nt; i++) {
        const adv_top *t = &m->tops[i];
        if (t->bwd) continue;
        int view = 1; /* an op whose outputs are all its inputs' storages reads nothing itself */
        for (uint32_t k = 0; k < t->nargs; k++) {
            const adv_targ *g = &m->targs[t->arg0 + k];
            if (g->a < nrec) fwd_tensor[g->a] = 1;
            if (g->out && !adv_top_reads(m, t, g->a)) view = 0;
            if (g->out && cls[i].saves_out && g->a < nrec) kept[g->a] = 1;
        }
        for (uint32_t k = 0; k < t->nargs; k++) {
            const adv_targ *g = &m->targs[t->arg0 + k];
            if (g->out || g->a >= nrec || g->dtype != ADV_DT_F32) continue;
            if (cls[i].kind == OPK_LOWP) last_lowp[g->a] = i;
            else if (!view) other_reader[g->a] = 1;
        }
    }
    size_t pass = 0, prev_bwd = SIZE_MAX;
    for (size_t i = 0; i < nt; i++) {
        const adv_top *t = &m->tops[i];
        if (t->last_a >= nrec || birth[t->last_a] == SIZE_MAX) continue;
        size_t op_ev = birth[t->last_a];
        if (t->bwd) {
            /* the gradients of the forward op's outputs: each in its output's precision, and a
             * temporary in the precision its reader computed in where a reader cast it (autograd's
             * node for the cast converts the gradient back) */
            if (t->fwd == UINT32_MAX) continue;
            const adv_top *f = &m->tops[t->fwd];
            if (mixed_grad_copies(m, &w, t->fwd, cls, low, prod, node_end, nrec) != 0) goto out;
            uint32_t j = 0;
            for (uint32_t k = 0; k < t->nargs; k++, j++) {
                const adv_targ *g = &m->targs[t->arg0 + k];
                const adv_targ *y = NULL;
                for (uint32_t q = 0, n = 0; q < f->nargs; q++)
                    if (m->targs[f->arg0 + q].out && n++ == j) y = &m->targs[f->arg0 + q];
                if (!y || y->a >= nrec || g->a >= nrec || done[g->a] || fwd_tensor[g->a] ||
                    birth[g->a] == SIZE_MAX || g->dtype != ADV_DT_F32)
                    continue;
                done[g->a] = 1;
                uint64_t size = m->allocs[g->a].size;
                cast_grad[g->a] = low[y->a] ? cast_f32[y->a] : cast_low[y->a];
                if (cast_grad[g->a] &&
                    cast_grad_temp(m, &w, birth[g->a], g->a, low[y->a] ? size : (size + 1) / 2,
                                   made_at(m, starts, nstarts, birth[g->a], death[g->a]), cast_at[y->a]) != 0)
                    goto out;
                if (low[y->a]) {
                    m->allocs[g->a].size = (size + 1) / 2;
                    st->halved++;
                }
            }
            continue;
        }
        if (bwd_before[op_ev] != prev_bwd) pass++, prev_bwd = bwd_before[op_ev];
        /* where the copies are born: before the op's first new output, else after the op */
        size_t at = SIZE_MAX;
        for (uint32_t k = 0; k < t->nargs; k++) {
            const adv_targ *g = &m->targs[t->arg0 + k];
            if (g->out && g->a < nrec && birth[g->a] != SIZE_MAX && !adv_top_reads(m, t, g->a) &&
                (at == SIZE_MAX || birth[g->a] < at))
                at = birth[g->a];
        }
        size_t anchor = at != SIZE_MAX ? at : op_ev;
        int where = at != SIZE_MAX ? -1 : 1;
        /* the op's saved activation: its first floating input born in a forward */
        uint32_t act = UINT32_MAX;
        for (uint32_t k = 0; k < t->nargs && act == UINT32_MAX; k++) {
            const adv_targ *g = &m->targs[t->arg0 + k];
            if (!g->out && g->a < nrec && g->dtype == ADV_DT_F32 && birth[g->a] != SIZE_MAX &&
                m->evs[birth[g->a]].phase == ADV_PH_FWD)
                act = g->a;
        }
        int any_float = 0, all_low = 1;
        uint32_t nout = 0;
        while (nout < t->nargs && m->targs[t->arg0 + nout].out)
            nout++;
        int add_first = add_op(adv_str(m, t->name));
        for (uint32_t q = 0; q < t->nargs; q++) {
            const adv_targ *g = &m->targs[t->arg0 + cast_order(q, nout, t->nargs, add_first)];
            if (g->out || (g->dtype != ADV_DT_F32 && g->dtype != ADV_DT_LOW)) continue;
            int is_low = g->dtype == ADV_DT_LOW || (g->a < nrec && low[g->a]);
            any_float = 1, all_low &= is_low;
            if (g->a >= nrec || birth[g->a] == SIZE_MAX) continue;
            if (cls[i].kind == OPK_LOWP && !is_low) {
                /* the copies live until the op's backward node has run (a parameter's copy, cached
                 * for the pass, until its last reader's); without the node: a parameter's with the
                 * op's saved activation (after the op when it has none), an activation's with it */
                int param = m->evs[birth[g->a]].phase != ADV_PH_FWD;
                size_t dies = node_end[i] != SIZE_MAX ? node_end[i]
                              : !param               ? death[g->a]
                              : act != UINT32_MAX    ? death[act]
                                                     : SIZE_MAX - 1;
                cast_low[g->a] = 1;
                cast_at[g->a] = anchor;
                uint32_t c;
                if (param && cache_pass[g->a] == pass) {
                    c = cache[g->a];
                } else {
                    c = adv_new_alloc(m, (g->bytes + 1) / 2, m->allocs[g->a].stream, m->allocs[g->a].cls, 0, g->a);
                    if (c == UINT32_MAX) goto out;
                    if (death_slot(&copy_death, &ncopy_cap, c)) goto out;
                    ac_add(&w, m, anchor, where, c, ADV_EV_ALLOC);
                    st->copies++, st->cast_bytes += g->bytes;
                    if (param) cache[g->a] = c, cache_pass[g->a] = pass;
                }
                if (!param && !other_reader[g->a] && !kept[g->a] && last_lowp[g->a] == i && death[g->a] != SIZE_MAX &&
                    !drop[death[g->a]]) {
                    /* every reader casts it: the fp32 activation goes after this, its last one,
                     * or when the module whose frame holds it returns (tops_load's holds) */
                    uint32_t h = m->tholds ? m->tholds[g->a] : UINT32_MAX;
                    size_t go = h < nrec && birth[h] != SIZE_MAX && birth[h] > op_ev && birth[h] < death[g->a]
                                    ? birth[h]
                                    : op_ev;
                    drop[death[g->a]] = 1;
                    ac_add(&w, m, go, 1, g->a, m->evs[death[g->a]].kind);
                }
                if (dies == SIZE_MAX - 1) ac_add(&w, m, op_ev, 1, c, ADV_EV_FREE_ASYNC);
                else if (dies != SIZE_MAX && (copy_death[c] == SIZE_MAX || dies > copy_death[c])) copy_death[c] = dies;
            } else if (cls[i].kind == OPK_FP32 && is_low) {
                cast_f32[g->a] = 1;
                cast_at[g->a] = anchor;
                uint32_t c = adv_new_alloc(m, g->bytes, m->allocs[g->a].stream, m->allocs[g->a].cls, 0, g->a);
                if (c == UINT32_MAX || death_slot(&copy_death, &ncopy_cap, c)) goto out;
                ac_add(&w, m, anchor, where, c, ADV_EV_ALLOC);
                copy_death[c] = !cls[i].saves_in ? SIZE_MAX : node_end[i] != SIZE_MAX ? node_end[i] : death[g->a];
                if (!cls[i].saves_in) ac_add(&w, m, op_ev, 1, c, ADV_EV_FREE_ASYNC);
                st->copies++, st->cast_bytes += g->bytes;
            }
        }
        /* a Linear's bias, cast: its gradient is the sum of the bf16 gradient, in bf16, which the
         * cast's node converts (the recording summed in fp32: its first allocation of the bias's
         * size in the op's node) */
        char nb[96];
        if (cls[i].kind == OPK_LOWP && t->nargs >= 2 && node_start[i] != SIZE_MAX && node_end[i] != SIZE_MAX &&
            !strcmp(adv_op_base(adv_str(m, t->name), nb, sizeof nb), "addmm")) {
            const adv_targ *bias = NULL;
            for (uint32_t q = 0; q < t->nargs && !bias; q++)
                if (!m->targs[t->arg0 + q].out) bias = &m->targs[t->arg0 + q];
            int param = bias && bias->a < nrec && birth[bias->a] != SIZE_MAX &&
                        m->evs[birth[bias->a]].phase != ADV_PH_FWD && bias->dtype == ADV_DT_F32 && !low[bias->a];
            for (size_t j = node_start[i] + 1; param && j <= node_end[i] && j < nev; j++) {
                const adv_ev *e = &m->evs[j];
                if (e->kind != ADV_EV_ALLOC || e->a >= nrec || m->allocs[e->a].size != bias->bytes) continue;
                if (!done[e->a]) {
                    done[e->a] = cast_grad[e->a] = 1;
                    if (cast_grad_temp(m, &w, j, e->a, (bias->bytes + 1) / 2,
                                       made_at(m, starts, nstarts, j, death[e->a]), cast_at[bias->a]) != 0)
                        goto out;
                }
                break;
            }
        }
        /* the outputs' precision */
        int first = 1;
        for (uint32_t k = 0; k < t->nargs; k++) {
            const adv_targ *g = &m->targs[t->arg0 + k];
            if (!g->out) continue;
            int lead = first;
            first = 0;
            if (g->a >= nrec || g->dtype != ADV_DT_F32 || low[g->a] || adv_top_reads(m, t, g->a)) continue;
            int to_low = cls[i].kind == OPK_LOWP ? lead : cls[i].kind == OPK_OTHER && any_float && all_low;
            if (to_low) {
                low[g->a] = 1;
                m->allocs[g->a].size = (m->allocs[g->a].size + 1) / 2;
                st->halved++;
            }
        }
    }
    /* the copies' deaths: after the event they die with (a node's last allocation); before it when
     * that is a gradient a cast's node makes (the node that saved the copy ran before the cast's) */
    for (size_t c = nrec; c < m->nallocs; c++)
        if (c < ncopy_cap && copy_death[c] != SIZE_MAX) {
            const adv_ev *e = &m->evs[copy_death[c]];
            int before = e->kind == ADV_EV_ALLOC && e->a < nrec && cast_grad[e->a];
            ac_add(&w, m, copy_death[c], before ? -1 : 1, (uint32_t)c, ADV_EV_FREE_ASYNC);
        }
    /* the attention's kernels: FlashAttention's in bf16 */
    for (size_t i = 0; i < nt; i++) {
        const adv_top *t = &m->tops[i];
        if (t->bwd || t->last_a >= nrec) continue;
        int r = flash_attention(m, &w, t, birth, death, node_start[i], node_end[i], nrec, k);
        if (r < 0) goto out;
        st->flash += (size_t)r;
    }
    /* where two contributions meet (a tied weight's: the head's and the embedding's), autograd
     * adds them out of place into a sum born just before both are freed; in place in the first
     * when a cast's node made it (a new dense tensor autograd may take over; the recording's, a
     * matmul's transposed result, it may not): adv_sums_in_place merges them, after accumulation
     * has made its micro-batches */
    for (size_t s = 0; in_place && s < nrec; s++) {
        uint32_t first = birth[s] == SIZE_MAX ? UINT32_MAX : adv_sum_first(m, birth, birth[s]);
        if (first < nrec && cast_grad[first] && !in_place[first]) in_place[first] = 1, st->sums_in_place++;
    }
    if (adv_rw_apply(m, &w) != 0) goto out;
    rc = 0;
out:
    free(prod);
    free(birth), free(death), free(bwd_before), free(low), free(other_reader), free(kept), free(cast_low);
    free(cast_f32), free(fwd_tensor), free(done), free(cast_grad), free(last_lowp), free(node_end), free(cache);
    free(cache_pass), free(copy_death), free(cls), free(cast_at), free(starts), free(node_start);
    adv_rw_free(&w);
    return rc;
}

/* ------------------------------------------------------------------ save_on_cpu's packs */

/* Which of an op's inputs (n: its base name) its backward node saves, of those a parameter can
 * be (gm_advise.h, adv_pack_saved): 0 none; else a mask over its inputs (bit k: the k-th input).
 * *view: those of them saved as a view that is not contiguous, a Linear's weight.t() (the matmul's
 * second factor; its first, the input, is contiguous). *factors: a matmul's two factors, each
 * saved only for the other's gradient (derivatives.yaml: mat2 for mat1's, mat1 for mat2's), so
 * only where the other requires one. */
static unsigned saved_params(const char *n, unsigned *view, unsigned *factors)
{
    *view = *factors = 0;
    if (in_list(n, ops_add_mm)) return *view = 4u, *factors = 6u; /* the two factors, not the added term (the bias) */
    if (in_list(n, ops_mm)) return *view = 2u, *factors = 3u;
    if (strstr(n, "convolution") || !strncmp(n, "conv", 4)) return 2u; /* the weight */
    if (in_list(n, ops_norm)) return 6u;                                /* weight, bias */
    return 0;
}

/* Which of op t's inputs (a mask, as saved_params's) require a gradient as far as the op log
 * tells: a tensor the forward made (born in a forward phase), or at a weight's place (weights, a
 * mask) a parameter's storage (born outside every step). What the forward was given requires
 * none: the batch, made in the step before it or before the loop (the op log has no
 * requires_grad; a Linear's input is never its parameter). */
static unsigned grad_inputs(const adv_model *m, const adv_top *t, const size_t *birth, size_t nrec, unsigned weights)
{
    unsigned req = 0, k = 0;
    for (uint32_t q = 0; q < t->nargs; q++) {
        const adv_targ *g = &m->targs[t->arg0 + q];
        if (g->out) continue;
        unsigned bit = 1u << (k < 31 ? k : 31);
        k++;
        if (g->a >= nrec) continue;
        size_t b = birth[g->a];
        if (((weights & bit) && (b == SIZE_MAX || m->evs[b].step < 0)) || (b != SIZE_MAX && m->evs[b].phase == ADV_PH_FWD))
            req |= bit;
    }
    return req;
}

/* An op whose backward node is given a saved input its kernel never reads (so no use in the
 * trace places its unpack): nll_loss keeps its input, the log-probabilities, for their shape
 * (derivatives.yaml: nll_loss_backward(grad, self, target, ...)); a mask over its inputs. The
 * node unpacks every saved tensor when it starts, whether its kernels read it or not. */
static unsigned saved_unread(const char *n)
{
    return !strcmp(n, "nll_loss_forward") || !strcmp(n, "nll_loss2d_forward") ? 1u : 0;
}

/* An op that saves inputs which are views of part of a storage, made as a transpose of a split
 * (the attention's q, k and v: `qkv.split(...)` then `.view(B, T, H, D).transpose(1, 2)`): a
 * mask over its inputs. save_on_cpu packs each view alone, through a contiguous device
 * temporary of its own size (a view that is not contiguous), and unpacks each alone; the
 * storage itself is never restored. */
static unsigned saved_views(const char *n)
{
    static const char *const sdpa[] = {"_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
                                       "_scaled_dot_product_cudnn_attention", "_efficient_attention_forward",
                                       "_flash_attention_forward", NULL};
    return in_list(n, sdpa) ? 7u : 0;
}

/* A storage freed at event death outlives a node that ends at event end: a later node made
 * something while it was still held (a node lets go of what it saved right after it ends) */
static int outlives(const adv_model *m, size_t end, size_t death)
{
    if (death == SIZE_MAX) return 0;
    for (size_t j = end + 1; j < death && j < m->nevs; j++)
        if (m->evs[j].kind == ADV_EV_ALLOC) return 1;
    return 0;
}

long adv_pack_saved(adv_model *m, int autocast, int skip_blocks, uint8_t *unpacked)
{
    if (!m->ntops) return 0;
    if (adv_model_own(m) != 0) return -1;
    size_t nrec = m->nrecorded ? m->nrecorded : m->nallocs, nev = m->nevs, nt = m->ntops;
    size_t *birth, *nstart, *nend;
    adv_rw w;
    long packed = -1;
    int ok = births_spans(m, nrec, &birth, &nstart, &nend) == 0;
    size_t *death = ok ? malloc((nrec + 1) * sizeof *death) : NULL; /* the recorded frees */
    if (adv_rw_init(&w, m) != 0 || !ok || !death) goto out;
    for (size_t a = 0; a < nrec; a++)
        death[a] = SIZE_MAX;
    for (size_t j = 0; j < nev; j++)
        if ((m->evs[j].kind == ADV_EV_FREE || m->evs[j].kind == ADV_EV_FREE_ASYNC) && m->evs[j].a < nrec) death[m->evs[j].a] = j;
    packed = 0;
    for (size_t i = 0; i < nt; i++) {
        const adv_top *t = &m->tops[i];
        if (t->bwd || t->last_a >= nrec || birth[t->last_a] == SIZE_MAX) continue;
        char nb[96];
        const char *name = adv_op_base(adv_str(m, t->name), nb, sizeof nb);
        unsigned view, factors, mask = saved_params(name, &view, &factors), views = saved_views(name);
        /* (under autocast nll_loss saves its own fp32 copy of its input, which the rewrite
         * made to die in its node: the offload's restore places that one) */
        unsigned unread = autocast ? 0 : saved_unread(name);
        size_t op_ev = birth[t->last_a], start = SIZE_MAX, end = nend[i], first_out = op_ev;
        if (!(mask | unread | views) || nstart[i] == SIZE_MAX || end == SIZE_MAX) continue;
        if (skip_blocks && adv_is_block_name(adv_str(m, m->evs[op_ev].lr_name))) continue;
        /* save_on_cpu's hooks are the forward's: nothing of a recompute in the backward, nor of
         * a block checkpointed already (checkpointing's own hooks win there) */
        if (m->evs[op_ev].phase == ADV_PH_BWD || adv_recomputed_block(m, m->evs[op_ev].lr_name)) continue;
        /* the unpack: before the node's first allocation, freed after its last (node_spans) */
        for (size_t j = nstart[i] + 1; j < nev && start == SIZE_MAX; j++)
            if (m->evs[j].kind == ADV_EV_ALLOC) start = j;
        if (start == SIZE_MAX || end < start) continue;
        int lowp = autocast && classify(adv_str(m, t->name)).kind == OPK_LOWP;
        for (uint32_t q = 0; q < t->nargs; q++) { /* the op's first output: its inputs are packed before */
            const adv_targ *g = &m->targs[t->arg0 + q];
            if (g->out && g->a < nrec && birth[g->a] < first_out) first_out = birth[g->a];
        }
        uint32_t k = 0;
        unsigned req = factors ? grad_inputs(m, t, birth, nrec, view) : 0;
        for (uint32_t q = 0; q < t->nargs; q++) {
            const adv_targ *g = &m->targs[t->arg0 + q];
            if (g->out) continue;
            unsigned bit = 1u << (k < 31 ? k : 31);
            k++;
            if (!((mask | unread | views) & bit) || g->a >= nrec) continue;
            /* a factor kept for the other's gradient, which the other does not require (the first
             * Linear's weight.t(), where the batch requires none): not saved */
            if ((factors & bit) && !(factors & ~bit & req)) continue;
            size_t pb = birth[g->a];
            /* a parameter where the op saves its weights; an activation where its node gets what
             * its kernels do not read (the offload's restores follow the reads), or a view of
             * part of an activation's storage */
            int param = pb == SIZE_MAX || m->evs[pb].step < 0;
            int part = (views & bit) && !param && g->bytes < adv_rec_size(m, g->a);
            /* an activation a later node keeps too (a ReLU's output, saved by the next Linear and
             * by the ReLU's own node): each save is packed and unpacked alone, and the offload's
             * restore serves only the node that frees it */
            int again = (mask & bit) && !param && !part && outlives(m, end, death[g->a]);
            if (!part && !again && !((mask & bit) && param) && !((unread & bit) && !param)) continue;
            uint64_t bytes = lowp && g->dtype == ADV_DT_F32 ? (g->bytes + 1) / 2 : g->bytes;
            uint32_t stream = m->allocs[t->last_a].stream, cls = m->allocs[g->a].cls;
            if (((view & bit) && param) || part) { /* the copy to the host through a contiguous device temporary */
                uint32_t c = adv_new_alloc(m, bytes, stream, cls, 0, g->a);
                if (c == UINT32_MAX) goto fail;
                ac_add(&w, m, part ? first_out : op_ev, -1, c, ADV_EV_ALLOC);
                ac_add(&w, m, part ? first_out : op_ev, -1, c, ADV_EV_FREE_ASYNC);
                if (part && unpacked) unpacked[g->a] = 1;
            }
            /* under autocast the saved weight is the parameter's bf16 copy, which adv_stash
             * offloads as an activation of the pass: this is its only unpack */
            if (lowp && param && g->dtype == ADV_DT_F32 && unpacked && g->a < nrec) unpacked[g->a] = 1;
            uint32_t u = adv_new_alloc(m, bytes, stream, cls, 0, g->a); /* the unpack */
            if (u == UINT32_MAX) goto fail;
            ac_add(&w, m, start, -1, u, ADV_EV_ALLOC);
            ac_add(&w, m, end, 1, u, ADV_EV_FREE_ASYNC);
            packed++;
        }
    }
    if (adv_rw_apply(m, &w) != 0) goto fail;
    goto out;
fail:
    packed = -1;
out:
    free(birth), free(nstart), free(nend), free(death);
    adv_rw_free(&w);
    return packed;
}

/* ------------------------------------------------------------------ a bias gradient's sum */

/* The launch configuration of PyTorch's reduction kernel (aten/src/ATen/native/cuda/Reduce.cuh,
 * setReduceConfig, PyTorch 2.x) summing the rows of a contiguous (rows, cols) fp32 tensor into
 * cols outputs (the bias gradient of a Linear: AddmmBackward0's sum over the batch's tokens),
 * on a device of REDUCE_SMS multiprocessors of 2,048 threads each. The reduced dimension is not
 * the fastest moving one, so the outputs are vectorized (up to 4 a thread) and a block is 32
 * lanes of outputs by up to 512 / vec threads of rows. When each thread would still sum at
 * least 256 values, the rows are split across ctas blocks a column, which stage their partial
 * sums in a device buffer (4 bytes x cols x ctas x the block's width x vec) and count their
 * ends in semaphores (an int per column of blocks): both allocated for the kernel and freed
 * when it is queued. 0 and 0 where one block a column does it all (gm_advise.h). */
enum { REDUCE_SMS = 132 /* an H100 or H200, the virtual GPU's profile: the recording keeps no count */ };

static uint64_t pow2_floor(uint64_t n)
{
    uint64_t p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

void adv_reduce_staging(uint64_t rows, uint64_t cols, uint64_t *staging, uint64_t *sema)
{
    *staging = *sema = 0;
    if (!rows || !cols) return;
    uint64_t vec = cols % 4 == 0 ? 4 : cols % 2 == 0 ? 2 : 1, most = 512 / vec;
    uint64_t d0 = cols / vec < most ? pow2_floor(cols / vec) : most, d1 = rows < most ? pow2_floor(rows) : most;
    uint64_t width = d0 < 32 ? d0 : 32, height = d1 < most / width ? d1 : most / width;
    width = d0 < most / height ? d0 : most / height;
    /* too few rows to split them across a block's warps: one block a column, no staging */
    if (rows < (height * 16 < 256 ? height * 16 : 256)) return;
    uint64_t grid = div_up(cols / vec, width), target = REDUCE_SMS * (2048 / (width * height));
    uint64_t per_thread = div_up(rows, height);
    if (per_thread < 256 || grid > target) return;
    uint64_t c1 = div_up(target, grid), c2 = div_up(per_thread, 16), c3 = div_up(per_thread, 256);
    uint64_t ctas = c1 < c2 ? c1 : c2;
    if (ctas < c3) ctas = c3;
    if (ctas < 2) return;
    *staging = 4 * cols * ctas * width * vec;
    *sema = 4 * grid;
}

/* Forward op f when it is a Linear's addmm(bias, input, weight.t()) whose node was placed
 * (nstart, nend: births_spans's): its output (rows x cols, *out) and its bias (cols, *bias); 1, else 0. */
static int linear_node(const adv_model *m, size_t f, const size_t *nstart, const size_t *nend, const adv_targ **out,
                       const adv_targ **bias)
{
    const adv_top *t = &m->tops[f];
    char nb[96];
    if (t->bwd || nstart[f] == SIZE_MAX || nend[f] == SIZE_MAX || t->nargs < 2 ||
        strcmp(adv_op_base(adv_str(m, t->name), nb, sizeof nb), "addmm"))
        return 0;
    *out = &m->targs[t->arg0], *bias = &m->targs[t->arg0 + 1];
    return (*out)->out && !(*bias)->out && (*bias)->bytes && (*out)->bytes % (*bias)->bytes == 0;
}

/* Linear f's staging pair for its bias gradient's sum (adv_reduce_bufs): 1 found, else 0 */
static int reduce_pair(const adv_model *m, size_t nrec, unsigned k, size_t start, size_t end, const adv_targ *out,
                       const adv_targ *bias, uint64_t *size)
{
    if (out->dtype != ADV_DT_F32 || bias->dtype != ADV_DT_F32) return 0;
    uint64_t cols = bias->bytes / 4, rows = out->bytes / bias->bytes, x, s, x2, s2;
    adv_reduce_staging(rows, cols, &x, &s);
    adv_reduce_staging(rows / k, cols, &x2, &s2);
    if (!x || !x2 || rows % k) return 0;
    /* in the node: the buffer, then the semaphores (both freed when the kernel is queued) */
    for (size_t i = start + 1; i + 1 < m->nevs && i <= end; i++) {
        const adv_ev *e = &m->evs[i], *e1 = e + 1;
        if (e->kind != ADV_EV_ALLOC || e->a >= nrec || m->allocs[e->a].size != x) continue;
        if (e1->kind != ADV_EV_ALLOC || e1->a >= nrec || m->allocs[e1->a].size != s) continue;
        size[e->a] = x2, size[e1->a] = s2;
        return 1;
    }
    return 0;
}

/* What Linear f's node lets go of after its bias sum (adv_bias_sums): the number found */
static long released_after_sum(const adv_model *m, size_t nrec, const size_t *birth, size_t start, size_t end,
                               const adv_targ *bias, uint32_t *sum_of)
{
    /* the sum's result, of the bias's size, is the node's first allocation of that size (its
     * own gradients are matrices); under autocast, the bf16 sum made for it (its orig) */
    uint32_t g = UINT32_MAX;
    for (size_t i = start + 1; i <= end && i < m->nevs && g == UINT32_MAX; i++) {
        const adv_ev *e = &m->evs[i];
        uint32_t o = e->kind == ADV_EV_ALLOC ? m->allocs[e->a].orig : UINT32_MAX;
        if (o < nrec && adv_rec_size(m, o) == bias->bytes) g = o;
    }
    long found = 0;
    /* what the node lets go of once it has run: the frees after its last allocation of what
     * was born before it */
    for (size_t i = end + 1; g != UINT32_MAX && i < m->nevs && m->evs[i].kind != ADV_EV_ALLOC; i++) {
        const adv_ev *e = &m->evs[i];
        if ((e->kind == ADV_EV_FREE || e->kind == ADV_EV_FREE_ASYNC) && e->a < nrec && birth[e->a] != SIZE_MAX &&
            birth[e->a] <= start) {
            sum_of[e->a] = g;
            found++;
        }
    }
    return found;
}

/* One pass over the op log's Linear nodes for adv_reduce_bufs (size) or adv_bias_sums (sum_of) */
static long linear_pass(const adv_model *m, unsigned k, uint64_t *size, uint32_t *sum_of)
{
    size_t nrec = m->nrecorded ? m->nrecorded : m->nallocs;
    size_t *birth, *nstart, *nend;
    long found = -1;
    if (births_spans(m, nrec, &birth, &nstart, &nend) != 0) goto out;
    found = 0;
    for (size_t f = 0; f < m->ntops; f++) {
        const adv_targ *out, *bias;
        if (!linear_node(m, f, nstart, nend, &out, &bias)) continue;
        if (size) found += reduce_pair(m, nrec, k, nstart[f], nend[f], out, bias, size);
        if (sum_of) found += released_after_sum(m, nrec, birth, nstart[f], nend[f], bias, sum_of);
    }
out:
    free(birth), free(nstart), free(nend);
    return found;
}

long adv_reduce_bufs(const adv_model *m, unsigned k, uint64_t *size)
{
    for (size_t a = 0; a < m->nallocs; a++)
        size[a] = 0;
    return m->ntops && k >= 1 ? linear_pass(m, k, size, NULL) : 0;
}

/* The recorded batch from the op log: the first tensor a forward op reads that no logged op made
 * and that the program frees before its last step (the batch moved to the device, let go of for
 * the next one; a parameter lives on) gives the batch, its leading dimension (*b), and its
 * elements (*rows: batch x sequence, the rows of a flattened activation); 0 and 0 where none is
 * found. */
static void batch_dims(const adv_model *m, size_t nrec, const uint8_t *freed, const size_t *maker, uint64_t *b,
                       uint64_t *rows)
{
    *b = *rows = 0;
    for (size_t f = 0; f < m->ntops; f++) {
        const adv_top *t = &m->tops[f];
        for (uint32_t j = 0; !t->bwd && j < t->nargs; j++) {
            const adv_targ *x = &m->targs[t->arg0 + j];
            if (x->out || x->a >= nrec || maker[x->a] != SIZE_MAX || !freed[x->a] || !x->ndim || !x->dims[0]) continue;
            uint64_t n = 1;
            for (unsigned d = 0; d < x->ndim; d++)
                n *= x->dims[d];
            *b = x->dims[0], *rows = n;
            return;
        }
    }
}

long adv_batch_fixed(const adv_model *m, uint64_t *size)
{
    size_t nrec = m->nrecorded ? m->nrecorded : m->nallocs;
    if (!m->ntops) return 0;
    uint8_t *freed = calloc(m->nallocs + 1, 1), *seen = calloc(m->nallocs + 1, 1);
    size_t *maker = adv_op_makers(m);
    long found = -1;
    if (!freed || !seen || !maker) goto out;
    /* freed before the last step starts: a parameter lives on (to the program's exit, where a
     * recording may free it), a batch is let go of for a later one */
    size_t last = 0;
    while (last < m->nevs && (m->nsteps < 1 || m->evs[last].step != (int)m->nsteps - 1))
        last++;
    for (size_t i = 0; i < last; i++)
        if (m->evs[i].kind == ADV_EV_FREE || m->evs[i].kind == ADV_EV_FREE_ASYNC) freed[m->evs[i].a] = 1;
    uint64_t b, rows;
    batch_dims(m, nrec, freed, maker, &b, &rows);
    found = 0;
    if (!b) goto out;
    /* each storage by the first tensor of the log that spans it: an op's output (forward), or a
     * gradient a node was given (backward) */
    for (size_t f = 0; f < m->ntops; f++) {
        const adv_top *t = &m->tops[f];
        for (uint32_t j = 0; j < t->nargs; j++) {
            const adv_targ *x = &m->targs[t->arg0 + j];
            if (x->a >= nrec || seen[x->a] || (!t->bwd && !x->out)) continue;
            seen[x->a] = 1;
            uint64_t rec = adv_rec_size(m, x->a);
            if (!x->ndim || x->bytes > rec || x->bytes + 512 <= rec || size[x->a]) continue;
            if (x->dims[0] == b || x->dims[0] == rows) continue;
            size[x->a] = m->allocs[x->a].size;
            found++;
        }
    }
out:
    free(freed), free(seen), free(maker);
    return found;
}

long adv_bias_sums(const adv_model *m, uint32_t *sum_of)
{
    size_t nrec = m->nrecorded ? m->nrecorded : m->nallocs;
    for (size_t a = 0; a < nrec; a++)
        sum_of[a] = UINT32_MAX;
    return m->ntops ? linear_pass(m, 1, NULL, sum_of) : 0;
}
