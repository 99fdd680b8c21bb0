#!/usr/bin/env bash
# `gpumem export --format trace` writes exactly what the replay engine reads (one line per
# device allocation with its requested size and stream, frees by the allocation's id, frees
# of unknown memory left out), equal to the SQL over alloc_life it replaces; the replay engine
# accepts it and finds the same peak of requested bytes as `gpumem report`. The same recording
# checks the OOM naming (name and NVTX phase of the failed request), leaks in requested bytes
# with their phase, usage errors, and that a schema 1.0 file (no ooms.name, no inlines) reads.
source tests/integration/snapshot_common.bash
need "$GPUMEM" "$APP"
command -v sqlite3 > /dev/null || { echo "skipped: sqlite3 is not installed" >&2; exit 77; }
command -v jq > /dev/null || { echo "skipped: jq is not installed" >&2; exit 77; }
DB=$TMP/m.db
GPUMEM_DB=$DB GPUMEM_STACKS=0 "$APP" mixed || fail "snapshot_app mixed failed"

# --- the trace
"$GPUMEM" export --format trace "$DB" > "$TMP/t1" || fail "export failed"
"$GPUMEM" export --format=trace -o "$TMP/t2" "$DB" || fail "export -o failed"
cmp -s "$TMP/t1" "$TMP/t2" || fail "export to stdout and with -o differ"
sqlite3 "$DB" "
  SELECT CASE WHEN e.kind IN (1, 3) THEN printf('a %d %d %d', e.seq, e.requested, e.stream)
              WHEN e.kind = 13 THEN printf('ao %d %d %d', e.seq, e.requested, e.stream)
              WHEN e.kind = 2 THEN printf('f %d', l.birth)
              ELSE printf('fa %d %d', l.birth, e.stream) END
  FROM events e LEFT JOIN alloc_life l ON l.death = e.seq
  WHERE e.kind IN (1, 2, 3, 4, 13) AND (e.kind IN (1, 3, 13) OR l.birth IS NOT NULL)
  ORDER BY e.seq" > "$TMP/sql"
# one comment line first (the output rule's marker, snapshot/formats/gm_out.h), which the replay engine skips
head -1 "$TMP/t1" | grepq '^# gpumem trace' || fail "the trace does not start with its marker line"
sed -i 1d "$TMP/t1"
cmp -s "$TMP/t1" "$TMP/sql" || { diff "$TMP/sql" "$TMP/t1" >&2; fail "export differs from the alloc_life query"; }
# 5 allocations, 5 frees (the unknown one left out); kinds and sizes as issued
[[ $(grep -c '^a ' "$TMP/t1") -eq 5 ]] || fail "expected 5 allocation lines: $(cat "$TMP/t1")"
[[ $(grep -c '^fa ' "$TMP/t1") -eq 3 && $(grep -c '^f ' "$TMP/t1") -eq 1 ]] || fail "free lines: $(cat "$TMP/t1")"
cut -d' ' -f1,3 "$TMP/t1" | grep '^a ' | tr '\n' ' ' | grepq -x 'a 1000 a 4000 a 100 a 2000 a 256 ' \
  || fail "requested sizes not in order: $(cat "$TMP/t1")"
# every free names an allocation made before it, and no id is freed twice
awk '$1 == "a" { live[$2] = 1 } $1 ~ /^f/ { if (!($2 in live)) exit 1; delete live[$2] }' "$TMP/t1" \
  || fail "a free names an allocation that is not live: $(cat "$TMP/t1")"
echo "ok: export --format trace equals the alloc_life query ($(wc -l < "$TMP/t1") lines)"
REPLAY=$BUILD/alloc/gpumem-replay
if [[ -x $REPLAY ]]; then
  "$REPLAY" --preset gpumem "$TMP/t1" > /dev/null 2>&1 || fail "replay rejected the trace"
  # without its limit the failed request ("ao") succeeds and stays: the program's peak without it
  grep -v '^ao ' "$TMP/t1" > "$TMP/t1.ok"
  "$REPLAY" --preset gpumem "$TMP/t1.ok" > "$TMP/replay" 2>&1 || fail "replay rejected the trace: $(cat "$TMP/replay")"
  want=$("$GPUMEM" report --json "$DB" | jq -r '.summary.peak_requested')
  got=$(sed -n 's/.* peak_requested=\([0-9]*\).*/\1/p' "$TMP/replay" | head -1)
  [[ -n $got && $got == "$want" ]] || fail "replay peak requested $got != report's $want"
  echo "ok: gpumem-replay reads the trace (peak requested $got, as the report)"
