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
# viz of two ranks: each lane's peaks are its busiest device's too (they were the devices' sum).
# --device 1 (not the busiest) in every command (uses: the allocations on device 1 alone, where
# without it a name matches on both): a row per command and figure against device 1's
# truth (its LEAKED line, report's .summary.devices[] entry for device 1), each command's exit code
# 0; a device the recording never used (3 here, 1 on `stream`) and a value that is no device are
# exit 2 with the devices it did use named; on `stream`, --device 0 changes no byte of any output.
# viz's page says which device it is and why: its data's summary.device_from ("busiest", "asked"),
# and its "device" row as chromium renders it (it said "the busiest" under --device 1 too).
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
# device 1's truth: the program's own line and report's figures of device 1
read -r _ _ leaked1 per_step1 < <(grep "^LEAKED 1 " "$TMP/s.out")
dev1() { jq -r ".summary.devices[] | select(.device == 1) | .$1" "$TMP/report.json"; }
pa1=$(dev1 peak_allocated) pr1=$(dev1 peak_reserved)
allocs1=$("$GPUMEM" sql "$db" -c "SELECT count(*) FROM events WHERE kind = 1 AND device = 1" | tail -n 1)
[[ -n $pa1 && -n $pr1 && -n $per_step1 && $pr1 != "$pr" ]] || fail "no truth for device 1: '$pa1' '$pr1' '$per_step1'"

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
"$GPUMEM" viz --with none "$db" "$TMP/s2.db" -o "$TMP/vr.html" 2> /dev/null
sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/vr.html" > "$TMP/vizranks.json"
folded=$(awk '{s += $NF} END {print s + 0}' "$TMP/e.folded")
trace=$(grep -c '^a ' "$TMP/e.trace")

# the same commands with --device 1: OUT (stdout) and its exit code in $TMP/d1-NAME.{out,rc,err}
d1() {
  local name=$1; shift
  "$@" > "$TMP/d1-$name.out" 2> "$TMP/d1-$name.err"
  echo $? > "$TMP/d1-$name.rc"
}
d1 report "$GPUMEM" report --json --device 1 "$db"
d1 leaks "$GPUMEM" leaks --json --device 1 "$db"
d1 leakstxt "$GPUMEM" leaks --device=1 "$db"
d1 ranks "$GPUMEM" report --json --device 1 "$db" "$TMP/s2.db"
d1 frag "$GPUMEM" frag --json --device 1 "$db"
d1 tune "$GPUMEM" tune --json --device 1 "$db"
GPUMEM_SIM_DEVICES=2 d1 check "$GPUMEM" tune --check --json --device 1 "$db"
d1 advise "$GPUMEM" advise --json --device 1 "$db"
d1 viz "$GPUMEM" viz --device 1 "$db" -o "$TMP/v1.html"
sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/v1.html" > "$TMP/d1-viz.json" 2> /dev/null
d1 vizranks "$GPUMEM" viz --with none --device 1 "$db" "$TMP/s2.db" -o "$TMP/vr1.html"
sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/vr1.html" > "$TMP/d1-vizranks.json" 2> /dev/null
d1 folded "$GPUMEM" export "$db" --format folded --device 1
d1 trace "$GPUMEM" export "$db" --format trace --device 1
d1 diff "$GPUMEM" diff --json --device 1 "$db" "$TMP/s2.db"
# uses: each step's leak is named leak.N on both devices (devices_app steps)
"$GPUMEM" uses --json --top 10 --name 'leak.*' "$db" > "$TMP/uses.json" 2> /dev/null
d1 uses "$GPUMEM" uses --json --top 10 --name 'leak.*' --device 1 "$db"
d1 usestxt "$GPUMEM" uses --top 10 --name 'leak.*' --device=1 "$db"
j1() { jq -r "$2" "$TMP/d1-$1.out" 2> /dev/null; }
rc1() { cat "$TMP/d1-$1.rc"; }

