/* config.c — GPUMEM_CONF parsing, presets, size rounding.
 *
 * Syntax is PYTORCH_CUDA_ALLOC_CONF's: `key:value,key:value`, list values in brackets
 * (`roundup_power2_divisions:[256:1,512:2,>:8]`). Keys are applied left to right onto a copy of
 * the caller's config, which is only written back when the whole string parsed: a bad string
 * never leaves a half-applied config. Unknown keys and bad values are errors naming the key and
 * listing what is accepted (never silently ignored).
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/internal.h"

const char *const alloc_preset_names[] = {"gpumem", "pytorch", "pytorch-expandable", "nocache",
                                          NULL};

void alloc_config_default(alloc_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->policy = ALLOC_POLICY_GPUMEM;
    c->expandable_segments = true;
    c->per_stream_pools = true;
    c->max_split_size = SIZE_MAX;
    c->gc_threshold = 0.0;
    c->handle_size = 0;
    c->handle_size_small = 0;
    c->release_threshold = SIZE_MAX;
    c->limit = ALLOC_NO_LIMIT;
    c->release_before_grow = true;
    c->max_non_split_rounding = A_LARGE_BUFFER;
    c->large_segment = A_LARGE_BUFFER;
    c->memory_fraction = -1.0;
}

int alloc_config_preset(alloc_config_t *c, const char *name)
{
    if (!name) return ALLOC_ERR_CONFIG;
    alloc_config_t n;
    alloc_config_default(&n);
    if (!strcmp(name, "gpumem")) {
        /* defaults */
    } else if (!strcmp(name, "pytorch")) {
        /* the page sizes PyTorch uses if expandable_segments:True is set on top */
        n.policy = ALLOC_POLICY_PYTORCH;
        n.expandable_segments = false;
        n.handle_size = A_LARGE_BUFFER;
        n.handle_size_small = A_SMALL_BUFFER;
        n.release_before_grow = false;
    } else if (!strcmp(name, "pytorch-expandable")) {
        /* PyTorch maps 2 MiB pages in small-pool segments and 20 MiB pages in large ones. */
        n.policy = ALLOC_POLICY_PYTORCH;
        n.expandable_segments = true;
        n.handle_size = A_LARGE_BUFFER;
        n.handle_size_small = A_SMALL_BUFFER;
        n.release_before_grow = false; /* PyTorch unmaps only on OOM and empty_cache */
    } else if (!strcmp(name, "nocache")) {
        n.policy = ALLOC_POLICY_NOCACHE;
        n.expandable_segments = false;
        n.release_before_grow = false;
    } else {
        return ALLOC_ERR_CONFIG;
    }
    *c = n;
    return ALLOC_OK;
}

/* ---- sizes ---------------------------------------------------------------------------------- */

int alloc_parse_size(const char *s, size_t *out)
{
    /* ALLOC_SIZE_RULE, to the letter: nothing before the digits (a space, a sign) or after the
     * unit, and a fraction only with a unit (0.9 bytes is not a size; 1.5G is 1610612736) */
    if (!s || !isdigit((unsigned char)*s)) return ALLOC_ERR_CONFIG;
    const char *p = s;
    unsigned long long v = 0;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (ULLONG_MAX - d) / 10) return ALLOC_ERR_CONFIG;
        v = v * 10 + d;
    }
    unsigned long long fnum = 0, fden = 1; /* the fraction: fnum / fden */
    int frac = *p == '.';
    if (frac) {
        p++;
        if (!isdigit((unsigned char)*p)) return ALLOC_ERR_CONFIG; /* "1." */
        /* digits past the 18th are below a byte of any unit up to T (2^40 / 10^18) */
        for (; isdigit((unsigned char)*p); p++)
            if (fden <= 100000000000000000ULL) fnum = fnum * 10 + (unsigned)(*p - '0'), fden *= 10;
    }
    unsigned shift = 0;
    switch (toupper((unsigned char)*p)) {
    case 'K':
        shift = 10;
        break;
    case 'M':
        shift = 20;
        break;
    case 'G':
        shift = 30;
        break;
    case 'T':
        shift = 40;
        break;
    default:
        break;
    }
    if (shift) {
        p++;
        if (*p == 'i' || *p == 'I') p++;
    }
    if (*p == 'B' || *p == 'b') p++;
    if (*p || (frac && !shift)) return ALLOC_ERR_CONFIG;
    if (v > (SIZE_MAX >> shift) - 1) return ALLOC_ERR_CONFIG;
    size_t r = (size_t)v << shift;
    if (fnum) r += (size_t)(((unsigned __int128)fnum << shift) / fden); /* whole bytes, rounded down */
    *out = r;
    return ALLOC_OK;
}

