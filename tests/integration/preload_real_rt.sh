#!/usr/bin/env bash
# Property: a program built with nvcc -cudart shared against the REAL libcudart.so.13 calls
# gpumem's cudaMalloc under the preload (GPUMEM_STATS counts it). Without a GPU the real
# runtime cannot initialise, and the program gets the same error code as without gpumem,
# cleanly (no crash); on a machine with a GPU gpumem serves the allocation.
source tests/integration/preload_common.bash
[[ -x $APPS/real_rt_app ]] || { echo "real_rt_app not built (needs nvcc; plain build only)" >&2; exit 77; }
need "$LIB"
"$APPS/real_rt_app" >"$TMP/plain.out" 2>"$TMP/plain.err"
check_eq "real_rt_app without gpumem exit status" "$?" 0
GPUMEM_STATS=1 LD_PRELOAD=$LIB "$APPS/real_rt_app" >"$TMP/pre.out" 2>"$TMP/pre.err"
check_eq "real_rt_app under gpumem exit status (no crash)" "$?" 0
same_output "real_rt_app" "$TMP/plain.out" "$TMP/pre.out"
check_eq "gpumem's cudaMalloc reached" "$(stat "$TMP/pre.err" rt_malloc)" 1
code=$(awk '/cudaMalloc =/ {print $4}' "$TMP/pre.out")
if [[ $code == 0 ]]; then
  check_eq "served by gpumem (GPU present)" "$(stat "$TMP/pre.err" served)" 1
else
  check_eq "no GPU: gpumem off, real runtime's error returned" "$(awk '$3=="mode" {print $4}' "$TMP/pre.err")" off
  echo "note: cudaMalloc returned $code ($(awk '/cudaMalloc =/ {print $5}' "$TMP/pre.out")) both ways"
fi
finish
