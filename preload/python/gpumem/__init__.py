"""gpumem from Python: name tensors, mark phases, label a model's modules, and use gpumem as
PyTorch's CUDA allocator.

Pure Python (ctypes, standard library only). It talks to libgpumem.so, which `gpumem record`
(or LD_PRELOAD) puts in the process; it never loads the library itself. Without it every call
does nothing, and the first one says so once (a RuntimeWarning).

    import gpumem
    gpumem.annotate(model)                  # ranges fwd/<module path>, bwd/<module path>
    with gpumem.range("step %d" % step):    # a phase, like nvtxRangePush/Pop
        loss = model(x).sum()
        loss.backward()
    gpumem.name(t, "kv_cache")              # a tensor (or a device pointer) by name

Installed by `make install` into PREFIX/share/gpumem/python; put that on the path with
`export PYTHONPATH=PREFIX/share/gpumem/python` (or `pip install PREFIX/share/gpumem/python`).
"""
import contextlib
import ctypes
import os
import sys
import warnings

__all__ = ["loaded", "name", "range", "annotate", "use_as_allocator"]
__version__ = "0.1.0"

_lib = None       # the process's libgpumem.so (ctypes), False once looked for and not found
_warned = False


def _gpumem():
    """libgpumem.so's functions when it is loaded in this process, else None (warning once)."""
    global _lib, _warned
    if _lib is None:
        _lib = False
        try:
            lib = ctypes.CDLL(None)  # the process's global symbols: LD_PRELOAD puts gpumem there
            lib.gpumem_range_push.argtypes = [ctypes.c_char_p]
            lib.gpumem_range_push.restype = ctypes.c_int
            lib.gpumem_range_pop.argtypes = []
            lib.gpumem_range_pop.restype = ctypes.c_int
            lib.gpumem_name.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
            lib.gpumem_name.restype = ctypes.c_int
            _lib = lib
        except (AttributeError, OSError):
            pass
    if _lib is False:
        if not _warned:
            _warned = True
            warnings.warn("gpumem: libgpumem.so is not loaded in this process (run the program "
                          "under `gpumem record -- python ...`); gpumem calls do nothing",
                          RuntimeWarning, stacklevel=3)
        return None
    return _lib


def loaded():
    """True when libgpumem.so is loaded in this process (no warning either way)."""
    global _warned
    saved, _warned = _warned, True
    try:
        return _gpumem() is not None
    finally:
        _warned = saved


def _bytes(s):
    return s.encode("utf-8", "replace") if isinstance(s, str) else bytes(s)


def name(tensor_or_ptr, label):
    """Names the allocation that holds a tensor (anything with data_ptr()) or a device pointer
    (an int). True when gpumem knew the allocation; False otherwise (or without gpumem).
    A CUDA tensor of PyTorch's own allocator under `gpumem record` is named itself (in PyTorch's
    trace, like the parameters and gradients the hooks name), not the cached segment holding it."""
    traced = sys.modules.get("gpumem._torch")
    if traced is not None and hasattr(tensor_or_ptr, "data_ptr") and traced.name_tensor(tensor_or_ptr, label):
        return True
    lib = _gpumem()
    if lib is None:
        return False
    ptr = tensor_or_ptr.data_ptr() if hasattr(tensor_or_ptr, "data_ptr") else int(tensor_or_ptr)
    if not ptr:
        return False
    return lib.gpumem_name(ctypes.c_void_p(ptr), _bytes(label)) == 0


# Set when the program names its own phases (gpumem.range, gpumem.annotate): the ranges that
# `gpumem record` would add for a PyTorch program (gpumem._torch) then stay out of its way.
# Written only by _own_ranges: libgpumem.so's C hooks read their own copy of it.
_user_ranges = False


def _own_ranges():
    """The program names its own phases: sets _user_ranges, which gpumem._torch's Python hooks
    read, and tells libgpumem.so's C hooks (preload/torch_hooks.c, gpumem_torch_user_ranges),
    which read a flag of their own (no module lookup per range, none of the GIL on autograd's
    thread). The one writer of _user_ranges: an assignment elsewhere would reach the Python hooks
    only. Never cleared."""
    global _user_ranges
    if _user_ranges:
        return
    _user_ranges = True
    try:
        tell = ctypes.CDLL(None).gpumem_torch_user_ranges
    except (AttributeError, OSError):  # no libgpumem.so here (or one without C hooks)
        return
    tell.argtypes, tell.restype = [], None
    tell()


