#!/usr/bin/env bash
# Access tracking on the reading side, on a database built here with known uses (schema 1.2):
# - `gpumem report` "Idle at the peak": bytes per gap bucket on both sides of the peak, the
#   never-used / first-used-after / not-used-again categories, tensor classes and call sites in
#   order with their median gaps in time and in events and their kernels (text and --json);
# - kernel names demangled with libiberty (_Z6matmulPfPKfS1_ii -> matmul(float*, ...));
# - `gpumem uses`: exact name, glob, --id, --step, --top, --json, device time, exit codes;
# - without uses (tracking off, tracking on with nothing touched, a 1.1 file without
#   `launches` and uses.access) the report says how to turn tracking on and `uses` still shows
#   births and deaths.
source tests/integration/snapshot_common.bash
need "$GPUMEM"
command -v sqlite3 > /dev/null || { echo "skipped: sqlite3 is not installed" >&2; exit 77; }
command -v jq > /dev/null || { echo "skipped: jq is not installed" >&2; exit 77; }
SCHEMA=snapshot/record/schema.sql
MiB=1048576

# The recording. Seqs with no event are name records (`names`), as the recorder numbers them.
#   seq  t         event                                         range
#    1   0         alloc A wte          1 MiB  (param site)      -
#    3   0.1 ms    alloc B h0.mlp.fc    2 MiB  (act site)        step 1/fwd
#    5   0.2 ms    alloc C h1.mlp.fc    2 MiB                    step 1/fwd
#    7   0.3 ms    alloc D grad_buf     4 MiB  (param site)      -
#    9   0.4 ms    alloc E (unnamed)  512 KiB                    step 1/fwd
#   10   1 ms      memcpy HtoD: A write                          step 1/fwd
#   11   1.1 ms    alloc H late       256 KiB                    step 1/fwd
#   20   2 ms      matmul: A, B                                  step 1/fwd
#   30   50 ms     matmul: C, E                                  step 1/fwd
#   39   99.5 ms   matmul: C                                     step 1/fwd
#   40   100 ms    alloc I attn.scores  1 MiB   <- the peak: 10.75 MiB live
#   45   105 ms    matmul: I                                     step 1/fwd
#   50   300 ms    matmul_backward: C read                       step 1/bwd
#   55   400 ms    matmul_backward: B read+write, ran 50 us      step 1/bwd
#   56   410 ms    memset: H write                               step 1/bwd
#   60   2 s       matmul: A read                                step 1/bwd
#   70-77          free E, C, I, B                               step 1/bwd
#   80   2.05 s    alloc G h0.mlp.fc    2 MiB                    step 2/fwd
#   85   2.1 s     matmul: G                                     step 2/fwd
#   90   2.2 s     free G                                        step 2/fwd
# A, D and H are still alive at the end.
make_db() { # $1 path, $2 schema minor, $3 meta.uses ('' = none), $4 with uses rows (1/0)
  local db=$1 minor=$2 uses=$3 rows=$4 schema=$SCHEMA
  if [[ $minor == 1 ]]; then
    # schema 1.1: no launches table, no uses.access
    sed -e '/^CREATE TABLE launches/,/);/d' \
        -e 's/CREATE TABLE uses (birth INTEGER, seq INTEGER, kernel INTEGER, access INTEGER,/CREATE TABLE uses (birth INTEGER, seq INTEGER, kernel INTEGER,/' \
        "$SCHEMA" > "$TMP/schema11.sql"
    schema=$TMP/schema11.sql
  fi
  rm -f "$db"
  {
    cat "$schema"
    cat <<EOF
INSERT INTO meta VALUES ('schema_major', 1), ('schema_minor', $minor), ('state', 'closed'),
  ('cmdline', 'constructed by snapshot_uses.sh'), ('pid', 1);
INSERT INTO strings VALUES (1, 'wte'), (2, 'h0.mlp.fc'), (3, 'h1.mlp.fc'), (4, 'grad_buf'),
  (5, 'late'), (6, 'attn.scores'), (10, '_Z6matmulPfPKfS1_ii'), (11, 'memcpy HtoD'),
  (12, '_Z15matmul_backwardPfS_PKfii'), (13, 'memset'),
  (20, 'step 1'), (21, 'fwd'), (22, 'bwd'), (23, 'step 2');
INSERT INTO ranges VALUES (1, NULL, 1, 0, 0, 20, 0, 2040000000, 'step 1'),
  (2, 1, 1, 0, 0, 21, 0, 200000000, 'step 1/fwd'),
  (3, 1, 1, 0, 0, 22, 200000000, 2040000000, 'step 1/bwd'),
  (4, NULL, 1, 0, 0, 23, 2040000000, 2300000000, 'step 2'),
  (5, 4, 1, 0, 0, 21, 2040000000, 2300000000, 'step 2/fwd');
INSERT INTO frames (id, module, offset, function, file, line, symbolized) VALUES (1, NULL, 16, 'alloc_act', 'model.c', 10, 1),
  (2, NULL, 32, 'forward', 'model.c', 50, 1),
  (3, NULL, 48, 'alloc_param', 'model.c', 20, 1),
  (4, NULL, 64, 'init', 'model.c', 5, 1);
INSERT INTO stacks VALUES (1, 0, 1), (1, 1, 2), (2, 0, 3), (2, 1, 4);
-- events(seq, t, kind, flags, device, stream, thread, addr, size, requested, alloc_id, stack, range)
INSERT INTO events VALUES
  (1, 0, 1, 0, 0, 0, 1, 4096, $MiB, $MiB, 1, 2, NULL),
  (3, 100000, 1, 0, 0, 0, 1, 2097152, 2*$MiB, 2*$MiB - 100, 3, 1, 2),
  (5, 200000, 1, 0, 0, 0, 1, 4194304, 2*$MiB, 2*$MiB, 5, 1, 2),
  (7, 300000, 1, 0, 0, 0, 1, 6291456, 4*$MiB, 4*$MiB, 7, 2, NULL),
  (9, 400000, 1, 0, 0, 0, 1, 10485760, 524288, 524288, 9, 1, 2),
  (10, 1000000, 20, 0, 0, 0, 1, 0, $MiB, NULL, NULL, NULL, 2),
  (11, 1100000, 1, 0, 0, 0, 1, 11534336, 262144, 262144, 11, 1, 2),
  (20, 2000000, 20, 0, 0, 0, 1, 777, 0, NULL, NULL, NULL, 2),
  (30, 50000000, 20, 0, 0, 0, 1, 777, 0, NULL, NULL, NULL, 2),
  (39, 99500000, 20, 0, 0, 0, 1, 777, 0, NULL, NULL, NULL, 2),
  (40, 100000000, 1, 0, 0, 0, 1, 12582912, $MiB, $MiB, 40, 1, 2),
  (45, 105000000, 20, 0, 0, 0, 1, 777, 0, NULL, NULL, NULL, 2),
  (50, 300000000, 20, 0, 0, 0, 1, 778, 0, NULL, NULL, NULL, 3),
  (55, 400000000, 20, 0, 0, 0, 1, 778, 0, NULL, NULL, NULL, 3),
  (56, 410000000, 20, 0, 0, 0, 1, 0, 262144, NULL, NULL, NULL, 3),
  (60, 2000000000, 20, 0, 0, 0, 1, 777, 0, NULL, NULL, NULL, 3),
  (70, 2010000000, 2, 0, 0, 0, 1, 10485760, 0, NULL, NULL, NULL, 3),
  (75, 2020000000, 2, 0, 0, 0, 1, 4194304, 0, NULL, NULL, NULL, 3),
  (76, 2025000000, 2, 0, 0, 0, 1, 12582912, 0, NULL, NULL, NULL, 3),
  (77, 2030000000, 2, 0, 0, 0, 1, 2097152, 0, NULL, NULL, NULL, 3),
  (80, 2050000000, 1, 0, 0, 0, 1, 14680064, 2*$MiB, 2*$MiB, 80, 1, 5),
  (85, 2100000000, 20, 0, 0, 0, 1, 777, 0, NULL, NULL, NULL, 5),
  (90, 2200000000, 2, 0, 0, 0, 1, 14680064, 0, NULL, NULL, NULL, 5);
INSERT INTO names (seq, addr, name) VALUES (2, 4096, 1), (4, 2097152, 2), (6, 4194304, 3), (8, 6291456, 4),
  (12, 11534336, 5), (41, 12582912, 6), (81, 14680064, 2);
INSERT INTO alloc_life VALUES (9, 70, NULL), (5, 75, 3), (40, 76, 6), (3, 77, 2), (80, 90, 2),
  (1, NULL, 1), (7, NULL, 4), (11, NULL, 5);
EOF
    [[ -n $uses ]] && echo "INSERT INTO meta VALUES ('uses', '$uses');"
    if [[ $rows == 1 ]]; then
      echo "INSERT INTO launches VALUES (10, 1, 11, $MiB, NULL, NULL), (20, 0, 10, 0, NULL, NULL),
        (30, 0, 10, 0, NULL, NULL), (39, 0, 10, 0, NULL, NULL), (45, 0, 10, 0, NULL, NULL),
        (50, 0, 12, 0, NULL, NULL), (55, 0, 12, 0, 400010000, 400060000),
        (56, 2, 13, 262144, NULL, NULL), (60, 0, 10, 0, NULL, NULL), (85, 0, 10, 0, NULL, NULL);"
      echo "INSERT INTO uses VALUES (1, 10, 11, 2), (1, 20, 10, 0), (3, 20, 10, 0), (5, 30, 10, 0),
        (9, 30, 10, 0), (5, 39, 10, 0), (40, 45, 10, 0), (5, 50, 12, 1), (3, 55, 12, 3),
        (11, 56, 13, 2), (1, 60, 10, 1), (80, 85, 10, 0);"
    fi
  } | sqlite3 "$db" || fail "building $db"
}

