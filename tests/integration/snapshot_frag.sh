#!/usr/bin/env bash
# gpumem frag: where reserved - allocated goes, and the setting that gives it back.
#  1. The trainer (GPT-2 124M, B 8, T 1024, --seq-jitter, 20 steps, dry run on an 80 GB virtual
#     GPU) recorded under PyTorch's classic policy: at the reserved peak >= 80% of reserved -
#     allocated is attributed to named causes; a fix is found; re-run with it (--check), the
#     measured peak reserved is within 1% of the prediction and >= 30% below the recording's.
#  2. An OOM caused by fragmentation (tests/apps/frag_app.c): frag and report both say so.
#  3. The events read from the table's pages and through SQLite (GPUMEM_SWEEP=sql) give the same
#     output, on both recordings and on a copy whose page the page reader refuses mid-table.
#  4. Usage and bad input: clear errors and exit codes.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../pipe.bash" # grepq
BUILD=${BUILD:-build}
GM=$BUILD/gpumem TRAIN=$BUILD/train_gpt2_sim APP=$BUILD/tests/apps/frag_app
for f in "$GM" "$TRAIN" "$APP"; do [[ -x $f ]] || { echo "snapshot_frag: $f not built" >&2; exit 1; }; done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gmfrag-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail() { echo "snapshot_frag: FAIL: $*" >&2; exit 1; }
export GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G

# 1. the pytorch-preset run
GPUMEM_CONF=preset:pytorch "$GM" record -q -o "$TMP/pt.db" -- "$TRAIN" --model gpt2 -B 8 -T 1024 \
  --dry-run --steps 20 --seq-jitter --seed 5 > "$TMP/train.txt" 2>&1 || { tail -5 "$TMP/train.txt"; fail "recording"; }
"$GM" frag --json --check "$TMP/pt.db" > "$TMP/frag.json" || fail "frag --json --check exited $?"
jq -e . "$TMP/frag.json" > /dev/null || fail "frag --json is not JSON"
read -r recorded replayed attributed gap nfix predicted measured conf < <(jq -r '[.recorded.peak_reserved,
  .recorded.replayed_peak_reserved, .at_peak.attributed_pct, (.at_peak.reserved - .at_peak.allocated),
  (.fixes | length), .check.predicted_peak_reserved, .check.measured_peak_reserved, .check.conf] | @tsv' "$TMP/frag.json")
echo "recorded $recorded replayed $replayed attributed $attributed% of $gap; $nfix fixes; best $conf: predicted $predicted measured $measured"
[[ $recorded == "$replayed" ]] || fail "the recorded configuration replays to $replayed, recorded $recorded"
awk -v a="$attributed" 'BEGIN { exit !(a >= 80) }' || fail "only $attributed% of the gap attributed"
(( gap > 0 && nfix > 0 )) || fail "no gap ($gap) or no fix ($nfix)"
# every cause's bytes add up to reserved - requested, each byte once
jq -e '.at_peak | ([.causes[].bytes] | add) == (.reserved - .requested)' "$TMP/frag.json" > /dev/null \
  || fail "the causes do not add up to reserved - requested"
jq -e '.at_peak.causes | map(.cause) | all(. as $c | ["rounding","pending_free","other_stream","other_pool","pinned","segment_tail","granularity","size_class","cached","unattributed"] | index($c))' \
  "$TMP/frag.json" > /dev/null || fail "a cause outside the documented names"
awk -v p="$predicted" -v m="$measured" 'BEGIN { d = m - p; if (d < 0) d = -d; exit !(d <= 0.01 * p) }' \
  || fail "measured $measured is not within 1% of predicted $predicted"
awk -v r="$recorded" -v m="$measured" 'BEGIN { exit !(m <= 0.7 * r) }' || fail "measured $measured is not 30% below $recorded"
# the JSON contract's fields
jq -e '.at_peak | has("seq") and has("requested") and has("allocated") and has("reserved") and has("free_cached")
  and has("largest_free") and (.causes | all(has("cause") and has("bytes") and has("detail")))' "$TMP/frag.json" > /dev/null \
  || fail "at_peak misses a contract field"
jq -e '.fixes | all(has("conf") and has("pytorch_conf") and has("predicted_peak_reserved"))' "$TMP/frag.json" > /dev/null \
  || fail "a fix misses a contract field"
jq -e '[.fixes[] | select(.pytorch_conf == "expandable_segments:True")] | length == 1' \
  "$TMP/frag.json" > /dev/null || fail "expandable segments is not offered with its PyTorch equivalent"
# text: the same figures as the JSON
"$GM" frag "$TMP/pt.db" > "$TMP/frag.txt" || fail "frag (text) exited $?"
for s in "Reserved - allocated over time (per step" "At the reserved peak" "the request that grew reserved" \
         "causes (share of reserved - requested)" "recommended: GPUMEM_CONF=" "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"; do
  grep -qF "$s" "$TMP/frag.txt" || fail "text output lacks '$s'"
