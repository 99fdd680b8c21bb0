/* gm_advise.c — the model behind `gpumem advise`: the recorded program as a trace, each memory
 * technique as a rewrite of that trace, and the prediction as a replay through gpumem's own
 * allocator.
 *
 * The story. A recording is a sequence of allocation events. Each device allocation becomes an
 * adv_alloc (requested size, stream, class) and two adv_ev entries (its birth and its death, in
 * recorded order). Every event also carries where it happened in the program, read from its
 * NVTX range: the step instance ("step N"), the phase (a path component fwd / bwd / opt, or
 * their long names) and the phase's child range instance ("h3" in "step 2/fwd/h3/attn": the
 * layer). The class of an allocation is its name with digits as '*' ("h*.mlp.fc"), else its
 * call site, so a technique can target "every layer's MLP input" at once.
 *
 * A technique never computes a peak. It rewrites the event list the way the program would
 * allocate under that technique, and adv_replay() runs the rewritten list through
 * alloc_replay() with the configuration the program was recorded under. Rounding, caching,
 * per-stream pools and fragmentation are therefore in every prediction; a prediction is never a
 * sum of sizes. The unmodified model replays to the recorded peaks exactly (tested).
 *
 * The rewrites (insertions are anchored before or after a recorded event, then merged):
 *   - saved activations (adv_stash): born in forward, dying in a backward child range B; the
 *     matching forward range F is the latest one of the same name before B. At the end of F
 *     the tensors are stashed, at the start of B restored, in the order frameworks (and the
 *     included trainer) do it: stash = drop the recomputed ones, convert to bf16, offload;
 *     restore = prefetch, convert back, recompute. A recomputed tensor's new life starts at the
 *     restore point and ends at its recorded death. Recompute also re-runs its producer's
 *     temporaries: the allocations of F born after a dropped tensor and freed before the next
 *     kept tensor is born, or alive when a dropped tensor is born (the attention scores of an
 *     attention output; the projection before a residual sum). Without uses that is the chain
 *     of producers the recorded order implies; with uses it could be narrowed per tensor.
 *   - accumulation (adv_accum): allocations born and freed within a step's forward/backward are
 *     batch-proportional; they shrink by k and the forward/backward repeats k times.
 *   - set-to-none and optimizer-state offload (adv_opt): gradients (born in backward, outliving
 *     the step) are freed after their parameter's update and born again where they were born
 *     in the first step; optimizer state (born in the optimizer phase, outliving the step) is
 *     brought in on a copy stream for its update and freed after it. The update of a parameter
 *     is located by its state's name ("grad.X" <-> "adam.m.X"), else by size.
 * Costs come from the recording's own op timeline (timed launches, else NVTX leaf ranges: the
 * producer of a tensor is the first op issued after its birth); gm_advise_cmd.c adds the
 * device model (--gpu) and the link model (--link).
 */
#include "snapshot/analyze/gm_advise.h"
#include "snapshot/analyze/gm_category.h"
#include "snapshot/read/gm_analyze_pages.h"
#include "snapshot/record/bytemap.h"
#include "snapshot/record/rec.h"

#include <ctype.h>
#include <limits.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ------------------------------------------------------------------ strings */

static int own_strs(adv_model *m);
static int own_allocs(adv_model *m);

/* The string table: str_idx maps a string's hash (or a later key of its chain, bytemap_rekey)
 * to its index in strs, and the bytes decide. Two strings of one hash are two entries: a
 * collision merged two classes or two names (their bytes, their sizes and their advice). With
 * key set, a string not found leaves there the key it would take (str_slot). */
static size_t str_find(const u64map *idx, char *const *strs, const char *s, uint64_t *key)
{
    uint64_t k = bytemap_hash(s, strlen(s));
    for (;; k = bytemap_rekey(k)) {
        const uint64_t *e = u64map_get(idx, k);
        if (!e) break;
        if (!strcmp(strs[*e], s)) return (size_t)*e;
    }
    if (key) *key = k;
    return SIZE_MAX;
}

/* Puts strs[i] (not there yet) into idx. 0, or -1 (out of memory). */
static int str_slot(u64map *idx, char *const *strs, size_t i)
{
    uint64_t k;
    if (str_find(idx, strs, strs[i], &k) != SIZE_MAX) return 0;
    return u64map_put(idx, k, i);
}

/* Interns s; returns its index (0 for "" or on out of memory). */
static uint32_t intern(adv_model *m, const char *s)
{
    if (!s || !*s) return 0;
    size_t i = str_find(&m->str_idx, m->strs, s, NULL);
    if (i != SIZE_MAX) return (uint32_t)i;
    if (own_strs(m) || gm_grow((void **)&m->strs, &m->strs_cap, m->nstrs + 1, sizeof *m->strs))
        return 0;
    char *c = strdup(s);
    if (!c) return 0;
    m->strs[m->nstrs] = c;
    if (str_slot(&m->str_idx, m->strs, m->nstrs) != 0) {
        free(c);
        return 0;
    }
    return (uint32_t)m->nstrs++;
}

const char *adv_str(const adv_model *m, uint32_t i)
{
    return i < m->nstrs ? m->strs[i] : "";
}

static uint32_t new_alloc(adv_model *m, uint64_t size, uint32_t stream, uint32_t cls, uint32_t name,
                          uint32_t orig)
{
    if (own_allocs(m) ||
        gm_grow_fast((void **)&m->allocs, &m->allocs_cap, m->nallocs + 1, sizeof *m->allocs))
        return UINT32_MAX;
    m->allocs[m->nallocs] = (adv_alloc){size, stream, cls, name, orig};
    return (uint32_t)m->nallocs++;
}

static int life_index(const adv_model *m, size_t **birth, size_t **death);

int adv_torch_cache_row(adv_model *m, int kind, uint64_t flags, uint64_t alloc_id, uint32_t stream, uint64_t t,
                        uint64_t size, uint64_t requested, size_t *evcap, adv_pool_ids *ids)
{
    switch (kind) {
    case REC_TORCH_SEG_UNMAP: /* a private pool's: the graph or MemPool is gone, its pool ends here */
        if ((flags & REC_F_PRIVATE_POOL) && adv_add_pool_release(m, kind, alloc_id, stream, t, evcap, ids) < 0)
            return -1;
        /* PyTorch gave memory back: the replay gives back its cache there too, but where a
         * memory fraction below 1 was in force: there PyTorch gives back what its cap makes it
         * (its garbage collection under a garbage_collection_threshold, the blocks over
         * max_split_size_mb at the cap, its cache before an OOM's retry), some segments, not
         * always the cache, and every replay under that cap does what its own configuration
         * does there (a release of the cache read 2 MiB over max_memory_reserved() replaying
         * the recorded configuration and 44 MiB under it for one without the threshold;
         * under max_split_size_mb:40, 8 MiB under it and 40 MiB: torch_features.sh gc, split).
         * The program's empty_cache is its own row (36). */
        if (!(flags & REC_F_PRIVATE_POOL) && m->fraction_in_force) return 1;
        return adv_add_release(m, t, evcap) < 0 ? -1 : 1;
    case REC_TORCH_EMPTY_CACHE:
        return adv_add_release(m, t, evcap) < 0 ? -1 : 1;
    case REC_TORCH_MEMORY_FRACTION:
        /* the key's fraction at the start is the configuration's, no cap the program set: advise
         * drops it with the key (adv_cfg_uncapped), frag and tune apply the key themselves */
        m->fraction_in_force = requested < 1000000; /* the fraction in millionths */
        if (flags & REC_F_FRACTION_START) return 1;
        return adv_add_limit(m, t, size, requested, evcap) < 0 ? -1 : 1;
    default:
        return 0;
    }
}

int adv_add_release(adv_model *m, uint64_t t, size_t *evcap)
{
    if (m->nevs && m->evs[m->nevs - 1].kind == ADV_EV_EMPTY_CACHE) return 0;
    return adv_append_release(m, t, evcap);
}

int adv_append_release(adv_model *m, uint64_t t, size_t *evcap)
{
    uint32_t a = new_alloc(m, 0, 0, 0, 0, (uint32_t)m->nallocs);
    if (a == UINT32_MAX || gm_grow_fast((void **)&m->evs, evcap, m->nevs + 1, sizeof *m->evs)) return -1;
    m->evs[m->nevs++] = (adv_ev){.a = a, .kind = ADV_EV_EMPTY_CACHE, .step = -1, .t = t};
    return 1;
}

int adv_add_limit(adv_model *m, uint64_t t, uint64_t cap, uint64_t millionths, size_t *evcap)
{
    /* a fraction of 1 caps nothing PyTorch could reserve; recordings before 0 meant 0 bytes
     * (alloc/README.md) noted it as cap 0, which now reads as "nothing may be reserved" */
    if (millionths >= 1000000) cap = ADV_LIMIT_MAX;
    uint32_t a = new_alloc(m, 0, 0, 0, 0, (uint32_t)m->nallocs);
    if (a == UINT32_MAX || gm_grow_fast((void **)&m->evs, evcap, m->nevs + 1, sizeof *m->evs)) return -1;
    m->evs[m->nevs] = (adv_ev){.a = a, .kind = ADV_EV_LIMIT, .step = -1, .t = t};
    adv_ev_set_limit(&m->evs[m->nevs++], cap);
    return 1;
}

int adv_add_marker(adv_model *m, uint64_t t, uint32_t stream, int what, uint32_t at, size_t *evcap)
{
    return adv_add_marker_sized(m, t, stream, what, at, 0, evcap);
}

int adv_add_marker_sized(adv_model *m, uint64_t t, uint32_t stream, int what, uint32_t at, uint64_t size,
                         size_t *evcap)
{
    uint32_t a = new_alloc(m, size, stream, 0, 0, (uint32_t)m->nallocs);
    if (a == UINT32_MAX || gm_grow_fast((void **)&m->evs, evcap, m->nevs + 1, sizeof *m->evs)) return -1;
    m->evs[m->nevs++] =
        (adv_ev){.a = a, .kind = ADV_EV_MARKER, .pad = (uint16_t)what, .stream = at, .step = -1, .t = t};
    return 1;
}

uint32_t adv_intern(adv_model *m, const char *s)
{
    return intern(m, s);
}
uint32_t adv_new_alloc(adv_model *m, uint64_t size, uint32_t stream, uint32_t cls, uint32_t name, uint32_t orig)
{
    return new_alloc(m, size, stream, cls, name, orig);
}

/* ------------------------------------------------------------------ loading */

int adv_phase_of_name(const char *n)
{
    if (!n) return ADV_PH_OTHER;
    if (!strcmp(n, "fwd") || !strcasecmp(n, "forward")) return ADV_PH_FWD;
    if (!strcmp(n, "bwd") || !strcasecmp(n, "backward")) return ADV_PH_BWD;
    if (!strcmp(n, "opt") || !strcasecmp(n, "optim") || !strcasecmp(n, "optimizer") ||
        !strcasecmp(n, "optimizer_step"))
        return ADV_PH_OPT;
    return ADV_PH_OTHER;
}

static int64_t step_number(const char *name)
{
    if (!name || strncasecmp(name, "step", 4) != 0) return -1;
    const char *p = name + 4;
    while (*p == ' ' || *p == '_' || *p == '-' || *p == '#')
        p++;
    if (!isdigit((unsigned char)*p)) return -1;
    int64_t v = 0;
    for (; isdigit((unsigned char)*p) && v < (1ll << 50); p++)
        v = v * 10 + (*p - '0');
    return *p == 0 ? v : -1;
}

/* What a range tells about the events inside it. */
typedef struct rinfo {
    int64_t id;
    uint64_t lr; /* phase child instance (range id) */
    uint32_t lr_name;
    int32_t step;
    uint8_t phase, is_phase, has_child;
    uint64_t start, end;
    uint64_t op; /* the range as an op of every step: its path without "step N/", numbered from
                  * 1 by its bytes (one number for one path, never for two); 0 without one */
    uint32_t mod; /* a PyTorch recording's: the range's own name, its module's path (interned) */
    uint64_t pass; /* a phase's child: the phase (its range id), 0 otherwise */
} rinfo;

/* PyTorch's hooks name a range by its module's path ("h.3.attn.c_attn"); what checkpointing and
 * offloading act on is the repeated block the module belongs to: the path up to its first
 * number ("h.3", "blocks.7"); a module outside every list keeps its path ("ln_f", "lm_head"). */
static const char *block_of(const char *path, char *out, size_t outsz)
{
    if (!path) return path;
    size_t n = 0;
    for (const char *p = path; *p;) {
        size_t len = strcspn(p, ".");
        int num = len > 0;
        for (size_t i = 0; i < len; i++)
            num &= isdigit((unsigned char)p[i]) != 0;
        n = (size_t)(p - path) + len;
        if (num) break;
        p += len;
        if (*p == '.') p++;
        if (!*p) break;
    }
    snprintf(out, outsz, "%.*s", (int)n, path);
    return out;
}

/* Is a child range's name one of a repeated block's ("h.3", "blocks.7": a number last)? */
int adv_is_block_name(const char *n)
{
    const char *dot = n ? strrchr(n, '.') : NULL;
    if (!dot || !dot[1]) return 0;
    for (const char *p = dot + 1; *p; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    return 1;
}

/* a checkpointed block's recompute seen in layer range lr_name (adv_model.ckpt_blocks) */
static void note_recompute(adv_model *m, uint32_t lr_name)
{
    if (!lr_name || adv_recomputed_block(m, lr_name)) return;
    if (m->nckpt_blocks < ADV_MAX_CKPT)
        m->ckpt_blocks[m->nckpt_blocks++] = lr_name;
    else
        m->ckpt_all = 1;
}

int adv_recomputed_block(const adv_model *m, uint32_t lr_name)
{
    if (!lr_name) return 0;
    if (m->ckpt_all) return adv_is_block_name(adv_str(m, lr_name));
    for (unsigned i = 0; i < m->nckpt_blocks; i++)
        if (m->ckpt_blocks[i] == lr_name) return 1;
    return 0;
}

static int load_ranges(gm_db *d, adv_model *m, rinfo **out, size_t *nout, u64map *idx)
{
    char blk[256];
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT r.id, r.parent, s.s, r.start_ns, r.end_ns, r.path FROM ranges r "
                           "LEFT JOIN strings s ON s.id = r.name ORDER BY r.id",
                           -1, &s, NULL) != SQLITE_OK)
        return -1;
    rinfo *r = NULL;
    size_t n = 0, cap = 0, scap = 0;
    u64map snum = {0}; /* step number -> index into m->steps */
    bytemap paths = {0}; /* a path without "step N/" -> its op number */
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (gm_grow((void **)&r, &cap, n + 1, sizeof *r)) break;
        rinfo *x = &r[n];
        memset(x, 0, sizeof *x);
        x->id = sqlite3_column_int64(s, 0);
        int64_t parent = sqlite3_column_int64(s, 1);
        const char *name = (const char *)sqlite3_column_text(s, 2);
        x->start = (uint64_t)sqlite3_column_int64(s, 3);
        x->end = sqlite3_column_type(s, 4) == SQLITE_NULL ? x->start
                                                          : (uint64_t)sqlite3_column_int64(s, 4);
        x->step = -1;
        const char *path = (const char *)sqlite3_column_text(s, 5);
        if (path && !strncmp(path, "step ", 5)) {
            const char *slash = strchr(path, '/');
            path = slash ? slash + 1 : "";
        }
        if (path) {
            uint64_t *op = bytemap_get_str(&paths, path);
            x->op = op ? *op : paths.n + 1;
            if (!op && bytemap_put_str(&paths, path, x->op) != 0) x->op = 0; /* no memory: an op of its own */
        }
        x->mod = m->torch && name ? intern(m, name) : 0;
        uint64_t *pi = parent && parent < x->id ? u64map_get(idx, (uint64_t)parent) : NULL;
        rinfo *p = pi ? &r[*pi] : NULL;
        if (p) {
            p->has_child = 1;
            x->phase = p->phase, x->step = p->step, x->lr = p->lr, x->lr_name = p->lr_name;
            if (p->is_phase) {
                x->lr = (uint64_t)x->id, x->lr_name = intern(m, m->torch ? block_of(name, blk, sizeof blk) : name);
                x->pass = (uint64_t)parent;
            }
        }
        int ph = adv_phase_of_name(name);
        /* a forward inside the backward is torch.utils.checkpoint's recompute (PyTorch's hooks
         * open it as "fwd" in the block's "bwd"): the backward's, born and dead in it. As a
         * forward of its own it was a forward pass of the loop ("4 forward passes a step: it
         * accumulates already" of a loop of one) and its tensors saved activations, offloaded
         * in a prediction that measured no saving */
        if (ph == ADV_PH_FWD && p && p->phase == ADV_PH_BWD) ph = ADV_PH_OTHER, note_recompute(m, x->lr_name);
        if (ph) x->phase = (uint8_t)ph, x->is_phase = 1, x->lr = 0, x->lr_name = 0;
        int64_t sn = step_number(name);
        if (sn >= 0) {
            /* one step for every range of its number: PyTorch's backward runs on its own thread,
             * under a "step N" range of that thread */
            uint64_t *si = u64map_get(&snum, (uint64_t)sn);
            if (si) {
                adv_step *st = &m->steps[*si];
                if (x->start < st->start_ns) st->start_ns = x->start;
                if (x->end > st->end_ns) st->end_ns = x->end;
                x->step = (int32_t)*si;
            } else if (!gm_grow((void **)&m->steps, &scap, m->nsteps + 1, sizeof *m->steps)) {
                m->steps[m->nsteps] = (adv_step){sn, x->start, x->end};
                u64map_put(&snum, (uint64_t)sn, m->nsteps);
                x->step = (int32_t)m->nsteps++;
            }
            x->phase = ADV_PH_OTHER, x->lr = 0, x->lr_name = 0;
        }
        u64map_put(idx, (uint64_t)x->id, n);
        n++;
    }
    sqlite3_finalize(s);
    u64map_free(&snum);
    bytemap_free(&paths);
    *out = r;
    *nout = n;
    return 0;
}

static int cmp_op(const void *a, const void *b)
{
    const adv_op *x = a, *y = b;
    return x->t < y->t ? -1 : x->t > y->t;
}
/* An op of every step: its range's path (rinfo.op; 0: an op of its own), and for a timed
 * launch its kernel and the launch's rank among that kernel's in the range instance. Compared
 * field by field: two ops are one only when all three are equal. */
typedef struct op_key {
    uint64_t op, kernel, n;
} op_key;
typedef struct op_dur {
    op_key key;
    uint64_t dur;
    size_t i;
} op_dur;
static int cmp_op_key(const op_key *x, const op_key *y)
{
    if (x->op != y->op) return x->op < y->op ? -1 : 1;
    if (x->kernel != y->kernel) return x->kernel < y->kernel ? -1 : 1;
    return x->n < y->n ? -1 : x->n > y->n;
}
static int cmp_op_dur(const void *a, const void *b)
{
    const op_dur *x = a, *y = b;
    int c = cmp_op_key(&x->key, &y->key);
    if (c) return c;
    return x->dur < y->dur ? -1 : x->dur > y->dur;
}

/* Each op's duration becomes the median of its own recurrences: the same range path under every
 * step (for timed launches: the same n-th launch of the same kernel in that range); an op
 * outside every named range keeps its own. A recording on a shared machine has an op
 * that the scheduler held off the core for milliseconds in one step; its recompute would be
 * priced at that (advise_bench.sh under load: one GELU recorded at 20 ms against 0.4 ms in the
 * other steps put recompute's extra time at 13% of a step, measured at 1%). The lower median
 * of the recurrences is what the op costs when nothing else runs, or the one value there is. */
static void ops_median(adv_model *m, const op_key *key)
{
    op_dur *d = m->nops ? malloc(m->nops * sizeof *d) : NULL;
    if (!d) return; /* without memory: the durations as recorded */
    for (size_t i = 0; i < m->nops; i++)
        d[i] = (op_dur){key[i], m->ops[i].dur, i};
    gm_sort(d, m->nops, sizeof *d, cmp_op_dur);
    for (size_t a = 0, b; a < m->nops; a = b) {
        for (b = a + 1; b < m->nops && !cmp_op_key(&d[b].key, &d[a].key);)
            b++;
        if (!d[a].key.op) continue; /* ops outside every named range: as recorded */
        uint64_t med = d[a + (b - a - 1) / 2].dur;
        for (size_t k = a; k < b; k++)
            m->ops[d[k].i].dur = med;
    }
    free(d);
}

/* The op timeline: timed launches when recorded (GPUMEM_USES=timed), else leaf NVTX ranges;
 * each op's duration the median of its recurrences (ops_median). */
static void load_ops(gm_db *d, adv_model *m, const rinfo *r, size_t nr, const u64map *ridx, const gm_spans *spans)
{
    size_t cap = 0, kcap = 0;
    op_key *key = NULL; /* per op, ops_median's; op 0: an op of its own */
    bytemap nth = {0};  /* (range instance, kernel), their bytes -> launches so far */
    sqlite3_stmt *s;
    if (gm_table_exists(d, "launches") &&
        sqlite3_prepare_v2(
            d->db,
            "SELECT e.t, l.start_ns, l.end_ns, e.range, l.kernel FROM launches l JOIN events e "
            "ON e.seq = l.seq WHERE l.start_ns IS NOT NULL AND l.end_ns IS NOT NULL "
            "ORDER BY l.seq",
            -1, &s, NULL) == SQLITE_OK) {
        while (sqlite3_step(s) == SQLITE_ROW) {
            if (gm_grow((void **)&m->ops, &cap, m->nops + 1, sizeof *m->ops) ||
                gm_grow((void **)&key, &kcap, m->nops + 1, sizeof *key))
                break;
            int64_t st = sqlite3_column_int64(s, 1), en = sqlite3_column_int64(s, 2);
            /* the launch's phase: its push/pop range, else the start/end range open then */
            int64_t rg = sqlite3_column_int64(s, 3);
            uint64_t *ri = u64map_get(ridx, gm_spans_range(spans, rg > 0 && rg <= UINT32_MAX ? (uint32_t)rg : 0,
                                                           sqlite3_column_int64(s, 0)));
            /* the n-th launch of its kernel in its range: one op of each step */
            op_key k = {0, 0, 0};
            if (ri && r[*ri].op) {
                uint64_t inst[2] = {(uint64_t)r[*ri].id, (uint64_t)sqlite3_column_int64(s, 4)};
                uint64_t *c = bytemap_get(&nth, inst, sizeof inst), n = c ? ++*c : 0;
                if (!c && bytemap_put(&nth, inst, sizeof inst, 0) != 0) break;
                k = (op_key){r[*ri].op, inst[1], n};
            }
            key[m->nops] = k;
            m->ops[m->nops++] = (adv_op){(uint64_t)sqlite3_column_int64(s, 0),
                                         en > st ? (uint64_t)(en - st) : 0, ri ? r[*ri].phase : 0};
        }
        sqlite3_finalize(s);
        m->ops_timed = m->nops > 0;
    }
    bytemap_free(&nth);
    if (!m->nops)
        for (size_t i = 0; i < nr; i++) {
            if (r[i].has_child || r[i].is_phase || !r[i].phase) continue;
            if (gm_grow((void **)&m->ops, &cap, m->nops + 1, sizeof *m->ops) ||
                gm_grow((void **)&key, &kcap, m->nops + 1, sizeof *key))
                break;
            key[m->nops] = (op_key){r[i].op, 0, 0};
            m->ops[m->nops++] =
                (adv_op){r[i].start, r[i].end > r[i].start ? r[i].end - r[i].start : 0, r[i].phase};
        }
    if (key) ops_median(m, key);
    free(key);
    if (m->nops > 1) gm_sort(m->ops, m->nops, sizeof *m->ops, cmp_op);
    cap = 0;
    for (size_t i = 0; i < nr; i++) {
        if (r[i].phase != ADV_PH_OPT || r[i].is_phase) continue;
        if (gm_grow((void **)&m->opt_starts, &cap, m->nopt_starts + 1, sizeof *m->opt_starts)) break;
        m->opt_starts[m->nopt_starts++] = r[i].start;
    }
    if (m->nopt_starts > 1) gm_sort(m->opt_starts, m->nopt_starts, sizeof *m->opt_starts, gm_cmp_u64);
}

/* The first OOM of the recording (table ooms, whose event carries the NVTX range it happened
 * in): where, what and how much. */
static void load_oom(gm_db *d, adv_model *m, const rinfo *r, const u64map *ridx, const gm_spans *spans)
{
    sqlite3_stmt *s;
    if (!gm_table_exists(d, "ooms") ||
        sqlite3_prepare_v2(
            d->db,
            "SELECT o.seq, o.requested, o.allocated, o.limit_bytes, e.stream, "
            "e.range, e.t, NULL, n.s, e.flags, o.reserved, o.device_free FROM ooms o LEFT "
            "JOIN events e ON e.seq = o.seq LEFT JOIN strings n ON "
            "n.id = o.name ORDER BY o.seq LIMIT 1",
            -1, &s, NULL) != SQLITE_OK)
        return;
    if (sqlite3_step(s) == SQLITE_ROW) {
        adv_oom *o = &m->oom;
        o->seq = (uint64_t)sqlite3_column_int64(s, 0);
        if (!o->seq) o->seq = 1; /* seq 0 is "no OOM"; events start at 1 */
        o->requested = (uint64_t)sqlite3_column_int64(s, 1);
        o->allocated = (uint64_t)sqlite3_column_int64(s, 2);
        o->limit = gm_oom_limit_col(d, s, 3);
        unsigned lflags = (unsigned)sqlite3_column_int64(s, 9) & (REC_F_OOM_FRACTION | REC_F_OOM_KEY);
        o->bound = gm_oom_binding(d, o->limit, (uint64_t)sqlite3_column_int64(s, 10),
                                  (uint64_t)sqlite3_column_int64(s, 11), lflags);
        o->limit_from = gm_oom_limit_from(d, o->limit, lflags);
        o->stream = (uint32_t)sqlite3_column_int64(s, 4);
        /* its phase: the push/pop range of its thread, else the start/end range open then */
        int64_t rg = sqlite3_column_int64(s, 5);
        uint32_t range = gm_spans_range(spans, rg > 0 && rg <= UINT32_MAX ? (uint32_t)rg : 0, sqlite3_column_int64(s, 6));
        uint64_t *ri = u64map_get(ridx, range);
        o->step = ri ? r[*ri].step : -1;
        o->t = (uint64_t)sqlite3_column_int64(s, 6);
        o->ev = SIZE_MAX;
        /* the path up to its phase: "step 2/fwd" of "step 2/fwd/h3/attn" */
        o->where[0] = 0;
        sqlite3_stmt *p;
        if (range && sqlite3_prepare_v2(d->db, "SELECT path FROM ranges WHERE id = ?", -1, &p, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(p, 1, range);
            const char *path = sqlite3_step(p) == SQLITE_ROW ? (const char *)sqlite3_column_text(p, 0) : NULL;
            snprintf(o->where, sizeof o->where, "%s", path ? path : "");
            sqlite3_finalize(p);
        }
        for (char *c = o->where;;) {
            char *slash = strchr(c, '/');
            if (slash) *slash = 0;
            if (adv_phase_of_name(c) || !slash) break;
            *slash = '/';
            c = slash + 1;
        }
        const char *nm = (const char *)sqlite3_column_text(s, 8);
        snprintf(o->name, sizeof o->name, "%s", nm ? nm : "");
    }
    sqlite3_finalize(s);
}

/* "h11.mlp.fc" -> "h*.mlp.fc" */
void adv_name_class(const char *n, char *out, size_t outsz)
{
    size_t o = 0;
    for (const char *p = n; *p && o + 1 < outsz;) {
        if (isdigit((unsigned char)*p)) {
            out[o++] = '*';
            while (isdigit((unsigned char)*p))
                p++;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = 0;
}

/* The call site of each stack: the first frame outside gpumem, the CUDA libraries and CUDA's
 * headers (gm_frame_internal's rule; a header wrapper inlined into the program's code is named
 * by its own function here: the file's frames are read without their inline chains). */
static int load_sites(gm_db *d, adv_model *m, u64map *site)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT st.stack, f.function, f.file, f.line, md.path, f.offset, "
                           "EXISTS (SELECT 1 FROM inlines i WHERE i.frame = f.id) "
                           "FROM stacks st JOIN frames f ON f.id = st.frame "
                           "LEFT JOIN modules md ON md.id = f.module ORDER BY st.stack, st.depth",
                           -1, &s, NULL) != SQLITE_OK)
        return -1;
    while (sqlite3_step(s) == SQLITE_ROW) {
        uint64_t stack = (uint64_t)sqlite3_column_int64(s, 0);
        if (u64map_get(site, stack)) continue;
        const char *fn = (const char *)sqlite3_column_text(s, 1),
                   *file = (const char *)sqlite3_column_text(s, 2);
        const char *mod = (const char *)sqlite3_column_text(s, 4);
        const char *mb = mod ? strrchr(mod, '/') : NULL;
        mb = mb ? mb + 1 : mod ? mod : "?";
        if (!strncmp(mb, "libgpumem", 9) || !strncmp(mb, "libcudart", 9) ||
            !strncmp(mb, "libcuda.", 8) || !strncmp(mb, "libcuda-", 8) ||
            (gm_cuda_header(file) && !sqlite3_column_int(s, 6)))
            continue;
        char buf[512];
        if (fn && file) {
            const char *fb = strrchr(file, '/');
            snprintf(buf, sizeof buf, "%s (%s:%d)", fn, fb ? fb + 1 : file,
                     sqlite3_column_int(s, 3));
        } else {
            snprintf(buf, sizeof buf, "%s+0x%llx", mb,
                     (unsigned long long)sqlite3_column_int64(s, 5));
        }
        u64map_put(site, stack, intern(m, buf));
    }
    sqlite3_finalize(s);
    return 0;
}

