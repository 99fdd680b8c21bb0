/* gm_category.c — what each byte is, for every recording.
 *
 * The story. A training program's memory is a few kinds of thing, and each kind has a life of
 * its own shape (PyTorch's memory profiler draws the same picture from the autograd graph):
 *   - parameters: made before the first step, alive through every step (or, kept on the host,
 *     brought in from their home there for each use, a home a forward or backward reads, and
 *     freed: param_forms, param_homes); a parameter's size is also that of its other forms (the
 *     fp32 copy of a bf16 weight the ops read, its fp32 master: the other operand of a launch
 *     of two, one a parameter; param_forms);
 *   - gradients: made in the first step's backward and kept (or, set to none, made in each
 *     backward and freed in the update; or, sharded (ZeRO-2/3), made in the backward and handed
 *     on at once to this rank's shard, a gradient: freed as the next thing after the shard's
 *     birth, with nothing but copies between, or right after a launch of the two alone added it
 *     into the shard: handoffs);
 *   - optimizer state: made in the first update and kept (or, kept on the host, made in each
 *     update, filled from pinned host memory, and freed in it: load_uses, host_homes; not
 *     a parameter's master weights brought in so, which the update converts into the parameter);
 *   - activations: made in a forward, freed in the backward that follows;
 *   - temporaries: made and freed inside one phase;
 *   - workspaces: a library's buffers, made once on first need (in a forward or a backward) and
 *     kept; unlike a gradient, the size of no parameter;
 *   - other: what none of these shapes fits (a step's growth, the allocator's own segments).
 * So a category needs two things: the steps and, inside each, where the forward, backward and
 * update are. Sources, best first, and each allocation keeps the one that decided it:
 *   1. names (GM_CSRC_NAMES): "grad.X" is a gradient and makes X a parameter; "K.S.X" with X a
 *      parameter, and "adam.*" / "adamw.*" / "*exp_avg*", optimizer state (the included
 *      trainer's names, and those of `gpumem record`'s PyTorch hooks); "*workspace*";
 *   2. phases (GM_CSRC_PHASES): "step N" ranges and their fwd / bwd / opt components (NVTX, the
 *      PyTorch hooks) give the steps and phases the shapes above are read in;
 *   3. inference (GM_CSRC_INFERENCE), for a recording with neither:
 *      - the steps are the recording's own period: the allocations, each a token (its size and
 *        the launches and frees since the birth before it; its size alone; those alone: the
 *        first kind whose steps account for the loop, tokens_make), read from the end
 *        backwards, repeat with period P (the Z-algorithm: the P whose repetition covers most of
 *        the recording, the smallest of those); the step starts where the fewest bytes made in
 *        one step are still alive, with the input made just before (input_first); what the
 *        program does once after its loop (an evaluation) ends the tokens with some that repeat
 *        in no step: it is after the steps, as after a last "step N" range; where the count may
 *        be wrong, c->doubt says why;
 *      - in each step, the backward begins where the step's own allocations (made and freed in
 *        it) are at their highest — activations pile up through the forward, and the backward
 *        adds its first gradient tensor on top of them before it frees any (the gradient of the
 *        logits on top of the logits), or, in a Python program, earlier where an allocation's
 *        stack says so (PyTorch's autograd engine allocates on its own thread, without Python
 *        frames; the loss's gradient is made inside `backward`), or before a gradient made
 *        before that point (a backward that makes the layers' insides again, --recompute, is
 *        highest there: backward_before_grads; a size kept from two steps or more is a step's
 *        growth, not a gradient), and, outside a Python program, before the copies of
 *        parameters made just before it (backward_copies: bf16 weights or shards made full
 *        for the first layer the backward works on) — and ends with the last free of
 *        an allocation made before that point; the update begins at the first kernel launch or
 *        allocation after that; a step whose own allocations fall to nearly nothing and rise
 *        again is several such passes (micro-batches), each with its forward and backward, the
 *        update after the last (passes_of). A step shows a backward where something made before
 *        that point is freed after it and something is made in between (the backward's gradients);
 *        where no step does (a loop that makes buffers and frees or keeps them), no step has a
 *        backward or an update and nothing is an activation (c->no_backward).
 *      Where no period shows (one step, steps that differ) the phases are not guessed: what
 *      names do not decide is "other", and `why` says so.
 * The same rules then read every allocation's shape in those steps and phases, so the
 * categories of an unannotated recording are those of the annotated one wherever its phases
 * were found right (tests/integration/categories_trainer.sh measures it). */
#include "snapshot/analyze/gm_category.h"
#include "snapshot/record/bytemap.h"
#include "snapshot/record/rec.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

const char *const gm_cat_key[GM_NCATS] = {"parameters",  "gradients",   "optimizer_state", "activations",
                                          "temporaries", "workspaces", "other"};
const char *const gm_cat_word[GM_NCATS] = {"parameters",  "gradients",  "optimizer state", "activations",
                                           "temporaries", "workspaces", "other"};
const char *const gm_csrc_name[GM_NCSRCS] = {"none", "names", "phases", "inference"};

#define NO_SEQ UINT64_MAX

/* A device allocation whose category means something: not pinned host or managed memory. */
static int is_device(const gm_alloc *a) { return a->kind != REC_HOST_ALLOC && a->kind != REC_MANAGED_ALLOC; }
/* ... and one the shapes are read on: not one of PyTorch's segments (its cache, not a tensor). */
static int is_target(const gm_alloc *a) { return is_device(a) && !(a->flags & GM_ALLOC_FW_SEGMENT); }

/* ------------------------------------------------------------------ phases of ranges */

/* The phase a range name stands for (the words gpumem advise reads). */
static int phase_word(const char *n, size_t len)
{
    char w[16];
    if (len >= sizeof w) return 0;
    for (size_t i = 0; i < len; i++)
        w[i] = (char)tolower((unsigned char)n[i]);
    w[len] = 0;
    if (!strcmp(w, "fwd") || !strcmp(w, "forward")) return GM_CPH_FWD;
    if (!strcmp(w, "bwd") || !strcmp(w, "backward")) return GM_CPH_BWD;
    if (!strcmp(w, "opt") || !strcmp(w, "optim") || !strcmp(w, "optimizer") || !strcmp(w, "optimizer_step"))
        return GM_CPH_OPT;
    return 0;
}

/* A range's step (-1 none) and phase (0 none): the last component of its path naming one. */
static void range_parse(const gm_model *m, uint32_t range, int64_t *step, int *phase)
{
    const gm_range *r = range ? gm_range_of(m, range) : NULL;
    *step = r ? r->step : -1;
    *phase = 0;
    if (!r || !r->path) return;
    for (const char *p = r->path; *p;) {
        size_t n = strcspn(p, "/");
        int x = phase_word(p, n);
        if (x) *phase = x;
        p += n;
        if (*p == '/') p++;
    }
}

/* A binary min-heap of (death seq, bytes): what is alive, by when it dies. */
typedef struct heap_ent {
    uint64_t death, bytes;
    uint8_t cat, src;
} heap_ent;
typedef struct heap {
    heap_ent *h;
    size_t n, cap;
} heap;
static int heap_push(heap *q, heap_ent e)
{
    if (q->n == q->cap && gm_grow((void **)&q->h, &q->cap, q->n + 1, sizeof *q->h)) return -1;
    size_t i = q->n++;
    while (i && q->h[(i - 1) / 2].death > e.death) {
        q->h[i] = q->h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->h[i] = e;
    return 0;
}
static heap_ent heap_pop(heap *q)
{
    heap_ent top = q->h[0], last = q->h[--q->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        uint64_t md = last.death;
        if (l < q->n && q->h[l].death < md) m = l, md = q->h[l].death;
        if (r < q->n && q->h[r].death < md) m = r;
        if (m == i) break;
        q->h[i] = q->h[m];
        i = m;
    }
    if (q->n) q->h[i] = last;
    return top;
}

/* ------------------------------------------------------------------ the context */

/* The range asked for last (0: none yet): its step and phase, and (steps_from_ranges) the step's
 * slot in c->steps (-1: not looked up). Births and deaths keep one each: each comes mostly in
 * the same range as the one before. */
typedef struct range_memo {
    uint32_t range;
    int64_t step;
    int phase, slot;
} range_memo;

/* A target whose category was decided on an answer that may change (category_decide's
 * *unsure): its index and shape, to decide again once every target is categorised. */
typedef struct unsure_ent {
    uint32_t i;
    uint8_t shape;
} unsure_ent;

typedef struct ctx {
    const gm_model *m;
    gm_categories *c;
    uint32_t *t; /* target allocations (indices into m->allocs), in birth order; NULL while
                    every allocation is one (target k is allocation k: tgt) */
    size_t nt;
    u64map ranges; /* range id -> (step + 1) << 8 | phase */
    bytemap params; /* X for every "grad.X" named, by its bytes (two names of one hash: two) */
    u64map seen;    /* the names seen (their string ids) */
    uint64_t last_birth;   /* the last target's birth */
    uint32_t *late;        /* targets freed after last_birth (the teardown), in birth order */
    size_t nlate, late_cap;
    int python;         /* some allocation's stack has Python frames */
    size_t segments;    /* PyTorch's segments among the device allocations */
    size_t host;        /* allocations not on the device (pinned host, managed memory) */
    u64map from_host;   /* births of device allocations a copy wrote from pinned host memory ->
                           the host allocation's birth */
    u64map param_forms; /* sizes of parameters in the form the ops read (param_forms) */
    u64map param_copies; /* births of targets a launch made from a parameter or made it from */
    u64map brought;     /* births of targets brought from a home on the host -> the home's birth */
    u64map param_homes; /* births of the homes on the host that hold parameters (param_homes) */
    u64map host_homes;  /* sizes of pinned host allocations an update made and kept (host_homes) */
    uint64_t *launches; /* seqs of kernel launches, copies and memsets, sorted */
    size_t nlaunches;
    uint64_t *computes; /* ... of those that are not copies (kernels, memsets), sorted */
    size_t ncomputes;
    u64map handoff;     /* a target's birth -> the index of the target it handed on to (handoffs) */
    struct pair_ev *pairs; /* the launches of two operands, by seq (load_uses) */
    size_t npairs;
    u64map param_sizes, repeats; /* categorise's, for category_of (see there) */
    u64map step_idx;  /* steps_from_ranges: "step N" -> its slot in c->steps */
    size_t steps_cap;
    int phased;       /* ... and some event's range names a phase */
    uint64_t deaths_end; /* the last step's end for the frees of what it made (end_last_step) */
    uint64_t cut;     /* the OOM the run stopped at (no step began after it), 0: none (cut_of) */
    uint64_t epilogue; /* inferred steps: the first birth after the loop's (steps_from_period), NO_SEQ: none */
    uint64_t *tk;       /* steps_from_period's tokens, one per target (tokens_make) */
    uint32_t *lgap, *fgap; /* ... and what each target's token says happened before it */
    unsure_ent *unsure; /* the timeline's: targets category_decide was not sure of, by birth */
    size_t nunsure, unsure_cap;
} ctx;

/* Target k's index in m->allocs. */
static inline size_t tgt(const ctx *x, size_t k) { return x->t ? x->t[k] : k; }

/* A range's step and phase (range_parse), read once per range: a recording has few ranges and
 * many events in each, mostly one after another in the same range. */
static range_memo range_lookup(ctx *x, uint32_t range)
{
    int64_t step;
    int phase;
    uint64_t *v = u64map_get(&x->ranges, range);
    if (v) {
        step = (int64_t)(*v >> 8) - 1, phase = (int)(*v & 0xff);
    } else {
        range_parse(x->m, range, &step, &phase);
        if (step >= -1 && step < (1ll << 54))
            u64map_put(&x->ranges, range, (uint64_t)(step + 1) << 8 | (uint64_t)phase);
    }
    return (range_memo){range, step, phase, -1};
}

/* The memo is the caller's local (the passes keep theirs in registers: no call is handed it). */
static inline void range_info(ctx *x, range_memo *mm, uint32_t range, int64_t *step, int *phase)
{
    if (!range || range != mm->range) *mm = range_lookup(x, range);
    *step = mm->step, *phase = mm->phase;
}

/* Seqs of the recording's launches (for where an update begins); none without a database. */
static void load_launches(gm_db *d, ctx *x)
{
    sqlite3_stmt *s;
    if (!d || !gm_table_exists(d, "launches") ||
        sqlite3_prepare_v2(d->db, "SELECT seq, op FROM launches ORDER BY seq", -1, &s, NULL) != SQLITE_OK)
        return;
    size_t cap = 0, ccap = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0);
        if (gm_grow((void **)&x->launches, &cap, x->nlaunches + 1, sizeof *x->launches)) break;
        x->launches[x->nlaunches++] = seq;
        if (sqlite3_column_int(s, 1) == REC_OP_COPY) continue;
        if (gm_grow((void **)&x->computes, &ccap, x->ncomputes + 1, sizeof *x->computes)) break;
        x->computes[x->ncomputes++] = seq;
    }
    sqlite3_finalize(s);
}

/* A launch of two operands (recorded uses): its seq and their births, b1 < b2. */
typedef struct pair_ev {
    uint64_t seq, b1, b2;
} pair_ev;

/* A use: an allocation's birth and how a launch accessed it (1 read, 2 write, 0 unknown). */
typedef struct use_row {
    uint64_t birth;
    int access;
} use_row;

/* The allocation born at seq birth (its id: gm_alloc_by_id), or NULL. */
static const gm_alloc *alloc_born(const gm_model *m, uint64_t birth)
{
    long i = gm_alloc_by_id(m, birth);
    return i < 0 ? NULL : &m->allocs[i];
}

/* What one launch's uses u[0, n) say (launches l and computes c: the cursors of a walk in seq
 * order): a copy that writes one allocation and reads a pinned host allocation fills the first
 * from the host (x->from_host: optimizer state kept on the host and brought in for each update,
 * --offload optimizer; parameters, --offload params: param_forms); a launch of two operands is a
 * pair (x->pairs: a copy or conversion of one buffer into another, param_forms; one added into
 * the other, handoffs). 0, or -1 (no memory). */
static int uses_of(ctx *x, uint64_t seq, const use_row *u, size_t n, size_t *l, size_t *c, size_t *cap)
{
    while (*l < x->nlaunches && x->launches[*l] < seq)
        ++*l;
    while (*c < x->ncomputes && x->computes[*c] < seq)
        ++*c;
    if (n == 2) {
        if (gm_grow((void **)&x->pairs, cap, x->npairs + 1, sizeof *x->pairs)) return -1;
        x->pairs[x->npairs++] = (pair_ev){seq, u[0].birth, u[1].birth}; /* by the key: b1 < b2 */
    }
    int copy = *l < x->nlaunches && x->launches[*l] == seq && !(*c < x->ncomputes && x->computes[*c] == seq);
    for (size_t w = 0; copy && w < n; w++) {
        if (u[w].access != 2) continue;
        for (size_t r = 0; r < n; r++) {
            const gm_alloc *h = u[r].access == 1 ? alloc_born(x->m, u[r].birth) : NULL;
            if (h && h->kind == REC_HOST_ALLOC && u64map_put(&x->from_host, u[w].birth, u[r].birth)) return -1;
        }
    }
    return 0;
}

