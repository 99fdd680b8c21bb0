#!/usr/bin/env bash
# Installs the Debian packages gpumem needs (list in $DEB_PACKAGES, set by the Makefile).
# Root: apt-get update once (when the package lists are missing or a package is unknown),
# then apt-get install. Not root: prints the exact command to run and fails.
# DEB_OPTIONAL=1 (the Makefile's optional list, e.g. chromium): the same, but a package
# that cannot be installed is named on stderr and the build goes on (its tests skip).
set -euo pipefail
pkgs=${DEB_PACKAGES:?DEB_PACKAGES is set by the Makefile; run "make deps"}
missing=()
for p in $pkgs; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ $st == "install ok installed" ]] && continue
  missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "gpumem: missing packages: ${missing[*]}; this is not a Debian-like system, install them by hand" >&2
  exit 1
fi
optional=${DEB_OPTIONAL:-0}
if [[ $(id -u) -ne 0 ]]; then
  if [[ $optional == 1 ]]; then
    echo "gpumem: optional Debian packages not installed: ${missing[*]} (the tests that need them skip);" \
         "to install them, as root: apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 0
  fi
  echo "gpumem: missing Debian packages: ${missing[*]}" >&2
  echo "gpumem: run as root:  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "gpumem: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
install_missing() {
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
}
if [[ $optional == 1 ]]; then
  # One at a time: an optional package that cannot be installed must not keep the others out.
  all=("${missing[@]}")
  for p in "${all[@]}"; do
    missing=("$p")
    install_missing 2>/dev/null || echo "gpumem: could not install the optional package $p" \
                                         "(the tests that need it skip)" >&2
  done
  exit 0
fi
install_missing
