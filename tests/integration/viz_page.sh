#!/usr/bin/env bash
# gpumem viz on trainer recordings: one self-contained page whose data agrees with `gpumem
# report` and the database (peaks, buckets, what was live, the bands' allocations, the segment
# map's blocks and their allocations, categories, the window it opens on, the start-up frames),
# with no URL but XML namespaces, and the analyses by default when the recording is small; then
# (when chromium, chromedriver and selenium are installed) a 60-step recording's page is opened
# from disk in headless chromium with the network blocked (viz/browser_test.py). What the
# browser half leaves for people to look at (the page, its screenshot, its print as PDF) is in
# $BUILD/tests/viz_page/.
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
            (.timeline.stack.class.v[$j] | add) != .timeline.buckets[$j][2] or
            (.timeline.stack.category.v[$j] | add) != .timeline.buckets[$j][2])] | length' "$TMP/data.json")
[[ $bad == 0 ]] || fail "$bad buckets whose stacked layers do not add up to allocated"
ok "reserved line's max $wantv = report's peak reserved; stacks (phase, class, category) add up in every bucket"
# what the page lists live at a bucket's moment was live then, and is the largest live then (the
# database says; every 97th bucket)
jq -r '.tensors.rows as $rows | .timeline as $t | range(0; $t.buckets | length; 97) as $j |
       "\($t.buckets[$j][5]) \($t.live[$j] | length) \([$t.live[$j][] | $rows[.] | "\(.[3]):\(.[1])"] | join(","))"' \
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
[[ $(wc -l < "$TMP/err.txt") -eq 2 ]] && tail -1 "$TMP/err.txt" | grepq -x "(gpumem viz --help tells more)" \
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
# the segment map's blocks are their allocations: each allocated block's row has the block's
# size, and that allocation was made at the block's address
jq -r --argjson s "$(jq '[.snapshots[] | select(.reason == "peak")][0].seq' "$TMP/data.json")" \
  '.tensors.rows as $r | [.snapshots[] | select(.reason == "peak")][0].segments[].blocks[] | select(.[2] == 1) |
   "\(.[0]) \(.[1]) \(if .[4] >= 0 then "\($r[.[4]][3]) \($r[.[4]][1]) \($r[.[4]][4])" else "- - -" end)"' "$TMP/data.json" > "$TMP/blocks.txt"
sseq=$(jq '[.snapshots[] | select(.reason == "peak")][0].seq' "$TMP/data.json")
nblk=0
while read -r addr size birth bytes death; do
  [[ $birth != - ]] || fail "allocated block at $addr has no allocation on the page"
  [[ $bytes == "$size" ]] || fail "block at $addr of $size bytes shows an allocation of $bytes"
  (( birth <= sseq && (death == 0 || death > sseq) )) || fail "block at $addr: allocation $birth..$death not live at the map's seq $sseq"
  nblk=$((nblk + 1))
done < "$TMP/blocks.txt"
(( nblk > 0 )) || fail "no allocated block in the peak segment map"
jq -r '.tensors.rows as $r | [.snapshots[] | select(.reason == "peak")][0].segments[].blocks[] | select(.[2] == 1) | "\(.[0]) \($r[.[4]][3])"' \
  "$TMP/data.json" | sort > "$TMP/blocks_page.txt"
"$GM" sql "$TMP/run.db" -c "SELECT e.addr, e.seq FROM events e WHERE e.seq IN ($(awk '{ print $2 }' "$TMP/blocks_page.txt" | paste -sd,))" \
  | tail -n +2 | tr '|' ' ' | sort > "$TMP/blocks_db.txt"
