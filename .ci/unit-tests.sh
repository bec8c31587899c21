#!/usr/bin/env bash
# The unit tests of a build (BUILD_DIR/tests/unit_tests) as two GoogleTest shards, one process
# each, side by side. ctest runs each of the ~700 tests in a process of its own: under ASan those
# process starts cost minutes on 2 cores, the tests themselves about one. A shard that fails, hangs
# past 15 minutes or ends by a sanitizer report fails the run, with its output.
#   bash .ci/unit-tests.sh build-asan
# (`cd BUILD_DIR && ctest -L unit` runs the same tests one process each, for a developer.)
set -euo pipefail
bin=$1/tests/unit_tests
out=$(mktemp -d "${TMPDIR:-/tmp}/msrun-ssh-unit.XXXXXX")
trap 'rm -rf "$out"' EXIT
pids=()
for i in 0 1; do
  GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$i timeout 900 "$bin" --gtest_brief=1 \
    >"$out/$i.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in 0 1; do
  if ! wait "${pids[$i]}"; then
    rc=1
    echo "=== unit test shard $i of 2 FAILED:"
    cat "$out/$i.log"
  fi
done
for i in 0 1; do grep -E '^\[  PASSED  \]|tests? ran' "$out/$i.log" | sed "s/^/shard $i: /" || :; done
exit "$rc"
