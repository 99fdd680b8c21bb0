#!/usr/bin/env bash
# Every count of events gpumem prints between two moments is a count of rows of `events`, not
# a difference of seq numbers: a launch's argument words (one record per 5 or 6 words) and the
# names given take seqs of their own with no row in `events`, so the difference says more
# events than there were. The table, on the tiny trainer recorded with GPUMEM_USES=1 (kernel
# launches between the allocations live at the peak and their uses):
#   report --json .idle_at_peak classes[] and sites[]: since_last_use_events is
#       SELECT count(*) FROM events WHERE seq > last_use_seq AND seq <= peak_seq, and
#       until_next_use_events the same over (peak_seq, next_use_seq];
#   report (text): each "last use ... / N events before" and "next use ... / N events after"
#       line says the JSON's N for its group (one analysis, two printers);
# and the recording really has seqs with no row between those moments (else the table could
# not tell the two apart).
# (The other commands print no count between two seqs: leaks, frag, diff, viz, export and
# ranks say event numbers, seqs, as identities, and their over-time stretches are said as
# stretches of event numbers.)
source "$(dirname "$0")/e2e_common.bash"
export GPUMEM_USES=1 GPUMEM_STACKS=4

"$GM" record -q -o "$TMP/t.db" -- "$TRAIN" --model tiny --data "$TEXT" --steps 2 -B 4 -T 64 \
  > "$TMP/train.out" 2>&1 || { cat "$TMP/train.out" >&2; fail "the trainer under gpumem record failed"; }
"$GM" report --json --top 50 "$TMP/t.db" > "$TMP/r.json" || fail "report --json failed"
"$GM" report --top 50 "$TMP/t.db" > "$TMP/r.txt" || fail "report failed"
jq -e '.idle_at_peak.uses' "$TMP/r.json" > /dev/null || fail "no uses in the recording: $(jq -c .idle_at_peak "$TMP/r.json")"
peak=$(jq -r '.idle_at_peak.peak_seq' "$TMP/r.json")

count() { "$GM" sql "$TMP/t.db" -c "SELECT count(*) FROM events WHERE seq > $1 AND seq <= $2" | tail -1; }

checked=0 differ=0
# one row per (list, index, side): list idx since_events last_seq until_events next_seq
while read -r list i sev lseq uev nseq; do
  if [[ $lseq != null ]]; then
    want=$(count "$lseq" "$peak")
    [[ $sev == "$want" ]] || fail "$list[$i].since_last_use_events = $sev, events in ($lseq, $peak]: $want"
    [[ $((peak - lseq)) != "$want" ]] && differ=$((differ + 1))
    checked=$((checked + 1))
  fi
  if [[ $nseq != null ]]; then
    want=$(count "$peak" "$nseq")
    [[ $uev == "$want" ]] || fail "$list[$i].until_next_use_events = $uev, events in ($peak, $nseq]: $want"
    [[ $((nseq - peak)) != "$want" ]] && differ=$((differ + 1))
    checked=$((checked + 1))
  fi
done < <(jq -r '.idle_at_peak | (["classes", .classes], ["sites", .sites]) as [$l, $a]
         | $a | to_entries[] | [$l, .key, .value.since_last_use_events, .value.last_use_seq,
           .value.until_next_use_events, .value.next_use_seq] | map(tostring) | join(" ")' "$TMP/r.json")
[[ $checked -gt 0 ]] || fail "no group with a use before or after the peak"
[[ $differ -gt 0 ]] || fail "no gap held seqs without a row: the recording cannot tell a count from a difference"
ok "report --json: $checked gaps, each the count of events in it ($differ of them fewer than the seq difference)"

# the text says the JSON's numbers: the sites' lines in order (the text prints the classes
# first when the recording names its tensors, then the sites, each --top 50)
jq -r '.idle_at_peak | ((if (.classes | length) > 0 then .classes else [] end) + .sites)[]
       | (if .since_last_use_events == null then "-" else .since_last_use_events end | tostring) + " " +
         (if .until_next_use_events == null then "-" else .until_next_use_events end | tostring)' \
  "$TMP/r.json" > "$TMP/want.txt"
awk '/^Idle at the peak/ { on = 1 } on && /^LEAK|^Leaks/ { on = 0 }
     on && /^        last use/ { s = ($0 ~ / events? before:/) ? $0 : "-"; if (s != "-") { sub(/ events? before:.*/, "", s); sub(/.* \/ /, "", s) } }
     on && /^        last use: none/ { s = "-" }
     on && /^        next use/ { u = ($0 ~ / events? after:/) ? $0 : "-"; if (u != "-") { sub(/ events? after:.*/, "", u); sub(/.* \/ /, "", u) }; print s, u }' \
  "$TMP/r.txt" > "$TMP/got.txt"
diff "$TMP/want.txt" "$TMP/got.txt" > "$TMP/d.txt" || { cat "$TMP/d.txt" >&2; fail "the text's event counts are not the JSON's"; }
ok "report (text): $(wc -l < "$TMP/got.txt") groups' 'N events before / after' say the JSON's counts"
