#!/usr/bin/env bash
# `gpumem advise` on any recording (issue 38): runs that hit an OOM, that already use a
# technique, that store activations as bf16; --check's exit status. Dry runs and the tiny
# trainer only (the gpt2-medium case is a dry run: under a second).
#  - an OOM after one complete step (gpt2-medium, B 4, T 1024, GPUMEM_LIMIT=12G): advised from
#    that step repeated as it runs again: every prediction equals the same run's without the
#    limit; never "already fits"; costs against an estimated step (not 0 s); the --budget 12G
#    plan, re-run under the limit, fits;
#  - an OOM after two complete steps (--seq-jitter, seed 4: step 3 draws the longest T): advised
#    from them, equal to the two-step run's; --budget at the limit is "not known" (exit 1);
#  - an OOM before any step completed: refused in one line that says why (exit 3); --oom-step
#    advises the partial trace, and a budget it fits is "not known" (exit 1);
#  - techniques already in the recorded command: flags merged (--offload activations on
#    --grad-none --offload optimizer is --offload activations,optimizer: 0% error), other values
#    of a flag in use offered (recompute choices joined, more micro-batches), --try merged;
#  - bf16 recordings: --recompute layer on gpt2 B 4 T 1024 0% error; every tiny re-run 0%;
#    --try '--act-dtype fp32' predicts the fp32 recording;
#  - --check exits 1 when a re-run fails, and when the plan measures over the budget (said);
#  - an unmet budget the parameters fit: the JSON's nearest miss is the smallest candidate.
source "$(dirname "$0")/e2e_common.bash"
export GPUMEM_STACKS=0
V=(env GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G) # dry runs on an 80 GB virtual GPU
GIB=1073741824
# the baseline, every recommendation's flags and predicted peaks, and those of the combinations
# both answers list (which combinations are on the front depends on the recorded op times too)
preds() { # file other
  jq -c --slurpfile o "$2" '([$o[0].combinations[].flags]) as $f | [.baseline, ([.recommendations[] | [.flags, .predicted]] | sort),
      ([.combinations[] | select(.flags as $x | $f | index($x)) | [.flags, .predicted]] | sort)]' "$1"
}
# every re-run of a JSON answer: measured, errors exactly 0
exact() { # file label
  jq -e '(.check_failed // 0) == 0 and ([(.recommendations + .combinations)[] | select(.measured != null)] | length) > 0
         and ([(.recommendations + .combinations)[] | select(.measured != null)
               | select(.measured.error_allocated_pct != 0 or .measured.error_reserved_pct != 0)] | length == 0)' "$1" > /dev/null \
    || fail "$2: $(jq -c '[(.recommendations + .combinations)[] | select(.measured != null or .check_error != null) | [.flags, .measured.error_allocated_pct, .measured.error_reserved_pct, .check_error]]' "$1")"
}

# ---- an OOM after the first (warm-up) step
MED=(--model gpt2-medium -B 4 -T 1024 --dry-run --steps 2)
set +e
"${V[@]}" GPUMEM_LIMIT=12G "$GM" record -q -o "$TMP/oom.db" -- "$TRAIN" "${MED[@]}" > "$TMP/out.txt" 2>&1
rc=$?
set -e
(( rc == 2 )) && grep -q cudaErrorMemoryAllocation "$TMP/out.txt" \
  || fail "gpt2-medium under GPUMEM_LIMIT=12G: exit $rc, want its OOM: $(tail -2 "$TMP/out.txt")"
"${V[@]}" "$GM" record -q -o "$TMP/nolim.db" -- "$TRAIN" "${MED[@]}" > "$TMP/out.txt" 2>&1 || fail "gpt2-medium without a limit"
"${V[@]}" "$GM" advise "$TMP/oom.db" --budget 12G > "$TMP/oom.txt" || fail "advise --budget 12G on the OOM recording exited $?"
grep -q "already fits" "$TMP/oom.txt" && fail "the OOM recording 'already fits': $(grep -A1 '^budget' "$TMP/oom.txt")"
grep -q "^note: the recorded run hit an OOM at step 2/fwd (logits: .* limit 12.00 GiB set by GPUMEM_LIMIT): advised from the one step" "$TMP/oom.txt" \
  || fail "no note on the OOM: $(head -4 "$TMP/oom.txt")"
