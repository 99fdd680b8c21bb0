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
import contextlib
import sys

import torch

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
