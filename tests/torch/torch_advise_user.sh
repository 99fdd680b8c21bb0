#!/usr/bin/env bash
# torch_advise_user.sh — `gpumem advise` on a user's own PyTorch loop (torch_advise_user.py), whose
# flags advise cannot read, as the review of 2026-12-06 found it:
#   - accumulation (and autocast without the op log) is not predicted for a user's script: no
#     row, a note that says why (and that a loop accumulating already does), JSON .not_predicted;
#     never a micro-batch size the recording does not hold (it said "micro-batches of 1");
#     nor by --try (it printed `--try '--accum K'` with no warning): refused, exit 2, the note;
#   - a loop whose gradients do not outlive their step (zero_grad's default) is told that
#     set_to_none is in effect: no recommendation or combination proposes it, the JSON lists
#     grad_none among the recorded techniques;
#   - the same loop zeroing in place (set_to_none=False) is proposed set_to_none;
#   - so is a loop in two phases zeroing after optimizer.step(), outside the "step N" ranges
#     (torch_advise_phases.py), and no combination is shown that one of its parts (a single
#     technique or a smaller stack) beats or equals (review of 2026-12-08);
#   - checkpointing a user's blocks (torch_advise_ckpt.py: Linear-ReLU-Linear with a residual, the
#     loss computed outside the model) is predicted within BAR % of the checkpointed run's
#     max_memory_allocated / max_memory_reserved, recorded without and with the op log (review
#     of 2026-12-07: reserved was 6% low either way: the loss's events were taken for the last
#     block's backward, which dropped and re-made the block's output before the loss, and the
#     ReLU output lived to the block's end, not to the return of the l2 it was passed to).
set -uo pipefail
source "$(dirname "$0")/common.bash"
py=tests/torch/torch_advise_user.py
for v in none keep; do
  GPUMEM_SIM_BACKING=memory "$G" record -q -o "$tmp/$v.db" -- "$torch_py" "$py" "$v" > "$tmp/$v.rec" 2>&1 ||
    { bad "$v: the recording failed: $(tail -3 "$tmp/$v.rec")"; continue; }
  "$G" advise "$tmp/$v.db" > "$tmp/$v.txt" 2>&1 || { bad "$v: advise failed: $(tail -3 "$tmp/$v.txt")"; continue; }
  "$G" advise --json "$tmp/$v.db" > "$tmp/$v.json" 2>/dev/null || bad "$v: advise --json failed"
done
# rows --check cannot re-run on a user's script and whose model stands on what the recording does
# not hold are not predicted, and say why (review of 2026-12-07: accumulation was 20 MiB, 16%, low
# on a loop accumulating 4 micro-batches under fp16 autocast, 6-7% low on this MLP by 2 and 4, op
# log or not; autocast without the op log 18 MiB low): no row or combination, a note, JSON
# .not_predicted. "ROW|RECORD-OPTIONS|SCRIPT-ARG|not_predicted|what the note says of the loop"
while IFS='|' read -r row ropts arg want says; do
  # shellcheck disable=SC2086
  if [[ $row != none ]]; then
    GPUMEM_SIM_BACKING=memory "$G" record -q -o "$tmp/$row.db" $ropts -- "$torch_py" "$py" "$arg" > "$tmp/$row.rec" 2>&1 ||
      { bad "$row: the recording failed: $(tail -3 "$tmp/$row.rec")"; continue; }
    "$G" advise "$tmp/$row.db" > "$tmp/$row.txt" 2>&1 || { bad "$row: advise failed: $(tail -3 "$tmp/$row.txt")"; continue; }
    "$G" advise --json "$tmp/$row.db" > "$tmp/$row.json" 2>/dev/null || bad "$row: advise --json failed"
  fi
  np=$(jq -r '[.not_predicted[].technique] | join(" ")' "$tmp/$row.json")
  rows=$(jq -r '[(.recommendations + .combinations)[] | select(.k != null or (.techniques | index("bf16") and ("'"$want"'" | test("bf16"))))] | length' "$tmp/$row.json")
  [[ $np == "$want" && $rows == 0 ]] && grep -q "note: gradient accumulation is not predicted for this script$says" "$tmp/$row.txt" \
    && ! grep -q "accumulate [0-9]* micro-batches\|micro-batches of [0-9]* (" "$tmp/$row.txt" \
    && ok "$row: not predicted: $np (no row, no combination; the note says why, ending "$says")" \
    || bad "$row: not_predicted '$np' (want '$want'), $rows rows with them; $(grep -h "not predicted" "$tmp/$row.txt" | cut -c1-160)"
