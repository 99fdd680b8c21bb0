#!/usr/bin/env bash
# Access tracking on the trainer (GPUMEM_USES=1): the recorded `launch` events and `uses` rows
# agree with what the trainer knows it did.
#   (a) the number of events of kind 20 ('launch') equals the trainer's own count of the
#       kernel launches, copies and memsets it issued (its LAUNCHES line), and so does each
#       kind separately (launches.op 0 kernel, 1 copy, 2 memset);
#   (b) every tensor's uses fall in the phases its lifetime says (train/README.md's table;
#       phase = the second component of the NVTX path of the launch, 'step 1/fwd/h0/ln1'):
#       every saved activation (h*.ln1, h*.attn.qkv, h*.mlp.fc, ..., encoded, lnf, probs,
#       tokens, targets) is used in fwd and in bwd and never in opt; forward temporaries
#       (attention scores, projections before the residual add, the losses) only in fwd;
#       backward temporaries (d_*) only in bwd. `logits` is kept until the backward starts
#       (a framework's lifetime, README) but backward never reads it (the fused softmax +
#       cross-entropy backward needs only probs): used in fwd only, the idle tensor the uses
#       make visible;
#   (c) parameters are used in fwd and opt (and copied in at start, outside any range);
#       those backward reads (the weights of matmuls and layernorms, wte) also in bwd, the
#       ones it never needs (biases, wpe: d(xW+b)/dx does not involve b) never in bwd;
#       gradients in bwd and opt only; AdamW's m and v (adam.m.*, adam.v.*) only in opt.
# Every named allocation must fall in one class: a tensor the table does not know fails.
# Then (a) and (b) on a memory-only gpt2 124M run (B 8, T 1024, 1 step, --dry-run on an
# unbacked 80G virtual device): the dry run launches every kernel with its real arguments.
source "$(dirname "$0")/e2e_common.bash"
export GPUMEM_USES=1 GPUMEM_STACKS=0

# phases DB -> "id name fwd bwd opt other" per named allocation (counts of uses)
phases() {
  "$GM" sql "$1" -c "
    WITH p AS (
      SELECT u.birth AS id,
             CASE WHEN r.path GLOB 'step */fwd' OR r.path GLOB 'step */fwd/*' THEN 'fwd'
                  WHEN r.path GLOB 'step */bwd' OR r.path GLOB 'step */bwd/*' THEN 'bwd'
                  WHEN r.path GLOB 'step */opt' OR r.path GLOB 'step */opt/*' THEN 'opt'
                  ELSE 'other' END AS ph
      FROM uses u JOIN events e ON e.seq = u.seq LEFT JOIN ranges r ON r.id = e.range)
    SELECT a.id, a.name, coalesce(sum(p.ph = 'fwd'), 0), coalesce(sum(p.ph = 'bwd'), 0),
           coalesce(sum(p.ph = 'opt'), 0), coalesce(sum(p.ph = 'other'), 0)
    FROM allocations a LEFT JOIN p ON p.id = a.id
    WHERE a.name IS NOT NULL GROUP BY a.id ORDER BY a.id" | tail -n +2 | tr '|' ' '
}

