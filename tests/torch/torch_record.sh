#!/usr/bin/env bash
# torch_record.sh — `gpumem record -- python3 train_gpt2.py` records PyTorch tensor by tensor,
# without an edit of the script (issue "Real PyTorch on the virtual GPU", deliverables 4-7):
#   - tiny (3 steps) and gpt2 124M (-B 8 -T 1024, 2 steps, virtual backing), each with PyTorch's
#     default configuration and with expandable_segments:True: `gpumem report --json`
#     .torch.peak_allocated / .peak_reserved / .peak_requested equal the script's own
#     max_memory_allocated / max_memory_reserved / memory_stats()["requested_bytes.all.peak"]
#     (computed by gpumem from the merged history; the script prints its figures to stdout,
#     which gpumem never reads); the device-wide peak .summary.peak_device (gpumem's reserved
#     plus the program's own VMM: PyTorch's expandable segments are the latter, in none of the
#     allocations' peaks) >= .torch.peak_reserved, and the difference is named to the byte
#     (.torch.device_peak);
#   - the report's PyTorch tables show step */fwd/..., step */bwd/... and step */opt phases,
#     parameter names and adam.exp_avg names;
#   - `gpumem leaks` names the script's PLANTED LEAK line (--leak), Python frames and all;
#   - --allocator gpumem: every tensor served by gpumem, the same phase and name tables, and
#     PyTorch's requested peak (.torch.peak_requested) equal to the default run's;
#   - the trace taken by gpumem's tracker alone merges what PyTorch's own history, paired with
#     it, merges;
#   - --no-torch-history: no merge; --no-torch-hooks: no step ranges;
#   - no trace back: the end line says why (CPU only; os._exit), and nothing without torch.
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/train_gpt2.py
leak_line=$(grep -n '# PLANTED LEAK' "$script" | head -1 | cut -d: -f1)
[[ -n $leak_line ]] || { echo "FAIL: no PLANTED LEAK line in $script"; exit 1; }

# rec NAME [ENV=V...] -- RECORD-OPTIONS -- SCRIPT-ARGS: records into $tmp/NAME.db
rec() {
  local name=$1 envs=() ropts=()
  shift
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  while [[ $1 != -- ]]; do ropts+=("$1"); shift; done
  shift
  env "${envs[@]}" "$G" record -o "$tmp/$name.db" "${ropts[@]}" -- "$torch_py" "$script" "$@" \
    > "$tmp/$name.out" 2> "$tmp/$name.err" || { bad "$name: recording failed"; tail -5 "$tmp/$name.err"; return 1; }
  grep -q "merged PyTorch's allocator trace\|--no-torch-history\|gpumem" "$tmp/$name.err" || true
}
fig() { awk -v k="$2" '$1 == k { print $2 }' "$tmp/$1.out"; }
# check_placement NAME: PyTorch's entries and the tensor names placed by gpumem's trace tracker
# (libgpumem_torch.so, preload/torch_trace.c), not by PyTorch's drifting clock: meta says exact,
# and every tensor allocated on a line of CausalSelfAttention.forward or MLP.forward is in that
# module's forward range (placed by the clocks, 7-13 of the tiny run's 55 fell into a neighbour's: the clock run below prints it)
fwd_lines() {  # the lines of class $1's forward: its def to the next class
  awk -v c="class $1(" 'index($0, c) == 1 { in_c = 1; next } in_c && /^class / { exit }
                         in_c && /def forward/ { lo = NR } END { print lo }' "$script"
}
attn_lo=$(fwd_lines CausalSelfAttention) mlp_lo=$(fwd_lines MLP)
attn_hi=$(awk -v s="$attn_lo" 'NR > s && /^class / { print NR - 1; exit }' "$script")
mlp_hi=$(awk -v s="$mlp_lo" 'NR > s && /^class / { print NR - 1; exit }' "$script")
in_range() {  # in_range NAME: "ALL RIGHT", the tensors of those lines and those in their module's range
  sqlite3 -separator ' ' "$tmp/$1.db" "WITH f AS (
      SELECT e.seq, e.stack, e.range, min(s.depth) AS d FROM events e JOIN stacks s ON s.stack = e.stack
      JOIN frames fr ON fr.id = s.frame WHERE e.kind = 31 AND fr.file LIKE '%train_gpt2.py' GROUP BY e.seq),
    g AS (SELECT fr.line, r.path FROM f JOIN stacks s ON s.stack = f.stack AND s.depth = f.d
      JOIN frames fr ON fr.id = s.frame LEFT JOIN ranges r ON r.id = f.range
      WHERE fr.line BETWEEN $attn_lo AND $attn_hi OR fr.line BETWEEN $mlp_lo AND $mlp_hi)
    SELECT count(*), sum(CASE WHEN (line BETWEEN $attn_lo AND $attn_hi AND path GLOB '*/fwd/h.[0-9]*.attn*')
      OR (line BETWEEN $mlp_lo AND $mlp_hi AND path GLOB '*/fwd/h.[0-9]*.mlp*') THEN 1 ELSE 0 END) FROM g"
}
check_placement() {
  local n=$1 how all right
  if [[ ! -f $build/libgpumem_torch.so ]]; then
    bad "$n: $build/libgpumem_torch.so was not built although PyTorch is installed (preload/module.mk)"; return
  fi
  how=$(sqlite3 "$tmp/$n.db" "SELECT value FROM meta WHERE key = 'torch_placement'")
  read -r all right <<< "$(in_range "$n")"
  [[ $how == exact && ${all:-0} -gt 0 && $right == "$all" ]] \
    && ok "$n: PyTorch's entries placed exactly (meta.torch_placement $how): the $all tensors of the attention's and MLP's forward lines in their module's range" \
    || bad "$n: placement '$how': $right of $all tensors of the attention's and MLP's forward lines in their module's range"
}
jq_() { "$G" report --json "$tmp/$1.db" | jq -r "$2"; }

