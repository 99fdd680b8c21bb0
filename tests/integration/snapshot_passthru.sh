#!/usr/bin/env bash
# Memory the driver gives the program outside gpumem's allocator is the same under every
# configuration, and tune, frag, advise and the trace export replay it so (README, "What each
# figure counts"; alloc/README.md, `ad`). For each kind of tests/apps/kinds_app — a pool the
# program chose (flag 2048: 8 MiB, 16 x 64 KiB that B's cached small segment could hold, and 8 MiB
# of cudaMallocAsync after cudaDeviceSetMemPool), a
# graph's memory node (16384: captured, and made node by node), managed memory and the program's
# own VMM (in neither allocated nor reserved) — recorded under each preset:
#   - tune's replay of that preset predicts exactly the peaks `report` gives for the recording
#     made under it (allocated and reserved), and so does `export --format trace` replayed by
#     gpumem-replay: a configuration cannot seem to save what the program's pool held;
#   - tune --check and frag --search --check (tune's answer; frag alone finds no single change here): predicted == measured, and measured is what report and
#     `recorded` count (the re-run database's running sums, not the allocator's statistics,
#     which leave the pass-through out);
#   - advise's baseline (the recorded configuration replayed) is the recording's peaks;
#   - the pass-through takes the device's memory in the replay too: the exported trace fits a
#     device (--capacity) of the recorded peak reserved and is an OOM with no limit (the device's)
#     on one 1 MiB smaller (the replay once left `ad` bytes out of the capacity: no OOM).
set -uo pipefail
BUILD=${BUILD:-build}
GM=$PWD/$BUILD/gpumem
APP=$PWD/$BUILD/tests/apps/kinds_app
REPLAY=$PWD/$BUILD/alloc/gpumem-replay
for f in "$GM" "$APP" "$REPLAY" "$BUILD/libgpumem.so"; do [[ -e $f ]] || { echo "missing $f (run make)" >&2; exit 1; }; done
command -v jq > /dev/null || { echo "FAIL: jq is missing (make deps installs it)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/gpumem-passthru.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
unset GPUMEM_MODE GPUMEM_LIMIT GPUMEM_CONF GPUMEM_DB
export GPUMEM_QUIET=1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
presets="gpumem pytorch pytorch-expandable nocache"

# kind | bytes passed through at once
table="pool 8388608
poolsmall 1048576
setpool 8388608
graph 8388608
graphnode 8388608
managed 0
vmm 0"

while read -r kind bytes; do
  declare -A meas=()
  for p in $presets; do
    db=$TMP/$kind-$p.db
    GPUMEM_CONF=preset:$p "$GM" record -q -o "$db" -- "$APP" "$kind" > "$TMP/rec.txt" 2>&1 \
      || { fail "$kind: recording under preset:$p: $(tail -2 "$TMP/rec.txt")"; continue 2; }
    meas[$p]=$("$GM" report --json "$db" | jq -r '"\(.summary.peak_allocated) \(.summary.peak_reserved)"')
  done
  db=$TMP/$kind-gpumem.db
  # the pass-through really is in the recording (flag 2048 / 16384), or not at all
  n=$(sqlite3 "$db" "SELECT coalesce(sum(size), 0) FROM events WHERE kind IN (1, 3) AND flags & (2048 | 16384)")
  [[ $n == "$bytes" ]] || fail "$kind: $n bytes passed through recorded, expected $bytes"

  # tune's replay of each preset against the recording made under it; the trace export alike
  "$GM" tune --json "$db" > "$TMP/tune.json" 2> "$TMP/tune.err" || fail "$kind: tune exited $?: $(tail -2 "$TMP/tune.err")"
  "$GM" export --format trace "$db" -o "$TMP/$kind.trace" || fail "$kind: export --format trace"
  [[ $bytes == 0 ]] || grep -c '^ad ' "$TMP/$kind.trace" > /dev/null || fail "$kind: the trace has no 'ad' line"
  td=$([[ $(sqlite3 "$db" "SELECT value FROM meta WHERE key = 'alloc.address_order'") == down ]] && echo --top-down)
  for p in $presets; do
    read -r ma mr <<< "${meas[$p]}"
    read -r ta tr < <(jq -r --arg c "preset:$p" '[.results[] | select(.conf == $c)][0] | "\(.peak_allocated) \(.peak_reserved)"' "$TMP/tune.json")
    [[ $ta == "$ma" && $tr == "$mr" ]] && ok "$kind preset:$p: tune predicts allocated $ta reserved $tr, as recorded under it" \
      || fail "$kind preset:$p: tune predicts allocated $ta reserved $tr; recorded under it: allocated $ma reserved $mr"
    line=$("$REPLAY" --preset "$p" $td "$TMP/$kind.trace")
    ra=$(sed -n 's/.* peak_allocated=\([0-9]*\).*/\1/p' <<< "$line")
    rr=$(sed -n 's/.* peak_reserved=\([0-9]*\).*/\1/p' <<< "$line")
    [[ $ra == "$ma" && $rr == "$mr" ]] || fail "$kind preset:$p: the exported trace replays to allocated $ra reserved $rr; recorded under it: allocated $ma reserved $mr"
  done
  read -r ma mr <<< "${meas[gpumem]}"
  if [[ $bytes != 0 ]]; then
    fit=$("$REPLAY" --preset gpumem $td --capacity "$mr" "$TMP/$kind.trace" | grep -o 'oom_at=[-0-9]*')
    short=$("$REPLAY" --preset gpumem $td --capacity $((mr - 1048576)) "$TMP/$kind.trace" | grep -o 'oom_at=[-0-9]* .*oom_limit=[a-z0-9]*' | sed 's/ .* / /')
    [[ $fit == oom_at=-1 && $short =~ ^oom_at=[0-9]+\ oom_limit=none$ ]] \
      && ok "$kind: the trace fits --capacity $mr (the recorded peak reserved), 1 MiB less is the device's OOM ($short)" \
      || fail "$kind: the trace under --capacity $mr: '$fit' (oom_at=-1 expected), 1 MiB less: '$short' (an OOM with oom_limit=none expected)"
  fi
  jq -e --argjson r "$mr" '.recorded.peak_reserved == $r' "$TMP/tune.json" > /dev/null \
    || fail "$kind: tune's recorded $(jq .recorded.peak_reserved "$TMP/tune.json") is not report's $mr"

  # --check: predicted == measured, the same quantity as recorded
  "$GM" tune --check --json "$db" > "$TMP/tcheck.json" 2> "$TMP/tcheck.err" || fail "$kind: tune --check exited $?: $(tail -2 "$TMP/tcheck.err")"
  read -r conf pa pr ca cr < <(jq -r '"\(.recommended.conf) \(.recommended.predicted.peak_allocated) \(.recommended.predicted.peak_reserved) \(.check.measured.peak_allocated) \(.check.measured.peak_reserved)"' "$TMP/tcheck.json")
  [[ $pa == "$ca" && $pr == "$cr" && $cr != null ]] && ok "$kind: tune --check $conf: predicted $pa/$pr = measured $ca/$cr" \
    || fail "$kind: tune --check $conf: predicted allocated $pa reserved $pr, measured allocated $ca reserved $cr"
  "$GM" frag --check --search --json "$db" > "$TMP/fcheck.json" 2> "$TMP/fcheck.err" || fail "$kind: frag --check exited $?: $(tail -2 "$TMP/fcheck.err")"
  read -r conf pr cr < <(jq -r '.check | "\(.conf) \(.predicted_peak_reserved) \(.measured_peak_reserved)"' "$TMP/fcheck.json")
  [[ $pr == "$cr" && $cr != null ]] && ok "$kind: frag --check $conf: predicted $pr = measured $cr" \
    || fail "$kind: frag --check $conf: predicted reserved $pr, measured $cr"

  # advise: the recorded configuration replayed is the recording
  "$GM" advise --json "$db" > "$TMP/advise.json" 2> "$TMP/advise.err" || fail "$kind: advise exited $?: $(tail -2 "$TMP/advise.err")"
  jq -e --argjson a "$ma" --argjson r "$mr" '.baseline.peak_allocated == $a and .baseline.peak_reserved == $r and
      .recorded.peak_allocated == $a and .recorded.peak_reserved == $r' "$TMP/advise.json" > /dev/null \
    && ok "$kind: advise's baseline is the recording's $ma/$mr" \
    || fail "$kind: advise's baseline $(jq -c .baseline "$TMP/advise.json"), recorded $(jq -c .recorded "$TMP/advise.json"); report: $ma/$mr"
done <<< "$table"

if ((fails)); then
  echo "snapshot_passthru: $fails failure(s)"
  exit 1
fi
echo "snapshot_passthru: ok"
