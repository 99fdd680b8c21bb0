#!/usr/bin/env bash
# torch_compile.sh — torch.compile (inductor's Triton kernels) on the virtual GPU and under gpumem
# (tests/torch/torch_compile.py: an MLP's 3 training steps with the model compiled). One
# recording, shared by the rows; its compile cache (TORCHINDUCTOR_CACHE_DIR) is this test's own,
# fresh, so the recording compiles (its compile workers start) and the plain run after it loads
# the same cubins from the cache.
#   - recorded (`gpumem record`): the program ends well; the Triton kernels' launches are in
#     `launches` under their names, each with `uses` rows (their pointer arguments read through the
#     cubin's parameter layout); report, leaks and advise exit 0; leaks lists what the same program
#     run eagerly leaves alive, no more (nothing of the compile, its autotuning, counted);
#   - what gpumem cannot see in a compiled region, said where it is read: report's torch.compile
#     block (JSON .torch_compile; eager: null) for the module hooks that do not fire inside it;
#     advise withholds recompute and save_on_cpu (not_predicted; --try exits 2 with the note),
#     eager predicts them; inductor's autotuning (the cache is cold) in step 1, live at the peak,
#     and the peak without it = the plain run's max_memory_allocated (its cache warm), said by
#     report and advise, and by frag and tune, whose replays hold them, and viz's summary; a reduce-overhead recording (cache warm): the replays' tensors in the
#     private pool (report), the pool's free bytes the replays' working memory (frag);
#   - no stray database: the compile workers (processes the program started that used no GPU
#     beyond a context) leave no file; the class, with a C program and a probe run by a shell: a
#     child that only started CUDA leaves none, a child that allocated keeps its own, and the
#     first process keeps its file though it used no GPU (gpumem record inside a recorded program too);
#   - the plain run (build/sim/torch-env) runs the compiled steps, its Triton kernels skipped and
#     counted by name (GPUMEM_SIM_STATS);
#   - the modules themselves (module_probe.py on a cubin of the recording's cache): cuModuleLoad
#     and cuModuleLoadData of the cubin, one handle per (module, name), CUDA_ERROR_NOT_FOUND for
#     a missing name, the parameter layout of the kernel's PTX, PTX refused as not supported
#     (no JIT), an image that is none CUDA_ERROR_INVALID_IMAGE, a function of an unloaded module
#     invalid (another module's still valid).
# Before 2026-12-07 nothing said what the hooks miss in a compiled region, the autotuning's tensors
# set the peak unsaid (130.54 MiB, 88.58 MiB warm), advise predicted save_on_cpu and recompute of a
# compiled forward (save_on_cpu measured 4.5 MiB above its prediction). Before that, the program failed at its first compiled call ("libcuda.so cannot found",
# then cuModuleLoad not supported), and a compile worker left NAME-<pid>.db beside the recording.
set -uo pipefail
source "$(dirname "$0")/common.bash"
export TORCHINDUCTOR_CACHE_DIR=$tmp/inductor GPUMEM_SIM_BACKING=memory
script=tests/torch/torch_compile.py
mkdir -p "$tmp/rec" "$tmp/eager" "$tmp/kids"
# ---- recorded
if "$G" record -o "$tmp/rec/c.db" -- "$torch_py" "$script" default > "$tmp/rec.out" 2>&1 \
    && grep -q "^torch_compile.py: default: 3 steps done" "$tmp/rec.out"; then
  ok "recorded: the compiled program ran its 3 steps"
else
  bad "recorded: the compiled program failed"; grep -v Warning "$tmp/rec.out" | tail -6
