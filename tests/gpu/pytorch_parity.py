#!/usr/bin/env python3
"""pytorch_parity.py — the `pytorch` presets against PyTorch itself (GPU only).

A small GPT-style model trains for a few steps under torch.cuda.memory._record_memory_history(),
once with the default allocator config and once with expandable_segments:True. Each run's
memory snapshot is turned into a gpumem-replay trace and replayed under the matching preset
(`pytorch`, `pytorch-expandable`); the replayed peak reserved must be within 1% of
torch.cuda.max_memory_reserved() of the run.

The snapshot becomes a trace through `gpumem import` when the gpumem command has it (the
snapshot importer; then `gpumem export --format trace`), otherwise through the converter below,
which the script says it uses. The converter reads the snapshot's device_traces:
  alloc            -> a <id> <requested size> <stream>
  free_requested   -> f <id>, when free_completed follows at once (no record_stream uses);
                      otherwise rs <id> <another stream>, f <id>, and fc <id> at its
                      free_completed: the replay holds the block back exactly as long as
                      PyTorch's stream-use events did.
  oom              -> ao <id> <requested size> <stream>: the request that failed, tried again
                      by the replay (alloc/README.md), as `gpumem export --format trace` writes
                      each recorded OOM: under the run's own cap it fails there again, where it
                      fits it stays live to the end.
Segment events and snapshots are not replayed: the replay makes its own segments.

Usage:
  pytorch_parity.py run --replay build/alloc/gpumem-replay [--gpumem build/gpumem] [--steps N]
  pytorch_parity.py train --snapshot OUT.pickle          (child: one training run)
  pytorch_parity.py convert SNAPSHOT.pickle TRACE
  pytorch_parity.py selftest --replay build/alloc/gpumem-replay   (no GPU, no torch: make test)
Exit status: 0 all within 1%, 1 a mismatch or an error, 77 no GPU or no PyTorch.
"""
import os
import pickle
import subprocess
import sys
import tempfile

TOLERANCE = 0.01
CONFIGS = [("", "pytorch"), ("expandable_segments:True", "pytorch-expandable")]


def snapshot_to_trace(snap, device=0):
    """The trace lines (without newlines) for one device of a PyTorch memory snapshot, and a
    count of what was left out (frees of allocations made before recording started)."""
    traces = snap.get("device_traces", [])
    entries = traces[device] if device < len(traces) else []
    lines, live, held = [], {}, {}
    next_id, skipped = 1, 0
    pending = None  # (id, stream) of a free_requested not yet known to complete at once

    def settle(entry):
        nonlocal pending
        if pending is None:
            return
        pid, pstream, paddr = pending
        pending = None
        if entry is not None and entry.get("action") == "free_completed" and entry.get("addr") == paddr:
            lines.append("f %d" % pid)
            return True
        # held back by stream uses: any stream other than the allocation's marks the use
        lines.append("rs %d %d" % (pid, pstream + 1 if pstream != (1 << 64) - 1 else 0))
        lines.append("f %d" % pid)
        held[paddr] = pid
        return False

    for e in entries:
        act = e.get("action")
        if settle(e):
            continue
        addr, size, stream = e.get("addr", 0), e.get("size", 0), e.get("stream", 0) or 0
        if act == "alloc":
            live[addr] = (next_id, stream)
            lines.append("a %d %d %d" % (next_id, size, stream))
            next_id += 1
        elif act == "free_requested":
            got = live.pop(addr, None)
            if got is None:
                skipped += 1
                continue
            pending = (got[0], got[1], addr)
        elif act == "oom":  # PyTorch's entry: addr 0, size = the request, device_free beside
            lines.append("ao %d %d %d" % (next_id, size, stream))
            next_id += 1
        elif act == "free_completed":
            hid = held.pop(addr, None)
            if hid is not None:
                lines.append("fc %d" % hid)
    settle(None)
    return lines, skipped


def convert(snap_path, trace_path):
    with open(snap_path, "rb") as f:
        snap = pickle.load(f)
    lines, skipped = snapshot_to_trace(snap)
    with open(trace_path, "w") as f:
        f.write("# from %s (PyTorch memory snapshot)\n" % os.path.basename(snap_path))
        for line in lines:
            f.write(line + "\n")
    return len(lines), skipped


