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
# And what stays: frag_app's loop of one size (15 x 4 MiB, then an 8 MiB request) has no steps;
# cat_app without an evaluation keeps its steps.
# Table: NAME#COMMAND#jq filter over `report --json`#want (@NAME: what the filter gives on row NAME). A row whose NAME starts with "cat"
# also checks every allocation against the categories cat_app prints (categories_lib.py expect).
set -uo pipefail
source "$(dirname "$0")/snapshot_common.bash"
APPS=$BUILD/tests/apps
need "$GPUMEM" "$APPS/cat_app" "$APPS/churn_app" "$APPS/frag_app"
lib=tests/integration/categories_lib.py
steps='[.categories.steps_from, .categories.phases_from, .categories.steps, .categories.period, .categories.backward] | map(tostring) | join(" ")'
table="cat-eval3#$APPS/cat_app 3 eval#$steps#inference inference 3 21 true
cat-eval4#$APPS/cat_app 4 eval#$steps#inference inference 4 21 true
cat4#$APPS/cat_app 4#$steps#inference inference 4 21 true
cat-eval4#$APPS/cat_app 4 eval#[.categories.over_time[].total] | map(tostring) | join(\" \")#@cat4
churn#$APPS/churn_app 6 8 r#$steps#inference inference 6 8 false
churn#$APPS/churn_app 6 8 r#[.categories_at_peak.activations, ([.categories.over_time[].activations] | add), (.categories_at_peak.temporaries == .peak.live_bytes)] | map(tostring) | join(\" \")#0 0 true
frag#$APPS/frag_app#$steps#null null 0 null null"
bad=0
while IFS='#' read -r name cmd filter want; do
  db=$TMP/$name.db
  if [[ ! -f $db ]]; then
    # shellcheck disable=SC2086 # the command's words
    "$GPUMEM" record -q -o "$db" -- $cmd > "$TMP/$name.out" 2>&1
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
# the text says why nothing is an activation
"$GPUMEM" report "$TMP/churn.db" | grepq '^  no backward: no step makes something after its highest point' \
  || { echo "FAIL: churn: the text does not say no backward was found"; bad=1; }
exit $bad
