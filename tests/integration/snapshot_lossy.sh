#!/usr/bin/env bash
# Lossless by default, and analyses that refuse what they cannot know.
#  - A ring of 8 records under a burst: by default the program waits for the writer, so nothing
#    is dropped (meta.ring_full = wait); with GPUMEM_RING_FULL=drop the same run drops.
#  - On the recording that dropped: report, leaks, frag, tune and advise exit 3 with a line that
#    says why and what to do, unless --lossy-ok; with it their first line (stderr under --json,
#    whose stdout stays JSON) says the recording lost events. uses and diff say so in their
#    first line, export and viz on stderr (and the page in its summary).
source "$(dirname "$0")/snapshot_common.bash"
need "$GPUMEM" "$APP"
N=20000
GPUMEM_DB=$TMP/wait.db GPUMEM_RING=8 "$APP" pairs $N > /dev/null || fail "pairs under a ring of 8 exited $?"
q() { "$GPUMEM" sql "$1" -c "$2" | tail -n +2; }
[[ $(q "$TMP/wait.db" "SELECT value FROM meta WHERE key = 'dropped_events'") == 0 ]] || fail "the default recording dropped events"
[[ $(q "$TMP/wait.db" "SELECT value FROM meta WHERE key = 'ring_full'") == wait ]] || fail "meta.ring_full is not wait"
[[ $(q "$TMP/wait.db" "SELECT count(*) FROM events WHERE kind IN (1, 2)") == $((4 * N + 1)) ]] || fail "events are missing"
"$GPUMEM" report "$TMP/wait.db" | sed -n 1p | grepq "^gpumem report:" || fail "a complete recording's report starts otherwise"
echo "ok: a ring of 8, $N pairs: no event dropped (the program waited for the writer)"

# drop mode: whether a ring of 8 overflows depends on the scheduler (a writer on an idle core
# keeps up); a few tries, and the count is then planted if it never did
for try in 1 2 3 4 5; do
  GPUMEM_DB=$TMP/drop.db GPUMEM_RING=8 GPUMEM_RING_FULL=drop GPUMEM_RING_WAIT_US=0 GPUMEM_STACKS=0 "$APP" pairs $N \
    > /dev/null || fail "pairs in drop mode exited $?"
  lost=$(q "$TMP/drop.db" "SELECT value FROM meta WHERE key = 'dropped_events'")
  (( lost > 0 )) && break
done
[[ $(q "$TMP/drop.db" "SELECT value FROM meta WHERE key = 'ring_full'") == drop ]] || fail "meta.ring_full is not drop"
if (( lost > 0 )); then
  echo "ok: GPUMEM_RING_FULL=drop: $lost events dropped, counted"
else
  lost=7
  "$GPUMEM" sql --write "$TMP/drop.db" -c "UPDATE meta SET value = $lost WHERE key = 'dropped_events'" > /dev/null
  echo "ok: GPUMEM_RING_FULL=drop: the writer kept up 5 times; $lost drops planted for the readers' checks"
fi
db=$TMP/drop.db
warn="^gpumem: WARNING: $db lost $lost events (the ring was full, and it was recorded with GPUMEM_RING_FULL=drop)"
for cmd in report leaks frag tune advise; do
  "$GPUMEM" $cmd "$db" > "$TMP/out.txt" 2> "$TMP/err.txt"; rc=$?
  [[ $rc == 3 && ! -s $TMP/out.txt ]] || fail "$cmd on a lossy recording: exit $rc (want 3), output $(head -2 "$TMP/out.txt")"
  grep -q "^gpumem $cmd: $db lost $lost events (.*), so its .* can be wrong.*--lossy-ok" "$TMP/err.txt" \
    || fail "$cmd's refusal: $(cat "$TMP/err.txt")"
  "$GPUMEM" $cmd --lossy-ok "$db" > "$TMP/out.txt" 2> /dev/null; rc=$?
  [[ $rc != 2 && $rc != 3 ]] || fail "$cmd --lossy-ok exited $rc"
  head -1 "$TMP/out.txt" | grepq "$warn" || fail "$cmd --lossy-ok, first line: $(head -1 "$TMP/out.txt")"
  "$GPUMEM" $cmd --lossy-ok --json "$db" > "$TMP/out.json" 2> "$TMP/err.txt"
  jq -e . "$TMP/out.json" > /dev/null || fail "$cmd --lossy-ok --json is not JSON"
  head -1 "$TMP/err.txt" | grepq "$warn" || fail "$cmd --lossy-ok --json, stderr: $(head -1 "$TMP/err.txt")"
done
echo "ok: report, leaks, frag, tune, advise: exit 3 without --lossy-ok; with it, the first line says so"
"$GPUMEM" uses "$db" --name planted > "$TMP/out.txt" || fail "uses exited $?"
head -1 "$TMP/out.txt" | grepq "$warn" || fail "uses, first line: $(head -1 "$TMP/out.txt")"
"$GPUMEM" diff "$TMP/wait.db" "$db" > "$TMP/out.txt"
head -1 "$TMP/out.txt" | grepq "$warn" || fail "diff, first line: $(head -1 "$TMP/out.txt")"
for f in csv chrome folded trace; do
  "$GPUMEM" export --format $f "$db" > /dev/null 2> "$TMP/err.txt" || fail "export $f exited $?"
  head -1 "$TMP/err.txt" | grepq "$warn" || fail "export $f, stderr: $(head -1 "$TMP/err.txt")"
