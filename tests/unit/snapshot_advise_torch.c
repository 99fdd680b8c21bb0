/* snapshot_advise_torch.c — what advise's PyTorch model computes from a kernel's launch rather
 * than from the trace: the staging buffer and semaphores of PyTorch's reduction kernel summing a
 * Linear's bias gradient over the batch's rows (adv_reduce_staging, gm_advise_autocast.c). The
 * table is what PyTorch 2.14.1 allocated on the virtual GPU (H100 profile, 132 SMs), read from
 * recordings of tests/torch/train_gpt2.py: gpt2 124M and gpt2-medium at B 8 and B 1, T 1024
 * (rows 8,192 and 1,024), for their Linears' widths. And where a backward node lets go of what it
 * unpacked (adv_bias_sums): before autograd sums a Linear's bias gradient down to the bias. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "snapshot/analyze/gm_advise.h"

typedef struct measured {
    uint64_t rows, cols, staging, sema;
} measured;

static const measured table[] = {
    /* gpt2-medium (1,024 wide): c_attn 3,072, c_fc 4,096, the projections 1,024 */
    {8192, 3072, 138412032, 96},
    {8192, 4096, 138412032, 128},
    {8192, 1024, 67108864, 32},
    {1024, 3072, 25165824, 96},
    {1024, 4096, 33554432, 128},
    {1024, 1024, 8388608, 32},
};

static void staging_as_pytorch_allocated(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        uint64_t x, s;
        adv_reduce_staging(table[i].rows, table[i].cols, &x, &s);
        print_message("rows %llu cols %llu: staging %llu semaphores %llu\n", (unsigned long long)table[i].rows,
                      (unsigned long long)table[i].cols, (unsigned long long)x, (unsigned long long)s);
        assert_int_equal(x, table[i].staging);
        assert_int_equal(s, table[i].sema);
    }
}

/* a sum small enough for one block a column stages nothing; nothing is made of no rows */
static void no_staging_when_one_block_does_it(void **state)
{
    (void)state;
    uint64_t x = 1, s = 1;
    adv_reduce_staging(64, 768, &x, &s);
    assert_int_equal(x, 0);
    assert_int_equal(s, 0);
    x = s = 1;
    adv_reduce_staging(0, 768, &x, &s);
    assert_int_equal(x, 0);
    assert_int_equal(s, 0);
    /* not in proportion to the rows: 8 times the rows stage 5.5 times the bytes (above), and
     * the staging never shrinks as the rows grow */
    uint64_t prev = 0;
    for (uint64_t rows = 256; rows <= (1u << 22); rows *= 2) {
        adv_reduce_staging(rows, 3072, &x, &s);
        assert_true(x >= prev);
        prev = x;
    }
}

/* One Linear: its addmm in the forward (output 0, bias 1, input 2), then AddmmBackward0 (its
 * gradients 3 and 4, then the bias's sum 5 with its staging 6 and semaphores 7), which lets go
 * of the input it saved (2) and its given gradient (8) after the sum, as the recording has it. */
