#!/usr/bin/env bash
# tests/run.sh starts the programs longest first by the last run's times (GPUMEM_TEST_TIMES),
# the ones it has no time for first in list order, and still prints every output in list order;
# it writes this run's times for the next one, keeping the other lines of the file. Before,
# it started them in list order: a long test listed last left the other core idle while it ran
# (13 s of the ASan stage at stop 77). Each row: a run of four one-line scripts (each appends its
# name to a file when it starts) one at a time, given a times file.
set -uo pipefail
TMP=$(mktemp -d "${TMPDIR:-/tmp}/run-order-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
for t in a b c d; do echo "echo $t >> $TMP/started" > "$TMP/$t.sh"; done
list="$TMP/a.sh $TMP/b.sh $TMP/c.sh $TMP/d.sh"
# name | the times file before the run ("SECONDS NAME" lines) | the start order wanted
while IFS='|' read -r name times want; do
  rm -rf "$TMP/times" "$TMP/started"
  if [[ $times != - ]]; then
    mkdir -p "$TMP/times"
    tr ';' '\n' <<< "$times" | sed "s|NAME_|$TMP/|" > "$TMP/times/plain"
  fi
  GPUMEM_TEST_TIMES=$TMP/times TEST_JOBS=1 bash tests/run.sh --build build --san "" --unit "" \
    --scripts "$list" > "$TMP/out" 2>&1 || { cat "$TMP/out"; fail "$name: tests/run.sh exited $?"; }
  got=$(tr '\n' ' ' < "$TMP/started")
  [[ $got == "$want " ]] && echo "ok: $name: started $got" || fail "$name: started '$got', want '$want'"
  shown=$(grep -o '^=== [^ ]*' "$TMP/out" | sed "s|^=== $TMP/||; s|\.sh$||" | tr '\n' ' ')
  [[ $shown == "a b c d " ]] || fail "$name: outputs printed in the order '$shown', want the list's"
  # the times file now has each of the four and the lines of other tests it had
  for t in a b c d; do grep -qx "[0-9]* $TMP/$t.sh" "$TMP/times/plain" || fail "$name: no time written for $t.sh"; done
  if [[ $times == *other* ]] && ! grep -qx "7 other.sh" "$TMP/times/plain"; then
    fail "$name: the times file lost other.sh's line"
  fi
done <<'EOF'
no times file: list order|-|a b c d
longest first|3 NAME_a.sh;9 NAME_b.sh;5 NAME_c.sh;1 NAME_d.sh|b c a d
unknown first, in list order|4 NAME_a.sh;2 NAME_c.sh;7 other.sh|b d a c
EOF
exit $((fails > 0))
