#!/usr/bin/env python3
"""train_gpt2.py — GPT-2 in plain PyTorch: the program gpumem's PyTorch checks run.

Written for memory analysis, not for learning: the inputs are random token ids (no data files),
and on the virtual GPU (sim/README.md, "PyTorch on the virtual GPU") the kernels are skipped, so
the losses are meaningless there while every allocation is PyTorch's real one.

Model (GPT-2, Radford et al. 2019): token + position embeddings, n_layer blocks of
LayerNorm -> causal self-attention (F.scaled_dot_product_attention) -> residual,
LayerNorm -> MLP (Linear 4C, GELU tanh, Linear C) -> residual, a final LayerNorm and the
language-model head tied to the token embedding. AdamW, cross-entropy.

Techniques, one flag each: --checkpoint (torch.utils.checkpoint per block), --accum K (K
micro-batches per optimizer step), --set-to-none (zero_grad(set_to_none=True); the default here
keeps gradient buffers: zero_grad(set_to_none=False)), --autocast bf16, --offload
(torch.autograd.graph.save_on_cpu: saved activations go to pinned host memory), --leak (a planted
leak: one tensor per step is kept, at the line marked PLANTED LEAK), --seq-jitter (each step draws
its sequence length from [T/4, T] with the seed: the variable shapes that fragment a caching
allocator).

Sharding without N GPUs: --fsdp N runs FSDP2 (fully_shard on every block, then on the model) as
rank 0 of N over torch's fake process group (torch.testing._internal.distributed.fake_pg): one
process, every collective a no-op, every allocation the one a rank of N makes. --fsdp-reshard 0
keeps the gathered parameters from the forward to the backward (SHARD_GRAD_OP), --fsdp-offload
puts the shards on the host (CPUOffloadPolicy).

For the checks against PyTorch's own allocator: --history FILE records PyTorch's memory history
(torch.cuda.memory._record_memory_history, Python stacks) and dumps it with _dump_snapshot at the
end; --memory-fraction F calls torch.cuda.set_per_process_memory_fraction(F) first; --segments
prints the segments of torch.cuda.memory_snapshot() at the end ("segments N" then their sizes).

At exit it prints, one per line: max_memory_allocated N, max_memory_reserved N, requested_peak N
(memory_stats()["requested_bytes.all.peak"]) — unless --no-stats (gpumem's pluggable allocator
answers them since 2026-12-07, tests/torch/torch_stats.sh; before, torch threw on them, and the
tests that record under --allocator gpumem passed --no-stats; they no longer do).

cuDNN's attention is turned off (torch.backends.cuda.enable_cudnn_sdp(False)): its workspace
comes from the real engine, which the virtual GPU does not have; on a GPU the same flag keeps
the two comparable.

Usage: train_gpt2.py [--model tiny|small|gpt2|gpt2-medium|gpt2-large|gpt2-xl] [-B 4] [-T 64]
                     [--steps 3] [--seed 1337] [flags above]
"""
import argparse
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

