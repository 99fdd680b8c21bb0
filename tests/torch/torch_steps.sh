#!/usr/bin/env bash
# torch_steps.sh — the steps `gpumem record`'s PyTorch hooks mark are the program's own: a step
# ends at an optimizer's step and the next begins with the next forward or backward, so two
# optimizers stepped one after the other (an encoder's and a head's; scaler.step(o1);
# scaler.step(o2)) are one step, and one optimizer stepped twice with no pass between is two.
# Table: the loop (tests/torch/torch_steps.py KIND), its steps; each under the C hooks and the
# Python ones (GPUMEM_TORCH_C_HOOKS=0). Checked on `gpumem leaks --json`: the number of steps,
# and the growth per step, 1 MiB (each step keeps 1 MiB; counted twice as many steps, it read
# half that). One step (an inference loop: no optimizer step ends one) is not judged: the text
# says so and how to mark the iterations, never "no steady growth" (which it said of a loop
# keeping 1 MiB a batch). In the loops with a model's forward (one, two, scaler) the last step's
# workspaces (report --json, .torch.categories.over_time) are the step before's: the loop's last
# input, still referenced after the loop, was counted a workspace (a library's buffer, made once).
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/torch_steps.py
#   kind    steps
table=(
  "one      4"
  "two      4"
  "scaler   4"
  "manual   3"
  "infer    1"
  "ranged   4"
)
for row in "${table[@]}"; do
  read -r kind want <<< "$row"
  for hooks in 1 0; do
    db=$tmp/$kind.$hooks.db
    if ! GPUMEM_TORCH_C_HOOKS=$hooks GPUMEM_SIM_BACKING=memory "$G" record -q -o "$db" -- "$torch_py" "$script" "$kind" \
        > "$tmp/$kind.$hooks.out" 2>&1; then
      bad "$kind (C hooks $hooks): the recording failed"; tail -5 "$tmp/$kind.$hooks.out"; continue
    fi
    grepq -i "hook.*failed\|a forward hook\|an optimizer hook" "$tmp/$kind.$hooks.out" \
      && bad "$kind (C hooks $hooks): a hook warned: $(grep -i hook "$tmp/$kind.$hooks.out" | head -2)"
    "$G" leaks --json "$db" > "$tmp/$kind.$hooks.json" || { bad "$kind (C hooks $hooks): leaks"; continue; }
    got=$(jq '.steps | length' "$tmp/$kind.$hooks.json")
    if [[ $want == 1 ]]; then
      "$G" leaks "$db" > "$tmp/$kind.$hooks.txt"
      if [[ $got == 1 ]] && grepq 'one step only: growth across steps is not judged' "$tmp/$kind.$hooks.txt" \
          && ! grepq 'no steady growth' "$tmp/$kind.$hooks.txt"; then
        ok "$kind (C hooks $hooks): one step, growth not judged"
      else
        bad "$kind (C hooks $hooks): $got steps, and leaks says: $(grep -A2 '^Growth' "$tmp/$kind.$hooks.txt" | tail -1)"
      fi
      continue
    fi
    growth=$(jq '.growth_per_step' "$tmp/$kind.$hooks.json")
    # 1 MiB a step, give or take the loss and the optimizer's first-step state (a tenth)
    if [[ $got == "$want" ]] && awk -v g="$growth" 'BEGIN { exit !(g > 0.9 * 1048576 && g < 1.1 * 1048576) }'; then
      ok "$kind (C hooks $hooks): $got steps, growth $growth bytes a step"
    else
      bad "$kind (C hooks $hooks): $got steps (want $want), growth $growth bytes a step (want 1 MiB)"
    fi
    [[ $kind == manual || $kind == ranged ]] && continue
    "$G" report --json "$db" > "$tmp/$kind.$hooks.report.json" || { bad "$kind (C hooks $hooks): report"; continue; }
    last2=$(jq -c '[.torch.categories.over_time[-2:][] | .workspaces]' "$tmp/$kind.$hooks.report.json")
    if jq -e 'length == 2 and .[0] == .[1]' <<< "$last2" > /dev/null; then
      ok "$kind (C hooks $hooks): the last step's workspaces are the step before's ($last2)"
    else
      bad "$kind (C hooks $hooks): the last two steps' workspaces differ: $last2"
    fi
  done
done
exit $fail
