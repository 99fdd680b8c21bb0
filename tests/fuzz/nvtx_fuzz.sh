#!/usr/bin/env bash
# libFuzzer over NVTX strings (tests/fuzz/nvtx_fuzz.c): range and mark names of any bytes
# recorded, then read back by every report. Deterministic in make test (fixed seed and run
# count over tests/fuzz/corpus/nvtx); make fuzz runs the long campaign. The recorder's writer
# thread makes coverage vary slightly between runs of one seed (a thread's timing): the inputs
# tried can differ by a few, the committed corpus is always replayed in full.
source tests/fuzz/fuzz_common.bash
# each input opens a recording: skip its 5 ms clock calibration (the clock is not under test)
export GPUMEM_TSC=0
# and writes a database file: on tmpfs where there is one (no disk flushes; 20% less CPU)
if [[ -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi
fuzz_run nvtx "$BUILD/tests/fuzz/nvtx_fuzz" tests/fuzz/corpus/nvtx 300 2048
