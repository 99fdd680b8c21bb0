#!/usr/bin/env bash
# One definition of the peaks, whatever kind of memory the program holds (README, "What each
# figure counts"): for each kind (tests/apps/kinds_app: device, the program's own VMM, a pool
# allocation passed through, pinned host, managed; CUDA arrays as rows, which the virtual GPU
# cannot make), every command's peak figures agree with SQL over the events and with each other:
#   - peak requested and allocated: the running sum of the device allocations and their frees
#     (kinds 1 and 3, frees matched by alloc_id: the reviewer's peak.sql), at the same event;
#   - peak reserved: the running sum of gpumem's segments (kinds 14/18 up, 15/19 down) and of
#     the allocations passed through as their own segments (flag 2048 or 16384, to their free);
#   - the same figures in report --json, the summary line of `gpumem record`, export --format
#     folded (sums to the peak allocated), chrome's reserved counter, viz's page, export torch -> import, frag, tune,
#     advise, diff;
#   - the kind is in the allocations' peaks exactly where the table says (device, pool, graph:
#     yes; vmm, array, host, managed: no), and the program's VMM is shown as held outside;
#   - pinned host and managed memory have bytes of their own (report said "pinned host 1" and
#     no bytes): .summary.host_bytes / peak_host_bytes / managed_bytes / peak_managed_bytes are
#     SQL's sums and running sums over kinds 5/6 and 7/8, and the text's lines say them.
# And, in gpumem's allocator (replace) and passed through (GPUMEM_MODE=record), every event of
# device memory is on a device (a free or unmap on its allocation's, where the freeing thread's
# current device is unknown: a graph's free node, the driver API) and each stream is one row.
# And in both modes alike (the second table): the kind's allocation carries the same flag (16384 a
# graph's memory node, captured or made node by node: cudaGraphAddMemAllocNode, the generic
# cuGraphAddNode, cuGraphAddMemAllocNode called by its name or through cudaGetDriverEntryPoint*;
# 2048 a pool's: cudaMallocFromPoolAsync, or cudaMallocAsync / cuMemAllocAsync after the program
# set the device's pool with cudaDeviceSetMemPool, cuDeviceSetMemPool or cuMemSetMemPool, which
# record mode once left unflagged and missed node by node) on the same
# device (a pool's: the pool's device, whatever the stream's is: runtime and driver), and export
# --format torch's device_traces agree with its segments (every alloc inside a segment the trace
# made, the segments left at the end those `segments` lists). Then the OOMs' limits (the third
# table): a limit of 0 bytes is a limit, none is null, in the database, report, advise and the
# replay, and a request the driver refused has no limit there (gpumem's limit does not cap what
# it passes through: record mode, a pool's allocation), old files' 0 read as none; the torch export's oom entries become the parity
# converter's `ao` lines, as export --format trace writes them.
set -uo pipefail
BUILD=${BUILD:-build}
GM=$PWD/$BUILD/gpumem
APP=$PWD/$BUILD/tests/apps/kinds_app
for f in "$GM" "$APP" "$BUILD/libgpumem.so"; do [[ -e $f ]] || { echo "missing $f (run make)" >&2; exit 1; }; done
command -v jq > /dev/null || { echo "FAIL: jq is missing (make deps installs it)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/gpumem-kinds.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
unset GPUMEM_MODE GPUMEM_LIMIT GPUMEM_CONF GPUMEM_DB
export GPUMEM_QUIET=1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# SQL's peaks: "requested allocated reserved" (peak.sql's running sums)
sql_peaks() {
  sqlite3 -separator ' ' "$1" "
    WITH a AS (SELECT alloc_id, requested, size FROM events WHERE kind IN (1, 3)),
    ev AS (SELECT e.seq, CASE WHEN e.kind IN (1, 3) THEN e.requested ELSE -a.requested END dreq,
                         CASE WHEN e.kind IN (1, 3) THEN e.size ELSE -a.size END dsz
           FROM events e LEFT JOIN a ON a.alloc_id = e.alloc_id AND e.kind IN (2, 4)
           WHERE e.kind IN (1, 3) OR (e.kind IN (2, 4) AND a.alloc_id IS NOT NULL)),
    run AS (SELECT sum(dreq) OVER (ORDER BY seq) r, sum(dsz) OVER (ORDER BY seq) s FROM ev),
    own AS (SELECT alloc_id, size FROM events WHERE kind IN (1, 3) AND flags & (2048 | 16384)),
    seg AS (SELECT sum(CASE WHEN e.kind IN (14, 18) OR (e.kind IN (1, 3) AND own.alloc_id IS NOT NULL) THEN e.size
                            WHEN e.kind IN (2, 4) THEN -own.size ELSE -e.size END) OVER (ORDER BY e.seq) v
            FROM events e LEFT JOIN own ON own.alloc_id = e.alloc_id AND e.kind IN (1, 2, 3, 4)
            WHERE e.kind IN (14, 15, 18, 19) OR (e.kind IN (1, 2, 3, 4) AND own.alloc_id IS NOT NULL))
    SELECT (SELECT max(r) FROM run), (SELECT max(s) FROM run), (SELECT coalesce(max(v), 0) FROM seg)"
}

# pinned host and managed bytes: "host total, host peak, managed total, managed peak" (running
# sums: a free row carries its allocation's size)
sql_held() {
  sqlite3 -separator ' ' "$1" "
    WITH h AS (SELECT sum(CASE kind WHEN 5 THEN size ELSE -size END) OVER (ORDER BY seq) v FROM events WHERE kind IN (5, 6)),
    m AS (SELECT sum(CASE kind WHEN 7 THEN size ELSE -size END) OVER (ORDER BY seq) v FROM events WHERE kind IN (7, 8))
    SELECT (SELECT coalesce(sum(size), 0) FROM events WHERE kind = 5), (SELECT coalesce(max(v), 0) FROM h),
           (SELECT coalesce(sum(size), 0) FROM events WHERE kind = 7), (SELECT coalesce(max(v), 0) FROM m)"
}

# kind | in the allocations' peaks | program VMM at its peak
table="none no 0
device yes 0
vmm no 8388608
pool yes 0
setpool yes 0
graph yes 0
graphnode yes 0
graphadd yes 0
host no 0
managed no 0
array no 0"

while read -r kind counted vmm; do
  db=$TMP/$kind.db
  if [[ $kind == array ]]; then
    # the virtual GPU has no arrays: the run of nothing more with an 8 MiB array's rows (kinds 27, 28,
    # as the recorder writes them) after its last event, where nothing else is live
    cp "$TMP/none.db" "$db"
    sqlite3 "$db" "INSERT INTO events (seq, t, kind, flags, device, stream, thread, addr, size, requested, alloc_id, stack, range)
        SELECT seq + 1, t + 1, 27, 0, 0, 0, thread, 4096, 8388608, 8388608, 0, stack, range FROM events WHERE seq = (SELECT max(seq) FROM events);
      INSERT INTO events (seq, t, kind, flags, device, stream, thread, addr, size, requested, alloc_id, stack, range)
        SELECT seq + 1, t + 1, 28, 0, 0, 0, thread, 4096, 0, 0, 0, stack, range FROM events WHERE seq = (SELECT max(seq) FROM events);
      UPDATE meta SET value = value + 2 WHERE key = 'events';" || { fail "array: could not write its rows"; continue; }
    printf '' > "$TMP/$kind.rec"
  else
    "$GM" record -o "$db" -- "$APP" "$kind" > "$TMP/$kind.out" 2> "$TMP/$kind.rec" \
      || { fail "$kind: record failed: $(tail -2 "$TMP/$kind.rec")"; continue; }
  fi
  read -r sreq salloc sres < <(sql_peaks "$db")
  "$GM" report --json "$db" > "$TMP/$kind.json" 2> /dev/null || { fail "$kind: report --json failed"; continue; }
  rep=$(jq -r '.summary | "\(.peak_requested) \(.peak_allocated) \(.peak_reserved)"' "$TMP/$kind.json")
  want="$sreq $salloc $sres"
  [[ $rep == "$want" ]] && ok "$kind: report's peaks requested/allocated/reserved = SQL's ($want)" \
    || fail "$kind: report's peaks $rep, SQL's $want"
  # the kind in the allocations' peaks where the table says: a device allocation of it moves the
  # peak above A + B (4 MiB + 100 B), the others leave it there
  moved=no
  (( salloc > 5 << 20 )) && moved=yes
  rmoved=no
  (( $(jq .summary.peak_allocated "$TMP/$kind.json") > 5 << 20 )) && rmoved=yes
  [[ $moved == "$counted" && $rmoved == "$counted" ]] && ok "$kind: in the allocations' peaks: $counted" \
    || fail "$kind: in the allocations' peaks: SQL $moved, report $rmoved, the table $counted"
  want=$(sql_held "$db")
  rep=$(jq -r '.summary | "\(.host_bytes) \(.peak_host_bytes) \(.managed_bytes) \(.peak_managed_bytes)"' "$TMP/$kind.json")
  "$GM" report "$db" > "$TMP/$kind.txt" 2> /dev/null
  read -r ht hp mt mp <<< "$want"
  line() { # what total peak: the text's line (none where there is no such memory)
    (( $2 == 0 )) && { ! grep -q "^  $1  *[0-9]" "$TMP/$kind.txt"; return; }
    grep -q "^  $1  *$(awk -v b="$3" 'BEGIN {printf "%.2f MiB", b / 1048576}') at its peak, $(awk -v b="$2" 'BEGIN {printf "%.2f MiB", b / 1048576}') in all" "$TMP/$kind.txt"
  }
  [[ $rep == "$want" ]] && line "pinned host" "$ht" "$hp" && line managed "$mt" "$mp" \
    && ok "$kind: pinned host and managed bytes (in all, at the peak) = SQL's ($want), in the text too" \
    || fail "$kind: pinned host and managed bytes: report '$rep', SQL's '$want'; text: $(grep -E '^  (pinned host|managed) ' "$TMP/$kind.txt")"
  pv=$(jq .summary.peak_program_vmm "$TMP/$kind.json")
  [[ $pv == "$vmm" ]] && ok "$kind: program VMM held outside at its peak: $pv" || fail "$kind: peak_program_vmm $pv, expected $vmm"
  if [[ -s $TMP/$kind.rec ]]; then # gpumem record's summary line: the same peaks
    line=$(grep '^gpumem: peak allocated' "$TMP/$kind.rec")
    a=$(jq -r .summary.peak_allocated "$TMP/$kind.json") r=$(jq -r .summary.peak_reserved "$TMP/$kind.json")
    grep -q "reserved $(printf '%s' "$r" | awk '{printf "%.2f MiB", $1 / 1048576}')" <<< "$line" \
      && grep -q "allocated $(printf '%s' "$a" | awk '{printf "%.2f MiB", $1 / 1048576}')" <<< "$line" \
      && ok "$kind: gpumem record's summary line says the same" || fail "$kind: record's line: $line (allocated $a, reserved $r)"
  fi
  # every other command's figures
  "$GM" export --format folded "$db" -o "$TMP/$kind.folded" 2> /dev/null
  folded=$(awk '{s += $NF} END {print s + 0}' "$TMP/$kind.folded")
  "$GM" export --format chrome "$db" -o "$TMP/$kind.chrome" 2> /dev/null
  chrome=$(jq '[.traceEvents[] | select(.ph == "C") | .args.reserved] | max // 0' "$TMP/$kind.chrome")
  "$GM" viz "$db" -o "$TMP/$kind.html" 2> /dev/null
  viz=$(grep -o '"peak_allocated_bytes":[0-9]*,"peak_allocated_seq":[0-9]*,"peak_reserved_bytes":[0-9]*' "$TMP/$kind.html" \
    | sed -n 1p | sed 's/"peak_allocated_bytes":\([0-9]*\),"peak_allocated_seq":[0-9]*,"peak_reserved_bytes":\([0-9]*\)/\1 \2/')
  "$GM" export --format torch "$db" -o "$TMP/$kind.pickle" 2> /dev/null
  "$GM" import "$TMP/$kind.pickle" -o "$TMP/$kind-imp.db" > /dev/null 2>&1
  imp=$("$GM" report --json "$TMP/$kind-imp.db" 2> /dev/null | jq -r '.summary | "\(.peak_requested) \(.peak_allocated) \(.peak_reserved)"')
  frag=$("$GM" frag --json "$db" 2> /dev/null | jq -r .recorded.peak_reserved)
  tune=$("$GM" tune --json "$db" 2> /dev/null | jq -r .recorded.peak_reserved)
  adv=$("$GM" advise --json "$db" 2> /dev/null | jq -r '.recorded | "\(.peak_allocated) \(.peak_reserved)"')
  dif=$("$GM" diff --json "$db" "$db" 2> /dev/null | jq -r '.a | "\(.peak_requested) \(.peak_allocated) \(.peak_reserved)"')
  # the program's VMM said where the peaks leave it out: viz's summary, record's line
  pvz=$(grep -o '"peak_program_vmm_bytes":[0-9]*' "$TMP/$kind.html" | sed -n 1p | cut -d: -f2)
  [[ $pvz == "$vmm" ]] && ok "$kind: viz's program VMM at its peak: $pvz" || fail "$kind: viz's peak_program_vmm_bytes '$pvz', expected $vmm"
  if [[ -s $TMP/$kind.rec ]]; then
    said=0
    grep -q "program VMM $(awk -v b="$vmm" 'BEGIN {printf "%.2f MiB", b / 1048576}') at its peak" "$TMP/$kind.rec" && said=$vmm
    [[ $said == "$vmm" ]] && ok "$kind: gpumem record's summary says the program VMM where there is one" \
      || fail "$kind: record's summary on the program VMM ($vmm): $(grep '^gpumem: ' "$TMP/$kind.rec" | sed -n 1p)"
  fi
  got="folded $folded chrome $chrome viz $viz import $imp frag $frag tune $tune advise $adv diff $dif"
  exp="folded $salloc chrome $sres viz $salloc $sres import $sreq $salloc $sres frag $sres tune $sres advise $salloc $sres diff $sreq $salloc $sres"
  [[ $got == "$exp" ]] && ok "$kind: folded, viz, export torch -> import, frag, tune, advise, diff agree" \
    || fail "$kind: got      $got"$'\n'"      expected $exp"
done <<< "$table"

# kind | flag of its 8 MiB allocation (- none made) | that allocation's device | devices
table2="none - - 1
device 0 0 1
vmm - - 1
pool 2048 0 1
setpool 2048 0 1
drvsetpool 2048 0 1
memsetpool 2048 0 1
graph 16384 0 1
graphnode 16384 0 1
graphadd 16384 0 1
graphdrv 16384 0 1
graphproc 16384 0 1
pool1 2048 1 2
drvpool1 2048 1 2
host - - 1
managed - - 1"

# the torch export's device_traces against its segments: "allocs outside a segment, segment bytes
# left by the trace, bytes in segments" per device
trace_vs_segments() {
  python3 -c 'import pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
out = []
for dev, tr in enumerate(s["device_traces"]):
    live, outside = {}, 0
    for e in tr:
        a = e["action"]
        if a in ("segment_alloc", "segment_map"):
            live[e["addr"]] = e["size"]
        elif a in ("segment_free", "segment_unmap"):
            live.pop(e["addr"], None)
        elif a == "alloc" and not any(b <= e["addr"] < b + n for b, n in live.items()):
            outside += 1
    segs = sum(g["total_size"] for g in s["segments"] if g["device"] == dev)
    out.append("%d:%d/%d/%d" % (dev, outside, sum(live.values()), segs))
print(" ".join(out))' "$1" 2> /dev/null
}

# Every event of device memory on its device, each stream one row: host memory (5, 6) and managed
# memory (7, 8) alone have no device, and the one stream row of device -1 is theirs (schema.sql).
while read -r kind flag kdev ndev; do
  for mode in replace record; do
    db=$TMP/$kind-$mode-dev.db
    GPUMEM_SIM_DEVICES=$ndev GPUMEM_MODE=$mode "$GM" record -o "$db" -- "$APP" "$kind" > /dev/null 2>&1 \
      || { fail "$kind ($mode): record failed"; continue; }
    # the kind's allocation: its flag and device, its free on the same device, in both modes
    if [[ $flag != - ]]; then
      got=$(sqlite3 -separator ' ' "$db" "SELECT a.flags & (2048 | 16384), a.device, coalesce(group_concat(f.device), '-')
        FROM events a LEFT JOIN events f ON f.addr = a.addr AND f.kind IN (2, 4) AND f.seq > a.seq
        WHERE a.kind IN (1, 3) AND a.size = 8388608 GROUP BY a.seq")
      [[ $got == "$flag $kdev $kdev" ]] && ok "$kind ($mode): its allocation flagged $flag on device $kdev, freed there" \
        || fail "$kind ($mode): its allocation's flag, device, free's device: '$got', expected '$flag $kdev $kdev'"
    fi
    # export --format torch: every alloc entry inside a segment the trace made, and the segments
    # the trace leaves at the end are the ones `segments` lists (memory_viz draws them from both)
    "$GM" export --format torch "$db" -o "$TMP/$kind-$mode-end.pickle" --at end 2> /dev/null
    tv=$(trace_vs_segments "$TMP/$kind-$mode-end.pickle")
    bad=$(awk '{for (i = 1; i <= NF; i++) {split($i, p, "[:/]"); if (p[2] != 0 || p[3] != p[4]) print $i}}' <<< "$tv")
    [[ -n $tv && -z $bad ]] && ok "$kind ($mode): export torch's device_traces agree with its segments ($tv)" \
      || fail "$kind ($mode): export torch's device_traces vs segments (device:allocs outside/trace's segment bytes/segments' bytes): '$tv'"
    got=$(sqlite3 -separator ' ' "$db" "
      SELECT (SELECT coalesce(group_concat(seq || ':' || kind), '-') FROM events
              WHERE device < 0 AND kind NOT IN (5, 6, 7, 8)),
             (SELECT coalesce(group_concat(handle), '-') FROM (SELECT handle FROM streams
              WHERE device >= 0 GROUP BY handle HAVING count(*) > 1)),
             (SELECT coalesce(group_concat(DISTINCT e.kind), '-') FROM events e JOIN streams s ON s.id = e.stream
              WHERE s.device < 0 AND e.kind NOT IN (5, 6, 7, 8))")
    [[ $got == "- - -" ]] && ok "$kind ($mode): every device event on its device, each stream one row" \
      || fail "$kind ($mode): events with no device (seq:kind), streams twice (handle), device -1 stream used by (kind): $got"
    (( ndev == 1 )) || continue # the peaks below are one device's (report's summary: each device's own)
    # export --format torch at the peak: the blocks active there are the report's peak allocated,
    # whatever segments hold them (passed through, a pool's or a graph's allocation is a segment of
    # its own; the plain allocations live beside it once were left out of every segment)
    "$GM" export --format torch "$db" -o "$TMP/$kind-$mode.pickle" --at peak 2> /dev/null
    held=$(python3 -c 'import pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
print(sum(b["size"] for g in s["segments"] for b in g["blocks"] if b["state"] == "active_allocated"))' \
      "$TMP/$kind-$mode.pickle" 2> /dev/null)
    pa=$("$GM" report --json "$db" 2> /dev/null | jq -r .summary.peak_allocated)
    [[ -n $held && $held == "$pa" ]] && ok "$kind ($mode): export torch's active blocks at the peak = report's peak allocated ($pa)" \
      || fail "$kind ($mode): export torch's active blocks at the peak sum to '$held', report's peak allocated $pa"
    if [[ $mode == record ]]; then # everything passed through: each allocation its own segment
      # (passed through, every allocation has alloc_id 0: a free's size is its allocation's)
      salloc=$(sqlite3 "$db" "SELECT max(s) FROM (SELECT sum(CASE WHEN kind IN (1, 3) THEN size ELSE -size END)
                                OVER (ORDER BY seq) s FROM events WHERE kind IN (1, 2, 3, 4))")
      rep=$("$GM" report --json "$db" 2> /dev/null | jq -r '.summary | "\(.peak_allocated) \(.peak_reserved)"')
      [[ $rep == "$salloc $salloc" ]] && ok "$kind (record): peak reserved = peak allocated ($salloc)" \
        || fail "$kind (record): peaks allocated/reserved $rep, SQL's allocated $salloc"
    fi
  done
done <<< "$table2"
# The OOMs' limits: a limit of 0 bytes (GPUMEM_LIMIT=0) is a limit, an OOM with none set (a
# device of 8 MiB) has none, in both modes: NULL in ooms.limit_bytes, null in report's and
# advise's JSON, "none" in the replay's oom_limit; a file before schema 1.4 wrote 0 for none.
REPLAY=$PWD/$BUILD/alloc/gpumem-replay
oom_row() { # db -> "limit_bytes | report's limit cause limit_from | advise's limit"
  local rep adv
  rep=$("$GM" report --json "$1" 2> /dev/null | jq -r '.ooms[0] | "\(.limit) \(.cause) \(.limit_from)"')
  adv=$("$GM" advise --json --oom-step "$1" 2> /dev/null | jq -r '.oom.limit')
  echo "$(sqlite3 "$1" "SELECT quote(limit_bytes) FROM ooms ORDER BY seq LIMIT 1") | $rep | $adv"
}
GPUMEM_LIMIT=0 "$GM" record -o "$TMP/oom-limit0.db" -- "$APP" none > /dev/null 2>&1
got=$(oom_row "$TMP/oom-limit0.db")
[[ $got == "0 | 0 limit GPUMEM_LIMIT | 0" ]] && ok "GPUMEM_LIMIT=0: a limit of 0 bytes everywhere ($got)" \
  || fail "GPUMEM_LIMIT=0: limit_bytes | report's limit, cause, limit_from | advise's limit: '$got', expected '0 | 0 limit GPUMEM_LIMIT | 0'"
# The driver refused the request (a device of 8 MiB), with no limit set or with gpumem's limit set
# where it does not apply: under GPUMEM_MODE=record the program's own allocator serves, and a
# pool's allocation is passed through in both modes, so the device bound, not GPUMEM_LIMIT or
# GPUMEM_CONF's limit (preload/README.md): no limit in the OOM's record, and the device's own
# figures in it (device_free, device_total). Row: name | mode | settings | kind.
while IFS='|' read -r name mode envs kind; do
  db=$TMP/oom-$name.db
  env GPUMEM_SIM_MEMORY=8M GPUMEM_MODE=$mode $envs "$GM" record -o "$db" -- "$APP" "$kind" > /dev/null 2>&1
  got=$(oom_row "$db")
  dev=$(sqlite3 "$db" "SELECT device_free > 0 AND device_total = 8388608 FROM ooms ORDER BY seq LIMIT 1")
  [[ $got == "NULL | null device null | null" && $dev == 1 ]] && ok "$name: the device bound, no limit anywhere ($got), the device's figures kept" \
    || fail "$name: limit_bytes | report's limit, cause, limit_from | advise's limit: '$got', expected 'NULL | null device null | null'; the device's figures in the record: ${dev:-none}"
done <<'EOF3'
none-replace|replace||device
none-record|record||device
record-GPUMEM_LIMIT|record|GPUMEM_LIMIT=1G|device
record-GPUMEM_LIMIT-0|record|GPUMEM_LIMIT=0|device
record-GPUMEM_CONF|record|GPUMEM_CONF=limit:1G|device
pool-GPUMEM_LIMIT|replace|GPUMEM_LIMIT=1G|pool
pool-record-GPUMEM_LIMIT|record|GPUMEM_LIMIT=1G|pool
EOF3
# an older file (schema 1.3) wrote 0 for none: read as none; a 1.4 file's 0 is 0 bytes
cp "$TMP/oom-none-replace.db" "$TMP/oom-old.db"
sqlite3 "$TMP/oom-old.db" "UPDATE ooms SET limit_bytes = 0; UPDATE meta SET value = 3 WHERE key = 'schema_minor'"
got=$("$GM" report --json "$TMP/oom-old.db" 2> /dev/null | jq -r '.ooms[0] | "\(.limit) \(.cause)"')
[[ $got == "null device" ]] && ok "a schema 1.3 file's limit 0 reads as none" || fail "a schema 1.3 file's limit 0: '$got', expected 'null device'"
# the replay's OOM: none, or a cap of 0 bytes
"$GM" export --format trace "$TMP/oom-none-replace.db" -o "$TMP/oom.trace" 2> /dev/null
r0=$("$REPLAY" --preset gpumem --limit 0 "$TMP/oom.trace" 2> /dev/null | grep -o 'oom_limit=[a-z0-9]*')
rn=$("$REPLAY" --preset gpumem --capacity 8M "$TMP/oom.trace" 2> /dev/null | grep -o 'oom_limit=[a-z0-9]*')
[[ $r0 == oom_limit=0 && $rn == oom_limit=none ]] && ok "the replay's OOM: $r0 under --limit 0, $rn without" \
  || fail "the replay's OOM: '$r0' under --limit 0 (oom_limit=0 expected), '$rn' without (oom_limit=none expected)"
# the torch export's oom entries become the parity converter's `ao` lines, as the trace export
# writes each recorded OOM (tests/gpu/pytorch_parity.py: PyTorch's own snapshots, on a GPU)
"$GM" export --format torch "$TMP/oom-none-replace.db" -o "$TMP/oom.pickle" 2> /dev/null
python3 tests/gpu/pytorch_parity.py convert "$TMP/oom.pickle" "$TMP/oom-conv.trace" > /dev/null 2>&1
want=$(awk '$1 == "ao" {print $3}' "$TMP/oom.trace" | tr '\n' ' ')
got=$(awk '$1 == "ao" {print $3}' "$TMP/oom-conv.trace" 2> /dev/null | tr '\n' ' ')
[[ -n $want && $got == "$want" ]] && ok "pytorch_parity.py's converter writes the OOM's ao line (size $got)" \
  || fail "pytorch_parity.py's converter's ao lines (sizes) '$got', export --format trace's '$want'"
[[ $fails -eq 0 ]] || { echo "$fails failures"; exit 1; }
echo "all kinds: one definition of the peaks"
