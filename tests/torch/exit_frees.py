# A program that stops inside an open step range, for tests/torch/torch_exit_frees.sh: three
# steps of a Linear fed by a DataLoader with pin_memory=True (a pinned host block cached by
# PyTorch's host allocator) and run through cuBLAS (a 32 MiB workspace kept), each step an NVTX
# range "step N"; step 3 makes an allocation past the device (GPUMEM_SIM_MEMORY=512M) and the
# OOM, uncaught, ends the program with "step 3" still open. gpumem's exit hooks then free both
# caches: those frees are the program's end, no step's.
import torch

data = torch.utils.data.TensorDataset(torch.ones(64, 256))
loader = torch.utils.data.DataLoader(data, batch_size=16, pin_memory=True)
lin = torch.nn.Linear(256, 256).cuda()
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
for step, (x,) in zip(range(1, 4), loader):
    torch.cuda.nvtx.range_push(f"step {step}")
    lin(x.cuda(non_blocking=True)).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step == 3:
        torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # the OOM: "step 3" left open
    torch.cuda.nvtx.range_pop()
