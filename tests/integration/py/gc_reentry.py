"""Garbage collection while gpumem reads Python frames (tests/integration/python_frames.sh).

CPython 3.11 creates frame objects when asked for them, and that allocation may run the
collector on the spot. Here every collection finds cycles whose finalizers free device memory,
and the collector runs at every chance (threshold 1), while fresh frames keep allocating,
large enough that the allocator maps new memory (events recorded under its lock). A collection
inside gpumem's frame walk would re-enter cudaFree there.

usage: python3 gc_reentry.py LIBCUDART [rounds]
"""
import ctypes
import gc
import sys

rt = ctypes.PyDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
rt.cudaMalloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
freed = [0]
kept = []


class Holder:
    def __init__(self, ptr):
        self.ptr = ptr
        self.me = self  # a cycle: only the collector frees it

    def __del__(self):
        rt.cudaFree(self.ptr)
        freed[0] += 1


def alloc(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0
    return p.value


def layer(i):
    # first in this fresh frame: new memory, so the allocator maps (an event under its lock)
    # and gpumem's walk creates this frame's frame object
    kept.append(alloc(2 << 20))
    Holder(alloc(4096))  # garbage with a finalizer that frees device memory


def step(i):
    return layer(i)


gc.set_threshold(1, 1, 1)
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 300
for i in range(rounds):
    step(i)
gc.collect()
for p in kept:
    rt.cudaFree(p)
print("gc_reentry: done, %d finalizers freed device memory" % freed[0])
