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
    c->limit = 0;
    c->release_before_grow = true;
    c->max_non_split_rounding = A_LARGE_BUFFER;
    c->large_segment = A_LARGE_BUFFER;
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
    if (!s) return ALLOC_ERR_CONFIG;
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s)) return ALLOC_ERR_CONFIG;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return ALLOC_ERR_CONFIG;
    double frac = 0;
    if (*end == '.') { /* "1.5G" */
        char *e2;
        frac = strtod(end, &e2);
        end = e2;
    }
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
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
    case 'B':
    case '\0':
    case ' ':
        break;
    default:
        return ALLOC_ERR_CONFIG;
    }
    if (shift) {
        end++;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'B' || *end == 'b') end++;
    } else if (*end == 'B' || *end == 'b') {
        end++;
    }
    while (isspace((unsigned char)*end))
        end++;
    if (*end) return ALLOC_ERR_CONFIG;
    if (shift && v > (SIZE_MAX >> shift) - 1) return ALLOC_ERR_CONFIG;
    size_t r = (size_t)v << shift;
    if (frac > 0) r += (size_t)(frac * (double)((size_t)1 << shift));
    *out = r;
    return ALLOC_OK;
}

/* Round a request up: 512 B minimum, then either the power-of-two divisions for its interval or
 * plain 512 B multiples. PyTorch's round_size: with d > 1 divisions and a size above 512 * d, a
 * size between 2^k and 2^(k+1) rounds up to a multiple of 2^k / d (a power of two stays); d of
 * 0 or 1 means 512 B multiples. */
size_t a_round_size(const alloc_config_t *cfg, size_t size)
{
    if (size <= A_MIN_BLOCK) return A_MIN_BLOCK;
    unsigned lg = 63u - (unsigned)__builtin_clzll((unsigned long long)size);
    unsigned div = cfg->rp2_div[lg];
    if (div > 1 && size > (size_t)A_MIN_BLOCK * div) {
        if ((size & (size - 1)) == 0) return size;
        size_t step = ((size_t)1 << lg) / div;
        if (step < A_MIN_BLOCK) step = A_MIN_BLOCK;
        return (size + step - 1) / step * step;
    }
    if (size > SIZE_MAX - A_MIN_BLOCK) return 0;
    return (size + A_MIN_BLOCK - 1) / A_MIN_BLOCK * A_MIN_BLOCK;
}

size_t alloc_round_size(const alloc_config_t *cfg, size_t size)
{
    if (!cfg || size == 0) return 0;
    return a_round_size(cfg, size);
}

/* ---- the parser ------------------------------------------------------------------------------ */

static const char ACCEPTED_KEYS[] =
    "preset, expandable_segments, max_split_size_mb, roundup_power2_divisions, "
    "garbage_collection_threshold, backend, per_stream_pools, handle_size, handle_size_small, "
    "release_threshold, release_before_grow, limit, max_non_split_rounding_mb, "
    "large_segment_size_mb, free_sync, free_host_sync, guard";

/* PyTorch keys that gpumem deliberately does not implement: named as such in the error. */
static const char *const PYTORCH_ONLY_KEYS[] = {
    "pinned_use_cuda_host_register",     "pinned_num_register_threads",
    "release_lock_on_cudamalloc",        "pinned_use_background_threads",
    "graph_capture_record_stream_reuse", NULL};

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

