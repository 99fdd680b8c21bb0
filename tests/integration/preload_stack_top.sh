#!/usr/bin/env bash
# Properties of the recorded call stacks' top (one row per entry point that records a stack):
#  - every stack begins at the program's frame that made the call: stack_top_app calls each
#    entry point (the runtime's by symbol, the driver's by symbol and through cuGetProcAddress,
#    gpumem's API, and that API through another gpumem object, libgpumem_caller.so, the way
#    libgpumem_torch.so calls it) from its own function at_<entry point>, three rounds (the
#    recorder's memo of walks answers the repeats). With GPUMEM_STACKS=3 each of its stacks is
#    exactly at_<entry point> < depth_1 < depth_2: 3 frames of the program, none of gpumem's
#    (no frame of any libgpumem* object anywhere in the recording);
#  - GPUMEM_STACKS=5 gives 5 of the program's frames (... < run < main);
#  - a recording in the old form (stacks with libgpumem.so's frames at the top, what builds
#    before this one wrote) names the same call site for every stack as the new form: the
#    readers still skip gpumem's frames by module.
source tests/integration/preload_common.bash
GPUMEM=$BUILD/gpumem
APP=$APPS/stack_top_app
CALLER=$PWD/$APPS/libgpumem_caller.so
need "$LIB" "$APP" "$CALLER" "$GPUMEM"
# stacks are off under ThreadSanitizer (preload_common.bash)
[[ ${SAN:-} == thread ]] && { echo "skip: no stacks under ThreadSanitizer"; exit 77; }
command -v sqlite3 >/dev/null || { echo "skip: sqlite3 (Debian package sqlite3) is not installed"; exit 77; }

# record N DB: stack_top_app with N frames a stack, its entry points in $TMP/steps
record() {
  GPUMEM_STACKS=$1 GPUMEM_DB=$2 LD_PRELOAD=$LIB "$APP" "$CALLER" >"$TMP/steps" 2>"$TMP/err" ||
    { cat "$TMP/err"; fail "stack_top_app failed under libgpumem.so (GPUMEM_STACKS=$1)"; finish; }
}
# stacks DB: one line per event with a stack: "kind|frame 0 < frame 1 < ..." (names symbolized)
stacks() {
  "$GPUMEM" sql "$1" -c "SELECT e.kind, (SELECT group_concat(function, ' < ') FROM (SELECT
      f.function FROM stacks s JOIN frames f ON f.id = s.frame WHERE s.stack = e.stack ORDER BY
      s.depth)) AS frames_top FROM events e WHERE e.stack != 0 ORDER BY e.seq" | tail -n +2
}

record 3 "$TMP/n3.db"
stacks "$TMP/n3.db" >"$TMP/n3.stacks"
[[ -s $TMP/steps && -s $TMP/n3.stacks ]] || fail "no entry points called or no stacks recorded"
printf '%-36s %-7s %s\n' "entry point (GPUMEM_STACKS=3)" events "first frames recorded"
while read -r at; do
  want="$at < depth_1 < depth_2"
  n=$(grep -c "|$at\( \|$\)" "$TMP/n3.stacks")
  good=$(awk -F'|' -v w="$want" '$2 == w { g++ } END { print g + 0 }' "$TMP/n3.stacks")
  first=$(awk -F'|' -v a="$at" 'index($2 " ", a " ") == 1 { print $2; exit }' "$TMP/n3.stacks")
  printf '%-36s %-7s %s\n' "$at" "$n" "${first:-(none)}"
  if [[ $n -gt 0 && $good -eq $n ]]; then pass "$at: every stack is $want"
  else fail "$at: $good of $n stacks are '$want' (gpumem's frames at the top?)"; fi
done <"$TMP/steps"
# the events the rows do not name (cuMemPoolCreate's, the exit's) hold no frame of gpumem's
bad=$("$GPUMEM" sql "$TMP/n3.db" -c "SELECT count(*) FROM stacks s JOIN frames f ON f.id = s.frame
      JOIN modules m ON m.id = f.module WHERE m.path LIKE '%/libgpumem%'" | tail -1)
check_eq "frames of libgpumem* objects in the recording" "$bad" 0
# an event of the rows' functions whose stack does not begin with them: gpumem's frames above
stray=$(grep -v '|at_' "$TMP/n3.stacks" | grep -c 'depth_1')
check_eq "stacks through depth_1 that do not begin at the program's at_ function" "$stray" 0

record 5 "$TMP/n5.db"
stacks "$TMP/n5.db" >"$TMP/n5.stacks"
short=$(awk -F'|' 'index($2, "at_") == 1 && $2 !~ / < depth_1 < depth_2 < run < main$/' "$TMP/n5.stacks" | wc -l)
all=$(grep -c '|at_' "$TMP/n5.stacks")
[[ $all -gt 0 && $short -eq 0 ]] && pass "GPUMEM_STACKS=5: $all stacks, each at_* < depth_1 < depth_2 < run < main" ||
  { fail "GPUMEM_STACKS=5: $short of $all stacks are not 5 of the program's frames"; grep -v 'run < main$' "$TMP/n5.stacks" | head -5; }

# The old form: the same recording with two frames of libgpumem.so above every stack (module and
# frames added, depths moved down by two), as recorded before gpumem left its frames out.
cp "$TMP/n3.db" "$TMP/old.db"
sqlite3 "$TMP/old.db" "
  INSERT INTO modules (path, build_id, base, size) VALUES ('$LIB', NULL, 0, 0);
  INSERT INTO frames (module, offset, symbolized, python)
    VALUES ((SELECT max(id) FROM modules), 4096, 0, 0), ((SELECT max(id) FROM modules), 8192, 0, 0);
  UPDATE stacks SET depth = -depth - 1;
  UPDATE stacks SET depth = -depth + 1;
  INSERT INTO stacks SELECT DISTINCT stack, 0, (SELECT max(id) - 1 FROM frames) FROM stacks;
  INSERT INTO stacks SELECT DISTINCT stack, 1, (SELECT max(id) FROM frames) FROM stacks;" ||
  fail "could not write the old form"
sites() { "$GPUMEM" sql "$1" -c "SELECT stack, function, file, line FROM stack_sites ORDER BY stack"; }
sites "$TMP/n3.db" >"$TMP/new.sites"
sites "$TMP/old.db" >"$TMP/old.sites"
top=$("$GPUMEM" sql "$TMP/old.db" -c "SELECT count(*) FROM stacks s JOIN frames f ON f.id = s.frame
      JOIN modules m ON m.id = f.module WHERE s.depth = 0 AND m.path LIKE '%/libgpumem.so'" | tail -1)
if [[ $top -gt 0 ]] && cmp -s "$TMP/new.sites" "$TMP/old.sites" && [[ $(wc -l <"$TMP/new.sites") -gt 10 ]]; then
  pass "the old form ($top stacks with libgpumem.so at the top) names the same sites as the new"
else
  fail "the old form names other sites than the new"; diff "$TMP/new.sites" "$TMP/old.sites" | head
fi
finish
