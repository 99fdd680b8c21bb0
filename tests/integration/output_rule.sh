#!/usr/bin/env bash
# One output rule, every writer (snapshot/formats/gm_out.h): every command that writes a file with -o
# goes through the same table of cases, and each case checks the files byte for byte (cmp):
#   user     an existing file that is not the writer's own kind: refused (rc 2), untouched;
#            with --force: replaced by output that reads back
#   again    an existing output of the writer's own kind: replaced without --force
#   symlink  a symbolic link to a user file: refused (rc 2) even with --force, target untouched
#   input    the command's own input given as the output: refused (rc 2) even with --force
#   nodir    a missing directory: refused (rc 2), nothing created
#   full     a full disk: the write fails (rc 3), the old file is whole, no temporary left
#            (record writes its database in place as it goes, so that a kill -9 keeps what was
#            recorded: there the old recording is replaced, and the new one is whole or says
#            FAILED and why, or is removed when not even its schema fit (rc 3), as
#            snapshot_diskfull.sh checks in detail)
#   signal   SIGINT, SIGTERM, SIGHUP mid-write (GPUMEM_TEST_OUT_STALL=1: stopped before the
#            rename): exit 128+N, the old file whole, no temporary file left
# The writers are found in `gpumem --help` (every command whose usage takes -o) and in
# `gpumem export --help` (every format): a writer with no row in the table fails the test.
source tests/integration/snapshot_common.bash
need "$GPUMEM" "$BUILD/tests/apps/rt_app" "$BUILD/train_gpt2_sim"
G=$PWD/$GPUMEM
APP=$PWD/$BUILD/tests/apps/rt_app
cd "$TMP" || fail "no scratch directory"

# inputs: a small recording, a second one (ranks), and a PyTorch snapshot (gpumem's own export)
"$G" record -q -o in.db -- "$OLDPWD/$BUILD/train_gpt2_sim" --steps 2 > /dev/null 2>&1 \
  || fail "recording the trainer failed"
"$G" record -q -o in2.db -- "$APP" > /dev/null 2>&1 || fail "recording rt_app failed"
"$G" export --format torch in.db -o in.pickle || fail "export torch for the import input"
# (the writer's command with OUT for the output; its input; how to tell its output reads back)
declare -A CMD INPUT READS
cp "$APP" prog
CMD[record]='"$G" record -q -o OUT -- ./prog'; INPUT[record]=prog
CMD[import]='"$G" import in.pickle -o OUT'; INPUT[import]=in.pickle
CMD[viz]='"$G" viz in.db -o OUT'; INPUT[viz]=in.db
CMD[viz-ranks]='"$G" viz in.db in2.db -o OUT'; INPUT[viz-ranks]=in2.db
for f in trace torch chrome folded speedscope csv; do
  CMD[export-$f]="\"\$G\" export --format $f in.db -o OUT"; INPUT[export-$f]=in.db
done
READS[record]='"$G" report OUT > /dev/null'
READS[import]='"$G" report OUT > /dev/null'
READS[viz]='grep -q "gpumem viz" OUT'
READS[viz-ranks]='grep -q "gpumem viz" OUT'
READS[export-trace]='grep -q "^a " OUT'
READS[export-torch]='python3 -c "import pickle,sys; d=pickle.load(open(sys.argv[1],\"rb\")); assert \"segments\" in d" OUT'
READS[export-chrome]='python3 -c "import json,sys; assert json.load(open(sys.argv[1]))[\"traceEvents\"]" OUT'
READS[export-folded]='grep -q ";" OUT'
READS[export-speedscope]='python3 -c "import json,sys; assert json.load(open(sys.argv[1]))[\"profiles\"]" OUT'
READS[export-csv]='head -1 OUT | grepq "^id,address,size"'

# every writer gpumem has must be in the table
found=()
while read -r c; do
  if [[ $c == export ]]; then
    for f in $("$G" export --help | sed -n 's/^ *--format \([a-z]*\) .*/\1/p'); do found+=("export-$f"); done
  else
    found+=("$c")
  fi
