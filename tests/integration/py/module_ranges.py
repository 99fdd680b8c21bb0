"""The gpumem module without torch (tests/integration/python_module.sh): gpumem.range around
ctypes allocations, gpumem.name of a device pointer; and, without libgpumem.so, every call a
no-op with exactly one warning.

usage: python3 module_ranges.py LIBCUDART (loaded|absent)
"""
import ctypes
import sys
import warnings

import gpumem

warnings.simplefilter("always")  # count every warning the module gives, not the first per line
rt = ctypes.PyDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
rt.cudaMalloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]


def alloc(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0
    return p.value


@gpumem.range("loader")
def load_batch():
    return alloc(1 << 20)


def main(expect_loaded):
    assert gpumem.loaded() == expect_loaded, gpumem.loaded()
    with gpumem.range("step 1"):
        with gpumem.range("fwd"):
            a = alloc(2 << 20)
            named = gpumem.name(a, "activations")
        b = load_batch()
    c = alloc(3 << 20)  # outside every range
    assert named == expect_loaded, named
    if not expect_loaded:
        assert gpumem.annotate(object()) == []
        assert gpumem.use_as_allocator() is False
    for p in (a, b, c):
        rt.cudaFree(p)
    print("module_ranges: done")


main(sys.argv[2] == "loaded")
