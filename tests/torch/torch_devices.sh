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
#   - the ranks report and diff give one device's figures (the busiest's), each said, never the
#     sum: 80 MiB for devices_app, PyTorch's max_memory_allocated(d) for devices_mlp.py;
#   - every other command (leaks, frag, tune, advise, viz, export's folded) reads the busiest
#     device's events alone and says so in a note; none does for `devices_app stream` (memory on
#     device 0 only, a stream used on device 1): devices are counted from the memory recorded;
#   - a reset of one device's peak stats (tests/torch/devices_reset.py: reset_peak_memory_stats(1)):
#     report's .torch.devices[d].peak_reset is device d's own (null on device 0, the program's
#     max_memory_*(1) on device 1), the ranks report's torch_peak_allocated is max_memory_allocated(1)
#     with the reset said, and diff's gate compares the whole-run peak reserved, named so, its
#     line of the reset naming the device (max_memory_allocated(1) since);
#   - the figures of one device where they are compared (the table below, devices_figs.py);
#   - --device N where PyTorch's history has nothing on N (tests/torch/devices_one.py: tensors on
#     cuda:0 only, 8 MiB on device 1 outside PyTorch): report says so in PyTorch's block (text:
#     "has nothing on device 1 ... on device 0"; JSON .torch.on_device false, its peaks null,
#     .tensor_devices [0]), never device 0's figures or zeros as device 1's; --device 0 keeps
#     PyTorch's own max_memory_allocated(0); and so does every other command that shows PyTorch's
#     view (diff, the ranks report, export --view torch, leaks, frag, tune, advise, viz): a row each;
#   - without --device, on the same program with 256 MiB on device 1 (the busiest by gpumem's
#     account, none of it PyTorch's): every command reads device 0, PyTorch's, and says why (JSON
#     device_from "torch", busiest_device 1): a row each, and so with gpumem as PyTorch's allocator
#     (--allocator gpumem: PyTorch's tensors are the hook's allocations; it read device 1).
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

# the ranks report and diff: the busiest device's figures, said, not the two devices added
cp "$tmp/c.db" "$tmp/c2.db"
cp "$tmp/t.db" "$tmp/t2.db"
"$G" report --json "$tmp/c.db" "$tmp/c2.db" > "$tmp/rk.json" 2>/dev/null || true
got=$(jq -r '[.ranks[] | "\(.device):\(.peak_allocated):\(.peak_reserved)"] | join(" ")' "$tmp/rk.json")
want="0:$((80 << 20)):$((80 << 20)) 0:$((80 << 20)):$((80 << 20))"
[[ $got == "$want" ]] && ok "ranks report, device view: each rank's peaks are device 0's ($got)" \
  || bad "ranks report, device view: '$got', want '$want'"
"$G" report "$tmp/c.db" "$tmp/c2.db" > "$tmp/rk.txt" 2>&1 || true
grepq -F "held memory on 2 devices (0 to 1): its peaks, step, phase, timeline and leaks are device 0's" "$tmp/rk.txt" \
  && ok "ranks report text: says whose figures they are" || bad "ranks report text says no device: $(head -n 6 "$tmp/rk.txt")"
"$G" report --json "$tmp/t.db" "$tmp/t2.db" > "$tmp/rkt.json" 2>/dev/null || true
tdev=$(jq -r '.ranks[0].torch_device' "$tmp/rkt.json")
want=none
[[ $tdev =~ ^[01]$ ]] && want=$(jq -r ".allocated[$tdev]" <<<"$max")
got=$(jq -r '.ranks[0].torch_peak_allocated' "$tmp/rkt.json")
[[ $got == "$want" ]] && ok "ranks report, torch view: torch_peak_allocated = max_memory_allocated($tdev) ($got)" \
  || bad "ranks report, torch view: torch_peak_allocated '$got' (device '$tdev'), the program's '$want'"
"$G" diff --json "$tmp/c.db" "$tmp/c2.db" > "$tmp/df.json" 2> "$tmp/df.err" || true
got=$(jq -r '"\(.a.device) \(.a.peak_allocated) \(.b.device) \(.b.peak_reserved)"' "$tmp/df.json")
[[ $got == "0 $((80 << 20)) 0 $((80 << 20))" ]] && grepq -F "its figures here are device 0's" "$tmp/df.err" \
  && ok "diff, device view: device 0's peaks on both sides (80 MiB), said" || bad "diff, device view: '$got'; $(head -n 2 "$tmp/df.err")"
