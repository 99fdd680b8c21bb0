#!/usr/bin/env bash
# sim_nvcc.sh — a program built by nvcc with -cudart shared (as gpumem's CUDA trainer is) loads on
# the virtual GPU's libcudart.so.13: its fat-binary registration is accepted, allocations,
# memsets and copies work, and its device-kernel launches (nvcc 13: __cudaGetKernel, then
# __cudaLaunchKernel) are skipped, never an error, and counted under the kernel's name in
# GPUMEM_SIM_STATS, while function attributes and occupancy answer; under
# GPUMEM_SIM_KERNELS=strict the launch fails with cudaErrorInvalidDeviceFunction (98) instead
# of crashing, and so do the attribute queries. Built with nvcc's default static
# runtime it cannot start, and the virtual GPU says once to build with -cudart shared. Skipped without nvcc, and under a
# sanitizer (an uninstrumented nvcc program cannot load an instrumented runtime).
set -euo pipefail
build=${BUILD:-build}
if [[ -n ${SAN:-} ]]; then echo "sim_nvcc.sh: skipped under SAN=$SAN" >&2; exit 77; fi
nvcc=${NVCC:-}
for c in "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" "$(command -v nvcc || true)"; do
  [[ -z $nvcc && -n $c && -x $c ]] && nvcc=$c
done
if [[ -z $nvcc ]]; then echo "sim_nvcc.sh: nvcc not found; skipped" >&2; exit 77; fi
[[ -f $build/sim/libcudart.so.13 ]] || { echo "sim_nvcc.sh: $build/sim/libcudart.so.13 missing: run make" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$nvcc" -O1 -cudart shared -o "$tmp/app" tests/unit/sim_nvcc_app.cu
fail=0
expect() { grep -qx "$1" <<<"$out" || { echo "FAIL: expected line '$1'"; fail=1; }; }
# skipped (the default): success, memory untouched, counted by name
out=$(GPUMEM_SIM_STATS=1 LD_LIBRARY_PATH=$build/sim "$tmp/app" 2>"$tmp/skip.err")
echo "$out"
expect "malloc 0"
expect "memset 0"
expect "launch 0 cudaSuccess"
expect "attrs 0 1024 32"
expect "occupancy 0 32"
expect "setattr 0"
expect "launch_shmem 0"
expect "copy 0 117901063"
expect "free 0"
# the kernel's parameter layout, read from the fat binary: what its C++ signature gives
expect "param 0 0 4"
expect "param 1 8 8"
expect "param 2 16 16"
expect "param 3 32 2"
expect "param 4 40 8"
expect "param 5 error 1"
expect "big 0 0 20480"
expect "big 1 20480 4"
expect "big 2 error 1"
grep -q "skipped          2  _Z4add1Pi" "$tmp/skip.err" \
  || { echo "FAIL: the two skipped launches are not counted under _Z4add1Pi"; cat "$tmp/skip.err"; fail=1; }
# the same with compressed cubins (zstd, as PyTorch's wheels ship them)
"$nvcc" -O1 -cudart shared -Xfatbin=-compress-all -o "$tmp/zapp" tests/unit/sim_nvcc_app.cu
zout=$(LD_LIBRARY_PATH=$build/sim "$tmp/zapp" 2>/dev/null)
grep -qx "param 2 16 16" <<<"$zout" && grep -qx "param 4 40 8" <<<"$zout" && grep -qx "big 1 20480 4" <<<"$zout" \
  || { echo "FAIL: the layout is not read from a compressed fat binary: $(grep param <<<"$zout")"; fail=1; }
# strict: the project's own programs rely on their kernels
out=$(GPUMEM_SIM_KERNELS=strict LD_LIBRARY_PATH=$build/sim "$tmp/app")
echo "$out"
expect "malloc 0"
expect "memset 0"
expect "launch 98 cudaErrorInvalidDeviceFunction"
expect "attrs 98 0 0"
expect "copy 0 117901063"
expect "free 0"
# nvcc's default, the static runtime, cannot start on the virtual GPU (it needs the driver's
# private export tables): every call fails with cudaErrorNotSupported, and the virtual GPU
# says once what to do about it
"$nvcc" -O1 -o "$tmp/static_app" tests/unit/sim_nvcc_app.cu
sout=$(LD_LIBRARY_PATH=$build/sim "$tmp/static_app" 2> "$tmp/static.err") || true
grep -qx "malloc 801" <<<"$sout" || { echo "FAIL: the static-runtime program did not get cudaErrorNotSupported: $sout"; fail=1; }
[[ $(grep -c -- "build it with -cudart shared" "$tmp/static.err") -eq 1 ]] \
  || { echo "FAIL: no one-time hint to build with -cudart shared"; cat "$tmp/static.err"; fail=1; }
exit $fail
