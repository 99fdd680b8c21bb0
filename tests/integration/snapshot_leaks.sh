#!/usr/bin/env bash
# A planted leak is found by `gpumem leaks` with its call site (function and file), the last
# line is the LEAK SUMMARY, --fail-on-leak exits 1; report and --json work on the same database;
# the database's alloc/free counts equal the program's own.
source tests/integration/snapshot_common.bash
need "$GPUMEM" "$APP"
db=$TMP/leak.db
out=$(GPUMEM_DB=$db "$APP" pairs 300) || fail "snapshot_app failed"
read -r _ allocs _ frees _ leaked <<<"$out"
[[ $("$GPUMEM" sql "$db" -c "SELECT count(*) FROM events WHERE kind=1" | tail -1) == "$allocs" ]] || fail "alloc count differs from the app's ($allocs)"
[[ $("$GPUMEM" sql "$db" -c "SELECT count(*) FROM events WHERE kind=2" | tail -1) == "$frees" ]] || fail "free count differs from the app's ($frees)"
"$GPUMEM" leaks "$db" > "$TMP/leaks.txt"; rc=$?
[[ $rc -eq 0 ]] || fail "gpumem leaks exited $rc without --fail-on-leak"
grep -q "plant_leak (snapshot_app.c:" "$TMP/leaks.txt" || { cat "$TMP/leaks.txt"; fail "the leak's call site (plant_leak in snapshot_app.c) is not named"; }
grep -q "named planted" "$TMP/leaks.txt" || fail "the leak's name is not shown"
last=$(tail -1 "$TMP/leaks.txt")
[[ $last == "LEAK SUMMARY: $leaked bytes leaked in 1 allocations" ]] || fail "last line is '$last'"
"$GPUMEM" leaks "$db" --fail-on-leak > /dev/null; rc=$?
[[ $rc -eq 1 ]] || fail "--fail-on-leak exited $rc, expected 1"
"$GPUMEM" report "$db" > "$TMP/report.txt" || fail "gpumem report failed"
grep -q "peak allocated" "$TMP/report.txt" || fail "report has no summary"
grep -q "step \*/fwd" "$TMP/report.txt" || fail "report has no NVTX phase attribution"
sed -n '/by tensor name/,/^$/p' "$TMP/report.txt" | grepq "planted" || fail "report does not attribute the peak by tensor name"
grep -q "my_alloc (snapshot_app.c:[0-9]*) < plant_leak" "$TMP/report.txt" || fail "call sites do not name the caller"
for c in report leaks; do
  "$GPUMEM" $c "$db" --json > "$TMP/$c.json" || [[ $c == leaks ]] || fail "$c --json failed"
  if command -v python3 > /dev/null; then
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$TMP/$c.json" || fail "$c --json is not valid JSON"
  fi
done
grep -q "\"leaked_bytes\":$leaked" "$TMP/leaks.json" || fail "leaks --json lacks leaked_bytes"
# growth across steps: 1 MiB kept per step
GPUMEM_DB=$TMP/growth.db "$APP" growth 20 || fail "growth run failed"
"$GPUMEM" leaks "$TMP/growth.db" > "$TMP/growth.txt"
grep -q "memory grows by 1.00 MiB per step" "$TMP/growth.txt" || fail "growth per step not found"
# what grows: the 20 allocations of growth()'s call site, one kept by each step (its first included)
grep -q "allocated in steps 0-19, one step after another, and still alive after step 19 (what grows): 20.00 MiB in 20 allocations" "$TMP/growth.txt" || { cat "$TMP/growth.txt"; fail "allocations kept across steps not found"; }
sed -n '/what grows/,$p' "$TMP/growth.txt" | grepq "< growth (snapshot_app.c:" || fail "kept allocations lack their call site"
# dropped events: a free may be missing: leaks refuses (exit 3) unless --lossy-ok, and then says
# so in its first line; --fail-on-leak still cannot judge (exit 3, not 1 or 0)
cp "$TMP/growth.db" "$TMP/dropped.db"
"$GPUMEM" sql --write "$TMP/dropped.db" -c "UPDATE meta SET value = 7 WHERE key = 'dropped_events'" > /dev/null || fail "cannot edit meta"
"$GPUMEM" leaks "$TMP/dropped.db" > "$TMP/dropped.txt" 2> "$TMP/dropped.err"; rc=$?
[[ $rc -eq 3 && ! -s $TMP/dropped.txt ]] || fail "leaks with dropped events exited $rc (want 3, refused)"
grep -q "lost 7 events .*--lossy-ok" "$TMP/dropped.err" || fail "the refusal does not say why and what to do: $(cat "$TMP/dropped.err")"
"$GPUMEM" leaks "$TMP/dropped.db" --lossy-ok --fail-on-leak > "$TMP/dropped.txt"; rc=$?
[[ $rc -eq 3 ]] || fail "leaks --fail-on-leak with dropped events exited $rc, expected 3 (cannot judge)"
head -1 "$TMP/dropped.txt" | grepq "^gpumem: WARNING: .* lost 7 events" || fail "the first line does not say events were lost: $(head -1 "$TMP/dropped.txt")"
grep -q "warning: 7 events were dropped .*frees may be missing" "$TMP/dropped.txt" || fail "no dropped-events warning"
"$GPUMEM" leaks "$TMP/dropped.db" --json --lossy-ok 2> /dev/null | grepq '"dropped_events":7,"judgeable":false' || fail "JSON lacks dropped_events/judgeable"
"$GPUMEM" leaks "$TMP/growth.db" --json | grepq '"dropped_events":0,"judgeable":true' || fail "JSON judgeable on a complete recording"
"$GPUMEM" leaks "$TMP/growth.db" --fail-on-leak > /dev/null; rc=$?
[[ $rc -eq 1 ]] || fail "a complete recording with leaks exited $rc, expected 1"
# the call-site list does not repeat the caller already named in the site's label
GPUMEM_DB=$TMP/leak2.db "$APP" pairs 10 > /dev/null || fail "pairs run failed"
"$GPUMEM" leaks "$TMP/leak2.db" > "$TMP/leak2.txt"
site=$(sed -n 's/.* allocations\{0,1\} at .* < \([a-z_]*\) (.*/\1/p' "$TMP/leak2.txt" | head -1)
if [[ -n $site ]]; then
  sed -n '/^Alive at exit, by call site/,/phase:/p' "$TMP/leak2.txt" | grepq "called from $site (" && { cat "$TMP/leak2.txt"; fail "the caller $site is listed twice"; }
fi
# nothing alive: no empty "by phase" heading (the trainer frees everything)
if [[ -f $BUILD/libgpumem.so && -x $BUILD/train_gpt2_sim ]]; then
  "$GPUMEM" record -q -o "$TMP/clean.db" -- "$BUILD/train_gpt2_sim" --steps 1 > /dev/null 2>&1 || fail "trainer run failed"
  "$GPUMEM" leaks "$TMP/clean.db" > "$TMP/clean.txt"
  grep -q "nothing: every allocation was freed" "$TMP/clean.txt" || fail "the trainer's run has leaks?"
  grep -q "by phase" "$TMP/clean.txt" && fail "an empty by-phase section is printed"
fi
echo "ok: leak found at plant_leak (snapshot_app.c), counts $allocs/$frees match; dropped events -> exit 3"
