#!/usr/bin/env bash
# torch_devices.sh — a recording with memory on two devices: no figure is two devices added
# together. One table, every command that names a peak, in both views:
#   - PyTorch's view (tests/torch/devices_mlp.py, a model split across cuda:0 and cuda:1):
#     report --json .torch.devices[d] is the program's own max_memory_allocated(d) /
#     max_memory_reserved(d), and .torch's top-level peaks are the busiest device's (.torch.device);
#     the text names each device's peaks;
#   - the device's view (tests/apps/devices_app.c: 80 MiB peak on device 0, 48 MiB on device 1,
#     128 MiB together): report --json .summary.devices, its top-level peaks device 0's, and
#     `gpumem record`'s summary line names the device;
#   - an OOM on device 1: its "live at the OOM" lists device 1's allocations only (not the tensor
#     moved onto cuda:0, not dev0_alloc);
#   - every other command whose figures still add the devices (leaks, frag, tune, advise, viz,
#     export, diff) says so in a note.
set -euo pipefail
source "$(dirname "$0")/common.bash"
GPUMEM_SIM_DEVICES=2 GPUMEM_SIM_BACKING=memory "$G" record -q -o "$tmp/t.db" -- "$torch_py" tests/torch/devices_mlp.py \
  > "$tmp/t.out" 2>&1 || { bad "torch recording failed: $(tail -n 3 "$tmp/t.out")"; exit 1; }
grepq -x OOM_EXPECTED "$tmp/t.out" || bad "devices_mlp.py: no out-of-memory error on cuda:1"
max=$(sed -n 's/^MAX //p' "$tmp/t.out")
[[ -n $max ]] || { bad "devices_mlp.py printed no MAX line: $(tail -n 3 "$tmp/t.out")"; exit 1; }
"$G" report --json "$tmp/t.db" > "$tmp/t.json"
"$G" report "$tmp/t.db" > "$tmp/t.txt"
line0=$(grep -n DEVICE0_LINE tests/torch/devices_mlp.py | cut -d: -f1)

# PyTorch's view: each device's peaks are the program's own
for d in 0 1; do
  want=$(jq -r ".allocated[$d], .reserved[$d]" <<<"$max" | paste -sd' ')
  got=$(jq -r ".torch.devices[]? | select(.device == $d) | \"\(.peak_allocated) \(.peak_reserved)\"" "$tmp/t.json")
  [[ $got == "$want" ]] && ok "torch view, device $d: peak allocated, reserved = max_memory_allocated/reserved($d) ($want)" \
    || bad "torch view, device $d: '$got', the program's own: '$want'"
  a=$(jq -r ".allocated[$d]" <<<"$max")
  grepq -E "^    device $d +peak allocated .*\($a bytes" "$tmp/t.txt" && ok "report text: device $d's PyTorch peak ($a)" \
    || bad "report text names no PyTorch peak of $a bytes on device $d"
done
busy=$(jq -r '.torch.device' "$tmp/t.json")
want=none
[[ $busy =~ ^[01]$ ]] && want=$(jq -r ".allocated[$busy], .reserved[$busy]" <<<"$max" | paste -sd' ')
got=$(jq -r '"\(.torch.peak_allocated) \(.torch.peak_reserved)"' "$tmp/t.json")
[[ $got == "$want" ]] && ok "torch view: the top-level peaks are device $busy's ($got)" \
  || bad "torch view: top-level peaks '$got' (device '$busy'), device $busy's own '$want'"
sum=$(jq -r '.allocated[0] + .allocated[1]' <<<"$max")
jq -e ".torch.peak_allocated < $sum" "$tmp/t.json" >/dev/null && ok "torch view: no peak adds the two devices" \
  || bad "torch view: peak allocated $(jq .torch.peak_allocated "$tmp/t.json") is not below both devices' sum $sum"

# the OOM on device 1 lists device 1's memory only
jq -e '.ooms | length == 1 and .[0].device == 1' "$tmp/t.json" >/dev/null || bad "torch: not one OOM on device 1"
sites=$(jq -r '.ooms[0].live_by_site[]?.site' "$tmp/t.json")
if grepq "devices_mlp.py:$line0" <<<"$sites"; then bad "torch OOM on device 1 lists cuda:0's devices_mlp.py:$line0: $sites"
else ok "torch OOM on device 1: its live memory is device 1's (no devices_mlp.py:$line0)"; fi

# the device's view, on a C program
GPUMEM_SIM_DEVICES=2 "$G" record -o "$tmp/c.db" -- "$build/tests/apps/devices_app" > "$tmp/c.out" 2>&1 \
  || { bad "devices_app: $(tail -n 3 "$tmp/c.out")"; exit 1; }
"$G" report --json "$tmp/c.db" > "$tmp/c.json"
got=$(jq -r '[.summary.devices[]? | "\(.device):\(.peak_allocated):\(.peak_reserved)"] | join(" ")' "$tmp/c.json")
want="0:$((80 << 20)):$((80 << 20)) 1:$((48 << 20)):$((48 << 20))"
[[ $got == "$want" ]] && ok "device view: each device's peak allocated and reserved ($got)" \
  || bad "device view: per-device peaks '$got', want '$want'"
got=$(jq -r '"\(.summary.device) \(.summary.peak_allocated) \(.summary.peak_reserved)"' "$tmp/c.json")
[[ $got == "0 $((80 << 20)) $((80 << 20))" ]] && ok "device view: the top-level peaks are device 0's, not 128 MiB" \
  || bad "device view: top-level '$got', want device 0's 80 MiB"
grepq -E "^gpumem: peak allocated 80.00 MiB .* on device 0 \(the busiest of 2\)" "$tmp/c.out" \
  && ok "record's summary: device 0's peak, named" || bad "record's summary: $(grep '^gpumem: peak' "$tmp/c.out")"
sites=$(jq -r '.ooms[0].live_by_site[]?.site' "$tmp/c.json")
[[ $(jq -r '.ooms[0].device' "$tmp/c.json") == 1 ]] && grepq dev1_alloc <<<"$sites" && ! grepq dev0_alloc <<<"$sites" \
  && ok "device view: the OOM on device 1 lists dev1_alloc only" || bad "device view: OOM's live sites: $sites"

# every command whose figures still add the devices says so
note="the program used 2 devices (0 to 1)"
for db in t c; do
  for cmd in leaks frag tune advise viz export diff; do
    case $cmd in
      viz) args=(viz "$tmp/$db.db" -o "$tmp/$db.html") ;;
      export) args=(export "$tmp/$db.db" --format csv -o "$tmp/$db.csv") ;;
      diff) args=(diff "$tmp/$db.db" "$tmp/$db.db") ;;
      *) args=("$cmd" "$tmp/$db.db") ;;
    esac
    "$G" "${args[@]}" > "$tmp/o" 2>&1 || true
    grepq -F "$note" "$tmp/o" && ok "$db: $cmd says its figures add the devices" \
      || bad "$db: $cmd does not say it adds 2 devices: $(head -n 2 "$tmp/o")"
  done
done
exit $fail
