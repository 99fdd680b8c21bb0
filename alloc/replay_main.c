/* gpumem-replay — replay allocation traces under allocator presets and configs.
 *
 *   gpumem-replay [options] [TRACE...]
 *     --preset NAME     gpumem (default), pytorch, pytorch-expandable, nocache, or "all";
 *                       repeatable
 *     --conf STRING     GPUMEM_CONF-syntax keys applied after the preset (and after the
 *                       GPUMEM_CONF environment variable, which is read too)
 *     --limit SIZE      cap reserved memory (e.g. 24G; 0 is 0 bytes, none: no limit); reports where
 *                       the trace would OOM (GPUMEM_LIMIT is not read: said on stderr when set)
 *     --capacity SIZE   device memory of the simulated device (default 80G)
 *     --synth NAME      use the synthetic trace NAME (fixed, jitter) instead of/besides files
 *     --steps N --seed N  for --synth
 *     --write FILE      write the (first) trace in the text format and exit
 *     --check-conf      only parse GPUMEM_CONF / --conf, print the effective config, exit
 *     --round BYTES     print the block size the config gives a request of BYTES (repeatable;
 *                       sizes as for --limit), one per line, and exit
 *     --stream-lag N    allocations a record_stream'd free waits when the trace has no `fc`
 *     --top-down        hand out addresses downwards, as the recording's device did (a
 *                       recording's meta alloc.address_order "down": the virtual GPU)
 *     --segments        add the segments left at the end of the trace: segments=N and
 *                       segment_sizes=S,S,... (smallest first), PyTorch's memory_snapshot() view
 *     --torch-env       apply the configuration PyTorch would read from this environment
 *                       (PYTORCH_CUDA_ALLOC_CONF when set, else PYTORCH_ALLOC_CONF) after the
 *                       preset and before --conf; says which variable on stderr (without it, a
 *                       PYTORCH_CUDA_ALLOC_CONF that is set is said to be ignored)
 *     --divisions       print roundup_power2_divisions over PyTorch's 16 intervals ([1, 2) MiB
 *                       and below ... [32, 64) GiB and above), comma-separated, and exit
 *     --framework-only  under the pytorch presets, `ag` lines (a library's cudaMalloc that the
 *                       recording's allocator served) go to the device as `ax` lines do: what
 *                       PyTorch's own allocator would reserve
 *     --markers         the configuration given is the one the trace was recorded under: its
 *                       `mr` / `md` lines (gpumem's markers) say what the releases found settled,
 *                       `sy` / `sr` where its allocator synchronized, each at its step
 *     --continue-after-oom  an allocation that fails is counted (ooms=N) and the replay goes
 *                       on, as the recorded program did past each `ao` (oom_at= is the first)
 *
 * One line of key=value pairs per (trace, preset). Exit status: 0 ok, 1 a trace OOMed under the
 * limit (still reported), 2 usage, config or trace error (one-line message on stderr).
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
/* the option rule of every gpumem command: a forgotten value never takes the next option */
#include "snapshot/read/gm_args.h"

