#!/usr/bin/env bash
# Installs the Debian packages of .ci/packages.txt, and of every further list given as an argument
# (root needed; skipped when all are present).
#   bash .ci/install-deps.sh                          # what building and the demo need
#   bash .ci/install-deps.sh .ci/packages-torch.txt   # and PyTorch for the torch contract's tests
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t pkgs < <(cat "$here/packages.txt" "$@" | grep -v '^#' | sed '/^$/d')
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
