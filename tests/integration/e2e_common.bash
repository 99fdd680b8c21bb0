# Shared set-up of the end-to-end tests (sourced): the trainer under gpumem on the virtual GPU.
# Skips (exit 77) when a piece is not built, fails loudly otherwise.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../pipe.bash" # grepq
BUILD=${BUILD:-build}
GM=$BUILD/gpumem
TRAIN=$BUILD/train_gpt2_sim
for f in "$GM" "$TRAIN" "$BUILD/libgpumem.so"; do
  [[ -e $f ]] || { echo "skipped: $f is not built" >&2; exit 77; }
done
command -v jq >/dev/null || { echo "FAIL: jq is missing (make deps installs it)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# Real text present on every machine: the project's own sources.
TEXT=$TMP/text.txt
cat alloc/*.c snapshot/*.c train/*.c sim/*.c preload/*.c > "$TEXT"
export GPUMEM_SIM_MEMORY=${GPUMEM_SIM_MEMORY:-16G}
# under_san PLAIN SAN: how many --check re-runs (or the like) to make. Under a sanitizer
# (make test SAN=...) each re-run is the trainer again, instrumented, running the same code as
# the one before it with other numbers: a few show the sanitizer that code; the plain run
# checks every figure.
under_san() { if [[ -n ${SAN:-} ]]; then echo "$2"; else echo "$1"; fi; }
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
# The loss column of the trainer's step lines: "step N/M loss X ..." -> "N X".
losses() { awk '$1 == "step" && $3 == "loss" { print $2, $4 }' "$1"; }
# The trainer's own peak: its last line is "PEAK <bytes> bytes".
trainer_peak() { awk '$1 == "PEAK" { p = $2 } END { print p }' "$1"; }
