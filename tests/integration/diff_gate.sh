#!/usr/bin/env bash
# `gpumem diff A.db B.db`: the trainer with --leak (B) against the same run without (A), over
# 300 steps (dry run on virtual memory: the leaked loss tensors, 8 KiB a step, pass 5% of the
# peak reserved). Side by side: peaks, utilization, allocations per step, alive at exit, the
# tensor classes and call sites at each peak, with deltas; --json carries the same figures as
# `gpumem report`; --fail-if-peak-grows 5 exits 1 on B against A with one line on stderr, 0 on
# A against itself and with a limit above the growth. Usage errors exit 2, a missing file 3.
source "$(dirname "$0")/e2e_common.bash"
export GPUMEM_SIM_BACKING=virtual GPUMEM_RING=1048576
args=(--model tiny --steps 300 -B 8 -T 256 --dry-run)
"$GM" record -q -o "$TMP/a.db" -- "$TRAIN" "${args[@]}" > "$TMP/a.txt" 2>&1 || fail "trainer: $(tail -3 "$TMP/a.txt")"
"$GM" record -q -o "$TMP/b.db" -- "$TRAIN" "${args[@]}" --leak > "$TMP/b.txt" 2>&1 || fail "trainer --leak: $(tail -3 "$TMP/b.txt")"
for d in a b; do
  dropped=$(sqlite3 "$TMP/$d.db" "SELECT value FROM meta WHERE key = 'dropped_events'")
  [[ $dropped == 0 ]] || fail "$d.db dropped events ('$dropped': a number above 0, or no such row)"
  "$GM" report --json "$TMP/$d.db" > "$TMP/$d.json"
done

# --- the gate
set +e
"$GM" diff "$TMP/a.db" "$TMP/b.db" --fail-if-peak-grows 5 > "$TMP/d.txt" 2> "$TMP/d.err"; rc=$?
set -e
cat "$TMP/d.txt"
[[ $rc -eq 1 ]] || fail "--fail-if-peak-grows 5 exited $rc on the leaking run, expected 1"
[[ $(wc -l < "$TMP/d.err") -eq 1 ]] && grep -q 'peak reserved grew .* more than the 5% allowed' "$TMP/d.err" \
  || fail "gate message: $(cat "$TMP/d.err")"
pa=$(jq .summary.peak_reserved "$TMP/a.json"); pb=$(jq .summary.peak_reserved "$TMP/b.json")
growth=$(awk -v a="$pa" -v b="$pb" 'BEGIN { printf "%.1f", 100 * (b - a) / a }')
"$GM" diff "$TMP/a.db" "$TMP/a.db" --fail-if-peak-grows 5 > /dev/null || fail "a run against itself failed the gate"
"$GM" diff "$TMP/a.db" "$TMP/b.db" --fail-if-peak-grows 50 > /dev/null || fail "a ${growth}% growth failed a 50% gate"
"$GM" diff "$TMP/b.db" "$TMP/a.db" --fail-if-peak-grows 0 > /dev/null || fail "a shrinking peak failed the gate"
echo "ok: gate: peak reserved $pa -> $pb (+$growth%) exits 1 at 5%, 0 at 50%, 0 against itself and when it shrinks"

# --- the table and the JSON
grep -q '^  peak reserved .*+' "$TMP/d.txt" || fail "no peak reserved line with a delta"
grep -q '^  utilization' "$TMP/d.txt" && grep -q '^  allocations/step' "$TMP/d.txt" || fail "utilization / allocations per step missing"
first_class=$(awk '/^tensor classes/ { getline; print $NF; exit }' "$TMP/d.txt")
[[ $first_class == losses ]] || fail "the class that grew most is '$first_class', expected losses"
"$GM" diff --json "$TMP/a.db" "$TMP/b.db" > "$TMP/d.json" || fail "diff --json"
for k in peak_requested peak_allocated peak_reserved; do
  [[ $(jq ".a.$k" "$TMP/d.json") == $(jq ".summary.$k" "$TMP/a.json") ]] || fail "json a.$k differs from the report"
  [[ $(jq ".b.$k" "$TMP/d.json") == $(jq ".summary.$k" "$TMP/b.json") ]] || fail "json b.$k differs from the report"
  [[ $(jq ".delta.$k" "$TMP/d.json") == $(( $(jq ".summary.$k" "$TMP/b.json") - $(jq ".summary.$k" "$TMP/a.json") )) ]] || fail "json delta.$k"
done
leaked=$(( 300 * 8 * 256 * 4 ))
[[ $(jq .delta.alive_at_exit "$TMP/d.json") -ge $leaked ]] || fail "alive at exit delta $(jq .delta.alive_at_exit "$TMP/d.json") < $leaked"
[[ $(jq -r '.classes[0].class' "$TMP/d.json") == losses && $(jq '.classes[0].a' "$TMP/d.json") == 0 ]] || fail "json classes: $(jq -c '.classes[0]' "$TMP/d.json")"
[[ $(jq -r '.sites[0].site' "$TMP/d.json") == *'forward (gpt2.c:'* ]] || fail "json sites: $(jq -c '.sites[0]' "$TMP/d.json")"
[[ $(jq .a.steps "$TMP/d.json") -eq 300 && $(jq .b.steps "$TMP/d.json") -eq 300 ]] || fail "steps: $(jq -c '[.a.steps, .b.steps]' "$TMP/d.json")"
echo "ok: table and --json: peaks as the report's, losses the class that grew (+$(jq '.classes[0].delta' "$TMP/d.json") bytes at the peak), its site $(jq -r '.sites[0].site' "$TMP/d.json")"

# --- bad input
set +e
"$GM" diff "$TMP/a.db" > /dev/null 2>&1; r1=$?
"$GM" diff "$TMP/a.db" "$TMP/b.db" --fail-if-peak-grows much > /dev/null 2>&1; r2=$?
"$GM" diff "$TMP/a.db" "$TMP/nope.db" > /dev/null 2> "$TMP/e3"; r3=$?
set -e
[[ $r1 -eq 2 && $r2 -eq 2 && $r3 -eq 3 ]] || fail "bad input exit codes: $r1 $r2 $r3 (expected 2 2 3)"
[[ $(wc -l < "$TMP/e3") -eq 1 ]] || fail "missing database: $(cat "$TMP/e3")"
echo "ok: bad input: one database or a bad percentage exit 2, a missing database 3"