grep -q "^time: a dry run (no compute recorded): step 0\.0*[1-9]" "$TMP/oom.txt" || fail "costs against a 0 s step: $(grep '^time' "$TMP/oom.txt")"
"${V[@]}" "$GM" advise "$TMP/oom.db" --json > "$TMP/oom.json"
"${V[@]}" "$GM" advise "$TMP/nolim.db" --json > "$TMP/nolim.json"
[[ $(preds "$TMP/oom.json" "$TMP/nolim.json") == "$(preds "$TMP/nolim.json" "$TMP/oom.json")" ]] \
  || fail "the OOM recording's advice differs from the run's without the limit: $(diff <(preds "$TMP/oom.json" "$TMP/nolim.json" | jq -c '.[1:][][]') <(preds "$TMP/nolim.json" "$TMP/oom.json" | jq -c '.[1:][][]') | head -4)"
jq -e '.oom.advised_from == "first_step_repeated" and .oom.complete_steps == 1 and .oom.name == "logits" and .step_s > 0
       and ([(.recommendations + .combinations)[] | select(.cost.extra_time_pct == null)] | length == 0)' "$TMP/oom.json" > /dev/null \
  || fail "OOM JSON: $(jq -c '{oom, step_s}' "$TMP/oom.json")"
"${V[@]}" GPUMEM_LIMIT=12G "$GM" advise "$TMP/oom.db" --budget 12G --check --top 1 --json > "$TMP/oomc.json" \
  || fail "the 12G plan's re-run under the limit: exit $?: $(jq -c '.plan' "$TMP/oomc.json")"
jq -e --argjson g "$GIB" '.plan.measured.peak_reserved <= 12 * $g and .plan_over_budget_bytes == 0 and .check_failed == 0' "$TMP/oomc.json" > /dev/null \
  || fail "the 12G plan: $(jq -c '.plan | {flags, predicted, measured}' "$TMP/oomc.json")"
exact "$TMP/oomc.json" "the OOM recording's re-runs"
ok "OOM at step 2/fwd after 1 step: $(preds "$TMP/oom.json" "$TMP/nolim.json" | jq '.[1] + .[2] | length') predictions equal the unlimited run's (baseline $(jq .baseline.peak_reserved "$TMP/oom.json") B reserved); plan '$(jq -r .plan.flags "$TMP/oomc.json")' measures $(jq .plan.measured.peak_reserved "$TMP/oomc.json") B under the limit"

# ---- an OOM after two complete steps: the third draws a longer T
J=(--model gpt2 -B 4 -T 1024 --dry-run --seq-jitter --seed 4)
set +e
"${V[@]}" GPUMEM_LIMIT=5300M "$GM" record -q -o "$TMP/j3.db" -- "$TRAIN" "${J[@]}" --steps 3 > "$TMP/out.txt" 2>&1
rc=$?
set -e
(( rc == 2 )) || fail "--seq-jitter --seed 4 under 5300M: exit $rc, want an OOM in step 3: $(grep ^step "$TMP/out.txt" | tr '\n' ' ')"
"${V[@]}" "$GM" record -q -o "$TMP/j2.db" -- "$TRAIN" "${J[@]}" --steps 2 > "$TMP/out.txt" 2>&1 || fail "--seq-jitter two steps"
"${V[@]}" "$GM" advise "$TMP/j3.db" --json > "$TMP/j3.json" || fail "advise on the step-3 OOM"
"${V[@]}" "$GM" advise "$TMP/j2.db" --json > "$TMP/j2.json"
[[ $(preds "$TMP/j3.json" "$TMP/j2.json") == "$(preds "$TMP/j2.json" "$TMP/j3.json")" ]] || fail "the step-3 OOM's advice differs from the two-step run's"
jq -e '.oom.advised_from == "complete_steps" and .oom.complete_steps == 2 and (.oom.where | startswith("step 3/"))' "$TMP/j3.json" > /dev/null \
  || fail "step-3 OOM JSON: $(jq -c .oom "$TMP/j3.json")"
