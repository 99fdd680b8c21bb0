"""What `gpumem record` turns on inside a PyTorch program, without an edit of the script.

Loaded by gpumem's sitecustomize (preload/python/site/) in the process `gpumem record` started,
it waits for `import torch` and then, each part with its opt-out (the environment `gpumem
record` sets, README.md "PyTorch programs"):

- history (GPUMEM_TORCH_HISTORY=1, `--no-torch-history` turns it off): every entry of PyTorch's
  allocator trace, with each allocation's Python stack, taken by gpumem's trace tracker
  (libgpumem_torch.so, preload/torch_trace.c), or, without the tracker (or with
  GPUMEM_TORCH_PYTORCH_HISTORY=1), PyTorch's own memory history too
  (torch.cuda.memory._record_memory_history), started with torch.cuda._lazy_call so that CUDA
  is not initialized early; at exit, and at each OOM
  (PyTorch's OOM observer), the snapshot and the tensor names below are pickled into the file
  GPUMEM_TORCH_SNAPSHOT, which `gpumem record` merges into the database and removes (the first
  OOM's is also kept as GPUMEM_TORCH_SNAPSHOT.oom, which `gpumem record` writes beside the
  database as PyTorch's snapshot of that moment, then removes);
- hooks (GPUMEM_TORCH_HOOKS=1, `--no-torch-hooks`): module hooks (run by a C Module.__call__
  from preload/torch_hooks.c where it can be made, global module hooks otherwise; _Hooks.register)
  and optimizer hooks that open
  gpumem ranges "step N/fwd/<module path>", "step N/bwd/<module path>" and "step N/opt" (one
  module range open at a time, the innermost, so that the path is the module's own), and name
  parameters, gradients and optimizer state ("<param>", "grad.<param>", "adam.exp_avg.<param>");
  a program that names its own phases (gpumem.range, gpumem.annotate) gets no ranges from here.
  The hot paths (the forward hooks, the backward-start callbacks, the range stacks) run in C when
  libgpumem.so has them (gpumem_torch_hooks, preload/torch_hooks.c: the same rules as _Hooks'
  Python methods, which run otherwise);
- ops (GPUMEM_TORCH_OPS=1, `gpumem record --torch-ops`; off by default, with the history only):
  the forward's dataflow, op by op: a TorchDispatchMode, entered while the outermost module's
  forward runs, logs each aten op that touches a CUDA tensor with the storages (data pointer,
  bytes, dtype) of its outputs and of its inputs, and how many allocations PyTorch's allocator
  had made when the op returned, which the merge turns into the allocation each storage is
  (snapshot/README.md, torch_ops);
- allocator (GPUMEM_TORCH_ALLOCATOR=gpumem, `--allocator gpumem`): libgpumem.so becomes PyTorch's
  allocator (gpumem.use_as_allocator) before the first CUDA allocation; history is then off
  (a pluggable allocator has none) and names go to gpumem directly;
- the pinned host cache (always, whichever allocator): at exit, PyTorch's host cache is emptied
  (_host_cache_at_exit), so that a pinned block the program had freed to it reads as the
  cache's in the recording, never as a leak (snapshot/README.md, leaks' .host_cache);
- PyTorch's cuBLAS and cuBLASLt workspaces (always, whichever allocator): at exit, freed through
  torch._C._cuda_clearCublasWorkspaces() (_workspaces_at_exit), their frees flagged, so that they
  read as workspaces, never as leaks (snapshot/README.md, leaks' .torch_workspaces).

Every Python interpreter `gpumem record` runs does this (the sitecustomize runs at its start:
the program, a launcher script's steps, torchrun's workers), each dumping into its own file
(_path) that `gpumem record` merges into that process's database; a forked child (a DataLoader
worker) inherits the state but not the role (_ours), and dumps nothing. Nothing here may break the
program: every hook swallows its own errors after one warning.
"""
import atexit
import ctypes
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import time
import warnings
import weakref

import gpumem

_env = os.environ.get
_state = {"installed": False, "torch": None, "names": [], "marks": [], "named": {}, "warned": False,
          "dumped": 0, "ops": None, "oom_limits": [], "fraction_set": set(), "autocast": set()}
_lock = threading.Lock()


def _warn(what, exc):
    if not _state["warned"]:
        _state["warned"] = True
        warnings.warn("gpumem: %s failed (%s: %s); the recording goes on without it"
                      % (what, type(exc).__name__, exc), RuntimeWarning, stacklevel=2)


def _ours():
    """This process is the one that installed (a forked child inherits the state, not the role)."""
    return _state.get("pid") == os.getpid()


def _path():
    """The file this process's dump goes to: GPUMEM_TORCH_SNAPSHOT for the process `gpumem record`
    started (GPUMEM_TORCH_PID), GPUMEM_TORCH_SNAPSHOT.<pid> for any other Python it runs (a
    launcher script's, torchrun's workers), each merged into that process's own database."""
    path = _env("GPUMEM_TORCH_SNAPSHOT")
    if not path or _env("GPUMEM_TORCH_PID") == str(os.getpid()):
        return path
    return "%s.%d" % (path, os.getpid())


