# alloc/ — the caching allocator library, its replay CLI, tests, fuzzer and benchmark.

ALLOC_SRCS := alloc/rbtree.c alloc/config.c alloc/alloc.c alloc/check.c alloc/membackend.c \
              alloc/replay.c
ALLOC_OBJS := $(ALLOC_SRCS:%.c=$(BUILD)/%.o)
ALLOC_LIB := $(BUILD)/alloc/libgpumem_alloc.a
ALLOC_REPLAY := $(BUILD)/alloc/gpumem-replay

$(ALLOC_LIB): $(ALLOC_OBJS) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# gm_args.o: the option rule of every gpumem command (snapshot/read/gm_args.h), libc only
$(ALLOC_REPLAY): $(BUILD)/alloc/replay_main.o $(BUILD)/snapshot/read/gm_args.o $(ALLOC_LIB) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -lpthread

ALL_TARGETS += $(ALLOC_LIB) $(ALLOC_REPLAY)
INSTALL_BIN += $(ALLOC_REPLAY)

# ---- tests
alloc_unit_LIBS := $(ALLOC_LIB)
alloc_unit_LDLIBS := -lpthread
UNIT_TESTS += $(BUILD)/tests/unit/alloc_unit
alloc_pytorch_LIBS := $(ALLOC_LIB)
alloc_pytorch_LDLIBS := -lpthread
UNIT_TESTS += $(BUILD)/tests/unit/alloc_pytorch
alloc_prop_LIBS := $(ALLOC_LIB)
alloc_prop_LDLIBS := -lpthread
UNIT_TESTS += $(BUILD)/tests/unit/alloc_prop
alloc_stress_LIBS := $(ALLOC_LIB)
alloc_stress_LDLIBS := -lpthread
UNIT_TESTS += $(BUILD)/tests/unit/alloc_stress
TSAN_UNIT_TESTS += $(BUILD)/tests/unit/alloc_stress
alloc_streams_LIBS := $(ALLOC_LIB)
alloc_streams_LDLIBS := -lpthread
UNIT_TESTS += $(BUILD)/tests/unit/alloc_streams
TSAN_UNIT_TESTS += $(BUILD)/tests/unit/alloc_streams

# ---- benchmark
ALLOC_BENCH := $(BUILD)/tests/bench/alloc_bench
$(ALLOC_BENCH): $(BUILD)/tests/bench/alloc_bench.o $(ALLOC_LIB) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ljemalloc -lpthread
ALL_TARGETS += $(ALLOC_BENCH)
BENCHES += $(ALLOC_BENCH)
ALLOC_STREAMS_BENCH := $(BUILD)/tests/bench/alloc_streams_bench
$(ALLOC_STREAMS_BENCH): $(BUILD)/tests/bench/alloc_streams_bench.o $(ALLOC_LIB) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -lpthread
ALL_TARGETS += $(ALLOC_STREAMS_BENCH)
BENCHES += $(ALLOC_STREAMS_BENCH)
# alloc_bench's pairs at one live count, for valgrind's instruction and cache-miss counts (not
# run by `make bench`: tests/bench/alloc_pairs.c)
ALLOC_PAIRS := $(BUILD)/tests/bench/alloc_pairs
$(ALLOC_PAIRS): $(BUILD)/tests/bench/alloc_pairs.o $(ALLOC_LIB) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -lpthread
ALL_TARGETS += $(ALLOC_PAIRS)

