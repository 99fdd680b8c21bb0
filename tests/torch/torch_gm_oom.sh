#!/usr/bin/env bash
# torch_gm_oom.sh — under --allocator gpumem (gpumem's allocator as PyTorch's CUDAPluggableAllocator)
# an allocation gpumem refuses fails as under PyTorch's own allocator, and every hook PyTorch hands
# the allocator reaches gpumem (applied, or said to be ignored, never dropped). One table, a row a
# way in:
#   - the request is over the device, or over GPUMEM_LIMIT: the program gets torch.OutOfMemoryError
#     at the allocation (not a tensor without memory), with gpumem's figures (what was asked, what
#     was reserved, the limit), catches it and allocates again; the recording's ooms table holds the
#     OOM once, with that request and limit;
#   - the program's OOM message names what set the limit it met: GPUMEM_LIMIT, the
#     per_process_memory_fraction key of GPUMEM_CONF (its share of the device, below GPUMEM_LIMIT:
#     key-limit), the fraction, or the device where there was none (before: "raise GPUMEM_LIMIT
#     if it is the bound" for all but the fraction); the recording flags the key's (512), and
#     report's and advise's .limit_from and figures say the same;
#   - set_per_process_memory_fraction (called twice) caps gpumem's allocator at the fraction of the
#     device's total: a request over it raises torch.OutOfMemoryError naming the fraction, the OOM
#     is recorded with the fraction's limit (flag 256: report's binding constraint "fraction") and
#     the calls as events 37 (flag 4096); GPUMEM_LIMIT, where lower, stays the limit; the
#     per_process_memory_fraction key's share (GPUMEM_CONF) of the device is the limit until a
#     call replaces it, as in PyTorch (fraction-key: a call below the key's share is the bound;
#     one above it, torch_fraction_key.sh); frag's and tune's replays of the recording meet the
#     OOM under that limit too (before, they took the key's share of their own 80 GiB device
#     instead of the recorded 79.11 GiB, and tune's presets dropped the key: each fitted the
#     request); in GPUMEM_MODE=record (the driver serves) it is said ignored once, kept in meta
#     ignored.*. Before, it was said ignored under every mode and the 400 MiB were served;
#   - PyTorch's emptyCache called by its C entry point (torch._C._cuda_emptyCache) empties gpumem's
#     cache as torch.cuda.empty_cache does: one event 36 (flag 4096) each. Before, only the Python
#     name was wrapped: one event for the two calls;
#   - Tensor.record_stream: a block used on a side stream and freed on the current one is not
#     handed to the next allocation on the current stream while the side stream's work is not done
#     (the virtual GPU's events held back: GPUMEM_SIM_EVENT_DELAY; access tracking off, so that
#     record_stream is all gpumem knows), and is reused once it is done. Before, record_stream did
#     nothing and the block was handed out at once;
#   - a program that stops on what the pluggable-allocator interface does not offer
#     (checkPoolLiveAllocations, which torch.compile's mode="reduce-overhead" calls): record's
#     closing summary says so in one line and to record without --allocator gpumem, once; a
#     program that catches the error and ends well gets no such line. Before, record said only
#     "the program exited with status 1";
#   - libgpumem_torch.so missing beside libgpumem.so: use_as_allocator says so (a warning naming
#     the library and what is lost) and goes on as before, never silently.
set -uo pipefail
source "$(dirname "$0")/common.bash"
script=tests/torch/gm_oom.py
[[ -e $build/libgpumem_torch.so ]] || { echo "torch_gm_oom.sh: $build/libgpumem_torch.so not built; skipped" >&2; exit 77; }
# a gpumem beside a libgpumem.so without libgpumem_torch.so (the fallback row)
nolib=$tmp/nolib/build
mkdir -p "$nolib"
cp "$G" "$build/libgpumem.so" "$nolib/"
ln -s "$(realpath "$build/sim")" "$nolib/sim"
ln -s "$(realpath preload)" "$tmp/nolib/preload"

