/* gm_advise_zero3.c — ZeRO-3 as a rewrite of a one-rank recording of the included trainer:
 * what one rank of N allocates under `--zero 3 --prefetch K [--offload params]`.
 *
 * The trainer's schedule (train/README.md, "ZeRO-3") is the contract replayed here. Each
 * parameter <p> is allocated at start as its shard, ceil(n / N) elements under its own name.
 * The ops read parameters per *unit* — the embedding (wte, wpe), each layer (its twelve
 * tensors), the head (lnf_w, lnf_b and the tied wte) — at the positions of one micro-batch
 *     0 embedding | 1..L layers | L+1 head fwd | L+2 head bwd | L+3..2L+2 layers reversed
 *     | 2L+3 embedding (encoder backward)
 * At the start of position s the units of positions s..s+K not gathered yet are gathered (per
 * parameter a full fp32 buffer gather.<p>; with --offload params the shard is first brought in
 * on the copy stream and freed once gathered); at the end of position s its unit's buffers are
 * freed unless the unit comes again within max(K, 1) positions; wte has one buffer shared by
 * the embedding and the head. The recording says where each position is: its events' phase
 * (fwd / bwd) and layer range ("hI"); the head is what a phase has outside and after its
 * layers, the embedding what it has before them (the inputs, tokens and targets, are made
 * before the embedding's gather).
 *
 * Gathered buffers are inserted with the time of the event before them, so that adv_zero's
 * stage 2, run on the result, places a gradient's reduce-scatter (at the last event at or
 * before the op that completes it) after the gathers that op needed. That is stage 2 as the
 * trainer's zero 3 does it without --accum (a micro-batch per step); with --accum the trainer
 * reduce-scatters in every micro-batch, which this rewrite does not model: refused.
 * With --offload params the parameter shards leave the device: made and offloaded at start,
 * brought in for a gather, and for their update around the free of their gradient shard. */
#include "snapshot/analyze/gm_advise.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { P_WTE, P_WPE, P_LNF_W, P_LNF_B, P_GLOBAL, LP_COUNT = 12 };
static const char *const lp_names[LP_COUNT] = {"ln1_w",     "ln1_b",     "qkv_w",    "qkv_b",
                                               "attproj_w", "attproj_b", "ln2_w",    "ln2_b",
                                               "fc_w",      "fc_b",      "fcproj_w", "fcproj_b"};

/* The trainer's parameter index of a name ("wte" 0 ... "h3.fc_w"), -1 none. */
static int param_index(const char *n)
{
    static const char *const g[P_GLOBAL] = {"wte", "wpe", "lnf_w", "lnf_b"};
    for (int i = 0; i < P_GLOBAL; i++)
        if (!strcmp(n, g[i])) return i;
    if (n[0] != 'h' || n[1] < '0' || n[1] > '9') return -1;
    char *end;
    long l = strtol(n + 1, &end, 10);
    if (*end != '.' || l < 0 || l > 100000) return -1;
    for (int lp = 0; lp < LP_COUNT; lp++)
        if (!strcmp(end + 1, lp_names[lp])) return P_GLOBAL + (int)l * LP_COUNT + lp;
    return -1;
}

/* The layer of a range name "hI", -1 for anything else. */
static int layer_of(const char *n)
{
    if (n[0] != 'h' || n[1] < '0' || n[1] > '9') return -1;
    char *end;
    long l = strtol(n + 1, &end, 10);
    return *end || l > 100000 ? -1 : (int)l;
}

typedef struct z3 {
    adv_model *m;
    int L, P, K, offload;
    unsigned ranks;
    uint32_t *param;    /* trainer parameter index -> recorded allocation */
    uint32_t *gathered; /* -> its live gather buffer, UINT32_MAX none */
    uint8_t *unit_in;
    uint64_t *full; /* trainer parameter index -> its recorded (full) bytes */
    adv_ev *out;
    size_t nout, cap;
    adv_ev last; /* the last event written: inserted events take its time */
    int have_last;
    adv_zero3_stats *st;
    int nomem;
} z3;