done <<EOT
none|||accum bf16|:
ops|--torch-ops|none|accum|:
accum||accum|accum bf16| (this loop runs 4 forward passes a step: it accumulates already)
EOT
# --try follows the same rule (spec_withheld): a technique advise does not predict for the
# recording is refused (exit 2) with the row's own note, never printed as a prediction; the
# others are predicted. "DB|TRY|withheld technique, or - when predicted"
while IFS='|' read -r db try want; do
  "$G" advise "$tmp/$db.db" --try "$try" > "$tmp/try.out" 2> "$tmp/try.err"; rc=$?
  if [[ $want == - ]]; then
    # and says the change in PyTorch's words (a trainer's --recompute choice printed "change: ")
    [[ $rc == 0 ]] && grep -q "peak allocated .*reserved" "$tmp/try.out" && ! grep -q "not predicted:" "$tmp/try.err" \
      && grep -q "^    change: [a-z]" "$tmp/try.out" \
      && ok "$db: --try '$try' predicted, the change said" \
      || bad "$db: --try '$try': exit $rc, $(grep -v 'gpumem sim' "$tmp/try.err" | head -2); $(grep -m1 'change:' "$tmp/try.out")"
    continue
  fi
  why=$(jq -r --arg t "$want" '.not_predicted[] | select(.technique == $t) | .why' "$tmp/$db.json")
  [[ $rc == 2 && -n $why ]] && grep -qxF "gpumem advise: --try '$try' is not predicted: $why" "$tmp/try.err" \
    && ! grep -q "peak allocated" "$tmp/try.out" \
    && ok "$db: --try '$try' not predicted ($want), exit 2 with the row's note" \
    || bad "$db: --try '$try': exit $rc, $(grep -v 'gpumem sim' "$tmp/try.err" | sed -n 1p | cut -c1-120); $(grep -m1 'peak allocated' "$tmp/try.out")"
