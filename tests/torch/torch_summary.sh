#!/usr/bin/env bash
# torch_summary.sh — `gpumem record`'s closing summary says what `gpumem report` says, and no
# allocator setting the run does not use is dropped without a word. One table:
#   - every kind of recording (a C program on gpumem's allocator, on one device and on two; one
#     with no allocation; PyTorch on its own allocator, plain and with expandable_segments:True;
#     PyTorch through gpumem, --allocator gpumem; PyTorch on two devices; after
#     torch.cuda.reset_peak_memory_stats(); a PyTorch program killed with SIGKILL): record's
#     summary lines give the very figures of report's text (the device's Summary, and PyTorch's
#     block: its busiest device's, "since the reset" after one), and report's JSON PyTorch peaks
#     are the program's own max_memory_allocated / max_memory_reserved (tests/torch/summary_mlp.py
#     prints them); never "made no device or pinned allocation" of a program that allocated;
#   - every allocator setting and the way of running that does not use it: said once on stderr
#     (NAME=VALUE, why, what instead), kept in meta ignored.NAME and shown by report (text, and
#     .ignored_settings in JSON); and a setting that is used is not called ignored.
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/summary_mlp.py
apps=$build/tests/apps
replay=$build/alloc/gpumem-replay

# rec NAME [ENV=V...] -- [RECORD-OPTION...] -- PROGRAM ARGS...: $tmp/NAME.db, .out, .err
rec() {
  local name=$1 envs=() ropts=()
  shift
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  while [[ $1 != -- ]]; do ropts+=("$1"); shift; done
  shift
  env GPUMEM_SIM_BACKING=memory "${envs[@]}" "$G" record -o "$tmp/$name.db" "${ropts[@]}" -- "$@" \
    > "$tmp/$name.out" 2> "$tmp/$name.err"
  "$G" report "$tmp/$name.db" > "$tmp/$name.txt" 2>&1
  "$G" report --json "$tmp/$name.db" > "$tmp/$name.json" 2>/dev/null
}
# rep NAME SECTION LABEL: the size report's text gives after LABEL in the section whose heading
# starts with SECTION ("Summary", "PyTorch's allocator", "PyTorch through gpumem")
rep() {
  awk -v sec="$2" -v lab="  $3 " 'index($0, sec) == 1 { s = 1; next } s && /^[^ ]/ { s = 0 }
    s && index($0, lab) == 1 { sub(/^  [a-z ]+  +/, ""); print $1, $2; exit }' "$tmp/$1.txt"
}
# summ NAME PREFIX WORDS: the size after WORDS in record's summary line that starts "gpumem: PREFIX"
summ() {
  awk -v p="gpumem: $2" -v w="$3 " 'index($0, p) == 1 && (i = index($0, w)) {
    $0 = substr($0, i + length(w)); sub(/[,;]$/, "", $2); print $1, $2; exit }' "$tmp/$1.err"
}
# same NAME WHAT GOT WANT
same() {
  [[ -n $3 && $3 == "$4" ]] && ok "$1: $2 $3, as report says" || bad "$1: record's summary gives $2 '$3', report '$4'"
}
max() { sed -n 's/^MAX //p' "$tmp/$1.out" | jq -r "$2"; }
# the device's figures: record's line against report's Summary
device_same() {
  local n=$1 p=${2:-}
  same "$n" "the device's peak allocated" "$(summ "$n" "$p" "peak allocated")" "$(rep "$n" Summary "peak allocated")"
  same "$n" "the device's peak reserved" "$(summ "$n" "$p" "peak reserved")" "$(rep "$n" Summary "peak reserved")"
}
never_none() {
  grepq "made no device or pinned allocation\|nothing allocated" "$tmp/$1.err" \
    && bad "$1: record says the program allocated nothing: $(grep -m1 'nothing\|made no' "$tmp/$1.err")" \
    || ok "$1: record never says the program allocated nothing"
}
# torch_same NAME DEVICE: PyTorch's line against report's block, and the program's own figures
torch_same() {
  local n=$1 d=$2
  same "$n" "PyTorch's peak allocated" "$(summ "$n" "PyTorch's allocator" "peak allocated")" \
    "$(rep "$n" "PyTorch's allocator" "peak allocated")"
  same "$n" "PyTorch's peak reserved" "$(summ "$n" "PyTorch's allocator" "peak reserved")" \
    "$(rep "$n" "PyTorch's allocator" "peak reserved")"
  local want got
  want="$(max "$n" ".allocated[$d]") $(max "$n" ".reserved[$d]")"
  got=$(jq -r '"\(.torch.peak_allocated) \(.torch.peak_reserved)"' "$tmp/$n.json")
  [[ $got == "$want" ]] && ok "$n: those are max_memory_allocated/reserved($d) ($want)" \
    || bad "$n: report's PyTorch peaks '$got', the program's own '$want'"
}