static int unit_of(const z3 *z, int pos)
{
    if (pos == 0 || pos == 2 * z->L + 3) return 0;
    if (pos <= z->L) return pos;
    if (pos <= z->L + 2) return z->L + 1;
    return z->L - (pos - (z->L + 3));
}
static int unit_params(const z3 *z, int u, int *idx)
{
    if (u == 0) return idx[0] = P_WTE, idx[1] = P_WPE, 2;
    if (u == z->L + 1) return idx[0] = P_LNF_W, idx[1] = P_LNF_B, idx[2] = P_WTE, 3;
    for (int lp = 0; lp < LP_COUNT; lp++)
        idx[lp] = P_GLOBAL + (u - 1) * LP_COUNT + lp;
    return LP_COUNT;
}

static void put(z3 *z, adv_ev e)
{
    if (gm_grow((void **)&z->out, &z->cap, z->nout + 1, sizeof *z->out)) {
        z->nomem = 1;
        return;
    }
    z->out[z->nout++] = e;
    z->last = e, z->have_last = 1;
}

static uint32_t add_alloc(z3 *z, uint64_t size, uint32_t stream, const char *name)
{
    char cls[512];
    adv_name_class(name, cls, sizeof cls);
    uint32_t nm = adv_intern(z->m, name), c = adv_intern(z->m, cls);
    uint32_t h = adv_new_alloc(z->m, size, stream, c, nm, 0);
    if (h == UINT32_MAX) {
        z->nomem = 1;
        return h;
    }
    z->m->allocs[h].orig = h; /* stands for no recorded allocation */
    return h;
}

static void gather_unit(z3 *z, int u, const adv_ev *tmpl)
{
    int idx[LP_COUNT];
    int n = unit_params(z, u, idx);
    adv_model *m = z->m;
    for (int k = 0; k < n && !z->nomem; k++) {
        int p = idx[k];
        if (z->gathered[p] != UINT32_MAX) continue; /* wte, with the other unit that reads it */
        const adv_alloc *pa = &m->allocs[z->param[p]];
        const char *pn = adv_str(m, pa->name);
        uint32_t in = UINT32_MAX;
        if (z->offload) { /* the shard brought in from pinned host memory */
            in = add_alloc(z, adv_shard_bytes(z->full[p], z->ranks), m->copy_stream, pn);
            if (in == UINT32_MAX) return;
            put(z, adv_ev_like(tmpl, in, ADV_EV_ALLOC, 0));
        }
        char gn[600];
        snprintf(gn, sizeof gn, "gather.%s", pn);
        uint32_t g = add_alloc(z, z->full[p], m->compute_stream, gn);
        if (g == UINT32_MAX) return;
        put(z, adv_ev_like(tmpl, g, ADV_EV_ALLOC, 0));
        z->gathered[p] = g;
        z->st->ngathers++;
        if (in != UINT32_MAX) put(z, adv_ev_like(tmpl, in, ADV_EV_FREE_ASYNC, m->compute_stream));
    }
    z->unit_in[u] = 1;
}

static void release_unit(z3 *z, int u, const adv_ev *tmpl)
{
    int idx[LP_COUNT];
    int n = unit_params(z, u, idx);
    z->unit_in[u] = 0;
    for (int k = 0; k < n; k++) {
        int p = idx[k];
        int shared = p == P_WTE && z->unit_in[u == 0 ? z->L + 1 : 0];
        if (shared || z->gathered[p] == UINT32_MAX) continue;
        put(z, adv_ev_like(tmpl, z->gathered[p], ADV_EV_FREE_ASYNC, z->m->compute_stream));
        z->gathered[p] = UINT32_MAX;
    }
}

static void pos_begin(z3 *z, int pos, const adv_ev *tmpl)
{
    int end = pos + z->K < z->P ? pos + z->K : z->P - 1;
    for (int q = pos; q <= end; q++)
        if (!z->unit_in[unit_of(z, q)]) gather_unit(z, unit_of(z, q), tmpl);
}

