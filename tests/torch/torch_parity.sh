#!/usr/bin/env bash
# torch_parity.sh — the `pytorch` presets against PyTorch's own allocator (issue 36, deliverable
# 1), on the virtual GPU: tests/torch/train_gpt2.py runs under
# torch.cuda.memory._record_memory_history (--history), its _dump_snapshot is imported
# (`gpumem import`) and its trace replayed (`gpumem export --format trace` | gpumem-replay)
# under the matching configuration, `preset:pytorch,` + the very PYTORCH_CUDA_ALLOC_CONF the
# script ran with (GPUMEM_CONF takes PyTorch's keys as PyTorch does), plus the memory fraction
# the script set (per_process_memory_fraction, with --capacity the device's memory). For every
# configuration of the issue:
#   - the replayed peak reserved equals torch.cuda.max_memory_reserved();
#   - the segments left at the end equal torch.cuda.memory_snapshot()'s (count and sizes);
#   - the import's report has PyTorch's peaks: peak allocated = max_memory_allocated() (block
#     sizes replayed from the trace's addresses: its `size` is the request), peak reserved =
#     max_memory_reserved(), peak requested = memory_stats()["requested_bytes.all.peak"];
#   - each configuration changes the replay (the default preset alone gives another peak or
#     other segments): the check can fail;
#   - max_split_size_mb:128 with expandable_segments:True reserves more than either alone (the
#     runaway growth of torch 2.14.1, reproduced by the preset), and `gpumem tune` and `gpumem
#     frag` name it on the import (whose configuration is PyTorch's: preset:pytorch + its conf).
# Prints the error of each configuration in % and `BENCH torch.preset_max_err_pct` (goal 0, bar
# 0.5). The model is `small` (2 layers, GPT-2's vocabulary: allocations past 128 MiB for
# max_split_size_mb and roundup_power2_divisions to act on, at tiny's cost in Python ops);
# TORCH_PARITY_MODEL / _ARGS change it (`make bench` runs gpt2 124M: tests/bench/torch_parity_bench.sh).
set -uo pipefail
source "$(dirname "$0")/common.bash"
G=$build/gpumem R=$build/alloc/gpumem-replay
[[ -x $G && -x $R ]] || { echo "torch_parity.sh: $G or $R is not built" >&2; exit 1; }
model_args=${TORCH_PARITY_ARGS:---model ${TORCH_PARITY_MODEL:-small} -B 8 -T 512}
# the device: the memory-fraction configuration's limit is half of it, and gc acts below that
mem=${TORCH_PARITY_MEM:-12G}

# name | PYTORCH_CUDA_ALLOC_CONF | script flags | memory fraction
configs=(
  "default||--steps 3|"
  "expandable|expandable_segments:True|--steps 3|"
  "max_split_128|max_split_size_mb:128|--steps 3|"
  "max_split_128_expandable|max_split_size_mb:128,expandable_segments:True|--steps 3|"
  "roundup_4|roundup_power2_divisions:4|--steps 3|"
  "roundup_list|roundup_power2_divisions:[256:1,512:2,>:8]|--steps 3|"
  "gc_0.6_fraction_0.5|garbage_collection_threshold:0.6|--steps 5 --seq-jitter|0.5"
  "jitter||--steps 5 --seq-jitter|"
  "jitter_expandable|expandable_segments:True|--steps 5 --seq-jitter|"
)

# the runs, forked from one interpreter that imported torch once (tests/torch/forkrun.py: each
# child hands its configuration to torch's own parser before CUDA starts), two at a time
specs=()
for line in "${configs[@]}"; do
  IFS='|' read -r name conf flags frac <<< "$line"
  specs+=("$name|$conf|$model_args $flags ${frac:+--memory-fraction $frac} --history $tmp/$name.pickle --segments")
done
torch_run GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=$mem -- tests/torch/forkrun.py "$tmp" 2 "${specs[@]}" \
  2> "$tmp/forkrun.err" || { echo "note: a run failed (below)"; tail -3 "$tmp/forkrun.err"; }

