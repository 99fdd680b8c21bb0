#!/usr/bin/env bash
# gpumem viz on a trainer recording: one self-contained page whose data agrees with
# `gpumem report` (peaks formatted the same, peak bytes equal), whose segment map has the peak
# snapshot's segments, with no URL but XML namespaces; then (when chromium and playwright-core
# are installed) the page is opened from disk in headless chromium with the network blocked.
source "$(dirname "$0")/e2e_common.bash"
"$GM" record -q -o "$TMP/run.db" -- "$TRAIN" --model tiny --data "$TEXT" --steps 3 -B 2 -T 32 --leak \
  > "$TMP/rec.txt" 2>&1 || fail "trainer under gpumem: $(tail -3 "$TMP/rec.txt")"
"$GM" viz "$TMP/run.db" -o "$TMP/run.html" || fail "gpumem viz exited $?"
grep -Eo 'https?://[^" ]*' "$TMP/run.html" | sort -u > "$TMP/urls.txt" || true
if grep -v '^http://www.w3.org/2000/svg$' "$TMP/urls.txt" > "$TMP/bad.txt"; then
  fail "the page names URLs: $(tr '\n' ' ' < "$TMP/bad.txt")"
fi
ok "no URL but the SVG namespace"
sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/run.html" > "$TMP/data.json"
jq -e . "$TMP/data.json" > /dev/null || fail "the page's data is not JSON"
"$GM" report --json "$TMP/run.db" > "$TMP/report.json"
"$GM" report "$TMP/run.db" > "$TMP/report.txt"
want=$(jq -r .peak.live_bytes "$TMP/report.json")
got=$(jq -r .summary.peak_allocated_bytes "$TMP/data.json")
[[ $got == "$want" ]] || fail "page peak allocated $got, report $want"
maxb=$(jq '[.timeline.buckets[][2]] | max' "$TMP/data.json")
[[ $maxb == "$want" ]] || fail "the timeline's highest bucket is $maxb, the report's peak $want"
for k in requested allocated reserved; do
  txt=$(awk -v k="$k" '$1 == "peak" && $2 == k { print $3, $4; exit }' "$TMP/report.txt")
  pg=$(jq -r ".summary.peak_$k" "$TMP/data.json")
  [[ -n $txt && $pg == "$txt" ]] || fail "page peak $k '$pg', report '$txt'"
done
wantr=$(awk '$1 == "peak" && $2 == "requested" { sub(/^\(/, "", $5); print $5; exit }' "$TMP/report.txt")
maxr=$(jq '[.timeline.buckets[][3]] | max' "$TMP/data.json")
[[ -n $wantr && $maxr == "$wantr" ]] || fail "the requested line's highest point is $maxr, the report's peak requested $wantr"
nsteps=$(jq '.timeline.steps | length' "$TMP/data.json")
[[ $nsteps -eq 3 ]] || fail "the timeline marks $nsteps steps, the run had 3"
ok "peaks equal the report's ($want bytes allocated, $wantr requested), 3 steps marked"
q="SELECT count(*) FROM segments WHERE snapshot = (SELECT min(id) FROM snapshots WHERE reason = 1)"
nseg=$("$GM" sql "$TMP/run.db" -c "$q" | tail -1)
pseg=$(jq '[.snapshots[] | select(.reason == "peak")][0].segments | length' "$TMP/data.json")
[[ $nseg -gt 0 && $pseg == "$nseg" ]] || fail "page peak segments $pseg, database $nseg"
ok "segment map: $nseg segments"
seq=$(jq -r .peak.seq "$TMP/report.json")
q="SELECT name FROM allocations WHERE device >= 0 AND kind IN (1,3) AND birth_seq <= $seq
   AND (death_seq IS NULL OR death_seq > $seq) ORDER BY size DESC, birth_seq LIMIT 1"
top=$("$GM" sql "$TMP/run.db" -c "$q" | tail -1)
[[ -n $top ]] || fail "no allocation live at the peak"
jq -e --arg t "$top" '.live_at_peak[0].name == $t' "$TMP/data.json" > /dev/null \
  || fail "top tensor at the peak: page $(jq -c '.live_at_peak[0].name' "$TMP/data.json"), database $top"
ok "top tensor at the peak: $top"
"$GM" viz "$TMP/missing.db" -o "$TMP/x.html" 2> "$TMP/err.txt" && fail "viz of a missing file exited 0"
[[ $(wc -l < "$TMP/err.txt") -eq 1 ]] || fail "viz of a missing file: not a one-line error: $(cat "$TMP/err.txt")"
ok "missing database: $(cat "$TMP/err.txt")"

# The browser half.
mkdir -p "$BUILD"
jq -n --argjson p "$want" --arg t "$top" --argjson s "$nseg" \
  '{peak_allocated_bytes: $p, top_tensor: $t, segments: $s}' > "$TMP/expect.json"
[[ -x /usr/bin/chromium ]] || { echo "skipped: /usr/bin/chromium is missing (make deps installs it)" >&2; exit 77; }
command -v node > /dev/null || { echo "skipped: node is missing (make deps installs it)" >&2; exit 77; }
[[ -d viz/node_modules/playwright-core ]] \
  || { echo "skipped: playwright-core is missing (make deps runs viz/deps.sh)" >&2; exit 77; }
node viz/browser_test.js "$TMP/run.html" "$TMP/expect.json" "$BUILD/viz_page.png" \
  || fail "the page in chromium"
