#!/usr/bin/env bash
# "Small but wrong" (issue 38, item 11): each line a user read that was not so, checked here.
source "$(dirname "$0")/e2e_common.bash"
APP=$BUILD/tests/integration/snapshot_app
[[ -x $APP ]] || { echo "skipped: $APP is not built" >&2; exit 77; }
export GPUMEM_QUIET=1
"$GM" record -q -o "$TMP/run.db" -- "$TRAIN" --model tiny --data "$TEXT" --steps 4 -B 2 -T 32 > /dev/null 2>&1 \
  || fail "the trainer under gpumem failed"

# tune: the rows are in the order its header states (peak reserved in steps of 1% of the least,
# then driver time; a configuration passed over for its cost after those; OOMs last)
"$GM" tune "$TMP/run.db" > "$TMP/tune.txt" || fail "tune exited $?"
grep -q "ranked by peak reserved in steps of 1% of the least (closer counts as equal), then driver time;" \
  "$TMP/tune.txt" && grep -q "driver calls or more after those; those that meet an OOM last" "$TMP/tune.txt" ||
  fail "tune's header: $(grep -A1 ranked "$TMP/tune.txt")"
"$GM" tune --json "$TMP/run.db" | jq -e '
  (.results | map(select(.oom | not)) | map(.peak_reserved) | min) as $least | ($least / 100 | floor) as $q |
  [.results[] | [(if .oom then 1 else 0 end), (if .not_recommended then 1 else 0 end),
                 (if $q > 0 and .peak_reserved > $least then ((.peak_reserved - $least) / $q | floor) else 0 end), .driver_time_s]] as $k |
  [range(1; $k | length) | select($k[. - 1] > $k[.])] | length == 0' > /dev/null || fail "tune's rows are not in the header's order"
ok "tune: the header states the order the rows are in"

# diff against an imported snapshot with no steps (as PyTorch's own snapshots mostly are): no
# per-step change invented from 0 steps. gpumem's own pickles carry their `step N` ranges, which
# import restores, so the snapshot is written here: four 1 MiB blocks, one freed, no frames.
python3 - "$TMP/run.pickle" <<'PY' || fail "writing the step-less snapshot"
import pickle, sys
trace = [{"action": "alloc", "addr": 0x7f0000000000 + i * 2**20, "size": 2**20, "stream": 0,
          "time_us": i, "frames": []} for i in range(4)]
trace.append({"action": "free_completed", "addr": 0x7f0000000000, "size": 2**20, "stream": 0,
              "time_us": 10, "frames": []})
pickle.dump({"segments": [], "device_traces": [trace]}, open(sys.argv[1], "wb"))
PY
"$GM" import "$TMP/run.pickle" -o "$TMP/imp.db" > /dev/null || fail "import"
"$GM" diff "$TMP/imp.db" "$TMP/run.db" > "$TMP/diff.txt" || fail "diff exited $?"
grep -Eq '^  allocations/step +- +[0-9.]+ +- +n/a$' "$TMP/diff.txt" || fail "diff's per-step row: $(grep step "$TMP/diff.txt")"
"$GM" diff --json "$TMP/imp.db" "$TMP/run.db" | jq -e '.a.allocations_per_step == null and .delta.allocations_per_step == null' > /dev/null \
  || fail "diff --json per step"
! "$GM" diff --help | grepq '%%' || fail "diff --help prints %%"
ok "diff: no per-step figure without steps; --help says PCT%"

# export --format torch to a terminal: refused, it is binary
if command -v script > /dev/null; then
  script -qc "$GM export --format torch $TMP/run.db" /dev/null > "$TMP/tty.txt" 2>&1
  grep -q "binary pickle: give -o FILE" "$TMP/tty.txt" || fail "export torch to a terminal: $(head -c 200 "$TMP/tty.txt")"
  ok "export --format torch refuses a terminal"
  # advise on a terminal says how far its replays are, on stderr only: --json's stdout stays
  # JSON, and without a terminal nothing is said
  script -qc "$GM advise --json $TMP/run.db > $TMP/adv.json" /dev/null > "$TMP/adv.tty" 2>&1
  grep -Eq 'gpumem advise: [0-9]+ of [0-9]+ replays' "$TMP/adv.tty" || fail "advise's progress on a terminal: $(head -c 200 "$TMP/adv.tty")"
  jq -e .baseline.peak_reserved "$TMP/adv.json" > /dev/null || fail "advise --json on a terminal: not JSON: $(head -c 200 "$TMP/adv.json")"
  "$GM" advise --json "$TMP/run.db" > /dev/null 2> "$TMP/adv.err" || fail "advise --json exited $?"
  [[ ! -s $TMP/adv.err ]] || fail "advise said on stderr without a terminal: $(head -c 200 "$TMP/adv.err")"
  ok "advise: a progress line on a terminal's stderr alone"
fi

# a recording without allocations: said as such, and every analysis exits 0 on it
GPUMEM_DB=$TMP/empty.db "$APP" empty || fail "snapshot_app empty"
"$GM" report "$TMP/empty.db" > "$TMP/e.txt" || fail "report on an empty recording"
grep -q "peak reserved       0 B (the recording holds no allocation)" "$TMP/e.txt" || fail "empty: $(grep 'peak reserved' "$TMP/e.txt")"
! grep -q "straight to the driver" "$TMP/e.txt" || fail "an empty recording's allocations 'went straight to the driver'"
for c in frag tune advise leaks; do
  "$GM" $c "$TMP/empty.db" > "$TMP/e.txt" 2>&1 || fail "$c on an empty recording exited $?: $(cat "$TMP/e.txt")"
done
"$GM" tune "$TMP/empty.db" | grepq "nothing to tune: the recording holds no allocation" || fail "tune on an empty recording"
ok "an empty recording: no allocation said so; report, frag, tune, advise, leaks exit 0"

# a database cut short: every reader refuses it, and says what to do
cp "$TMP/run.db" "$TMP/cut.db"
pages=$(( $(stat -c %s "$TMP/cut.db") / 8192 ))
truncate -s $(( (pages * 99 / 100) * 8192 )) "$TMP/cut.db"
for c in report frag tune advise; do
  rc=0; "$GM" $c "$TMP/cut.db" > /dev/null 2> "$TMP/err.txt" || rc=$?
  [[ $rc == 3 ]] && grep -q "is cut short: its header says .* pages .*Copy it again" "$TMP/err.txt" \
    || fail "$c on a file cut to 99%: exit $rc, $(cat "$TMP/err.txt")"
done
ok "a file cut short: refused by every reader, with what to do"

# shorter than its header, but a checkpoint stopped midway (a full disk: fault_campaign.sh met
# it): page 1 is in the file, the pages after the file's end are in the write-ahead log, which
# SQLite reads them from. Made by hand: a copy of a database and its log taken before the
# checkpoint, then the log's last page 1 written over the file's (what the checkpoint did first).
python3 - "$TMP/midck.db" <<'PY'
import shutil, sqlite3, struct, sys
db = sys.argv[1]
c = sqlite3.connect(db, isolation_level=None)
c.execute("PRAGMA page_size=8192"); c.execute("PRAGMA journal_mode=WAL"); c.execute("PRAGMA wal_autocheckpoint=0")
c.execute("CREATE TABLE t(x)")
c.executemany("INSERT INTO t VALUES (randomblob(1000))", [()] * 200)
c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
c.executemany("INSERT INTO t VALUES (randomblob(1000))", [()] * 400)
shutil.copy(db, db + ".copy"); shutil.copy(db + "-wal", db + ".copy-wal")
c.close()
wal = open(db + ".copy-wal", "rb").read()
psz, page1, off = struct.unpack(">I", wal[8:12])[0], None, 32
while off + 24 + psz <= len(wal):
    if struct.unpack(">I", wal[off:off + 4])[0] == 1: page1 = wal[off + 24:off + 24 + psz]
    off += 24 + psz