fi

# --- export -> gpumem-replay under the recorded settings reproduces the recording, one row per
# case: an OOM under a limit and under a memory fraction (the failed request is an "ao" line, which
# the replay tries: it fails again where it failed), and a library's cudaMalloc that gpumem's pool
# served in a recording through the framework's hook ("ag": served by the pool under the PyTorch
# presets too; with --framework-only it goes outside, as under PyTorch's own allocator)
FRAG=$BUILD/tests/apps/frag_app
need "$FRAG" "$REPLAY"
#    name        GPUMEM_CONF                                  app arg  want
rows=("limit      preset:pytorch,limit:64M                     -      oom"
      "fraction   preset:pytorch,per_process_memory_fraction:0 -      oom"
      "hooked     preset:pytorch                               torch  same"
      "hookedx    preset:pytorch-expandable                    torch  same")
for row in "${rows[@]}"; do
  read -r name conf arg want <<< "$row"
  [[ $arg == - ]] && arg=
  GPUMEM_CONF=$conf "$GPUMEM" record -q -o "$TMP/$name.db" -- "$FRAG" $arg > "$TMP/$name.out" 2>&1
  "$GPUMEM" export --format trace "$TMP/$name.db" -o "$TMP/$name.trace" || fail "$name: export"
  st() { sqlite3 "$TMP/$name.db" "SELECT value FROM meta WHERE key = 'stat.$1'"; }
  rep=$("$REPLAY" --top-down --conf "$conf" "$TMP/$name.trace" 2>&1)
  rv() { sed -n "s/.* $1=\([-0-9]*\).*/\1/p" <<< "$rep"; }
  if [[ $want == oom ]]; then
    # the replay meets the OOM at the failed request's line (comment lines are not events)
    at=$(grep -v '^#' "$TMP/$name.trace" | grep -n '^ao ' | sed -n 1p | cut -d: -f1)
    [[ $(st n_oom) -ge 1 && -n $at && $(rv oom_at) == $((at - 1)) ]] \
      || fail "$name: recorded n_oom=$(st n_oom); the replay of its export: oom_at=$(rv oom_at), the 'ao' line is event $((at - 1)): $rep"
  else
    [[ $(rv peak_reserved) == $(st peak_reserved) && $(rv cache_hits) == $(st cache_hits) &&
       $(rv device_allocs) == $(st driver_alloc_calls) && $(grep -c '^ag ' "$TMP/$name.trace") == 1 ]] \
      || fail "$name: recorded peak_reserved=$(st peak_reserved) cache_hits=$(st cache_hits) driver_alloc_calls=$(st driver_alloc_calls), replayed: $rep"
    own=$("$REPLAY" --top-down --framework-only --conf "$conf" "$TMP/$name.trace")
    [[ $(sed -n 's/.* peak_reserved=\([0-9]*\).*/\1/p' <<< "$own") -lt $(st peak_reserved) && $own == *peak_other=8388608* ]] \
      || fail "$name: --framework-only should leave the 8 MiB workspace outside PyTorch's pool: $own"
  fi
done
echo "ok: export -> gpumem-replay under the recorded settings: OOM under a limit and a fraction, a library's allocation in gpumem's pool"

