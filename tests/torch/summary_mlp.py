# summary_mlp.py — a few training steps of a small MLP (tests/torch/torch_summary.sh), on one
# device or two (--devices 2: the model split across cuda:0 and cuda:1), optionally resetting
# PyTorch's peak stats before the last step (--reset) or killing itself at the end (--kill: no
# exit handler runs); --tensors-only: a few tensors and no matmul (no cuBLAS workspace either). Prints PyTorch's own figures, per device, before it ends:
# "MAX {"allocated": [...], "reserved": [...]}" (max_memory_allocated(d), max_memory_reserved(d)),
# "MAX null" where PyTorch keeps none (gpumem as its allocator).
import json, os, signal, sys, torch
if "--tensors-only" in sys.argv:  # no matmul, so no cuBLAS workspace: PyTorch's tensors alone
    xs = [torch.empty(n * 2**20, dtype=torch.uint8, device="cuda") for n in (3, 5, 9)]
    y = xs[0] + 1
    del xs
    print("MAX", json.dumps({"allocated": [torch.cuda.max_memory_allocated()],
                             "reserved": [torch.cuda.max_memory_reserved()]}), flush=True)
    sys.exit(0)
ndev = 2 if "--devices" in sys.argv and sys.argv[sys.argv.index("--devices") + 1] == "2" else 1
devs = [torch.device("cuda:%d" % d) for d in range(ndev)]
l0 = torch.nn.Linear(512, 2048).to(devs[0])
l1 = torch.nn.Linear(2048, 512).to(devs[-1])
opt = torch.optim.Adam(list(l0.parameters()) + list(l1.parameters()))
for step in range(3):
    if step == 2 and "--reset" in sys.argv:
        for d in devs:
            torch.cuda.reset_peak_memory_stats(d)
    x = torch.randn(256 if step < 2 else 64, 512, device=devs[0])
    loss = l1(l0(x).relu().to(devs[-1])).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
try:
    print("MAX", json.dumps({"allocated": [torch.cuda.max_memory_allocated(d) for d in devs],
                             "reserved": [torch.cuda.max_memory_reserved(d) for d in devs]}), flush=True)
except RuntimeError:  # statistics that raise (gpumem as PyTorch's allocator answers them since 2026-12-07)
    print("MAX null", flush=True)
if "--kill" in sys.argv:
    os.kill(os.getpid(), signal.SIGKILL)
