#!/usr/bin/env bash
# sim_symbols.sh — the virtual GPU's libraries export what programs and the interposer need,
# under the names the real libraries use, and the runtime has no link-time dependency on the
# driver (it must reach it through dlopen + cuGetProcAddress_v2). Run by `make test` from the
# repository root with BUILD set.
set -euo pipefail
build=${BUILD:-build}
drv=$build/sim/libcuda.so.1 rt=$build/sim/libcudart.so.13
fail=0
if ! command -v nm >/dev/null; then echo "sim_symbols.sh: nm (binutils) not found" >&2; exit 77; fi
for f in "$drv" "$rt"; do
  [[ -f $f ]] || { echo "sim_symbols.sh: $f is missing: run make first" >&2; exit 1; }
done
defined() { nm -D --defined-only "$1" | awk '{print $3}' | sed 's/@.*//'; }
want() { # library, symbols...
  local lib=$1; shift
  local have; have=$(defined "$lib")
  for s in "$@"; do
    if ! grep -qx "$s" <<<"$have"; then echo "FAIL: $lib does not export $s"; fail=1; fi
  done
}
want "$drv" cuInit cuGetProcAddress cuGetProcAddress_v2 cuMemCreate cuMemMap cuMemUnmap cuMemRelease \
  cuMemSetAccess cuMemAddressReserve cuMemAddressFree cuMemAlloc_v2 cuMemFree_v2 cuMemAllocAsync \
  cuMemFreeAsync cuMemGetInfo_v2 cuMemGetAddressRange_v2 cuLaunchKernel cuFuncGetParamInfo \
  cuGetExportTable cuGetErrorString cuGetErrorName sim_register_kernel sim_stats_get sim_stats_reset \
  sim_set_event_delay sim_faults_set
want "$rt" cudaMalloc cudaFree cudaMallocAsync cudaFreeAsync cudaMallocFromPoolAsync cudaMemcpy \
  cudaMemcpyAsync cudaMemset cudaStreamCreate cudaEventRecord cudaMallocHost cudaHostAlloc \
  cudaFreeHost cudaMallocManaged cudaMemGetInfo cudaGetDeviceProperties cudaGetLastError \
  cudaGetDriverEntryPoint cudaGetDriverEntryPointByVersion __cudaRegisterFatBinary \
  __cudaPushCallConfiguration
# The runtime's symbols carry the real version node, so toolkit-linked programs bind to them.
rt_syms=$(nm -D --defined-only "$rt")
if ! grep -q ' cudaMalloc@@libcudart.so.13$' <<<"$rt_syms"; then
  echo "FAIL: $rt: cudaMalloc is not versioned libcudart.so.13"; fail=1
fi
undef=$(nm -D --undefined-only "$rt" | grep ' cu[A-Z]' || true)
if [[ -n $undef ]]; then echo "FAIL: $rt needs driver symbols at link time:"; echo "$undef"; fail=1; fi
# Only the API is exported: no internal helper leaks out of the driver.
leaked=$(defined "$drv" | grep -vE '^(cu[A-Z]|sim_)' || true)
internal=$(defined "$drv" | grep -E '^sim_(pset_.*|range_.*|lock|unlock|charge|uncharge|cost|note|unsupported|ensure_config|now_ms|parse_size|fault_map|stream_valid)$' || true)
if [[ -n $leaked$internal ]]; then echo "FAIL: $drv exports internals: $leaked $internal"; fail=1; fi
for lib in "$drv" "$rt"; do
  soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
  [[ $soname == "$(basename "$lib")" ]] || { echo "FAIL: $lib has soname '$soname'"; fail=1; }
done
[[ $fail -eq 0 ]] && echo "sim_symbols.sh: exports, versions, sonames and the runtime's driver independence are as required"
exit $fail
