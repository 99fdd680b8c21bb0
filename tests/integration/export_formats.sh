#!/usr/bin/env bash
# `gpumem export --format torch|chrome|folded|speedscope|csv` on a recording of the trainer:
# torch: the pickle loads with Python's pickle and matches the database field by field (alloc
# actions = device allocations, segments = the exit snapshot, Python frames carried; and, where
# PyTorch is installed, torch.cuda._memory_viz renders it; on frag_app cross, asynchronous, a free
# that waited completes where its block landed); chrome: the JSON parses, with a
# counter per event and one slice per NVTX range; folded: --what peak sums to the report's peak
# allocated, --what total to every device allocation's bytes; speedscope: its JSON with both
# profiles; csv: the allocations view. Names in UTF-8 come out as they are (chrome, report
# --json) and bytes that are not UTF-8 are replaced, so Python's strict json and pickle read them.
# Bad input: usage errors exit 2, a missing database 3.
source "$(dirname "$0")/e2e_common.bash"
PY=${GPUMEM_TEST_PYTHON:-/usr/bin/python3}
[[ -x $PY ]] || { echo "skipped: $PY is not installed" >&2; exit 77; }
DB=$TMP/run.db
"$GM" record -q -o "$DB" -- "$TRAIN" --model tiny --data "$TEXT" --steps 4 -B 2 -T 32 > "$TMP/run.txt" 2>&1 \
  || fail "trainer under gpumem: $(tail -3 "$TMP/run.txt")"
"$GM" report --json "$DB" > "$TMP/r.json"
peak=$(jq -r .summary.peak_allocated "$TMP/r.json")

