#!/usr/bin/env bash
# `gpumem advise DB --ranks N`: ZeRO-3 (parameters sharded, --prefetch K, --offload params)
# predicted from a recording of ONE rank, checked against mpirun re-runs (--check).
#  - gpt2 124M, one rank at -B 2 T 1024 (dry run), predicted for 4 ranks (global -B 8): every
#    rank's measured peak (the largest and the smallest rank's) within 0.5% of the prediction,
#    allocated and reserved, with and without --offload params;
#  - the prediction's zero 2 - zero 3 equals the trainer's schedule figure (zero3_schedule.awk:
#    the shard saving less the head and the last layer gathered at the start of the backward);
#  - DeepSpeed's estimate formula is printed beside, labelled, and equals 4L + 18 Psi/N,
#    4L + 2 Psi/N and 4L for this model's Psi and largest layer L;
#  - the tiny model at 2 and 3 ranks with --prefetch 0 and 3: allocated within 0.5% as well;
#  - a recording that already shards is refused for ZeRO-3 with the reason.
#  - the 70B-class case: L80-C8192-H64 at T 2048, --ranks 8 --budget 48G finds a plan whose
#    re-run under mpirun -np 8 on 48 GiB devices fits on every rank, predicted within 0.5%; at
#    24G nothing fits and the shortfall is said per category.
source "$(dirname "$0")/e2e_common.bash"
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
source "$(dirname "$0")/../mpi.bash"
mpi_setup advise_zero3 "$TRAIN"
[[ $("$TRAIN" --help 2>&1) == *--prefetch* ]] || { echo "skipped: $TRAIN has no --zero 3" >&2; exit 77; }
export GPUMEM_STACKS=0 GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G

# every rank within 0.5%: the largest and the smallest rank's measured peaks, both kinds
within() { # json label
  jq -e '[.zero3_predictions[] | .measured | .error_allocated_pct, .error_reserved_pct,
          .error_allocated_min_rank_pct, .error_reserved_min_rank_pct | fabs] | length == 8 and max <= 0.5' "$1" > /dev/null \
    || fail "$2: $(jq -c '[.zero3_predictions[] | [.offload_params, .peak_allocated, .peak_reserved, .measured, .check_error]]' "$1")"
  ok "$2: $(jq -r '[.zero3_predictions[] | "zero 3\(if .offload_params then "+offload params" else "" end) \(.peak_allocated) vs \(.measured.peak_allocated) (\(.measured.error_allocated_pct)% allocated, \(.measured.error_reserved_pct)% reserved, smallest rank \(.measured.error_allocated_min_rank_pct)%)"] | join("; ")' "$1")"
}

"$GM" record -q -o "$TMP/g.db" -- "$TRAIN" --model gpt2 -B 2 -T 1024 --steps 3 --dry-run > "$TMP/g.txt" 2>&1 \
  || fail "gpt2 one rank: $(tail -3 "$TMP/g.txt")"
timeout 300 "$GM" advise "$TMP/g.db" --ranks 4 --check --json > "$TMP/g4.json" || fail "advise gpt2 --ranks 4 --check: $(head -c 600 "$TMP/g4.json")"
jq -e '.predictions | map(.zero) == [0, 1, 2]' "$TMP/g4.json" > /dev/null || fail "the ZeRO-0/1/2 predictions changed shape"
jq -e '.zero3_predictions | map([.zero, .prefetch, .offload_params]) == [[3, 1, false], [3, 1, true]]' "$TMP/g4.json" > /dev/null \
  || fail "zero3_predictions: $(jq -c '.zero3_predictions | map([.zero, .prefetch, .offload_params])' "$TMP/g4.json")"
jq -e '.zero3_predictions[0].flags == "-B 8 --zero 3 --prefetch 1" and .zero3_predictions[1].flags == "-B 8 --zero 3 --prefetch 1 --offload params"' \
  "$TMP/g4.json" > /dev/null || fail "flags: $(jq -c '[.zero3_predictions[].flags]' "$TMP/g4.json")"
