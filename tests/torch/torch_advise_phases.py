# A loop in two phases (the review of 2026-12-06's hist.py, smaller): a big batch, then
# empty_cache() and reset_peak_memory_stats(), then smaller batches of odd sizes; zero_grad after
# optimizer.step(), outside the hooks' "step N" ranges. "keep" zeroes the gradients in place
# (set_to_none=False), otherwise they are set to None. It prints its own max_memory_allocated /
# max_memory_reserved (since the reset) and the whole run's peaks (memory_stats before the reset).
import sys
import torch

keep = len(sys.argv) > 1 and sys.argv[1] == "keep"
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
opt = torch.optim.AdamW(model.parameters())
for step in range(2):
    x = torch.randn(2048, 1024, device="cuda")
    model(x).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=not keep)
del x
whole_alloc = torch.cuda.max_memory_allocated()
whole_res = torch.cuda.max_memory_reserved()
torch.cuda.empty_cache()
torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(333 + step * 77, 1024, device="cuda")
    model(x).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=not keep)
print("whole_run_allocated", max(whole_alloc, torch.cuda.max_memory_allocated()))
print("whole_run_reserved", max(whole_res, torch.cuda.max_memory_reserved()))
print("max_memory_allocated", torch.cuda.max_memory_allocated())
print("max_memory_reserved", torch.cuda.max_memory_reserved())
