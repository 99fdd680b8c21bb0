#!/usr/bin/env bash
# --check's re-run (snapshot/analyze/gm_rerun.c), the one path of every command that re-runs the
# recorded program: tune, frag, advise, advise --ranks (under mpirun) and the PyTorch re-runs.
#  1. A table: each re-run made to fail on purpose (the recorded program, or mpirun, replaced by
#     one that says a known reason on stderr and exits non-zero, or no mpirun at all). Every
#     command exits 1 and its message quotes that reason (the re-run's own stderr, not just an
#     exit code) and the command to run by hand. Open MPI's framing of a rank's failure is passed
#     over for the rank's own words; a refusal by mpirun itself is quoted from its top.
#  3. (below 1) The re-run runs the command as it ran, from another directory and PATH: argv[0]
#     through the path PATH found it at (a virtual environment's python keeps its environment),
#     in the recorded working directory; an older recording's failure says what it lacked.
#  2. As root, under Open MPI: `advise --ranks N --check` re-runs without the user's
#     OMPI_ALLOW_RUN_AS_ROOT variables (the re-run passes --allow-run-as-root itself), and the
#     --budget plan's mpirun line carries the flag, so that it runs where it is printed.
source "$(dirname "$0")/e2e_common.bash"
export GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G GPUMEM_STACKS=0
# the re-runs under mpirun: Open MPI's own allocations, never freed, are not ours to report
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
WHY="planted failure 7431: cannot open the data shard"
nbad=0 # every row is run and said: a FAIL per row, the exit at the end
bad() { echo "FAIL: $*" >&2; nbad=$((nbad + 1)); }

# the trainer recorded through a link that is then replaced by a program failing with $WHY (the
# re-run runs the recorded argv[0]); gpt2 with a sequence length per step under PyTorch's policy,
# so that frag and tune both have a fix to re-run
mkdir -p "$TMP/bin" "$TMP/mpi" "$TMP/refuse" "$TMP/nompi"
ln -s "$(realpath "$TRAIN")" "$TMP/bin/train_gpt2_sim"
GPUMEM_CONF=preset:pytorch "$GM" record -q -o "$TMP/f.db" -- "$TMP/bin/train_gpt2_sim" --model gpt2 -B 2 -T 256 \
  --steps 6 --seq-jitter --seed 5 --dry-run > "$TMP/rec.txt" 2>&1 || fail "recording: $(tail -3 "$TMP/rec.txt")"
rm "$TMP/bin/train_gpt2_sim"
printf '#!/bin/sh\necho "step 1/6 loss -"\necho "%s" >&2\nexit 3\n' "$WHY" > "$TMP/bin/train_gpt2_sim"
# an mpirun that fails for a reason of its own, and one that refuses as Open MPI does as root
printf '#!/bin/sh\necho "mpirun 7431: no route to the node n7" >&2\nexit 5\n' > "$TMP/mpi/mpirun"
cat > "$TMP/refuse/mpirun" << 'EOF'
#!/bin/sh
cat >&2 << 'MSG'
--------------------------------------------------------------------------
mpirun has detected an attempt to run as root.

Running as root is *strongly* discouraged as any mistake (e.g., in
defining TMPDIR) or bug can result in catastrophic damage to the OS
file system, leaving your system in an unusable state.

You can override this protection by adding the --allow-run-as-root option
to the cmd line or by setting two environment variables in the following way:
We reiterate our advice against doing so - please proceed at your own risk.
--------------------------------------------------------------------------
MSG
exit 1
EOF
chmod +x "$TMP/bin/train_gpt2_sim" "$TMP/mpi/mpirun" "$TMP/refuse/mpirun"
NOMPI=$TMP/nompi # a PATH without mpirun: the re-run's exec fails
# row: NAME | PATH prefix ("-": none; "nompi": no mpirun at all) | gpumem arguments | the reason to be quoted
rows=(
  "tune|-|tune --check $TMP/f.db|$WHY"
  "frag|-|frag --check $TMP/f.db|$WHY"
  "advise|-|advise --check $TMP/f.db|$WHY"
  "advise --ranks, a rank fails|-|advise --ranks 2 --zero 1 --check $TMP/f.db|$WHY"
  "advise --ranks, mpirun fails|$TMP/mpi|advise --ranks 2 --zero 1 --check $TMP/f.db|mpirun 7431: no route to the node n7"
  "advise --ranks, mpirun refuses|$TMP/refuse|advise --ranks 2 --zero 1 --check $TMP/f.db|mpirun has detected an attempt to run as root"
  "advise --ranks, no mpirun|nompi|advise --ranks 2 --zero 1 --check $TMP/f.db|cannot run mpirun: No such file or directory"
)
have_mpirun=$(command -v mpirun || true)
for row in "${rows[@]}"; do
  IFS='|' read -r name pre args reason <<< "$row"
  if [[ $name == "advise --ranks, a rank fails" && -z $have_mpirun ]]; then
    echo "skipped: $name (no mpirun)"
    continue
  fi
  path=$PATH
  [[ $pre == nompi ]] && path=$NOMPI
  [[ $pre != - && $pre != nompi ]] && path=$pre:$PATH
  rc=0
  # shellcheck disable=SC2086 # the row's arguments are words
  PATH=$path "$GM" $args > "$TMP/out.txt" 2>&1 || rc=$?
  if [[ $rc != 1 ]]; then
    bad "$name: exit $rc, not 1: $(tail -3 "$TMP/out.txt")"
  elif ! grep -F "$reason" "$TMP/out.txt" | grep -F "failed" | grepq -F "; to see all of its output, run: "; then
    bad "$name: the message does not quote the re-run's reason '$reason': $(grep -m1 -F failed "$TMP/out.txt" || true)"
  else
    ok "$name --check: '$reason' quoted from the re-run's stderr"
  fi
