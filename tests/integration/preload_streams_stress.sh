#!/usr/bin/env bash
# Property: 8 threads x 4 streams each plus their per-thread default streams allocate, launch
# host kernels and free across streams (record_stream, cudaFree, cudaFreeAsync) under gpumem,
# and no check kernel ever sees another owner's canary in the block it was given
# (tests/apps/streams_stress.c). The run that can fail is the one on the virtual GPU's
# asynchronous mode (GPUMEM_SIM_ASYNC=1: kernels run later on each stream's worker, so a block
# handed out too early really is overwritten before its check runs; with the fence broken on
# purpose it reports millions of bad words in a few seconds). It lasts STREAMS_STRESS_SECONDS
# (default 10; make soak runs a long one); two shorter runs check the same with work that runs
# at issue time, plain and with events that complete late (GPUMEM_SIM_EVENT_DELAY). Under TSan too.
source tests/integration/preload_common.bash
need "$LIB" "$APPS/streams_stress"
secs=${STREAMS_STRESS_SECONDS:-10}
short=$(( secs / 4 > 0 ? secs / 4 : 1 ))
run() { local name=$1 t=$2; shift 2
  env "$@" GPUMEM_STATS=1 LD_PRELOAD=$LIB "$APPS/streams_stress" "$t" 8 4 \
    >"$TMP/$name.out" 2>"$TMP/$name.err"
  check_eq "$name: exit status" "$?" 0
  check_eq "$name: result" "$(awk '{print $2}' "$TMP/$name.out")" ok
  cat "$TMP/$name.out"
  check_eq "$name: every allocation returned" "$(stat "$TMP/$name.err" released)" \
    "$(stat "$TMP/$name.err" served)"
  cat "$TMP/$name.err" >>"$TMP/all.err"
}
: >"$TMP/all.err"
run async "$secs" GPUMEM_SIM_ASYNC=1
run plain "$short" GPUMEM_SIM_EVENT_DELAY=0
run late-events "$short" GPUMEM_SIM_EVENT_DELAY=3
grep -q "ERROR: \(Address\|Thread\)Sanitizer\|WARNING: ThreadSanitizer" "$TMP/all.err" && { fail "sanitizer report"; head -60 "$TMP/all.err"; }
finish