def replay_peak(replay, preset, trace, capacity=None):
    cmd = [replay, "--preset", preset, trace]
    if capacity:
        cmd[1:1] = ["--capacity", str(capacity)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise RuntimeError("%s failed: %s" % (" ".join(cmd), out.stderr.strip()))
    fields = dict(kv.split("=", 1) for kv in out.stdout.split() if "=" in kv)
    return int(fields["peak_reserved"]), fields


# ---- the training run (child process: the allocator config is read at CUDA init) --------------

def train(snapshot_path, steps):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev = torch.device("cuda")
    try:
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    except TypeError:  # older signature
        torch.cuda.memory._record_memory_history(True, trace_alloc_max_entries=2_000_000)

    vocab, d, layers, heads, batch, tmax = 4096, 384, 6, 6, 8, 512

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (y.view(b, t, heads, d // heads).transpose(1, 2) for y in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(tmax, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            t = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(1)
    for step in range(steps):
        # a sequence length per step: the case that fragments a caching allocator
        t = int(torch.randint(tmax // 4, tmax + 1, (1,), generator=gen))
        idx = torch.randint(0, vocab, (batch, t + 1), generator=gen).to(dev)
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), idx[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    with open(snapshot_path, "wb") as f:
        pickle.dump(snap, f)
    free, total = torch.cuda.mem_get_info()
    print("max_memory_reserved=%d total=%d torch=%s" % (torch.cuda.max_memory_reserved(), total,
                                                          torch.__version__))


def gpumem_import(gpumem, snap, trace, tmp):
    """The snapshot importer, where the gpumem command has one: True if it produced the trace."""
    if not gpumem or not os.access(gpumem, os.X_OK):
        return False
    probe = subprocess.run([gpumem, "import", "--help"], capture_output=True, text=True)
    if probe.returncode != 0:
        return False
    db = os.path.join(tmp, os.path.basename(snap) + ".db")
    r = subprocess.run([gpumem, "import", snap, "-o", db], capture_output=True, text=True)
    if r.returncode != 0:
        print("note: gpumem import failed (%s); using the built-in converter" % r.stderr.strip())
        return False
    with open(trace, "w") as f:
        r = subprocess.run([gpumem, "export", "--format", "trace", db], stdout=f, text=True)
    return r.returncode == 0


def run(replay, gpumem, steps):
    try:
        import torch  # noqa: F401
    except ImportError:
        print("pytorch_parity: PyTorch is not installed; skipping", file=sys.stderr)
        return 77
    import torch
    if not torch.cuda.is_available():
        print("pytorch_parity: no CUDA device; skipping", file=sys.stderr)
        return 77
    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        for conf, preset in CONFIGS:
            snap = os.path.join(tmp, (preset + ".pickle"))
            env = dict(os.environ)
            env.pop("PYTORCH_ALLOC_CONF", None)
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
            child = subprocess.run([sys.executable, __file__, "train", "--snapshot", snap,
                                    "--steps", str(steps)], env=env, capture_output=True, text=True)
            if child.returncode != 0:
                print("FAIL: training under '%s': %s" % (conf, child.stderr.strip()[-2000:]))
                status = 1
                continue
            info = dict(kv.split("=", 1) for kv in child.stdout.split() if "=" in kv)
            torch_peak, total = int(info["max_memory_reserved"]), int(info["total"])
            trace = os.path.join(tmp, preset + ".trace")
            if gpumem_import(gpumem, snap, trace, tmp):
                how = "gpumem import"
            else:
                n, skipped = convert(snap, trace)
                how = "the built-in snapshot converter (no `gpumem import` yet): %d lines" % n
                if skipped:
                    how += ", %d frees of allocations made before recording left out" % skipped
            peak, fields = replay_peak(replay, preset, trace, capacity=total)
            ratio = peak / torch_peak if torch_peak else float("nan")
            ok = torch_peak and abs(ratio - 1.0) <= TOLERANCE
            print("%s: torch %s, config '%s' -> preset %s via %s" % ("ok" if ok else "FAIL",
                                                                      info.get("torch"), conf,
                                                                      preset, how))
            print("  torch.cuda.max_memory_reserved()=%d replayed peak_reserved=%d ratio=%.4f "
                  "(events=%s held_frees=%s)" % (torch_peak, peak, ratio, fields.get("events"),
                                                 fields.get("held_frees", "0")))
            print("BENCH alloc.parity.%s.reserved_ratio %.4f x" % (preset, ratio))
            if not ok:
                status = 1
    return status


# ---- selftest: the converter on a hand-made snapshot, replayed (no GPU, no torch) -------------

def selftest(replay):
    mib = 1 << 20
    e = lambda act, addr, size, stream=0: {"action": act, "addr": addr, "size": size,
                                           "stream": stream}
    snap = {"segments": [], "device_traces": [[
        e("free_requested", 0x999, 512),  # before recording: left out
        e("alloc", 0x1000, 40 * mib),
        e("segment_alloc", 0x1000, 40 * mib),
        e("free_requested", 0x1000, 40 * mib),  # used on another stream: completes later
        e("alloc", 0x9000000, 40 * mib),  # cannot reuse it yet
        e("free_completed", 0x1000, 40 * mib),
        e("alloc", 0x1000, 40 * mib),  # now it can
        e("free_requested", 0x1000, 40 * mib),
        e("free_completed", 0x1000, 40 * mib),
    ]]}
    lines, skipped = snapshot_to_trace(snap)
    want = ["a 1 41943040 0", "rs 1 1", "f 1", "a 2 41943040 0", "fc 1", "a 3 41943040 0", "f 3"]
    if lines != want or skipped != 1:
        print("FAIL: converter gave %r (skipped %d), expected %r" % (lines, skipped, want))
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.trace")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        peak, fields = replay_peak(replay, "pytorch", path)
        if peak != 80 * mib or fields.get("held_frees") != "1":
            print("FAIL: replay of the converted snapshot: peak_reserved=%d held_frees=%s, "
                  "expected 83886080 and 1" % (peak, fields.get("held_frees")))
            return 1
    print("ok: snapshot converter and replay (held free, exact completion)")
    return 0


def main(argv):
    args = argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    opt = lambda name, default=None: args[args.index(name) + 1] if name in args else default
    cmd = args[0]
    if cmd == "train":
        train(opt("--snapshot"), int(opt("--steps", "12")))
        return 0
    if cmd == "convert" and len(args) == 3:
        n, skipped = convert(args[1], args[2])
        print("%d lines, %d frees left out" % (n, skipped))
        return 0
    if cmd == "selftest":
        return selftest(opt("--replay", "build/alloc/gpumem-replay"))
    if cmd == "run":
        return run(opt("--replay", "build/alloc/gpumem-replay"), opt("--gpumem", "build/gpumem"),
                   int(opt("--steps", "12")))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
