#!/usr/bin/env bash
# A full disk loses nothing silently: the trainer recorded onto a 256 KiB tmpfs runs exactly as
# without gpumem (same losses, same peak), and what was written says the recording failed for
# lack of space (state = failed, the reason naming ENOSPC), in the report's text and JSON; and a
# disk too full for even the schema leaves no file, one message, and exit 3.
source tests/integration/snapshot_common.bash
need "$GPUMEM"
TRAIN=$BUILD/train_gpt2_sim
[[ -f $BUILD/libgpumem.so && -x $TRAIN ]] || { echo "skipped: libgpumem.so or the trainer not built" >&2; exit 77; }
mkdir -p "$TMP/full"
if ! mount -t tmpfs -o size=256k gpumem-full "$TMP/full" 2> /dev/null; then
  echo "skipped: cannot mount a small tmpfs here (needs root with CAP_SYS_ADMIN)" >&2; exit 77
fi
trap 'umount "$TMP/full" 2> /dev/null; rm -rf "$TMP"' EXIT
# what a run prints that does not depend on timing: the losses and the peak
essence() { grep -oE '^step [0-9]+/[0-9]+ loss [0-9.]+|^PEAK [0-9]+ bytes' "$1"; }
"$TRAIN" --steps 20 > "$TMP/plain.txt" 2>&1 || fail "the trainer alone failed"
t0=$EPOCHREALTIME
"$GPUMEM" record -o "$TMP/full/run.db" -- "$TRAIN" --steps 20 > "$TMP/rec.txt" 2> "$TMP/rec.err"; rc=$?
full_ms=$(( (${EPOCHREALTIME/./} - ${t0/./}) / 1000 ))
diff <(essence "$TMP/plain.txt") <(essence "$TMP/rec.txt") > /dev/null \
  || fail "the trainer's output differs when the recording runs out of space"
[[ $(essence "$TMP/rec.txt" | wc -l) -eq 21 ]] || fail "the trainer did not print 20 steps and its peak"
grep -q "recorder: no space left on device (ENOSPC)" "$TMP/rec.err" || { cat "$TMP/rec.err"; fail "no one-line ENOSPC message"; }
grep -q "the recording FAILED (no space left on device" "$TMP/rec.err" || { cat "$TMP/rec.err"; fail "record's summary does not say the recording failed"; }
# the trainer allocated: a summary of what the full disk let through must not say it made none
grep -q "made no device or pinned allocation" "$TMP/rec.err" && { cat "$TMP/rec.err"; fail "record's summary says the trainer made no allocation (the events were lost, not absent)"; }
grep -q "the counts above are what the database kept" "$TMP/rec.err" || { cat "$TMP/rec.err"; fail "record's summary does not say its counts are only what was kept"; }
# what record's summary must not say of a recording that lost events, and what it must say instead:
# no "nothing allocated" (the allocations were lost, not absent); no "see gpumem report FILE" (report
# refuses it): --lossy-ok, or that nothing in it is worth reading; a -wal left beside it is explained
while IFS='@' read -r want pattern why; do
  if grep -qE "$pattern" "$TMP/rec.err"; then has=yes; else has=no; fi
  [[ $has == "$want" ]] || { cat "$TMP/rec.err"; fail "$why"; }
done <<'ROWS'
no@^gpumem: nothing allocated@the summary says nothing was allocated while events were lost
no@^gpumem: recorded to .*; see .* report [^-]@record points at gpumem report, which refuses the file
yes@report --lossy-ok .*run\.db reads what was kept|^gpumem: .*run\.db holds no allocation of the program .*nothing in it is worth reading@record says neither how to read the file nor that nothing in it is
ROWS
if [[ -s $TMP/full/run.db-wal ]]; then
  grep -q "run.db-wal beside it holds part of the recording" "$TMP/rec.err" || { cat "$TMP/rec.err"; fail "a -wal is left unexplained"; }
fi
# the program ran to its end (status 0), but FILE is not the whole run: record exits 3, and says both
[[ $rc -eq 3 ]] || { cat "$TMP/rec.err"; fail "record onto a disk that filled during the run exited $rc, want 3"; }
grep -q "^gpumem: the program exited with status 0; exit 3: the recording could not be written whole$" "$TMP/rec.err" \
  || { cat "$TMP/rec.err"; fail "record does not say the program's status and why it exits 3"; }
