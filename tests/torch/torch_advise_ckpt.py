import torch, torch.nn as nn
from torch.utils.checkpoint import checkpoint
dev='cuda'
class Block(nn.Module):
    def __init__(s, d):
        super().__init__(); s.l1 = nn.Linear(d, 4*d); s.l2 = nn.Linear(4*d, d)
    def forward(s, x): return x + s.l2(torch.relu(s.l1(x)))
class Net(nn.Module):
    def __init__(s, d=512, n=4):
        super().__init__(); s.blocks = nn.ModuleList([Block(d) for _ in range(n)])
    def forward(s, x, ck):
        for b in s.blocks:
            x = checkpoint(b, x, use_reentrant=False) if ck else b(x)
        return x
import sys
ck = len(sys.argv) > 1 and sys.argv[1] == 'ck'
model = Net().to(dev)
opt = torch.optim.AdamW(model.parameters())
for step in range(3):
    x = torch.randn(1024, 512, device=dev)
    loss = model(x, ck).square().mean()
    loss.backward()
    opt.step(); opt.zero_grad()
print("max_memory_allocated", torch.cuda.max_memory_allocated())
print("max_memory_reserved", torch.cuda.max_memory_reserved())
