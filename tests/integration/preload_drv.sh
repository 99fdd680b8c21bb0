#!/usr/bin/env bash
# Properties, for a program that reaches the driver only through dlopen("libcuda.so.1") +
# dlsym("cuGetProcAddress_v2") (what a statically linked runtime, cuBLAS or NCCL do):
#  - under the preload every cuMemAlloc/cuMemAllocAsync it makes is served by gpumem and every
#    free returns to it; the driver sees segment maps only;
#  - cuMemGetAddressRange on an interior pointer of a sub-allocated block answers for the block;
#  - the program's output is identical with and without the preload.
source tests/integration/preload_common.bash
need "$LIB" "$APPS/drv_app"
run_plain "$TMP/plain.out" "$TMP/plain.err" "$APPS/drv_app" || fail "drv_app failed without the preload"
run_pre "$TMP/pre.out" "$TMP/pre.err" "$APPS/drv_app" || { fail "drv_app failed under the preload"; cat "$TMP/pre.err"; }
same_output "drv_app" "$TMP/plain.out" "$TMP/pre.out"
read -r allocs frees aallocs afrees ranges < <(awk '/^drv_app: allocs/ {print $3, $5, $7, $9, $11}' "$TMP/pre.out")
check_eq "cuMemAlloc calls seen" "$(stat "$TMP/pre.err" drv_alloc)" "$allocs"
check_eq "cuMemAllocAsync calls seen" "$(stat "$TMP/pre.err" drv_alloc_async)" "$aallocs"
check_eq "allocations served by gpumem" "$(stat "$TMP/pre.err" served)" "$((allocs + aallocs))"
check_eq "frees returned to gpumem" "$(stat "$TMP/pre.err" released)" "$((frees + afrees))"
check_eq "address ranges answered for the block" "$(stat "$TMP/pre.err" addr_range)" "$ranges"
check_eq "interior-pointer ranges correct" "$ranges" "$((allocs + aallocs))"
check_eq "driver cuMemAlloc calls under gpumem" "$(simcount "$TMP/pre.err" cuMemAlloc)" 0
check_eq "driver cuMemAllocAsync calls under gpumem" "$(simcount "$TMP/pre.err" cuMemAllocAsync)" 0
check_gt "driver cuMemMap calls under gpumem" "$(simcount "$TMP/pre.err" cuMemMap)" 0
check_eq "pinned cuMemAllocHost from the pool" "$(stat "$TMP/pre.err" host_alloc)" 1
# record mode: the driver serves, gpumem counts each allocation once
GPUMEM_MODE=record run_pre "$TMP/rec.out" "$TMP/rec.err" "$APPS/drv_app" || fail "drv_app failed in record mode"
same_output "drv_app record mode" "$TMP/plain.out" "$TMP/rec.out"
check_eq "record mode: served" "$(stat "$TMP/rec.err" served)" 0
check_eq "record mode: device allocations passed through" "$(stat "$TMP/rec.err" passthrough)" "$((allocs + aallocs))"
check_eq "record mode: frees matched" "$(stat "$TMP/rec.err" passthrough_free)" "$((frees + afrees))"
check_eq "record mode: driver cuMemAlloc calls" "$(simcount "$TMP/rec.err" cuMemAlloc)" "$allocs"
finish