"$G" diff --json "$tmp/t.db" "$tmp/t2.db" > "$tmp/dft.json" 2>/dev/null || true
got=$(jq -r '"\(.a.device) \(.a.peak_allocated) \(.a.peak_reserved)"' "$tmp/dft.json")
want=none
[[ $busy =~ ^[01]$ ]] && want="$busy $(jq -r ".allocated[$busy], .reserved[$busy]" <<<"$max" | paste -sd' ')"
[[ $got == "$want" ]] && ok "diff, torch view: device $busy's max_memory_allocated/reserved ($got)" \
  || bad "diff, torch view: '$got', the program's '$want'"

# a stream used on device 1 holds no memory there: one device, no note from any command
GPUMEM_SIM_DEVICES=2 "$G" record -q -o "$tmp/s.db" -- "$build/tests/apps/devices_app" stream > "$tmp/s.out" 2>&1 \
  || { bad "devices_app stream: $(tail -n 3 "$tmp/s.out")"; exit 1; }
[[ $(sqlite3 "$tmp/s.db" "SELECT count(DISTINCT device) FROM streams WHERE device >= 0") == 2 ]] \
  || bad "devices_app stream: the streams table does not name device 1 (the check below would prove nothing)"
for cmd in leaks frag tune advise viz export; do
  case $cmd in
    viz) args=(viz "$tmp/s.db" -o "$tmp/s.html") ;;
    export) args=(export "$tmp/s.db" --format csv -o "$tmp/s.csv") ;;
    *) args=("$cmd" "$tmp/s.db") ;;
  esac
  "$G" "${args[@]}" > "$tmp/o" 2>&1 || true
  grepq -E "used [0-9]+ devices|held memory on [0-9]+ devices" "$tmp/o" \
    && bad "a stream on an unused device: $cmd says several devices: $(grep -E 'devices' "$tmp/o" | head -n 1)" \
    || ok "a stream on an unused device: $cmd says nothing of several devices"
done

# a reset of device 1's peak stats only: each device's figures by its own reset
GPUMEM_SIM_DEVICES=2 GPUMEM_SIM_BACKING=memory "$G" record -q -o "$tmp/r.db" -- "$torch_py" tests/torch/devices_reset.py \
  > "$tmp/r.out" 2>&1 || { bad "devices_reset.py: $(tail -n 3 "$tmp/r.out")"; exit 1; }
rmax=$(sed -n 's/^MAX //p' "$tmp/r.out")
"$G" report --json "$tmp/r.db" > "$tmp/r.json"
got=$(jq -r '[.torch.devices[] | "\(.device):\(.peak_reset.max_memory_allocated // "none"):\(.peak_reset.max_memory_reserved // .peak_reserved)"] | join(" ")' "$tmp/r.json")
want="0:none:$(jq -r '.reserved[0]' <<<"$rmax") 1:$(jq -r '.allocated[1]' <<<"$rmax"):$(jq -r '.reserved[1]' <<<"$rmax")"
[[ $got == "$want" ]] && ok "reset of device 1: no reset on device 0, device 1's since it = max_memory_*(1) ($got)" \
  || bad "reset of device 1: per device '$got', the program's '$want'"
got=$(jq -r '"\(.torch.device) \(.torch.peak_reset.max_memory_allocated) \(.torch.peak_reset.max_memory_reserved)"' "$tmp/r.json")
want="1 $(jq -r '.allocated[1], .reserved[1]' <<<"$rmax" | paste -sd' ')"
[[ $got == "$want" ]] && ok "reset of device 1: report's .torch.peak_reset is device 1's own ($got)" \
  || bad "reset of device 1: .torch device and peak_reset '$got', the program's '$want'"
cp "$tmp/r.db" "$tmp/r2.db"
"$G" report --json "$tmp/r.db" "$tmp/r2.db" > "$tmp/rkr.json" 2>/dev/null || true
got=$(jq -r '.ranks[0] | "\(.torch_device) \(.torch_peak_allocated) \(.torch_peak_reset.count)"' "$tmp/rkr.json")
want="1 $(jq -r '.allocated[1]' <<<"$rmax") 1"
[[ $got == "$want" ]] && ok "reset of device 1: the ranks report's torch_peak_allocated = max_memory_allocated(1), reset said ($got)" \
  || bad "reset of device 1: ranks report '$got', want '$want'"