done < <("$G" --help | awk '$1 ~ /^[a-z]+$/ && /[ []-o / { print $1 }' | sort -u)
[[ " ${found[*]} " == *" viz "* ]] && found+=(viz-ranks)
((${#found[@]} >= 9)) || fail "found only ${#found[@]} writers in the help texts: ${found[*]}"
for w in "${found[@]}"; do
  [[ -n ${CMD[$w]:-} ]] || fail "the writer '$w' (from the help texts) has no row in this table: add it"
done

run() { # WRITER OUT [extra args]: runs the writer's command with OUT; rc in $rc, stderr in err
  local w=$1 out=$2; shift 2
  local c=${CMD[$w]//OUT/\"$out\"}
  [[ $# -gt 0 ]] && c=${c/ -o / $* -o }
  eval "$c" > /dev/null 2> err; rc=$?
}
reads() { local c=${READS[$1]//OUT/\"$2\"}; eval "$c"; }
no_temp() { ! ls -A "$1" | grepq '\.gpumem-'; }

mkdir -p full
full=0
if mount -t tmpfs -o size=512k gpumem-out "$TMP/full" 2> /dev/null; then
  full=1
  trap 'umount "$TMP/full" 2> /dev/null; rm -rf "$TMP"' EXIT
else
  echo "note: cannot mount a small tmpfs here (needs root); the full-disk column is skipped" >&2
fi

rows=0
for w in "${found[@]}"; do
  d=case-$w; mkdir -p "$d"
  # user: refused, untouched; --force replaces it with output that reads back
  printf 'a user file\n' > "$d/user" && cp "$d/user" "$d/user.orig"
  run "$w" "$d/user"
  [[ $rc -eq 2 ]] || { cat err; fail "$w over a user file: rc $rc, expected 2"; }
  cmp -s "$d/user" "$d/user.orig" || fail "$w changed a user file"
  grep -q -- "--force" err || { cat err; fail "$w: the refusal does not name --force"; }
  run "$w" "$d/user" --force
  [[ $rc -eq 0 ]] || { cat err; fail "$w --force over a user file: rc $rc"; }
  reads "$w" "$d/user" || fail "$w --force: what it wrote does not read back"
  # again: its own kind is replaced without --force
  cp "$d/user" "$d/own.orig"
  run "$w" "$d/user"
  [[ $rc -eq 0 ]] || { cat err; fail "$w over its own earlier output: rc $rc"; }
  reads "$w" "$d/user" || fail "$w again: what it wrote does not read back"
  # symlink: never followed, forced or not
  printf 'the target\n' > "$d/target" && cp "$d/target" "$d/target.orig" && ln -s target "$d/link"
  for f in "" --force; do
    run "$w" "$d/link" $f
    [[ $rc -eq 2 ]] || { cat err; fail "$w through a symlink ($f): rc $rc, expected 2"; }
    cmp -s "$d/target" "$d/target.orig" && [[ -L $d/link ]] || fail "$w wrote through a symlink ($f)"
  done
  # input: its own input is never the output, forced or not
  in=${INPUT[$w]}
  cp "$in" "$d/input.orig"
  for f in "" --force; do
    run "$w" "$in" $f
    [[ $rc -eq 2 ]] || { cat err; fail "$w onto its own input ($f): rc $rc, expected 2"; }
    cmp -s "$in" "$d/input.orig" || fail "$w wrote onto its own input ($f)"
  done
  # nodir: refused, nothing created
  run "$w" "$d/missing/out"
  [[ $rc -eq 2 && ! -e $d/missing ]] || { cat err; fail "$w into a missing directory: rc $rc"; }
  grep -q "does not exist" err || { cat err; fail "$w: the missing directory is not named"; }
  no_temp "$d" || fail "$w left a temporary file in $d"
  # full: a failed write leaves the old file whole
  if ((full)); then
    rm -rf "$TMP/full/"* "$TMP/full/".[!.]* 2> /dev/null
    cp "$d/user" "$TMP/full/old" && cp "$d/user" "$d/old.orig"
    head -c "$(($(df -B1 --output=avail "$TMP/full" | tail -1) - 4096))" /dev/zero > "$TMP/full/filler" 2> /dev/null
    run "$w" "$TMP/full/old"
    if [[ $w == record ]]; then
      # the old recording's room is the new one's: the new one is whole or says FAILED and why
      # (rc: the program's 0); or, with no room even for its schema, it is removed, said once,
      # and record exits 3 (snapshot_diskfull.sh)
      if [[ $rc -eq 3 ]]; then
        [[ ! -e $TMP/full/old ]] && grepq "cannot set up .*no space left on device" err \
          || { cat err; fail "record on a full disk, not set up: the file is left or the reason not said"; }
      else
        [[ $rc -eq 0 ]] || { cat err; fail "record on a full disk: rc $rc"; }
        "$G" report --lossy-ok "$TMP/full/old" > rep 2>&1 || { cat rep; fail "record on a full disk: the recording does not read"; }
      fi
    else
      [[ $rc -eq 3 ]] || { cat err; fail "$w on a full disk: rc $rc, expected 3"; }
      cmp -s "$TMP/full/old" "$d/old.orig" || fail "$w on a full disk: the old file was not left whole"
      grep -q "left as it was" err || { cat err; fail "$w on a full disk: the message does not say the old file is whole"; }
      no_temp "$TMP/full" || fail "$w on a full disk left a temporary file"
    fi
  fi
  # signal: ended mid-write (all of it in the temporary file, the rename to come:
  # GPUMEM_TEST_OUT_STALL) by Ctrl-C, kill or a hangup: it dies of the signal (128+N), the old
  # file is whole and no temporary file (nor a database's side file) is left. record writes in
  # place, so that a kill keeps what was recorded (snapshot_signals.sh); it has no temporary.
  if [[ $w != record ]]; then
    for sig in INT TERM HUP; do
      cp "$d/own.orig" "$d/sig" && cp "$d/sig" "$d/sig.orig"
      c=${CMD[$w]//OUT/\"$d/sig\"}
      # exec: the pid is the writer's; a background job of a script starts with SIGINT ignored:
      # give every default action back
      eval "exec env --default-signal GPUMEM_TEST_OUT_STALL=1 $c" > /dev/null 2> err &
      pid=$!
      for _ in $(seq 600); do ls -A "$d" | grepq '^\.sig\.gpumem-' && break; sleep 0.05; done
      ls -A "$d" | grepq '^\.sig\.gpumem-' || { kill -KILL "$pid"; cat err; fail "$w: no temporary file to end mid-write"; }
      kill "-$sig" "$pid"; wait "$pid"; rc=$?
      [[ $rc -eq $((128 + $(kill -l "$sig"))) ]] || { cat err; fail "$w ended by SIG$sig mid-write: rc $rc, expected $((128 + $(kill -l "$sig")))"; }
      cmp -s "$d/sig" "$d/sig.orig" || fail "$w ended by SIG$sig mid-write: the old file was changed"
      no_temp "$d" || fail "$w ended by SIG$sig mid-write left a temporary file: $(ls -A "$d" | grep '\.gpumem-')"
    done
  fi
  rows=$((rows + 1))
done
echo "ok: ${rows} writers (${found[*]}) x user/force/again/symlink/input/nodir$( ((full)) && echo /full)/INT/TERM/HUP mid-write: files untouched (cmp), no temporary left"
