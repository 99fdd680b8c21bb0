# torch_compile.py — a small MLP (Linear/GELU blocks with a residual, AdamW) trained 3 steps with
# its model under torch.compile (inductor, Triton kernels), for tests/torch/torch_compile.sh.
# Argument: the compile mode ("default", "reduce-overhead") or "eager" (the same program without
# torch.compile, to compare with). Its last line gives torch.cuda.max_memory_allocated(): a run
# whose compile cache is warm autotunes nothing, which report's peak without autotuning is.
import sys

import torch

mode = sys.argv[1] if len(sys.argv) > 1 else "default"
torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.act, self.proj = torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)

    def forward(self, x):  # x: (512, 256)
        return x + self.proj(self.act(self.fc(x)))


model = torch.nn.Sequential(Block(), Block(), torch.nn.Linear(256, 10)).cuda()
run = model if mode == "eager" else torch.compile(model, mode=None if mode == "default" else mode)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(512, 256, device="cuda")
y = torch.randint(0, 10, (512,), device="cuda")
for step in range(3):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(run(x), y)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print(f"torch_compile.py: {mode}: 3 steps done")
print(f"torch_compile.py: max_memory_allocated {torch.cuda.max_memory_allocated()}")
