#!/usr/bin/env bash
# The recorder's costs in instructions (valgrind's callgrind): figures that the machine's load
# does not move, so they can gate what nanoseconds cannot on a shared machine.
#   rec.writer_instr_per_event  instructions of the writer thread (everything under writer_main,
#                               open to close: ring, SQLite, commits, the close's index) per
#                               event of `rec_bench writer DIR 1` (1 M events, no stacks, NVTX
#                               steps); issue 41's bar: <= 2,000
#   rec.app_instr_nostack       instructions inside rec_event per event without a stack
#   rec.app_instr_stack16       the same with a 16-frame stack captured and deduplicated
#   rec.launch_instr            instructions inside rec_launch per launch of 8 words
# The application-side figures are per call at the margin: two runs of `rec_bench app` (N and
# 3N calls) and their difference over 2N, so that the one-off costs (the thread's registration,
# the first unwinding of each frame, the stack's first insertion) fall out.
set -euo pipefail
BUILD=${BUILD:-build}
B=$BUILD/tests/bench/rec_bench
[[ -x $B ]] || { echo "rec_instr: $B missing: run make first" >&2; exit 1; }
command -v valgrind >/dev/null ||
  { echo "rec_instr: valgrind (callgrind) is not installed: run make deps (Debian package valgrind)" >&2; exit 1; }
dir=$(mktemp -d "$BUILD/tests/bench/rec-instr-XXXXXX")
trap 'rm -rf "$dir"' EXIT

# collected FUNCTION ARGS...: the instructions callgrind collected inside FUNCTION (inclusive)
collected() {
  local fn=$1
  shift
  valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect="$fn" "$B" "$@" \
    >"$dir/out" 2>&1 || { tail -5 "$dir/out" >&2; echo "rec_instr: rec_bench $* failed" >&2; exit 1; }
  local c
  c=$(awk '/Collected :/ { print $NF }' "$dir/out")
  [[ $c =~ ^[0-9]+$ && $c -gt 0 ]] || { echo "rec_instr: no count from callgrind ($*)" >&2; exit 1; }
  echo "$c"
}

w=$(collected writer_main writer "$dir" 1)
awk -v c="$w" 'BEGIN { printf "BENCH rec.writer_instr_per_event %.0f instr\n", c / 1000000 }'

N=10000
margin() { # name function what
  local a b
  a=$(collected "$2" app "$dir" "$N" "$3")
  b=$(collected "$2" app "$dir" $((3 * N)) "$3")
  awk -v a="$a" -v b="$b" -v n=$((2 * N)) -v name="$1" \
    'BEGIN { printf "BENCH %s %.0f instr\n", name, (b - a) / n }'
}
margin rec.app_instr_nostack rec_event nostack
margin rec.app_instr_stack16 rec_event stack16
margin rec.launch_instr rec_launch launch
