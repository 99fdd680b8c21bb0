#!/usr/bin/env bash
# The GPU checks' packaging (tests/gpu/prepare.sh + tests/gpu/common.bash), on a pretend device:
# where `make` fails (no -dev packages) and the shared libraries are missing (an empty ldconfig
# cache), gpu_make takes the prebuilt targets, gpu_libs puts the copied libraries first on
# LD_LIBRARY_PATH, and gpumem runs from them; a target nobody built fails.
set -uo pipefail
source "$(dirname "$0")/../pipe.bash" # grepq
BUILD=${BUILD:-build}
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ -n ${SAN:-} ]] && { echo "skipped: packaging of the plain build only" >&2; exit 77; }
[[ -x $BUILD/gpumem && -f $BUILD/libgpumem.so ]] || { echo "skipped: gpumem not built" >&2; exit 77; }
BUILD="$BUILD" bash tests/gpu/prepare.sh > /dev/null || fail "prepare.sh"
[[ -f $BUILD/.gpu-prebuilt && -f $BUILD/gpu-libs/libsqlite3.so.0 ]] || fail "prepare.sh did not mark the build or copy libsqlite3"
ls "$BUILD"/gpu-libs | grepq -E '^(libc|libcuda|libcudart)\.so' && fail "C or CUDA libraries were copied"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir "$TMP/bin"
printf '#!/bin/sh\nexit 2\n' > "$TMP/bin/make"
printf '#!/bin/sh\necho "0 libs found in cache"\n' > "$TMP/bin/ldconfig"
chmod +x "$TMP/bin/make" "$TMP/bin/ldconfig"
out=$(PATH=$TMP/bin:$PATH GPU_MAKE_LOG=$TMP/make.log BUILD=$BUILD bash -c '
  source tests/gpu/common.bash
  gpu_make "$BUILD/libgpumem.so" "$BUILD/gpumem" || exit 1
  ldd "$BUILD/gpumem" | grep -F "libsqlite3.so.0 => $GPU_LIBS_DIR/" || exit 2
  "$BUILD/gpumem" --version || exit 3
  gpu_make "$BUILD/no-such-target" && exit 4
  exit 0' 2>&1) || fail "on the pretend device (exit $?): $out"
grep -q "note: $BUILD/libgpumem.so: make failed here" <<< "$out" || fail "no note that the prebuilt library is used: $out"
grep -q "^gpumem .*(database schema" <<< "$out" || fail "gpumem did not run from the prebuilt libraries: $out"
grep -q "FAIL: $BUILD/no-such-target" <<< "$out" || fail "a target nobody built does not fail: $out"
echo "ok: the pretend device took the prebuilt gpumem and libgpumem.so, and $(ls "$BUILD"/gpu-libs | wc -l) libraries from $BUILD/gpu-libs"
