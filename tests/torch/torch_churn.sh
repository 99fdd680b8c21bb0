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
# the program's <module>. Then the reader's check against Python's own reading: PyTorch's ops
# release the GIL, so no allocation of these programs ever makes it; gpumem/_torch.py makes it
# when it attaches the trace (gpumem_python_check, holding the GIL). With a frame layout that is
# not the interpreter's (GPUMEM_DEBUG_PY_SKEW=N: every offset moved by N bytes) it must say so
# in exactly one line, and no entry may carry frames read from the wrong fields. Last, in each of
# those seven recordings every `strings` row is referred to by some row (the check interns
# nothing: the stack it reads is not recorded).
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
for skew in 8 -8 4; do
  db=$tmp/skew$skew.db
  GPUMEM_DEBUG_PY_SKEW=$skew "$G" record -q -o "$db" -- "$torch_py" tests/torch/torch_churn.py main \
    > "$tmp/skew$skew.out" 2>&1 && grep -q "torch_churn: done" "$tmp/skew$skew.out" \
    || { tail -5 "$tmp/skew$skew.out"; bad "skew $skew: the recording of torch_churn.py failed"; continue; }
  lines=$(grep -c "frames are not laid out as gpumem expects; threads that released the GIL get native frames only" "$tmp/skew$skew.out")
  framed=$(sqlite3 "$db" "SELECT count(*) FROM events e WHERE e.kind = 31 AND EXISTS (SELECT 1 FROM stack_frames f WHERE f.stack = e.stack AND f.python = 1)")
  if [[ $lines -eq 1 && $framed -eq 0 ]]; then
    ok "skew $skew: the layout is refused when the trace attaches (one line), no entry carries Python frames"
  else
    bad "skew $skew: $lines lines saying the layout is wrong (want 1), $framed entries with Python frames (want 0)"
  fi
done
# Every `strings` row is one some row refers to: by id (ranges' domain and name, names, ooms,
# alloc_life, launches and uses' kernel) or, for a Python frame, by its text (frames.function and
# file). The reader's check (gpumem_python_check, when the trace attaches) reads a stack that is
# never recorded: it must intern none of its names.
orphans="SELECT s.s FROM strings s WHERE
  NOT EXISTS (SELECT 1 FROM ranges r WHERE r.domain = s.id OR r.name = s.id)
  AND NOT EXISTS (SELECT 1 FROM names n WHERE n.name = s.id)
  AND NOT EXISTS (SELECT 1 FROM ooms o WHERE o.name = s.id)
  AND NOT EXISTS (SELECT 1 FROM alloc_life a WHERE a.name = s.id)
  AND NOT EXISTS (SELECT 1 FROM launches l WHERE l.kernel = s.id)
  AND NOT EXISTS (SELECT 1 FROM uses u WHERE u.kernel = s.id)
  AND NOT EXISTS (SELECT 1 FROM frames f WHERE f.python = 1 AND (f.function = s.s OR f.file = s.s))"
for name in churn-main churn-thread churn-string dash-c skew8 skew-8 skew4; do
  db=$tmp/$name.db
  [[ -f $db ]] || { bad "strings: $(basename "$db") was not recorded"; continue; }
  n=$(sqlite3 "$db" "SELECT count(*) FROM strings") && left=$(sqlite3 "$db" "$orphans") \
    || { bad "strings: $(basename "$db") cannot be read"; continue; }
  if [[ $n -gt 0 && -z $left ]]; then ok "strings: each of $(basename "$db")'s $n strings is referred to"
  else bad "strings: $(basename "$db") has strings no row refers to (of $n): $(echo $left)"; fi
done
exit $fail