for size in tiny gpt2; do
  for conf in "" "expandable_segments:True"; do
    name=$size-default; [[ -n $conf ]] && name=$size-expandable
    if [[ $size == tiny ]]; then args=(--model tiny --steps 3); envs=(GPUMEM_SIM_BACKING=memory)
    else args=(--model gpt2 -B 8 -T 1024 --steps 2); envs=(GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G); fi
    rec "$name" "${envs[@]}" PYTORCH_CUDA_ALLOC_CONF="$conf" -- -- "${args[@]}" || continue
    a=$(fig "$name" max_memory_allocated) r=$(fig "$name" max_memory_reserved) q=$(fig "$name" requested_peak)
    "$G" report --json "$tmp/$name.db" > "$tmp/$name.json" || { bad "$name: report --json failed"; continue; }
    read -r ja jr jq sr dr dt do dc dx dl < <(jq -r '[.torch.peak_allocated, .torch.peak_reserved,
        .torch.peak_requested, .summary.peak_device, .torch.device_peak.reserved,
        .torch.device_peak.torch_reserved, .torch.device_peak.outside_torch, .torch.device_peak.gpumem_cache,
        .torch.device_peak.other_vmm, .torch.device_peak.torch_less_than_its_peak] | @tsv' "$tmp/$name.json")
    [[ $ja == "$a" && $jr == "$r" && $jq == "$q" ]] \
      && ok "$name: .torch peaks = the script's (allocated $a, reserved $r, requested $q)" \
      || bad "$name: .torch allocated $ja reserved $jr requested $jq; the script: $a $r $q"
    [[ $sr -ge $jr && $dr == "$sr" && $((dt + do + dc + dx)) -eq $dr && $((sr - jr)) -eq $((do + dc + dx - dl)) ]] \
      && ok "$name: device-wide peak reserved $sr >= PyTorch's $jr; the difference $((sr - jr)) named (outside PyTorch $do, gpumem's cache $dc, other VMM $dx, PyTorch then $dl below its peak)" \
      || bad "$name: summary $sr, torch $jr, device_peak $dr = $dt + $do + $dc + $dx (less $dl)"
    [[ $(jq -r '.torch.blocks_guessed' "$tmp/$name.json") == 0 ]] || bad "$name: block sizes were guessed"
    check_placement "$name"
  done
