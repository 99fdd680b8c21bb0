#!/usr/bin/env bash
# `gpumem viz A.db B.db -o job.html` / `gpumem viz DIR -o job.html`: one lane per rank.
# Two ranks' recordings (RANK=0/1, rank 1 with twice the batch):
#  - one lane per rank, in rank order, each with the rank's peak allocated and reserved as
#    `gpumem report` gives them, and its peak marker at exactly that height (the lane's own
#    sweep agrees with the report's);
#  - the page names the rank that sets the job's peak, as the merged report does;
#  - every lane has the steps 1..3 as its columns, aligned (the same labels in every lane);
#  - no script, no URL: a static page that opens from disk;
#  - one database keeps the single page.
source "$(dirname "$0")/e2e_common.bash"
export GPUMEM_STACKS=0
D=$TMP/job
mkdir -p "$D"
RANK=0 "$GM" record -q -o "$D/run-%r.db" -- "$TRAIN" --steps 3 -B 4 > /dev/null 2>&1 || fail "rank 0"
RANK=1 "$GM" record -q -o "$D/run-%r.db" -- "$TRAIN" --steps 3 -B 8 > /dev/null 2>&1 || fail "rank 1"
"$GM" viz "$D/run-1.db" "$D/run-0.db" -o "$TMP/job.html" 2> "$TMP/err.txt" || fail "viz of two ranks: $(cat "$TMP/err.txt")"
"$GM" report "$D" --json > "$TMP/r.json" || fail "merged report"
lanes=$(grep -o 'class="lane[^"]*" data-rank="[0-9]*" data-peak="[0-9]*" data-peak-reserved="[0-9]*"' "$TMP/job.html" \
  | sed -E 's/.*data-rank="([0-9]+)" data-peak="([0-9]+)" data-peak-reserved="([0-9]+)"/\1 \2 \3/')
want=$(jq -r '.ranks[] | "\(.rank) \(.peak_allocated) \(.peak_reserved)"' "$TMP/r.json")
[[ $lanes == "$want" ]] || fail "lanes (rank peak reserved): [$lanes], report: [$want]"
ok "one lane per rank, in rank order, with the report's peaks: $(echo $lanes)"
dots=$(grep -o 'class="peak" data-bytes="[0-9]*"' "$TMP/job.html" | grep -o '[0-9]*')
[[ $dots == "$(jq -r '.ranks[].peak_allocated' "$TMP/r.json")" ]] || fail "peak markers [$dots] are not the peaks"
grep -q "data-peak-rank=\"$(jq .peak_rank "$TMP/r.json")\"" "$TMP/job.html" || fail "the page names another peak rank"
ok "peak markers at the peaks; the page names rank $(jq .peak_rank "$TMP/r.json") as the job's peak"
[[ $(grep -c 'data-steps="1,2,3"' "$TMP/job.html") == 2 ]] || fail "lanes without steps 1,2,3"
for s in 1 2 3; do
  [[ $(grep -o ">step $s<" "$TMP/job.html" | wc -l) == 2 ]] || fail "step $s is not a column of every lane"
done
ok "steps 1..3 are the columns of both lanes"
if grep -qi '<script\|http' "$TMP/job.html"; then fail "the page has a script or a URL"; fi
"$GM" viz "$D" -o "$TMP/dir.html" 2> /dev/null || fail "viz DIR"
cmp -s "$TMP/job.html" "$TMP/dir.html" || fail "viz DIR differs from viz A.db B.db"
"$GM" viz "$D/run-0.db" -o "$TMP/one.html" 2> /dev/null || fail "single viz"
grep -q 'class="lane' "$TMP/one.html" && fail "one database gave the page of several ranks"
grep -q '<script' "$TMP/one.html" || fail "one database: not the single page"
ok "static page; viz DIR is the same page; one database keeps the single page"
