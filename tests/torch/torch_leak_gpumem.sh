#!/usr/bin/env bash
# torch_leak_gpumem.sh — the Python-frames acceptance on the second allocator path: with gpumem
# as PyTorch's allocator (`gpumem record --allocator gpumem`, no PyTorch history), `gpumem leaks`
# names the GPT-2 script's planted leak (tests/torch/train_gpt2.py --leak, the line marked
# PLANTED LEAK) at its Python line, as torch_record.sh checks on PyTorch's own allocator:
#   - "what grows" (kept by step after step and alive after the last step) is led by that line,
#     in the text and in --json (.kept_beyond_steps.by_site[0]);
#   - the same run without --leak has no call site at that line (the check can fail);
#   - the script's statistics are gpumem's: its max_memory_allocated() is report's .torch.peak_allocated.
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/train_gpt2.py
leak_line=$(grep -n '# PLANTED LEAK' "$script" | head -1 | cut -d: -f1)
[[ -n $leak_line ]] || { echo "FAIL: no PLANTED LEAK line in $script"; exit 1; }
site="train_gpt2.py:$leak_line in main"
for run in leak noleak; do
  args=(--model tiny --steps 4)
  [[ $run == leak ]] && args+=(--leak)
  if ! GPUMEM_SIM_BACKING=memory "$G" record -o "$tmp/$run.db" --allocator gpumem -- "$torch_py" "$script" "${args[@]}" \
      > "$tmp/$run.out" 2> "$tmp/$run.err"; then
    bad "$run: the recording failed"; tail -5 "$tmp/$run.err"; continue
  fi
  # gpumem was PyTorch's allocator, and gave the script its statistics: its max_memory_allocated() the hook's peak
  got=$("$G" report --json "$tmp/$run.db" | jq -r '"\(.torch.allocator) \(.torch.peak_allocated)"')
  want="gpumem $(awk '$1 == "max_memory_allocated" { print $2 }' "$tmp/$run.out")"
  [[ $got == "$want" ]] && ok "$run: gpumem was PyTorch's allocator, the script's max_memory_allocated() its peak ($got)" \
    || bad "$run: report's .torch allocator and peak allocated '$got', want '$want'"
  "$G" leaks "$tmp/$run.db" > "$tmp/$run.txt" 2>&1
  "$G" leaks --json "$tmp/$run.db" > "$tmp/$run.json" 2>&1
done
if [[ -s $tmp/leak.txt ]]; then
  sed -n '/what grows/,/^$/p' "$tmp/leak.txt" > "$tmp/grows.txt"
  first=$(jq -r '.kept_beyond_steps.by_site[0].site // "none"' "$tmp/leak.json")
  if grep -q "$site" "$tmp/grows.txt" && [[ $first == "$site"* ]]; then
    ok "--allocator gpumem: leaks names $site as what grows each step ($(grep -m1 "$site" "$tmp/grows.txt" | awk '{ print $1, $2 }') kept)"
  else
    bad "--allocator gpumem: leaks does not name $site (json first site: $first)"; cat "$tmp/leak.txt"
  fi
fi
if [[ -s $tmp/noleak.txt ]]; then
  grep -q "train_gpt2.py:$leak_line " "$tmp/noleak.txt" \
    && bad "without --leak, leaks still names train_gpt2.py:$leak_line" \
    || ok "without --leak: no call site at train_gpt2.py:$leak_line"
fi
exit $fail
