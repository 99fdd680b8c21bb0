#!/usr/bin/env bash
# libFuzzer over the virtual GPU's fat binary reader (tests/fuzz/fatbin_fuzz.c): the corpus holds
# the fat binaries nvcc makes of tests/unit/sim_nvcc_app.cu, raw and zstd-compressed (-Xfatbin
# -compress-all), and a cubin Triton built for torch.compile (cubin_triton0: what the driver's
# cuModuleLoadData reads, sim/sim_module.c). Deterministic in make test; make fuzz runs the long
# campaign.
source tests/fuzz/fuzz_common.bash
fuzz_run fatbin "$BUILD/tests/fuzz/fatbin_fuzz" tests/fuzz/corpus/fatbin 20000 65536
