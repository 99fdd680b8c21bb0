/* gm_advise.h — `gpumem advise`: the recorded program as a trace model, the memory techniques
 * as transformations of that model, and the replay of a transformed model through alloc/'s
 * allocator. Internal to the gpumem command (gm_advise.c: model and transformations;
 * gm_advise_cmd.c: candidates, search, printers, --check). See the design comment at the top
 * of gm_advise.c. */
#ifndef GPUMEM_SNAPSHOT_GM_ADVISE_H
#define GPUMEM_SNAPSHOT_GM_ADVISE_H

#include "alloc/alloc.h"
#include "snapshot/analyze/gm_report.h"
#include "snapshot/read/gm_analyze_pages.h"

#include <stddef.h>
#include <stdint.h>

enum { ADV_EV_ALLOC = 0, ADV_EV_FREE = 1, ADV_EV_FREE_ASYNC = 2 };
/* The free of allocation a completed (its block reusable from here): the trace's `fc`. A
 * PyTorch history's trace (gm_replay_trace_load) has them in its events; every other model
 * has them on its frees (adv_ev.pad: gpumem's kind 29, and in advise's model of a PyTorch
 * history its kind 33 where a later event came first), made events by adv_to_trace /
 * adv_fc_merge. */
enum { ADV_EV_FREE_DONE = 3 };
enum { ADV_FC_END = 0xffff };
/* PyTorch released its cache here: a run of segment frees or unmaps in its merged history (kind
 * 35: torch.cuda.empty_cache, the release before an OOM's retry, expandable segments' unmaps),
 * replayed as the allocator's empty_cache. `a` is an allocation of its own, of 0 bytes and never
 * allocated, so that every walk that reads an event's allocation finds one. */
enum { ADV_EV_EMPTY_CACHE = 4 };
/* PyTorch's per-process memory fraction set here (kind 37: torch.cuda.set_per_process_memory_
 * fraction, or the fraction in force when the program started): PyTorch's allocator caps
 * reserved memory at that many bytes from here (adv_ev_limit; 0: nothing may be reserved, PyTorch's fraction 0), replayed as the
 * trace's ALLOC_TR_LIMIT. `a` is a 0-byte allocation of its own, as ADV_EV_EMPTY_CACHE's. */
enum { ADV_EV_LIMIT = 5 };
/* A private pool ends here: the recorded allocator gave its memory back (a segment of it freed
 * or unmapped, events.flags 32768: PyTorch's kind 35 once the graph or MemPool is gone, gpumem's
 * kinds 15 / 19 when a capture is released). `a` is a 0-byte allocation of its own in that pool,
 * on the pool's stream (adv_model.pools names the pool), so that adv_to_trace writes the trace's
 * `pr` with the key of the pool's `ap` lines. Only the loaders add it (adv_add_pool_release). */
enum { ADV_EV_POOL_RELEASE = 6 };
/* gpumem's allocator recorded a marker on a stream (pad ADV_MK_RECORD: kind 39), found that
 * stream's oldest marker complete (ADV_MK_DONE: kind 40), or synchronized (ADV_MK_SYNC, and
 * ADV_MK_RESTART where the allocation then started over: kind 41): the trace's `mr` / `md` /
 * `sy` / `sr`, which a replay under the recorded configuration takes for its release's event
 * queries (alloc.h, ALLOC_TR_MARKER_RECORD). stream: the step within the allocation that
 * follows (0: none). `a` is a 0-byte allocation of its own on the marker's stream, as
 * ADV_EV_EMPTY_CACHE's. Only the loader adds it (adv_add_marker). */
enum { ADV_EV_MARKER = 7 };
/* ADV_MK_FORGET: the program destroyed the marker's stream, which held memory, and gpumem's
 * allocator forgot it (kind 42): the trace's `sf <stream>`, which every replay takes (advise's
 * model loads it without ADV_LOAD_MARKERS) */
/* ADV_MK_WAIT: a synchronization of gpumem's allocator dropped its lock to wait (kind 43): the
 * trace's `sw`; stream holds the wait's number, the marker's allocation the request in progress
 * (its size and stream; 0 bytes outside an allocation). An ADV_MK_SYNC / ADV_MK_RESTART that
 * ended such a wait has the wait's number as its allocation's size (0: none, older files). */
enum { ADV_MK_RECORD = 0, ADV_MK_DONE = 1, ADV_MK_SYNC = 2, ADV_MK_RESTART = 3, ADV_MK_FORGET = 4, ADV_MK_WAIT = 5 };
/* On an ADV_EV_FREE's stream: a cudaFree after free_sync's synchronization of the device (kind 2
 * flagged REC_F_FREE_SYNCED), settled at once: the trace's `fs`. Database stream ids are small. */
#define ADV_FREE_SYNCED 0x80000000u
/* The phase of an event, from the NVTX path of its range: a component named fwd / forward,
 * bwd / backward, opt / optim / optimizer. */
enum { ADV_MAX_CKPT = 64 }; /* adv_model.ckpt_blocks */
enum { ADV_PH_OTHER = 0, ADV_PH_FWD = 1, ADV_PH_BWD = 2, ADV_PH_OPT = 3 };

typedef struct adv_ev {
    uint32_t a;    /* allocation index */
    uint8_t kind;  /* ADV_EV_* */
    uint8_t phase; /* ADV_PH_* */
    /* ADV_EV_FREE / ADV_EV_FREE_ASYNC: when its block became reusable in the run (a free that
     * waited for stream work, events.flags 8192, until its free_completed, kind 29): 0 at once;
     * k + 1: after k more events (ADV_FC_END - 1 or more: so many); ADV_FC_END: not while
     * recording (the end). The load sets it (the model's own events between the free and its
     * landing); a rewrite that moves or copies a free moves the landing with it; adv_to_trace
     * makes it the trace's `fc`. ADV_EV_LIMIT: its cap's high bits (adv_ev_limit). */
    uint16_t pad;
    uint32_t stream;  /* ADV_EV_FREE_ASYNC: the stream the free is ordered on */
    int32_t step;     /* index into adv_model.steps, -1 outside every "step N" range */
    uint32_t lr_name; /* string of the phase's child range ("h3" in "step 2/fwd/h3/attn"), 0 none */
    uint64_t lr;      /* that child range instance (0 none); accumulation copies get new ones */
    uint64_t t;       /* ns (recorded; inserted events take their anchor's) */
} adv_ev;

