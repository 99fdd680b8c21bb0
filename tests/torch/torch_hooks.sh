#!/usr/bin/env bash
# torch_hooks.sh — the PyTorch hooks in C (preload/torch_hooks.c) record what gpumem/_torch.py's
# Python hooks record, which run when the library has none (GPUMEM_TORCH_C_HOOKS=0 forces them),
# whether a C Module.__call__ runs them (the default) or PyTorch as global hooks
# (GPUMEM_TORCH_GLOBAL_HOOKS=1, where the C __call__ cannot be made): the same ranges (thread,
# kind, path, in order, and the order in which they end) and the same names, on the tiny GPT-2 script
# (plain; --checkpoint --accum 2) and on torch_hooks_edge.py (a tuple and a dict output, a module
# returning its child's output as it is (the child's backward under the child's name, the
# parent's own work that made the child's input under the parent's after it), a tuple
# whose tensor that needs a gradient is in a dict, a leaf returned as is, no_grad, an output whose
# requires_grad raises: one warning; a program that names its own phases: no ranges from the
# hooks from then on, whether it starts before the first module call, in a module's forward, in a
# tensor hook on autograd's thread or with gpumem.annotate between steps; a child's output dropped: freed at once, the C hooks holding its node no longer than the
# output lives), and which gradients and optimizer state the optimizer hooks name again
# (torch_hooks_ident.py, a table of changes each scanned by the hooks and by _Hooks' Python scan on
# its own dictionaries: a new gradient at the old one's _cdata and data pointer is named, a state
# key equal to the one named is that entry, 300 more parameters, a value without weak references,
# an unhashable key's TypeError, a torch.nn.Parameter's gradients; the C scan's memo of a state
# that had nothing new, with CUDA tensors: a value set_ to other memory or given new .data, a
# value replaced, a key added or removed, a parameter added, the dicts copied, a view named for
# the same key, each named as Python's scan names it; the edge program's
# zero_grad(set_to_none=True) renames each gradient once), and that checkpointing's re-run forward
# is placed under its own block's backward. Each run says which
# hooks PyTorch called, and inspect.signature of a module and of Module.__call__ is PyTorch's own
# whichever runs them.
set -uo pipefail
source "$(dirname "$0")/common.bash"
export PYTHONHASHSEED=0
q() { "$G" sql "$1" -c "$2" | tail -n +2; }
# run NAME C|PY [ENV=V...] -- SCRIPT ARGS...: the script under gpumem record, the C or the
# Python hooks; $tmp/NAME.log (and $tmp/NAME.db once the program has used CUDA)
run() {
  local name=$1 c=1 envs=()
  [[ $2 == PY ]] && c=0
  shift 2
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env GPUMEM_TORCH_C_HOOKS=$c "${envs[@]}" "$G" record -q -o "$tmp/$name.db" -- "$torch_py" "$@" \
    > "$tmp/$name.log" 2>&1 || bad "$name: gpumem record failed: $(tail -3 "$tmp/$name.log")"
}
# rec NAME C|PY [ENV=V...] -- SCRIPT ARGS...: run, then $tmp/NAME.{ranges,names} from its
# recording (a recording missing or unreadable fails the script, never compares as empty)
rec() {
  local name=$1
  run "$@"
  # with each range, how many of its thread's ranges had started when it ended (0: never ended):
  # a range closed too late, too early or not at all changes it (times differ between runs, this
  # order does not)
  q "$tmp/$name.db" "SELECT thread, kind, path, (SELECT count(*) FROM ranges b WHERE b.thread = a.thread
    AND b.start_ns < a.end_ns) FROM ranges a ORDER BY id" > "$tmp/$name.ranges" &&
    q "$tmp/$name.db" "SELECT s.s FROM names n JOIN strings s ON s.id = n.name ORDER BY n.seq" \
      > "$tmp/$name.names" || bad "$name: its recording $tmp/$name.db cannot be read"
}
same() { # same WHAT A B: identical ranges and names
  if cmp -s "$tmp/$2.ranges" "$tmp/$3.ranges" && cmp -s "$tmp/$2.names" "$tmp/$3.names"; then
    ok "$1: C and Python hooks: the same $(wc -l < "$tmp/$2.ranges") ranges and $(wc -l < "$tmp/$2.names") names"
  else
    bad "$1: C and Python hooks differ"
    diff "$tmp/$2.ranges" "$tmp/$3.ranges" | sed -n 1,5p
    diff "$tmp/$2.names" "$tmp/$3.names" | sed -n 1,5p
  fi
}