/* Round a request up: 512 B minimum, then either the power-of-two divisions for its interval or
 * plain 512 B multiples. PyTorch's round_size, to the letter (its size_t arithmetic included):
 * with d > 1 divisions and a size above 512 * d, a size between 2^k and 2^(k+1) rounds up to a
 * multiple of 2^k / d (a power of two stays; a step of 0, from a d above 2^k, gives 2^(k+1)); d
 * of 0 or 1 means 512 B multiples. */
size_t alloc_round_size(const alloc_config_t *cfg, size_t size)
{
    if (!cfg || size == 0) return 0;
    return a_round_size(cfg, size);
}

/* ---- the parser ------------------------------------------------------------------------------
 *
 * PyTorch 2.14.1's grammar, read from what its own parser accepts and refuses (driven key by key
 * and form by form in tests/torch/torch_conf_keys.sh):
 *   - the text is cut into tokens at ',', ':', '[' and ']' (each its own token), every white-space
 *     character dropped, also inside words ("max_split _size_mb" is max_split_size_mb);
 *   - a key is followed by a separator and a value: the separator is only required to EXIST (any
 *     token will do: "max_split_size_mb,128" is accepted), and so is the one after each value
 *     ("max_split_size_mb:128:4" reads '4' as the next key); in a list the separators are not
 *     looked at either ("[256,1]" is [256:1]);
 *   - numbers are read as C's strtoull / strtod read them (std::stoull, std::stod): hexadecimal
 *     floats, a '+'; no digits at all, or a value out of range (ERANGE), is refused. PyTorch also
 *     takes a prefix ("128abc" is 128) and a '-' ("-5" wraps to 2^64 - 5: max_split_size_mb:-5 is
 *     "no limit"): numbers the user did not write, which gpumem refuses (misread());
 *   - large_segment_size_mb is applied before every other key, wherever it stands (the last one
 *     wins), since it is the lower bound of max_split_size_mb and max_non_split_rounding_mb.
 * The 20 keys PyTorch 2.14.1 knows are accepted with exactly its rules; those gpumem does not
 * model are remembered (alloc_config_unmodelled) so that the caller says so once. gpumem's own
 * keys (preset, per_stream_pools, handle_size, ...) follow the same token rules and keep their own
 * values. */

static const char ACCEPTED_KEYS[] =
    "PyTorch's: expandable_segments, max_split_size_mb, max_non_split_rounding_mb, "
    "large_segment_size_mb, roundup_power2_divisions, garbage_collection_threshold, "
    "per_process_memory_fraction, backend, release_lock_on_{cuda,hip}malloc, "
    "pinned_use_{cuda,hip}_host_register, pinned_{num_register_threads, use_background_threads, "
    "reserve_segment_size_mb, max_cached_size_mb, max_round_threshold_mb, free_catch_all}, "
    "graph_capture_record_stream_reuse, throw_on_cudamalloc_oom; gpumem's: preset, "
    "per_stream_pools, handle_size, handle_size_small, release_threshold, release_before_grow, "
    "limit, free_sync, free_host_sync, guard";

/* PyTorch's keys gpumem accepts and does not model: bit i of alloc_config_t.unmodelled */
static const char *const UNMODELLED[] = {
    "backend:cudaMallocAsync",         "release_lock_on_cudamalloc",
    "release_lock_on_hipmalloc",       "pinned_use_cuda_host_register",
    "pinned_use_hip_host_register",    "pinned_num_register_threads",
    "pinned_use_background_threads",   "pinned_reserve_segment_size_mb",
    "pinned_max_cached_size_mb",       "pinned_max_round_threshold_mb",
    "pinned_free_catch_all",           "graph_capture_record_stream_reuse",
    "throw_on_cudamalloc_oom",         NULL};

static int errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        int n = snprintf(err, errlen, "GPUMEM_CONF: ");
        if (n < 0) n = 0;
        if ((size_t)n < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
        /* the message echoes user text: keep it one printable line whatever that text holds */
        for (char *c = err; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = '?';
    }
    return ALLOC_ERR_CONFIG;
}

/* gpumem's own boolean keys also take true/false/1/0 */
static bool parse_bool(const char *v, bool *out)
{
    if (!strcmp(v, "True") || !strcmp(v, "true") || !strcmp(v, "1")) {
        *out = true;
        return true;
    }
    if (!strcmp(v, "False") || !strcmp(v, "false") || !strcmp(v, "0")) {
        *out = false;
        return true;
    }
    return false;
}

