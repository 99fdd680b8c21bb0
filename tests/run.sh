#!/usr/bin/env bash
# The test driver behind `make test`: runs every cmocka binary and every script test, shows
# each one's own output (cmocka prints its summary per binary), and ends with one line
# "N passed, N failed" counting the programs. Exit status 1 if anything failed.
#
# Script tests are run with BUILD and SAN in the environment and from the repository root;
# exit 0 = pass, 77 = skipped (with a reason on stderr), anything else = fail. Each program
# runs under a timeout (TEST_TIMEOUT seconds, default 600).
set -uo pipefail
build=build san= unit= scripts=
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --san) san=$2; shift 2 ;;
    --unit) unit=$2; shift 2 ;;
    --scripts) scripts=$2; shift 2 ;;
    *) echo "tests/run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
export BUILD=$build SAN=$san
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:verify_asan_link_order=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1}
pass=0 fail=0 skip=0 failed=() times=()
run_one() { # name, command...
  local name=$1; shift
  echo "=== $name"
  # A hung test fails (exit 124) instead of stalling the whole suite.
  local t0=$SECONDS
  timeout --kill-after=10 "${TEST_TIMEOUT:-600}" "$@"; local rc=$?
  times+=("$((SECONDS - t0)) $name")
  [[ $rc -eq 124 || $rc -eq 137 ]] && echo "--- timed out after ${TEST_TIMEOUT:-600} s: $name"
  if [[ $rc -eq 0 ]]; then pass=$((pass + 1))
  elif [[ $rc -eq 77 ]]; then skip=$((skip + 1)); echo "--- skipped: $name"
  else fail=$((fail + 1)); failed+=("$name (exit $rc)"); echo "--- FAILED: $name (exit $rc)"
  fi
}
for t in $unit; do run_one "$t" "$t"; done
for s in $scripts; do run_one "$s" bash "$s"; done
echo
if [[ ${#failed[@]} -gt 0 ]]; then printf 'failed: %s\n' "${failed[@]}"; fi
# where the suite's time goes (wall seconds, the five longest)
printf '%s\n' "${times[@]}" | sort -rn | head -5 | awk '{ s = s (NR > 1 ? ", " : "") $2 " " $1 " s" } END { print "slowest: " s }'
echo "$pass passed, $fail failed, $skip skipped"
[[ $fail -eq 0 ]]
