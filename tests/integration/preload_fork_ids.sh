#!/usr/bin/env bash
# Property: a forked child's recording is named by its own ids. The recorder's string, thread
# and range ids start again in a child that records (its own database), so nothing cached in
# the parent under them, nor state kept for the parent's recording, may reach the child's.
# One row per cache or state a child inherits, each checked in the child's database by name
# (fork_ids_app, tests/apps/fork_ids_app.c):
#   kernel names          uses.c's per-function name ids (fn_info_build)
#   copy / memset names   uses.c's op_name ids
#   range names           the recorder's per-thread string cache (intern: "shared" is one
#                         address pushed in both processes) and NVTX's names
#   threads               the recorder's per-thread registration (events.thread)
#   ranges of events      the recorder's per-thread range stack
#   after init            a child forked after gpumem started in the parent records nothing
#                         (gpumem is off there): why uses.c's and python.c's ids, filled only
#                         once gpumem started, never reach a child's recording
#   after: trace calls    in that child, the calls PyTorch's trace hook and _torch.py make
#                         (gpumem_torch_trace_entry, _seq, _time: rec_last_seq, rec_time_ns)
#                         answer 0 and open nothing: no database file, no descriptor on one,
#                         the parent's the only database
#   torch trace           torch_trace.c's entries (the parent's seqs and string ids) and its
#                         spin lock: a child starts with none, and never inherits the lock held
#   torch hooks           nvtx.c's kept ids of PyTorch module paths (where PyTorch is, no
#                         sanitizer: an uninstrumented Python cannot load an instrumented library)
# Not rows: the unknown kernel's name (no launch reaches it on the virtual GPU: cuFuncGetName
# answers every function that launches); Python frame names (python.c, python_nogil.c: filled
# once gpumem started, so only in parents whose children are off; their fork handlers reset
# them).
source tests/integration/preload_common.bash
need "$LIB" "$APPS/fork_ids_app"
command -v sqlite3 >/dev/null || { echo "preload_fork_ids.sh: sqlite3 not found" >&2; exit 77; }
q() { sqlite3 -batch -noheader "$1" "$2"; }
# Under TSan: as preload_fork.sh (gpumem holds its locks across fork(), more than TSan's
# deadlock detector tracks).
[[ ${SAN:-} == thread ]] && export TSAN_OPTIONS=${TSAN_OPTIONS:+$TSAN_OPTIONS:}detect_deadlocks=0

LAUNCH_NAMES="SELECT group_concat(s, ',') FROM (SELECT s.s FROM launches l JOIN strings s ON s.id = l.kernel ORDER BY l.seq)"
RANGE_NAMES="SELECT group_concat(coalesce(s, '?'), ',') FROM (SELECT s.s FROM ranges r LEFT JOIN strings s ON s.id = r.name ORDER BY r.id)"

# ---- a child of a parent that recorded ranges but never touched CUDA: it records too ----
GPUMEM_DB=$TMP/before.db LD_PRELOAD=$LIB "$APPS/fork_ids_app" before >"$TMP/before.out" 2>"$TMP/before.err"
check_eq "before: exit status" "$?" 0
child=$(sed -n 's/^CHILD //p' "$TMP/before.out")
cdb=$TMP/before-$child.db
if [[ -z $child || ! -f $cdb ]]; then
  fail "before: the child's database ($cdb) was not written"; cat "$TMP/before.out" "$TMP/before.err" | head -20
