#!/usr/bin/env bash
# A short libFuzzer run of the database reader (tests/fuzz/snapshot_fuzz_db.c) over mutations
# of a real recording. GPUMEM_FUZZ_SECONDS (default 15) sets the length.
set -uo pipefail
BUILD=${BUILD:-build}
fuzzer=$BUILD/tests/fuzz/snapshot_fuzz_db
app=$BUILD/tests/integration/snapshot_app
if [[ ! -x $fuzzer ]]; then echo "skipped: $fuzzer not built (needs clang with libFuzzer)" >&2; exit 77; fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/snapfuzz-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/corpus"
GPUMEM_QUIET=1 GPUMEM_STACKS=3 GPUMEM_DB=$tmp/corpus/seed.db "$app" pairs 20 > /dev/null || { echo "FAIL: seed run" >&2; exit 1; }
rm -f "$tmp"/corpus/*-wal "$tmp"/corpus/*-shm
# a second seed: same database with an OOM and names removed; a third: 4 KiB of its header
cp "$tmp/corpus/seed.db" "$tmp/corpus/seed2.db"
head -c 4096 "$tmp/corpus/seed.db" > "$tmp/corpus/head.db"
# schema 1.1 parts: a named OOM in a range and an export-worthy mix of streams; inline chains
GPUMEM_QUIET=1 GPUMEM_STACKS=0 GPUMEM_DB=$tmp/corpus/mixed.db "$app" mixed > /dev/null || { echo "FAIL: mixed seed run" >&2; exit 1; }
if command -v sqlite3 > /dev/null; then
  cp "$tmp/corpus/seed.db" "$tmp/corpus/inl.db"
  sqlite3 "$tmp/corpus/inl.db" "INSERT INTO inlines SELECT id, 1, 'outer', 'a.c', 7 FROM frames;
                                INSERT INTO inlines SELECT id, 2, 'root', 'b.c', 9 FROM frames LIMIT 2;"
fi
rm -f "$tmp"/corpus/*-wal "$tmp"/corpus/*-shm
TMPDIR=$tmp ASAN_OPTIONS=detect_leaks=1 "$fuzzer" -max_total_time="${GPUMEM_FUZZ_SECONDS:-15}" \
  -max_len=400000 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$tmp/" "$tmp/corpus" 2>&1 | tail -15
rc=${PIPESTATUS[0]}
if [[ $rc -ne 0 ]]; then
  mkdir -p "$BUILD/tests/fuzz/crashes" && cp "$tmp"/crash-* "$tmp"/timeout-* "$tmp"/leak-* "$BUILD/tests/fuzz/crashes/" 2>/dev/null
  echo "FAIL: the fuzzer found a problem (inputs saved in $BUILD/tests/fuzz/crashes)" >&2
  exit 1
fi