typedef struct name_ev {
    uint64_t seq, addr, birth; /* birth: the allocation named (0: the one live at addr at seq) */
    uint32_t name;
} name_ev;

/* The allocation born at seq birth: births[] holds each allocation's, in order. */
static long alloc_born(const uint64_t *births, size_t n, uint64_t birth) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (births[mid] < birth) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && births[lo] == birth ? (long)lo : -1;
}

/* A name, at its place in the event order: to the allocation it names by birth, else (older
 * files) to the one live at its address then. */
static void name_apply(adv_model *m, const u64map *live, const uint64_t *births, const name_ev *n) {
    if (n->birth) {
        long a = births ? alloc_born(births, m->nallocs, n->birth) : -1;
        if (a >= 0) m->allocs[a].name = n->name;
        return;
    }
    const uint64_t *ai = u64map_get(live, n->addr);
    if (ai) m->allocs[*ai].name = n->name;
}

const char *adv_op_base(const char *op, char *buf, size_t n)
{
    const char *p = strncmp(op, "aten.", 5) == 0 ? op + 5 : op;
    const char *dot = strchr(p, '.');
    size_t len = dot ? (size_t)(dot - p) : strlen(p);
    if (len >= n) len = n - 1;
    memcpy(buf, p, len);
    buf[len] = 0;
    return buf;
}

/* an aten op that writes its first argument in place ("aten.add_.Tensor": its base name ends in
 * '_') */
static int inplace_op(const char *op)
{
    char nb[96];
    const char *b = adv_op_base(op, nb, sizeof nb);
    return b[0] && b[strlen(b) - 1] == '_';
}

/* Is op t (the last of m->tops) autograd's detach of the output the op logged before it wrote:
 * what autograd saves of an op's output (aten.detach.default of that very storage)? */
static int autograd_detach(const adv_model *m, const adv_top *t)
{
    if (m->ntops < 2 || strcmp(adv_str(m, t->name), "aten.detach.default")) return 0;
    const adv_top *p = t - 1;
    for (uint32_t i = t->arg0; i < t->arg0 + t->nargs; i++) {
        if (m->targs[i].out || m->targs[i].a == UINT32_MAX) continue;
        for (uint32_t j = p->arg0; j < p->arg0 + p->nargs; j++)
            if (m->targs[j].out && m->targs[j].a == m->targs[i].a) return 1;
    }
    return 0;
}

/* A PyTorch recording without the op log: which module's frame held a tensor, from the hooks'
 * ranges (flat: an event's range is its innermost module's, named by the module's path). A
 * tensor made in the forward whose next allocation is made inside a module called after it, a
 * child of the module that made it (the block's ReLU output, then the block's l2: the
 * functional chain `l2(relu(l1(x)))`), was passed to that call and lives until it returns: its
 * tholds is the last allocation of that call (and of the modules it called). Anything else
 * keeps none (the rewrites then let it go at its block's end). evri: each event's rinfo. 0, or
 * -1 out of memory. */
static int passed_to_module(adv_model *m, const rinfo *r, const uint32_t *evri)
{
    for (size_t i = 0; i < m->nevs; i++) {
        const adv_ev *e = &m->evs[i];
        if (e->kind != ADV_EV_ALLOC || e->phase != ADV_PH_FWD || evri[i] == UINT32_MAX) continue;
        const rinfo *ri = &r[evri[i]];
        size_t j = i + 1;
        while (j < m->nevs && m->evs[j].kind != ADV_EV_ALLOC)
            j++;
        if (j == m->nevs || evri[j] == UINT32_MAX || m->evs[j].step != e->step || m->evs[j].phase != ADV_PH_FWD)
            continue;
        const rinfo *rj = &r[evri[j]];
        const char *made = adv_str(m, ri->mod), *call = adv_str(m, rj->mod);
        size_t lm = strlen(made), lc = strlen(call);
        if (rj == ri || !ri->mod || !rj->mod || lc <= lm + 1 || strncmp(call, made, lm) || call[lm] != '.')
            continue;
        /* the call's allocations: in its range and its children's, until another range's */
        size_t last = j;
        for (size_t k = j + 1; k < m->nevs; k++) {
            if (m->evs[k].kind != ADV_EV_ALLOC) continue;
            const char *in = evri[k] == UINT32_MAX ? "" : adv_str(m, r[evri[k]].mod);
            if (m->evs[k].step != e->step || strncmp(in, call, lc) || (in[lc] && in[lc] != '.')) break;
            last = k;
        }
        if (!m->tholds) {
            if (!(m->tholds = malloc((m->nallocs + 1) * sizeof *m->tholds))) return -1;
            for (size_t a = 0; a < m->nallocs; a++)
                m->tholds[a] = UINT32_MAX;
            m->owns_tops = 1;
        }
        m->tholds[e->a] = m->evs[last].a;
    }
    return 0;
}

/* A PyTorch recording without the op log: where autograd's nodes stand, as far as the hooks'
 * module ranges (flat: one a module call, its children's work outside it) tell (m->hnode). A
 * saved tensor's node is the module range its free falls in: save_on_cpu's unpack of it comes
 * when that node starts, before the range's first allocation, not just before its free (under
 * autocast, the weight's and the input's copies of torch_features.py amp: 20 MiB over its
 * reserved). The call a forward tensor is passed to, the module whose first allocation comes
 * next (the ReLU's output, then the next Linear's), saves it too when it is a Linear: its own
 * unpack then, from that call's backward range's first allocation to its last (stepend: 20 MiB
 * over). The backward range of a call: the next one of its module in the same step (the
 * backward runs the modules in reverse order). evri: each event's rinfo. 0, or -1 out of memory. */
static int hooks_nodes(adv_model *m, const rinfo *r, size_t nr, const uint32_t *evri)
{
    size_t *f0 = malloc((nr + 1) * sizeof *f0), *f1 = malloc((nr + 1) * sizeof *f1),
           *bwd_of = malloc((nr + 1) * sizeof *bwd_of);
    m->hnode = f0 && f1 && bwd_of ? malloc((m->nallocs + 1) * sizeof *m->hnode) : NULL;
    u64map open = {0}; /* a module -> its latest forward range not yet paired */
    int rc = -1;
    if (!m->hnode) goto out;
    m->owns_tops = 1;
    for (size_t k = 0; k < nr; k++)
        f0[k] = f1[k] = bwd_of[k] = SIZE_MAX;
    for (size_t a = 0; a < m->nallocs; a++)
        m->hnode[a] = (adv_hnode){UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
    for (size_t i = 0; i < m->nevs; i++) {
        if (m->evs[i].kind != ADV_EV_ALLOC || evri[i] == UINT32_MAX) continue;
        if (f0[evri[i]] == SIZE_MAX) f0[evri[i]] = i;
        f1[evri[i]] = i;
    }
    for (size_t k = 0; k < nr; k++) {
        if (!r[k].mod || !r[k].pass) continue; /* a module range of a pass */
        uint64_t *f = u64map_get(&open, r[k].mod);
        if (r[k].phase == ADV_PH_FWD && u64map_put(&open, r[k].mod, k) != 0) goto out;
        if (r[k].phase == ADV_PH_BWD && f && *f != SIZE_MAX && r[*f].step == r[k].step)
            bwd_of[*f] = k, *f = SIZE_MAX;
    }
    for (size_t i = 0; i < m->nevs; i++) {
        const adv_ev *e = &m->evs[i];
        size_t k = evri[i], j = i + 1;
        if (k == UINT32_MAX || !r[k].pass || e->a >= m->nallocs) continue;
        if ((e->kind == ADV_EV_FREE || e->kind == ADV_EV_FREE_ASYNC) && r[k].phase == ADV_PH_BWD &&
            f0[k] < i)
            m->hnode[e->a].freed_in = m->evs[f0[k]].a;
        if (e->kind != ADV_EV_ALLOC || e->phase != ADV_PH_FWD) continue;
        while (j < m->nevs && m->evs[j].kind != ADV_EV_ALLOC)
            j++;
        if (j == m->nevs || evri[j] == UINT32_MAX || m->evs[j].step != e->step ||
            m->evs[j].phase != ADV_PH_FWD)
            continue;
        size_t kj = evri[j], b = bwd_of[kj];
        if (!r[kj].pass || r[kj].mod == r[k].mod || b == SIZE_MAX || f0[b] == SIZE_MAX) continue;
        m->hnode[e->a].fed = m->evs[j].a;
        m->hnode[e->a].fed_b0 = m->evs[f0[b]].a, m->hnode[e->a].fed_b1 = m->evs[f1[b]].a;
    }
    rc = 0;
out:
    free(f0), free(f1), free(bwd_of);
    u64map_free(&open);
    return rc;
}

/* PyTorch's hooks open a module's backward range when autograd runs the node that made the
 * module's output. A module that returns its last child's output as it is (an nn.Sequential; a
 * root whose forward ends in its head) shares that node with the child, and the hooks of a
 * recording made before they left it to the child (gm_torch_bwd_innermost) named the child's
 * backward after the parent ("bwd/Tied" holding the head's matmul, "bwd/body" the Sequential's
 * last Linear), while the parent's forward range, entered again after the child returned, made
 * nothing. Paired by name with that forward, the child's saved tensors (its input; the GELU's
 * output the last Linear saved) were saved by no pair: offload and recompute left them on the
 * device through the backward (the tied model of tests/torch/torch_features.py: 5 MiB over what
 * save_on_cpu measures). Such a backward range takes the child's name by the rule every command
 * reads them with (read/gm_analyze.c, gm_torch_bwd_child). evri: each event's rinfo. 0, or -1
 * out of memory. */
static int bwd_of_returned_child(adv_model *m, const rinfo *r, size_t nr, const uint32_t *evri)
{
    gm_hooks_range *h = calloc(nr + 1, sizeof *h);
    if (!h) return -1;
    for (size_t i = 0; i < m->nevs; i++)
        if (m->evs[i].kind == ADV_EV_ALLOC && evri[i] != UINT32_MAX) h[evri[i]].made = 1;
    for (size_t k = 0; k < nr; k++) {
        const rinfo *x = &r[k];
        char pass = x->phase == ADV_PH_FWD ? 'f' : x->phase == ADV_PH_BWD ? 'b' : 0;
        if (!x->mod || !x->pass || x->step < 0 || !pass) continue; /* not a module range of a step's pass */
        h[k] = (gm_hooks_range){adv_str(m, x->mod), x->pass, x->step, pass, h[k].made};
    }
    long renamed = gm_torch_bwd_child(h, nr);
    uint32_t *name = renamed > 0 ? calloc(nr + 1, sizeof *name) : NULL; /* a range's new lr_name, 0 none */
    for (size_t k = 0; name && k < nr; k++) {
        char blk[256];
        if (h[k].mod && h[k].mod != adv_str(m, r[k].mod)) name[k] = intern(m, block_of(h[k].mod, blk, sizeof blk));
    }
    for (size_t i = 0; name && i < m->nevs; i++)
        if (evri[i] != UINT32_MAX && name[evri[i]]) m->evs[i].lr_name = name[evri[i]];
    free(h), free(name);
    return renamed < 0 || (renamed > 0 && !name) ? -1 : 0;
}

/* The op log (gpumem record --torch-ops: torch_ops, torch_op_args), each tensor joined to its
 * recorded allocation by its birth (births: each allocation's, in order). None when the
 * recording has no such tables. 0, or -1 out of memory (no op log then). */
static int tops_load(gm_db *d, adv_model *m, const uint64_t *births)
{
    sqlite3_stmt *q = NULL, *a = NULL;
    int rc = 0;
    if (sqlite3_prepare_v2(d->db, "SELECT o.id, s.s, o.seq, o.node FROM torch_ops o JOIN strings s ON s.id = o.op "
                                  "ORDER BY o.id",
                           -1, &q, NULL) != SQLITE_OK)
        goto out; /* no op log: nothing to load */
    /* (the shapes since 2026-12-05: an older log has none) */
    if (sqlite3_prepare_v2(d->db,
                           "SELECT a.op, a.out, a.birth, coalesce(a.tensor_bytes, a.bytes), d.s, a.shape FROM torch_op_args a "
                           "JOIN strings d ON d.id = a.dtype ORDER BY a.op, a.out DESC, a.pos",
                           -1, &a, NULL) != SQLITE_OK &&
        sqlite3_prepare_v2(d->db,
                           "SELECT a.op, a.out, a.birth, coalesce(a.tensor_bytes, a.bytes), d.s, NULL FROM torch_op_args a "
                           "JOIN strings d ON d.id = a.dtype ORDER BY a.op, a.out DESC, a.pos",
                           -1, &a, NULL) != SQLITE_OK)
        goto out;
    size_t tcap = 0, acap = 0;
    int have_arg = sqlite3_step(a) == SQLITE_ROW;
    u64map node_op = {0}; /* a forward op's autograd node -> the op */
    /* the modules' marks ("module:<class>" when a forward starts, "module_end:<class>" reading
     * its inputs when it returns): the storages each open module's frame holds, by depth */
    struct held { uint32_t a, depth; } *held = NULL;
    size_t nheld = 0, hcap = 0;
    uint32_t depth = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(q, 0);
        const char *name = (const char *)sqlite3_column_text(q, 1);
        int enter = name && !strncmp(name, "module:", 7), leave = name && !strncmp(name, "module_end:", 11);
        if (enter || leave) {
            if (!m->tholds) {
                if (!(m->tholds = malloc((m->nallocs + 1) * sizeof *m->tholds))) goto nomem;
                for (size_t i = 0; i < m->nallocs; i++)
                    m->tholds[i] = UINT32_MAX;
            }
            long la = sqlite3_column_type(q, 2) == SQLITE_NULL
                          ? -1
                          : alloc_born(births, m->nallocs, (uint64_t)sqlite3_column_int64(q, 2));
            /* its args: a returning module's inputs */
            for (; have_arg && sqlite3_column_int64(a, 0) <= id; have_arg = sqlite3_step(a) == SQLITE_ROW) {
                if (sqlite3_column_int64(a, 0) < id || sqlite3_column_type(a, 2) == SQLITE_NULL || !leave || !depth)
                    continue;
                long ga = alloc_born(births, m->nallocs, (uint64_t)sqlite3_column_int64(a, 2));
                if (ga < 0) continue;
                if (gm_grow((void **)&held, &hcap, nheld + 1, sizeof *held)) goto nomem;
                held[nheld++] = (struct held){(uint32_t)ga, depth};
            }
            if (enter) {
                depth++;
            } else if (depth) {
                /* returned: what its frame held lives until here */
                for (; nheld && held[nheld - 1].depth == depth; nheld--) {
                    uint32_t x = held[nheld - 1].a;
                    if (la >= 0 && (m->tholds[x] == UINT32_MAX || (uint32_t)la > m->tholds[x]))
                        m->tholds[x] = (uint32_t)la;
                }
                depth--;
            }
            continue;
        }
        if (gm_grow((void **)&m->tops, &tcap, m->ntops + 1, sizeof *m->tops)) goto nomem;
        adv_top *t = &m->tops[m->ntops++];
        memset(t, 0, sizeof *t);
        t->name = intern(m, name ? name : "");
        t->fwd = UINT32_MAX;
        t->bwd = name && !strncmp(name, "bwd:", 4);
        long la = sqlite3_column_type(q, 2) == SQLITE_NULL
                      ? -1
                      : alloc_born(births, m->nallocs, (uint64_t)sqlite3_column_int64(q, 2));
        t->last_a = la < 0 ? UINT32_MAX : (uint32_t)la;
        if (sqlite3_column_type(q, 3) != SQLITE_NULL) {
            uint64_t node = (uint64_t)sqlite3_column_int64(q, 3);
            const uint64_t *f = t->bwd ? u64map_get(&node_op, node) : NULL;
            if (f) t->fwd = (uint32_t)*f;
            else if (!t->bwd && u64map_put(&node_op, node, m->ntops - 1) != 0) goto nomem;
        }
        t->arg0 = (uint32_t)m->ntargs;
        for (; have_arg && sqlite3_column_int64(a, 0) <= id; have_arg = sqlite3_step(a) == SQLITE_ROW) {
            if (sqlite3_column_int64(a, 0) < id) continue;
            if (gm_grow((void **)&m->targs, &acap, m->ntargs + 1, sizeof *m->targs)) goto nomem;
            adv_targ *g = &m->targs[m->ntargs++];
            const char *dt = (const char *)sqlite3_column_text(a, 4);
            long ga = sqlite3_column_type(a, 2) == SQLITE_NULL
                          ? -1
                          : alloc_born(births, m->nallocs, (uint64_t)sqlite3_column_int64(a, 2));
            g->out = (uint8_t)sqlite3_column_int(a, 1);
            g->a = ga < 0 ? UINT32_MAX : (uint32_t)ga;
            g->bytes = (uint64_t)sqlite3_column_int64(a, 3);
            g->dtype = !dt ? ADV_DT_OTHER
                       : !strcmp(dt, "float32") ? ADV_DT_F32
                       : !strcmp(dt, "bfloat16") || !strcmp(dt, "float16") ? ADV_DT_LOW
                                                                             : ADV_DT_OTHER;
            /* its shape, "8,12,1024,64" (0 dimensions: none logged, or more than 4) */
            g->ndim = 0;
            const char *sh = (const char *)sqlite3_column_text(a, 5);
            int shape_ok = sh != NULL;
            while (shape_ok && *sh) {
                char *e;
                unsigned long v = strtoul(sh, &e, 10);
                if (e == sh || v > UINT32_MAX || g->ndim == 4 || (*e && *e != ',')) {
                    shape_ok = 0;
                    break;
                }
                g->dims[g->ndim++] = (uint32_t)v;
                sh = *e ? e + 1 : e;
            }
            if (!shape_ok) g->ndim = 0;
            t->nargs++;
        }
        /* a view (an output sharing an input's storage, not an in-place op) the module's own
         * code made is a local of its frame: its storage is held until the module returns.
         * Not the detach autograd makes of an op's output that the op saves for its backward
         * (relu's, softmax's: logged right after that op): the graph holds that one, and under
         * checkpointing nothing does (a block's ReLU output was held to the block's end,
         * 6% under in reserved on a user's MLP blocks) */
        if (depth && !t->bwd && !inplace_op(adv_str(m, t->name)) && !autograd_detach(m, t))
            for (uint32_t i = t->arg0; i < t->arg0 + t->nargs; i++) {
                const adv_targ *o = &m->targs[i];
                int viewed = 0;
                for (uint32_t j = t->arg0; o->out && o->a != UINT32_MAX && j < t->arg0 + t->nargs && !viewed; j++)
                    viewed = !m->targs[j].out && m->targs[j].a == o->a;
                if (!viewed) continue;
                if (gm_grow((void **)&held, &hcap, nheld + 1, sizeof *held)) goto nomem;
                held[nheld++] = (struct held){o->a, depth};
            }
    }
    m->owns_tops = 1;
    u64map_free(&node_op);
    free(held);
    goto out;
nomem:
    u64map_free(&node_op);
    free(held);
    free(m->tops), free(m->targs), free(m->tholds);
    m->tops = NULL, m->targs = NULL, m->tholds = NULL, m->ntops = m->ntargs = 0;
    rc = -1;
out:
    sqlite3_finalize(q), sqlite3_finalize(a);
    return rc;
}

/* The use times of every recorded allocation (uses joined to their launch events), as sorted
 * runs per allocation. Out of memory or a damaged table: no uses, nothing else changes. */
static void load_uses(gm_db *d, adv_model *m, const u64map *seq_idx)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT u.birth, e.t FROM uses u JOIN events e ON e.seq = u.seq "
                           "ORDER BY u.birth, e.t",
                           -1, &s, NULL) != SQLITE_OK)
        return;
    uint64_t *off = calloc(m->nrecorded + 2, sizeof *off);
    uint64_t *t = malloc((m->nuses + 1) * sizeof *t);
    size_t n = 0;
    int ok = off && t;
    while (ok && sqlite3_step(s) == SQLITE_ROW && n < m->nuses) {
        uint64_t *a = u64map_get(seq_idx, (uint64_t)sqlite3_column_int64(s, 0));
        if (!a) continue;
        t[n++] = (uint64_t)sqlite3_column_int64(s, 1);
        off[*a + 1]++;
    }
    sqlite3_finalize(s);
    if (!ok) {
        free(off), free(t);
        return;
    }
    for (size_t a = 0; a < m->nrecorded; a++)
        off[a + 1] += off[a];
    /* rows came ordered by birth seq, which is allocation order: already grouped */
    m->use_off = off, m->use_t = t, m->owns_uses = 1;
}

/* the last use of recorded allocation a at or before t, and its first use at or after u
 * (0 / UINT64_MAX when none) */
static void use_around(const adv_model *m, uint32_t a, uint64_t t, uint64_t u, uint64_t *last,
                       uint64_t *first)
{
    *last = 0, *first = UINT64_MAX;
    if (!m->use_off || a >= m->nrecorded) return;
    for (uint64_t i = m->use_off[a]; i < m->use_off[a + 1]; i++) {
        uint64_t x = m->use_t[i];
        if (x <= t) *last = x;
        if (x >= u && x < *first) *first = x;
    }
}

/* An unannotated recording (no fwd / bwd / opt range): the steps and phases gm_category.c
 * infers from its allocations (the recording's periodicity, the backward from the step's highest
 * point), given to every event by its seq. When they cannot be decided m->phases_why says why and
 * nothing is guessed. evseq: each loaded event's seq. */
static void infer_phases(gm_db *d, adv_model *m, const uint64_t *evseq, int progress)
{
    gm_model gm;
    gm_categories c;
    char err[256];
    if (gm_model_load(d, &gm, progress, err, sizeof err) != 0) {
        snprintf(m->phases_why, sizeof m->phases_why, "the recording could not be read for its phases (%s)", err);
        return;
    }
    int built = gm_categories_build(d, &gm, &c, err, sizeof err);
    /* the categories hold what is read from here on: the model (as large as advise's own) goes */
    gm_model_free(&gm);
    if (built != 0) {
        snprintf(m->phases_why, sizeof m->phases_why, "%s", err);
        return;
    }
    if (c.phases_from == GM_CSRC_NONE || !c.nsteps) {
        snprintf(m->phases_why, sizeof m->phases_why, "%s", c.why[0] ? c.why : "no steps repeat in it");
        goto out;
    }
    adv_step *st = calloc(c.nsteps, sizeof *st);
    uint64_t *opt = calloc(c.nsteps, sizeof *opt);
    if (!st || !opt) {
        free(st), free(opt);
        snprintf(m->phases_why, sizeof m->phases_why, "out of memory");
        goto out;
    }
    for (size_t j = 0; j < c.nsteps; j++)
        st[j] = (adv_step){c.steps[j].number, UINT64_MAX, 0};
    static const uint8_t ph[] = {[GM_CPH_PRE] = ADV_PH_OTHER, [GM_CPH_FWD] = ADV_PH_FWD, [GM_CPH_BWD] = ADV_PH_BWD,
                                 [GM_CPH_OPT] = ADV_PH_OPT, [GM_CPH_POST] = ADV_PH_OTHER};
    for (size_t i = 0; i < m->nevs; i++) {
        long j;
        int p = gm_category_phase_at(&c, evseq[i], &j);
        adv_ev *e = &m->evs[i];
        e->phase = ph[p];
        e->step = j >= 0 && e->phase != ADV_PH_OTHER ? (int32_t)j : -1;
        e->lr = 0, e->lr_name = 0;
        if (e->step < 0) continue;
        if (e->t < st[j].start_ns) st[j].start_ns = e->t;
        if (e->t > st[j].end_ns) st[j].end_ns = e->t;
        if (e->phase == ADV_PH_OPT && !opt[j]) opt[j] = e->t + 1; /* + 1: 0 is "none" */
    }
    for (size_t j = 0; j < c.nsteps; j++)
        if (st[j].start_ns == UINT64_MAX) st[j].start_ns = st[j].end_ns;
    if (c.steps_from == GM_CSRC_PHASES) {
        /* the steps are the program's "step N" ranges: their recorded spans, not those of their
         * first and last allocation (a step that computes after its last free, or before its first
         * allocation, lasts longer than its allocations: churn's "step N" 1.47 ms against 0.8) */
        u64map num = {0};
        for (size_t k = 0; k < m->nsteps; k++)
            u64map_put(&num, (uint64_t)m->steps[k].number, k);
        for (size_t j = 0; j < c.nsteps; j++) {
            uint64_t *k = u64map_get(&num, (uint64_t)c.steps[j].number);
            if (k) st[j].start_ns = m->steps[*k].start_ns, st[j].end_ns = m->steps[*k].end_ns;
        }
        u64map_free(&num);
    }
    free(m->steps);
    m->steps = st, m->nsteps = c.nsteps;
    m->steps_from = c.steps_from;
    for (size_t i = 0; i < c.n; i++)
        m->inferred_grads += c.cat[i] == GM_CAT_GRAD;
    /* each step's update, and each kernel launched in it (an optimizer updates parameter by
     * parameter, or list by list): where optimizer state made together is told apart, as the
     * ranges of an annotated update do */
    free(m->opt_starts);
    m->opt_starts = opt, m->nopt_starts = 0;
    for (size_t j = 0; j < c.nsteps; j++)
        if (opt[j]) opt[m->nopt_starts++] = opt[j] - 1;
    sqlite3_stmt *q;
    size_t cap = c.nsteps;
    if (gm_table_exists(d, "launches") &&
        sqlite3_prepare_v2(d->db, "SELECT l.seq, e.t FROM launches l JOIN events e ON e.seq = l.seq "
                                  "WHERE l.op = 0 ORDER BY l.seq", -1, &q, NULL) == SQLITE_OK) {
        while (sqlite3_step(q) == SQLITE_ROW) {
            long j;
            if (gm_category_phase_at(&c, (uint64_t)sqlite3_column_int64(q, 0), &j) != GM_CPH_OPT) continue;
            if (gm_grow((void **)&m->opt_starts, &cap, m->nopt_starts + 1, sizeof *m->opt_starts)) break;
            m->opt_starts[m->nopt_starts++] = (uint64_t)sqlite3_column_int64(q, 1);
        }
        sqlite3_finalize(q);
    }
    if (m->nopt_starts > 1) gm_sort(m->opt_starts, m->nopt_starts, sizeof *m->opt_starts, gm_cmp_u64);
    m->phases_from = GM_CSRC_INFERENCE;
    {
        const gm_cat_step *ss = &c.steps[c.nsteps > 1 ? c.nsteps - 2 : 0]; /* a steady step */
        m->inferred_bwd_seq = ss->bwd != UINT64_MAX ? ss->bwd : 0;
        m->inferred_opt_seq = ss->opt != UINT64_MAX ? ss->opt : 0;
        m->inferred_end_seq = ss->end;
    }
out:
    gm_categories_free(&c);
}

/* The layers of an unannotated recording, for the rewrites that stash saved activations per
 * layer (recompute, offload, bf16): what NVTX's child ranges of fwd and bwd ("h3") give an
 * annotated one. In each step the forward's allocations repeat with the layer's period Q (the
 * longest run of sizes equal to those Q before them); the blocks are placed where each one's saved
 * tensors die together in the backward, apart from its last, the layer's output, which the next
 * layer's backward frees (its input there). Forward layer i is the forward's events from its
 * block's first allocation on; backward layer i starts at the first backward event after the
 * last free of layer i + 1's tensors and of layer i's output. Before the first block: "embed";
 * after the last, and the backward before the last layer's: "head". */
