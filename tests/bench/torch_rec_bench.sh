#!/usr/bin/env bash
# What `gpumem record` costs a PyTorch program (issue 35, deliverable 9): the GPT-2 script
# (tests/torch/train_gpt2.py, tiny, B 4, T 64) on the virtual GPU with real host memory behind
# device memory (GPUMEM_SIM_BACKING=memory), kernels skipped: a step is PyTorch's host work only
# (~3 ms), the worst case for a per-tensor and per-module cost. Steps/s recorded over not recorded:
#   torch.rec_vs_off              `gpumem record` as a user runs it (PyTorch's allocator, its
#                                 memory history merged, module/optimizer hooks); the bar: >= 0.9
#   torch.rec_vs_off.no_history   with --no-torch-history  } where the time goes: each part
#   torch.rec_vs_off.no_hooks     with --no-torch-hooks    } of the recording turned off in
#   torch.rec_vs_off.bare         with both (libgpumem.so   } turn
#                                 and its Python frames only)
#   torch.rec_vs_off_mean         the same over the mean step (best round's mean each): the
#                                 program's throughput, waits for a core included
#   torch.off.step_ms, torch.rec.step_ms   the step times the ratios come from
#   torch.rec_vs_off.gpt2         the same ratio for gpt2 124M (-B 8 -T 1024, 8 steps, virtual
#                                 backing: 13 GB of host memory otherwise), where a step has
#                                 more host work per module and per tensor
# VARS picks variants (default: all, "off rec no_history no_hooks bare gpt2_off gpt2_rec"; a
# ratio whose variants were not run prints no BENCH line).
# Side by side in one run: ROUNDS rounds (default 3), each running every variant once in a
# rotating order, STEPS steps each (default 120; gpt2: 8). A run's step time is the 20th percentile of its
# steps 3..STEPS (the first two create the allocator's segments and cuBLAS's handles); a
# variant's is its best round (other work on a shared machine only ever adds time). Each round's
# figures go to stderr.
# Skipped (no BENCH line, exit 0) without PyTorch (GPUMEM_TORCH_PY, as tests/torch/common.bash).
# TORCH_BENCH_ON=gpu (tests/gpu/torch_overhead.sh): the same runs on a real GPU, kernels run, with
# the device's own PyTorch (GPUMEM_TORCH_PY: a python, or a folder holding bin/python) and memory
# (no virtual backing): the ratios on real work, named torch.gpu.* instead of torch.*.
set -euo pipefail
BUILD=${BUILD:-build}
on=${TORCH_BENCH_ON:-sim}
case $on in
  sim) py=${GPUMEM_TORCH_PY:-/root/.cache/gpumem/torch-2.14.1} name=torch ;;
  gpu) py=${GPUMEM_TORCH_PY:-$(command -v python3 || true)} name=torch.gpu ;;
  *) echo "torch_rec_bench: TORCH_BENCH_ON is sim or gpu, not '$on'" >&2; exit 2 ;;
