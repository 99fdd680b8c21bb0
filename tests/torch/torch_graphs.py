#!/usr/bin/env python3
"""torch_graphs.py — CUDA graph capture of PyTorch on the virtual GPU, with a host-side canary.

Two captures, both relaunched --replays times (default 10) with allocations between launches:

  step       the GPT-2 training step of train_gpt2.py (tiny model, static inputs), captured
             whole as PyTorch's docs show ("whole-network capture"): warm-up on a side stream,
             zero_grad(set_to_none=True), then forward, backward and a capturable AdamW step
             inside torch.cuda.graph;
  callables  torch.cuda.make_graphed_callables on one GPT-2 Block (a forward graph and a
             backward graph sharing a pool), called like the block, backward through it.

The canary. On the virtual GPU kernels are skipped, so no tensor value is computed; copies and
memsets are executed, also when a graph replays them. Each capture therefore also copies
(cudaMemcpyAsync device to device: `Tensor.clone` of a contiguous tensor) a static source
`src` into tensors the capture allocates: "probes" of several sizes (512 B to 3 MiB, PyTorch's
small and large pools), some freed inside the capture (the graph's temporaries: their memory
is written at every replay and must stay the graph's), some kept (static outputs). In the
callables case a probe is also written by the backward graph. Before each launch `src` gets
the round's byte pattern (a host-to-device copy). Between launches the script allocates,
alternately on the default stream and on the stream the captures ran on (torch.cuda.graph's
default capture stream: per-stream pools would otherwise keep the two apart whatever became
of the graphs' memory): canary tensors of the probes' and the model's sizes, each filled from
the host with its own pattern, and an eager forward and backward of the model (every size the
graph's activations have, on a second copy of the model); half the older canaries are freed
each round.
Checked, each round:
  a. every kept probe holds the round's pattern after the launch: the replay ran its copies,
     at the captured addresses (without this, the checks below could pass vacuously);
  b. every live canary still holds its own bytes after the launch: no copy node of the graph
     wrote into memory handed out between launches;
  c. every kept probe still holds the pattern after the canaries were written: no canary was
     handed the memory of a static output;
  d. no canary's address range overlaps a probe's (temporaries included): an allocator that
     handed out a graph temporary's memory would be caught here even before a replay;
  e. (PyTorch's own allocator only) no canary lies in a segment of a private pool
     (torch.cuda.memory_snapshot(), segment_pool_id != (0, 0)): every byte of the graphs'
     memory, kernel-written included. gpumem as PyTorch's allocator answers no snapshot:
     tests/torch/torch_graphs.sh checks the same from gpumem's recording instead.
What it cannot catch: a graph write into foreign memory made by a kernel (skipped here, so
never executed) outside the probes' addresses, except through (e) and the recording's check;
reads of memory that changed under the graph (values are not computed); and corruption that
a later write repairs before the check (each check runs right after the launch or the write
it guards).

--sabotage N:HOW[,N:HOW...] breaks the property in round N (1-based), to show that the checks
are not vacuous (exit 3 when they find it): `temp` writes canary bytes straight into the memory of a
graph temporary (what an allocator that handed it out would cause) and registers it as a
canary: (b), (d) and (e) fail; `static` does the same to a kept probe: (c) fails too; `skip`
launches nothing in round N: (a) fails.

Prints "graphs ok: ..." and exits 0, or one "FAIL: ..." line per failed check and exits 1.
"""
import argparse
import ctypes
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_gpt2 import GPT, MODELS, Block, drain_autograd_thread  # noqa: E402

PROBE_SIZES = (512, 4000, 65536, (1 << 20) + 512, 3 << 20)  # small and large pools
FAILS = []


def fail(msg):
    FAILS.append(msg)
    print("FAIL: " + msg, flush=True)


_libc = ctypes.CDLL(None)
_libc.memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]


def same(a, b):
    """two contiguous host tensors hold the same bytes (memcmp: torch.equal is 20x slower here)"""
    return a.numel() == b.numel() and _libc.memcmp(a.data_ptr(), b.data_ptr(), a.numel()) == 0


