# snapshot/: the recorder (librec.a, linked into libgpumem.so) and the gpumem command.
# Outputs under $(BUILD)/snapshot/ and $(BUILD)/gpumem.

SNAP_DIR := $(BUILD)/snapshot
REC_LIB := $(SNAP_DIR)/librec.a
# librec.a reads gpumem's settings with alloc's parser (record/rec_settings.c): what links it
# links alloc's archive after it
REC_ALLOC_LIB := $(BUILD)/alloc/libgpumem_alloc.a
REC_OBJS := $(SNAP_DIR)/record/rec.o $(SNAP_DIR)/record/rec_state.o $(SNAP_DIR)/record/rec_path.o $(SNAP_DIR)/record/rec_settings.o $(SNAP_DIR)/record/rec_ring.o $(SNAP_DIR)/record/rec_writer.o $(SNAP_DIR)/rec_schema.o \
            $(SNAP_DIR)/record/addr_index.o $(SNAP_DIR)/record/rec_rows.o $(SNAP_DIR)/record/rec_unwind.o
# What a program linking librec.a needs (libgpumem.so: add these to its link line).
REC_LDLIBS := -lsqlite3 -lunwind -lpthread

# schema.sql is the single source of the schema: embedded as a C string at build time.
$(SNAP_DIR)/rec_schema.c: snapshot/record/schema.sql snapshot/module.mk | $(DEPS_STAMP)
	@mkdir -p $(@D)
	awk 'BEGIN { print "/* generated from snapshot/record/schema.sql: do not edit */"; \
	             print "const char rec_schema_sql[];"; print "const char rec_schema_sql[] =" } \
	     { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); print "  \"" $$0 "\\n\"" } \
	     END { print "  ;" }' $< > $@.tmp && mv $@.tmp $@
$(SNAP_DIR)/rec_schema.o: $(SNAP_DIR)/rec_schema.c | $(DEPS_STAMP)
	$(CC) $(CFLAGS_COMMON) -c $< -o $@

