#!/usr/bin/env bash
# Python frames in recorded stacks (preload/python.c, schema 1.3 frames.python): a Python
# program (standard library ctypes only) calls cudaMalloc/cudaFree of the virtual GPU's runtime
# from nested functions in two files (tests/integration/py/frames_main.py and layers.py).
#  - report's by-call-site rows name those functions with file and line, innermost user frame
#    and its caller; leaks finds the planted leaks at their Python lines;
#  - the standard library's frames are skipped (copy.deepcopy -> __deepcopy__), --frames all
#    shows the recorded native frames instead;
#  - the stacks table has the Python frames after the native ones, innermost first;
#  - a thread that released the GIL around the call (ctypes.CDLL; preload/python_nogil.c reads
#    its frames without the GIL) gets the same Python rows and frames as one that kept it
#    (ctypes.PyDLL), native frames kept in front; threads with and without the GIL at once;
#  - GPUMEM_PYTHON=0 turns Python frames off, a bad GPUMEM_PYTHON is named on stderr;
#  - every other CPython 3.9-3.13 found (pyenv) gives the same rows, with and without the GIL
#    (and nothing on stderr: the GIL-less reading agreed with the C API); 3.8 says, once, that
#    it is not supported.
# Interpreter: Debian's /usr/bin/python3 (GPUMEM_TEST_PYTHON to choose another).
source tests/integration/snapshot_common.bash
# Under ASan the interpreter is not instrumented and its exit leaves CPython's own allocations;
# LeakSanitizer's stop-the-world tracer once crashed in such a process at exit ("Tracer caught
# signal 11", a clean-clone CI run). libgpumem.so's leaks are the C tests' to find, as in
# python_torch.sh.
[[ ${SAN:-} == address ]] && export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
need "$GPUMEM"
PY=${GPUMEM_TEST_PYTHON:-/usr/bin/python3}
[[ -x $PY ]] || { echo "skipped: no $PY (set GPUMEM_TEST_PYTHON to a CPython 3.9-3.13)" >&2; exit 77; }
[[ -f $BUILD/libgpumem.so && -f $BUILD/sim/libcudart.so.13 ]] || fail "libgpumem.so or the virtual GPU is not built"
SRC=$PWD/tests/integration/py
RT=$(cd "$BUILD/sim" && pwd)/libcudart.so.13
# the line of the statement marked "# SITE:name" in a file
line() { grep -n "# SITE:$2\$" "$SRC/$1" | cut -d: -f1; }
AW=$(line layers.py alloc_weights); AA=$(line layers.py alloc_activations)
LK=$(line layers.py leak_cache); DC=$(line layers.py deepcopy)
BM=$(line frames_main.py build_model); FW=$(line frames_main.py forward)
SL=$(line frames_main.py step_leak); MD=$(line frames_main.py main_deepcopy)
MS=$(line frames_main.py main_step)
for v in AW AA LK DC BM FW SL MD MS; do [[ -n ${!v} ]] || fail "marker for $v not found in $SRC"; done

record() { # record DB PYTHON MODE [env...]
  local db=$1 py=$2 mode=$3; shift 3
  env "$@" "$GPUMEM" record -q -o "$db" -- "$py" "$SRC/frames_main.py" "$RT" "$mode" \
    > "$db.out" 2> "$db.err" || { cat "$db.out" "$db.err"; fail "record of frames_main.py ($py $mode) failed"; }
  grep -q "frames_main: done" "$db.out" || fail "frames_main.py did not finish ($py $mode)"
}
q() { "$GPUMEM" sql "$1" -c "$2" | tail -n +2; }
has() { grep -qF -- "$2" "$1" || { cat "$1"; fail "$3: no line with '$2'"; }; }