typedef struct lay_blk {
    uint64_t dmin, dmax;  /* deaths (event indices) of the block's saved tensors but its output */
    size_t out_death;     /* the death of its last saved tensor (its output), SIZE_MAX none */
    size_t in_death;      /* the death of its first saved tensor */
} lay_blk;

/* The saved tensors of block [k0, k1) of the forward births fb: their deaths. */
static void lay_block(const adv_model *m, const size_t *fb, size_t k0, size_t k1, const size_t *death, int32_t s,
                      lay_blk *b)
{
    *b = (lay_blk){UINT64_MAX, 0, SIZE_MAX, SIZE_MAX};
    for (size_t k = k0; k < k1; k++) {
        size_t d = death[m->evs[fb[k]].a];
        if (d == SIZE_MAX || m->evs[d].phase != ADV_PH_BWD || m->evs[d].step != s) continue;
        if (b->in_death == SIZE_MAX) b->in_death = d;
        if (b->out_death != SIZE_MAX) { /* the previous saved one was not the last */
            if (b->out_death < b->dmin) b->dmin = b->out_death;
            if (b->out_death > b->dmax) b->dmax = b->out_death;
        }
        b->out_death = d;
    }
}

/* Each step's forward and backward: the first and one past the last of their events. */
typedef struct lay_span {
    size_t f0, f1, b0, b1;
} lay_span;

/* The forward births of step s (event indices, in order) into fb; their number. */
static size_t lay_births(const adv_model *m, const lay_span *sp, int32_t s, size_t *fb)
{
    size_t n = 0;
    for (size_t i = sp->f0; i < sp->f1; i++)
        if (m->evs[i].kind == ADV_EV_ALLOC && m->evs[i].step == s && m->evs[i].phase == ADV_PH_FWD) fb[n++] = i;
    return n;
}

static uint64_t lay_size(const adv_model *m, const size_t *fb, size_t k) { return m->allocs[m->evs[fb[k]].a].size; }

/* With period q: the longest run of sizes equal to those q before them, if it is at least q long
 * (*cover: the run and the q it repeats, 0 none; *run0 where the repetition starts). O(n). */
static void lay_cover(const adv_model *m, const size_t *fb, size_t n, size_t q, size_t *run0, size_t *cover)
{
    *run0 = 0, *cover = 0;
    for (size_t i = 0, r = 0; i + q < n; i++) {
        r = lay_size(m, fb, i) == lay_size(m, fb, i + q) ? r + 1 : 0;
        if (r >= q && r + q > *cover) *cover = r + q, *run0 = i + 1 - r;
    }
}

/* The period of one step's forward births: the q whose repetition covers most of them (the
 * smallest of those). Quadratic in n, so read in one step only (infer_layers); none above 65,536
 * births. */
static void lay_period(const adv_model *m, const size_t *fb, size_t n, size_t *Q, size_t *run0, size_t *cover)
{
    *Q = 0, *run0 = 0, *cover = 0;
    for (size_t q = 1; q <= n / 2 && n <= 65536; q++)
        for (size_t i = 0, r = 0; i + q < n; i++) {
            r = lay_size(m, fb, i) == lay_size(m, fb, i + q) ? r + 1 : 0;
            if (r >= q && r + q > *cover) *cover = r + q, *Q = q, *run0 = i + 1 - r;
        }
}

/* The blocks' placement in step s, its nb blocks of Q births from run0 on: the first birth of
 * the first block. Placements where the blocks' deaths overlap are wrong; of the others, a block
 * should end with its output (its last saved tensor dies before the rest of the block's, in the
 * next block's backward) and not start with its input (its first saved tensor dying last of the
 * block's: the previous block's output). bl: nb entries of scratch. O(Q n). */
static size_t lay_place(const adv_model *m, const size_t *fb, size_t n, size_t Q, size_t run0, size_t nb,
                        const size_t *death, int32_t s, lay_blk *bl)
{
    size_t best_o = 0;
    long best_score = LONG_MIN;
    for (size_t o = 0; o < Q && run0 + o + nb * Q <= n; o++) {
        for (size_t j = 0; j < nb; j++)
            lay_block(m, fb, run0 + o + j * Q, run0 + o + (j + 1) * Q, death, s, &bl[j]);
        long score = 0;
        for (size_t j = 0; j < nb; j++) {
            if (j + 1 < nb && bl[j].dmin != UINT64_MAX && bl[j + 1].dmax > bl[j].dmin) score -= 1000;
            if (bl[j].out_death != SIZE_MAX && bl[j].dmin != UINT64_MAX && bl[j].out_death < bl[j].dmin) score++;
            if (bl[j].in_death != SIZE_MAX && bl[j].dmax != 0 && bl[j].in_death == bl[j].dmax) score--;
        }
        if (score > best_score) best_score = score, best_o = o;
    }
    return run0 + best_o;
}

/* Step s's events given their layer instances: nb blocks of Q forward births from fb[first]. */
static int lay_apply(adv_model *m, const lay_span *sp, int32_t s, const size_t *fb, size_t n, size_t first,
                     size_t Q, size_t nb, const size_t *death, lay_blk *bl, const uint32_t names[2])
{
    for (size_t j = 0; j < nb; j++)
        lay_block(m, fb, first + j * Q, first + (j + 1) * Q, death, s, &bl[j]);
    /* forward: each block's events from its first allocation to the next one's */
    uint64_t base = ((uint64_t)s + 1) << 32; /* instance ids of this step: base + 2 slot + phase */
    size_t *fstart = malloc((nb + 1) * sizeof *fstart), *bstart = malloc((nb + 1) * sizeof *bstart);
    if (!fstart || !bstart) {
        free(fstart), free(bstart);
        return -1;
    }
    for (size_t j = 0; j < nb; j++)
        fstart[j] = fb[first + j * Q];
    fstart[nb] = first + nb * Q < n ? fb[first + nb * Q] : sp->f1;
    for (size_t i = sp->f0; i < sp->f1; i++) {
        adv_ev *e = &m->evs[i];
        if (e->step != s || e->phase != ADV_PH_FWD) continue;
        if (i < fstart[0]) e->lr = base + 0, e->lr_name = names[0];
        else if (i >= fstart[nb]) e->lr = base + 2, e->lr_name = names[1];
        else
            for (size_t j = 0; j < nb; j++)
                if (i < fstart[j + 1]) {
                    char nm[32];
                    snprintf(nm, sizeof nm, "layer %zu", j);
                    e->lr = base + 2 * (j + 2), e->lr_name = intern(m, nm);
                    break;
                }
    }
    /* backward: layer j starts after layer j + 1's frees and layer j's output's */
    uint64_t after_head = 0; /* the head's saved tensors: born after the last block */
    for (size_t k = first + nb * Q; k < n; k++) {
        size_t d = death[m->evs[fb[k]].a];
        if (d != SIZE_MAX && m->evs[d].phase == ADV_PH_BWD && m->evs[d].step == s && d > after_head) after_head = d;
    }
    for (size_t j = nb; j-- > 0;) {
        uint64_t last = j + 1 < nb ? (bl[j + 1].dmax > after_head ? bl[j + 1].dmax : after_head) : after_head;
        if (j + 1 < nb && bl[j + 1].dmax != 0 && bl[j + 1].dmax > last) last = bl[j + 1].dmax;
        if (bl[j].out_death != SIZE_MAX && bl[j].out_death > last) last = bl[j].out_death;
        bstart[j] = last + 1 > sp->b0 ? last + 1 : sp->b0;
    }
    bstart[nb] = sp->b0;
    for (size_t i = sp->b0; i < sp->b1; i++) {
        adv_ev *e = &m->evs[i];
        if (e->step != s || e->phase != ADV_PH_BWD) continue;
        if (i < bstart[nb - 1]) {
            e->lr = base + 3, e->lr_name = names[1];
            continue;
        }
        for (size_t j = nb; j-- > 0;)
            if (i >= bstart[j] && (j == 0 || i < bstart[j - 1])) {
                char nm[32];
                snprintf(nm, sizeof nm, "layer %zu", j);
                e->lr = base + 2 * (j + 2) + 1, e->lr_name = intern(m, nm);
                break;
            }
    }
    free(fstart), free(bstart);
    return 0;
}

/* One rule for every step, so that what is found does not depend on how many steps were
 * recorded: the period is searched in one steady step (the last but one with a forward and a
 * backward: the last may be cut short, the first is a warm-up), and taken only when the step
 * before it repeats with the same period and as many blocks (the steps agree: a program whose
 * allocations repeat by chance, not by layers, has none). Every step whose forward repeats with
 * that period then gets its own blocks: those of the steady step where its forward's sizes are
 * the same, else placed by its own deaths (a jittered sequence length: other sizes, the same
 * layers). The search is quadratic in one step's forward births; the rest is linear in the
 * events (a step's events are read where they are, never by scanning the whole recording). */
static void infer_layers(adv_model *m)
{
    size_t *death = NULL, *birth = NULL, *fb = NULL, *fs = NULL;
    lay_span *sp = NULL;
    lay_blk *bl = NULL;
    if (!m->nsteps || life_index(m, &birth, &death)) goto out;
    uint32_t names[2] = {intern(m, "embed"), intern(m, "head")};
    sp = malloc(m->nsteps * sizeof *sp);
    if (!sp) goto out;
    for (size_t s = 0; s < m->nsteps; s++)
        sp[s] = (lay_span){SIZE_MAX, 0, SIZE_MAX, 0};
    size_t maxf = 0;
    for (size_t i = 0; i < m->nevs; i++) {
        const adv_ev *e = &m->evs[i];
        if (e->step < 0 || (size_t)e->step >= m->nsteps) continue;
        lay_span *p = &sp[e->step];
        if (e->phase == ADV_PH_FWD) p->f0 = p->f0 == SIZE_MAX ? i : p->f0, p->f1 = i + 1;
        if (e->phase == ADV_PH_BWD) p->b0 = p->b0 == SIZE_MAX ? i : p->b0, p->b1 = i + 1;
    }
    /* the steady step and the one that must agree with it */
    size_t S = SIZE_MAX, R = SIZE_MAX, nfull = 0;
    for (size_t s = 0; s < m->nsteps; s++) {
        if (sp[s].f0 == SIZE_MAX || sp[s].b0 == SIZE_MAX) continue;
        if (sp[s].f1 - sp[s].f0 > maxf) maxf = sp[s].f1 - sp[s].f0;
        nfull++;
    }
    for (size_t s = m->nsteps, k = 0; s-- > 0;) {
        if (sp[s].f0 == SIZE_MAX || sp[s].b0 == SIZE_MAX) continue;
        k++;
        if (k == (nfull > 1 ? 2 : 1)) S = s;
        else if (S != SIZE_MAX && R == SIZE_MAX) R = s;
    }
    if (S == SIZE_MAX) goto out;
    if (R == SIZE_MAX) /* two steps: the last one agrees, or not */
        for (size_t s = S + 1; s < m->nsteps && R == SIZE_MAX; s++)
            if (sp[s].f0 != SIZE_MAX && sp[s].b0 != SIZE_MAX) R = s;
    fb = malloc((maxf + 1) * sizeof *fb), fs = malloc((maxf + 1) * sizeof *fs);
    if (!fb || !fs) goto out;
    size_t ns = lay_births(m, &sp[S], (int32_t)S, fs), Q, run0, cover;
    lay_period(m, fs, ns, &Q, &run0, &cover);
    size_t nb = Q ? cover / Q : 0;
    if (nb < 2) goto out;
    if (R != SIZE_MAX) {
        size_t nr = lay_births(m, &sp[R], (int32_t)R, fb), r0, rc;
        lay_cover(m, fb, nr, Q, &r0, &rc);
        if (rc / Q != nb) goto out;
    }
    if (!(bl = calloc(nb + 1, sizeof *bl))) goto out;
    size_t sfirst = lay_place(m, fs, ns, Q, run0, nb, death, (int32_t)S, bl);
    m->inferred_layers = nb, m->inferred_layer_allocs = Q;
    size_t blcap = nb + 1;
    for (size_t s = 0; s < m->nsteps; s++) {
        if (sp[s].f0 == SIZE_MAX || sp[s].b0 == SIZE_MAX) continue;
        size_t n = lay_births(m, &sp[s], (int32_t)s, fb), first, snb = nb;
        int same = n == ns;
        for (size_t k = 0; k < n && same; k++)
            same = lay_size(m, fb, k) == lay_size(m, fs, k);
        if (same) {
            first = sfirst;
        } else {
            size_t r0, rc;
            lay_cover(m, fb, n, Q, &r0, &rc);
            if ((snb = rc / Q) < 2) continue; /* this step does not repeat with the layers' period */
            if (snb + 1 > blcap) {
                lay_blk *nbl = realloc(bl, (snb + 1) * sizeof *bl);
                if (!nbl) goto out;
                bl = nbl, blcap = snb + 1;
            }
            first = lay_place(m, fb, n, Q, r0, snb, death, (int32_t)s, bl);
        }
        if (lay_apply(m, &sp[s], (int32_t)s, fb, n, first, Q, snb, death, bl, names)) goto out;
    }
out:
    free(birth), free(death), free(fb), free(fs), free(sp), free(bl);
}

int adv_model_load(gm_db *d, adv_model *m, char *err, size_t errsz)
{
    return adv_model_load_as(d, m, 0, err, errsz);
}

/* The recording's free_completed events (kind 29: a free that waited for stream events landed)
 * as ADV_EV_FREE_DONE events, so that the replay holds each such free until the moment its block
 * became reusable in the run; a free flagged REC_F_PENDING that never landed while recording gets
 * one at the end. The model's allocation index is the rank of the allocation's event among kinds
 * 1 and 3 (adv_model_load makes one per event, in seq order: fc_finish finds it by its
 * ADV_EV_ALLOC, the loader's own 0-byte allocations between); frees and free_completed name their
 * allocation by device and allocator id. A free_completed goes before the first model event
 * recorded after it (by time), said as the count of events after its free (adv_ev.pad), so
 * that it moves with its free in a rewrite. Older recordings have none: nothing changes.
 *
 * Read in the model's own pass over the events (adv_model_load_tap): each allocation's key is
 * noted (8 bytes), and the map from key to allocation is made only up to where a free_completed
 * asks, so a recording without any costs one store per allocation, not a map of them all. */
typedef struct fc_reader {
    uint64_t *akeys;          /* allocation index -> its key; U64MAP_EMPTY without an id */
    size_t na, acap, nidx;    /* allocations seen; of them, entered in idx */
    u64map idx;               /* (device, allocator id) -> allocation index */
    u64map pend, early;       /* frees waiting for their free_completed; ones that came first */
    adv_ev *fc;
    size_t nfc, cap;
    int any;                  /* a free_completed or a pending free was read */
    int bad_key;              /* an allocator id that makes the map's reserved key */
} fc_reader;

static void fc_reader_free(fc_reader *r) {
    free(r->akeys), free(r->fc);
    u64map_free(&r->idx), u64map_free(&r->pend), u64map_free(&r->early);
}

/* idx brought up to the allocations seen so far (an id given again names the later one). */
static int fc_index(fc_reader *r) {
    for (; r->nidx < r->na; r->nidx++)
        if (r->akeys[r->nidx] != U64MAP_EMPTY && u64map_put(&r->idx, r->akeys[r->nidx], r->nidx) != 0) return -1;
    return 0;
}

static int fc_add(fc_reader *r, uint64_t a, uint64_t t, int synced) {
    if (r->nfc == r->cap) {
        size_t nc = r->cap ? 2 * r->cap : 64;
        adv_ev *n = realloc(r->fc, nc * sizeof *n);
        if (!n) return -1;
        r->fc = n, r->cap = nc;
    }
    /* a beyond the model's allocations is dropped at the merge */
    /* stream: landed by a synchronization (REC_F_LANDED_SYNCED) */
    r->fc[r->nfc++] = (adv_ev){.a = (uint32_t)a, .kind = ADV_EV_FREE_DONE, .step = -1, .t = t, .stream = (uint32_t)synced};
    return 0;
}

static int fc_rows(void *ctx, const gm_event_row *rows, size_t n) {
    fc_reader *r = ctx;
    for (size_t i = 0; i < n; i++) {
        const gm_event_row *e = &rows[i];
        if (e->kind < REC_ALLOC || (e->kind > REC_FREE_ASYNC && e->kind != REC_FREE_COMPLETED)) continue;
        int kind = (int)e->kind;
        uint64_t id = (uint64_t)e->alloc_id;
        /* the device as SQLite's NULL read before (0); the pages give -1 for it */
        uint64_t key = id ^ ((uint64_t)((e->device == -1 ? 0 : e->device) & 0xff) << 56);
        if (kind == REC_ALLOC || kind == REC_ALLOC_ASYNC) {
            if (gm_grow_fast((void **)&r->akeys, &r->acap, r->na + 1, sizeof *r->akeys)) return -1;
            r->bad_key |= id && key == U64MAP_EMPTY;
            r->akeys[r->na++] = id ? key : U64MAP_EMPTY;
            continue;
        }
        if (kind == REC_FREE_COMPLETED) r->any = 1;
        else if ((uint64_t)e->flags & REC_F_PENDING) r->any = 1;
        else continue;
        if (!id) continue;
        if (kind != REC_FREE_COMPLETED) {
            if (!u64map_del(&r->early, key, NULL) && u64map_put(&r->pend, key, 1) != 0) return -1;
            continue;
        }
        if (!u64map_del(&r->pend, key, NULL)) {
            if (u64map_put(&r->early, key, 1) != 0) return -1;
            continue; /* landed before its free was recorded: reusable at the free */
        }
        if (fc_index(r) != 0) return -1;
        const uint64_t *a = u64map_get(&r->idx, key);
        if (a && fc_add(r, *a, (uint64_t)e->t, ((uint64_t)e->flags & REC_F_LANDED_SYNCED) != 0) != 0) return -1;
    }
    return 0;
}

/* After the pass: frees still waiting when the recording stopped (held to the end), then each
 * landing written on its free (adv_ev.pad): the model's events between them, counted forward
 * from the free to the first event recorded after the landing. 0, or -1 out of memory. */
static int cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

static int fc_finish(fc_reader *r, adv_model *m, int markers) {
    if (!r->any) return 0;
    if (r->bad_key) return -1; /* the map refuses that key (as it did when it held them all) */
    if (r->pend.count && fc_index(r) != 0) return -1;
    for (uint64_t i = 0; r->pend.keys && i <= r->pend.mask; i++) {
        if (r->pend.keys[i] == U64MAP_EMPTY) continue;
        const uint64_t *a = u64map_get(&r->idx, r->pend.keys[i]);
        if (a && fc_add(r, *a, UINT64_MAX, 0) != 0) return -1;
    }
    if (!r->nfc) return 0;
    /* each allocation's free: the last one of its index (an index is one allocation); and the
     * allocation of each rank (the loader's own events, a pool's end or an empty_cache, have
     * 0-byte allocations of their own between the recorded ones, and never an ADV_EV_ALLOC) */
    size_t na = m->nallocs ? m->nallocs : 1;
    uint32_t *free_at = malloc(na * sizeof *free_at), *of_rank = malloc(na * sizeof *of_rank);
    if (!free_at || !of_rank) {
        free(free_at), free(of_rank);
        return -1;
    }
    memset(free_at, 0xff, na * sizeof *free_at);
    size_t nrank = 0;
    for (size_t i = 0; i < m->nevs && i < UINT32_MAX; i++) {
        if (m->evs[i].kind == ADV_EV_FREE || m->evs[i].kind == ADV_EV_FREE_ASYNC) free_at[m->evs[i].a] = (uint32_t)i;
        if (m->evs[i].kind == ADV_EV_ALLOC && nrank < na) of_rank[nrank++] = m->evs[i].a;
    }
    for (size_t j = 0; j < r->nfc; j++) {
        const adv_ev *f = &r->fc[j];
        if (f->a >= nrank || free_at[of_rank[f->a]] == UINT32_MAX) continue;
        size_t at = free_at[of_rank[f->a]], k = at + 1;
        if (f->t == UINT64_MAX) {
            m->evs[at].pad = ADV_FC_END;
            continue;
        }
        while (k < m->nevs && m->evs[k].t <= f->t && k - at - 1 < ADV_FC_END - 2)
            k++;
        m->evs[at].pad = (uint16_t)(k - at); /* k - at - 1 events between, + 1 */
        if (markers && f->stream) { /* the recorded configuration's replay lands it settled */
            uint32_t *nv = realloc(m->fy_frees, (m->nfy_frees + 1) * sizeof *nv);
            if (!nv) {
                free(free_at), free(of_rank);
                return -1;
            }
            m->fy_frees = nv;
            m->fy_frees[m->nfy_frees++] = (uint32_t)at;
        }
    }
    free(free_at), free(of_rank);
    if (m->nfy_frees > 1) qsort(m->fy_frees, m->nfy_frees, sizeof *m->fy_frees, cmp_u32);
    return 0;
}

/* Whether the free at event index i landed by a synchronization (adv_model.fy_frees) */
static int fy_free(const adv_model *m, size_t i)
{
    size_t lo = 0, hi = m->nfy_frees;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->fy_frees[mid] < i)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->nfy_frees && m->fy_frees[lo] == i;
}

/* The events' read of adv_model_load_as, one row at a time (through SQLite or from the table's
 * pages): each allocation's birth and death, the names applied as they come. */
typedef struct ev_reader {
    adv_model *m;
    int hooked; /* a device allocation row made through the framework's hook was read */
    const rinfo *r;
    u64map *ridx;
    const name_ev *names;
    size_t nnames, ni;
    const gm_spans *spans;   /* the start/end ranges: an event's phase where its thread has no push/pop range */
    u64map live;
    u64map seq_idx;          /* birth seq -> allocation, for the uses */
    uint32_t *stacks;
    uint64_t *births;        /* allocation -> its birth seq, for the names */
    uint64_t *evseq;         /* event -> its seq, for phases inferred from the allocations (infer) */
    uint32_t *evri;          /* a PyTorch recording's: event -> its range's rinfo (UINT32_MAX none) */
    size_t ricap;
    int infer;               /* ADV_LOAD_INFER */
    size_t stcap, bcap, evcap, sqcap, nstreams[8];
    adv_pool_ids pools;      /* the private pools' names -> their numbers (adv_pool_note) */
    uint64_t t_alloc, t_res; /* PyTorch's own statistics, by its rules */
    const adv_tap *tap;
    uint64_t last_range;     /* the last event's range and its rinfo (NULL none) */
    const rinfo *last_rg;
    int have_range;
    int nomem;
    int probe; /* ADV_LOAD_TORCH answered by this pass: stop at a row that says PyTorch */
    int progress;   /* ADV_LOAD_PROGRESS, on a terminal */
    int markers;    /* ADV_LOAD_MARKERS */
    fc_reader fc;   /* the frees' landings (adv_ev.pad): not of a PyTorch history */
    u64map torch_freed;       /* a PyTorch history's: a freed block's address -> its free's event,
                                 until its free_completed */
    uint32_t pool_end_stream; /* gpumem's recordings: 1 + the stream of the capture pool whose run
                                 of segment frees the last row was (0: none) */
    uint64_t nrows; /* rows read, for the progress line */
    int found; /* ... LOAD_AS_HISTORY or LOAD_AS_HOOKED: the row it stopped at */
} ev_reader;

/* adv_model_load_as's own restarts, when its pass over the events found a PyTorch recording
 * (ADV_LOAD_TORCH without the two scans of the table that would say so before it): a row of
 * PyTorch's history (kind 31), or an allocation made through the framework's hook (flag 4096;
 * the history may still come later). Its ranges are read again as PyTorch's. */
enum { LOAD_AS_HISTORY = 1 << 8, LOAD_AS_HOOKED = 1 << 9 };

static void ev_reader_free(ev_reader *L)
{
    u64map_free(&L->live), u64map_free(&L->seq_idx), u64map_free(&L->torch_freed);
    adv_pool_ids_free(&L->pools);
    free(L->stacks), free(L->births), free(L->evseq), free(L->evri);
    fc_reader_free(&L->fc);
}

/* After the loader added events of its own for the row `seq` (adv_add_release, adv_add_limit,
 * adv_add_pool_release: added is its answer, the model had had_evs events and had_allocs
 * allocations before): their 0-byte allocations have no stack and no birth, and each event gets
 * what every loaded event has beside it (its seq for the inferred phases, no range), so that the
 * arrays read by event index stay the model's length. 0, or -1 out of memory. */
static int load_added(ev_reader *L, int added, size_t had_evs, size_t had_allocs, uint64_t seq)
{
    adv_model *m = L->m;
    if (added > 0 && (gm_grow_fast((void **)&L->stacks, &L->stcap, m->nallocs, sizeof *L->stacks) ||
                      gm_grow_fast((void **)&L->births, &L->bcap, m->nallocs, sizeof *L->births) ||
                      (L->infer && gm_grow_fast((void **)&L->evseq, &L->sqcap, m->nevs, sizeof *L->evseq)) ||
                      (m->torch && gm_grow_fast((void **)&L->evri, &L->ricap, m->nevs, sizeof *L->evri))))
        added = -1;
    if (added < 0) return L->nomem = 1, -1;
    for (size_t a = had_allocs; a < m->nallocs; a++) L->stacks[a] = 0, L->births[a] = 0;
    for (size_t i = had_evs; i < m->nevs; i++) {
        if (L->infer) L->evseq[i] = seq;
        if (m->torch) L->evri[i] = UINT32_MAX;
    }
    return 0;
}

/* One row of `events` of the kinds the model reads (columns as named). 0, or -1 out of memory. */
/* m->pools[a] = num, the array grown as the loader's ids count it. 0, or -1 out of memory. */
static int pool_set(adv_model *m, uint32_t a, uint32_t num, adv_pool_ids *ids)
{
    size_t had = ids->cap;
    if (gm_grow_fast((void **)&m->pools, &ids->cap, (size_t)a + 1, sizeof *m->pools)) return -1;
    if (ids->cap > had) memset(m->pools + had, 0, (ids->cap - had) * sizeof *m->pools);
    m->owns_pools = 1;
    m->pools[a] = num;
    if ((size_t)a + 1 > m->npools) m->npools = (size_t)a + 1;
    return 0;
}

int adv_pool_note(adv_model *m, uint32_t a, int kind, uint64_t flags, uint64_t alloc_id, adv_pool_ids *ids)
{
    /* a pool the program chose, a graph's memory node: the driver's under any configuration */
    if (rec_is_own_segment((unsigned)kind, (unsigned)flags) && !(flags & REC_F_PRIVATE_POOL))
        return pool_set(m, a, ADV_POOL_DRIVER, ids);
    if (!(flags & REC_F_PRIVATE_POOL)) {
        if (m->pools && a < m->npools) m->pools[a] = 0;
        return 0;
    }
    /* PyTorch's history names its pool in alloc_id (a recording merged before it did: one pool
     * per stream); gpumem's own pools of a capture are told apart by their stream, which is the
     * capture's */
    uint64_t name = kind == REC_TORCH_ALLOC && alloc_id != U64MAP_EMPTY ? alloc_id : 0;
    const uint64_t *n = u64map_get(&ids->ids, name);
    uint64_t num = n ? *n : ids->ids.count + 1;
    if (!n && u64map_put(&ids->ids, name, num) != 0) return -1;
    if (kind != REC_TORCH_ALLOC) m->capture_pool = (uint32_t)num; /* gpumem's: a capture's */
    return pool_set(m, a, (uint32_t)num, ids);
}

void adv_pool_ids_free(adv_pool_ids *ids)
{
    u64map_free(&ids->ids);
    free(ids->gone);
    ids->gone = NULL, ids->ngone = ids->gcap = 0;
}

