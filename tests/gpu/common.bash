# Shared by the tests/gpu/ scripts (sourced). The device machines have the CUDA toolkit and
# PyTorch but not the Debian -dev packages gpumem's recorder needs (sqlite3.h, libunwind,
# libdw), and nothing can be installed there. So each target is built there when it can be,
# and otherwise taken as tests/gpu/prepare.sh built it on a machine that has them (that build
# travels with the device call: `carry ["build"]`), with the shared libraries the device lacks
# from $BUILD/gpu-libs.
BUILD=${BUILD:-build}
[[ -f $BUILD/.deps-ok ]] || { mkdir -p "$BUILD" && touch "$BUILD/.deps-ok"; } # no `make deps` there
GPU_MAKE_LOG=${GPU_MAKE_LOG:-$BUILD/gpu-make.log}

# gpu_make TARGET...: 0 when every target is built here or was prebuilt; one note line per
# prebuilt target used, one FAIL line per target neither.
gpu_make() {
  local t rc=0
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
