#!/usr/bin/env bash
# The recorder's costs in instructions (valgrind's callgrind): figures that the machine's load
# does not move, so they can gate what nanoseconds cannot on a shared machine.
#   rec.writer_instr_per_event  instructions of the writer thread (everything under writer_main,
#                               open to close: ring, SQLite, commits, the close's index) per
#                               event of `rec_bench writer DIR 1` (1 M events, no stacks, NVTX
#                               steps); issue 41's bar: <= 2,000
#   rec.sqlite_row_floor_instr  what SQLite alone spends on an `events` row whose 13 cells are all
#                               NULL, inserted the writer's way (rec_bench floor: gm_rows, 256
#                               rows a statement, commits): the floor under the figure above
#   rec.app_instr_nostack       instructions inside rec_event per event without a stack
#   rec.app_instr_stack16       the same with a 16-frame stack captured and deduplicated
#   rec.launch_instr            instructions inside rec_launch per launch of 8 words
#   uses.launch_instr           what access tracking adds to one cudaLaunchKernel of 8 pointer
#                               parameters under libgpumem.so (preload_bench launch): the
#                               instructions inside cudaLaunchKernel with GPUMEM_USES=1 minus
#                               those with GPUMEM_USES=0 (uses.launch_ns in nanoseconds)
#   alloc.free_locked_instr     instructions inside alloc_free_notify (the allocator's lock, and
#                               the free's event written inside it) per free of preload_bench's
#                               churn under libgpumem.so, recorded with 16-frame stacks: what
#                               other threads freeing or allocating on the device wait out
# The application-side figures are per call at the margin: two runs of `rec_bench app` (N and
# 3N calls) and their difference over 2N, so that the one-off costs (the thread's registration,
# the first unwinding of each frame, the stack's first insertion) fall out.
set -euo pipefail
BUILD=${BUILD:-build}
B=$BUILD/tests/bench/rec_bench
P=$BUILD/tests/bench/preload_bench
LIB=$PWD/$BUILD/libgpumem.so
[[ -x $B && -x $P && -e $LIB ]] || { echo "rec_instr: $B, $P or $LIB missing: run make first" >&2; exit 1; }
command -v valgrind >/dev/null ||
  { echo "rec_instr: valgrind (callgrind) is not installed: run make deps (Debian package valgrind)" >&2; exit 1; }
dir=$(mktemp -d "$BUILD/tests/bench/rec-instr-XXXXXX")
trap 'rm -rf "$dir"' EXIT

# collected FUNCTION ARGS...: the instructions callgrind collected inside FUNCTION (inclusive)
collected() {
  local fn=$1
  shift
  valgrind --tool=callgrind ${VGOPT:-} --callgrind-out-file=/dev/null --toggle-collect="$fn" "${CMD:-$B}" "$@" \
    >"$dir/out" 2>&1 || { tail -5 "$dir/out" >&2; echo "rec_instr: ${CMD:-$B} $* failed" >&2; exit 1; }
  local c
  c=$(awk '/Collected :/ { print $NF }' "$dir/out")
  [[ $c =~ ^[0-9]+$ && $c -gt 0 ]] || { echo "rec_instr: no count from callgrind ($*)" >&2; exit 1; }
  echo "$c"
}

w=$(collected writer_main writer "$dir" 1)
awk -v c="$w" 'BEGIN { printf "BENCH rec.writer_instr_per_event %.0f instr\n", c / 1000000 }'
f=$(collected rec_rows_insert floor "$dir" 1024000)
awk -v c="$f" 'BEGIN { printf "BENCH rec.sqlite_row_floor_instr %.0f instr\n", c / 1024000 }'

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

# uses.launch_instr: preload_bench launch N under libgpumem.so, uses on and off, each at N and 3N
# (LD_PRELOAD through env under --trace-children: valgrind itself is a shell script, which must
# not load the library and start a recording of its own)
launches() { # uses n -> instructions inside cudaLaunchKernel
  GPUMEM_USES=$1 GPUMEM_DB="$dir/l.db" GPUMEM_QUIET=1 CMD=/usr/bin/env VGOPT=--trace-children=yes \
    collected cudaLaunchKernel LD_PRELOAD="$LIB" "$P" launch "$2"
  rm -f "$dir"/l.db*
}
L=5000
on1=$(launches 1 $L)
on3=$(launches 1 $((3 * L)))
off1=$(launches 0 $L)
off3=$(launches 0 $((3 * L)))
awk -v a="$on1" -v b="$on3" -v c="$off1" -v d="$off3" -v n=$((2 * L)) \
  'BEGIN { printf "BENCH uses.launch_instr %.0f instr\n", ((b - a) - (d - c)) / n }'

# alloc.free_locked_instr: preload_bench N and 3N under libgpumem.so (stacks on, the default),
# the instructions inside alloc_free_notify over the frees between them (the churn is seeded:
# the frees are counted by a plain run of the same calls)
frees() { GPUMEM_DB="$dir/f.db" GPUMEM_QUIET=1 LD_PRELOAD="$LIB" "$P" "$1" | awk '{ print $6 }'; rm -f "$dir"/f.db*; }
locked() {
  GPUMEM_DB="$dir/f.db" GPUMEM_QUIET=1 CMD=/usr/bin/env VGOPT=--trace-children=yes \
    collected alloc_free_notify LD_PRELOAD="$LIB" "$P" "$1"
  rm -f "$dir"/f.db*
}
F=5000
fr1=$(frees $F)
fr3=$(frees $((3 * F)))
lk1=$(locked $F)
lk3=$(locked $((3 * F)))
awk -v a="$lk1" -v b="$lk3" -v n=$((fr3 - fr1)) \
  'BEGIN { printf "BENCH alloc.free_locked_instr %.0f instr\n", (b - a) / n }'
