#!/usr/bin/env bash
# torch_views.sh — the views of a PyTorch recording against what the database itself says, on a
# small MLP (tests/torch/views_mlp.py: 3 Linear layers, batch 256, AdamW) recorded with PyTorch's
# own allocator (gpumem records its segments as the device's allocations, its tensors from its
# trace). One table each, every command that shows the property:
#   - per-step tables: a row for every step, and where the table gives the step's highest moment,
#     that value: report --json .categories.over_time (the device view), frag --json .timeline
#     (one row per step, its allocated a level the step had), the ranks report's steps. Most
#     steps of such a run make no device allocation (PyTorch's cache serves them): they hold what
#     they carried in. Expected values from SQL over events, alloc_life and ranges.
#   - the category table over stretches of events (no steps: --no-torch-hooks): no stretch reads
#     less than what was live at its moment, the last one holds what is live at the end;
#   - the device's peak reserved against PyTorch's reserve: gpumem's cache is what no allocation
#     holds, not PyTorch's segment in flight;
#   - "leaked": leaks, the ranks report and viz by one rule (PyTorch's tensors alive at the end);
#     the ranks report shows PyTorch's own peak; viz names C++ frames demangled;
#   - leaks' "memory grows" and "what grows": only where step after step kept something (not a
#     final no_grad pass's output, not the last step's gradients, not a loop's last input), and
#     only what each step made (not the first step's cuBLAS workspace at the line of a leak), and
#     a tensor kept after opt.step(), outside the hook's step range, is the step before it's.
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/views_mlp.py
rec() { # rec NAME [RECORD-OPTIONS...] -- SCRIPT-ARGS...
  local name=$1 ropts=()
  shift
  while [[ $1 != -- ]]; do ropts+=("$1"); shift; done
  shift
  GPUMEM_SIM_BACKING=memory "$G" record -q -o "$tmp/$name.db" "${ropts[@]}" -- "$torch_py" "$script" "$@" \
    > "$tmp/$name.out" 2>&1 || { bad "$name: recording failed: $(tail -n 3 "$tmp/$name.out")"; return 1; }
}
rec plain -- || exit 1
rec keep -- --keep --steps=6 || exit 1
rec nohooks --no-torch-hooks -- || exit 1
rec evalp -- --eval --steps=9 || exit 1
rec keepout -- --keep-out || exit 1
rec fresh -- --fresh-input || exit 1

# the merged report of several ranks reads --frames as one rank's report does (it took the
# option and ignored it): what the peak rank holds more, an unnamed allocation by its call site,
# is the script's line with user frames (the default) and PyTorch's own frame with all
"$G" report "$tmp/plain.db" "$tmp/keep.db" > "$tmp/ranks_user.txt" && "$G" report "$tmp/plain.db" "$tmp/keep.db" --frames all > "$tmp/ranks_all.txt" \
  || bad "report of two ranks exited $?"
su=$(grep -A3 "What it holds at its peak" "$tmp/ranks_user.txt" | grep -c "^  +.*views_mlp.py:")
sa=$(grep -A3 "What it holds at its peak" "$tmp/ranks_all.txt" | grep -c "^  +.*(lib")
[[ $su -ge 1 && $sa -ge 1 ]] && ok "report of ranks --frames: user names the script's line, all PyTorch's frame" \
  || bad "report of ranks --frames user/all: $(grep -A2 'What it holds' "$tmp/ranks_user.txt" "$tmp/ranks_all.txt")"

# the device's bytes live after seq AT: its allocations born at or before it, not yet freed
level_sql="(SELECT coalesce(sum(e.size), 0) FROM events e JOIN alloc_life l ON l.birth = e.seq
            WHERE e.kind IN (1, 3) AND e.seq <= AT AND (l.death IS NULL OR l.death > AT))"
