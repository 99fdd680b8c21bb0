# Shared by the snapshot_*.sh script tests: paths, a scratch directory, and fail().
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../pipe.bash" # grepq
BUILD=${BUILD:-build}
GPUMEM=$BUILD/gpumem
APP=$BUILD/tests/integration/snapshot_app
TMP=$(mktemp -d "${TMPDIR:-/tmp}/snapint-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export GPUMEM_QUIET=1
fail() { echo "FAIL: $*" >&2; exit 1; }
need() { for f in "$@"; do [[ -x $f ]] || fail "$f is not built"; done; }
