#!/usr/bin/env bash
# torch_workspaces.sh — PyTorch's cuBLAS and cuBLASLt workspaces are not leaks
# (tests/torch/workspaces.py: a Linear trained two steps, its forward's matmuls on the main
# thread, its backward's on autograd's device thread, and a tensor kept to the end on purpose).
# PyTorch keeps one workspace per (handle, stream) for the process's life (32 MiB on the virtual
# GPU's H100 profile; cuBLASLt's, 1 MiB, where TORCH_CUBLASLT_UNIFIED_WORKSPACE=0 keeps them
# apart); until 2026-12-07 each was alive at exit and counted a leak, often the largest line of a
# small program's LEAK SUMMARY. gpumem's hooks now free them at exit through
# torch._C._cuda_clearCublasWorkspaces(), their frees flagged (REC_F_TORCH_CACHE): a device free
# with gpumem as PyTorch's allocator (the device view), PyTorch's own allocator's trace entry
# otherwise (PyTorch's view, merged). A table, each recording x {leaks' text, leaks --json,
# report (text and JSON)}:
#   - torch, gpumem: the default (one unified workspace per handle and stream: 2 x 32 MiB),
#     PyTorch's allocator and gpumem as its allocator;
#   - torch-lt, gpumem-lt: TORCH_CUBLASLT_UNIFIED_WORKSPACE=0 and cuBLASLt preferred: the
#     cuBLASLt workspaces (2 x 1 MiB);
# each row: leaks' text lists them apart ("PyTorch's cuBLAS workspaces at exit (not leaks)",
# with torch._C._cuda_clearCublasWorkspaces()), leaks --json's .torch_workspaces has the blocks
# of the workspace size, .leaks none of that size and leaked_bytes adds none, and the kept
# tensor is still a leak at its line; report says them apart ("workspaces at exit",
# .summary.torch_workspace_bytes as leaks counts them). On the code before, every row failed:
# .torch_workspaces was absent and the workspaces were leaks (torch: 64 MiB at the forward's line
# and at "(no Python frame ...)", the backward's).
# Then cuBLAS's own default workspace of each of PyTorch's handles (cublasCreate), which PyTorch
# never frees: apart in the device's view (.cublas_handles, report's "cuBLAS at exit"), in no
# leak count, and viz's list of leaks is leaks'; the same script leaks the same bytes under
# either allocator. Before (2026-12-07): 67,129,504 leaked bytes under gpumem's for 20,640.
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/workspaces.py
kept_line=$(grep -n "# KEPT\$" "$script" | cut -d: -f1)
# NAME|ALLOCATOR|ENV|ARG|WORKSPACE BYTES
cases=("torch|torch||-|33554432" "gpumem|gpumem||-|33554432"
       "torch-lt|torch|TORCH_CUBLASLT_UNIFIED_WORKSPACE=0|lt|1048576"
       "gpumem-lt|gpumem|TORCH_CUBLASLT_UNIFIED_WORKSPACE=0|lt|1048576")
