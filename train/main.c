/* train/main.c — the train_gpt2 command: flags, data, the training loop, the report.
 *
 * Data: a raw text file is read as bytes (vocabulary 256); a file that starts with llm.c's
 * token-shard header (magic 20240520, version 1, uint16 tokens) is read as tokens. Without
 * --data a deterministic pseudo-random token stream from the seed is used (benchmarks).
 * Batches are consecutive windows of B*T+1 tokens, wrapping around at the end.
 *
 * Exit codes: 0 success, 1 bad flags or files, 2 a CUDA error (out of memory included; the
 * message names the CUDA error and the tensor). The last line is `PEAK <bytes> bytes`: the
 * trainer's own count of live tensor bytes at its highest.
 *
 * Several ranks (`mpirun -np N train_gpt2_sim ...`, detected by train/dist.c): -B is the
 * global batch; every rank reads the same data and takes rows [r B/N, (r+1) B/N) of each
 * batch; rank 0 prints the steps (the loss is the mean over all ranks' tokens) and, at the
 * end, every rank's peak (`PEAK_RANK r <bytes> bytes`) before `PEAK`, the largest of them. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "train/backend.h"
#include "train/dist.h"
#include "train/gpt2.h"

#define SHARD_MAGIC 20240520

static const struct {
    const char *name;
    gpt2_config c;
} models[] = {
    {"tiny", {.L = 2, .C = 64, .NH = 4, .V = 256, .Vp = 256, .maxT = 256}},
    {"gpt2", {.L = 12, .C = 768, .NH = 12, .V = 50257, .Vp = 50304, .maxT = 1024}},
    {"gpt2-medium", {.L = 24, .C = 1024, .NH = 16, .V = 50257, .Vp = 50304, .maxT = 1024}},
    {"gpt2-large", {.L = 36, .C = 1280, .NH = 20, .V = 50257, .Vp = 50304, .maxT = 1024}},
    {"gpt2-xl", {.L = 48, .C = 1600, .NH = 25, .V = 50257, .Vp = 50304, .maxT = 1024}},
};

/* The padded vocabulary: V rounded up to a multiple of 128 (GPT-2's 50257 -> 50304, llm.c's
 * rule), so the lm_head's rows stay aligned. */
static int padded_vocab(int V) { return (V + 127) / 128 * 128; }

/* A positive integer of at most `hi` at *s; advances *s past its digits. 0, or 1 if none. */
static int model_number(const char **s, int hi, int *out)
{
    long v = 0;
    const char *p = *s;
    if (*p < '0' || *p > '9') return 1;
    while (*p >= '0' && *p <= '9' && v <= hi) v = v * 10 + (*p++ - '0');
    if (v < 1 || v > hi || (*p >= '0' && *p <= '9')) return 1;
    *s = p, *out = (int)v;
    return 0;
}

/* --model: a named size, or the free form L<layers>-C<channels>-H<heads> (each once, any
 * order; for example L80-C8192-H64), with GPT-2's vocabulary (V 50257, Vp 50304) and maximum
 * sequence length (1024) unless --vocab / --max-T say otherwise. 0, or 1 with a message. */
