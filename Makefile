# gpumem — the one build entry point.
#
#   make              build everything that can be built on this machine
#   make test         unit + integration tests (cmocka), prints a summary
#   make test SAN=address   the same suite under AddressSanitizer + UBSan
#   make test SAN=thread    the threaded tests under ThreadSanitizer
#   make demo         train the tiny GPT-2 under gpumem on the virtual GPU, print the report
#   make bench        benchmarks; one `BENCH <name> <value> <unit>` line per figure
#   make install PREFIX=/usr/local   (writes PREFIX/share/gpumem/install_manifest.txt)
#   make uninstall PREFIX=/usr/local (removes what that manifest lists, unchanged, and nothing else)
#   make clean
#   make deps         install missing Debian packages (apt-get) and PyTorch's CUDA build (pip,
#                     into a venv outside the clone); every target above runs it
#
# Each folder contributes a fragment, <folder>/module.mk, that appends to the lists below.
# Outputs go to build/ (build/san-<kind>/ for sanitizer builds), never into the sources.

.DEFAULT_GOAL := all
SHELL := /bin/bash
TOP := $(abspath .)

SAN ?=
ifeq ($(SAN),)
BUILD ?= build
SAN_FLAGS :=
else ifeq ($(SAN),address)
BUILD ?= build/san-address
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else ifeq ($(SAN),thread)
BUILD ?= build/san-thread
SAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
else
$(error SAN=$(SAN) is not a sanitizer this build knows; use SAN=address or SAN=thread)
endif
export BUILD SAN

# CUDA: the headers are required (the virtual GPU implements the toolkit's own declarations);
# nvcc is optional and only gates the .cu targets.
CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda) $(wildcard /usr/local/cuda-13*) /usr/local/cuda)
NVCC := $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
CUDA_INC := $(CUDA_HOME)/include
ifeq ($(wildcard $(CUDA_INC)/cuda.h),)
$(error CUDA headers not found in $(CUDA_INC): install the CUDA 13 toolkit or set CUDA_HOME=/path/to/cuda)
endif

CC ?= gcc
ifeq ($(CC),cc)
CC := gcc
endif
# the compiler itself, for the scripts that run it on their own (the rules' $(CC) may go through
# ccache, below)
CC_BARE := $(CC)
CLANG ?= clang
OPT ?= -O2
CFLAGS_COMMON := -std=gnu17 $(OPT) -g -Wall -Wextra -Werror -fPIC -D_GNU_SOURCE \
                 -I$(TOP) -isystem $(CUDA_INC) $(SAN_FLAGS)
LDFLAGS_COMMON := $(SAN_FLAGS)
NVCC_FLAGS := -O2 -g -cudart shared -Xcompiler -Wall,-Werror -I$(TOP) \
              -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80

# Lists the module fragments append to.
ALL_TARGETS :=
UNIT_TESTS :=
SCRIPT_TESTS :=
TSAN_UNIT_TESTS :=
TSAN_SCRIPT_TESTS :=
# scripts that run no C code of their own, only check text, symbols or sources (the README
# against the commands' output, export lists, include rules, the test scripts' own lint): the
# sanitizer stages leave them to the plain run
NOSAN_SCRIPT_TESTS :=
BENCHES :=
INSTALL_BIN :=
INSTALL_LIB :=
INSTALL_SHARE :=
INSTALL_INCLUDE :=
# files a fragment installs by a rule of its own, relative to PREFIX (make install's manifest)
INSTALL_OTHER :=

# Debian packages the project needs (Makefile `deps`).
DEB_PACKAGES := gcc make clang libclang-rt-14-dev libcmocka-dev libjemalloc-dev \
                libsqlite3-dev sqlite3 libunwind-dev libdw-dev libelf-dev libzstd-dev pkg-config binutils jq \
                libiberty-dev libopenmpi-dev openmpi-bin valgrind