/* PyTorch's: exactly True or False */
static bool torch_bool(const char *v, bool *out)
{
    if (!strcmp(v, "True")) return *out = true, true;
    if (!strcmp(v, "False")) return *out = false, true;
    return false;
}

/* std::stoull: no digits or ERANGE refused. What PyTorch takes and reads as another number
 * (a '-' wrapped around to 2^64 - N, characters after the digits dropped) is refused too, by
 * misread() before the value gets here. */
static bool torch_u64(const char *v, unsigned long long *out)
{
    char *end;
    errno = 0;
    *out = strtoull(v, &end, 10);
    return end != v && errno != ERANGE;
}

/* std::stod: no number or ERANGE refused (hexadecimal floats are read whole; inf and nan fail
 * the keys' ranges) */
static bool torch_double(const char *v, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(v, &end);
    return end != v && errno != ERANGE;
}

/* Why PyTorch's std::stoull / std::stod would read v as a number the user did not write, or NULL:
 * an integer with a '-' ("-5" is 2^64 - 5: max_split_size_mb:-5 is "no limit"), or a number with
 * characters after it ("128abc" is 128, "0x80" is 0). gpumem refuses these where PyTorch takes
 * them (the only strings the two read differently; tests/torch/torch_conf_keys.sh). */
static const char *misread(const char *v, bool dbl)
{
    char *end;
    errno = 0;
    if (dbl)
        (void)strtod(v, &end);
    else
        (void)strtoull(v, &end, 10);
    if (end == v || errno == ERANGE) return NULL; /* not a number at all: the key's own message */
    if (!dbl && strchr(v, '-')) return "a negative count, which PyTorch wraps around to a huge one";
    if (*end) return "characters after the number, which PyTorch drops";
    return NULL;
}

static int misread_err(char *err, size_t errlen, const char *k, const char *v, const char *why)
{
    return errf(err, errlen,
                "bad value '%s' for %s: %s (PyTorch would misread it; gpumem refuses it): write "
                "the number alone",
                v, k, why);
}

static bool is_pow2(unsigned long long v)
{
    return v && !(v & (v - 1));
}

/* PyTorch keeps 16 division counts, one per power-of-two interval of sizes from [1, 2) MiB to
 * [32, 64) GiB; a size below 1 MiB uses the first, one of 64 GiB or more the last. rp2_div keeps
 * one per power of two of bytes, so interval k of PyTorch is rp2_div[20 + k], and the intervals
 * below and above copy the first and the last. */
#define RP2_PT_FIRST 20u /* log2(1 MiB) */
#define RP2_PT_N 16u

static void rp2_expand(uint64_t *div, const uint64_t pt[RP2_PT_N])
{
    for (unsigned lg = 0; lg < ALLOC_RP2_INTERVALS; lg++) {
        unsigned k = lg < RP2_PT_FIRST ? 0 : lg - RP2_PT_FIRST;
        div[lg] = pt[k < RP2_PT_N ? k : RP2_PT_N - 1];
    }
}

/* The tokens of a configuration string (PyTorch's ConfigTokenizer). */
typedef struct ctoks {
    char *buf;   /* the tokens, each NUL-terminated */
    char **t;
    size_t n;
} ctoks;

static int tokenize(const char *conf, ctoks *k)
{
    size_t len = strlen(conf);
    k->n = 0;
    k->buf = malloc(2 * len + 1);
    k->t = malloc((len + 1) * sizeof(*k->t));
    if (!k->buf || !k->t) return -1;
    char *o = k->buf;
    bool open = false; /* a word token is being written */
    for (const char *p = conf; *p; p++) {
        char ch = *p;
        if (ch == ',' || ch == ':' || ch == '[' || ch == ']') {
            if (open) *o++ = 0, open = false;
            k->t[k->n++] = o;
            *o++ = ch;
            *o++ = 0;
        } else if (!isspace((unsigned char)ch)) {
            if (!open) k->t[k->n++] = o, open = true;
            *o++ = ch;
        }
    }
    if (open) *o++ = 0;
    return 0;
}

static void tokens_free(ctoks *k)
{
    free(k->buf);
    free(k->t);
}

/* roundup_power2_divisions as a list, tokens from t[*i] = "[": PyTorch's walk: each entry is
 * KEY SEP VALUE (SEP any token), entries are followed by one more token unless "]" comes next;
 * key K MiB (a power of two) sets the interval [K, 2K) MiB (clamped to PyTorch's 16), the first
 * key also every interval below it, ">" every interval after the last key; intervals nothing
 * reaches keep their value. *i ends on the "]". */