# ---- every kind of recording x the summary ------------------------------------------------------
rec c1 -- -- "$apps/rt_app"
device_same c1
rec c2 GPUMEM_SIM_DEVICES=2 -- -- "$apps/devices_app"
device_same c2
grepq -E "^gpumem: peak allocated .* on device 0 \(the busiest of 2\)" "$tmp/c2.err" \
  && ok "c2: the device named" || bad "c2: $(grep '^gpumem: peak' "$tmp/c2.err")"
rec none DRV_SYM_ONLY_INIT=3 -- -- "$apps/drv_sym_app"
grepq "^gpumem: nothing allocated" "$tmp/none.err" && grepq "(nothing was allocated)" "$tmp/none.txt" \
  && ok "none: nothing allocated, in both" || bad "none: $(grep '^gpumem:' "$tmp/none.err" | head -3)"

rec td -- -- "$torch_py" "$script"
torch_same td 0
device_same td "the device"
rec te PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- -- "$torch_py" "$script"
torch_same te 0
never_none te
grepq "program VMM" "$tmp/te.err" && ok "te: PyTorch's own mappings said (program VMM)" || bad "te: no program VMM in the summary"
# PyTorch's own mappings and nothing else (no cuBLAS workspace): no allocation of gpumem's at all
rec t0 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- -- "$torch_py" "$script" --tensors-only
torch_same t0 0
never_none t0
rec tg PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- --allocator gpumem -- "$torch_py" "$script"
for w in "peak requested" "peak allocated"; do
  same tg "PyTorch's $w" "$(summ tg "PyTorch through gpumem" "$w")" "$(rep tg "PyTorch through gpumem" "$w")"
done
device_same tg "the device"
rec t2 GPUMEM_SIM_DEVICES=2 -- -- "$torch_py" "$script" --devices 2
busy=$(jq -r '.torch.device' "$tmp/t2.json")
[[ $busy =~ ^[01]$ ]] && torch_same t2 "$busy" || bad "t2: report names no busiest device: '$busy'"
grepq -E "^gpumem: PyTorch's allocator: .* on device $busy \(the busiest of 2\)" "$tmp/t2.err" \
  && ok "t2: PyTorch's device named" || bad "t2: $(grep "PyTorch's allocator" "$tmp/t2.err")"
device_same t2 "the device"
rec tr -- -- "$torch_py" "$script" --reset
got=$(summ tr "PyTorch's allocator: since the reset" "(reset_peak_memory_stats)")
want=$(awk '/^  since the reset/ { print $4, $5 }' "$tmp/tr.txt")
same tr "max_memory_allocated since the reset" "$got" "$want"
[[ $(jq -r .torch.peak_reset.max_memory_allocated "$tmp/tr.json") == "$(max tr '.allocated[0]')" ]] \
  && ok "tr: since the reset is the program's max_memory_allocated()" || bad "tr: since-reset figure not the program's"
grepq "since the reset .* the whole run: peak allocated $(rep tr "PyTorch's allocator" "peak allocated")," "$tmp/tr.err" \
  && ok "tr: the whole run's peak labelled as such" || bad "tr: $(grep "PyTorch's allocator" "$tmp/tr.err")"
rec tk -- -- "$torch_py" "$script" --kill
device_same tk
grepq "killed by signal 9" "$tmp/tk.err" && ok "tk: the kill said" || bad "tk: $(tail -3 "$tmp/tk.err")"

