#!/usr/bin/env python3
"""memviz_check.py — every subcommand of PyTorch's own `python -m torch.cuda._memory_viz` on a
gpumem export, with its output checked against the export's content (tests/torch/torch_memviz.sh).

  memviz_check.py GPUMEM NAME SNAPSHOT ALLOCATED OWN_BEFORE OWN_AFTER

The module's command line is run as `python -m` runs it (runpy, run_name "__main__"), in this one
interpreter, with HOME at a scratch folder whose .cache/flamegraph.pl is a link to GPUMEM (gpumem
answers to that name: `gpumem flamegraph`), so `segments` and `memory` run offline:
  stats         prints "segments: N" (the snapshot's) and total_reserved (their bytes)
  trace         "N entries" (the device's trace) and a line per entry
  segments      an SVG whose root frame holds every segment's bytes, one seg_<address> per segment
  memory        the same bytes, by stream
  trace_plot    HTML embedding the snapshot (decoded, it is the snapshot) as the Active Memory
  segment_plot  Timeline / Allocator State History (MemoryViz.js itself comes from a CDN: the data
                is what can be checked here)
  compare       must do on the export what it does on PyTorch's own two snapshots OWN_BEFORE and
                OWN_AFTER: where it fails there, it must fail the same way (and is left out)
ALLOCATED: the bytes the snapshot's active blocks must hold (the report's peak allocated).
Prints ok:/FAIL:/note: lines; exit 1 on a failure.
"""
import base64
import contextlib
import io
import os
import pickle
import re
import runpy
import sys
import tempfile

FAIL = []


def ok(msg):
    print("ok: " + msg)


def bad(msg):
    print("FAIL: " + msg)
    FAIL.append(msg)


def memviz(*args):
    """(exit status, stdout, the exception's 'Type: message' or '') of the module's CLI"""
    out = io.StringIO()
    old = sys.argv
    sys.argv = ["_memory_viz.py"] + list(args)
    rc, why = 0, ""
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module("torch.cuda._memory_viz", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except Exception as e:  # noqa: BLE001 - what the CLI would die of
        rc, why = 1, "%s: %s" % (type(e).__name__, e)
    finally:
        sys.argv = old
    return rc, out.getvalue(), why


def size_str(n):
    from torch.cuda._memory_viz import Bytes
    return repr(Bytes(n))


def main(argv):
    gpumem, name, snap_path, allocated, own_a, own_b = argv
    allocated = int(allocated)
    home = tempfile.mkdtemp(prefix="memviz-home-")
    os.makedirs(os.path.join(home, ".cache"))
    os.symlink(os.path.abspath(gpumem), os.path.join(home, ".cache", "flamegraph.pl"))
    os.environ["HOME"] = home
    snap = pickle.load(open(snap_path, "rb"))
    segs = snap["segments"]
    total = sum(s["total_size"] for s in segs)
    active = sum(b["size"] for s in segs for b in s["blocks"] if b["state"] == "active_allocated")
    (ok if segs and active == allocated else bad)(
        "%s: the snapshot's %d segments hold %d bytes of active blocks (the report's peak allocated: %d)"
        % (name, len(segs), active, allocated))
    for s in segs:
        if sum(b["size"] for b in s["blocks"]) != s["total_size"]:
            bad("%s: the blocks of segment %#x do not tile it" % (name, s["address"]))
    out_dir = tempfile.mkdtemp(prefix="memviz-out-")

    rc, out, why = memviz("stats", snap_path)
    want = ["segments: %d" % len(segs), "total_reserved: %s" % size_str(total)]
    (ok if rc == 0 and all(w in out for w in want) else bad)(
        "%s: stats exits %d: %s" % (name, rc, "; ".join(w for w in want if w in out) or why or out[-300:]))

    rc, out, why = memviz("trace", snap_path)
    n = len(snap["device_traces"][0])
    (ok if rc == 0 and ("%d entries" % n) in out and out.count("\n") >= n else bad)(
        "%s: trace exits %d: %d entries, %d lines %s" % (name, rc, n, out.count("\n"), why))

    for sub, marks in (("segments", ["seg_%d" % s["address"] for s in segs]), ("memory", ["stream_"])):
        svg = os.path.join(out_dir, sub + ".svg")
        rc, out, why = memviz(sub, snap_path, "-o", svg)
        body = open(svg).read() if os.path.exists(svg) else ""
        m = re.search(r"<title>all \((\d+) bytes", body)
        root = int(m.group(1)) if m else -1
        missing = [k for k in marks if k not in body]
        (ok if rc == 0 and "<svg" in body and root == total and not missing else bad)(
            "%s: %s exits %d: an SVG whose root holds %d bytes (the segments': %d)%s %s"
            % (name, sub, rc, root, total, ", missing " + ", ".join(missing[:3]) if missing else "", why))

    for sub, kind in (("trace_plot", "Active Memory Timeline"), ("segment_plot", "Allocator State History")):
        html = os.path.join(out_dir, sub + ".html")
        rc, out, why = memviz(sub, snap_path, "-o", html)
        body = open(html).read() if os.path.exists(html) else ""
        m = re.search(r'"base64": "([A-Za-z0-9+/=]+)"', body)
        same = False
        if m:
            data = pickle.loads(base64.b64decode(m.group(1)))
            same = data == snap
        (ok if rc == 0 and same and kind in body else bad)(
            "%s: %s exits %d: the page embeds the snapshot (%s) as the %s %s"
            % (name, sub, rc, "the same data" if same else "NOT the same data", kind, why))

    own = memviz("compare", own_a, own_b, "-o", os.path.join(out_dir, "own.svg"))
    ours = memviz("compare", snap_path, snap_path, "-o", os.path.join(out_dir, "cmp.svg"))
    if own[0] == 0:
        (ok if ours[0] == 0 else bad)("%s: compare works on PyTorch's own snapshots and exits %d on ours %s"
                                      % (name, ours[0], ours[2]))
    else:
        (ok if ours[0] == own[0] and ours[2] == own[2] else bad)(
            "%s: compare fails on PyTorch's own snapshots (%s) and the same way on ours (%s): left out"
            % (name, own[2], ours[2]))
    return 1 if FAIL else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
