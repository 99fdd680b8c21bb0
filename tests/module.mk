# tests/ — the end-to-end suite (the trainer under gpumem on the virtual GPU), the demo, and
# the benchmarks that need every module. Module tests live with their module's fragment.
SCRIPT_TESTS += tests/integration/e2e_trainer.sh tests/integration/e2e_leak.sh \
                tests/integration/e2e_oom.sh tests/integration/e2e_large.sh \
                tests/integration/e2e_jitter.sh tests/integration/e2e_uses.sh \
                tests/integration/e2e_output_review.sh tests/integration/record_diagnosis.sh \
                tests/integration/cli_small_wrongs.sh tests/integration/readme_check.sh \
                tests/integration/record_exec.sh tests/integration/rerun_argv.sh \
                tests/integration/record_where.sh tests/integration/size_settings.sh \
                tests/integration/idle_event_counts.sh
# symbolizing through gm_sym.c's sorted symbol table names every frame as libdwfl does
SCRIPT_TESTS += tests/integration/sym_table.sh
# the README's text against the output of the commands it shows (e2e_* run those commands under
# the sanitizers)
NOSAN_SCRIPT_TESTS += tests/integration/readme_check.sh
# tests/run.sh's start order (longest first by the last run's times), a driver test: no C code
SCRIPT_TESTS += tests/integration/run_order.sh
NOSAN_SCRIPT_TESTS += tests/integration/run_order.sh
# make install into a scratch prefix (bin/, lib/gpumem/, include/, pkg-config, the manifest) and make uninstall
SCRIPT_TESTS += tests/integration/install.sh
# kill -9, signals, full disks, fork storms at seeded random moments (short; make soak: long)
SCRIPT_TESTS += tests/integration/fault_campaign.sh
# the GPU checks' packaging for the offline device (tests/gpu/prepare.sh, common.bash)
SCRIPT_TESTS += tests/integration/gpu_prepare.sh
BENCHES += tests/bench/demo_bench.sh tests/bench/uses_bench.sh tests/bench/util_bench.sh
# the differential suite: every corpus program plain and under gpumem, outputs compared
include tests/diff/module.mk
# PyTorch's CUDA build on the virtual GPU (tests/torch/)
include tests/torch/module.mk
