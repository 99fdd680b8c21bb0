# gpumem.name on tensors under `gpumem record` with PyTorch's own allocator (torch_names.sh): each
# step names a 4-byte loss and a 2 MiB tensor right after they are made (the 2 MiB one from a
# fresh segment of PyTorch's cache in the first step), and keeps the 2 MiB ones.
import torch
import torch.nn as nn

import gpumem

model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
keep = []
for step in range(4):
    x = torch.randn(64, 256, device="cuda")
    loss = model(x).square().mean()
    gpumem.name(loss, "loss")
    big = torch.empty(512, 1024, device="cuda")
    gpumem.name(big, "scratch")
    keep.append(big)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
