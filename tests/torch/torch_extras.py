# A PyTorch script with no nn.Module and no optimizer, as a user's first check of gpumem writes
# one (tests/torch/torch_extras.sh reads its recording against what it prints):
#   - a 256 MiB tensor made and freed, torch.cuda.empty_cache(), then a 64 MiB one: no step for
#     gpumem record's hooks to open, so no phases;
#   - pinned host memory: three 64 MiB tensors (pin_memory=True), two freed and PyTorch's host
#     cache emptied (cudaFreeHost), then a 256 MiB one: 320 MiB held at the most, 448 MiB in all,
#     printed as PyTorch's host allocator counts them (host_memory_stats: allocated_bytes.peak,
#     allocated_bytes.allocated).
#   argv[1] "ranged": the device part inside a range of its own (gpumem.range("load")), none of
#   "step N" > fwd / bwd / opt.
#   argv[1] "attn": instead, F.scaled_dot_product_attention on plain tensors in a loop of 6, an
#   accumulator made once after the first iteration's frees and kept: no optimizer.step() ran,
#   nothing is optimizer state. argv[1] "driver": instead, a 4 MiB tensor (PyTorch's 20 MiB
#   segment) and a loop of 5 that cuMemAlloc's 1 MiB and 5 MiB through ctypes, frees the first
#   and keeps the second: the device's "other" is the loop's (inference) and the segment's
#   (no source: PyTorch's tensors are told in its own view).
import contextlib
import ctypes
import sys

import torch
import torch.nn.functional as F

if sys.argv[1:] == ["attn"]:
    acc = None
    for i in range(6):
        q, k, v = (torch.randn(2, 4, 256, 64, device="cuda") for _ in range(3))
        out = F.scaled_dot_product_attention(q, k, v)
        del q
        s = out.sum(dim=-1)
        del k, v, out
        if acc is None:
            acc = torch.zeros(2 * 4 * 256 * 4, device="cuda")
        acc[: s.numel()] += s.flatten()
        del s
    torch.cuda.synchronize()
    print("max_memory_allocated", torch.cuda.max_memory_allocated())
    sys.exit(0)
if sys.argv[1:] == ["driver"]:
    x = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
    cuda = ctypes.CDLL("libcuda.so.1")
    kept = []
    for i in range(5):
        p, q = ctypes.c_uint64(), ctypes.c_uint64()
        assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20)) == 0
        assert cuda.cuMemAlloc_v2(ctypes.byref(q), ctypes.c_size_t(5 << 20)) == 0
        cuda.cuMemFree_v2(p)
        kept.append(q)
    torch.cuda.synchronize()
    print("max_memory_reserved", torch.cuda.max_memory_reserved())
    sys.exit(0)
ranged = sys.argv[1:] == ["ranged"]
if ranged:
    import gpumem
with gpumem.range("load") if ranged else contextlib.nullcontext():
    a = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    del a
    torch.cuda.empty_cache()
    b = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
pinned = [torch.empty(64 << 20, dtype=torch.uint8, pin_memory=True) for _ in range(3)]
del pinned[1:]
torch._C._host_emptyCache()
pinned.append(torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True))
s = torch.cuda.host_memory_stats()
print("host_peak", s["allocated_bytes.peak"])
print("host_total", s["allocated_bytes.allocated"])
