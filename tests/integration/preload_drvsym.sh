#!/usr/bin/env bash
# Properties, for programs that call the driver by symbol (linked with -lcuda):
#  - drv_sym_app (NVIDIA-sample style: cuMemAlloc_v2, cuMemAllocPitch_v2, the VMM calls, pinned
#    host memory, a pool allocation) prints the same with and without gpumem, in replace and in
#    record mode;
#  - every allocation it makes is in the database exactly once, of the right kind (served or
#    passed through, pitched flag, pool flag); its VMM is recorded as a physical handle created
#    and released and one mapping carrying that handle; in replace mode the driver sees no
#    cuMemAlloc (gpumem served it), in record mode exactly one;
#  - `gpumem report` counts its VMM buffer as program-held memory at its call site
#    (simpleMallocMmap), in text and in --json;
#  - drv_mix_app's three buffers (cudaMalloc, cuMemAlloc_v2 from cuGetProcAddress, cuMemAlloc_v2
#    by symbol) are each recorded once, in both modes;
#  - `gpumem record`'s end-of-run line tells "the driver was used but nothing reached gpumem"
#    from "calls reached gpumem, no allocation", and never says "made no CUDA call" then; a
#    Python program that loads the (virtual GPU's) driver but never calls it made no CUDA call;
#    a driver lookup (cuGetProcAddress, dlsym) opens no recording, a hooked call does.
source tests/integration/preload_common.bash
GPUMEM=$BUILD/gpumem
need "$LIB" "$APPS/drv_sym_app" "$APPS/drv_mix_app" "$GPUMEM"
q() { sqlite3 "$1" "$2"; }
one_db() { ls "$TMP"/rec-*.db 2>/dev/null | head -1; }

# The virtual GPU may lack cuMemAllocPitch_v2 (it answered CUDA_ERROR_NOT_SUPPORTED before it
# gained it): the comparisons with the driver alone then leave the pitched part out, and the
# pitched allocation is checked under gpumem only (gpumem serves it without the driver).
pitch_env=()
"$APPS/drv_sym_app" > /dev/null 2> "$TMP/probe.err"
if grep -q "cuMemAllocPitch.*failed: 801" "$TMP/probe.err"; then
    pitch_env=(DRV_SYM_NO_PITCH=1)
    echo "note: the virtual GPU answers cuMemAllocPitch_v2 with CUDA_ERROR_NOT_SUPPORTED:" \
         "the pitched part is checked under gpumem only"
fi

# ---- (a) the sample-style program, by symbol ---------------------------------------------------
env "${pitch_env[@]}" GPUMEM_SIM_STATS=1 "$APPS/drv_sym_app" > "$TMP/plain.out" 2> "$TMP/plain.err" \
    || { fail "drv_sym_app failed without gpumem"; cat "$TMP/plain.err"; }
