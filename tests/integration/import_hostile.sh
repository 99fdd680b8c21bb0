#!/usr/bin/env bash
# `gpumem import` never runs what a pickle asks and never falls over: pickles that call
# os.system (protocols 0, 2, 4, 5: GLOBAL, STACK_GLOBAL, REDUCE), build an OrderedDict, are
# truncated, empty, not pickles, the wrong shape, claim a 4 GiB string, refer to one segment a
# million times through the memo, or to one block or trace entry twice, or nest a million
# lists: each gets exit 3 and a one-line error that names the problem, the marker file
# os.system would create stays absent, no database is left behind, and memory stays bounded.
# Every input of the fuzzer's committed corpus gets exit 0 or 3, nothing else. A missing file
# is exit 3 too.
set -euo pipefail
BUILD=${BUILD:-build}
GM=$BUILD/gpumem
PY=${GPUMEM_TEST_PYTHON:-/usr/bin/python3}
[[ -x $GM ]] || { echo "skipped: $GM is not built" >&2; exit 77; }
[[ -x $PY ]] || { echo "skipped: $PY is not installed" >&2; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir "$TMP/h"
"$PY" tests/integration/py/make_hostile.py "$TMP/h" "$TMP/pwned" > /dev/null || fail "make_hostile.py failed"
[[ ! -e $TMP/pwned ]] || fail "the generator itself ran the payload"
declare -A want=(
  [system-p0.pickle]='not a pickle of protocol 2'
  [system-p2.pickle]="GLOBAL 'posix.system' refused"
  [system-p4.pickle]="STACK_GLOBAL 'posix.system' refused"
  [system-p5.pickle]="STACK_GLOBAL 'posix.system' refused"
  [ordereddict.pickle]="STACK_GLOBAL 'collections.OrderedDict' refused"
  [truncated.pickle]='cut short'
  [damaged.pickle]='a length of 2130706432 bytes here runs past the end .*: the pickle is damaged at byte [0-9]'
  [empty.pickle]='empty'
  [text.pickle]='not a pickle'
  [list.pickle]='no dict'
  [nosegments.pickle]="no 'segments'"
  [hugestr.pickle]='a length of 4294967280 bytes here runs past the end'
  [memo-bomb.pickle]='refused as hostile'
  [memo-fanout.pickle]='refers to one block more than once'
  [memo-entry.pickle]='refers to one trace entry more than once'
  [deep.pickle]='no dict'
  [append-int.pickle]='APPEND to something that is not a list'
  [badmemo.pickle]='memo entry 7 that was never stored'
  [pop-empty.pickle]='empty stack'
)
n=0
timer=(); [[ -x /usr/bin/time ]] && timer=(/usr/bin/time -f '%M' -o "$TMP/rss")
echo 0 > "$TMP/rss"
for f in "${!want[@]}"; do
  set +e
  "${timer[@]}" "$GM" import "$TMP/h/$f" -o "$TMP/out.db" > "$TMP/out" 2> "$TMP/err"; rc=$?
  set -e
  err=$(grep -v '^[0-9]*$' "$TMP/err" || true)
  [[ $rc -eq 3 ]] || fail "$f: exit $rc, expected 3 ($err)"
  [[ $(printf '%s\n' "$err" | wc -l) -eq 1 ]] || fail "$f: the error is not one line: $err"
  grep -q "${want[$f]}" <<< "$err" || fail "$f: error '$err' does not say '${want[$f]}'"
  [[ $err == "gpumem import: $TMP/h/$f: "* ]] || fail "$f: the error does not name the file: $err"
  [[ ! -e $TMP/out.db && ! -e $TMP/out.db.importing ]] || fail "$f: a database was left behind"
  rss=$(tail -1 "$TMP/rss") # peak resident KiB (0 without /usr/bin/time)
  [[ $rss -lt 400000 ]] || fail "$f: $rss KiB of memory"
  n=$((n + 1))
done
[[ ! -e $TMP/pwned ]] || fail "a pickle ran os.system"
echo "ok: $n hostile or damaged pickles: exit 3, one line naming the problem, nothing run, nothing written"
set +e
"$GM" import "$TMP/missing.pickle" -o "$TMP/out.db" 2> "$TMP/err"; rc=$?
set -e
[[ $rc -eq 3 && $(wc -l < "$TMP/err") -eq 1 ]] && grep -q 'cannot open' "$TMP/err" || fail "missing file: rc $rc, $(cat "$TMP/err")"
# a FIFO no writer opens: refused by its type at once, never a wait for the writer
mkfifo "$TMP/fifo"
set +e
timeout 20 "$GM" import "$TMP/fifo" -o "$TMP/out.db" 2> "$TMP/err"; rc=$?
set -e
[[ $rc -eq 3 ]] && grep -q 'is not a regular file' "$TMP/err" || fail "a FIFO without a writer: rc $rc, $(cat "$TMP/err")"
c=0
for f in tests/fuzz/corpus/pickle/*; do
  set +e
  "$GM" import "$f" -o "$TMP/c.db" > /dev/null 2> "$TMP/err"; rc=$?
  set -e
  [[ $rc -eq 0 || $rc -eq 3 ]] || fail "corpus input $f: exit $rc: $(cat "$TMP/err")"
  [[ $rc -eq 0 || $(wc -l < "$TMP/err") -eq 1 ]] || fail "corpus input $f: $(cat "$TMP/err")"
  rm -f "$TMP/c.db"
  c=$((c + 1))
done
[[ ! -e $TMP/pwned ]] || fail "a corpus input ran os.system"
# what PyTorch does share is not refused: one frames list for a block and its trace entry
# (py_symbolize hands out one list per traceback), and the same empty list twice
"$PY" - "$TMP/shared.pickle" << 'PYEOF'
import pickle, sys
frames = [{"filename": "train.py", "line": 3, "name": "step"}]
blk = {"address": 4096, "size": 512, "requested_size": 500, "state": "active_allocated",
       "frames": frames}
seg = {"device": 0, "address": 4096, "total_size": 2 << 20, "stream": 0, "blocks": [blk]}
ent = {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 1, "frames": frames}
empty = []
with open(sys.argv[1], "wb") as f:
    pickle.dump({"segments": [seg], "device_traces": [[ent], empty, empty]}, f, protocol=4)
PYEOF
"$GM" import "$TMP/shared.pickle" -o "$TMP/s.db" > "$TMP/out" 2> "$TMP/err" ||
  fail "shared frames: $(cat "$TMP/err")"
grep -q '(2 events)' "$TMP/out" "$TMP/err" || fail "shared frames: $(cat "$TMP/out" "$TMP/err")"
echo "ok: a frames list shared by a block and its trace entry, an empty list twice: imported"
echo "ok: a missing file exits 3; the fuzzer's $c corpus inputs exit 0 or 3"
