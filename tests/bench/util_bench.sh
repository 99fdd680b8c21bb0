#!/usr/bin/env bash
# Utilization (peak allocated / peak reserved) of gpumem's allocator on the GPT-2 124M trainer,
# B 8, T 1024, with --seq-jitter (every step draws its own sequence length, the case that
# fragments a caching allocator), memory only (dry run on an 80 GB virtual GPU):
#   alloc.util.gpt2_124m            as recorded under gpumem (the README's "above 99%")
#   alloc.util.gpt2_124m.pytorch    the same trace replayed under the `pytorch` preset
#   alloc.util.gpt2_124m.vs_pytorch their ratio (same trace, same run)
set -uo pipefail
BUILD=${BUILD:-build}
GM=$BUILD/gpumem REPLAY=$BUILD/alloc/gpumem-replay TRAIN=$BUILD/train_gpt2_sim
for f in "$GM" "$REPLAY" "$TRAIN"; do [[ -x $f ]] || { echo "util_bench: $f not built" >&2; exit 1; }; done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/utilbench-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G "$GM" record -q -o "$TMP/run.db" -- "$TRAIN" \
  --model gpt2 -B 8 -T 1024 --dry-run --steps 6 --seq-jitter --seed 5 > "$TMP/out.txt" 2>&1 \
  || { tail -5 "$TMP/out.txt" >&2; echo "util_bench: the recorded run failed" >&2; exit 1; }
ours=$("$GM" report --json "$TMP/run.db" | jq -r '.summary.utilization')
"$GM" export --format trace "$TMP/run.db" > "$TMP/run.trace" || exit 1
theirs=$("$REPLAY" --preset pytorch --capacity 80G "$TMP/run.trace" | sed -n 's/.* utilization=\([0-9.]*\).*/\1/p')
[[ -n $ours && -n $theirs ]] || { echo "util_bench: no utilization figure" >&2; exit 1; }
echo "BENCH alloc.util.gpt2_124m $ours x"
echo "BENCH alloc.util.gpt2_124m.pytorch $theirs x"
awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "BENCH alloc.util.gpt2_124m.vs_pytorch %.3f x\n", a / b }'