/* ADV_EV_LIMIT's cap in bytes, kept in stream (low 32 bits) and pad (high 16 bits): no other
 * event has a use for both, and a wider event would cost every model 8 bytes an event. */
static inline uint64_t adv_ev_limit(const adv_ev *e) { return (uint64_t)e->pad << 32 | e->stream; }
/* The largest cap an ADV_EV_LIMIT holds (256 TiB: more than any device has): a fraction of 1, which
 * caps nothing (adv_add_limit), or a cap too wide to keep. */
#define ADV_LIMIT_MAX (((uint64_t)1 << 48) - 1)
/* ADV_EV_LIMIT's cap set to cap bytes (ADV_LIMIT_MAX where it is wider). */
static inline void adv_ev_set_limit(adv_ev *e, uint64_t cap)
{
    if (cap > ADV_LIMIT_MAX) cap = ADV_LIMIT_MAX;
    e->stream = (uint32_t)cap, e->pad = (uint16_t)(cap >> 32);
}

typedef struct adv_alloc {
    uint64_t size;   /* requested bytes */
    uint32_t stream; /* database stream id the allocation is made on */
    uint32_t cls;    /* string: the class (name with digits as '*', else the call site) */
    uint32_t name;   /* string: the full name, 0 none */
    uint32_t orig;   /* the recorded allocation this one stands for (itself when recorded) */
} adv_alloc;

/* A PyTorch recording without the op log: what the hooks' module ranges (one a module call,
 * flat) tell of the nodes around a recorded allocation; UINT32_MAX where they tell nothing. Each
 * is an allocation, so that a rewrite finds it again by its orig (an accumulation copy's). */
typedef struct adv_hnode {
    /* the first allocation of the backward module range that frees it: the node that frees it
     * starts there (a Linear's, a ReLU's: one node a range) */
    uint32_t freed_in;
    /* the first allocation of the next module call in the forward after its birth: the call it
     * was passed to (its class: whether it saves its input) */
    uint32_t fed;
    /* that call's backward range in the same pass: its first and last allocation (the node that
     * saved it as that call's input) */
    uint32_t fed_b0, fed_b1;
} adv_hnode;

typedef struct adv_step {
    int64_t number; /* N of "step N" */
    uint64_t start_ns, end_ns;
} adv_step;

/* An op on the timeline: a timed launch (launches.start_ns/end_ns) or else a leaf NVTX range. */
typedef struct adv_op {
    uint64_t t, dur; /* issue time (events' clock) and duration, ns */
    int phase;       /* ADV_PH_* */
} adv_op;

/* The recording's first out-of-memory error (table ooms), when it has one. */
/* A configuration as advise replays it: without the caps the run had, the limit and the
 * per_process_memory_fraction key's share of the device alike (a prediction says how much is
 * needed; the OOM's figures and --budget are compared with it afterwards). The recorded
 * per-process memory fractions the program set (ADV_EV_LIMIT) stay: its own code made them.
 * frag and tune judge configurations under the caps: gm_replay_trace_load_tap puts both back. */
static inline void adv_cfg_uncapped(alloc_config_t *c)
{
    c->limit = ALLOC_NO_LIMIT;
    c->memory_fraction = -1;
}

typedef struct adv_oom {
    uint64_t seq;       /* its event; 0: the recording has no OOM */
    uint64_t requested; /* the request that failed, bytes */
    uint64_t allocated; /* allocated when it failed */
    uint64_t limit;     /* the limit it met (GPUMEM_LIMIT), GM_NO_LIMIT none recorded */
    gm_oom_bound bound; /* what it met: the device, or the limit and who set it (GPUMEM_LIMIT,
                         * GPUMEM_CONF's limit or per_process_memory_fraction key, PyTorch's
                         * per-process memory fraction) */
    gm_oom_bound limit_from; /* who set the limit, bound or not (report's .limit_from) */
    uint64_t t;         /* its time (events' clock) */
    uint32_t stream;    /* the stream of the request */
    size_t ev;          /* index of the first loaded event after it (the cut of --oom-step) */
    int32_t step;       /* the step it happened in (index into steps), -1 outside every step */
    char where[256];    /* its NVTX path up to the phase ("step 2/fwd"), "" none */
    char name[128];     /* the name the program gave the failed allocation, "" none */
} adv_oom;

/* The op log of a PyTorch recording made with `gpumem record --torch-ops` (tables torch_ops /
 * torch_op_args, loaded with ADV_LOAD_TORCH): the forward's aten ops and the backward's nodes,
 * in the order they ran (gm_advise_autocast.c reads it). */
enum { ADV_DT_OTHER = 0, ADV_DT_F32 = 1, ADV_DT_LOW = 2 /* bfloat16 or float16 */ };
typedef struct adv_targ {
    uint64_t bytes; /* the tensor's own bytes (elements x element size) */
    uint32_t a;     /* its storage's recorded allocation, UINT32_MAX none */
    uint8_t out;    /* 1 written (an output), 0 read */
    uint8_t dtype;  /* ADV_DT_* */
    uint8_t ndim;   /* its shape: dims[0 .. ndim) (0: not logged, or more than 4 dimensions) */
    uint32_t dims[4];
} adv_targ;
typedef struct adv_top {
    uint32_t arg0, nargs; /* its tensors: targs[arg0 .. arg0 + nargs), outputs first */
    uint32_t last_a;      /* the last allocation made before it returned (a backward node's: before it
                             started), UINT32_MAX none */
    uint32_t fwd;         /* a backward node's ("bwd:..."): the forward op it is the node of, whose
                             outputs' gradients its arguments are (UINT32_MAX: a forward op, or none) */
    uint32_t name;        /* interned: the op ("aten.addmm.default", "bwd:AddmmBackward0") */
    uint8_t bwd;          /* 1: a backward node, its arguments the gradients it was given */
} adv_top;