"$G" diff --json "$tmp/r.db" "$tmp/r2.db" --fail-if-peak-grows 5 > "$tmp/dfr.json" 2>/dev/null || true
"$G" diff "$tmp/r.db" "$tmp/r2.db" --fail-if-peak-grows 5 > "$tmp/dfr.txt" 2>&1 || true
got=$(jq -r '"\(.gate.on) \(.a.peak_reset.max_memory_reserved)"' "$tmp/dfr.json")
[[ $got == "peak_reserved $(jq -r '.reserved[1]' <<<"$rmax")" ]] && grepq -F "PyTorch's whole-run peak reserved" "$tmp/dfr.txt" \
  && ! grepq -F "max_memory_reserved() 96" "$tmp/dfr.txt" \
  && grepq -F "max_memory_allocated(1) / max_memory_reserved(1) since" "$tmp/dfr.txt" \
  && ok "reset: diff's gate is on the whole-run peak reserved, named so ($got)" \
  || bad "reset: diff's gate '$got': $(grep -F 'allowed' "$tmp/dfr.txt")"

# The figures of one device, never a device's added to another's, where they are compared or
# put side by side. tests/torch/devices_figs.py: device 0 peaks (its PyTorch requested_bytes peak
# above device 1's) and ends lower, then device 1 peaks, so that a sum reads a figure no device
# held. A table: NAME | GPUMEM_SIM_DEVICES | record's options | PYTORCH_CUDA_ALLOC_CONF.
#   - PyTorch through gpumem (--allocator gpumem): .torch's peak requested is the busiest device's
#     (.torch.device), each .torch.devices[d] is the program's own requested_bytes.all.peak of d
#     (the same program under PyTorch's allocator: requested bytes are the program's), and
#     record's summary line names the device;
#   - PyTorch's difference to the device's peak (.torch.device_peak) is one device's: its parts add
#     up exactly, and on two devices it is the busiest device's own peak reserved;
#   - advise's "the device held N bytes more" is report's .summary.peak_device - .torch.peak_reserved
#     (under expandable segments, PyTorch's segments are the program's own VMM);
#   - device used's "by call site" has one row per (what, printed site).
figs=(
  "gm-two|2|--allocator gpumem|"
  "own-two|2||"
  "own-one|1||"
  "exp-one|1||expandable_segments:True"
  "exp-two|2||expandable_segments:True"
)
for row in "${figs[@]}"; do
  IFS='|' read -r name ndev opts conf <<< "$row"
  mode=own
  [[ $opts == *gpumem* ]] && mode=gm
  # the truth: the program's own figures under PyTorch's allocator
  GPUMEM_SIM_DEVICES=$ndev GPUMEM_SIM_BACKING=memory PYTORCH_CUDA_ALLOC_CONF=$conf "$G" record -q -o "$tmp/f-$name-own.db" \
    -- "$torch_py" tests/torch/devices_figs.py own "$ndev" > "$tmp/f-$name-own.out" 2>&1 \
    || { bad "$name: recording failed: $(tail -n 2 "$tmp/f-$name-own.out")"; continue; }
  read -r -a req < <(sed -n 's/^REQ //p' "$tmp/f-$name-own.out")
  db=$tmp/f-$name-own.db
  if [[ $mode == gm ]]; then
    db=$tmp/f-$name.db
    GPUMEM_SIM_DEVICES=$ndev GPUMEM_SIM_BACKING=memory "$G" record $opts -o "$db" -- "$torch_py" tests/torch/devices_figs.py \
      gm "$ndev" > "$tmp/f-$name.out" 2>&1 || { bad "$name: recording failed: $(tail -n 2 "$tmp/f-$name.out")"; continue; }
    got=$("$G" report --json "$db" | jq -r '.torch | "\(.device) \(.peak_requested) \([.devices[]?.peak_requested] | join(" "))"' || true)
    busy=0
    [[ ${req[1]} -gt ${req[0]} ]] && busy=1
    want="$busy ${req[$busy]} ${req[*]}"
    [[ $got == "$want" ]] && grepq "PyTorch through gpumem .* on device $busy (the busiest of 2)" "$tmp/f-$name.out" \
      && ok "$name: PyTorch through gpumem: device $busy's peak requested, each device's its own ($got)" \
      || bad "$name: .torch '$got', the program's requested_bytes peaks: '$want'; record: $(grep 'through gpumem' "$tmp/f-$name.out")"
    continue
  fi
  "$G" report --json "$db" > "$tmp/f-$name.json"
  read -r sum parts dev tdev < <(jq -r '.torch as $t | $t.device_peak | "\(.reserved) \(.torch_reserved + .outside_torch
    + .gpumem_cache + .other_vmm) \(.device) \($t.device)"' "$tmp/f-$name.json")
  [[ -n $sum && $sum == "$parts" && $dev == "$tdev" ]] \
    && ok "$name: PyTorch's difference to the device's peak adds up ($sum = its parts, device $dev)" \
    || bad "$name: the device's peak $sum, its parts $parts (device $dev, PyTorch's figures device $tdev)"
  if [[ $ndev == 2 && -z $conf ]]; then
    own=$(jq -r --argjson d "$dev" '.summary.devices[]? | select(.device == $d) | .peak_reserved' "$tmp/f-$name.json" || true)
    [[ $sum == "$own" ]] && ok "$name: it is device $dev's own peak reserved ($own)" \
      || bad "$name: the device's peak compared is $sum, device $dev's own $own"
  fi
  if [[ -n $conf && $ndev == 1 ]]; then
    more=$({ "$G" advise "$db" 2>&1 || true; } | sed -n 's/.*the device held \([0-9]*\) bytes more.*/\1/p')
    want=$(jq -r '.summary.peak_device - .torch.peak_reserved' "$tmp/f-$name.json")
    [[ -n $more && $more == "$want" && $want -gt 0 ]] \
      && ok "$name: advise's device held $more bytes more = report's peak_device - PyTorch's peak reserved" \
      || bad "$name: advise says '$more' bytes more, report's peak_device - torch.peak_reserved = $want"
  fi
  if [[ -n $conf ]]; then
    "$G" report "$db" > "$tmp/f-$name.txt"
    dup=$(jq -r '[.device_used.devices[].outside_at_peak_by_site | group_by([.what, .site])[] | select(length > 1)] | length' \
      "$tmp/f-$name.json")
    tdup=$(sed -n '/held outside gpumem.s allocator at the peak, by call site/,/^[^ ]/p' "$tmp/f-$name.txt" \
      | sed -n 's/^ \{4\} *[0-9.]* [KMG]*i*B  \(.\{14\}\) [0-9]*x  \(.*\)/\1 \2/p' | sort | uniq -d | head -n 1)
    rows=$(jq -r '[.device_used.devices[].outside_at_peak_by_site[]] | length' "$tmp/f-$name.json")
    [[ $dup == 0 && -z $tdup && $rows -gt 0 ]] && ok "$name: device used by call site: $rows rows, one per printed site" \
      || bad "$name: device used by call site repeats a site ($dup in JSON; text: '$tdup')"
  fi
