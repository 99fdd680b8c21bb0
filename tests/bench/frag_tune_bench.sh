#!/usr/bin/env bash
# `gpumem frag` and `gpumem tune` on the report benchmark's synthetic 10-million-event database
# (written through the recorder itself by rec_bench gen), and what tune finds on the trainer
# recorded under PyTorch's policy:
#   frag.10m_s                   gpumem frag --json on the 10 M-event database, CPU seconds (user +
#                                system, every thread), as report.10m_s (bar, issue 41: <= 5); its
#                                wall time on stderr
#   tune.10m_s                   gpumem tune, default search, on it: wall seconds, its replays
#                                spread over the cores (bar, issue 41: <= 15)
#   tune.10m_configs             configurations replayed by that search
#   tune.10m_rss_mb              that tune's peak resident memory, MB (/usr/bin/time's %M; 0
#                                without it)
#   tune.gpt2_124m.pytorch_over_recommended
#                                peak reserved under preset:pytorch over the recommendation's,
#                                measured by re-running (GPT-2 124M, B 8, T 1024, --seq-jitter)
set -euo pipefail
BUILD=${BUILD:-build}
GM=$BUILD/gpumem TRAIN=$BUILD/train_gpt2_sim
dir=$(mktemp -d "$BUILD/tests/bench/fragtune-XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$BUILD/tests/bench/rec_bench" gen "$dir/10m.db" "${GPUMEM_BENCH_EVENTS:-10000000}" > /dev/null
secs() { awk -v s="$1" -v e="$2" 'BEGIN { printf "%.1f", e - s }'; }
start=$(date +%s.%N)
TIMEFORMAT='%U %S'
{ time "$GM" frag --json "$dir/10m.db" > "$dir/frag.json" 2> "$dir/frag.err"; } 2> "$dir/frag.cpu"
end=$(date +%s.%N)
echo "# frag on 10 M events: $(secs "$start" "$end") s wall" >&2
echo "BENCH frag.10m_s $(awk '{ printf "%.2f", $1 + $2 }' "$dir/frag.cpu") s"
rss=(); [[ -x /usr/bin/time ]] && rss=(/usr/bin/time -f '%M' -o "$dir/tune.rss")
start=$(date +%s.%N)
"${rss[@]}" "$GM" tune --json "$dir/10m.db" > "$dir/tune.json" || true
end=$(date +%s.%N)
echo "BENCH tune.10m_s $(secs "$start" "$end") s"
echo "BENCH tune.10m_rss_mb $(awk '{ k = $1 } END { printf "%.0f", k * 1024 / 1e6 }' "$dir/tune.rss" 2> /dev/null || echo 0) MB"
echo "BENCH tune.10m_configs $(jq '.results | length' "$dir/tune.json") configs"
GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G GPUMEM_CONF=preset:pytorch "$GM" record -q -o "$dir/pt.db" -- \
  "$TRAIN" --model gpt2 -B 8 -T 1024 --dry-run --steps 20 --seq-jitter --seed 5 > /dev/null 2>&1
GPUMEM_SIM_BACKING=virtual GPUMEM_SIM_MEMORY=80G "$GM" tune --json --check "$dir/pt.db" > "$dir/pt.json"
echo "# tune on the trainer under preset:pytorch: recommended $(jq -r .recommended.conf "$dir/pt.json"), predicted $(jq .recommended.predicted.peak_reserved "$dir/pt.json"), measured $(jq .check.measured.peak_reserved "$dir/pt.json")" >&2
echo "BENCH tune.gpt2_124m.pytorch_over_recommended $(jq '.recorded.peak_reserved / .check.measured.peak_reserved * 1000 | round / 1000' "$dir/pt.json") x"
