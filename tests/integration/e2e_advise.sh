#!/usr/bin/env bash
# `gpumem advise`: predictions replayed through the allocator, checked by re-running.
#  - the unmodified trace replays to the recorded peaks exactly (tiny real compute, gpt2 dry run);
#  - every recommendation with flags, and at least three combinations, re-run with its flags
#    (--check): predicted peak allocated and peak reserved each within 5% of measured;
#  - --json lists every candidate whatever --top is (the text is cut by --top);
#  - a recording already using techniques gets other values of them, merged into its flags;
#  - --budget: the plan's re-run fits; an impossible budget exits 1 and says why, and its JSON
#    names the nearest miss, whose shortfall it gives, and no candidate goes below it;
#  - a recording without uses still gets recompute and accumulation advice, with the note;
#  - a recording that is not the trainer gets words and the PyTorch way, no flags.
source "$(dirname "$0")/e2e_common.bash"
export GPUMEM_STACKS=0
MAXERR=5

# all measured errors of a JSON answer within MAXERR, and no re-run failed (--check re-runs the
# first --top of each list; JSON lists them all)
check_errors() { # file label
  jq -e --argjson max "$MAXERR" '(.check_failed // 0) == 0 and ([(.recommendations + .not_worth_it + .combinations + [.plan // empty])[]
      | select(.flags != null and .flags != "" and (.measured != null or .check_error != null))
      | select(.check_error != null or (.measured.error_allocated_pct | fabs) > $max or (.measured.error_reserved_pct | fabs) > $max)]
      | length == 0)' "$1" > /dev/null \
    || fail "$2: a prediction off by more than $MAXERR% (or a re-run failed): $(jq -c '[(.recommendations + .combinations)[] | select(.measured != null or .check_error != null) | [.flags, .measured.error_allocated_pct, .measured.error_reserved_pct, .check_error]]' "$1")"
}

# ---- tiny, real compute
"$GM" record -q -o "$TMP/tiny.db" -- "$TRAIN" --steps 2 > "$TMP/out.txt" 2>&1 || fail "tiny run: $(tail -3 "$TMP/out.txt")"
"$GM" advise "$TMP/tiny.db" --check --top "$(under_san 20 3)" --json > "$TMP/tiny.json" || fail "advise tiny failed"
jq -e '.baseline.peak_allocated == .recorded.peak_allocated and .baseline.peak_reserved == .recorded.peak_reserved' \
  "$TMP/tiny.json" > /dev/null || fail "tiny: baseline replay $(jq -c .baseline "$TMP/tiny.json") != recorded $(jq -c .recorded "$TMP/tiny.json")"
ok "tiny: the unmodified trace replays to the recorded peaks ($(jq -c .baseline "$TMP/tiny.json"))"
# (a technique that lowers the peak allocated alone is listed as not worth it: re-run too)
nrec=$(jq '[(.recommendations + .not_worth_it)[] | select(.flags != null and .measured != null)] | length' "$TMP/tiny.json")
(( nrec >= $(under_san 8 3) )) || fail "tiny: only $nrec recommendations with flags re-run"
# largest saving first; equal savings: the least extra time, then the lowest peak allocated
jq -e '[.recommendations[] | [.predicted.peak_reserved, .cost.extra_time_s, .predicted.peak_allocated]] | . == sort' \
  "$TMP/tiny.json" > /dev/null || fail "tiny: recommendations out of order: $(jq -c '[.recommendations[] | [.technique, .predicted.peak_reserved, .cost.extra_time_s]]' "$TMP/tiny.json")"
# the text's "in short" names the largest saving over singles and combinations
"$GM" advise "$TMP/tiny.db" --top 20 > "$TMP/tiny.txt" || fail "advise tiny (text)"
short=$(sed -n 's/^in short: the largest saving[^:]*: \(.*\) (peak reserved .*/\1/p' "$TMP/tiny.txt")
[[ -n $short ]] || fail "tiny: no 'in short' line: $(head -8 "$TMP/tiny.txt")"
jq -e --arg f "$short" '([(.recommendations + .combinations)[] | .predicted.peak_reserved] | min) as $m
    | [(.recommendations + .combinations)[] | select(.flags == $f and .predicted.peak_reserved == $m)] | length > 0' \
  "$TMP/tiny.json" > /dev/null || fail "tiny: 'in short' names '$short', not a largest saving"
