#!/usr/bin/env bash
# Access tracking, capture side (GPUMEM_USES), checked in the recorded database. Properties:
#  - acceptance: a runtime launch whose arguments are an interior pointer into A, a by-value
#    struct holding pointers into B and C plus an int, and a host pointer, then a launch through
#    the driver (cuGetProcAddress) on E: exactly A, B, C and E get uses, D (allocated, named,
#    never passed) none; k_mix's uses are exactly A, B, C; the int and the host pointer give
#    nothing;
#  - every launch path (runtime plain/_ptsz/ExC/cooperative, driver by symbol plain/Ex/
#    cooperative, through cuGetProcAddress plain/Ex/cooperative, the `extra` buffer form) is
#    recorded exactly once: launch events = launches the program made, each kernel once, each
#    path's allocation used by exactly its kernel; the GPUMEM_STATS launch counter agrees;
#  - a kernel with one parameter of 2,003 words (PyTorch's offset calculators are kilobytes)
#    holding interior pointers into 280 allocations among sizes and zeros: exactly those 280
#    get uses (more candidates than the hook's stack buffer holds), the unused one none; with a
#    pointer into pinned host memory among the sizes too, that buffer also gets its use (the
#    scan tests the host span only where there is one);
#  - a kernel whose parameters all fit the hook's stack buffer (an int, a pointer, a struct of 41
#    words, a struct of 3, a host pointer): exactly the 6 allocations its pointers point into get
#    uses, wherever the word sits (a lone pointer, inside a struct, past the last group of four);
#    with the host pointer into pinned memory, that buffer too (the device span alone is tested
#    where there is no host span);
#  - a parameter whose pointers into device memory and a pinned buffer sit among words between
#    the two spans (in their hull, in neither: host mappings of the process), with the pinned
#    buffer above the device memory (replace mode) and below it (record mode, 64 MiB): exactly
#    the allocations pointed into get uses and no gap word is kept (the launch's word records);
#  - gpumem's own stack leftovers are not the program's arguments: per launch path (runtime
#    plain/ExC/cooperative, driver by symbol and through cuGetProcAddress, plain/Ex/cooperative)
#    PyTorch's trace entry and memsets (runtime, driver), a first call handles a pointer into
#    RA_<path>; a launch from a
#    frame at the same depth then passes an 8 KiB parameter whose first word points into
#    RB_<path> and whose other words are never written (PyTorch copies partly filled argument
#    structs whole): its uses are RB_<path> alone (the hooks scrub the stack they used); the
#    trace entry called from Python code (allocation and OOM with the GIL held or not, with its
#    Python stack read; free, segment free; a new device's, the slow way) leaves none of its
#    five words (address, size, stream, pool ids) in the 32 KiB below it, the Python stack
#    reader's frames included;
#  - and per allocation and free entry point (runtime, driver by symbol and through
#    cuGetProcAddress, PyTorch's gpumem_torch_malloc/free, gpumem_name): an allocation RA_<path>
#    made, named or freed by it; for a free another thread then allocates RX_<path> at the
#    freed address (checked: "reused"); the same 8 KiB parameter's uses are RB_<path> alone;
#  - launches inside a launch (a kernel of the virtual GPU launching the next from its body, four
#    levels, one pointer or a struct of 300): each level's uses are its own allocation alone (a
#    level's candidates live in the thread's buffer of that nesting level, not one shared);
#  - copies and memsets carry their direction: destination written (2), source read (1);
#  - record mode (the program's allocator) sees the same uses;
#  - GPUMEM_USES=0 records no launch, and meta says so; the default is 1;
#  - GPUMEM_USES=bogus prints one line naming the variable and the accepted values, and gpumem
#    runs off (the program is unaffected);
#  - GPUMEM_USES=timed gives every launch of a kernel that sleeps 2 ms a start and an end on the
#    recorder's clock, start <= end, at least ~2 ms apart, in launch order, inside the run.
source tests/integration/preload_common.bash
need "$LIB" "$APPS/uses_app"
command -v sqlite3 >/dev/null || { echo "preload_uses.sh: sqlite3 not found" >&2; exit 77; }

