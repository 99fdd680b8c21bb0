# torch_compile.py — a small MLP trained 3 steps with its model under torch.compile (inductor,
# Triton kernels), for tests/torch/torch_compile.sh. Argument: the compile mode ("default",
# "reduce-overhead") or "eager" (the same program without torch.compile, to compare with).
import sys

import torch

mode = sys.argv[1] if len(sys.argv) > 1 else "default"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
run = model if mode == "eager" else torch.compile(model, mode=None if mode == "default" else mode)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 64, device="cuda")
y = torch.randint(0, 10, (32,), device="cuda")
for step in range(3):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(run(x), y)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print(f"torch_compile.py: {mode}: 3 steps done")
