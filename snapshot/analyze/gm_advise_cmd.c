/* gm_advise_cmd.c — `gpumem advise`: the candidates, the costs, the search, the printers and
 * --check, on top of the model of gm_advise.c.
 *
 * A candidate (struct spec) is a set of techniques. Evaluating it copies the recorded model,
 * applies the rewrites in the order a program runs them (accumulation reshapes the step first;
 * then set-to-none and optimizer offload; then the stash of saved activations: recompute, bf16,
 * offload), replays the result once through the allocator and prices it. Single techniques are
 * the recommendations; every combination of them is searched for --budget and the Pareto front
 * (least extra time for the peak) is printed as the combinations. Text and JSON print the same
 * evaluated specs.
 *
 * Costs per step: recompute = the measured duration of the ops it re-runs (timed launches, else
 * NVTX leaf ranges), or a --gpu roofline (bytes re-created, written once and read once, at the
 * device's bandwidth) when that is larger; offload = the copies a phase cannot hide (transfer
 * time at the link bandwidth beyond the span of the phase that must overlap it); optimizer
 * offload = its traffic at the link bandwidth; bf16 = the conversions at the device bandwidth;
 * accumulation = one launch overhead (5 us) per extra op launched; set-to-none = nothing.
 */
#include "snapshot/analyze/gm_advise.h"
#include "snapshot/analyze/gm_category.h"
#include "snapshot/analyze/gm_replay.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const usage_advise =
    "usage: gpumem advise DB [--budget SIZE] [--link GB/s] [--gpu NAME] [--top N] [--json] "
    "[--check] [--lossy-ok]\n"
    "                        [--try FLAGS] [--oom-step] [--device N]\n"
    "       gpumem advise DB --ranks N [--zero 1|2|3] [--prefetch K] [--budget SIZE] [--json] [--check]\n"
    "\n"
    "What would the peak be under each memory technique? Each technique rewrites the recorded\n"
    "trace (recompute, offload of activations or optimizer state, gradient accumulation by\n"
    "2/4/8, gradients set to none, bf16 saved activations) and the rewritten trace is replayed\n"
    "through gpumem's allocator under the recorded configuration: rounding, caching and\n"
    "fragmentation are in every predicted peak. A recommendation lowers the peak reserved (what\n"
    "the device must hold), or the peak allocated leaving the reserved as it is; one that lowers\n"
    "the peak allocated but raises the reserved is listed as not worth it.\n"
    "For a recording of the included trainer\n"
    "(train_gpt2 in the recorded command line) each recommendation is its exact flags;\n"
    "otherwise the change in words, with the PyTorch way of doing it. Techniques add to those\n"
    "the recorded command uses (a flag it sets is merged: --offload activations on an\n"
    "--offload optimizer run is --offload activations,optimizer). A run that hit an OOM is\n"
    "advised from the steps that completed before it, else refused with the reason. A program\n"
    "on several devices: the busiest device's trace (a PyTorch program's: the busiest of its\n"
    "tensors' devices), replayed as its own heap (each device has its own allocator; said\n"
    "first, JSON \"device\", \"devices\", \"device_from\"; --device N for another's), never the\n"
    "devices as one.\n"
    "  --budget SIZE  the cheapest combination (least extra time) whose predicted peak reserved\n"
    "                 fits SIZE (e.g. 40G); exit 1, with the shortfall and why, when none does\n"
    "  --link GB/s    host link bandwidth for offload (default: the recording's own host\n"
    "                 copies when timed, else 25 GB/s, PCIe 4 x16); 0.001 to 100000\n"
    "  --gpu NAME     H100, H200 or A100: roofline costs (peak bf16 FLOP/s, HBM bandwidth)\n"
    "  --device N     device N's trace instead of the busiest device's, --check's re-run read\n"
    "                 the same (a device the program held no memory on: exit 2, naming the ones\n"
    "                 it did; memory on N alone: the output is the same as without it)\n"
    "  --top N        recommendations and combinations shown and re-run by --check (default\n"
    "                 10); --json lists every one\n"
    "  --try FLAGS    evaluate one combination given as trainer flags (--recompute LIST\n"
    "                 --offload LIST --accum K --grad-none --act-dtype bf16|fp32), merged with\n"
    "                 the recorded ones and printed as the only recommendation (with --check:\n"
    "                 re-run too); what advise does not predict for the recording (its notes,\n"
    "                 JSON not_predicted: accumulation on a user's script) is refused, exit 2\n"
    "  --oom-step     a run that hit an OOM: advise from the partial trace up to it (else only\n"
    "                 its complete steps are advised, or it is refused)\n"
    "  --json         one JSON object (contract in snapshot/analyze/ADVISE.md)\n"
    "  --lossy-ok     advise on a recording that lost events (else refused, exit 3: its\n"
    "                 trace misses allocations or frees); the first line says so\n"
    "  --check        re-run the recorded command (the trainer, the PyTorch GPT-2 script) under\n"
    "                 gpumem record with each recommendation's flags and print predicted against\n"
    "                 measured peaks (PyTorch's own for a PyTorch recording); the\n"
    "                 environment of this command (GPUMEM_SIM_*, GPUMEM_CONF, GPUMEM_LIMIT)\n"
    "                 is the re-run's; it runs in the recorded directory, argv[0] by the\n"
    "                 path PATH found it at (a virtual environment's python keeps its\n"
    "                 environment); a failed re-run is said with the last lines of its\n"
    "                 stderr and the command to run by hand\n"
    "  --ranks N      ZeRO sharding instead: each rank's peak under ZeRO-0, 1, 2 and 3 (with and\n"
    "                 without --offload params) across N ranks, predicted from a recording of\n"
    "                 ONE rank at the per-rank batch (1 rank with -B 4 has the activations of\n"
    "                 each of 2 ranks with -B 8); --zero 1|2|3 one stage only; --prefetch K the\n"
    "                 ZeRO-3 units gathered ahead (default 1, the trainer's); DeepSpeed's\n"
    "                 ZeRO-3 estimate formula is printed beside; --check re-runs under\n"
    "                 mpirun -np N with -B times N and --zero (every rank's peak compared;\n"
    "                 as root under Open MPI with --allow-run-as-root, in the plan's line too).\n"
    "                 A PyTorch recording: ZeRO-3 is FSDP2 (fully_shard per block), and\n"
    "                 --check re-runs the project's script with --fsdp N (one process as\n"
    "                 rank 0 of N over torch's fake process group). --try, --oom-step, --link\n"
    "                 and --gpu are not part of this prediction: with --ranks they are refused\n"
    "                 With --budget SIZE: the cheapest plan whose predicted peak reserved per\n"
    "                 rank fits (ZeRO 0, 1, 2, then 3 at --prefetch 2, 1, 0, with --offload\n"
    "                 params, optimizer, --recompute layer), its mpirun line; nothing fits:\n"
    "                 by how much, per category; --check re-runs the plan only\n"
    "Exit code: 0; 1 --budget cannot be met (or is not known to be), or --check: a re-run\n"
    "failed or the plan measured over the budget; 2 usage; 3 unreadable database, events lost\n"
    "(without --lossy-ok), or a run that hit an OOM before any step completed (without\n"
    "--oom-step).\n";

/* Roofline figures (dense bf16 tensor-core peak, HBM bandwidth), from NVIDIA's data sheets:
 * H100 SXM5 989 TFLOP/s, 3.35 TB/s; H200 SXM 989 TFLOP/s, 4.8 TB/s; A100 SXM4 80GB 312 TFLOP/s,
 * 2.039 TB/s. */
typedef struct gpu_spec {
    const char *name;
    double flops, bw;
} gpu_spec;
static const gpu_spec gpus[] = {
    {"H100", 989e12, 3.35e12}, {"H200", 989e12, 4.8e12}, {"A100", 312e12, 2.039e12}};
#define LAUNCH_NS 5000.0 /* one kernel launch's fixed cost, for accumulation's extra launches */

enum { T_RECOMPUTE, T_OFFLOAD, T_ACCUM, T_GRAD_NONE, T_BF16, T_NTECH };
static const char *const tech_names[T_NTECH] = {"recompute", "offload", "accum", "grad_none",
                                                "bf16"};

/* the trainer's --recompute choices and the tensor classes each drops (train/gpt2.c) */
static const char *const rc_choice[] = {"gelu", "ln", "attn", "mlp", "layer"};
#define NRC 5
#define RC_CKPT (1u << 31) /* (combinations' loop) PyTorch: checkpoint every block */
static const char *const rc_classes[NRC][7] = {
    {"h*.mlp.gelu"},
    {"h*.ln*", "h*.ln*.mean", "h*.ln*.rstd"}, /* ln1 and ln2: digits are classes too */
    {"h*.attn.out", "h*.attn.lse"},
    {"h*.mlp.fc", "h*.mlp.gelu"},
    {NULL}};

/* The trainer's activation groups each --recompute choice drops (train/gpt2.c): a choice adds
 * nothing to a recording whose choices already drop its groups. */
enum { G_GELU = 1, G_LN = 2, G_ATT = 4, G_FC = 8, G_OTHER = 16 };
static const unsigned rc_drops[NRC] = {G_GELU, G_LN, G_ATT, G_FC | G_GELU,
                                       G_GELU | G_LN | G_ATT | G_FC | G_OTHER};
static unsigned rc_groups(unsigned rc)
{
    unsigned g = 0;
    for (int i = 0; i < NRC; i++)
        if (rc & (1u << i)) g |= rc_drops[i];
    return g;
}

/* A candidate: techniques added to the recording's own (the recorded command's flags stay; a
 * flag both set is merged, see spec_flags). */
typedef struct spec {
    unsigned rc;  /* trainer: bits of rc_choice */
    int rc_class; /* generic: index into the saved classes, -1 none */
    int bf16, off_act, off_opt, grad_none;
    int fp32;       /* --try --act-dtype fp32 on a bf16 recording: its bf16 storage undone */
    int ckpt;       /* PyTorch: torch.utils.checkpoint around each repeated block (h.0, h.1, ...) */
    int expandable; /* PyTorch: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True */
    unsigned accum; /* the factor on the recorded micro-batches (the flag: recorded x this) */
    /* results */
    int ok;
    alloc_replay_result_t r;
    int r_is_base; /* the rewrite changed nothing: r is the baseline's (evaluate_all fills it) */
    double extra_s, stall_s;
    uint64_t host_bytes, pinned_bytes;
    int feasible; /* offload windows cover the copies */
    size_t short_windows;
    int windows_from_uses;
    uint64_t meas_alloc, meas_res;
    uint64_t meas_dev_alloc, meas_dev_res; /* a torch re-run: the device's peaks beside */
    int measured;
    char check_err[2048]; /* --check: why the re-run failed ("" when it did not) */
    const char *unchecked; /* --check: why this one is not re-run (no flag of the script does it) */
} spec;

/* The techniques of the recorded command (the trainer's flags; the last one of a flag wins, as
 * in the trainer). */
typedef struct recorded {
    unsigned rc, accum;
    int off_act, off_opt, grad_none, bf16;
} recorded;

typedef struct ctx {
    adv_model m;
    int progress; /* stderr is a terminal: a line of the candidates replayed so far */
    int trainer;
    unsigned B;   /* trainer's -B (the PyTorch script's too) */
    int torch;    /* a PyTorch recording (adv_model.torch: 1 its history, 2 gpumem its allocator) */
    int script;   /* ... of the project's own GPT-2 script (tests/torch/train_gpt2.py): its flags */
    char blocks[64]; /* the repeated blocks' list ("h" for h.0, h.1, ...), "" none */
    size_t nblocks;
    recorded rec; /* techniques already in the recorded command */
    int bf16_undone; /* a bf16 recording advised as its fp32 trace with bf16 applied (adv_unbf16) */
    int partial; /* --oom-step: the trace ends at an OOM, in a step that did not complete */
    size_t oom_done; /* an OOM recording: its steps that completed before the OOM */
    char notes[16][1024]; /* what the model does not capture, or how it read the recording */
    gm_torch_reset reset; /* where the program reset PyTorch's peak stats (its max_memory_*()) */
    gm_compiled compiled; /* torch.compile: what the recording cannot see of a compiled region */
    int nnotes;
    /* techniques not predicted for this recording (JSON not_predicted): the note that says why */
    struct {
        const char *technique;
        int note;
    } unpredicted[6];
    int nunpredicted;
    double link_bps;
    const char *link_src;
    const gpu_spec *gpu;
    double step_s;
    int gpu_assumed, step_estimated;
    uint64_t fwdbwd_ops_per_step;
    uint32_t *classes;
    size_t nclasses;
    alloc_replay_result_t base;
    int base_is_m; /* base replays m as it is now (not a bf16 recording before its undo) */
} ctx;

static unsigned flag_int(const char *cmd, const char *flag, unsigned dflt)
{
    size_t n = strlen(flag);
    for (const char *p = strstr(cmd, flag); p; p = strstr(p + 1, flag))
        if ((p == cmd || p[-1] == ' ') && p[n] == ' ')
            return (unsigned)strtoul(p + n + 1, NULL, 10);
    return dflt;
}

static uint32_t find_str(const adv_model *m, const char *s)
{
    for (size_t i = 1; i < m->nstrs; i++)
        if (!strcmp(m->strs[i], s)) return (uint32_t)i;
    return 0;
}

static unsigned spec_ntech(const spec *s)
{
    return (s->rc || s->rc_class >= 0 || s->ckpt) + s->bf16 + s->off_act + s->off_opt + s->grad_none +
           (s->accum > 1) + s->expandable;
}

/* Whether x's techniques are some of y's, fewer of them (x is a part of the combination y). */
static int spec_part_of(const spec *x, const spec *y)
{
    if (spec_ntech(x) >= spec_ntech(y)) return 0;
    if (x->rc & ~y->rc) return 0;
    if (x->rc_class >= 0 && x->rc_class != y->rc_class) return 0;
    if ((x->ckpt && !y->ckpt) || (x->bf16 && !y->bf16) || (x->off_act && !y->off_act) ||
        (x->off_opt && !y->off_opt) || (x->grad_none && !y->grad_none) || (x->expandable && !y->expandable))
        return 0;
    return x->accum <= 1 || x->accum == y->accum;
}

/* A combination is worth its extra changes only when it lowers the peak below every one of its
 * parts (the singles and the smaller stacks, all replayed): one that a part beats (set_to_none
 * stacked on an offload that it made worse) would tell the user to make a change that costs
 * memory. */
static int beaten_by_part(const spec *y, const spec *recs, size_t nrecs, const spec *all, size_t nall)
{
    for (int pass = 0; pass < 2; pass++) {
        const spec *v = pass ? all : recs;
        size_t nv = pass ? nall : nrecs;
        for (size_t i = 0; i < nv; i++)
            if (v[i].ok && spec_part_of(&v[i], y) && v[i].r.peak_reserved <= y->r.peak_reserved) return 1;
    }
    return 0;
}

