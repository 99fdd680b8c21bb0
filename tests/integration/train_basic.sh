#!/usr/bin/env bash
# train_basic.sh — the GPT-2 trainer on the virtual GPU (tiny model, real compute):
#   1. flags and files: --help works; bad flags, models, data, checkpoints and batch splits
#      exit 1 with a message naming the problem; an out-of-memory exits 2 naming the CUDA
#      error (never a crash);
#   2. the loss at random init is ln(256) = 5.545 within 0.15 (weights ~N(0, 0.02): logits
#      near 0, so the softmax is near uniform over the 256 byte values);
#   3. learning: on real text (this repository's train/ sources) the mean loss of the last 20
#      of 300 steps is below 0.7x the first step's loss;
#   4. --dry-run makes exactly the allocation sequence of a real run (--trace-allocs), and
#      launches the same kernels; the LAUNCHES line counts exactly the kernel launches, copies
#      and memsets the virtual GPU executed (its own call counters, GPUMEM_SIM_STATS=1);
#   5. checkpoints: a checkpoint saved after 3 steps and loaded gives bit-for-bit the loss the
#      4th step of the original run computes on the same batch, and saving it again reproduces
#      the file byte for byte; llm.c token shards load, bad shards are refused.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../pipe.bash" # grepq
BUILD=${BUILD:-build}
T=$BUILD/train_gpt2_sim
[[ -x $T ]] || { echo "train_basic: $T not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
# Under sanitizers the ops are ~20x slower: a smaller batch and fewer steps, same properties.
if [[ -n ${SAN:-} ]]; then LEARN_STEPS=60 SZ="-B 2 -T 32"; else LEARN_STEPS=300 SZ="-B 4 -T 64"; fi
cat train/*.c train/*.h > "$tmp/text.txt"
run() { "$T" --threads 2 "$@"; }

# ---- 1. flags and files ------------------------------------------------------------------
run --help | grepq -- '--recompute' && ok "--help" || bad "--help"
expect_err() { # rc, pattern, args...
  local want=$1 pat=$2; shift 2
  local out rc
  out=$(run "$@" 2>&1); rc=$?
  if [[ $rc -eq $want ]] && grep -q -- "$pat" <<<"$out"; then ok "error '$pat' (exit $rc): $*"
  else bad "expected exit $want and '$pat' for: $* ; got exit $rc: $out"; fi
}
expect_err 1 "unknown option" --bogus
expect_err 1 "unknown model" --model gpt5
expect_err 1 "needs an integer" -B x
expect_err 1 "must divide" -B 4 --accum 3
expect_err 1 "unknown choice" --recompute everything
expect_err 1 "wd needs a finite non-negative number" --wd -0.1
expect_err 1 "wd needs a finite non-negative number" --wd nan
expect_err 1 "wd needs a finite non-negative number" --wd 1e99
expect_err 1 "wd needs a finite non-negative number" --wd 0.1x
expect_err 1 "wd needs a finite non-negative number" --wd
expect_err 1 "exceeds the model" -T 100000
expect_err 1 "cannot open data" --data "$tmp/missing.txt"
head -c 100 /dev/urandom > "$tmp/garbage.bin"
expect_err 1 "not an llm.c checkpoint" --load "$tmp/garbage.bin"
expect_err 1 "a batch needs" --data "$tmp/garbage.bin"
GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=1G expect_err 2 "cudaErrorMemoryAllocation" \
  --model gpt2 -B 8 -T 1024 --dry-run --steps 1
GPUMEM_SIM_MEMORY=8M expect_err 2 "out of device memory" --model tiny -B 8 -T 256 --steps 1
# --model's free form L<layers>-C<channels>-H<heads>: malformed forms are refused by name
for bad_model in L2-C64 L2-C64-H4-L3 L0-C64-H4 L2-C64-H4- L2-C64-X4 L2C64H4 L1001-C64-H4 ''; do
  expect_err 1 "L<layers>-C<channels>-H<heads>" --model "$bad_model"
done
expect_err 1 "not divisible by heads" --model L2-C63-H4
expect_err 1 "vocab needs an integer" --vocab 0
expect_err 1 "max-T needs an integer" --max-T x
expect_err 1 "cannot be given with --load" --load "$tmp/garbage.bin" --vocab 300
# the free form is the named model when the sizes agree: tiny = L2-C64-H4 --vocab 256 --max-T 256
# (same parameters, same curve bit for bit); gpt2 = L12-C768-H12 (GPT-2's V and maxT by default)
tiny=$(run --model tiny --steps 2 | grep '^step' | awk '{print $4}')
free=$(run --model L2-C64-H4 --vocab 256 --max-T 256 --steps 2 | grep '^step' | awk '{print $4}')
[[ -n $tiny && $tiny == "$free" ]] && ok "L2-C64-H4 --vocab 256 --max-T 256 trains as tiny" ||
  bad "L2-C64-H4 --vocab 256 --max-T 256 differs from tiny: '$tiny' vs '$free'"
n124=$(GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G run --model L12-C768-H12 --dry-run --steps 1 |
       sed -n 's/.*), \([0-9]*\) parameters.*/\1/p')
[[ $n124 == 124475904 ]] && ok "L12-C768-H12 has gpt2's 124475904 parameters" ||
  bad "L12-C768-H12 has '$n124' parameters, gpt2 has 124475904"
# a 70B-class model (L80 C8192 H64, maxT 2048) runs dry on the virtual backing: parameters
# 12 L C^2 + 13 L C + (Vp + maxT) C + 2 C with Vp = 50304
out=$(GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=2T run --model L80-C8192-H64 --max-T 2048 \
      -B 1 -T 2048 --dry-run --steps 1 2>&1); rc=$?
want=$(( 12 * 80 * 8192 * 8192 + 13 * 80 * 8192 + (50304 + 2048) * 8192 + 2 * 8192 ))
if [[ $rc == 0 && $out == *"), $want parameters"* && $out == *"PEAK "* ]]; then
  ok "L80-C8192-H64 dry run: $want parameters"
else bad "L80-C8192-H64 dry run: rc $rc, expected $want parameters: $out"; fi

# ---- 2. loss at init, 3. learning --------------------------------------------------------
out=$(run --data "$tmp/text.txt" $SZ --steps "$LEARN_STEPS" --lr 1e-3 --seed 1) || bad "training run failed"
first=$(awk '/^step 1\//{print $4}' <<<"$out")
awk -v l="$first" 'BEGIN{d=l-log(256); exit !(d < 0.15 && d > -0.15)}' \
  && ok "init loss $first ~ ln(256)=5.545" || bad "init loss $first not within 0.15 of ln(256)"
last=$(grep '^step' <<<"$out" | tail -20 | awk '{s+=$4} END{printf "%.4f", s/NR}')
awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < 0.7*a)}' \
  && ok "loss fell from $first to $last (mean of last 20 of $LEARN_STEPS steps, $SZ)" \
  || bad "loss did not fall enough: $first -> $last"
