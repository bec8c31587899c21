#!/usr/bin/env bash
# The demo: builds msrun-ssh, brings up a local test cluster of 3 SSH hosts (network namespaces,
# each with its own sshd, addresses in 198.18.0.0/16), runs the standard-library data-parallel
# example on it (3 hosts x 2 workers + the scheduler), and takes the cluster down again.
# Needs root (namespaces); without root it shows the launch plan with --dry_run instead.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "demo: not root, so no local cluster; showing the plan for examples/hosts.toml instead" >&2
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMSRUN_SSH_TESTS=OFF >/dev/null
  cmake --build build -j"$(nproc)" --target msrun-ssh >/dev/null
  exec ./build/msrun-ssh --dry_run --hostfile examples/hosts.toml examples/stdlib_ddp/train.py --epochs 3
fi
bash .ci/install-deps.sh
cmake -S . -B build  # keeps the build type of an existing build/ (CI's Release); else RelWithDebInfo
cmake --build build -j"$(nproc)" --target msrun-ssh
dir=$PWD/build/demo-cluster
trap 'bash tests/cluster/cluster.sh down --dir "$dir" >/dev/null' EXIT
bash tests/cluster/cluster.sh up --dir "$dir" --hosts 3
./build/msrun-ssh --hostfile "$dir/hosts.toml" --log_dir build/demo-logs \
  "$PWD/examples/stdlib_ddp/train.py" --epochs 3 --steps 10 "$@"
echo "demo: per-rank logs are in build/demo-logs/"
