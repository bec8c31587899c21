#!/usr/bin/env bash
# The Debian package on a clean Debian 12 that never saw the build tree, container-free:
#   tests/package/test_deb.sh build/msrun-ssh_<version>_amd64.deb
# As root, with this machine's Debian mirror (from /etc/apt/sources.list*, or $DEBIAN_MIRROR):
#   1. debootstrap --variant=minbase bookworm into a temporary directory; the result is cached as
#      /var/cache/msrun-ssh-ci/bookworm-minbase.tar.gz (the first run makes it; delete it to make
#      it again), and so are the packages apt downloads (/var/cache/msrun-ssh-ci/archives/);
#   2. in a chroot (with /proc): apt-get install ./the.deb man-db bash-completion, nothing else;
#   3. msrun-ssh --version, `man msrun-ssh` shows its OPTIONS, and bash's completion, loaded the
#      way bash-completion loads it, completes --hostf to --hostfile and --job to a recorded job.
# Everything is unmounted and deleted on exit. Exits non-zero with a message on any failure.
set -euo pipefail

fail() {
  echo "test_deb: FAIL: $*" >&2
  exit 1
}

[[ $# -eq 1 && -f $1 ]] || fail "usage: test_deb.sh PACKAGE.deb (got: $*)"
[[ $(id -u) -eq 0 ]] || fail "needs root (debootstrap and chroot)"
for tool in debootstrap chroot dpkg-deb mount; do
  command -v "$tool" >/dev/null || fail "$tool is missing (apt-get install debootstrap)"
done
deb=$(realpath "$1")
cache=/var/cache/msrun-ssh-ci
tarball=$cache/bookworm-minbase.tar.gz
started=$SECONDS

# The first Debian archive (".../debian", not debian-security) of this machine's apt sources.
debian_mirror() {
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
    2>/dev/null | grep -E '^[[:space:]]*(URIs:|deb[[:space:]])' |
    grep -oE '[a-z]+://[^[:space:]]+/debian/?([[:space:]]|$)' | head -n 1 | tr -d '[:space:]' ||
    true
}
mirror=${DEBIAN_MIRROR:-$(debian_mirror)}
mirror=${mirror:-http://deb.debian.org/debian}

root=$(mktemp -d /tmp/msrun-ssh-deb.XXXXXX)
mounts=()
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" || true
  done
  # Never delete through a mount point that is still there.
  if findmnt -rn -o TARGET | grep -q "^$root"; then
    echo "test_deb: $root still has mounts; not deleting it" >&2
    return
  fi
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
# mount_in SOURCE TARGET_IN_ROOT MOUNT_ARGS...
mount_in() {
  mkdir -p "$root$2"
  mount "${@:3}" "$1" "$root$2"
  mounts+=("$root$2")
}

mkdir -p "$cache/archives/partial"
if [[ ! -f $tarball ]]; then
  echo "test_deb: debootstrap --variant=minbase bookworm from $mirror (cached in $tarball)"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    fail "debootstrap failed (log: $cache/debootstrap.log): $(tail -n 20 "$cache/debootstrap.log")"
  rm -f "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -czf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
else
  echo "test_deb: a clean bookworm from $tarball"
  tar -C "$root" -xzf "$tarball"
fi

cp /etc/resolv.conf "$root/etc/resolv.conf"
echo "deb $mirror bookworm main" >"$root/etc/apt/sources.list"
cp "$deb" "$root/tmp/"
mount_in proc /proc -t proc
mount_in "$cache/archives" /var/cache/apt/archives --bind

# in_root SCRIPT: runs SCRIPT with bash in the chroot, in a clean environment.
in_root() {
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C \
    DEBIAN_FRONTEND=noninteractive /bin/bash -c "$1"
}

echo "test_deb: apt-get install ./${deb##*/} man-db bash-completion"
in_root "apt-get update -qq && apt-get install -y -qq --no-install-recommends \
  ./tmp/${deb##*/} man-db bash-completion" >"$root/tmp/install.log" 2>&1 ||
  fail "apt-get install failed: $(tail -n 30 "$root/tmp/install.log")"
in_root "[ ! -e /usr/include/msrun_ssh ] && ! command -v cmake" >/dev/null ||
  fail "the chroot is not clean: it has a build tree's files"

version=$(dpkg-deb -f "$deb" Version)
got=$(in_root "msrun-ssh --version") || fail "msrun-ssh --version exits non-zero: $got"
[[ $got == "msrun-ssh $version" ]] || fail "msrun-ssh --version says \"$got\", not msrun-ssh $version"
echo "test_deb: ok: $got"

page=$(in_root "MANWIDTH=100 man -P cat msrun-ssh 2>&1") || fail "man msrun-ssh fails: $page"
for want in OPTIONS "--hostfile FILE" "EXIT STATUS"; do
  grep -qF -- "$want" <<<"$page" || fail "man msrun-ssh shows no \"$want\":
$page"
done
echo "test_deb: ok: man msrun-ssh shows OPTIONS"

# As bash-completion does on the first <TAB> after msrun-ssh: load the installed file by the
# command's name, then call the function it registered.
# shellcheck disable=SC2016  # (expanded by the chroot's bash)
completions=$(in_root '
  mkdir -p ~/.local/state/msrun-ssh/jobs && touch ~/.local/state/msrun-ssh/jobs/20261129-154501-3fa9c2.json
  source /usr/share/bash-completion/bash_completion
  __load_completion msrun-ssh || exit 1
  read -r -a spec <<<"$(complete -p msrun-ssh)"
  fn=${spec[2]}
  COMP_WORDS=(msrun-ssh --hostf); COMP_CWORD=1; "$fn" msrun-ssh --hostf msrun-ssh
  echo "host: ${COMPREPLY[*]}"
  COMP_WORDS=(msrun-ssh stop --job ""); COMP_CWORD=3; "$fn" msrun-ssh "" --job
  echo "job: ${COMPREPLY[*]}"') || fail "the installed completion does not load: $completions"
grep -qx "host: --hostfile" <<<"$completions" ||
  fail "completion of \"msrun-ssh --hostf\" is not --hostfile: $completions"
grep -qx "job: 20261129-154501-3fa9c2" <<<"$completions" ||
  fail "completion of \"msrun-ssh stop --job \" is not the recorded job: $completions"
echo "test_deb: ok: completion (--hostf -> --hostfile, --job -> the recorded job)"

depends=$(dpkg-deb -f "$deb" Depends)
echo "test_deb: all passed in $((SECONDS - started)) s (Depends: $depends)"
