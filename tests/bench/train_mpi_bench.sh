#!/usr/bin/env bash
# What ZeRO buys each rank (issue 17): gpt2 124M, global B 8, T 1024, --dry-run on an 80 GB
# virtual GPU per rank, 2 and 4 ranks under mpirun, each rank recorded by gpumem
# (`-o run-%r.db`); a rank's peak is `gpumem report --json` .summary.peak_allocated, the figure
# printed the largest over the ranks.
#   train.mpi.ranksN.zeroZ.peak_allocated   bytes, for N = 2, 4 and Z = 0, 1, 2, 3
#   train.zero1_saving_over_adam            (zero 0 peak - zero 1 peak) / AdamW state
#                                           (2 x 4 bytes x parameters), 2 ranks (bar >= 0.4;
#                                           the ideal is 1 - 1/N = 0.5)
#   train.zero1_saving_over_adam.ranks4     the same at 4 ranks (ideal 0.75)
#   train.zero2_saving_over_adam            (zero 0 peak - zero 2 peak) / AdamW state, 2 ranks
#   train.zero2_saving_over_adam.ranks4     the same at 4 ranks
#   train.zero3_saving_over_schedule.ranks4 (zero 2 peak - zero 3 peak) / the trainer's own
#                                           schedule's figure: the parameters' shard saving
#                                           4 sum(n - ceil(n/4)) less the head (wte, lnf) and
#                                           the last layer gathered at the start of backward
#                                           (train/README.md, ZeRO-3); 1 = as the schedule says
# Exit 77 without mpirun or an MPI build of the trainer.
set -euo pipefail
BUILD=${BUILD:-build}
GM=$BUILD/gpumem
TRAIN=$BUILD/train_gpt2_sim
source "$(dirname "${BASH_SOURCE[0]}")/../mpi.bash"
mpi_setup train_mpi_bench "$TRAIN"
mkdir -p "$BUILD/tests/bench"
dir=$(mktemp -d "$BUILD/tests/bench/train-mpi-XXXXXX")
trap 'rm -rf "$dir"' EXIT
export GPUMEM_STACKS=0 GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G

declare -A peak
params=
for n in 2 4; do
  for z in 0 1 2 3; do
    out=$dir/n$n-z$z
    timeout 600 mpirun -np $n "$GM" record -o "$out-%r.db" -- "$TRAIN" --model gpt2 -B 8 -T 1024 \
      --dry-run --steps 3 --zero $z > "$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
    params=$(sed -n 's/.*), \([0-9]*\) parameters,.*/\1/p' "$out.log" | head -1)
    p=0
    for ((r = 0; r < n; r++)); do
      q=$("$GM" report --json "$out-$r.db" | jq '.summary.peak_allocated')
      ((q > p)) && p=$q
    done
    peak[$n,$z]=$p
    echo "BENCH train.mpi.ranks$n.zero$z.peak_allocated $p bytes"
  done
done
adam=$((8 * params))
echo "# AdamW state: 8 x $params parameters = $adam bytes" >&2
ratio() { awk -v a="$1" -v b="$2" -v s="$adam" 'BEGIN { printf "%.4f", (a - b) / s }'; }
echo "BENCH train.zero1_saving_over_adam $(ratio "${peak[2,0]}" "${peak[2,1]}") x"
echo "BENCH train.zero1_saving_over_adam.ranks4 $(ratio "${peak[4,0]}" "${peak[4,1]}") x"
echo "BENCH train.zero2_saving_over_adam $(ratio "${peak[2,0]}" "${peak[2,2]}") x"
echo "BENCH train.zero2_saving_over_adam.ranks4 $(ratio "${peak[4,0]}" "${peak[4,2]}") x"
sched=$(awk -v W=4 -f tests/integration/zero3_schedule.awk)
echo "# zero 3 saving by the trainer's schedule, 4 ranks: $sched bytes" >&2
echo "BENCH train.zero3_saving_over_schedule.ranks4 $(awk -v a="${peak[4,2]}" -v b="${peak[4,3]}" -v s="$sched" 'BEGIN { printf "%.4f", (a - b) / s }') x"
