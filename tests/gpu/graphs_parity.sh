#!/usr/bin/env bash
# tests/gpu/graphs_parity.sh — device-only check of the virtual GPU's issue-37 choices against the
# real driver (not part of `make test`; well under a minute). The differential programs
# tests/diff/{graph_mem,capture_modes,capture_free,devices_pools,oob}.c are built against the
# real CUDA runtime and run on the GPU, and compared line by line with the same programs on the
# virtual GPU ($BUILD/tests/diff/, the plain runs of the differential suite). What the sim
# decided without a GPU and this checks: graph memory nodes (relaunch codes, AutoFreeOnLaunch,
# a second instantiation, a captured free of non-graph memory refused with 1 and the capture not
# invalidated, the graph memory attributes), the capture-mode codes (900 / 901, memory kept after
# a refused free, cudaFree of an unknown pointer refused first for the capture), 713 for
# cudaHostUnregister of cudaMallocHost memory, the pitch (512), cuMemAllocPitch's codes above the
# maximum pitch, out-of-bounds memsets and copies (1), and whether a thread whose first call is
# cudaGetDriverEntryPointByVersion has a current context (entry_ctx). A difference is printed with the program
# and fails the check: fold it back into the sim (and gpumem follows the sim's answers).
# GPUMEM_GPU_SAVE=DIR keeps both outputs of each program there.
# Exits 77 with a message where no GPU is present.
set -uo pipefail
BUILD=${BUILD:-build}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu/graphs_parity.sh: no NVIDIA GPU here (nvidia-smi -L failed); skipping" >&2
  exit 77
fi
source tests/gpu/common.bash
progs=(graph_mem capture_modes capture_free devices_pools oob entry_ctx)
gpu_make "${progs[@]/#/$BUILD/tests/diff/}" || { echo "build failed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for p in "${progs[@]}"; do
  gpu_diff_prog "$p" "$tmp" || { echo "FAIL: $p: build"; fail=1; continue; }
  [[ $GPU_RC -eq 0 ]] || echo "note: $p exited $GPU_RC on the GPU"
  [[ -n ${GPUMEM_GPU_SAVE:-} ]] && cp "$tmp/$p.gpu" "$tmp/$p.sim" "$GPUMEM_GPU_SAVE/" 2>/dev/null
  if cmp -s "$tmp/$p.gpu" "$tmp/$p.sim"; then echo "ok: $p: the virtual GPU answers as the GPU does"
  else echo "DIFF: $p (< GPU, > virtual GPU)"; diff "$tmp/$p.gpu" "$tmp/$p.sim" | head -40; fail=1; fi
done
[[ $fail -eq 0 ]] && echo "all programs agree" || echo "FAIL: the virtual GPU differs from the GPU (see DIFF lines)"
exit $fail
