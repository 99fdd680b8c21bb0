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


class Buffer:
    """copy.deepcopy(Buffer(rt)) allocates from inside the standard library's copy module: the
    report names __deepcopy__ and, as its caller, the user's line that called deepcopy (the
    frames of copy.py in between are skipped). The copy is kept: a second planted leak."""

    def __init__(self, rt):
        self.rt = rt
        self.ptr = None

    def __deepcopy__(self, memo):
        b = Buffer(self.rt)
        p = ctypes.c_void_p()
        rc = self.rt.lib.cudaMalloc(ctypes.byref(p), 1 << 20)  # SITE:deepcopy
        assert rc == 0, rc
        b.ptr = p.value
        _kept.append(b)
        return b
