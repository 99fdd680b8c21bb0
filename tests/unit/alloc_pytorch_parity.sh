#!/usr/bin/env bash
# The GPU check against PyTorch (tests/gpu/pytorch_parity.{sh,py}) cannot run here; this keeps it
# honest in `make test`: both files parse, and its snapshot converter, on a hand-made PyTorch
# snapshot, gives the expected trace, which replays with the held free (no GPU, no torch).
set -uo pipefail
BUILD=${BUILD:-build}
fail() { echo "FAIL: $*" >&2; exit 1; }
bash -n tests/gpu/pytorch_parity.sh || fail "tests/gpu/pytorch_parity.sh does not parse"
bash -n tests/gpu/run.sh || fail "tests/gpu/run.sh does not parse"
bash -n tests/gpu/pytorch_three_ways.sh || fail "tests/gpu/pytorch_three_ways.sh does not parse"
command -v python3 >/dev/null || { echo "skip: no python3"; exit 0; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/parity-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
python3 -c "import py_compile,sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)" \
  tests/gpu/pytorch_parity.py "$tmp/p.pyc" || fail "tests/gpu/pytorch_parity.py does not compile"
python3 -c "import py_compile,sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)" \
  tests/gpu/pytorch_three_ways.py "$tmp/t.pyc" || fail "tests/gpu/pytorch_three_ways.py does not compile"
python3 tests/gpu/pytorch_parity.py selftest --replay "$BUILD/alloc/gpumem-replay" || fail "selftest"
echo "all checks passed"