static int usage(void)
{
    fprintf(stderr,
            "usage: gpumem-replay [--preset NAME|all]... [--conf STRING] [--limit SIZE] "
            "[--capacity SIZE] [--synth fixed|jitter [--steps N] [--seed N]] [--write FILE] "
            "[--check-conf] [--round BYTES]... [--stream-lag N] [--top-down] [--segments] "
            "[--torch-env] [--divisions] [--framework-only] [--markers] "
            "[--continue-after-oom] [TRACE...]\n"
            "  --preset NAME     gpumem (default), pytorch, pytorch-expandable, nocache, or all\n"
            "  --conf STRING     GPUMEM_CONF keys applied after the preset and $GPUMEM_CONF\n"
            "  --limit SIZE      cap reserved memory (e.g. 24G): where would the trace OOM?\n"
            "                    (GPUMEM_LIMIT is not read: give --limit)\n"
            "                    (0 is a cap of 0 bytes; none: no limit, whatever --conf says)\n"
            "  --capacity SIZE   device memory of the simulated device (default 80G)\n"
            "  --synth NAME      a synthetic GPT-2 training trace (fixed, jitter)\n"
            "  --write FILE      write the (first) trace in the text format and exit\n"
            "  --check-conf      print the effective configuration and exit\n"
            "  --round BYTES     print the block size the configuration gives a request of BYTES\n"
            "                    (after roundup_power2_divisions), one line per --round, and exit;\n"
            "                    e.g. --conf 'preset:pytorch,roundup_power2_divisions:[256:1,>:8]'\n"
            "  --stream-lag N    a free after record_stream (rs) lands N allocations later when\n"
            "                    the trace has no 'fc' lines (default 0)\n"
            "  --top-down        addresses handed out downwards, as the recording's device did\n"
            "                    (gpumem's meta alloc.address_order = down: the virtual GPU)\n"
            "  --segments        also print the segments left at the end: segments=N and\n"
            "                    segment_sizes=S,S,... smallest first (memory_snapshot()'s view)\n"
            "  --torch-env       apply what PyTorch reads from this environment\n"
            "                    (PYTORCH_CUDA_ALLOC_CONF when set, else PYTORCH_ALLOC_CONF)\n"
            "  --divisions       print roundup_power2_divisions over PyTorch's 16 intervals\n"
            "  --framework-only  under the pytorch presets, replay 'ag' lines as 'ax': what\n"
            "                    PyTorch's own allocator would reserve (it never sees a library's\n"
            "                    cudaMalloc)\n"
            "  --markers         the trace was recorded under this configuration: its 'mr'/'md'\n"
            "                    lines stand for the releases' marker queries and its 'sy'/'sr'\n"
            "                    lines for its synchronizations, each at its step (exact with work\n"
            "                    queued; ignored in a trace without 'mr'/'md')\n"
            "  --continue-after-oom  count each allocation that fails (ooms=N) and go on, as the\n"
            "                    recorded program did past its 'ao' lines (oom_at=: the first)\n"
            "Trace lines: a <id> <size> [stream], ax <id> <size> [stream] (outside the framework's\n"
            "allocator), ag <id> <size> [stream] (outside it, served by the recording's allocator),\n"
            "ao <id> <size> [stream] (a request that failed: out of memory), ap <id> <size> <pool>\n"
            "(in a private pool: a CUDA graph's), ad <id> <size> [stream] (the driver's under every\n"
            "configuration: a pool the program chose, a graph's memory node), pr <pool> (the pool given\n"
            "back), cb <pool> / ce <pool> (gpumem's capture into the pool begins / ends), f <id>,\n"
            "fa <id> <stream>, fs <id> (a cudaFree after the program's synchronization: settled at once),\n"
            "rs <id> <stream>, fc <id>, mr <stream> [step] / md <stream> [step] (a marker recorded /\n"
            "found complete), sy [step] / sr (the allocator synchronized / and started the allocation\n"
            "over: --markers), e, l <bytes> (alloc/README.md).\n");
    return 2;
}

/* the sizes of the segments left at the end of a replay (--segments) */
typedef struct seglist {
    size_t *size;
    size_t n, cap;
} seglist;