done

# without the tracker (GPUMEM_TORCH_TRACE=0): placed by PyTorch's clock moved onto the recording's,
# and the figures the same
rec clock GPUMEM_SIM_BACKING=memory GPUMEM_TORCH_TRACE=0 -- -- --model tiny --steps 3 || true
how=$(sqlite3 "$tmp/clock.db" "SELECT value FROM meta WHERE key = 'torch_placement'")
ca=$(jq_ clock '.torch.peak_allocated') cr=$(jq_ clock '.torch.peak_reserved')
[[ $how == clock && $ca == "$(fig clock max_memory_allocated)" && $cr == "$(fig clock max_memory_reserved)" ]] \
  && ok "clock: GPUMEM_TORCH_TRACE=0 places by the clocks (meta.torch_placement $how), .torch peaks still the script's ($ca, $cr); $(in_range clock | awk '{ print $2 " of " $1 }') of the attention's and MLP's tensors in their module's range" \
  || bad "clock: placement '$how', .torch $ca / $cr, the script's $(fig clock max_memory_allocated) / $(fig clock max_memory_reserved)"

# the allocations' Python frames: read by gpumem's tracker (the history then keeps none), or, without
# it, PyTorch's own stacks; the same run gives the same stacks either way
stacks_of() { sqlite3 "$tmp/$1.db" "SELECT (SELECT group_concat(f.function || '@' || f.file || ':' || f.line, ' < ')
  FROM (SELECT frame FROM stacks s WHERE s.stack = e.stack ORDER BY depth) x JOIN frames f ON f.id = x.frame)
  FROM events e WHERE kind = 31 ORDER BY seq"; }
s1=$(sqlite3 "$tmp/tiny-default.db" "SELECT value FROM meta WHERE key = 'torch_stacks'")
s0=$(sqlite3 "$tmp/clock.db" "SELECT value FROM meta WHERE key = 'torch_stacks'")
lost=$(sqlite3 "$tmp/tiny-default.db" "SELECT value FROM meta WHERE key = 'torch_stacks_lost'")
n1=$(stacks_of tiny-default | grep -c "train_gpt2.py:") n0=$(stacks_of clock | grep -c "train_gpt2.py:")
[[ $s1 == gpumem && $s0 == pytorch && $n1 -gt 0 && $lost == 0 ]] && cmp -s <(stacks_of tiny-default) <(stacks_of clock) \
  && ok "stacks: gpumem's tracker read the allocations' Python frames (meta.torch_stacks $s1; $n1 in the script), the same as PyTorch's own ($s0, GPUMEM_TORCH_TRACE=0)" \
  || bad "stacks: meta.torch_stacks '$s1' / '$s0' (lost '$lost'), $n1 / $n0 allocations in the script; first difference: $(diff <(stacks_of tiny-default) <(stacks_of clock) | head -3)"

