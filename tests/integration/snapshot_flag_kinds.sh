#!/usr/bin/env bash
# snapshot_flag_kinds.sh — an event flag means what its kind makes it mean (snapshot/README.md,
# events.flags): 256 and 512 are a cache hit and a cache miss on a device allocation (kinds 1, 3)
# only; on a foreign free (9) 256 is an interior pointer, on an OOM (13) 256/512/768 name the
# limit it met, on a bad access (30) 256/512/1024 the operation. The report's cache hit rate (its
# text line, JSON .summary.cache_hit_rate) counts the device allocations' flags and nothing else,
# read by the page reader and by SQLite alone (GPUMEM_SWEEP=sql) alike.
#
# The recordings: tests/apps/order_app `bad` (one double and one interior free on each of its four
# free paths) recorded in gpumem's allocator (replace: 5 hits, 1 miss) and passed through
# (GPUMEM_MODE=record: no allocation served, no hit rate), and copies of them with rows added by
# sqlite3 after the last event, each row kind carrying the bits that are cache flags elsewhere.
# (A second table does the same for flag 16384, a graph's memory node: the report's memory_nodes
# count the device allocations' only; a third for 32768, a capture's private pool, and 4096, the
# framework's hook, on host and managed allocations: the report's capture_pools count the device
# allocations' only.)
# One table, a row per recording: the hit rate the report gives with the page reader, with SQLite,
# and the one SQL gives (device allocations' flags 256 / (256 + 512), null where none was served),
# which the rows of other kinds leave as it was; the control rows (device allocations flagged,
# one through the sweep's slow path: 4096, PyTorch's hook) move it, as SQL says. Where nothing was
# added to the replace recording, the rate is also the allocator's own count (meta stat.cache_*).
source tests/integration/preload_common.bash
source tests/pipe.bash # grepq
need "$LIB" "$APPS/order_app" "$BUILD/gpumem"
command -v jq > /dev/null || { echo "FAIL: jq is missing (make deps installs it)" >&2; exit 1; }
GM=$BUILD/gpumem

for mode in replace record; do
  GPUMEM_MODE=$mode "$GM" record -q -o "$TMP/$mode.db" --force -- "$APPS/order_app" bad > "$TMP/$mode.out" 2>&1 ||
    { echo "FAIL: order_app bad ($mode) failed: $(tail -n 3 "$TMP/$mode.out")"; exit 1; }
done
check_eq "replace: interior foreign frees recorded (kind 9, flag 256)" \
  "$(sqlite3 "$TMP/replace.db" "SELECT count(*) FROM events WHERE kind = 9 AND flags & 256")" 4
check_eq "record: interior foreign frees recorded (kind 9, flag 256)" \
  "$(sqlite3 "$TMP/record.db" "SELECT count(*) FROM events WHERE kind = 9 AND flags & 256")" 4
check_gt "replace: device allocations served (flag 256 or 512)" \
  "$(sqlite3 "$TMP/replace.db" "SELECT count(*) FROM events WHERE kind IN (1, 3) AND flags & 768")" 0
check_eq "record: device allocations served" \
  "$(sqlite3 "$TMP/record.db" "SELECT count(*) FROM events WHERE flags & 768 AND kind IN (1, 3)")" 0