class range(contextlib.ContextDecorator):  # noqa: A001 - the name the README documents
    """`with gpumem.range("fwd"):` or `@gpumem.range("fwd")`: a range of the calling thread,
    exactly like nvtxRangePush/nvtxRangePop (allocations inside it get it as their phase)."""

    def __init__(self, label):
        _own_ranges()
        self.label = _bytes(label)
        self._pushed = []

    def __enter__(self):
        lib = _gpumem()
        self._pushed.append(lib is not None and lib.gpumem_range_push(self.label) >= 0)
        return self

    def __exit__(self, *exc):
        if self._pushed.pop():
            _lib.gpumem_range_pop()
        return False


def _push(label):
    lib = _gpumem()
    return lib is not None and lib.gpumem_range_push(label) >= 0


def _pop():
    _lib.gpumem_range_pop()


def annotate(model, prefix=None):
    """Registers forward and backward hooks on every module of a torch.nn.Module so that its
    work becomes a range named by its path: fwd/<path> around its forward, bwd/<path> around
    its backward. The root module's path is its class name (or `prefix`). Returns the hook
    handles (call .remove() on each to undo); [] without gpumem.

    Backward ranges start when the gradient of a module's output arrives and end when the
    gradients of its inputs are computed, when the backward of a module that is not inside it
    starts, or at the end of the backward pass, whichever comes first: autograd does not tell
    every module when its backward ends (not when no input needs a gradient), and ranges must
    stay nested."""
    _own_ranges()
    if _gpumem() is None:
        return []
    import threading
    root = prefix if prefix is not None else type(model).__name__
    state = threading.local()  # per thread: autograd may run backward on its own threads
    handles = []
    for path, module in model.named_modules():
        handles += _annotate_one(module, path, path or root, state)
    return handles


def _tensors(x):
    if hasattr(x, "grad_fn") and hasattr(x, "register_hook"):
        yield x
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


def _inside(outer, inner):
    """Module path `inner` is `outer` or inside it ("" is the root)."""
    return outer == "" or inner == outer or inner.startswith(outer + ".")


def _bwd_stack(state):
    return state.__dict__.setdefault("bwd", [])


def _bwd_close(state, until=None):
    """Pops this thread's open backward ranges, innermost first, through `until` (all: None)."""
    st = _bwd_stack(state)
    while st:
        key, pushed = st.pop()
        if pushed:
            _pop()
        if key == until:
            break


