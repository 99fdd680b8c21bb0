/* snapshot_tblocks — PyTorch's block structure replayed from a trace's addresses
 * (snapshot/formats/gm_torch.h): the block sizes PyTorch's statistics count, which its trace
 * does not carry. Each test states one rule of PyTorch's allocator (c10/cuda/
 * CUDACachingAllocator.cpp: round_size, should_split, the merges of free_block, expandable
 * segments' map/unmap) and checks the size gm_tblocks gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "snapshot/formats/gm_torch.h"

enum { KiB = 1024, MiB = 1024 * 1024 };
static const uint64_t S = 0x7f0000000000ull; /* a segment's address */

static gm_tblocks make(int expandable, uint64_t max_split)
{
    gm_tsettings s = {0};
    s.expandable = expandable;
    s.max_split = max_split ? max_split : UINT64_MAX;
    gm_tblocks b;
    gm_tblocks_init(&b, &s);
    return b;
}

/* requests round to 512 bytes, at least 512 */
static void test_round_to_512(void **st)
{
    (void)st;
    gm_tsettings s = {0};
    assert_int_equal(gm_tround(&s, 1), 512);
    assert_int_equal(gm_tround(&s, 512), 512);
    assert_int_equal(gm_tround(&s, 513), 1024);
    assert_int_equal(gm_tround(&s, 3 * MiB + 1), 3 * MiB + 512);
}

/* roundup_power2_divisions: 4 divisions of [1 MiB, 2 MiB) round 1.3 MiB up to 1.5 MiB; a power
 * of two stays; sizes at most 512 x divisions keep the 512-byte rounding */
static void test_round_power2_divisions(void **st)
{
    (void)st;
    gm_tsettings s = {0};
    for (int i = 0; i < 16; i++) s.divisions[i] = 4;
    assert_int_equal(gm_tround(&s, 1363148), 1572864);
    assert_int_equal(gm_tround(&s, 2 * MiB), 2 * MiB);
    assert_int_equal(gm_tround(&s, 1000), 1024);
}

/* small pool: a block is split when at least 512 bytes would remain */
static void test_small_split(void **st)
{
    (void)st;
    gm_tblocks b = make(0, 0);
    assert_int_equal(gm_tblocks_map(&b, S, 2 * MiB, 0), 0);
    assert_int_equal(gm_tblocks_alloc(&b, S, 256), 512);
    assert_int_equal(gm_tblocks_alloc(&b, S + 512, 1000), 1024);
    /* the rest of the segment is one free block: asked for all of it but 512, it is not split */
    assert_int_equal(gm_tblocks_alloc(&b, S + 1536, 2 * MiB - 1536 - 512 + 1), 2 * MiB - 1536);
    assert_int_equal(b.guessed, 0);
    gm_tblocks_free(&b);
}

/* large pool: split only when more than 1 MiB remains (and the size is under max_split_size) */
static void test_large_split(void **st)
{
    (void)st;
    gm_tblocks b = make(0, 0);
    gm_tblocks_map(&b, S, 20 * MiB, 0);
    assert_int_equal(gm_tblocks_alloc(&b, S, 19 * MiB), 20 * MiB); /* 1 MiB left: no split */
    gm_tblocks_free_block(&b, S);
    assert_int_equal(gm_tblocks_alloc(&b, S, 10 * MiB), 10 * MiB); /* 10 MiB left: split */
    assert_int_equal(gm_tblocks_alloc(&b, S + 10 * MiB, 4 * MiB), 4 * MiB);
    gm_tblocks_free(&b);
    /* at or above max_split_size a block is never split */
    b = make(0, 20 * MiB);
    gm_tblocks_map(&b, S, 60 * MiB, 0);
    assert_int_equal(gm_tblocks_alloc(&b, S, 25 * MiB), 60 * MiB);
    gm_tblocks_free(&b);
}

/* a completed free merges with its free neighbours, on both sides */
static void test_merge_on_free(void **st)
{
    (void)st;
    gm_tblocks b = make(0, 0);
    gm_tblocks_map(&b, S, 2 * MiB, 0);
    assert_int_equal(gm_tblocks_alloc(&b, S, 4 * KiB), 4 * KiB);
    assert_int_equal(gm_tblocks_alloc(&b, S + 4 * KiB, 4 * KiB), 4 * KiB);
    assert_int_equal(gm_tblocks_alloc(&b, S + 8 * KiB, 4 * KiB), 4 * KiB);
    gm_tblocks_free_block(&b, S);
    gm_tblocks_free_block(&b, S + 8 * KiB); /* merges with the free rest of the segment */
    gm_tblocks_free_block(&b, S + 4 * KiB); /* merges left and right: the whole segment */
    /* one free block again: asked for all of it, it is not split (nothing would remain) */
    assert_int_equal(gm_tblocks_alloc(&b, S, 2 * MiB), 2 * MiB);
    assert_int_equal(b.guessed, 0);
    gm_tblocks_free(&b);
}