esac
[[ -d $py ]] && py=$py/bin/python
if [[ ! -x $py ]]; then echo "torch_rec_bench: no PyTorch at $py; skipped" >&2; exit 0; fi
G=$BUILD/gpumem
# the not-recorded runs: on the virtual GPU through its environment (build/sim/torch-env), on a GPU
# as they are; gpt2's on the virtual GPU with virtual backing (13 GB of host memory otherwise)
if [[ $on == sim ]]; then plain=("$BUILD/sim/torch-env") big=(env GPUMEM_SIM_BACKING=virtual)
else plain=() big=(); fi
rounds=${ROUNDS:-3} steps=${STEPS:-120}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset GPUMEM_SIM_PROFILE GPUMEM_SIM_MEMORY GPUMEM_SIM_KERNELS GPUMEM_SIM_STATS PYTORCH_CUDA_ALLOC_CONF
export GPUMEM_SIM_BACKING=memory
run() { # variant: prints the run's step time (ms)
  local a=(tests/torch/train_gpt2.py --model tiny --steps "$steps")
  local g=(tests/torch/train_gpt2.py --model gpt2 -B 8 -T 1024 --steps 8)
  case $1 in
    gpt2_off) "${big[@]}" "${plain[@]}" "$py" "${g[@]}" ;;
    gpt2_rec) "${big[@]}" "$G" record -q -o "$tmp/v.db" -- "$py" "${g[@]}" ;;
    off) "${plain[@]}" "$py" "${a[@]}" ;;
    rec) "$G" record -q -o "$tmp/rec.db" -- "$py" "${a[@]}" ;;
    no_history) "$G" record -q -o "$tmp/v.db" --no-torch-history -- "$py" "${a[@]}" ;;
    no_hooks) "$G" record -q -o "$tmp/v.db" --no-torch-hooks -- "$py" "${a[@]}" ;;
    bare) "$G" record -q -o "$tmp/v.db" --no-torch-history --no-torch-hooks -- "$py" "${a[@]}" ;;
  esac 2> "$tmp/$1.err" | awk '/^step / { for (i = 1; i < NF; i++) if ($i == "time") print $(i + 1) }' \
    | tail -n +3 | sort -g | awk '{ v[NR] = $1; s += $1 } END { if (NR < 5) exit 1; print v[int(NR * 0.2) + 1], s / NR }' \
    || { echo "torch_rec_bench: the $1 run failed" >&2; tail -5 "$tmp/$1.err" >&2; exit 1; }
}
vars=(${VARS:-off rec no_history no_hooks bare gpt2_off gpt2_rec})
declare -A best mean
for ((r = 0; r < rounds; r++)); do
  line="round $((r + 1)):"
  for ((k = 0; k < ${#vars[@]}; k++)); do
    v=${vars[(k + r) % ${#vars[@]}]}
    out=$(run "$v")
    read -r t m <<< "$out"
    line+=" $v $t ms (mean $m)"
    [[ -z ${best[$v]:-} ]] || awk -v a="$t" -v b="${best[$v]}" 'BEGIN { exit !(a < b) }' && best[$v]=$t
    [[ -z ${mean[$v]:-} ]] || awk -v a="$m" -v b="${mean[$v]}" 'BEGIN { exit !(a < b) }' && mean[$v]=$m
  done
  echo "$line" >&2
done
have() { [[ -n ${best[$1]:-} ]]; }
# what was measured: the recorded run merged PyTorch's history and opened the step ranges
if have rec; then
  [[ $("$G" report --json "$tmp/rec.db" | jq -r '.torch.peak_allocated // 0') -gt 0 ]] \
    || { echo "torch_rec_bench: the recorded run has no PyTorch view" >&2; exit 1; }
  [[ $("$G" sql "$tmp/rec.db" -c "SELECT count(*) FROM ranges WHERE path LIKE 'step %/fwd/%'" | tail -1) -gt 0 ]] \
    || { echo "torch_rec_bench: the recorded run has no step ranges" >&2; exit 1; }
fi
ratio() { awk -v a="${best[off]}" -v b="${best[$1]}" 'BEGIN { printf "%.3f", a / b }'; }
if have off; then
  for v in rec no_history no_hooks bare; do
    have "$v" || continue
    [[ $v == rec ]] && echo "BENCH $name.rec_vs_off $(ratio rec) x" || echo "BENCH $name.rec_vs_off.$v $(ratio "$v") x"
  done
fi
have gpt2_off && have gpt2_rec &&
  echo "BENCH $name.rec_vs_off.gpt2 $(awk -v a="${best[gpt2_off]}" -v b="${best[gpt2_rec]}" 'BEGIN { printf "%.3f", a / b }') x"
# the same ratio over the steps' mean (a program's throughput), where the 20th percentile above
# leaves out the steps in which a thread of the program waited for a core
have off && have rec &&
  echo "BENCH $name.rec_vs_off_mean $(awk -v a="${mean[off]}" -v b="${mean[rec]}" 'BEGIN { printf "%.3f", a / b }') x"
have off && echo "BENCH $name.off.step_ms ${best[off]} ms"
have rec && echo "BENCH $name.rec.step_ms ${best[rec]} ms"
exit 0
