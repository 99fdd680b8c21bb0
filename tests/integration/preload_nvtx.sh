#!/usr/bin/env bash
# Property: a plain C program using the toolkit's NVTX3 headers (no gpumem header) has its
# ranges delivered to gpumem through NVTX injection, with the right nesting on each thread:
# every push and pop nvtx_app says it made ("expect ..." lines) is what gpumem received
# (GPUMEM_DEBUG_RANGES dump), thread by thread, in order — including event-attribute ranges
# and a domain range named by a registered string. The program's output is the same without
# gpumem. Recorded, the threads carry the names nvtxNameOsThreadA gave them, and a wide-string
# range (nvtxRangePushW) is named in UTF-8, with '?' for each value that is no character. With
# another tool in NVTX_INJECTION64_PATH, gpumem chains to it: both receive.
source tests/integration/preload_common.bash
need "$LIB" "$APPS/nvtx_app"
"$APPS/nvtx_app" >"$TMP/plain.out" || fail "nvtx_app failed without the preload"
GPUMEM_DEBUG_RANGES=$TMP/ranges LD_PRELOAD=$LIB "$APPS/nvtx_app" >"$TMP/pre.out" 2>"$TMP/pre.err" ||
    fail "nvtx_app failed under the preload"
# thread order in the output varies run to run: compare per thread
for t in worker0 worker1; do
  grep " $t " "$TMP/plain.out" >"$TMP/plain.$t"; grep " $t " "$TMP/pre.out" >"$TMP/pre.$t"
  same_output "nvtx_app $t" "$TMP/plain.$t" "$TMP/pre.$t"
done
[[ -s $TMP/ranges ]] || fail "no range dump written"
# gpumem's dump names threads by OS id; nvtxNameOsThreadA told it which is which
awk '$1=="thread" {name[$2]=$3; next}
     ($1=="push" || $1=="pop") && ($2 in name) {print "expect", $1, name[$2], $3, $4, $5}' \
    "$TMP/ranges" >"$TMP/received"
for t in worker0 worker1; do
  grep "^expect push $t \|^expect pop $t " "$TMP/pre.out" >"$TMP/want.$t"
  grep " $t " "$TMP/received" >"$TMP/got.$t"
  check_gt "$t ranges expected" "$(wc -l <"$TMP/want.$t")" 10
  same_output "$t ranges received with their nesting" "$TMP/want.$t" "$TMP/got.$t"
done
check_eq "marks received" "$(grep -c '^mark .* - tick$' "$TMP/ranges")" 12
check_eq "domain received" "$(grep -c '^domain train$' "$TMP/ranges")" 1
run_id=$(awk '$1=="start" && $5=="run" {print $2}' "$TMP/ranges")
check_eq "wide names received as UTF-8" "$(sed -n 's/^push [0-9]* 1 - \(pas .*\|x.*\)$/\1/p' "$TMP/ranges" | paste -sd'|')" \
    "pas ✓é|x??y"
check_eq "start/end range received with its id" "$(awk -v id="$run_id" '$1=="end" && $2==id' "$TMP/ranges" | wc -l)" 1

# recorded: the names nvtxNameOsThreadA gave are the threads' names in the database (the
# threads keep the process's pthread name, nvtx_app, otherwise)
GPUMEM_DB=$TMP/nvtx.db LD_PRELOAD=$LIB "$APPS/nvtx_app" >"$TMP/rec.out" 2>"$TMP/rec.err" ||
    fail "nvtx_app failed while recorded"
check_eq "threads named by NVTX in the recording" \
    "$(sqlite3 "$TMP/nvtx.db" "SELECT group_concat(name, ' ') FROM (SELECT name FROM threads WHERE name LIKE 'worker%' ORDER BY name)")" \
    "worker0 worker1"
check_eq "wide range names in the recording" \
    "$(sqlite3 "$TMP/nvtx.db" "SELECT group_concat(path, '|') FROM (SELECT path FROM ranges WHERE path IN ('pas ✓é', 'x??y') ORDER BY id)")" \
    "pas ✓é|x??y"

# chaining: a tool set before gpumem keeps receiving
if [[ -e $APPS/nvtx_tool.so ]]; then
  NVTX_INJECTION64_PATH=$PWD/$APPS/nvtx_tool.so GPUMEM_DEBUG_RANGES=$TMP/ranges2 LD_PRELOAD=$LIB \
      "$APPS/nvtx_app" >"$TMP/chain.out" 2>"$TMP/chain.err" || fail "nvtx_app failed with a chained tool"
  check_eq "chained tool received every push" "$(awk '/^nvtx_tool: pushes/ {print $3}' "$TMP/chain.err")" \
      "$(grep -c '^expect push' "$TMP/chain.out")"
  check_eq "chained tool received every pop" "$(awk '/^nvtx_tool: pops/ {print $3}' "$TMP/chain.err")" \
      "$(grep -c '^expect pop' "$TMP/chain.out")"
  check_eq "gpumem still received every push" "$(grep -c '^push' "$TMP/ranges2")" \
      "$(grep -c '^expect push' "$TMP/chain.out")"
  check_eq "chained tool's domain handle resolved" "$(awk '/^nvtx_tool: domain pushes/ {print $4}' "$TMP/chain.err")" 6
fi
finish