diff "$TMP/blocks_page.txt" "$TMP/blocks_db.txt" > /dev/null || fail "blocks and the addresses their allocations were made at differ: $(diff "$TMP/blocks_page.txt" "$TMP/blocks_db.txt" | head -3)"
ok "segment map: $nblk allocated blocks, each its allocation (size, address, live at seq $sseq)"
# the map's moment: the red dot's, or what happened between them as the database says
pseq=$(jq .summary.peak_allocated_seq "$TMP/data.json")
if [[ $sseq != "$pseq" ]]; then
  lo=$(( sseq < pseq ? sseq : pseq )) hi=$(( sseq < pseq ? pseq : sseq ))
  dev="device >= 0 AND kind IN (1, 3)"
  made=$("$GM" sql "$TMP/run.db" -c "SELECT count(*) FROM allocations WHERE $dev AND birth_seq > $lo AND birth_seq <= $hi" | tail -1)
  freed=$("$GM" sql "$TMP/run.db" -c "SELECT count(*) FROM allocations WHERE $dev AND death_seq > $lo AND death_seq <= $hi" | tail -1)
  [[ $(jq -c '[.snapshots[] | select(.reason == "peak")][0].between | [.made, .freed]' "$TMP/data.json") == "[$made,$freed]" ]] \
    || fail "between the map ($sseq) and the red dot ($pseq): page $(jq -c '[.snapshots[] | select(.reason == "peak")][0].between' "$TMP/data.json"), database $made made, $freed freed"
  ok "the map is at seq $sseq, the red dot at $pseq: $made made and $freed freed between, as the page says"
fi
# categories from names: grad.* gradients, adam.* optimizer state, the parameters they name
for c in "grad.:2" "adam.:3"; do
  n=$(jq --arg p "${c%%:*}" --argjson k "${c##*:}" '[.tensors.rows[] | select((.[0] | startswith($p)) and (.[6] != $k or .[7] != 1))] | length' "$TMP/data.json")
  [[ $n == 0 ]] || fail "$n rows named ${c%%:*}* are not category ${c##*:} from their name"
done
[[ $(jq -c '[.tensors.rows[] | select(.[0] == "wte" or .[0] == "h0.qkv_w") | [.[6], .[7]]] | unique' "$TMP/data.json") == "[[1,1]]" ]] \
  || fail "wte / h0.qkv_w are not parameters from their names: $(jq -c '[.tensors.rows[] | select(.[0] == "wte") ]' "$TMP/data.json")"
[[ $(jq -c '[.tensors.rows[] | select(.[0] == "h0.mlp.fc") | .[6]] | unique' "$TMP/data.json") == "[4]" ]] \
  || fail "h0.mlp.fc (born in forward, freed in backward) is not an activation"