DB=$TMP/u.db
make_db "$DB" 2 timed 1

# --- idle at the peak, JSON: every number is known
"$GPUMEM" report --json "$DB" > "$TMP/r.json" || fail "report --json failed"
q() { jq -c "$1" "$TMP/r.json"; }
expect() { [[ $(q "$1") == "$2" ]] || fail "$1: got $(q "$1"), expected $2"; }
expect '.summary.peak_allocated' $((43 * MiB / 4))
expect '.idle_at_peak.uses' true
expect '.idle_at_peak.tracking' '"timed"'
expect '.idle_at_peak.peak_seq' 40
expect '.idle_at_peak.peak_t_ns' 100000000
expect '.idle_at_peak.bytes_live' $((43 * MiB / 4))
expect '.idle_at_peak.bytes_live == .peak.live_bytes' true
expect '.idle_at_peak.count_live' 7
expect '[.idle_at_peak.bytes_never_used, .idle_at_peak.count_never_used]' "[$((4 * MiB)),1]"
expect '[.idle_at_peak.bytes_not_used_before, .idle_at_peak.count_not_used_before]' "[$((5 * MiB / 4)),2]"
expect '[.idle_at_peak.bytes_not_used_again, .idle_at_peak.count_not_used_again]' "[524288,1]"
expect '[.idle_at_peak.buckets[].gap]' '["<1ms","1-10ms","10-100ms","100ms-1s",">=1s","none"]'
# since the last use: C 0.5 ms; A, B 98 ms and E 50 ms; D never, H and I not before the peak
expect '[.idle_at_peak.buckets[].since_bytes]' "[$((2 * MiB)),0,$((7 * MiB / 2)),0,0,$((21 * MiB / 4))]"
expect '[.idle_at_peak.buckets[].since_count]' '[1,0,3,0,0,3]'
# until the next use: I 5 ms; B 300 ms, C 200 ms, H 310 ms; A 1.9 s; D never, E not again
expect '[.idle_at_peak.buckets[].until_bytes]' "[0,$MiB,0,$((17 * MiB / 4)),$MiB,$((9 * MiB / 2))]"
expect '[.idle_at_peak.buckets[].until_count]' '[0,1,0,3,1,2]'
expect '[.idle_at_peak.buckets[] | .since_bytes] | add' $((43 * MiB / 4))
expect '[.idle_at_peak.buckets[] | .until_bytes] | add' $((43 * MiB / 4))
# classes by bytes (ties by name), digits as *
expect '[.idle_at_peak.classes[].name]' '["grad_buf","h*.mlp.fc","attn.scores","wte","(unnamed)","late"]'
expect '.idle_at_peak.classes[0] | [.count, .bytes, .never_used, .since_last_use_ns, .until_next_use_ns, .last_kernel]' \
  "[1,$((4 * MiB)),1,null,null,null]"
