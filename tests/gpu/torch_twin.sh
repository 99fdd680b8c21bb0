#!/usr/bin/env bash
# tests/gpu/torch_twin.sh — the GPT-2 script (tests/torch/train_gpt2.py, gpt2 124M, -B 8 -T 1024,
# 3 steps, fp32, cuDNN attention off) on the GPU and on its twin, the virtual GPU's `h200` profile
# running the same command (issue 35, deliverable 8). For PyTorch's default allocator config and
# expandable_segments:True, torch.cuda.max_memory_allocated() must be equal and
# max_memory_reserved() within 1%; both are reported (and requested_peak, for information).
#
# Where the twin's figures come from, in this order:
#   1. the same interpreter on the device, through $BUILD/sim/torch-env (the virtual GPU's
#      libraries travel with the build: `carry ["build-gpu"]`): the same PyTorch on both sides. It
#      counts only if it really ran on the virtual GPU (its GPUMEM_SIM_STATS lines) and saw
#      "NVIDIA H200";
#   2. else the figures tests/gpu/prepare.sh recorded here before the device call
#      (`torch_twin.sh --record`: this machine's PyTorch, GPUMEM_TORCH_PY, in $BUILD/gpu-twin/),
#      compared only when their PyTorch version is the device's; otherwise the part is skipped
#      (77) with both versions named (another PyTorch allocates differently).
#
#   torch_twin.sh             on the device (tests/gpu/run.sh); 77 without a GPU or PyTorch
#   torch_twin.sh --record    here: the twin's figures into $BUILD/gpu-twin/ (prepare.sh)
#   torch_twin.sh --pretend   here, no GPU: the "GPU" leg runs on the virtual GPU's h200 as well,
#                             so everything but the GPU itself is exercised (TWIN_PRETEND_ARGS
#                             adds arguments to that leg only: e.g. `-B 4` must fail)
# TWIN_ARGS replaces the script's arguments on both sides (default above); TWIN_NO_SIM_LEG=1 takes
# the recorded twin without trying the virtual GPU on the device.
set -uo pipefail
BUILD=${BUILD:-build}
mode=${1:-device}
script=tests/torch/train_gpt2.py
read -r -a args <<< "${TWIN_ARGS:---model gpt2 -B 8 -T 1024 --steps 3}"
confs=("" "expandable_segments:True")
figdir=$BUILD/gpu-twin
env_sim=$BUILD/sim/torch-env
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
me=tests/gpu/torch_twin.sh
cname() { if [[ -n $1 ]]; then echo expandable; else echo default; fi; }
fig() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }
version() { "$1" -c 'import torch; print(torch.__version__, torch.version.cuda)' 2> /dev/null; }

# sim_leg PY CONF OUT: the command on the virtual GPU's h200 (no host memory behind the ~13 GiB);
# 0 when it ran there to the end
# (with tests/torch/abort_stacks.so preloaded where it is built: an abort prints every thread's
# stack into the .err, which a failure shows; one such abort at exit was seen in make test)
sim_leg() {
  local stacks=$BUILD/tests/torch/abort_stacks.so pre=()
  [[ -f $stacks && -z ${SAN:-} ]] && pre=(LD_PRELOAD="$(readlink -f "$stacks")${LD_PRELOAD:+:$LD_PRELOAD}")
  env -u GPUMEM_SIM_MEMORY -u GPUMEM_SIM_KERNELS "${pre[@]}" GPUMEM_SIM_PROFILE=h200 GPUMEM_SIM_BACKING=virtual \
    GPUMEM_SIM_STATS=1 PYTORCH_CUDA_ALLOC_CONF="$2" "$env_sim" "$1" "$script" "${args[@]}" > "$3" 2> "$3.err" || return 1
  grep -q ' on NVIDIA H200$' "$3" && grep -q 'kernels skipped' "$3.err" && [[ -n $(fig "$3" max_memory_reserved) ]]
}

case $mode in
--record)
  py=${GPUMEM_TORCH_PY:-/root/.cache/gpumem/torch-2.14.1}
  [[ -d $py ]] && py=$py/bin/python
  [[ -x $py ]] || { echo "$me: no PyTorch at $py (GPUMEM_TORCH_PY); no twin figures recorded" >&2; exit 77; }
  [[ -n ${SAN:-} ]] && { echo "$me: skipped under SAN=$SAN" >&2; exit 77; }
  [[ -x $env_sim ]] || { echo "$me: $env_sim missing: run make" >&2; exit 1; }
  rm -rf "$figdir"
  mkdir -p "$figdir"
  for c in "${confs[@]}"; do
    n=$(cname "$c")
    sim_leg "$py" "$c" "$tmp/$n.txt" || { # on stderr: tests/gpu/prepare.sh's callers drop its stdout
      echo "$me: the twin ($n) failed:" >&2
      grep -v '^abort_stacks: \|^/\|^\[0x' "$tmp/$n.txt.err" | tail -5 >&2
      sed -n '/^abort_stacks: /,$p' "$tmp/$n.txt.err" | sed -n 1,80p >&2
      exit 1
    }
    { echo "torch $(version "$py")"; echo "args ${args[*]}"; cat "$tmp/$n.txt"; } > "$figdir/$n.txt"
  done
  echo "twin figures (h200 profile, $(version "$py")) in $figdir: $(cd "$figdir" && ls | tr '\n' ' ')"
  exit 0
  ;;
