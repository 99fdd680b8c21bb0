#!/usr/bin/env bash
# gpumem record on the interposition engineer's test apps: the database's alloc/free counts
# equal rt_app's own counts, and nvtx_app's ranges are nested as the program says.
source tests/integration/snapshot_common.bash
need "$GPUMEM"
if [[ ! -f $BUILD/libgpumem.so || ! -x $BUILD/tests/apps/rt_app ]]; then
  echo "skipped: libgpumem.so or tests/apps/rt_app not built" >&2; exit 77
fi
unset GPUMEM_QUIET
db=$TMP/rt.db
"$GPUMEM" record -o "$db" -- "$BUILD/tests/apps/rt_app" > "$TMP/rt.out" 2> "$TMP/rt.err"; rc=$?
[[ $rc -eq 0 ]] || { cat "$TMP/rt.out" "$TMP/rt.err"; fail "record exited $rc (rt_app's own exit code)"; }
grep -q "gpumem: peak allocated" "$TMP/rt.err" || fail "record printed no summary"
line=$(grep "^rt_app: allocs" "$TMP/rt.out") || fail "rt_app printed no counts"
set -- $line
declare -A want=([1]=$3 [2]=$5 [3]=$7 [4]=$9 [5]=${11} [6]=${13})
# rt_app also allocates and frees once through the driver entry point, outside its counts
if grep -q "^rt_app: driver entry point alloc ok" "$TMP/rt.out"; then
  want[1]=$(( want[1] + 1 )); want[2]=$(( want[2] + 1 ))
fi
for k in 1 2 3 4 5 6; do
  got=$("$GPUMEM" sql "$db" -c "SELECT count(*) FROM events WHERE kind=$k" | tail -1)
  [[ $got == "${want[$k]}" ]] || fail "kind $k: database has $got, rt_app counted ${want[$k]} ($line)"
done
# exit codes pass through
"$GPUMEM" record -q -o "$TMP/f.db" -- sh -c 'exit 7'; rc=$?
[[ $rc -eq 7 ]] || fail "record did not pass exit code 7 through (got $rc)"
"$GPUMEM" record -q -o "$TMP/g.db" -- /nonexistent/prog 2>/dev/null; rc=$?
[[ $rc -eq 127 ]] || fail "record of a missing program exited $rc, expected 127"
# OOM forensics on a real OOM: rt_app asks for 2 GiB under a 1 GiB limit
GPUMEM_LIMIT=1G "$GPUMEM" record -q -o "$TMP/oom.db" -- "$BUILD/tests/apps/rt_app" big > /dev/null || fail "rt_app big failed"
"$GPUMEM" report "$TMP/oom.db" > "$TMP/oom.txt" || fail "report on the OOM run failed"
grep -q "OOM 1 at event .* requested 2.00 GiB" "$TMP/oom.txt" || { cat "$TMP/oom.txt"; fail "OOM forensics missing"; }
grep -q "limit 1.00 GiB" "$TMP/oom.txt" && grep -q "binding constraint: limit; the request fell short by 1.00 GiB (1073741824 bytes)" "$TMP/oom.txt" \
  && grep -q "Raise it (to at least 2.00 GiB (2147483648 bytes) for this request)" "$TMP/oom.txt" || { cat "$TMP/oom.txt"; fail "OOM advice does not name the limit and the shortfall"; }
"$GPUMEM" report --json "$TMP/oom.db" | grepq '"cause":"limit","shortfall":1073741824' || fail "OOM JSON lacks cause/shortfall"
# under a 5 MiB limit the 2 MiB mapping unit binds: 4 MiB mapped, 1 MiB left that cannot be mapped
if [[ -x $BUILD/train_gpt2_sim ]]; then
  GPUMEM_LIMIT=5M "$GPUMEM" record -q -o "$TMP/l5.db" -- "$BUILD/train_gpt2_sim" --steps 1 -B 8 > /dev/null 2>&1
  "$GPUMEM" report "$TMP/l5.db" > "$TMP/l5.txt" || fail "report on the 5M run failed"
  grep -q "binding constraint: granularity; the request fell short by" "$TMP/l5.txt" \
    && grep -q "GPUMEM_LIMIT left 1.00 MiB above what was reserved, but memory is mapped in 2.00 MiB units" "$TMP/l5.txt" \
    || { cat "$TMP/l5.txt"; fail "GPUMEM_LIMIT=5M: the cause is not the limit's mapping granularity"; }
fi
if [[ -x $BUILD/tests/apps/nvtx_app ]]; then
  "$GPUMEM" record -q -o "$TMP/nv.db" -- "$BUILD/tests/apps/nvtx_app" > "$TMP/nv.out" || fail "nvtx_app failed"
  grep '^expect push' "$TMP/nv.out" | sed 's/^\([^ ]* \)\{5\}//' | sort > "$TMP/want" # a path may hold spaces
  "$GPUMEM" sql "$TMP/nv.db" -c "SELECT path FROM ranges WHERE kind=0" | tail -n +2 | sort > "$TMP/got"
  diff "$TMP/want" "$TMP/got" > /dev/null || { diff "$TMP/want" "$TMP/got" | head; fail "nvtx_app's range paths differ"; }
  bad=$("$GPUMEM" sql "$TMP/nv.db" -c "SELECT count(*) FROM ranges c JOIN ranges p ON p.id=c.parent WHERE c.kind=0 AND (p.thread != c.thread OR c.path NOT LIKE p.path || '/%')" | tail -1)
  [[ $bad == 0 ]] || fail "$bad ranges not nested inside their parent on the same thread"
fi
echo "ok: rt_app counts match (${line#rt_app: }); nvtx ranges nested"
