#!/usr/bin/env bash
# Property: 8 threads allocating and freeing concurrently (sync and stream-ordered, frees on
# other threads) under gpumem never get overlapping live memory (each allocation's tag is
# intact when it is freed), and every allocation is served and returned — also when the virtual
# GPU completes events late (GPUMEM_SIM_EVENT_DELAY: freed blocks wait for their events, the
# cudaFree fences every stream). Run under ASan/TSan.
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
grep -q "ERROR: \(Address\|Thread\)Sanitizer\|WARNING: ThreadSanitizer" "$TMP/pre.err" && { fail "sanitizer report"; head -60 "$TMP/pre.err"; }
finish
