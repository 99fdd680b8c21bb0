#!/usr/bin/env python3
"""torch_categories.py PROFILE.json DUMP REPORT.json DB — agreement of gpumem's categories of
PyTorch's tensors with torch's own memory profiler on the same run (tests/torch/torch_categories.sh).

PROFILE.json: train_gpt2.py --profile-categories (torch.profiler's allocation events in order and
each tensor version's category). DUMP: GPUMEM_CATEGORY_DUMP of `gpumem report` (the "torch" rows:
each tensor's category, in birth order). REPORT.json: `gpumem report --json` (.torch's peak).
DB: the recording (the order of PyTorch's alloc and free events, and their addresses).

The k-th allocation the profiler saw is the k-th tensor of gpumem's view (both see every block
PyTorch's caching allocator hands out; the addresses must agree, else the check fails). At
PyTorch's peak allocated moment (after the j-th alloc or free of its history) each live tensor's
category is the profiler's for the tensor version current then; torch's categories are mapped to
gpumem's (INPUT to activations: the batch is held through the backward like an activation;
AUTOGRAD_DETAIL to temporaries: made by the backward and freed in it); tensors the profiler does
not categorise are left out (WAVE3-NOTES: agreement over the bytes it categorises). Prints the
agreement, the bytes by (torch's, gpumem's) category, and exits 1 when an address disagrees."""
import bisect
import collections
import json
import sqlite3
import sys

MAP = {"PARAMETER": "parameters", "GRADIENT": "gradients", "OPTIMIZER_STATE": "optimizer_state",
       "ACTIVATION": "activations", "INPUT": "activations", "TEMPORARY": "temporaries",
       "AUTOGRAD_DETAIL": "temporaries"}


def main(prof_path, dump_path, report_path, db_path):
    prof = json.load(open(prof_path))
    cats = [l.split() for l in open(dump_path)]
    cats = [c for c in cats if c[0] == "torch" and c[1] != "step"]
    peak_seq = json.load(open(report_path))["torch"]["peak_allocated_seq"]
    db = sqlite3.connect("file:%s?mode=ro" % db_path, uri=True)
    ev = db.execute("SELECT seq, kind, addr FROM events WHERE kind IN (31, 32) ORDER BY seq").fetchall()
    births = [(s, a) for s, k, a in ev if k == 31]
    allocs = prof["allocs"]
    pos = [a for a in allocs if a[2] > 0]
    if len(pos) != len(births) or len(cats) != len(births):
        print("FAIL: the profiler saw %d allocations, gpumem %d tensors (%d categorised)"
              % (len(pos), len(births), len(cats)))
        return 1
    bad = sum(1 for p, b in zip(pos, births) if p[1] != b[1])
    if bad:
        print("FAIL: %d of %d allocations are at other addresses in the profiler's run" % (bad, len(pos)))
        return 1
    j = sum(1 for s, k, a in ev if s <= peak_seq)  # PyTorch's alloc and free events up to its peak
    t_peak = allocs[j - 1][0]
    versions = collections.defaultdict(list)  # tensor id -> [(time, category)]
    for t, key, v, c in prof["versions"]:
        versions[key].append((t, c))
    for v in versions.values():
        v.sort(key=lambda x: x[0])
    total = agree = uncategorised = 0
    table = collections.Counter()
    for k, (p, c) in enumerate(zip(pos, cats)):
        birth, death, size = int(c[2]), int(c[3]), int(c[4])
        if birth > peak_seq or (death and death <= peak_seq):
            continue
        tc = None
        vs = versions.get(p[3], [])
        i = bisect.bisect_right([t for t, _ in vs], t_peak)
        if i:
            tc = vs[i - 1][1]
        if tc is None:
            uncategorised += size
            continue
        total += size
        table[(MAP[tc], c[5])] += size
        if MAP[tc] == c[5]:
            agree += size
    print("at PyTorch's peak (event %d): %d bytes the profiler categorises, %d it does not" % (peak_seq, total, uncategorised))
    for (t, g), b in sorted(table.items(), key=lambda x: -x[1]):
        print("  %12d  torch %-16s gpumem %s" % (b, t, g))
    print("agreement %.2f%%" % (100.0 * agree / total if total else 0.0))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
