#!/usr/bin/env bash
# Everything gpumem says is true: every user-facing line that record, report, leaks, uses,
# export and their --help print, on the demo run and on the OOM example, is read.
#   - each `gpumem <command>` the lines mention is a command that exists (its --help exits 0);
#   - every byte count the text quotes in parentheses ("4.92 MiB (5160960 bytes ...)") is a
#     figure of the database, as the same report's JSON gives it, and each "X MiB (N bytes)"
#     pair agrees with itself;
#   - the tensor, phase and call site a peak or an OOM is placed at are the database's own.
source tests/integration/e2e_common.bash
TMP2=$TMP
run_rec() { GPUMEM_QUIET=1 "$GM" record -o "$1" -- "${@:2}" > "$TMP2/$(basename "$1").out" 2> "$TMP2/$(basename "$1").err"; }
run_rec "$TMP/demo.db" "$TRAIN" --model tiny -B 4 -T 64 --steps 4 || fail "demo-like run failed"
GPUMEM_LIMIT=8G GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G run_rec "$TMP/oom.db" "$TRAIN" \
  --model gpt2-medium -B 8 -T 1024 --dry-run --steps 1 && fail "the OOM example did not fail"
out=$TMP/all.txt
: > "$out"
for db in demo oom; do
  cat "$TMP/$db.db.err" >> "$out"
  "$GM" report "$TMP/$db.db" >> "$out" || fail "report $db"
  "$GM" leaks "$TMP/$db.db" >> "$out" || true
  "$GM" export --format trace "$TMP/$db.db" -o "$TMP/$db.trace" >> "$out" 2>&1 || fail "export $db"
  "$GM" uses "$TMP/$db.db" --name 'h0.mlp.fc' --top 1 >> "$out" 2>&1 || true
done
"$GM" --help >> "$out"
for c in record report leaks sql export uses advise frag tune diff viz import; do "$GM" "$c" --help >> "$out"; done
[[ $(wc -l < "$out") -gt 100 ]] || fail "too little output to review"

# 1. every command a line names exists. "gpumem <word>" is a command unless the word is plain
#    English ("gpumem database", "gpumem says"): those are listed, anything else must run.
prose=" database databases says or and loaded is was sim recorder serves stays keeps maps never can does reads writes holds took "
cmds=$(grep -oE '([^ `]*/)?gpumem [a-z]+' "$out" | awk '{ print $NF }' | sort -u)
n=0
for c in $cmds; do
  [[ $prose == *" $c "* ]] && continue
  "$GM" "$c" --help > /dev/null 2>&1 || fail "the output names 'gpumem $c', which is not a command"
  n=$((n + 1))
done
(( n >= 5 )) || fail "only $n commands named in the output: $cmds"
ok "$n commands named in the output, each one exists"

# 2. "X unit (N bytes" pairs agree, and the byte counts the summary quotes are the database's
bad=$(grep -oE '[0-9.]+ (B|KiB|MiB|GiB|TiB) \([0-9]+ bytes[ ,)]' "$out" | awk '
  { v = $1; u = $2; gsub(/\(/, "", $3); b = $3
    m = u == "B" ? 1 : u == "KiB" ? 1024 : u == "MiB" ? 1048576 : u == "GiB" ? 1073741824 : 1099511627776
    d = v * m - b; if (d < 0) d = -d
    if (d > 0.006 * m) print }')
[[ -z $bad ]] || fail "a size and its byte count disagree: $bad"
pairs=$(grep -oE '[0-9.]+ (B|KiB|MiB|GiB|TiB) \([0-9]+ bytes[ ,)]' "$out" | wc -l)
(( pairs >= 6 )) || fail "only $pairs size/byte pairs in the output: the check would check nothing"
for db in demo oom; do
  "$GM" report --json "$TMP/$db.db" > "$TMP/$db.json"
  "$GM" report "$TMP/$db.db" > "$TMP/$db.txt"
  for k in peak_requested peak_allocated; do
    want=$(jq -r ".summary.$k" "$TMP/$db.json")
    label=${k/_/ }
    grep -qE "^  $label +[0-9.]+ [KMGT]?i?B \($want bytes" "$TMP/$db.txt" || fail "$db: the text's $label is not the database's ($want)"
  done
  # where the peak was: the tensor and phase are those of the allocation born at that event
  seq=$(jq -r '.peak_requested_at.seq' "$TMP/$db.json")
  read -r name phase < <("$GM" sql "$TMP/$db.db" -c "SELECT coalesce(name, '-'), coalesce(phase, '-') FROM allocations WHERE id = $seq" | tail -1 | tr '|' ' ')
  [[ $(jq -r '.peak_requested_at.name' "$TMP/$db.json") == "$name" && $(jq -r '.peak_requested_at.phase' "$TMP/$db.json") == "$phase" ]] \
    || fail "$db: the peak is placed at $(jq -c .peak_requested_at "$TMP/$db.json"), the database says $name in $phase"
done
# the OOM's request, name and shortfall are the database's
req=$("$GM" sql "$TMP/oom.db" -c "SELECT requested FROM ooms ORDER BY seq LIMIT 1" | tail -1)
grep -q "requested [0-9.]* [KMGT]iB ($req bytes) for h12.attn.scores" "$TMP/oom.txt" || fail "the OOM line does not quote the database's request ($req)"
sf=$(jq -r '.ooms[0].shortfall' "$TMP/oom.json")
grep -q "fell short by [0-9.]* [KMGT]\?i\?B ($sf bytes)" "$TMP/oom.txt" || fail "the OOM shortfall in text is not the JSON's ($sf)"
ok "byte counts, peaks and the OOM quoted in the text are the database's"

# 3. the overview tells of every command there is, and --version of the schema it writes
for c in $(grep -oE 'strcmp\(c, "[a-z]+"\) == 0' snapshot/gpumem.c | grep -oE '"[a-z]+"' | tr -d '"'); do
  [[ $c == help ]] && continue # gpumem help: the overview itself
  "$GM" --help | grepq -E "^  $c " || fail "gpumem --help does not list '$c'"
done
want=$("$GM" sql "$TMP/demo.db" -c "SELECT (SELECT value FROM meta WHERE key = 'schema_major') || '.' || (SELECT value FROM meta WHERE key = 'schema_minor')" | tail -1)
"$GM" --version | grepq -F "(database schema $want)" || fail "gpumem --version says '$("$GM" --version)', a recording says schema $want"
ok "gpumem --help lists every command; --version names schema $want, the one a recording has"