with open(db + ".copy", "r+b") as f: f.write(page1)
PY
mv "$TMP/midck.db.copy" "$TMP/midck2.db" && mv "$TMP/midck.db.copy-wal" "$TMP/midck2.db-wal"
rc=0; "$GM" report "$TMP/midck2.db" > /dev/null 2> "$TMP/err.txt" || rc=$?
n=$(sqlite3 "$TMP/midck2.db" "SELECT count(*) FROM t" 2>&1) # after: its close checkpoints the log
[[ $n == 600 ]] && ! grep -q "is cut short" "$TMP/err.txt" \
  && ok "shorter than its header with the pages in its write-ahead log: not called cut short (SQLite reads $n rows)" \
  || fail "a checkpoint stopped midway: sqlite3 reads '$n' rows; gpumem: exit $rc, $(head -2 "$TMP/err.txt")"

# import: numbers no device has are refused, nothing written
python3 - "$TMP" <<'EOF'
import copy, pickle, sys
d = {"segments": [{"device": 0, "address": 1 << 40, "total_size": 2 << 20, "stream": 0, "segment_type": "large",
                   "blocks": [{"address": 1 << 40, "size": 1 << 20, "requested_size": 1 << 20,
                               "state": "active_allocated", "frames": []},
                              {"address": (1 << 40) + (1 << 20), "size": 1 << 20, "state": "inactive", "frames": []}]}],
     "device_traces": [[{"action": "alloc", "addr": 1 << 40, "size": 1 << 20, "stream": 0, "time_us": 1, "frames": []}]]}
def w(name, f):
    x = copy.deepcopy(d); f(x); pickle.dump(x, open(f"{sys.argv[1]}/{name}.pickle", "wb"), protocol=2)
w("ok", lambda x: None)
w("addr", lambda x: x["segments"][0].__setitem__("address", -1))
w("total", lambda x: x["segments"][0].__setitem__("total_size", 2 ** 70))
w("block", lambda x: x["segments"][0]["blocks"][0].__setitem__("size", -5))
w("trace", lambda x: x["device_traces"][0][0].__setitem__("addr", -1))
EOF
"$GM" import "$TMP/ok.pickle" -o "$TMP/ok.db" > /dev/null || fail "a plain snapshot did not import"
for b in addr total block trace; do
  rc=0; "$GM" import "$TMP/$b.pickle" -o "$TMP/$b.db" > /dev/null 2> "$TMP/err.txt" || rc=$?
  [[ $rc == 3 && ! -e $TMP/$b.db ]] && grep -q "not a memory snapshot a device can have" "$TMP/err.txt" \
    || fail "import of $b: exit $rc, $(cat "$TMP/err.txt")"
done
ok "import refuses address -1, total_size 2**70, a block of size -5, a trace address -1"

# the README's mpirun examples run as root too
bad=$(grep -hE '^(mpirun|.*\| *mpirun) ' README.md train/README.md | grep -v -- '--allow-run-as-root' || true)
[[ -z $bad ]] || fail "mpirun examples that fail as root: $bad"
ok "README mpirun examples carry --allow-run-as-root"

# settings: one rule, one parser. Every GPUMEM_* setting with a value gpumem cannot read — a
# word, a negative number (strtoull wraps "-5" around: "no limit"), characters after a number, a
# number too large, a number out of range — is refused by `gpumem record` before the program
# starts (exit 2, no database, the program not run) with the very message libgpumem.so gives
# when preloaded without `gpumem record` (then the program runs, gpumem off): the same text
# from one parser. 0 is no limit.
bad_settings=(
  GPUMEM_CONF=max_split_size_mb:abc GPUMEM_CONF=garbage GPUMEM_CONF=bogus_key:1 GPUMEM_CONF=preset:nonsense
  GPUMEM_CONF=max_split_size_mb:-5 GPUMEM_CONF=max_split_size_mb:-1 GPUMEM_CONF=max_split_size_mb:-20
  GPUMEM_CONF=max_split_size_mb:128abc GPUMEM_CONF=max_split_size_mb:99999999999999999999
  GPUMEM_CONF=max_non_split_rounding_mb:-5 GPUMEM_CONF=large_segment_size_mb:-1 GPUMEM_CONF=large_segment_size_mb:40x
  GPUMEM_CONF=roundup_power2_divisions:4abc GPUMEM_CONF=roundup_power2_divisions:-4
  "GPUMEM_CONF=roundup_power2_divisions:[256:-2]" "GPUMEM_CONF=roundup_power2_divisions:[-256:2]"
  GPUMEM_CONF=garbage_collection_threshold:0.6abc GPUMEM_CONF=garbage_collection_threshold:-0.5
  GPUMEM_CONF=per_process_memory_fraction:0.5x GPUMEM_CONF=pinned_num_register_threads:-4
  GPUMEM_CONF=pinned_reserve_segment_size_mb:-1 GPUMEM_CONF=pinned_max_cached_size_mb:1x
  GPUMEM_CONF=pinned_max_round_threshold_mb:-3 GPUMEM_CONF=handle_size:-2M GPUMEM_CONF=handle_size_small:2Mx
  GPUMEM_CONF=release_threshold:-1 GPUMEM_CONF=limit:-1 GPUMEM_CONF=limit:99999999999999999999T
  GPUMEM_MODE=garbage GPUMEM_USES=often GPUMEM_PYTHON=yes GPUMEM_FORK=garbage GPUMEM_RING_FULL=garbage
  GPUMEM_LIMIT=lots GPUMEM_LIMIT=-5 GPUMEM_LIMIT=1Gx GPUMEM_LIMIT=99999999999999999999
  GPUMEM_STACKS=deep GPUMEM_STACKS=-5 GPUMEM_STACKS=16x GPUMEM_STACKS=99999999999999999999 GPUMEM_STACKS=65
  GPUMEM_RING=big GPUMEM_RING=-1 GPUMEM_RING_WAIT_US=-5 GPUMEM_RING_WAIT_US=5us
  GPUMEM_QUIET=-1 GPUMEM_TSC=1x GPUMEM_NAMES=+1 GPUMEM_NVTX=" 1" GPUMEM_SIGNALS=2
  GPUMEM_TORCH_MAX_ENTRIES=-5 GPUMEM_TORCH_MAX_ENTRIES=10k
)
for e in "${bad_settings[@]}"; do
  var=${e%%=*}
  rm -f "$TMP/set.db" "$TMP/started"
  rc=0; env "$e" "$GM" record -o "$TMP/set.db" -- sh -c "touch '$TMP/started'" > /dev/null 2> "$TMP/err.txt" || rc=$?
  [[ $rc == 2 && ! -e $TMP/set.db && ! -e $TMP/started && $(wc -l < "$TMP/err.txt") == 1 ]] \
    || fail "gpumem record with $e: exit $rc (want 2), db $([[ -e $TMP/set.db ]] && echo left || echo none), program $([[ -e $TMP/started ]] && echo started || echo 'not started'): $(cat "$TMP/err.txt")"
  said=$(sed -n "s/^gpumem record: \($var.*\); fix or unset it (the program was not started)\$/\1/p" "$TMP/err.txt")
  [[ -n $said ]] || fail "gpumem record with $e: $(cat "$TMP/err.txt")"
  # preloaded without gpumem record: the program runs, gpumem is off, the same words
  rc=0; env "$e" GPUMEM_DB="$TMP/pre.db" LD_PRELOAD="$BUILD/libgpumem.so" "$TRAIN" --model tiny --steps 1 -B 2 -T 32 \
    > /dev/null 2> "$TMP/pre.txt" || rc=$?
  [[ $rc == 0 && ! -e $TMP/pre.db ]] || fail "preloaded with $e: exit $rc, $(cat "$TMP/pre.txt")"
  grep -qxF "gpumem: $said; gpumem is off" "$TMP/pre.txt" \
    || fail "preloaded with $e, libgpumem.so says: $(cat "$TMP/pre.txt") -- gpumem record said: $said"
