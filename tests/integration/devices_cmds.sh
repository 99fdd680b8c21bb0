#!/usr/bin/env bash
# devices_cmds.sh — a program with memory on two devices of one process: every command's figures
# are one device's (the busiest, the one report names), never the two devices added, and every
# replay replays that device's events as its own heap (each device has its own allocator).
#
# tests/apps/devices_app.c `steps`: device 0 holds 64 MiB all run, leaks 1 MiB a step and makes a
# 16 MiB temporary in each of 4 NVTX steps; device 1 leaks 4 MiB a step. Device 0 is the busiest.
# One table, a row per command and figure: the command, the figure (a jq path, or a reading of the
# output), the device's true figure (the program's own LEAKED lines, or report --json's
# .summary.devices[] of the busiest device), and the command's. Then, on `devices_app stream`
# (memory on device 0 only), no JSON gains the new keys: one device's output keeps its bytes.
# tune --check's re-run is read the same way (the busiest device's), as its prediction is.
source tests/integration/snapshot_common.bash
APPS=$BUILD/tests/apps
need "$GPUMEM" "$APPS/devices_app"
db=$TMP/s.db
GPUMEM_SIM_DEVICES=2 "$GPUMEM" record -q -o "$db" -- "$APPS/devices_app" steps > "$TMP/s.out" 2>&1 \
  || fail "devices_app steps: $(tail -n 3 "$TMP/s.out")"
"$GPUMEM" report --json "$db" > "$TMP/report.json" || fail "report --json failed"
busy=$(jq -r '.summary.device' "$TMP/report.json")
[[ $busy == 0 ]] || fail "report names device '$busy' the busiest; devices_app steps makes it device 0"
dev() { jq -r --argjson d "$busy" ".summary.devices[] | select(.device == \$d) | .$1" "$TMP/report.json"; }
pa=$(dev peak_allocated) pr=$(dev peak_reserved)
read -r _ _ leaked per_step < <(grep "^LEAKED $busy " "$TMP/s.out")
read -r _ _ leaked1 _ < <(grep "^LEAKED 1 " "$TMP/s.out")
[[ -n $pa && -n $pr && -n $leaked && -n $leaked1 ]] || fail "no truth: report's device $busy '$pa' '$pr', program '$leaked'"
allocs=$("$GPUMEM" sql "$db" -c "SELECT count(*) FROM events WHERE kind = 1 AND device = $busy" | tail -n 1)

# each command's output, once
"$GPUMEM" leaks --json "$db" > "$TMP/leaks.json" 2> "$TMP/leaks.err"
"$GPUMEM" leaks "$db" > "$TMP/leaks.txt" 2>&1
"$GPUMEM" frag --json "$db" > "$TMP/frag.json" 2> "$TMP/frag.err"
"$GPUMEM" tune --json "$db" > "$TMP/tune.json" 2> "$TMP/tune.err"
# --check re-runs the program (on two devices again): measured as the prediction is, one device's
GPUMEM_SIM_DEVICES=2 "$GPUMEM" tune --check --json "$db" > "$TMP/check.json" 2> /dev/null
"$GPUMEM" advise --json "$db" > "$TMP/advise.json" 2> "$TMP/advise.err"
"$GPUMEM" viz "$db" -o "$TMP/v.html" 2> "$TMP/viz.err"
sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/v.html" > "$TMP/viz.json"
"$GPUMEM" export "$db" --format folded -o "$TMP/e.folded" 2> "$TMP/folded.err"
"$GPUMEM" export "$db" --format trace -o "$TMP/e.trace" 2> "$TMP/trace.err"
cp "$db" "$TMP/s2.db"
"$GPUMEM" report --json "$db" "$TMP/s2.db" > "$TMP/ranks.json" 2> /dev/null
folded=$(awk '{s += $NF} END {print s + 0}' "$TMP/e.folded")
trace=$(grep -c '^a ' "$TMP/e.trace")

