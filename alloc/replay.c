/* replay.c — traces (text format, synthetic transformer traces) and the replay engine.
 *
 * Replay drives a fresh allocator over a fresh in-memory backend without event tracking (work
 * "completes at issue time"), so every free takes effect at once and the result depends only on
 * the event sequence and the config: deterministic, and fast because nothing but the allocator's
 * own bookkeeping runs per event. Trace ids are arbitrary 64-bit values mapped to addresses by
 * an open-addressing table, or, when the caller numbered the trace's allocations by slot once for
 * many replays (alloc_trace_slots), by an array indexed by slot. A trace may come in pieces
 * (alloc_replay_begin / feed / end: a caller that makes it as it goes never holds all of it); the
 * replay's state then lives in an alloc_replay_run between the pieces, and alloc_replay is the
 * same three on one piece.
 *
 * Text format, one event per line ('#' starts a comment, blank lines ignored):
 *   a <id> <size> [stream]    allocate size bytes on stream (default 0), framework allocator
 *   ax <id> <size> [stream]   allocation outside the framework's allocator (library cudaMalloc)
 *   f <id>                    free with cudaFree semantics
 *   fa <id> <stream>          free in stream order (cudaFreeAsync)
 *   rs <id> <stream>          record_stream: the live allocation is used on stream too
 *   fc <id>                   the free of id completed (its block is reusable from here)
 *   mr <stream> / md <stream>  the recording's allocator recorded a marker on stream / found its
 *                             oldest marker complete (alloc.h, ALLOC_TR_MARKER_RECORD)
 *   sy / sr / sw / sf / fs    synchronizations, a wait's start, a stream forgotten, a synced free
 *                             (alloc.h, ALLOC_TR_SYNC, ALLOC_TR_WAIT)
 *   e                         empty_cache
 *
 * Replay keeps the allocator's own event model ("work completes at issue") and models the two
 * things reuse depends on beyond it at this level: a free is held back until its `fc` when the
 * trace has one after it (gpumem's free_completed events, PyTorch's: the recording's stream
 * order), else — in a trace without `fc` lines — a free of a block with record_stream uses is
 * held for stream_lag allocations; and `ax` allocations
 * bypass the caching allocator under the pytorch presets (PyTorch never caches them). Peaks of
 * allocated and requested bytes are counted here, at the program's malloc and free, as PyTorch's
 * allocated_bytes are, whether or not the block has returned to the allocator yet.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/internal.h"

static int perr(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return ALLOC_ERR_INVALID;
}

/* ---- event vector ---------------------------------------------------------------------------- */

typedef struct {
    alloc_trace_event_t *v;
    size_t n, cap;
    uint64_t next_id;
    bool oom;
} tv_t;

static bool tv_push(tv_t *t, alloc_trace_event_t e)
{
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 4096;
        alloc_trace_event_t *nv = realloc(t->v, nc * sizeof(*nv));
        if (!nv) {
            t->oom = true;
            return false;
        }
        t->v = nv;
        t->cap = nc;
    }
    t->v[t->n++] = e;
    return true;
}

/* ---- text parsing --------------------------------------------------------------------------- */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

static const char *parse_num(const char *p, const char *end, uint64_t *v, bool *ok)
{
    p = skip_ws(p, end);
    uint64_t x = 0;
    const char *s = p;
    while (p < end && *p >= '0' && *p <= '9') {
        uint64_t d = (uint64_t)(*p - '0');
        if (x > (UINT64_MAX - d) / 10) {
            *ok = false;
            return p;
        }
        x = x * 10 + d;
        p++;
    }
    *ok = p > s;
    *v = x;
    return p;
}

/* every line the parser reads, as its errors list them */
#define TRACE_LINE_FORMS                                                                                  \
    "'a <id> <size> [stream]', 'ax <id> <size> [stream]', 'ag <id> <size> [stream]', 'ao <id> <size> "    \
    "[stream]', 'ap <id> <size> <pool>', 'pr <pool>', 'cb <pool>', 'ce <pool>', 'f <id>', 'fa <id> "      \
    "<stream>', 'rs <id> <stream>', 'fc <id>', 'fy <id>', 'fs <id>', 'mr <stream> [step]', 'md <stream> " \
    "[step]', 'sw <wait> [<size> <stream>]', 'sy [step [wait]]', 'sr [wait]', 'sf <stream>', 'e' or "      \
    "'l <bytes>'"

int alloc_trace_parse(const char *text, size_t len, alloc_trace_event_t **events, size_t *n,
                      char *err, size_t errlen)
{
    if (!events || !n || (!text && len)) return ALLOC_ERR_INVALID;
    tv_t t = {0};
    const char *p = text, *end = text + len;
    size_t line = 0;
    while (p < end) {
        line++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        const char *q = skip_ws(p, eol);
        if (q == eol || *q == '#') {
            p = eol + 1;
            continue;
        }
        alloc_trace_event_t e = {0};
        bool ok = true, ok2 = true;
        size_t wl = 0; /* length of the event word */
        while (q + wl < eol && q[wl] != ' ' && q[wl] != '\t' && q[wl] != '#')
            wl++;
#define WORD(w) (wl == sizeof(w) - 1 && !memcmp(q, w, wl))
        if (WORD("fa") || WORD("rs")) {
            e.kind = q[0] == 'f' ? ALLOC_TR_FREE_ASYNC : ALLOC_TR_RECORD_STREAM;
            q = parse_num(q + 2, eol, &e.id, &ok);
            q = parse_num(q, eol, &e.stream, &ok2);
            ok = ok && ok2;
        } else if (WORD("mr") || WORD("md")) {
            e.kind = q[1] == 'r' ? ALLOC_TR_MARKER_RECORD : ALLOC_TR_MARKER_DONE;
            q = parse_num(q + 2, eol, &e.stream, &ok);
            const char *r = skip_ws(q, eol);
            if (ok && r < eol && *r != '#') q = parse_num(r, eol, &e.size, &ok); /* its step */
        } else if (WORD("sy") || WORD("sr")) {
            e.kind = q[1] == 'y' ? ALLOC_TR_SYNC : ALLOC_TR_SYNC_RESTART;
            q += 2;
            const char *r = skip_ws(q, eol);
            /* sy [step [wait]], sr [wait] */
            if (e.kind == ALLOC_TR_SYNC && r < eol && *r != '#') q = parse_num(r, eol, &e.size, &ok);
            r = skip_ws(q, eol);
            if (ok && r < eol && *r != '#') q = parse_num(r, eol, &e.id, &ok);
        } else if (WORD("sw")) { /* sw <wait> [<size> <stream>] */
            e.kind = ALLOC_TR_WAIT;
            q = parse_num(q + 2, eol, &e.id, &ok);
            const char *r = skip_ws(q, eol);
            if (ok && r < eol && *r != '#') {
                q = parse_num(r, eol, &e.size, &ok);
                q = parse_num(q, eol, &e.stream, &ok2);
                ok = ok && ok2;
            }
        } else if (WORD("sf")) {
            e.kind = ALLOC_TR_STREAM_FORGET;
            q = parse_num(q + 2, eol, &e.stream, &ok);
        } else if (WORD("fs")) {
            e.kind = ALLOC_TR_FREE_SYNCED;
            q = parse_num(q + 2, eol, &e.id, &ok);
        } else if (WORD("fc") || WORD("fy")) {
            e.kind = ALLOC_TR_FREE_DONE;
            e.size = q[1] == 'y'; /* landed by a synchronization: settled */
            q = parse_num(q + 2, eol, &e.id, &ok);
        } else if (WORD("a") || WORD("ax") || WORD("ag") || WORD("ao") || WORD("ap") || WORD("ad")) {
            e.kind = wl == 1         ? ALLOC_TR_ALLOC
                     : q[1] == 'x' ? ALLOC_TR_ALLOC_OTHER
                     : q[1] == 'g' ? ALLOC_TR_ALLOC_SERVED
                     : q[1] == 'p' ? ALLOC_TR_ALLOC_PRIVATE
                     : q[1] == 'd' ? ALLOC_TR_ALLOC_DRIVER
                                   : ALLOC_TR_ALLOC_FAILED;
            q = parse_num(q + wl, eol, &e.id, &ok);
            q = parse_num(q, eol, &e.size, &ok2);
            ok = ok && ok2;
            const char *r = skip_ws(q, eol);
            if (ok && r < eol && *r != '#') q = parse_num(r, eol, &e.stream, &ok);
            /* a private pool is named by its key: 0 names none */
            if (e.kind == ALLOC_TR_ALLOC_PRIVATE && !e.stream) ok = false;
        } else if (WORD("pr") || WORD("cb") || WORD("ce")) {
            e.kind = q[0] == 'p'   ? ALLOC_TR_POOL_RELEASE
                     : q[1] == 'b' ? ALLOC_TR_CAPTURE_BEGIN
                                   : ALLOC_TR_CAPTURE_END;
            q = parse_num(q + 2, eol, &e.stream, &ok);
            if (!e.stream) ok = false; /* as `ap`: 0 names no pool */
        } else if (WORD("f")) {
            e.kind = ALLOC_TR_FREE;
            q = parse_num(q + 1, eol, &e.id, &ok);
        } else if (WORD("e")) {
            e.kind = ALLOC_TR_EMPTY_CACHE;
            q++;
        } else if (WORD("l")) {
            e.kind = ALLOC_TR_LIMIT;
            q = parse_num(q + 1, eol, &e.size, &ok);
        } else {
#undef WORD
            free(t.v);
            return perr(err, errlen,
                        "line %zu: unknown event (expected " TRACE_LINE_FORMS ")",
                        line);
        }
        q = skip_ws(q, eol);
        if (!ok || (q < eol && *q != '#')) {
            free(t.v);
            return perr(err, errlen,
                        "line %zu: bad or missing number (expected " TRACE_LINE_FORMS ")",
                        line);
        }
        if (!tv_push(&t, e)) {
            free(t.v);
            return ALLOC_ERR_NOMEM;
        }
        p = eol + 1;
    }
    *events = t.v;
    *n = t.n;
    return ALLOC_OK;
}