static int parse_rp2_list(const ctoks *k, size_t *i, uint64_t pt[RP2_PT_N], char *err,
                          size_t errlen)
{
    size_t j = *i;
    unsigned last = 0;
    bool first = true;
    while (++j < k->n && strcmp(k->t[j], "]")) {
        const char *key = k->t[j];
        if (j + 2 >= k->n)
            return errf(err, errlen,
                        "roundup_power2_divisions: the list entry '%s' has no value (write "
                        "[256:1,512:2,>:8])",
                        key);
        j += 2;
        unsigned long long dv, mb = 0;
        bool more = strcmp(key, ">") != 0;
        const char *why = more ? misread(key, false) : NULL;
        if (why) return misread_err(err, errlen, "roundup_power2_divisions", key, why);
        if ((why = misread(k->t[j], false)))
            return misread_err(err, errlen, "roundup_power2_divisions", k->t[j], why);
        if (more && !torch_u64(key, &mb))
            return errf(err, errlen,
                        "bad size key '%s' in roundup_power2_divisions (accepted: MiB sizes that "
                        "are powers of two, or '>')",
                        key);
        if (!torch_u64(k->t[j], &dv) || (dv != 0 && !is_pow2(dv)))
            return errf(err, errlen,
                        "bad division '%s' in roundup_power2_divisions (accepted: 0 or a power "
                        "of two)",
                        k->t[j]);
        if (!more) {
            for (unsigned x = last + 1; x < RP2_PT_N; x++)
                pt[x] = dv;
        } else {
            if (!is_pow2(mb))
                return errf(err, errlen,
                            "bad size key '%s' in roundup_power2_divisions (accepted: MiB sizes "
                            "that are powers of two, or '>')",
                            key);
            unsigned x = (unsigned)__builtin_ctzll(mb);
            if (x > RP2_PT_N - 1) x = RP2_PT_N - 1;
            if (first)
                for (unsigned y = 0; y < x; y++)
                    pt[y] = dv;
            first = false;
            pt[x] = dv;
            last = x;
        }
        if (j + 1 < k->n && strcmp(k->t[j + 1], "]")) j++;
    }
    if (j >= k->n)
        return errf(err, errlen, "unterminated list in roundup_power2_divisions (missing ']')");
    *i = j;
    return ALLOC_OK;
}

static int large_segment_key(alloc_config_t *c, const char *v, char *err, size_t errlen)
{
    unsigned long long mb;
    const char *why = misread(v, false);
    if (why) return misread_err(err, errlen, "large_segment_size_mb", v, why);
    if (!torch_u64(v, &mb) || mb <= (A_MIN_LARGE_ALLOC >> 20))
        return errf(err, errlen,
                    "bad value '%s' for large_segment_size_mb (accepted: an integer number of "
                    "MiB greater than 10)",
                    v);
    size_t old = c->large_segment;
    c->large_segment = mb > (SIZE_MAX >> 21) ? (SIZE_MAX >> 21) << 20 : (size_t)mb << 20;
    /* PyTorch resets max_non_split_rounding to the large segment size */
    if (c->max_non_split_rounding == old) c->max_non_split_rounding = c->large_segment;
    /* ... and maps large-pool expandable segments in pages of that size */
    if (c->policy == ALLOC_POLICY_PYTORCH) c->handle_size = c->large_segment;
    return ALLOC_OK;
}

static int unmodelled(alloc_config_t *c, const char *name)
{
    for (unsigned i = 0; UNMODELLED[i]; i++)
        if (!strcmp(UNMODELLED[i], name)) c->unmodelled |= 1u << i;
    return ALLOC_OK;
}

static bool known_key(const char *k)
{
    static const char *const keys[] = {
        "expandable_segments", "max_split_size_mb", "max_non_split_rounding_mb",
        "large_segment_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
        "per_process_memory_fraction", "backend", "release_lock_on_cudamalloc",
        "release_lock_on_hipmalloc", "pinned_use_cuda_host_register",
        "pinned_use_hip_host_register", "pinned_num_register_threads",
        "pinned_use_background_threads", "pinned_reserve_segment_size_mb",
        "pinned_max_cached_size_mb", "pinned_max_round_threshold_mb", "pinned_free_catch_all",
        "graph_capture_record_stream_reuse", "throw_on_cudamalloc_oom", "preset",
        "per_stream_pools", "handle_size", "handle_size_small", "release_threshold",
        "release_before_grow", "limit", "free_sync", "free_host_sync", "guard", NULL};
    for (unsigned i = 0; keys[i]; i++)
        if (!strcmp(k, keys[i])) return true;
    return false;
}