# add DB KIND FLAGS N: N rows of KIND flagged FLAGS after the last event, each at an address of
# its own on device 0 (an OOM gets its ooms row: 1 GiB requested, no limit), and meta events
# counting them (else the report calls the file damaged)
add() {
  sqlite3 "$1" "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < $4),
      last AS (SELECT max(seq) s, max(t) t FROM events)
    INSERT INTO events (seq, t, kind, flags, device, stream, thread, addr, size, requested, alloc_id)
      SELECT s + i, t + i, $2, $3, 0, 0, 1, 139000000000000 + i * 65536, 4096,
             CASE WHEN $2 IN (1, 3, 5, 13) THEN 4096 ELSE 0 END, 0 FROM k, last;
    INSERT INTO ooms (seq, device, stream, requested, allocated, reserved, free_cached, largest_free,
                      device_free, device_total, limit_bytes)
      SELECT seq, 0, 0, 1073741824, 0, 0, 0, 0, 0, 0, NULL FROM events
      WHERE kind = 13 AND seq NOT IN (SELECT seq FROM ooms);
    UPDATE meta SET value = (SELECT count(*) FROM events) WHERE key = 'events';" || fail "cannot add kind $2 rows to $1"
}
# the hit rate SQL gives: device allocations' cache flags only; null where none was served
sql_rate() {
  sqlite3 "$1" "SELECT CASE WHEN h + m > 0 THEN printf('%.4f', 1.0 * h / (h + m)) ELSE 'null' END FROM
    (SELECT sum(kind IN (1, 3) AND flags & 256 != 0) h, sum(kind IN (1, 3) AND flags & 512 != 0) m FROM events)"
}
# rate SWEEP DB: report --json's cache_hit_rate (4 decimals, or null) and its text line's source,
# "pages-not-taken" where GPUMEM_SWEEP=pages says the page reader was not taken
rate() {
  local r src
  GPUMEM_SWEEP=$1 "$GM" report --json "$2" > "$TMP/sweep.json" 2> "$TMP/sweep.err" ||
    { echo "report-failed [$(tail -n 1 "$TMP/sweep.err")]"; return; }
  r=$(jq -r ".summary.cache_hit_rate" "$TMP/sweep.json")
  grepq "the page reader was not taken" "$TMP/sweep.err" && { echo pages-not-taken; return; }
  src=$(GPUMEM_SWEEP=$1 "$GM" report "$2" 2> /dev/null | sed -n 's/^ *cache hit rate *//p')
  [[ $r == null ]] || r=$(awk -v x="$r" 'BEGIN {printf "%.4f", x}')
  echo "$r [$src]"
}

# name | base recording | kind | flags | rows added | the rate must stay the base's (1) or move (0)
table=(
  "as recorded|replace|-|-|0|1"
  "as recorded|record|-|-|0|1"
  "oom fraction|replace|13|256|6|1"
  "oom key|replace|13|512|6|1"
  "oom torch key|replace|13|768|6|1"
  "oom torch key|record|13|768|6|1"
  "interior free|replace|9|256|6|1"
  "bad access memset|replace|30|256|6|1"
  "bad access copy into|replace|30|512|6|1"
  "bad access copy from|replace|30|1024|6|1"
  "bad access both|record|30|768|6|1"
  "launch|replace|20|768|6|1"
  "free|replace|2|256|6|1"
  "free async|replace|4|512|6|1"
  "free completed|replace|29|768|6|1"
  "host alloc|replace|5|256|6|1"
  "host alloc|record|5|512|6|1"
  "managed alloc|replace|7|768|6|1"
  "fraction note|replace|37|1280|6|1"
  "control: alloc hit|replace|1|256|6|0"
  "control: alloc async miss|replace|3|512|6|0"
  "control: hook alloc hit (slow path)|replace|1|4352|6|0"
  "control: alloc hit|record|1|256|6|0"
)
base_rate_replace=$(sql_rate "$TMP/replace.db")
base_rate_record=$(sql_rate "$TMP/record.db")
check_eq "replace: SQL's rate is the allocator's own count (meta stat.cache_*)" "$base_rate_replace" \
  "$(sqlite3 "$TMP/replace.db" "SELECT printf('%.4f', 1.0 * h.value / (h.value + m.value)) FROM meta h, meta m
    WHERE h.key = 'stat.cache_hits' AND m.key = 'stat.cache_misses'")"
check_eq "record: SQL's rate (none served)" "$base_rate_record" null
echo "# name | base | kind | flags | rows | pages | sql | SQL's rate | base's rate"
n=0
for row in "${table[@]}"; do
  IFS='|' read -r name base kind flags rows stays <<< "$row"
  n=$((n + 1))
  db=$TMP/row$n.db
  cp "$TMP/$base.db" "$db"
  [[ $rows -gt 0 ]] && add "$db" "$kind" "$flags" "$rows"
  want=$(sql_rate "$db")
  base_rate=base_rate_$base
  pages=$(rate pages "$db") sql=$(rate sql "$db")
  echo "$name | $base | $kind | $flags | $rows | $pages | $sql | $want | ${!base_rate}"
  check_eq "$name ($base): page reader's rate is SQL's" "${pages%% *}" "$want"
  check_eq "$name ($base): SQLite's sweep's rate is SQL's" "${sql%% *}" "$want"
  check_eq "$name ($base): the text line's source, both sweeps" "${pages#* }" "${sql#* }"
  if [[ $stays == 1 ]]; then
    check_eq "$name ($base): the rate stays the base's" "$want" "${!base_rate}"
  else
    [[ $want != "${!base_rate}" ]] && pass "$name ($base): the rate moves ($want)" ||
      fail "$name ($base): a control row left the rate at ${!base_rate}"
  fi
