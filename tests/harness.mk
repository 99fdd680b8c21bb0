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

-include $(shell find $(BUILD) -path '$(BUILD)/san-*' -prune -o -name '*.d' -print 2>/dev/null)