def pattern(tag, n):
    """n bytes, distinct per tag, never all equal (an unwritten or zeroed tensor differs)"""
    g = torch.Generator().manual_seed(tag)
    return torch.randint(1, 256, (n,), dtype=torch.uint8, generator=g)


class Graphs:
    """What the captures wrote: the probes' ranges, the kept probes (static outputs)."""

    def __init__(self, src):
        self.src = src            # static input: its bytes are copied by the graphs' copy nodes
        self.kept = []            # (tensor, n): static outputs, checked against src's pattern
        self.ranges = []          # (ptr, nbytes, what): every probe, temporaries included

    def probe(self, what, keep):
        for i, n in enumerate(PROBE_SIZES):
            t = self.src[:n].clone()  # a device-to-device memcpy node in the graph
            self.ranges.append((t.data_ptr(), t.numel(), "%s probe %d (%d B)" % (what, i, n)))
            if keep and i % 2 == 0:
                self.kept.append((t, n))
            del t                     # the others are the graph's temporaries


class BwdProbe(torch.autograd.Function):
    """Identity forward; its backward also writes probes (captured into the backward graph)."""
    graphs = None

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        if torch.cuda.is_current_stream_capturing() and BwdProbe.graphs is not None:
            BwdProbe.graphs.probe("callables backward", keep=True)
        return g


class ProbedBlock(nn.Module):
    def __init__(self, block, graphs):
        super().__init__()
        self.block = block
        self.graphs = graphs

    def forward(self, x):
        y = self.block(BwdProbe.apply(x))
        if torch.cuda.is_current_stream_capturing():
            self.graphs.probe("callables forward", keep=True)
        return y


def capture_step(args, dev, graphs):
    n_layer, n_head, n_embd, vocab, block = MODELS["tiny"]
    with dev:
        model = GPT(n_layer, n_head, n_embd, vocab, block)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, capturable=True)
    gen = torch.Generator().manual_seed(1)
    static_idx = torch.randint(0, vocab, (args.B, args.T), generator=gen).to(dev)
    static_tgt = torch.randint(0, vocab, (args.B, args.T), generator=gen).to(dev)
    # warm-up on a side stream (PyTorch's recipe), then capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss = model(static_idx, static_tgt)[1]
            loss.backward()
            opt.step()
        del loss
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = model(static_idx, static_tgt)[1]
        static_loss.backward()
        opt.step()
        graphs.probe("step", keep=True)

    def launch(r):
        x = torch.randint(0, vocab, (args.B, args.T + 1), generator=gen)
        static_idx.copy_(x[:, :-1])  # new data into the static inputs
        static_tgt.copy_(x[:, 1:])
        g.replay()
    return model, g, launch, (static_loss,)


def capture_callables(args, dev, graphs):
    n_embd, n_head = MODELS["tiny"][2], MODELS["tiny"][1]
    with dev:
        blk = ProbedBlock(Block(n_embd, n_head), graphs)
    BwdProbe.graphs = graphs
    sample = torch.zeros(args.B, args.T, n_embd, device=dev, requires_grad=True)
    gblk = torch.cuda.make_graphed_callables(blk, (sample,))
    BwdProbe.graphs = None
    gen = torch.Generator().manual_seed(2)

    def launch(r):
        x = torch.randn(args.B, args.T, n_embd, generator=gen).to(dev).requires_grad_()
        y = gblk(x)            # the forward graph
        y.sum().backward()     # the backward graph (and eager sum's backward)
        assert x.grad is not None and x.grad.shape == x.shape
    return blk, gblk, launch, ()


class Canaries:
    def __init__(self, dev):
        self.dev = dev
        self.live = []   # (tensor, expected host bytes, what)
        self.tag = 1000
        self.bytes_checked = 0

    def add(self, n, what):
        self.tag += 1
        host = pattern(self.tag, n)
        t = host.to(self.dev)  # a host-to-device copy
        self.live.append((t, host, what))

    def check(self, when):
        torch.cuda.synchronize()
        for t, host, what in self.live:
            got = t.cpu()
            self.bytes_checked += got.numel()
            if not same(got, host):
                bad = int((got != host).sum())
                fail("%s: canary %s at 0x%x (%d B) changed: %d bytes differ" % (
                    when, what, t.data_ptr(), host.numel(), bad))

    def churn(self, r, sizes, streams):
        self.live = [c for i, c in enumerate(self.live) if i % 2 == 1]  # free half
        for i, n in enumerate(sizes):
            s = streams[(i + r) % len(streams)]
            with torch.cuda.stream(s):
                self.add(n, "r%d/%d B on %s" % (r, n, "the capture stream" if s is streams[1] else "the default stream"))


