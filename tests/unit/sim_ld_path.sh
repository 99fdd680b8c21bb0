#!/usr/bin/env bash
# sim_ld_path.sh — every kind of program linked against the virtual GPU stays on the virtual GPU
# when LD_LIBRARY_PATH names another libcuda.so.1 and libcudart.so.13, as it does on a machine
# with a real GPU (the driver's folder, the toolkit's lib64). The first run of tests/gpu/ on an
# H200 found the runtime loading the real driver there (cudaErrorInsufficientDriver, crashes):
# a RUNPATH is outranked by LD_LIBRARY_PATH. Now everything linked against the virtual GPU
# carries DT_RPATH (sim/module.mk, SIM_RPATH) and the runtime opens the driver next to it by path
# (sim/sim_rt.c, open_driver).
#
# The other libraries are the toolkit's: its stub libcuda.so (soname libcuda.so.1, every call
# fails) and its real libcudart.so.13. Each program must exit as it does without them and print
# the same. Skipped (77) where the toolkit's stub is missing.
set -uo pipefail
build=${BUILD:-build}
cuda=${CUDA_HOME:-/usr/local/cuda}
stub=$cuda/lib64/stubs/libcuda.so
rt=$cuda/lib64/libcudart.so.13
if [[ ! -f $stub || ! -f $rt ]]; then
  echo "sim_ld_path.sh: the toolkit's $stub or $rt is missing; skipped" >&2
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/other"
ln -s "$stub" "$tmp/other/libcuda.so.1"
ln -s "$rt" "$tmp/other/libcudart.so.13"
cat train/*.c > "$tmp/text.txt"

fail=0
# name, filter of the output (what must be equal), command...
run() {
  local name=$1 filter=$2 rc1 rc2
  shift 2
  (cd "$tmp" && "$@") 2> "$tmp/err1" | $filter > "$tmp/out1"
  rc1=${PIPESTATUS[0]}
  (cd "$tmp" && LD_LIBRARY_PATH=$tmp/other "$@") 2> "$tmp/err2" | $filter > "$tmp/out2"
  rc2=${PIPESTATUS[0]}
  if [[ $rc1 -ne 0 ]]; then
    echo "FAIL: $name exits $rc1 without LD_LIBRARY_PATH"; sed 's/^/  /' "$tmp/err1" | head -5; fail=1
  elif [[ $rc2 -ne 0 ]]; then
    echo "FAIL: $name exits $rc2 with LD_LIBRARY_PATH naming another driver and runtime"
    sed 's/^/  /' "$tmp/err2" | head -5; fail=1
  elif [[ ! -s $tmp/out1 ]]; then
    echo "FAIL: $name printed nothing to compare"; fail=1
  elif ! cmp -s "$tmp/out1" "$tmp/out2"; then
    echo "FAIL: $name prints otherwise with LD_LIBRARY_PATH naming another driver and runtime"
    diff "$tmp/out1" "$tmp/out2" | head -6; fail=1
  else
    echo "ok: $name ($(wc -l < "$tmp/out1") lines alike)"
  fi
}
losses() { awk '/^step/ {print $4}'; }
counts() { grep -v '^gpumem'; }
B=$(cd "$build" && pwd)
run "train_gpt2_sim (links libcudart and libcuda)" losses \
  "$B/train_gpt2_sim" --data "$tmp/text.txt" --model tiny -B 2 -T 16 --steps 2
run "tests/diff/graph_mem (runtime only; the driver is dlopened)" cat "$B/tests/diff/graph_mem"
run "tests/diff/oob (runtime and the driver by dlsym)" cat "$B/tests/diff/oob"
run "rt_app (runtime only, RUNPATH before)" cat "$B/tests/apps/rt_app"
run "drv_app (dlopen of the driver)" cat "$B/tests/apps/drv_app"
run "drv_sym_app (links libcuda)" cat "$B/tests/apps/drv_sym_app"
run "drv_mix_app (both)" cat "$B/tests/apps/drv_mix_app"
run "blas_app (the cuBLAS stand-in)" cat "$B/tests/apps/blas_app"
if [[ -z ${SAN:-} ]]; then
  run "gpumem record -- rt_app" counts "$B/gpumem" record -q -o "$tmp/r.db" --force -- "$B/tests/apps/rt_app"
fi
[[ $fail -eq 0 ]] && echo "sim_ld_path.sh: every program stays on the virtual GPU" || exit 1
