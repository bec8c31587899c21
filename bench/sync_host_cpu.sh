#!/usr/bin/env bash
# What a re-sync after one changed file costs each host's CPU (issue #19's re-sync case), without
# a cluster: builds a tree of FILES files of 50 KB in 20 directories, copies it to HOSTS private
# destinations (every host holds the full copy before the re-sync), changes one file, and runs
# sync_host_cpu (bench/sync_host_cpu.cc: the launcher's own sync over local `/bin/sh -c COMMAND`
# children) on fresh copies REPS times. Two hosts or more: the launcher asks each for the marker
# read-back, as at 64 hosts (one host alone is not asked). Given several drivers (builds before and
# after a change), they take turns; per driver: the median, min and max of the children's CPU time
# (user + sys) per host, and the channels and files written per host. The login shell's rc is not
# counted (sshd runs each command through it: add its cost once per channel).
#   cmake --build build --target sync_host_cpu     # not part of `all`
#   bash bench/sync_host_cpu.sh [--reps 5] [--files 1000] [--hosts 2] DRIVER...
# Before/after a change: build the driver on each version of the sources (one older than the
# driver: copy this file's driver and its target in bench/CMakeLists.txt in), copy each binary
# away, and give them all.
set -euo pipefail
reps=5 files=1000 hosts=2
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --reps) reps=$2 ;;
    --files) files=$2 ;;
    --hosts) hosts=$2 ;;
    *) echo "unknown option $1" >&2 && exit 2 ;;
  esac
  shift 2
done
[[ $# -gt 0 ]] || { echo "usage: $0 [--reps N] [--files N] [--hosts N] DRIVER..." >&2 && exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq 0 $((files - 1))); do
  mkdir -p "$work/src/d$((i % 20))"
  head -c 51200 /dev/urandom >"$work/src/d$((i % 20))/f$i.py"
done
cp -a "$work/src" "$work/pristine"
echo "# changed" >>"$work/src/d7/f7.py"

dests=()
for h in $(seq "$hosts"); do dests+=("$work/dest$h"); done
for _ in $(seq "$reps"); do
  for driver in "$@"; do
    for d in "${dests[@]}"; do
      rm -rf "$d" && cp -a "$work/pristine" "$d"
    done
    out=$("$driver" "$work/src" "${dests[@]}" 2>"$work/results") || { cat "$work/results" >&2 && exit 1; }
    echo "$driver $out"
  done
done | python3 -c '
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in sys.stdin:
    driver, _, hosts, _, channels, _, files, _, cpu = line.split()
    runs[driver].append((float(cpu), int(channels) / int(hosts), int(files) / int(hosts)))
for driver, v in runs.items():
    cpu = [c for c, _, _ in v]
    print(f"{driver}: {statistics.median(cpu):.1f} ms of CPU per host (median of {len(v)}; "
          f"{min(cpu):.1f}..{max(cpu):.1f}); per host: {v[0][1]:g} channels, {v[0][2]:g} files written")
'