# Optional packages: `make deps` installs them too, but a build never needs them; the tests
# that use one skip (exit 77) with a message naming it when it is missing.
# chromium, chromium-driver (chromedriver), python3-selenium: the browser halves of
# tests/integration/viz_page.sh and viz_ranks.sh (viz/browser_*.py).
# ccache: the compiler cache the build uses when it is there (below).
# python3-dev: Python's headers, for libgpumem_torch.so's C++ backward pre-hooks (preload/module.mk).
DEB_OPTIONAL := chromium chromium-driver python3-selenium python3-venv ccache python3-dev

DEPS_STAMP := $(BUILD)/.deps-ok
# The stamp is also read as a makefile (an empty one). On a fresh machine make installs the
# packages it lacks first and then starts over (GNU make re-reads its makefiles once one of
# them was remade), so what the module files look for while they are read (mpicc for the
# trainer's MPI build, nvcc) is found on the first run, not only on the second.
# (Not for goals that need no package: clean, deps itself.)
ifneq ($(if $(MAKECMDGOALS),$(filter-out clean deps check-deps,$(MAKECMDGOALS)),all),)
-include $(DEPS_STAMP)
endif
include tests/harness.mk
-include sim/module.mk
-include alloc/module.mk
-include snapshot/module.mk
-include preload/module.mk
-include viz/module.mk
-include train/module.mk
-include tests/module.mk

# ccache, where installed (`make deps` installs it, optional): a fresh clone on a machine that
# built gpumem before (CI's) gets its objects from the cache instead of compiling them again.
# Set here, after the fragments' compiler checks, so that only the rules go through it.
# GPUMEM_CCACHE= (empty) turns it off.
GPUMEM_CCACHE ?= $(shell command -v ccache 2>/dev/null)
# The clone's path is kept out of the objects (-fdebug-prefix-map: DWARF's comp_dir is "."; the
# sources are compiled by relative paths, so the file names recorded are the same) and out of
# the cache's keys (CCACHE_BASEDIR, CCACHE_NOHASHDIR), so that a clone elsewhere hits too.
ifneq ($(GPUMEM_CCACHE),)
CC := $(GPUMEM_CCACHE) $(CC)
CLANG := $(GPUMEM_CCACHE) $(CLANG)
CXX := $(GPUMEM_CCACHE) $(CXX)
CFLAGS_COMMON += -fdebug-prefix-map=$(TOP)=.
export CCACHE_BASEDIR := $(TOP)
export CCACHE_NOHASHDIR := 1
endif

# The libFuzzer targets are always built with AddressSanitizer + UBSan (tests/fuzz/README.md):
# the plain build makes and runs them, and a SAN= build, which would make the same binaries
# again, leaves them to it (`make fuzz` and the fuzz scripts use the plain build's).
ifneq ($(SAN),)
ALL_TARGETS := $(filter-out $(BUILD)/tests/fuzz/%,$(ALL_TARGETS))
SCRIPT_TESTS := $(filter-out tests/fuzz/% $(NOSAN_SCRIPT_TESTS),$(SCRIPT_TESTS))
endif

.PHONY: all deps test bench demo fuzz soak install uninstall clean check-deps
all: $(DEPS_STAMP) $(ALL_TARGETS)
ifeq ($(NVCC),)
	@echo "note: nvcc not found (CUDA_HOME=$(CUDA_HOME)); CUDA (.cu) targets were skipped"
endif

# PyTorch's CUDA build, pinned, in a virtual environment outside the clone so that every clone
# on the machine (CI's fresh one too) reuses it (tests/deps_torch.sh); the PyTorch tests run
# $(GPUMEM_TORCH_PY) and skip, saying why, where it could not be installed.
GPUMEM_TORCH_VERSION ?= 2.14.1
GPUMEM_TORCH_VENV ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpumem/torch-$(GPUMEM_TORCH_VERSION)
GPUMEM_TORCH_PY ?= $(GPUMEM_TORCH_VENV)/bin/python
export GPUMEM_TORCH_VERSION GPUMEM_TORCH_VENV GPUMEM_TORCH_PY