/* The trainer's flags for a candidate, "" when nothing: each flag the candidate sets, merged
 * with the recorded command's value of it (lists joined, micro-batches multiplied), so that
 * the flags replace the recorded ones (--check: rerun_cmdline). */
static void spec_flags(const ctx *c, const spec *s, char *out, size_t n)
{
    size_t o = 0;
    out[0] = 0;
#define ADD(...) o += (size_t)snprintf(out + o, o < n ? n - o : 0, __VA_ARGS__)
    if (c->script) { /* tests/torch/train_gpt2.py: -B is the micro-batch, the last flag wins */
        unsigned ra = c->rec.accum ? c->rec.accum : 1;
        if (s->ckpt) ADD("--checkpoint");
        if (s->off_act) ADD("%s--offload", o ? " " : "");
        if (s->accum > 1) ADD("%s-B %u --accum %u", o ? " " : "", c->B / s->accum, ra * s->accum);
        if (s->grad_none) ADD("%s--set-to-none", o ? " " : "");
        if (s->bf16) ADD("%s--autocast bf16", o ? " " : "");
        return;
    }
    if (s->rc) {
        ADD("--recompute ");
        int first = 1;
        for (int i = 0; i < NRC; i++)
            if ((s->rc | c->rec.rc) & (1u << i)) ADD("%s%s", first ? "" : ",", rc_choice[i]), first = 0;
    }
    if (s->off_act || s->off_opt) {
        int a = s->off_act || c->rec.off_act, p = s->off_opt || c->rec.off_opt;
        ADD("%s--offload %s%s%s", o ? " " : "", a ? "activations" : "", a && p ? "," : "",
            p ? "optimizer" : "");
    }
    if (s->accum > 1) ADD("%s--accum %u", o ? " " : "", s->accum * (c->rec.accum ? c->rec.accum : 1));
    if (s->grad_none) ADD("%s--grad-none", o ? " " : "");
    if (s->bf16) ADD("%s--act-dtype bf16", o ? " " : "");
    if (s->fp32) ADD("%s--act-dtype fp32", o ? " " : "");
#undef ADD
}

/* The recorded command line without the values the candidate's flags replace, then its
 * flags: what --check runs. */
static void rerun_cmdline(const ctx *c, const spec *s, char *out, size_t n)
{
    char buf[sizeof c->m.cmdline], flags[512], *words[1024];
    spec_flags(c, s, flags, sizeof flags);
    int nw = gm_cmd_split(c->m.cmdline, buf, sizeof buf, words, 1024), kept = 0;
    for (int k = 0; k < nw; k++) {
        const char *t = words[k];
        int replaced = (s->rc && !strcmp(t, "--recompute")) ||
                       ((s->off_act || s->off_opt) && !strcmp(t, "--offload")) ||
                       (s->accum > 1 && !strcmp(t, "--accum")) ||
                       ((s->bf16 || s->fp32) && !strcmp(t, "--act-dtype"));
        if (replaced) {
            k++; /* and its value */
            continue;
        }
        words[kept++] = words[k];
    }
    gm_cmd_join(words, kept, out, n); /* the recorded words quoted as they came */
    size_t o = strlen(out);
    if (flags[0]) snprintf(out + o, o < n ? n - o : 0, " %s", flags);
}

static void spec_target(const ctx *c, const spec *s, char *out, size_t n, int json)
{
    size_t o = 0;
    out[0] = 0;
#define ADD(...) o += (size_t)snprintf(out + o, o < n ? n - o : 0, __VA_ARGS__)
    if (c->torch && json) { /* what each change acts on: a module path, or the kind of tensor */
        if (s->ckpt) ADD("%s.*", c->blocks);
        if (s->off_act || s->bf16) ADD("%ssaved activations", o ? ", " : "");
        if (s->off_opt) ADD("%soptimizer state", o ? ", " : "");
        if (s->accum > 1) ADD("%sthe batch", o ? ", " : "");
        if (s->grad_none) ADD("%sgradients", o ? ", " : "");
        if (s->expandable) ADD("%sthe caching allocator", o ? ", " : "");
        return;
    }
    if (s->rc) {
        ADD("recompute ");
        int first = 1;
        for (int i = 0; i < NRC; i++)
            if (s->rc & (1u << i)) ADD("%s%s", first ? "" : "+", rc_choice[i]), first = 0;
    }
    if (s->rc_class >= 0)
        ADD("%srecompute %s", o ? ", " : "", adv_str(&c->m, c->classes[s->rc_class]));
    if (s->ckpt) ADD("%scheckpoint every %s.* block", o ? ", " : "", c->blocks);
    if (s->expandable) ADD("%sexpandable segments", o ? ", " : "");
    if (s->off_act) ADD("%soffload saved activations", o ? ", " : "");
    if (s->off_opt) ADD("%soffload optimizer state", o ? ", " : "");
    if (s->accum > 1) ADD("%saccumulate %u micro-batches", o ? ", " : "", s->accum);
    if (s->grad_none) ADD("%sgradients set to none", o ? ", " : "");
    if (s->bf16) ADD("%sbf16 saved activations", o ? ", " : "");
    if (s->fp32) ADD("%sfp32 saved activations (the recorded bf16 undone)", o ? ", " : "");
#undef ADD
}

/* a recompute choice (--try's trainer choices, or a class of tensors) in a program's own words */
#define RECOMPUTE_WORDS "recompute %s in backward instead of keeping it (torch.utils.checkpoint on the block that produces it)"
static const char *recompute_what(const ctx *c, const spec *s)
{
    return s->rc_class >= 0 ? adv_str(&c->m, c->classes[s->rc_class]) : "the layer's activations";
}

/* the change in words, for a program that is not the trainer */
static void spec_words(const ctx *c, const spec *s, char *out, size_t n)
{
    size_t o = 0;
    out[0] = 0;
#define ADD(...) o += (size_t)snprintf(out + o, o < n ? n - o : 0, __VA_ARGS__)
    if (s->rc || s->rc_class >= 0) ADD(RECOMPUTE_WORDS, recompute_what(c, s));
    if (s->off_act)
        ADD("%skeep saved activations in pinned host memory "
            "(torch.autograd.graph.save_on_cpu(pin_memory=True))",
            o ? "; " : "");
    if (s->off_opt)
        ADD("%skeep optimizer state on the host (DeepSpeed ZeRO-Offload, or "
            "torch.distributed.fsdp.CPUOffload)",
            o ? "; " : "");
    if (s->accum > 1)
        ADD("%saccumulate gradients over %u micro-batches of 1/%u the batch (loss / %u, "
            "loss.backward() per micro-batch, "
            "torch.optim.Optimizer.step() every %u)",
            o ? "; " : "", s->accum, s->accum, s->accum, s->accum);
    if (s->grad_none)
        ADD("%sfree gradients after each step (torch.optim.Optimizer.zero_grad(set_to_none=True))",
            o ? "; " : "");
    if (s->bf16)
        ADD("%sstore saved activations in bf16 (torch.autocast(device_type='cuda', "
            "dtype=torch.bfloat16))",
            o ? "; " : "");
#undef ADD
}

/* Where the steps and phases came from, when not from NVTX ranges: inferred from the
 * allocations (which kernels begin the backward and run the update, when launches were
 * recorded), or not decided at all — then advise predicts nothing and says what to record. */
/* The fewest forward passes a step of the recording runs (a forward after a backward starts a
 * new one): more than one, and the loop accumulates micro-batches already. */
static unsigned fwd_passes(const adv_model *m)
{
    unsigned fewest = 0, cur = 0;
    int64_t step = INT64_MIN;
    int prev = ADV_PH_OTHER;
    for (size_t i = 0; i <= m->nevs; i++) {
        const adv_ev *e = i < m->nevs ? &m->evs[i] : NULL;
        if (e && e->step < 0) continue;
        if (!e || e->step != step) {
            if (cur && (!fewest || cur < fewest)) fewest = cur;
            if (!e) break;
            step = e->step, cur = 0, prev = ADV_PH_OTHER;
        }
        if (e->phase == ADV_PH_FWD && prev != ADV_PH_FWD) cur++;
        if (e->phase == ADV_PH_FWD || e->phase == ADV_PH_BWD) prev = e->phase;
    }
    return fewest;
}

/* A technique left out of the predictions, with the note that says why (the text's notes, the
 * JSON's notes and not_predicted). */
static void unpredicted(ctx *c, const char *technique, const char *why)
{
    if (c->nnotes >= (int)(sizeof c->notes / sizeof c->notes[0]) ||
        c->nunpredicted >= (int)(sizeof c->unpredicted / sizeof c->unpredicted[0]))
        return;
    for (int i = 0; i < c->nunpredicted; i++)
        if (!strcmp(c->unpredicted[i].technique, technique)) return; /* the first reason stands */
    int note = 0; /* one note for the techniques one reason withholds */
    while (note < c->nnotes && strcmp(c->notes[note], why))
        note++;
    if (note == c->nnotes) snprintf(c->notes[c->nnotes++], sizeof c->notes[0], "%s", why);
    c->unpredicted[c->nunpredicted].technique = technique;
    c->unpredicted[c->nunpredicted++].note = note;
}

/* torch.compile: what advise cannot see in a compiled region, and compile-time tensors in the
 * trace it replays (gm_compiled.c) */
static void compiled_notes(ctx *c)
{
    const gm_compiled *cc = &c->compiled;
    const size_t max = sizeof c->notes / sizeof *c->notes;
    if (!cc->compiled || (size_t)c->nnotes >= max) return;
    /* withheld, not predicted: the rewrites act on a compiled backward's saved tensors as if
     * eager, and save_on_cpu around a compiled forward measured 103.59 MiB against a prediction
     * of 99.09 (ADVISE.md) */
    const char *why = "torch.compile: PyTorch's module hooks do not fire inside a compiled region (its phases stop "
                      "at the compiled module) and inductor's partitioner, not advise's model, decides what the "
                      "compiled backward saves and what it recomputes: activation recompute and saved-activation "
                      "offload (save_on_cpu) are not predicted for it; to know, make the change and record it again";
    unpredicted(c, "recompute", why);
    unpredicted(c, "offload_act", why);
    if (!cc->autotune_at_peak || (size_t)c->nnotes >= max) return;
    char tune[512];
    gm_compiled_note(cc, tune, sizeof tune);
    snprintf(c->notes[c->nnotes++], sizeof c->notes[0],
             "%s; the baseline and the predictions below replay them as recorded, so a run with the compile cache "
             "warm peaks lower than they say",
             tune);
}

/* The note of a technique of s that is not predicted for this recording (unpredicted), or -1:
 * one rule for the single rows, the combinations and --try, so that a prediction withheld from
 * the table cannot be had by asking for it (--try '--accum 4' on a user's script). */
static int spec_withheld(const ctx *c, const spec *s)
{
    for (int i = 0; i < c->nunpredicted; i++) {
        const char *t = c->unpredicted[i].technique;
        if ((!strcmp(t, "accum") && s->accum > 1) || (!strcmp(t, "bf16") && s->bf16) ||
            (!strcmp(t, "grad_none") && s->grad_none) ||
            (!strcmp(t, "recompute") && (s->rc || s->rc_class >= 0 || s->ckpt)) ||
            (!strcmp(t, "offload_act") && s->off_act))
            return c->unpredicted[i].note;
    }
    return -1;
}

static void phases_note(gm_db *d, ctx *c)
{
    const adv_model *m = &c->m;
    if (m->phases_from == GM_CSRC_NONE) {
        char hint[400];
        gm_phases_hint(d, hint, sizeof hint);
        snprintf(c->notes[c->nnotes++], sizeof c->notes[0],
                 "forward, backward and update cannot be told apart in this recording (%s): advise "
                 "predicts nothing rather than guess; to tell them: %s",
                 m->phases_why[0] ? m->phases_why : "no steps", hint);
        return;
    }
    if (m->phases_from != GM_CSRC_INFERENCE) return;
    char kb[160] = "", ku[256] = "";
    sqlite3_stmt *s;
    if (gm_table_exists(d, "launches") &&
        sqlite3_prepare_v2(d->db,
                           "SELECT l.seq, s.s FROM launches l JOIN strings s ON s.id = l.kernel "
                           "WHERE l.seq >= ?1 AND l.seq <= ?2 AND l.op = 0 ORDER BY l.seq",
                           -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, (sqlite3_int64)m->inferred_bwd_seq);
        sqlite3_bind_int64(s, 2, (sqlite3_int64)m->inferred_end_seq);
        size_t nu = 0;
        while (sqlite3_step(s) == SQLITE_ROW) {
            uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0);
            char *k = gm_demangle((const char *)sqlite3_column_text(s, 1));
            if (!k) continue;
            char *paren = strchr(k, '(');
            if (paren) *paren = 0; /* the function's name, not its parameters */
            if (!kb[0] && seq >= m->inferred_bwd_seq) snprintf(kb, sizeof kb, "%s", k);
            if (m->inferred_opt_seq && seq >= m->inferred_opt_seq && nu < 3 && !strstr(ku, k)) {
                size_t o = strlen(ku);
                snprintf(ku + o, sizeof ku - o, "%s%s", nu++ ? ", " : "", k);
            }
            free(k);
        }
        sqlite3_finalize(s);
    }
    /* what came from the program and what was inferred: a loop with "step N" ranges and no
     * phases in them has its steps from NVTX */
    size_t o = m->steps_from == GM_CSRC_PHASES
                   ? (size_t)snprintf(c->notes[c->nnotes], sizeof c->notes[0],
                                      "no NVTX phases in this recording: its %zu steps are its NVTX \"step N\" "
                                      "ranges; forward / backward / update and %zu layers (%zu allocations each) "
                                      "were inferred from its allocations (gpumem report's categories: "
                                      "activations are what a forward makes and its backward frees)",
                                      m->nsteps, m->inferred_layers, m->inferred_layer_allocs)
                   : (size_t)snprintf(c->notes[c->nnotes], sizeof c->notes[0],
                                      "no NVTX \"step N\" ranges or phases in this recording: its %zu steps, "
                                      "forward / backward / update and %zu layers (%zu allocations each) were inferred from its "
                                      "allocations (gpumem report's categories: activations are what a forward "
                                      "makes and its backward frees)",
                                      m->nsteps, m->inferred_layers, m->inferred_layer_allocs);
    if (kb[0] && o < sizeof c->notes[0])
        o += (size_t)snprintf(c->notes[c->nnotes] + o, sizeof c->notes[0] - o, "; the backward begins with kernel %s",
                              kb);
    if (ku[0] && o < sizeof c->notes[0])
        snprintf(c->notes[c->nnotes] + o, sizeof c->notes[0] - o, "; the update runs %s", ku);
    c->nnotes++;
}

/* Gradient accumulation and set-to-none act on a backward: its gradients, and the loss it
 * starts from. A recording with none (a loop that only allocates and frees, a forward-only
 * program) gets neither, and a note that says why (withheld as unpredicted: no row, no
 * combination, no --try). A backward is found in a bwd / backward range, or, with inferred
 * phases, where gm_category.c found a gradient: the inference calls what follows each step's
 * highest point a backward, which in a loop that makes and frees a batch of buffers is its
 * frees. */
