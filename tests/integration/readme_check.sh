#!/usr/bin/env bash
# The README's example outputs are what the programs print. Each output block of README.md is
# marked `<!-- readme-check: NAME -->` (or `NAME, trimmed`) on the line before its fence; this
# script runs NAME's commands (below, the README's own commands), keeps their whole output in
# $BUILD/readme/NAME.txt (copy from there when the README needs new lines), and compares:
#  - a block that is not trimmed must be the output, line for line;
#  - a trimmed block's lines must appear in the output in the same order (the lines it leaves
#    out may be anything); a line "..." stands for lines left out;
#  - in both, "..." inside a line stands for text left out, and what no two runs print alike is
#    compared as a placeholder: durations (392 ns, 0.118 s, 73.22 ms) and pids. Every other
#    number — bytes, counts, event numbers, source line numbers — must be the program's.
# Cheap enough for make test: the demo's recording (tiny GPT-2, 200 steps), a drv_sym_app run,
# and a 20-step GPT-2 124M dry run (a second each on the virtual GPU).
source "$(dirname "$0")/e2e_common.bash"
OUT=$BUILD/readme
mkdir -p "$OUT"
README=${README:-README.md}
unset GPUMEM_MODE GPUMEM_LIMIT GPUMEM_CONF GPUMEM_DB GPUMEM_STACKS GPUMEM_USES
export GPUMEM_QUIET=1

gen_demo() { # tests/demo.sh's run: the record summary line, report, leaks
  cat alloc/*.[ch] preload/*.[ch] snapshot/*.[ch] sim/*.[ch] train/*.[ch] README.md */README.md > "$TMP/text.txt"
  "$GM" record -o "$TMP/demo.db" -- "$TRAIN" --model tiny --data "$TMP/text.txt" --steps 200 -B 4 -T 64 \
    > "$TMP/train.log" 2> "$TMP/rec.err" || fail "the demo's recorded run failed: $(tail -3 "$TMP/rec.err")"
  grep '^gpumem: peak allocated' "$TMP/rec.err"
  echo
  "$GM" report "$TMP/demo.db"
  echo
  "$GM" leaks "$TMP/demo.db"
}
gen_devused() { # drv_sym_app in record mode, a 300 MiB context: the report's device-used section
  local app=$BUILD/tests/apps/drv_sym_app
  [[ -x $app ]] || fail "$app is not built"
  GPUMEM_SIM_CONTEXT_BYTES=$((300 << 20)) GPUMEM_MODE=record "$GM" record -q -o "$TMP/dv.db" -- "$app" \
    > /dev/null 2>&1 || fail "drv_sym_app under gpumem record failed"
  "$GM" report "$TMP/dv.db" | sed -n '/^Device used/,/^$/p' | sed '$d'
}
pt_db() { # the trainer under PyTorch's policy, as the README's frag and tune paragraphs say
  [[ -s $TMP/pt.db ]] && return
  GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G GPUMEM_CONF=preset:pytorch "$GM" record -q -o "$TMP/pt.db" -- \
    "$TRAIN" --model gpt2 -B 8 -T 1024 --dry-run --steps 20 --seq-jitter --seed 5 > /dev/null 2>&1 \
    || fail "the GPT-2 124M dry run under preset:pytorch failed"
}
gen_frag() { pt_db; "$GM" frag "$TMP/pt.db"; }
gen_tune() { pt_db; GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G "$GM" tune "$TMP/pt.db"; }

names=$(sed -n 's/^<!-- readme-check: \([a-z_]*\).*-->$/\1/p' "$README" | sort -u)
[[ -n $names ]] || fail "$README has no block marked <!-- readme-check: NAME -->"
for n in $names; do
  declare -F "gen_$n" > /dev/null || fail "$README marks a block '$n', which this script cannot run"
  "gen_$n" > "$OUT/$n.txt" || fail "the commands of '$n' failed"
done
cat > "$TMP/compare.py" <<'EOF'
import difflib, re, sys
readme, out = sys.argv[1], sys.argv[2]
TIME = re.compile(r"\b\d+(?:\.\d+)? ?(?:ns|us|ms|s)\b")
def mask(s):
    s = re.sub(r"\bpid \d+", "pid N", s)
    return TIME.sub("<time>", s).rstrip()
def pattern(line):
    return re.compile("^" + ".*".join(re.escape(p) for p in mask(line).split("...")) + "$")
lines = open(readme, encoding="utf-8").read().split("\n")
bad = checked = 0
i = 0
while i < len(lines):
    m = re.match(r"^<!-- readme-check: ([a-z_]+)(, trimmed)? -->$", lines[i])
    if not m:
        i += 1
        continue
    name, trimmed = m.group(1), bool(m.group(2))
    if not lines[i + 1].startswith("```"):
        print(f"{readme}:{i + 1}: the mark is not right before a ``` block"); bad += 1; i += 1; continue
    j = i + 2
    block = []
    while j < len(lines) and not lines[j].startswith("```"):
        block.append((j + 1, lines[j])); j += 1
    got = [mask(l) for l in open(f"{out}/{name}.txt", encoding="utf-8").read().rstrip("\n").split("\n")]
    k = 0
    for lineno, text in block:
        checked += 1
        if text.strip() == "...":
            if not trimmed:
                print(f"{readme}:{lineno}: '...' leaves lines out of a block not marked trimmed"); bad += 1
            continue
        p = pattern(text)
        if trimmed:
            while k < len(got) and not p.match(got[k]):
                k += 1
        if k < len(got) and p.match(got[k]):
            k += 1
            continue
        near = difflib.get_close_matches(mask(text), got, n=1, cutoff=0.5)
        print(f"{readme}:{lineno}: [{name}] the program no longer prints this line{' here' if trimmed else ''}:\n"
              f"    README: {text}\n    prints: {near[0] if near else '(nothing like it)'}")
        bad += 1
        break
    if not trimmed and not bad and k != len(got):
        print(f"{readme}:{block[-1][0] if block else i + 1}: [{name}] the output has {len(got) - k} more lines "
              f"(mark the block trimmed, or copy them from {out}/{name}.txt)")
        bad += 1
    i = j + 1
print(f"{checked} README lines checked against the programs' output, {bad} wrong")
sys.exit(1 if bad else 0)
EOF
python3 "$TMP/compare.py" "$README" "$OUT" || fail "$README no longer shows what the programs print (their outputs: $OUT/*.txt)"
ok "every marked README block is what the programs print ($(echo $names))"
# the check itself: one number of the demo block changed (an event number) must fail it
python3 - "$README" "$TMP/edited.md" <<'EOF'
import re, sys
s = open(sys.argv[1], encoding="utf-8").read()
at = s.index("<!-- readme-check: demo")
s = s[:at] + re.sub(r"at event (\d+)\)", r"at event 1\1)", s[at:], count=1)
open(sys.argv[2], "w", encoding="utf-8").write(s)
EOF
! cmp -s "$README" "$TMP/edited.md" || fail "could not edit a line of the demo block for the self-check"
! python3 "$TMP/compare.py" "$TMP/edited.md" "$OUT" > "$TMP/edited.out" || fail "a README with an edited demo line passed the check"
grep -q "the program no longer prints this line" "$TMP/edited.out" || fail "the edited line was not named: $(cat "$TMP/edited.out")"
ok "and a README with one demo number edited fails it"