static void pos_end(z3 *z, int pos, const adv_ev *tmpl)
{
    int u = unit_of(z, pos), K = z->K > 1 ? z->K : 1;
    for (int q = pos + 1; q <= pos + K && q < z->P; q++)
        if (unit_of(z, q) == u) return;
    release_unit(z, u, tmpl);
}

/* The positions from cur (-1: none begun) to the end of the micro-batch, before event tmpl. */
static void finish(z3 *z, int *cur, const adv_ev *tmpl)
{
    if (*cur < 0) return;
    pos_end(z, *cur, tmpl);
    for (int q = *cur + 1; q < z->P; q++)
        pos_begin(z, q, tmpl), pos_end(z, q, tmpl);
    *cur = -1;
}

/* The parameter an optimizer-phase tensor belongs to (adam.m.<p>, adam.v.<p>,
 * grad.shard.<p>, <p>), -1 none. */
static int opt_param(const adv_model *m, uint32_t a)
{
    const char *n = adv_str(m, m->allocs[a].name);
    if (!strncmp(n, "adam.m.", 7) || !strncmp(n, "adam.v.", 7)) return param_index(n + 7);
    if (!strncmp(n, "grad.shard.", 11)) return param_index(n + 11);
    return param_index(n);
}

typedef struct okey {
    long key;
    size_t i;
} okey;
static int cmp_okey(const void *a, const void *b)
{
    const okey *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The trainer updates one parameter after another (its state made at the first step, its
 * shard brought in, its gradient shard freed, the shard sent back); the rewrites before leave
 * a layer's state births ahead of its gradient frees. Each run of optimizer events is put in
 * parameter order, each parameter's events in their order. 0 or -1. */
int adv_opt_param_order(adv_model *m)
{
    if (adv_model_own(m) != 0) return -1; /* (events reordered in place) */
    okey *k = malloc((m->nevs + 1) * sizeof *k);
    adv_ev *tmp = malloc((m->nevs + 1) * sizeof *tmp);
    if (!k || !tmp) {
        free(k), free(tmp);
        return -1;
    }
    for (size_t i0 = 0; i0 < m->nevs;) {
        if (m->evs[i0].phase != ADV_PH_OPT) {
            i0++;
            continue;
        }
        size_t i1 = i0;
        while (i1 < m->nevs && m->evs[i1].phase == ADV_PH_OPT && m->evs[i1].step == m->evs[i0].step)
            i1++;
        for (size_t i = i0; i < i1; i++)
            k[i - i0] = (okey){opt_param(m, m->evs[i].a), i};
        gm_sort(k, i1 - i0, sizeof *k, cmp_okey);
        for (size_t i = i0; i < i1; i++)
            tmp[i - i0] = m->evs[k[i - i0].i];
        memcpy(m->evs + i0, tmp, (i1 - i0) * sizeof *tmp);
        i0 = i1;
    }
    free(k), free(tmp);
    return 0;
}

int adv_zero3(adv_model *m, unsigned ranks, int prefetch, int offload_params, adv_zero3_stats *st,
              char *err, size_t errsz)
{
    memset(st, 0, sizeof *st);
    err[0] = 0;
    if (ranks < 1) ranks = 1;
    if (adv_model_own(m) != 0) return -1; /* (sizes and events rewritten in place) */
    z3 z = {.m = m, .K = prefetch, .offload = offload_params, .ranks = ranks, .st = st};
    /* the parameters: the trainer's names, born before the first step */
    int maxl = -1;
    for (size_t i = 0; i < m->nevs; i++) {
        const adv_ev *e = &m->evs[i];
        if (e->kind != ADV_EV_ALLOC || e->a >= m->nrecorded) continue;
        const char *n = adv_str(m, m->allocs[e->a].name);
        if (!strncmp(n, "gather.", 7) || !strncmp(n, "grad.shard.", 11)) {
            snprintf(err, errsz,
                     "the recording already shards (%s): record one rank without --zero, --offload "
                     "params "
                     "or --param-dtype",
                     n);
            return 1;
        }
        int p = param_index(n);
        if (p >= P_GLOBAL && e->step < 0 && (p - P_GLOBAL) / LP_COUNT > maxl)
            maxl = (p - P_GLOBAL) / LP_COUNT;
    }
    const char *acc = strstr(m->cmdline, "--accum ");
    if (acc && strtoul(acc + 8, NULL, 10) > 1) {
        snprintf(err, errsz,
                 "recorded with --accum: ZeRO-3 reduce-scatters in every micro-batch, which the "
                 "prediction does not model; record without --accum");
        return 1;
    }
    if (maxl < 0) {
        snprintf(err, errsz,
                 "no parameters of the included trainer (wte, hI.qkv_w, ...) made before the first "
                 "step");
        return 1;
    }
    z.L = maxl + 1, z.P = 2 * z.L + 4;
    size_t np = P_GLOBAL + (size_t)z.L * LP_COUNT;
    z.param = malloc(np * sizeof *z.param);
    z.gathered = malloc(np * sizeof *z.gathered);
    z.unit_in = calloc((size_t)z.L + 2, 1);
    z.full = calloc(np, sizeof *z.full);
    int16_t *pos = malloc((m->nevs + 1) * sizeof *pos);
    uint8_t *newmb = calloc(m->nevs + 1, 1);
    int rc = -1;
    if (!z.param || !z.gathered || !z.unit_in || !z.full || !pos || !newmb) goto out;
    for (size_t p = 0; p < np; p++)
        z.param[p] = z.gathered[p] = UINT32_MAX;
    for (size_t i = 0; i < m->nevs; i++) {
        const adv_ev *e = &m->evs[i];
        if (e->kind != ADV_EV_ALLOC || e->step >= 0) continue;
        int p = param_index(adv_str(m, m->allocs[e->a].name));
        if (p >= 0 && (size_t)p < np && z.param[p] == UINT32_MAX) z.param[p] = e->a;
    }
    for (size_t p = 0; p < np; p++)
        if (z.param[p] == UINT32_MAX) {
            snprintf(err, errsz,
                     "parameter %zu of %zu of a %d-layer trainer is not in the recording", p, np,
                     z.L);
            rc = 1;
            goto out;
        }
    /* where each event is in its micro-batch */
    {
        int prev = ADV_PH_OTHER, seen_f = 0, seen_b = 0, started = 0;
        for (size_t i = 0; i < m->nevs; i++) {
            const adv_ev *e = &m->evs[i];
            int p = -1;
            if (e->phase == ADV_PH_FWD) {
                if (prev != ADV_PH_FWD) newmb[i] = 1, seen_f = seen_b = started = 0;
                int l = layer_of(adv_str(m, e->lr_name));
                if (l >= 0 && l < z.L)
                    p = 1 + l, seen_f = 1;
                else
                    p = seen_f ? z.L + 1 : 0;
                if (p == 0 && !started && e->kind == ADV_EV_ALLOC) {
                    const char *n = adv_str(m, m->allocs[e->a].name);
                    if (!strcmp(n, "tokens") || !strcmp(n, "targets")) p = -1;
                }
                if (p >= 0) started = 1;
            } else if (e->phase == ADV_PH_BWD) {
                int l = layer_of(adv_str(m, e->lr_name));
                if (l >= 0 && l < z.L)
                    p = 2 * z.L + 2 - l, seen_b = 1;
                else
                    p = seen_b ? 2 * z.L + 3 : z.L + 2;
                /* after the embedding's backward has released its units: the backward's own
                 * buffers (d_residual) and the inputs are freed last */
                if (p == 2 * z.L + 3 && e->kind != ADV_EV_ALLOC) {
                    const char *n = adv_str(m, m->allocs[e->a].name);
                    if (!strcmp(n, "d_residual") || !strcmp(n, "tokens") || !strcmp(n, "targets"))
                        p = z.P;
                }
            }
            if (e->phase != ADV_PH_OTHER) prev = e->phase;
            pos[i] = (int16_t)p;
        }
    }
    /* parameter sizes: recorded (full) and the shard */
    for (size_t p = 0; p < np; p++) {
        adv_alloc *a = &m->allocs[z.param[p]];
        z.full[p] = a->size;
        uint64_t s = adv_shard_bytes(a->size, ranks);
        st->param_bytes += a->size, st->param_shard_bytes += s, st->nparams++;
        st->nparams_elems += (a->size + 3) / 4;
        a->size = s;
    }
    for (int u = 0; u <= z.L + 1; u++) {
        int idx[LP_COUNT];
        int n = unit_params(&z, u, idx);
        uint64_t b = 0;
        for (int k = 0; k < n; k++)
            b += z.full[idx[k]];
        if (b > st->largest_unit_bytes) st->largest_unit_bytes = b;
        if (u >= 1 && u <= z.L && b / 4 > st->largest_layer_params)
            st->largest_layer_params = b / 4;
    }
    st->layers = z.L;
    uint8_t *isparam = calloc(m->nallocs + 1, 1);
    if (!isparam) goto out;
    for (size_t p = 0; p < np; p++)
        isparam[z.param[p]] = 1;
    int cur = -1;
    for (size_t i = 0; i < m->nevs && !z.nomem; i++) {
        const adv_ev e = m->evs[i];
        int p = pos[i];
        if (newmb[i] || e.phase == ADV_PH_OPT || p == z.P) finish(&z, &cur, &e);
        if (p >= 0 && p < z.P && p != cur) {
            if (p < cur) finish(&z, &cur, &e);
            if (cur >= 0) pos_end(&z, cur, &e);
            for (int q = cur + 1; q < p; q++)
                pos_begin(&z, q, &e), pos_end(&z, q, &e);
            pos_begin(&z, p, &e);
            cur = p;
        }
        if (z.offload && e.a < m->nallocs && isparam[e.a]) {
            /* made, filled and offloaded at start (the free on the copy stream); never freed
             * on the device again */
            if (e.kind == ADV_EV_ALLOC) {
                put(&z, e);
                adv_ev f = e;
                f.kind = ADV_EV_FREE_ASYNC, f.stream = m->copy_stream;
                put(&z, f);
            }
            continue;
        }
        put(&z, e);
    }
    if (!z.nomem && z.have_last) {
        adv_ev t = z.last;
        finish(&z, &cur, &t);
    }
    free(isparam);
    if (z.nomem) goto out;
    free(m->evs);
    m->evs = z.out, m->nevs = z.nout;
    z.out = NULL;
    if (adv_zero(m, ranks, 2, &st->z) != 0) goto out;
    if (z.offload) {
        /* the update: the shard brought in (copy stream) before its gradient shard is freed,
         * sent back after (the free on the copy stream) */
        z.nout = z.cap = 0, z.have_last = 0;
        for (size_t i = 0; i < m->nevs && !z.nomem; i++) {
            const adv_ev e = m->evs[i];
            int p = -1;
            if (e.kind != ADV_EV_ALLOC && e.phase == ADV_PH_OPT) {
                const char *n = adv_str(m, m->allocs[e.a].name);
                if (!strncmp(n, "grad.shard.", 11)) p = param_index(n + 11);
            }
            if (p < 0 || (size_t)p >= np) {
                put(&z, e);
                continue;
            }
            const adv_alloc *pa = &m->allocs[z.param[p]];
            uint32_t h = add_alloc(&z, pa->size, m->copy_stream, adv_str(m, pa->name));
            if (h == UINT32_MAX) break;
            put(&z, adv_ev_like(&e, h, ADV_EV_ALLOC, 0));
            put(&z, e);
            put(&z, adv_ev_like(&e, h, ADV_EV_FREE_ASYNC, m->copy_stream));
        }
        if (z.nomem) goto out;
        free(m->evs);
        m->evs = z.out, m->nevs = z.nout;
        z.out = NULL;
    }
    if (adv_opt_param_order(m) != 0) goto out;
    rc = 0;
out:
    if (rc < 0) snprintf(err, errsz, "out of memory");
    free(z.param), free(z.gathered), free(z.unit_in), free(z.out), free(pos), free(newmb),
        free(z.full);
    return rc;
}