# ---- the user's code, by call site
db=$TMP/py.db
record "$db" "$PY" gil
"$GPUMEM" report "$db" > "$TMP/report.txt" || fail "report failed"
has "$TMP/report.txt" "layers.py:$AW in alloc_weights < frames_main.py:$BM in build_model" "report by call site"
has "$TMP/report.txt" "layers.py:$AA in alloc_activations < frames_main.py:$FW in forward" "report by call site"
has "$TMP/report.txt" "layers.py:$LK in leak_cache < frames_main.py:$SL in step" "report by call site"
"$GPUMEM" leaks "$db" > "$TMP/leaks.txt" || fail "leaks failed"
has "$TMP/leaks.txt" "3.00 MiB in 3 allocations at layers.py:$LK in leak_cache < frames_main.py:$SL in step" "leaks"
has "$TMP/leaks.txt" "called from frames_main.py:$MS in main" "leaks: the caller's caller"
# copy.deepcopy's own frames (Python's library) are skipped: the caller is the user's line
has "$TMP/leaks.txt" "1.00 MiB in 1 allocation at layers.py:$DC in __deepcopy__ < frames_main.py:$MD in main" "leaks (stdlib skipped)"
grep -q "copy.py" "$TMP/leaks.txt" && fail "leaks shows a frame of the standard library's copy.py by default"
has "$TMP/leaks.txt" "LEAK SUMMARY: 4194304 bytes leaked in 4 allocations" "leaks"
"$GPUMEM" leaks --json "$db" > "$TMP/leaks.json" || fail "leaks --json failed"
jq -e --arg f "$SRC/layers.py" '[.leaks[].stack[] | select(.python and .function == "leak_cache" and .file == $f)] | length == 1' \
  "$TMP/leaks.json" > /dev/null || fail "leaks --json: no Python frame leak_cache in layers.py in the stacks"

# ---- --frames all: every recorded frame; the site is then native (ctypes' libffi)
"$GPUMEM" leaks --frames all "$db" > "$TMP/all.txt" || fail "leaks --frames all failed"
grep " at " "$TMP/all.txt" | grepq "\.py:" && { cat "$TMP/all.txt"; fail "--frames all still chose a Python frame as the site"; }
"$GPUMEM" report --frames bogus "$db" > /dev/null 2> "$TMP/bad.err"; rc=$?
[[ $rc -eq 2 ]] && grep -q "frames takes user or all, got 'bogus'" "$TMP/bad.err" || fail "--frames bogus: exit $rc, $(cat "$TMP/bad.err")"

# ---- storage: schema 1.3, Python frames after the native ones, innermost first
[[ $(q "$db" "SELECT value FROM meta WHERE key='schema_minor'") -ge 3 ]] || fail "not a schema 1.3 file"
n=$(q "$db" "SELECT count(*) FROM frames WHERE python = 1 AND module IS NULL AND symbolized = 1")
[[ $n -ge 8 ]] || fail "only $n Python frames in frames"
s=$(q "$db" "SELECT stack FROM stack_frames WHERE function = 'leak_cache' AND python = 1 LIMIT 1")
[[ -n $s ]] || fail "no stack holds leak_cache"
got=$(q "$db" "SELECT group_concat(function, ' ') FROM (SELECT function FROM stack_frames WHERE stack = $s AND python = 1 ORDER BY depth)")
[[ $got == "leak_cache step main <module>" ]] || fail "Python frames of the leak's stack: '$got'"
bad=$(q "$db" "SELECT count(*) FROM stack_frames a JOIN stack_frames b ON a.stack = b.stack AND b.depth > a.depth WHERE a.python = 1 AND b.python IS NULL")
[[ $bad -eq 0 ]] || fail "$bad native frames lie outside Python frames in a stack"
# the interpreter's own native frames are left out where Python frames stand for them
interp=$(q "$db" "SELECT count(*) FROM stack_frames WHERE stack = $s AND module LIKE '%/python3%' AND module NOT LIKE '%lib-dynload%'")
[[ $interp -eq 0 ]] || fail "$interp frames of the interpreter itself kept beside the Python frames"

