#!/usr/bin/env bash
# Before/after of an optimisation of the output side: runs two relay_micro binaries (bench/
# relay_micro.cc) alternately, ROUNDS times each, and prints per binary and mode the median of
# their ns/line and of their paired differences against plain. Arguments after ROUNDS go to both.
#   bash bench/relay_micro_ab.sh /tmp/relay_micro.before build-rel/bench/relay_micro 5 --no_logs
set -euo pipefail
a=$1 b=$2 rounds=$3
shift 3
for _ in $(seq "$rounds"); do
  for bin in "$a" "$b"; do
    "$bin" --reps 3 "$@" | awk -v bin="$bin" 'NR > 2 {print bin, $1, $2, $4}'
  done
done | python3 -c '
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in sys.stdin:
    binary, mode, ns, diff = line.split()
    runs[(binary, mode)].append((float(ns), float(diff)))
for (binary, mode), v in runs.items():
    diffs = [d for _, d in v]
    print(f"{binary} {mode:18} {statistics.median(n for n, _ in v):7.1f} ns/line, vs plain "
          f"{statistics.median(diffs):+6.1f} ns ({min(diffs):+.1f}..{max(diffs):+.1f}, {len(v)} invocations of 3 paired runs)")
'