int alloc_trace_load(const char *path, alloc_trace_event_t **events, size_t *n, char *err,
                     size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) return perr(err, errlen, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    bool rerr = ferror(f);
    fclose(f);
    if (!buf) return ALLOC_ERR_NOMEM;
    if (rerr) {
        free(buf);
        return perr(err, errlen, "%s: read error", path);
    }
    char inner[768] = ""; /* the longest message lists every line form (TRACE_LINE_FORMS) */
    int rc = alloc_trace_parse(buf, len, events, n, inner, sizeof(inner));
    free(buf);
    if (rc) return perr(err, errlen, "%s: %s", path, inner);
    return ALLOC_OK;
}

int alloc_trace_write(const char *path, const alloc_trace_event_t *ev, size_t n)
{
    FILE *f = fopen(path, "w");
    if (!f) return ALLOC_ERR_INVALID;
    for (size_t i = 0; i < n; i++) {
        switch (ev[i].kind) {
        case ALLOC_TR_ALLOC:
        case ALLOC_TR_ALLOC_OTHER:
        case ALLOC_TR_ALLOC_SERVED:
        case ALLOC_TR_ALLOC_FAILED:
        case ALLOC_TR_ALLOC_PRIVATE:
        case ALLOC_TR_ALLOC_DRIVER: {
            const char *w = ev[i].kind == ALLOC_TR_ALLOC          ? "a"
                            : ev[i].kind == ALLOC_TR_ALLOC_OTHER   ? "ax"
                            : ev[i].kind == ALLOC_TR_ALLOC_SERVED  ? "ag"
                            : ev[i].kind == ALLOC_TR_ALLOC_DRIVER  ? "ad"
                            : ev[i].kind == ALLOC_TR_ALLOC_PRIVATE ? "ap"
                                                                   : "ao";
            if (ev[i].stream)
                fprintf(f, "%s %llu %llu %llu\n", w, (unsigned long long)ev[i].id,
                        (unsigned long long)ev[i].size, (unsigned long long)ev[i].stream);
            else
                fprintf(f, "%s %llu %llu\n", w, (unsigned long long)ev[i].id,
                        (unsigned long long)ev[i].size);
            break;
        }
        case ALLOC_TR_RECORD_STREAM:
            fprintf(f, "rs %llu %llu\n", (unsigned long long)ev[i].id,
                    (unsigned long long)ev[i].stream);
            break;
        case ALLOC_TR_FREE_DONE:
            fprintf(f, "%s %llu\n", ev[i].size ? "fy" : "fc", (unsigned long long)ev[i].id);
            break;
        case ALLOC_TR_MARKER_RECORD:
        case ALLOC_TR_MARKER_DONE:
            fprintf(f, "%s %llu", ev[i].kind == ALLOC_TR_MARKER_RECORD ? "mr" : "md",
                    (unsigned long long)ev[i].stream);
            if (ev[i].size) fprintf(f, " %llu", (unsigned long long)ev[i].size);
            fputc('\n', f);
            break;
        case ALLOC_TR_SYNC:
            if (ev[i].id)
                fprintf(f, "sy %llu %llu\n", (unsigned long long)ev[i].size, (unsigned long long)ev[i].id);
            else if (ev[i].size)
                fprintf(f, "sy %llu\n", (unsigned long long)ev[i].size);
            else
                fputs("sy\n", f);
            break;
        case ALLOC_TR_SYNC_RESTART:
            if (ev[i].id)
                fprintf(f, "sr %llu\n", (unsigned long long)ev[i].id);
            else
                fputs("sr\n", f);
            break;
        case ALLOC_TR_WAIT:
            if (ev[i].size)
                fprintf(f, "sw %llu %llu %llu\n", (unsigned long long)ev[i].id, (unsigned long long)ev[i].size,
                        (unsigned long long)ev[i].stream);
            else
                fprintf(f, "sw %llu\n", (unsigned long long)ev[i].id);
            break;
        case ALLOC_TR_STREAM_FORGET:
            fprintf(f, "sf %llu\n", (unsigned long long)ev[i].stream);
            break;
        case ALLOC_TR_FREE_SYNCED:
            fprintf(f, "fs %llu\n", (unsigned long long)ev[i].id);
            break;
        case ALLOC_TR_POOL_RELEASE:
            fprintf(f, "pr %llu\n", (unsigned long long)ev[i].stream);
            break;
        case ALLOC_TR_CAPTURE_BEGIN:
        case ALLOC_TR_CAPTURE_END:
            fprintf(f, "%s %llu\n", ev[i].kind == ALLOC_TR_CAPTURE_BEGIN ? "cb" : "ce",
                    (unsigned long long)ev[i].stream);
            break;
        case ALLOC_TR_FREE:
            fprintf(f, "f %llu\n", (unsigned long long)ev[i].id);
            break;
        case ALLOC_TR_LIMIT:
            fprintf(f, "l %llu\n", (unsigned long long)ev[i].size);
            break;
        case ALLOC_TR_FREE_ASYNC:
            fprintf(f, "fa %llu %llu\n", (unsigned long long)ev[i].id,
                    (unsigned long long)ev[i].stream);
            break;
        default:
            fprintf(f, "e\n");
            break;
        }
    }
    return fclose(f) ? ALLOC_ERR_INVALID : ALLOC_OK;
}

/* ---- synthetic transformer traces ------------------------------------------------------------ */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t A(tv_t *t, uint64_t size)
{
    uint64_t id = ++t->next_id;
    tv_push(t, (alloc_trace_event_t){.id = id, .size = size, .kind = ALLOC_TR_ALLOC});
    return id;
}

static void F(tv_t *t, uint64_t id)
{
    tv_push(t, (alloc_trace_event_t){.id = id, .kind = ALLOC_TR_FREE});
}

enum { SY_L = 12, SY_H = 768, SY_NH = 12, SY_V = 50304, SY_B = 8, SY_TMAX = 1024 };

/* Saved activations of one layer (freed in backward). */
typedef struct {
    uint64_t ln1, m1, r1, qkv, lse, atty, attproj, res1, ln2, m2, r2, fch, gelu, fcproj, res2;
} layer_act_t;