# Gaps in events count the rows of `events` between (not the seq difference: the name records'
# seqs have none). h*.mlp.fc = h0 (B: 98 ms / 3 events before (30, 39, 40), 300 ms / 3 after
# (45, 50, 55)) and h1 (C: 0.5 ms / 1 event before, 200 ms / 2 after (45, 50)): the lower
# medians are C's on both sides
expect '.idle_at_peak.classes[1] | [.count, .bytes, .since_last_use_ns, .since_last_use_events, .until_next_use_ns, .until_next_use_events]' \
  "[2,$((4 * MiB)),500000,1,200000000,2]"
expect '.idle_at_peak.classes[1].last_kernel' '"matmul(float*, float const*, float const*, int, int)"'
expect '.idle_at_peak.classes[1].next_kernel' '"matmul_backward(float*, float*, float const*, int, int)"'
expect '.idle_at_peak.classes[2] | [.since_last_use_ns, .until_next_use_ns, .until_next_use_events, .next_use_seq]' '[null,5000000,1,45]'
expect '.idle_at_peak.classes[3] | [.since_last_use_ns, .since_last_use_events, .until_next_use_ns, .until_next_use_events]' \
  '[98000000,3,1900000000,5]'
expect '.idle_at_peak.classes[3] | [.last_use_seq, .next_use_seq]' '[20,60]'
expect '.idle_at_peak.classes[4] | [.not_used_again, .since_last_use_ns, .until_next_use_ns]' '[1,50000000,null]'
# call sites: activations (B, C, E, H, I) then parameters (A, D)
expect '[.idle_at_peak.sites[] | [.site, .count, .bytes]]' \
  "[[\"alloc_act (model.c:10) < forward (model.c:50)\",5,$((23 * MiB / 4))],[\"alloc_param (model.c:20) < init (model.c:5)\",2,$((5 * MiB))]]"
