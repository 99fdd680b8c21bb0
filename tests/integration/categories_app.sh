#!/usr/bin/env bash
# categories_app.sh — categories from lifetimes alone (issue 39): tests/apps/cat_app.c plants a
# training loop (parameters, a forward with activations, temporaries and a library workspace made
# on first need, a backward that makes the gradients in the first step, an update that makes the
# optimizer state in the first step, a growth of one buffer per step) in plain cudaMalloc/cudaFree
# calls without names or NVTX ranges, and prints each allocation's category. `gpumem report`
# must put every allocation in it, from the source "inference"; the JSON contract
# (categories_at_peak, category_source) holds; with 2 steps no step repeats, and the report says
# so instead of guessing.
set -uo pipefail
source "$(dirname "$0")/snapshot_common.bash"
APP=$BUILD/tests/apps/cat_app
need "$GPUMEM" "$APP"
lib=tests/integration/categories_lib.py

"$GPUMEM" record -q -o "$TMP/app.db" -- "$APP" 5 > "$TMP/app.out" 2>&1 || fail "cat_app under gpumem record"
GPUMEM_CATEGORY_DUMP=$TMP/app.dump "$GPUMEM" report --json "$TMP/app.db" > "$TMP/app.json" || fail "report --json"
python3 "$lib" expect "$TMP/app.out" "$TMP/app.dump" || fail "categories of cat_app"
echo "ok: every allocation of the planted loop in its category"

keys=$(jq -r '.categories_at_peak | keys_unsorted | join(" ")' "$TMP/app.json")
[[ $keys == "parameters gradients optimizer_state activations temporaries workspaces other" ]] \
  || fail "categories_at_peak keys: $keys"
[[ $(jq -r '.category_source | keys_unsorted | join(" ")' "$TMP/app.json") == "$keys" ]] || fail "category_source keys"
# every category with bytes at the peak was decided by inference; the others say null
bad=$(jq -r '. as $r | .categories_at_peak | to_entries[]
            | select((.value > 0 and $r.category_source[.key] != "inference") or (.value == 0 and $r.category_source[.key] != null))
            | .key' "$TMP/app.json")
[[ -z $bad ]] || fail "category_source wrong for: $bad"
sum=$(jq '[.categories_at_peak[]] | add' "$TMP/app.json")
live=$(jq '.peak.live_bytes' "$TMP/app.json")
[[ $sum == "$live" ]] || fail "the categories add up to $sum at the peak, the peak holds $live"
# at the peak (the first backward allocation of a steady step): 4 parameters, their gradients,
# twice as much optimizer state, the workspace, 4 activations + logits + probs + the input, and
# the logits' gradient; the growth of the steps before
want='{"parameters":458752,"gradients":458752,"optimizer_state":917504,"activations":9453568,"temporaries":4194304,"workspaces":3145728}'
got=$(jq -c '.categories_at_peak | del(.other)' "$TMP/app.json")
[[ $got == "$want" ]] || fail "categories_at_peak $got, expected $want"
[[ $(jq -r '.categories.steps_from + " " + .categories.phases_from + " " + (.categories.steps|tostring)' "$TMP/app.json") == "inference inference 5" ]] \
  || fail "steps: $(jq -c .categories "$TMP/app.json" | head -c 300)"
[[ $(jq '.categories.over_time | length' "$TMP/app.json") == 5 ]] || fail "over time: not one row per step"
echo "ok: JSON contract: categories_at_peak $got (+ other), every one from inference, 5 steps of $(jq .categories.period "$TMP/app.json") allocations"
"$GPUMEM" report "$TMP/app.db" > "$TMP/app.txt" 2>&1
grep -q '^By category (at the peak allocated moment' "$TMP/app.txt" && grep -q 'optimizer state  from inference' "$TMP/app.txt" \
  && grep -q 'over time (each step' "$TMP/app.txt" || fail "text table: $(sed -n '/^By category/,/^Idle/p' "$TMP/app.txt")"
echo "ok: the text's by-category table, over time too"

# 2 steps: the second is the only steady one, nothing repeats: not decided, and said
"$GPUMEM" record -q -o "$TMP/two.db" -- "$APP" 2 > /dev/null 2>&1 || fail "cat_app 2"
"$GPUMEM" report --json "$TMP/two.db" > "$TMP/two.json" || fail "report two"
[[ $(jq -r '.categories.phases_from' "$TMP/two.json") == null && $(jq -r '.categories.why' "$TMP/two.json") == *"differ"* ]] \
  || fail "2 steps: $(jq -c .categories "$TMP/two.json" | head -c 300)"
[[ $(jq -r '.category_source.other' "$TMP/two.json") == none && $(jq '.categories_at_peak.other' "$TMP/two.json") == $(jq '.peak.live_bytes' "$TMP/two.json") ]] \
  || fail "2 steps: what is not decided is other, from none"
"$GPUMEM" report "$TMP/two.db" > "$TMP/two.txt" 2>&1
grep -q 'not decided: no repeating pattern' "$TMP/two.txt" || fail "2 steps: the text does not say why"
echo "ok: 2 steps: not decided, said why"
