#!/usr/bin/env bash
# Memory pools the program creates, end to end (tests/apps/pools_app.c: the plan). The program
# checks the virtual GPU's model of them itself (cudaMemPoolCreate/Destroy, allocation from a
# given pool and from the device's current one, the release threshold, trim, a pool destroyed
# with an allocation outstanding: what the pool's attributes and the device's accounting say);
# then each row says what a reader of its recording must say: the pool's allocations passed
# through with flag 2048 and the rest gpumem's, the peaks and leaks, and frag, tune, the trace
# export and advise counting the pool's blocks as the driver's (`ad`: allocated and reserved
# under every configuration).
set -uo pipefail
BUILD=${BUILD:-build}
GM=$PWD/$BUILD/gpumem
APP=$PWD/$BUILD/tests/apps/pools_app
for f in "$GM" "$APP" "$BUILD/libgpumem.so"; do [[ -e $f ]] || { echo "missing $f (run make)" >&2; exit 1; }; done
command -v jq > /dev/null || { echo "FAIL: jq is missing (make deps installs it)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/gpumem-pools.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
unset GPUMEM_MODE GPUMEM_LIMIT GPUMEM_CONF GPUMEM_DB
export GPUMEM_QUIET=1
fails=0
MIB=1048576
db=$TMP/pools.db

# row | command whose output is compared | expected
check() {
  local row=$1 got=$2 want=$3
  if [[ $got == "$want" ]]; then echo "ok: $row"; else echo "FAIL: $row: got '$got', expected '$want'"; fails=$((fails + 1)); fi
}

check "the virtual GPU's pools (the program's own checks, without gpumem)" \
  "$("$APP" 2>&1 | tail -1)" "pools_app: done"
check "recorded under gpumem record" \
  "$("$GM" record -q -o "$db" -- "$APP" 2>&1 | tail -1)" "pools_app: done"
[[ -s $db ]] || { echo "FAIL: no recording"; exit 1; }
q() { sqlite3 "$db" "$1"; }

# the recorded flags: the pools' four allocations passed through (2048), gpumem's the others,
# the 1 MiB cudaMallocAsync after the destroy included (the default pool is current again)
check "flag 2048: the pools' allocations (8, 3 by cudaMallocAsync, 40, 5 MiB)" \
  "$(q "SELECT group_concat(size / $MIB, ' ') FROM (SELECT size FROM events WHERE kind IN (1, 3) AND flags & 2048 ORDER BY seq)")" "8 3 40 5"
check "gpumem served the rest (4, 2 MiB cudaMalloc; 1 MiB cudaMallocAsync after the destroy)" \
  "$(q "SELECT group_concat(size / $MIB, ' ') FROM (SELECT size FROM events WHERE kind IN (1, 3) AND flags & 768 AND NOT flags & 2048 ORDER BY seq)")" "4 2 1"
check "pools created, destroyed" "$(q "SELECT sum(kind = 25) || ' ' || sum(kind = 26) FROM events")" "2 1"

# report: every block in allocated and reserved (the pool's as its own segment), the leak,
# the device's memory held by the program's pools in 32 MiB chunks
"$GM" report --json "$db" > "$TMP/report.json" || { echo "FAIL: report --json exited $?"; fails=$((fails + 1)); }
check "report: peaks allocated / reserved (49 MiB: 4 + 2 gpumem's, 3 + 40 the pool's)" \
  "$(jq -r '"\(.summary.peak_allocated) \(.summary.peak_reserved) \(.summary.peak_allocated_seq // .summary.peak_requested_seq)"' "$TMP/report.json")" \
  "$((49 * MIB)) $((49 * MIB)) $(q "SELECT seq FROM events WHERE size = $((40 * MIB)) AND kind = 3")"
check "report: allocations / frees" "$(jq -r '"\(.summary.allocations) \(.summary.frees)"' "$TMP/report.json")" "7 6"
check "report: device used, the program's pools at the peak / at exit (chunks of 32 MiB)" \
  "$(jq -r '.device_used.devices[0] | "\(.peak.outside.pools) \(.exit.outside.pools)"' "$TMP/report.json")" "$((64 * MIB)) $((32 * MIB))"

# leaks: the 5 MiB from the second pool, never freed
check "leaks: the pool allocation never freed" "$("$GM" leaks "$db" | grep '^LEAK SUMMARY')" \
  "LEAK SUMMARY: $((5 * MIB)) bytes leaked in 1 allocations"
check "leaks --json" "$("$GM" leaks --json "$db" | jq -c '[.leaks[] | .bytes]')" "[$((5 * MIB))]"

# frag and tune replay the pool's blocks as the driver's under every configuration
"$GM" frag --json "$db" > "$TMP/frag.json" || { echo "FAIL: frag --json exited $?"; fails=$((fails + 1)); }
check "frag: recorded peak == replayed, timeline's highest reserved" \
  "$(jq -r '"\(.recorded.peak_reserved) \(.recorded.replayed_peak_reserved) \([.timeline[].reserved] | max)"' "$TMP/frag.json")" \
  "$((49 * MIB)) $((49 * MIB)) $((49 * MIB))"
"$GM" tune --json "$db" > "$TMP/tune.json" || { echo "FAIL: tune --json exited $?"; fails=$((fails + 1)); }
check "tune: every configuration allocates the pool's 43 MiB beside gpumem's 6 (peak allocated)" \
  "$(jq -r '[.results[].peak_allocated] | unique | map(tostring) | join(" ")' "$TMP/tune.json")" "$((49 * MIB))"
check "tune: no configuration reserves less than the peak (the pool's blocks are counted)" \
  "$(jq -r '[.results[] | select(.peak_reserved < '$((49 * MIB))')] | length' "$TMP/tune.json")" "0"
check "tune: the recorded preset replays to the recorded peak" \
  "$(jq -r '.results[] | select(.conf == "preset:gpumem") | .peak_reserved' "$TMP/tune.json")" "$((49 * MIB))"

# the trace: the pool's blocks as `ad`, freed with `fa`; gpumem's as `a`
"$GM" export --format trace "$db" -o "$TMP/pools.trace" || { echo "FAIL: export --format trace exited $?"; fails=$((fails + 1)); }
check "trace: ad lines (the pools' blocks)" "$(awk '$1 == "ad" { printf "%s%d", n++ ? " " : "", $3 / '$MIB' }' "$TMP/pools.trace")" "8 3 40 5"
check "trace: a lines (gpumem's)" "$(awk '$1 == "a" { printf "%s%d", n++ ? " " : "", $3 / '$MIB' }' "$TMP/pools.trace")" "4 2 1"
check "trace: frees (fa: the three pool blocks freed and gpumem's 1 MiB, all cudaFreeAsync; fs: cudaFree of 4, 2, settled by free_sync's synchronization; no plain f)" \
  "$(awk '$1 == "fa" || $1 == "f" || $1 == "fs" { c[$1]++ } END { print c["fa"] + 0, c["f"] + 0, c["fs"] + 0 }' "$TMP/pools.trace")" "4 0 2"

# advise: no crash, and its baseline is the recording's peaks
"$GM" advise "$db" > "$TMP/advise.txt" 2>&1
check "advise exits 0" "$?" "0"
check "advise: the baseline replays to the recorded peaks" "$(grep -c 'peak allocated 49.00 MiB, peak reserved 49.00 MiB (recorded: 49.00 MiB, 49.00 MiB)' "$TMP/advise.txt")" "1"

[[ $fails == 0 ]] || { echo "snapshot_pools: $fails failure(s)"; exit 1; }
echo "snapshot_pools: all rows pass"