def check_kept(graphs, expect, when):
    torch.cuda.synchronize()
    for t, n in graphs.kept:
        if not same(t.cpu(), expect[:n].contiguous()):
            fail("%s: static output at 0x%x (%d B) does not hold the round's pattern" % (
                when, t.data_ptr(), n))


def check_addresses(graphs, canaries, when):
    for t, host, what in canaries.live:
        a, b = t.data_ptr(), t.data_ptr() + host.numel()
        for p, n, pw in graphs.ranges:
            if a < p + n and p < b:
                fail("%s: canary %s [0x%x, 0x%x) overlaps the graph's %s [0x%x, 0x%x)" % (
                    when, what, a, b, pw, p, p + n))


def private_segments():
    """PyTorch's private-pool segments, or None when the allocator keeps no snapshot."""
    try:
        snap = torch.cuda.memory_snapshot()
    except Exception:  # noqa: BLE001 - a pluggable allocator (gpumem's) throws
        return None
    return [(s["address"], s["total_size"], s["segment_pool_id"]) for s in snap
            if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0)]


def check_pools(canaries, when):
    segs = private_segments()
    if segs is None:
        return 0
    for t, host, what in canaries.live:
        a, b = t.data_ptr(), t.data_ptr() + host.numel()
        for p, n, pool in segs:
            if a < p + n and p < b:
                fail("%s: canary %s [0x%x, 0x%x) lies in private pool %s's segment [0x%x, 0x%x)" % (
                    when, what, a, b, tuple(pool), p, p + n))
    return len(segs)


