#!/usr/bin/env bash
# Properties:
# 1. The recording's order (events.seq) follows the allocators' own order for each address: on
#    every free path (cudaFree, cudaFreeAsync, cudaFreeHost, cuMemFree_v2) and in both modes, an
#    allocation's free comes before the next allocation of the same address, and nothing is left
#    live at exit (order_app frees everything). 8 threads reuse the same few blocks;
#    GPUMEM_TEST_FREE_YIELD=1 yields the CPU right after each free's memory went back, which
#    made a free recorded after another thread's reuse near certain when the event was written
#    after the release.
# 2. Every refused free is recorded with its kind, on every path and in both modes: a double
#    free as double (kind 10), an interior pointer (cudaFree(p + 16)) as a foreign free flagged
#    interior (kind 9, flag 0x100); GPUMEM_MODE=record tells them apart as replace mode does.
# 3. A refused free is recorded on the device of the memory it names, not on the caller's current
#    device (the driver no longer knows a freed address: the pass-through table keeps its
#    device, dead entries included): with 2 devices, the memory on device 1 and the refused frees
#    made with device 0 current, each is on device 1 (host memory: -1), in both modes.
source tests/integration/preload_common.bash
need "$LIB" "$APPS/order_app" "$BUILD/gpumem"
GM=$BUILD/gpumem
RUNS=${ORDER_RUNS:-2}
names=(sync async host driver)

# allocations of an address while the previous one there is still live, in seq order
overlaps() {
  sqlite3 "$1" "with e as (select seq, kind, addr from events where kind in (1,2,3,4,5,6,7,8)),
    w as (select kind, lag(kind) over (partition by addr order by seq) prev from e)
    select count(*) from w where kind in (1,3,5,7) and prev in (1,3,5,7)"
}

for mode in replace record; do
  for path in 0 1 2 3; do
    bad=0 never=0
    for ((i = 1; i <= RUNS; i++)); do
      db=$TMP/order-$mode-$path-$i.db
      GPUMEM_MODE=$mode GPUMEM_TEST_FREE_YIELD=1 "$GM" record -q -o "$db" --force -- \
        "$APPS/order_app" "$path" >"$TMP/out" 2>"$TMP/err"
      [[ $? -eq 0 ]] || { fail "$mode ${names[$path]}: order_app run $i failed"; cat "$TMP/err" | head -5; }
      n=$(overlaps "$db")
      [[ $n -gt 0 ]] && bad=$((bad + 1))
      m=$(sqlite3 "$db" "select count(*) from allocations where death_seq is null")
      [[ $m -gt 0 ]] && never=$((never + 1))
    done
    check_eq "$mode ${names[$path]}: runs with an allocation recorded before the previous free of its address" "$bad" 0
    check_eq "$mode ${names[$path]}: runs with an allocation that never dies" "$never" 0
  done
done

# 2: the bad-free table. Each path makes a double free then an interior free: the kinds of the
# refused frees in seq order, 'i' marking an interior one.
for mode in replace record; do
  db=$TMP/bad-$mode.db
  GPUMEM_MODE=$mode "$GM" record -q -o "$db" --force -- "$APPS/order_app" bad >"$TMP/bad.out" 2>"$TMP/bad.err"
  check_eq "$mode: order_app bad exit status" "$?" 0
  got=$(sqlite3 "$db" "select group_concat(k, ' ') from (select kind || case when flags & 256 then 'i' else '' end k
    from events where kind in (9, 10) order by seq)")
  check_eq "$mode: refused frees (sync, async, host, driver: double, interior)" "$got" "10 9i 10 9i 10 9i 10 9i"
  # every refused free is refused: the program sees an error for each
  check_eq "$mode: each bad free returned an error" \
    "$(awk '$3 == "double" && $4 != 0 && $6 != 0 {n++} END {print n+0}' "$TMP/bad.out")" 4
  check_eq "$mode: report's bad frees" "$("$GM" report "$db" | awk '/bad frees/ {$1 = $1; print}')" \
    "bad frees 4 foreign (4 interior), 4 double"
done

# 3: the same table's devices, memory on device 1, refused with device 0 current
for mode in replace record; do
  db=$TMP/bad-dev-$mode.db
  GPUMEM_SIM_DEVICES=2 GPUMEM_MODE=$mode "$GM" record -q -o "$db" --force -- "$APPS/order_app" bad 1 \
    >"$TMP/bad.out" 2>"$TMP/bad.err"
  check_eq "$mode: order_app bad 1 exit status" "$?" 0
  got=$(sqlite3 "$db" "select group_concat(k, ' ') from (select kind || case when flags & 256 then 'i' else '' end
    || '@' || device k from events where kind in (9, 10) order by seq)")
  check_eq "$mode: refused frees' devices (sync, async, host, driver: double, interior)" "$got" \
    "10@1 9i@1 10@1 9i@1 10@-1 9i@-1 10@1 9i@1"
done
finish
