#!/usr/bin/env bash
# steps_inferred.sh — the steps gpumem infers from a recording's periodicity (no "step N" ranges,
# no names: gm_category.c's steps_from_period) and what it calls their allocations, on C programs
# whose loop is known (tests/apps/cat_app.c, churn_app.c, frag_app.c). Two defects of 2026-12-07:
#   eval  a training loop followed by one evaluation forward (cat_app N eval): the tokens the
#         evaluation adds at the end do not repeat, and the period was looked for from the end
#         only: "no repeating pattern ... record at least 3 steps" although there were N, and
#         every allocation "other". Now the loop's N steps, every allocation of the loop in its
#         category, the evaluation's after the steps (temporaries), the steps' highest moments
#         those of the same loop without the evaluation;
#   churn a loop that makes a batch of buffers and frees them (churn_app 6 8 r: no backward, no
#         gradient): its buffers were "activations" (20.37 MiB at the peak), the frees after each
#         step's highest point read as a backward. Now no step shows a backward (JSON
#         categories.backward false), no allocation is an activation: temporaries.
# Four more of 2026-12-07, against the truth of the same run with its NVTX ranges (a row NAME-nvtx):
#   accum  the included trainer with --accum 2 (tiny, 6 steps, dry run): 12 steps of 58 for 6,
#          each micro-batch a step (the update allocates nothing, so the sizes repeat with the
#          micro-batch). Now a token is the size and the launches and frees since the birth
#          before it: 6 steps of 116, each step's highest moment and the categories at the peak
#          those of the NVTX ranges, and each step two forward-backward passes (one, the second
#          micro-batch's 34 activations a step were temporaries): every allocation as the NVTX
#          run has it. So too with --accum 4 (20 steps for 5; the step began at the update, not at
#          one of the four micro-batches' alike lows) and gpt2 124M with --accum 2 (8 steps for 4;
#          the first layer's activations are a sixteenth of the highest: no pass ends before
#          they are freed);
#   jitter the trainer with --seq-jitter (T drawn anew each step: the sizes differ from step to
#          step): 5 steps of 7 allocations (one step's layers) where there were 7 steps. Now, the
#          sizes repeating over less than half the recording, the launches and frees between
#          births give the 7 steps of 58, as the ranges' (highest moments, categories at the
#          peak); without launches recorded (GPUMEM_USES=0) the first step is not found, and
#          categories.steps_uncertain says so instead of a silent count of 6;
#   next   cat_app's loop in a PyTorch loop's order (cat_app N next: the next input made before
#          the last one is dropped and the gradients set to none): the loop's last input, held
#          after it, was "optimizer state", the others "other", the workspace "parameters" (the
#          steps began after the input, where the fewest bytes are alive). Now each step begins
#          with its input: every allocation in its category;
#   churn1 churn_app 6 1 r (each step one buffer made and freed): 4 steps of 2 (a period held 2
#          allocations at least, as sizes alone cannot tell 1 from 2). Now 6 steps of 1.
# One more of 2026-12-07, against its NVTX run:
#   gnaccum the trainer with --grad-none --accum 2: the first micro-batch's backward makes the
#          gradients (kept through the second, freed in the update), so a step's sizes did not
#          repeat from its start and its two passes were read as one: 520 of 948 allocations as
#          the NVTX run (the first micro-batch's activations temporaries, its gradients
#          activations, the optimizer state gradients; 1.02 MiB of gradients at the peak for
#          0.51). Now each pass after the first begins as the step does (its sizes, those it
#          frees, for half of them or more), from where the step's sizes repeat longest: every
#          allocation as the NVTX run, and the peak's categories.
#   recompute, offact the trainer with --recompute layer / --offload activations: the backward
#          makes each layer's insides again (or brings them back), so the step's own allocations
#          are highest in the backward, and the backward was read from there: 511 of 628 / 493 of
#          616 allocations as the NVTX run (the logits activations read as temporaries, the
#          insides made again as activations, 3 gradients workspaces; at the peak 1.13 / 1.07 MiB
#          of activations for 0.13 / 0.002). Now a gradient (a parameter's size, made on top of
#          what the forward made and outliving it) made before the highest point moves the
#          backward to the highest point of the last rise before it, and steps that make none
#          (kept gradients: the first step only) take the first one's count of births: every
#          allocation as the NVTX run; so too with --grad-none (recgn, offactgn: 418 of 768 and
#          406 of 756 before), and in each micro-batch of --accum 2 (recaccum: 913 of 1144).
#   offopt the trainer with --offload optimizer: each update brings each parameter's AdamW state
#          in from pinned host memory, works on it and frees it: 404 of 740 allocations as the
#          NVTX run (its names), the 336 buffers of state temporaries of the update. Now what an
#          update makes, fills by a copy from a pinned host allocation (recorded uses) and frees,
#          or, in the first update, makes beside a host buffer of its size that it keeps, is
#          optimizer state where it has a parameter's size: every allocation as the NVTX run.
# Three more of 2026-12-07, against their NVTX runs:
#   bf16   the trainer with --param-dtype bf16: the backward first makes fp32 copies of the bf16
#          weights of the layer it works on first (as --zero 3 gathers shards), before the
#          logits' gradient: they were activations, 746 of 818 allocations as the NVTX run (at
#          the peak 2.90 MiB of activations for 2.71). Now births of a parameter's size just
#          before the backward's first allocation, no free between, outliving its first free of
#          something made before them, are the backward's: every allocation as the NVTX run;
#          so too cat_app's copy of its last parameter (cat-copies: an activation before), and
#          its logits of a parameter's size, freed first, stay activations (cat-square);
#   leakrec --leak --recompute layer: the leak's losses (kept each step, a bias's size) were the
#          first gradient, the backward began at the probabilities: 620 of 628. Now a size kept
#          from two steps or more is growth, not a gradient;
#   gpt2recgn gpt2 -B 4 -T 64 --recompute layer --grad-none: the logits' gradient, on top of
#          logits larger than any layer's insides, is the highest point before the first
#          gradient, and the backward was read from the next birth: 4,050 of 4,068. Now the
#          highest point after the fall must be a peak (a free follows it), else the highest
#          point before the gradient is the backward's.
# One more of 2026-12-07, against its NVTX run:
#   zero3  the trainer with --zero 3 (and --prefetch 2): each full gradient, made in the backward,
#          is reduce-scattered into this rank's shard (a gradient, freed in the update) and freed
#          at once: they were temporaries, 930 of 1098 allocations as the NVTX run. Now a
#          backward's allocation freed as the next thing after the birth of something no larger
#          that outlives it (no kernel, memset or other free between) is what that is: a gradient;
#          so too with --accum 2 (zero3accum: 1608 of 1944), whose second micro-batch adds each
#          full gradient into the shard by a launch of the two alone, then frees it.
# Two more of 2026-12-07, against their NVTX runs:
#   bfoffopt --param-dtype bf16 --offload optimizer: the fp32 master weights live on the host, so
#          no parameter on the device has the fp32 size: the gradients were workspaces, the
#          backward's fp32 copies of the bf16 weights activations, the AdamW state brought in
#          temporaries (830 of 1266). Now the other operand of a launch of two, one a parameter
#          (a copy made from it, or the master it is made from), has a parameter's size, and
#          such a copy brought from the host is no optimizer state (the master: a temporary, as
#          its names say);
#   zero3offp --zero 3 --offload params: the parameters live on the host, brought in for each
#          use (662 of 1596: 526 parameters temporaries, 336 gradients temporaries). Now what a
#          copy fills from a parameter's home on the host (pinned, made before the first step,
#          kept, of its size), or made before the first step is freed as such a home of its size
#          is made, is a parameter, of a parameter's size; and the backward's copies are found
#          across those brought in and freed between them.
#   bfzero3 --param-dtype bf16 --zero 3: the wire buffers each bf16 shard is gathered into,
#          named gather.bf16.<p>, were optimizer state by the names ("K.S.<p>": an optimizer's
#          slot of <p>; 386 allocations of the NVTX run for AdamW's 56), the gather buffers of
#          the backward's first layer, made across those freed wire buffers, activations: 886 of
#          1456 allocations as the NVTX run. Now the trainer names them gather.<p>.bf16, and a
#          buffer made from a brought-in or kept parameter is its copy (param_forms): the
#          backward's copies are found across them.
# And what stays: frag_app's loop of one size (15 x 4 MiB, then an 8 MiB request) has no steps;
# cat_app without an evaluation keeps its steps.
# Table: NAME#COMMAND#jq filter over `report --json`#want (@NAME: what the filter gives on row NAME). A row whose NAME starts with "cat"
# also checks every allocation against the categories cat_app prints (categories_lib.py expect).
# Every row records an unannotated binary (GPUMEM_NAMES=0 GPUMEM_NVTX=0) but NAME-nvtx rows (the
# truth) and NAME-nouses rows (GPUMEM_USES=0: no launch recorded).
set -uo pipefail
source "$(dirname "$0")/snapshot_common.bash"
APPS=$BUILD/tests/apps
TRAIN=$BUILD/train_gpt2_sim
need "$GPUMEM" "$APPS/cat_app" "$APPS/churn_app" "$APPS/frag_app" "$TRAIN"
lib=tests/integration/categories_lib.py
over='[.categories.over_time[].total / 1024 | tostring] | join(" ")'
tiny="--model tiny -B 4 --dry-run"
steps='[.categories.steps_from, .categories.phases_from, .categories.steps, .categories.period, .categories.backward] | map(tostring) | join(" ")'
table="cat-eval3#$APPS/cat_app 3 eval#$steps#inference inference 3 21 true
cat-eval4#$APPS/cat_app 4 eval#$steps#inference inference 4 21 true
cat4#$APPS/cat_app 4#$steps#inference inference 4 21 true
cat-eval4#$APPS/cat_app 4 eval#[.categories.over_time[].total] | map(tostring) | join(\" \")#@cat4
churn#$APPS/churn_app 6 8 r#$steps#inference inference 6 8 false
churn#$APPS/churn_app 6 8 r#[.categories_at_peak.activations, ([.categories.over_time[].activations] | add), (.categories_at_peak.temporaries == .peak.live_bytes)] | map(tostring) | join(\" \")#0 0 true
frag#$APPS/frag_app#$steps#null null 0 null null
accum-nvtx#$TRAIN $tiny -T 64 --steps 6 --accum 2#.categories.steps#6
accum#$TRAIN $tiny -T 64 --steps 6 --accum 2#$steps#inference inference 6 116 true
accum#$TRAIN $tiny -T 64 --steps 6 --accum 2#$over#@accum-nvtx
accum#$TRAIN $tiny -T 64 --steps 6 --accum 2#.categories_at_peak | tojson#@accum-nvtx
accum4-nvtx#$TRAIN $tiny -T 64 --steps 5 --accum 4#.categories.steps#5
accum4#$TRAIN $tiny -T 64 --steps 5 --accum 4#$steps#inference inference 5 232 true
accum4#$TRAIN $tiny -T 64 --steps 5 --accum 4#$over#@accum4-nvtx
gpt2accum-nvtx#$TRAIN --model gpt2 -B 8 -T 1024 --dry-run --steps 4 --accum 2#.categories.steps#4
gpt2accum#$TRAIN --model gpt2 -B 8 -T 1024 --dry-run --steps 4 --accum 2#$steps#inference inference 4 576 true
gpt2accum#$TRAIN --model gpt2 -B 8 -T 1024 --dry-run --steps 4 --accum 2#$over#@gpt2accum-nvtx
gnaccum-nvtx#$TRAIN $tiny -T 64 --steps 6 --grad-none --accum 2#.categories.steps#6
gnaccum#$TRAIN $tiny -T 64 --steps 6 --grad-none --accum 2#$steps#inference inference 6 144 true
gnaccum#$TRAIN $tiny -T 64 --steps 6 --grad-none --accum 2#.categories_at_peak | tojson#@gnaccum-nvtx
recompute-nvtx#$TRAIN $tiny -T 64 --steps 6 --recompute layer#.categories.steps#6
recompute#$TRAIN $tiny -T 64 --steps 6 --recompute layer#.categories_at_peak | tojson#@recompute-nvtx
offact-nvtx#$TRAIN $tiny -T 64 --steps 6 --offload activations#.categories.steps#6
offact#$TRAIN $tiny -T 64 --steps 6 --offload activations#.categories_at_peak | tojson#@offact-nvtx
recgn-nvtx#$TRAIN $tiny -T 64 --steps 6 --recompute layer --grad-none#.categories.steps#6
recgn#$TRAIN $tiny -T 64 --steps 6 --recompute layer --grad-none#.categories_at_peak | tojson#@recgn-nvtx
offactgn-nvtx#$TRAIN $tiny -T 64 --steps 6 --offload activations --grad-none#.categories.steps#6
offactgn#$TRAIN $tiny -T 64 --steps 6 --offload activations --grad-none#.categories_at_peak | tojson#@offactgn-nvtx
recaccum-nvtx#$TRAIN $tiny -T 64 --steps 6 --recompute layer --accum 2#.categories.steps#6
recaccum#$TRAIN $tiny -T 64 --steps 6 --recompute layer --accum 2#.categories_at_peak | tojson#@recaccum-nvtx
offopt-nvtx#$TRAIN $tiny -T 64 --steps 6 --offload optimizer#.categories.steps#6
offopt#$TRAIN $tiny -T 64 --steps 6 --offload optimizer#.categories_at_peak | tojson#@offopt-nvtx
bf16-nvtx#$TRAIN $tiny -T 64 --steps 6 --param-dtype bf16#.categories.steps#6
bf16#$TRAIN $tiny -T 64 --steps 6 --param-dtype bf16#.categories_at_peak | tojson#@bf16-nvtx
leakrec-nvtx#$TRAIN $tiny -T 64 --steps 6 --leak --recompute layer#.categories.steps#6
leakrec#$TRAIN $tiny -T 64 --steps 6 --leak --recompute layer#.categories_at_peak | tojson#@leakrec-nvtx
gpt2recgn-nvtx#$TRAIN --model gpt2 -B 4 -T 64 --dry-run --steps 6 --recompute layer --grad-none#.categories.steps#6
gpt2recgn#$TRAIN --model gpt2 -B 4 -T 64 --dry-run --steps 6 --recompute layer --grad-none#.categories_at_peak | tojson#@gpt2recgn-nvtx
zero3-nvtx#$TRAIN $tiny -T 64 --steps 6 --zero 3#.categories.steps#6
zero3#$TRAIN $tiny -T 64 --steps 6 --zero 3#.categories_at_peak | tojson#@zero3-nvtx
zero3accum-nvtx#$TRAIN $tiny -T 64 --steps 6 --zero 3 --accum 2#.categories.steps#6
zero3accum#$TRAIN $tiny -T 64 --steps 6 --zero 3 --accum 2#.categories_at_peak | tojson#@zero3accum-nvtx
zero3p2-nvtx#$TRAIN $tiny -T 64 --steps 6 --zero 3 --prefetch 2#.categories.steps#6
zero3p2#$TRAIN $tiny -T 64 --steps 6 --zero 3 --prefetch 2#.categories_at_peak | tojson#@zero3p2-nvtx
bfoffopt-nvtx#$TRAIN $tiny -T 64 --steps 6 --param-dtype bf16 --offload optimizer#.categories.steps#6
bfoffopt#$TRAIN $tiny -T 64 --steps 6 --param-dtype bf16 --offload optimizer#.categories_at_peak | tojson#@bfoffopt-nvtx
bfzero3-nvtx#$TRAIN $tiny -T 64 --steps 6 --param-dtype bf16 --zero 3#.categories.steps#6
bfzero3#$TRAIN $tiny -T 64 --steps 6 --param-dtype bf16 --zero 3#.categories_at_peak | tojson#@bfzero3-nvtx
zero3offp-nvtx#$TRAIN $tiny -T 64 --steps 6 --zero 3 --offload params#.categories.steps#6
zero3offp#$TRAIN $tiny -T 64 --steps 6 --zero 3 --offload params#.categories_at_peak | tojson#@zero3offp-nvtx
jitter-nvtx#$TRAIN $tiny -T 256 --steps 7 --seq-jitter#.categories.steps#7
jitter#$TRAIN $tiny -T 256 --steps 7 --seq-jitter#$steps#inference inference 7 58 true
jitter#$TRAIN $tiny -T 256 --steps 7 --seq-jitter#$over#@jitter-nvtx
jitter#$TRAIN $tiny -T 256 --steps 7 --seq-jitter#.categories_at_peak | tojson#@jitter-nvtx
jitter-nouses#$TRAIN $tiny -T 256 --steps 7 --seq-jitter#[.categories.steps, (.categories.steps_uncertain | test(\"first step\"))] | map(tostring) | join(\" \")#6 true
jitter#$TRAIN $tiny -T 256 --steps 7 --seq-jitter#.categories.steps_uncertain#null
cat-next#$APPS/cat_app 4 next#$steps#inference inference 4 25 true
cat-copies#$APPS/cat_app 4 copies#$steps#inference inference 4 22 true
cat-square#$APPS/cat_app 4 copies square#$steps#inference inference 4 22 true
churn1-nvtx#$APPS/churn_app 6 1 rn#.categories.steps#6
churn1#$APPS/churn_app 6 1 r#$steps#inference inference 6 1 false
churn1#$APPS/churn_app 6 1 r#$over#@churn1-nvtx"
bad=0
while IFS='#' read -r name cmd filter want; do
  db=$TMP/$name.db
  if [[ ! -f $db ]]; then
    # shellcheck disable=SC2086 # the command's words
    off=(GPUMEM_NAMES=0 GPUMEM_NVTX=0)
    [[ $name == *-nvtx ]] && off=()
    [[ $name == *-nouses ]] && off+=(GPUMEM_USES=0)
    # a dry run's memsets and copies into unbacked memory are skipped, nothing else changes: the
    # same events, ranges, launches and uses (train/gpt2.c); backed, the gpt2 rows' gigabytes were
    # mapped and filled (3.4 s of sys time a recording of gpt2accum for 0.2 s)
    [[ " $cmd " == *" --dry-run "* ]] && off+=(GPUMEM_SIM_BACKING=virtual)
    env "${off[@]}" "$GPUMEM" record -q -o "$db" -- $cmd > "$TMP/$name.out" 2>&1
    [[ -f $db ]] || { echo "FAIL: $name: recording $cmd: $(tail -3 "$TMP/$name.out")"; bad=1; continue; }
    rm -f "$TMP/$name.dump"
    GPUMEM_CATEGORY_DUMP=$TMP/$name.dump "$GPUMEM" report --json "$db" > "$TMP/$name.json" \
      || { echo "FAIL: $name: report exited $?"; bad=1; continue; }
    if [[ $name == cat* ]]; then
      if r=$(python3 "$lib" expect "$TMP/$name.out" "$TMP/$name.dump"); then echo "ok: $name: $r"
      else echo "FAIL: $name: $r"; bad=1; fi
    fi
  fi
  # @NAME: the same filter over row NAME's report
  [[ $want == @* ]] && want=$(jq -r "$filter" "$TMP/${want#@}.json" 2>&1)
  got=$(jq -r "$filter" "$TMP/$name.json" 2>&1)
  if [[ $got == "$want" ]]; then echo "ok: $name: $filter = $want"
  else echo "FAIL: $name ($cmd): $filter = '$got', want '$want'"; bad=1; fi