typedef struct adv_model {
    adv_alloc *allocs;
    size_t nallocs, allocs_cap;
    adv_ev *evs;
    size_t nevs;
    /* interned strings: index 0 is "" */
    char **strs;
    size_t nstrs, strs_cap;
    u64map str_idx;
    adv_step *steps;
    size_t nsteps;
    adv_op *ops;
    size_t nops;
    int ops_timed;        /* ops are timed launches (else NVTX leaf ranges) */
    uint64_t *opt_starts; /* start_ns of range instances under an optimizer phase, sorted */
    size_t nopt_starts;
    uint32_t compute_stream; /* the stream most allocations are made on */
    uint32_t copy_stream;    /* an unused stream id for offload copies */
    /* recording facts */
    alloc_config_t cfg;
    char config[1024], mode[32], cmdline[4096];
    uint64_t rec_peak_allocated, rec_peak_reserved;
    /* the recorded device's total memory (device_info), of which the per_process_memory_fraction
     * key took its share: set by gm_replay_trace_load_tap for frag's and tune's replays
     * (alloc_replay_opts.device_total); 0 unknown */
    uint64_t device_total;
    bool top_down; /* meta alloc.address_order "down": the replay hands out addresses downwards */
    int have_uses; /* the uses table has rows, and no launch's arguments were unreadable */
    int64_t uses_unread; /* launches whose uses are unknown (gm_uses_unknown: unread or lost) */
    uint64_t nuses;
    /* with uses: each recorded allocation's use times (events' clock), sorted: those of
     * allocation a are use_t[use_off[a] .. use_off[a + 1]); shared by copies of the model */
    uint64_t *use_off, *use_t;
    size_t nrecorded; /* allocations loaded from the recording (use_off has nrecorded + 1) */
    const adv_alloc *rec_allocs; /* a view's: its base's allocations, as recorded (the rewrites
                                    change sizes: autocast halves tensors); NULL: allocs */
    int owns_uses;
    int dry_run; /* no compute recorded (trainer --dry-run) */
    adv_oom oom;
    /* where the steps and phases came from: GM_CSRC_PHASES ("step N" > fwd / bwd / opt ranges),
     * GM_CSRC_INFERENCE (an unannotated recording: gm_category.h's steps from its periodicity
     * and phases from its allocations), GM_CSRC_NONE (neither: phases_why says why) */
    int phases_from;
    char phases_why[320];
    /* where the steps alone came from: GM_CSRC_PHASES ("step N" ranges, also when the phases in
     * them were inferred), GM_CSRC_INFERENCE (the periodicity), GM_CSRC_NONE (no steps) */
    int steps_from;
    /* inferred phases: the allocations gm_category.c calls gradients (0: no backward made one,
     * what follows each step's highest point is frees, not a backward) */
    size_t inferred_grads;
    /* a PyTorch recording (its memory history merged, kinds 31-35): the model is PyTorch's
     * tensors, replayed under PyTorch's own policy (preset pytorch / pytorch-expandable with the
     * recorded PYTORCH_CUDA_ALLOC_CONF), so predictions are in its terms (max_memory_allocated,
     * max_memory_reserved); rec_peak_* are then its recorded peaks, and device_* the device's */
    int torch;
    char torch_conf[512];
    /* while PyTorch's history loads (adv_torch_cache_row): a per-process memory fraction below 1
     * is in force, the key's or a call's (PyTorch then gives segments back for its cap) */
    int fraction_in_force;
    /* the dtypes of the torch.autocast regions the program entered on CUDA ("float16",
     * "bfloat16,float16"), meta torch_autocast; "" none seen, or not recorded (an older gpumem,
     * or no dump: --no-torch-history with PyTorch's own allocator) */
    char torch_autocast[64];
    /* the op log (a PyTorch recording made with --torch-ops; ntops 0 otherwise): read-only,
     * shared by copies and views, freed by the model that loaded it (owns_tops) */
    adv_top *tops;
    adv_targ *targs;
    size_t ntops, ntargs;
    /* per recorded allocation (NULL: the log has no module marks): the last allocation made
     * before the module whose frame held it returned (UINT32_MAX: none held it): what a module
     * was passed, and the storage of a view its own code made (a local, as the attention's q, k,
     * v of its qkv), live until the module's forward returns (tops_load) */
    uint32_t *tholds;
    /* per recorded allocation (NULL: the recording has the op log, or no module ranges): where
     * the hooks' module ranges place autograd's nodes without the op log (hooks_nodes) */
    adv_hnode *hnode;
    int owns_tops;
    /* the layer ranges (lr_name) a forward range opened inside the backward: the blocks the
     * recording checkpoints itself (torch.utils.checkpoint's recompute, load_ranges); more than
     * ADV_MAX_CKPT of them: ckpt_all, every repeated block (adv_recomputed_block) */
    uint32_t ckpt_blocks[ADV_MAX_CKPT];
    unsigned nckpt_blocks, ckpt_all;
    uint64_t device_peak_allocated, device_peak_reserved;
    /* inferred (GM_CSRC_INFERENCE): the layers found in the forward, and where a steady step's
     * backward and update begin and where it ends (seqs; 0 none), for saying which kernels run
     * there */
    size_t inferred_layers, inferred_layer_allocs;
    uint64_t inferred_bwd_seq, inferred_opt_seq, inferred_end_seq;
    /* per allocation (index: its orig; NULL, or past npools: the default pool): the private pool
     * it was made in (events.flags 32768: a CUDA graph's or torch.cuda.MemPool's pool of PyTorch's
     * history, whose alloc_id names it; gpumem's pools of a capture, named by their stream), as a
     * nonzero number. adv_to_trace makes those allocations the trace's `ap`, so a replay keeps
     * them in their pool as the recorded allocator did. Read-only, shared by copies and views,
     * freed by the model that loaded it (owns_pools) */
    /* ADV_POOL_DRIVER there: not an allocator's at all, but memory the driver made for the
     * program (a pool it chose, a graph's memory node: events.flags 2048 / 16384, passed through
     * in every mode), which adv_to_trace makes the trace's `ad`: the same bytes in allocated and
     * reserved under every configuration */
    uint32_t *pools;
    size_t npools;
    int owns_pools;
    /* the number of gpumem's own capture pools among `pools` (one number, each capture its
     * stream; 0: none): adv_to_trace brackets each capture's allocations with `cb` / `ce` */
    uint32_t capture_pool;
    /* ADV_HOOKED_*: whether the recording has a device allocation made through the framework's
     * hook (events kind 1 / 3 with flag 4096: gpumem as PyTorch's allocator), as the load found
     * it reading every row of the recording; ADV_HOOKED_UNKNOWN where it did not (one device's
     * rows, a damaged tail, another loader): a scan of the events answers then */
    int hooked_rows;
    /* ADV_BORROWS_*: the arrays that are another model's (adv_model_view), not this one's to
     * write or free; 0 for a loaded model or a deep copy */
    unsigned borrows;
    /* ADV_LOAD_MARKERS only: the indices (in evs, rising) of the frees whose landing the
     * allocator's synchronization made (kind 29 flagged 256): the trace's `fy`, settled there */
    uint32_t *fy_frees;
    size_t nfy_frees;
} adv_model;
enum { ADV_HOOKED_UNKNOWN = 0, ADV_HOOKED_NONE = 1, ADV_HOOKED_SOME = 2 };
enum {
    ADV_BORROWS_EVS = 1,    /* evs */
    ADV_BORROWS_ALLOCS = 2, /* allocs */
    ADV_BORROWS_STRS = 4,   /* strs and str_idx */
    ADV_BORROWS_TIMES = 8,  /* steps, ops and opt_starts */
};

