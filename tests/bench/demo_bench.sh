#!/usr/bin/env bash
# Benchmarks of the whole product on the demo run (tiny GPT-2 on the virtual GPU):
#   demo.rec_nostack_vs_off   trainer tok/s recorded by gpumem without stacks / without gpumem
#   demo.rec_stack16_vs_off   the same with 16-frame native stacks
#   demo.driver_ms_saved      simulated driver time (virtual GPU cost counters) that gpumem's
#                             caching saved against serving every request from the driver
#                             (GPUMEM_CONF=preset:nocache), same run
# The three throughput configurations are run interleaved, several rounds, and each keeps its
# best round, so a burst of load on the machine does not land on one configuration only.
set -euo pipefail
BUILD=${BUILD:-build}
GM=$BUILD/gpumem TRAIN=$BUILD/train_gpt2_sim
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
cat alloc/*.c snapshot/*.c train/*.c sim/*.c preload/*.c > "$TMP/text.txt"
steps=${DEMO_BENCH_STEPS:-60} rounds=${DEMO_BENCH_ROUNDS:-3}
args=(--model tiny --data "$TMP/text.txt" --steps "$steps" -B 4 -T 64 --threads 2)
tokps() { awk '$1 == "summary:" { for (i = 1; i < NF; i++) if ($(i + 1) == "tok/s") print $i }' "$1"; }
best_off=0 best_nostack=0 best_stack=0
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b) ? a : b }'; }
for ((r = 0; r < rounds; r++)); do
  "$TRAIN" "${args[@]}" > "$TMP/off.txt" 2>&1
  best_off=$(max "$best_off" "$(tokps "$TMP/off.txt")")
  GPUMEM_STACKS=0 "$GM" record -q -o "$TMP/ns.db" -- "$TRAIN" "${args[@]}" > "$TMP/ns.txt" 2>&1
  best_nostack=$(max "$best_nostack" "$(tokps "$TMP/ns.txt")")
  GPUMEM_STACKS=16 "$GM" record -q -o "$TMP/s16.db" -- "$TRAIN" "${args[@]}" > "$TMP/s16.txt" 2>&1
  best_stack=$(max "$best_stack" "$(tokps "$TMP/s16.txt")")
done
echo "BENCH demo.off_tok_per_s $best_off tok/s"
echo "BENCH demo.rec_nostack_tok_per_s $best_nostack tok/s"
echo "BENCH demo.rec_stack16_tok_per_s $best_stack tok/s"
awk -v a="$best_nostack" -v b="$best_off" 'BEGIN { printf "BENCH demo.rec_nostack_vs_off %.3f x\n", a / b }'
awk -v a="$best_stack" -v b="$best_off" 'BEGIN { printf "BENCH demo.rec_stack16_vs_off %.3f x\n", a / b }'

# Driver time: the demo's own length (200 steps), cost counters of the virtual GPU.
dargs=(--model tiny --data "$TMP/text.txt" --steps 200 -B 4 -T 64 --dry-run)
simus() { sed -n 's/.*simulated driver time \([0-9.]*\) us.*/\1/p' "$1" | tail -1; }
GPUMEM_SIM_STATS=1 GPUMEM_STACKS=0 "$GM" record -q -o "$TMP/c.db" -- "$TRAIN" "${dargs[@]}" > "$TMP/c.txt" 2>&1
GPUMEM_SIM_STATS=1 GPUMEM_STACKS=0 GPUMEM_CONF=preset:nocache "$GM" record -q -o "$TMP/n.db" -- \
  "$TRAIN" "${dargs[@]}" > "$TMP/n.txt" 2>&1
cached=$(simus "$TMP/c.txt") nocache=$(simus "$TMP/n.txt")
[[ -n $cached && -n $nocache ]] || { echo "demo_bench: no simulated driver time in the output" >&2; exit 1; }
echo "BENCH demo.driver_ms_cached $(awk -v a="$cached" 'BEGIN { printf "%.3f", a / 1000 }') ms"
echo "BENCH demo.driver_ms_nocache $(awk -v a="$nocache" 'BEGIN { printf "%.3f", a / 1000 }') ms"
echo "BENCH demo.driver_ms_saved $(awk -v a="$cached" -v b="$nocache" 'BEGIN { printf "%.3f", (b - a) / 1000 }') ms"
