"""The Python-frames test program (tests/integration/python_frames.sh): nested functions in two
files (this one and layers.py) allocate device memory with cudaMalloc through ctypes.

usage: python3 frames_main.py LIBCUDART [gil|nogil|checked] [deep N]

  gil      cudaMalloc through ctypes.PyDLL (the GIL stays held: Python frames are recorded)
  nogil    through ctypes.CDLL (the GIL is released around the call: native frames only)
  checked  as nogil, once gpumem's frame reader has been checked against the C API
           (gpumem_python_check, as gpumem's PyTorch support calls it): a chain read again is
           then compared with the kept one as it is read (python_nogil.c, memo_again)
"""
import copy
import ctypes
import sys

import cudart
import layers

MiB = 1 << 20


def build_model(rt):
    weights = []
    for _ in range(3):
        weights.append(layers.alloc_weights(rt, 4 * MiB))  # SITE:build_model
    return weights


def forward(rt):
    acts = []
    for _ in range(2):
        acts.append(layers.alloc_activations(rt, 2 * MiB))  # SITE:forward
    return acts


# Non-ASCII names (a UCS-2 and a UCS-4 string inside CPython): read without the GIL, their
# UTF-8 is encoded by gpumem itself, and must equal what the C API gives.
def 构建_modèle(rt):
    return build_model(rt)


def 前向_𠀀(rt):
    return forward(rt)


# One helper line reached from three callers in turn, at the same depth: stacks whose innermost
# frame is the same and whose callers differ (python_nogil.c's memo_again keeps two such chains
# by their innermost frame; a third goes the long way). Each allocation must name its caller.
def via_a(rt):
    layers.release(rt, layers.alloc_activations(rt, 1 * MiB))  # SITE:via_a


def via_b(rt):
    layers.release(rt, layers.alloc_activations(rt, 1 * MiB))  # SITE:via_b


def via_c(rt):
    layers.release(rt, layers.alloc_activations(rt, 1 * MiB))  # SITE:via_c


def step(rt, weights):
    acts = 前向_𠀀(rt)  # SITE:step
    layers.leak_cache(rt, 1 * MiB)  # SITE:step_leak
    for a in acts:
        layers.release(rt, a)


def main():
    mode = sys.argv[2] if len(sys.argv) > 2 else "gil"
    rt = cudart.load(sys.argv[1], gil=(mode == "gil"))
    if mode == "checked":
        assert ctypes.PyDLL(None).gpumem_python_check() == 1
    weights = 构建_modèle(rt)  # SITE:main_build
    for _ in range(3):
        step(rt, weights)  # SITE:main_step
    for _ in range(2):
        via_a(rt)
        via_b(rt)
        via_c(rt)
    for w in weights:
        layers.release(rt, w)
    copy.deepcopy(layers.Buffer(rt))  # SITE:main_deepcopy
    print("frames_main: done")


if __name__ == "__main__":
    main()
