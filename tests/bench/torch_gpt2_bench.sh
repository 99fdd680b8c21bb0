#!/usr/bin/env bash
# PyTorch's GPT-2 (tests/torch/train_gpt2.py) on the virtual GPU: gpt2 (124M), B 8, T 1024,
# h100-80g profile, virtual backing (no host memory behind the 13 GB it allocates), kernels
# skipped. What a step costs here is PyTorch's host work plus the virtual GPU's: the figure
# that says whether the 124M model fits in CI.
#   torch.sim.gpt2_s_per_step   median wall seconds of steps 2..4 (step 1 creates the
#                               allocator's segments, cuBLAS handles and workspaces)
#   torch.sim.gpt2_2steps_s     wall seconds of a whole 2-step run, Python start-up and
#                               `import torch` included (the bar: under a minute)
# Skipped (no BENCH line, exit 0) without PyTorch (GPUMEM_TORCH_PY, as tests/torch/common.bash).
set -euo pipefail
BUILD=${BUILD:-build}
py=${GPUMEM_TORCH_PY:-/root/.cache/gpumem/torch-2.14.1}
[[ -d $py ]] && py=$py/bin/python
if [[ ! -x $py ]]; then echo "torch_gpt2_bench: no PyTorch at $py; skipped" >&2; exit 0; fi
env=$BUILD/sim/torch-env
run() { GPUMEM_SIM_BACKING=virtual "$env" "$py" tests/torch/train_gpt2.py --model gpt2 -B 8 -T 1024 "$@" 2>/dev/null; }
out=$(run --steps 4)
echo "$out" | grep '^step' >&2
echo "$out" | awk '/^step [234]\// { for (i = 1; i < NF; i++) if ($i == "time") print $(i + 1) / 1000 }' |
  sort -g | awk '{ v[NR] = $1 } END { if (NR != 3) exit 1; printf "BENCH torch.sim.gpt2_s_per_step %.4f s\n", v[2] }'
t0=$(date +%s.%N)
run --steps 2 >/dev/null
t1=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "BENCH torch.sim.gpt2_2steps_s %.2f s\n", b - a }'
