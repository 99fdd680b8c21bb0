/* viz_category.c — what each byte is: parameter, gradient, optimizer state, activation,
 * temporary, workspace, other, or none said.
 *
 * The first source is gpumem's own (snapshot/analyze/gm_category.c, the report's "by category"
 * table): names, phases, and for an unannotated recording inference from lifetimes, each
 * allocation credited to the one that decided it (VIZ_SRC_NAME, VIZ_SRC_PHASE,
 * VIZ_SRC_INFERENCE). What it leaves undecided, the page reads itself, saying only what the
 * recording shows plainly:
 *   - names (VIZ_SRC_NAME): the included trainer and `gpumem record`'s PyTorch hooks name
 *     gradients "grad.<param>" (ZeRO shards "grad.shard.<param>") and optimizer state
 *     "<optimizer>.<state>.<param>" ("adam.m.wte", "adam.exp_avg.h.0.attn.weight"); so a name X
 *     for which some "grad.X" exists is a parameter, and "K.S.X" with X a parameter is optimizer
 *     state. Names that start "adam." or hold "exp_avg" are optimizer state even without
 *     gradients named;
 *   - phases (VIZ_SRC_PHASE), for what the names leave: born in a forward range and freed after
 *     its step's backward began (the first allocation born in that step's backward range) is an
 *     activation; born in a forward, backward or optimizer range and freed before the next phase
 *     began (of its step, or the next step's first) is a temporary. A run that stopped in the
 *     middle of a phase (an OOM) has no next phase: what it freed then, or what was alive at the
 *     OOM it stopped at (gm_category_cut), gets no category.
 * Anything else stays without a category ("none said"), never guessed.
 *
 * A source is one function in `sources` below, asked in order; the first that answers wins. */
#include <stdlib.h>
#include <string.h>

#include "snapshot/analyze/gm_advise.h"
#include "snapshot/analyze/gm_category.h"
#include "snapshot/record/bytemap.h"
#include "viz/viz.h"

const char *const viz_cat_name[VIZ_NCATS] = {"none said",  "parameter", "gradient",  "optimizer state",
                                             "activation", "temporary", "workspace", "other"};
const char *const viz_src_name[VIZ_NSRCS] = {"", "name", "phases", "inference"};

#define VIZ_MAX_STEP 10000000 /* step numbers the phase source keeps a slot for */

/* The phase of a range: the last component of its path that names one (advise's words). */
static uint8_t phase_of_range(const gm_model *m, uint32_t range)
{
    const gm_range *r = range ? gm_range_of(m, range) : NULL;
    if (!r || !r->path) return ADV_PH_OTHER;
    uint8_t ph = ADV_PH_OTHER;
    char comp[256];
    for (const char *p = r->path; *p;) {
        size_t n = strcspn(p, "/");
        if (n < sizeof comp) {
            memcpy(comp, p, n);
            comp[n] = 0;
            int x = adv_phase_of_name(comp);
            if (x) ph = (uint8_t)x;
        }
        p += n;
        if (*p == '/') p++;
    }
    return ph;
}

/* ---------------------------------------------------------------- the sources */

typedef struct cat_ctx {
    const gm_model *m;
    const gm_categories *gm; /* gpumem's own categories (NULL: not computed) */
    const uint8_t *phase;
    const int32_t *step;  /* per allocation: the step of its birth range; -1 none */
    bytemap params;       /* X for every "grad.X" name, by its bytes: X is a parameter */
    u64map name_cat;      /* name string id -> VIZ_CAT_* + 1 (0: not decided yet) */
    uint64_t *bwd_start;  /* per step number: the first birth seq in its backward (0: none) */
    size_t nstep;         /* step numbers below this have a slot */
    uint64_t *starts;     /* where each phase of each step began (its first birth), in order */
    size_t nstarts, next; /* next: the first start after the birth asked last (births come in
                             order, so it only moves on) */
} cat_ctx;

static int by_name_str(const cat_ctx *x, const char *n)
{
    if (!strncmp(n, "grad.", 5)) return VIZ_CAT_GRAD;
    if (bytemap_get_str(&x->params, n)) return VIZ_CAT_PARAM;
    const char *d1 = strchr(n, '.'), *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
    if (d2 && d2[1] && bytemap_get_str(&x->params, d2 + 1))
        return VIZ_CAT_OPT;
    if (!strncmp(n, "adam.", 5) || !strncmp(n, "adamw.", 6) || strstr(n, "exp_avg"))
        return VIZ_CAT_OPT;
    return VIZ_CAT_NONE;
}