# gpumem's allocator beside PyTorch's CUDACachingAllocator (tests/bench/alloc_torch_bench.cpp):
# C++, linked with the installed wheel's libc10_cuda.so (C++20 headers, the new libstdc++ ABI,
# which is g++'s default: _GLIBCXX_USE_CXX11_ABI=1, as the wheel's cxx11 symbols say) and the
# virtual GPU's driver. Built only where PyTorch and a C++ compiler are installed, and not under
# sanitizers (the wheel is not instrumented); the script skips, saying why, where it is not.
CXX_FOUND := $(shell command -v $(CXX) 2>/dev/null)
# the Makefile's own default (set there after the module fragments are read; same value)
GPUMEM_TORCH_VENV ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpumem/torch-$(or $(GPUMEM_TORCH_VERSION),2.14.1)
ALLOC_TORCH_DIR := $(patsubst %/include/c10/cuda/CUDACachingAllocator.h,%,$(firstword     $(wildcard $(GPUMEM_TORCH_VENV)/lib/python3*/site-packages/torch/include/c10/cuda/CUDACachingAllocator.h)))
ALLOC_TORCH_BENCH := $(BUILD)/tests/bench/alloc_torch_bench
ifneq ($(and $(CXX_FOUND),$(ALLOC_TORCH_DIR)),)
ifeq ($(SAN),)
$(BUILD)/tests/bench/alloc_torch_bench.o: tests/bench/alloc_torch_bench.cpp alloc/alloc.h sim/sim.h \
                                          | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CXX) -std=c++20 $(OPT) -g -Wall -Wextra -Werror -D_GNU_SOURCE -I$(TOP) \
	    -isystem $(ALLOC_TORCH_DIR)/include -isystem $(CUDA_INC) -c -o $@ $<
$(ALLOC_TORCH_BENCH): $(BUILD)/tests/bench/alloc_torch_bench.o $(ALLOC_LIB) \
                      $(BUILD)/sim/libcuda.so.1 $(BUILD)/sim/libcudart.so.13 | $(DEPS_STAMP)
	$(CXX) -o $@ $(BUILD)/tests/bench/alloc_torch_bench.o $(ALLOC_LIB) \
	    -L$(ALLOC_TORCH_DIR)/lib -lc10_cuda -lc10 -Wl,-rpath,$(ALLOC_TORCH_DIR)/lib \
	    $(BUILD)/sim/libcuda.so.1 $(BUILD)/sim/libcudart.so.13 $(SIM_RPATH) -lpthread
ALL_TARGETS += $(ALLOC_TORCH_BENCH)
endif
endif
BENCHES += tests/bench/alloc_torch_bench.sh tests/bench/alloc_script_syncs_bench.sh

# ---- libFuzzer target (clang; built only where clang can link -fsanitize=fuzzer)
ALLOC_FUZZ := $(BUILD)/tests/fuzz/alloc_fuzz
ALLOC_CLANG_FUZZ := $(shell printf 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' | \
    $(CLANG) -x c -fsanitize=fuzzer - -o /dev/null 2>/dev/null && echo yes)
ifeq ($(ALLOC_CLANG_FUZZ),yes)
ALLOC_FUZZ_FLAGS := -std=gnu17 -O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE -I$(TOP) \
                    -fno-sanitize-recover=undefined
# The invariant checker runs after every operation; it is the judge, not the code under test,
# so it is built without coverage instrumentation (which made it 90% of the run time).
$(BUILD)/tests/fuzz/alloc_fuzz_check.o: alloc/check.c alloc/alloc.h alloc/internal.h | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CLANG) $(ALLOC_FUZZ_FLAGS) -fsanitize=address,undefined -c -o $@ alloc/check.c
$(eval $(call fuzz_target,alloc_fuzz,tests/fuzz/alloc_fuzz.c $(filter-out alloc/check.c,$(ALLOC_SRCS)),$(ALLOC_FUZZ_FLAGS),-lpthread,$(BUILD)/tests/fuzz/alloc_fuzz_check.o))
ALL_TARGETS += $(ALLOC_FUZZ)
endif
SCRIPT_TESTS += tests/fuzz/alloc_fuzz.sh

# over the virtual GPU's driver (dlopen'ed from $(BUILD)/sim at run time; built first)
alloc_sim_LIBS := $(ALLOC_LIB)
alloc_sim_LDLIBS := -ldl -lpthread
$(BUILD)/tests/unit/alloc_sim: | $(BUILD)/sim/libcuda.so.1
UNIT_TESTS += $(BUILD)/tests/unit/alloc_sim
SCRIPT_TESTS += tests/unit/alloc_cli.sh
# the GPU check against PyTorch (tests/gpu/pytorch_parity.*): syntax, and its converter's selftest
SCRIPT_TESTS += tests/unit/alloc_pytorch_parity.sh
