#!/usr/bin/env bash
# tests/gpu/torch_overhead.sh — what `gpumem record` costs the GPT-2 script on a real GPU (issue 41,
# deliverable 6: torch.rec_vs_off >= 0.95, "measured on real work"). tests/bench/torch_rec_bench.sh
# measures it on the virtual GPU, kernels skipped, where a tiny step is PyTorch's host work alone
# (the worst case: 0.82-0.88 on a shared 2-core machine); here kernels run. Side by side, rounds
# alternated: the tiny model (host-bound even on a GPU) and gpt2 124M at B 8, T 1024 (real work),
# each plain and under `gpumem record` as a user runs it. Prints BENCH torch.gpu.rec_vs_off,
# torch.gpu.rec_vs_off.gpt2, torch.gpu.rec_vs_off_mean and the step times, and says whether the
# bar is met; the figures are reported, not gated (one lent GPU, rare). A run that fails, or a
# recording without PyTorch's view or step ranges, fails. GPU only: exits 77 elsewhere.
set -uo pipefail
BUILD=${BUILD:-build}
export GPUMEM_GPU_TARGET=gpu
source tests/gpu/common.bash
gpu_or_sim # exits 77 without a GPU or without PyTorch there
targets=("$BUILD/libgpumem.so" "$BUILD/gpumem")
make -n "$BUILD/libgpumem_torch.so" > /dev/null 2>&1 && targets+=("$BUILD/libgpumem_torch.so")
gpu_make "${targets[@]}" || { echo "build failed"; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
TORCH_BENCH_ON=gpu GPUMEM_TORCH_PY=$(command -v "$PY") ROUNDS=${ROUNDS:-2} STEPS=${STEPS:-60} \
  VARS="off rec gpt2_off gpt2_rec" bash tests/bench/torch_rec_bench.sh | tee "$out" || { echo "FAIL: torch_rec_bench.sh on the GPU"; exit 1; }
for f in torch.gpu.rec_vs_off torch.gpu.rec_vs_off.gpt2; do
  v=$(awk -v f="$f" '$1 == "BENCH" && $2 == f { print $3 }' "$out")
  [[ -n $v ]] || { echo "FAIL: no $f figure"; exit 1; }
  awk -v v="$v" 'BEGIN { exit !(v >= 0.95) }' && echo "ok: $f $v: issue 41's bar (>= 0.95) met" \
    || echo "note: $f $v: under issue 41's bar of 0.95"
done
exit 0