pids=()
for row in "${cases[@]}"; do
  IFS='|' read -r name alloc envs arg _ <<< "$row"
  # shellcheck disable=SC2086 # envs: a word, or none
  env $envs GPUMEM_SIM_BACKING=memory "$G" record -o "$tmp/$name.db" --allocator "$alloc" -- \
    "$torch_py" "$script" $([[ $arg == - ]] || echo "$arg") > "$tmp/$name.out" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for row in "${cases[@]}"; do
  IFS='|' read -r name alloc envs arg ws <<< "$row"
  [[ -s $tmp/$name.db ]] && grep -q "recorded to" "$tmp/$name.out" || { bad "$name: the recording failed"; tail -5 "$tmp/$name.out"; continue; }
  "$G" leaks "$tmp/$name.db" > "$tmp/$name.txt" 2>&1
  "$G" leaks --json "$tmp/$name.db" > "$tmp/$name.json" 2>&1
  "$G" report "$tmp/$name.db" > "$tmp/$name.report" 2>&1
  "$G" report --json "$tmp/$name.db" > "$tmp/$name.report.json" 2>&1
  # leaks --json: the workspaces apart (two handles: the forward's and the backward's), none of
  # them among the leaks nor in leaked_bytes (.leaks add up to it: the kept tensor, the model),
  # the kept tensor still a leak at its line
  got=$(jq -r --argjson ws "$ws" --arg k "workspaces.py:$kept_line in <module>" \
    '"\(.torch_workspaces.blocks) \(([.torch_workspaces.by_site[].bytes] | add) == .torch_workspaces.bytes) \(.torch_workspaces.bytes == 2 * $ws) \(([.leaks[].bytes] | add) == .leaked_bytes) \(([.leaks[] | select(any(.stack[]; .function == "cublasCreate_v2") | not) | .bytes] | add) < $ws) \([.leaks[] | select(.site == $k)] | length)"' \
    "$tmp/$name.json" 2>&1)
  [[ $got == "2 true true true true 1" ]] \
    && ok "$name: leaks --json: .torch_workspaces holds the 2 workspaces of $ws bytes, leaked_bytes none of them, the kept tensor a leak" \
    || bad "$name: leaks --json: workspace blocks, by_site adds up, bytes 2 x $ws, .leaks add up to leaked_bytes, the program's leaks below $ws, kept's leaks: '$got', want '2 true true true true 1'"
  # leaks' text: said apart with what to do, and the summary is leaks --json's
  lb=$(jq -r .leaked_bytes "$tmp/$name.json" 2>/dev/null)
  grep -q "^PyTorch's cuBLAS workspaces at exit (not leaks): .* in 2 blocks" "$tmp/$name.txt" \
    && grep -q "_cuda_clearCublasWorkspaces()" "$tmp/$name.txt" && grep -q "^LEAK SUMMARY: $lb bytes" "$tmp/$name.txt" \
    && ok "$name: leaks' text says the workspaces apart, with torch._C._cuda_clearCublasWorkspaces(); LEAK SUMMARY $lb" \
    || { bad "$name: leaks' text does not say the workspaces apart, or its LEAK SUMMARY is not $lb"; sed -n '/cuBLAS/,$p' "$tmp/$name.txt"; }
  # report: its summary's workspaces at exit, as leaks counts them
  got=$(jq -c '.summary | [.torch_workspace_bytes, .torch_workspace_blocks]' "$tmp/$name.report.json" 2>&1)
  want=$(jq -c '[.torch_workspaces.bytes, .torch_workspaces.blocks]' "$tmp/$name.json" 2>&1)
  [[ $got == "$want" && $want != *null* ]] && grep -q "^  workspaces at exit .* in 2 blocks were PyTorch's cuBLAS" "$tmp/$name.report" \
    && ok "$name: report: 'workspaces at exit', .summary as leaks counts ($got)" \
    || bad "$name: report: .summary's workspace bytes and blocks '$got', leaks' '$want', or no 'workspaces at exit' line"
  # cuBLAS's own default workspace of each handle (cublasCreate, outside PyTorch's allocator),
  # alive at exit: PyTorch never destroys its handles. In the device's view (--allocator gpumem)
  # they are listed apart (.cublas_handles), never among the leaks; PyTorch's view holds its
  # tensors only (none). Until 2026-12-07 they were the device's view's largest leaks: 64 MiB of
  # its LEAK SUMMARY, where PyTorch's allocator's recording of the same script said 20 KiB.
  [[ $alloc == gpumem ]] && want_blocks=2 || want_blocks=0
  got=$(jq -r '"\(.cublas_handles.blocks) \((([.cublas_handles.by_site[].bytes] | add) // 0) == .cublas_handles.bytes) \([.leaks[] | select(any(.stack[]; .function == "cublasCreate_v2"))] | length)"' \
    "$tmp/$name.json" 2>&1)
  [[ $got == "$want_blocks true 0" ]] \
    && ok "$name: leaks --json: .cublas_handles holds cuBLAS's $want_blocks handle blocks, none among .leaks" \
    || bad "$name: leaks --json: .cublas_handles blocks, by_site adds up, leaks made in cublasCreate: '$got', want '$want_blocks true 0'"
  got=$(jq -c '.summary | [.cublas_handle_bytes, .cublas_handle_blocks]' "$tmp/$name.report.json" 2>&1)
  want=$(jq -c '[.cublas_handles.bytes, .cublas_handles.blocks]' "$tmp/$name.json" 2>&1)
  [[ $got == "$want" && $want != *null* ]] && { [[ $want_blocks == 0 ]] || { grep -q "^cuBLAS's own memory of PyTorch's cuBLAS handles at exit (not leaks): .* in 2 blocks" "$tmp/$name.txt" \
      && grep -q "^  cuBLAS at exit .* in 2 blocks were cuBLAS's own" "$tmp/$name.report"; }; } \
    && ok "$name: report's .summary.cublas_handle_* as leaks counts ($got), both texts say them apart" \
    || bad "$name: report's .summary.cublas_handle_* '$got', leaks' '$want', or a text does not say them apart"
  # viz's list of leaks: leaks' count
  "$G" viz "$tmp/$name.db" -o "$tmp/$name.html" > /dev/null 2>&1
  n=$(jq -r '.leaked_allocations' "$tmp/$name.json" 2>&1)
  grep -q "\"nleaks\":$n," "$tmp/$name.html" \
    && ok "$name: viz lists leaks' $n leaks" \
    || bad "$name: viz's leaks: $(grep -o '"nleaks":[0-9]*' "$tmp/$name.html" | head -1), leaks' $n"
done
# the allocator does not change the answer: the same script leaks the same bytes under both
for pair in "torch gpumem" "torch-lt gpumem-lt"; do
  read -r a b <<< "$pair"
  la=$(jq -r .leaked_bytes "$tmp/$a.json" 2>&1) lb=$(jq -r .leaked_bytes "$tmp/$b.json" 2>&1)
  [[ $la == "$lb" && $la =~ ^[0-9]+$ ]] \
    && ok "$a, $b: leaked_bytes the same under PyTorch's allocator and gpumem's ($la)" \
    || bad "$a, $b: leaked_bytes $la under PyTorch's allocator, $lb under gpumem's"
done
exit $fail