check_errors "$TMP/tiny.json" tiny
# each technique is predicted (recompute, offload, accum, grad_none, bf16): a recommendation, or
# not worth it (it lowers the peak allocated alone)
for t in recompute offload accum grad_none bf16; do
  jq -e --arg t "$t" '[(.recommendations + .not_worth_it)[] | select(.technique == $t)] | length > 0' "$TMP/tiny.json" > /dev/null \
    || fail "tiny: no $t predicted"
done
ok "tiny: $nrec recommendations re-run, each within $MAXERR% allocated and reserved"
ncombo=0
for f in "--recompute layer --grad-none" "--recompute attn --offload activations --act-dtype bf16" \
         "--accum 2 --offload optimizer --grad-none"; do
  "$GM" advise "$TMP/tiny.db" --try "$f" --check --json > "$TMP/try.json" || fail "advise --try '$f'"
  jq '{recommendations: .recommendations, combinations: []}' "$TMP/try.json" > "$TMP/try2.json"
  check_errors "$TMP/try2.json" "tiny $f"
  ncombo=$((ncombo + 1))
done
ok "tiny: $ncombo combinations re-run within $MAXERR%"

# ---- gpt2 124M, B 8, T 1024, dry run on an 80 GB virtual GPU
export GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G
G2=(--model gpt2 -B 8 -T 1024 --dry-run --steps 2)
"$GM" record -q -o "$TMP/g2.db" -- "$TRAIN" "${G2[@]}" > "$TMP/out.txt" 2>&1 || fail "gpt2 run: $(tail -3 "$TMP/out.txt")"
"$GM" advise "$TMP/g2.db" --check --top "$(under_san 12 2)" --json > "$TMP/g2.json" || fail "advise gpt2 failed"
jq -e '.baseline.peak_allocated == .recorded.peak_allocated and .baseline.peak_reserved == .recorded.peak_reserved' \
  "$TMP/g2.json" > /dev/null || fail "gpt2: baseline replay $(jq -c .baseline "$TMP/g2.json") != recorded $(jq -c .recorded "$TMP/g2.json")"
ok "gpt2: the unmodified trace replays to the recorded peaks"
check_errors "$TMP/g2.json" gpt2
nrec=$(jq '[.recommendations[] | select(.flags != null and .measured != null)] | length' "$TMP/g2.json")
ncombo=$(jq '[.combinations[] | select(.measured != null)] | length' "$TMP/g2.json")
(( nrec >= $(under_san 10 2) && ncombo >= $(under_san 3 2) )) || fail "gpt2: $nrec recommendations and $ncombo combinations re-run (want $(under_san 10 2) and $(under_san 3 2))"
jq -e '(.combinations | length) as $n | [.combinations[] | select((.techniques | length) >= 2 and .technique == "combo")] | length == $n' \
  "$TMP/g2.json" > /dev/null || fail "gpt2: a combination without several techniques"
ok "gpt2: $nrec recommendations and $ncombo combinations re-run, each within $MAXERR%"
# --json lists every candidate, whatever --top is; the text shows --top of them
"$GM" advise "$TMP/g2.db" --top 1 > "$TMP/top1.txt"
"$GM" advise "$TMP/g2.db" --top 1 --json > "$TMP/top1.json"
nr=$(sed -n 's/^recommendations (1 of \([0-9]*\),.*/\1/p' "$TMP/top1.txt")
# those that lower the peak allocated only are listed apart in the text (JSON: .lowers "allocated")
na=$(sed -n 's/^lowers the peak allocated only (\([0-9]*\): .*/\1/p' "$TMP/top1.txt")
nr=$(( ${nr:-0} + ${na:-0} ))
nc=$(sed -n 's/^combinations (.*; 1 of \([0-9]*\)):$/\1/p' "$TMP/top1.txt")
jq -e --argjson nr "${nr:-0}" --argjson nc "${nc:-0}" '(.recommendations | length) == $nr and (.combinations | length) == $nc
    and $nr > 1 and $nc > 1 and ([.recommendations[] | select(.technique == "grad_none")] | length) == 1' "$TMP/top1.json" > /dev/null \
  || fail "--top 1 --json lists $(jq '.recommendations | length' "$TMP/top1.json") recommendations and $(jq '.combinations | length' "$TMP/top1.json") combinations; the text counts ${nr:-?} and ${nc:-?}"
ok "--top 1: the text shows 1 of $nr recommendations and 1 of $nc combinations, the JSON lists them all"

