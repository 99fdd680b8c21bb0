#!/usr/bin/env bash
# tests/gpu/preload_gpu.sh — device-only check of libgpumem.so on a real GPU and driver (not
# part of `make test`; about a minute). The test programs of tests/apps/ are rebuilt against the
# REAL libcudart.so.13 / libcuda.so.1 (no virtual GPU), then each is run with and without
# LD_PRELOAD=$BUILD/libgpumem.so:
#   - real_rt_app (nvcc): gpumem's cudaMalloc serves the allocation, the memory holds data;
#   - rt_app: identical output both ways, every cudaMalloc/cudaMallocAsync (and the cuMemAlloc
#     reached through cudaGetDriverEntryPoint) served by gpumem on real VMM segments;
#   - drv_app (dlopen + cuGetProcAddress only): identical output, every allocation served,
#     cuMemGetAddressRange answers for the block;
#   - stress_app: 8 threads, no overlapping memory;
# and prints BENCH lines of the allocation churn (tests/bench/preload_bench.c) on the device.
# Exits 77 with a message where no GPU is present.
set -uo pipefail
BUILD=${BUILD:-build}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu/preload_gpu.sh: no NVIDIA GPU here (nvidia-smi -L failed); skipping" >&2
  exit 77
fi
nvidia-smi -L
CUDA=${CUDA_HOME:-/usr/local/cuda}
source tests/gpu/common.bash
gpu_make "$BUILD/libgpumem.so" "$BUILD/tests/apps/real_rt_app" || { echo "build failed"; exit 1; }
LIB=$PWD/$BUILD/libgpumem.so
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export GPUMEM_DB="$TMP/rec-%p.db" GPUMEM_QUIET=1
CC_REAL=(gcc -std=gnu17 -O2 -Wall -Wextra -D_GNU_SOURCE -I. -isystem "$CUDA/include")
for a in rt_app stress_app; do
  "${CC_REAL[@]}" -o "$TMP/$a" "tests/apps/$a.c" -L"$CUDA/lib64" -lcudart -Wl,-rpath,"$CUDA/lib64" -ldl -lpthread || exit 1
done
"${CC_REAL[@]}" -o "$TMP/drv_app" tests/apps/drv_app.c -ldl || exit 1
"${CC_REAL[@]}" -o "$TMP/bench" tests/bench/preload_bench.c -L"$CUDA/lib64" -lcudart -Wl,-rpath,"$CUDA/lib64" || exit 1

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
check_eq() { if [[ "$2" == "$3" ]]; then echo "ok: $1 ($2)"; else fail "$1: got '$2', expected '$3'"; fi; }
stat() { awk -v k="$2" '$1=="gpumem-stats" && $3==k {v=$4} END {print v+0}' "$1"; }
pre() { GPUMEM_STATS=1 LD_PRELOAD=$LIB "$@"; }

pre "$BUILD/tests/apps/real_rt_app" >"$TMP/real.out" 2>"$TMP/real.err"
check_eq "real_rt_app exit status" "$?" 0
check_eq "real_rt_app memory" "$(grep -c 'real_rt_app: memory ok' "$TMP/real.out")" 1
check_eq "real_rt_app served by gpumem" "$(stat "$TMP/real.err" served)" 1

"$TMP/rt_app" >"$TMP/rt.plain" 2>&1 || { fail "rt_app failed without gpumem"; grep -v '^rt_app: allocs' "$TMP/rt.plain" | sort | uniq -c | head -8; }
pre "$TMP/rt_app" >"$TMP/rt.out" 2>"$TMP/rt.err" || { fail "rt_app failed under gpumem"; tail -5 "$TMP/rt.err"; }
cmp -s "$TMP/rt.plain" "$TMP/rt.out" && echo "ok: rt_app identical output" || { fail "rt_app output differs"; diff "$TMP/rt.plain" "$TMP/rt.out"; }
read -r allocs aallocs < <(awk '/^rt_app: allocs/ {print $3, $7}' "$TMP/rt.out")
check_eq "rt_app allocations served" "$(stat "$TMP/rt.err" served)" "$((allocs + aallocs + 1))"
check_eq "rt_app frees returned" "$(stat "$TMP/rt.err" released)" "$(stat "$TMP/rt.err" served)"
check_eq "rt_app pinned from the pool" "$(stat "$TMP/rt.err" host_alloc)" "$(awk '/^rt_app: allocs/ {print $11}' "$TMP/rt.out")"

"$TMP/drv_app" >"$TMP/drv.plain" 2>&1 || { fail "drv_app failed without gpumem"; sort "$TMP/drv.plain" | uniq -c | head -8; }
pre "$TMP/drv_app" >"$TMP/drv.out" 2>"$TMP/drv.err" || { fail "drv_app failed under gpumem"; tail -5 "$TMP/drv.err"; }
cmp -s "$TMP/drv.plain" "$TMP/drv.out" && echo "ok: drv_app identical output" || { fail "drv_app output differs"; diff "$TMP/drv.plain" "$TMP/drv.out"; }
read -r dallocs daallocs < <(awk '/^drv_app: allocs/ {print $3, $7}' "$TMP/drv.out")
check_eq "drv_app allocations served" "$(stat "$TMP/drv.err" served)" "$((dallocs + daallocs))"
check_eq "drv_app address ranges answered" "$(stat "$TMP/drv.err" addr_range)" "$((dallocs + daallocs))"

pre "$TMP/stress_app" >"$TMP/stress.out" 2>"$TMP/stress.err"
check_eq "stress_app" "$(awk '{print $2}' "$TMP/stress.out")" ok

"$TMP/bench" 20000 >"$TMP/b.plain" && LD_PRELOAD=$LIB GPUMEM_STACKS=0 "$TMP/bench" 20000 >"$TMP/b.gm" &&
  awk 'FNR==1 && NR==1 {p=$4/$2} FNR==1 && NR==2 {g=$4/$2}
       END {printf "BENCH preload_gpu_call_ns_plain %.0f ns\nBENCH preload_gpu_call_ns_gpumem %.0f ns\nBENCH preload_gpu_speedup %.1f x\n", p, g, p/g}' \
      "$TMP/b.plain" "$TMP/b.gm"
[[ $fails -eq 0 ]] && { echo "all checks passed"; exit 0; }
echo "$fails check(s) failed"; exit 1
