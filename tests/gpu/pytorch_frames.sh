#!/usr/bin/env bash
# tests/gpu/pytorch_frames.sh — issue 21's acceptance (about a minute on a GPU, seconds on the
# virtual GPU): the PyTorch trainer of tests/gpu/pytorch_three_ways.py (its GPT model, driven by
# tests/gpu/pytorch_frames.py) recorded with `gpumem record` and PYTORCH_NO_CUDA_MEMORY_CACHING=1,
# so every tensor is a cudaMalloc that gpumem sees, allocated by PyTorch's ops with the GIL
# released (preload/python_nogil.c reads the Python frames then).
#   1. the report's top call sites at the peak are lines of the scripts (the model's forward,
#      the training step), not C++ frames: the top row, and at least 3 of the top 5;
#   2. under torch.autograd.profiler.emit_nvtx() the innermost phases are op names: the top row
#      of "by op" is an aten:: op, and most allocations' innermost phase is an op.
# Prints the top rows and BENCH gpu.pytorch.python_site_share (share of the peak's bytes whose
# call site is a Python line). Where it runs (tests/gpu/common.bash, gpu_or_sim): a GPU when
# nvidia-smi lists one (tests/gpu/run.sh), else the virtual GPU (`make test`, through
# tests/torch/module.mk): the same checks, every one about allocations (no value is read).
# Exits 77 without PyTorch.
set -uo pipefail
BUILD=${BUILD:-build}
source tests/gpu/common.bash
gpu_or_sim
if [[ $TARGET == gpu ]]; then
  gpu_make "$BUILD/libgpumem.so" "$BUILD/gpumem" || { echo "build failed"; exit 1; }
else
  gpu_built "$BUILD/libgpumem.so" "$BUILD/gpumem" || exit 1
fi
GM=$BUILD/gpumem
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for mode in plain nvtx; do
  args=(--steps "${STEPS:-$([[ $TARGET == gpu ]] && echo 5 || echo 3)}"); [[ $mode == nvtx ]] && args+=(--nvtx)
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${REC_ON[@]}" "$GM" record -q -o "$tmp/$mode.db" -- "$PY" tests/gpu/pytorch_frames.py "${args[@]}" \
    > "$tmp/$mode.out" 2>&1
  grep -q "pytorch_frames: done" "$tmp/$mode.out" || { cat "$tmp/$mode.out"; echo "FAIL: ($mode) the trainer did not finish"; fail=1; continue; }
  "$GM" report --json "$tmp/$mode.db" > "$tmp/$mode.json" || { echo "FAIL: ($mode) report failed"; fail=1; continue; }
done
[[ -s $tmp/plain.json ]] && "$PY" - "$tmp/plain.json" <<'PYEOF' || fail=1
import json, re, sys
sites = json.load(open(sys.argv[1]))["peak"]["by_site"]
ours = re.compile(r"^(pytorch_frames|pytorch_three_ways)\.py:\d+ in ")
for s in sites[:8]:
    print("  %5.1f%%  %s" % (100 * s["share"], s["site"]))
py_share = sum(s["share"] for s in sites if re.search(r"\.py:\d+ in ", s["site"]))
print("BENCH gpu.pytorch.python_site_share %.4f share" % py_share)
top = sites[:5]
n = sum(1 for s in top if ours.match(s["site"]))
if not top or not ours.match(top[0]["site"]) or n < min(3, len(top)):
    print("FAIL: the top call sites at the peak are not the scripts' lines (%d of %d)" % (n, len(top)))
    sys.exit(1)
print("ok: the top call sites are the scripts' lines (%d of the top %d)" % (n, len(top)))
PYEOF
if [[ -s $tmp/nvtx.json ]]; then
  "$PY" - "$tmp/nvtx.json" <<'PYEOF' || fail=1
import json, sys
ops = json.load(open(sys.argv[1]))["peak"]["by_op"]
for o in ops[:5]:
    print("  op", json.dumps(o))
name = lambda o: o.get("op") or o.get("name") or ""
if not ops or not name(ops[0]).startswith("aten::"):
    print("FAIL: emit_nvtx: the top row of 'by op' is not an aten:: op")
    sys.exit(1)
print("ok: emit_nvtx: by op led by %s" % name(ops[0]))
PYEOF
  inner=$("$GM" sql "$tmp/nvtx.db" -c "SELECT phase FROM allocations" | tail -n +2 \
    | awk -F/ '{n++; if ($NF ~ /^aten::/ || $NF ~ /Backward/) a++} END {printf "%d %d", a, n}')
  read -r a n <<< "$inner"
  echo "innermost phase an op: $a of $n allocations"
  (( n > 0 && 2 * a >= n )) || { echo "FAIL: emit_nvtx: most allocations' innermost phase is not an op"; fail=1; }
fi
exit $fail