static int seg_add(void *user, const alloc_walk_segment_t *seg, const alloc_walk_block_t *blocks,
                   size_t nblocks)
{
    (void)blocks, (void)nblocks;
    seglist *l = user;
    if (l->n == l->cap) {
        size_t nc = l->cap ? 2 * l->cap : 64;
        size_t *p = realloc(l->size, nc * sizeof(*p));
        if (!p) return 1;
        l->size = p, l->cap = nc;
    }
    l->size[l->n++] = seg->size;
    return 0;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static bool torch_env; /* --torch-env */

static bool limit_given; /* --limit, which overrides the configuration's limit key */

/* the preset in effect once GPUMEM_CONF and --conf are applied (a `preset:` key there resets
 * the one --preset named): the name the output line gives */
static const char *preset_in_effect(const alloc_config_t *cfg)
{
    switch (cfg->policy) {
    case ALLOC_POLICY_PYTORCH: return cfg->expandable_segments ? "pytorch-expandable" : "pytorch";
    case ALLOC_POLICY_NOCACHE: return "nocache";
    case ALLOC_POLICY_GPUMEM: break;
    }
    return "gpumem";
}

static int make_config(const char *preset, const char *conf, size_t limit, alloc_config_t *cfg)
{
    char err[1024];
    if (alloc_config_preset(cfg, preset)) {
        fprintf(stderr,
                "gpumem-replay: unknown preset '%s' (accepted: gpumem, pytorch, "
                "pytorch-expandable, nocache, all)\n",
                preset);
        return 2;
    }
    if (alloc_config_parse(cfg, getenv("GPUMEM_CONF"), err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (torch_env) {
        const char *var, *tc = alloc_config_torch_env(&var);
        static int told;
        if (!told++)
            fprintf(stderr, "gpumem-replay: PyTorch's configuration: %s%s%s\n", var ? var : "none",
                    var ? "=" : " set", tc ? tc : "");
        if (alloc_config_parse(cfg, tc, err, sizeof(err))) {
            fprintf(stderr, "%s (from %s)\n", err, var);
            return 2;
        }
    }
    if (alloc_config_parse(cfg, conf, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (limit_given) cfg->limit = limit;
    static int said; /* once per run */
    char names[512];
    if (!said && alloc_config_unmodelled(cfg, names, sizeof(names))) {
        said = 1;
        fprintf(stderr,
                "gpumem-replay: accepted but not modelled: %s (PyTorch options gpumem does "
                "not act on; replayed as if unset)\n",
                names);
    }
    return 0;
}

/* A whole number for --steps, --seed: digits only (strtoul took "-5" as 2^64 - 5, "5x" as 5) */
static bool whole_number(const char *v, unsigned long long max, unsigned long long *out)
{
    if (!*v || v[strspn(v, "0123456789")]) return false;
    errno = 0;
    *out = strtoull(v, NULL, 10);
    return errno == 0 && *out <= max;
}

static const char *const VALUED[] = {"--preset", "--conf", "--limit", "--capacity", "--synth", "--steps",
                                     "--seed", "--write", "--round", "--stream-lag", NULL};

int main(int argc, char **argv)
{
    const char *presets[16];
    int npresets = 0;
    const char *conf = NULL, *synth = NULL, *write_to = NULL;
    size_t limit = 0, capacity = 0;
    unsigned steps = 0;
    uint64_t seed = 1;
    bool check_only = false;
    size_t rounds[64];
    int nrounds = 0;
    unsigned stream_lag = 0;
    bool top_down = false, segments = false, divisions = false, framework_only = false;
    bool markers = false, go_on = false;
    const char *files[64];
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = gm_opt_peek(argc, argv, i);
        for (int k = 0; VALUED[k] && !v; k++)
            if (!strcmp(a, VALUED[k])) {
                fprintf(stderr, "gpumem-replay: %s needs a value\n", a);
                return 2;
            }
        if (!strcmp(a, "--preset") && v) {
            if (!strcmp(v, "all")) {
                npresets = 0;
                const char *all[] = {"gpumem", "pytorch", "pytorch-expandable", "nocache"};
                for (int k = 0; k < 4; k++)
                    presets[npresets++] = all[k];
            } else if (npresets < 16) {
                presets[npresets++] = v;
            }
            i++;
        } else if (!strcmp(a, "--conf") && v) {
            conf = v;
            i++;
        } else if ((!strcmp(a, "--limit") || !strcmp(a, "--capacity")) && v) {
            size_t sz = ALLOC_NO_LIMIT;
            bool none = a[2] == 'l' && !strcmp(v, "none");
            if (!none && alloc_parse_size(v, &sz)) {
                fprintf(stderr, "gpumem-replay: bad size '%s' for %s (" ALLOC_SIZE_RULE "%s)\n", v, a,
                        a[2] == 'l' ? "; none for no limit" : "");
                return 2;
            }
            /* 0 means 0 bytes, as in every size key: a limit of 0 lets nothing be reserved; a
             * device of 0 bytes is no device, and 0 must not quietly mean the default 80G */
            if (a[2] == 'c' && !sz) {
                fprintf(stderr, "gpumem-replay: --capacity 0: a device of 0 bytes holds nothing (e.g. 80G; leave "
                                "the option out for the default 80G)\n");
                return 2;
            }
            if (a[2] == 'l') limit_given = true;
            *(a[2] == 'l' ? &limit : &capacity) = sz;
            i++;
        } else if (!strcmp(a, "--synth") && v) {
            synth = v;
            i++;
        } else if ((!strcmp(a, "--steps") || !strcmp(a, "--seed")) && v) {
            unsigned long long x;
            if (!whole_number(v, a[3] == 't' ? UINT_MAX : UINT64_MAX, &x)) {
                fprintf(stderr, "gpumem-replay: bad %s '%s' (a whole number, digits only)\n", a, v);
                return 2;
            }
            if (a[3] == 't') steps = (unsigned)x;
            else seed = x;
            i++;
        } else if (!strcmp(a, "--write") && v) {
            write_to = v;
            i++;
        } else if (!strcmp(a, "--round") && v) {
            size_t sz;
            if (alloc_parse_size(v, &sz)) {
                fprintf(stderr, "gpumem-replay: bad size '%s' for --round (" ALLOC_SIZE_RULE ")\n", v);
                return 2;
            }
            if (nrounds < 64) rounds[nrounds++] = sz;
            i++;
        } else if (!strcmp(a, "--stream-lag") && v) {
            unsigned long long x;
            if (!whole_number(v, 1000000, &x)) {
                fprintf(stderr, "gpumem-replay: bad --stream-lag '%s' (a number of allocations)\n",
                        v);
                return 2;
            }
            stream_lag = (unsigned)x;
            i++;
        } else if (!strcmp(a, "--top-down")) {
            top_down = true;
        } else if (!strcmp(a, "--segments")) {
            segments = true;
        } else if (!strcmp(a, "--framework-only")) {
            framework_only = true;
        } else if (!strcmp(a, "--markers")) {
            markers = true;
        } else if (!strcmp(a, "--continue-after-oom")) {
            go_on = true;
        } else if (!strcmp(a, "--torch-env")) {
            torch_env = true;
        } else if (!strcmp(a, "--divisions")) {
            divisions = true;
        } else if (!strcmp(a, "--check-conf")) {
            check_only = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "gpumem-replay: unknown option '%s'\n", a);
            return usage();
        } else if (nfiles < 64) {
            files[nfiles++] = a;
        }
    }
    if (!npresets) presets[npresets++] = "gpumem";
    /* the environment's allocator settings that a replay does not read: said, not dropped */
    const char *lim_env = getenv("GPUMEM_LIMIT");
    if (lim_env && *lim_env && !limit_given)
        fprintf(stderr, "gpumem-replay: GPUMEM_LIMIT=%s is ignored: a replay reads its limit from --limit (or the "
                        "limit key of GPUMEM_CONF / --conf); give --limit %s\n", lim_env, lim_env);
    const char *tvar = NULL, *tconf = alloc_config_torch_env(&tvar);
    if (tconf && *tconf && !torch_env)
        fprintf(stderr, "gpumem-replay: %s=%s is ignored: a replay reads PyTorch's configuration only with "
                        "--torch-env; give --torch-env (or its keys as --conf)\n", tvar, tconf);

    if (nrounds) {
        alloc_config_t cfg;
        int rc = make_config(presets[0], conf, limit, &cfg);
        if (rc) return rc;
        for (int k = 0; k < nrounds; k++)
            printf("%zu\n", alloc_round_size(&cfg, rounds[k]));
        return 0;
    }
    if (divisions) { /* PyTorch's interval k is [2^k, 2^(k+1)) MiB: rp2_div[20 + k] */
        alloc_config_t cfg;
        int rc = make_config(presets[0], conf, limit, &cfg);
        if (rc) return rc;
        for (unsigned k = 0; k < 16; k++)
            printf("%s%llu", k ? "," : "", (unsigned long long)cfg.rp2_div[20 + k]);
        printf("\n");
        return 0;
    }
    if (check_only) {
        alloc_config_t cfg;
        int rc = make_config(presets[0], conf, limit, &cfg);
        if (rc) return rc;
        char buf[1024];
        alloc_config_format(&cfg, buf, sizeof(buf));
        printf("%s\n", buf);
        return 0;
    }
    if (!synth && !nfiles) return usage();

    int status = 0;
    int ntraces = nfiles + (synth ? 1 : 0);
    for (int t = 0; t < ntraces; t++) {
        alloc_trace_event_t *ev = NULL;
        size_t n = 0;
        char err[1024];
        const char *tname;
        if (synth && t == 0) {
            tname = synth;
            if (alloc_trace_synth(synth, steps, seed, &ev, &n)) {
                fprintf(stderr,
                        "gpumem-replay: unknown synthetic trace '%s' (accepted: fixed, "
                        "jitter)\n",
                        synth);
                return 2;
            }
        } else {
            tname = files[t - (synth ? 1 : 0)];
            if (alloc_trace_load(tname, &ev, &n, err, sizeof(err))) {
                fprintf(stderr, "gpumem-replay: %s\n", err);
                return 2;
            }
        }
        if (write_to) {
            int rc = alloc_trace_write(write_to, ev, n);
            free(ev);
            if (rc) {
                fprintf(stderr, "gpumem-replay: cannot write %s\n", write_to);
                return 2;
            }
            return 0;
        }
        for (int p = 0; p < npresets; p++) {
            alloc_config_t cfg;
            int rc = make_config(presets[p], conf, limit, &cfg);
            if (rc) {
                free(ev);
                return rc;
            }
            seglist segs = {0};
            alloc_replay_opts_t o = {.capacity = capacity, .stream_lag = stream_lag,
                                     .top_down = top_down, .framework_only = framework_only,
                                     .markers = markers, .continue_after_oom = go_on,
                                     .end_walk = segments ? seg_add : NULL,
                                     .end_walk_user = &segs};
            alloc_replay_result_t r;
            if (alloc_replay(&cfg, &o, ev, n, &r, err, sizeof(err))) {
                fprintf(stderr, "gpumem-replay: %s\n", err);
                free(segs.size);
                free(ev);
                return 2;
            }
            printf("trace=%s preset=%s events=%llu peak_requested=%zu peak_allocated=%zu "
                   "peak_reserved=%zu utilization=%.4f driver_calls=%llu device_allocs=%llu "
                   "device_frees=%llu cache_hits=%llu cache_misses=%llu oom_at=%lld",
                   tname, preset_in_effect(&cfg), (unsigned long long)r.events, r.peak_requested,
                   r.peak_allocated, r.peak_reserved, r.utilization,
                   (unsigned long long)r.driver_calls, (unsigned long long)r.device_allocs,
                   (unsigned long long)r.device_frees, (unsigned long long)r.cache_hits,
                   (unsigned long long)r.cache_misses, (long long)r.oom_index);
            if (go_on) printf(" ooms=%llu", (unsigned long long)r.num_ooms);
            if (r.other_allocs || r.held_frees)
                printf(" other_allocs=%llu peak_other=%zu held_frees=%llu",
                       (unsigned long long)r.other_allocs, r.peak_other,
                       (unsigned long long)r.held_frees);
            if (r.oom_index >= 0) {
                printf(" oom_requested=%zu oom_allocated=%zu oom_reserved=%zu oom_free_cached=%zu "
                       "oom_largest_free=%zu oom_limit=",
                       r.oom.requested, r.oom.allocated, r.oom.reserved, r.oom.free_cached,
                       r.oom.largest_free_block);
                /* none, or the cap in bytes: 0 is a cap of 0 bytes, never "none" */
                if (r.oom.limit == ALLOC_NO_LIMIT)
                    printf("none");
                else
                    printf("%zu", r.oom.limit);
                status = 1;
            }
            if (segments) {
                if (segs.n > 1) qsort(segs.size, segs.n, sizeof(*segs.size), cmp_size);
                printf(" segments=%zu segment_sizes=", segs.n);
                for (size_t k = 0; k < segs.n; k++)
                    printf("%s%zu", k ? "," : "", segs.size[k]);
                if (!segs.n) printf("-");
            }
            free(segs.size);
            printf(" seconds=%.4f\n", r.seconds);
        }
        free(ev);
    }
    return status;
}