q() { sqlite3 -batch -noheader "$1" "$2"; }
# run MODE DB [env...] -- args: the app under the preload with GPUMEM_DB=DB
run_app() { local db=$1 out=$2; shift 2
  env GPUMEM_DB="$db" GPUMEM_STATS=1 LD_PRELOAD="$LIB" "$@" >"$out" 2>"$out.err"; }
# names of the allocations that have uses, joined by spaces (optionally for one kernel)
used_names() { q "$1" "SELECT group_concat(name, ' ') FROM (SELECT DISTINCT a.name FROM uses u
  JOIN allocations a ON a.id = u.birth ${2:+JOIN strings s ON s.id = u.kernel WHERE s.s = '$2'}
  ORDER BY a.name);"; }

# ---- acceptance ------------------------------------------------------------------------------
DB=$TMP/acc.db
run_app "$DB" "$TMP/acc.out" "$APPS/uses_app" acceptance || { fail "uses_app acceptance"; cat "$TMP/acc.out" "$TMP/acc.out.err"; }
check_eq "meta uses (default)" "$(q "$DB" "SELECT value FROM meta WHERE key = 'uses';")" 1
check_eq "allocations with uses" "$(used_names "$DB")" "A B C E"
check_eq "k_mix uses (interior A, struct B and C)" "$(used_names "$DB" k_mix)" "A B C"
check_eq "k_one uses (driver through cuGetProcAddress)" "$(used_names "$DB" k_one)" "E"
check_eq "D has no use" "$(q "$DB" "SELECT count(*) FROM uses u JOIN allocations a ON a.id = u.birth WHERE a.name = 'D';")" 0
check_eq "kernel argument access unknown (0)" "$(q "$DB" "SELECT group_concat(DISTINCT u.access) FROM uses u JOIN launches l ON l.seq = u.seq WHERE l.op = 0;")" 0
check_eq "no use outside a known allocation" "$(q "$DB" "SELECT count(*) FROM uses WHERE birth NOT IN (SELECT id FROM allocations);")" 0
check_eq "launch rows = launch events" "$(q "$DB" "SELECT count(*) FROM launches;")" "$(q "$DB" "SELECT count(*) FROM events WHERE kind = 20;")"
check_eq "untimed by default" "$(q "$DB" "SELECT count(*) FROM launches WHERE start_ns IS NOT NULL OR end_ns IS NOT NULL;")" 0

# ---- every launch path, each once ---------------------------------------------------------------
DB=$TMP/paths.db
run_app "$DB" "$TMP/paths.out" "$APPS/uses_app" paths || { fail "uses_app paths"; cat "$TMP/paths.out" "$TMP/paths.out.err"; }
read -r made < <(awk '/^uses_app: paths launches/ {print $4}' "$TMP/paths.out")
check_eq "paths: launches made" "$made" 11
check_eq "paths: kernel launch events = launches made" "$(q "$DB" "SELECT count(*) FROM launches WHERE op = 0;")" "$made"
check_eq "paths: GPUMEM_STATS launch counter" "$(stat "$TMP/paths.out.err" launch)" "$made"
for p in rt rt_ptsz rt_ex rt_coop drv_sym drv_sym_ex drv_sym_coop drv_proc drv_proc_ex drv_proc_coop drv_extra; do
  n=$(q "$DB" "SELECT count(*) FROM launches l JOIN strings s ON s.id = l.kernel WHERE s.s = 'k_$p';")
  u=$(used_names "$DB" "k_$p")
  if [[ $n == 1 && $u == "p_$p" ]]; then pass "path $p: one launch, uses p_$p"
  else fail "path $p: $n launch(es), uses '$u' (expected 1, p_$p)"; fi
done

