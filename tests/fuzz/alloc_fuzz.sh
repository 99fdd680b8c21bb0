#!/usr/bin/env bash
# libFuzzer over alloc/ (tests/fuzz/alloc_fuzz.c): GPUMEM_CONF strings, replay traces, and
# operation sequences checked with alloc_check every 8 operations and after the last, and the
# live-block ledger after every operation (first byte: 0 config, 1 trace, 2/3 operations).
# Deterministic in make test; make fuzz runs the long campaign.
source tests/fuzz/fuzz_common.bash
fuzz_run alloc "$BUILD/tests/fuzz/alloc_fuzz" tests/fuzz/corpus/alloc 1500 4096
