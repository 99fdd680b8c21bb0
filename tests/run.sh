#!/usr/bin/env bash
# The test driver behind `make test`: runs every cmocka binary and every script test, shows
# each one's own output (cmocka prints its summary per binary), and ends with one line
# "N passed, N failed, N skipped" counting the programs, after the failing lines of each program
# that failed (its FAIL lines and its last lines, so that the tail of a CI log says why). Exit
# status 1 if anything failed.
#
# Script tests are run with BUILD and SAN in the environment and from the repository root;
# exit 0 = pass, 77 = skipped (with a reason on stderr), anything else = fail. Each program
# runs under a timeout (TEST_TIMEOUT seconds, default 600).
#
# TEST_JOBS programs run at once (default: the number of CPUs; 1 runs them one after the
# other, as before). Each gets its own TMPDIR, so their scratch files never meet; each one's
# output is kept and printed whole, in list order, when it ends, so the log reads the same
# whatever the order in which they started or finished. Tests that time something themselves
# bound it generously enough for a loaded machine (they already run with every core busy in CI).
#
# They start longest first, by the wall seconds each took in the last run with the same --san
# (kept in GPUMEM_TEST_TIMES, default ~/.cache/gpumem/test-times; every clone on the machine
# shares it, as it shares PyTorch's venv): in list order, a long test that starts last leaves
# the other cores idle while it ends (13 s of the ASan stage's 546 s at stop 77). Programs the
# file does not know start first, in list order (a new test may be long); without the file the
# order is the list's.
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
# The product's settings a user may have exported (GPUMEM_SIM_BACKING=virtual makes the virtual
# GPU's copy tests fault and hang; GPUMEM_CONF, GPUMEM_LIMIT, PYTORCH_CUDA_ALLOC_CONF change what
# every test measures) are not the tests': each test sets what it runs with. Kept: the harness's
# own inputs (where PyTorch is, which Python, ccache, the fuzz, bench and GPU scripts' knobs).
while IFS='=' read -r var _; do
  case $var in
    GPUMEM_TORCH_PY | GPUMEM_TORCH_VENV | GPUMEM_TORCH_VERSION | GPUMEM_TEST_PYTHON | GPUMEM_CCACHE) ;;
    GPUMEM_TEST_TIMES) ;;
    GPUMEM_FUZZ* | GPUMEM_BENCH_* | GPUMEM_DIFF_* | GPUMEM_GPU_*) ;;
    GPUMEM_* | PYTORCH_CUDA_ALLOC_CONF | PYTORCH_ALLOC_CONF) unset "$var" ;;
  esac
done < <(env)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:verify_asan_link_order=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1}
jobs=${TEST_JOBS:-$(nproc 2> /dev/null || echo 1)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "tests/run.sh: TEST_JOBS=$jobs is not a number >= 1" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/gpumem-tests-XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT

names=() cmds=()
for t in $unit; do names+=("$t"); cmds+=("$t"); done
for s in $scripts; do names+=("$s"); cmds+=("bash $s"); done
n=${#names[@]}

# the start order: indexes into names, longest first by the last run's times (above); a name
# is the test's path with the build folder taken out, so that build/ and build/san-*/ units and
# every clone's share one line
times_dir=${GPUMEM_TEST_TIMES:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/gpumem/test-times}
times_file=$times_dir/${san:-plain}
key() { echo "${1#"$build"/}"; }
order=()
declare -A last=()
if [[ -r $times_file ]]; then
  while read -r secs name; do [[ $secs =~ ^[0-9]+$ ]] && last[$name]=$secs; done < "$times_file"
fi
for ((i = 0; i < n; i++)); do [[ -n ${last[$(key "${names[$i]}")]:-} ]] || order+=("$i"); done
while read -r _ i; do order+=("$i"); done < <(
  for ((i = 0; i < n; i++)); do
    k=$(key "${names[$i]}")
    [[ -n ${last[$k]:-} ]] && echo "${last[$k]} $i"
  done | sort -k1,1nr -k2,2n)

# runs test i in the background: its output in $work/i.out, its exit code and wall seconds in
# $work/i.rc
start() {
  local i=$1
  mkdir -p "$work/$i.tmp"
  (
    t0=$SECONDS
    # A hung test fails (exit 124) instead of stalling the whole suite.
    TMPDIR=$work/$i.tmp timeout --kill-after=10 "${TEST_TIMEOUT:-600}" ${cmds[$i]} > "$work/$i.out" 2>&1
    rc=$?
    echo "$rc $((SECONDS - t0))" > "$work/$i.rc.tmp" && mv "$work/$i.rc.tmp" "$work/$i.rc"
  ) &
}

pass=0 fail=0 skip=0 failed=() times=()
report() { # prints test i's output and counts it
  local i=$1 name=${names[$1]} rc secs
  read -r rc secs < "$work/$i.rc"
  echo "=== $name ($secs s)"
  cat "$work/$i.out"
  times+=("$secs $name")
  [[ $rc -eq 124 || $rc -eq 137 ]] && echo "--- timed out after ${TEST_TIMEOUT:-600} s: $name"
  if [[ $rc -eq 0 ]]; then pass=$((pass + 1))
  elif [[ $rc -eq 77 ]]; then skip=$((skip + 1)); echo "--- skipped: $name"
  else fail=$((fail + 1)); failed+=("$name (exit $rc)"); echo "--- FAILED: $name (exit $rc)"
    # kept for the closing summary: a CI log is often read from its tail only
    { grep -E '^(FAIL|not ok|\[  FAILED|\[  ERROR)|[Ee]rror|Sanitizer|runtime error' "$work/$i.out" | sed -n 1,12p
      echo "  ... its last lines:"; tail -n 6 "$work/$i.out"; } | sed 's/^/    /' > "$work/why.$i"
  fi
  rm -rf "$work/$i.tmp"
}

next=0 shown=0 running=0
while ((shown < n)); do
  while ((running < jobs && next < n)); do start "${order[$next]}"; next=$((next + 1)); running=$((running + 1)); done
  # wait for any one to end, then print every finished one that is next in list order
  wait -n 2> /dev/null || true
  running=0
  for ((k = 0; k < next; k++)); do [[ -e $work/${order[$k]}.rc ]] || running=$((running + 1)); done
  while ((shown < n)) && [[ -e $work/$shown.rc ]]; do report "$shown"; shown=$((shown + 1)); done
done
wait
# this run's times for the next one's order (the old file's other lines kept: a run of a few
# tests updates only theirs)
if mkdir -p "$times_dir" 2> /dev/null; then
  for ((i = 0; i < n; i++)); do read -r _ secs < "$work/$i.rc" && last[$(key "${names[$i]}")]=$secs; done
  for k in "${!last[@]}"; do echo "${last[$k]} $k"; done | sort -k2 > "$times_file.$$" &&
    mv "$times_file.$$" "$times_file"
fi
echo
if [[ ${#failed[@]} -gt 0 ]]; then
  # each failed program's failing lines again, so that the end of the log says why
  for ((i = 0; i < n; i++)); do
    [[ -e $work/why.$i ]] || continue
    echo "why ${names[$i]} failed:"
    cat "$work/why.$i"
  done
  printf 'failed: %s\n' "${failed[@]}"
fi
# where the suite's time goes (wall seconds, the five longest)
printf '%s\n' "${times[@]}" | sort -rn | sed -n 1,5p | awk '{ s = s (NR > 1 ? ", " : "") $2 " " $1 " s" } END { print "slowest: " s }'
echo "$pass passed, $fail failed, $skip skipped ($jobs at once, ${SECONDS} s)"
[[ $fail -eq 0 ]]
