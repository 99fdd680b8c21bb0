#!/usr/bin/env bash
# The differential suite (issue 19): gpumem must not change what a correct program observes,
# other than addresses and speed. Every program of the corpus ($BUILD/tests/diff/*, sources in
# tests/diff/*.c) runs plainly on the virtual GPU and under LD_PRELOAD=libgpumem.so in each
# configuration below; the outputs (address-free by construction, see diff.h) must be
# identical, except for lines listed — with the reason — in tests/diff/expected-differences.txt:
#
#   program | config | ERE matched against an output line | reason
#
# (program and config are shell globs). A listed line is dropped from both outputs before they
# are compared; an entry that no difference needs any more is reported (stale), as a failure.
# Then: the atexit program's recording has no leak (`gpumem leaks --fail-on-leak`), nor the reset
# programs' (reset, reset_driver: what a device reset destroyed is recorded freed).
# Under SAN=address / SAN=thread the same with three configurations (see below).
set -uo pipefail
shopt -s extglob
BUILD=${BUILD:-build}
# GPUMEM_DIFF_LIB: check another build of the library against the same corpus
LIB=${GPUMEM_DIFF_LIB:-$PWD/$BUILD/libgpumem.so}
BIN=$BUILD/tests/diff
EXPECTED=tests/diff/expected-differences.txt
TMP=$(mktemp -d /tmp/gpumem-diff.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
unset GPUMEM_MODE GPUMEM_LIMIT GPUMEM_CONF GPUMEM_STATS GPUMEM_DEBUG_RANGES NVTX_INJECTION64_PATH \
      GPUMEM_SIM_EVENT_DELAY GPUMEM_SIM_FAULTS GPUMEM_SIM_BACKING LD_PRELOAD
export GPUMEM_SIM_MEMORY=16G GPUMEM_DB=none GPUMEM_QUIET=1
[[ ${SAN:-} == thread ]] && export GPUMEM_STACKS=0

configs=(
  "default|"
  "pytorch|GPUMEM_CONF=preset:pytorch"
  "pytorch-expandable|GPUMEM_CONF=preset:pytorch-expandable"
  "nocache|GPUMEM_CONF=preset:nocache"
  "shared-pools|GPUMEM_CONF=per_stream_pools:False"
  "limit|GPUMEM_LIMIT=6G"
  "no-free-sync|GPUMEM_CONF=free_sync:none,free_host_sync:none"
)

# Under a sanitizer every run costs several times more: the three configurations that cover
# the distinct code paths (expandable segments, classic segments, no implied synchronization)
# keep the suite near a minute; GPUMEM_DIFF_CONFIGS="name ..." picks any subset.
subset=${GPUMEM_DIFF_CONFIGS:-}
[[ -z $subset && -n ${SAN:-} ]] && subset="default pytorch no-free-sync"
if [[ -n $subset ]]; then
  keep=()
  for c in "${configs[@]}"; do [[ " $subset " == *" ${c%%|*} "* ]] && keep+=("$c"); done
  configs=("${keep[@]}")
fi

[[ -f $LIB && -f $EXPECTED ]] || { echo "missing $LIB or $EXPECTED (run make)" >&2; exit 1; }
progs=()
for src in tests/diff/*.c; do
  p=$BIN/$(basename "$src" .c)
  [[ -x $p ]] || { echo "missing $p (run make)" >&2; exit 1; }
  progs+=("$p")
done

# the expected differences as "prog<TAB>config<TAB>regex" (reasons are for people)
awk -F' [|] ' '!/^[[:space:]]*(#|$)/ {
  if (NF < 4 || $4 == "") { printf "%s:%d: expected 4 fields with a reason\n", FILENAME, NR > "/dev/stderr"; bad = 1 }
  print $1 "\t" $2 "\t" $3 }
  END { exit bad }' "$EXPECTED" >"$TMP/expected" || exit 1
declare -A used=()

fails=0 runs=0 listed=0
# patterns OUT PROG CONFIG: the regexes that apply, one per line
patterns() {
  local prog=$1 cfg=$2 p c re
  : >"$TMP/pats"
  while IFS=$'\t' read -r p c re; do
    # shellcheck disable=SC2053
    [[ $prog == $p && $cfg == $c ]] && printf '%s\n' "$re" >>"$TMP/pats"
  done <"$TMP/expected"
}

for prog in "${progs[@]}"; do
  name=$(basename "$prog")
  if ! "$prog" >"$TMP/$name.plain" 2>"$TMP/$name.plain.err"; then
    echo "FAIL: $name exits non-zero without gpumem"; cat "$TMP/$name.plain.err"; fails=$((fails + 1)); continue
  fi
  for c in "${configs[@]}"; do
    cfg=${c%%|*} envs=${c#*|}
    out=$TMP/$name.$cfg
    runs=$((runs + 1))
    # shellcheck disable=SC2086
    if ! env $envs LD_PRELOAD="$LIB" "$prog" >"$out" 2>"$out.err"; then
      echo "FAIL: $name [$cfg] exits non-zero under gpumem"; tail -5 "$out.err"; fails=$((fails + 1)); continue
    fi
    if grep -q '^gpumem: ' "$out.err"; then
      echo "FAIL: $name [$cfg]: gpumem complained"; grep '^gpumem: ' "$out.err" | head -3; fails=$((fails + 1))
    fi
    cmp -s "$TMP/$name.plain" "$out" && continue
    patterns "$name" "$cfg"
    if [[ -s $TMP/pats ]]; then
      grep -v -E -f "$TMP/pats" "$TMP/$name.plain" >"$TMP/a" || true
      grep -v -E -f "$TMP/pats" "$out" >"$TMP/b" || true
    else
      cp "$TMP/$name.plain" "$TMP/a"; cp "$out" "$TMP/b"
    fi
    if ! cmp -s "$TMP/a" "$TMP/b"; then
      echo "FAIL: $name [$cfg]: output differs from the plain run (not listed in $EXPECTED)"
      diff "$TMP/a" "$TMP/b" | head -20
      fails=$((fails + 1))
      continue
    fi
    # which entries this difference needed
    diff "$TMP/$name.plain" "$out" | grep '^[<>]' | cut -c3- >"$TMP/dl"
    n=$(wc -l <"$TMP/dl")
    listed=$((listed + n))
    echo "listed: $name [$cfg]: $n differing line(s)"
    while IFS=$'\t' read -r p c re; do
      # shellcheck disable=SC2053
      [[ $name == $p && $cfg == $c ]] && grep -q -E -- "$re" "$TMP/dl" && used["$p|$c|$re"]=1
    done <"$TMP/expected"
  done
done

# stale entries: listed, but no run needed them (only known when every configuration ran)
while IFS=$'\t' read -r p c re; do
  [[ -n $subset || -n ${used["$p|$c|$re"]:-} ]] && continue
  echo "FAIL: stale entry in $EXPECTED (no difference needs it any more): $p | $c | $re"
  fails=$((fails + 1))
done <"$TMP/expected"

# finding 6: frees in an atexit handler registered before the first CUDA call are recorded
if [[ -x $BUILD/gpumem ]]; then
  GPUMEM_DB=$TMP/atexit.db LD_PRELOAD="$LIB" "$BIN/atexit_free" >/dev/null 2>"$TMP/atexit.err"
  if "$BUILD/gpumem" leaks --fail-on-leak "$TMP/atexit.db" >"$TMP/leaks.out" 2>&1; then
    echo "ok: atexit frees recorded: no leak reported"
  else
    echo "FAIL: gpumem leaks reports a leak for frees made in an atexit handler"; head -20 "$TMP/leaks.out"
    fails=$((fails + 1))
  fi
fi

# the allocations a device reset destroyed are recorded freed (the driver's answer, heap.c
# gm_pt_after_reset; gpumem's own blocks by gm_heap_reset): the recordings of a reset through the
# runtime (reset) and through the driver (reset_driver) have no leak, with gpumem serving (its
# segments; preset:nocache, a cuMemAlloc per block) and recording only
if [[ -x $BUILD/gpumem ]]; then
  for prog in reset reset_driver; do
    for rc in "replace|" "nocache|GPUMEM_CONF=preset:nocache" "record|GPUMEM_MODE=record"; do
      name=${rc%%|*}
      env ${rc#*|} GPUMEM_DB="$TMP/$prog-$name.db" LD_PRELOAD="$LIB" "$BIN/$prog" >/dev/null 2>"$TMP/$prog-$name.err"
      if "$BUILD/gpumem" leaks --fail-on-leak "$TMP/$prog-$name.db" >"$TMP/leaks.out" 2>&1; then
        echo "ok: $prog [$name]: what the reset destroyed is recorded freed: no leak reported"
      else
        echo "FAIL: $prog [$name]: gpumem leaks reports a leak of memory a device reset destroyed"; head -12 "$TMP/leaks.out"
        fails=$((fails + 1))
      fi
    done
  done
fi

# issue 37: the out-of-bounds accesses gpumem refused are recorded and `gpumem report` lists them
if [[ -x $BUILD/gpumem ]]; then
  GPUMEM_DB=$TMP/oob.db LD_PRELOAD="$LIB" "$BIN/oob" >/dev/null 2>"$TMP/oob.err"
  "$BUILD/gpumem" report --top 30 "$TMP/oob.db" >"$TMP/oob.report" 2>&1
  site='^    at main \(oob\.c:'
  [[ ${GPUMEM_STACKS:-} == 0 ]] && site='^    at \(no stack' # TSan runs record no stacks
  if grep -A1 '^  out-of-bounds memset of 1001 bytes into a 1000-byte allocation' "$TMP/oob.report" |
      grep -qE "$site" &&
      grep -q '^  memset of 16 bytes into freed memory' "$TMP/oob.report" &&
      grep -q '^  bad accesses  *19 ' "$TMP/oob.report"; then
    echo "ok: gpumem report lists the refused out-of-bounds accesses with their call sites"
  else
    echo "FAIL: gpumem report does not list the out-of-bounds accesses"
    sed -n '/bad accesses/p;/Out-of-bounds/,/OOM forensics/p' "$TMP/oob.report" | head -20
    fails=$((fails + 1))
  fi
fi

echo "diff suite: ${#progs[@]} programs x ${#configs[@]} configurations = $runs runs, $listed listed differing line(s), $fails failure(s)"
[[ $fails -eq 0 ]]
