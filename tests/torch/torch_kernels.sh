#!/usr/bin/env bash
# torch_kernels.sh — PyTorch's kernels on the virtual GPU are skipped and counted by name:
# torch.ones (a fill) and an add launch one kernel each, counted under their mangled names in
# GPUMEM_SIM_STATS, and nothing is set as the last error. Values are not computed: the add's
# result reads back as the zeros the skipped kernels left, and a data-dependent shape
# (torch.nonzero of ones) sees them too (an empty result). GPUMEM_SIM_KERNELS=strict makes the
# first launch an error ("invalid device function").
set -euo pipefail
source "$(dirname "$0")/common.bash"
prog='import torch
x = torch.ones(1000, device="cuda")
y = x + x
torch.cuda.synchronize()
print("sum", y.sum().item(), "nonzero", torch.nonzero(x).shape[0])'
torch_run GPUMEM_SIM_STATS=1 -- -c "$prog" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; bad "the program failed"; }
[[ $(cat "$tmp/out") == "sum 0.0 nonzero 0" ]] && ok "values are not computed: $(cat "$tmp/out")" \
  || bad "expected 'sum 0.0 nonzero 0', got '$(cat "$tmp/out")'"
grep -qE 'skipped +1  _ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEE' "$tmp/err" \
  && ok "torch.ones: one fill kernel counted by name" || bad "the fill kernel is not counted once"
grep -qE 'skipped +1  _ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEE' "$tmp/err" \
  && ok "x + x: one add kernel counted by name" || bad "the add kernel is not counted once"
n=$(sed -nE 's/.*kernels skipped \(device code only\): ([0-9]+) launch.*/\1/p' "$tmp/err")
[[ ${n:-0} -ge 3 ]] && ok "$n launches skipped in all" || bad "skipped launches: '${n:-}'"
if torch_run GPUMEM_SIM_KERNELS=strict -- -c "$prog" >"$tmp/out" 2>"$tmp/err"; then
  bad "GPUMEM_SIM_KERNELS=strict: the program ran"
else
  grep -q "invalid device function" "$tmp/err" && ok "GPUMEM_SIM_KERNELS=strict: invalid device function" \
    || { bad "strict: not the expected error"; tail -3 "$tmp/err"; }
fi
exit $fail
