/* snapshot_tstate — the allocator's segments and blocks rebuilt from a recording's rows
 * (snapshot/analyze/gm_tstate.h), the one rebuilding `gpumem frag` and `gpumem export --format
 * torch` share. Each test states one rule of how PyTorch's snapshot shows segments and blocks
 * and checks the captured state against it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "snapshot/analyze/gm_tstate.h"

enum { MiB = 1024 * 1024 };
static const uint64_t A = 0x7f0000000000ull;

static void seg_is(const gm_tcapture *c, size_t i, uint64_t addr, uint64_t size, int expandable)
{
    assert_true(i < c->nsegs);
    assert_int_equal(c->segs[i].addr, addr);
    assert_int_equal(c->segs[i].size, size);
    assert_int_equal(c->segs[i].expandable, expandable);
}

/* pages mapped beside an expandable run of the same device join it (one segment, as PyTorch's
 * snapshot lists a mapped run), before it or after it, and a page filling the gap between two
 * runs makes them one; another device's run beside it stays apart */
static void test_expandable_runs_join(void **st)
{
    (void)st;
    gm_tstate s = {0};
    gm_tcapture c;
    assert_int_equal(gm_tstate_map(&s, A + 2 * MiB, 2 * MiB, 1, 0, 7, 0), 0);
    assert_int_equal(gm_tstate_map(&s, A + 6 * MiB, 2 * MiB, 1, 0, 7, 0), 0);
    assert_int_equal(gm_tstate_map(&s, A + 8 * MiB, 2 * MiB, 1, 1, 7, 0), 0); /* device 1 */
    assert_int_equal(gm_tstate_map(&s, A, 2 * MiB, 1, 0, 7, 0), 0);
    assert_int_equal(gm_tstate_map(&s, A + 4 * MiB, 2 * MiB, 1, 0, 7, 0), 0);
    assert_int_equal(gm_tstate_capture(&s, -1, 0, &c), 0);
    assert_int_equal(c.nsegs, 2);
    seg_is(&c, 0, A, 8 * MiB, 1);
    seg_is(&c, 1, A + 8 * MiB, 2 * MiB, 1);
    gm_tcapture_free(&c);
    assert_int_equal(gm_tstate_capture(&s, 1, 0, &c), 0); /* one device's segments */
    assert_int_equal(c.nsegs, 1);
    seg_is(&c, 0, A + 8 * MiB, 2 * MiB, 1);
    gm_tcapture_free(&c);
    gm_tstate_free(&s);
}

/* a private pool's pages (a CUDA graph's) never join the default pool's run beside them, nor
 * another private pool's: each pool is its own segment, named by its pool, also after a cut */
static void test_private_pools_apart(void **st)
{
    (void)st;
    gm_tstate s = {0};
    gm_tcapture c;
    assert_int_equal(gm_tstate_map(&s, A, 2 * MiB, 1, 0, 7, 0), 0);
    assert_int_equal(gm_tstate_map(&s, A + 2 * MiB, 4 * MiB, 1, 0, 7, 1ull << 32), 0); /* pool (1, 0) */
    assert_int_equal(gm_tstate_map(&s, A + 6 * MiB, 2 * MiB, 1, 0, 7, 2), 0);          /* pool (0, 2) */
    assert_int_equal(gm_tstate_map(&s, A + 8 * MiB, 2 * MiB, 1, 0, 7, 2), 0);
    assert_int_equal(gm_tstate_unmap(&s, A + 3 * MiB, 2 * MiB), 0); /* a hole: two runs of (1, 0) */
    assert_int_equal(gm_tstate_capture(&s, -1, 0, &c), 0);
    assert_int_equal(c.nsegs, 4);
    seg_is(&c, 0, A, 2 * MiB, 1);
    seg_is(&c, 1, A + 2 * MiB, 1 * MiB, 1);
    seg_is(&c, 2, A + 5 * MiB, 1 * MiB, 1);
    seg_is(&c, 3, A + 6 * MiB, 4 * MiB, 1);
    assert_true(c.segs[0].pool == 0 && c.segs[1].pool == 1ull << 32 && c.segs[2].pool == 1ull << 32 &&
                c.segs[3].pool == 2);
    gm_tcapture_free(&c);
    gm_tstate_free(&s);
}

/* plain driver allocations stand alone even when adjacent; a size of 0 is no segment */
static void test_plain_segments_apart(void **st)
{
    (void)st;
    gm_tstate s = {0};
    gm_tcapture c;
    assert_int_equal(gm_tstate_map(&s, A, 2 * MiB, 0, 0, 0, 0), 0);
    assert_int_equal(gm_tstate_map(&s, A + 2 * MiB, 2 * MiB, 0, 0, 0, 0), 0);
    assert_int_equal(gm_tstate_map(&s, A + 8 * MiB, 0, 0, 0, 0, 0), 0);
    assert_int_equal(gm_tstate_capture(&s, -1, 0, &c), 0);
    assert_int_equal(c.nsegs, 2);
    seg_is(&c, 0, A, 2 * MiB, 0);
    seg_is(&c, 1, A + 2 * MiB, 2 * MiB, 0);
    gm_tcapture_free(&c);
    gm_tstate_free(&s);
}