# `deps` installs what is missing. Every compile rule has the stamp as an order-only
# prerequisite, so a fresh machine installs its packages before the first compiler runs.
deps:
	@DEB_PACKAGES="$(DEB_PACKAGES)" $(SHELL) tests/deps.sh
	@DEB_PACKAGES="$(DEB_OPTIONAL)" DEB_OPTIONAL=1 $(SHELL) tests/deps.sh
	@$(SHELL) tests/deps_torch.sh
$(DEPS_STAMP):
	@DEB_PACKAGES="$(DEB_PACKAGES)" $(SHELL) tests/deps.sh
	@mkdir -p $(@D) && touch $@

# Under SAN=thread only the tests that exercise threads run (TSAN_* lists); they are the ones
# ThreadSanitizer has something to say about, and TSan slows everything else for nothing.
ifeq ($(SAN),thread)
RUN_UNIT := $(TSAN_UNIT_TESTS)
RUN_SCRIPTS := $(TSAN_SCRIPT_TESTS)
else
RUN_UNIT := $(UNIT_TESTS)
RUN_SCRIPTS := $(SCRIPT_TESTS)
endif
# test also installs the optional packages (chromium, chromedriver, selenium): a test that
# needs one skips only where it cannot be installed (not root), saying so.
test: deps all $(RUN_UNIT)
	@$(SHELL) tests/run.sh --build $(BUILD) --san "$(SAN)" \
	    --unit "$(RUN_UNIT)" --scripts "$(RUN_SCRIPTS)"

bench: all $(filter-out %.sh,$(BENCHES))
	@$(SHELL) tests/bench/run.sh $(BENCHES)

# The long fuzzing campaign (tests/fuzz/fuzz_common.bash): 10 M executions per target with a
# random seed, on every core (GPUMEM_FUZZ_JOBS processes, default nproc); make test runs the
# same targets briefly with a fixed seed.
FUZZ_SCRIPTS := $(filter tests/fuzz/%,$(SCRIPT_TESTS))
fuzz: all
	@if [ -n "$(SAN)" ]; then echo "make fuzz: the fuzzers carry their own sanitizers; run it without SAN=" >&2; exit 2; fi
	@for s in $(FUZZ_SCRIPTS); do echo "=== $$s"; GPUMEM_FUZZ=long GPUMEM_FUZZ_JOBS=$${GPUMEM_FUZZ_JOBS:-$$(nproc)} \
	    BUILD=$(BUILD) $(SHELL) $$s || exit 1; done

# The long fault campaign: 100 kills, 20 signals, 20 full disks, 5 fork storms; the streams
# stress test for two minutes a run.
soak: all
	@BUILD=$(BUILD) FAULT_KILLS=100 FAULT_SIGNALS=20 FAULT_DISKS=20 FAULT_STORMS=5 \
	    $(SHELL) tests/integration/fault_campaign.sh
	@BUILD=$(BUILD) STREAMS_STRESS_SECONDS=120 $(SHELL) tests/integration/preload_streams_stress.sh

demo: all
	@if [ -f tests/demo.sh ]; then $(SHELL) tests/demo.sh; \
	 else echo "make demo: not yet — the end-to-end demo lands with the demo issue"; fi

