#!/usr/bin/env bash
# torch_extras.sh — what gpumem says of a PyTorch script with no module and no optimizer, with
# pinned host memory (tests/torch/torch_extras.py), as an outside check of 2026-12-07 found it:
#   hint  report and advise said "not decided: ... or record a PyTorch script with gpumem
#       record's hooks" of a recording made with those hooks on: they now say the hooks were on
#       and what the script lacked for them (no nn.Module's forward, no optimizer.step()); with
#       --no-torch-hooks, to record it again without that option; with a range of its own
#       ("ranged"), that no range is "step N" > fwd / bwd / opt (meta.torch_hooks,
#       gm_phases_hint);
#   pinned  report counted "pinned host 4" and gave no bytes: .summary.peak_host_bytes and
#       .summary.host_bytes are what PyTorch's host allocator counted (host_memory_stats'
#       allocated_bytes.peak and .allocated, printed by the script), and the text says them;
#   (and record's closing summary says the pinned bytes as report does: it gave no host figure)
#   start  report's "Device used" column "at start" was sampled after gpumem's first 256 MiB
#       segment (reserved by gpumem 256 MiB "at start"), under PyTorch's allocator and under
#       --allocator gpumem: it is the device before that segment, the context alone.
#   attn  F.scaled_dot_product_attention on plain tensors in a loop, an accumulator made once
#       after the first iteration's frees: 32 KiB of it read as "optimizer state" (the inferred
#       update after the backward's last free), where no optimizer.step() ran (the hooks, on, saw
#       none): inferred steps then have no update (.torch.categories.update false);
#   driver  the device's "other" of the loop's cuMemAlloc's (inference) and PyTorch's 20 MiB
#       segment (no source) read "other from inference, 20.00 MiB by nothing": it says what.
# Table: NAME#record options#command#jq filter or grep -c pattern (text)#want ($hp, $ht: the
# script's printed host_peak, host_total).
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/torch_extras.py
table=(
  "hint#-#report --json#.torch.categories.hint | test(\"hooks were on.*no nn.Module's forward and no optimizer.step\")#true"
  "hint#-#report#record a PyTorch script with gpumem record's hooks#0"
  "hint#-#report#^  not decided: .*gpumem record's PyTorch hooks were on, but .* ran no nn.Module's forward and no optimizer.step()#1"
  "hint#-#advise --json#[.notes[] | select(test(\"cannot be told apart\"))] | map(test(\"hooks were on.*no nn.Module's forward\")) | join(\",\")#true"
  "hint#-#advise#gpumem record's PyTorch hooks\$#0"
  "ranged#-#report --json#.torch.categories.hint | test(\"hooks were on.*ran no .step N. > fwd / bwd / opt range: its own ranges name none\")#true"
  "nohooks#--no-torch-hooks#report --json#.torch.categories.hint | test(\"without --no-torch-hooks\")#true"
  "pinned#-#report --json#.summary | (.peak_host_bytes == \$hp), (.host_bytes == \$ht), .host_allocations#true true 4"
  "hint#-#report --json#.device_used.devices[0].start | .reserved_by_gpumem, .recorded_outside, (.used == .not_recorded)#0 0 true"
  "gpumem#--allocator gpumem#report --json#.device_used.devices[0].start | .reserved_by_gpumem, .recorded_outside, (.used == .not_recorded)#0 0 true"
  "attn#-#report --json#.torch.categories_at_peak.optimizer_state, ([.torch.categories.over_time[].optimizer_state] | add), .torch.categories.update#0 0 false"
  "attn#-#report#^  no update: gpumem record's PyTorch hooks saw no optimizer.step()#1"
  "driver#-#report#by nothing#0"
  "driver#-#report#^ .* other  *from inference, \$resm undecided (no source placed it#1"
  "pinned#-#report#^  pinned host  *\$hpm at its peak, \$htm in all (4 allocations#1"
)
for row in "${table[@]}"; do
  IFS='#' read -r name opts cmd filter want <<< "$row"
  db=$tmp/$name.db
  [[ $name == pinned ]] && db=$tmp/hint.db
  [[ $opts == - ]] && opts=
  if [[ ! -f $db ]]; then
    # shellcheck disable=SC2086
    args=()
    [[ $name == ranged || $name == attn || $name == driver ]] && args=("$name")
    env GPUMEM_SIM_BACKING=memory "$G" record -q $opts -o "$db" -- "$torch_py" "$script" "${args[@]}" > "$db.out" 2>&1
    [[ -f $db ]] || { bad "$name: the recording failed: $(tail -3 "$db.out")"; continue; }
  fi
  hp=$(awk '$1 == "host_peak" { print $2 }' "$db.out")
  ht=$(awk '$1 == "host_total" { print $2 }' "$db.out")
  # shellcheck disable=SC2086
  "$G" $cmd "$db" > "$tmp/out" 2> "$tmp/err"
  if [[ $cmd == *--json ]]; then
    got=$(jq -r --argjson hp "${hp:-null}" --argjson ht "${ht:-null}" "$filter" "$tmp/out" 2>&1 | paste -sd' ')
  else
    pat=${filter//\$hpm/$(awk -v b="${hp:-0}" 'BEGIN {printf "%.2f MiB", b / 1048576}')}
    pat=${pat//\$htm/$(awk -v b="${ht:-0}" 'BEGIN {printf "%.2f MiB", b / 1048576}')}
    pat=${pat//\$resm/$(awk '$1 == "max_memory_reserved" { printf "%.2f MiB", $2 / 1048576 }' "$db.out")}
    got=$(grep -c -- "$pat" "$tmp/out")
  fi
  [[ $got == "$want" ]] && ok "$name $cmd: $filter = $want" || bad "$name $cmd: $filter = '$got', want '$want'"
done
# record's closing summary (not -q) says the pinned bytes too, as report's line does: it gave no
# host figure at all
db=$tmp/summary.db
env GPUMEM_SIM_BACKING=memory "$G" record -o "$db" -- "$torch_py" "$script" > "$db.out" 2>&1
hpm=$(awk '$1 == "host_peak" { printf "%.2f MiB", $2 / 1048576 }' "$db.out")
htm=$(awk '$1 == "host_total" { printf "%.2f MiB", $2 / 1048576 }' "$db.out")
want="gpumem: pinned host $hpm at its peak, $htm in all (4 allocations of page-locked host memory)"
[[ -n $hpm ]] && grepq -Fx -- "$want" "$db.out" && ok "record's summary: $want" \
  || bad "record's summary has no line '$want': $(grep '^gpumem: ' "$db.out" | paste -sd'|')"
exit $fail
