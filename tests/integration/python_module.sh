#!/usr/bin/env bash
# The gpumem Python module (preload/python/gpumem), without torch:
#  - gpumem.range (context manager and decorator) pushes ranges through libgpumem.so's
#    gpumem_range_push/pop: allocations inside get them as their phase, nested;
#  - gpumem.name names a device pointer;
#  - without libgpumem.so every call is a no-op and the module warns exactly once;
#  - make install-python puts it in PREFIX/share/gpumem/python.
source tests/integration/snapshot_common.bash
need "$GPUMEM"
PY=${GPUMEM_TEST_PYTHON:-/usr/bin/python3}
[[ -x $PY ]] || { echo "skipped: no $PY (set GPUMEM_TEST_PYTHON)" >&2; exit 77; }
SRC=$PWD/tests/integration/py
RT=$(cd "$BUILD/sim" && pwd)/libcudart.so.13
export PYTHONPATH=$PWD/preload/python
q() { "$GPUMEM" sql "$1" -c "$2" | tail -n +2; }

db=$TMP/m.db
"$GPUMEM" record -q -o "$db" -- "$PY" "$SRC/module_ranges.py" "$RT" loaded > "$TMP/m.out" 2> "$TMP/m.err" \
  || { cat "$TMP/m.out" "$TMP/m.err"; fail "module_ranges.py under gpumem failed"; }
grep -q "module_ranges: done" "$TMP/m.out" || fail "module_ranges.py did not finish"
grep -q "not loaded" "$TMP/m.err" && fail "the module warned although libgpumem.so was loaded"
got=$(q "$db" "SELECT group_concat(coalesce(phase, '-') || ':' || size || ':' || coalesce(name, '-'), ' ') FROM (SELECT * FROM allocations ORDER BY id)")
[[ $got == "step 1/fwd:2097152:activations step 1/loader:1048576:- -:3145728:-" ]] || fail "allocations by phase and name: '$got'"
[[ $(q "$db" "SELECT count(*) FROM ranges WHERE end_ns IS NULL") -eq 0 ]] || fail "a range was left open"
"$GPUMEM" report "$db" > "$TMP/r.txt" || fail "report failed"
grep -q "step \*/fwd" "$TMP/r.txt" || { cat "$TMP/r.txt"; fail "the report's phase table lacks step */fwd"; }

# "by op": op ranges named as PyTorch's emit_nvtx() names them, innermost op wins, ", seq = N"
# and sizes cut; absent when no op range holds a live allocation (the run above)
grep -q "by op" "$TMP/r.txt" && fail "a by-op table without op ranges"
"$GPUMEM" record -q -o "$TMP/ops.db" -- "$PY" "$SRC/ops_ranges.py" "$RT" > "$TMP/ops.out" 2>&1 \
  || { cat "$TMP/ops.out"; fail "ops_ranges.py failed"; }
"$GPUMEM" report "$TMP/ops.db" > "$TMP/ops.txt" || fail "report on ops_ranges failed"
sed -n '/^  by op/,/^  [^ ]/p' "$TMP/ops.txt" | grep "x  " > "$TMP/byop.txt"
want="192.00 KiB 53.3% 3x aten::addmm|96.00 KiB 26.7% 3x AddmmBackward0|48.00 KiB 13.3% 3x aten::linear|24.00 KiB 6.7% 3x (no op)"
got=$(awk '{ $1 = $1; print }' "$TMP/byop.txt" | paste -sd'|')
[[ $got == "$want" ]] || { cat "$TMP/ops.txt"; fail "by op: '$got', expected '$want'"; }
"$GPUMEM" report --json "$TMP/ops.db" | jq -e '.peak.by_op[0] | .op == "aten::addmm" and .bytes == 196608 and .count == 3' > /dev/null \
  || fail "report --json .peak.by_op[0] is not aten::addmm 196608 bytes in 3"
# the phase table groups the calls of an op: emit_nvtx's ", seq = N" is not part of a phase
grep -qF "step */fwd/Net/aten::linear/aten::addmm" "$TMP/ops.txt" && ! grep -q "seq = " "$TMP/ops.txt" \
  || { cat "$TMP/ops.txt"; fail "the phase table keeps emit_nvtx's seq numbers"; }

# without libgpumem.so: no-ops, one warning
"$PY" "$SRC/module_ranges.py" "$RT" absent > "$TMP/a.out" 2> "$TMP/a.err" \
  || { cat "$TMP/a.out" "$TMP/a.err"; fail "module_ranges.py without gpumem failed"; }
grep -q "module_ranges: done" "$TMP/a.out" || fail "module_ranges.py without gpumem did not finish"
n=$(grep -c "gpumem: libgpumem.so is not loaded in this process" "$TMP/a.err")
[[ $n -eq 1 ]] || { cat "$TMP/a.err"; fail "$n warnings without gpumem, expected exactly 1"; }

# installed where the README says
make -s install-python DESTDIR="$TMP/inst" PREFIX=/usr/local > /dev/null || fail "make install-python failed"
PYTHONPATH=$TMP/inst/usr/local/share/gpumem/python "$PY" -c 'import gpumem, sys; sys.exit(0 if gpumem.__file__.startswith(sys.argv[1]) else 1)' "$TMP/inst" \
  || fail "the installed module is not importable from share/gpumem/python"
echo "python_module: ok"
