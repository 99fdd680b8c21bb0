#!/usr/bin/env python3
"""torch_graph_release.py — a CUDA graph's private pool given back, then more memory asked for.

A small MLP's forward and backward is captured with torch.cuda.graph (its activations and
gradients: the graph's private pool, about 40 MiB at the default sizes) and launched a few
times; then the graph and its static tensors are deleted, torch.cuda.empty_cache() is called
(PyTorch frees a destroyed graph's pool there; gpumem as PyTorch's allocator gives a capture's
pool back when the graph is destroyed), and the program allocates more than the pool held, in
the default pool. The run's peak reserved is therefore where the graph lived or where the later
tensors live, never both at once: a replay that keeps the pool's memory to the end (no end of the
pool in its trace) predicts the pool plus the later tensors.

--order says what goes first: "tensors" (the default: the static output and the gradients, then
the graph), "graph" (the graph is destroyed while its tensors live; they are freed after it), or
"shared" (a second graph is captured into the first's pool, torch.cuda.graph(pool=g.pool()); both
graphs are destroyed, then the tensors of both). Either way the pool is free of tensors and graphs
before torch.cuda.empty_cache(), so every allocator gives it back there or before.

Prints max_memory_reserved (PyTorch's allocator) and "graph release ok", exit 0.
"""
import argparse
import gc
import sys

import torch


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--after-mib", type=int, default=96, help="MiB allocated after the graph is gone")
    p.add_argument("--order", choices=("tensors", "graph", "shared"), default="tensors",
                   help="what goes first: the graph's tensors, or the graph(s)")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("torch_graph_release.py: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(a.width, a.width), torch.nn.ReLU(),
                                torch.nn.Linear(a.width, a.width), torch.nn.ReLU(),
                                torch.nn.Linear(a.width, a.width)).to(dev)
    x = torch.zeros(a.batch, a.width, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as PyTorch's docs do
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            model(x).sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    model.zero_grad(set_to_none=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
        y.sum().backward()
    graphs, outs = [g], [y]
    if a.order == "shared":  # a second graph in the first one's pool
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2, pool=g.pool()):
            outs.append(model(x) * 2)
        graphs.append(g2)
        del g2
    del g, y
    for _ in range(3):
        for i in range(len(graphs)):  # no loop variable left holding a graph
            graphs[i].replay()
    torch.cuda.synchronize()

    def tensors_go():  # the static outputs, and the gradients made in the pool
        outs.clear()
        model.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.synchronize()
    if a.order == "tensors":
        tensors_go()
    graphs.clear()  # the graphs (CUDAGraph's destructor: its executable graph and the pool's use)
    gc.collect()
    if a.order != "tensors":
        tensors_go()
    torch.cuda.empty_cache()
    later = [torch.empty(a.after_mib << 20, dtype=torch.uint8, device=dev)]
    later.append(torch.empty(a.after_mib << 19, dtype=torch.uint8, device=dev))
    torch.cuda.synchronize()
    del later
    try:  # PyTorch's allocator only: a pluggable one (gpumem's) has no device stats
        print("max_memory_reserved %d" % torch.cuda.max_memory_reserved(), flush=True)
    except RuntimeError:
        pass
    print("graph release ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