/* two segments side by side in the address space are never one block */
static void test_segments_stay_apart(void **st)
{
    (void)st;
    gm_tblocks b = make(0, 0);
    gm_tblocks_map(&b, S, 2 * MiB, 0);
    gm_tblocks_map(&b, S + 2 * MiB, 2 * MiB, 0);
    assert_int_equal(gm_tblocks_alloc(&b, S, 1 * MiB), 1 * MiB);
    assert_int_equal(gm_tblocks_alloc(&b, S + 1 * MiB, 1 * MiB), 1 * MiB); /* the first's rest */
    assert_int_equal(gm_tblocks_alloc(&b, S + 2 * MiB, 4 * KiB), 4 * KiB); /* the second's start */
    assert_int_equal(b.guessed, 0);
    gm_tblocks_free(&b);
}

/* expandable segments: pages mapped at the end join the free block before them; a large block
 * is split whenever 512 bytes would remain; unmapped pages leave the block */
static void test_expandable(void **st)
{
    (void)st;
    gm_tblocks b = make(1, 0);
    gm_tblocks_map(&b, S, 2 * MiB, 1);
    gm_tblocks_map(&b, S + 2 * MiB, 2 * MiB, 1);
    assert_int_equal(gm_tblocks_alloc(&b, S, 3 * MiB + 100), 3 * MiB + 512);
    gm_tblocks_free_block(&b, S);
    gm_tblocks_unmap(&b, S + 2 * MiB, 2 * MiB); /* the free block shrinks to the first 2 MiB */
    assert_int_equal(gm_tblocks_alloc(&b, S, 2 * MiB), 2 * MiB);
    assert_int_equal(b.guessed, 0);
    gm_tblocks_free(&b);
}

/* an allocation where no free block starts (the trace began after the segment was carved up)
 * gets the rounded request, and is counted */
static void test_guessed(void **st)
{
    (void)st;
    gm_tblocks b = make(0, 0);
    assert_int_equal(gm_tblocks_alloc(&b, S, 1000), 1024);
    gm_tblocks_map(&b, S + 4 * MiB, 2 * MiB, 0);
    assert_int_equal(gm_tblocks_alloc(&b, S + 4 * MiB + 4096, 100), 512); /* mid-block */
    assert_int_equal(b.guessed, 2);
    gm_tblocks_free(&b);
}

/* the largest free block (an OOM's largest_free, built from PyTorch's trace): free blocks that
 * merged count as one, allocated ones and blocks gone with their segment not at all */
static void test_largest_free(void **st)
{
    (void)st;
    gm_tblocks b = make(0, 0);
    assert_int_equal(gm_tblocks_largest_free(&b), 0);
    gm_tblocks_map(&b, S, 20 * MiB, 0);
    gm_tblocks_map(&b, S + 32 * MiB, 2 * MiB, 0);
    assert_int_equal(gm_tblocks_largest_free(&b), 20 * MiB);
    assert_int_equal(gm_tblocks_alloc(&b, S, 4 * MiB), 4 * MiB);
    assert_int_equal(gm_tblocks_alloc(&b, S + 4 * MiB, 4 * MiB), 4 * MiB);
    assert_int_equal(gm_tblocks_alloc(&b, S + 8 * MiB, 4 * MiB), 4 * MiB);
    assert_int_equal(gm_tblocks_largest_free(&b), 8 * MiB); /* the first segment's rest */
    gm_tblocks_free_block(&b, S);
    assert_int_equal(gm_tblocks_largest_free(&b), 8 * MiB);
    gm_tblocks_free_block(&b, S + 8 * MiB); /* merges with the rest: 12 MiB */
    assert_int_equal(gm_tblocks_largest_free(&b), 12 * MiB);
    gm_tblocks_free_block(&b, S + 4 * MiB); /* the whole segment again */
    assert_int_equal(gm_tblocks_largest_free(&b), 20 * MiB);
    gm_tblocks_unmap(&b, S, 20 * MiB); /* gone: the other segment's 2 MiB is what is left */
    assert_int_equal(gm_tblocks_largest_free(&b), 2 * MiB);
    gm_tblocks_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_to_512),  cmocka_unit_test(test_round_power2_divisions),
        cmocka_unit_test(test_small_split),   cmocka_unit_test(test_large_split),
        cmocka_unit_test(test_merge_on_free), cmocka_unit_test(test_segments_stay_apart),
        cmocka_unit_test(test_expandable),    cmocka_unit_test(test_guessed),
        cmocka_unit_test(test_largest_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
