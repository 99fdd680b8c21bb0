#!/usr/bin/env bash
# Property: a plain C program using the toolkit's NVTX3 headers (no gpumem header) has its
# ranges delivered to gpumem through NVTX injection, with the right nesting on each thread:
# every push and pop nvtx_app says it made ("expect ..." lines) is what gpumem received
# (GPUMEM_DEBUG_RANGES dump), thread by thread, in order — including event-attribute ranges
# and a domain range named by a registered string. The program's output is the same without
# gpumem. Recorded, the threads carry the names nvtxNameOsThreadA gave them, and a wide-string
# range (nvtxRangePushW) is named in UTF-8, with '?' for each value that is no character. With
# another tool in NVTX_INJECTION64_PATH, gpumem chains to it: both receive.
# Phases: an allocation, a use and a free inside an NVTX range have that range as their phase
# in every command that shows phases (report, leaks, uses, viz), whatever the kind of range:
# push/pop, start/end (process-wide), start/end started on one thread and used and ended on
# another, push/pop inside start/end (the push/pop range, the thread's innermost); only an event
# outside every range is "(outside any NVTX range)" (uses_app phases, the table below).
# The same rule in frag's step timeline and advise's model (the second table: churn_app's "step N"
# range of every kind).
source tests/integration/preload_common.bash
need "$LIB" "$APPS/nvtx_app" "$APPS/uses_app" "$BUILD/gpumem" "$BUILD/tests/apps/churn_app"
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

# phases of every kind of range, in every command that shows them
GM=$BUILD/gpumem
PDB=$TMP/phases.db
"$GM" record -o "$PDB" -- "$APPS/uses_app" phases >"$TMP/phases.out" 2>&1 || { fail "uses_app phases"; cat "$TMP/phases.out"; }
"$GM" report --json "$PDB" >"$TMP/ph.report" || fail "report --json on the phases recording"
"$GM" report "$PDB" >"$TMP/ph.report.txt" || fail "report on the phases recording"
"$GM" leaks --json "$PDB" >"$TMP/ph.leaks" || fail "leaks --json on the phases recording"
"$GM" viz "$PDB" -o "$TMP/ph.html" || fail "viz on the phases recording"
sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/ph.html" >"$TMP/ph.viz"
outside="(outside any NVTX range)"
# case  MiB kept  the phase of K_case and of T_case's birth, use and free
while read -r c mib phase; do
  phase=${phase//_/ }
  [[ $phase == - ]] && phase=$outside
  bytes=$((mib << 20))
  check_eq "$c: report's peak by phase" \
    "$(jq -r --argjson b "$bytes" '[.peak.by_phase[] | select(.bytes == $b or .bytes == $b + 4096) | .phase] | join(",")' "$TMP/ph.report")" "$phase"
  check_eq "$c: leaks by phase" \
    "$(jq -r --argjson b "$bytes" '[.by_phase[] | select(.bytes == $b) | .phase] | join(",")' "$TMP/ph.leaks")" "$phase"
  "$GM" uses --json --name "T_$c" "$PDB" >"$TMP/ph.uses.$c" || fail "$c: uses --name T_$c"
  want=$phase; [[ $want == "$outside" ]] && want=null
  check_eq "$c: uses' birth, use and free phases" \
    "$(jq -r '.allocations[0] | [.birth.phase, (.uses[] | .phase), .death.phase] | map(. // "null") | join(",")' "$TMP/ph.uses.$c")" \
    "$want,$want,$want"
  want=$phase; [[ $want == "$outside" ]] && want=""
  check_eq "$c: viz's tensor phases (K born, T born, T freed)" \
    "$(jq -r --arg k "K_$c" --arg t "T_$c" '.tensors.paths as $p | [(.tensors.rows[] | select(.[0] == $k) | $p[.[8]]),
        (.tensors.rows[] | select(.[0] == $t) | $p[.[8]], $p[.[9]])] | join(",")' "$TMP/ph.viz")" "$want,$want,$want"
