#!/usr/bin/env bash
# torch_memcheck.sh — gpumem's commands on PyTorch recordings under valgrind's memcheck. The
# sanitizer stages skip tests/torch/ (an uninstrumented Python cannot load instrumented
# libraries), so the readers' paths that only a PyTorch recording takes (its history's rows, the
# hooks' ranges, the op log, the private pools) had no leak or memory-error check: `gpumem
# advise` lost 2 KiB on every PyTorch recording (the loader's map of freed blocks and the pools'
# names, freed on its error paths only; an outside check of 2026-12-07 found it under
# LeakSanitizer by hand). Each row: a command on a recording of the tiny GPT-2 script (3 steps),
# under PyTorch's allocator with its history and the hooks (`torch`) and with gpumem as PyTorch's
# allocator and the op log (`gpumem`); it fails on a memory error or a block definitely lost.
set -uo pipefail
source "$(dirname "$0")/common.bash"
command -v valgrind > /dev/null || { echo "torch_memcheck.sh: no valgrind (make deps installs it); skipped" >&2; exit 77; }
export GPUMEM_SIM_BACKING=memory
for mode in torch gpumem; do
  opts=()
  [[ $mode == gpumem ]] && opts=(--allocator gpumem --torch-ops)
  "$G" record -q -o "$tmp/$mode.db" "${opts[@]}" -- "$torch_py" tests/torch/train_gpt2.py --model tiny --steps 3 \
    > "$tmp/$mode.rec" 2>&1 || { bad "$mode: recording failed: $(tail -3 "$tmp/$mode.rec")"; continue; }
  for cmd in "report" "leaks" "frag" "tune" "advise" "viz -o $tmp/$mode.html --force" \
             "diff $tmp/torch.db"; do
    read -ra w <<< "$cmd" # the command, the database, then its options
    valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=9 \
      "$G" "${w[0]}" "$tmp/$mode.db" "${w[@]:1}" > "$tmp/out" 2> "$tmp/vg"
    rc=$?
    if [[ $rc -eq 9 ]]; then bad "$mode: gpumem $cmd: memcheck: $(grep -m3 -E 'definitely lost|Invalid|uninitialised' "$tmp/vg" | tr '\n' ' ')"
    elif [[ $rc -ne 0 ]]; then bad "$mode: gpumem $cmd exited $rc: $(tail -3 "$tmp/vg")"
    else ok "$mode: gpumem $cmd: no memory error, nothing lost"; fi
  done
done
exit "$fail"
