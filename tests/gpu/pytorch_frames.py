"""The trainer of tests/gpu/pytorch_three_ways.py (its GPT model) under `gpumem record`, for the
Python-frames check on a real GPU (tests/gpu/pytorch_frames.sh, issue 21).

usage: python3 pytorch_frames.py [--steps N] [--nvtx]

  --nvtx  run the steps under torch.autograd.profiler.emit_nvtx(): one NVTX range per op, which
          gpumem takes as the innermost phase ("by op")
"""
import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from pytorch_three_ways import GPT  # noqa: E402


def train_step(model, opt, idx):
    logits = model(idx[:, :-1])  # SITE:forward
    loss = nn.functional.cross_entropy(logits.reshape(-1, 256), idx[:, 1:].reshape(-1))  # SITE:loss
    opt.zero_grad(set_to_none=True)
    loss.backward()  # SITE:backward
    opt.step()  # SITE:opt_step
    return loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--nvtx", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch", file=sys.stderr)
        return 77
    torch.manual_seed(1234)
    dev = torch.device("cuda")
    model = GPT().to(dev)  # SITE:model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator(device="cpu").manual_seed(99)
    ctx = torch.autograd.profiler.emit_nvtx() if a.nvtx else contextlib.nullcontext()
    with ctx:
        for step in range(a.steps):
            idx = torch.randint(0, 256, (8, 128), generator=g).to(dev)
            loss = train_step(model, opt, idx)  # SITE:step
            print(f"loss {step} {loss.item():.6f}", flush=True)
    torch.cuda.synchronize()
    print("pytorch_frames: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