static void backward_note(ctx *c)
{
    const adv_model *m = &c->m;
    if (m->phases_from == GM_CSRC_NONE) return; /* nothing is predicted anyway */
    int found = 0;
    if (m->phases_from == GM_CSRC_INFERENCE)
        found = m->inferred_grads > 0;
    else
        for (size_t i = 0; i < m->nevs && !found; i++)
            found = m->evs[i].phase == ADV_PH_BWD;
    if (found) return;
    const char *why =
        m->phases_from == GM_CSRC_INFERENCE
            ? "no backward was found in this recording: none of its allocations is a gradient (made in a "
              "backward and kept to the update, or made in each backward and freed in it), so what follows "
              "each step's highest point is its frees, not a backward: gradient accumulation and "
              "set-to-none gradients are not proposed (they need a loss, a backward and an optimizer step)"
            : "no backward was found in this recording: no allocation or free happens in a bwd / backward "
              "range: gradient accumulation and set-to-none gradients are not proposed (they need a loss, "
              "a backward and an optimizer step)";
    unpredicted(c, "accum", why);
    unpredicted(c, "grad_none", why);
}

/* The change to make, in PyTorch's terms (a torch recording). */
static void spec_change(const ctx *c, const spec *s, char *out, size_t n)
{
    size_t o = 0;
    out[0] = 0;
#define ADD(...) o += (size_t)snprintf(out + o, o < n ? n - o : 0, __VA_ARGS__)
    if (s->ckpt)
        ADD("torch.utils.checkpoint around every block of model.%s (%s.0 ... %s.%zu), use_reentrant=False", c->blocks,
            c->blocks, c->blocks, c->nblocks ? c->nblocks - 1 : 0);
    else if (s->rc || s->rc_class >= 0) /* --try's choices, a class of tensors: said as "how" says them */
        ADD(RECOMPUTE_WORDS, recompute_what(c, s));
    if (s->off_act) ADD("%storch.autograd.graph.save_on_cpu(pin_memory=True) around the forward", o ? "; " : "");
    if (s->accum > 1 && c->B)
        ADD("%sgradient accumulation by %u: micro-batches of %u (1/%u of the batch), (loss / %u).backward() for "
            "each, optimizer.step() every %u",
            o ? "; " : "", s->accum, c->B / s->accum ? c->B / s->accum : 1, s->accum, s->accum, s->accum);
    else if (s->accum > 1) /* a script whose batch size the recording does not say */
        ADD("%sgradient accumulation by %u: micro-batches of 1/%u of the batch, (loss / %u).backward() for "
            "each, optimizer.step() every %u",
            o ? "; " : "", s->accum, s->accum, s->accum, s->accum);
    if (s->grad_none) ADD("%soptimizer.zero_grad(set_to_none=True)", o ? "; " : "");
    if (s->bf16) ADD("%storch.autocast(device_type='cuda', dtype=torch.bfloat16) around the forward", o ? "; " : "");
    if (s->off_opt)
        ADD("%soptimizer state on the host: DeepSpeed ZeRO-Offload, or FSDP with "
            "torch.distributed.fsdp.CPUOffload(offload_params=False)",
            o ? "; " : "");
    if (s->expandable) ADD("%sPYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", o ? "; " : "");
#undef ADD
}

static int evaluate(ctx *c, spec *s, char *err, size_t errsz)
{
    adv_model m;
    s->ok = 0, s->r_is_base = 0;
    adv_model_view(&c->m, &m); /* the rewrites copy what they write */
    int rc = 0;
    /* torch.autocast from the forward's op log: on the recorded trace, before the others */
    int oplog = c->torch && c->m.ntops > 0, autocast = oplog && s->bf16;
    adv_autocast_stats as = {0};
    size_t nrec = m.nrecorded ? m.nrecorded : m.nallocs;
    uint8_t *in_place = autocast ? calloc(nrec + 1, 1) : NULL; /* contributions a sum is made in */
    if (autocast) rc = in_place ? adv_autocast(&m, &as, in_place, s->accum > 1 ? s->accum : 1) : -1;
    /* save_on_cpu packs what the ops save beyond the activations adv_stash packs (outside
     * checkpointed blocks) */
    uint8_t *unpacked = NULL; /* storages adv_pack_saved unpacks itself */
    if (!rc && oplog && s->off_act) {
        unpacked = calloc(nrec + 1, 1);
        if (!unpacked || adv_pack_saved(&m, autocast, s->ckpt, unpacked) < 0) rc = -1;
    }
    /* a recomputed saved tensor dies before its node's bias sum */
    uint32_t *sum_of = NULL;
    if (!rc && oplog && s->ckpt) {
        sum_of = malloc((nrec + 1) * sizeof *sum_of);
        if (!sum_of || adv_bias_sums(&m, sum_of) < 0) rc = -1;
    }
    if (!rc && s->accum > 1) {
        /* a bias gradient's sum stages in buffers sized by its kernel's launch, not the batch */
        uint64_t *size_k = oplog ? malloc((m.nallocs + 1) * sizeof *size_k) : NULL;
        if (oplog && (!size_k || adv_reduce_bufs(&m, s->accum, size_k) < 0 || adv_batch_fixed(&m, size_k) < 0)) rc = -1;
        if (!rc) rc = adv_accum(&m, s->accum, size_k);
        free(size_k);
    }
    if (!rc && as.sums_in_place && adv_sums_in_place(&m, in_place, nrec) < 0) rc = -1;
    adv_opt_stats os = {0};
    if (!rc && (s->grad_none || s->off_opt)) rc = adv_opt(&m, s->grad_none, s->off_opt, &os);
    adv_stash_stats ss = {0};
    uint32_t cls[8];
    /* a bf16 recording advised as its fp32 trace: bf16 applied again, unless undone (--try) */
    adv_stash_opts so = {.recompute_cls = cls,
                         .bf16 = (s->bf16 && !autocast) || (c->bf16_undone && !s->fp32),
                         .offload = s->off_act};
    if (s->rc_class >= 0) cls[so.nrecompute++] = c->classes[s->rc_class];
    for (int i = 0; i < NRC; i++) {
        if (!(s->rc & (1u << i))) continue;
        if (!rc_classes[i][0]) so.recompute_layer = 1;
        for (int k = 0; k < 7 && rc_classes[i][k] && so.nrecompute < 8; k++) {
            uint32_t id = find_str(&c->m, rc_classes[i][k]);
            if (id) cls[so.nrecompute++] = id;
        }
    }
    if (s->ckpt) so.recompute_layer = 1, so.recompute_blocks = 1;
    so.offload_at_use = c->torch && s->off_act;
    so.unpacked = unpacked, so.nunpacked = unpacked ? nrec : 0;
    so.sum_of = sum_of, so.nsum_of = sum_of ? nrec : 0;
    if (s->expandable) {
        char conf[1200], cerr[256];
        const char *rest = strchr(m.config, ',');
        snprintf(conf, sizeof conf, "preset:pytorch-expandable%s", rest ? rest : "");
        alloc_config_default(&m.cfg);
        if (alloc_config_parse(&m.cfg, conf, cerr, sizeof cerr) != ALLOC_OK) rc = -1;
        adv_cfg_uncapped(&m.cfg);
    }
    if (!rc && (so.nrecompute || so.recompute_layer || so.bf16 || so.offload))
        rc = adv_stash(&m, &so, c->link_bps, &ss);
    /* a rewrite that changed nothing replays as the recording (GPUMEM_ADVISE_DUMP: every replay
     * still writes its trace) */
    if (!rc && c->base_is_m && adv_model_replays_as(&m, &c->m) && !getenv("GPUMEM_ADVISE_DUMP"))
        s->r_is_base = 1;
    else if (!rc)
        rc = adv_replay(&m, &s->r, err, errsz);
    else
        snprintf(err, errsz, "out of memory transforming the trace");
    adv_model_free(&m);
    free(unpacked), free(sum_of), free(in_place);
    if (rc) return -1;
    double nsteps = c->m.nsteps ? (double)c->m.nsteps : 1;
    double extra = 0;
    double rc_ns = (double)ss.recompute_ns * nsteps / (nsteps - (double)adv_steady_step(&c->m));
    if (c->gpu) {
        double roof = 2.0 * (double)ss.recompute_bytes / c->gpu->bw * 1e9;
        if (roof > rc_ns) rc_ns = roof;
    }
    extra += rc_ns;
    if (c->step_estimated && ss.offload_bytes) {
        /* no recorded phase spans: forward is a third of the estimated step, backward two */
        double per_step = (double)ss.offload_bytes / nsteps / c->link_bps;
        double stall = (per_step > c->step_s / 3 ? per_step - c->step_s / 3 : 0) +
                       (per_step > 2 * c->step_s / 3 ? per_step - 2 * c->step_s / 3 : 0);
        ss.stall_ns = (uint64_t)(stall * nsteps * 1e9);
    }
    extra += (double)ss.stall_ns;
    double bw = c->gpu ? c->gpu->bw : gpus[0].bw;
    if (s->bf16) /* (a bf16 recording's conversions are in its step time already) */
        extra += 1.5 * (double)(autocast ? as.cast_bytes : ss.convert_bytes) / bw * 1e9;
    extra += (double)os.traffic_bytes / c->link_bps * 1e9;
    if (s->accum > 1)
        extra += (double)(s->accum - 1) * (double)c->fwdbwd_ops_per_step * LAUNCH_NS * nsteps;
    s->extra_s = extra / nsteps / 1e9;
    s->stall_s = (double)ss.stall_ns / nsteps / 1e9;
    s->host_bytes =
        (uint64_t)((2.0 * (double)ss.offload_bytes + (double)os.traffic_bytes) / nsteps);
    s->pinned_bytes = ss.pinned_bytes + os.state_bytes;
    /* Capuchin: every window covers its copies out and in, and each phase hides its copies */
    s->feasible = !s->off_act || (ss.short_windows == 0 && ss.stall_ns == 0);
    s->short_windows = ss.short_windows;
    s->windows_from_uses = ss.windows_from_uses;
    s->ok = 1;
    return 0;
}

/* ------------------------------------------------------------------ every core */

/* Candidates are independent: each rewrites a view of the model (adv_model_view: what it
 * writes is copied) and replays it, and nothing else is written but its own spec. A batch of
 * them runs on every core (each thread takes the next one in list order), with the replay of
 * the model as recorded beside them when asked; a candidate whose rewrite changed nothing takes
 * that replay's result once the batch is done. The first failure in list order is the one
 * reported (the baseline's first), as when they ran one after the other. */
typedef struct batch {
    ctx *c;
    spec *v;
    alloc_replay_result_t *base; /* item 0 when not NULL: the baseline replay into it */
    pthread_mutex_t mu;
    size_t failed; /* the first item that failed in list order, SIZE_MAX none */
    size_t done, items; /* for the progress line */
    char err[600];
} batch;

static void batch_item(void *arg, size_t i)
{
    batch *b = arg;
    char err[512];
    int bad = b->base && i == 0 ? adv_replay(&b->c->m, b->base, err, sizeof err)
                                : evaluate(b->c, &b->v[i - (b->base != NULL)], err, sizeof err);
    if (b->c->progress) {
        pthread_mutex_lock(&b->mu);
        fprintf(stderr, "\rgpumem advise: %zu of %zu replays...", ++b->done, b->items);
        pthread_mutex_unlock(&b->mu);
    }
    if (!bad) return;
    pthread_mutex_lock(&b->mu);
    if (i < b->failed) {
        b->failed = i;
        snprintf(b->err, sizeof b->err, "%s%s", b->base && i == 0 ? "replay failed: " : "", err);
    }
    pthread_mutex_unlock(&b->mu);
}

/* As many threads as cores, and as the free memory holds candidates: each may hold its own
 * copy of what it rewrites, its rewritten events and its trace at once (at most about three
 * copies of the events). One with GPUMEM_ADVISE_DUMP (every replay writes that one file). */
static int batch_threads(const ctx *c, size_t items)
{
    if (items < 2 || getenv("GPUMEM_ADVISE_DUMP")) return 1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    double each = 3.0 * (double)c->m.nevs * sizeof(adv_ev) + 2.0 * (double)c->m.nallocs * sizeof(adv_alloc) +
                  (double)(64 << 20);
    long fit = pages > 0 && psz > 0 ? (long)((double)pages * (double)psz / each) : 1;
    long n = ncpu < fit ? ncpu : fit; /* gm_parallel_for caps it at the items and 64 */
    return n > 1 ? (int)(n < 64 ? n : 64) : 1;
}

/* Evaluates v[0..n) (and the baseline into *base when not NULL) on every core. 0, or -1 with
 * the first failure's message in err. */
static int evaluate_all(ctx *c, spec *v, size_t n, alloc_replay_result_t *base, char *err, size_t errsz)
{
    size_t items = n + (base != NULL);
    batch b = {.c = c, .v = v, .base = base, .failed = SIZE_MAX, .items = items};
    pthread_mutex_init(&b.mu, NULL);
    gm_parallel_for(items, batch_threads(c, items), batch_item, &b);
    if (c->progress && b.done) fprintf(stderr, "\r%50s\r", "");
    pthread_mutex_destroy(&b.mu);
    if (b.failed == SIZE_MAX) {
        for (size_t i = 0; i < n; i++)
            if (v[i].r_is_base) v[i].r = c->base;
        return 0;
    }
    snprintf(err, errsz, "%s", b.err);
    return -1;
}

/* extra time in % of a step; NAN when the recording gives no step time to compare with */
static double pct(const ctx *c, double extra_s)
{
    return c->step_s > 0 ? 100.0 * extra_s / c->step_s : NAN;
}

/* ------------------------------------------------------------------ printing */

static void fmt(uint64_t v, char *o, size_t n)
{
    gm_fmt_bytes(v, o, n);
}

