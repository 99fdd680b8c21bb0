/* gm_args.c — the values of the command's options, read by one set of rules in every command.
 *
 * strtol and friends accept what a person did not mean: a leading '-' that wraps to a huge
 * unsigned number, spaces, a trailing "x", "inf" and "nan", 1e308 that prints as inf in JSON,
 * and a long that a cast to int cuts (4294967297 -> 1). Each option read here is refused with
 * one line instead, naming the option, the accepted range and what was given. */
#include "snapshot/read/gm.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int gm_arg_uint(const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
    if (!v || !isdigit((unsigned char)v[0])) return -1; /* no sign, no space, no empty string */
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end || errno == ERANGE || n < lo || n > hi) return -1;
    *out = n;
    return 0;
}

int gm_arg_real(const char *v, double lo, double hi, double *out) {
    if (!v || !(isdigit((unsigned char)v[0]) || (v[0] == '.' && isdigit((unsigned char)v[1])))) return -1;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    /* isdigit first: no "inf", "nan", "0x1p3" beyond what a person types, no sign */
    if (*end || errno == ERANGE || !isfinite(x) || x < lo || x > hi || strpbrk(v, "xXpP")) return -1;
    *out = x;
    return 0;
}

int gm_usage(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gpumem %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(gpumem %s --help tells more)\n", cmd);
    va_end(ap);
    return GM_EXIT_USAGE;
}

int gm_arg_top(const char *cmd, const char *v, int *top) {
    uint64_t n;
    if (gm_arg_uint(v, 1, GM_TOP_MAX, &n) != 0)
        return gm_usage(cmd, "--top needs a number from 1 to %d, got '%s'", GM_TOP_MAX, v ? v : "");
    *top = (int)n;
    return 0;
}

int gm_opt_is_device(const char *a) { return strcmp(a, "--device") == 0 || strncmp(a, "--device=", 9) == 0; }

int gm_arg_device(const char *cmd, int argc, char **argv, int *i, int *dev) {
    const char *a = argv[*i];
    const char *v = a[8] == '=' ? a + 9 : gm_opt_value(argc, argv, i);
    uint64_t n;
    if (gm_arg_uint(v, 0, GM_DEVICES - 1, &n) != 0)
        return gm_usage(cmd, "--device needs a device number from 0 to %d (gpumem report lists the devices), got '%s'",
                        GM_DEVICES - 1, v ? v : "");
    *dev = (int)n;
    return 0;
}

/* One file named twice ("run.db run.db", "run.db ./run.db", a hard link): not two ranks. */
int gm_args_same_file(const char *cmd, const char *const *paths, size_t n) {
    struct stat *st = calloc(n + 1, sizeof *st);
    if (!st) return 0;
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++) {
        if (stat(paths[i], &st[i]) != 0) continue; /* the load says what is wrong with it */
        for (size_t j = 0; j < i && !bad; j++)
            if (st[j].st_dev == st[i].st_dev && st[j].st_ino == st[i].st_ino && st[i].st_ino) {
                fprintf(stderr, "gpumem %s: %s%s%s is one database given twice: each rank's recording once\n"
                                "(gpumem %s --help tells more)\n",
                        cmd, paths[j], strcmp(paths[i], paths[j]) ? " and " : "", strcmp(paths[i], paths[j]) ? paths[i] : "",
                        cmd);
                bad = 1;
            }
    }
    free(st);
    return bad;
}

/* An option-like argument: "--" (the separator before a command), "--name", "-x". "-" (standard
 * input or output), "-5" (a number, refused by its own check) and "-- text" (an SQL comment) are
 * values. */
static int option_like(const char *a) {
    if (a[0] != '-') return 0;
    if (a[1] == '-') return a[2] == 0 || isalpha((unsigned char)a[2]);
    return isalpha((unsigned char)a[1]);
}