done

# Flag 16384 is a graph's memory node on a device allocation (1, 3) only: the report's
# graphs.memory_nodes (JSON; its text line "memory nodes") counts those rows, with the page reader
# and with SQLite alike, whatever other kinds carry the bit. name | base | kind | rows added
graph_table=(
  "host alloc|replace|5|6"
  "managed alloc|replace|7|6"
  "host alloc|record|5|6"
  "free|replace|2|6"
  "foreign free|replace|9|6"
  "control: alloc|replace|1|6"
  "control: alloc async|record|3|6"
)
# nodes SWEEP DB: report --json's memory node count (0 where null) and its text line's count
nodes() {
  local j t
  j=$(GPUMEM_SWEEP=$1 "$GM" report --json "$2" 2> /dev/null | jq -r '.graphs.memory_nodes.allocations // 0') || j=report-failed
  t=$(GPUMEM_SWEEP=$1 "$GM" report "$2" 2> /dev/null | awk '$1 == "memory" && $2 == "nodes" { print $3 }')
  echo "$j ${t:-0}"
}
echo "# name | base | kind | rows | pages | sql | SQL's count"
for row in "${graph_table[@]}"; do
  IFS='|' read -r name base kind rows <<< "$row"
  n=$((n + 1))
  db=$TMP/row$n.db
  cp "$TMP/$base.db" "$db"
  add "$db" "$kind" 16384 "$rows"
  want=$(sqlite3 "$db" "SELECT count(*) FROM events WHERE kind IN (1, 3) AND flags & 16384")
  pages=$(nodes pages "$db") sql=$(nodes sql "$db")
  echo "$name | $base | $kind | $rows | $pages | $sql | $want"
  check_eq "graph node, $name ($base): the page reader's count (JSON and text) is SQL's" "$pages" "$want $want"
  check_eq "graph node, $name ($base): SQLite's sweep's count (JSON and text) is SQL's" "$sql" "$want $want"
  [[ $name == control* ]] && check_eq "graph node, $name ($base): the rows added counted" "$want" "$rows"
done

# Flag 32768 is a graph capture's private pool on device allocations (1, 3), segment events and
# PyTorch's rows; 4096 the framework's hook on device allocations (and gpumem's allocator as
# PyTorch's on 36, 37). A host or managed allocation carrying them is neither: the report's
# graphs.capture_pools.allocations (JSON) counts the device allocations flagged 32768 only, with
# the page reader and with SQLite alike. name | base | kind | flags | rows added
pool_table=(
  "host alloc|replace|5|32768|6"
  "managed alloc|replace|7|32768|6"
  "host alloc|record|5|32768|6"
  "host alloc, hook bit too|replace|5|36864|6"
  "managed alloc, hook bit too|record|7|36864|6"
  "free|replace|2|32768|6"
  "control: alloc|replace|1|32768|6"
  "control: alloc async, hook bit too|record|3|36864|6"
)
# pool_allocs SWEEP DB: report --json's capture pool allocations (0 where null)
pool_allocs() {
  GPUMEM_SWEEP=$1 "$GM" report --json "$2" 2> /dev/null | jq -r '.graphs.capture_pools.allocations // 0' || echo report-failed
}
echo "# name | base | kind | flags | rows | pages | sql | SQL's count"
for row in "${pool_table[@]}"; do
  IFS='|' read -r name base kind flags rows <<< "$row"
  n=$((n + 1))
  db=$TMP/row$n.db
  cp "$TMP/$base.db" "$db"
  add "$db" "$kind" "$flags" "$rows"
  want=$(sqlite3 "$db" "SELECT count(*) FROM events WHERE kind IN (1, 3) AND flags & 32768")
  pages=$(pool_allocs pages "$db") sql=$(pool_allocs sql "$db")
  echo "$name | $base | $kind | $flags | $rows | $pages | $sql | $want"
  check_eq "private pool, $name ($base): the page reader's count is SQL's" "$pages" "$want"
  check_eq "private pool, $name ($base): SQLite's sweep's count is SQL's" "$sql" "$want"
  [[ $name == control* ]] && check_eq "private pool, $name ($base): the rows added counted" "$want" "$rows"
done
finish
