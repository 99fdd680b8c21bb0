# Matmuls for tests/torch/torch_workspaces.sh: PyTorch keeps a cuBLAS workspace per (handle,
# stream) that ran one (the forward's on the main thread, the backward's on autograd's device
# thread: two handles), and a cuBLASLt one per (Lt handle, stream) where
# TORCH_CUBLASLT_UNIFIED_WORKSPACE=0 and cuBLASLt runs them (argv[1] "lt"), until the process
# ends. A tensor kept to the end on purpose (the line marked KEPT) is a leak the program made.
import sys

import torch

if sys.argv[1:] == ["lt"]:
    torch.backends.cuda.preferred_blas_library("cublaslt")
lin = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
for _ in range(2):
    x = torch.ones(8, 64, device="cuda")
    lin(x).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
del x
kept = torch.ones(1000, device="cuda")  # KEPT
torch.cuda.synchronize()
