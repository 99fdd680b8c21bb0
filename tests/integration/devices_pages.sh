#!/usr/bin/env bash
# devices_pages.sh — on a recording with memory on two devices, every command reads one device's
# events (gm_db_scope_one, --device N: TEMP views over the file's tables) and its sweeps still take
# the page reader (snapshot/read/gm_analyze_pages.c, the events of that device kept as the view
# keeps them), with exactly the output SQLite's reading gives.
#
# One table, a row per recording, command and device: the command's output (stdout, the viz page's
# data, the export file; "seconds" fields, the time a search took, masked) and its exit code with
# the page reader (GPUMEM_SWEEP=pages: a line on stderr wherever it is not taken) against the same
# with SQLite alone (GPUMEM_SWEEP=sql): the same bytes, and no such line in the pages' run. The
# recordings: tests/apps/devices_app `steps` (4 NVTX steps, leaks on both devices; device 0 the
# busiest) and its default run (an out-of-memory error on device 1). Each command runs without
# --device (the busiest device's reading, or the whole for report) and with --device 1.
# Last row: a copy of `steps` where one of device 1's rows holds text in t (valid to SQLite, not a
# row the recorder writes): device 0's reading still sees it (the page reader checks every row of
# the table, whichever it hands over), gives up and reads through SQLite, the same output again.
source tests/integration/snapshot_common.bash
APPS=$BUILD/tests/apps
need "$GPUMEM" "$APPS/devices_app"
GPUMEM_SIM_DEVICES=2 "$GPUMEM" record -q -o "$TMP/steps.db" -- "$APPS/devices_app" steps > "$TMP/steps.rec" 2>&1 \
  || fail "devices_app steps: $(tail -n 3 "$TMP/steps.rec")"
GPUMEM_SIM_DEVICES=2 "$GPUMEM" record -q -o "$TMP/oom.db" -- "$APPS/devices_app" > "$TMP/oom.rec" 2>&1 \
  || fail "devices_app: $(tail -n 3 "$TMP/oom.rec")"
cp "$TMP/steps.db" "$TMP/text.db"
cp "$TMP/steps.db" "$TMP/rank1.db" # the second rank of report and viz of ranks
sqlite3 "$TMP/text.db" "UPDATE events SET t = 'x' WHERE seq = (SELECT max(seq) FROM events WHERE device = 1)" \
  || fail "cannot make text.db"
for db in steps oom; do
  n=$("$GPUMEM" report --json "$TMP/$db.db" | jq '.summary.devices | length')
  [[ $n == 2 ]] || fail "$db.db: report counts $n devices with memory; devices_app uses 2"
done

masked() { sed -E 's/"seconds": ?[0-9.eE+-]+/"seconds":0/g' "$1"; }
# run SWEEP DB NAME CMD...: CMD's output in $TMP/SWEEP/DB.NAME.{out,rc,err}; "@OUT" in CMD is a file
# the command writes (its output then)
run() {
  local sweep=$1 db=$2 name=$3; shift 3
  local base=$TMP/$sweep/$db.$name args=() a file=
  for a in "$@"; do
    if [[ $a == @OUT ]]; then file=$base.file; a=$file; fi
    args+=("$a")
  done
  GPUMEM_SWEEP=$sweep "${args[@]}" > "$base.out" 2> "$base.err"
  echo $? > "$base.rc"
  if [[ -n $file ]]; then
    if [[ $name == viz* ]]; then sed -n 's/^const D = \(.*\);$/\1/p' "$file" > "$base.out"; else cp "$file" "$base.out"; fi
  fi
}
rows=()
for sweep in pages sql; do
  mkdir -p "$TMP/$sweep"
  for db in steps oom text; do
    for dev in "" "--device 1"; do
      [[ $db == text && -n $dev ]] && continue
      t=${dev:+.d1}
      run $sweep $db report$t "$GPUMEM" report $dev "$TMP/$db.db"
      run $sweep $db reportjson$t "$GPUMEM" report --json $dev "$TMP/$db.db"
      run $sweep $db leaks$t "$GPUMEM" leaks $dev "$TMP/$db.db"
      run $sweep $db leaksjson$t "$GPUMEM" leaks --json $dev "$TMP/$db.db"
      run $sweep $db frag$t "$GPUMEM" frag --json $dev "$TMP/$db.db"
      run $sweep $db tune$t "$GPUMEM" tune --json $dev "$TMP/$db.db"
      run $sweep $db advise$t "$GPUMEM" advise --json $dev "$TMP/$db.db"
      run $sweep $db viz$t "$GPUMEM" viz $dev "$TMP/$db.db" -o @OUT
      run $sweep $db vizranks$t "$GPUMEM" viz --with none $dev "$TMP/$db.db" "$TMP/rank1.db" -o @OUT
      run $sweep $db ranks$t "$GPUMEM" report --json $dev "$TMP/$db.db" "$TMP/rank1.db"
      for f in trace torch chrome folded speedscope csv; do
        run $sweep $db export-$f$t "$GPUMEM" export "$TMP/$db.db" --format $f $dev -o @OUT
      done
    done
  done
done

# recording | command | exit code pages | exit code SQLite | same output (1) | page reader taken (1) or not (0)
for base in "$TMP"/pages/*.out; do
  name=$(basename "$base" .out) db=${name%%.*} cmd=${name#*.}
  same=0
  cmp -s <(masked "$base") <(masked "$TMP/sql/$name.out") && same=1
  taken=1
  grepq "GPUMEM_SWEEP=pages: .*the page reader was not taken" "$TMP/pages/$name.err" && taken=0
  rows+=("$db|$cmd|$(cat "$TMP/pages/$name.rc")|$(cat "$TMP/sql/$name.rc")|$same|$taken")
done
(( ${#rows[@]} == 5 * 16 )) || fail "the table has ${#rows[@]} rows, want $((5 * 16)) (16 commands, 5 readings)"
bad=0
printf '%-6s %-22s %5s %5s %5s %6s\n' db command rc rc.sq same pages
for row in "${rows[@]}"; do
  IFS='|' read -r db cmd rc rcs same taken <<< "$row"
  want_taken=1
  [[ $db == text ]] && want_taken=0 # device 1's damaged row: the pages give up, SQLite reads
  # device 1's out-of-memory error: tune's replays run out too (1), advise has no step to advise
  # from (3); every other command exits 0
  want_rc=0
  [[ $db.$cmd == oom.tune.d1 ]] && want_rc=1
  [[ $db.$cmd == oom.advise.d1 ]] && want_rc=3
  ok=1
  [[ $rc == "$want_rc" && $rcs == "$want_rc" ]] || ok=0
  [[ $same == 1 && $taken == "$want_taken" ]] || ok=0
  printf '%-6s %-22s %5s %5s %5s %6s%s\n' "$db" "$cmd" "$rc" "$rcs" "$same" "$taken" "$( ((ok)) || echo "  <- want rc $want_rc $want_rc, same 1, pages $want_taken")"
  ((ok)) || bad=1
done
((bad == 0)) || fail "a command's output differs between the page reader and SQLite, or the page reader was not taken (or was, on text.db)"
echo "devices_pages: ok"
