#!/usr/bin/env bash
# torch_fsdp.sh — ZeRO-3 for a PyTorch recording (issue 43, deliverable 5): `gpumem advise --ranks N`
# predicts FSDP2's FULL_SHARD (fully_shard on every block and on the model) from a one-rank
# recording of the GPT-2 script, says it in FSDP2's terms, and --check re-runs the script with
# --fsdp N (rank 0 of N over torch's fake process group: one process allocates what each rank
# would) and compares PyTorch's own peaks:
#   - tiny at 2 and 4 ranks, FSDP2 alone, with CPUOffloadPolicy (--fsdp-offload: shards,
#     gradients, optimizer state and the update on the host) and with reshard_after_forward=False
#     (--fsdp-reshard 0, SHARD_GRAD_OP): the prediction within BAR %
#     (default 0.5) of the measured max_memory_allocated and max_memory_reserved (the reserved
#     figure, made of 2 MiB pages, may also be one page off);
#   - the re-run shards: its peak allocated is below the recording's;
#   - the same at 2 ranks with gpumem as PyTorch's allocator (--allocator gpumem: gpumem's peaks);
#   - the flags (--fsdp N) and the change (fully_shard ...) are in the JSON.
# gpt2 124M (-B 8 -T 1024, virtual backing) is not in the CI set: there the allocated peak comes
# within 0.02 % and the reserved 1.1-1.9 % low (snapshot/analyze/ADVISE.md, "FSDP").
set -uo pipefail
source "$(dirname "$0")/common.bash"
BAR=${TORCH_FSDP_BAR:-0.5}
export GPUMEM_SIM_BACKING=memory
# check_rows DB N LABEL: both ZeRO-3 rows of `advise --ranks N --check` on DB
check_rows() {
  local db=$1 n=$2 L=$3
  "$G" advise --json --ranks "$n" --check "$db" > "$tmp/a.json" 2> "$tmp/a.err"
  j() { jq -r "$1" "$tmp/a.json"; }
  [[ $(j '.zero3_predictions | length') == 3 ]] || { bad "$L, $n ranks: not three ZeRO-3 rows: $(j .zero3_skipped) $(tail -2 "$tmp/a.err")"; return; }
  for r in 0 1 2; do
    q=".zero3_predictions[$r]"
    want="--fsdp $n" lab="$L, $n ranks"
    [[ $r == 1 ]] && want+=" --fsdp-offload" lab+=", CPU offload"
    [[ $r == 2 ]] && want+=" --fsdp-reshard 0" lab+=", SHARD_GRAD_OP"
    [[ $(j "$q.flags") == "$want" ]] && ok "$lab: flags $want" || bad "$lab: flags '$(j "$q.flags")'"
    j "$q.change" | grepq 'fully_shard(' && ok "$lab: said as fully_shard" || bad "$lab: change '$(j "$q.change")'"
    ma=$(j "$q.measured.peak_allocated")
    [[ $ma =~ ^[0-9]+$ ]] || { bad "$lab: not measured: $(j "$q.check_error")"; continue; }
    [[ $ma -lt $(j .recorded.peak_allocated) ]] && ok "$lab: the re-run shards ($ma < $(j .recorded.peak_allocated) allocated)" \
      || bad "$lab: measured $ma, not below the recording's $(j .recorded.peak_allocated)"
    for k in allocated reserved; do
      e=$(j "$q.measured.error_${k}_pct")
      # reserved comes in 2 MiB pages (segments, expandable pages): one page is 1.4% of tiny's
      # 140 MiB under gpumem's allocator, so a reserved figure one page off passes too
      d=$(( $(j "$q.peak_$k") - $(j "$q.measured.peak_$k") ))
      awk -v e="$e" -v b="$BAR" -v d="$d" -v k="$k" \
        'BEGIN { exit !((e <= b && e >= -b) || (k == "reserved" && d <= 2097152 && d >= -2097152)) }' \
        && ok "$lab: predicted peak $k within ${BAR}% (or, reserved, one 2 MiB page) of the measured (${e}%, $d bytes)" \
        || bad "$lab: predicted peak $k off by ${e}% ($d bytes; bar ${BAR}%)"
    done
  done
  # offloaded, the shards, gradients and optimizer state leave the device
  [[ $(j '.zero3_predictions[1].peak_allocated') -lt $(j '.zero3_predictions[0].peak_allocated') ]] \
    && ok "$L, $n ranks: CPU offload predicts less than FSDP alone" || bad "$L, $n ranks: CPU offload predicts no less"
}

args=(tests/torch/train_gpt2.py --model tiny --steps 3)
if "$G" record -q -o "$tmp/t.db" -- "$torch_py" "${args[@]}" > "$tmp/rec.out" 2>&1; then
  check_rows "$tmp/t.db" 2 "PyTorch's allocator"
  check_rows "$tmp/t.db" 4 "PyTorch's allocator"
else
  bad "recording failed: $(tail -3 "$tmp/rec.out")"
fi
# gpumem as PyTorch's allocator: gpumem's recorded peaks, predicted and re-run the same way
if "$G" record -q -o "$tmp/g.db" --allocator gpumem -- "$torch_py" "${args[@]}" --no-stats > "$tmp/recg.out" 2>&1; then
  check_rows "$tmp/g.db" 2 "gpumem's allocator"
else
  bad "recording (--allocator gpumem) failed: $(tail -3 "$tmp/recg.out")"
fi
exit $fail