# it lost events: refused (exit 3) unless --lossy-ok, whose first line says so
"$GPUMEM" report "$TMP/full/run.db" > /dev/null 2> "$TMP/refused.txt"; rc=$?
[[ $rc == 3 ]] && grep -q "the recording failed.*--lossy-ok" "$TMP/refused.txt" || fail "report without --lossy-ok: exit $rc, $(cat "$TMP/refused.txt")"
"$GPUMEM" report --lossy-ok "$TMP/full/run.db" > "$TMP/rep.txt" || fail "the report does not read what was written"
head -1 "$TMP/rep.txt" | grepq "^gpumem: WARNING: .* lost [0-9]* events (the recording failed" || fail "first line: $(head -1 "$TMP/rep.txt")"
grep -q "the recording FAILED: no space left on device (ENOSPC)" "$TMP/rep.txt" || { cat "$TMP/rep.txt"; fail "the report does not say the recording failed for lack of space"; }
"$GPUMEM" report --json --lossy-ok "$TMP/full/run.db" 2> /dev/null | jq -e '.state == "failed" and (.failure | test("ENOSPC"))' > /dev/null \
  || fail "report --json lacks state=failed with the ENOSPC reason"
# every event that did not make it is counted: what was committed plus the dropped count covers
# all the events of the same run recorded where there is room (drops count ring records, ranges
# included, so at least that many); the count is written at close, after the failure's commit
t0=$EPOCHREALTIME
"$GPUMEM" record -o "$TMP/room.db" -- "$TRAIN" --steps 20 > /dev/null 2>&1 || fail "the trainer recorded with room failed"
room_ms=$(( (${EPOCHREALTIME/./} - ${t0/./}) / 1000 ))
# the program's exit is not held up by the failed recording: its exit handler's flush waited 10 s
# for a writer that commits nothing more (rec_flush); 5 s of slack for a loaded machine
echo "the run onto the full disk took $full_ms ms, with room $room_ms ms"
(( full_ms < room_ms + 5000 )) || fail "the run onto a full disk took $full_ms ms, with room $room_ms ms: its exit waited for the failed writer"
all=$("$GPUMEM" report --json "$TMP/room.db" | jq '.summary.events')
read -r kept dropped < <("$GPUMEM" report --json --lossy-ok "$TMP/full/run.db" 2> /dev/null | jq -r '"\(.summary.events) \(.summary.dropped_events)"')
(( kept + dropped >= all && dropped > 0 )) \
  || fail "events lost without being counted: $kept committed + $dropped dropped < $all recorded with room"
grep -qE "dropped events +$dropped \(the recording failed" "$TMP/rep.txt" \
  || { cat "$TMP/rep.txt"; fail "the report does not tie the dropped events to the failure"; }
echo "ok: 256 KiB disk: $kept events committed, $dropped dropped (with room: $all events)"

# A disk too full for even the schema (48 KiB): the file the recorder made holds nothing and is
# removed; one line says the disk is full (no "recording stops here ... what was committed
# stays" for a recording that never started); record says how the program ended (its own exit
# status, 5 here) and exits 3: the recording could not be written
mkdir -p "$TMP/tiny"
mount -t tmpfs -o size=48k gpumem-tiny "$TMP/tiny" || fail "cannot mount the second tmpfs"
trap 'umount "$TMP/full" "$TMP/tiny" 2> /dev/null; rm -rf "$TMP"' EXIT
"$GPUMEM" record -o "$TMP/tiny/run.db" -- sh -c "\"$TRAIN\" --model tiny --steps 1 -B 2 -T 32 > /dev/null; exit 5" \
  > /dev/null 2> "$TMP/tiny.err"; rc=$?
[[ $rc == 3 ]] || { cat "$TMP/tiny.err"; fail "record onto a disk too full to set up: exit $rc, want 3"; }
[[ -z $(ls -A "$TMP/tiny") ]] || fail "a file the recorder could not set up was left: $(ls -la "$TMP/tiny")"
[[ $(grep -c "no space left on device" "$TMP/tiny.err") == 1 ]] && grep -q "^gpumem: recorder: cannot set up $TMP/tiny/run.db: no space left on device (ENOSPC)" "$TMP/tiny.err" \
  || { cat "$TMP/tiny.err"; fail "not one line that says the disk is full"; }
grep -q "recording stops here\|what was committed stays\|stopped before its first commit" "$TMP/tiny.err" \
  && { cat "$TMP/tiny.err"; fail "a recording that never started is said to have committed something"; }
grep -q "^gpumem: nothing was recorded; the program exited with status 5; exit 3: the recording could not be written$" "$TMP/tiny.err" \
  || { cat "$TMP/tiny.err"; fail "the program's own exit status is not said"; }
echo "ok: 48 KiB disk: no file left, one line (ENOSPC), the program's status 5 said, exit 3"
echo "ok: 256 KiB disk: trainer output unchanged, the database says the recording failed (ENOSPC)"