# ---- the GIL released around the call (ctypes.CDLL): the same Python rows, read without it
ndb=$TMP/nogil.db
record "$ndb" "$PY" nogil
"$GPUMEM" report "$ndb" > "$TMP/nogil_report.txt" || fail "report (nogil) failed"
has "$TMP/nogil_report.txt" "layers.py:$AW in alloc_weights < frames_main.py:$BM in build_model" "report by call site (nogil)"
has "$TMP/nogil_report.txt" "layers.py:$AA in alloc_activations < frames_main.py:$FW in forward" "report by call site (nogil)"
has "$TMP/nogil_report.txt" "layers.py:$LK in leak_cache < frames_main.py:$SL in step" "report by call site (nogil)"
"$GPUMEM" leaks "$ndb" > "$TMP/nogil.txt" || fail "leaks (nogil) failed"
has "$TMP/nogil.txt" "3.00 MiB in 3 allocations at layers.py:$LK in leak_cache < frames_main.py:$SL in step" "leaks (nogil)"
has "$TMP/nogil.txt" "1.00 MiB in 1 allocation at layers.py:$DC in __deepcopy__ < frames_main.py:$MD in main" "leaks (nogil)"
has "$TMP/nogil.txt" "LEAK SUMMARY: 4194304 bytes leaked in 4 allocations" "leaks (nogil)"
# every allocation's Python frames (function, file, line, innermost first) as with the GIL
pyframes() { q "$1" "SELECT group_concat(function || '@' || file || ':' || line, ' ') FROM (SELECT e.seq, f.function, f.file, f.line FROM events e JOIN stack_frames f ON f.stack = e.stack AND f.python = 1 WHERE e.kind = 1 ORDER BY e.seq, f.depth) GROUP BY seq ORDER BY seq"; }
pyframes "$db" > "$TMP/gil.frames"; pyframes "$ndb" > "$TMP/nogil.frames"
[[ $(wc -l < "$TMP/gil.frames") -eq 19 ]] || { cat "$TMP/gil.frames"; fail "not 19 allocations with Python frames (GIL held)"; }
# the helper reached from three callers in turn: each allocation names its own caller, both ways
for v in via_a via_b via_c; do
  [[ $(grep -c "alloc_activations@[^ ]*layers.py:$AA $v@[^ ]*frames_main.py:$(line frames_main.py $v) " "$TMP/nogil.frames") -eq 2 ]] \
    || { cat "$TMP/nogil.frames"; fail "nogil: not 2 allocations of alloc_activations called from $v"; }
done
cmp -s "$TMP/gil.frames" "$TMP/nogil.frames" || { diff "$TMP/gil.frames" "$TMP/nogil.frames"; fail "Python frames without the GIL differ from those read with it"; }
s=$(q "$ndb" "SELECT stack FROM stack_frames WHERE function = 'leak_cache' AND python = 1 LIMIT 1")
[[ $(q "$ndb" "SELECT count(*) FROM stack_frames WHERE stack = $s AND python IS NULL") -gt 0 ]] \
  || fail "nogil: the native frames in front of the Python ones are gone"
[[ -s $ndb.err ]] && { cat "$ndb.err"; fail "nogil: something on stderr"; }
# the reader checked first (checked: gpumem_python_check, as gpumem's PyTorch support calls it):
# a chain read again is compared with the kept one as it is read (python_nogil.c, memo_again),
# not collected, hashed and looked up anew; the same frames, the three callers' included, and
# GPUMEM_STATS says how many stacks were answered so (before memo_again: no such key)
record "$TMP/checked.db" "$PY" checked GPUMEM_STATS=1
pyframes "$TMP/checked.db" > "$TMP/checked.frames"
cmp -s "$TMP/gil.frames" "$TMP/checked.frames" || { diff "$TMP/gil.frames" "$TMP/checked.frames"; fail "Python frames of chains read again differ from those read with the GIL"; }
again=$(awk '$1 == "gpumem-stats" && $3 == "python_chains_again" { print $4 }' "$TMP/checked.db.err")
[[ ${again:-0} -ge 22 ]] || { grep gpumem-stats "$TMP/checked.db.err"; fail "python_chains_again: '$again', want 22 or more (22 with CPython 3.11)"; }

# ---- the collector at every chance, finalizers freeing device memory, frames walked meanwhile
# (a stress check: a hang or crash here is a re-entry bug; py/gc_reentry.py says why)
timeout 120 "$GPUMEM" record -q -o "$TMP/gc.db" -- "$PY" "$SRC/gc_reentry.py" "$RT" > "$TMP/gc.out" 2>&1; rc=$?
[[ $rc -eq 0 ]] && grep -q "gc_reentry: done, 300 finalizers" "$TMP/gc.out" || { cat "$TMP/gc.out"; fail "gc_reentry.py: exit $rc"; }
[[ $(q "$TMP/gc.db" "SELECT count(*) FROM stack_frames WHERE function = 'layer' AND python = 1") -gt 0 ]] \
  || fail "gc_reentry.py: no Python frames recorded"