# ---- a wide parameter: candidates past the stack buffer, every word position ---------------------
DB=$TMP/wide.db
run_app "$DB" "$TMP/wide.out" "$APPS/uses_app" wide || { fail "uses_app wide"; cat "$TMP/wide.out" "$TMP/wide.out.err"; }
check_eq "wide: k_wide uses exactly W000..W279" "$(used_names "$DB" k_wide)" "$(printf 'W%03d\n' $(seq 0 279) | paste -sd ' ')"
check_eq "wide: W_unused has no use" "$(q "$DB" "SELECT count(*) FROM uses u JOIN allocations a ON a.id = u.birth WHERE a.name = 'W_unused';")" 0
# and pinned host memory among them: the scan tests the host span as well as the device span
DB=$TMP/widep.db
run_app "$DB" "$TMP/widep.out" "$APPS/uses_app" wide pinned || { fail "uses_app wide pinned"; cat "$TMP/widep.out" "$TMP/widep.out.err"; }
check_eq "wide pinned: k_wide uses exactly W000..W279 and W_pinned" "$(used_names "$DB" k_wide | tr ' ' '\n' | sort | paste -sd ' ')" \
  "$( (printf 'W%03d\n' $(seq 0 279); echo W_pinned) | sort | paste -sd ' ')"

# ---- parameters that fit the stack buffer: one word, a narrow struct, a 41-word struct ------------
DB=$TMP/narrow.db
run_app "$DB" "$TMP/narrow.out" "$APPS/uses_app" narrow || { fail "uses_app narrow"; cat "$TMP/narrow.out" "$TMP/narrow.out.err"; }
check_eq "narrow: k_narrow uses exactly N0..N5" "$(used_names "$DB" k_narrow)" "N0 N1 N2 N3 N4 N5"
DB=$TMP/narrowp.db
run_app "$DB" "$TMP/narrowp.out" "$APPS/uses_app" narrow pinned || { fail "uses_app narrow pinned"; cat "$TMP/narrowp.out" "$TMP/narrowp.out.err"; }
check_eq "narrow pinned: k_narrow uses exactly N0..N5 and N_pinned" "$(used_names "$DB" k_narrow)" "N0 N1 N2 N3 N4 N5 N_pinned"

# ---- pointers in every pattern of a group of four words (the scan keeps a group's hits by its mask)
for m in "" pinned; do
  DB=$TMP/groups$m.db
  run_app "$DB" "$TMP/groups$m.out" "$APPS/uses_app" groups $m || { fail "uses_app groups $m"; cat "$TMP/groups$m.out" "$TMP/groups$m.out.err"; }
  check_eq "groups${m:+ $m}: k_groups uses exactly G00..G42" "$(used_names "$DB" k_groups)" "$(printf 'G%02d\n' $(seq 0 42) | paste -sd ' ')"
  check_eq "groups${m:+ $m}: k_groups_wide uses exactly H00..H42" "$(used_names "$DB" k_groups_wide)" "$(printf 'H%02d\n' $(seq 0 42) | paste -sd ' ')"
done