within "$TMP/g4.json" "gpt2 124M, 4 ranks, -B 8 T 1024"

# (the schedule counts requested bytes; gpumem's peaks are of the allocator's 512-byte blocks)
want=$(awk -v W=4 -f "$(dirname "$0")/zero3_schedule.awk")
got=$(jq '.predictions[2].peak_allocated - .zero3_predictions[0].peak_allocated' "$TMP/g4.json")
meas=$(jq '.predictions[2].measured.peak_allocated - .zero3_predictions[0].measured.peak_allocated' "$TMP/g4.json")
[[ $got == "$meas" ]] || fail "predicted zero 2 - zero 3 = $got, measured $meas"
awk -v g="$got" -v w="$want" 'BEGIN { d = g - w; if (d < 0) d = -d; exit !(d <= 0.001 * w) }' \
  || fail "predicted zero 2 - zero 3 = $got, the trainer's schedule says $want"
ok "zero 2 - zero 3: predicted $got = measured $meas bytes; the schedule's figure (zero3_schedule.awk) $want"

# DeepSpeed's formulas for this model: Psi parameters, L the largest layer's (12 C^2 + 13 C)
psi=124475904 L=$((12 * 768 * 768 + 13 * 768))
jq -e --argjson p $psi --argjson l $L '.deepspeed_estimate as $d | $d.params == $p and $d.largest_layer_params == $l
       and $d.zero3_bytes == 4 * $l + ((18 * $p / 4) | floor) and $d.zero3_offload_optimizer_bytes == 4 * $l + ((2 * $p / 4) | floor)
       and $d.zero3_offload_params_bytes == 4 * $l and ($d.formula | test("DeepSpeed"))' "$TMP/g4.json" > /dev/null \
  || fail "deepspeed_estimate: $(jq -c .deepspeed_estimate "$TMP/g4.json")"
"$GM" advise "$TMP/g.db" --ranks 4 --zero 3 > "$TMP/g4.txt" || fail "text"
grep -q "DeepSpeed's estimate formula" "$TMP/g4.txt" && grep -q "4L + 18 Psi/N" "$TMP/g4.txt" || fail "the text has no DeepSpeed formula: $(cat "$TMP/g4.txt")"
grep -q -- "--zero 3 --prefetch 1 --offload params" "$TMP/g4.txt" || fail "the text has no ZeRO-3 rows: $(cat "$TMP/g4.txt")"
ok "DeepSpeed's estimate formula beside: $(jq -c '.deepspeed_estimate | [.zero3_bytes, .zero3_offload_optimizer_bytes, .zero3_offload_params_bytes]' "$TMP/g4.json") (predicted $(jq '.zero3_predictions[0].peak_allocated' "$TMP/g4.json"))"

# the tiny model: prefetch 0 and 3, 2 and 3 ranks (uneven shards)
"$GM" record -q -o "$TMP/t.db" -- "$TRAIN" --model tiny -B 2 -T 64 --steps 3 --dry-run > /dev/null 2>&1 || fail "tiny run"
for N in 2 3; do
  for K in 0 3; do
    "$GM" advise "$TMP/t.db" --ranks $N --zero 3 --prefetch $K --check --json > "$TMP/t.json" || fail "tiny N=$N K=$K"
    jq -e --argjson K $K '[.zero3_predictions[] | .prefetch == $K] | all and length == 2' "$TMP/t.json" > /dev/null || fail "tiny: prefetch"
    jq -e '[.zero3_predictions[] | .measured | .error_allocated_pct, .error_allocated_min_rank_pct | fabs] | length == 4 and max <= 0.5' "$TMP/t.json" > /dev/null \
      || fail "tiny N=$N K=$K: $(jq -c '[.zero3_predictions[] | [.peak_allocated, .measured]]' "$TMP/t.json")"
  done
done
ok "tiny, 2 and 3 ranks, --prefetch 0 and 3: allocated within 0.5% on every rank"

