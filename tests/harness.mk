# Shared compile rules. Modules name their objects $(BUILD)/<folder>/<file>.o and get:
#   - the common flags (warnings are errors) and -MMD header dependencies,
#   - the dependency stamp as an order-only prerequisite (packages are installed first).
# Per-target extra flags: `$(BUILD)/foo/%.o: EXTRA_CFLAGS += ...` in the module fragment.

$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_COMMON) $(EXTRA_CFLAGS) -MMD -MP -c $< -o $@

# A cmocka unit test $(BUILD)/tests/unit/<name> is built from tests/unit/<name>.c, linked with
# what the module fragment puts in <name>_LIBS (objects, archives: also prerequisites) and
# <name>_LDLIBS (-l flags).
# Objects of test programs are not throw-away intermediates: keep them so rebuilds are cheap.
.SECONDARY:
.SECONDEXPANSION:
$(BUILD)/tests/unit/%: $(BUILD)/tests/unit/%.o $$($$*_LIBS) | $(DEPS_STAMP)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $($*_LIBS) -lcmocka $($*_LDLIBS)

# A libFuzzer target (tests/fuzz/README.md): $(eval $(call fuzz_target,NAME,SOURCES,CFLAGS,LDLIBS,
# EXTRA_OBJECTS,FIRST)) builds $(BUILD)/tests/fuzz/NAME from one object per source, under
# $(BUILD)/tests/fuzz/NAME.objs/ (compiled with CFLAGS, coverage, ASan and UBSan, -MMD), linked
# with libFuzzer's main. One object per source: a change recompiles one file, the two cores
# share the work, and ccache keeps each object (it cannot keep a compile-and-link of many
# sources). FIRST: what the objects need made before them (generated headers).
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined
define fuzz_target
$(BUILD)/tests/fuzz/$(1): $(addprefix $(BUILD)/tests/fuzz/$(1).objs/,$(patsubst %.c,%.o,$(2))) $(5) | $(DEPS_STAMP)
	$$(CLANG) -fsanitize=fuzzer $(FUZZ_SAN) -o $$@ $$^ $(4)
$(BUILD)/tests/fuzz/$(1).objs/%.o: %.c $(6) | $(DEPS_STAMP)
	@mkdir -p $$(@D)
	$$(CLANG) $(3) -fsanitize=fuzzer-no-link $(FUZZ_SAN) -MMD -MP -c $$< -o $$@
endef

-include $(shell find $(BUILD) -path '$(BUILD)/san-*' -prune -o -name '*.d' -print 2>/dev/null)
