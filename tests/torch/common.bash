# common.bash — sourced by the tests in tests/torch/: finds PyTorch's CUDA build and the virtual
# GPU's environment, or skips (exit 77) saying why.
#
# GPUMEM_TORCH_PY names the PyTorch installation: a virtual environment's folder (its
# bin/python is used) or a Python interpreter. Default: /root/.cache/gpumem/torch-2.14.1, where
# `make deps` installs torch==2.14.1 (CUDA 13). Tests skip only when that has no torch.
source "$(dirname "${BASH_SOURCE[0]}")/../pipe.bash" # grepq
build=${BUILD:-build}
torch_py=${GPUMEM_TORCH_PY:-/root/.cache/gpumem/torch-2.14.1}
[[ -d $torch_py ]] && torch_py=$torch_py/bin/python
if [[ ! -x $torch_py ]]; then
  echo "$(basename "$0"): no PyTorch at $torch_py (GPUMEM_TORCH_PY; make deps installs it); skipped" >&2
  exit 77
fi
if [[ -n ${SAN:-} ]]; then
  echo "$(basename "$0"): skipped under SAN=$SAN (an uninstrumented Python cannot load instrumented libraries)" >&2
  exit 77
fi
torch_env=$build/sim/torch-env
[[ -x $torch_env ]] || { echo "$(basename "$0"): $torch_env missing: run make" >&2; exit 1; }
# The scripts' own settings only: a caller's GPUMEM_SIM_* or allocator config would change what
# is checked.
unset GPUMEM_SIM_PROFILE GPUMEM_SIM_MEMORY GPUMEM_SIM_BACKING GPUMEM_SIM_KERNELS GPUMEM_SIM_STATS \
      GPUMEM_SIM_ASYNC GPUMEM_SIM_DEVICES PYTORCH_CUDA_ALLOC_CONF
# every script's gpumem, and its scratch folder (removed at exit)
G=$build/gpumem
[[ -x $G ]] || { echo "$(basename "$0"): $G is not built: run make" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
# torch_run [ENV=VALUE...] -- ARGS...: the interpreter on the virtual GPU (build/sim/torch-env)
torch_run() {
  local envs=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$torch_env" "$torch_py" "$@"
}
# torch_serve [ENV=VALUE...]: the runs of torch_fork, forked from one interpreter on the virtual GPU
# that imported torch once (tests/torch/forkrun.py --serve; 2-3 s of CPU saved a run). For runs
# that only measure: a child under `gpumem record` would be a process of its own, with its own
# database. It ends when the script does (its stdin closes): a bare `wait` would wait for it too,
# so start it after one.
torch_serve() {
  mkfifo "$tmp/serve.req" "$tmp/serve.rep"
  torch_run "$@" -- tests/torch/forkrun.py --serve "$tmp" < "$tmp/serve.req" > "$tmp/serve.rep" 2> "$tmp/serve.err" &
  exec {serve_w}> "$tmp/serve.req" {serve_r}< "$tmp/serve.rep"
}
# torch_fork NAME CONF ARGS...: runs ARGS (a script and its arguments, -m MODULE ARGS, or
# train_gpt2.py's arguments; no white space inside one) with PYTORCH_CUDA_ALLOC_CONF=CONF (handed
# to torch's parser as at start-up) in a child of torch_serve's interpreter; its stdout in
# $tmp/NAME.out, its stderr in $tmp/NAME.err; its exit status (1 when the server is gone)
torch_fork() {
  local name=$1 conf=$2 st
  shift 2
  (echo "$name|$conf|$*" >&"$serve_w") 2> /dev/null || return 1
  read -r st <&"$serve_r" || return 1
  return "$st"
}
