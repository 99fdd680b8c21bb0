#!/usr/bin/env bash
# Benchmarks of the whole product on the demo run (tiny GPT-2 on the virtual GPU):
#   demo.rec_nostack_vs_off   trainer tok/s recorded by gpumem without stacks / without gpumem
#   demo.rec_stack16_vs_off   the same with 16-frame native stacks
#   sim.demo.driver_ms_saved  simulated driver time (virtual GPU cost counters) that gpumem's
#                             caching saved against serving every request from the driver
#                             (GPUMEM_CONF=preset:nocache), same run
#
# The trainer runs its ops on ONE thread here: on the virtual GPU the CPU plays the GPU, and
# with every core computing, the recorder's writer thread can only run by taking time from the
# "GPU" itself — which no GPU machine does (its training process leaves CPU cores idle while
# kernels run). The same figures with the ops on every core are printed too
# (demo.*_allcores), as the worst case of recording on a CPU-bound program.
set -euo pipefail
BUILD=${BUILD:-build}
GM=$BUILD/gpumem TRAIN=$BUILD/train_gpt2_sim
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
cat alloc/*.c snapshot/*.c train/*.c sim/*.c preload/*.c > "$TMP/text.txt"
steps=${DEMO_BENCH_STEPS:-100} rounds=${DEMO_BENCH_ROUNDS:-7}
tokps() { awk '$1 == "summary:" { for (i = 1; i < NF; i++) if ($(i + 1) == "tok/s") print $i }' "$1"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# Each round runs the three configurations back to back and keeps their ratios; the figure is
# the median over rounds. Neighbouring runs see the same machine (this VM's speed drifts by
# ±10% over seconds), so per-round ratios cancel what per-configuration bests do not.
throughput() { # suffix threads
  local sfx=$1 args=(--model tiny --data "$TMP/text.txt" --steps "$steps" -B 4 -T 64 --threads "$2")
  : > "$TMP/off.all"; : > "$TMP/r_ns"; : > "$TMP/r_s16"
  for ((r = 0; r < rounds; r++)); do
    "$TRAIN" "${args[@]}" > "$TMP/off.txt" 2>&1
    GPUMEM_STACKS=0 "$GM" record -q -o "$TMP/ns.db" -- "$TRAIN" "${args[@]}" > "$TMP/ns.txt" 2>&1
    GPUMEM_STACKS=16 "$GM" record -q -o "$TMP/s16.db" -- "$TRAIN" "${args[@]}" > "$TMP/s16.txt" 2>&1
    local off ns s16
    off=$(tokps "$TMP/off.txt") ns=$(tokps "$TMP/ns.txt") s16=$(tokps "$TMP/s16.txt")
    echo "$off" >> "$TMP/off.all"
    awk -v a="$ns" -v b="$off" 'BEGIN { print a / b }' >> "$TMP/r_ns"
    awk -v a="$s16" -v b="$off" 'BEGIN { print a / b }' >> "$TMP/r_s16"
  done
  echo "BENCH demo.off_tok_per_s$sfx $(median < "$TMP/off.all") tok/s"
  printf 'BENCH demo.rec_nostack_vs_off%s %.3f x\n' "$sfx" "$(median < "$TMP/r_ns")"
  printf 'BENCH demo.rec_stack16_vs_off%s %.3f x\n' "$sfx" "$(median < "$TMP/r_s16")"
}
throughput "" 1
throughput _allcores "$(nproc)"

# Driver time: the demo's own length (200 steps), cost counters of the virtual GPU.
dargs=(--model tiny --data "$TMP/text.txt" --steps 200 -B 4 -T 64 --dry-run)
simus() { sed -n 's/.*simulated driver time \([0-9.]*\) us.*/\1/p' "$1" | tail -1; }
GPUMEM_SIM_STATS=1 GPUMEM_STACKS=0 "$GM" record -q -o "$TMP/c.db" -- "$TRAIN" "${dargs[@]}" > "$TMP/c.txt" 2>&1
GPUMEM_SIM_STATS=1 GPUMEM_STACKS=0 GPUMEM_CONF=preset:nocache "$GM" record -q -o "$TMP/n.db" -- \
  "$TRAIN" "${dargs[@]}" > "$TMP/n.txt" 2>&1
cached=$(simus "$TMP/c.txt") nocache=$(simus "$TMP/n.txt")
[[ -n $cached && -n $nocache ]] || { echo "demo_bench: no simulated driver time in the output" >&2; exit 1; }
echo "BENCH sim.demo.driver_ms_cached $(awk -v a="$cached" 'BEGIN { printf "%.3f", a / 1000 }') ms"
echo "BENCH sim.demo.driver_ms_nocache $(awk -v a="$nocache" 'BEGIN { printf "%.3f", a / 1000 }') ms"
echo "BENCH sim.demo.driver_ms_saved $(awk -v a="$cached" -v b="$nocache" 'BEGIN { printf "%.3f", (b - a) / 1000 }') ms"
