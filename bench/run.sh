#!/usr/bin/env bash
# Builds msrun-ssh (release), then runs the benchmarks against pdsh, clush and mpirun and draws the
# plot into docs/. Needs root. Every option is passed on to bench.py (see bench/bench.py --help).
#   bash bench/run.sh                        # launch, memory, relay, check; 5 repetitions
#   bash bench/run.sh --suite relay --reps 9
#   bash bench/run.sh --suite launch,login --sizes 64 --login-sizes 64 --tools msrun-ssh,pdsh,libssh-floor
#                                            # beside the floor of one bare libssh login per host
#   bash bench/run.sh --soak                 # the soak test instead (bench/soak.py)
#   bash bench/run.sh --sync --sizes 16,64   # sync against pdcp, clush --copy, rsync (bench/sync.py)
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh
# The peers and the plot library, all Debian packages.
peers=(pdsh clustershell openmpi-bin python3-matplotlib time rsync)
missing=()
for p in "${peers[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-rel -j"$(nproc)" --target msrun-ssh libssh_floor >/dev/null
# Debian's python3 has matplotlib (python3-matplotlib); a python3 earlier on PATH may not.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
if [ "${1:-}" = --sync ]; then
  shift
  exec timeout 3600 "$PY" bench/sync.py --msrun build-rel/msrun-ssh "$@"
fi
if [ "${1:-}" = --soak ]; then
  shift
  exec timeout 1200 "$PY" bench/soak.py --msrun build-rel/msrun-ssh "$@"
fi
exec timeout 3600 "$PY" bench/bench.py --msrun build-rel/msrun-ssh --plot docs/benchmarks "$@"
