#!/usr/bin/env bash
# Properties, for a program linked to the (virtual GPU's) CUDA runtime:
#  - under the preload every cudaMalloc/cudaMallocAsync is served by gpumem (its stats count
#    each one, and each free) while the driver only sees segment maps (cuMemMap, no cuMemAlloc);
#  - the program's output is identical with and without the preload;
#  - pinned host memory comes from the pool: cuMemHostRegister far fewer times than allocations,
#    no cuMemHostAlloc;
#  - record mode passes every allocation to the real runtime (counted once, not twice);
#  - GPUMEM_LIMIT=1G: a 2 GiB cudaMalloc fails with cudaErrorMemoryAllocation (2) and the
#    program carries on; cudaMemGetInfo reports the limit as total;
#  - double frees are answered as the runtime answers them (cudaFree and cudaFreeHost:
#    cudaErrorInvalidValue 1, as CUDA 13 does on an H200), never a crash;
#  - a bad GPUMEM_CONF / GPUMEM_MODE prints one line naming the problem and gpumem goes off;
#  - allocations named through the NVTX memory extension and through gpumem_name (found with
#    dlsym) reach the recording; naming an unknown pointer is refused;
#  - the recording's stat.driver.* counts every driver call gpumem made, call by call against
#    the virtual GPU's own counts (GPUMEM_SIM_STATS).
source tests/integration/preload_common.bash
need "$LIB" "$APPS/rt_app"

run_plain "$TMP/plain.out" "$TMP/plain.err" "$APPS/rt_app" || fail "rt_app failed without the preload"
run_pre "$TMP/pre.out" "$TMP/pre.err" "$APPS/rt_app" || { fail "rt_app failed under the preload"; cat "$TMP/pre.err"; }
same_output "rt_app" "$TMP/plain.out" "$TMP/pre.out"
read -r allocs frees aallocs afrees hallocs < <(awk '/^rt_app: allocs/ {print $3, $5, $7, $9, $11}' "$TMP/pre.out")
check_eq "cudaMalloc calls seen" "$(stat "$TMP/pre.err" rt_malloc)" "$allocs"
check_eq "cudaMallocAsync calls seen" "$(stat "$TMP/pre.err" rt_malloc_async)" "$aallocs"
# + 1: a cuMemAlloc/cuMemFree pair reached through cudaGetDriverEntryPointByVersion
check_eq "cuMemAlloc via cudaGetDriverEntryPoint seen" "$(stat "$TMP/pre.err" drv_alloc)" 1
check_eq "allocations served by gpumem" "$(stat "$TMP/pre.err" served)" "$((allocs + aallocs + 1))"
check_eq "frees returned to gpumem" "$(stat "$TMP/pre.err" released)" "$((frees + afrees + 1))"
check_eq "allocations passed through" "$(stat "$TMP/pre.err" passthrough)" 0
check_eq "streams fenced by cudaFree (3 threads x 3 streams)" "$(stat "$TMP/pre.err" streams)" 9
check_eq "driver cuMemAlloc calls under gpumem" "$(simcount "$TMP/pre.err" cuMemAlloc)" 0
check_eq "driver cuMemAllocAsync calls under gpumem" "$(simcount "$TMP/pre.err" cuMemAllocAsync)" 0
check_gt "driver cuMemMap calls under gpumem" "$(simcount "$TMP/pre.err" cuMemMap)" 0
check_eq "driver cuMemAlloc calls without gpumem" "$(simcount "$TMP/plain.err" cuMemAlloc)" "$((allocs + 1))"
check_eq "pinned allocations from the pool" "$(stat "$TMP/pre.err" host_alloc)" "$hallocs"
check_eq "driver cuMemHostAlloc calls under gpumem" "$(simcount "$TMP/pre.err" cuMemHostAlloc)" 0
reg=$(simcount "$TMP/pre.err" cuMemHostRegister)
if [[ $reg -ge 1 && $reg -lt $hallocs ]]; then pass "pinned pages registered $reg times for $hallocs allocations"
else fail "cuMemHostRegister called $reg times for $hallocs pinned allocations"; fi

# record mode: the real runtime serves, gpumem counts each allocation once
GPUMEM_MODE=record run_pre "$TMP/rec.out" "$TMP/rec.err" "$APPS/rt_app" || fail "rt_app failed in record mode"
same_output "rt_app record mode" "$TMP/plain.out" "$TMP/rec.out"
check_eq "record mode: served" "$(stat "$TMP/rec.err" served)" 0
# the program's own cuMemAlloc (entry point) is counted at the driver level; the runtime's
# cuMemAlloc calls made on behalf of cudaMalloc are not counted a second time
check_eq "record mode: passed through" "$(stat "$TMP/rec.err" passthrough)" "$((allocs + aallocs + hallocs + 1))"
check_eq "record mode: driver-level calls counted once" "$(stat "$TMP/rec.err" drv_alloc)" 1
check_eq "record mode: driver cuMemAlloc calls" "$(simcount "$TMP/rec.err" cuMemAlloc)" "$((allocs + 1))"