# the trace is the tracker's (PyTorch's history stays off: meta.torch_history_from gpumem); with
# PyTorch's history on too (GPUMEM_TORCH_PYTORCH_HISTORY=1), its entries paired with the tracker's,
# the same run merges the same entries: kind, size, stream, range and stack of each, in order
# (the addresses differ from run to run). 10 steps: more entries than the tracker's first ring
# holds (4,096), so it has grown. With the planted leak (--leak): the leaks row below reads trk10
rec trk10 GPUMEM_SIM_BACKING=memory -- -- --model tiny --steps 10 --leak || true
rec pyhist GPUMEM_SIM_BACKING=memory GPUMEM_TORCH_PYTORCH_HISTORY=1 -- -- --model tiny --steps 10 --leak || true
merged() { sqlite3 "$tmp/$1.db" "SELECT e.kind, e.size, e.stream, coalesce(r.path, ''), e.stack FROM events e
  LEFT JOIN ranges r ON r.id = e.range WHERE e.kind BETWEEN 31 AND 35 ORDER BY e.seq"; }
meta() { sqlite3 "$tmp/$1.db" "SELECT value FROM meta WHERE key = '$2'"; }
f0=$(meta trk10 torch_history_from) f1=$(meta pyhist torch_history_from) n0=$(merged trk10 | wc -l)
[[ $f0 == gpumem && $f1 == pytorch && $(meta pyhist torch_placement) == exact && $n0 -gt 4096 ]] &&
  cmp -s <(merged trk10) <(merged pyhist) \
  && ok "the tracker's trace (meta.torch_history_from $f0) merges the same $n0 entries as PyTorch's history paired with it ($f1)" \
  || bad "the tracker's trace ($f0, $n0 entries) against PyTorch's history ($f1): $(diff <(merged trk10) <(merged pyhist) | head -3)"

# the merge renumbers every seq the recording holds to make room (gm_torch.c, renumber): each
# reference still lands on its row — a launch and its uses on a launch event, a use's birth, a
# tensor's birth and death, a name's tensor — and no name shares a seq with an event
refs() { sqlite3 -separator ' ' "$tmp/$1.db" "SELECT (SELECT count(*) FROM launches), (SELECT count(*) FROM uses),
  (SELECT count(*) FROM alloc_life), (SELECT count(*) FROM names),
  (SELECT count(*) FROM launches l LEFT JOIN events e ON e.seq = l.seq WHERE e.kind IS NOT 20) +
  (SELECT count(*) FROM uses u LEFT JOIN events e ON e.seq = u.seq WHERE e.kind IS NOT 20) +
  (SELECT count(*) FROM uses u LEFT JOIN events e ON e.seq = u.birth WHERE e.seq IS NULL OR e.seq > u.seq) +
  (SELECT count(*) FROM alloc_life l LEFT JOIN events b ON b.seq = l.birth LEFT JOIN events d ON d.seq = l.death
    WHERE b.seq IS NULL OR (l.death IS NOT NULL AND (d.seq IS NULL OR d.addr IS NOT b.addr OR d.seq <= b.seq))) +
  (SELECT count(*) FROM names n LEFT JOIN events e ON e.seq = n.birth
    WHERE n.birth IS NOT NULL AND (e.seq IS NULL OR e.addr IS NOT n.addr OR e.seq > n.seq)) +
  (SELECT count(*) FROM names n JOIN events e ON e.seq = n.seq)"; }
for v in trk10 pyhist; do
  read -r nl nu na nn wrong <<< "$(refs "$v")"
  [[ ${nl:-0} -gt 0 && ${nu:-0} -gt 0 && ${na:-0} -gt 0 && ${nn:-0} -gt 0 && $wrong == 0 ]] \
    && ok "$v: after the merge's renumbering, every seq reference lands on its row ($nl launches, $nu uses, $na lifetimes, $nn names)" \
    || bad "$v: $wrong seq references wrong after the merge ($nl launches, $nu uses, $na lifetimes, $nn names)"
done

# a trace ring that lost its first entries (the tracker's keeps the last N, as PyTorch's history
# does): each entry still placed exactly, and the report says the trace was truncated
for v in ring ring-pyhist; do
  e=(); [[ $v == ring-pyhist ]] && e=(GPUMEM_TORCH_PYTORCH_HISTORY=1)
  rec "$v" GPUMEM_SIM_BACKING=memory GPUMEM_TORCH_MAX_ENTRIES=1000 "${e[@]}" -- -- --model tiny --steps 3 || true
  [[ $(jq_ "$v" '.torch.history_truncated') == true ]] && ok "$v: GPUMEM_TORCH_MAX_ENTRIES=1000 truncated the trace (from $(meta "$v" torch_history_from))" \
    || bad "$v: the trace was not truncated ($(jq_ "$v" '.torch.history_truncated'))"
  check_placement "$v"
done

# phases and names in the report's PyTorch tables (text and JSON)
n=tiny-default
"$G" report --top 200 "$tmp/$n.db" > "$tmp/$n.txt" 2>&1
sed -n "/^PyTorch's allocator/,/^Peak attribution/p" "$tmp/$n.txt" > "$tmp/$n.torch.txt"
for want in 'step \*/fwd/h\.0\.attn' 'step \*/bwd/' 'step \*/opt' 'adam\.exp_avg\.' 'grad\.' ' wte\.weight$'; do
  grep -q "$want" "$tmp/$n.torch.txt" || bad "$n: the PyTorch section does not show '$want'"
done
phases=$(jq -r '[.torch.peak.by_phase[].phase] | join(" ")' "$tmp/$n.json")
[[ $phases == *"/fwd/"* && $phases == *"/bwd/"* && $phases == *"/opt"* ]] && ok "$n: phases $(echo "$phases" | wc -w) (fwd, bwd, opt)" \
  || bad "$n: JSON phases: $phases"
# PyTorch's clock moved onto the recording's (gm_torch.c, clock_offset; the clock run: PyTorch's
# history without the tracker): each segment's entry within 200 us of the cudaMalloc that made it
# (the median of the gaps; PyTorch's time_us has jitter of tens of us), however far apart the
# two clocks started (0.5-1.6 ms measured)
off=$(meta clock torch_clock_offset_ns)
gap=$(sqlite3 "$tmp/clock.db" "SELECT abs(e.t - (SELECT max(a.t) FROM events a WHERE a.kind = 1 AND a.addr = e.addr
        AND a.seq < e.seq)) AS g FROM events e WHERE e.kind = 34 ORDER BY g" | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "" }')
[[ -n $off && $off != 0 && -n $gap ]] && ((gap <= 200000)) && ok "clock: PyTorch's clock moved by $off ns; segments within $gap ns of their cudaMalloc (median)" \
  || bad "clock: PyTorch's clock: offset '$off', median gap of segments to their cudaMalloc '$gap' ns"
# PyTorch's libraries named through gm_sym.c's sorted symbol table as libdwfl names them
GPUMEM_SYM_VERIFY=1 "$G" report "$tmp/$n.db" 2>&1 > /dev/null | grep 'symbol table: .* frames checked' > "$tmp/verify"
read -r checked differ < <(sed -n 's/.*: \([0-9]*\) frames checked against libdwfl, \([0-9]*\) differ/\1 \2/p' "$tmp/verify")
[[ -n ${checked:-} ]] && ((checked >= 50 && differ == 0)) && ok "$n: $checked frames (libtorch's among them) named as libdwfl names them" \
  || bad "$n: symbol table against libdwfl: $(cat "$tmp/verify")"
"$G" report --json --top 1000 "$tmp/$n.db" | jq -r '.torch.peak.by_name[].name' > "$tmp/names"
grep -q '^adam\.exp_avg\.' "$tmp/names" && grep -q '^grad\.' "$tmp/names" && grep -q '^wte\.weight$\|^h\.\*\.attn\.c_attn\.weight$' "$tmp/names" \
  && ok "$n: parameter, grad.* and adam.* names" || bad "$n: names: $(head -c 300 "$tmp/names" | tr '\n' ' ')"

# the planted leak, at its line (trk10's recording: 10 steps, --leak)
"$G" leaks "$tmp/trk10.db" > "$tmp/leak.txt" 2>&1
sed -n '/what grows/,/^$/p' "$tmp/leak.txt" > "$tmp/grows.txt"
grep -q "train_gpt2.py:$leak_line in main" "$tmp/grows.txt" \
  && ok "leaks: what grows each step is at train_gpt2.py:$leak_line (the planted leak)" \
  || { bad "leaks does not name train_gpt2.py:$leak_line"; cat "$tmp/leak.txt"; }

# gpumem as PyTorch's allocator: the same tables, PyTorch's requested peak the default run's, and
# the one the script itself read from gpumem (memory_stats' requested_bytes)
rec pluggable GPUMEM_SIM_BACKING=memory -- --allocator gpumem -- --model tiny --steps 3 || true
"$G" report --json "$tmp/pluggable.db" > "$tmp/pluggable.json" 2>/dev/null
pq=$(jq -r '.torch.peak_requested' "$tmp/pluggable.json") dq=$(fig tiny-default requested_peak)
sq=$(fig pluggable requested_peak)
[[ $(jq -r '.torch.allocator' "$tmp/pluggable.json") == gpumem && $pq == "$dq" && $sq == "$dq" ]] \
  && ok "--allocator gpumem: PyTorch's requested peak $pq = the default run's = the script's own" \
  || bad "--allocator gpumem: requested peak $pq, the default run's $dq, the script's own '$sq'"
phases=$(jq -r '[.peak.by_phase[].phase] | join(" ")' "$tmp/pluggable.json")
"$G" report --json --top 1000 "$tmp/pluggable.db" | jq -r '.peak.by_name[].name' > "$tmp/pnames"
[[ $phases == *"/fwd/"* && $phases == *"/bwd/"* && $phases == *"/opt"* ]] && grep -q '^adam\.exp_avg\.' "$tmp/pnames" \
  && grep -q '^grad\.' "$tmp/pnames" && ok "--allocator gpumem: fwd/bwd/opt phases, grad.* and adam.* names" \
  || bad "--allocator gpumem: phases '$phases', names $(head -c 200 "$tmp/pnames" | tr '\n' ' ')"

# the opt-outs
rec nohist GPUMEM_SIM_BACKING=memory -- --no-torch-history -- --model tiny --steps 2 || true
[[ $(jq_ nohist '.torch') == null ]] && ok "--no-torch-history: nothing merged" || bad "--no-torch-history: a torch view"
rec nohooks GPUMEM_SIM_BACKING=memory -- --no-torch-hooks -- --model tiny --steps 2 || true
[[ $("$G" sql "$tmp/nohooks.db" -c "SELECT count(*) FROM ranges WHERE path LIKE 'step %'" | tail -1) == 0 ]] \
  && [[ $(jq_ nohooks '.torch.peak_allocated') -gt 0 ]] && ok "--no-torch-hooks: no step ranges, the history still merged" \
  || bad "--no-torch-hooks: step ranges recorded, or no history"

# when no trace comes back, gpumem record's line says why, and nothing when torch was never imported
endline() {  # endline NAME PYTHON-SOURCE: record it, print its stderr's PyTorch lines
  printf '%s\n' "$2" > "$tmp/$1.py"
  TMPDIR=$tmp "$G" record -o "$tmp/$1.db" -- "$torch_py" "$tmp/$1.py" > /dev/null 2> "$tmp/$1.err"
  grep "PyTorch" "$tmp/$1.err" | grep -v UserWarning
}
[[ -z $(endline notorch 'print("no torch")') ]] && ok "a Python program without torch: no PyTorch line" \
  || bad "a Python program without torch: $(cat "$tmp/notorch.err")"
endline cpuonly 'import torch; print(torch.ones(3).sum())' | grepq "PyTorch never used CUDA" \
  && ok "torch on the CPU only: 'never used CUDA'" || bad "torch on the CPU only: $(cat "$tmp/cpuonly.err")"
endline cpumod 'import torch; print(torch.nn.Linear(2, 2)(torch.ones(2)).shape)' > /dev/null
grepq "made no CUDA call that reached gpumem: the recording holds its ranges only" "$tmp/cpumod.err" \
  && ! grepq "CUDA calls reached gpumem" "$tmp/cpumod.err" \
  && ok "a module run on the CPU: its ranges recorded, and no CUDA call claimed" || bad "a module on the CPU: $(cat "$tmp/cpumod.err")"
endline quick 'import torch, os; x = torch.ones(3, device="cuda"); os._exit(0)' | grepq "ended before its exit handlers ran" \
  && ok "os._exit after CUDA: 'ended before its exit handlers ran'" || bad "os._exit: $(cat "$tmp/quick.err")"
ls "$tmp" | grepq "gpumem-torch" && bad "a trace file or its .state was left in TMPDIR: $(ls "$tmp")"
exit $fail