# ---- a recording with --seq-jitter (T drawn per step), and one already using techniques:
# a flag it uses is merged (other recompute choices join mlp), set-to-none is not proposed again
"$GM" record -q -o "$TMP/jit.db" -- "$TRAIN" "${G2[@]}" --seq-jitter > "$TMP/out.txt" 2>&1 || fail "jitter run"
"$GM" advise "$TMP/jit.db" --check --top 3 --json > "$TMP/jit.json" || fail "advise jitter"
check_errors "$TMP/jit.json" "gpt2 --seq-jitter"
"$GM" record -q -o "$TMP/rcm.db" -- "$TRAIN" "${G2[@]}" --recompute mlp --grad-none > "$TMP/out.txt" 2>&1 || fail "recompute run"
"$GM" advise "$TMP/rcm.db" --check --top 2 --json > "$TMP/rcm.json" || fail "advise on a recompute recording"
check_errors "$TMP/rcm.json" "gpt2 --recompute mlp --grad-none"
jq -e '([(.recommendations + .combinations)[] | select(.techniques | index("grad_none"))] | length == 0)
    and ([(.recommendations + .combinations)[] | select(.techniques | index("recompute")) | .flags
          | select((test("--recompute [a-z,]*mlp") | not) or test("--recompute (gelu,)?mlp( |$)"))] | length == 0)
    and ([.recommendations[] | select(.technique == "recompute")] | length >= 2)' \
  "$TMP/rcm.json" > /dev/null || fail "on --recompute mlp --grad-none: $(jq -c '[(.recommendations + .combinations)[] | .flags]' "$TMP/rcm.json")"
ok "--seq-jitter and --recompute mlp --grad-none recordings: re-runs within $MAXERR%; other recompute choices merged with mlp ($(jq -r '[.recommendations[] | select(.technique == "recompute") | .flags] | join(", ")' "$TMP/rcm.json")), nothing proposed twice"

# ---- --budget: a plan that fits when re-run; an impossible one exits 1 with the reason
"$GM" advise "$TMP/g2.db" --budget 6G --check --top 1 --json > "$TMP/b.json" || fail "--budget 6G found no plan"
jq -e '.plan != null and .shortfall_bytes == 0 and .plan.predicted.peak_reserved <= 6 * 1073741824
       and .plan.measured.peak_reserved <= 6 * 1073741824' "$TMP/b.json" > /dev/null \
  || fail "--budget 6G: plan $(jq -c .plan "$TMP/b.json")"
ok "--budget 6G: plan '$(jq -r .plan.flags "$TMP/b.json")' measures $(jq .plan.measured.peak_reserved "$TMP/b.json") bytes reserved"
set +e
"$GM" advise "$TMP/g2.db" --budget 300M > "$TMP/b.txt" 2> "$TMP/b.err"
rc=$?
set -e
(( rc == 1 )) || fail "--budget 300M exited $rc, want 1"
grep -q "^why: " "$TMP/b.txt" || fail "--budget 300M does not say why: $(cat "$TMP/b.txt")"
grep -q "short by" "$TMP/b.txt" || fail "--budget 300M gives no shortfall"
"$GM" advise "$TMP/g2.db" --budget 300M --json > "$TMP/b.json" || true
# the nearest miss: in the JSON, the smallest of every candidate, and what the shortfall is of
jq -e '.plan == null and .shortfall_bytes > 0 and .nearest != null and (.why | length) > 0
       and .shortfall_bytes == .nearest.predicted.peak_reserved - 300 * 1048576
       and ([(.recommendations + .combinations)[] | .predicted.peak_reserved] | min) == .nearest.predicted.peak_reserved' \
  "$TMP/b.json" > /dev/null || fail "--budget 300M JSON: $(jq -c '{plan, shortfall_bytes, nearest: .nearest.predicted, why}' "$TMP/b.json")"
ok "--budget 300M exits 1: $(grep '^why: ' "$TMP/b.txt")"

# ---- no uses recorded: recompute and accumulation advice all the same, with the note
GPUMEM_USES=0 "$GM" record -q -o "$TMP/nouses.db" -- "$TRAIN" "${G2[@]}" > "$TMP/out.txt" 2>&1 || fail "gpt2 run without uses"
"$GM" advise "$TMP/nouses.db" > "$TMP/a.txt"
grep -q "uses: none recorded" "$TMP/a.txt" || fail "no note about missing uses"
"$GM" advise "$TMP/nouses.db" --json > "$TMP/nu.json"
jq -e '.uses == false and ([.recommendations[] | select(.technique == "recompute" or .technique == "accum")] | length >= 4)' \
  "$TMP/nu.json" > /dev/null || fail "no recompute/accumulation advice without uses"
