"""PyTorch under gpumem, three ways (GPU only; driven by tests/gpu/pytorch_three_ways.sh).

    python3 pytorch_three_ways.py MODE --steps N [--lib libgpumem.so] [--snapshot FILE]

MODE plain: PyTorch's own caching allocator; preload: run under LD_PRELOAD=libgpumem.so with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 (the shell sets both); pluggable: gpumem as PyTorch's allocator
through torch.cuda.memory.CUDAPluggableAllocator (gpumem_torch_malloc / gpumem_torch_free).
Trains a small GPT-style model, deterministic, and prints one line per step ("loss N X") and
"max_memory_allocated N" at the end; --snapshot writes torch.cuda.memory._dump_snapshot.
"""
import argparse
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        a = self.ln1(x)
        x = x + self.attn(a, a, a, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=256, d=256, h=4, layers=4, t=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(t, d)
        self.blocks = nn.ModuleList(Block(d, h) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.triu(torch.ones(t, t, device=idx.device, dtype=torch.bool), 1)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["plain", "preload", "pluggable"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lib", default="")
    ap.add_argument("--snapshot", default="")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch", file=sys.stderr)
        return 77
    if a.mode == "pluggable":
        alloc = torch.cuda.memory.CUDAPluggableAllocator(a.lib, "gpumem_torch_malloc", "gpumem_torch_free")
        torch.cuda.memory.change_current_allocator(alloc)
    if a.snapshot:
        torch.cuda.memory._record_memory_history(max_entries=100000)
    torch.manual_seed(1234)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator(device="cpu").manual_seed(99)
    for step in range(a.steps):
        idx = torch.randint(0, 256, (8, 128), generator=g).to(dev)
        logits = model(idx[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 256), idx[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"loss {step} {loss.item():.9f}", flush=True)
    torch.cuda.synchronize()
    if a.mode != "pluggable":
        print(f"max_memory_allocated {torch.cuda.max_memory_allocated()}")
    if a.snapshot:
        torch.cuda.memory._dump_snapshot(a.snapshot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
