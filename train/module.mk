# train/ — the GPT-2 trainer. See train/README.md.
#   $(BUILD)/train_gpt2_sim  gcc; CPU ops as host kernels on the virtual GPU (build/sim, or
#                            PREFIX/lib/gpumem once installed, where make install puts the
#                            trainers too: generic names stay out of bin/)
#   $(BUILD)/train_gpt2      nvcc -cudart shared; CUDA kernels + cuBLAS (only when nvcc exists
#                            and in the plain build: sanitizer objects do not link with nvcc)

TRAIN_DIR := $(BUILD)/train
TRAIN_SIM := $(BUILD)/train_gpt2_sim
TRAIN_CUDA := $(BUILD)/train_gpt2
TRAIN_MODEL_OBJS := $(TRAIN_DIR)/gpt2.o $(TRAIN_DIR)/main.o $(TRAIN_DIR)/dist.o

# Several ranks (train/dist.c): built with Open MPI when mpicc exists (`make deps` installs
# it); without it the trainers are single-rank and say so when launched as several ranks.
MPICC := $(shell command -v mpicc 2>/dev/null)
ifneq ($(MPICC),)
TRAIN_MPI_CFLAGS := -DTRAIN_MPI $(shell $(MPICC) --showme:compile)
TRAIN_MPI_LIBS := $(shell $(MPICC) --showme:link)
$(TRAIN_DIR)/dist.o: EXTRA_CFLAGS += $(TRAIN_MPI_CFLAGS)
endif
TRAIN_SIM_OBJS := $(TRAIN_MODEL_OBJS) $(TRAIN_DIR)/backend_sim.o $(TRAIN_DIR)/ops_cpu.o

# The ops are the hot loops: -O3 (gcc vectorizes the gemm's register block); no -ffast-math,
# so sums keep their order and runs are bit-reproducible. Under SAN=thread the ops run on one
# thread each (-fopenmp-simd: the parallel loops are plain loops): libgomp is not built for
# ThreadSanitizer, which sees none of its barriers and reports every parallel region's stack
# hand-over as a race. What a TSan build checks of the trainer is then its real threads: the
# virtual GPU's stream workers, the recorder's, the allocator's.
TRAIN_OMP := $(if $(filter thread,$(SAN)),-fopenmp-simd,-fopenmp)
$(TRAIN_DIR)/ops_cpu.o: EXTRA_CFLAGS += -O3 $(TRAIN_OMP)
$(TRAIN_DIR)/backend_sim.o: EXTRA_CFLAGS += $(TRAIN_OMP)

$(TRAIN_SIM): $(TRAIN_SIM_OBJS) $(BUILD)/sim/libcuda.so $(BUILD)/sim/libcudart.so | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) $(TRAIN_OMP) -o $@ $(TRAIN_SIM_OBJS) -L$(BUILD)/sim -lcudart -lcuda \
	    -Wl,-rpath,'$$ORIGIN/sim:$$ORIGIN:$$ORIGIN/../lib/gpumem' $(SIM_DTAGS) $(TRAIN_MPI_LIBS) -lm -ldl
ALL_TARGETS += $(TRAIN_SIM)
INSTALL_LIB += $(TRAIN_SIM)

ifneq ($(NVCC),)
ifeq ($(SAN),)
ifneq ($(wildcard train/backend_cuda.cu),)
$(TRAIN_DIR)/backend_cuda.o: train/backend_cuda.cu train/backend.h | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@
$(TRAIN_CUDA): $(TRAIN_MODEL_OBJS) $(TRAIN_DIR)/backend_cuda.o | $(DEPS_STAMP)
	$(NVCC) $(NVCC_FLAGS) -o $@ $(TRAIN_MODEL_OBJS) $(TRAIN_DIR)/backend_cuda.o -lcublas \
	    $(filter -L% -l%,$(TRAIN_MPI_LIBS)) -lm -ldl
ALL_TARGETS += $(TRAIN_CUDA)
INSTALL_LIB += $(TRAIN_CUDA)
endif
endif
endif

# ---- tests ------------------------------------------------------------------------------------
train_ops_grad_LIBS := $(TRAIN_DIR)/ops_cpu.o
train_ops_grad_LDLIBS := $(TRAIN_OMP) -lm
UNIT_TESTS += $(BUILD)/tests/unit/train_ops_grad
SCRIPT_TESTS += tests/integration/train_basic.sh tests/integration/train_memory.sh \
    tests/integration/train_mpi.sh
BENCHES += tests/bench/train_bench.sh tests/bench/train_mpi_bench.sh