static void json_rec(FILE *out, const ctx *c, const spec *s, int combo)
{
    char target[512], flags[256];
    spec_target(c, s, target, sizeof target, 1);
    spec_flags(c, s, flags, sizeof flags);
    const char *tech = combo                       ? "combo"
                       : s->rc || s->rc_class >= 0 || s->ckpt ? "recompute"
                       : s->off_act || s->off_opt  ? "offload"
                       : s->accum > 1              ? "accum"
                       : s->grad_none              ? "grad_none"
                       : s->bf16 || s->fp32        ? "bf16"
                       : s->expandable             ? "config"
                                                   : "none";
    fprintf(out, "{\"technique\": \"%s\", \"techniques\": [", tech);
    int first = 1;
    int on[T_NTECH] = {s->rc || s->rc_class >= 0 || s->ckpt, s->off_act || s->off_opt, s->accum > 1,
                       s->grad_none, s->bf16 || s->fp32};
    for (int i = 0; i < T_NTECH; i++)
        if (on[i]) fprintf(out, "%s\"%s\"", first ? "" : ", ", tech_names[i]), first = 0;
    if (s->expandable) fprintf(out, "%s\"config\"", first ? "" : ", ");
    fprintf(out, "], \"target\": ");
    gm_json_str(out, target);
    /* what it lowers of the baseline's peaks: a recommendation that leaves the reserved as it is
     * lowers the allocated only, and reads apart in the text */
    fprintf(out, ", \"lowers\": \"%s\"",
            s->r.peak_reserved < c->base.peak_reserved     ? "reserved"
            : s->r.peak_allocated < c->base.peak_allocated ? "allocated"
                                                           : "neither");
    fprintf(out, ", \"flags\": ");
    if (c->trainer || (c->script && flags[0]))
        gm_json_str(out, flags);
    else
        fprintf(out, "null");
    if (c->torch) {
        char change[1024];
        spec_change(c, s, change, sizeof change);
        fprintf(out, ", \"change\": ");
        gm_json_str(out, change);
        if (s->expandable) fprintf(out, ", \"env\": \"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\"");
    }
    if (s->accum > 1) fprintf(out, ", \"k\": %u", s->accum);
    else fprintf(out, ", \"k\": null");
    if (!c->trainer) {
        char words[1024];
        spec_words(c, s, words, sizeof words);
        fprintf(out, ", \"how\": ");
        gm_json_str(out, words);
    }
    fprintf(out, ", \"predicted\": {\"peak_allocated\": %zu, \"peak_reserved\": %zu", s->r.peak_allocated,
            s->r.peak_reserved);
    if (c->torch == 1) /* the device-wide figure beside PyTorch's: what was outside its allocator */
        fprintf(out, ", \"device_peak_reserved\": %" PRIu64,
                (uint64_t)s->r.peak_reserved + (c->m.device_peak_reserved > c->m.rec_peak_reserved
                                                    ? c->m.device_peak_reserved - c->m.rec_peak_reserved
                                                    : 0));
    fprintf(out, "}, \"saving_bytes\": %" PRId64 ", \"cost\": {\"extra_time_pct\": ",
            (int64_t)c->base.peak_reserved - (int64_t)s->r.peak_reserved);
    if (isnan(pct(c, s->extra_s)))
        fputs("null", out); /* no step time recorded */
    else
        fprintf(out, "%.3f", pct(c, s->extra_s));
    fprintf(out,
            ", \"extra_time_s\": %.6f, \"host_bytes\": %" PRIu64 ", \"pinned_bytes\": %" PRIu64
            "}",
            s->extra_s, s->host_bytes, s->pinned_bytes);
    if (s->off_act)
        fprintf(out, ", \"offload_feasible\": %s, \"short_windows\": %zu, \"windows_from\": \"%s\"",
                s->feasible ? "true" : "false", s->short_windows,
                s->windows_from_uses ? "uses" : "layer ranges");
    if (s->measured) {
        double ea = s->meas_alloc ? 100.0 * ((double)s->r.peak_allocated - (double)s->meas_alloc) /
                                        (double)s->meas_alloc
                                  : 0;
        double er = s->meas_res ? 100.0 * ((double)s->r.peak_reserved - (double)s->meas_res) /
                                      (double)s->meas_res
                                : 0;
        fprintf(out,
                ", \"measured\": {\"peak_allocated\": %" PRIu64 ", \"peak_reserved\": %" PRIu64
                ", \"error_allocated_pct\": %.4f, \"error_reserved_pct\": %.4f",
                s->meas_alloc, s->meas_res, ea, er);
        if (c->torch)
            fprintf(out, ", \"device_peak_allocated\": %" PRIu64 ", \"device_peak_reserved\": %" PRIu64,
                    s->meas_dev_alloc, s->meas_dev_res);
        fputc('}', out);
    }
    if (s->check_err[0]) {
        fputs(", \"check_error\": ", out);
        gm_json_str(out, s->check_err);
    }
    if (s->unchecked) {
        fputs(", \"check_skipped\": ", out);
        gm_json_str(out, s->unchecked);
    }
    fprintf(out, "}");
}

static void text_rec(FILE *out, const ctx *c, const spec *s)
{
    char target[512], a[32], r[32], sv[32], hb[32], pb[32], how[1024];
    spec_target(c, s, target, sizeof target, 0);
    fmt(s->r.peak_allocated, a, sizeof a);
    fmt(s->r.peak_reserved, r, sizeof r);
    int64_t save = (int64_t)c->base.peak_reserved - (int64_t)s->r.peak_reserved;
    fmt(save >= 0 ? (uint64_t)save : (uint64_t)-save, sv, sizeof sv);
    fmt(s->host_bytes, hb, sizeof hb);
    fmt(s->pinned_bytes, pb, sizeof pb);
    if (save == 0 && s->r.peak_allocated < c->base.peak_allocated) { /* "saves 0 B" read as a saving */
        char al[32];
        fmt(c->base.peak_allocated - s->r.peak_allocated, al, sizeof al);
        fprintf(out, "  %s\n    peak allocated %s (%s less), reserved %s (as it is); extra time %.4f s/step", target, a,
                al, r, s->extra_s);
    } else {
        fprintf(out, "  %s\n    peak allocated %s, reserved %s (%s %s%s); extra time %.4f s/step", target, a, r,
                save < 0 ? "costs" : "saves", sv, save < 0 ? " more" : "", s->extra_s);
    }
    if (isnan(pct(c, s->extra_s)))
        fputs(" (no step time recorded to compare)", out);
    else
        fprintf(out, " (%.1f%%)", pct(c, s->extra_s));
    if (s->host_bytes) fprintf(out, ", host traffic %s/step, pinned %s", hb, pb);
    if (s->off_act)
        fprintf(out, "%s; %zu tensors idle too briefly for their copies (windows from %s)",
                s->feasible ? ", copies hidden" : ", copies NOT hidden by compute (stall counted)",
                s->short_windows, s->windows_from_uses ? "uses" : "layer ranges");
    fputc('\n', out);
    if (c->torch) {
        spec_change(c, s, how, sizeof how);
        fprintf(out, "    change: %s\n", how);
        if (s->bf16 && c->m.ntops)
            fputs("    note: autocast op by op from the recorded op log (casts, bf16 outputs, the weights' "
                  "bf16 copies, the gradients' precision; ADVISE.md)\n",
                  out);
        else if (s->bf16)
            fputs("    note: an estimate: the model halves the saved activations only; autocast's bf16 copies of "
                  "the weights and its casts (ADVISE.md) are not in it, so --check measures this one; record "
                  "with `gpumem record --torch-ops` for autocast op by op\n",
                  out);
        spec_flags(c, s, how, sizeof how);
        if (c->script && how[0]) fprintf(out, "    flags: %s\n", how);
    } else if (c->trainer) {
        spec_flags(c, s, how, sizeof how);
        fprintf(out, "    flags: %s\n", how);
    } else {
        spec_words(c, s, how, sizeof how);
        fprintf(out, "    how: %s\n", how);
    }
    if (s->measured) {
        char ma[32], mr[32];
        fmt(s->meas_alloc, ma, sizeof ma);
        fmt(s->meas_res, mr, sizeof mr);
        fprintf(out,
                "    check: measured allocated %s (error %+.2f%%), reserved %s (error %+.2f%%)\n",
                ma,
                s->meas_alloc ? 100.0 * ((double)s->r.peak_allocated - (double)s->meas_alloc) /
                                    (double)s->meas_alloc
                              : 0,
                mr,
                s->meas_res ? 100.0 * ((double)s->r.peak_reserved - (double)s->meas_res) /
                                  (double)s->meas_res
                            : 0);
    }
    if (s->check_err[0]) fprintf(out, "    check: FAILED: %s\n", s->check_err);
    if (s->unchecked) fprintf(out, "    check: not re-run: %s\n", s->unchecked);
}

/* ------------------------------------------------------------------ --check */

/* Re-runs the recorded command with the candidate's flags in place of the recorded ones. 0, or
 * -1 with the reason in s->check_err. */
static int check_spec(const ctx *c, spec *s, const gm_rerun_origin *o)
{
    char cmd[sizeof c->m.cmdline + 512];
    s->check_err[0] = 0;
    if (c->torch) { /* the script again with the change's flags (its last flag wins) */
        char flags[256];
        spec_flags(c, s, flags, sizeof flags);
        if (!c->script) {
            snprintf(s->check_err, sizeof s->check_err,
                     "--check re-runs the project's own PyTorch script (tests/torch/train_gpt2.py) only");
            return -1;
        }
        if (s->off_opt || (spec_ntech(s) > (unsigned)s->expandable && !flags[0])) {
            /* not a failure: nothing to re-run it with (said beside the prediction) */
            s->unchecked = "the script has no flag for this change (optimizer state on the host)";
            return 0;
        }
        gm_rerun_script t = {.allocator_gpumem = c->torch == 2, .hooks = c->m.phases_from == GM_CSRC_PHASES};
        snprintf(t.alloc_conf, sizeof t.alloc_conf, "%s%s%s", c->m.torch_conf,
                 s->expandable && c->m.torch_conf[0] ? "," : "", s->expandable ? "expandable_segments:True" : "");
        snprintf(cmd, sizeof cmd, "%s%s%s", c->m.cmdline, flags[0] ? " " : "", flags);
        if (gm_rerun_torch_script(o, cmd, &t, s->check_err, sizeof s->check_err) != 0) {
            char e[sizeof s->check_err];
            snprintf(e, sizeof e, "%s", s->check_err[0] ? s->check_err : "the re-run failed");
            snprintf(s->check_err, sizeof s->check_err, "%.1700s (flags: %.200s)", e, flags[0] ? flags : "none");
            return -1;
        }
        s->meas_alloc = t.peak_allocated, s->meas_res = t.peak_reserved;
        s->meas_dev_alloc = t.device_peak_allocated, s->meas_dev_res = t.device_peak_reserved;
        s->measured = 1;
        return 0;
    }
    rerun_cmdline(c, s, cmd, sizeof cmd);
    if (gm_rerun(o, cmd, NULL, NULL, 0, &s->meas_alloc, &s->meas_res, s->check_err,
                 sizeof s->check_err) != 0) {
        char e[sizeof s->check_err], flags[256];
        spec_flags(c, s, flags, sizeof flags);
        snprintf(e, sizeof e, "%s", s->check_err[0] ? s->check_err : "the re-run failed");
        snprintf(s->check_err, sizeof s->check_err, "%.1700s (flags: %.200s)", e,
                 flags[0] ? flags : "none");
        return -1;
    }
    s->measured = 1;
    return 0;
}

/* ------------------------------------------------------------------ the command */

/* The technique flags of a command line (the trainer's, the last of a flag winning), into r;
 * --try's flags too. 0, or -1 with a message for a person (unknown flag or value). strict: every
 * token must be a technique flag (--try); else other flags are skipped (the recorded command). */
static int parse_techniques(const char *cmd, recorded *r, int strict, char *err, size_t errsz)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", cmd);
    char *save = NULL;
    for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        if (!strcmp(t, "--grad-none")) {
            r->grad_none = 1;
            continue;
        }
        int known = !strcmp(t, "--accum") || !strcmp(t, "--act-dtype") ||
                    !strcmp(t, "--offload") || !strcmp(t, "--recompute");
        if (!known) {
            if (!strict) continue;
            snprintf(err, errsz,
                     "--try: unknown flag '%s' (--recompute LIST, --offload LIST, --accum K, "
                     "--grad-none, --act-dtype bf16|fp32)",
                     t);
            return -1;
        }
        char *v = strtok_r(NULL, " ", &save);
        if (!v) {
            snprintf(err, errsz, "--try: %s needs a value", t);
            return -1;
        }
        if (!strcmp(t, "--accum")) {
            uint64_t k;
            if (gm_arg_uint(v, 1, 65536, &k) != 0) {
                snprintf(err, errsz, "--try: --accum needs a number of micro-batches, got '%s'", v);
                return -1;
            }
            r->accum = (unsigned)k;
        } else if (!strcmp(t, "--act-dtype")) {
            if (strcmp(v, "bf16") && strcmp(v, "fp32")) {
                snprintf(err, errsz, "--try: --act-dtype accepts fp32 or bf16, got '%s'", v);
                return -1;
            }
            r->bf16 = !strcmp(v, "bf16") ? 1 : -1; /* -1: fp32 said */
        } else if (!strcmp(t, "--offload")) {
            r->off_act = r->off_opt = 0;
            char *sv2 = NULL;
            for (char *o = strtok_r(v, ",", &sv2); o; o = strtok_r(NULL, ",", &sv2)) {
                if (!strcmp(o, "activations")) r->off_act = 1;
                else if (!strcmp(o, "optimizer")) r->off_opt = 1;
                else if (strict) { /* the trainer's own "params" (ZeRO-3) is --ranks' business */
                    snprintf(err, errsz, "--try: --offload takes activations and/or optimizer, got '%s'%s", o,
                             !strcmp(o, "params") ? " (parameters are offloaded with ZeRO-3: --ranks N)" : "");
                    return -1;
                }
            }
        } else {
            r->rc = 0;
            char *sv2 = NULL;
            for (char *c = strtok_r(v, ",", &sv2); c; c = strtok_r(NULL, ",", &sv2)) {
                if (!strcmp(c, "none")) continue;
                int k = 0;
                while (k < NRC && strcmp(c, rc_choice[k]))
                    k++;
                if (k == NRC) {
                    snprintf(err, errsz,
                             "--try: unknown recompute choice '%s' (gelu, ln, attn, mlp, layer)",
                             c);
                    return -1;
                }
                r->rc |= 1u << k;
            }
        }
    }
    return 0;
}

/* --try's flags -> the candidate: techniques added to the recorded ones (lists merged with the
 * recorded lists, --accum K a multiple of the recorded micro-batches). 0, or -1 with a message:
 * what the model cannot do (undo a recorded technique, but bf16) is said, not predicted. */
/* --try on a recording of the project's PyTorch script: its own flags (-B with --accum). */
static int parse_try_script(const ctx *c, const char *flags, spec *s, char *err, size_t errsz)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", flags);
    unsigned ra = c->rec.accum ? c->rec.accum : 1, accum = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        if (!strcmp(t, "--checkpoint")) s->ckpt = !c->rec.rc;
        else if (!strcmp(t, "--offload")) s->off_act = !c->rec.off_act;
        else if (!strcmp(t, "--set-to-none")) s->grad_none = !c->rec.grad_none;
        else if (!strcmp(t, "--autocast")) {
            char *v = strtok_r(NULL, " ", &save);
            if (!v || strcmp(v, "bf16")) {
                snprintf(err, errsz, "--try: --autocast takes bf16");
                return -1;
            }
            s->bf16 = !c->rec.bf16;
        } else if (!strcmp(t, "--accum") || !strcmp(t, "-B")) {
            char *v = strtok_r(NULL, " ", &save);
            uint64_t n = 0;
            if (gm_arg_uint(v, 1, 65536, &n) != 0) {
                snprintf(err, errsz, "--try: %s takes a number from 1 to 65536, got '%s'", t, v ? v : "");
                return -1;
            }
            if (t[1] == '-') accum = (unsigned)n;
        } else {
            snprintf(err, errsz, "--try: unknown flag '%s' (the script's: --checkpoint, --offload, --accum K "
                     "(with -B the micro-batch), --set-to-none, --autocast bf16)", t);
            return -1;
        }
    }
    if (accum && (accum % ra || c->B % (accum / ra))) {
        snprintf(err, errsz, "--try: --accum %u on a recording with -B %u --accum %u: the model splits the "
                 "recorded micro-batch by a factor that divides it", accum, c->B, ra);
        return -1;
    }
    s->accum = accum ? accum / ra : 1;
    return 0;
}