/* One key at t[*i] (its value at t[*i + 2], or a list from there); *i ends on the value's last
 * token. */
static int apply_key(alloc_config_t *c, const ctoks *tk, size_t *i, const char *large, char *err,
                     size_t errlen)
{
    const char *k = tk->t[*i];
    if (!known_key(k)) return errf(err, errlen, "unknown key '%s' (accepted keys: %s)", k, ACCEPTED_KEYS);
    if (*i + 2 >= tk->n)
        return errf(err, errlen, "key '%s' has no value (write key:value; accepted keys: %s)", k,
                    ACCEPTED_KEYS);
    *i += 2;
    const char *v = tk->t[*i];
    unsigned long long u;
    double d;
    bool b;
    /* PyTorch's numeric keys (gpumem's own sizes go through alloc_parse_size, which is whole) */
    static const char *const numeric[] = {"max_split_size_mb", "max_non_split_rounding_mb",
                                          "roundup_power2_divisions", "garbage_collection_threshold",
                                          "per_process_memory_fraction", "pinned_num_register_threads",
                                          "pinned_reserve_segment_size_mb", "pinned_max_cached_size_mb",
                                          "pinned_max_round_threshold_mb", NULL};
    for (unsigned x = 0; numeric[x]; x++) {
        if (strcmp(k, numeric[x])) continue;
        const char *why = misread(v, k[0] == 'g' || !strcmp(k, "per_process_memory_fraction"));
        if (why) return misread_err(err, errlen, k, v, why);
    }
    if (!strcmp(k, "roundup_power2_divisions")) {
        uint64_t pt[RP2_PT_N];
        for (unsigned x = 0; x < RP2_PT_N; x++)
            pt[x] = c->rp2_div[RP2_PT_FIRST + x];
        if (!strcmp(v, "[")) {
            int rc = parse_rp2_list(tk, i, pt, err, errlen);
            if (rc) return rc;
        } else {
            if (!torch_u64(v, &u) || !is_pow2(u))
                return errf(err, errlen,
                            "bad value '%s' for roundup_power2_divisions (accepted: a power of "
                            "two, or a list like [256:1,512:2,>:8])",
                            v);
            for (unsigned x = 0; x < RP2_PT_N; x++)
                pt[x] = u;
        }
        rp2_expand(c->rp2_div, pt);
        return ALLOC_OK;
    }
    /* PyTorch's boolean keys */
    static const char *const tbools[] = {"expandable_segments",
                                         "release_lock_on_cudamalloc",
                                         "release_lock_on_hipmalloc",
                                         "pinned_use_cuda_host_register",
                                         "pinned_use_hip_host_register",
                                         "pinned_use_background_threads",
                                         "pinned_free_catch_all",
                                         "graph_capture_record_stream_reuse",
                                         "throw_on_cudamalloc_oom",
                                         NULL};
    for (unsigned x = 0; tbools[x]; x++) {
        if (strcmp(k, tbools[x])) continue;
        if (!torch_bool(v, &b))
            return errf(err, errlen, "bad value '%s' for %s (accepted: True, False)", v, k);
        if (x == 0)
            c->expandable_segments = b;
        else
            unmodelled(c, k);
        return ALLOC_OK;
    }
    if (!strcmp(k, "max_split_size_mb") || !strcmp(k, "max_non_split_rounding_mb")) {
        /* at least large_segment_size_mb; larger values are capped (PyTorch: SIZE_MAX / 1 MiB) */
        if (!torch_u64(v, &u) || u < (c->large_segment >> 20))
            return errf(err, errlen,
                        "bad value '%s' for %s (accepted: an integer number of MiB of at least "
                        "%zu, large_segment_size_mb; leave the key out for no limit)",
                        v, k, c->large_segment >> 20);
        size_t bytes = u > (SIZE_MAX >> 20) ? (SIZE_MAX >> 20) << 20 : (size_t)u << 20;
        *(k[4] == 's' ? &c->max_split_size : &c->max_non_split_rounding) = bytes;
        return ALLOC_OK;
    }
    if (!strcmp(k, "large_segment_size_mb")) return large_segment_key(c, v, err, errlen);
    if (!strcmp(k, "garbage_collection_threshold")) {
        if (!torch_double(v, &d) || !(d > 0.0 && d < 1.0))
            return errf(err, errlen,
                        "bad value '%s' for garbage_collection_threshold (accepted: a number "
                        "strictly between 0 and 1, e.g. 0.8; leave the key out for none)",
                        v);
        c->gc_threshold = d;
        return ALLOC_OK;
    }
    if (!strcmp(k, "per_process_memory_fraction")) {
        if (!torch_double(v, &d) || !(d >= 0.0 && d <= 1.0))
            return errf(err, errlen,
                        "bad value '%s' for per_process_memory_fraction (accepted: a number "
                        "from 0 to 1: the share of the device's memory that may be reserved)",
                        v);
        c->memory_fraction = d;
        return ALLOC_OK;
    }
    if (!strcmp(k, "backend")) {
        if (!strcmp(v, "native")) return ALLOC_OK;
        if (!strcmp(v, "cudaMallocAsync")) return unmodelled(c, "backend:cudaMallocAsync");
        return errf(err, errlen, "bad value '%s' for backend (accepted: native, cudaMallocAsync)",
                    v);
    }
    if (!strcmp(k, "pinned_num_register_threads")) {
        if (!torch_u64(v, &u) || !is_pow2(u) || u > 128)
            return errf(err, errlen,
                        "bad value '%s' for pinned_num_register_threads (accepted: a power of "
                        "two up to 128)",
                        v);
        return unmodelled(c, k);
    }
    if (!strcmp(k, "pinned_reserve_segment_size_mb") || !strcmp(k, "pinned_max_cached_size_mb") ||
        !strcmp(k, "pinned_max_round_threshold_mb")) {
        if (!torch_u64(v, &u) || (u == 0 && k[7] == 'r'))
            return errf(err, errlen, "bad value '%s' for %s (accepted: an integer number of MiB%s)",
                        v, k, k[7] == 'r' ? " greater than 0" : "");
        return unmodelled(c, k);
    }
    /* gpumem's own keys */
    if (!strcmp(k, "preset")) {
        if (alloc_config_preset(c, v) != ALLOC_OK)
            return errf(err, errlen,
                        "bad value '%s' for preset (accepted: gpumem, pytorch, "
                        "pytorch-expandable, nocache)",
                        v);
        /* the string's large_segment_size_mb stands before every other key, the preset too */
        return large ? large_segment_key(c, large, err, errlen) : ALLOC_OK;
    }
    if (!strcmp(k, "release_before_grow") || !strcmp(k, "guard") || !strcmp(k, "per_stream_pools")) {
        if (!parse_bool(v, &b))
            return errf(err, errlen, "bad value '%s' for %s (accepted: True, False)", v, k);
        if (k[0] == 'r')
            c->release_before_grow = b;
        else if (k[0] == 'g')
            c->guard = b;
        else
            c->per_stream_pools = b;
        return ALLOC_OK;
    }
    if (!strcmp(k, "free_sync") || !strcmp(k, "free_host_sync")) {
        unsigned char *dst = k[5] == 'h' ? &c->free_host_sync : &c->free_sync;
        if (!strcmp(v, "device"))
            *dst = ALLOC_SYNC_DEVICE;
        else if (!strcmp(v, "none"))
            *dst = ALLOC_SYNC_NONE;
        else
            return errf(err, errlen, "bad value '%s' for %s (accepted: device, none)", v, k);
        return ALLOC_OK;
    }
    if (!strcmp(k, "handle_size") || !strcmp(k, "handle_size_small") ||
        !strcmp(k, "release_threshold") || !strcmp(k, "limit")) {
        /* One rule for 0 in every size key: it is 0 bytes. release_threshold:0 keeps nothing
         * cached (cudaMemPoolAttrReleaseThreshold's 0), limit:0 lets nothing be reserved (as
         * per_process_memory_fraction:0 does), handle_size:0 rounds up to the granularity as
         * every handle size does. "No threshold" / "no limit" is the word none, never 0. */
        size_t sz;
        if (!strcmp(v, "none") && k[0] != 'h') {
            *(k[0] == 'r' ? &c->release_threshold : &c->limit) = SIZE_MAX;
            return ALLOC_OK;
        }
        if (alloc_parse_size(v, &sz) != ALLOC_OK || (k[0] != 'h' && sz == SIZE_MAX))
            return errf(err, errlen,
                        "bad value '%s' for %s (accepted: a byte size, " ALLOC_SIZE_RULE "%s)",
                        v, k,
                        k[0] == 'h' ? "; 0 is the granularity"
                                    : ", 0 for 0 bytes, or none for no limit at all");
        if (!strcmp(k, "handle_size"))
            c->handle_size = sz;
        else if (!strcmp(k, "handle_size_small"))
            c->handle_size_small = sz;
        else if (!strcmp(k, "release_threshold"))
            c->release_threshold = sz;
        else
            c->limit = sz;
        return ALLOC_OK;
    }
    return errf(err, errlen, "unknown key '%s' (accepted keys: %s)", k, ACCEPTED_KEYS);
}

