/* rec_settings.c — every GPUMEM_* setting gpumem reads, checked by one parser.
 *
 * Two programs read these settings: libgpumem.so, at the first CUDA call of the program (a bad
 * value turns gpumem off for the whole run, with one line naming it: the program still runs, as
 * an LD_PRELOAD user expects), and `gpumem record`, before it starts the program (a bad value
 * is a usage error, exit 2: a run that would record nothing is not started). Both call
 * rec_settings_read, so they can never disagree on what is bad. It lives in record/ because
 * both link it: the command links record/ but never preload/.
 *
 * Numbers are whole: digits only (GPUMEM_CONF's keys keep PyTorch's own forms, alloc/config.c).
 * strtol and strtoull read "-5" (wrapped to 2^64 - 5 by strtoull), " 16", "16abc" and "0x10" as
 * numbers; each of them is a value the user did not mean, so each is refused. */
#include "snapshot/record/rec_internal.h" /* REC_MAX_FRAMES */
#include "snapshot/record/rec_settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

/* Every GPUMEM_* name gpumem knows, so that a misspelled one (GPUMEM_LIMIT with a letter left out) is said instead of
 * silently ignored. Not only the user's settings: a name one of gpumem's own processes sets for
 * another, a test hook, the virtual GPU's knobs, and the build and test scripts' own inputs
 * (tests/run.sh keeps them exported) must not be called unknown either. A name ending in '*' is a
 * prefix. tests/integration/cli_small_wrongs.sh greps the tree for every GPUMEM_ name and checks
 * it is here, so this list cannot drift from the code. */
static const char *const rec_known_names[] = {
    /* known-names: begin */
    /* the user's settings (README.md) */
    "GPUMEM_MODE", "GPUMEM_CONF", "GPUMEM_LIMIT", "GPUMEM_DB", "GPUMEM_STACKS", "GPUMEM_RING",
    "GPUMEM_RING_FULL", "GPUMEM_RING_WAIT_US", "GPUMEM_QUIET", "GPUMEM_TSC", "GPUMEM_NAMES",
    "GPUMEM_NVTX", "GPUMEM_NVTX_CHAIN", "GPUMEM_SIGNALS", "GPUMEM_FORK", "GPUMEM_USES", "GPUMEM_PYTHON",
    "GPUMEM_STATS", "GPUMEM_TORCH_OPS", "GPUMEM_TORCH_MAX_ENTRIES", "GPUMEM_SWEEP", "GPUMEM_SYM_VERIFY",
    /* the virtual GPU's */
    "GPUMEM_SIM_*",
    /* set by gpumem record (and its Python side) for the processes it runs */
    "GPUMEM_DB_FORCE", "GPUMEM_RECORD_RUN", "GPUMEM_RECORD_STATUS", "GPUMEM_TORCH_ALLOCATOR",
    "GPUMEM_TORCH_C_HOOKS", "GPUMEM_TORCH_GLOBAL_HOOKS", "GPUMEM_TORCH_HISTORY", "GPUMEM_TORCH_HOOKS",
    "GPUMEM_TORCH_PID", "GPUMEM_TORCH_PYTORCH_HISTORY", "GPUMEM_TORCH_SNAPSHOT", "GPUMEM_TORCH_TRACE",
    /* set by libgpumem.so for the processes its program starts (rec_note_start) */
    "GPUMEM_RECORD_ROOT",
    /* debugging and test hooks */
    "GPUMEM_ADVISE_DUMP", "GPUMEM_CATEGORY_DUMP", "GPUMEM_DEBUG_*", "GPUMEM_TEST_*",
    /* the build and test scripts' inputs */
    "GPUMEM_TORCH", "GPUMEM_TORCH_PY", "GPUMEM_TORCH_VENV", "GPUMEM_TORCH_VERSION", "GPUMEM_VERSION",
    "GPUMEM_CCACHE", "GPUMEM_VIZ_PYTHON", "GPUMEM_FUZZ*", "GPUMEM_BENCH_*", "GPUMEM_DIFF_*", "GPUMEM_GPU_*",
    /* known-names: end */
};

int rec_edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 47 || m > 47) return 99;
    int dp[48][48];
    for (size_t i = 0; i <= n; i++) dp[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) dp[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int v = dp[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (dp[i - 1][j] + 1 < v) v = dp[i - 1][j] + 1;
            if (dp[i][j - 1] + 1 < v) v = dp[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && dp[i - 2][j - 2] + 1 < v)
                v = dp[i - 2][j - 2] + 1; /* an adjacent swap is one edit (two letters swapped) */
            dp[i][j] = v;
        }
    return dp[n][m];
}

int rec_settings_unknown(char *msg, size_t msgsz) {
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "GPUMEM_", 7) != 0) continue;
        size_t len = strcspn(*e, "=");
        char name[128];
        if (len >= sizeof name) len = sizeof name - 1;
        memcpy(name, *e, len);
        name[len] = 0;
        const char *best = NULL;
        int known = 0, bd = 3; /* at most 2 edits away is a likely typo */
        for (size_t k = 0; k < sizeof rec_known_names / sizeof *rec_known_names && !known; k++) {
            const char *kn = rec_known_names[k];
            size_t kl = strlen(kn);
            if (kn[kl - 1] == '*') {
                known = strncmp(name, kn, kl - 1) == 0;
                continue;
            }
            int d = rec_edit_distance(name, kn);
            known = d == 0;
            if (d < bd) bd = d, best = kn;
        }
        if (known) continue;
        if (best)
            snprintf(msg, msgsz, "unknown setting %s (did you mean %s?)", name, best);
        else
            snprintf(msg, msgsz, "unknown setting %s (gpumem's settings are listed in README.md)", name);
        return 1;
    }
    return 0;
}