jq -e '.categories.by_default' "$TMP/data.json" > /dev/null || fail "the trainer's page does not colour by category first"
ok "categories: grad.* gradients, adam.* optimizer state, wte a parameter (names), h0.mlp.fc an activation (phases)"
# the window the page opens on: the peak's step and one step either side
read -r f0 f1 fk < <(jq -r '.timeline.focus | "\(.first_seq) \(.last_seq) \(.step)"' "$TMP/data.json")
want_f=$(jq -r --argjson p "$pseq" '.timeline as $t | ([range(0; $t.steps | length) | select($t.steps[.][1] >= $p)][0]) as $k |
         "\(if $k >= 2 then $t.steps[$k - 2][1] + 1 else $t.first_seq end) \(if $k + 1 < ($t.steps | length) then $t.steps[$k + 1][1] else $t.last_seq end) \($k)"' "$TMP/data.json")
[[ "$f0 $f1 $fk" == "$want_f" ]] || fail "focus $f0 $f1 $fk, the peak's steps say $want_f"
(( f0 <= pseq && pseq <= f1 )) || fail "the focus $f0..$f1 misses the peak $pseq"
ok "opens on seq $f0..$f1: step index $fk (step $(jq .summary.peak_step "$TMP/data.json")) of the peak, one either side"
# bands: a small recording's page carries every device allocation, as the database has them
jq -e '.timeline.bands.all' "$TMP/data.json" > /dev/null || fail "a 3-step recording's page does not carry every allocation"
jq -r '.tensors.rows as $r | .timeline.bands.ids[] | "\($r[.][3]) \($r[.][4]) \($r[.][1])"' "$TMP/data.json" | sort > "$TMP/bands_page.txt"
"$GM" sql "$TMP/run.db" -c "SELECT birth_seq, coalesce(death_seq, 0), size FROM allocations WHERE device >= 0 AND kind IN (1, 3)" \
  | tail -n +2 | tr '|' ' ' | sort > "$TMP/bands_db.txt"
cmp -s "$TMP/bands_page.txt" "$TMP/bands_db.txt" || fail "the bands' allocations differ from the database's: $(diff "$TMP/bands_page.txt" "$TMP/bands_db.txt" | head -3)"
ok "bands: $(wc -l < "$TMP/bands_page.txt") allocations, each as the database has it"
# stacks: from where the program called (no gpumem frame), start-up frames counted, not listed
st=$(jq -r '.tensors as $x | $x.rows[0][10] as $s | [$x.stacks[$s][0][] | $x.frames[.][0]] | join(" < ")' "$TMP/data.json")
[[ $st == t_alloc_on* && $st == *main* && $st != *__libc_start* && $st != *gm_* ]] || fail "a stack reads: $st"
[[ $(jq '.tensors as $x | $x.stacks[$x.rows[0][10]][1]' "$TMP/data.json") -ge 2 ]] || fail "no start-up frames counted below main"
# flames: the start-up nodes are the ones outward of main
jq -r '.flame_peak as $f | $f.nodes[] | select(.[3] == 1) | $f.names[.[1]]' "$TMP/data.json" > "$TMP/startup.txt"
grep -q '^__libc_start_call_main' "$TMP/startup.txt" || fail "__libc_start_call_main is not a start-up node: $(tr '\n' ';' < "$TMP/startup.txt")"
grep -q '^main ' "$TMP/startup.txt" && fail "main is marked start-up"
[[ $(jq '.flame_peak as $f | [$f.nodes[] | select(.[3] == 0 and .[0] >= 0) | select($f.nodes[.[0]][3] == 1 or .[0] == 0) | $f.names[.[1]]] | map(startswith("main ")) | all' "$TMP/data.json") == true ]] \
  || fail "a frame right under the start-up ones is not main"
ok "stacks from t_alloc_on to main ($st), start-up frames folded; flame start-up nodes: $(tr '\n' ' ' < "$TMP/startup.txt")"
# analyses by default: all three on a recording this small, none with --with none
"$GM" viz "$TMP/run.db" -o "$TMP/dflt.html" || fail "gpumem viz (default analyses) exited $?"
sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/dflt.html" > "$TMP/dflt.json"
[[ $(jq -c '[(.analyses | keys | sort), .analyses_how.skipped, .analyses_how.asked]' "$TMP/dflt.json") == '[["advise","frag","tune"],[],false]' ]] \
  || fail "default analyses on $(jq .summary.events "$TMP/dflt.json") events: $(jq -c '[(.analyses | keys), .analyses_how]' "$TMP/dflt.json")"
jq -e '.analyses.tune.recommended.conf and (.analyses.advise.recommendations | type == "array") and .analyses.frag.at_peak' "$TMP/dflt.json" > /dev/null \
  || fail "a default analysis failed: $(jq -c '[.analyses[] | .error? // empty]' "$TMP/dflt.json")"
"$GM" viz "$TMP/run.db" -o "$TMP/none.html" --with none || fail "--with none exited $?"
[[ $(sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/none.html" | jq -c '.analyses') == '{}' ]] || fail "--with none ran analyses"
ok "analyses: frag, advise and tune by default on $(jq .summary.events "$TMP/dflt.json") events; --with none runs none"
# a run that stopped at an OOM: what it freed while stopping is no temporary nor activation (no
# phase followed), and the OOM's segment map is there, at the OOM
GPUMEM_LIMIT=3M "$GM" record -q -o "$TMP/oom.db" -- "$TRAIN" --model tiny --data "$TEXT" --steps 3 -B 4 -T 64 \
  > "$TMP/oom.txt" 2>&1 && fail "the run under a 3 MiB limit did not run out of memory"
"$GM" viz "$TMP/oom.db" -o "$TMP/oom.html" || fail "gpumem viz of an OOM'd run exited $?"
sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/oom.html" > "$TMP/oom.json"
oseq=$(jq '.ooms[0].seq' "$TMP/oom.json")
[[ $oseq =~ ^[0-9]+$ ]] || fail "no OOM on the OOM'd run's page"
n=$(jq --argjson o "$oseq" '[.tensors.rows[] | select(.[4] > $o and (.[6] == 4 or .[6] == 5))] | length' "$TMP/oom.json")
[[ $n == 0 ]] || fail "$n allocations freed after the OOM (seq $oseq) are called activations or temporaries"
jq -e --argjson o "$oseq" '[.snapshots[] | select(.reason == "oom" and .seq <= $o + 1)] | length == 1' "$TMP/oom.json" > /dev/null \
  || fail "the OOM's segment map: $(jq -c '[.snapshots[] | [.reason, .seq]]' "$TMP/oom.json")"
ok "an OOM'd run (seq $oseq): nothing freed while stopping has a phase category; its segment map is the OOM's"
# Python frames first: a Python program's stacks on the page list its Python frames before the
# native ones (ctypes, libffi)
PY=/usr/bin/python3
if [[ -x $PY ]]; then
  "$GM" record -q -o "$TMP/py.db" -- "$PY" tests/integration/py/frames_main.py "$PWD/$BUILD/sim/libcudart.so.13" gil \
    > "$TMP/py.out" 2>&1 || fail "recording a Python program: $(tail -3 "$TMP/py.out")"
  "$GM" viz "$TMP/py.db" -o "$TMP/py.html" || fail "gpumem viz of a Python program exited $?"
  order=$(sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/py.html" | jq -r '.tensors as $x | [$x.stacks[] | [.[0][] | $x.frames[.][1]] | map(tostring) | join("")] | unique | .[]')
  [[ -n $order ]] || fail "the Python program's page has no stacks"
  grep -qv '^1*0*$' <<< "$order" && fail "a stack lists a native frame before a Python one: $order"
  grep -q '^1\+0' <<< "$order" || fail "no stack has Python frames then native ones: $order"
  sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/py.html" | jq -e '.tensors as $x | [$x.stacks[][0][] | $x.frames[.][0]] | any(test("frames_main.py:[0-9]+ in"))' > /dev/null \
    || fail "the Python program's stacks do not name frames_main.py"
  ok "a Python program's stacks: Python frames first ($(tr '\n' ' ' <<< "$order"))"
fi
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

# A longer run: 60 steps (more events than advise runs on by default: the page says how to add
# it), the one opened in the browser.
"$GM" record -q -o "$TMP/long.db" -- "$TRAIN" --model tiny --data "$TEXT" --steps 60 -B 2 -T 32 \
  > "$TMP/rec60.txt" 2>&1 || fail "trainer under gpumem, 60 steps: $(tail -3 "$TMP/rec60.txt")"
"$GM" viz "$TMP/long.db" -o "$TMP/long.html" || fail "gpumem viz of 60 steps exited $?"
sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/long.html" > "$TMP/long.json"
jq -e '.analyses_how as $h | ($h.skipped | map(.name)) == ["advise"] and ($h.skipped[0].limit < $h.events)
       and (.analyses | has("frag") and has("tune"))' "$TMP/long.json" > /dev/null \
  || fail "60 steps: analyses $(jq -c '[(.analyses | keys), .analyses_how]' "$TMP/long.json")"
ok "60 steps, $(jq .summary.events "$TMP/long.json") events: frag and tune by default, advise not (limit $(jq '.analyses_how.skipped[0].limit' "$TMP/long.json"))"

# The browser half: the 60-step page. What people can look at stays in $BUILD/tests/viz_page.
OUT=$BUILD/tests/viz_page
mkdir -p "$OUT"
cp "$TMP/long.html" "$OUT/page.html"
L=$TMP/long.db
lwant=$("$GM" report --json "$L" | jq .peak.live_bytes)
lres=$("$GM" report --json "$L" | jq .summary.peak_reserved)
lseq=$("$GM" report --json "$L" | jq .peak.seq)
# the band to hover: the largest allocation live at the peak that its step made (a stack deeper
# than the parameters' init)
lstart=$(jq --argjson p "$lseq" '.timeline as $t | ([range(0; $t.steps | length) | select($t.steps[.][1] >= $p)][0]) as $k
         | if $k > 0 then $t.steps[$k - 1][1] else 0 end' "$TMP/long.json")
q="SELECT birth_seq, name FROM allocations WHERE device >= 0 AND kind IN (1,3) AND birth_seq <= $lseq
   AND birth_seq > $lstart AND (death_seq IS NULL OR death_seq > $lseq) ORDER BY size DESC, birth_seq LIMIT 1"
IFS='|' read -r ltop_birth ltop < <("$GM" sql "$L" -c "$q" | tail -1)
[[ -n $ltop ]] || fail "no allocation made in the peak's step is live at the peak"
# its stack as the database has it: from the first frame outside gpumem to main
ltop_stack=$("$GM" sql "$L" -c "SELECT f.function || ' (' || replace(f.file, rtrim(f.file, replace(f.file, '/', '')), '') || ':' || f.line || ')'
    FROM stacks s JOIN frames f ON f.id = s.frame JOIN modules m ON m.id = f.module
    WHERE s.stack = (SELECT stack FROM events WHERE seq = $ltop_birth) AND m.path NOT LIKE '%libgpumem%' ORDER BY s.depth" \
  | tail -n +2 | sed '/^main /q' | jq -R . | jq -sc .)
[[ $(jq length <<< "$ltop_stack") -ge 4 && $(jq -r 'last' <<< "$ltop_stack") == main* ]] || fail "the top tensor's stack in the database: $ltop_stack"
lseg=$("$GM" sql "$L" -c "SELECT count(*) FROM segments WHERE snapshot = (SELECT min(id) FROM snapshots WHERE reason = 1)" | tail -1)
jq -n --argjson p "$lwant" --argjson r "$lres" --argjson q "$lseq" --arg t "$ltop" --argjson tb "$ltop_birth" \
  --argjson st "$ltop_stack" --argjson s "$lseg" --argjson steps "$(jq -c .timeline.steps "$TMP/long.json")" \
  --argjson ps "$(jq .summary.peak_step "$TMP/long.json")" --arg top_class "$(jq -r '.classes[0]' "$TMP/long.json")" \
  '{peak_allocated_bytes: $p, peak_reserved_bytes: $r, peak_seq: $q, peak_step: $ps, top_tensor: $t, top_birth: $tb,
    top_stack: $st, top_class: $top_class, segments: $s, steps: $steps}' > "$TMP/expect.json"
source viz/browser_env.bash
"$VIZ_PY" -B viz/browser_test.py "$OUT/page.html" "$TMP/expect.json" "$OUT" "$TMP/clicked.json" \
  || fail "the page in chromium"
# the tensor a click showed at a point that is not the peak was live there (the database says)
read -r cseq cbirth < <(jq -r '"\(.seq) \(.birth)"' "$TMP/clicked.json")
n=$("$GM" sql "$L" -c "SELECT count(*) FROM allocations WHERE id = $cbirth
    AND birth_seq <= $cseq AND (death_seq IS NULL OR death_seq > $cseq)" | tail -1)
[[ $cseq != "$lseq" && $n == 1 ]] || fail "clicked at seq $cseq: allocation $cbirth was not live there (peak $lseq)"
ok "a click at seq $cseq showed $(jq -r .name "$TMP/clicked.json"), live there in the database"
for f in page.png page.pdf; do [[ -s $OUT/$f ]] || fail "$OUT/$f was not written"; done
ok "for people to look at: $OUT/page.html, page.png, page.pdf"
# Many live allocations (~8,000, more than the page draws one by one, frees among them): what the
# bands draw is bounded by the chart's pixels (viz/browser_bands.py: at most 110 points per pixel
# of its width; before the bound the page drew 7.8 M points, a 94 MB SVG chromium took 8 s to
# draw), the allocations of 8 MiB and more (1 px and more) still bands of their own (at least
# half of those live at the peak: the thinnest may be summed underneath to stay in bounds).
GPUMEM_STACKS=0 GPUMEM_DB=$TMP/many.db "$BUILD/tests/integration/snapshot_app" many 9000 > "$TMP/many.txt" 2>&1 \
  || fail "snapshot_app many: $(cat "$TMP/many.txt")"
"$GM" viz "$TMP/many.db" -o "$OUT/many.html" || fail "gpumem viz of many live allocations exited $?"
mseq=$("$GM" report --json "$TMP/many.db" | jq .peak.seq)
mbig=$("$GM" sql "$TMP/many.db" -c "SELECT count(*) FROM allocations WHERE size >= 8388608 AND birth_seq <= $mseq
    AND (death_seq IS NULL OR death_seq > $mseq)" | tail -1)
[[ $mbig -ge 100 ]] || fail "snapshot_app many: $mbig allocations of 8 MiB or more live at the peak"
"$VIZ_PY" -B viz/browser_bands.py "$OUT/many.html" $((mbig / 2)) "$OUT/many.png" || fail "the page of many live allocations in chromium"
