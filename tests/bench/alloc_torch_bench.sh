#!/usr/bin/env bash
# gpumem's allocator beside PyTorch's CUDACachingAllocator (tests/bench/alloc_torch_bench.cpp):
# the binary links the installed wheel's libc10_cuda.so and runs on the virtual GPU through
# build/sim/torch-env (virtual backing: the GPT-2 trace reserves ~6 GiB). Twice: PyTorch's
# default configuration (alloc.pair_vs_torch, alloc.replay_vs_torch, ...) and
# expandable_segments:True (the same names with _expandable after "torch"). Skipped (exit 0, no
# BENCH line, a message) without PyTorch, as tests/torch/common.bash skips.
set -uo pipefail
BUILD=${BUILD:-build}
torch_py=${GPUMEM_TORCH_PY:-/root/.cache/gpumem/torch-2.14.1}
[[ -d $torch_py ]] && torch_py=$torch_py/bin/python
if [[ ! -x $torch_py ]]; then
  echo "alloc_torch_bench: skipped: no PyTorch at $torch_py (GPUMEM_TORCH_PY; make deps installs it)" >&2
  exit 0
fi
if [[ -n ${SAN:-} ]]; then
  echo "alloc_torch_bench: skipped under SAN=$SAN (the wheel's libraries are not instrumented)" >&2
  exit 0
fi
bin=$BUILD/tests/bench/alloc_torch_bench
if [[ ! -x $bin ]]; then
  if ! command -v "${CXX:-g++}" >/dev/null; then
    echo "alloc_torch_bench: skipped: no C++ compiler (${CXX:-g++}) to build $bin" >&2
    exit 0
  fi
  echo "alloc_torch_bench: $bin missing although PyTorch is installed: run make" >&2
  exit 1
fi
unset PYTORCH_CUDA_ALLOC_CONF GPUMEM_SIM_PROFILE GPUMEM_SIM_MEMORY GPUMEM_SIM_ASYNC GPUMEM_SIM_STATS
rc=0
GPUMEM_SIM_BACKING=virtual "$BUILD/sim/torch-env" "$bin" "" 2> >(grep -v 'cuLogsRegisterCallback' >&2) || rc=1
GPUMEM_SIM_BACKING=virtual PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
  "$BUILD/sim/torch-env" "$bin" expandable 2> >(grep -v 'cuLogsRegisterCallback' >&2) || rc=1
exit $rc
