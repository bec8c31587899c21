#!/usr/bin/env bash
# The unit tests of a build (BUILD_DIR/tests/unit_tests) as two GoogleTest shards, one process
# each, side by side. ctest runs each of the ~700 tests in a process of its own: under ASan those
# process starts cost minutes on 2 cores, the tests themselves about one. A shard that hangs past
# 15 minutes or ends by a sanitizer report or a signal fails the run, saying how it ended; one
# whose tests failed runs them once more, alone, and fails the run when one fails again.
#   bash .ci/unit-tests.sh build-asan
# (`cd BUILD_DIR && ctest -L unit` runs the same tests one process each, for a developer.)
set -euo pipefail
bin=$1/tests/unit_tests
out=$(mktemp -d "${TMPDIR:-/tmp}/msrun-ssh-unit.XXXXXX")
trap 'rm -rf "$out"' EXIT
pids=()
for i in 0 1; do
  GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$i timeout 900 "$bin" >"$out/$i.log" 2>&1 &
  pids+=($!)
done
# The lines of each failed test in log $1 (at most 80 each).
failures() {
  awk '/^\[ RUN      \]/ { block = ""; n = 0 } n < 80 { block = block $0 "\n"; n++ }
    /^\[  FAILED  \] .* \([0-9]+ ms\)$/ { printf "%s", block }' "$1"
}
# The GoogleTest filter of the failed tests of log $1 (names joined by ':'), when its shard ended
# by failed tests alone: GoogleTest's end lines are there, as many failed tests as its count says,
# no sanitizer report. Else nothing, and status 1.
rerun_filter() {
  local names n listed
  names=$(sed -n 's/^\[  FAILED  \] \([^ ,]*\)[ ,].*([0-9]* ms)$/\1/p' "$1")
  n=$(grep -c . <<<"$names" || :)
  listed=$(sed -nE 's/^\[  FAILED  \] ([0-9]+) tests?, listed below:$/\1/p' "$1")
  [ "$n" -gt 0 ] && [ "$listed" = "$n" ] &&
    grep -qE '^\[==========\] [0-9]+ tests? from .* ran\.' "$1" &&
    ! grep -qE 'ERROR: [A-Za-z]+Sanitizer|: runtime error: ' "$1" &&
    paste -sd: - <<<"$names"
}
# A shard that fails says how it ended (a status, or the signal that killed it), its failures and
# the last lines it printed (the test that ran when it was killed), and what the kernel said of
# killed processes (the OOM killer). A shard whose only fault is failed tests (exit status 1: no
# signal, no sanitizer report, no timeout) runs those tests once more, alone: the real-time tests
# share 2 cores with the cluster tests, and a test that fails twice fails the run. A test that
# passes on its second run is named as flaky, with its first failure, last, and the run goes on.
rc=0
flaky=
for i in 0 1; do
  st=0
  wait "${pids[$i]}" || st=$?
  [ "$st" -eq 0 ] && continue
  failed=
  if [ "$st" -eq 1 ] && failed=$(rerun_filter "$out/$i.log") &&
    timeout 300 "$bin" --gtest_filter="$failed" >"$out/$i.again.log" 2>&1; then
    echo "=== FLAKY: unit test shard $i failed $failed, which passed when run again alone;"
    echo "=== the first failure:"
    failures "$out/$i.log"
    flaky+=" $failed"
    continue
  fi
  rc=1
  how="exit status $st"
  [ "$st" -eq 124 ] && how="timed out after 900 s"
  [ "$st" -gt 128 ] && how="killed by SIG$(kill -l $((st - 128)) 2>/dev/null || echo $((st - 128)))"
  echo "=== unit test shard $i of 2 FAILED ($how); its failed tests (at most 80 lines each):"
  failures "$out/$i.log"
  [ ! -s "$out/$i.again.log" ] || { echo "=== run again alone:"; failures "$out/$i.again.log"; }
  echo "=== the last lines shard $i printed:"
  tail -n 5 "$out/$i.log"
  { dmesg 2>/dev/null || :; } | grep -iE 'killed process|out of memory' | tail -n 5 || :
done
for i in 0 1; do grep -E '^\[  PASSED  \]|tests? ran' "$out/$i.log" | sed "s/^/shard $i: /" || :; done
[ -z "$flaky" ] || echo "=== FLAKY (failed, then passed when run again alone):$flaky"
exit "$rc"