set +e
"${V[@]}" "$GM" advise "$TMP/j3.db" --budget 5300M > "$TMP/j3.txt" 2>&1
rc=$?
set -e
(( rc == 1 )) && grep -q "^budget .*: not known: the complete steps fit" "$TMP/j3.txt" && ! grep -q "already fits" "$TMP/j3.txt" \
  || fail "--budget 5300M on the step-3 OOM: exit $rc: $(grep -A1 '^budget' "$TMP/j3.txt")"
ok "OOM at $(jq -r .oom.where "$TMP/j3.json") after 2 steps: advised from them (= the two-step run); --budget at the limit: not known, exit 1"

# ---- an OOM before any step completed: refused, or the partial trace with --oom-step
G2=(--model gpt2 -B 4 -T 1024 --dry-run --steps 2)
set +e
"${V[@]}" GPUMEM_LIMIT=2G "$GM" record -q -o "$TMP/o1.db" -- "$TRAIN" "${G2[@]}" > "$TMP/out.txt" 2>&1
rc=$?
"${V[@]}" "$GM" advise "$TMP/o1.db" --budget 80G > "$TMP/o1.txt" 2> "$TMP/o1.err"
rc1=$?
"${V[@]}" "$GM" advise "$TMP/o1.db" --budget 80G --oom-step > "$TMP/o1p.txt" 2>&1
rc2=$?
set -e
(( rc == 2 )) || fail "gpt2 under 2G: exit $rc, want an OOM"
(( rc1 == 3 )) && [[ ! -s $TMP/o1.txt && $(wc -l < "$TMP/o1.err") == 1 ]] \
  && grep -q "hit an OOM at step 1/.* before any step completed: rerun with GPUMEM_LIMIT raised, or --oom-step to advise from the partial trace" "$TMP/o1.err" \
  || fail "the step-1 OOM: exit $rc1, stdout $(wc -c < "$TMP/o1.txt") bytes, stderr: $(cat "$TMP/o1.err")"
(( rc2 == 1 )) && grep -q "^note: .*--oom-step" "$TMP/o1p.txt" && grep -q "^budget .*: not known: the partial trace" "$TMP/o1p.txt" \
  && ! grep -q "already fits" "$TMP/o1p.txt" || fail "--oom-step --budget 80G: exit $rc2: $(grep -E '^(note|budget)' "$TMP/o1p.txt")"
ok "OOM in step 1: refused ($(cut -c1-90 "$TMP/o1.err")...); --oom-step: the partial trace, its budget not known"

# ---- a technique already in the recorded command: merged flags, other values offered
"${V[@]}" "$GM" record -q -o "$TMP/go.db" -- "$TRAIN" "${G2[@]}" --grad-none --offload optimizer > "$TMP/out.txt" 2>&1 || fail "gpt2 --grad-none --offload optimizer"
"${V[@]}" "$GM" advise "$TMP/go.db" --try '--offload activations' --check --json > "$TMP/go.json" || fail "--try --offload activations --check: exit $?"
jq -e '.recommendations[0].flags == "--offload activations,optimizer"' "$TMP/go.json" > /dev/null \
  || fail "--try '--offload activations' on --offload optimizer: flags $(jq -c '.recommendations[0].flags' "$TMP/go.json")"
