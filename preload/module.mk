# preload/: libgpumem.so — interposition, NVTX injection, pinned-host pool, user API.
# Outputs: $(BUILD)/libgpumem.so, the test programs under $(BUILD)/tests/apps/.
# See preload/README.md.

PRELOAD_DIR := $(BUILD)/preload
PRELOAD_LIB := $(BUILD)/libgpumem.so
PRELOAD_SRCS := dlsym.c driver.c driver_sym.c program_mem.c devused.c runtime.c heap.c pinned.c nvtx.c uses.c python.c python_nogil.c torch_hooks.c torch_trace.c core.c
PRELOAD_OBJS := $(addprefix $(PRELOAD_DIR)/,$(PRELOAD_SRCS:.c=.o))
PRELOAD_ALLOC_LIB := $(BUILD)/alloc/libgpumem_alloc.a
# The recorder is linked when snapshot/ provides it (REC_LIB, REC_LDLIBS from its fragment).
PRELOAD_REC_LIB := $(REC_LIB)
PRELOAD_REC_FLAGS := $(if $(PRELOAD_REC_LIB),-DGM_HAVE_REC)

$(PRELOAD_DIR)/%.o: EXTRA_CFLAGS += -fvisibility=hidden $(PRELOAD_REC_FLAGS)
# dlsym runs before a sanitizer runtime has initialised (ASan/TSan resolve their interceptors
# through dlsym during their own start-up): it must not be instrumented.
$(PRELOAD_DIR)/dlsym.o: EXTRA_CFLAGS += -fno-sanitize=all

# jemalloc for the pinned pool: Debian's static PIC archive with every public name renamed to
# gm_je_* (the program's malloc must stay its own; see preload/README.md).
$(PRELOAD_DIR)/libgm_jemalloc.a: preload/jemalloc.syms | $(DEPS_STAMP)
	@mkdir -p $(@D)
	src=$$($(CC) -print-file-name=libjemalloc_pic.a); \
	if [ ! -f "$$src" ]; then echo "libjemalloc_pic.a not found: apt-get install libjemalloc-dev" >&2; exit 1; fi; \
	objcopy --redefine-syms=preload/jemalloc.syms "$$src" $@.tmp && mv $@.tmp $@

# The version script is generated from the documented export list (one name a line).
$(PRELOAD_DIR)/libgpumem.map: preload/exports.txt | $(DEPS_STAMP)
	@mkdir -p $(@D)
	{ echo '{ global:'; grep -v '^#' $< | grep -v '^$$' | sed 's/$$/;/'; echo 'local: *; };'; } > $@

# -z now: every symbol libgpumem.so calls is bound at load. Bound lazily, the first call of each
# name from inside a hook went through the dynamic linker's resolver, which saves the whole
# register file on the stack (with AVX-512, ~2.7 KiB of it, vector registers holding stale
# copies of the program's pointers), deeper than the hooks' stack scrubs reach: the program's
# next partly filled argument struct carried those pointers into a launch, uses no kernel made
# (preload_uses.sh, the BIND_NOW row and "residue").
$(PRELOAD_LIB): $(PRELOAD_OBJS) $(PRELOAD_ALLOC_LIB) $(PRELOAD_REC_LIB) \
                $(PRELOAD_DIR)/libgm_jemalloc.a $(PRELOAD_DIR)/libgpumem.map | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -shared -fvisibility=hidden -Wl,-soname,libgpumem.so \
	    -Wl,--version-script=$(PRELOAD_DIR)/libgpumem.map -Wl,-z,nodelete -Wl,-z,now \
	    -o $@ $(PRELOAD_OBJS) $(PRELOAD_REC_LIB) $(PRELOAD_ALLOC_LIB) \
	    $(PRELOAD_DIR)/libgm_jemalloc.a $(if $(PRELOAD_REC_LIB),$(REC_LDLIBS)) -ldl -lpthread -lm

ALL_TARGETS += $(PRELOAD_LIB)
INSTALL_LIB += $(PRELOAD_LIB)

