#!/usr/bin/env bash
# Every size setting reads one rule (alloc_parse_size, ALLOC_SIZE_RULE): digits with an optional
# K/M/G/T suffix, a fraction only with a suffix (1.5G), nothing before or after. One table: every
# setting (GPUMEM_LIMIT under gpumem record and under LD_PRELOAD, GPUMEM_CONF's size keys,
# gpumem-replay's --limit/--capacity/--round, gpumem tune --limit, gpumem advise --budget) x
# each bad form: refused with exit 2 (LD_PRELOAD: gpumem turned off, the program unharmed) and
# a message naming the value; the good forms (16M, 1.5G, 512KiB) are accepted by each.
# Before, ' 16', '1.5' and '0.9' ran with no word as limits of 16, 1 and 0 bytes.
# The virtual GPU's size settings (GPUMEM_SIM_MEMORY, GPUMEM_SIM_CONTEXT_BYTES, GPUMEM_SIM_FAULTS'
# oom_at) read the same rule with a parser of their own (sim/ links no alloc/): each bad form is
# said with the value and the rule, and not used (the device's memory is the one without it; a
# driver never stops the program). Before, strtod read ' 16G', '1e3', '+16G' and '0x10G' as sizes.
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

# the virtual GPU: its total and free memory, as the program sees them
cat > "$TMP/m.py" <<'PY'
import ctypes
rt = ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)
f, t = ctypes.c_size_t(), ctypes.c_size_t()
assert rt.cudaMemGetInfo(ctypes.byref(f), ctypes.byref(t)) == 0
print(t.value, f.value)
PY
sim_run() { env "$@" LD_LIBRARY_PATH="$BUILD/sim" python3 "$TMP/m.py"; }
base=$(sim_run 2> "$TMP/err") && [[ ! -s $TMP/err ]] || fail "the virtual GPU without settings: $(head -2 "$TMP/err")"
# every bad form, and the ones strtod read there as sizes of at least 2M ('.5G', '1.G' above too)
sim_bad=("${bad[@]}" ' 16G' '+16G' '1e1G' '0x10G' '1.5e3G')
sim_good=('16M' '1.5G' '2048KiB')
# NAME|variable|its value with @ for the size|the message's mark|what a good size gives (awk on "total free")
sim_settings=(
  "GPUMEM_SIM_MEMORY|GPUMEM_SIM_MEMORY|@|GPUMEM_SIM_MEMORY='@'|total"
  "GPUMEM_SIM_CONTEXT_BYTES|GPUMEM_SIM_CONTEXT_BYTES|@|GPUMEM_SIM_CONTEXT_BYTES='@'|total-free"
  "GPUMEM_SIM_FAULTS oom_at|GPUMEM_SIM_FAULTS|oom_at:@|'oom_at:@'|"
)
for row in "${sim_settings[@]}"; do
  IFS='|' read -r name var form mark check <<< "$row"
  for v in "${sim_bad[@]}" "${sim_good[@]}"; do
    rc=0; out=$(sim_run "$var=${form//@/$v}" 2> "$TMP/err") || rc=$?
    want=${mark//@/$v}
    [[ $rc == 0 ]] || fail "$name '$v': the program failed (exit $rc): $(head -2 "$TMP/err")"
    if [[ " ${sim_good[*]} " == *" $v "* ]]; then
      ! grep -qF "$want" "$TMP/err" || fail "$name '$v': a good size refused: $(head -2 "$TMP/err")"
      if [[ -n $check ]]; then
        got=$(awk "{ printf \"%d\", \$1 - (\"$check\" == \"total\" ? 0 : \$2) }" <<< "$out")
        want_b=$(python3 -c "import sys; v=sys.argv[1]; u={'K':10,'M':20,'G':30}; n=v.rstrip('iBb'); print(int(float(n[:-1]) * (1 << u[n[-1]])))" "$v")
        [[ $got == "$want_b" ]] || fail "$name '$v': want $want_b bytes, the device says $out"
      fi
    else
      grep -qF "$want" "$TMP/err" && grep -qF "no spaces or signs" "$TMP/err" \
        || fail "$name '$v': want a message naming '$v' and the rule, got: $(head -2 "$TMP/err")"
      [[ $out == "$base" ]] || fail "$name '$v': a refused size was used: the device says $out, without it $base"
    fi
  done
  ok "$name: every bad form said with the rule and not used, the good ones read"
done