# ---- words between the spans: in their hull, in neither (a prefilter by the hull alone keeps them) ---
# 12 candidates among gap words: exactly Q0..Q6 and Q_pinned used, and two word records a launch
# (the second launch's seq is the first's + 3): a gap word kept would make a third (no use: the
# recorder finds no allocation there, but the launch carries it). Replace mode puts the pinned
# buffer above the device memory, record mode's 64 MiB one below it.
orders=
for m in replace:256 record:big; do
  DB=$TMP/hull-${m%%:*}.db
  run_app "$DB" "$TMP/hull.out" GPUMEM_MODE=${m%%:*} "$APPS/uses_app" hull ${m#*:} || { fail "uses_app hull, ${m%%:*} mode"; cat "$TMP/hull.out" "$TMP/hull.out.err"; }
  check_eq "hull ${m%%:*}: k_hull uses exactly Q0..Q6 and Q_pinned" "$(used_names "$DB" k_hull)" "Q0 Q1 Q2 Q3 Q4 Q5 Q6 Q_pinned"
  check_eq "hull ${m%%:*}: two word records a launch (no gap word kept)" "$(q "$DB" "SELECT max(seq) - min(seq) FROM launches;")" 3
  orders+=" $(sed -n 's/^uses_app: hull: the host span is \([a-z]*\) the device span$/\1/p' "$TMP/hull.out")"
done
check_eq "hull: the host span below and above the device span" "$(echo $orders | tr ' ' '\n' | sort | paste -sd ' ')" "above below"

# ---- what the hooks leave on the stack is not the next launch's arguments -----------------------
# (the plain build only: the rows assume the test program's own frames keep RA_<path> in
# registers, which a sanitizer's instrumentation does not; under ASan the two memset rows find
# RA_<path> with the scrubs at 16 KiB, not diagnosed further: most likely the instrumented
# program's own spill, which is not gpumem's to scrub)
# libgpumem.so binds every symbol it calls at load (-z now, preload/module.mk): a lazy binding's
# first call from inside a hook saves the register file deep on the stack (AVX-512: stale vector
# registers with the program's pointers), below what the scrubs reach
check_eq "libgpumem.so is linked with BIND_NOW" "$( (($(readelf -d "$LIB" | grep -cE '\(FLAGS(_1)?\).*NOW'))) && echo yes)" yes
# The rows run the program with LD_BIND_NOW=1: the other libraries' lazy bindings (the virtual
# GPU's, libunwind's, the program's own) save the register file the same way, on a CPU with
# AVX-512 2.5-3 KiB below the call, and with whatever the vector registers last held (a pointer
# the program or a library copied long before): not the hooks' words, which is what the rows
# test. Without it, on an AMD EPYC with AVX-512 (2026-12-07), 3 to 17 rows failed from run to
# run, on main as it was too, their kernels finding RA_rt or an earlier row's RB_ among their uses.
DB=$TMP/residue.db
if [[ -n ${SAN:-} ]]; then
  echo "preload_uses.sh: the residue rows run in the plain build (a sanitizer lays out the test program's frames)" >&2
else
  run_app "$DB" "$TMP/residue.out" LD_BIND_NOW=1 "$APPS/uses_app" residue || { fail "uses_app residue"; cat "$TMP/residue.out" "$TMP/residue.out.err"; }
  for p in rt rt_ex rt_coop drv_sym drv_sym_ex drv_sym_coop drv_proc drv_proc_ex drv_proc_coop trace rt_memset drv_memset \
           rt_malloc rt_malloc_async rt_malloc_managed rt_malloc_host rt_host_alloc \
           drv_sym_alloc drv_alloc drv_alloc_async drv_alloc_managed drv_alloc_host drv_host_alloc drv_alloc_pitch torch_malloc name \
           rt_malloc_pool drv_sym_alloc_pool drv_alloc_pool record_stream \
           rt_free rt_free_async rt_free_managed rt_free_host drv_sym_free drv_free drv_free_async drv_free_host torch_free; do
    check_eq "residue $p: k_rb_$p uses RB_$p alone (none of the hook's leftovers)" "$(used_names "$DB" "k_rb_$p")" "RB_$p"
  done
  # a free's leftover is an address no allocation holds, until the next one there: RX_<path>
  for p in rt_free rt_free_async rt_free_managed rt_free_host drv_sym_free drv_free drv_free_async drv_free_host torch_free; do
    check_eq "residue $p: RX_$p allocated at the freed address" "$(sed -n "s/^uses_app: residue $p //p" "$TMP/residue.out")" reused
  done
fi
# PyTorch's trace entry from Python code: the stack reader's frames go ~12 KiB below it, past the
# scrub's bound (GM_SCRUB_TRACE_BYTES): none of the entry's arguments may be there, nor in its
# own frames (tests/integration/py/trace_residue.py; each row: one entry, then the 32 KiB below
# read from the same Python frame)
# (the plain build: a sanitizer's runtime must be loaded first into a Python that has none, and
# its frames are laid out otherwise, with GM_SCRUB_TRACE_BYTES of the measured depth)
PY=${GPUMEM_TEST_PYTHON:-/usr/bin/python3}
if [[ -n ${SAN:-} ]]; then
  echo "preload_uses.sh: the trace entry's rows with Python frames run in the plain build" >&2
elif [[ -x $PY && -f $APPS/stack_probe.so ]]; then
  OUT=$TMP/trace_py.out
  run_app "$TMP/trace_py.db" "$OUT" "$PY" tests/integration/py/trace_residue.py "$APPS/stack_probe.so" \
    "$BUILD/sim/libcudart.so.13" || { fail "trace_residue.py"; cat "$OUT" "$OUT.err"; }
  row() { sed -n "s/^trace_residue: $1 \(clean\|[a-z_]* left at [0-9]*\)$/\1/p" "$OUT"; }
  kept() { sed -n "s/^trace_residue: $1 kept //p" "$OUT"; }
  for r in alloc alloc_nogil oom alloc_new_device; do
    check_eq "residue trace+python $r: none of its arguments below the entry" "$(row $r)" clean
    check_eq "residue trace+python $r: kept, Python stack read" "$(kept $r)" "as passed, with a stack"
  done
  for r in free segment_free free_new_device; do
    check_eq "residue trace+python $r: none of its arguments below the entry" "$(row $r)" clean
    check_eq "residue trace+python $r: kept" "$(kept $r)" "as passed, no stack"
  done
  # cudaMalloc from Python code: the reader's frames under the hook holding the new address
  for r in malloc malloc_nogil; do
    check_eq "residue python $r: the new address nowhere below the call" \
      "$(sed -n "s/^trace_residue: $r //p" "$OUT")" clean
  done
  check_eq "residue trace+python: a word left 4,000 bytes down is found there" \
    "$(sed -n 's/^trace_residue: control at //p' "$OUT")" 4000
else
  echo "preload_uses.sh: no $PY (GPUMEM_TEST_PYTHON) or stack_probe.so: the trace entry's rows with Python frames not run" >&2
fi

# ---- launches inside a launch: each level keeps its own candidates ------------------------------
DB=$TMP/nest.db
run_app "$DB" "$TMP/nest.out" "$APPS/uses_app" nest || { fail "uses_app nest"; cat "$TMP/nest.out" "$TMP/nest.out.err"; }
for l in 0 1 2 3; do
  check_eq "nest narrow $l: k_nest_narrow$l uses NN$l alone" "$(used_names "$DB" "k_nest_narrow$l")" "NN$l"
  check_eq "nest wide $l: k_nest_wide$l uses NW$l alone" "$(used_names "$DB" "k_nest_wide$l")" "NW$l"
done
check_eq "nest: 16 launches recorded" "$(q "$DB" "SELECT count(*) FROM launches WHERE op = 0;")" 16

# ---- copies and memsets: direction -------------------------------------------------------------
# acc DB NAME OP: the distinct access flags of one allocation's uses by copies (op 1) or memsets (2)
acc() { q "$1" "SELECT group_concat(access) FROM (SELECT DISTINCT u.access FROM uses u
  JOIN allocations a ON a.id = u.birth JOIN launches l ON l.seq = u.seq
  WHERE a.name = '$2' AND l.op = $3 ORDER BY u.access DESC);"; }
copies_checks() { local DB=$1 what=$2
  check_eq "$what: X copy accesses (HtoD write, DtoD read)" "$(acc "$DB" X 1)" "2,1"
  check_eq "$what: Y copy accesses (DtoD write, DtoH read)" "$(acc "$DB" Y 1)" "2,1"
  check_eq "$what: W memset writes" "$(acc "$DB" W 2)" "2"
  check_eq "$what: Z driver copies (HtoD write, DtoH read)" "$(acc "$DB" Z 1)" "2,1"
  check_eq "$what: Z driver memset writes" "$(acc "$DB" Z 2)" "2"
  check_eq "$what: copy/memset events" "$(q "$DB" "SELECT count(*) FROM launches WHERE op IN (1, 2);")" 7
  check_eq "$what: bytes of the DtoD copy" "$(q "$DB" "SELECT l.bytes FROM launches l JOIN strings s ON s.id = l.kernel WHERE s.s = 'memcpy DtoD';")" 1024
}
DB=$TMP/copies.db
run_app "$DB" "$TMP/copies.out" "$APPS/uses_app" copies || { fail "uses_app copies"; cat "$TMP/copies.out" "$TMP/copies.out.err"; }
copies_checks "$DB" "replace mode"
DB=$TMP/copies-rec.db
run_app "$DB" "$TMP/copies-rec.out" GPUMEM_MODE=record "$APPS/uses_app" copies || fail "uses_app copies, record mode"
copies_checks "$DB" "record mode"
DB=$TMP/acc-rec.db
run_app "$DB" "$TMP/acc-rec.out" GPUMEM_MODE=record "$APPS/uses_app" acceptance || fail "uses_app acceptance, record mode"
check_eq "record mode: allocations with uses" "$(used_names "$DB")" "A B C E"

# ---- GPUMEM_USES=0 / bogus -------------------------------------------------------------------------
DB=$TMP/off.db
run_app "$DB" "$TMP/off.out" GPUMEM_USES=0 "$APPS/uses_app" paths || fail "uses_app with GPUMEM_USES=0"
check_eq "GPUMEM_USES=0: meta" "$(q "$DB" "SELECT value FROM meta WHERE key = 'uses';")" 0
check_eq "GPUMEM_USES=0: no launch recorded" "$(q "$DB" "SELECT count(*) FROM events WHERE kind = 20;")" 0
check_eq "GPUMEM_USES=0: no use" "$(q "$DB" "SELECT count(*) FROM uses;")" 0
check_gt "GPUMEM_USES=0: allocations still recorded" "$(q "$DB" "SELECT count(*) FROM allocations;")" 0
DB=$TMP/bogus.db
run_app "$DB" "$TMP/bogus.out" GPUMEM_USES=bogus "$APPS/uses_app" acceptance || fail "uses_app with GPUMEM_USES=bogus"
check_eq "GPUMEM_USES=bogus: one line on stderr" "$(grep -c '^gpumem: ' "$TMP/bogus.out.err")" 1
if grep -q "^gpumem: GPUMEM_USES: unknown value 'bogus' (accepted: 0, 1, timed); gpumem is off$" "$TMP/bogus.out.err"; then
  pass "GPUMEM_USES=bogus: the line names the variable, the value and the accepted values"
else fail "GPUMEM_USES=bogus: unexpected message: $(grep '^gpumem: ' "$TMP/bogus.out.err")"; fi
check_eq "GPUMEM_USES=bogus: gpumem off" "$(awk '$1=="gpumem-stats" && $3=="mode" {print $4}' "$TMP/bogus.out.err")" off
check_eq "GPUMEM_USES=bogus: the program still ran" "$(grep -c '^uses_app: acceptance launches 2' "$TMP/bogus.out")" 1

# ---- GPUMEM_USES=timed ---------------------------------------------------------------------------
DB=$TMP/timed.db
run_app "$DB" "$TMP/timed.out" GPUMEM_USES=timed "$APPS/uses_app" sleep 4 || { fail "uses_app sleep, timed"; cat "$TMP/timed.out.err"; }
check_eq "timed: meta" "$(q "$DB" "SELECT value FROM meta WHERE key = 'uses';")" timed
K="FROM launches l JOIN strings s ON s.id = l.kernel WHERE s.s = 'k_sleep'"
check_eq "timed: k_sleep launches" "$(q "$DB" "SELECT count(*) $K;")" 4
check_eq "timed: every launch has start and end" "$(q "$DB" "SELECT count(*) $K AND l.start_ns IS NOT NULL AND l.end_ns IS NOT NULL AND l.start_ns <= l.end_ns;")" 4
check_eq "timed: device time of a 2 ms kernel >= 1.9 ms" "$(q "$DB" "SELECT count(*) $K AND l.end_ns - l.start_ns >= 1900000;")" 4
check_eq "timed: launches in order, not overlapping" "$(q "$DB" "SELECT count(*) FROM (SELECT l.start_ns, lag(l.end_ns) OVER (ORDER BY l.seq) AS prev $K) WHERE prev IS NOT NULL AND start_ns < prev;")" 0
check_eq "timed: device times inside the run (after the first event, before the last)" \
  "$(q "$DB" "SELECT count(*) $K AND l.start_ns >= (SELECT min(t) FROM events) AND l.end_ns <= (SELECT max(t) FROM events) + 1000000000;")" 4
finish