/* The recorded uses read once, in the table's order (by launch): x->from_host and x->pairs
 * (uses_of). After load_launches; none without uses recorded. */
static void load_uses(gm_db *d, ctx *x)
{
    sqlite3_stmt *s;
    if (!d || !gm_table_exists(d, "uses") ||
        sqlite3_prepare_v2(d->db, "SELECT seq, birth, access FROM uses ORDER BY seq, birth", -1, &s, NULL) != SQLITE_OK)
        return;
    use_row *u = NULL;
    size_t n = 0, ucap = 0, l = 0, c = 0, cap = 0;
    uint64_t seq = 0;
    int rc = 0;
    while (!rc && sqlite3_step(s) == SQLITE_ROW) {
        uint64_t q = (uint64_t)sqlite3_column_int64(s, 0);
        if (n && q != seq) rc = uses_of(x, seq, u, n, &l, &c, &cap), n = 0;
        seq = q;
        if (rc || gm_grow((void **)&u, &ucap, n + 1, sizeof *u)) break;
        u[n++] = (use_row){(uint64_t)sqlite3_column_int64(s, 1), sqlite3_column_int(s, 2)};
    }
    if (!rc && n) uses_of(x, seq, u, n, &l, &c, &cap);
    free(u);
    sqlite3_finalize(s);
}

/* The sizes of the pinned host allocations an update makes and keeps (to the end, or to the
 * teardown), into x->host_homes: the first update of an optimizer whose state lives on the
 * host makes its home there, and works on a device copy it frees (memset, not yet filled from
 * the host: x->from_host). 0, or -1 (no memory). */
static int host_homes(ctx *x)
{
    const gm_model *m = x->m;
    for (size_t i = 0; i < m->nallocs; i++) {
        const gm_alloc *a = &m->allocs[i];
        long step;
        if (a->kind != REC_HOST_ALLOC || (a->death && a->death <= x->last_birth)) continue;
        if (gm_category_phase_at(x->c, a->birth, &step) == GM_CPH_OPT && u64map_put(&x->host_homes, a->requested, 1))
            return -1;
    }
    return 0;
}

/* Target a lives to the end: never freed, or only in the teardown (after the last birth). */
static inline int kept_to_end(const ctx *x, const gm_alloc *a) { return !a->death || a->death > x->last_birth; }

/* a (a target, or a pinned host allocation) is made before the first step and kept to the end:
 * a parameter, or a parameter's home on the host. Steps known. */
static inline int early_kept(const ctx *x, const gm_alloc *a)
{
    return a->birth < x->c->steps[0].start && kept_to_end(x, a);
}

/* Parameters in forms the ops read, found by behaviour where the device keeps no parameter in
 * that form (bf16 weights computed on in fp32; ZeRO-3 shards; parameters or master weights kept
 * on the host): a parameter's size is then also the size of
 *   - what a copy fills from a home on the host (pinned, made before the first step, kept to
 *     the end; of its size, as everything copies fill from it), and what, made before the first step, is freed there while such a
 *     home of its size is made (looked for among the 64 allocations before the home): a form of
 *     a parameter brought in, or put there — x->brought (the home's birth); param_homes says
 *     which are parameters;
 *   - the other operand of a launch of two operands, one a parameter (kept from before the first
 *     step, or brought in): a copy made from it (an fp32 gather buffer of a bf16 weight, the
 *     wire buffer a brought-in shard is gathered into) or that it is made from (fp32 master
 *     weights converted into it) — x->param_copies, the parameter in another form.
 * Into x->param_forms (sizes), x->brought and x->param_copies (births). Steps known; without
 * uses recorded, only the put-there. 0, or -1 (no memory). */
static int param_forms(ctx *x)
{
    const gm_model *m = x->m;
    int rc = 0;
    if (!x->c->nsteps) return 0;
    /* a staging buffer (a collective's through host memory) is made before the first step and
     * kept too, but fills buffers of many sizes: a home fills only its own size */
    u64map mixed = {0};
    for (size_t k = 0; k < x->nt && x->from_host.count && !rc; k++) {
        const gm_alloc *a = &m->allocs[tgt(x, k)];
        const uint64_t *h = u64map_get(&x->from_host, a->birth);
        const gm_alloc *home = h ? alloc_born(m, *h) : NULL;
        if (home && home->requested != a->requested) rc = u64map_put(&mixed, home->birth, 1);
    }
    for (size_t k = 0; k < x->nt && x->from_host.count && !rc; k++) {
        const gm_alloc *a = &m->allocs[tgt(x, k)];
        const uint64_t *h = u64map_get(&x->from_host, a->birth);
        const gm_alloc *home = h ? alloc_born(m, *h) : NULL;
        if (home && early_kept(x, home) && home->requested == a->requested && !u64map_get(&mixed, home->birth))
            rc = u64map_put(&x->param_forms, a->requested, 1) || u64map_put(&x->brought, a->birth, home->birth);
    }
    u64map_free(&mixed);
    for (size_t j = 0; j < m->nallocs && x->host && !rc && m->allocs[j].birth < x->c->steps[0].start; j++) {
        const gm_alloc *home = &m->allocs[j];
        if (home->kind != REC_HOST_ALLOC || !kept_to_end(x, home)) continue;
        for (size_t k = j; k-- > 0 && j - k <= 64 && !rc;) {
            const gm_alloc *a = &m->allocs[k];
            if (is_target(a) && a->requested == home->requested && a->death > home->birth &&
                a->death < x->c->steps[0].start)
                rc = u64map_put(&x->param_forms, a->requested, 1) || u64map_put(&x->brought, a->birth, home->birth);
        }
    }
    for (size_t k = 0; k < x->npairs && !rc; k++) {
        const gm_alloc *p = alloc_born(m, x->pairs[k].b1), *q = alloc_born(m, x->pairs[k].b2);
        if (!p || !q || !is_target(p) || !is_target(q)) continue;
        int pp = early_kept(x, p) || u64map_get(&x->brought, p->birth);
        int qp = early_kept(x, q) || u64map_get(&x->brought, q->birth);
        if (pp == qp) continue;
        if (qp) q = p;
        rc = u64map_put(&x->param_forms, q->requested, 1) || u64map_put(&x->param_copies, q->birth, 1);
    }
    return rc;
}

/* The homes on the host (x->brought's) that a forward or a backward brings a copy from, into
 * x->param_homes: a parameter's, what is brought from it (or was put there) a parameter
 * (--offload params: the forward reads it). A home only an update reads from holds the
 * optimizer's own form of a parameter, its fp32 master (--param-dtype bf16 --offload optimizer):
 * brought in, a temporary of the update, as its names say. Phases known. 0, or -1 (no memory). */
static int param_homes(ctx *x)
{
    for (uint64_t k = 0; x->brought.keys && k <= x->brought.mask; k++) {
        if (x->brought.keys[k] == U64MAP_EMPTY) continue;
        long step;
        int ph = gm_category_phase_at(x->c, x->brought.keys[k], &step);
        if ((ph == GM_CPH_FWD || ph == GM_CPH_BWD) && u64map_put(&x->param_homes, x->brought.vals[k], 1)) return -1;
    }
    return 0;
}

/* Every key of from into to (value 1). 0, or -1 (no memory). */
static int keys_add(u64map *to, const u64map *from)
{
    for (uint64_t k = 0; from->keys && k <= from->mask; k++)
        if (from->keys[k] != U64MAP_EMPTY && u64map_put(to, from->keys[k], 1)) return -1;
    return 0;
}

/* The first of the n sorted seqs s after seq, or NO_SEQ. */
static uint64_t seq_after(const uint64_t *s, size_t n, uint64_t seq)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s[mid] <= seq) lo = mid + 1;
        else hi = mid;
    }
    return lo < n ? s[lo] : NO_SEQ;
}

/* The first launch after seq, or NO_SEQ. */
static uint64_t launch_after(const ctx *x, uint64_t seq) { return seq_after(x->launches, x->nlaunches, seq); }

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static size_t target_from(const ctx *x, uint64_t seq);

/* The last of the n sorted seqs s before seq, or NO_SEQ. */
static uint64_t seq_before(const uint64_t *s, size_t n, uint64_t seq)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s[mid] < seq) lo = mid + 1;
        else hi = mid;
    }
    return lo ? s[lo - 1] : NO_SEQ;
}

/* The launch of two operands at seq, or NULL. */
static const pair_ev *pair_at(const ctx *x, uint64_t seq)
{
    size_t lo = 0, hi = x->npairs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->pairs[mid].seq < seq) lo = mid + 1;
        else hi = mid;
    }
    return lo < x->npairs && x->pairs[lo].seq == seq ? &x->pairs[lo] : NULL;
}

/* Target k's receiver made just before its free: the last target made before it, after target k,
 * no larger, outliving it, nothing but copies between its birth and the free (deaths: every
 * target's, sorted). Its index in m->allocs, or SIZE_MAX. */
static size_t receiver_made(const ctx *x, const uint64_t *deaths, size_t nd, size_t k)
{
    const gm_model *m = x->m;
    const gm_alloc *a = &m->allocs[tgt(x, k)];
    size_t lo = k + 1, hi = x->nt; /* the first target born after A's death */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->allocs[tgt(x, mid)].birth < a->death) lo = mid + 1;
        else hi = mid;
    }
    if (lo == k + 1) return SIZE_MAX; /* nothing made while A was alive */
    const gm_alloc *b = &m->allocs[tgt(x, lo - 1)];
    if (b->requested > a->requested || (b->death && b->death < a->death)) return SIZE_MAX;
    if (seq_after(deaths, nd, b->birth) != a->death || seq_after(x->computes, x->ncomputes, b->birth) < a->death)
        return SIZE_MAX;
    return tgt(x, lo - 1);
}

/* Target k's receiver written just before its free: the other operand of the launch of the two
 * alone that comes last before the free, no larger, outliving it, with no other free or birth
 * between. Its index in m->allocs, or SIZE_MAX. */
static size_t receiver_written(const ctx *x, const uint64_t *deaths, size_t nd, size_t k)
{
    const gm_model *m = x->m;
    const gm_alloc *a = &m->allocs[tgt(x, k)];
    uint64_t l = seq_before(x->launches, x->nlaunches, a->death);
    const pair_ev *p = l != NO_SEQ && l > a->birth ? pair_at(x, l) : NULL;
    if (!p || (p->b1 != a->birth && p->b2 != a->birth) || seq_after(deaths, nd, l) != a->death) return SIZE_MAX;
    size_t n = target_from(x, l); /* the first target made after the launch */
    if (n < x->nt && m->allocs[tgt(x, n)].birth < a->death) return SIZE_MAX;
    const gm_alloc *b = alloc_born(m, p->b1 == a->birth ? p->b2 : p->b1);
    if (!b || !is_target(b) || b->requested > a->requested || (b->death && b->death <= a->death)) return SIZE_MAX;
    return (size_t)(b - m->allocs);
}

/* Handoffs, into x->handoff: target A freed as the next thing after target G was made (no other
 * free, no kernel or memset between: at most copies) or written by a launch of A and G alone
 * (no other free or birth between), G no larger and outliving A. A's content went into G and A
 * was let go: a full gradient reduce-scattered into this rank's shard and freed at once
 * (ZeRO-2/3: on one rank a copy, in a dry run nothing at all), or, in a later micro-batch,
 * reduce-scattered in place and added into the shard; PyTorch's AccumulateGrad adds a new
 * gradient into the .grad it keeps so. Where G is a gradient, so is A (unsure_decide); a
 * temporary of the backward is otherwise freed after the kernels that read it, not right after
 * a buffer is made or as the last thing a launch of it and a gradient did. Without launches
 * recorded a copy cannot be told from a kernel: no handoffs. 0, or -1 (no memory). */
static int handoffs(ctx *x)
{
    const gm_model *m = x->m;
    if (!x->nlaunches || x->nt < 2) return 0;
    uint64_t *deaths = malloc(x->nt * sizeof *deaths);
    if (!deaths) return -1;
    size_t nd = 0;
    for (size_t k = 0; k < x->nt; k++)
        if (m->allocs[tgt(x, k)].death) deaths[nd++] = m->allocs[tgt(x, k)].death;
    qsort(deaths, nd, sizeof *deaths, cmp_u64);
    int rc = 0;
    for (size_t k = 0; k < x->nt && !rc; k++) {
        const gm_alloc *a = &m->allocs[tgt(x, k)];
        if (!a->death) continue;
        size_t g = receiver_made(x, deaths, nd, k);
        if (g == SIZE_MAX) g = receiver_written(x, deaths, nd, k);
        if (g != SIZE_MAX) rc = u64map_put(&x->handoff, a->birth, g);
    }
    free(deaths);
    return rc;
}

/* ------------------------------------------------------------------ steps and phases from ranges */

static int step_slot(gm_categories *c, u64map *idx, size_t *cap, int64_t number)
{
    uint64_t *i = u64map_get(idx, (uint64_t)number);
    if (i) return (int)*i;
    if (gm_grow((void **)&c->steps, cap, c->nsteps + 1, sizeof *c->steps)) return -1;
    c->steps[c->nsteps] = (gm_cat_step){number, NO_SEQ, NO_SEQ, NO_SEQ, 0, 0, 0};
    if (u64map_put(idx, (uint64_t)number, c->nsteps)) return -1;
    return (int)c->nsteps++;
}

