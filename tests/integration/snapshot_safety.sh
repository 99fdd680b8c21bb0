#!/usr/bin/env bash
# Data safety of the database file: gpumem never overwrites a file that is not one of its own
# databases (gpumem record -o and GPUMEM_DB alike), --force / GPUMEM_DB_FORCE=1 replace it,
# symbolic links are never followed, and an earlier recording (even one killed at once) is
# replaced without a word.
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
grep -q "recorder: t.py exists and is not a gpumem database; not overwriting it" err \
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

# a missing directory is said before the program runs
"$G" record -q -o nodir/x.db -- sh -c 'touch ran2' 2> err; rc=$?
[[ $rc -eq 2 && ! -e ran2 ]] && grep -q "directory nodir does not exist" err || fail "missing directory (rc $rc)"
echo "ok: foreign files refused (record exit 2, GPUMEM_DB one line), --force replaces, own databases replaced, symlinks never followed"
