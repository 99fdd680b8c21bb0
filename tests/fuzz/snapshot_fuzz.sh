#!/usr/bin/env bash
# libFuzzer over the database reader (tests/fuzz/snapshot_fuzz_db.c): mutations of real
# recordings (tests/fuzz/corpus/snapshot_db: pairs with stacks, a mixed run with a named OOM,
# steps, inline chains, a 4 KiB header, a -lcuda program with VMM, pools and cuMemGetInfo
# samples (devused.db), and each crash found so far). Deterministic in
# make test (fixed seed, fixed number of runs); make fuzz runs the long campaign.
source tests/fuzz/fuzz_common.bash
# ASan's quarantine (freed memory kept unusable, to catch a use after free) at 32 MB instead of
# 256: each input allocates far less than that, and cycling through 256 MB of fresh memory made
# ~1/3 of the target's page faults (measured: 248k -> 165k faults in 3,000 campaign inputs)
FUZZ_ASAN=quarantine_size_mb=32
fuzz_run snapshot_db "$BUILD/tests/fuzz/snapshot_fuzz_db" tests/fuzz/corpus/snapshot_db 1500 400000
