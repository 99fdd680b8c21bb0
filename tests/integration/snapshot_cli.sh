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
# ids that point nowhere (a damaged or edited file): a name, an OOM's name, a frame, a stack, a
# range, a range's parent and name, a kernel, a stream and thread, a module; no command crashes
# (each answers, or refuses with exit 3)
if [[ -x $BUILD/train_gpt2_sim ]]; then
  "$GPUMEM" record -q -o "$TMP/tr.db" -- "$BUILD/train_gpt2_sim" --model tiny --steps 2 -B 2 -T 32 > /dev/null 2>&1 \
    || fail "record the trainer"
  for q in "DELETE FROM strings WHERE id IN (SELECT name FROM names)" "UPDATE names SET name = 999999" \
           "DELETE FROM frames WHERE id = (SELECT min(frame) FROM stacks)" "UPDATE stacks SET frame = 999999 WHERE depth = 0" \
           "UPDATE events SET stack = 999999 WHERE kind = 1" "UPDATE events SET range = 999999" \
           "UPDATE ranges SET parent = 999999, name = 999999" "UPDATE uses SET kernel = 999999" \
           "UPDATE events SET stream = 999999, thread = 999999" "UPDATE frames SET module = 999999"; do
    cp "$TMP/tr.db" "$TMP/h.db" && sqlite3 "$TMP/h.db" "$q" || fail "sqlite3: $q"
    for c in "report" "report --json" "leaks" "frag" "tune" "advise" "uses --name *" "export --format csv" \
             "export --format chrome" "export --format speedscope" "export --format folded" "viz -o $TMP/h.html"; do
      read -r cmd rest <<< "$c"
      "$GPUMEM" $cmd "$TMP/h.db" $rest > /dev/null 2> "$TMP/e"; rc=$?
      [[ $rc -le 3 ]] || fail "gpumem $c on a file where '$q': rc $rc (a crash)"
    done
    "$GPUMEM" diff "$TMP/tr.db" "$TMP/h.db" > /dev/null 2>&1; [[ $? -le 3 ]] || fail "gpumem diff on '$q' crashed"
  done
fi
# a typo gets the nearest command
"$GPUMEM" reprot "$TMP/ok.db" 2> "$TMP/typo"; [[ $? -eq 2 ]] && grep -q "did you mean 'report'" "$TMP/typo" || fail "no did-you-mean for reprot"
echo "ok"