done
# Open MPI's help text after a rank's failure is not what is quoted
grepq -F "$WHY" < <(PATH=$PATH "$GM" advise --ranks 2 --zero 1 --check "$TMP/f.db" 2>&1 | grep -F "zero 1:" | grep -v "mpirun detected") \
  || [[ -z $have_mpirun ]] || bad "advise --ranks: the rank's own reason is not quoted"

# 3. The re-run runs the command as it ran: argv[0] through the path PATH found it at (not the
# executable its links lead to: a virtual environment's python is a link to the system's, which
# run by its resolved path has none of the environment's packages), from the recorded working
# directory (its relative paths), whatever this command's directory and PATH. The trainer is
# found in PATH through a link into an "environment" and reads a relative --data file; then the
# executable its links led to is replaced by a program that fails as python does outside its
# environment (the environment's link goes on to the trainer), and every re-run is made from
# another directory with a PATH that does not have the environment.
GMA=$(realpath "$GM")
ENVWHY="7431: No module named 'torch' (run outside its environment)"
mkdir -p "$TMP/venv/bin" "$TMP/real" "$TMP/moved" "$TMP/work" "$TMP/elsewhere"
cp "$(realpath "$TRAIN")" "$TMP/moved/train_gpt2_sim"
ln -s "$(realpath "$BUILD/sim")" "$TMP/moved/sim" # the trainer's libraries, by its $ORIGIN
ln -s "$TMP/moved/sim" "$TMP/real/sim"
ln "$TMP/moved/train_gpt2_sim" "$TMP/real/train_gpt2_sim" 2> /dev/null || cp "$TMP/moved/train_gpt2_sim" "$TMP/real/"
ln -s "$TMP/real/train_gpt2_sim" "$TMP/venv/bin/train_gpt2_sim"
head -c 50000 "$TEXT" > "$TMP/work/data.txt"
(cd "$TMP/work" && GPUMEM_CONF=preset:pytorch PATH=$TMP/venv/bin:$PATH "$GMA" record -q -o "$TMP/v.db" -- \
  train_gpt2_sim --model gpt2 -B 2 -T 256 --steps 6 --seq-jitter --seed 5 --dry-run --data data.txt) \
  > "$TMP/rec.txt" 2>&1 || fail "recording through the environment's link: $(tail -3 "$TMP/rec.txt")"
ln -sfn "$TMP/moved/train_gpt2_sim" "$TMP/venv/bin/train_gpt2_sim"
rm "$TMP/real/train_gpt2_sim"
printf '#!/bin/sh\necho "%s" >&2\nexit 3\n' "$ENVWHY" > "$TMP/real/train_gpt2_sim"
chmod +x "$TMP/real/train_gpt2_sim"
# row: NAME | gpumem arguments | what its output must have when the re-run ran as recorded
rows=(
  "tune|tune --check $TMP/v.db|check: re-run under"
  "frag|frag --check $TMP/v.db|check: re-run under"
  "advise|advise --check --top 1 $TMP/v.db|measured"
)
if [[ -n $have_mpirun ]]; then
  rows+=("advise --ranks|advise --ranks 2 --zero 1 --check $TMP/v.db|zero 1: measured"
    "advise --ranks --budget plan|advise --ranks 2 --budget 1T --check $TMP/v.db|--check: measured")
else
  echo "skipped: advise --ranks re-runs through the environment (no mpirun)"
fi
for row in "${rows[@]}"; do
  IFS='|' read -r name args want <<< "$row"
  rc=0
  # shellcheck disable=SC2086 # the row's arguments are words
  (cd "$TMP/elsewhere" && "$GMA" $args) > "$TMP/out.txt" 2>&1 || rc=$?
  if [[ $rc != 0 ]] || ! grepq -F -- "$want" < "$TMP/out.txt"; then
    bad "$name --check from another directory: exit $rc: $(grep -m1 -F failed "$TMP/out.txt" || tail -2 "$TMP/out.txt")"
  else
    ok "$name --check: re-ran through the path the program was found at, in the recorded directory"
  fi