done

# every other command's figures are the busiest device's (tests/integration/devices_cmds.sh checks
# each figure on a C program), said: the device report leads with
for db in t c; do
  lead=$(jq -r 'if .torch.present == 1 and .torch.device != null then .torch.device else .summary.device end' "$tmp/$db.json")
  for cmd in leaks frag tune advise viz export; do
    case $cmd in
      viz) args=(viz "$tmp/$db.db" -o "$tmp/$db.html") ;;
      export) args=(export "$tmp/$db.db" --format folded -o "$tmp/$db.folded") ;;
      *) args=("$cmd" "$tmp/$db.db") ;;
    esac
    "$G" "${args[@]}" > "$tmp/o" 2>&1 || true
    grepq -F "the program held memory on 2 devices (0 to 1)" "$tmp/o" && grepq -F "are device $lead's, the busiest" "$tmp/o" \
      && ok "$db: $cmd says its figures are device $lead's" \
      || bad "$db: $cmd does not say its figures are device $lead's: $(grep -F devices "$tmp/o" | head -n 2)"
  done
done
# --device N where PyTorch held nothing: said, not another device's figures nor zeros
GPUMEM_SIM_DEVICES=2 GPUMEM_SIM_BACKING=memory "$G" record -q -o "$tmp/one.db" -- "$torch_py" tests/torch/devices_one.py \
  > "$tmp/one.out" 2>&1 || bad "devices_one.py under gpumem record failed: $(tail -n 3 "$tmp/one.out")"