grep -q '^PEAK [0-9]* bytes$' <(tail -1 <<<"$out") && ok "last line is PEAK" || bad "no PEAK last line"

# ---- 4. dry run = real run, allocation by allocation -------------------------------------
for flags in "" "--recompute attn,gelu --offload activations,optimizer --grad-none" \
             "--accum 2 --act-dtype bf16 --leak --seq-jitter"; do
  run --data "$tmp/text.txt" $SZ --steps 3 --trace-allocs $flags 2>"$tmp/real.trace" >/dev/null
  GPUMEM_SIM_BACKING=virtual run --data "$tmp/text.txt" $SZ --steps 3 --trace-allocs --dry-run \
    $flags 2>"$tmp/dry.trace" >/dev/null
  n=$(grep -c '^alloc' "$tmp/real.trace")
  if [[ $n -gt 100 ]] && cmp -s "$tmp/real.trace" "$tmp/dry.trace"; then
    ok "dry run allocation sequence = real run ($n allocations) [$flags]"
  else bad "dry run trace differs from the real run [$flags]"; diff "$tmp/real.trace" "$tmp/dry.trace" | head -5; fi
done

# LAUNCHES against the virtual GPU's own call counters: every cuLaunchKernel is a kernel the
# trainer counted, every cuMemcpy* a copy, every cuMemset a memset. A dry run launches the
# same kernels as the real run (bodies skipped), so its kernel count is the real run's; with
# --offload activations it leaves out offload's device-to-host copies (see README), and its
# copy count says so exactly.
launches() { awk '$1 == "LAUNCHES" { print $2, $4, $6 }' "$1"; }
sim_calls() { awk '$1 == "gpumem" && $2 == "sim:" {
    if ($3 == "cuLaunchKernel") k += $4; else if ($3 ~ /^cuMemcpy/) c += $4; else if ($3 == "cuMemset") s += $4 }
  END { print k + 0, c + 0, s + 0 }' "$1"; }