done
for e in GPUMEM_LIMIT=none GPUMEM_CONF=max_split_size_mb:20 GPUMEM_CONF=max_split_size_mb:+40 GPUMEM_STACKS=0; do
  rc=0; env "$e" "$GM" record -o "$TMP/set.db" --force -- "$TRAIN" --model tiny --steps 1 > /dev/null 2> "$TMP/err.txt" || rc=$?
  [[ $rc == 0 ]] && ! grep -q "bad \|not a number" "$TMP/err.txt" && grep -q "recorded to" "$TMP/err.txt" || fail "$e: $(cat "$TMP/err.txt")"
done
ok "${#bad_settings[@]} bad settings refused by gpumem record (exit 2, nothing run) with libgpumem.so's own words; GPUMEM_LIMIT=none, max_split_size_mb:20 and :+40 accepted"

# -o naming a gpumem database this user cannot write: refused before the program runs (exit 2),
# as a missing or read-only directory is
if command -v setpriv > /dev/null && [[ $(id -u) == 0 ]]; then
  # a directory the other user owns and reaches (the tests' own are private to root)
  ro=$(mktemp -d /tmp/gpumem-ro.XXXXXX) && chmod 755 "$ro"
  trap 'rm -rf "$TMP" "$ro"' EXIT
  cp "$TMP/run.db" "$ro/ro.db" && chown -R nobody "$ro" && chmod 400 "$ro/ro.db"
  rc=0; setpriv --reuid=nobody --regid=nogroup --clear-groups "$GM" record -o "$ro/ro.db" -- sh -c "touch '$ro/started'" \
    > /dev/null 2> "$TMP/err.txt" || rc=$?
  [[ $rc == 2 && ! -e $ro/started ]] && grep -q "^gpumem: -o $ro/ro.db: cannot write it: Permission denied" "$TMP/err.txt" \
    || fail "-o onto a database the user cannot write: exit $rc, $(cat "$TMP/err.txt")"
  cmp -s "$TMP/run.db" "$ro/ro.db" || fail "the database the user cannot write was changed"
  ok "-o onto a gpumem database the user cannot write: exit 2 before the program runs"
else
  echo "skipped: -o onto an unwritable database (needs root and setpriv to become another user)"
fi

# every option that takes a value, in every command: a missing value, or an option in its place
# (the "--" before the command, the next option) is a usage error that names the option, and no
# file is made under the option's name
cp "$TMP/run.pickle" "$TMP/in.pickle"
value_cases=(
  "record -o -- true" "record -o" "record --allocator -- true" "record -q -o -q -- true"
  "report run.db --top --json" "report run.db --frames --json" "report run.db --top"
  "leaks run.db --top --json" "leaks run.db --frames -- " "report run.db run.db --top --json"
  "export --format trace run.db -o --force" "export --format trace run.db -o --" "export --format trace run.db -o"
  "export --format --json run.db" "export --format folded --what --force run.db" "export --format torch run.db --at -o x"
  "sql run.db -c --write" "sql run.db -c"
  "uses run.db --name --json" "uses run.db --id --json" "uses run.db --name x --top --json"
  "advise run.db --budget --json" "advise run.db --gpu --json" "advise run.db --ranks --json"
  "diff run.db run.db --top --json" "diff run.db run.db --fail-if-peak-grows --json" "diff run.db run.db --frames --json"
  "frag run.db --top --json" "tune run.db --objective --json" "tune run.db --limit --json" "tune run.db --top --json"
  "viz run.db -o --with" "viz run.db -o v.html --with --force" "viz run.db -o"
  "import in.pickle -o --force" "import in.pickle -o --"
  "flamegraph --title --width" "flamegraph --countname"
  "report run.db --device --json" "leaks run.db --device" "report run.db run.db --device --json"
  "frag run.db --device --json" "tune run.db --device --json" "advise run.db --device --json"
  "viz run.db -o v.html --device --force" "export --format trace run.db --device -o x" "diff run.db run.db --device --json"
)
gm_abs=$(realpath "$GM")
for c in "${value_cases[@]}"; do
  rc=0; (cd "$TMP" && "$gm_abs" $c < /dev/null > /dev/null 2> "$TMP/err.txt") || rc=$?
  [[ $rc == 2 ]] && grep -q "needs\|takes\|accepts" "$TMP/err.txt" || fail "gpumem $c: exit $rc, $(head -2 "$TMP/err.txt")"
  for made in -- --force --json --with --write -q; do
    [[ ! -e $TMP/$made ]] || fail "gpumem $c made a file named '$made'"
  done
done
ok "${#value_cases[@]} options without their value, or with an option in its place: exit 2, no file named after an option"

# usage errors: the error and one line pointing at --help, never the whole help
for c in "report --bogus" "leaks --bogus" "uses" "export $TMP/run.db" "sql" "advise --bogus" "diff $TMP/run.db" \
         "frag --bogus" "tune --bogus" "import" "viz $TMP/run.db --bogus" "record --bogus"; do
  rc=0; "$GM" $c > /dev/null 2> "$TMP/err.txt" || rc=$?
  cmd=${c%% *}
  [[ $rc == 2 && $(wc -l < "$TMP/err.txt") == 2 ]] && tail -1 "$TMP/err.txt" | grepq -x "(gpumem $cmd --help tells more)" \
    || fail "gpumem $c: exit $rc, $(cat "$TMP/err.txt")"
done
rc=0; "$GM" viz "$TMP/run.db" -o "$TMP/v.html" --with > /dev/null 2> "$TMP/err.txt" || rc=$?
[[ $rc == 2 ]] && grep -q "^gpumem viz: --with needs a list of analyses" "$TMP/err.txt" || fail "viz --with: $(cat "$TMP/err.txt")"
ok "usage errors: two lines, the error and where the help is; viz --with without a list says so"

# a dry run computes no loss: it prints none (not nan)
"$TRAIN" --model tiny --steps 2 --dry-run > "$TMP/dry.txt" || fail "dry run"
grep -q "^step 1/2 loss - " "$TMP/dry.txt" && ! grep -qi nan "$TMP/dry.txt" || fail "dry run: $(grep ^step "$TMP/dry.txt")"
ok "dry runs print 'loss -'"

# plurals: one rank, one segment
mkdir -p "$TMP/one" && cp "$TMP/run.db" "$TMP/one/run.db"
"$GM" report "$TMP/one" | sed -n 1p | grepq "^gpumem report: 1 rank\( \|$\)" || fail "one rank: $("$GM" report "$TMP/one" | head -1)"
"$GM" advise "$TMP/run.db" --ranks 1 | grepq "^ZeRO across 1 rank:" || fail "advise --ranks 1: $("$GM" advise "$TMP/run.db" --ranks 1 | grep ZeRO | head -1)"
"$GM" viz "$TMP/run.db" -o "$TMP/v.html" || fail "viz"
# the segment map's heading: one segment singular, and its moment said against the red dot's
grep -q 'segments.length === 1 ? "" : "s"' "$TMP/v.html" && grep -q 'not at the red dot (seq ' "$TMP/v.html" \
  || fail "the page's segment map heading"
sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/v.html" | jq -e '.snapshots[0].reason == "peak" and .summary.peak_allocated_seq > 0' > /dev/null \
  || fail "the page's data"
ok "1 rank, 1 segment; the segment map says it is the reserved peak's snapshot, the red dot the allocated peak"

