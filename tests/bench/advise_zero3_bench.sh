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
# 70B-class layer shape and vocabulary) at 8 ranks. The full L80 model is not here: its one-rank
# zero-0 recording holds ~1.1 TB through gpumem's allocator, and recording it takes over 8
# minutes on the 2-core machine this runs on (the release of its ~500k 2 MiB pages; measured,
# ADVISE.md), which the bench's runtime cannot carry.
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
echo "BENCH advise.zero3_max_err_pct $max pct"
