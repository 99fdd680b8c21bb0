#!/usr/bin/env bash
# snapshot_uses_unread.sh — launches whose arguments gpumem cannot read are unknown uses, never
# "unused". An nvcc-built program (tests/unit/sim_nvcc_app.cu: a kernel with device code only,
# which the virtual GPU gives no parameter layout for, launched twice; a memset and a copy of the
# same buffer) recorded with GPUMEM_USES=1: the recorder counts the two kernel launches in
# meta.launches_unread, and every reader of uses says so, text and JSON:
#   report (the "Idle at the peak" section), uses (one tensor's life), advise (its uses line).
# Skipped without nvcc, and under a sanitizer (an uninstrumented nvcc program cannot load an
# instrumented runtime).
set -euo pipefail
build=${BUILD:-build}
if [[ -n ${SAN:-} ]]; then echo "snapshot_uses_unread.sh: skipped under SAN=$SAN" >&2; exit 77; fi
nvcc=
for c in "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" "$(command -v nvcc || true)"; do
  [[ -z $nvcc && -n $c && -x $c ]] && nvcc=$c
done
if [[ -z $nvcc ]]; then echo "snapshot_uses_unread.sh: nvcc not found; skipped" >&2; exit 77; fi
command -v jq >/dev/null || { echo "FAIL: jq is missing (make deps installs it)" >&2; exit 1; }
G=$build/gpumem
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$nvcc" -O1 -cudart shared -o "$tmp/app" tests/unit/sim_nvcc_app.cu
LD_LIBRARY_PATH=$build/sim GPUMEM_USES=1 "$G" record -q -o "$tmp/u.db" -- "$tmp/app" > "$tmp/app.out"
fail=0
check() { # what expected actual
  if [[ $2 == "$3" ]]; then echo "ok: $1 ($3)"; else echo "FAIL: $1: expected '$2', got '$3'"; fail=1; fi
}
meta() { "$G" sql "$tmp/u.db" -c "SELECT value FROM meta WHERE key = '$1'" | tail -1; }
check "recorder: launches" 4 "$(meta launches)"
check "recorder: the two kernel launches are unread" 2 "$(meta launches_unread)"
check "recorder: the memset's and the copy's uses" 2 "$(meta uses_rows)"
id=$("$G" sql "$tmp/u.db" -c "SELECT id FROM allocations LIMIT 1" | tail -1)
"$G" report --json "$tmp/u.db" > "$tmp/r.json"
"$G" report "$tmp/u.db" > "$tmp/r.txt"
"$G" uses --json --id "$id" "$tmp/u.db" > "$tmp/u.json"
"$G" uses --id "$id" "$tmp/u.db" > "$tmp/u.txt"
"$G" advise "$tmp/u.db" > "$tmp/a.txt" 2>&1 || true
check "report --json: idle_at_peak.launches_unread" 2 "$(jq '.idle_at_peak.launches_unread' "$tmp/r.json")"
check "report: the idle section's note" 1 "$(sed -n '/^Idle at the peak/,/^$/p' "$tmp/r.txt" | grep -c '2 of 4 launches (50%) ran kernels whose arguments gpumem could not read')"
check "report: no claim that nothing touched them" 0 "$(grep -c 'no kernel, copy or memset touched' "$tmp/r.txt" || true)"
check "uses --json: launches_unread" 2 "$(jq '.launches_unread' "$tmp/u.json")"
check "uses: the note" 1 "$(grep -c '^  note: 2 of 4 launches' "$tmp/u.txt")"
check "advise: uses incomplete, not used" 1 "$(grep -c '^uses: incomplete (2 launches' "$tmp/a.txt")"
exit $fail