static void unpacked_dies_before_the_bias_sum(void **state)
{
    (void)state;
    enum { ROWS = 1024, COLS = 3072, IN = 1024 };
    adv_alloc allocs[] = {
        {ROWS * COLS * 4, 0, 0, 0, 0}, {COLS * 4, 0, 0, 0, 1}, {ROWS * IN * 4, 0, 0, 0, 2},
        {ROWS * IN * 4, 0, 0, 0, 3},   {IN * COLS * 4, 0, 0, 0, 4}, {COLS * 4, 0, 0, 0, 5},
        {25165824, 0, 0, 0, 6},        {96, 0, 0, 0, 7},          {ROWS * COLS * 4, 0, 0, 0, 8},
    };
    enum { A = ADV_EV_ALLOC, F = ADV_EV_FREE };
    adv_ev evs[] = {
        {.a = 1, .kind = A}, {.a = 2, .kind = A}, {.a = 0, .kind = A}, /* forward */
        {.a = 8, .kind = A}, {.a = 0, .kind = F},                      /* the loss's gradient */
        {.a = 3, .kind = A}, {.a = 4, .kind = A},                      /* the node's function */
        {.a = 5, .kind = A}, {.a = 6, .kind = A}, {.a = 7, .kind = A}, /* the sum */
        {.a = 7, .kind = F}, {.a = 6, .kind = F},
        {.a = 2, .kind = F}, {.a = 8, .kind = F}, /* released */
    };
    adv_targ targs[] = {
        {.bytes = ROWS * COLS * 4, .a = 0, .out = 1, .dtype = ADV_DT_F32},
        {.bytes = COLS * 4, .a = 1, .dtype = ADV_DT_F32},
        {.bytes = ROWS * IN * 4, .a = 2, .dtype = ADV_DT_F32},
        {.bytes = ROWS * COLS * 4, .a = 8, .dtype = ADV_DT_F32},
    };
    adv_top tops[] = {
        {.arg0 = 0, .nargs = 3, .last_a = 0, .fwd = UINT32_MAX, .name = 1},
        {.arg0 = 3, .nargs = 1, .last_a = 8, .fwd = 0, .name = 2, .bwd = 1},
        {.arg0 = 4, .nargs = 0, .last_a = 7, .fwd = UINT32_MAX, .name = 3, .bwd = 1}, /* the next node */
    };
    char *strs[] = {"", "aten.addmm.default", "bwd:AddmmBackward0", "bwd:TBackward0"};
    adv_model m = {.allocs = allocs, .nallocs = 9, .evs = evs, .nevs = sizeof evs / sizeof *evs, .strs = strs,
                   .nstrs = 4, .nrecorded = 9, .tops = tops, .targs = targs, .ntops = 3, .ntargs = 4};
    uint32_t sum_of[9];
    assert_int_equal(adv_bias_sums(&m, sum_of), 2);
    assert_int_equal(sum_of[2], 5); /* the saved input: before the sum's result is born */
    assert_int_equal(sum_of[8], 5); /* (its given gradient too: adv_stash moves unpacked ones only) */
    for (uint32_t a = 0; a < 9; a++)
        if (a != 2 && a != 8) assert_int_equal(sum_of[a], UINT32_MAX);
    /* no sum (a bias of another size): nothing moves */
    allocs[5].size = COLS * 2;
    assert_int_equal(adv_bias_sums(&m, sum_of), 0);
    assert_int_equal(sum_of[2], UINT32_MAX);
}

/* FlashAttention's split of the keys, as PyTorch 2.14.1 made it on the virtual GPU (132 SMs):
 * gpt2 124M (12 heads of 64) at T 1024 split in four at B 1 (its 12 MiB and 192 KiB fp32
 * accumulators, 4 x 1 x 12 x 1024 x 64 x 4 and 4 x 12 x 1024 x 4 bytes), not at B 2, 4 or 8;
 * gpt2-medium (16 heads) not even at B 1 (recordings of tests/torch/train_gpt2.py --autocast
 * bf16, 2026-12-05) */
static void flash_splits_as_pytorch_made_them(void **state)
{
    (void)state;
    assert_int_equal(adv_flash_splits(1, 12, 1024, 64), 4);
    assert_int_equal(adv_flash_splits(2, 12, 1024, 64), 1);
    assert_int_equal(adv_flash_splits(8, 12, 1024, 64), 1);
    assert_int_equal(adv_flash_splits(1, 16, 1024, 64), 1);
    /* a short sequence has one block of keys: nothing to split */
    assert_int_equal(adv_flash_splits(1, 2, 64, 64), 1);
}

/* The tied weight's two contributions meeting (the head's, x, which a cast's node made, and the
 * embedding's, y), summed out of place in the recording (s): made in x instead, x living on to
 * the sum's death under the sum's name; a sum whose first contribution is not marked stays. */
