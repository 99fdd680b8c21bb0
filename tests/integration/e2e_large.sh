#!/usr/bin/env bash
# A 2-step --dry-run of gpt2-large on an 80G virtual device, recorded and reported; the
# database's peak equals the trainer's own count.
source "$(dirname "$0")/e2e_common.bash"
export GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G
"$GM" record -q -o "$TMP/large.db" -- "$TRAIN" --model gpt2-large -B 8 -T 1024 --dry-run --steps 2 \
  > "$TMP/out.txt" 2>&1 || fail "gpt2-large dry run failed: $(tail -3 "$TMP/out.txt")"
want=$(trainer_peak "$TMP/out.txt")
"$GM" report --json "$TMP/large.db" > "$TMP/r.json" || fail "gpumem report failed"
got=$(jq -r '.summary.peak_requested' "$TMP/r.json")
[[ $got == "$want" ]] || fail "database peak $got != trainer's PEAK $want"
[[ $(jq -r '.summary.ooms' "$TMP/r.json") == 0 ]] || fail "unexpected OOM"
"$GM" report "$TMP/large.db" | sed -n '1,/^$/p;/^Summary/,/^$/p'
ok "gpt2-large B=8 T=1024 dry run recorded: peak $got bytes"