# activations: since B 98, C 0.5, E 50 ms -> E's 50 ms; until I 5, C 200, B 300, H 310 ms -> C's
expect '.idle_at_peak.sites[0] | [.since_last_use_ns, .since_last_use_events, .until_next_use_ns, .until_next_use_events, .never_used, .not_used_again]' \
  '[50000000,2,200000000,2,0,1]'
expect '.idle_at_peak.sites[1] | [.since_last_use_ns, .until_next_use_ns, .never_used]' '[98000000,1900000000,1]'
expect '[(.idle_at_peak.classes | length), (.idle_at_peak.sites | length)]' '[6,2]'
"$GPUMEM" report --json --top 2 "$DB" | jq -e '.idle_at_peak.classes | length == 2' > /dev/null || fail "--top 2 limits the classes"
# without grad_buf (alive at the end, never used) every live allocation is settled by a use or
# its death before the table ends, so the sweep stops early: E is settled by its free at 70
# when G's use (85) is read, and still counts as not used again
make_db "$TMP/settle.db" 2 1 1
sqlite3 "$TMP/settle.db" "DELETE FROM events WHERE seq = 7; DELETE FROM names WHERE seq = 8; DELETE FROM alloc_life WHERE birth = 7"
"$GPUMEM" report --json "$TMP/settle.db" | jq -c '.idle_at_peak | [.bytes_live, .count_never_used, .bytes_not_used_again, [.buckets[].until_count]]' \
  | grepq -x "\[$((27 * MiB / 4)),0,524288,\[0,1,0,3,1,1\]\]" || fail "early-settled sweep: $("$GPUMEM" report --json "$TMP/settle.db" | jq -c .idle_at_peak)"
