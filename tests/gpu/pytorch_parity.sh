#!/usr/bin/env bash
# tests/gpu/pytorch_parity.sh — the `pytorch` and `pytorch-expandable` presets against PyTorch
# itself: a small GPT-style training loop under torch.cuda.memory._record_memory_history(), with
# the default allocator config and with expandable_segments:True; each snapshot is replayed
# under the matching preset, and the replayed peak reserved must be within 1% of
# torch.cuda.max_memory_reserved() (see tests/gpu/pytorch_parity.py). Where it runs
# (tests/gpu/common.bash, gpu_or_sim): a GPU when nvidia-smi lists one (12 steps;
# tests/gpu/run.sh), else the virtual GPU (6 steps, virtual backing: the 1.6 GB it reserves has
# no host memory behind it; `make test`, through tests/torch/module.mk), where every allocation
# and segment is PyTorch's own. Exits 77 without PyTorch.
set -uo pipefail
BUILD=${BUILD:-build}
source tests/gpu/common.bash
gpu_or_sim
if [[ $TARGET == gpu ]]; then
  gpu_make "$BUILD/alloc/gpumem-replay" || { echo "build of gpumem-replay failed"; exit 1; }
  gpu_make "$BUILD/gpumem" || true # for `gpumem import`, where it exists
  steps=${STEPS:-12}
else
  gpu_built "$BUILD/alloc/gpumem-replay" "$BUILD/gpumem" || exit 1
  export GPUMEM_SIM_BACKING=virtual
  steps=${STEPS:-6}
fi
exec "${ON[@]}" "$PY" tests/gpu/pytorch_parity.py run --replay "$BUILD/alloc/gpumem-replay" \
  --gpumem "$BUILD/gpumem" --steps "$steps"
