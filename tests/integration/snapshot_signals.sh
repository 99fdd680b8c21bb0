#!/usr/bin/env bash
# Every signal whose default action ends the process (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1,
# SIGUSR2, SIGALRM, SIGPIPE, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGSTKFLT, the
# real-time ones) ends a recorded program as it would without gpumem (same exit status), and
# the recording is closed first: state = interrupted, every allocation has its lifetime row,
# report names the signal, leaks --fail-on-leak says it cannot judge (exit 3). GPUMEM_SIGNALS=0
# leaves them alone.
# The same when the program handles the signal itself and then kills itself with it, each way
# in (kill, raise, killpg; Python's exit after Ctrl-C is the first), and a close ('closed') when
# it ends by _exit: a Python program under `gpumem record`, its allocations made through ctypes.
# A crash (abort, a segfault) right after 100 allocations and 50 frees, before the periodic
# commit: the ring is committed first, so the file and record's summary hold all of them, the
# program's own handler still runs, and the exit status is the crash's; a kill -9, which nothing
# can catch, is never summarised as "nothing allocated".
# A signal sent to `gpumem record` alone reaches the program: it ends, is summarised, and record
# exits as it did (no program left running, orphaned).
# The close is waited for while the writer makes progress, not for a fixed time, and not for
# ever when it makes none (snapshot/record/rec.c wait_writer): GPUMEM_TEST_SLOW_CLOSE=ms:n makes
# the close take n steps of ms (each one progress), or stops the writer for ms (n = 0). A close
# of 3.5 s, at a signal and in a forked child's _exit, ends 'interrupted' / 'closed' (the fixed
# 3 s cut it: 'recording'); one stuck for 30 s still ends the program 3 s after its last progress.
source tests/integration/snapshot_common.bash
need "$GPUMEM"
TRAIN=$BUILD/train_gpt2_sim
[[ -f $BUILD/libgpumem.so && -x $TRAIN ]] || { echo "skipped: libgpumem.so or the trainer not built" >&2; exit 77; }
# a background job of a script ignores SIGINT and SIGQUIT, a harness may ignore others (nohup):
# give the program every default action back; no core files from SIGQUIT, SIGXCPU, SIGXFSZ
ulimit -c 0
# 0 when process $1 catches signal number $2 (its SigCgt bit)
catches() {
  local m
  m=$(awk '/^SigCgt:/ {print $2}' "/proc/$1/status" 2> /dev/null) && [[ -n $m ]] && (( (16#$m >> ($2 - 1)) & 1 ))
}
start_trainer() { # sig db [env...]: the trainer recording to db, in $pid, once the recorder
  # catches sig (its handlers are installed a few ms after the file appears; a signal before
  # them would kill the program as without gpumem) and it has run a little
  local sig=$1 db=$2; shift 2
  env --default-signal "$@" GPUMEM_DB="$db" LD_PRELOAD="$BUILD/libgpumem.so" \
    "$TRAIN" --steps 100000 > /dev/null 2> "$TMP/trainer.err" &
  pid=$!
  for _ in $(seq 400); do [[ -s $db ]] && break; sleep 0.01; done
  if [[ " $* " != *" GPUMEM_SIGNALS=0 "* ]]; then
    for _ in $(seq 400); do catches "$pid" "$(kill -l "$sig")" && break; sleep 0.01; done
  fi
  sleep 0.5
}
run_and_signal() { # sig db [env...]; $ended_ms: from the signal to the program's end
  local sig=$1 t0 rc
  start_trainer "$@"
  t0=$(date +%s%N)
  kill "-$sig" "$pid"
  wait "$pid"; rc=$?
  ended_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  return $rc
}
for sig in HUP INT QUIT TERM USR1 USR2 ALRM PIPE XCPU XFSZ VTALRM PROF IO PWR STKFLT RTMIN RTMAX; do
  db=$TMP/$sig.db
  run_and_signal "$sig" "$db"; rc=$?
  want=$(( 128 + $(kill -l "$sig") ))
  [[ $rc -eq $want ]] || fail "SIG$sig: exit $rc, expected $want (as without gpumem)"
  state=$("$GPUMEM" sql "$db" -c "SELECT value FROM meta WHERE key = 'state'" | tail -1)
  # A close that was not made ('recording') in about 1 delivery of 100 in full test runs (plain
  # and ASan, 2 tests at once) until 2026-12-07: a thread interrupted while it held a lock the
  # writer needed (the loader_lock rows below make it every time; the handler now hands such a
  # close over to the writer). Should it recur, the row is run once more, and what the first run
  # gave is printed for the diagnosis: a recorder that never closes fails both.
  if [[ $state != interrupted ]]; then
    echo "note: SIG$sig: state '$state', the program ended ${ended_ms} ms after the signal; its stderr: $(tr '\n' ' ' < "$TMP/trainer.err" | cut -c1-300); the row once more" >&2
    rm -f "$db" "$db-wal" "$db-shm"
    run_and_signal "$sig" "$db"; rc=$?
    [[ $rc -eq $want ]] || fail "SIG$sig (again): exit $rc, expected $want (as without gpumem)"
    state=$("$GPUMEM" sql "$db" -c "SELECT value FROM meta WHERE key = 'state'" | tail -1)
  fi
  [[ $state == interrupted ]] || fail "SIG$sig: state '$state', expected interrupted"
  births=$("$GPUMEM" sql "$db" -c "SELECT count(*) FROM events WHERE kind IN (1, 3)" | tail -1)
  lives=$("$GPUMEM" sql "$db" -c "SELECT count(*) FROM alloc_life" | tail -1)
  alive=$("$GPUMEM" sql "$db" -c "SELECT count(*) FROM alloc_life WHERE death IS NULL" | tail -1)
  (( births > 0 && lives == births && alive > 0 )) || fail "SIG$sig: $births allocations, $lives lifetime rows ($alive alive)"
  "$GPUMEM" report "$db" > "$TMP/rep.txt" || fail "SIG$sig: report failed"
  grep -q "the program was ended by SIG$sig" "$TMP/rep.txt" || fail "SIG$sig: the report does not say how the program ended"
  "$GPUMEM" leaks --fail-on-leak "$db" > "$TMP/leaks.txt"; rc=$?
  [[ $rc -eq 3 ]] && grep -q "did not run to its end (ended by SIG$sig" "$TMP/leaks.txt" \
    || fail "SIG$sig: leaks --fail-on-leak exited $rc on an interrupted run, expected 3 (cannot judge)"
done
# a close slower than 3 s but moving is waited for; a stuck one is given up (no hang): hook
# setting, state, seconds from the signal to the program's end (at least, at most)
for row in "350:10 interrupted 3 20" "30000:0 recording 2 20"; do
  read -r slow wstate lo hi <<< "$row"
  db=$TMP/slow-${slow%%:*}.db
  start_trainer TERM "$db" GPUMEM_TEST_SLOW_CLOSE="$slow"
  t0=$(date +%s%N)
  kill -TERM "$pid"
  wait "$pid"; rc=$?
  secs=$(( ($(date +%s%N) - t0) / 1000000000 ))
  state=$("$GPUMEM" sql "$db" -c "SELECT value FROM meta WHERE key = 'state'" | tail -1)
  [[ $rc -eq 143 && $state == "$wstate" ]] && (( secs >= lo && secs <= hi )) \
    || fail "GPUMEM_TEST_SLOW_CLOSE=$slow: exit $rc (want 143), state '$state' (want $wstate), ended ${secs} s after the signal (want $lo-$hi)"
  if [[ $wstate == interrupted ]]; then
    births=$("$GPUMEM" sql "$db" -c "SELECT count(*) FROM events WHERE kind IN (1, 3)" | tail -1)
    lives=$("$GPUMEM" sql "$db" -c "SELECT count(*) FROM alloc_life" | tail -1)
    (( births > 0 && lives == births )) || fail "GPUMEM_TEST_SLOW_CLOSE=$slow: $births allocations, $lives lifetime rows"
  fi
done
echo "ok: a close of 3.5 s that makes progress is waited for (interrupted); a stuck one is given up 3 s after its last progress (recording, no hang)"
# a signal that lands while the program holds a lock the writer's close needs (not the
# recorder's): crash_app kills itself from inside dl_iterate_phdr's callback, right after an
# allocation whose stack goes through a library loaded late (the writer lists the loaded objects
# again for it, under the same lock). The handler hands the close over to the writer, the
# program goes on and lets go of the lock, the writer closes and ends it with the signal; the
# program that ends meanwhile (exit, _exit) ends of the signal too, once closed. Before
# (2026-12-07): 'recording' after 3 s every time, the same in ~1 delivery of 100 above.
CRASH=$BUILD/tests/apps/crash_app
for row in "TERM wait" "INT wait" "HUP exit" "TERM _exit"; do
  read -r sig then <<< "$row"
  db=$TMP/loader-$sig-$then.db
  rc=0; env --default-signal GPUMEM_DB="$db" LD_PRELOAD="$BUILD/libgpumem.so" \
    "$CRASH" loader_lock "$(kill -l "$sig")" "$BUILD/tests/apps/loader_lock.so" "$then" > /dev/null 2> "$TMP/loader.err" || rc=$?
  want=$(( 128 + $(kill -l "$sig") ))
  q=$("$GPUMEM" sql "$db" -c "SELECT (SELECT value FROM meta WHERE key = 'state'),
      (SELECT count(*) FROM events WHERE kind IN (1, 3)), (SELECT count(*) FROM alloc_life),
      (SELECT count(*) FROM modules WHERE path LIKE '%/loader_lock.so')" | tail -1)
  [[ $rc -eq $want && $q == "interrupted|101|101|1" ]] \
    || { cat "$TMP/loader.err"; fail "SIG$sig in the loader's lock, then $then: exit $rc (want $want), state|allocations|lifetimes|the library's module row '$q' (want interrupted|101|101|1)"; }
done
echo "ok: a signal while the program holds the dynamic linker's lock: the close handed over to the writer, state interrupted, every allocation with its lifetime, exit 128+N (also when the program exits or _exits meanwhile)"
# a normal exit whose close makes no progress (the writer stuck 20 s: a disk that does not
# answer): the program still ends, its status its own, the file 'recording' and a line saying
# so; the bound (30 s without progress) shortened to 1 s here. Before (2026-12-07): the exit
# waited for the writer however long it took (pthread_join), 20 s here.
db=$TMP/exit-stuck.db
t0=$(date +%s%N)
rc=0; GPUMEM_TEST_SLOW_CLOSE=20000:0 GPUMEM_TEST_EXIT_IDLE_MS=1000 GPUMEM_DB="$db" LD_PRELOAD="$BUILD/libgpumem.so" \
  "$TRAIN" --steps 2 > /dev/null 2> "$TMP/exit.err" || rc=$?
secs=$(( ($(date +%s%N) - t0) / 1000000000 ))
state=$("$GPUMEM" sql "$db" -c "SELECT value FROM meta WHERE key = 'state'" | tail -1)
[[ $rc -eq 0 && $state == recording ]] && (( secs < 15 )) && grep -q "close made no progress for 1 s" "$TMP/exit.err" \
  && echo "ok: a normal exit whose close is stuck: the program ends (exit 0) ${secs} s on, the file 'recording', said" \
  || { cat "$TMP/exit.err"; fail "a normal exit whose close is stuck: exit $rc (want 0), state '$state' (want recording), ${secs} s (want < 15), or no line saying so"; }
# a signal sent to `gpumem record` alone (kill PID, Popen.terminate(), a supervisor): record passes
# it on to the program, waits for it, summarises and exits as the program did (128+N); the
# program is gone and its recording closed (state interrupted), never left running, orphaned
for sig in TERM INT HUP QUIT; do
  db=$TMP/rec-$sig.db
  env --default-signal "$GPUMEM" record -o "$db" -- "$TRAIN" --steps 100000 > /dev/null 2> "$TMP/rec.err" &
  rpid=$!
  for _ in $(seq 400); do [[ -s $db ]] && break; sleep 0.01; done
  sleep 0.5
  prog=$(pgrep -P "$rpid" | head -1)
  [[ -n $prog ]] || fail "record's SIG$sig row: the program did not start"
  kill "-$sig" "$rpid"
  wait "$rpid"; rc=$?
  want=$(( 128 + $(kill -l "$sig") ))
  if kill -0 "$prog" 2> /dev/null; then
    kill -KILL "$prog"
    fail "SIG$sig sent to gpumem record alone: the program still runs, orphaned"
  fi
  [[ $rc -eq $want ]] || { cat "$TMP/rec.err"; fail "SIG$sig sent to gpumem record alone: exit $rc, expected $want (the program's)"; }
  state=$("$GPUMEM" sql "$db" -c "SELECT value FROM meta WHERE key = 'state'" | tail -1)
  [[ $state == interrupted ]] || fail "SIG$sig sent to gpumem record alone: state '$state', expected interrupted"
  grep -q "killed by signal $(kill -l "$sig")" "$TMP/rec.err" || { cat "$TMP/rec.err"; fail "SIG$sig sent to gpumem record alone: no summary saying how the program ended"; }
done
echo "ok: SIGTERM, SIGINT, SIGHUP, SIGQUIT sent to gpumem record alone: passed on to the program, which ends (128+N), summarised"
# a program that handles the signal, then kills itself with it (the default action put back),
# or ends by _exit; and one whose subprocess fails to start (Python's vfork child _exits in the
# parent's memory: the parent's recording stays open)
cat > "$TMP/self.py" <<'PY'
import ctypes, os, signal, subprocess, sys
how, sig = sys.argv[1], getattr(signal, sys.argv[2])
def die(*_):
    signal.signal(sig, signal.SIG_DFL)
    if how == "kill": os.kill(os.getpid(), sig)
    elif how == "raise": signal.raise_signal(sig)
    elif how == "killpg": os.setpgid(0, 0); os.killpg(0, sig)
    elif how == "_exit": os._exit(3)
    sys.exit("still alive")
signal.signal(sig, die)  # before the recording opens: the recorder leaves it to the program
ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)
malloc = ctypes.CDLL(None).cudaMalloc
p, q = ctypes.c_void_p(), ctypes.c_void_p()
if how == "fork":  # a child forked before any CUDA call (the recording opened for a range)
    ctypes.CDLL(None).gpumem_range_push(b"parent")
    child = os.fork()
    if child == 0:  # records to its own file, and ends by _exit, its close slow
        os.environ["GPUMEM_TEST_SLOW_CLOSE"] = "350:10"  # read when its recording opens
        assert malloc(ctypes.byref(q), 1 << 20) == 0
        os._exit(0)
    os.waitpid(child, 0)
assert malloc(ctypes.byref(p), 1 << 20) == 0
if how == "fork": sys.exit(0)
if how == "spawn":
    try: subprocess.run(["/nonexistent/gpumem-test-program"])
    except OSError: pass
    assert malloc(ctypes.byref(q), 1 << 20) == 0
    sys.exit(0)
if how == "ctrl-c": raise KeyboardInterrupt  # Python's exit: SIGINT back to default, kill(getpid())
os.kill(os.getpid(), sig)  # the program's handler runs, and ends the process
PY
# how, signal, exit status, state, allocations alive at the end, environment
for row in "ctrl-c SIGINT 130 interrupted 1" "kill SIGTERM 143 interrupted 1" "raise SIGTERM 143 interrupted 1" \
           "killpg SIGINT 130 interrupted 1" "_exit SIGTERM 3 closed 1" "spawn SIGTERM 0 closed 2" \
           "kill SIGHUP 129 interrupted 1" "raise SIGQUIT 131 interrupted 1" "killpg SIGUSR1 138 interrupted 1" \
           "fork SIGTERM 0 closed 1" "raise SIGINT 130 recording 0 GPUMEM_SIGNALS=0"; do
  read -r how sig want wstate walive env1 <<< "$row"
  db=$TMP/self-$how-$sig${env1:+-off}.db
  env --default-signal ${env1:-} "$GPUMEM" record -q -o "$db" -- python3 "$TMP/self.py" "$how" "$sig" \
    > /dev/null 2> "$TMP/self.err"; rc=$?
  state=$("$GPUMEM" sql "$db" -c "SELECT value FROM meta WHERE key = 'state'" | tail -1)
  alive=$("$GPUMEM" sql "$db" -c "SELECT count(*) FROM alloc_life WHERE death IS NULL" | tail -1)
  [[ $rc -eq $want && $state == "$wstate" && $alive == "$walive" ]] \
    || fail "$how $sig ${env1:-}: exit $rc (want $want), state '$state' (want $wstate), $alive lifetimes alive (want $walive): $(tail -2 "$TMP/self.err")"
done
# the forked child's own file (NAME-<pid>.db): closed at its _exit, the 3.5 s close waited for
kid=$(ls "$TMP"/self-fork-SIGTERM-*.db 2> /dev/null | head -1)
[[ -n $kid ]] || fail "fork: no file of the forked child ($(ls "$TMP"))"
read -r kstate kalive < <("$GPUMEM" sql "$kid" -c "SELECT (SELECT value FROM meta WHERE key = 'state'),
  (SELECT count(*) FROM alloc_life WHERE death IS NULL)" | tail -1 | tr '|' ' ')
[[ $kstate == closed && $kalive == 1 ]] \
  || fail "fork: the child's file $kid: state '$kstate' (want closed: its slow close cut short?), $kalive lifetimes alive (want 1)"
# opted out: the signal kills the program as before, the recording stays unclosed
run_and_signal TERM "$TMP/off.db" GPUMEM_SIGNALS=0; rc=$?
[[ $rc -eq 143 ]] || fail "GPUMEM_SIGNALS=0: exit $rc"
[[ $("$GPUMEM" sql "$TMP/off.db" -c "SELECT value FROM meta WHERE key = 'state'" | tail -1) == recording ]] \
  || fail "GPUMEM_SIGNALS=0: the recorder handled the signal"
# crashes: how (crash_app argument), exit status, what the summary's second line says
CRASH=$BUILD/tests/apps/crash_app
[[ -x $CRASH ]] || fail "$CRASH is not built"
if [[ -n ${SAN:-} ]]; then
  # the sanitizer's runtime handles SIGSEGV and SIGABRT in the instrumented program itself (its
  # report, then exit 1): the crash rows are the plain build's
  echo "note: crash rows skipped under SAN=$SAN (the sanitizer owns the program's fatal signals)" >&2
else
  crashes=(
    "abort|134|was killed by signal 6 (Aborted); the recording covers its run up to then"
    "segv|139|was killed by signal 11 (Segmentation fault); the recording covers its run up to then"
    "handler|3|exited with status 3; the recording covers its run up to then"
  )
  for row in "${crashes[@]}"; do
    IFS='|' read -r how want said <<< "$row"
    rc=0; "$GPUMEM" record -o "$TMP/crash-$how.db" -- "$CRASH" "$how" > /dev/null 2> "$TMP/crash.err" || rc=$?
    [[ $rc == "$want" ]] || { cat "$TMP/crash.err"; fail "crash_app $how: exit $rc, want $want"; }
    grep -q "^gpumem: peak allocated .* 100 allocations, 50 frees, 0 OOMs, 0 dropped events$" "$TMP/crash.err" \
      && grep -qF "gpumem: the program $said" "$TMP/crash.err" \
      || { cat "$TMP/crash.err"; fail "crash_app $how: the summary"; }
    [[ $("$GPUMEM" sql "$TMP/crash-$how.db" -c "SELECT count(*) FROM events WHERE kind = 1" | tail -1) == 100 ]] \
      || fail "crash_app $how: the file does not hold its 100 allocations"
  done
  grep -q "^crash_app: handler ran$" "$TMP/crash.err" || fail "the program's own SIGSEGV handler did not run"
  rc=0; "$GPUMEM" record -o "$TMP/crash-kill9.db" -- "$CRASH" kill9 > /dev/null 2> "$TMP/crash.err" || rc=$?
  [[ $rc == 137 ]] && ! grep -q "nothing allocated" "$TMP/crash.err" \
    && grep -q "^gpumem: 0 allocations committed (0 frees, 0 OOMs, 0 dropped events); the last ~100 ms before the program ended were not" "$TMP/crash.err" \
    || { cat "$TMP/crash.err"; fail "crash_app kill9: exit $rc, or summarised as nothing allocated"; }
  echo "ok: abort, SIGSEGV (and the program's own handler, chained): 100 allocations and 50 frees committed before the end; kill -9: '0 allocations committed', never 'nothing allocated'"
fi
echo "ok: SIGHUP, SIGINT, SIGTERM and every other ending signal: exit 128+N as before, state interrupted, every allocation has its lifetime; also when the program kills itself (Python's Ctrl-C exit, kill, raise, killpg); closed at _exit (a forked child's too, its 3.5 s close waited for), not by a vfork child's; GPUMEM_SIGNALS=0 opts out"
