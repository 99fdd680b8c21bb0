#!/usr/bin/env bash
# A program killed with SIGKILL mid-run leaves a database that `gpumem report` reads, missing
# at most the last ~100 ms of events (commits every 25 ms; 150 ms allowed for a loaded machine: this estimate
# assumes a steady event rate).
# Every output built from a recording whose program did not run to its end (still running, then
# killed) says so in one wording, as leaks does: viz's page (D.summary.ending), diff (each side,
# and its gate cannot pass: exit 3), every export format (a key or a comment where the format has
# room, stderr always), frag, tune, advise, uses, the ranks report, report and leaks --json; and
# a recording that ran to its end carries none of it.
source tests/integration/snapshot_common.bash
source tests/pipe.bash # grepq
need "$GPUMEM" "$APP"
ending="the program did not run to its end (killed, or still running): what it held then shows as alive, not necessarily leaked"
done_db=$TMP/done.db done2_db=$TMP/done2.db
GPUMEM_STACKS=0 GPUMEM_DB=$done_db "$APP" growth 4 > /dev/null 2>&1
GPUMEM_STACKS=0 GPUMEM_DB=$done2_db "$APP" growth 4 > /dev/null 2>&1
# name | gpumem arguments (@DB@: the recording; @DONE@: a complete one; @OUT@: a file written; @ID@:
# an allocation) | where the sentence must be:
# out/err (stdout/stderr), file (@OUT@), key (@OUT@ or stdout's JSON: "ending":"<sentence>"),
# pickle (@OUT@'s gpumem_ending), page (the page as headless chromium draws it, where installed:
# the summary's note and the leaks section's caveat)
rows=(
  "viz|viz @DB@ -o @OUT@.html|key"
  "viz page|viz @DB@ -o @OUT@.html|page"
  "export chrome|export @DB@ --format chrome -o @OUT@.json|key"
  "export speedscope|export @DB@ --format speedscope -o @OUT@.json|key"
  "export torch|export @DB@ --format torch -o @OUT@.pickle|pickle"
  "export trace|export @DB@ --format trace -o @OUT@.trace|file"
  "export csv|export @DB@ --format csv -o @OUT@.csv|err"
  "export folded|export @DB@ --format folded -o @OUT@.folded|err"
  "frag|frag @DB@|out"
  "frag --json|frag --json @DB@|key"
  "tune|tune @DB@|out"
  "tune --json|tune --json @DB@|key"
  "advise|advise @DB@|out"
  "advise --json|advise --json @DB@|err"
  "uses|uses --id @ID@ @DB@|out"
  "uses --json|uses --json --id @ID@ @DB@|key"
  "diff|diff @DB@ @DONE@|out"
  "diff --json|diff --json @DB@ @DONE@|key"
  "ranks|report @DB@ @DONE@|out"
  "ranks --json|report --json @DB@ @DONE@|key"
  "report --json|report --json @DB@|key"
  "leaks|leaks @DB@|out"
  "leaks --json|leaks --json @DB@|key"
)
check_ending() { # how db other want: every row says the program of db did not run to its end
  # (want 1) or none does (want 0); other: a complete recording to compare with
  local how=$1 db=$2 other=$3 want=$4 row name args where n=0 id
  id=$("$GPUMEM" sql "$db" -c "SELECT min(seq) FROM events WHERE kind = 1" | tail -1) # one allocation
  for row in "${rows[@]}"; do
    IFS='|' read -r name args where <<< "$row"
    local out=$TMP/end-$how-$((n++))
    args=${args//@DB@/$db}; args=${args//@DONE@/$other}; args=${args//@ID@/$id}; args=${args//@OUT@/$out}
    # shellcheck disable=SC2086 # the row's arguments, split as written
    "$GPUMEM" $args > "$out.stdout" 2> "$out.stderr"; local rc=$?
    [[ $rc -eq 0 ]] || { cat "$out.stderr"; tail -20 "$out.stdout"; fail "$how: gpumem $args exited $rc"; }
    local said=0 f
    case $where in
      out) grep -qF "$ending" "$out.stdout" && said=1 ;;
      err) grep -qF "$ending" "$out.stderr" && said=1 ;;
      file) grep -qF "# note: $ending" "$out.trace" && said=1 ;;
      key) f=$out.stdout; for g in "$out".html "$out".json; do [[ -f $g ]] && f=$g; done
           grep -qF "\"ending\":\"$ending\"" "$f" && said=1 ;;
      page) if [[ -x /usr/bin/chromium ]]; then
              timeout 120 /usr/bin/chromium --headless --no-sandbox --disable-gpu --dump-dom "file://$out.html" \
                > "$out.dom" 2> /dev/null
              grep -o '<td id="ending"[^<]*<' "$out.dom" | grepq -F "$ending" &&
                grep -o '<p id="leaks-caveat"[^<]*<' "$out.dom" | grepq -F "$ending" && said=1
            else # the data the page draws it from
              grep -qF "\"ending\":\"$ending\"" "$out.html" && said=1
            fi ;;
      pickle) [[ $(python3 -c 'import pickle, sys; print(pickle.load(open(sys.argv[1], "rb"))["gpumem_ending"])' \
                 "$out.pickle") == "$ending" ]] && said=1 ;;
    esac
    [[ $said == "$want" ]] || fail "$how: gpumem $args: the note that the program did not run to its end is $([[ $want == 1 ]] && echo missing || echo there) ($where)"
  done
}
check_ending complete "$done_db" "$done2_db" 0
# still running: 1,000 events, all in the file, then alive and idle while every command reads it
# (a program that kept issuing would grow the recording with the time the commands take, minutes
# on a loaded machine, and each command's work with it). Fewer than viz's 1,500 bands: before
# viz bounded its bands by the chart's pixels, with more live allocations than the page draws one
# by one each drawn band got a point per half pixel and headless chromium took 15-20 s to draw
# the page of the 10,000 events this used to wait for (1.5 s, which was not enough for them on a
# loaded machine: it still issued while read)
db=$TMP/running.db
GPUMEM_STACKS=0 GPUMEM_DB=$db "$APP" steady "$TMP/count0" 1000 &
pid=$!
for _ in $(seq 600); do
  [[ $("$GPUMEM" sql "$db" -c "SELECT count(*) FROM events WHERE kind = 1" 2> /dev/null | tail -1) == 1000 ]] && break
  sleep 0.05