int adv_add_pool_release(adv_model *m, int kind, uint64_t alloc_id, uint32_t stream, uint64_t t, size_t *evcap,
                         adv_pool_ids *ids)
{
    /* the pool's number, as adv_pool_note gave it: PyTorch's by its name, gpumem's (name 0) by
     * the stream of the capture */
    int torch = kind == REC_TORCH_SEG_UNMAP;
    const uint64_t *n = u64map_get(&ids->ids, torch && alloc_id != U64MAP_EMPTY ? alloc_id : 0);
    if (!n) return 0;
    uint32_t num = (uint32_t)*n;
    /* the keys to release: each stream the pool's allocations were made on (PyTorch's), or the
     * capture's stream (gpumem's pools share a number, a capture is its stream) */
    uint32_t streams[64];
    size_t ns = 0;
    for (size_t a = 0; a < m->npools && a < m->nallocs && ns < 64; a++) {
        if (m->pools[a] != num || m->allocs[a].size == 0) continue;
        uint32_t s = m->allocs[a].stream;
        if (!torch && s != stream) continue;
        size_t k = 0;
        while (k < ns && streams[k] != s) k++;
        if (k == ns) streams[ns++] = s;
    }
    int added = 0;
    for (size_t k = 0; k < ns; k++) {
        uint64_t key = (uint64_t)num << 32 | streams[k];
        size_t g = 0;
        while (g < ids->ngone && ids->gone[g] != key) g++;
        if (g < ids->ngone) continue;
        if (gm_grow_fast((void **)&ids->gone, &ids->gcap, ids->ngone + 1, sizeof *ids->gone)) return -1;
        ids->gone[ids->ngone++] = key;
        uint32_t a = new_alloc(m, 0, streams[k], 0, 0, (uint32_t)m->nallocs);
        size_t had = ids->cap;
        if (a == UINT32_MAX || gm_grow_fast((void **)&m->pools, &ids->cap, (size_t)a + 1, sizeof *m->pools) ||
            gm_grow_fast((void **)&m->evs, evcap, m->nevs + 1, sizeof *m->evs))
            return -1;
        if (ids->cap > had) memset(m->pools + had, 0, (ids->cap - had) * sizeof *m->pools);
        m->pools[a] = num;
        if ((size_t)a + 1 > m->npools) m->npools = (size_t)a + 1;
        m->evs[m->nevs++] = (adv_ev){.a = a, .kind = ADV_EV_POOL_RELEASE, .step = -1, .t = t};
        added++;
    }
    return added;
}

/* What a row of a gpumem recording (not a PyTorch history) beside its allocations and frees
 * (kinds 1-4) is to the model: one of gpumem's own events it keeps, or OWN_NONE. The one list of
 * them: the row filter (event_rows) keeps what this names, and load_event acts on its answer.
 *   OWN_POOL_END: gpumem's allocator gave a capture's pool back (kinds 15 / 19 flagged
 *     REC_F_PRIVATE_POOL, on the capture's stream: alloc_release_capture, once its graphs are
 *     destroyed): the pool ends here;
 *   OWN_EMPTY_CACHE: gpumem's allocator emptied its cache (kind 36 flagged REC_F_FRAMEWORK:
 *     gpumem_empty_cache, PyTorch's torch.cuda.empty_cache() through it);
 *   OWN_FRACTION: the program's per-process memory fraction, which gpumem's allocator applied
 *     (kind 37 flagged REC_F_FRAMEWORK: the cap in bytes, the fraction in millionths);
 *   OWN_MARKER: gpumem's allocator recorded a marker on a stream, or found one complete (kinds
 *     39, 40: what its release before growth's event queries said, for the recorded
 *     configuration's replay), or synchronized (kind 41: every free before it settled), or forgot
 *     a stream the program destroyed (kind 42). */
enum { OWN_NONE = 0, OWN_POOL_END, OWN_EMPTY_CACHE, OWN_FRACTION, OWN_MARKER };
static inline int own_event_kept(int64_t kind, uint64_t flags)
{
    if (kind == REC_MARKER_RECORD || kind == REC_MARKER_DONE || kind == REC_ALLOC_SYNC || kind == REC_STREAM_FORGET ||
        kind == REC_ALLOC_WAIT)
        return OWN_MARKER;
    if (kind == REC_SEG_UNMAP || kind == REC_DRIVER_FREE) return flags & REC_F_PRIVATE_POOL ? OWN_POOL_END : OWN_NONE;
    if (!(flags & REC_F_FRAMEWORK)) return OWN_NONE;
    return kind == REC_TORCH_EMPTY_CACHE ? OWN_EMPTY_CACHE : kind == REC_TORCH_MEMORY_FRACTION ? OWN_FRACTION : OWN_NONE;
}

static int load_event(ev_reader *L, uint64_t seq, int kind, uint64_t addr, uint64_t requested, uint32_t stream,
                      uint64_t range, uint64_t t, uint32_t stack, uint64_t size, uint64_t flags, uint64_t alloc_id)
{
    int row_kind = kind;
    adv_model *m = L->m;
    size_t had_evs = m->nevs, had_allocs = m->nallocs;
    if (m->torch != 1) {
        switch (own_event_kept(kind, flags)) {
        case OWN_POOL_END: /* one capture's run of segments ends its pool once */
            if (L->pool_end_stream == stream + 1) return 0;
            L->pool_end_stream = stream + 1;
            return load_added(L, adv_add_pool_release(m, kind, 0, stream, t, &L->evcap, &L->pools), had_evs,
                              had_allocs, seq);
        case OWN_EMPTY_CACHE:
            return load_added(L, adv_append_release(m, t, &L->evcap), had_evs, had_allocs, seq);
        case OWN_FRACTION: /* frag and tune apply it under the configured limit (gm_replay_trace_load_tap) */
            return load_added(L, adv_add_limit(m, t, size, requested, &L->evcap), had_evs, had_allocs, seq);
        case OWN_MARKER:
            /* the markers and syncs are the recorded configuration's (ADV_LOAD_MARKERS); a stream
             * the program destroyed is every replay's, advise's too: its allocator forgets it
             * there (the trace's `sf`), as the run's did */
            if (!L->markers && kind != REC_STREAM_FORGET) return 0;
            /* a wait's start (its number, the allocation's request) and end (its number, in the
             * marker's 0-byte allocation's size): the trace's `sw` and `sy <step> <wait>` */
            if (kind == REC_ALLOC_WAIT)
                return load_added(L, adv_add_marker_sized(m, t, stream, ADV_MK_WAIT, (uint32_t)addr, requested, &L->evcap),
                                  had_evs, had_allocs, seq);
            if (kind == REC_ALLOC_SYNC && addr)
                return load_added(L,
                                  adv_add_marker_sized(m, t, stream,
                                                       flags & REC_F_SYNC_RESTART ? ADV_MK_RESTART : ADV_MK_SYNC,
                                                       (uint32_t)size, addr, &L->evcap),
                                  had_evs, had_allocs, seq);
            return load_added(L,
                              adv_add_marker(m, t, stream,
                                             kind == REC_MARKER_RECORD   ? ADV_MK_RECORD
                                             : kind == REC_MARKER_DONE   ? ADV_MK_DONE
                                             : kind == REC_STREAM_FORGET ? ADV_MK_FORGET
                                             : flags & REC_F_SYNC_RESTART ? ADV_MK_RESTART
                                                                          : ADV_MK_SYNC,
                                             (uint32_t)size, &L->evcap),
                              had_evs, had_allocs, seq);
        }
        L->pool_end_stream = 0;
    }
    if (m->torch == 1) {
        if (kind == REC_TORCH_SEG_MAP || kind == REC_TORCH_SEG_UNMAP) {
            L->t_res = kind == REC_TORCH_SEG_MAP ? L->t_res + size : L->t_res - (size < L->t_res ? size : L->t_res);
            if (L->t_res > m->rec_peak_reserved) m->rec_peak_reserved = L->t_res;
            if (kind == REC_TORCH_SEG_MAP) return 0;
        }
        /* segments given back, the program's empty_cache and fractions: the one decoding */
        int own = adv_torch_cache_row(m, kind, flags, alloc_id, stream, t, size, requested, &L->evcap, &L->pools);
        if (own) return load_added(L, own, had_evs, had_allocs, seq);
        /* the block of a tensor freed before became reusable (free_completed: the streams that used
         * it caught up): its free's landing, the model's events between them counted as fc_finish
         * counts them (frag and tune read the same rows as the trace's `fc`) */
        if (kind == REC_TORCH_FREE_COMPLETED) {
            uint64_t at;
            if (u64map_del(&L->torch_freed, addr, &at) && at < m->nevs) {
                /* the first event after the landing, from the free; 1: nothing between, reusable at
                 * once (no landing: the trace gets an `fc` only where it holds a block) */
                size_t k = m->nevs - at;
                if (k > 1) m->evs[at].pad = (uint16_t)(k < ADV_FC_END - 1 ? k : ADV_FC_END - 1);
            }
            return 0;
        }
        /* a tensor's block is counted from its alloc to its free (free_requested) */
        if (kind == REC_TORCH_ALLOC) {
            L->t_alloc += size;
            if (L->t_alloc > m->rec_peak_allocated) m->rec_peak_allocated = L->t_alloc;
            kind = REC_ALLOC_ASYNC;
        } else {
            kind = REC_FREE_ASYNC;
        }
    }
    if (m->oom.seq && seq > m->oom.seq && m->oom.ev == SIZE_MAX) m->oom.ev = m->nevs;
    /* the event's phase as every reader takes it (gm_spans_range): its push/pop range (NULL reads
     * as -1 from the pages, 0 through SQLite), else the start/end range open at its time; none
     * for a free by gpumem's exit hooks, though an OOM left a step open (gm_row_range) */
    range = gm_spans_range(L->spans, range > 0 && range <= UINT32_MAX ? (uint32_t)range : 0, (int64_t)t);
    if (rec_is_workspace_free((unsigned)row_kind, flags) || rec_is_host_cache_free((unsigned)row_kind, flags))
        range = 0;
    /* consecutive events mostly share a range: the last one's look-up kept */
    if (!L->have_range || range != L->last_range) {
        uint64_t *ri = u64map_get(L->ridx, range);
        L->last_rg = ri ? &L->r[*ri] : NULL;
        L->last_range = range, L->have_range = 1;
    }
    const rinfo *rg = L->last_rg;
    for (; L->ni < L->nnames && L->names[L->ni].seq < seq; L->ni++)
        name_apply(m, &L->live, L->births, &L->names[L->ni]);
    adv_ev e = {0};
    e.step = rg ? rg->step : -1;
    e.phase = rg ? rg->phase : 0;
    e.lr = rg ? rg->lr : 0;
    e.lr_name = rg ? rg->lr_name : 0;
    e.t = t;
    if (kind == REC_ALLOC || kind == REC_ALLOC_ASYNC) {
        /* passed through to the driver: the bytes it gave, as the report counts them */
        uint64_t bytes = rec_is_own_segment((unsigned)row_kind, (unsigned)flags) && size ? size : requested;
        uint32_t a = new_alloc(m, bytes, stream, 0, 0, (uint32_t)m->nallocs);
        if (a == UINT32_MAX || gm_grow_fast((void **)&L->stacks, &L->stcap, m->nallocs, sizeof *L->stacks) ||
            gm_grow_fast((void **)&L->births, &L->bcap, m->nallocs, sizeof *L->births))
            return L->nomem = 1, -1;
        m->allocs[a].orig = a;
        if (adv_pool_note(m, a, row_kind, flags, alloc_id, &L->pools)) return L->nomem = 1, -1;
        L->stacks[a] = stack;
        L->births[a] = seq;
        if (m->have_uses) u64map_put(&L->seq_idx, seq, a);
        if (addr != U64MAP_EMPTY) u64map_put(&L->live, addr, a);
        e.a = a, e.kind = ADV_EV_ALLOC;
        L->nstreams[stream < 8 ? stream : 7]++;
    } else {
        uint64_t a;
        if (!u64map_del(&L->live, addr, &a)) return 0;
        e.a = (uint32_t)a;
        e.kind = kind == REC_FREE ? ADV_EV_FREE : ADV_EV_FREE_ASYNC;
        e.stream = stream;
        if (rec_is_synced_free((unsigned)kind, (unsigned)flags)) e.stream |= ADV_FREE_SYNCED;
        if (m->torch == 1) {
            L->t_alloc -= size < L->t_alloc ? size : L->t_alloc;
            /* held until its free_completed, where one comes later (load_event's pad) */
            if (addr != U64MAP_EMPTY && u64map_put(&L->torch_freed, addr, m->nevs) != 0) return L->nomem = 1, -1;
        }
    }
    if (gm_grow_fast((void **)&m->evs, &L->evcap, m->nevs + 1, sizeof *m->evs) ||
        (L->infer && gm_grow_fast((void **)&L->evseq, &L->sqcap, m->nevs + 1, sizeof *L->evseq)))
        return L->nomem = 1, -1;
    if (L->infer) L->evseq[m->nevs] = seq;
    if (m->torch) {
        if (gm_grow_fast((void **)&L->evri, &L->ricap, m->nevs + 1, sizeof *L->evri)) return L->nomem = 1, -1;
        L->evri[m->nevs] = rg ? (uint32_t)(rg - L->r) : UINT32_MAX;
    }
    m->evs[m->nevs++] = e;
    return 0;
}

/* The rows of one leaf page (gm_events_pages), those of the kinds the SQL would select. */
static int event_rows(void *ctx, const gm_event_row *rows, size_t n)
{
    ev_reader *L = ctx;
    if (L->tap && L->tap->rows(L->tap->ctx, rows, n) != 0) return L->nomem = 1, 1;
    if (L->progress && ((L->nrows + n) >> 20) != (L->nrows >> 20))
        fprintf(stderr, "\rgpumem advise: reading events... %.1fM", (double)(((L->nrows + n) >> 20) << 20) / 1e6);
    L->nrows += n;
    int torch = L->m->torch == 1;
    if (!torch && fc_rows(&L->fc, rows, n) != 0) return L->nomem = 1, 1;
    for (size_t i = 0; i < n; i++) {
        const gm_event_row *w = &rows[i];
        int64_t k = w->kind;
        if ((k == 1 || k == 3) && (w->flags & 4096)) L->hooked = 1;
        if (L->probe && (k == 31 || ((k == 1 || k == 3) && (w->flags & 4096)))) {
            L->found = k == 31 ? LOAD_AS_HISTORY : LOAD_AS_HOOKED;
            return 1;
        }
        /* gpumem's recordings: its allocations and frees, and its own events the model keeps */
        if (torch ? k < 31 || k > 37 : (k < 1 || k > 4) && own_event_kept(k, (uint64_t)w->flags) == OWN_NONE)
            continue;
        if (load_event(L, (uint64_t)w->seq, (int)k, (uint64_t)w->addr, (uint64_t)w->requested, (uint32_t)w->stream,
                       (uint64_t)w->range, (uint64_t)w->t, (uint32_t)w->stack, (uint64_t)w->size, (uint64_t)w->flags,
                       (uint64_t)w->alloc_id) != 0)
            return 1;
    }
    return 0;
}

/* Whether the recording has a row of PyTorch's merged history / an allocation made through the
 * framework's hook (each a scan of the events table when it has none). */
static int has_row(gm_db *d, const char *sql)
{
    sqlite3_stmt *q;
    int yes = 0;
    if (sqlite3_prepare_v2(d->db, sql, -1, &q, NULL) == SQLITE_OK) {
        yes = sqlite3_step(q) == SQLITE_ROW;
        sqlite3_finalize(q);
    }
    return yes;
}
static int has_torch_history(gm_db *d)
{
    return has_row(d, "SELECT 1 FROM events WHERE kind = 31 LIMIT 1");
}
static int has_torch_hook(gm_db *d)
{
    return has_row(d, "SELECT 1 FROM events WHERE kind IN (1, 3) AND flags & 4096 LIMIT 1");
}

int adv_model_load_as(gm_db *d, adv_model *m, int how, char *err, size_t errsz)
{
    return adv_model_load_tap(d, m, how, NULL, err, errsz);
}

int adv_model_load_tap(gm_db *d, adv_model *m, int how, const adv_tap *tap, char *err, size_t errsz)
{
    memset(m, 0, sizeof *m);
    if (gm_grow((void **)&m->strs, &m->strs_cap, 1, sizeof *m->strs) || !(m->strs[0] = strdup(""))) {
        snprintf(err, errsz, "out of memory");
        return -1;
    }
    m->nstrs = 1;
    gm_meta_text(d, "config", m->config, sizeof m->config);
    gm_meta_text(d, "mode", m->mode, sizeof m->mode);
    gm_meta_command(d, m->cmdline, sizeof m->cmdline); /* what --check re-runs */
    gm_recorded_peaks(d, &m->rec_peak_allocated, &m->rec_peak_reserved);
    char order[8] = "";
    gm_meta_text(d, "alloc.address_order", order, sizeof order);
    m->top_down = !strcmp(order, "down");
    alloc_config_default(&m->cfg);
    char cerr[512];
    if (m->config[0] && alloc_config_parse_recorded(&m->cfg, m->config, cerr, sizeof cerr) != ALLOC_OK) {
        snprintf(err, errsz, "%s: the recorded allocator configuration does not parse (%s)",
                 d->path, cerr);
        return -1;
    }
    adv_cfg_uncapped(&m->cfg); /* a prediction says how much is needed; the caps are compared afterwards */
    m->dry_run = strstr(m->cmdline, "--dry-run") != NULL;
    if (gm_table_exists(d, "uses")) {
        sqlite3_stmt *s;
        if (sqlite3_prepare_v2(d->db, "SELECT count(*) FROM uses", -1, &s, NULL) == SQLITE_OK) {
            if (sqlite3_step(s) == SQLITE_ROW) m->nuses = (uint64_t)sqlite3_column_int64(s, 0);
            sqlite3_finalize(s);
        }
        /* uses that miss the launches whose arguments were unreadable or lost would make a tensor look
         * idle longer than it was: births and deaths decide then */
        m->uses_unread = gm_uses_unknown(d, NULL, NULL, NULL, 0);
        m->have_uses = m->nuses > 0 && m->uses_unread <= 0;
    }
    /* a PyTorch recording: its memory history merged (its tensors, in its allocator's terms), or
     * gpumem its allocator (tensors made through the framework's hook: gpumem's own terms). Each
     * is a scan of the events table when the answer is no (a second of 10 M events): the pass
     * over the table's pages below answers it instead, and a recording it finds to be PyTorch's
     * is loaded again as such (LOAD_AS_*); through SQLite, the scans first. */
    int probe = 0;
    if (how & LOAD_AS_HISTORY)
        m->torch = 1;
    else if (how & LOAD_AS_HOOKED)
        m->torch = has_torch_history(d) ? 1 : 2;
    else if ((how & ADV_LOAD_TORCH) && (how & ADV_LOAD_SQL))
        m->torch = has_torch_history(d) ? 1 : has_torch_hook(d) ? 2 : 0;
    else
        probe = (how & ADV_LOAD_TORCH) != 0;
    rinfo *r = NULL;
    size_t nr = 0;
    u64map ridx = {0};
    if (load_ranges(d, m, &r, &nr, &ridx) != 0) {
        snprintf(err, errsz, "%s: cannot read ranges: %s", d->path, sqlite3_errmsg(d->db));
        return -1;
    }
    gm_spans spans;
    gm_spans_load(d, &spans);
    load_ops(d, m, r, nr, &ridx, &spans);
    load_oom(d, m, r, &ridx, &spans);
    /* names, applied to the live allocation at their address (as gm_analyze does) */
    name_ev *names = NULL;
    size_t nnames = 0, ncap = 0;
    sqlite3_stmt *s;
    if (gm_table_exists(d, "names") &&
        sqlite3_prepare_v2(
            d->db,
            gm_names_have_birth(d) ? "SELECT n.seq, n.addr, s.s, n.birth FROM names n LEFT JOIN strings s "
                                     "ON s.id = n.name ORDER BY n.seq"
                                   : "SELECT n.seq, n.addr, s.s, NULL FROM names n LEFT JOIN strings s "
                                     "ON s.id = n.name ORDER BY n.seq",
            -1, &s, NULL) == SQLITE_OK) {
        while (sqlite3_step(s) == SQLITE_ROW) {
            if (gm_grow((void **)&names, &ncap, nnames + 1, sizeof *names)) break;
            names[nnames++] = (name_ev){(uint64_t)sqlite3_column_int64(s, 0),
                                        (uint64_t)sqlite3_column_int64(s, 1),
                                        (uint64_t)sqlite3_column_int64(s, 3),
                                        intern(m, (const char *)sqlite3_column_text(s, 2))};
        }
        sqlite3_finalize(s);
    }
    if (m->torch) gm_meta_text(d, "torch_autocast", m->torch_autocast, sizeof m->torch_autocast);
    if (m->torch == 1) {
        gm_meta_text(d, "torch_conf", m->torch_conf, sizeof m->torch_conf);
        char conf[1024];
        size_t o = (size_t)snprintf(conf, sizeof conf, "preset:%s",
                                    gm_meta_int(d, "torch_expandable", 0) ? "pytorch-expandable" : "pytorch");
        /* PYTORCH_CUDA_ALLOC_CONF's keys are gpumem's where they overlap; expandable_segments is
         * the preset's */
        for (char *k = m->torch_conf, *save = NULL, *tk; (tk = strtok_r(k, ",", &save)); k = NULL)
            if (strncmp(tk, "expandable_segments", 19) && o < sizeof conf)
                o += (size_t)snprintf(conf + o, sizeof conf - o, ",%s", tk);
        gm_meta_text(d, "torch_conf", m->torch_conf, sizeof m->torch_conf); /* strtok cut it */
        alloc_config_default(&m->cfg);
        if (alloc_config_parse(&m->cfg, conf, cerr, sizeof cerr) != ALLOC_OK) {
            snprintf(err, errsz, "%s: PyTorch's allocator configuration (PYTORCH_CUDA_ALLOC_CONF=%s) is not one "
                     "gpumem can replay (%s)", d->path, m->torch_conf, cerr);
            free(names), free(r), u64map_free(&ridx), gm_spans_free(&spans);
            adv_model_free(m);
            return -1;
        }
        adv_cfg_uncapped(&m->cfg);
        snprintf(m->config, sizeof m->config, "%s", conf);
        /* the device's: its whole peak, the program's own mappings (PyTorch's expandable segments)
         * included, as report's summary.peak_device */
        m->device_peak_allocated = m->rec_peak_allocated, m->device_peak_reserved = gm_recorded_device_peak(d);
        m->rec_peak_allocated = m->rec_peak_reserved = 0;
    }
    /* the events: from the table's pages where the file is what the recorder writes (half the
     * load's time on 10 M events), else through SQLite; the same rows either way */
    ev_reader L = {.m = m, .r = r, .ridx = &ridx, .names = names, .nnames = nnames, .spans = &spans, .tap = tap,
                   .infer = (how & ADV_LOAD_INFER) != 0, .probe = probe,
                   .progress = (how & ADV_LOAD_PROGRESS) && isatty(2), .markers = (how & ADV_LOAD_MARKERS) != 0};
    int pr = how & ADV_LOAD_SQL ? GM_PAGES_NO : gm_events_pages(d, event_rows, &L);
    /* the pages gave up after rows were read, or were not read (GPUMEM_SWEEP=sql) while the
     * recording's kind was still to be found: all again through SQLite; a PyTorch recording: all
     * again as one */
    if (pr == GM_PAGES_RESTART || L.found || (pr == GM_PAGES_NO && probe)) {
        ev_reader_free(&L);
        free(names), free(r), u64map_free(&ridx), gm_spans_free(&spans);
        adv_model_free(m);
        if (tap) tap->restart(tap->ctx);
        return adv_model_load_tap(d, m, how | (L.found ? L.found : ADV_LOAD_SQL), tap, err, errsz);
    }
    if (pr == GM_PAGES_NO) pr = gm_events_sql(d, event_rows, &L);
    if (L.nrows >> 20 && L.progress) fprintf(stderr, "\r%50s\r", "");
    if (pr == GM_SQL_NOQUERY) {
        snprintf(err, errsz, "%s: cannot read events: %s", d->path, sqlite3_errmsg(d->db));
        ev_reader_free(&L);
        free(names), free(r), u64map_free(&ridx), gm_spans_free(&spans);
        adv_model_free(m);
        return -1;
    }
    /* GM_SQL_ERROR: a damaged tail, the model is what was read before it */
    int rc = pr == GM_PAGES_DONE ? SQLITE_DONE : SQLITE_ERROR;
    /* every row of the whole recording read: whether one was made through the framework's hook
     * is known (gm_replay_mark_served asks) */
    if (pr == GM_PAGES_DONE && !d->scoped) m->hooked_rows = L.hooked ? ADV_HOOKED_SOME : ADV_HOOKED_NONE;
    u64map live = L.live, seq_idx = L.seq_idx;
    uint32_t *stacks = L.stacks;
    uint64_t *births = L.births, *evseq = L.evseq;
    size_t *nstreams = L.nstreams, ni = L.ni;
    int nomem = L.nomem;
    if (!nomem && fc_finish(&L.fc, m, L.markers) != 0) nomem = 1;
    fc_reader_free(&L.fc);
    /* the history's freed blocks and the pools' names: the pass's alone (m keeps m->pools) */
    u64map_free(&L.torch_freed);
    adv_pool_ids_free(&L.pools);
    if (m->oom.ev == SIZE_MAX) m->oom.ev = m->nevs;
    for (; rc == SQLITE_DONE && ni < nnames; ni++) name_apply(m, &live, births, &names[ni]);
    u64map_free(&live);
    /* the op log: under PyTorch's allocator and under gpumem as its allocator (births: seqs) */
    if (m->torch && !nomem && tops_load(d, m, births) != 0) nomem = 1;
    if (m->torch && !nomem && L.evri && !gm_torch_bwd_innermost(d) && bwd_of_returned_child(m, r, nr, L.evri) != 0)
        nomem = 1;
    /* without it, what the module calls tell */
    if (m->torch && !nomem && !m->ntops && L.evri && passed_to_module(m, r, L.evri) != 0) nomem = 1;
    if (m->torch && !nomem && !m->ntops && L.evri && hooks_nodes(m, r, nr, L.evri) != 0) nomem = 1;
    free(L.evri), L.evri = NULL;
    free(births);
    free(names), free(r), u64map_free(&ridx), gm_spans_free(&spans);
    if (nomem) {
        free(stacks), free(evseq);
        snprintf(err, errsz, "%s: out of memory after %zu allocations", d->path, m->nallocs);
        adv_model_free(m);
        return -1;
    }
    if (rc != SQLITE_DONE && m->nevs == 0) {
        free(stacks), free(evseq);
        /* the scan's own reason (gm_events_sql kept it: SQLite's message was reset since) */
        snprintf(err, errsz, "%s: cannot read events: %s%s", d->path,
                 d->damage[0] ? "the recording is damaged: " : "", d->damage[0] ? d->damage : sqlite3_errmsg(d->db));
        adv_model_free(m); /* what was read before the events (ranges, ops, strings) */
        return -1;
    }
    /* classes: the name with digits as '*', else the call site */
    u64map site = {0};
    int sites_loaded = 0;
    for (size_t a = 0; a < m->nallocs; a++) {
        char buf[512];
        if (m->allocs[a].name) {
            adv_name_class(m->strs[m->allocs[a].name], buf, sizeof buf);
            m->allocs[a].cls = intern(m, buf);
            continue;
        }
        if (!sites_loaded) sites_loaded = 1, load_sites(d, m, &site);
        uint64_t *si = u64map_get(&site, stacks[a]);
        if (si)
            m->allocs[a].cls = (uint32_t)*si;
        else {
            snprintf(buf, sizeof buf, "stack %u", stacks[a]);
            m->allocs[a].cls = intern(m, buf);
        }
    }
    u64map_free(&site);
    /* the events autograd's thread made, as far as the recording tells (NULL: not known): PyTorch's
     * history keeps the Python stack of every allocation, and that thread runs no Python; an event
     * of gpumem's outside every range inside a step's time is that thread's (below) */
    uint8_t *autograd = m->torch ? calloc(m->nevs + 1, 1) : NULL;
    for (size_t i = 0; autograd && m->torch == 1 && i < m->nevs; i++)
        autograd[i] = m->evs[i].kind == ADV_EV_ALLOC && m->evs[i].a < m->nallocs && !stacks[m->evs[i].a];
    free(stacks);
    m->nrecorded = m->nallocs;
    if (m->torch == 2)
        /* PyTorch's autograd thread allocates before the hooks open its "step N" (the loss's
         * gradient): an event of gpumem's (ranges by thread) outside every range, inside a
         * step's time, is that step's. (PyTorch's merged history takes the innermost range
         * open on any thread already.) */
        for (size_t i = 0, s = 0; i < m->nevs; i++) {
            adv_ev *e = &m->evs[i];
            if (e->step >= 0) continue;
            while (s < m->nsteps && m->steps[s].end_ns < e->t)
                s++;
            if (s < m->nsteps && m->steps[s].start_ns <= e->t) {
                e->step = (int32_t)s;
                if (autograd) autograd[i] = 1;
            }
        }
    if (m->torch == 1) {
        /* PyTorch's history keeps microseconds: a tensor made just after a module's range was
         * reopened ("back in the parent") can read as made in the pass's or the root's range.
         * An event outside every block, in the same step and pass as a block's events both
         * before and after it, belongs to that block. */
        size_t prev[4] = {SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX};
        size_t *pend = malloc((m->nevs ? m->nevs : 1) * sizeof *pend), np = 0;
        uint8_t pend_ph = 0;
        if (pend)
            for (size_t i = 0; i < m->nevs; i++) {
                adv_ev *e = &m->evs[i];
                if (e->phase != ADV_PH_FWD && e->phase != ADV_PH_BWD) continue;
                int blk = e->lr && adv_is_block_name(adv_str(m, e->lr_name));
                if (!blk) {
                    if (np && pend_ph != e->phase) np = 0;
                    pend[np++] = i, pend_ph = e->phase;
                    continue;
                }
                size_t p = prev[e->phase];
                if (np && pend_ph == e->phase && p != SIZE_MAX && m->evs[p].step == e->step &&
                    m->evs[p].lr_name == e->lr_name)
                    for (size_t k = 0; k < np; k++)
                        if (m->evs[pend[k]].step == e->step && m->evs[pend[k]].phase == e->phase &&
                            pend[k] > p)
                            m->evs[pend[k]].lr = e->lr, m->evs[pend[k]].lr_name = e->lr_name;
                np = 0;
                prev[e->phase] = i;
            }
        free(pend);
        /* PyTorch's clock is put on the recording's by the segments' cudaMalloc times; the steps
         * after the last new segment keep its offset while the clock drifts on (gpt2-medium's
         * third step: its tensors read 8-14 us early), so a block's first tensor (ln_1's
         * output) can read as made between the previous block and its own, in the root's
         * range. A tensor made outside every block, between the forward events of two
         * successive blocks X and Y, which Y's backward frees while it also frees a tensor
         * made in X (Y's input, that X made), is Y's: an op of the parent between the two
         * blocks would make Y's input itself, and X's output would not live on to Y's
         * backward. */
        size_t *birth, *death;
        if (life_index(m, &birth, &death) == 0) {
            size_t prevb = SIZE_MAX, q = 0; /* the last forward event in a block, the next one */
            for (size_t i = 0; i < m->nevs; i++) {
                adv_ev *e = &m->evs[i];
                if (e->phase != ADV_PH_FWD) continue;
                if (e->lr && adv_is_block_name(adv_str(m, e->lr_name))) {
                    prevb = i;
                    continue;
                }
                if (e->kind != ADV_EV_ALLOC || prevb == SIZE_MAX || m->evs[prevb].step != e->step) continue;
                for (q = q > i ? q : i + 1; q < m->nevs && !(m->evs[q].phase == ADV_PH_FWD && m->evs[q].lr &&
                                                         adv_is_block_name(adv_str(m, m->evs[q].lr_name)));)
                    q++;
                const adv_ev *X = &m->evs[prevb];
                if (q == m->nevs || m->evs[q].step != e->step || m->evs[q].lr_name == X->lr_name) continue;
                const adv_ev *Y = &m->evs[q];
                size_t d = death[e->a];
                if (d == SIZE_MAX || m->evs[d].phase != ADV_PH_BWD || m->evs[d].step != e->step ||
                    m->evs[d].lr_name != Y->lr_name)
                    continue;
                int input = 0;
                for (size_t j = prevb + 1; j-- > 0 && !input;) {
                    const adv_ev *x = &m->evs[j];
                    if (x->phase != ADV_PH_FWD || x->step != e->step) break;
                    if (x->lr_name != X->lr_name) {
                        if (x->lr && adv_is_block_name(adv_str(m, x->lr_name))) break;
                        continue;
                    }
                    size_t dx = x->kind == ADV_EV_ALLOC ? death[x->a] : SIZE_MAX;
                    input = dx != SIZE_MAX && m->evs[dx].phase == ADV_PH_BWD && m->evs[dx].step == e->step &&
                            m->evs[dx].lr_name == Y->lr_name;
                }
                if (input) e->lr = Y->lr, e->lr_name = Y->lr_name;
            }
            free(birth), free(death);
        }
    }
    if (m->torch) {
        /* what a step does after its forward and before its backward's first range is the
         * backward's: loss.backward() runs the nodes of the loss, computed in the root module's
         * forward (cross_entropy's), before autograd reaches a module whose hooks open the
         * backward's range. Those events take the backward's first range, so what the loss's
         * nodes saved pairs with the forward that made it (save_on_cpu packs it too); but not a
         * repeated block's range: the loss (computed outside the model by a user's loop) is no
         * block's, and the last block's output it saved is not that block's saved tensor
         * (checkpointing dropped it and re-made it before the loss: 6% low in reserved).
         * What the program did there before autograd's first event (the loss computed outside the
         * model, autocast's cache let go as its region exits, the loss scaled) is no node's: a
         * tensor freed there is no saved one (the autocast copies of weights no op saved were
         * offloaded and restored in the loss: torch_features.py amp under --allocator gpumem, 2
         * MiB over its run's reserved); where autograd's events are not known, all of it */
        size_t *pend = malloc((m->nevs ? m->nevs : 1) * sizeof *pend), np = 0;
        int32_t fwd_step = -1; /* the step of the last forward event, -1 after a backward or update */
        for (size_t i = 0; pend && i < m->nevs; i++) {
            adv_ev *e = &m->evs[i];
            if (e->phase == ADV_PH_FWD) {
                fwd_step = e->step, np = 0;
            } else if (e->phase == ADV_PH_BWD) {
                int blk = e->lr && adv_is_block_name(adv_str(m, e->lr_name));
                size_t k0 = 0; /* autograd's first event among them */
                while (autograd && k0 < np && !autograd[pend[k0]])
                    k0++;
                if (k0 == np) k0 = 0;
                for (size_t k = k0; k < np && e->step == fwd_step && e->lr; k++) {
                    adv_ev *x = &m->evs[pend[k]];
                    x->phase = ADV_PH_BWD, x->lr = blk ? 0 : e->lr, x->lr_name = blk ? 0 : e->lr_name;
                }
                fwd_step = -1, np = 0;
            } else if (e->phase == ADV_PH_OPT || e->step != fwd_step) {
                fwd_step = -1, np = 0;
            } else {
                pend[np++] = i;
            }
        }
        free(pend);
        /* one instance per block: the block's modules follow one another in its forward (and in
         * reverse in its backward), each its own range */
        const adv_ev *prev[4] = {0};
        for (size_t i = 0; i < m->nevs; i++) {
            adv_ev *e = &m->evs[i];
            if (!e->lr || e->phase > ADV_PH_OPT) continue;
            const adv_ev *p = prev[e->phase];
            if (p && p->step == e->step && p->lr_name == e->lr_name) e->lr = p->lr;
            prev[e->phase] = e;
        }
    }
    free(autograd);
    for (size_t i = 0; i < m->nevs && !m->phases_from; i++)
        if (m->evs[i].phase != ADV_PH_OTHER && m->evs[i].step >= 0) m->phases_from = GM_CSRC_PHASES;
    m->steps_from = m->nsteps ? GM_CSRC_PHASES : GM_CSRC_NONE;
    if (!m->phases_from && (how & ADV_LOAD_INFER)) infer_phases(d, m, evseq, (how & ADV_LOAD_PROGRESS) != 0);
    if (m->phases_from == GM_CSRC_INFERENCE) infer_layers(m);
    free(evseq);
    if (m->have_uses) load_uses(d, m, &seq_idx);
    u64map_free(&seq_idx);
    size_t best = 0;
    for (size_t i = 1; i < 8; i++)
        if (nstreams[i] > nstreams[best]) best = i;
    m->compute_stream = (uint32_t)best;
    uint32_t maxs = 0;
    for (size_t a = 0; a < m->nallocs; a++)
        if (m->allocs[a].stream > maxs) maxs = m->allocs[a].stream;
    m->copy_stream = maxs + 1;
    return 0;
}

