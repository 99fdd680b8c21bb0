#!/usr/bin/env bash
# Python frames in recorded stacks (preload/python.c, schema 1.3 frames.python): a Python
# program (standard library ctypes only) calls cudaMalloc/cudaFree of the virtual GPU's runtime
# from nested functions in two files (tests/integration/py/frames_main.py and layers.py).
#  - report's by-call-site rows name those functions with file and line, innermost user frame
#    and its caller; leaks finds the planted leaks at their Python lines;
#  - the standard library's frames are skipped (copy.deepcopy -> __deepcopy__), --frames all
#    shows the recorded native frames instead;
#  - the stacks table has the Python frames after the native ones, innermost first;
#  - a thread that released the GIL (ctypes.CDLL) gets native frames only, GPUMEM_PYTHON=0
#    turns Python frames off, a bad GPUMEM_PYTHON is named on stderr;
#  - every other CPython 3.9-3.13 found (pyenv) gives the same rows; 3.8 says, once, that it
#    is not supported.
# Interpreter: Debian's /usr/bin/python3 (GPUMEM_TEST_PYTHON to choose another).
source tests/integration/snapshot_common.bash
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
grep " at " "$TMP/all.txt" | grep -q "\.py:" && { cat "$TMP/all.txt"; fail "--frames all still chose a Python frame as the site"; }
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

# ---- the GIL released around the call (ctypes.CDLL): native frames only, and no harm
record "$TMP/nogil.db" "$PY" nogil
[[ $(q "$TMP/nogil.db" "SELECT count(*) FROM frames WHERE python = 1") -eq 0 ]] || fail "Python frames read without the GIL"
"$GPUMEM" leaks "$TMP/nogil.db" > "$TMP/nogil.txt" && has "$TMP/nogil.txt" "LEAK SUMMARY: 4194304 bytes" "leaks (nogil)"

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
[[ $(q "$TMP/thr.db" "SELECT count(*) FROM stack_frames WHERE python = 1 AND function IN ('worker_nogil', 'churn_1')") -eq 0 ]] \
  || fail "threads_alloc.py: Python frames recorded for a thread without the GIL"
[[ $(q "$TMP/thr.db" "SELECT count(*) FROM events WHERE kind = 1") -eq 8000 ]] || fail "threads_alloc.py: not 8000 allocations"

# ---- GPUMEM_PYTHON
record "$TMP/off.db" "$PY" gil GPUMEM_PYTHON=0
[[ $(q "$TMP/off.db" "SELECT count(*) FROM frames WHERE python = 1") -eq 0 ]] || fail "GPUMEM_PYTHON=0 still recorded Python frames"
[[ -s $TMP/off.db.err ]] && { cat "$TMP/off.db.err"; fail "GPUMEM_PYTHON=0 printed something"; }
record "$TMP/badenv.db" "$PY" gil GPUMEM_PYTHON=yes
has "$TMP/badenv.db.err" "GPUMEM_PYTHON=yes: use 0 (no Python frames) or 1 (the default); taking 1" "bad GPUMEM_PYTHON"
[[ $(q "$TMP/badenv.db" "SELECT count(*) FROM frames WHERE python = 1") -gt 0 ]] || fail "GPUMEM_PYTHON=yes turned Python frames off"

# ---- other interpreters on this machine (pyenv): 3.9-3.13 the same rows; 3.8 one line, off
for py in "${HOME:-/root}"/.pyenv/versions/3.*/bin/python3; do
  [[ -x $py ]] || continue
  v=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || continue
  case $v in
    3.9|3.10|3.11|3.12|3.13)
      record "$TMP/v$v.db" "$py" gil
      "$GPUMEM" leaks "$TMP/v$v.db" > "$TMP/v$v.txt" || fail "leaks failed ($py)"
      has "$TMP/v$v.txt" "at layers.py:$LK in leak_cache < frames_main.py:$SL in step" "Python $v"
      has "$TMP/v$v.txt" "at layers.py:$DC in __deepcopy__ < frames_main.py:$MD in main" "Python $v"
      [[ -s $TMP/v$v.db.err ]] && { cat "$TMP/v$v.db.err"; fail "Python $v: something on stderr"; }
      echo "python_frames: CPython $v ok" ;;
    3.8)
      record "$TMP/v38.db" "$py" gil
      [[ $(grep -c "Python 3.8.* is not supported for Python frames" "$TMP/v38.db.err") -eq 1 ]] \
        || { cat "$TMP/v38.db.err"; fail "Python 3.8: not exactly one line saying it is unsupported"; }
      [[ $(q "$TMP/v38.db" "SELECT count(*) FROM frames WHERE python = 1") -eq 0 ]] || fail "Python 3.8 frames recorded"
      echo "python_frames: CPython 3.8 refused with one line" ;;
  esac
done
echo "python_frames: ok"
