#!/usr/bin/env bash
# torch_ops.sh — `gpumem record --torch-ops` (GPUMEM_TORCH_OPS=1): the forward's dataflow, op by op,
# merged as torch_ops / torch_op_args (snapshot/README.md), on the tiny GPT-2 script:
#   - the log changes no allocation: PyTorch's allocations (their requested sizes, in order) and the
#     script's max_memory_allocated/reserved() are those of the same run without it (with gpumem as
#     PyTorch's allocator too: gpumem's allocations, and the figures gpumem gives the script);
#   - every storage is matched to its allocation (meta.torch_op_args_unmatched = 0), with the
#     allocation's requested size as its bytes, born at or before the op's seq; a view's own bytes
#     (tensor_bytes) are its part of the storage;
#   - the dataflow: each block's MLP c_fc addmm reads the parameter named h.N.mlp.c_fc.weight and
#     writes (B, T, 4C) fp32; under --autocast bf16 it writes bf16 (half the bytes) and a
#     _to_copy makes the weight's bf16 copy; its backward node (the same autograd node) is given
#     its output's gradient;
#   - advise --try '--autocast bf16' --check on the fp32 recording: predicted within 2% of the
#     re-run (autocast op by op from the log, ADVISE.md);
#   - the same under --allocator gpumem (no history: ops placed by the recorder's seq), with its
#     autocast prediction checked the same way;
#   - without --torch-ops there is no such table, and report reads the recording as before.
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/train_gpt2.py
args=(--model tiny -B 4 -T 64 --steps 2)
B=4 T=64 C=64

rec() { # rec NAME [record options] -- [script flags]
  local name=$1; shift
  local ropts=()
  while [[ $1 != -- ]]; do ropts+=("$1"); shift; done
  shift
  GPUMEM_SIM_BACKING=memory "$G" record -q "${ropts[@]}" -o "$tmp/$name.db" -- "$torch_py" "$script" "${args[@]}" "$@" \
    > "$tmp/$name.out" 2>&1 || bad "$name: recording failed: $(tail -3 "$tmp/$name.out")"
}
# q NAME SQL: a query of NAME's recording; fails (never an empty answer) when it was not made
q() { [[ -s $tmp/$1.db ]] && sqlite3 -bail "$tmp/$1.db" "$2"; }
rec plain --
rec ops --torch-ops --
rec bf16 --torch-ops -- --autocast bf16

# the log changes nothing the program allocates
reqs() { q "$1" "SELECT group_concat(requested) FROM (SELECT requested FROM events WHERE kind = 31 ORDER BY seq)"; }
stats() { grep -E '^max_memory_(allocated|reserved) ' "$tmp/$1.out"; }
[[ -n $(reqs plain) && $(reqs plain) == "$(reqs ops)" ]] \
  && ok "the op log changes no allocation ($(q ops "SELECT count(*) FROM events WHERE kind = 31") of PyTorch's, in order)" \
  || bad "PyTorch's allocations differ with the op log"
[[ -n $(stats plain) && $(stats plain) == "$(stats ops)" ]] && ok "and the same max_memory_allocated/reserved(): $(stats ops | tr '\n' ' ')" \
  || bad "max_memory_* differ: $(stats plain | tr '\n' ' ') / $(stats ops | tr '\n' ' ')"

