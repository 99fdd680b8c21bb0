#!/usr/bin/env bash
# Data safety of the database file: gpumem never overwrites a file that is not one of its own
# databases (gpumem record -o and GPUMEM_DB alike), --force / GPUMEM_DB_FORCE=1 replace it,
# a symbolic link at the name a writer writes is never followed (links are followed to read,
# and a linked directory is written into), and an earlier recording (even one killed at once)
# is replaced without a word.
source tests/integration/snapshot_common.bash
need "$GPUMEM"
APPRT=$BUILD/tests/apps/rt_app
if [[ ! -f $BUILD/libgpumem.so || ! -x $APPRT ]]; then
  echo "skipped: libgpumem.so or tests/apps/rt_app not built" >&2; exit 77
fi
cd "$TMP" || fail "no scratch directory"
G=$OLDPWD/$GPUMEM A=$OLDPWD/$APPRT LIB=$OLDPWD/$BUILD/libgpumem.so SIM=$OLDPWD/$BUILD/sim
unset GPUMEM_QUIET

# a user's file given as -o: exit 2 before the program runs, the file byte-identical
echo 'print(1)' > t.py && cp t.py t.orig
"$G" record -o t.py -- sh -c 'touch ran' > out 2> err; rc=$?
[[ $rc -eq 2 ]] || fail "record -o t.py exited $rc, expected 2"
cmp -s t.py t.orig || fail "t.py was changed"
[[ ! -e ran ]] || fail "the program ran although the database could not be written"
[[ $(wc -l < err) -eq 1 ]] && grep -q "t.py exists and is not a gpumem database.*--force" err \
  || { cat err; fail "not one line naming the file and --force"; }

# another program's SQLite database is not ours either
sqlite3 other.db 'CREATE TABLE t(a); INSERT INTO t VALUES (42);' || fail "sqlite3 failed"
cp other.db other.orig
"$G" record -q -o other.db -- true 2> err; rc=$?
[[ $rc -eq 2 ]] && cmp -s other.db other.orig || fail "another SQLite database was not refused (rc $rc)"

# the same through GPUMEM_DB: the program runs on (unharmed), nothing is written
GPUMEM_DB=t.py LD_PRELOAD=$LIB LD_LIBRARY_PATH=$SIM "$A" > out 2> err; rc=$?
[[ $rc -eq 0 ]] || { cat err; fail "the program failed under GPUMEM_DB=t.py (rc $rc)"; }
cmp -s t.py t.orig || fail "GPUMEM_DB=t.py changed t.py"
grep -qF "recorder: $PWD/t.py exists and is not a gpumem database; not overwriting it" err \
  || { cat err; fail "GPUMEM_DB=t.py: no refusal line"; }

# --force replaces it with a database that reads
"$G" record -q --force -o t.py -- "$A" > out 2> err; rc=$?
[[ $rc -eq 0 ]] || { cat err; fail "record --force exited $rc"; }
"$G" report t.py > rep || fail "the forced database does not read"
grep -q "peak allocated" rep || fail "the forced database has no report"

# an earlier recording is replaced without --force, also through GPUMEM_DB
"$G" record -q -o t.py -- "$A" > out 2> err || { cat err; fail "re-recording over a gpumem database failed"; }
GPUMEM_DB=t.py LD_PRELOAD=$LIB LD_LIBRARY_PATH=$SIM "$A" > out 2> err || fail "GPUMEM_DB over a gpumem database failed"
grep -q "not overwriting" err && fail "a gpumem database was refused"
"$G" report t.py > /dev/null || fail "the replaced database does not read"

# a recording killed right after it started is still known as ours
GPUMEM_DB=k.db LD_PRELOAD=$LIB LD_LIBRARY_PATH=$SIM "$OLDPWD/$BUILD/train_gpt2_sim" --steps 100000 > /dev/null 2>&1 &
pid=$!
for _ in $(seq 200); do [[ -s k.db ]] && break; sleep 0.01; done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
[[ -s k.db ]] || echo "note: the killed run left an empty file (replaceable anyway)" >&2
"$G" record -q -o k.db -- "$A" > /dev/null 2> err || { cat err; fail "a killed recording was not replaced"; }