else
  check_eq "before: kernel and copy/memset names in the child" "$(q "$cdb" "$LAUNCH_NAMES")" \
    "k_parent,k_child,memcpy HtoD,memset"
  check_eq "before: range names in the child" "$(q "$cdb" "$RANGE_NAMES")" "c_only,shared"
  check_eq "before: range names in the parent" "$(q "$TMP/before.db" "$RANGE_NAMES")" \
    "p_thread,p_only_1,p_only_2,shared"
  check_eq "before: the child's events' threads, each its own (tid = the child's pid)" \
    "$(q "$cdb" "SELECT group_concat(DISTINCT coalesce(t.tid, 'none')) FROM events e LEFT JOIN threads t ON t.id = e.thread")" \
    "$child"
  check_eq "before: the child's launches in its ranges" \
    "$(q "$cdb" "SELECT group_concat(DISTINCT coalesce(r.path, 'none')) FROM events e JOIN launches l ON l.seq = e.seq LEFT JOIN ranges r ON r.id = e.range")" \
    "c_only/shared"
fi

# ---- a child forked after the parent launched: gpumem is off in it, nothing recorded ----
GPUMEM_DB=$TMP/after.db LD_PRELOAD=$LIB "$APPS/fork_ids_app" after >"$TMP/after.out" 2>"$TMP/after.err"
check_eq "after: exit status" "$?" 0
child=$(sed -n 's/^CHILD //p' "$TMP/after.out")
[[ -n $child && ! -e $TMP/after-$child.db ]] && pass "after: the child wrote no database" ||
  fail "after: the child (${child:-?}) wrote a database, or did not run"
check_eq "after: kernel and copy/memset names in the parent" "$(q "$TMP/after.db" "$LAUNCH_NAMES")" \
  "k_parent,memcpy HtoD,memset"
# the child's trace calls (rec_last_seq, rec_time_ns): no lazy open where gpumem is off
check_eq "after: the child's trace seq, clock and descriptors on a database" \
  "$(sed -n 's/^CHILD_TRACE //p' "$TMP/after.out")" "0 0 0"
check_eq "after: databases written (the parent's only)" \
  "$(find "$TMP" -maxdepth 1 -name 'after*.db' | wc -l | tr -d ' ')" 1

# ---- PyTorch's trace entries: the child has none, and its lock is free ----
GPUMEM_DB=$TMP/trace.db LD_PRELOAD=$LIB timeout 120 "$APPS/fork_ids_app" trace >"$TMP/trace.out" 2>"$TMP/trace.err"
check_eq "trace: exit status" "$?" 0
check_eq "trace: children, hung on the lock, holding the parent's entries" \
  "$(sed -n 's/^trace: //p' "$TMP/trace.out")" "forks 40 hung 0 inherited 0"

# ---- the torch hooks' module paths (nvtx.c's kept ids), pushed in a parent that never touched
# CUDA, then in its child (tests/integration/py/fork_hooks.py; PyTorch's CUDA build, no sanitizer)
torch_py=${GPUMEM_TORCH_PY:-/root/.cache/gpumem/torch-2.14.1}
[[ -d $torch_py ]] && torch_py=$torch_py/bin/python
if [[ -x $torch_py && -z ${SAN:-} && -x $BUILD/gpumem ]]; then
  GPUMEM_SIM_BACKING=memory "$BUILD/gpumem" record -q -o "$TMP/hooks.db" -- "$torch_py" \
    tests/integration/py/fork_hooks.py >"$TMP/hooks.out" 2>"$TMP/hooks.log"
  check_eq "torch hooks: exit status" "$?" 0
  child=$(sed -n 's/^CHILD //p' "$TMP/hooks.out")
  if [[ -z $child || ! -f $TMP/hooks-$child.db ]]; then
    fail "torch hooks: the child's database was not written"; tail -5 "$TMP/hooks.out" "$TMP/hooks.log"
  else
    check_eq "torch hooks: module path names in the child" "$(q "$TMP/hooks-$child.db" "$RANGE_NAMES")" \
      "fwd,Net,lin_a,Net,lin_b,Net"
  fi
else
  echo "skipped row: torch hooks (needs PyTorch at $torch_py and no sanitizer)"
fi

grep -q "ERROR: \(Address\|Thread\)Sanitizer" "$TMP"/*.err && { fail "sanitizer report"; head -40 "$TMP"/*.err; }
finish
