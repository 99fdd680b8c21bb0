#!/usr/bin/env bash
# gpumem-replay from the shell: GPUMEM_CONF errors are one line naming the key and the accepted
# keys (exit 2); --check-conf prints the effective config; a trace file replays to the expected
# peaks; a limit reports the OOM position and forensics (exit 1); --write round-trips; an
# option's missing, option-like or not-whole value is exit 2; 0 in every size, limit and
# fraction key and option is 0 bytes (GPUMEM_LIMIT and gpumem tune --limit too).
set -uo pipefail
BUILD=${BUILD:-build}
cli=$BUILD/alloc/gpumem-replay
[[ -x $cli ]] || { echo "FAIL: $cli not built" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/alloccli-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$(GPUMEM_CONF=bogus_key:1 "$cli" --check-conf 2>&1); rc=$?
[[ $rc -eq 2 ]] || fail "bogus_key: exit $rc, expected 2"
[[ $(printf '%s\n' "$out" | wc -l) -eq 1 ]] || fail "bogus_key: not one line: $out"
[[ $out == *"'bogus_key'"* && $out == *expandable_segments* && $out == *max_split_size_mb* ]] ||
  fail "bogus_key: message does not name the key and the accepted keys: $out"
echo "ok: $out"

out=$(GPUMEM_CONF=expandable_segments:maybe "$cli" --check-conf 2>&1); rc=$?
[[ $rc -eq 2 && $out == *expandable_segments* && $out == *True* ]] || fail "bad value: $out"

out=$("$cli" --check-conf --conf "max_split_size_mb:64,limit:2G" 2>&1) || fail "valid conf refused: $out"
[[ $out == *max_split_size_mb:64* && $out == *limit:2G* ]] || fail "effective config: $out"

# 3 x 10 MiB live at once, then freed, then 25 MiB: gpumem maps exactly what is live
cat > "$tmp/t.trace" <<'TR'
# three tensors, then a bigger one
a 1 10485760
a 2 10485760
a 3 10485760
f 1
f 2
f 3
a 4 26214400 1
fa 4 1
TR
out=$("$cli" --preset gpumem "$tmp/t.trace") || fail "replay: $out"
[[ $out == *"events=8 "* && $out == *"peak_requested=31457280 "* && $out == *"peak_reserved=31457280 "* &&
   $out == *"oom_at=-1"* ]] || fail "gpumem replay: $out"
out=$("$cli" --preset pytorch "$tmp/t.trace") || fail "replay: $out"
[[ $out == *"peak_reserved=58720256 "* ]] || fail "pytorch replay (3 x 10 MiB segments + 26 MiB on stream 1 expected): $out"
# the line names the preset that was replayed: a --conf or GPUMEM_CONF preset wins over --preset's
while read -r want args; do
  out=$("$cli" $args "$tmp/t.trace") || fail "replay $args: $out"
  [[ $out == *" preset=$want "* ]] || fail "replay $args: want preset=$want: $out"
done <<'ROWS'
pytorch --preset pytorch
pytorch --conf preset:pytorch
pytorch-expandable --preset gpumem --conf preset:pytorch-expandable
pytorch-expandable --conf preset:pytorch,expandable_segments:True
nocache --preset pytorch --conf preset:nocache
gpumem --preset nocache --conf preset:gpumem
ROWS
out=$(GPUMEM_CONF=preset:pytorch "$cli" --preset gpumem "$tmp/t.trace") || fail "replay: $out"
[[ $out == *" preset=pytorch "* && $out == *"peak_reserved=58720256 "* ]] || fail "GPUMEM_CONF=preset:pytorch: $out"

out=$("$cli" --preset gpumem --limit 24M "$tmp/t.trace"); rc=$?
[[ $rc -eq 1 && $out == *"oom_at=2 "* && $out == *"oom_requested=10485760 "* && $out == *"oom_limit=25165824"* ]] ||
  fail "limit: exit $rc: $out"

# 0 in every size / limit / fraction key and option means 0 bytes (the one rule, alloc/README.md),
# never a silent "none": release_threshold:0 gives back every free page, a limit of 0 lets nothing
# be reserved as per_process_memory_fraction:0 does, handle sizes round 0 up to the granularity;
# a device of 0 bytes is refused; "no limit" is spelled none. Each row: how the 0 is given, then
# what must follow. (0 used to mean "no limit" / "no threshold" in all but the fraction.)
printf 'a 1 104857600\nf 1\na 2 10485760\nf 2\na 3 52428800\nf 3\n' > "$tmp/zero.trace"
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<< "$2"; }
gran=$("$cli" --conf handle_size:2M,handle_size_small:2M "$tmp/zero.trace")
while IFS='|' read -r how want; do
  # shellcheck disable=SC2086
  out=$("$cli" $how "$tmp/zero.trace" 2>&1); rc=$?
  case $want in
    released) [[ $rc -eq 0 && $(field device_frees "$out") -gt 0 &&
                 $(field device_frees "$out") == "$(field device_allocs "$out")" ]] ;;
    kept) [[ $rc -eq 0 && $(field device_frees "$out") == 0 ]] ;;
    oom) [[ $rc -eq 1 && $out == *" oom_at=0 "* && $out == *" peak_reserved=0 "* ]] ;;
    fits) [[ $rc -eq 0 && $out == *" oom_at=-1 "* ]] ;;
    granularity) o=${out#* } g=${gran#* }; [[ $rc -eq 0 && ${o% seconds=*} == "${g% seconds=*}" ]] ;; # (the replay's own time apart)
    refused) [[ $rc -eq 2 && $(wc -l <<< "$out") -eq 1 && $out == *" 0 "*bytes* ]] ;;
  esac || fail "gpumem-replay $how: want $want, exit $rc: $out"
