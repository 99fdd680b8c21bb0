#!/usr/bin/env bash
# `gpumem report` on a synthetic 10-million-event database written through the recorder itself
# (training-like: steps, phases, 4-frame stacks, a slow leak): report.10m_s, report.10m_rss_mib.
# The database (~500 MB) is written under $BUILD, not /tmp (often RAM), and removed afterwards.
set -euo pipefail
BUILD=${BUILD:-build}
dir=$(mktemp -d "$BUILD/tests/bench/report-XXXXXX")
trap 'rm -rf "$dir"' EXIT
start=$(date +%s)
"$BUILD/tests/bench/rec_bench" gen "$dir/10m.db" "${GPUMEM_BENCH_EVENTS:-10000000}"
echo "# report_10m: database generated in $(( $(date +%s) - start )) s" >&2
"$BUILD/tests/bench/rec_bench" report "$BUILD/gpumem" "$dir/10m.db"
