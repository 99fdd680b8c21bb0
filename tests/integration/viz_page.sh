#!/usr/bin/env bash
# gpumem viz on a trainer recording: one self-contained page whose data agrees with
# `gpumem report` (peaks formatted the same, peak bytes equal), whose segment map has the peak
# snapshot's segments, with no URL but XML namespaces; then (when chromium, chromedriver and
# selenium are installed) the page is opened from disk in headless chromium with the network
# blocked (viz/browser_test.py).
source "$(dirname "$0")/e2e_common.bash"
"$GM" record -q -o "$TMP/run.db" -- "$TRAIN" --model tiny --data "$TEXT" --steps 3 -B 2 -T 32 --leak \
  > "$TMP/rec.txt" 2>&1 || fail "trainer under gpumem: $(tail -3 "$TMP/rec.txt")"
"$GM" viz "$TMP/run.db" -o "$TMP/run.html" --with frag,advise || fail "gpumem viz exited $?"
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
wantv=$(jq -r .summary.peak_reserved "$TMP/report.json")
maxv=$(jq '[.timeline.buckets[][4]] | max' "$TMP/data.json")
[[ $maxv == "$wantv" ]] || fail "the reserved line's highest point is $maxv, the report's peak reserved $wantv"
jq -e '.timeline.have_reserved' "$TMP/data.json" > /dev/null || fail "the recording's reserved timeline was not read"
# each bucket's stacked layers (by phase and by class) add up to its allocated max
bad=$(jq '[range(0; .timeline.buckets | length) as $j | select(
            (.timeline.stack.phase.v[$j] | add) != .timeline.buckets[$j][2] or
            (.timeline.stack.class.v[$j] | add) != .timeline.buckets[$j][2])] | length' "$TMP/data.json")
[[ $bad == 0 ]] || fail "$bad buckets whose stacked layers do not add up to allocated"
ok "reserved line's max $wantv = report's peak reserved; stacks add up in every bucket"
# what the page lists live at a bucket's moment was live then, and is the largest live then (the
# database says; every 97th bucket)
jq -r '.timeline as $t | range(0; $t.buckets | length; 97) as $j |
       "\($t.buckets[$j][5]) \($t.live[$j] | length) \([$t.live[$j][] | $t.tensors[.] | "\(.[3]):\(.[1])"] | join(","))"' \
  "$TMP/data.json" > "$TMP/live.txt"