# libgpumem_torch.so (preload/torch_trace.cpp): PyTorch's allocator trace entries handed to
# libgpumem.so as they happen, for the merge's exact placement; and (preload/torch_alloc.cpp)
# gpumem as PyTorch's allocator with an out-of-memory that raises torch.OutOfMemoryError. C++ against the installed wheel's
# headers and libc10_cuda.so (ALLOC_TORCH_DIR, CXX_FOUND: alloc/module.mk, the same conditions as
# alloc_torch_bench); not under sanitizers (the wheel is not instrumented). Where it is not built,
# _torch.py goes on without it and the merge places PyTorch's entries by its clock.
PRELOAD_TORCH_LIB := $(BUILD)/libgpumem_torch.so
ifneq ($(and $(CXX_FOUND),$(ALLOC_TORCH_DIR)),)
ifeq ($(SAN),)
# the wheel's version (torch/version.py), which _torch.py checks before attaching: TraceEntry's
# layout is the headers' of that version, and another PyTorch must not be handed this tracker
PRELOAD_TORCH_VERSION := $(shell sed -n "s/^__version__ = '\(.*\)'$$/\1/p" $(ALLOC_TORCH_DIR)/version.py 2>/dev/null)
# The module hooks' C++ backward pre-hooks (preload/torch_prehook.cpp) need Python's headers
# (python3-dev, optional in `make deps`) and libtorch_python.so: without the headers the library
# is built without them, and the hooks register their pre-hooks through Python as before.
PRELOAD_TORCH_PYINC := $(shell $(GPUMEM_TORCH_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
PRELOAD_TORCH_PREHOOK := $(if $(wildcard $(PRELOAD_TORCH_PYINC)/Python.h),$(PRELOAD_DIR)/torch_prehook_cpp.o)
PRELOAD_TORCH_CXXFLAGS = -std=c++20 $(OPT) -g -fPIC -fvisibility=hidden -Wall -Wextra -Werror -D_GNU_SOURCE \
    -isystem $(ALLOC_TORCH_DIR)/include -isystem $(CUDA_INC)
$(PRELOAD_DIR)/torch_trace_cpp.o: preload/torch_trace.cpp $(ALLOC_TORCH_DIR)/version.py | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(PRELOAD_TORCH_CXXFLAGS) -DGM_TORCH_BUILT_FOR='"$(PRELOAD_TORCH_VERSION)"' \
	    $(if $(PRELOAD_TORCH_PREHOOK),-DGM_TORCH_PREHOOK) -c -o $@ $<
$(PRELOAD_DIR)/torch_prehook_cpp.o: preload/torch_prehook.cpp $(ALLOC_TORCH_DIR)/version.py | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(PRELOAD_TORCH_CXXFLAGS) -isystem $(ALLOC_TORCH_DIR)/include/torch/csrc/api/include \
	    -isystem $(PRELOAD_TORCH_PYINC) -c -o $@ $<
$(PRELOAD_DIR)/torch_alloc_cpp.o: preload/torch_alloc.cpp $(ALLOC_TORCH_DIR)/version.py | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(PRELOAD_TORCH_CXXFLAGS) -c -o $@ $<
# gpumem_torch_trace_entry and the gpumem_torch_cpaths_* stay undefined here: libgpumem.so
# (preloaded) provides them, and the Python process the C API
$(PRELOAD_TORCH_LIB): $(PRELOAD_DIR)/torch_trace_cpp.o $(PRELOAD_DIR)/torch_alloc_cpp.o $(PRELOAD_TORCH_PREHOOK) | $(DEPS_STAMP)
	$(CXX) -shared -Wl,-soname,libgpumem_torch.so -o $@ $(filter %.o,$^) \
	    -L$(ALLOC_TORCH_DIR)/lib $(if $(PRELOAD_TORCH_PREHOOK),-ltorch_python -ltorch -ltorch_cpu) \
	    -ltorch_cuda -lc10_cuda -lc10 -Wl,-rpath,$(ALLOC_TORCH_DIR)/lib
ALL_TARGETS += $(PRELOAD_TORCH_LIB)
INSTALL_LIB += $(PRELOAD_TORCH_LIB)
endif
endif
INSTALL_INCLUDE += preload/gpumem.h

# ---- test programs ----------------------------------------------------------------------------
APPS_DIR := $(BUILD)/tests/apps
APPS_RPATH = $(SIM_RPATH)
# rt_app, fork_app, stress_app link the virtual GPU's runtime; drv_app only dlopens the driver;
# nvtx_app uses the toolkit's NVTX3 headers and nothing else.
PRELOAD_RT_APPS := rt_app fork_app stress_app streams_app unread_app crash_app devices_app
PRELOAD_APPS := $(addprefix $(APPS_DIR)/,$(PRELOAD_RT_APPS) drv_app nvtx_app)

$(APPS_DIR)/%.o: tests/apps/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_COMMON) -MMD -MP -c $< -o $@

$(addprefix $(APPS_DIR)/,$(PRELOAD_RT_APPS)): $(APPS_DIR)/%: $(APPS_DIR)/%.o $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(APPS_RPATH) -ldl -lpthread
# APPS_RPATH is DT_RPATH (sim/module.mk, SIM_RPATH): under a sanitizer the dlopen call comes from
# the sanitizer runtime's interceptor, and only the executable's old-style RPATH applies to it.
$(APPS_DIR)/drv_app: $(APPS_DIR)/drv_app.o $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(APPS_RPATH) -ldl -lpthread
$(APPS_DIR)/nvtx_app: $(APPS_DIR)/nvtx_app.o | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< -ldl -lpthread
# uses_app links the driver as well and calls its launch names by symbol, like the trainer
$(APPS_DIR)/uses_app: $(APPS_DIR)/uses_app.o $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_DRIVER) $(APPS_RPATH) -ldl -lpthread
PRELOAD_APPS += $(APPS_DIR)/uses_app
# fork_ids_app launches through the driver too (preload_fork_ids.sh)
$(APPS_DIR)/fork_ids_app: $(APPS_DIR)/fork_ids_app.o $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_DRIVER) $(APPS_RPATH) -ldl -lpthread
PRELOAD_APPS += $(APPS_DIR)/fork_ids_app
# blas_app links the cuBLAS stand-in as a program links the real library
$(APPS_DIR)/blas_app: $(APPS_DIR)/blas_app.o $(SIM_CUBLAS) $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_CUBLAS) $(SIM_RUNTIME) $(APPS_RPATH) -ldl -lpthread
PRELOAD_APPS += $(APPS_DIR)/blas_app
# streams_app built as with nvcc --default-stream per-thread: stream 0 is each thread's own
$(APPS_DIR)/streams_app_ptsz.o: tests/apps/streams_app.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_COMMON) -DCUDA_API_PER_THREAD_DEFAULT_STREAM=1 -MMD -MP -c $< -o $@
$(APPS_DIR)/streams_app_ptsz: $(APPS_DIR)/streams_app_ptsz.o $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(APPS_RPATH) -ldl -lpthread
PRELOAD_APPS += $(APPS_DIR)/streams_app_ptsz
$(APPS_DIR)/streams_stress: $(APPS_DIR)/streams_stress.o $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_DRIVER) $(APPS_RPATH) -ldl -lpthread
PRELOAD_APPS += $(APPS_DIR)/streams_stress
# a stand-in for a user's NVTX tool, to test chaining
$(APPS_DIR)/nvtx_tool.so: $(APPS_DIR)/nvtx_tool.o | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -shared -o $@ $<
PRELOAD_APPS += $(APPS_DIR)/nvtx_tool.so
# a preloaded cudaMalloc wrapper using dlsym(RTLD_NEXT): tests that gpumem's dlsym keeps it exact
$(APPS_DIR)/next_shim.so: $(APPS_DIR)/next_shim.o | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -shared -o $@ $< -ldl
PRELOAD_APPS += $(APPS_DIR)/next_shim.so
# reads the stack below its Python caller: preload_uses.sh's residue rows with Python frames
$(APPS_DIR)/stack_probe.so: $(APPS_DIR)/stack_probe.o | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -shared -o $@ $<
PRELOAD_APPS += $(APPS_DIR)/stack_probe.so
# calls back with the dynamic linker's lock held (crash_app loader_lock: snapshot_signals.sh)
$(APPS_DIR)/loader_lock.so: $(APPS_DIR)/loader_lock.o | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -shared -o $@ $<
PRELOAD_APPS += $(APPS_DIR)/loader_lock.so
# stack_top_app: every entry point that records a stack, called from its own function at one
# depth; libgpumem_caller.so calls gpumem's API as libgpumem_torch.so does (stack_top.sh)
$(APPS_DIR)/stack_top_app: $(APPS_DIR)/stack_top_app.o $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_DRIVER) $(APPS_RPATH) -ldl -lpthread
$(APPS_DIR)/libgpumem_caller.so: $(APPS_DIR)/gpumem_caller.o | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -shared -o $@ $<
PRELOAD_APPS += $(APPS_DIR)/stack_top_app $(APPS_DIR)/libgpumem_caller.so

