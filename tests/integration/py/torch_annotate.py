"""gpumem.annotate on a small torch.nn.Module whose forward allocates device memory through
ctypes (the virtual GPU's cudaMalloc): those allocations land in the ranges fwd/<module path>
and bwd/<module path> (tests/integration/python_torch.sh).

usage: python3 torch_annotate.py LIBCUDART [steps] [gil|nogil]

  gil    cudaMalloc through ctypes.PyDLL (the GIL held through the call)
  nogil  through ctypes.CDLL, which releases the GIL around the call as PyTorch's own ops do
         (the backward's allocation then runs under autograd's engine, which released it too)
"""
import ctypes
import sys

import torch

import gpumem

nogil = len(sys.argv) > 3 and sys.argv[3] == "nogil"
rt = (ctypes.CDLL if nogil else ctypes.PyDLL)(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
rt.cudaMalloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
KiB = 1024
live = []


def device_alloc(n, label):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0  # SITE:device_alloc
    assert gpumem.name(p.value, label)
    live.append(p.value)


def device_free_all():
    while live:
        rt.cudaFree(live.pop())


class Grad(torch.autograd.Function):
    """Allocates device memory in the backward of a module, as a framework's backward would."""

    @staticmethod
    def forward(ctx, x, label):
        ctx.label = label
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        device_alloc(64 * KiB, ctx.label + ".grad")  # SITE:grad_backward
        return g, None


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 16)
        self.proj = torch.nn.Linear(16, 8)

    def forward(self, x):
        device_alloc(256 * KiB, "mlp.hidden")  # SITE:mlp_forward
        return self.proj(torch.relu(Grad.apply(self.fc(x), "mlp")))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = MLP()
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        device_alloc(128 * KiB, "block.norm")
        return x + self.mlp(self.norm(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


torch.manual_seed(0)
model = Net()
handles = gpumem.annotate(model)
assert handles, "annotate registered no hooks: libgpumem.so not loaded?"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
for step in range(steps):
    with gpumem.range("step %d" % step):
        x = torch.randn(4, 8)
        loss = model(x).sum()
        loss.backward()  # SITE:loss_backward
        device_free_all()
print("torch_annotate: done")
