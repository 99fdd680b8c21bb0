/* snapshot_categories.c — the categories (snapshot/analyze/gm_category.c) of a training loop do
 * not depend on how its events' ranges are cut: the same program recorded with one range a step
 * (or a phase), and with a range of its own around every event (the same names: the same steps
 * and phases), gives every allocation the same category and source. The first is what the
 * categories' memos (a range's step and phase, event_phase's answer over the seqs of a range it
 * holds for: phase_memo) answer for many events; the second misses them at every event, so the
 * answers are worked out afresh each time. Once with the phases named by ranges (fwd / bwd /
 * opt), once with only "step N" ranges, the phases found from the lifetimes: there event_phase
 * reads the step's backward and update, and a range spans them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>

#include "snapshot/analyze/gm_category.h"
#include "snapshot/read/gm.h"
#include "snapshot/record/rec.h"
#include "snapshot/record/rec_internal.h"
#include "tests/unit/snapshot_test.h"

static char err[8192];

enum { STEPS = 6, LAYERS = 12 };

/* How the events' ranges are cut. */
typedef struct cut {
    int phases;    /* fwd / bwd / opt ranges inside each step */
    int per_event; /* a range around each event (else one a step, or a phase) */
} cut;

static const char *const phase_name[3] = {"fwd", "bwd", "opt"};

/* One event in the range of step s, phase p (where ranges are cut per event). */
static void event(const cut *k, int s, int p, int kind, uint64_t addr, uint64_t size, uint64_t id)
{
    char name[32];
    if (k->per_event) {
        snprintf(name, sizeof name, "step %d", s);
        rec_range_push(NULL, name);
        if (k->phases) rec_range_push(NULL, phase_name[p]);
    }
    rec_event(kind, 0, 0, addr, size, kind == REC_ALLOC ? size : 0, id);
    if (k->per_event) {
        if (k->phases) rec_range_pop();
        rec_range_pop();
    }
}

/* A phase's range opened or closed where ranges are cut a step or a phase at a time. */
static void phase_open(const cut *k, const char *name, int phase)
{
    if (!k->per_event && (!phase || k->phases)) rec_range_push(NULL, name);
}
static void phase_close(const cut *k, int phase)
{
    if (!k->per_event && (!phase || k->phases)) rec_range_pop();
}

/* A training loop: parameters made before the first step; each step's forward makes a layer's
 * activations and temporaries, the backward frees the activations in reverse and makes the
 * gradients (in the first step, kept), the update makes the optimizer state (in the first
 * step, kept) and temporaries; a step's input is made between two steps' ranges, freed in the
 * next step's forward; a buffer grows a step at a time. */
static void record_loop(const char *path, const cut *k)
{
    unlink(path);
    rec_options o = {.path = path, .stacks = 0, .fork_record = 0, .ring = 1 << 16, .quiet = 1};
    assert_int_equal(rec_open(&o), 0);
    uint64_t id = 0, param = 0x7f0000000000ull, act = 0x7f1000000000ull, tmp = 0x7f2000000000ull,
             grad = 0x7f3000000000ull, opt = 0x7f4000000000ull, in = 0x7f5000000000ull,
             grow = 0x7f6000000000ull;
    for (int l = 0; l < LAYERS; l++)
        rec_event(REC_ALLOC, 0, 0, param + (uint64_t)l * 4096, 4096 + (uint64_t)l * 64, 4096, ++id);
    uint64_t input = 0;
    for (int s = 0; s < STEPS; s++) {
        char name[32];
        snprintf(name, sizeof name, "step %d", s);
        /* made between two steps' ranges */
        uint64_t next_input = in + (uint64_t)s * 4096;
        rec_event(REC_ALLOC, 0, 0, next_input, 1 << 16, 1 << 16, ++id);
        phase_open(k, name, 0);
        for (int p = 0; p < 3; p++) {
            phase_open(k, phase_name[p], 1);
            for (int l = 0; l < LAYERS; l++) {
                uint64_t a = act + (uint64_t)l * 4096, t = tmp + (uint64_t)(p * LAYERS + l) * 4096;
                uint64_t g = grad + (uint64_t)l * 4096, st = opt + (uint64_t)l * 4096;
                if (p == 0) {
                    if (l == 0 && input) event(k, s, p, REC_FREE, input, 0, 0);
                    event(k, s, p, REC_ALLOC, a, 8192 + (uint64_t)l * 128, ++id);
                    event(k, s, p, REC_ALLOC, t, 512, ++id);
                    event(k, s, p, REC_FREE, t, 0, 0);
                } else if (p == 1) {
                    int r = LAYERS - 1 - l; /* the backward frees in reverse */
                    event(k, s, p, REC_ALLOC, t, 1024, ++id);
                    if (s == 0) event(k, s, p, REC_ALLOC, g, 4096 + (uint64_t)r * 64, ++id);
                    event(k, s, p, REC_FREE, act + (uint64_t)r * 4096, 0, 0);
                    event(k, s, p, REC_FREE, t, 0, 0);
                } else {
                    if (s == 0) event(k, s, p, REC_ALLOC, st, 4096 + (uint64_t)l * 64, ++id);
                    event(k, s, p, REC_ALLOC, t, 2048, ++id);
                    event(k, s, p, REC_FREE, t, 0, 0);
                }
            }
            if (p == 2)
                event(k, s, p, REC_ALLOC, grow + (uint64_t)s * 4096, (uint64_t)(s + 1) << 20, ++id);
            phase_close(k, 1);
        }
        phase_close(k, 0);
        input = next_input;
    }
    rec_close();
    rec_test_reset();
}