$(REC_LIB): $(REC_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

ALL_TARGETS += $(REC_LIB)

# The gpumem command: reads databases (gm_*.c), symbolizes with libdw.
GM_OBJS := $(SNAP_DIR)/read/gm_db.o $(SNAP_DIR)/read/gm_fmt.o $(SNAP_DIR)/read/gm_args.o $(SNAP_DIR)/analyze/gm_devused_print.o $(SNAP_DIR)/read/gm_analyze.o $(SNAP_DIR)/read/gm_analyze_pages.o $(SNAP_DIR)/read/gm_sym.o $(SNAP_DIR)/read/gm_sql_temp.o $(SNAP_DIR)/analyze/gm_report.o \
           $(SNAP_DIR)/analyze/gm_category.o $(SNAP_DIR)/analyze/gm_category_print.o \
           $(SNAP_DIR)/formats/gm_export.o $(SNAP_DIR)/read/gm_devused.o \
           $(SNAP_DIR)/analyze/gm_uses.o $(SNAP_DIR)/analyze/gm_uses_cmd.o $(SNAP_DIR)/analyze/gm_compiled.o $(SNAP_DIR)/read/gm_demangle.o \
           $(SNAP_DIR)/record/rec_path.o $(SNAP_DIR)/record/rec_settings.o $(SNAP_DIR)/read/gm_open.o $(SNAP_DIR)/read/gm_owners.o $(SNAP_DIR)/formats/gm_out.o $(SNAP_DIR)/read/gm_sig.o
# libiberty: kernel names are demangled with binutils' own demangler (reading side only).
GM_LDLIBS := -lsqlite3 -ldw -lelf -ldl -liberty
# `gpumem advise` replays transformed traces through alloc/'s allocator (libgpumem_alloc.a).
GM_ADVISE_OBJS := $(SNAP_DIR)/analyze/gm_advise.o $(SNAP_DIR)/analyze/gm_advise_cmd.o $(SNAP_DIR)/analyze/gm_advise_autocast.o $(SNAP_DIR)/analyze/gm_advise_shard.o $(SNAP_DIR)/analyze/gm_advise_zero3.o $(SNAP_DIR)/analyze/gm_advise_fsdp.o $(SNAP_DIR)/analyze/gm_ranks.o \
                  $(SNAP_DIR)/analyze/gm_frag.o $(SNAP_DIR)/analyze/gm_tstate.o $(SNAP_DIR)/analyze/gm_replay.o $(SNAP_DIR)/analyze/gm_frag_cmd.o $(SNAP_DIR)/analyze/gm_tune.o \
                  $(SNAP_DIR)/analyze/gm_tune_cmd.o $(SNAP_DIR)/analyze/gm_rerun.o
# export to other tools' formats, import of PyTorch snapshots (the pickle reader/writer), diff
GM_IO_OBJS := $(SNAP_DIR)/formats/gm_export_fmt.o $(SNAP_DIR)/formats/gm_export_torch.o $(SNAP_DIR)/formats/gm_flame.o $(SNAP_DIR)/formats/gm_torch.o $(SNAP_DIR)/formats/gm_pickle.o $(SNAP_DIR)/formats/gm_import.o \
              $(SNAP_DIR)/analyze/gm_diff.o $(SNAP_DIR)/rec_schema.o
$(BUILD)/gpumem: $(SNAP_DIR)/gpumem.o $(SNAP_DIR)/torch_record.o $(GM_OBJS) $(GM_ADVISE_OBJS) $(GM_IO_OBJS) $(ALLOC_LIB) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ $(GM_LDLIBS) -lpthread -lm

ALL_TARGETS += $(BUILD)/gpumem
INSTALL_BIN += $(BUILD)/gpumem

# ---- tests
SNAP_TEST_LDLIBS := $(REC_LDLIBS) -lsqlite3 -ldw -lelf -ldl -liberty
snapshot_ring_LIBS := $(SNAP_DIR)/record/rec_ring.o
snapshot_ring_LDLIBS := -lpthread
snapshot_index_LIBS := $(SNAP_DIR)/record/addr_index.o
snapshot_rec_LIBS := $(REC_LIB) $(REC_ALLOC_LIB)
snapshot_uses_LIBS := $(REC_LIB) $(REC_ALLOC_LIB)
snapshot_uses_LDLIBS := $(SNAP_TEST_LDLIBS)
snapshot_rec_LDLIBS := $(SNAP_TEST_LDLIBS)
snapshot_files_LIBS := $(REC_LIB) $(REC_ALLOC_LIB)
snapshot_files_LDLIBS := $(SNAP_TEST_LDLIBS)
snapshot_stacks_LIBS := $(GM_OBJS) $(REC_LIB) $(REC_ALLOC_LIB)
snapshot_stacks_LDLIBS := $(SNAP_TEST_LDLIBS)
snapshot_reader_LIBS := $(GM_OBJS) $(REC_LIB) $(REC_ALLOC_LIB)
snapshot_reader_LDLIBS := $(SNAP_TEST_LDLIBS)
snapshot_categories_LIBS := $(GM_OBJS) $(REC_LIB) $(REC_ALLOC_LIB)
snapshot_categories_LDLIBS := $(SNAP_TEST_LDLIBS)
# (gm_advise.o: advise's and tune's model reads the events through the page reader too)
snapshot_pages_LIBS := $(GM_OBJS) $(SNAP_DIR)/analyze/gm_advise.o $(SNAP_DIR)/analyze/gm_advise_autocast.o $(SNAP_DIR)/analyze/gm_rerun.o $(REC_LIB) $(ALLOC_LIB)
snapshot_pages_LDLIBS := $(SNAP_TEST_LDLIBS) -lm
# (adv_reduce_staging: gm_advise_autocast.o alone needs gm_advise.o's edit list)
snapshot_advise_torch_LIBS := $(GM_OBJS) $(SNAP_DIR)/analyze/gm_advise.o $(SNAP_DIR)/analyze/gm_advise_autocast.o $(SNAP_DIR)/analyze/gm_rerun.o $(REC_LIB) $(ALLOC_LIB)
snapshot_advise_torch_LDLIBS := $(SNAP_TEST_LDLIBS) -lm
snapshot_tblocks_LIBS := $(SNAP_DIR)/formats/gm_torch.o $(SNAP_DIR)/formats/gm_pickle.o $(SNAP_DIR)/formats/gm_out.o $(SNAP_DIR)/read/gm_sig.o \
                        $(SNAP_DIR)/record/rec_path.o
snapshot_tblocks_LDLIBS := -lsqlite3
# (gm_fmt.o: gm_sort)
snapshot_tstate_LIBS := $(SNAP_DIR)/analyze/gm_tstate.o $(SNAP_DIR)/read/gm_fmt.o
snapshot_tstate_LDLIBS := -lsqlite3 -lm
# tables that intern by contents, with their hashes narrowed so that every key collides: the
# recorder's rec.c built again with the test hook (u64map.h: GM_TEST_HASH_BITS)
$(BUILD)/tests/unit/collide/rec.o: snapshot/record/rec.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_COMMON) -DGM_TEST_HASH_BITS=1 -MMD -MP -c $< -o $@
# and the reading side's tables built again with 2-bit hashes (bytemap.h's): collide/<source>.o
$(BUILD)/tests/unit/collide/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_COMMON) $(EXTRA_CFLAGS) -DGM_TEST_HASH_BITS=2 -MMD -MP -c $< -o $@
COLLIDE_READ := snapshot/analyze/gm_advise snapshot/analyze/gm_category
COLLIDE_VIZ := viz/viz_category viz/viz_timeline viz/viz_flame
COLLIDE_REC := snapshot/record/rec_writer
# PyTorch's trace entries (preload/torch_trace.c) as libgpumem.so builds them, its Python frames
# from the test's stand-in
$(BUILD)/tests/unit/collide/preload/torch_trace.o: EXTRA_CFLAGS += -DGM_HAVE_REC
snapshot_collide_LIBS := $(BUILD)/tests/unit/collide/rec.o $(COLLIDE_READ:%=$(BUILD)/tests/unit/collide/%.o) $(COLLIDE_VIZ:%=$(BUILD)/tests/unit/collide/%.o) \
                         $(COLLIDE_REC:%=$(BUILD)/tests/unit/collide/%.o) $(BUILD)/tests/unit/collide/preload/torch_trace.o \
                         $(filter-out $(COLLIDE_READ:%=$(BUILD)/%.o) $(REC_OBJS),$(GM_OBJS)) $(SNAP_DIR)/analyze/gm_advise_autocast.o \
                         $(SNAP_DIR)/formats/gm_export_fmt.o $(BUILD)/viz/viz_tensors.o $(BUILD)/viz/viz_bands.o $(SNAP_DIR)/analyze/gm_rerun.o $(filter-out $(SNAP_DIR)/record/rec.o $(COLLIDE_REC:%=$(BUILD)/%.o),$(REC_OBJS)) $(ALLOC_LIB)