done
[[ $("$GPUMEM" sql "$db" -c "SELECT count(*) FROM events WHERE kind = 1" | tail -1) == 1000 ]] \
  || fail "the running program's 1,000 events are not all in its recording after 30 s"
check_ending running "$db" "$done_db" 1
# the gate of diff cannot pass a side cut short (its peak may not have been reached)
"$GPUMEM" diff "$db" "$done_db" --fail-if-peak-grows 1000 > /dev/null 2> "$TMP/gate.err"; rc=$?
[[ $rc -eq 3 ]] && grep -q "the gate cannot judge: the program of $db did not run to its end" "$TMP/gate.err" \
  || fail "diff --fail-if-peak-grows with a side still running exited $rc: $(cat "$TMP/gate.err")"
kill -9 $pid
wait $pid 2>/dev/null
# killed while it issues events: what the file lost. One event every 1.2 ms: 1.5 s of it stays
# under viz's 1,500 bands (one every 100 us made ~8,000 live allocations, and, before viz's bound
# on its bands, a page chromium took 14-30 s to draw, above); the writer commits every 25 ms
# whatever the rate
db=$TMP/killed.db
GPUMEM_STACKS=0 GPUMEM_DB=$db "$APP" steady "$TMP/count" 0 1200 &
pid=$!
sleep 1.5
kill -9 $pid
wait $pid 2>/dev/null
issued=$(od -An -t u8 -N 8 "$TMP/count" | tr -d ' ')
"$GPUMEM" report "$db" > "$TMP/report.txt"; rc=$?
[[ $rc -eq 0 ]] || { cat "$TMP/report.txt"; fail "gpumem report exited $rc on a killed process's database"; }
grep -q "did not end cleanly" "$TMP/report.txt" || fail "report does not say the recording was cut short"
read -r got t_last < <("$GPUMEM" sql "$db" -c "SELECT max(alloc_id), max(t) FROM events" | tail -1 | tr '|' ' ')
[[ -n $got && $got -gt 0 ]] || fail "no events in the database"
# events per ms from what was recorded; the missing tail in ms
missing_ms=$(( (issued - got) * t_last / got / 1000000 ))
echo "issued $issued, in the database $got, missing ~${missing_ms} ms"
(( missing_ms <= 150 )) || fail "lost ${missing_ms} ms of events (bar ~100 ms)"
check_ending killed "$db" "$done_db" 1
echo "ok: a recording still running, then killed: every output says the program did not run to its end"