# command | figure | the device's true figure | the command's
rows=(
  "leaks|leaked_bytes|$leaked|$(jq -r .leaked_bytes "$TMP/leaks.json")"
  "leaks|growth_per_step|$per_step|$(jq -r .growth_per_step "$TMP/leaks.json")"
  "leaks|device|$busy|$(jq -r .device "$TMP/leaks.json")"
  "leaks|text LEAK SUMMARY bytes|$leaked|$(sed -n 's/^LEAK SUMMARY: \([0-9]*\) bytes.*/\1/p' "$TMP/leaks.txt")"
  "ranks report|ranks[0].leaked_bytes|$leaked|$(jq -r '.ranks[0].leaked_bytes' "$TMP/ranks.json")"
  "frag|recorded.peak_reserved|$pr|$(jq -r .recorded.peak_reserved "$TMP/frag.json")"
  "frag|recorded.replayed_peak_reserved|$pr|$(jq -r .recorded.replayed_peak_reserved "$TMP/frag.json")"
  "frag|at_peak.reserved|$pr|$(jq -r .at_peak.reserved "$TMP/frag.json")"
  "frag|device|$busy|$(jq -r .device "$TMP/frag.json")"
  "tune|recorded.peak_reserved|$pr|$(jq -r .recorded.peak_reserved "$TMP/tune.json")"
  "tune|least replayed peak_allocated|$pa|$(jq -r '[.results[].peak_allocated] | min' "$TMP/tune.json")"
  "tune --check|check.measured.peak_reserved|$pr|$(jq -r .check.measured.peak_reserved "$TMP/check.json")"
  "tune|device|$busy|$(jq -r .device "$TMP/tune.json")"
  "advise|baseline.peak_allocated|$pa|$(jq -r .baseline.peak_allocated "$TMP/advise.json")"
  "advise|baseline.peak_reserved|$pr|$(jq -r .baseline.peak_reserved "$TMP/advise.json")"
  "advise|recorded.peak_reserved|$pr|$(jq -r .recorded.peak_reserved "$TMP/advise.json")"
  "advise|device|$busy|$(jq -r .device "$TMP/advise.json")"
  "viz|summary.peak_allocated_bytes|$pa|$(jq -r .summary.peak_allocated_bytes "$TMP/viz.json")"
  "viz|summary.peak_reserved_bytes|$pr|$(jq -r .summary.peak_reserved_bytes "$TMP/viz.json")"
  "viz|summary.device|$busy|$(jq -r .summary.device "$TMP/viz.json")"
  "export folded|bytes live at the peak|$pa|$folded"
  "export trace|allocations|$allocs|$trace"
)
bad=0
printf '%-14s %-32s %12s %12s\n' command figure "device $busy" command >&2
for row in "${rows[@]}"; do
  IFS='|' read -r cmd fig want got <<< "$row"
  mark=ok
  [[ $got == "$want" ]] || mark=WRONG bad=$((bad + 1))
  printf '%-14s %-32s %12s %12s  %s\n' "$cmd" "$fig" "$want" "$got" "$mark" >&2
done
[[ $bad == 0 ]] || fail "$bad figures are not device $busy's (the sum of the devices' leaks is $((leaked + leaked1)))"

# each says whose figures they are, in the same words
for c in leaks frag tune advise viz folded trace; do
  grepq -F "the program held memory on 2 devices (0 to 1)" "$TMP/$c.err" && grepq -F "are device $busy's, the busiest" "$TMP/$c.err" \
    || fail "$c does not say its figures are device $busy's: $(head -n 2 "$TMP/$c.err")"
done
grepq -F "id='device'" viz/page.html || fail "the page does not show whose figures it shows"

# one device (memory on device 0, a stream used on device 1): no key added, no note
GPUMEM_SIM_DEVICES=2 "$GPUMEM" record -q -o "$TMP/one.db" -- "$APPS/devices_app" stream > "$TMP/one.out" 2>&1 \
  || fail "devices_app stream: $(tail -n 3 "$TMP/one.out")"
for c in leaks frag tune advise; do
  "$GPUMEM" "$c" --json "$TMP/one.db" > "$TMP/one-$c.json" 2> "$TMP/one-$c.err"
  jq -e 'has("device") or has("devices")' "$TMP/one-$c.json" > /dev/null && fail "$c --json on one device has a device key"
  grepq -F "devices" "$TMP/one-$c.err" && fail "$c on one device says: $(grep -F devices "$TMP/one-$c.err")"
done
echo "devices_cmds: every command's figures are device $busy's" >&2
exit 0
