/* gm_advise_shard.c — `gpumem advise DB --ranks N [--zero 1|2]`: each rank's peak under ZeRO-1
 * and ZeRO-2 across N ranks, predicted from a recording of one rank.
 *
 * The recording is one process at the per-rank batch: data parallelism gives every rank the
 * same activations as one process running B / N sequences, so 1 rank with -B 4 has exactly the
 * per-rank activations of 2 ranks with -B 8 (the trainer's multi-rank mode, train/README.md). What
 * N ranks change is what sharding changes: adv_zero rewrites the trace (optimizer state to its
 * shard; with stage 2 the gradients' lives end where their shard is reduce-scattered) and the
 * rewritten trace replays under the recorded configuration, like every other technique.
 * ZeRO-0 (plain data parallel, gradients all-reduced in place) is the recording itself.
 *
 * --check runs the recorded command again under `mpirun -np N gpumem record -o ...-%r.db`
 * with the global batch (-B times N) and --zero, and reads back every rank's measured peaks. */
#include "snapshot/analyze/gm_advise.h"
#include "snapshot/analyze/gm_category.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct shard_pred {
    int zero;
    alloc_replay_result_t r;
    adv_zero_stats st;
    char flags[128];
    const char *change; /* a PyTorch recording: the stage in PyTorch's terms */
    int measured;                  /* --check: 1 measured, -1 failed (why in err) */
    uint64_t meas_alloc, meas_res; /* the largest rank's */
    char err[2048];
} shard_pred;

/* ZeRO-3 (gm_advise_zero3.c): parameters sharded too, --prefetch K, with and without
 * --offload params. */
typedef struct z3_pred {
    int offload_params, prefetch, offload_opt, recompute_layer;
    int keep; /* a PyTorch recording: FSDP2's reshard_after_forward=False (SHARD_GRAD_OP) */
    alloc_replay_result_t r;
    adv_zero3_stats st;
    char flags[160];
    const char *change; /* a PyTorch recording: FSDP2's calls */
    int measured;                  /* --check: 1 measured, -1 failed (why in err) */
    uint64_t meas_alloc, meas_res; /* the largest rank's */
    uint64_t min_alloc, min_res;   /* the smallest rank's */
    char err[2048];
} z3_pred;

/* DeepSpeed's estimate of a rank's model-state bytes under ZeRO-3
 * (estimate_zero3_model_states_mem_needs: formulas, not measurements; no activations, no
 * fragmentation): 4L + 18 Psi / N with mixed-precision Adam, 4L + 2 Psi / N with the optimizer
 * offloaded, 4L with the parameters offloaded too (L: the largest layer's parameters). */
typedef struct ds_est {
    uint64_t psi, largest_layer;
    uint64_t zero3, zero3_offload_opt, zero3_offload_params;
} ds_est;
static void ds_estimate(const adv_zero3_stats *st, unsigned ranks, ds_est *d)
{
    d->psi = st->nparams_elems, d->largest_layer = st->largest_layer_params;
    d->zero3_offload_params = 4 * d->largest_layer;
    d->zero3_offload_opt = d->zero3_offload_params + 2 * d->psi / ranks;
    d->zero3 = d->zero3_offload_params + 18 * d->psi / ranks;
}

/* ZeRO-3 at prefetch K (with --offload params: off) replayed into q. 0; 1 not predictable
 * (why in err); -1 error. */
static int z3_run_with(const adv_model *m, unsigned ranks, int K, int off, int off_opt, int rc_layer, unsigned B,
                       z3_pred *q, char *err, size_t errsz)
{
    memset(q, 0, sizeof *q);
    q->offload_params = off, q->prefetch = K, q->offload_opt = off_opt, q->recompute_layer = rc_layer;
    adv_model c;
    if (adv_model_copy(m, &c) != 0) {
        snprintf(err, errsz, "out of memory");
        return -1;
    }
    int rc = 0;
    if (rc_layer) { /* the layer's activations dropped after its forward, rebuilt in its backward */
        adv_stash_opts so = {.recompute_layer = 1};
        adv_stash_stats ss;
        if (adv_stash(&c, &so, 25e9, &ss) != 0) rc = -1, snprintf(err, errsz, "out of memory");
    }
    if (rc == 0) rc = adv_zero3(&c, ranks, K, off, &q->st, err, errsz);
    if (rc == 0 && off_opt) { /* the state shards on the host, brought in per update */
        adv_opt_stats os;
        if (adv_opt(&c, 0, 1, &os) != 0 || adv_opt_param_order(&c) != 0) rc = -1, snprintf(err, errsz, "out of memory");
    }
    if (rc == 0 && adv_replay(&c, &q->r, err, errsz) != 0) rc = -1;
    adv_model_free(&c);
    const char *offl = off && off_opt ? " --offload params,optimizer" : off ? " --offload params" : off_opt ? " --offload optimizer" : "";
    snprintf(q->flags, sizeof q->flags, "-B %u --zero 3 --prefetch %d%s%s", B * ranks, K, offl,
             rc_layer ? " --recompute layer" : "");
    return rc;
}
static int z3_run(const adv_model *m, unsigned ranks, int K, int off, unsigned B, z3_pred *q, char *err,
                  size_t errsz)
{
    return z3_run_with(m, ranks, K, off, 0, 0, B, q, err, errsz);
}

/* What a plan or the nearest one is called in the text: its flags, else its stage (a PyTorch
 * recording's ZeRO-0..2 have no flags: their change is printed below the table). */
