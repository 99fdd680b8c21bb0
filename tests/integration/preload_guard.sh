#!/usr/bin/env bash
# Guard pages (GPUMEM_CONF=guard:1, issue 37): a kernel that writes past the end of its
# allocation faults, the way compute-sanitizer's memcheck would catch it, instead of corrupting
# the neighbour. Without guard pages the same write is silent (the check can fail): it lands in
# gpumem's next block. A write that stays inside the block's 512-byte rounding is not caught
# (documented). The program's observable results are unchanged by the mode otherwise (the
# differential suite under guard:1, below).
source tests/integration/preload_common.bash
need "$LIB" "$APPS/streams_app"
export GPUMEM_SIM_MEMORY=16G
# faulted: SIGSEGV (139), or under AddressSanitizer its SEGV report
faulted() { [[ $1 -eq 139 ]] || { [[ -n ${SAN:-} ]] && grep -q SEGV "$2"; }; }

GPUMEM_CONF=guard:1 LD_PRELOAD=$LIB "$APPS/streams_app" guard 100 >"$TMP/g.out" 2>"$TMP/g.err"
faulted $? "$TMP/g.err" && pass "guard:1, a kernel writes 100 bytes past a 1000-byte allocation: it faults" \
  || fail "guard:1: the overrun did not fault"
check_eq "... before it could say it survived" "$(grep -c survived "$TMP/g.out")" 0

LD_PRELOAD=$LIB "$APPS/streams_app" guard 100 >"$TMP/n.out" 2>"$TMP/n.err"
check_eq "without guard pages the same write is silent: exit status" "$?" 0
check_eq "... and corrupts the next allocation" "$(grep -c 'neighbour changed' "$TMP/n.out")" 1

GPUMEM_CONF=guard:1 LD_PRELOAD=$LIB "$APPS/streams_app" guard 24 >"$TMP/r.out" 2>"$TMP/r.err"
check_eq "guard:1, a write inside the block's rounding (24 bytes past 1000): not caught" "$?" 0
check_eq "... the neighbour is intact" "$(grep -c 'neighbour intact' "$TMP/r.out")" 1

GPUMEM_CONF=preset:pytorch,guard:1 LD_PRELOAD=$LIB "$APPS/streams_app" guard 100 >"$TMP/p.out" 2>"$TMP/p.err"
faulted $? "$TMP/p.err" && pass "preset:pytorch,guard:1: the overrun faults too" \
  || fail "preset:pytorch,guard:1: the overrun did not fault"

GPUMEM_CONF=guard:1 GPUMEM_STATS=1 LD_PRELOAD=$LIB "$APPS/streams_app" graph >"$TMP/gr.out" 2>"$TMP/gr.err"
check_eq "guard:1: a program with a captured graph runs as without it" "$?" 0

# programs of the differential corpus that print no memory info (under guard:1 each allocation
# takes whole pages of its own): the same results as plainly (devices_pools' pool figures aside:
# a difference tests/diff/expected-differences.txt lists for every configuration)
if [[ -z ${SAN:-} ]]; then
  for p in rt_errors streams graph_mem capture_modes oob devices_pools; do
    "$BUILD/tests/diff/$p" 2>/dev/null | grep -v '^pool ' >"$TMP/$p.plain"
    GPUMEM_CONF=guard:1 LD_PRELOAD=$LIB "$BUILD/tests/diff/$p" 2>/dev/null | grep -v '^pool ' >"$TMP/$p.guard"
    same_output "diff corpus $p under guard:1" "$TMP/$p.plain" "$TMP/$p.guard"
  done
fi
finish
