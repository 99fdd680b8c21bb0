# sim/ — the virtual GPU: $(BUILD)/sim/libcuda.so.1 and $(BUILD)/sim/libcudart.so.13 (+ the
# unversioned symlinks), and their unit tests. See sim/README.md.

SIM_DIR := $(BUILD)/sim
SIM_DRIVER := $(SIM_DIR)/libcuda.so.1
SIM_RUNTIME := $(SIM_DIR)/libcudart.so.13
SIM_LINKS := $(SIM_DIR)/libcuda.so $(SIM_DIR)/libcudart.so

SIM_DRIVER_OBJS := $(addprefix $(SIM_DIR)/,sim_state.o sim_device.o sim_mem.o sim_exec.o sim_graph.o sim_ptds.o \
    sim_profile.o sim_func.o sim_module.o sim_fatbin.o sim_cu_procs.o)
SIM_RUNTIME_OBJS := $(addprefix $(SIM_DIR)/,sim_rt.o sim_rt_kernels.o sim_fatbin.o sim_rt_stubs.o)

ALL_TARGETS += $(SIM_DRIVER) $(SIM_RUNTIME) $(SIM_LINKS)
INSTALL_LIB += $(SIM_DRIVER) $(SIM_RUNTIME) $(SIM_LINKS)

# Generated from the toolkit headers: the cuGetProcAddress table with NOT_SUPPORTED stubs for
# everything the sim does not implement, and the error-name lists.
$(SIM_DIR)/sim_procs.h $(SIM_DIR)/sim_cu_procs.c &: sim/gen_procs.sh $(CUDA_INC)/cuda.h | $(DEPS_STAMP)
	$(SHELL) sim/gen_procs.sh driver $(CUDA_INC) $(SIM_DIR) $(CC_BARE)
$(SIM_DIR)/sim_rt_procs.h $(SIM_DIR)/sim_rt_stubs.c &: sim/gen_procs.sh $(CUDA_INC)/cuda_runtime_api.h $(CUDA_INC)/driver_types.h | $(DEPS_STAMP)
	$(SHELL) sim/gen_procs.sh runtime $(CUDA_INC) $(SIM_DIR) $(CC_BARE)

$(SIM_DIR)/%.o: EXTRA_CFLAGS += -I$(SIM_DIR)
$(SIM_DIR)/sim_device.o: $(SIM_DIR)/sim_procs.h
$(SIM_DIR)/sim_rt.o: $(SIM_DIR)/sim_rt_procs.h
$(SIM_DIR)/sim_cu_procs.o: $(SIM_DIR)/sim_cu_procs.c $(SIM_DIR)/sim_procs.h | $(DEPS_STAMP)
	$(CC) $(CFLAGS_COMMON) $(EXTRA_CFLAGS) -c $< -o $@
$(SIM_DIR)/sim_rt_stubs.o: $(SIM_DIR)/sim_rt_stubs.c | $(DEPS_STAMP)
	$(CC) $(CFLAGS_COMMON) $(EXTRA_CFLAGS) -c $< -o $@

# -Bsymbolic-functions: the driver's calls to its own entry points (cuStreamCreate ->
# cuStreamCreateWithPriority, the cuGetProcAddress table's addresses) bind inside the library,
# like the real libcuda's. An interposer exporting driver names (libgpumem.so exports the launch
# names) then sees the program's calls only, never the driver's internal ones a second time.
$(SIM_DRIVER): $(SIM_DRIVER_OBJS) sim/libcuda.map | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -shared -Wl,-soname,libcuda.so.1 -Wl,--version-script=sim/libcuda.map \
	    -Wl,-Bsymbolic-functions \
	    -o $@ $(SIM_DRIVER_OBJS) -lzstd -lpthread
# Everything linked against the virtual GPU carries DT_RPATH, not RUNPATH (SIM_DTAGS): a
# RUNPATH is outranked by LD_LIBRARY_PATH, which on a machine with a real GPU names the real
# driver's folder, and the real libcuda.so.1 or libcudart.so.13 would be loaded in place of the
# virtual GPU's (tests/gpu/ on an H200 found this; tests/unit/sim_ld_path.sh checks it). The
# runtime opens the driver next to it by path (sim_rt.c, open_driver).
SIM_DTAGS = -Wl,--disable-new-dtags
SIM_RPATH = -Wl,-rpath,'$$ORIGIN/../../sim' $(SIM_DTAGS)
$(SIM_RUNTIME): $(SIM_RUNTIME_OBJS) sim/libcudart.map | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -shared -Wl,-soname,libcudart.so.13 -Wl,--version-script=sim/libcudart.map \
	    -Wl,-rpath,'$$ORIGIN' $(SIM_DTAGS) -o $@ $(SIM_RUNTIME_OBJS) -lzstd -ldl -lpthread
