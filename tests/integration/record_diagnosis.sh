#!/usr/bin/env bash
# What `gpumem record` says when a run goes wrong says what happened, not a guess:
#  - a program that fails in its argument parsing exited with its status before any CUDA call
#    (never "its driver calls do not reach gpumem");
#  - the CUDA trainer (-cudart shared) whose cuBLAS embeds a static runtime: the virtual GPU names
#    libcublas as the object asking for the export tables (never the program's own runtime), and
#    record says the program exited with status 2 before any allocation (never only "made no
#    device or pinned allocation");
#  - a real-compute run with GPUMEM_SIM_BACKING=virtual crashes (no memory behind the
#    addresses): record says it was killed by SIGSEGV and what that backing is for;
#  - a program killed by SIGKILL mid-run (found by its own name: the trainer, which re-executes
#    itself once, keeps it): record says so, and gives the recording's counts once (the
#    summary's), not a second count of something else;
#  - python -I, -E or -S keeps gpumem's sitecustomize out: record says PyTorch would be
#    recorded by its segments only; other options, and those of the command (-c '-I'), do not.
source "$(dirname "$0")/e2e_common.bash"
"$GM" record -o "$TMP/py.db" -- python3 -c pass > /dev/null 2> "$TMP/py.err" || true
if grepq "gpumem's Python files are neither" "$TMP/py.err"; then
  # (a build without them beside it, the sanitizers': no sitecustomize to keep out)
  echo "note: this build has no gpumem Python files beside it: the python -I/-E/-S part is skipped" >&2
elif command -v python3 > /dev/null; then
  for a in "-I -c pass" "-u -S -c pass" "-W ignore -E -c pass" "-X dev -IS -c pass"; do
    # shellcheck disable=SC2086 # the options, word by word
    "$GM" record -o "$TMP/py.db" -- python3 $a > /dev/null 2> "$TMP/py.err" || true
    grepq "cannot set PyTorch up, so PyTorch is recorded by its segments only" "$TMP/py.err" \
      || fail "python3 $a: no line about the sitecustomize kept out"
  done
  for a in "-c pass" "-X dev -c pass" "-u -c pass" "-c -I"; do
    # shellcheck disable=SC2086
    "$GM" record -o "$TMP/py.db" -- python3 $a > /dev/null 2> "$TMP/py.err" || true
    grepq "cannot set PyTorch up" "$TMP/py.err" && fail "python3 $a: said the sitecustomize is kept out"
  done
  ok "python -I/-E/-S: record says PyTorch is then recorded by its segments only; other options not"
fi
rc=0; "$GM" record -o "$TMP/a.db" -- "$TRAIN" --bogus > /dev/null 2> "$TMP/err.txt" || rc=$?
[[ $rc == 1 ]] || fail "argument failure: record exited $rc, the program's 1"
grep -q "nothing was recorded: the program (pid [0-9]*) exited with status 1 before any of its CUDA calls reached gpumem" "$TMP/err.txt" \
  || fail "argument failure: $(cat "$TMP/err.txt")"
! grep -q "does not interpose\|made no device" "$TMP/err.txt" || fail "argument failure blamed on gpumem: $(cat "$TMP/err.txt")"
ok "a program failing in its arguments: its exit status, no guess about driver calls"

# (under ASan the signal is left to kill the program, as without it: handle_segv=0)
rc=0; ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0 GPUMEM_SIM_BACKING=virtual "$GM" record -o "$TMP/v.db" -- "$TRAIN" --model tiny --steps 2 > /dev/null 2> "$TMP/err.txt" || rc=$?
[[ $rc == 139 ]] || fail "real compute on virtual backing: exit $rc (want 139, SIGSEGV)"
grep -q "the program was killed by signal 11 (Segmentation fault)" "$TMP/err.txt" || fail "virtual backing: $(cat "$TMP/err.txt")"
grep -q "GPUMEM_SIM_BACKING=virtual backs no device memory" "$TMP/err.txt" || fail "virtual backing: no hint: $(cat "$TMP/err.txt")"
! grep -q "made no device or pinned allocation" "$TMP/err.txt" || fail "virtual backing: 'made no allocation' said of a crash"
ok "real compute on GPUMEM_SIM_BACKING=virtual: killed by SIGSEGV, and what that backing is for"

