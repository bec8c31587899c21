#!/bin/bash
# The CPU a host's launch agent uses while its job runs and nothing happens: one farm host, one
# `sleep` process, the agent's CPU time (/proc/PID/schedstat) and its wake-ups (voluntary context
# switches) over 16 s of the run, for each binary in turn, alternating, REPS times.
#
#   bash bench/idle_agent.sh CLUSTER_DIR REPS BINARY... [-- MSRUN_SSH_OPTIONS...]
#   bash bench/idle_agent.sh /tmp/msrun-bench/cluster 3 /tmp/before/msrun-ssh build/msrun-ssh \
#       -- --watch=False
#
# CLUSTER_DIR is an up test cluster's directory (tests/cluster/cluster.sh up, or bench.py's
# --keep-cluster); its first farm address is the host. Every run is bounded by `timeout`. Run it
# with no other job on the machine: the agent measured is the first `msrun-ssh-agent` found.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
dir=$1 reps=$2
shift 2
bins=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do bins+=("$1"); shift; done
[ $# -gt 0 ] && shift
work=$(mktemp -d /tmp/msrun-idle-agent.XXXXXX)
trap 'rm -rf "$work"' EXIT
# The host file's defaults and its first host.
awk '/^\[\[hosts\]\]/ { n++ } n < 2' "$dir/farm.toml" > "$work/one.toml"
for ((rep = 0; rep < reps; rep++)); do
  for bin in "${bins[@]}"; do
    timeout 60 "$bin" --hostfile "$work/one.toml" --log_dir "$work/logs" "$@" sleep 24 \
      >/dev/null 2>&1 &
    launcher=$!
    sleep 4
    pid=$(pgrep -x msrun-ssh-agent | head -1)
    [ -n "$pid" ] || { echo "no agent running under $bin" >&2; exit 1; }
    cpu0=$(awk '{print $1}' "/proc/$pid/schedstat")
    wake0=$(awk '/^voluntary_ctxt_switches/ {print $2}' "/proc/$pid/status")
    sleep 16
    cpu1=$(awk '{print $1}' "/proc/$pid/schedstat")
    wake1=$(awk '/^voluntary_ctxt_switches/ {print $2}' "/proc/$pid/status")
    wait "$launcher" || true
    echo "$bin: agent CPU $(( (cpu1 - cpu0) / 16000 )) us per s, $(( wake1 - wake0 )) wake-ups in 16 s"
  done
done
