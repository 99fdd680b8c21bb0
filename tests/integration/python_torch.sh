#!/usr/bin/env bash
# gpumem.annotate(model) with PyTorch (the CUDA build `make deps` installs, its CPU ops here): a
# small nn.Module whose forward (and an autograd Function's backward) allocate device
# memory through ctypes. The recording has ranges fwd/<module path> and bwd/<module path>,
# nested as the modules are, all closed; each allocation lands in the range of the module that
# made it; the report's phase table shows the module paths; call sites are the user's lines
# (torch's own frames skipped). Twice: the allocations through ctypes.PyDLL (the GIL held) and
# through ctypes.CDLL (the GIL released around the call, as PyTorch's ops release it): the same
# call sites, and the backward's allocation, made under autograd's C++ engine, carries the whole
# Python stack up to the user's loss.backward() line. Skips (77) when torch cannot be imported.
source tests/integration/snapshot_common.bash
need "$GPUMEM"
# PyTorch's CUDA build from the venv `make deps` makes (GPUMEM_TORCH_PY: its python or its folder)
PY=${GPUMEM_TEST_PYTHON:-${GPUMEM_TORCH_PY:-$HOME/.cache/gpumem/torch-2.14.1/bin/python}}
[[ -d $PY ]] && PY=$PY/bin/python
[[ -x $PY ]] || { echo "skipped: no $PY (make deps installs PyTorch there; or set GPUMEM_TEST_PYTHON)" >&2; exit 77; }
if ! "$PY" -c 'import torch' 2> /dev/null; then
  echo "skipped: $PY cannot import torch (make deps installs it)" >&2
  exit 77
fi
# Under SAN=address, LeakSanitizer reports what libtorch_python never frees at exit (none of it
# gpumem's; gpumem's own leaks are the C tests' business): not this test's verdict.
[[ ${SAN:-} == address ]] && export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
SRC=$PWD/tests/integration/py
RT=$(cd "$BUILD/sim" && pwd)/libcudart.so.13
export PYTHONPATH=$PWD/preload/python
q() { "$GPUMEM" sql "$1" -c "$2" | tail -n +2; }
line() { grep -n "# SITE:$1\$" "$SRC/torch_annotate.py" | cut -d: -f1; }

for mode in gil nogil; do
  db=$TMP/t-$mode.db
  "$GPUMEM" record -q -o "$db" -- "$PY" "$SRC/torch_annotate.py" "$RT" 2 "$mode" > "$db.out" 2> "$db.err" \
    || { cat "$db.out" "$db.err"; fail "($mode) torch_annotate.py under gpumem failed"; }
  grep -q "torch_annotate: done" "$db.out" || fail "($mode) torch_annotate.py did not finish"

  # ranges by module path, every module, both directions where autograd reaches
  names=$(q "$db" "SELECT DISTINCT s.s FROM ranges r JOIN strings s ON s.id = r.name ORDER BY 1" | tr '\n' ' ')
  for want in fwd/Net fwd/blocks.0 fwd/blocks.1 fwd/blocks.0.mlp fwd/blocks.0.mlp.fc fwd/blocks.0.mlp.proj \
              fwd/blocks.0.norm fwd/head bwd/Net bwd/blocks.0 bwd/blocks.1.mlp bwd/head; do
    [[ " $names" == *" $want "* ]] || fail "($mode) no range named $want (have: $names)"
  done
  [[ $(q "$db" "SELECT count(*) FROM ranges WHERE end_ns IS NULL") -eq 0 ]] || fail "($mode) ranges left open"
  # each allocation in the range of the module that made it (2 steps x 2 blocks each)
  check() { # name phase-pattern count
    local n
    n=$(q "$db" "SELECT count(*) FROM allocations WHERE name = '$1' AND phase GLOB '$2'")
    [[ $n -eq $3 ]] || fail "($mode) $1: $n allocations in phases '$2', expected $3 ($(q "$db" "SELECT group_concat(DISTINCT phase) FROM allocations WHERE name = '$1'"))"
  }
  check mlp.hidden 'step [01]/fwd/Net/fwd/blocks.[01]/fwd/blocks.[01].mlp' 4
  check block.norm 'step [01]/fwd/Net/fwd/blocks.[01]' 4
  check mlp.grad 'step [01]/bwd/Net/bwd/blocks.[01]/bwd/blocks.[01].mlp' 4
  # the path of the module matches the block's own allocation, not its neighbour's
  [[ $(q "$db" "SELECT count(*) FROM allocations WHERE name = 'mlp.hidden' AND phase GLOB '*blocks.0/fwd/blocks.1*'") -eq 0 ]] \
    || fail "($mode) an allocation of blocks.1 landed in blocks.0"

  "$GPUMEM" report "$db" > "$db.r.txt" || fail "($mode) report failed"
  for want in "step */fwd/Net/fwd/blocks.0/fwd/blocks.0.mlp" "step */fwd/Net/fwd/blocks.1" \
              "step */bwd/Net/bwd/blocks.1/bwd/blocks.1.mlp"; do
    grep -qF -- "$want" "$db.r.txt" || { cat "$db.r.txt"; fail "($mode) the report's phase table lacks $want"; }
  done
  # call sites: the user's lines; torch's frames (module.py's _call_impl) are skipped
  grep -qF "torch_annotate.py:$(line device_alloc) in device_alloc < torch_annotate.py:$(line mlp_forward) in forward" "$db.r.txt" \
    || { cat "$db.r.txt"; fail "($mode) call site of the MLP's allocation not named by the user's lines"; }
  grep -q "module.py" "$db.r.txt" && fail "($mode) a frame of torch's own module.py shown by default"
  # the backward's allocation: its Python frames run from Grad.backward up to loss.backward()
  # (torch's own Python in between), across the C++ engine that called back into Python
  s=$(q "$db" "SELECT stack FROM allocations WHERE name = 'mlp.grad' LIMIT 1")
  got=$(q "$db" "SELECT group_concat(function || ':' || line, ' ') FROM (SELECT function, line FROM stack_frames WHERE stack = $s AND python = 1 AND file LIKE '%torch_annotate.py' ORDER BY depth)")
  want="device_alloc:$(line device_alloc) backward:$(line grad_backward) <module>:$(line loss_backward)"
  [[ $got == "$want" ]] || fail "($mode) the backward allocation's user frames: '$got', expected '$want'"
  [[ $(q "$db" "SELECT count(*) FROM stack_frames WHERE stack = $s AND python = 1 AND file LIKE '%/torch/%'") -gt 0 ]] \
    || fail "($mode) no frame of torch's own Python between backward and loss.backward()"
  echo "python_torch: $mode ok"
done

# gpumem finds its own Python files (the module, the sitecustomize that turns the hooks on) from
# wherever it was built: build/gpumem, and a sanitizer's build/san-address/gpumem (it looked in
# build/san-address/../preload/python, and PyTorch was then recorded by its segments only)
db=$TMP/own.db
env -u PYTHONPATH "$GPUMEM" record -o "$db" -- "$PY" -c 'import gpumem, sitecustomize; print(gpumem.__file__)' \
  > "$db.out" 2> "$db.err" || { cat "$db.out" "$db.err"; fail "record of a Python one-liner failed"; }
grep -q "neither in" "$db.err" && { cat "$db.err"; fail "$GPUMEM did not find gpumem's Python files"; }
grep -q "^$PWD/preload/python/gpumem/" "$db.out" || { cat "$db.out" "$db.err"; fail "the program imported another gpumem module"; }
echo "python_torch: ok"