void adv_model_free(adv_model *m)
{
    free(m->fy_frees);
    m->fy_frees = NULL, m->nfy_frees = 0;
    if (!(m->borrows & ADV_BORROWS_STRS)) {
        for (size_t i = 0; i < m->nstrs; i++)
            free(m->strs[i]);
        free(m->strs);
        u64map_free(&m->str_idx);
    }
    if (!(m->borrows & ADV_BORROWS_ALLOCS)) free(m->allocs);
    if (!(m->borrows & ADV_BORROWS_EVS)) free(m->evs);
    if (!(m->borrows & ADV_BORROWS_TIMES)) free(m->steps), free(m->ops), free(m->opt_starts);
    if (m->owns_uses) free(m->use_off), free(m->use_t);
    if (m->owns_tops) free(m->tops), free(m->targs), free(m->tholds), free(m->hnode);
    if (m->owns_pools) free(m->pools);
    memset(m, 0, sizeof *m);
}

/* malloc for the large arrays of a model and its replay (events, traces, indexes per event or
 * allocation: hundreds of MiB each on 10 M events, written once fresh from the kernel): their
 * pages transparent huge pages where the kernel allows it, so that writing them takes a page
 * fault every 2 MiB, not every 4 KiB (the faults were a quarter of advise's time on 10 M events:
 * each candidate copied the model, rewrote it and built its trace). */
static void *big_malloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    if (p && bytes >= 2 * huge) {
        uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1), hi = ((uintptr_t)p + bytes) & ~(huge - 1);
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* advice: ignored where THP is off */
    }
#endif
    return p;
}

static void *dup_mem(const void *p, size_t n)
{
    void *c = big_malloc(n);
    if (c && n) memcpy(c, p, n);
    return c;
}

int adv_model_copy(const adv_model *src, adv_model *dst)
{
    *dst = *src;
    dst->borrows = 0;
    dst->fy_frees = NULL, dst->nfy_frees = 0; /* the loaded model's event indices only */
    dst->allocs = dup_mem(src->allocs, src->nallocs * sizeof *src->allocs);
    dst->allocs_cap = src->nallocs;
    dst->evs = dup_mem(src->evs, src->nevs * sizeof *src->evs);
    dst->steps = dup_mem(src->steps, src->nsteps * sizeof *src->steps);
    dst->ops = dup_mem(src->ops, src->nops * sizeof *src->ops);
    dst->opt_starts = dup_mem(src->opt_starts, src->nopt_starts * sizeof *src->opt_starts);
    dst->strs = calloc(src->nstrs ? src->nstrs : 1, sizeof *dst->strs);
    dst->strs_cap = src->nstrs;
    dst->owns_uses = 0; /* the uses stay the original's */
    dst->owns_tops = 0; /* so does the op log */
    dst->owns_pools = 0; /* and the private pools */
    memset(&dst->str_idx, 0, sizeof dst->str_idx);
    int bad =
        !dst->allocs || !dst->evs || !dst->steps || !dst->ops || !dst->opt_starts || !dst->strs;
    for (size_t i = 0; !bad && i < src->nstrs; i++) {
        if (!(dst->strs[i] = strdup(src->strs[i])))
            bad = 1;
        else
            bad = str_slot(&dst->str_idx, dst->strs, i) != 0;
    }
    if (bad) {
        dst->nstrs = 0;
        adv_model_free(dst);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ views */

/* A view (adv_model_view) starts with every array borrowed; the own_* below copy one when a
 * rewrite is about to write it. The writers are few and each one owns what it writes first:
 * intern (strings), new_alloc (allocations), rw_apply (events: it builds a new array, so the
 * borrowed one is only read), adv_stash (a saved tensor's recorded death renamed in place),
 * adv_accum (sizes shrunk in place); the rewrites not used on views (adv_oom_cut,
 * adv_repeat_last_step, adv_unbf16, adv_zero, adv_zero3, adv_fsdp, adv_opt_param_order) own
 * the whole model first. */

void adv_model_view(const adv_model *src, adv_model *dst)
{
    *dst = *src;
    if (!dst->rec_allocs) dst->rec_allocs = src->allocs;
    dst->borrows = ADV_BORROWS_EVS | ADV_BORROWS_ALLOCS | ADV_BORROWS_STRS | ADV_BORROWS_TIMES;
    dst->fy_frees = NULL, dst->nfy_frees = 0; /* a rewrite moves the events they index */
    dst->owns_uses = 0; /* the uses stay the original's */
    dst->owns_tops = 0; /* so does the op log */
    dst->owns_pools = 0; /* and the private pools */
}

static int own_evs(adv_model *m)
{
    if (!(m->borrows & ADV_BORROWS_EVS)) return 0;
    adv_ev *e = dup_mem(m->evs, m->nevs * sizeof *m->evs);
    if (!e) return -1;
    m->evs = e, m->borrows &= ~(unsigned)ADV_BORROWS_EVS;
    return 0;
}

static int own_allocs(adv_model *m)
{
    if (!(m->borrows & ADV_BORROWS_ALLOCS)) return 0;
    adv_alloc *a = dup_mem(m->allocs, m->nallocs * sizeof *m->allocs);
    if (!a) return -1;
    m->allocs = a, m->allocs_cap = m->nallocs, m->borrows &= ~(unsigned)ADV_BORROWS_ALLOCS;
    return 0;
}

static int own_strs(adv_model *m)
{
    if (!(m->borrows & ADV_BORROWS_STRS)) return 0;
    char **v = calloc(m->nstrs ? m->nstrs : 1, sizeof *v);
    u64map idx = {0};
    int bad = !v;
    for (size_t i = 0; !bad && i < m->nstrs; i++)
        bad = !(v[i] = strdup(m->strs[i])) || str_slot(&idx, v, i) != 0;
    if (bad) {
        for (size_t i = 0; v && i < m->nstrs; i++)
            free(v[i]);
        free(v);
        u64map_free(&idx);
        return -1;
    }
    m->strs = v, m->strs_cap = m->nstrs, m->str_idx = idx;
    m->borrows &= ~(unsigned)ADV_BORROWS_STRS;
    return 0;
}

static int own_times(adv_model *m)
{
    if (!(m->borrows & ADV_BORROWS_TIMES)) return 0;
    adv_step *st = dup_mem(m->steps, m->nsteps * sizeof *m->steps);
    adv_op *op = dup_mem(m->ops, m->nops * sizeof *m->ops);
    uint64_t *os = dup_mem(m->opt_starts, m->nopt_starts * sizeof *m->opt_starts);
    if (!st || !op || !os) {
        free(st), free(op), free(os);
        return -1;
    }
    m->steps = st, m->ops = op, m->opt_starts = os, m->borrows &= ~(unsigned)ADV_BORROWS_TIMES;
    return 0;
}

int adv_model_own(adv_model *m)
{
    return own_strs(m) || own_allocs(m) || own_evs(m) || own_times(m) ? -1 : 0;
}

int adv_model_replays_as(const adv_model *view, const adv_model *base)
{
    return view->evs == base->evs && view->nevs == base->nevs && view->allocs == base->allocs &&
           view->nallocs == base->nallocs && view->top_down == base->top_down &&
           view->rec_peak_reserved == base->rec_peak_reserved &&
           !memcmp(&view->cfg, &base->cfg, sizeof view->cfg);
}

size_t adv_oom_complete_steps(const adv_model *m)
{
    if (!m->oom.seq) return 0;
    size_t n = 0;
    for (size_t i = 0; i < m->nsteps; i++) {
        if (m->oom.step >= 0 ? i >= (size_t)m->oom.step : m->steps[i].start_ns >= m->oom.t) break;
        if (m->steps[i].end_ns > m->steps[i].start_ns && m->steps[i].end_ns <= m->oom.t) n++;
    }
    return n;
}

int adv_oom_cut(adv_model *m, int partial)
{
    if (!m->oom.seq) return 0;
    if (adv_model_own(m) != 0) return -1;
    size_t cut = m->oom.ev < m->nevs ? m->oom.ev : m->nevs;
    uint64_t cut_t = m->oom.t;
    if (!partial && m->oom.step >= 0 && (size_t)m->oom.step < m->nsteps) {
        cut_t = m->steps[m->oom.step].start_ns;
        for (size_t i = 0; i < cut; i++)
            if (m->evs[i].step == m->oom.step) {
                cut = i;
                break;
            }
    }
    m->nevs = cut;
    size_t ns = 0;
    while (ns < m->nsteps && (partial ? m->steps[ns].start_ns <= cut_t : m->steps[ns].start_ns < cut_t))
        ns++;
    m->nsteps = ns;
    if (partial && ns && m->steps[ns - 1].end_ns <= m->steps[ns - 1].start_ns)
        m->steps[ns - 1].end_ns = cut_t; /* the step of the OOM: it ends there */
    while (m->nops && m->ops[m->nops - 1].t > cut_t - !partial)
        m->nops--;
    while (m->nopt_starts && m->opt_starts[m->nopt_starts - 1] > cut_t - !partial)
        m->nopt_starts--;
    if (!partial) return 0;
    /* the request that failed, alive to the end: what the program needed at least */
    uint32_t a = new_alloc(m, m->oom.requested, m->oom.stream, 0, 0, (uint32_t)m->nallocs);
    adv_ev *n = a == UINT32_MAX ? NULL : realloc(m->evs, (m->nevs + 1) * sizeof *n);
    if (!n) return -1;
    char nm[sizeof m->oom.name + 16];
    snprintf(nm, sizeof nm, "%s", m->oom.name[0] ? m->oom.name : "the request that failed");
    m->allocs[a].name = intern(m, nm);
    adv_name_class(nm, nm, sizeof nm);
    m->allocs[a].cls = intern(m, nm);
    const char *ph = strrchr(m->oom.where, '/');
    m->evs = n;
    m->evs[m->nevs++] = (adv_ev){.a = a,
                                 .kind = ADV_EV_ALLOC,
                                 .phase = (uint8_t)adv_phase_of_name(ph ? ph + 1 : m->oom.where),
                                 .step = m->oom.step,
                                 .t = m->oom.t};
    return 0;
}

int adv_repeat_last_step(adv_model *m)
{
    if (!m->nsteps) return 0;
    int32_t s = (int32_t)m->nsteps - 1;
    size_t lo = SIZE_MAX, hi = 0;
    for (size_t i = 0; i < m->nevs; i++)
        if (m->evs[i].step == s) {
            if (lo == SIZE_MAX) lo = i;
            hi = i;
        }
    if (lo == SIZE_MAX) return 0;
    size_t *birth, *death;
    if (adv_model_own(m) != 0 || life_index(m, &birth, &death) != 0) return -1;
    const adv_step st = m->steps[s];
    /* the copy starts after everything recorded (events are in time order) */
    uint64_t after = st.end_ns > m->evs[m->nevs - 1].t ? st.end_ns : m->evs[m->nevs - 1].t;
    for (size_t i = 0; i < m->nops; i++)
        if (m->ops[i].t > after) after = m->ops[i].t;
    uint64_t shift = after - st.start_ns + 1;
    size_t n0 = m->nallocs;
    uint32_t *map = malloc((n0 + 1) * sizeof *map);
    adv_ev *ne = realloc(m->evs, (m->nevs + hi - lo + 2) * sizeof *ne);
    adv_step *nst = realloc(m->steps, (m->nsteps + 1) * sizeof *nst);
    if (ne) m->evs = ne;
    if (nst) m->steps = nst;
    int rc = -1;
    if (!map || !ne || !nst) goto out;
    m->steps[m->nsteps] = (adv_step){st.number + 1, st.start_ns + shift, st.end_ns + shift};
    size_t o = m->nevs;
    for (size_t i = lo; i <= hi; i++) {
        adv_ev e = m->evs[i];
        if (e.step != s) continue;
        if (e.kind == ADV_EV_ALLOC) {
            if (death[e.a] == SIZE_MAX || death[e.a] > hi) continue; /* outlives the step */
            const adv_alloc x = m->allocs[e.a];
            uint32_t h = new_alloc(m, x.size, x.stream, x.cls, x.name, x.orig);
            if (h == UINT32_MAX) goto out;
            map[e.a] = h;
        } else if (birth[e.a] < lo || birth[e.a] == SIZE_MAX) {
            continue; /* born before the step: freed once, in the step copied */
        }
        e.a = map[e.a];
        e.step = (int32_t)m->nsteps;
        e.t += shift;
        if (e.lr) e.lr |= 1ull << 62; /* new range instances */
        m->evs[o++] = e;
    }
    m->nevs = o;
    m->nsteps++;
    /* the step's ops and optimizer ranges, at their new times */
    size_t nops = m->nops, nopt = m->nopt_starts;
    adv_op *nop = realloc(m->ops, (2 * nops + 1) * sizeof *nop);
    if (nop) m->ops = nop;
    uint64_t *nos = realloc(m->opt_starts, (2 * nopt + 1) * sizeof *nos);
    if (nos) m->opt_starts = nos;
    if (!nop || !nos) goto out;
    uint64_t end = st.end_ns > st.start_ns ? st.end_ns : m->evs[hi].t;
    for (size_t i = 0; i < nops; i++)
        if (m->ops[i].t >= st.start_ns && m->ops[i].t <= end) {
            adv_op op = m->ops[i];
            op.t += shift;
            m->ops[m->nops++] = op;
        }
    for (size_t i = 0; i < nopt; i++)
        if (m->opt_starts[i] >= st.start_ns && m->opt_starts[i] <= end)
            m->opt_starts[m->nopt_starts++] = m->opt_starts[i] + shift;
    if (m->nops > 1) gm_sort(m->ops, m->nops, sizeof *m->ops, cmp_op);
    if (m->nopt_starts > 1) gm_sort(m->opt_starts, m->nopt_starts, sizeof *m->opt_starts, gm_cmp_u64);
    rc = 0;
out:
    free(map), free(birth), free(death);
    return rc;
}

size_t adv_steady_step(const adv_model *m)
{
    return m->nsteps < 2 ? 0 : m->nsteps / 2 > 1 ? m->nsteps / 2 : 1;
}

/* ------------------------------------------------------------------ replay */

static void trace_event(const adv_model *m, const adv_ev *e, alloc_trace_event_t *t)
{
    const adv_alloc *a = &m->allocs[e->a];
    t->id = (uint64_t)e->a + 1;
    t->kind = e->kind == ADV_EV_ALLOC         ? ALLOC_TR_ALLOC
              : e->kind == ADV_EV_FREE        ? ALLOC_TR_FREE
              : e->kind == ADV_EV_FREE_DONE   ? ALLOC_TR_FREE_DONE
              : e->kind == ADV_EV_EMPTY_CACHE ? ALLOC_TR_EMPTY_CACHE
              : e->kind == ADV_EV_LIMIT       ? ALLOC_TR_LIMIT
              : e->kind == ADV_EV_POOL_RELEASE ? ALLOC_TR_POOL_RELEASE
              : e->kind == ADV_EV_MARKER       ? (e->pad == ADV_MK_RECORD    ? ALLOC_TR_MARKER_RECORD
                                                  : e->pad == ADV_MK_DONE    ? ALLOC_TR_MARKER_DONE
                                                  : e->pad == ADV_MK_SYNC    ? ALLOC_TR_SYNC
                                                  : e->pad == ADV_MK_RESTART ? ALLOC_TR_SYNC_RESTART
                                                  : e->pad == ADV_MK_WAIT    ? ALLOC_TR_WAIT
                                                                             : ALLOC_TR_STREAM_FORGET)
                                              : ALLOC_TR_FREE_ASYNC;
    if (t->kind == ALLOC_TR_FREE && (e->stream & ADV_FREE_SYNCED)) t->kind = ALLOC_TR_FREE_SYNCED;
    t->size = e->kind == ADV_EV_ALLOC    ? a->size
              : e->kind == ADV_EV_FREE_DONE ? e->stream /* 1: `fy`, landed by a synchronization */
              : e->kind == ADV_EV_LIMIT  ? adv_ev_limit(e)
              : e->kind == ADV_EV_MARKER ? e->stream /* its step */
                                         : 0;
    t->stream = e->kind == ADV_EV_ALLOC || e->kind == ADV_EV_MARKER ? a->stream
                : e->kind == ADV_EV_FREE_ASYNC                          ? e->stream
                                                                        : 0;
    /* a wait's start: its number and the allocation's request; its end: its number */
    if (e->kind == ADV_EV_MARKER && e->pad == ADV_MK_WAIT) t->id = e->stream, t->size = a->size;
    if (e->kind == ADV_EV_MARKER && (e->pad == ADV_MK_SYNC || e->pad == ADV_MK_RESTART)) t->id = a->size;
    /* in a private pool: the pool's key, one per (pool, stream) as PyTorch keys a pool's
     * blocks by stream too; above every stream id (those are 32-bit) */
    uint32_t pool = (e->kind == ADV_EV_ALLOC || e->kind == ADV_EV_POOL_RELEASE) && a->orig < m->npools
                        ? m->pools[a->orig]
                        : 0;
    if (pool == ADV_POOL_DRIVER) {
        if (e->kind == ADV_EV_ALLOC) t->kind = ALLOC_TR_ALLOC_DRIVER;
        return;
    }
    if (pool && e->kind == ADV_EV_ALLOC) t->kind = ALLOC_TR_ALLOC_PRIVATE;
    if (pool) t->stream = (uint64_t)pool << 32 | a->stream;
}

/* The landings still to come, by the count of model events after which each is due: a binary
 * heap (a free's lag is its own, so they do not come in the order of their frees). */
typedef struct fc_due {
    uint64_t due;
    uint32_t a;
    uint32_t synced; /* the free's landing was the allocator's synchronization's (`fy`) */
} fc_due;
typedef struct fc_heap {
    fc_due *v;
    size_t n, cap;
} fc_heap;

static int fc_push(fc_heap *h, uint64_t due, uint32_t a, uint32_t synced)
{
    if (gm_grow_fast((void **)&h->v, &h->cap, h->n + 1, sizeof *h->v)) return -1;
    size_t i = h->n++;
    for (; i && h->v[(i - 1) / 2].due > due; i = (i - 1) / 2)
        h->v[i] = h->v[(i - 1) / 2];
    h->v[i] = (fc_due){due, a, synced};
    return 0;
}

static fc_due fc_pop(fc_heap *h)
{
    fc_due top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->v[c + 1].due < h->v[c].due) c++;
        if (h->v[c].due >= last.due) break;
        h->v[i] = h->v[c], i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static int has_landing(const adv_ev *e)
{
    return (e->kind == ADV_EV_FREE || e->kind == ADV_EV_FREE_ASYNC) && e->pad;
}

/* The model's events in trace order, each free's landing (ADV_EV_FREE_DONE) after its lag:
 * emit(ctx, event, its index in m->evs or SIZE_MAX for a landing) for each. 0, or -1 out of
 * memory. */
static int trace_walk(const adv_model *m, void (*emit)(void *ctx, const adv_ev *e, size_t i), void *ctx)
{
    fc_heap h = {0};
    for (size_t i = 0; i <= m->nevs; i++) {
        while (h.n && (i == m->nevs || h.v[0].due <= i)) {
            fc_due d = fc_pop(&h);
            /* its time: the event it follows (what is put in by time later goes after it) */
            adv_ev done = {.a = d.a, .kind = ADV_EV_FREE_DONE, .step = -1, .t = i ? m->evs[i - 1].t : 0,
                           .stream = d.synced};
            emit(ctx, &done, SIZE_MAX);
        }
        if (i == m->nevs) break;
        const adv_ev *e = &m->evs[i];
        emit(ctx, e, i);
        if (has_landing(e) &&
            fc_push(&h, e->pad == ADV_FC_END ? UINT64_MAX : (uint64_t)i + e->pad, e->a,
                    m->nfy_frees && fy_free(m, i)) != 0) {
            free(h.v);
            return -1;
        }
    }
    free(h.v);
    return 0;
}

typedef struct trace_out {
    const adv_model *m;
    alloc_trace_event_t *t;
    adv_ev *evs;
    size_t n;
    const unsigned char *mark; /* adv_to_trace's capture bounds, by model event */
} trace_out;

/* adv_to_trace's capture bounds of model event i (1: a `cb` before it, 2: a `ce` after it); 0
 * for an event not in the model (i SIZE_MAX) or a trace without bounds */
static inline unsigned trace_mark(const unsigned char *mark, size_t i)
{
    return mark && i != SIZE_MAX ? mark[i] : 0;
}

static void emit_trace(void *ctx, const adv_ev *e, size_t i)
{
    trace_out *o = ctx;
    alloc_trace_event_t x;
    trace_event(o->m, e, &x);
    unsigned mk = trace_mark(o->mark, i);
    if (mk & 1) o->t[o->n++] = (alloc_trace_event_t){.kind = ALLOC_TR_CAPTURE_BEGIN, .stream = x.stream};
    o->t[o->n++] = x;
    if (mk & 2) o->t[o->n++] = (alloc_trace_event_t){.kind = ALLOC_TR_CAPTURE_END, .stream = x.stream};
}

static void emit_ev(void *ctx, const adv_ev *e, size_t i)
{
    (void)i;
    trace_out *o = ctx;
    adv_ev x = *e;
    if (x.kind == ADV_EV_FREE || x.kind == ADV_EV_FREE_ASYNC) x.pad = 0; /* its landing follows */
    o->evs[o->n++] = x;
}

static size_t landings(const adv_model *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->nevs; i++)
        n += has_landing(&m->evs[i]);
    return n;
}

/* gpumem's captures: per model event, 1 a capture's pool has its first allocation there (`cb`
 * before it), 2 its last (`ce` after), so that the replay settles and releases nothing in
 * between, as the live allocator could not (alloc.h, ALLOC_TR_CAPTURE_BEGIN); *ncap the
 * captures. NULL with *ncap 0 where there is none; -1 out of memory. */
static int capture_marks(const adv_model *m, unsigned char **out, size_t *ncap)
{
    *out = NULL, *ncap = 0;
    if (!m->capture_pool) return 0;
    u64map last = {0}; /* a capture pool's key -> its last allocation's event */
    unsigned char *mark = calloc(m->nevs ? m->nevs : 1, 1);
    int nomem = !mark;
    for (size_t i = 0; i < m->nevs && !nomem; i++) {
        const adv_ev *e = &m->evs[i];
        const adv_alloc *a = &m->allocs[e->a];
        if (e->kind != ADV_EV_ALLOC || a->orig >= m->npools || m->pools[a->orig] != m->capture_pool) continue;
        uint64_t key = (uint64_t)m->capture_pool << 32 | a->stream;
        if (!u64map_get(&last, key)) mark[i] |= 1, (*ncap)++;
        nomem = u64map_put(&last, key, i) != 0;
    }
    for (uint64_t k = 0; !nomem && k <= last.mask && last.keys; k++)
        if (last.keys[k] != U64MAP_EMPTY) mark[last.vals[k]] |= 2;
    u64map_free(&last);
    if (nomem) {
        free(mark);
        *ncap = 0;
        return -1;
    }
    *out = mark;
    return 0;
}

alloc_trace_event_t *adv_to_trace(const adv_model *m, size_t *n)
{
    unsigned char *mark;
    size_t ncap;
    if (capture_marks(m, &mark, &ncap) != 0) return NULL;
    size_t total = m->nevs + landings(m) + 2 * ncap;
    trace_out o = {.m = m, .t = big_malloc((total ? total : 1) * sizeof *o.t), .mark = mark};
    if (!o.t || trace_walk(m, emit_trace, &o) != 0) {
        free(o.t);
        free(mark);
        return NULL;
    }
    free(mark);
    *n = o.n;
    return o.t;
}

int adv_fc_merge(adv_model *m)
{
    size_t nfc = landings(m);
    if (!nfc) return 0;
    trace_out o = {.m = m, .evs = malloc((m->nevs + nfc) * sizeof *o.evs)};
    if (!o.evs) return -1;
    if (trace_walk(m, emit_ev, &o) != 0) {
        free(o.evs);
        return -1;
    }
    if (!(m->borrows & ADV_BORROWS_EVS)) free(m->evs);
    m->borrows &= ~(unsigned)ADV_BORROWS_EVS;
    m->evs = o.evs, m->nevs = o.n;
    return 0;
}

/* adv_replay's trace, made a piece at a time and fed to the replay as it is made: a candidate's
 * replay holds a piece of its trace, not all of it (32 bytes an event: on 10 M events the trace
 * was a third of advise's peak memory). A first pass (emit_fc) finds the `fc` events' places in
 * the whole trace, which the replay needs ahead of the frees they hold (alloc_replay_begin). */
enum { FEED_PIECE = 4096 };
typedef struct trace_feed {
    const adv_model *m;
    const unsigned char *mark; /* adv_to_trace's capture bounds, by model event */
    uint64_t at;               /* the trace's events so far */
    alloc_trace_fc_t *fc;      /* emit_fc: the `fc` events found, (id, index) */
    size_t nfc;
    alloc_replay_run_t *run; /* emit_feed: the replay fed */
    alloc_trace_event_t *piece;
    size_t n;
} trace_feed;

static void emit_fc(void *ctx, const adv_ev *e, size_t i)
{
    trace_feed *f = ctx;
    alloc_trace_event_t x;
    trace_event(f->m, e, &x);
    unsigned mk = trace_mark(f->mark, i);
    f->at += (mk & 1) != 0;
    if (x.kind == ALLOC_TR_FREE_DONE) f->fc[f->nfc++] = (alloc_trace_fc_t){x.id, f->at};
    f->at += 1 + ((mk & 2) != 0);
}

static void emit_feed(void *ctx, const adv_ev *e, size_t i)
{
    trace_feed *f = ctx;
    if (f->n + 3 > FEED_PIECE) {
        alloc_replay_feed(f->run, f->piece, f->n); /* a stopped replay takes no more: the walk goes on */
        f->n = 0;
    }
    alloc_trace_event_t x;
    trace_event(f->m, e, &x);
    unsigned mk = trace_mark(f->mark, i);
    if (mk & 1) f->piece[f->n++] = (alloc_trace_event_t){.kind = ALLOC_TR_CAPTURE_BEGIN, .stream = x.stream};
    f->piece[f->n++] = x;
    if (mk & 2) f->piece[f->n++] = (alloc_trace_event_t){.kind = ALLOC_TR_CAPTURE_END, .stream = x.stream};
}

/* The model's `fc` events: its own (ADV_EV_FREE_DONE, frag's and tune's models) and its frees'
 * landings */
static size_t fc_events(const adv_model *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->nevs; i++)
        n += has_landing(&m->evs[i]) || m->evs[i].kind == ADV_EV_FREE_DONE;
    return n;
}