# bin/: the commands (gpumem, gpumem-replay); lib/gpumem/: libgpumem.so, the virtual GPU and
# the trainers; include/gpumem.h: the user API (gpumem_name, ...); lib/pkgconfig/gpumem.pc.
PREFIX ?= /usr/local
GPUMEM_VERSION := 0.1.0
INSTALL_MANIFEST := share/gpumem/install_manifest.txt
INSTALL_PATHS = $(addprefix bin/,$(notdir $(INSTALL_BIN))) $(addprefix lib/gpumem/,$(notdir $(INSTALL_LIB))) \
                $(addprefix share/gpumem/,$(notdir $(INSTALL_SHARE))) \
                $(addprefix include/,$(notdir $(INSTALL_INCLUDE))) lib/pkgconfig/gpumem.pc $(INSTALL_OTHER)
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/gpumem $(DESTDIR)$(PREFIX)/share/gpumem \
	    $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	$(if $(INSTALL_BIN),install -m 0755 $(INSTALL_BIN) $(DESTDIR)$(PREFIX)/bin/)
	$(if $(INSTALL_LIB),cp -a $(INSTALL_LIB) $(DESTDIR)$(PREFIX)/lib/gpumem/)
	$(if $(INSTALL_SHARE),install -m 0644 $(INSTALL_SHARE) $(DESTDIR)$(PREFIX)/share/gpumem/)
	$(if $(INSTALL_INCLUDE),install -m 0644 $(INSTALL_INCLUDE) $(DESTDIR)$(PREFIX)/include/)
	printf '%s\n' 'prefix=$(PREFIX)' 'includedir=$${prefix}/include' 'libdir=$${prefix}/lib/gpumem' '' \
	    'Name: gpumem' 'Description: GPU memory recorder and caching allocator: the user API (gpumem_name, gpumem_name_next) of libgpumem.so' \
	    'Version: $(GPUMEM_VERSION)' 'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -Wl,-rpath,$${libdir} -lgpumem' \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/gpumem.pc
	@# the manifest: every path written, relative to PREFIX, with what it holds (a file's
	@# sha256, a link's target), so that uninstall removes exactly these, and only unchanged
	cd '$(DESTDIR)$(PREFIX)' && for f in $(INSTALL_PATHS); do \
	    if [ -L "$$f" ]; then printf 'link %s %s\n' "$$f" "$$(readlink "$$f")"; \
	    elif [ -f "$$f" ]; then printf 'file %s %s\n' "$$f" "$$(sha256sum < "$$f" | cut -d' ' -f1)"; \
	    else echo "make install: $$f was not written" >&2; exit 1; fi; \
	done > $(INSTALL_MANIFEST).tmp && mv $(INSTALL_MANIFEST).tmp $(INSTALL_MANIFEST)

# Removes what the manifest of `make install` (same PREFIX and DESTDIR) lists: a file whose
# bytes are still those installed, a link still to the same target; a path changed since (an
# edited config, another package's file at the name) is kept and said, and uninstall then
# fails (the recipe's exit 1: make's own exit is 2, as README.md says). Then the manifest, and gpumem's own directories where they are left empty.
uninstall:
	@cd '$(DESTDIR)$(PREFIX)' 2> /dev/null && [ -f $(INSTALL_MANIFEST) ] || { \
	    echo "make uninstall: no $(DESTDIR)$(PREFIX)/$(INSTALL_MANIFEST): nothing was installed there by make install (give the PREFIX and DESTDIR it was given); nothing removed" >&2; exit 1; }; \
	cd '$(DESTDIR)$(PREFIX)' && kept=0 && \
	while read -r kind f what; do \
	    case "$$f" in ''|/*|*..*) echo "make uninstall: $(INSTALL_MANIFEST) names '$$f', not a path under the prefix: kept" >&2; kept=$$((kept + 1)); continue ;; esac; \
	    if [ "$$kind" = link ] && [ -L "$$f" ] && [ "$$(readlink "$$f")" = "$$what" ]; then rm -f "$$f"; \
	    elif [ "$$kind" = file ] && [ -f "$$f" ] && [ ! -L "$$f" ] && [ "$$(sha256sum < "$$f" | cut -d' ' -f1)" = "$$what" ]; then rm -f "$$f"; \
	    elif [ -e "$$f" ] || [ -L "$$f" ]; then echo "make uninstall: kept $$f: changed since make install wrote it (remove it by hand if it is no longer wanted)" >&2; kept=$$((kept + 1)); \
	    fi; \
	done < $(INSTALL_MANIFEST) && rm -f $(INSTALL_MANIFEST) && \
	for d in share/gpumem/python/gpumem share/gpumem/python share/gpumem/python-site share/gpumem lib/gpumem; do \
	    [ -d "$$d" ] && rmdir --ignore-fail-on-non-empty "$$d"; true; done; \
	if [ $$kept != 0 ]; then echo "make uninstall: $$kept path(s) kept (above); the rest removed" >&2; exit 1; fi

clean:
	rm -rf build
