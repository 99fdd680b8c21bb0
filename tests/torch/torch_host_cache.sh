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
#     still a leak, at its line: a pinned block the program holds is told from the cache.
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/host_cache.py
# line MARK: the line of $script marked "# MARK"
line() { grep -n "# $1\$" "$script" | cut -d: -f1; }
kept_line=$(line KEPT)
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
  want=$([[ $alloc == torch ]] && echo false || echo true)
  got=$(jq -r --arg p "host_cache.py:$kept_line " '"\([.host_held.by_site[] | select(.site | startswith($p)) | .count] | add // 0) \(.host_held.in_leaks)"' "$tmp/$alloc.json")
  [[ $got == "1 $want" ]] && ok "$alloc: kept: .host_held holds its block, in_leaks $want" \
    || bad "$alloc: kept: .host_held's blocks at the kept tensor's line and in_leaks '$got', want '1 $want'"
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
done
if [[ -s $tmp/gpumem.json ]]; then
  want=$(awk '$1 == "kept" { print $2 }' "$tmp/gpumem.out")
  got=$(jq -r --arg s "host_cache.py:$kept_line in <module>" '[.leaks[] | select(.site == $s) | .bytes] | add // 0' "$tmp/gpumem.json")
  # PyTorch's host allocator rounds a block up to a power of two
  [[ -n $want && $got -ge $want && $got -lt $((2 * want)) ]] \
    && ok "gpumem: the kept pinned tensor is a leak at host_cache.py:$kept_line ($got bytes for its $want)" \
    || bad "gpumem: the kept pinned tensor's leak at host_cache.py:$kept_line is $got bytes, want its $want rounded up"
fi
exit $fail