done <<< "$table"
# every allocation where the same run's NVTX ranges put it: each micro-batch of an --accum 2 step
# has its forward and backward (read as one, the second's activations were temporaries)
for name in accum accum4 gpt2accum gnaccum recompute offact recgn offactgn recaccum offopt bf16 leakrec gpt2recgn zero3 zero3accum zero3p2 bfoffopt bfzero3 zero3offp jitter churn1; do
  if r=$(python3 "$lib" same "$TMP/$name-nvtx.dump" "$TMP/$name.dump"); then echo "ok: $name: $r"
  else echo "FAIL: $name: $(paste -sd' ' <<< "$r")"; bad=1; fi
done
# the text says why nothing is an activation
"$GPUMEM" report "$TMP/churn.db" | grepq '^  no backward: no step makes something after its highest point' \
  || { echo "FAIL: churn: the text does not say no backward was found"; bad=1; }
# staged: --zero 3 on 2 ranks, the collectives through a pinned host buffer (TRAIN_DIST_STAGED=1;
# rank 0's recording, inferred and with its NVTX ranges): that buffer, made before the first step
# and kept, fills the gather buffer of its own size (wte's) in each forward as a parameter's home
# on the host would, and every one of those (72 temporaries, 6 activations) read as a parameter
# (467,968 bytes of parameters at the peak for 271,360), in the NVTX run too (its phases read the
# same rule: the names do not decide gather.wte). A home fills only its own size.
if command -v mpirun > /dev/null && [[ $(ldd "$TRAIN" 2> /dev/null) == *libmpi* ]]; then
  (
    source tests/mpi.bash
    mpi_setup steps_inferred "$TRAIN"
    export TRAIN_DIST_STAGED=1 ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
    for v in nvtx inf; do
      off=()
      [[ $v == inf ]] && off=(GPUMEM_NAMES=0 GPUMEM_NVTX=0)
      env "${off[@]}" timeout 300 mpirun -np 2 -x TRAIN_DIST_STAGED "$GPUMEM" record -q -o "$TMP/staged-$v-%r.db" -- \
        "$TRAIN" --model tiny -B 8 -T 64 --steps 6 --threads 1 --zero 3 > "$TMP/staged-$v.out" 2>&1
      "$GPUMEM" report --json "$TMP/staged-$v-0.db" > "$TMP/staged-$v.json" 2>&1
    done
  )
  # the truth by the names alone: what is alive at the peak and named as some grad.X's X
  p=$(jq -r .peak.seq "$TMP/staged-nvtx.json" 2>&1)
  want=$(sqlite3 "$TMP/staged-nvtx-0.db" "SELECT sum(a.size) FROM allocations a WHERE a.birth_seq <= $p
         AND (a.death_seq IS NULL OR a.death_seq > $p) AND EXISTS (SELECT 1 FROM allocations g
         WHERE g.name = 'grad.shard.' || a.name OR g.name = 'grad.' || a.name)" 2>&1)
  for v in nvtx inf; do
    got=$(jq -r .categories_at_peak.parameters "$TMP/staged-$v.json" 2>&1)
    if [[ $got == "$want" && $want == [1-9]* ]]; then echo "ok: staged-$v: parameters at the peak $got, those named so"
    else echo "FAIL: staged-$v: parameters at the peak '$got', those named so '$want'"; bad=1; fi
  done
else
  echo "skip: staged: mpirun missing or $TRAIN built without MPI"
fi
exit $bad