# the fraction's cap: 0.002 of the h100-80g profile's 81008 MiB (gpumem record's default profile on
# the virtual GPU), truncated as PyTorch's setMemoryFraction does
cap=$(( 81008 * 1048576 * 2 / 1000 ))
# NAME | gpumem | ENV | ARGS | stdout wants (egrep, each ;-separated) | stderr wants, said once ("!": never)
# | ooms rows: count:requested:limit | SQL checks on the recording (each ;-separated, QUERY=WANT)
table=(
  "device|$G||oom 204800|^RAISED torch.OutOfMemoryError . CUDA out of memory. Tried to allocate 200.00 GiB on device 0. gpumem's allocator .* reserved.* its limit is none;or run on a device with more memory: the device was the bound;^IS_OOM 1;^AGAIN 0x[0-9a-f]*[1-9a-f]||1:214748364800:|"
  "limit|$G|GPUMEM_LIMIT=67108864|oom 100|^RAISED torch.OutOfMemoryError . CUDA out of memory. Tried to allocate 100.00 MiB on device 0.* its limit is 64.00 MiB;raise GPUMEM_LIMIT: the limit it sets was the bound;^IS_OOM 1;^AGAIN 0x[0-9a-f]*[1-9a-f]||1:104857600:67108864|SELECT flags FROM events WHERE kind = 13=0"
  "fraction|$G||fraction 0.002|^RAISED torch.OutOfMemoryError . CUDA out of memory. Tried to allocate 400.00 MiB on device 0.* its limit is 162.02 MiB;raise the per-process memory fraction \(torch.cuda.set_per_process_memory_fraction\);^IS_OOM 1;^AGAIN 0x[0-9a-f]*[1-9a-f]|!is ignored|1:419430400:$cap|SELECT count(*) FROM events WHERE kind = 37 AND flags = 4096 AND size = $cap AND requested = 2000=2;SELECT flags FROM events WHERE kind = 13=256"
  "fraction-limit|$G|GPUMEM_LIMIT=67108864|fraction 0.002|^RAISED torch.OutOfMemoryError . CUDA out of memory. Tried to allocate 400.00 MiB on device 0.* its limit is 64.00 MiB.*raise GPUMEM_LIMIT;^IS_OOM 1;^AGAIN 0x|!is ignored|1:419430400:67108864|SELECT count(*) FROM events WHERE kind = 37 AND flags = 4096=2;SELECT flags FROM events WHERE kind = 13=0"
  "fraction-key|$G|GPUMEM_CONF=per_process_memory_fraction:0.01|fraction 0.002|^RAISED torch.OutOfMemoryError . CUDA out of memory. Tried to allocate 400.00 MiB on device 0.* its limit is 162.02 MiB;raise the per-process memory fraction \(torch.cuda.set_per_process_memory_fraction\);^IS_OOM 1;^AGAIN 0x[0-9a-f]*[1-9a-f]|!is ignored|1:419430400:$cap|SELECT count(*) FROM events WHERE kind = 37 AND flags = 4096 AND size = $cap AND requested = 2000=2;SELECT flags FROM events WHERE kind = 13=256"
  "key-limit|$G|GPUMEM_CONF=per_process_memory_fraction:0.002 GPUMEM_LIMIT=1073741824|oom 400|^RAISED torch.OutOfMemoryError . CUDA out of memory. Tried to allocate 400.00 MiB on device 0.* its limit is 162.02 MiB;raise the per_process_memory_fraction key of GPUMEM_CONF: the limit it sets was the bound;^IS_OOM 1||1:419430400:$cap|SELECT flags FROM events WHERE kind = 13=512"
  "key|$G|GPUMEM_CONF=per_process_memory_fraction:0.5|oom 40700|^RAISED torch.OutOfMemoryError . CUDA out of memory. Tried to allocate 39.75 GiB on device 0.* its limit is 39.55 GiB;raise the per_process_memory_fraction key of GPUMEM_CONF: the limit it sets was the bound;^IS_OOM 1;^AGAIN 0x[0-9a-f]*[1-9a-f]||1:42677043200:$(( 81008 * 1048576 / 2 ))|SELECT flags FROM events WHERE kind = 13=512"
  "fraction-record|$G|GPUMEM_MODE=record|fraction 0.002|^FIT 0x;^AGAIN 0x|^gpumem: torch.cuda.set_per_process_memory_fraction=0.002 \(device 0\) is ignored: GPUMEM_MODE=record|0::|SELECT count(*) FROM events WHERE kind = 37=0"
  "no-shim|$nolib/gpumem||fraction 0.002|^FIT 0x;^AGAIN 0x|cannot use .*libgpumem_torch.so.*without it: an allocation gpumem refuses gives a tensor without memory|0::|"
  "empty|$G||empty 0|^AGAIN 0x|!is ignored|0::|SELECT count(*) FROM events WHERE kind = 36 AND flags = 4096=2;SELECT count(*) > 0 FROM events WHERE kind = 15 AND seq > (SELECT min(seq) FROM events WHERE kind = 36)=1"
  "empty-no-shim|$nolib/gpumem||empty 0|^AGAIN 0x|cannot use .*libgpumem_torch.so|0::|SELECT count(*) FROM events WHERE kind = 36 AND flags = 4096=1"
  "streams|$G|GPUMEM_USES=0 GPUMEM_SIM_EVENT_DELAY=1000000|streams 0|^REUSED_BEFORE 0;^REUSED_AFTER 1||0::|SELECT count(*) FROM events WHERE kind = 21=1"
  "streams-uses|$G|GPUMEM_SIM_EVENT_DELAY=1000000|streams 0|^REUSED_BEFORE 0;^REUSED_AFTER 1||0::|SELECT count(*) FROM events WHERE kind = 21=1"
)
for row in "${table[@]}"; do
  IFS='|' read -r name g envs args outw errw ooms sqls <<< "$row"
  env GPUMEM_SIM_BACKING=memory $envs "$g" record -q --allocator gpumem -o "$tmp/$name.db" -- \
    "$torch_py" "$script" $args > "$tmp/$name.out" 2> "$tmp/$name.err"
  rc=$?
  [[ $rc == 0 ]] && ok "$name: the program ran to its end" || bad "$name: exit $rc: $(tail -3 "$tmp/$name.err")"
  IFS=';' read -ra wants <<< "$outw"
  for w in "${wants[@]}"; do
    grep -Eq -- "$w" "$tmp/$name.out" && ok "$name: prints /$w/" || bad "$name: no /$w/ in: $(cat "$tmp/$name.out")"
  done
  if [[ -n $errw ]]; then
    want=1
    [[ $errw == '!'* ]] && errw=${errw#!} && want=0
    n=$(grep -Ec -- "$errw" "$tmp/$name.err")
    [[ $n == "$want" ]] && ok "$name: stderr says /$errw/ $want times" || bad "$name: /$errw/ said $n times on stderr, want $want: $(tail -5 "$tmp/$name.err")"
  fi
  IFS=: read -r nooms req lim <<< "$ooms"
  got=$(sqlite3 "$tmp/$name.db" "SELECT count(*) FROM ooms")
  [[ $got == "$nooms" ]] && ok "$name: $got OOM rows in the recording" || bad "$name: $got OOM rows, want $nooms"
  if [[ $nooms == 1 ]]; then
    row=$(sqlite3 -separator : "$tmp/$name.db" "SELECT requested, ifnull(limit_bytes, '') FROM ooms")
    [[ $row == "$req:$lim" ]] && ok "$name: the OOM row's request and limit $row" || bad "$name: OOM row $row, want $req:$lim"
  fi
  IFS=';' read -ra checks <<< "$sqls"
  for c in "${checks[@]}"; do
    got=$(sqlite3 "$tmp/$name.db" "${c%=*}")
    [[ $got == "${c##*=}" ]] && ok "$name: ${c%=*} is $got" || bad "$name: ${c%=*} is $got, want ${c##*=}"
  done
done
# the fraction under gpumem's allocator: report names it as what bound the OOM; in mode record it
# is kept in the recording as ignored and shown by report
"$G" report --json "$tmp/fraction.db" 2>/dev/null | jq -e '.ooms[0].limit_from == "per_process_memory_fraction"' > /dev/null \
  && ok "fraction: report's OOM limit is the fraction's" || bad "fraction: report's OOM: $("$G" report --json "$tmp/fraction.db" | jq -c '.ooms[0]')"
# each limit's OOM is named by what set it: report's .limit_from and figures, advise's (before, the
# per_process_memory_fraction key's share was said to be GPUMEM_LIMIT's, in the program's message
# too: "raise GPUMEM_LIMIT if it is the bound", even with no limit at all)
keyk="the per_process_memory_fraction key of GPUMEM_CONF"
for want in "limit|GPUMEM_LIMIT|GPUMEM_LIMIT" "fraction|per_process_memory_fraction|PyTorch's per-process memory fraction (torch.cuda.set_per_process_memory_fraction)" \
            "fraction-key|per_process_memory_fraction|PyTorch's per-process memory fraction (torch.cuda.set_per_process_memory_fraction)" \
            "key|GPUMEM_CONF:per_process_memory_fraction|$keyk" \
            "key-limit|GPUMEM_CONF:per_process_memory_fraction|$keyk" "device|null|"; do
  IFS='|' read -r name from knob <<< "$want"
  got=$("$G" report --json "$tmp/$name.db" 2>/dev/null | jq -r '.ooms[0].limit_from')
  [[ $got == "$from" ]] && ok "$name: report's .limit_from is $got" || bad "$name: report's .limit_from is $got, want $from"
  got=$("$G" advise --oom-step --json "$tmp/$name.db" 2>/dev/null | jq -r '.oom.limit_from')
  [[ $got == "$from" ]] && ok "$name: advise's .oom.limit_from is $got" || bad "$name: advise's .oom.limit_from is $got, want $from"
  if [[ -n $knob ]]; then
    "$G" report "$tmp/$name.db" 2>/dev/null | grepq -F ", limit " && "$G" report "$tmp/$name.db" 2>/dev/null | grep -F "largest free block" | grepq -F "($knob)" \
      && ok "$name: report's figures name $knob" || bad "$name: report's figures: $("$G" report "$tmp/$name.db" 2>/dev/null | grep -F 'largest free block')"
  fi
done
# its advice names the allocator that applied the fraction: gpumem's, not PyTorch's (review of
# stop 68: "above what PyTorch reserved" under --allocator gpumem)
adv=$("$G" report --json "$tmp/fraction.db" 2>/dev/null | jq -r '.ooms[0].advice // .ooms[0].cause.advice // empty')
[[ $adv == *"above what gpumem's allocator (PyTorch's, through --allocator gpumem) reserved"* && $adv != *"PyTorch reserved"* ]] \
  && ok "fraction: report's advice names gpumem's allocator" || bad "fraction: report's advice: $adv"
key=torch.cuda.set_per_process_memory_fraction
[[ $(sqlite3 "$tmp/fraction-record.db" "SELECT count(*) FROM meta WHERE key = 'ignored.$key'") == 1 ]] \
  && ok "fraction-record: meta ignored.$key" || bad "fraction-record: no meta ignored.$key"
"$G" report --json "$tmp/fraction-record.db" 2>/dev/null | jq -e --arg k "$key" '.ignored_settings[$k] | test("GPUMEM_MODE=record")' > /dev/null \
  && ok "fraction-record: report's ignored_settings names it" || bad "fraction-record: report's ignored_settings: $("$G" report --json "$tmp/fraction-record.db" | jq -c .ignored_settings)"
# the replay sees the limit the run had: every configuration tune judges, and frag's replay of the
# recorded one, meet the OOM: under the fraction, also where it replaced a looser
# per_process_memory_fraction key (fraction-key); under the key's share of the recorded device,
# 79.11 GiB (key: the replay took it of its own 80 GiB device and
# fitted the 39.75 GiB; tune's presets dropped the key and fitted it too)
for name in fraction fraction-key key; do
  [[ $("$G" tune --json "$tmp/$name.db" 2>/dev/null | jq '[.results[] | select(.oom | not)] | length') == 0 ]] \
    && ok "$name: tune's replays all meet the OOM under the limit the run had" || bad "$name: tune: $("$G" tune --json "$tmp/$name.db" | jq -c '[.results[] | {conf, oom}]')"
  [[ $("$G" frag --json "$tmp/$name.db" 2>/dev/null | jq '.recorded.replay_oom') == true ]] \
    && ok "$name: frag's replay of the recorded configuration meets the OOM" || bad "$name: frag: $("$G" frag --json "$tmp/$name.db" | jq -c .recorded)"
done
# a limit of the pluggable-allocator interface: uncaught (the program stops), caught (it goes on)
for want in "stops|0|1|1" "caught|1|0|0"; do
  IFS='|' read -r name arg rcw n <<< "$want"
  GPUMEM_SIM_BACKING=memory "$G" record --allocator gpumem -o "$tmp/pl-$name.db" -- "$torch_py" "$script" pluggable "$arg" \
    > "$tmp/pl-$name.out" 2> "$tmp/pl-$name.err"
  rc=$?
  got=$(grep -c "^gpumem: the program stopped on a limit of PyTorch's pluggable-allocator interface, which --allocator gpumem uses (\"pluggable does not yet support checkPoolLiveAllocations\"): record it without --allocator gpumem" "$tmp/pl-$name.err")
  [[ $rc == "$rcw" && $got == "$n" ]] && ok "pluggable-$name: record exits $rc, says the pluggable limit $got times" \
    || bad "pluggable-$name: exit $rc (want $rcw), the line $got times (want $n): $(tail -3 "$tmp/pl-$name.err")"
done
exit $fail
