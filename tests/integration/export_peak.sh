#!/usr/bin/env bash
# `gpumem export --format torch` for memory_viz users (issue 36, deliverable 4), without PyTorch
# (tests/torch/torch_memviz.sh runs PyTorch's own memory_viz on the exports):
#   - the state at the peak by default: its active blocks hold the report's peak allocated, and
#     it is the very file `--at <the peak's seq>` writes; `--at end` holds what leaked, `--at oom`
#     what was allocated and reserved at the OOM (the ooms row); bad `--at` values exit 2;
#   - allocator_settings true to the recording: expandable_segments as the allocator mapped,
#     max_split_size from the configuration;
#   - NVTX ranges and tensor names travel as external_annotations and user_metadata and come back
#     on import: the import's phases and names at the peak are the recording's, its peaks too;
#   - chrome: a leaked allocation's slice ends on the thread that allocated it;
#   - `gpumem flamegraph` (also as flamegraph.pl): folded stacks to an SVG whose root holds their
#     sum; no stack counts or a stray argument exit 2.
source "$(dirname "$0")/e2e_common.bash"
PY=${GPUMEM_TEST_PYTHON:-/usr/bin/python3}
[[ -x $PY ]] || { echo "skipped: $PY is not installed" >&2; exit 77; }
DB=$TMP/leak.db
"$GM" record -q -o "$DB" -- "$TRAIN" --model tiny --data "$TEXT" --steps 3 -B 2 -T 32 --leak > "$TMP/run.txt" 2>&1 \
  || fail "trainer under gpumem: $(tail -3 "$TMP/run.txt")"
"$GM" report --json "$DB" > "$TMP/r.json"
peak=$(jq -r .summary.peak_allocated "$TMP/r.json") pseq=$(jq -r .peak_allocated_at.seq "$TMP/r.json")
# what leaked, in blocks (leaks --json counts the bytes asked for)
leaked=$(sqlite3 "$DB" "SELECT sum(e.size) FROM alloc_life l JOIN events e ON e.seq = l.birth WHERE l.death IS NULL AND e.kind IN (1, 3)")
[[ ${leaked:-0} -gt 0 ]] || fail "the planted leak is not in the recording"
active() { # PICKLE -> "active_bytes segment_bytes"
  "$PY" -c 'import pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))["segments"]
print(sum(b["size"] for g in s for b in g["blocks"] if b["state"] == "active_allocated"), sum(g["total_size"] for g in s))' "$1"
}
"$GM" export --format torch "$DB" -o "$TMP/peak.pickle" || fail "export torch failed"
"$GM" export --format torch "$DB" --at "$pseq" -o "$TMP/seq.pickle" || fail "export torch --at $pseq failed"
read -r a s < <(active "$TMP/peak.pickle")
[[ $a == "$peak" && $s -gt 0 ]] && cmp -s "$TMP/peak.pickle" "$TMP/seq.pickle" \
  && ok "default: the state at the peak: $a bytes active (the report's peak allocated), $s in segments; the same file as --at $pseq" \
  || fail "default export: $a active, $s in segments; the report's peak allocated $peak; same as --at $pseq: $(cmp "$TMP/peak.pickle" "$TMP/seq.pickle" && echo yes || echo no)"
"$GM" export --format torch "$DB" --at end -o "$TMP/end.pickle" || fail "--at end failed"
read -r a s < <(active "$TMP/end.pickle")
[[ $a == "$leaked" ]] && ok "--at end: what leaked ($a bytes, in $s bytes of segments)" || fail "--at end: $a active, leaked $leaked"
for bad in oom bogus -1 ""; do
  rc=0
  "$GM" export --format torch "$DB" --at "$bad" -o "$TMP/x.pickle" 2> "$TMP/err" || rc=$?
  [[ $rc -eq 2 && -s $TMP/err && ! -e $TMP/x.pickle ]] || fail "--at '$bad': exit $rc: $(head -2 "$TMP/err")"
  [[ $bad != oom ]] || grepq "no OOM" "$TMP/err" || fail "--at oom: $(head -2 "$TMP/err")"
done
rc=0
"$GM" export --format chrome "$DB" --at peak > /dev/null 2> "$TMP/err" || rc=$?
[[ $rc -eq 2 ]] || fail "--at with chrome: exit $rc"
ok "--at oom without an OOM, a bad moment, --at with another format: exit 2, nothing written"

# --at oom
ODB=$TMP/oom.db
GPUMEM_LIMIT=4M "$GM" record -q -o "$ODB" -- "$TRAIN" --model tiny --data "$TEXT" --steps 2 > "$TMP/oom.txt" 2>&1 || true
oa=$(sqlite3 "$ODB" "SELECT allocated FROM ooms ORDER BY seq LIMIT 1") orr=$(sqlite3 "$ODB" "SELECT reserved FROM ooms ORDER BY seq LIMIT 1")
[[ -n $oa ]] || fail "the trainer under GPUMEM_LIMIT=4M met no OOM"
"$GM" export --format torch "$ODB" --at oom -o "$TMP/oom.pickle" || fail "--at oom failed"
read -r a s < <(active "$TMP/oom.pickle")
[[ $a == "$oa" && $s == "$orr" ]] && ok "--at oom: $a bytes allocated, $s reserved, as the OOM's forensics say" \
  || fail "--at oom: $a active in $s; the OOM: allocated $oa reserved $orr"