long rec_env_num(const char *name, long dflt, long lo, long hi, int *bad, char *err, size_t errsz) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    int digits = v[strspn(v, "0123456789")] == 0;
    char *end;
    errno = 0;
    long x = digits ? strtol(v, &end, 10) : 0;
    if (!digits || errno || x < lo || x > hi) {
        if (bad && !*bad && err)
            snprintf(err, errsz, "%s=%s is not a number from %ld to %ld (digits only)", name, v, lo, hi);
        if (bad) *bad = 1;
        return dflt;
    }
    return x;
}

int rec_check_env(char *err, size_t errsz) {
    int bad = 0;
    rec_env_num("GPUMEM_STACKS", 16, 0, REC_MAX_FRAMES, &bad, err, errsz);
    rec_env_num("GPUMEM_RING", 65536, 2, 1L << 26, &bad, err, errsz);
    rec_env_num("GPUMEM_RING_WAIT_US", 200, 0, 1000000, &bad, err, errsz);
    rec_env_num("GPUMEM_QUIET", 0, 0, 1, &bad, err, errsz);
    rec_env_num("GPUMEM_TSC", 1, 0, 1, &bad, err, errsz);
    rec_env_num("GPUMEM_NAMES", 1, 0, 1, &bad, err, errsz);
    rec_env_num("GPUMEM_NVTX", 1, 0, 1, &bad, err, errsz);
    rec_env_num("GPUMEM_SIGNALS", 1, 0, 1, &bad, err, errsz);
    const char *f = getenv("GPUMEM_FORK");
    if (!bad && f && *f && strcmp(f, "off") && strcmp(f, "record"))
        snprintf(err, errsz, "GPUMEM_FORK=%s: expected record or off", f), bad = 1;
    const char *r = getenv("GPUMEM_RING_FULL");
    if (!bad && r && *r && strcmp(r, "wait") && strcmp(r, "drop"))
        snprintf(err, errsz, "GPUMEM_RING_FULL=%s: expected wait (lossless) or drop", r), bad = 1;
    return bad ? -1 : 0;
}

int rec_settings_read(rec_settings *s, alloc_config_t *conf, char *err, size_t errsz) {
    memset(s, 0, sizeof *s);
    s->limit = ALLOC_NO_LIMIT;
    s->mode = REC_SET_REPLACE;
    s->uses = REC_SET_USES_ON;
    alloc_config_default(conf);
    const char *m = getenv("GPUMEM_MODE");
    if (m && *m) {
        if (!strcasecmp(m, "replace")) s->mode = REC_SET_REPLACE;
        else if (!strcasecmp(m, "record")) s->mode = REC_SET_RECORD;
        else if (!strcasecmp(m, "off")) {
            s->mode = REC_SET_OFF; /* on purpose: the other settings do not matter */
            return 0;
        } else {
            snprintf(err, errsz, "GPUMEM_MODE: unknown mode '%s' (accepted: replace, record, off)", m);
            return -1;
        }
    }
    const char *py = getenv("GPUMEM_PYTHON");
    if (py && *py && strcmp(py, "0") && strcmp(py, "1")) {
        snprintf(err, errsz, "GPUMEM_PYTHON: unknown value '%s' (accepted: 0, 1)", py);
        return -1;
    }
    const char *u = getenv("GPUMEM_USES");
    if (u && *u) {
        if (!strcmp(u, "0")) s->uses = REC_SET_USES_OFF;
        else if (!strcmp(u, "1")) s->uses = REC_SET_USES_ON;
        else if (!strcasecmp(u, "timed")) s->uses = REC_SET_USES_TIMED;
        else {
            snprintf(err, errsz, "GPUMEM_USES: unknown value '%s' (accepted: 0, 1, timed)", u);
            return -1;
        }
    }
    const char *c = getenv("GPUMEM_CONF");
    if (c && *c && alloc_config_parse(conf, c, err, errsz) != ALLOC_OK) return -1;
    const char *lim = getenv("GPUMEM_LIMIT");
    if (lim && *lim) {
        /* read as GPUMEM_CONF's limit key reads it: 0 is 0 bytes, none is no limit */
        if (strcmp(lim, "none") && (alloc_parse_size(lim, &s->limit) != ALLOC_OK || s->limit == ALLOC_NO_LIMIT)) {
            snprintf(err, errsz, "GPUMEM_LIMIT: bad size '%s' (expected " ALLOC_SIZE_RULE "; 0 is 0 bytes; none, "
                                 "or unset, for no limit)", lim);
            return -1;
        }
        s->limit_set = 1;
        conf->limit = s->limit;
    }
    int bad = 0;
    s->torch_max_entries =
        (size_t)rec_env_num("GPUMEM_TORCH_MAX_ENTRIES", 2000000, 1, 1L << 32, &bad, err, errsz);
    if (bad) return -1;
    return rec_check_env(err, errsz);
}