max0=$(sed -n 's/^MAX0 //p' "$tmp/one.out")
"$G" report --json --device 1 "$tmp/one.db" > "$tmp/one1.json" 2>/dev/null || bad "report --json --device 1 failed on devices_one"
"$G" report --device 1 "$tmp/one.db" > "$tmp/one1.txt" 2>&1 || bad "report --device 1 failed on devices_one"
"$G" report --json --device 0 "$tmp/one.db" > "$tmp/one0.json" 2>/dev/null || bad "report --json --device 0 failed on devices_one"
# figure | want | got
orows=(
  "report -d1 .summary.peak_allocated (the ctypes 8 MiB)|8388608|$(jq -r .summary.peak_allocated "$tmp/one1.json")"
  "report -d1 .torch.on_device|false|$(jq -r .torch.on_device "$tmp/one1.json")"
  "report -d1 .torch.device|1|$(jq -r .torch.device "$tmp/one1.json")"
  "report -d1 .torch.tensor_devices|[0]|$(jq -c .torch.tensor_devices "$tmp/one1.json")"
  "report -d1 .torch peaks|null null null|$(jq -r '[.torch.peak_requested, .torch.peak_allocated, .torch.peak_reserved] | map(tostring) | join(" ")' "$tmp/one1.json")"
  "report -d1 text: PyTorch's block says it|1|$(grep -c "^  PyTorch's memory history has nothing on device 1: its tensors were on device 0 " "$tmp/one1.txt")"
  "report -d1 text: no tensors by category of PyTorch|0|$(grep -c "PyTorch's tensors by category" "$tmp/one1.txt")"
  "report -d0 .torch.peak_allocated = max_memory_allocated(0)|$max0|$(jq -r .torch.peak_allocated "$tmp/one0.json")"
)
# every other command that shows PyTorch's view, under --device 1 (each row failed before: diff and
# the ranks report gave device 0's PyTorch figures as device 1's, export --view torch said there was
# no history, the others said nothing of PyTorch, frag and tune called device 1 PyTorch's allocator)
say="PyTorch's memory history has nothing on device 1: its tensors were on device 0 "
"$G" diff --json --device 1 "$tmp/one.db" "$tmp/one.db" > "$tmp/d1.json" 2>/dev/null || bad "diff --json --device 1 failed"
"$G" diff --device 1 "$tmp/one.db" "$tmp/one.db" > "$tmp/d1.txt" 2>&1 || bad "diff --device 1 failed"
cp "$tmp/one.db" "$tmp/one-b.db" # the ranks report reads each file once
"$G" report --json --device 1 "$tmp/one.db" "$tmp/one-b.db" > "$tmp/r1.json" 2>/dev/null || bad "ranks report --json --device 1 failed"
"$G" report --device 1 "$tmp/one.db" "$tmp/one-b.db" > "$tmp/r1.txt" 2>&1 || bad "ranks report --device 1 failed"
erc=0; "$G" export --format chrome --view torch --device 1 "$tmp/one.db" -o "$tmp/e1.json" 2> "$tmp/e1.err" || erc=$?
for c in leaks frag tune advise; do
  "$G" $c --json --device 1 "$tmp/one.db" > "$tmp/$c.json" 2>/dev/null || bad "$c --json --device 1 failed"
  "$G" $c --device 1 "$tmp/one.db" > "$tmp/$c.txt" 2>&1 || bad "$c --device 1 failed"
