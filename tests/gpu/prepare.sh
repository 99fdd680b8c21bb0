#!/usr/bin/env bash
# tests/gpu/prepare.sh — run HERE, on a machine with the Debian packages (no GPU needed), right
# before the device call. Builds what the tests/gpu/ scripts use, and only that, into its own
# build folder (BUILD, build-gpu unless set: about 25 MiB, where a whole build with the
# sanitizer builds and fuzzers is far over the device call's 64 MiB), copies the shared
# libraries they load that are not part of the C library or CUDA into $BUILD/gpu-libs, and marks
# the build as prebuilt ($BUILD/.gpu-prebuilt), so that on the device (CUDA toolkit and PyTorch,
# no -dev packages, no network) a target that cannot be built there is taken from here
# (tests/gpu/common.bash), and records the GPT-2 script's figures on the virtual GPU's h200 profile
# into $BUILD/gpu-twin (tests/gpu/torch_twin.sh --record). Then, with the device tool:
#   run(command="BUILD=build-gpu bash tests/gpu/run.sh 2>&1 | tee $OUT/gpu.log",
#       carry=["build-gpu"], timeout_s=580)
# The binaries need glibc <= this machine's (Debian 12: 2.36); the device's is newer.
set -euo pipefail
BUILD=${BUILD:-build-gpu}
export BUILD
targets=("$BUILD/libgpumem.so" "$BUILD/gpumem" "$BUILD/alloc/gpumem-replay" "$BUILD/sim/libcuda.so.1"
  "$BUILD/sim/torch-env" "$BUILD/sim/libcudart.so.13" "$BUILD/sim/libcublas.so.13" "$BUILD/sim/libcublasLt.so.13"
  "$BUILD/sim/libnvidia-ml.so.1" "$BUILD/train_gpt2" "$BUILD/train_gpt2_sim" "$BUILD/tests/apps/real_rt_app"
  "$BUILD/tests/torch/abort_stacks.so")
for src in tests/diff/*.c; do targets+=("$BUILD/tests/diff/$(basename "$src" .c)"); done
# the PyTorch trace tracker, where this machine builds it (preload/module.mk)
make -n "$BUILD/libgpumem_torch.so" > /dev/null 2>&1 && targets+=("$BUILD/libgpumem_torch.so")
make -j"$(nproc)" BUILD="$BUILD" "${targets[@]}"
rm -rf "$BUILD/gpu-libs"
mkdir -p "$BUILD/gpu-libs"
# train_gpt2 and real_rt_app are left out: nvcc builds them on the device (this build of the
# trainer links this machine's Open MPI, which the device does not have)
for elf in "$BUILD/libgpumem.so" "$BUILD/gpumem" "$BUILD/alloc/gpumem-replay" "$BUILD/train_gpt2_sim"; do
  ldd "$elf" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libgcc_s.so* | libstdc++.so* | \
      libcuda.so* | libcudart.so* | libcublas* | libnvidia*) continue ;;
  esac
  cp -L "$lib" "$BUILD/gpu-libs/"
done
touch "$BUILD/.gpu-prebuilt"
# the GPT-2 script's figures on the virtual GPU's h200, in case the device's PyTorch cannot run on
# it there (tests/gpu/torch_twin.sh)
rc=0
bash tests/gpu/torch_twin.sh --record || rc=$?
[[ $rc -eq 0 || $rc -eq 77 ]] || { echo "tests/gpu/torch_twin.sh --record failed" >&2; exit 1; }
tree_kib=$(git ls-files -z | xargs -0 du -ck 2>/dev/null | tail -1 | cut -f1)
build_kib=$(du -sk "$BUILD" | cut -f1)
echo "prebuilt: $(ls "$BUILD/gpu-libs" | tr '\n' ' ')"
echo "travels: tree ${tree_kib} KiB + $BUILD ${build_kib} KiB (the device call's limit: 65536 KiB)"
if (( tree_kib + build_kib >= 65536 )); then
  if [[ $BUILD == build-gpu ]]; then
    echo "warning: too large to travel; rm -rf $BUILD and run this again (it builds only what tests/gpu needs)" >&2
  else
    echo "warning: too large to travel; run this with a build folder of its own (BUILD=build-gpu, the default), which holds only what tests/gpu needs" >&2
  fi
fi
echo "next: run(command=\"BUILD=$BUILD bash tests/gpu/run.sh 2>&1 | tee \$OUT/gpu.log\", carry=[\"$BUILD\"], timeout_s=580)"
