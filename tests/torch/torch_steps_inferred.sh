#!/usr/bin/env bash
# torch_steps_inferred.sh — the steps gpumem infers from a PyTorch recording's periodicity (no
# "step N" ranges and no hooks, or a loop the hooks see no step in) against what the program
# measured (tests/integration/steps_inferred.sh: the same rules on C programs). Two defects of
# 2026-12-07:
#   evalhooks under --no-torch-hooks (tests/torch/torch_truths.py: 4 training steps, then one
#        evaluation forward on a larger batch): "no repeating pattern ... record at least 3 steps"
#        although there were 4, every tensor "other". Now 4 steps, each one's highest moment
#        PyTorch's max_memory_allocated over its iteration (the script's "peaks"), the
#        evaluation's 216.52 MiB in none of them;
#   stream (tests/torch/torch_features.py: 3 iterations, each a 32 MiB tensor and its 32 MiB clone
#        on a side stream, no model, no backward): 6 steps of 1 allocation, and 32 MiB
#        "activations" in steps 1-4. Now 3 steps of 2, no backward (categories.backward false),
#        no activation anywhere.
# And one of 2026-12-07 (tests/integration/steps_inferred.sh's cat-next on a C loop): evalhooks'
# loop makes its next input before it drops the last one and zero_grad frees the gradients, and
# the steps began after that input, where the fewest bytes are alive: the last input, held after
# the loop, was "optimizer state" at the evaluation's peak (4728832 bytes of it, no activation),
# the others "other", the gradients, once each step began with its input, "other". Now the
# categories at the peak are the evalranged run's (its "step N" ranges).
# Table: KIND#SCRIPT#RECORD FLAGS#jq filter over report --json's .torch.categories#want ($peaks:
# the script's printed peaks, the last one the evaluation's).
set -uo pipefail
source "$(dirname "$0")/common.bash"
steps='[.steps_from, .phases_from, .steps, .period, .backward] | map(tostring) | join(" ")'
table=(
  "evalhooks#tests/torch/torch_truths.py#--no-torch-hooks#$steps#inference inference 4 23 true"
  "evalhooks#tests/torch/torch_truths.py#--no-torch-hooks#[.over_time[].total] == \$peaks[0:4]#true"
  "evalhooks#tests/torch/torch_truths.py#--no-torch-hooks#[.sources_at_peak[] | add] | map(tostring) | join(\" \")#2102272 2102272 4204544 524288 150994944 67108864 0"
  "stream#tests/torch/torch_features.py#-#$steps#inference inference 3 2 false"
  "stream#tests/torch/torch_features.py#-#[([.over_time[].activations] | add), (.sources_at_peak.activations | add)] | map(tostring) | join(\" \")#0 0"
)
for row in "${table[@]}"; do
  IFS='#' read -r kind script flags filter want <<< "$row"
  [[ $flags == - ]] && flags=
  db=$tmp/$kind.db
  if [[ ! -f $db ]]; then
    # shellcheck disable=SC2086 # the flags' words
    GPUMEM_SIM_BACKING=memory "$G" record -q $flags -o "$db" -- "$torch_py" "$script" "$kind" > "$db.out" 2>&1
    [[ -f $db ]] || { bad "$kind: the recording failed: $(tail -3 "$db.out")"; continue; }
    "$G" report --json "$db" > "$db.json" 2> "$tmp/err" || { bad "$kind: report exited $?: $(tail -3 "$tmp/err")"; continue; }
  fi
  peaks=$(awk '$1 == "peaks" { print "[" $2 "]" }' "$db.out")
  got=$(jq -r --argjson peaks "${peaks:-null}" ".torch.categories | $filter" "$db.json" 2>&1 | paste -sd' ')
  [[ $got == "$want" ]] && ok "$kind: $filter = $want" || bad "$kind: $filter = '$got', want '$want'"
done
exit $fail