$(SIM_DIR)/libcuda.so: $(SIM_DRIVER)
	ln -sf libcuda.so.1 $@
$(SIM_DIR)/libcudart.so: $(SIM_RUNTIME)
	ln -sf libcudart.so.13 $@

# ---- cuBLAS / cuBLASLt stand-ins (sim/README.md "PyTorch on the virtual GPU") ---------------
# Each exports every function sim/torch_imports.txt lists for it (generated weak stubs for what
# is not modelled) under the real library's version node, and reaches the GPU only through the
# CUDA runtime (DT_NEEDED libcudart.so.13, found next to it through its rpath $ORIGIN).
SIM_CUBLAS := $(SIM_DIR)/libcublas.so.13
SIM_CUBLASLT := $(SIM_DIR)/libcublasLt.so.13
SIM_CUBLAS_OBJS := $(addprefix $(SIM_DIR)/,cublas.o sim_blas.o cublas_stubs.o)
SIM_CUBLASLT_OBJS := $(addprefix $(SIM_DIR)/,cublaslt.o sim_blas.o cublaslt_stubs.o)
SIM_NVML := $(SIM_DIR)/libnvidia-ml.so.1
ALL_TARGETS += $(SIM_CUBLAS) $(SIM_CUBLASLT) $(SIM_NVML) $(SIM_DIR)/torch-env
INSTALL_LIB += $(SIM_CUBLAS) $(SIM_CUBLASLT) $(SIM_NVML)

$(SIM_DIR)/cublas_stubs.c: sim/gen_blas_stubs.sh sim/torch_imports.txt
	@mkdir -p $(@D)
	$(SHELL) sim/gen_blas_stubs.sh libcublas.so.13 sim/torch_imports.txt $@
$(SIM_DIR)/cublaslt_stubs.c: sim/gen_blas_stubs.sh sim/torch_imports.txt
	@mkdir -p $(@D)
	$(SHELL) sim/gen_blas_stubs.sh libcublasLt.so.13 sim/torch_imports.txt $@
$(SIM_DIR)/cublas_stubs.o $(SIM_DIR)/cublaslt_stubs.o: $(SIM_DIR)/%.o: $(SIM_DIR)/%.c | $(DEPS_STAMP)
	$(CC) $(CFLAGS_COMMON) $(EXTRA_CFLAGS) -c $< -o $@
$(SIM_CUBLAS): $(SIM_CUBLAS_OBJS) $(SIM_RUNTIME) sim/libcublas.map | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -shared -Wl,-soname,libcublas.so.13 -Wl,--version-script=sim/libcublas.map \
	    -Wl,-rpath,'$$ORIGIN' $(SIM_DTAGS) -o $@ $(SIM_CUBLAS_OBJS) $(SIM_RUNTIME) -ldl -lpthread
$(SIM_CUBLASLT): $(SIM_CUBLASLT_OBJS) $(SIM_RUNTIME) sim/libcublasLt.map | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -shared -Wl,-soname,libcublasLt.so.13 -Wl,--version-script=sim/libcublasLt.map \
	    -Wl,-rpath,'$$ORIGIN' $(SIM_DTAGS) -o $@ $(SIM_CUBLASLT_OBJS) $(SIM_RUNTIME) -ldl -lpthread
# NVML: the management queries PyTorch makes (its expandable segments ask about the fabric).
$(SIM_NVML): $(SIM_DIR)/nvml.o sim/libnvidia-ml.map | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -shared -Wl,-soname,libnvidia-ml.so.1 -Wl,--version-script=sim/libnvidia-ml.map \
	    -o $@ $(SIM_DIR)/nvml.o -ldl
# The one way to run a program (PyTorch) on the virtual GPU: preloads the driver, the runtime and
# the stand-ins from this folder (sim/torch-env.sh).
$(SIM_DIR)/torch-env: sim/torch-env.sh
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

