#!/usr/bin/env bash
# A short libFuzzer run over the virtual GPU's parsers (tests/fuzz/sim_fuzz.c): fault plans, cost
# overrides, sizes. GPUMEM_FUZZ_SECONDS (default 10) sets the length. The parsers' rejection
# notes go to stderr, so only the fuzzer's summary is shown.
set -uo pipefail
BUILD=${BUILD:-build}
fuzzer=$BUILD/tests/fuzz/sim_fuzz
if [[ ! -x $fuzzer ]]; then echo "skipped: $fuzzer not built (needs clang with libFuzzer)" >&2; exit 77; fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/simfuzz-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/corpus"
printf '\x00alloc:3,map:2,oom_at:10M' > "$tmp/corpus/f1"
printf '\x00alloc:1,alloc:2,alloc:5' > "$tmp/corpus/f2"
printf '\x01cuMemAlloc=20+0.5,cuMemMap=10' > "$tmp/corpus/c1"
printf '\x02' > "$tmp/corpus/s0"
printf '\x0216G' > "$tmp/corpus/s1"
printf '\x021.5TiB' > "$tmp/corpus/s2"
"$fuzzer" -max_total_time="${GPUMEM_FUZZ_SECONDS:-10}" -max_len=256 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$tmp/" "$tmp/corpus" \
  2>"$tmp/log" >/dev/null
rc=$?
grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_runs|==[0-9]+==|SUMMARY|ERROR)' "$tmp/log" | tail -8
if [[ $rc -ne 0 ]]; then
  tail -40 "$tmp/log"
  mkdir -p "$BUILD/tests/fuzz/crashes" && cp "$tmp"/crash-* "$tmp"/timeout-* "$tmp"/leak-* "$BUILD/tests/fuzz/crashes/" 2>/dev/null
  echo "FAIL: the fuzzer found a problem (inputs saved in $BUILD/tests/fuzz/crashes)" >&2
  exit 1
fi
