#!/usr/bin/env bash
# torch_oom.sh — a PyTorch snapshot at an OOM without code (issue 36, deliverable 5): the GPT-2
# script (model small, -B 8 -T 512) under `gpumem record` on a virtual GPU too small for it:
#   - 1.5 GiB: the forward's cross-entropy runs out. Beside run.db, run.oom.pickle is PyTorch's
#     own snapshot of that moment (its segments, its trace with the `oom` entry; memory_viz
#     `stats` reads it, `gpumem import` too); the report's OOM section names the tensor (the
#     code on its line), its Python line and the binding constraint (the device);
#   - 2 GiB: the backward runs out, in PyTorch's C++ (autograd's thread, no Python frame): the
#     report names the Python line the program was on (the backward call) from the hook's stack of
#     the main thread; a file of another kind already at the snapshot's path is left as it was
#     (the output rule), and record says the snapshot was not written.
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/train_gpt2.py
run() { # NAME MEMORY
  GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=$2 "$G" record -o "$tmp/$1.db" -- "$torch_py" "$script" \
    --model small -B 8 -T 512 --steps 2 > "$tmp/$1.out" 2> "$tmp/$1.err"
  echo $? > "$tmp/$1.rc"
}
echo "not a snapshot" > "$tmp/bwd.oom.pickle"
run fwd 1536M &
run bwd 2G &
wait

# forward: the snapshot beside the database, and the report
[[ $(cat "$tmp/fwd.rc") != 0 ]] && grep -q "OutOfMemoryError" "$tmp/fwd.err" || bad "fwd: the script did not run out of memory"
snap=$tmp/fwd.oom.pickle
if [[ -s $snap ]] && grep -q "its snapshot at that moment is $snap" "$tmp/fwd.err"; then
  out=$("$torch_py" - "$snap" <<'EOF' 2>/dev/null
import pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
ooms = [e for e in s["device_traces"][0] if e["action"] == "oom"]
assert list(s)[0] == "exporter" and s["segments"] and ooms, (list(s)[:3], len(s["segments"]), len(ooms))
# the allocations' Python frames, as PyTorch's own history would hold them (gpumem's tracker read
# them; the history kept none): the trace's and the allocated blocks'
allocs = [e for e in s["device_traces"][0] if e["action"] == "alloc"]
framed = [e for e in allocs if any(f["filename"].endswith("train_gpt2.py") for f in e.get("frames", []))]
blocks = [b for g in s["segments"] for b in g["blocks"] if b["state"] == "active_allocated"]
bframed = [b for b in blocks if b.get("frames")]
assert allocs and len(framed) * 2 > len(allocs) and bframed, (len(allocs), len(framed), len(blocks), len(bframed))
print(len(s["segments"]), sum(g["total_size"] for g in s["segments"]), ooms[0]["size"],
      "%d/%d allocations and %d/%d blocks with frames" % (len(framed), len(allocs), len(bframed), len(blocks)))
EOF
)
  [[ -n $out ]] && ok "fwd: beside the database, PyTorch's snapshot at the OOM ($snap: segments, bytes, the request: $out)" \
    || bad "fwd: $snap is not PyTorch's snapshot at an OOM"
  torch_run -- -m torch.cuda._memory_viz stats "$snap" > "$tmp/stats" 2>/dev/null && grep -q "^segments: " "$tmp/stats" \
    && ok "fwd: memory_viz stats reads it ($(grep '^total_reserved' "$tmp/stats"))" || bad "fwd: memory_viz stats failed"
  [[ ! -e $tmp/fwd.db-wal && ! -e $tmp/fwd.db-shm ]] && ok "fwd: writing it left no -wal or -shm file beside the database" \
    || bad "fwd: $(cd "$tmp" && ls fwd.db-*) left beside the database"
  "$G" import "$snap" -o "$tmp/imp.db" 2>/dev/null && [[ $("$G" report --json "$tmp/imp.db" | jq '.ooms | length') -ge 1 ]] \
    && ok "fwd: gpumem import reads it, its OOM included" || bad "fwd: gpumem import of the OOM snapshot"
else
  bad "fwd: no snapshot beside the database: $(grep gpumem "$tmp/fwd.err" | tail -3)"
fi
"$G" report --json "$tmp/fwd.db" > "$tmp/fwd.json" 2>/dev/null
read -r cause where < <(jq -r '.ooms[0] | [.cause, .python_line] | @tsv' "$tmp/fwd.json")
src=$(jq -r '.ooms[0].source' "$tmp/fwd.json")
line=$(grep -n 'F.cross_entropy(' "$script" | sed -n 1p | cut -d: -f1)
[[ $cause == device && $where == "train_gpt2.py:$line in forward" && $src == *"F.cross_entropy("* ]] \
  && ok "fwd: the OOM names the tensor ($src), its Python line ($where) and the binding constraint ($cause)" \
  || bad "fwd: OOM cause '$cause', line '$where' (want train_gpt2.py:$line), source '$src'"
"$G" report "$tmp/fwd.db" 2>/dev/null | grepq "the tensor: \`loss = F.cross_entropy" || bad "fwd: the text names no tensor"

# backward: the Python line the program was on; the output rule
[[ $(cat "$tmp/bwd.rc") != 0 ]] || bad "bwd: the script did not run out of memory"
"$G" report --json "$tmp/bwd.db" > "$tmp/bwd.json" 2>/dev/null
where=$(jq -r '.ooms[0].python_line' "$tmp/bwd.json") src=$(jq -r '.ooms[0].source' "$tmp/bwd.json")
line=$(grep -n '\.backward()' "$script" | sed -n 1p | cut -d: -f1)
[[ $where == "train_gpt2.py:$line in main" && $src == *".backward()"* && $(jq -r '.ooms[0].cause' "$tmp/bwd.json") == device ]] \
  && ok "bwd: an OOM in autograd's C++ names the Python line the program was on ($where: $src)" \
  || bad "bwd: python_line '$where' (want train_gpt2.py:$line in main), source '$src'"
[[ $(cat "$tmp/bwd.oom.pickle") == "not a snapshot" ]] && grep -q "snapshot at the OOM was not written" "$tmp/bwd.err" \
  && ok "bwd: a file of another kind at the snapshot's path is left as it was, and record says so" \
  || bad "bwd: the foreign file was replaced or nothing said: $(grep 'gpumem:' "$tmp/bwd.err" | tail -2)"
exit $fail
