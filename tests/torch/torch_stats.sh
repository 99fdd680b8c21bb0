#!/usr/bin/env bash
# torch_stats.sh — PyTorch's memory statistics with gpumem as its allocator (--allocator gpumem):
# every statistics entry point of torch.cuda works, and says what the recording says. Before,
# PyTorch's CUDAPluggableAllocator refused them ("does not yet support getDeviceStats" /
# "resetPeakStats" / "resetAccumulatedStats"), so a training loop that logged
# max_memory_allocated() or called reset_peak_memory_stats() crashed under gpumem. One table, a row
# a way gpumem is PyTorch's allocator (libgpumem_torch.so's allocator; the gpumem Python module's
# fallback without it), on two devices, one short script each (tests/torch/stats_gm.py):
#   - memory_allocated, max_memory_allocated, memory_reserved, max_memory_reserved, memory_cached,
#     max_memory_cached, memory_stats, memory_stats_as_nested_dict, memory_summary,
#     reset_accumulated_memory_stats, reset_peak_memory_stats, reset_max_memory_allocated,
#     reset_max_memory_cached: none raises;
#   - the script's whole-run max_memory_allocated(), requested_bytes.all.peak and
#     max_memory_reserved() equal report's .torch.peak_allocated, .torch.peak_requested and the
#     device's .summary.devices[].peak_reserved, to the byte, and so do each device's
#     (.torch.devices[]);
#   - reset_peak_memory_stats restarts the peaks at the current values (PyTorch's rule), the next
#     top counts from there, below the whole run's (which the report keeps); the recording marks
#     each reset (event 38 flagged 4096), and report's .torch.peak_reset has the program's own
#     max_memory_allocated() / max_memory_reserved() at its end and the 4 resets of device 0
#     (device 1, never reset: null), its text a "since the reset" line; tune, frag, diff and the
#     ranks report read device 0's the same (torch_tune.sh has every reader on one device);
#   - num_ooms counts a request over the device (report's .summary.ooms), num_alloc_retries the
#     retry gpumem made after freeing its cache first, and
#     reset_accumulated_memory_stats sets it and the accumulated counts back to 0;
#   - get_per_process_memory_fraction (refused by the pluggable allocator too) is 1, then the
#     fraction set_per_process_memory_fraction set;
#   - GPUMEM_MODE=record (the driver serves every tensor, gpumem keeps no allocator figures): the
#     figures raise, in gpumem's words, never made-up zeros.
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/stats_gm.py
[[ -e $build/libgpumem_torch.so ]] || { echo "torch_stats.sh: $build/libgpumem_torch.so not built; skipped" >&2; exit 77; }
# a gpumem beside a libgpumem.so without libgpumem_torch.so (the fallback row), as torch_gm_oom.sh
nolib=$tmp/nolib/build
mkdir -p "$nolib"
cp "$G" "$build/libgpumem.so" "$nolib/"
ln -s "$(realpath "$build/sim")" "$nolib/sim"
ln -s "$(realpath preload)" "$tmp/nolib/preload"

