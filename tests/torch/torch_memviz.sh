#!/usr/bin/env bash
# torch_memviz.sh — PyTorch 2.14.1's own `python -m torch.cuda._memory_viz` on gpumem's torch
# exports (issue 36, deliverable 4; tests/torch/memviz_check.py runs and checks each
# subcommand): an export of the trainer (build/train_gpt2_sim under gpumem record) and of the
# GPT-2 script (tests/torch/train_gpt2.py under gpumem record, PyTorch's allocator with
# expandable_segments:True,roundup_power2_divisions:4):
#   - stats, trace, segments, memory (through `gpumem flamegraph` linked as
#     ~/.cache/flamegraph.pl: offline), trace_plot, segment_plot exit 0 and show the export's
#     content: its segments at the peak, whose active blocks hold the peak allocated (the
#     script's own max_memory_allocated()), the trace's entries, the embedded data;
#   - compare does on the exports what it does on PyTorch's own _dump_snapshot of the same run
#     (it fails there: string indices; left out);
#   - the script's allocator_settings are PyTorch's as it ran: expandable, 4 divisions, its
#     PYTORCH_CUDA_ALLOC_CONF.
set -uo pipefail
source "$(dirname "$0")/common.bash"
G=$build/gpumem T=$build/train_gpt2_sim
[[ -x $G && -x $T ]] || { echo "torch_memviz.sh: $G or $T is not built" >&2; exit 1; }
conf=expandable_segments:True,roundup_power2_divisions:4

# the GPT-2 script under gpumem record, with its own _dump_snapshot of the same run
PYTORCH_CUDA_ALLOC_CONF=$conf GPUMEM_SIM_BACKING=virtual "$G" record -o "$tmp/py.db" -- "$torch_py" \
  tests/torch/train_gpt2.py --model tiny --steps 3 --history "$tmp/own.pickle" > "$tmp/py.out" 2> "$tmp/py.err" \
  || { bad "the GPT-2 script under gpumem record failed: $(tail -3 "$tmp/py.err")"; exit 1; }
"$G" export --format torch "$tmp/py.db" -o "$tmp/py.pickle" || bad "export of the GPT-2 script failed"
a=$(awk '$1 == "max_memory_allocated" { print $2 }' "$tmp/py.out")
"$torch_py" tests/torch/memviz_check.py "$G" gpt2-script "$tmp/py.pickle" "$a" "$tmp/own.pickle" "$tmp/own.pickle" \
  2> "$tmp/mv.err" || fail=1
grep -q . "$tmp/mv.err" && grep -i "traceback" -A5 "$tmp/mv.err"
read -r e r c < <("$torch_py" -c 'import pickle, sys
a = pickle.load(open(sys.argv[1], "rb"))["allocator_settings"]
print(a["expandable_segments"], sorted(set(a["roundup_power2_divisions"].values())), a["PYTORCH_CUDA_ALLOC_CONF"])' "$tmp/py.pickle" 2>/dev/null)
[[ $e == True && $r == "[4]" && $c == "$conf" ]] && ok "gpt2-script: allocator_settings as PyTorch ran (expandable, 4 divisions, $c)" \
  || bad "gpt2-script: allocator_settings $e $r $c"

# the trainer
GPUMEM_SIM_BACKING=memory "$G" record -q -o "$tmp/tr.db" -- "$T" --model tiny --steps 3 > /dev/null 2>&1 \
  || { bad "the trainer under gpumem record failed"; exit 1; }
"$G" export --format torch "$tmp/tr.db" -o "$tmp/tr.pickle" || bad "export of the trainer failed"
a=$("$G" report --json "$tmp/tr.db" | jq -r .summary.peak_allocated)
"$torch_py" tests/torch/memviz_check.py "$G" trainer "$tmp/tr.pickle" "$a" "$tmp/own.pickle" "$tmp/own.pickle" \
  2> "$tmp/mv.err" || fail=1
exit $fail
