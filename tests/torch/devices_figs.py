# devices_figs.py (torch_devices.sh) — ARGS: own|gm 1|2: device 0 peaks then ends lower, then device 1
# peaks (100 MiB); under own, prints each device's requested_bytes.all.peak (REQ d0 [d1]).
import sys, torch
MiB = 1 << 20
gm, two = sys.argv[1] == "gm", sys.argv[2] == "2"
w = torch.nn.Linear(1024, 1024).to("cuda:0")
opt = torch.optim.AdamW(w.parameters(), lr=1e-3)
for step in range(2):
    w(torch.randn(256, 1024, device="cuda:0")).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
keep = []
for i in range(8):
    keep.append(torch.empty((i + 1) * MiB, dtype=torch.uint8, device="cuda:0"))
del keep[3:]
if two:
    t = [torch.empty(25 * MiB, dtype=torch.uint8, device="cuda:1") for _ in range(4)]
torch.cuda.synchronize()
if not gm:
    print("REQ", *[torch.cuda.memory_stats(d)["requested_bytes.all.peak"] for d in range(2 if two else 1)], flush=True)