for flags in "" "--offload activations,optimizer --recompute attn --accum 2"; do
  GPUMEM_SIM_STATS=1 run --data "$tmp/text.txt" $SZ --steps 2 $flags >"$tmp/real.out" 2>&1
  GPUMEM_SIM_STATS=1 GPUMEM_SIM_BACKING=virtual run --data "$tmp/text.txt" $SZ --steps 2 --dry-run \
    $flags >"$tmp/dry.out" 2>&1
  lr=$(launches "$tmp/real.out") ld=$(launches "$tmp/dry.out")
  sr=$(sim_calls "$tmp/real.out") sd=$(sim_calls "$tmp/dry.out")
  [[ -n $lr && $lr == "$sr" ]] && ok "LAUNCHES (kernels copies memsets) $lr = the virtual GPU's calls [$flags]" \
    || bad "LAUNCHES '$lr' != virtual GPU calls '$sr' [$flags]"
  [[ -n $ld && $ld == "$sd" ]] && ok "dry run: LAUNCHES $ld = the virtual GPU's calls [$flags]" \
    || bad "dry run: LAUNCHES '$ld' != virtual GPU calls '$sd' [$flags]"
  read -r kr cr mr <<<"$lr"; read -r kd cd md <<<"$ld"
  [[ $kr -gt 100 && $kd == "$kr" && $md == "$mr" ]] \
    && ok "dry run launches every kernel ($kd) and memset ($md) of the real run [$flags]" \
    || bad "dry run kernels/memsets $kd/$md != real run's $kr/$mr [$flags]"
  # offload's device-to-host copies: one per stashed tensor, left out of the dry run only;
  # its only device-to-host copies are then the losses', one per micro-batch (2 steps x K)
  offl=$((cr - cd))
  if [[ $flags == *offload* ]]; then
    dtoh=$(awk '$2 == "sim:" && $3 == "cuMemcpyDtoH" { print $4 }' "$tmp/dry.out")
    [[ $offl -gt 0 && $dtoh == 4 ]] \
      && ok "dry run leaves out offload's $offl device-to-host copies, only those" \
      || bad "dry run with --offload: $cd copies (real run $cr), $dtoh device-to-host (want the 4 losses')"
  else
    [[ $offl -eq 0 ]] && ok "dry run makes every copy of the real run ($cd)" \
      || bad "dry run copies $cd != real run's $cr"
  fi
done

# The CUDA build (nvcc, real cudart API) loads the virtual GPU's runtime too: its dry run makes
# the same allocation sequence as the CPU build's.
if [[ -x $BUILD/train_gpt2 ]]; then
  GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G LD_LIBRARY_PATH=$BUILD/sim "$BUILD/train_gpt2" \
    --model gpt2 -B 8 -T 1024 --steps 2 --dry-run --trace-allocs --recompute mlp 2>"$tmp/cuda.trace" >/dev/null
  GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G "$T" \
    --model gpt2 -B 8 -T 1024 --steps 2 --dry-run --trace-allocs --recompute mlp 2>"$tmp/cpu.trace" >/dev/null
  [[ $(wc -l <"$tmp/cuda.trace") -gt 1000 ]] && cmp -s "$tmp/cuda.trace" "$tmp/cpu.trace" \
    && ok "CUDA build's dry run on the virtual GPU = CPU build's allocation sequence" \
    || bad "CUDA build's dry run differs from the CPU build's"
  # Its dry run launches nothing (cuBLAS calls cannot skip their bodies; README): 0 kernels,
  # and the CPU build's copies and memsets.
  lc=$(GPUMEM_SIM_BACKING=virtual LD_LIBRARY_PATH=$BUILD/sim "$BUILD/train_gpt2" --steps 2 --dry-run | launches /dev/stdin)
  ls=$(GPUMEM_SIM_BACKING=virtual "$T" --steps 2 --dry-run | launches /dev/stdin)
  [[ -n $lc && $lc == "0 ${ls#* }" ]] && ok "CUDA build's dry run: no kernel, same copies and memsets ($lc)" \
    || bad "CUDA build's dry run LAUNCHES '$lc', CPU build's '$ls'"
