# zero3_schedule.awk — what --zero 3 saves on the peak of gpt2 124M (C 768, L 12, padded vocab
# 50304) at W ranks, by the trainer's schedule (train/README.md, "ZeRO-3"): every parameter's
# shard saving (4 (n - ceil(n/W)) bytes), less what is gathered at the start of the backward (the
# head: wte and lnf, and the last layer, prefetched). Run: awk -v W=4 -f zero3_schedule.awk
# Used by tests/integration/train_mpi.sh (the check) and tests/bench/train_mpi_bench.sh (BENCH).
BEGIN {
  C = 768; L = 12; Vp = 50304
  split(C " " C " " 3*C*C " " 3*C " " C*C " " C " " C " " C " " 4*C*C " " 4*C " " 4*C*C " " C, lay, " ")
  for (i = 1; i <= 12; i++) layer += lay[i]
  n[1] = Vp * C; n[2] = 1024 * C; n[3] = C; n[4] = C; k = 4
  for (l = 0; l < L; l++) for (i = 1; i <= 12; i++) n[++k] = lay[i]
  for (i = 1; i <= k; i++) save += 4 * (n[i] - int((n[i] + W - 1) / W))
  printf "%.0f", save - 4 * (Vp * C + 2 * C) - 4 * layer
}