static int parse_try(const ctx *c, const char *flags, spec *s, char *err, size_t errsz)
{
    if (c->script) return parse_try_script(c, flags, s, err, errsz);
    recorded t = {0};
    if (parse_techniques(flags, &t, 1, err, errsz) != 0) return -1;
    const recorded *r = &c->rec;
    unsigned ra = r->accum ? r->accum : 1;
    s->rc = t.rc & ~r->rc;
    if (rc_groups(s->rc) && !(rc_groups(s->rc) & ~rc_groups(r->rc))) s->rc = 0; /* nothing new */
    s->off_act = t.off_act && !r->off_act;
    s->off_opt = t.off_opt && !r->off_opt;
    s->grad_none = t.grad_none && !r->grad_none;
    if (t.accum) {
        if (t.accum % ra) {
            snprintf(err, errsz,
                     "--try: --accum %u on a recording with --accum %u: the model splits the "
                     "recorded micro-batches further (--accum %u, %u, ...), it does not merge them",
                     t.accum, ra, 2 * ra, 4 * ra);
            return -1;
        }
        s->accum = t.accum / ra;
    }
    if (t.bf16 == 1 && !r->bf16) s->bf16 = 1;
    if (t.bf16 == -1 && r->bf16) {
        if (!c->bf16_undone) {
            snprintf(err, errsz,
                     "--try: --act-dtype fp32 on this bf16 recording: its fp32 trace could not be "
                     "rebuilt (see the notes); record it without --act-dtype bf16");
            return -1;
        }
        s->fp32 = 1;
    }
    if (s->accum < 1) s->accum = 1;
    return 0;
}

/* On a trace too large to search every combination: only stacks of the four single
 * techniques that save the most (recs is sorted by predicted peak), two at a time or all four. */
static int big_ok(const spec *recs, size_t nrecs, const spec *s)
{
    int in = 0, n = 0;
    for (size_t i = 0; i < nrecs && i < 4; i++) {
        const spec *r = &recs[i];
        int on = (r->rc && (s->rc & r->rc) == r->rc) || (r->bf16 && s->bf16) ||
                 (r->off_act && s->off_act) || (r->off_opt && s->off_opt) ||
                 (r->grad_none && s->grad_none) || (r->accum > 1 && s->accum == r->accum);
        in += on, n++;
    }
    unsigned k = spec_ntech(s);
    return (unsigned)in == k && (k == 2 || (int)k == n);
}

/* Largest saving first: the lowest peak reserved; among equal ones the least extra time, then
 * the lowest peak allocated (qsort is not stable: every tie is broken). */
static int cmp_saving(const void *a, const void *b)
{
    const spec *x = a, *y = b;
    if (x->r.peak_reserved != y->r.peak_reserved) return x->r.peak_reserved < y->r.peak_reserved ? -1 : 1;
    if (x->extra_s != y->extra_s) return x->extra_s < y->extra_s ? -1 : 1;
    return x->r.peak_allocated < y->r.peak_allocated ? -1 : x->r.peak_allocated > y->r.peak_allocated;
}

/* The two answers looked for first, over singles and combinations: the largest saving of peak
 * reserved, and the largest that costs under 1% of a step (one line when they are the same). */
static void text_short(const ctx *c, const spec *recs, size_t nrecs, const spec *front, size_t nfront)
{
    const spec *best = NULL, *cheap = NULL;
    for (size_t i = 0; i < nrecs + nfront; i++) {
        const spec *s = i < nrecs ? &recs[i] : &front[i - nrecs];
        if (s->r.peak_reserved >= c->base.peak_reserved) continue;
        if (!best || cmp_saving(s, best) < 0) best = s;
        if (pct(c, s->extra_s) < 1.0 && (!cheap || cmp_saving(s, cheap) < 0)) cheap = s; /* (NAN: no) */
    }
    if (!best) {
        printf(c->m.phases_from == GM_CSRC_NONE
                   ? "\nin short: not known: this recording's forward, backward and update cannot be told apart\n"
                   : "\nin short: nothing here lowers the peak reserved of this recording\n");
        return;
    }
    for (int k = 0; k < 2; k++) {
        const spec *s = k ? cheap : best;
        if (!s || (k && s == best)) continue;
        char what[1024], r[32], sv[32];
        if (c->trainer) spec_flags(c, s, what, sizeof what);
        else spec_target(c, s, what, sizeof what, 0);
        fmt(s->r.peak_reserved, r, sizeof r);
        fmt(c->base.peak_reserved - s->r.peak_reserved, sv, sizeof sv);
        char et[48];
        if (isnan(pct(c, s->extra_s)))
            snprintf(et, sizeof et, "%.4f s/step", s->extra_s);
        else
            snprintf(et, sizeof et, "%.1f%%", pct(c, s->extra_s));
        printf("%s%s: %s (peak reserved %s, saves %s; extra time %s)\n",
               k ? "          " : "\nin short: ",
               k ? "the largest saving under 1% extra time" : s == cheap ? "the largest saving, under 1% extra time"
                                                                          : "the largest saving",
               what, r, sv, et);
    }
}

/* A bf16 recording (the trainer's --act-dtype bf16): its conversions undone (adv_unbf16) and
 * bf16 applied again must replay to the recording's own peaks exactly; then every candidate is
 * a rewrite of the fp32 trace with bf16 on, as for an fp32 recording, and --try may undo it.
 * Otherwise the recorded trace is kept and a note says what the model does not capture. */
static void undo_bf16(ctx *c, char *err, size_t errsz)
{
    adv_model u;
    size_t chains = 0, broken = 0;
    int bad = adv_model_copy(&c->m, &u) != 0 || adv_unbf16(&u, &chains, &broken) != 0;
    alloc_replay_result_t r = {0};
    adv_model t;
    if (!bad && chains && !broken) {
        adv_stash_opts so = {.bf16 = 1};
        adv_stash_stats ss;
        bad = adv_model_copy(&u, &t) != 0;
        if (!bad) {
            bad = adv_stash(&t, &so, c->link_bps, &ss) != 0 || adv_replay(&t, &r, err, errsz) != 0;
            adv_model_free(&t);
        }
    }
    if (!bad && chains && !broken && r.peak_allocated == c->base.peak_allocated &&
        r.peak_reserved == c->base.peak_reserved) {
        u.owns_uses = c->m.owns_uses; /* the uses are shared: the copy takes them over */
        c->m.owns_uses = 0;
        u.owns_tops = c->m.owns_tops, c->m.owns_tops = 0; /* and the op log */
        u.owns_pools = c->m.owns_pools, c->m.owns_pools = 0; /* and the private pools */
        adv_model_free(&c->m);
        c->m = u;
        c->bf16_undone = 1;
        snprintf(c->notes[c->nnotes++], sizeof c->notes[0],
                 "a bf16 recording: advised as its fp32 trace with bf16 storage applied again "
                 "(%zu conversions undone; that trace replays to the recording's peaks)",
                 chains);
        return;
    }
    if (!bad) adv_model_free(&u);
    if (bad && !chains)
        snprintf(c->notes[c->nnotes++], sizeof c->notes[0], "a bf16 recording: out of memory "
                                                            "rebuilding its fp32 trace");
    else if (!chains || broken)
        snprintf(c->notes[c->nnotes++], sizeof c->notes[0],
                 "a bf16 recording whose fp32 trace the model cannot rebuild (%zu tensors "
                 "converted to bf16 and not back by a later conversion: an offload between?): "
                 "techniques rewrite the bf16 trace as recorded, which misses a few %% (a "
                 "recomputed layer keeps its input as bf16, recomputed tensors are bf16-sized)",
                 broken);
    else
        snprintf(c->notes[c->nnotes++], sizeof c->notes[0],
                 "a bf16 recording: its fp32 trace with bf16 applied again replays to %zu / %zu "
                 "bytes, not the recorded %zu / %zu: techniques rewrite the bf16 trace as "
                 "recorded, which misses a few %%",
                 r.peak_allocated, r.peak_reserved, c->base.peak_allocated,
                 c->base.peak_reserved);
}

