#!/usr/bin/env bash
# libFuzzer over the virtual GPU's parsers (tests/fuzz/sim_fuzz.c): fault plans, cost overrides,
# sizes. Deterministic in make test; make fuzz runs the long campaign. The parsers' rejection
# notes go to the log, so only the fuzzer's summary is shown.
source tests/fuzz/fuzz_common.bash
fuzz_run sim "$BUILD/tests/fuzz/sim_fuzz" tests/fuzz/corpus/sim 200000 256
