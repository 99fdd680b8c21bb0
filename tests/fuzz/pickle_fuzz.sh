#!/usr/bin/env bash
# libFuzzer over `gpumem import` (tests/fuzz/pickle_fuzz.c): the non-executing pickle reader
# and the snapshot's conversion into a database. Corpus tests/fuzz/corpus/pickle: snapshots as
# PyTorch pickles them (protocols 2-5, with and without traces, 1.13's style), os.system and
# other hostile pickles, damaged ones. Deterministic in make test (fixed seed and runs); make
# fuzz runs the long campaign.
source tests/fuzz/fuzz_common.bash
fuzz_run pickle "$BUILD/tests/fuzz/pickle_fuzz" tests/fuzz/corpus/pickle 10000 65536
