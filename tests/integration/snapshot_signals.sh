#!/usr/bin/env bash
# SIGINT and SIGTERM end a recorded program as they would without gpumem (same exit status),
# and the recording is closed first: state = interrupted, every allocation has its lifetime
# row, leaks --fail-on-leak says it cannot judge (exit 3). GPUMEM_SIGNALS=0 leaves them alone.
source tests/integration/snapshot_common.bash
need "$GPUMEM"
TRAIN=$BUILD/train_gpt2_sim
[[ -f $BUILD/libgpumem.so && -x $TRAIN ]] || { echo "skipped: libgpumem.so or the trainer not built" >&2; exit 77; }
# a background job of a script ignores SIGINT: give the program the default action back
run_and_signal() { # sig db [env...]
  local sig=$1 db=$2; shift 2
  env --default-signal=INT "$@" GPUMEM_DB="$db" LD_PRELOAD="$BUILD/libgpumem.so" \
    "$TRAIN" --steps 100000 > /dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 400); do [[ -s $db ]] && break; sleep 0.01; done
  sleep 0.5
  kill "-$sig" "$pid"
  wait "$pid"
}
for sig in INT TERM; do
  db=$TMP/$sig.db
  run_and_signal "$sig" "$db"; rc=$?
  want=$(( 128 + $(kill -l "$sig") ))
  [[ $rc -eq $want ]] || fail "SIG$sig: exit $rc, expected $want (as without gpumem)"
  state=$("$GPUMEM" sql "$db" -c "SELECT value FROM meta WHERE key = 'state'" | tail -1)
  [[ $state == interrupted ]] || fail "SIG$sig: state '$state', expected interrupted"
  births=$("$GPUMEM" sql "$db" -c "SELECT count(*) FROM events WHERE kind IN (1, 3)" | tail -1)
  lives=$("$GPUMEM" sql "$db" -c "SELECT count(*) FROM alloc_life" | tail -1)
  alive=$("$GPUMEM" sql "$db" -c "SELECT count(*) FROM alloc_life WHERE death IS NULL" | tail -1)
  (( births > 0 && lives == births && alive > 0 )) || fail "SIG$sig: $births allocations, $lives lifetime rows ($alive alive)"
  "$GPUMEM" report "$db" > "$TMP/rep.txt" || fail "SIG$sig: report failed"
  grep -q "the program was ended by SIG$sig" "$TMP/rep.txt" || fail "SIG$sig: the report does not say how the program ended"
  "$GPUMEM" leaks --fail-on-leak "$db" > "$TMP/leaks.txt"; rc=$?
  [[ $rc -eq 3 ]] && grep -q "did not run to its end (ended by a signal)" "$TMP/leaks.txt" \
    || fail "SIG$sig: leaks --fail-on-leak exited $rc on an interrupted run, expected 3 (cannot judge)"
done
# opted out: the signal kills the program as before, the recording stays unclosed
run_and_signal TERM "$TMP/off.db" GPUMEM_SIGNALS=0; rc=$?
[[ $rc -eq 143 ]] || fail "GPUMEM_SIGNALS=0: exit $rc"
[[ $("$GPUMEM" sql "$TMP/off.db" -c "SELECT value FROM meta WHERE key = 'state'" | tail -1) == recording ]] \
  || fail "GPUMEM_SIGNALS=0: the recorder handled the signal"
echo "ok: SIGINT/SIGTERM: exit 130/143 as before, state interrupted, every allocation has its lifetime; GPUMEM_SIGNALS=0 opts out"
