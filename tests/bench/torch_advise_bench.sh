#!/usr/bin/env bash
# The full matrix of tests/torch/torch_advise.sh (issue 39, item 4): `gpumem advise --check` on
# the GPT-2 script, tiny, gpt2 124M and gpt2-medium (-B 8 -T 1024), under PyTorch's own allocator
# and with gpumem as its allocator, every recommendation and combination up to the top 10 of
# each list re-run with its flags, predicted against measured peaks (PyTorch's
# max_memory_allocated/reserved(); gpumem's recorded peaks under its allocator).
#   advise.torch_max_err_pct   the largest error, allocated or reserved, over every re-run, in %
#                              (goal 0, bar 2)
# TORCH_ADVISE_RUNS / TORCH_ADVISE_TOP narrow it (make test runs gpt2 and tiny under both
# allocators, the top 1 of each list). Skipped (exit 0, no BENCH line) without PyTorch, as
# tests/torch/common.bash skips.
set -uo pipefail
BUILD=${BUILD:-build}
all="tiny.pytorch tiny.gpumem gpt2.pytorch gpt2.gpumem gpt2-medium.pytorch gpt2-medium.gpumem"
out=$(TORCH_ADVISE_RUNS=${TORCH_ADVISE_RUNS:-$all} TORCH_ADVISE_TOP=${TORCH_ADVISE_TOP:-10} \
      BUILD=$BUILD bash tests/torch/torch_advise.sh 2>&1)
rc=$?
[[ $rc -eq 77 ]] && { echo "torch_advise_bench: skipped (no PyTorch)" >&2; exit 0; }
grep -E '^(FAIL|torch_advise)' <<< "$out" >&2
grep '^BENCH ' <<< "$out"
exit $rc
