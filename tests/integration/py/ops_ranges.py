"""Op ranges named the way PyTorch's torch.autograd.profiler.emit_nvtx() names them, pushed
through gpumem.range (the CPU build of PyTorch has no NVTX to emit them itself): the report's
"by op" table groups the allocations by the innermost op (tests/integration/python_module.sh).

usage: python3 ops_ranges.py LIBCUDART
"""
import ctypes
import sys

import gpumem

rt = ctypes.PyDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
rt.cudaMalloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
KiB = 1024
kept = []


def alloc(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0
    kept.append(p.value)


for seq in range(3):
    with gpumem.range("step %d" % seq), gpumem.range("fwd/Net"):
        with gpumem.range("aten::linear, seq = %d" % (2 * seq)):
            with gpumem.range("aten::addmm, seq = %d, sizes = [[4, 8], [8, 16]]" % (2 * seq + 1)):
                alloc(64 * KiB)
            alloc(16 * KiB)  # inside linear, outside addmm
        with gpumem.range("AddmmBackward0, seq = %d" % (2 * seq + 1)):
            alloc(32 * KiB)
        alloc(8 * KiB)  # in no op
print("ops_ranges: done")