# cxx_wrap_app: C++ through CUDA's header templates (cudaMalloc<T>), inlined at -O2, on the
# virtual runtime: call sites skip the header wrapper (tests/integration/snapshot_cli.sh)
$(APPS_DIR)/cxx_wrap_app: tests/apps/cxx_wrap_app.cc $(SIM_RUNTIME) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CXX) -O2 -g -Wall -Wextra -Werror -isystem $(CUDA_HOME)/include -fdebug-prefix-map=$(TOP)=. \
	    -o $@ $< $(SIM_RUNTIME) $(APPS_RPATH) -ldl -lpthread
PRELOAD_APPS += $(APPS_DIR)/cxx_wrap_app

# real_rt_app: the real CUDA runtime (nvcc -cudart shared), only where nvcc exists and only in
# the plain build (an nvcc-built program cannot take an ASan/TSan-built libgpumem.so).
ifneq ($(NVCC),)
ifeq ($(SAN),)
PRELOAD_APPS += $(APPS_DIR)/real_rt_app
$(APPS_DIR)/real_rt_app: tests/apps/real_rt_app.cu | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -Xlinker -rpath=$(CUDA_HOME)/lib64 -o $@ $<
endif
endif

ALL_TARGETS += $(PRELOAD_APPS)

# ---- benchmark ---------------------------------------------------------------------------------
$(BUILD)/tests/bench/preload_bench: $(BUILD)/tests/bench/preload_bench.o $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_RPATH) -lpthread
ALL_TARGETS += $(BUILD)/tests/bench/preload_bench
BENCHES += tests/bench/preload_bench.sh
# a cudaFree while another thread captures a graph, against one without (issue 37)
$(BUILD)/tests/bench/capture_free_bench: $(BUILD)/tests/bench/capture_free_bench.o $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_RPATH) -lpthread
ALL_TARGETS += $(BUILD)/tests/bench/capture_free_bench
BENCHES += tests/bench/capture_free_bench.sh