# ---- threads: with and without the GIL at once; each stack has its own thread's function only
timeout 120 "$GPUMEM" record -q -o "$TMP/thr.db" -- "$PY" "$SRC/threads_alloc.py" "$RT" > "$TMP/thr.out" 2>&1; rc=$?
[[ $rc -eq 0 ]] && grep -q "threads_alloc: done" "$TMP/thr.out" || { cat "$TMP/thr.out"; fail "threads_alloc.py: exit $rc"; }
[[ $(q "$TMP/thr.db" "SELECT count(DISTINCT thread) FROM events WHERE stack IN (SELECT stack FROM stack_frames WHERE function = 'worker_gil' AND python = 1)") -eq 2 ]] \
  || fail "threads_alloc.py: the two GIL-holding threads do not both have worker_gil frames"
[[ $(q "$TMP/thr.db" "SELECT count(DISTINCT thread) FROM events WHERE stack IN (SELECT stack FROM stack_frames WHERE function = 'worker_nogil' AND python = 1)") -eq 2 ]] \
  || fail "threads_alloc.py: the two threads without the GIL do not both have worker_nogil frames"
[[ $(q "$TMP/thr.db" "SELECT count(*) FROM stack_frames a JOIN stack_frames b ON a.stack = b.stack WHERE a.python = 1 AND b.python = 1 AND a.function = 'worker_gil' AND b.function IN ('worker_nogil', 'churn_1')") -eq 0 ]] \
  || fail "threads_alloc.py: a stack mixes two threads' functions"
[[ $(q "$TMP/thr.db" "SELECT count(*) FROM events WHERE kind = 1 AND stack NOT IN (SELECT stack FROM stack_frames WHERE python = 1 AND function IN ('worker_gil', 'worker_nogil'))") -eq 0 ]] \
  || fail "threads_alloc.py: an allocation without its worker's Python frame"
[[ $(q "$TMP/thr.db" "SELECT count(*) FROM events WHERE kind = 1") -eq 8000 ]] || fail "threads_alloc.py: not 8000 allocations"

# ---- a frame layout that is not the interpreter's (GPUMEM_DEBUG_PY_SKEW: every offset moved,
# as a patch release could): no crash, caught at the first stack read with the GIL held (one
# line), and no frames read the GIL-less way after that
for skew in 8 -8 4; do
  record "$TMP/skew$skew.db" "$PY" gil GPUMEM_DEBUG_PY_SKEW=$skew
  [[ $(grep -c "frames are not laid out as gpumem expects; threads that released the GIL get native frames only" "$TMP/skew$skew.db.err") -eq 1 ]] \
    || { cat "$TMP/skew$skew.db.err"; fail "skewed layout ($skew): not caught with exactly one line"; }
  "$GPUMEM" leaks "$TMP/skew$skew.db" > "$TMP/skew$skew.txt" && has "$TMP/skew$skew.txt" "at layers.py:$LK in leak_cache < frames_main.py:$SL in step" "skewed layout, GIL held ($skew)"
  # without the GIL nothing checks first: the reads of wrong fields must fail safely
  record "$TMP/skewn$skew.db" "$PY" nogil GPUMEM_DEBUG_PY_SKEW=$skew
  "$GPUMEM" leaks "$TMP/skewn$skew.db" > "$TMP/skewn$skew.txt" && has "$TMP/skewn$skew.txt" "LEAK SUMMARY: 4194304 bytes leaked in 4 allocations" "skewed layout, GIL released ($skew)"
  [[ $(q "$TMP/skewn$skew.db" "SELECT count(*) FROM frames WHERE python = 1") -eq 0 ]] \
    || fail "skewed layout ($skew), GIL released: frames read from the wrong fields were kept"
done

# ---- code objects freed and created again at the same addresses (exec in a loop): every
# allocation carries its own function (the caches check what identifies a code object)
for mode in gil nogil; do
  "$GPUMEM" record -q -o "$TMP/churn-$mode.db" -- "$PY" "$SRC/exec_churn.py" "$RT" $mode > "$TMP/churn.out" 2>&1 \
    && grep -q "exec_churn: done" "$TMP/churn.out" || { cat "$TMP/churn.out"; fail "exec_churn.py ($mode) failed"; }
  inner="SELECT e.requested AS req, (SELECT function FROM stack_frames f WHERE f.stack = e.stack AND f.python = 1 ORDER BY depth LIMIT 1) AS fn FROM events e WHERE e.kind = 1"
  [[ $(q "$TMP/churn-$mode.db" "SELECT count(*) FROM ($inner) WHERE fn = 'churn_' || (req - 4096)") -eq 200 ]] \
    || { q "$TMP/churn-$mode.db" "SELECT * FROM ($inner) WHERE fn IS NOT 'churn_' || (req - 4096) LIMIT 5"; fail "exec_churn.py ($mode): an allocation with another function's name"; }