entries="memory_allocated max_memory_allocated memory_reserved max_memory_reserved memory_cached max_memory_cached
memory_stats memory_stats_as_nested_dict memory_summary reset_accumulated_memory_stats reset_peak_memory_stats
reset_max_memory_allocated reset_max_memory_cached get_per_process_memory_fraction"
# NAME | gpumem | ENV | the OOM raised torch.OutOfMemoryError, the fraction in force after
# set_per_process_memory_fraction(0.25) (without libgpumem_torch.so neither reaches gpumem: the
# refused tensor has no memory, the fraction caps nothing, preload/README.md) | "figures", or the
# words the figures raise with
table=(
  "shim|$G|GPUMEM_SIM_DEVICES=2|1 0.25|figures"
  "no-shim|$nolib/gpumem|GPUMEM_SIM_DEVICES=2|0 1|figures"
  "record|$G|GPUMEM_MODE=record||^RAISE figures RuntimeError: gpumem: no memory statistics for device 0: .*GPUMEM_MODE=record"
  "record-no-shim|$nolib/gpumem|GPUMEM_MODE=record||^RAISE figures RuntimeError: gpumem: no memory statistics for device 0: .*GPUMEM_MODE=record"
)
for row in "${table[@]}"; do
  IFS='|' read -r name g envs hooks want <<< "$row"
  read -r raised fraction <<< "$hooks"
  env GPUMEM_SIM_BACKING=memory $envs "$g" record -q --allocator gpumem -o "$tmp/$name.db" -- \
    "$torch_py" "$script" > "$tmp/$name.out" 2> "$tmp/$name.err"
  rc=$?
  out=$tmp/$name.out
  if [[ $want != figures ]]; then
    [[ $rc != 0 ]] && grep -Eq -- "$want" "$out" && ok "$name: the figures raise /$want/" \
      || bad "$name: exit $rc, want the figures to raise /$want/: $(head -3 "$out") $(tail -3 "$tmp/$name.err")"
    continue
  fi
  [[ $rc == 0 ]] && ok "$name: the program ran to its end" || bad "$name: exit $rc: $(head -3 "$out") $(tail -3 "$tmp/$name.err")"
  for e in $entries; do
    grep -qx "OK $e" "$out" && ok "$name: $e works" || bad "$name: $e: $(grep -E "^(RAISE $e|RAISE figures)" "$out" | head -1)"
  done
  json=$("$G" report --json "$tmp/$name.db" 2>/dev/null)
  read -r _ alloc res req < <(grep '^PEAKS ' "$out")
  want_peaks=$(jq -r '"\(.torch.peak_allocated) \(.summary.devices[] | select(.device == 0) | .peak_reserved) \(.torch.peak_requested)"' <<< "$json")
  [[ "$alloc $res $req" == "$want_peaks" ]] \
    && ok "$name: max_memory_allocated, max_memory_reserved, requested peak $alloc $res $req = report's" \
    || bad "$name: the script's peaks '$alloc $res $req', report's '$want_peaks'"
  for d in 0 1; do
    got=$(grep "^DEV $d " "$out" | cut -d' ' -f4-)
    w=$(jq -r --argjson d "$d" '"\(.torch.devices[] | select(.device == $d) | "\(.peak_allocated) \(.peak_requested)") \(.summary.devices[] | select(.device == $d) | .peak_reserved)"' <<< "$json")
    [[ -n $got && $got == "$w" ]] && ok "$name: device $d's peaks (allocated, requested, reserved) $got = report's" \
      || bad "$name: device $d's peaks '$got', report's '$w'"
  done
  while read -r _ fig got w; do
    [[ $got == "$w" ]] && ok "$name: after reset_peak_memory_stats, $fig's peak $got = its current" \
      || bad "$name: after reset_peak_memory_stats, $fig's peak $got, want $w"
  done < <(grep '^RESET ' "$out")
  [[ $(grep -c '^RESET ' "$out") == 4 ]] || bad "$name: $(grep -c '^RESET ' "$out") RESET lines, want 4"
  then=$(grep '^RESET allocated-then ' "$out" | cut -d' ' -f3)
  [[ -n $then && $then -lt $alloc ]] && ok "$name: the peak after the reset ($then) is below the whole run's ($alloc)" \
    || bad "$name: the peak after the reset '$then', the whole run's $alloc"
  ooms=$(jq .summary.ooms <<< "$json")
  [[ $(grep '^OOM ' "$out") == "OOM $raised 1 1" && $ooms == 1 ]] && ok "$name: num_ooms 1 after the OOM (report's 1 too), num_alloc_retries 1" \
    || bad "$name: '$(grep '^OOM ' "$out")', want 'OOM $raised 1 1'; report's ooms $ooms"
  grep -qx 'ACC 0 0' "$out" && ok "$name: reset_accumulated_memory_stats: num_ooms and allocations 0" \
    || bad "$name: after reset_accumulated_memory_stats: '$(grep '^ACC ' "$out")', want 'ACC 0 0'"
  read -r _ ea er < <(grep '^END ' "$out")
  w=$(jq -r '.torch.peak_reset | "\(.count) \(.max_memory_allocated) \(.max_memory_reserved)"' <<< "$json")
  [[ -n $ea && $w == "4 $ea $er" ]] && ok "$name: report's .torch.peak_reset $w = 4 resets, the script's figures at its end" \
    || bad "$name: report's .torch.peak_reset '$w', the script's: 4 resets, '$ea $er'"
  w=$(jq -c '[.torch.devices[] | .peak_reset | if . then .count else null end]' <<< "$json")
  [[ $w == '[4,null]' ]] && ok "$name: .torch.devices[].peak_reset counts 4 on device 0, none on 1" \
    || bad "$name: .torch.devices[].peak_reset counts $w, want [4,null]"
  "$G" report "$tmp/$name.db" 2>/dev/null | grepq "^  since the reset  .* bytes; max_memory_allocated(0)).*reset_peak_memory_stats(0), several times" \
    && ok "$name: report's text has the since-the-reset line" || bad "$name: report's text: $("$G" report "$tmp/$name.db" 2>/dev/null | grep -A3 'PyTorch through gpumem')"
  n=$(sqlite3 "$tmp/$name.db" "SELECT value FROM meta WHERE key = 'gpumem_peak_resets'")
  [[ $n == 4 ]] && ok "$name: meta gpumem_peak_resets 4 (the readers scan for them where it is not 0)" \
    || bad "$name: meta gpumem_peak_resets '$n', want 4"
  # the other readers of the reset, on two devices: each reads device 0's (the busiest), its resets
  # and figures alone (tests/torch/torch_tune.sh has every reader on one device)
  cp "$tmp/$name.db" "$tmp/$name-2.db"
  while IFS='|' read -r what args want filter; do
    # shellcheck disable=SC2086
    w=$("$G" $args 2>/dev/null | jq -r "$filter" | paste -sd' ')
    [[ $w == "$want" ]] && ok "$name: $what: $w = 4 resets of device 0, the script's figures at its end" \
      || bad "$name: $what: '$w', want '$want'"
  done <<EOT
tune .recorded.peak_reset|tune --json $tmp/$name.db|4 $ea $er|.recorded.peak_reset | "\\(.count) \\(.max_memory_allocated) \\(.max_memory_reserved)"
frag .recorded.peak_reset|frag --json $tmp/$name.db|4 $ea $er|.recorded.peak_reset | "\\(.count) \\(.max_memory_allocated) \\(.max_memory_reserved)"
diff .b.peak_reset|diff --json $tmp/$name.db $tmp/$name-2.db|4 $ea $er|.b.peak_reset | "\\(.count) \\(.max_memory_allocated) \\(.max_memory_reserved)"
the ranks report's rank 1|report --json $tmp/$name.db $tmp/$name-2.db|4 $ea|.ranks[1] | "\\(.torch_peak_reset.count) \\(.torch_peak_allocated)"
EOT
  grep -qx "FRACTION 1 $fraction" "$out" && ok "$name: get_per_process_memory_fraction 1, then $fraction" \
    || bad "$name: '$(grep '^FRACTION ' "$out")', want 'FRACTION 1 $fraction'"
done
exit $fail