/* the replay's options: capacity 80 GiB (the replay engine's default) or twice the recorded
 * peak: a prediction must never meet an OOM, and the allocator's per-range bookkeeping grows
 * with it */
static alloc_replay_opts_t replay_opts(const adv_model *m)
{
    size_t cap = (size_t)80 << 30;
    if (2 * m->rec_peak_reserved > cap) cap = (size_t)(2 * m->rec_peak_reserved);
    /* the recorded configuration, every free settled at each release: the recorded markers
     * and syncs (ADV_EV_MARKER but the forgotten streams, ADV_MK_FORGET, which every replay
     * takes) are not taken (nor loaded: ADV_LOAD_MARKERS). They say when the recorded program's frees
     * landed; a rewrite's frees land elsewhere (taken there, the predictions of e2e_advise.sh's
     * trainer rewrites were off by up to 20% of their re-runs' reserved), and the baseline is
     * predicted the way the rewrites are, since advice compares them (advise_any.sh: an OOM
     * recording, cut and so rewritten, advises what the whole run does). tune and frag, which
     * compare configurations, take them for the recorded one (ADVISE.md). */
    return (alloc_replay_opts_t){.capacity = cap, .top_down = m->top_down, .markers = false};
}

/* debugging (GPUMEM_ADVISE_DUMP): the whole trace made, written, and replayed; a %d in the path
 * numbers each replay (0 the first) */
static int replay_dumped(const adv_model *m, const char *dump, alloc_replay_result_t *out, char *err, size_t errsz)
{
    size_t n;
    alloc_trace_event_t *t = adv_to_trace(m, &n);
    if (!t) {
        snprintf(err, errsz, "out of memory for a %zu-event trace", m->nevs);
        return -1;
    }
    static _Atomic unsigned nth;
    unsigned k = atomic_fetch_add(&nth, 1);
    const char *pct = strstr(dump, "%d");
    char path[4096];
    if (pct)
        snprintf(path, sizeof path, "%.*s%u%s", (int)(pct - dump), dump, k, pct + 2);
    else
        snprintf(path, sizeof path, "%s", dump);
    alloc_trace_write(path, t, n);
    alloc_replay_opts_t o = replay_opts(m);
    int rc = alloc_replay(&m->cfg, &o, t, n, out, err, errsz);
    free(t);
    return rc == ALLOC_OK ? 0 : -1;
}

int adv_replay(const adv_model *m, alloc_replay_result_t *out, char *err, size_t errsz)
{
    const char *dump = getenv("GPUMEM_ADVISE_DUMP");
    if (dump && *dump) return replay_dumped(m, dump, out, err, errsz);
    unsigned char *mark;
    size_t ncap;
    if (capture_marks(m, &mark, &ncap) != 0) {
        snprintf(err, errsz, "out of memory for a %zu-event trace", m->nevs);
        return -1;
    }
    size_t nfc = fc_events(m);
    trace_feed f = {.m = m, .mark = mark, .fc = nfc ? malloc(nfc * sizeof *f.fc) : NULL,
                    .piece = malloc(FEED_PIECE * sizeof *f.piece)};
    int rc = -1;
    if ((nfc && !f.fc) || !f.piece || trace_walk(m, emit_fc, &f) != 0) {
        snprintf(err, errsz, "out of memory for a %zu-event trace", m->nevs);
        goto out;
    }
    alloc_replay_opts_t o = replay_opts(m);
    if (alloc_replay_begin(&m->cfg, &o, f.fc, f.nfc, &f.run, err, errsz) != ALLOC_OK) goto out;
    free(f.fc), f.fc = NULL;
    int walked = trace_walk(m, emit_feed, &f);
    if (!walked && f.n) alloc_replay_feed(f.run, f.piece, f.n);
    rc = alloc_replay_end(f.run, out, err, errsz) == ALLOC_OK ? 0 : -1;
    if (walked) {
        snprintf(err, errsz, "out of memory for a %zu-event trace", m->nevs);
        rc = -1;
    }
out:
    free(f.fc), free(f.piece), free(mark);
    return rc;
}

/* ------------------------------------------------------------------ rewriting */

int adv_rw_init(adv_rw *w, const adv_model *m)
{
    memset(w, 0, sizeof *w);
    w->drop = calloc(m->nevs ? m->nevs : 1, 1);
    return w->drop ? 0 : -1;
}
void adv_rw_free(adv_rw *w)
{
    free(w->v), free(w->drop);
}

void adv_rw_add(adv_rw *w, size_t anchor, int where, uint32_t prio, adv_ev ev)
{
    if (gm_grow((void **)&w->v, &w->cap, w->n + 1, sizeof *w->v)) {
        w->nomem = 1;
        return;
    }
    w->v[w->n++] = (adv_ins){anchor, where, prio, w->ord++, ev};
}

static int cmp_ins(const void *a, const void *b)
{
    const adv_ins *x = a, *y = b;
    if (x->anchor != y->anchor) return x->anchor < y->anchor ? -1 : 1;
    if (x->where != y->where) return x->where < y->where ? -1 : 1;
    if (x->prio != y->prio) return x->prio < y->prio ? -1 : 1;
    return x->ord < y->ord ? -1 : x->ord > y->ord;
}

/* The rewritten events in place of m's (a view's borrowed ones are only let go). */
static void set_evs(adv_model *m, adv_ev *evs, size_t n)
{
    if (!(m->borrows & ADV_BORROWS_EVS)) free(m->evs);
    m->evs = evs, m->nevs = n;
    m->borrows &= ~(unsigned)ADV_BORROWS_EVS;
}

/* Merges the insertions into m->evs, leaving out dropped events. */
int adv_rw_apply(adv_model *m, adv_rw *w)
{
    if (w->nomem) return -1;
    /* nothing inserted, nothing dropped (a technique with nothing to act on): the events stay,
     * not copied into a new array of the same events */
    if (!w->n && (!m->nevs || !memchr(w->drop, 1, m->nevs))) return 0;
    int sorted = 1; /* most rewrites insert in order already */
    for (size_t i = 1; i < w->n && sorted; i++)
        sorted = cmp_ins(&w->v[i - 1], &w->v[i]) <= 0;
    if (!sorted && w->n > 1) gm_sort(w->v, w->n, sizeof *w->v, cmp_ins);
    adv_ev *n = big_malloc((m->nevs + w->n + 1) * sizeof *n);
    if (!n) return -1;
    /* (a view's borrowed events are only read here: the new array is its own) */
    size_t o = 0, k = 0;
    for (size_t i = 0; i < m->nevs; i++) {
        for (; k < w->n && w->v[k].anchor == i && w->v[k].where < 0; k++)
            n[o++] = w->v[k].ev;
        if (!w->drop[i]) n[o++] = m->evs[i];
        for (; k < w->n && w->v[k].anchor == i; k++)
            n[o++] = w->v[k].ev;
    }
    for (; k < w->n; k++)
        n[o++] = w->v[k].ev;
    set_evs(m, n, o);
    return 0;
}

/* birth and death event index of every allocation (SIZE_MAX: none) */
static int life_index(const adv_model *m, size_t **birth, size_t **death)
{
    *birth = big_malloc((m->nallocs + 1) * sizeof **birth);
    *death = big_malloc((m->nallocs + 1) * sizeof **death);
    if (!*birth || !*death) {
        free(*birth), free(*death);
        return -1;
    }
    for (size_t a = 0; a < m->nallocs; a++)
        (*birth)[a] = (*death)[a] = SIZE_MAX;
    for (size_t i = 0; i < m->nevs; i++) {
        if (m->evs[i].kind == ADV_EV_ALLOC)
            (*birth)[m->evs[i].a] = i;
        else
            (*death)[m->evs[i].a] = i;
    }
    return 0;
}

uint32_t adv_sum_first(const adv_model *m, const size_t *birth, size_t i)
{
    const adv_ev *e = &m->evs[i];
    if (e->kind != ADV_EV_ALLOC || e->phase != ADV_PH_BWD) return UINT32_MAX;
    uint32_t s = e->a, x = UINT32_MAX, y = UINT32_MAX;
    /* its parts: the first two of its size born before it and freed right after it */
    for (size_t j = i + 1; j < m->nevs && j <= i + ADV_SUM_FREES_WITHIN && m->evs[j].kind != ADV_EV_ALLOC &&
                           y == UINT32_MAX;
         j++) {
        uint32_t a = m->evs[j].a;
        if (a == s || m->allocs[a].size != m->allocs[s].size || birth[a] >= i) continue;
        if (x == UINT32_MAX) x = a;
        else y = a;
    }
    return y == UINT32_MAX ? UINT32_MAX : birth[x] < birth[y] ? x : y;
}

long adv_sums_in_place(adv_model *m, const uint8_t *in_place, size_t n)
{
    if (!in_place) return 0;
    size_t *birth, *death;
    adv_rw w;
    if (own_allocs(m) != 0 || own_evs(m) != 0 || life_index(m, &birth, &death) != 0) return -1;
    long merged = adv_rw_init(&w, m) == 0 ? 0 : -1;
    for (size_t i = 0; merged >= 0 && i < m->nevs; i++) {
        uint32_t first = adv_sum_first(m, birth, i), s = m->evs[i].a;
        if (first == UINT32_MAX || m->allocs[first].orig >= n || !in_place[m->allocs[first].orig]) continue;
        /* the sum is the first contribution: not made, and that one lives on to the sum's death,
         * named as it */
        w.drop[i] = w.drop[death[first]] = 1;
        if (death[s] != SIZE_MAX) m->evs[death[s]].a = first;
        m->allocs[first].name = m->allocs[s].name, m->allocs[first].cls = m->allocs[s].cls;
        merged++;
    }
    if (merged > 0 && adv_rw_apply(m, &w) != 0) merged = -1;
    adv_rw_free(&w);
    free(birth), free(death);
    return merged;
}

/* ------------------------------------------------------------------ saved activations */

/* A forward/backward pair of child ranges and the saved tensors between them. */
typedef struct lrinst {
    uint64_t lr;
    size_t first, last;
    uint32_t name;
    uint8_t phase;
} lrinst;

typedef struct pairs {
    lrinst *inst;
    size_t ninst;
    u64map idx;     /* lr -> inst index */
    size_t *fwd_of; /* per inst (bwd): the matching fwd inst, SIZE_MAX none */
    size_t *birth, *death;
    size_t *saved;   /* allocations saved across a pair, grouped by bwd inst */
    size_t *saved_b; /* their bwd inst */
    size_t nsaved;
} pairs;

static void pairs_free(pairs *p)
{
    free(p->inst), free(p->fwd_of), free(p->birth), free(p->death), free(p->saved),
        free(p->saved_b);
    u64map_free(&p->idx);
}

static int pairs_build(const adv_model *m, pairs *p)
{
    memset(p, 0, sizeof *p);
    size_t cap = 0;
    for (size_t i = 0; i < m->nevs; i++) {
        const adv_ev *e = &m->evs[i];
        if (!e->lr || (e->phase != ADV_PH_FWD && e->phase != ADV_PH_BWD)) continue;
        uint64_t *k = u64map_get(&p->idx, e->lr);
        if (k) {
            p->inst[*k].last = i;
            continue;
        }
        if (gm_grow((void **)&p->inst, &cap, p->ninst + 1, sizeof *p->inst)) return -1;
        p->inst[p->ninst] = (lrinst){e->lr, i, i, e->lr_name, e->phase};
        u64map_put(&p->idx, e->lr, p->ninst++);
    }
    p->fwd_of = malloc((p->ninst + 1) * sizeof *p->fwd_of);
    if (!p->fwd_of) return -1;
    u64map latest = {0};
    size_t npairs = 0;
    for (size_t k = 0; k < p->ninst; k++) {
        p->fwd_of[k] = SIZE_MAX;
        if (p->inst[k].phase == ADV_PH_FWD)
            u64map_put(&latest, p->inst[k].name, k);
        else {
            uint64_t *f = u64map_get(&latest, p->inst[k].name);
            if (f && p->inst[*f].last < p->inst[k].first) p->fwd_of[k] = *f, npairs++;
        }
    }
    u64map_free(&latest);
    if (!npairs) return 0; /* no backward range has its forward one: nothing is saved across */
    if (life_index(m, &p->birth, &p->death)) return -1;
    /* saved: born in forward (by the end of F), dead in B */
    size_t *cnt = calloc(p->ninst + 1, sizeof *cnt);
    p->saved = malloc((m->nallocs + 1) * sizeof *p->saved);
    p->saved_b = malloc((m->nallocs + 1) * sizeof *p->saved_b);
    if (!cnt || !p->saved || !p->saved_b) {
        free(cnt);
        return -1;
    }
    size_t *tmp_b = malloc((m->nallocs + 1) * sizeof *tmp_b);
    if (!tmp_b) {
        free(cnt);
        return -1;
    }
    for (size_t a = 0; a < m->nallocs; a++) {
        tmp_b[a] = SIZE_MAX;
        size_t b = p->birth[a], d = p->death[a];
        if (b == SIZE_MAX || d == SIZE_MAX || m->evs[b].phase != ADV_PH_FWD ||
            m->evs[d].phase != ADV_PH_BWD || !m->evs[d].lr)
            continue;
        uint64_t *bi = u64map_get(&p->idx, m->evs[d].lr);
        if (!bi || p->fwd_of[*bi] == SIZE_MAX) continue;
        const lrinst *f = &p->inst[p->fwd_of[*bi]];
        if (b > f->last || m->evs[b].step != m->evs[f->first].step) continue;
        tmp_b[a] = *bi;
        cnt[*bi]++;
    }
    /* group by bwd instance (counting sort), birth order inside */
    size_t acc = 0;
    for (size_t k = 0; k < p->ninst; k++) {
        size_t c = cnt[k];
        cnt[k] = acc;
        acc += c;
    }
    p->nsaved = acc;
    for (size_t a = 0; a < m->nallocs; a++)
        if (tmp_b[a] != SIZE_MAX) {
            p->saved[cnt[tmp_b[a]]] = a;
            p->saved_b[cnt[tmp_b[a]]++] = tmp_b[a];
        }
    free(tmp_b);
    free(cnt);
    return 0;
}

uint32_t *adv_saved_classes(const adv_model *m, size_t *n)
{
    *n = 0;
    pairs p;
    if (pairs_build(m, &p) != 0) {
        pairs_free(&p);
        return NULL;
    }
    u64map bytes = {0};
    uint32_t *out = NULL;
    size_t cap = 0;
    uint64_t *sum = NULL;
    size_t scap = 0;
    for (size_t i = 0; i < p.nsaved; i++) {
        size_t a = p.saved[i];
        const lrinst *f = &p.inst[p.fwd_of[p.saved_b[i]]];
        if (m->evs[p.birth[a]].lr != f->lr) continue; /* a layer input: produced elsewhere */
        uint32_t c = m->allocs[a].cls;
        uint64_t *k = u64map_get(&bytes, c);
        if (!k) {
            if (gm_grow((void **)&out, &cap, *n + 1, sizeof *out) ||
                gm_grow((void **)&sum, &scap, *n + 1, sizeof *sum))
                break;
            out[*n] = c, sum[*n] = 0;
            u64map_put(&bytes, c, *n);
            k = u64map_get(&bytes, c);
            (*n)++;
        }
        sum[*k] += m->allocs[a].size;
    }
    /* most bytes first (selection sort: a few dozen classes) */
    for (size_t i = 0; i < *n; i++)
        for (size_t j = i + 1; j < *n; j++)
            if (sum[j] > sum[i]) {
                uint64_t t = sum[i];
                sum[i] = sum[j], sum[j] = t;
                uint32_t c = out[i];
                out[i] = out[j], out[j] = c;
            }
    free(sum);
    u64map_free(&bytes);
    pairs_free(&p);
    return out;
}

/* the first op issued at or after t; its index or SIZE_MAX */
static size_t op_after(const adv_model *m, uint64_t t)
{
    size_t lo = 0, hi = m->nops;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->ops[mid].t < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->nops ? lo : SIZE_MAX;
}

static int in_set(const uint32_t *v, size_t n, uint32_t x)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == x) return 1;
    return 0;
}

int adv_top_reads(const adv_model *m, const adv_top *t, uint32_t a)
{
    for (uint32_t k = 0; k < t->nargs; k++) {
        const adv_targ *g = &m->targs[t->arg0 + k];
        if (!g->out && g->a == a) return 1;
    }
    return 0;
}

size_t *adv_op_makers(const adv_model *m)
{
    size_t nrec = m->nrecorded ? m->nrecorded : m->nallocs;
    size_t *by = malloc((nrec + 1) * sizeof *by);
    if (!by) return NULL;
    for (size_t a = 0; a < nrec; a++)
        by[a] = SIZE_MAX;
    for (size_t i = 0; i < m->ntops; i++)
        for (uint32_t k = 0; !m->tops[i].bwd && k < m->tops[i].nargs; k++) {
            const adv_targ *g = &m->targs[m->tops[i].arg0 + k];
            if (g->out && g->a < nrec && by[g->a] == SIZE_MAX && !adv_top_reads(m, &m->tops[i], g->a)) by[g->a] = i;
        }
    return by;
}

/* PyTorch's checkpointing (torch.utils.checkpoint, use_reentrant=False) saves nothing in the
 * forward: a tensor the recording kept for the backward then dies as soon as the forward holds no
 * reference to it, when the last forward op that wrote or read it has returned (an output only
 * saved, a LayerNorm's mean and rstd, right after the op that made it). From the op log: per
 * recorded allocation a, lt[a], the last allocation made before the last forward op that touched
 * it returned, and lt[nrecorded + a], the same for the op that made it (adv_op_makers; UINT32_MAX
 * none); NULL without an op log or out of memory. */
static uint32_t *last_fwd_touch(const adv_model *m)
{
    if (!m->torch || (!m->ntops && !m->tholds) || !m->nrecorded) return NULL;
    size_t n = m->nrecorded;
    uint32_t *lt = malloc(2 * n * sizeof *lt);
    size_t *maker = adv_op_makers(m);
    if (!lt || !maker) {
        free(lt), free(maker);
        return NULL;
    }
    for (size_t a = 0; a < n; a++)
        lt[a] = UINT32_MAX, lt[n + a] = maker[a] != SIZE_MAX ? m->tops[maker[a]].last_a : UINT32_MAX;
    free(maker);
    for (size_t i = 0; i < m->ntops; i++) {
        const adv_top *t = &m->tops[i];
        if (t->bwd || t->last_a == UINT32_MAX) continue;
        for (uint32_t k = t->arg0; k < t->arg0 + t->nargs; k++) {
            uint32_t a = m->targs[k].a;
            if (a < n && (lt[a] == UINT32_MAX || t->last_a > lt[a])) lt[a] = t->last_a;
        }
    }
    /* ... or, when a module's frame held it, that module's return (without the op log, the
     * module call it was passed to: passed_to_module) */
    for (size_t a = 0; m->tholds && a < m->nrecorded; a++)
        if (m->tholds[a] != UINT32_MAX && (lt[a] != UINT32_MAX || !m->ntops) &&
            (lt[a] == UINT32_MAX || m->tholds[a] > lt[a]))
            lt[a] = m->tholds[a];
    return lt;
}

/* Where torch.autocast's cache lets go of allocation a, stashed from F: before the first event
 * after the forward that holds F (the root module's forward has returned and the autocast region
 * around it exits), when a is a parameter's bf16 copy the cache made (gm_advise_autocast.c: an
 * allocation of the rewrite, born in a forward, standing for a recorded one born outside it);
 * SIZE_MAX otherwise, or when the step has no such event. *fwd_end caches that event per F
 * (SIZE_MAX: not found yet). */
static size_t cache_release(const adv_model *m, const pairs *p, size_t a, const lrinst *F, size_t *fwd_end)
{
    uint32_t o = m->allocs[a].orig;
    if (a < m->nrecorded || o >= m->nrecorded || p->birth[a] == SIZE_MAX || p->birth[o] == SIZE_MAX ||
        m->evs[p->birth[a]].phase != ADV_PH_FWD || m->evs[p->birth[o]].phase == ADV_PH_FWD)
        return SIZE_MAX;
    if (*fwd_end == SIZE_MAX) {
        *fwd_end = m->nevs;
        for (size_t j = F->last + 1; j < m->nevs && m->evs[j].step == m->evs[F->last].step; j++)
            if (m->evs[j].phase != ADV_PH_FWD) {
                *fwd_end = j;
                break;
            }
    }
    return *fwd_end < m->nevs ? *fwd_end : SIZE_MAX;
}

/* Where the forward holds no reference to saved tensor a of F any more (the op log's last touch,
 * last_fwd_touch): the event after which it dies, inside F; SIZE_MAX unknown, or not before F's
 * end. An accumulation copy's is its recorded tensor's, at the copy in F of that op's last
 * allocation. A cast copy autocast made of a recorded tensor (of another size) for an op, born
 * before the op's outputs (gm_advise_autocast.c), is the op's own: it goes when the op has
 * returned, the op that made the next allocation that is not such a copy. */
static size_t let_go(const adv_model *m, const pairs *p, const uint32_t *touch, size_t a, const lrinst *F)
{
    uint32_t orig = m->allocs[a].orig;
    uint32_t l = UINT32_MAX;
    if (touch && orig < m->nrecorded && m->allocs[a].size == m->allocs[orig].size) l = touch[orig];
    for (size_t i = p->birth[a] + 1; touch && orig < m->nrecorded && l == UINT32_MAX && i <= F->last; i++) {
        const adv_ev *e = &m->evs[i];
        uint32_t o = e->kind == ADV_EV_ALLOC ? m->allocs[e->a].orig : UINT32_MAX;
        if (o < m->nrecorded && m->allocs[e->a].size == m->allocs[o].size) {
            l = touch[m->nrecorded + o];
            if (l == UINT32_MAX) break;
        }
    }
    size_t at = SIZE_MAX;
    if (l != UINT32_MAX) {
        if (orig == a) at = p->birth[l];
        for (size_t i = F->first; orig != a && i <= F->last && at == SIZE_MAX; i++)
            if (m->evs[i].kind == ADV_EV_ALLOC && m->allocs[m->evs[i].a].orig == l) at = i;
    }
    return at != SIZE_MAX && at >= p->birth[a] && at >= F->first && at < F->last ? at : SIZE_MAX;
}

size_t *adv_node_starts(const adv_model *m, size_t *n)
{
    size_t nrec = m->nrecorded ? m->nrecorded : m->nallocs;
    uint8_t *last = calloc(m->nallocs + 1, 1);
    size_t *v = last ? malloc((m->nevs + 1) * sizeof *v) : NULL;
    *n = 0;
    for (size_t i = 0; v && i < m->ntops; i++)
        if (m->tops[i].bwd && m->tops[i].last_a < nrec) last[m->tops[i].last_a] = 1;
    for (size_t i = 0; v && i < m->nevs; i++) {
        const adv_ev *e = &m->evs[i];
        if (e->kind == ADV_EV_ALLOC && m->allocs[e->a].orig < nrec && last[m->allocs[e->a].orig]) v[(*n)++] = i;
    }
    free(last);
    return v;
}

/* Where save_on_cpu brings saved tensor a back: its node unpacks what it saved when it starts,
 * the weights before the activations (autograd's order for a matmul's node: mat2, then self).
 * The node that frees a is the last to start before its free: before that node's first
 * allocation that is not a parameter's (adv_pack_saved's unpack of the weight); SIZE_MAX where
 * the op log places no node before the free. */