# check_counts DB TRAINER_OUTPUT: (a)
check_counts() {
  local db=$1 out=$2 k c m ev ops
  read -r k c m < <(awk '$1 == "LAUNCHES" { print $2, $4, $6 }' "$out")
  [[ -n ${k:-} ]] || fail "no LAUNCHES line in the trainer's output"
  [[ $k -gt 0 ]] || fail "the trainer launched no kernel"
  ev=$("$GM" sql "$db" -c 'SELECT count(*) FROM events WHERE kind = 20' | tail -1)
  [[ $ev == $((k + c + m)) ]] \
    || fail "$ev launch events, the trainer issued $((k + c + m)) ($k kernels, $c copies, $m memsets)"
  ops=$("$GM" sql "$db" -c 'SELECT (SELECT count(*) FROM launches WHERE op = 0) || " " ||
      (SELECT count(*) FROM launches WHERE op = 1) || " " || (SELECT count(*) FROM launches WHERE op = 2)' | tail -1)
  [[ $ops == "$k $c $m" ]] || fail "launches by op (kernel copy memset) '$ops', the trainer's '$k $c $m'"
  ok "$ev launch events = the trainer's LAUNCHES ($k kernels, $c copies, $m memsets), each kind too"
}

# classify: reads `phases` rows, prints a FAIL line per allocation out of its class and a
# summary "<class> <count>" per class.
classify() {
  awk '
    function want(cls, f, b, o, x) {
      n[cls]++
      if ((f == "+" ? fwd > 0 : fwd == 0) && (b == "+" ? bwd > 0 : bwd == 0) &&
          (o == "+" ? opt > 0 : opt == 0) && (x == "*" || other == 0)) return
      printf "BAD %s %s (id %s): fwd %d bwd %d opt %d other %d, want fwd%s bwd%s opt%s\n",
             cls, name, id, fwd, bwd, opt, other, f, b, o
    }
    {
      id = $1; name = $2; fwd = $3; bwd = $4; opt = $5; other = $6
      layer = name ~ /^h[0-9]+\./; base = name; sub(/^h[0-9]+\./, "", base)
      if (name ~ /^adam\.[mv]\./)                                  want("adam_state", "-", "-", "+", "-")
      else if (name ~ /^grad\./)                                   want("gradient", "-", "+", "+", "-")
      else if (name ~ /^(wte|lnf_w)$/ || layer && base ~ /^(ln1_w|ln2_w|qkv_w|attproj_w|fc_w|fcproj_w)$/)
                                                                   want("param_bwd_read", "+", "+", "+", "*")
      else if (name ~ /^(wpe|lnf_b)$/ || layer && base ~ /^(ln1_b|ln2_b|qkv_b|attproj_b|fc_b|fcproj_b)$/)
                                                                   want("param_fwd_only", "+", "-", "+", "*")
      else if (name == "logits")                                   want("kept_unused", "+", "-", "-", "-")
      else if (name ~ /^(encoded|lnf|lnf\.mean|lnf\.rstd|probs|tokens|targets)$/ || layer &&
               base ~ /^(ln1|ln1\.mean|ln1\.rstd|attn\.qkv|attn\.out|attn\.lse|res2|ln2|ln2\.mean|ln2\.rstd|mlp\.fc|mlp\.gelu|res3)$/)
                                                                   want("saved_activation", "+", "+", "-", "-")
      else if (name == "losses" || layer && base ~ /^(attn\.scores|attn\.proj|mlp\.proj)$/)
                                                                   want("fwd_temporary", "+", "-", "-", "-")
      else if (name ~ /^(d_logits|d_lnf|d_residual)$/ || layer &&
               base ~ /^(mlp\.d_gelu|mlp\.d_fc|d_ln2|attn\.d_out|attn\.d_qkv|attn\.d_scores|d_ln1)$/)
                                                                   want("bwd_temporary", "-", "+", "-", "-")
      else printf "BAD unknown %s (id %s): not in the trainer'"'"'s tensor table\n", name, id
    }
    END { for (c in n) print "CLASS", c, n[c] }'
}

# ---- the tiny model, real compute, 2 steps (the second has gradients and AdamW state) ------
"$GM" record -q -o "$TMP/tiny.db" -- "$TRAIN" --model tiny --data "$TEXT" --steps 2 -B 4 -T 64 \
  > "$TMP/tiny.txt" 2>&1 || fail "trainer under gpumem with GPUMEM_USES=1: $(tail -3 "$TMP/tiny.txt")"
[[ $("$GM" sql "$TMP/tiny.db" -c "SELECT value FROM meta WHERE key = 'uses'" | tail -1) == 1 ]] \
  || fail "meta.uses is not 1: access tracking was not on"
# every kernel of the trainer's has a layout the (virtual) driver gives: no launch is unread
[[ $("$GM" sql "$TMP/tiny.db" -c "SELECT value FROM meta WHERE key = 'launches_unread'" | tail -1) == 0 ]] \
  || fail "meta.launches_unread is not 0: some of the trainer's launches were taken for unreadable"
check_counts "$TMP/tiny.db" "$TMP/tiny.txt"
phases "$TMP/tiny.db" | classify > "$TMP/tiny.cls"
if grep -q '^BAD' "$TMP/tiny.cls"; then grep '^BAD' "$TMP/tiny.cls" | head -20 >&2; fail "uses out of their phases (above)"; fi
# L = 2: per step 2 x 13 + 7 saved activations, 1 kept unused (logits); 4 + 2 x 12 parameters, as many gradients, m, v
declare -A want=([saved_activation]=$((2 * (2 * 13 + 7))) [kept_unused]=2 [param_bwd_read]=$((2 + 2 * 6))
                 [param_fwd_only]=$((2 + 2 * 6)) [gradient]=28 [adam_state]=56)
for c in "${!want[@]}"; do
  got=$(awk -v c="$c" '$1 == "CLASS" && $2 == c { print $3 }' "$TMP/tiny.cls")
  [[ ${got:-0} == "${want[$c]}" ]] || fail "$c: ${got:-0} allocations, expected ${want[$c]}"
done
ok "tiny, 2 steps: every tensor's uses in its phases: $(awk '$1 == "CLASS" { printf "%s %s, ", $2, $3 }' "$TMP/tiny.cls" | sed 's/, $//')"

# ---- gpt2 124M, memory only: a complete use record without compute ------------------------
start=$(date +%s.%N)
GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G "$GM" record -q -o "$TMP/gpt2.db" -- "$TRAIN" \
  --model gpt2 -B 8 -T 1024 --steps 1 --dry-run > "$TMP/gpt2.txt" 2>&1 \
  || fail "gpt2 dry run under gpumem: $(tail -3 "$TMP/gpt2.txt")"
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
check_counts "$TMP/gpt2.db" "$TMP/gpt2.txt"
phases "$TMP/gpt2.db" | classify > "$TMP/gpt2.cls"
saved=$(awk '$1 == "CLASS" && $2 == "saved_activation" { print $3 }' "$TMP/gpt2.cls")
[[ ${saved:-0} == $((12 * 13 + 7)) ]] || fail "gpt2: ${saved:-0} saved activations, expected $((12 * 13 + 7))"
if grep -q '^BAD' "$TMP/gpt2.cls"; then grep '^BAD' "$TMP/gpt2.cls" | head -20 >&2; fail "gpt2 dry run: uses out of their phases (above)"; fi
ok "gpt2 124M B=8 T=1024 dry run (recorded in ${secs}s): $saved saved activations used in fwd and bwd, every tensor in its phases"

# ---- gpumem report names the largest idle-at-peak tensor classes -------------------------
# At the peak (start of backward) the forward activations of every layer sit idle until their
# layer's backward: the classes that hold the most bytes must be the activations and the
# logits/probabilities, each with a last use before the peak and (but logits) a next use after.
"$GM" report --json "$TMP/gpt2.db" > "$TMP/gpt2.json" || fail "report --json on the gpt2 run"
[[ $(jq -r '.idle_at_peak.uses' "$TMP/gpt2.json") == true ]] || fail "gpt2: no idle-at-peak analysis"
top=$(jq -r '[.idle_at_peak.classes[:8][].name] | join(" ")' "$TMP/gpt2.json")
for c in 'h*.mlp.fc' 'h*.mlp.gelu' 'h*.attn.qkv' probs; do
  [[ " $top " == *" $c "* ]] || fail "gpt2: '$c' is not among the largest idle-at-peak classes ($top)"
done
jq -e '.idle_at_peak.classes[] | select(.name == "h*.mlp.fc")
       | .since_last_use_events > 0 and .until_next_use_events > 0 and .count == 12' "$TMP/gpt2.json" > /dev/null \
  || fail "gpt2: h*.mlp.fc has no gaps on both sides of the peak"
"$GM" report "$TMP/gpt2.db" > "$TMP/gpt2.rep"
grep -q "^Idle at the peak: " "$TMP/gpt2.rep" && grep -q "h\*.mlp.fc" "$TMP/gpt2.rep" \
  || fail "gpt2: the text report lacks the idle-at-peak section"
ok "gpt2 124M dry run: the largest idle-at-peak classes are named ($top)"
