/*
 * stack_probe.so — what earlier calls left on the calling thread's stack, for
 * tests/integration/py/trace_residue.py (preload_uses.sh's residue rows with Python frames).
 * Both functions take gpumem_torch_trace_entry's arguments (two ints, five words): ctypes lays out
 * a call's converted arguments on the stack above the callee, so called from the same Python
 * frame as the entry, their frames lie where the entry's did. The words looked for are passed
 * complemented (~w), since ctypes' copy of the arguments stays on the stack too.
 *   stack_probe_find(n, 0, ~w0, .., ~w4)   the depth (bytes below its buffer's top, the caller's
 *       frames just above) of the shallowest of w0..w(n-1) in the 32 KiB below its caller, read as
 *       they lie there (a local buffer the program never writes, like PyTorch's partly filled
 *       argument structs), plus which one (0-4; the depth is a multiple of 8); -1 when none is
 *   stack_probe_leave(depth, 0, ~w, 0, 0, 0, 0)   leaves w that deep below its caller (the
 *       control: a word left there is found there)
 */
#include <stddef.h>
#include <stdint.h>

#define PROBE_WORDS 4096 /* 32 KiB: deeper than the Python reader's frames (~12 KiB) */

__attribute__((noinline)) long stack_probe_find(int n, int unused, uint64_t w0, uint64_t w1,
                                                uint64_t w2, uint64_t w3, uint64_t w4)
{
    (void)unused;
    const uint64_t w[] = {~w0, ~w1, ~w2, ~w3, ~w4};
    uint64_t b[PROBE_WORDS];
    __asm__ volatile("" : "=m"(b)); /* the words as the stack holds them */
    for (size_t i = PROBE_WORDS; i-- > 0;)
        for (int j = 0; j < n && j < 5; j++)
            if (b[i] == w[j]) return (long)((PROBE_WORDS - 1 - i) * sizeof *b) + j;
    return -1;
}

__attribute__((noinline)) void stack_probe_leave(int depth, int unused, uint64_t word, uint64_t w1,
                                                 uint64_t w2, uint64_t w3, uint64_t w4)
{
    (void)unused, (void)w1, (void)w2, (void)w3, (void)w4;
    uint64_t b[PROBE_WORDS];
    size_t i = PROBE_WORDS - 1 - (size_t)depth / sizeof *b;
    if (i < PROBE_WORDS) b[i] = ~word;
    __asm__ volatile("" : : "r"(b) : "memory"); /* the store is kept */
}
