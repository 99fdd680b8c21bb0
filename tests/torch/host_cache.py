# Pinned host memory for tests/torch/torch_host_cache.sh, each kind of PyTorch's pinned blocks:
#   - a DataLoader with pin_memory=True (and two workers) whose batches the loop drops: every
#     pinned block its pin thread made is back in PyTorch's host cache (CachingHostAllocator);
#   - a tensor pin_memory()'d and freed (the line marked FREED): its block is the cache's too;
#   - a forward and backward under save_on_cpu(pin_memory=True): the saved activations' pinned
#     copies, freed by the backward, to the cache (the line marked OFFLOAD);
#   - a tensor pin_memory()'d and kept to the end on purpose (the line marked KEPT): a pinned
#     block the program still holds.
import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.arange(64 * 256, dtype=torch.float32).reshape(64, 256))
loader = DataLoader(data, batch_size=16, pin_memory=True, num_workers=2)
for (x,) in loader:
    y = x.to("cuda", non_blocking=True) * 2
    del x, y
freed = torch.ones(3 << 16).pin_memory()  # FREED
del freed
lin = torch.nn.Linear(512, 512).cuda()
with torch.autograd.graph.save_on_cpu(pin_memory=True):
    out = lin(torch.ones(64, 512, device="cuda", requires_grad=True))  # OFFLOAD
out.sum().backward()
del out
kept = torch.ones(100000).pin_memory()  # KEPT
torch.cuda.synchronize()
print("kept", kept.numel() * kept.element_size())
