#!/usr/bin/env bash
# SIGINT and SIGTERM end a recorded program as they would without gpumem (same exit status),
# and the recording is closed first: state = interrupted, every allocation has its lifetime
# row, leaks --fail-on-leak says it cannot judge (exit 3). GPUMEM_SIGNALS=0 leaves them alone.
# The same when the program handles the signal itself and then kills itself with it, each way
# in (kill, raise, killpg; Python's exit after Ctrl-C is the first): a Python program under
# `gpumem record`, its allocation made through ctypes.
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
# a program that handles the signal, then kills itself with it (the default action put back)
cat > "$TMP/self.py" <<'PY'
import ctypes, os, signal, sys
how, sig = sys.argv[1], getattr(signal, sys.argv[2])
def die(*_):
    signal.signal(sig, signal.SIG_DFL)
    if how == "kill": os.kill(os.getpid(), sig)
    elif how == "raise": signal.raise_signal(sig)
    elif how == "killpg": os.setpgid(0, 0); os.killpg(0, sig)
    sys.exit("still alive")
signal.signal(sig, die)  # before the recording opens: the recorder leaves it to the program
ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)
p = ctypes.c_void_p()
assert ctypes.CDLL(None).cudaMalloc(ctypes.byref(p), 1 << 20) == 0
if how == "ctrl-c": raise KeyboardInterrupt  # Python's exit: SIGINT back to default, kill(getpid())
os.kill(os.getpid(), sig)  # the program's handler runs, and kills the process
PY
for row in "ctrl-c SIGINT" "kill SIGTERM" "raise SIGTERM" "killpg SIGINT" "raise SIGINT off"; do
  read -r how sig off <<< "$row"
  db=$TMP/self-$how-$sig$off.db envs=()
  [[ -n $off ]] && envs=(GPUMEM_SIGNALS=0)
  env --default-signal=INT "${envs[@]}" "$GPUMEM" record -q -o "$db" -- python3 "$TMP/self.py" "$how" "$sig" \
    > /dev/null 2> "$TMP/self.err"; rc=$?
  want=$(( 128 + $(kill -l "${sig#SIG}") )) state=$("$GPUMEM" sql "$db" -c "SELECT value FROM meta WHERE key = 'state'" | tail -1)
  lives=$("$GPUMEM" sql "$db" -c "SELECT count(*) FROM alloc_life WHERE death IS NULL" | tail -1)
  if [[ -n $off ]]; then
    [[ $rc -eq $want && $state == recording ]] || fail "$how $sig, GPUMEM_SIGNALS=0: exit $rc, state '$state'"
  else
    [[ $rc -eq $want && $state == interrupted && $lives == 1 ]] \
      || fail "$how $sig: exit $rc (want $want), state '$state' (want interrupted), $lives lifetimes alive (want 1): $(tail -2 "$TMP/self.err")"
  fi
done
# opted out: the signal kills the program as before, the recording stays unclosed
run_and_signal TERM "$TMP/off.db" GPUMEM_SIGNALS=0; rc=$?
[[ $rc -eq 143 ]] || fail "GPUMEM_SIGNALS=0: exit $rc"
[[ $("$GPUMEM" sql "$TMP/off.db" -c "SELECT value FROM meta WHERE key = 'state'" | tail -1) == recording ]] \
  || fail "GPUMEM_SIGNALS=0: the recorder handled the signal"
echo "ok: SIGINT/SIGTERM: exit 130/143 as before, state interrupted, every allocation has its lifetime; also when the program kills itself (Python's Ctrl-C exit, kill, raise, killpg); GPUMEM_SIGNALS=0 opts out"