static bool parse_u64(const char *v, unsigned long long *out)
{
    if (!isdigit((unsigned char)*v)) return false;
    errno = 0;
    char *end;
    *out = strtoull(v, &end, 10);
    return !errno && !*end;
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

static void rp2_expand(unsigned *div, const unsigned pt[RP2_PT_N])
{
    for (unsigned lg = 0; lg < ALLOC_RP2_INTERVALS; lg++) {
        unsigned k = lg < RP2_PT_FIRST ? 0 : lg - RP2_PT_FIRST;
        div[lg] = pt[k < RP2_PT_N ? k : RP2_PT_N - 1];
    }
}

/* `[256:1,512:2,>:8]`, as PyTorch's AllocatorConfig parses it: key K MiB (a power of two) sets
 * the interval [K, 2K) MiB; the first key also sets every interval below it; `>` sets every
 * interval after the last key; intervals no entry reaches keep their value. Keys must ascend
 * (PyTorch does not check; a descending list is always a mistake). */
static int parse_rp2_list(const char *v, unsigned *div, char *err, size_t errlen)
{
    unsigned pt[RP2_PT_N];
    for (unsigned k = 0; k < RP2_PT_N; k++)
        pt[k] = div[RP2_PT_FIRST + k];
    const char *p = v + 1;
    unsigned last = 0; /* interval of the last key */
    bool any = false;  /* a numeric key was seen */
    unsigned long long prev_mb = 0;
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p == ']') break;
        char kbuf[32], vbuf[32];
        size_t kn = 0, vn = 0;
        while (*p && *p != ':' && *p != ']' && *p != ',' && kn < sizeof(kbuf) - 1)
            kbuf[kn++] = *p++;
        kbuf[kn] = 0;
        if (*p != ':')
            return errf(err, errlen,
                        "bad value '%s' for roundup_power2_divisions (accepted: a power of two, "
                        "or a list like [256:1,512:2,>:8] with keys in MiB, powers of two, "
                        "ascending, and '>' last)",
                        v);
        p++;
        while (*p && *p != ',' && *p != ']' && vn < sizeof(vbuf) - 1)
            vbuf[vn++] = *p++;
        vbuf[vn] = 0;
        unsigned long long dv;
        if (!parse_u64(vbuf, &dv) || (dv != 0 && !is_pow2(dv)) || dv > 1024)
            return errf(err, errlen,
                        "bad division '%s' in roundup_power2_divisions (accepted: 0 or a power "
                        "of two up to 1024)",
                        vbuf);
        if (!strcmp(kbuf, ">")) {
            for (unsigned k = last + 1; k < RP2_PT_N; k++)
                pt[k] = (unsigned)dv;
        } else {
            unsigned long long mb;
            if (!parse_u64(kbuf, &mb) || !is_pow2(mb))
                return errf(err, errlen,
                            "bad size key '%s' in roundup_power2_divisions (accepted: MiB "
                            "sizes that are powers of two, or '>')",
                            kbuf);
            if (any && mb <= prev_mb)
                return errf(err, errlen,
                            "keys of roundup_power2_divisions must ascend ('%s' after a larger "
                            "one)",
                            kbuf);
            unsigned k = (unsigned)__builtin_ctzll(mb);
            if (k > RP2_PT_N - 1) k = RP2_PT_N - 1;
            if (!any)
                for (unsigned j = 0; j < k; j++)
                    pt[j] = (unsigned)dv;
            pt[k] = (unsigned)dv;
            last = k;
            prev_mb = mb;
            any = true;
        }
        if (*p == ',')
            p++;
        else if (*p != ']')
            return errf(err, errlen, "unterminated list in roundup_power2_divisions: '%s'", v);
    }
    if (p[1])
        return errf(err, errlen, "trailing text after ']' in roundup_power2_divisions: '%s'", v);
    rp2_expand(div, pt);
    return ALLOC_OK;
}