/* The walk over the tokens: a key, its value, one token after it. The first pass applies only
 * large_segment_size_mb (its last value in *large), skipping the others as PyTorch skips them;
 * the second applies every key. */
static int walk(alloc_config_t *c, const ctoks *tk, bool first, const char **large, char *err,
                size_t errlen)
{
    for (size_t i = 0; i < tk->n; i++) {
        if (first) {
            bool ls = !strcmp(tk->t[i], "large_segment_size_mb");
            if (i + 2 >= tk->n) return ALLOC_OK; /* the second pass says what is wrong */
            i += 2;
            if (ls) {
                int rc = large_segment_key(c, tk->t[i], err, errlen);
                if (rc) return rc;
                *large = tk->t[i];
            } else if (!strcmp(tk->t[i], "[")) {
                while (i < tk->n && strcmp(tk->t[i], "]"))
                    i++;
            }
        } else {
            int rc = apply_key(c, tk, &i, *large, err, errlen);
            if (rc) return rc;
        }
        if (i + 1 < tk->n) i++;
    }
    return ALLOC_OK;
}

int alloc_config_parse(alloc_config_t *cfg, const char *conf, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    if (!cfg) return ALLOC_ERR_INVALID;
    if (!conf) return ALLOC_OK;
    alloc_config_t c = *cfg;
    ctoks tk;
    if (tokenize(conf, &tk) != 0) {
        tokens_free(&tk);
        return errf(err, errlen, "out of memory reading the configuration");
    }
    const char *large = NULL;
    int rc = walk(&c, &tk, true, &large, err, errlen);
    if (!rc) rc = walk(&c, &tk, false, &large, err, errlen);
    tokens_free(&tk);
    if (rc) return rc;
    *cfg = c;
    return ALLOC_OK;
}

