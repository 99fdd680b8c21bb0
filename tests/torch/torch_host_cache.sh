#!/usr/bin/env bash
# torch_host_cache.sh — PyTorch's pinned host cache is not a leak (tests/torch/host_cache.py: a
# DataLoader with pin_memory=True whose batches are dropped, a pin_memory()'d tensor freed, the
# saved activations of save_on_cpu(pin_memory=True), and one pin_memory()'d tensor kept to the
# end), on each allocator (PyTorch's, `--allocator gpumem`), one recording each:
#   - leaks --json: .host_cache names each of the three kinds of cached blocks by its site (the
#     DataLoader's at torch's pin_memory.py, the others at their lines), and no leak is at the
#     DataLoader's site or the freed tensor's line (under --allocator gpumem they were listed as
#     leaks, 64 KiB at pin_memory.py:57 and 1 MiB at the freed tensor's line, until 2026-12-07);
#   - the text says the cache apart, with what to do (torch._C._host_emptyCache()), and report's
#     summary too (a "pinned at exit" line, .summary.host_cache_bytes ... as leaks counts them);
#   - the kept tensor's block is never the cache's: .host_held names it (PyTorch's view said
#     nothing of it), and under --allocator gpumem (the device allocations are the view) it is
#     still a leak, at its line: a pinned block the program holds is told from the cache. In
#     both views it is in the LEAK SUMMARY (leaks lists what is alive at exit): PyTorch's view,
#     whose .leaks are its device tensors, adds .host_held to leaked_bytes (.host_held.in_leaks
#     true; it was false, and the summary left the block out, until 2026-12-07), text and JSON
#     alike;
# and a table of the recordings where the cache was once not told (until 2026-12-07), each
# checked in leaks' text, leaks --json and report (text and JSON):
#   - stacks0 (GPUMEM_STACKS=0) and python0 (GPUMEM_PYTHON=0): the cache's frees were known by
#     the Python frame of gpumem's hook in their stacks only: with none, .host_cache was empty
#     and the cached blocks vanished from every account; the hook now marks its frees
#     (gpumem_host_cache_emptying, event 6 flagged REC_F_HOST_CACHE), whatever the stacks;
#   - register (PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True: PyTorch pins with
#     cudaHostRegister, not cudaHostAlloc): nothing pinned was recorded at all (report:
#     "pinned host 0"); now registrations are pinned host blocks, the cache's and the kept one
#     told apart as with cudaHostAlloc;
#   - nohooks (python -E: gpumem record's sitecustomize, and with it the hook that empties the
#     cache, left out): every cached block was a plain leak; now leaks and report say that the
#     pinned blocks PyTorch made cannot be told apart (.host_cache_unknown), the cache never
#     emptied. --no-torch-hooks and --no-torch-history leave the emptying in place (not rows).
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/host_cache.py
# line MARK: the line of $script marked "# MARK"
line() { grep -n "# $1\$" "$script" | cut -d: -f1; }
kept_line=$(line KEPT)
# the table's recordings, started now, beside the two below: NAME|ENV|PYTHON OPTION
cases=("stacks0|GPUMEM_STACKS=0|" "python0|GPUMEM_PYTHON=0|"
       "register|PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True|" "nohooks||-E")
for row in "${cases[@]}"; do
  IFS='|' read -r name envs opt <<< "$row"
  # shellcheck disable=SC2086 # envs and opt: a word each, or none
  env $envs GPUMEM_SIM_BACKING=memory "$G" record -o "$tmp/$name.db" -- "$torch_py" $opt "$script" \
    > "$tmp/$name.out" 2>&1 &
