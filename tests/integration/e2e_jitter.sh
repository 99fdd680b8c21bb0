#!/usr/bin/env bash
# Fragmentation: --seq-jitter (T drawn per step) with classic segments
# (expandable_segments:False) has a lower utilization in `gpumem report` than the same run with
# expandable segments, and each utilization is what the replay engine computes from the
# recorded trace under the same config.
source "$(dirname "$0")/e2e_common.bash"
REPLAY=$BUILD/alloc/gpumem-replay
[[ -x $REPLAY ]] || { echo "skipped: $REPLAY is not built" >&2; exit 77; }
export GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G GPUMEM_STACKS=0
args=(--model gpt2 -B 4 -T 1024 --dry-run --steps 6 --seq-jitter --seed 11)
declare -A util
for conf in expandable_segments:True expandable_segments:False; do
  GPUMEM_CONF=$conf "$GM" record -q -o "$TMP/$conf.db" -- "$TRAIN" "${args[@]}" > "$TMP/out.txt" 2>&1 \
    || fail "jitter run under $conf: $(tail -3 "$TMP/out.txt")"
  "$GM" report --json "$TMP/$conf.db" > "$TMP/r.json"
  util[$conf]=$(jq -r '.summary.utilization' "$TMP/r.json")
  # The recorded trace in the replay engine's text format (requested sizes, recorded order).
  "$GM" export --format trace "$TMP/$conf.db" > "$TMP/$conf.trace" || fail "gpumem export failed"
  "$REPLAY" --preset gpumem --conf "$conf" --capacity 80G "$TMP/$conf.trace" > "$TMP/$conf.replay" \
    || fail "replay of the $conf trace failed"
  replay_alloc=$(sed -n 's/.* peak_allocated=\([0-9]*\).*/\1/p' "$TMP/$conf.replay")
  replay_res=$(sed -n 's/.* peak_reserved=\([0-9]*\).*/\1/p' "$TMP/$conf.replay")
  rec_alloc=$(jq -r '.summary.peak_allocated' "$TMP/r.json")
  rec_res=$(jq -r '.summary.peak_reserved' "$TMP/r.json")
  [[ $replay_alloc == "$rec_alloc" && $replay_res == "$rec_res" ]] \
    || fail "$conf: recorded peaks allocated/reserved $rec_alloc/$rec_res, replay $replay_alloc/$replay_res"
  ok "$conf: utilization ${util[$conf]} (peak allocated $rec_alloc / reserved $rec_res), replay agrees"
done
awk -v e="${util[expandable_segments:True]}" -v c="${util[expandable_segments:False]}" \
  'BEGIN { exit !(c < e) }' || fail "classic segments (${util[expandable_segments:False]}) not below expandable (${util[expandable_segments:True]})"
ok "classic segments waste more under jitter: ${util[expandable_segments:False]} < ${util[expandable_segments:True]}"
