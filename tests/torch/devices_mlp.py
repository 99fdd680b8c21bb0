# devices_mlp.py — a model split across cuda:0 and cuda:1 (tests/torch/torch_devices.sh): a few
# steps, a 64 MiB tensor moved onto cuda:0, a memory fraction on cuda:1 and a request above it
# there (an intended out-of-memory error on device 1). Prints PyTorch's own peaks per device:
# "MAX {"allocated": [d0, d1], "reserved": [d0, d1]}".
import json, torch
torch.cuda.set_per_process_memory_fraction(0.5, 1)
l0 = torch.nn.Linear(512, 1024).to("cuda:0")
l1 = torch.nn.Linear(1024, 512).to("cuda:1")
for step in range(2):
    x = torch.randn(64, 512, device="cuda:0")
    out = l1(l0(x).relu().to("cuda:1"))
    out.sum().backward()
big = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda:1")
moved = big.to("cuda:0")  # DEVICE0_LINE
del big
try:
    huge = torch.empty(45 * 2**30, dtype=torch.uint8, device="cuda:1")
except torch.OutOfMemoryError:
    print("OOM_EXPECTED", flush=True)
print("MAX", json.dumps({"allocated": [torch.cuda.max_memory_allocated(d) for d in (0, 1)],
                         "reserved": [torch.cuda.max_memory_reserved(d) for d in (0, 1)]}), flush=True)