# "N PEAK" a line per step: its highest moment from the moment before its first event (what it
# carried in) through each birth to its last event
step_peaks() {
  sqlite3 -separator ' ' "$1" "WITH st AS (SELECT CAST(substr(r.path, 6, instr(r.path || '/', '/') - 6) AS INT) AS n,
        min(e.seq) AS lo, max(e.seq) AS hi FROM events e JOIN ranges r ON r.id = e.range
        WHERE r.path GLOB 'step [0-9]*' GROUP BY n),
      pts AS (SELECT n, lo - 1 AS at FROM st UNION
              SELECT n, e.seq FROM st JOIN events e ON e.seq BETWEEN lo AND hi AND e.kind IN (1, 3))
    SELECT n, max(${level_sql//AT/at}) FROM pts GROUP BY n ORDER BY n"
}
# PyTorch's allocated after seq AT (its tensors' blocks, kind 31, until their free): what frag
# shows of a PyTorch program on PyTorch's allocator, as PyTorch's statistics count
torch_level_sql="(SELECT coalesce(sum(e.size), 0) FROM events e JOIN alloc_life l ON l.birth = e.seq
            WHERE e.kind = 31 AND e.seq <= AT AND (l.death IS NULL OR l.death > AT))"
# "N LOW HIGH": the lowest and highest level of each step (LEVEL: level_sql, the device's, or
# torch_level_sql; KINDS: the events that change it)
step_span() { # db [level kinds]
  local lv=${2:-$level_sql} kinds=${3:-1, 2, 3, 4}
  sqlite3 -separator ' ' "$1" "WITH st AS (SELECT CAST(substr(r.path, 6, instr(r.path || '/', '/') - 6) AS INT) AS n,
        min(e.seq) AS lo, max(e.seq) AS hi FROM events e JOIN ranges r ON r.id = e.range
        WHERE r.path GLOB 'step [0-9]*' GROUP BY n),
      pts AS (SELECT n, lo - 1 AS at FROM st UNION
              SELECT n, e.seq FROM st JOIN events e ON e.seq BETWEEN lo AND hi AND e.kind IN ($kinds))
    SELECT n, min(${lv//AT/at}), max(${lv//AT/at}) FROM pts GROUP BY n ORDER BY n"
}

# 1. per-step tables, each printing "N VALUE" a row: the view's name, its database, the function
# that prints its rows, and whether VALUE is the step's highest moment (exact) or a level the
# step had (span: frag's row is the step's widest gap; of a PyTorch program on its own
# allocator, frag counts as PyTorch does: a level of its allocated)
rows_report() { "$G" report --json "$1" | jq -r '.categories.over_time[] | "\(.step) \(.total)"'; }
rows_frag() { "$G" frag --json "$1" | jq -r '.timeline[] | "\(.step) \(.allocated)"'; }
rows_rank0() { "$G" report --json "$1" "$tmp/keep.db" | jq -r '.ranks[0].steps[] | "\(.step) \(.peak_allocated)"'; }
rows_rank1() { "$G" report --json "$tmp/plain.db" "$1" | jq -r '.ranks[1].steps[] | "\(.step) \(.peak_allocated)"'; }
views="report's device view|plain|rows_report|exact
report's device view, 6 steps|keep|rows_report|exact
frag's timeline|plain|rows_frag|span
the ranks report, rank 0|plain|rows_rank0|exact
the ranks report, rank 1|keep|rows_rank1|exact"
while IFS='|' read -r view name fn how; do
  db=$tmp/$name.db
  got=$("$fn" "$db" 2> "$tmp/err") || { bad "$view: $(cat "$tmp/err")"; continue; }
  if [[ $how == exact ]]; then
    want=$(step_peaks "$db")
    [[ $got == "$want" ]] && ok "$view: a row per step, each its highest moment ($(echo $want | tr '\n' ' '))" \
      || bad "$view: rows '$(echo $got)', each step's highest moment '$(echo $want)'"
  else
    span=$(step_span "$db" "$torch_level_sql" "31, 32")
    bad_rows=$(join <(echo "$got") <(echo "$span") -a 2 | awk 'NF != 4 || $2 < $3 || $2 > $4')
    [[ -n $got && -z $bad_rows && $(echo "$got" | wc -l) == $(echo "$span" | wc -l) ]] \
      && ok "$view: a row per step ($(echo "$got" | wc -l)), each a level the step had" \
      || bad "$view: rows '$(echo $got)'; steps and their levels '$(echo "$span" | tr '\n' ';')'; wrong: '$bad_rows'"
  fi
done <<< "$views"

# 2. stretches without steps: none below what was live at its moment, the last what lives at the end
"$G" report --json "$tmp/nohooks.db" > "$tmp/nohooks.json" || bad "nohooks: report failed"
low=0
while read -r seq total; do
  lvl=$(sqlite3 "$tmp/nohooks.db" "SELECT ${level_sql//AT/$seq}")
  [[ $seq -gt 0 && $total -ge $lvl ]] || low="$low; @$seq $total < $lvl"
done < <(jq -r '.categories.over_time[] | "\(.seq) \(.total)"' "$tmp/nohooks.json")
end=$(sqlite3 "$tmp/nohooks.db" "SELECT ${level_sql//AT/9000000000000000000}")
last=$(jq -r '.categories.over_time[-1].total' "$tmp/nohooks.json")
[[ $low == 0 && $last -ge $end && $end -gt 0 ]] \
  && ok "report's stretches (no steps): none below what was live at its moment; the last holds $last >= $end live at the end" \
  || bad "report's stretches: ${low#0; }; the last $last, live at the end $end"

# 3. the device's peak reserved against PyTorch's reserve: gpumem's cache is what gpumem reserved
# that no device allocation holds once the mapping at the peak has served its allocation (the
# device's reserve unchanged up to then; these runs free no device memory); every byte named
for name in plain keep; do
  db=$tmp/$name.db
  read -r seq res tr out cache other < <("$G" report --json "$db" | jq -r '.torch.device_peak |
    "\(.seq) \(.reserved) \(.torch_reserved) \(.outside_torch) \(.gpumem_cache) \(.other_vmm)"')
  served=$(sqlite3 "$db" "SELECT coalesce((SELECT min(seq) - 1 FROM events WHERE seq > $seq
                           AND kind IN (11, 12, 14, 15, 18, 19)), (SELECT max(seq) FROM events))")
  held=$(sqlite3 "$db" "SELECT ${level_sql//AT/$served}")
  [[ $cache == $((res - held)) && $((tr + out + cache + other)) == "$res" ]] \
    && ok "$name: device peak reserved $res = PyTorch's $tr + outside $out + gpumem's cache $cache (what no allocation holds: $((res - held)))" \
    || bad "$name: device peak reserved $res at $seq: PyTorch's $tr, outside $out, gpumem's cache $cache, other $other; no allocation holds $((res - held)) of it (event $served)"
done

# 4. one rule for "leaked" (leaks's: a PyTorch program's tensors alive at the end, not its cached
# segments): "COMMAND|its 'BYTES COUNT' (viz: COUNT)" for each, against gpumem leaks --json
leaked_leaks() { "$G" leaks --json "$1" | jq -r '"\(.leaked_bytes) \(.leaked_allocations)"'; }
leaked_rank0() { "$G" report --json "$1" "$tmp/keep.db" | jq -r '.ranks[0] | "\(.leaked_bytes) \(.leaked_allocations)"'; }
leaked_rank1() { "$G" report --json "$tmp/plain.db" "$1" | jq -r '.ranks[1] | "\(.leaked_bytes) \(.leaked_allocations)"'; }
leaked_viz() { "$G" viz "$1" -o "$tmp/v.html" --force > /dev/null && echo "- $(grep -o '"nleaks":[0-9]*' "$tmp/v.html" | cut -d: -f2)"; }
for name in plain keep; do
  want=$(leaked_leaks "$tmp/$name.db")
  for fn in leaked_rank0 leaked_rank1 leaked_viz; do
    [[ $fn == leaked_rank0 && $name == keep ]] && continue
    [[ $fn == leaked_rank1 && $name == plain ]] && continue
    got=$("$fn" "$tmp/$name.db" 2> "$tmp/err") || { bad "$name: $fn: $(cat "$tmp/err")"; continue; }
    [[ $got == "$want" || ($fn == leaked_viz && ${got#- } == "${want#* }") ]] \
      && ok "$name: $fn: leaked '$got' = gpumem leaks' '$want'" || bad "$name: $fn: leaked '$got', gpumem leaks says '$want'"
  done
done
# the ranks report shows PyTorch's own peak beside the device's; viz names C++ frames as the report does
tp=$("$G" report --json "$tmp/plain.db" "$tmp/keep.db" | jq -r '[.ranks[].torch_peak_allocated] | join(" ")')
want="$(awk '$1 == "max_memory_allocated" { print $2 }' "$tmp/plain.out") $(awk '$1 == "max_memory_allocated" { print $2 }' "$tmp/keep.out")"
[[ $tp == "$want" ]] && ok "ranks report: PyTorch's own peak allocated per rank $tp = the scripts' max_memory_allocated" \
  || bad "ranks report: .ranks[].torch_peak_allocated '$tp', the scripts' max_memory_allocated '$want'"
"$G" viz "$tmp/plain.db" -o "$tmp/p.html" --force > /dev/null 2>&1 || bad "viz failed"
mangled=$(grep -o '(unnamed) in _Z[A-Za-z0-9_]*' "$tmp/p.html" | sort -u | sed -n 1p)
[[ -z $mangled ]] && grepq '(unnamed) in c10::' "$tmp/p.html" && ok "viz: classes name C++ frames demangled" \
  || bad "viz: a class named by a mangled symbol: $mangled"

# 5-6. what grows (leaks): claimed only where step after step kept something, and then exactly
# that; an allocation made after a step's range closed (the KEPT line, after opt.step()) is that
# step's. Only what step after step made counts, not every survivor of a site: keepout's outputs
# (10 KiB each, the first step's too) without cuBLAS's 32 MiB workspace, made once in step 1 at the
# same line; fresh's last input, alive at the end and the step before the last's, is one step's.
# "NAME|grows|its kept sites as 'SITE COUNT BYTES'"
kept=$(grep -n '# KEPT' "$script" | cut -d: -f1)
outl=$(grep -n '  # OUT$' "$script" | cut -d: -f1)
growth="plain|false|
evalp|false|
fresh|false|
keepout|true|views_mlp.py:$outl in <module> 4 $((4 * 256 * 10 * 4))
keep|true|views_mlp.py:$kept in <module> 6 $((6 * 4194304))"
while IFS='|' read -r name want_grows want_sites; do
  "$G" leaks --json "$tmp/$name.db" > "$tmp/$name.leaks.json" || { bad "$name: leaks failed"; continue; }
  grows=$(jq -r '.grows' "$tmp/$name.leaks.json")
  sites=$(jq -r '.kept_beyond_steps.by_site[] | "\(.site) \(.count) \(.bytes)"' "$tmp/$name.leaks.json")
  text=$("$G" leaks "$tmp/$name.db" | grep -E 'memory grows|no steady growth')
  said=false
  [[ $text == "  memory grows"* ]] && said=true
  [[ $grows == "$want_grows" && $said == "$want_grows" && $sites == "$want_sites" ]] \
    && ok "$name: grows $grows, what grows '${sites:-nothing}' ($text)" \
    || bad "$name: grows '$grows' (want $want_grows), what grows '$sites' (want '$want_sites'), text '$text'"
done <<< "$growth"
# each step's allocations alive at the end include the tensor it kept after its range closed
short=$(jq -r '[.steps[] | select(.leaked < 4194304) | .step] | join(" ")' "$tmp/keep.leaks.json")
n=$(jq -r '.steps | length' "$tmp/keep.leaks.json")
[[ $n == 6 && -z $short ]] && ok "keep: each of the 6 steps' alive-at-the-end bytes hold its kept 4 MiB" \
  || bad "keep: $n steps; steps whose alive-at-the-end bytes miss the 4 MiB kept after opt.step(): $short"

# 7. which view each command and export shows of a PyTorch program on PyTorch's allocator: the one
# table. "WHAT|command printing a figure|the PyTorch figure it must equal" (R: report --json's
# .torch, L: leaks --json), on plain.db (A) and keep.db (B, keeps 4 MiB a step: grows). The
# device view (PyTorch's segments as allocations, cuBLAS's workspaces) reads otherwise: diff
# once compared it, the chrome counter had only it, and chrome's slices, folded, speedscope and
# csv showed the segments (unnamed, made in the cache's alloc_block) until they took PyTorch's
# view by default (--view device keeps them, rows below). Which view each shows, and why:
#   report, leaks, diff, frag, tune, advise, the exports: PyTorch's (its tensors are what the
#     program holds; the cache is PyTorch's business, reported beside them as reserved);
#   export torch: PyTorch's (it is PyTorch's own snapshot format: memory_viz reads its tensors);
#   uses: the device's, and it says so: kernel arguments are matched to the allocations gpumem
#     saw (PyTorch's segments), so a tensor's uses are not known; record with --allocator gpumem;
#   viz: the device's on every panel (its flame graph included, so the page agrees with itself).
db=$tmp/plain.db db2=$tmp/keep.db
"$G" report --json "$db" > "$tmp/r.json" && "$G" leaks --json "$db" > "$tmp/l.json" || bad "report/leaks failed"
"$G" diff --json "$db" "$db2" --fail-if-peak-grows 1000 > "$tmp/d.json" || bad "diff failed"
"$G" export --format chrome "$db" -o "$tmp/c.json" || bad "export chrome failed"
R() { jq -r "$1" "$tmp/r.json"; }
chrome_max() { jq -r "[.traceEvents[] | select(.ph == \"C\" and .name == \"PyTorch device 0 memory\") | .args.$1] | max" "$tmp/c.json"; }
named_classes() { jq -r '[.classes[].class | select(. != "(unnamed)")] | length > 0' "$tmp/d.json"; }
# the exports of tensors (chrome's slices, folded, speedscope, csv; --view device keeps the
# device's): they once showed PyTorch's segments, unnamed, made in alloc_block
"$G" export --format chrome --view device "$db" -o "$tmp/cd.json" || bad "export chrome --view device failed"
"$G" export --format torch "$db" -o "$tmp/t.pickle" || bad "export torch failed"
"$G" advise --json "$db" > "$tmp/a.json" || bad "advise failed"
ntensors=$(sqlite3 "$db" "SELECT count(*) FROM events WHERE kind = 31")
folded_sum() { "$G" export --format folded "$@" "$db" | awk '!/^#/ { s += $NF } END { print s + 0 }'; }
folded_head() { "$G" export --format folded "$@" "$db" | sed -n 1p | grep -o "PyTorch's view" || echo "the device's"; }
# every stack names the script (its Python call site) or says it has no Python frame (autograd's
# backward, PyTorch's C++), none ends in the cache's alloc_block
folded_py() { "$G" export --format folded "$db" | awk '!/^#/ { n++; if (/views_mlp\.py/) py++; if ((/views_mlp\.py/ || /^\[no Python frame/) && !/alloc_block/) p++ } END { print (py > 0 && n == p) }'; }
ss() { "$G" export --format speedscope "$db" | jq -r "$1"; }
ss_peak() { ss '.profiles[0].weights | add'; }
# csv: "ROWS KINDS BYTES-LIVE-AT-PyTorch's-PEAK NAMED-ROWS"
csv_t() {
  "$G" export --format csv "$@" "$db" | "$torch_py" -c 'import csv, sys
at = int(sys.argv[1]); rows = list(csv.DictReader(sys.stdin))
live = sum(int(r["size"]) for r in rows if int(r["birth_seq"]) <= at and (not r["death_seq"] or int(r["death_seq"]) > at))
print(len(rows), ",".join(sorted({r["kind"] for r in rows})), live, sum(1 for r in rows if r["name"]))' "$(R .torch.peak_allocated_seq)"
}
slices() { jq -r "[.traceEvents[] | select(.ph == \"b\")] | \"\\(.|length) \\([.[] | select(.name | test(\"weight|bias\"))] | length > 0)\"" "$1"; }
torch_at_peak() { "$torch_py" -c 'import pickle, sys; d = pickle.load(open(sys.argv[1], "rb")); print(sum(s["allocated_size"] for s in d["segments"]))' "$tmp/t.pickle"; }
uses_says() { "$G" uses --name 0.weight "$db" 2>&1 | grep -c "the segments of PyTorch's cache, not its tensors"; }
exptab="export folded: bytes at the peak|folded_sum|$(R .torch.peak_allocated)
export folded --what total: every tensor's bytes|folded_sum --what total|$(sqlite3 "$db" "SELECT sum(size) FROM events WHERE kind = 31")
export folded: its comment line says the view|folded_head|PyTorch's view
export folded: every stack a Python call site of the script|folded_py|1
export folded --view device: the device's peak|folded_sum --view device|$(R .summary.peak_allocated)
export folded --view device: its comment line|folded_head --view device|the device's
export speedscope: the peak profile|ss_peak|$(R .torch.peak_allocated)
export speedscope: the view|ss .view|torch
export csv: tensors, kind 31, live at the peak, named|csv_t|$ntensors 31 $(R .torch.peak_allocated) $(sqlite3 "$db" "SELECT count(*) FROM alloc_life l JOIN events e ON e.seq = l.birth WHERE e.kind = 31 AND l.name IS NOT NULL")
export csv --view device: the device's allocations|csv_t --view device|$(sqlite3 "$db" "SELECT count(*) FROM events WHERE kind IN (1, 3)") 1 $(sqlite3 "$db" "SELECT coalesce(sum(e.size), 0) FROM events e JOIN alloc_life l ON l.birth = e.seq WHERE e.kind IN (1, 3) AND e.seq <= $(R .torch.peak_allocated_seq) AND (l.death IS NULL OR l.death > $(R .torch.peak_allocated_seq))") 0
export chrome: slices are the tensors, named|slices $tmp/c.json|$ntensors true
export chrome: the view|jq -r .view $tmp/c.json|torch
export chrome --view device: slices are the device's allocations|slices $tmp/cd.json|$(sqlite3 "$db" "SELECT count(*) FROM events WHERE kind IN (1, 3)") false
export torch (already PyTorch's: its snapshot): blocks allocated at the peak|torch_at_peak|$(R .torch.peak_allocated)
advise: the baseline's peak allocated (its tensors replayed)|jq -r .baseline.peak_allocated $tmp/a.json|$(R .torch.peak_allocated)
uses: the device's view, and says so (kernel arguments are matched to segments)|uses_says|1"
viewtab="diff: A's peak allocated|jq -r .a.peak_allocated $tmp/d.json|$(R .torch.peak_allocated)
diff: A's peak reserved|jq -r .a.peak_reserved $tmp/d.json|$(R .torch.peak_reserved)
diff: A's alive at exit (leaks' tensors, in blocks)|jq -r .a.alive_at_exit $tmp/d.json|$(sqlite3 "$db" "SELECT sum(e.size) FROM events e JOIN alloc_life l ON l.birth = e.seq WHERE e.kind = 31 AND l.death IS NULL")
diff: A's alive at exit, count|jq -r .a.alive_at_exit_count $tmp/d.json|$(jq -r .leaked_allocations "$tmp/l.json")
diff: A's view|jq -r .a.view $tmp/d.json|torch
diff: the gate's figure|jq -r .gate.on $tmp/d.json|max_memory_reserved
diff: classes named as report names them|named_classes|true
chrome: PyTorch's counter, allocated|chrome_max allocated|$(R .torch.peak_allocated)
chrome: PyTorch's counter, reserved|chrome_max reserved|$(R .torch.peak_reserved)
frag: reserved at the peak|$G frag --json $db|$(R .torch.peak_reserved)
tune: the recorded max_memory_reserved()|$G tune --json $db|$(R .torch.peak_reserved)
$exptab"
while IFS='|' read -r what cmd want; do
  case $what in
    frag:*) got=$($cmd | jq -r .at_peak.reserved) ;;
    tune:*) got=$($cmd | jq -r .torch.max_memory_reserved) ;;
    *) got=$(eval "$cmd") ;;
  esac
  [[ $got == "$want" ]] && ok "views: $what: $got" || bad "views: $what: $got, expected $want"
done <<< "$viewtab"
exit $fail