--pretend | device) ;;
*) echo "usage: $me [--record | --pretend]" >&2; exit 2 ;;
esac

if [[ $mode == device ]]; then
  if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L > /dev/null 2>&1; then
    echo "$me: no NVIDIA GPU here (nvidia-smi -L failed); skipping" >&2
    exit 77
  fi
  PY=${PYTHON:-python3}
  gpu_leg() { env PYTORCH_CUDA_ALLOC_CONF="$2" "$1" "$script" "${args[@]}" > "$3" 2> "$3.err"; }
  echo "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
else
  source tests/torch/common.bash # the venv's PyTorch, or 77
  PY=$torch_py
  read -r -a extra <<< "${TWIN_PRETEND_ARGS:-}"
  gpu_leg() { env GPUMEM_SIM_PROFILE=h200 GPUMEM_SIM_BACKING=virtual PYTORCH_CUDA_ALLOC_CONF="$2" \
    "$env_sim" "$1" "$script" "${args[@]}" "${extra[@]}" > "$3" 2> "$3.err"; }
  echo "pretend: the GPU leg runs on the virtual GPU's h200 too${extra:+, with ${extra[*]}}"
fi
gv=$(version "$PY")
[[ -n $gv ]] || { echo "$me: $PY has no PyTorch (import torch failed); skipping" >&2; exit 77; }
echo "PyTorch here: $gv; command: $script ${args[*]}"
fail=0 skipped=0
for c in "${confs[@]}"; do
  n=$(cname "$c")
  echo "--- $n (PYTORCH_CUDA_ALLOC_CONF='$c')"
  if ! gpu_leg "$PY" "$c" "$tmp/gpu.$n"; then
    echo "FAIL: $n: the GPU run failed"; tail -5 "$tmp/gpu.$n.err"; fail=1; continue
  fi
  if [[ ${TWIN_NO_SIM_LEG:-0} != 1 ]] && sim_leg "$PY" "$c" "$tmp/sim.$n"; then
    twin=$tmp/sim.$n from="the virtual GPU on this machine, the same PyTorch"
  elif [[ -f $figdir/$n.txt ]]; then
    why=TWIN_NO_SIM_LEG=1
    [[ ${TWIN_NO_SIM_LEG:-0} == 1 ]] || why="the virtual GPU did not run this PyTorch here: $(tail -1 "$tmp/sim.$n.err" 2> /dev/null | cut -c1-160)"
    echo "note: $why; taking the figures tests/gpu/prepare.sh recorded"
    tv=$(awk '$1 == "torch" { print $2, $3 }' "$figdir/$n.txt")
    targs=$(sed -n 's/^args //p' "$figdir/$n.txt")
    if [[ $tv != "$gv" || $targs != "${args[*]}" ]]; then
      echo "skipped: $n: the recorded twin ran PyTorch $tv ($targs), here PyTorch $gv (${args[*]}): not the same program"
      skipped=1; continue
    fi
    twin=$figdir/$n.txt from="tests/gpu/prepare.sh's recording (PyTorch $tv)"
  else
    echo "skipped: $n: the virtual GPU did not run here and tests/gpu/prepare.sh recorded no twin ($figdir)"
    tail -3 "$tmp/sim.$n.err" 2> /dev/null
    skipped=1; continue
  fi
  ga=$(fig "$tmp/gpu.$n" max_memory_allocated) gr=$(fig "$tmp/gpu.$n" max_memory_reserved) gq=$(fig "$tmp/gpu.$n" requested_peak)
  sa=$(fig "$twin" max_memory_allocated) sr=$(fig "$twin" max_memory_reserved) sq=$(fig "$twin" requested_peak)
  echo "twin: $from"
  echo "  max_memory_allocated  GPU $ga  twin $sa  (difference $((ga - sa)))"
  echo "  max_memory_reserved   GPU $gr  twin $sr  (ratio $(awk -v a="$gr" -v b="$sr" 'BEGIN { printf "%.4f", a / b }'))"
  echo "  requested_peak        GPU $gq  twin $sq"
  echo "BENCH gpu.torch.twin.$n.allocated_diff_bytes $((ga - sa)) bytes"
  echo "BENCH gpu.torch.twin.$n.reserved_ratio $(awk -v a="$gr" -v b="$sr" 'BEGIN { printf "%.4f", a / b }') x"
  [[ -n $ga && $ga == "$sa" ]] && echo "ok: $n: max_memory_allocated equal ($ga)" \
    || { echo "FAIL: $n: max_memory_allocated GPU $ga, twin $sa"; fail=1; }
  awk -v a="$gr" -v b="$sr" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= 0.01 * b) }' \
    && echo "ok: $n: max_memory_reserved within 1% ($gr, $sr)" \
    || { echo "FAIL: $n: max_memory_reserved GPU $gr, twin $sr: not within 1%"; fail=1; }
done
((fail)) && exit 1
((skipped)) && exit 77
exit 0