# name: (n_layer, n_head, n_embd, vocab_size, block_size)
MODELS = {
    "tiny": (2, 2, 64, 512, 256),
    # two layers, GPT-2's vocabulary and context: few ops, GPT-2-sized logits (the allocations
    # past 128 MiB that max_split_size_mb and roundup_power2_divisions act on)
    "small": (2, 4, 256, 50257, 1024),
    "gpt2": (12, 12, 768, 50257, 1024),
    "gpt2-medium": (24, 16, 1024, 50257, 1024),
    "gpt2-large": (36, 20, 1280, 50257, 1024),
    "gpt2-xl": (48, 25, 1600, 50257, 1024),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)  # (C) -> (3C): q, k, v
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):  # x: (B, T, C)
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # each (B, T, C)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)  # (C) -> (4C)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):  # (B, T, C) -> (B, T, C)
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, vocab_size, block_size, checkpoint=False):
        super().__init__()
        self.block_size = block_size
        self.checkpoint = checkpoint
        self.wte = nn.Embedding(vocab_size, n_embd)  # (V, C)
        self.wpe = nn.Embedding(block_size, n_embd)  # (maxT, C)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        # tied embeddings: the head's own weight is never allocated (meta), the token
        # embedding's takes its place
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False, device="meta")
        self.lm_head.weight = self.wte.weight
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets):  # idx, targets: (B, T) token ids
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)  # (T)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, C)
        for block in self.h:
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default="tiny")
    p.add_argument("-B", type=int, default=4, help="micro-batch size")
    p.add_argument("-T", type=int, default=64, help="sequence length")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps")
    p.add_argument("--accum", type=int, default=1, metavar="K", help="micro-batches per step")
    p.add_argument("--checkpoint", action="store_true", help="torch.utils.checkpoint per block")
    p.add_argument("--set-to-none", action="store_true", help="zero_grad(set_to_none=True)")
    p.add_argument("--autocast", choices=["bf16"], help="torch.autocast with bfloat16")
    p.add_argument("--offload", action="store_true",
                   help="torch.autograd.graph.save_on_cpu(pin_memory=True)")
    p.add_argument("--leak", action="store_true", help="keep one tensor per step (a planted leak)")
    p.add_argument("--seq-jitter", action="store_true",
                   help="a sequence length per step, drawn from [T/4, T] (seeded)")
    p.add_argument("--history", metavar="FILE",
                   help="record PyTorch's memory history and _dump_snapshot it to FILE at the end")
    p.add_argument("--memory-fraction", type=float, metavar="F",
                   help="torch.cuda.set_per_process_memory_fraction(F) before the model is made")
    p.add_argument("--segments", action="store_true",
                   help="print the segment sizes of torch.cuda.memory_snapshot() at the end")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--profile-categories", metavar="FILE",
                   help="run under torch.profiler (CPU activity, profile_memory) and write its memory "
                        "profiler's category of every CUDA allocation to FILE (JSON)")
    p.add_argument("--fsdp", type=int, metavar="N",
                   help="FSDP2 (torch.distributed.fsdp.fully_shard on every block, then on the "
                        "model) as rank 0 of N, over torch's fake process group: one process "
                        "allocates what each of N ranks would (the collectives move nothing)")
    p.add_argument("--fsdp-reshard", type=int, choices=[0, 1], default=1,
                   help="reshard_after_forward: 1 FULL_SHARD (ZeRO-3, the default), "
                        "0 SHARD_GRAD_OP (ZeRO-2)")
    p.add_argument("--fsdp-offload", action="store_true",
                   help="CPUOffloadPolicy(pin_memory=True): the parameter shards, their gradients "
                        "and the optimizer state in host memory")
    p.add_argument("--no-stats", action="store_true",
                   help="print no torch.cuda memory statistics")
    a = p.parse_args(argv)
    if a.T > MODELS[a.model][4]:
        p.error("-T %d is longer than the model's block size %d" % (a.T, MODELS[a.model][4]))
    if min(a.B, a.T, a.steps, a.accum) < 1:
        p.error("-B, -T, --steps and --accum must be at least 1")
    if a.fsdp is not None and a.fsdp < 1:
        p.error("--fsdp N takes N >= 1 ranks")
    if a.fsdp is None and (a.fsdp_offload or a.fsdp_reshard != 1):
        p.error("--fsdp-offload and --fsdp-reshard need --fsdp N")
    return a


def write_profile_categories(prof, path):
    """torch's memory profiler (torch/profiler/_memory_profiler.py) on this run, written for
    tests/torch/torch_categories.sh: "allocs", every CUDA allocation event in order
    ([time_ns, ptr, bytes (negative: a free), tensor id or null]), and "versions", each tensor
    version's category ([time_ns, tensor id, version, category or null]) from its creation
    (version 0) and each in-place change."""
    import json
    from torch._C._profiler import _EventType
    from torch.profiler._memory_profiler import Action, TensorKey

    mp = prof._memory_profile()
    allocs = []
    for ev in mp._op_tree.dfs():
        if ev.typed[0] != _EventType.Allocation:
            continue
        f = ev.typed[1]
        if f.device.type != "cuda":
            continue
        key = TensorKey.from_allocation(f)
        allocs.append([ev.start_time_ns, f.ptr, f.alloc_size, key.id if key else None])
    allocs.sort(key=lambda a: a[0])
    versions = []
    for t, action, (key, version), _ in mp.timeline:
        if not isinstance(key, TensorKey) or key.device.type != "cuda":
            continue
        if action in (Action.CREATE, Action.PREEXISTING):
            v = version
        elif action == Action.INCREMENT_VERSION:
            v = version + 1
        else:
            continue
        c = mp._categories.get(key, v)
        versions.append([t, key.id, v, c.name if c else None])
    with open(path, "w") as f:
        json.dump({"allocs": allocs, "versions": versions}, f)


def fsdp_wrap(model, args):
    """FSDP2 on rank 0 of args.fsdp over torch's fake process group (no other process: every
    collective returns at once and moves nothing, while each allocation is the real one of a
    rank of N): fully_shard on every block of model.h, then on the model (the embeddings, the
    final LayerNorm and the tied head are the root's unit)."""
    import torch.distributed as dist
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group("fake", rank=0, world_size=args.fsdp, store=FakeStore())
    kw = dict(reshard_after_forward=bool(args.fsdp_reshard),
              offload_policy=CPUOffloadPolicy(pin_memory=True) if args.fsdp_offload else OffloadPolicy())
    for block in model.h:
        fully_shard(block, **kw)
    fully_shard(model, **kw)


