#!/usr/bin/env bash
# snapshot_uses_unread.sh — kernel arguments are read through the parameter layout a fat binary
# gives, and launches whose layout nobody gives are unknown uses, never "unused":
#   (1) an nvcc-built program (tests/unit/sim_nvcc_app.cu: a kernel with device code only,
#       launched twice on a buffer it memsets and copies back) recorded with GPUMEM_USES=1 on the
#       virtual GPU, which reads the layout from the program's fat binary as a driver does: no
#       launch unread, and each kernel launch is a use of the buffer;
#   (1b) tests/apps/blas_app.c, one cublasSgemm through the virtual GPU's cuBLAS stand-in: its
#       launch uses A, B and C (the stand-in passes them as the kernel's arguments);
#   (2) tests/apps/unread_app.c, the same work with a kernel registered without a fat binary:
#       the two launches are counted in meta.launches_unread, and every reader of uses says so,
#       text and JSON: report (the "Idle at the peak" section), uses (one tensor's life),
#       advise (its uses line);
#   (3) the same program killed (SIGKILL) after its launches: the unread count is already in
#       the database (written at the recorder's commits, not only at close), and report's note
#       counts all four launches (from the table: the count in meta is written at close).
# (1) is skipped without nvcc; both under a sanitizer (the programs are not instrumented).
set -euo pipefail
build=${BUILD:-build}
if [[ -n ${SAN:-} ]]; then echo "snapshot_uses_unread.sh: skipped under SAN=$SAN" >&2; exit 77; fi
command -v jq >/dev/null || { echo "FAIL: jq is missing (make deps installs it)" >&2; exit 1; }
G=$build/gpumem
APP=$build/tests/apps/unread_app
[[ -x $APP ]] || { echo "snapshot_uses_unread.sh: $APP is not built: run make" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # what expected actual
  if [[ $2 == "$3" ]]; then echo "ok: $1 ($3)"; else echo "FAIL: $1: expected '$2', got '$3'"; fail=1; fi
}
meta() { "$G" sql "$1" -c "SELECT value FROM meta WHERE key = '$2'" | tail -1; }

# (1) the fat binary's layout
nvcc=
for c in "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" "$(command -v nvcc || true)"; do
  [[ -z $nvcc && -n $c && -x $c ]] && nvcc=$c
done
if [[ -n $nvcc ]]; then
  "$nvcc" -O1 -cudart shared -o "$tmp/nvapp" tests/unit/sim_nvcc_app.cu
  LD_LIBRARY_PATH=$build/sim GPUMEM_USES=1 "$G" record -q -o "$tmp/nv.db" -- "$tmp/nvapp" > "$tmp/nvapp.out"
  check "nvcc program: no launch unread" 0 "$(meta "$tmp/nv.db" launches_unread)"
  check "nvcc program: the kernel's two launches use the buffer" 2 "$("$G" sql "$tmp/nv.db" -c \
    "SELECT count(*) FROM uses u JOIN strings s ON s.id = u.kernel WHERE s.s = '_Z4add1Pi'" | tail -1)"
else
  echo "snapshot_uses_unread.sh: nvcc not found; the fat binary part skipped" >&2
fi

# (1b) the cuBLAS stand-in's GEMM carries its operands as a real cuBLAS kernel does
BLAS=$build/tests/apps/blas_app
GPUMEM_USES=1 "$G" record -q -o "$tmp/b.db" -- "$BLAS" > "$tmp/blas.out"
check "cuBLAS stand-in: no launch unread" 0 "$(meta "$tmp/b.db" launches_unread)"
check "cuBLAS stand-in: the GEMM uses A, B and C" 3 "$("$G" sql "$tmp/b.db" -c \
  "SELECT count(DISTINCT u.birth) FROM uses u JOIN strings s ON s.id = u.kernel WHERE s.s = 'cublasSgemm_v2'" | tail -1)"

# (2) no layout: unread, and said so
GPUMEM_USES=1 "$G" record -q -o "$tmp/u.db" -- "$APP" > "$tmp/app.out"
check "recorder: launches" 4 "$(meta "$tmp/u.db" launches)"
check "recorder: the two kernel launches are unread" 2 "$(meta "$tmp/u.db" launches_unread)"
check "recorder: the memset's and the copy's uses" 2 "$(meta "$tmp/u.db" uses_rows)"
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

# (3) killed: meta says so already (the recorder commits every 25 ms; a kill loses <= ~100 ms)
GPUMEM_USES=1 "$G" record -q -o "$tmp/k.db" -- "$APP" hang > "$tmp/hang.out" 2>&1 &
rp=$!
for _ in $(seq 200); do grep -q '^unread_app:' "$tmp/hang.out" && break; sleep 0.05; done
sleep 0.3
pkill -9 -P "$rp" || true
wait "$rp" || true
check "killed recording: the two unread launches are in meta" 2 "$(meta "$tmp/k.db" launches_unread)"
"$G" report "$tmp/k.db" > "$tmp/k.txt" 2>&1 || true
check "killed recording: report's note counts every launch" 1 "$(grep -c '2 of 4 launches (50%)' "$tmp/k.txt")"
exit $fail