fi
q() { sqlite3 "$tmp/rec/c.db" "$1" 2>&1; }
# per Triton kernel (inductor names them triton_<kind>_fused_...): launches, and launches with uses
got=$(q "SELECT s.s || ' ' || count(DISTINCT l.seq) || ' ' || count(DISTINCT u.seq) FROM launches l
         JOIN strings s ON s.id = l.kernel LEFT JOIN uses u ON u.seq = l.seq
         WHERE s.s LIKE 'triton\_%' ESCAPE '\' GROUP BY s.s ORDER BY s.s")
n=$(grep -c '^triton_' <<< "$got")
short=$(awk '$3 < $2' <<< "$got")
[[ $n -ge 3 && -z $short ]] && ok "recorded: $n Triton kernels launched, every launch with uses ($(tr '\n' ';' <<< "$got"))" \
  || bad "recorded: Triton kernels' launches and launches with uses: '${got:-none}'${short:+ (without uses: $short)}"
unread=$(q "SELECT value FROM meta WHERE key = 'launches_unread'")
[[ $unread == 0 ]] && ok "recorded: no launch unread (every kernel's layout known)" \
  || bad "recorded: meta launches_unread $unread"
for cmd in report leaks advise; do
  "$G" $cmd "$tmp/rec/c.db" > "$tmp/$cmd.txt" 2>&1
  rc=$?
  [[ $rc == 0 ]] && ok "$cmd exits 0" || { bad "$cmd exits $rc"; tail -3 "$tmp/$cmd.txt"; }
done
# leaks: the compiled program leaves alive what the eager one does (parameters, gradients, the
# inputs, cuBLAS's workspaces), nothing of the compile
"$G" record -o "$tmp/eager/e.db" -- "$torch_py" "$script" eager > "$tmp/eager.out" 2>&1 || bad "the eager run failed"
want=$("$G" leaks --json "$tmp/eager/e.db" | jq -c '[.leaked_bytes, .leaked_allocations]')
got=$("$G" leaks --json "$tmp/rec/c.db" | jq -c '[.leaked_bytes, .leaked_allocations]')
[[ $got == "$want" && $want != *null* && -n $want ]] && ok "leaks: the compiled run's $got (bytes, allocations), the eager run's" \
  || bad "leaks: the compiled run's $got, the eager run's $want"
# ---- what gpumem cannot see in a compiled region (report's "torch.compile" block, JSON
# .torch_compile, advise's notes): the module hooks stop at the compiled module; an eager program
# has no such block (null) and no such note
jc() { "$G" report --json "$1" | jq -c "$2" 2>&1; }
grep -q "PyTorch's module hooks do not fire inside a compiled region: its memory is the compiled module's range" "$tmp/report.txt" \
    && [[ $(jc "$tmp/rec/c.db" '.torch_compile.compiled_module_ranges > 0') == true && $(jc "$tmp/eager/e.db" .torch_compile) == null ]] \
  && ok "report: the compiled module's ranges said to hold its layers' memory (eager: no torch_compile)" \
  || bad "report: torch.compile's block: '$(grep -A1 '^torch.compile' "$tmp/report.txt" | tail -1 | cut -c1-120)', JSON $(jc "$tmp/rec/c.db" .torch_compile), eager's $(jc "$tmp/eager/e.db" .torch_compile)"
# advise: recompute and save_on_cpu act on what inductor's partitioner saves, not on the eager
# program's activations: withheld for the compiled program (not_predicted, --try exits 2 with
# the note), predicted for the eager one
notes() { "$G" advise --json "$1" 2>/dev/null | jq -r '.notes[]' | grep -c "$2"; }
withheld() { "$G" advise --json "$1" 2>/dev/null | jq -c '[.not_predicted[].technique | select(. == "recompute" or . == "offload_act")]'; }
try_rc() { "$G" advise --try "$2" "$1" > "$tmp/try.out" 2>&1; echo $?; }
[[ $(notes "$tmp/rec/c.db" "^torch.compile: PyTorch's module hooks do not fire") == 1 && $(notes "$tmp/eager/e.db" "^torch.compile") == 0 ]] \
    && [[ $(withheld "$tmp/rec/c.db") == '["recompute","offload_act"]' && $(withheld "$tmp/eager/e.db") == '[]' ]] \
  && ok "advise: recompute and save_on_cpu not predicted inside the compiled region, said why (eager: predicted)" \
  || bad "advise's torch.compile note: compiled $(notes "$tmp/rec/c.db" "^torch.compile"), eager $(notes "$tmp/eager/e.db" "^torch.compile"); withheld $(withheld "$tmp/rec/c.db"), eager's $(withheld "$tmp/eager/e.db")"
for t in "--offload activations" "--recompute layer"; do
  c=$(try_rc "$tmp/rec/c.db" "$t"); said=$(grep -c "is not predicted: torch.compile:" "$tmp/try.out"); e=$(try_rc "$tmp/eager/e.db" "$t")
  [[ $c == 2 && $said == 1 && $e == 0 ]] && ok "advise --try '$t': refused for the compiled program (exit 2, the note), predicted eager" \
    || bad "advise --try '$t': compiled exit $c (note $said), eager exit $e"
done
# ---- no stray database: only the program's own file beside the recording
others=$(cd "$tmp/rec" && ls | grep -v '^c\.db$' | tr '\n' ' ')
[[ -z $others ]] && ok "no stray database beside the recording (the compile workers left none)" \
  || bad "files beside the recording: $others"
grep -q "other processes of this run recorded too" "$tmp/rec.out" \
  && bad "record lists other processes' files: $(grep 'other processes' "$tmp/rec.out")" \
  || ok "record lists no other process's file"
# the class: a shell's children (the shell is the first process: `; true` keeps it from exec'ing
# its last command); a PyTorch probe that only started CUDA leaves nothing, each program that
# allocates keeps its file (the first k.db, the second k-<pid>.db). Also no -wal/-shm beside k.db,
# which the later processes read to find it a part of this run.
"$G" record -o "$tmp/kids/k.db" -- bash -c "$build/tests/apps/rt_app > /dev/null; $torch_py tests/torch/module_probe.py --child;
    $build/tests/apps/rt_app > /dev/null; true" > "$tmp/kids.out" 2>&1 || bad "the shell's run failed: $(tail -3 "$tmp/kids.out")"
files=$(cd "$tmp/kids" && ls | sed 's/-[0-9]*\.db$/-PID.db/' | sort | tr '\n' ' ')
[[ $files == "k-PID.db k.db " && $(grep -c '^child 0$' "$tmp/kids.out") == 1 ]] \
  && ok "a shell's children: the probe left no file, each allocating program its own ($files)" \
  || bad "a shell's children's files: '$files', want 'k-PID.db k.db ' (the probe ran: $(grep -c '^child 0$' "$tmp/kids.out"))"
# ... and the first process keeps its file whatever it holds, also when gpumem record runs inside
# another recorded program (GPUMEM_RECORD_ROOT inherited: record makes its program the first)
mkdir -p "$tmp/root"
GPUMEM_RECORD_ROOT=1 "$G" record -o "$tmp/root/r.db" -- "$torch_py" tests/torch/module_probe.py --child > "$tmp/root.out" 2>&1
rc=$?
[[ $rc == 0 && -s $tmp/root/r.db ]] && grep -q "made no device or pinned allocation" "$tmp/root.out" \
  && ok "the first process's file stays though it used no GPU (record says it made no allocation)" \
  || { bad "the first process's file: exit $rc, $(ls "$tmp/root")"; tail -3 "$tmp/root.out"; }
# ---- the plain run: the cache the recording filled, the kernels skipped and counted
if GPUMEM_SIM_STATS=1 torch_run -- "$script" default > "$tmp/plain.out" 2>&1 \
    && grep -q "^torch_compile.py: default: 3 steps done" "$tmp/plain.out"; then
  ok "plain: the compiled program ran its 3 steps on the virtual GPU"
else
  bad "plain: the compiled program failed"; grep -v Warning "$tmp/plain.out" | tail -6
fi
n=$(grep -c "^gpumem sim: skipped .* triton_" "$tmp/plain.out")
[[ $n -ge 3 ]] && ok "plain: $n Triton kernels skipped and counted by name" \
  || bad "plain: $n Triton kernels in the skipped list"
grep -q "not modelled: cuModule" "$tmp/plain.out" && bad "plain: $(grep 'not modelled: cuModule' "$tmp/plain.out")" \
  || ok "plain: no module call not modelled"
# ---- inductor's autotuning: the recording's compile cache was cold, so its first step holds
# inductor's benchmark tensors (compile time); the tensors' peak is the recorded
# max_memory_allocated, the peak without them the plain run's (its cache warm: no autotuning)
cold=$(sed -n 's/^torch_compile.py: max_memory_allocated //p' "$tmp/rec.out")
warm=$(sed -n 's/^torch_compile.py: max_memory_allocated //p' "$tmp/plain.out")
got=$(jc "$tmp/rec/c.db" '.torch_compile | [.autotune_allocations > 0, .autotune_steps, .autotune_at_peak > 0, .peak, .peak_without_autotune]')
[[ $got == "[true,[1,1],true,${cold:-x},${warm:-x}]" && $warm -lt $cold ]] \
  && ok "autotuning: step 1's, live at the peak; peak $cold (cold), without it $warm (the warm run's)" \
  || bad "autotuning: $got, want [true,[1,1],true,$cold,$warm] (the cold run's max_memory_allocated, the warm run's)"
grep -q "^  autotuning          inductor's autotuning (compile time, in step 1) made" "$tmp/report.txt" \
    && grep -q "^gpumem: torch.compile: inductor's autotuning (compile time, in step 1) made .* without them the peak is" "$tmp/rec.out" \
    && [[ $(notes "$tmp/rec/c.db" "^inductor's autotuning (compile time, in step 1)") == 1 ]] \
  && ok "record's summary, report and advise say the peak holds the autotuning's tensors, and the peak without them" \
  || bad "report's autotuning line: '$(grep '^  autotuning' "$tmp/report.txt" | cut -c1-100)', record's: '$(grep '^gpumem: torch.compile' "$tmp/rec.out" | cut -c1-100)', advise's notes $(notes "$tmp/rec/c.db" "^inductor's autotuning")"
# frag and tune replay the trace as recorded: they say their figures hold the autotuning (eager: no note)
said=""
for cmd in frag tune; do
  for db in rec/c.db eager/e.db; do
    said+="$cmd:${db%%/*}:$("$G" $cmd "$tmp/$db" 2>&1 | grep -c "^  note  .*inductor's autotuning (compile time, in step 1).*every replay below holds them as recorded") "
  done
done
[[ $said == "frag:rec:1 frag:eager:0 tune:rec:1 tune:eager:0 " ]] && ok "frag and tune: their replays said to hold the autotuning (eager: not)" \
  || bad "frag's and tune's autotuning notes: $said"
# viz: its summary says the same (summary.torch_compile: the hooks' and the autotuning's sentences; eager: null)
vizc() { "$G" viz "$1" -o "$tmp/v.html" > /dev/null 2>&1; sed -n 's/^const D = \(.*\);$/\1/p' "$tmp/v.html" | jq -r "$2" 2>&1; }
vc=$(vizc "$tmp/rec/c.db" .summary.torch_compile); ve=$(vizc "$tmp/eager/e.db" .summary.torch_compile)
[[ $vc == "PyTorch's module hooks do not fire inside a compiled region"*"inductor's autotuning (compile time, in step 1)"* && $ve == null ]] \
  && ok "viz: the summary says what a compiled region hides and the autotuning (eager: null)" \
  || bad "viz's summary.torch_compile: '${vc:0:120}', eager's '$ve'"
# ---- mode="reduce-overhead" (its own recording, the cache warm): CUDA graphs' private pool, and
# the replays that allocate nothing (steps after the capture hold the graph's tensors in it)
mkdir -p "$tmp/ro"
"$G" record -o "$tmp/ro/r.db" -- "$torch_py" "$script" reduce-overhead > "$tmp/ro.out" 2>&1 || bad "the reduce-overhead run failed"
"$G" report "$tmp/ro/r.db" > "$tmp/ro.txt" 2>&1
grep -q "^  CUDA graphs         a step that replays a captured graph allocates nothing" "$tmp/ro.txt" \
    && [[ $(jc "$tmp/ro/r.db" .torch_compile.private_pools) == true && $(jc "$tmp/rec/c.db" .torch_compile.private_pools) == false ]] \
  && ok "reduce-overhead: the replays' tensors said to stay in the private pool (default mode: no pool)" \
  || bad "reduce-overhead: '$(grep '^  CUDA graphs ' "$tmp/ro.txt" | cut -c1-100)', private_pools $(jc "$tmp/ro/r.db" .torch_compile.private_pools), default's $(jc "$tmp/rec/c.db" .torch_compile.private_pools)"
# frag: the graph pool's free bytes are where the replays write the graph's intermediates, said so
"$G" frag "$tmp/ro/r.db" > "$tmp/ro.frag" 2>&1
grep -q "graph_pool .*while the graph is replayed .* these bytes are its working memory, not a loss" "$tmp/ro.frag" \
  && ok "frag: the graph pool's free bytes said to be the replays' working memory" \
  || bad "frag's graph_pool: '$(grep graph_pool "$tmp/ro.frag" | cut -c1-160)'"
# ---- the modules, on a cubin of the cache
cubin=$(find "$TORCHINDUCTOR_CACHE_DIR" -name 'triton_poi_*.cubin' | head -1)
kernel=$(basename "${cubin%.cubin}")
if [[ -z $cubin ]]; then
  bad "no triton_poi_ cubin in the compile cache"
else
  "$torch_py" tests/torch/module_probe.py "$build/sim/libcuda.so.1" "$cubin" "$kernel" > "$tmp/probe.out" 2>&1
  # the PTX's parameters (.u64/.b64 8 bytes, .u32/.b32 4, ...), each at its natural alignment
  want=$(awk '/\.entry/ { on = 1 } on && /\.param/ { t = $2; s = t ~ /64$/ ? 8 : t ~ /32$/ ? 4 : t ~ /16$/ ? 2 : 1;
              off = int((off + s - 1) / s) * s; out = out (out == "" ? "" : ",") off ":" s; off += s } on && /^\)/ { exit }
              END { print out }' "${cubin%.cubin}.ptx")
  for row in "load_file 0" "load_data 0" "get 0" "same_module_same_handle 1" "other_module_other_handle 1" \
             "missing 500" "count 0 1" "layout $want" "ptx 801" "garbage 200" "unload 0" \
             "after_unload_param 400" "after_unload_other 0" "unload_twice 400"; do
    grep -qx "$row" "$tmp/probe.out" && ok "module: $row" \
      || bad "module: want '$row', got '$(grep "^${row%% *} " "$tmp/probe.out")'"
  done
fi
exit $fail
