#!/usr/bin/env bash
# The recorded command, word for word and from where it started: meta.argv (a JSON array of the
# arguments as the program got them) and meta.cwd (the directory at the program's start), and
# every --check re-run running exactly that.
#  1. Recording, each way a recording starts (gpumem record, a plain LD_PRELOAD, a forked child,
#     MPI ranks): a program given arguments with a space, a quote, double quotes, nothing, unicode
#     and a newline, that chdir()s before its first CUDA call. meta.argv reads back to the very
#     argv it got; meta.cwd is where it started, not where its first CUDA call was.
#  2. Re-runs: a trainer recording whose meta.argv ends with those arguments; the program is then
#     replaced by one that writes down the arguments it got. tune, frag, advise and advise --ranks
#     --check each run it with those arguments, in order, each one word as it was.
#  3. An older recording (no meta.argv) is re-run as it always was, meta.cmdline split at spaces,
#     and the re-run says so on stderr.
source "$(dirname "$0")/e2e_common.bash"
export GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G GPUMEM_STACKS=0
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
command -v python3 > /dev/null || { echo "skipped: no python3" >&2; exit 77; }
nbad=0
bad() { echo "FAIL: $*" >&2; nbad=$((nbad + 1)); }
GMA=$(realpath "$GM")
LIB=$(realpath "$BUILD/libgpumem.so")
SIM=$(realpath "$BUILD/sim")
WEIRD=("a b" "it's" '"q"' "" "ünï" $'x\ny')

# the program: writes down its argv and its directory, chdir()s, then makes its first CUDA
# call (with FORK=1, a child forked before it makes one too)
mkdir -p "$TMP/start" "$TMP/later" "$TMP/dbs"
cat > "$TMP/start/prog.py" << 'EOF'
import ctypes, json, os, sys
tag = os.environ.get("OMPI_COMM_WORLD_RANK", "")
with open(os.environ["ARGV_OUT"] + tag, "w") as f:
    json.dump({"argv": sys.argv, "cwd": os.getcwd()}, f)
os.chdir(os.environ["CHDIR_TO"])
# a worker forked before any CUDA call (after one, a child may not use CUDA): it records too
child = os.fork() if os.environ.get("FORK") == "1" else -1
rt = ctypes.CDLL("libcudart.so.13")
p = ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(p), 1 << 20) == 0
rt.cudaFree(p)
if child == 0:
    sys.exit(0)
if child > 0:
    os.waitpid(child, 0)
EOF

# check_rec NAME DB SEEN: meta.argv's words after argv[0] (the interpreter) are the program's
# argv as it saw it, and meta.cwd the directory it started in
check_rec() {
  local name=$1 db=$2 seen=$3
  if [[ ! -s $db ]]; then
    bad "$name: no recording $db"
    return
  fi
  local argv cwd
  argv=$(sqlite3 "$db" "SELECT value FROM meta WHERE key = 'argv'")
  cwd=$(sqlite3 "$db" "SELECT value FROM meta WHERE key = 'cwd'")
  if ! jq -e --argjson a "${argv:-null}" '.argv == $a[1:]' "$seen" > /dev/null 2>&1; then
    bad "$name: meta.argv '$argv' is not the argv the program got: $(jq -c .argv "$seen")"
  else
    ok "$name: meta.argv is the program's argv word for word"
  fi
  if [[ $cwd != "$(jq -r .cwd "$seen")" ]]; then
    bad "$name: meta.cwd is '$cwd', not the directory it started in, $(jq -r .cwd "$seen")"
  else
    ok "$name: meta.cwd is where it started, not where its first CUDA call was"
  fi
}
run_env=(ARGV_OUT="$TMP/seen" CHDIR_TO="$TMP/later")
(cd "$TMP/start" && env "${run_env[@]}" "$GMA" record -q -o "$TMP/dbs/rec.db" -- python3 prog.py "${WEIRD[@]}") \
  > "$TMP/out.txt" 2>&1 || bad "gpumem record: $(tail -3 "$TMP/out.txt")"
check_rec "gpumem record" "$TMP/dbs/rec.db" "$TMP/seen"
(cd "$TMP/start" && env "${run_env[@]}" LD_PRELOAD="$LIB" LD_LIBRARY_PATH="$SIM" GPUMEM_DB="$TMP/dbs/plain.db" \
  python3 prog.py "${WEIRD[@]}") > "$TMP/out.txt" 2>&1 || bad "LD_PRELOAD: $(tail -3 "$TMP/out.txt")"
check_rec "plain LD_PRELOAD" "$TMP/dbs/plain.db" "$TMP/seen"
(cd "$TMP/start" && env "${run_env[@]}" FORK=1 LD_PRELOAD="$LIB" LD_LIBRARY_PATH="$SIM" \
  GPUMEM_DB="$TMP/dbs/fork-%p.db" python3 prog.py "${WEIRD[@]}") > "$TMP/out.txt" 2>&1 \
  || bad "fork: $(tail -3 "$TMP/out.txt")"
n=0
for db in "$TMP"/dbs/fork-*.db; do
  [[ $db == *-wal || $db == *-shm ]] && continue
  n=$((n + 1))
  check_rec "fork ($(basename "$db"))" "$db" "$TMP/seen"
