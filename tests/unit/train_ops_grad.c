/* train_ops_grad.c — gradient check of every CPU op of the trainer against central finite
 * differences.
 *
 * Property: for each op with a backward, and a scalar loss L = sum(out * R) for a fixed random
 * R, the op's backward called with dout = R returns dL/dx that agrees with
 * (L(x + h) - L(x - h)) / 2h for every checked input element x, within
 *     |analytic - numeric| <= ATOL + RTOL * |numeric|,  ATOL = 2e-3, RTOL = 2e-2,
 * with h = 1e-3. The forward runs in float32 and L is summed in double; with these sizes the
 * float rounding noise in the numeric estimate is below ~5e-4, so the tolerance is loose
 * enough for noise and tight enough that a wrong term (a missing factor, a dropped row, a
 * wrong index) fails by orders of magnitude. Also: AdamW against a double-precision
 * reference, bf16 round trip, and softmax/cross-entropy values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/ops.h"

#define ATOL 2e-3
#define RTOL 2e-2
#define H 1e-3f

static uint64_t rng = 88172645463325252ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
static float *rvec(long n, float scale)
{
    float *v = malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}
static float *zvec(long n) { return calloc((size_t)n, sizeof(float)); }
static double dotR(const float *out, const float *R, long n)
{
    double s = 0;
    for (long i = 0; i < n; i++) s += (double)out[i] * R[i];
    return s;
}

/* The forward under test, as a closure: computes the loss from the current inputs. */
typedef double (*loss_fn)(void *ctx);

/* Checks grad[i] against finite differences of fn with respect to x[i] for up to `max`
 * evenly spread indices. Returns the number of mismatches (and prints them). */
static int check(const char *what, loss_fn fn, void *ctx, float *x, const float *grad, long n,
                 int max)
{
    int bad = 0;
    long step = n / max > 0 ? n / max : 1;
    double worst = 0;
    for (long i = 0; i < n; i += step) {
        const float keep = x[i];
        x[i] = keep + H;
        const double lp = fn(ctx);
        x[i] = keep - H;
        const double lm = fn(ctx);
        x[i] = keep;
        const double num = (lp - lm) / (2.0 * (double)H);
        const double err = fabs(num - grad[i]);
        if (err - RTOL * fabs(num) > worst) worst = err - RTOL * fabs(num);
        if (err > ATOL + RTOL * fabs(num)) {
            if (bad < 5) print_message("%s[%ld]: analytic %.6g numeric %.6g\n", what, i, grad[i], num);
            bad++;
        }
    }
    print_message("%-18s worst excess error %.2e (allowed %.1e)\n", what, worst, ATOL);
    return bad;
}