echo "ok: idle at the peak (JSON): buckets, categories, classes and sites with their gaps"

# --- the same in text
"$GPUMEM" report "$DB" > "$TMP/r.txt" || fail "report failed"
sed -n '/^Idle at the peak/,/^OOM forensics/p' "$TMP/r.txt" > "$TMP/idle.txt"
grep -qx 'Idle at the peak: 10.75 MiB live in 7 allocations at event 40 (100.00 ms), by the time since their last use and until their next one' "$TMP/idle.txt" \
  || fail "idle header: $(head -1 "$TMP/idle.txt")"
grep -Eq '^    10-100ms +3\.50 MiB +3x +0 B +0x$' "$TMP/idle.txt" || fail "10-100ms row: $(cat "$TMP/idle.txt")"
grep -Eq '^    none +5\.25 MiB +3x +4\.50 MiB +2x$' "$TMP/idle.txt" || fail "none row: $(cat "$TMP/idle.txt")"
grep -Eq '^  never used +4\.00 MiB in 1 allocation \(no kernel' "$TMP/idle.txt" || fail "never used line"
grep -Eq '^  first used after peak +1\.25 MiB in 2 allocations' "$TMP/idle.txt" || fail "first used after line"
grep -Eq '^  not used again +512\.00 KiB in 1 allocation \(' "$TMP/idle.txt" || fail "not used again line"
# class order, and h*.mlp.fc with its gaps and kernels
[[ $(sed -n '/by tensor name/,/by call site/p' "$TMP/idle.txt" | grep -E '^ {4}[ 0-9.]+ [KMG]?i?B' | sed -E 's/.*[0-9]x  //; s/  \([0-9]+ never used\)$//' | tr '\n' ' ') \
   == 'grad_buf h*.mlp.fc attn.scores wte (unnamed) late ' ]] || fail "class order in text: $(cat "$TMP/idle.txt")"
grep -A2 -E 'x  h\*\.mlp\.fc$' "$TMP/idle.txt" > "$TMP/h.txt"
grep -qx '        last use 500.0 us / 1 event before: matmul(float\*, float const\*, float const\*, int, int)' "$TMP/h.txt" \
  || fail "h*.mlp.fc last use: $(cat "$TMP/h.txt")"
grep -qx '        next use 200.00 ms / 2 events after: matmul_backward(float\*, float\*, float const\*, int, int)' "$TMP/h.txt" \
  || fail "h*.mlp.fc next use: $(cat "$TMP/h.txt")"
grep -A2 -E 'x  grad_buf  \(1 never used\)$' "$TMP/idle.txt" | grepq 'next use: none' || fail "grad_buf never used: $(cat "$TMP/idle.txt")"
expect '.idle_at_peak.launch_words_lost' 0
! grep -q 'launches lost' "$TMP/idle.txt" || fail "a note about lost launches where none was lost"
# launches whose words the ring dropped have no uses: the report says its gaps may be too long
sqlite3 "$DB" "INSERT INTO meta VALUES ('launch_words_lost', 2)"
"$GPUMEM" report --json "$DB" | jq -e '.idle_at_peak.launch_words_lost == 2' > /dev/null || fail "launch_words_lost in JSON"
# (through a file: grep -q stops reading at its match, and a report longer than one stdio
# buffer then dies of SIGPIPE, which pipefail would take for a failure)
"$GPUMEM" report "$DB" > "$TMP/lost.txt"
grep -q '^  note: 2 launches lost their arguments (the ring was full: raise GPUMEM_RING)' "$TMP/lost.txt" || fail "lost launches note"
sqlite3 "$DB" "DELETE FROM meta WHERE key = 'launch_words_lost'"
echo "ok: idle at the peak (text)"