done
[[ $n == 2 ]] || bad "fork: $n recordings, not the parent's and the child's"
if command -v mpirun > /dev/null; then
  root=()
  [[ $(id -u) == 0 ]] && root=(--allow-run-as-root)
  (cd "$TMP/start" && env "${run_env[@]}" "$GMA" record -q -o "$TMP/dbs/mpi-%r.db" -- \
    mpirun "${root[@]}" -np 2 --oversubscribe python3 prog.py "${WEIRD[@]}") > "$TMP/out.txt" 2>&1 \
    || bad "MPI ranks: $(tail -3 "$TMP/out.txt")"
  for r in 0 1; do check_rec "MPI rank $r" "$TMP/dbs/mpi-$r.db" "$TMP/seen$r"; done
else
  echo "skipped: MPI ranks (no mpirun)"
fi

# 2. Re-runs. The trainer recorded through a link (gpt2, a sequence length per step, PyTorch's
# policy: frag and tune have a fix to re-run), the weird words appended to its meta.argv; then
# the link is replaced by a program that writes down its arguments (NUL after each) and fails.
mkdir -p "$TMP/bin" "$TMP/mpi" "$TMP/got"
ln -s "$(realpath "$TRAIN")" "$TMP/bin/train_gpt2_sim"
GPUMEM_CONF=preset:pytorch "$GM" record -q -o "$TMP/f.db" -- "$TMP/bin/train_gpt2_sim" --model gpt2 -B 2 -T 256 \
  --steps 6 --seq-jitter --seed 5 --dry-run > "$TMP/rec.txt" 2>&1 || fail "recording: $(tail -3 "$TMP/rec.txt")"
rm "$TMP/bin/train_gpt2_sim"
cat > "$TMP/bin/train_gpt2_sim" << EOF
#!/bin/sh
[ "\$1" = --help ] && exit 3
for a in "\$@"; do printf '%s\0' "\$a"; done > "$TMP/got/\$\$"
echo "recorded words written" >&2
exit 3
EOF
# an mpirun that runs its command once, as rank 0
printf '#!/bin/sh\nwhile [ $# -gt 0 ]; do a=$1; shift; [ "$a" = --oversubscribe ] && break; done\nexec "$@"\n' \
  > "$TMP/mpi/mpirun"
chmod +x "$TMP/bin/train_gpt2_sim" "$TMP/mpi/mpirun"
cp "$TMP/f.db" "$TMP/w.db"
json=$(printf '%s\0' "${WEIRD[@]}" | python3 -c 'import sys,json; print(json.dumps(sys.stdin.buffer.read().decode().split("\0")[:-1]))')
sqlite3 "$TMP/w.db" "UPDATE meta SET value = (SELECT json_group_array(value) FROM (SELECT value FROM json_each(meta.value) UNION ALL SELECT value FROM json_each('$(sed "s/'/''/g" <<< "$json")')) ) WHERE key = 'argv'"
# got_has DIR: 0 when one re-run's words hold WEIRD, in order, each one word
got_has() {
  python3 - "$1" "${WEIRD[@]}" << 'EOF'
import os, sys
d, want = sys.argv[1], [w.encode() for w in sys.argv[2:]]
for f in os.listdir(d):
    words = open(os.path.join(d, f), "rb").read().split(b"\0")[:-1]
    for i in range(len(words) - len(want) + 1):
        if words[i:i + len(want)] == want:
            sys.exit(0)
    print("got", words)
sys.exit(1)
EOF
}
rows=(
  "tune|tune --check $TMP/w.db"
  "frag|frag --check $TMP/w.db"
  "advise|advise --check --top 1 $TMP/w.db"
  "advise --ranks|advise --ranks 2 --zero 1 --check $TMP/w.db"
)
for row in "${rows[@]}"; do
  IFS='|' read -r name args <<< "$row"
  rm -f "$TMP"/got/*
  rc=0
  # shellcheck disable=SC2086 # the row's arguments are words
  PATH=$TMP/mpi:$PATH "$GMA" $args > "$TMP/out.txt" 2>&1 || rc=$?
  if [[ $rc != 1 ]] || ! grepq -F "recorded words written" < "$TMP/out.txt"; then
    bad "$name --check: exit $rc, the re-run did not run the program: $(tail -2 "$TMP/out.txt")"
  elif ! got_has "$TMP/got" > "$TMP/why.txt"; then
    bad "$name --check: the re-run's words are not the recorded ones: $(cat "$TMP/why.txt")"
  elif grepq -F "has no meta.argv" < "$TMP/out.txt"; then
    bad "$name --check: a recording with meta.argv is said to have none"
  else
    ok "$name --check: each recorded word re-ran as one word, as it was"
  fi
done

# 3. An older recording: no meta.argv, meta.cmdline with "a b" in it. Re-run split at spaces,
# as before, and said.
cp "$TMP/f.db" "$TMP/old.db"
sqlite3 "$TMP/old.db" "DELETE FROM meta WHERE key = 'argv'; UPDATE meta SET value = value || ' a b' WHERE key = 'cmdline'"
rm -f "$TMP"/got/*
"$GMA" tune --check "$TMP/old.db" > "$TMP/out.txt" 2>&1 || true
if ! grepq -F "has no meta.argv" < "$TMP/out.txt"; then
  bad "older recording: the re-run does not say that its words are split at spaces: $(tail -2 "$TMP/out.txt")"
elif ! tr '\0' '\n' < "$TMP"/got/* | tail -2 | paste -sd'|' | grepq -x 'a|b'; then
  bad "older recording: not re-run as meta.cmdline split at spaces: $(tr '\0' '|' < "$TMP"/got/*)"
else
  ok "older recording: re-run as meta.cmdline split at spaces, and said so"
fi
[[ $nbad == 0 ]] || fail "$nbad rows failed"
ok "the recorded command, word for word and from where it started"
