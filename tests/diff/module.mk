# tests/diff/: the differential suite (issue 19). Each program of the corpus runs plainly on the
# virtual GPU and under libgpumem.so in several configurations; outputs must be identical except
# for the differences listed, with their reasons, in tests/diff/expected-differences.txt.
# See tests/diff/README.md. Included from tests/module.mk.
DIFF_PROGS := $(basename $(notdir $(wildcard tests/diff/*.c)))
DIFF_BINS := $(addprefix $(BUILD)/tests/diff/,$(DIFF_PROGS))
# SIM_RPATH is DT_RPATH, so the driver's dlopen finds the virtual GPU under a sanitizer too
$(DIFF_BINS): $(BUILD)/tests/diff/%: $(BUILD)/tests/diff/%.o $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_RPATH) -ldl -lpthread
ALL_TARGETS += $(DIFF_BINS)
SCRIPT_TESTS += tests/diff/run.sh tests/diff/gpu_truth.sh
TSAN_SCRIPT_TESTS += tests/diff/run.sh
BENCHES += tests/bench/free_sync_bench.sh