def _annotate_one(module, key, path, state):
    fwd, bwd = _bytes("fwd/" + path), _bytes("bwd/" + path)

    def pre(mod, inputs):
        state.__dict__.setdefault("fwd", []).append(_push(fwd))

    def post(mod, inputs, output):
        stack = state.__dict__.get("fwd")
        if stack and stack.pop():
            _pop()
        outs = [t for t in _tensors(output) if t.requires_grad]
        if not outs:
            return None
        started = []

        def grad_arrived(grad):  # the backward of this module starts
            if started:
                return None
            started.append(True)
            st = _bwd_stack(state)
            while st and not _inside(st[-1][0], key):
                _bwd_close(state, st[-1][0])  # a module whose end autograd did not report
            if not st and not state.__dict__.get("queued"):
                state.queued = True
                _end_of_backward(state)
            st.append((key, _push(bwd)))
            return None
        for t in outs:
            t.register_hook(grad_arrived)
        return None

    def backward_done(mod, grad_input, grad_output):
        if any(k == key for k, _ in _bwd_stack(state)):
            _bwd_close(state, key)
        return None

    handles = [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    if hasattr(module, "register_full_backward_hook"):
        handles.append(module.register_full_backward_hook(backward_done))
    return handles


def _end_of_backward(state):
    """Closes every backward range still open when the backward pass ends."""
    def done():
        _bwd_close(state)
        state.queued = False
    try:
        import torch
        torch.autograd.Variable._execution_engine.queue_callback(done)
    except (ImportError, AttributeError, RuntimeError):
        state.queued = False


def use_as_allocator():
    """Makes libgpumem.so PyTorch's CUDA allocator (PyTorch 2.0 or later, before the first CUDA
    allocation). True when done; False, with a warning saying why, otherwise. (The other way:
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 under gpumem record.)

    Through libgpumem_torch.so (beside libgpumem.so, built for this torch: preload/torch_alloc.cpp)
    a request gpumem refuses raises torch.OutOfMemoryError, as under PyTorch's own allocator;
    set_per_process_memory_fraction caps gpumem's allocator (fraction x the device's total,
    replacing GPUMEM_CONF's per_process_memory_fraction key, as PyTorch replaces its own key);
    Tensor.record_stream reaches gpumem (gpumem_record_stream); PyTorch's emptyCache, whichever
    way it is called (torch.cuda.empty_cache, torch._C._cuda_emptyCache), empties gpumem's cache;
    and PyTorch's memory statistics (memory_stats, memory_allocated, max_memory_reserved,
    memory_summary, reset_peak_memory_stats, ...) are gpumem's allocator's (gpumem_torch_stats;
    preload/README.md "PyTorch" says what each figure is), also without that library (_stats_from_gpumem).
    Without that library (not built, or built for another torch) it warns once and plugs in
    gpumem_torch_malloc / gpumem_torch_free through torch.cuda.memory.CUDAPluggableAllocator, where
    PyTorch checks nothing: a refused request is then a tensor without memory, failing at its first
    use; the fraction and record_stream do nothing, and only torch.cuda.empty_cache (wrapped here)
    empties gpumem's cache."""
    if _gpumem() is None:
        return False
    try:
        import torch
        import torch.cuda.memory as tcm
    except ImportError:
        warnings.warn("gpumem.use_as_allocator: torch is not installed", RuntimeWarning, stacklevel=2)
        return False
    if not hasattr(tcm, "CUDAPluggableAllocator"):
        warnings.warn("gpumem.use_as_allocator: this PyTorch has no CUDAPluggableAllocator (2.0 "
                      "or later); run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 instead",
                      RuntimeWarning, stacklevel=2)
        return False
    path = _library_path()
    if path is None:
        warnings.warn("gpumem.use_as_allocator: cannot find libgpumem.so's path in /proc/self/maps",
                      RuntimeWarning, stacklevel=2)
        return False
    done = _use_shim(os.path.join(os.path.dirname(path), "libgpumem_torch.so"), torch.__version__)
    if done is None:  # without the shim: PyTorch's own pluggable allocator over the two entry points
        alloc = tcm.CUDAPluggableAllocator(path, "gpumem_torch_malloc", "gpumem_torch_free")
        tcm.change_current_allocator(alloc)
        _empty_cache_to_gpumem(path)  # the shim's reset hook does it for every caller
        _stats_from_gpumem(torch, path)  # the shim's allocator answers them itself
        done = True
    return done


def _use_shim(shim, version):
    """gpumem as PyTorch's allocator through libgpumem_torch.so's gpumem_torch_allocator_use:
    True when done, False when PyTorch refused (warned), None when the library cannot be used
    (warned: the caller plugs gpumem in without it)."""
    why = None
    try:
        lib = ctypes.CDLL(shim)
        lib.gpumem_torch_trace_built_for.restype = ctypes.c_char_p
        built = (lib.gpumem_torch_trace_built_for() or b"").decode()
        if built != version:
            why = "it was built for torch %s, this is torch %s (rebuild gpumem: make)" % (built or "?", version)
        else:
            use = lib.gpumem_torch_allocator_use
            use.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            use.restype = ctypes.c_int
    except (OSError, AttributeError) as e:
        why = "%s (gpumem is built without it where torch or a C++ compiler was missing: make deps, make)" % e
    if why is not None:
        warnings.warn("gpumem.use_as_allocator: cannot use %s: %s; gpumem is PyTorch's allocator without it: "
                      "an allocation gpumem refuses gives a tensor without memory instead of "
                      "torch.OutOfMemoryError, set_per_process_memory_fraction and Tensor.record_stream are "
                      "ignored without a word, and only torch.cuda.empty_cache (not torch._C._cuda_emptyCache) "
                      "empties gpumem's cache"
                      % (shim, why), RuntimeWarning, stacklevel=3)
        return None
    err = ctypes.create_string_buffer(512)
    if use(err, len(err)) != 1:
        warnings.warn("gpumem.use_as_allocator: PyTorch refused the allocator: %s (call it before the first "
                      "CUDA allocation)" % err.value.decode(errors="replace"), RuntimeWarning, stacklevel=3)
        return False
    return True


def _empty_cache_to_gpumem(path):
    """Without libgpumem_torch.so: torch.cuda.empty_cache() (both its names) gives gpumem's cache
    back too. PyTorch's CUDAPluggableAllocator made from Python calls no function of the
    allocator's there (its reset hook is C++ only: the shim sets it, and then every caller of
    emptyCache reaches gpumem), so without this a destroyed CUDA graph's pool, whose last tensor
    was freed after the graph, stayed mapped to the end of the run."""
    import torch
    import torch.cuda.memory as tcm
    try:
        fn = ctypes.CDLL(path).gpumem_empty_cache
    except (AttributeError, OSError):
        warnings.warn("gpumem.use_as_allocator: %s has no gpumem_empty_cache (an older "
                      "libgpumem.so): torch.cuda.empty_cache() will not give gpumem's cache back"
                      % path, RuntimeWarning, stacklevel=3)
        return
    _empty_cache_then(torch, fn)


class _Stat(ctypes.Structure):
    """gpumem.h's gpumem_torch_stat_t: one of PyTorch's statistics (c10's Stat)."""
    _fields_ = [("current", ctypes.c_int64), ("peak", ctypes.c_int64), ("allocated", ctypes.c_int64),
                ("freed", ctypes.c_int64)]


# gpumem.h's gpumem_torch_stats_t, in its order: the Stat fields, then the counts
_STATS = ("allocated_bytes", "requested_bytes", "allocation", "reserved_bytes", "segment", "active_bytes",
          "active", "inactive_split_bytes", "inactive_split")
_COUNTS = ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free", "num_sync_all_streams",
           "max_split_size")


