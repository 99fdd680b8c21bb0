#!/usr/bin/env bash
# torch_tune.sh — `gpumem tune` for PyTorch users (issue 36, deliverable 3): the GPT-2 script
# (model small, -B 8 -T 512, a sequence length per step) recorded under `gpumem record` with
# PyTorch's allocator and its default configuration:
#   - tune replays its tensors (from the merged history) under the configuration it ran with:
#     the recorded figure is the script's own max_memory_reserved(), and so is the replay of it;
#   - it recommends a PYTORCH_CUDA_ALLOC_CONF for staying on PyTorch's allocator (PyTorch's keys
#     only: torch's own parser takes it) and, apart, what gpumem's allocator would reserve;
#   - --check re-runs the script with the recommendation in PYTORCH_CUDA_ALLOC_CONF, the variable
#     PyTorch reads first (a PYTORCH_CUDA_ALLOC_CONF already in the environment would otherwise
#     win: the check runs with one that changes the result), and the measured
#     max_memory_reserved() equals the predicted one, to the byte.
set -uo pipefail
source "$(dirname "$0")/common.bash"
GPUMEM_SIM_BACKING=virtual "$G" record -q -o "$tmp/run.db" -- "$torch_py" tests/torch/train_gpt2.py \
  --model small -B 8 -T 512 --steps 4 --seq-jitter > "$tmp/run.out" 2> "$tmp/run.err" \
  || { bad "the GPT-2 script under gpumem record failed: $(tail -3 "$tmp/run.err")"; exit 1; }
want=$(awk '$1 == "max_memory_reserved" { print $2 }' "$tmp/run.out")
GPUMEM_SIM_BACKING=virtual PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:20 "$G" tune --json --check "$tmp/run.db" \
  > "$tmp/t.json" 2> "$tmp/t.err" || { bad "tune --check failed: $(cat "$tmp/t.err")"; exit 1; }
j() { jq -r "$1" "$tmp/t.json"; }
rec=$(j .recorded.peak_reserved) trec=$(j .torch.max_memory_reserved) rconf=$(j .torch.recorded_conf)
pconf=$(j .torch.recommended.pytorch_conf) pred=$(j .torch.recommended.predicted.max_memory_reserved)
meas=$(j .torch.check.measured.max_memory_reserved) gres=$(j .torch.gpumem.peak_reserved) gconf=$(j .torch.gpumem.conf)
recidx=$(jq '[.results[] | .conf] | index("preset:pytorch")' "$tmp/t.json")
replayed=$(jq -r ".results[$recidx].peak_reserved" "$tmp/t.json")
[[ $rec == "$want" && $trec == "$want" && $replayed == "$want" ]] \
  && ok "recorded: PyTorch's max_memory_reserved() $want (PYTORCH_CUDA_ALLOC_CONF='$rconf'), replayed to the byte" \
  || bad "recorded $rec / $trec, replayed $replayed; the script's max_memory_reserved() $want"
[[ $pconf != null && $pred -gt 0 && $pred -le $want ]] \
  && ok "recommended for PyTorch's allocator: PYTORCH_CUDA_ALLOC_CONF='$pconf', predicted max_memory_reserved() $pred" \
  || bad "recommendation '$pconf' predicted '$pred'"
e=$(torch_run -- -c 'import sys, torch; torch._C._accelerator_setAllocatorSettings(sys.argv[1])' "$pconf" 2>&1 >/dev/null | grep -v Warn | grep -i error)
[[ -z $e ]] && ok "PyTorch's own parser takes '$pconf'" || bad "PyTorch refuses '$pconf': $e"
[[ $meas == "$pred" ]] && ok "--check: measured max_memory_reserved() $meas = predicted $pred (re-run under PYTORCH_CUDA_ALLOC_CONF, the variable PyTorch reads first)" \
  || bad "--check: measured $meas, predicted $pred"
[[ $gres -gt 0 && $gconf == preset:gpumem* ]] && ok "apart: gpumem's allocator would reserve $gres ($gconf)" \
  || bad "gpumem's line: $gres $gconf"
GPUMEM_SIM_BACKING=virtual "$G" tune "$tmp/run.db" > "$tmp/t.txt" 2>&1
grep -q "recommended for PyTorch's allocator: PYTORCH_CUDA_ALLOC_CONF=" "$tmp/t.txt" && grep -q "with gpumem as PyTorch's allocator" "$tmp/t.txt" \
  && ok "the text names both" || bad "text: $(tail -5 "$tmp/t.txt")"
exit $fail
