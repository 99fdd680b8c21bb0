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
# Then every SQL example of the docs (READMEs, --help texts) is run on two recordings and must
# name the program's frames (at the end of this file).
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

# ---- every SQL example of the docs runs, and names the program's frames ----------------------
# The queries are read from where a person reads them — the ```sql blocks and `gpumem sql ... -c
# '...'` lines of every README.md, every command's --help, the hint `gpumem uses` prints — so the
# docs and this test cannot drift. Each runs on two recordings: the trainer (a planted leak, access
# tracking on, so the leak and uses examples have rows) and cxx_wrap_app, whose allocations are
# known (8 MiB alive at exit, allocated at alloc_floats, cxx_wrap_app.cc:12, through CUDA's
# cudaMalloc<float> inlined there). A column `function` or `file` must name the program's code,
# never gpumem's own frames (gm_rec_alloc in preload/core.c) or CUDA's headers; a query whose
# comment says "every frame included" lists whole stacks and is only run.
CXX_APP=$BUILD/tests/apps/cxx_wrap_app
[[ -x $CXX_APP ]] || fail "$CXX_APP is not built"
"$GM" record -q -o "$TMP/sql_cxx.db" -- "$CXX_APP" > /dev/null 2>&1 || fail "cxx_wrap_app under gpumem record failed"
GPUMEM_USES=1 GPUMEM_SIM_BACKING=virtual "$GM" record -q -o "$TMP/sql_train.db" -- "$TRAIN" --model gpt2 --dry-run \
  --steps 3 -B 1 -T 64 --leak > /dev/null 2>&1 || fail "the trainer's dry run with --leak under gpumem record failed"
{
  for c in $("$GM" --help | sed -n 's/^  \([a-z]\+\) .*/\1/p' | sort -u); do "$GM" "$c" --help 2>&1 || true; done
  ! "$GM" uses "$TMP/sql_cxx.db" --id 999999999 2>&1 # its hint on a wrong id
} > "$TMP/sql_help.txt"
find . -name README.md -not -path './build*' -not -path './.git/*' | sort > "$TMP/sql_docs.txt"
python3 - "$GM" "$TMP" "$TMP/sql_help.txt" "$TMP/sql_docs.txt" <<'EOF' \
  || fail "an SQL example of the docs does not run, or names gpumem's frames instead of the program's"
import re, subprocess, sys
gm, tmp, helptxt, docs = sys.argv[1:5]
queries = []  # (where, comment, sql)
def inline(where, text):
    # gpumem sql DB -c '...', the quoted query possibly over several lines (help texts wrap it)
    for m in re.finditer(r"gpumem sql \S+ -c '([^']*)'", text):
        if "..." not in m.group(1) and "QUERY" not in m.group(1):
            queries.append((where, "", " ".join(m.group(1).split())))
for path in open(docs).read().split():
    text = open(path, encoding="utf-8").read()
    for b in re.finditer(r"```sql\n(.*?)```", text, re.S):
        comment, stmt = "", []
        for line in b.group(1).split("\n"):
            if line.startswith("--"):
                comment += line
            elif line.strip():
                stmt.append(line)
                if line.rstrip().endswith(";"):
                    queries.append((path, comment, " ".join(stmt))); comment, stmt = "", []
    inline(path, text)
inline("--help", open(helptxt, encoding="utf-8").read())
where_seen = {w for w, _, _ in queries}
for need in ("./snapshot/README.md", "./README.md", "--help"):
    if need not in where_seen: print(f"no SQL example found in {need}: is the extraction still right?"); sys.exit(1)
bad = 0
def rows(db, q):
    r = subprocess.run([gm, "sql", db, "-c", q], capture_output=True, text=True)
    if r.returncode != 0: return None, r.stderr.strip()
    lines = r.stdout.rstrip("\n").split("\n") if r.stdout.strip() else []
    return [l.split("|") for l in lines], ""
for where, comment, q in queries:
    whole_stacks = "every frame included" in comment
    for db, own in ((f"{tmp}/sql_train.db", r"^train/"), (f"{tmp}/sql_cxx.db", r"^tests/apps/cxx_wrap_app\.cc$")):
        out, err = rows(db, q)
        if re.match(r"(?i)\s*(delete|insert|update|drop)\b", q):
            # the docs show it refused: readers never change a recording without --write
            if out is not None or "read-only" not in err:
                print(f"{where}: the writing example was not refused on {db}\n    {q}"); bad += 1
            continue
        if out is None:
            print(f"{where}: the example does not run on {db}: {err}\n    {q}"); bad += 1; continue
        if not out: continue
        head, body = out[0], out[1:]
        # a site as report names it: the trainer allocates through t_alloc_on, and only the
        # caller after " < " tells its allocations apart
        if "site" in head and "train" in db:
            lone = [r for r in body if " < " not in dict(zip(head, r)).get("site", "")]
            if lone:
                print(f"{where}: on {db} a site without its caller: {dict(zip(head, lone[0])).get('site')}\n    {q}"); bad += 1
        cols = [i for i, h in enumerate(head) if h in ("function", "file")]
        if not cols or whole_stacks: continue
        if not body:
            print(f"{where}: the example names frames but gives no row on {db}\n    {q}"); bad += 1; continue
        for r in body:
            f = dict(zip(head, r))
            if not re.search(own, f.get("file", "")) or not f.get("function"):
                print(f"{where}: on {db} the example names a frame that is not the program's: "
                      f"{f.get('function')} in {f.get('file')}\n    {q}"); bad += 1; break
            if "cxx" in db and f.get("size") == "8388608" and (f.get("function"), f.get("line", "12")) != ("alloc_floats", "12"):
                print(f"{where}: cxx_wrap_app's 8 MiB came from alloc_floats (cxx_wrap_app.cc:12), "
                      f"the example says {f.get('function')}:{f.get('line')}\n    {q}"); bad += 1; break
# stack_sites.site is report's own string: every site report names at the peak is one of them
import json
rep = json.loads(subprocess.run([gm, "report", f"{tmp}/sql_train.db", "--json", "--top", "1000"],
                                capture_output=True, text=True).stdout)
named = {x["site"] for x in rep["peak"]["by_site"]}
out, err = rows(f"{tmp}/sql_train.db", "SELECT DISTINCT s.site FROM allocations a JOIN stack_sites s ON s.stack = a.stack")
have = {r[0] for r in (out or [])[1:]}
if not named or named - have:
    print(f"stack_sites.site does not name the sites report names: {sorted(named - have)[:3]} {err}"); bad += 1
print(f"{len(queries)} SQL examples run on 2 recordings, {bad} wrong")
sys.exit(1 if bad else 0)
EOF
ok "every SQL example of the READMEs and --help texts runs and names the program's frames"
