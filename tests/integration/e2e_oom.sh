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
