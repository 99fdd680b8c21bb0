# Shared by the tests/gpu/ scripts (sourced). The device machines have the CUDA toolkit and
# PyTorch but not the Debian -dev packages gpumem's recorder needs (sqlite3.h, libunwind,
# libdw), and nothing can be installed there. So each target is built there when it can be,
# and otherwise taken as tests/gpu/prepare.sh built it on a machine that has them (that build
# travels with the device call: `carry ["build-gpu"]`, BUILD=build-gpu), with the shared libraries the device lacks
# from $BUILD/gpu-libs.
#
# The PyTorch scripts (pytorch_three_ways, pytorch_frames, pytorch_parity) also run without a GPU,
# on the virtual GPU, in `make test` (gpu_or_sim below).
source "$(dirname "${BASH_SOURCE[0]}")/../pipe.bash" # grepq
BUILD=${BUILD:-build}
GPU_MAKE_LOG=${GPU_MAKE_LOG:-$BUILD/gpu-make.log}

# gpu_or_sim: where a PyTorch script of tests/gpu/ runs. On a machine whose `nvidia-smi -L` lists
# a GPU: that GPU, with ${PYTHON:-python3} (TARGET=gpu), skipped (77) when it has no PyTorch.
# Elsewhere, or with GPUMEM_GPU_TARGET=sim: the virtual GPU (TARGET=sim), through
# $BUILD/sim/torch-env with PyTorch's CUDA build from GPUMEM_TORCH_PY (tests/torch/common.bash:
# skipped, 77, when that is not installed or under SAN; the caller's GPUMEM_SIM_* and
# PYTORCH_CUDA_ALLOC_CONF are dropped). Kernels are skipped there: every allocation is PyTorch's
# real one, every value is 0. GPUMEM_GPU_TARGET=gpu skips (77) where there is no GPU.
# Sets TARGET, PY, ON (the command prefix that puts a Python program on the target: empty on a
# GPU) and REC_ON (the prefix for `gpumem record`, which finds the virtual GPU itself where no
# driver is usable).
gpu_or_sim() {
  local me want=${GPUMEM_GPU_TARGET:-auto}
  me=$(basename "$0")
  case $want in auto | gpu | sim) ;; *) echo "$me: GPUMEM_GPU_TARGET=$want: use gpu, sim or auto" >&2; exit 2 ;; esac
  if [[ $want != sim ]] && command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then
    TARGET=gpu PY=${PYTHON:-python3} ON=() REC_ON=()
    if ! "$PY" -c 'import torch' > /dev/null 2>&1; then
      echo "$me: $PY has no PyTorch (import torch failed); skipping" >&2
      exit 77
    fi
    return 0
  fi
  if [[ $want == gpu ]]; then
    echo "$me: no NVIDIA GPU here (nvidia-smi -L failed) and GPUMEM_GPU_TARGET=gpu; skipping" >&2
    exit 77
  fi
  TARGET=sim
  BUILD=${BUILD:-build}
  source tests/torch/common.bash # exits 77 without PyTorch or under SAN; sets torch_py, torch_env
  PY=$torch_py ON=("$torch_env") REC_ON=()
  # where a driver is usable, `gpumem record` would take it: put the virtual GPU first by hand
  [[ -e /dev/nvidiactl ]] && REC_ON=("$torch_env")
  echo "note: on the virtual GPU ($torch_env, $torch_py): kernels skipped, every allocation PyTorch's own"
}

# gpu_built FILE...: on the virtual GPU the tests run from `make test`'s build: 0 when each is
# there, else one FAIL line each (no make from inside a test).
gpu_built() {
  local f rc=0
  for f in "$@"; do [[ -e $f ]] || { echo "FAIL: $f is not built (make)"; rc=1; }; done
  return $rc
}

# gpu_make TARGET...: 0 when every target is built here or was prebuilt; one note line per
# prebuilt target used, one FAIL line per target neither.
gpu_make() {
  local t rc=0
  [[ -f $BUILD/.deps-ok ]] || { mkdir -p "$BUILD" && touch "$BUILD/.deps-ok"; } # no `make deps` there
  for t in "$@"; do
    if make -j"$(nproc)" "$t" >> "$GPU_MAKE_LOG" 2>&1; then continue; fi
    if [[ -f $BUILD/.gpu-prebuilt && -e $t ]]; then
      echo "note: $t: make failed here ($GPU_MAKE_LOG); using the one tests/gpu/prepare.sh built"
    else
      echo "FAIL: $t could not be built here, and tests/gpu/prepare.sh did not build it"
      rc=1
    fi
  done
  gpu_libs
  return $rc
}

# LD_LIBRARY_PATH gains the prebuilt shared libraries this machine does not have (only those:
# its own copies of the others stay in use, for its Python too).
gpu_libs() {
  [[ -d $BUILD/gpu-libs && -z ${GPU_LIBS_DIR:-} ]] || return 0
  GPU_LIBS_DIR=$(mktemp -d)
  local f n have
  have=$(ldconfig -p 2>/dev/null | awk '{ print $1 }')
  for f in "$BUILD"/gpu-libs/*; do
    n=$(basename "$f")
    grep -qxF "$n" <<< "$have" || ln -s "$(realpath "$f")" "$GPU_LIBS_DIR/$n"
  done
  if [[ -n $(ls -A "$GPU_LIBS_DIR") ]]; then
    echo "note: prebuilt libraries used: $(ls "$GPU_LIBS_DIR" | tr '\n' ' ')"
    export LD_LIBRARY_PATH=$GPU_LIBS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  export GPU_LIBS_DIR
}

# gpu_diff_prog PROG DIR: the differential-corpus program tests/diff/PROG.c built against the real
# CUDA runtime and run on the GPU (DIR/PROG.gpu, .gpu.err), and the same program as `make` built
# it for the virtual GPU ($BUILD/tests/diff/PROG, DIR/PROG.sim, .sim.err), each with as many
# devices as the GPU machine has and a 60 s bound. Sets GPU_RC and SIM_RC; 1 when it does not
# build against the real runtime.
gpu_diff_prog() {
  local p=$1 dir=$2 cuda=${CUDA_HOME:-/usr/local/cuda} ndev
  ndev=$(nvidia-smi -L | wc -l)
  gcc -std=gnu17 -O2 -Wall -I. -isystem "$cuda/include" -o "$dir/$p.bin" "tests/diff/$p.c" \
      -L"$cuda/lib64" -lcudart -ldl -lpthread -Wl,-rpath,"$cuda/lib64" || return 1
  GPUMEM_SIM_DEVICES=$ndev timeout 60 "$dir/$p.bin" > "$dir/$p.gpu" 2> "$dir/$p.gpu.err"
  GPU_RC=$?
  GPUMEM_SIM_DEVICES=$ndev GPUMEM_SIM_MEMORY=16G timeout 60 "$BUILD/tests/diff/$p" > "$dir/$p.sim" 2> "$dir/$p.sim.err"
  SIM_RC=$?
  rm -f "$dir/$p.bin"
}
