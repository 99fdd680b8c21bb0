#!/usr/bin/env bash
# The parity matrix of tests/torch/torch_parity.sh at GPT-2 124M (-B 8 -T 1024, every
# configuration of issue 36) instead of the 2-layer `small` model `make test` runs: the `pytorch`
# presets replayed against PyTorch's own max_memory_reserved() and end segments.
#   torch.preset_max_err_pct   the largest error of the replayed peak reserved, in % (goal 0,
#                              bar 0.5)
# The memory-fraction configuration runs on a 40 GiB device (half of it the limit, garbage
# collection above 60% of that: below the model's 13 GB). Skipped (exit 0, no BENCH line)
# without PyTorch, as tests/torch/common.bash skips.
set -uo pipefail
BUILD=${BUILD:-build}
out=$(TORCH_PARITY_ARGS="--model gpt2 -B 8 -T 1024" TORCH_PARITY_MEM=40G BUILD=$BUILD \
      bash tests/torch/torch_parity.sh 2>&1)
rc=$?
[[ $rc -eq 77 ]] && { echo "torch_parity_bench: skipped (no PyTorch)" >&2; exit 0; }
grep -E '^(parity:|FAIL)' <<< "$out" >&2
grep '^BENCH ' <<< "$out"
exit $rc
