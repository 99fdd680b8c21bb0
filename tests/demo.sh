#!/usr/bin/env bash
# `make demo`: train the tiny GPT-2 on real text (this project's own sources) for 200 steps on
# the virtual GPU under `gpumem record`, then print `gpumem report` and `gpumem leaks`.
# Everything it writes stays in $BUILD/demo/.
set -euo pipefail
BUILD=${BUILD:-build}
out=$BUILD/demo
mkdir -p "$out"
cat alloc/*.[ch] preload/*.[ch] snapshot/*.[ch] sim/*.[ch] train/*.[ch] \
  README.md */README.md > "$out/text.txt"
steps=${DEMO_STEPS:-200}
echo "== gpumem record: tiny GPT-2 (L=2, C=64, 4 heads, bytes as tokens), B=4, T=64, $steps steps,"
echo "== on $(wc -c < "$out/text.txt") bytes of this project's own sources, on the virtual GPU"
# the commands are echoed exactly as they run, so they can be pasted
cmd=("$BUILD/gpumem" record -o "$out/demo.db" -- "$BUILD/train_gpt2_sim" --model tiny
     --data "$out/text.txt" --steps "$steps" -B 4 -T 64)
echo "\$ ${cmd[*]}"
"${cmd[@]}" > "$out/train.log" 2>&1 || {
  tail -20 "$out/train.log"; echo "make demo: the recorded training run failed (log: $out/train.log)" >&2
  exit 1; }
sed -n '1,3p' "$out/train.log"
echo "   ..."
tail -n 5 "$out/train.log"
echo
echo "\$ $BUILD/gpumem report $out/demo.db"
"$BUILD/gpumem" report "$out/demo.db"
echo
echo "\$ $BUILD/gpumem leaks $out/demo.db"
"$BUILD/gpumem" leaks "$out/demo.db"
echo
echo "The database is $out/demo.db: explore it with '$BUILD/gpumem sql $out/demo.db'."