/* adv_model.pools' mark of an allocation the driver made for the program (no private pool's
 * number: those count up from 1) */
#define ADV_POOL_DRIVER UINT32_MAX

/* A loader's private pools: their names in the recording -> their numbers in adv_model.pools. */
typedef struct adv_pool_ids {
    u64map ids;
    size_t cap; /* of adv_model.pools */
    /* the pools' keys (number << 32 | stream) released so far (adv_add_pool_release) */
    uint64_t *gone;
    size_t ngone, gcap;
} adv_pool_ids;
void adv_pool_ids_free(adv_pool_ids *ids);
/* Allocation a of m was made by an events row (kind, flags, alloc_id): its private pool noted in
 * m->pools (events.flags 32768; ADV_POOL_DRIVER for a device allocation passed through to the
 * driver, flags 2048 / 16384; 0 otherwise). ids: the loader's, freed by it (u64map_free). 0, or
 * -1 out of memory. */
int adv_pool_note(adv_model *m, uint32_t a, int kind, uint64_t flags, uint64_t alloc_id, adv_pool_ids *ids);
/* A segment of a private pool was given back by an events row (kind 35 with alloc_id naming
 * PyTorch's pool, or 15 / 19 on the stream of gpumem's capture): an ADV_EV_POOL_RELEASE at time t
 * appended to m->evs for each key (pool, stream) of that pool an allocation was made with, not
 * released before (PyTorch's pool: every stream it was used on; gpumem's: the capture's stream),
 * each with its 0-byte allocation. How many were added (0: the pool has no allocation, or is
 * released already), or -1 out of memory. */
int adv_add_pool_release(adv_model *m, int kind, uint64_t alloc_id, uint32_t stream, uint64_t t, size_t *evcap,
                         adv_pool_ids *ids);
/* A row of PyTorch's merged history that changes its cache, not a tensor, as every loader of such
 * a recording decodes it (advise's, and gm_replay.c's for frag and tune, whose models differ in
 * the rest: ADVISE.md, "PyTorch's history"): torch_segment_unmap (35), a segment given back (a
 * private pool's ends that pool first, adv_add_pool_release; then the cache is released,
 * adv_add_release: once per run of them; not while a fraction below 1 is in force: PyTorch gave it
 * back for its cap, as each replay under that cap does by its own configuration's rules);
 * torch_empty_cache (36), the program's own call (the
 * cache released, also where it gave nothing back when recorded); torch_memory_fraction (37), its
 * per-process memory fraction (adv_add_limit: size the cap, requested the fraction in
 * millionths), except the key's at the start (REC_F_FRACTION_START: no event; the configuration's
 * key is that cap, which advise drops and frag and tune apply). The row's columns as named. 1 one of those (its events appended, possibly none),
 * 0 a row of another kind (nothing done), -1 out of memory. */
int adv_torch_cache_row(adv_model *m, int kind, uint64_t flags, uint64_t alloc_id, uint32_t stream, uint64_t t,
                        uint64_t size, uint64_t requested, size_t *evcap, adv_pool_ids *ids);

/* An event inserted by a rewrite: the fields and time of `anchor` (the event it goes beside, so
 * times stay in order), for allocation a, of `kind`, ordered on `stream` (frees). */
static inline adv_ev adv_ev_like(const adv_ev *anchor, uint32_t a, uint8_t kind, uint32_t stream)
{
    adv_ev e = *anchor;
    e.a = a, e.kind = kind, e.stream = stream;
    return e;
}

/* The phase a range name stands for: ADV_PH_FWD for "fwd"/"forward", ADV_PH_BWD for
 * "bwd"/"backward", ADV_PH_OPT for "opt"/"optim"/"optimizer"/"optimizer_step", else
 * ADV_PH_OTHER (NULL too). Shared with gpumem viz (its timeline stacked by phase). */
int adv_phase_of_name(const char *n);
/* A tensor's class: its name with each run of digits as '*' ("h11.mlp.fc" -> "h*.mlp.fc").
 * Shared with gpumem viz (stacking and segment colours by class). */
void adv_name_class(const char *n, char *out, size_t outsz);

/* Loads the recording: device allocations (requested size, births and deaths, streams, NVTX
 * phase and layer range, name class), steps, the op timeline, meta config/mode/cmdline and the
 * recorded peaks. Returns 0, or -1 with a message for a person in err. */
int adv_model_load(gm_db *d, adv_model *m, char *err, size_t errsz);
/* advise's: also ADV_LOAD_TORCH, a PyTorch recording as its tensors in its allocator's terms
 * (m->torch), and ADV_LOAD_INFER, the steps, phases and layers of an unannotated recording
 * inferred (m->phases_from). adv_model_load is this with neither: the device's allocations as
 * recorded (frag and tune replay those). ADV_LOAD_SQL: the events through SQLite, never from
 * the table's pages (the same rows: the pages' reader is taken only where they are; the
 * environment's GPUMEM_SWEEP=sql does the same). ADV_LOAD_PROGRESS: a progress line on stderr
 * while the events are read, where stderr is a terminal (the report's, gm_model_load's).
 * ADV_LOAD_MARKERS: gpumem's allocator's markers and syncs (kinds 39-41) read into the model
 * (ADV_EV_MARKER) for a replay of the recorded configuration that takes them (tune's and frag's,
 * gm_replay_trace_load_tap); advise's own model leaves them out (replay_opts says why). The
 * streams the allocator forgot (kind 42: ADV_EV_MARKER, ADV_MK_FORGET) are loaded with or
 * without it: every replay takes them, advise's baseline and rewrites too. */
