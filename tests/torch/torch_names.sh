#!/usr/bin/env bash
# torch_names.sh — gpumem.name(tensor, label) under `gpumem record` with PyTorch's own allocator
# (torch_names.py) names the tensor, PyTorch's allocation, not the segment of its cache that holds
# it (the review of 2026-12-06: "scratch" named a 20 MiB segment and no tensor; a name given right
# after the allocation was placed before the allocation's trace entries):
#   - each of the 4 "scratch" names is on a PyTorch allocation (kind 31) of 2 MiB, each "loss"
#     on one of 512 bytes (PyTorch's smallest block), four different ones each;
#   - no name is on a device allocation (a segment);
#   - report's tensor table says 4 scratch tensors, 8.00 MiB;
#   - `gpumem uses --name scratch` says that uses follows the segments here, not the tensors.
set -uo pipefail
source "$(dirname "$0")/common.bash"
GPUMEM_SIM_BACKING=memory "$G" record -q -o "$tmp/n.db" -- "$torch_py" tests/torch/torch_names.py > "$tmp/rec" 2>&1 ||
  { bad "the recording failed: $(tail -3 "$tmp/rec")"; exit 1; }
q() { sqlite3 "$tmp/n.db" "$1"; }
on() { # label: "count|distinct births|kinds|sizes" of the allocations its names are on
  q "SELECT count(*), count(DISTINCT n.birth), group_concat(DISTINCT e.kind), group_concat(DISTINCT e.size)
     FROM names n JOIN strings s ON s.id = n.name LEFT JOIN events e ON e.seq = n.birth WHERE s.s = '$1'"
}
[[ $(on scratch) == "4|4|31|2097152" ]] && ok "4 scratch names, each on its own 2 MiB tensor" || bad "scratch: $(on scratch) (want 4|4|31|2097152)"
[[ $(on loss) == "4|4|31|512" ]] && ok "4 loss names, each on its own 512-byte block" || bad "loss: $(on loss) (want 4|4|31|512)"
seg=$(q "SELECT count(*) FROM names n JOIN events e ON e.seq = n.birth WHERE e.kind <> 31")
[[ $seg == 0 ]] && ok "no name on a segment of PyTorch's cache" || bad "$seg names on device allocations (segments)"
"$G" report "$tmp/n.db" > "$tmp/r" 2>&1
grep -Eq '^ +8\.00 MiB .* 4x +scratch' "$tmp/r" && ok "report: 4 scratch tensors, 8.00 MiB" \
  || bad "report: $(grep -h scratch "$tmp/r" | head -2)"
# a few segment events on each thread: the app threads' cost is not measured, and said so (it
# read "0 ns/event on app threads (0.000 s total)")
"$G" report --json "$tmp/n.db" 2>/dev/null | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["summary"]["app_ns_per_event"] is not None)' \
  && grep -q "recording overhead  app threads not measured" "$tmp/r" \
  && ok "recording overhead: not measured (JSON null), not 0 ns/event" || bad "recording overhead: $(grep -h "recording overhead" "$tmp/r")"
# uses follows what gpumem saw (the segments): asked for a tensor's name, it says so
"$G" uses "$tmp/n.db" --name scratch > "$tmp/u" 2>&1; rc=$?
[[ $rc == 1 ]] && grep -q "follows the allocations gpumem saw, the segments of PyTorch's cache, not its tensors" "$tmp/u" \
  && ok "uses --name of a tensor: exit 1, saying that uses follows segments here" || bad "uses --name scratch: rc $rc: $(head -3 "$tmp/u")"
exit $fail
