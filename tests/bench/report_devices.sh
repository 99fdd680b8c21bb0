#!/usr/bin/env bash
# The commands on a synthetic recording with memory on two devices (rec_bench gen DB N 2: the
# events dealt in turn to devices 0 and 1), where each reads one device's events (gm_db_scope_one):
# the wall time of each with the page reader (the events view's rows kept as it reads the table's
# pages) and with SQLite alone (GPUMEM_SWEEP=sql: how every one of them read such a recording
# before the page reader took a device), runs alternated, the best of GPUMEM_BENCH_RUNS (3) each:
#   BENCH devices.<cmd>_s        with the page reader
#   BENCH devices.<cmd>_sql_s    through SQLite
#   BENCH devices.<cmd>_x        the ratio (sql / pages)
# report reads every device (it is not scoped): its figures are the control. Each command's output
# is the same both ways ("seconds" fields masked), or the bench fails. The database (~510 MB for
# 10 M events, GPUMEM_BENCH_EVENTS) is written under $BUILD, not /tmp (often RAM), and removed.
set -euo pipefail
BUILD=${BUILD:-build}
GPUMEM=$BUILD/gpumem
runs=${GPUMEM_BENCH_RUNS:-3}
dir=$(mktemp -d "$BUILD/tests/bench/devices-XXXXXX")
trap 'rm -rf "$dir"' EXIT
db=$dir/2dev.db
start=$(date +%s)
"$BUILD/tests/bench/rec_bench" gen "$db" "${GPUMEM_BENCH_EVENTS:-10000000}" 2
echo "# report_devices: database generated in $(($(date +%s) - start)) s" >&2
n=$("$GPUMEM" report --json "$db" | jq '.summary.devices | length')
[[ $n == 2 ]] || { echo "report_devices: the database has memory on $n devices, want 2" >&2; exit 1; }

now() { date +%s.%N; }
# one run of command NAME with sweep SWEEP: its wall seconds on stdout, its output in $dir/NAME.SWEEP
one() {
  local name=$1 sweep=$2 t0 t1
  shift 2
  rm -f "$dir/$name.file"
  t0=$(now)
  GPUMEM_SWEEP=$sweep "$@" > "$dir/$name.$sweep.raw" 2> /dev/null || { echo "report_devices: $name ($sweep) failed" >&2; return 1; }
  t1=$(now)
  [[ -s $dir/$name.file ]] && cp "$dir/$name.file" "$dir/$name.$sweep.raw"
  sed -E 's/"seconds": ?[0-9.eE+-]+/"seconds":0/g' "$dir/$name.$sweep.raw" > "$dir/$name.$sweep"
  echo "$t1 - $t0" | bc -l
}
bench() {
  local name=$1 best_p= best_s= t r
  shift
  for ((r = 0; r < runs; r++)); do
    t=$(one "$name" pages "$@") || exit 1
    [[ -z $best_p ]] || (($(echo "$t < $best_p" | bc -l))) && best_p=$t
    t=$(one "$name" sql "$@") || exit 1
    [[ -z $best_s ]] || (($(echo "$t < $best_s" | bc -l))) && best_s=$t
  done
  cmp -s "$dir/$name.pages" "$dir/$name.sql" || { echo "report_devices: $name: the page reader's output differs from SQLite's" >&2; exit 1; }
  printf 'BENCH devices.%s_s %.2f s\n' "$name" "$best_p"
  printf 'BENCH devices.%s_sql_s %.2f s\n' "$name" "$best_s"
  printf 'BENCH devices.%s_x %.2f x\n' "$name" "$(echo "$best_s / $best_p" | bc -l)"
}
bench report "$GPUMEM" report --json "$db"
bench leaks "$GPUMEM" leaks --json "$db"
bench folded "$GPUMEM" export "$db" --format folded -o "$dir/folded.file"
bench viz "$GPUMEM" viz "$db" -o "$dir/viz.file"
bench frag "$GPUMEM" frag --json "$db"
bench advise "$GPUMEM" advise --json "$db"
