#!/usr/bin/env bash
# `make bench`: runs each benchmark command given as an argument (a script or binary path).
# Each prints `BENCH <name> <value> <unit>` lines (see DESIGN.md); this driver passes them
# through and fails if a benchmark fails.
set -uo pipefail
rc=0
for b in "$@"; do
  echo "# $b" >&2
  if [[ $b == *.sh ]]; then bash "$b" || rc=1; else "$b" || rc=1; fi
done
exit $rc
