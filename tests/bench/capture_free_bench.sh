#!/usr/bin/env bash
# BENCH alloc.free_ns_capture_active (issue 37): a cudaFree under gpumem while another thread
# captures a CUDA graph, against one with no capture underway (tests/bench/capture_free_bench.c;
# best round of each, alternating, in one run). Bar: the ratio is at most 2.
set -uo pipefail
BUILD=${BUILD:-build}
B=$BUILD/tests/bench/capture_free_bench
LIB=$PWD/$BUILD/libgpumem.so
[[ -x $B && -e $LIB ]] || { echo "capture_free_bench: build first (make)" >&2; exit 1; }
GPUMEM_DB=none GPUMEM_SIM_MEMORY=16G LD_PRELOAD=$LIB "$B" 2000 7