static int parse_model(const char *s, gpt2_config *cfg)
{
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        if (!strcmp(models[i].name, s)) {
            *cfg = models[i].c;
            return 0;
        }
    gpt2_config c = {.V = 50257, .Vp = 50304, .maxT = 1024};
    const char *p = s;
    int bad = !*p;
    while (*p && !bad) {
        const char k = *p++;
        int *dst = k == 'L' ? &c.L : k == 'C' ? &c.C : k == 'H' ? &c.NH : NULL;
        const int hi = k == 'L' ? 1000 : 65536;
        bad = !dst || *dst || model_number(&p, hi, dst) || (*p && *p++ != '-') ||
              (p[-1] == '-' && !*p);
    }
    if (bad || !c.L || !c.C || !c.NH) {
        fprintf(stderr,
                "train_gpt2: unknown model '%s': a name (tiny, gpt2, gpt2-medium, gpt2-large, "
                "gpt2-xl) or L<layers>-C<channels>-H<heads>, for example L80-C8192-H64 "
                "(L up to 1000, C and H up to 65536)\n",
                s);
        return 1;
    }
    if (c.C % c.NH) {
        fprintf(stderr, "train_gpt2: model '%s': channels C %d are not divisible by heads H %d\n",
                s, c.C, c.NH);
        return 1;
    }
    *cfg = c;
    return 0;
}

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [options]\n"
            "Trains GPT-2 with one device allocation per tensor (framework lifetimes).\n"
            "  --model NAME       tiny (L2 C64 NH4 V256) | gpt2 | gpt2-medium | gpt2-large | "
            "gpt2-xl  [tiny]\n"
            "                     or L<layers>-C<channels>-H<heads>, e.g. L80-C8192-H64 (GPT-2's\n"
            "                     vocabulary and maximum T unless --vocab / --max-T)\n"
            "  --vocab N          vocabulary size (padded to a multiple of 128)  [the model's]\n"
            "  --max-T N          maximum sequence length (wpe rows)  [the model's]\n"
            "  -B N, -T N         batch size and sequence length  [4, 64]\n"
            "  --steps N          optimizer steps  [10]\n"
            "  --lr X             AdamW learning rate  [3e-4]\n"
            "  --wd X             AdamW weight decay (decoupled, as llm.c)  [0]\n"
            "  --seed N           seed of the initialization and the synthetic data  [1337]\n"
            "  --data FILE        raw text (bytes) or an llm.c token shard  [synthetic tokens]\n"
            "  --load FILE        start from an llm.c checkpoint (v3, fp32); sets the model\n"
            "  --save FILE        write an llm.c checkpoint after training\n"
            "  --dry-run          memory only: allocations, frees, copies, NVTX ranges and (sim\n"
            "                     build) kernel launches with their bodies skipped, no compute\n"
            "                     (use with GPUMEM_SIM_BACKING=virtual on the virtual GPU)\n"
            "  --threads N        CPU threads for the ops (cpu-sim backend)  [OpenMP default]\n"
            "  --zero 0|1|2|3     several ranks (mpirun -np N; -B is the global batch): 0 data\n"
            "                     parallel, 1 AdamW state sharded, 2 gradients too, 3\n"
            "                     parameters too (gathered per layer)  [0]\n"
            "  --prefetch K       --zero 3: layers gathered ahead of the one computing  [1]\n"
            "  --trace-allocs     print 'alloc|free|host-alloc NAME BYTES' lines on stderr\n"
            "memory techniques (see train/README.md for each one's effect on the peak):\n"
            "  --recompute LIST   none|gelu|ln|attn|mlp|layer, comma-separated\n"
            "  --offload LIST     activations|optimizer|params, comma-separated (pinned host\n"
            "                     memory; params: the --zero 3 shards, brought in per layer)\n"
            "  --accum K          gradient accumulation over K micro-batches of B/K\n"
            "  --grad-none        free gradients after each step (set-to-none)\n"
            "  --act-dtype T      fp32|bf16 storage of saved activations  [fp32]\n"
            "  --param-dtype T    fp32|bf16 storage of the parameters (bf16: fp32 master\n"
            "                     weights for the update, fp32 copies per layer for the ops)\n"
            "  --leak             planted leak: keep one activation (the losses) per step\n"
            "  --seq-jitter       each step draws T uniformly in [T/2, T]\n"
            "  -h, --help         this text\n",
            prog);
}

static int parse_int(const char *flag, const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "train_gpt2: %s needs an integer in [%ld, %ld], got '%s'\n", flag, lo, hi,
                s ? s : "(nothing)");
        return 1;
    }
    *out = (int)v;
    return 0;
}

/* A finite number >= 0 (a learning rate, a weight decay). */
static int parse_nonneg(const char *flag, const char *s, float *out)
{
    char *end;
    errno = 0;
    const float v = s ? strtof(s, &end) : 0;
    if (!s || errno || *end || end == s || !isfinite(v) || !(v >= 0)) {
        fprintf(stderr, "train_gpt2: %s needs a finite non-negative number, got '%s'\n", flag,
                s ? s : "(nothing)");
        return 1;
    }
    *out = v;
    return 0;
}

static int parse_list(const char *flag, const char *s, const char *const *names, int n, int *out)
{
    if (!s) {
        fprintf(stderr, "train_gpt2: %s needs a value\n", flag);
        return 1;
    }
    char *copy = strdup(s), *save = NULL;
    int bits = 0, rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int i;
        for (i = 0; i < n; i++)
            if (!strcmp(tok, names[i])) break;
        if (i == n) {
            fprintf(stderr, "train_gpt2: %s: unknown choice '%s' (accepted:", flag, tok);
            for (int k = 0; k < n; k++) fprintf(stderr, " %s", names[k]);
            fprintf(stderr, ")\n");
            rc = 1;
            break;
        }
        bits |= i == 0 && !strcmp(names[0], "none") ? 0 : 1 << (i - (!strcmp(names[0], "none")));
    }
    free(copy);
    *out = bits;
    return rc;
}