class _Stats(ctypes.Structure):
    _fields_ = [(n, _Stat) for n in _STATS] + [(n, ctypes.c_int64) for n in _COUNTS]


def _stats_from_gpumem(torch, path):
    """Without libgpumem_torch.so: PyTorch's memory statistics from gpumem's allocator, as the
    shim's allocator gives them (gpumem_torch_stats, preload/gpumem.h). PyTorch's
    CUDAPluggableAllocator made from Python refuses them ("does not yet support getDeviceStats"),
    and torch.cuda.memory_stats, memory_allocated, max_memory_reserved, memory_summary,
    reset_peak_memory_stats, ... raised; every one of them goes through three functions of
    torch._C, replaced here by ctypes reads of libgpumem.so giving the same nested dict."""
    try:
        lib = ctypes.CDLL(path)
        read, peak, acc = (lib.gpumem_torch_stats, lib.gpumem_torch_reset_peak_stats,
                           lib.gpumem_torch_reset_accumulated_stats)
    except (AttributeError, OSError):
        warnings.warn("gpumem.use_as_allocator: %s has no gpumem_torch_stats (an older libgpumem.so): "
                      "torch.cuda.memory_stats() and the names built on it will raise" % path,
                      RuntimeWarning, stacklevel=3)
        return
    read.argtypes, read.restype = [ctypes.c_int, ctypes.POINTER(_Stats), ctypes.c_size_t], ctypes.c_int
    peak.argtypes = acc.argtypes = [ctypes.c_int]
    peak.restype = acc.restype = None
    C = torch._C

    def device_of(device):
        return torch.cuda.current_device() if device is None or device < 0 else int(device)

    def memory_stats(device):
        st = _Stats()
        dev = device_of(device)
        if read(dev, ctypes.byref(st), ctypes.sizeof(st)) != 0:
            raise RuntimeError("gpumem: no memory statistics for device %d: gpumem's allocator does not serve "
                               "PyTorch's tensors here (GPUMEM_MODE=record or off: the driver serves each); "
                               "run in mode replace (the default)" % dev)
        zero = {"current": 0, "peak": 0, "allocated": 0, "freed": 0}
        d = {n: getattr(st, n) for n in _COUNTS[:-1]}
        d["max_split_size"] = st.max_split_size
        d["num_oom_rejections"] = 0
        for n in _STATS:
            s = getattr(st, n)
            d[n] = {"all": {"current": s.current, "peak": s.peak, "allocated": s.allocated, "freed": s.freed},
                    "small_pool": dict(zero), "large_pool": dict(zero)}  # gpumem's pools are not PyTorch's
        d["reserved_bytes_by_private_pools"] = {}
        d["oversize_allocations"], d["oversize_segments"] = dict(zero), dict(zero)
        return d

    def reset_peak(device):
        peak(device_of(device))

    def reset_accumulated(device):
        acc(device_of(device))

    fraction = getattr(lib, "gpumem_torch_get_memory_fraction", None)
    if fraction is not None:
        fraction.argtypes, fraction.restype = [ctypes.c_int], ctypes.c_double

    def memory_fraction(device):
        return fraction(device_of(device))

    for name, fn in (("_cuda_memoryStats", memory_stats), ("_cuda_resetPeakMemoryStats", reset_peak),
                     ("_cuda_resetAccumulatedMemoryStats", reset_accumulated),
                     ("_cuda_getMemoryFraction", memory_fraction if fraction is not None else None)):
        if fn is None:
            continue
        fn.__wrapped__ = getattr(C, name, None)
        setattr(C, name, fn)


def _empty_cache_then(torch, fn):
    """torch.cuda.empty_cache (both its Python names) wrapped to call fn, gpumem_empty_cache
    through ctypes, after PyTorch's own: what PyTorch gave back, and gpumem's cache with it."""
    import torch.cuda.memory as tcm
    fn.argtypes, fn.restype = [], None
    orig = tcm.empty_cache

    def empty_cache():
        r = orig()
        fn()
        return r
    empty_cache.__doc__, empty_cache.__wrapped__ = orig.__doc__, orig
    for mod in (torch.cuda, tcm):
        if getattr(mod, "empty_cache", None) is orig:
            setattr(mod, "empty_cache", empty_cache)


def _library_path():
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split(None, 5)[-1].strip()
                if os.path.basename(p) == "libgpumem.so":
                    return p
    except OSError:
        pass
    return None