exact "$TMP/go.json" "--try '--offload activations' on --grad-none --offload optimizer"
"${V[@]}" "$GM" advise "$TMP/go.db" --json > "$TMP/go2.json"
jq -e '([.recommendations[] | select(.flags == "--offload activations,optimizer")] | length == 1)
       and ([(.recommendations + .combinations)[] | select(.techniques | index("grad_none"))] | length == 0)
       and ([(.recommendations + .combinations)[] | select(.flags | test("--offload optimizer( |$)"))] | length == 0)' "$TMP/go2.json" > /dev/null \
  || fail "on --grad-none --offload optimizer: $(jq -c '[.recommendations[].flags]' "$TMP/go2.json")"
ok "--grad-none --offload optimizer: activations offload offered and re-run as --offload activations,optimizer, 0% error"
"$GM" record -q -o "$TMP/tg.db" -- "$TRAIN" --steps 2 --recompute gelu --accum 2 > "$TMP/out.txt" 2>&1 || fail "tiny --recompute gelu --accum 2"
"$GM" advise "$TMP/tg.db" --json > "$TMP/tg.json"
jq -e '([.recommendations[] | select(.technique == "recompute") | .flags] | (length >= 3 and all(test("^--recompute gelu,"))))
       and ([.recommendations[] | select(.flags == "--accum 4")] | length == 1)' "$TMP/tg.json" > /dev/null \
  || fail "on --recompute gelu --accum 2: $(jq -c '[.recommendations[].flags]' "$TMP/tg.json")"
"$GM" advise "$TMP/tg.db" --try '--recompute mlp --accum 4' --check --json > "$TMP/tg2.json" || fail "--try on --recompute gelu --accum 2"
jq -e '.recommendations[0].flags == "--recompute gelu,mlp --accum 4"' "$TMP/tg2.json" > /dev/null \
  || fail "--try '--recompute mlp --accum 4' on --recompute gelu --accum 2: $(jq -c '.recommendations[0].flags' "$TMP/tg2.json")"
exact "$TMP/tg2.json" "--try '--recompute mlp --accum 4' on --recompute gelu --accum 2"
set +e
"$GM" advise "$TMP/tg.db" --try '--accum 3' > /dev/null 2> "$TMP/err.txt"
rc=$?
set -e
(( rc == 2 )) && grep -q "splits the recorded micro-batches" "$TMP/err.txt" || fail "--try '--accum 3' on --accum 2: exit $rc: $(cat "$TMP/err.txt")"
ok "--recompute gelu --accum 2: $(jq -r '[.recommendations[] | select(.technique == "recompute") | .flags] | join(", ")' "$TMP/tg.json") offered; --recompute gelu,mlp --accum 4 0% error"

# ---- bf16 recordings: advised as their fp32 trace with bf16 applied again
"${V[@]}" "$GM" record -q -o "$TMP/bf.db" -- "$TRAIN" "${G2[@]}" --act-dtype bf16 > "$TMP/out.txt" 2>&1 || fail "gpt2 --act-dtype bf16"
"${V[@]}" "$GM" advise "$TMP/bf.db" --try '--recompute layer' --check --json > "$TMP/bf.json" || fail "bf16 --try --recompute layer --check: exit $?"
exact "$TMP/bf.json" "gpt2 B 4 T 1024 --act-dtype bf16, --recompute layer"
jq -e '.notes | any(test("a bf16 recording: advised as its fp32 trace"))' "$TMP/bf.json" > /dev/null || fail "no bf16 note: $(jq -c .notes "$TMP/bf.json")"
"$GM" record -q -o "$TMP/tb.db" -- "$TRAIN" --steps 2 --act-dtype bf16 > "$TMP/out.txt" 2>&1 || fail "tiny --act-dtype bf16"
"$GM" advise "$TMP/tb.db" --check --top "$(under_san 30 3)" --json > "$TMP/tb.json" || fail "tiny bf16 --check: exit $?"
exact "$TMP/tb.json" "tiny --act-dtype bf16"
"$GM" record -q -o "$TMP/t.db" -- "$TRAIN" --steps 2 > "$TMP/out.txt" 2>&1 || fail "tiny"
"$GM" advise "$TMP/tb.db" --try '--act-dtype fp32' --json > "$TMP/tb32.json"
"$GM" advise "$TMP/t.db" --json > "$TMP/t.json"
jq -e --slurpfile f "$TMP/t.json" '.recommendations[0].flags == "--act-dtype fp32" and .recommendations[0].predicted == $f[0].baseline' \
  "$TMP/tb32.json" > /dev/null || fail "--try '--act-dtype fp32' on tiny bf16: $(jq -c '.recommendations[0].predicted' "$TMP/tb32.json"), the fp32 run $(jq -c .baseline "$TMP/t.json")"