/* gpumem's own category (the report's), credited to its source; its undecided "other" is left
 * to the sources after it */
static int src_gpumem(cat_ctx *x, size_t i)
{
    static const uint8_t cat[GM_NCATS] = {VIZ_CAT_PARAM, VIZ_CAT_GRAD, VIZ_CAT_OPT,      VIZ_CAT_ACT,
                                          VIZ_CAT_TEMP,  VIZ_CAT_WORKSPACE, VIZ_CAT_OTHER};
    if (!x->gm || x->gm->cat[i] >= GM_NCATS || x->gm->src[i] == GM_CSRC_NONE) return VIZ_CAT_NONE;
    return cat[x->gm->cat[i]];
}
static int src_gpumem_source(const cat_ctx *x, size_t i)
{
    static const uint8_t src[GM_NCSRCS] = {VIZ_SRC_NONE, VIZ_SRC_NAME, VIZ_SRC_PHASE, VIZ_SRC_INFERENCE};
    return src[x->gm->src[i]];
}

static int src_name(cat_ctx *x, size_t i)
{
    const gm_alloc *a = &x->m->allocs[i];
    if (!a->name) return VIZ_CAT_NONE;
    uint64_t *hit = u64map_get(&x->name_cat, a->name);
    if (hit) return (int)*hit - 1;
    int c = by_name_str(x, gm_str(x->m, a->name));
    u64map_put(&x->name_cat, a->name, (uint64_t)c + 1); /* a failed put only costs a lookup */
    return c;
}

static int src_phase(cat_ctx *x, size_t i)
{
    const gm_alloc *a = &x->m->allocs[i];
    int32_t st = x->step[i];
    while (x->next < x->nstarts && x->starts[x->next] <= a->birth)
        x->next++;
    if (st < 0 || (size_t)st >= x->nstep || !a->death || x->phase[i] == ADV_PH_OTHER)
        return VIZ_CAT_NONE;
    /* alive at the OOM the run stopped at: its free is the unwinding's, no phase's */
    if (x->gm && gm_category_cut(x->gm, a)) return VIZ_CAT_NONE;
    uint64_t bw = x->bwd_start[st];
    if (x->phase[i] == ADV_PH_FWD && bw && a->death >= bw) return VIZ_CAT_ACT;
    /* freed before the next phase (of this step or the next) began: a run that stopped in the
     * middle of a phase (an OOM) has no next phase, and says nothing */
    if (x->next < x->nstarts && a->death < x->starts[x->next]) return VIZ_CAT_TEMP;
    return VIZ_CAT_NONE;
}

static int cmp_u64(const void *p, const void *q)
{
    uint64_t a = *(const uint64_t *)p, b = *(const uint64_t *)q;
    return a < b ? -1 : a > b;
}

/* Asked in this order; each answer is credited to the VIZ_SRC_* beside it (gpumem's own: to
 * the source that decided it there). */
static int (*const sources[])(cat_ctx *, size_t) = {src_gpumem, src_name, src_phase};
static const uint8_t source_id[] = {VIZ_NSRCS, VIZ_SRC_NAME, VIZ_SRC_PHASE};

/* ---------------------------------------------------------------- */

