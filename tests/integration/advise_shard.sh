#!/usr/bin/env bash
# `gpumem advise DB --ranks N`: ZeRO-1/2 predicted from a one-rank recording of the tiny trainer.
#  - ZeRO-0 is the recording itself: its prediction equals the recorded peaks;
#  - the rewritten sizes are exact: every optimizer-state tensor (adam.m.*, adam.v.*) becomes
#    ceil(n / N) fp32 elements, summed over the recording's own tensors, for N = 2 and 3;
#  - the ZeRO-1 prediction is the replay of that trace: the exported trace with those sizes,
#    replayed by gpumem-replay, gives the same peak allocated and reserved;
#  - ZeRO-2 shards the gradients (ceil(n / N) elements each), places every reduce-scatter from
#    the recorded uses, and predicts a peak no larger than ZeRO-1's, which is below ZeRO-0's;
#  - --zero 1 prints ZeRO-0 and ZeRO-1 only; the text names the global batch; bad options exit 2;
#  - without uses (GPUMEM_USES=0) ZeRO-2 says so and predicts no lower a peak.
source "$(dirname "$0")/e2e_common.bash"
export GPUMEM_STACKS=0
REPLAY=$BUILD/alloc/gpumem-replay
[[ -x $REPLAY ]] || { echo "skipped: $REPLAY is not built" >&2; exit 77; }

"$GM" record -q -o "$TMP/t.db" -- "$TRAIN" --steps 3 -B 4 > "$TMP/out.txt" 2>&1 || fail "tiny run: $(tail -3 "$TMP/out.txt")"

# the recording's optimizer state and gradients, by name
"$GM" sql "$TMP/t.db" -c "SELECT id, requested, name FROM allocations WHERE name LIKE 'adam.%' ORDER BY id" \
  | tr '|' ' ' > "$TMP/state.txt"
"$GM" sql "$TMP/t.db" -c "SELECT requested FROM allocations WHERE name LIKE 'grad.%'" > "$TMP/grads.txt"
nstate=$(wc -l < "$TMP/state.txt")
(( nstate > 0 )) || fail "no adam.* allocations in the recording"

for N in 2 3; do
  "$GM" advise "$TMP/t.db" --ranks $N --json > "$TMP/a$N.json" || fail "advise --ranks $N failed"
  jq -e '.predictions | map(.zero) == [0, 1, 2]' "$TMP/a$N.json" > /dev/null || fail "N=$N: not zero 0, 1, 2"
  jq -e '.predictions[0].peak_allocated == .recorded.peak_allocated and
         .predictions[0].peak_reserved == .recorded.peak_reserved' "$TMP/a$N.json" > /dev/null \
    || fail "N=$N: ZeRO-0 $(jq -c '.predictions[0]' "$TMP/a$N.json") is not the recording $(jq -c .recorded "$TMP/a$N.json")"
  want_full=$(awk '{ s += $2 } END { print s }' "$TMP/state.txt")
  want_shard=$(awk -v n=$N '{ e = int(($2 + 3) / 4); s += int((e + n - 1) / n) * 4 } END { print s }' "$TMP/state.txt")
  jq -e --argjson f "$want_full" --argjson s "$want_shard" \
    '.predictions[1].optimizer_state_bytes == $f and .predictions[1].optimizer_state_shard_bytes == $s' \
    "$TMP/a$N.json" > /dev/null \
    || fail "N=$N: optimizer state $(jq -c '.predictions[1] | [.optimizer_state_bytes, .optimizer_state_shard_bytes]' "$TMP/a$N.json") want [$want_full, $want_shard]"
  gwant=$(awk -v n=$N '{ e = int(($1 + 3) / 4); s += int((e + n - 1) / n) * 4 } END { print s }' "$TMP/grads.txt")
  gfull=$(awk '{ s += $1 } END { print s }' "$TMP/grads.txt")
  jq -e --argjson f "$gfull" --argjson s "$gwant" \
    '.predictions[2].gradient_bytes == $f and .predictions[2].gradient_shard_bytes == $s and .predictions[2].gradients_from_uses > 0' \
    "$TMP/a$N.json" > /dev/null \
    || fail "N=$N: gradients $(jq -c '.predictions[2] | [.gradient_bytes, .gradient_shard_bytes, .gradients_from_uses]' "$TMP/a$N.json") want [$gfull, $gwant, >0]"
  ok "N=$N: optimizer state $want_full -> $want_shard bytes, gradients $gfull -> $gwant bytes, as ceil(n/N) elements"

  # the known replay: the recorded trace with the state's sizes rewritten
  "$GM" export "$TMP/t.db" --format trace -o "$TMP/t.trace" || fail "export trace"
  awk -v n=$N 'NR == FNR { sz[$1] = $2; next }
               $1 == "a" && ($2 in sz) { e = int(($3 + 3) / 4); $3 = int((e + n - 1) / n) * 4 } { print }' \
    "$TMP/state.txt" "$TMP/t.trace" > "$TMP/z1.trace"
  cmp -s "$TMP/t.trace" "$TMP/z1.trace" && fail "N=$N: the hand-made ZeRO-1 trace changed nothing"
  "$REPLAY" --preset gpumem "$TMP/z1.trace" > "$TMP/r.txt" || fail "gpumem-replay: $(cat "$TMP/r.txt")"
  pa=$(tr ' ' '\n' < "$TMP/r.txt" | awk -F= '$1 == "peak_allocated" { print $2; exit }')
  pr=$(tr ' ' '\n' < "$TMP/r.txt" | awk -F= '$1 == "peak_reserved" { print $2; exit }')
  jq -e --argjson a "$pa" --argjson r "$pr" '.predictions[1].peak_allocated == $a and .predictions[1].peak_reserved == $r' \
    "$TMP/a$N.json" > /dev/null \
    || fail "N=$N: ZeRO-1 predicted $(jq -c '.predictions[1] | [.peak_allocated, .peak_reserved]' "$TMP/a$N.json"), the rewritten trace replays to [$pa, $pr]"
  jq -e '.predictions[2].peak_allocated <= .predictions[1].peak_allocated and
         .predictions[1].peak_allocated < .predictions[0].peak_allocated' "$TMP/a$N.json" > /dev/null \
    || fail "N=$N: peaks not ZeRO-2 <= ZeRO-1 < ZeRO-0: $(jq -c '[.predictions[].peak_allocated]' "$TMP/a$N.json")"
  ok "N=$N: ZeRO-1 predicted = the rewritten trace's replay ($pa allocated, $pr reserved); peaks $(jq -c '[.predictions[].peak_allocated]' "$TMP/a$N.json")"