done

# ---- GPUMEM_PYTHON
record "$TMP/off.db" "$PY" gil GPUMEM_PYTHON=0
[[ $(q "$TMP/off.db" "SELECT count(*) FROM frames WHERE python = 1") -eq 0 ]] || fail "GPUMEM_PYTHON=0 still recorded Python frames"
[[ -s $TMP/off.db.err ]] && { cat "$TMP/off.db.err"; fail "GPUMEM_PYTHON=0 printed something"; }
# a value it cannot read: refused by gpumem record before the program runs, as every setting
# (cli_small_wrongs.sh; preloaded by hand, gpumem is off and the program runs)
GPUMEM_PYTHON=yes "$GPUMEM" record -o "$TMP/badenv.db" -- "$PY" "$SRC/frames_main.py" "$RT" gil \
  > "$TMP/badenv.out" 2> "$TMP/badenv.err"; rc=$?
[[ $rc -eq 2 ]] || { cat "$TMP/badenv.err"; fail "GPUMEM_PYTHON=yes: exit $rc, want 2"; }
has "$TMP/badenv.err" "GPUMEM_PYTHON: unknown value 'yes' (accepted: 0, 1); fix or unset it" "bad GPUMEM_PYTHON"
[[ ! -e $TMP/badenv.db ]] || fail "GPUMEM_PYTHON=yes still recorded"

# ---- other interpreters on this machine (pyenv): 3.9-3.13 the same rows; 3.8 one line, off
for py in "${HOME:-/root}"/.pyenv/versions/3.*/bin/python3; do
  [[ -x $py ]] || continue
  v=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || continue
  case $v in
    3.9|3.10|3.11|3.12|3.13)
      for mode in gil nogil; do
        vdb=$TMP/v$v-$mode.db
        record "$vdb" "$py" $mode
        "$GPUMEM" leaks "$vdb" > "$vdb.txt" || fail "leaks failed ($py $mode)"
        has "$vdb.txt" "at layers.py:$LK in leak_cache < frames_main.py:$SL in step" "Python $v $mode"
        has "$vdb.txt" "at layers.py:$DC in __deepcopy__ < frames_main.py:$MD in main" "Python $v $mode"
        [[ -s $vdb.err ]] && { cat "$vdb.err"; fail "Python $v $mode: something on stderr"; }
        pyframes "$vdb" > "$vdb.frames"
      done
      cmp -s "$TMP/v$v-gil.db.frames" "$TMP/v$v-nogil.db.frames" \
        || { diff "$TMP/v$v-gil.db.frames" "$TMP/v$v-nogil.db.frames"; fail "Python $v: frames without the GIL differ"; }
      echo "python_frames: CPython $v ok (with and without the GIL)" ;;
    3.8)
      record "$TMP/v38.db" "$py" gil
      [[ $(grep -c "Python 3.8.* is not supported for Python frames" "$TMP/v38.db.err") -eq 1 ]] \
        || { cat "$TMP/v38.db.err"; fail "Python 3.8: not exactly one line saying it is unsupported"; }
      [[ $(q "$TMP/v38.db" "SELECT count(*) FROM frames WHERE python = 1") -eq 0 ]] || fail "Python 3.8 frames recorded"
      echo "python_frames: CPython 3.8 refused with one line" ;;
  esac
done
# issue 21's GPU acceptance (tests/gpu/pytorch_frames.{sh,py}, run by tests/gpu/run.sh) cannot run
# here: it must at least parse
bash -n tests/gpu/pytorch_frames.sh || fail "tests/gpu/pytorch_frames.sh does not parse"
"$PY" -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" tests/gpu/pytorch_frames.py \
  || fail "tests/gpu/pytorch_frames.py does not parse"
echo "python_frames: ok"
