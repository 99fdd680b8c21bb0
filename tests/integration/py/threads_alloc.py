"""Four Python threads allocate at once, two holding the GIL through the call (ctypes.PyDLL)
and two releasing it (ctypes.CDLL), while the main thread churns code objects (new functions
compiled as it goes) — tests/integration/python_frames.sh.

usage: python3 threads_alloc.py LIBCUDART
"""
import ctypes
import sys
import threading

path = sys.argv[1]
with_gil = ctypes.PyDLL(path, mode=ctypes.RTLD_GLOBAL)
without_gil = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
for lib in (with_gil, without_gil):
    lib.cudaMalloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.cudaFree.argtypes = [ctypes.c_void_p]


def worker_gil(n):
    p = ctypes.c_void_p()
    for i in range(n):
        assert with_gil.cudaMalloc(ctypes.byref(p), 4096 + i % 7 * 512) == 0
        with_gil.cudaFree(p)


def worker_nogil(n):
    p = ctypes.c_void_p()
    for i in range(n):
        assert without_gil.cudaMalloc(ctypes.byref(p), 4096 + i % 5 * 512) == 0
        without_gil.cudaFree(p)


threads = [threading.Thread(target=f, args=(2000,)) for f in (worker_gil, worker_gil, worker_nogil, worker_nogil)]
for t in threads:
    t.start()
for i in range(300):  # fresh code objects while the workers run
    ns = {}
    exec("def churn_%d(x):\n    return x + %d\n" % (i, i), ns)
    ns["churn_%d" % i](i)
for t in threads:
    t.join()
print("threads_alloc: done")
