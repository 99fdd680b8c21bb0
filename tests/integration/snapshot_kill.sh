#!/usr/bin/env bash
# A program killed with SIGKILL mid-run leaves a database that `gpumem report` reads, missing
# at most the last ~100 ms of events (commits every 25 ms; 150 ms allowed for a loaded machine: this estimate
# assumes a steady event rate).
source tests/integration/snapshot_common.bash
need "$GPUMEM" "$APP"
db=$TMP/killed.db
GPUMEM_STACKS=0 GPUMEM_DB=$db "$APP" steady "$TMP/count" &
pid=$!
sleep 1.5
kill -9 $pid
wait $pid 2>/dev/null
issued=$(od -An -t u8 -N 8 "$TMP/count" | tr -d ' ')
"$GPUMEM" report "$db" > "$TMP/report.txt"; rc=$?
[[ $rc -eq 0 ]] || { cat "$TMP/report.txt"; fail "gpumem report exited $rc on a killed process's database"; }
grep -q "did not end cleanly" "$TMP/report.txt" || fail "report does not say the recording was cut short"
read -r got t_last < <("$GPUMEM" sql "$db" -c "SELECT max(requested), max(t) FROM events" | tail -1 | tr '|' ' ')
[[ -n $got && $got -gt 0 ]] || fail "no events in the database"
# events per ms from what was recorded; the missing tail in ms
missing_ms=$(( (issued - got) * t_last / got / 1000000 ))
echo "issued $issued, in the database $got, missing ~${missing_ms} ms"
(( missing_ms <= 150 )) || fail "lost ${missing_ms} ms of events (bar ~100 ms)"