# --- gpumem uses: exact name, one per step -> 2 allocations in birth order
"$GPUMEM" uses "$DB" --name h0.mlp.fc > "$TMP/u.txt" || fail "uses --name failed"
grep -qx '  2 allocations match' "$TMP/u.txt" || fail "match count: $(cat "$TMP/u.txt")"
grep -qx 'h0.mlp.fc (id 3): 2.00 MiB (2097052 bytes requested) on device 0' "$TMP/u.txt" || fail "heading: $(cat "$TMP/u.txt")"
grep -qx '       0.100 ms  event 3         born          \[step 1/fwd\]  at alloc_act (model.c:10) < forward (model.c:50)' "$TMP/u.txt" \
  || fail "born line: $(cat "$TMP/u.txt")"
grep -qx '       2.000 ms  event 20        use   ?      matmul(float\*, float const\*, float const\*, int, int)  \[step 1/fwd\]' "$TMP/u.txt" \
  || fail "use line (kernel, unknown access): $(cat "$TMP/u.txt")"
grep -qx '     400.000 ms  event 55        use   rw     matmul_backward(float\*, float\*, float const\*, int, int)  \[step 1/bwd\]  ran 50.0 us' "$TMP/u.txt" \
  || fail "use line (read+write, device time): $(cat "$TMP/u.txt")"
grep -qx '    2030.000 ms  event 77        died          \[step 1/bwd\]  after 2.030 s' "$TMP/u.txt" || fail "died line: $(cat "$TMP/u.txt")"
grep -qx '  2 uses: 0 read, 0 write, 1 read+write, 1 unknown' "$TMP/u.txt" || fail "use counts: $(cat "$TMP/u.txt")"
grep -qx 'h0.mlp.fc (id 80): 2.00 MiB (2097152 bytes requested) on device 0' "$TMP/u.txt" || fail "second allocation: $(cat "$TMP/u.txt")"
# a glob, the default of 3 shown and the rest counted; --top; --step
"$GPUMEM" uses "$DB" --name 'h*.mlp.fc' > "$TMP/g.txt" || fail "uses glob failed"
grep -qx '  3 allocations match' "$TMP/g.txt" || fail "glob count: $(head -3 "$TMP/g.txt")"
[[ $(grep -c ' (id [0-9]*): ' "$TMP/g.txt") -eq 3 ]] || fail "glob shows 3"
"$GPUMEM" uses "$DB" --name 'h*.mlp.fc' --top 1 > "$TMP/g1.txt" || fail "uses --top 1 failed"
[[ $(grep -c ' (id [0-9]*): ' "$TMP/g1.txt") -eq 1 ]] && grep -q '^\.\.\. 2 more allocations match' "$TMP/g1.txt" \
  || fail "--top 1: $(cat "$TMP/g1.txt")"
"$GPUMEM" uses "$DB" --name 'h0.*' --step 2 > "$TMP/s.txt" || fail "uses --step failed"
grep -q '^h0.mlp.fc (id 80)' "$TMP/s.txt" && ! grep -q '(id 3)' "$TMP/s.txt" || fail "--step 2: $(cat "$TMP/s.txt")"
# copies and memsets carry their direction; an allocation alive at the end says so
"$GPUMEM" uses "$DB" --id 1 > "$TMP/a.txt" || fail "uses --id failed"
grep -q 'event 10        use   write  memcpy HtoD  \[step 1/fwd\]$' "$TMP/a.txt" || fail "copy write: $(cat "$TMP/a.txt")"
grep -q 'event 60        use   read   matmul(' "$TMP/a.txt" || fail "read use: $(cat "$TMP/a.txt")"
grep -qx '  still alive when the recording ended' "$TMP/a.txt" || fail "alive at end: $(cat "$TMP/a.txt")"
"$GPUMEM" uses "$DB" --name grad_buf | grepq -x '  (never used: no kernel, copy or memset touched it)' || fail "never used tensor"
# JSON
"$GPUMEM" uses "$DB" --name h0.mlp.fc --json > "$TMP/u.json" || fail "uses --json failed"
j() { jq -c "$1" "$TMP/u.json"; }
[[ $(j '[.matched, .shown, .uses, .tracking]') == '[2,2,true,"timed"]' ]] || fail "uses json header: $(j .)"
[[ $(j '[.allocations[].id]') == '[3,80]' ]] || fail "uses json ids"
[[ $(j '.allocations[0] | [.birth.seq, .birth.t_ns, .birth.phase, .death.seq, .death.phase, (.uses | length)]') \
   == '[3,100000,"step 1/fwd",77,"step 1/bwd",2]' ]] || fail "uses json birth/death: $(j '.allocations[0]')"