done <<'ROWS'
--conf release_threshold:0|released
--conf release_threshold:0B|released
--conf release_threshold:none|kept
--conf limit:0|oom
--conf limit:0M|oom
--conf per_process_memory_fraction:0|oom
--limit 0|oom
--conf limit:1G --limit 0|oom
--conf limit:0 --limit none|fits
--conf limit:none|fits
--conf handle_size:0|granularity
--conf handle_size_small:0|granularity
--capacity 0|refused
--conf limit:off|refused
--conf release_threshold:off|refused
ROWS
out=$("$cli" --check-conf --conf release_threshold:0,limit:0 2>&1)
[[ $out == *release_threshold:0,* && $out == *limit:0,* ]] || fail "--check-conf of the 0s: $out"
# the same rule where libgpumem.so reads GPUMEM_LIMIT and where gpumem tune reads --limit
if [[ -x $BUILD/tests/apps/rt_app && -x $BUILD/gpumem ]]; then
  rt() { GPUMEM_QUIET=1 GPUMEM_DB="$tmp/rt-%p.db" LD_PRELOAD="$PWD/$BUILD/libgpumem.so" "$@" "$BUILD/tests/apps/rt_app" big 2>&1; }
  out=$(rt env GPUMEM_LIMIT=0)
  grep -qxF "rt_app: then cudaMalloc(1 MiB) = 2" <<< "$out" && grep -qxF "rt_app: cudaMemGetInfo total 0" <<< "$out" ||
    fail "GPUMEM_LIMIT=0: a 1 MiB cudaMalloc is not refused, or the total not 0: $out"
  out=$(rt env GPUMEM_CONF=limit:1M GPUMEM_LIMIT=none)
  grep -qxF "rt_app: then cudaMalloc(1 MiB) = 0" <<< "$out" && ! grep -qxF "rt_app: cudaMemGetInfo total 0" <<< "$out" ||
    fail "GPUMEM_LIMIT=none over GPUMEM_CONF's limit:1M: $out"
  "$BUILD/gpumem" record -q -o "$tmp/t.db" -- "$BUILD/tests/apps/rt_app" > /dev/null 2>&1 || fail "gpumem record rt_app"
  "$BUILD/gpumem" tune --json --limit 0 "$tmp/t.db" > "$tmp/t0.json"; rc=$?
  [[ $rc -eq 1 ]] && jq -e '.limit == 0 and .recommended == null and (.results | length > 0 and all(.oom))' \
    "$tmp/t0.json" > /dev/null || fail "gpumem tune --limit 0: exit $rc, $(head -c 300 "$tmp/t0.json")"
  "$BUILD/gpumem" tune --json --limit none "$tmp/t.db" | jq -e '.limit == null and (.results | any(.oom | not))' \
    > /dev/null || fail "gpumem tune --limit none"
