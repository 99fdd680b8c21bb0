#!/usr/bin/env bash
# torch_exit_frees.sh — the frees gpumem's exit hooks make (PyTorch's pinned host cache emptied,
# its cuBLAS workspaces freed: REC_F_HOST_CACHE / REC_F_TORCH_CACHE) belong to no step, also when
# the program stopped inside one (tests/torch/exit_frees.py: an uncaught OOM in "step 3", the
# range left open). Until 2026-12-07 the recorder gave each such free the range open on its
# thread (step 3) and the merge of PyTorch's trace the range open at its time; gm_analyze.c's
# sweep undid it for the workspaces (commit 4a326a3), readers with their own SQL did not. One
# recording (PyTorch's allocator: the host free through rec_event, the workspaces through the
# merge), rows over each reader:
#   - the events: the flagged frees are there (1 pinned, >= 2 workspace) and none has a range
#     (on the old code all 5 had step 3's);
#   - frag's timeline by step: step 3's moment is before the OOM and holds the workspaces (on
#     the old code it was the exit, seq 205 past the OOM's 201, allocated 263168);
#   - report (categories: stopped at the OOM, no step after it), advise's baseline, leaks'
#     growth and steps, viz's summary: the same on the old code (they read through gm_analyze.c's
#     sweep, which 4a326a3 fixed, and a pinned host free moves no device figure): kept as guards.
set -uo pipefail
source "$(dirname "$0")/common.bash"
db=$tmp/exit.db
GPUMEM_SIM_MEMORY=512M GPUMEM_SIM_BACKING=memory "$G" record -q -o "$db" -- \
  "$torch_py" tests/torch/exit_frees.py > "$tmp/rec.out" 2>&1
[[ -s $db ]] && grep -q "OutOfMemoryError" "$tmp/rec.out" || { bad "the recording failed"; tail -5 "$tmp/rec.out"; exit 1; }
"$G" report --json "$db" > "$tmp/report.json" 2> "$tmp/err" || bad "report: $(tail -1 "$tmp/err")"
oom=$(jq '.ooms[-1].seq' "$tmp/report.json")
# WHAT#COMMAND#FILTER (jq; "$oom": the OOM's seq)#WANT
table=(
  "the exit hooks' frees: pinned, workspaces, with a range#sql#-#1 1 0"
  "frag: step 3's moment before the OOM, holding the workspaces#frag --json#.timeline[-1] | [.step, .seq < \$oom, .allocated >= 67108864] | map(tostring) | join(\" \")#3 true true"
  "report: stopped at the OOM, steps 1-3#report --json#(.torch.categories.stopped_at_oom == \$oom), ([.torch.categories.over_time[].total] | length)#true 3"
  "advise: the baseline, PyTorch's peak (the workspaces and step 1's)#advise --json#.baseline.peak_allocated#67667968"
  "leaks: no growth, each step ends with the workspaces#leaks --json#.growth_per_step, ([.steps[].allocated_at_end >= 67108864] | all)#0 true"
  "viz: the peak in step 1#viz#.summary | [.peak_step, .peak_allocated_bytes == \$r.summary.peak_allocated] | map(tostring) | join(\" \")#1 true"
)
for row in "${table[@]}"; do
  IFS='#' read -r what cmd filter want <<< "$row"
  case $cmd in
    sql) got=$("$G" sql "$db" -c "SELECT SUM(kind = 6), SUM(kind IN (2, 4, 32, 33)) >= 2, SUM(range IS NOT NULL)
             FROM events WHERE (flags & 512) AND kind IN (2, 4, 6, 32, 33)" 2>&1 | tail -1 | tr '|' ' ') ;;
    viz) "$G" viz "$db" -o "$tmp/v.html" --with none > /dev/null 2> "$tmp/err"
         sed -n 's/^const D = \(.*\);$/\1/p' "$tmp/v.html" > "$tmp/out"
         got=$(jq -r --argjson oom "$oom" --slurpfile r "$tmp/report.json" "\$r[0] as \$r | $filter" "$tmp/out" 2>&1 | paste -sd' ') ;;
    *) # shellcheck disable=SC2086 # cmd: the command and its flags
       "$G" $cmd "$db" > "$tmp/out" 2> "$tmp/err"
       got=$(jq -r --argjson oom "$oom" --slurpfile r "$tmp/report.json" "\$r[0] as \$r | $filter" "$tmp/out" 2>&1 | paste -sd' ') ;;
  esac
  [[ $got == "$want" ]] && ok "$what: $want" || bad "$what: '$got', want '$want'"
done
# a file from before the recorder's fix: the same frees given the range open then (step 3's, the
# OOM's), as the recorder gave them; the readers leave them out of it (gm_row_range)
cp "$db" "$tmp/before.db"
"$G" sql --write "$tmp/before.db" -c "UPDATE events SET range = (SELECT range FROM events WHERE kind = 13)
  WHERE (flags & 512) AND kind IN (2, 4, 6, 32, 33)" > /dev/null 2>&1
got=$("$G" frag --json "$tmp/before.db" 2>&1 | jq -r --argjson oom "$oom" \
  '.timeline[-1] | [.step, .seq < $oom, .allocated >= 67108864] | map(tostring) | join(" ")' 2>&1)
n=$("$G" sql "$tmp/before.db" -c "SELECT COUNT(*) FROM events WHERE (flags & 512) AND kind IN (2, 4, 6, 32, 33)
  AND range = (SELECT range FROM events WHERE kind = 13)" 2>&1 | tail -1)
[[ $got == "3 true true" && $n -ge 3 ]] && ok "a file before the fix ($n frees in step 3): frag's step 3 before the OOM" \
  || bad "a file before the fix ($n frees in step 3, want >= 3): frag's step 3 '$got', want '3 true true'"
exit $fail
