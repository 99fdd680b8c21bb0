#!/usr/bin/env bash
# The writer's class (snapshot/record/rec_writer.c, "The writer's class"): idle-class while it
# keeps up, where the process may leave SCHED_IDLE again; promoted when the program's events
# find it late or the ring full, so a machine with no core to spare loses nothing and a kill -9
# still loses at most ~100 ms. One table: the setting, the permission, the load.
source tests/integration/snapshot_common.bash
need "$GPUMEM" "$APP"
meta() { "$GPUMEM" sql "$1" -c "SELECT value FROM meta WHERE key = '$2'" | tail -1; }
# can this process leave SCHED_IDLE for SCHED_OTHER? (what the writer tries on a thread of its own)
if chrt -i 0 chrt -o 0 true 2>/dev/null; then may=idle; else may=normal; fi
echo "this machine: a thread may go idle-class and back: $([[ $may == idle ]] && echo yes || echo no)"

# run NAME SECONDS [ENV...]: snapshot_app steady for SECONDS, ended with SIGTERM (a clean close)
run() {
  local name=$1 secs=$2; shift 2
  env "$@" GPUMEM_STACKS=0 GPUMEM_DB="$TMP/$name.db" "$APP" steady "$TMP/$name.count" 2> "$TMP/$name.err" &
  local pid=$!
  sleep "$secs"
  kill -TERM $pid; wait $pid 2>/dev/null
  issued=$(od -An -t u8 -N 8 "$TMP/$name.count" | tr -d ' ')
  rows=$("$GPUMEM" sql "$TMP/$name.db" -c "SELECT count(*) FROM events WHERE kind = 1" | tail -1)
  [[ $rows -ge $issued && $issued -gt 0 ]] || fail "$name: $issued events issued, $rows in the file"
}
busy=()
load_on() { for ((i = 0; i < $(nproc); i++)); do (while :; do :; done) & busy+=($!); done; }
load_off() { kill "${busy[@]}" 2>/dev/null; wait "${busy[@]}" 2>/dev/null; busy=(); }
trap 'load_off; rm -rf "$TMP"' EXIT

# 1. the default, quiet machine: idle-class where permitted
run quiet 1
c=$(meta "$TMP/quiet.db" writer_class)
[[ $c == "$may" ]] || fail "quiet: writer_class $c, expected $may"
echo "ok: default: writer_class $c, all $issued events in the file"

# 2. GPUMEM_WRITER_IDLE=0: the program's class throughout
run off 0.5 GPUMEM_WRITER_IDLE=0
[[ $(meta "$TMP/off.db" writer_class) == normal && $(meta "$TMP/off.db" writer_promotions) == 0 ]] ||
  fail "GPUMEM_WRITER_IDLE=0: writer_class $(meta "$TMP/off.db" writer_class)"
echo "ok: GPUMEM_WRITER_IDLE=0: writer_class normal"

# 3. a value it cannot read: said, and nothing recorded
GPUMEM_WRITER_IDLE=2 GPUMEM_QUIET=0 GPUMEM_DB="$TMP/bad.db" "$APP" pairs 10 > /dev/null 2> "$TMP/bad.err"
grepq "GPUMEM_WRITER_IDLE" "$TMP/bad.err" || { cat "$TMP/bad.err"; fail "GPUMEM_WRITER_IDLE=2 is not named as the setting at fault"; }
[[ ! -s $TMP/bad.db ]] || fail "GPUMEM_WRITER_IDLE=2 recorded all the same"
echo "ok: GPUMEM_WRITER_IDLE=2: $(grep -m1 GPUMEM_WRITER_IDLE "$TMP/bad.err")"

# 4. without the right to leave SCHED_IDLE (no CAP_SYS_NICE, RLIMIT_NICE 0): the program's class
drop=(prlimit --nice=0:0 --)
[[ $(id -u) == 0 ]] && drop=(setpriv --bounding-set=-sys_nice --inh-caps=-sys_nice "${drop[@]}")
"${drop[@]}" true 2>/dev/null || drop=(prlimit --nice=0:0 --)
env GPUMEM_STACKS=0 GPUMEM_DB="$TMP/noperm.db" "${drop[@]}" "$APP" pairs 1000 > /dev/null 2>&1 ||
  fail "the app without CAP_SYS_NICE failed"
[[ $(meta "$TMP/noperm.db" writer_class) == normal ]] ||
  fail "without the right to leave SCHED_IDLE: writer_class $(meta "$TMP/noperm.db" writer_class)"
echo "ok: without CAP_SYS_NICE and with RLIMIT_NICE 0: writer_class normal"

# 5. a program in another class (here SCHED_BATCH): its writer stays in it
GPUMEM_STACKS=0 GPUMEM_DB="$TMP/batch.db" chrt -b 0 "$APP" pairs 1000 > /dev/null 2>&1 || fail "the app under SCHED_BATCH failed"
[[ $(meta "$TMP/batch.db" writer_class) == normal ]] ||
  fail "a program under SCHED_BATCH: writer_class $(meta "$TMP/batch.db" writer_class)"
echo "ok: a program under SCHED_BATCH: writer_class normal (its writer inherits the class)"

# 6. every core busy: an idle-class writer is starved, promoted, and nothing is lost
if [[ $may == idle ]]; then
  load_on
  run loaded 2
  load_off
  p=$(meta "$TMP/loaded.db" writer_promotions)
  [[ $p -ge 1 ]] || fail "every core busy: the writer was never promoted ($p)"
  echo "ok: every core busy: promoted $p times, all $issued events in the file"
  # and a kill -9 there loses at most the bar of snapshot_kill.sh
  load_on
  GPUMEM_STACKS=0 GPUMEM_DB="$TMP/killed.db" "$APP" steady "$TMP/killed.count" &
  pid=$!
  sleep 1.5
  kill -9 $pid; wait $pid 2>/dev/null
  load_off
  issued=$(od -An -t u8 -N 8 "$TMP/killed.count" | tr -d ' ')
  read -r got t_last < <("$GPUMEM" sql "$TMP/killed.db" -c "SELECT max(requested), max(t) FROM events" | tail -1 | tr '|' ' ')
  [[ -n $got && $got -gt 0 ]] || fail "every core busy, kill -9: no events in the file"
  missing_ms=$(( (issued - got) * t_last / got / 1000000 ))
  (( missing_ms <= 150 )) || fail "every core busy, kill -9: lost ${missing_ms} ms of events (bar ~100 ms)"
  echo "ok: every core busy, kill -9: issued $issued, in the file $got, missing ~${missing_ms} ms"
fi
echo "all checks passed"
