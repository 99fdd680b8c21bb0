#!/usr/bin/env bash
# A recorded program that execs (replaces itself; the same pid): each image's recording stays.
#  - a Python program that allocates, then execs itself twice (os.execv): three databases, the
#    first two committed up to the exec (libgpumem.so's exec wrappers flush first), with state
#    'exec' and meta.exec the program run (`gpumem report` says so), the last one closed; a
#    failed exec leaves the state 'recording' and the recording goes on; the next image
#    never replaces its own process's earlier file (it was: the lock's descriptor closes at the
#    exec, and an unlocked gpumem database counts as a stale one); `gpumem record` summarises
#    the last and names the first;
#  - the processes of one run (a launcher script's steps) never replace each other's files, and
#    `gpumem record` lists them; a later run replaces them as before; a launcher that records
#    nothing itself: record summarises the first file to open (NAME.db), not NAME-<pid>.db;
#  - execl, execlp and execle, which libgpumem.so wraps (libc reaches execve inside itself),
#    pass their arguments and environment exactly.
source "$(dirname "$0")/e2e_common.bash"
cat > "$TMP/chain.py" <<'PY'
import ctypes, os, sys
ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)
p = ctypes.c_void_p()
n = int(sys.argv[1])
assert ctypes.CDLL(None).cudaMalloc(ctypes.byref(p), (n + 1) << 20) == 0
if n == 1:
    import time
    time.sleep(0.3)  # everything committed already: the exec's mark alone must still land
if n < 2:
    os.execv(sys.executable, [sys.executable, __file__, str(n + 1)])
PY
rc=0; "$GM" record -o "$TMP/x.db" -- python3 "$TMP/chain.py" 0 > /dev/null 2> "$TMP/err.txt" || rc=$?
[[ $rc == 0 ]] || fail "exec chain: record exited $rc: $(tail -3 "$TMP/err.txt")"
k=0
for db in x x-exec1 x-exec2; do
  [[ -f $TMP/$db.db ]] || fail "exec chain: no $db.db ($(ls "$TMP"))"
  read -r state size < <("$GM" sql "$TMP/$db.db" -c "SELECT (SELECT value FROM meta WHERE key = 'state'),
    (SELECT group_concat(size) FROM events WHERE kind = 1)" | tail -1 | tr '|' ' ')
  want=exec; [[ $db == x-exec2 ]] && want=closed
  [[ $state == "$want" && $size == $(( (k + 1) << 20 )) ]] \
    || fail "exec chain: $db.db: state '$state' (want $want), allocations of '$size' bytes (want $(( (k + 1) << 20 )))"
  k=$((k + 1))
done
py=$(python3 -c 'import sys; print(sys.executable)')
[[ $("$GM" sql "$TMP/x.db" -c "SELECT value FROM meta WHERE key = 'exec'" | tail -1) == "$py" ]] \
  || fail "exec chain: x.db's meta.exec is not $py"
"$GM" report "$TMP/x.db" 2> /dev/null | grepq "the program replaced itself (exec of $py).*beside this file ($TMP/x-exec1.db," \
  || fail "exec chain: the report does not say the program exec'd: $("$GM" report "$TMP/x.db" 2>&1 | sed -n 1,4p)"
grepq "recorded to $TMP/x-exec2.db" "$TMP/err.txt" && grepq "the program exec'd: its recording from before that is $TMP/x.db" "$TMP/err.txt" \
  || fail "exec chain: record's summary: $(tail -4 "$TMP/err.txt")"
ok "a program that execs twice: three recordings, each image's allocation committed in its own, the last summarised"

# the exec's flush is waited for while the writer makes progress (snapshot/record/rec.c
# wait_writer), not for a fixed time: a flush of 10.5 s (GPUMEM_TEST_SLOW_CLOSE: 30 steps of
# 350 ms, the first image's only) was cut at 10 s, the exec then ended the writer, and the
# first image's file said 'recording'
cat > "$TMP/slow.py" <<'PY'
import ctypes, os, sys
first = len(sys.argv) == 1
if first: os.environ["GPUMEM_TEST_SLOW_CLOSE"] = "350:30"  # read when the recording opens
ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)
p = ctypes.c_void_p()
assert ctypes.CDLL(None).cudaMalloc(ctypes.byref(p), 1 << 20) == 0
if first:
    del os.environ["GPUMEM_TEST_SLOW_CLOSE"]
    os.execv(sys.executable, [sys.executable, __file__, "next"])
PY
"$GM" record -q -o "$TMP/slow.db" -- python3 "$TMP/slow.py" > /dev/null 2> "$TMP/slow.err" \
  || fail "slow exec flush: record exited $?: $(tail -3 "$TMP/slow.err")"
for db in slow slow-exec1; do
  want=exec; [[ $db == slow-exec1 ]] && want=closed
  got=$("$GM" sql "$TMP/$db.db" -c "SELECT (SELECT value FROM meta WHERE key = 'state') || ' ' ||
    (SELECT count(*) FROM events WHERE kind = 1)" | tail -1)
  [[ $got == "$want 1" ]] || fail "slow exec flush: $db.db: state and allocations '$got' (want '$want 1')"
done
ok "an exec whose flush takes 10.5 s but makes progress: waited for, the first image's file says 'exec'"

cat > "$TMP/nope.py" <<'PY'
import ctypes, os
ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)
p = ctypes.c_void_p()
assert ctypes.CDLL(None).cudaMalloc(ctypes.byref(p), 1 << 20) == 0
try:
    os.execv("/nonexistent/gpumem-no-such-program", ["x"])