snapshot_collide_LDLIBS := $(SNAP_TEST_LDLIBS) -lm
SNAP_UNIT := snapshot_collide snapshot_tblocks snapshot_tstate snapshot_ring snapshot_index snapshot_addr_map snapshot_rec snapshot_uses snapshot_files snapshot_stacks snapshot_reader \
             snapshot_pages snapshot_advise_torch snapshot_categories
UNIT_TESTS += $(addprefix $(BUILD)/tests/unit/,$(SNAP_UNIT))
TSAN_UNIT_TESTS += $(BUILD)/tests/unit/snapshot_ring $(BUILD)/tests/unit/snapshot_rec \
                   $(BUILD)/tests/unit/snapshot_uses

# Test program driving the recorder directly (no CUDA), for the integration scripts.
$(BUILD)/tests/integration/snapshot_app: $(BUILD)/tests/integration/snapshot_app.o $(REC_LIB) $(REC_ALLOC_LIB) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(REC_LIB) $(REC_ALLOC_LIB) $(REC_LDLIBS)
ALL_TARGETS += $(BUILD)/tests/integration/snapshot_app
SCRIPT_TESTS += tests/integration/devices_cmds.sh tests/integration/devices_pages.sh
SCRIPT_TESTS += tests/integration/snapshot_leaks.sh tests/integration/snapshot_kill.sh \
                tests/integration/snapshot_fork.sh tests/integration/snapshot_record.sh \
                tests/integration/snapshot_cli.sh tests/integration/snapshot_export.sh \
                tests/integration/snapshot_safety.sh tests/integration/snapshot_diskfull.sh \
                tests/integration/snapshot_signals.sh tests/integration/snapshot_signal_locks.sh tests/integration/output_rule.sh tests/unit/snapshot_layers.sh tests/unit/test_scripts_lint.sh \
                tests/integration/snapshot_uses.sh tests/integration/snapshot_uses_report.sh \
                tests/integration/snapshot_uses_unread.sh \
                tests/integration/snapshot_devused.sh tests/integration/snapshot_devused_rules.sh \
                tests/integration/e2e_advise.sh tests/integration/snapshot_reuse.sh \
                tests/integration/snapshot_lossy.sh tests/integration/advise_any.sh \
                tests/integration/advise_names.sh tests/integration/snapshot_flag_kinds.sh