# an empty file is replaced
: > empty.db
"$G" record -q -o empty.db -- "$A" > /dev/null 2> err || { cat err; fail "an empty file was not replaced"; }

# symbolic links are never followed, not even with --force
ln -s t.orig link.db
"$G" record -q --force -o link.db -- true 2> err; rc=$?
[[ $rc -eq 2 ]] && grep -q "symbolic link" err || fail "a symlink was not refused (rc $rc)"
[[ $(cat t.orig) == 'print(1)' ]] || fail "the symlink's target changed"

# Symbolic links: a reader follows them wherever they are (a link at the database's name:
# latest.db -> run-12.db; a linked directory above it: $HOME or /scratch; a linked working
# directory, given as $PWD/r.db or r.db), and a writer writes into a linked directory; only a
# link at the very name a writer writes is refused, its target untouched (the output rule).
# Table 1, rows: how the files are reached; each reading command must succeed on each.
mkdir -p sl/real sl/ranks sl/outs || fail "mkdir sl"
"$G" record -q -o sl/real/r.db -- "$A" > /dev/null 2>&1 || fail "record for the link rows"
"$G" export --format torch sl/real/r.db -o sl/real/s.pickle > /dev/null 2>&1 || fail "export for the link rows"
ln -s r.db sl/real/latest.db && ln -s s.pickle sl/real/latest.pickle && ln -s real sl/lnk &&
  ln -s ../real/r.db sl/ranks/run-0.db && ln -s ranks sl/lranks || fail "ln -s"
SLID=$(sqlite3 sl/real/r.db "SELECT min(seq) FROM events WHERE kind = 1")
SLOUT=$TMP/sl/outs
link_readers() { # $1 the recording, $2 a PyTorch snapshot, $3 a directory of rank files: one line per failure
  local db=$1 pk=$2 ranks=$3 c rc
  for c in "report $db" "report --json $db" "leaks $db" "frag $db" "tune $db" "advise $db" "uses $db --id $SLID" \
           "export --format csv $db" "export --format torch $db -o $SLOUT/x.pickle" "viz $db -o $SLOUT/x.html" \
           "diff $db $db" "sql $db -c VALUES(1)" "report $ranks" "import $pk -o $SLOUT/i.db"; do
    "$G" $c > "$SLOUT/out" 2> "$SLOUT/err"; rc=$?
    [[ $rc -eq 0 || ( $rc -eq 1 && $c == leaks* ) ]] || echo "gpumem $c: rc $rc: $(head -1 "$SLOUT/err")"
  done
  "$G" report "$SLOUT/i.db" > /dev/null 2>&1 || echo "gpumem import $pk: what it wrote does not read"
}
for row in "file $TMP/sl/real/latest.db $TMP/sl/real/latest.pickle $TMP/sl/ranks" \
           "dir $TMP/sl/lnk/r.db $TMP/sl/lnk/s.pickle $TMP/sl/lranks" \
           "cwd-abs" "cwd-rel"; do
  read -r how db pk ranks <<< "$row"
  rm -f "$SLOUT/i.db"
  case $how in
    cwd-abs) bad=$(cd "$TMP/sl/lnk" && link_readers "$PWD/r.db" "$PWD/s.pickle" "$PWD/../lranks") ;;
    cwd-rel) bad=$(cd "$TMP/sl/lnk" && link_readers r.db s.pickle ../lranks) ;;
    *) bad=$(link_readers "$db" "$pk" "$ranks") ;;
  esac
  [[ -z $bad ]] || fail "a recording reached through a link ($how) is not read: $bad"