static void sum_made_in_the_cast_contribution(void **state)
{
    (void)state;
    enum { S = 4096 };
    adv_alloc allocs[] = {{S, 0, 0, 0, 0}, {S, 0, 0, 0, 1}, {S, 0, 7, 9, 2}, {64, 0, 0, 0, 3}};
    enum { A = ADV_EV_ALLOC, F = ADV_EV_FREE, B = ADV_PH_BWD };
    adv_ev evs[] = {
        {.a = 0, .kind = A, .phase = B}, {.a = 3, .kind = A, .phase = B}, {.a = 1, .kind = A, .phase = B},
        {.a = 2, .kind = A, .phase = B}, {.a = 0, .kind = F, .phase = B}, {.a = 1, .kind = F, .phase = B},
        {.a = 3, .kind = F, .phase = B}, {.a = 2, .kind = F, .phase = ADV_PH_OPT},
    };
    adv_step steps[1] = {{0}};
    adv_op ops[1] = {{0}};
    uint64_t opt_starts[1] = {0};
    char *strs[] = {""};
    /* (every array borrowed: the rewrite copies what it writes, adv_model_free frees the copies) */
    adv_model m = {.allocs = allocs, .nallocs = 4, .evs = evs, .nevs = 8, .nrecorded = 4, .strs = strs, .nstrs = 1,
                   .steps = steps, .nsteps = 1, .ops = ops, .nops = 1, .opt_starts = opt_starts, .nopt_starts = 1,
                   .borrows = ADV_BORROWS_EVS | ADV_BORROWS_ALLOCS | ADV_BORROWS_STRS | ADV_BORROWS_TIMES};
    uint8_t in_place[4] = {0};
    assert_int_equal(adv_sums_in_place(&m, in_place, 4), 0); /* not marked: as recorded */
    assert_int_equal(m.nevs, 8);
    in_place[0] = 1;
    assert_int_equal(adv_sums_in_place(&m, in_place, 4), 1);
    assert_int_equal(m.nevs, 6);
    const uint32_t want_a[] = {0, 3, 1, 1, 3, 0};
    const uint8_t want_k[] = {A, A, A, F, F, F};
    for (size_t i = 0; i < m.nevs; i++) {
        assert_int_equal(m.evs[i].a, want_a[i]);
        assert_int_equal(m.evs[i].kind, want_k[i]);
    }
    assert_int_equal(m.allocs[0].name, 9); /* the sum's name and class */
    assert_int_equal(m.allocs[0].cls, 7);
    adv_model_free(&m);
}

/* What accumulation must not shrink, from the op log's shapes (GPT-2 at B 8, T 1024): the batch
 * moved to the device (0, [8, 1024], freed) gives the batch; the positions (2, arange's [1024])
 * and their embedding (4, [1024, 768]) do not have it, nor the gradient a node was given for them
 * (7); the token embedding (3), the sum (5) and a Linear's rows (6, [8192, 2304]) do. */
