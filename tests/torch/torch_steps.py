# A user's loop whose steps tests/torch/torch_steps.sh counts (argv[1] the kind), each step keeping
# 1 MiB (the list `kept`: what `gpumem leaks` must see grow by 1 MiB a step):
#   one     one optimizer, 4 steps (the reference);
#   two     an encoder's AdamW and a head's SGD stepped one after the other, 4 steps;
#   scaler  the same under autocast (bf16) with a GradScaler: scaler.step(o1); scaler.step(o2);
#   manual  one optimizer, gradients set by hand (no module call, no backward), 3 steps: the same
#           optimizer stepped again is the next step;
#   infer   an inference loop (no_grad, no optimizer), 4 batches: one step to the hooks;
#   ranged  the same with each batch in gpumem.range("step N"): 4 steps.
import contextlib
import sys
import torch
import torch.nn as nn
import gpumem

torch.manual_seed(0)
kind = sys.argv[1]
steps = 3 if kind == "manual" else 4
enc = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).cuda()
head = nn.Linear(256, 16).cuda()
if kind == "one":
    opts = [torch.optim.AdamW(list(enc.parameters()) + list(head.parameters()), lr=1e-3)]
else:
    opts = [torch.optim.AdamW(enc.parameters(), lr=1e-3), torch.optim.SGD(head.parameters(), lr=1e-2, momentum=0.9)]
scaler = torch.amp.GradScaler("cuda") if kind == "scaler" else None
kept = []
if kind in ("infer", "ranged"):
    with torch.no_grad():
        for step in range(4):
            with gpumem.range("step %d" % (step + 1)) if kind == "ranged" else contextlib.nullcontext():
                kept.append(torch.empty(1 << 20, dtype=torch.uint8, device="cuda"))
                head(enc(torch.randn(512, 256, device="cuda")))
    sys.exit(0)
for step in range(steps):
    kept.append(torch.empty(1 << 20, dtype=torch.uint8, device="cuda"))
    if kind == "manual":
        for p in enc.parameters():
            p.grad = torch.ones_like(p)
        opts[0].step()
        continue
    x = torch.randn(512, 256, device="cuda")
    for o in opts:
        o.zero_grad()
    if scaler is not None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = head(enc(x)).float().square().mean()
        scaler.scale(loss).backward()
        for o in opts:
            scaler.step(o)
        scaler.update()
    else:
        head(enc(x)).square().mean().backward()
        for o in opts:
            o.step()
torch.cuda.synchronize()
