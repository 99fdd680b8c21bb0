#!/usr/bin/env bash
# `gpumem report A.db B.db` / `gpumem report DIR`: the recordings of several ranks, merged.
# Two "ranks" are two runs of the tiny trainer under `gpumem record` with RANK=0/1 set (so the
# recorder writes meta.rank and meta.world_size), rank 1 with twice the batch and a planted leak:
#  - meta.rank, meta.world_size and meta.rank_from are written from the launcher's variables;
#  - the per-rank table lists both ranks with their own peaks (each equal to its single report's);
#  - rank 1 sets the job's peak, and the biggest differences it holds are activations (forward
#    classes), which the larger batch doubles; the imbalance is max/min of the peaks;
#  - the timeline has every step for both ranks, and its largest value is the rank's peak;
#  - leaks per rank: rank 1's planted leak, none on rank 0;
#  - a directory gives the same report; databases without meta.rank are ranked in file order;
#  - one database keeps the single report.
source "$(dirname "$0")/e2e_common.bash"
export GPUMEM_STACKS=0
D=$TMP/job
mkdir -p "$D"
RANK=0 WORLD_SIZE=2 "$GM" record -q -o "$D/run-%r.db" -- "$TRAIN" --steps 3 -B 4 > "$TMP/o0.txt" 2>&1 \
  || fail "rank 0: $(tail -3 "$TMP/o0.txt")"
RANK=1 WORLD_SIZE=2 "$GM" record -q -o "$D/run-%r.db" -- "$TRAIN" --steps 3 -B 8 --leak > "$TMP/o1.txt" 2>&1 \
  || fail "rank 1: $(tail -3 "$TMP/o1.txt")"
[[ -f $D/run-0.db && -f $D/run-1.db ]] || fail "%r did not give run-0.db and run-1.db: $(ls "$D")"
for r in 0 1; do
  m=$("$GM" sql "$D/run-$r.db" -c "SELECT group_concat(key || '=' || value, ' ') FROM meta WHERE key IN ('rank', 'world_size', 'rank_from')" | tail -1)
  [[ $m == *"rank=$r"* && $m == *"world_size=2"* && $m == *"rank_from=RANK"* ]] || fail "run-$r.db meta: $m"
done
ok "meta.rank, world_size, rank_from written from RANK / WORLD_SIZE"

"$GM" report "$D/run-1.db" "$D/run-0.db" --json > "$TMP/m.json" || fail "merged report --json failed"
"$GM" report "$D/run-0.db" --json > "$TMP/s0.json" || fail "report run-0"
"$GM" report "$D/run-1.db" --json > "$TMP/s1.json" || fail "report run-1"
p0=$(jq ".summary.peak_allocated" "$TMP/s0.json")
p1=$(jq ".summary.peak_allocated" "$TMP/s1.json")
[[ $p0 =~ ^[0-9]+$ && $p1 =~ ^[0-9]+$ ]] || fail "no peak_allocated in the single reports ($p0, $p1)"
jq -e --argjson p0 "$p0" --argjson p1 "$p1" '
  (.ranks | map(.rank)) == [0, 1] and (.ranks | map(.rank_from)) == ["meta", "meta"]
  and .ranks[0].peak_allocated == $p0 and .ranks[1].peak_allocated == $p1
  and (.ranks | map(.world_size)) == [2, 2] and all(.ranks[]; .complete and .peak_reserved >= .peak_allocated)
  and .peak_rank == 1 and $p1 > $p0
  and (.imbalance.max_over_min - ($p1 / $p0) | fabs) < 0.001 and .imbalance.spread_bytes == $p1 - $p0
  and .peak_rank_reason.difference_bytes == $p1 - $p0' "$TMP/m.json" > /dev/null \
  || fail "merged table: $(jq -c '{ranks: [.ranks[] | del(.steps)], imbalance, peak_rank}' "$TMP/m.json") single peaks $p0 $p1"
ok "per-rank table: rank 0 $p0, rank 1 $p1 bytes (each its own report's peak); rank 1 sets the peak"
jq -e '.peak_rank_reason.groups | length > 0 and (.[0].phase == "forward")
       and all(.[]; .excess_bytes > 0 and .bytes == .others_mean_bytes + .excess_bytes)' "$TMP/m.json" > /dev/null \
  || fail "why rank 1: $(jq -c .peak_rank_reason "$TMP/m.json")"
ok "why: $(jq -r '.peak_rank_reason.groups[:3] | map("\(.class) (\(.phase)) +\(.excess_bytes)") | join(", ")' "$TMP/m.json")"
jq -e '(.timeline | map(.step)) == [1, 2, 3] and all(.timeline[]; (.peak_allocated | length) == 2 and all(.[]; . > 0))
       and ([.timeline[].peak_allocated[0]] | max) == .ranks[0].peak_allocated
       and ([.timeline[].peak_allocated[1]] | max) == .ranks[1].peak_allocated' "$TMP/m.json" > /dev/null \
  || fail "timeline: $(jq -c .timeline "$TMP/m.json")"