int gm_advise_main(int argc, char **argv)
{
    const char *path = NULL, *gpu = NULL, *try_flags = NULL;
    int json = 0, check = 0, top = 10, have_top = 0, have_budget = 0, zero = -1, lossy_ok = 0, oom_step = 0, prefetch = -1;
    int device = -1;
    unsigned ranks = 0;
    size_t budget = 0;
    double link = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = gm_opt_peek(argc, argv, i);
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_advise, stdout);
            return 0;
        } else if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "--check"))
            check = 1;
        else if (!strcmp(a, "--lossy-ok"))
            lossy_ok = 1;
        else if (!strcmp(a, "--oom-step"))
            oom_step = 1;
        else if (!strcmp(a, "--budget")) {
            if (!v || alloc_parse_size(v, &budget) != ALLOC_OK || !budget) {
                fprintf(stderr, "gpumem advise: --budget needs a size above 0 (" ALLOC_SIZE_RULE "), got '%s'\n%s",
                        v ? v : "", GM_HELP("advise"));
                return GM_EXIT_USAGE;
            }
            have_budget = 1, i++;
        } else if (!strcmp(a, "--link")) {
            /* 1 MB/s to 100 TB/s: any host link there is, and always a finite number in JSON */
            if (gm_arg_real(v, 0.001, 1e5, &link) != 0)
                return gm_usage("advise", "--link needs a bandwidth in GB/s from 0.001 to 100000 (e.g. 25), got '%s'",
                                v ? v : "");
            i++;
        } else if (!strcmp(a, "--gpu")) {
            gpu = v, i++;
            int ok = 0;
            for (size_t k = 0; gpu && k < sizeof gpus / sizeof *gpus; k++)
                ok |= !strcasecmp(gpu, gpus[k].name);
            if (!ok) {
                fprintf(stderr, "gpumem advise: --gpu accepts H100, H200 or A100, got '%s'\n%s",
                        gpu ? gpu : "", GM_HELP("advise"));
                return GM_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--try")) {
            /* its value is flags, which start with "--" ('--recompute mlp --accum 2'): taken
             * unless missing or the "--" alone; the flags' own parser refuses what is not one */
            v = i + 1 < argc && strcmp(argv[i + 1], "--") ? argv[i + 1] : NULL;
            if (!v) {
                fprintf(stderr,
                        "gpumem advise: --try needs trainer flags, e.g. '--recompute mlp --accum "
                        "2'\n%s",
                        GM_HELP("advise"));
                return GM_EXIT_USAGE;
            }
            try_flags = v, i++;
        } else if (!strcmp(a, "--ranks")) {
            uint64_t r;
            if (gm_arg_uint(v, 1, 65536, &r) != 0) {
                fprintf(stderr,
                        "gpumem advise: --ranks needs a number of ranks from 1 to 65536, got "
                        "'%s'\n%s",
                        v ? v : "", GM_HELP("advise"));
                return GM_EXIT_USAGE;
            }
            ranks = (unsigned)r, i++;
        } else if (!strcmp(a, "--zero")) {
            if (!v || (strcmp(v, "1") && strcmp(v, "2") && strcmp(v, "3"))) {
                fprintf(stderr, "gpumem advise: --zero accepts 1, 2 or 3, got '%s'\n%s", v ? v : "",
                        GM_HELP("advise"));
                return GM_EXIT_USAGE;
            }
            zero = atoi(v), i++;
        } else if (!strcmp(a, "--prefetch")) {
            uint64_t k;
            if (gm_arg_uint(v, 0, 4096, &k) != 0) {
                fprintf(stderr, "gpumem advise: --prefetch needs a number of units from 0 to 4096, got '%s'\n%s",
                        v ? v : "", GM_HELP("advise"));
                return GM_EXIT_USAGE;
            }
            prefetch = (int)k, i++;
        } else if (!strcmp(a, "--top")) {
            int rc = gm_arg_top("advise", v, &top);
            if (rc) return rc;
            have_top = 1, i++;
        } else if (gm_opt_is_device(a)) {
            int rc = gm_arg_device("advise", argc, argv, &i, &device);
            if (rc) return rc;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "gpumem advise: unknown option '%s'\n%s", a, GM_HELP("advise"));
            return GM_EXIT_USAGE;
        } else if (!path)
            path = a;
        else {
            fprintf(stderr, "gpumem advise: one database only; '%s' is extra\n%s", a,
                    GM_HELP("advise"));
            return GM_EXIT_USAGE;
        }
    }
    if (!path) {
        fprintf(stderr, "gpumem advise: which database? give its path\n%s", GM_HELP("advise"));
        return GM_EXIT_USAGE;
    }
    if (prefetch >= 0 && (!ranks || (zero > 0 && zero < 3))) {
        fprintf(stderr, "gpumem advise: --prefetch goes with --ranks N (ZeRO-3's gathers)\n%s", GM_HELP("advise"));
        return GM_EXIT_USAGE;
    }
    /* --ranks N answers ZeRO across N ranks from the recording as it is: the single-rank
     * what-ifs (--try, --oom-step), the offload costs (--link, --gpu) and the length of the
     * ranked list (--top: the ZeRO table has a row per stage, not a top N) are not part of that
     * answer, and taking them silently would print the same output as without them */
    if (ranks && (try_flags || oom_step || link > 0 || gpu || have_top)) {
        fprintf(stderr, "gpumem advise: %s does not go with --ranks N (the ZeRO prediction does not use it); "
                        "run it without --ranks\n%s",
                try_flags ? "--try" : oom_step ? "--oom-step" : link > 0 ? "--link" : gpu ? "--gpu" : "--top",
                GM_HELP("advise"));
        return GM_EXIT_USAGE;
    }
    if (zero > 0 && !ranks) {
        fprintf(stderr,
                "gpumem advise: --zero goes with --ranks N (how many ranks share the state)\n%s",
                GM_HELP("advise"));
        return GM_EXIT_USAGE;
    }
    char err[8192];
    gm_db d;
    if (gm_db_open(path, &d, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        return GM_EXIT_BADDB;
    }
    int lossy = gm_lossy_gate(&d, "advise", lossy_ok, json ? stderr : stdout);
    if (lossy) {
        gm_db_close(&d);
        return lossy;
    }
    /* cut short: said first, as lost events are (its JSON takes several shapes: on stderr) */
    gm_ending_say(&d, json ? stderr : stdout);
    /* several devices: the busiest device's events (or --device's), replayed as its own heap
     * (each device has its own allocator: a prediction for their sum is for a device that does
     * not exist) */
    int sc = gm_db_scope_one(&d, NULL, device, err, sizeof err);
    if (sc < 0) {
        gm_db_close(&d);
        return gm_scope_fail("advise", sc, err, "the busiest");
    }
    gm_scope_say(&d, "the baseline and predicted peaks", json ? stderr : stdout);
    ctx c;
    memset(&c, 0, sizeof c);
    c.progress = isatty(2);
    if (adv_model_load_as(&d, &c.m, ADV_LOAD_TORCH | ADV_LOAD_INFER | ADV_LOAD_PROGRESS, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem: %s\n", err);
        adv_model_free(&c.m);
        gm_db_close(&d);
        return GM_EXIT_BADDB;
    }
    /* pages overwritten, found by the sweep: refused, or (--lossy-ok) said first */
    int damaged = gm_damage_gate(&d, "advise", 1, lossy_ok, json ? stderr : stdout);
    if (damaged) {
        adv_model_free(&c.m);
        gm_db_close(&d);
        return damaged;
    }
    static gm_rerun_origin origin; /* 12 KiB: off the stack */
    gm_rerun_origin_read(&d, &origin);
    /* the link: --link, else the recording's timed host copies, else PCIe 4 x16 */
    c.link_bps = 25e9, c.link_src = "PCIe 4 x16 default";
    if (link > 0)
        c.link_bps = link * 1e9, c.link_src = "--link";
    else if (gm_table_exists(&d, "launches")) {
        sqlite3_stmt *s;
        if (sqlite3_prepare_v2(
                d.db,
                "SELECT sum(bytes), sum(end_ns - start_ns) FROM launches WHERE op = 1 AND "
                "start_ns IS NOT NULL AND end_ns > start_ns AND kernel IN (SELECT id FROM strings "
                "WHERE s IN ('memcpy HtoD', 'memcpy DtoH'))",
                -1, &s, NULL) == SQLITE_OK) {
            if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int64(s, 1) > 0) {
                c.link_bps = (double)sqlite3_column_int64(s, 0) /
                             ((double)sqlite3_column_int64(s, 1) * 1e-9);
                c.link_src = "the recording's host copies";
            }
            sqlite3_finalize(s);
        }
    }
    phases_note(&d, &c);
    gm_torch_peak_reset(&d, GM_TORCH_ALL_DEVICES, &c.reset);
    gm_compiled_read(&d, &c.compiled);
    gm_db_close(&d);
    backward_note(&c);
    /* A recording that hit an OOM: its trace from there on is not what the program needed.
     * Advised from the steps that completed before it; when only the first did (a warm-up:
     * gradients and optimizer state appear in it), with that step repeated as it would run
     * again (adv_repeat_last_step); from the partial trace with --oom-step; else refused with
     * the reason. */
    if (c.m.oom.seq) {
        size_t done = c.oom_done = adv_oom_complete_steps(&c.m);
        char what[640], rq[32], al[32], lim[32], by[160] = "";
        fmt(c.m.oom.requested, rq, sizeof rq);
        fmt(c.m.oom.allocated, al, sizeof al);
        fmt(c.m.oom.limit, lim, sizeof lim);
        /* the limit's figure with what set it, where it bound */
        if (c.m.oom.bound == GM_OOM_DEVICE && c.m.oom.limit != GM_NO_LIMIT)
            snprintf(by, sizeof by, ", not reached: the device was full");
        else if (c.m.oom.bound != GM_OOM_DEVICE)
            snprintf(by, sizeof by, " set by %s", gm_oom_knob(c.m.oom.bound));
        snprintf(what, sizeof what, "an OOM %s%s (%s%s%s requested with %s allocated%s%s%s)",
                 c.m.oom.where[0] ? "at " : "outside every range", c.m.oom.where, c.m.oom.name,
                 c.m.oom.name[0] ? ": " : "", rq, al,
                 c.m.oom.limit != GM_NO_LIMIT ? ", limit " : "",
                 c.m.oom.limit != GM_NO_LIMIT ? lim : "", by);
        if (oom_step) {
            if (adv_oom_cut(&c.m, 1) != 0) goto oom0;
            c.partial = 1;
            snprintf(c.notes[c.nnotes++], sizeof c.notes[0],
                     "the recorded run hit %s: advised from the partial trace up to it, the "
                     "request that failed included (--oom-step); the step that failed is "
                     "incomplete, techniques act on it only where its backward was recorded: the "
                     "peaks are of that trace, not of the run",
                     what);
        } else if (done >= 2) {
            if (adv_oom_cut(&c.m, 0) != 0) goto oom0;
            snprintf(c.notes[c.nnotes++], sizeof c.notes[0],
                     "the recorded run hit %s: advised from the %zu steps that completed before "
                     "it; the step that failed is not in the prediction",
                     what, done);
        } else if (done == 1) {
            if (adv_oom_cut(&c.m, 0) != 0 || adv_repeat_last_step(&c.m) != 0) goto oom0;
            snprintf(c.notes[c.nnotes++], sizeof c.notes[0],
                     "the recorded run hit %s: advised from the one step that completed before "
                     "it, repeated as it runs again (without the births of what outlives it: "
                     "gradients, optimizer state); the step that failed is not in the prediction",
                     what);
        } else {
            fprintf(stderr,
                    "gpumem advise: the recorded run hit %s before any step completed: %s, or "
                    "--oom-step to advise from the partial trace\n",
                    what, gm_oom_rerun(c.m.oom.bound));
            adv_model_free(&c.m);
            return GM_EXIT_CANNOT_JUDGE;
        }
    }
    if (ranks) {
        int r = gm_advise_shard(&c.m, &origin, ranks, have_budget ? -1 : zero, prefetch < 0 ? 1 : prefetch,
                                have_budget ? budget : 0, json, check, stdout);
        adv_model_free(&c.m);
        return r;
    }
    for (size_t k = 0; gpu && k < sizeof gpus / sizeof *gpus; k++)
        if (!strcasecmp(gpu, gpus[k].name)) c.gpu = &gpus[k];
    /* a recording without compute has no op times: price it on a roofline (H100 unless --gpu) */
    if (c.m.dry_run && !c.gpu) c.gpu = &gpus[0], c.gpu_assumed = 1;
    c.torch = c.m.torch;
    c.trainer = !c.torch && strstr(c.m.cmdline, "train_gpt2") != NULL;
    c.script = c.torch && strstr(c.m.cmdline, "train_gpt2.py") != NULL;
    if (c.script) {
        c.B = flag_int(c.m.cmdline, "-B", 4);
        c.rec.accum = flag_int(c.m.cmdline, "--accum", 1);
        c.rec.grad_none = strstr(c.m.cmdline, "--set-to-none") != NULL;
        c.rec.off_act = strstr(c.m.cmdline, "--offload") != NULL;
        c.rec.bf16 = strstr(c.m.cmdline, "--autocast") != NULL;
        c.rec.rc = strstr(c.m.cmdline, "--checkpoint") != NULL; /* (any bit: checkpointed already) */
    }
    /* A PyTorch program whose gradients do not outlive their step sets them to None already
     * (zero_grad's default since PyTorch 2.0): nothing for set_to_none to free. */
    if (c.torch && !c.rec.grad_none && c.m.nsteps > 1 && adv_keeps_grads(&c.m) == 0) {
        c.rec.grad_none = 1;
        snprintf(c.notes[c.nnotes++], sizeof c.notes[0],
                 "no gradient outlives its step (the program sets them to None already, zero_grad's "
                 "default since PyTorch 2.0): optimizer.zero_grad(set_to_none=True) is not proposed");
    }
    if (c.torch) { /* the repeated blocks: child ranges named LIST.N */
        for (size_t i = 1; i < c.m.nstrs; i++) {
            const char *nm = c.m.strs[i], *dot = strrchr(nm, '.');
            if (!dot || !dot[1] || strspn(dot + 1, "0123456789") != strlen(dot + 1)) continue;
            size_t k = (size_t)strtoul(dot + 1, NULL, 10) + 1;
            if (!c.blocks[0]) snprintf(c.blocks, sizeof c.blocks, "%.*s", (int)(dot - nm), nm);
            if (!strncmp(nm, c.blocks, strlen(c.blocks)) && k > c.nblocks) c.nblocks = k;
        }
        const gm_torch_reset reset = c.reset;
        if (c.m.torch == 1) {
            snprintf(c.notes[c.nnotes++], sizeof c.notes[0],
                     "a PyTorch recording: predicted peaks are PyTorch's own (%s: its tensors replayed under its "
                     "allocator's policy, %.300s%s); the device held %" PRIu64 " bytes more at its peak reserved "
                     "(libraries' workspaces, gpumem's cache)",
                     reset.count ? "the whole run's, not its max_memory_allocated/_reserved() after its reset"
                                 : "what torch.cuda.max_memory_allocated and max_memory_reserved print",
                     c.m.config,
                     /* adv_cfg_uncapped: the key is a cap the program did not set while running */
                     strstr(c.m.config, "per_process_memory_fraction") ? ", less its per_process_memory_fraction "
                                                                         "key, a cap: not in the predictions"
                                                                       : "",
                     c.m.device_peak_reserved > c.m.rec_peak_reserved
                                     ? c.m.device_peak_reserved - c.m.rec_peak_reserved : 0);
        } else {
            snprintf(c.notes[c.nnotes++], sizeof c.notes[0],
                     "gpumem was PyTorch's allocator in this recording: predicted peaks are gpumem's (its "
                     "allocations, the libraries' beside PyTorch's tensors%s)",
                     reset.count ? "; the whole run's, not its max_memory_allocated/_reserved() after its reset" : "");
        }
        /* a reset of PyTorch's peak stats (its allocator's, or gpumem's as PyTorch's): what its
         * max_memory_*() say then, and since when */
        if (reset.count && (size_t)c.nnotes < sizeof c.notes / sizeof *c.notes)
            gm_torch_reset_note(&reset, c.notes[c.nnotes++], sizeof c.notes[0]);
        compiled_notes(&c);
        if (c.m.ntops) {
            size_t nb = 0;
            for (size_t i = 0; i < c.m.ntops; i++)
                nb += c.m.tops[i].bwd;
            snprintf(c.notes[c.nnotes++], sizeof c.notes[0],
                     "the recording has its op log (gpumem record --torch-ops: %zu forward ops, %zu backward "
                     "nodes): torch.autocast is predicted op by op from it",
                     c.m.ntops - nb, nb);
        }
    }
    if (c.trainer) {
        c.B = flag_int(c.m.cmdline, "-B", 4);
        parse_techniques(c.m.cmdline, &c.rec, 0, err, sizeof err);
        if (c.rec.bf16 < 0) c.rec.bf16 = 0;
        if (c.rec.off_act || c.rec.off_opt) {
            /* offloads share the trainer's copy stream: the recorded one, not a new one */
            size_t cnt[16] = {0};
            for (size_t a = 0; a < c.m.nallocs; a++)
                if (c.m.allocs[a].stream < 16) cnt[c.m.allocs[a].stream]++;
            for (uint32_t k = 0, best = 0; k < 16; k++)
                if (k != c.m.compute_stream && cnt[k] > best) best = (uint32_t)cnt[k], c.m.copy_stream = k;
        }
    }
    /* step time and ops per step (the steps that completed: an OOM's is left out). The step
     * time is read from the steps after the first, without the longest and shortest tenth of
     * them: a step the scheduler stretched on a shared machine does not set it. Under ten
     * steps it is their lower median, as each op's is (gm_advise.c, ops_median); from ten on
     * the mean of the rest, since steps of two kinds (churn's steps alternate between 0.2 and
     * 1.3 ms) have a median that is one kind's and a mean that is the loop's. */
    {
        size_t n = 0, ns = c.m.nsteps - (c.partial && c.m.nsteps);
        uint64_t *d = ns ? malloc(ns * sizeof *d) : NULL;
        for (size_t i = ns > 1 ? 1 : 0; d && i < ns; i++)
            d[n++] = c.m.steps[i].end_ns - c.m.steps[i].start_ns;
        if (n) gm_sort(d, n, sizeof *d, gm_cmp_u64);
        c.step_s = n ? (double)d[(n - 1) / 2] * 1e-9 : 0;
        if (n >= 10) {
            double sum = 0;
            for (size_t i = n / 10; i < n - n / 10; i++)
                sum += (double)d[i];
            c.step_s = sum / (double)(n - 2 * (n / 10)) * 1e-9;
        }
        free(d);
        uint64_t ops = 0;
        for (size_t i = 0; i < c.m.nops; i++)
            ops += c.m.ops[i].phase == ADV_PH_FWD || c.m.ops[i].phase == ADV_PH_BWD;
        c.fwdbwd_ops_per_step = c.m.nsteps ? ops / c.m.nsteps : ops;
        if (c.m.dry_run && c.trainer) {
            /* no compute recorded: the step on the roofline, 6 N B T FLOPs for forward and
             * backward (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", 2.1) */
            adv_floor fl0;
            adv_floor_bytes(&c.m, &fl0);
            double N = (double)fl0.params / 4, T = flag_int(c.m.cmdline, "-T", 64);
            if (N > 0) c.step_s = 6.0 * N * (double)c.B * T / c.gpu->flops, c.step_estimated = 1;
        }
    }
    int rc = 0;
    /* the recording's own replay runs beside the single techniques (evaluate_all), unless a
     * bf16 recording's fp32 trace must be checked against it first */
    int base_beside = !c.rec.bf16;
    if (!base_beside && adv_replay(&c.m, &c.base, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem advise: replay failed: %s\n", err);
        adv_model_free(&c.m);
        return GM_EXIT_BADDB;
    }
    if (c.rec.bf16) undo_bf16(&c, err, sizeof err);
    c.base_is_m = !c.bf16_undone;
    c.classes = adv_saved_classes(&c.m, &c.nclasses);
    /* the single techniques: every one the recorded command does not use yet, and the values
     * of a flag it uses that add something (activations to an optimizer offload, another
     * recompute choice, more micro-batches) */
    spec *recs = NULL, *all = NULL, *front = NULL, *worse = NULL;
    size_t nrecs = 0, rcap = 0, nall = 0, acap = 0, nfront = 0, fcap = 0, nworse = 0, wcap = 0;
#define PUSH(arr, n, cap, val)                                                                     \
    do {                                                                                           \
        if ((n) + 1 > (cap)) {                                                                     \
            size_t nc_ = (cap) ? 2 * (cap) : 32;                                                   \
            void *p_ = realloc((arr), nc_ * sizeof *(arr));                                        \
            if (!p_) goto oom;                                                                     \
            (arr) = p_, (cap) = nc_;                                                               \
        }                                                                                          \
        (arr)[(n)++] = (val);                                                                      \
    } while (0)
    spec blank = {.rc_class = -1, .accum = 1};
    unsigned accums[3] = {2, 4, 8}, ra = c.rec.accum > 1 ? c.rec.accum : 1;
    unsigned have_groups = rc_groups(c.rec.rc);
    if (c.torch) {
        if (c.nblocks >= 2 && !c.rec.rc) {
            spec s = blank;
            s.ckpt = 1;
            PUSH(recs, nrecs, rcap, s);
        }
        if (c.torch == 1 && strncmp(c.m.config, "preset:pytorch-expandable", 25)) {
            spec s = blank;
            s.expandable = 1;
            PUSH(recs, nrecs, rcap, s);
        }
    } else if (c.trainer) {
        for (int i = 0; i < NRC; i++) {
            if (!(rc_drops[i] & ~have_groups)) continue;
            spec s = blank;
            s.rc = 1u << i;
            PUSH(recs, nrecs, rcap, s);
        }
    } else {
        for (size_t i = 0; i < c.nclasses && i < (c.m.nevs > 1000000 ? 4 : 16); i++) {
            spec s = blank;
            s.rc_class = (int)i;
            PUSH(recs, nrecs, rcap, s);
        }
    }
    if (!c.rec.off_act) {
        spec s = blank;
        s.off_act = 1;
        PUSH(recs, nrecs, rcap, s);
    }
    if (!c.rec.off_opt) {
        spec s = blank;
        s.off_opt = 1;
        PUSH(recs, nrecs, rcap, s);
    }
    /* A script other than the project's: --check cannot re-run it, and two of the rewrites stand
     * on what its recording does not hold. Accumulation shrinks what is born and freed in a
     * step's forward and backward, but which of its tensors carry the batch (autocast's weight
     * copies and their gradients do not), and where its loop zeroes and steps, are the script's:
     * a loop already accumulating 4 micro-batches, under fp16 autocast, was predicted 20 MiB
     * (16%) below what it measured, by 4 and 8; a user's MLP 6-7% below by 2 and 4, op log or
     * not. Autocast without the op log halves the saved activations, whose precision it does
     * not know (the same loop ran under fp16 autocast already: predicted 18 MiB low). Said
     * instead of a figure that does not hold (ADVISE.md). */
    int user_script = c.torch && !c.script;
    if (user_script) {
        char why[1024];
        unsigned passes = fwd_passes(&c.m);
        char already[160] = "";
        if (passes > 1)
            snprintf(already, sizeof already, " (this loop runs %u forward passes a step: it accumulates already)",
                     passes);
        snprintf(why, sizeof why,
                 "gradient accumulation is not predicted for this script%s: which of its tensors carry the "
                 "batch (autocast's weight copies do not) and where its loop zeroes and steps are not in "
                 "the recording, and --check re-runs only the project's script (tests/torch/train_gpt2.py); "
                 "to know, make the change (micro-batches of 1/k of the batch, (loss / k).backward() each, "
                 "optimizer.step() every k) and record it again",
                 already);
        unpredicted(&c, "accum", why);
        /* gpumem's hooks saw the program enter torch.autocast on CUDA (meta torch_autocast):
         * said, and autocast not proposed, where the op log would tell it op by op */
        if (!c.rec.bf16 && !c.m.ntops && c.m.torch_autocast[0]) {
            char ac[400];
            snprintf(ac, sizeof ac,
                     "autocast is not proposed: this script runs under torch.autocast already (%s on CUDA, "
                     "seen by gpumem's hooks); a recording with `gpumem record --torch-ops` predicts it op by op",
                     c.m.torch_autocast);
            unpredicted(&c, "bf16", ac);
        } else if (!c.rec.bf16 && !c.m.ntops)
            unpredicted(&c, "bf16",
                        "autocast is not predicted for this script: without the op log the precision of its "
                        "tensors (it may run under autocast already) is not in the recording, and --check "
                        "re-runs only the project's script; record with `gpumem record --torch-ops` for "
                        "autocast op by op");
    }
    /* a trace of millions of events: accumulation by 2 only (each copy of the step is replayed) */
    int big = c.m.nevs > 2000000;
    for (int i = 0; i < (big ? 1 : 3); i++) {
        if ((c.trainer && c.B % (ra * accums[i])) || (c.script && c.B % accums[i])) continue;
        spec s = blank;
        s.accum = accums[i];
        if (spec_withheld(&c, &s) >= 0) continue;
        PUSH(recs, nrecs, rcap, s);
    }
    if (!c.rec.grad_none) {
        spec s = blank;
        s.grad_none = 1;
        if (spec_withheld(&c, &s) < 0) PUSH(recs, nrecs, rcap, s);
    }
    if (!c.rec.bf16) {
        spec s = blank;
        s.bf16 = 1;
        if (spec_withheld(&c, &s) < 0) PUSH(recs, nrecs, rcap, s);
    }
    if (try_flags) {
        spec s = blank;
        if (parse_try(&c, try_flags, &s, err, sizeof err) != 0) {
            fprintf(stderr, "gpumem advise: %s\n", err);
            rc = GM_EXIT_USAGE;
            goto done;
        }
        /* not a figure that does not hold: what --try asks is said, as parse_try says what the
         * model cannot do (exit 2) */
        if (spec_ntech(&s) == 0 && !s.fp32) { /* an empty row: nothing to title, nothing to predict */
            fprintf(stderr, "gpumem advise: --try '%s' asks for nothing this recording does not do already "
                            "(its command: %s): name a technique it lacks\n",
                    try_flags, c.m.cmdline[0] ? c.m.cmdline : "not recorded");
            rc = GM_EXIT_USAGE;
            goto done;
        }
        int w = spec_withheld(&c, &s);
        if (w >= 0) {
            fprintf(stderr, "gpumem advise: --try '%s' is not predicted: %s\n", try_flags, c.notes[w]);
            rc = GM_EXIT_USAGE;
            goto done;
        }
        nrecs = 0;
        PUSH(recs, nrecs, rcap, s);
    }
    if (evaluate_all(&c, recs, nrecs, base_beside ? &c.base : NULL, err, sizeof err) != 0) {
        fprintf(stderr, "gpumem advise: %s\n", err);
        rc = GM_EXIT_BADDB;
        goto done;
    }
    /* what decides is the peak reserved, what the device must hold (an OOM is a segment that
     * cannot be mapped): a technique that lowers it is a recommendation, and so is one that
     * lowers the peak allocated and leaves the reserved as it is (the rounding of a small
     * program's segments hides a saving the same technique makes at scale); one that lowers the
     * peak allocated but raises the reserved is not worth it (listed apart, with its cost); one
     * that lowers neither is left out */
    size_t keep = 0;
    for (size_t i = 0; i < nrecs; i++) {
        const alloc_replay_result_t *r = &recs[i].r;
        if (try_flags || r->peak_reserved < c.base.peak_reserved ||
            (r->peak_allocated < c.base.peak_allocated && r->peak_reserved == c.base.peak_reserved))
            recs[keep++] = recs[i];
        else if (r->peak_allocated < c.base.peak_allocated)
            PUSH(worse, nworse, wcap, recs[i]);
    }
    nrecs = keep;
    if (nrecs > 1) gm_sort(recs, nrecs, sizeof *recs, cmp_saving); /* (NULL when empty) */
    /* combinations: every stack of the single techniques (accumulation: one k at a time;
     * recompute: one choice, or ln+attn+mlp), bounded so a huge trace stays quick */
    {
        unsigned rcs[16];
        size_t nrcs = 0;
        rcs[nrcs++] = 0;
        if (c.torch && c.nblocks >= 2 && !c.rec.rc) rcs[nrcs++] = RC_CKPT;
        if (c.trainer) {
            for (int i = 0; i < NRC; i++)
                if (rc_drops[i] & ~have_groups) rcs[nrcs++] = 1u << i;
            unsigned lam = ((1u << 1) | (1u << 2) | (1u << 3)) & ~c.rec.rc;
            if (rc_groups(lam) & ~have_groups && (lam & (lam - 1))) rcs[nrcs++] = lam;
        }
        unsigned ks[4] = {1, 2, 4, 8};
        size_t budget_evals = c.m.nevs ? (size_t)(1e8 / (double)c.m.nevs) : 1000;
        size_t total = try_flags ? 0 : nrcs * 2 * 2 * 2 * 2 * 4;
        int full = total <= budget_evals;
        for (size_t r = 0; r < nrcs; r++)
            for (int bf = 0; bf < 2; bf++)
                for (int oa = 0; oa < 2; oa++)
                    for (int oo = 0; oo < 2; oo++)
                        for (int gn = 0; gn < 2; gn++)
                            for (int ki = 0; ki < 4; ki++) {
                                spec s = blank;
                                s.rc = rcs[r], s.bf16 = bf, s.off_act = oa, s.off_opt = oo,
                                s.grad_none = gn, s.accum = ks[ki];
                                if (s.rc == RC_CKPT) s.rc = 0, s.ckpt = 1;
                                if ((bf && c.rec.bf16) || (oa && c.rec.off_act) ||
                                    (oo && (c.rec.off_opt || c.script)) || (gn && c.rec.grad_none) ||
                                    (ks[ki] > 1 && c.trainer && c.B % (ra * ks[ki])) ||
                                    (ks[ki] > 1 && c.script && c.B % ks[ki]))
                                    continue;
                                if (spec_ntech(&s) < 2 || try_flags || spec_withheld(&c, &s) >= 0) continue;
                                if (!full && !big_ok(recs, nrecs, &s)) continue;
                                if (big && ks[ki] > 2) continue;
                                PUSH(all, nall, acap, s);
                            }
        if (full && !try_flags && !c.trainer && !c.torch && c.nclasses) {
            /* generic programs: the largest class recomputed, with the rest */
            size_t n0 = nall;
            for (size_t i = 0; i < n0; i++) {
                spec s = all[i];
                s.rc_class = 0;
                PUSH(all, nall, acap, s);
            }
        }
        if (nrecs < 2) nall = 0; /* nothing to stack */
        if (evaluate_all(&c, all, nall, NULL, err, sizeof err) != 0) {
            fprintf(stderr, "gpumem advise: %s\n", err);
            rc = GM_EXIT_BADDB;
            goto done;
        }
    }
    /* the Pareto front: no other combination is both cheaper and smaller */
    for (size_t i = 0; i < nall; i++) {
        int dominated = 0;
        for (size_t j = 0; j < nall && !dominated; j++) {
            if (i == j) continue;
            const spec *x = &all[j], *y = &all[i];
            int le = x->extra_s <= y->extra_s && x->r.peak_reserved <= y->r.peak_reserved;
            int lt = x->extra_s < y->extra_s || x->r.peak_reserved < y->r.peak_reserved ||
                     (x->extra_s == y->extra_s && x->r.peak_reserved == y->r.peak_reserved &&
                      spec_ntech(x) < spec_ntech(y)) ||
                     (x->extra_s == y->extra_s && x->r.peak_reserved == y->r.peak_reserved &&
                      spec_ntech(x) == spec_ntech(y) && j < i);
            dominated = le && lt;
        }
        if (!dominated && all[i].r.peak_reserved < c.base.peak_reserved &&
            !beaten_by_part(&all[i], recs, nrecs, all, nall))
            PUSH(front, nfront, fcap, all[i]);
    }
    if (nfront > 1) gm_sort(front, nfront, sizeof *front, cmp_saving); /* (NULL when empty) */
    /* --budget: the cheapest that fits, singles included; else the nearest miss */
    spec plan = blank;
    int have_plan = 0;
    const spec *nearest = NULL;
    uint64_t shortfall = 0;
    adv_floor fl;
    adv_floor_bytes(&c.m, &fl);
    char why[512] = "";
    if (have_budget) {
        for (int pass = 0; pass < 2; pass++) {
            spec *v = pass ? all : recs;
            size_t nv = pass ? nall : nrecs;
            for (size_t i = 0; i < nv; i++) {
                if (!nearest || cmp_saving(&v[i], nearest) < 0) nearest = &v[i];
                if (v[i].r.peak_reserved > budget) continue;
                if (!have_plan || v[i].extra_s < plan.extra_s ||
                    (v[i].extra_s == plan.extra_s && spec_ntech(&v[i]) < spec_ntech(&plan)) ||
                    (v[i].extra_s == plan.extra_s && spec_ntech(&v[i]) == spec_ntech(&plan) &&
                     v[i].r.peak_reserved < plan.r.peak_reserved))
                    plan = v[i], have_plan = 1;
            }
        }
        if (c.base.peak_reserved <= budget)
            plan = blank, plan.r = c.base, plan.ok = 1, have_plan = 2;
        char b[32], rr[32];
        fmt(budget, b, sizeof b);
        fmt(c.base.peak_reserved, rr, sizeof rr);
        if (have_plan == 2 && c.partial) {
            /* the partial trace fits: whether the whole run does is not recorded */
            snprintf(why, sizeof why,
                     "not known: the partial trace up to the OOM reaches %s reserved, the rest "
                     "of the run is not recorded: %s",
                     rr, gm_oom_rerun(c.m.oom.bound));
            have_plan = 0;
            rc = 1;
        } else if (have_plan == 2 && c.m.oom.seq &&
                   c.m.oom.allocated + c.m.oom.requested > budget) {
            /* the complete steps fit, the step that failed did not: it is unlike them */
            char nd[32]; /* rounded up: a budget set to it as it reads must hold it */
            gm_fmt_bytes_rounded(c.m.oom.allocated + c.m.oom.requested, 1, nd, sizeof nd);
            snprintf(why, sizeof why,
                     "not known: the complete steps fit (peak reserved %s), but the step that hit "
                     "the OOM needed at least %s (allocated + the request that failed), more than "
                     "the budget: %s to record it whole",
                     rr, nd, gm_oom_rerun(c.m.oom.bound));
            have_plan = 0;
            rc = 1;
        } else if (!have_plan) {
            if (!nearest || nearest->r.peak_reserved > c.base.peak_reserved) nearest = NULL;
            uint64_t least = nearest ? nearest->r.peak_reserved : c.base.peak_reserved;
            shortfall = least - budget;
            char p[32], nm[32];
            fmt(fl.params, p, sizeof p);
            fmt(least, nm, sizeof nm);
            /* consistent with the candidates: what no technique here moves is the parameters */
            if (fl.params >= budget)
                snprintf(why, sizeof why,
                         "the parameters alone are %s, over the budget, and no technique here "
                         "moves them off the device",
                         p);
            else
                snprintf(why, sizeof why,
                         "nothing predicted goes below %s (%s); it holds the parameters (%s), "
                         "which no technique here moves, and what the step keeps live under %s",
                         nm, nearest ? "the nearest miss" : "the recording itself", p,
                         nearest ? "its techniques" : "none of them");
            rc = 1;
        }
    }
    /* --check: re-run with each recommendation's flags (the first --top of each list) */
    size_t nfailed = 0;
    uint64_t over = 0;
    if (check) {
        if (!c.trainer && !c.script) {
            fprintf(stderr,
                    "gpumem advise: --check re-runs the included trainer and the project's PyTorch script "
                    "(tests/torch/train_gpt2.py) only; this recording is of '%s'\n",
                    c.m.cmdline);
            rc = rc ? rc : 1;
        } else {
            size_t nf = (size_t)top < nfront ? (size_t)top : nfront;
            for (size_t pass = 0; pass < 3; pass++) {
                spec *v = pass == 0 ? recs : pass == 1 ? front : &plan;
                size_t nv = pass == 0   ? ((size_t)top < nrecs ? (size_t)top : nrecs)
                            : pass == 1 ? nf
                                        : have_plan == 1;
                for (size_t i = 0; i < nv; i++) {
                    if (!json) fprintf(stderr, "\rgpumem advise: checking %zu/%zu...", i + 1, nv);
                    if (check_spec(&c, &v[i], &origin) != 0) {
                        nfailed++;
                        fprintf(stderr, "\ngpumem advise: --check: %s\n", v[i].check_err);
                    }
                }
            }
            if (!json) fprintf(stderr, "\r%40s\r", "");
            if (have_plan == 1 && plan.measured && plan.meas_res > budget)
                over = plan.meas_res - budget;
            if (nfailed || over) rc = 1;
        }
    }
    /* print: the text cut by --top; JSON lists every candidate */
    size_t nr = (size_t)top < nrecs ? (size_t)top : nrecs,
           nf = (size_t)top < nfront ? (size_t)top : nfront;
    if (json) {
        putchar('{');
        gm_scope_json(&d, stdout, "", ", "); /* several devices: whose events were replayed */
        printf("\"baseline\": {\"peak_allocated\": %zu, \"peak_reserved\": %zu}, \"recorded\": "
               "{\"peak_allocated\": %" PRIu64 ", \"peak_reserved\": %" PRIu64
               "}, \"trainer\": %s, \"uses\": %s, \"link_bytes_per_s\": %.0f, \"step_s\": %.6f,\n",
               c.base.peak_allocated, c.base.peak_reserved, c.m.rec_peak_allocated,
               c.m.rec_peak_reserved, c.trainer ? "true" : "false",
               c.m.have_uses ? "true" : "false", c.link_bps, c.step_s);
        printf(" \"recorded_techniques\": [");
        int on[T_NTECH] = {c.rec.rc != 0, c.rec.off_act || c.rec.off_opt, c.rec.accum > 1,
                           c.rec.grad_none, c.rec.bf16};
        for (int i = 0, first = 1; i < T_NTECH; i++)
            if (on[i]) printf("%s\"%s\"", first ? "" : ", ", tech_names[i]), first = 0;
        printf("], \"phases_from\": ");
        gm_json_str(stdout, c.m.phases_from == GM_CSRC_PHASES      ? "phases"
                            : c.m.phases_from == GM_CSRC_INFERENCE ? "inference"
                                                                   : NULL);
        printf(", \"steps_from\": ");
        gm_json_str(stdout, c.m.steps_from == GM_CSRC_PHASES      ? "phases"
                            : c.m.steps_from == GM_CSRC_INFERENCE ? "inference"
                                                                  : NULL);
        printf(", \"notes\": [");
        for (int i = 0; i < c.nnotes; i++)
            printf("%s", i ? ", " : ""), gm_json_str(stdout, c.notes[i]);
        printf("], \"not_predicted\": [");
        for (int i = 0; i < c.nunpredicted; i++) {
            printf("%s{\"technique\": \"%s\", \"why\": ", i ? ", " : "", c.unpredicted[i].technique);
            gm_json_str(stdout, c.notes[c.unpredicted[i].note]);
            putchar('}');
        }
        printf("],\n \"oom\": ");
        if (c.m.oom.seq) {
            printf("{\"where\": ");
            gm_json_str(stdout, c.m.oom.where);
            printf(", \"name\": ");
            gm_json_str(stdout, c.m.oom.name[0] ? c.m.oom.name : NULL);
            printf(", \"requested\": %" PRIu64 ", \"allocated\": %" PRIu64 ", \"limit\": ",
                   c.m.oom.requested, c.m.oom.allocated);
            if (c.m.oom.limit == GM_NO_LIMIT) /* none; 0 is a limit of 0 bytes */
                printf("null");
            else
                printf("%" PRIu64, c.m.oom.limit);
            /* who set the limit, in report's words (.ooms[].limit_from); null: none */
            printf(", \"limit_from\": ");
            gm_json_str(stdout, gm_oom_json(c.m.oom.limit_from));
            printf(", \"advised_from\": \"%s\", \"complete_steps\": %zu}",
                   c.partial        ? "partial_trace"
                   : c.oom_done > 1 ? "complete_steps"
                                    : "first_step_repeated",
                   c.oom_done);
        } else
            printf("null");
        printf(",\n \"recommendations\": [");
        for (size_t i = 0; i < nrecs; i++)
            printf("%s\n  ", i ? "," : ""), json_rec(stdout, &c, &recs[i], 0);
        printf("],\n \"combinations\": [");
        for (size_t i = 0; i < nfront; i++)
            printf("%s\n  ", i ? "," : ""), json_rec(stdout, &c, &front[i], 1);
        printf("],\n \"not_worth_it\": [");
        for (size_t i = 0; i < nworse; i++)
            printf("%s\n  ", i ? "," : ""), json_rec(stdout, &c, &worse[i], 0);
        printf("]");
        /* every documented key is there whatever the options: null where it does not apply
         * (the budget's keys without --budget, floor/nearest/why when a plan fits, the check's
         * without --check) */
        printf(",\n \"plan\": ");
        if (have_budget && have_plan == 1)
            json_rec(stdout, &c, &plan, spec_ntech(&plan) > 1);
        else if (have_budget && have_plan == 2)
            printf("{\"technique\": \"combo\", \"techniques\": [], \"target\": \"nothing: the "
                   "recording fits\", \"flags\": \"\", "
                   "\"predicted\": {\"peak_allocated\": %zu, \"peak_reserved\": %zu}, "
                   "\"saving_bytes\": 0, \"cost\": "
                   "{\"extra_time_pct\": 0, \"extra_time_s\": 0, \"host_bytes\": 0, "
                   "\"pinned_bytes\": 0}}",
                   c.base.peak_allocated, c.base.peak_reserved);
        else
            printf("null");
        if (have_budget)
            printf(",\n \"shortfall_bytes\": %" PRIu64, shortfall);
        else
            printf(",\n \"shortfall_bytes\": null");
        if (have_budget && !have_plan) {
            printf(",\n \"floor\": {\"parameters\": %" PRIu64 ", \"gradients\": %" PRIu64
                   ", \"optimizer_state\": %" PRIu64 "},\n \"nearest\": ",
                   fl.params, fl.grads, fl.state);
            if (nearest)
                json_rec(stdout, &c, nearest, spec_ntech(nearest) > 1);
            else
                printf("null");
            printf(",\n \"why\": ");
            gm_json_str(stdout, why);
        } else {
            printf(",\n \"floor\": null,\n \"nearest\": null,\n \"why\": null");
        }
        printf(",\n \"budget_known\": %s",
               !have_budget ? "null" : strncmp(why, "not known", 9) ? "true" : "false");
        if (have_budget && check && have_plan == 1 && plan.measured)
            printf(",\n \"plan_over_budget_bytes\": %" PRIu64, over);
        else
            printf(",\n \"plan_over_budget_bytes\": null");
        if (check)
            printf(",\n \"check_failed\": %zu", nfailed);
        else
            printf(",\n \"check_failed\": null");
        printf("}\n");
    } else {
        char a[32], r[32], ra_[32], rr[32];
        fmt(c.base.peak_allocated, a, sizeof a);
        fmt(c.base.peak_reserved, r, sizeof r);
        fmt(c.m.rec_peak_allocated, ra_, sizeof ra_);
        fmt(c.m.rec_peak_reserved, rr, sizeof rr);
        printf("gpumem advise: %s\n", path);
        printf("program: %s%s\n", c.m.cmdline[0] ? c.m.cmdline : "(no command line recorded)",
               c.trainer ? " (the included trainer: advice as its flags)"
                         : " (advice in words, with the PyTorch way)");
        for (int i = 0; i < c.nnotes; i++)
            printf("note: %s\n", c.notes[i]);
        printf("baseline (replayed under %s): peak allocated %s, peak reserved %s (recorded: %s, "
               "%s)\n",
               c.m.config[0] ? "the recorded configuration" : "the default configuration", a, r, ra_,
               rr);
        if (c.step_estimated)
            printf("time: a dry run (no compute recorded): step %.4f s estimated as 6 N B T FLOPs "
                   "at %s peak; costs on the "
                   "%s roofline%s; link %.1f GB/s (%s)\n",
                   c.step_s, c.gpu->name, c.gpu->name,
                   c.gpu_assumed ? " (assumed: give --gpu)" : "", c.link_bps / 1e9, c.link_src);
        else if (c.step_s > 0)
            printf("time: %.4f s/step from %s; link %.1f GB/s (%s)%s%s%s\n", c.step_s,
                   c.m.ops_timed                       ? "timed launches"
                   : c.m.nops                          ? "NVTX op ranges"
                   : c.m.steps_from == GM_CSRC_PHASES ? "the \"step N\" ranges' spans"
                                                       : "the inferred steps' spans (first to last allocation)",
                   c.link_bps / 1e9,
                   c.link_src, c.gpu ? "; roofline " : "", c.gpu ? c.gpu->name : "",
                   c.gpu_assumed ? " (assumed: give --gpu)" : "");
        else
            printf("time: no step time recorded (no complete \"step N\" range): costs in s/step "
                   "only; link %.1f GB/s (%s)\n",
                   c.link_bps / 1e9, c.link_src);
        if (!c.m.have_uses && c.m.uses_unread > 0)
            printf("uses: incomplete (%" PRId64 " launches without their arguments: unreadable or lost), so "
                   "not used; recompute and offload act on births and deaths\n",
                   c.m.uses_unread);
        else if (!c.m.have_uses)
            printf(
                "uses: none recorded; recompute and offload act on births and deaths (record with "
                "GPUMEM_USES=timed to sharpen them with each tensor's last and first use)\n");
        text_short(&c, recs, nrecs, front, nfront);
        /* those that lower the peak allocated and leave the reserved as it is (sorted last) are
         * listed apart: under "nothing here lowers the peak reserved" they read as savings */
        size_t nlow = 0;
        while (nlow < nrecs && recs[nlow].r.peak_reserved < c.base.peak_reserved)
            nlow++;
        if (try_flags) nlow = nrecs; /* what was asked for, whatever it lowers */
        size_t nshow = nr < nlow ? nr : nlow;
        printf("\nrecommendations (%zu of %zu, largest saving first):\n", nshow, nlow);
        if (!nlow && nrecs)
            printf("  none lowers the peak reserved of this recording (those below lower the peak allocated "
                   "only)\n");
        else if (!nrecs && c.m.phases_from == GM_CSRC_NONE)
            printf("  none: forward, backward and update are not known in this recording (the note says "
                   "what would tell them)\n");
        else if (!nrecs && nworse)
            printf("  none: no technique lowers the peak reserved of this recording (those below lower "
                   "the peak allocated but raise the reserved)\n");
        else if (!nrecs)
            printf("  none: no technique lowers the peak of this recording (what is live at the "
                   "peak is not "
                   "saved activations, gradients or optimizer state in a step)\n");
        for (size_t i = 0; i < nshow; i++)
            text_rec(stdout, &c, &recs[i]);
        if (nrecs > nlow)
            printf("\nlowers the peak allocated only (%zu: the peak reserved stays as it is in this recording, "
                   "whose segments' rounding may hide a saving a larger run would see):\n", nrecs - nlow);
        for (size_t i = nlow; i < nrecs && (int)(i - nlow) < top; i++)
            text_rec(stdout, &c, &recs[i]);
        if (nworse)
            printf("\nnot worth it (%zu: each lowers the peak allocated but raises the peak reserved, "
                   "what the device must hold):\n", nworse);
        for (size_t i = 0; i < nworse && (int)i < top; i++)
            text_rec(stdout, &c, &worse[i]);
        printf("\ncombinations (least extra time for the peak; %zu of %zu):\n", nf, nfront);
        for (size_t i = 0; i < nf; i++)
            text_rec(stdout, &c, &front[i]);
        if (have_budget) {
            char b[32];
            fmt(budget, b, sizeof b);
            if (have_plan == 2 && c.m.oom.seq) {
                char nd[32];
                gm_fmt_bytes_rounded(c.m.oom.allocated + c.m.oom.requested, 1, nd, sizeof nd);
                printf("\nbudget %s: the complete steps fit (peak reserved %s); the step that hit "
                       "the OOM needed at least %s, which fits too\n",
                       b, r, nd);
            }
            else if (have_plan == 2)
                printf("\nbudget %s: the recording already fits (peak reserved %s)\n", b, r);
            else if (have_plan) {
                printf("\nbudget %s: plan%s\n", b,
                       c.partial ? " (from the partial trace: --check measures the run)" : "");
                text_rec(stdout, &c, &plan);
                if (over) {
                    char ov[32];
                    fmt(over, ov, sizeof ov);
                    printf("    the plan MISSES the budget: measured %s over it\n", ov);
                }
            } else if (!strncmp(why, "not known", 9)) {
                printf("\nbudget %s: %s\n", b, why);
            } else {
                char sf[32], nm[32];
                /* rounded up: what to save, and a budget that holds the nearest miss */
                gm_fmt_bytes_rounded(shortfall, 1, sf, sizeof sf);
                gm_fmt_bytes_rounded(nearest ? nearest->r.peak_reserved : c.base.peak_reserved, 1, nm, sizeof nm);
                printf("\nbudget %s: nothing fits; the nearest miss needs %s (short by %s)\n", b,
                       nm, sf);
                if (nearest) text_rec(stdout, &c, nearest);
                printf("why: %s\n", why);
            }
        }
    }
    if (!json && have_budget && !have_plan && strncmp(why, "not known", 9))
        fprintf(stderr, "gpumem advise: no combination fits the budget\n");
    if (over) {
        char ov[32];
        fmt(over, ov, sizeof ov);
        fprintf(stderr, "gpumem advise: --check: the plan measured %s over the budget\n", ov);
    }
    if (nfailed)
        fprintf(stderr, "gpumem advise: --check: %zu re-run%s failed\n", nfailed,
                nfailed == 1 ? "" : "s");
done:
    free(front);
    free(all);
    free(recs);
    free(worse);
    free(c.classes);
    adv_model_free(&c.m);
    return rc;
oom:
    fprintf(stderr, "gpumem advise: out of memory\n");
    free(front);
    free(all);
    free(recs);
    free(worse);
    free(c.classes);
    adv_model_free(&c.m);
    return GM_EXIT_BADDB;
oom0:
    fprintf(stderr, "gpumem advise: out of memory\n");
    adv_model_free(&c.m);
    return GM_EXIT_BADDB;
}
