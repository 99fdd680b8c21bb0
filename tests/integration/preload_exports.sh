#!/usr/bin/env bash
# Property: libgpumem.so exports exactly the documented names (preload/exports.txt, which
# preload/README.md points to) — no internal symbol, no allocator or jemalloc name leaks out.
source "$(dirname "${BASH_SOURCE[0]}")/../pipe.bash" # grepq
source tests/integration/preload_common.bash
need "$LIB"
grep -v '^#' preload/exports.txt | grep -v '^$' | sort >"$TMP/documented"
nm -D --defined-only "$LIB" | awk '{print $3}' | sed 's/@.*//' | grep -v '^$' | sort >"$TMP/exported"
if cmp -s "$TMP/documented" "$TMP/exported"; then pass "exports match preload/exports.txt ($(wc -l <"$TMP/exported") names)"
else fail "exported symbols differ from preload/exports.txt"; diff "$TMP/documented" "$TMP/exported"; fi
grep -q 'exports.txt' preload/README.md && pass "README points to exports.txt" || fail "preload/README.md does not document the export list"
# jemalloc's malloc must not replace the program's
if nm -D --defined-only "$LIB" | grepq -Ew 'malloc|free|calloc|realloc|mallocx'; then fail "an allocator symbol is exported"
else pass "no malloc-family symbol exported"; fi
finish
