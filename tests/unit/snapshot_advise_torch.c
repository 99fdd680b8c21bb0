/* snapshot_advise_torch.c — what advise's PyTorch model computes from a kernel's launch rather
 * than from the trace: the staging buffer and semaphores of PyTorch's reduction kernel summing a
 * Linear's bias gradient over the batch's rows (adv_reduce_staging, gm_advise_autocast.c). The
 * table is what PyTorch 2.14.1 allocated on the virtual GPU (H100 profile, 132 SMs), read from
 * recordings of tests/torch/train_gpt2.py: gpt2 124M and gpt2-medium at B 8 and B 1, T 1024
 * (rows 8,192 and 1,024), for their Linears' widths. */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(staging_as_pytorch_allocated),
        cmocka_unit_test(no_staging_when_one_block_does_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
