#!/usr/bin/env bash
# torch_bindings.sh — PyTorch binds to the virtual GPU's libraries, never to a real one:
# every symbol resolved into a library named libcuda.so.1, libcudart.so.13, libcublas.so.13,
# libcublasLt.so.13 or libnvidia-ml.so.1 is resolved into build/sim's copy (LD_DEBUG=bindings).
# A missing stand-in would silently bind the toolkit's (in the loader cache) or the wheel's
# (DT_RPATH); PyTorch maps the wheel's libcublasLt.so.13 itself (torch/__init__.py preloads it by
# path) but, with the stand-ins preloaded, binds nothing to it. Each library must also receive
# bindings from PyTorch's own libraries, so the check cannot pass vacuously.
set -euo pipefail
source "$(dirname "$0")/common.bash"
LD_DEBUG=bindings LD_DEBUG_OUTPUT=$tmp/ld torch_run -- -c \
  'import torch; (torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")).sum().item()' \
  >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; bad "the program failed"; exit 1; }
sim=$(cd "$build/sim" && pwd -P)
# "binding file FROM [n] to TO [n]: normal symbol `NAME'" -> "FROM TO NAME"
cat "$tmp"/ld.* | sed -nE 's/.*binding file (\S+) \[[0-9]+\] to (\S+) \[[0-9]+\]: normal symbol `([^'"'"']+).*/\1 \2 \3/p' \
  >"$tmp/b"
libs='libcuda\.so\.1|libcudart\.so\.13|libcublas\.so\.13|libcublasLt\.so\.13|libnvidia-ml\.so\.1'
wrong=$(awk -v libs="^($libs)\$" -v sim="$sim" '{ n = split($2, p, "/"); if (p[n] ~ libs && index($2, sim "/") != 1) print }' "$tmp/b" | head -5)
[[ -z $wrong ]] && ok "no symbol is bound to a CUDA library outside $sim" \
  || bad "bound to a real library: $wrong"
for l in libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnvidia-ml.so.1; do
  n=$(awk -v to="$sim/$l" '$2 == to && $1 ~ /\/torch\/lib\/|\/site-packages\// && $1 !~ /\/nvidia\//' "$tmp/b" | wc -l)
  [[ $l == libcuda.so.1 || $l == libnvidia-ml.so.1 ]] && n=$(awk -v to="$sim/$l" '$2 == to' "$tmp/b" | wc -l)
  [[ $n -gt 0 ]] && ok "$l: $n bindings into build/sim's" || bad "$l: nothing bound to build/sim's"
done
exit $fail
