#!/usr/bin/env bash
# ZeRO-3 predicted from one rank against mpirun re-runs (issue 43): for each configuration, one
# rank recorded at the per-rank batch (dry run, virtual backing), `gpumem advise --ranks N
# --zero 3 --check --json` (ZeRO-3 at --prefetch 1, with and without --offload params), and the
# error of the prediction against every rank's measured peak (the largest and the smallest
# rank's), allocated and reserved.
#   advise.zero3_max_err_pct        the largest |error| over all of them, percent (bar: 0.5)
#   advise.zero3_<cfg>.ranksN.err_pct   each configuration's largest |error|
# Configurations: gpt2-medium (B 1 a rank, T 1024) at 2, 4 and 8 ranks; gpt2-xl at 8 ranks;
# an 8-layer slice of the 70B-class model (L8-C8192-H64, maxT 2048, B 1 a rank, T 2048: the
# 70B-class layer shape and vocabulary) at 8 ranks; the 70B-class model itself (L80-C8192-H64,
# 64.9B parameters; its one-rank zero-0 recording holds ~1.1 TB of virtual device memory) at 8.
# The 70B-class plan at 48 GB (issue 43, deliverable 6): `advise --ranks 8 --budget 48G --check`
# on the L80 recording, re-run under mpirun -np 8 on 48 GiB devices:
#   advise.zero3_l80_c8192.budget48g.err_pct         |predicted - measured| of the plan's peaks
#   advise.zero3_l80_c8192.budget48g.reserved_gib    the largest rank's measured peak reserved
# Exit 77 without mpirun or an MPI build of the trainer.
set -euo pipefail
BUILD=${BUILD:-build}
GM=$BUILD/gpumem
TRAIN=$BUILD/train_gpt2_sim
source "$(dirname "${BASH_SOURCE[0]}")/../mpi.bash"
mpi_setup advise_zero3_bench "$TRAIN"
mkdir -p "$BUILD/tests/bench"
dir=$(mktemp -d "$BUILD/tests/bench/advise-zero3-XXXXXX")
trap 'rm -rf "$dir"' EXIT
export GPUMEM_STACKS=0 GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=2T

max=0
run() { # label "trainer flags of one rank" ranks...
  local label=$1 flags=$2
  shift 2
  # shellcheck disable=SC2086 # the flags are words
  "$GM" record -q -o "$dir/$label.db" --force -- "$TRAIN" $flags --steps 3 --dry-run > "$dir/rec.txt" 2>&1 \
    || { echo "advise_zero3_bench: $label: recording failed: $(tail -2 "$dir/rec.txt")" >&2; exit 1; }
  for N in "$@"; do
    local t0=$SECONDS
    "$GM" advise "$dir/$label.db" --ranks "$N" --zero 3 --check --json > "$dir/a.json" \
      || { echo "advise_zero3_bench: $label, $N ranks: advise --check failed: $(head -c 400 "$dir/a.json")" >&2; exit 1; }
    local e
    e=$(jq '[.zero3_predictions[] | .measured | .error_allocated_pct, .error_reserved_pct,
             .error_allocated_min_rank_pct, .error_reserved_min_rank_pct | fabs] | max' "$dir/a.json")
    echo "BENCH advise.zero3_$label.ranks$N.err_pct $e pct"
    echo "advise_zero3_bench: $label, $N ranks: $(jq -c '[.zero3_predictions[] | [.offload_params, .peak_allocated, .measured.peak_allocated, .peak_reserved, .measured.peak_reserved]]' "$dir/a.json") ($((SECONDS - t0)) s)" >&2
    max=$(awk -v a="$max" -v b="$e" 'BEGIN { print (b > a ? b : a) }')
  done
}

run gpt2_medium "--model gpt2-medium -B 1 -T 1024" 2 4 8
run gpt2_xl "--model gpt2-xl -B 1 -T 1024" 8
run l8_c8192 "--model L8-C8192-H64 --max-T 2048 -B 1 -T 2048" 8
run l80_c8192 "--model L80-C8192-H64 --max-T 2048 -B 1 -T 2048" 8

# the 70B-class plan at 48 GB: found from the L80 recording, re-run on 48 GiB devices
t0=$SECONDS
GPUMEM_SIM_MEMORY=48G "$GM" advise "$dir/l80_c8192.db" --ranks 8 --budget 48G --check --json > "$dir/b.json" \
  || { echo "advise_zero3_bench: L80 --budget 48G: $(jq -c .budget "$dir/b.json" 2> /dev/null)" >&2; exit 1; }
jq -e '.budget.plan.measured.every_rank_within_budget' "$dir/b.json" > /dev/null \
  || { echo "advise_zero3_bench: L80 --budget 48G: a rank is over: $(jq -c .budget "$dir/b.json")" >&2; exit 1; }
echo "BENCH advise.zero3_l80_c8192.budget48g.err_pct $(jq '.budget.plan as $p | [($p.peak_allocated - $p.measured.peak_allocated) / $p.measured.peak_allocated,
  ($p.peak_reserved - $p.measured.peak_reserved) / $p.measured.peak_reserved | . * 100 | fabs] | max' "$dir/b.json") pct"
echo "BENCH advise.zero3_l80_c8192.budget48g.reserved_gib $(jq '.budget.plan.measured.peak_reserved / 1073741824 * 1000 | round / 1000' "$dir/b.json") GiB"
echo "advise_zero3_bench: L80 --budget 48G: $(jq -r '.budget.plan | "\(.mpirun): predicted \(.peak_allocated)/\(.peak_reserved), measured \(.measured.peak_allocated)/\(.measured.peak_reserved), smallest rank reserved \(.measured.min_rank_peak_reserved)"' "$dir/b.json") ($((SECONDS - t0)) s)" >&2
echo "BENCH advise.zero3_max_err_pct $max pct"