# standard output that cannot be written (/dev/full stands for a full disk): every command that
# prints says so and exits 3, never 0 with a cut-off report (one rule, at the dispatcher's exit)
cp "$TMP/run.db" "$TMP/run2.db"
# a command template's DB, DB2 and @T@ as the paths: through placeholders, since $TMP's own
# random name may hold "DB"
dbs() { local a=${1//DB2/@R2@}; a=${a//DB/@R@}; a=${a//@R2@/$TMP/run2.db}; a=${a//@R@/$TMP/run.db}; echo "${a//@T@/$TMP}"; }
printf 'a;b 10\na;c 5\n' > "$TMP/in.folded"
for c in "report DB" "report --json DB" "leaks DB" "leaks --json --fail-on-leak DB" "frag DB" "frag --json DB" \
         "tune DB" "tune --json DB" "advise DB" "advise --json DB" "uses DB --name *" "uses --json DB --name *" \
         "diff DB DB2" "diff --json DB DB2" "sql DB -c SELECT*FROM(events)" "report DB DB2" "report --json DB DB2" \
         "--help" "report --help" "advise --help" "export --format csv DB" "viz DB -o -" "flamegraph"; do
  args=$(dbs "$c")
  rc=0; set -f; "$GM" $args < "$TMP/in.folded" > /dev/full 2> "$TMP/err.txt" || rc=$?; set +f
  [[ $rc == 3 ]] && grepq "^gpumem\( [a-z]*\)\?: writing standard output failed: \(No space left on device\|what was printed is cut short\)$" "$TMP/err.txt" \
    || fail "gpumem $c > /dev/full: exit $rc, $(tail -2 "$TMP/err.txt")"
done
ok "standard output full: every command says so and exits 3"

# option values: one parser (gm_args.c) for every number; what strtol/strtod would bend (a sign
# that wraps, trailing bytes, inf, nan, 1e308, a long cut to int, 23 digits) is a usage error
# naming the option, in every command
for c in "frag DB --top 4294967297" "tune DB --top 2147483648" "report DB --top 1000001" "leaks DB --top 0" \
         "advise DB --top 4294967297" "uses DB --name * --top -1" "diff DB DB2 --top 2147483648" \
         "report DB DB2 --top 4294967297" "frag DB --top 5x" "tune DB --top ' 3'" \
         "advise DB --link inf" "advise DB --link 1e308" "advise DB --link nan" "advise DB --link 25x" \
         "advise DB --link -5" "advise DB --link 0x10" "advise DB --ranks -1" "advise DB --ranks 4294967298" \
         "advise DB --ranks 2 --prefetch -1" "advise DB --budget 1.5e999G" "advise DB --try '--accum -1'" \
         "diff DB DB2 --fail-if-peak-grows nan" "diff DB DB2 --fail-if-peak-grows inf" "diff DB DB2 --fail-if-peak-grows -1" \
         "uses DB --id 99999999999999999999" "uses DB --id -5" "uses DB --name * --step 1e3" \
         "export --format torch DB -o @T@/x.pickle --at 99999999" \
         "export --format torch DB -o @T@/x.pickle --at 12345678901234567890123" \
         "export --format torch DB -o @T@/x.pickle --at -1"; do
  args=$(dbs "$c")
  rc=0; set -f; eval "\"$GM\" $args" > /dev/null 2> "$TMP/err.txt" || rc=$?; set +f
  opt=$(grep -o -- '--[a-z-]*' <<< "$c" | tail -1); [[ $c == *"--try"* ]] && opt=--try
  [[ $rc == 2 ]] && head -1 "$TMP/err.txt" | grepq -- "$opt" || fail "gpumem $c: exit $rc, $(head -2 "$TMP/err.txt")"
done
rc=0; "$GM" export --format torch "$TMP/run.db" -o "$TMP/x.pickle" --at 99999999 2> "$TMP/err.txt" || rc=$?
last=$("$GM" sql "$TMP/run.db" -c 'SELECT max(seq) FROM events' | tail -1)
grepq "past the recording's last event (seq $last)" "$TMP/err.txt" || fail "--at past the end: $(cat "$TMP/err.txt")"
rc=0; printf 'a;b 10\n' | "$GM" flamegraph --width inf > /dev/null 2> "$TMP/err.txt" || rc=$?
[[ $rc == 2 ]] || fail "flamegraph --width inf: exit $rc"
"$GM" advise "$TMP/run.db" --link 25 --json | python3 -c 'import json,sys; json.load(sys.stdin, parse_constant=lambda c: sys.exit("not JSON: " + c))' \
  || fail "advise --link 25 --json"
ok "numbers in options: signs, suffixes, inf, nan, overflow and truncation refused in every command"

# flamegraph: counts strtoull would bend (a '-' wraps to 2^64-10, 26 digits saturate) and sums
# past 2^64-1 (the root smaller than its children) are refused, naming the line
for input in 'a;b -10' 'a;b 99999999999999999999999999' $'a;b 5\na;b 18446744073709551615' \
             $'x 1\na;b 18446744073709551614\na;c 1'; do
  rc=0; printf '%s\n' "$input" | "$GM" flamegraph > "$TMP/f.svg" 2> "$TMP/err.txt" || rc=$?
  n=$(printf '%s\n' "$input" | wc -l)
  [[ $rc == 2 ]] && grepq "^gpumem flamegraph: line $n: " "$TMP/err.txt" || fail "flamegraph on '$input': exit $rc, $(cat "$TMP/err.txt")"
done
printf 'a;b 18446744073709551614\na;c 1\n' | "$GM" flamegraph | grepq "total 18446744073709551615 bytes" || fail "flamegraph at 2^64-1"
ok "flamegraph: negative, oversized and overflowing counts refused with the line's number"

# options that conflict or would be ignored are refused, never silently dropped: advise's
# single-rank what-ifs with --ranks, one database given twice as two ranks (report and viz), an
# empty or mixed --with, an option given twice with two values (the same value twice is fine)
for c in "advise DB --ranks 2 --try '--accum 2'" "advise DB --ranks 2 --oom-step" "advise DB --ranks 2 --link 5" \
         "advise DB --ranks 2 --gpu A100" "advise DB --ranks 2 --top 3" "report DB DB" "viz DB DB -o @T@/x.html" "viz DB -o @T@/x.html --with ''" \
         "viz DB -o @T@/x.html --with none,frag" "viz DB -o @T@/x.html --with , " "viz DB -o @T@/x.html --with frag --with tune" \
         "viz DB -o @T@/x.html -o @T@/y.html" "export --format csv --format trace DB" "export --format=csv --format trace DB" \
         "export --format csv DB -o @T@/a.csv -o @T@/b.csv" "export --format folded --what peak --what total DB" \
         "export --format torch DB -o @T@/x.pickle --at end --at peak" "export --format folded --view torch --view device DB" \
         "export --format folded --view tensors DB" "export --format trace --view device DB" "export --format torch --view torch DB -o @T@/x.pickle"; do
  args=$(dbs "$c")
  rc=0; eval "\"$GM\" $args" > /dev/null 2> "$TMP/err.txt" || rc=$?
  [[ $rc == 2 && $(wc -l < "$TMP/err.txt") == 2 ]] || fail "gpumem $c: exit $rc, $(cat "$TMP/err.txt")"
done
"$GM" export --format csv --format csv "$TMP/run.db" > /dev/null || fail "the same --format twice"
# --view torch of a recording without PyTorch's history: what is wrong, then that the file was
# kept; exit 2
echo keep > "$TMP/v.folded"
rc=0; "$GM" export --format folded --view torch "$TMP/run.db" -o "$TMP/v.folded" --force 2> "$TMP/err.txt" || rc=$?
[[ $rc == 2 && $(cat "$TMP/v.folded") == keep ]] && grepq "^gpumem export: --view torch: .* has no PyTorch memory history" "$TMP/err.txt" \
  && grepq "^gpumem export: .*v.folded is left as it was$" "$TMP/err.txt" \
  || fail "export --view torch of the trainer's run: exit $rc, $(cat "$TMP/err.txt")"
"$GM" advise "$TMP/run.db" --ranks 2 --budget 1T > /dev/null || fail "advise --ranks 2 --budget (ZeRO's budget search) exited $?"
ok "conflicting and ignored options refused: advise --ranks with --try/--oom-step/--link/--gpu/--top, a database twice, --with, repeated options"

# an option given twice with two values, in every command (one rule, gm_args.c's
# gm_args_repeats, README "User guide"): exit 2, one line naming the option and both values,
# nothing run or written; every option that takes a value, each spelling (--top=3, -f) included.
# The same value twice, or a flag twice, is accepted.
for c in "record -o @T@/r1.db -o @T@/r2.db -- touch @T@/ran" "record --allocator torch --allocator=gpumem -- touch @T@/ran" \
         "report DB --top 3 --top 5" "report DB --top=3 --top 5" "report DB --frames user --frames all" \
         "report DB DB2 --top 3 --top 5" "report DB DB2 --frames all --frames=user" \
         "leaks DB --top 3 --top 5" "leaks DB --frames all --frames user" \
         "sql DB -c 'SELECT 1' -c 'SELECT 2'" \
         "export --format csv -f trace DB" "export --format csv DB --what peak --what=total" \
         "export --format torch DB -o @T@/x1.pickle -o @T@/x2.pickle" "export --format torch DB -o @T@/x1.pickle --at end --at=peak" \
         "uses DB --name a --name b" "uses DB --id 1 --id 2" "uses DB --name * --step 1 --step 2" "uses DB --name * --top 1 --top=2" \
         "import @T@/run.pickle -o @T@/i1.db -o @T@/i2.db" \
         "flamegraph --countname bytes --countname B" "flamegraph --title a --title b" "flamegraph --width 800 --width 900" \
         "diff DB DB2 --top 3 --top 5" "diff DB DB2 --frames user --frames all" "diff DB DB2 --fail-if-peak-grows 5 --fail-if-peak-grows 10" \
         "advise DB --budget 1G --budget 2G" "advise DB --link 5 --link 25" "advise DB --gpu H100 --gpu A100" \
         "advise DB --try '--accum 2' --try '--accum 4'" "advise DB --ranks 2 --ranks 4" "advise DB --ranks 2 --zero 1 --zero 2" \
         "advise DB --ranks 2 --prefetch 1 --prefetch 2" "advise DB --top 3 --top 5" \
         "frag DB --top 3 --top 5" "tune DB --objective reserved --objective time" "tune DB --limit 1G --limit 2G" \
         "tune DB --top 3 --top 5" "viz DB -o @T@/v1.html -o @T@/v2.html" "viz DB -o @T@/v1.html --with frag --with tune" \
         "report DB --device 0 --device 1" "report DB DB2 --device=0 --device 1" "leaks DB --device 0 --device=1" \
         "frag DB --device 0 --device 1" "tune DB --device 0 --device 1" "advise DB --device 0 --device 1" \
         "viz DB -o @T@/v1.html --device 0 --device 1" "export --format trace DB --device 0 --device 1" \
         "diff DB DB2 --device 0 --device 1"; do
  args=$(dbs "$c")
  rc=0; set -f; eval "\"$GM\" $args" < "$TMP/in.folded" > "$TMP/out.txt" 2> "$TMP/err.txt" || rc=$?; set +f
  opt=$(sed -n 's/^gpumem [a-z]*: \(-[-a-z]*\) given twice, as .* and .*: give it once$/\1/p' "$TMP/err.txt")
  [[ $rc == 2 && $(wc -l < "$TMP/err.txt") == 2 && -n $opt && $c == *" $opt"* && ! -s $TMP/out.txt ]] \
    || fail "gpumem $c: exit $rc, $(cat "$TMP/err.txt")"
done
left=$(cd "$TMP" && ls ran r1.db r2.db x1.pickle x2.pickle i1.db i2.db v1.html v2.html 2> /dev/null || true)
[[ -z $left ]] || fail "an option given twice still ran or wrote: $left"
for c in "report DB --top 3 --top=3" "leaks --json --json DB" "frag DB --json --json --top 2 --top 2" \
         "export --format csv -f csv DB" "uses DB --name * --name *"; do
  args=$(dbs "$c")
  rc=0; set -f; eval "\"$GM\" $args" > /dev/null 2> "$TMP/err.txt" || rc=$?; set +f
  [[ $rc == 0 ]] || fail "gpumem $c (the same thing twice): exit $rc, $(cat "$TMP/err.txt")"
done
ok "an option given twice with two values: refused in every command (exit 2, nothing run or written); the same value or a flag twice accepted"

# Every JSON a command writes is strict JSON (no inf, nan, or cut numbers), on a trainer's run,
# an empty recording and an imported step-less snapshot: a ratio over nothing, a share of 0
# bytes, a rate over no time are where a non-finite number comes from. Python's parser refuses
# NaN and Infinity here (parse_constant).
strict='import json, sys
def no(c): raise ValueError("non-finite number " + c)
json.loads(sys.stdin.read(), parse_constant=no)'
nj=0
for db in run empty imp; do
  d=$TMP/$db.db o=$TMP/run.db
  [[ $db == run ]] && o=$TMP/imp.db
  for c in "report --json @D@" "leaks --json @D@" "frag --json @D@" "tune --json @D@" "advise --json @D@" \
           "diff --json @D@ @O@" "report --json @D@ @O@" "export --format chrome @D@" "export --format speedscope @D@" \
           "uses --json @D@ --id 1"; do
    c=${c//@O@/$o}
    rc=0; out=$(eval "\"$GM\" ${c//@D@/$d}" 2> "$TMP/err.txt") || rc=$?
    [[ $rc == 0 || ($c == uses* && $rc == 1) ]] || { fail "gpumem ${c//@D@/$db.db}: exit $rc, $(head -2 "$TMP/err.txt")"; continue; }
    [[ -z $out && $c == uses* ]] && continue
    python3 -c "$strict" <<< "$out" 2> "$TMP/err.txt" || fail "gpumem ${c//@D@/$db.db}: not strict JSON: $(tail -1 "$TMP/err.txt")"
    nj=$((nj + 1))
  done
done
ok "strict JSON from every --json command and JSON export ($nj outputs) on a run, an empty recording and an import"
# documented keys are present whatever the options and the recording (null where they do not
# apply): every --json command, on the trainer's run, an empty recording and an imported PyTorch
# snapshot, with and without the options that add keys. "COMMAND|OBJECT|keys|DOC": OBJECT the jq
# path of the object checked (skipped where it is null: frag's at_peak of an empty recording),
# keys as listed in DOC. The docs write the contracts as annotated pseudo-JSON and prose, not in
# a form a script can read, so the one list is here; each key is looked for in DOC, so a key
# the docs drop fails here too. Once missing: tune's keys on an empty recording, frag's
# fragmentation at the peak, advise's budget and check keys without --budget/--check, diff's
# gate, frag's and tune's check (and tune's torch.check) without --check.
# (--check re-runs the program: covered where each command's check is, not here.)
R=snapshot/README.md A=snapshot/analyze/ADVISE.md
keys="report --json @D@|.|database schema complete damaged state failure summary peak peak_allocated_at peak_requested_at ooms bad_accesses graphs idle_at_peak device_used categories_at_peak category_source categories torch torch_compile|$R
report --json @D@ @O@|.|ranks imbalance peak_rank peak_rank_reason timeline|$R
leaks --json @D@|.|database complete damaged dropped_events leaked_bytes leaked_held_bytes leaked_allocations leaks by_phase by_name steps growth_per_step growth_over judgeable grows kept_beyond_steps host_cache host_held torch_workspaces cublas_handles|$R
report --json @D@|.summary|host_allocations host_bytes peak_host_bytes host_cache_bytes host_cache_blocks host_held_bytes host_held_blocks torch_workspace_bytes torch_workspace_blocks cublas_handle_bytes cublas_handle_blocks|$R
uses --json @D@ --name '*'|.|database uses tracking launches_unread pattern id step matched shown allocations|$R
diff --json @D@ @O@|.|a b delta classes sites gate|$R
diff --json @D@ @O@ --fail-if-peak-grows 5|.|a b delta classes sites gate|$R
frag --json @D@|.|database recorded timeline_by timeline at_peak ooms fixes recommended torch check|$R
frag --json @D@|.recorded|conf pytorch_conf peak_reserved replayed_peak_reserved replay_oom peak_reset|$R
frag --json @D@|.at_peak|seq device requested allocated reserved free_cached largest_free segments free_blocks attributed_pct causes request fragmentation histogram pools pinned_by|$R
tune --json @D@|.|database recorded objective limit events seconds results recommended recorded_is_best check runaway_growth torch note|$R
tune --json @D@|.recorded|conf pytorch_conf peak_reserved peak_reset|$R
tune --json @D@ --limit 1G|.|database recorded objective limit events seconds results recommended recorded_is_best check runaway_growth torch note|$R
advise --json @D@|.|baseline recorded trainer uses link_bytes_per_s step_s recorded_techniques phases_from steps_from notes oom recommendations combinations plan shortfall_bytes budget_known floor nearest why plan_over_budget_bytes check_failed|$A
advise --json @D@ --budget 1M|.|baseline recorded trainer uses link_bytes_per_s step_s recorded_techniques phases_from steps_from notes oom recommendations combinations plan shortfall_bytes budget_known floor nearest why plan_over_budget_bytes check_failed|$A
advise --json @D@ --budget 1T|.|baseline recorded trainer uses link_bytes_per_s step_s recorded_techniques phases_from steps_from notes oom recommendations combinations plan shortfall_bytes budget_known floor nearest why plan_over_budget_bytes check_failed|$A"
nk=0
while IFS='|' read -r c obj want doc; do
  undoc=$(for k in $want; do grep -q "\"$k\"\|\b$k\b" "$doc" || echo -n "$k "; done)
  [[ -z $undoc ]] || fail "gpumem $c: keys the test lists that $doc does not: $undoc"
  for db in run empty imp; do
    o=$TMP/run.db
    [[ $db == run ]] && o=$TMP/imp.db
    cc=${c//@O@/$o}
    # exit 1 is an answer here: uses found nothing (a recording without names: no JSON), diff's
    # gate failed (an empty recording against a run), nothing fits advise's budget
    rc=0; out=$(eval "\"$GM\" ${cc//@D@/$TMP/$db.db}" 2> /dev/null) || rc=$?
    [[ $rc == 0 || ($rc == 1 && ($c == uses* || $c == *--fail-if-peak-grows* || $c == *--budget*)) ]] || fail "gpumem ${c//@D@/$db.db}: exit $rc"
    [[ -z $out ]] && continue
    miss=$(for k in $want; do jq -e "$obj | . == null or has(\"$k\")" <<< "$out" > /dev/null || echo -n "$k "; done)
    [[ -z $miss ]] || fail "gpumem ${c//@D@/$db.db}: $obj misses documented keys $miss"
    nk=$((nk + 1))
  done
done <<< "$keys"
ok "every documented JSON key present: $nk outputs of report, the ranks report, leaks, uses, diff, frag, tune, advise on a run, an empty recording and an import"

# gpumem record without -o writes the preload's own GPUMEM_DB where it is set (it ignored it),
# -o wins over it, and GPUMEM_DB=none (record nothing) is refused before the program starts
tiny=("$(readlink -f "$TRAIN")" --model tiny --data "$(readlink -f "$TEXT")" --steps 1 -B 2 -T 32)
gm=$(readlink -f "$GM")
( cd "$TMP" && GPUMEM_DB="$TMP/env-%p.db" "$gm" record -q -- "${tiny[@]}" > /dev/null 2>&1 ) || fail "record with GPUMEM_DB exited $?"
envdb=$(ls "$TMP"/env-*.db 2> /dev/null | head -1)
[[ -n $envdb && -z $(ls "$TMP"/gpumem-*.db 2> /dev/null) ]] || fail "record without -o: GPUMEM_DB not written ($(ls "$TMP"))"
GPUMEM_DB="$TMP/envx.db" "$GM" record -q -o "$TMP/o.db" -- "${tiny[@]}" > /dev/null 2>&1 || fail "record -o with GPUMEM_DB exited $?"
[[ -s $TMP/o.db && ! -e $TMP/envx.db ]] || fail "-o did not win over GPUMEM_DB"
rc=0; GPUMEM_DB=none "$GM" record -q -- "${tiny[@]}" > "$TMP/out.txt" 2> "$TMP/err.txt" || rc=$?
[[ $rc == 2 && ! -s $TMP/out.txt ]] && grepq "GPUMEM_DB=none records nothing" "$TMP/err.txt" \
  || fail "record with GPUMEM_DB=none: exit $rc, $(cat "$TMP/err.txt")"
ok "record: GPUMEM_DB is the default -o ($(basename "$envdb")), -o wins, GPUMEM_DB=none refused (exit 2, the program not run)"

# gpumem sql and the sqlite3 shell's dot-commands (--help: "the sqlite3 shell on DB, or run one
# query"): -c with a dot-command is run by that shell (it was sent to SQLite as SQL: "near '.':
# syntax error"); a dot-command on standard input, which takes SQL, is said by its line with
# what to do, and the SQL around it still runs; without the shell, -c '.tables' says so and how
# to ask in SQL.
# row: NAME | PATH ("-": this one) | -c argument ("-": the lines on stdin) | exit | what the output must have
stdin_sql=$'SELECT 41 + 1 AS answer;\n.mode csv\nSELECT 7 * 6 AS again;'
sql_rows=(
  "-c .tables|-|.tables|0|allocations"
  "-c .schema TABLE|-| .schema meta|0|CREATE TABLE meta"
  "a dot-command on stdin|-|-|2|line 2: '.mode csv' is a dot-command of the sqlite3 shell; queries on standard input are SQL"
  "the SQL around it on stdin|-|-|2|again"
  "-c .tables, no sqlite3 shell|$TMP/noshell|.tables|2|which is not installed (apt-get install sqlite3); without it -c takes SQL"
)
mkdir -p "$TMP/noshell"
for row in "${sql_rows[@]}"; do
  IFS='|' read -r name path arg want_rc want <<< "$row"
  [[ $path == - ]] && path=$PATH
  if [[ $path == "$PATH" ]] && ! command -v sqlite3 > /dev/null && [[ $arg != - ]]; then
    echo "skipped: gpumem sql $name (no sqlite3 shell)"
    continue
  fi
  rc=0
  if [[ $arg == - ]]; then
    PATH=$path "$gm" sql "$TMP/run.db" <<< "$stdin_sql" > "$TMP/out.txt" 2>&1 || rc=$?
  else
    PATH=$path "$gm" sql "$TMP/run.db" -c "$arg" > "$TMP/out.txt" 2>&1 || rc=$?
  fi
  [[ $rc == "$want_rc" ]] && grepq -F -- "$want" < "$TMP/out.txt" \
    || fail "gpumem sql $name: exit $rc (not $want_rc), or no '$want': $(head -3 "$TMP/out.txt")"
done
ok "gpumem sql: a dot-command with -c runs in the sqlite3 shell; on standard input it is said by its line; without the shell, -c says it takes SQL"
# Options accepted and ignored, and the one list of exit codes (issue "consist"): each row a
# command line a user typed, and what it must do.
# (a) a per-step table never prints two neighbouring rows alike, in any command (report's rule:
# alike steps are one row "2-4"), and never more than 12 rows and a "..."
for c in frag leaks; do
  "$GM" $c "$TMP/run.db" --top 3 > "$TMP/steps.txt" || fail "$c exited $?"
  case $c in
    frag) sed -n '/^Reserved - allocated over time/,/^$/p' "$TMP/steps.txt" | sed -n '3,$p' | sed '/^$/d' \
            | awk '{print $1 "|" $2 $3 "|" $4 $5}' > "$TMP/rows.txt" ;;
    leaks) sed -n 's/^  step \([0-9-]*\) *allocated at its end *\(.*\)/\1|\2/p' "$TMP/steps.txt" > "$TMP/rows.txt" ;;
  esac
  [[ -s $TMP/rows.txt ]] || fail "$c: no per-step table found"
  cut -d'|' -f2- "$TMP/rows.txt" | grep -v '^$' | uniq -d | grepq . && fail "$c: neighbouring steps printed alike: $(cat "$TMP/rows.txt")"
  (( $(grep -vc '^\.\.\.' "$TMP/rows.txt") <= 12 )) || fail "$c: more than 12 step rows"
  grepq -- '-' "$TMP/rows.txt" || fail "$c: alike steps of the trainer not merged: $(cat "$TMP/rows.txt")"
done
ok "per-step tables (frag, leaks): alike neighbouring steps are one row"
# (b) options for PyTorch programs given to a C program: a note after the run, exit as the program's
# (a sanitizer build's gpumem finds no Python files beside it, build/san-*/../preload/python, so
# it sets no PyTorch option up and has nothing to say about them)
opts=("--torch-ops" "--allocator gpumem")
if [[ -n ${SAN:-} ]]; then
  echo "skipped: record's note on PyTorch-only options (a sanitizer build sets up no PyTorch)"
  opts=()
fi
for opt in "${opts[@]}"; do
  rc=0; GPUMEM_QUIET=0 "$GM" record $opt -o "$TMP/opt.db" -- "$TRAIN" --model tiny --data "$TEXT" --steps 1 -B 2 -T 32 \
    > /dev/null 2> "$TMP/err.txt" || rc=$?
  [[ $rc == 0 ]] && grepq "note: $opt is for PyTorch programs only" "$TMP/err.txt" \
    || fail "record $opt on a C program: exit $rc, no note: $(cat "$TMP/err.txt")"
done
ok "record --torch-ops / --allocator gpumem on a program without PyTorch: a note, exit 0"
# (c) gpumem help CMD is CMD --help; a typo is a usage error with the command meant
for c in record report leaks frag tune advise uses viz diff export import sql flamegraph; do
  "$GM" help $c > "$TMP/h1.txt" 2>&1 || fail "help $c exited $?"
  "$GM" $c --help > "$TMP/h2.txt" 2>&1
  cmp -s "$TMP/h1.txt" "$TMP/h2.txt" || fail "gpumem help $c is not gpumem $c --help"
done
rc=0; "$GM" help reprot > "$TMP/out.txt" 2> "$TMP/err.txt" || rc=$?
[[ $rc == 2 && ! -s $TMP/out.txt ]] && grepq "did you mean 'report'" "$TMP/err.txt" || fail "help reprot: exit $rc, $(cat "$TMP/err.txt")"
ok "gpumem help CMD = gpumem CMD --help; help reprot: exit 2, did you mean 'report'"
# exit codes: every command's --help and gpumem --help's list say the same (which command can
# exit with which code); and what each code of the list stands for is what the command does
python3 - "$GM" <<'PY' || fail "gpumem --help's exit codes and the commands' differ"
import re, subprocess, sys
gm = sys.argv[1]
cmds = "record report leaks sql export uses import flamegraph diff advise frag tune viz".split()
main = subprocess.run([gm, "--help"], capture_output=True, text=True).stdout
block = main[main.index("exit codes"):]
lines = {}
for m in re.finditer(r"^  ([1-4]) (.*(?:\n    .*)*)", block, re.M):
    lines[int(m.group(1))] = m.group(2)
bad = 0
for code in (1, 2, 3, 4):
    text = lines.get(code, "")
    named = set(cmds) if "every command" in text else {c for c in cmds if re.search(r"\b%s\b" % c, text)}
    own = set()
    for c in cmds:
        h = subprocess.run([gm, c, "--help"], capture_output=True, text=True).stdout
        para = h[h.index("Exit code"):] if "Exit code" in h else ""
        if re.search(r"(?<![\w+.])%d (?=[a-zA-Z-])" % code, para): own.add(c)
    if named != own:
        print(f"exit {code}: gpumem --help names {sorted(named)}, the commands' helps {sorted(own)}"); bad += 1
sys.exit(1 if bad else 0)
PY
for row in "advise --budget 1K" "tune --limit 1M"; do
  rc=0; "$GM" ${row%% *} "$TMP/run.db" ${row#* } > /dev/null 2>&1 || rc=$?
  [[ $rc == 1 ]] || fail "${row%% *} ${row#* }: exit $rc, the list says 1"
done
ok "exit codes: gpumem --help lists what every command's --help does (advise --budget, tune --limit: 1)"
# frag --check where no fix reserves less (a run under preset:nocache: nothing reserves less than
# what it asked for): nothing to re-run is no failure of a CI gate; it is said
GPUMEM_CONF=preset:nocache "$GM" record -q -o "$TMP/nocache.db" -- "$BUILD/tests/apps/rt_app" > /dev/null 2>&1 ||
  fail "record rt_app under preset:nocache"
"$GM" frag --json "$TMP/nocache.db" | jq -e '.recommended == null' > /dev/null ||
  fail "frag found a fix on a preset:nocache run: the row needs another recording"
rc=0; "$GM" frag --check "$TMP/nocache.db" > /dev/null 2> "$TMP/err.txt" || rc=$?
[[ $rc == 0 ]] && grepq "nothing to check" "$TMP/err.txt" || fail "frag --check with no fix: exit $rc, $(cat "$TMP/err.txt")"
ok "frag --check with no fix to re-run: exit 0, says nothing to check"
# Messages that say what to do. Each row: name | command (run in a scratch directory W) | exit
# code | what its first line of stderr must say. A PyTorch snapshot given to a command that reads
# a database (import it first), a database given to import (read it directly), the program of
# `record` not on PATH / not executable / a directory, the default output in a directory the
# user may not write (the file as it will be named, the real directory, -o), a file where the
# command goes, a directory given for a database (a file, or report DIR); and the help of
# report and uses on access tracking, which is on by default.
W=$TMP/w && mkdir -p "$W/adir" || fail "mkdir"
gm=$(readlink -f "$GM")
"$gm" export --format torch "$TMP/run.db" -o "$W/snap.pickle" 2> /dev/null || fail "export --format torch"
cp "$TMP/run.db" "$W/x.db"
printf '#!/bin/sh\ntouch started\n' > "$W/t2.py" && chmod +x "$W/t2.py"
printf 'print(1)\n' > "$W/t3.py" && chmod 644 "$W/t3.py"
says=(
  "pickle-report|report snap.pickle|3|snap.pickle is a PyTorch memory snapshot \(a pickle\), not a gpumem database: import it first \(gpumem import snap.pickle -o run.db\)"
  "pickle-json|report --json snap.pickle|3|is a PyTorch memory snapshot.*gpumem import snap.pickle -o run.db"
  "pickle-leaks|leaks snap.pickle|3|is a PyTorch memory snapshot.*gpumem import snap.pickle -o run.db"
  "pickle-frag|frag snap.pickle|3|is a PyTorch memory snapshot.*gpumem import snap.pickle -o run.db"
  "pickle-tune|tune snap.pickle|3|is a PyTorch memory snapshot.*gpumem import snap.pickle -o run.db"
  "pickle-advise|advise snap.pickle|3|is a PyTorch memory snapshot.*gpumem import snap.pickle -o run.db"
  "pickle-uses|uses snap.pickle --id 1|3|is a PyTorch memory snapshot.*gpumem import snap.pickle -o run.db"
  "pickle-export|export --format csv snap.pickle|3|is a PyTorch memory snapshot.*gpumem import snap.pickle -o run.db"
  "pickle-viz|viz snap.pickle -o v.html|3|is a PyTorch memory snapshot.*gpumem import snap.pickle -o run.db"
  "pickle-diff|diff snap.pickle x.db|3|is a PyTorch memory snapshot.*gpumem import snap.pickle -o run.db"
  "pickle-sql|sql snap.pickle -c VALUES(1)|3|is a PyTorch memory snapshot.*gpumem import snap.pickle -o run.db"
  "pickle-ranks|report snap.pickle x.db|3|is a PyTorch memory snapshot.*gpumem import snap.pickle -o run.db"
  "db-import|import x.db -o i.db|3|x.db is an SQLite file \(a gpumem database\?\), not a PyTorch snapshot: nothing to import; give it to the commands directly \(gpumem report x.db\)"
  "not-on-path|record -q -o q.db -- t2.py|127|cannot run t2.py: it is not on PATH; the one in this directory is ./t2.py \(gpumem record -- ./t2.py, or -- python3 t2.py"
  "not-executable|record -q -o q.db -- ./t3.py|127|cannot run ./t3.py: Permission denied: it is not executable; chmod \+x ./t3.py, or give its interpreter \(gpumem record -- python3 ./t3.py\)"
  "directory-prog|record -q -o q.db -- adir|127|cannot run adir: it is a directory; give the program to record after --"
  "order|x.db report|2|unknown command 'x.db': the command comes first, then the file \(gpumem report x.db\)"
  "order-leaks|x.db leaks|2|unknown command 'x.db': the command comes first, then the file \(gpumem leaks x.db\)"
  "dir-leaks|leaks adir|3|adir is a directory, not a database: give a database file \(adir/run.db\); for a directory of ranks' recordings, gpumem report adir"
  "dir-frag|frag adir|3|adir is a directory, not a database: give a database file"
)
for row in "${says[@]}"; do
  IFS='|' read -r name cmd want re <<< "$row"
  rm -f "$W/started" "$W/i.db"
  rc=0; (cd "$W" && "$gm" $cmd > "$TMP/out.txt" 2> "$TMP/err.txt") || rc=$?
  [[ $rc == "$want" ]] && head -1 "$TMP/err.txt" | grepq -E "$re" \
    || fail "$name: gpumem $cmd: exit $rc (want $want): $(head -1 "$TMP/err.txt")"
  [[ ! -e $W/started && ! -e $W/i.db ]] || fail "$name: something ran or was written"
done
cmp -s "$W/x.db" "$TMP/run.db" || fail "a database given to import was changed"
# the default output in a directory this user cannot write (as nobody: root may write anywhere)
if command -v setpriv > /dev/null && [[ $(id -u) == 0 ]]; then
  rocwd=$(mktemp -d /tmp/gpumem-rocwd.XXXXXX) && chmod 555 "$rocwd"
  trap 'rm -rf "$TMP" "$rocwd" ${ro:+"$ro"}' EXIT
  rc=0; (cd "$rocwd" && setpriv --reuid=nobody --regid=nogroup --clear-groups "$gm" record -q -- sh -c "touch /tmp/never-$$") \
    > /dev/null 2> "$TMP/err.txt" || rc=$?
  [[ $rc == 2 && ! -e /tmp/never-$$ ]] &&
    grep -q "^gpumem: cannot write gpumem-<pid>.db: the directory $(readlink -f "$rocwd") is not writable; give -o with a place you may write" "$TMP/err.txt" \
    || fail "record in a read-only cwd: exit $rc, $(cat "$TMP/err.txt")"
else
  echo "skipped: the default output in a read-only directory (needs root and setpriv)"
fi
! "$gm" report --help | tr '\n' ' ' | grepq "needs GPUMEM_USES=1" && "$gm" report --help | grepq "on by default" \
  || fail "report --help says access tracking needs GPUMEM_USES=1"
! "$gm" uses --help | tr '\n' ' ' | grepq "access tracking on: GPUMEM_USES=1" && "$gm" uses --help | tr '\n' ' ' | grepq "on by *default" \
  || fail "uses --help says access tracking needs GPUMEM_USES=1"
ok "messages say what to do: a snapshot to import (every reader), a database to read, a program not on PATH / not executable / a directory, a read-only cwd, the command first, a directory for a database; --help: access tracking on by default"
# A GPUMEM_* name gpumem does not know (a typo) is said, never silently ignored: gpumem record
# refuses it before the program runs (exit 2, as a bad value), naming the likely setting; the
# preload alone says it once and the program runs on. gpumem's own names (those its processes set
# for each other, the virtual GPU's, test hooks, the build and test scripts' inputs) pass.
while IFS='|' read -r assign want msg; do
  rc=0
  env "$assign" "$GM" record -o "$TMP/typo.db" -- "$TRAIN" --model tiny --data "$TEXT" --steps 1 -B 2 -T 32 \
    > /dev/null 2> "$TMP/typo.err" || rc=$?
  [[ $rc == "$want" ]] || { cat "$TMP/typo.err"; fail "$assign: record exited $rc, want $want"; }
  [[ -z $msg ]] && continue
  grep -qxF "gpumem record: $msg; fix or unset it (the program was not started)" "$TMP/typo.err" \
    || { cat "$TMP/typo.err"; fail "$assign: record does not say: $msg"; }
  rm -f "$TMP/typo.db"
  env "$assign" GPUMEM_QUIET=0 GPUMEM_DB="$TMP/typo.db" LD_PRELOAD="$BUILD/libgpumem.so" LD_LIBRARY_PATH="$BUILD/sim" \
    "$TRAIN" --model tiny --data "$TEXT" --steps 1 -B 2 -T 32 > /dev/null 2> "$TMP/typo.err" \
    || { cat "$TMP/typo.err"; fail "$assign: the preload failed the program"; }
  [[ $(grep -cxF "gpumem: $msg; it is ignored" "$TMP/typo.err") == 1 && -s $TMP/typo.db ]] \
    || { cat "$TMP/typo.err"; fail "$assign: the preload does not say once: $msg (or recorded nothing)"; }
done <<'ROWS'
GPUMEM_LIMT=1M|2|unknown setting GPUMEM_LIMT (did you mean GPUMEM_LIMIT?)
GPUMEM_STAKCS=4|2|unknown setting GPUMEM_STAKCS (did you mean GPUMEM_STACKS?)
GPUMEM_TYPO=1|2|unknown setting GPUMEM_TYPO (gpumem's settings are listed in README.md)
GPUMEM_SIM_COSTS=|0|
GPUMEM_TORCH_PY=/nonexistent|0|
GPUMEM_FUZZ_RUNS=1|0|
GPUMEM_TEST_FREE_YIELD=0|0|
ROWS
# the known names are one list (rec_settings.c): every GPUMEM_ name in the tree must be on it
known=$(sed -n '/known-names: begin/,/known-names: end/p' snapshot/record/rec_settings.c | grep -oE '"GPUMEM_[A-Z0-9_]*\*?"' | tr -d '"')
[[ -n $known ]] || fail "no list of known names between the known-names markers of rec_settings.c"
missing=$(git ls-files | grep -vxF tests/integration/cli_small_wrongs.sh | xargs grep -IhoP 'GPUMEM_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_*])' \
  | sort -u | grep -vE '_H$' | while read -r n; do
    for k in $known; do
      if [[ $k == *'*' ]]; then [[ $n == "${k%\*}"* ]] && continue 2; elif [[ $n == "$k" ]]; then continue 2; fi
    done
    echo "$n"
  done)
[[ -z $missing ]] || fail "GPUMEM_ names used in the tree but not in rec_settings.c's known list (record would refuse them): $missing"
ok "a misspelled GPUMEM_* name: record refuses it (exit 2), the preload says it once; gpumem's own names pass"