done
for alloc in torch gpumem; do
  if ! GPUMEM_SIM_BACKING=memory "$G" record -o "$tmp/$alloc.db" --allocator "$alloc" -- "$torch_py" "$script" \
      > "$tmp/$alloc.out" 2>&1; then
    bad "$alloc: the recording failed"; tail -5 "$tmp/$alloc.out"; continue
  fi
  "$G" leaks "$tmp/$alloc.db" > "$tmp/$alloc.txt" 2>&1
  "$G" leaks --json "$tmp/$alloc.db" > "$tmp/$alloc.json" 2>&1
  # the cache's sites: the DataLoader's pin thread (torch's pin_memory.py), the freed tensor's
  # line, the offloaded activations' line
  for row in "dataloader pin_memory.py:[0-9]+ in pin_memory" "freed host_cache.py:$(line FREED) in <module>" \
             "offload host_cache.py:$(line OFFLOAD) in <module>"; do
    what=${row%% *} re=${row#* }
    got=$(jq -r --arg re "^$re\$" '[.host_cache.by_site[] | select(.site | test($re)) | "\(.count) at \(.site)"] | join(", ")' "$tmp/$alloc.json" 2>&1)
    [[ -n $got && $got != *error* ]] && ok "$alloc: $what: .host_cache holds its blocks ($got)" \
      || bad "$alloc: $what: no block of .host_cache at $re (${got:-none})"
  done
  for row in "dataloader pin_memory.py:" "freed host_cache.py:$(line FREED) "; do
    what=${row%% *} pre=${row#* }
    got=$(jq -r --arg p "$pre" '[.leaks[] | select(.site | startswith($p)) | "\(.bytes) at \(.site)"] | join(", ")' "$tmp/$alloc.json")
    [[ -z $got ]] && ok "$alloc: $what: no leak at $pre" || bad "$alloc: $what: the host cache counted as a leak: $got"
  done
  # the kept tensor's block is the program's, never the cache's
  got=$(jq -r --arg p "host_cache.py:$kept_line " '[.host_cache.by_site[] | select(.site | startswith($p)) | .count] | add // 0' "$tmp/$alloc.json")
  [[ $got == 0 ]] && ok "$alloc: kept: the kept tensor's block is not the cache's" \
    || bad "$alloc: kept: .host_cache counts $got blocks at the kept tensor's line"
  # ... it is the program's: .host_held names it, counted in the leaks where the view is the
  # device's (--allocator gpumem), said apart where it is PyTorch's (its tensors are device ones)
  got=$(jq -r --arg p "host_cache.py:$kept_line " '"\([.host_held.by_site[] | select(.site | startswith($p)) | .count] | add // 0) \(.host_held.in_leaks)"' "$tmp/$alloc.json")
  [[ $got == "1 true" ]] && ok "$alloc: kept: .host_held holds its block, in_leaks true" \
    || bad "$alloc: kept: .host_held's blocks at the kept tensor's line and in_leaks '$got', want '1 true'"
  # ... and the summary counts it, text and JSON alike: beside PyTorch's tensors (.leaks lists
  # them; .host_held the block), among the device's allocations (.leaks lists it)
  add=$([[ $alloc == torch ]] && echo '+ .host_held.bytes' || echo '')
  got=$(jq -r "[.leaked_bytes, ([.leaks[].bytes] | add) $add, .host_cache_unknown.blocks] | @tsv" "$tmp/$alloc.json")
  text=$(sed -n 's/^LEAK SUMMARY: \([0-9]*\) bytes.*/\1/p' "$tmp/$alloc.txt")
  read -r lb sum unknown <<< "$got"
  [[ -n $lb && $lb == "$sum" && $lb == "$text" && $unknown == 0 ]] \
    && ok "$alloc: LEAK SUMMARY $text = leaked_bytes = .leaks${add:+ + .host_held}; no block of unknown kind" \
    || bad "$alloc: LEAK SUMMARY '$text', leaked_bytes, .leaks${add:+ + .host_held}, .host_cache_unknown.blocks: '$got'"
  # report's summary says the same apart: its figures are leaks'
  "$G" report "$tmp/$alloc.db" > "$tmp/$alloc.report" 2>&1
  got=$("$G" report --json "$tmp/$alloc.db" | jq -c '.summary | [.host_cache_bytes, .host_cache_blocks, .host_held_bytes, .host_held_blocks]')
  want=$(jq -c '[.host_cache.bytes, .host_cache.blocks, .host_held.bytes, .host_held.blocks]' "$tmp/$alloc.json")
  [[ $got == "$want" && $want != *null* ]] && grep -q "^  pinned at exit .* were PyTorch's host cache" "$tmp/$alloc.report" \
    && ok "$alloc: report: the pinned host memory at exit, the cache's apart, as leaks counts it ($got)" \
    || bad "$alloc: report: .summary's host cache and held '$got', leaks' '$want', or no 'pinned at exit' line"
  grep -q "^PyTorch's pinned host cache at exit (not leaks): " "$tmp/$alloc.txt" && grep -q '_host_emptyCache()' "$tmp/$alloc.txt" \
    && ok "$alloc: the text says the cache apart, with torch._C._host_emptyCache()" \
    || { bad "$alloc: the text does not say the cache apart"; cat "$tmp/$alloc.txt"; }
  # viz's list of what is alive at the end is leaks': the kept pinned block among them, said
  # pinned (until 2026-12-07 device memory only: one fewer than leaks, in both views)
  "$G" viz "$tmp/$alloc.db" -o "$tmp/$alloc.html" > /dev/null 2>&1
  n=$(jq -r .leaked_allocations "$tmp/$alloc.json")
  got=$(grep -o '"nleaks":[0-9]*' "$tmp/$alloc.html" | head -1)
  grep -q "\"memory\":\"pinned host\",\"name\":\"[^\"]*\",\"site\":\"host_cache.py:$kept_line " "$tmp/$alloc.html" && [[ $got == "\"nleaks\":$n" ]] \
    && ok "$alloc: viz lists leaks' $n, the kept pinned block among them" \
    || bad "$alloc: viz's $got for leaks' $n, or the kept pinned block (host_cache.py:$kept_line) not listed as pinned host"
done
wait
# the table: each case x {leaks --json, leaks' text, report (text and JSON)}
for row in "${cases[@]}"; do
  name=${row%%|*}
  [[ -s $tmp/$name.db ]] || { bad "$name: the recording failed"; tail -5 "$tmp/$name.out"; continue; }
  "$G" leaks --json "$tmp/$name.db" > "$tmp/$name.json" 2>&1
  "$G" leaks "$tmp/$name.db" > "$tmp/$name.txt" 2>&1
  "$G" report "$tmp/$name.db" > "$tmp/$name.report" 2>&1
  rj=$("$G" report --json "$tmp/$name.db" | jq -c '.summary | [.host_cache_blocks, .host_held_blocks, .host_cache_unknown_blocks]')
  lj=$(jq -c '[.host_cache.blocks, .host_held.blocks, .host_cache_unknown.blocks]' "$tmp/$name.json")
  if [[ $name == nohooks ]]; then
    # no hook emptied the cache: every pinned block PyTorch made is alive at exit, the freed
    # tensor's and the kept one's among them, said not told apart
    got=$(jq -r --arg f "host_cache.py:$(line FREED) " --arg k "host_cache.py:$kept_line " \
      '"\(.host_cache.blocks) \([.host_cache_unknown.by_site[] | select(.site | startswith($f) or startswith($k)) | .count] | add // 0) \(.host_cache_unknown.blocks == .host_held.blocks)"' "$tmp/$name.json" 2>&1)
    [[ $got == "0 2 true" ]] && ok "$name: leaks --json: .host_cache_unknown holds every pinned block PyTorch made, the freed and the kept tensor's ($lj)" \
      || bad "$name: leaks --json: .host_cache blocks, .host_cache_unknown's at the freed and kept lines, all held: '$got', want '0 2 true'"
    grep -q "^Pinned host memory alive at exit that PyTorch made, its host cache not emptied: " "$tmp/$name.txt" \
      && ok "$name: leaks' text says the cache was not emptied" || bad "$name: leaks' text does not say the cache was not emptied"
    want="made by PyTorch, whose host cache gpumem's hooks did not empty"
  else
    # the three kinds of cached blocks are the cache's, the kept one is held; nothing unknown
    got=$(jq -r '"\(.host_cache.blocks >= 3) \(.host_held.blocks) \(.host_cache_unknown.blocks)"' "$tmp/$name.json" 2>&1)
    [[ $got == "true 1 0" ]] && ok "$name: leaks --json: the cache's blocks in .host_cache, the kept one in .host_held ($lj)" \
      || bad "$name: leaks --json: .host_cache has 3 blocks or more, .host_held 1, .host_cache_unknown 0: '$got', want 'true 1 0'"
    grep -q "^PyTorch's pinned host cache at exit (not leaks): " "$tmp/$name.txt" \
      && ok "$name: leaks' text says the cache apart" || bad "$name: leaks' text does not say the cache apart"
    want="were PyTorch's host cache"
  fi
  [[ $rj == "$lj" ]] && grep -q "^  pinned at exit .*$want" "$tmp/$name.report" \
    && ok "$name: report: 'pinned at exit ... $want', .summary as leaks counts ($rj)" \
    || bad "$name: report: .summary's cache, held and unknown blocks '$rj', leaks' '$lj', or no 'pinned at exit ... $want'"
done
# register: PyTorch's registrations are recorded with their Python lines, the cache's at the
# freed tensor's, the kept one's held
if [[ -s $tmp/register.json ]]; then
  got=$(jq -r --arg f "host_cache.py:$(line FREED) " --arg k "host_cache.py:$kept_line " \
    '"\([.host_cache.by_site[] | select(.site | startswith($f)) | .count] | add // 0) \([.host_held.by_site[] | select(.site | startswith($k)) | .count] | add // 0)"' "$tmp/register.json")
  [[ $got == "1 1" ]] && ok "register: the freed tensor's registered block is the cache's, the kept one's held, at their lines" \
    || bad "register: blocks of the cache at the freed line, held at the kept line: '$got', want '1 1'"
fi
if [[ -s $tmp/gpumem.json ]]; then
  want=$(awk '$1 == "kept" { print $2 }' "$tmp/gpumem.out")
  got=$(jq -r --arg s "host_cache.py:$kept_line in <module>" '[.leaks[] | select(.site == $s) | .bytes] | add // 0' "$tmp/gpumem.json")
  # PyTorch's host allocator rounds a block up to a power of two
  [[ -n $want && $got -ge $want && $got -lt $((2 * want)) ]] \
    && ok "gpumem: the kept pinned tensor is a leak at host_cache.py:$kept_line ($got bytes for its $want)" \
    || bad "gpumem: the kept pinned tensor's leak at host_cache.py:$kept_line is $got bytes, want its $want rounded up"
fi
exit $fail