static size_t unpack_at(const adv_model *m, const pairs *p, const size_t *starts, size_t n, size_t a)
{
    size_t d = p->death[a], lo = 0, hi = n;
    if (d == SIZE_MAX) return SIZE_MAX;
    while (d > 0 && m->evs[--d].kind != ADV_EV_ALLOC) /* the node's last allocation: the next one's start */
        ;
    while (lo < hi) { /* the last start before it */
        size_t mid = (lo + hi) / 2;
        if (starts[mid] < d) lo = mid + 1;
        else hi = mid;
    }
    if (!lo) return SIZE_MAX;
    for (size_t j = starts[lo - 1] + 1; j <= d; j++) {
        const adv_ev *e = &m->evs[j];
        if (e->kind != ADV_EV_ALLOC) continue;
        uint32_t o = m->allocs[e->a].orig;
        size_t ob = o < m->nallocs ? p->birth[o] : SIZE_MAX;
        if (ob != SIZE_MAX && m->evs[ob].step < 0) continue; /* a parameter's */
        return j;
    }
    return SIZE_MAX;
}

/* The event of the allocation standing for recorded allocation x (itself, or its copy: an
 * accumulation's) between events lo and hi, the last one; SIZE_MAX none */
static size_t orig_between(const adv_model *m, uint32_t x, size_t lo, size_t hi)
{
    for (size_t j = hi; x != UINT32_MAX && j-- > lo && j < m->nevs;)
        if (m->evs[j].kind == ADV_EV_ALLOC && m->allocs[m->evs[j].a].orig == x) return j;
    return SIZE_MAX;
}

/* Without the op log: where the node that frees saved tensor a of backward instance B starts
 * (hooks_nodes: its module range's first allocation); SIZE_MAX unknown */
static size_t hooks_node_at(const adv_model *m, const pairs *p, const lrinst *B, size_t a)
{
    uint32_t o = m->allocs[a].orig;
    if (!m->hnode || o >= m->nrecorded || p->death[a] == SIZE_MAX) return SIZE_MAX;
    return orig_between(m, m->hnode[o].freed_in, B->first, p->death[a]);
}

/* Without the op log: the Linear that saved tensor a as its input while the node that frees a is
 * a later one (hooks_nodes: the ReLU's output, the next Linear's input too), whose node unpacks
 * it for itself: its first allocation's event (*b0) and its last (*b1); 0 none */
static int hooks_saved_again(const adv_model *m, const pairs *p, size_t a, size_t *b0, size_t *b1)
{
    uint32_t o = m->allocs[a].orig;
    if (!m->hnode || o >= m->nrecorded || p->death[a] == SIZE_MAX) return 0;
    const adv_hnode *h = &m->hnode[o];
    /* nn.Linear's forward (F.linear) made the call's first allocation, its output */
    if (h->fed == UINT32_MAX || !strstr(adv_str(m, m->allocs[h->fed].cls), "(linear.py:")) return 0;
    *b1 = orig_between(m, h->fed_b1, p->birth[a], p->death[a]);
    *b0 = *b1 == SIZE_MAX ? SIZE_MAX : orig_between(m, h->fed_b0, p->birth[a], *b1 + 1);
    if (*b0 == SIZE_MAX || m->evs[*b0].phase != ADV_PH_BWD) return 0;
    /* a later node frees it: an allocation after the Linear's node and before the free */
    for (size_t j = *b1 + 1; j < p->death[a]; j++)
        if (m->evs[j].kind == ADV_EV_ALLOC) return 1;
    return 0;
}

int adv_stash(adv_model *m, const adv_stash_opts *o, double link_bps, adv_stash_stats *st)
{
    memset(st, 0, sizeof *st);
    st->window_ns_min = UINT64_MAX;
    pairs p;
    adv_rw w = {0};
    if (pairs_build(m, &p) != 0) {
        pairs_free(&p);
        return -1;
    }
    if (!p.nsaved) { /* no saved activations: nothing to stash */
        pairs_free(&p);
        st->window_ns_min = 0;
        return 0;
    }
    if (adv_rw_init(&w, m) != 0) {
        pairs_free(&p);
        return -1;
    }
    u64map slot = {0}; /* lr_name -> largest offload of one stash of it (pinned host buffers) */
    /* per step: bytes out during forward, in during backward, and the phases' spans */
    size_t ns = m->nsteps + 1;
    uint64_t *out_b = calloc(ns, sizeof *out_b), *in_b = calloc(ns, sizeof *in_b);
    uint64_t *f0 = calloc(ns, sizeof *f0), *f1 = calloc(ns, sizeof *f1),
             *b0 = calloc(ns, sizeof *b0), *b1 = calloc(ns, sizeof *b1);
    int rc = -1;
    if (!out_b || !in_b || !f0 || !f1 || !b0 || !b1) goto done;
    for (size_t i = 0; i < m->nevs; i++) {
        const adv_ev *e = &m->evs[i];
        size_t s = e->step >= 0 ? (size_t)e->step : m->nsteps;
        uint64_t *lo = e->phase == ADV_PH_FWD ? f0 : e->phase == ADV_PH_BWD ? b0 : NULL;
        uint64_t *hi = e->phase == ADV_PH_FWD ? f1 : b1;
        if (!lo) continue;
        if (!lo[s] || e->t < lo[s]) lo[s] = e->t;
        if (e->t > hi[s]) hi[s] = e->t;
    }
    size_t i0 = 0;
    size_t *set = malloc((p.nsaved + 1) * sizeof *set),
           *tmps = malloc((m->nallocs + 1) * sizeof *tmps);
    uint32_t *holder = malloc((m->nallocs + 1) * sizeof *holder);
    uint8_t *isd = calloc(m->nallocs + 1, 1), *big = calloc(m->nallocs + 1, 1);
    uint8_t *opseen = calloc(m->nops + 1, 1);
    uint32_t *touch = last_fwd_touch(m); /* NULL: every dropped tensor dies at its F's end */
    size_t nnode = 0, *node_at = touch ? adv_node_starts(m, &nnode) : NULL; /* backward nodes' starts */
    uint8_t *is_sum = o->sum_of ? calloc(o->nsum_of + 1, 1) : NULL; /* a bias gradient's sum */
    for (size_t x = 0; is_sum && x < o->nsum_of; x++)
        if (o->sum_of[x] < o->nsum_of) is_sum[o->sum_of[x]] = 1;
    if (!set || !tmps || !holder || !isd || !big || !opseen) goto done2;
    for (size_t a = 0; a < m->nallocs; a++)
        holder[a] = (uint32_t)a;
    /* saved tensors' deaths are renamed in place below (a view's events are copied first) */
    if (own_evs(m) != 0) goto done2;
    while (i0 < p.nsaved) {
        size_t bi = p.saved_b[i0], i1 = i0;
        while (i1 < p.nsaved && p.saved_b[i1] == bi)
            i1++;
        const lrinst *B = &p.inst[bi], *F = &p.inst[p.fwd_of[bi]];
        const adv_ev *fa = &m->evs[F->last], *ba = &m->evs[B->first];
        /* the stash set: born in F first, then the layer inputs, each by birth */
        size_t n = 0, nd = 0;
        uint64_t maxsz = 0;
        for (size_t k = i0; k < i1; k++)
            if (m->allocs[p.saved[k]].size > maxsz) maxsz = m->allocs[p.saved[k]].size;
        for (int pass = 0; pass < 2; pass++)
            for (size_t k = i0; k < i1; k++) {
                size_t a = p.saved[k];
                int inF = m->evs[p.birth[a]].lr == F->lr;
                if (inF != (pass == 0)) continue;
                isd[a] = inF && ((o->recompute_layer && (!o->recompute_blocks || adv_is_block_name(adv_str(m, F->name)))) ||
                                 in_set(o->recompute_cls, o->nrecompute, m->allocs[a].cls));
                big[a] = m->allocs[a].size * 16 >= maxsz;
                if (isd[a]) nd++;
                set[n++] = a;
            }
        /* temporaries re-run with the dropped tensors */
        size_t nt = 0;
        if (nd) {
            for (size_t i = F->first; i <= F->last; i++) {
                const adv_ev *e = &m->evs[i];
                if (e->kind != ADV_EV_ALLOC) continue;
                size_t t = e->a, dt = p.death[t];
                if (dt == SIZE_MAX || dt > F->last) continue;
                size_t bt = i;
                int take = 0, since_d = 0;
                /* alive when a dropped tensor is born? */
                for (size_t j = bt + 1; j < dt && !take; j++) {
                    const adv_ev *x = &m->evs[j];
                    take = x->kind == ADV_EV_ALLOC && isd[x->a] && p.death[x->a] > F->last;
                }
                /* or born after a dropped tensor (no kept one since) and freed before the next
                 * kept tensor is born? */
                for (size_t j = F->first; j < bt && !take; j++) {
                    const adv_ev *x = &m->evs[j];
                    if (x->kind != ADV_EV_ALLOC) continue;
                    if (isd[x->a] && p.death[x->a] > F->last)
                        since_d = 1;
                    else if (p.death[x->a] == SIZE_MAX || p.death[x->a] > F->last)
                        since_d = 0;
                }
                if (!take && since_d) {
                    size_t next_kept = SIZE_MAX;
                    for (size_t j = bt + 1; j <= F->last && next_kept == SIZE_MAX; j++) {
                        const adv_ev *x = &m->evs[j];
                        if (x->kind == ADV_EV_ALLOC && !isd[x->a] &&
                            (p.death[x->a] == SIZE_MAX || p.death[x->a] > F->last))
                            next_kept = j;
                    }
                    take = dt < next_kept;
                }
                if (take) tmps[nt++] = t;
            }
        }
        /* stash: drop, convert, offload. A dropped tensor of a PyTorch recording with an op
         * log dies before the first allocation after the last forward op that touched it
         * (last_fwd_touch), when that is inside F; otherwise at F's end. A parameter's bf16 copy
         * (torch.autocast's cache, gm_advise_autocast.c) is held by the cache until the autocast
         * region exits with the forward: it dies before the first event after the forward */
        size_t fwd_end = SIZE_MAX; /* that event, found once per F */
        for (size_t k = 0; k < n; k++) {
            size_t a = set[k];
            if (!isd[a]) continue;
            const adv_ev *de = &m->evs[p.death[a]];
            uint32_t fs = de->kind == ADV_EV_FREE_ASYNC ? de->stream : m->allocs[a].stream;
            size_t at = let_go(m, &p, touch, a, F);
            size_t x = touch ? cache_release(m, &p, a, F, &fwd_end) : SIZE_MAX;
            if (x != SIZE_MAX)
                adv_rw_add(&w, x, -1, 1, adv_ev_like(&m->evs[x], (uint32_t)a, ADV_EV_FREE_ASYNC, fs));
            else if (at != SIZE_MAX)
                adv_rw_add(&w, at, +1, 1, adv_ev_like(&m->evs[at], (uint32_t)a, ADV_EV_FREE_ASYNC, fs));
            else
                adv_rw_add(&w, F->last, +1, 1, adv_ev_like(fa, (uint32_t)a, ADV_EV_FREE_ASYNC, fs));
        }
        if (o->bf16)
            for (size_t k = 0; k < n; k++) {
                size_t a = set[k];
                if (isd[a] || !big[a]) continue;
                const adv_alloc x = m->allocs[a];
                uint32_t h = new_alloc(m, (x.size + 1) / 2, x.stream, x.cls, x.name, x.orig);
                if (h == UINT32_MAX) goto done2;
                adv_rw_add(&w, F->last, +1, 2, adv_ev_like(fa, h, ADV_EV_ALLOC, 0));
                adv_rw_add(&w, F->last, +1, 2, adv_ev_like(fa, (uint32_t)a, ADV_EV_FREE_ASYNC, x.stream));
                holder[a] = h;
                st->convert_bytes += 2 * x.size;
            }
        uint64_t slot_bytes = 0;
        if (o->offload)
            for (size_t k = 0; k < n; k++) {
                size_t a = set[k];
                if (isd[a]) continue;
                /* packed to the host after F; autocast's cache holds a parameter's bf16 copy on
                 * the device until its region exits; with the op log (save_on_cpu), packed when
                 * saved, the device's copy goes when the program lets go of it (let_go) */
                size_t x = touch ? cache_release(m, &p, a, F, &fwd_end) : SIZE_MAX;
                size_t at = x == SIZE_MAX && holder[a] == a ? let_go(m, &p, touch, a, F) : SIZE_MAX;
                size_t an = x != SIZE_MAX ? x : at != SIZE_MAX ? at : F->last;
                adv_rw_add(&w, an, x != SIZE_MAX ? -1 : +1, 3,
                           adv_ev_like(&m->evs[an], holder[a], ADV_EV_FREE_ASYNC, m->copy_stream));
                uint64_t b = m->allocs[holder[a]].size;
                slot_bytes += b;
                st->offload_bytes += b;
                size_t s = fa->step >= 0 ? (size_t)fa->step : m->nsteps;
                out_b[s] += b;
                s = ba->step >= 0 ? (size_t)ba->step : m->nsteps;
                in_b[s] += b;
                uint64_t win = ba->t > fa->t ? ba->t - fa->t : 0;
                if (m->use_off) {
                    /* the tensor is idle from its last forward use to its first backward use */
                    uint64_t last, first;
                    use_around(m, m->allocs[a].orig, fa->t, ba->t, &last, &first);
                    if (last && first != UINT64_MAX && first > last)
                        win = first - last, st->windows_from_uses = 1;
                }
                if (win < st->window_ns_min) st->window_ns_min = win;
                if (link_bps > 0 && (double)win * 1e-9 < 2.0 * (double)b / link_bps)
                    st->short_windows++;
                st->ntensors++;
            }
        if (slot_bytes) {
            uint64_t *sb = u64map_get(&slot, F->name);
            if (!sb)
                u64map_put(&slot, F->name, slot_bytes);
            else if (slot_bytes > *sb)
                *sb = slot_bytes;
        }
        /* restore: prefetch, convert back, recompute */
        if (o->offload)
            for (size_t k = 0; k < n; k++) {
                size_t a = set[k];
                if (isd[a]) continue;
                uint32_t orig = m->allocs[a].orig;
                if (o->unpacked && orig < o->nunpacked && o->unpacked[orig]) {
                    w.drop[p.death[a]] = 1; /* adv_pack_saved's unpacks bring it back: nothing of it to free */
                    continue;
                }
                const adv_alloc x = m->allocs[holder[a]];
                uint32_t h = new_alloc(m, x.size, o->offload_at_use ? x.stream : m->copy_stream, x.cls, x.name,
                                       x.orig);
                if (h == UINT32_MAX) goto done2;
                /* with the op log, when the node that frees it starts (unpack_at); a recomputed
                 * block's input when its recompute starts (checkpointing saved it: the outer
                 * hooks packed it) */
                size_t at = B->first, un = node_at && !nd ? unpack_at(m, &p, node_at, nnode, a) : SIZE_MAX;
                if (nd) {
                    at = B->first;
                } else if (un != SIZE_MAX && un >= B->first) {
                    at = un;
                } else if (o->offload_at_use && (un = hooks_node_at(m, &p, B, a)) != SIZE_MAX) {
                    /* without the op log, when the module range that frees it starts, in the
                     * stash set's order (what F made, a weight's copy under autocast, then its
                     * input: autograd unpacks a matmul's weight first) */
                    at = un;
                } else if (o->offload_at_use && p.death[a] != SIZE_MAX) {
                    /* the node that frees it: back from the host before the allocation (its
                     * gradient) that precedes the free */
                    at = p.death[a];
                    for (size_t j = p.death[a]; j-- > B->first;)
                        if (m->evs[j].kind == ADV_EV_ALLOC) {
                            at = j;
                            break;
                        }
                }
                adv_rw_add(&w, at, -1, 1, adv_ev_like(&m->evs[at], h, ADV_EV_ALLOC, 0));
                size_t b0, b1;
                if (!nd && o->offload_at_use && hooks_saved_again(m, &p, a, &b0, &b1)) {
                    /* the Linear's node unpacks its own copy, before the restores it starts with */
                    uint32_t u = new_alloc(m, x.size, x.stream, x.cls, x.name, x.orig);
                    if (u == UINT32_MAX) goto done2;
                    adv_rw_add(&w, b0, -1, 0, adv_ev_like(&m->evs[b0], u, ADV_EV_ALLOC, 0));
                    adv_rw_add(&w, b1, +1, 0,
                               adv_ev_like(&m->evs[b1], u, ADV_EV_FREE_ASYNC, x.stream));
                }
                holder[a] = h;
            }
        if (o->bf16)
            for (size_t k = 0; k < n; k++) {
                size_t a = set[k];
                if (isd[a] || !big[a]) continue;
                const adv_alloc x = m->allocs[a];
                uint32_t h = new_alloc(m, x.size, x.stream, x.cls, x.name, x.orig);
                if (h == UINT32_MAX) goto done2;
                adv_rw_add(&w, B->first, -1, 2, adv_ev_like(ba, h, ADV_EV_ALLOC, 0));
                adv_rw_add(&w, B->first, -1, 2, adv_ev_like(ba, holder[a], ADV_EV_FREE_ASYNC, x.stream));
                holder[a] = h;
            }
        if (nd) {
            /* re-run F's events for the dropped tensors and the temporaries, in recorded order */
            for (size_t i = F->first; i <= F->last; i++) {
                const adv_ev *e = &m->evs[i];
                size_t a = e->a;
                int is_tmp = 0;
                for (size_t k = 0; k < nt && !is_tmp; k++)
                    is_tmp = tmps[k] == a;
                if (!(e->kind == ADV_EV_ALLOC && isd[a] && p.death[a] > F->last) && !is_tmp)
                    continue;
                if (e->kind == ADV_EV_ALLOC) {
                    const adv_alloc x = m->allocs[a];
                    uint32_t h = new_alloc(m, x.size, x.stream, x.cls, x.name, x.orig);
                    if (h == UINT32_MAX) goto done2;
                    holder[a] = h;
                    adv_rw_add(&w, B->first, -1, 3, adv_ev_like(ba, h, ADV_EV_ALLOC, 0));
                    st->recompute_bytes += x.size;
                    size_t op = op_after(m, e->t);
                    /* the first steps run on memory touched for the first time, with cold
                     * caches: priced from the steady steps only (adv_steady_step) */
                    if (op != SIZE_MAX && !opseen[op] &&
                        m->ops[op].t >= m->steps[adv_steady_step(m)].start_ns) {
                        opseen[op] = 1;
                        st->recompute_ns += m->ops[op].dur;
                    }
                } else {
                    adv_rw_add(&w, B->first, -1, 3, adv_ev_like(ba, holder[a], e->kind, e->stream));
                }
            }
            /* each F's ops are counted once per F */
            for (size_t i = F->first; i <= F->last; i++) {
                size_t op = op_after(m, m->evs[i].t);
                if (op != SIZE_MAX) opseen[op] = 0;
            }
        }
        /* the recorded deaths now end the last holder: a recomputed tensor, which its node
         * unpacked, before the node's bias sum (adv_bias_sums) */
        for (size_t k = 0; k < n; k++) {
            size_t a = set[k], d = p.death[a], at = SIZE_MAX;
            uint32_t orig = m->allocs[a].orig;
            if (holder[a] == a) continue;
            if (isd[a] && o->sum_of && orig < o->nsum_of && o->sum_of[orig] != UINT32_MAX)
                for (size_t j = d; j-- > 0 && d - j <= 64 && at == SIZE_MAX;)
                    if (m->evs[j].kind == ADV_EV_ALLOC && m->allocs[m->evs[j].a].orig == o->sum_of[orig]) at = j;
            /* (a copy autocast made, a weight's or an input's, dies with the node's release: the
             * sum just before it) */
            for (size_t j = d; isd[a] && is_sum && orig != a && at == SIZE_MAX && j-- > 0 && d - j <= ADV_SUM_FREES_WITHIN;) {
                uint32_t g = m->allocs[m->evs[j].a].orig;
                if (m->evs[j].kind == ADV_EV_ALLOC && g < o->nsum_of && is_sum[g]) at = j;
            }
            if (at != SIZE_MAX) {
                w.drop[d] = 1;
                adv_rw_add(&w, at, -1, 0, adv_ev_like(&m->evs[at], holder[a], m->evs[d].kind, m->evs[d].stream));
            } else {
                m->evs[d].a = holder[a];
            }
            holder[a] = (uint32_t)a;
        }
        for (size_t k = 0; k < nt; k++)
            holder[tmps[k]] = (uint32_t)tmps[k];
        i0 = i1;
    }
    if (w.nomem || adv_rw_apply(m, &w) != 0) goto done2;
    for (size_t i = 0; i < slot.mask + 1 && slot.keys; i++)
        if (slot.keys[i] != U64MAP_EMPTY) st->pinned_bytes += slot.vals[i];
    if (link_bps > 0)
        for (size_t s = 0; s < ns; s++) {
            double out_ns = (double)out_b[s] / link_bps * 1e9,
                   in_ns = (double)in_b[s] / link_bps * 1e9;
            double fspan = f1[s] > f0[s] ? (double)(f1[s] - f0[s]) : 0,
                   bspan = b1[s] > b0[s] ? (double)(b1[s] - b0[s]) : 0;
            if (out_ns > fspan) st->stall_ns += (uint64_t)(out_ns - fspan);
            if (in_ns > bspan) st->stall_ns += (uint64_t)(in_ns - bspan);
        }
    if (st->window_ns_min == UINT64_MAX) st->window_ns_min = 0;
    rc = 0;
done2:
    free(set), free(tmps), free(holder), free(isd), free(big), free(opseen), free(touch), free(is_sum), free(node_at);
done:
    free(out_b), free(in_b), free(f0), free(f1), free(b0), free(b1);
    u64map_free(&slot);
    adv_rw_free(&w);
    pairs_free(&p);
    return rc;
}

/* ------------------------------------------------------------------ bf16 storage undone */

int adv_unbf16(adv_model *m, size_t *chains, size_t *broken)
{
    *chains = *broken = 0;
    size_t *birth, *death;
    if (adv_model_own(m) != 0 || life_index(m, &birth, &death) != 0) return -1;
    size_t na = m->nallocs;
    uint32_t *src = malloc((na + 1) * sizeof *src); /* bf16 copy -> the fp32 tensor it holds */
    uint32_t *rep = malloc((na + 1) * sizeof *rep); /* restored fp32 tensor -> the original */
    size_t *at = malloc((na + 1) * sizeof *at);     /* bf16 copy -> its conversion's event */
    uint8_t *done = calloc(na + 1, 1), *drop = calloc(m->nevs + 1, 1);
    int rc = -1;
    if (!src || !rep || !at || !done || !drop) goto out;
    for (size_t a = 0; a < na; a++)
        src[a] = UINT32_MAX, rep[a] = (uint32_t)a;
    /* a conversion: an allocation named as a live tensor, that tensor freed at once after it */
    for (size_t i = 0; i + 1 < m->nevs; i++) {
        const adv_ev *e = &m->evs[i], *f = &m->evs[i + 1];
        if (e->kind != ADV_EV_ALLOC || (f->kind != ADV_EV_FREE && f->kind != ADV_EV_FREE_ASYNC))
            continue;
        uint32_t x = e->a, y = f->a;
        const adv_alloc *ax = &m->allocs[x], *ay = &m->allocs[y];
        if (x == y || !ax->name || ax->name != ay->name || birth[y] > i) continue;
        if (ay->size == 2 * ax->size && e->phase == ADV_PH_FWD) {
            src[x] = rep[y], at[x] = i; /* to bf16 at the stash point */
        } else if (ax->size == 2 * ay->size && src[y] != UINT32_MAX && !done[y]) {
            /* back to fp32 at the restore point: the fp32 tensor lives on, under x's death */
            drop[at[y]] = drop[at[y] + 1] = drop[i] = drop[i + 1] = 1;
            rep[x] = src[y], done[y] = 1;
            (*chains)++;
        }
    }
    for (size_t a = 0; a < na; a++)
        if (src[a] != UINT32_MAX && !done[a]) (*broken)++;
    rc = 0;
    if (*broken || !*chains) goto out;
    size_t o = 0;
    for (size_t i = 0; i < m->nevs; i++) {
        if (drop[i]) continue;
        adv_ev e = m->evs[i];
        e.a = rep[e.a];
        m->evs[o++] = e;
    }
    m->nevs = o;
out:
    free(src), free(rep), free(at), free(done), free(drop), free(birth), free(death);
    return rc;
}

/* ------------------------------------------------------------------ accumulation */

typedef struct step_end {
    size_t hi, s; /* a step's last forward or backward event, the step */
} step_end;

static int cmp_step_end(const void *a, const void *b)
{
    const step_end *x = a, *y = b;
    return x->hi < y->hi ? -1 : x->hi > y->hi;
}

static int has_grad_names(const adv_model *m);
static int is_grad(const adv_model *m, const size_t *birth, const size_t *death, size_t a, int named);

uint64_t adv_rec_size(const adv_model *m, uint32_t a)
{
    return a < m->nrecorded && m->rec_allocs ? m->rec_allocs[a].size : m->allocs[a].size;
}

