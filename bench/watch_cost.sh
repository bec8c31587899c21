#!/usr/bin/env bash
# What --watch (the hosts' samplers, straggler events, top) costs the launcher
# (docs/benchmarks.md, "The straggler watch"): peak RSS and wall time of msrun-ssh with and
# without it, paired run by run (with, without, with, ...), on N farm hosts x 1 process running
# `sleep S` (long enough for every sampler to report several times). Medians of REPS pairs.
#
#   bash tests/cluster/cluster.sh up --dir /tmp/wc --hosts 1 --farm 512
#   bash bench/watch_cost.sh /tmp/wc build/msrun-ssh "64 512" 3 4
#
# Needs root (the test cluster) and GNU time (/usr/bin/time).
set -euo pipefail
dir=$1 msrun=$(realpath "$2") sizes=${3:-"64 512"} reps=${4:-3} secs=${5:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "| hosts | peak RSS with --watch | without | wall with | without |"
echo "|---|---|---|---|---|"
for n in $sizes; do
  # The farm's host file, its first n hosts.
  awk -v n="$n" '/^\[\[hosts\]\]/ { k++ } k <= n' "$dir/farm.toml" > "$work/hosts-$n.toml"
  : > "$work/on"; : > "$work/off"
  for ((r = 0; r < reps; r++)); do
    for mode in on off; do
      flag=--watch=True; [[ $mode == off ]] && flag=--watch=False
      /usr/bin/time -f "%M %e" -o "$work/t" "$msrun" --hostfile "$work/hosts-$n.toml" \
        --log_dir "$work/logs" --fanout 64 "$flag" /bin/sleep "$secs" > /dev/null 2> "$work/err" ||
        { echo "msrun-ssh failed:"; tail -5 "$work/err"; exit 1; }
      cat "$work/t" >> "$work/$mode"
    done
  done
  on_kb=$(awk '{ print $1 }' "$work/on" | median) off_kb=$(awk '{ print $1 }' "$work/off" | median)
  on_s=$(awk '{ print $2 }' "$work/on" | median) off_s=$(awk '{ print $2 }' "$work/off" | median)
  awk -v n="$n" -v a="$on_kb" -v b="$off_kb" -v c="$on_s" -v d="$off_s" \
    'BEGIN { printf "| %d | %.1f MB | %.1f MB | %.2f s | %.2f s |\n", n, a / 1024, b / 1024, c, d }'
done
