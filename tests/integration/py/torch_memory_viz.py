"""Opens a `gpumem export --format torch` pickle with PyTorch's own torch.cuda._memory_viz:
trace_plot and segment_plot where this PyTorch has them (2.x), else (1.13) stats, segments and
memory over the snapshot's segments (flame-graph text only: rendering downloads flamegraph.pl).
usage: torch_memory_viz.py PICKLE"""
import pickle
import sys

import torch
from torch.cuda import _memory_viz as mv

with open(sys.argv[1], "rb") as f:
    snap = pickle.load(f)
done = []
if hasattr(mv, "trace_plot"):
    html = mv.trace_plot(snap)
    assert "<html" in html.lower() or len(html) > 1000, "trace_plot gave %d characters" % len(html)
    done.append("trace_plot")
if hasattr(mv, "segment_plot"):
    mv.segment_plot(snap)
    done.append("segment_plot")
if not done:
    st = mv.stats(snap["segments"])  # asserts that every segment's blocks cover it
    assert st["segments"] == len(snap["segments"])
    ident = lambda s: s
    seg = mv.segments(snap["segments"], format_flamegraph=ident)
    mem = mv.memory(snap["segments"], format_flamegraph=ident)
    total = sum(int(l.rsplit(" ", 1)[1]) for l in mem.splitlines() if l)
    assert total == sum(s["total_size"] for s in snap["segments"]), "memory flame graph total"
    done += ["stats", "segments", "memory"]
print("torch %s: torch.cuda._memory_viz %s read the pickle" % (torch.__version__, ", ".join(done)))
