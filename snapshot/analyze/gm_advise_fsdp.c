/* gm_advise_fsdp.c — FSDP2's FULL_SHARD (ZeRO-3 in PyTorch: fully_shard on every block of the
 * model's repeated list, then on the model) as a rewrite of a one-rank PyTorch recording: what
 * one rank of N allocates.
 *
 * FSDP2's schedule (torch/distributed/fsdp/_fully_shard, as the recordings of
 * tests/torch/train_gpt2.py --fsdp N show it):
 *   - a unit is a block of the repeated list ("h.3": every parameter whose name starts with
 *     it) or the root (every other parameter: the embeddings, the final norm, a tied head);
 *   - each parameter is kept as its shard, ceil(n / N) of its bytes; so are its gradient
 *     (grad.<p>) and its optimizer state (adv_zero stage 1);
 *   - before a unit's forward, and again before its backward, its parameters are all-gathered:
 *     one output buffer of the unit's bytes on the all-gather stream, then every parameter's
 *     full storage on the compute stream; the buffer of the unit gathered before is freed once
 *     this copy-out is done (FSDP2 keeps the last all-gather's result until the next one);
 *   - a block's full parameters are freed after its forward (reshard_after_forward=True; with
 *     False, SHARD_GRAD_OP, they stay gathered from the forward to the block's backward) and after
 *     its backward; the root's stay from its forward to the end of the backward;
 *   - in the backward the next block (the one before in forward order) is gathered when a
 *     block's backward begins (FSDP2's implicit backward prefetch).
 * The recording gives the positions: each event's phase and block (the hooks' range "h.3...").
 * What is not modelled: the reduce-scatter's buffers (a unit's gradients copied into one input
 * of the unit's bytes) and the padding of a shard to whole rows; `advise --ranks N --check`
 * measures the difference by re-running the script with --fsdp N. */