done

"$GM" advise "$TMP/t.db" --ranks 2 --zero 1 --json > "$TMP/z.json" || fail "--zero 1"
jq -e '.predictions | map(.zero) == [0, 1] and (.[1].flags == "-B 8 --zero 1")' "$TMP/z.json" > /dev/null \
  || fail "--ranks 2 --zero 1: $(jq -c '.predictions | map([.zero, .flags])' "$TMP/z.json")"
"$GM" advise "$TMP/t.db" --ranks 2 > "$TMP/z.txt" || fail "text"
grep -q -- "-B 8" "$TMP/z.txt" || fail "the text does not give the global batch: $(cat "$TMP/z.txt")"
set +e
"$GM" advise "$TMP/t.db" --zero 4 --ranks 2 > /dev/null 2>&1; rc1=$?
"$GM" advise "$TMP/t.db" --zero 1 > /dev/null 2>&1; rc2=$?
"$GM" advise "$TMP/t.db" --ranks 0 > /dev/null 2>&1; rc3=$?
"$GM" advise "$TMP/t.db" --prefetch 1 > /dev/null 2>&1; rc4=$?
"$GM" advise "$TMP/t.db" --ranks 2 --prefetch -1 > /dev/null 2>&1; rc5=$?
set -e
[[ $rc1 == 2 && $rc2 == 2 && $rc3 == 2 && $rc4 == 2 && $rc5 == 2 ]] || fail "bad options exit $rc1 $rc2 $rc3 $rc4 $rc5, want 2"
ok "--zero 1 alone, text with the global batch, bad options exit 2"

# without uses the reduce-scatters fall back to the end of the backward: said, never lower
GPUMEM_USES=0 "$GM" record -q -o "$TMP/nu.db" -- "$TRAIN" --steps 3 -B 4 > /dev/null 2>&1 || fail "run without uses"
"$GM" advise "$TMP/nu.db" --ranks 2 --json > "$TMP/nu.json" || fail "advise without uses"
jq -e --argjson u "$(jq '.predictions[2].peak_allocated' "$TMP/a2.json")" \
  '.predictions[2].gradients_from_uses == 0 and .predictions[2].peak_allocated >= $u' "$TMP/nu.json" > /dev/null \
  || fail "without uses: $(jq -c '.predictions[2]' "$TMP/nu.json")"
"$GM" advise "$TMP/nu.db" --ranks 2 | grepq "no uses recorded" || fail "without uses: no note in the text"
ok "without uses: ZeRO-2 reduce-scatters at the end of the backward, said in the text"