gpt=(tests/torch/train_gpt2.py --model tiny --steps 3)
for v in plain ckpt; do
  args=("${gpt[@]}")
  [[ $v == ckpt ]] && args+=(--checkpoint --accum 2)
  rec "$v.c" C -- "${args[@]}"
  rec "$v.py" PY -- "${args[@]}"
  same "gpt2 $v" "$v.c" "$v.py"
done
grep -q -E '^[0-9]+[|]0[|]step 3/bwd/h[.]1[.]mlp[.]c_fc[|][0-9]+$' "$tmp/plain.c.ranges" && grep -q -x 'adam.exp_avg.h.1.mlp.c_fc.weight' "$tmp/plain.c.names" \
  && ok "gpt2: step 3/bwd/h.1.mlp.c_fc and adam.exp_avg.h.1.mlp.c_fc.weight recorded" \
  || bad "gpt2: the tiny run's phases or names are missing"

# checkpointing's re-run forward, inside the backward, is under its own block's backward range:
# the re-run stops early once it has what it needs (its modules never return), and the hooks close
# that forward at the next backward node (before: every later block's re-run nested in the
# first one's, "step 1/bwd/h.1.mlp/fwd/h.0.mlp.c_fc")
for h in c py; do
  nrr=$(grep -c '/bwd/h[.][0-9]*[^/]*/fwd/h[.]' "$tmp/ckpt.$h.ranges")
  cross=$(grep -E '/bwd/h[.][0-9]+[^/]*/fwd/h[.]' "$tmp/ckpt.$h.ranges" |
          sed -E 's|.*/bwd/h[.]([0-9]+)[^/]*/fwd/h[.]([0-9]+).*|\1 \2|' | awk '$1 != $2' | wc -l)
  [[ $nrr -gt 0 && $cross == 0 ]] && ok "ckpt $h: each of the $nrr re-run ranges under its own block's backward" \
    || bad "ckpt $h: $cross of $nrr re-run ranges under another block's backward: $(grep -E '/bwd/h[.]1[^/]*/fwd/h[.]0' "$tmp/ckpt.$h.ranges" | sed -n 1p)"
done

edge=tests/torch/torch_hooks_edge.py
for u in 0 1 fwd bwd annotate; do
  rec "edge$u.c" C USER_RANGES=$u -- "$edge"
  rec "edge$u.py" PY USER_RANGES=$u -- "$edge"
  same "edge (USER_RANGES=$u)" "edge$u.c" "edge$u.py"
done
# named from the second step on: the hooks' ranges of the first step, none of the third
for u in fwd bwd annotate; do
  n1=$(grep -c '^[0-9]*[|]0[|]step 1/' "$tmp/edge$u.c.ranges"); n3=$(grep -c '[|]step 3' "$tmp/edge$u.c.ranges")
  [[ $n1 -gt 0 && $n3 == 0 ]] && ok "edge (USER_RANGES=$u): $n1 ranges of step 1 from the hooks, none of step 3" \
    || bad "edge (USER_RANGES=$u): $n1 ranges of step 1, $n3 of step 3 (want some, none)"
done
grep -q '[|]fwd/Pair[|]' "$tmp/edgeannotate.c.ranges" && ok "edge (USER_RANGES=annotate): gpumem.annotate's own ranges recorded" \
  || bad "edge (USER_RANGES=annotate): no fwd/Pair range"
