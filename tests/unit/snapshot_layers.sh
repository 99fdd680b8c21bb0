#!/usr/bin/env bash
# snapshot/'s rooms keep their boundary (snapshot/README.md, "Rooms"):
#  1. includes: record/ (linked into libgpumem.so, runs inside the user's program) includes only
#     record/ and alloc/'s public header; read/ includes only record/ and read/; nothing outside
#     snapshot/ but the preload (and tests) includes record/ — checked on the sources (and 3.
#     below: one place names the side files);
#  2. no circle between the files of snapshot/: the graph "file A calls a function file B
#     defines", read from the built objects (nm), has no cycle — checked on $BUILD.
set -uo pipefail
BUILD=${BUILD:-build}
fail() { echo "FAIL: $*" >&2; exit 1; }
bad=0
includes() { grep -ho '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*"' "$@" | sed 's/.*"\(.*\)"/\1/' | sort -u; }
for f in snapshot/record/*.[ch]; do
  while read -r inc; do
    case $inc in snapshot/record/*|alloc/alloc.h) ;; *) echo "  $f includes $inc (record/ may include only record/ and alloc/alloc.h)" >&2; bad=1 ;; esac
  done < <(includes "$f")
done
for f in snapshot/read/*.[ch]; do
  while read -r inc; do
    case $inc in snapshot/record/*|snapshot/read/*|alloc/alloc.h) ;; *) echo "  $f includes $inc (read/ may include only record/, read/ and alloc/alloc.h)" >&2; bad=1 ;; esac
  done < <(includes "$f")
done
((bad)) && fail "an include crosses a room's boundary (see above)"
#  3. one place names a database's SQLite side files (-wal, -shm, -journal): record/rec_path.c's
#     rec_db_side, which the recorder, the reader (gm_db_wal_bytes), the report's size, --check's
#     re-runs and the output rule all use; a second spelling of a name is a second place to get
#     it wrong (a 200-byte buffer that cut a long path's name, one list without -journal)
sides=$(grep -rnE '"[^"]*-(wal|shm|journal)"' --include='*.[ch]' snapshot preload viz alloc train sim tests/unit tests/bench |
  grep -v '^snapshot/record/rec_path\.c:')
[[ -z $sides ]] || fail "a side file's name built outside rec_db_side (record/rec_path.c):
$sides"
objs=$(find "$BUILD/snapshot" -name '*.o' -path "$BUILD/snapshot/*/*" 2> /dev/null)
[[ -n $objs ]] || fail "no objects under $BUILD/snapshot/<room>/: build first"
python3 - $objs << 'PY' || fail "a circle between files of snapshot/ (see above)"
import subprocess, sys, collections, os
objs = sys.argv[1:]
defs, undef = {}, {}
for o in objs:
    d, u = set(), set()
    for line in subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout.splitlines():
        p = line.split()
        if len(p) == 3 and p[1] in "TDBRC": d.add(p[2])
        elif len(p) == 2 and p[0] == "U": u.add(p[1])
    defs[o], undef[o] = d, u
owner = {s: o for o, d in defs.items() for s in d}
g = {o: {owner[s] for s in undef[o] if s in owner and owner[s] != o} for o in objs}
name = lambda o: os.path.relpath(o[:-2] + ".c", os.path.join(os.environ.get("BUILD", "build")))
# Tarjan's strongly connected components, iteratively
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
for root in objs:
    if root in index: continue
    work = [(root, iter(sorted(g[root])))]
    index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on.add(root)
    while work:
        v, it = work[-1]
        w = next(it, None)
        if w is not None:
            if w not in index:
                index[w] = low[w] = counter[0]; counter[0] += 1; stack.append(w); on.add(w)
                work.append((w, iter(sorted(g[w]))))
            elif w in on:
                low[v] = min(low[v], index[w])
            continue
        work.pop()
        if work: low[work[-1][0]] = min(low[work[-1][0]], low[v])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: sccs.append(comp)
for c in sccs:
    print("  circle: " + " <-> ".join(sorted(name(o) for o in c)), file=sys.stderr)
    for a in sorted(c):
        for b in sorted(g[a] & set(c)):
            syms = sorted(s for s in undef[a] if owner.get(s) == b)
            print(f"    {name(a)} -> {name(b)}: {' '.join(syms[:6])}", file=sys.stderr)
sys.exit(1 if sccs else 0)
PY
n=$(echo "$objs" | wc -w)
echo "ok: record/ and read/ include nothing above them; side files named in rec_path.c only; no circle between the $n files of snapshot/"