done
# Table 2, the writers: into a linked directory (written, and what they wrote reads), and to a
# name that is a link (exit 2 before anything runs; the link and its target as they were). Rows:
# writer, output name, whether the output is a database.
wcmd() { # $1 the writer, $2 the output: runs it
  case $1 in
    record) "$G" record -q -o "$2" -- sh -c "touch $TMP/sl/ran; \"$A\" > /dev/null" ;;
    record2) "$G" record -q -o "$2" -- sh -c "\"$A\" > /dev/null; \"$A\" > /dev/null" ;; # two processes, one run
    import) "$G" import "$TMP/sl/real/s.pickle" -o "$2" ;;
    export) "$G" export --format csv "$TMP/sl/real/r.db" -o "$2" ;;
    viz) "$G" viz "$TMP/sl/real/r.db" -o "$2" ;;
  esac
}
for row in "record w.db 1" "record2 two.db 1" "import w-i.db 1" "export w.csv 0" "viz w.html 0"; do
  read -r w out isdb <<< "$row"
  wcmd $w "$TMP/sl/lnk/$out" > /dev/null 2> "$SLOUT/err"; rc=$?
  [[ $rc -eq 0 && -f sl/real/$out && ! -L sl/real/$out ]] || { cat "$SLOUT/err"; fail "$w -o into a linked directory: rc $rc, no sl/real/$out"; }
  if [[ $isdb == 1 ]]; then
    "$G" report "$TMP/sl/lnk/$out" > /dev/null 2> "$SLOUT/err" || { cat "$SLOUT/err"; fail "$w: what it wrote into a linked directory does not read"; }
  fi
  if [[ $w == record2 ]]; then # each process of the run kept its own file: none replaced the other's
    [[ $(ls sl/real/two*.db | wc -l) -eq 2 ]] || fail "record through a linked directory: a process's recording was replaced ($(ls sl/real))"
    continue
  fi
  cp "sl/real/$out" "sl/real/victim-$out" && ln -s "victim-$out" "sl/real/link-$out" || fail "victim"
  cp "sl/real/victim-$out" "$SLOUT/victim.orig"
  for at in "$TMP/sl/real/link-$out" "$TMP/sl/lnk/link-$out"; do
    rm -f sl/ran
    wcmd $w "$at" > /dev/null 2> "$SLOUT/err"; rc=$?
    [[ $rc -eq 2 ]] && grep -q "symbolic link" "$SLOUT/err" || { cat "$SLOUT/err"; fail "$w -o $at (a link): rc $rc, not refused as a link"; }
    [[ -L sl/real/link-$out ]] && cmp -s "sl/real/victim-$out" "$SLOUT/victim.orig" || fail "$w -o $at: the link or its target changed"
    [[ ! -e sl/ran ]] || fail "$w -o $at: the program ran although its database is refused"
  done
done

# a missing directory is said before the program runs
"$G" record -q -o nodir/x.db -- sh -c 'touch ran2' 2> err; rc=$?
[[ $rc -eq 2 && ! -e ran2 ]] && grep -q "directory nodir does not exist" err || fail "missing directory (rc $rc)"
# record summarises the database this run wrote, or says why there is none (never an old file)
"$G" record -o same.db -- "$A" > /dev/null 2> err || fail "first run failed"
# (a setting gpumem cannot read is refused before the program runs: cli_small_wrongs.sh)
GPUMEM_LIMIT=bogus "$G" record -o same.db -- "$A" > /dev/null 2> err; rc=$?
[[ $rc -eq 2 ]] && ! grep -q "recorded to" err || { cat err; fail "a bad setting: exit $rc, or an old file summarised"; }
GPUMEM_MODE=off "$G" record -o same.db -- "$A" > /dev/null 2> err
grep -q "recorded to" err && { cat err; fail "a run that recorded nothing summarised an old file"; }
grep -q "nothing was recorded: GPUMEM_MODE=off" err || { cat err; fail "GPUMEM_MODE=off: wrong reason"; }
# two runs with one -o at once: each summarises its own file
"$G" record -o c.db -- "$OLDPWD/$BUILD/train_gpt2_sim" --steps 40 > /dev/null 2> a.err &
for _ in $(seq 300); do [[ -s c.db ]] && break; sleep 0.01; done
"$G" record -o c.db -- "$A" > /dev/null 2> b.err
wait
grep -q "recorded to c.db;" a.err || { cat a.err; fail "the first run did not summarise c.db"; }
second=$(sed -n 's/.*recorded to \(c-[0-9]*\.db\);.*/\1/p' b.err)
[[ -n $second ]] || { cat b.err; fail "the second run did not summarise its own c-<pid>.db"; }
# and the summary's numbers are that file's: rt_app's allocations, not the trainer's
n=$("$G" sql "$second" -c "SELECT count(*) FROM events WHERE kind IN (1,3)" | tail -1)
grep -q ", $n allocations," b.err || { cat b.err; fail "the second summary does not match $second ($n allocations)"; }
# a shell wrapper forks before the program: the summary still finds the program's database
"$G" record -o 'w-%p.db' -- sh -c "\"$A\" > /dev/null; true" 2> err
grep -q "recorded to w-[0-9]*\.db" err || { cat err; fail "no summary through a shell wrapper"; }
# readers never change a recording: gpumem sql is read-only unless --write
before=$("$G" sql t.py -c "SELECT count(*) FROM events" | tail -1)
"$G" sql t.py -c "DELETE FROM events" > /dev/null 2> err; rc=$?
[[ $rc -eq 3 ]] && grep -q "read-only.*--write" err || { cat err; fail "DELETE through gpumem sql was not refused clearly (rc $rc)"; }
[[ $("$G" sql t.py -c "SELECT count(*) FROM events" | tail -1) == "$before" ]] || fail "events were deleted"
"$G" sql t.py "SELECT 1" > /dev/null 2> err; [[ $? -eq 2 ]] && grep -q "after -c" err || fail "a query without -c gets no hint"
"$G" sql --write t.py -c "UPDATE meta SET value = 'edited' WHERE key = 'hostname'" > /dev/null || fail "--write refused"
[[ $("$G" sql t.py -c "SELECT value FROM meta WHERE key = 'hostname'" | tail -1) == edited ]] || fail "--write did not write"

