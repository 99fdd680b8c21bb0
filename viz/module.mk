# viz/: gpumem viz (the self-contained HTML page). Linked into $(BUILD)/gpumem.
VIZ_DIR := $(BUILD)/viz
# page.html is embedded as a C string at build time (as snapshot/ embeds schema.sql).
$(VIZ_DIR)/viz_page.c: viz/page.html viz/module.mk | $(DEPS_STAMP)
	@mkdir -p $(@D)
	awk 'BEGIN { print "/* generated from viz/page.html: do not edit */"; \
	             print "extern const char viz_page_html[];"; print "const char viz_page_html[] =" } \
	     { gsub(/\\/, "&&"); gsub(/"/, "\\\""); print "  \"" $$0 "\\n\"" } \
	     END { print "  ;" }' $< > $@.tmp && mv $@.tmp $@
$(VIZ_DIR)/viz_page.o: $(VIZ_DIR)/viz_page.c | $(DEPS_STAMP)
	$(CC) $(CFLAGS_COMMON) -c $< -o $@
VIZ_OBJS := $(VIZ_DIR)/gm_viz.o $(VIZ_DIR)/viz_timeline.o $(VIZ_DIR)/viz_flame.o \
            $(VIZ_DIR)/viz_category.o $(VIZ_DIR)/viz_tensors.o $(VIZ_DIR)/viz_bands.o $(VIZ_DIR)/viz_page.o
SCRIPT_TESTS += tests/integration/viz_page.sh tests/integration/viz_ranks.sh
# The gpumem command's link rule (snapshot/module.mk) links every prerequisite ($^).
$(BUILD)/gpumem: $(VIZ_OBJS)
BENCHES += tests/bench/viz_bench.sh