def install():
    """Called by the sitecustomize of every Python interpreter `gpumem record` runs (not again
    in a forked child): set up now if torch is already imported, else on import."""
    if _state["installed"] or not _env("GPUMEM_TORCH_SNAPSHOT") and not _env("GPUMEM_TORCH_PID"):
        return
    _state["installed"] = True
    _state["pid"] = os.getpid()
    if "torch" in sys.modules and hasattr(sys.modules["torch"], "cuda"):
        _setup(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Runs _setup right after `torch` has been imported (whoever imports it)."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        orig = loader.exec_module

        def exec_module(module):
            orig(module)
            _setup(module)
        loader.exec_module = exec_module
        return spec


def _setup(torch):
    _state["torch"] = torch
    # first, whatever the allocator: gpumem record says that --allocator gpumem or --torch-ops
    # did nothing when no process leaves this word
    _mark("imported")
    allocator = _env("GPUMEM_TORCH_ALLOCATOR", "torch")
    if allocator == "gpumem":
        try:
            gpumem.use_as_allocator()
        except Exception as e:  # noqa: BLE001 - never break the program
            _warn("making gpumem PyTorch's allocator", e)
        sys.excepthook = _pluggable_excepthook(sys.excepthook)
        if _env("GPUMEM_TORCH_OPS", "0") == "1" and _env("GPUMEM_TORCH_SNAPSHOT"):
            try:  # placed by the recorder's seq, which the merge reads (not memory_stats' count)
                _ops(torch, position=_seq_fn(ctypes.CDLL(None)))
                atexit.register(_dump_ops)
            except Exception as e:  # noqa: BLE001
                _warn("the op log (GPUMEM_TORCH_OPS)", e)
    else:
        _empty_cache_gives_back(torch)
    atexit.register(_host_cache_at_exit, torch)
    try:
        _autocast_seen(torch)
    except Exception as e:  # noqa: BLE001
        _warn("watching torch.autocast", e)
    if allocator != "gpumem" and _env("GPUMEM_TORCH_HISTORY", "1") == "1" and _env("GPUMEM_TORCH_SNAPSHOT"):
        _history(torch)
        _state["traced"] = True  # names of tensors go with the trace (name_tensor)
        if _env("GPUMEM_TORCH_OPS", "0") == "1":
            try:
                _ops(torch)
            except Exception as e:  # noqa: BLE001
                _warn("the op log (GPUMEM_TORCH_OPS)", e)
    # registered after _history's _dump: atexit runs it before, so that the dump's trace holds
    # the workspaces' frees
    atexit.register(_workspaces_at_exit, torch)
    if _env("GPUMEM_TORCH_HOOKS", "1") == "1":
        try:
            _Hooks(torch, allocator == "gpumem").register()
        except Exception as e:  # noqa: BLE001
            _warn("the module and optimizer hooks", e)


# ---------------------------------------------------------------- history

def _history(torch):
    # PyTorch keeps its history in a ring of this many entries (with their stacks): a run that
    # makes more loses its first ones, and the merge says so
    entries = int(_env("GPUMEM_TORCH_MAX_ENTRIES", "2000000"))
    _state["max_entries"] = entries

    def start():
        # gpumem's tracker first: its entries, with each allocation's Python stack, are the trace,
        # and PyTorch's own history stays off (preload/torch_trace.c says why). Without the
        # tracker, or with GPUMEM_TORCH_PYTORCH_HISTORY=1, PyTorch's history records too (its
        # entries then paired with the tracker's), keeping its own stacks only where there is no
        # tracker to read them.
        _trace_attach()
        tracker = _state.get("trace") is not None
        _state["history_from"] = ("gpumem" if tracker and _env("GPUMEM_TORCH_PYTORCH_HISTORY", "0") != "1"
                                  else "pytorch")
        _fraction_at_start(torch)
        try:
            if _state["history_from"] == "pytorch":
                torch.cuda.memory._record_memory_history(
                    max_entries=entries, context=None if tracker else "alloc", stacks="python")
            torch._C._cuda_attach_out_of_memory_observer(_on_oom)
        except Exception as e:  # noqa: BLE001
            _warn("PyTorch's memory history", e)
    _cache_calls(torch)  # now: the program's first CUDA call may be one of them
    # _record_memory_history would initialize CUDA now (breaking forked children and a later
    # change of allocator); queued, it runs when the program first uses CUDA
    torch.cuda._lazy_call(start)
    atexit.register(_dump, "exit")
    _mark("imported")


def _stamp():
    """(wall ns, the recorder's seq, its clock) now: stamped as the tracker stamps its entries, so
    that the merge places what the hooks saw among them (seq and clock 0 without the tracker: then
    by the wall clock)."""
    seq, now = _state.get("seq"), _state.get("time")
    return (time.time_ns(), seq(), now()) if seq is not None else (time.time_ns(), 0, 0)


def _note(what, device, value=0, *more):
    w, seq, t = _stamp()
    with _lock:
        _state["marks"].append((what, w, device, value, seq, t) + more)


def _note_fraction(torch, device, fraction, start=False):
    """PyTorch's cap for a fraction, as its allocator computes it (setMemoryFraction: the fraction
    of cudaMemGetInfo's total, truncated): the whole device for a fraction of 1, and 0 bytes for a
    fraction of 0, which PyTorch reads as "nothing may be reserved" (0 is never "no cap"). start:
    the fraction in force when CUDA started (the key's), marked "start" for the merge (event 37's
    flag 1024), told apart from the program's calls."""
    total = torch.cuda.mem_get_info(device)[1]
    cap = int(fraction * float(total))
    _note("memory_fraction", device, cap, int(round(fraction * 1e6)), *(("start",) if start else ()))


def _cache_calls(torch):
    """The program's calls that change PyTorch's cache, as marks in the dump (the merge makes them
    events 36, 37 and 38, snapshot/README.md): torch.cuda.empty_cache(), noted before it runs (the
    segments it gives back come after it in PyTorch's trace; under expandable segments it may give
    back nothing and leave no entry there, but under another configuration its replay would), and
    every set_per_process_memory_fraction, noted after it (a fraction PyTorch refused is not;
    the program's first call initializes CUDA, and with it the tracker that stamps the note), and
    torch.cuda.reset_peak_memory_stats, noted after it (event 38: from there the program's
    max_memory_allocated() / max_memory_reserved() count only what follows, and the readers say
    so; reset_max_memory_allocated / _cached call it by its module's name, so they are seen too).
    Both names of each (torch.cuda's and torch.cuda.memory's) are wrapped: a program calls either."""
    mem = torch.cuda.memory
    orig_empty, orig_fraction = mem.empty_cache, mem.set_per_process_memory_fraction
    orig_reset = mem.reset_peak_memory_stats

    def empty_cache():
        try:
            _note("empty_cache", torch.cuda.current_device())
        except Exception as e:  # noqa: BLE001
            _warn("noting torch.cuda.empty_cache", e)
        return orig_empty()

    def set_per_process_memory_fraction(fraction, device=None):
        r = orig_fraction(fraction, device)
        try:
            dev = torch.cuda._utils._get_device_index(device, optional=True)
            _state["fraction_set"].add(dev)  # from here the call's fraction, not the key's (_on_oom)
            _note_fraction(torch, dev, float(fraction))
        except Exception as e:  # noqa: BLE001
            _warn("noting set_per_process_memory_fraction", e)
        return r

    def reset_peak_memory_stats(device=None):
        r = orig_reset(device)
        try:
            _note("reset_peak", torch.cuda._utils._get_device_index(device, optional=True))
        except Exception as e:  # noqa: BLE001
            _warn("noting torch.cuda.reset_peak_memory_stats", e)
        return r

    wrapped = ((empty_cache, orig_empty), (set_per_process_memory_fraction, orig_fraction),
               (reset_peak_memory_stats, orig_reset))
    for f, orig in wrapped:
        f.__doc__, f.__wrapped__ = orig.__doc__, orig
    for mod in (torch.cuda, mem):
        for f, orig in wrapped:
            if getattr(mod, f.__name__, None) is orig:
                setattr(mod, f.__name__, f)


def _empty_cache_gives_back(torch):
    """With PyTorch's own allocator, torch.cuda.empty_cache() (both its names) gives gpumem's
    cache back too. PyTorch frees its cached segments with cudaFree, and under libgpumem.so (mode
    replace) each one went into gpumem's allocator's cache, which kept it mapped: the process held
    the memory the program had just given back, for the rest of the run (256 MiB freed, emptied,
    then a 64 MiB tensor: the device used 682 MiB at exit where the program alone used 490), where
    nvidia-smi and every other process see it (cudaMemGetInfo counts gpumem's idle cache as free,
    so the program does not). gpumem_empty_cache, after PyTorch's own, gives every device's cache
    back and records that it did (event 36 flagged as gpumem's, the trace's `e`), so a replay of
    the run empties where the run did. torch._C._cuda_emptyCache called directly is not seen.
    Installed first, so that the note of _cache_calls (history on) wraps this one and comes
    before PyTorch's frees, as without it."""
    try:
        fn = ctypes.CDLL(None).gpumem_empty_cache  # libgpumem.so's: preloaded by gpumem record
    except (AttributeError, OSError):
        return  # not under libgpumem.so: nothing of gpumem's to give back
    gpumem._empty_cache_then(torch, fn)


def _autocast_seen(torch):
    """Which torch.autocast regions the program entered on CUDA, enabled, and their dtypes
    ("float16", "bfloat16"), for the dump (meta torch_autocast): without the op log the recording
    holds no tensor's precision, and advise said of a script under autocast "it may run under
    autocast already". One set insert per region entered (a step's forward), after PyTorch's own
    __enter__; torch.cuda.amp.autocast and the decorator form enter through the same method."""
    cls = torch.amp.autocast_mode.autocast
    orig = cls.__enter__
    seen = _state["autocast"]

    def __enter__(self):
        r = orig(self)
        try:
            if getattr(self, "_enabled", False) and getattr(self, "device", None) == "cuda":
                key = str(self.fast_dtype).replace("torch.", "")
                if key not in seen:
                    seen.add(key)
        except Exception:  # noqa: BLE001 - never break the program's forward
            pass
        return r
    __enter__.__doc__, __enter__.__wrapped__ = orig.__doc__, orig
    cls.__enter__ = __enter__


def _fraction_at_start(torch):
    """The per-process memory fraction in force when CUDA starts (PYTORCH_CUDA_ALLOC_CONF's
    per_process_memory_fraction), noted for each device where it caps anything."""
    try:
        for dev in range(torch.cuda.device_count()):
            fraction = float(torch.cuda.memory.get_per_process_memory_fraction(dev))
            if fraction < 1.0:
                _note_fraction(torch, dev, fraction, start=True)
    except Exception as e:  # noqa: BLE001
        _warn("reading the per-process memory fraction", e)


def _mark(word):
    """One word in GPUMEM_TORCH_SNAPSHOT.state, read by `gpumem record` when no trace came back:
    "imported" (torch set up, then no exit handler ran: os._exit, a fatal signal, a crash), or
    "no-cuda" (the exit came without CUDA ever initialized). No file: torch was never imported."""
    path = _path()
    if not path or not _ours():
        return
    try:
        with open(path + ".state", "w") as f:
            f.write(word)
    except OSError:
        pass  # only the wording of gpumem record's line depends on it


def _pluggable_excepthook(prev):
    """An uncaught error that is a limit of PyTorch's pluggable-allocator interface ("pluggable
    does not yet support checkPoolLiveAllocations": CUDA graph trees, torch.compile's
    mode="reduce-overhead"): tell `gpumem record` (a "pluggable" line of its side channel,
    GPUMEM_RECORD_STATUS), whose closing summary says what to do; the traceback is printed as
    before."""
    def hook(kind, value, tb):
        text = str(value).split(". If you need it")[0].replace("\n", " ")
        path = _env("GPUMEM_RECORD_STATUS")
        if path and " does not yet support " in text and "luggable" in text:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    os.write(fd, ("%d pluggable %s\n" % (os.getpid(), text[:900])).encode())
                finally:
                    os.close(fd)
            except OSError:
                pass  # only record's closing line depends on it
        prev(kind, value, tb)
    return hook


def _seq_fn(own):
    """libgpumem.so's gpumem_torch_trace_seq (own: the process's symbols), typed."""
    fn = own.gpumem_torch_trace_seq
    fn.restype = ctypes.c_uint64
    fn.argtypes = []
    return fn


def _time_fn(own):
    """libgpumem.so's gpumem_torch_trace_time: the recorder's clock, as the tracker's entries
    carry it."""
    fn = own.gpumem_torch_trace_time
    fn.restype = ctypes.c_uint64
    fn.argtypes = []
    return fn


def _trace_attach():
    """PyTorch's trace entries handed to libgpumem as they happen (libgpumem_torch.so, preload/
    torch_trace.c): the merge places each history entry among the recorded events by them, not by
    PyTorch's clock. Without the library (not built: no C++ compiler or headers), the merge
    falls back to the clocks, and says so (meta.torch_placement)."""
    if _env("GPUMEM_TORCH_TRACE", "1") == "0":
        return  # turned off: placed by the clocks (tests/torch/torch_record.sh checks that path)
    own = gpumem._library_path()
    path = os.path.join(os.path.dirname(own), "libgpumem_torch.so") if own else None
    if not path or not os.path.exists(path):
        return
    try:
        lib = ctypes.CDLL(path)
        lib.gpumem_torch_trace_built_for.restype = ctypes.c_char_p
        built = (lib.gpumem_torch_trace_built_for() or b"").decode()
        torch = _state["torch"]
        if built != str(torch.__version__):
            return  # built against another PyTorch's headers: placed by the clocks instead
        lib.gpumem_torch_trace_attach.restype = ctypes.c_int
        if lib.gpumem_torch_trace_attach() != 1:
            raise RuntimeError("PyTorch refused the trace tracker")
        own = ctypes.CDLL(None)  # gpumem_torch_trace_copy / _seq: libgpumem.so's
        # the entries' Python stacks: the GIL-less frame reader checked against Python's own
        # reading now, holding the GIL (a PyDLL's call); PyTorch's ops release the GIL, so no
        # allocation of the program may ever make that check (preload/python.c)
        check = getattr(ctypes.PyDLL(None), "gpumem_python_check", None)
        if check is not None:
            check.restype, check.argtypes = ctypes.c_int, []
            check()
        seq, now = _seq_fn(own), _time_fn(own)  # both or neither (_stamp calls both)
        _state["seq"], _state["time"] = seq, now
        _state["trace"] = own
    except Exception as e:  # noqa: BLE001
        _warn("attaching gpumem's trace tracker (%s)" % path, e)


def _copy_out(fn):
    """bytes from a gpumem_torch_trace_* copier (fn(dst, cap, &count) -> bytes needed) and its
    count; None when it kept growing faster than it could be copied."""
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)]
    count = ctypes.c_uint64(0)
    for _ in range(4):  # the autograd thread may add entries between sizing and copying
        need = fn(None, 0, None)
        buf = ctypes.create_string_buffer(need + 48 * 4096)
        got = fn(buf, len(buf), ctypes.byref(count))
        if got <= len(buf):
            return buf.raw[:got], count.value
    return None


