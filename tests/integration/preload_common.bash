# Sourced by tests/integration/preload_*.sh: paths, a scratch directory, and helpers to run a
# program with and without libgpumem.so and read the GPUMEM_STATS / GPUMEM_SIM_STATS lines.
set -uo pipefail
BUILD=${BUILD:-build}
LIB=$PWD/$BUILD/libgpumem.so
APPS=$BUILD/tests/apps
TMP=$(mktemp -d /tmp/gpumem-preload.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
# Recordings go to the scratch directory, never into the working tree.
export GPUMEM_DB="$TMP/rec-%p.db"
export GPUMEM_QUIET=1
# Under ThreadSanitizer, libunwind's per-thread trace cache (the recorder's unw_backtrace)
# crashes in its thread-exit destructor inside TSan's mutex interceptor: known, reported, not
# gpumem's interposition. Stacks are off for the TSan runs only.
[[ ${SAN:-} == thread ]] && export GPUMEM_STACKS=0
unset GPUMEM_MODE GPUMEM_LIMIT GPUMEM_CONF GPUMEM_STATS GPUMEM_DEBUG_RANGES NVTX_INJECTION64_PATH

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok: $*"; }
finish() { [[ $fails -eq 0 ]] && { echo "all checks passed"; exit 0; }; echo "$fails check(s) failed"; exit 1; }
need() { for f in "$@"; do [[ -e $f ]] || { echo "missing $f (run make)" >&2; exit 1; }; done; }

# run_pre OUT ERR cmd...: under the preload, with gpumem's and the sim's counters on.
run_pre() { local out=$1 err=$2; shift 2
  GPUMEM_STATS=1 GPUMEM_SIM_STATS=1 LD_PRELOAD=$LIB "$@" >"$out" 2>"$err"; }
run_plain() { local out=$1 err=$2; shift 2
  GPUMEM_SIM_STATS=1 "$@" >"$out" 2>"$err"; }
# stat ERR KEY [PID]: a gpumem counter from the stats lines ("gpumem-stats <pid> <key> <value>")
stat() { awk -v k="$2" -v p="${3:-}" '$1=="gpumem-stats" && $3==k && (p=="" || $2==p) {v=$4} END {print v+0}' "$1"; }
# simcount ERR CALL: calls of one driver entry point in the sim's table (0 when absent)
simcount() { awk -v c="$2" '$1=="gpumem" && $2=="sim:" && $3==c {v=$4} END {print v+0}' "$1"; }
check_eq() { # what actual expected
  if [[ "$2" == "$3" ]]; then pass "$1 ($2)"; else fail "$1: got '$2', expected '$3'"; fi; }
check_gt() { # what actual min
  if [[ "$2" -gt "$3" ]]; then pass "$1 ($2 > $3)"; else fail "$1: got '$2', expected > $3"; fi; }
same_output() { # what file1 file2
  if cmp -s "$2" "$3"; then pass "$1: identical output"; else fail "$1: output differs"; diff "$2" "$3" | head -20; fi; }