enum { ADV_LOAD_TORCH = 1, ADV_LOAD_INFER = 2, ADV_LOAD_SQL = 4, ADV_LOAD_PROGRESS = 8, ADV_LOAD_MARKERS = 16 };
int adv_model_load_as(gm_db *d, adv_model *m, int how, char *err, size_t errsz);
/* Every events row as the load reads them (all kinds, a page's rows at a time, before the model
 * takes its own), for a caller that makes more of the same pass (frag's timeline, through
 * gm_replay_trace_load_tap) instead of reading the events again. rows returns nonzero to stop (out of
 * memory: the load fails); restart: the rows come again from the first (the page reader gave
 * up part way), what was made of them is to be dropped. */
typedef struct adv_tap {
    gm_event_rows_fn rows;
    void (*restart)(void *ctx);
    void *ctx;
} adv_tap;
/* adv_model_load_as with tap (NULL: none) shown every row. */
int adv_model_load_tap(gm_db *d, adv_model *m, int how, const adv_tap *tap, char *err, size_t errsz);
void adv_model_free(adv_model *m);
/* The first step priced as steady: the second half of the steps, and never the first one
 * (warm-up: first touches, cold caches) when there are several. 0 with one step or none;
 * m->nsteps must be > 0 for m->steps[...] to be read. */
size_t adv_steady_step(const adv_model *m);
/* An OOM recording's trace ends where the program stopped allocating as it would have. How
 * many of its steps ended before the step of the OOM (all of them when it happened outside
 * every step, after the last one; 0 when the recording has no OOM: then nothing is cut). */
size_t adv_oom_complete_steps(const adv_model *m);
/* Cuts an OOM recording's trace. partial 0: at the start of the OOM's step (or at the OOM,
 * outside every step): only complete steps are left, allocations alive there are never freed.
 * partial 1: at the OOM itself, with the failed request as a last allocation that is never
 * freed (the trace's peaks are then lower bounds of what the program needed). Steps, ops and
 * optimizer ranges after the cut are dropped. Nothing happens without an OOM. 0 or -1. */
int adv_oom_cut(adv_model *m, int partial);
/* Appends the last step once more as it repeats: its events (times shifted by its span, new
 * range instances), without the births of what outlives it (gradients, optimizer state: they
 * exist when the next step starts) and the frees of what it did not allocate. How an OOM
 * recording with only its first (warm-up) step complete is advised. 0 or -1 (no memory). */
int adv_repeat_last_step(adv_model *m);
/* A deep copy (strings shared by index: the copy owns its own table). 0 or -1 (no memory). */
int adv_model_copy(const adv_model *src, adv_model *dst);
/* A copy that borrows src's arrays (events, allocations, strings, steps and ops; the uses as
 * adv_model_copy's): each one is copied when a rewrite first writes it, so a rewrite that
 * changes little copies little, and one that changes nothing copies nothing. src must outlive
 * dst and stay unchanged while dst lives; adv_model_free(dst) frees what dst made its own.
 * Every function that rewrites a model takes a view as it takes a deep copy (each array is made
 * its own before it is written, in place or by realloc). */
void adv_model_view(const adv_model *src, adv_model *dst);
/* Makes every array m borrows its own (copies them). 0 or -1 (no memory: m stays whole, the
 * arrays copied so far its own). */
int adv_model_own(adv_model *m);
/* 1 when view (an adv_model_view of base, rewritten) still borrows base's events and
 * allocations and replays under base's configuration: its replay is base's (adv_replay gives
 * the same result), and advise takes the baseline's for a rewrite that changed nothing. */
int adv_model_replays_as(const adv_model *view, const adv_model *base);
const char *adv_str(const adv_model *m, uint32_t i);
/* For rewrites outside gm_advise.c (gm_advise_zero3.c): s interned (0 for "" or no memory), and
 * a new allocation appended (its index, UINT32_MAX when out of memory). */
/* ADV_EV_EMPTY_CACHE at time t appended to m->evs (grown with *evcap, gm_grow_fast's), with its
 * own 0-byte allocation; none when the last event is one already (a run of segment frees is one
 * release). 1 added, 0 not needed, -1 out of memory. */
int adv_add_release(adv_model *m, uint64_t t, size_t *evcap);
/* The same, whatever the last event is (events appended after the model's pass, then merged by
 * time: gpumem's own empty_cache, gm_replay.c). 1 added, -1 out of memory. */
int adv_append_release(adv_model *m, uint64_t t, size_t *evcap);
/* ADV_EV_LIMIT at time t (cap: bytes, 0 is 0 bytes; at most 2^48 - 1) appended as adv_add_release
 * appends its event; a fraction (millionths, the event's requested) of 1 or more caps nothing.
 * 1 added, -1 out of memory. */
int adv_add_limit(adv_model *m, uint64_t t, uint64_t cap, uint64_t millionths, size_t *evcap);
/* ADV_EV_MARKER at time t on stream (done: found complete) appended as adv_append_release appends
 * its event. 1 added, -1 out of memory. */
int adv_add_marker(adv_model *m, uint64_t t, uint32_t stream, int what, uint32_t at, size_t *evcap);
/* The same with a size on the marker's allocation (ADV_MK_WAIT's request, a wait's number) */
int adv_add_marker_sized(adv_model *m, uint64_t t, uint32_t stream, int what, uint32_t at, uint64_t size,
                         size_t *evcap);
uint32_t adv_intern(adv_model *m, const char *s);
uint32_t adv_new_alloc(adv_model *m, uint64_t size, uint32_t stream, uint32_t cls, uint32_t name, uint32_t orig);

/* Replays the model's events through alloc_replay under the recorded configuration (capacity
 * unlimited: a prediction never OOMs). Fills *out; returns 0 or -1 with err. */
int adv_replay(const adv_model *m, alloc_replay_result_t *out, char *err, size_t errsz);
/* The model's events as the replay engine's trace (malloc'ed, *n events: m->nevs and an `fc` for
 * each free with a landing, adv_ev.pad), NULL when out of memory. Allocation ids are the
 * model's allocation index + 1. */
alloc_trace_event_t *adv_to_trace(const adv_model *m, size_t *n);
/* The frees' landings made ADV_EV_FREE_DONE events of m->evs, where adv_to_trace puts them (the
 * frees' pad then 0), for a caller that counts the trace by m->nevs (frag, tune). 0, or -1 out
 * of memory (m unchanged). */
int adv_fc_merge(adv_model *m);

