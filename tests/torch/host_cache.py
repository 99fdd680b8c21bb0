# Pinned host memory for tests/torch/torch_host_cache.sh: a DataLoader with pin_memory=True (and
# two workers) whose batches the loop drops, so that every pinned block its pin thread made is
# back in PyTorch's host cache (CachingHostAllocator) at exit, and one tensor pin_memory()'d and
# kept to the end on purpose: a pinned block the program still holds (the line marked KEPT).
import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.arange(64 * 256, dtype=torch.float32).reshape(64, 256))
loader = DataLoader(data, batch_size=16, pin_memory=True, num_workers=2)
for (x,) in loader:
    y = x.to("cuda", non_blocking=True) * 2
    del x, y
kept = torch.ones(100000).pin_memory()  # KEPT
torch.cuda.synchronize()
print("kept", kept.numel() * kept.element_size())