static int cmp_step(const void *a, const void *b)
{
    const gm_cat_step *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* One event (a target's birth or death) in a range: its step and phase boundaries. The memo,
 * *steps (x->c->steps, loaded again where step_slot grows it) and *phased (x->phased) are the
 * pass's locals. */
static inline __attribute__((always_inline)) int note_ranged(ctx *x, range_memo *mm, gm_cat_step **steps,
                                                            int *phased, uint64_t seq, uint32_t range)
{
    int64_t st;
    int ph;
    range_info(x, mm, range, &st, &ph);
    if (st < 0) return 0;
    int i = mm->slot;
    if (i < 0) {
        i = mm->slot = step_slot(x->c, &x->step_idx, &x->steps_cap, st);
        if (i < 0) return -1;
        *steps = x->c->steps;
    }
    gm_cat_step *s = &(*steps)[i];
    if (s->start == NO_SEQ || seq < s->start) s->start = seq;
    if (seq > s->end) s->end = seq;
    if (ph == GM_CPH_BWD && seq < s->bwd) s->bwd = seq;
    if (ph == GM_CPH_OPT && seq < s->opt) s->opt = seq;
    if (ph) *phased = 1;
    return 0;
}

/* Steps from "step N" ranges (and phases from their fwd / bwd / opt components): each target's
 * birth and death noted (note_target, in gm_categories_build's pass over the allocations), then
 * the steps put in order. 1: found, 0: the recording has none. */
static inline __attribute__((always_inline)) int note_target(ctx *x, range_memo *births, range_memo *deaths,
                                                            gm_cat_step **steps, int *phased, const gm_alloc *a)
{
    /* a birth in the range of the birth before it (most): births come in order, so that one
     * already took the step's start and its phase's, and only the end can move */
    if (a->range && a->range == births->range && births->slot >= 0) {
        gm_cat_step *s = &(*steps)[births->slot];
        if (a->birth > s->end) s->end = a->birth;
    } else if (note_ranged(x, births, steps, phased, a->birth, a->range)) {
        return -1;
    }
    return a->death && note_ranged(x, deaths, steps, phased, a->death, a->death_range) ? -1 : 0;
}
static int steps_from_ranges(ctx *x)
{
    gm_categories *c = x->c;
    const gm_model *m = x->m;
    /* The targets' births and deaths give the phases; the steps' spans come from every event in
     * their ranges (the model's steps): a PyTorch recording's device allocations are its
     * segments, made in the first step or two, and a step that made none still runs and holds
     * what was live through it. */
    for (size_t k = 0; k < m->nsteps; k++) {
        const gm_step *ms = &m->steps[k];
        int i = step_slot(c, &x->step_idx, &x->steps_cap, ms->step);
        if (i < 0) return -1;
        gm_cat_step *s = &c->steps[i];
        if (s->start == NO_SEQ || ms->start_seq < s->start) s->start = ms->start_seq;
        if (ms->end_seq > s->end) s->end = ms->end_seq;
    }
    u64map_free(&x->step_idx);
    if (!c->nsteps) return 0;
    gm_sort(c->steps, c->nsteps, sizeof *c->steps, cmp_step);
    /* an update's range, when the backward has none before it, still ends the backward */
    for (size_t j = 0; j < c->nsteps; j++)
        if (c->steps[j].opt < c->steps[j].bwd && c->steps[j].bwd != NO_SEQ) c->steps[j].opt = NO_SEQ;
    return 1;
}

/* ------------------------------------------------------------------ steps from periodicity */

/* Z-array of s[0..n): z[i] = the length of the longest common prefix of s and s[i..]. */
static void z_array(const uint64_t *s, size_t n, uint32_t *z)
{
    if (!n) return;
    z[0] = (uint32_t)n;
    size_t l = 0, r = 0;
    for (size_t i = 1; i < n; i++) {
        size_t k = 0;
        if (i < r) k = z[i - l] < r - i ? z[i - l] : r - i;
        while (i + k < n && s[k] == s[i + k])
            k++;
        z[i] = (uint32_t)k;
        if (i + k > r) l = i, r = i + k;
    }
}

/* The token of target i (x->tk, steps_from_period's: tokens_make). */
static uint64_t tok(const ctx *x, size_t i) { return x->tk[i]; }

/* What a token says of an allocation, the kinds steps_from_period tries in this order:
 *   TOK_EVENTS: its size, and the kernel launches (copies, memsets) and the frees of targets
 *     since the birth before it. Sizes alone repeat within a step wherever a step repeats a
 *     pattern of allocations: a trainer's micro-batches (--accum 2: the update, which allocates
 *     nothing, comes only after the second, so 12 steps were read for 6) or, where every
 *     allocation is one size, any multiple of the step (churn_app's steps of one buffer read as
 *     steps of 2); what happens between two allocations tells those apart;
 *   TOK_SIZE: its size alone (what happens between births may differ from step to step where
 *     the sizes do not: a step that launches its kernels as it goes);
 *   TOK_SHAPE: only what happens since the birth before it: a loop whose sizes change from step
 *     to step (the sequence length drawn anew each step, --seq-jitter) still launches and frees
 *     alike between its allocations. */
enum { TOK_EVENTS, TOK_SIZE, TOK_SHAPE, TOK_KINDS };

/* The tokens of kind kind into x->tk; x->lgap and x->fgap hold, per target, the launches and
 * the frees of targets since the birth before it (tokens_gaps). */
static void tokens_make(ctx *x, int kind)
{
    for (size_t i = 0; i < x->nt; i++) {
        uint64_t size = x->m->allocs[tgt(x, i)].requested, between = (uint64_t)x->lgap[i] << 32 | x->fgap[i];
        /* a mix that keeps size and what happened apart (a mere sum would let them trade) */
        x->tk[i] = kind == TOK_SIZE    ? size
                   : kind == TOK_SHAPE ? between
                                       : size * 0x9e3779b97f4a7c15ull ^ (between + 1) * 0xc2b2ae3d27d4eb4full;
    }
}

/* Per target, the launches and the frees of targets between the birth before it and its own:
 * x->lgap, x->fgap, and x->tk's room. 0, or -1 (no memory). */
static int tokens_gaps(ctx *x)
{
    size_t k = x->nt, nd = 0;
    uint64_t *deaths = malloc((k + 1) * sizeof *deaths);
    x->tk = malloc((k + 1) * sizeof *x->tk);
    x->lgap = malloc((k + 1) * sizeof *x->lgap);
    x->fgap = malloc((k + 1) * sizeof *x->fgap);
    if (!deaths || !x->tk || !x->lgap || !x->fgap) {
        free(deaths);
        return -1;
    }
    for (size_t i = 0; i < k; i++)
        if (x->m->allocs[tgt(x, i)].death) deaths[nd++] = x->m->allocs[tgt(x, i)].death;
    if (nd) gm_sort(deaths, nd, sizeof *deaths, gm_cmp_u64);
    size_t l = 0, d = 0;
    for (size_t i = 0; i < k; i++) {
        uint64_t birth = x->m->allocs[tgt(x, i)].birth;
        uint32_t nl = 0, nf = 0;
        for (; l < x->nlaunches && x->launches[l] < birth; l++)
            if (i) nl++;
        for (; d < nd && deaths[d] < birth; d++)
            if (i) nf++;
        x->lgap[i] = nl, x->fgap[i] = nf;
    }
    free(deaths);
    return 0;
}

/* The last tokens the period is looked for in: steps far longer than this are not found. */
#define PERIOD_WINDOW (1u << 21)
/* An epilogue (an evaluation after the loop) is looked for up to this many tokens long, the
 * period before it in the last PERIOD_TAIL_WINDOW tokens: each length tried costs a pass. */
#define PERIOD_TAIL_MAX 64
#define PERIOD_TAIL_WINDOW (1u << 16)

/* The period of the tokens before e, read from e backwards: the Z-array of the last w of them
 * reversed gives, for each P, how far back the repetition holds; the P that covers most (the
 * smallest among equals: 2P covers as much) and at least pmin long (2 for sizes alone: a run of
 * equal sizes repeats with 2 as with 1; 1 where a token says what happened between births, which
 * tells a step of one buffer from two). *P 0: none (two whole periods do not end at e). 0, or -1
 * (no memory). */
static int period_before(const ctx *x, size_t e, size_t w, size_t pmin, size_t *P, size_t *cover)
{
    size_t W = e < w ? e : w;
    *P = 0, *cover = 0;
    uint64_t *rev = malloc((W + 1) * sizeof *rev);
    uint32_t *z = malloc((W + 1) * sizeof *z);
    if (!rev || !z) {
        free(rev), free(z);
        return -1;
    }
    for (size_t j = 0; j < W; j++)
        rev[j] = tok(x, e - 1 - j);
    z_array(rev, W, z);
    for (size_t p = pmin; p <= W / 2; p++) {
        if (z[p] < p) continue; /* not two whole periods at the end */
        if (z[p] + p > *cover) *cover = z[p] + p, *P = p;
    }
    free(rev), free(z);
    return 0;
}

/* Tokens [b, e) are all one size. */
static int one_size(const ctx *x, size_t b, size_t e)
{
    for (size_t i = b + 1; i < e; i++)
        if (tok(x, i) != tok(x, b)) return 0;
    return 1;
}

/* The period of x->tk (period_before) with at least pmin tokens in it: *P (0: none), the
 * tokens its repetition covers (*cover) back from *e, the end of the loop's tokens: where the
 * repetition from the end does not hold over half of them, the last PERIOD_TAIL_MAX tokens may
 * be an epilogue (steps_from_period). 0, or -1 (no memory). */
static int period_find(const ctx *x, size_t pmin, size_t *P, size_t *cover, size_t *e)
{
    size_t k = x->nt;
    *e = k;
    if (period_before(x, k, PERIOD_WINDOW, pmin, P, cover)) return -1;
    for (size_t t = 1; *cover * 2 < k && t <= PERIOD_TAIL_MAX && t * 4 <= k; t++) {
        size_t p, cv;
        if (period_before(x, k - t, PERIOD_TAIL_WINDOW, pmin, &p, &cv)) return -1;
        /* a run of one token (a loop that only allocates, then one other size) is no loop's
         * steps to end at: it repeats with any period */
        if (cv > *cover && cv * 2 >= k - t && !one_size(x, k - t - p, k - t)) *P = p, *cover = cv, *e = k - t;
    }
    return 0;
}

/* The step's start c0 (a target), moved back over the next step's input: a loop may make the
 * next batch before it drops the last one and the gradients (PyTorch's `x = ...` before
 * `zero_grad()`), so the fewest bytes are alive just after the input's birth. Targets made just
 * before the start, alive at it and freed in the step that follows are the step's, as its
 * range would have them (they were read as the update's: the loop's last input, held after
 * the loop, as optimizer state). Read at the last start with a whole step after it; k: the
 * loop's tokens. */
static size_t input_first(const ctx *x, size_t c0, size_t P, size_t k)
{
    if (k < c0 + 2 * P + 1) return c0;
    size_t cl = c0 + P * ((k - 1 - c0) / P - 1), d = 0;
    uint64_t at = x->m->allocs[tgt(x, cl)].birth, next = x->m->allocs[tgt(x, cl + P)].birth;
    for (; d + 1 < P && d < cl; d++) {
        const gm_alloc *a = &x->m->allocs[tgt(x, cl - 1 - d)];
        if (a->death <= at || a->death >= next) break;
    }
    return c0 >= d ? c0 - d : c0 + P - d;
}

/* The targets made before the first step found (f) and freed before the loop's last birth (k:
 * the loop's tokens): what the parameters and the state are not, a step's. Half a step or more:
 * a first step (which makes the state, so its tokens are not a steady step's) not found, or
 * steps that are parts of steps. */
static size_t missed_before(const ctx *x, size_t f, size_t k)
{
    uint64_t last = x->m->allocs[tgt(x, k - 1)].birth;
    size_t n = 0;
    for (size_t i = 0; i < f; i++)
        if (x->m->allocs[tgt(x, i)].death && x->m->allocs[tgt(x, i)].death < last) n++;
    return n;
}

/* Tokens s0 + 1 .. s0 + n (all before end) are c0 + 1 .. c0 + n. */
static int follows(const ctx *x, size_t s0, size_t c0, size_t n, size_t end)
{
    if (s0 + n >= end) return 0;
    for (size_t i = 1; i <= n; i++)
        if (tok(x, s0 + i) != tok(x, c0 + i)) return 0;
    return 1;
}

/* The steps of tokens of kind `kind` (x->tk) that repeat with period P over the cover tokens
 * before e (period_find) into c->steps (steps_from_period says how); *missed: what they leave
 * out (missed_before). 1, 0 (fewer than 2 steps), or -1 (no memory). */
static int steps_at(ctx *x, int kind, size_t P, size_t cover, size_t e, size_t *missed)
{
    gm_categories *c = x->c;
    const gm_model *m = x->m;
    size_t k = x->nt;
    c->nsteps = 0;
    x->epilogue = e < k ? m->allocs[tgt(x, e)].birth : NO_SEQ;
    k = e; /* the steps are those of the tokens before the epilogue */
    size_t r0 = k - cover;
    while (r0 > 0 && tok(x, r0 - 1) == tok(x, r0 - 1 + P))
        r0--;
    /* the cut: the offset in the period where the fewest bytes made in the periodic part are
     * still alive (what a step hands to the next, a loss or an input, is small). What outlives
     * the last allocation (parameters, gradients, optimizer state, a step's growth) is alive at
     * every cut alike and is left out. One sweep, the living in a heap by death. */
    uint64_t last_birth = m->allocs[tgt(x, k - 1)].birth;
    double *cost = calloc(P, sizeof *cost), *lg = calloc(P, sizeof *lg);
    size_t *ncost = calloc(P, sizeof *ncost);
    heap q = {0};
    int rc = -1;
    if (!cost || !ncost || !lg) goto out;
    uint64_t live = 0;
    for (size_t i = r0; i < k; i++) {
        const gm_alloc *a = &m->allocs[tgt(x, i)];
        while (q.n && q.h[0].death < a->birth)
            live -= heap_pop(&q).bytes;
        cost[(i - r0) % P] += (double)live;
        lg[(i - r0) % P] += x->lgap[i];
        ncost[(i - r0) % P]++;
        if (a->death && a->death <= last_birth) {
            if (heap_push(&q, (heap_ent){a->death, a->size, 0, 0})) goto out;
            live += a->size;
        }
    }
    double lo_cost = -1, hi_cost = -1;
    size_t hi_off = 0;
    for (size_t o = 0; o < P; o++) {
        cost[o] = ncost[o] ? cost[o] / (double)ncost[o] : 0;
        lg[o] = ncost[o] ? lg[o] / (double)ncost[o] : 0;
        if (lo_cost < 0 || cost[o] < lo_cost) lo_cost = cost[o];
        if (cost[o] > hi_cost) hi_cost = cost[o], hi_off = o;
    }
    /* several places may hold about as little (within 1% of the range): an update that frees
     * each state buffer before the next, the first inputs of a forward. The step starts in the
     * last run of such places before the step's highest point (the forward, which piles up
     * activations from there, has none), where it holds least, the latest of equals. */
    double tol = (hi_cost - lo_cost) / 100;
    size_t off, o = hi_off;
    for (size_t n = 0; n < P && cost[o = (o + P - 1) % P] > lo_cost + tol; n++) {}
    off = o;
    for (size_t n = 0; n < P && cost[o = (o + P - 1) % P] <= lo_cost + tol; n++)
        if (cost[o] < cost[off]) off = o;
    /* a step of several passes (micro-batches) holds as little before each, and its passes'
     * highest points are alike: the step begins after its update, the place among those that
     * follows the most launches (the update's kernels, which allocate nothing) */
    for (o = 0; o < P; o++)
        if (cost[o] <= lo_cost + tol && lg[o] > lg[off] + 0.5) off = o;
    size_t c0 = input_first(x, r0 + off, P, k);
    /* the steps before the periodic part, from the last backwards. The first step makes what
     * later ones reuse (gradients, optimizer state, a library's workspace on its first call),
     * so its tokens are a steady step's with more among them: a step starts at the place (one
     * holding a steady step's first token) from which a steady step's tokens are found in order
     * most completely, extra ones skipped; the latest of equals, and at least half of them */
    size_t nfirst = 0, firsts[8];
    for (size_t end = c0; nfirst < 8;) {
        size_t first = end, best = 0, tried = 0;
        /* the latest 64 places holding the first token: a pathological recording (every size
         * alike) stays linear */
        for (size_t s0 = end; s0-- > (end > 3 * P ? end - 3 * P : 0) && tried < 64;) {
            /* what happened before a step's first birth is the step before's tail, which in the
             * first steps is not a steady one's (it made the state): where tokens say that
             * (not sizes alone), a place of the first birth's size (any, where sizes change from
             * step to step) whose next two tokens are the steady step's holds a step's first
             * birth too */
            int lead = tok(x, s0) == tok(x, c0);
            if (!lead && !(kind != TOK_SIZE && follows(x, s0, c0, P < 3 ? P - 1 : 2, end) &&
                           (kind == TOK_SHAPE || m->allocs[tgt(x, s0)].requested == m->allocs[tgt(x, c0)].requested)))
                continue;
            tried++;
            /* counted in sizes where they repeat: the first step's extra allocations change
             * what happens between the births around them, not the steady ones' sizes */
            size_t got = !lead;
            for (size_t i = s0 + !lead, j = c0 + !lead; i < end && j < c0 + P && j < k; i++)
                if (kind == TOK_EVENTS ? m->allocs[tgt(x, i)].requested == m->allocs[tgt(x, j)].requested
                                       : tok(x, i) == tok(x, j))
                    got++, j++;
            if (got > best) best = got, first = s0; /* from the latest: the latest of equals */
        }
        if (first == end || best * 2 < P) break;
        firsts[nfirst++] = first;
        end = first;
    }
    size_t cap = x->steps_cap;
    c->period = P;
    int64_t number = 1;
    for (size_t f = nfirst; f-- > 0;) {
        if (gm_grow((void **)&c->steps, &cap, c->nsteps + 1, sizeof *c->steps)) goto out;
        c->steps[c->nsteps++] = (gm_cat_step){number++, m->allocs[tgt(x, firsts[f])].birth, NO_SEQ, NO_SEQ, 0, 0, 0};
    }
    for (size_t i = c0; i < k; i += P) {
        if (gm_grow((void **)&c->steps, &cap, c->nsteps + 1, sizeof *c->steps)) goto out;
        c->steps[c->nsteps++] = (gm_cat_step){number++, m->allocs[tgt(x, i)].birth, NO_SEQ, NO_SEQ, 0, 0, 0};
    }
    x->steps_cap = cap;
    for (size_t j = 0; j + 1 < c->nsteps; j++)
        c->steps[j].end = c->steps[j + 1].start - 1;
    *missed = missed_before(x, nfirst ? firsts[nfirst - 1] : c0, k);
    rc = c->nsteps >= 2 ? 1 : 0;
out:
    free(cost), free(ncost), free(lg), free(q.h);
    return rc;
}

/* Steps from the recording's own periodicity. 1 found, 0 none (c->why says why), -1 no memory.
 * Every allocation is a token, in birth order (tokens_make: its size and what happened since the
 * birth before it, else its size alone, else what happened alone: the first kind whose steps
 * leave out less than half a step's allocations, missed_before; where none does, the steps of
 * the one that leaves out fewest, and c->doubt says so). Steady steps allocate alike, so read
 * from the end backwards the tokens repeat with the step's period P (period_before), and the
 * repetition is then followed back through the whole recording. What the program does once after its loop (an evaluation, a
 * checkpoint's copy) ends the tokens with some that do not repeat: where the repetition from
 * the end does not hold over half the recording, the period is looked for before each of the
 * last PERIOD_TAIL_MAX tokens too (period_find), and the place it covers most from (the latest
 * of equals; a period not one token repeated) is where the loop ended: what is made from there
 * on is after the steps (x->epilogue), as what is made after a "step N" range's last one. The
 * first step makes what later steps reuse (gradients, optimizer state), so its tokens differ:
 * it is found before the periodic part as the place from which a steady step's tokens are found
 * most completely. */
static int steps_from_period(ctx *x)
{
    gm_categories *c = x->c;
    size_t k = x->nt;
    x->epilogue = NO_SEQ;
    if (k < 6) {
        if (x->segments)
            snprintf(c->why, sizeof c->why, "the device's allocations are PyTorch's segments (its cache, "
                     "\"other\") and %zu beside them; PyTorch's tensors are categorised in its own view", k);
        else
            snprintf(c->why, sizeof c->why, "the recording has %zu device allocations: too few for steps to "
                     "repeat", k);
        return 0;
    }
    if (tokens_gaps(x)) return -1;
    /* the first kind of token whose steps leave less than half a step's allocations out (made
     * before the first step and freed in the loop); else the one that leaves fewest, and
     * c->doubt says so */
    size_t bP = 0, bcover = 0, be = 0, bmissed = SIZE_MAX;
    int best = -1, some = 0;
    for (int kd = 0; kd < TOK_KINDS; kd++) {
        size_t P, cover, e, missed = 0;
        tokens_make(x, kd);
        if (period_find(x, kd == TOK_EVENTS ? 1 : 2, &P, &cover, &e)) return -1;
        /* what happens between births alone, one token repeated, is any loop's */
        if (!P || (kd == TOK_SHAPE && one_size(x, e - cover, e))) continue;
        some = 1;
        int rc = steps_at(x, kd, P, cover, e, &missed);
        if (rc < 0) return -1;
        if (rc && missed * 2 < P) return 1;
        if (rc && missed < bmissed) best = kd, bP = P, bcover = cover, be = e, bmissed = missed;
    }
    if (best >= 0) {
        tokens_make(x, best);
        if (steps_at(x, best, bP, bcover, be, &bmissed) < 0) return -1;
        snprintf(c->doubt, sizeof c->doubt, "%zu allocations made before the first step found are freed "
                 "before the loop ends, as a step's (%zu in each): the steps found may be parts of steps "
                 "(a step's layers), or a first step, unlike the others, not counted", bmissed, bP);
        return 1;
    }
    c->nsteps = 0;
    x->epilogue = NO_SEQ;
    if (!some)
        snprintf(c->why, sizeof c->why, "no repeating pattern of allocations: the last two steps of the "
                 "recording differ (record at least 3 steps of a loop whose steps allocate alike)");
    else
        snprintf(c->why, sizeof c->why, "only one step repeats in the recording");
    return 0;
}

/* What an allocation's stack says about the backward, in a Python program: PyTorch runs the
 * backward on its autograd engine's own thread, whose allocations carry no Python frame while
 * the forward's and the update's do, and the first gradient (of the loss) is made inside
 * `backward` (torch/_tensor.py, torch/autograd/). 1: backward; 0: nothing said. */
static int stack_says_backward(const gm_model *m, uint32_t stack)
{
    size_t n = 0;
    gm_stack_frame(m, stack, 0, &n);
    int python = 0;
    for (size_t i = 0; i < n; i++) {
        long f = gm_stack_frame(m, stack, i, NULL);
        if (f < 0 || !m->frames[f].python) continue;
        python = 1;
        const gm_frame *fr = &m->frames[f];
        if (fr->function && fr->file && !strcmp(fr->function, "backward") &&
            (strstr(fr->file, "torch/_tensor.py") || strstr(fr->file, "torch/autograd/")))
            return 1;
    }
    return !python;
}

/* The last step's end. No next step takes what comes after it:
 *   - the frees of what it made (the loss, the last input) may come after its last range
 *     closed; they end with the step, up to the teardown (the first free, after the recording's
 *     last allocation, of something made before the last step began): x->deaths_end, the last
 *     of them (categorise reads such a free as the step's; phases_from_lifetimes too);
 *   - what is made after it: where the steps come from ranges, its range's end is the step's,
 *     and an allocation made after that is made after the steps (an evaluation or a
 *     checkpoint's copy after the training loop: its output was read as optimizer state, its
 *     peak as the step's); inferred steps have no end but their allocations': every one made
 *     up to the last free of what the step made, and ls->end is x->deaths_end; where the
 *     tokens end with some that do not repeat (x->epilogue: an evaluation after the loop), the
 *     last step ends before the first of them, as a range would. */
static void end_last_step(ctx *x)
{
    gm_categories *c = x->c;
    const gm_model *m = x->m;
    x->deaths_end = NO_SEQ;
    if (!c->nsteps || !x->nt) return;
    gm_cat_step *ls = &c->steps[c->nsteps - 1];
    uint64_t teardown = NO_SEQ;
    for (size_t j = 0; j < x->nlate && m->allocs[x->late[j]].birth < ls->start; j++)
        if (m->allocs[x->late[j]].death < teardown) teardown = m->allocs[x->late[j]].death;
    /* inferred steps followed by an epilogue end where it begins, as a range ends */
    int ranged = c->steps_from == GM_CSRC_PHASES;
    if (c->steps_from == GM_CSRC_INFERENCE && x->epilogue != NO_SEQ) ls->end = x->epilogue - 1, ranged = 1;
    if (ls->end < ls->start) ls->end = ls->start;
    uint64_t end = ls->end;
    size_t k = 0, hi = x->nt; /* the first target born in the last step (births come in order) */
    while (k < hi) {
        size_t mid = k + (hi - k) / 2;
        if (m->allocs[tgt(x, mid)].birth < ls->start) k = mid + 1;
        else hi = mid;
    }
    for (; k < x->nt; k++) {
        const gm_alloc *a = &m->allocs[tgt(x, k)];
        if (ranged && a->birth > ls->end) break;
        if (a->birth > end) end = a->birth;
        if (a->death && a->death < teardown && a->death > end) end = a->death;
    }
    x->deaths_end = end;
    if (!ranged) ls->end = end;
}

/* A birth (delta > 0) or free of what a step makes and frees, its birth's seq beside. */
typedef struct life_ev {
    uint64_t seq;
    int64_t delta;
    uint64_t birth;
} life_ev;

/* The first target born at or after seq (births come in order). */
static size_t target_from(const ctx *x, uint64_t seq)
{
    size_t lo = 0, hi = x->nt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->m->allocs[tgt(x, mid)].birth < seq) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Whether each pass of step s after its first (x->c->passes from n0 on; next: the step after's
 * start; freed_by: the bound of its own frees) begins as the step does: its sizes, from its
 * start, those of the step's from its start for half its allocations or more, those it frees. Micro-batches do (a pass's forward is the first's;
 * the first one's backward may make more: with gradients set to none, the gradients, kept
 * through the later passes); the layers of a forward whose activations are offloaded rise and
 * fall alike, but the step begins with the embedding, not a layer. A pass is found at the first
 * birth where little is alive, which may be the last of the pass before (set to none, the last
 * gradient made, when the first pass's activations are freed): it begins where the step's
 * sizes repeat longest, among its first half's births (the first 64). */
static int passes_repeat(ctx *x, const gm_cat_step *s, size_t n0, uint64_t next, uint64_t freed_by)
{
    gm_categories *c = x->c;
    size_t t0 = target_from(x, s->start);
    for (size_t i = n0 + 1; i < c->npasses; i++) {
        size_t b = target_from(x, c->passes[i].start);
        size_t e = i + 1 < c->npasses ? target_from(x, c->passes[i + 1].start) : target_from(x, next);
        size_t best = 0, at = b;
        /* at most 64 places, as the first step's search: a pathological recording stays linear */
        for (size_t d = b; d < e && (d - b) * 2 < e - b && d < b + 64 && best < e - d; d++) {
            size_t j = 0;
            while (d + j < e && x->m->allocs[tgt(x, t0 + j)].requested == x->m->allocs[tgt(x, d + j)].requested)
                j++;
            if (j > best) best = j, at = d;
        }
        size_t own = 0; /* the pass's own: not what the step keeps (the first update's state) */
        for (size_t d = b; d < e; d++)
            own += x->m->allocs[tgt(x, d)].death && x->m->allocs[tgt(x, d)].death < freed_by;
        if (best * 2 < own) return 0;
        c->passes[i].start = x->m->allocs[tgt(x, at)].birth;
    }
    return 1;
}

/* The forward-backward passes of inferred step s (micro-batches: --accum K makes K forwards and
 * backwards before one update), from e[0, ne), the births (delta > 0) and frees of what the step
 * makes and frees, in order, the highest of whose sum is top. A pass rises to half of top or more
 * from where nearly nothing it made is alive (low): it begins at the first birth
 * at such a low after the pass before (the step's start for the first), its backward at its own
 * highest point; a rise to less (the update's buffers) is the pass before's tail. Two or more:
 * into x->c->passes, s->pass and s->npass, where each pass begins as the step does
 * (passes_repeat); else the step keeps its single backward. 0, or -1 (no memory). */
static int passes_of(ctx *x, gm_cat_step *s, const life_ev *e, size_t ne, int64_t top, uint64_t next,
                     uint64_t freed_by)
{
    gm_categories *c = x->c;
    size_t n0 = c->npasses, cap = c->npasses;
    /* low: the least alive at a birth once the step was high, what a step carries through its
     * passes (its input, a loss), and a sixty-fourth of the top: gpt2's first layer's
     * activations, alive to the end of its backward, are a sixteenth */
    int64_t live = 0, low = -1, hi = -1;
    for (size_t i = 0; i < ne; i++) {
        if (hi * 2 >= top && e[i].delta > 0 && (low < 0 || live < low)) low = live;
        live += e[i].delta;
        if (live > hi) hi = live;
    }
    if (low < 0) return 0;
    low += top / 64, live = 0, hi = -1;
    uint64_t cand = s->start, hi_seq = NO_SEQ; /* the next pass's start; the current rise's top */
    int have_cand = 1;
    for (size_t i = 0; i <= ne; i++) {
        /* a low (or the end) closes the rise since the last one: a pass where it was high */
        if (i == ne || (e[i].delta > 0 && live <= low)) {
            if (hi * 2 >= top && hi_seq != NO_SEQ) {
                if (gm_grow((void **)&c->passes, &cap, c->npasses + 1, sizeof *c->passes)) return -1;
                c->passes[c->npasses++] = (gm_cat_pass){cand, hi_seq};
                have_cand = 0;
            }
            if (i == ne) break;
            if (!have_cand) cand = e[i].seq, have_cand = 1;
            hi = -1, hi_seq = NO_SEQ;
        }
        live += e[i].delta;
        if (e[i].delta > 0 && live > hi) hi = live, hi_seq = e[i].seq;
    }
    if (c->npasses - n0 < 2 || !passes_repeat(x, s, n0, next, freed_by)) {
        c->npasses = n0;
        return 0;
    }
    s->pass = (uint32_t)n0, s->npass = (uint32_t)(c->npasses - n0);
    return 0;
}

static inline size_t steps_started(const gm_categories *c, uint64_t seq, size_t from);

/* The sizes of the parameters (targets made before the first step and kept to the end) into
 * *sizes, and into *growth the sizes kept from two steps or more (the value: the number of
 * steps in the high 32 bits), for backward_before_grads. 0, or -1 (no memory). */
static int param_sizes_early(const ctx *x, u64map *sizes, u64map *growth)
{
    const gm_model *m = x->m;
    size_t i = 0;
    for (; i < x->nt && m->allocs[tgt(x, i)].birth < x->c->steps[0].start; i++) {
        const gm_alloc *a = &m->allocs[tgt(x, i)];
        if (kept_to_end(x, a) && u64map_put(sizes, a->requested, 1)) return -1;
    }
    if (keys_add(sizes, &x->param_forms)) return -1; /* ... and in their other forms */
    /* kept: never freed, or alive past the end of the step after its own (the last steps'
     * teardown frees are no sign: they come after the last birth). Low 32 bits: the last step
     * seen + 1; high: the steps counted (categorise's repeats) */
    for (size_t j = 0; i < x->nt; i++) {
        const gm_alloc *a = &m->allocs[tgt(x, i)];
        j = steps_started(x->c, a->birth, j);
        if (a->death && (j >= x->c->nsteps || a->death <= x->c->steps[j].end)) continue;
        uint64_t *v = u64map_get(growth, a->requested);
        if (!v) {
            if (u64map_put(growth, a->requested, (uint64_t)j | 1ull << 32)) return -1;
        } else if ((*v & 0xffffffffu) != j) {
            *v = (uint64_t)j | ((*v >> 32) + 1) << 32;
        }
    }
    return 0;
}

/* Size `bytes` is kept from two steps or more (param_sizes_early's growth): a step's
 * growth (a planted leak: each step's losses kept), not a gradient, which kept is made once. */
static inline int grows(const u64map *growth, uint64_t bytes)
{
    const uint64_t *v = u64map_get(growth, bytes);
    return v && (*v >> 32) >= 2;
}

/* The backward of an inferred step of one pass where its highest point is not its start: where
 * the backward makes its activations again (--recompute) or brings them back (--offload
 * activations), the step's own allocations are highest in the backward, and what the forward
 * left for it (the logits) read as the forward's temporaries, what the backward made again as
 * activations. A backward makes gradients: a parameter's size, made on top of what the step
 * holds (something made after its first free: the forward's, not the batch's) and outliving all
 * of it (kept, or, set to none, freed in the update; kept, not of a size kept from two steps or
 * more: growth, such as a planted leak's losses of a bias's size). Where a step makes
 * one before its highest point, its backward begins at the highest point of the last rise
 * before that gradient (the first gradient tensor on top of every activation: after the least
 * alive that follows the highest point before it, a birth a free follows; where none does, the
 * highest point itself, on top of logits larger than any layer's insides), and *nfwd is the
 * number of the step's own
 * births up to there; a step that shows no such gradient (kept, they are made in the first
 * step only) begins its backward at its own nfwd-th birth where that comes before its highest
 * point (steps alike: so are their forwards). params: the parameters' sizes; [lo, hi): the
 * step's (or the pass's) births; freed_by: the bound of its own frees; e[0, ne): the step's own
 * births and frees (phases_from_lifetimes). The pivot to take. */
static uint64_t backward_before_grads(const ctx *x, const u64map *params, const u64map *growth, uint64_t lo,
                                      uint64_t hi, uint64_t freed_by, const life_ev *e, size_t ne, uint64_t pivot,
                                      size_t *nfwd)
{
    const gm_model *m = x->m;
    /* the latest free of the step's own made so far, of those made after its first free (the
     * forward's: not the batch, made before any), and its first free */
    uint64_t grad = NO_SEQ, last = 0, last_fwd = 0, first = NO_SEQ;
    for (size_t q = target_from(x, lo); q < x->nt && m->allocs[tgt(x, q)].birth < pivot; q++) {
        const gm_alloc *a = &m->allocs[tgt(x, q)];
        int own = a->death && a->death < freed_by;
        if (last_fwd > a->birth && (!own || a->death > last) && u64map_get(params, a->requested) &&
            (own || !grows(growth, a->requested))) {
            grad = a->birth;
            break;
        }
        if (!own) continue;
        if (a->death > last) last = a->death;
        if (first < a->birth && a->death > last_fwd) last_fwd = a->death;
        if (a->death < first) first = a->death;
    }
    if (grad == NO_SEQ) {
        for (size_t i = 0, n = 0; *nfwd && i < ne && e[i].seq < pivot; i++)
            if (e[i].delta > 0 && e[i].birth >= lo && ++n == *nfwd) return e[i].seq;
        return pivot;
    }
    /* the highest point before it, the least after that, then the highest peak after that: a
     * forward whose layers make their insides again in the backward makes and frees them in the
     * forward too, often higher than the logits on top of what it keeps. What [lo, hi) made only
     * (a pass's). */
    int64_t live = 0, top = -1, low = -1, top2 = -1, plive = -1;
    uint64_t at = NO_SEQ, top_at = NO_SEQ, peak = NO_SEQ;
    size_t n = 0, nat = 0, ntop = 0, npeak = 0, ng = 0, ilow = 0;
    while (ng < ne && e[ng].seq < grad)
        ng++;
    for (size_t i = 0; i < ng; i++) {
        if (e[i].birth < lo || e[i].birth >= hi) continue;
        live += e[i].delta;
        n += e[i].delta > 0;
        if (e[i].delta > 0 && live >= top) /* the last of alike layers */
            top = live, low = live, ilow = i, top_at = e[i].seq, ntop = n;
        if (live < low) low = live, ilow = i;
    }
    /* a peak: a birth the next event of frees (the backward's first allocation is followed by
     * the frees of what the forward saved for it; a birth right before the gradient, the
     * gradient's input, is not one) */
    live = 0, n = 0;
    for (size_t i = 0; i < ng; i++) {
        if (e[i].birth < lo || e[i].birth >= hi) continue;
        live += e[i].delta;
        n += e[i].delta > 0;
        if (e[i].delta > 0) {
            peak = i > ilow ? e[i].seq : NO_SEQ, plive = live, npeak = n;
        } else if (peak != NO_SEQ) {
            if (plive > top2) top2 = plive, at = peak, nat = npeak;
            peak = NO_SEQ;
        }
    }
    /* no peak after the fall: the highest point is the last rise's own (the logits' gradient
     * on top of logits larger than any layer's insides: gpt2 at -B 4 -T 64) */
    if (at == NO_SEQ) at = top_at, nat = ntop;
    if (at == NO_SEQ) return pivot;
    *nfwd = nat;
    return at;
}

/* The backward of an inferred pass, from bwd (its first allocation on top of every activation)
 * back over the copies of parameters it makes first: a backward that reads its layers'
 * parameters in a form the ops cannot read (bf16 weights, --param-dtype bf16; ZeRO-3's shards)
 * makes full fp32 copies of the first layers it works on, unit by unit, before the gradient of
 * the logits; each of a parameter's size, freed in the backward once its layer is done. Births
 * of a parameter's size right before bwd, with no free of the pass's own in between (after the
 * forward's last free: the loss's) and outliving the backward's first free of something made
 * before them, are the backward's: else they read as activations (made before the backward,
 * freed in it), 72 of 818 allocations at --param-dtype bf16. A Python
 * program's stacks say where its backward begins (phases_from_lifetimes): not asked there.
 * params: the parameters' sizes; lo: the pass's start; e[0, ne): the step's own births and
 * frees. The backward's new start. */
static uint64_t backward_copies(const ctx *x, const u64map *params, const life_ev *e, size_t ne, uint64_t lo,
                                uint64_t bwd)
{
    size_t i = 0, ib;
    while (i < ne && e[i].seq < bwd)
        i++;
    ib = i;
    uint64_t at = bwd;
    /* at most 256 (a unit's parameters, a few units ahead): a pathological recording stays linear */
    for (size_t n = 0; i-- > 0 && n < 256 && e[i].birth >= lo; n++) {
        const gm_alloc *a = &x->m->allocs[tgt(x, target_from(x, e[i].birth))];
        /* a parameter brought from the host (--offload params) or made from one (ZeRO-3's
         * gathered bf16 shard) to be copied, freed before the backward: the copies' staging,
         * not the pass's own */
        if ((u64map_get(&x->brought, a->birth) || u64map_get(&x->param_copies, a->birth)) && a->death && a->death < bwd) {
            if (e[i].delta > 0) at = e[i].seq;
            continue;
        }
        if (e[i].delta < 0 || !u64map_get(params, a->requested)) break;
        /* a copy lives through its layer's backward, past the first free of something made
         * before it (the logits', first); the forward's last activation, of a parameter's size
         * (a square layer's output), is freed first: no copy */
        int outlives = 0;
        for (size_t k = ib; k < ne && e[k].seq < a->death && !outlives; k++)
            outlives = e[k].delta < 0 && e[k].birth >= lo && e[k].birth < a->birth;
        if (!outlives) break;
        at = e[i].seq;
    }
    return at;
}

/* Forward, backward and update of each step from its own allocations (inference). The number
 * of steps that show a forward and a backward, or -1 (no memory): something made before the
 * step's highest point is freed after it, and something is made between the two (the backward
 * makes its gradients as it frees what the forward saved; a loop that makes a batch of buffers
 * and frees them, or keeps them, makes nothing after its highest point). */
static long phases_from_lifetimes(ctx *x)
{
    gm_categories *c = x->c;
    const gm_model *m = x->m;
    life_ev *e = NULL;
    size_t cap = 0;
    size_t k0 = 0; /* first target born in the current step */
    size_t nfwd = 0; /* backward_before_grads' */
    u64map params = {0}, growth = {0}; /* ... and the parameters' sizes, the steps' growth */
    long shaped = 0;
    if (c->nsteps && param_sizes_early(x, &params, &growth)) goto nomem;
    for (size_t j = 0; j < c->nsteps; j++) {
        gm_cat_step *s = &c->steps[j];
        uint64_t next = j + 1 < c->nsteps ? c->steps[j + 1].start : s->end + 1;
        /* the last step's own frees may come after its end (end_last_step) */
        uint64_t freed_by =
            j + 1 < c->nsteps || x->deaths_end <= s->end || x->deaths_end == NO_SEQ ? next : x->deaths_end + 1;
        size_t ne = 0;
        while (k0 < x->nt && m->allocs[tgt(x, k0)].birth < s->start)
            k0++;
        size_t k = k0;
        for (; k < x->nt && m->allocs[tgt(x, k)].birth < next; k++) {
            const gm_alloc *a = &m->allocs[tgt(x, k)];
            if (!a->death || a->death >= freed_by) continue;
            if (gm_grow((void **)&e, &cap, ne + 2, sizeof *e)) goto nomem;
            e[ne++] = (life_ev){a->birth, (int64_t)a->size, a->birth};
            e[ne++] = (life_ev){a->death, -(int64_t)a->size, a->birth};
        }
        /* seqs are distinct events: sorting by seq is the recorded order */
        if (ne) gm_sort(e, ne, sizeof *e, gm_cmp_u64); /* e is NULL when nothing was found */
        int64_t live = 0, top = -1;
        uint64_t pivot = NO_SEQ;
        for (size_t i = 0; i < ne; i++) {
            live += e[i].delta;
            if (e[i].delta > 0 && live > top) top = live, pivot = e[i].seq;
        }
        s->bwd = pivot;
        s->opt = NO_SEQ;
        s->pass = s->npass = 0;
        if (pivot == NO_SEQ) continue;
        if (passes_of(x, s, e, ne, top, next, freed_by)) goto nomem;
        if (!s->npass) pivot = backward_before_grads(x, &params, &growth, s->start, next, freed_by, e, ne, pivot, &nfwd);
        /* each pass's backward: from its highest point, or earlier where a Python program's
         * stacks say so; the step's ends with the last free of what its last pass made before
         * that point */
        uint32_t np = s->npass ? s->npass : 1;
        uint64_t bwd_end = pivot;
        int shows = 0;
        for (uint32_t pi = 0; pi < np; pi++) {
            gm_cat_pass one = {s->start, pivot}, *p = s->npass ? &c->passes[s->pass + pi] : &one;
            if (s->npass)
                p->bwd = backward_before_grads(x, &params, &growth, p->start, pi + 1 < np ? p[1].start : next, freed_by, e, ne,
                                               p->bwd, &nfwd);
            if (!x->python) p->bwd = backward_copies(x, &params, e, ne, p->start, p->bwd);
            if (x->python)
                for (size_t q = k0; q < x->nt && m->allocs[tgt(x, q)].birth < p->bwd; q++)
                    if (m->allocs[tgt(x, q)].birth >= p->start && stack_says_backward(m, m->allocs[tgt(x, q)].stack)) {
                        p->bwd = m->allocs[tgt(x, q)].birth;
                        break;
                    }
            uint64_t pend = p->bwd, pnext = pi + 1 < np ? p[1].start : next;
            for (size_t i = 0; i < ne; i++)
                if (e[i].delta < 0 && e[i].birth >= p->start && e[i].birth < p->bwd && e[i].seq > pend) pend = e[i].seq;
            for (size_t q = k0; !shows && pend > p->bwd && q < x->nt && m->allocs[tgt(x, q)].birth < pend; q++)
                if (m->allocs[tgt(x, q)].birth > p->bwd && m->allocs[tgt(x, q)].birth < pnext) shows = 1;
            if (pi + 1 == np) bwd_end = pend;
            if (!pi) s->bwd = p->bwd;
        }
        shaped += shows;
        /* the update: the first launch or allocation after the backward's last free */
        uint64_t opt = launch_after(x, bwd_end);
        for (size_t q = k0; q < x->nt && m->allocs[tgt(x, q)].birth < next; q++)
            if (m->allocs[tgt(x, q)].birth > bwd_end) {
                if (m->allocs[tgt(x, q)].birth < opt) opt = m->allocs[tgt(x, q)].birth;
                break;
            }
        if (opt < next && opt > bwd_end) s->opt = opt;
    }
    free(e);
    u64map_free(&params);
    u64map_free(&growth);
    return shaped;
nomem:
    free(e);
    u64map_free(&params);
    u64map_free(&growth);
    return -1;
}

/* Inferred steps none of which shows a forward and a backward (phases_from_lifetimes): a loop
 * that makes and keeps, or makes a batch of buffers and frees them, saves nothing for a backward.
 * Its steps have no backward and no update (every allocation in one is the forward's), and
 * nothing is an activation (category_decide). */
static void no_backward(ctx *x)
{
    gm_categories *c = x->c;
    c->no_backward = 1;
    for (size_t j = 0; j < c->nsteps; j++)
        c->steps[j].bwd = c->steps[j].opt = NO_SEQ;
}

/* Inferred steps of a recording that shows no optimizer.step() ran (no_optimizer_step): what
 * follows the backward's last free is no update, the backward's still, and nothing made there
 * is optimizer state (a loop's accumulator made once after its frees read as 32 KiB of it). */
static void no_update(ctx *x)
{
    gm_categories *c = x->c;
    c->no_update = 1;
    for (size_t j = 0; j < c->nsteps; j++)
        c->steps[j].opt = NO_SEQ;
}

/* ------------------------------------------------------------------ where a seq falls */

/* How many steps start at or before seq, looked for from step `from` on: the steps before it
 * are known to (a caller walking seqs upwards passes the last answer). Galloping from there, so
 * a seq in the same or the next step costs a comparison or two, not a search of every step. */
static inline size_t steps_started(const gm_categories *c, uint64_t seq, size_t from)
{
    /* the last answer's step or the next one (the gallop's first two answers, sooner) */
    if (from && from <= c->nsteps && c->steps[from - 1].start <= seq) {
        if (from == c->nsteps || c->steps[from].start > seq) return from;
        if (from + 1 == c->nsteps || c->steps[from + 1].start > seq) return from + 1;
    }
    if (from > c->nsteps || (from && c->steps[from - 1].start > seq)) from = 0;
    size_t lo = from, hi = from, stride = 1;
    while (hi < c->nsteps && c->steps[hi].start <= seq) {
        lo = hi + 1;
        hi += stride, stride *= 2;
    }
    if (hi > c->nsteps) hi = c->nsteps;
    while (lo < hi) { /* steps[lo - 1] starts at or before seq, steps[hi] after it */
        size_t mid = lo + (hi - lo) / 2;
        if (c->steps[mid].start <= seq) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The pass of step s that seq falls in (the last one begun by seq), or NULL: none, or before
 * the first. */
static inline const gm_cat_pass *pass_at(const gm_categories *c, const gm_cat_step *s, uint64_t seq)
{
    const gm_cat_pass *p = NULL;
    for (uint32_t i = 0; i < s->npass && c->passes[s->pass + i].start <= seq; i++)
        p = &c->passes[s->pass + i];
    return p;
}

/* The phase of seq in step s, seq at or after its start: in a step of several passes, the
 * forward or backward of the pass it falls in. */
static inline int step_phase(const gm_categories *c, const gm_cat_step *s, uint64_t seq)
{
    if (s->opt != NO_SEQ && seq >= s->opt) return GM_CPH_OPT;
    if (s->npass) {
        const gm_cat_pass *p = pass_at(c, s, seq);
        return p && seq >= p->bwd ? GM_CPH_BWD : GM_CPH_FWD;
    }
    if (s->bwd != NO_SEQ && seq >= s->bwd) return GM_CPH_BWD;
    return GM_CPH_FWD;
}

/* gm_category_phase_at, with lo = steps_started(c, seq, ...). */
static inline int phase_in(const gm_categories *c, uint64_t seq, size_t lo, long *step)
{
    *step = -1;
    if (!lo) return GM_CPH_PRE;
    const gm_cat_step *s = &c->steps[lo - 1];
    if (lo == c->nsteps && seq > s->end) return GM_CPH_POST;
    *step = (long)(lo - 1);
    return step_phase(c, s, seq);
}

int gm_category_phase_at(const gm_categories *c, uint64_t seq, long *step)
{
    return phase_in(c, seq, steps_started(c, seq, 0), step);
}

/* The phase of an event: its range's own (fwd / bwd / opt in its path) when phases come from
 * ranges — a second micro-batch's forward comes after the first one's backward began — else
 * its place in its step. *from: where to look for its step from (steps_started), then its own. */
static inline __attribute__((always_inline)) int event_phase(ctx *x, const gm_categories *c, range_memo *mm,
                                                             uint64_t seq, uint32_t range, int birth, long *step,
                                                             size_t *from)
{
    *from = steps_started(c, seq, *from);
    int ph = phase_in(c, seq, *from, step);
    /* made between two steps' ranges: the next step's input, made before its range opened */
    if (birth && *step >= 0 && (size_t)*step + 1 < c->nsteps && seq > c->steps[*step].end) {
        ++*step;
        return GM_CPH_FWD;
    }
    if (c->phases_from != GM_CSRC_PHASES || *step < 0 || !range) return ph;
    int64_t st;
    int rp;
    range_info(x, mm, range, &st, &rp);
    return rp ? rp : ph;
}

/* event_phase's last answer for births (or deaths), and the seqs [lo, hi) of its range it holds
 * for: none of what event_phase reads changes in between (the steps' starts; the end, backward
 * and update of the step that holds them). Consecutive births mostly fall in the same range and
 * the same stretch of a step, and so do the deaths of consecutive births: the answer is then a
 * comparison or three, not a search of the steps and the phase worked out again. */
typedef struct phase_memo {
    uint32_t range;
    uint64_t lo, hi; /* lo > hi: nothing yet */
    int phase;
    long step;
    size_t from;
} phase_memo;
#define PHASE_MEMO_NONE ((phase_memo){0, 1, 0, 0, -1, 0})

static inline __attribute__((always_inline)) int event_phase_memo(ctx *x, const gm_categories *c, range_memo *mm,
                                                                  phase_memo *pm, uint64_t seq, uint32_t range,
                                                                  int birth, long *step, size_t *from)
{
    if (range == pm->range && seq >= pm->lo && seq < pm->hi) {
        *step = pm->step, *from = pm->from;
        return pm->phase;
    }
    int ph = event_phase(x, c, mm, seq, range, birth, step, from);
    /* where the answer can change: the start of the step seq is in (or 0 before the first) and
     * the next one's, and inside the step its backward, its update and the seq after its end
     * (NO_SEQ's wraps to 0, which bounds nothing) */
    uint64_t lo = 0, hi = *from < c->nsteps ? c->steps[*from].start : NO_SEQ;
    if (*from) {
        const gm_cat_step *s = &c->steps[*from - 1];
        /* in a step of passes, the pass seq is in: its start, backward and the next one's */
        const gm_cat_pass *p = s->npass ? pass_at(c, s, seq) : NULL;
        uint64_t np = 0; /* the next pass's start (the first's before it) */
        if (s->npass) {
            const gm_cat_pass *first = &c->passes[s->pass];
            np = !p ? first->start : p + 1 < first + s->npass ? p[1].start : 0;
        }
        uint64_t t[7] = {s->start, s->bwd, s->opt, s->end + 1, p ? p->start : 0, p ? p->bwd : 0, np};
        for (int k = 0; k < 7; k++) {
            if (t[k] <= seq && t[k] > lo) lo = t[k];
            if (t[k] > seq && t[k] < hi) hi = t[k];
        }
    }
    *pm = (phase_memo){range, lo, hi, ph, *step, *from};
    return ph;
}

/* ------------------------------------------------------------------ the categories */

static int by_name(const bytemap *params, const char *n)
{
    if (!strncmp(n, "grad.", 5)) return GM_CAT_GRAD;
    if (bytemap_get_str(params, n)) return GM_CAT_PARAM;
    const char *d1 = strchr(n, '.'), *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
    if (d2 && d2[1] && bytemap_get_str(params, d2 + 1)) return GM_CAT_OPT;
    if (!strncmp(n, "adam.", 5) || !strncmp(n, "adamw.", 6) || strstr(n, "exp_avg")) return GM_CAT_OPT;
    if (strcasestr(n, "workspace")) return GM_CAT_WORKSPACE;
    return GM_NCATS;
}

/* Names: X is a parameter when some "grad.X" (or "grad.shard.X") is named. 0, or -1 (no memory). */
static int note_grad_name(ctx *x, uint32_t name)
{
    if (u64map_get(&x->seen, name)) return 0;
    if (u64map_put(&x->seen, name, 1)) return -1;
    const char *n = gm_str(x->m, name);
    if (!n || strncmp(n, "grad.", 5)) return 0;
    n += 5;
    if (!strncmp(n, "shard.", 6) && n[6]) n += 6;
    return *n && !bytemap_get_str(&x->params, n) && bytemap_put_str(&x->params, n, 1) ? -1 : 0;
}

/* What category_decide reads of a target's birth and death (event_phase), worked out by
 * categorise: the phases (GM_CPH_*: bp * 5 + dp), and where the death's step lies from the
 * birth's. */
enum { SH_DEATH_STEP = 1 << 5, /* the death is in a step */
       SH_LATER_STEP = 1 << 6, /* ... after the birth's; with no death in a step (after the last,
                                * or none): the birth is in the last of two steps or more */
       SH_KEPT = 1 << 7 };     /* ... two or more steps after it */
static uint8_t shape_of(int bp, int dp, long bs, long ds, long last)
{
    return (uint8_t)((bp * 5 + dp) | (ds >= 0 ? SH_DEATH_STEP : 0) |
                     (ds > bs || (ds < 0 && last >= 1 && bs == last) ? SH_LATER_STEP : 0) |
                     (ds >= bs + 2 ? SH_KEPT : 0));
}

/* The last birth of as[0..n) (in birth order) in a range of step `step`'s update, 0: none. */
static uint64_t last_update_birth(ctx *x, const gm_alloc *as, size_t n, int64_t step)
{
    range_memo mm = {0};
    for (size_t i = n; i-- > 0;) {
        int64_t st;
        int ph;
        range_info(x, &mm, as[i].range, &st, &ph);
        if (st == step && ph == GM_CPH_OPT) return as[i].birth;
    }
    return 0;
}

/* The OOM the run stopped at: the first one after which no step began (a program that caught
 * an OOM and went on stepping did not stop there) and its step's update made nothing after it
 * (a program that caught it in its last step and ran the step again with a smaller batch went
 * on to the update: it was said to stop there; the update's ranges say so, those of PyTorch's
 * tensors too in the device's view, whose allocations are its segments), 0: none. What was
 * alive then was not freed where its phases would have freed it: the frees after it are the
 * unwinding's, and what lives to the end was kept by the stop, not by the program (see
 * is_cut). The update's last allocation is looked for once, from the end. */
static uint64_t cut_of(ctx *x)
{
    const gm_model *m = x->m;
    const gm_categories *c = x->c;
    uint64_t upd = NO_SEQ; /* the last step's update's last birth (0: none), NO_SEQ: not read */
    for (size_t o = 0; o < m->nooms; o++) {
        uint64_t seq = m->ooms[o].seq;
        size_t j = 0;
        while (j < c->nsteps && c->steps[j].start <= seq)
            j++;
        if (j < c->nsteps) continue;
        if (j && upd == NO_SEQ) {
            int64_t step = c->steps[j - 1].number;
            upd = last_update_birth(x, m->allocs, m->nallocs, step);
            if (!m->is_torch_view) {
                uint64_t t = last_update_birth(x, m->torch.allocs, m->torch.nallocs, step);
                if (t > upd) upd = t;
            }
        }
        if (j && upd != NO_SEQ && upd > seq) continue;
        return seq;
    }
    return 0;
}

/* Target a was alive at the OOM the run stopped at: its free (or none) says nothing of its
 * category, only that it lived up to the OOM. */
static inline int is_cut(const ctx *x, const gm_alloc *a)
{
    return x->cut && a->birth < x->cut && (!a->death || a->death > x->cut);
}

/* Target a was made in the attempt that an OOM the program went on from cut short (in the step
 * the OOM is in, before it) and freed after it: the unwinding's free, or the attempt's input
 * dropped for a smaller one. What the retry makes, and what earlier steps made, is read as
 * any step's (the first OOM ruled for all: every activation and temporary freed after it, the
 * whole rest of the run's, was "other"). */
static int unwound(const ctx *x, const gm_alloc *a)
{
    const gm_model *m = x->m;
    size_t lo = 0, hi = m->nooms; /* the first OOM after the birth (the OOMs come in order) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->ooms[mid].seq <= a->birth) lo = mid + 1;
        else hi = mid;
    }
    if (lo == m->nooms || !a->death || a->death < m->ooms[lo].seq) return 0;
    long bs, os;
    gm_category_phase_at(x->c, a->birth, &bs);
    gm_category_phase_at(x->c, m->ooms[lo].seq, &os);
    /* made between two steps (the step's input, made before its range opened): the next one's */
    if (bs >= 0 && (size_t)bs + 1 < x->c->nsteps && a->birth > x->c->steps[bs].end) bs++;
    return bs == os;
}

int gm_category_cut(const gm_categories *c, const gm_alloc *a)
{
    return c->stopped_at && a->birth < c->stopped_at && (!a->death || a->death > c->stopped_at);
}

/* The shape of target i (a) and what names and its phases decide of it: its category and source
 * where names decide it, or it is a parameter (alive from before the first step to the end);
 * the sizes of the parameters (x->param_sizes); what is made in one step and kept, made again in
 * another step: the steps' growth (x->repeats: the number of steps each (phase, size) of such
 * allocations appears in). Every other target keeps its shape (shape_of) in cat[i] for
 * category_decide. Called at each target's birth in the timeline's pass, in birth order: its
 * step is looked for from the last one's (*hb), its death's from its birth's; births and deaths
 * are the ranges of the last birth and death; cs the steps (a local copy: the stores into cat
 * and src may alias anything to the compiler). 0, or -1 (no memory). */
static inline __attribute__((always_inline)) int categorise(ctx *x, const gm_categories *cs, range_memo *births,
                                                            range_memo *deaths, phase_memo *pb, phase_memo *pd,
                                                            size_t *hb, size_t i, const gm_alloc *a, uint8_t *cat,
                                                            uint8_t *src)
{
    const gm_model *m = x->m;
    int phase_src = cs->phases_from;
    const char *n = a->name ? gm_str(m, a->name) : NULL;
    int k = n ? by_name(&x->params, n) : GM_NCATS;
    uint8_t shape = GM_CAT_OTHER; /* no phases: what names do not decide is other */
    if (k != GM_NCATS) cat[i] = (uint8_t)k, src[i] = GM_CSRC_NAMES;
    if (phase_src != GM_CSRC_NONE) {
        long bs, ds = -1;
        int bp = event_phase_memo(x, cs, births, pb, a->birth, a->range, 1, &bs, hb);
        size_t hd = *hb;
        int dp;
        if (is_cut(x, a)) {
            /* alive at the OOM the run stopped at: read as freed there, in the step the OOM
             * is in (past the last step: in the one after it, which never completed) — kept
             * only where it lived through a whole step; what it would have been after that,
             * nothing says (category_decide) */
            dp = event_phase(x, cs, deaths, x->cut, 0, 0, &ds, &hd);
            if (dp == GM_CPH_POST) dp = GM_CPH_FWD, ds = (long)cs->nsteps;
        } else {
            dp = a->death ? event_phase_memo(x, cs, deaths, pd, a->death, a->death_range, 0, &ds, &hd) : GM_CPH_POST;
            /* made in the last step and freed after it closed, before the teardown: the step's
             * own free (end_last_step) */
            if (dp == GM_CPH_POST && a->death && bs >= 0 && bs + 1 == (long)cs->nsteps && a->death <= x->deaths_end)
                ds = bs, dp = step_phase(cs, &cs->steps[bs], a->death);
        }
        shape = shape_of(bp, dp, bs, ds, (long)cs->nsteps - 1);
        if (k == GM_NCATS && bp == GM_CPH_PRE && (dp == GM_CPH_POST || (ds >= 1 && is_cut(x, a))))
            cat[i] = GM_CAT_PARAM, src[i] = (uint8_t)phase_src;
        if (bs >= 0 && (dp == GM_CPH_POST || ds >= bs + 2)) { /* kept */
            uint64_t key = a->requested * 8 + (uint64_t)bp, *v = u64map_get(&x->repeats, key);
            /* low 32 bits: the last step seen + 1; high: the steps counted */
            if (!v) {
                if (u64map_put(&x->repeats, key, (uint64_t)(bs + 1) | 1ull << 32)) return -1;
            } else if ((*v & 0xffffffffu) != (uint64_t)(bs + 1)) {
                *v = (uint64_t)(bs + 1) | ((*v >> 32) + 1) << 32;
            }
        }
    }
    if (cat[i] == GM_CAT_PARAM && u64map_put(&x->param_sizes, a->requested, 1)) return -1;
    if (src[i] == GM_CSRC_NONE) cat[i] = shape;
    return 0;
}

/* The category of target a that neither names nor categorise decided, by its shape in the
 * steps. *sourced: 1 where its source is the phases' (0: a run that stopped at an OOM unwound
 * it, "other" without one). *unsure: 1 where x->repeats or x->param_sizes answered no: both only
 * grow as the timeline's pass categorises later births (a yes stays yes), so a no may not be
 * the answer of the whole recording (gm_categories_build asks again at the end). */
static inline __attribute__((always_inline)) int category_decide(const ctx *x, const gm_alloc *a, unsigned sh,
                                                                 int *sourced, int *unsure)
{
    int bp = (sh & 31) / 5, dp = (sh & 31) % 5;
    int cat;
    if (is_cut(x, a) && (bp == GM_CPH_PRE || !(sh & SH_KEPT))) {
        /* alive at the OOM the run stopped at, not through two steps' boundaries (a parameter
         * categorise decided): the batch's input, an activation, a workspace made on first
         * need, a step's growth — the stop came before anything could tell them apart */
        *sourced = 0;
        return GM_CAT_OTHER;
    }
    const uint64_t *home = u64map_get(&x->brought, a->birth);
    if (home && u64map_get(&x->param_homes, *home)) {
        /* a parameter brought from its home on the host for one use, or put there (param_forms) */
        *sourced = 1;
        return GM_CAT_PARAM;
    }
    if (bp == GM_CPH_PRE && (sh & SH_DEATH_STEP)) {
        /* made before the first step and freed in one: the loop's first input, made before
         * the step's range opened, held until the next input replaces it */
        cat = GM_CAT_ACT;
    } else if (bp == GM_CPH_PRE || bp == GM_CPH_POST) {
        cat = a->death && dp == bp ? GM_CAT_TEMP : GM_CAT_OTHER;
    } else if (dp == GM_CPH_POST || (sh & SH_KEPT)) { /* kept across steps */
        uint64_t *v = u64map_get(&x->repeats, a->requested * 8 + (uint64_t)bp);
        if (v && (*v >> 32) >= 2) {
            cat = GM_CAT_OTHER;
        } else if (dp == GM_CPH_POST && (sh & SH_LATER_STEP) && bp == GM_CPH_FWD) {
            /* made in the last step's forward and held past it, a step after the others (the
             * loop's last input or loss, still referenced after the loop): what each step before
             * held into the next, an activation; a workspace is made in the first step */
            cat = GM_CAT_ACT;
        } else {
            *unsure = 1;
            if (bp == GM_CPH_OPT) cat = GM_CAT_OPT;
            else if (bp == GM_CPH_BWD && u64map_get(&x->param_sizes, a->requested)) cat = GM_CAT_GRAD;
            else cat = GM_CAT_WORKSPACE;
        }
    } else if (sh & SH_LATER_STEP) {
        /* into the next step: an input, a loss held until replaced; a parameter's gradient
         * from the backward set to none at the next step's start (PyTorch's zero_grad after
         * the next batch is made: the step begins before it, input_first) */
        if (bp == GM_CPH_BWD && u64map_get(&x->param_sizes, a->requested)) {
            cat = GM_CAT_GRAD;
        } else {
            if (bp == GM_CPH_BWD) *unsure = 1;
            cat = bp == GM_CPH_FWD ? GM_CAT_ACT : GM_CAT_OTHER;
        }
    } else if (bp == GM_CPH_FWD) {
        cat = dp == GM_CPH_FWD ? GM_CAT_TEMP : GM_CAT_ACT;
    } else if (bp == GM_CPH_BWD) {
        if (dp == GM_CPH_OPT && u64map_get(&x->param_sizes, a->requested)) {
            cat = GM_CAT_GRAD;
        } else {
            /* a handoff's category is its receiver's, known once that is decided */
            if (dp == GM_CPH_OPT || (dp == GM_CPH_BWD && u64map_get(&x->handoff, a->birth))) *unsure = 1;
            cat = GM_CAT_TEMP;
        }
    } else if (dp == GM_CPH_OPT &&
               (u64map_get(&x->from_host, a->birth) || u64map_get(&x->host_homes, a->requested))) {
        /* made in an update, filled from pinned host memory (or, in the first, where the update
         * makes a host buffer of its size and keeps it) and freed in it: optimizer state kept on
         * the host, brought in for the update (--offload optimizer), with a parameter's size;
         * not the update's temporary */
        if (u64map_get(&x->param_copies, a->birth)) cat = GM_CAT_TEMP; /* a parameter's fp32 master */
        else if (u64map_get(&x->param_sizes, a->requested)) cat = GM_CAT_OPT;
        else *unsure = 1, cat = GM_CAT_TEMP;
    } else {
        cat = GM_CAT_TEMP;
    }
    /* no step shows a backward (no_backward): nothing was saved for one, so what its shape
     * would call an activation (made in a step and held into a later one, or past the last) is
     * a buffer the loop held, "other" */
    if (cat == GM_CAT_ACT && x->c->no_backward) cat = GM_CAT_OTHER;
    /* an OOM unwinds what the attempt had made: its frees were not where its phase would have
     * put them, so no phase says activation or temporary; after the OOM the run stopped at,
     * every free is the unwinding's */
    *sourced = !((cat == GM_CAT_ACT || cat == GM_CAT_TEMP) &&
                 ((x->cut && a->death > x->cut) || unwound(x, a)));
    return *sourced ? cat : GM_CAT_OTHER;
}

/* ------------------------------------------------------------------ tables */

/* The device allocation at *i or the first after it (*i moved there), or NULL. all: every
 * allocation is one (nothing to pass over). */
static inline const gm_alloc *next_device(const gm_model *m, size_t *i, int all)
{
    while (!all && *i < m->nallocs && !is_device(&m->allocs[*i]))
        ++*i;
    return *i < m->nallocs ? &m->allocs[*i] : NULL;
}

/* The same in the model's deaths in order: the device allocation *dj (index + 1) or the first to
 * die after it (*dj moved there), or NULL. */
static inline const gm_alloc *next_device_death(const gm_model *m, size_t *dj, int all)
{
    while (!all && *dj && !is_device(&m->allocs[*dj - 1]))
        *dj = m->allocs[*dj - 1].next_death;
    return *dj ? &m->allocs[*dj - 1] : NULL;
}

/* The bytes of each category (and source) live at the peak allocated moment, into c. */
static void peak_take(gm_categories *c, const uint64_t live[GM_NCATS][GM_NCSRCS])
{
    for (int k = 0; k < GM_NCATS; k++)
        for (int s = 0; s < GM_NCSRCS; s++) {
            c->peak_by_src[k][s] = live[k][s];
            c->peak[k] += live[k][s];
            c->at_total += live[k][s];
        }
}

/* Where step j begins in the timeline: what is made between two steps (after step j-1's last
 * event, before step j's first: its input, made before its range opened) is step j's, as
 * event_phase reads its birth, and it is there in step j's highest moment (step j-1's held the
 * next step's input: an evaluation batch after the last training step, 16 MiB more than the
 * step ever held, the program's own peak memory statistics say). */
static inline uint64_t tl_start(const gm_cat_step *steps, size_t j)
{
    const gm_cat_step *p = j ? &steps[j - 1] : NULL;
    return p && p->end >= p->start && p->end + 1 < steps[j].start ? p->end + 1 : steps[j].start;
}

/* The categories' pass, one sweep of every device allocation in birth order merged with their
 * deaths in order (the model's, else a heap of the living by death): each target categorised at
 * its birth (fused: categorise, then category_decide where names and the phases left it
 * undecided; else every category is already decided); each step's highest moment (or 24
 * buckets of seqs) by category; and the bytes of each category (and source) at the peak
 * allocated moment c->at_seq, what is live once every event up to it has been swept. dies: the
 * model links its deaths. Both constants: one copy of the loop each. What the loop reads of c
 * and m is held in locals: its stores into the category bytes may alias anything to the
 * compiler, which reloaded every field of c and m after each. */
static inline __attribute__((always_inline)) int timeline_as(ctx *x, int dies, int fused)
{
    const gm_model *m = x->m;
    gm_categories *c = x->c;
    size_t nb = c->nsteps ? c->nsteps : 24;
    c->timeline = calloc(nb, sizeof *c->timeline);
    if (!c->timeline) return -1;
    c->ntimeline = nb;
    uint64_t first = m->nallocs ? m->allocs[0].birth : 0, last = m->max_seq > first ? m->max_seq : first + 1;
    for (size_t b = 0; b < nb; b++)
        c->timeline[b].step = c->nsteps ? c->steps[b].number : -1;
    uint64_t cur[GM_NCATS] = {0}, total = 0, before[GM_NCATS] = {0}, before_total = 0;
    /* the live bytes by category and source, summed as the peak's table sums them (no floor) */
    uint64_t live[GM_NCATS][GM_NCSRCS] = {{0}};
    /* c->peak and the rest are taken at the first event after this seq, or after the last event */
    uint64_t peak_after = c->at_seq;
    int peak_taken = 0;
    int decide = c->phases_from != GM_CSRC_NONE;
    /* categorise's: the steps event_phase reads, in a local the stores into the category bytes
     * cannot alias; the ranges of the last birth and death; the last birth's step */
    const gm_categories cs = {.steps = c->steps, .nsteps = c->nsteps, .passes = c->passes, .phases_from = c->phases_from};
    range_memo births = {0}, deaths = {0};
    phase_memo pb = PHASE_MEMO_NONE, pd = PHASE_MEMO_NONE;
    size_t hb = 0;
    long last_b = -1;
    const gm_cat_step *const steps = c->steps;
    const size_t nsteps = c->nsteps;
    gm_cat_point *const tl = c->timeline;
    uint8_t *const cat = c->cat, *const src_of = c->src;
    const gm_alloc *const allocs = m->allocs;
    const size_t nallocs = m->nallocs;
    size_t sc = 0; /* the step of the last event; the next one's start */
    uint64_t next_start = nsteps > 1 ? tl_start(steps, 1) : UINT64_MAX;
    uint64_t first_start = nsteps ? steps[0].start : 0, last_end = nsteps ? steps[nsteps - 1].end : 0;
    /* seqs come in order: whether an event is in step sc, or in none (outside, 1), changes only
     * at `boundary` (the first event looks) */
    uint64_t boundary = 0;
    int outside = 0;
    /* the steps that have started by the last event: each one's highest moment starts from what
     * was live when it began (the bytes it carried in), whether or not it then allocates */
    size_t started = 0;
    /* the next birth (allocation i) and the next death: the model's deaths in order where it
     * links them (a merge of two sorted lists: dj the next one's index + 1), else a heap of the
     * living by death */
    size_t i = 0, dj = dies ? m->first_death : 0;
    int all = x->host == 0;
    const gm_alloc *a = next_device(m, &i, all), *d = dies ? next_device_death(m, &dj, all) : NULL;
    heap q = {0};
    for (;;) {
        uint64_t next_death = dies ? (d ? d->death : 0) : (q.n ? q.h[0].death : 0);
        int death = (dies ? d != NULL : q.n != 0) && (!a || next_death < a->birth);
        /* the next event: a free due before the next birth, else the birth */
        uint64_t seq = death ? next_death : a ? a->birth : 0;
        if (seq > peak_after) {
            peak_take(c, live);
            peak_after = UINT64_MAX, peak_taken = 1;
        }
        /* what was live before this event: the level of every step that began since the last
         * one (one comparison an event, mostly) */
        int more = a || (dies ? d != NULL : q.n != 0); /* 0: after the last event */
        while (started < nsteps && (!more || tl_start(steps, started) <= seq)) {
            gm_cat_point *p = &tl[started];
            if (!p->seq || total > p->total) {
                /* the moment: the step's start, or, where its first event is this one, the
                 * moment before it */
                uint64_t st = tl_start(steps, started);
                p->seq = !more || st < seq ? st : seq - 1;
                p->total = total;
                memcpy(p->bytes, cur, sizeof cur);
            }
            started++;
        }
        if (death) {
            heap_ent e;
            if (dies) {
                /* its bytes as its birth added them: the category and source its birth left in
                 * range, after every birth before it (a death's seq is after its birth's) */
                size_t j = dj - 1;
                e = (heap_ent){d->death, d->size, cat[j], src_of[j]};
                dj = d->next_death;
                d = next_device_death(m, &dj, all);
                cur[e.cat] -= e.bytes, total -= e.bytes;
            } else {
                e = heap_pop(&q);
                cur[e.cat] -= e.bytes < cur[e.cat] ? e.bytes : cur[e.cat];
                total -= e.bytes < total ? e.bytes : total;
            }
            live[e.cat][e.src] -= e.bytes;
        } else if (a) {
            if (fused && is_target(a)) {
                if (categorise(x, &cs, &births, &deaths, &pb, &pd, &hb, i, a, cat, src_of)) {
                    free(q.h);
                    return -1;
                }
                if (decide && src_of[i] == GM_CSRC_NONE) {
                    int sourced, unsure = 0;
                    uint8_t shape = cat[i];
                    cat[i] = (uint8_t)category_decide(x, a, shape, &sourced, &unsure);
                    if (sourced) src_of[i] = (uint8_t)c->phases_from;
                    if (unsure) {
                        if (gm_grow((void **)&x->unsure, &x->unsure_cap, x->nunsure + 1, sizeof *x->unsure)) {
                            free(q.h);
                            return -1;
                        }
                        x->unsure[x->nunsure++] = (unsure_ent){(uint32_t)i, shape};
                    }
                }
            }
            if (cat[i] >= GM_NCATS) cat[i] = GM_CAT_OTHER;
            if (src_of[i] >= GM_NCSRCS) src_of[i] = 0;
            uint8_t k = cat[i], src = src_of[i];
            cur[k] += a->size, total += a->size;
            live[k][src] += a->size;
            if (!dies && a->death && heap_push(&q, (heap_ent){a->death, a->size, k, src})) {
                free(q.h);
                return -1;
            }
            i++;
            while (!all && i < nallocs && !is_device(&allocs[i]))
                i++;
            a = i < nallocs ? &allocs[i] : NULL;
        } else {
            if (!peak_taken) peak_take(c, live); /* the peak after the last event */
            /* the stretches after the last allocation or free hold what is live at the end */
            for (long g = last_b + 1; !nsteps && g < (long)nb; g++) {
                tl[g].seq = first + (uint64_t)g * (last - first + 1) / nb;
                tl[g].total = total;
                memcpy(tl[g].bytes, cur, sizeof cur);
            }
            break;
        }
        long b;
        if (nsteps) { /* seqs come in order: the step moves on only */
            if (seq >= boundary) {
                while (seq >= next_start && sc + 1 < nsteps) {
                    sc++;
                    next_start = sc + 1 < nsteps ? tl_start(steps, sc + 1) : UINT64_MAX;
                }
                outside = seq < first_start || (sc + 1 == nsteps && seq > last_end);
                /* the next seq at which either can change: the first step's start, the next
                 * step's, the end of the last (0: every seq looks again) */
                if (seq < first_start) boundary = first_start < next_start ? first_start : next_start;
                else if (sc + 1 < nsteps) boundary = next_start;
                else boundary = seq > last_end ? UINT64_MAX : last_end + 1;
            }
            if (outside) continue;
            b = (long)sc;
        } else {
            b = (long)((seq - first) * nb / (last - first + 1));
            if (b >= (long)nb) b = (long)nb - 1;
            /* stretches where nothing changed hold what was live when they began */
            for (long g = last_b + 1; g < b; g++) {
                tl[g].seq = first + (uint64_t)g * (last - first + 1) / nb;
                tl[g].total = before_total;
                memcpy(tl[g].bytes, before, sizeof before);
            }
            if (b > last_b) last_b = b;
            memcpy(before, cur, sizeof cur);
            before_total = total;
        }
        gm_cat_point *p = &tl[b];
        if (total > p->total || !p->seq) {
            p->seq = seq, p->total = total;
            memcpy(p->bytes, cur, sizeof cur);
        }
    }
    free(q.h);
    return 0;
}

/* The targets category_decide was not sure of, decided again once every target is categorised
 * (the tables' pass has grown x->repeats and x->param_sizes to the whole recording's). A target
 * whose category (or source) changes keeps its bytes in the tables' sums under the one it had,
 * so they move: in each step's highest moment that it was live at (which the totals chose, and
 * the totals are the same whatever the categories) and in the peak's table. 0: done; 1: the
 * tables are to be made again (with every category now decided): the moves would take longer
 * than a pass, or a moment cannot say whether the target was live (its death at the seq of a
 * birth, which the pass takes first, or a birth at seq 0, an empty step's). */
static int unsure_decide(ctx *x)
{
    const gm_model *m = x->m;
    gm_categories *c = x->c;
    uint8_t *const cat = c->cat, *const src = c->src;
    gm_cat_point *const tl = c->timeline;
    uint64_t work = 0, limit = 4 * (uint64_t)m->nallocs + (1u << 20);
    int again = !c->nsteps && x->nunsure;
    /* from the last: a handoff's receiver, made after it, is decided before it */
    for (size_t u = x->nunsure; u-- > 0;) {
        size_t i = x->unsure[u].i;
        const gm_alloc *a = &m->allocs[i];
        int sourced, unsure = 0;
        int k = category_decide(x, a, x->unsure[u].shape, &sourced, &unsure);
        const uint64_t *g = k == GM_CAT_TEMP && sourced ? u64map_get(&x->handoff, a->birth) : NULL;
        if (g && cat[*g] == GM_CAT_GRAD) k = GM_CAT_GRAD;
        int s = sourced ? c->phases_from : GM_CSRC_NONE;
        if (k == cat[i] && s == src[i]) continue;
        int ok = cat[i], os = src[i];
        cat[i] = (uint8_t)k, src[i] = (uint8_t)s;
        if (again) continue;
        size_t sb = steps_started(c, a->birth, 0), se = a->death ? steps_started(c, a->death, 0) : c->nsteps;
        sb = sb ? sb - 1 : 0, se = se ? se - 1 : 0;
        if (a->death && se + 1 < c->nsteps && a->death >= tl_start(c->steps, se + 1)) se++; /* a death between two steps */
        work += se - sb + 1;
        if (work > limit || !a->birth) {
            again = 1;
            continue;
        }
        for (size_t b = sb; b <= se && !again; b++)
            again = tl[b].seq == a->death;
        if (again) continue;
        for (size_t b = sb; b <= se; b++)
            if (tl[b].seq >= a->birth && (!a->death || tl[b].seq < a->death))
                tl[b].bytes[ok] -= a->size, tl[b].bytes[k] += a->size;
        if (a->birth <= c->at_seq && (!a->death || a->death > c->at_seq)) {
            c->peak_by_src[ok][os] -= a->size, c->peak_by_src[k][s] += a->size;
            c->peak[ok] -= a->size, c->peak[k] += a->size;
        }
    }
    return again;
}

/* The categories' pass (categorise fused into the tables' sweep: one stream through the
 * allocations instead of two), the unsure targets decided again, and where unsure_decide asks,
 * the tables made again with every category decided. */
static int timeline(ctx *x)
{
    gm_categories *c = x->c;
    int dies = x->m->deaths_linked;
    if (dies ? timeline_as(x, 1, 1) : timeline_as(x, 0, 1)) return -1;
    if (!unsure_decide(x)) return 0;
    free(c->timeline);
    c->timeline = NULL, c->ntimeline = 0, c->at_total = 0;
    memset(c->peak, 0, sizeof c->peak), memset(c->peak_by_src, 0, sizeof c->peak_by_src);
    return dies ? timeline_as(x, 1, 0) : timeline_as(x, 0, 0);
}

int gm_category_source(const gm_categories *c, int cat)
{
    int best = GM_CSRC_NONE;
    uint64_t most = 0;
    for (int s = 0; s < GM_NCSRCS; s++)
        if (c->peak_by_src[cat][s] > most) most = c->peak_by_src[cat][s], best = s;
    return best;
}

static void ctx_free(ctx *x)
{
    free(x->t), free(x->launches), free(x->computes), free(x->pairs), free(x->late), free(x->unsure), free(x->tk), free(x->lgap), free(x->fgap);
    u64map_free(&x->ranges), bytemap_free(&x->params), u64map_free(&x->seen), u64map_free(&x->step_idx);
    u64map_free(&x->param_sizes), u64map_free(&x->repeats), u64map_free(&x->from_host), u64map_free(&x->host_homes);
    u64map_free(&x->handoff);
    u64map_free(&x->param_forms), u64map_free(&x->param_copies), u64map_free(&x->brought);
    u64map_free(&x->param_homes);
}

/* What gpumem record's PyTorch hooks saw of a Python recording: -1 not a Python recording with
 * the setting, 0 the hooks were off (--no-torch-hooks), 1 on, with *nr the ranges, *fwd / *opt
 * whether a "fwd" / "opt" range is among them. The hooks' ranges are "step N/fwd/<module>",
 * "step N/bwd/<module>", "step N/opt"; a program that names its own phases (gpumem.range,
 * gpumem.annotate) gets none of theirs. */
static int hooks_saw(gm_db *d, int64_t *nr, int64_t *fwd, int64_t *opt)
{
    char hooks[8] = "";
    *nr = *fwd = *opt = 0;
    if (d) gm_meta_text(d, "torch_hooks", hooks, sizeof hooks);
    /* a C program run by gpumem record has the setting too: the hooks act in Python only */
    int python = d && hooks[0] && gm_table_exists(d, "frames") &&
                 gm_sql_int(d, "SELECT EXISTS (SELECT 1 FROM frames WHERE python = 1)");
    if (!python) return -1;
    if (!strcmp(hooks, "0")) return 0;
    if (gm_table_exists(d, "ranges")) {
        *nr = gm_sql_int(d, "SELECT count(*) FROM ranges");
        *fwd = gm_sql_int(d, "SELECT EXISTS (SELECT 1 FROM ranges WHERE '/' || path || '/' LIKE '%/fwd/%')");
        *opt = gm_sql_int(d, "SELECT EXISTS (SELECT 1 FROM ranges WHERE '/' || path || '/' LIKE '%/opt/%')");
    }
    return 1;
}

/* 1 where the recording shows that no optimizer.step() ran: the hooks were on and opened no
 * "opt" range, with no range of the program's own (which turns theirs off) or with their "fwd"
 * ranges beside none. Inferred phases then have no update: nothing is optimizer state. */
static int no_optimizer_step(gm_db *d)
{
    int64_t nr, fwd, opt;
    return hooks_saw(d, &nr, &fwd, &opt) == 1 && !opt && (!nr || fwd);
}

void gm_phases_hint(gm_db *d, char *out, size_t n)
{
    static const char plain[] = "name tensors, or mark phases with NVTX ranges \"step N\" > fwd / bwd / opt, or "
                                "record a PyTorch script with gpumem record's hooks";
    int64_t nr, fwd, opt;
    int saw = hooks_saw(d, &nr, &fwd, &opt);
    if (saw < 0) {
        snprintf(out, n, "%s", plain);
        return;
    }
    if (!saw) {
        snprintf(out, n, "name tensors, or mark phases with gpumem.range(\"step N\") > fwd / bwd / opt, or record "
                         "it again without --no-torch-hooks (gpumem record's PyTorch hooks were off)");
        return;
    }
    const char *ran = !nr            ? "no nn.Module's forward and no optimizer.step()"
                      : !fwd && !opt ? "no \"step N\" > fwd / bwd / opt range: its own ranges name none, and "
                                       "the hooks opened none (no nn.Module's forward or optimizer.step() ran, "
                                       "or its gpumem.range / gpumem.annotate turned them off)"
                      : !opt         ? "no optimizer.step()"
                      : !fwd         ? "no nn.Module's forward"
                                     : "too few whole steps";
    snprintf(out, n, "gpumem record's PyTorch hooks were on, but they open a step at a module's forward and "
                     "end it at optimizer.step(), and this script ran %s; name tensors (gpumem.name), or mark "
                     "each iteration with gpumem.range(\"step N\") > fwd / bwd / opt", ran);
}

int gm_categories_build(gm_db *d, const gm_model *m, gm_categories *c, char *err, size_t errsz)
{
    memset(c, 0, sizeof *c);
    ctx x = {.m = m, .c = c, .epilogue = NO_SEQ};
    c->n = m->nallocs;
    c->cat = malloc(m->nallocs + 1);
    c->src = calloc(m->nallocs + 1, 1);
    if (!c->cat || !c->src || m->nallocs >= UINT32_MAX) goto nomem;
    /* an item per allocation each, written in this pass: faulted in 2 MiB at a time */
    gm_huge_pages(c->cat, m->nallocs + 1), gm_huge_pages(c->src, m->nallocs + 1);
    /* Three passes over the allocations (each one a stream through memory on a long recording):
     * this one — the targets, the steps of their ranges, the names that make parameters, and the
     * targets freed after the last one was made (end_last_step's teardown) —, categorise's and
     * the timeline's. */
    for (size_t i = m->nallocs; i-- > 0;)
        if (is_target(&m->allocs[i])) {
            x.last_birth = m->allocs[i].birth;
            break;
        }
    /* what the loop changes on every allocation in locals (x's fields were loaded again after
     * each store into c->cat, which may alias anything to the compiler): the targets' list and
     * count, the ranges of the last birth and death, c->steps as note_ranged last saw it */
    range_memo births = {0}, deaths = {0};
    gm_cat_step *steps = NULL;
    int phased = 0;
    uint32_t *t = NULL;
    size_t nt = 0;
    uint8_t *const cat = c->cat;
    const uint64_t last_birth = x.last_birth;
    for (size_t i = 0; i < m->nallocs; i++) {
        /* a copy: the stores below may alias the allocation to the compiler, which loaded its
         * fields again after each */
        const gm_alloc al = m->allocs[i], *a = &al;
        cat[i] = is_device(a) ? GM_CAT_OTHER : GM_CAT_NONE;
        if (!is_target(a)) {
            if (is_device(a)) x.segments++;
            else x.host++;
            /* the targets are no longer the allocations one for one: listed from here on */
            if (!t) {
                if (!(t = x.t = malloc((m->nallocs + 1) * sizeof *x.t))) goto nomem;
                gm_huge_pages(t, (m->nallocs + 1) * sizeof *t);
                for (size_t k = 0; k < nt; k++)
                    t[k] = (uint32_t)k;
            }
            continue;
        }
        if (t) t[nt] = (uint32_t)i;
        nt++;
        if (note_target(&x, &births, &deaths, &steps, &phased, a)) goto nomem;
        if (a->name && note_grad_name(&x, a->name)) goto nomem;
        if (a->death > last_birth) {
            if (gm_grow((void **)&x.late, &x.late_cap, x.nlate + 1, sizeof *x.late)) goto nomem;
            x.late[x.nlate++] = (uint32_t)i;
        }
    }
    x.nt = nt, x.phased = phased;
    load_launches(d, &x);
    load_uses(d, &x);
    for (size_t f = 0; f < m->nframes && !x.python; f++)
        x.python = m->frames[f].python;
    int r = steps_from_ranges(&x);
    if (r < 0) goto nomem;
    if (r > 0) {
        c->steps_from = GM_CSRC_PHASES;
    } else {
        r = steps_from_period(&x);
        if (r < 0) goto nomem;
        if (r > 0) c->steps_from = GM_CSRC_INFERENCE;
    }
    end_last_step(&x);
    if (c->steps_from != GM_CSRC_NONE && (param_forms(&x) || keys_add(&x.param_sizes, &x.param_forms)))
        goto nomem;
    if (c->steps_from != GM_CSRC_NONE) {
        if (x.phased) {
            c->phases_from = GM_CSRC_PHASES;
        } else {
            long shaped = phases_from_lifetimes(&x);
            if (shaped < 0) goto nomem;
            c->phases_from = GM_CSRC_INFERENCE;
            if (!shaped) no_backward(&x);
            else if (no_optimizer_step(d)) no_update(&x);
        }
    }
    if (c->phases_from == GM_CSRC_NONE) gm_phases_hint(d, c->hint, sizeof c->hint);
    c->at_seq = m->peak_allocated_seq;
    c->stopped_at = x.cut = c->phases_from != GM_CSRC_NONE ? cut_of(&x) : 0;
    if (x.host && c->phases_from != GM_CSRC_NONE && host_homes(&x)) goto nomem;
    if (c->phases_from != GM_CSRC_NONE && (handoffs(&x) || param_homes(&x))) goto nomem;
    if (timeline(&x)) goto nomem;
    ctx_free(&x);
    return 0;
nomem:
    ctx_free(&x);
    gm_categories_free(c);
    snprintf(err, errsz, "out of memory while categorising %zu allocations", m->nallocs);
    return -1;
}

void gm_categories_free(gm_categories *c)
{
    free(c->cat), free(c->src), free(c->steps), free(c->passes), free(c->timeline);
    memset(c, 0, sizeof *c);
}