static int apply_kv(alloc_config_t *c, const char *k, const char *v, char *err, size_t errlen)
{
    if (!strcmp(k, "preset")) {
        if (alloc_config_preset(c, v) != ALLOC_OK)
            return errf(err, errlen,
                        "bad value '%s' for preset (accepted: gpumem, pytorch, "
                        "pytorch-expandable, nocache)",
                        v);
        return ALLOC_OK;
    }
    if (!strcmp(k, "expandable_segments")) {
        if (!parse_bool(v, &c->expandable_segments))
            return errf(err, errlen,
                        "bad value '%s' for expandable_segments (accepted: True, False)", v);
        return ALLOC_OK;
    }
    if (!strcmp(k, "release_before_grow")) {
        if (!parse_bool(v, &c->release_before_grow))
            return errf(err, errlen,
                        "bad value '%s' for release_before_grow (accepted: True, False)", v);
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
    if (!strcmp(k, "guard")) {
        if (!parse_bool(v, &c->guard))
            return errf(err, errlen, "bad value '%s' for guard (accepted: True, False)", v);
        return ALLOC_OK;
    }
    if (!strcmp(k, "per_stream_pools")) {
        if (!parse_bool(v, &c->per_stream_pools))
            return errf(err, errlen, "bad value '%s' for per_stream_pools (accepted: True, False)",
                        v);
        return ALLOC_OK;
    }
    if (!strcmp(k, "max_split_size_mb")) {
        unsigned long long mb;
        if (!strcmp(v, "inf") || !strcmp(v, "none")) {
            c->max_split_size = SIZE_MAX;
            return ALLOC_OK;
        }
        /* PyTorch: at least large_segment_size_mb (20); larger values are capped */
        if (!parse_u64(v, &mb) || mb < (c->large_segment >> 20))
            return errf(err, errlen,
                        "bad value '%s' for max_split_size_mb (accepted: an integer number of "
                        "MiB of at least %zu (large_segment_size_mb), or inf)",
                        v, c->large_segment >> 20);
        c->max_split_size = mb > (1ull << 40) ? (size_t)1 << 60 : (size_t)mb << 20;
        return ALLOC_OK;
    }
    if (!strcmp(k, "max_non_split_rounding_mb")) {
        unsigned long long mb;
        if (!parse_u64(v, &mb) || mb < (c->large_segment >> 20))
            return errf(err, errlen,
                        "bad value '%s' for max_non_split_rounding_mb (accepted: an integer "
                        "number of MiB of at least %zu (large_segment_size_mb))",
                        v, c->large_segment >> 20);
        c->max_non_split_rounding = mb > (1ull << 40) ? (size_t)1 << 60 : (size_t)mb << 20;
        return ALLOC_OK;
    }
    if (!strcmp(k, "large_segment_size_mb")) {
        unsigned long long mb;
        if (!parse_u64(v, &mb) || mb <= (A_MIN_LARGE_ALLOC >> 20) || mb > (1ull << 30))
            return errf(err, errlen,
                        "bad value '%s' for large_segment_size_mb (accepted: an integer number "
                        "of MiB greater than 10)",
                        v);
        size_t old = c->large_segment;
        c->large_segment = (size_t)mb << 20;
        /* PyTorch resets max_non_split_rounding to the large segment size */
        if (c->max_non_split_rounding == old) c->max_non_split_rounding = c->large_segment;
        /* ... and maps large-pool expandable segments in pages of that size */
        if (c->policy == ALLOC_POLICY_PYTORCH) c->handle_size = c->large_segment;
        return ALLOC_OK;
    }
    if (!strcmp(k, "roundup_power2_divisions")) {
        unsigned div[ALLOC_RP2_INTERVALS];
        memcpy(div, c->rp2_div, sizeof(div));
        if (v[0] == '[') {
            int rc = parse_rp2_list(v, div, err, errlen);
            if (rc) return rc;
        } else {
            unsigned long long dv;
            if (!parse_u64(v, &dv) || (dv != 0 && !is_pow2(dv)) || dv > 1024)
                return errf(err, errlen,
                            "bad value '%s' for roundup_power2_divisions (accepted: 0 or a "
                            "power of two up to 1024, or a list like [256:1,512:2,>:8])",
                            v);
            for (unsigned i = 0; i < ALLOC_RP2_INTERVALS; i++)
                div[i] = (unsigned)dv;
        }
        memcpy(c->rp2_div, div, sizeof(div));
        return ALLOC_OK;
    }
    if (!strcmp(k, "garbage_collection_threshold")) {
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (!strcmp(v, "0")) { /* off; what alloc_config_format writes for "off" */
            c->gc_threshold = 0.0;
            return ALLOC_OK;
        }
        if (errno || *end || end == v || !(d > 0.0 && d < 1.0))
            return errf(err, errlen,
                        "bad value '%s' for garbage_collection_threshold (accepted: a number "
                        "strictly between 0 and 1, e.g. 0.8, or 0 for off)",
                        v);
        c->gc_threshold = d;
        return ALLOC_OK;
    }
    if (!strcmp(k, "backend")) {
        if (strcmp(v, "native"))
            return errf(err, errlen,
                        "bad value '%s' for backend (accepted: native; gpumem replaces the "
                        "allocator itself, cudaMallocAsync is not used)",
                        v);
        return ALLOC_OK;
    }
    if (!strcmp(k, "handle_size") || !strcmp(k, "handle_size_small") ||
        !strcmp(k, "release_threshold") || !strcmp(k, "limit")) {
        size_t sz;
        bool off = !strcmp(v, "0") || !strcmp(v, "none") || !strcmp(v, "off");
        if (off && !strcmp(k, "release_threshold")) {
            c->release_threshold = SIZE_MAX;
            return ALLOC_OK;
        }
        if (off && !strcmp(k, "limit")) {
            c->limit = 0;
            return ALLOC_OK;
        }
        if (!strcmp(v, "0") && !strncmp(k, "handle_size", 11)) { /* 0 = the granularity */
            if (!strcmp(k, "handle_size"))
                c->handle_size = 0;
            else
                c->handle_size_small = 0;
            return ALLOC_OK;
        }
        if (alloc_parse_size(v, &sz) != ALLOC_OK || (sz == 0 && strcmp(k, "release_threshold")))
            return errf(err, errlen,
                        "bad value '%s' for %s (accepted: a byte size such as 2M, 20MiB, 1G, "
                        "24G%s)",
                        v, k,
                        !strcmp(k, "release_threshold") ? ", or none"
                        : !strcmp(k, "limit")           ? ", or none"
                                                        : "");
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
    for (int i = 0; PYTORCH_ONLY_KEYS[i]; i++)
        if (!strcmp(k, PYTORCH_ONLY_KEYS[i]))
            return errf(err, errlen,
                        "key '%s' is a PyTorch option gpumem does not implement (accepted keys: "
                        "%s)",
                        k, ACCEPTED_KEYS);
    return errf(err, errlen, "unknown key '%s' (accepted keys: %s)", k, ACCEPTED_KEYS);
}

int alloc_config_parse(alloc_config_t *cfg, const char *conf, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    if (!cfg) return ALLOC_ERR_INVALID;
    if (!conf) return ALLOC_OK;
    alloc_config_t c = *cfg;
    const char *p = conf;
    char key[64], val[256];
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\t')
            p++;
        if (!*p) break;
        size_t kn = 0;
        while (*p && *p != ':' && *p != ',' && kn < sizeof(key) - 1)
            key[kn++] = *p++;
        while (kn && key[kn - 1] == ' ')
            kn--;
        key[kn] = 0;
        if (*p != ':')
            return errf(err, errlen, "key '%s' has no value (write key:value; accepted keys: %s)",
                        key, ACCEPTED_KEYS);
        p++;
        while (*p == ' ')
            p++;
        size_t vn = 0;
        if (*p == '[') {
            while (*p && *p != ']' && vn < sizeof(val) - 2)
                val[vn++] = *p++;
            if (*p != ']')
                return errf(err, errlen, "unterminated list value for '%s' (missing ']')", key);
            val[vn++] = *p++;
        } else {
            while (*p && *p != ',' && vn < sizeof(val) - 1)
                val[vn++] = *p++;
        }
        while (vn && val[vn - 1] == ' ')
            vn--;
        val[vn] = 0;
        if (*p && *p != ',')
            return errf(err, errlen, "unexpected text after the value of '%s': '%s'", key, p);
        int rc = apply_kv(&c, key, val, err, errlen);
        if (rc) return rc;
    }
    *cfg = c;
    return ALLOC_OK;
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
    char hs[32], hss[32], rt[32], lim[32], ms[32], rp[512];
    fmt_size(hs, sizeof(hs), c->handle_size);
    fmt_size(hss, sizeof(hss), c->handle_size_small);
    if (c->release_threshold == SIZE_MAX)
        snprintf(rt, sizeof(rt), "none");
    else
        fmt_size(rt, sizeof(rt), c->release_threshold);
    if (c->limit)
        fmt_size(lim, sizeof(lim), c->limit);
    else
        snprintf(lim, sizeof(lim), "none");
    if (c->max_split_size == SIZE_MAX)
        snprintf(ms, sizeof(ms), "inf");
    else
        snprintf(ms, sizeof(ms), "%zu", c->max_split_size >> 20);
    /* divisions: one number when all are equal, else a list over PyTorch's 16 intervals: the
     * first key closes the first run (it also covers what lies below), '>' the last run, and
     * every interval between gets its own entry */
    size_t o = 0;
    unsigned pt[RP2_PT_N];
    bool same = true;
    for (unsigned k = 0; k < RP2_PT_N; k++) {
        pt[k] = c->rp2_div[RP2_PT_FIRST + k];
        same = same && pt[k] == pt[0];
    }
    if (same) {
        snprintf(rp, sizeof(rp), "%u", pt[0]);
    } else {
        unsigned first = 0, lastrun = RP2_PT_N - 1;
        while (first + 1 < RP2_PT_N && pt[first + 1] == pt[0])
            first++;
        while (lastrun > first + 1 && pt[lastrun - 1] == pt[RP2_PT_N - 1])
            lastrun--;
        o += (size_t)snprintf(rp + o, sizeof(rp) - o, "[%llu:%u", 1ull << first, pt[0]);
        for (unsigned k = first + 1; k < lastrun; k++)
            o += (size_t)snprintf(rp + o, sizeof(rp) - o, ",%llu:%u", 1ull << k, pt[k]);
        snprintf(rp + o, sizeof(rp) - o, ",>:%u]", pt[RP2_PT_N - 1]);
    }
    const char *policy = c->policy <= ALLOC_POLICY_NOCACHE ? pol[c->policy] : "gpumem";
    /* `preset` first resets everything, so policy-only presets come out right */
    const char *preset = !strcmp(policy, "pytorch") ? "pytorch" : policy;
    return snprintf(
        buf, len,
        "preset:%s,large_segment_size_mb:%zu,expandable_segments:%s,per_stream_pools:%s,"
        "max_split_size_mb:%s,max_non_split_rounding_mb:%zu,"
        "roundup_power2_divisions:%s,garbage_collection_threshold:%g,"
        "handle_size:%s,handle_size_small:%s,release_threshold:%s,release_before_grow:%s,"
        "limit:%s,free_sync:%s,free_host_sync:%s,guard:%s",
        preset, c->large_segment >> 20, c->expandable_segments ? "True" : "False",
        c->per_stream_pools ? "True" : "False", ms, c->max_non_split_rounding >> 20, rp,
        c->gc_threshold, hs, hss, rt, c->release_before_grow ? "True" : "False", lim,
        c->free_sync == ALLOC_SYNC_NONE ? "none" : "device",
        c->free_host_sync == ALLOC_SYNC_NONE ? "none" : "device", c->guard ? "True" : "False");
}