jq -e --slurpfile u "$TMP/g2.json" '[.recommendations[] | [.flags, .predicted]] - [$u[0].recommendations[] | [.flags, .predicted]] == []' \
  "$TMP/nu.json" > /dev/null || fail "the predictions without uses differ from those with uses"
ok "without uses: recompute and accumulation advice, and the note"

# ---- not the trainer: the same recording under another command line gets words, not flags
cp "$TMP/g2.db" "$TMP/other.db"
"$GM" sql "$TMP/other.db" --write -c "UPDATE meta SET value = 'python3 train.py --batch 8' WHERE key = 'cmdline';
  UPDATE meta SET value = json_array('python3', 'train.py', '--batch', '8') WHERE key = 'argv'" > /dev/null
"$GM" advise "$TMP/other.db" --json > "$TMP/o.json"
jq -e '(.recommendations | length) as $n | .trainer == false and $n > 0
       and ([.recommendations[] | select(.flags == null and (.how | test("torch")))] | length == $n)' \
  "$TMP/o.json" > /dev/null || fail "not the trainer: $(jq -c '[.recommendations[] | {flags, how}]' "$TMP/o.json" | head -c 600)"
ok "another program: advice in words with the PyTorch way ($(jq -r '.recommendations[0].how' "$TMP/o.json" | head -c 80)...)"

# ---- an op held off the core in one step does not price its recompute, nor a stretched step
# the step time: each op's duration is the median of its recurrences (gm_advise.c, ops_median),
# and the step time the median step (gm_advise_cmd.c). One gelu range of a steady step and that
# step made 500 ms longer leave --recompute gelu's predicted extra time and the step time
# within 3 times what they were (a median may move to the next recurrence, as uneven as the
# machine's load; on the mean, both grow by 100 ms, a hundred times a tiny step).
env -u GPUMEM_SIM_BACKING -u GPUMEM_SIM_MEMORY "$GM" record -q -o "$TMP/h.db" -- "$TRAIN" --steps 6 --threads 1 \
  > "$TMP/out.txt" 2>&1 || fail "hiccup: the run failed: $(tail -3 "$TMP/out.txt")"
cp "$TMP/h.db" "$TMP/h2.db"
"$GM" sql "$TMP/h2.db" --write -c "UPDATE ranges SET end_ns = end_ns + 500000000 WHERE id = (SELECT min(id)
  FROM ranges WHERE path LIKE 'step 5/fwd/h%/gelu') OR path = 'step 5'" > /dev/null \
  || fail "hiccup: the database could not be changed"
[[ $("$GM" sql "$TMP/h2.db" -c "SELECT count(*) FROM ranges WHERE (path LIKE 'step 5/fwd/h%/gelu' OR path = 'step 5')
  AND end_ns - start_ns > 500000000" | tail -1) == 2 ]] || fail "hiccup: the planted ranges are missing"
cost() { "$GM" advise "$1" --try "--recompute gelu" --json | jq -r '"\(.recommendations[0].cost.extra_time_s) \(.step_s)"'; }
read -r s1 p1 < <(cost "$TMP/h.db")
read -r s2 p2 < <(cost "$TMP/h2.db")
near() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > 0 && b > 0 && b <= 3 * a && a <= 3 * b) }'; }
near "$s1" "$s2" && near "$p1" "$p2" \
  || fail "hiccup: --recompute gelu costs $s1 s a step of $p1 s; with one slow gelu and step, $s2 s of $p2 s"
ok "one gelu and its step 500 ms slower: --recompute gelu costs $s2 s a step of $p2 s; $s1 s of $p1 s without"

# ---- usage
"$GM" advise --help | grepq -- "--budget SIZE" || fail "advise --help"
set +e
"$GM" advise "$TMP/g2.db" --gpu V100 > /dev/null 2>&1; rc1=$?
"$GM" advise > /dev/null 2>&1; rc2=$?
"$GM" advise "$TMP/nonexistent.db" > /dev/null 2>&1; rc3=$?
set -e
(( rc1 == 2 && rc2 == 2 && rc3 == 3 )) || fail "exit codes: bad --gpu $rc1, no db $rc2, missing db $rc3"
ok "usage errors exit 2, an unreadable database 3"