int adv_accum(adv_model *m, unsigned k, const uint64_t *size_k)
{
    if (k < 2) return 0;
    size_t *birth, *death;
    if (life_index(m, &birth, &death) != 0) return -1;
    /* PyTorch accumulates a gradient out of place: the first micro-batch's backward makes it (the
     * parameter's .grad), every later one makes a contribution of the parameter's size and adds
     * it in right away (AccumulateGrad: grad += new_grad, the contribution freed). So on a
     * PyTorch recording a backward allocation of a gradient's size is such a contribution (made
     * again at its size in each micro-batch, not shrunk: steps whose gradients already existed),
     * and where a gradient is born, each later micro-batch makes and frees one (gbirth). */
    u64map gsize = {0};
    uint8_t *gbirth = m->torch ? calloc(m->nevs + 1, 1) : NULL;
    size_t ngb = 0;
    if (m->torch) {
        if (!gbirth) {
            free(birth), free(death);
            return -1;
        }
        int named = has_grad_names(m);
        for (size_t a = 0; a < m->nallocs; a++)
            if (is_grad(m, birth, death, a, named)) {
                if (u64map_put(&gsize, m->allocs[a].size, 1) != 0) {
                    free(birth), free(death), free(gbirth), u64map_free(&gsize);
                    return -1;
                }
                gbirth[birth[a]] = 1, ngb++;
            }
    }
    size_t ns = m->nsteps + 1;
    size_t *lo = malloc(ns * sizeof *lo), *hi = malloc(ns * sizeof *hi);
    size_t *copies = malloc(ns * sizeof *copies), *at = malloc(ns * sizeof *at);
    step_end *by_hi = malloc(ns * sizeof *by_hi);
    uint8_t *prop = calloc(m->nallocs + 1, 1); /* 1 batch-proportional, 2 made again at its size */
    uint32_t *map = malloc((m->nallocs + 1) * sizeof *map);
    int rc = -1;
    if (!lo || !hi || !copies || !at || !by_hi || !prop || !map) goto out;
    /* each step's forward and backward: from its first forward or backward event to its update
     * (what the step does between them without a phase of its own, a loss scaled, the logits a
     * script deletes after its backward, is the micro-batch's too) */
    size_t *opt0 = malloc(ns * sizeof *opt0);
    if (!opt0) goto out;
    for (size_t s = 0; s < ns; s++)
        lo[s] = SIZE_MAX, hi[s] = 0, opt0[s] = SIZE_MAX;
    for (size_t i = 0; i < m->nevs; i++) {
        const adv_ev *e = &m->evs[i];
        if (e->step < 0) continue;
        if (e->phase == ADV_PH_OPT && opt0[e->step] == SIZE_MAX) opt0[e->step] = i;
        if (e->phase != ADV_PH_FWD && e->phase != ADV_PH_BWD) continue;
        if (lo[e->step] == SIZE_MAX) lo[e->step] = i;
        hi[e->step] = i;
    }
    size_t n0 = m->nallocs;
    for (size_t a = 0; a < n0; a++) {
        size_t b = birth[a], d = death[a];
        if (b == SIZE_MAX || d == SIZE_MAX) continue;
        const adv_ev *eb = &m->evs[b], *ed = &m->evs[d];
        if (eb->step < 0 || eb->step != ed->step || eb->phase == ADV_PH_OPT || ed->phase == ADV_PH_OPT) continue;
        size_t s = (size_t)eb->step;
        if (b < lo[s] || (eb->phase != ADV_PH_FWD && eb->phase != ADV_PH_BWD && b > hi[s]) || d > opt0[s]) continue;
        /* an allocation autocast's rewrite made for a recorded one o (gm_advise_autocast.c: a
         * parameter's bf16 copy, the gradient of a cast copy) is made again for each micro-batch
         * at its size unless o shrinks with the batch (o, recorded, is decided before it) */
        uint32_t o = m->allocs[a].orig;
        int made = o != a && o < n0 && birth[o] != SIZE_MAX;
        /* a gradient's size as recorded (autocast halves an activation's gradient, which can
         * then match a parameter's: gpt2-medium's 32 MiB ones, halved, c_fc's weight's) */
        uint64_t size = adv_rec_size(m, (uint32_t)a);
        /* no batch in it (adv_batch_fixed gave its own size): made again at its size too */
        int fixed = size_k && size_k[a] == m->allocs[a].size;
        if (made ? m->evs[birth[o]].step < 0 || prop[o] != 1
                 : fixed || (ngb && eb->phase == ADV_PH_BWD && u64map_get(&gsize, size))) {
            prop[a] = 2;
        } else {
            /* (a view's allocations are copied before the first write, once) */
            if (own_allocs(m) != 0) goto out;
            prop[a] = 1;
            m->allocs[a].size = size_k && size_k[a] ? size_k[a] : (m->allocs[a].size + k - 1) / k;
        }
        if (d > hi[s]) hi[s] = d; /* a free after the backward: the copies end with it */
    }
    free(opt0);
    /* the lives are read no more: gone before the new events are made (16 bytes an allocation
     * beside them) */
    free(birth), free(death), birth = death = NULL;
    /* each step's copies go right after its last event hi[s]: its k - 1 copies of the events of
     * [lo[s], hi[s]] that shrank, in that order. Their places in the new array, from the steps in
     * the order of their hi (distinct: hi[s] is an event of step s), before any is made */
    size_t nst = 0, ncopies = 0;
    for (size_t s = 0; s < m->nsteps; s++) {
        size_t c = 0;
        for (size_t i = lo[s]; lo[s] != SIZE_MAX && i <= hi[s]; i++)
            c += (prop[m->evs[i].a] != 0) + (gbirth && gbirth[i] ? 2 : 0);
        copies[s] = c * (k - 1), ncopies += copies[s];
        if (lo[s] != SIZE_MAX) by_hi[nst++] = (step_end){hi[s], s};
    }
    if (!ncopies) { /* nothing in a forward or backward: the events stay */
        rc = 0;
        goto out;
    }
    int sorted = 1;
    for (size_t x = 1; x < nst && sorted; x++)
        sorted = by_hi[x - 1].hi < by_hi[x].hi;
    if (!sorted) gm_sort(by_hi, nst, sizeof *by_hi, cmp_step_end);
    adv_ev *n = big_malloc((m->nevs + ncopies + 1) * sizeof *n);
    if (!n) goto out;
    size_t from = 0, o = 0;
    for (size_t x = 0; x < nst; x++) {
        size_t s = by_hi[x].s;
        memcpy(n + o, m->evs + from, (hi[s] + 1 - from) * sizeof *n);
        o += hi[s] + 1 - from, from = hi[s] + 1;
        at[s] = o, o += copies[s];
    }
    memcpy(n + o, m->evs + from, (m->nevs - from) * sizeof *n);
    /* the copies, made step by step (the new allocations numbered in that order) */
    for (size_t s = 0; s < m->nsteps; s++) {
        if (lo[s] == SIZE_MAX) continue;
        adv_ev *dst = n + at[s];
        for (unsigned j = 1; j < k; j++)
            for (size_t i = lo[s]; i <= hi[s]; i++) {
                adv_ev e = m->evs[i];
                if (gbirth && gbirth[i]) { /* a later micro-batch's contribution to this gradient */
                    const adv_alloc x = m->allocs[e.a];
                    uint32_t h = new_alloc(m, x.size, x.stream, x.cls, 0, x.orig);
                    if (h == UINT32_MAX) {
                        free(n);
                        goto out;
                    }
                    e.a = h;
                    if (e.lr) e.lr |= (uint64_t)j << 40;
                    *dst++ = e;
                    e.kind = ADV_EV_FREE;
                    *dst++ = e;
                    continue;
                }
                if (!prop[e.a]) continue;
                if (e.kind == ADV_EV_ALLOC) {
                    const adv_alloc x = m->allocs[e.a];
                    uint32_t h = new_alloc(m, x.size, x.stream, x.cls, x.name, x.orig);
                    if (h == UINT32_MAX) {
                        free(n);
                        goto out;
                    }
                    map[e.a] = h;
                }
                e.a = map[e.a];
                if (e.lr) e.lr |= (uint64_t)j << 40;
                *dst++ = e;
            }
    }
    set_evs(m, n, m->nevs + ncopies);
    rc = 0;
out:
    free(lo), free(hi), free(prop), free(map), free(birth), free(death);
    free(copies), free(at), free(by_hi), free(gbirth);
    u64map_free(&gsize);
    return rc;
}

/* ------------------------------------------------------------------ gradients and optimizer */

/* The step an event outside every step stands at: the first step that starts after it (freed
 * between two steps is freed before the later one, as if at its start), or nsteps after the
 * last one (teardown). */
static size_t step_after(const adv_model *m, size_t e)
{
    size_t k = 0;
    for (size_t s = 0; s < m->nsteps; s++) k += m->steps[s].start_ns <= m->evs[e].t;
    return k;
}

/* Persistent across steps: never freed, freed after every step (teardown), or alive through
 * the whole next step. (A tensor handed from one step's end to the next one's start is not; nor
 * one freed between the steps, a zero_grad(set_to_none=True) after optimizer.step(), outside
 * the hooks' "step N" ranges.) */
static int persists(const adv_model *m, size_t b, size_t d)
{
    if (d == SIZE_MAX) return 1;
    size_t at = m->evs[d].step >= 0 ? (size_t)m->evs[d].step : step_after(m, d);
    return at >= m->nsteps || at >= (size_t)m->evs[b].step + 2;
}
/* Gradients and optimizer state are created in the first step (or the second, when the first
 * is a warm-up); something born later and kept is a leak or a cache, not a technique's target. */
static int early_step(const adv_model *m, size_t b)
{
    return m->evs[b].step >= 0 && m->evs[b].step <= 1;
}
/* Whether any allocation of the model is named "grad.<p>" (the trainer's names, PyTorch's
 * hooks'): then those are the gradients, and a library's buffer made in the first backward and
 * kept (cuBLAS's workspace) is not one. */
static int has_grad_names(const adv_model *m)
{
    for (size_t a = 0; a < m->nallocs; a++)
        if (m->allocs[a].name && !strncmp(adv_str(m, m->allocs[a].name), "grad.", 5)) return 1;
    return 0;
}
/* named: has_grad_names(m) */
static int is_grad(const adv_model *m, const size_t *birth, const size_t *death, size_t a, int named)
{
    size_t b = birth[a];
    if (b == SIZE_MAX || m->evs[b].phase != ADV_PH_BWD || !early_step(m, b)) return 0;
    if (named && strncmp(adv_str(m, m->allocs[a].name), "grad.", 5)) return 0;
    return persists(m, b, death[a]);
}

static int is_state(const adv_model *m, const size_t *birth, const size_t *death, size_t a)
{
    size_t b = birth[a];
    if (b == SIZE_MAX || m->evs[b].phase != ADV_PH_OPT || !early_step(m, b)) return 0;
    return persists(m, b, death[a]);
}

int adv_keeps_grads(const adv_model *m)
{
    size_t *birth, *death;
    if (life_index(m, &birth, &death) != 0) return -1;
    int named = has_grad_names(m), kept = 0;
    for (size_t a = 0; a < m->nallocs && !kept; a++) kept = is_grad(m, birth, death, a, named);
    free(birth), free(death);
    return kept;
}

void adv_floor_bytes(const adv_model *m, adv_floor *f)
{
    memset(f, 0, sizeof *f);
    size_t *birth, *death;
    if (life_index(m, &birth, &death) != 0) return;
    int named = has_grad_names(m);
    for (size_t a = 0; a < m->nallocs; a++) {
        size_t b = birth[a], d = death[a];
        if (b == SIZE_MAX) continue;
        if (is_grad(m, birth, death, a, named))
            f->grads += m->allocs[a].size;
        else if (is_state(m, birth, death, a))
            f->state += m->allocs[a].size;
        else if (m->evs[b].step < 0 && (d == SIZE_MAX || m->evs[d].step < 0) &&
                 (d == SIZE_MAX || d > b) && m->nsteps &&
                 (d == SIZE_MAX || m->evs[d].t >= m->steps[m->nsteps - 1].end_ns))
            f->params += m->allocs[a].size;
    }
    free(birth), free(death);
}

/* What a gradient's name says of its parameter: after its first dot ("grad.h0.fc_w": "h0.fc_w"),
 * or NULL. */
static const char *suffix_after_dot(const adv_model *m, uint32_t name)
{
    const char *d = strchr(adv_str(m, name), '.');
    return d && d[1] ? d + 1 : NULL;
}

int adv_opt(adv_model *m, int grad_none, int offload_opt, adv_opt_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!grad_none && !offload_opt) return 0;
    size_t *birth, *death;
    if (life_index(m, &birth, &death) != 0) return -1;
    size_t na = m->nallocs, ns = m->nsteps;
    int32_t *grp = malloc((na + 1) * sizeof *grp);      /* state: its group; grad: its group */
    size_t *gend = malloc((na + 1) * sizeof *gend);     /* group -> last birth event */
    size_t *glead = malloc((na + 1) * sizeof *glead);   /* group -> first member */
    size_t *bw_end = malloc((ns + 1) * sizeof *bw_end); /* step -> last non-opt event */
    size_t *st_end = malloc((ns + 1) * sizeof *st_end); /* step -> last event */
    size_t **bwl = calloc(ns + 1, sizeof *bwl);         /* step -> its non-grad bwd events */
    size_t *nbwl = calloc(ns + 1, sizeof *nbwl), *cbwl = calloc(ns + 1, sizeof *cbwl);
    size_t *mirror = malloc((na + 1) * sizeof *mirror); /* grad -> non-grad bwd events before */
    uint8_t *g = calloc(na + 1, 1);
    adv_rw w = {0};
    int rc = -1;
    size_t ngroups = 0;
    if (!grp || !gend || !glead || !bw_end || !st_end || !bwl || !nbwl || !cbwl || !mirror || !g ||
        adv_rw_init(&w, m))
        goto out;
    int named = has_grad_names(m);
    size_t ng = 0;
    for (size_t a = 0; a < na; a++) {
        grp[a] = -1;
        g[a] = is_grad(m, birth, death, a, named) ? 1 : is_state(m, birth, death, a) ? 2 : 0;
        ng += g[a] != 0;
    }
    if (!ng) { /* no gradients, no optimizer state: nothing to rewrite, nothing moved */
        rc = 0;
        goto out;
    }
    for (size_t s = 0; s <= ns; s++)
        bw_end[s] = st_end[s] = SIZE_MAX;
    for (size_t i = 0; i < m->nevs; i++) {
        const adv_ev *e = &m->evs[i];
        if (e->step < 0) continue;
        st_end[e->step] = i;
        if (e->phase != ADV_PH_OPT) bw_end[e->step] = i;
        if (e->phase == ADV_PH_BWD) {
            if (e->kind == ADV_EV_ALLOC && g[e->a] == 1) {
                mirror[e->a] = nbwl[e->step];
                continue;
            }
            if (gm_grow((void **)&bwl[e->step], &cbwl[e->step], nbwl[e->step] + 1, sizeof **bwl))
                goto out;
            bwl[e->step][nbwl[e->step]++] = i;
        }
    }
    /* optimizer-state groups: births with no optimizer range starting between them */
    bytemap by_suffix = {0}; /* a dotted suffix of a state's name -> its group (the first one's) */
    {
        int64_t last_key = -1;
        int32_t last_step = -1;
        for (size_t i = 0; i < m->nevs; i++) {
            const adv_ev *e = &m->evs[i];
            if (e->kind != ADV_EV_ALLOC || g[e->a] != 2) continue;
            size_t lo = 0, hi = m->nopt_starts;
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (m->opt_starts[mid] <= e->t)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if ((int64_t)lo != last_key || e->step != last_step) {
                glead[ngroups] = e->a;
                ngroups++;
            }
            last_key = (int64_t)lo, last_step = e->step;
            grp[e->a] = (int32_t)(ngroups - 1);
            gend[ngroups - 1] = i;
            /* every dotted suffix of the state's name names its parameter ("adam.m.h0.fc_w") */
            const char *n = adv_str(m, m->allocs[e->a].name);
            for (const char *d = strchr(n, '.'); d && d[1]; d = strchr(d + 1, '.'))
                if (!bytemap_get_str(&by_suffix, d + 1) && bytemap_put_str(&by_suffix, d + 1, ngroups - 1) != 0) {
                    bytemap_free(&by_suffix);
                    goto out;
                }
        }
    }
    /* gradients to groups: by name, else the latest-born unmatched gradient of the same size.
     * Not for a PyTorch script: zero_grad(set_to_none=True) frees every gradient after
     * optimizer.step() returns, and a foreach optimizer updates them all as one group (matched by
     * size, the tied embedding's gradient was freed before the update's temporaries: -2.8% on
     * gpt2-medium with checkpointing and -B 1 --accum 8, where the update is the peak) */
    if (grad_none && !m->torch) {
        uint8_t *used = calloc(na + 1, 1);
        if (!used) {
            bytemap_free(&by_suffix);
            goto out;
        }
        for (size_t a = 0; a < na; a++) {
            if (g[a] != 1 || !m->allocs[a].name) continue;
            const char *sfx = suffix_after_dot(m, m->allocs[a].name);
            uint64_t *gi = sfx ? bytemap_get_str(&by_suffix, sfx) : NULL;
            if (gi) grp[a] = (int32_t)*gi, used[a] = 1;
        }
        uint8_t *has = calloc(ngroups + 1, 1);
        if (!has) {
            free(used);
            bytemap_free(&by_suffix);
            goto out;
        }
        for (size_t a = 0; a < na; a++)
            if (g[a] == 1 && grp[a] >= 0) has[grp[a]] = 1;
        for (size_t k = 0; k < ngroups; k++) {
            if (has[k]) continue;
            size_t pick = SIZE_MAX;
            for (size_t a = 0; a < na; a++)
                if (g[a] == 1 && !used[a] && m->allocs[a].size == m->allocs[glead[k]].size &&
                    (pick == SIZE_MAX || birth[a] > birth[pick]))
                    pick = a;
            if (pick != SIZE_MAX) grp[pick] = (int32_t)k, used[pick] = 1;
        }
        free(has);
        free(used);
    }
    bytemap_free(&by_suffix);
    int32_t first_step = INT32_MAX;
    for (size_t a = 0; a < na; a++)
        if (g[a] && m->evs[birth[a]].step < first_step) first_step = m->evs[birth[a]].step;
    /* members of each group (state and, with grad_none, its gradients), in allocation order */
    size_t *moff = calloc(ngroups + 2, sizeof *moff), *mem = malloc((na + 1) * sizeof *mem);
    uint32_t *cur = malloc((na + 1) * sizeof *cur), hbuf[64];
    size_t *gl = malloc((na + 1) * sizeof *gl), ngl = 0; /* the gradients, in allocation order */
    if (!moff || !mem || !cur || !gl) {
        free(moff), free(mem), free(cur), free(gl);
        goto out;
    }
    for (size_t a = 0; a < na; a++) {
        cur[a] = (uint32_t)a;
        if (g[a] == 1) gl[ngl++] = a;
    }
    for (size_t a = 0; a < na; a++)
        if (grp[a] >= 0 && (g[a] == 2 || grad_none)) moff[grp[a] + 1]++;
    for (size_t k = 0; k < ngroups; k++)
        moff[k + 1] += moff[k];
    {
        size_t *fill = calloc(ngroups + 1, sizeof *fill);
        if (!fill) {
            free(moff), free(mem), free(cur);
            goto out;
        }
        for (size_t a = 0; a < na; a++)
            if (grp[a] >= 0 && (g[a] == 2 || grad_none)) mem[moff[grp[a]] + fill[grp[a]]++] = a;
        free(fill);
    }
    for (int32_t s = first_step; s < (int32_t)ns && first_step != INT32_MAX; s++) {
        if (st_end[s] == SIZE_MAX) continue;
        /* gradients born again where they were born in their first step */
        for (size_t gi = 0; grad_none && gi < ngl; gi++) {
            size_t a = gl[gi];
            int32_t s0 = m->evs[birth[a]].step;
            if (s <= s0) continue;
            const adv_alloc x = m->allocs[a];
            size_t c = mirror[a];
            /* PyTorch: where the recorded step (gradients kept) made a contribution of this
             * gradient's size and freed it after adding it in, the step with set-to-none keeps
             * that contribution as the new gradient (AccumulateGrad steals it) */
            int stolen = 0;
            /* the backward makes the contributions in the order the first step made the
             * gradients (gl is in that order): the first one of its size not taken yet */
            for (size_t j = 0; m->torch && j < nbwl[s] && !stolen; j++) {
                const adv_ev *e = &m->evs[bwl[s][j]];
                size_t d = e->kind == ADV_EV_ALLOC ? death[e->a] : SIZE_MAX;
                if (d != SIZE_MAX && m->allocs[e->a].size == x.size && m->evs[d].step == s &&
                    m->evs[d].phase == ADV_PH_BWD && !w.drop[d]) {
                    /* contributions that meet (a tied weight's: the head's and the embedding's)
                     * are added out of place into a new one, born just before they are freed:
                     * that sum is what AccumulateGrad takes */
                    uint32_t take = e->a;
                    for (size_t j2 = j + 1; j2 < nbwl[s]; j2++) {
                        const adv_ev *y = &m->evs[bwl[s][j2]];
                        size_t dy = y->kind == ADV_EV_ALLOC ? death[y->a] : SIZE_MAX;
                        if (bwl[s][j2] > d) break;
                        if (dy == SIZE_MAX || m->allocs[y->a].size != x.size || m->evs[dy].step != s ||
                            m->evs[dy].phase != ADV_PH_BWD || w.drop[dy] || d > bwl[s][j2] + ADV_SUM_FREES_WITHIN)
                            continue;
                        take = y->a, d = dy;
                    }
                    cur[a] = take;
                    w.drop[d] = 1;
                    stolen = 1;
                }
            }
            if (stolen) continue;
            uint32_t h = new_alloc(m, x.size, x.stream, x.cls, x.name, x.orig);
            if (h == UINT32_MAX) goto fail;
            cur[a] = h;
            if (c < nbwl[s])
                adv_rw_add(&w, bwl[s][c], -1, 1, adv_ev_like(&m->evs[bwl[s][c]], h, ADV_EV_ALLOC, 0));
            else if (nbwl[s])
                adv_rw_add(&w, bwl[s][nbwl[s] - 1], +1, 1,
                       adv_ev_like(&m->evs[bwl[s][nbwl[s] - 1]], h, ADV_EV_ALLOC, 0));
            else
                adv_rw_add(&w, st_end[s], +1, 1, adv_ev_like(&m->evs[st_end[s]], h, ADV_EV_ALLOC, 0));
        }
        /* each group's update: state brought in and sent back, then its gradients freed */
        for (size_t k = 0; k < ngroups; k++) {
            int32_t s0 = m->evs[birth[glead[k]]].step;
            if (s < s0) continue;
            size_t anchor = s == s0 ? gend[k] : bw_end[s] != SIZE_MAX ? bw_end[s] : st_end[s];
            adv_ev ae = m->evs[anchor];
            ae.phase = ADV_PH_OPT;
            size_t nh = 0;
            if (offload_opt) {
                for (size_t i = moff[k]; i < moff[k + 1]; i++) {
                    size_t a = mem[i];
                    if (g[a] != 2) continue;
                    uint32_t h = (uint32_t)a;
                    if (s > s0) {
                        const adv_alloc x = m->allocs[a];
                        h = new_alloc(m, x.size, m->copy_stream, x.cls, x.name, x.orig);
                        if (h == UINT32_MAX) goto fail;
                        adv_rw_add(&w, anchor, +1, 5, adv_ev_like(&ae, h, ADV_EV_ALLOC, 0));
                        st->traffic_bytes += x.size;
                    }
                    if (nh < 64) hbuf[nh++] = h;
                }
                for (size_t i = 0; i < nh; i++) {
                    adv_rw_add(&w, anchor, +1, 5,
                           adv_ev_like(&ae, hbuf[i], ADV_EV_FREE_ASYNC, m->copy_stream));
                    st->traffic_bytes += m->allocs[hbuf[i]].size;
                }
            }
            if (grad_none)
                for (size_t i = moff[k]; i < moff[k + 1]; i++) {
                    size_t a = mem[i];
                    if (g[a] != 1 || m->evs[birth[a]].step > s) continue;
                    adv_rw_add(&w, anchor, +1, 5,
                           adv_ev_like(&ae, cur[a], ADV_EV_FREE_ASYNC, m->allocs[a].stream));
                }
        }
        /* gradients of no optimizer state: freed at the end of the step */
        if (grad_none)
            for (size_t gi = 0; gi < ngl; gi++) {
                size_t a = gl[gi];
                if (grp[a] >= 0 || m->evs[birth[a]].step > s) continue;
                adv_ev e =
                    adv_ev_like(&m->evs[st_end[s]], cur[a], ADV_EV_FREE_ASYNC, m->allocs[a].stream);
                e.phase = ADV_PH_OPT;
                adv_rw_add(&w, st_end[s], +1, 9, e);
            }
    }
    free(moff), free(mem), free(cur), free(gl);
    moff = NULL;
    for (size_t a = 0; a < na; a++) {
        if (!((grad_none && g[a] == 1) || (offload_opt && g[a] == 2))) continue;
        if (death[a] != SIZE_MAX) w.drop[death[a]] = 1;
        if (g[a] == 1)
            st->grad_bytes += m->allocs[a].size, st->ngrads++;
        else
            st->state_bytes += m->allocs[a].size, st->nstate++;
    }
    if (0) {
    fail:
        free(moff), free(mem), free(cur), free(gl);
        goto out;
    }
    rc = adv_rw_apply(m, &w);
out:
    adv_rw_free(&w);
    for (size_t s = 0; bwl && s <= ns; s++)
        free(bwl[s]);
    free(bwl), free(nbwl), free(cbwl), free(mirror), free(g);
    free(grp), free(gend), free(glead), free(bw_end), free(st_end), free(birth), free(death);
    return rc;
}

/* ------------------------------------------------------------------ ZeRO sharding */

uint64_t adv_shard_bytes(uint64_t bytes, unsigned ranks)
{
    uint64_t elems = (bytes + 3) / 4; /* fp32 elements */
    return (elems + ranks - 1) / ranks * 4;
}

/* The first optimizer range starting at or after t (UINT64_MAX: none). */
static uint64_t opt_start_after(const adv_model *m, uint64_t t)
{
    size_t lo = 0, hi = m->nopt_starts;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->opt_starts[mid] < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->nopt_starts ? m->opt_starts[lo] : UINT64_MAX;
}

/* The last event at or before time t (events are in time order), SIZE_MAX when none. */
static size_t event_at(const adv_model *m, uint64_t t)
{
    size_t lo = 0, hi = m->nevs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->evs[mid].t <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? lo - 1 : SIZE_MAX;
}

/* ZeRO stage 1 and 2 for N ranks (the trainer's multi-rank mode, train/README.md): the
 * optimizer state shrinks to its shard, S = ceil(n / N) fp32 elements; with stage 2 the full
 * gradient lives only from its first production in a step to the op that completes it in the
 * step's last micro-batch (its last use before the optimizer phase; without uses, the end of
 * the backward), where its shard is born (reduce-scatter) and the full gradient freed; the
 * shard dies where the recorded gradient's update ended (adv_opt's set-to-none point). */
int adv_zero(adv_model *m, unsigned ranks, int stage, adv_zero_stats *st)
{
    memset(st, 0, sizeof *st);
    if (ranks < 1 || stage < 1) return 0;
    size_t *birth, *death;
    if (adv_model_own(m) != 0 || life_index(m, &birth, &death) != 0) return -1;
    size_t na = m->nallocs;
    uint8_t *grad = calloc(na + 1, 1); /* recorded allocations that are gradients */
    if (!grad) {
        free(birth), free(death);
        return -1;
    }
    int named = has_grad_names(m);
    for (size_t a = 0; a < na; a++) {
        size_t b = birth[a], d = death[a];
        if (is_state(m, birth, death, a)) {
            uint64_t s = adv_shard_bytes(m->allocs[a].size, ranks);
            st->state_bytes += m->allocs[a].size, st->state_shard_bytes += s, st->nstate++;
            m->allocs[a].size = s;
        } else if (is_grad(m, birth, death, a, named) ||
                   (b != SIZE_MAX && d != SIZE_MAX && m->evs[b].phase == ADV_PH_BWD &&
                    m->evs[d].phase == ADV_PH_OPT && m->evs[d].step == m->evs[b].step &&
                    !strncmp(adv_str(m, m->allocs[a].name), "grad.", 5)))
            grad[a] = 1; /* kept across steps, or already freed in the optimizer (--grad-none) */
    }
    free(birth), free(death);
    int rc = 0;
    if (stage < 2) goto out;
    /* per-step gradients, each freed after its parameter's update */
    adv_opt_stats ost;
    if ((rc = adv_opt(m, 1, 0, &ost)) != 0) goto out;
    if ((rc = life_index(m, &birth, &death)) != 0) goto out;
    adv_rw w;
    if ((rc = adv_rw_init(&w, m)) != 0) {
        free(birth), free(death);
        goto out;
    }
    size_t nall = m->nallocs;
    for (size_t a = 0; a < nall; a++) {
        uint32_t o = m->allocs[a].orig;
        size_t b = birth[a], d = death[a];
        if (o >= na || !grad[o] || b == SIZE_MAX || d == SIZE_MAX || d < b) continue;
        const adv_ev *eb = &m->evs[b];
        uint64_t lo =
            eb->step >= 0 && (size_t)eb->step < m->nsteps ? m->steps[eb->step].start_ns : eb->t;
        uint64_t hi = opt_start_after(m, eb->t);
        if (hi > m->evs[d].t) hi = m->evs[d].t;
        /* the op that completes the gradient: its last use before the optimizer */
        uint64_t last = 0;
        int found = 0;
        if (m->use_off && o < m->nrecorded)
            for (uint64_t i = m->use_off[o]; i < m->use_off[o + 1]; i++) {
                uint64_t x = m->use_t[i];
                if (x >= lo && x < hi && x >= last) last = x, found = 1;
            }
        size_t anchor = SIZE_MAX;
        if (found) {
            anchor = event_at(m, last);
            st->ngrads_from_uses++;
        } else /* the end of the backward: the last event of the step before the optimizer */
            for (size_t i = d; i > b && anchor == SIZE_MAX; i--)
                if (m->evs[i - 1].phase != ADV_PH_OPT) anchor = i - 1;
        if (anchor == SIZE_MAX || anchor < b) {
            /* a gradient born again in this step (set to none): its op runs after the births of
             * the gradients made with it (a weight's and its bias's), so its reduce-scatter too */
            anchor = b;
            while (anchor + 1 < d && m->evs[anchor + 1].kind == ADV_EV_ALLOC &&
                   m->allocs[m->evs[anchor + 1].a].orig < na && grad[m->allocs[m->evs[anchor + 1].a].orig])
                anchor++;
        }
        if (anchor >= d) anchor = d - 1;
        const adv_alloc x = m->allocs[a];
        char nm[512];
        const char *gn = adv_str(m, x.name);
        snprintf(nm, sizeof nm, "grad.shard.%s", !strncmp(gn, "grad.", 5) ? gn + 5 : gn);
        uint32_t name = intern(m, nm);
        adv_name_class(nm, nm, sizeof nm);
        uint32_t h =
            new_alloc(m, adv_shard_bytes(x.size, ranks), x.stream, intern(m, nm), name, x.orig);
        if (h == UINT32_MAX) {
            rc = -1;
            break;
        }
        adv_rw_add(&w, anchor, +1, 1, adv_ev_like(&m->evs[anchor], h, ADV_EV_ALLOC, 0));
        adv_rw_add(&w, anchor, +1, 1,
               adv_ev_like(&m->evs[anchor], (uint32_t)a, ADV_EV_FREE_ASYNC, x.stream));
        m->evs[d].a = h; /* the shard dies where the gradient's update ended */
        m->evs[d].kind = ADV_EV_FREE_ASYNC, m->evs[d].stream = x.stream;
        if (a == o) { /* the recorded gradient: counted once, not per step */
            st->grad_bytes += x.size, st->grad_shard_bytes += m->allocs[h].size;
            st->ngrads++;
        }
    }
    if (rc == 0) rc = adv_rw_apply(m, &w);
    adv_rw_free(&w);
    free(birth), free(death);
out:
    free(grad);
    return rc;
}