/* pages unmapped out of a run cut it: from its start, its end, or its middle (two runs, the
 * right one still expandable); a whole segment given back is gone */
static void test_unmap_cuts(void **st)
{
    (void)st;
    gm_tstate s = {0};
    gm_tcapture c;
    assert_int_equal(gm_tstate_map(&s, A, 10 * MiB, 1, 0, 0, 0), 0);
    assert_int_equal(gm_tstate_map(&s, A + 20 * MiB, 2 * MiB, 0, 0, 0, 0), 0);
    assert_int_equal(gm_tstate_unmap(&s, A, 2 * MiB), 0);           /* start */
    assert_int_equal(gm_tstate_unmap(&s, A + 8 * MiB, 2 * MiB), 0); /* end */
    assert_int_equal(gm_tstate_unmap(&s, A + 4 * MiB, 2 * MiB), 0); /* middle */
    assert_int_equal(gm_tstate_unmap(&s, A + 20 * MiB, 2 * MiB), 0); /* whole */
    assert_int_equal(gm_tstate_unmap(&s, A + 40 * MiB, 2 * MiB), 0); /* nothing there */
    assert_int_equal(gm_tstate_capture(&s, -1, 0, &c), 0);
    assert_int_equal(c.nsegs, 2);
    seg_is(&c, 0, A + 2 * MiB, 2 * MiB, 1);
    seg_is(&c, 1, A + 6 * MiB, 2 * MiB, 1);
    gm_tcapture_free(&c);
    gm_tstate_free(&s);
}

/* blocks: one per address (allocated again at an address it holds: the old one was freed
 * unseen and is gone), dropped when their free completes, pending until then; the capture has
 * them sorted by address; each segment remembers the largest block it held */
static void test_blocks(void **st)
{
    (void)st;
    gm_tstate s = {0};
    gm_tcapture c;
    assert_int_equal(gm_tstate_map(&s, A, 8 * MiB, 1, 0, 0, 0), 0);
    gm_tblk b3 = {.addr = A + 3 * MiB, .size = MiB, .requested = 1000, .birth = 1};
    gm_tblk b0 = {.addr = A, .size = 2 * MiB, .requested = 2 * MiB, .birth = 2};
    gm_tblk b5 = {.addr = A + 5 * MiB, .size = MiB, .birth = 3};
    gm_tblk b3again = {.addr = A + 3 * MiB, .size = 512, .birth = 4};
    assert_int_equal(gm_tstate_block_add(&s, &b3), 0);
    assert_int_equal(gm_tstate_block_add(&s, &b0), 0);
    assert_int_equal(gm_tstate_block_add(&s, &b5), 0);
    assert_int_equal(gm_tstate_block_add(&s, &b3again), 0);
    gm_tstate_block_at(&s, A)->pending = 1;
    gm_tstate_block_drop(&s, A + 5 * MiB);
    assert_null(gm_tstate_block_at(&s, A + 5 * MiB));
    assert_int_equal(gm_tstate_capture(&s, -1, 0, &c), 0);
    assert_int_equal(c.nblocks, 2);
    assert_int_equal(c.blocks[0].addr, A);
    assert_true(c.blocks[0].pending);
    assert_int_equal(c.blocks[1].addr, A + 3 * MiB);
    assert_int_equal(c.blocks[1].size, 512);
    assert_int_equal(c.blocks[1].birth, 4);
    assert_int_equal(c.segs[0].largest, 2 * MiB);
    gm_tcapture_free(&c);
    /* the state goes on after a capture: the block at A still found */
    assert_non_null(gm_tstate_block_at(&s, A));
    gm_tstate_free(&s);
}

/* a recording without segment events: each live block is a segment of its own */
static void test_blocks_as_segments(void **st)
{
    (void)st;
    gm_tstate s = {0};
    gm_tcapture c;
    gm_tblk b1 = {.addr = A + MiB, .size = MiB}, b0 = {.addr = A, .size = 4096};
    assert_int_equal(gm_tstate_block_add(&s, &b1), 0);
    assert_int_equal(gm_tstate_block_add(&s, &b0), 0);
    assert_int_equal(gm_tstate_capture(&s, 0, 1, &c), 0);
    assert_int_equal(c.nsegs, 2);
    seg_is(&c, 0, A, 4096, 0);
    seg_is(&c, 1, A + MiB, MiB, 0);
    gm_tcapture_free(&c);
    gm_tstate_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expandable_runs_join), cmocka_unit_test(test_private_pools_apart),
        cmocka_unit_test(test_plain_segments_apart),
        cmocka_unit_test(test_unmap_cuts),           cmocka_unit_test(test_blocks),
        cmocka_unit_test(test_blocks_as_segments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