/* ---- data -------------------------------------------------------------------------------- */
typedef struct {
    uint16_t *tok;
    size_t n, pos;
} data_t;

static int data_load(const char *path, int V, uint64_t seed, size_t need, data_t *d)
{
    if (!path) {
        d->n = need * 16 > 1 << 20 ? need * 16 : 1 << 20;
        d->tok = malloc(sizeof(uint16_t) * d->n);
        if (!d->tok) return 1;
        uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
        for (size_t i = 0; i < d->n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            d->tok[i] = (uint16_t)((s >> 33) % (uint64_t)V);
        }
        return 0;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "train_gpt2: cannot open data file %s: %s\n", path, strerror(errno));
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    int h[256] = {0};
    int is_shard = size >= 1024 && fread(h, sizeof(int), 256, f) == 256 && h[0] == SHARD_MAGIC;
    if (is_shard) {
        if (h[1] != 1) {
            fprintf(stderr, "train_gpt2: %s: token shard version %d, only version 1 is supported\n",
                    path, h[1]);
            fclose(f);
            return 1;
        }
        d->n = (size_t)(unsigned)h[2];
        if ((long)(1024 + 2 * d->n) > size) {
            fprintf(stderr, "train_gpt2: %s: header says %zu tokens but the file holds %ld\n",
                    path, d->n, (size - 1024) / 2);
            fclose(f);
            return 1;
        }
        d->tok = malloc(sizeof(uint16_t) * (d->n ? d->n : 1));
        if (!d->tok || fread(d->tok, sizeof(uint16_t), d->n, f) != d->n) {
            fprintf(stderr, "train_gpt2: %s: cannot read %zu tokens\n", path, d->n);
            fclose(f);
            return 1;
        }
        for (size_t i = 0; i < d->n; i++)
            if (d->tok[i] >= V) {
                fprintf(stderr, "train_gpt2: %s: token %u at %zu is outside the model's "
                                "vocabulary of %d (use a gpt2 model for GPT-2 token shards)\n",
                        path, d->tok[i], i, V);
                fclose(f);
                return 1;
            }
    } else {
        fseek(f, 0, SEEK_SET);
        d->n = (size_t)size;
        d->tok = malloc(sizeof(uint16_t) * (d->n ? d->n : 1));
        unsigned char *raw = malloc(d->n ? d->n : 1);
        if (!d->tok || !raw || fread(raw, 1, d->n, f) != d->n) {
            fprintf(stderr, "train_gpt2: %s: cannot read %zu bytes\n", path, d->n);
            free(raw);
            fclose(f);
            return 1;
        }
        for (size_t i = 0; i < d->n; i++) d->tok[i] = raw[i];
        free(raw);
        if (V < 256) {
            fprintf(stderr, "train_gpt2: raw text needs a vocabulary of 256, the model has %d\n", V);
            fclose(f);
            return 1;
        }
    }
    fclose(f);
    if (d->n < need) {
        fprintf(stderr, "train_gpt2: %s holds %zu tokens, a batch needs %zu (B*T+1): use a "
                        "larger file or smaller -B/-T\n", path, d->n, need);
        return 1;
    }
    return 0;
}

