#!/usr/bin/env bash
# The virtual GPU against a real one, without a GPU: each program of the differential suite was
# run on an H200 (driver 580.159.04, CUDA runtime 13.0) by tests/gpu/diff_all.sh, and its output
# is kept in tests/diff/gpu-h200/PROG.out. Here the same program runs plainly on the virtual GPU
# (one device, 16 GiB, as diff_all.sh ran it), and the two outputs must be identical, except for
# lines listed, with the reason, in tests/diff/gpu-differences.txt:
#
#   program | ERE matched against an output line | reason
#
# A listed line is dropped from both outputs before they are compared; an entry no difference
# needs any more fails the check (stale): remove it. So every answer the sim models after the
# GPU stays as the GPU gave it, and every known gap is written down. Programs that cannot run on
# a GPU (implied_sync needs the sim's host kernels, streams passes made-up stream handles) have
# no recorded output. To refresh the recordings: tests/gpu/diff_all.sh DIR on a GPU, then copy
# DIR/PROG.gpu to tests/diff/gpu-h200/PROG.out.
set -uo pipefail
BUILD=${BUILD:-build}
BIN=$BUILD/tests/diff
TRUTH=tests/diff/gpu-h200
LIST=tests/diff/gpu-differences.txt
TMP=$(mktemp -d /tmp/gpumem-truth.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
unset GPUMEM_SIM_EVENT_DELAY GPUMEM_SIM_FAULTS GPUMEM_SIM_BACKING GPUMEM_SIM_PROFILE LD_PRELOAD
export GPUMEM_SIM_DEVICES=1 GPUMEM_SIM_MEMORY=16G

awk -F' [|] ' '!/^[[:space:]]*(#|$)/ {
  if (NF < 3 || $3 == "") { printf "%s:%d: expected 3 fields with a reason\n", FILENAME, NR > "/dev/stderr"; bad = 1 }
  print $1 "\t" $2 }
  END { exit bad }' "$LIST" > "$TMP/list" || exit 1

fails=0 n=0 dropped=0
declare -A used=()
for out in "$TRUTH"/*.out; do
  p=$(basename "$out" .out)
  [[ -x $BIN/$p ]] || { echo "FAIL: $BIN/$p is not built (make)"; fails=$((fails + 1)); continue; }
  n=$((n + 1))
  timeout 60 "$BIN/$p" > "$TMP/$p.sim" 2> "$TMP/$p.err"
  : > "$TMP/pats"
  while IFS=$'\t' read -r lp re; do
    [[ $lp == "$p" ]] && printf '%s\n' "$re" >> "$TMP/pats"
  done < "$TMP/list"
  if [[ -s $TMP/pats ]]; then
    grep -Ev -f "$TMP/pats" "$out" > "$TMP/a"
    grep -Ev -f "$TMP/pats" "$TMP/$p.sim" > "$TMP/b"
    while IFS= read -r re; do
      if grep -Eq -- "$re" "$out" "$TMP/$p.sim" && ! cmp -s <(grep -E -- "$re" "$out") <(grep -E -- "$re" "$TMP/$p.sim"); then
        used["$p|$re"]=1
        dropped=$((dropped + $(grep -Ec -- "$re" "$out")))
      fi
    done < "$TMP/pats"
  else
    cp "$out" "$TMP/a"
    cp "$TMP/$p.sim" "$TMP/b"
  fi
  if ! cmp -s "$TMP/a" "$TMP/b"; then
    echo "FAIL: $p: the virtual GPU answers otherwise than the H200 (< GPU, > virtual GPU)"
    diff "$TMP/a" "$TMP/b" | head -20
    fails=$((fails + 1))
  fi
done
while IFS=$'\t' read -r lp re; do
  if [[ -z ${used["$lp|$re"]:-} ]]; then
    echo "FAIL: stale entry in $LIST (no difference needs it now): $lp | $re"
    fails=$((fails + 1))
  fi
done < "$TMP/list"
echo "gpu truth: $n programs against the H200's outputs, $(wc -l < "$TMP/list") listed difference(s) ($dropped GPU line(s) set aside), $fails failure(s)"
[[ $fails -eq 0 ]]
