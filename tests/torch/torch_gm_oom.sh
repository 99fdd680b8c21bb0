#!/usr/bin/env bash
# torch_gm_oom.sh — under --allocator gpumem (gpumem's allocator as PyTorch's CUDAPluggableAllocator)
# an allocation gpumem refuses fails as under PyTorch's own allocator, and a setting PyTorch hands
# the allocator is applied or said to be ignored, never dropped. One table, a row a way to run out:
#   - the request is over the device, or over GPUMEM_LIMIT: the program gets torch.OutOfMemoryError
#     at the allocation (not a tensor without memory), with gpumem's figures (what was asked, what
#     was reserved, the limit), catches it and allocates again; the recording's ooms table holds the
#     OOM once, with that request and limit;
#   - set_per_process_memory_fraction (called twice): said ignored once on stderr, kept in meta
#     ignored.* and report's ignored_settings;
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

# NAME | gpumem | ENV | ARGS | stdout wants (egrep, each ;-separated) | stderr wants | ooms rows: requested limit
table=(
  "device|$G||oom 204800|^RAISED torch.OutOfMemoryError . CUDA out of memory. Tried to allocate 200.00 GiB on device 0. gpumem's allocator .* reserved.* its limit is none;^IS_OOM 1;^AGAIN 0x[0-9a-f]*[1-9a-f]||1:214748364800:"
  "limit|$G|GPUMEM_LIMIT=67108864|oom 100|^RAISED torch.OutOfMemoryError . CUDA out of memory. Tried to allocate 100.00 MiB on device 0.* its limit is 64.00 MiB;^IS_OOM 1;^AGAIN 0x[0-9a-f]*[1-9a-f]||1:104857600:67108864"
  "fraction|$G||fraction 0.002|^AGAIN 0x|^gpumem: torch.cuda.set_per_process_memory_fraction=0.002 \(device 0\) is ignored: .*GPUMEM_LIMIT|0::"
  "no-shim|$nolib/gpumem||fraction 0.002|^AGAIN 0x|cannot use .*libgpumem_torch.so.*without it: an allocation gpumem refuses gives a tensor without memory|0::"
)
for row in "${table[@]}"; do
  IFS='|' read -r name g envs args outw errw ooms <<< "$row"
  env GPUMEM_SIM_BACKING=memory $envs "$g" record -q --allocator gpumem -o "$tmp/$name.db" -- \
    "$torch_py" "$script" $args > "$tmp/$name.out" 2> "$tmp/$name.err"
  rc=$?
  [[ $rc == 0 ]] && ok "$name: the program ran to its end" || bad "$name: exit $rc: $(tail -3 "$tmp/$name.err")"
  IFS=';' read -ra wants <<< "$outw"
  for w in "${wants[@]}"; do
    grep -Eq -- "$w" "$tmp/$name.out" && ok "$name: prints /$w/" || bad "$name: no /$w/ in: $(cat "$tmp/$name.out")"
  done
  if [[ -n $errw ]]; then
    n=$(grep -Ec -- "$errw" "$tmp/$name.err")
    [[ $n == 1 ]] && ok "$name: stderr says /$errw/ once" || bad "$name: /$errw/ said $n times on stderr: $(tail -5 "$tmp/$name.err")"
  fi
  IFS=: read -r nooms req lim <<< "$ooms"
  got=$(sqlite3 "$tmp/$name.db" "SELECT count(*) FROM ooms")
  [[ $got == "$nooms" ]] && ok "$name: $got OOM rows in the recording" || bad "$name: $got OOM rows, want $nooms"
  if [[ $nooms == 1 ]]; then
    row=$(sqlite3 -separator : "$tmp/$name.db" "SELECT requested, ifnull(limit_bytes, '') FROM ooms")
    [[ $row == "$req:$lim" ]] && ok "$name: the OOM row's request and limit $row" || bad "$name: OOM row $row, want $req:$lim"
  fi
done
# the fraction: kept in the recording and shown by report
key=torch.cuda.set_per_process_memory_fraction
[[ $(sqlite3 "$tmp/fraction.db" "SELECT count(*) FROM meta WHERE key = 'ignored.$key'") == 1 ]] \
  && ok "fraction: meta ignored.$key" || bad "fraction: no meta ignored.$key"
"$G" report --json "$tmp/fraction.db" 2>/dev/null | jq -e --arg k "$key" '.ignored_settings[$k] | test("GPUMEM_LIMIT")' > /dev/null \
  && ok "fraction: report's ignored_settings names it" || bad "fraction: report's ignored_settings: $("$G" report --json "$tmp/fraction.db" | jq -c .ignored_settings)"
exit $fail