# `gpumem frag`: the trainer under PyTorch's policy, and an OOM caused by fragmentation
# (tests/apps/frag_app.c, linked with the virtual GPU's runtime like preload's test programs).
$(BUILD)/tests/apps/frag_app: tests/apps/frag_app.c $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_COMMON) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_RPATH) -ldl -lpthread
ALL_TARGETS += $(BUILD)/tests/apps/frag_app
# categories from lifetimes alone: a planted training loop without names or ranges
# (tests/apps/cat_app.c), and the trainer recorded with its names and NVTX ranges off (issue 39)
$(BUILD)/tests/apps/cat_app: tests/apps/cat_app.c $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_COMMON) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_RPATH) -ldl -lpthread
ALL_TARGETS += $(BUILD)/tests/apps/cat_app
# a loop that is no training loop (no backward, no gradient), with and without NVTX steps, for
# what advise offers it (tests/apps/churn_app.c)
$(BUILD)/tests/apps/churn_app: tests/apps/churn_app.c $(SIM_RUNTIME) $(SIM_DRIVER) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_COMMON) $(LDFLAGS_COMMON) -o $@ $< $(SIM_RUNTIME) $(SIM_RPATH) -ldl -lpthread
ALL_TARGETS += $(BUILD)/tests/apps/churn_app
SCRIPT_TESTS += tests/integration/categories_app.sh tests/integration/categories_trainer.sh \
                tests/integration/advise_unannotated.sh
# the steps inferred from periodicity: a loop followed by an evaluation, a loop with no backward
SCRIPT_TESTS += tests/integration/steps_inferred.sh
SCRIPT_TESTS += tests/integration/snapshot_frag.sh tests/integration/snapshot_tune.sh tests/integration/replay_settle.sh tests/integration/replay_threads.sh tests/integration/advise_forget.sh tests/integration/snapshot_kinds.sh \
                tests/integration/snapshot_passthru.sh tests/integration/snapshot_pools.sh
# every --check re-run (tune, frag, advise, advise --ranks, PyTorch's) made to fail: its reason quoted
SCRIPT_TESTS += tests/integration/snapshot_rerun.sh
# export to other tools' formats, import of PyTorch snapshots, diff (#14)
SCRIPT_TESTS += tests/integration/export_formats.sh tests/integration/export_peak.sh tests/integration/import_roundtrip.sh \
                tests/integration/import_hostile.sh tests/integration/diff_gate.sh

# libFuzzer target over database files (clang; built only where clang is installed).
SNAP_FUZZ := $(BUILD)/tests/fuzz/snapshot_fuzz_db
SNAP_FUZZ_SRCS := tests/fuzz/snapshot_fuzz_db.c snapshot/read/gm_db.c snapshot/read/gm_analyze.c snapshot/read/gm_analyze_pages.c \
                  snapshot/analyze/gm_report.c snapshot/analyze/gm_category.c snapshot/analyze/gm_category_print.c snapshot/read/gm_sym.c snapshot/formats/gm_export.c \
                  snapshot/analyze/gm_uses.c snapshot/analyze/gm_compiled.c snapshot/read/gm_demangle.c snapshot/read/gm_devused.c snapshot/read/gm_fmt.c snapshot/analyze/gm_devused_print.c snapshot/formats/gm_out.c snapshot/read/gm_sig.c snapshot/read/gm_owners.c snapshot/record/rec_path.c
