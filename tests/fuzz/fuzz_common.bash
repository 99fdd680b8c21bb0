# Shared by the tests/fuzz/*.sh scripts: run one libFuzzer target over its committed corpus.
#
# Two modes, so that `make test` is deterministic and long campaigns live elsewhere:
#   short (default, make test): every committed input once (the regression corpus: each crash
#     ever found is kept there with its fix), then GPUMEM_FUZZ_RUNS mutations with a fixed
#     seed (-seed=1). Same commit, same executions, same verdict — on every machine.
#   long (GPUMEM_FUZZ=long, make fuzz): GPUMEM_FUZZ_RUNS (default 10 million) executions with
#     a random seed; new interesting inputs go to $BUILD/fuzz-corpus/<target>/, crashes to
#     $BUILD/tests/fuzz/crashes/ (add each one to tests/fuzz/corpus/<target>/ with its fix).
#     GPUMEM_FUZZ_SECONDS bounds each target's time; the log stays in GPUMEM_FUZZ_LOG
#     (default $BUILD/fuzz-logs/<target>.log). GPUMEM_FUZZ_JOBS=N (default 1) runs the campaign
#     on N cores: N independent fuzzer processes (libFuzzer's -jobs=N -workers=N), each with its
#     own seed and GPUMEM_FUZZ_RUNS/N executions, over one shared corpus (each rereads what the
#     others add); the figures are their sum (fork mode, -fork=N, ran ~3x fewer executions per
#     core here: see README.md).
# FUZZ_ASAN (set by a target's script) adds ASan options to detect_leaks=1, in both modes.
# fuzz_run NAME FUZZER CORPUS_DIR SHORT_RUNS MAX_LEN [extra libFuzzer flags...]
set -uo pipefail
BUILD=${BUILD:-build}

fuzz_run() {
  local name=$1 fuzzer=$2 corpus=$3 short_runs=$4 max_len=$5; shift 5
  if [[ ! -x $fuzzer ]]; then echo "skipped: $fuzzer not built (needs clang with libFuzzer)" >&2; return 77; fi
  fuzzer=$(realpath "$fuzzer") # the fuzzer runs in its work directory (below)
  local tmp; tmp=$(realpath "$(mktemp -d "${TMPDIR:-/tmp}/fuzz-$name-XXXXXX")")
  # the committed corpus is read-only input: the run works on a copy
  mkdir -p "$tmp/corpus" && cp "$corpus"/* "$tmp/corpus/"
  local runs seed jobs=1 dirs=("$tmp/corpus") fixed=()
  if [[ ${GPUMEM_FUZZ:-short} == long ]]; then
    runs=${GPUMEM_FUZZ_RUNS:-10000000}; seed=0
    # a time bound for a campaign that cannot reach its run count (libFuzzer exits 0 at it)
    if [[ -n ${GPUMEM_FUZZ_SECONDS:-} ]]; then set -- "$@" -max_total_time="$GPUMEM_FUZZ_SECONDS"; fi
    jobs=${GPUMEM_FUZZ_JOBS:-1}
    if [[ $jobs -gt 1 ]]; then runs=$(( (runs + jobs - 1) / jobs )); set -- "$@" -jobs="$jobs" -workers="$jobs"; fi
    mkdir -p "$BUILD/fuzz-corpus/$name" && dirs=("$(realpath "$BUILD/fuzz-corpus/$name")" "$tmp/corpus")
  else
    runs=${GPUMEM_FUZZ_RUNS:-$short_runs}; seed=1
    # addresses feed hash tables and trees: with ASLR two runs of one seed cover different
    # paths (seen: alloc_fuzz, 950 vs 948 edges), so the short run goes without it
    if setarch -R true 2> /dev/null; then fixed=(setarch -R); fi
  fi
  local t0=$SECONDS
  # in $tmp: with -jobs, libFuzzer writes each process's log to fuzz-J.log in the working directory
  (cd "$tmp" && TMPDIR=$tmp ASAN_OPTIONS=detect_leaks=1${FUZZ_ASAN:+:$FUZZ_ASAN} "${fixed[@]}" "$fuzzer" -seed=$seed -runs="$runs" \
    -max_len="$max_len" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$tmp/" "$@" \
    "${dirs[@]}") > "$tmp/log" 2>&1
  local rc=$?
  # (with -jobs, the parent prints each process's log after a "Job J exited" line)
  grep -E '^(=+ Job [0-9]+ exited|#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==|SUMMARY|.*runtime error)' "$tmp/log" | tail -$((8 * jobs))
  local how="$runs runs"
  if [[ $jobs -gt 1 ]]; then
    how="$runs runs in each of $jobs processes, $(awk '/^stat::number_of_executed_units/ {n += $2} END {print n + 0}' "$tmp/log") in all"
  fi
  echo "$name: seed $seed, $how, corpus $(ls "$corpus" | wc -l) committed inputs"
  if [[ ${GPUMEM_FUZZ:-short} == long ]]; then
    # the campaign's figures: the log is kept (GPUMEM_FUZZ_LOG, default $BUILD/fuzz-logs/NAME.log)
    local keep=${GPUMEM_FUZZ_LOG:-$BUILD/fuzz-logs/$name.log}
    mkdir -p "$(dirname "$keep")" && cp "$tmp/log" "$keep"
    # inputs slower than 10 s (-report_slow_units): kept to look at, they do not fail the run
    if compgen -G "$tmp/slow-unit-*" > /dev/null; then
      mkdir -p "$BUILD/tests/fuzz/slow" && cp "$tmp"/slow-unit-* "$BUILD/tests/fuzz/slow/"
      echo "$name: slow inputs kept in $BUILD/tests/fuzz/slow"
    fi
    echo "$name: rc $rc, $((SECONDS - t0)) s wall, corpus now $(ls "$BUILD/fuzz-corpus/$name" | wc -l) inputs in $BUILD/fuzz-corpus/$name, log $keep"
  fi
  if [[ $rc -ne 0 ]]; then
    tail -40 "$tmp/log"
    mkdir -p "$BUILD/tests/fuzz/crashes" && cp "$tmp"/crash-* "$tmp"/timeout-* "$tmp"/leak-* "$tmp"/oom-* "$BUILD/tests/fuzz/crashes/" 2>/dev/null
    echo "FAIL: the $name fuzzer found a problem (inputs saved in $BUILD/tests/fuzz/crashes; reproduce with $fuzzer FILE)" >&2
    rm -rf "$tmp"; return 1
  fi
  rm -rf "$tmp"; return 0
}
