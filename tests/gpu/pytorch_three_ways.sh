#!/usr/bin/env bash
# tests/gpu/pytorch_three_ways.sh — PyTorch under gpumem on a real GPU (not part of `make test`;
# a few minutes): a small GPT-style model trained 20 steps three ways (tests/gpu/
# pytorch_three_ways.py): (a) plain; (b) LD_PRELOAD=libgpumem.so with
# PYTORCH_NO_CUDA_MEMORY_CACHING=1; (c) gpumem as PyTorch's pluggable allocator. Checks: the
# losses are identical across (a), (b), (c); the report of (b) has a peak requested within 1% of
# (a)'s torch.cuda.max_memory_allocated(); (a) writes a torch.cuda.memory._dump_snapshot pickle
# ($OUT/torch_snapshot.pickle when OUT is set) for `gpumem import`. Exits 77 without a GPU or
# without PyTorch.
set -uo pipefail
BUILD=${BUILD:-build}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu/pytorch_three_ways.sh: no NVIDIA GPU here (nvidia-smi -L failed); skipping" >&2
  exit 77
fi
PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
  echo "tests/gpu/pytorch_three_ways.sh: $PY has no PyTorch (import torch failed); skipping" >&2
  exit 77
fi
source tests/gpu/common.bash
gpu_make "$BUILD/libgpumem.so" "$BUILD/gpumem" || { echo "build failed"; exit 1; }
LIB=$(realpath "$BUILD/libgpumem.so")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
snap=${OUT:+$OUT/torch_snapshot.pickle}
snap=${snap:-$tmp/torch_snapshot.pickle}
steps=${STEPS:-20}
fail=0
"$PY" tests/gpu/pytorch_three_ways.py plain --steps "$steps" --snapshot "$snap" > "$tmp/a.txt" || { cat "$tmp/a.txt"; echo "FAIL: plain run"; exit 1; }
GPUMEM_DB="$tmp/b.db" PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD="$LIB" \
  "$PY" tests/gpu/pytorch_three_ways.py preload --steps "$steps" > "$tmp/b.txt" || { echo "FAIL: preload run"; fail=1; }
GPUMEM_DB="$tmp/c.db" "$PY" tests/gpu/pytorch_three_ways.py pluggable --steps "$steps" --lib "$LIB" > "$tmp/c.txt" \
  || { echo "FAIL: pluggable run"; fail=1; }
for m in b c; do
  if diff <(grep '^loss' "$tmp/a.txt") <(grep '^loss' "$tmp/$m.txt") > /dev/null; then
    echo "ok: losses identical, plain and ($m)"
  else
    echo "FAIL: losses differ, plain and ($m)"; paste <(grep '^loss' "$tmp/a.txt") <(grep '^loss' "$tmp/$m.txt") | head -5; fail=1
  fi
done
torch_peak=$(awk '/^max_memory_allocated/{print $2}' "$tmp/a.txt")
for m in b c; do
  [[ -f $tmp/$m.db ]] || { echo "FAIL: ($m) wrote no database"; fail=1; continue; }
  ours=$("$BUILD/gpumem" report --json "$tmp/$m.db" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["summary"]["peak_requested"])')
  echo "BENCH gpu.pytorch.peak_requested_over_torch.$m $(awk -v a="$ours" -v b="$torch_peak" 'BEGIN{printf "%.4f", a/b}') x"
  if [[ $m == b ]] && ! awk -v a="$ours" -v b="$torch_peak" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(d <= 0.01*b)}'; then
    echo "FAIL: ($m) peak requested $ours is not within 1% of torch.cuda.max_memory_allocated $torch_peak"; fail=1
  fi
done
[[ -s $snap ]] && echo "ok: torch snapshot written: $snap ($(stat -c %s "$snap") bytes)" || { echo "FAIL: no torch snapshot"; fail=1; }
exit $fail
