#!/usr/bin/env bash
# torch_churn.sh — the Python stacks of PyTorch's trace entries (preload/torch_trace.c, read by
# preload/python_nogil.c's GIL-less reader, its chain memo and its caches, all keyed on code
# objects' addresses) stay right when code objects are freed and made again at the same
# addresses: torch_churn.py compiles 200 functions by exec one at a time, each allocating one
# tensor of its own size. Every merged allocation (kind 31) of those sizes must carry, innermost,
# the function that made it. One row a thread the churn runs on:
#   main    the main thread
#   thread  a thread of its own (the memo and caches are shared by all threads)
#   string  the main thread, the functions compiled as "<string>" (exec of a string): their
#           frames are Python frames though the file is no .py (the merge's frame_text)
# and a `python -c` program (its code is "<string>" too): its tensor's innermost Python frame is
# the program's <module>.
# (tests/integration/python_frames.sh checks the recorder's own events the same way.)
set -uo pipefail
source "$(dirname "$0")/common.bash"
for where in main thread string; do
  db=$tmp/churn-$where.db
  args=("$where")
  [[ $where == string ]] && args=(main "<string>")
  "$G" record -q -o "$db" -- "$torch_py" tests/torch/torch_churn.py "${args[@]}" \
    > "$tmp/$where.out" 2>&1 && grep -q "torch_churn: done" "$tmp/$where.out" \
    || { tail -5 "$tmp/$where.out"; bad "$where: the recording of torch_churn.py failed"; continue; }
  inner="SELECT e.size AS size, (SELECT function FROM stack_frames f WHERE f.stack = e.stack AND f.python = 1
         ORDER BY depth LIMIT 1) AS fn FROM events e WHERE e.kind = 31 AND e.size BETWEEN 512 AND 512 * 200"
  right=$(sqlite3 "$db" "SELECT count(*) FROM ($inner) WHERE fn = 'churn_' || (size / 512 - 1)")
  all=$(sqlite3 "$db" "SELECT count(*) FROM ($inner)")
  if [[ $all -ge 200 && $right -eq 200 ]]; then
    ok "$where: each of the 200 exec'd functions' tensors carries its own function"
  else
    sqlite3 "$db" "SELECT * FROM ($inner) WHERE fn IS NOT 'churn_' || (size / 512 - 1) LIMIT 5"
    bad "$where: $right of the 200 churned tensors ($all of those sizes) carry their own function"
  fi
done
db=$tmp/dash-c.db
if "$G" record -q -o "$db" -- "$torch_py" -c 'import torch
t = torch.empty(777 * 512, dtype=torch.uint8, device="cuda")
print("dash-c: done")' > "$tmp/dash-c.out" 2>&1 && grep -q "dash-c: done" "$tmp/dash-c.out"; then
  got=$(sqlite3 "$db" "SELECT (SELECT function || ' ' || file FROM stack_frames f WHERE f.stack = e.stack AND f.python = 1
                       ORDER BY depth LIMIT 1) FROM events e WHERE e.kind = 31 AND e.size = 777 * 512")
  if [[ $got == "<module> <string>" ]]; then ok "python -c: the tensor's Python frame is the program's <module> in <string>"
  else bad "python -c: the tensor's innermost Python frame is '$got', not '<module> <string>'"; fi
else
  tail -5 "$tmp/dash-c.out"; bad "the recording of a python -c program failed"
fi
exit $fail
