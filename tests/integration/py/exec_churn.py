"""Code objects freed and created again, likely at the same addresses: 200 functions compiled by
exec, one at a time, each allocating once (its size says which) and dropped before the next
(tests/integration/python_frames.sh). The GIL-less reader caches code objects by address; each
allocation must still carry its own function's name.

usage: python3 exec_churn.py LIBCUDART [gil|nogil]
"""
import ctypes
import sys

flavour = ctypes.CDLL if len(sys.argv) > 2 and sys.argv[2] == "nogil" else ctypes.PyDLL
lib = flavour(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
lib.cudaMalloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
lib.cudaFree.argtypes = [ctypes.c_void_p]
SRC = """def churn_%d():
    p = ctypes.c_void_p()
    assert lib.cudaMalloc(ctypes.byref(p), %d) == 0
    lib.cudaFree(p)
"""
for i in range(200):
    ns = {"lib": lib, "ctypes": ctypes}
    exec(compile(SRC % (i, 4096 + i), "<churn>", "exec"), ns)
    ns["churn_%d" % i]()
    del ns
print("exec_churn: done")
