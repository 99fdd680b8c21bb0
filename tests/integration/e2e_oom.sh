#!/usr/bin/env bash
# An OOM: gpt2-medium at B=8, T=1024 needs ~22 GiB; under GPUMEM_LIMIT=8G an allocation fails.
# The trainer must get the CUDA error and exit cleanly (its own exit code, a message naming the
# error and the tensor), and `gpumem report` must show the OOM forensics naming the request
# and the tensor. Memory-only (--dry-run on unbacked virtual memory).
source "$(dirname "$0")/e2e_common.bash"
export GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G GPUMEM_LIMIT=8G
set +e
"$GM" record -q -o "$TMP/oom.db" -- "$TRAIN" --model gpt2-medium -B 8 -T 1024 --dry-run --steps 2 \
  > "$TMP/out.txt" 2>&1
rc=$?
set -e
cat "$TMP/out.txt" | tail -5
(( rc != 0 && rc < 128 )) || fail "trainer exit code $rc: expected a clean failure exit (1..127)"
grep -q 'cudaErrorMemoryAllocation' "$TMP/out.txt" || fail "the trainer did not name the CUDA error"
# "... in cudaMallocAsync of <tensor> (<bytes> bytes)"
tensor=$(sed -n 's/.*cudaErrorMemoryAllocation.* of \([^ ]*\) (\([0-9]*\) bytes).*/\1/p' "$TMP/out.txt" | head -1)
bytes=$(sed -n 's/.*cudaErrorMemoryAllocation.* of \([^ ]*\) (\([0-9]*\) bytes).*/\2/p' "$TMP/out.txt" | head -1)
[[ -n $tensor && -n $bytes ]] || fail "cannot read the failed tensor from the trainer's message"
ok "trainer exited cleanly ($rc) on the OOM of $tensor ($bytes bytes)"

"$GM" report --json "$TMP/oom.db" > "$TMP/r.json" || fail "gpumem report failed on the OOM run"
[[ $(jq '.ooms | length' "$TMP/r.json") -ge 1 ]] || fail "no OOM in the report"
[[ $(jq -r '.ooms[0].requested' "$TMP/r.json") == "$bytes" ]] \
  || fail "OOM request $(jq -r '.ooms[0].requested' "$TMP/r.json") != $bytes"
[[ $(jq -r '.ooms[0].name' "$TMP/r.json") == "$tensor" ]] \
  || fail "OOM names '$(jq -r '.ooms[0].name' "$TMP/r.json")', expected $tensor"
"$GM" report "$TMP/oom.db" > "$TMP/r.txt"
sed -n '/^OOM forensics/,/^$/p' "$TMP/r.txt"
grep -q "$tensor" "$TMP/r.txt" || fail "the text report does not name $tensor"
grep -Eq 'largest free block' "$TMP/r.txt" || fail "the text report lacks the forensics"
ok "report shows the OOM of $tensor ($bytes bytes) with forensics"

# What each command tells the user to raise after an OOM follows the constraint that bound it:
# the device, GPUMEM_LIMIT, the limit key of GPUMEM_CONF, or its per_process_memory_fraction key
# (its share of the device, where below the limit in bytes; PyTorch's per-process memory fraction
# set at run time: tests/torch/torch_gm_oom.sh, torch_oom.sh). A table: NAME | environment |
# report's cause | report's and advise's .limit_from | the phrase advise (refusing: no step
# completed; and --oom-step --budget: the rest of the run is not recorded) and viz (advise's word
# on its page) give | report's what-to-change | the setting report's figures ("limit 8.00 GiB
# (...)") and advise's ("limit 8.00 GiB set by ...") name as the limit's ("": the device bound).
# Every command's output names no other constraint's knob, and advise's replays are not capped
# by the key (its prediction of the partial trace holds the request that failed). Before, a key
# that bound was said to be GPUMEM_LIMIT's ("GPUMEM_LIMIT (or the limit key of GPUMEM_CONF)",
# .limit_from "GPUMEM_LIMIT"), and advise replayed under the key's share of its own 80 GiB.
unset GPUMEM_LIMIT
knobs=("GPUMEM_LIMIT raised" "GPUMEM_LIMIT left" "limit key of GPUMEM_CONF"
       "per-process memory fraction" "the device was full" "per_process_memory_fraction key")
