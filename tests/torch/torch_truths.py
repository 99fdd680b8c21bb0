# Small PyTorch programs whose memory truths tests/torch/torch_truths.sh checks gpumem's outputs
# against (argv[1] the kind):
#   val   a training loop of 4 steps, each keeping 1 MiB (the list `kept`), then a validation
#         forward (with autograd, its loss kept) after the last optimizer step: the hooks open a
#         5th step at that forward, and it ends no optimizer step. Growth per step: 1 MiB.
#   mlp   an activation-heavy MLP (4 blocks 512-2048-512, a batch of 8192): offloading its AdamW
#         state lowers the peak allocated, not the peak reserved (its segments are cut up).
#   oom   (on a 1 GiB virtual GPU) a 512 MiB buffer made and freed (`scratch`: PyTorch keeps its
#         segment), 7 tensors of 64 MiB kept (`acts`, at one line: in that segment), then a
#         768 MiB request fails: the tensors live at the OOM are the 448 MiB at the `acts` line,
#         not the segment (made at the `scratch` line, or by PyTorch's C++).
#   oomfirst  (on a 1 GiB virtual GPU) a training loop whose first forward runs out of memory:
#         its input (128 MiB, the input line) is alive at the OOM, and so are the parameters, no
#         gradient named yet: nothing lived through a step, and no phase says what they are
#         (the input was a parameter "from phases": made before the step, alive to the end).
#   oomlater  (on a 512 MiB virtual GPU) the same loop with small batches, whose third batch
#         (128 MiB, made after the second step's update) makes the third forward run out of
#         memory: that input is no optimizer state (it was, "from phases": made after the
#         second update, alive to the end).
#   evalranged, evalhooks  4 training steps (each in gpumem.range("step N"), or steps by the
#         hooks), then an evaluation after the loop, outside any step's range (under the hooks:
#         its forward opens a 5th step), on a batch of 16384 (its output kept). Each step's
#         highest allocated bytes are PyTorch's max_memory_allocated over its iteration (reset
#         at its top): 74.52, 77.52, 77.52, 77.52 MiB, then the evaluation's 216.52 MiB; the eval
#         is no training step's (it was step 4's peak, and its kept output optimizer state), and
#         its input, made before its forward, is not step 4's (it raised step 4 by 16 MiB).
#   oomretry  (on a 512 MiB virtual GPU) 6 steps of 256 rows, the third tried with 32768, and on
#         each torch.OutOfMemoryError with half as many until 4096 fit; the run goes on. The
#         steps' peaks are PyTorch's (the third's over its successful attempt: 400.08 MiB), each
#         step has its update (the failed forward left the hooks' ranges open: steps 4-6 were
#         read as step 3's forward), and only the dropped attempts' inputs are "other" (every
#         activation and temporary freed after the first OOM was, as if the run had stopped).
#   oomretrylast  the same with the 32768-row attempt in the last (6th) step: the run did not stop
#         at its OOM (the step ran again and reached its update; it was said to stop there, and
#         what was alive at the OOM was "other").
import contextlib
import sys
import torch
import torch.nn as nn
import gpumem

torch.manual_seed(0)
kind = sys.argv[1]
if kind == "val":
    enc = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).cuda()
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-3)
    kept = []
    for step in range(4):
        kept.append(torch.empty(1 << 20, dtype=torch.uint8, device="cuda"))
        x = torch.randn(512, 256, device="cuda")
        opt.zero_grad()
        enc(x).square().mean().backward()
        opt.step()
    xv = torch.randn(2048, 256, device="cuda")
    val_loss = enc(xv).square().mean()  # no no_grad: its activations stay with the loss
elif kind == "mlp":
    blocks = [nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512)) for _ in range(4)]
    model = nn.Sequential(*blocks).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        x = torch.randn(8192, 512, device="cuda")
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
elif kind == "oom":
    scratch = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")  # the scratch line
    del scratch
    acts = []
    for i in range(7):
        acts.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))  # the acts line
    try:
        big = torch.empty(768 << 20, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        print("out of memory, as meant")
elif kind in ("oomfirst", "oomlater"):
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    try:
        for step in range(4):
            rows = 1 << 15 if kind == "oomfirst" or step == 2 else 256
            x = torch.randn(rows, 1024, device="cuda")  # the input line
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    except torch.OutOfMemoryError:
        print("out of memory, as meant")
elif kind in ("evalranged", "evalhooks"):
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    peaks = []
    for step in range(4):
        torch.cuda.reset_peak_memory_stats()
        with gpumem.range("step %d" % (step + 1)) if kind == "evalranged" else contextlib.nullcontext():
            x = torch.randn(512, 256, device="cuda")
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        peaks.append(torch.cuda.max_memory_allocated())
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        preds = model(torch.randn(16384, 256, device="cuda"))  # the eval line
    peaks.append(torch.cuda.max_memory_allocated())
    print("peaks", ",".join(map(str, peaks)))
elif kind in ("oomretry", "oomretrylast"):
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    peaks = []
    for step in range(6):
        rows = 1 << 15 if step == (2 if kind == "oomretry" else 5) else 256
        while True:
            torch.cuda.reset_peak_memory_stats()
            try:
                x = torch.randn(rows, 1024, device="cuda")  # the input line
                opt.zero_grad()
                model(x).square().mean().backward()
                opt.step()
                break
            except torch.OutOfMemoryError:
                x = None
                rows //= 2
        peaks.append(torch.cuda.max_memory_allocated())
    print("peaks", ",".join(map(str, peaks)))
torch.cuda.synchronize()
