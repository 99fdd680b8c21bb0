#!/usr/bin/env bash
# tests/gpu/sim_parity.sh — device-only check of the virtual GPU against the real driver (not part
# of `make test`; about a minute). Runs tests/gpu/sim_parity.c once on the real libcuda.so.1 and
# once on $BUILD/sim/libcuda.so.1:
#   1. every semantic probe (error codes of edge cases the sim had to decide without a GPU) must
#      give the same answer; differences are listed and fail the check;
#   2. prints the real driver's latencies of cuMemAlloc/cuMemFree/cuMemCreate/cuMemMap/
#      cuMemSetAccess/cuMemUnmap/cuMemRelease at 2 MiB and 64 MiB, and a GPUMEM_SIM_COSTS line
#      fitted from them, to re-fit the sim's cost model (sim/README.md, "Cost model").
# Exits 77 with a message where no GPU is present.
set -uo pipefail
BUILD=${BUILD:-build}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu/sim_parity.sh: no NVIDIA GPU here (nvidia-smi -L failed); skipping" >&2
  exit 77
fi
nvidia-smi -L
source tests/gpu/common.bash
gpu_make "$BUILD/sim/libcuda.so.1" || { echo "build failed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
gcc -std=gnu17 -O2 -Wall -Wextra -isystem "$CUDA_INC" -o "$tmp/parity" tests/gpu/sim_parity.c -ldl || exit 1
"$tmp/parity" libcuda.so.1 --time > "$tmp/real.txt" || { echo "FAIL: the probe program failed on the real driver"; exit 1; }
"$tmp/parity" "$BUILD/sim/libcuda.so.1" > "$tmp/sim.txt" 2>/dev/null || { echo "FAIL: the probe program failed on the sim"; exit 1; }
grep '^time\|^costs' "$tmp/real.txt"
fail=0
while read -r _ name real; do
  simv=$(awk -v n="$name" '$1=="probe" && $2==n {print $3}' "$tmp/sim.txt")
  if [[ $simv == "$real" ]]; then echo "ok: $name $real"
  else echo "DIFF: $name real=$real sim=$simv"; fail=1; fi
done < <(grep '^probe' "$tmp/real.txt")
[[ $fail -eq 0 ]] && echo "all probes agree" || echo "FAIL: the sim differs from the real driver (see DIFF lines)"
exit $fail
