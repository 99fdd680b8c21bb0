#!/usr/bin/env bash
# make install: the commands in bin/ (no generic trainer names there), libgpumem.so, the
# virtual GPU and the trainers in lib/gpumem/, the user API header in include/, and a
# pkg-config file that compiles and links a program against it. The installed tree works:
# gpumem record runs the installed trainer on the installed virtual GPU.
set -uo pipefail
BUILD=${BUILD:-build}
fail() { echo "FAIL: $*" >&2; exit 1; }
# what is installed is the plain build; a sanitizer build's library needs its runtime preloaded
[[ -n ${SAN:-} ]] && { echo "skipped: make install is checked on the plain build" >&2; exit 77; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/install-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
P=$TMP/prefix
make -s install PREFIX="$P" SAN="${SAN:-}" > "$TMP/log" 2>&1 || { tail -20 "$TMP/log"; fail "make install failed"; }
for f in bin/gpumem bin/gpumem-replay include/gpumem.h lib/pkgconfig/gpumem.pc lib/gpumem/libgpumem.so \
         lib/gpumem/libcuda.so.1 lib/gpumem/libcudart.so.13 lib/gpumem/train_gpt2_sim share/gpumem/schema.sql \
         lib/gpumem/libcublas.so.13 lib/gpumem/libcublasLt.so.13 lib/gpumem/libnvidia-ml.so.1 \
         share/gpumem/python/gpumem/_torch.py share/gpumem/python-site/sitecustomize.py; do
  [[ -e $P/$f ]] || fail "$f was not installed"
done
for f in "$P"/bin/*; do
  case $(basename "$f") in gpumem|gpumem-*) ;; *) fail "bin/ has a generic name: $(basename "$f")" ;; esac
done
command -v pkg-config > /dev/null || { echo "skipped: pkg-config not installed" >&2; exit 77; }
flags=$(PKG_CONFIG_PATH=$P/lib/pkgconfig pkg-config --cflags --libs gpumem) || fail "pkg-config does not know gpumem"
cat > "$TMP/use.c" <<'C'
#include <gpumem.h>
#include <stdio.h>
/* linked against libgpumem.so: naming the next allocation is accepted, and a pointer gpumem
 * never handed out is refused */
int main(void) {
    int a = gpumem_name_next("first"), b = gpumem_name((void *)16, "nothing");
    printf("%d %d\n", a, b);
    return 0;
}
C
gcc -o "$TMP/use" "$TMP/use.c" $flags || fail "a program does not build with pkg-config --cflags --libs gpumem"
# on the installed virtual GPU (a driver is needed for gpumem to be on), recording nothing
out=$(GPUMEM_DB=none LD_LIBRARY_PATH=$P/lib/gpumem "$TMP/use") || fail "the program linked against libgpumem.so does not run"
[[ $out == "0 -1" ]] || fail "gpumem_name_next / gpumem_name answered '$out', expected '0 -1'"
GPUMEM_QUIET=1 "$P/bin/gpumem" record -q -o "$TMP/t.db" -- "$P/lib/gpumem/train_gpt2_sim" --steps 1 > "$TMP/t.out" 2>&1 \
    || { cat "$TMP/t.out"; fail "the installed gpumem does not record the installed trainer"; }
"$P/bin/gpumem" report "$TMP/t.db" > /dev/null || fail "the installed gpumem cannot report"
echo "ok: installed bin/, lib/gpumem/, include/gpumem.h, lib/pkgconfig/gpumem.pc; pkg-config builds a user of the API"
