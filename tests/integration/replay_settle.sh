#!/usr/bin/env bash
# The recorded configuration's replay settles frees where the run did (alloc/README.md,
# "Releasing without synchronizing"). gpumem's release before growth unmaps only pages whose
# frees are settled: by a marker it found complete (trace `mr` / `md`), by a synchronization of
# its own (`sy`, `sr`: kind 41), or at once for a cudaFree after the program's synchronization
# (`fs`: a free flagged 256). Each row records tests/apps/frag_app under preset:gpumem on the
# asynchronous virtual GPU or with delayed events, and `gpumem tune --json` (its result for the
# recorded configuration) and `gpumem-replay --markers` of the exported trace must both find the
# recorded peak reserved to the byte.
#   syncfree  a third of the frees are plain cudaFree's (free_sync:device) among stream-ordered
#             frees on the other stream: before `fs`, the replay settled them only at the next
#             marker of their stream (2 MiB over the run: asynchronous, events delayed 3 or 5 times).
#   destroy   a stream made, used and destroyed each round: the allocator synchronizes before it
#             forgets a stream that holds memory; before `sy`, the replay had no line for it and
#             kept what the run gave back (25-31 MiB over on the asynchronous GPU). Then it
#             releases the forgotten stream's free pages (kind 42, `sf <stream>`): before `sf`,
#             the replay kept them mapped in the dead stream's pool and later releases unmapped
#             other pages than the run's (the peak the same, 276 cache hits against the run's 286
#             with events delayed 3 times).
# Every row: the replay's cache hits and misses are the run's (the allocations flagged 256 / 512).
#   oom       a 48 MiB per-process fraction first (the trace's `l`), so that the OOM path
#             synchronizes, then growth from what it left. The replay's own OOM path synchronizes
#             where the run's did (exact before kind 41 too); once recorded, a synchronization inside an allocation
#             is replayed at its step: the lines of an allocation come before it in the trace, and
#             taken all at once (steps dropped) they settle the allocation's first release early
#             (checked: that replay differs with delayed events).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../pipe.bash" # grepq
BUILD=${BUILD:-build}
GM=$BUILD/gpumem APP=$BUILD/tests/apps/frag_app REPLAY=$BUILD/alloc/gpumem-replay
for f in "$GM" "$APP" "$REPLAY"; do [[ -x $f ]] || { echo "replay_settle: $f not built" >&2; exit 1; }; done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gmsettle-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail() { echo "replay_settle: FAIL: $*" >&2; exit 1; }
# the memsets touch their blocks: backed by host memory (only the pages touched take any)
export GPUMEM_SIM_BACKING=memory GPUMEM_SIM_MEMORY=80G

peak_of() { "$REPLAY" --top-down --markers --conf preset:gpumem "$1" | grep -o ' peak_reserved=[0-9]*' | cut -d= -f2; }
hits_of() { "$REPLAY" --top-down --markers --conf preset:gpumem "$1" | grep -o ' cache_hits=[0-9]* cache_misses=[0-9]*' | sed 's/ cache_hits=//; s/ cache_misses=/ /'; }
stepless_differs=0
for mode in ${MODES:-syncfree destroy oom}; do
  for env in GPUMEM_SIM_ASYNC=1 GPUMEM_SIM_EVENT_DELAY=1 GPUMEM_SIM_EVENT_DELAY=3 GPUMEM_SIM_EVENT_DELAY=5; do
    row="$mode, $env"
    env "$env" GPUMEM_CONF=preset:gpumem "$GM" record -q -o "$TMP/x.db" -- "$APP" "$mode" > "$TMP/x.txt" 2>&1 \
      || { cat "$TMP/x.txt"; fail "$row: the run"; }
    "$GM" tune --json "$TMP/x.db" > "$TMP/x.json" || fail "$row: tune"
    read -r rec tun < <(jq -r '.recorded as $r | [$r.peak_reserved, ([.results[] | select(.conf == $r.conf)][0].peak_reserved)] | @tsv' "$TMP/x.json")
    "$GM" export --format trace "$TMP/x.db" > "$TMP/x.trace" || fail "$row: export"
    rep=$(peak_of "$TMP/x.trace")
    echo "$row: recorded peak reserved $rec, tune $tun, gpumem-replay --markers $rep"
    [[ $tun == "$rec" ]] || fail "$row: tune's replay of the recorded configuration finds $tun, the run reserved $rec"
    [[ $rep == "$rec" ]] || fail "$row: gpumem-replay --markers of the exported trace finds $rep, the run reserved $rec"
    rhits=$(sqlite3 "$TMP/x.db" "SELECT sum((flags & 256) != 0) || ' ' || sum((flags & 512) != 0) FROM events WHERE kind IN (1, 3)")
    phits=$(hits_of "$TMP/x.trace")
    [[ $phits == "$rhits" ]] || fail "$row: gpumem-replay --markers finds cache hits and misses $phits, the run's allocations say $rhits"
    case $mode in
    syncfree)
      # 16 of each round's 48 frees, 8 rounds; the free events say so, the trace has them as fs
      n=$(sqlite3 "$TMP/x.db" "SELECT count(*) FROM events WHERE kind = 2 AND (flags & 256) != 0")
      [[ $n == 128 && $(grep -c '^fs ' "$TMP/x.trace") == 128 ]] || fail "$row: $n synchronized frees recorded, want 128 (and as many fs lines)"
      ;;
    destroy)
      # one synchronization a destroyed stream at least, outside any allocation (step 0; its
      # wait's number where it dropped the lock: `sy 0 <wait>`)
      [[ $(grep -cE '^sy( 0 [0-9]+)?$' "$TMP/x.trace") -ge 8 ]] || fail "$row: fewer than 8 sy lines for 8 streams destroyed"
      [[ $(sqlite3 "$TMP/x.db" "SELECT name FROM kinds WHERE id = 41") == alloc_sync ]] || fail "kind 41 is not named"
      # each destroyed stream forgotten, after the synchronization its memory needed
      [[ $(grep -c '^sf [0-9]*$' "$TMP/x.trace") == 8 ]] || fail "$row: want 8 'sf <stream>' lines for 8 streams destroyed holding memory"
      [[ $(sqlite3 "$TMP/x.db" "SELECT name FROM kinds WHERE id = 42") == stream_forget ]] || fail "kind 42 is not named"
      ;;
    oom)
      grep -q '^sy [0-9]' "$TMP/x.trace" || fail "$row: no synchronization inside an allocation (sy <step>)"
      grep -q '^l ' "$TMP/x.trace" || fail "$row: the fraction the allocator applied is not in the trace (l)"
      # (and its waits: where the allocation's synchronization dropped the lock, the replay takes
      # its part before the wait at the `sw`, which orders its lines without their steps)
      sed -e 's/^\(m[rd] [0-9]*\) [0-9]*$/\1/' -e 's/^sy [0-9]*\( [0-9]*\)\?$/sy/' -e 's/^sr [0-9]*$/sr/' \
        -e '/^sw /d' -e 's/^fy /fc /' "$TMP/x.trace" > "$TMP/stepless.trace"
      sl=$(peak_of "$TMP/stepless.trace")
      echo "  (steps dropped: $sl)"
      [[ $sl != "$rec" ]] && stepless_differs=$((stepless_differs + 1))
      ;;
    esac
    rm -f "$TMP/x.db"
  done
done
[[ $stepless_differs -gt 0 ]] || fail "oom: the replay with the steps dropped is exact in every row: the rows do not tell the order within an allocation"
echo "ok: synchronized frees, the allocator's synchronizations and their steps replay to the recorded peak reserved exactly"