# ---- settings the run does not use ----------------------------------------------------------
# ignored NAME-OF-RUN SETTING WORDS: said once on stderr, in meta, in report text and JSON
ignored() {
  local n=$1 s=$2 w=$3 c
  c=$(grep -c "^gpumem: $s=.* $w" "$tmp/$n.err")
  [[ $c == 1 ]] && ok "$n: $s said once ($w)" || bad "$n: $s said $c times ('$w'): $(grep -m2 "$s" "$tmp/$n.err")"
  jq -e --arg s "$s" '.ignored_settings[$s] | type == "string"' "$tmp/$n.json" > /dev/null \
    && grepq "^  ignored setting     $s " "$tmp/$n.txt" && ok "$n: report shows $s ignored" \
    || bad "$n: report does not show $s ignored"
}
not_ignored() {
  local n=$1 s
  for s in GPUMEM_CONF GPUMEM_LIMIT PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF; do
    grepq "^gpumem: $s=" "$tmp/$n.err" && bad "$n: $s called unused: $(grep "^gpumem: $s=" "$tmp/$n.err")"
  done
  jq -e '.ignored_settings == {}' "$tmp/$n.json" > /dev/null && ok "$n: no setting called unused (all are used)" \
    || bad "$n: ignored_settings $(jq -c .ignored_settings "$tmp/$n.json")"
}
not_ignored te  # PYTORCH_CUDA_ALLOC_CONF with PyTorch's allocator
ignored tg PYTORCH_CUDA_ALLOC_CONF "is ignored: gpumem's allocator serves PyTorch's tensors"
rec tg2 PYTORCH_ALLOC_CONF=max_split_size_mb:64 -- --allocator gpumem -- "$torch_py" "$script"
ignored tg2 PYTORCH_ALLOC_CONF "is ignored: gpumem's allocator serves PyTorch's tensors"
rec tc GPUMEM_CONF=max_split_size_mb:64 GPUMEM_LIMIT=8G -- -- "$torch_py" "$script"
ignored tc GPUMEM_CONF "places only the segments PyTorch's own allocator takes"
grepq "^gpumem: GPUMEM_LIMIT=" "$tmp/tc.err" && bad "tc: GPUMEM_LIMIT (which caps PyTorch's segments) called unused" \
  || ok "tc: GPUMEM_LIMIT, which caps PyTorch's cudaMalloc segments, not called unused"
rec tv PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True GPUMEM_CONF=max_split_size_mb:64 GPUMEM_LIMIT=8G \
  -- -- "$torch_py" "$script"
ignored tv GPUMEM_LIMIT "does not apply to the memory the program maps itself"
ignored tv GPUMEM_CONF "does not apply to the memory the program maps itself"
rec cr GPUMEM_MODE=record GPUMEM_CONF=max_split_size_mb:64 GPUMEM_LIMIT=1G -- -- "$apps/rt_app"
ignored cr GPUMEM_CONF "is ignored: GPUMEM_MODE=record"
ignored cr GPUMEM_LIMIT "is ignored: GPUMEM_MODE=record"
rec cg GPUMEM_CONF=max_split_size_mb:64 GPUMEM_LIMIT=1G -- -- "$apps/rt_app"
not_ignored cg  # gpumem's allocator serves a C program: both used
# plain LD_PRELOAD, no gpumem record
env GPUMEM_SIM_BACKING=memory GPUMEM_MODE=record GPUMEM_LIMIT=1G GPUMEM_QUIET=1 GPUMEM_DB="$tmp/lp.db" \
  LD_PRELOAD="$build/libgpumem.so" LD_LIBRARY_PATH="$build/sim" "$apps/rt_app" > /dev/null 2> "$tmp/lp.err"
"$G" report "$tmp/lp.db" > "$tmp/lp.txt" 2>&1
"$G" report --json "$tmp/lp.db" > "$tmp/lp.json" 2>/dev/null
ignored lp GPUMEM_LIMIT "is ignored: GPUMEM_MODE=record"
# gpumem-replay: its limit is --limit, PyTorch's configuration only with --torch-env
"$replay" --synth fixed --steps 2 > /dev/null 2> "$tmp/r0.err"
! grepq "is ignored" "$tmp/r0.err" && ok "replay: nothing called unused without settings" || bad "replay: $(cat "$tmp/r0.err")"
GPUMEM_LIMIT=24G PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$replay" --synth fixed --steps 2 \
  > /dev/null 2> "$tmp/r1.err"
for w in "GPUMEM_LIMIT=24G is ignored: .*--limit 24G" "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is ignored: .*--torch-env"; do
  [[ $(grep -c "^gpumem-replay: $w" "$tmp/r1.err") == 1 ]] && ok "replay: said once: ${w%% is*}" \
    || bad "replay: not said once: $w: $(cat "$tmp/r1.err")"
done
GPUMEM_LIMIT=24G PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$replay" --synth fixed --steps 2 --limit 24G \
  --torch-env > /dev/null 2> "$tmp/r2.err"
! grepq "is ignored" "$tmp/r2.err" && ok "replay: --limit and --torch-env given: nothing called unused" \
  || bad "replay: $(cat "$tmp/r2.err")"
exit $fail