ok "bf16: gpt2 --recompute layer and $(jq '[(.recommendations + .combinations)[] | select(.measured != null)] | length' "$TMP/tb.json") tiny re-runs at 0% error; --act-dtype fp32 predicts the fp32 run"

# ---- --check: a failed re-run, a plan that measures over its budget
cp "$TMP/t.db" "$TMP/bad.db"
"$GM" sql "$TMP/bad.db" --write -c "UPDATE meta SET value = value || ' --no-such-flag' WHERE key = 'cmdline';
  UPDATE meta SET value = json_insert(value, '\$[#]', '--no-such-flag') WHERE key = 'argv'" > /dev/null
set +e
"$GM" advise "$TMP/bad.db" --try '--grad-none' --check --json > "$TMP/bad.json" 2> /dev/null
rc=$?
set -e
(( rc == 1 )) && jq -e '.check_failed == 1 and (.recommendations[0].check_error | test("failed"))' "$TMP/bad.json" > /dev/null \
  || fail "a failed re-run: exit $rc, $(jq -c '{check_failed, e: .recommendations[0].check_error}' "$TMP/bad.json")"
cp "$TMP/t.db" "$TMP/b8.db" # its re-runs are made with -B 8: the plan for -B 4 misses
"$GM" sql "$TMP/b8.db" --write -c "UPDATE meta SET value = value || ' -B 8' WHERE key = 'cmdline';
  UPDATE meta SET value = json_insert(value, '\$[#]', '-B', '\$[#]', '8') WHERE key = 'argv'" > /dev/null
budget=$(( $(jq .baseline.peak_reserved "$TMP/t.json") - 1 ))
set +e
"$GM" advise "$TMP/b8.db" --budget "$budget" --check --top 1 > "$TMP/b8.txt" 2> "$TMP/b8.err"
rc=$?
"$GM" advise "$TMP/b8.db" --budget "$budget" --check --top 1 --json > "$TMP/b8.json" 2> /dev/null
set -e
(( rc == 1 )) && grep -q "the plan MISSES the budget" "$TMP/b8.txt" && grep -q "plan measured .* over the budget" "$TMP/b8.err" \
  && jq -e '.plan_over_budget_bytes > 0' "$TMP/b8.json" > /dev/null || fail "a plan over its budget: exit $rc: $(grep -A4 '^budget' "$TMP/b8.txt")"
ok "--check exits 1: a failed re-run, and a plan measured $(jq .plan_over_budget_bytes "$TMP/b8.json") bytes over its budget"

# ---- an unmet budget the parameters fit: the nearest miss, the smallest candidate
set +e
"$GM" advise "$TMP/t.db" --budget 1M --json > "$TMP/b1.json"
rc=$?
set -e
(( rc == 1 )) && jq -e '.plan == null and .floor.parameters < 1048576 and .nearest != null
       and .shortfall_bytes == .nearest.predicted.peak_reserved - 1048576
       and ([(.recommendations + .combinations)[] | .predicted.peak_reserved] | min) == .nearest.predicted.peak_reserved
       and (.why | test("nearest miss"))' "$TMP/b1.json" > /dev/null \
  || fail "--budget 1M on tiny: exit $rc: $(jq -c '{floor, shortfall_bytes, n: .nearest.predicted, why}' "$TMP/b1.json")"
ok "--budget 1M: $(jq -r .why "$TMP/b1.json")"
