#!/usr/bin/env bash
# advise_unannotated.sh — advise on a recording without names or NVTX ranges (issue 39, items 2
# and 5): the included trainer recorded with GPUMEM_NAMES=0 GPUMEM_NVTX=0. Its steps, phases and
# layers are inferred from its allocations; advise still finds recompute, offload, accumulation
# and set-to-none, says how it read the recording (the kernels included), and predicts the same
# peaks as on the annotated recording of the same run within 2% (tiny with real compute, gpt2 124M
# B 8 T 1024 dry run); --check re-runs one and measures it. A recording whose phases cannot be
# decided (2 steps of a loop whose first differs) gets no prediction and a note saying what to
# record, never a guess.
set -uo pipefail
source "$(dirname "$0")/snapshot_common.bash"
TRAIN=$BUILD/train_gpt2_sim
need "$GPUMEM" "$TRAIN" "$BUILD/tests/apps/cat_app"
BAR=2
tries=("--recompute layer" "--offload activations" "--accum 2" "--accum 4" "--grad-none" "--offload optimizer"
       "--act-dtype bf16" "--recompute layer --accum 2" "--offload activations --grad-none" "--accum 2 --grad-none --act-dtype bf16")

run() { # NAME ARGS...
  local name=$1
  shift
  "$GPUMEM" record -q -o "$TMP/$name-on.db" -- "$TRAIN" "$@" > /dev/null 2>&1 || fail "$name: recording"
  GPUMEM_NAMES=0 GPUMEM_NVTX=0 "$GPUMEM" record -q -o "$TMP/$name-off.db" -- "$TRAIN" "$@" > /dev/null 2>&1 \
    || fail "$name: recording without names and NVTX"
  "$GPUMEM" advise --json "$TMP/$name-off.db" > "$TMP/$name-off.json" || fail "$name: advise"
  [[ $(jq -r .phases_from "$TMP/$name-off.json") == inference ]] || fail "$name: phases_from $(jq -r .phases_from "$TMP/$name-off.json")"
  jq -r '.notes[]' "$TMP/$name-off.json" | grepq 'inferred from its allocations.*the backward begins with kernel train_.*the update runs train_adamw' \
    || fail "$name: the note on how the recording was read: $(jq -c .notes "$TMP/$name-off.json")"
  local techs
  techs=$(jq -r '[.recommendations[].technique] | unique | join(" ")' "$TMP/$name-off.json")
  for t in recompute offload accum grad_none; do
    [[ " $techs " == *" $t "* ]] || fail "$name: unannotated, advise does not find $t (it finds: $techs)"
  done
  echo "ok: $name unannotated: advise finds $techs, phases and layers inferred ($(jq -r '.notes[0]' "$TMP/$name-off.json" | grep -o '[0-9]* layers'))"
  local worst=0 t a b e
  for t in "${tries[@]}"; do
    a=$("$GPUMEM" advise --json --try "$t" "$TMP/$name-on.db" | jq -c '.plan.predicted // .recommendations[0].predicted')
    b=$("$GPUMEM" advise --json --try "$t" "$TMP/$name-off.db" | jq -c '.plan.predicted // .recommendations[0].predicted')
    e=$(jq -n --argjson a "$a" --argjson b "$b" \
      '[(($b.peak_allocated - $a.peak_allocated) | fabs) / $a.peak_allocated, (($b.peak_reserved - $a.peak_reserved) | fabs) / $a.peak_reserved] | max * 100')
    printf '  %-42s annotated %s, unannotated %s: %.3f%%\n' "$t" "$a" "$b" "$e"
    worst=$(awk -v w="$worst" -v e="$e" 'BEGIN { print (e > w ? e : w) }')
  done
  awk -v w="$worst" -v b=$BAR 'BEGIN { exit !(w <= b) }' || fail "$name: predictions differ by up to $worst% (bar $BAR%)"
  printf "ok: %s: predictions on the unannotated recording within %.3f%% of the annotated one's (bar %s%%)\n" "$name" "$worst" "$BAR"
}

run tiny --model tiny -B 4 -T 64 --steps 4
GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G run gpt2 --model gpt2 -B 8 -T 1024 --steps 3 --dry-run

# --check on the unannotated recording: the re-run measures what was predicted
GPUMEM_NAMES=0 GPUMEM_NVTX=0 "$GPUMEM" advise --json --check --try '--recompute layer' "$TMP/tiny-off.db" > "$TMP/check.json" \
  || fail "--check: $(head -c 300 "$TMP/check.json")"
read -r pa ma < <(jq -r '.plan // .recommendations[0] | "\(.predicted.peak_allocated) \(.measured.peak_allocated)"' "$TMP/check.json")
[[ $pa == "$ma" ]] || fail "--check --recompute layer: predicted $pa, measured $ma"
echo "ok: --check --try '--recompute layer' on the unannotated recording: predicted = measured peak allocated ($pa)"

# phases that cannot be decided: no prediction, and what to record
"$GPUMEM" record -q -o "$TMP/two.db" -- "$BUILD/tests/apps/cat_app" 2 > /dev/null 2>&1 || fail "cat_app"
"$GPUMEM" advise --json "$TMP/two.db" > "$TMP/two.json" || fail "advise two"
[[ $(jq -r '.phases_from' "$TMP/two.json") == null && $(jq '.recommendations | length' "$TMP/two.json") == 0 ]] \
  || fail "2 steps: $(jq -c '[.phases_from, (.recommendations | length)]' "$TMP/two.json")"
jq -r '.notes[]' "$TMP/two.json" | grepq 'cannot be told apart.*NVTX ranges.*hooks' || fail "2 steps: notes $(jq -c .notes "$TMP/two.json")"
"$GPUMEM" advise "$TMP/two.db" > "$TMP/two.txt"
grep -q 'in short: not known' "$TMP/two.txt" || fail "2 steps: the text guesses: $(head -12 "$TMP/two.txt")"
echo "ok: phases not decidable (2 steps): no prediction, the note asks for NVTX ranges or the hooks"
