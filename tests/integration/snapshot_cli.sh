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
# CUDA's header wrappers (cudaMalloc<T> from cuda_runtime.h, inlined into the program's helper)
# are never the program's call site: every command that names where the program allocated
# names the helper's line and its caller, so the helper's two callers stay two sites. A table:
# the command | what its output must hold (the site of make_b's allocation).
CXX_APP=$BUILD/tests/apps/cxx_wrap_app
need "$CXX_APP"
"$GPUMEM" record -q -o "$TMP/cxx.db" -- "$CXX_APP" > /dev/null || fail "cxx_wrap_app failed"
site_b="alloc_floats (cxx_wrap_app.cc:12) < make_b (cxx_wrap_app.cc:19)"
id_b=$("$GPUMEM" sql "$TMP/cxx.db" -c "SELECT id FROM allocations WHERE size = 8388608" | tail -1)
sites=(
  "report|$site_b"
  "leaks|at $site_b"
  "diff $TMP/cxx.db|$site_b"
  "uses --id $id_b|$site_b"
  "export --format folded -o -|;make_b (cxx_wrap_app.cc:19);alloc_floats (cxx_wrap_app.cc:12) 8388608"
  "export --format speedscope -o -|\"alloc_floats (cxx_wrap_app.cc:12)\""
  "viz -o $TMP/cxx.html|alloc_floats (cxx_wrap_app.cc:12)"
)
for c in "${sites[@]}"; do
  IFS='|' read -r cmd want <<< "$c"
  read -r verb rest <<< "$cmd"
  "$GPUMEM" $verb "$TMP/cxx.db" $rest > "$TMP/cxx.out" 2>&1
  [[ $verb == viz ]] && cp "$TMP/cxx.html" "$TMP/cxx.out"
  grepq -F -- "$want" "$TMP/cxx.out" || fail "gpumem $cmd does not name '$want'"
  # speedscope lists every frame of the recording; its samples are what it draws
  [[ $verb == export && $rest == *speedscope* ]] && jq -r '.shared.frames as $f | [.profiles[].samples[][]]
    | unique | map($f[.].name) | .[]' "$TMP/cxx.out" > "$TMP/cxx.out"
  ! grepq -F "cuda_runtime" "$TMP/cxx.out" || fail "gpumem $cmd names CUDA's header: $(grep -m1 -F cuda_runtime "$TMP/cxx.out")"
done
# a typo gets the nearest command
"$GPUMEM" reprot "$TMP/ok.db" 2> "$TMP/typo"; [[ $? -eq 2 ]] && grep -q "did you mean 'report'" "$TMP/typo" || fail "no did-you-mean for reprot"
echo "ok"
