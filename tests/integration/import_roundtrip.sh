#!/usr/bin/env bash
# `gpumem import`: (1) round trip: a recording of the trainer with --leak, exported as PyTorch's
# snapshot pickle and imported back, has the same peaks (requested, allocated, reserved) and
# the same leaks (bytes, count, call site), and report, leaks, frag, tune, advise and diff run
# on it; (2) snapshots written by Python's pickle the way PyTorch dumps them, at protocols 2, 3,
# 4 and 5, with traces, without traces and in 1.13's style, give the figures worked out by hand
# (a free waiting on another stream holds its block until free_completed), Python frames as
# Python frames, and a trace gpumem-replay reads (what tests/gpu/pytorch_parity.py does with
# `gpumem import` on a real GPU); (3) usage: the output rule (an existing file that is not a gpumem
# database is not overwritten without --force; an earlier database is replaced).
source "$(dirname "$0")/e2e_common.bash"
PY=${GPUMEM_TEST_PYTHON:-/usr/bin/python3}
[[ -x $PY ]] || { echo "skipped: $PY is not installed" >&2; exit 77; }

# --- (1) round trip
"$GM" record -q -o "$TMP/a.db" -- "$TRAIN" --model tiny --data "$TEXT" --steps 6 -B 2 -T 32 --leak > "$TMP/run.txt" 2>&1 \
  || fail "trainer under gpumem: $(tail -3 "$TMP/run.txt")"
"$GM" export --format torch "$TMP/a.db" -o "$TMP/a.pickle" || fail "export torch failed"
"$GM" import "$TMP/a.pickle" -o "$TMP/b.db" 2> "$TMP/imp.txt" || fail "import failed: $(cat "$TMP/imp.txt")"
for k in peak_requested peak_allocated peak_reserved allocations; do
  a=$("$GM" report --json "$TMP/a.db" | jq -r ".summary.$k"); b=$("$GM" report --json "$TMP/b.db" | jq -r ".summary.$k")
  [[ $a == "$b" && $a != null ]] || fail "round trip: $k $a became $b"