int alloc_config_parse_recorded(alloc_config_t *cfg, const char *conf, char *err, size_t errlen)
{
    if (!conf) return alloc_config_parse(cfg, conf, err, errlen);
    static const char *const old[] = {"max_split_size_mb:inf", "max_split_size_mb:none",
                                      "garbage_collection_threshold:0",
                                      "roundup_power2_divisions:0", NULL};
    size_t n = strlen(conf);
    char *s = malloc(n + 1), *o = s;
    if (!s) return errf(err, errlen, "out of memory reading the configuration");
    const char *p = conf;
    while (*p) {
        const char *e = strchr(p, ','), *l = strchr(p, '[');
        if (l && (!e || l < e)) e = strchr(l, ']') ? strchr(strchr(l, ']'), ',') : NULL;
        size_t len = e ? (size_t)(e - p) : strlen(p);
        bool drop = false;
        for (unsigned i = 0; old[i]; i++)
            drop = drop || (strlen(old[i]) == len && !strncmp(p, old[i], len));
        if (!drop) {
            if (o != s) *o++ = ',';
            memcpy(o, p, len);
            o += len;
        }
        p += len;
        if (*p == ',') p++;
    }
    *o = 0;
    int rc = alloc_config_parse(cfg, s, err, errlen);
    free(s);
    return rc;
}

