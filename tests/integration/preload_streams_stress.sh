#!/usr/bin/env bash
# Property: 8 threads x 4 streams each plus their per-thread default streams allocate, launch
# host kernels and free across streams (record_stream, cudaFree, cudaFreeAsync) under gpumem,
# and no check kernel ever sees another owner's canary in the block it was given
# (tests/apps/streams_stress.c). Each run lasts STREAMS_STRESS_SECONDS (default 10; make soak
# runs a long one). Also with events that complete late (GPUMEM_SIM_EVENT_DELAY), and on the
# virtual GPU's asynchronous mode when it has one (GPUMEM_SIM_ASYNC=1: kernels run later on
# each stream's worker, so a block reused too early really is overwritten before the check).
# Run under TSan too.
source tests/integration/preload_common.bash
need "$LIB" "$APPS/streams_stress"
secs=${STREAMS_STRESS_SECONDS:-10}
# the three runs share the budget: under a sanitizer the program is slower, not the clock
run() { local name=$1; shift
  env "$@" GPUMEM_STATS=1 LD_PRELOAD=$LIB "$APPS/streams_stress" "$secs" 8 4 \
    >"$TMP/$name.out" 2>"$TMP/$name.err"
  check_eq "$name: exit status" "$?" 0
  check_eq "$name: result" "$(awk '{print $2}' "$TMP/$name.out")" ok
  cat "$TMP/$name.out"
  check_eq "$name: every allocation returned" "$(stat "$TMP/$name.err" released)" \
    "$(stat "$TMP/$name.err" served)"
  cat "$TMP/$name.err" >>"$TMP/all.err"
}
: >"$TMP/all.err"
run plain GPUMEM_SIM_EVENT_DELAY=0
run late-events GPUMEM_SIM_EVENT_DELAY=3
if grep -q GPUMEM_SIM_ASYNC sim/README.md 2>/dev/null; then
  run async GPUMEM_SIM_ASYNC=1
else
  echo "note: the virtual GPU has no asynchronous mode yet: these runs cannot catch a reuse race"
fi
grep -q "ERROR: \(Address\|Thread\)Sanitizer\|WARNING: ThreadSanitizer" "$TMP/all.err" && { fail "sanitizer report"; head -60 "$TMP/all.err"; }
finish