done
"$G" viz --device 1 "$tmp/one.db" -o "$tmp/v1.html" 2> "$tmp/v1.err" || bad "viz --device 1 failed"
# (grep -c exits 1 on a count of 0: "|| true", or set -e would end the script without a FAIL line)
orows+=(
  "diff -d1 .a.view (device 1's memory is not PyTorch's)|device|$(jq -r .a.view "$tmp/d1.json")"
  "diff -d1 .a.peak_allocated (the ctypes 8 MiB, not max_memory_allocated(0))|8388608|$(jq -r .a.peak_allocated "$tmp/d1.json")"
  "diff -d1 .b.torch_absent.tensor_devices|[0]|$(jq -c .b.torch_absent.tensor_devices "$tmp/d1.json")"
  "diff -d1 text: A's line says it|1|$(grep -c "^  A: $say" "$tmp/d1.txt" || true)"
  "ranks -d1 .ranks[0].torch_peak_allocated|null|$(jq -r '.ranks[0].torch_peak_allocated' "$tmp/r1.json")"
  "ranks -d1 .ranks[0].torch_absent.on_device|false|$(jq -r '.ranks[0].torch_absent.on_device' "$tmp/r1.json")"
  "ranks -d1 .ranks[0].leaked_bytes (as leaks -d1)|8388608|$(jq -r '.ranks[0].leaked_bytes' "$tmp/r1.json")"
  "ranks -d1 text: rank 0's line says it, no PyTorch peak|1 0|$(grep -c "^  rank 0: $say" "$tmp/r1.txt" || true) $(grep -c "^PyTorch's own peak allocated" "$tmp/r1.txt" || true)"
  "export --view torch -d1: exit 2 saying it|2 1|$erc $(grep -c "^gpumem export: --view torch: .*$say" "$tmp/e1.err" || true)"
  "leaks -d1 .torch_absent.tensor_devices|[0]|$(jq -c .torch_absent.tensor_devices "$tmp/leaks.json")"
  "leaks -d1 text says it|1|$(grep -c "^gpumem: note: .*: $say" "$tmp/leaks.txt" || true)"
  "frag -d1 .torch.on_device|false|$(jq -r .torch.on_device "$tmp/frag.json")"
  "frag -d1 text: configuration is gpumem's, said|1 1|$(grep -c '^  configuration  GPUMEM_CONF=' "$tmp/frag.txt" || true) $(grep -c "^gpumem: note: .*: $say" "$tmp/frag.txt" || true)"
  "tune -d1 .torch.tensor_devices|[0]|$(jq -c .torch.tensor_devices "$tmp/tune.json")"
  "tune -d1 text: recorded is gpumem's, said|1 1|$(grep -c '^  recorded   GPUMEM_CONF=' "$tmp/tune.txt" || true) $(grep -c "^gpumem: note: .*: $say" "$tmp/tune.txt" || true)"
  "advise -d1 .torch_absent.device|1|$(jq -r .torch_absent.device "$tmp/advise.json")"
  "advise -d1 text says it|1|$(grep -c "^gpumem: note: .*: $say" "$tmp/advise.txt" || true)"
  "viz -d1 page: summary.torch_absent, stderr says it|1 1|$(grep -c '"torch_absent":{"allocator":"pytorch","device":1,"on_device":false' "$tmp/v1.html" || true) $(grep -c "^gpumem: note: .*: $say" "$tmp/v1.err" || true)"
)
for row in "${orows[@]}"; do
  IFS='|' read -r fig want got <<< "$row"
  [[ $got == "$want" ]] && ok "devices_one: $fig ($got)" || bad "devices_one: $fig: '$got', want '$want'"
done

# Without --device, on a PyTorch program whose tensors are all on device 0 while device 1 holds
# more outside them (devices_one.py 256: 256 MiB through ctypes on device 1, the busiest by gpumem's
# account): every command reads device 0, PyTorch's, and says why, naming device 1 and --device 1
# (each row failed before: they read device 1, "the busiest", and said nothing of PyTorch; report
# compared device 1's peak with PyTorch's device 0 figures).
GPUMEM_SIM_DEVICES=2 GPUMEM_SIM_BACKING=memory "$G" record -o "$tmp/big.db" -- "$torch_py" tests/torch/devices_one.py 256 \
  > "$tmp/big.out" 2>&1 || bad "devices_one.py 256 under gpumem record failed: $(tail -n 3 "$tmp/big.out")"
