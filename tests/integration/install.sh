#!/usr/bin/env bash
# make install: the commands in bin/ (no generic trainer names there), libgpumem.so, the
# virtual GPU and the trainers in lib/gpumem/, the user API header in include/, and a
# pkg-config file that compiles and links a program against it. The installed tree works:
# gpumem record runs the installed trainer on the installed virtual GPU.
# The manifest (share/gpumem/install_manifest.txt) lists every path install wrote, and nothing
# else; make uninstall removes exactly those (PREFIX, and DESTDIR as install had it): a file
# changed since install is kept and said (the recipe fails: make exits 2, as README.md says), a
# file install did not write is never touched, and with no manifest nothing is removed (exit 2).
set -uo pipefail
source "$(dirname "$0")/../pipe.bash" # grepq
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

# the manifest: every file and link under the prefix that install wrote, and only those
M=share/gpumem/install_manifest.txt
# listed ROOT: the files and links under ROOT, relative, sorted
listed() { (cd "$1" && find . \( -type f -o -type l \) | sed 's|^\./||' | sort); }
uninstall() { make -s uninstall "$@" SAN="${SAN:-}" > "$TMP/un.log" 2>&1; }
P2=$TMP/prefix2
make -s install PREFIX="$P2" SAN="${SAN:-}" > "$TMP/log" 2>&1 || { tail -20 "$TMP/log"; fail "make install failed"; }
diff <({ awk '{ print $2 }' "$P2/$M"; echo "$M"; } | sort) <(listed "$P2") | sed 's/^/  /' > "$TMP/d" \
  || { cat "$TMP/d"; fail "the manifest is not what install wrote (< listed only, > written only)"; }
[[ $(wc -l < "$P2/$M") -ge 18 ]] || fail "the manifest lists $(wc -l < "$P2/$M") paths"
# rows: what is there beside the install before uninstall | what must be left after | exit
mkdir -p "$P2/bin" "$P2/lib/gpumem" "$P2/share/gpumem"
echo mine > "$P2/bin/other-tool"                     # another package's, in a shared directory
echo mine > "$P2/lib/gpumem/notes.txt"               # the user's, in gpumem's own directory
echo "-- edited" >> "$P2/share/gpumem/schema.sql"    # changed since install
rm "$P2/lib/gpumem/libcuda.so" && ln -s /elsewhere "$P2/lib/gpumem/libcuda.so" # a link changed
rc=0; uninstall PREFIX="$P2" || rc=$?
[[ $rc == 2 ]] || fail "uninstall with a changed file exits $rc (want make's 2 of a failed recipe, as README.md says)"
grepq -F "kept share/gpumem/schema.sql" < "$TMP/un.log" || fail "uninstall does not say it kept the edited file: $(cat "$TMP/un.log")"
grepq -F "kept lib/gpumem/libcuda.so" < "$TMP/un.log" || fail "uninstall does not say it kept the changed link: $(cat "$TMP/un.log")"
want=$'bin/other-tool\nlib/gpumem/libcuda.so\nlib/gpumem/notes.txt\nshare/gpumem/schema.sql'
got=$(listed "$P2")
[[ $got == "$want" ]] || fail "after uninstall, left: $(echo $got); want: $(echo $want)"
echo "ok: uninstall removed what install wrote, kept the changed file and link (said, exit 2) and what it did not write"
# DESTDIR as install had it; everything goes, and gpumem's own directories with it
D=$TMP/dest
make -s install DESTDIR="$D" PREFIX=/opt/gm SAN="${SAN:-}" > "$TMP/log" 2>&1 || { tail -20 "$TMP/log"; fail "make install DESTDIR failed"; }
rc=0; uninstall PREFIX=/opt/gm || rc=$?
[[ $rc == 2 ]] || fail "uninstall without the DESTDIR of install exits $rc (want 2): $(cat "$TMP/un.log")"
grepq -F "nothing removed" < "$TMP/un.log" || fail "uninstall without a manifest does not say nothing was removed"
[[ -f $D/opt/gm/$M ]] || fail "uninstall without the DESTDIR removed the manifest"
uninstall DESTDIR="$D" PREFIX=/opt/gm || fail "uninstall DESTDIR: $(cat "$TMP/un.log")"
[[ -z $(listed "$D") ]] || fail "after uninstall DESTDIR, left: $(listed "$D" | head -5)"
[[ ! -e $D/opt/gm/lib/gpumem && ! -e $D/opt/gm/share/gpumem ]] || fail "gpumem's own empty directories were left"
echo "ok: make uninstall DESTDIR=... removed every path of the manifest and gpumem's directories"