# readers never write a closed recording: every analysis, export and query leaves its bytes
# as they were (the symbols of its frames are resolved in memory; gpumem sql shows them through
# TEMP tables)
"$G" record -q -o ro.db -- "$A" > /dev/null 2>&1 || fail "record rt_app"
sum0=$(md5sum < ro.db)
for c in report leaks frag tune advise; do "$G" $c ro.db > /dev/null 2>&1; "$G" $c --json ro.db > /dev/null 2>&1; done
for f in csv chrome folded speedscope trace; do "$G" export --format $f ro.db > /dev/null 2>&1; done
"$G" export --format torch ro.db -o ro.pickle > /dev/null 2>&1
"$G" viz ro.db -o ro.html > /dev/null 2>&1
"$G" diff ro.db ro.db > /dev/null 2>&1
"$G" uses ro.db --id 1 > /dev/null 2>&1
fn=$("$G" sql ro.db -c "SELECT count(*) FROM stack_frames WHERE function IS NOT NULL AND python IS NOT 1" | tail -1)
[[ $(md5sum < ro.db) == "$sum0" && ! -e ro.db-wal ]] || fail "a reader changed the recording"
(( fn > 0 )) || fail "gpumem sql shows no symbolized frame"
[[ $(sqlite3 ro.db "SELECT count(*) FROM frames WHERE symbolized = 1 AND module IS NOT NULL") == 0 ]] \
  || fail "symbols were written into the recording"

