#!/usr/bin/env bash
# Benchmark of libgpumem.so on the virtual GPU: the same allocation churn (preload_bench) run
# plain (every cudaMalloc/cudaFree reaches the driver) and under gpumem (served from its cache).
# BENCH lines: wall ns per call both ways, the driver time the virtual GPU's cost model charges
# both ways (what a real driver would have spent), and their ratio.
set -uo pipefail
BUILD=${BUILD:-build}
B=$BUILD/tests/bench/preload_bench
LIB=$PWD/$BUILD/libgpumem.so
[[ -x $B && -e $LIB ]] || { echo "preload_bench: build first (make)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
N=20000
GPUMEM_SIM_STATS=1 "$B" $N >"$tmp/plain.out" 2>"$tmp/plain.err" || { echo "plain run failed" >&2; exit 1; }
GPUMEM_SIM_STATS=1 GPUMEM_DB="$tmp/b.db" GPUMEM_QUIET=1 LD_PRELOAD=$LIB "$B" $N >"$tmp/gm.out" 2>"$tmp/gm.err" ||
    { echo "gpumem run failed" >&2; cat "$tmp/gm.err" >&2; exit 1; }
GPUMEM_SIM_STATS=1 GPUMEM_DB="$tmp/c.db" GPUMEM_QUIET=1 GPUMEM_STACKS=0 LD_PRELOAD=$LIB "$B" $N >"$tmp/ns.out" 2>"$tmp/ns.err" ||
    { echo "gpumem run (no stacks) failed" >&2; exit 1; }
ns() { awk '{printf "%.0f", $4 / $2}' "$1"; }
simus() { awk '/simulated driver time/ {print $6}' "$1"; }
echo "BENCH preload_call_ns_plain $(ns "$tmp/plain.out") ns"
echo "BENCH preload_call_ns_gpumem $(ns "$tmp/gm.out") ns"
echo "BENCH preload_call_ns_gpumem_nostacks $(ns "$tmp/ns.out") ns"
p=$(simus "$tmp/plain.err"); g=$(simus "$tmp/gm.err")
echo "BENCH sim.preload_driver_us_plain $p us"
echo "BENCH sim.preload_driver_us_gpumem $g us"
awk -v p="$p" -v g="$g" 'BEGIN { if (g > 0) printf "BENCH sim.preload_driver_time_ratio %.1f x\n", p / g }'

# Access tracking: the added cost of one launch with 8 pointer parameters, uses on against
# GPUMEM_USES=0, both under gpumem, side by side (best of 3 alternating runs each, so a busy
# machine's noise falls on both). 15 000 launches fill less than the recorder's ring (3 records
# a launch), so the figure is the launching thread's own work, not back-pressure: its CPU time
# (CLOCK_THREAD_CPUTIME_ID). With uses on, the recorder's writer turns each launch into 9 rows
# (~2 us of its own CPU, rec_bench's "writer thread" line) while the virtual GPU's worker runs
# the kernels: three busy threads on a 2-core machine, and the wall time (on stderr) then
# counts the launching thread's waits for a core, 150-350 ns from run to run on a quiet machine.
L=15000
best() { sort -n | head -1; }
for i in 1 2 3; do
  for u in 0 1; do
    GPUMEM_USES=$u GPUMEM_DB="$tmp/u$u-$i.db" GPUMEM_QUIET=1 LD_PRELOAD=$LIB "$B" launch $L >"$tmp/l$u-$i.out" 2>"$tmp/l$u-$i.err" ||
        { echo "launch run (GPUMEM_USES=$u) failed" >&2; cat "$tmp/l$u-$i.err" >&2; exit 1; }
    awk '{printf "%.1f\n", $6 / $2}' "$tmp/l$u-$i.out" >>"$tmp/l$u.ns"
    awk '{printf "%.1f\n", $4 / $2}' "$tmp/l$u-$i.out" >>"$tmp/l$u.wall"
  done
done
echo "# uses.launch: wall ns a launch, best of 3: off $(best <"$tmp/l0.wall"), on $(best <"$tmp/l1.wall")" >&2
u0=$(best <"$tmp/l0.ns"); u1=$(best <"$tmp/l1.ns")
echo "BENCH uses.launch_ns_off $u0 ns"
echo "BENCH uses.launch_ns_on $u1 ns"
awk -v a="$u1" -v b="$u0" 'BEGIN { d = a - b; if (d < 0) d = 0; printf "BENCH uses.launch_ns %.0f ns\n", d }'