grep -q '[|]step 2/bwd' "$tmp/edgebwd.c.ranges" && ok "edge (USER_RANGES=bwd): the hooks' step 2 backward ranges before the tensor hook" \
  || bad "edge (USER_RANGES=bwd): no step 2 backward range (the tensor hook ran before every node hook?)"

rec edge0.cg C GPUMEM_TORCH_GLOBAL_HOOKS=1 -- "$edge"
same "edge (the C hooks as global hooks)" edge0.cg edge0.py
grep -q -x 'hooks gpumem_module_call' "$tmp/edge0.c.log" && grep -q -x 'hooks builtin_function_or_method' "$tmp/edge0.cg.log" &&
  grep -q -x 'hooks method' "$tmp/edge0.py.log" \
  && ok "the C hooks ran from Module.__call__ (as global hooks with GPUMEM_TORCH_GLOBAL_HOOKS=1), and GPUMEM_TORCH_C_HOOKS=0 ran the Python ones" \
  || bad "not the hooks expected: $(grep -h '^hooks' "$tmp"/edge0.{c,cg,py}.log | tr '\n' ' ')"
# the C hooks add their backward pre-hooks in C++ where libgpumem_torch.so has them
# (preload/torch_prehook.cpp, built with Python's headers): the same ranges as the Python hooks' above
if nm -D "$build/libgpumem_torch.so" 2> /dev/null | grepq ' U gpumem_torch_hooks_cxx$'; then
  read -r pc pp < <(sed -n 's/^node pre-hooks: C++ \([0-9]*\), Python \([0-9]*\)$/\1 \2/p' "$tmp/edge0.c.log")
  [[ ${pc:-0} -gt 0 ]] && ok "edge c: $pc node pre-hooks added in C++ ($pp through Python), the ranges the same as the Python hooks'" \
    || bad "edge c: no node pre-hook added in C++ ($(grep '^node pre-hooks' "$tmp/edge0.c.log"))"
else
  echo "note: $build/libgpumem_torch.so has no C++ pre-hooks (no Python headers when it was built): not checked"
fi
for h in c cg py; do
  [[ $(grep '^signature' "$tmp/edge0.$h.log") == 'signature (*args, **kwargs) (self, *args, **kwargs)' ]] \
    && ok "edge $h: inspect.signature of a module and of Module.__call__ as PyTorch's own" \
    || bad "edge $h: $(grep '^signature\|Error' "$tmp/edge0.$h.log" | head -2)"
done
for h in c py; do
  n=$(grep -c 'gpumem: a forward hook failed (ValueError: planted)' "$tmp/edge0.$h.log")
  [[ $n == 1 ]] && ok "edge $h: the raising output warned once" || bad "edge $h: $n warnings"
done
for h in c py; do
  grep -q -x 'dropped output freed True' "$tmp/edge0.$h.log" && ok "edge $h: a dropped module output is freed at once" \
    || bad "edge $h: a dropped module output outlived its module: $(grep 'dropped output' "$tmp/edge0.$h.log")"
done
# a module that returns a parameter as is every forward: its leaf is hooked once (a hook a forward
# piled up on the parameter, each run at every backward: three bwd/Leaf ranges in step 3)
for h in c py; do
  got="$(grep -c '[|]step 3/bwd/Leaf[|]' "$tmp/edge0.$h.ranges") $(sed -n 's/^leaf hooks //p' "$tmp/edge0.$h.log")"
  [[ $got == "1 1" ]] && ok "edge $h: the leaf returned as is every forward: one hook on it, one bwd/Leaf range a step" \
    || bad "edge $h: bwd/Leaf ranges in step 3, hooks on the leaf: '$got', want '1 1'"
