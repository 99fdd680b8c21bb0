#!/usr/bin/env bash
# sym_table.sh — gm_sym.c's sorted symbol table gives the names libdwfl gives: the trainer
# recorded (its own binary with inlined code, libgpumem.so, the virtual runtime, libc), then
# `gpumem report`, `leaks` and `sql` with GPUMEM_SYM_VERIFY=1, which asks libdwfl too for every
# frame the table named and prints "N frames checked against libdwfl, M differ". PyTorch's
# libraries (hundreds of thousands of symbols, the reason for the table) are checked the same
# way in tests/torch/torch_record.sh.
source "$(dirname "$0")/e2e_common.bash"
"$GM" record -q -o "$TMP/t.db" -- "$TRAIN" --steps 2 > "$TMP/t.out" 2>&1 || fail "recording: $(tail -3 "$TMP/t.out")"
for cmd in report leaks "sql SELECT count(*) FROM frames WHERE function IS NOT NULL"; do
  read -r -a argv <<< "$cmd"
  if [[ ${argv[0]} == sql ]]; then
    GPUMEM_SYM_VERIFY=1 "$GM" sql "$TMP/t.db" -c "${argv[*]:1}" > "$TMP/o" 2> "$TMP/e" || fail "$cmd: $(tail -3 "$TMP/e")"
  else
    GPUMEM_SYM_VERIFY=1 "$GM" "${argv[0]}" "$TMP/t.db" > "$TMP/o" 2> "$TMP/e" || fail "$cmd: $(tail -3 "$TMP/e")"
  fi
  line=$(grep 'symbol table: .* frames checked' "$TMP/e" | tail -1) || fail "${argv[0]}: no verification line: $(tail -3 "$TMP/e")"
  read -r checked differ < <(sed -n 's/.*: \([0-9]*\) frames checked against libdwfl, \([0-9]*\) differ/\1 \2/p' <<< "$line")
  ((checked >= 20 && differ == 0)) && ok "${argv[0]}: $checked frames named by the table, as libdwfl names them" \
    || fail "${argv[0]}: $line; $(grep 'libdwfl says' "$TMP/e" | sed -n 1,5p)"
done
# the names are real: the trainer's own functions among them
GPUMEM_SYM_VERIFY=0 "$GM" sql "$TMP/t.db" -c "SELECT DISTINCT function FROM stack_frames" > "$TMP/fn" 2>&1
grep -qx 'main' "$TMP/fn" && grep -q '^gpt2_' "$TMP/fn" && ok "the trainer's functions named (main, gpt2_*)" \
  || fail "function names: $(head -c 300 "$TMP/fn" | tr '\n' ' ')"
echo "all checks passed"
