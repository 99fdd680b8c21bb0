# Sourced by the browser halves of tests/integration/viz_page.sh and viz_ranks.sh: Debian's
# chromium and chromedriver must be there, and a Python that imports selenium (Debian's
# python3-selenium installs into /usr/bin/python3, which may not be the python3 first on PATH);
# sets VIZ_PY to that Python. One missing: exits 77 with a one-line reason (make deps installs
# chromium, chromium-driver and python3-selenium, as root). GPUMEM_VIZ_PYTHON: a Python to try first.
for f in /usr/bin/chromium /usr/bin/chromedriver; do
  [[ -x $f ]] || { echo "skipped: $f is missing (make deps installs chromium and chromium-driver)" >&2; exit 77; }
done
VIZ_PY=
for py in ${GPUMEM_VIZ_PYTHON:-} /usr/bin/python3 "$(command -v python3 || true)"; do
  [[ -n $py && -x $py ]] && "$py" -c 'import selenium' 2> /dev/null && { VIZ_PY=$py; break; }
done
[[ -n $VIZ_PY ]] || { echo "skipped: no Python imports selenium (make deps installs python3-selenium)" >&2; exit 77; }
