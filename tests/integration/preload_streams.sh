#!/usr/bin/env bash
# Properties of gpumem's stream handling in a real program (tests/apps/streams_app.c):
#   - per-thread default streams are distinct streams (cudaStreamPerThread, and stream 0 in a
#     --default-stream per-thread build) (thread B never gets the block thread A
#     freed in stream order on its own per-thread stream), and 0 / cudaStreamLegacy are one; a
#     thread's per-thread stream is forgotten when the thread exits;
#   - two devices with streams on both and peer copies: each device's memory freed while the
#     other device is current is fenced in its own context (on the asynchronous virtual GPU a
#     slow kernel on the block's device would otherwise see the next owner's bytes);
#   - CUDA graphs: a capture with allocations inside it (the driver's memory nodes, which gpumem
#     passes through) is instantiated and replayed while the program allocates around it, and
#     nothing the graph uses is handed out until the graph is destroyed; the report's "CUDA
#     graphs" shows the two memory nodes;
#   - cudaIpcGetMemHandle on gpumem memory fails with cudaErrorNotSupported and one line that
#     says why and names the ways out (a shareable handle; GPUMEM_MODE=record); the shareable
#     handle works: gpumem's memory is created exportable as a POSIX fd where the device says so
#     (the virtual GPU with memory backing does), and the imported handle shows the block's bytes;
#   - gpumem_record_stream is exported, accepts a gpumem block (interior pointers too), refuses a
#     host pointer, and the recording holds it as event kind 21 'record_stream' (addr = the
#     pointer, stream = the stream);
#   - access tracking's uses fence a block: allocated on stream A, read by a slow kernel on stream
#     B (no record_stream), freed in stream order on A and allocated again on A, the kernel never
#     sees the next owner's bytes on the asynchronous virtual GPU; with tracking off
#     (GPUMEM_USES=0) the same program is caught by its canary (the check can fail);
#   - the launch hook's memo of a stream with nothing to add (preload/uses.c, use_streams) goes
#     stale when the blocks' streams change: a kernel on B found nothing to add (B had every
#     block, or the device no allocator yet), then a block not on B is read on B and freed in
#     order on its own stream: fresh (no allocator when B's kernel ran), mixed (the first block
#     on A), reset (cudaDeviceReset in between); each row fails where the memo is not dropped
#     (the canary sees the next owner's bytes); and with two threads (uses-memo-threads): one
#     launches on B, the first kernel with nothing to add and then one after another, while the
#     main thread makes the block on another stream and hands it over (rounds fresh and mixed,
#     each from a fresh allocator); a launching thread that kept its memo across the other
#     thread's change fails the same way (under TSan too: the memo's generation, the allocator's
#     flags and the launch path read while another thread allocates);
#   - streams created and destroyed by the thousand give their reserved address space back: with
#     a 4 TiB virtual device (each stream's pool reserves 4 TiB of address space) the host's
#     128 TiB would run out after ~30 streams otherwise.
source tests/integration/preload_common.bash
need "$LIB" "$APPS/streams_app" "$APPS/streams_app_ptsz"

LD_PRELOAD=$LIB "$APPS/streams_app" ptds >"$TMP/ptds.out" 2>"$TMP/ptds.err"
check_eq "per-thread default streams: exit status" "$?" 0
cat "$TMP/ptds.out"

GPUMEM_SIM_ASYNC=1 LD_PRELOAD=$LIB "$APPS/streams_app" ptds >"$TMP/ptds-async.out" 2>"$TMP/ptds-async.err"
check_eq "per-thread default streams, asynchronous virtual GPU: exit status" "$?" 0
# built as with --default-stream per-thread: stream 0 is each thread's own (the _ptsz names)
LD_PRELOAD=$LIB "$APPS/streams_app_ptsz" ptds >"$TMP/ptsz.out" 2>"$TMP/ptsz.err"
check_eq "a --default-stream per-thread build, stream 0 in two threads: exit status" "$?" 0

GPUMEM_STATS=1 LD_PRELOAD=$LIB "$APPS/streams_app" ptds-exit 64 >"$TMP/ptdsx.out" 2>"$TMP/ptdsx.err"
check_eq "64 threads' per-thread streams, then 50 cudaFree: exit status" "$?" 0
# each cudaFree fences the legacy stream (and nothing of the 64 exited threads: 64 events each)
ev=$(stat "$TMP/ptdsx.err" dev0.events_recorded)
if [[ $ev -le 100 ]]; then pass "exited threads' streams are not fenced ($ev events for 50 frees)"
else fail "exited threads' streams are still fenced: $ev events for 50 frees"; fi

# free_sync:none: cudaFree does not synchronize first, so its frees take the fence path
GPUMEM_CONF=free_sync:none GPUMEM_SIM_DEVICES=2 GPUMEM_STATS=1 LD_PRELOAD=$LIB "$APPS/streams_app" multidev >"$TMP/md.out" 2>"$TMP/md.err"
check_eq "two devices, streams on both, peer copies: exit status" "$?" 0
for d in 0 1; do
  check_gt "device $d: its frees recorded events in its own context" "$(stat "$TMP/md.err" dev$d.events_recorded)" 0
done
GPUMEM_SIM_ASYNC=1 GPUMEM_SIM_DEVICES=2 LD_PRELOAD=$LIB "$APPS/streams_app" multidev >"$TMP/md-async.out" 2>"$TMP/md-async.err"
check_eq "two devices on the asynchronous virtual GPU (a free from the other device's context waits for the block's own device): exit status" "$?" 0
cat "$TMP/md-async.out"

