#!/usr/bin/env bash
# advise_unannotated.sh — advise on a recording without names or NVTX ranges (issue 39, items 2
# and 5): the included trainer recorded with GPUMEM_NAMES=0 GPUMEM_NVTX=0. Its steps, phases and
# layers are inferred from its allocations; advise still finds recompute, offload, accumulation
# and set-to-none, says how it read the recording (the kernels included), and predicts the same
# peaks as on the annotated recording of the same run within 2% (tiny with real compute, gpt2 124M
# B 8 T 1024 dry run); --check re-runs one and measures it. A recording whose phases cannot be
# decided (2 steps of a loop whose first differs) gets no prediction and a note saying what to
# record, never a guess.
# Then a table of loops, training or not (tests/apps/churn_app.c: buffers made and freed, no
# backward), with and without NVTX "step N" ranges: the note says which parts came from NVTX
# and which were inferred; the step time is read from the "step N" ranges where they exist (the
# same figure as SQL over the ranges: after the first step, the lower median under 10 steps,
# else the mean without the longest and shortest tenth); accumulation and set-to-none are
# offered only where a backward was found; and the layers found do not depend on how many
# steps were recorded (the same loop, 50 and 400 steps: churn's sizes repeat by chance in one
# step of a hundred, never in every step).
set -uo pipefail
source "$(dirname "$0")/snapshot_common.bash"
TRAIN=$BUILD/train_gpt2_sim
need "$GPUMEM" "$TRAIN" "$BUILD/tests/apps/cat_app" "$BUILD/tests/apps/churn_app"
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
  techs=$(jq -r '[(.recommendations + .not_worth_it)[].technique] | unique | join(" ")' "$TMP/$name-off.json")
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

# ---- the table: loops training or not, steps from NVTX or inferred
CHURN=$BUILD/tests/apps/churn_app
# the step time as advise reads it, from SQL over the "step N" ranges
range_step_s() { # db
  sqlite3 "$1" "SELECT max(r.end_ns) - min(r.start_ns) FROM ranges r JOIN strings s ON s.id = r.name
                WHERE s.s GLOB 'step [0-9]*' GROUP BY s.s ORDER BY min(r.start_ns) LIMIT -1 OFFSET 1" | sort -n |
    awk '{ d[NR] = $1 } END { n = NR; if (n < 10) { printf "%.6f", d[int((n + 1) / 2)] / 1e9; exit }
                              t = int(n / 10); s = 0; for (i = t + 1; i <= n - t; i++) s += d[i]
                              printf "%.6f", s / (n - 2 * t) / 1e9 }'
}
# name | how it is recorded | steps from | backward found | layers: same as row
table="churn-nvtx|$CHURN 50 100 nw|phases|no|
churn-nvtx-long|$CHURN 400 100 n|phases|no|churn-nvtx
churn-same|$CHURN 8 100 r|inference|no|
churn-same-long|$CHURN 24 100 r|inference|no|churn-same
trainer|env GPUMEM_NAMES=0 GPUMEM_NVTX=0 $TRAIN --model tiny -B 4 -T 64 --steps 4|inference|yes|
trainer-long|env GPUMEM_NAMES=0 GPUMEM_NVTX=0 $TRAIN --model tiny -B 4 -T 64 --steps 7|inference|yes|trainer
trainer-annotated|$TRAIN --model tiny -B 4 -T 64 --steps 12|phases|yes|"
declare -A layers
while IFS='|' read -r name cmd from bwd same; do
  db=$TMP/t-$name.db
  # shellcheck disable=SC2086 # the command's words
  "$GPUMEM" record -q -o "$db" -- $cmd > /dev/null 2>&1 || fail "$name: recording $cmd"
  "$GPUMEM" advise --json "$db" > "$TMP/t-$name.json" || fail "$name: advise exited $?"
  j=$TMP/t-$name.json
  [[ $(jq -r .steps_from "$j") == "$from" ]] || fail "$name: steps_from $(jq -r .steps_from "$j"), want $from"
  note=$(jq -r '.notes[0]' "$j")
  if [[ $(jq -r .phases_from "$j") == inference ]]; then
    if [[ $from == phases ]]; then
      grepq 'steps are its NVTX "step N" ranges; forward / backward / update and [0-9]* layers .* were inferred' <<< "$note" \
        || fail "$name: the note does not say the steps came from NVTX and the phases were inferred: $note"
    else
      grepq 'no NVTX "step N" ranges or phases in this recording: its [0-9]* steps, forward / backward' <<< "$note" \
        || fail "$name: the note does not say the steps were inferred: $note"
    fi
    layers[$name]=$(grep -o '[0-9]* layers ([0-9]* allocations each)' <<< "$note")
    if [[ -n $same ]]; then
      [[ ${layers[$name]} == "${layers[$same]}" ]] \
        || fail "$name: layers depend on the steps recorded: '${layers[$name]}' here, '${layers[$same]}' in $same"
    fi
  fi
  if [[ $from == phases ]]; then
    want=$(range_step_s "$db")
    got=$(jq -r '.step_s' "$j")
    awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; exit !(d < 0.0000015 && d > -0.0000015) }' \
      || fail "$name: step_s $got, the \"step N\" ranges give $want"
    if [[ $bwd == no ]]; then
      # the text's 4 decimals against the ranges' figure: within half the text's last digit and
      # the 1.5 us step_s is allowed above. Compared as strings, a step near 50 us failed when
      # the two roundings fell on either side of 0.00005 (CI5 of stop 79: "0.0000" for "0.0001")
      line=$("$GPUMEM" advise "$db" | grep '^time')
      t=$(sed -n "s/^time: \([0-9.]*\) s\/step from the \"step N\" ranges' spans.*/\1/p" <<< "$line")
      awk -v t="$t" -v w="$want" 'BEGIN { d = t - w; exit !(t != "" && d <= 0.0000515 && d >= -0.0000515) }' \
        || fail "$name: the text's time line: $line (the ranges give $want s/step)"
    fi
  fi
  offered=$(jq -r '[(.recommendations + .combinations)[].techniques[]] | unique | join(" ")' "$j")
  withheld=$(jq -r '[.not_predicted[].technique] | join(" ")' "$j")
  if [[ $bwd == no ]]; then
    [[ " $offered " != *" accum "* && " $offered " != *" grad_none "* ]] \
      || fail "$name: no backward, yet advise offers $offered"
    [[ $withheld == "accum grad_none" ]] || fail "$name: not_predicted '$withheld', want accum grad_none"
    jq -r '.notes[]' "$j" | grepq 'no backward was found in this recording.*accumulation and set-to-none gradients are not proposed' \
      || fail "$name: no note on the missing backward: $(jq -c .notes "$j")"
    rc=0
    err=$("$GPUMEM" advise "$db" --try '--accum 2' 2>&1 > /dev/null) || rc=$?
    [[ $rc == 2 ]] && grepq 'is not predicted: no backward was found' <<< "$err" || fail "$name: --try '--accum 2': exit $rc: $err"
  else
    [[ " $offered " == *" accum "* && " $offered " == *" grad_none "* ]] || fail "$name: a training loop, advise offers only: $offered"
    [[ -z $withheld ]] || fail "$name: a training loop, yet not predicted: $withheld"
  fi
  echo "ok: $name: steps from $from, ${layers[$name]:-phases from NVTX}, step $(jq -r .step_s "$j") s, offers: ${offered:-nothing}${withheld:+, withholds $withheld}"
done <<< "$table"