# a recording this process may not write is still read by every reading command, and nothing
# is left beside it: a read-only directory (as nobody), a file it may not write in a directory it
# may (as nobody: no -wal or -shm left behind), a read-only mount (as root). Each row:
# placement, user; each command must exit 0 (leaks: 0 or 1 is its answer) and leave the
# directory's listing as it was.
# (in a directory of its own under /tmp: the scratch directory's parents are closed to nobody,
# and SQLite opens a database by its absolute path)
PUB=$(mktemp -d /tmp/gpumem-ro-XXXXXX) || fail "mktemp"
trap 'rm -rf "$TMP" "$PUB"' EXIT
chmod 755 "$PUB" && cp ro.db "$PUB/" && ROOT=$OLDPWD && cd "$PUB" || fail "no $PUB"
mkdir -p outs && chmod 777 outs
ID=$(sqlite3 ro.db "SELECT min(seq) FROM events WHERE kind = 1") # an allocation, for uses --id
AS_NOBODY="setpriv --reuid=nobody --regid=nogroup --clear-groups"
place() { # $1 placement: rodir | ro400 | romount; leaves the recording in place/r.db
  rm -rf place; mkdir place; cp ro.db place/r.db
  case $1 in
    rodir) chmod 444 place/r.db; chmod 555 place ;;
    ro400) chmod 777 place; chown nobody place/r.db; chmod 400 place/r.db ;;
  esac
}
readers() { # $1 the command prefix (a user), $2 the recording; one line per command that failed
  local run=$1 db=$2 c rc
  for c in "report $db" "report --json $db" "leaks $db" "frag $db" "tune $db" "advise $db" "uses $db --id $ID" \
           "export --format csv $db -o outs/x.csv" "viz $db -o outs/x.html" "diff $db $db" \
           "sql $db -c VALUES(1)" "report place"; do
    $run "$G" $c > outs/out 2> outs/err; rc=$?
    [[ $rc -eq 0 || ( $rc -eq 1 && $c == leaks* ) ]] || echo "gpumem $c: rc $rc: $(head -1 outs/err)"
  done
}
have_setpriv=0; [[ $(id -u) -eq 0 ]] && command -v setpriv > /dev/null && $AS_NOBODY true 2> /dev/null && have_setpriv=1
for row in "rodir nobody" "ro400 nobody" "romount root"; do
  read -r where who <<< "$row"
  if [[ $who == nobody && $have_setpriv == 0 ]]; then echo "skipped row '$row': needs root and setpriv" >&2; continue; fi
  place "$where"
  before=$(ls -a place)
  if [[ $where == romount ]]; then
    if ! unshare -m true 2> /dev/null; then echo "skipped row '$row': cannot mount here (unshare -m)" >&2; continue; fi
    bad=$(unshare -m bash -c "mount --bind place place && mount -o remount,ro,bind place place && \
          $(declare -f readers); G=$G ID=$ID; readers '' place/r.db")
  else
    bad=$(readers "$AS_NOBODY" place/r.db)
  fi
  [[ -z $bad ]] || fail "$row: a read-only recording is not read: $bad"
  [[ $(ls -a place) == "$before" ]] || fail "$row: a reader left files beside the recording: $(ls -a place | tr '\n' ' ')"
  chmod 755 place
done
cd "$TMP" && OLDPWD=$ROOT || fail "no $TMP"

# crash recovery: a killed recording is two files until a report folds the WAL in; then one
# file holds everything and can be copied alone
"$G" record -q -o killed.db -- "$OLDPWD/$BUILD/train_gpt2_sim" --steps 100000 > /dev/null 2>&1 &
for _ in $(seq 500); do [[ -s killed.db-wal && $(stat -c %s killed.db-wal) -gt 200000 ]] && break; sleep 0.01; done
pkill -9 -f "^$OLDPWD/$BUILD/train_gpt2_sim --steps 100000"; wait 2> /dev/null
[[ -e killed.db-wal ]] || fail "expected a WAL file next to the killed recording"
walsz=$(stat -c %s killed.db-wal)
# the file size the report gives counts the WAL too (a killed recording is mostly WAL)
"$G" report --json killed.db > rep1.json || fail "report --json on the killed recording failed"
(( $(jq -r .summary.db_bytes rep1.json) >= walsz )) || fail "the report's file size leaves out the WAL ($walsz bytes)"
"$G" report killed.db > rep1 || fail "report on the killed recording failed"
[[ ! -e killed.db-wal ]] || fail "the WAL was not folded into killed.db by the report"
cp killed.db elsewhere.db
"$G" report elsewhere.db > rep2 || fail "the copied file alone does not read"
grep -q "peak allocated" rep2 || fail "the copy has no report"
echo "ok: foreign files refused (record exit 2, GPUMEM_DB one line), --force replaces, own databases replaced, a link at an output's name never followed"
echo "ok: every reader follows links (at the name, in the directories, in the working directory); every writer writes into a linked directory"
echo "ok: every reader left a closed recording byte-identical; gpumem sql names its frames from memory"
