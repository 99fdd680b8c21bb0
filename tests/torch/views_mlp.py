# views_mlp.py — a small PyTorch training loop for tests/torch/torch_views.sh: an MLP of 3 Linear
# layers, batch 256, AdamW, STEPS steps (default 4); --keep: each step keeps a 4 MiB tensor made
# after opt.step() (a leak: the line is marked KEPT); --eval: a no_grad pass after the loop whose
# output is kept (one step's, not a growth); --keep-out: each step's output (10 KiB) is kept (a leak
# at the line where PyTorch's first matmul makes cuBLAS's workspace in step 1: the line is marked
# OUT); --fresh-input: each step makes its input (the last one, alive at the end, is made before
# the hooks open the last step: the line is marked INPUT). Prints PyTorch's own figures as "key
# value" lines.
import sys
import torch
import torch.nn as nn

steps = int(next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--steps=")), 4))
keep_each_step = "--keep" in sys.argv
eval_pass = "--eval" in sys.argv
keep_out = "--keep-out" in sys.argv
fresh_input = "--fresh-input" in sys.argv
dev = "cuda"
torch.backends.cudnn.enabled = False
model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(256, 1024, device=dev)
y = torch.randint(0, 10, (256,), device=dev)
kept = []
for step in range(steps):
    if fresh_input:
        x = torch.randn(256, 1024, device=dev)  # INPUT
    opt.zero_grad()
    out = model(x)  # OUT
    loss = nn.functional.cross_entropy(out, y)
    loss.backward()
    opt.step()
    if keep_each_step:
        kept.append(torch.empty(1024, 1024, device=dev))  # KEPT
    if keep_out:
        kept.append(out)
if eval_pass:  # a no_grad pass whose hidden features (2 MiB) are kept: one step's, not growth
    with torch.no_grad():
        features = model[:2](x)
torch.cuda.synchronize()
print("max_memory_allocated", torch.cuda.max_memory_allocated())
print("memory_allocated", torch.cuda.memory_allocated())
print("max_memory_reserved", torch.cuda.max_memory_reserved())
