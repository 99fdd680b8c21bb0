#!/usr/bin/env bash
# torch_gpt2.sh — tests/torch/train_gpt2.py, tiny, 3 steps on the virtual GPU (h100-80g), under
# PyTorch's default allocator (memory backing and virtual backing: no host memory behind device
# memory) and with expandable_segments:True (virtual backing, where VMM handles have no bytes):
#   - it runs to the end and prints max_memory_allocated, max_memory_reserved, requested_peak,
#     with requested <= allocated <= reserved, all > 0;
#   - the two backings give the same figures (nothing reads device memory);
#   - the default config gets its segments from cudaMalloc (no cuMemCreate), expandable segments
#     from cuMemCreate/cuMemMap (POSIX-fd handles after PyTorch's fabric probe is refused);
#   - the kernels were skipped and counted (GPUMEM_SIM_STATS), cuBLAS's GEMMs among them, and
#     nothing was refused (no "not implemented" but the known cuLogsRegisterCallback).
set -euo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/train_gpt2.py
for conf in "" "expandable_segments:True"; do
  name=${conf:-default}
  backings="memory virtual"
  [[ -n $conf ]] && backings=virtual
  for backing in $backings; do
    if ! torch_run GPUMEM_SIM_STATS=1 GPUMEM_SIM_BACKING=$backing PYTORCH_CUDA_ALLOC_CONF=$conf -- \
        "$script" --model tiny --steps 3 >"$tmp/$name.$backing.out" 2>"$tmp/$name.$backing.err"; then
      bad "$name, $backing backing: train_gpt2.py failed"; tail -5 "$tmp/$name.$backing.err"; continue
    fi
  done
  first=${backings%% *}
  out=$tmp/$name.$first.out err=$tmp/$name.$first.err
  [[ -s $out ]] || continue
  a=$(awk '$1 == "max_memory_allocated" { print $2 }' "$out")
  r=$(awk '$1 == "max_memory_reserved" { print $2 }' "$out")
  q=$(awk '$1 == "requested_peak" { print $2 }' "$out")
  steps=$(grep -c '^step [0-9]/3 ' "$out" || true)
  [[ $steps -eq 3 && -n $a && -n $r && -n $q && $q -gt 0 && $q -le $a && $a -le $r ]] \
    && ok "$name: 3 steps; requested $q <= allocated $a <= reserved $r" \
    || bad "$name: steps $steps, requested '$q' allocated '$a' reserved '$r'"
  if [[ $first == memory ]]; then
    cmp -s <(grep -v '^step' "$out") <(grep -v '^step' "$tmp/$name.virtual.out") \
      && ok "$name: virtual backing gives the same figures" \
      || bad "$name: virtual backing differs: $(diff <(grep -v '^step' "$out") <(grep -v '^step' "$tmp/$name.virtual.out") | tr '\n' ' ')"
  fi
  creates=$(awk '$3 == "cuMemCreate" { print $4 }' "$err")
  if [[ -z $conf ]]; then
    [[ -z $creates ]] && ok "$name: segments from cudaMalloc, no cuMemCreate" || bad "$name: $creates cuMemCreate"
  else
    [[ ${creates:-0} -gt 1 ]] && ok "$name: $creates cuMemCreate (the fabric probe, then POSIX-fd handles)" \
      || bad "$name: ${creates:-no} cuMemCreate"
  fi
  skipped=$(sed -nE 's/.*kernels skipped \(device code only\): ([0-9]+) launch.*/\1/p' "$err")
  [[ ${skipped:-0} -gt 100 ]] && grep -qE 'skipped +[0-9]+  (cublasLtMatmul|cublasSgemm_v2)$' "$err" \
    && ok "$name: $skipped kernel launches skipped and counted, cuBLAS GEMMs among them" \
    || bad "$name: skipped '${skipped:-}' kernels; cuBLAS GEMMs not counted"
  refused=$(grep 'is not implemented' "$err" | grep -v cuLogsRegisterCallback || true)
  [[ -z $refused ]] && ok "$name: nothing it called was refused" || bad "$name: refused: $refused"
done
exit $fail
