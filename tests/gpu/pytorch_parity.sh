#!/usr/bin/env bash
# tests/gpu/pytorch_parity.sh — the `pytorch` and `pytorch-expandable` presets against PyTorch
# itself (GPU only, not part of `make test`): a small GPT-style training loop under
# torch.cuda.memory._record_memory_history(), with the default allocator config and with
# expandable_segments:True; each snapshot is replayed under the matching preset, and the
# replayed peak reserved must be within 1% of torch.cuda.max_memory_reserved() (see
# tests/gpu/pytorch_parity.py). Exits 77 without a GPU or without PyTorch.
set -uo pipefail
BUILD=${BUILD:-build}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu/pytorch_parity.sh: no NVIDIA GPU here (nvidia-smi -L failed); skipping" >&2
  exit 77
fi
PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
  echo "tests/gpu/pytorch_parity.sh: $PY has no PyTorch (import torch failed); skipping" >&2
  exit 77
fi
source tests/gpu/common.bash
gpu_make "$BUILD/alloc/gpumem-replay" || { echo "build of gpumem-replay failed"; exit 1; }
gpu_make "$BUILD/gpumem" || true # for `gpumem import`, where it exists
exec "$PY" tests/gpu/pytorch_parity.py run --replay "$BUILD/alloc/gpumem-replay" \
  --gpumem "$BUILD/gpumem" --steps "${STEPS:-12}"