# a recording that already shards: ZeRO-3 refused with the reason, ZeRO-0..2 still printed
"$GM" record -q -o "$TMP/z.db" -- "$TRAIN" --model tiny -B 2 -T 64 --steps 2 --dry-run --zero 3 > /dev/null 2>&1 || fail "zero 3 run"
"$GM" advise "$TMP/z.db" --ranks 2 --json 2> /dev/null > "$TMP/z.json" || fail "advise on a zero 3 recording"
jq -e '(.zero3_predictions | length) == 0 and (.zero3_skipped | test("already shards"))' "$TMP/z.json" > /dev/null \
  || fail "a sharded recording: $(jq -c '{zero3_skipped, n: (.zero3_predictions | length)}' "$TMP/z.json")"
ok "a recording made with --zero 3: ZeRO-3 not predicted, and said why"

# --budget with --ranks: the cheapest plan that fits (ZeRO 0-3, prefetch, offload params and
# optimizer, recompute layer), its
# mpirun line, re-run (--check) within the budget on every rank; nothing fits: by how much, per
# category, exit 1
set +e
"$GM" advise "$TMP/g.db" --ranks 4 --budget 2.8G --check --json > "$TMP/b.json"; rc=$?
set -e
[[ $rc == 0 ]] || fail "--budget 2.8G exit $rc: $(jq -c .budget "$TMP/b.json")"
jq -e '.budget.plan as $p | $p.zero == 3 and $p.peak_reserved <= 2.8 * 1073741824 and ($p.mpirun | test("^mpirun (--allow-run-as-root )?-np 4 .*-B 8 .*--zero 3 --prefetch [0-2]"))
       and $p.measured.every_rank_within_budget and $p.measured.peak_reserved <= 2.8 * 1073741824' "$TMP/b.json" > /dev/null \
  || fail "--budget 2.8G: $(jq -c .budget "$TMP/b.json")"
ok "--budget 2.8G --ranks 4: $(jq -r '.budget.plan | "\(.mpirun): predicted \(.peak_reserved), measured \(.measured.peak_reserved) reserved"' "$TMP/b.json")"
# ZeRO-3 with the optimizer offloaded and a layer's activations recomputed: predicted = measured
"$GM" advise "$TMP/g.db" --ranks 4 --budget 1.7G --check --json > "$TMP/b2.json" || fail "--budget 1.7G: $(jq -c .budget "$TMP/b2.json")"
jq -e '.budget.plan as $p | ($p.flags | test("--offload params,optimizer --recompute layer")) and $p.measured.every_rank_within_budget
       and ((($p.peak_reserved - $p.measured.peak_reserved) / $p.measured.peak_reserved * 100) | fabs) <= 0.5
       and ((($p.peak_allocated - $p.measured.peak_allocated) / $p.measured.peak_allocated * 100) | fabs) <= 0.5' "$TMP/b2.json" > /dev/null \
  || fail "--budget 1.7G: $(jq -c .budget.plan "$TMP/b2.json")"
ok "--budget 1.7G: $(jq -r '.budget.plan | "\(.flags): predicted \(.peak_allocated)/\(.peak_reserved), measured \(.measured.peak_allocated)/\(.measured.peak_reserved)"' "$TMP/b2.json")"
set +e
"$GM" advise "$TMP/g.db" --ranks 4 --budget 1G --json > "$TMP/b1.json"; rc=$?
"$GM" advise "$TMP/g.db" --ranks 4 --budget 1G > "$TMP/b1.txt"; rc2=$?
set -e
[[ $rc == 1 && $rc2 == 1 ]] || fail "--budget 1G: exit $rc/$rc2, want 1"
jq -e '.budget.plan == null and .budget.shortfall_bytes > 0 and (.budget.nearest.categories | .gradients > 0 and .optimizer_state == 0 and .activations_and_gathered > 0)
       and (.budget.nearest.flags | test("--offload params,optimizer --recompute layer"))
       and .budget.nearest.peak_reserved - .budget.shortfall_bytes == 1073741824' "$TMP/b1.json" > /dev/null \
  || fail "--budget 1G: $(jq -c .budget "$TMP/b1.json")"
