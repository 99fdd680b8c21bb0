#!/usr/bin/env bash
# A signal that lands while the interrupted thread holds a lock the writer's close needs (the
# recorder's lock: a new string, stack, thread or item; db_lock and the lock: the fork handlers)
# still closes the recording: state as asked (interrupted, or closed at _exit), the events
# before the signal in the file with every allocation's lifetime and every stack and string an
# event names, and the program's exit status as without gpumem. The test hook
# GPUMEM_TEST_SIGNAL_IN_LOCK (snapshot/record/rec.c) sends the signal from inside the section:
# as from another process (kill from a shell: the signal waits for the end of the section), or
# as the program's own handler on top of the section would (kill, raise, abort, _exit: the
# thread never goes back, and the writer goes on without the lock). Without the fix every row
# waited out the handler's 3 s for a writer that could not get the lock, and left 'recording'.
# And abort() there, under the program's own SIGABRT handler: that handler runs at once (the
# flush before it skipped; it waited 10 s for the writer before).
source tests/integration/snapshot_common.bash
need "$GPUMEM"
TRAIN=$BUILD/train_gpt2_sim
[[ -f $BUILD/libgpumem.so && -x $TRAIN ]] || { echo "skipped: libgpumem.so or the trainer not built" >&2; exit 77; }
ulimit -c 0
# the fork's section: a program that allocates, then forks (the child leaves at once)
# (with an argument: its own SIGABRT handler, installed before the recording opens)
cat > "$TMP/fork.py" <<'PY'
import ctypes, os, signal, sys
if len(sys.argv) > 1: signal.signal(signal.SIGABRT, lambda *_: None)
ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)
malloc = ctypes.CDLL(None).cudaMalloc
p = [ctypes.c_void_p() for _ in range(4)]
for q in p: assert malloc(ctypes.byref(q), 1 << 20) == 0
if os.fork() == 0: os._exit(0)
os.wait()
PY
check() { # label db want_rc rc want_state ms (said, not judged: a sanitizer's start is slow)
  local label=$1 db=$2 want=$3 rc=$4 wstate=$5 ms=$6
  [[ -f $db ]] || fail "$label: no recording at $db"
  local q; q=$("$GPUMEM" sql "$db" -c "SELECT (SELECT value FROM meta WHERE key = 'state'),
      (SELECT count(*) FROM events WHERE kind IN (1, 3)), (SELECT count(*) FROM alloc_life),
      (SELECT count(*) FROM events e WHERE e.stack > 0 AND NOT EXISTS (SELECT 1 FROM stacks s WHERE s.stack = e.stack)),
      (SELECT count(*) FROM ranges r WHERE r.name > 0 AND NOT EXISTS (SELECT 1 FROM strings s WHERE s.id = r.name))" | tail -1)
  local state births lives nostack nostr
  IFS='|' read -r state births lives nostack nostr <<< "$q"
  [[ $rc -eq $want && $state == "$wstate" ]] \
    || fail "$label: exit $rc (want $want), state '$state' (want $wstate) after ${ms} ms"
  (( births > 0 && lives == births )) || fail "$label: $births allocations, $lives lifetime rows"
  (( nostack == 0 && nostr == 0 )) || fail "$label: $nostack events name a stack not written, $nostr ranges a string not written"
  echo "ok: $label: exit $rc, state $state, $births allocations with their lifetimes, $ms ms"
}
# how, signal (the _exit status), where (n-th section of the lock, or fork), exit status, state
rows=(
  "sent 15 60 143 interrupted" "sent 1 60 129 interrupted" "sent 2 60 130 interrupted"
  "sent 6 60 134 interrupted" "kill 15 60 143 interrupted" "kill 1 60 129 interrupted"
  "raise 15 60 143 interrupted" "raise 2 60 130 interrupted" "abort 6 60 134 interrupted"
  "_exit 3 60 3 closed"
  "sent 15 fork 143 interrupted" "kill 1 fork 129 interrupted" "raise 15 fork 143 interrupted"
  "abort 6 fork 134 interrupted" "_exit 5 fork 5 closed"
)
for row in "${rows[@]}"; do
  read -r how sig where want wstate <<< "$row"
  db=$TMP/$how-$sig-$where.db
  t0=$(date +%s%N)
  if [[ $where == fork ]]; then
    env --default-signal GPUMEM_TEST_SIGNAL_IN_LOCK="$how:$sig:fork" \
      "$GPUMEM" record -q -o "$db" -- python3 "$TMP/fork.py" > /dev/null 2> "$TMP/err"; rc=$?
  else
    env --default-signal GPUMEM_TEST_SIGNAL_IN_LOCK="$how:$sig:$where" GPUMEM_DB="$db" \
      LD_PRELOAD="$BUILD/libgpumem.so" "$TRAIN" --steps 2 > /dev/null 2> "$TMP/err"; rc=$?
  fi
  check "$how ${sig} in the $([[ $where == fork ]] && echo "fork's section (db_lock)" || echo "lock's section $where")" \
    "$db" "$want" "$rc" "$wstate" $((($(date +%s%N) - t0) / 1000000))
done
# abort() in the fork's section where the program has its own SIGABRT handler: the ring is not
# flushed first there (the flush would wait for a writer that needs the lock this thread holds,
# 10 s, before the program's handler ran); the handler runs, the process dies of SIGABRT
t0=$(date +%s%N)
env --default-signal GPUMEM_TEST_SIGNAL_IN_LOCK="abort:6:fork" \
  "$GPUMEM" record -q -o "$TMP/handled.db" -- python3 "$TMP/fork.py" handled > /dev/null 2> "$TMP/err"; rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
[[ $rc -eq 134 ]] || fail "abort in the fork's section, the program's own SIGABRT handler: exit $rc, want 134"
(( ms < 8000 )) || fail "abort in the fork's section, the program's own SIGABRT handler: $ms ms (the flush before it waited for the writer)"
echo "ok: abort in the fork's section, the program's own SIGABRT handler: exit 134 after $ms ms, no flush waiting for the lock"
echo "ok: a signal sent into a section of the recorder's locks (SIGTERM, SIGHUP, SIGINT, SIGABRT; kill, raise, abort, _exit on top of it; the lock's and the fork's db_lock) closes the recording at once, consistent"
