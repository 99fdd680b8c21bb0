#!/usr/bin/env bash
# torch_categories.sh — categories of PyTorch's tensors (issue 39) against torch's own memory
# profiler (torch.profiler with the CPU activity and profile_memory, its _memory_profile()
# categories), on the same run of the GPT-2 script on the virtual GPU, recorded WITHOUT gpumem's
# hooks (--no-torch-hooks: no names, no phases; the categories come from inference): at PyTorch's
# peak allocated moment, at least 95% of the bytes the profiler categorises are in the category it
# gives (tests/torch/torch_categories.py maps its INPUT to activations, AUTOGRAD_DETAIL to
# temporaries). tiny (3 steps) and gpt2 124M (B 8, T 1024, 3 steps, virtual backing). With the
# hooks, parameters, gradients and optimizer state come from their names.
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/train_gpt2.py
BAR=95

for size in tiny gpt2; do
  if [[ $size == tiny ]]; then args=(--model tiny --steps 3); envs=(GPUMEM_SIM_BACKING=memory)
  else args=(--model gpt2 -B 8 -T 1024 --steps 3); envs=(GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G); fi
  env "${envs[@]}" "$G" record -q -o "$tmp/$size.db" --no-torch-hooks -- "$torch_py" "$script" "${args[@]}" \
    --profile-categories "$tmp/$size.prof.json" > "$tmp/$size.out" 2>&1 || { bad "$size: recording failed"; tail -5 "$tmp/$size.out"; continue; }
  GPUMEM_CATEGORY_DUMP=$tmp/$size.dump "$G" report --json "$tmp/$size.db" > "$tmp/$size.json" || { bad "$size: report"; continue; }
  [[ $(jq -r '[.torch.category_source[] | select(. != null)] | unique | join(" ")' "$tmp/$size.json") == inference ]] \
    || bad "$size: without hooks the tensors' categories come from $(jq -c .torch.category_source "$tmp/$size.json")"
  out=$(python3 tests/torch/torch_categories.py "$tmp/$size.prof.json" "$tmp/$size.dump" "$tmp/$size.json" "$tmp/$size.db")
  rc=$?
  echo "$out" | sed 's/^/  /'
  pct=$(awk '/^agreement/ { sub("%", "", $2); print $2 }' <<< "$out")
  if [[ $rc -eq 0 && -n $pct ]] && awk -v p="$pct" -v b=$BAR 'BEGIN { exit !(p >= b) }'; then
    ok "$size: gpumem's inferred categories agree with torch's memory profiler for $pct% of the bytes it categorises at PyTorch's peak (bar $BAR%)"
  else
    bad "$size: agreement ${pct:-not computed} (bar $BAR%)"
  fi
done

# with the hooks: names decide parameters, gradients and optimizer state, phases the rest
GPUMEM_SIM_BACKING=memory "$G" record -q -o "$tmp/hooks.db" -- "$torch_py" "$script" --model tiny --steps 3 > "$tmp/hooks.out" 2>&1 \
  || bad "hooks: recording failed"
"$G" report --json "$tmp/hooks.db" > "$tmp/hooks.json"
src=$(jq -r '.torch.category_source | [.parameters, .gradients, .optimizer_state, .activations, .workspaces] | join(" ")' "$tmp/hooks.json")
[[ $src == "names names names phases phases" ]] && ok "hooks: sources $src" || bad "hooks: sources $src"
exit $fail
