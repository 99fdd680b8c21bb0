#!/usr/bin/env bash
# The analyses that replay on every core (tune's configurations, advise's candidates, frag's
# replays: gm_parallel_for in snapshot/analyze/gm_replay.c) give the same answer whatever the
# threads' interleaving, and the recorder's writer thread records beside the program. Run under
# ThreadSanitizer (make test SAN=thread; halt_on_error: a race report fails the command), and in
# the plain build. One recording of the trainer (GPT-2 124M, B 2, T 128, --seq-jitter, 6 steps,
# dry run) under preset:pytorch, then each analysis twice:
#   same     the two runs' JSON are equal but for tune's wall time (`seconds`);
#   exact    the recorded configuration replays to the recorded peak reserved, in tune, frag and
#            advise's baseline alike (a replay that raced with another would not);
#   all      tune replayed every preset, advise evaluated more than one candidate (so both used
#            several threads on a machine with several cores).
# snapshot_tune.sh checks what tune recommends on a larger recording; this is its threads' part,
# small enough for ThreadSanitizer.
set -euo pipefail
BUILD=${BUILD:-build}
GM=$BUILD/gpumem TRAIN=$BUILD/train_gpt2_sim
for f in "$GM" "$TRAIN"; do [[ -x $f ]] || { echo "analyses_threads: $f not built" >&2; exit 1; }; done
command -v jq > /dev/null || { echo "analyses_threads: jq missing (make deps)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gmthreads-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail() { echo "analyses_threads: FAIL: $*" >&2; exit 1; }
export GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G

GPUMEM_CONF=preset:pytorch "$GM" record -q -o "$TMP/r.db" -- "$TRAIN" --model gpt2 -B 2 -T 128 \
  --dry-run --steps 6 --seq-jitter --seed 5 > "$TMP/train.txt" 2>&1 || { tail -5 "$TMP/train.txt"; fail "recording"; }

for i in 1 2; do
  "$GM" tune --json "$TMP/r.db" > "$TMP/tune$i.json" || fail "tune --json exited $? (run $i)"
  "$GM" advise --json "$TMP/r.db" > "$TMP/advise$i.json" || fail "advise --json exited $? (run $i)"
  "$GM" frag --json "$TMP/r.db" > "$TMP/frag$i.json" || fail "frag --json exited $? (run $i)"
done

# same
cmp -s <(jq -S 'del(.seconds)' "$TMP/tune1.json") <(jq -S 'del(.seconds)' "$TMP/tune2.json") \
  || fail "tune's two runs differ: $(diff <(jq -S 'del(.seconds)' "$TMP/tune1.json") <(jq -S 'del(.seconds)' "$TMP/tune2.json") | sed -n 1,6p)"
for a in advise frag; do
  cmp -s "$TMP/${a}1.json" "$TMP/${a}2.json" \
    || fail "$a's two runs differ: $(diff <(jq -S . "$TMP/${a}1.json") <(jq -S . "$TMP/${a}2.json") | sed -n 1,6p)"
done

# exact
rec=$(jq -r '.recorded.peak_reserved' "$TMP/tune1.json")
[[ $rec =~ ^[0-9]+$ && $rec -gt 0 ]] || fail "tune's recorded peak reserved is '$rec'"
got=$(jq -r '[.results[] | select(.conf == "preset:pytorch")][0].peak_reserved' "$TMP/tune1.json")
[[ $got == "$rec" ]] || fail "tune replays the recorded configuration to $got, recorded $rec"
got=$(jq -r '.recorded.replayed_peak_reserved' "$TMP/frag1.json")
[[ $got == "$rec" ]] || fail "frag replays the recorded configuration to $got, recorded $rec"
got=$(jq -r '.baseline.peak_reserved' "$TMP/advise1.json")
[[ $got == "$rec" ]] || fail "advise's baseline is $got, recorded $rec"

# all
jq -e '[.results[] | select(.preset) | .conf] | (index("preset:gpumem") != null and index("preset:pytorch") != null
  and index("preset:pytorch-expandable") != null and index("preset:nocache") != null)' "$TMP/tune1.json" > /dev/null \
  || fail "tune did not replay every preset"
n=$(jq '.recommendations | length' "$TMP/advise1.json")
[[ $n -gt 1 ]] || fail "advise evaluated $n candidates"
echo "ok: tune ($(jq '.results | length' "$TMP/tune1.json") configurations), advise ($n candidates) and frag answer alike twice; the recorded configuration replays to $rec in each"