def _trace_copy():
    """The tracker's entries so far (bytes, 72 a piece) and their Python stacks (preload/
    torch_trace.c), or None; "history": they are the trace (PyTorch's history was off). The
    stacks are copied after the entries, so every stack an entry names is among them."""
    lib = _state.get("trace")
    if lib is None:
        return None
    try:
        entries = _copy_out(lib.gpumem_torch_trace_copy)
        stacks = _copy_out(lib.gpumem_torch_trace_stacks)
        if entries is not None and stacks is not None:
            return {"entries": entries[0], "seen": entries[1], "entry_size": 72,
                    "stacks": stacks[0], "stacks_lost": stacks[1],
                    "history": _state.get("history_from") == "gpumem"}
    except Exception as e:  # noqa: BLE001
        _warn("copying gpumem's trace entries", e)
    return None


def _on_oom(device, alloc, device_allocated, device_free):
    # PyTorch calls its observers with the cap it allocated under: the per-process memory
    # fraction's bytes where one is set, else the device's total. Its trace's OOM entry has
    # neither (an OOM the fraction refused never reached cudaMalloc), so each OOM's is kept, in
    # order, for the merge to tell the fraction's OOMs (gm_torch.c, oom_limits), with who set the
    # fraction: "key" where the program never called set_per_process_memory_fraction for the
    # device, so the fraction in force is PYTORCH_CUDA_ALLOC_CONF's per_process_memory_fraction
    # (PyTorch's start value; a call replaces it), else "call"
    try:
        fraction = float(_state["torch"].cuda.get_per_process_memory_fraction(device))
    except Exception:  # noqa: BLE001  (a PyTorch without the query: the device's own cap)
        fraction = 1.0
    _state["oom_limits"].append((int(device), int(device_allocated), fraction,
                                 "call" if int(device) in _state["fraction_set"] else "key"))
    if "oom_python" not in _state:  # the first OOM's Python stack of the program's main thread:
        try:  # the line that called into PyTorch, also when its C++ (autograd) made the request
            f = sys._current_frames().get(threading.main_thread().ident)
            stack = []
            while f is not None and len(stack) < 32:
                stack.append({"filename": f.f_code.co_filename, "line": f.f_lineno,
                              "name": f.f_code.co_name})
                f = f.f_back
            _state["oom_python"] = stack
        except Exception as e:  # noqa: BLE001
            _warn("reading the Python stack at the OOM", e)
    _dump("oom")