done
"$GM" leaks "$TMP/a.db" > "$TMP/la.txt"; "$GM" leaks "$TMP/b.db" > "$TMP/lb.txt"
la=$(grep '^LEAK SUMMARY' "$TMP/la.txt"); lb=$(grep '^LEAK SUMMARY' "$TMP/lb.txt")
[[ $la == "$lb" && $la != *" 0 bytes"* ]] || fail "round trip leaks: '$la' became '$lb'"
site=$(grep -m1 'allocations at ' "$TMP/la.txt" | sed 's/.* at //')
grep -qF "at $site" "$TMP/lb.txt" || fail "round trip: the leak's call site '$site' is not in the imported leaks: $(head -8 "$TMP/lb.txt")"
exitsegs() { sqlite3 "$1" "SELECT s.addr, s.mapped, s.stream FROM segments s JOIN snapshots n ON n.id = s.snapshot
                          WHERE n.reason = 3 ORDER BY s.addr"; }
[[ -n $(exitsegs "$TMP/a.db") && $(exitsegs "$TMP/a.db") == "$(exitsegs "$TMP/b.db")" ]] \
  || fail "round trip: exit segments $(exitsegs "$TMP/a.db" | tr '\n' ' ') became $(exitsegs "$TMP/b.db" | tr '\n' ' ')"
for c in report leaks frag tune advise; do
  "$GM" $c "$TMP/b.db" > "$TMP/$c.txt" 2>&1 || fail "gpumem $c on the imported database: $(tail -3 "$TMP/$c.txt")"
done
"$GM" diff "$TMP/a.db" "$TMP/b.db" --fail-if-peak-grows 0 > "$TMP/diff.txt" || fail "diff of a recording and its round trip: $(cat "$TMP/diff.txt")"
ok "round trip: peaks $(jq -r '.summary | "\(.peak_allocated)/\(.peak_reserved)"' <("$GM" report --json "$TMP/b.db")) and '$la' at $site equal; report, leaks, frag, tune, advise, diff run on it"

# --- (2) snapshots as PyTorch pickles them
mkdir -p "$TMP/s"
"$PY" tests/integration/py/make_snapshots.py "$TMP/s" > "$TMP/s/want" || fail "make_snapshots.py failed"
check() { # FILE NAME_IN_WANT
  local db=$TMP/s/$1.db
  "$GM" import "$TMP/s/$1" -o "$db" 2> /dev/null || fail "import $1 failed"
  read -r _ pa pr leak nleak nooms < <(grep "^$2 " "$TMP/s/want")
  "$GM" report --json "$db" > "$db.json" || fail "report on $1"
  [[ $(jq .summary.peak_allocated "$db.json") == "$pa" ]] || fail "$1: peak allocated $(jq .summary.peak_allocated "$db.json"), expected $pa"
  [[ $(jq .summary.peak_reserved "$db.json") == "$pr" ]] || fail "$1: peak reserved $(jq .summary.peak_reserved "$db.json"), expected $pr"
  [[ $(jq '.ooms | length' "$db.json") == "$nooms" ]] || fail "$1: $(jq '.ooms | length' "$db.json") OOMs, expected $nooms"
  "$GM" leaks "$db" > "$db.leaks"
  grep -q "^LEAK SUMMARY: $leak bytes leaked in $nleak allocations" "$db.leaks" || fail "$1: $(tail -1 "$db.leaks"), expected $leak bytes in $nleak"
}
for p in 2 3 4 5; do check full-p$p.pickle full; done
check notrace.pickle notrace
check old.pickle notrace
db=$TMP/s/full-p4.pickle.db
[[ $(sqlite3 "$db" "SELECT count(*) FROM frames WHERE python = 1 AND file = 'train.py'") -eq 4 ]] \
  || fail "Python frames: $(sqlite3 "$db" 'SELECT function, file, line, python FROM frames')"
[[ $(sqlite3 "$db" "SELECT python IS NULL FROM frames WHERE file = 'CUDACachingAllocator.cpp'") -eq 1 ]] || fail "a C++ frame was taken for Python"
grep -q 'train.py:12 in forward' "$db.leaks" || grepq 'train.py:20 in backward\|backward (train.py:20)' "$db.leaks" \
  || fail "the leaks do not name the Python call site: $(head -6 "$db.leaks")"
[[ $(jq -r '.ooms[0].requested' "$db.json") == 67108864 ]] || fail "OOM size: $(jq -c .ooms "$db.json")"
ok "PyTorch-style snapshots at protocols 2-5, without traces and 1.13's: the peaks, leaks and OOMs worked out by hand"
"$GM" export --format trace "$db" > "$TMP/s/t" || fail "export trace of an imported snapshot"
[[ $(grep -c '^a ' "$TMP/s/t") -eq 4 && $(grep -c '^f ' "$TMP/s/t") -eq 2 ]] || fail "trace of the import: $(cat "$TMP/s/t")"
REPLAY=$BUILD/alloc/gpumem-replay
if [[ -x $REPLAY ]]; then
  "$REPLAY" --preset pytorch "$TMP/s/t" > "$TMP/s/r" 2>&1 || fail "gpumem-replay rejected the imported trace: $(cat "$TMP/s/r")"
  grep -q 'peak_reserved=' "$TMP/s/r" || fail "replay output: $(cat "$TMP/s/r")"
  ok "import -> export --format trace -> gpumem-replay (as tests/gpu/pytorch_parity.py does)"
fi

# --- (2b) the recorded configuration: PyTorch's words stay PyTorch's. An import keeps the
# snapshot's allocator_settings (meta torch_conf, torch_allocator_settings), an export writes every
# field back as it was (types too: repr), and tune and frag call the recorded configuration what
# it was: PyTorch's PYTORCH_CUDA_ALLOC_CONF for a PyTorch snapshot (never the GPUMEM_CONF that
# replays it, which PyTorch refuses), gpumem's GPUMEM_CONF for a gpumem recording, whose export
# has no GPUMEM_CONF value in PYTORCH_CUDA_ALLOC_CONF. Each row: name | the recorded
# PYTORCH_CUDA_ALLOC_CONF tune and frag say ("-": none, gpumem's allocator ran it).
"$PY" - "$TMP/s" << 'EOF'
import pickle, sys
d = sys.argv[1]
snap = pickle.load(open(d + "/full-p4.pickle", "rb"))
common = {"max_split_size": -1, "garbage_collection_threshold": 0.0, "expandable_segments": False,
          "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
          "pinned_use_cuda_host_register": False, "graph_capture_record_stream_reuse": False,
          "max_round_threshold": -1, "max_cached_size": -1,
          "roundup_power2_divisions": {str(1 << k): 0 for k in range(16)}}
unset = dict(common, PYTORCH_CUDA_ALLOC_CONF="")  # PyTorch 2.14's fields, as pt_snap.py dumps them
conf = dict(common, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True,max_split_size_mb:256,garbage_collection_threshold:0.6",
            max_split_size=256 << 20, garbage_collection_threshold=0.6, expandable_segments=True, max_cached_size=1 << 30)
for name, settings in (("pt-unset", unset), ("pt-conf", conf)):
    pickle.dump(dict(snap, allocator_settings=settings), open("%s/%s.pickle" % (d, name), "wb"), protocol=2)
EOF
cp "$TMP/a.pickle" "$TMP/s/gm-rec.pickle" # the trainer under gpumem's allocator (part 1)
settings() { "$PY" -c 'import pickle, sys; print(repr(pickle.load(open(sys.argv[1], "rb"))["allocator_settings"]))' "$1"; }
bad=""
while read -r name want; do
  p=$TMP/s/$name.pickle db=$TMP/s/$name-conf.db
  "$GM" import "$p" -o "$db" 2> /dev/null || { bad+=" $name: import failed;"; continue; }
  "$GM" export --format torch "$db" -o "$TMP/s/$name-back.pickle" 2> /dev/null || { bad+=" $name: export failed;"; continue; }
  a=$(settings "$p") b=$(settings "$TMP/s/$name-back.pickle")
  [[ -n $a && $a == "$b" ]] || bad+=" $name: allocator_settings $a came back as $b;"
  for c in tune frag; do
    "$GM" $c --json "$db" > "$db.$c.json" 2> /dev/null && "$GM" $c "$db" > "$db.$c.txt" 2> /dev/null \
      || { bad+=" $name: $c failed;"; continue; }
    jc=$(jq -r '.recorded.pytorch_conf // "-"' "$db.$c.json")
    line=$(grep -m1 -E '^  (recorded|configuration) ' "$db.$c.txt")
    if [[ $want == - ]]; then
      [[ $jc == - && $line == *"GPUMEM_CONF="* && $line != *PYTORCH_CUDA_ALLOC_CONF* ]] \
        || bad+=" $name: $c says the recorded configuration was PyTorch's: '$line' (pytorch_conf $jc);"
    else
      w=$want said=$want; [[ $want == '""' ]] && w= said="(unset)"
      [[ $jc == "$w" && $line == *"PyTorch's allocator"*"PYTORCH_CUDA_ALLOC_CONF=$said"[,\ ]* ]] \
        || bad+=" $name: $c says '$line' (pytorch_conf '$jc'), not PYTORCH_CUDA_ALLOC_CONF=$said;"
    fi
  done
done << 'TABLE'
pt-unset ""
pt-conf expandable_segments:True,max_split_size_mb:256,garbage_collection_threshold:0.6
gm-rec -
TABLE
# gpumem's own recording: PyTorch's field has no GPUMEM_CONF in it, gpumem's field says its own
"$PY" -c 'import pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))["allocator_settings"]
assert s["PYTORCH_CUDA_ALLOC_CONF"] == "" and s.get("GPUMEM_CONF") == sys.argv[2], s' "$TMP/a.pickle" \
  "$(sqlite3 "$TMP/a.db" "SELECT value FROM meta WHERE key = 'config'")" 2> "$TMP/s/gm.err" \
  || bad+=" gpumem's export: $(tail -1 "$TMP/s/gm.err");"
[[ -z $bad ]] || fail "the recorded configuration:$bad"
ok "the recorded configuration: allocator_settings round-trip field for field; tune and frag say PyTorch's PYTORCH_CUDA_ALLOC_CONF for its snapshots, gpumem's GPUMEM_CONF for its recordings"

# --- (3) usage
set +e
echo 'not a database' > "$TMP/user.txt"
"$GM" import "$TMP/s/full-p2.pickle" -o "$TMP/user.txt" 2> "$TMP/e1"; rc1=$?
"$GM" import "$TMP/s/full-p2.pickle" 2> "$TMP/e2"; rc2=$?
"$GM" import --help > "$TMP/e3"; rc3=$?
set -e
[[ $rc1 -eq 2 ]] && grep -q 'exists.*--force' "$TMP/e1" || fail "existing output: rc $rc1, $(cat "$TMP/e1")"
[[ $rc2 -eq 2 && $rc3 -eq 0 ]] || fail "import usage: rc $rc2 (no -o), $rc3 (--help)"
[[ $(cat "$TMP/user.txt") == "not a database" ]] || fail "import changed a user file"
"$GM" import --force "$TMP/s/full-p2.pickle" -o "$TMP/user.txt" 2> /dev/null || fail "import --force"
"$GM" report "$TMP/user.txt" > /dev/null || fail "--force did not write a database"
"$GM" import "$TMP/s/notrace.pickle" -o "$db" 2> /dev/null || fail "import over an earlier database"
[[ $(sqlite3 "$db" "SELECT count(*) FROM ooms") -eq 0 ]] || fail "the earlier database was not replaced"
ok "usage: a user file is kept without --force (exit 2), replaced with it; an earlier database is replaced"
