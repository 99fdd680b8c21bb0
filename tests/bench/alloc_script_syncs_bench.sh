#!/usr/bin/env bash
# Issue 41, deliverable 5, on the PyTorch script: tests/torch/train_gpt2.py (gpt2 124M, B 8,
# T 1024, --seq-jitter, 4 steps) on the virtual GPU under PyTorch's allocator (default and
# expandable_segments:True) and under gpumem's (`gpumem record --allocator gpumem`, the pluggable
# allocator). The virtual GPU counts every synchronization the process makes (GPUMEM_SIM_STATS):
#   alloc.script_syncs_per_step.<pytorch|pytorch-expandable|gpumem>
#       cuCtxSynchronize + cuStreamSynchronize + cuEventSynchronize calls per step (the script's
#       own, loss.item(), are in all three: 2 per step). Each device synchronization stalls the
#       launching thread on a GPU until the queued kernels have finished; the kernels are skipped
#       here, so what they would cost is measured by alloc_torch_bench (alloc.stall_ms_per_step,
#       queued work modelled with timed events).
# Skipped (no BENCH line, exit 0) without PyTorch (GPUMEM_TORCH_PY, as tests/torch/common.bash).
set -uo pipefail
BUILD=${BUILD:-build}
py=${GPUMEM_TORCH_PY:-/root/.cache/gpumem/torch-2.14.1}
[[ -d $py ]] && py=$py/bin/python
if [[ ! -x $py ]]; then echo "alloc_script_syncs_bench: no PyTorch at $py; skipped" >&2; exit 0; fi
if [[ -n ${SAN:-} ]]; then echo "alloc_script_syncs_bench: skipped under SAN=$SAN" >&2; exit 0; fi
for f in "$BUILD/gpumem" "$BUILD/sim/torch-env"; do
  [[ -x $f ]] || { echo "alloc_script_syncs_bench: $f not built" >&2; exit 1; }
done
unset PYTORCH_CUDA_ALLOC_CONF GPUMEM_CONF GPUMEM_SIM_EVENT_DELAY GPUMEM_SIM_ASYNC
TMP=$(mktemp -d "${TMPDIR:-/tmp}/syncsbench-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
steps=4
rc=0
for who in pytorch pytorch-expandable gpumem; do
  conf=
  case $who in
    pytorch) cmd=("$BUILD/sim/torch-env" "$py" tests/torch/train_gpt2.py) ;;
    pytorch-expandable) cmd=("$BUILD/sim/torch-env" "$py" tests/torch/train_gpt2.py) conf=expandable_segments:True ;;
    gpumem) cmd=("$BUILD/gpumem" record -q --allocator gpumem -o "$TMP/g.db" -- "$py" tests/torch/train_gpt2.py --no-stats) ;;
  esac
  if ! env ${conf:+PYTORCH_CUDA_ALLOC_CONF=$conf} GPUMEM_SIM_STATS=1 GPUMEM_SIM_BACKING=virtual \
      "${cmd[@]}" --model gpt2 -B 8 -T 1024 --seq-jitter --steps $steps > "$TMP/out.txt" 2>&1; then
    tail -5 "$TMP/out.txt" >&2
    echo "alloc_script_syncs_bench: the $who run failed" >&2
    rc=1
    continue
  fi
  grep -qE '^step 4' "$TMP/out.txt" || { echo "alloc_script_syncs_bench: $who: no step 4" >&2; rc=1; continue; }
  awk -v s=$steps -v who="$who" '
    $1 == "gpumem" && $2 == "sim:" && $3 ~ /^cu(Ctx|Stream|Event)Synchronize$/ { n += $4 }
    END { printf "BENCH alloc.script_syncs_per_step.%s %.2f syncs\n", who, n / s }' "$TMP/out.txt"
done
exit $rc
