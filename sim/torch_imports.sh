#!/usr/bin/env bash
# torch_imports.sh SITE_PACKAGES — the CUDA runtime and cuBLAS/cuBLASLt functions an installed
# PyTorch wheel imports, one "<library> <function>" line each, sorted: what the virtual GPU's
# libcudart.so.13 and the stand-ins libcublas.so.13 / libcublasLt.so.13 must export.
#
# Read from the binaries, never from headers: `nm -D --undefined-only` over torch/lib/*.so and
# every library of the wheel those load (their DT_NEEDED closure inside site-packages: the
# cuSOLVER that torch_cuda_linalg loads imports cuBLAS too), keeping the symbols bound to the
# three libraries' version nodes (cudaMalloc@libcudart.so.13). The libraries that are replaced
# are left out as importers: the stand-ins replace them whole.
#
# The committed list is sim/torch_imports.txt (regenerate: sim/torch_imports.sh
# "$(python -c 'import site; print(site.getsitepackages()[0])')" > sim/torch_imports.txt);
# tests/unit/sim_torch_imports.sh checks it against the wheel and against the built libraries.
set -euo pipefail
sp=${1:?usage: torch_imports.sh SITE_PACKAGES}
[[ -d $sp/torch/lib ]] || { echo "torch_imports.sh: no torch/lib under $sp" >&2; exit 2; }
replaced='^(libcudart\.so\.13|libcublas\.so\.13|libcublasLt\.so\.13)$'

declare -A path_of seen
while IFS= read -r f; do path_of[$(basename "$f")]=$f; done < <(
  find "$sp/torch/lib" "$sp/nvidia" -name '*.so*' -type f 2>/dev/null)

queue=("$sp"/torch/lib/*.so)
files=()
while ((${#queue[@]})); do
  f=${queue[0]}
  queue=("${queue[@]:1}")
  [[ -n ${seen[$f]:-} ]] && continue
  seen[$f]=1
  files+=("$f")
  while read -r need; do
    [[ $need =~ $replaced ]] && continue
    [[ -n ${path_of[$need]:-} ]] && queue+=("${path_of[$need]}")
  done < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done

for f in "${files[@]}"; do
  nm -D --undefined-only "$f"
done | awk '{ n = split($NF, a, "@"); if (n >= 2 && a[n] ~ /^libcu(dart|blas|blasLt)\.so\.13$/) print a[n], a[1] }' |
  sort -u
