#!/usr/bin/env bash
# gpumem-replay from the shell: GPUMEM_CONF errors are one line naming the key and the accepted
# keys (exit 2); --check-conf prints the effective config; a trace file replays to the expected
# peaks; a limit reports the OOM position and forensics (exit 1); --write round-trips; an
# option's missing, option-like or not-whole value is exit 2.
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

out=$("$cli" --preset gpumem --limit 24M "$tmp/t.trace"); rc=$?
[[ $rc -eq 1 && $out == *"oom_at=2 "* && $out == *"oom_requested=10485760 "* && $out == *"oom_limit=25165824"* ]] ||
  fail "limit: exit $rc: $out"

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
