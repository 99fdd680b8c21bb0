#!/usr/bin/env bash
# "The account adds up": on the virtual GPU, `gpumem report`'s "device used (what nvidia-smi
# shows)" equals the virtual GPU's own accounting to the byte, at the program's peak and at
# exit, and its parts are right:
#  - device used = reserved by gpumem + recorded outside gpumem + not recorded (text and JSON);
#  - "not recorded" is exactly the context the virtual GPU charges (GPUMEM_SIM_CONTEXT_BYTES),
#    and the context measured at start is that charge;
#  - recorded outside gpumem: the program's VMM handle (4 MiB) and its pool buffer (4 MiB, held
#    as the pool's 32 MiB chunk) in both modes, the vector it allocated (4 MiB) as pass-through
#    in record mode;
#  - memory that appears later unrecorded (a library workspace) is "not recorded" beyond the
#    context measured at start, and the text says what it likely is;
#  - an old recording without samples says so instead of inventing figures;
#  - "at start" (replace mode) is the device before gpumem's first segment: the context alone.
# The figures of the virtual GPU come from the program itself (drv_sym_app writes them with the
# sim-only accounting query at its peak and at exit: DRV_SYM_ACCOUNT).
set -uo pipefail
BUILD=${BUILD:-build}
GPUMEM=$PWD/$BUILD/gpumem
APP=$PWD/$BUILD/tests/apps/drv_sym_app
LIB=$PWD/$BUILD/libgpumem.so
for f in "$GPUMEM" "$APP" "$LIB"; do [[ -e $f ]] || { echo "missing $f (run make)" >&2; exit 1; }; done
TMP=$(mktemp -d /tmp/gpumem-devused.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
unset GPUMEM_MODE GPUMEM_LIMIT GPUMEM_CONF GPUMEM_STATS GPUMEM_DB
export GPUMEM_QUIET=1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok: $*"; }
check_eq() { if [[ "$2" == "$3" ]]; then pass "$1 ($2)"; else fail "$1: got '$2', expected '$3'"; fi; }

# A context charge the virtual GPU takes when the primary context becomes active (a virtual GPU
# without the setting charges none; the program reports what it charged either way).
export GPUMEM_SIM_CONTEXT_BYTES=$((300 << 20))
pitch_env=()
"$APP" > /dev/null 2> "$TMP/probe.err"
grep -q "cuMemAllocPitch.*failed: 801" "$TMP/probe.err" && pitch_env=(DRV_SYM_NO_PITCH=1)

for mode in replace record; do
    rm -f "$TMP/acct"
    ( cd "$TMP" && env "${pitch_env[@]}" GPUMEM_MODE=$mode DRV_SYM_ACCOUNT="$TMP/acct" \
        "$GPUMEM" record -o "$TMP/$mode.db" -- "$APP" ) > "$TMP/$mode.out" 2> "$TMP/$mode.err" \
        || { fail "$mode: the recorded run failed"; cat "$TMP/$mode.err"; continue; }
    read -r _ _ sim_peak _ ctx < <(grep '^peak ' "$TMP/acct")
    read -r _ _ sim_exit _ ctx_exit < <(grep '^exit ' "$TMP/acct")
    "$GPUMEM" report --json "$TMP/$mode.db" > "$TMP/$mode.json" || { fail "$mode: report --json"; continue; }
    python3 - "$TMP/$mode.json" > "$TMP/$mode.fig" <<'EOF' || fail "$mode: device_used missing from --json"
import json, sys
d = json.load(open(sys.argv[1]))["device_used"]["devices"][0]
for k in ("start", "peak", "exit"):
    p = d[k]
    print(k, p["used"], p["reserved_by_gpumem"], p["recorded_outside"], p["not_recorded"],
          p["outside"]["program_vmm"], p["outside"]["pools"], p["outside"]["pass_through"],
          p["reserved_by_gpumem"] + p["recorded_outside"] + p["not_recorded"])
print("context", d["context_at_start"])
EOF
    read -r _ p_used p_res p_out p_nr p_vmm p_pool p_pass p_sum < <(grep '^peak ' "$TMP/$mode.fig")
    read -r _ e_used _ _ e_nr _ _ _ e_sum < <(grep '^exit ' "$TMP/$mode.fig")
    read -r _ c_start < <(grep '^context ' "$TMP/$mode.fig")
    check_eq "$mode: device used at the peak = the virtual GPU's own figure" "$p_used" "$sim_peak"
    check_eq "$mode: device used at exit = the virtual GPU's own figure" "$e_used" "$sim_exit"
    check_eq "$mode: the parts add up at the peak" "$p_sum" "$p_used"
    check_eq "$mode: the parts add up at exit" "$e_sum" "$e_used"
    check_eq "$mode: not recorded at the peak = the context the virtual GPU charged" "$p_nr" "$ctx"
    check_eq "$mode: not recorded at exit = the context charge" "$e_nr" "$ctx_exit"
    check_eq "$mode: context measured at start" "$c_start" "$ctx"
    check_eq "$mode: program VMM held at the peak" "$p_vmm" 4194304
    # a 4 MiB buffer from the program's pool: the pool holds a 32 MiB chunk for it, as an H200's
    # driver does (and the virtual GPU now charges)
    check_eq "$mode: program pool buffer held at the peak (the pool's 32 MiB chunk)" "$p_pool" 33554432
    if [[ $mode == record ]]; then
        check_eq "record: nothing reserved by gpumem" "$p_res" 0
        # the vector, and the pitched image when the driver serves it (its own pitch decides)
        if [[ ${#pitch_env[@]} -gt 0 ]]; then check_eq "record: the vector passed through" "$p_pass" 4194304
        else check_eq "record: vector and image passed through" "$(( p_pass > 4194304 ))" 1; fi
    else
        check_eq "replace: nothing passed through" "$p_pass" 0
        # at start: the device before gpumem's first segment (sampled after it, the column
        # showed a 4 MiB segment reserved "at start"): the context alone
        read -r _ s_used s_res s_out _ < <(grep '^start ' "$TMP/$mode.fig")
        check_eq "replace: at start, used / reserved by gpumem / recorded outside" "$s_used $s_res $s_out" "$ctx 0 0"
        [[ $p_res -gt 0 ]] && pass "replace: gpumem's segments counted ($p_res)" || fail "replace: no reserved bytes"
    fi
    "$GPUMEM" report "$TMP/$mode.db" > "$TMP/$mode.txt" 2>&1 || fail "$mode: report"
    sed -n '/^Device used/,/^OOM/p' "$TMP/$mode.txt" > "$TMP/$mode.block"
    for want in "device used" "= reserved by gpumem" "+ recorded outside gpumem" "program VMM" \
                "program pools" "+ not recorded" "CUDA context measured at start: "; do
        grep -qF -- "$want" "$TMP/$mode.block" && pass "$mode: text block has '$want'" \
            || { fail "$mode: text block lacks '$want'"; cat "$TMP/$mode.block"; }
    done
    grep -qF "($ctx bytes: device used before any recorded memory" "$TMP/$mode.block" \
        && pass "$mode: text gives the context in bytes" || fail "$mode: text context bytes"
done

# device memory that appears after the start and that no allocator records (a library's
# workspace: the virtual GPU's context charge grows by 64 MiB after the first allocation)
rm -f "$TMP/acct"
( cd "$TMP" && env "${pitch_env[@]}" DRV_SYM_WORKSPACE=$((64 << 20)) DRV_SYM_ACCOUNT="$TMP/acct" \
    "$GPUMEM" record -o "$TMP/ws.db" -- "$APP" ) > /dev/null 2> "$TMP/ws.err" || fail "workspace run failed"
read -r _ _ sim_peak _ ctx < <(grep '^peak ' "$TMP/acct")
"$GPUMEM" report --json "$TMP/ws.db" | python3 -c '
import json, sys
d = json.load(sys.stdin)["device_used"]["devices"][0]
print(d["peak"]["used"], d["peak"]["not_recorded"], d["context_at_start"])' > "$TMP/ws.fig"
read -r w_used w_nr w_ctx < "$TMP/ws.fig"
check_eq "workspace: device used at the peak = the virtual GPU's figure" "$w_used" "$sim_peak"
check_eq "workspace: not recorded at the peak = context + workspace" "$w_nr" "$ctx"
check_eq "workspace: context measured at start = the context alone" "$w_ctx" "$GPUMEM_SIM_CONTEXT_BYTES"
"$GPUMEM" report "$TMP/ws.db" > "$TMP/ws.txt" 2>&1
grep -qF "likely the CUDA context (300.00 MiB at start), plus 64.00 MiB that appeared since: library workspaces" "$TMP/ws.txt" \
    && pass "workspace: the text names the context and what appeared since" \
    || { fail "workspace: causes line"; sed -n '/^Device used/,/^OOM/p' "$TMP/ws.txt"; }

# a recording from before the samples existed (schema 1.2): the block says so
cp "$TMP/replace.db" "$TMP/old.db"
sqlite3 "$TMP/old.db" "DELETE FROM events WHERE kind >= 22; UPDATE meta SET value = 2 WHERE key = 'schema_minor'; UPDATE meta SET value = (SELECT count(*) FROM events) WHERE key = 'events';"
"$GPUMEM" report "$TMP/old.db" > "$TMP/old.txt" 2>&1 || fail "report of a 1.2 file failed"
grep -q "not sampled" "$TMP/old.txt" && pass "1.2 file: 'not sampled'" || fail "1.2 file: no 'not sampled' line"
"$GPUMEM" report --json "$TMP/old.db" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["device_used"]["devices"] == []' \
    && pass "1.2 file: --json device_used has no devices" || fail "1.2 file: --json"
[[ $fails -eq 0 ]] && { echo "all checks passed"; exit 0; }
echo "$fails check(s) failed"; exit 1