ok "timeline aligned by step, each rank's largest step is its peak"
jq -e '.ranks[0].leaked_allocations == 0 and .ranks[1].leaked_allocations > 0 and .ranks[1].leaked_bytes > 0' "$TMP/m.json" > /dev/null \
  || fail "leaks per rank: $(jq -c '[.ranks[] | [.leaked_bytes, .leaked_allocations]]' "$TMP/m.json")"
ok "leaks per rank: rank 1 $(jq .ranks[1].leaked_bytes "$TMP/m.json") bytes in $(jq .ranks[1].leaked_allocations "$TMP/m.json"), rank 0 none"

"$GM" report "$D" > "$TMP/m.txt" || fail "report DIR failed"
grep -q "^gpumem report: 2 ranks" "$TMP/m.txt" || fail "text: $(head -3 "$TMP/m.txt")"
grep -Eq '^  0 ' "$TMP/m.txt" && grep -Eq '^  1 +\*' "$TMP/m.txt" || fail "text table: $(cat "$TMP/m.txt")"
grep -q "Rank 1 sets the job's peak" "$TMP/m.txt" || fail "text: no peak rank line"
grep -q "^Timeline" "$TMP/m.txt" && grep -q "^Leaks per rank" "$TMP/m.txt" || fail "text: no timeline or leaks"
"$GM" report "$D" --json | jq -e '(.ranks | map(.rank)) == [0, 1]' > /dev/null || fail "report DIR --json"
ok "report DIR: the same ranks, text table with the peak rank marked"

# no meta.rank: the files' order
"$GM" record -q -o "$TMP/a.db" -- "$TRAIN" --steps 2 -B 8 > /dev/null 2>&1 || fail "run a"
"$GM" record -q -o "$TMP/b.db" -- "$TRAIN" --steps 2 -B 4 > /dev/null 2>&1 || fail "run b"
"$GM" report "$TMP/a.db" "$TMP/b.db" --json > "$TMP/f.json" || fail "report without meta.rank"
jq -e '(.ranks | map(.rank)) == [0, 1] and (.ranks | map(.rank_from)) == ["file_order", "file_order"]
       and .peak_rank == 0 and (.ranks[0].path | endswith("a.db"))' "$TMP/f.json" > /dev/null \
  || fail "file order: $(jq -c '[.ranks[] | [.rank, .rank_from, .path]], .peak_rank' "$TMP/f.json")"
ok "without meta.rank the ranks follow the files' order"

# not ranks of the job: one file twice is one rank, not two (exit 2); a recording without
# meta.rank among ranks that carry it is left out of a directory (a line says so) and refused
# when named (exit 2)
set +e
"$GM" report "$D/run-0.db" "$D/run-0.db" > /dev/null 2> "$TMP/err.txt"; rc=$?
[[ $rc == 2 ]] && grep -q "run-0.db is one database given twice" "$TMP/err.txt" || fail "report run.db run.db: exit $rc, $(cat "$TMP/err.txt")"
"$GM" report "$D/run-0.db" "$D/../job/run-0.db" > /dev/null 2>&1; rc=$?
[[ $rc == 2 ]] || fail "one database under two names: exit $rc"
cp "$TMP/a.db" "$D/demo.db"
"$GM" report "$D" > "$TMP/m2.txt" 2> "$TMP/err.txt"; rc=$?
[[ $rc == 0 ]] && grep -q "^gpumem report: 2 ranks$" "$TMP/m2.txt" || fail "DIR with an unrelated recording: exit $rc, $(head -1 "$TMP/m2.txt")"
grep -q "left out $D/demo.db: it carries no meta.rank" "$TMP/err.txt" || fail "no line about the database left out: $(cat "$TMP/err.txt")"
"$GM" report "$D/run-0.db" "$D/run-1.db" "$D/demo.db" > /dev/null 2> "$TMP/err.txt"; rc=$?
[[ $rc == 2 ]] && grep -q "demo.db is not a rank of the job" "$TMP/err.txt" || fail "an unrelated recording named: exit $rc, $(cat "$TMP/err.txt")"
set -e
rm "$D/demo.db"
ok "one file twice is refused; a recording without meta.rank is left out of DIR, refused when named"

# one database: the single report, unchanged
"$GM" report "$D/run-0.db" > "$TMP/one.txt" || fail "single report"
grep -q "ranks" "$TMP/one.txt" && grep -q "^gpumem report: 2 ranks" "$TMP/one.txt" && fail "one database gave the merged report"
jq -e 'has("ranks") | not' "$TMP/s0.json" > /dev/null || fail "one database --json has the merged shape"
set +e
"$GM" report "$D" --bogus > /dev/null 2>&1; rc=$?
set -e
[[ $rc == 2 ]] || fail "an unknown option of the merged report exits $rc, want 2"
ok "one database keeps the single report; unknown options exit 2"
