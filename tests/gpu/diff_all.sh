#!/usr/bin/env bash
# tests/gpu/diff_all.sh DIR — every program of the differential suite (tests/diff/*.c) built
# against the real CUDA runtime and run on the GPU, and the same program on the virtual GPU
# ($BUILD/tests/diff/), both outputs kept in DIR (PROG.gpu, PROG.sim) and a summary printed:
# what the virtual GPU still answers otherwise than the driver. tests/gpu/graphs_parity.sh gates
# the programs whose answers must agree; the others (memory figures that depend on the card's
# size, OOM at the sim's capacity) are read by a person. Each GPU output is also compared with
# the recording tests/diff/gpu_truth.sh holds the virtual GPU to (tests/diff/gpu-h200/PROG.out):
# a difference there is a driver that answers otherwise than the H200 of 2026-12-04 did, and
# fails (exit 1). Exits 77 where no GPU is present.
set -uo pipefail
BUILD=${BUILD:-build}
out=${1:?usage: diff_all.sh DIR}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu/diff_all.sh: no NVIDIA GPU here (nvidia-smi -L failed); skipping" >&2
  exit 77
fi
source tests/gpu/common.bash
mkdir -p "$out"
fail=0
for src in tests/diff/*.c; do
  p=$(basename "$src" .c)
  gpu_make "$BUILD/tests/diff/$p" > /dev/null || continue
  gpu_diff_prog "$p" "$out" || { echo "$p: build failed"; continue; }
  n=$(diff "$out/$p.gpu" "$out/$p.sim" | grep -c '^[<>]')
  rec=tests/diff/gpu-h200/$p.out
  if [[ ! -f $rec ]]; then was="no recording"
  elif cmp -s "$rec" "$out/$p.gpu"; then was="as recorded"
  else was="OTHERWISE than recorded"; fail=1; diff "$rec" "$out/$p.gpu" | head -10; fi
  echo "$p: exit GPU $GPU_RC virtual GPU $SIM_RC, $n differing line(s) of $(wc -l < "$out/$p.gpu"); the GPU's output $was"
done
[[ $fail -eq 0 ]] && echo "every recorded output is what this GPU prints" || echo "FAIL: this GPU answers otherwise than the recording (tests/diff/gpu-h200)"
exit $fail