done <<'TABLE'
pp        1  pp
se        2  se
xt        3  xt
nest      4  nest_pp
nest_out  5  nest_se
none      6  -
TABLE
check_eq "report's text calls no allocation inside a range outside" \
  "$(grep -c -F "$outside" "$TMP/ph.report.txt")" 1

# The same rule in frag's step timeline and advise's model (their own reads of the events), with
# the "step N" range of each kind (tests/apps/churn_app.c, 5 steps of 20 buffers): push/pop,
# start/end, start/end started on one thread and used and ended on another, push/pop inside a
# start/end "epoch" (the push/pop range), none. frag's timeline has a point per step in the order
# SQL finds the ranges, each inside its step (SQL: the events between the range's start and
# end); advise names the step of an OOM (GPUMEM_LIMIT=40M: out of memory in step 0) as report
# does and as SQL over the ranges open at the OOM's time does.
CHURN=$BUILD/tests/apps/churn_app
# case  churn's mode  the OOM's phase (- outside every range)
while read -r c mode want; do
  [[ $want == - ]] && want=""
  want=${want//_/ }
  db=$TMP/churn-$c.db
  "$GM" record -q -o "$db" -- "$CHURN" 5 20 "r$mode" >"$TMP/churn-$c.out" 2>&1 || fail "$c: churn_app $mode"
  "$GM" frag --json "$db" >"$TMP/churn-$c.frag" || fail "$c: frag --json"
  steps=$(sqlite3 "$db" "SELECT group_concat(n, ',') FROM (SELECT substr(s.s, 6) AS n FROM ranges r JOIN strings s
      ON s.id = r.name WHERE s.s LIKE 'step %' AND r.kind IN (0, 1) ORDER BY r.start_ns)")
  check_eq "$c: frag's timeline by step" "$(jq -r '[.timeline[].step // empty] | join(",")' "$TMP/churn-$c.frag")" "$steps"
  outside_step=0
  while read -r n seq; do
    read -r lo hi < <(sqlite3 -separator ' ' "$db" "SELECT (SELECT min(seq) FROM events WHERE t >= r.start_ns),
        (SELECT max(seq) FROM events WHERE t <= r.end_ns) FROM ranges r JOIN strings s ON s.id = r.name
        WHERE s.s = 'step $n'")
    ((seq + 1 >= lo && seq <= hi)) || { outside_step=1; echo "  $c: step $n's point at event $seq, its events $lo..$hi"; }
  done < <(jq -r '.timeline[] | select(.step != null) | "\(.step) \(.seq)"' "$TMP/churn-$c.frag")
  check_eq "$c: each timeline point inside its step" "$outside_step" 0
  odb=$TMP/churn-$c-oom.db
  GPUMEM_LIMIT=40M "$GM" record -q -o "$odb" -- "$CHURN" 5 20 "r$mode" >"$TMP/churn-$c-oom.out" 2>&1
  check_eq "$c: SQL's range open at the OOM" "$(sqlite3 "$odb" "SELECT coalesce((SELECT r.path FROM ranges r WHERE
      r.id = e.range), (SELECT r.path FROM ranges r WHERE r.kind = 1 AND r.start_ns <= e.t AND (r.end_ns IS NULL OR
      r.end_ns > e.t) ORDER BY r.start_ns DESC LIMIT 1), '') FROM ooms o JOIN events e ON e.seq = o.seq")" "$want"
  check_eq "$c: report's OOM phase" "$("$GM" report --json "$odb" | jq -r '.ooms[0].phase // ""')" "$want"
  check_eq "$c: advise's OOM step" "$("$GM" advise --json --oom-step "$odb" | jq -r '.oom.where // ""')" "$want"
done <<'TABLE'
pp    n  step_0
se    s  step_0
xt    x  step_0
nest  e  step_0
none  -  -
TABLE
finish
