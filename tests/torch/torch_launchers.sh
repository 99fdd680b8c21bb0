#!/usr/bin/env bash
# torch_launchers.sh — PyTorch run by a launcher under `gpumem record`, not as the command itself:
#   - a shell script whose Python step is a forked child (`bash -c "python ...; true"`): the
#     virtual GPU reaches it (its libraries preloaded for any command), the sitecustomize hooks
#     it, and its allocator trace is merged into its own database (.torch present, PyTorch's
#     peak equal to the script's own max_memory_allocated);
#   - torchrun with 2 workers: each worker's trace merged into its own rank's database, each
#     rank's PyTorch peak equal to the one that worker printed; torchrun's agent, which imports
#     torch but makes no CUDA call, writes no file (it took rank 0's name before); gpumem record
#     lists the files; `gpumem report` over the two ranks' files merges them;
#   - spawned DataLoader workers, which import torch but make no CUDA call, write no database;
#   - torchrun's workers running out of memory: each one's PyTorch snapshot at its OOM (with the
#     OOM in it: `gpumem import`) beside its own database, and record names it.
set -uo pipefail
source "$(dirname "$0")/common.bash"
torchrun=$(dirname "$torch_py")/torchrun
cat > "$tmp/rk.py" <<'PY'
import os, torch
r = int(os.environ.get("RANK", "0"))
x = torch.empty((r + 1) << 20, dtype=torch.uint8, device="cuda")
y = torch.empty(4096, device="cuda")
del y
print("rank", r, "max_allocated", torch.cuda.max_memory_allocated())
PY
tpeak() { "$G" report --json "$1" 2> /dev/null | jq -r '.torch.peak_allocated // "none"'; }

# a shell script's forked Python step
"$G" record -o "$tmp/sh.db" -- bash -c "$torch_py $tmp/rk.py; true" > "$tmp/sh.out" 2> "$tmp/sh.err" \
  || bad "script: record failed: $(tail -3 "$tmp/sh.err")"
want=$(awk '$1 == "rank" { print $4 }' "$tmp/sh.out")
got=$(tpeak "$tmp/sh.db")
[[ -n $want && $got == "$want" ]] && grepq "merged PyTorch's allocator trace of pid [0-9]* (.*) into $tmp/sh.db" "$tmp/sh.err" \
  && ok "a script's forked Python: its trace merged into its database, PyTorch's peak $got = the script's own" \
  || bad "a script's forked Python: peak '$got' (want '$want'): $(grep gpumem "$tmp/sh.err" | tail -4)"

# torchrun, 2 workers, one database per rank
if [[ -x $torchrun ]]; then
  "$G" record -o "$tmp/tr-%r.db" -- "$torchrun" --standalone --nproc-per-node 2 "$tmp/rk.py" \
    > "$tmp/tr.out" 2> "$tmp/tr.err" || bad "torchrun: record failed: $(tail -3 "$tmp/tr.err")"
  files=()
  for r in 0 1; do
    want=$(awk -v r=$r '$1 == "rank" && $2 == r { print $4 }' "$tmp/tr.out")
    f=$(for db in "$tmp"/tr-*.db; do
          [[ $("$G" sql "$db" -c "SELECT value FROM meta WHERE key = 'rank'" 2> /dev/null | tail -1) == "$r" ]] && echo "$db"
        done | head -1)
    got=$([[ -n $f ]] && tpeak "$f")
    [[ -n $want && $got == "$want" ]] && ok "torchrun rank $r: its trace merged into $(basename "$f"), PyTorch's peak $got = the worker's own" \
      || bad "torchrun rank $r: file '$f', peak '$got' (want '$want'): $(grep gpumem "$tmp/tr.err" | tail -5)"
    files+=("$f")
  done
  # torchrun's agent imports torch (cuBLAS's constructor looks driver functions up) but makes no
  # CUDA call: it writes no file, so rank 0's name is rank 0's
  [[ $(ls "$tmp"/tr-*.db | wc -l) == 2 && ${files[0]} == "$tmp/tr-0.db" && ${files[1]} == "$tmp/tr-1.db" ]] \
    && grepq "other processes of this run recorded too, each in its own file: $tmp/tr-1.db (pid [0-9]*)" "$tmp/tr.err" \
    && ok "torchrun: one file per worker, tr-0.db and tr-1.db by rank, none for the agent; record lists them" \
    || bad "torchrun: files $(ls "$tmp"/tr-*.db), record's end: $(grep gpumem "$tmp/tr.err" | tail -3)"
  "$G" report "${files[@]}" 2> /dev/null | grepq "gpumem report: 2 ranks" && ok "torchrun: gpumem report merges the two ranks" \
    || bad "torchrun: the merged report: $("$G" report "${files[@]}" 2>&1 | head -3)"
  # each worker's OOM: PyTorch's snapshot of that moment beside that worker's own database
  cat > "$tmp/oom.py" <<'PY'
import torch
xs = []
try:
    for i in range(100):
        xs.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    pass
PY
  GPUMEM_SIM_MEMORY=2G GPUMEM_SIM_BACKING=virtual "$G" record -o "$tmp/o-%r.db" -- "$torchrun" --standalone \
    --nproc-per-node 2 "$tmp/oom.py" > /dev/null 2> "$tmp/o.err" || bad "torchrun OOM: record failed: $(tail -3 "$tmp/o.err")"
  n=0
  for db in "$tmp"/o-*.db; do
    snap=${db%.db}.oom.pickle
    [[ $("$G" sql "$db" -c "SELECT count(*) FROM ooms" 2> /dev/null | tail -1) -ge 1 && -s $snap ]] \
      && grepq "its snapshot at that moment is $snap" "$tmp/o.err" \
      && "$G" import "$snap" -o "$tmp/imp.db" 2> /dev/null && [[ $("$G" report --json "$tmp/imp.db" | jq '.ooms | length') -ge 1 ]] \
      && n=$((n + 1))
    rm -f "$tmp/imp.db"
  done
  [[ $n == 2 ]] && ok "torchrun: each worker's OOM snapshot (PyTorch's, with its OOM) beside its own database" \
    || bad "torchrun OOM: $n of 2 workers' snapshots: $(ls "$tmp"/o-*) $(grep gpumem "$tmp/o.err" | tail -4)"
else
  echo "note: no torchrun next to $torch_py: its part is skipped" >&2
fi
# DataLoader workers started by spawn: fresh interpreters that import torch and make no CUDA
# call: no database of their own (each wrote an empty one before)
cat > "$tmp/dl.py" <<'PY'
import torch
from torch.utils.data import DataLoader, TensorDataset
if __name__ == "__main__":
    x = torch.zeros(1024, device="cuda")
    for b in DataLoader(TensorDataset(torch.arange(32.0)), batch_size=8, num_workers=2,
                        multiprocessing_context="spawn"):
        x += b[0].sum().cuda()
    print("dl", float(x[0]))
PY
mkdir -p "$tmp/dl"
"$G" record -o "$tmp/dl/dl.db" -- "$torch_py" "$tmp/dl.py" > "$tmp/dl.out" 2> "$tmp/dl.err" \
  || bad "DataLoader: record failed: $(tail -3 "$tmp/dl.err")"
[[ $(ls "$tmp/dl") == dl.db ]] && grepq "^dl " "$tmp/dl.out" \
  && ok "spawned DataLoader workers (no CUDA call): the program's database only" \
  || bad "spawned DataLoader workers: files $(ls "$tmp/dl" | tr '\n' ' ')"
ls "$tmp" | grepq "gpumem-torch" && bad "a dump was left behind: $(ls "$tmp")"
exit $fail
