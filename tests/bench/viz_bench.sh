#!/usr/bin/env bash
# `gpumem viz` on the synthetic 10-million-event database (rec_bench gen): the time to write the
# page (viz.10m_s, bar 5 s) and its size (viz.10m_mib, bar 10 MiB). The database is written
# under $BUILD, not /tmp, and removed afterwards.
set -euo pipefail
BUILD=${BUILD:-build}
mkdir -p "$BUILD/tests/bench"
dir=$(mktemp -d "$BUILD/tests/bench/viz-XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$BUILD/tests/bench/rec_bench" gen "$dir/10m.db" "${GPUMEM_BENCH_EVENTS:-10000000}"
start=$(date +%s.%N)
"$BUILD/gpumem" viz "$dir/10m.db" -o "$dir/10m.html"
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" 'BEGIN { printf "BENCH viz.10m_s %.2f s\n", e - s }'
awk -v b="$(stat -c %s "$dir/10m.html")" 'BEGIN { printf "BENCH viz.10m_mib %.2f MiB\n", b / 1048576 }'