# --- OOM naming and phase
"$GPUMEM" report --json "$DB" > "$TMP/r.json" || fail "report --json failed"
[[ $(jq -r '.ooms[0].name' "$TMP/r.json") == h12.attn.scores ]] || fail "OOM name: $(jq -c '.ooms' "$TMP/r.json")"
[[ $(jq -r '.ooms[0].phase' "$TMP/r.json") == "step 1/fwd/h12/attn" ]] || fail "OOM phase: $(jq -c '.ooms' "$TMP/r.json")"
[[ $(jq -r '.ooms[0].requested' "$TMP/r.json") == 536870912 ]] || fail "OOM requested"
# peak of requested bytes: 4000 + 100 + 2000 live together after 1000 was freed
[[ $(jq -r '.summary.peak_requested' "$TMP/r.json") == 6100 ]] || fail "peak_requested $(jq -r .summary.peak_requested "$TMP/r.json") != 6100"
[[ $(jq -r '.summary.peak_allocated' "$TMP/r.json") == 6656 ]] || fail "peak_allocated $(jq -r '.summary.peak_allocated' "$TMP/r.json") != 6656"
"$GPUMEM" report "$DB" > "$TMP/r.txt"
grep -q 'requested 512.00 MiB (536870912 bytes) for h12.attn.scores in step 1/fwd/h12/attn' "$TMP/r.txt" \
  || fail "text report: $(grep 'OOM 1' "$TMP/r.txt")"
grep -q 'peak requested .*6100 bytes' "$TMP/r.txt" || fail "text report lacks the peak requested"
echo "ok: OOM named h12.attn.scores in step 1/fwd/h12/attn; peak requested 6100"

# --- leaks: requested bytes, with the phase and name
"$GPUMEM" leaks "$DB" > "$TMP/l.txt"; rc=$?
[[ $rc -eq 0 ]] || fail "leaks exited $rc without --fail-on-leak"
grep -q '^LEAK SUMMARY: 256 bytes leaked in 1 allocations$' "$TMP/l.txt" || fail "leak summary: $(tail -1 "$TMP/l.txt")"
grep -q 'losses  \[phase step \*/fwd\]' "$TMP/l.txt" || fail "by-name group lacks its phase: $(cat "$TMP/l.txt")"
"$GPUMEM" leaks --json "$DB" | jq -e '.leaks[0].phase == "step */fwd" and .leaks[0].name == "losses" and .leaked_held_bytes == 512' > /dev/null \
  || fail "leaks --json: $("$GPUMEM" leaks --json "$DB")"
echo "ok: leak of 256 requested bytes (512 held) named losses in step */fwd"

# --- a schema 1.0 file: no ooms.name column, no inlines table
cp "$DB" "$TMP/old.db"
sqlite3 "$TMP/old.db" "DROP VIEW stack_frames; DROP TABLE inlines; ALTER TABLE ooms DROP COLUMN name;
                       UPDATE meta SET value = 0 WHERE key = 'schema_minor';" || fail "cannot make a 1.0 file"
"$GPUMEM" report --json "$TMP/old.db" > "$TMP/o.json" || fail "report on a 1.0 file failed"
[[ $(jq -r '.ooms[0].name' "$TMP/o.json") == null && $(jq -r '.schema' "$TMP/o.json") == 1.0 ]] \
  || fail "1.0 file: $(jq -c '{schema, ooms}' "$TMP/o.json")"
echo "ok: a schema 1.0 file reads (OOM unnamed)"

# --- usage
"$GPUMEM" export --help | grepq 'usage: gpumem export' || fail "export --help"
"$GPUMEM" export "$DB" > /dev/null 2>&1; [[ $? -eq 2 ]] || fail "export without --format: expected 2"
"$GPUMEM" export --format svg "$DB" 2> "$TMP/e"; [[ $? -eq 2 ]] || fail "unknown format: expected 2"
grep -q "unknown format 'svg'" "$TMP/e" || fail "unknown format: message"
"$GPUMEM" export --format trace "$TMP/nope.db" 2> /dev/null; [[ $? -eq 3 ]] || fail "missing database: expected 3"
"$GPUMEM" export --format trace -o "$TMP/no/such/dir/t" "$DB" 2> /dev/null; [[ $? -eq 2 ]] || fail "-o into a missing directory: expected 2 (refused by the output rule)"
echo "ok"
