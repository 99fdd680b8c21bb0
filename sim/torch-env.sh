#!/usr/bin/env bash
# torch-env — run a CUDA program (PyTorch's CUDA build) on the virtual GPU; installed as
# build/sim/torch-env next to the libraries it names.
#
#   build/sim/torch-env python3 train.py ...   run it with the environment below
#   build/sim/torch-env --preload              print the libraries to preload, in order
#   build/sim/torch-env --print                print the environment as shell assignments
#
# The environment (sim/README.md, "PyTorch on the virtual GPU"):
#   LD_PRELOAD  the caller's own preloads first (an interposer such as libgpumem.so must come
#               before the runtime it interposes), then the virtual driver libcuda.so.1, the
#               virtual runtime libcudart.so.13, the stand-ins libcublasLt.so.13 and
#               libcublas.so.13, and NVML's, libnvidia-ml.so.1 (PyTorch's expandable segments
#               query it). Preloading is the only way in: PyTorch's wheels find their CUDA
#               libraries through DT_RPATH, which outranks LD_LIBRARY_PATH, and a preloaded
#               library with the same soname satisfies their DT_NEEDED.
#   GPUMEM_SIM_PROFILE  h100-80g unless set (the device PyTorch sees; sim/README.md lists them).
#   TRITON_LIBCUDA_PATH  this folder unless set: Triton (torch.compile) links its launcher against
#               the libcuda.so.1 that ldconfig knows, which is the real driver or none.
set -euo pipefail
dir=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
libs=(libcuda.so.1 libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libnvidia-ml.so.1)
preload=
for l in "${libs[@]}"; do
  if [[ ! -f $dir/$l ]]; then
    echo "torch-env: $dir/$l is missing; build the virtual GPU first (make)" >&2
    exit 2
  fi
  preload+=${preload:+:}$dir/$l
done
profile=${GPUMEM_SIM_PROFILE:-h100-80g}
case ${1:-} in
--preload)
  echo "$preload"
  exit 0
  ;;
--print)
  printf 'LD_PRELOAD=%q\n' "${LD_PRELOAD:+$LD_PRELOAD:}$preload"
  printf 'GPUMEM_SIM_PROFILE=%q\n' "$profile"
  printf 'TRITON_LIBCUDA_PATH=%q\n' "${TRITON_LIBCUDA_PATH:-$dir}"
  exit 0
  ;;
"" | -h | --help)
  sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  [[ -n ${1:-} ]] && exit 0
  exit 2
  ;;
esac
export LD_PRELOAD=${LD_PRELOAD:+$LD_PRELOAD:}$preload
export GPUMEM_SIM_PROFILE=$profile
export TRITON_LIBCUDA_PATH=${TRITON_LIBCUDA_PATH:-$dir}
exec "$@"
