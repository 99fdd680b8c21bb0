#!/usr/bin/env bash
# The recorded configuration's replay equals the run also when several threads allocate at once
# (alloc/README.md, "Releasing without synchronizing"; alloc_malloc_notify). Each row records a
# multi-threaded app under preset:gpumem REPEAT times (default 3); every recording must have:
#   order  its allocation events in the order the allocator served them (alloc_id, numbered
#          under the allocator's lock, rising with seq on each device): the event is written
#          inside the lock, as a free's is (heap_freed). Before, it was written after the
#          allocator returned, and a thread descheduled there had its allocation recorded after
#          frees other threads made later: 16-27 allocations out of order a run of stress_app
#          (alloc 314 of thread 3 written after 39 frees of blocks allocated after it);
#   exact  `gpumem tune --json`'s replay of the recorded configuration and `gpumem-replay
#          --markers` of the exported trace find the recorded peak reserved to the byte, and the
#          replay's cache hits and misses are the run's (allocations flagged 256 / 512). Before:
#          hits and misses off in every stress_app recording (1022/202 against the run's 1009/215),
#          the peak 2-14 MiB over or 2-4 MiB under in most.
#   stress   tests/apps/stress_app: 8 threads, cudaMalloc/cudaFree and cudaMallocAsync/
#            cudaFreeAsync on per-thread streams, frees handed to other threads
#   streams  tests/apps/streams_stress 1 8 4: 8 threads on 4 streams each, record_stream
# on the virtual GPU as is, asynchronous (GPUMEM_SIM_ASYNC=1) and with events delayed 3 times.
set -euo pipefail
BUILD=${BUILD:-build}
GM=$BUILD/gpumem REPLAY=$BUILD/alloc/gpumem-replay APPS=$BUILD/tests/apps
for f in "$GM" "$REPLAY" "$APPS/stress_app" "$APPS/streams_stress"; do
  [[ -x $f ]] || { echo "replay_threads: $f not built" >&2; exit 1; }
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gmthreads-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail() { echo "replay_threads: FAIL: $*" >&2; exit 1; }
export GPUMEM_SIM_BACKING=memory GPUMEM_SIM_MEMORY=80G
unset GPUMEM_CONF GPUMEM_SIM_ASYNC GPUMEM_SIM_EVENT_DELAY

# allocation events whose alloc_id is below an earlier one's on the same device
out_of_order() {
  sqlite3 "$1" "SELECT count(*) FROM (SELECT alloc_id, max(alloc_id) OVER (PARTITION BY device
    ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before FROM events
    WHERE kind IN (1, 3) AND device >= 0) WHERE alloc_id < before"
}
replay_of() { "$REPLAY" --top-down --markers --conf preset:gpumem "$1"; }

rows=0
for app in stress streams; do
  case $app in
  stress) cmd=("$APPS/stress_app") ;;
  streams) cmd=("$APPS/streams_stress" 1 8 4) ;;
  esac
  for env in plain GPUMEM_SIM_ASYNC=1 GPUMEM_SIM_EVENT_DELAY=3; do
    e=()
    [[ $env == plain ]] || e=("$env")
    for rep in $(seq 1 "${REPEAT:-3}"); do
      row="$app, $env, recording $rep"
      rm -f "$TMP/x.db"
      env "${e[@]}" GPUMEM_CONF=preset:gpumem "$GM" record -q -o "$TMP/x.db" -- "${cmd[@]}" > "$TMP/x.txt" 2>&1 \
        || { cat "$TMP/x.txt"; fail "$row: the run"; }
      grep -q ': ok' "$TMP/x.txt" || { cat "$TMP/x.txt"; fail "$row: the app did not say ok"; }
      n=$(sqlite3 "$TMP/x.db" "SELECT count(*) FROM events WHERE kind IN (1, 3) AND device >= 0")
      [[ $n -gt 500 ]] || fail "$row: $n allocations recorded, want more than 500"
      ooo=$(out_of_order "$TMP/x.db")
      "$GM" tune --json "$TMP/x.db" > "$TMP/x.json" || fail "$row: tune"
      read -r rec tun < <(jq -r '.recorded as $r | [$r.peak_reserved, ([.results[] | select(.conf == $r.conf)][0].peak_reserved)] | @tsv' "$TMP/x.json")
      "$GM" export --format trace "$TMP/x.db" > "$TMP/x.trace" || fail "$row: export"
      rout=$(replay_of "$TMP/x.trace")
      rp=$(grep -o ' peak_reserved=[0-9]*' <<<"$rout" | cut -d= -f2)
      rh=$(grep -o ' cache_hits=[0-9]* cache_misses=[0-9]*' <<<"$rout" | sed 's/ cache_hits=//; s/ cache_misses=/ /')
      runh=$(sqlite3 "$TMP/x.db" "SELECT sum((flags & 256) != 0) || ' ' || sum((flags & 512) != 0) FROM events WHERE kind IN (1, 3)")
      echo "$row: $n allocations, $ooo out of the allocator's order; peak reserved $rec, tune $tun, gpumem-replay --markers $rp; hits/misses run $runh, replay $rh"
      [[ $ooo == 0 ]] || fail "$row: $ooo allocation events out of the order the allocator served them (alloc_id against seq)"
      [[ $tun == "$rec" ]] || fail "$row: tune's replay of the recorded configuration finds $tun, the run reserved $rec"
      [[ $rp == "$rec" ]] || fail "$row: gpumem-replay --markers of the exported trace finds $rp, the run reserved $rec"
      [[ $rh == "$runh" ]] || fail "$row: gpumem-replay --markers finds cache hits and misses $rh, the run's allocations say $runh"
      rows=$((rows + 1))
    done
  done
done
echo "ok: $rows multi-threaded recordings in the allocator's order, their replays exact"