ifneq ($(shell command -v $(CLANG) 2>/dev/null),)
FUZZ_CFLAGS_SNAP := -std=gnu17 -O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE -I$(TOP)
$(eval $(call fuzz_target,snapshot_fuzz_db,$(SNAP_FUZZ_SRCS),$(FUZZ_CFLAGS_SNAP),-lsqlite3 -ldw -lelf -liberty))
ALL_TARGETS += $(SNAP_FUZZ)
# NVTX strings from the program's NVTX calls (the toolkit's NVTX3 headers, gpumem's handlers in
# preload/nvtx.c as a statically injected tool) through the recorder and the reader, all built
# from source with the sanitizers
NVTX_FUZZ := $(BUILD)/tests/fuzz/nvtx_fuzz
NVTX_FUZZ_SRCS := tests/fuzz/nvtx_fuzz.c tests/fuzz/nvtx_fuzz_tool.c preload/nvtx.c snapshot/record/rec.c snapshot/record/rec_settings.c alloc/config.c snapshot/record/rec_state.c snapshot/record/rec_path.c snapshot/record/rec_ring.c \
                  snapshot/record/rec_writer.c snapshot/record/addr_index.c snapshot/record/rec_rows.c snapshot/record/rec_unwind.c $(SNAP_DIR)/rec_schema.c \
                  snapshot/formats/gm_export_fmt.c snapshot/formats/gm_pickle.c \
                  $(filter-out tests/fuzz/snapshot_fuzz_db.c snapshot/record/rec_path.c,$(SNAP_FUZZ_SRCS))
$(eval $(call fuzz_target,nvtx_fuzz,$(NVTX_FUZZ_SRCS),$(FUZZ_CFLAGS_SNAP) -DGM_HAVE_REC -isystem $(CUDA_INC),-lsqlite3 -lunwind -ldw -lelf -liberty -ldl -lpthread))
ALL_TARGETS += $(NVTX_FUZZ)
# `gpumem import`: the pickle reader and the snapshot's conversion (gm_pickle.c, gm_import.c)
PICKLE_FUZZ := $(BUILD)/tests/fuzz/pickle_fuzz
PICKLE_FUZZ_SRCS := tests/fuzz/pickle_fuzz.c snapshot/formats/gm_pickle.c snapshot/formats/gm_import.c snapshot/formats/gm_out.c snapshot/read/gm_sig.c snapshot/record/rec_path.c \
                    snapshot/formats/gm_torch.c snapshot/read/gm_fmt.c snapshot/read/gm_args.c alloc/config.c $(SNAP_DIR)/rec_schema.c
$(eval $(call fuzz_target,pickle_fuzz,$(PICKLE_FUZZ_SRCS),$(FUZZ_CFLAGS_SNAP),-lsqlite3 -lm))
ALL_TARGETS += $(PICKLE_FUZZ)
endif
SCRIPT_TESTS += tests/fuzz/snapshot_fuzz.sh tests/fuzz/nvtx_fuzz.sh tests/fuzz/pickle_fuzz.sh

# Benchmarks (make bench).
$(BUILD)/tests/bench/rec_bench: $(BUILD)/tests/bench/rec_bench.o $(REC_LIB) $(REC_ALLOC_LIB) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(REC_LIB) $(REC_ALLOC_LIB) $(REC_LDLIBS)
ALL_TARGETS += $(BUILD)/tests/bench/rec_bench
BENCHES += tests/bench/rec_bench.sh tests/bench/rec_instr.sh tests/bench/report_10m.sh tests/bench/advise_bench.sh \
           tests/bench/frag_tune_bench.sh tests/bench/rec_xl_bench.sh tests/bench/advise_zero3_bench.sh \
           tests/bench/report_devices.sh
INSTALL_SHARE += snapshot/record/schema.sql
# tune, advise and frag replay on every core (threads): their threads' test, small enough for
# ThreadSanitizer (snapshot_tune.sh's 124M recording and --check re-run took 110 s of it)
SCRIPT_TESTS += tests/integration/analyses_threads.sh
TSAN_SCRIPT_TESTS += tests/integration/analyses_threads.sh
# several ranks (#17): meta.rank from the launcher, advise --ranks (ZeRO), report of several ranks
SCRIPT_TESTS += tests/integration/advise_shard.sh tests/integration/advise_zero3.sh
SCRIPT_TESTS += tests/integration/ranks_report.sh tests/integration/ranks_mpi.sh
# checks on sources and objects (include rules, call graph) and on the test scripts
NOSAN_SCRIPT_TESTS += tests/unit/snapshot_layers.sh tests/unit/test_scripts_lint.sh