# the page's "device" row as chromium renders it, up to its first colon ("the busiest" it said
# under --device too); where there is no chromium, the row's text the page data would give
page_device() {
  if [[ -x /usr/bin/chromium ]]; then
    timeout 60 /usr/bin/chromium --headless --no-sandbox --disable-gpu --dump-dom "file://$1" 2> /dev/null \
      | sed -n 's/.*<td id="device">\([^:]*:\).*/\1/p' | head -n 1
  else
    sed -n 's/^const D = \(.*\);$/\1/p' "$1" | jq -r '.summary | "device \(.device) of the \(.devices) that held memory, "
      + (if .device_from == "asked" then "as --device asked" else "the busiest" end) + ":"'
  fi
}
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
  "viz|summary.device_from|busiest|$(jq -r .summary.device_from "$TMP/viz.json")"
  "viz of ranks|lanes[0].peak_allocated|$pa|$(jq -r '.ranks.lanes[0].peak_allocated' "$TMP/vizranks.json")"
  "viz of ranks|lanes[1].peak_reserved|$pr|$(jq -r '.ranks.lanes[1].peak_reserved' "$TMP/vizranks.json")"
  "export folded|bytes live at the peak|$pa|$folded"
  "export trace|allocations|$allocs|$trace"
  # --device 1: device 1's figures, never the busiest device's
  "report -d1|exit code|0|$(rc1 report)"
  "report -d1|summary.device|1|$(j1 report .summary.device)"
  "report -d1|summary.peak_allocated|$pa1|$(j1 report .summary.peak_allocated)"
  "report -d1|summary.peak_reserved|$pr1|$(j1 report .summary.peak_reserved)"
  "leaks -d1|exit code|0|$(rc1 leaks)"
  "leaks -d1|leaked_bytes|$leaked1|$(j1 leaks .leaked_bytes)"
  "leaks -d1|growth_per_step|$per_step1|$(j1 leaks .growth_per_step)"
  "leaks -d1|device|1|$(j1 leaks .device)"
  "leaks -d1|text LEAK SUMMARY bytes|$leaked1|$(sed -n 's/^LEAK SUMMARY: \([0-9]*\) bytes.*/\1/p' "$TMP/d1-leakstxt.out")"
  "ranks -d1|exit code|0|$(rc1 ranks)"
  "ranks -d1|ranks[0].leaked_bytes|$leaked1|$(j1 ranks '.ranks[0].leaked_bytes')"
  "ranks -d1|ranks[1].peak_reserved|$pr1|$(j1 ranks '.ranks[1].peak_reserved')"
  "ranks -d1|ranks[0].device|1|$(j1 ranks '.ranks[0].device')"
  "frag -d1|exit code|0|$(rc1 frag)"
  "frag -d1|recorded.peak_reserved|$pr1|$(j1 frag .recorded.peak_reserved)"
  "frag -d1|replayed_peak_reserved|$pr1|$(j1 frag .recorded.replayed_peak_reserved)"
  "frag -d1|at_peak.reserved|$pr1|$(j1 frag .at_peak.reserved)"
  "frag -d1|device|1|$(j1 frag .device)"
  "tune -d1|exit code|0|$(rc1 tune)"
  "tune -d1|recorded.peak_reserved|$pr1|$(j1 tune .recorded.peak_reserved)"
  "tune -d1|least replayed peak_alloc|$pa1|$(j1 tune '[.results[].peak_allocated] | min')"
  "tune -d1|device|1|$(j1 tune .device)"
  "tune --check -d1|measured.peak_reserved|$pr1|$(j1 check .check.measured.peak_reserved)"
  "advise -d1|exit code|0|$(rc1 advise)"
  "advise -d1|baseline.peak_allocated|$pa1|$(j1 advise .baseline.peak_allocated)"
  "advise -d1|baseline.peak_reserved|$pr1|$(j1 advise .baseline.peak_reserved)"
  "advise -d1|recorded.peak_reserved|$pr1|$(j1 advise .recorded.peak_reserved)"
  "advise -d1|device|1|$(j1 advise .device)"
  "viz -d1|exit code|0|$(rc1 viz)"
  "viz -d1|summary.peak_allocated_bytes|$pa1|$(jq -r .summary.peak_allocated_bytes "$TMP/d1-viz.json" 2> /dev/null)"
  "viz -d1|summary.peak_reserved_bytes|$pr1|$(jq -r .summary.peak_reserved_bytes "$TMP/d1-viz.json" 2> /dev/null)"
  "viz -d1|summary.device|1|$(jq -r .summary.device "$TMP/d1-viz.json" 2> /dev/null)"
  "viz -d1|summary.device_from|asked|$(jq -r .summary.device_from "$TMP/d1-viz.json" 2> /dev/null)"
  "viz -d1|page's device row|device 1 of the 2 that held memory, as --device asked:|$(page_device "$TMP/v1.html")"
  "viz|page's device row|device $busy of the 2 that held memory, the busiest:|$(page_device "$TMP/v.html")"
  "viz of ranks -d1|exit code|0|$(rc1 vizranks)"
  "viz of ranks -d1|lanes[0].peak_allocated|$pa1|$(jq -r '.ranks.lanes[0].peak_allocated' "$TMP/d1-vizranks.json" 2> /dev/null)"
  "viz of ranks -d1|lanes[1].peak_reserved|$pr1|$(jq -r '.ranks.lanes[1].peak_reserved' "$TMP/d1-vizranks.json" 2> /dev/null)"
  "export folded -d1|bytes live at the peak|$pa1|$(awk '{s += $NF} END {print s + 0}' "$TMP/d1-folded.out")"
  "export trace -d1|allocations|$allocs1|$(grep -c '^a ' "$TMP/d1-trace.out")"
  "diff -d1|exit code|0|$(rc1 diff)"
  "diff -d1|a.peak_reserved|$pr1|$(j1 diff .a.peak_reserved)"
  "diff -d1|b.peak_allocated|$pa1|$(j1 diff .b.peak_allocated)"
  "uses|leak.* on both devices|$((leaked + leaked1))|$(jq -r '[.allocations[].size] | add' "$TMP/uses.json")"
  "uses -d1|exit code|0|$(rc1 uses)"
  "uses -d1|leak.* bytes|$leaked1|$(j1 uses '[.allocations[].size] | add')"
  "uses -d1|devices of those shown|[1]|$(j1 uses '[.allocations[].device] | unique | tostring')"
  "uses -d1|matched|4|$(j1 uses .matched)"
  "uses -d1 text|exit code|0|$(rc1 usestxt)"
  "uses -d1 text|4 allocations match|1|$(grep -c '^  4 allocations match' "$TMP/d1-usestxt.out")"
)
bad=0
printf '%-18s %-32s %12s %12s\n' command figure truth command >&2
for row in "${rows[@]}"; do
  IFS='|' read -r cmd fig want got <<< "$row"
  mark=ok
  [[ $got == "$want" ]] || mark=WRONG bad=$((bad + 1))
  printf '%-18s %-32s %12s %12s  %s\n' "$cmd" "$fig" "$want" "$got" "$mark" >&2
