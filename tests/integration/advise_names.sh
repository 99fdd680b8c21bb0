#!/usr/bin/env bash
# `gpumem advise --try --grad-none`: each gradient is freed after its own parameter's update,
# found by name ("grad.X" is the gradient of the state "adam.m.X", "adam.v.X"). The trainer
# recorded for one step (the peak is then the optimizer's, where the gradients are freed), its
# per-parameter optimizer ranges merged into their block's ("opt/h0": one update a block, as an
# optimizer stepping a parameter group at once records it): three updates, sixteen gradients.
#  - by name, every gradient goes with its block's update: the predicted peak is below the one
#    of the same recording with the state renamed (no name matches: one gradient a group by
#    size, the other thirteen freed at the end of the step);
#  - and not below the recording with one update a parameter (each freed sooner still).
# (gm_advise.c looked the names up with 32-bit keys in a table of 64-bit ones: no gradient ever
# met its state by name, and both predictions were the renamed one's.)
source "$(dirname "$0")/e2e_common.bash"
export GPUMEM_STACKS=0

"$GM" record -q -o "$TMP/raw.db" -- "$TRAIN" -B 1 -T 8 --steps 1 > "$TMP/out.txt" 2>&1 || fail "trainer: $(tail -3 "$TMP/out.txt")"
(( $(sqlite3 "$TMP/raw.db" "SELECT count(*) FROM ranges WHERE path LIKE '%/adamw'") == \
   $(sqlite3 "$TMP/raw.db" "SELECT count(*) FROM strings WHERE s LIKE 'adam.m.%'") )) \
  || fail "the trainer's optimizer ranges changed: $(sqlite3 "$TMP/raw.db" "SELECT group_concat(DISTINCT path) FROM ranges WHERE path LIKE '%/opt%'")"
cp "$TMP/raw.db" "$TMP/block.db"
sqlite3 "$TMP/block.db" "UPDATE events SET range = (SELECT parent FROM ranges r WHERE r.id = events.range)
                           WHERE range IN (SELECT id FROM ranges WHERE path LIKE '%/adamw');
                         DELETE FROM ranges WHERE path LIKE '%/adamw';"
cp "$TMP/block.db" "$TMP/unnamed.db"
sqlite3 "$TMP/unnamed.db" "UPDATE strings SET s = s || '~' WHERE s LIKE 'adam.%'"
pred() { # db -> predicted peak allocated under --grad-none
  "$GM" advise "$1" --try --grad-none --json > "$TMP/a.json" || fail "advise $1 --try --grad-none"
  jq -e '.recommendations[0].predicted.peak_allocated' "$TMP/a.json" || fail "$1: no prediction: $(head -c 300 "$TMP/a.json")"
}
raw=$(pred "$TMP/raw.db")
block=$(pred "$TMP/block.db")
unnamed=$(pred "$TMP/unnamed.db")
(( block < unnamed )) || fail "a block's update: the gradients found by name predict $block bytes, as many as without the names ($unnamed)"
(( block >= raw )) || fail "a block's update predicts $block bytes, below one update a parameter ($raw)"
ok "--grad-none, gradients found by name: $raw (an update a parameter) <= $block (a block's) < $unnamed (state renamed)"
