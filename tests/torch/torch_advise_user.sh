#!/usr/bin/env bash
# torch_advise_user.sh — `gpumem advise` on a user's own PyTorch loop (torch_advise_user.py), whose
# flags advise cannot read, as the review of 2026-12-06 found it:
#   - accumulation says "micro-batches of 1/k of the batch", never a micro-batch size the
#     recording does not hold (it said "micro-batches of 1" for a batch of 2048);
#   - a loop whose gradients do not outlive their step (zero_grad's default) is told that
#     set_to_none is in effect: no recommendation or combination proposes it, the JSON lists
#     grad_none among the recorded techniques;
#   - the same loop zeroing in place (set_to_none=False) is proposed set_to_none.
set -uo pipefail
source "$(dirname "$0")/common.bash"
py=tests/torch/torch_advise_user.py
for v in none keep; do
  GPUMEM_SIM_BACKING=memory "$G" record -q -o "$tmp/$v.db" -- "$torch_py" "$py" "$v" > "$tmp/$v.rec" 2>&1 ||
    { bad "$v: the recording failed: $(tail -3 "$tmp/$v.rec")"; continue; }
  "$G" advise "$tmp/$v.db" > "$tmp/$v.txt" 2>&1 || { bad "$v: advise failed: $(tail -3 "$tmp/$v.txt")"; continue; }
  "$G" advise --json "$tmp/$v.db" > "$tmp/$v.json" 2>/dev/null || bad "$v: advise --json failed"
done
acc=$(grep -c "change: gradient accumulation by [0-9]*: micro-batches of 1/[0-9]* of the batch," "$tmp/none.txt")
[[ $acc -gt 0 ]] && ! grep -q "micro-batches of [0-9]* (" "$tmp/none.txt" "$tmp/keep.txt" \
  && ok "accumulation in fractions of the batch ($acc changes), no micro-batch size made up" \
  || bad "accumulation: $(grep -h "micro-batches" "$tmp/none.txt" | head -2)"
grep -q "note: no gradient outlives its step" "$tmp/none.txt" && ! grep -q "set_to_none=True)$\|set_to_none=True);" "$tmp/none.txt" \
  && ! grep -q "gradients set to none" "$tmp/none.txt" \
  && ok "set_to_none already in effect: said, and proposed nowhere" \
  || bad "set_to_none in effect: $(grep -h "set_to_none\|set to none\|outlives" "$tmp/none.txt" | head -3)"
techs() { python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["recorded_techniques"]))' "$1"; }
[[ " $(techs "$tmp/none.json") " == *" grad_none "* && " $(techs "$tmp/keep.json") " != *" grad_none "* ]] \
  && ok "JSON: grad_none among the recorded techniques of the default loop only" \
  || bad "JSON recorded_techniques: none [$(techs "$tmp/none.json")], keep [$(techs "$tmp/keep.json")]"
grep -q "change: optimizer.zero_grad(set_to_none=True)" "$tmp/keep.txt" && ! grep -q "note: no gradient outlives" "$tmp/keep.txt" \
  && ok "gradients zeroed in place: set_to_none proposed" \
  || bad "set_to_none=False: $(grep -h "set_to_none\|outlives" "$tmp/keep.txt" | head -3)"
exit $fail