bmax0=$(sed -n 's/^MAX0 //p' "$tmp/big.out")
core="the busiest of PyTorch's tensors' devices; device 1 held more by gpumem's account, PyTorch's tensors less: --device 1 for its figures"
why="device 0's, $core"
"$G" report --json "$tmp/big.db" > "$tmp/b-report.json" 2>/dev/null || bad "report --json failed on devices_one 256"
"$G" report "$tmp/big.db" > "$tmp/b-report.txt" 2>&1 || bad "report failed on devices_one 256"
for c in leaks frag tune advise; do
  "$G" $c --json "$tmp/big.db" > "$tmp/b-$c.json" 2>/dev/null || bad "$c --json failed on devices_one 256"
  "$G" $c "$tmp/big.db" > "$tmp/b-$c.txt" 2>&1 || bad "$c failed on devices_one 256"
done
"$G" viz "$tmp/big.db" -o "$tmp/b.html" 2> "$tmp/b-viz.err" || bad "viz failed on devices_one 256"
sed -n 's/^const D = \(.*\);$/\1/p' "$tmp/b.html" > "$tmp/b-viz.json"
"$G" export "$tmp/big.db" --format folded -o "$tmp/b.folded" 2> "$tmp/b-export.err" || bad "export failed on devices_one 256"
cp "$tmp/big.db" "$tmp/big-b.db"
"$G" report --json "$tmp/big.db" "$tmp/big-b.db" > "$tmp/b-ranks.json" 2>/dev/null || bad "ranks report --json failed on devices_one 256"
"$G" report "$tmp/big.db" "$tmp/big-b.db" > "$tmp/b-ranks.txt" 2>&1 || bad "ranks report failed on devices_one 256"
"$G" diff --json "$tmp/big.db" "$tmp/big-b.db" > "$tmp/b-diff.json" 2>/dev/null || bad "diff --json failed on devices_one 256"
# figure | want | got
brows=(
  "report .summary.device, device_from|0 torch|$(jq -r '"\(.summary.device) \(.summary.device_from)"' "$tmp/b-report.json")"
  "report .torch.device_peak.device (PyTorch's figures against its own device's)|0|$(jq -r .torch.device_peak.device "$tmp/b-report.json")"
  "report text: the devices line says why|1|$(grep -c -F "the figures above are device 0's ($core)" "$tmp/b-report.txt" || true)"
  "record's summary: device 0's, why|1|$(grep -c -F "on device 0 of 2 (the busiest of PyTorch's tensors' devices; device 1 held more" "$tmp/big.out" || true)"
  "ranks .ranks[0] device, torch_peak_allocated (max_memory_allocated(0))|0 $bmax0|$(jq -r '.ranks[0] | "\(.device) \(.torch_peak_allocated)"' "$tmp/b-ranks.json")"
  "ranks .ranks[0].leaked_bytes (as leaks: PyTorch's tensors alive at exit)|$(jq -r .leaked_bytes "$tmp/b-leaks.json")|$(jq -r '.ranks[0].leaked_bytes' "$tmp/b-ranks.json")"
  "ranks text: rank 0's note says why|1|$(grep -F "leaks are device 0's ($core)" "$tmp/b-ranks.txt" | grep -c "^  note: rank 0 " || true)"
  "diff .a.peak_allocated = max_memory_allocated(0)|$bmax0|$(jq -r .a.peak_allocated "$tmp/b-diff.json")"
  "leaks .device, device_from, busiest_device|0 torch 1|$(jq -r '"\(.device) \(.device_from) \(.busiest_device)"' "$tmp/b-leaks.json")"
  "leaks text says why|1|$(grep -c -F "are $why" "$tmp/b-leaks.txt" || true)"
  "frag .device, device_from|0 torch|$(jq -r '"\(.device) \(.device_from)"' "$tmp/b-frag.json")"
  "frag text says why|1|$(grep -c -F "are $why" "$tmp/b-frag.txt" || true)"
  "tune .device, device_from|0 torch|$(jq -r '"\(.device) \(.device_from)"' "$tmp/b-tune.json")"
  "tune text says why|1|$(grep -c -F "are $why" "$tmp/b-tune.txt" || true)"
  "advise .device, device_from|0 torch|$(jq -r '"\(.device) \(.device_from)"' "$tmp/b-advise.json")"
  "advise text says why|1|$(grep -c -F "are $why" "$tmp/b-advise.txt" || true)"
  "viz summary.device, device_from, busiest_device|0 torch 1|$(jq -r '.summary | "\(.device) \(.device_from) \(.busiest_device)"' "$tmp/b-viz.json")"
  "viz stderr says why|1|$(grep -c -F "are $why" "$tmp/b-viz.err" || true)"
  "export folded: stderr says why|1|$(grep -c -F "are $why" "$tmp/b-export.err" || true)"
)
for row in "${brows[@]}"; do
  IFS='|' read -r fig want got <<< "$row"
  [[ $got == "$want" ]] && ok "devices_one 256: $fig ($got)" || bad "devices_one 256: $fig: '$got', want '$want'"
done
# The same program with gpumem as PyTorch's allocator (--allocator gpumem): PyTorch's tensors are
# the hook's allocations, all on device 0, and every command reads device 0 by the same rule, said
# the same way (each row read device 1, "the busiest", before).
GPUMEM_SIM_DEVICES=2 GPUMEM_SIM_BACKING=memory "$G" record --allocator gpumem -o "$tmp/gbig.db" -- "$torch_py" \
  tests/torch/devices_one.py 256 > "$tmp/gbig.out" 2>&1 || bad "devices_one.py 256 under --allocator gpumem failed: $(tail -n 3 "$tmp/gbig.out")"
"$G" report --json "$tmp/gbig.db" > "$tmp/g-report.json" 2>/dev/null || bad "report --json failed on devices_one 256 (gpumem)"
"$G" report "$tmp/gbig.db" > "$tmp/g-report.txt" 2>&1 || bad "report failed on devices_one 256 (gpumem)"
for c in leaks frag tune advise; do
  "$G" $c --json "$tmp/gbig.db" > "$tmp/g-$c.json" 2>/dev/null || bad "$c --json failed on devices_one 256 (gpumem)"
  "$G" $c "$tmp/gbig.db" > "$tmp/g-$c.txt" 2>&1 || bad "$c failed on devices_one 256 (gpumem)"
done
"$G" viz "$tmp/gbig.db" -o "$tmp/g.html" 2> "$tmp/g-viz.err" || bad "viz failed on devices_one 256 (gpumem)"
sed -n 's/^const D = \(.*\);$/\1/p' "$tmp/g.html" > "$tmp/g-viz.json"
"$G" export "$tmp/gbig.db" --format folded -o "$tmp/g.folded" 2> "$tmp/g-export.err" || bad "export failed on devices_one 256 (gpumem)"
grows=(
  "report .torch.allocator (gpumem served PyTorch)|gpumem|$(jq -r .torch.allocator "$tmp/g-report.json")"
  "report .summary.device, device_from|0 torch|$(jq -r '"\(.summary.device) \(.summary.device_from)"' "$tmp/g-report.json")"
  "report text: the devices line says why|1|$(grep -c -F "the figures above are device 0's ($core)" "$tmp/g-report.txt" || true)"
  "record's summary: device 0's, why|1|$(grep -c -F "on device 0 of 2 (the busiest of PyTorch's tensors' devices; device 1 held more" "$tmp/gbig.out" || true)"
  "leaks .device, device_from, busiest_device|0 torch 1|$(jq -r '"\(.device) \(.device_from) \(.busiest_device)"' "$tmp/g-leaks.json")"
  "frag .device, device_from|0 torch|$(jq -r '"\(.device) \(.device_from)"' "$tmp/g-frag.json")"
  "tune .device, device_from|0 torch|$(jq -r '"\(.device) \(.device_from)"' "$tmp/g-tune.json")"
  "advise .device, device_from|0 torch|$(jq -r '"\(.device) \(.device_from)"' "$tmp/g-advise.json")"
  "advise text says why|1|$(grep -c -F "are $why" "$tmp/g-advise.txt" || true)"
  "viz summary.device, device_from, busiest_device|0 torch 1|$(jq -r '.summary | "\(.device) \(.device_from) \(.busiest_device)"' "$tmp/g-viz.json")"
  "export folded: stderr says why|1|$(grep -c -F "are $why" "$tmp/g-export.err" || true)"
)
for row in "${grows[@]}"; do
  IFS='|' read -r fig want got <<< "$row"
  [[ $got == "$want" ]] && ok "devices_one 256 --allocator gpumem: $fig ($got)" \
    || bad "devices_one 256 --allocator gpumem: $fig: '$got', want '$want'"
done
exit $fail