int viz_categories_build(gm_db *d, const gm_model *m, viz_categories *c)
{
    memset(c, 0, sizeof *c);
    cat_ctx x = {.m = m};
    gm_categories gmc;
    char err[256];
    if (gm_categories_build(d, m, &gmc, err, sizeof err) == 0) x.gm = &gmc;
    int rc = -1;
    int32_t *step = malloc(sizeof *step * (m->nallocs + 1));
    c->phase = malloc(m->nallocs + 1);
    c->cat = calloc(m->nallocs + 1, 1);
    c->src = calloc(m->nallocs + 1, 1);
    if (!step || !c->phase || !c->cat || !c->src) goto out;
    x.phase = c->phase, x.step = step;
    /* per range once: its phase and step (phase in the low byte, step + 1 above) */
    u64map range_info = {0};
    int64_t maxstep = -1;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        uint64_t *inf = u64map_get(&range_info, a->range);
        if (!inf) {
            const gm_range *r = a->range ? gm_range_of(m, a->range) : NULL;
            int64_t st = r && r->step >= 0 && r->step < INT32_MAX ? r->step : -1;
            if (st > maxstep) maxstep = st;
            if (u64map_put(&range_info, a->range,
                           phase_of_range(m, a->range) | (uint64_t)(st + 1) << 8)) {
                u64map_free(&range_info);
                goto out;
            }
            inf = u64map_get(&range_info, a->range);
        }
        c->phase[i] = (uint8_t)(*inf & 0xff);
        step[i] = (int32_t)(*inf >> 8) - 1;
    }
    u64map_free(&range_info);
    for (size_t s = 0; s < m->nsteps; s++)
        if (m->steps[s].step > maxstep && m->steps[s].step < INT32_MAX) maxstep = m->steps[s].step;
    if (maxstep >= VIZ_MAX_STEP) maxstep = -1; /* not step counts: the phase source says none */
    x.nstep = (size_t)(maxstep + 1);
    uint64_t *first[3] = {0}; /* per phase (forward, backward, optimizer) and step: first birth */
    for (int q = 0; q < 3; q++)
        first[q] = calloc(x.nstep + 1, sizeof *first[q]);
    x.bwd_start = first[1];
    x.starts = malloc(sizeof *x.starts * (3 * x.nstep + 1));
    if (!first[0] || !first[1] || !first[2] || !x.starts) {
        free(first[0]), free(first[2]);
        goto out;
    }
    /* parameters: X for every "grad.X" (and "grad.shard.X") name */
    u64map seen = {0};
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (!a->name || !viz_is_device(a) || u64map_get(&seen, a->name)) continue;
        if (u64map_put(&seen, a->name, 1)) {
            u64map_free(&seen);
            goto out;
        }
        const char *n = gm_str(m, a->name);
        if (strncmp(n, "grad.", 5)) continue;
        n += 5;
        if (!strncmp(n, "shard.", 6) && n[6]) n += 6;
        if (*n && !bytemap_get_str(&x.params, n) && bytemap_put_str(&x.params, n, 1)) {
            u64map_free(&seen);
            goto out;
        }
    }
    u64map_free(&seen);
    /* per step: where each phase began (its first birth: allocations are in birth order) */
    for (size_t i = 0; i < m->nallocs; i++) {
        int ph = c->phase[i];
        if (ph >= ADV_PH_FWD && ph <= ADV_PH_OPT && step[i] >= 0 && (size_t)step[i] < x.nstep &&
            !first[ph - 1][step[i]])
            first[ph - 1][step[i]] = m->allocs[i].birth;
    }
    for (int q = 0; q < 3; q++)
        for (size_t t = 0; t < x.nstep; t++)
            if (first[q][t]) x.starts[x.nstarts++] = first[q][t];
    free(first[0]), free(first[2]);
    gm_sort(x.starts, x.nstarts, sizeof *x.starts, cmp_u64);
    uint64_t peak_total = 0;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        if (!viz_is_device(a)) continue;
        for (size_t s = 0; s < sizeof sources / sizeof *sources; s++) {
            int k = sources[s](&x, i);
            if (k != VIZ_CAT_NONE) {
                c->cat[i] = (uint8_t)k;
                c->src[i] = source_id[s] == VIZ_NSRCS ? (uint8_t)src_gpumem_source(&x, i) : source_id[s];
                break;
            }
        }
        uint64_t p = m->peak_allocated_seq;
        if (a->birth <= p && (!a->death || a->death > p)) {
            peak_total += a->size;
            c->peak[c->src[i]] += a->size;
        }
    }
    c->by_default = peak_total && 2 * (peak_total - c->peak[VIZ_SRC_NONE]) >= peak_total;
    rc = 0;
out:
    if (x.gm) gm_categories_free(&gmc);
    bytemap_free(&x.params), u64map_free(&x.name_cat);
    free(x.bwd_start), free(x.starts), free(step);
    if (rc) viz_categories_free(c);
    return rc;
}

void viz_categories_free(viz_categories *c)
{
    free(c->phase), free(c->cat), free(c->src);
    memset(c, 0, sizeof *c);
}
