#!/usr/bin/env bash
# Optional: playwright-core (npm) for the browser test of `gpumem viz`, into viz/node_modules.
# Without npm, or offline, the browser test skips (exit 77) with a message saying so.
set -uo pipefail
cd "$(dirname "$0")"
[[ -d node_modules/playwright-core ]] && exit 0
command -v npm >/dev/null || { echo "gpumem: npm missing; the viz browser test will skip" >&2; exit 0; }
npm install --no-audit --no-fund --silent >/dev/null 2>&1 \
  || echo "gpumem: could not install playwright-core (npm); the viz browser test will skip" >&2
exit 0