/* ---- transformations: each rewrites m->evs (and adds allocations), in place. 0 or -1. ---- */

/* Which saved activations each stash-based technique acts on. */
typedef struct adv_stash_opts {
    const uint32_t *recompute_cls; /* classes dropped after forward and rebuilt in backward */
    size_t nrecompute;
    int recompute_layer; /* every saved tensor born in the layer (full checkpointing) */
    int recompute_blocks; /* with recompute_layer: only the repeated blocks' ("h.3", "blocks.7":
                             torch.utils.checkpoint around each block of a list) */
    int bf16;            /* stored as bf16 between forward and backward (statistics stay fp32) */
    int offload;         /* copied to pinned host memory between forward and backward */
    int offload_at_use;  /* with offload: each copied back when its backward uses it (PyTorch's
                            save_on_cpu unpacks in the node that needs it), not prefetched */
    const uint8_t *unpacked; /* per recorded allocation (nunpacked of them), NULL none: a storage
                                adv_pack_saved unpacks itself (its saved views one by one; a
                                parameter's bf16 copy under autocast): offloaded, never restored
                                whole here */
    size_t nunpacked;
    const uint32_t *sum_of; /* per recorded allocation (nsum_of), NULL none: adv_bias_sums's; an
                               unpacked tensor dies before that sum's result is born */
    size_t nsum_of;
} adv_stash_opts;

/* Per-step figures a transformation reports, for the cost model. */
typedef struct adv_stash_stats {
    uint64_t offload_bytes;   /* device->host bytes over the whole trace */
    uint64_t pinned_bytes;    /* host buffers needed (the largest step's offloaded bytes) */
    uint64_t convert_bytes;   /* bf16: fp32 bytes converted (each way) over the trace */
    uint64_t recompute_bytes; /* bytes of tensors re-created */
    uint64_t recompute_ns;    /* measured duration of the ops re-run, over the steady steps
                               * (from adv_steady_step on) */
    uint64_t window_ns_min;   /* shortest idle window of an offloaded tensor: its last forward
                               * use to its first backward use when uses were recorded, else
                               * its stash point to its restore point */
    size_t short_windows;     /* offloaded tensors whose window is shorter than their copies
                               * out and in at the link bandwidth (Capuchin's test) */
    int windows_from_uses;
    uint64_t stall_ns; /* offload copies not hidden by their phase (link model) */
    size_t ntensors;   /* tensors acted on */
} adv_stash_stats;

/* Recompute / bf16 / offload of saved activations: a saved activation is born in a forward
 * phase and dies in a backward child range B ("step s/bwd/hI"); its stash point is the end of
 * the matching forward range F ("step s/fwd/hI", the latest one before B), its restore point
 * the start of B. link_bps: host link bytes/s (for the stall estimate). */
int adv_stash(adv_model *m, const adv_stash_opts *o, double link_bps, adv_stash_stats *st);

/* PyTorch adds gradient contributions that meet (a tied weight's) out of place into a sum born
 * at most this many events before they are freed */
enum { ADV_SUM_FREES_WITHIN = 8 };

/* torch.autocast(dtype=torch.bfloat16) around the forward of a PyTorch recording with its op log
 * (m->ntops > 0), on the recorded (fp32) trace, before any other rewrite (gm_advise_autocast.c):
 * the ops on autocast's lower-precision list read bf16 copies of their fp32 inputs (a weight's
 * made once per forward pass) and write bf16, those on its fp32 list read fp32 copies of bf16
 * inputs, the others follow their inputs; the backward as recorded, but for the attention's
 * kernels (FlashAttention's in bf16, where the recording ran the memory-efficient one; its
 * forward splits the keys by the micro-batch's size: k, the accumulation's factor, 1 none). */
typedef struct adv_autocast_stats {
    uint64_t cast_bytes;  /* fp32 bytes cast (either way) per trace */
    size_t copies, halved; /* cast copies made; recorded tensors made bf16 */
    size_t sums_in_place;  /* recorded sums of contributions autograd makes in the first of them
                              under autocast (adv_sums_in_place) */
    size_t flash;          /* attention ops whose kernels are FlashAttention's in bf16 */
} adv_autocast_stats;
int adv_autocast(adv_model *m, adv_autocast_stats *st, uint8_t *in_place, unsigned k);
/* Contributions that meet (a tied weight's: the head's and the embedding's) are summed by autograd
 * out of place, into a sum born just before both are freed, unless the first is a tensor it may
 * take over: under autocast, the fp32 gradient a cast's node (ToCopyBackward0) made. adv_autocast
 * sets in_place[x] (per recorded allocation, NULL: not wanted) for such a first contribution x;
 * this, run after accumulation made its micro-batches, makes each such sum in its first
 * contribution (the sum not made; the contribution lives on to the sum's death, named as it).
 * Returns the number of sums merged, -1 out of memory. */
long adv_sums_in_place(adv_model *m, const uint8_t *in_place, size_t n);
/* The first contribution (by birth) of the out-of-place sum of two that event i allocates, in a
 * backward (the two of its size born before it and freed within ADV_SUM_FREES_WITHIN events
 * after it, nothing allocated between); UINT32_MAX when i is no such sum. birth: each
 * allocation's event. */
uint32_t adv_sum_first(const adv_model *m, const size_t *birth, size_t i);

/* A trace's edit list, applied in one pass: events inserted before (where -1) or after (+1) an
 * event of the trace (anchor), those at one place ordered by prio then by insertion, and events
 * dropped (drop, one flag per event). adv_rw_apply puts them in m's trace; -1 out of memory. */
typedef struct adv_ins {
    size_t anchor; /* event index */
    int where;     /* -1 before it, +1 after it */
    uint32_t prio;
    uint64_t ord;
    adv_ev ev;
} adv_ins;

typedef struct adv_rw {
    adv_ins *v;
    size_t n, cap;
    uint8_t *drop; /* per event */
    uint64_t ord;
    int nomem;
} adv_rw;

int adv_rw_init(adv_rw *w, const adv_model *m);
void adv_rw_add(adv_rw *w, size_t anchor, int where, uint32_t prio, adv_ev ev);
int adv_rw_apply(adv_model *m, adv_rw *w);
void adv_rw_free(adv_rw *w);