static void what_the_batch_does_not_shrink(void **state)
{
    (void)state;
    enum { B = 8, T = 1024, C = 768 };
    adv_alloc allocs[] = {
        {B * T * 8, 0, 0, 0, 0},     {50257 * C * 4, 0, 0, 0, 1}, {T * 8, 0, 0, 0, 2},
        {B * T * C * 4, 0, 0, 0, 3}, {T * C * 4, 0, 0, 0, 4},     {B * T * C * 4, 0, 0, 0, 5},
        {B * T * 3 * C * 4, 0, 0, 0, 6}, {T * C * 4, 0, 0, 0, 7},
    };
    enum { A = ADV_EV_ALLOC, F = ADV_EV_FREE };
    adv_ev evs[] = {
        {.a = 1, .kind = A}, {.a = 0, .kind = A}, {.a = 2, .kind = A}, {.a = 3, .kind = A}, {.a = 4, .kind = A},
        {.a = 5, .kind = A}, {.a = 6, .kind = A}, {.a = 7, .kind = A}, {.a = 7, .kind = F}, {.a = 0, .kind = F},
    };
    adv_targ targs[] = {
        {.bytes = T * 8, .a = 2, .out = 1, .ndim = 1, .dims = {T}}, /* arange */
        {.bytes = B * T * C * 4, .a = 3, .out = 1, .ndim = 3, .dims = {B, T, C}}, /* embedding */
        {.bytes = 50257 * C * 4, .a = 1, .ndim = 2, .dims = {50257, C}},
        {.bytes = B * T * 8, .a = 0, .ndim = 2, .dims = {B, T}},
        {.bytes = T * C * 4, .a = 4, .out = 1, .ndim = 2, .dims = {T, C}}, /* embedding of 2 */
        {.bytes = T * 8, .a = 2, .ndim = 1, .dims = {T}},
        {.bytes = B * T * C * 4, .a = 5, .out = 1, .ndim = 3, .dims = {B, T, C}}, /* add */
        {.bytes = B * T * 3 * C * 4, .a = 6, .out = 1, .ndim = 2, .dims = {B * T, 3 * C}}, /* addmm */
        {.bytes = T * C * 4, .a = 7, .ndim = 2, .dims = {T, C}}, /* EmbeddingBackward0's gradient */
    };
    adv_top tops[] = {
        {.arg0 = 0, .nargs = 1, .last_a = 2, .fwd = UINT32_MAX, .name = 1},
        {.arg0 = 1, .nargs = 3, .last_a = 3, .fwd = UINT32_MAX, .name = 2},
        {.arg0 = 4, .nargs = 2, .last_a = 4, .fwd = UINT32_MAX, .name = 2},
        {.arg0 = 6, .nargs = 1, .last_a = 5, .fwd = UINT32_MAX, .name = 3},
        {.arg0 = 7, .nargs = 1, .last_a = 6, .fwd = UINT32_MAX, .name = 4},
        {.arg0 = 8, .nargs = 1, .last_a = 7, .fwd = 2, .name = 5, .bwd = 1},
    };
    char *strs[] = {"", "aten.arange.default", "aten.embedding.default", "aten.add.Tensor", "aten.addmm.default",
                    "bwd:EmbeddingBackward0"};
    adv_model m = {.allocs = allocs, .nallocs = 8, .evs = evs, .nevs = sizeof evs / sizeof *evs, .strs = strs,
                   .nstrs = 6, .nrecorded = 8, .tops = tops, .targs = targs, .ntops = 6, .ntargs = 9};
    uint64_t size[8] = {0};
    assert_int_equal(adv_batch_fixed(&m, size), 3);
    const uint64_t want[8] = {0, 0, T * 8, 0, T * C * 4, 0, 0, T * C * 4};
    for (int a = 0; a < 8; a++)
        assert_int_equal(size[a], want[a]);
    /* a size already set (adv_reduce_bufs's) stays */
    uint64_t kept[8] = {0, 0, 0, 0, 123, 0, 0, 0};
    assert_int_equal(adv_batch_fixed(&m, kept), 2);
    assert_int_equal(kept[4], 123);
    /* no batch (the tokens never freed: a parameter's place): nothing is decided */
    uint64_t none[8] = {0};
    evs[9] = (adv_ev){.a = 5, .kind = F};
    assert_int_equal(adv_batch_fixed(&m, none), 0);
    for (int a = 0; a < 8; a++)
        assert_int_equal(none[a], 0);
    /* two steps, the tokens freed in the first, the embedding's weight at the program's exit,
     * after the last: the weight (read first) is a parameter, the tokens still give the batch */
    adv_ev two[] = {
        {.a = 1, .kind = A, .step = -1}, {.a = 0, .kind = A, .step = -1}, {.a = 2, .kind = A},
        {.a = 3, .kind = A},             {.a = 4, .kind = A},             {.a = 5, .kind = A},
        {.a = 6, .kind = A},             {.a = 7, .kind = A},             {.a = 7, .kind = F},
        {.a = 0, .kind = F},             {.a = 5, .kind = F, .step = 1},  {.a = 1, .kind = F, .step = -1},
    };
    m.evs = two, m.nevs = sizeof two / sizeof *two, m.nsteps = 2;
    uint64_t again[8] = {0};
    assert_int_equal(adv_batch_fixed(&m, again), 3);
    for (int a = 0; a < 8; a++)
        assert_int_equal(again[a], want[a]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(staging_as_pytorch_allocated),
        cmocka_unit_test(no_staging_when_one_block_does_it),
        cmocka_unit_test(unpacked_dies_before_the_bias_sum),
        cmocka_unit_test(flash_splits_as_pytorch_made_them),
        cmocka_unit_test(sum_made_in_the_cast_contribution),
        cmocka_unit_test(what_the_batch_does_not_shrink),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
