# pipe.bash — sourced by the test scripts (directly or through their common file).
#
# `cmd | grep -q PATTERN` under `set -o pipefail` is flaky: grep -q exits at the first match,
# cmd's next write gets SIGPIPE, and the pipeline fails although the pattern was there (whether
# it does depends on how much cmd writes and on timing). grepq reads the rest of its input after
# grep -q has answered, so cmd finishes and its own exit status still counts.
#   "$GM" report run.db | grepq "the tensor:" || fail "..."
# The same holds for `cmd | head -1 | ...`: `sed -n 1p` reads all its input, head does not.
# tests/unit/test_scripts_lint.sh refuses both in the test scripts.
grepq() {
  local rc=0
  grep -q "$@" || rc=$?
  cat > /dev/null
  return "$rc"
}