# off
GPUMEM_MODE=off run_pre "$TMP/off.out" "$TMP/off.err" "$APPS/rt_app" || fail "rt_app failed in mode off"
same_output "rt_app mode off" "$TMP/plain.out" "$TMP/off.out"
check_eq "mode off: served" "$(stat "$TMP/off.err" served)" 0

# the limit
GPUMEM_LIMIT=1G run_pre "$TMP/big.out" "$TMP/big.err" "$APPS/rt_app" big
rc=$?
check_eq "GPUMEM_LIMIT=1G: program exit status" "$rc" 0
check_eq "GPUMEM_LIMIT=1G: 2 GiB request" "$(grep -c 'cudaMalloc(2 GiB) = 2 (cudaErrorMemoryAllocation)' "$TMP/big.out")" 1
check_eq "GPUMEM_LIMIT=1G: the program goes on" "$(grep -c 'then cudaMalloc(1 MiB) = 0' "$TMP/big.out")" 1
check_eq "GPUMEM_LIMIT=1G: cudaMemGetInfo total" "$(awk '/cudaMemGetInfo total/ {print $4}' "$TMP/big.out")" 1073741824
check_eq "GPUMEM_LIMIT=1G: OOM counted" "$(stat "$TMP/big.err" oom)" 1

# double and foreign frees
run_pre "$TMP/err.out" "$TMP/err.err" "$APPS/rt_app" errors
check_eq "errors: exit status" "$?" 0
check_eq "double cudaFree answered" "$(awk '/^rt_app: double free/ {print $4}' "$TMP/err.out")" 1
check_eq "double cudaFreeHost answered" "$(awk '/^rt_app: host double free/ {print $5}' "$TMP/err.out")" 1
check_eq "double frees recorded" "$(stat "$TMP/err.err" double_free)" 2
check_eq "foreign free passed to the runtime" "$(stat "$TMP/err.err" foreign_free)" 1
check_eq "managed memory passed through" "$(awk '/^rt_app: managed/ {print $4}' "$TMP/err.out" | tr '\n' ' ')" "0 0 "
check_eq "managed allocation recorded, its free matched" \
    "$(stat "$TMP/err.err" managed) $(stat "$TMP/err.err" passthrough_free)" "1 1"
check_eq "still allocates after bad frees" "$(awk '/^rt_app: still works/ {print $4}' "$TMP/err.out")" 0

# bad configuration: one line naming the key, gpumem off, program unaffected
GPUMEM_CONF=bogus_key:1 run_pre "$TMP/conf.out" "$TMP/conf.err" "$APPS/rt_app" || fail "rt_app failed with a bad GPUMEM_CONF"
same_output "rt_app with bad GPUMEM_CONF" "$TMP/plain.out" "$TMP/conf.out"
check_eq "bad GPUMEM_CONF names the key" "$(grep -c "^gpumem: GPUMEM_CONF.*bogus_key.*accepted" "$TMP/conf.err")" 1
check_eq "bad GPUMEM_CONF: gpumem off" "$(awk '$3=="mode" {print $4}' "$TMP/conf.err")" off
GPUMEM_MODE=fast run_pre "$TMP/mode.out" "$TMP/mode.err" "$APPS/rt_app" || fail "rt_app failed with a bad GPUMEM_MODE"
check_eq "bad GPUMEM_MODE reported" "$(grep -c "^gpumem: GPUMEM_MODE: unknown mode 'fast'" "$TMP/mode.err")" 1
GPUMEM_LIMIT=lots run_pre "$TMP/lim.out" "$TMP/lim.err" "$APPS/rt_app" || fail "rt_app failed with a bad GPUMEM_LIMIT"
check_eq "bad GPUMEM_LIMIT reported" "$(grep -c "^gpumem: GPUMEM_LIMIT: bad size 'lots'" "$TMP/lim.err")" 1
# dlsym(RTLD_NEXT) from another preloaded library still means "after that library": its next
# cudaMalloc is gpumem's (served), not the runtime's behind gpumem
if [[ -e $APPS/next_shim.so ]]; then
  GPUMEM_STATS=1 LD_PRELOAD="$PWD/$APPS/next_shim.so $LIB" "$APPS/rt_app" >"$TMP/shim.out" 2>"$TMP/shim.err" ||
      fail "rt_app failed with next_shim.so before gpumem"
  same_output "rt_app with next_shim.so" "$TMP/plain.out" "$TMP/shim.out"
  check_eq "shim's RTLD_NEXT cudaMalloc reached gpumem" "$(stat "$TMP/shim.err" rt_malloc)" "$allocs"
  check_eq "shim wrapped every cudaMalloc" "$(awk '/^next_shim: cudaMalloc calls/ {print $4}' "$TMP/shim.err")" "$allocs"
  check_eq "and gpumem served them" "$(stat "$TMP/shim.err" served)" "$((allocs + aallocs + 1))"
fi