[[ $(j '.allocations[0].uses[1] | [.seq, .t_ns, .kernel, .kernel_mangled, .op, .access, .phase, .device_ns]') \
   == '[55,400000000,"matmul_backward(float*, float*, float const*, int, int)","_Z15matmul_backwardPfS_PKfii","kernel","read_write","step 1/bwd",50000]' ]] \
  || fail "uses json use: $(j '.allocations[0].uses[1]')"
[[ $(j '.allocations[0].uses[0] | [.access, .device_ns]') == '["unknown",null]' ]] || fail "uses json untimed use"
echo "ok: gpumem uses (name, glob, --id, --step, --top, --json; demangled kernels, access, phase, device time)"

# --- exit codes and messages
"$GPUMEM" uses "$DB" --name nosuch > /dev/null 2> "$TMP/e"; [[ $? -eq 1 ]] || fail "no match: expected exit 1"
grep -q "no allocation named 'nosuch'" "$TMP/e" && grep -q 'names in this recording include wte' "$TMP/e" || fail "no match message: $(cat "$TMP/e")"
"$GPUMEM" uses "$DB" --id 2 > /dev/null 2>&1; [[ $? -eq 1 ]] || fail "no allocation born at 2: expected exit 1"
"$GPUMEM" uses "$DB" > /dev/null 2>&1; [[ $? -eq 2 ]] || fail "uses without --name/--id: expected exit 2"
"$GPUMEM" uses "$DB" --name a --id 1 > /dev/null 2>&1; [[ $? -eq 2 ]] || fail "--name and --id: expected exit 2"
"$GPUMEM" uses "$DB" --id x > /dev/null 2>&1; [[ $? -eq 2 ]] || fail "bad --id: expected exit 2"
"$GPUMEM" uses "$TMP/missing.db" --id 1 > /dev/null 2>&1; [[ $? -eq 3 ]] || fail "missing database: expected exit 3"
"$GPUMEM" uses --help | grepq '^usage: gpumem uses DB' || fail "uses --help"
"$GPUMEM" --help | grepq '^  uses DB' || fail "gpumem --help lists uses"
echo "ok: uses exit codes 1 (no match), 2 (usage), 3 (unreadable)"

# --- no uses: tracking off (no meta.uses), on but empty, and a 1.1 file
make_db "$TMP/off.db" 2 '' 0
"$GPUMEM" report --json "$TMP/off.db" | jq -ce '.idle_at_peak | [.uses, .tracking]' | grepq -x '\[false,"off"\]' || fail "off: json"
"$GPUMEM" report "$TMP/off.db" | grep -A1 '^Idle at the peak$' | grepq 'access tracking was off: record with GPUMEM_USES=1' || fail "off: text hint"
make_db "$TMP/empty.db" 2 1 0
"$GPUMEM" report --json "$TMP/empty.db" | jq -ce '.idle_at_peak | [.uses, .tracking]' | grepq -x '\[false,"empty"\]' || fail "empty: json"
make_db "$TMP/v11.db" 1 '' 0
"$GPUMEM" report --json "$TMP/v11.db" > "$TMP/v11.json" || fail "1.1 report failed"
[[ $(jq -c '[.schema, .idle_at_peak.uses, .summary.peak_allocated]' "$TMP/v11.json") == "[\"1.1\",false,$((43 * MiB / 4))]" ]] \
  || fail "1.1 report: $(jq -c '[.schema, .idle_at_peak]' "$TMP/v11.json")"