done
[[ $bad == 0 ]] || fail "$bad figures are not the device's (device $busy's, or with -d1 --device 1's; the sum of the devices' leaks is $((leaked + leaked1)))"
for c in leaks frag tune advise viz folded trace; do
  grepq -F "are device 1's, as --device asked" "$TMP/d1-$c.err" \
    || fail "$c --device 1 does not say its figures are device 1's: $(head -n 2 "$TMP/d1-$c.err")"
done

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

# --device errors, the same in every command: a device the recording never used (exit 2, the ones it
# used named, and what leaving --device out gives in that command: "the busiest" was wrong for uses,
# export's chrome/csv/torch, diff and the ranks report), a value that is no device number (exit 2)
# command words | the database(s) | --device value | what the message must say
erows=(
  "report|$db|3|held memory on devices 0 and 1: give --device 0 or 1 (or leave it out for the busiest device leading, each device's peaks said)"
  "leaks|$db|3|held memory on devices 0 and 1: give --device 0 or 1 (or leave it out for the busiest)"
  "frag|$db|3|held memory on devices 0 and 1: give --device 0 or 1 (or leave it out for the busiest)"
  "tune|$db|3|held memory on devices 0 and 1: give --device 0 or 1 (or leave it out for the busiest)"
  "advise|$db|3|held memory on devices 0 and 1: give --device 0 or 1 (or leave it out for the busiest)"
  "viz|-o $TMP/e.html $db|3|held memory on devices 0 and 1: give --device 0 or 1 (or leave it out for the busiest)"
  "viz|-o $TMP/e.html $db $TMP/s2.db|3|held memory on devices 0 and 1: give --device 0 or 1 (or leave it out for each rank's busiest)"
  "export --format trace|$db|3|held memory on devices 0 and 1: give --device 0 or 1 (or leave it out for the busiest)"
  "export --format csv|$db|3|held memory on devices 0 and 1: give --device 0 or 1 (or leave it out for every device, each apart)"
  "diff|$db $TMP/s2.db|3|held memory on devices 0 and 1: give --device 0 or 1 (or leave it out for each side's busiest)"
  "uses --name leak.*|$db|3|held memory on devices 0 and 1: give --device 0 or 1 (or leave it out for every device)"
  "uses --id 1|$TMP/one.db|1|held memory on device 0: give --device 0 (or leave it out for every device)"
  "uses --id 1|$db|-1|--device needs a device number from 0 to 127"
  "report|$db $TMP/s2.db|3|held memory on devices 0 and 1: give --device 0 or 1 (or leave it out for each rank's busiest)"
  "leaks|$TMP/one.db|1|held memory on device 0:"
  "frag|$TMP/one.db|1|held memory on device 0:"
  "export --format folded|$TMP/one.db|1|held memory on device 0:"
  "report|$TMP/one.db|1|held memory on device 0:"
  "report|$TMP/one.db $TMP/one2.db|1|held memory on device 0:"
  "diff|$TMP/one.db $TMP/one2.db|1|held memory on device 0:"
  "leaks|$db|x|--device needs a device number from 0 to 127"
  "tune|$db|-1|--device needs a device number from 0 to 127"
  "viz|-o $TMP/e.html $db|128|--device needs a device number from 0 to 127"
  "diff|$db $TMP/s2.db||--device needs a device number from 0 to 127"
)
cp "$TMP/one.db" "$TMP/one2.db"
ebad=0
for row in "${erows[@]}"; do
  IFS='|' read -r words dbs val want <<< "$row"
  read -ra w <<< "$words"
  read -ra p <<< "$dbs"
  "$GPUMEM" "${w[@]}" "${p[@]}" --device "$val" > /dev/null 2> "$TMP/derr.txt"
  rc=$?
  mark=ok
  [[ $rc == 2 ]] && grepq -F -- "$want" "$TMP/derr.txt" || mark=WRONG ebad=$((ebad + 1))
  printf '%-24s --device %-4s exit %s  %s\n' "$words" "'$val'" "$rc" "$mark" >&2
  [[ $mark == ok ]] || echo "    said: $(head -n 1 "$TMP/derr.txt")" >&2
