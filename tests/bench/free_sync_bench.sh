#!/usr/bin/env bash
# What the implied synchronization of cudaFree costs under gpumem (GPUMEM_CONF free_sync:device,
# the default, against free_sync:none), on the same cudaMalloc/cudaFree/cudaMallocAsync churn as
# preload_bench (20 000 calls, 64 live slots), side by side in one run, best of 3 alternating
# runs each. BENCH lines: wall ns per call both ways and their ratio; the driver time the
# virtual GPU's cost model charges both ways (a cuCtxSynchronize per cudaFree: what an idle real
# device would spend; on a busy one the sync also waits for the work in flight, which is the
# real price and depends on the program). See alloc/README.md "Implied synchronizations".
set -uo pipefail
BUILD=${BUILD:-build}
B=$BUILD/tests/bench/preload_bench
LIB=$PWD/$BUILD/libgpumem.so
[[ -x $B && -e $LIB ]] || { echo "free_sync_bench: build first (make)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
N=20000
for i in 1 2 3; do
  for m in device none; do
    GPUMEM_SIM_STATS=1 GPUMEM_DB=none GPUMEM_CONF=free_sync:$m LD_PRELOAD=$LIB "$B" $N \
        >"$tmp/$m-$i.out" 2>"$tmp/$m-$i.err" || { echo "run free_sync:$m failed" >&2; cat "$tmp/$m-$i.err" >&2; exit 1; }
    awk '{printf "%.1f\n", $4 / $2}' "$tmp/$m-$i.out" >>"$tmp/$m.ns"
  done
done
best() { sort -n | head -1; }
d=$(best <"$tmp/device.ns"); n=$(best <"$tmp/none.ns")
simus() { awk '/simulated driver time/ {print $6}' "$1"; }
syncs() { awk '$1=="gpumem" && $2=="sim:" && $3=="cuCtxSynchronize" {v=$4} END {print v+0}' "$1"; }
echo "BENCH free_sync.call_ns_device $d ns"
echo "BENCH free_sync.call_ns_none $n ns"
awk -v a="$d" -v b="$n" 'BEGIN { if (b > 0) printf "BENCH free_sync.call_ns_ratio %.2f x\n", a / b }'
echo "BENCH free_sync.syncs_device $(syncs "$tmp/device-1.err") calls"
echo "BENCH free_sync.syncs_none $(syncs "$tmp/none-1.err") calls"
sd=$(simus "$tmp/device-1.err"); sn=$(simus "$tmp/none-1.err")
echo "BENCH sim.free_sync.driver_us_device $sd us"
echo "BENCH sim.free_sync.driver_us_none $sn us"
awk -v a="$sd" -v b="$sn" 'BEGIN { if (b > 0) printf "BENCH sim.free_sync.driver_time_ratio %.2f x\n", a / b }'
