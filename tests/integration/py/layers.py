"""Second file of the Python-frames test: the functions that call cudaMalloc themselves.
Lines marked `# SITE:name` are looked up by tests/integration/python_frames.sh."""
import ctypes

_kept = []


def alloc_weights(rt, n):
    p = ctypes.c_void_p()
    rc = rt.lib.cudaMalloc(ctypes.byref(p), n)  # SITE:alloc_weights
    assert rc == 0, rc
    return p.value


def alloc_activations(rt, n):
    p = ctypes.c_void_p()
    rc = rt.lib.cudaMalloc(ctypes.byref(p), n)  # SITE:alloc_activations
    assert rc == 0, rc
    return p.value


def leak_cache(rt, n):
    # the planted leak: allocated, kept, never freed
    p = ctypes.c_void_p()
    rc = rt.lib.cudaMalloc(ctypes.byref(p), n)  # SITE:leak_cache
    assert rc == 0, rc
    _kept.append(p.value)


def release(rt, p):
    rt.lib.cudaFree(p)
