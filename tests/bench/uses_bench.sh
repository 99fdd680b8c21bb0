#!/usr/bin/env bash
# The cost of access tracking on the demo run (tiny GPT-2 on the virtual GPU, B=4, T=64):
#   uses.demo_vs_off          trainer tok/s under `gpumem record` with GPUMEM_USES=1 divided by
#                             the same run with GPUMEM_USES=0 (default recording: stacks on)
#   uses.demo_vs_off_nostack  the same with GPUMEM_STACKS=0 (recording at its cheapest, so
#                             the share of the uses is the largest)
#   uses.launches_per_step    launch events per step the tracking records (the trainer's
#                             LAUNCHES total / steps), for scale
#   uses.writer_cpu_ms_on/off the recorder's writer-thread CPU time for the whole run (meta
#                             writer_cpu_ns; median over rounds, default recording): what the
#                             tracking costs in CPU, free of the wall-clock noise of a shared VM
# The bar for uses.demo_vs_off is 0.97.
#
# As in demo_bench.sh: the ops run on ONE thread (on the virtual GPU the CPU plays the GPU; with
# every core computing, the writer thread could only run by taking time from the "GPU", which
# no GPU machine does), each round runs the configurations back to back and keeps their ratio,
# and the figure is the median over rounds: neighbouring runs see the same machine (this VM's
# speed drifts by ±10% over seconds), so per-round ratios cancel what per-run bests do not.
# The order within a round alternates, so neither configuration always runs first.
set -euo pipefail
BUILD=${BUILD:-build}
GM=$BUILD/gpumem TRAIN=$BUILD/train_gpt2_sim
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
cat alloc/*.c snapshot/*.c train/*.c sim/*.c preload/*.c > "$TMP/text.txt"
steps=${USES_BENCH_STEPS:-100} rounds=${USES_BENCH_ROUNDS:-11}
args=(--model tiny --data "$TMP/text.txt" --steps "$steps" -B 4 -T 64 --threads 1)
tokps() { awk '$1 == "summary:" { for (i = 1; i < NF; i++) if ($(i + 1) == "tok/s") print $i }' "$1"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
run() { # uses stacks(empty: gpumem's default) tag
  env GPUMEM_USES="$1" ${2:+GPUMEM_STACKS=$2} "$GM" record -q -o "$TMP/$3.db" -- "$TRAIN" "${args[@]}" \
    > "$TMP/$3.txt" 2>&1 || { tail -3 "$TMP/$3.txt" >&2; echo "uses_bench: a run failed" >&2; exit 1; }
  "$GM" sql "$TMP/$3.db" -c "SELECT value FROM meta WHERE key = 'writer_cpu_ns'" | tail -1 \
    >> "$TMP/cpu.$3${2:+.stacks$2}" # writer CPU ns per run, by configuration
  tokps "$TMP/$3.txt"
}
ratio() { # stacks(empty: default) -> median of per-round (uses=1 / uses=0)
  : > "$TMP/r"
  for ((r = 0; r < rounds; r++)); do
    local on off
    if ((r % 2)); then
      off=$(run 0 "$1" off)
      on=$(run 1 "$1" on)
    else
      on=$(run 1 "$1" on)
      off=$(run 0 "$1" off)
    fi
    awk -v a="$on" -v b="$off" 'BEGIN { print a / b }' >> "$TMP/r"
  done
  median < "$TMP/r"
}
printf 'BENCH uses.demo_vs_off %.3f x\n' "$(ratio "")"
printf 'BENCH uses.demo_vs_off_nostack %.3f x\n' "$(ratio 0)"
# The tracked run's launches (the last "on" run): every one is a launch event.
per=$(awk -v s="$steps" '$1 == "LAUNCHES" { printf "%.1f", ($2 + $4 + $6) / s }' "$TMP/on.txt")
echo "BENCH uses.launches_per_step $per launches"
for c in on off; do
  printf 'BENCH uses.writer_cpu_ms_%s %.1f ms\n' "$c" "$(median < "$TMP/cpu.$c" | awk '{ print $1 / 1e6 }')"
done