done
grep -q -E '^[0-9]+[|]0[|]step 3/bwd/Leaf[|][0-9]+$' "$tmp/edge0.c.ranges" && grep -q -E '^[0-9]+[|]0[|]step 3/bwd/Pair[|][0-9]+$' "$tmp/edge0.c.ranges" && grep -q -E '^1[|]0[|]step 2/fwd/seq[.]0[|][0-9]+$' "$tmp/edge0.c.ranges" \
  && ok "edge: the leaf's and the pair's backward and the nested module's forward ranges" || bad "edge: ranges missing"
# Inner returns seq's output, and seq (a Sequential) its ReLU's: the node that made it is the
# ReLU's, and so is its backward, named after it, never after seq or Inner (their hooks, run after
# the ReLU's, left "bwd/Inner" open over it: torch_hooks.c, hook_node). Inner's own tanh made
# seq's input: Inner's range opens again after seq.0's backward, over the tanh's, before lin's
# (torch_hooks.c, resume_parent; before, the tanh's backward was seq.0's), while seq, whose
# input is seq.0's output, opens none; nh: the C hooks with no libgpumem_torch.so attached
# (--no-torch-history), their pre-hooks through Node.register_prehook
"$G" record -q --no-torch-history -o "$tmp/edge0.nh.db" -- "$torch_py" "$edge" > "$tmp/edge0.nh.log" 2>&1
q "$tmp/edge0.nh.db" "SELECT thread, kind, path, 0 FROM ranges ORDER BY id" > "$tmp/edge0.nh.ranges" ||
  bad "edge nh: its recording cannot be read: $(tail -2 "$tmp/edge0.nh.log")"
grep -q -x 'node pre-hooks: C++ 0, Python [1-9][0-9]*' "$tmp/edge0.nh.log" && ok "edge nh: the node pre-hooks through Python" \
  || bad "edge nh: $(grep '^node pre-hooks' "$tmp/edge0.nh.log")"
for h in c py nh; do
  got=$(grep -o -E '[|]step 3/bwd/(Inner|seq[.0-9]*|lin)[|]' "$tmp/edge0.$h.ranges" | tr -d '|' | paste -sd,)
  [[ $got == "step 3/bwd/seq.1,step 3/bwd/seq.0,step 3/bwd/Inner,step 3/bwd/lin" ]] \
    && ok "edge $h: Inner's backward ranges $got, the ReLU's backward its own, the tanh's Inner's" \
    || bad "edge $h: Inner's backward ranges '$got', want step 3/bwd/seq.1,step 3/bwd/seq.0,step 3/bwd/Inner,step 3/bwd/lin"
done
[[ ! -s $tmp/edge1.c.ranges ]] && ok "edge: a program that names its phases gets no range from the hooks" \
  || bad "edge: ranges despite gpumem.range: $(sed -n 1,2p "$tmp/edge1.c.ranges")"
for h in C PY; do
  # no CUDA: nothing is recorded, the hooks' own checks are in the log
  run "ident.$h" "$h" -- tests/torch/torch_hooks_ident.py
  grep -q -x "scan $([[ $h == C ]] && echo builtin_function_or_method || echo method)" "$tmp/ident.$h.log" &&
    ! grep -q FAIL "$tmp/ident.$h.log" && [[ $(grep -c '^ok:' "$tmp/ident.$h.log") == 67 ]] \
    && ok "ident $h: new gradients and state values named, the same ones not again" \
    || bad "ident $h: $(grep -E 'FAIL|Error' "$tmp/ident.$h.log" | head -2)"
  # set_to_none after the second of 3 steps: each gradient named at its first and its third step
  n=$(grep -c '^grad[.]' "$tmp/edge0.${h,,}.names"); u=$(grep '^grad[.]' "$tmp/edge0.${h,,}.names" | sort -u | wc -l)
  [[ $u == 7 && $n == 14 ]] && ok "edge $h: 7 gradients, each named twice (new after set_to_none)" \
    || bad "edge $h: $n gradient names for $u gradients (want 14 for 7)"
done
exit $fail