# cudaMalloc as the program's first CUDA call: the runtime initialises inside gpumem's first
# call and must still get gpumem's driver hooks (the created and destroyed stream is seen, so
# the next cudaFree does not fence a dead stream)
run_pre "$TMP/first.out" "$TMP/first.err" "$APPS/rt_app" first
check_eq "first call cudaMalloc: program" "$(cat "$TMP/first.out")" "rt_app: first ok"
check_eq "first call cudaMalloc: stream creation seen" "$(stat "$TMP/first.err" streams)" 1
check_eq "first call cudaMalloc: all served" "$(stat "$TMP/first.err" served)" 3

# naming
"$APPS/rt_app" name >"$TMP/name.plain" 2>&1
check_eq "without gpumem, gpumem_name is absent" "$(cat "$TMP/name.plain")" "rt_app: gpumem_name absent"
GPUMEM_DB=$TMP/names.db GPUMEM_DEBUG_RANGES=$TMP/name.ranges run_pre "$TMP/name.out" "$TMP/name.err" "$APPS/rt_app" name
check_eq "gpumem_name result" "$(cat "$TMP/name.out")" "rt_app: gpumem_name 0, unknown pointer -1"
check_eq "NVTX region name received for a gpumem block" "$(grep -c '^name 0x[0-9a-f]* weights ok$' "$TMP/name.ranges")" 1
check_eq "allocations named" "$(stat "$TMP/name.err" named)" 2
if command -v sqlite3 >/dev/null; then
  check_eq "names in the recording" \
    "$(sqlite3 "$TMP/names.db" 'select s.s from names n join strings s on s.id = n.name order by 1' | tr '\n' ' ')" \
    "activations weights "
  # names are attached to the allocation's start address, even when given an interior pointer
  check_eq "named addresses are allocation starts" \
    "$(sqlite3 "$TMP/names.db" 'select count(*) from names n where exists (select 1 from events e where e.kind = 1 and e.addr = n.addr)')" 2
  # an empty name (an NVTX region name of a type gpumem cannot read, or "") is no name: the
  # report's row says "(unnamed)", not a blank label
  cp "$TMP/names.db" "$TMP/empty-name.db" && sqlite3 "$TMP/empty-name.db" "UPDATE strings SET s = '' WHERE s = 'weights'"
  "$BUILD/gpumem" report "$TMP/empty-name.db" >"$TMP/empty-name.txt" || fail "gpumem report on a recording with an empty name"
  check_eq "an empty name is reported as unnamed" \
    "$(sed -n '/by tensor name/,/^$/p' "$TMP/empty-name.txt" | awk 'NR > 1 && NF {print $NF}' | sort | tr '\n' ' ')" \
    "(unnamed) activations "
fi

# Every driver call gpumem makes on the program's behalf is in the recording's stat.driver.*
# counts (the synchronization each cudaFree implies, cudaMemGetInfo's answer and the device-used
# samples, the pinned pool's pins, event queries), checked against the virtual GPU's own counts,
# call by call: under the preload the driver sees gpumem's calls plus the program's own forwarded
# ones (those of the same run without gpumem), except the calls gpumem answers itself
# (cuMemAlloc/cuMemFree, cuMemGetInfo, pinned host memory), which are gpumem's alone.
# cuEventCreate has no cost in the virtual GPU's table, so it is not in its counts.
# (The free's cuCtxSynchronize, cuMemGetInfo and cuEventQuery were left out: 9002 syncs against
# 2 recorded for order_app.)
for app in rt_app frag_app order_app; do
  [[ -x $APPS/$app ]] || continue
  GPUMEM_DB="$TMP/drv-$app.db" run_pre "$TMP/drv-$app.out" "$TMP/drv-$app.err" "$APPS/$app" || fail "$app under the preload"
  run_plain "$TMP/drvp-$app.out" "$TMP/drvp-$app.err" "$APPS/$app" || fail "$app without the preload"
  names=$( { awk '$1=="gpumem" && $2=="sim:" && $3 ~ /^cu/ && $4 ~ /^[0-9]+$/ {print $3}' "$TMP/drv-$app.err"
             sqlite3 "$TMP/drv-$app.db" "select substr(key, 13) from meta where key like 'stat.driver.%'"; } |
           grep -vx cuEventCreate | sort -u)
  bad=""
  for c in $names; do
    rec=$(sqlite3 "$TMP/drv-$app.db" "select value from meta where key = 'stat.driver.$c'"); rec=${rec:-0}
    own=$(simcount "$TMP/drvp-$app.err" "$c")
    case $c in cuMemAlloc|cuMemFree|cuMemGetInfo|cuMemHostAlloc|cuMemFreeHost) own=0 ;; esac
    [[ $(simcount "$TMP/drv-$app.err" "$c") == $((rec + own)) ]] ||
      bad+=" $c: virtual GPU $(simcount "$TMP/drv-$app.err" "$c"), recorded $rec + the program's own $own;"
  done
  check_eq "$app: the recording counts every driver call gpumem made (against the virtual GPU's counts)" "${bad:-none}" none
done
finish