keyk="the per_process_memory_fraction key of GPUMEM_CONF"
cases=(
  "device|GPUMEM_SIM_MEMORY=8G|device|null|the device was full: rerun with a lower peak|the live tensors need more than the device has|"
  "device-under-limit|GPUMEM_SIM_MEMORY=8G GPUMEM_LIMIT=16G|device|GPUMEM_LIMIT|the device was full: rerun with a lower peak|the live tensors need more than the device has|"
  "GPUMEM_LIMIT|GPUMEM_SIM_MEMORY=80G GPUMEM_LIMIT=8G|limit|GPUMEM_LIMIT|rerun with GPUMEM_LIMIT raised|GPUMEM_LIMIT left|GPUMEM_LIMIT"
  "GPUMEM_CONF|GPUMEM_SIM_MEMORY=80G GPUMEM_CONF=limit:8G|limit|GPUMEM_CONF|rerun with the limit key of GPUMEM_CONF raised|the limit key of GPUMEM_CONF left|the limit key of GPUMEM_CONF"
  "both|GPUMEM_SIM_MEMORY=80G GPUMEM_CONF=limit:4G GPUMEM_LIMIT=8G|limit|GPUMEM_LIMIT|rerun with GPUMEM_LIMIT raised|GPUMEM_LIMIT left|GPUMEM_LIMIT"
  "key|GPUMEM_SIM_MEMORY=80G GPUMEM_CONF=per_process_memory_fraction:0.1|limit|GPUMEM_CONF:per_process_memory_fraction|rerun with $keyk raised|$keyk left 492.00 MiB above what was reserved. Raise it (to at least 8.02 GiB (8610906112 bytes) for this request: per_process_memory_fraction:0.1003 of the device's 80.00 GiB)|$keyk"
  "key-under-limit|GPUMEM_SIM_MEMORY=80G GPUMEM_CONF=per_process_memory_fraction:0.1 GPUMEM_LIMIT=16G|limit|GPUMEM_CONF:per_process_memory_fraction|rerun with $keyk raised|$keyk left|$keyk"
  "key-under-limit-key|GPUMEM_SIM_MEMORY=80G GPUMEM_CONF=limit:16G,per_process_memory_fraction:0.1|limit|GPUMEM_CONF:per_process_memory_fraction|rerun with $keyk raised|$keyk left|$keyk"
  "limit-under-key|GPUMEM_SIM_MEMORY=80G GPUMEM_CONF=per_process_memory_fraction:0.5 GPUMEM_LIMIT=8G|limit|GPUMEM_LIMIT|rerun with GPUMEM_LIMIT raised|GPUMEM_LIMIT left|GPUMEM_LIMIT"
  "limit-key-under-key|GPUMEM_SIM_MEMORY=80G GPUMEM_CONF=limit:8G,per_process_memory_fraction:0.5|limit|GPUMEM_CONF|rerun with the limit key of GPUMEM_CONF raised|the limit key of GPUMEM_CONF left|the limit key of GPUMEM_CONF"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name envs cause from rerun change knob <<< "$c"
  db=$TMP/b-$name.db
  env $envs "$GM" record -q -o "$db" -- "$TRAIN" --model gpt2-medium -B 8 -T 1024 --dry-run --steps 2 \
    > /dev/null 2>&1 && fail "$name: the trainer did not run out of memory"
  "$GM" report --json "$db" > "$TMP/b.json" || fail "$name: report failed"
  got=$(jq -r '.ooms[0] | "\(.cause) \(.limit_from)"' "$TMP/b.json")
  [[ $got == "$cause $from" ]] || fail "$name: report's cause and limit_from are '$got', want '$cause $from'"
  "$GM" report "$db" > "$TMP/b-report.txt"
  grepq -F "what to change: " "$TMP/b-report.txt" && grepq -F "$change" "$TMP/b-report.txt" \
    || fail "$name: report does not say '$change': $(grep 'what to change' "$TMP/b-report.txt")"
  if [[ -n $knob ]]; then
    grepq -E "largest free block .*, limit [0-9.]+ [KMGT]iB \($knob\)" "$TMP/b-report.txt" \
      || fail "$name: report's figures do not name '$knob' as the limit's: $(grep 'largest free block' "$TMP/b-report.txt")"
  fi
  set +e
  "$GM" advise "$db" > "$TMP/b-advise.txt" 2>&1
  rc=$?
  set -e
  [[ $rc == 3 ]] && grepq -F "before any step completed: $rerun" "$TMP/b-advise.txt" \
    || fail "$name: advise (exit $rc) does not say '$rerun': $(cat "$TMP/b-advise.txt")"
  [[ -z $knob ]] || grepq -E "limit [0-9.]+ [KMGT]iB set by $knob\)" "$TMP/b-advise.txt" \
    || fail "$name: advise's figures do not name '$knob' as the limit's: $(cat "$TMP/b-advise.txt")"
  "$GM" advise --oom-step --budget 100G "$db" > "$TMP/b-advise-step.txt" 2>&1 || true
  grepq -F "the rest of the run is not recorded: $rerun" "$TMP/b-advise-step.txt" \
    || fail "$name: advise --oom-step does not say '$rerun': $(grep -F 'not known' "$TMP/b-advise-step.txt")"
  # advise's JSON: the limit's source in report's words; its replay of the partial trace is not
  # capped (a prediction says how much is needed): the request that failed is in its peak
  "$GM" advise --oom-step --json "$db" > "$TMP/b-advise.json" 2> /dev/null || true
  got=$(jq -r '"\(.oom.limit_from) \(.baseline.peak_reserved >= .oom.allocated + .oom.requested)"' "$TMP/b-advise.json")
  [[ $got == "$from true" ]] \
    || fail "$name: advise --json's oom.limit_from and 'baseline peak holds the request' are '$got', want '$from true': $(jq -c '{oom, baseline}' "$TMP/b-advise.json")"
  "$GM" viz "$db" -o "$TMP/b.html" > /dev/null 2>&1 || fail "$name: viz failed"
  grepq -F "$rerun" "$TMP/b.html" || fail "$name: the page does not say '$rerun'"
  "$GM" frag "$db" > "$TMP/b-frag.txt" 2>&1 || true
  "$GM" tune "$db" > "$TMP/b-tune.txt" 2>&1 || true
  "$GM" leaks "$db" > "$TMP/b-leaks.txt" 2>&1 || true
  for out in report advise advise-step frag tune leaks; do
    for k in "${knobs[@]}"; do
      [[ $rerun$change == *"$k"* ]] && continue
      ! grepq -F "$k" "$TMP/b-$out.txt" || fail "$name: $out names '$k', a constraint this run did not meet: $(grep -F "$k" "$TMP/b-$out.txt" | head -1)"
    done
  done
  ok "$name: report ($cause, $from${knob:+, limit by $knob}), advise (text, JSON, an uncapped prediction), advise --oom-step, viz say '$rerun'; report, advise, frag, tune, leaks name no other knob"
done
