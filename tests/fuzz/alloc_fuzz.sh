#!/usr/bin/env bash
# A short libFuzzer run over alloc/ (tests/fuzz/alloc_fuzz.c): config strings, traces, and
# operation sequences checked with alloc_check after every operation. Seeds: a few configs and
# traces. GPUMEM_FUZZ_SECONDS (default 15) sets the length.
set -uo pipefail
BUILD=${BUILD:-build}
fuzzer=$BUILD/tests/fuzz/alloc_fuzz
if [[ ! -x $fuzzer ]]; then echo "skipped: $fuzzer not built (needs clang with libFuzzer)" >&2; exit 77; fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/allocfuzz-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/corpus"
# mode byte first: 0 config, 1 trace, 2/3 operations
printf '\x00expandable_segments:True,max_split_size_mb:256,roundup_power2_divisions:[256:1,512:2,>:8]' > "$tmp/corpus/conf1"
printf '\x00garbage_collection_threshold:0.8,limit:24G,handle_size:20M,release_threshold:1G' > "$tmp/corpus/conf2"
printf '\x01a 1 4096\na 2 3000000 1\nf 1\nfa 2 1\ne\na 3 100\n' > "$tmp/corpus/trace1"
head -c 600 /dev/urandom | { printf '\x02'; cat; } > "$tmp/corpus/ops1"
head -c 600 /dev/urandom | { printf '\x03\x05'; cat; } > "$tmp/corpus/ops2"
TMPDIR=$tmp ASAN_OPTIONS=detect_leaks=1 "$fuzzer" -max_total_time="${GPUMEM_FUZZ_SECONDS:-15}" \
  -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$tmp/" "$tmp/corpus" 2>&1 | tail -12
rc=${PIPESTATUS[0]}
if [[ $rc -ne 0 ]]; then
  mkdir -p "$BUILD/tests/fuzz/crashes" && cp "$tmp"/crash-* "$tmp"/timeout-* "$tmp"/leak-* "$BUILD/tests/fuzz/crashes/" 2>/dev/null
  echo "FAIL: the fuzzer found a problem (inputs saved in $BUILD/tests/fuzz/crashes)" >&2
  exit 1
fi
