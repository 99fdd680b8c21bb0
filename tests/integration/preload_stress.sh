#!/usr/bin/env bash
# Property: 8 threads allocating and freeing concurrently (sync and stream-ordered, frees on
# other threads) under gpumem never get overlapping live memory (each allocation's tag is
# intact when it is freed), and every allocation is served and returned — also when the virtual
# GPU completes events late (GPUMEM_SIM_EVENT_DELAY: freed blocks wait for their events, the
# cudaFree fences every stream). Run under ASan/TSan. And PyTorch's trace entries handed to
# gpumem by 4 allocating threads at once (stress_app trace: the one-exchange lock of
# preload/torch_trace.c, the ring growing and a device first seen meanwhile): each entry kept
# once, each thread's in its order, each seq read within its call.
source tests/integration/preload_common.bash
need "$LIB" "$APPS/stress_app"
GPUMEM_STATS=1 LD_PRELOAD=$LIB "$APPS/stress_app" >"$TMP/pre.out" 2>"$TMP/pre.err"
check_eq "stress_app exit status" "$?" 0
check_eq "stress_app result" "$(awk '{print $2}' "$TMP/pre.out")" ok
served=$(stat "$TMP/pre.err" served)
check_gt "allocations served" "$served" 500
check_eq "every allocation returned" "$(stat "$TMP/pre.err" released)" "$served"
check_eq "no double or foreign frees" "$(( $(stat "$TMP/pre.err" double_free) + $(stat "$TMP/pre.err" foreign_free) ))" 0
GPUMEM_SIM_EVENT_DELAY=3 GPUMEM_STATS=1 LD_PRELOAD=$LIB "$APPS/stress_app" >"$TMP/delay.out" 2>"$TMP/delay.err"
check_eq "stress_app with late events: exit status" "$?" 0
check_eq "stress_app with late events: result" "$(awk '{print $2}' "$TMP/delay.out")" ok
check_eq "late events: every allocation returned" "$(stat "$TMP/delay.err" released)" "$(stat "$TMP/delay.err" served)"
cat "$TMP/delay.err" >>"$TMP/pre.err"
GPUMEM_DB="$TMP/trace.db" LD_PRELOAD=$LIB "$APPS/stress_app" trace >"$TMP/trace.out" 2>"$TMP/trace.err"
check_eq "trace entries from 4 threads: exit status" "$?" 0
check_eq "trace entries from 4 threads: result" "$(awk '{print $2}' "$TMP/trace.out")" ok
cat "$TMP/trace.out"
cat "$TMP/trace.err" >>"$TMP/pre.err"
grep -q "ERROR: \(Address\|Thread\)Sanitizer\|WARNING: ThreadSanitizer" "$TMP/pre.err" && { fail "sanitizer report"; head -60 "$TMP/pre.err"; }
finish