fi
echo "ok: 0 is 0 bytes in every size, limit and fraction key and option"

# --round: the issue's acceptance figures for the list form of roundup_power2_divisions
out=$("$cli" --conf 'preset:pytorch,roundup_power2_divisions:[256:1,512:2,>:8]' \
  --round 200M --round 300M --round 600M --round 1100M 2>&1) || fail "--round: $out"
[[ $(printf '%s\n' $out) == "$(printf '%s\n' 209715200 314572800 805306368 1207959552)" ]] ||
  fail "--round under [256:1,512:2,>:8]: $out"
out=$("$cli" --round lots 2>&1); rc=$?
[[ $rc -eq 2 && $out == *"--round"* ]] || fail "bad --round: exit $rc: $out"
out=$("$cli" --help 2>&1)
[[ $out == *"--round BYTES"* ]] || fail "--help does not document --round"

# record_stream held back one allocation, and an allocation outside the framework's allocator
printf 'a 1 41943040\nrs 1 7\nf 1\na 2 41943040\nax 3 10485760\nf 3\n' > "$tmp/rs.trace"
out=$("$cli" --preset pytorch --stream-lag 1 "$tmp/rs.trace") || fail "rs replay: $out"
[[ $out == *"peak_reserved=83886080 "* && $out == *"other_allocs=1 "* && $out == *"held_frees=1"* ]] ||
  fail "rs/ax replay: $out"
"$cli" --write "$tmp/rs2.trace" "$tmp/rs.trace" || fail "--write rs"
cmp -s <(grep -v '^#' "$tmp/rs.trace") "$tmp/rs2.trace" || fail "rs/ax lines do not round-trip"

"$cli" --synth jitter --steps 3 --write "$tmp/j.trace" || fail "--write"
a=$("$cli" --synth jitter --steps 3 | sed 's/ seconds=.*//; s/trace=[^ ]*//')
b=$("$cli" "$tmp/j.trace" | sed 's/ seconds=.*//; s/trace=[^ ]*//')
[[ -n $a && $a == "$b" ]] || fail "written trace replays differently: '$a' vs '$b'"

printf 'a 1 100\nz 2\n' > "$tmp/bad.trace"
out=$("$cli" "$tmp/bad.trace" 2>&1); rc=$?
[[ $rc -eq 2 && $out == *"line 2"* ]] || fail "bad trace: exit $rc: $out"
# every option that takes a value: missing, or an option in its place, or (numbers) not whole:
# exit 2 naming the option, nothing replayed with a value the user did not write
for c in "--conf --divisions" "--conf" "--preset --check-conf" "--limit --check-conf" "--steps 5x --synth fixed" \
         "--seed -1 --synth fixed" "--seed 1x --synth fixed" "--stream-lag 3x" "--round -- 100" "--write"; do
  # shellcheck disable=SC2086
  out=$("$cli" $c 2>&1); rc=$?
  [[ $rc -eq 2 && $(wc -l <<< "$out") -eq 1 && $out == "gpumem-replay: "*"${c%% *}"* ]] || fail "gpumem-replay $c: exit $rc: $out"
done
# ... by the rule of every gpumem command: gpumem-replay calls gm_args.c's gm_opt_peek (a copy of
# the rule, kept by hand beside it, could drift: "-" and "-5" values, "--" and "-x" options)
grep -q ' T gm_opt_peek$' < <(nm "$cli") || fail "gpumem-replay does not take its values by gm_args.c's rule (gm_opt_peek)"
echo "all checks passed"
