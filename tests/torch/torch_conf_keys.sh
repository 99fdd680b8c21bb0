#!/usr/bin/env bash
# torch_conf_keys.sh — GPUMEM_CONF reads PyTorch's configuration as PyTorch 2.14.1 does (issue 36,
# deliverable 2), checked against torch's own parser (tests/torch/conf_probe.py):
#   - the keys: every identifier in torch's libc10.so and libc10_cuda.so is handed to torch's
#     parser and to gpumem's (gpumem-replay --check-conf); the keys torch knows are exactly the
#     keys gpumem knows, less gpumem's own (preset, limit, ...), which torch refuses;
#   - the forms: each string of tests/torch/conf_forms.txt (separators, white space, numbers as
#     strtoull/strtod read them, lists, bounds, every key's values) is accepted by both or refused
#     by both, and where accepted both hold the same 16 roundup_power2_divisions; but for the
#     numbers torch takes and reads as another number ('-5' wraps around, '128abc' is 128),
#     which gpumem refuses, saying that PyTorch would misread them;
#   - backend:cudaMallocAsync, which torch takes only at start-up, through the environment;
#   - a key gpumem accepts and does not model says so, once (gpumem-replay, and libgpumem.so in
#     a program);
#   - the environment: PYTORCH_CUDA_ALLOC_CONF when set (even empty) and PYTORCH_ALLOC_CONF
#     otherwise, as torch takes them at start-up (gpumem-replay --torch-env).
set -uo pipefail
source "$(dirname "$0")/common.bash"
R=$build/alloc/gpumem-replay
[[ -x $R ]] || { echo "torch_conf_keys.sh: $R is not built" >&2; exit 1; }
site=$("$torch_py" -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("torch").origin))' 2>/dev/null)
[[ -d $site/lib ]] || { echo "FAIL: cannot find torch's libraries"; exit 1; }
probe() { torch_run -- tests/torch/conf_probe.py "$@" 2> "$tmp/probe.err"; }

# --- the keys, from torch itself
# (the start-up runs of torch below go on meanwhile)
startup() { # ENV... : torch at start-up -> "OK max_split expandable gc conf" or "ERR ..."
  env -u PYTORCH_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF "$@" "$torch_env" "$torch_py" tests/torch/conf_probe.py settings 2>/dev/null | tail -1
}
cases=(
  "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"
  "PYTORCH_ALLOC_CONF=bogus:1 PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:200,expandable_segments:True"
  "PYTORCH_ALLOC_CONF=max_split_size_mb:100"
  "PYTORCH_ALLOC_CONF=garbage_collection_threshold:0.5 PYTORCH_CUDA_ALLOC_CONF="
)
for k in "${!cases[@]}"; do
  # shellcheck disable=SC2086
  startup ${cases[$k]} > "$tmp/startup.$k" &
done
forms=tests/torch/conf_forms.txt
probe keys+forms "$site/lib/libc10.so" "$site/lib/libc10_cuda.so" "$forms" > "$tmp/probe.out" \
  || { bad "conf_probe.py failed: $(tail -2 "$tmp/probe.err")"; exit 1; }
sed '/^--$/,$d' "$tmp/probe.out" > "$tmp/torch_keys"
sed '1,/^--$/d' "$tmp/probe.out" > "$tmp/torch_forms"
n=$(wc -l < "$tmp/torch_keys")
[[ $n -ge 15 ]] || bad "only $n keys found in torch: the probe is broken"
LC_ALL=C python3 - "$site/lib/libc10.so" "$site/lib/libc10_cuda.so" > "$tmp/cands" <<'EOF'
import re, sys
names = set()
for lib in sys.argv[1:]:
    names.update(m.decode() for m in re.findall(rb"(?<![A-Za-z0-9_])[a-z][a-z0-9_]{2,63}(?=\0)", open(lib, "rb").read()))
print("\n".join(sorted(names)))
EOF
: > "$tmp/gm_keys"
while read -r k; do
  e=$("$R" --check-conf --conf "$k:1" 2>&1 >/dev/null)
  [[ $e == *"unknown key"* ]] || echo "$k" >> "$tmp/gm_keys"
done < "$tmp/cands"
own="free_host_sync free_sync guard handle_size handle_size_small limit per_stream_pools preset release_before_grow release_threshold"
for k in $own; do
  e=$("$R" --check-conf --conf "$k:1" 2>&1 >/dev/null)
  [[ $e != *"unknown key"* ]] || bad "gpumem's own key $k is unknown to gpumem"
  grep -qx "$k" "$tmp/torch_keys" && bad "$k is a key of torch's too: not gpumem's own"
done
sort -u "$tmp/torch_keys" > "$tmp/t" && grep -vxF -f <(tr ' ' '\n' <<< "$own") "$tmp/gm_keys" | sort -u > "$tmp/g"
if cmp -s "$tmp/t" "$tmp/g"; then
  ok "the $n keys torch 2.14.1 knows (of $(wc -l < "$tmp/cands") identifiers in libc10*.so) are the keys gpumem knows besides its own: $(paste -sd' ' "$tmp/t")"
else
  bad "keys: torch only: $(comm -23 "$tmp/t" "$tmp/g" | paste -sd' '); gpumem only: $(comm -13 "$tmp/t" "$tmp/g" | paste -sd' ')"