int alloc_trace_synth(const char *name, unsigned steps, uint64_t seed, alloc_trace_event_t **events,
                      size_t *n)
{
    if (!name || !events || !n) return ALLOC_ERR_INVALID;
    bool jitter;
    if (!strcmp(name, "fixed"))
        jitter = false;
    else if (!strcmp(name, "jitter"))
        jitter = true;
    else
        return ALLOC_ERR_INVALID;
    if (!steps) steps = 20;
    uint64_t rng = seed * 0x2545F4914F6CDD1Dull + 12345;
    tv_t t = {0};
    const uint64_t H = SY_H, V = SY_V, B = SY_B, bf = 2, f32 = 4;

    /* parameters (bf16): embeddings, per layer weights and biases, final layer norm */
    uint64_t psz[4 + SY_L * 12];
    size_t np = 0;
    psz[np++] = V * H * bf;
    psz[np++] = SY_TMAX * H * bf;
    for (int l = 0; l < SY_L; l++) {
        psz[np++] = H * bf;         /* ln1 w */
        psz[np++] = H * bf;         /* ln1 b */
        psz[np++] = 3 * H * H * bf; /* qkv w */
        psz[np++] = 3 * H * bf;     /* qkv b */
        psz[np++] = H * H * bf;     /* attproj w */
        psz[np++] = H * bf;         /* attproj b */
        psz[np++] = H * bf;         /* ln2 w */
        psz[np++] = H * bf;         /* ln2 b */
        psz[np++] = 4 * H * H * bf; /* fc w */
        psz[np++] = 4 * H * bf;     /* fc b */
        psz[np++] = 4 * H * H * bf; /* fcproj w */
        psz[np++] = H * bf;         /* fcproj b */
    }
    psz[np++] = H * bf; /* lnf w */
    psz[np++] = H * bf; /* lnf b */
    uint64_t params[4 + SY_L * 12], grads[4 + SY_L * 12];
    for (size_t i = 0; i < np; i++)
        params[i] = A(&t, psz[i]);

    layer_act_t act[SY_L];
    for (unsigned s = 0; s < steps; s++) {
        uint64_t T = jitter ? 64 * (2 + splitmix(&rng) % 15) : SY_TMAX; /* 128..1024 */
        uint64_t BT = B * T;
        uint64_t in = A(&t, BT * f32), tg = A(&t, BT * f32);
        /* forward: activations [BT, H] etc. are saved for backward */
        uint64_t enc = A(&t, BT * H * bf);
        for (int l = 0; l < SY_L; l++) {
            layer_act_t *x = &act[l];
            x->ln1 = A(&t, BT * H * bf);
            x->m1 = A(&t, BT * f32);
            x->r1 = A(&t, BT * f32);
            x->qkv = A(&t, BT * 3 * H * bf);
            uint64_t scratch = A(&t, BT * 3 * H * bf); /* q, k, v permuted */
            x->lse = A(&t, B * SY_NH * T * f32);
            x->atty = A(&t, BT * H * bf);
            F(&t, scratch);
            x->attproj = A(&t, BT * H * bf);
            x->res1 = A(&t, BT * H * bf);
            x->ln2 = A(&t, BT * H * bf);
            x->m2 = A(&t, BT * f32);
            x->r2 = A(&t, BT * f32);
            x->fch = A(&t, BT * 4 * H * bf);
            x->gelu = A(&t, BT * 4 * H * bf);
            x->fcproj = A(&t, BT * H * bf);
            x->res2 = A(&t, BT * H * bf);
        }
        uint64_t lnf = A(&t, BT * H * bf), mf = A(&t, BT * f32), rf = A(&t, BT * f32);
        uint64_t logits = A(&t, BT * V * bf);
        uint64_t loss = A(&t, BT * f32);
        /* backward: gradients flow down, saved activations are freed in reverse */
        uint64_t dlogits = A(&t, BT * V * bf);
        F(&t, logits);
        if (s == 0) {
            grads[np - 1] = A(&t, psz[np - 1]);
            grads[np - 2] = A(&t, psz[np - 2]);
            grads[0] = A(&t, psz[0]);
        }
        uint64_t dres = A(&t, BT * H * bf);
        F(&t, dlogits);
        F(&t, rf);
        F(&t, mf);
        F(&t, lnf);
        for (int l = SY_L - 1; l >= 0; l--) {
            layer_act_t *x = &act[l];
            if (s == 0)
                for (int k = 11; k >= 0; k--)
                    grads[2 + l * 12 + k] = A(&t, psz[2 + l * 12 + k]);
            uint64_t d1 = A(&t, BT * 4 * H * bf);
            F(&t, x->res2);
            F(&t, x->fcproj);
            uint64_t d2 = A(&t, BT * 4 * H * bf);
            F(&t, x->gelu);
            F(&t, d1);
            F(&t, x->fch);
            uint64_t dln2 = A(&t, BT * H * bf);
            F(&t, d2);
            F(&t, x->r2);
            F(&t, x->m2);
            F(&t, x->ln2);
            uint64_t dn = A(&t, BT * H * bf);
            F(&t, dres);
            dres = dn;
            F(&t, dln2);
            uint64_t datty = A(&t, BT * H * bf);
            F(&t, x->res1);
            F(&t, x->attproj);
            uint64_t dqkv = A(&t, BT * 3 * H * bf);
            F(&t, x->atty);
            F(&t, x->lse);
            F(&t, datty);
            uint64_t dln1 = A(&t, BT * H * bf);
            F(&t, x->qkv);
            F(&t, dqkv);
            F(&t, x->r1);
            F(&t, x->m1);
            F(&t, x->ln1);
            dn = A(&t, BT * H * bf);
            F(&t, dres);
            dres = dn;
            F(&t, dln1);
        }
        if (s == 0) grads[1] = A(&t, psz[1]);
        F(&t, dres);
        F(&t, enc);
        F(&t, loss);
        F(&t, tg);
        F(&t, in);
        /* optimizer: AdamW state (fp32 m and v) appears at the first step */
        if (s == 0)
            for (size_t i = 0; i < np; i++) {
                A(&t, psz[i] * 2);
                A(&t, psz[i] * 2);
            }
        uint64_t norm = A(&t, 4096 * f32);
        F(&t, norm);
    }
    (void)grads;
    (void)params;
    if (t.oom) {
        free(t.v);
        return ALLOC_ERR_NOMEM;
    }
    *events = t.v;
    *n = t.n;
    return ALLOC_OK;
}

/* ---- replay ---------------------------------------------------------------------------------- */

/* What the replay keeps per live trace id: one slot of the id map, key and value side by side
 * (one cache line touched per lookup, where three arrays cost three misses on a large trace). */
/* outside the allocator; has record_stream uses; in a private pool (stream: the pool's key) */
enum { RL_OTHER = 1, RL_USES = 2, RL_PRIVATE = 4, RL_DRIVER = 8 };

typedef struct {
    uint64_t id;
    uint64_t ptr;
    uint64_t size; /* rounded block size (or the exact size of an `ax` allocation) */
    uint64_t requested;
    uint64_t stream;
    uint8_t flags;
    uint8_t used; /* the slot holds an id */
} live_t;

typedef struct {
    live_t *v;
    size_t cap, count;
} idmap_t;

static size_t id_hash(uint64_t id, size_t cap)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static int idmap_init(idmap_t *m, size_t cap)
{
    m->cap = cap;
    m->count = 0;
    m->v = calloc(cap, sizeof(*m->v));
    return m->v ? 0 : -1;
}

static void idmap_free(idmap_t *m)
{
    free(m->v);
}

static int idmap_put(idmap_t *m, const live_t *v);

static int idmap_grow(idmap_t *m)
{
    idmap_t n;
    if (idmap_init(&n, m->cap * 2)) {
        idmap_free(&n);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->v[i].used) idmap_put(&n, &m->v[i]);
    idmap_free(m);
    *m = n;
    return 0;
}

/* Puts v under v->id. Returns 1 if the id was already present (value replaced), 0 if inserted,
 * -1 no memory. */
static int idmap_put(idmap_t *m, const live_t *v)
{
    if ((m->count + 1) * 2 > m->cap && idmap_grow(m)) return -1;
    size_t i = id_hash(v->id, m->cap);
    while (m->v[i].used && m->v[i].id != v->id)
        i = (i + 1) & (m->cap - 1);
    int had = m->v[i].used;
    m->v[i] = *v;
    m->v[i].used = 1;
    m->count += !had;
    return had;
}

static live_t *idmap_get(idmap_t *m, uint64_t id)
{
    size_t mask = m->cap - 1, i = id_hash(id, m->cap);
    while (m->v[i].used && m->v[i].id != id)
        i = (i + 1) & mask;
    return m->v[i].used ? &m->v[i] : NULL;
}

static bool idmap_take(idmap_t *m, uint64_t id, live_t *out)
{
    size_t mask = m->cap - 1, i = id_hash(id, m->cap);
    while (m->v[i].used && m->v[i].id != id)
        i = (i + 1) & mask;
    if (!m->v[i].used) return false;
    *out = m->v[i];
    /* backward-shift delete */
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->v[j].used) break;
        size_t h = id_hash(m->v[j].id, m->cap);
        bool stay = (i < j) ? (h > i && h <= j) : (h > i || h <= j);
        if (stay) continue;
        m->v[i] = m->v[j];
        i = j;
    }
    m->v[i].used = 0;
    m->count--;
    return true;
}

/* ---- slots: the live allocations numbered densely, once per trace */

