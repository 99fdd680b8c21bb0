#!/usr/bin/env bash
# sim_torch_imports.sh — the virtual GPU exports the whole surface PyTorch imports from the CUDA
# runtime and cuBLAS/cuBLASLt:
#   - every function sim/torch_imports.txt lists is exported by build/sim's libcudart.so.13,
#     libcublas.so.13 or libcublasLt.so.13, under that library's version node;
#   - when PyTorch is installed (GPUMEM_TORCH_PY, as tests/torch/common.bash), the list is
#     regenerated from the wheel (sim/torch_imports.sh) and must equal the committed one: a new
#     PyTorch that imports more fails here, naming what to add.
# It prints which imports are modelled and which return "not supported" (counted and named
# once at run time).
set -euo pipefail
build=${BUILD:-build}
list=sim/torch_imports.txt
fail=0
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
  f=$build/sim/$lib
  [[ -f $f ]] || { echo "FAIL: $f missing: run make"; exit 1; }
  missing=$(comm -23 <(awk -v l="$lib" '$1 == l { print $2 "@@" l }' "$list" | sort) \
    <(nm -D --defined-only "$f" | awk '{ print $3 }' | sort))
  n=$(awk -v l="$lib" '$1 == l' "$list" | wc -l)
  if [[ -n $missing ]]; then
    echo "FAIL: $lib does not export (with its version node): $(echo $missing)"; fail=1
  else
    echo "ok: $lib exports all $n functions PyTorch imports from it"
  fi
done
# modelled = defined by the hand-written sources, not only by the generated stubs
modelled() { nm --defined-only "$@" 2>/dev/null | awk '$2 ~ /[TW]/ { print $3 }' | sort -u; }
for pair in "libcudart.so.13 $build/sim/sim_rt.o" "libcublas.so.13 $build/sim/cublas.o" \
  "libcublasLt.so.13 $build/sim/cublaslt.o"; do
  set -- $pair
  [[ -f $2 ]] || continue
  stubs=$(comm -23 <(awk -v l="$1" '$1 == l { print $2 }' "$list" | sort) <(modelled "$2"))
  echo "$1: $(awk -v l="$1" '$1 == l' "$list" | wc -l) imported, $(echo "$stubs" | grep -c . || true) not modelled (not supported):" \
    "$(echo $stubs | cut -c1-400)$([[ ${#stubs} -gt 400 ]] && echo ' ...')"
done
py=${GPUMEM_TORCH_PY:-/root/.cache/gpumem/torch-2.14.1}
[[ -d $py ]] && py=$py/bin/python
if [[ -x $py ]] && sp=$("$py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null); then
  if diff <(bash sim/torch_imports.sh "$sp") "$list" >/tmp/sim_torch_imports.$$.diff; then
    echo "ok: sim/torch_imports.txt is what the installed PyTorch imports ($sp)"
  else
    echo "FAIL: PyTorch at $sp imports another surface ('<' new, '>' gone); regenerate with"
    echo "  sim/torch_imports.sh $sp > sim/torch_imports.txt   (then model or rebuild the stubs)"
    head -20 /tmp/sim_torch_imports.$$.diff
    fail=1
  fi
  rm -f /tmp/sim_torch_imports.$$.diff
else
  echo "note: no PyTorch at $py: the committed list was not compared with a wheel"
fi
exit $fail
