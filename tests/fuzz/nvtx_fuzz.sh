#!/usr/bin/env bash
# libFuzzer over NVTX strings (tests/fuzz/nvtx_fuzz.c): scripts of NVTX calls made through the
# toolkit's NVTX3 headers into gpumem's handlers (preload/nvtx.c), every one; one input in 128
# (by hash) is also recorded and read back by every report and export. Deterministic in make
# test (fixed seed and run count over tests/fuzz/corpus/nvtx: steps, odd message types and
# handles, deep nesting, paths past 4 KiB, each as a recorded and an unrecorded input); make fuzz
# runs the long campaign. The recorder's writer thread makes coverage vary slightly between runs
# of one seed (a thread's timing): the inputs tried can differ by a few, the committed corpus is
# always replayed in full.
source tests/fuzz/fuzz_common.bash
# a recorded input opens a recording: skip its 5 ms clock calibration (the clock is not under test)
export GPUMEM_TSC=0
# and writes a database file: on tmpfs where there is one (no disk flushes; 20% less CPU)
if [[ -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi
fuzz_run nvtx "$BUILD/tests/fuzz/nvtx_fuzz" tests/fuzz/corpus/nvtx 5000 8192
