# alloc/ — the caching allocator library, its replay CLI, tests, fuzzer and benchmark.

ALLOC_SRCS := alloc/rbtree.c alloc/config.c alloc/alloc.c alloc/check.c alloc/membackend.c \
              alloc/replay.c
ALLOC_OBJS := $(ALLOC_SRCS:%.c=$(BUILD)/%.o)
ALLOC_LIB := $(BUILD)/alloc/libgpumem_alloc.a
ALLOC_REPLAY := $(BUILD)/alloc/gpumem-replay

$(ALLOC_LIB): $(ALLOC_OBJS) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(ALLOC_REPLAY): $(BUILD)/alloc/replay_main.o $(ALLOC_LIB) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -lpthread

ALL_TARGETS += $(ALLOC_LIB) $(ALLOC_REPLAY)
INSTALL_BIN += $(ALLOC_REPLAY)

# ---- tests
alloc_unit_LIBS := $(ALLOC_LIB)
alloc_unit_LDLIBS := -lpthread
UNIT_TESTS += $(BUILD)/tests/unit/alloc_unit
alloc_prop_LIBS := $(ALLOC_LIB)
alloc_prop_LDLIBS := -lpthread
UNIT_TESTS += $(BUILD)/tests/unit/alloc_prop
alloc_stress_LIBS := $(ALLOC_LIB)
alloc_stress_LDLIBS := -lpthread
UNIT_TESTS += $(BUILD)/tests/unit/alloc_stress
TSAN_UNIT_TESTS += $(BUILD)/tests/unit/alloc_stress

# ---- benchmark
ALLOC_BENCH := $(BUILD)/tests/bench/alloc_bench
$(ALLOC_BENCH): $(BUILD)/tests/bench/alloc_bench.o $(ALLOC_LIB) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ljemalloc -lpthread
ALL_TARGETS += $(ALLOC_BENCH)
BENCHES += $(ALLOC_BENCH)