def raw_write(ptr, host):
    """cudaMemcpy into a device address, as an allocator's new owner of it would"""
    rt = ctypes.CDLL(None)
    rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    buf = (ctypes.c_uint8 * host.numel()).from_buffer_copy(bytes(host.tolist()))
    e = rt.cudaMemcpy(ctypes.c_void_p(ptr), buf, host.numel(), 1)  # cudaMemcpyHostToDevice
    if e != 0:
        raise RuntimeError("cudaMemcpy returned %d" % e)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replays", type=int, default=10)
    p.add_argument("-B", type=int, default=2)
    p.add_argument("-T", type=int, default=32)
    p.add_argument("--only", choices=["step", "callables"])
    p.add_argument("--sabotage", metavar="N:HOW[,N:HOW...]", default="",
                   help="HOW: temp, static or skip (see the module's doc)")
    args = p.parse_args(argv)
    sabotage = {}  # round (0-based) -> how
    for item in filter(None, args.sabotage.split(",")):
        n, _, how = item.partition(":")
        if not n.isdigit() or how not in ("temp", "static", "skip") or not 1 <= int(n) < args.replays:
            p.error("--sabotage N:temp|static|skip, N from 1 to --replays - 1")
        sabotage[int(n) - 1] = how
    if not torch.cuda.is_available():
        print("torch_graphs.py: no CUDA device", file=sys.stderr)
        return 77
    torch.backends.cuda.enable_cudnn_sdp(False)
    # the eager copy of the model runs on two streams in turn, on purpose
    torch.autograd.graph.set_warn_on_accumulate_grad_stream_mismatch(False)
    torch.manual_seed(1337)
    dev = torch.device("cuda")
    src = torch.zeros(max(PROBE_SIZES), dtype=torch.uint8, device=dev)
    graphs = Graphs(src)
    cases = []
    if args.only in (None, "step"):
        cases.append(("step",) + capture_step(args, dev, graphs))
    if args.only in (None, "callables"):
        cases.append(("callables",) + capture_callables(args, dev, graphs))
    torch.cuda.synchronize()
    print("captured: %s; %d probes, %d kept (static outputs)" % (
        ", ".join(c[0] for c in cases), len(graphs.ranges), len(graphs.kept)), flush=True)
    n_layer, n_head, n_embd, vocab, _ = MODELS["tiny"]
    with dev:  # a second copy of the model, trained eagerly between launches
        eager = GPT(n_layer, n_head, n_embd, vocab, MODELS["tiny"][4])
    act = [args.B * args.T * n_embd * 4, args.B * args.T * 4 * n_embd * 4, args.B * args.T * vocab * 4]
    canaries = Canaries(dev)
    npools = 0
    launches = 0
    for r in range(args.replays):
        expect = pattern(r + 1, src.numel())
        src.copy_(expect.to(dev))
        for name, _, _, launch, _ in cases:
            if sabotage.get(r) == "skip":
                continue  # sabotage: no launch this round
            launch(r)
            launches += 1
        when = "replay %d" % (r + 1)
        check_kept(graphs, expect, when + " (a)")
        canaries.check(when + " (b)")
        # allocations between launches: canaries of the probes' and activations' sizes, and an
        # eager step of the model outside any graph
        streams = (torch.cuda.current_stream(), torch.cuda.graph.default_capture_stream)
        canaries.churn(r, PROBE_SIZES + tuple(act), streams)
        with torch.cuda.stream(streams[r % 2]):
            idx = torch.randint(0, vocab, (args.B, args.T), device=dev)
            eager(idx, idx)[1].backward()
            eager.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if sabotage.get(r) in ("temp", "static"):
            # what an allocator that handed out the graph's memory would cause: a canary there
            probe = 1 if sabotage[r] == "temp" else 2  # probe 1 a temporary, probe 2 kept
            ptr, n, what = next(x for x in graphs.ranges if " probe %d " % probe in x[2])
            host = pattern(99, n)
            raw_write(ptr, host)
            canaries.live.append((_Alias(ptr, host), host, "SABOTAGE at " + what))
        check_kept(graphs, expect, when + " (c)")
        check_addresses(graphs, canaries, when + " (d)")
        npools = max(npools, check_pools(canaries, when + " (e)"))
        if r == 0:
            segs = private_segments()
            if segs is not None:  # made by the captures, none since: what the report must show
                print("private_pool_reserved %d" % sum(n for _, n, _ in segs), flush=True)
        print("replay %d: %d canaries live" % (r + 1, len(canaries.live)), flush=True)
    torch.cuda.synchronize()
    if FAILS:
        return 3 if sabotage else 1
    print("graphs ok: %d launches, %d canary bytes checked, %d static-output checks, "
          "private pool segments seen by PyTorch: %s" % (
              launches, canaries.bytes_checked, 2 * args.replays * len(graphs.kept),
              npools if private_segments() is not None else "n/a (no snapshot: pluggable allocator)"))
    if private_segments() is not None:  # PyTorch's own figures (a pluggable allocator has none)
        print("max_memory_allocated %d" % torch.cuda.max_memory_allocated())
        print("max_memory_reserved %d" % torch.cuda.max_memory_reserved())
        print("requested_peak %d" % torch.cuda.memory_stats()["requested_bytes.all.peak"])
    return 0


class _Alias:
    """A canary at a raw device address (the sabotage): read back with cudaMemcpy"""

    def __init__(self, ptr, host):
        self.ptr, self.n = ptr, host.numel()

    def data_ptr(self):
        return self.ptr

    def cpu(self):
        rt = ctypes.CDLL(None)
        rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        buf = (ctypes.c_uint8 * self.n)()
        e = rt.cudaMemcpy(buf, ctypes.c_void_p(self.ptr), self.n, 2)  # cudaMemcpyDeviceToHost
        if e != 0:
            raise RuntimeError("cudaMemcpy returned %d" % e)
        return torch.tensor(list(buf), dtype=torch.uint8)


if __name__ == "__main__":
    verdict = main(sys.argv[1:])
    drain_autograd_thread()
    # the verdict, printed before the interpreter and libtorch tear down: torch_graphs.sh tells an
    # abort in that teardown from a failure of the checks by it
    print("exit %d" % verdict, flush=True)
    sys.exit(verdict)