def _dump(why):
    """The snapshot, the names and why, pickled into GPUMEM_TORCH_SNAPSHOT (a private file
    `gpumem record` made; each dump replaces the last: the one at exit sees everything)."""
    path = _path()
    torch = _state["torch"]
    if not path or torch is None or not _ours():
        return
    if not torch.cuda.is_initialized():
        if why == "exit":
            _mark("no-cuda")
        return
    try:
        import pickle
        snap = torch.cuda.memory._snapshot()
        with _lock:
            names = list(_state["names"])
        with _lock:
            marks = list(_state["marks"])
        doc = {"gpumem_torch": 1, "why": why, "torch_version": str(torch.__version__),
               "time_ns": time.time_ns(), "snapshot": snap, "names": names, "marks": marks,
               "max_entries": _state.get("max_entries", 0),
               "oom_python": _state.get("oom_python", []), "oom_limits": list(_state["oom_limits"]),
               "autocast": sorted(_state["autocast"])}
        if _state["ops"] is not None:
            doc["ops"] = list(_state["ops"])
        trace = _trace_copy()  # after the snapshot: it holds every entry the snapshot holds
        if trace is not None:
            doc["gm_trace"] = trace
        tmp = path + ".part"
        with open(tmp, "wb") as f:
            pickle.dump(doc, f, protocol=4)
        if why == "oom" and not os.path.exists(path + ".oom"):
            os.link(tmp, path + ".oom")  # the first OOM's, kept: gpumem record writes it beside the db
        os.replace(tmp, path)
        _state["dumped"] += 1
    except Exception as e:  # noqa: BLE001
        _warn("writing PyTorch's memory snapshot", e)


# ---------------------------------------------------------------- pinned host cache

def _host_cache_at_exit(torch):
    """PyTorch's CachingHostAllocator keeps every pinned block it made (pin_memory(), a
    DataLoader's pin_memory=True) until the process ends: a tensor freed makes no CUDA call, so
    in the recording a cached block looks alive at exit like one a tensor still holds. At exit
    (after the program's own exit handlers: registered at import) its cache is emptied here, so
    that each cached block's cudaFreeHost (or cudaHostUnregister, under PYTORCH_CUDA_ALLOC_CONF's
    pinned_use_cuda_host_register) says which it was: libgpumem.so flags the frees this thread
    makes meanwhile (gpumem_host_cache_emptying), whatever the stack settings, and the stack holds
    this function too (what recordings before the flag are read by: GM_HOST_CACHE_FN,
    snapshot/read/gm.h). Blocks still held by tensors stay alive, as they are. Nothing else of the
    program changes: the blocks are ones no tensor uses, which the process's end would give back.
    No range is opened: every reader would take it for one of the program's phases."""
    if not _ours() or not torch.cuda.is_initialized():
        return
    mark = getattr(ctypes.CDLL(None), "gpumem_host_cache_emptying", None)  # libgpumem.so's
    if mark is not None:
        mark.restype, mark.argtypes = None, [ctypes.c_int]
        mark(1)
    try:
        torch._C._host_emptyCache()
    except Exception as e:  # noqa: BLE001 - never break the program
        _warn("emptying PyTorch's pinned host cache at exit", e)
    finally:
        if mark is not None:
            mark(0)


def _workspaces_at_exit(torch):
    """PyTorch keeps a cuBLAS workspace per (cuBLAS handle, stream) that ran a matmul (32 MiB on
    compute capability 9.0 and later), and a cuBLASLt one per (cuBLASLt handle, stream) where
    TORCH_CUBLASLT_UNIFIED_WORKSPACE=0, allocated from its allocator and kept until the process
    ends: in the recording each looks alive at exit like a tensor the program kept, often the
    largest line of a small program's leaks. At exit (after the program's own exit handlers, and
    before the dump, whose trace must hold the frees: registered after it) they are freed here
    through PyTorch's own call, torch._C._cuda_clearCublasWorkspaces(), with libgpumem.so told
    (gpumem_torch_cache_emptying) so that the frees made meanwhile on this thread are flagged: a
    device free under --allocator gpumem, the trace entry of PyTorch's allocator otherwise
    (REC_F_TORCH_CACHE, snapshot/README.md, leaks' .torch_workspaces). Nothing is freed during a
    CUDA graph capture (a workspace the capture uses), nor where PyTorch's call is missing or
    fails (warned, never raised): the program is never broken. No range is opened."""
    if not _ours() or not torch.cuda.is_initialized():
        return
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is None:
        return
    mark = getattr(ctypes.CDLL(None), "gpumem_torch_cache_emptying", None)  # libgpumem.so's
    try:
        if torch.cuda.is_current_stream_capturing():
            return
        if mark is not None:
            mark.restype, mark.argtypes = None, [ctypes.c_int]
            mark(1)
        clear()
    except Exception as e:  # noqa: BLE001 - never break the program
        _warn("freeing PyTorch's cuBLAS workspaces at exit", e)
    finally:
        if mark is not None:
            mark(0)


# ---------------------------------------------------------------- ops