static void data_batch(data_t *d, int B, int T, int *tok, int *tgt)
{
    const size_t need = (size_t)B * T + 1;
    if (d->pos + need > d->n) d->pos = 0;
    for (size_t i = 0; i < (size_t)B * T; i++) {
        tok[i] = d->tok[d->pos + i];
        tgt[i] = d->tok[d->pos + i + 1];
    }
    d->pos += (size_t)B * T;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* OpenMP threads that spin between parallel regions make every munmap of the process (the
 * virtual GPU unmaps each freed tensor) wait for a TLB-shootdown interrupt on the spinning
 * CPU; on a VM that costs ~10x the tiny model's compute. Passive waiting avoids it at no
 * measurable cost for the large models. libgomp reads OMP_WAIT_POLICY when it is loaded,
 * before main, so the program re-executes itself once with it set — unless the user chose a
 * policy (then it is respected) or /proc/self/exe is unavailable (then it runs as is). */
static void prefer_passive_openmp(char **argv)
{
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    /* by its own path first, so that the process keeps its name (ps, top, pkill: the kernel names
     * it after the file executed, and /proc/self/exe would make it "exe") */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY"); /* exec failed: carry on with the default policy */
}

/* The flags into *po and the four names; -1 to go on, else the exit status (0 after --help). */
static int parse_flags(int argc, char **argv, gpt2_opts *po, const char **pmodel,
                       const char **pdata, const char **pload, const char **psave, int *pvocab,
                       int *pmax_T)
{
    gpt2_opts o = *po;
    const char *model = *pmodel, *data = NULL, *load = NULL, *save = NULL;
    int prefetch_set = 0;
    static const char *const rc_names[] = {"none", "gelu", "ln", "attn", "mlp", "layer"};
    static const char *const off_names[] = {"activations", "optimizer", "params"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
#define VAL() (i++, v)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout, argv[0]);
            return 0;
        } else if (!strcmp(a, "--model")) {
            model = VAL();
            if (!model) bad = 1, fprintf(stderr, "train_gpt2: --model needs a name\n");
        } else if (!strcmp(a, "--vocab")) {
            bad = parse_int(a, VAL(), 1, 65536, pvocab); /* tokens are uint16 */
        } else if (!strcmp(a, "--max-T")) {
            bad = parse_int(a, VAL(), 1, 1 << 20, pmax_T);
        } else if (!strcmp(a, "-B")) {
            bad = parse_int(a, VAL(), 1, 1 << 16, &o.B);
        } else if (!strcmp(a, "-T")) {
            bad = parse_int(a, VAL(), 1, 1 << 20, &o.T);
        } else if (!strcmp(a, "--steps")) {
            bad = parse_int(a, VAL(), 0, INT_MAX / 2, &o.steps);
        } else if (!strcmp(a, "--accum")) {
            bad = parse_int(a, VAL(), 1, 1 << 16, &o.accum);
        } else if (!strcmp(a, "--zero")) {
            bad = parse_int(a, VAL(), 0, 3, &o.zero);
        } else if (!strcmp(a, "--prefetch")) {
            bad = parse_int(a, VAL(), 0, 4096, &o.prefetch);
            prefetch_set = 1;
        } else if (!strcmp(a, "--threads")) {
            bad = parse_int(a, VAL(), 1, 1024, &o.threads);
        } else if (!strcmp(a, "--seed")) {
            int s;
            bad = parse_int(a, VAL(), 0, INT_MAX, &s);
            o.seed = (uint64_t)s;
        } else if (!strcmp(a, "--lr")) {
            bad = parse_nonneg(a, VAL(), &o.lr);
        } else if (!strcmp(a, "--wd")) {
            bad = parse_nonneg(a, VAL(), &o.wd);
        } else if (!strcmp(a, "--data")) {
            if (!(data = VAL())) bad = 1, fprintf(stderr, "train_gpt2: --data needs a file\n");
        } else if (!strcmp(a, "--load")) {
            if (!(load = VAL())) bad = 1, fprintf(stderr, "train_gpt2: --load needs a file\n");
        } else if (!strcmp(a, "--save")) {
            if (!(save = VAL())) bad = 1, fprintf(stderr, "train_gpt2: --save needs a file\n");
        } else if (!strcmp(a, "--dry-run")) {
            o.dry_run = 1;
        } else if (!strcmp(a, "--trace-allocs")) {
            o.trace_allocs = 1;
        } else if (!strcmp(a, "--recompute")) {
            bad = parse_list(a, VAL(), rc_names, 6, &o.recompute);
        } else if (!strcmp(a, "--offload")) {
            int bits = 0;
            bad = parse_list(a, VAL(), off_names, 3, &bits);
            o.offload_acts = bits & 1, o.offload_opt = (bits >> 1) & 1;
            o.offload_params = (bits >> 2) & 1;
        } else if (!strcmp(a, "--grad-none")) {
            o.grad_none = 1;
        } else if (!strcmp(a, "--act-dtype")) {
            const char *s = VAL();
            if (s && !strcmp(s, "bf16"))
                o.bf16 = 1;
            else if (!s || strcmp(s, "fp32"))
                bad = 1, fprintf(stderr, "train_gpt2: --act-dtype accepts fp32 or bf16\n");
        } else if (!strcmp(a, "--param-dtype")) {
            const char *s = VAL();
            if (s && !strcmp(s, "bf16"))
                o.param_bf16 = 1;
            else if (!s || strcmp(s, "fp32"))
                bad = 1, fprintf(stderr, "train_gpt2: --param-dtype accepts fp32 or bf16\n");
        } else if (!strcmp(a, "--leak")) {
            o.leak = 1;
        } else if (!strcmp(a, "--seq-jitter")) {
            o.seq_jitter = 1;
        } else {
            fprintf(stderr, "train_gpt2: unknown option '%s' (see --help)\n", a);
            bad = 1;
        }
        if (bad) return 1;
    }
    if (o.offload_params && o.zero != 3) {
        fprintf(stderr, "train_gpt2: --offload params keeps each rank's parameter shard on the "
                        "host: it needs --zero 3 (with one rank the shard is the whole "
                        "parameter)\n");
        return 1;
    }
    if (prefetch_set && o.zero != 3) {
        fprintf(stderr, "train_gpt2: --prefetch applies to --zero 3 (the parameters gathered "
                        "ahead), not to --zero %d\n", o.zero);
        return 1;
    }
    *po = o;
    *pmodel = model, *pdata = data, *pload = load, *psave = save;
    return -1;
}