static const char *plan_label(const shard_pred *z, const z3_pred *q, char *buf, size_t n)
{
    if (q && q->flags[0]) return q->flags;
    if (!q && z && z->flags[0]) return z->flags;
    snprintf(buf, n, "ZeRO-%d", q ? 3 : z ? z->zero : 0);
    return buf;
}

static unsigned cmd_flag_int(const char *cmd, const char *flag, unsigned dflt)
{
    size_t n = strlen(flag);
    for (const char *p = strstr(cmd, flag); p; p = strstr(p + 1, flag))
        if ((p == cmd || p[-1] == ' ') && p[n] == ' ')
            return (unsigned)strtoul(p + n + 1, NULL, 10);
    return dflt;
}

/* The recorded command line with "-B b" replaced by "-B b*N" and "--zero" dropped, then extra
 * appended. */
static void scaled_cmdline(const char *cmd, unsigned ranks, const char *extra, char *out,
                           size_t outsz)
{
    char buf[8192], word[64], *words[1024];
    int nw = gm_cmd_split(cmd, buf, sizeof buf, words, 1024), kept = 0, after_b = 0;
    for (int k = 0; k < nw; k++) {
        char *t = words[k];
        if (!strcmp(t, "--zero")) {
            k++; /* its value */
            continue;
        }
        int was_b = after_b;
        after_b = !strcmp(t, "-B");
        if (was_b) {
            snprintf(word, sizeof word, "%lu", strtoul(t, NULL, 10) * ranks);
            t = word;
        }
        words[kept++] = t;
    }
    gm_cmd_join(words, kept, out, outsz); /* the recorded words quoted as they came */
    size_t o = strlen(out);
    if (extra && *extra) snprintf(out + o, outsz - o, " %s", extra);
}

/* 1 when `exe --help` mentions --zero (a trainer with the multi-rank mode), 0 when it answers
 * without it, -1 when it does not answer (it fails: the re-run is then what says why). */
static int trainer_has_zero(const char *exe)
{
    char cmd[8300], q[8192];
    gm_cmd_quote(exe, q, sizeof q); /* a shell reads it back as it is */
    snprintf(cmd, sizeof cmd, "%s --help 2>&1", q);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    char line[512];
    int found = 0;
    while (fgets(line, sizeof line, p))
        found |= strstr(line, "--zero") != NULL;
    int st = pclose(p);
    return found ? 1 : st != 0 ? -1 : 0;
}

/* The recorded command at N ranks (global batch scaled, --zero of the prediction) under
 * `mpirun -np N gpumem record`; the largest rank's measured peaks. 0 or -1 with err. */
static int rerun_ranks(const gm_rerun_origin *o, const char *cmdline, unsigned ranks, shard_pred *p)
{
    char cmd[8192], extra[64];
    snprintf(extra, sizeof extra, "--zero %d", p->zero);
    scaled_cmdline(cmdline, ranks, NULL, cmd, sizeof cmd);
    return gm_rerun(o, cmd, extra, NULL, ranks, &p->meas_alloc, &p->meas_res, p->err, sizeof p->err);
}

/* A PyTorch recording's FSDP row measured: the project's script again with the row's --fsdp
 * flags (one process as rank 0 of N), its hooks and allocator as recorded; PyTorch's own peaks
 * (gpumem's under --allocator gpumem) are every rank's. */
static void rerun_fsdp(const adv_model *m, const gm_rerun_origin *o, z3_pred *q)
{
    gm_rerun_script t = {.allocator_gpumem = m->torch == 2, .hooks = m->phases_from == GM_CSRC_PHASES};
    snprintf(t.alloc_conf, sizeof t.alloc_conf, "%s", m->torch_conf);
    char cmd[sizeof m->cmdline + 200];
    snprintf(cmd, sizeof cmd, "%s %s", m->cmdline, q->flags);
    q->measured = gm_rerun_torch_script(o, cmd, &t, q->err, sizeof q->err) == 0 ? 1 : -1;
    q->meas_alloc = q->min_alloc = t.peak_allocated, q->meas_res = q->min_res = t.peak_reserved;
}

static double err_pct(uint64_t pred, uint64_t meas)
{
    return meas ? 100.0 * ((double)pred - (double)meas) / (double)meas : 0;
}