except OSError:
    pass
assert ctypes.CDLL(None).cudaMalloc(ctypes.byref(p), 2 << 20) == 0
PY
"$GM" record -q -o "$TMP/n.db" -- python3 "$TMP/nope.py" > /dev/null 2>&1 || fail "failed exec: record exited $?"
got=$("$GM" sql "$TMP/n.db" -c "SELECT (SELECT value FROM meta WHERE key = 'state') || ' ' ||
  coalesce((SELECT value FROM meta WHERE key = 'exec'), '') || ':' || (SELECT group_concat(size) FROM events WHERE kind = 1)" | tail -1)
[[ $got == "closed :1048576,2097152" ]] || fail "failed exec: state, exec and allocations '$got' (want 'closed :1048576,2097152')"
ok "a failed exec: the recording goes on and closes"

# a launcher script whose steps each record: `bash -c "python3 a; python3 b"` (the first
# forked, the last exec'd by bash): each process's file kept, the second beside the first;
# gpumem record summarises the one it started and lists the other. A second run still
# replaces the first run's file.
for n in 1 2; do
  printf 'import ctypes\nctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)\np = ctypes.c_void_p()\nassert ctypes.CDLL(None).cudaMalloc(ctypes.byref(p), %d << 20) == 0\n' "$n" > "$TMP/step$n.py"
done
steps() {  # steps NAME: record the two steps into $TMP/NAME.db; prints every file's allocation sizes
  "$GM" record -o "$TMP/$1.db" -- bash -c "python3 $TMP/step1.py; python3 $TMP/step2.py" > /dev/null 2> "$TMP/$1.err" \
    || fail "launcher steps: record exited $?: $(tail -3 "$TMP/$1.err")"
  for f in "$TMP/$1".db "$TMP/$1"-*.db; do
    [[ -f $f ]] && "$GM" sql "$f" -c "SELECT group_concat(size) FROM events WHERE kind = 1" | tail -1
  done | sort | tr '\n' ' '
}
got=$(steps st)
[[ $got == "1048576 2097152 " ]] || fail "launcher steps: the files hold '$got' (want one 1 MiB and one 2 MiB recording)"
grepq "other processes of this run recorded too, each in its own file: $TMP/st.db (pid [0-9]*)" "$TMP/st.err" \
  || fail "launcher steps: record does not list the other file: $(tail -3 "$TMP/st.err")"
rm -f "$TMP"/st-*.db
got=$(steps st)
[[ $got == "1048576 2097152 " && $(ls "$TMP"/st*.db | wc -l) == 2 ]] \
  || fail "launcher steps, second run: '$got', files $(ls "$TMP"/st*.db) (the first run's $TMP/st.db must be replaced)"
ok "a launcher script's two recorded steps: each kept in its own file within a run, replaced by the next run"

# a launcher that records nothing itself (`; true` keeps bash from exec'ing the last step): record
# summarises the first file to open, st2.db (1 MiB), not st2-<pid>.db, which sorts before it by
# name ('-' before '.'); it did, and called that one the summary's
"$GM" record -o "$TMP/st2.db" -- bash -c "python3 $TMP/step1.py; python3 $TMP/step2.py; true" > /dev/null \
  2> "$TMP/st2.err" || fail "launcher that records nothing: record exited $?: $(tail -3 "$TMP/st2.err")"
grepq "peak allocated 1.00 MiB" "$TMP/st2.err" && grepq "recorded to $TMP/st2.db;" "$TMP/st2.err" \
  && grepq "each in its own file: $TMP/st2-[0-9]*.db (pid [0-9]*) (the summary above is $TMP/st2.db's)" "$TMP/st2.err" \
  || fail "launcher that records nothing: record does not summarise the first file, $TMP/st2.db: $(tail -3 "$TMP/st2.err")"
ok "a launcher that records nothing itself: record summarises its steps' first file (NAME.db), lists NAME-<pid>.db"

CC=${CC:-cc}
if command -v "$CC" > /dev/null; then
  cat > "$TMP/execl.c" <<'C'
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char *env[] = {"GM_EXECL=from-execle", NULL};
    if (argc > 1 && argv[1][0] == 'l') execl("/bin/echo", "echo", "execl", "a b", "c", (char *)NULL);
    if (argc > 1 && argv[1][0] == 'p') execlp("echo", "echo", "execlp", (char *)NULL);
    if (argc > 1 && argv[1][0] == 'e') execle("/bin/sh", "sh", "-c", "echo \"$GM_EXECL\"", (char *)NULL, env);
    if (argc > 1 && argv[1][0] == 'z') execl("/bin/echo", "echo", (char *)NULL);
    perror("exec");
    return 1;
}
C
  "$CC" -o "$TMP/execl" "$TMP/execl.c" || fail "cannot build the execl helper with $CC"
  out=$(for m in l p e z; do "$GM" record -q -o "$TMP/e-$m.db" -- "$TMP/execl" "$m" 2> /dev/null; echo "[$?]"; done)
  [[ $out == $'execl a b c\n[0]\nexeclp\n[0]\nfrom-execle\n[0]\n\n[0]' ]] \
    || fail "execl family under libgpumem.so: $(printf '%q' "$out")"
  ok "execl, execlp, execle under libgpumem.so: arguments and environment passed exactly"
else
  echo "note: no C compiler ($CC): the execl family's part is skipped" >&2
fi