/* The options of each command that take a value. "--format|-f": one option spelled two ways; a
 * leading '!': the next argument is the value even when it looks like an option (advise --try
 * '--recompute mlp'). What is not listed is a flag, or unknown (the command refuses it). A
 * command that gains an option with a value adds it here; cli_small_wrongs.sh's table gives
 * every option here twice. */
static const struct {
    const char *cmd;
    int operands_end; /* the first operand starts what is not gpumem's: record's command */
    const char *valued[16];
} valued_options[] = {
    {"record", 1, {"-o", "--allocator"}},
    {"report", 0, {"--top", "--frames", "--device"}},
    {"leaks", 0, {"--top", "--frames", "--device"}},
    {"sql", 0, {"-c"}},
    {"export", 0, {"--format|-f", "--at", "--what", "--view", "-o", "--device"}},
    {"uses", 0, {"--name", "--id", "--step", "--top", "--device"}},
    {"import", 0, {"-o"}},
    {"flamegraph", 0, {"--countname", "--title", "--width"}},
    {"diff", 0, {"--top", "--frames", "--fail-if-peak-grows", "--device"}},
    {"advise", 0, {"--budget", "--link", "--gpu", "!--try", "--ranks", "--zero", "--prefetch", "--top", "--device"}},
    {"frag", 0, {"--top", "--device"}},
    {"tune", 0, {"--objective", "--limit", "--top", "--device"}},
    {"viz", 0, {"-o", "--with", "--device"}},
};

/* The option spelled a[0..len) in the list: its first spelling (what the error names), and
 * whether it takes the next argument whatever it looks like. NULL when not listed. */
static const char *valued_name(const char *const *valued, const char *a, size_t len, int *raw, size_t *namelen) {
    for (size_t k = 0; k < 16 && valued[k]; k++) {
        const char *s = valued[k];
        *raw = s[0] == '!';
        const char *first = s + *raw;
        for (const char *p = first; *p;) {
            size_t n = strcspn(p, "|");
            if (n == len && strncmp(p, a, len) == 0) {
                *namelen = strcspn(first, "|");
                return first;
            }
            p += n + (p[n] == '|');
        }
    }
    return NULL;
}

int gm_args_repeats(const char *cmd, int argc, char **argv) {
    size_t c = 0;
    while (c < sizeof valued_options / sizeof valued_options[0] && strcmp(valued_options[c].cmd, cmd) != 0) c++;
    if (c == sizeof valued_options / sizeof valued_options[0]) return 0;
    const char *name[64], *value[64];
    size_t n = 0;
    for (int i = 1; i < argc && n < 64; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) break; /* what follows is a command's, or a value of --try's */
        if (!option_like(a)) {
            if (valued_options[c].operands_end) break;
            continue;
        }
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        int raw;
        size_t nl;
        const char *opt = valued_name(valued_options[c].valued, a, eq ? (size_t)(eq - a) : strlen(a), &raw, &nl);
        if (!opt) continue; /* a flag: given twice, it says the same thing twice */
        const char *v = eq ? eq + 1
                        : raw ? (i + 1 < argc && strcmp(argv[i + 1], "--") != 0 ? argv[i + 1] : NULL)
                              : gm_opt_peek(argc, argv, i);
        if (!v) continue; /* the command says the value is missing */
        if (!eq) i++;
        for (size_t k = 0; k < n; k++)
            if (name[k] == opt && strcmp(value[k], v) != 0)
                return gm_usage(cmd, "%.*s given twice, as '%s' and '%s': give it once", (int)nl, opt, value[k], v);
        name[n] = opt, value[n++] = v;
    }
    return 0;
}

const char *gm_opt_peek(int argc, char **argv, int i) {
    return i + 1 < argc && !option_like(argv[i + 1]) ? argv[i + 1] : NULL;
}

const char *gm_opt_value(int argc, char **argv, int *i) {
    const char *v = gm_opt_peek(argc, argv, *i);
    if (v) ++*i;
    return v;
}
