#!/usr/bin/env bash
# The gpumem command: --help everywhere, usage errors exit 2, unreadable databases exit 3 with
# a message naming the problem, sql -c runs a query.
source tests/integration/snapshot_common.bash
need "$GPUMEM" "$APP"
for c in "" record report leaks sql export; do
  "$GPUMEM" $c --help > "$TMP/h" || fail "gpumem $c --help failed"
  grep -q "usage: gpumem" "$TMP/h" || fail "gpumem $c --help prints no usage"
done
"$GPUMEM" > /dev/null 2>&1; [[ $? -eq 2 ]] || fail "no command: expected exit 2"
"$GPUMEM" frobnicate > /dev/null 2>&1; [[ $? -eq 2 ]] || fail "unknown command: expected exit 2"
"$GPUMEM" report > /dev/null 2>&1; [[ $? -eq 2 ]] || fail "report without a database: expected exit 2"
"$GPUMEM" report x.db --top zero > /dev/null 2>&1; [[ $? -eq 2 ]] || fail "bad --top: expected exit 2"
"$GPUMEM" report "$TMP/missing.db" 2> "$TMP/e"; [[ $? -eq 3 ]] || fail "missing database: expected exit 3"
grep -q "No such file" "$TMP/e" || fail "missing database: message does not say so"
head -c 5000 /dev/urandom > "$TMP/junk.db"
"$GPUMEM" leaks "$TMP/junk.db" 2> "$TMP/e"; [[ $? -eq 3 ]] || fail "junk file: expected exit 3"
grep -q "not a gpumem database" "$TMP/e" || fail "junk file: message does not say so"
# another program's SQLite file: every reading command says why SQLite found it foreign (its
# message as it was, not "not an error" from a later call), exit 3
sqlite3 "$TMP/other.db" 'CREATE TABLE t(a); INSERT INTO t VALUES (42);' || fail "sqlite3 failed"
for c in report leaks frag tune advise "uses --id 1" "export --format csv" viz diff "sql -c VALUES(1)"; do
  read -r cmd rest <<< "$c"
  args=("$TMP/other.db"); [[ $cmd == diff ]] && args+=("$TMP/other.db"); [[ $cmd == viz ]] && args+=(-o "$TMP/o.html")
  "$GPUMEM" $cmd "${args[@]}" $rest > /dev/null 2> "$TMP/e"; rc=$?
  [[ $rc -eq 3 ]] && grep -q "other.db is an SQLite file but not a gpumem database (no such table: meta)" "$TMP/e" \
    || fail "gpumem $c on another SQLite file: rc $rc, $(head -1 "$TMP/e")"
done
GPUMEM_DB=$TMP/ok.db "$APP" pairs 10 > /dev/null || fail "app failed"
[[ $("$GPUMEM" sql "$TMP/ok.db" -c "SELECT count(*) FROM allocations" | tail -1) == 21 ]] || fail "sql -c on allocations"
"$GPUMEM" sql "$TMP/ok.db" -c "SELECT nonsense FROM nowhere" 2> /dev/null; [[ $? -eq 3 ]] || fail "failing query: expected exit 3"
echo "SELECT count(*) FROM events;" | "$GPUMEM" sql "$TMP/ok.db" | tail -1 | grepq -x 41 || fail "sql from stdin"
# a typo gets the nearest command
"$GPUMEM" reprot "$TMP/ok.db" 2> "$TMP/typo"; [[ $? -eq 2 ]] && grep -q "did you mean 'report'" "$TMP/typo" || fail "no did-you-mean for reprot"
echo "ok"