for r in ops bf16; do
  n=$(q $r "SELECT value FROM meta WHERE key = 'torch_ops'")
  um=$(q $r "SELECT value FROM meta WHERE key = 'torch_op_args_unmatched'")
  [[ $n -gt 50 && $um == 0 ]] && ok "$r: $n ops logged, every storage matched to its allocation" || bad "$r: $n ops, $um storages unmatched"
  nb=$(q $r "SELECT count(*) FROM torch_op_args a JOIN events e ON e.seq = a.birth
             WHERE e.kind != 31 OR a.bytes != e.requested OR a.birth > (SELECT seq FROM torch_ops WHERE id = a.op)")
  na=$(q $r "SELECT count(*) FROM torch_op_args")
  [[ $na -gt 0 && $nb == 0 ]] && ok "$r: each of $na storages is a PyTorch allocation of its bytes, born by its op's seq" \
    || bad "$r: $nb of $na storages are not their allocation (kind, bytes or birth after the op)"
done

# the dataflow: c_fc's addmm reads its weight and writes (B, T, 4C)
fc="SELECT o.id FROM torch_ops o JOIN strings s ON s.id = o.op
    JOIN torch_op_args w ON w.op = o.id AND w.out = 0 JOIN names n ON n.birth = w.birth JOIN strings ns ON ns.id = n.name
    WHERE s.s = 'aten.addmm.default' AND ns.s LIKE 'h._.mlp.c_fc.weight'"
out_of() { q "$1" "SELECT group_concat(a.bytes || ' ' || d.s) FROM torch_op_args a JOIN strings d ON d.id = a.dtype
                   WHERE a.out = 1 AND a.op IN ($fc) GROUP BY a.op" | sort -u | tr '\n' ';'; }
[[ $(out_of ops) == "$((B * T * 4 * C * 4)) float32;" ]] && ok "ops: every c_fc addmm reads h.N.mlp.c_fc.weight, writes (B, T, 4C) fp32" \
  || bad "ops: c_fc's addmm outputs: '$(out_of ops)'"
nfc=$(q ops "SELECT count(*) FROM ($fc)")
[[ $nfc == 4 ]] && ok "ops: 4 of them (2 blocks, 2 steps)" || bad "ops: $nfc c_fc addmms found (want 4)"
# ... with its shapes: its output (B x T, 4C), its weight's transposed view (C, 4C)
shp=$(q ops "SELECT group_concat(a.out || ':' || a.shape, ' ') FROM torch_op_args a WHERE a.op = ($fc LIMIT 1)
             AND (a.out = 1 OR a.pos = 2)")
[[ $shp == "1:$((B * T)),$((4 * C)) 0:$C,$((4 * C))" ]] && ok "ops: c_fc's addmm shapes: $shp" || bad "ops: c_fc's addmm shapes: '$shp'"
# each module's forward starting and returning, balanced; the attention returning reads what it
# was passed (ln_1's output, B x T x C fp32: the reader keeps it until then)
mk() { q ops "SELECT count(*) FROM torch_ops o JOIN strings s ON s.id = o.op WHERE s.s LIKE '$1%'"; }
att=$(q ops "SELECT DISTINCT a.shape || ' ' || a.bytes FROM torch_ops o JOIN strings s ON s.id = o.op
             JOIN torch_op_args a ON a.op = o.id WHERE s.s = 'module_end:CausalSelfAttention'")
[[ $(mk module:) -gt 0 && $(mk module:) == "$(mk module_end:)" && $(mk module:CausalSelfAttention) == 4 &&
   $att == "$B,$T,$C $((B * T * C * 4))" ]] \
  && ok "ops: $(mk module:) module forwards started and as many returned; the attention's return reads its input ($att)" \
  || bad "ops: module marks: $(mk module:) started, $(mk module_end:) returned, $(mk module:CausalSelfAttention) attentions, its input '$att'"
# under autocast the matmul reads the weight's bf16 copy, made by _to_copy from the named weight
cast="SELECT c.id FROM torch_ops c JOIN strings s ON s.id = c.op JOIN torch_op_args w ON w.op = c.id AND w.out = 0
      JOIN names n ON n.birth = w.birth JOIN strings ns ON ns.id = n.name
      WHERE s.s = 'aten._to_copy.default' AND ns.s LIKE 'h._.mlp.c_fc.weight'"
cb=$(q bf16 "SELECT group_concat(DISTINCT a.bytes || ' ' || d.s) FROM torch_op_args a JOIN strings d ON d.id = a.dtype
             WHERE a.out = 1 AND a.op IN ($cast)")
[[ $cb == "$((C * 4 * C * 2)) bfloat16" ]] && ok "bf16: _to_copy makes c_fc's weight a (4C, C) bf16 copy" || bad "bf16: the weight's casts write '$cb'"
mm=$(q bf16 "SELECT group_concat(DISTINCT a.bytes || ' ' || d.s) FROM torch_op_args a JOIN strings d ON d.id = a.dtype
             JOIN torch_op_args i ON i.op = a.op AND i.out = 0 AND i.birth IN
               (SELECT x.birth FROM torch_op_args x WHERE x.out = 1 AND x.op IN ($cast))
             JOIN torch_ops o ON o.id = a.op JOIN strings s ON s.id = o.op
             WHERE a.out = 1 AND s.s = 'aten.addmm.default'")
[[ $mm == "$((B * T * 4 * C * 2)) bfloat16" ]] && ok "bf16: the addmm reading that copy writes (B, T, 4C) bf16" || bad "bf16: '$mm'"

# a view's own bytes: the embedding reads idx = x[:, :-1], (B, T) of x's (B, T + 1) int64 storage
emb=$(q ops "SELECT DISTINCT a.tensor_bytes || '/' || a.bytes FROM torch_op_args a JOIN torch_ops o ON o.id = a.op
             JOIN strings s ON s.id = o.op JOIN strings d ON d.id = a.dtype
             WHERE s.s = 'aten.embedding.default' AND a.out = 0 AND d.s = 'int64' AND a.bytes = $((B * (T + 1) * 8))")
[[ $emb == "$((B * T * 8))/$((B * (T + 1) * 8))" ]] && ok "ops: the embedding's index view: $emb bytes of its storage" || bad "ops: the embedding's index view: '$emb'"
nt=$(q ops "SELECT count(*) FROM torch_op_args WHERE tensor_bytes > bytes OR tensor_bytes IS NULL")
[[ $nt == 0 ]] && ok "ops: no tensor larger than its storage" || bad "ops: $nt tensors larger than their storage"

# the backward, node by node: the node of each c_fc addmm is given the gradient of its output,
# (B, T, 4C) fp32, made in the backward after the op
bw=$(q ops "SELECT DISTINCT g.bytes || ' ' || d.s || ' ' || (g.birth > f.seq) FROM torch_ops f
            JOIN torch_ops b ON b.node = f.node AND b.id > f.id JOIN strings bs ON bs.id = b.op
            JOIN torch_op_args g ON g.op = b.id AND g.pos = 0 JOIN strings d ON d.id = g.dtype
            WHERE f.id IN ($fc) AND bs.s = 'bwd:AddmmBackward0'")
[[ $bw == "$((B * T * 4 * C * 4)) float32 1" ]] && ok "ops: c_fc's AddmmBackward0 is given its output's gradient, (B, T, 4C) fp32" \
  || bad "ops: c_fc's backward node: '$bw'"

# advise predicts torch.autocast op by op from the log: re-run with --autocast bf16, within the bar
# autocast_check NAME WHAT: advise --try '--autocast bf16' --check on $tmp/NAME.db within the bar, and
# it says it read the op log (WHAT: the lines' prefix)
autocast_check() {
  local n=$1 what=$2 ac pa pr ma mr ea er
  GPUMEM_SIM_BACKING=memory "$G" advise --json --check --try '--autocast bf16' "$tmp/$n.db" > "$tmp/$n.ac.json" 2> "$tmp/$n.ac.err"
  ac=$(jq -r '.recommendations[] | select(.techniques == ["bf16"]) | "\(.predicted.peak_allocated) \(.predicted.peak_reserved) \(.measured.peak_allocated) \(.measured.peak_reserved) \(.measured.error_allocated_pct) \(.measured.error_reserved_pct)"' "$tmp/$n.ac.json")
  read -r pa pr ma mr ea er <<< "$ac"
  [[ -n $er ]] && awk -v a="$ea" -v b="$er" 'BEGIN { exit !((a < 0 ? -a : a) <= 2 && (b < 0 ? -b : b) <= 2) }' \
    && ok "${what}advise --try '--autocast bf16': predicted $pa / $pr, measured $ma / $mr (errors $ea% / $er%)" \
    || bad "${what}advise --try '--autocast bf16': '$ac' $(tail -2 "$tmp/$n.ac.err")"
  jq -e '.notes | any(test("op log"))' "$tmp/$n.ac.json" > /dev/null && ok "${what}advise says it read the op log" \
    || bad "${what}no note on the op log"
}
autocast_check ops ""

# gpumem as PyTorch's allocator (--allocator gpumem): no history; the statistics gpumem's (the
# script prints them: --no-stats was for when they raised); each op placed by the recorder's seq
# when it returned, each storage the gpumem allocation recorded at its address
rec gplain --allocator gpumem --
rec gops --allocator gpumem --torch-ops --
greqs() { q "$1" "SELECT group_concat(requested) FROM (SELECT requested FROM events WHERE kind IN (1, 3) ORDER BY seq)"; }
[[ -n $(greqs gplain) && $(greqs gplain) == "$(greqs gops)" ]] \
  && ok "gops: the op log changes no allocation under gpumem's allocator ($(q gops "SELECT count(*) FROM events WHERE kind IN (1, 3)"), in order)" \
  || bad "gops: gpumem's allocations differ with the op log"
[[ -n $(stats gplain) && $(stats gplain) == "$(stats gops)" ]] && ok "gops: and the same max_memory_allocated/reserved() from gpumem: $(stats gops | tr '\n' ' ')" \
  || bad "gops: max_memory_* differ: $(stats gplain | tr '\n' ' ') / $(stats gops | tr '\n' ' ')"
n=$(q gops "SELECT value FROM meta WHERE key = 'torch_ops'") um=$(q gops "SELECT value FROM meta WHERE key = 'torch_op_args_unmatched'")
pos=$(q gops "SELECT value FROM meta WHERE key = 'torch_ops_position'")
[[ $n -gt 50 && $um == 0 && $pos == seq ]] && ok "gops: $n ops logged and placed by the recorder's seq, every storage matched" \
  || bad "gops: $n ops, $um storages unmatched, position '$pos'"
nb=$(q gops "SELECT count(*) FROM torch_op_args a JOIN events e ON e.seq = a.birth
             WHERE e.kind NOT IN (1, 3) OR e.addr != a.addr OR a.bytes != e.requested OR a.birth > (SELECT seq FROM torch_ops WHERE id = a.op)")
na=$(q gops "SELECT count(*) FROM torch_op_args")
[[ $na -gt 0 && $nb == 0 ]] && ok "gops: each of $na storages is the gpumem allocation at its address, of its bytes, born by its op's seq" \
  || bad "gops: $nb of $na storages are not their allocation"
[[ $(out_of gops) == "$((B * T * 4 * C * 4)) float32;" ]] && ok "gops: every c_fc addmm reads h.N.mlp.c_fc.weight, writes (B, T, 4C) fp32" \
  || bad "gops: c_fc's addmm outputs: '$(out_of gops)'"
autocast_check gops "gops (gpumem's allocator): "

# absent without --torch-ops, and the readers do without it
tables=$(q plain "SELECT name FROM sqlite_master WHERE name LIKE 'torch_op%'") && [[ -z $tables ]] && ok "plain: no op tables" \
  || bad "plain: op tables made without --torch-ops, or no recording: '$tables'"
for r in plain ops; do
  "$G" report "$tmp/$r.db" > "$tmp/$r.report" 2>&1 || bad "$r: report failed: $(tail -2 "$tmp/$r.report")"
done
exit $fail
