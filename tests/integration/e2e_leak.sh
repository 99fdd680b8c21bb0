#!/usr/bin/env bash
# The planted leak (--leak keeps the loss tensor of every step alive to the end) is found by
# `gpumem leaks` with the tensor's name, the fwd phase and the source line of its allocation;
# --fail-on-leak exits 1. Without --leak the report finds nothing and exits 0.
source "$(dirname "$0")/e2e_common.bash"
steps=10
args=(--model tiny --data "$TEXT" --steps "$steps" -B 2 -T 32)
"$GM" record -q -o "$TMP/leak.db" -- "$TRAIN" "${args[@]}" --leak > "$TMP/leak.txt" 2>&1 \
  || fail "trainer --leak under gpumem: $(tail -3 "$TMP/leak.txt")"
set +e
"$GM" leaks --fail-on-leak "$TMP/leak.db" > "$TMP/leaks.txt" 2>&1; rc=$?
set -e
cat "$TMP/leaks.txt"
[[ $rc -eq 1 ]] || fail "gpumem leaks --fail-on-leak exited $rc on a leaking run, expected 1"
grep -q 'losses' "$TMP/leaks.txt" || fail "the leaked tensor's name (losses) is not in the report"
grep -Eq 'fwd' "$TMP/leaks.txt" || fail "the fwd phase is not in the report"
# The line in the model that allocates the loss tensor, read from the source itself.
line=$(grep -n 't_alloc(m, &m->losses' train/gpt2.c | sed -n 1p | cut -d: -f1)
[[ -n $line ]] || fail "cannot find the losses allocation in train/gpt2.c"
grep -q "gpt2.c:$line" "$TMP/leaks.txt" || fail "the source line gpt2.c:$line is not in the report"
# One loss tensor of B*T floats per step.
leaked=$(awk '/^LEAK SUMMARY:/ { print $3 }' "$TMP/leaks.txt")
[[ $leaked -eq $((steps * 2 * 32 * 4)) ]] || fail "LEAK SUMMARY says $leaked bytes, expected $((steps * 2 * 32 * 4))"
ok "leak found: losses, fwd, gpt2.c:$line, $leaked bytes"

"$GM" record -q -o "$TMP/clean.db" -- "$TRAIN" "${args[@]}" > "$TMP/clean.txt" 2>&1 \
  || fail "trainer under gpumem: $(tail -3 "$TMP/clean.txt")"
"$GM" leaks --fail-on-leak "$TMP/clean.db" > "$TMP/clean-leaks.txt" 2>&1 \
  || { cat "$TMP/clean-leaks.txt"; fail "a run without --leak was reported as leaking"; }
grep -q '^LEAK SUMMARY: 0 bytes leaked in 0 allocations' "$TMP/clean-leaks.txt" \
  || fail "no-leak run: unexpected summary: $(tail -1 "$TMP/clean-leaks.txt")"
ok "no leak reported without --leak"
