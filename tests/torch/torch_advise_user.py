# A user's own training loop (not tests/torch/train_gpt2.py, whose flags advise reads): an MLP
# with AdamW, 4 steps. "keep" zeroes the gradients in place (zero_grad(set_to_none=False)), so
# they outlive each step; otherwise zero_grad's default (since PyTorch 2.0) sets them to None.
import sys
import torch
import torch.nn as nn

torch.manual_seed(0)
keep = len(sys.argv) > 1 and sys.argv[1] == "keep"
# "accum": 4 micro-batches of 512 rows a step, (loss / 4).backward() each (accumulating already)
k = 4 if len(sys.argv) > 1 and sys.argv[1] == "accum" else 1
model = nn.Sequential(nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                      nn.Linear(2048, 256)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(4):
    for micro in range(k):
        x = torch.randn(2048 // k, 256, device="cuda")
        loss = model(x).square().mean() / k
        if micro == 0:
            opt.zero_grad(set_to_none=not keep)
        loss.backward()
    opt.step()
torch.cuda.synchronize()
