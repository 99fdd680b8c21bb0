#!/usr/bin/env bash
# Properties: a child forked before the parent touched CUDA uses gpumem normally; a child
# forked after it runs with gpumem off (it never touches the parent's device state) and its
# allocations still work; the parent is unaffected. Run under ASan and TSan too.
source tests/integration/preload_common.bash
need "$LIB" "$APPS/fork_app"
# Under TSan: gpumem's fork handler holds every lock it has across fork() (so that the child
# inherits none held), more than the 64 locks per thread TSan's deadlock detector can track
# (it stops with "CHECK failed: sanitizer_deadlock_detector.h"). Races are still detected.
[[ ${SAN:-} == thread ]] && export TSAN_OPTIONS=${TSAN_OPTIONS:+$TSAN_OPTIONS:}detect_deadlocks=0
GPUMEM_STATS=1 LD_PRELOAD=$LIB "$APPS/fork_app" >"$TMP/pre.out" 2>"$TMP/pre.err"
check_eq "fork_app exit status" "$?" 0
for who in child1 child2 parent; do
  check_eq "$who allocated and checked its memory" "$(grep -c "^fork_app: $who ok" "$TMP/pre.out")" 1
done
# one stats block per process: two children in replace/off, the parent in replace
modes=$(awk '$3=="mode" {print $4}' "$TMP/pre.err" | sort | tr '\n' ' ')
check_eq "modes of the three processes" "$modes" "off replace replace "
served_total=$(awk '$3=="served" {s+=$4} END {print s+0}' "$TMP/pre.err")
check_eq "allocations served by gpumem (child1: 1, parent: 2)" "$served_total" 3
grep -q "ERROR: \(Address\|Thread\)Sanitizer" "$TMP/pre.err" && { fail "sanitizer report"; head -40 "$TMP/pre.err"; }
finish
