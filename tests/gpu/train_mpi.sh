#!/usr/bin/env bash
# tests/gpu/train_mpi.sh — the CUDA trainer as 2 MPI ranks sharing one GPU (device only;
# issue 17). The GPU machine this project is checked on has one GPU, so both ranks run on it.
#   1. collectives: NCCL when libnccl.so.2 is found (TRAIN_NCCL_LIB, else the one PyTorch
#      ships, else the system's); NCCL refuses two ranks on one GPU ("duplicate GPU"), and the
#      trainer then says so and falls back to MPI through pinned host buffers. The transport
#      used is printed;
#   2. `mpirun -np 2 train_gpt2 -B 4 --zero Z` gives, step by step, the losses of the 1-rank
#      CUDA run with -B 4 within 1e-5, for Z = 0, 1, 2, 3 (the kernels are deterministic: no
#      atomics, so only the order of the cross-rank sum differs); and with --zero 3 also
#      --param-dtype bf16 and --offload params,optimizer against the 1-rank run of the same
#      flags (issue 43);
#   3. zero 1 lowers the trainer's per-rank peak by the AdamW state given back, exactly.
# Exits 77 without a GPU, without mpirun, or when the CUDA trainer was built without MPI.
set -uo pipefail
BUILD=${BUILD:-build}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu/train_mpi.sh: no NVIDIA GPU here (nvidia-smi -L failed); skipping" >&2
  exit 77
fi
command -v mpirun >/dev/null || { echo "tests/gpu/train_mpi.sh: mpirun not found (openmpi-bin); skipping" >&2; exit 77; }
source tests/gpu/common.bash
gpu_make "$BUILD/train_gpt2" || { echo "FAIL: build of $BUILD/train_gpt2"; exit 1; }
T=$BUILD/train_gpt2
[[ $(ldd "$T" 2>/dev/null) == *libmpi* ]] || { echo "tests/gpu/train_mpi.sh: $T built without MPI (no mpicc); skipping" >&2; exit 77; }
if [[ -z ${TRAIN_NCCL_LIB:-} ]]; then
  lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
  [[ -n $lib && -f $lib ]] && export TRAIN_NCCL_LIB=$lib
fi
echo "NCCL library: ${TRAIN_NCCL_LIB:-libnccl.so.2 (system search path)}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ARGS=(--model tiny -B 4 -T 64 --steps 5 --lr 1e-3)
"$T" "${ARGS[@]}" >"$tmp/one.out" 2>&1 || { echo "FAIL: 1-rank CUDA run"; cat "$tmp/one.out"; exit 1; }
losses() { awk '/^step /{print $4}' "$1"; }
for z in 0 1 2 3; do
  timeout 300 mpirun -np 2 "$T" "${ARGS[@]}" --zero $z >"$tmp/two-$z.out" 2>&1 ||
    { echo "FAIL: 2 ranks, zero $z"; tail -20 "$tmp/two-$z.out"; fail=1; continue; }
  head -1 "$tmp/two-$z.out"
  grep -i nccl "$tmp/two-$z.out" | grep -v '^train_gpt2: backend' | head -2
  echo "1 rank : $(losses "$tmp/one.out" | tr '\n' ' ')"
  echo "2 ranks: $(losses "$tmp/two-$z.out" | tr '\n' ' ')"
  if paste <(losses "$tmp/one.out") <(losses "$tmp/two-$z.out") |
     awk 'NF != 2 { exit 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5) exit 1; n++ } END { exit n != 5 }'; then
    echo "ok: 2 ranks on one GPU, zero $z: losses equal the 1-rank run's within 1e-5"
  else
    echo "FAIL: 2 ranks on one GPU, zero $z: losses differ from the 1-rank run's"; fail=1
  fi
done
for f in "--param-dtype bf16" "--offload params,optimizer" "--param-dtype bf16 --offload params,optimizer --recompute layer"; do
  "$T" "${ARGS[@]}" --zero 3 $f >"$tmp/one-f.out" 2>&1 || { echo "FAIL: 1 rank --zero 3 $f"; fail=1; continue; }
  timeout 300 mpirun -np 2 "$T" "${ARGS[@]}" --zero 3 $f >"$tmp/two-f.out" 2>&1 ||
    { echo "FAIL: 2 ranks, --zero 3 $f"; tail -20 "$tmp/two-f.out"; fail=1; continue; }
  if paste <(losses "$tmp/one-f.out") <(losses "$tmp/two-f.out") |
     awk 'NF != 2 { exit 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5) exit 1; n++ } END { exit n != 5 }'; then
    echo "ok: 2 ranks on one GPU, --zero 3 $f: losses equal the 1-rank run's within 1e-5"
  else
    echo "FAIL: 2 ranks on one GPU, --zero 3 $f: losses differ from the 1-rank run's"; fail=1
    paste <(losses "$tmp/one-f.out") <(losses "$tmp/two-f.out")
  fi
done
p0=$(awk '/^PEAK_RANK 0 /{print $3}' "$tmp/two-0.out"); p1=$(awk '/^PEAK_RANK 0 /{print $3}' "$tmp/two-1.out")
params=$(sed -n 's/.*), \([0-9]*\) parameters,.*/\1/p' "$tmp/one.out")
echo "per-rank peak: zero 0 ${p0:-?}, zero 1 ${p1:-?} bytes; AdamW state 8 x ${params:-?} parameters"
if [[ -n $p0 && -n $p1 && -n $params ]] && ((p0 - p1 == 4 * params)); then
  echo "ok: zero 1 gives back half the AdamW state (4 x $params bytes) on each of 2 ranks"
else
  echo "FAIL: zero 1 saving $((${p0:-0} - ${p1:-0})) bytes, expected $((4 * ${params:-0}))"; fail=1
fi
exit $fail
