#!/usr/bin/env bash
# torch_host_cache.sh — PyTorch's pinned host cache is not a leak (tests/torch/host_cache.py: a
# DataLoader with pin_memory=True whose batches are dropped, and one pin_memory()'d tensor kept to
# the end), on each allocator (PyTorch's, `--allocator gpumem`), one recording each:
#   - leaks --json: .host_cache names the DataLoader's pinned blocks (at torch's pin_memory.py),
#     and no leak is at that site (they were listed as leaks under --allocator gpumem, 48 KiB at
#     pin_memory.py:57, until 2026-12-07);
#   - the text says the cache apart, with what to do (torch._C._host_emptyCache());
#   - under --allocator gpumem (the device allocations are the view) the kept tensor's block is
#     still a leak, at its line: a pinned block the program holds is told from the cache.
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/host_cache.py
kept_line=$(grep -n '# KEPT' "$script" | cut -d: -f1)
for alloc in torch gpumem; do
  if ! GPUMEM_SIM_BACKING=memory "$G" record -o "$tmp/$alloc.db" --allocator "$alloc" -- "$torch_py" "$script" \
      > "$tmp/$alloc.out" 2>&1; then
    bad "$alloc: the recording failed"; tail -5 "$tmp/$alloc.out"; continue
  fi
  "$G" leaks "$tmp/$alloc.db" > "$tmp/$alloc.txt" 2>&1
  "$G" leaks --json "$tmp/$alloc.db" > "$tmp/$alloc.json" 2>&1
  got=$(jq -r '"\(.host_cache.blocks // "none") \(.host_cache.by_site[0].site // "none")"' "$tmp/$alloc.json")
  [[ $got =~ ^[1-9][0-9]*\ pin_memory\.py:[0-9]+\ in\ pin_memory$ ]] \
    && ok "$alloc: .host_cache holds the DataLoader's pinned blocks ($got)" \
    || bad "$alloc: .host_cache blocks and first site '$got', want N >= 1 at pin_memory.py"
  cached=$(jq -r '[.leaks[] | select(.site | startswith("pin_memory.py:")) | "\(.bytes) at \(.site)"] | join(", ")' "$tmp/$alloc.json")
  [[ -z $cached ]] && ok "$alloc: no leak at pin_memory.py" || bad "$alloc: the host cache counted as a leak: $cached"
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