done
# every step of the JSON's timeline is in one text row (alike neighbours share one, "2-4"), or
# in the "..." a long run leaves out between its first and last six rows
steps=$(jq '.timeline | length' "$TMP/frag.json")
(( steps >= 20 )) || fail "timeline has $steps steps, want 20"
python3 - "$TMP/frag.txt" "$TMP/frag.json" <<'PY' || fail "frag's per-step rows do not cover the JSON's timeline"
import json, re, sys
text, j = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
table = text.split("Reserved - allocated over time")[1].split("\n\n")[0].split("\n")[2:]
rows = [re.match(r"\s+(\d+)(?:-(\d+))?\s", l) for l in table if l.strip() != "..."]
spans = [(int(m.group(1)), int(m.group(2) or m.group(1))) for m in rows]
gap = any(l.strip() == "..." for l in table)
assert len(spans) <= 12, spans
steps = [p["step"] for p in j["timeline"]]
covered = {s for a, b in spans for s in steps if a <= s <= b}
assert gap or covered == set(steps), (spans, steps)
assert steps[0] in covered and steps[-1] in covered
PY

# 2. an OOM caused by fragmentation
GPUMEM_CONF=preset:pytorch,limit:64M "$GM" record -q -o "$TMP/oom.db" -- "$APP" > "$TMP/app.txt" 2>&1 || true
grep -q "8 MiB after freeing every other 4 MiB block: out of memory" "$TMP/app.txt" \
  || { cat "$TMP/app.txt"; fail "frag_app did not meet its OOM"; }
"$GM" frag --json "$TMP/oom.db" > "$TMP/oom.json" || fail "frag on the OOM recording exited $?"
jq -e '(.ooms | length) == 1 and .ooms[0].fragmentation == true and .ooms[0].request.size == 8388608
  and .ooms[0].free_cached >= 8388608 and .ooms[0].largest_free < 8388608' "$TMP/oom.json" > /dev/null \
  || { jq -c '.ooms' "$TMP/oom.json"; fail "the OOM is not shown as fragmentation"; }
jq -e '.ooms[0] | ([.causes[] | select(.cause == "pinned" or .cause == "segment_tail") | .bytes] | add) >= 8388608' \
  "$TMP/oom.json" > /dev/null || fail "the OOM's free fragments are not attributed to pinned classic segments"
# the recorded configuration replays into the same OOM; a fix is one that avoids it
# (PyTorch's expandable segments map 20 MiB pages: each one holds a live 4 MiB block here, so
# under this limit they meet the OOM too; gpumem's 2 MiB pages do not)
jq -e '.recorded.replay_oom == true and (.fixes | length) > 0
  and ([.fixes[] | select(.conf == "preset:gpumem,limit:64M")] | length) == 1' "$TMP/oom.json" > /dev/null \
  || { jq -c '{recorded, fixes}' "$TMP/oom.json"; fail "no fix that avoids the fragmentation OOM"; }
"$GM" frag "$TMP/oom.db" > "$TMP/oom.txt"
grep -q "fragmentation: free in fragments" "$TMP/oom.txt" || fail "frag text does not call the OOM fragmentation"
"$GM" report "$TMP/oom.db" > "$TMP/report.txt" || true
grep -q "fragmentation" "$TMP/report.txt" || fail "report does not call the OOM fragmentation"
grep -q "gpumem frag" "$TMP/report.txt" || fail "report does not point to gpumem frag"

# 3. the page reader and SQLite: the same rows, the same output. In the copy, one event's t is
# text (SQLite's file is valid; the page reader gives up there after rows were swept, and the
# sweep starts again through SQLite).
cp "$TMP/pt.db" "$TMP/text.db"
sqlite3 "$TMP/text.db" "UPDATE events SET t = 'x' WHERE seq = (SELECT min(seq) FROM events WHERE seq >= (SELECT max(seq) FROM events) / 2)"
for db in pt oom text; do
  "$GM" frag --json "$TMP/$db.db" > "$TMP/$db.pages.json" || fail "frag on $db.db exited $?"
  GPUMEM_SWEEP=sql "$GM" frag --json "$TMP/$db.db" > "$TMP/$db.sql.json" || fail "frag (SQLite) on $db.db exited $?"
  cmp -s "$TMP/$db.pages.json" "$TMP/$db.sql.json" || fail "frag on $db.db: the pages and SQLite differ"
done
jq -e '.timeline | length >= 20' "$TMP/text.pages.json" > /dev/null || fail "text.db: the timeline is cut short"

# 4. usage and bad input
set +e
"$GM" frag > /dev/null 2>&1; [[ $? == 2 ]] || fail "no database: want exit 2"
"$GM" frag --top 0 "$TMP/pt.db" > /dev/null 2>&1; [[ $? == 2 ]] || fail "--top 0: want exit 2"
"$GM" frag --bogus "$TMP/pt.db" > /dev/null 2>&1; [[ $? == 2 ]] || fail "unknown option: want exit 2"
"$GM" frag "$TMP/missing.db" > /dev/null 2> "$TMP/err.txt"; [[ $? == 3 ]] || fail "missing database: want exit 3"
head -c 4096 /dev/urandom > "$TMP/junk.db"
"$GM" frag "$TMP/junk.db" > /dev/null 2>&1; [[ $? == 3 ]] || fail "junk database: want exit 3"
"$GM" frag --help | grepq "usage: gpumem frag" || fail "--help"
set -e
echo "snapshot_frag: ok"
