#!/usr/bin/env bash
# categories_trainer.sh — the included trainer recorded twice, with its tensor names and NVTX
# ranges and with both switched off (GPUMEM_NAMES=0 GPUMEM_NVTX=0: what an unannotated binary
# gives), issue 39: the categories inferred from lifetimes (steps from the recording's
# periodicity, forward / backward / update from the allocations) agree with those the names and
# phases give for at least 98% of the bytes at the peak. Tiny with real compute (plain,
# --grad-none, --accum 2) and gpt2 124M (B 8, T 1024, dry run, 3 steps). The switches: the
# recording without them has no names, no ranges and says so in meta.
set -uo pipefail
source "$(dirname "$0")/snapshot_common.bash"
TRAIN=$BUILD/train_gpt2_sim
need "$GPUMEM" "$TRAIN"
command -v jq > /dev/null || fail "jq is missing (make deps installs it)"
lib=tests/integration/categories_lib.py
BAR=98

run() { # NAME ARGS...: records NAME-on (annotated) and NAME-off (names and NVTX off), reports both
  local name=$1
  shift
  "$GPUMEM" record -q -o "$TMP/$name-on.db" -- "$TRAIN" "$@" > /dev/null 2>&1 || fail "$name: recording"
  GPUMEM_NAMES=0 GPUMEM_NVTX=0 "$GPUMEM" record -q -o "$TMP/$name-off.db" -- "$TRAIN" "$@" > /dev/null 2>&1 \
    || fail "$name: recording without names and NVTX"
  for v in on off; do
    GPUMEM_CATEGORY_DUMP=$TMP/$name-$v.dump "$GPUMEM" report --json "$TMP/$name-$v.db" > "$TMP/$name-$v.json" \
      || fail "$name-$v: report"
  done
}

run tiny --model tiny -B 4 -T 64 --steps 4
# the switches
read -r n r mn mr < <("$GPUMEM" sql "$TMP/tiny-off.db" -c "SELECT (SELECT count(*) FROM names), (SELECT count(*) FROM ranges),
    (SELECT value FROM meta WHERE key = 'names'), (SELECT value FROM meta WHERE key = 'nvtx')" | tail -n 1 | tr '|' ' ')
[[ $n == 0 && $r == 0 && $mn == 0 && $mr == 0 ]] || fail "GPUMEM_NAMES=0 GPUMEM_NVTX=0: names $n, ranges $r, meta $mn $mr"
read -r n r < <("$GPUMEM" sql "$TMP/tiny-on.db" -c "SELECT (SELECT count(*) FROM names), (SELECT count(*) FROM ranges)" | tail -n 1 | tr '|' ' ')
[[ $n -gt 100 && $r -gt 100 ]] || fail "the annotated recording has $n names, $r ranges"
echo "ok: GPUMEM_NAMES=0 GPUMEM_NVTX=0 record no names and no ranges (meta names 0, nvtx 0); the default run $n names, $r ranges"
# the sources each run's categories come from
[[ $(jq -r '[.category_source.parameters, .category_source.gradients, .category_source.optimizer_state, .category_source.activations] | join(" ")' "$TMP/tiny-on.json") == "names names names phases" ]] \
  || fail "annotated sources: $(jq -c .category_source "$TMP/tiny-on.json")"
[[ $(jq -r '[.category_source[] | select(. != null)] | unique | join(" ")' "$TMP/tiny-off.json") == inference ]] \
  || fail "unannotated sources: $(jq -c .category_source "$TMP/tiny-off.json")"

check() { # NAME: agreement of NAME-off with NAME-on at the peak
  local out pct
  out=$(python3 "$lib" agree "$TMP/$1-on.dump" "$TMP/$1-off.dump" "$TMP/$1-off.json") || fail "$1: $out"
  pct=$(awk '/^agreement/ { sub("%", "", $2); print $2 }' <<< "$out")
  awk -v p="$pct" -v b=$BAR 'BEGIN { exit !(p >= b) }' || fail "$1: $out"
  echo "ok: $1: inferred categories agree with the names' and phases' for $pct% of the bytes at the peak (bar $BAR%)"
}
check tiny
run gradnone --model tiny -B 4 -T 64 --steps 4 --grad-none
check gradnone
run accum --model tiny -B 4 -T 64 --steps 4 --accum 2
check accum
GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G run gpt2 --model gpt2 -B 8 -T 1024 --steps 3 --dry-run
check gpt2
