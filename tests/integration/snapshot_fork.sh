#!/usr/bin/env bash
# A forked child records into its own database and does not corrupt the parent's.
source tests/integration/snapshot_common.bash
need "$GPUMEM" "$APP"
db=$TMP/parent.db
out=$(GPUMEM_DB=$db "$APP" fork) || fail "fork run failed"
child=${out#CHILD }
[[ $("$GPUMEM" sql "$db" -c "PRAGMA integrity_check" | tail -1) == ok ]] || fail "parent database is damaged"
[[ $("$GPUMEM" sql "$db" -c "SELECT count(*) FROM events" | tail -1) == 400 ]] || fail "parent database does not hold exactly the parent's 400 events"
cdb=$TMP/parent-$child.db
[[ -f $cdb ]] || fail "the child's database $cdb was not written"
[[ $("$GPUMEM" sql "$cdb" -c "SELECT count(*) FROM events WHERE kind=1" | tail -1) == 50 ]] || fail "child database lacks its 50 allocations"
"$GPUMEM" leaks "$cdb" | tail -1 | grepq "LEAK SUMMARY: 409600 bytes leaked in 50 allocations" || fail "child leaks wrong"
GPUMEM_FORK=off GPUMEM_DB=$TMP/off.db "$APP" fork > "$TMP/off.out" || fail "fork run (off) failed"
child=$(sed 's/CHILD //' "$TMP/off.out")
[[ ! -e $TMP/off-$child.db ]] || fail "GPUMEM_FORK=off: the child wrote a database"
echo "ok: parent 400 events intact, child's own file with its 50 allocations"
