"""torch_hooks_edge.py — the cases of gpumem's PyTorch hooks (gpumem/_torch.py) that the GPT-2
script does not reach, for tests/torch/torch_hooks.sh: an output that is a tuple and a dict of
tensors, a tuple whose first tensor needs no gradient (the second item's dict holds one that does),
a module returning its child's output as it is, whose own product is the child's input (its
range again in the backward after the child's), a leaf returned as is (its own tensor hook), a forward under no_grad, a module whose
output's requires_grad raises (the hook's error swallowed with one warning), a module whose child's
output is dropped (it is freed at once: the hooks keep nothing alive), and a program that names
its own phases (no ranges from the hooks from then on), from where USER_RANGES says: 1 before the
first module call, fwd inside a module's forward of the second step, bwd in a tensor hook of the
second step's backward (autograd's thread, where the C hooks run without the GIL), annotate
(gpumem.annotate) between the first and the second step. Prints which hooks run: "hooks
gpumem_module_call" (the C ones run by a C Module.__call__, preload/torch_hooks.c's module_call),
"hooks builtin_function_or_method" (the C ones as global hooks, GPUMEM_TORCH_GLOBAL_HOOKS=1),
"hooks method" (Python's, as global hooks).
"""
import ctypes
import inspect
import os

import torch
from torch.nn.modules import module as M

import gpumem


class Raising:
    @property
    def requires_grad(self):
        raise ValueError("planted")


USER = os.environ.get("USER_RANGES", "0")
STEP = 0


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

    def forward(self, x):
        h = self.lin(x)
        if USER == "fwd" and STEP == 1 and torch.is_grad_enabled():
            gpumem.range("mine")  # between two child modules' ranges
        # seq's output returned as is (its ReLU's: the ReLU's backward named after it), and a
        # product of Inner's own made seq's input: Inner's range again in the backward after
        # seq's, as in the forward after seq returned
        return self.seq(torch.tanh(h)), {"x": [x]}


class Pair(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        # x needs no gradient: its backward starts at the node of its own product (proj's output
        # as it is would be proj's node, proj's backward: the hooks leave it to proj)
        return x, {"y": self.proj(x) * 2}


class Leaf(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4, device="cuda"))

    def forward(self, x):
        return self.w  # a leaf that needs a gradient, returned as is


class Dead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4, device="cuda"))

    def forward(self, x):
        return (x * self.w).exp()  # its node keeps the output's memory (exp saves its result)


class Waste(torch.nn.Module):
    """Drops its child's output, then asks whether that output's memory went with it."""

    def __init__(self):
        super().__init__()
        self.dead = Dead()
        self.freed = []

    def forward(self, x):
        before = torch.cuda.memory_allocated()
        self.dead(x)
        self.freed.append(torch.cuda.memory_allocated() == before)
        return x


class Bad(torch.nn.Module):
    def forward(self, x):
        return Raising()


if USER == "1":
    gpumem.range("mine")  # naming a phase is enough: the hooks stay out of the way
inner, leaf, bad, waste, pair = Inner().cuda(), Leaf(), Bad(), Waste(), Pair().cuda()
x = torch.randn(2, 4, device="cuda")
opt = torch.optim.AdamW(list(inner.parameters()) + list(leaf.parameters()) + list(pair.parameters()))
glob = M._global_forward_pre_hooks
print("hooks", type(next(iter(glob.values())) if glob else vars(M.Module)["__call__"]).__name__)
# whatever runs the hooks, a module's signature is what PyTorch's own __call__ gives
print("signature", inspect.signature(inner), inspect.signature(torch.nn.Module.__call__))
for step in range(3):
    STEP = step
    if USER == "annotate" and step == 1:
        gpumem.annotate(pair)  # its own ranges, recorded as a program's
    bad(x)
    waste(x)
    y, _ = inner(x)
    if USER == "bwd" and step == 1:  # runs before the node of y's pre-hooks
        y.register_hook(lambda g: (gpumem.range("mine"), g)[1])
    (y.sum() + leaf(x).sum() + pair(x)[1]["y"].sum()).backward()
    opt.step()
    opt.zero_grad(set_to_none=step == 1)
    with torch.no_grad():
        inner(x)
print("dropped output freed", all(waste.freed))
# a leaf returned as is every forward: hooked once, not once a forward
print("leaf hooks", len(leaf.w._backward_hooks or {}))
prehooks = getattr(ctypes.PyDLL(None), "gpumem_torch_prehooks", None)  # torch_hooks.c's counts
if prehooks is not None:
    n_cxx, n_py = ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)
    prehooks(ctypes.byref(n_cxx), ctypes.byref(n_py))
    print("node pre-hooks: C++ %d, Python %d" % (n_cxx.value, n_py.value))
print("done")