const char *alloc_config_torch_env(const char **var)
{
    /* c10's CUDAAllocatorConfig reads PYTORCH_CUDA_ALLOC_CONF first and looks at
     * PYTORCH_ALLOC_CONF only when it is absent (checked against torch in
     * tests/torch/torch_conf_keys.sh) */
    static const char *const vars[] = {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"};
    for (unsigned i = 0; i < 2; i++) {
        const char *v = getenv(vars[i]);
        if (!v) continue;
        if (var) *var = vars[i];
        return v;
    }
    if (var) *var = NULL;
    return NULL;
}

int alloc_config_unmodelled(const alloc_config_t *cfg, char *buf, size_t len)
{
    size_t o = 0;
    int n = 0;
    if (len) buf[0] = 0;
    for (unsigned i = 0; UNMODELLED[i]; i++) {
        if (!(cfg->unmodelled & (1u << i))) continue;
        int w = snprintf(buf + o, o < len ? len - o : 0, "%s%s", n ? ", " : "", UNMODELLED[i]);
        if (w > 0) o += (size_t)w;
        if (o >= len) o = len ? len - 1 : 0;
        n++;
    }
    return n;
}

static int fmt_size(char *b, size_t n, size_t v)
{
    if (v && v % (1ull << 30) == 0) return snprintf(b, n, "%zuG", v >> 30);
    if (v && v % (1ull << 20) == 0) return snprintf(b, n, "%zuM", v >> 20);
    if (v && v % (1ull << 10) == 0) return snprintf(b, n, "%zuK", v >> 10);
    return snprintf(b, n, "%zu", v);
}

int alloc_config_format(const alloc_config_t *c, char *buf, size_t len)
{
    static const char *pol[] = {"gpumem", "pytorch", "nocache"};
    char hs[32], hss[32], rt[32], lim[32], ms[64] = "", gc[64] = "", fr[64] = "", rp[600] = "";
    fmt_size(hs, sizeof(hs), c->handle_size);
    fmt_size(hss, sizeof(hss), c->handle_size_small);
    if (c->release_threshold == SIZE_MAX)
        snprintf(rt, sizeof(rt), "none");
    else
        fmt_size(rt, sizeof(rt), c->release_threshold);
    if (c->limit != ALLOC_NO_LIMIT)
        fmt_size(lim, sizeof(lim), c->limit);
    else
        snprintf(lim, sizeof(lim), "none");
    /* PyTorch's keys have no word for "none": left out, the preset's (none) stands */
    if (c->max_split_size != SIZE_MAX)
        snprintf(ms, sizeof(ms), ",max_split_size_mb:%zu", c->max_split_size >> 20);
    if (c->gc_threshold > 0) {
        snprintf(gc, sizeof(gc), ",garbage_collection_threshold:%g", c->gc_threshold);
        if (strtod(gc + 30, NULL) != c->gc_threshold)
            snprintf(gc, sizeof(gc), ",garbage_collection_threshold:%.17g", c->gc_threshold);
    }
    if (c->memory_fraction >= 0) {
        snprintf(fr, sizeof(fr), ",per_process_memory_fraction:%g", c->memory_fraction);
        if (strtod(fr + 29, NULL) != c->memory_fraction)
            snprintf(fr, sizeof(fr), ",per_process_memory_fraction:%.17g", c->memory_fraction);
    }
    /* divisions: one number when all are equal (none at all when 0), else a list over PyTorch's
     * 16 intervals: the first key closes the first run (it also covers what lies below), '>'
     * the last run, and every interval between gets its own entry */
    size_t o = 0;
    uint64_t pt[RP2_PT_N];
    bool same = true;
    for (unsigned k = 0; k < RP2_PT_N; k++) {
        pt[k] = c->rp2_div[RP2_PT_FIRST + k];
        same = same && pt[k] == pt[0];
    }
    if (same) {
        if (pt[0]) snprintf(rp, sizeof(rp), ",roundup_power2_divisions:%llu", (unsigned long long)pt[0]);
    } else {
        unsigned first = 0, lastrun = RP2_PT_N - 1;
        while (first + 1 < RP2_PT_N && pt[first + 1] == pt[0])
            first++;
        while (lastrun > first + 1 && pt[lastrun - 1] == pt[RP2_PT_N - 1])
            lastrun--;
        o += (size_t)snprintf(rp + o, sizeof(rp) - o, ",roundup_power2_divisions:[%llu:%llu",
                              1ull << first, (unsigned long long)pt[0]);
        for (unsigned k = first + 1; k < lastrun; k++)
            o += (size_t)snprintf(rp + o, sizeof(rp) - o, ",%llu:%llu", 1ull << k,
                                  (unsigned long long)pt[k]);
        snprintf(rp + o, sizeof(rp) - o, ",>:%llu]", (unsigned long long)pt[RP2_PT_N - 1]);
    }
    const char *policy = c->policy <= ALLOC_POLICY_NOCACHE ? pol[c->policy] : "gpumem";
    /* `preset` first resets everything, so policy-only presets come out right */
    const char *preset = !strcmp(policy, "pytorch") ? "pytorch" : policy;
    return snprintf(
        buf, len,
        "preset:%s,large_segment_size_mb:%zu,expandable_segments:%s,per_stream_pools:%s"
        "%s,max_non_split_rounding_mb:%zu%s%s%s,"
        "handle_size:%s,handle_size_small:%s,release_threshold:%s,release_before_grow:%s,"
        "limit:%s,free_sync:%s,free_host_sync:%s,guard:%s",
        preset, c->large_segment >> 20, c->expandable_segments ? "True" : "False",
        c->per_stream_pools ? "True" : "False", ms, c->max_non_split_rounding >> 20, rp, gc, fr,
        hs, hss, rt, c->release_before_grow ? "True" : "False", lim,
        c->free_sync == ALLOC_SYNC_NONE ? "none" : "device",
        c->free_host_sync == ALLOC_SYNC_NONE ? "none" : "device", c->guard ? "True" : "False");
}
