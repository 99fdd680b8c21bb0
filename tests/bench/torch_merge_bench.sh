#!/usr/bin/env bash
# What the merge of PyTorch's allocator trace costs after a recorded run (`gpumem record` merges
# the trace its tracker took into the database when the program has exited: gm_torch_merge,
# snapshot/formats/gm_torch.c). The GPT-2 script (tests/torch/train_gpt2.py, tiny, B 4, T 64) on
# the virtual GPU, kernels skipped, STEPS steps (default 1000; ~435 trace entries a step):
#   torch.merge_s_per_100k_entries   the merge's own seconds (gpumem record prints them) per
#                                    100,000 merged entries
#   torch.merge_vs_run               the merge's seconds over the rest of the recorded run's (the
#                                    program's, from start to exit): what the merge adds to it
# Best of ROUNDS runs (default 2) each. Skipped (no BENCH line, exit 0) without PyTorch
# (GPUMEM_TORCH_PY, as tests/torch/common.bash).
set -euo pipefail
BUILD=${BUILD:-build}
py=${GPUMEM_TORCH_PY:-/root/.cache/gpumem/torch-2.14.1}
[[ -d $py ]] && py=$py/bin/python
if [[ ! -x $py ]]; then echo "torch_merge_bench: no PyTorch at $py; skipped" >&2; exit 0; fi
G=$BUILD/gpumem
steps=${STEPS:-1000} rounds=${ROUNDS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset GPUMEM_SIM_PROFILE GPUMEM_SIM_MEMORY GPUMEM_SIM_KERNELS GPUMEM_SIM_STATS PYTORCH_CUDA_ALLOC_CONF
export GPUMEM_SIM_BACKING=memory
best_per= best_ratio=
for ((r = 1; r <= rounds; r++)); do
  rm -f "$tmp/r.db"
  t0=$(date +%s.%N)
  "$G" record -o "$tmp/r.db" -- "$py" tests/torch/train_gpt2.py --model tiny --steps "$steps" \
    > /dev/null 2> "$tmp/r.err" || { echo "torch_merge_bench: the recorded run failed" >&2; tail -5 "$tmp/r.err" >&2; exit 1; }
  t1=$(date +%s.%N)
  # gpumem: merged PyTorch's allocator trace (N entries, S s) into DB
  read -r n s < <(sed -n "s/^gpumem: merged PyTorch's allocator trace (\([0-9]*\) entries, \([0-9.]*\) s).*/\1 \2/p" "$tmp/r.err")
  [[ -n ${n:-} && $n -gt 0 ]] || { echo "torch_merge_bench: no merge reported" >&2; tail -5 "$tmp/r.err" >&2; exit 1; }
  per=$(awk -v s="$s" -v n="$n" 'BEGIN { printf "%.3f", s * 100000 / n }')
  ratio=$(awk -v s="$s" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", s / (b - a - s) }')
  echo "round $r: $n entries merged in $s s, the whole run $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s" >&2
  [[ -z $best_per ]] || awk -v a="$per" -v b="$best_per" 'BEGIN { exit !(a < b) }' && best_per=$per
  [[ -z $best_ratio ]] || awk -v a="$ratio" -v b="$best_ratio" 'BEGIN { exit !(a < b) }' && best_ratio=$ratio
done
echo "BENCH torch.merge_s_per_100k_entries $best_per s"
echo "BENCH torch.merge_vs_run $best_ratio x"
