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
#     (the output rule), and record says the snapshot was not written;
#   - every OOM PyTorch raises (under its per-process memory fraction, or the device's) is in the
#     ooms table once, from its trace, in report, export --at oom, viz and imports of its snapshot:
#     as many as PyTorch's num_ooms (its retry after freeing its cache is no second OOM), and the
#     figure to raise a limit or a fraction to reads rounded up (a figure typed back never fails).
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
# memory_viz's runs: forked from one interpreter that imported torch once (after the wait: it
# runs to the end)
torch_serve

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
  torch_fork stats "" -m torch.cuda._memory_viz stats "$snap" && grep -q "^segments: " "$tmp/stats.out" \
    && ok "fwd: memory_viz stats reads it ($(grep '^total_reserved' "$tmp/stats.out"))" || bad "fwd: memory_viz stats failed"
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

# Every OOM PyTorch raises reaches the ooms table, once, from its trace's oom entry (device_free in
# it), whatever refused it; and one built from PyTorch's trace (merged or imported) says the same.
# A table: NAME | environment | the fraction set ("-": none) | the binding constraint. The
# program holds two 256 MiB
# tensors and a third (with no fraction: sized to leave 10 MiB of a 1 GiB device; else 1 MiB, in
# a 2 MiB segment: PyTorch's allocated 513 MiB, reserved 514 MiB), asks for more
# than is left, catches PyTorch's OutOfMemoryError, then allocates 1 MiB (it fits: the run goes on).
cat > "$tmp/oomc.py" <<'EOF'
import sys, torch
MiB = 1 << 20
if sys.argv[1] != "-":
    torch.cuda.set_per_process_memory_fraction(float(sys.argv[1]))
a = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
b = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
c = torch.empty(502 * MiB if sys.argv[1] == "-" else 1 * MiB, dtype=torch.uint8, device="cuda")
try:
    d = torch.empty((int(sys.argv[2]) if len(sys.argv) > 2 else 16 if sys.argv[1] == "-" else 512) * MiB,
                    dtype=torch.uint8, device="cuda")
except torch.cuda.OutOfMemoryError:
    pass
e = torch.empty(1 * MiB, dtype=torch.uint8, device="cuda")
print("PYTORCH_OOMS", torch.cuda.memory_stats()["num_ooms"], flush=True)
EOF
cat > "$tmp/addr.py" <<'EOF'
import pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
for t in s["device_traces"]:
    for e in t:
        if e["action"] == "oom":
            e["addr"] = e.pop("device_free")
