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
# Prints BENCH advise.torch_fsdp_max_err_pct (allocated) and ..._max_reserved_err_pct: the largest
# |error| over the rows. TORCH_FSDP_MODEL=gpt2 (tests/bench/torch_fsdp_bench.sh, not the CI set):
# gpt2 124M at -B 8 -T 1024, 4 and 8 ranks, PyTorch's allocator, where the allocated peak comes
# within 0.12 % and the reserved 1.1-1.9 % low (snapshot/analyze/ADVISE.md, "FSDP2").
set -uo pipefail
source "$(dirname "$0")/common.bash"
BAR=${TORCH_FSDP_BAR:-0.5}
MODEL=${TORCH_FSDP_MODEL:-tiny}
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
      maxerr[$k]=$(awk -v e="$e" -v m="${maxerr[$k]}" 'BEGIN { if (e < 0) e = -e; print (e > m ? e : m) }')
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

declare -A maxerr=([allocated]=0 [reserved]=0)
args=(tests/torch/train_gpt2.py --model tiny --steps 3)
ranks=(2 4) granks=(2)
if [[ $MODEL == gpt2 ]]; then # tests/bench/torch_fsdp_bench.sh
  args=(tests/torch/train_gpt2.py --model gpt2 -B 8 -T 1024 --steps 3) ranks=(4 8) granks=()
  export GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G
fi
if "$G" record -q -o "$tmp/t.db" -- "$torch_py" "${args[@]}" > "$tmp/rec.out" 2>&1; then
  for n in "${ranks[@]}"; do check_rows "$tmp/t.db" "$n" "PyTorch's allocator"; done
else
  bad "recording failed: $(tail -3 "$tmp/rec.out")"
fi
# gpumem as PyTorch's allocator: gpumem's recorded peaks, predicted and re-run the same way
if [[ ${#granks[@]} -gt 0 ]]; then
  if "$G" record -q -o "$tmp/g.db" --allocator gpumem -- "$torch_py" "${args[@]}" > "$tmp/recg.out" 2>&1; then
    for n in "${granks[@]}"; do check_rows "$tmp/g.db" "$n" "gpumem's allocator"; done
  else
    bad "recording (--allocator gpumem) failed: $(tail -3 "$tmp/recg.out")"
  fi
fi
echo "BENCH advise.torch_fsdp_max_err_pct ${maxerr[allocated]} pct"
echo "BENCH advise.torch_fsdp_max_reserved_err_pct ${maxerr[reserved]} pct"
exit $fail
