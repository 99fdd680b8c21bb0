#!/usr/bin/env bash
# rec_xl_bench.sh — the recorder's back-pressure on its heaviest load: the trainer's gpt2-xl dry
# run (-B 8 -T 1024, 20 steps, --dry-run: allocations, frees and launches as fast as the CPU
# issues them, no compute), with access tracking on (GPUMEM_USES=1), on a virtual device
# (GPUMEM_SIM_BACKING=virtual, 400G).
#   rec.dry_run_xl_drops          events the default recording dropped (meta.dropped_events);
#                                 must be 0: a full ring makes the program wait for the writer
#   rec.dry_run_xl_slowdown       wall time of the run under `gpumem record` (default: lossless)
#                                 / the same run not recorded (the trainer alone on the virtual
#                                 GPU); best of 3 each, run alternately
#   rec.dry_run_xl_slowdown_drop  the same with GPUMEM_RING_FULL=drop (the opt-in bounded mode):
#                                 what losslessness costs on top is the difference
#   rec.dry_run_xl_drops_drop     events the bounded mode dropped on the same run (for scale)
set -euo pipefail
BUILD=${BUILD:-build}
GM=$BUILD/gpumem TRAIN=$BUILD/train_gpt2_sim
[[ -x $GM && -x $TRAIN ]] || { echo "rec_xl_bench: build first" >&2; exit 1; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
export GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=400G GPUMEM_USES=1
args=(--model gpt2-xl -B 8 -T 1024 --dry-run --steps 20)
wall() { # command... -> seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$@" > "$TMP/out.txt" 2>&1 || { tail -3 "$TMP/out.txt" >&2; echo "rec_xl_bench: a run failed" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}
drops() { "$GM" sql "$1" -c "SELECT value FROM meta WHERE key = 'dropped_events'" | tail -1; }
: > "$TMP/plain" ; : > "$TMP/wait" ; : > "$TMP/drop"
for r in 1 2 3; do
  wall "$TRAIN" "${args[@]}" >> "$TMP/plain"
  wall "$GM" record -q --force -o "$TMP/wait.db" -- "$TRAIN" "${args[@]}" >> "$TMP/wait"
  echo "$(drops "$TMP/wait.db")" >> "$TMP/wait.drops"
  wall env GPUMEM_RING_FULL=drop "$GM" record -q --force -o "$TMP/drop.db" -- "$TRAIN" "${args[@]}" >> "$TMP/drop"
  echo "$(drops "$TMP/drop.db")" >> "$TMP/drop.drops"
done
best() { sort -g "$1" | head -1; }
echo "# walls (s): plain $(tr '\n' ' ' < "$TMP/plain")| recorded $(tr '\n' ' ' < "$TMP/wait")| drop mode $(tr '\n' ' ' < "$TMP/drop")" >&2
echo "BENCH rec.dry_run_xl_drops $(sort -g "$TMP/wait.drops" | tail -1) events"
awk -v a="$(best "$TMP/wait")" -v b="$(best "$TMP/plain")" 'BEGIN { printf "BENCH rec.dry_run_xl_slowdown %.2f x\n", a / b }'
awk -v a="$(best "$TMP/drop")" -v b="$(best "$TMP/plain")" 'BEGIN { printf "BENCH rec.dry_run_xl_slowdown_drop %.2f x\n", a / b }'
echo "BENCH rec.dry_run_xl_drops_drop $(sort -g "$TMP/drop.drops" | tail -1) events"
