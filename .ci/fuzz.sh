#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ (clang, ASan + UBSan, Debug, in build-fuzz/) and runs
# each on a copy of its seed corpus in a temporary directory: every seed first (libFuzzer replays
# the whole corpus before it explores: a regression run), then SECONDS (default 60) of new
# inputs. CI explores 5 s per target; a long campaign is e.g. `.ci/fuzz.sh 3600`. Nothing is
# written into the repository. Prints one summary line per target and exits 1 when any target
# found a crash, sanitizer report, property violation, timeout (>FUZZ_TIMEOUT s per input,
# default 10) or excessive memory use (>2048 MB); its log and reproducer are kept and their paths
# printed.
#
#   .ci/fuzz.sh [SECONDS]
#
# Environment: FUZZ_JOBS targets at once (default: number of CPUs), FUZZ_TARGETS a space-separated
# subset, FUZZ_TIMEOUT the seconds one input may take (CI, whose fuzzers run at the lowest CPU
# priority behind the cluster tests, gives 60: a 1 s input there can take 20), FUZZ_SEED the
# random seed of every target's exploration (default 0: libFuzzer draws one; CI gives one drawn from
# the commit, so one commit explores the same inputs run after run, as far as its time reaches, and
# a finding comes back), FUZZ_BUILD_DIR the build directory (default build-fuzz), FUZZ_CONFIGURED=1 when that
# directory is configured already (with -DMSRUN_SSH_FUZZ=ON). Reproduce a finding with
#   build-fuzz/tests/fuzz/TARGET path/to/crash-file
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
if ! [[ $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: $0 [SECONDS]" >&2
  exit 2
fi
seed=${FUZZ_SEED:-0}
if ! [[ $seed =~ ^[0-9]+$ ]] || [ "$seed" -gt 4294967295 ]; then
  echo "$0: FUZZ_SEED must be 0..4294967295" >&2
  exit 2
fi
build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${FUZZ_JOBS:-$(nproc)}
all_targets="hostfile_toml_fuzz hostfile_plain_fuzz nodeset_fuzz bind_json_fuzz cli_fuzz quote_fuzz
framer_fuzz known_hosts_fuzz ignore_fuzz agent_fuzz host_source_fuzz host_answers_fuzz
mux_frame_fuzz ssh_g_fuzz error_file_fuzz fallback_config_fuzz perf_answer_fuzz job_record_fuzz
agent_identities_fuzz"
targets=${FUZZ_TARGETS:-$all_targets}

echo "fuzz: building in $build"
# FUZZ_CONFIGURED=1: $build is configured already (CI's sanitizer build, with -DMSRUN_SSH_FUZZ=ON).
if [ "${FUZZ_CONFIGURED:-0}" != 1 ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -DMSRUN_SSH_FUZZ=ON -DMSRUN_SSH_TESTS=OFF \
    -DMSRUN_SSH_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >"$build.configure.log" 2>&1 ||
    { cat "$build.configure.log" >&2; exit 1; }
  rm -f "$build.configure.log"
fi
# shellcheck disable=SC2086
cmake --build "$build" -j"$(nproc)" --target $targets

work=$(mktemp -d "${TMPDIR:-/tmp}/msrun-ssh-fuzz.XXXXXX")

# Runs one target; leaves its log in $work/$t/log and the exit status in $work/$t/rc.
run_target() {
  local t=$1 dir=$work/$1
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp -R "tests/fuzz/corpus/$t/." "$dir/corpus/"
  local rc=0
  ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$build/tests/fuzz/$t" -max_total_time="$seconds" -seed="$seed" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "$dir/corpus" \
      >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
}

running=0
for t in $targets; do
  if [ ! -d "tests/fuzz/corpus/$t" ]; then
    echo "fuzz: no seed corpus tests/fuzz/corpus/$t" >&2
    exit 1
  fi
  run_target "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

failed=0
echo
echo "fuzz: ${seconds} s per target, seed ${seed} (0: each target's own, in its log)"
for t in $targets; do
  dir=$work/$t
  rc=$(cat "$dir/rc" 2>/dev/null || echo "?")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  [ -n "$execs" ] || execs=$(grep -oE '^#[0-9]+' "$dir/log" | tail -1 | tr -d '#')
  [ -n "$execs" ] || execs="?"
  if [ "$rc" = 0 ]; then
    corpus=$(find "$dir/corpus" -type f | wc -l)
    printf '%-20s %12s execs  ok (corpus %s files)\n' "$t" "$execs" "$corpus"
    continue
  fi
  failed=1
  what=$(grep -m1 -oE 'PROPERTY VIOLATION|ERROR: AddressSanitizer: [a-z-]+|ERROR: LeakSanitizer|runtime error: .{0,60}|ERROR: libFuzzer: [a-z-]+( [a-z-]+)?' "$dir/log" || true)
  detail=$(grep -m1 -A1 'PROPERTY VIOLATION' "$dir/log" | tail -1 | sed 's/^ *//' || true)
  artifact=$(find "$dir/artifacts" -type f | head -1)
  printf '%-20s %12s execs  FAILED (exit %s): %s%s\n' "$t" "$execs" "$rc" "${what:-see log}" \
    "${detail:+ -- $detail}"
  printf '%-20s %12s        log %s%s\n' "" "" "$dir/log" "${artifact:+, reproducer $artifact}"
done

if [ "$failed" -ne 0 ]; then
  echo "fuzz: FAILED; logs and reproducers kept in $work"
  exit 1
fi
rm -rf "$work"
echo "fuzz: all targets passed"
