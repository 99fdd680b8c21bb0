#!/usr/bin/env bash
# test_scripts_lint.sh — the test scripts themselves: no `cmd | grep -q` (under pipefail it fails
# at random when cmd is still writing as grep -q exits; use grepq from tests/pipe.bash), and every
# script that calls grepq can reach its definition.
set -uo pipefail
cd "$(dirname "$0")/../.."
bad=0
hits=$(grep -rnE '\|[[:space:]]*grep[[:space:]]+-[a-zA-Z]*q' tests --include=*.sh --include=*.bash | grep -v -e '^tests/pipe.bash:' -e '^tests/unit/test_scripts_lint.sh:')
if [[ -n $hits ]]; then
  echo "FAIL: '| grep -q' in test scripts (use grepq, tests/pipe.bash):"; echo "$hits"; bad=1
fi
# the same flaw one stage earlier: `cmd | head -1 | ...` (head exits after a line; use sed -n 1p)
hits=$(grep -rnE '^[^#]*\|[[:space:]]*head[^|)]*\|' tests --include=*.sh --include=*.bash | grep -v -e '^tests/unit/test_scripts_lint.sh:')
if [[ -n $hits ]]; then
  echo "FAIL: '| head ... |' mid-pipeline in test scripts (use sed -n 1p, which reads its whole input):"; echo "$hits"; bad=1
fi
n=0
for f in $(grep -rlw grepq tests --include=*.sh --include=*.bash); do
  [[ $f == tests/pipe.bash || $f == tests/unit/test_scripts_lint.sh ]] && continue
  n=$((n + 1))
  # a source line of pipe.bash or a common file that sources it, before the first call (a
  # source inside a quoted `bash -c` further down does not count for the lines above it)
  first_src=$(awk '/^[[:space:]]*(source|\.)[[:space:]].*(pipe|common)\.bash/ {print NR; exit}' "$f")
  first_use=$(awk '!/^[[:space:]]*#/ && /(^|[^[:alnum:]_])grepq([^[:alnum:]_]|$)/ && !/^[[:space:]]*grepq\(\)/ {print NR; exit}' "$f")
  if [[ -z $first_src ]]; then
    echo "FAIL: $f calls grepq but sources neither tests/pipe.bash nor a common file that does"; bad=1
  elif [[ -n $first_use && $first_use -lt $first_src ]]; then
    echo "FAIL: $f calls grepq on line $first_use, before it sources pipe.bash or a common file (line $first_src)"; bad=1
  fi
done
for c in tests/integration/e2e_common.bash tests/integration/snapshot_common.bash tests/torch/common.bash tests/gpu/common.bash; do
  grep -q 'pipe.bash' "$c" || { echo "FAIL: $c does not source tests/pipe.bash"; bad=1; }
done
# the property itself: a writer that keeps writing after the match passes under pipefail
source tests/pipe.bash
( set -o pipefail; seq 1 2000000 | grepq -x 5 ) || { echo "FAIL: grepq under pipefail with a long writer"; bad=1; }
( set -o pipefail; seq 1 10 | grepq -x 11 ) && { echo "FAIL: grepq matched what is not there"; bad=1; }
( set -o pipefail; { seq 1 10; false; } | grepq -x 5 ) && { echo "FAIL: grepq hid the writer's failure"; bad=1; }
[[ $bad == 0 ]] && echo "ok: no '| grep -q' in the test scripts; $n scripts use grepq, each reaches it; grepq drains, fails on no match and on the writer's failure"
exit $bad
