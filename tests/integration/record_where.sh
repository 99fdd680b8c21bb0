#!/usr/bin/env bash
# Where a recording is written: a relative name is from the directory the command (gpumem record)
# or the program (libgpumem.so's constructor) started in, never from where the program happens
# to be at its first CUDA call. One table: every way a recording's name is made (record -o, record
# under GPUMEM_DB, record's default name, GPUMEM_DB, the preload's default, a %p template, a rank's
# %r template) x a program that chdir()s away before its first CUDA call (alone, starting a child
# there that records too, and exec'ing itself from there). Every file must be in the start
# directory, none in the one the program went to, and gpumem record must name files that exist.
# Last, gpumem record must not exit 0 when the file the recorder said it wrote is gone.
source "$(dirname "$0")/e2e_common.bash"
BUILD_ABS=$(cd "$BUILD" && pwd)
GMA=$BUILD_ABS/gpumem
cat > "$TMP/away.py" <<'PY'
import ctypes, glob, os, sys
mode, away = sys.argv[1], sys.argv[2]
os.chdir(away)  # before any CUDA call: the recording opens here
rt = ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)
p = ctypes.c_void_p()
if mode == "exec":  # the next image starts here, away: it reads GPUMEM_DB again
    os.execv(sys.executable, [sys.executable, __file__, "plain", away])
assert rt.cudaMalloc(ctypes.byref(p), 1 << 20) == 0
if mode == "spawn":  # a child (fork and exec) that starts away and records too
    import subprocess
    subprocess.run([sys.executable, __file__, "plain", away], cwd=away, check=True)
if mode == "gone":  # the recording the recorder promised is removed before the program ends
    for f in glob.glob(sys.argv[3] + "/*.db"):
        os.unlink(f)
PY
# name: how the table names a way; run: how it starts the program (in the start directory)
ways=(
  "record -o|$GMA record -o rel.db --"
  "record -o ../|$GMA record -o ../up/rel.db --"
  "record under GPUMEM_DB|env GPUMEM_DB=rel.db $GMA record --"
  "record's default|$GMA record --"
  "GPUMEM_DB|env GPUMEM_DB=rel.db LD_PRELOAD=$BUILD_ABS/libgpumem.so LD_LIBRARY_PATH=$BUILD_ABS/sim GPUMEM_QUIET=1"
  "preload's default|env -u GPUMEM_DB LD_PRELOAD=$BUILD_ABS/libgpumem.so LD_LIBRARY_PATH=$BUILD_ABS/sim GPUMEM_QUIET=1"
  "%p template|env GPUMEM_DB=run-%p.db LD_PRELOAD=$BUILD_ABS/libgpumem.so LD_LIBRARY_PATH=$BUILD_ABS/sim GPUMEM_QUIET=1"
  "%r template (rank)|env RANK=3 WORLD_SIZE=4 GPUMEM_DB=rank-%r.db LD_PRELOAD=$BUILD_ABS/libgpumem.so LD_LIBRARY_PATH=$BUILD_ABS/sim GPUMEM_QUIET=1"
)
n=0
for way in "${ways[@]}"; do
  name=${way%%|*} run=${way#*|}
  for mode in plain spawn exec; do
    n=$((n + 1))
    d=$TMP/t$n
    mkdir -p "$d/start" "$d/away" "$d/up"
    want=1; [[ $mode == spawn ]] && want=2
    where=$d/start; [[ $name == "record -o ../" ]] && where=$d/up
    rc=0
    (cd "$d/start" && $run python3 "$TMP/away.py" "$mode" "$d/away") > "$d/out" 2> "$d/err" || rc=$?
    [[ $rc == 0 ]] || fail "$name x $mode: exit $rc: $(tail -3 "$d/err")"
    got=$(find "$d" -name '*.db' | sed "s|^$d/||" | sort | tr '\n' ' ')
    have=$(find "$where" -name '*.db' | wc -l)
    [[ $have == "$want" && $(find "$d" -name '*.db' | wc -l) == "$want" ]] \
      || fail "$name x $mode: want $want database(s) in ${where#"$d/"}/ and none elsewhere, found: ${got:-none}"
    if [[ $name == record* ]]; then
      said=$(sed -n 's/^gpumem: recorded to \(.*\); see .*/\1/p' "$d/err" | tail -1)
      [[ -n $said ]] && (cd "$d/start" && [[ -f $said ]]) \
        || fail "$name x $mode: record said it recorded to '${said}', which is not there from start/ (found: $got)"
    fi
  done
  ok "$name: a program that chdir()s first, alone, with a child it starts there, and exec'ing itself, recorded in the start directory"
done
d=$TMP/gone
mkdir -p "$d/start" "$d/away"
rc=0
(cd "$d/start" && "$GMA" record -o rel.db -- python3 "$TMP/away.py" gone "$d/away" "$d/start") > /dev/null 2> "$d/err" || rc=$?
[[ $rc == 3 ]] && grepq "rel.db, but it is not there" "$d/err" \
  || fail "a recording removed while the program ran: record exited $rc (want 3, saying so): $(tail -2 "$d/err")"
ok "gpumem record exits 3 when the file the recorder said it wrote is not there"
