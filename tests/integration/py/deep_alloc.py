"""cudaMalloc/cudaFree pairs from a Python call stack DEPTH frames deep (tests/bench/python_bench.sh).

usage: python3 deep_alloc.py LIBCUDART [PAIRS] [DEPTH] [gil|nogil]

  gil    ctypes.PyDLL: the GIL stays held through the call (frames read through the C API)
  nogil  ctypes.CDLL: the GIL is released around the call (frames read without it)
"""
import ctypes
import sys


def main():
    nogil = len(sys.argv) > 4 and sys.argv[4] == "nogil"
    lib = (ctypes.CDLL if nogil else ctypes.PyDLL)(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    depth = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    p = ctypes.c_void_p()
    ref = ctypes.byref(p)
    malloc, free = lib.cudaMalloc, lib.cudaFree
    malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    free.argtypes = [ctypes.c_void_p]

    def leaf():
        for _ in range(pairs):
            malloc(ref, 4096)
            free(p)

    def nest(n):
        if n <= 2:  # main and leaf are the other two frames
            leaf()
        else:
            nest(n - 1)

    nest(depth - 2)  # <module>, main, depth - 3 nests, leaf: depth frames at the allocation


main()
