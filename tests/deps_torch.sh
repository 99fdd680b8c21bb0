#!/usr/bin/env bash
# PyTorch's CUDA build, pinned, in a virtual environment OUTSIDE the clone (behind `make deps`).
#
# Where: $GPUMEM_TORCH_VENV, default ~/.cache/gpumem/torch-<version> (XDG_CACHE_HOME honoured).
# Several GB: it is made once per machine, and every clone on that machine (CI's fresh one
# included) finds it there and downloads nothing. pip's own cache is left where pip keeps it.
# What it holds: torch==$GPUMEM_TORCH_VERSION from PyPI with its nvidia-* wheels (CUDA 13:
# libcudart.so.13, cuBLAS 13, cuDNN 9, NCCL). The tests read $GPUMEM_TORCH_PY (the venv's
# python, exported by the Makefile); where it cannot be had (offline, no python3 venv), they
# skip with one line naming this script. GPUMEM_TORCH=off: do not install it.
set -uo pipefail
version=${GPUMEM_TORCH_VERSION:?set by the Makefile}
venv=${GPUMEM_TORCH_VENV:?set by the Makefile}
py=$venv/bin/python
[[ ${GPUMEM_TORCH:-on} == off ]] && exit 0

# torch at the pinned version, built for CUDA 13 (its runtime wheel is what the virtual GPU's
# libcudart.so.13 stands in for)
ok() {
  "$py" - "$version" 2> /dev/null << 'EOF'
import re, sys, importlib.metadata as md
v = md.version("torch")
req = md.requires("torch") or []
# the CUDA 13 wheel requires cuda-toolkit[...cudart...]==13.x (a CUDA 12 one: nvidia-*-cu12)
cuda13 = any(re.match(r"cuda-toolkit\[.*cudart.*\]==13\.", r) for r in req)
sys.exit(0 if v.split("+")[0] == sys.argv[1] and cuda13 else 1)
EOF
}
ok && exit 0

base=/usr/bin/python3
[[ -x $base ]] || base=$(command -v python3 || true)
if [[ -z $base ]]; then
  echo "gpumem: no python3; the PyTorch tests will skip" >&2
  exit 0
fi
echo "gpumem: installing torch==$version (CUDA build, several GB, once per machine) into $venv" >&2
mkdir -p "$(dirname "$venv")" || exit 0
log=$venv.log
if ! { [[ -x $py ]] || "$base" -m venv "$venv"; } > "$log" 2>&1; then
  echo "gpumem: cannot make a virtual environment at $venv (see $log; Debian: apt-get install" \
       "python3-venv); the PyTorch tests will skip" >&2
  exit 0
fi
if ! "$py" -m pip install --no-input --disable-pip-version-check "torch==$version" >> "$log" 2>&1; then
  echo "gpumem: pip could not install torch==$version into $venv: $(tail -1 "$log")" >&2
  echo "gpumem: the PyTorch tests will skip (full log: $log)" >&2
  exit 0
fi
if ! ok; then
  echo "gpumem: $venv has torch $("$py" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)," \
       "not the CUDA 13 build of $version; the PyTorch tests will skip" >&2
  exit 0
fi
echo "gpumem: torch==$version is in $venv" >&2
