#!/usr/bin/env bash
# gpumem viz on several ranks' databases (files, or a directory): one lane per rank, ranked by
# meta.rank (else in the order given), each lane's highest point its rank's peak allocated as
# `gpumem report` computes it, and the rank that sets the job's peak in detail below; then (when
# chromium, chromedriver and selenium are installed) the page in headless chromium, network
# blocked (viz/browser_ranks.py).
source "$(dirname "$0")/e2e_common.bash"
mkdir -p "$TMP/runs"
# two "ranks" of unequal size: rank 1 holds more activations (a larger batch), so it sets the peak
for r in 0 1; do
  RANK=$r "$GM" record -q -o "$TMP/runs/run-$r.db" -- "$TRAIN" --model tiny --data "$TEXT" --steps 3 \
    -B $((2 + 2 * r)) -T 32 > "$TMP/rec-$r.txt" 2>&1 || fail "rank $r under gpumem: $(tail -3 "$TMP/rec-$r.txt")"
  "$GM" report --json "$TMP/runs/run-$r.db" > "$TMP/report-$r.json"
done
p0=$(jq .peak.live_bytes "$TMP/report-0.json") p1=$(jq .peak.live_bytes "$TMP/report-1.json")
(( p1 > p0 )) || fail "rank 1's peak $p1 is not above rank 0's $p0: the test's premise"
data() { sed -n 's/^const D = \(.*\);$/\1/p' "$1"; }
# given in reverse order
"$GM" viz "$TMP/runs/run-1.db" "$TMP/runs/run-0.db" -o "$TMP/ranks.html" 2> "$TMP/err.txt" \
  || fail "gpumem viz A B exited $?: $(cat "$TMP/err.txt")"
data "$TMP/ranks.html" > "$TMP/d.json"
jq -e . "$TMP/d.json" > /dev/null || fail "the page's data is not JSON"
by=$(jq -r .ranks.by "$TMP/d.json")
[[ $by == meta.rank ]] || fail "ranks taken by $by, not meta.rank (RANK=0/1 was set): $(cat "$TMP/err.txt")"
want_ranks="0 1" want_peaks="$p0 $p1" want_db="run-0.db run-1.db"
[[ $(jq -r '[.ranks.lanes[].rank] | join(" ")' "$TMP/d.json") == "$want_ranks" ]] || fail "lane ranks: $(jq -c '[.ranks.lanes[].rank]' "$TMP/d.json")"
[[ $(jq -r '[.ranks.lanes[].lane.buckets | map(.[1]) | max] | join(" ")' "$TMP/d.json") == "$want_peaks" ]] \
  || fail "lane peaks $(jq -c '[.ranks.lanes[].lane.buckets | map(.[1]) | max]' "$TMP/d.json"), reports $want_peaks"
[[ $(jq -r '[.ranks.lanes[].peak_allocated] | join(" ")' "$TMP/d.json") == "$want_peaks" ]] || fail "lane peak_allocated"
[[ $(jq -r '[.ranks.lanes[].db | split("/") | last] | join(" ")' "$TMP/d.json") == "$want_db" ]] || fail "lane databases"
[[ $(jq -r '[.ranks.lanes[].lane.steps | length] | join(" ")' "$TMP/d.json") == "3 3" ]] || fail "steps per lane"
dr=$(jq -r '.ranks.lanes[.ranks.detail].peak_allocated' "$TMP/d.json")
[[ $dr == "$p1" && $(jq .summary.peak_allocated_bytes "$TMP/d.json") == "$p1" ]] \
  || fail "the detail is not the rank with the job's peak ($p1): detail $dr, summary $(jq .summary.peak_allocated_bytes "$TMP/d.json")"
ok "2 lanes by $by, peaks $want_peaks as the reports say, the job's peak rank ($p1) in detail"
# two databases naming the same rank: numbered in the order given, and said so
cp "$TMP/runs/run-1.db" "$TMP/dup.db"
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("UPDATE meta SET value = 0 WHERE key = \x27rank\x27"); c.commit()' "$TMP/dup.db"
"$GM" viz "$TMP/dup.db" "$TMP/runs/run-0.db" -o "$TMP/dup.html" 2> "$TMP/err.txt" || fail "duplicate ranks: exited $?"
[[ $(data "$TMP/dup.html" | jq -r '.ranks.by + " " + ([.ranks.lanes[].peak_allocated] | map(tostring) | join(" "))') == "order $p1 $p0" ]] \
  || fail "duplicate ranks: $(data "$TMP/dup.html" | jq -c '[.ranks.by, [.ranks.lanes[].peak_allocated]]')"
grep -q "order given" "$TMP/err.txt" || fail "duplicate ranks, but nothing said so: $(cat "$TMP/err.txt")"
ok "two databases naming rank 0: numbered in the order given ($(cat "$TMP/err.txt"))"
# a directory: its *.db files, the same lanes
"$GM" viz "$TMP/runs" -o "$TMP/dir.html" 2> /dev/null || fail "gpumem viz DIR exited $?"
data "$TMP/dir.html" > "$TMP/dd.json"
[[ $(jq -c '[.ranks.lanes[] | [.rank, .peak_allocated]]' "$TMP/dd.json") == "$(jq -c '[.ranks.lanes[] | [.rank, .peak_allocated]] | sort_by(.[1])' "$TMP/dd.json")" ]] \
  || fail "directory lanes: $(jq -c '[.ranks.lanes[] | [.rank, .peak_allocated]]' "$TMP/dd.json")"
[[ $(jq '.ranks.lanes | length' "$TMP/dd.json") == 2 ]] || fail "a directory of 2 databases gave $(jq '.ranks.lanes | length' "$TMP/dd.json") lanes"
ok "a directory: 2 lanes, rank 0 ($p0) then rank 1 ($p1)"
# one database: no ranks member, the page as before
"$GM" viz "$TMP/runs/run-0.db" -o "$TMP/one.html" || fail "one database"
[[ $(data "$TMP/one.html" | jq 'has("ranks")') == false ]] || fail "one database has rank lanes"
mkdir -p "$TMP/empty"
"$GM" viz "$TMP/empty" -o "$TMP/x.html" 2> "$TMP/err.txt" && fail "an empty directory exited 0"
[[ $(wc -l < "$TMP/err.txt") -eq 1 ]] || fail "empty directory: not a one-line error"
ok "one database: no lanes; an empty directory: $(cat "$TMP/err.txt")"

source viz/browser_env.bash
mkdir -p "$BUILD"
read -r -a pk <<< "$want_peaks"
jq -n --argjson a "${pk[0]}" --argjson b "${pk[1]}" '{ranks: [0, 1], peaks: [$a, $b], detail_rank: (if $a > $b then 0 else 1 end)}' \
  > "$TMP/expect.json"
OUT=$BUILD/tests/viz_ranks
mkdir -p "$OUT"
cp "$TMP/ranks.html" "$OUT/page.html"
"$VIZ_PY" -B viz/browser_ranks.py "$OUT/page.html" "$TMP/expect.json" "$OUT/page.png" || fail "the page in chromium"