int alloc_trace_slots(const alloc_trace_event_t *ev, size_t n, uint32_t **slots, uint32_t *nslots)
{
    *slots = NULL;
    *nslots = 0;
    if (n >= ALLOC_NO_SLOT) return ALLOC_ERR_NOMEM; /* slots are 32-bit */
    uint32_t *s = malloc((n ? n : 1) * sizeof(*s));
    uint32_t *spare = malloc((n ? n : 1) * sizeof(*spare)); /* freed slots, the last on top */
    idmap_t ids; /* live id -> its slot (in .ptr) */
    if (!s || !spare || idmap_init(&ids, 1024)) {
        free(s), free(spare);
        if (s && spare) idmap_free(&ids);
        return ALLOC_ERR_NOMEM;
    }
    uint32_t used = 0;
    size_t nspare = 0;
    for (size_t i = 0; i < n; i++) {
        const alloc_trace_event_t *e = &ev[i];
        live_t l = {0};
        s[i] = ALLOC_NO_SLOT;
        switch (e->kind) {
        case ALLOC_TR_ALLOC:
        case ALLOC_TR_ALLOC_OTHER:
        case ALLOC_TR_ALLOC_SERVED:
        case ALLOC_TR_ALLOC_FAILED:
        case ALLOC_TR_ALLOC_PRIVATE:
        case ALLOC_TR_ALLOC_DRIVER: {
            const live_t *x = idmap_get(&ids, e->id);
            /* an id allocated again while live keeps its slot, as the table keeps its key */
            if (x) {
                s[i] = (uint32_t)x->ptr;
                break;
            }
            s[i] = nspare ? spare[--nspare] : used++;
            l.id = e->id;
            l.ptr = s[i];
            if (idmap_put(&ids, &l) < 0) goto nomem;
            break;
        }
        case ALLOC_TR_RECORD_STREAM: {
            const live_t *x = idmap_get(&ids, e->id);
            if (x) s[i] = (uint32_t)x->ptr;
            break;
        }
        case ALLOC_TR_FREE:
        case ALLOC_TR_FREE_ASYNC:
        case ALLOC_TR_FREE_SYNCED:
            if (idmap_take(&ids, e->id, &l)) s[i] = spare[nspare++] = (uint32_t)l.ptr;
            break;
        default:
            break;
        }
    }
    idmap_free(&ids);
    free(spare);
    *slots = s;
    *nslots = used;
    return ALLOC_OK;
nomem:
    idmap_free(&ids);
    free(spare);
    free(s);
    return ALLOC_ERR_NOMEM;
}

/* The replay's live allocations: the id table, or the slot array (alloc_trace_slots). A slot's
 * entry is only ever its own id's (the replay's live ids are among the numbering's: an allocation
 * the replay failed never entered either), so a slot answers as the table would for its id. */
typedef struct {
    idmap_t ids;
    live_t *v; /* by slot; NULL: ids */
    const uint32_t *slot;
} lives_t;

/* field by field: a struct copy moves 16 bytes at a time, and a 16-byte load of what was just
 * stored 8 (or 1) bytes at a time waits for those stores to land (an allocation is often freed
 * at the next event) */
static inline void live_copy(live_t *to, const live_t *from)
{
    to->id = from->id;
    to->ptr = from->ptr;
    to->size = from->size;
    to->requested = from->requested;
    to->stream = from->stream;
    to->flags = from->flags;
}

static int lives_put(lives_t *m, size_t i, const live_t *l)
{
    if (!m->v) return idmap_put(&m->ids, l);
    live_t *x = &m->v[m->slot[i]];
    int had = x->used;
    live_copy(x, l);
    x->used = 1;
    return had;
}

static live_t *lives_get(lives_t *m, size_t i, uint64_t id)
{
    if (!m->v) return idmap_get(&m->ids, id);
    uint32_t s = m->slot[i];
    return s != ALLOC_NO_SLOT && m->v[s].used ? &m->v[s] : NULL;
}

static bool lives_take(lives_t *m, size_t i, uint64_t id, live_t *out)
{
    if (!m->v) return idmap_take(&m->ids, id, out);
    uint32_t s = m->slot[i];
    if (s == ALLOC_NO_SLOT || !m->v[s].used) return false;
    live_copy(out, &m->v[s]);
    m->v[s].used = 0;
    return true;
}

static void lives_free(lives_t *m)
{
    if (m->v) free(m->v);
    else idmap_free(&m->ids);
}

/* A free held back by record_stream: lands at its `fc`, or after `lag` more allocations. */
typedef struct {
    uint64_t id, ptr, stream;
    bool async;
    unsigned waited; /* allocations seen since the free */
} held_t;

typedef struct {
    alloc_t *a;
    held_t *v;
    size_t n, cap;
} heldv_t;

static void held_land(heldv_t *h, size_t i)
{
    held_t x = h->v[i];
    if (x.async)
        alloc_free_async(h->a, x.ptr, x.stream);
    else
        alloc_free(h->a, x.ptr);
    h->v[i] = h->v[--h->n];
}

/* A held free the recording's synchronization landed (`fy`): settled, as the run's was */
static void fy_land(alloc_t *a, const held_t *x);
static void held_land_synced(heldv_t *h, size_t i)
{
    held_t x = h->v[i];
    fy_land(h->a, &x);
    h->v[i] = h->v[--h->n];
}

/* Moves h->v[i] to the end of the list *v (n held, room for *cap, grown from first): 0, or -1
 * where there is no memory (h->v[i] stays in h). */
static int held_move(heldv_t *h, size_t i, held_t **v, size_t *n, size_t *cap, size_t first)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : first;
        held_t *nv = realloc(*v, nc * sizeof(*nv));
        if (!nv) return -1;
        *v = nv, *cap = nc;
    }
    (*v)[(*n)++] = h->v[i];
    h->v[i] = h->v[--h->n];
    return 0;
}

static void held_land_all(heldv_t *h)
{
    while (h->n)
        held_land(h, h->n - 1);
}

/* The trace's `fc` lines as (id, event index), sorted: a free at index i is held when its id has
 * an `fc` after i (the recording says its block became reusable only there). */
typedef struct {
    uint64_t id, at;
} fc_t;

static int fc_cmp(const void *x, const void *y)
{
    const fc_t *a = x, *b = y;
    if (a->id != b->id) return a->id < b->id ? -1 : 1;
    return a->at < b->at ? -1 : a->at > b->at;
}