int main(int argc, char **argv)
{
    if (train_backend_get()->uses_openmp) prefer_passive_openmp(argv);
    gpt2_opts o = {.B = 4,   .T = 64,     .steps = 10,  .accum = 1,
                   .lr = 3e-4f, .wd = 0.0f, .seed = 1337, .prefetch = 1};
    const char *model = "tiny", *data = NULL, *load = NULL, *save = NULL;
    int vocab = 0, max_T = 0; /* --vocab, --max-T: 0 = the model's own */
    const int parsed = parse_flags(argc, argv, &o, &model, &data, &load, &save, &vocab, &max_T);
    if (parsed >= 0) return parsed;
    /* Several ranks: MPI_Init under a launcher (train/dist.h), MPI_Finalize at exit. */
    if (dist_init(&argc, &argv)) return 1;
    atexit(dist_finalize);
    const int rank = dist_rank(), world = dist_world();
    gpt2_config cfg;
    if (load) {
        if (vocab || max_T) {
            fprintf(stderr, "train_gpt2: --vocab and --max-T cannot be given with --load (the "
                            "checkpoint sets the model)\n");
            return 1;
        }
        if (gpt2_read_checkpoint_config(load, &cfg)) return 1;
    } else {
        if (parse_model(model, &cfg)) return 1;
        if (vocab) cfg.V = vocab, cfg.Vp = padded_vocab(vocab);
        if (max_T) cfg.maxT = max_T;
    }
    if (o.T > cfg.maxT) {
        fprintf(stderr, "train_gpt2: -T %d exceeds the model's maximum sequence length %d\n", o.T,
                cfg.maxT);
        return 1;
    }
    if (o.B % world) {
        if (rank == 0)
            fprintf(stderr,
                    "train_gpt2: -B %d (the global batch) must be a multiple of the %d "
                    "ranks\n",
                    o.B, world);
        return 1;
    }
    const int B = o.B; /* the global batch; the model gets this rank's part */
    o.B = B / world;
    if (o.B % o.accum) {
        fprintf(stderr, "train_gpt2: --accum %d must divide -B %d (micro-batches of B/K%s)\n",
                o.accum, o.B, world > 1 ? ", B per rank" : "");
        return 1;
    }
    if (o.seq_jitter && o.T < 2) {
        fprintf(stderr, "train_gpt2: --seq-jitter needs -T of at least 2\n");
        return 1;
    }
    if (o.dry_run && save) {
        fprintf(stderr, "train_gpt2: --save has nothing to save in a --dry-run\n");
        return 1;
    }

    data_t d = {0};
    if (data_load(data, cfg.V, o.seed, (size_t)B * o.T + 1, &d)) {
        free(d.tok);
        return 1;
    }
    int *tok = malloc(sizeof(int) * (size_t)B * o.T), *tgt = malloc(sizeof(int) * (size_t)B * o.T);
    const train_backend *be = train_backend_get();
    gpt2 *m = gpt2_create(&cfg, &o, be);
    if (!m || !tok || !tgt) {
        free(d.tok), free(tok), free(tgt);
        gpt2_destroy(m);
        return 1;
    }
    int rc = gpt2_init_params(m, load);
    const int out = rank == 0; /* rank 0 prints the run; errors come from any rank */
    if (out) {
        printf("train_gpt2: backend %s, model %s (L %d, C %d, NH %d, V %d, Vp %d), %zu "
               "parameters, B %d, T %d%s",
               be->name, load ? load : model, cfg.L, cfg.C, cfg.NH, cfg.V, cfg.Vp,
               gpt2_num_params(m), B, o.T, o.dry_run ? ", dry run" : "");
        if (world > 1) printf(", %d ranks of B %d, collectives %s", world, o.B, dist_transport());
        if (o.zero) printf(", zero %d", o.zero);
        if (o.zero == 3) printf(", prefetch %d", o.prefetch);
        if (o.param_bf16) printf(", param-dtype bf16");
        printf("\n");
    }
    double total_ms = 0;
    long total_tok = 0;
    uint64_t js = o.seed ^ 0x5DEECE66Dull;
    for (int s = 1; s <= o.steps && rc == 0; s++) {
        int T = o.T;
        if (o.seq_jitter) {
            js = js * 6364136223846793005ull + 1442695040888963407ull;
            T = o.T / 2 + (int)((js >> 33) % (uint64_t)(o.T - o.T / 2 + 1));
        }
        data_batch(&d, B, T, tok, tgt);
        /* This rank's rows of the global batch: [rank B/N, (rank+1) B/N). */
        const size_t first = (size_t)rank * o.B * T;
        float loss = 0;
        const double t0 = now_ms();
        rc = gpt2_step(m, tok + first, tgt + first, T, &loss);
        const double ms = now_ms() - t0;
        if (rc) break;
        if (s > 1 || o.steps == 1) total_ms += ms, total_tok += (long)B * T;
        /* a dry run computes nothing: no loss to print (never "nan", which reads as a diverged run) */
        char ls[32];
        if (o.dry_run) snprintf(ls, sizeof ls, "-");
        else snprintf(ls, sizeof ls, "%.6f", loss);
        if (out)
            printf("step %d/%d loss %s ms %.2f tok/s %.0f peak %zu live %zu T %d\n", s, o.steps,
                   ls, ms, (double)B * T / (ms / 1e3), gpt2_peak_bytes(m), gpt2_live_bytes(m), T);
        fflush(stdout);
    }
    /* Rank 0 writes (the ranks' parameters agree); sharded fp32 values are gathered by all. */
    const int sharded = o.zero == 3 || (o.param_bf16 && o.zero);
    if (rc == 0 && save && (rank == 0 || sharded)) rc = gpt2_save(m, save);
    if (rc == 0 && out) {
        printf("summary: %d steps, %.2f ms/step, %.0f tok/s (steps after the first), peak %zu "
               "bytes (%.1f MiB)\n",
               o.steps, total_tok ? total_ms / (o.steps > 1 ? o.steps - 1 : 1) : 0.0,
               total_ms > 0 ? total_tok / (total_ms / 1e3) : 0.0, gpt2_peak_bytes(m),
               gpt2_peak_bytes(m) / 1048576.0);
    }
    /* Also after an error (an OOM, say): the peak reached is what a memory tool wants, and
     * the launches issued are what a launch-recording tool must have seen. */
    unsigned long long nk, nc, nm;
    gpt2_launch_counts(m, &nk, &nc, &nm);
    if (world > 1 && rc) {
        /* This rank failed and the others may be waiting in a collective: its own figures,
         * then the job ends. */
        printf("PEAK_RANK %d %zu bytes\nLAUNCHES %llu kernels %llu copies %llu memsets\n"
               "PEAK %zu bytes\n",
               rank, gpt2_peak_bytes(m), nk, nc, nm, gpt2_peak_bytes(m));
        fflush(stdout);
        dist_abort(rc);
    }
    unsigned long long peak = gpt2_peak_bytes(m), *peaks = calloc((size_t)world, sizeof *peaks);
    if (peaks) {
        dist_gather_host(peak, peaks);
        for (int r = 0; world > 1 && out && r < world; r++) {
            printf("PEAK_RANK %d %llu bytes\n", r, peaks[r]);
            if (peaks[r] > peak) peak = peaks[r];
        }
        free(peaks);
    }
    if (out) {
        printf("LAUNCHES %llu kernels %llu copies %llu memsets\n", nk, nc, nm);
        printf("PEAK %llu bytes\n", peak);
    }
    gpt2_destroy(m);
    free(d.tok), free(tok), free(tgt);
    return rc;
}