# A frame marked as Python (as the recorder writes one, schema 1.3): the exports must carry it.
# (readers never write the recording: main's frame is found through gpumem sql's symbolized view)
mainf=$("$GM" sql "$DB" -c "SELECT f.id FROM frames f JOIN stacks s ON s.frame = f.id JOIN events e ON e.stack = s.stack
                           WHERE e.kind IN (1, 3) AND f.function = 'main' LIMIT 1" | tail -n +2)
[[ -n $mainf ]] || fail "no frame of main"
sqlite3 "$DB" "UPDATE frames SET python = 1, module = NULL, offset = NULL, file = 'train_step.py', line = 42,
               function = 'train_step', symbolized = 1 WHERE id = $mainf"
[[ $(sqlite3 "$DB" "SELECT count(*) FROM frames WHERE python = 1") -eq 1 ]] || fail "could not mark a Python frame"

# --- torch
"$GM" export --format torch "$DB" -o "$TMP/s.pickle" || fail "export torch failed"
# the state rebuilt from the events at the moment of the recorder's own snapshots (the last peak,
# the exit) is the one the allocator's walk wrote there
for reason in 1 3; do
  at=$(sqlite3 "$DB" "SELECT seq FROM snapshots WHERE reason = $reason ORDER BY seq DESC, id DESC LIMIT 1")
  [[ -n $at ]] || fail "no snapshot of reason $reason in the recording"
  "$GM" export --format torch "$DB" --at "$at" -o "$TMP/s$reason.pickle" || fail "export torch --at $at failed"
  "$PY" tests/integration/py/torch_snapshot_check.py "$TMP/s$reason.pickle" "$DB" train_step.py $reason \
    || fail "the torch pickle at the snapshot of reason $reason does not match the database"
done
if "$PY" -c 'import torch.cuda._memory_viz' 2> /dev/null; then
  "$PY" tests/integration/py/torch_memory_viz.py "$TMP/s.pickle" > "$TMP/viz.log" 2>&1 \
    || fail "torch.cuda._memory_viz rejected the pickle: $(tail -5 "$TMP/viz.log")"
  ok "$(tail -1 "$TMP/viz.log")"
else
  echo "note: PyTorch is not installed for $PY: torch.cuda._memory_viz not tried (the pickle was checked field by field)"
fi

# frees that waited for another stream (the asynchronous virtual GPU, frag_app cross): each
# free_completed stands where the recording saw its block land (kind 29), not at the request
APP=$BUILD/tests/apps/frag_app
if [[ -x $APP ]]; then
  GPUMEM_SIM_ASYNC=1 "$GM" record -q -o "$TMP/x.db" -- "$APP" cross > "$TMP/x.txt" 2>&1 || fail "frag_app cross: $(tail -3 "$TMP/x.txt")"
  "$GM" export --format torch "$TMP/x.db" -o "$TMP/x.pickle" || fail "export torch (cross-stream)"
  "$PY" - "$TMP/x.pickle" "$TMP/x.db" > "$TMP/x.check" 2>&1 <<'PYEOF' || fail "cross-stream torch trace: $(tail -3 "$TMP/x.check")"
import pickle, sqlite3, sys
snap = pickle.load(open(sys.argv[1], "rb"))
db = sqlite3.connect(sys.argv[2])
landed = {}  # (addr, time_us) of every kind 29 landing
for a, t in db.execute("SELECT e.addr, e.t FROM events e WHERE kind = 29"):
    landed[(a, t // 1000)] = True
waited = db.execute("SELECT count(*) FROM events WHERE kind IN (2, 4) AND (flags & 8192) != 0").fetchone()[0]
split = 0
for trace in snap["device_traces"]:
    open_req = {}
    for i, e in enumerate(trace):
        if e["action"] == "free_requested":
            assert e["addr"] not in open_req, "two free_requested for %#x" % e["addr"]
            open_req[e["addr"]] = i
        elif e["action"] == "free_completed":
            i0 = open_req.pop(e["addr"], None)
            assert i0 is not None, "free_completed of %#x without its request" % e["addr"]
            if i0 != i - 1:
                split += 1
                assert (e["addr"], e["time_us"]) in landed or trace[i + 1]["action"] == "alloc", \
                    "free_completed of %#x at %d us: no landing recorded there" % (e["addr"], e["time_us"])
        elif e["action"] == "alloc":
            assert e["addr"] not in open_req, "%#x handed out while its free is pending" % e["addr"]
    assert len(open_req) <= waited, "%d frees never completed, %d waited" % (len(open_req), waited)
assert 0 < split <= waited, "%d free_completed apart from their request, %d frees waited" % (split, waited)
print("ok: %d of %d frees that waited complete where they landed" % (split, waited))
PYEOF
  if "$PY" -c 'import torch.cuda._memory_viz' 2> /dev/null; then
    "$PY" tests/integration/py/torch_memory_viz.py "$TMP/x.pickle" > "$TMP/viz.log" 2>&1 \
      || fail "torch.cuda._memory_viz rejected the cross-stream pickle: $(tail -5 "$TMP/viz.log")"
  fi
  ok "torch: $(tail -1 "$TMP/x.check" | sed 's/^ok: //') (frag_app cross, asynchronous virtual GPU)"
fi

# --- folded
"$GM" export --format folded "$DB" > "$TMP/peak.folded" || fail "export folded failed"
head -1 "$TMP/peak.folded" | grepq '^# gpumem folded' || fail "folded: no marker line first"
sed -i 1d "$TMP/peak.folded"
sum=$(awk '{ s += $NF } END { print s }' "$TMP/peak.folded")
[[ $sum == "$peak" ]] || fail "folded --what peak sums to $sum, the report's peak allocated is $peak"
grep -q ';' "$TMP/peak.folded" || fail "folded lines have no stacks"
awk '$NF !~ /^[0-9]+$/ { exit 1 }' "$TMP/peak.folded" || fail "a folded line does not end in a byte count"
grep -q 'gm_rec_alloc\|gm_heap_alloc' "$TMP/peak.folded" && fail "gpumem's own frames are in the folded stacks"
grep -q 'train_step.py:42 in train_step' "$TMP/peak.folded" || fail "the Python frame is not in the folded stacks"
total=$(sqlite3 "$DB" "SELECT sum(size) FROM events WHERE kind IN (1, 3)")
"$GM" export --format folded --what total "$DB" > "$TMP/total.folded"
sum=$(awk '!/^#/ { s += $NF } END { print s }' "$TMP/total.folded")
[[ $sum == "$total" ]] || fail "folded --what total sums to $sum, expected $total"
ok "folded: --what peak sums to the peak allocated ($peak bytes, $(wc -l < "$TMP/peak.folded") stacks), --what total to $total"

# --- speedscope
"$GM" export --format speedscope "$DB" > "$TMP/ss.json" || fail "export speedscope failed"
"$PY" - "$TMP/ss.json" "$peak" "$total" << 'PYEOF' || fail "speedscope file is wrong"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["$schema"] == "https://www.speedscope.app/file-format-schema.json"
nf = len(d["shared"]["frames"])
assert all(isinstance(f["name"], str) for f in d["shared"]["frames"])
p = d["profiles"]
assert [x["type"] for x in p] == ["sampled", "sampled"] and all(x["unit"] == "bytes" for x in p)
for x, want in zip(p, (int(sys.argv[2]), int(sys.argv[3]))):
    assert len(x["samples"]) == len(x["weights"])
    assert sum(x["weights"]) == want == x["endValue"], (sum(x["weights"]), want)
    assert all(0 <= i < nf for s in x["samples"] for i in s)
print("ok: speedscope: %d frames, profiles peak %d and total %d bytes" % (nf, sum(p[0]["weights"]), sum(p[1]["weights"])))
PYEOF

# --- chrome
"$GM" export --format chrome "$DB" -o "$TMP/trace.json" || fail "export chrome failed"
nranges=$(sqlite3 "$DB" "SELECT count(*) FROM ranges WHERE kind IN (0, 1)")
nallocs=$(sqlite3 "$DB" "SELECT count(*) FROM events WHERE kind IN (1, 3)")
"$PY" - "$TMP/trace.json" "$nranges" "$nallocs" "$peak" << 'PYEOF' || fail "chrome trace is wrong"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
nr, na, peak = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
counters = [e for e in ev if e["ph"] == "C"]
slices = [e for e in ev if e["ph"] == "X" and e.get("cat") == "nvtx"]
begins = [e for e in ev if e["ph"] == "b"]
ends = [e for e in ev if e["ph"] == "e"]
assert counters and all({"allocated", "reserved"} <= set(e["args"]) for e in counters)
assert max(e["args"]["allocated"] for e in counters) == peak, "counter peak != report"
assert len(slices) == nr > 0, (len(slices), nr)
assert any("step" in e["name"] for e in slices)
assert len(begins) == len(ends) == na, (len(begins), len(ends), na)
assert {e["id"] for e in begins} == {e["id"] for e in ends}
assert all(isinstance(e["args"]["size"], int) for e in begins)
assert any(e["name"] == "wte" for e in begins), "allocations are not named"
print("ok: chrome: %d counter events (peak %d), %d NVTX slices, %d async allocation slices" % (len(counters), peak, len(slices), len(begins)))
PYEOF

# --- names are the program's bytes: UTF-8 comes out as it is, anything else is replaced, and
# every file still loads in a strict reader (Python's json and pickle decode UTF-8 strictly)
cp "$DB" "$TMP/u.db"
# 'wte' -> "wté ✓", the phase "opt" -> "opté"; the Python frame's function -> "step" with a
# UTF-16 surrogate (ED A0 80) and a stray byte (FF)
sqlite3 "$TMP/u.db" "UPDATE strings SET s = CAST(X'7774c3a920e29c93' AS TEXT) WHERE s = 'wte';
                     UPDATE ranges SET path = replace(path, '/opt', '/opt' || CAST(X'c3a9' AS TEXT));
                     UPDATE frames SET function = CAST(X'73746570eda080ff' AS TEXT) WHERE python = 1" \
  || fail "could not edit the names"
"$GM" report --json "$TMP/u.db" > "$TMP/u.json" || fail "report --json with non-ASCII names"
"$GM" export --format chrome "$TMP/u.db" -o "$TMP/u.trace.json" || fail "export chrome with non-ASCII names"
"$GM" export --format torch "$TMP/u.db" -o "$TMP/u.pickle" || fail "export torch with non-ASCII names"
"$PY" - "$TMP/u.json" "$TMP/u.trace.json" "$TMP/u.pickle" << 'PYEOF' || fail "non-ASCII names"
import json, pickle, sys
rep = json.load(open(sys.argv[1], encoding="utf-8"))
trace = json.load(open(sys.argv[2], encoding="utf-8"))
snap = pickle.load(open(sys.argv[3], "rb"))
names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "b"}
assert "wt\u00e9 \u2713" in names, sorted(names)[:5]
assert "wte" not in names
frames = {f["name"] for t in snap["device_traces"] for e in t for f in e.get("frames", [])}
assert "step????" in frames, sorted(frames)
assert not any("\ufffd" in n or "\u00c3" in n for n in names)
assert any("/opt\u00e9" in p["phase"] for p in rep["peak"]["by_phase"]), rep["peak"]["by_phase"]
print("ok: names in UTF-8 kept (chrome, report --json); a surrogate and a stray byte become one '?' a byte (torch)")
PYEOF

# --- csv
"$GM" export --format csv "$DB" > "$TMP/a.csv" || fail "export csv failed"
"$PY" - "$TMP/a.csv" "$DB" << 'PYEOF' || fail "csv is wrong"
import csv, sqlite3, sys
rows = list(csv.DictReader(open(sys.argv[1])))
db = sqlite3.connect(sys.argv[2])
want = db.execute("SELECT id, size, name FROM allocations ORDER BY id").fetchall()
got = [(int(r["id"]), int(r["size"]), r["name"] or None) for r in rows]
assert got == want, "csv differs from the allocations view"
print("ok: csv: %d rows equal the allocations view" % len(rows))
PYEOF

# --- bad input
set +e
"$GM" export --format svg "$DB" > /dev/null 2> "$TMP/e1"; rc1=$?
"$GM" export --format folded --what peak "$TMP/missing.db" > /dev/null 2> "$TMP/e2"; rc2=$?
"$GM" export --format csv --what total "$DB" > /dev/null 2> "$TMP/e3"; rc3=$?
"$GM" export --format folded --what most "$DB" > /dev/null 2> "$TMP/e4"; rc4=$?
set -e
[[ $rc1 -eq 2 ]] && grep -q "unknown format 'svg'" "$TMP/e1" || fail "unknown format: rc $rc1, $(head -1 "$TMP/e1")"
[[ $rc2 -eq 3 ]] && [[ $(wc -l < "$TMP/e2") -eq 1 ]] || fail "missing database: rc $rc2, $(cat "$TMP/e2")"
[[ $rc3 -eq 2 && $rc4 -eq 2 ]] || fail "--what misuse: rc $rc3 $rc4"
ok "bad input: unknown format and --what misuse exit 2, a missing database exits 3 with one line"