/* The categories of the recording at path: *c built, *m loaded (free both). */
static void categories_of(const char *path, gm_model *m, gm_categories *c)
{
    gm_db d;
    assert_int_equal(gm_db_open(path, &d, err, sizeof err), 0);
    assert_int_equal(gm_model_load(&d, m, 0, err, sizeof err), 0);
    assert_int_equal(gm_categories_build(&d, m, c, err, sizeof err), 0);
    gm_db_close(&d);
}

/* The loop recorded both ways, categorised: the same allocations, the same categories and
 * sources, the same steps and phases. */
static void same_whatever_the_cut(int phases)
{
    char a_path[512], b_path[512];
    snap_path(a_path, sizeof a_path, phases ? "phases_whole.db" : "steps_whole.db");
    snap_path(b_path, sizeof b_path, phases ? "phases_cut.db" : "steps_cut.db");
    record_loop(a_path, &(cut){phases, 0});
    record_loop(b_path, &(cut){phases, 1});
    gm_model ma, mb;
    gm_categories ca, cb;
    categories_of(a_path, &ma, &ca);
    categories_of(b_path, &mb, &cb);
    assert_int_equal(ca.n, cb.n);
    assert_true(ca.n > (size_t)STEPS * LAYERS * 4);
    assert_int_equal(ca.nsteps, STEPS);
    assert_int_equal(cb.nsteps, STEPS);
    assert_int_equal(ca.steps_from, GM_CSRC_PHASES);
    assert_int_equal(ca.phases_from, phases ? GM_CSRC_PHASES : GM_CSRC_INFERENCE);
    assert_int_equal(cb.phases_from, ca.phases_from);
    for (size_t i = 0; i < ca.n; i++) {
        if (ca.cat[i] != cb.cat[i] || ca.src[i] != cb.src[i])
            fail_msg("allocation %zu (born at %" PRIu64
                     "): category %d source %d cut a step at a time, %d %d "
                     "cut at every event",
                     i, ma.allocs[i].birth, ca.cat[i], ca.src[i], cb.cat[i], cb.src[i]);
    }
    /* the loop's shapes are all there: the memos answered across every kind of boundary */
    int seen[GM_NCATS] = {0};
    for (size_t i = 0; i < ca.n; i++)
        seen[ca.cat[i] < GM_NCATS ? ca.cat[i] : GM_CAT_OTHER]++;
    assert_true(seen[GM_CAT_PARAM] >= LAYERS);
    assert_true(seen[GM_CAT_ACT] >= STEPS * LAYERS);
    assert_true(seen[GM_CAT_TEMP] >= STEPS * LAYERS * 3);
    for (int x = 0; x < GM_NCATS; x++)
        assert_int_equal(ca.peak[x], cb.peak[x]);
    gm_categories_free(&ca), gm_categories_free(&cb);
    gm_model_free(&ma), gm_model_free(&mb);
}

static void phases_from_ranges(void **state)
{
    (void)state;
    same_whatever_the_cut(1);
}

static void phases_from_lifetimes(void **state)
{
    (void)state;
    same_whatever_the_cut(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(phases_from_ranges),
        cmocka_unit_test(phases_from_lifetimes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