kill9_run() { # the trainer under gpumem record, killed by SIGKILL once allocations are committed;
  # rc: record's exit status; waited: 1 when none was seen committed within 30 s
  rm -f "$TMP"/k*.db "$TMP"/k*.db-*
  "$GM" record -o "$TMP/k.db" -- "$TRAIN" --model tiny --steps 1000000 > /dev/null 2> "$TMP/err.txt" & rp=$!
  kid=
  for _ in $(seq 200); do kid=$(pgrep -P "$rp" -x "$(basename "$TRAIN")") && break; sleep 0.05; done
  [[ -n $kid ]] || fail "SIGKILL: no child process named $(basename "$TRAIN") under gpumem record: $(ps -o pid=,comm= --ppid "$rp")"
  waited=1
  for _ in $(seq 600); do  # until the writer has committed allocations
    [[ $(sqlite3 "$TMP/k.db" "SELECT count(*) FROM events WHERE kind IN (1, 3)" 2> /dev/null || echo 0) -gt 0 ]] && { waited=0; break; }
    sleep 0.05
  done
  kill -9 "$kid"
  rc=0; wait "$rp" || rc=$?
}
kill9_run
# Once in ~11 full CI runs (2026-12-07, CI4 of stop 79: 38 s, so no allocation seen committed in
# the 30 s, then record exited 3) and not reproduced in 20 runs beside two torch tests: not
# diagnosed. The row runs once more, printing what the first run left for the diagnosis; a
# recorder that never commits fails both.
if [[ $rc != 137 ]]; then
  echo "note: SIGKILL: record exited $rc, allocations $( ((waited)) && echo "not seen committed in 30 s" || echo committed); files: $(cd "$TMP" && ls k*.db* 2> /dev/null | tr '\n' ' '); record's stderr: $(tr '\n' ' ' < "$TMP/err.txt" | cut -c1-600); the row once more" >&2
  kill9_run
fi
[[ $rc == 137 ]] || { cat "$TMP/err.txt"; fail "SIGKILL: record exited $rc (want 137, the program's)"; }
grepq "the program was killed by signal 9 (Killed); the recording holds what was committed up to ~100 ms before the end (the counts above)" "$TMP/err.txt" \
  || fail "SIGKILL: $(tail -3 "$TMP/err.txt")"
[[ $(grep -c "[0-9] allocations" "$TMP/err.txt") == 1 ]] && grepq "peak allocated [1-9].* [1-9][0-9]* allocations" "$TMP/err.txt" \
  || fail "SIGKILL: the counts: $(grep allocations "$TMP/err.txt")"
ok "a program killed by SIGKILL mid-run: said so, the recording's counts given once"

CUDA_TRAIN=$BUILD/train_gpt2
if [[ -x $CUDA_TRAIN ]] && ldd "$CUDA_TRAIN" | grepq libcublas; then
  rc=0; "$GM" record -o "$TMP/c.db" -- "$CUDA_TRAIN" --model tiny --steps 2 > /dev/null 2> "$TMP/err.txt" || rc=$?
  if grep -q "export tables" "$TMP/err.txt"; then
    grep -q "libcublas[^ ]* embeds a static CUDA runtime" "$TMP/err.txt" || fail "cuBLAS: $(grep 'export tables' "$TMP/err.txt")"
    ! grep -q "built with nvcc's default static CUDA runtime" "$TMP/err.txt" || fail "the program's runtime blamed for cuBLAS's"
    [[ $rc == 0 ]] || grepq "the program exited with status $rc before it made any device or pinned allocation" "$TMP/err.txt" \
      || fail "cuBLAS failure: record's summary: $(tail -3 "$TMP/err.txt")"
    ok "the CUDA trainer: libcublas named as the static runtime, the program's failure said as such"
  else
    echo "note: the CUDA trainer's cuBLAS did not ask for export tables here: nothing to check" >&2
  fi
else
  echo "note: no CUDA trainer with cuBLAS ($CUDA_TRAIN): its part is skipped" >&2
fi