/* torch.autograd.graph.save_on_cpu packs every tensor the forward's ops save; adv_stash packs
 * and restores the activations' storages, this the rest: from the op log, each op that saves a parameter (a matmul or convolution its
 * weight, the Linear's as weight.t(); a LayerNorm its weight and bias) gets, in the forward, a
 * device temporary of the weight's size where the saved tensor is a view that is not contiguous
 * (weight.t(): the copy to the host goes through it), and in the backward a device copy of it
 * made when its node starts and freed when the node ends (the unpack). autocast: the trace is
 * autocast's (adv_autocast ran): a lower-precision op saves its weight's bf16 copy. skip_blocks:
 * checkpointed blocks save nothing of their own (their ops are left alone). Also an unpack for each
 * input an op saves that its backward's kernels never read (nll_loss's log-probabilities, whose
 * restore no use places), and for each view of part of an activation's storage an op saves (the
 * attention's q, k, v), a device temporary for its pack and an unpack of its own size; unpacked
 * (per recorded allocation, NULL: not wanted) is set for those storages, and under autocast for a
 * parameter whose bf16 copy (autocast's cache, which adv_stash packs too) this unpacks, so that
 * adv_stash does not restore them whole as well (adv_stash_opts.unpacked). Returns the number of saved tensors packed,
 * -1 out of memory. Run before the other rewrites. */
long adv_pack_saved(adv_model *m, int autocast, int skip_blocks, uint8_t *unpacked);

/* 1 where layer range lr_name (an event's) is a block the recording checkpoints itself (its
 * forward ran again inside the backward), else 0 */
int adv_recomputed_block(const adv_model *m, uint32_t lr_name);
/* The op log's backward nodes' starts: the events, in order, of the last allocation made before
 * each started (or of an accumulation's copy of it); *n of them. malloc'ed (the caller frees),
 * NULL out of memory. */
size_t *adv_node_starts(const adv_model *m, size_t *n);
/* 1 when op t reads storage a (an input of it is on a), else 0 */
int adv_top_reads(const adv_model *m, const adv_top *t, uint32_t a);
/* Per recorded allocation, the forward op of the log that made its storage: the first with an
 * output on it that does not read it (a view's output is its input's storage), SIZE_MAX none.
 * malloc'ed (the caller frees), NULL out of memory. */
size_t *adv_op_makers(const adv_model *m);
/* an aten op's base name: "aten.addmm.default" -> "addmm" (into buf, n bytes) */
const char *adv_op_base(const char *op, char *buf, size_t n);
int adv_is_block_name(const char *n); /* "h.3", "blocks.7": a repeated block's range */
/* allocation a's size as recorded (the rewrites change sizes: autocast halves tensors,
 * accumulation shrinks them) */
uint64_t adv_rec_size(const adv_model *m, uint32_t a);
/* PyTorch's sum of a Linear's bias gradient over the batch's rows (AddmmBackward0's) stages its
 * partial sums in a device buffer and semaphores sized by the reduction kernel's launch
 * configuration, not in proportion to the rows (adv_reduce_staging: their sizes for a sum of rows
 * x cols fp32 values into cols, 0 and 0 where the kernel needs neither). From the op
 * log, each such pair found in its node (both of the sizes the configuration gives the recorded
 * rows, allocated and freed in a row) gets in size[a] (per allocation, 0 elsewhere) its size at
 * 1/k of the rows; left out when the smaller batch needs no staging. Returns the number of pairs,
 * -1 out of memory. */
long adv_reduce_bufs(const adv_model *m, unsigned k, uint64_t *size);
void adv_reduce_staging(uint64_t rows, uint64_t cols, uint64_t *staging, uint64_t *sema);
/* What does not shrink with the batch under accumulation: from the op log's shapes, each
 * storage whose first tensor (an op's output, or a gradient a node was given) has neither the
 * recorded batch nor its rows (batch x sequence) as its leading dimension (the positions'
 * embedding, a causal mask) gets in size[a] its own size, where size[a] is 0 (the sizes
 * adv_accum takes: such an allocation is made again at its size in each micro-batch, and so is
 * what a rewrite made for it; the batch: batch_dims in gm_advise_autocast.c). Returns the number
 * found, -1 out of memory. */
long adv_batch_fixed(const adv_model *m, uint64_t *size);

/* How many splits of the keys FlashAttention's forward makes for an attention of batch x heads
 * queries of seq x head_dim (gm_advise_autocast.c: 1, none, when its blocks fill the device) on
 * the virtual GPU's 132 SMs, dropout off. */
unsigned adv_flash_splits(uint64_t batch, uint64_t heads, uint64_t seq, uint64_t head_dim);
/* A saved tensor a backward node unpacks (a checkpointed block's recomputed one, save_on_cpu's
 * copy back) is the node's local: it dies when the node's function returns, before autograd sums
 * the bias gradient of a Linear's addmm down to the bias's shape (the sum's result, its staging);
 * the recording, which kept it in the node, freed it after that sum. From the op log, sum_of[a]
 * (per recorded allocation) is the recorded allocation of that sum's result for each tensor an
 * addmm's node lets go of after its bias sum (UINT32_MAX elsewhere). Returns the number found, -1
 * out of memory. */
long adv_bias_sums(const adv_model *m, uint32_t *sum_of);

/* bf16 storage undone: a recording made with saved activations stored as bf16 (the trainer's
 * --act-dtype bf16) converts each one at the stash point (an allocation of half the size named
 * as the tensor, then the fp32 one freed) and back at the restore point (an fp32 allocation,
 * then the bf16 one freed). Each such chain becomes the fp32 tensor living from its birth to the
 * restored tensor's death, which is the trace adv_stash's bf16 option rewrites; so a bf16
 * recording is advised as its fp32 trace with bf16 applied again. *chains: the chains undone;
 * *broken: conversions to bf16 whose tensor is not converted back by a later conversion (an
 * offload between them, say): when it is not 0 nothing is changed. 0 or -1 (no memory). */
int adv_unbf16(adv_model *m, size_t *chains, size_t *broken);

/* Gradient accumulation by k: in each step, allocations born and freed inside the step's
 * forward/backward shrink by k (rounded up) and the forward and backward repeat k times (the
 * copies after the last backward event of the step); the rest (gradients) happen once. One made
 * for a tensor born outside every step (adv_alloc.orig: autocast's bf16 copy of a parameter)
 * repeats at its size. size_k (NULL: none): per allocation, its size in a micro-batch where that
 * is not the recorded one over k (adv_reduce_bufs), 0 elsewhere. */