fi

# Under gpumem (when built; plain build only): the same losses and the same own peak, bit for
# bit — gpumem changes where memory comes from, never what the program computes.
if [[ -z ${SAN:-} && -f $BUILD/libgpumem.so ]]; then
  a=$(run --data "$tmp/text.txt" --steps 3 | grep -E '^(step|PEAK)' | awk '{print $1, $2, $4, $10}')
  lib=$(realpath "$BUILD/libgpumem.so") prog=$(realpath "$T")
  b=$(cd "$tmp" && GPUMEM_QUIET=1 GPUMEM_DB="$tmp/run.db" LD_PRELOAD="$lib" "$prog" --threads 2 --data "$tmp/text.txt" --steps 3 | grep -E '^(step|PEAK)' | awk '{print $1, $2, $4, $10}')
  [[ -n $a && $a == "$b" ]] && ok "identical losses and peak under LD_PRELOAD=libgpumem.so" \
    || bad "run under libgpumem.so differs: '$a' vs '$b'"
fi

# ---- 5. checkpoints and token shards -----------------------------------------------------
head -c 257 "$tmp/text.txt" > "$tmp/one_batch.txt"   # B*T+1 bytes: every step sees batch 0
run --data "$tmp/one_batch.txt" --steps 3 --save "$tmp/ck.bin" >/dev/null || bad "save failed"
l4=$(run --data "$tmp/one_batch.txt" --steps 4 | awk '/^step 4\//{print $4}')
l1=$(run --data "$tmp/one_batch.txt" --load "$tmp/ck.bin" --steps 1 | awk '/^step 1\//{print $4}')
[[ -n $l4 && $l4 == "$l1" ]] && ok "checkpoint reload gives the same loss ($l1)" \
  || bad "checkpoint loss $l1 != original run's $l4"
run --data "$tmp/one_batch.txt" --load "$tmp/ck.bin" --steps 0 --save "$tmp/ck2.bin" >/dev/null
cmp -s "$tmp/ck.bin" "$tmp/ck2.bin" && ok "checkpoint load+save round trip is byte-identical" \
  || bad "checkpoint round trip differs"
[[ $(stat -c %s "$tmp/ck.bin") -eq $((1024 + 4 * 132864)) ]] && ok "checkpoint size = header + params" \
  || bad "checkpoint size $(stat -c %s "$tmp/ck.bin")"
# llm.c token shard: header (magic, version, count), uint16 tokens
perl -e 'my @t = map { ($_ * 7 + 3) % 256 } 0..999; print pack("l<256", 20240520, 1, scalar(@t), (0) x 253), pack("S<*", @t)' > "$tmp/shard.bin"
out=$(run --data "$tmp/shard.bin" --steps 2 2>&1) && grep -q '^step 2/2' <<<"$out" \
  && ok "token shard trains" || bad "token shard: $out"
perl -e 'print pack("l<256", 20240520, 1, 600, (0) x 253), pack("S<*", map { 300 } 1..600)' > "$tmp/shard_big.bin"
expect_err 1 "outside the model's vocabulary" --data "$tmp/shard_big.bin"
perl -e 'print pack("l<256", 20240520, 2, 600, (0) x 253), pack("S<*", map { 3 } 1..600)' > "$tmp/shard_v2.bin"
expect_err 1 "version 2" --data "$tmp/shard_v2.bin"
exit $fail