"$GPUMEM" uses "$TMP/v11.db" --name h1.mlp.fc > "$TMP/v11.txt" || fail "uses on a 1.1 file failed"
grep -q 'access tracking was off' "$TMP/v11.txt" && grep -q 'event 5         born' "$TMP/v11.txt" && grep -q 'event 75        died' "$TMP/v11.txt" \
  || fail "uses on 1.1: $(cat "$TMP/v11.txt")"
# a 1.1 file with uses rows (no access column, no launches): uses still listed, access unknown
sqlite3 "$TMP/v11.db" "INSERT INTO uses VALUES (5, 30, 10), (5, 50, 12)"
"$GPUMEM" uses "$TMP/v11.db" --name h1.mlp.fc --json | jq -ce '[.allocations[0].uses[] | [.seq, .access, .op]]' \
  | grepq -x '\[\[30,"unknown",null\],\[50,"unknown",null\]\]' || fail "1.1 uses rows"
echo "ok: without uses the report says how to turn tracking on; 1.1 files read"

# --- files the recorder wrote (rec_launch through snapshot_app; the trainer under libgpumem.so)
if [[ -x $APP ]]; then
  GPUMEM_DB=$TMP/app.db GPUMEM_STACKS=0 "$APP" uses > /dev/null || fail "snapshot_app uses failed"
  "$GPUMEM" uses "$TMP/app.db" --name h3.mlp.fc > "$TMP/app.txt" || fail "uses on a recorded file: $(cat "$TMP/app.txt")"
  # the copy wrote it, gemm (through an interior pointer) and gelu used it; the launch after its
  # free ("stale") did not
  [[ $(grep -c '  use  ' "$TMP/app.txt") -eq 3 ]] && grep -q 'use   write  memcpy HtoD  \[step 0/fwd\]' "$TMP/app.txt" \
    && grep -q 'use   ?      gemm  \[step 0/fwd\]' "$TMP/app.txt" && grep -q 'use   ?      gelu  \[step 0/fwd\]' "$TMP/app.txt" \
    && ! grep -q stale "$TMP/app.txt" || fail "recorded uses of h3.mlp.fc: $(cat "$TMP/app.txt")"
  echo "ok: gpumem uses on a file written by the recorder (rec_launch)"
fi
TRAIN=$BUILD/train_gpt2_sim
if [[ -x $TRAIN && -f $BUILD/libgpumem.so ]]; then
  GPUMEM_USES=1 "$GPUMEM" record -q -o "$TMP/train.db" -- "$TRAIN" --steps 2 > /dev/null 2>&1 || fail "trainer under GPUMEM_USES=1 failed"
  "$GPUMEM" report --json "$TMP/train.db" > "$TMP/train.json" || fail "report on the trainer's recording"
  jq -e '.idle_at_peak as $i | $i.uses and $i.bytes_live == .peak.live_bytes and $i.bytes_live > 0
         and ([$i.buckets[].since_bytes] | add) == $i.bytes_live and ([$i.buckets[].until_bytes] | add) == $i.bytes_live
         and ($i.classes | length) > 0 and ($i.classes | map(.bytes) | . == (sort | reverse))' "$TMP/train.json" > /dev/null \
    || fail "trainer idle at the peak: $(jq -c .idle_at_peak "$TMP/train.json")"
  # an activation's life: made in the forward pass, used by forward and backward kernels, freed
  "$GPUMEM" uses "$TMP/train.db" --name h0.mlp.fc --step 1 --json > "$TMP/fc.json" || fail "uses on the trainer's recording"
  jq -e '.matched == 1 and (.allocations[0] | (.uses | length) >= 2 and .death != null
         and any(.uses[]; .phase | test("/fwd/")) and any(.uses[]; .phase | test("/bwd/"))
         and ([.uses[].seq] | . == sort) and .birth.seq < .uses[0].seq and .uses[-1].seq < .death.seq)' "$TMP/fc.json" > /dev/null \
    || fail "h0.mlp.fc in step 1: $(jq -c . "$TMP/fc.json")"
  echo "ok: the trainer under GPUMEM_USES=1: idle at the peak adds up, h0.mlp.fc used in fwd and bwd"
fi