def main(argv):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("train_gpt2.py: no CUDA device", file=sys.stderr)
        return 77
    torch.backends.cuda.enable_cudnn_sdp(False)
    torch.manual_seed(args.seed)
    dev = torch.device("cuda")
    if args.memory_fraction is not None:
        torch.cuda.set_per_process_memory_fraction(args.memory_fraction)
    if args.history:
        torch.cuda.memory._record_memory_history(max_entries=10_000_000, stacks="python")
    n_layer, n_head, n_embd, vocab, block = MODELS[args.model]
    prof = None
    if args.profile_categories:
        # the virtual GPU has no CUPTI: the CPU activity with profile_memory sees every
        # allocation of the caching allocator (from the model's creation on, so the parameters
        # too), and the memory profiler categorises them from the ops
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      profile_memory=True, record_shapes=True, with_stack=True)
        prof.__enter__()
    with dev:  # parameters are made on the device (no host copy of a 1.5B model)
        model = GPT(n_layer, n_head, n_embd, vocab, block, checkpoint=args.checkpoint)
    if args.fsdp:
        fsdp_wrap(model, args)
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    leaked = []
    print("model %s: %d parameters, B %d, T %d, accum %d, %d steps on %s" % (
        args.model, nparams, args.B, args.T, args.accum, args.steps,
        torch.cuda.get_device_name()), flush=True)
    for step in range(args.steps):
        t0 = time.perf_counter()
        T = args.T
        if args.seq_jitter:
            T = int(torch.randint(max(1, args.T // 4), args.T + 1, (1,), generator=gen))
        for _ in range(args.accum):
            # random token ids, made on the host and copied over as a data loader would
            x = torch.randint(0, vocab, (args.B, T + 1), generator=gen).to(dev)
            idx, targets = x[:, :-1], x[:, 1:]
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
                if args.offload:
                    with torch.autograd.graph.save_on_cpu(pin_memory=True):
                        logits, loss = model(idx, targets)
                else:
                    logits, loss = model(idx, targets)
            (loss / args.accum).backward()
            if args.leak:
                leaked.append(logits.detach().clone())  # PLANTED LEAK: one (B, T, V) tensor kept per step
            del logits
        opt.step()
        opt.zero_grad(set_to_none=args.set_to_none)
        lossf = loss.item()  # synchronizes: the step's time is its real time
        dt = time.perf_counter() - t0
        print("step %d/%d loss %.4f time %.3f ms" % (step + 1, args.steps,
              lossf if math.isfinite(lossf) else float("nan"), dt * 1e3), flush=True)
    if prof is not None:
        prof.__exit__(None, None, None)
        write_profile_categories(prof, args.profile_categories)
    if not args.no_stats:
        print("max_memory_allocated %d" % torch.cuda.max_memory_allocated())
        print("max_memory_reserved %d" % torch.cuda.max_memory_reserved())
        print("requested_peak %d" % torch.cuda.memory_stats()["requested_bytes.all.peak"])
    if args.segments:
        segs = torch.cuda.memory_snapshot()
        print("segments %d" % len(segs))
        print("segment_sizes %s" % ",".join(str(s["total_size"]) for s in
                                           sorted(segs, key=lambda s: s["address"])))
    if args.history:
        torch.cuda.memory._dump_snapshot(args.history)
    return 0


def drain_autograd_thread():
    """Lets autograd's CUDA device thread finish with the last backward before the interpreter
    finalizes. PyTorch 2.14's backward() stashes a Python object (the contextvars context) in the
    thread-local state each GraphTask copies; the device thread can drop the last reference to a
    finished GraphTask after backward() has returned, and if the program has reached interpreter
    finalization by then, the decref's GIL acquisition ends the thread with pthread_exit, whose
    forced unwind through PyTorch's noexcept destructor calls std::terminate ("terminate called
    without an active exception", exit 134; pytorch/pytorch#38228 is that class). A backward run
    through the engine directly (no object stashed) is queued behind the device thread's current
    work: when it returns, the earlier GraphTask is gone (its decref took the GIL this thread
    released while waiting), and its own GraphTask holds no Python object. Its tensors are empty
    CUDA tensors: the backward runs on the device thread all the same, and nothing is allocated,
    so recordings and PyTorch's own statistics see nothing of it (torch_categories.sh compares
    the profiler's allocations with gpumem's, one for one)."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    x = torch.zeros(0, device="cuda", requires_grad=True)
    y = x * 2
    torch.autograd.Variable._execution_engine.run_backward(
        (y,), (torch.zeros(0, device="cuda"),), False, False, (), allow_unreachable=True,
        accumulate_grad=True)


if __name__ == "__main__":
    rc = main(sys.argv[1:])
    drain_autograd_thread()  # PyTorch's exit abort (above): struck torch_gpt2.sh's plain run once
    sys.exit(rc)