# ---- tests ----------------------------------------------------------------------------------
# the pinned pool against a fake driver
preload_pinned_LIBS = $(PRELOAD_DIR)/pinned.o $(PRELOAD_DIR)/libgm_jemalloc.a
preload_pinned_LDLIBS = -ldl -lpthread -lm
UNIT_TESTS += $(addprefix $(BUILD)/tests/unit/,$(patsubst tests/unit/%.c,%,$(wildcard tests/unit/preload_*.c)))
TSAN_UNIT_TESTS += $(if $(wildcard tests/unit/preload_pinned.c),$(BUILD)/tests/unit/preload_pinned)
PRELOAD_SCRIPTS := $(wildcard tests/integration/preload_*.sh)
SCRIPT_TESTS += $(PRELOAD_SCRIPTS)
TSAN_SCRIPT_TESTS += $(filter %/preload_fork.sh %/preload_stress.sh %/preload_uses.sh %/preload_streams_stress.sh \
                              %/preload_streams.sh,$(PRELOAD_SCRIPTS))

# ---- Python (preload/python.c, the gpumem module in preload/python/) --------------------------
# Python frames in stacks, the module's ranges and annotate(); torch tests skip without torch.
SCRIPT_TESTS += $(wildcard tests/integration/python_*.sh)
BENCHES += tests/bench/python_bench.sh
# the gpumem Python module (pure Python): PREFIX/share/gpumem/python/gpumem/
PYMOD_FILES := preload/python/gpumem/__init__.py preload/python/gpumem/_torch.py
INSTALL_OTHER += $(addprefix share/gpumem/python/gpumem/,$(notdir $(PYMOD_FILES))) share/gpumem/python/pyproject.toml \
                 share/gpumem/python-site/sitecustomize.py
.PHONY: install-python
install: install-python
install-python:
	install -d $(DESTDIR)$(PREFIX)/share/gpumem/python/gpumem
	install -m 0644 $(PYMOD_FILES) $(DESTDIR)$(PREFIX)/share/gpumem/python/gpumem/
	install -m 0644 preload/python/pyproject.toml $(DESTDIR)$(PREFIX)/share/gpumem/python/
	install -d $(DESTDIR)$(PREFIX)/share/gpumem/python-site
	install -m 0644 preload/python/site/sitecustomize.py $(DESTDIR)$(PREFIX)/share/gpumem/python-site/

# drv_sym_app: a driver-API program linked with -lcuda (the virtual GPU's), calling the driver's
# memory functions by symbol, in the style of NVIDIA's samples
$(APPS_DIR)/drv_sym_app: $(APPS_DIR)/drv_sym_app.o $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_DRIVER) $(APPS_RPATH) -ldl -lpthread
ALL_TARGETS += $(APPS_DIR)/drv_sym_app
# drv_mix_app: the runtime and the driver (through cuGetProcAddress and by symbol), one buffer each
$(APPS_DIR)/drv_mix_app: $(APPS_DIR)/drv_mix_app.o $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_DRIVER) $(APPS_RPATH) -ldl -lpthread
ALL_TARGETS += $(APPS_DIR)/drv_mix_app
# order_app: 8 threads reusing the same addresses on the four free paths (preload_order.sh)
$(APPS_DIR)/order_app: $(APPS_DIR)/order_app.o $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_DRIVER) $(APPS_RPATH) -ldl -lpthread
ALL_TARGETS += $(APPS_DIR)/order_app
# kinds_app: one kind of memory (VMM, array, pool, host, managed) beside device allocations
$(APPS_DIR)/kinds_app: $(APPS_DIR)/kinds_app.o $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_DRIVER) $(APPS_RPATH) -ldl -lpthread
ALL_TARGETS += $(APPS_DIR)/kinds_app
# pools_app: pools the program creates, beside gpumem's cudaMalloc (snapshot_pools.sh)
$(APPS_DIR)/pools_app: $(APPS_DIR)/pools_app.o $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_DRIVER) $(APPS_RPATH) -ldl -lpthread
ALL_TARGETS += $(APPS_DIR)/pools_app