done <<'EOT'
none|--accum 2|accum
none|--accum 4 --offload activations|accum
none|--act-dtype bf16|bf16
ops|--accum 8|accum
accum|--accum 2 --act-dtype bf16|accum
ops|--act-dtype bf16|-
none|--offload activations|-
none|--recompute layer|-
EOT
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
# set_to_none in effect however the loop is laid out, and no combination a part of it beats (review
# of 2026-12-08: a loop zeroing after optimizer.step(), between the hooks' "step N" ranges, in two
# phases with an empty_cache, was told to add zero_grad(set_to_none=True) in a combination that
# predicted more than its offload alone). "ROW|SCRIPT|ARG|set_to_none in effect (1) or proposed (0)"
while IFS='|' read -r row script arg inef; do
  if [[ ! -f $tmp/$row.json ]]; then
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False,max_split_size_mb:64,garbage_collection_threshold:0.6,roundup_power2_divisions:4 \
      GPUMEM_SIM_BACKING=memory "$G" record -q -o "$tmp/$row.db" -- "$torch_py" "$script" "$arg" > "$tmp/$row.rec" 2>&1 ||
      { bad "$row: the recording failed: $(tail -3 "$tmp/$row.rec")"; continue; }
    "$G" advise "$tmp/$row.db" > "$tmp/$row.txt" 2>&1 || { bad "$row: advise failed: $(tail -3 "$tmp/$row.txt")"; continue; }
    "$G" advise --json "$tmp/$row.db" > "$tmp/$row.json" 2>/dev/null || { bad "$row: advise --json failed"; continue; }
  fi
  if [[ $inef == 1 ]]; then
    [[ " $(techs "$tmp/$row.json") " == *" grad_none "* ]] && grep -q "note: no gradient outlives its step" "$tmp/$row.txt" \
      && ! grep -q "set_to_none=True)$\|set_to_none=True);\|gradients set to none" "$tmp/$row.txt" \
      && ok "$row: set_to_none in effect: said, and proposed nowhere" \
      || bad "$row: set_to_none in effect, not seen: $(grep -h "set_to_none\|set to none\|outlives" "$tmp/$row.txt" | head -3)"
  elif [[ $inef == 0 ]]; then
    grep -q "set_to_none=True)" "$tmp/$row.txt" && ! grep -q "note: no gradient outlives" "$tmp/$row.txt" \
      && ok "$row: gradients zeroed in place: set_to_none proposed" || bad "$row: set_to_none not proposed"
  fi
  beaten=$(jq -r '(.recommendations + .combinations) as $all | .combinations[] | . as $c
      | [$all[] | select((.techniques | length) < ($c.techniques | length) and ((.techniques - $c.techniques) | length) == 0
                         and (.k == null or .k == $c.k) and .predicted.peak_reserved <= $c.predicted.peak_reserved)]
      | select(length > 0) | "\($c.techniques | join("+")) \($c.predicted.peak_reserved) beaten by \(.[0].techniques | join("+")) \(.[0].predicted.peak_reserved)"' \
      "$tmp/$row.json")
  [[ -z $beaten ]] && ok "$row: every combination ($(jq '.combinations | length' "$tmp/$row.json")) saves more than each of its parts" \
    || bad "$row: combination beaten by a part: $beaten"
done <<EOT
none|||1
keep|||0
ops|||-
accum|||-
phases.none|tests/torch/torch_advise_phases.py|none|1
phases.keep|tests/torch/torch_advise_phases.py|keep|0
EOT
# checkpointing a user's blocks: predicted vs measured, one row per way of recording
BAR=${TORCH_ADVISE_BAR:-2}
ck=tests/torch/torch_advise_ckpt.py
GPUMEM_SIM_BACKING=memory "$G" record -q -o "$tmp/ck.db" -- "$torch_py" "$ck" ck > "$tmp/ck.out" 2>&1 ||
  bad "ckpt: the checkpointed run failed: $(tail -3 "$tmp/ck.out")"
ma=$(awk '$1 == "max_memory_allocated" { print $2 }' "$tmp/ck.out")
mr=$(awk '$1 == "max_memory_reserved" { print $2 }' "$tmp/ck.out")
while read -r row rargs; do
  [[ $rargs == - ]] && rargs=
  # shellcheck disable=SC2086
  GPUMEM_SIM_BACKING=memory "$G" record -q -o "$tmp/$row.db" $rargs -- "$torch_py" "$ck" < /dev/null > "$tmp/$row.out" 2>&1 ||
    { bad "$row: the recording failed: $(tail -3 "$tmp/$row.out")"; continue; }
  p=$("$G" advise --json "$tmp/$row.db" 2>/dev/null |
      jq -r '[.recommendations[] | select(.techniques == ["recompute"])][0] | "\(.predicted.peak_allocated) \(.predicted.peak_reserved)"')
  read -r pa pr <<< "$p"
  e=$(awk -v b="$BAR" -v pa="$pa" -v pr="$pr" -v ma="$ma" -v mr="$mr" 'BEGIN {
        if (pa !~ /^[0-9]+$/ || pr !~ /^[0-9]+$/ || ma + 0 <= 0 || mr + 0 <= 0) { print "none"; exit }
        a = (pa - ma) / ma * 100; r = (pr - mr) / mr * 100
        printf "%.2f %.2f %d\n", a, r, (a < 0 ? -a : a) <= b + 0 && (r < 0 ? -r : r) <= b + 0 }')
  line="$row: checkpoint predicted $pa / $pr, measured $ma / $mr"
  [[ $e == *" 1" ]] && ok "$line (errors ${e% *}%)" || bad "$line (errors ${e% *}%, bar $BAR%)"
done <<'ROWS'
ckpt.plain -
ckpt.ops --torch-ops
ROWS
exit $fail
