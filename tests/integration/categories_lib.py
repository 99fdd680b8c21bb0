#!/usr/bin/env python3
"""categories_lib.py — compares the categories `gpumem report` gives allocation by allocation
(GPUMEM_CATEGORY_DUMP files), for tests/integration/categories_*.sh.

  categories_lib.py agree REF.dump TEST.dump REPORT.json [VIEW]
      the share of the bytes live at TEST's peak allocated moment (REPORT.json, TEST's report:
      .peak.seq, or .torch.peak_allocated_seq for VIEW torch; the same allocations in the same
      order in both runs, so their k-th allocations are one, of the same size) whose category in
      TEST is the one REF gives; prints "agreement P%" and the largest disagreements
  categories_lib.py same REF.dump TEST.dump
      every allocation's category in TEST against REF's (the same allocations in the same order);
      prints "N of M allocations in REF's category" and the largest differences, exits 1 on any
  categories_lib.py expect APP.out TEST.dump
      every allocation's category against the "expect INDEX CATEGORY" lines a program printed;
      exits 1 on the first difference"""
import collections
import json
import sys


def rows(path, view="device"):
    out = []
    for line in open(path):
        f = line.split()
        if f[0] == view and f[1] != "step":
            out.append(f)
    return out


def agree(ref, test, report, view="device"):
    r, t = rows(ref, view), rows(test, view)
    if len(r) != len(t):
        print("FAIL: %d allocations in the reference, %d in the test" % (len(r), len(t)))
        return 1
    rep = json.load(open(report))
    peak = rep["peak"]["seq"] if view == "device" else rep["torch"]["peak_allocated_seq"]
    total = same = 0
    off = collections.Counter()
    for a, b in zip(r, t):
        if a[4] != b[4]:
            print("FAIL: allocation %s is %s bytes in the reference, %s in the test" % (a[1], a[4], b[4]))
            return 1
        birth, death, size = int(b[2]), int(b[3]), int(b[4])
        if birth > peak or (death and death <= peak):
            continue
        total += size
        if a[5] == b[5]:
            same += size
        else:
            off[(a[5], b[5])] += size
    for (x, y), n in off.most_common(8):
        print("  %12d bytes: %s by the reference, %s by the test" % (n, x, y))
    print("agreement %.2f%% of %d bytes at the peak" % (100.0 * same / total if total else 0, total))
    return 0


def same(ref, test, view="device"):
    r, t = rows(ref, view), rows(test, view)
    if len(r) != len(t):
        print("FAIL: %d allocations in the reference, %d in the test" % (len(r), len(t)))
        return 1
    off = collections.Counter()
    for a, b in zip(r, t):
        if a[4] != b[4]:
            print("FAIL: allocation %s is %s bytes in the reference, %s in the test" % (a[1], a[4], b[4]))
            return 1
        if a[5] != b[5]:
            off[(a[5], b[5])] += 1
    n = sum(off.values())
    print("%d of %d allocations in the reference's category" % (len(r) - n, len(r)))
    for (x, y), k in off.most_common(8):
        print("  %d allocations: %s by the reference, %s by the test" % (k, x, y))
    return 1 if n else 0


def expect(app_out, test):
    e = [l.split() for l in open(app_out) if l.startswith("expect ")]
    t = rows(test)
    if len(e) != len(t):
        print("FAIL: the program made %d allocations, the report has %d" % (len(e), len(t)))
        return 1
    for a, b in zip(e, t):
        if a[2] != b[5]:
            print("FAIL: allocation %s is %s, the report says %s (from %s)" % (a[1], a[2], b[5], b[6]))
            return 1
    print("all %d allocations in their category" % len(e))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "agree":
        sys.exit(agree(*sys.argv[2:]))
    if sys.argv[1] == "same":
        sys.exit(same(*sys.argv[2:]))
    sys.exit(expect(*sys.argv[2:]))