done
# the plan's mpirun line runs where it is printed: from the recorded directory
if [[ -n $have_mpirun ]]; then
  (cd "$TMP/elsewhere" && "$GMA" advise --ranks 2 --budget 1T --json "$TMP/v.db") > "$TMP/plan.json" 2> /dev/null || true
  if jq -e --arg d "$TMP/work" '.budget.plan.cwd == $d' "$TMP/plan.json" > /dev/null; then
    ok "the --budget plan names the directory its mpirun line runs from"
  else
    bad "the --budget plan does not name the recorded directory: $(jq -c '.budget.plan' "$TMP/plan.json" 2>&1 | head -c 300)"
  fi
fi
# An older recording (no meta.argv0_path, no meta.cwd) re-runs the executable the links led to:
# its failure says why it may have failed and what to do; a recorded directory that is gone is
# said before anything runs
sqlite3 "$TMP/v.db" ".backup '$TMP/old.db'"
sqlite3 "$TMP/old.db" "DELETE FROM meta WHERE key IN ('argv0_path', 'cwd')"
sqlite3 "$TMP/v.db" ".backup '$TMP/gone.db'"
sqlite3 "$TMP/gone.db" "UPDATE meta SET value = '$TMP/work-gone' WHERE key = 'cwd'"
rows=(
  "an older recording|$TMP/old.db|does not say through which path its 'train_gpt2_sim' ran"
  "a recorded directory that is gone|$TMP/gone.db|the recorded working directory $TMP/work-gone (meta.cwd) is not there"
)
for row in "${rows[@]}"; do
  IFS='|' read -r name db want <<< "$row"
  rc=0
  (cd "$TMP/elsewhere" && "$GMA" tune --check "$db") > "$TMP/out.txt" 2>&1 || rc=$?
  if [[ $rc != 1 ]] || ! grepq -F -- "$want" < "$TMP/out.txt"; then
    bad "$name: exit $rc, or no '$want': $(grep -m1 -F failed "$TMP/out.txt" || tail -2 "$TMP/out.txt")"
  else
    ok "$name: tune --check says '$want'"
  fi
done

# 4. Told to stop while its re-run runs (kill PID of the command alone: a supervisor, Popen.terminate(),
#    or a process's SIGINT/SIGHUP): the re-run (gpumem record and its program) is told too and
#    is gone when the command is; its databases (/tmp/gpumem-check-PID.db and side files) are
#    removed; the command dies of the signal (128+N). The recorded program is now one that runs
#    (and records) until it is stopped.
printf '#!/bin/sh\nexec "%s" --model tiny -B 2 -T 32 --steps 1000000 --dry-run\n' "$(realpath "$TRAIN")" \
  > "$TMP/bin/train_gpt2_sim"
for cmd in tune frag advise; do
  for sig in TERM INT HUP; do
    # exec: the pid is gpumem's; env: a background job starts with SIGINT ignored
    # shellcheck disable=SC2086 # one word
    exec env --default-signal "$GM" $cmd --check "$TMP/f.db" > "$TMP/sig.txt" 2>&1 &
    pid=$!
    for _ in $(seq 600); do [[ -s /tmp/gpumem-check-$pid.db ]] && break; sleep 0.05; done
    rec=$(pgrep -P "$pid" | head -1); prog=${rec:+$(pgrep -P "$rec" | head -1)}
    if [[ ! -s /tmp/gpumem-check-$pid.db || -z $prog ]]; then
      kill -KILL "$pid" ${rec:+"$rec"} ${prog:+"$prog"} 2> /dev/null; wait "$pid" || true
      bad "$cmd --check, SIG$sig: the re-run never started recording: $(tail -2 "$TMP/sig.txt")"
      continue
    fi
    rc=0
    kill "-$sig" "$pid"; wait "$pid" || rc=$?
    left=$(ls /tmp/gpumem-check-"$pid".db* 2> /dev/null || true)
    if [[ $rc -ne $((128 + $(kill -l $sig))) ]]; then
      bad "$cmd --check ended by SIG$sig: exit $rc, expected $((128 + $(kill -l $sig)))"
    elif kill -0 "$prog" 2> /dev/null || kill -0 "$rec" 2> /dev/null; then
      kill -KILL "$prog" "$rec" 2> /dev/null; sleep 0.2; rm -f /tmp/gpumem-check-"$pid".db*
      bad "$cmd --check ended by SIG$sig: its re-run still runs, orphaned"
    elif [[ -n $left ]]; then
      rm -f /tmp/gpumem-check-"$pid".db*
      bad "$cmd --check ended by SIG$sig: left $left"
    else
      ok "$cmd --check ended by SIG$sig: the re-run ended too, its databases removed, exit $rc"
    fi
  done