int gm_advise_shard(const adv_model *m, const gm_rerun_origin *o, unsigned ranks, int zero, int prefetch, size_t budget,
                    int json, int check, FILE *out)
{
    /* the included trainer (not the PyTorch script, whose name it shares: it has no --zero) */
    int trainer = !m->torch && strstr(m->cmdline, "train_gpt2") != NULL;
    static const char *const torch_change[3] = {
        "DistributedDataParallel: every rank keeps the whole optimizer state and gradients",
        "torch.distributed.optim.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=<the optimizer>): "
        "each rank keeps its shard of the optimizer state",
        "FSDP(model, sharding_strategy=ShardingStrategy.SHARD_GRAD_OP): optimizer state and gradients sharded "
        "(ZeRO-2; for FULL_SHARD, the parameters sharded too, see ZeRO-3)"};
    /* the project's PyTorch script, whose --fsdp N runs FSDP2 as one rank of N */
    int torch_script = m->torch && strstr(m->cmdline, "train_gpt2.py") != NULL;
    unsigned B = trainer ? cmd_flag_int(m->cmdline, "-B", 4) : 0;
    char prog[4096]; /* what the re-runs run: the recorded argv[0] through the path it ran by */
    gm_rerun_program(o, m->cmdline, prog, sizeof prog);
    shard_pred p[3];
    int np = 0;
    char err[1024];
    for (int z = 0; z <= 2; z++) {
        if (zero > 0 && z != 0 && z != zero) continue;
        shard_pred *q = &p[np];
        memset(q, 0, sizeof *q);
        q->zero = z;
        adv_model c;
        if (adv_model_copy(m, &c) != 0 || adv_zero(&c, ranks, z, &q->st) != 0 ||
            (trainer && z == 2 && adv_opt_param_order(&c) != 0) || adv_replay(&c, &q->r, err, sizeof err) != 0) {
            fprintf(stderr, "gpumem advise: ZeRO-%d across %u rank%s: %s\n", z, ranks, ranks == 1 ? "" : "s",
                    err[0] ? err : "out of memory");
            adv_model_free(&c);
            return GM_EXIT_BADDB;
        }
        adv_model_free(&c);
        if (trainer) snprintf(q->flags, sizeof q->flags, "-B %u --zero %d", B * ranks, z);
        if (m->torch) q->change = torch_change[z];
        np++;
    }
    /* ZeRO-3: the included trainer's unit schedule replayed (a recording of anything else has no
     * schedule to replay: said, not guessed) */
    z3_pred z3[3];
    int nz3 = 0;
    char z3_why[512] = "";
    ds_est ds = {0};
    if (zero < 0 || zero == 3) {
        for (int row = 0; !trainer && m->torch && row <= 2 && !z3_why[0]; row++) {
            /* FSDP2's schedule (gm_advise_fsdp.c): FULL_SHARD, with CPUOffloadPolicy, SHARD_GRAD_OP */
            int off = row == 1, keep = row == 2;
            z3_pred *q = &z3[nz3];
            memset(q, 0, sizeof *q);
            adv_model c;
            int rc = -1;
            snprintf(err, sizeof err, "out of memory");
            if (adv_model_copy(m, &c) == 0) {
                rc = adv_fsdp(&c, ranks, off, !keep, &q->st, err, sizeof err);
                if (rc == 0 && adv_replay(&c, &q->r, err, sizeof err) != 0) rc = -1;
                adv_model_free(&c);
            }
            if (rc > 0)
                snprintf(z3_why, sizeof z3_why, "ZeRO-3 (FSDP) not predicted: %.480s", err);
            else if (rc < 0) {
                fprintf(stderr, "gpumem advise: FSDP across %u rank%s: %s\n", ranks, ranks == 1 ? "" : "s",
                        err[0] ? err : "out of memory");
                return GM_EXIT_BADDB;
            } else {
                q->prefetch = 1, q->offload_params = off, q->keep = keep;
                q->change = keep ? "fully_shard(block, reshard_after_forward=False) on every block, then "
                                   "fully_shard(model, reshard_after_forward=False) (SHARD_GRAD_OP: each block's "
                                   "parameters stay gathered from its forward to its backward)"
                          : off ? "fully_shard(block, offload_policy=CPUOffloadPolicy()) on every block, then "
                                  "fully_shard(model, offload_policy=CPUOffloadPolicy()): the shards, gradients and "
                                  "optimizer state on the host, the update there"
                                : "fully_shard(block) on every block of the repeated list, then fully_shard(model) "
                                  "(torch.distributed.fsdp, FSDP2; reshard_after_forward=True: FULL_SHARD)";
                if (torch_script)
                    snprintf(q->flags, sizeof q->flags, "--fsdp %u%s", ranks,
                             off ? " --fsdp-offload" : keep ? " --fsdp-reshard 0" : "");
                nz3++;
            }
        }
        if (!trainer && !m->torch)
            snprintf(z3_why, sizeof z3_why, "%s",
                     "ZeRO-3 is predicted for recordings of the included trainer and of PyTorch programs only");
        for (int off = 0; trainer && off <= 1; off++) {
            z3_pred *q = &z3[nz3];
            int rc = z3_run(m, ranks, prefetch, off, B, q, err, sizeof err);
            if (rc > 0) {
                snprintf(z3_why, sizeof z3_why, "ZeRO-3 not predicted: %.480s", err);
                break;
            }
            if (rc < 0) {
                fprintf(stderr, "gpumem advise: ZeRO-3 across %u rank%s: %s\n", ranks, ranks == 1 ? "" : "s",
                        err[0] ? err : "out of memory");
                return GM_EXIT_BADDB;
            }
            nz3++;
        }
        if (nz3) ds_estimate(&z3[0].st, ranks, &ds);
    }
    /* --budget: the cheapest plan whose predicted peak reserved fits, from the least sharding
     * and communication up: ZeRO-0, 1, 2, then ZeRO-3 at prefetch 2, 1, 0, then the same with
     * the parameters offloaded */
    int have_plan = 0, nb = 0;
    z3_pred bz[12], plan3 = {0};
    const shard_pred *plan_z = NULL;
    const z3_pred *plan_q = NULL, *nearest_q = NULL;
    const shard_pred *nearest_z = NULL;
    uint64_t nearest_res = UINT64_MAX;
    char plan_flags[200] = "", mpirun[8400] = "";
    if (budget) {
        for (int i = 0; i < np && !have_plan; i++) {
            if (p[i].r.peak_reserved <= budget) plan_z = &p[i], have_plan = 1;
            if (p[i].r.peak_reserved < nearest_res) nearest_res = p[i].r.peak_reserved, nearest_z = &p[i];
        }
        /* ZeRO-3: prefetch 2, 1, 0; then parameters offloaded; then (prefetch 1) the optimizer
         * state offloaded, with and without the parameters; then a layer's activations
         * recomputed on top */
        static const int ladder[][4] = {{2, 0, 0, 0}, {1, 0, 0, 0}, {0, 0, 0, 0}, {2, 1, 0, 0}, {1, 1, 0, 0},
                                        {0, 1, 0, 0}, {1, 0, 1, 0}, {1, 1, 1, 0}, {1, 0, 0, 1}, {1, 1, 1, 1}};
        for (size_t li = 0; trainer && !z3_why[0] && li < sizeof ladder / sizeof *ladder && !have_plan; li++) {
            {
                z3_pred *q = &bz[nb];
                int rc = z3_run_with(m, ranks, ladder[li][0], ladder[li][1], ladder[li][2], ladder[li][3], B, q, err,
                                     sizeof err);
                if (rc != 0) {
                    fprintf(stderr, "gpumem advise: --budget: ZeRO-3: %s\n", err);
                    return GM_EXIT_BADDB;
                }
                nb++;
                if (q->r.peak_reserved <= budget) plan_q = q, have_plan = 1;
                if (q->r.peak_reserved < nearest_res) nearest_res = q->r.peak_reserved, nearest_q = q, nearest_z = NULL;
            }
        }
        for (int i = 0; !have_plan && !trainer && i < nz3; i++) { /* a PyTorch recording: FSDP2's rows */
            if (z3[i].r.peak_reserved <= budget)
                plan_q = &z3[i], have_plan = 1;
            else if (z3[i].r.peak_reserved < nearest_res)
                nearest_res = z3[i].r.peak_reserved, nearest_q = &z3[i], nearest_z = NULL;
        }
        if (have_plan) {
            if (plan_z)
                snprintf(plan_flags, sizeof plan_flags, "%s", plan_z->flags[0] ? plan_z->flags : "");
            else
                snprintf(plan_flags, sizeof plan_flags, "%s", plan_q->flags);
            if (trainer) {
                char cmd[8192];
                scaled_cmdline(m->cmdline, ranks, NULL, cmd, sizeof cmd);
                const char *extra = strstr(plan_flags, "--zero");
                const char *root = gm_mpirun_root_flag(); /* the line must run where it is printed */
                snprintf(mpirun, sizeof mpirun, "mpirun %s%s-np %u %s %s", root, root[0] ? " " : "", ranks, cmd,
                         extra ? extra : "");
            }
            if (check && torch_script && plan_q) {
                plan3 = *plan_q;
                rerun_fsdp(m, o, &plan3);
            } else if (check && trainer && access(prog, X_OK) == 0) {
                plan3 = plan_q ? *plan_q : (z3_pred){0};
                char cmd[8192];
                scaled_cmdline(m->cmdline, ranks, NULL, cmd, sizeof cmd);
                const char *extra = strstr(plan_flags, "--zero");
                plan3.measured = gm_rerun_ranks(o, cmd, extra, ranks, &plan3.meas_alloc, &plan3.meas_res,
                                                &plan3.min_alloc, &plan3.min_res, plan3.err, sizeof plan3.err) == 0
                                     ? 1
                                     : -1;
            }
        }
        check = 0; /* with --budget, --check re-runs the plan only */
    }
    if (strstr(m->cmdline, "--zero 1") || strstr(m->cmdline, "--zero 2"))
        fprintf(stderr,
                "gpumem advise: the recorded command already shards (--zero): the prediction "
                "shards again; record one rank without --zero\n");
    int can_check = 0;
    const char *why_not = NULL;
    if (check && torch_script) {
        /* the script again as one rank of N under FSDP2 (--fsdp N: torch's fake process group);
         * ZeRO-1 and 2 have no flag in it */
        why_not = "ZeRO-1 and ZeRO-2 are not re-run for the PyTorch script (its --fsdp N is ZeRO-3's FULL_SHARD)";
        can_check = nz3 > 0;
        for (int i = 0; i < nz3; i++)
            rerun_fsdp(m, o, &z3[i]);
    } else if (check) {
        if (!trainer)
            why_not = m->torch ? "--check re-runs the included trainer and the project's PyTorch script "
                                 "(tests/torch/train_gpt2.py) only"
                               : "--check re-runs recordings of the included trainer only";
        else if (access(prog, X_OK) != 0)
            why_not = "the recorded executable is not there to re-run";
        else if (trainer_has_zero(prog) == 0)
            why_not = "the recorded trainer has no --zero (no multi-rank mode): nothing to re-run";
        else
            can_check = 1;
        for (int i = 0; can_check && i < np; i++)
            p[i].measured = rerun_ranks(o, m->cmdline, ranks, &p[i]) == 0 ? 1 : -1;
        for (int i = 0; can_check && i < nz3; i++) {
            z3_pred *q = &z3[i];
            char cmd[8192], extra[96];
            snprintf(extra, sizeof extra, "--zero 3 --prefetch %d%s", prefetch,
                     q->offload_params ? " --offload params" : "");
            scaled_cmdline(m->cmdline, ranks, NULL, cmd, sizeof cmd);
            q->measured = gm_rerun_ranks(o, cmd, extra, ranks, &q->meas_alloc, &q->meas_res, &q->min_alloc,
                                         &q->min_res, q->err, sizeof q->err) == 0
                              ? 1
                              : -1;
        }
    }
    const uint64_t base_a = p[0].r.peak_allocated, base_r = p[0].r.peak_reserved;
    /* --check: a re-run that failed is an answer that could not be checked (exit 1) */
    int failed = 0;
    for (int i = 0; i < np; i++)
        failed += p[i].measured < 0;
    for (int i = 0; i < nz3; i++)
        failed += z3[i].measured < 0;
    if (json) {
        fprintf(out, "{\"ranks\": %u, \"recorded_batch\": ", ranks);
        if (B)
            fprintf(out, "%u, \"global_batch\": %u", B, B * ranks);
        else
            fputs("null, \"global_batch\": null", out);
        fprintf(out,
                ", \"recorded\": {\"peak_allocated\": %" PRIu64 ", \"peak_reserved\": %" PRIu64 "}",
                m->rec_peak_allocated, m->rec_peak_reserved);
        fputs(", \"predictions\": [", out);
        for (int i = 0; i < np; i++) {
            const shard_pred *q = &p[i];
            fprintf(out,
                    "%s\n  {\"zero\": %d, \"peak_allocated\": %zu, \"peak_reserved\": %zu, "
                    "\"saving_allocated\": %" PRId64 ", \"saving_reserved\": %" PRId64
                    ", \"optimizer_state_bytes\": %" PRIu64
                    ", \"optimizer_state_shard_bytes\": %" PRIu64 ", \"gradient_bytes\": %" PRIu64
                    ", \"gradient_shard_bytes\": %" PRIu64
                    ", \"gradients_from_uses\": %zu, \"flags\": ",
                    i ? "," : "", q->zero, q->r.peak_allocated, q->r.peak_reserved,
                    (int64_t)base_a - (int64_t)q->r.peak_allocated,
                    (int64_t)base_r - (int64_t)q->r.peak_reserved, q->st.state_bytes,
                    q->st.state_shard_bytes, q->st.grad_bytes, q->st.grad_shard_bytes,
                    q->st.ngrads_from_uses);
            if (q->flags[0])
                gm_json_str(out, q->flags);
            else
                fputs("null", out);
            fputs(", \"change\": ", out);
            if (q->change)
                gm_json_str(out, q->change);
            else
                fputs("null", out);
            if (q->measured == 1)
                fprintf(out,
                        ", \"measured\": {\"peak_allocated\": %" PRIu64
                        ", \"peak_reserved\": %" PRIu64
                        ", \"error_allocated_pct\": %.3f, \"error_reserved_pct\": %.3f}",
                        q->meas_alloc, q->meas_res, err_pct(q->r.peak_allocated, q->meas_alloc),
                        err_pct(q->r.peak_reserved, q->meas_res));
            else if (q->measured < 0) {
                fputs(", \"measured\": null, \"check_error\": ", out);
                gm_json_str(out, q->err);
            }
            fputc('}', out);
        }
        fputs("\n]", out);
        fputs(", \"zero3_predictions\": [", out);
        for (int i = 0; i < nz3; i++) {
            const z3_pred *q = &z3[i];
            fprintf(out,
                    "%s\n  {\"zero\": 3, \"prefetch\": %d, \"offload_params\": %s, \"reshard_after_forward\": %s, "
                    "\"peak_allocated\": %zu, "
                    "\"peak_reserved\": %zu, \"saving_allocated\": %" PRId64 ", \"saving_reserved\": %" PRId64
                    ", \"parameter_bytes\": %" PRIu64 ", \"parameter_shard_bytes\": %" PRIu64
                    ", \"optimizer_state_shard_bytes\": %" PRIu64 ", \"gradient_shard_bytes\": %" PRIu64
                    ", \"gather_buffers\": %zu, \"largest_unit_bytes\": %" PRIu64
                    ", \"deepspeed_estimate_bytes\": %" PRIu64 ", \"flags\": ",
                    i ? "," : "", prefetch, q->offload_params ? "true" : "false", q->keep ? "false" : "true",
                    q->r.peak_allocated,
                    q->r.peak_reserved, (int64_t)base_a - (int64_t)q->r.peak_allocated,
                    (int64_t)base_r - (int64_t)q->r.peak_reserved, q->st.param_bytes, q->st.param_shard_bytes,
                    q->st.z.state_shard_bytes, q->st.z.grad_shard_bytes, q->st.ngathers, q->st.largest_unit_bytes,
                    q->offload_params ? ds.zero3_offload_params : ds.zero3);
            gm_json_str(out, q->flags);
            fputs(", \"change\": ", out);
            if (q->change)
                gm_json_str(out, q->change);
            else
                fputs("null", out);
            if (q->measured == 1)
                fprintf(out,
                        ", \"measured\": {\"peak_allocated\": %" PRIu64 ", \"peak_reserved\": %" PRIu64
                        ", \"min_rank_peak_allocated\": %" PRIu64 ", \"min_rank_peak_reserved\": %" PRIu64
                        ", \"error_allocated_pct\": %.3f, \"error_reserved_pct\": %.3f"
                        ", \"error_allocated_min_rank_pct\": %.3f, \"error_reserved_min_rank_pct\": %.3f}",
                        q->meas_alloc, q->meas_res, q->min_alloc, q->min_res, err_pct(q->r.peak_allocated, q->meas_alloc),
                        err_pct(q->r.peak_reserved, q->meas_res), err_pct(q->r.peak_allocated, q->min_alloc),
                        err_pct(q->r.peak_reserved, q->min_res));
            else if (q->measured < 0) {
                fputs(", \"measured\": null, \"check_error\": ", out);
                gm_json_str(out, q->err);
            }
            fputc('}', out);
        }
        fputs("\n]", out);
        if (nz3)
            fprintf(out,
                    ", \"deepspeed_estimate\": {\"formula\": \"DeepSpeed's estimate formula "
                    "(estimate_zero3_model_states_mem_needs): model states only\", \"params\": %" PRIu64
                    ", \"largest_layer_params\": %" PRIu64 ", \"ranks\": %u, \"zero3_bytes\": %" PRIu64
                    ", \"zero3_offload_optimizer_bytes\": %" PRIu64 ", \"zero3_offload_params_bytes\": %" PRIu64 "}",
                    ds.psi, ds.largest_layer, ranks, ds.zero3, ds.zero3_offload_opt, ds.zero3_offload_params);
        if (z3_why[0]) {
            fputs(", \"zero3_skipped\": ", out);
            gm_json_str(out, z3_why);
        }
        if (budget) {
            fprintf(out, ", \"budget\": {\"budget_bytes\": %zu, \"plan\": ", budget);
            if (have_plan) {
                fprintf(out, "{\"zero\": %d, \"prefetch\": %d, \"offload_params\": %s, \"peak_allocated\": %zu, "
                             "\"peak_reserved\": %zu, \"flags\": ",
                        plan_z ? plan_z->zero : 3, plan_q ? plan_q->prefetch : -1,
                        plan_q && plan_q->offload_params ? "true" : "false",
                        plan_z ? plan_z->r.peak_allocated : plan_q->r.peak_allocated,
                        plan_z ? plan_z->r.peak_reserved : plan_q->r.peak_reserved);
                gm_json_str(out, plan_flags);
                fputs(", \"mpirun\": ", out);
                if (mpirun[0])
                    gm_json_str(out, mpirun);
                else
                    fputs("null", out);
                fputs(", \"cwd\": ", out); /* where the line runs: its paths are the recording's */
                if (mpirun[0] && o && o->cwd[0])
                    gm_json_str(out, o->cwd);
                else
                    fputs("null", out);
                if (plan3.measured == 1)
                    fprintf(out,
                            ", \"measured\": {\"peak_allocated\": %" PRIu64 ", \"peak_reserved\": %" PRIu64
                            ", \"min_rank_peak_reserved\": %" PRIu64 ", \"every_rank_within_budget\": %s}",
                            plan3.meas_alloc, plan3.meas_res, plan3.min_res, plan3.meas_res <= budget ? "true" : "false");
                else if (plan3.measured < 0) {
                    fputs(", \"measured\": null, \"check_error\": ", out);
                    gm_json_str(out, plan3.err);
                }
                fputc('}', out);
            } else
                fputs("null", out);
            if (!have_plan && nearest_res != UINT64_MAX) {
                const adv_zero3_stats *t = nearest_q ? &nearest_q->st : NULL;
                fprintf(out, ", \"shortfall_bytes\": %" PRIu64 ", \"nearest\": {\"flags\": ", nearest_res - budget);
                gm_json_str(out, nearest_q ? nearest_q->flags : nearest_z->flags);
                uint64_t pa = nearest_q ? nearest_q->r.peak_allocated : nearest_z->r.peak_allocated;
                uint64_t par = t ? (nearest_q->offload_params ? 0 : t->param_shard_bytes) : 0;
                uint64_t gr = t ? t->z.grad_shard_bytes : nearest_z->st.grad_shard_bytes;
                uint64_t os = t ? (nearest_q->offload_opt ? 0 : t->z.state_shard_bytes) : nearest_z->st.state_shard_bytes;
                uint64_t rest = pa > par + gr + os ? pa - par - gr - os : 0;
                fprintf(out,
                        ", \"peak_reserved\": %" PRIu64 ", \"peak_allocated\": %" PRIu64
                        ", \"categories\": {\"parameters\": %" PRIu64 ", \"gradients\": %" PRIu64
                        ", \"optimizer_state\": %" PRIu64 ", \"activations_and_gathered\": %" PRIu64
                        ", \"reserved_not_allocated\": %" PRIu64 "}}",
                        nearest_res, pa, par, gr, os, rest, nearest_res - pa);
            }
            fputs(", \"not_searched\": \"bf16 parameters and activations, offload of activations, "
                  "accumulation, recompute other than whole layers: not combined with --ranks yet\"}",
                  out);
        }
        if (why_not) {
            fputs(", \"check_skipped\": ", out);
            gm_json_str(out, why_not);
        }
        fputs("}\n", out);
        if (failed) fprintf(stderr, "gpumem advise: --check: %d re-run%s failed\n", failed, failed == 1 ? "" : "s");
        if (budget && (!have_plan || plan3.measured < 0 || (plan3.measured == 1 && plan3.meas_res > budget))) return 1;
        return failed ? 1 : GM_EXIT_OK;
    }
    char a[32], r[32], s1[32], s2[32];
    fprintf(out, "ZeRO across %u rank%s: each rank's peak, predicted from this one-rank recording\n",
            ranks, ranks == 1 ? "" : "s");
    if (B)
        fprintf(
            out,
            "(recorded at -B %u, the per-rank batch: the launch is mpirun -np %u ... -B %u; record "
            "one\n"
            " rank at the global batch divided by the ranks for a prediction of that launch)\n\n",
            B, ranks, B * ranks);
    else
        fputs("(record one rank at the per-rank batch: its activations are each rank's)\n\n", out);
    fprintf(out, "  %-5s %15s %15s %14s %14s  %s\n", "zero", "peak allocated", "peak reserved",
            "saving alloc", "saving resv", trainer ? "flags" : "");
    for (int i = 0; i < np; i++) {
        const shard_pred *q = &p[i];
        gm_fmt_bytes(q->r.peak_allocated, a, sizeof a),
            gm_fmt_bytes(q->r.peak_reserved, r, sizeof r);
        gm_fmt_bytes(base_a > q->r.peak_allocated ? base_a - q->r.peak_allocated : 0, s1,
                     sizeof s1);
        gm_fmt_bytes(base_r > q->r.peak_reserved ? base_r - q->r.peak_reserved : 0, s2, sizeof s2);
        fprintf(out, "  %-5d %15s %15s %14s %14s  %s\n", q->zero, a, r, s1, s2, q->flags);
    }
    for (int i = 0; i < nz3; i++) {
        const z3_pred *q = &z3[i];
        gm_fmt_bytes(q->r.peak_allocated, a, sizeof a), gm_fmt_bytes(q->r.peak_reserved, r, sizeof r);
        gm_fmt_bytes(base_a > q->r.peak_allocated ? base_a - q->r.peak_allocated : 0, s1, sizeof s1);
        gm_fmt_bytes(base_r > q->r.peak_reserved ? base_r - q->r.peak_reserved : 0, s2, sizeof s2);
        fprintf(out, "  %-5s %15s %15s %14s %14s  %s\n", q->offload_params ? "3+off" : q->keep ? "3keep" : "3", a, r, s1,
                s2, q->flags);
    }
    for (int i = 0; i < np; i++) {
        const shard_pred *q = &p[i];
        if (q->zero == 0) continue;
        gm_fmt_bytes(q->st.state_bytes, a, sizeof a),
            gm_fmt_bytes(q->st.state_shard_bytes, r, sizeof r);
        fprintf(out, "\nZeRO-%d: optimizer state %s -> %s per rank (%zu tensors)", q->zero, a, r,
                q->st.nstate);
        if (q->zero >= 2) {
            gm_fmt_bytes(q->st.grad_bytes, s1, sizeof s1),
                gm_fmt_bytes(q->st.grad_shard_bytes, s2, sizeof s2);
            fprintf(out, "; gradients %s reduce-scattered to %s shards as each is completed", s1,
                    s2);
            if (q->st.ngrads_from_uses == 0)
                fputs(" (no uses recorded: at the end of the backward; GPUMEM_USES=1 places them)",
                      out);
        }
    }
    if (nz3) {
        const adv_zero3_stats *t = &z3[0].st;
        gm_fmt_bytes(t->param_bytes, a, sizeof a), gm_fmt_bytes(t->param_shard_bytes, r, sizeof r);
        gm_fmt_bytes(t->largest_unit_bytes, s1, sizeof s1);
        if (m->torch)
            fprintf(out,
                    "\nZeRO-3 (FSDP2): parameters %s -> %s per rank (%zu tensors), each block's gathered for its "
                    "forward and again for its backward (the next block's early in the backward; the largest "
                    "unit %s)",
                    a, r, t->nparams, s1);
        else
        fprintf(out,
                "\nZeRO-3: parameters %s -> %s per rank (%zu tensors), gathered unit by unit (--prefetch %d: "
                "the next %d unit%s early; the largest unit %s); 3+off: the shards in pinned host memory "
                "(--offload params)",
                a, r, t->nparams, prefetch, prefetch, prefetch == 1 ? "" : "s", s1);
        char d0[32], d1[32], d2[32];
        gm_fmt_bytes(ds.zero3, d0, sizeof d0), gm_fmt_bytes(ds.zero3_offload_opt, d1, sizeof d1);
        gm_fmt_bytes(ds.zero3_offload_params, d2, sizeof d2);
        fprintf(out,
                "\n\nDeepSpeed's estimate formula (model states only: no activations, no gathered units "
                "beyond one layer, no fragmentation),\n Psi %" PRIu64 " parameters, L %" PRIu64
                " (the largest layer's), N %u:\n"
                "  ZeRO-3, mixed-precision Adam  4L + 18 Psi/N  %15s   (gpumem: zero 3 above)\n"
                "  optimizer offloaded           4L +  2 Psi/N  %15s\n"
                "  parameters offloaded too      4L             %15s%s\n",
                ds.psi, ds.largest_layer, ranks, d0, d1, d2, nz3 > 1 ? "   (gpumem: 3+off above keeps the optimizer)" : "");
    }
    if (z3_why[0]) fprintf(out, "\n%s\n", z3_why);
    fputc('\n', out);
    for (int i = 0; i < np; i++)
        if (p[i].change) fprintf(out, "%sZeRO-%d in PyTorch: %s\n", i ? "" : "\n", p[i].zero, p[i].change);
    for (int i = 0; i < nz3; i++)
        if (z3[i].change)
            fprintf(out, "ZeRO-3%s in PyTorch: %s\n", z3[i].offload_params ? "+off" : z3[i].keep ? "keep" : "",
                    z3[i].change);
    if (why_not) fprintf(out, "\n--check: %s\n", why_not);
    if (can_check) {
        if (torch_script)
            fprintf(out, "\n--check (the script as rank 0 of %u: --fsdp %u over torch's fake process group):\n",
                    ranks, ranks);
        else
            fprintf(out, "\n--check (mpirun -np %u, the largest rank's measured peaks):\n", ranks);
        for (int i = 0; i < np; i++) {
            const shard_pred *q = &p[i];
            if (!q->measured) continue;
            if (q->measured < 0) {
                fprintf(out, "  zero %d: %s\n", q->zero, q->err);
                continue;
            }
            gm_fmt_bytes(q->meas_alloc, a, sizeof a), gm_fmt_bytes(q->meas_res, r, sizeof r);
            fprintf(out,
                    "  zero %d: measured %s allocated (predicted %+.2f%%), %s reserved (%+.2f%%)\n",
                    q->zero, a, err_pct(q->r.peak_allocated, q->meas_alloc), r,
                    err_pct(q->r.peak_reserved, q->meas_res));
        }
        for (int i = 0; i < nz3; i++) {
            const z3_pred *q = &z3[i];
            const char *lab = q->offload_params ? "zero 3+off" : q->keep ? "zero 3keep" : "zero 3";
            if (q->measured < 0) {
                fprintf(out, "  %s: %s\n", lab, q->err);
                continue;
            }
            gm_fmt_bytes(q->meas_alloc, a, sizeof a), gm_fmt_bytes(q->meas_res, r, sizeof r);
            fprintf(out,
                    "  %s: measured %s allocated (predicted %+.2f%%; smallest rank %+.2f%%), %s reserved (%+.2f%%; "
                    "%+.2f%%)\n",
                    lab, a, err_pct(q->r.peak_allocated, q->meas_alloc), err_pct(q->r.peak_allocated, q->min_alloc), r,
                    err_pct(q->r.peak_reserved, q->meas_res), err_pct(q->r.peak_reserved, q->min_res));
        }
    }
    if (budget) {
        char bb[32];
        gm_fmt_bytes(budget, bb, sizeof bb);
        if (have_plan) {
            gm_fmt_bytes(plan_z ? plan_z->r.peak_reserved : plan_q->r.peak_reserved, r, sizeof r);
            char lab[32];
            fprintf(out, "\nbudget %s per rank: plan %s (predicted peak reserved %s)\n", bb,
                    plan_label(plan_z, plan_z ? NULL : plan_q, lab, sizeof lab), r);
            if (mpirun[0]) {
                /* run from elsewhere, the recorded command's relative paths need its directory */
                char here[4096];
                int away = o && o->cwd[0] && !(getcwd(here, sizeof here) && !strcmp(here, o->cwd));
                fprintf(out, "  %s%s%s%s\n", away ? "cd '" : "", away ? o->cwd : "", away ? "' && " : "", mpirun);
            }
            if (plan3.measured == 1) {
                gm_fmt_bytes(plan3.meas_res, r, sizeof r);
                fprintf(out, "  --check: measured %s reserved on the largest rank: %s\n", r,
                        plan3.meas_res <= budget ? "every rank within the budget" : "OVER the budget");
            } else if (plan3.measured < 0)
                fprintf(out, "  --check: %s\n", plan3.err);
        } else if (nearest_res != UINT64_MAX) {
            const adv_zero3_stats *t = nearest_q ? &nearest_q->st : NULL;
            uint64_t pa = nearest_q ? nearest_q->r.peak_allocated : nearest_z->r.peak_allocated;
            uint64_t par = t ? (nearest_q->offload_params ? 0 : t->param_shard_bytes) : 0;
            uint64_t gr = t ? t->z.grad_shard_bytes : nearest_z->st.grad_shard_bytes;
            uint64_t os = t ? (nearest_q->offload_opt ? 0 : t->z.state_shard_bytes) : nearest_z->st.state_shard_bytes;
            uint64_t rest = pa > par + gr + os ? pa - par - gr - os : 0;
            char c1[32], c2[32], c3[32], c4[32], c5[32], lab[32];
            gm_fmt_bytes(nearest_res - budget, s1, sizeof s1), gm_fmt_bytes(nearest_res, r, sizeof r);
            gm_fmt_bytes(par, c1, sizeof c1), gm_fmt_bytes(gr, c2, sizeof c2), gm_fmt_bytes(os, c3, sizeof c3);
            gm_fmt_bytes(rest, c4, sizeof c4), gm_fmt_bytes(nearest_res - pa, c5, sizeof c5);
            fprintf(out,
                    "\nbudget %s per rank: nothing fits; the nearest, %s, needs %s reserved (short by %s):\n"
                    "  parameters %s, gradients %s, optimizer state %s, activations and gathered units %s,\n"
                    "  reserved beyond allocated %s\n",
                    bb, plan_label(nearest_z, nearest_q, lab, sizeof lab), r, s1, c1, c2, c3, c4, c5);
        }
        if (trainer)
            fputs("  (searched: ZeRO 0-3, --prefetch 0-2, --offload params, optimizer, --recompute layer; bf16,\n"
                  "  activation offload and accumulation are not combined with --ranks yet)\n",
                  out);
        else
            fputs("  (searched: ZeRO 0-2, then FSDP2's FULL_SHARD without and with CPU offload; recompute, bf16\n"
                  "  and accumulation are not combined with --ranks for a PyTorch recording yet)\n",
                  out);
        if (!have_plan || plan3.measured < 0 || (plan3.measured == 1 && plan3.meas_res > budget)) return 1;
    }
    if (failed) fprintf(stderr, "gpumem advise: --check: %d re-run%s failed\n", failed, failed == 1 ? "" : "s");
    return failed ? 1 : GM_EXIT_OK;
}