for mode in replace record; do
    rm -f "$TMP"/rec-*.db
    env "${pitch_env[@]}" GPUMEM_MODE=$mode GPUMEM_STATS=1 GPUMEM_SIM_STATS=1 LD_PRELOAD=$LIB \
        "$APPS/drv_sym_app" > "$TMP/$mode.out" 2> "$TMP/$mode.err" \
        || { fail "drv_sym_app failed under gpumem ($mode)"; cat "$TMP/$mode.err"; }
    same_output "drv_sym_app $mode mode" "$TMP/plain.out" "$TMP/$mode.out"
    db=$(one_db)
    [[ -n $db ]] || { fail "$mode: no database written"; continue; }
    cp "$db" "$TMP/sym-$mode.db"
    db=$TMP/sym-$mode.db
    # one alloc event per allocation: the vector (4 MiB), the pool buffer (4 MiB, pool flag)
    check_eq "$mode: the cuMemAlloc_v2 vector recorded once" \
        "$(q "$db" "SELECT count(*) FROM events WHERE kind=1 AND requested=4194304 AND (flags & 1024)=0")" 1
    check_eq "$mode: the pool allocation recorded once, flagged" \
        "$(q "$db" "SELECT count(*) FROM events WHERE kind=3 AND requested=4194304 AND (flags & 2048)=2048")" 1
    check_eq "$mode: two pinned buffers recorded" "$(q "$db" "SELECT count(*) FROM events WHERE kind=5")" 2
    check_eq "$mode: every device allocation freed once" \
        "$(q "$db" "SELECT count(*) FROM events WHERE kind IN (2,4)")" \
        "$(q "$db" "SELECT count(*) FROM events WHERE kind IN (1,3)")"
    check_eq "$mode: no foreign or double free" "$(q "$db" "SELECT count(*) FROM events WHERE kind IN (9,10)")" 0
    # the program's VMM: one handle created and released, one mapping carrying it
    check_eq "$mode: one physical handle created (4 MiB)" \
        "$(q "$db" "SELECT count(*) || ' ' || sum(size) FROM events WHERE kind=22")" "1 4194304"
    check_eq "$mode: the handle released" \
        "$(q "$db" "SELECT count(*) FROM events e WHERE kind=23 AND addr=(SELECT addr FROM events WHERE kind=22)")" 1
    check_eq "$mode: one mapping, of that handle, 4 MiB" \
        "$(q "$db" "SELECT count(*) || ' ' || size FROM events WHERE kind=11 AND alloc_id=(SELECT addr FROM events WHERE kind=22)")" \
        "1 4194304"
    check_eq "$mode: the mapping unmapped" "$(q "$db" "SELECT count(*) FROM events WHERE kind=12")" 1
    check_eq "$mode: VMM calls counted (reserve, create, map, release, access, unmap, free)" \
        "$(stat "$TMP/$mode.err" vmm)" 7
    # the virtual GPU counts its cuMemAllocPitch_v2 as a cuMemAlloc
    [[ $mode == replace ]] && served=0 || served=$(( ${#pitch_env[@]} ? 1 : 2 ))
    check_eq "$mode: cuMemAlloc calls reaching the driver" "$(simcount "$TMP/$mode.err" cuMemAlloc)" $served
    # the VMM buffer is held by the program, at its call site (when stacks are recorded)
    "$GPUMEM" report "$db" > "$TMP/rep-$mode.txt" 2>&1 || fail "$mode: gpumem report failed"
    [[ ${GPUMEM_STACKS:-16} == 0 ]] && continue
    if grep -E "program VMM +1x +simpleMallocMmap \(drv_sym_app.c:[0-9]+\)" "$TMP/rep-$mode.txt" > /dev/null; then
        pass "$mode: report shows the VMM buffer as program-held at simpleMallocMmap"
    else
        fail "$mode: report lacks the program VMM call site"; sed -n '/Device used/,$p' "$TMP/rep-$mode.txt"
    fi
    "$GPUMEM" report --json "$db" > "$TMP/rep-$mode.json" || fail "$mode: gpumem report --json failed"
    check_eq "$mode: --json outside_at_peak_by_site has the VMM buffer" "$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))["device_used"]["devices"][0]
s = [x for x in d["outside_at_peak_by_site"] if x["what"] == "program_vmm"]
print(len(s), s[0]["bytes"], "simpleMallocMmap" in (s[0]["site"] or "") if s else "")' "$TMP/rep-$mode.json")" \
        "1 4194304 True"
done
# replace mode serves the two plain buffers; record mode passes them through
check_eq "replace: allocations served by gpumem (vector + pitched)" "$(stat "$TMP/replace.err" served)" \
    $(( ${#pitch_env[@]} ? 1 : 2 ))
check_eq "record: nothing served" "$(stat "$TMP/record.err" served)" 0

# the pitched allocation, under gpumem (served without the driver's cuMemAllocPitch_v2)
rm -f "$TMP"/rec-*.db
GPUMEM_STATS=1 GPUMEM_SIM_STATS=1 LD_PRELOAD=$LIB "$APPS/drv_sym_app" > "$TMP/pitch.out" 2> "$TMP/pitch.err" \
    || { fail "drv_sym_app with its pitched image failed under gpumem"; cat "$TMP/pitch.err"; }
db=$(one_db)
grep -q "^image: 1000 x 64 floats, sum 15984000.0$" "$TMP/pitch.out" && pass "pitched image read back correctly" \
    || fail "pitched image: $(grep image "$TMP/pitch.out")"
# 1000 floats a row = 4000 bytes, rounded up to the device's texture alignment (what the driver's
# own cuMemAllocPitch gives: issue 37)
pitch=$(awk '/^drv_sym_app: pitch/ {print $3}' "$TMP/pitch.err")
align=512 # the virtual GPU's CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT
check_eq "pitch = row width rounded up to the texture alignment" "$pitch" $(( (4000 + align - 1) / align * align ))
check_eq "pitched allocation recorded once, served, flagged, pitch x height bytes" \
    "$(q "$db" "SELECT count(*) || ' ' || size FROM events WHERE kind=1 AND (flags & 1024)=1024 AND (flags & 768)<>0")" \
    "1 $(( pitch * 64 ))"
check_eq "pitched: nothing reached the driver's cuMemAlloc" "$(simcount "$TMP/pitch.err" cuMemAlloc)" 0
if [[ ${#pitch_env[@]} -eq 0 ]]; then
    GPUMEM_MODE=record run_pre "$TMP/pitch-rec.out" "$TMP/pitch-rec.err" "$APPS/drv_sym_app" || fail "pitched, record mode"
    rpitch=$(awk '/^drv_sym_app: pitch/ {print $3}' "$TMP/pitch-rec.err")
    db=$(ls -t "$TMP"/rec-*.db | head -1)
    check_eq "record: the driver's pitched allocation recorded once, pitch x height bytes" \
        "$(q "$db" "SELECT count(*) || ' ' || size FROM events WHERE kind=1 AND (flags & 1024)=1024 AND (flags & 768)=0")" \
        "1 $(( rpitch * 64 ))"
fi

# ---- (b) three paths, one buffer each ---------------------------------------------------------
run_plain "$TMP/mix-plain.out" "$TMP/mix-plain.err" "$APPS/drv_mix_app" || fail "drv_mix_app failed alone"
for mode in replace record; do
    rm -f "$TMP"/rec-*.db
    GPUMEM_MODE=$mode run_pre "$TMP/mix-$mode.out" "$TMP/mix-$mode.err" "$APPS/drv_mix_app" \
        || { fail "drv_mix_app failed ($mode)"; cat "$TMP/mix-$mode.err"; }
    same_output "drv_mix_app $mode" "$TMP/mix-plain.out" "$TMP/mix-$mode.out"
    db=$(one_db)
    for sz in 1048576 1049088 1049600; do
        check_eq "$mode: buffer of $sz bytes recorded exactly once" \
            "$(q "$db" "SELECT count(*) FROM events WHERE kind=1 AND requested=$sz")" 1
    done
    read -r p2 p3 < <(awk '/^drv_mix_app: pitch/ {print $3, $6}' "$TMP/mix-$mode.err")
    check_eq "$mode: cudaMallocPitch and cudaMalloc3D recorded once each, pitched" \
        "$(q "$db" "SELECT group_concat(size, ' ') FROM (SELECT size FROM events WHERE kind=1 AND (flags & 1024)=1024 ORDER BY seq)")" \
        "$(( p2 * 10 )) $(( p3 * 12 ))"
    check_eq "$mode: cudaMallocFromPoolAsync recorded once, flagged as the program's pool" \
        "$(q "$db" "SELECT count(*) FROM events WHERE kind=3 AND requested=$(( (1 << 20) + 2048 )) AND (flags & 2048)=2048")" 1
    check_eq "$mode: six allocations, six frees" \
        "$(q "$db" "SELECT (SELECT count(*) FROM events WHERE kind IN (1,3)) || ' ' || (SELECT count(*) FROM events WHERE kind IN (2,4))")" "6 6"
    [[ $mode == replace ]] && want=0 || want=5
    check_eq "$mode: cuMemAlloc calls reaching the driver" "$(simcount "$TMP/mix-$mode.err" cuMemAlloc)" $want
done
check_eq "replace: runtime path seen once" "$(stat "$TMP/mix-replace.err" rt_malloc)" 1
# two cuMemAlloc_v2 (getproc, symbol) and the two cuMemAllocPitch_v2 the runtime's pitched calls make
check_eq "replace: driver paths seen once each" "$(stat "$TMP/mix-replace.err" drv_alloc)" 4
check_eq "replace: all five served by gpumem" "$(stat "$TMP/mix-replace.err" served)" 5

# ---- gpumem record's end-of-run line -----------------------------------------------------------
( cd "$TMP" && DRV_SYM_ONLY_INIT=1 "$OLDPWD/$GPUMEM" record -o "$TMP/oi1.db" -- "$OLDPWD/$APPS/drv_sym_app" ) \
    > /dev/null 2> "$TMP/oi1.err"
grep -q "none of its driver calls reached gpumem" "$TMP/oi1.err" \
    && pass "record: driver used without reaching gpumem is said so" \
    || { fail "record: no 'driver calls not seen' line"; cat "$TMP/oi1.err"; }
grep -q "made no CUDA call" "$TMP/oi1.err" && fail "record claims no CUDA call although the driver was used"
( cd "$TMP" && DRV_SYM_ONLY_INIT=2 "$OLDPWD/$GPUMEM" record -o "$TMP/oi2.db" -- "$OLDPWD/$APPS/drv_sym_app" ) \
    > /dev/null 2> "$TMP/oi2.err"
grep -q "reached gpumem, but it made no device or pinned allocation" "$TMP/oi2.err" \
    && pass "record: calls seen, no allocation, said so" || { fail "record: no 'no allocation' line"; cat "$TMP/oi2.err"; }
[[ -e $TMP/oi2.db ]] && fail "record: a lookup (cuGetProcAddress) alone opened a recording"
# a hooked call without an allocation (cuMemGetInfo) does: its report places no peak at an event
# that is not there, and gives no utilization of nothing
( cd "$TMP" && DRV_SYM_ONLY_INIT=3 "$OLDPWD/$GPUMEM" record -o "$TMP/oi3.db" -- "$OLDPWD/$APPS/drv_sym_app" ) \
    > /dev/null 2> "$TMP/oi3.err"
grep -q "reached gpumem, but it made no device or pinned allocation" "$TMP/oi3.err" \
    || { fail "record: no 'no allocation' line for a recording without allocations"; cat "$TMP/oi3.err"; }
rep=$("$GPUMEM" report "$TMP/oi3.db" 2>&1)
grep -q "peak requested      0 B (nothing was allocated)" <<<"$rep" && grep -q "utilization         - (nothing was reserved)" <<<"$rep" \
    && ! grep -q "at event" <<<"$rep" && pass "report of a recording without allocations: no peak event, no utilization" \
    || { fail "report of a recording without allocations"; sed -n 3,9p <<<"$rep"; }
# a Python program that never calls CUDA: `gpumem record` preloads the virtual GPU's driver into
# it, so the driver is loaded but never initialized; that is no "driver used around gpumem"
if command -v python3 > /dev/null; then
  "$GPUMEM" record -o "$TMP/py.db" -- python3 -c 'print("no cuda")' > /dev/null 2> "$TMP/py.err"
  if grep -q "none of its driver calls\|reached gpumem, but" "$TMP/py.err"; then
    fail "record: a program that never called the driver is said to have used it"; cat "$TMP/py.err"
  elif grep -q "made no CUDA call" "$TMP/py.err"; then pass "record: a Python program without CUDA: no CUDA call"
  else fail "record: no 'made no CUDA call' line for a program without CUDA"; cat "$TMP/py.err"; fi
  # (a build without gpumem's Python files beside it, the sanitizers', says so: that line is true)
  grep -q "PyTorch never used\|imported PyTorch\|PyTorch's allocator trace" "$TMP/py.err" \
    && { fail "record: a PyTorch line for a program that never imported it"; cat "$TMP/py.err"; }
fi
( cd "$TMP" && "$OLDPWD/$GPUMEM" record -o "$TMP/full.db" -- "$OLDPWD/$APPS/drv_sym_app" ) > /dev/null 2> "$TMP/full.err"
grep -q "no device or pinned allocation\|reached gpumem" "$TMP/full.err" \
    && fail "record: a program that allocated is told it did not" || pass "record: a full run gets its summary only"
finish