done
"$GPUMEM" viz "$db" -o "$TMP/page.html" 2> "$TMP/err.txt" || fail "viz exited $?"
head -1 "$TMP/err.txt" | grepq "$warn" || fail "viz, stderr: $(head -1 "$TMP/err.txt")"
sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/page.html" | jq -e ".summary.dropped_events == $lost" > /dev/null \
  || fail "the page's summary does not carry the lost events"
echo "ok: uses and diff say so first, export and viz on stderr, the page in its summary"

# Damaged recordings are handled as lossy ones, by every command: pages overwritten after the
# recording closed. Rows: a leaf of events with a cell's rowid zeroed (SQLite reads on: the
# seqs go back), a leaf zeroed where SQLite stops reading (a damaged tail), two pages of
# garbage, the first leaf garbage (nothing can be read), the meta page's cells zeroed. Each: every command exits 3, and says "damaged" where
# the damage is read past; with --lossy-ok report and leaks analyse what was read and say so,
# report --json says complete false and why, leaks --fail-on-leak still cannot judge. No message
# is SQLite's "not an error" (its message read after a later call reset it).
if [[ -x $BUILD/train_gpt2_sim ]]; then
  "$GPUMEM" record -q -o "$TMP/t.db" -- "$BUILD/train_gpt2_sim" --model tiny --steps 3 -B 4 -T 64 > /dev/null 2>&1 \
    || fail "record the trainer"
  psz=$(sqlite3 "$TMP/t.db" "PRAGMA page_size")
  leaf() { sqlite3 "$TMP/t.db" "SELECT pageno FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' ORDER BY pageno LIMIT 1 OFFSET $1"; }
  metapg=$(sqlite3 "$TMP/t.db" "SELECT rootpage FROM sqlite_master WHERE name = 'meta'")
  damage() { # $1 row; writes $TMP/d.db
    cp "$TMP/t.db" "$TMP/d.db"
    case $1 in
      rowid) dd if=/dev/zero of="$TMP/d.db" bs=1 seek=$(( ($(leaf 3) - 1) * psz + 6000 )) count=64 conv=notrunc ;;
      tail) dd if=/dev/zero of="$TMP/d.db" bs=1 seek=$(( ($(leaf 1) - 1) * psz + 6000 )) count=64 conv=notrunc ;;
      garbage) head -c $((2 * psz)) /dev/urandom | dd of="$TMP/d.db" bs=$psz seek=$(( $(leaf 2) - 1 )) conv=notrunc ;;
      first) head -c $psz /dev/urandom | dd of="$TMP/d.db" bs=$psz seek=$(( $(leaf 0) - 1 )) conv=notrunc ;;
      meta) dd if=/dev/zero of="$TMP/d.db" bs=1 seek=$(( (metapg - 1) * psz + 100 )) count=3000 conv=notrunc ;;
    esac 2> /dev/null
  }
  for row in rowid tail garbage first meta; do
    damage $row
    for c in "report" "report --json" "leaks" "leaks --fail-on-leak" "frag" "tune" "advise" "uses --id 13" \
             "export --format csv" "export --format chrome" "export --format trace" "viz -o $TMP/d.html"; do
      read -r cmd rest <<< "$c"
      "$GPUMEM" $cmd "$TMP/d.db" $rest > "$TMP/out" 2> "$TMP/err"; rc=$?
      [[ $rc -eq 3 ]] || fail "$row: gpumem $c on a damaged recording exited $rc: $(head -1 "$TMP/err")"
      [[ $row == garbage ]] || grepq "damaged" "$TMP/err" || fail "$row: gpumem $c does not say damaged: $(head -1 "$TMP/err")"
      grepq "not an error" "$TMP/err" && fail "$row: gpumem $c gives SQLite's reset message: $(head -1 "$TMP/err")"
    done
    "$GPUMEM" diff "$TMP/t.db" "$TMP/d.db" --fail-if-peak-grows 5 > /dev/null 2>&1; rc=$?
    [[ $rc -eq 3 ]] || fail "$row: diff against a damaged recording exited $rc"
    [[ $row == garbage || $row == first ]] && continue
    "$GPUMEM" report --lossy-ok "$TMP/d.db" > "$TMP/out" 2>&1 || fail "$row: report --lossy-ok exited $?"
    head -1 "$TMP/out" | grepq "WARNING: .* is damaged" || fail "$row: report --lossy-ok does not say so first"
    "$GPUMEM" report --lossy-ok --json "$TMP/d.db" 2> /dev/null | jq -e '.complete == false and (.damaged | type) == "string"' \
      > /dev/null || fail "$row: report --json does not say complete false and why"
    "$GPUMEM" leaks --lossy-ok --fail-on-leak "$TMP/d.db" > /dev/null 2>&1; rc=$?
    [[ $rc -eq 3 ]] || fail "$row: leaks --fail-on-leak judged a damaged recording (rc $rc)"
  done
  "$GPUMEM" report --json "$TMP/t.db" | jq -e '.complete == true and .damaged == null' > /dev/null \
    || fail "the undamaged recording is not complete"
  echo "ok: damaged recordings (a rowid zeroed, a damaged tail, garbage pages, the meta page) refused by every command"
fi
