"""The virtual GPU's CUDA runtime through ctypes (standard library only), for the Python tests.

cudart.load(path, gil=True) returns an object with malloc(n) -> int and free(p). With gil=True
the functions are called through ctypes.PyDLL, which keeps the GIL held during the call (gpumem
reads Python frames only then); with gil=False through ctypes.CDLL, which releases it.
"""
import ctypes


class Runtime:
    def __init__(self, path, gil):
        flavour = ctypes.PyDLL if gil else ctypes.CDLL
        self.lib = flavour(path, mode=ctypes.RTLD_GLOBAL)
        self.lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        self.lib.cudaMalloc.restype = ctypes.c_int
        self.lib.cudaFree.argtypes = [ctypes.c_void_p]
        self.lib.cudaFree.restype = ctypes.c_int

    def malloc(self, n):
        p = ctypes.c_void_p()
        rc = self.lib.cudaMalloc(ctypes.byref(p), n)
        if rc != 0:
            raise RuntimeError("cudaMalloc(%d) failed: %d" % (n, rc))
        return p.value

    def free(self, p):
        rc = self.lib.cudaFree(p)
        if rc != 0:
            raise RuntimeError("cudaFree failed: %d" % rc)


def load(path, gil=True):
    return Runtime(path, gil)