for async in 0 1; do
  GPUMEM_DB="$TMP/graph$async.db" GPUMEM_SIM_ASYNC=$async LD_PRELOAD=$LIB "$APPS/streams_app" graph >"$TMP/graph$async.out" 2>"$TMP/graph$async.err"
  check_eq "a graph with allocations inside, captured, instantiated, replayed (async $async): exit status" "$?" 0
  cat "$TMP/graph$async.out"
done
# the report's "CUDA graphs": the capture's two allocations are the driver's memory nodes (no
# pool of gpumem's: that is the pluggable allocator's, tests/torch/torch_graphs.sh)
check_eq "gpumem report --json .graphs: the graph's memory nodes, no capture pool" \
  "$("$BUILD/gpumem" report --json "$TMP/graph0.db" | jq -c '[.graphs.memory_nodes, .graphs.capture_pools]')" \
  '[{"allocations":2,"bytes":32768},null]'
check_eq "gpumem report: the memory nodes line" \
  "$("$BUILD/gpumem" report "$TMP/graph0.db" | grep -c '^  memory nodes  *2 graph allocations made by the driver')" 1

LD_PRELOAD=$LIB "$APPS/streams_app" ipc >"$TMP/ipc.out" 2>"$TMP/ipc.err"
check_eq "IPC: exit status" "$?" 0
check_eq "cudaIpcGetMemHandle on gpumem memory: refused as not supported, both times" \
  "$(awk '$1 == "ipc" {print $3}' "$TMP/ipc.out" | sort -u)" cudaErrorNotSupported
grep cudaIpcGetMemHandle "$TMP/ipc.err" >"$TMP/ipc.reason"
check_eq "the reason is one line, once" "$(wc -l <"$TMP/ipc.reason")" 1
check_eq "it names both ways out" \
  "$(grep -c 'cuMemExportToShareableHandle.*GPUMEM_MODE=record' "$TMP/ipc.reason")" 1
cat "$TMP/ipc.reason"
check_eq "a gpumem block's handle exported as a POSIX fd and imported shows its bytes" \
  "$(grep -c '^ipc-export ok' "$TMP/ipc.out")" 1

GPUMEM_DB="$TMP/rs.db" LD_PRELOAD=$LIB "$APPS/streams_app" record >"$TMP/rs.out" 2>"$TMP/rs.err"
check_eq "record_stream: exit status" "$?" 0
read -r _ ptr stream < <(grep '^record ' "$TMP/rs.out")
q() { sqlite3 "$TMP/rs.db" "$1"; }
check_eq "one record_stream event, on the block's pointer and the named stream" \
  "$(q "SELECT count(*) FROM events e JOIN streams s ON s.id = e.stream
         WHERE e.kind = 21 AND e.addr = $((ptr + 4096)) AND s.handle = $stream")" 1
check_eq "kind 21 is named" "$(q "SELECT name FROM kinds WHERE id = 21")" record_stream
check_eq "the schema says 1.4" "$(q "SELECT value FROM meta WHERE key = 'schema_minor'")" 4

GPUMEM_SIM_ASYNC=1 GPUMEM_DB="$TMP/uses.db" LD_PRELOAD=$LIB "$APPS/streams_app" uses >"$TMP/uses.out" 2>"$TMP/uses.err"
check_eq "a block used by a kernel on another stream (seen by access tracking) is not reused under it: exit status" "$?" 0
cat "$TMP/uses.out"
if [[ ${SAN:-} == thread ]]; then
  # the reuse it provokes is a data race between the kernel and the next owner, which TSan
  # reports (as it would any row here where the block is reused under the kernel)
  echo "note: no run without access tracking under ThreadSanitizer (its reuse is a race on purpose)"
else
  GPUMEM_USES=0 GPUMEM_SIM_ASYNC=1 GPUMEM_DB="$TMP/uses0.db" LD_PRELOAD=$LIB "$APPS/streams_app" uses >"$TMP/uses0.out" 2>"$TMP/uses0.err"
  check_eq "without access tracking the canary catches the reuse (the check can fail): exit status" "$?" 1
  check_eq "... the kernel saw the next owner's bytes" "$(grep -c 'saw its block overwritten' "$TMP/uses0.out")" 1
fi
for how in fresh mixed reset; do
  GPUMEM_SIM_ASYNC=1 GPUMEM_DB="$TMP/memo-$how.db" LD_PRELOAD=$LIB "$APPS/streams_app" uses-memo "$how" \
    >"$TMP/memo-$how.out" 2>"$TMP/memo-$how.err"
  check_eq "uses-memo $how: the block read on B after the hook remembered B with nothing to add is not reused under it: exit status" "$?" 0
done
GPUMEM_SIM_ASYNC=1 GPUMEM_DB="$TMP/memo-threads.db" LD_PRELOAD=$LIB "$APPS/streams_app" uses-memo-threads 8 \
  >"$TMP/memo-threads.out" 2>"$TMP/memo-threads.err"
check_eq "uses-memo-threads: a block made on A by one thread while another launches on B, read on B: not reused under it: exit status" "$?" 0
cat "$TMP/memo-threads.out"

if [[ ${SAN:-} == thread ]]; then
  echo "note: no 4 TiB address ranges under ThreadSanitizer (its shadow memory takes the space)"
else
  GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=4T LD_PRELOAD=$LIB "$APPS/streams_app" churn 2000 \
    >"$TMP/churn.out" 2>"$TMP/churn.err"
  check_eq "2000 streams created and destroyed on a 4 TiB device: exit status" "$?" 0
  head -3 "$TMP/churn.out"
fi

cat "$TMP"/*.err >"$TMP/all.err"
grep -q "ERROR: \(Address\|Thread\)Sanitizer\|WARNING: ThreadSanitizer" "$TMP/all.err" && { fail "sanitizer report"; head -60 "$TMP/all.err"; }
finish