#include "snapshot/analyze/gm_advise.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The block a parameter or range name belongs to: its path up to its first number ("h.3" of
 * "h.3.attn.c_attn.weight"), "" when it has none (the root's). */
static void block_key(const char *n, char *out, size_t outsz)
{
    out[0] = 0;
    for (const char *p = n; *p;) {
        size_t len = strcspn(p, ".");
        int num = len > 0;
        for (size_t i = 0; i < len; i++)
            num &= isdigit((unsigned char)p[i]) != 0;
        if (num) {
            snprintf(out, outsz, "%.*s", (int)(p - n + (ptrdiff_t)len), n);
            return;
        }
        p += len;
        if (*p == '.') p++;
    }
}

typedef struct funit {
    char key[128];
    uint32_t *params; /* recorded allocations */
    uint64_t *full;   /* their full bytes */
    uint32_t *storage; /* per parameter its gathered storage, UINT32_MAX none */
    size_t nparams, cap;
    uint64_t bytes; /* full */
    int gathered;
} funit;

typedef struct fz {
    adv_model *m;
    funit *u; /* u[0] the root */
    size_t nu;
    adv_ev *out;
    size_t nout, cap;
    uint32_t ag_pending; /* the last all-gather's output buffer, UINT32_MAX none */
    uint32_t rs_pending; /* the last reduce-scatter's input buffer, UINT32_MAX none */
    int nomem, offload;
    uint32_t *in; /* the shards being brought in (offload) */
    size_t nin, incap;
    unsigned ranks;
    adv_zero3_stats *st;
} fz;

static void put(fz *z, adv_ev e)
{
    if (gm_grow((void **)&z->out, &z->cap, z->nout + 1, sizeof *z->out)) {
        z->nomem = 1;
        return;
    }
    z->out[z->nout++] = e;
}

/* A buffer the rewrite adds (no recorded allocation stands behind it); UINT32_MAX and nomem
 * set when out of memory. */
static uint32_t add_buf(fz *z, uint64_t size, uint32_t stream, uint32_t cls, uint32_t name)
{
    uint32_t h = adv_new_alloc(z->m, size, stream, cls, name, 0);
    if (h == UINT32_MAX)
        z->nomem = 1;
    else
        z->m->allocs[h].orig = h;
    return h;
}

static void gather(fz *z, size_t ui, const adv_ev *t)
{
    funit *u = &z->u[ui];
    if (u->gathered || !u->nparams) return;
    adv_model *m = z->m;
    char nm[200];
    snprintf(nm, sizeof nm, "fsdp.all_gather.%s", ui ? u->key : "root");
    uint32_t ag = add_buf(z, u->bytes, m->copy_stream, adv_intern(m, "fsdp.all_gather.*"), adv_intern(m, nm));
    if (ag == UINT32_MAX) return;
    /* CPU offload: each shard brought in on the all-gather stream first, freed once copied in */
    size_t in0 = z->nin;
    for (size_t k = 0; z->offload && k < u->nparams; k++) {
        const adv_alloc *pa = &m->allocs[u->params[k]];
        uint32_t h = add_buf(z, adv_shard_bytes(u->full[k], z->ranks), m->copy_stream, pa->cls, pa->name);
        if (h == UINT32_MAX || gm_grow((void **)&z->in, &z->incap, z->nin + 1, sizeof *z->in)) {
            z->nomem = 1;
            return;
        }
        z->in[z->nin++] = h;
        put(z, adv_ev_like(t, h, ADV_EV_ALLOC, 0));
    }
    put(z, adv_ev_like(t, ag, ADV_EV_ALLOC, 0));
    for (size_t k = in0; k < z->nin; k++)
        put(z, adv_ev_like(t, z->in[k], ADV_EV_FREE_ASYNC, m->copy_stream));
    z->nin = in0;
    for (size_t k = 0; k < u->nparams; k++) {
        const adv_alloc *pa = &m->allocs[u->params[k]];
        uint32_t g = add_buf(z, u->full[k], m->compute_stream, pa->cls, pa->name);
        if (g == UINT32_MAX) return;
        u->storage[k] = g;
        put(z, adv_ev_like(t, g, ADV_EV_ALLOC, 0));
    }
    if (z->ag_pending != UINT32_MAX) put(z, adv_ev_like(t, z->ag_pending, ADV_EV_FREE_ASYNC, m->copy_stream));
    z->ag_pending = ag;
    u->gathered = 1;
    z->st->ngathers++;
}

/* After a unit's backward its gradients are reduce-scattered: one input buffer of the unit's
 * bytes on the compute stream (kept until the next unit's is made, as the all-gather's), the
 * shard's output on the reduce-scatter stream, freed once added to the gradient shards. */
static void reduce_scatter(fz *z, size_t ui, const adv_ev *t)
{
    funit *u = &z->u[ui];
    adv_model *m = z->m;
    char nm[200];
    snprintf(nm, sizeof nm, "fsdp.reduce_scatter.%s", ui ? u->key : "root");
    uint32_t cls = adv_intern(m, "fsdp.reduce_scatter.*"), name = adv_intern(m, nm);
    uint32_t in = add_buf(z, u->bytes, m->compute_stream, cls, name);
    if (in == UINT32_MAX) return;
    put(z, adv_ev_like(t, in, ADV_EV_ALLOC, 0));
    uint32_t rs = m->copy_stream + 1; /* an unused stream id too (copy_stream is the largest + 1) */
    uint32_t o = add_buf(z, adv_shard_bytes(u->bytes, z->ranks), rs, cls, name);
    if (o == UINT32_MAX) return;
    put(z, adv_ev_like(t, o, ADV_EV_ALLOC, 0));
    put(z, adv_ev_like(t, o, ADV_EV_FREE_ASYNC, rs));
    if (z->rs_pending != UINT32_MAX) put(z, adv_ev_like(t, z->rs_pending, ADV_EV_FREE_ASYNC, m->compute_stream));
    z->rs_pending = in;
}

static void release(fz *z, size_t ui, const adv_ev *t)
{
    funit *u = &z->u[ui];
    if (!u->gathered) return;
    for (size_t k = 0; k < u->nparams; k++)
        if (u->storage[k] != UINT32_MAX) {
            put(z, adv_ev_like(t, u->storage[k], ADV_EV_FREE_ASYNC, z->m->compute_stream));
            u->storage[k] = UINT32_MAX;
        }
    u->gathered = 0;
}

static size_t unit_of_key(const fz *z, const char *key)
{
    if (!key[0]) return 0;
    for (size_t i = 1; i < z->nu; i++)
        if (!strcmp(z->u[i].key, key)) return i;
    return SIZE_MAX;
}

int adv_fsdp(adv_model *m, unsigned ranks, int offload, int reshard, adv_zero3_stats *st, char *err,
             size_t errsz)
{
    memset(st, 0, sizeof *st);
    err[0] = 0;
    if (ranks < 1) ranks = 1;
    if (adv_model_own(m) != 0) return -1; /* (sizes and events rewritten in place) */
    if (!m->torch) {
        snprintf(err, errsz, "FSDP is predicted for PyTorch recordings (their memory history merged)");
        return 1;
    }
    fz z = {.m = m, .ag_pending = UINT32_MAX, .rs_pending = UINT32_MAX, .ranks = ranks, .offload = offload, .st = st};
    int rc = -1;
    uint8_t *isparam = calloc(m->nallocs + 1, 1), *host = NULL;
    if (!isparam) goto out;
    /* the parameters: named, born before the first step */
    for (size_t i = 0; i < m->nevs; i++) {
        const adv_ev *e = &m->evs[i];
        if (e->kind != ADV_EV_ALLOC || e->step >= 0 || e->a >= m->nrecorded) continue;
        const char *n = adv_str(m, m->allocs[e->a].name);
        if (!n[0] || !strncmp(n, "grad.", 5) || !strncmp(n, "adam.", 5)) continue;
        isparam[e->a] = 1;
    }
    /* units: the root, then the blocks in the order of their parameters */
    size_t ucap = 0;
    for (size_t a = 0; a < m->nallocs; a++) {
        if (!isparam[a]) continue;
        char key[128];
        block_key(adv_str(m, m->allocs[a].name), key, sizeof key);
        if (!z.nu) {
            if (gm_grow((void **)&z.u, &ucap, 1, sizeof *z.u)) goto out;
            memset(&z.u[0], 0, sizeof z.u[0]);
            z.nu = 1;
        }
        size_t ui = unit_of_key(&z, key);
        if (ui == SIZE_MAX) {
            if (gm_grow((void **)&z.u, &ucap, z.nu + 1, sizeof *z.u)) goto out;
            ui = z.nu++;
            memset(&z.u[ui], 0, sizeof z.u[ui]);
            snprintf(z.u[ui].key, sizeof z.u[ui].key, "%s", key);
        }
        funit *u = &z.u[ui];
        if (u->nparams == u->cap) {
            size_t c = u->cap ? 2 * u->cap : 16;
            uint32_t *p = realloc(u->params, c * sizeof *p), *s2 = p ? realloc(u->storage, c * sizeof *s2) : NULL;
            if (p) u->params = p;
            if (s2) u->storage = s2;
            uint64_t *f = s2 ? realloc(u->full, c * sizeof *f) : NULL;
            if (!f) goto out;
            u->full = f, u->cap = c;
        }
        u->storage[u->nparams] = UINT32_MAX;
        u->full[u->nparams] = m->allocs[a].size;
        u->params[u->nparams++] = (uint32_t)a;
        u->bytes += m->allocs[a].size;
    }
    if (z.nu < 2) {
        snprintf(err, errsz,
                 "no repeated blocks among the parameters' names (\"h.3.attn.c_attn.weight\"): FSDP's units "
                 "are not known");
        rc = 1;
        goto out;
    }
    st->layers = (int)z.nu - 1;
    /* sizes: parameters and gradients to their shards, optimizer state by adv_zero stage 1 */
    for (size_t ui = 0; ui < z.nu; ui++) {
        funit *u = &z.u[ui];
        if (u->bytes > st->largest_unit_bytes) st->largest_unit_bytes = u->bytes;
        if (ui && u->bytes / 4 > st->largest_layer_params) st->largest_layer_params = u->bytes / 4;
    }
    for (size_t a = 0; a < m->nallocs; a++) {
        if (isparam[a]) {
            uint64_t s = adv_shard_bytes(m->allocs[a].size, ranks);
            st->param_bytes += m->allocs[a].size, st->param_shard_bytes += s, st->nparams++;
            st->nparams_elems += (m->allocs[a].size + 3) / 4;
            m->allocs[a].size = s;
        } else if (!strncmp(adv_str(m, m->allocs[a].name), "grad.", 5)) {
            uint64_t s = adv_shard_bytes(m->allocs[a].size, ranks);
            st->z.grad_bytes += m->allocs[a].size, st->z.grad_shard_bytes += s, st->z.ngrads++;
            m->allocs[a].size = s;
        }
    }
    /* CPU offload: what lives on the host (parameters after their first birth, gradients, and
     * every allocation the optimizer makes: the update runs on the host) */
    host = calloc(m->nallocs + 1, 1);
    if (!host) goto out;
    for (size_t i = 0; offload && i < m->nevs; i++) {
        const adv_ev *e = &m->evs[i];
        if (e->kind != ADV_EV_ALLOC || e->a >= m->nallocs) continue;
        const char *n = adv_str(m, m->allocs[e->a].name);
        if (isparam[e->a] || e->phase == ADV_PH_OPT || !strncmp(n, "grad.", 5) || !strncmp(n, "adam.", 5))
            host[e->a] = 1;
    }
    /* walk the trace */
    int prev = ADV_PH_OTHER;
    size_t cur = SIZE_MAX; /* the block whose phase is running */
    for (size_t i = 0; i < m->nevs && !z.nomem; i++) {
        const adv_ev e = m->evs[i];
        int ph = e.phase;
        if (ph != prev && prev == ADV_PH_BWD) { /* the backward ended: everything resharded */
            if (cur != SIZE_MAX) reduce_scatter(&z, cur, &e);
            reduce_scatter(&z, 0, &e);
            for (size_t ui = 0; ui < z.nu; ui++)
                release(&z, ui, &e);
            if (z.rs_pending != UINT32_MAX)
                put(&z, adv_ev_like(&e, z.rs_pending, ADV_EV_FREE_ASYNC, m->compute_stream)), z.rs_pending = UINT32_MAX;
            cur = SIZE_MAX;
        }
        if (!reshard && ph != ADV_PH_FWD && prev == ADV_PH_FWD && z.ag_pending != UINT32_MAX) {
            /* SHARD_GRAD_OP: the forward's end frees its last all-gather's result (FULL_SHARD's
             * stays until the backward's first all-gather) */
            put(&z, adv_ev_like(&e, z.ag_pending, ADV_EV_FREE_ASYNC, m->copy_stream));
            z.ag_pending = UINT32_MAX;
        }
        if (ph == ADV_PH_FWD || ph == ADV_PH_BWD) {
            if (ph == ADV_PH_FWD && prev != ADV_PH_FWD) gather(&z, 0, &e), cur = SIZE_MAX;
            char key[128] = "";
            const char *ln = adv_str(m, e.lr_name);
            block_key(ln, key, sizeof key);
            size_t ui = key[0] ? unit_of_key(&z, key) : SIZE_MAX;
            if (ui != SIZE_MAX && ui != cur) {
                if (cur != SIZE_MAX && ph == ADV_PH_BWD) reduce_scatter(&z, cur, &e);
                if (cur != SIZE_MAX && (ph == ADV_PH_BWD || reshard)) release(&z, cur, &e);
                gather(&z, ui, &e);
                if (ph == ADV_PH_BWD && ui > 1) gather(&z, ui - 1, &e); /* backward prefetch */
                cur = ui;
            } else if (ui == SIZE_MAX && key[0] == 0 && ln[0] && cur != SIZE_MAX && ph == ADV_PH_FWD) {
                if (reshard) release(&z, cur, &e); /* the head, after the last block */
                cur = SIZE_MAX;
            }
        }
        if (ph != ADV_PH_OTHER) prev = ph;
        if (z.offload && e.a < m->nallocs && host[e.a]) {
            /* a parameter is made on the device, sharded and moved to the host: its shard's
             * birth and its free at once; gradients, optimizer state and the update's
             * temporaries live on the host */
            if (isparam[e.a] && e.kind == ADV_EV_ALLOC) {
                put(&z, e);
                put(&z, adv_ev_like(&e, e.a, ADV_EV_FREE_ASYNC, m->allocs[e.a].stream));
            }
            continue;
        }
        put(&z, e);
    }
    if (z.nomem) goto out;
    free(m->evs);
    m->evs = z.out, m->nevs = z.nout;
    z.out = NULL;
    adv_zero_stats g = st->z; /* the gradients' figures, which stage 1 does not touch */
    if (adv_zero(m, ranks, 1, &st->z) != 0) goto out;
    st->z.grad_bytes = g.grad_bytes, st->z.grad_shard_bytes = g.grad_shard_bytes, st->z.ngrads = g.ngrads;
    rc = 0;
out:
    if (rc < 0) snprintf(err, errsz, "out of memory");
    for (size_t ui = 0; ui < z.nu; ui++)
        free(z.u[ui].params), free(z.u[ui].storage), free(z.u[ui].full);
    free(z.u), free(z.out), free(z.in), free(isparam), free(host);
    return rc;
}