done
[[ $ebad == 0 ]] || fail "$ebad --device errors are not exit 2 with the devices named"

# one device: --device of that device changes no byte of any output (but the time tune took: its
# "in 0.1 s" and JSON "seconds" are the clock's, not the recording's)
same=0
for cmd in "report" "report --json" "leaks" "leaks --json" "frag --json" "tune" "advise --json" \
           "export --format folded" "export --format trace" "export --format csv"; do
  read -ra w <<< "$cmd"
  "$GPUMEM" "${w[@]}" "$TMP/one.db" 2>&1 | sed -E 's/ in [0-9.]+ s, ranked/ in T s, ranked/' > "$TMP/o-a"
  "$GPUMEM" "${w[@]}" --device 0 "$TMP/one.db" 2>&1 | sed -E 's/ in [0-9.]+ s, ranked/ in T s, ranked/' > "$TMP/o-b"
  cmp -s "$TMP/o-a" "$TMP/o-b" || { echo "  $cmd --device 0 on one device differs: $(diff "$TMP/o-a" "$TMP/o-b" | head -n 3)" >&2; same=$((same + 1)); }
done
"$GPUMEM" viz --with none "$TMP/one.db" -o "$TMP/o1.html" 2> /dev/null
"$GPUMEM" viz --with none --device 0 "$TMP/one.db" -o "$TMP/o2.html" 2> /dev/null
cmp -s "$TMP/o1.html" "$TMP/o2.html" || { echo "  viz --device 0 on one device differs" >&2; same=$((same + 1)); }
for two in "diff" "report"; do
  "$GPUMEM" $two "$TMP/one.db" "$TMP/one2.db" > "$TMP/o-a" 2>&1
  "$GPUMEM" $two --device 0 "$TMP/one.db" "$TMP/one2.db" > "$TMP/o-b" 2>&1
  cmp -s "$TMP/o-a" "$TMP/o-b" || { echo "  $two of two files --device 0 on one device differs" >&2; same=$((same + 1)); }
done
[[ $same == 0 ]] || fail "$same outputs change with --device of the one device the program used"
echo "devices_cmds: every command's figures are device $busy's, or --device 1's" >&2
exit 0