fi

# --- the forms
i=0 agree=0 misread=0
while IFS= read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  i=$((i + 1))
  form=$line
  [[ $form == "<empty>" ]] && form=""
  IFS=$'\t' read -r tv tdiv < <(sed -n "${i}p" "$tmp/torch_forms")
  if gdiv=$("$R" --divisions --conf "$form" 2> "$tmp/gm.err"); then gv=OK; else gv=ERR; fi
  if [[ $tv == OK && $gv == ERR ]] && grep -q "PyTorch would misread it" "$tmp/gm.err"; then
    # the one difference, on purpose: a number torch takes and reads as another one ('-5' wraps
    # to "no limit", '128abc' is 128) is refused by gpumem (alloc/README.md)
    misread=$((misread + 1)) agree=$((agree + 1))
  elif [[ $tv != "$gv" ]]; then
    bad "'$form': torch ${tv:-?} ($tdiv), gpumem $gv ($(head -c 200 "$tmp/gm.err"))"
  elif [[ $tv == OK && $tdiv != "$gdiv" ]]; then
    bad "'$form': both accept it; divisions torch [$tdiv], gpumem [$gdiv]"
  else
    agree=$((agree + 1))
  fi
done < "$forms"
[[ $i -gt 100 && $(wc -l < "$tmp/torch_forms") -eq $i ]] || bad "$i forms, torch answered $(wc -l < "$tmp/torch_forms")"
[[ $misread -ge 8 ]] || bad "only $misread strings torch misreads were refused by gpumem: conf_forms.txt lost its signed and trailing-garbage numbers"
[[ $agree -eq $i ]] && ok "$i configuration strings: torch and gpumem accept and refuse alike ($(grep -c '^OK' "$tmp/torch_forms") accepted, the same divisions), but for $misread numbers torch misreads, which gpumem refuses"

# --- start-up only, and the environment's precedence (torch at start-up, one process each)
gmcheck() { # ENV... : gpumem-replay --torch-env --check-conf; stderr in $tmp/gm.err
  env -u PYTORCH_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF "$@" "$R" --preset pytorch --torch-env --check-conf 2> "$tmp/gm.err"
}
wait # the start-up runs
t=$(cat "$tmp/startup.0")
g=$("$R" --check-conf --conf backend:cudaMallocAsync 2>&1)
[[ $t == OK* || $t == *"cudaMallocAsync"*"not meaningful"* ]] && [[ $g == *"accepted but not modelled: backend:cudaMallocAsync"* ]] \
  && ok "backend:cudaMallocAsync: torch takes it at start-up, gpumem accepts it and says it is not modelled" \
  || bad "backend:cudaMallocAsync: torch '$t', gpumem '$g'"
for k in 1 2 3; do
  c=${cases[$k]}
  t=$(cat "$tmp/startup.$k")
  # shellcheck disable=SC2086
  if ! g=$(gmcheck $c); then bad "$c: gpumem refuses it: $(cat "$tmp/gm.err")"; continue; fi
  [[ $t == OK* ]] || { bad "$c: torch refuses it: $t"; continue; }
  IFS=$'\t' read -r _ tms texp tgc _ <<< "$t"
  gms=$(grep -o 'max_split_size_mb:[0-9]*' <<< "$g" | cut -d: -f2)
  gexp=$(grep -o 'expandable_segments:[A-Za-z]*' <<< "$g" | cut -d: -f2)
  ggc=$(grep -o 'garbage_collection_threshold:[0-9.]*' <<< "$g" | cut -d: -f2)
  want_ms=$([[ $tms == -1 ]] && echo "" || echo $((tms >> 20)))
  [[ $gms == "$want_ms" && $gexp == "$texp" && ${ggc:-0} == "$tgc" ]] \
    && ok "$c: torch and gpumem take the same (max_split ${want_ms:-none}, expandable $texp, gc $tgc; $(cat "$tmp/gm.err"))" \
    || bad "$c: torch max_split $tms expandable $texp gc $tgc; gpumem '$gms' '$gexp' '$ggc'"
done

# --- accepted but not modelled: said once
g=$("$R" --preset pytorch --preset pytorch-expandable --conf "pinned_use_cuda_host_register:True,release_lock_on_cudamalloc:True" --synth fixed --steps 1 2>&1 >/dev/null)
[[ $(grep -c "accepted but not modelled" <<< "$g") -eq 1 && $g == *pinned_use_cuda_host_register* && $g == *release_lock_on_cudamalloc* ]] \
  && ok "gpumem-replay names the keys it does not model, once for two presets" || bad "gpumem-replay: $g"
if [[ -x $build/tests/apps/rt_app && -f $build/libgpumem.so ]]; then
  out=$(GPUMEM_DB=none GPUMEM_CONF=throw_on_cudamalloc_oom:True LD_PRELOAD=$build/libgpumem.so "$build/tests/apps/rt_app" 2>&1)
  [[ $(grep -c "accepted but not modelled: throw_on_cudamalloc_oom" <<< "$out") -eq 1 ]] \
    && ok "libgpumem.so names the key it does not model, once" || bad "libgpumem.so: $(head -c 400 <<< "$out")"
fi
exit $fail
