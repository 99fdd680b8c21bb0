#!/usr/bin/env bash
# What `gpumem record` costs a PyTorch step, in instructions (issue 35, deliverable 9): the GPT-2
# script (tests/torch/train_gpt2.py, tiny, B 4, T 64) on the virtual GPU, kernels skipped, under
# valgrind's callgrind, counting the instructions of the threads a step waits for over steps
# 4..13: the main thread and autograd's device thread, which runs the backward while the main
# thread waits (tests/bench/cg_steps.py limits each one's counts to those steps). The wall-clock
# ratio torch.rec_vs_off (torch_rec_bench.sh) moves by ±30% between runs on a shared 2-core
# machine; these counts do not. The recorder's writer thread runs beside them (its share is not
# counted here). Each thread's share goes to stderr.
#   torch.off_instr_per_step          not recorded (build/sim/torch-env)
#   torch.rec_instr_per_step          under `gpumem record` as a user runs it
#   torch.rec_instr_per_step.no_hooks the same with --no-torch-hooks
#   torch.rec_vs_off_instr            off / rec: the instruction count's speed ratio; the script
#                                     fails below 0.9 (issue 35's bar for torch.rec_vs_off)
#   torch.hooks_instr_per_step        rec - no_hooks: the module and optimizer hooks
# The three runs go side by side (~5 min each under valgrind). TORCH_INSTR_KEEP=DIR keeps the
# profiles there (<variant>.main, <variant>.bwd: callgrind_annotate reads them).
# TORCH_INSTR_ONLY=VARIANT (off, rec or no_hooks) runs that one alone and prints its count per
# step (main thread + autograd's) and nothing else: for measuring one change. Skipped (no BENCH
# line, exit 0) without PyTorch or valgrind.
set -euo pipefail
BUILD=${BUILD:-build}
py=${GPUMEM_TORCH_PY:-/root/.cache/gpumem/torch-2.14.1}
[[ -d $py ]] && py=$py/bin/python
if [[ ! -x $py ]]; then echo "torch_rec_instr: no PyTorch at $py; skipped" >&2; exit 0; fi
if ! command -v valgrind > /dev/null; then echo "torch_rec_instr: no valgrind; skipped" >&2; exit 0; fi
[[ -e $BUILD/tests/bench/cg_steps.so ]] || { echo "torch_rec_instr: $BUILD/tests/bench/cg_steps.so missing: run make" >&2; exit 1; }
G=$BUILD/gpumem
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset GPUMEM_SIM_PROFILE GPUMEM_SIM_KERNELS GPUMEM_SIM_STATS PYTORCH_CUDA_ALLOC_CONF
# 4 GiB of host memory behind the device: valgrind cannot reserve the profile's 80 GiB
export GPUMEM_SIM_BACKING=memory GPUMEM_SIM_MEMORY=4G PYTHONHASHSEED=0
export CG_LIB=$(readlink -f "$BUILD/tests/bench/cg_steps.so") CG_FROM=3 CG_TO=13
script=(tests/bench/cg_steps.py tests/torch/train_gpt2.py --model tiny --steps 14)
run() { # variant -> $tmp/<variant>.steps: the main thread's instructions over the 10 steps
  local vg=(valgrind --tool=callgrind --trace-children=yes --trace-children-skip='*ldconfig*'
            --separate-threads=yes "--callgrind-out-file=$tmp/$1.%p")
  case $1 in
    off) env $("$BUILD/sim/torch-env" --print | tr '\n' ' ') "${vg[@]}" "$py" "${script[@]}" ;;
    rec) "${vg[@]}" "$G" record -q -o "$tmp/rec.db" -- "$py" "${script[@]}" ;;
    no_hooks) "${vg[@]}" "$G" record -q -o "$tmp/nh.db" --no-torch-hooks -- "$py" "${script[@]}" ;;
  esac > "$tmp/$1.log" 2>&1 || { echo "torch_rec_instr: the $1 run failed" >&2; tail -5 "$tmp/$1.log" >&2; return 1; }
  local f b
  f=$(grep -l "^desc: Trigger: Client Request: steps" "$tmp/$1".* | head -1) &&
    b=$(grep -l "^desc: Trigger: Client Request: backward" "$tmp/$1".* | head -1) ||
    { echo "torch_rec_instr: the $1 run has no profile of its steps and backward passes" >&2; return 1; }
  awk '$1 == "totals:" { print $2 }' "$f" > "$tmp/$1.main"
  awk '$1 == "totals:" { print $2 }' "$b" > "$tmp/$1.bwd"
  if [[ -n ${TORCH_INSTR_KEEP:-} ]]; then
    mkdir -p "$TORCH_INSTR_KEEP" && cp "$f" "$TORCH_INSTR_KEEP/$1.main" && cp "$b" "$TORCH_INSTR_KEEP/$1.bwd"
  fi
}
per() { cat "$tmp/$1.main" "$tmp/$1.bwd" | awk '{ s += $1 } END { printf "%.0f", s / 10 }'; }
if [[ -n ${TORCH_INSTR_ONLY:-} ]]; then
  case $TORCH_INSTR_ONLY in off|rec|no_hooks) ;; *) echo "torch_rec_instr: TORCH_INSTR_ONLY is off, rec or no_hooks, not '$TORCH_INSTR_ONLY'" >&2; exit 2 ;; esac
  run "$TORCH_INSTR_ONLY"
  echo "$TORCH_INSTR_ONLY per step: $(per "$TORCH_INSTR_ONLY") (main thread $(awk '{ printf "%.0f", $1 / 10 }' "$tmp/$TORCH_INSTR_ONLY.main"), autograd's thread $(awk '{ printf "%.0f", $1 / 10 }' "$tmp/$TORCH_INSTR_ONLY.bwd"))"
  exit 0
fi
pids=()
for v in off rec no_hooks; do run "$v" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done
off=$(per off) rec=$(per rec) nh=$(per no_hooks)
for v in off rec no_hooks; do
  echo "# torch_rec_instr: $v per step: main thread $(awk '{ printf "%.0f", $1 / 10 }' "$tmp/$v.main"), autograd's thread $(awk '{ printf "%.0f", $1 / 10 }' "$tmp/$v.bwd")" >&2
done
echo "BENCH torch.off_instr_per_step $off instr"
echo "BENCH torch.rec_instr_per_step $rec instr"
echo "BENCH torch.rec_instr_per_step.no_hooks $nh instr"
echo "BENCH torch.hooks_instr_per_step $((rec - nh)) instr"
awk -v a="$off" -v b="$rec" 'BEGIN { printf "BENCH torch.rec_vs_off_instr %.3f x\n", a / b }'
# the bar of issue 35 (torch.rec_vs_off >= 0.9), gated here on instructions: they repeat within
# 0.1% where the wall-clock ratio moves by ±30% on a shared machine
if ! awk -v a="$off" -v b="$rec" 'BEGIN { exit !(a / b >= 0.9) }'; then
  echo "torch_rec_instr: a recorded step costs more than 1/0.9 of an unrecorded one in instructions ($rec against $off)" >&2
  exit 1
fi