fig() { awk -v k="$2" '$1 == k { print $2 }' "$tmp/$1.out"; }
maxerr=0
declare -A reserved
for line in "${configs[@]}"; do
  IFS='|' read -r name conf flags frac <<< "$line"
  tr_=$(fig "$name" max_memory_reserved) ta=$(fig "$name" max_memory_allocated) tq=$(fig "$name" requested_peak)
  if [[ -z $tr_ || ! -s $tmp/$name.pickle ]]; then
    bad "$name: train_gpt2.py failed"; tail -3 "$tmp/$name.err"; maxerr=100; continue
  fi
  reserved[$name]=$tr_
  tsegs=$(fig "$name" segment_sizes | tr ',' '\n' | sort -n | paste -sd, -)
  tn=$(fig "$name" segments)
  if ! "$G" import "$tmp/$name.pickle" -o "$tmp/$name.db" 2> "$tmp/$name.imp" ||
     ! "$G" export --format trace "$tmp/$name.db" > "$tmp/$name.trace"; then
    bad "$name: import/export failed: $(cat "$tmp/$name.imp")"; maxerr=100; continue
  fi
  rconf="preset:pytorch${conf:+,$conf}${frac:+,per_process_memory_fraction:$frac}"
  out=$("$R" --capacity "$mem" --conf "$rconf" --segments "$tmp/$name.trace" 2>&1)
  rr=$(sed -nE 's/.* peak_reserved=([0-9]+).*/\1/p' <<< "$out")
  rsegs=$(sed -nE 's/.* segment_sizes=([0-9,]+).*/\1/p' <<< "$out")
  rn=$(sed -nE 's/.* segments=([0-9]+).*/\1/p' <<< "$out")
  if [[ -z $rr ]]; then bad "$name: replay under '$rconf' failed: $out"; maxerr=100; continue; fi
  err=$(awk -v a="$rr" -v b="$tr_" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.4f", 100 * d / b }')
  maxerr=$(awk -v a="$err" -v b="$maxerr" 'BEGIN { print (a > b) ? a : b }')
  echo "parity: $name: PYTORCH_CUDA_ALLOC_CONF='$conf'${frac:+ fraction $frac}: torch max_memory_reserved $tr_, replayed ($rconf) $rr: error $err%"
  awk -v e="$err" 'BEGIN { exit !(e <= 0.5) }' \
    && ok "$name: replayed peak reserved $rr vs PyTorch's $tr_ (error $err%)" \
    || bad "$name: replayed peak reserved $rr, PyTorch's $tr_ (error $err% > 0.5%)"
  [[ $rn == "$tn" && $rsegs == "$tsegs" ]] \
    && ok "$name: the $tn segments at the end equal memory_snapshot()'s" \
    || bad "$name: segments at the end: replay $rn [$rsegs], PyTorch $tn [$tsegs]"
  read -r ia ir iq < <("$G" report --json "$tmp/$name.db" | jq -r '[.summary.peak_allocated, .summary.peak_reserved, .summary.peak_requested] | @tsv')
  [[ $ia == "$ta" && $ir == "$tr_" && $iq == "$tq" ]] \
    && ok "$name: the import's peaks are PyTorch's (allocated $ta, reserved $tr_, requested $tq)" \
    || bad "$name: the import's peaks allocated $ia reserved $ir requested $iq; PyTorch's $ta $tr_ $tq"
  if [[ -n $conf || -n $frac ]]; then # the configuration must matter to the replay
    base=$("$R" --capacity "$mem" --conf preset:pytorch --segments "$tmp/$name.trace" 2>&1)
    br=$(sed -nE 's/.* peak_reserved=([0-9]+).*/\1/p' <<< "$base")
    bs=$(sed -nE 's/.* segment_sizes=([0-9,]+).*/\1/p' <<< "$base")
    [[ $br != "$rr" || $bs != "$rsegs" ]] && ok "$name: the default preset alone replays otherwise ($br)" \
      || bad "$name: the configuration changes nothing in the replay: the check cannot fail"
  fi
done
m=max_split_128_expandable
if [[ -s $tmp/$m.db ]]; then # tune and frag name it, on the import (its configuration: PyTorch's)
  read -r rr rw < <("$G" tune --json "$tmp/$m.db" | jq -r '[.runaway_growth.peak_reserved, .runaway_growth.without_max_split] | @tsv')
  fx=$("$G" frag --json "$tmp/$m.db" | jq -r '[.fixes[].change] | map(select(test("runaway growth"))) | length')
  [[ $rr == "${reserved[$m]:-}" && ${rw:-0} -gt 0 && $rw -lt $rr && $fx -ge 1 ]] \
    && ok "$m: tune names the runaway growth ($rr reserved, $rw without max_split_size_mb), and frag's fixes drop max_split_size_mb" \
    || bad "$m: tune's runaway_growth '$rr' '$rw' (PyTorch's ${reserved[$m]:-}), frag fixes naming it: $fx"
fi
if [[ -n ${reserved[$m]:-} && -n ${reserved[expandable]:-} && -n ${reserved[max_split_128]:-} ]]; then
  [[ ${reserved[$m]} -gt ${reserved[expandable]} && ${reserved[$m]} -gt ${reserved[max_split_128]} ]] \
    && ok "$m: PyTorch reserves ${reserved[$m]}, more than expandable alone (${reserved[expandable]}) or max_split alone (${reserved[max_split_128]}): the runaway growth, replayed" \
    || bad "$m: reserved ${reserved[$m]}, expandable ${reserved[expandable]}, max_split ${reserved[max_split_128]}"
fi
echo "BENCH torch.preset_max_err_pct $maxerr pct"
exit $fail