nchk=0
while read -r at nlisted list; do
  live="birth_seq <= $at AND (death_seq IS NULL OR death_seq > $at) AND device >= 0 AND kind IN (1, 3)"
  read -r nlive maxsize < <("$GM" sql "$TMP/run.db" -c "SELECT count(*), coalesce(max(size), 0) FROM allocations WHERE $live" \
                            | tail -1 | tr '|' ' ')
  want_n=$(( nlive < 8 ? nlive : 8 ))
  [[ $nlisted == "$want_n" ]] || fail "seq $at: the page lists $nlisted allocations, $nlive were live"
  [[ $nlisted == 0 || ${list%%,*} == *":$maxsize" ]] || fail "seq $at: the page's largest is ${list%%,*}, the database's $maxsize bytes"
  for e in ${list//,/ }; do
    n=$("$GM" sql "$TMP/run.db" -c "SELECT count(*) FROM allocations WHERE id = ${e%%:*} AND size = ${e##*:} AND $live" | tail -1)
    [[ $n == 1 ]] || fail "allocation ${e%%:*} listed live at seq $at, but the database disagrees"
    nchk=$((nchk + 1))
  done
done < "$TMP/live.txt"
(( nchk > 0 )) || fail "no bucket lists what was live"
ok "$(wc -l < "$TMP/live.txt") buckets' live lists ($nchk entries) checked against the database: live, largest first"
# the peak icicle's root is the peak; the total one's the bytes ever allocated (export folded)
root=$(jq '.flame_peak.nodes[0][2]' "$TMP/data.json")
[[ $root == "$want" ]] || fail "peak icicle root $root, peak allocated $want"
"$GM" export --format folded --what total "$TMP/run.db" | awk '!/^#/ { s += $NF } END { print s }' > "$TMP/total.txt"
troot=$(jq '.flame_total.nodes[0][2]' "$TMP/data.json")
[[ $troot == "$(cat "$TMP/total.txt")" ]] || fail "total icicle root $troot, folded total $(cat "$TMP/total.txt")"
ok "icicle roots: peak $root, total $troot"
# --with: frag's and advise's own --json, embedded
jq -e --argjson p "$wantv" '.analyses.frag.at_peak.reserved == $p' "$TMP/data.json" > /dev/null \
  || fail "the frag panel: $(jq -c '.analyses.frag | keys' "$TMP/data.json")"
jq -e '.analyses.advise.recommendations | type == "array"' "$TMP/data.json" > /dev/null \
  || fail "the advise panel: $(jq -c '.analyses.advise' "$TMP/data.json" | head -c 300)"
jq -e '.analyses | has("tune") | not' "$TMP/data.json" > /dev/null || fail "tune ran without --with tune"
"$GM" viz "$TMP/run.db" -o "$TMP/x.html" --with frag,bogus 2> "$TMP/err.txt" && fail "--with bogus exited 0"
[[ $(wc -l < "$TMP/err.txt") -eq 2 ]] && tail -1 "$TMP/err.txt" | grep -qx "(gpumem viz --help tells more)" \
  || fail "--with bogus: not the error and where the help is"
ok "analyses: frag and advise embedded, tune opt-in, --with bogus: $(cat "$TMP/err.txt")"
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
# tensor classes (advise's: digits as '*', as the report's by_name): the page's first class is
# one the report ranks first by bytes at the peak, and the peak bucket's layer has its bytes
topclass=$(jq -r '.classes[0]' "$TMP/data.json")
cbytes=$(jq --arg c "$topclass" '[.peak.by_name[] | select(.name == $c) | .bytes][0]' "$TMP/report.json")
rbytes=$(jq '.peak.by_name[0].bytes' "$TMP/report.json")
pbytes=$(jq --argjson q "$seq" '.timeline as $t | [range(0; $t.buckets | length) | select($t.buckets[.][5] == $q)][0] as $j
         | $t.stack.class.v[$j][0]' "$TMP/data.json")
[[ $cbytes == "$rbytes" && $pbytes == "$rbytes" ]] \
  || fail "top class $topclass: report $cbytes bytes at the peak (top $rbytes), page's peak layer $pbytes"
ncls=$(jq '[.snapshots[] | select(.reason == "peak")][0].segments | [.[].blocks[] | select(.[2] == 1 and .[3] >= 0)] | length' "$TMP/data.json")
[[ $ncls -gt 0 ]] || fail "no allocated block of the peak segment map has a class"
ok "classes: $topclass among them; $ncls allocated blocks classed at the peak"
"$GM" viz "$TMP/missing.db" -o "$TMP/x.html" 2> "$TMP/err.txt" && fail "viz of a missing file exited 0"
[[ $(wc -l < "$TMP/err.txt") -eq 1 ]] || fail "viz of a missing file: not a one-line error: $(cat "$TMP/err.txt")"
ok "missing database: $(cat "$TMP/err.txt")"

# names are the program's bytes: the page keeps UTF-8 as it is and writes U+FFFD for any other
# byte, so its data decodes as strict UTF-8 ('wte' -> "wté ✓"; every frame's function gets a
# UTF-16 surrogate, ED A0 80, and a stray FF)
cp "$TMP/run.db" "$TMP/u.db"
# (the file holds frames as recorded, unnamed: each is given a name with those bytes, marked as
# symbolized so that the reader takes it as stored)
sqlite3 "$TMP/u.db" "UPDATE strings SET s = CAST(X'7774c3a920e29c93' AS TEXT) WHERE s = 'wte';
                     UPDATE frames SET function = 'f' || id || CAST(X'eda080ff' AS TEXT), symbolized = 1
                      WHERE python IS NOT 1" || fail "could not edit the names"
"$GM" viz "$TMP/u.db" -o "$TMP/u.html" || fail "gpumem viz with non-ASCII names exited $?"
LC_ALL=C sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/u.html" > "$TMP/u.json"
python3 - "$TMP/u.json" << 'PYEOF' || fail "non-ASCII names in the page"
import json, sys
text = open(sys.argv[1], "rb").read().decode("utf-8")  # strict: raises on a bad byte
d = json.loads(text)
assert "wt\u00e9 \u2713" in text, "the UTF-8 name was not kept"
assert "\ufffd" in json.dumps(d, ensure_ascii=False), "no replacement character for the bad bytes"
print("ok: the page's names: UTF-8 kept, bad bytes replaced, strict UTF-8 throughout")
PYEOF

# The browser half.
mkdir -p "$BUILD"
jq -n --argjson p "$want" --argjson r "$wantv" --argjson q "$seq" --arg t "$top" --arg c "$topclass" --argjson s "$nseg" \
  '{peak_allocated_bytes: $p, peak_reserved_bytes: $r, peak_seq: $q, top_tensor: $t, top_class: $c, segments: $s}' > "$TMP/expect.json"
source viz/browser_env.bash
"$VIZ_PY" -B viz/browser_test.py "$TMP/run.html" "$TMP/expect.json" "$BUILD/viz_page.png" "$TMP/clicked.json" \
  || fail "the page in chromium"
# the tensor a click showed at a point that is not the peak was live there (the database says)
read -r cseq cbirth < <(jq -r '"\(.seq) \(.birth)"' "$TMP/clicked.json")
n=$("$GM" sql "$TMP/run.db" -c "SELECT count(*) FROM allocations WHERE id = $cbirth
    AND birth_seq <= $cseq AND (death_seq IS NULL OR death_seq > $cseq)" | tail -1)
[[ $cseq != "$seq" && $n == 1 ]] || fail "clicked at seq $cseq: allocation $cbirth was not live there (peak $seq)"
ok "a click at seq $cseq showed $(jq -r .name "$TMP/clicked.json"), live there in the database"