pickle.dump(s, open(sys.argv[2], "wb"), protocol=2)
EOF
oomline=$(grep -n 'd = torch.empty' "$tmp/oomc.py" | cut -d: -f1)
cases=(
  "fraction|GPUMEM_SIM_MEMORY=80G|0.01|fraction" # never reaches cudaMalloc: PyTorch's own cap
  "fraction-history|GPUMEM_SIM_MEMORY=80G GPUMEM_TORCH_PYTORCH_HISTORY=1|0.01|fraction" # its history, paired
  "fraction-clock|GPUMEM_SIM_MEMORY=80G GPUMEM_TORCH_TRACE=0|0.01|fraction" # no tracker: its history, by time
  "device|GPUMEM_SIM_MEMORY=1G|-|device"         # the driver refuses it too: counted once
  "device-clock|GPUMEM_SIM_MEMORY=1G GPUMEM_TORCH_TRACE=0|-|device"
  "limit|GPUMEM_SIM_MEMORY=80G GPUMEM_LIMIT=1G|-|limit" # gpumem's limit refuses it: counted once
  # the limit to raise to is 1026 MiB = 1.00195 GiB: to the nearest hundredth "1.00 GiB", which fails
  "limit-round|GPUMEM_SIM_MEMORY=80G GPUMEM_LIMIT=1G|-|limit|12"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name envs frac want_cause dmib <<< "$c"
  env GPUMEM_SIM_BACKING=memory $envs "$G" record -o "$tmp/c-$name.db" -- "$torch_py" "$tmp/oomc.py" "$frac" $dmib \
    > "$tmp/c-$name.out" 2> "$tmp/c-$name.err" || { bad "$name: record failed: $(tail -2 "$tmp/c-$name.err")"; continue; }
  # the truth: PyTorch's own count, memory_stats()["num_ooms"], as the program printed it; every
  # command that counts OOMs says it (report, record's summary, viz)
  want=$(sed -n 's/^PYTORCH_OOMS //p' "$tmp/c-$name.out")
  "$G" report --json "$tmp/c-$name.db" > "$tmp/c-$name.json" 2>/dev/null
  n=$(jq '.ooms | length' "$tmp/c-$name.json")
  summ=$(sed -n 's/.* \([0-9]*\) OOMs, .*/\1/p' "$tmp/c-$name.err")
  text=$("$G" report "$tmp/c-$name.db" 2>/dev/null | sed -n 's/^  OOMs  *\([0-9]*\).*/\1/p')
  "$G" viz "$tmp/c-$name.db" -o "$tmp/c-$name.html" 2>/dev/null # read here and by the viz row below
  vizrc=$?
  viz=$(grep -o '"ooms":\[[^]]*\]' "$tmp/c-$name.html" | grep -o '{"seq"' | wc -l)
  [[ $want -ge 1 && $n == "$want" && $summ == "$want" && $text == "$want" && $viz == "$want" \
     && $(sqlite3 "$tmp/c-$name.db" "SELECT count(*) FROM events WHERE kind = 13") == "$want" ]] \
    && ok "$name: $n OOM(s) as PyTorch counts them (num_ooms $want) in report, record's summary and viz" \
    || bad "$name: report $n (text '$text'), record's summary '$summ', viz '$viz'; PyTorch's num_ooms '$want'"
  o=$(jq -c '.ooms[-1]' "$tmp/c-$name.json")
  [[ $(jq -r .python_line <<< "$o") == "oomc.py:$oomline in <module>" ]] \
    && ok "$name: the OOM's Python line (oomc.py:$oomline)" || bad "$name: python_line $(jq -r .python_line <<< "$o")"
  # the figure to raise the limit or the fraction's allowance to, as the text gives it, is one a
  # person can type back: its bytes are what was reserved plus the request (whole mapping units
  # for gpumem's limit; none for PyTorch's fraction, which counts bytes), and the figure as it
  # reads (GPUMEM_LIMIT takes "1.01G") is not below them; the room "left" is not above the truth
  txt=$("$G" report "$tmp/c-$name.db" 2>/dev/null | grep -m1 "what to change:")
  read -r res req unit lim lf < <(jq -r '[.reserved, .requested, .map_unit, .limit // 0, .largest_free] | @tsv' <<< "$o")
  least=$(sed -n 's/.*at least \([0-9.]*\) \([KMGT]\)iB (\([0-9]*\) bytes).*/\1 \2 \3/p' <<< "$txt")
  if [[ $want_cause == limit || $want_cause == fraction ]]; then
    read -r num u nb <<< "$least"
    [[ $want_cause == fraction ]] && unit=1
    truth=$((res + (req + unit - 1) / unit * unit))
    typed=$(awk -v n="$num" -v u="$u" 'BEGIN { s = u == "K" ? 10 : u == "M" ? 20 : u == "G" ? 30 : 40; printf "%.0f", n * 2 ^ s }')
    left=$(sed -n 's/.* left \([0-9.]*\) \([KMGT]\)iB above.*/\1 \2/p; s/.*, \([0-9.]*\) \([KMGT]\)iB above what PyTorch.*/\1 \2/p' <<< "$txt")
    lbytes=$(awk -v n="${left% *}" -v u="${left#* }" 'BEGIN { s = u == "K" ? 10 : u == "M" ? 20 : u == "G" ? 30 : 40; printf "%.0f", n * 2 ^ s }')
    [[ -n $num && $nb == "$truth" && $typed -ge $truth && -n $left && $lbytes -le $((lim - res)) ]] \
      && ok "$name: raise to at least $num ${u}iB ($nb bytes: reserved $res + the request's $((truth - res))), room $left" \
      || bad "$name: the figure to raise to reads '$least' and the room '$left' (want $truth bytes, room $((lim - res))): $txt"
  fi
  if [[ $frac != - ]]; then
    # the cap PyTorch met: the fraction of the device's total (as PyTorch rounds it, within 1 KiB)
    read -r cause from limit total req alloc res short < <(jq -r '[.cause, .limit_from, .limit, .device_total,
      .requested, .allocated, .reserved, .shortfall] | @tsv' <<< "$o")
    cap=$(awk -v f="$frac" -v t="$total" 'BEGIN { printf "%.0f", f * t }')
    [[ $cause == fraction && $from == per_process_memory_fraction && $((limit - cap)) -le 1024 && $((cap - limit)) -le 1024 \
       && $req == $((512 << 20)) && $alloc == $(((512 + 1) << 20)) && $res == $(((512 + 2) << 20)) \
       && $short == $((req - (limit - res > lf ? limit - res : lf))) ]] \
      && ok "$name: cause fraction, limit $limit (the fraction of $total), requested $req, allocated $alloc, short by $short" \
      || bad "$name: $o"
    "$G" report "$tmp/c-$name.db" 2>/dev/null | grepq "binding constraint: fraction (PyTorch's per-process memory fraction allows" \
      && ok "$name: the text names the fraction" || bad "$name: the text names no fraction"
  else # short by the request less the room: what the device had free, or the limit left
    # (.limit is null where none was set: "none" keeps the fields in place)
    read -r cause free limit res short req < <(jq -r '[.cause, .device_free, .limit // "none", .reserved, .shortfall,
      .requested] | @tsv' <<< "$o")
    room=$free
    [[ $want_cause == limit ]] && room=$((limit - res))
    [[ $cause == "$want_cause" && $room -gt 0 && $short == $((req - room)) ]] \
      && ok "$name: $cause: short by $short (the request less the $room bytes of room)" || bad "$name: $o"
  fi
  "$G" export --format torch --at oom "$tmp/c-$name.db" -o "$tmp/c-$name.at.pickle" 2> "$tmp/c-$name.exp" \
    && ok "$name: export --at oom" || bad "$name: export --at oom: $(cat "$tmp/c-$name.exp")"
  [[ $vizrc == 0 ]] && grepq -F '"ooms":[{"seq"' "$tmp/c-$name.html" \
    && ok "$name: viz shows it" || bad "$name: viz shows no OOM"
  # PyTorch's snapshot at the OOM: memory_viz reads its oom entry (device_free, as PyTorch writes
  # it), and an import of it (and of one with device_free in addr, as gpumem wrote it before) has
  # the recording's OOM figures
  snap=$tmp/c-$name.oom.pickle
  torch_fork "c-$name-trace" "" -m torch.cuda._memory_viz trace "$snap"
  grepq "raise OutOfMemoryError" "$tmp/c-$name-trace.out" \
    && ok "$name: memory_viz trace reads the snapshot's OOM" || bad "$name: memory_viz trace of $snap"
  "$torch_py" "$tmp/addr.py" "$snap" "$tmp/c-$name.addr.pickle"
  fields='[.requested, .allocated, .reserved, .device_free]'
  [[ $want_cause == device ]] && fields='[.requested, .allocated, .reserved, .device_free, .shortfall]'
  # (under GPUMEM_LIMIT, PyTorch's cudaMemGetInfo is gpumem's, capped at the limit: not the driver's)
  [[ $want_cause == limit ]] && fields='[.requested, .allocated, .reserved]'
  r=$(jq -c "$fields" <<< "$o")
  for p in "$snap" "$tmp/c-$name.addr.pickle"; do
    rm -f "$tmp/imp.db"
    "$G" import "$p" -o "$tmp/imp.db" > /dev/null 2>&1
    i=$("$G" report --json "$tmp/imp.db" 2>/dev/null | jq -c ".ooms[-1] | $fields")
    [[ $i == "$r" ]] && ok "$name: imported $(basename "$p"): the OOM as recorded $i" \
      || bad "$name: imported $(basename "$p"): $i, recorded $r"
  done
done
exit $fail
