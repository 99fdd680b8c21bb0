#!/usr/bin/env bash
# Time-correct joins: one address handed out three times, as "first" (step 1, grows reserved,
# live at the peak snapshot), "second" (step 2, live at the last snapshot: a user one, no exit
# snapshot, as in a killed recording) and "third" (step 3, never freed), each used by its own
# kernel (snapshot_app reuse). Every command names, uses and frames each allocation as its own —
# joined by identity (birth seq, the allocator's id), never by the address alone, which would
# give the last name or call site the address had.
source "$(dirname "$0")/snapshot_common.bash"
need "$GPUMEM" "$APP"
db=$TMP/reuse.db
GPUMEM_DB=$db GPUMEM_USES=1 "$APP" reuse || fail "snapshot_app reuse exited $?"
q() { "$GPUMEM" sql "$db" -c "$1" | tail -n +2; }
born() { q "SELECT birth_seq FROM allocations WHERE name = '$1'"; }
b1=$(born first) b2=$(born second) b3=$(born third)
[[ -n $b1 && -n $b2 && -n $b3 ]] || fail "the three allocations are not in the recording"
[[ $(q "SELECT count(DISTINCT address) FROM allocations") == 1 ]] || fail "not one address"

# the recorder: each names row carries the allocation it names
bad=$(q "SELECT count(*) FROM names n JOIN strings s ON s.id = n.name
         WHERE n.birth IS NOT (SELECT birth_seq FROM allocations WHERE name = s.s)")
[[ $bad == 0 ]] || fail "$bad names rows do not carry their allocation's birth"
echo "ok: names.birth = the named allocation's birth ($b1, $b2, $b3)"

# report: the peak is first's
"$GPUMEM" report --json "$db" > "$TMP/report.json" || fail "report exited $?"
for k in peak_allocated_at peak_requested_at; do
  [[ $(jq -r ".$k.name" "$TMP/report.json") == first ]] || fail "report .$k: $(jq -c ".$k" "$TMP/report.json")"
done
"$GPUMEM" report "$db" | grepq "when first was allocated in step 1/fwd" || fail "report text: peak not first's"
echo "ok: report: the peak's allocation is first"

# leaks: only third is alive at exit
"$GPUMEM" leaks --json "$db" > "$TMP/leaks.json"
[[ $(jq -c '[.by_name[].name]' "$TMP/leaks.json") == '["third"]' ]] || fail "leaks by name: $(jq -c .by_name "$TMP/leaks.json")"
[[ $(jq -r '.leaks[0].name' "$TMP/leaks.json") == third ]] || fail "leaks: $(jq -c .leaks "$TMP/leaks.json")"
echo "ok: leaks: third"

# frag: the request that grew reserved is first (event b1), not a later name at its address
"$GPUMEM" frag "$db" > "$TMP/frag.txt" || fail "frag exited $?"
grep -q "the request that grew reserved: 1.00 MiB, first in step 1/fwd .*(event $b1)" "$TMP/frag.txt" \
  || fail "frag: $(grep 'grew reserved' "$TMP/frag.txt")"
echo "ok: frag: the request that grew reserved is first (event $b1)"

# uses: each allocation's own kernel, once
for n in first second third; do
  "$GPUMEM" uses "$db" --name "$n" --json > "$TMP/uses.json" || fail "uses --name $n exited $?"
  got=$(jq -c '[.allocations[] | {id, name, k: [.uses[].kernel]}]' "$TMP/uses.json")
  want="[{\"id\":$(born $n),\"name\":\"$n\",\"k\":[\"k_$n\"]}]"
  [[ $got == "$want" ]] || fail "uses --name $n: $got, wanted $want"
done
echo "ok: uses: each allocation used by its own kernel only"

# exports: csv (the allocations view), chrome (async slices: id = birth, name), trace (ids)
"$GPUMEM" export --format csv "$db" | awk -F, 'NR > 1 { print $1, $NF }' > "$TMP/csv.txt"
printf '%s first\n%s second\n%s third\n' "$b1" "$b2" "$b3" | cmp -s - "$TMP/csv.txt" || fail "csv: $(cat "$TMP/csv.txt")"
"$GPUMEM" export --format chrome "$db" \
  | jq -r '.traceEvents[] | select(.ph == "b" or .ph == "e") | "\(.ph) \(.id) \(.name)"' | sort > "$TMP/chrome.txt"
for ph in b e; do
  printf "$ph 0x%x first\n$ph 0x%x second\n$ph 0x%x third\n" "$b1" "$b2" "$b3"
done | sort | cmp -s - "$TMP/chrome.txt" || fail "chrome slices: $(tr '\n' ';' < "$TMP/chrome.txt")"
"$GPUMEM" export --format trace "$db" | grep -v '^#' | tr '\n' ' ' > "$TMP/trace.txt"
[[ $(cat "$TMP/trace.txt") == "a $b1 1048576 0 f $b1 a $b2 1048576 0 f $b2 a $b3 1048576 0 " ]] \
  || fail "trace: $(cat "$TMP/trace.txt")"
echo "ok: export csv, chrome, trace: each allocation under its own name and id"

# torch, at the moment of the recording's last snapshot (second live; by default the export holds
# the state at the peak, when first was): its block's frames are second's, not the address's
# last holder's
snapseq=$("$GPUMEM" sql "$db" -c "SELECT seq FROM snapshots ORDER BY id DESC LIMIT 1" | tail -1)
"$GPUMEM" export --format torch --at "$snapseq" "$db" -o "$TMP/snap.pickle" || fail "export torch exited $?"
python3 - "$TMP/snap.pickle" <<'EOF' || fail "torch snapshot: the block's frames are not second's"
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
allocs = [e for e in d["device_traces"][0] if e["action"] == "alloc"]
assert len(allocs) == 3, allocs
blocks = [b for s in d["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
assert len(blocks) == 1, blocks
f = [(x["filename"], x["line"], x["name"]) for x in blocks[0]["frames"]]
want = [(x["filename"], x["line"], x["name"]) for x in allocs[1]["frames"]]
assert f and f == want, (f, want)
assert f != [(x["filename"], x["line"], x["name"]) for x in allocs[2]["frames"]]
EOF
echo "ok: export torch: the last snapshot's block has second's frames"

# viz: the peak snapshot's allocated block is of class "first"
"$GPUMEM" viz "$db" -o "$TMP/page.html" || fail "viz exited $?"
sed -n 's/^const D = \(.*\);$/\1/p' "$TMP/page.html" > "$TMP/page.json"
got=$(jq -r '.classes as $c | .snapshots[] | select(.reason == "peak") | .segments[].blocks[]
             | select(.[2] == 1) | if .[3] >= 0 then $c[.[3]] else "none" end' "$TMP/page.json")
[[ $got == first ]] || fail "viz: the peak snapshot's block is of class '$got', not first"
echo "ok: viz: the peak snapshot's block is first's"
