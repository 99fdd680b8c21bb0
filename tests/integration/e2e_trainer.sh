#!/usr/bin/env bash
# The trainer under gpumem: (1) its losses are bit-identical with and without gpumem;
# (2) the peak the database reports equals the trainer's own count of live tensor bytes at
# its peak, exactly (requested bytes: the trainer counts what it asked for, gpumem also
# reports the rounded bytes the allocator held).
source "$(dirname "$0")/e2e_common.bash"
steps=12
[[ -n ${SAN:-} ]] && steps=4
args=(--model tiny --data "$TEXT" --steps "$steps" -B 4 -T 64 --seed 7)
"$TRAIN" "${args[@]}" > "$TMP/plain.txt" 2>&1 || fail "trainer without gpumem: $(tail -3 "$TMP/plain.txt")"
"$GM" record -q -o "$TMP/run.db" -- "$TRAIN" "${args[@]}" > "$TMP/rec.txt" 2>&1 \
  || fail "trainer under gpumem: $(tail -3 "$TMP/rec.txt")"
losses "$TMP/plain.txt" > "$TMP/l1"; losses "$TMP/rec.txt" > "$TMP/l2"
[[ $(wc -l < "$TMP/l1") -eq $steps ]] || fail "expected $steps loss lines, got $(wc -l < "$TMP/l1")"
cmp -s "$TMP/l1" "$TMP/l2" || { diff "$TMP/l1" "$TMP/l2" | head >&2; fail "losses differ under gpumem"; }
ok "losses bit-identical with and without gpumem ($steps steps)"

want=$(trainer_peak "$TMP/rec.txt")
[[ $want == "$(trainer_peak "$TMP/plain.txt")" ]] || fail "trainer's own peak differs under gpumem"
"$GM" report --json "$TMP/run.db" > "$TMP/r.json" || fail "gpumem report failed"
got=$(jq -r '.summary.peak_requested' "$TMP/r.json")
[[ $got == "$want" ]] || fail "database peak requested $got != trainer's PEAK $want"
ok "database peak (requested bytes) $got == trainer's PEAK $want"
alloc=$(jq -r '.summary.peak_allocated' "$TMP/r.json")
(( alloc >= want )) || fail "peak allocated (rounded) $alloc < requested peak $want"
ok "peak allocated (rounded to the allocator's blocks) $alloc >= $want"
# the peak is named by tensor, step/phase and call site, the same in text and JSON
read -r pname pphase < <(jq -r '.peak_requested_at | "\(.name) \(.phase)"' "$TMP/r.json")
[[ $pname != null && $pphase == "step "* ]] || fail "the peak is not named by tensor and step ($pname, $pphase)"
"$GM" report "$TMP/run.db" > "$TMP/r.txt" || fail "gpumem report (text) failed"
grep -q "when $pname was allocated in $pphase at .*gpt2.c:[0-9]" "$TMP/r.txt" \
  || fail "the text report does not place the peak ($pname in $pphase at a gpt2.c line)"
ok "the peak is placed: $pname allocated in $pphase"
# honest figures: driver calls are counted by function (not segment events), cache hits flagged
jq -e '.summary.driver_calls_counted == true' "$TMP/r.json" > /dev/null || fail "driver calls were not counted by function"
calls=$(jq -r '.summary.driver_calls' "$TMP/r.json")
sum=$("$GM" sql "$TMP/run.db" -c "SELECT sum(value) FROM meta WHERE key LIKE 'stat.driver.%'" | tail -1)
maps=$("$GM" sql "$TMP/run.db" -c "SELECT value FROM meta WHERE key = 'stat.driver.cuMemMap'" | tail -1)
segs=$("$GM" sql "$TMP/run.db" -c "SELECT count(*) FROM events WHERE kind = 14" | tail -1)
[[ $calls == "$sum" && $calls -gt $segs && $maps -ge $segs ]] || fail "driver calls $calls, per function $sum, cuMemMap $maps, segment maps $segs"
hits=$("$GM" sql "$TMP/run.db" -c "SELECT count(*) FROM events WHERE kind IN (1,3) AND flags = 256" | tail -1)
miss=$("$GM" sql "$TMP/run.db" -c "SELECT count(*) FROM events WHERE kind IN (1,3) AND flags = 512" | tail -1)
all=$("$GM" sql "$TMP/run.db" -c "SELECT count(*) FROM events WHERE kind IN (1,3)" | tail -1)
(( hits > 0 && miss > 0 && hits + miss == all )) || fail "cache flags: $hits hits + $miss misses != $all allocations"
ok "driver calls $calls counted by function ($maps cuMemMap for $segs segment maps); $hits cache hits, $miss misses flagged"
# the peak snapshot (taken lazily, at the first free after a new peak) shows the peak itself
snap=$("$GM" sql "$TMP/run.db" -c "SELECT (SELECT sum(mapped) FROM segments g WHERE g.snapshot = s.id) FROM snapshots s WHERE reason = 1 ORDER BY id DESC LIMIT 1" | tail -1)
[[ $snap == "$(jq -r '.summary.peak_reserved' "$TMP/r.json")" ]] || fail "peak snapshot maps $snap bytes, peak reserved is $(jq -r '.summary.peak_reserved' "$TMP/r.json")"
ok "the peak snapshot holds the peak reserved ($snap bytes)"