/* 1 when id has an `fc` at an index above i */
static int fc_after(const fc_t *v, size_t n, uint64_t id, uint64_t i)
{
    size_t lo = 0, hi = n; /* first entry >= (id, i + 1) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].id < id || (v[mid].id == id && v[mid].at <= i))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo].id == id;
}

/* A replay under way (alloc_replay_begin .. alloc_replay_end): the allocator, the live
 * allocations and the counters that alloc_replay_feed carries from one piece of the trace to the
 * next. */
struct alloc_replay_run {
    alloc_replay_opts_t o;
    alloc_config_t c;
    bool have_cfg;
    alloc_mem_backend_t *mb;
    const alloc_backend_t *be;
    alloc_t *a;
    lives_t ids;
    bool bypass; /* under the pytorch presets, `ax` allocations are the device's */
    bool exact;  /* the trace says when frees complete (`fc`): a free is held exactly until its `fc` */
    fc_t *fcv;
    size_t nfc;
    heldv_t held;
    /* the private pools a `pr` line released: their blocks' frees are no longer ordered on the
     * pool's key (a free there would make the pool anew) */
    uint64_t *gone;
    size_t ngone, capgone;
    size_t cur_alloc, cur_req, cur_other;
    /* ALLOC_TR_ALLOC_DRIVER bytes live, and the highest reserved + those seen */
    size_t cur_driver, peak_with_driver;
    uint64_t recovered; /* OOMs that landing held frees turned into successes */
    uint64_t fed;       /* events fed so far: the next one's index in the whole trace */
    bool stopped;       /* an OOM, keep_going or an error ended it: what is fed is not replayed */
    int rc;
    char err[256];
    double seconds; /* in the replay loop, over the pieces */
    alloc_replay_result_t out;
    /* mk_scripted: the marker and sync lines made inside the allocation that follows (a step
     * set), held until the replay's allocation reaches their step (script_step) */
    alloc_trace_event_t *mq;
    size_t mqn, mqcap;
    /* waits (`sw`, mk_scripted): the operations waiting as the run's did, each on a thread of its
     * own that runs only while the replay's thread waits for it (wmu, wcv: one runs at a time) */
    struct waiter *wl;
    struct waiter *wcur;    /* the one running now (NULL: the replay's thread) */
    struct waiter *armed;   /* its `sy` / `sr` came: it goes on at the end of its part (its line) */
    struct waiter *unkeyed; /* an `e` waiting for the `sw` that numbers its wait */
    bool wready;
    /* a `sw` came: the trace says where each synchronization of the run's landed frees (`fy`),
     * so an OOM or an `e` lands no held free of its own (PyTorch's model, for older traces) */
    bool saw_wait;
    /* `fy` lines not landed yet: the frees the synchronization whose `sy` / `sr` follows them
     * landed, landed by the replay's where it waits for that line (wait_land) */
    held_t *fy;
    size_t nfy, capfy;
    /* waits begun outside an allocation (`sw <wait>`: a stream forgotten, a free's release),
     * which the replay makes in place at their line: the wait's number and the free sequence
     * at its start, what their `sy` settles */
    uint64_t (*w0)[2];
    size_t nw0, capw0;
    pthread_mutex_t wmu;
    pthread_cond_t wcv;
};

/* ---- waits: an operation whose synchronization dropped the lock in the run (`sw` .. `sy`)
 *
 * In the run the allocation ran up to its synchronization under the lock, other threads ran
 * while it waited, and it went on after. A replay that made it whole at its line lands at its
 * synchronization the frees other threads made during the wait, and they allocate from a cache
 * the allocation's first part had not released yet. So the replay runs the part before the wait
 * at the `sw` line, the lines of the wait while it is suspended in its synchronization (on a
 * thread of its own, which waits there: alloc_t.wait_script), and the rest where the run's ended
 * (the first allocation line or `sw` after its `sy`: the run held the lock from its `sy` on). */
enum { W_RUN, W_WAIT, W_DONE };
typedef struct waiter {
    alloc_replay_run_t *r;
    pthread_t th;
    bool started, empty; /* empty: an empty_cache, else an allocation of size on stream */
    bool in_place;       /* no more suspensions: a synchronization is made where it comes */
    int state;           /* W_* */
    int restart;         /* what its end said: 1 `sr`, 0 `sy` */
    uint64_t wid;        /* the wait it is in (0: not numbered yet) */
    held_t *fy;          /* the frees its synchronization lands (`fy` before its end) */
    size_t nfy;
    /* the frees its new start landed by their events (`fc` after its `sr`): the run's landed
     * them with the gc clock back at the allocation's start, so they carry that stamp */
    held_t *fc;
    size_t nfc, capfc;
    size_t size;
    uint64_t stream;
    int rc;
    uint64_t ptr;
    alloc_malloc_info_t info;
    alloc_oom_info_t oom;
    struct waiter *next;
} waiter_t;

/* A free the recording's synchronization landed (`fy`): settled, as the run's was */
static void fy_land(alloc_t *a, const held_t *x)
{
    if (x->async) alloc_note_stream(a, (uintptr_t)x->stream); /* the stream the free named */
    alloc_free_ex(a, x->ptr, false, ALLOC_FREE_SYNCED, NULL);
}

/* The `fy` lines gathered so far, landed where they come (no wait of the replay's ends at the
 * line after them). */
static void fy_flush(alloc_replay_run_t *r)
{
    for (size_t k = 0; k < r->nfy; k++)
        fy_land(r->a, &r->fy[k]);
    r->nfy = 0;
}

/* alloc_t.wait_land: the running waiter's synchronization lands what the run's did, after the gc
 * clock went back to the allocation's start, so that those blocks carry its stamp as the run's */
static size_t w_land(void *user)
{
    alloc_replay_run_t *r = user;
    struct waiter *w = r->wcur;
    if (!w) return 0;
    size_t n = w->nfy;
    for (size_t k = 0; k < n; k++)
        fy_land(r->a, &w->fy[k]);
    free(w->fy);
    w->fy = NULL, w->nfy = 0;
    for (size_t k = 0; k < w->nfc; k++) { /* after: the run's new start landed them */
        if (w->fc[k].async)
            alloc_free_async(r->a, w->fc[k].ptr, w->fc[k].stream);
        else
            alloc_free(r->a, w->fc[k].ptr);
    }
    w->nfc = 0;
    return n;
}

static void w_op(waiter_t *w)
{
    alloc_t *a = w->r->a;
    if (w->empty) {
        alloc_empty_cache(a);
        return;
    }
    w->rc = alloc_malloc_ex(a, w->size, (uintptr_t)w->stream, &w->ptr, &w->info);
    if (w->rc == ALLOC_ERR_OOM) alloc_last_oom(a, &w->oom);
}

static void *w_main(void *arg)
{
    waiter_t *w = arg;
    alloc_replay_run_t *r = w->r;
    pthread_mutex_lock(&r->wmu);
    while (w->state != W_RUN)
        pthread_cond_wait(&r->wcv, &r->wmu);
    pthread_mutex_unlock(&r->wmu);
    w_op(w);
    pthread_mutex_lock(&r->wmu);
    w->state = W_DONE;
    pthread_cond_broadcast(&r->wcv);
    pthread_mutex_unlock(&r->wmu);
    return NULL;
}

/* Let w run (start it, or resume it in its synchronization) until it waits again or is done.
 * Without a thread it runs here, every synchronization in place. */
static void w_run(alloc_replay_run_t *r, waiter_t *w)
{
    pthread_mutex_lock(&r->wmu);
    r->wcur = w;
    w->state = W_RUN;
    if (!w->started) {
        w->started = true;
        if (pthread_create(&w->th, NULL, w_main, w)) {
            w->started = false, w->in_place = true;
            pthread_mutex_unlock(&r->wmu);
            w_op(w);
            pthread_mutex_lock(&r->wmu);
            w->state = W_DONE;
        }
    } else {
        pthread_cond_broadcast(&r->wcv);
    }
    while (w->state == W_RUN)
        pthread_cond_wait(&r->wcv, &r->wmu);
    r->wcur = NULL;
    pthread_mutex_unlock(&r->wmu);
    if (w->state == W_DONE && w->started) {
        pthread_join(w->th, NULL);
        w->started = false;
    }
}

/* Run w to its end, synchronizing in place from here. */
static void w_finish(alloc_replay_run_t *r, waiter_t *w)
{
    w->in_place = true;
    while (w->state != W_DONE)
        w_run(r, w);
}

/* alloc_t.wait_script: a synchronization of the replay's allocator dropped its lock. On a
 * waiter's thread it suspends until the replay reaches the end of the run's wait. */
static int w_script(void *user)
{
    alloc_replay_run_t *r = user;
    pthread_mutex_lock(&r->wmu);
    waiter_t *w = r->wcur;
    if (!w || w->in_place) {
        pthread_mutex_unlock(&r->wmu);
        return -1;
    }
    w->state = W_WAIT;
    w->wid = 0, w->restart = 0;
    pthread_cond_broadcast(&r->wcv);
    while (w->state != W_RUN)
        pthread_cond_wait(&r->wcv, &r->wmu);
    int restart = w->restart;
    pthread_mutex_unlock(&r->wmu);
    return restart;
}

static waiter_t *w_new(alloc_replay_run_t *r)
{
    waiter_t *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->r = r;
    w->next = r->wl;
    r->wl = w;
    return w;
}

static void w_drop(alloc_replay_run_t *r, waiter_t *w)
{
    for (waiter_t **p = &r->wl; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    if (r->armed == w) r->armed = NULL;
    if (r->unkeyed == w) r->unkeyed = NULL;
    free(w->fy);
    free(w->fc);
    free(w);
}

/* An `sw` line: the wait of the allocation whose part before it ends here. */
static void w_line_wait(alloc_replay_run_t *r, const alloc_trace_event_t *e)
{
    r->saw_wait = true;
    waiter_t *w = r->armed;
    if (w) { /* its next wait: the run held the lock from its last `sy` to here */
        r->armed = NULL;
        w_run(r, w);
    } else if (r->unkeyed) { /* the `e` just started */
        w = r->unkeyed;
        r->unkeyed = NULL;
    } else if (e->size) { /* an allocation's first wait: its part before it, now */
        if (!(w = w_new(r))) return; /* out of host memory: it is made whole at its line */
        w->size = (size_t)e->size, w->stream = e->stream;
        w_run(r, w);
    } else { /* outside an allocation (a forget, a free's release): made at its own line; its
              * `sy` settles only what was freed before this line */
        if (r->nw0 == r->capw0) {
            size_t nc = r->capw0 ? r->capw0 * 2 : 8;
            uint64_t(*nv)[2] = realloc(r->w0, nc * sizeof(*nv));
            if (!nv) return; /* out of host memory: its `sy` settles every free before it */
            r->w0 = nv, r->capw0 = nc;
        }
        r->w0[r->nw0][0] = e->id, r->w0[r->nw0][1] = a_free_seq(r->a);
        r->nw0++;
        return;
    }
    if (w->state == W_WAIT) w->wid = e->id;
}

/* A `sy <step> <wait>` / `sr <wait>`: the end of a wait. false: no operation of the replay's
 * waits in it (the line settles as an older trace's does). */
static bool w_line_end(alloc_replay_run_t *r, const alloc_trace_event_t *e)
{
    for (size_t k = 0; k < r->nw0; k++)
        if (r->w0[k][0] == e->id) { /* a wait outside an allocation */
            fy_flush(r);
            a_sync_scripted_upto(r->a, r->w0[k][1]);
            r->w0[k][0] = r->w0[r->nw0 - 1][0], r->w0[k][1] = r->w0[r->nw0 - 1][1];
            r->nw0--;
            return true;
        }
    waiter_t *w = r->wl;
    while (w && !(w->state == W_WAIT && w->wid == e->id))
        w = w->next;
    if (!w) return false;
    w->restart = e->kind == ALLOC_TR_SYNC_RESTART;
    free(w->fy); /* its synchronization lands the `fy` lines just before (w_land) */
    w->fy = r->fy, w->nfy = r->nfy;
    r->fy = NULL, r->nfy = r->capfy = 0;
    if (w->empty) { /* empty_cache's release follows its synchronization at once */
        w_finish(r, w);
        w_drop(r, w);
    } else {
        r->armed = w;
    }
    return true;
}

/* An allocation line: the waiting allocation it ends, run to its end (true, its result in w's
 * fields; the caller drops w), or NULL: none, the line allocates itself. */
static waiter_t *w_claim(alloc_replay_run_t *r, const alloc_trace_event_t *e)
{
    waiter_t *w = r->armed;
    if (w) {
        r->armed = NULL;
        w_finish(r, w);
        return w;
    }
    /* one that did not wait where the run did: done at its `sw`, taken at its own line */
    for (w = r->wl; w; w = w->next)
        if (!w->empty && w->state == W_DONE && w->size == e->size && w->stream == e->stream) return w;
    return NULL;
}

/* The end of the replay: whatever still waits goes on to its end. */
static void w_end(alloc_replay_run_t *r)
{
    while (r->wl) {
        waiter_t *w = r->wl;
        if (w->state != W_DONE) w_finish(r, w);
        w_drop(r, w);
    }
    fy_flush(r);
    free(r->fy);
    free(r->w0);
    if (r->wready) {
        pthread_mutex_destroy(&r->wmu);
        pthread_cond_destroy(&r->wcv);
    }
}

/* A marker or sync line, taken now for what the recording's allocator learnt (mk_scripted). */
static void script_apply(alloc_t *a, const alloc_trace_event_t *e)
{
    if (e->kind == ALLOC_TR_SYNC || e->kind == ALLOC_TR_SYNC_RESTART)
        a_sync_scripted(a);
    else
        a_marker_scripted(a, (uintptr_t)e->stream, e->kind == ALLOC_TR_MARKER_DONE);
}

/* The allocation in progress reached settle point `step` (alloc_t.mk_script; UINT_MAX: it
 * returned, or started over): the lines held for that step or an earlier one, in their order. */
static void script_step(void *user, unsigned step)
{
    alloc_replay_run_t *r = user;
    size_t j = 0;
    for (size_t k = 0; k < r->mqn; k++)
        if (r->mq[k].size <= step)
            script_apply(r->a, &r->mq[k]);
        else
            r->mq[j++] = r->mq[k];
    r->mqn = j;
}

/* The allocation returned with lines held for steps it did not reach (a replay whose
 * allocations differ from the run's: a limit lifted): the markers are taken now, so that each `md` still
 * finds its `mr`; a synchronization the replay's allocation never reached is one it did not make
 * (the run's OOM path under a limit the replay does not have), and is left out. The recorded
 * configuration's replay reaches every step. */
static void script_end(alloc_replay_run_t *r)
{
    for (size_t k = 0; k < r->mqn; k++)
        if (r->mq[k].kind != ALLOC_TR_SYNC) script_apply(r->a, &r->mq[k]);
    r->mqn = 0;
}

/* A marker or sync line of the trace (mk_scripted): one made inside an allocation waits for the
 * replay's allocation to reach its step; any other is taken where it comes. */
static void script_line(alloc_replay_run_t *r, const alloc_trace_event_t *e)
{
    if (e->kind == ALLOC_TR_SYNC_RESTART) { /* the allocation starts over from here */
        script_step(r, UINT_MAX);
        script_apply(r->a, e);
        return;
    }
    if (!e->size) {
        script_apply(r->a, e);
        return;
    }
    if (r->mqn == r->mqcap) {
        size_t nc = r->mqcap ? r->mqcap * 2 : 16;
        alloc_trace_event_t *nv = realloc(r->mq, nc * sizeof(*nv));
        if (!nv) { /* out of host memory: taken now, as a trace without steps has it */
            script_apply(r->a, e);
            return;
        }
        r->mq = nv, r->mqcap = nc;
    }
    r->mq[r->mqn++] = *e;
}

/* Takes fcv (sorted, malloc'ed; NULL with nfc 0): freed here on failure, else by
 * alloc_replay_end. */
static int run_begin(const alloc_config_t *cfg, const alloc_replay_opts_t *opts, fc_t *fcv, size_t nfc,
                     alloc_replay_run_t **runp, char *err, size_t errlen)
{
    *runp = NULL;
    alloc_replay_run_t *r = calloc(1, sizeof(*r));
    if (!r) {
        free(fcv);
        return ALLOC_ERR_NOMEM;
    }
    r->fcv = fcv, r->nfc = nfc, r->exact = nfc > 0;
    r->out.oom_index = -1;
    if (opts) r->o = *opts;
    /* the replay's allocator and backend are this thread's alone: neither locks */
    alloc_mem_opts_t mo = {.capacity = r->o.capacity, .granularity = r->o.granularity,
                           .top_down = r->o.top_down, .one_thread = true};
    r->mb = alloc_mem_backend_create(&mo);
    if (!r->mb) {
        free(fcv), free(r);
        return ALLOC_ERR_NOMEM;
    }
    r->be = alloc_mem_backend(r->mb);
    r->have_cfg = cfg != NULL;
    if (cfg)
        r->c = *cfg;
    else
        alloc_config_default(&r->c);
    if (r->o.device_total) { /* the key's share of the recorded device, as a limit */
        r->c.limit = alloc_conf_limit(&r->c, r->o.device_total);
        r->c.memory_fraction = -1;
    }
    int rc = alloc_create(r->be, &r->c, &r->a);
    if (rc) {
        alloc_mem_backend_destroy(r->mb);
        free(fcv), free(r);
        return perr(err, errlen, "replay: cannot create the allocator: %s", alloc_strerror(rc));
    }
    r->a->mu.off = true;
    r->ids.slot = r->o.slots;
    if (r->o.slots ? !(r->ids.v = calloc(r->o.nslots ? r->o.nslots : 1, sizeof(*r->ids.v)))
                   : idmap_init(&r->ids.ids, 1024)) {
        lives_free(&r->ids);
        alloc_destroy(r->a);
        alloc_mem_backend_destroy(r->mb);
        free(fcv), free(r);
        return ALLOC_ERR_NOMEM;
    }
    r->bypass = cfg && cfg->policy == ALLOC_POLICY_PYTORCH;
    r->a->mk_scripted = r->o.markers; /* the trace's `mr` / `md` lines answer the queries */
    r->a->mk_script = script_step, r->a->mk_script_user = r;
    if (r->o.markers && !r->bypass && !pthread_mutex_init(&r->wmu, NULL)) {
        if (pthread_cond_init(&r->wcv, NULL)) {
            pthread_mutex_destroy(&r->wmu);
        } else { /* the trace's `sw` lines: its waits as the run's */
            r->wready = true;
            r->a->wait_script = w_script, r->a->wait_land = w_land, r->a->wait_user = r;
        }
    }
    r->held.a = r->a;
    *runp = r;
    return ALLOC_OK;
}

int alloc_replay_begin(const alloc_config_t *cfg, const alloc_replay_opts_t *opts, const alloc_trace_fc_t *fc,
                       size_t nfc, alloc_replay_run_t **run, char *err, size_t errlen)
{
    if (!run || (!fc && nfc)) return ALLOC_ERR_INVALID;
    fc_t *fcv = NULL;
    if (nfc) {
        if (!(fcv = malloc(nfc * sizeof(*fcv)))) return ALLOC_ERR_NOMEM;
        for (size_t k = 0; k < nfc; k++)
            fcv[k] = (fc_t){fc[k].id, fc[k].at};
        if (nfc > 1) qsort(fcv, nfc, sizeof(*fcv), fc_cmp);
    }
    return run_begin(cfg, opts, fcv, nfc, run, err, errlen);
}

bool alloc_replay_feed(alloc_replay_run_t *run, const alloc_trace_event_t *ev, size_t n)
{
    if (run->stopped) return false;
    if (!ev && n) {
        run->rc = perr(run->err, sizeof(run->err), "replay: event %llu: no events given",
                     (unsigned long long)run->fed);
        run->stopped = true;
        return false;
    }
    const alloc_replay_opts_t o = run->o;
    alloc_replay_result_t *out = &run->out;
    const alloc_backend_t *be = run->be;
    alloc_t *a = run->a;
    const alloc_config_t *cfg = run->have_cfg ? &run->c : NULL, c = run->c;
    const bool bypass = run->bypass, exact = run->exact;
    const fc_t *fcv = run->fcv;
    const size_t nfc = run->nfc;
    lives_t ids = run->ids;
    heldv_t held = run->held;
    size_t cur_alloc = run->cur_alloc, cur_req = run->cur_req, cur_other = run->cur_other;
    size_t cur_driver = run->cur_driver, peak_with_driver = run->peak_with_driver;
    uint64_t recovered = run->recovered;
    uint64_t *gone = run->gone;
    size_t ngone = run->ngone, capgone = run->capgone;
    int rc = ALLOC_OK;
    bool stop = false;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* ids.slot indexes the whole trace: shifted so that this piece's event k is slot[k] */
    if (ids.slot) ids.slot += run->fed;
    size_t i;
    for (i = 0; i < n; i++) {
        const alloc_trace_event_t *e = &ev[i];
        const uint64_t gi = run->fed + i; /* its index in the whole trace */
        /* the trace (and its slots) stream from memory faster than the hardware fetches them
         * ahead on its own: in a 10 M-event replay a sixth of this loop's own time (perf) was
         * the wait for each event's line */
        if (i + 16 < n) {
            __builtin_prefetch(&ev[i + 16]);
            if (ids.slot) __builtin_prefetch(&ids.slot[i + 16]);
        }
        live_t l = {0};
        /* `fy` lines the next line does not end a wait of the replay's after: landed now */
        if (run->nfy && !(e->kind == ALLOC_TR_FREE_DONE && e->size) &&
            !((e->kind == ALLOC_TR_SYNC || e->kind == ALLOC_TR_SYNC_RESTART) && e->id))
            fy_flush(run);
        /* an `e` whose synchronization no `sw` numbers (a trace without them): in place */
        if (run->unkeyed && e->kind != ALLOC_TR_WAIT) {
            waiter_t *w = run->unkeyed;
            w_finish(run, w);
            w_drop(run, w);
        }
        switch (e->kind) {
        case ALLOC_TR_ALLOC:
        case ALLOC_TR_ALLOC_OTHER:
        case ALLOC_TR_ALLOC_SERVED:
        case ALLOC_TR_ALLOC_FAILED:
        case ALLOC_TR_ALLOC_PRIVATE:
        case ALLOC_TR_ALLOC_DRIVER: {
            if (!exact)
                for (size_t k = held.n; k-- > 0;)
                    if (held.v[k].waited++ >= o.stream_lag) held_land(&held, k);
            l.requested = e->size;
            l.stream = e->stream;
            int r;
            bool info_hit = true; /* the cache served it: reserved did not grow */
            bool device_own = bypass && (e->kind == ALLOC_TR_ALLOC_OTHER ||
                                         (e->kind == ALLOC_TR_ALLOC_SERVED && o.framework_only));
            if (e->kind == ALLOC_TR_ALLOC_DRIVER || device_own) {
                /* the driver's (`ad`), whatever the configuration: counted, never the allocator's;
                 * under the pytorch presets a library's cudaMalloc (`ax`) is the device's too,
                 * outside allocated and reserved. Either takes device memory (capacity) */
                l.flags = e->kind == ALLOC_TR_ALLOC_DRIVER ? RL_DRIVER : RL_OTHER;
                l.size = e->size;
                r = e->size
                        ? (be->seg_alloc(be->ctx, e->size, &l.ptr) == ALLOC_BE_OK ? ALLOC_OK
                                                                                  : ALLOC_ERR_OOM)
                        : ALLOC_OK;
                /* PyTorch does not free its cache for a library's cudaMalloc, nor gpumem for an
                 * allocation it passes through */
                if (r == ALLOC_ERR_OOM && out->oom_index < 0) {
                    /* the device is full: forensics from the allocator's point of view */
                    out->oom_index = (int64_t)gi;
                    alloc_stats_t st;
                    alloc_get_stats(a, &st);
                    out->oom.requested = out->oom.rounded = e->size;
                    out->oom.stream = (uintptr_t)e->stream;
                    out->oom.allocated = (size_t)st.allocated_bytes.current;
                    out->oom.reserved = (size_t)st.reserved_bytes.current;
                    /* the allocator's limit does not cap what the driver serves itself */
                    out->oom.limit = cfg && !(l.flags & RL_DRIVER) ? c.limit : ALLOC_NO_LIMIT;
                    out->num_ooms++;
                }
            } else {
                alloc_malloc_info_t info = {0};
                bool priv = e->kind == ALLOC_TR_ALLOC_PRIVATE;
                if (priv) l.flags = RL_PRIVATE;
                /* an allocation that waited in the run: started at its `sw` */
                waiter_t *w = !priv && run->wl ? w_claim(run, e) : NULL;
                bool w_oom = false;
                if (w) {
                    r = w->rc, l.ptr = w->ptr, info = w->info;
                    w_oom = r == ALLOC_ERR_OOM && out->oom_index < 0;
                    if (w_oom) out->oom = w->oom;
                    w_drop(run, w);
                } else {
                    r = priv ? alloc_malloc_captured(a, e->size, e->stream, &l.ptr, &info)
                             : alloc_malloc_ex(a, e->size, e->stream, &l.ptr, &info);
                }
                if (r == ALLOC_ERR_OOM && held.n && !run->saw_wait) {
                    /* PyTorch synchronizes and lands every pending free before giving up (a
                     * trace with waits says which the run's synchronization landed: `fy`) */
                    held_land_all(&held);
                    r = priv ? alloc_malloc_captured(a, e->size, e->stream, &l.ptr, &info)
                             : alloc_malloc_ex(a, e->size, e->stream, &l.ptr, &info);
                    if (r == ALLOC_OK) recovered++;
                }
                l.size = info.size;
                info_hit = info.cache_hit;
                if (r == ALLOC_ERR_OOM && out->oom_index < 0) {
                    out->oom_index = (int64_t)gi;
                    if (!w_oom) alloc_last_oom(a, &out->oom);
                }
            }
            /* lines held for steps the replay's allocation did not reach */
            if (run->mqn) script_end(run);
            if (r == ALLOC_ERR_OOM) {
                if (!o.continue_after_oom) goto stop;
                break;
            }
            if (r) {
                rc = perr(run->err, sizeof(run->err), "replay: event %llu: %s", (unsigned long long)gi,
                          alloc_strerror(r));
                goto stop;
            }
            if (l.flags & RL_OTHER) {
                out->other_allocs++;
                cur_other += l.size;
                if (cur_other > out->peak_other) out->peak_other = cur_other;
            } else {
                cur_alloc += l.size;
                cur_req += l.requested;
                if (cur_alloc > out->peak_allocated) out->peak_allocated = cur_alloc;
                if (cur_req > out->peak_requested) out->peak_requested = cur_req;
            }
            if (l.flags & RL_DRIVER) cur_driver += l.size;
            /* reserved grows only at an allocation: the allocator's segments and the driver's
             * allocations live beside them, summed where either grew */
            if (cur_driver && a->st.reserved_bytes.current + cur_driver > peak_with_driver)
                peak_with_driver = (size_t)a->st.reserved_bytes.current + cur_driver;
            out->allocs++;
            l.id = e->id;
            if (lives_put(&ids, i, &l) < 0) {
                rc = ALLOC_ERR_NOMEM;
                goto stop;
            }
            if (o.keep_going && (!info_hit || (l.flags & RL_DRIVER))) {
                alloc_stats_t st;
                alloc_get_stats(a, &st);
                size_t res = (size_t)st.reserved_bytes.peak;
                if (!o.keep_going(o.keep_going_user, res > peak_with_driver ? res : peak_with_driver)) {
                    out->stopped = true;
                    goto stop;
                }
            }
            break;
        }
        case ALLOC_TR_RECORD_STREAM: {
            live_t *x = lives_get(&ids, i, e->id);
            if (x && !(x->flags & (RL_OTHER | RL_DRIVER)) && e->stream != x->stream) x->flags |= RL_USES;
            break;
        }
        case ALLOC_TR_FREE:
        case ALLOC_TR_FREE_ASYNC:
        case ALLOC_TR_FREE_SYNCED:
            if (!lives_take(&ids, i, e->id, &l)) {
                out->bad_frees++;
                break;
            }
            out->frees++;
            if (l.flags & RL_OTHER) {
                cur_other -= l.size;
                if (l.ptr) be->seg_free(be->ctx, l.ptr, l.size);
                break;
            }
            cur_alloc -= l.size;
            cur_req -= l.requested;
            if (l.flags & RL_DRIVER) {
                cur_driver -= l.size; /* back to the driver at once: nothing to land */
                if (l.ptr) be->seg_free(be->ctx, l.ptr, l.size);
                break;
            }
            if (!l.ptr) break;
            /* a private pool's block goes back to its pool, in that pool's order: whatever
             * stream the program freed it on, only the pool's later allocations may use it */
            bool to_pool = (l.flags & RL_PRIVATE) != 0;
            for (size_t k = 0; to_pool && k < ngone; k++)
                if (gone[k] == l.stream) to_pool = false; /* released: a plain free */
            uint64_t free_on = to_pool ? l.stream : e->stream;
            bool async = to_pool || (e->kind == ALLOC_TR_FREE_ASYNC && !(l.flags & RL_PRIVATE));
            if (exact ? fc_after(fcv, nfc, e->id, gi) : (l.flags & RL_USES) != 0) {
                if (held.n == held.cap) {
                    size_t nc = held.cap ? held.cap * 2 : 16;
                    held_t *nv = realloc(held.v, nc * sizeof(*nv));
                    if (!nv) {
                        rc = ALLOC_ERR_NOMEM;
                        goto stop;
                    }
                    held.v = nv;
                    held.cap = nc;
                }
                held.v[held.n++] = (held_t){e->id, l.ptr, free_on, async, 0};
                out->held_frees++;
                break;
            }
            if (async)
                alloc_free_async(a, l.ptr, free_on);
            else /* after the program's synchronization (`fs`): settled at once, as in the run */
                alloc_free_ex(a, l.ptr, false, e->kind == ALLOC_TR_FREE_SYNCED ? ALLOC_FREE_SYNCED : 0, NULL);
            break;
        case ALLOC_TR_FREE_DONE:
            for (size_t k = 0; k < held.n; k++)
                if (held.v[k].id == e->id) {
                    waiter_t *aw = run->armed;
                    if (!e->size && aw && aw->restart) { /* landed by its new start */
                        if (held_move(&held, k, &aw->fc, &aw->nfc, &aw->capfc, 8)) held_land(&held, k);
                    } else if (!e->size) {
                        held_land(&held, k);
                    } else if (run->wready && run->wl) { /* for the wait whose end follows */
                        if (held_move(&held, k, &run->fy, &run->nfy, &run->capfy, 16)) held_land_synced(&held, k);
                    } else {
                        held_land_synced(&held, k);
                    }
                    break;
                }
            break;
        case ALLOC_TR_SYNC:
        case ALLOC_TR_SYNC_RESTART:
        case ALLOC_TR_MARKER_RECORD:
        case ALLOC_TR_MARKER_DONE:
            /* the end of a wait the replay's operation waits in; any other line (a
             * synchronization the replay made in place, an older trace's) settles as before */
            if (e->kind >= ALLOC_TR_SYNC && e->id && run->wready && w_line_end(run, e)) break;
            if (a->mk_scripted) script_line(run, e);
            break;
        case ALLOC_TR_WAIT:
            if (run->wready) w_line_wait(run, e);
            break;
        case ALLOC_TR_STREAM_FORGET:
            /* the recorded configuration's replay does what the run did (its `sy` and `md` lines
             * came first); any other forgets the stream as its own allocator would */
            if (a->mk_scripted)
                a_forget_scripted(a, (uintptr_t)e->stream);
            else
                alloc_forget_stream(a, (uintptr_t)e->stream);
            break;
        case ALLOC_TR_POOL_RELEASE: {
            /* the recorded allocator synchronized before giving the pool back */
            for (size_t k = held.n; k-- > 0;)
                if (held.v[k].stream == e->stream) held_land(&held, k);
            alloc_release_capture(a, e->stream);
            bool had = false;
            for (size_t k = 0; k < ngone && !had; k++)
                had = gone[k] == e->stream;
            if (had) break;
            if (ngone == capgone) {
                size_t nc = capgone ? capgone * 2 : 8;
                uint64_t *ng = realloc(gone, nc * sizeof(*ng));
                if (!ng) {
                    rc = ALLOC_ERR_NOMEM;
                    goto stop;
                }
                gone = ng;
                capgone = nc;
            }
            gone[ngone++] = e->stream;
            break;
        }
        case ALLOC_TR_CAPTURE_BEGIN:
            alloc_capture_begin(a);
            break;
        case ALLOC_TR_CAPTURE_END:
            alloc_capture_end(a); /* the frees made during the captures record their events */
            break;
        case ALLOC_TR_EMPTY_CACHE: {
            /* PyTorch's empty_cache synchronizes first; gpumem's lands at its `sy` (`fy`) */
            if (!run->saw_wait) held_land_all(&held);
            waiter_t *w = run->wready ? w_new(run) : NULL;
            if (!w) {
                alloc_empty_cache(a);
                break;
            }
            /* its synchronization waits for the `sw` after it, which numbers it */
            w->empty = true;
            w_run(run, w);
            if (w->state == W_WAIT)
                run->unkeyed = w;
            else
                w_drop(run, w);
            break;
        }
        case ALLOC_TR_LIMIT:
            /* the program's per-process memory fraction caps whichever allocator is PyTorch's:
             * its own, or gpumem's (gpumem_torch_memory_fraction) */
            alloc_set_limit(a, e->size);
            break;
        default:
            rc = perr(run->err, sizeof(run->err), "replay: event %llu: unknown kind %u", (unsigned long long)gi,
                      e->kind);
            goto stop;
        }
    }
    goto fed;
stop:
    stop = true;
fed:
    clock_gettime(CLOCK_MONOTONIC, &t1);
    run->seconds += (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    ids.slot = run->ids.slot; /* the table may have grown */
    run->ids = ids;
    run->held = held;
    run->gone = gone, run->ngone = ngone, run->capgone = capgone;
    run->cur_alloc = cur_alloc, run->cur_req = cur_req, run->cur_other = cur_other;
    run->cur_driver = cur_driver, run->peak_with_driver = peak_with_driver;
    run->recovered = recovered;
    run->fed += stop ? i + 1 : n; /* the event that stopped it counts, as alloc_replay's did */
    run->stopped = stop;
    run->rc = rc;
    return !stop;
}

int alloc_replay_end(alloc_replay_run_t *run, alloc_replay_result_t *out, char *err, size_t errlen)
{
    if (!run) return ALLOC_ERR_INVALID;
    alloc_t *a = run->a;
    w_end(run); /* what still waits goes on to its end first */
    int rc = run->rc;
    if (rc && err && errlen) snprintf(err, errlen, "%s", run->err);
    alloc_replay_result_t *r = &run->out;
    r->events = run->fed;
    r->seconds = run->seconds;
    alloc_stats_t st;
    alloc_get_stats(a, &st);
    r->peak_reserved = (size_t)st.reserved_bytes.peak;
    if (run->peak_with_driver > r->peak_reserved) r->peak_reserved = run->peak_with_driver;
    /* the one utilization gpumem reports everywhere (gpumem report, the benches): what the
     * allocator handed out over what it took from the device */
    r->utilization = r->peak_reserved ? (double)r->peak_allocated / (double)r->peak_reserved : 1.0;
    r->device_allocs = st.num_device_alloc;
    r->device_frees = st.num_device_free;
    r->driver_calls = st.num_backend_calls;
    r->cache_hits = st.cache_hits;
    r->cache_misses = st.cache_misses;
    r->num_ooms += st.num_ooms - run->recovered;
    if (rc == 0 && run->o.end_walk) {
        int wr = alloc_walk(a, run->o.end_walk, run->o.end_walk_user);
        if (wr) rc = perr(err, errlen, "replay: the walk of the end state stopped (%d)", wr);
    }
    alloc_mem_backend_counters(run->mb, &r->backend);
    if (out) *out = *r;
    free(run->held.v);
    free(run->gone);
    free(run->fcv);
    free(run->mq);
    lives_free(&run->ids);
    alloc_destroy(a);
    alloc_mem_backend_destroy(run->mb);
    free(run);
    return rc;
}

int alloc_replay(const alloc_config_t *cfg, const alloc_replay_opts_t *opts,
                 const alloc_trace_event_t *ev, size_t n, alloc_replay_result_t *out, char *err,
                 size_t errlen)
{
    if (!out || (!ev && n)) return ALLOC_ERR_INVALID;
    memset(out, 0, sizeof(*out));
    out->oom_index = -1;
    /* the trace's `fc` lines as (id, index), sorted */
    size_t nfc = 0;
    for (size_t i = 0; i < n && !(opts && opts->no_free_done); i++)
        nfc += ev[i].kind == ALLOC_TR_FREE_DONE;
    fc_t *fcv = nfc ? malloc(nfc * sizeof(*fcv)) : NULL;
    if (nfc && !fcv) return ALLOC_ERR_NOMEM;
    for (size_t i = 0, k = 0; nfc && i < n; i++)
        if (ev[i].kind == ALLOC_TR_FREE_DONE) fcv[k++] = (fc_t){ev[i].id, i};
    if (nfc > 1) qsort(fcv, nfc, sizeof(*fcv), fc_cmp);
    /* the recorded markers only where the trace has some: without them nothing would settle */
    alloc_replay_opts_t o = {0};
    if (opts) o = *opts;
    bool marks = false;
    for (size_t i = 0; o.markers && i < n && !marks; i++)
        marks = ev[i].kind == ALLOC_TR_MARKER_RECORD || ev[i].kind == ALLOC_TR_MARKER_DONE ||
                ev[i].kind == ALLOC_TR_WAIT;
    o.markers = marks;
    alloc_replay_run_t *run;
    int rc = run_begin(cfg, &o, fcv, nfc, &run, err, errlen);
    if (rc) return rc;
    alloc_replay_feed(run, ev, n);
    return alloc_replay_end(run, out, err, errlen);
}