# ---- tests ------------------------------------------------------------------------------------
# Tests link the sim by path and find it at run time through an rpath relative to the binary
# ($(BUILD)/tests/unit/x -> $(BUILD)/sim), so they work for every $(BUILD).
SIM_RUNTIME_TESTS := sim_runtime
SIM_DRIVER_TESTS := $(filter-out $(SIM_RUNTIME_TESTS) sim_cublas,$(patsubst tests/unit/%.c,%,$(wildcard tests/unit/sim_*.c)))
$(foreach t,$(SIM_DRIVER_TESTS),$(eval $(t)_LIBS = $$(SIM_DIR)/libcuda.so) \
    $(eval $(t)_LDLIBS = $$(SIM_RPATH) -lpthread))
# Links only the runtime: the driver must be reached through dlopen.
sim_runtime_LIBS = $(SIM_DIR)/libcudart.so
sim_runtime_LDLIBS = $(SIM_RPATH) -ldl -lpthread
# The runtime test also needs the driver built (it is loaded, not linked).
$(BUILD)/tests/unit/sim_runtime: | $(SIM_DIR)/libcuda.so
# The cuBLAS stand-ins, linked as a program links the real ones (with the runtime).
sim_cublas_LIBS = $(SIM_CUBLAS) $(SIM_CUBLASLT) $(SIM_RUNTIME)
sim_cublas_LDLIBS = $(SIM_RPATH) -ldl -lpthread
$(BUILD)/tests/unit/sim_cublas: | $(SIM_DIR)/libcuda.so

UNIT_TESTS += $(addprefix $(BUILD)/tests/unit/,$(SIM_DRIVER_TESTS) \
    $(if $(wildcard tests/unit/sim_runtime.c),$(SIM_RUNTIME_TESTS)) sim_cublas)
TSAN_UNIT_TESTS += $(addprefix $(BUILD)/tests/unit/,$(filter sim_threads sim_async sim_graph,$(SIM_DRIVER_TESTS)) \
    $(if $(wildcard tests/unit/sim_runtime.c),sim_runtime))
SCRIPT_TESTS += $(wildcard tests/unit/sim_*.sh)
BENCHES += $(if $(wildcard tests/bench/sim_costs.c),$(BUILD)/tests/bench/sim_costs)

$(BUILD)/tests/bench/sim_costs: $(BUILD)/tests/bench/sim_costs.o $(SIM_DIR)/libcuda.so | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_DIR)/libcuda.so $(SIM_RPATH)

# ---- libFuzzer target over the parsers (clang; built only where clang links -fsanitize=fuzzer)
SIM_FUZZ := $(BUILD)/tests/fuzz/sim_fuzz
SIM_CLANG_FUZZ := $(shell printf 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' | \
    $(CLANG) -x c -fsanitize=fuzzer - -o /dev/null 2>/dev/null && echo yes)
ifeq ($(SIM_CLANG_FUZZ),yes)
SIM_FUZZ_SRCS := tests/fuzz/sim_fuzz.c sim/sim_state.c sim/sim_device.c sim/sim_mem.c sim/sim_exec.c sim/sim_graph.c sim/sim_ptds.c \
                 sim/sim_profile.c sim/sim_func.c \
                 $(SIM_DIR)/sim_cu_procs.c
$(eval $(call fuzz_target,sim_fuzz,$(SIM_FUZZ_SRCS),-std=gnu17 -O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE -I$(TOP) -I$(SIM_DIR) -isystem $(CUDA_INC),-lpthread,,$(SIM_DIR)/sim_procs.h))
ALL_TARGETS += $(SIM_FUZZ)
# the fat binary reader (sim_fatbin.c), over nvcc's own fat binaries
$(eval $(call fuzz_target,fatbin_fuzz,tests/fuzz/fatbin_fuzz.c sim/sim_fatbin.c,-std=gnu17 -O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE -I$(TOP),-lzstd))
ALL_TARGETS += $(BUILD)/tests/fuzz/fatbin_fuzz
endif
SCRIPT_TESTS += tests/fuzz/sim_fuzz.sh tests/fuzz/fatbin_fuzz.sh
# the exported surface against PyTorch's imports (nm)
NOSAN_SCRIPT_TESTS += tests/unit/sim_torch_imports.sh