grep -q "nothing fits" "$TMP/b1.txt" || fail "--budget 1G text: $(cat "$TMP/b1.txt")"
ok "--budget 1G: nothing fits, short by $(jq .budget.shortfall_bytes "$TMP/b1.json") bytes, per category $(jq -c .budget.nearest.categories "$TMP/b1.json")"

# The 70B-class case (issue 43): L80-C8192-H64 (64.9B parameters), B 1, T 2048, one zero-0 rank
# recorded (about 1.1 TB of virtual device memory; a second since the virtual GPU's page tables
# stopped being sorted arrays), planned for 8 ranks at 48G and re-run under mpirun -np 8 on
# 48 GiB devices: every rank's measured peaks within the budget and within 0.5% of the plan's
GPUMEM_SIM_MEMORY=2T "$GM" record -q -o "$TMP/l80.db" -- "$TRAIN" --model L80-C8192-H64 --max-T 2048 -B 1 -T 2048 \
  --steps 3 --dry-run > "$TMP/l80.txt" 2>&1 || fail "L80 one rank: $(tail -3 "$TMP/l80.txt")"
GPUMEM_SIM_MEMORY=48G timeout 300 "$GM" advise "$TMP/l80.db" --ranks 8 --budget 48G --check --json > "$TMP/l80b.json" \
  || fail "L80 --ranks 8 --budget 48G --check: $(jq -c .budget "$TMP/l80b.json")"
G48=$((48 * 1073741824))
jq -e --argjson b $G48 '.budget.plan as $p | $p.zero == 3 and $p.peak_reserved <= $b
       and ($p.mpirun | test("^mpirun (--allow-run-as-root )?-np 8 .*--model L80-C8192-H64 .*-B 8 .*--zero 3"))
       and $p.measured.every_rank_within_budget and $p.measured.peak_reserved <= $b and $p.measured.min_rank_peak_reserved <= $b
       and ((($p.peak_reserved - $p.measured.peak_reserved) / $p.measured.peak_reserved * 100) | fabs) <= 0.5
       and ((($p.peak_allocated - $p.measured.peak_allocated) / $p.measured.peak_allocated * 100) | fabs) <= 0.5' \
  "$TMP/l80b.json" > /dev/null || fail "L80 --budget 48G: $(jq -c .budget "$TMP/l80b.json")"
ok "L80-C8192-H64, 8 ranks, --budget 48G: $(jq -r '.budget.plan | "\(.flags): predicted \(.peak_allocated)/\(.peak_reserved), measured (largest rank) \(.measured.peak_allocated)/\(.measured.peak_reserved), smallest rank reserved \(.measured.min_rank_peak_reserved)"' "$TMP/l80b.json")"
set +e
GPUMEM_SIM_MEMORY=2T "$GM" advise "$TMP/l80.db" --ranks 8 --budget 24G --json > "$TMP/l80s.json"; rc=$?
set -e
[[ $rc == 1 ]] || fail "L80 --budget 24G: exit $rc, want 1"
jq -e '.budget.plan == null and .budget.nearest.peak_reserved - .budget.shortfall_bytes == 24 * 1073741824
       and (.budget.nearest.categories | .gradients > 0 and .activations_and_gathered > 0
            and .parameters + .gradients + .optimizer_state + .activations_and_gathered + .reserved_not_allocated == $n.peak_reserved)' \
  --argjson n "$(jq .budget.nearest "$TMP/l80s.json")" "$TMP/l80s.json" > /dev/null || fail "L80 --budget 24G: $(jq -c .budget "$TMP/l80s.json")"
ok "L80 --budget 24G: nothing fits, short by $(jq .budget.shortfall_bytes "$TMP/l80s.json") bytes, per category $(jq -c .budget.nearest.categories "$TMP/l80s.json")"
