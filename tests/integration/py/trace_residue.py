"""PyTorch's trace entry with Python frames leaves none of its arguments on the stack
(preload_uses.sh's residue rows; standard library only, under libgpumem.so).

trace_residue.py STACK_PROBE_SO LIBCUDART: per row, from nested Python functions, one call of
gpumem_torch_trace_entry (as PyTorch's tracker makes it) with five marker words as its address,
size, stream and pool ids, then, from the same Python frame, stack_probe_find looks for them in
the 32 KiB below (the entry's frames, the Python stack reader's, ~12 KiB deep, and those under
them). Prints per row "trace_residue: ROW clean" or "trace_residue: ROW FIELD left at DEPTH",
then the entry as kept (its fields the markers, and whether it has a Python stack); then the
same for cudaMalloc called from Python code, with and without the GIL ("trace_residue: malloc
clean" or "... addr left at DEPTH": the new address, searched for), and the control: a word
stack_probe_leave left 4,000 bytes down is found there.
"""
import ctypes
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cudart  # noqa: E402

rt = cudart.load(sys.argv[2])
rt.free(rt.malloc(512))  # the recording started: the entries read the seq and Python frames
probe = ctypes.PyDLL(sys.argv[1])
ARGS = [ctypes.c_int, ctypes.c_int] + [ctypes.c_uint64] * 5
probe.stack_probe_find.argtypes = ARGS
probe.stack_probe_find.restype = ctypes.c_long
probe.stack_probe_leave.argtypes = ARGS
probe.stack_probe_leave.restype = None
# the entry with the GIL held (PyDLL), as PyTorch's allocations from Python code, and without
# it (CDLL), as its ops that release it: the reader reads the frames either way
entry = {}
for gil, flavour in (("gil", ctypes.PyDLL), ("nogil", ctypes.CDLL)):
    f = flavour(None).gpumem_torch_trace_entry
    f.argtypes, f.restype = ARGS, None
    entry[gil] = f
copy = ctypes.PyDLL(None).gpumem_torch_trace_copy
copy.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)]
copy.restype = ctypes.c_size_t
FIELDS = ("addr", "size", "stream", "pool_a", "pool_b")
# ROW: (action, device, gil); actions: 0 alloc, 1 free, 3 segment_free, 8 oom
ROWS = [
    ("alloc", 0, 0, "gil"),      # the stack path: Python frames read
    ("alloc_nogil", 0, 0, "nogil"),
    ("oom", 8, 0, "gil"),        # the stack path too (the line that asked)
    ("free", 1, 0, "gil"),       # the fast path
    ("segment_free", 3, 0, "nogil"),
    ("free_new_device", 1, 1, "gil"),   # a device not seen yet: the slow path (the ring grown)
    ("alloc_new_device", 0, 2, "gil"),  # the stack path making room for a device
]


def markers(row):
    # words no program holds: "tr" + the row + the field (row -1: the calls made before)
    return [0x7472000000000000 | (row + 2) << 24 | (k + 1) << 8 | 0x5A for k in range(len(FIELDS))]


def probe_row(i, action, device, gil):
    m = markers(i)
    entry[gil](action, device, *m)
    r = probe.stack_probe_find(len(m), 0, *[~w & (1 << 64) - 1 for w in m])
    return (-1, -1) if r < 0 else (r & ~7, r & 7)


def nested_malloc(n, runtime):
    return nested_malloc(n - 1, runtime) if n else probe_malloc(runtime)


def nested(n, *a):  # a few Python frames under the entry
    return nested(n - 1, *a) if n else probe_row(*a)


def probe_malloc(runtime):
    p = runtime.malloc(512)
    return p, probe.stack_probe_find(1, 0, ~p & (1 << 64) - 1, 0, 0, 0, 0)


def control():
    w = ~0x6374726C0000005A & (1 << 64) - 1
    probe.stack_probe_leave(4000, 0, w, 0, 0, 0, 0)
    return probe.stack_probe_find(1, 0, w, 0, 0, 0, 0)


def main():
    # each kind of call made once before, on device 0: the dynamic linker binds a function at
    # its first call (ctypes' and Python's around a call that releases the GIL, the reader's
    # first libc calls) and saves every register on the stack as it does, once
    for action, gil in sorted({(r[1], r[3]) for r in ROWS}):
        nested(3, -1, action, 0, gil)
    for i, (name, action, device, gil) in enumerate(ROWS):
        depth, which = nested(3, i, action, device, gil)
        if depth < 0:
            print("trace_residue: %s clean" % name)
        else:
            print("trace_residue: %s %s left at %d" % (name, FIELDS[which], depth))
    seen = ctypes.c_uint64()
    need = copy(None, 0, ctypes.byref(seen))
    buf = ctypes.create_string_buffer(need)
    copy(buf, need, ctypes.byref(seen))
    kept = [struct.unpack_from("<QQQQQQQiiII", buf.raw, k * 72) for k in range(need // 72)]
    for i, (name, action, device, gil) in enumerate(ROWS):
        m = markers(i)
        e = [k for k in kept if k[0] == m[0]]
        if len(e) != 1:
            print("trace_residue: %s kept %d times" % (name, len(e)))
            continue
        addr, size, seq, t, stream, pa, pb, act, dev, stack, pad = e[0]
        ok = [addr, size, stream, pa, pb] == m and act == action and dev == device and pad == 0
        print("trace_residue: %s kept %s, %s" % (name, "as passed" if ok else "OTHERWISE",
                                                  "with a stack" if stack else "no stack"))
    # cudaMalloc from Python code: the recorder takes its stack with the Python frame reader
    # (with the GIL held), ~12 KiB below the entry point, while gpumem's hook holds the new
    # address; none of it may be left there. Without the GIL no frames are read (the short
    # bound). Each row's allocation is kept, so no two rows share an address.
    rt_nogil = cudart.load(sys.argv[2], gil=False)
    kept_p = []
    for name, runtime in (("malloc", rt), ("malloc_nogil", rt_nogil)):
        runtime.free(runtime.malloc(512))  # the first call's bindings made
        p, depth = nested_malloc(3, runtime)
        kept_p.append(p)
        print("trace_residue: %s %s" % (name, "clean" if depth < 0 else "addr left at %d" % (depth & ~7)))
    for p in kept_p:
        rt.free(p)
    print("trace_residue: control at %d" % control())


main()