done

# the PyTorch re-runs (tune's under PYTORCH_CUDA_ALLOC_CONF, advise's of the project's script)
torch_py=${GPUMEM_TORCH_PY:-/root/.cache/gpumem/torch-2.14.1}
[[ -d $torch_py ]] && torch_py=$torch_py/bin/python
if [[ -x $torch_py && -z ${SAN:-} ]]; then
  mkdir -p "$TMP/tp"
  cp tests/torch/train_gpt2.py "$TMP/tp/train_gpt2.py"
  # as a user of a virtual environment runs it: `python` found in PATH (the environment's
  # bin/python, a link to the system's python), the script's path relative to its directory
  venv_bin=$(dirname "$torch_py")
  (cd "$TMP/tp" && GPUMEM_SIM_BACKING=memory PATH=$venv_bin:$PATH "$GMA" record -q -o "$TMP/tp.db" -- python \
    train_gpt2.py --model tiny -B 2 -T 32 --steps 3 --seq-jitter) > "$TMP/tp.txt" 2>&1 \
    || fail "the PyTorch script under gpumem record: $(tail -3 "$TMP/tp.txt")"
  # re-run from elsewhere with a PATH without the environment: still the environment's python
  nov=$(tr ':' '\n' <<< "$PATH" | grep -vxF "$venv_bin" | paste -sd: -)
  rc=0
  (cd "$TMP/elsewhere" && GPUMEM_SIM_BACKING=memory PATH=$nov "$GMA" tune --check "$TMP/tp.db") > "$TMP/out.txt" 2>&1 || rc=$?
  if [[ $rc == 0 ]] && grepq -F "check: re-run under" < "$TMP/out.txt"; then
    ok "PyTorch in a virtual environment: tune --check re-runs its python from another directory"
  else
    bad "PyTorch in a virtual environment: tune --check: exit $rc: $(grep -m1 -F failed "$TMP/out.txt" || tail -2 "$TMP/out.txt")"
  fi
  printf 'import sys\nsys.stderr.write("%s\\n")\nsys.exit(3)\n' "$WHY" > "$TMP/tp/train_gpt2.py"
  for args in "tune --check" "advise --check"; do
    rc=0
    # shellcheck disable=SC2086
    GPUMEM_SIM_BACKING=memory "$GM" $args "$TMP/tp.db" > "$TMP/out.txt" 2>&1 || rc=$?
    if [[ $rc != 1 ]]; then
      bad "PyTorch $args: exit $rc, not 1"
    elif ! grep -F "$WHY" "$TMP/out.txt" | grepq -F "; to see all of its output, run: "; then
      bad "PyTorch $args: the re-run's reason is not quoted: $(grep -m1 -F failed "$TMP/out.txt" || true)"
    else
      ok "PyTorch $args: the reason quoted from the re-run's stderr"
    fi
  done
else
  echo "skipped: the PyTorch re-runs (no PyTorch at $torch_py, or under a sanitizer)"
fi

# 2. root under Open MPI: the re-run and the printed plan pass what Open MPI needs
if [[ $(id -u) == 0 && -n $have_mpirun ]] && mpirun --version 2>/dev/null | grepq "Open MPI"; then
  "$GM" record -q -o "$TMP/t.db" -- "$TRAIN" --model tiny -B 2 -T 32 --steps 2 --dry-run > /dev/null 2>&1 \
    || fail "recording the tiny trainer"
  rc=0
  env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM "$GM" advise "$TMP/t.db" --ranks 2 --zero 1 --check \
    > "$TMP/root.txt" 2>&1 || rc=$?
  if [[ $rc == 0 ]] && grepq -E '^  zero 1: measured' < "$TMP/root.txt"; then
    ok "as root under Open MPI: the re-run starts without OMPI_ALLOW_RUN_AS_ROOT"
  else
    bad "as root, advise --ranks --check: exit $rc: $(grep -m1 -F 'zero 1:' "$TMP/root.txt" || true)"
  fi
  if "$GM" advise "$TMP/t.db" --ranks 2 --budget 1T --json \
    | jq -e '.budget.plan.mpirun | startswith("mpirun --allow-run-as-root -np 2 ")' > /dev/null; then
    ok "as root under Open MPI: the --budget plan's mpirun line has --allow-run-as-root"
  else
    bad "as root, the plan's mpirun line lacks --allow-run-as-root"
  fi
else
  echo "skipped: root under Open MPI (not root, or no Open MPI mpirun)"
fi
(( nbad == 0 )) || fail "$nbad of the checks above failed"