def _dump_ops():
    """The op log alone (gpumem as PyTorch's allocator: no history), pickled into
    GPUMEM_TORCH_SNAPSHOT for the merge (its "ops_position" says the counts are the recorder's
    seq)."""
    path = _path()
    torch = _state["torch"]
    if not path or torch is None or not _ours() or _state["ops"] is None:
        return
    try:
        import pickle
        doc = {"gpumem_torch": 1, "why": "exit", "torch_version": str(torch.__version__),
               "time_ns": time.time_ns(), "ops": list(_state["ops"]), "ops_position": "seq",
               "autocast": sorted(_state["autocast"])}
        tmp = path + ".part"
        with open(tmp, "wb") as f:
            pickle.dump(doc, f, protocol=4)
        os.replace(tmp, path)
    except Exception as e:  # noqa: BLE001
        _warn("writing the op log", e)


def _ops(torch, position=None):
    """The op log: (allocations made, device, op, outputs, inputs, autograd node) per aten op that
    touches a CUDA tensor inside a module's forward, each tensor as its storage (data pointer,
    bytes), its dtype, its own bytes (a view's are fewer than its storage's; an empty storage,
    no allocation, is left out) and its shape; the node is the sequence number of the autograd node made for
    the op (-1 none). Then the same per node of the backward, when it starts: ("bwd:<node name>",
    no outputs, the gradients it is given by position (an absent one as (0, 0, "", 0)), its
    sequence number).

    A TorchDispatchMode sees every aten op, but while one is active PyTorch treats every tensor
    as a subclass (at::isTensorSubclassLike): autograd no longer adds the gradients that meet at
    a tensor in place, and the backward allocates what the program's does not. So the mode is
    entered when the outermost module's forward starts and left when it returns (global module
    hooks, on the thread that runs it: a checkpointed block's re-run in the backward is logged
    too), and the backward is seen through a pre hook on each node of the forward's graph
    (registered when the outermost forward returns), with no mode: the recording's allocations
    stay the program's own (tests/torch/torch_ops.sh compares them with a run without the log).

    "Allocations made" is PyTorch's own count (memory_stats' allocation.all.allocated) when the
    op returned: the merge finds each storage's allocation as the last one at its address among
    that many of the history's, exactly, where the clocks (microseconds apart from the hooks')
    could not. The count starts with the history (the first CUDA call), so a program that
    resets the accumulated statistics gets a log the merge cannot place (its storages are
    unmatched, and the merge counts them: meta.torch_op_args_unmatched).

    Under gpumem as PyTorch's allocator (position: libgpumem's gpumem_torch_trace_seq) there is no
    history of PyTorch's to count in (memory_stats' allocation count is gpumem's, of PyTorch's
    tensors only, since 2026-12-07): the count is the recorder's last seq instead, and the merge
    finds each storage's allocation as the last one recorded at its address at or before that seq."""
    from torch.nn.modules import module as M
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    ops = _state["ops"] = []
    stats = torch._C._cuda_memoryStats
    if position is None:
        def position(dev):
            return stats(dev)["allocation"]["all"]["allocated"]
    else:
        seq = position

        def position(dev):  # noqa: ARG001 - the recorder's seq is the same for every device
            return seq()
    Tensor = torch.Tensor
    dtypes = {}
    tls = threading.local()

    def storages(xs):
        got = []
        for x in xs:
            if isinstance(x, Tensor) and x.is_cuda:
                st = x.untyped_storage()
                if not st.nbytes():
                    continue  # empty: no allocation
                d = dtypes.get(x.dtype)
                if d is None:
                    d = dtypes[x.dtype] = str(x.dtype).replace("torch.", "")
                got.append((st.data_ptr(), st.nbytes(), d, x.numel() * x.element_size(), tuple(x.shape)))
        return got

    seq_nr = torch._C._autograd._get_sequence_nr

    class _OpLog(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            # autograd made this op's node (if any) just before the op reached here: the
            # thread's sequence number moved on since the last op returned
            s = seq_nr()
            node = s - 1 if s != tls.seq else -1
            out = func(*args, **(kwargs or {}))
            tls.seq = seq_nr()
            try:
                outs = storages(tree_flatten(out)[0])
                ins = storages(tree_flatten((args, kwargs))[0])
                if outs or ins:
                    dev = torch.cuda.current_device()
                    n = position(dev)
                    ops.append((n, dev, str(func), outs, ins, node))
            except Exception as e:  # noqa: BLE001
                _warn("logging an op (GPUMEM_TORCH_OPS)", e)
            return out

    none = (0, 0, "", 0)

    def grad_of(x):
        # not through untyped_storage(): a Python storage object kept the gradient's storage
        # shared, and autograd then no longer added into it in place (more allocations)
        if not (isinstance(x, Tensor) and x.is_cuda) or not x.numel():
            return none
        d = dtypes.get(x.dtype)
        if d is None:
            d = dtypes[x.dtype] = str(x.dtype).replace("torch.", "")
        nb = x.numel() * x.element_size()
        return (x.data_ptr() - x.storage_offset() * x.element_size(), nb, d, nb, tuple(x.shape))

    def positional(xs):  # a node's gradients, None where it has none (positions kept)
        return [grad_of(x) if x is not None else none for x in xs]

    def node_hook(name, seq):
        def hook(grad_outputs):
            try:
                dev = torch.cuda.current_device()
                n = position(dev)
                ops.append((n, dev, name, [], positional(grad_outputs), seq))
            except Exception as e:  # noqa: BLE001
                _warn("logging a backward node (GPUMEM_TORCH_OPS)", e)
        return hook

    def hook_graph(output):
        """A pre hook on every node of the forward's graph: the backward logged node by node
        ("bwd:<node name>", no outputs, the gradients it is given, one per output of its forward
        op: the gradient of each, its sequence number: the forward op's node), with no mode in the
        backward. Not a post hook: a node with one keeps a copy of its gradients while it runs,
        and autograd then copies what it would have taken over (more allocations)."""
        todo = [t.grad_fn for t in tree_flatten(output)[0] if isinstance(t, Tensor) and t.grad_fn is not None]
        seen = set()
        while todo:
            fn = todo.pop()
            seq = fn._sequence_nr()
            key = (seq, fn.name())
            if key in seen:
                continue
            seen.add(key)
            if fn.name() != "torch::autograd::AccumulateGrad":
                fn.register_prehook(node_hook("bwd:" + fn.name(), seq))
            todo.extend(nf for nf, _ in fn.next_functions if nf is not None)

    def mark(module, what, inputs):
        """A module's forward starting ("module:<class>") or returning ("module_end:<class>",
        reading its inputs, which its caller held until then), so that the reader knows which
        module's frame each op ran in and how long Python held what it passed or made there."""
        dev = torch.cuda.current_device()
        ops.append((position(dev), dev, what + type(module).__name__, [],
                    storages(tree_flatten(inputs)[0]) if inputs is not None else [], -1))

    def pre(module, inputs):
        try:
            d = getattr(tls, "depth", 0)
            tls.depth = d + 1
            if d == 0:
                tls.seq = seq_nr()  # nodes made before the forward are not its ops'
                tls.mode = _OpLog()
                tls.mode.__enter__()
            mark(module, "module:", None)
        except Exception as e:  # noqa: BLE001
            _warn("the op log's forward hook", e)

    def post(module, inputs, output):
        try:
            d = getattr(tls, "depth", 0)
            if d > 0:
                mark(module, "module_end:", inputs)
                tls.depth = d - 1
                if d == 1:
                    tls.mode.__exit__(None, None, None)
                    if torch.is_grad_enabled():
                        hook_graph(output)
        except Exception as e:  # noqa: BLE001
            _warn("the op log's forward hook", e)
        return None

    M.register_module_forward_pre_hook(pre)
    M.register_module_forward_hook(post)


# ---------------------------------------------------------------- hooks

class _Hooks:
    """Ranges by step, pass and module, and names of parameters, gradients and optimizer state.

    Module ranges are flat: the innermost module's range is the only one open, so that a phase
    reads "step 3/fwd/transformer.h.0.attn", not the chain of its ancestors. Forward runs on the
    program's thread; backward on autograd's own thread(s), where "step N" and "bwd" are opened
    when the first module's backward starts and closed when the backward pass ends."""

    def __init__(self, torch, direct_names):
        self.torch = torch
        self.direct = direct_names  # gpumem serves tensors: name them in gpumem directly
        self.step = 1
        # an optimizer's step ends step N; the next begins with the next forward or backward, so
        # that a second optimizer stepped right after the first is the same step's (torch_hooks.c,
        # hk.step_done): whether one has stepped since the last pass, and which (their ids; one
        # stepped twice begins the next step)
        self.step_done = False
        self.stepped = set()
        self.paths = {}    # id(module) -> module path
        self.enc = {}      # label -> its bytes (pushed once per module and step: encode once)
        self.pnames = {}   # id(param) -> parameter name
        self.bwd_cb = {}   # module path -> its backward-start callback (made once)
        self.labels = {}   # (id(param), prefix) -> "prefix<param name>" (made once)
        self.seen_grads = {}  # id(param) -> (weak reference to its gradient, data pointer) when named
        self.seen_state = {}  # id(param) -> {state key: (weak reference to the value, data pointer)}
        self.tls = threading.local()
        self.c_push = self.c_pop = self.c_replace = None
        if gpumem._gpumem() is not None:
            # the recorder's functions called holding the GIL (a PyDLL's): they never wait on
            # Python, and ctypes' release and re-acquisition of the GIL around a call costs more
            # than the call (tests/bench/README.md, torch.rec_vs_off)
            lib = ctypes.PyDLL(None)
            for f, res, args in (("gpumem_range_push", ctypes.c_int, [ctypes.c_char_p]),
                                 ("gpumem_range_pop", ctypes.c_int, []),
                                 ("gpumem_range_replace", ctypes.c_int, [ctypes.c_char_p])):
                fn = getattr(lib, f, None)
                if fn is not None:
                    fn.restype, fn.argtypes = res, args
                setattr(self, "c_" + f[len("gpumem_range_"):], fn)

    def register(self):
        from torch.nn.modules import module as M
        from torch.optim import optimizer as O
        fast = self._c_hooks()
        if fast is not None:  # the module hooks in C; the optimizer's ranges and scans too
            (pre, post, self._begin_opt, self._end_opt, self._changed_grads,
             self._changed_state, remember, wrap_call) = fast

            # the values named, in the C scan's table (seen_grads and seen_state stay empty)
            def seen_grad(p, g):
                if hasattr(g, "data_ptr"):  # _seen's test and values
                    remember(p, _ref(g), g.data_ptr())

            def seen_value(p, k, v):
                if hasattr(v, "data_ptr"):
                    remember(p, k, _ref(v), v.data_ptr())
            self._seen_grad, self._seen_value = seen_grad, seen_value
            # Module.__call__ running them itself: a global hook would send every module call
            # through _call_impl's long path (torch_hooks.c, module_call)
            if _env("GPUMEM_TORCH_GLOBAL_HOOKS", "0") != "1":
                try:
                    M.Module.__call__ = wrap_call(M.Module.__call__)
                    pre = post = None
                except Exception:  # noqa: BLE001 - a Python without vectorcall: global hooks
                    pass
        else:
            pre, post = self.fwd_pre, self.fwd_post
        if pre is not None:
            M.register_module_forward_pre_hook(pre)
            # run when a forward raises too (output None): an OOM the program catches and goes
            # on from left the module's range and the pass open, and every later event of the
            # thread in that step's forward (torch_hooks.c, raise_work)
            try:
                M.register_module_forward_hook(post, always_call=True)
            except TypeError:  # a PyTorch before 2.1
                M.register_module_forward_hook(post)
        O.register_optimizer_step_pre_hook(self.opt_pre)
        O.register_optimizer_step_post_hook(self.opt_post)

    def _c_hooks(self):
        """libgpumem's C implementation of the hot paths (preload/torch_hooks.c): the forward
        hooks, the backward-start callbacks and the range stacks, rule for rule those below,
        calling back for a module seen the first time (_path) and for the warning. None when
        the library has none (an older one) or it cannot serve this Python: the hooks here, as
        with GPUMEM_TORCH_C_HOOKS=0 (tests/torch/torch_hooks.sh compares the two)."""
        if self.c_push is None or _env("GPUMEM_TORCH_C_HOOKS", "1") == "0":
            return None
        fn = getattr(ctypes.PyDLL(None), "gpumem_torch_hooks", None)
        if fn is None:
            return None
        fn.restype, fn.argtypes = ctypes.py_object, [ctypes.py_object]
        torch = self.torch
        try:
            return fn((lambda m: self.paths.get(id(m)) or self._path(m), _warn, _first_grad,
                       torch.is_grad_enabled,
                       torch.autograd.Variable._execution_engine.queue_callback, gpumem,
                       torch.Tensor, getattr(torch._C, "_current_autograd_node", None)))
        except Exception:  # noqa: BLE001 - a CPython it does not serve: the Python hooks
            return None

    # -- per-thread state: the range stack (entries (kind, label, pushed)), the forward depth,
    # the modules whose forward is running. Every hook runs on a hot path (23 module calls a
    # step for the tiny model, each with its backward): one attribute lookup for the state,
    # labels encoded once, the recorder's functions called directly, and a module range that
    # takes the place of its parent's (or a sibling's) closed and opened in one call.
    def _t(self):
        try:
            return self.tls.s
        except AttributeError:
            t = self.tls.s = _ThreadState()
            return t

    def _enc(self, label):
        b = self.enc.get(label)
        if b is None:
            b = self.enc[label] = label.encode("utf-8", "replace")
        return b

    def _push(self, t, kind, label):
        # a program that names its own phases (gpumem.range / annotate) keeps them alone
        pushed = False
        if self.c_push is not None and not gpumem._user_ranges:
            pushed = self.c_push(self._enc(label)) >= 0
        t.st.append((kind, label, pushed))

    def _pop(self, t):
        kind, label, pushed = t.st.pop()
        if pushed:
            self.c_pop()
        return kind, label

    def _enter_mod(self, t, path):
        """The module's range: in place of the innermost when that is a module's (flat: a
        parent's range closes while its child runs, and a sibling's when the next one starts),
        else on top of it. The replacement is one call of the recorder's."""
        st = t.st
        if not st or st[-1][0] != "mod":
            self._push(t, "mod", path)
            return
        was = st.pop()[2]
        if was and self.c_replace is not None and not gpumem._user_ranges:
            st.append(("mod", path, self.c_replace(self._enc(path)) >= 0))
            return
        if was:
            self.c_pop()
        self._push(t, "mod", path)

    def _open_step(self, t, pass_label, opt=None):
        """Opens "step N" (if not open on this thread) and the pass ("fwd", "bwd", "opt"; opt:
        the update's optimizer), step N+1 where an optimizer has stepped since the last pass
        and this is a forward, a backward, or an update by an optimizer that stepped already."""
        if self.step_done and (pass_label != "opt" or id(opt) in self.stepped or len(self.stepped) == 8):
            self.step += 1
            self.step_done = False
            self.stepped = set()
        if pass_label == "opt" and len(self.stepped) < 8:
            self.stepped.add(id(opt))
        if not any(e[0] == "step" for e in t.st):
            self._push(t, "step", "step %d" % self.step)
        self._push(t, "pass", pass_label)

    def _close_pass(self, t):
        while t.st and t.st[-1][0] != "pass":
            self._pop(t)
        if t.st:
            self._pop(t)

    def _path(self, module):
        p = self.paths.get(id(module))
        if p is None:
            # a root (or a module made on the fly): name it and everything under it
            root = type(module).__name__
            for name, sub in module.named_modules():
                self.paths.setdefault(id(sub), name or root)
            for name, prm in module.named_parameters():
                self.pnames.setdefault(id(prm), name)
            self._name_params(module)
            p = self.paths[id(module)]
        return p

    # -- forward
    def fwd_pre(self, module, inputs):
        try:
            t = self._t()
            path = self.paths.get(id(module)) or self._path(module)
            x = inputs[0] if inputs else None
            # the output hooked last: its node's backward is that module's
            x_out = x is not None and t.last is not None and t.last() is x
            t.last = t.last_in = None
            if not t.mods:
                # torch.utils.checkpoint's re-run with use_reentrant=True: on a thread running
                # the backward, before any module's backward opened "bwd" there (the checkpointed
                # forward ran without grad and hooked none): the backward's, as the
                # non-reentrant re-run is (torch_hooks.c, pre_work)
                if self._bwd_pass(t) is None and self._in_backward():
                    self._open_bwd(t)
                self._open_step(t, "fwd")
            self._enter_mod(t, path)
            t.mods.append(path)
            t.ins.append((x, x_out))
        except Exception as e:  # noqa: BLE001
            _warn("a forward hook", e)

    def fwd_post(self, module, inputs, output):
        try:
            t = self._t()
            mods = t.mods
            if not mods:
                return None
            path = mods.pop()
            x, x_out = t.ins.pop() if t.ins else (None, False)
            if x_out or (mods and t.ins and x is t.ins[-1][0]):
                x = None  # a sibling's output, or the parent's own input: no work of the parent's
            if mods:
                self._enter_mod(t, mods[-1])  # back in the parent
            else:
                if t.st and t.st[-1][0] == "mod":
                    self._pop(t)
                self._close_pass(t)
            if self.torch.is_grad_enabled():
                self._on_backward_of(t, path, output, x)
            if not mods:
                t.last = t.last_in = None  # the outermost module returned
        except Exception as e:  # noqa: BLE001
            _warn("a forward hook", e)
        return None

    # -- backward
    def _on_backward_of(self, t, path, output, x):
        # the module's backward starts when autograd runs the node that made its output: a
        # pre-hook on that node (one output that needs a gradient is enough to see it), kept in
        # C++ with the node. A tensor hook (Tensor.register_hook) would also give the tensor a
        # Python dict of hooks and a handle, and run through its wrapper: measured ~3 us
        # against ~5 us to register, ~1 us to run (tests/bench/README.md, torch.rec_vs_off)
        out = output if getattr(output, "requires_grad", False) else _first_grad(output)
        if out is None:
            return
        cb = self.bwd_cb.get(path)
        if cb is None:
            cb = self.bwd_cb[path] = _BwdStart(self, path)
        node = out.grad_fn
        if node is not None:
            # the node hooked last, for the module that returned before this one's end (a
            # module returning its child's output as it is): the child's, whose name stands
            # (torch_hooks.c, hook_node). Its output is held weakly (while it lives its node
            # is the same object), from the child's return to the next module's start or the
            # outermost's return, as torch_hooks.c holds it.
            last = t.last() if t.last is not None else None
            if last is not None and last.grad_fn is node:
                self._resume(t, cb, x)
                return
            node.register_prehook(cb)
            t.last = _ref(out)
            t.last_in = x.grad_fn if isinstance(x, self.torch.Tensor) else None
        elif not any(h == cb.tensor_hook for h in (getattr(out, "_backward_hooks", None) or {}).values()):
            # a leaf that needs a gradient, returned as is: its own hook, once (a module that
            # returns a parameter as is would pile one up on it every forward: torch_hooks.c,
            # leaf_hooked)
            out.register_hook(cb.tensor_hook)

    def _resume(self, t, cb, x):
        # the module returned its child's output as it is: the child's name stands over the
        # child's backward, and this module's range opens again at the node that made the
        # child's input (this module's own work, after the child's in the backward, as the
        # forward goes back to the parent when the child returns: torch_hooks.c, resume_parent).
        # None where no work of its own made it (its own input, or the output hooked last:
        # fwd_pre, fwd_post). Then its own input's, for its parent. The node is held (nodes take
        # no weak reference, and the input may be gone by now: a view the child's work did not
        # keep) until the next module's start or the outermost's return, as t.last.
        if t.last_in is not None:
            t.last_in.register_prehook(cb)
        t.last_in = x.grad_fn if isinstance(x, self.torch.Tensor) else None

    def _in_backward(self):
        node = getattr(self.torch._C, "_current_autograd_node", None)
        return node is not None and node() is not None

    def _open_bwd(self, t):
        # "step N/bwd", closed when the backward ends (the engine's callback)
        self._open_step(t, "bwd")
        self.torch.autograd.Variable._execution_engine.queue_callback(self._bwd_end)

    def _bwd_start(self, path):
        try:
            t = self._t()
            b = self._bwd_pass(t)
            if b is None:
                self._open_bwd(t)
            else:
                self._close_abandoned_fwd(t, b)
            self._enter_mod(t, path)
        except Exception as e:  # noqa: BLE001
            _warn("a backward hook", e)

    @staticmethod
    def _bwd_pass(t):
        return next((i for i, e in enumerate(t.st) if e[0] == "pass" and e[1] == "bwd"), None)

    def _close_abandoned_fwd(self, t, b):
        """A forward opened in the backward (above its pass at b) whose modules never returned:
        checkpointing's re-run stopped early once it had the tensors it needed
        (torch.utils.checkpoint's early stop raises out of the forward). The backward goes on, or
        ends: closed."""
        f = next((i for i in range(b + 1, len(t.st)) if t.st[i][0] == "pass" and t.st[i][1] == "fwd"), None)
        if f is not None:
            while len(t.st) > f:
                self._pop(t)
            t.mods.clear()
            t.ins.clear()

    def _bwd_end(self):
        try:
            t = self._t()
            b = self._bwd_pass(t)
            if b is not None:
                self._close_abandoned_fwd(t, b)
            while t.st and not (t.st[-1][0] == "pass" and t.st[-1][1] == "bwd"):
                self._pop(t)
            if t.st:
                self._pop(t)
            if t.st and t.st[-1][0] == "step" and not t.mods:
                self._pop(t)  # opened on this (autograd) thread for the backward
        except Exception as e:  # noqa: BLE001
            _warn("a backward hook", e)

    # -- optimizer: every step names the gradients and the optimizer's state again, in case one
    # is a new allocation. A value that is the same Python object (a weak reference to it
    # still answers it) with the same data pointer as last step is the one already named
    # (_name's own test), found here before the label is made and the tensor's device asked:
    # the tiny model's AdamW has 28 gradients and 84 state entries a step, which
    # _changed_grads / _changed_state scan (in C when it is there). A tensor keeps its Python
    # object while the tensor lives (PyTorch preserves it when only C++ holds the tensor), and
    # a new gradient after zero_grad(set_to_none=True) is a new object even where the old
    # tensor's memory, C++ object (_cdata) and data pointer are all reused: comparing those
    # two numbers alone left such a gradient unnamed, as often as the heap reused them.
    @staticmethod
    def _unchanged(seen, key, v):
        s = seen.get(key)
        return s is not None and s[0]() is v and s[1] == v.data_ptr()

    @staticmethod
    def _seen(seen, key, v):
        if hasattr(v, "data_ptr"):  # not a number in the state
            seen[key] = (_ref(v), v.data_ptr())

    def _begin_opt(self, opt):
        self._open_step(self._t(), "opt", opt)

    def _end_opt(self):
        t = self._t()
        self._close_pass(t)
        if t.st and t.st[-1][0] == "step":
            self._pop(t)
        self.step_done = True  # the next forward or backward is step N+1's (_open_step)

    def _changed_grads(self, groups):
        seen = self.seen_grads
        return [p for group in groups for p in group["params"]
                if p.grad is not None and not self._unchanged(seen, id(p), p.grad)]

    def _changed_state(self, state):
        seen_state = self.seen_state
        return [(p, k, v) for p, st in state.items() for k, v in st.items()
                if not self._unchanged(seen_state.get(id(p), {}), k, v)]

    def _seen_grad(self, p, g):
        self._seen(self.seen_grads, id(p), g)

    def _seen_value(self, p, k, v):
        self._seen(self.seen_state.setdefault(id(p), {}), k, v)

    def opt_pre(self, opt, args, kwargs):
        try:
            self._begin_opt(opt)
            for p in self._changed_grads(opt.param_groups):
                g = p.grad
                self._name(g, self._label(p, "grad."))
                self._seen_grad(p, g)
        except Exception as e:  # noqa: BLE001
            _warn("an optimizer hook", e)

    def opt_post(self, opt, args, kwargs):
        try:
            kind = None
            for p, k, v in self._changed_state(opt.state):
                if getattr(v, "is_cuda", False) and v.numel() > 0:
                    if kind is None:
                        kind = type(opt).__name__.lower()
                        kind = "adam" if kind.startswith("adam") else kind
                    self._name(v, self._label(p, "%s.%s." % (kind, k)))
                self._seen_value(p, k, v)
            self._end_opt()
        except Exception as e:  # noqa: BLE001
            _warn("an optimizer hook", e)

    # -- names
    def _label(self, p, prefix):
        key = (id(p), prefix)
        lab = self.labels.get(key)
        if lab is None:
            lab = self.labels[key] = prefix + self.pnames.get(id(p), "param")
        return lab

    def _name_params(self, module):
        for name, p in module.named_parameters():
            if p.is_cuda:
                self._name(p, name)

    def _name(self, t, label):
        _name_tensor(t, label, self.direct)


def _name_tensor(t, label, direct):
    """Names tensor t. direct: gpumem serves it (name its allocation now); otherwise PyTorch's
    allocator does, and the name goes with the trace (placed among its entries by the tracker's
    seq when it runs, else by the clock) for the merge to give to the tensor at that address,
    not to the segment of PyTorch's cache that holds it."""
    ptr = t.data_ptr()
    if not ptr:
        return
    last = _state["named"].get(label)
    if last is not None and last[0]() is t and last[1] == ptr:
        return  # the same tensor as last time (_unchanged's test)
    _state["named"][label] = (_ref(t), ptr)
    if direct:
        gpumem.name(ptr, label)
    else:
        w, seq, now = _stamp()
        with _lock:
            _state["names"].append((w, ptr, label, seq, now) if seq else (w, ptr, label))


def name_tensor(t, label):
    """gpumem.name(tensor, label) of a CUDA tensor that PyTorch's own allocator holds while its
    trace is recorded (gpumem record's default): named as the hooks name parameters, gradients
    and optimizer state. False where that does not apply (no trace recorded in this process, not
    a CUDA tensor, gpumem as PyTorch's allocator): gpumem.name names the allocation itself."""
    torch = _state.get("torch")
    if not _state.get("traced") or not _ours() or torch is None:
        return False
    if not isinstance(t, torch.Tensor) or not t.is_cuda:
        return False
    _name_tensor(t, label, False)
    return True


class _BwdStart:
    """A module's backward-start callback: autograd calls it (as a node pre-hook, or a tensor
    hook) on the thread that runs the backward."""
    __slots__ = ("hooks", "path")

    def __init__(self, hooks, path):
        self.hooks, self.path = hooks, path

    def __call__(self, grad_outputs):  # Node.register_prehook's: (grad_outputs) -> None
        self.hooks._bwd_start(self.path)

    def tensor_hook(self, grad):  # Tensor.register_hook's: (grad) -> None
        self.hooks._bwd_start(self.path)


class _ThreadState:
    __slots__ = ("st", "mods", "last", "ins", "last_in")

    def __init__(self):
        self.st = []    # the ranges this thread opened: (kind, label, pushed)
        self.mods = []  # the modules whose forward runs on this thread, outermost first
        self.last = None  # a weak reference to the output whose node was hooked last (_on_backward_of)
        self.ins = []  # each module's (first argument, whether it is the output hooked last)
        self.last_in = None  # the node of the input of the module hooked last (_resume)


def _ref(v):
    """A weak reference to v, or, for an object that takes none, one that is always dead (v is
    then never taken for the one seen last)."""
    try:
        return weakref.ref(v)
    except TypeError:
        return _dead


def _dead():
    return None


def _first_grad(x):
    """The first tensor in a module's output (nested tuples, lists, dicts) that needs a gradient."""
    return next((y for y in _tensors(x) if getattr(y, "requires_grad", False)), None)


def _tensors(x):
    if hasattr(x, "grad_fn") and hasattr(x, "register_hook"):
        yield x
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)