int adv_accum(adv_model *m, unsigned k, const uint64_t *size_k);

typedef struct adv_opt_stats {
    uint64_t grad_bytes;    /* gradients freed after each step */
    uint64_t state_bytes;   /* optimizer state kept on the host */
    uint64_t traffic_bytes; /* host<->device bytes of the optimizer state over the trace */
    size_t ngrads, nstate;
} adv_opt_stats;

/* grad_none: gradients (born in backward, outliving their step) are freed in the optimizer
 * phase after their parameter's update and born again in the next step where they were born in
 * the first. offload_opt: optimizer state (born in the optimizer phase, outliving its step)
 * lives on the host; each step it is brought in on the copy stream for its update and freed
 * after it. */
int adv_opt(adv_model *m, int grad_none, int offload_opt, adv_opt_stats *st);

/* 1 when the recording keeps gradients from one step into the next (the ones grad_none frees),
 * 0 when it keeps none (the program sets them to None already, PyTorch's default since 2.0, or
 * makes none), -1 out of memory. */
int adv_keeps_grads(const adv_model *m);

/* Bytes that live through every step: parameters (born before the first step, never freed in
 * one), gradients and optimizer state (as above). */
typedef struct adv_floor {
    uint64_t params, grads, state;
} adv_floor;
void adv_floor_bytes(const adv_model *m, adv_floor *f);

/* The classes of saved activations a recompute can drop (born in forward child range F, dead
 * in the matching backward B), most bytes first. Returns a malloc'ed array (caller frees). */
uint32_t *adv_saved_classes(const adv_model *m, size_t *n);

/* ZeRO sharding across N ranks (the trainer's contract: SHARDING.md; ADVISE.md): a shard of an
 * fp32 tensor of `bytes` holds ceil(n / N) elements, n = bytes / 4. */
uint64_t adv_shard_bytes(uint64_t bytes, unsigned ranks);
typedef struct adv_zero_stats {
    uint64_t state_bytes, state_shard_bytes; /* optimizer state: recorded, and per rank */
    uint64_t grad_bytes, grad_shard_bytes;   /* stage 2: gradients, recorded and their shards */
    size_t nstate, ngrads;
    size_t ngrads_from_uses; /* stage 2: gradient copies whose completing op came from uses (the
                              * others are reduce-scattered at the end of the backward) */
} adv_zero_stats;
/* Stage 1: optimizer state (born in the optimizer phase, kept across steps) shrinks to its
 * shard. Stage 2, in addition: each step's gradient is freed right after the op that completes
 * it in the step's last micro-batch (its last use before the optimizer phase), where a shard
 * (grad.shard.<p>) is born; the shard is freed after the parameter's update (adv_opt's point).
 * A stage below 1 changes nothing. 0 or -1 (no memory). */
int adv_zero(adv_model *m, unsigned ranks, int stage, adv_zero_stats *st);

/* ZeRO-3 (the trainer's --zero 3, train/README.md "ZeRO-3"): parameters sharded too. */
typedef struct adv_zero3_stats {
    adv_zero_stats z;                        /* the stage-2 part (state and gradient shards) */
    uint64_t param_bytes, param_shard_bytes; /* parameters: recorded, and per rank */
    uint64_t largest_unit_bytes;             /* the largest unit's full parameters (a layer, or the
                                              * embedding / head: wte) */
    uint64_t largest_layer_params;           /* DeepSpeed's L: the largest layer's parameters */
    uint64_t nparams_elems;                  /* DeepSpeed's Psi: parameter elements */
    size_t nparams, ngathers;                /* parameter tensors; gather buffers made */
    int layers;
} adv_zero3_stats;
/* Rewrites a one-rank (zero 0) recording of the included trainer into what one rank of `ranks`
 * allocates under --zero 3 --prefetch K [--offload params]: each parameter a shard of
 * ceil(n / N) elements (with offload_params: in pinned host memory, on the device only while
 * gathered or updated), the trainer's unit schedule of gather.<p> buffers at the positions of
 * one micro-batch (embedding | layers | head fwd | head bwd | layers reversed | embedding),
 * then adv_zero's stage 2 (gradient and optimizer-state shards). 0; -1 no memory; 1 the
 * recording is not one this can rewrite (why in err: not the trainer's parameters, --accum,
 * already sharded). */
int adv_zero3(adv_model *m, unsigned ranks, int prefetch, int offload_params, adv_zero3_stats *st, char *err,
              size_t errsz);

/* FSDP2's FULL_SHARD on a PyTorch recording (m->torch; gm_advise_fsdp.c): fully_shard on every
 * block of the repeated list (parameters "h.3.*") and on the model; each parameter, gradient and
 * optimizer state its shard, every unit's full parameters all-gathered around its forward and its
 * backward (the root's from its forward to the end of the backward); offload: CPUOffloadPolicy, the
 * shards, gradients, optimizer state and the update on the host, each shard brought in for its
 * gather; reshard 0: reshard_after_forward=False (SHARD_GRAD_OP), a block's parameters kept from
 * its forward to its backward. 0; -1 no memory; 1 not a
 * recording this can rewrite (why in err). */
int adv_fsdp(adv_model *m, unsigned ranks, int offload, int reshard, adv_zero3_stats *st, char *err, size_t errsz);

/* The included trainer updates one parameter after another (at ZeRO-2/3: its state made at the
 * first step, its gradient shard freed; with --offload params its shard brought in and sent
 * back): each run of optimizer-phase events put in parameter order (adam.m.<p>, adam.v.<p>,
 * grad.shard.<p>, <p> by the trainer's parameter order), each parameter's events in their
 * order; adv_opt's rewrite leaves a layer's state births ahead of its gradient frees. 0 or -1. */
int adv_opt_param_order(adv_model *m);

/* `gpumem advise DB --ranks N [--zero 1|2]` (gm_advise_shard.c): each rank's predicted peak
 * under ZeRO 0, 1 and 2 (or 0 and `zero`) across `ranks` ranks, text or JSON; check: re-run
 * under mpirun (o: where and through which path the command ran). Returns the exit code. */
int gm_advise_shard(const adv_model *m, const gm_rerun_origin *o, unsigned ranks, int zero, int prefetch, size_t budget,
                    int json, int check, FILE *out);

/* The `gpumem advise` command (gm_advise_cmd.c). */
int gm_advise_main(int argc, char **argv);

#endif