/* ---- layernorm ---- */
typedef struct { int N, C; float *inp, *w, *b, *out, *mean, *rstd, *R; } ln_ctx;
static double ln_loss(void *p)
{
    ln_ctx *c = p;
    train_cpu_layernorm_fwd(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return dotR(c->out, c->R, (long)c->N * c->C);
}
static void test_layernorm(void **state)
{
    (void)state;
    ln_ctx c = {.N = 6, .C = 16};
    long n = (long)c.N * c.C;
    c.inp = rvec(n, 2), c.w = rvec(c.C, 1), c.b = rvec(c.C, 1), c.out = zvec(n);
    c.mean = zvec(c.N), c.rstd = zvec(c.N), c.R = rvec(n, 1);
    float *dinp = rvec(n, 1), *dw = zvec(c.C), *db = zvec(c.C);
    float *dinp0 = malloc(sizeof(float) * n);
    memcpy(dinp0, dinp, sizeof(float) * n);
    ln_loss(&c);
    train_cpu_layernorm_bwd(dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    for (long i = 0; i < n; i++) dinp[i] -= dinp0[i]; /* dinp accumulates: remove the start */
    assert_int_equal(check("layernorm.dinp", ln_loss, &c, c.inp, dinp, n, 96), 0);
    assert_int_equal(check("layernorm.dw", ln_loss, &c, c.w, dw, c.C, 16), 0);
    assert_int_equal(check("layernorm.db", ln_loss, &c, c.b, db, c.C, 16), 0);
    free(c.inp), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(c.R);
    free(dinp), free(dw), free(db), free(dinp0);
}

/* ---- matmul ---- */
typedef struct { int N, C, OC; float *inp, *w, *bias, *out, *R; } mm_ctx;
static double mm_loss(void *p)
{
    mm_ctx *c = p;
    train_cpu_matmul_fwd(c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
    return dotR(c->out, c->R, (long)c->N * c->OC);
}
static void matmul_case(int N, int C, int OC)
{
    mm_ctx c = {.N = N, .C = C, .OC = OC};
    c.inp = rvec((long)N * C, 1), c.w = rvec((long)OC * C, 1), c.bias = rvec(OC, 1);
    c.out = zvec((long)N * OC), c.R = rvec((long)N * OC, 1);
    float *dinp = rvec((long)N * C, 1), *dw = zvec((long)OC * C), *db = zvec(OC);
    /* forward value against a naive product */
    mm_loss(&c);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = c.bias[o];
            for (int i = 0; i < C; i++) s += (double)c.inp[n * C + i] * c.w[o * C + i];
            assert_true(fabs(s - c.out[n * OC + o]) < 1e-4 * (1 + fabs(s)));
        }
    train_cpu_matmul_bwd(dinp, dw, db, c.R, c.inp, c.w, N, C, OC);
    assert_int_equal(check("matmul.dinp", mm_loss, &c, c.inp, dinp, (long)N * C, 64), 0);
    assert_int_equal(check("matmul.dw", mm_loss, &c, c.w, dw, (long)OC * C, 64), 0);
    assert_int_equal(check("matmul.db", mm_loss, &c, c.bias, db, OC, 32), 0);
    free(c.inp), free(c.w), free(c.bias), free(c.out), free(c.R), free(dinp), free(dw), free(db);
}
/* Sizes that are not multiples of the 6 x 16 register block exercise the edges. */
static void test_matmul(void **state)
{
    (void)state;
    matmul_case(7, 5, 19);
    matmul_case(12, 32, 48);
}

/* ---- attention ---- */
typedef struct { int B, T, C, NH; float *qkv, *out, *lse, *scratch, *R; } at_ctx;
static double at_loss(void *p)
{
    at_ctx *c = p;
    train_cpu_attention_fwd(c->out, c->lse, c->scratch, c->qkv, c->B, c->T, c->C, c->NH);
    return dotR(c->out, c->R, (long)c->B * c->T * c->C);
}
static void test_attention(void **state)
{
    (void)state;
    at_ctx c = {.B = 2, .T = 5, .C = 8, .NH = 2};
    long nq = (long)c.B * c.T * 3 * c.C, no = (long)c.B * c.T * c.C;
    c.qkv = rvec(nq, 1), c.out = zvec(no), c.lse = zvec((long)c.B * c.NH * c.T);
    c.scratch = zvec((long)c.B * c.NH * c.T * c.T), c.R = rvec(no, 1);
    float *dqkv = rvec(nq, 1);
    at_loss(&c);
    /* softmax rows sum to 1 and are causal */
    for (long r = 0; r < (long)c.B * c.NH * c.T; r++) {
        double s = 0;
        const int t = (int)(r % c.T);
        for (int j = 0; j < c.T; j++) {
            s += c.scratch[r * c.T + j];
            if (j > t) assert_true(c.scratch[r * c.T + j] == 0.0f);
        }
        assert_true(fabs(s - 1.0) < 1e-5);
    }
    train_cpu_attention_bwd(dqkv, c.scratch, c.R, c.qkv, c.lse, c.B, c.T, c.C, c.NH);
    assert_int_equal(check("attention.dqkv", at_loss, &c, c.qkv, dqkv, nq, 240), 0);
    free(c.qkv), free(c.out), free(c.lse), free(c.scratch), free(c.R), free(dqkv);
}

/* ---- gelu ---- */
typedef struct { long n; float *inp, *out, *R; } ge_ctx;
static double ge_loss(void *p)
{
    ge_ctx *c = p;
    train_cpu_gelu_fwd(c->out, c->inp, c->n);
    return dotR(c->out, c->R, c->n);
}
static void test_gelu(void **state)
{
    (void)state;
    ge_ctx c = {.n = 64};
    c.inp = rvec(c.n, 4), c.out = zvec(c.n), c.R = rvec(c.n, 1);
    float *d = zvec(c.n);
    train_cpu_gelu_bwd(d, c.inp, c.R, c.n);
    assert_int_equal(check("gelu.dinp", ge_loss, &c, c.inp, d, c.n, 64), 0);
    free(c.inp), free(c.out), free(c.R), free(d);
}

/* ---- encoder ---- */
typedef struct { int B, T, C; int *tok; float *wte, *wpe, *out, *R; } en_ctx;
static double en_loss(void *p)
{
    en_ctx *c = p;
    train_cpu_encoder_fwd(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
    return dotR(c->out, c->R, (long)c->B * c->T * c->C);
}
static void test_encoder(void **state)
{
    (void)state;
    en_ctx c = {.B = 2, .T = 4, .C = 8};
    const int V = 5;
    int tok[8] = {1, 3, 3, 0, 4, 1, 1, 2}; /* repeated tokens: their gradients add up */
    c.tok = tok, c.wte = rvec(V * c.C, 1), c.wpe = rvec(c.T * c.C, 1);
    c.out = zvec(c.B * c.T * c.C), c.R = rvec(c.B * c.T * c.C, 1);
    float *dwte = zvec(V * c.C), *dwpe = zvec(c.T * c.C);
    train_cpu_encoder_bwd(dwte, dwpe, c.R, c.tok, c.B, c.T, c.C);
    assert_int_equal(check("encoder.dwte", en_loss, &c, c.wte, dwte, V * c.C, 40), 0);
    assert_int_equal(check("encoder.dwpe", en_loss, &c, c.wpe, dwpe, c.T * c.C, 32), 0);
    free(c.wte), free(c.wpe), free(c.out), free(c.R), free(dwte), free(dwpe);
}

/* ---- softmax + cross-entropy (fused backward) ---- */
typedef struct { int N, V, Vp; int *tg; float *logits, *probs, *losses; } ce_ctx;
static double ce_loss(void *p)
{
    ce_ctx *c = p;
    train_cpu_softmax_fwd(c->probs, c->logits, c->N, c->V, c->Vp);
    train_cpu_crossentropy_fwd(c->losses, c->probs, c->tg, c->N, c->Vp);
    double s = 0;
    for (int i = 0; i < c->N; i++) s += c->losses[i];
    return s / c->N;
}
static void test_crossentropy(void **state)
{
    (void)state;
    ce_ctx c = {.N = 4, .V = 10, .Vp = 16};
    int tg[4] = {0, 9, 3, 3};
    c.tg = tg, c.logits = rvec(c.N * c.Vp, 3), c.probs = zvec(c.N * c.Vp), c.losses = zvec(c.N);
    ce_loss(&c);
    for (int i = 0; i < c.N; i++) { /* value: -log softmax, computed here in double */
        double mx = -1e30, s = 0;
        for (int v = 0; v < c.V; v++) mx = fmax(mx, c.logits[i * c.Vp + v]);
        for (int v = 0; v < c.V; v++) s += exp(c.logits[i * c.Vp + v] - mx);
        const double ref = -(c.logits[i * c.Vp + tg[i]] - mx - log(s));
        assert_true(fabs(ref - c.losses[i]) < 1e-5 * (1 + fabs(ref)));
        for (int v = c.V; v < c.Vp; v++) assert_true(c.probs[i * c.Vp + v] == 0.0f);
    }
    float *d = rvec(c.N * c.Vp, 1);
    train_cpu_crossentropy_bwd(d, c.probs, c.tg, c.N, c.V, c.Vp, 1.0f / c.N);
    for (int i = 0; i < c.N; i++)
        for (int v = c.V; v < c.Vp; v++) assert_true(d[i * c.Vp + v] == 0.0f);
    assert_int_equal(check("crossentropy.dlogits", ce_loss, &c, c.logits, d, c.N * c.Vp, 64), 0);
    free(c.logits), free(c.probs), free(c.losses), free(d);
}

/* ---- residual, adamw, bf16 ---- */
static void test_residual_adamw_bf16(void **state)
{
    (void)state;
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0.5f, -2, 0, 1e-3f, 7}, o[5];
    train_cpu_residual_fwd(o, a, b, 5);
    for (int i = 0; i < 5; i++) assert_true(o[i] == a[i] + b[i]);

    /* AdamW: three steps against a double-precision reference */
    const int n = 33;
    float *p = rvec(n, 1), *m = zvec(n), *v = zvec(n);
    double pr[33], mr[33] = {0}, vr[33] = {0};
    for (int i = 0; i < n; i++) pr[i] = p[i];
    for (int t = 1; t <= 3; t++) {
        float *g = rvec(n, 1);
        train_cpu_adamw(p, g, m, v, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, t);
        for (int i = 0; i < n; i++) {
            mr[i] = 0.9 * mr[i] + 0.1 * g[i];
            vr[i] = 0.999 * vr[i] + 0.001 * (double)g[i] * g[i];
            const double mh = mr[i] / (1 - pow(0.9, t)), vh = vr[i] / (1 - pow(0.999, t));
            pr[i] -= 1e-2 * (mh / (sqrt(vh) + 1e-8) + 0.1 * pr[i]);
        }
        free(g);
    }
    for (int i = 0; i < n; i++) assert_true(fabs(pr[i] - p[i]) < 1e-5);
    free(p), free(m), free(v);

    /* bf16: exact values survive, others round to nearest (relative error <= 2^-9) */
    float x[6] = {1.0f, -2.5f, 3.14159265f, 1e-3f, 65504.0f, 0.0f}, y[6];
    uint16_t h[6];
    train_cpu_to_bf16(h, x, 6);
    train_cpu_from_bf16(y, h, 6);
    assert_true(y[0] == 1.0f && y[1] == -2.5f && y[5] == 0.0f);
    for (int i = 0; i < 6; i++) assert_true(fabsf(y[i] - x[i]) <= fabsf(x[i]) / 512.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm),    cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_attention),    cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_encoder),      cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_residual_adamw_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