# allocator_settings: the configuration the recording ran with
settings() { "$PY" -c 'import pickle, sys
a = pickle.load(open(sys.argv[1], "rb"))["allocator_settings"]
print(a["expandable_segments"], a["max_split_size"], a["roundup_power2_divisions"]["1024"])' "$1"; }
[[ $(settings "$TMP/peak.pickle") == "True -1 0" ]] && ok "allocator_settings: gpumem's default (expandable segments, mapped)" \
  || fail "allocator_settings of the default run: $(settings "$TMP/peak.pickle")"
CDB=$TMP/classic.db
GPUMEM_CONF=expandable_segments:False,max_split_size_mb:64,roundup_power2_divisions:4 \
  "$GM" record -q -o "$CDB" -- "$TRAIN" --model tiny --data "$TEXT" --steps 1 -B 2 -T 32 > /dev/null 2>&1 || fail "classic run"
"$GM" export --format torch "$CDB" -o "$TMP/classic.pickle" || fail "export of the classic run"
[[ $(settings "$TMP/classic.pickle") == "False 67108864 4" ]] && ok "allocator_settings: classic segments, max_split_size 64 MiB, 4 divisions, as configured" \
  || fail "allocator_settings of the classic run: $(settings "$TMP/classic.pickle")"

# names and phases: out as user_metadata and external_annotations, back on import
"$PY" -c 'import pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
named = [e for e in s["device_traces"][0] if e["action"] == "alloc" and e["user_metadata"]]
ann = s["external_annotations"]
assert named and ann and {a["stage"] for a in ann} == {"START", "END"}, (len(named), len(ann))
print(len(named), len(ann))' "$TMP/peak.pickle" > "$TMP/counts" || fail "no user_metadata or external_annotations in the export"
"$GM" import "$TMP/peak.pickle" -o "$TMP/back.db" 2> /dev/null || fail "import of the export failed"
tables() { "$GM" report --json --top 1000 "$1" | jq -c '[.summary.peak_allocated, .summary.peak_reserved, .summary.peak_requested,
  ([.peak.by_phase[] | [.phase, .bytes]] | sort), ([.peak.by_name[] | [.name, .bytes]] | sort)]'; }
[[ $(tables "$DB") == "$(tables "$TMP/back.db")" ]] \
  && ok "import of the export: peaks, phases and names at the peak as recorded ($(cut -d' ' -f1 "$TMP/counts") named allocations, $(cut -d' ' -f2 "$TMP/counts") annotations)" \
  || fail "import of the export differs: $(diff <(tables "$DB" | tr '[' '\n') <(tables "$TMP/back.db" | tr '[' '\n') | head -6)"

# chrome: a leak's slice ends on its own thread
"$GM" export --format chrome "$DB" -o "$TMP/c.json" || fail "export chrome"
"$PY" - "$TMP/c.json" "$leaked" <<'EOF' || fail "chrome: a leak's slice does not end on its thread"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
b = {e["id"]: e for e in ev if e.get("ph") == "b"}
e = {x["id"]: x for x in ev if x.get("ph") == "e"}
assert set(b) == set(e)
wrong = [i for i in b if b[i]["tid"] != e[i]["tid"] and b[i]["args"]["size"]]
assert not wrong and all(b[i]["tid"] != 0 for i in b), wrong[:3]
print("ok: chrome: every slice (the leaks' too) ends on the thread that allocated it (tid %d)" % next(iter(b.values()))["tid"])
EOF

# gpumem flamegraph, and as flamegraph.pl
"$GM" export --format folded "$DB" > "$TMP/peak.folded"
"$GM" flamegraph --countname bytes < "$TMP/peak.folded" > "$TMP/f.svg" || fail "flamegraph failed"
mkdir -p "$TMP/bin" && ln -s "$(cd "$(dirname "$GM")" && pwd)/gpumem" "$TMP/bin/flamegraph.pl"
"$TMP/bin/flamegraph.pl" --countname bytes < "$TMP/peak.folded" > "$TMP/f2.svg" || fail "flamegraph.pl failed"
root=$(grep -o '<title>all ([0-9]* bytes' "$TMP/f.svg" | grep -o '[0-9]*')
[[ $root == "$peak" && $(grep -c '<rect' "$TMP/f.svg") -gt 10 ]] && cmp -s "$TMP/f.svg" "$TMP/f2.svg" && head -c 100 "$TMP/f.svg" | grepq '<svg\|<?xml' \
  && ok "flamegraph: an SVG whose root holds the folded stacks' $root bytes; the same as flamegraph.pl" \
  || fail "flamegraph: root '$root' (peak $peak), $(grep -c '<rect' "$TMP/f.svg") frames"
rc=0
"$GM" flamegraph < /dev/null > /dev/null 2> "$TMP/err" || rc=$?
[[ $rc -eq 2 ]] && grep -q "No stack counts found" "$TMP/err" || fail "flamegraph of nothing: exit $rc: $(cat "$TMP/err")"
rc=0
"$GM" flamegraph extra < "$TMP/peak.folded" > /dev/null 2>&1 || rc=$?
[[ $rc -eq 2 ]] || fail "flamegraph with a stray argument: exit $rc"
ok "flamegraph: no stack counts, a stray argument: exit 2"
