#!/usr/bin/env bash
# Every size setting reads one rule (alloc_parse_size, ALLOC_SIZE_RULE): digits with an optional
# K/M/G/T suffix, a fraction only with a suffix (1.5G), nothing before or after. One table: every
# setting (GPUMEM_LIMIT under gpumem record and under LD_PRELOAD, GPUMEM_CONF's size keys,
# gpumem-replay's --limit/--capacity/--round, gpumem tune --limit, gpumem advise --budget) x
# each bad form: refused with exit 2 (LD_PRELOAD: gpumem turned off, the program unharmed) and
# a message naming the value; the good forms (16M, 1.5G, 512KiB) are accepted by each.
# Before, ' 16', '1.5' and '0.9' ran with no word as limits of 16, 1 and 0 bytes.
source "$(dirname "$0")/e2e_common.bash"
BUILD=$(cd "$BUILD" && pwd)
GM=$BUILD/gpumem
REPLAY=$BUILD/alloc/gpumem-replay
[[ -x $REPLAY ]] || { echo "skipped: $REPLAY is not built" >&2; exit 77; }
cat > "$TMP/a.py" <<'PY'
import ctypes
rt = ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)
p = ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(p), 1 << 20) == 0
rt.cudaFree(p)
PY
"$GM" record -q -o "$TMP/t.db" -- python3 "$TMP/a.py" || fail "could not record the table's database"
printf 'a 1 4096\nf 1\n' > "$TMP/t.trace"
# the space forms only where the value is a whole string: GPUMEM_CONF's syntax drops the spaces
# around its tokens, as PYTORCH_CUDA_ALLOC_CONF's does ("limit: 16M" is 16M there)
bad=(' 16' '16 ' '1.5' '0.9' '1.5B' '.5G' '1.G' '-5' '+16' '16x' '1e3' '1.5e3G' '16 M' '0x10')
good=('16M' '1.5G' '512KiB')
# NAME|command with @ for the value|the message's mark
settings=(
  "GPUMEM_LIMIT (record)|env GPUMEM_LIMIT=@ $GM record -q -o $TMP/r.db -- python3 $TMP/a.py|GPUMEM_LIMIT: bad size '@'"
  "GPUMEM_CONF limit|env GPUMEM_CONF=limit:@ $GM record -q -o $TMP/r.db -- python3 $TMP/a.py|bad value '@' for limit"
  "GPUMEM_CONF release_threshold|env GPUMEM_CONF=release_threshold:@ $GM record -q -o $TMP/r.db -- python3 $TMP/a.py|bad value '@' for release_threshold"
  "GPUMEM_CONF handle_size|env GPUMEM_CONF=handle_size:@ $GM record -q -o $TMP/r.db -- python3 $TMP/a.py|bad value '@' for handle_size"
  "GPUMEM_CONF handle_size_small|env GPUMEM_CONF=handle_size_small:@ $GM record -q -o $TMP/r.db -- python3 $TMP/a.py|bad value '@' for handle_size_small"
  "gpumem-replay --limit|$REPLAY --limit @ $TMP/t.trace|bad size '@' for --limit"
  "gpumem-replay --capacity|$REPLAY --capacity @ $TMP/t.trace|bad size '@' for --capacity"
  "gpumem-replay --round|$REPLAY --round @ $TMP/t.trace|bad size '@' for --round"
  "gpumem tune --limit|$GM tune --limit @ $TMP/t.db|not '@'"
  "gpumem advise --budget|$GM advise --budget @ $TMP/t.db|got '@'"
)
for row in "${settings[@]}"; do
  IFS='|' read -r name cmd mark <<< "$row"
  for v in "${bad[@]}" "${good[@]}"; do
    [[ $name == GPUMEM_CONF* && $v == *' '* ]] && continue
    # the value is one word wherever it goes: the command is split on spaces, then @ replaced
    read -ra words <<< "$cmd"
    words=("${words[@]//@/$v}")
    rc=0; "${words[@]}" > "$TMP/out" 2> "$TMP/err" || rc=$?
    want=${mark//@/$v}
    if [[ " ${good[*]} " == *" $v "* ]]; then
      ! grep -qF "$want" "$TMP/err" && [[ $rc != 2 ]] \
        || fail "$name '$v': a good size refused (exit $rc): $(head -2 "$TMP/err")"
    else
      [[ $rc == 2 ]] && grep -qF "$want" "$TMP/err" && grep -qF "no spaces or signs" "$TMP/err" \
        || fail "$name '$v': want exit 2 and a message naming '$v' and the rule, got exit $rc: $(head -2 "$TMP/err")"
    fi
  done
  ok "$name: every bad form refused with exit 2, the good ones read"
done
# under LD_PRELOAD alone there is no command to exit 2: gpumem turns itself off, says why, and
# the program runs unharmed (preload/README.md)
for v in "${bad[@]}"; do
  rc=0
  GPUMEM_LIMIT=$v GPUMEM_DB=$TMP/p.db LD_PRELOAD=$BUILD/libgpumem.so LD_LIBRARY_PATH=$BUILD/sim \
    python3 "$TMP/a.py" > /dev/null 2> "$TMP/err" || rc=$?
  [[ $rc == 0 ]] && grep -qF "GPUMEM_LIMIT: bad size '$v'" "$TMP/err" \
    || fail "LD_PRELOAD GPUMEM_LIMIT '$v': want the program to run (exit $rc) and the refusal said: $(head -2 "$TMP/err")"
done
ok "GPUMEM_LIMIT under LD_PRELOAD: every bad form said, gpumem off, the program unharmed"
