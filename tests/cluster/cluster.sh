#!/usr/bin/env bash
# cluster.sh - a cluster of fake SSH hosts on one machine, for msrun-ssh's integration tests.
#
# Each host is a set of namespaces (network via `ip netns`, plus pid, uts and mount via `unshare`)
# running its own OpenSSH sshd. All hosts sit on one L2 bridge in the root namespace, so the tests
# (which run in the root namespace) reach every host directly: no routing, no ip_forward, no NAT,
# and rp_filter never sees an asymmetric path. See /work/shared/DESIGN.md, section "Test cluster".
#
# Addresses (all from 198.18.0.0/16, the benchmarking range, and from nowhere else):
#   198.18.0.1/16              bridge msrs-br0 in the root namespace (where the tests run)
#   198.18.1.(10+i)/16         host node<i>: namespace msrs-node<i>, root-side veth msrs-v<i>,
#                              inside it the interface is called eth0
#   198.18.2.1, .2, ... .254,  the optional "farm": namespace msrs-farm, root-side veth msrs-vf,
#   198.18.3.1, ...            M addresses on its eth0, all served by one sshd
# The hosts have no default route, so nothing running on them can reach beyond 198.18.0.0/16.
#
# Each host has a private tmpfs at /srv/msrs-private (its own mount namespace): a directory no
# other host and not the launcher sees, for tests that need per-host copies (sync).
#
# Process layout of a host (what `pids`/`ps` show, root-namespace pids):
#   unshare ...                      in the host's network namespace but in the root pid namespace
#   bash DIR/hostinit.sh NAME CFG    pid 1 of the host's pid namespace: sets the hostname, runs sshd
#                                    as its child, reaps orphans, restarts sshd on SIGUSR1
#   sleep 3600                       the init's timer (it waits on it)
#   sshd: /usr/sbin/sshd -D ...      the listener (pid 2 inside the host), plus one sshd per
#                                    connection and whatever the sessions started
# sshd is deliberately not pid 1: `sshd-stop` then kills sshd only, and the processes its sessions
# started survive (reparented to the host's init), as on a real machine whose sshd dies.
#
# Subcommands (all need root; without root, or without sshd/ip/unshare, they exit 77 = "skip"):
#   up --dir DIR --hosts N [--farm M]   tear down any earlier cluster, then build a new one and
#                                       wait (bounded) until every sshd answers on port 22
#   down [--dir DIR]                    kill every process in every msrs-* namespace, delete the
#                                       namespaces, veths and bridge; empty DIR. Idempotent, exit 0.
#   pids I | ps I                       pids (one per line) / "pid cmdline" lines of host I
#   cut I | heal I                      root-side veth down/up: host I silently vanishes (no FIN/RST)
#   sshd-stop I | sshd-start I          kill all sshd processes of host I / start sshd again
#   slowrc I SECONDS                    host I's login rc takes SECONDS from the next login on (as
#                                       conda init or module load do); 0: clean again
#   burnrc I CPU_SECONDS                host I's login rc burns CPU_SECONDS of CPU in a python3
#                                       start-up (as `conda init` does); 0: clean again
#   countrc I FILE                      host I's login rc appends a line to FILE (a path both
#                                       sides see, under /tmp): how many logins the host paid
#   envrc I 'NAME=VALUE...'             host I's login rc exports these variables (as a .bashrc
#                                       or module load does); `slowrc I 0`: clean again
#   throttle I PERCENT                  host I's sshd, and with it everything started over ssh
#                                       from then on, gets PERCENT % of one CPU (a cgroup CPU
#                                       quota: a throttled node); 0: no quota again
#   status                              one line per namespace
#   slurm-up --dir DIR | slurm-down --dir DIR
#                                       a real Slurm on the cluster's hosts (slurmd per host,
#                                       slurmctld and munged here): tests/cluster/slurm.sh
# I is a host index (0..N-1) or the word "farm".
#
# Files written into DIR by `up`:
#   id_ed25519, id_ed25519.pub   client key (kept across `up`s of the same DIR; `down --dir` drops it)
#   authorized_keys              that key, used by every sshd
#   user_ca_keys                 every sshd's TrustedUserCAKeys: empty (a test adds a CA and restores it)
#   known_hosts                  "ADDR ssh-ed25519 KEY", one line per host address and farm address
#   ssh_config                   for `ssh -F DIR/ssh_config node0` (aliases node<i>, plus 198.18.*)
#   hosts.toml, farm.toml        msrun-ssh host files for the nodes / the farm addresses
#   cluster.env                  shell-sourceable: CLUSTER_DIR, CLUSTER_HOSTS, CLUSTER_ADDRS,
#                                FARM_HOSTS, FARM_ADDRS, CLUSTER_SH (written last: exists = up)
#   hostinit.sh                  the per-host init (see above)
#   node<i>/, farm/              sshd_config, ssh_host_ed25519_key(.pub), sshd.log, sshd.pid
#                                (sshd.pid holds the pid *inside* the host's pid namespace)
#   .msrs-cluster                marker: only a DIR carrying it is ever emptied by `down --dir`
#
# Names (msrs-*) are machine-global: there is one cluster per machine at a time. Mutating
# subcommands serialise on a lock file, but a `down` still ends anyone else's cluster.
set -euo pipefail

readonly BRIDGE=msrs-br0
readonly BRIDGE_ADDR=198.18.0.1
readonly BRIDGE_CIDR=$BRIDGE_ADDR/16
# Fixed MAC addresses (locally administered, 02:...), so that neighbour entries can be static.
readonly BRIDGE_MAC=02:12:00:00:00:01
readonly FARM_MAC=02:12:02:00:00:01
readonly PREFIX_LEN=16
readonly SSHD=/usr/sbin/sshd
readonly WAIT_SECONDS=10           # how long `up` / `sshd-start` wait for sshd to answer
readonly MAX_HOSTS=245             # 198.18.1.10 .. 198.18.1.254
readonly MAX_FARM=2032             # 198.18.2.1 .. 198.18.9.254
readonly MARKER=.msrs-cluster
readonly LOCK_FILE=/run/msrs-cluster.lock
SCRIPT_PATH=$(realpath -- "${BASH_SOURCE[0]}")
readonly SCRIPT_PATH

# ---------------------------------------------------------------------------------------------
# Messages. Everything informational goes to stderr so that `pids`/`ps` output stays parseable.

log() { printf 'cluster: %s\n' "$*" >&2; }
die() {
  printf 'cluster: ERROR: %s\n' "$*" >&2
  exit 1
}
skip() {
  printf '\n%s\n*** SKIP: %s\n%s\n\n' "$(printf '*%.0s' {1..78})" "$*" \
    "$(printf '*%.0s' {1..78})" >&2
  exit 77
}

usage() {
  cat <<'EOF'
usage: cluster.sh up --dir DIR --hosts N [--farm M]
       cluster.sh down [--dir DIR]
       cluster.sh pids I | ps I | cut I | heal I | sshd-stop I | sshd-start I
       cluster.sh slowrc I SECONDS | burnrc I CPU_SECONDS | countrc I FILE | throttle I PERCENT
       cluster.sh envrc I 'NAME=VALUE...'
       cluster.sh status
I is a host index (0..N-1) or "farm". See the comment at the top of this script.
EOF
}

# Exits 77 (ctest's "skipped") unless we are root and have the tools. A skip must be loud: a
# silently skipped integration suite looks exactly like a passing one.
require_root_and_tools() {
  if [[ $(id -u) -ne 0 ]]; then
    skip "cluster tests need root (running as uid $(id -u)): they create network namespaces," \
      "veths and a bridge, and run sshd. Run ctest as root (as CI does) to include them."
  fi
  local tool
  for tool in "$SSHD" ip unshare ssh-keygen setsid flock timeout; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      skip "cluster tests need root and '$tool', which is missing" \
        "(apt-get install openssh-server openssh-client iproute2 util-linux)"
    fi
  done
}

# Serialises the subcommands that change the cluster. The fd is closed for every process that
# outlives us (see start_host), otherwise a host's sshd would hold the lock forever.
take_lock() {
  exec {LOCK_FD}>"$LOCK_FILE"
  flock -w 120 "$LOCK_FD" || die "another cluster.sh has held $LOCK_FILE for 120 s"
}

# ---------------------------------------------------------------------------------------------
# Names and addresses.

node_addr() { printf '198.18.1.%d' $((10 + $1)); }
node_mac() { printf '02:12:01:00:%02x:%02x' $(($1 / 256)) $(($1 % 256)); }
# The first M farm addresses, one per line: 198.18.2.1 .. 198.18.2.254, then 198.18.3.1 ...
# (never .0 or .255).
farm_addrs() {
  local k
  for ((k = 0; k < $1; k++)); do printf '198.18.%d.%d\n' $((2 + k / 254)) $((1 + k % 254)); done
}

ns_exists() { [[ -n $1 && -e /run/netns/$1 ]]; }

# resolve_host SPEC: SPEC is a host index or "farm"; sets HOST_NS (namespace), HOST_VETH (its
# root-side veth) and HOST_NAME, and dies unless that host exists. Runs in the calling shell (not
# in $(...)), so that its `die` really ends the script.
resolve_host() {
  case $1 in
    farm) HOST_NS=msrs-farm HOST_VETH=msrs-vf HOST_NAME=farm ;;
    *)
      [[ $1 =~ ^[0-9]{1,4}$ ]] || die "bad host '$1': want a host index (0, 1, ...) or 'farm'"
      local i=$((10#$1))
      HOST_NS=msrs-node$i HOST_VETH=msrs-v$i HOST_NAME=node$i
      ;;
  esac
  ns_exists "$HOST_NS" || die "host '$1' does not exist (no namespace $HOST_NS)"
}

# All msrs-* namespaces / root-namespace links, one per line.
list_cluster_ns() { ip netns list 2>/dev/null | awk '$1 ~ /^msrs-/ { print $1 }'; }
list_cluster_links() {
  ip -o link show 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); if ($2 ~ /^msrs-/) print $2 }'
}

# Writes VALUE to the sysctl file PATH if the kernel has it (IPv6 may be compiled out).
set_sysctl() { if [[ -w $1 ]]; then echo "$2" >"$1" || true; fi; }

# ---------------------------------------------------------------------------------------------
# Process helpers (root-namespace pids).

ns_pids() { ip netns pids "$1" 2>/dev/null || true; }

# Pids of the sshd processes (listener and per-connection) in namespace $1. Read with no fork per
# process: a busy host runs thousands (the fault campaign's --busy).
ns_sshd_pids() {
  local pid comm
  for pid in $(ns_pids "$1"); do
    { read -r comm <"/proc/$pid/comm"; } 2>/dev/null || continue
    [[ $comm == sshd ]] && echo "$pid"
  done
  return 0
}

# Root-namespace pid of the host's init (the process that is pid 1 in its pid namespace).
ns_init_pid() {
  local pid key ids
  for pid in $(ns_pids "$1"); do
    while read -r key ids; do
      [[ $key == NSpid: ]] || continue
      if [[ ${ids##*[[:space:]]} == 1 ]]; then
        echo "$pid"
        return 0
      fi
      break
    done 2>/dev/null <"/proc/$pid/status" || continue
  done
  return 1
}

# True if something in namespace $1 listens on TCP port 22 (0x16) on any IPv4 address.
# Reads the namespace's own /proc/net/tcp, so it works even while the host is cut.
ns_listens_22() {
  ip netns exec "$1" cat /proc/net/tcp 2>/dev/null |
    awk '$2 ~ /:0016$/ && $4 == "0A" { found = 1 } END { exit !found }'
}

# SIGKILLs everything in namespace $1 until nothing is left (bounded: ~5 s). Repeats because a
# process may fork between listing and killing (sshd accepting a connection, for instance).
kill_ns_processes() {
  local ns=$1 pids
  for _ in $(seq 50); do
    pids=$(ns_pids "$ns")
    [[ -z $pids ]] && return 0
    # shellcheck disable=SC2086  # word splitting of the pid list is intended
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  log "warning: processes survive in $ns after 5 s: $(ns_pids "$ns" | tr '\n' ' ')"
}

# Checks that sshd's banner arrives from ADDR:22, from inside namespace $2 if given. A banner (not
# just an accepted TCP connection) proves sshd forked, loaded its keys and speaks SSH. We answer
# with our own identification before closing: a connection closed before that makes sshd log an
# ERROR ("kex_exchange_identification: Connection closed by remote host") into sshd.log.
probe_ssh() {
  local addr=$1 ns=${2:-}
  # shellcheck disable=SC2016  # expanded by the inner bash
  local cmd='exec 3<>"/dev/tcp/$0/22" && read -r -t 2 line <&3 && [[ $line == SSH-2.0-* ]] &&
    printf "SSH-2.0-cluster-probe\r\n" >&3'
  if [[ -n $ns ]]; then
    timeout 3 ip netns exec "$ns" bash -c "$cmd" "$addr" 2>/dev/null
  else
    timeout 3 bash -c "$cmd" "$addr" 2>/dev/null
  fi
}

# ---------------------------------------------------------------------------------------------
# down

# Removes every msrs-* namespace (after killing its processes: a namespace outlives `ip netns del`
# while any process is in it) and every msrs-* link in the root namespace. Never fails.
teardown_network() {
  local ns link
  for ns in $(list_cluster_ns); do kill_ns_processes "$ns"; done
  for ns in $(list_cluster_ns); do ip netns del "$ns" 2>/dev/null || log "warning: cannot delete $ns"; done
  # Deleting a namespace destroys its end of each veth and so the root-side end; whatever is left
  # (a half-built cluster, the bridge) goes here.
  for link in $(list_cluster_links); do ip link del "$link" 2>/dev/null || true; done
  return 0
}

# Empties DIR, but only if it carries our marker: `down --dir /tmp` by mistake must not wipe /tmp.
empty_dir() {
  local dir=$1
  [[ -d $dir ]] || return 0
  [[ -n $(ls -A -- "$dir") ]] || return 0
  if [[ ! -e $dir/$MARKER ]]; then
    log "warning: $dir has no $MARKER marker; not emptying it"
    return 0
  fi
  find "$dir" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + 2>/dev/null || true
}

cmd_down() {
  local dir=''
  while (($#)); do
    case $1 in
      --dir) dir=${2:?--dir needs a value}; shift 2 ;;
      *) usage >&2; die "down: unknown argument '$1'" ;;
    esac
  done
  require_root_and_tools
  if [[ -n $dir ]]; then dir=$(canonical_dir "$dir"); fi # a usage error must change nothing
  take_lock
  if [[ -n $dir && -d $dir/slurm ]]; then bash "$(dirname "${BASH_SOURCE[0]}")/slurm.sh" down "$dir" || true; fi
  teardown_network
  # CPU cgroups of `throttle` (empty now: their processes are gone)
  rmdir /sys/fs/cgroup/cpu/msrs-throttle-* /sys/fs/cgroup/msrs-throttle-* 2>/dev/null || true
  if [[ -n $dir ]]; then empty_dir "$dir"; fi
  local left
  left=$( (list_cluster_ns; list_cluster_links) | tr '\n' ' ')
  [[ -z $left ]] || log "warning: still present after down: $left"
  log "down: done"
  return 0
}

# ---------------------------------------------------------------------------------------------
# up: files

# Absolute path of a cluster dir, restricted to characters that need no quoting in sshd_config,
# ssh_config, TOML and shell (so every generated file can stay simple).
canonical_dir() {
  local dir
  dir=$(realpath -m -- "$1")
  [[ $dir != / ]] || die "refusing to use / as the cluster dir"
  [[ $dir =~ ^/[A-Za-z0-9._/+-]+$ ]] || die "cluster dir '$dir' must match [A-Za-z0-9._/+-]+"
  echo "$dir"
}

# Dies unless DIR is absent, empty, or a cluster dir (carries the marker): `up --dir /tmp` by
# mistake must not take over /tmp, and a later `down --dir` must not empty it.
check_dir_usable() {
  local dir=$1
  if [[ -e $dir && ! -d $dir ]]; then die "$dir exists and is not a directory"; fi
  if [[ -d $dir && ! -e $dir/$MARKER && -n $(ls -A -- "$dir") ]]; then
    die "$dir is not empty and is not a cluster dir (no $MARKER); refusing to use it"
  fi
}

# Makes DIR ready for a new cluster: everything from an earlier `up` goes, except a usable client
# key (the key is generated once per DIR).
prepare_dir() {
  local dir=$1 entry
  mkdir -p -- "$dir"
  touch "$dir/$MARKER"
  for entry in "$dir"/* "$dir"/.[!.]*; do
    [[ -e $entry ]] || continue
    case ${entry##*/} in
      id_ed25519 | id_ed25519.pub | "$MARKER") ;;
      *) rm -rf -- "$entry" ;;
    esac
  done
  if [[ -e $dir/id_ed25519 ]] && ! ssh-keygen -y -P '' -f "$dir/id_ed25519" >"$dir/id_ed25519.pub" 2>/dev/null; then
    log "existing $dir/id_ed25519 is unusable (passphrase?); generating a new one"
    rm -f -- "$dir/id_ed25519" "$dir/id_ed25519.pub"
  fi
  if [[ ! -e $dir/id_ed25519 ]]; then
    ssh-keygen -q -t ed25519 -N '' -C "msrun-ssh-test-cluster" -f "$dir/id_ed25519" </dev/null
  fi
  chmod 0600 "$dir/id_ed25519"
  cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
  : >"$dir/user_ca_keys"
}

# With UsePAM no, sshd refuses even key logins to an account whose password field is locked
# ("!..."). Debian images usually have "*" (no password, not locked); catch the other case here.
check_root_not_locked() {
  local pw
  pw=$(awk -F: '$1 == "root" { print $2 }' /etc/shadow 2>/dev/null || true)
  if [[ $pw == '!'* ]]; then
    die "root's password field in /etc/shadow starts with '!' (locked); with UsePAM no sshd" \
      "refuses every login to a locked account, keys included. Unlock it without a password:" \
      "usermod -p '*' root"
  fi
}

# The init of every host (pid 1 in its pid namespace). Written to DIR so that a running host never
# depends on this script's file (bash reads scripts lazily; someone may be editing it).
write_hostinit() {
  cat >"$1/hostinit.sh" <<'EOF'
#!/bin/bash
# pid 1 of one test-cluster host; generated by tests/cluster/cluster.sh (see there).
# usage: hostinit.sh NAME SSHD_CONFIG
# Sets the hostname, runs sshd as a child, reaps orphans (as every init must: bash's SIGCHLD
# handling waits for any child), starts sshd again on SIGUSR1 (cluster.sh sshd-start), and exits
# on SIGTERM (which ends the whole pid namespace).
name=$1 config=$2
echo "$name" >/proc/sys/kernel/hostname
# A clean login environment, as on a fresh server: this machine's own ~/.bashrc (pyenv, cargo)
# would cost every remote command ~0.2 s and ~100 processes, and print noise under load. Each host
# gets its own rc file (DIR/NAME/bashrc: `cluster.sh slowrc` writes a slow one), bind-mounted in
# this host's private mount namespace only.
host_rc=$(dirname "$config")/bashrc
if [ -f "$HOME/.bashrc" ] && [ -f "$host_rc" ]; then mount --bind "$host_rc" "$HOME/.bashrc"; fi
# A directory of this host's own (the file system is otherwise the launcher's): sync tests write
# there, so that each host's copy is really its own.
mkdir -p /srv/msrs-private && mount -t tmpfs -o size=256m,mode=0755 msrs-private /srv/msrs-private
start_sshd() { /usr/sbin/sshd -D -e -f "$config" </dev/null & }
interrupted=0
trap 'interrupted=1; start_sshd' USR1
trap 'exit 0' TERM INT
start_sshd
sleep 3600 & timer=$!
while :; do
  interrupted=0
  wait "$timer"
  # A trapped signal interrupts `wait` while the timer still runs; otherwise the timer is done.
  if ((!interrupted)); then sleep 3600 & timer=$!; fi
done
EOF
}

# PerSourcePenalties (OpenSSH >= 9.8, on by default) would throttle the single source address all
# test connections come from; switch it off where sshd knows it. Cached: one probe per `up`.
PENALTIES_PROBED=0 PENALTIES_LINE=
penalties_line() {
  if ((!PENALTIES_PROBED)); then
    PENALTIES_PROBED=1
    if "$SSHD" -t -f "$1" -o PerSourcePenalties=no >/dev/null 2>&1; then
      PENALTIES_LINE='PerSourcePenalties no'
    fi
  fi
  echo "$PENALTIES_LINE"
}

# write_host_files DIR NAME MAXSTARTUPS [MAXSESSIONS]: DIR/NAME/ with a fresh host key and an
# sshd_config that sshd itself has checked.
write_host_files() {
  local dir=$1 name=$2 startups=$3 sessions=${4:-} hdir=$1/$2
  mkdir -p "$hdir"
  ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$hdir/ssh_host_ed25519_key" </dev/null
  {
    echo "# sshd_config of cluster host $name, generated by tests/cluster/cluster.sh up"
    echo "ListenAddress 0.0.0.0:22"
    echo "AddressFamily inet"
    echo "HostKey $hdir/ssh_host_ed25519_key"
    echo "PidFile $hdir/sshd.pid"
    echo "UsePAM no"
    echo "PubkeyAuthentication yes"
    echo "PasswordAuthentication no"
    echo "KbdInteractiveAuthentication no"
    echo "PermitRootLogin prohibit-password"
    echo "AuthorizedKeysFile $dir/authorized_keys"
    echo "TrustedUserCAKeys $dir/user_ca_keys"
    echo "StrictModes no"
    echo "Subsystem sftp internal-sftp"
    echo "MaxStartups $startups"
    if [[ -n $sessions ]]; then echo "MaxSessions $sessions"; fi
    echo "UseDNS no"
    echo "PrintMotd no"
    echo "PrintLastLog no"
    echo "LogLevel ERROR"
  } >"$hdir/sshd_config"
  local extra
  extra=$(penalties_line "$hdir/sshd_config")
  if [[ -n $extra ]]; then echo "$extra" >>"$hdir/sshd_config"; fi
  "$SSHD" -t -f "$hdir/sshd_config" || die "sshd rejects $hdir/sshd_config (see above)"
  : >"$hdir/sshd.log"
  write_rc "$hdir/bashrc" 0
}

# write_rc FILE SECONDS [burn]: the login rc of a host; SECONDS > 0 makes it as slow as a real one
# (conda init, module load): a `sleep` in the login shell's process group, before the command;
# with "burn", a python3 that spins SECONDS of CPU time instead (conda's hook is a python start-up);
# with "count", SECONDS is a file the rc appends a line to at each login; with "exports", SECONDS
# is NAME=VALUE words the rc exports.
# Written in place (same inode): the host's bind mount keeps showing it.
write_rc() {
  if [[ $2 == 0 ]]; then
    printf '# test-cluster host: no login customisation (cluster.sh slowrc changes it)\n' >"$1"
  elif [[ ${3:-} == exports ]]; then
    printf '# test-cluster host: a login rc that exports variables (cluster.sh envrc)\nexport %s\n' \
      "$2" >"$1"
  elif [[ ${3:-} == burn ]]; then
    printf '# test-cluster host: a login rc that burns CPU (cluster.sh burnrc)\n%s\n' \
      "python3 -c 'import time; t = time.process_time()
while time.process_time() - t < $2: pass'" >"$1"
  elif [[ ${3:-} == count ]]; then
    printf '# test-cluster host: a login rc that counts logins (cluster.sh countrc)\n%s\n' \
      "echo \"rc \$\$\" >> '$2'" >"$1"
  else
    printf '# test-cluster host: a slow login rc (cluster.sh slowrc)\nsleep %s\n' "$2" >"$1"
  fi
}

# known_hosts line for ADDR with the host key of DIR/NAME: "ADDR ssh-ed25519 AAAA...".
known_hosts_line() {
  local addr=$1 type key _
  read -r type key _ <"$2/ssh_host_ed25519_key.pub"
  echo "$addr $type $key"
}

write_ssh_config() {
  local dir=$1 n=$2 i
  {
    echo "# ssh_config for the test cluster: ssh -F $dir/ssh_config node0"
    for ((i = 0; i < n; i++)); do
      echo "Host node$i"
      echo "  HostName $(node_addr "$i")"
      echo "  User root"
      echo "  IdentityFile $dir/id_ed25519"
      echo "  UserKnownHostsFile $dir/known_hosts"
      echo "  StrictHostKeyChecking yes"
      echo
    done
    echo "Host 198.18.*"
    echo "  User root"
    echo "  IdentityFile $dir/id_ed25519"
    echo "  UserKnownHostsFile $dir/known_hosts"
    echo "  StrictHostKeyChecking yes"
    echo
    echo "# Defaults for every host above."
    echo "Host *"
    echo "  Port 22"
    echo "  BatchMode yes"
    echo "  IdentitiesOnly yes"
    echo "  GlobalKnownHostsFile /dev/null"
    echo "  UpdateHostKeys no"
    echo "  CheckHostIP no"
    echo "  AddressFamily inet"
    echo "  ConnectTimeout 5"
    echo "  ControlMaster no"
    echo "  ControlPath none"
    echo "  LogLevel ERROR"
  } >"$dir/ssh_config"
}

# write_toml FILE DIR LOCAL_WORKER_NUM ADDR...: an msrun-ssh host file.
write_toml() {
  local file=$1 dir=$2 workers=$3 addr
  shift 3
  {
    echo "# msrun-ssh host file for the test cluster, generated by tests/cluster/cluster.sh up"
    echo "[defaults]"
    echo 'user = "root"'
    echo "port = 22"
    echo "identity_file = \"$dir/id_ed25519\""
    echo "known_hosts = \"$dir/known_hosts\""
    echo 'workdir = "/tmp"'
    echo "local_worker_num = $workers"
    echo 'env = { GLOO_SOCKET_IFNAME = "eth0" }'
    for addr in "$@"; do
      echo
      echo "[[hosts]]"
      echo "address = \"$addr\""
    done
  } >"$file"
}

# ---------------------------------------------------------------------------------------------
# up: network and processes

create_bridge() {
  # STP off and no forward delay: a port (veth) forwards as soon as it is up, also after `heal`.
  # An explicit MAC: otherwise a bridge takes the lowest MAC of its ports, changing as they join.
  ip link add "$BRIDGE" address "$BRIDGE_MAC" type bridge stp_state 0 forward_delay 0
  set_sysctl "/proc/sys/net/ipv6/conf/$BRIDGE/disable_ipv6" 1
  ip addr add "$BRIDGE_CIDR" dev "$BRIDGE"
  ip link set "$BRIDGE" up
}

# create_netns NS VETH MAC ADDR...: namespace with lo up and eth0 (MAC; peer of VETH on the
# bridge) carrying ADDR.../16. IPv6 is off on our links: no router solicitations or DAD chatter.
create_netns() {
  local ns=$1 veth=$2 mac=$3
  shift 3
  ip netns add "$ns"
  # Sysctls of the new namespace (before eth0 exists, so "default" applies to it). rp_filter off:
  # with everything on one /16 it would not matter anyway, but a distro default must not either.
  # shellcheck disable=SC2016  # expanded by the inner bash
  ip netns exec "$ns" bash -c '
    for f in ipv6/conf/all/disable_ipv6 ipv6/conf/default/disable_ipv6 \
             ipv4/conf/all/rp_filter ipv4/conf/default/rp_filter; do
      v=1; [[ $f == *rp_filter ]] && v=0
      [[ -w /proc/sys/net/$f ]] && echo $v >/proc/sys/net/$f || true
    done'
  ip link add "$veth" type veth peer name eth0 address "$mac" netns "$ns"
  set_sysctl "/proc/sys/net/ipv6/conf/$veth/disable_ipv6" 1
  ip link set "$veth" master "$BRIDGE"
  ip link set "$veth" up
  ip -n "$ns" link set lo up
  # One `ip -batch` instead of one process per address: the farm may carry thousands.
  local addr
  for addr in "$@"; do echo "addr add $addr/$PREFIX_LEN dev eth0"; done | ip -n "$ns" -batch -
  ip -n "$ns" link set eth0 up
}

# Permanent ARP entries everywhere: the root namespace knows every host and farm address, each host
# knows the bridge address, every other host and the farm addresses, the farm knows the bridge and
# the hosts. Without them a cut host stops being silent: once ARP for it fails (after ~20 s), new
# connections to it fail fast with "No route to host" instead of timing out.
# neighbour_lines DEV SELF N FARM_ADDR...: `ip -batch` lines for a namespace whose interface is
# DEV and which is host SELF (an index, "farm", or "root").
neighbour_lines() {
  local dev=$1 self=$2 n=$3 j addr
  shift 3
  if [[ $self != root ]]; then
    echo "neigh replace $BRIDGE_ADDR lladdr $BRIDGE_MAC dev $dev nud permanent"
  fi
  for ((j = 0; j < n; j++)); do
    # node_addr and node_mac, inlined: this loop runs N*N times.
    [[ $j == "$self" ]] || printf 'neigh replace 198.18.1.%d lladdr 02:12:01:00:%02x:%02x dev %s nud permanent\n' \
      $((10 + j)) $((j / 256)) $((j % 256)) "$dev"
  done
  if [[ $self != farm ]]; then
    for addr in "$@"; do echo "neigh replace $addr lladdr $FARM_MAC dev $dev nud permanent"; done
  fi
}

# add_static_neighbours N FARM_ADDR...
add_static_neighbours() {
  local n=$1 i
  shift
  neighbour_lines "$BRIDGE" root "$n" "$@" | ip -batch -
  for ((i = 0; i < n; i++)); do neighbour_lines eth0 "$i" "$n" "$@" | ip -n "msrs-node$i" -batch -; done
  if (($#)); then neighbour_lines eth0 farm "$n" | ip -n msrs-farm -batch -; fi
}

# Starts host NAME's init (and so its sshd) in namespace NS, detached: new session, stdio to
# NAME/sshd.log, our lock fd closed. Nothing may hold ctest's output pipe, or ctest would wait for
# the hosts to exit.
start_host() {
  local dir=$1 name=$2 ns=$3
  setsid ip netns exec "$ns" unshare --pid --fork --mount-proc --uts --mount \
    bash "$dir/hostinit.sh" "$name" "$dir/$name/sshd_config" \
    </dev/null >>"$dir/$name/sshd.log" 2>&1 {LOCK_FD}>&- &
}

# Waits (bounded by WAIT_SECONDS) until sshd's banner comes from every ADDR; on timeout prints the
# silent addresses to stderr and returns 1.
wait_for_banners() {
  local deadline=$((SECONDS + WAIT_SECONDS)) pending=("$@") next addr
  while :; do
    next=()
    for addr in "${pending[@]}"; do probe_ssh "$addr" || next+=("$addr"); done
    pending=("${next[@]}")
    ((${#pending[@]} == 0)) && return 0
    if ((SECONDS >= deadline)); then
      log "no sshd banner within ${WAIT_SECONDS} s from: ${pending[*]}"
      return 1
    fi
    sleep 0.2
  done
}

# Prints the tail of every host's sshd.log (for a failed `up`).
show_logs() {
  local log_file
  for log_file in "$1"/node*/sshd.log "$1"/farm/sshd.log; do
    [[ -s $log_file ]] || continue
    log "--- $log_file:"
    tail -n 20 "$log_file" >&2
  done
}

# up, phase 1: keys and every generated file (UP_ADDRS, UP_FARM_ADDRS are set by cmd_up).
up_files() {
  local dir=$1 n=${#UP_ADDRS[@]} m=${#UP_FARM_ADDRS[@]} i k
  log "up: generating keys and configs in $dir"
  prepare_dir "$dir"
  write_hostinit "$dir"
  for ((i = 0; i < n; i++)); do write_host_files "$dir" "node$i" 512; done
  if ((m > 0)); then write_host_files "$dir" farm 1024:30:2048 64; fi
  {
    for ((i = 0; i < n; i++)); do known_hosts_line "${UP_ADDRS[i]}" "$dir/node$i"; done
    for ((k = 0; k < m; k++)); do known_hosts_line "${UP_FARM_ADDRS[k]}" "$dir/farm"; done
  } >"$dir/known_hosts"
  write_ssh_config "$dir" "$n"
  write_toml "$dir/hosts.toml" "$dir" 2 "${UP_ADDRS[@]}"
  if ((m > 0)); then write_toml "$dir/farm.toml" "$dir" 1 "${UP_FARM_ADDRS[@]}"; fi
}

# up, phase 2: bridge, namespaces, veths, addresses, neighbour entries.
up_network() {
  local n=${#UP_ADDRS[@]} m=${#UP_FARM_ADDRS[@]} i
  log "up: creating bridge $BRIDGE and $n host(s)$( ((m > 0)) && echo " + farm of $m addresses")"
  create_bridge
  for ((i = 0; i < n; i++)); do
    create_netns "msrs-node$i" "msrs-v$i" "$(node_mac "$i")" "${UP_ADDRS[i]}"
  done
  if ((m > 0)); then create_netns msrs-farm msrs-vf "$FARM_MAC" "${UP_FARM_ADDRS[@]}"; fi
  add_static_neighbours "$n" "${UP_FARM_ADDRS[@]}"
}

# up, phase 3: every host's init and sshd; waits until each answers, then checks host-to-host.
up_start() {
  local dir=$1 n=${#UP_ADDRS[@]} m=${#UP_FARM_ADDRS[@]} i
  log "up: starting sshd on every host"
  for ((i = 0; i < n; i++)); do start_host "$dir" "node$i" "msrs-node$i"; done
  if ((m > 0)); then start_host "$dir" farm msrs-farm; fi

  # Every node, and the farm through its first and last address (one sshd serves them all).
  local probe=("${UP_ADDRS[@]}")
  if ((m > 0)); then probe+=("${UP_FARM_ADDRS[0]}" "${UP_FARM_ADDRS[m - 1]}"); fi
  if ! wait_for_banners "${probe[@]}"; then
    show_logs "$dir"
    die "up: not every sshd answers on port 22 (the cluster is left as is for inspection;" \
      "'cluster.sh down' removes it)"
  fi
  # Host-to-host traffic crosses the bridge (not the root namespace's IP stack). With br_netfilter
  # loaded and an iptables FORWARD policy of DROP (docker does this), it would silently vanish.
  local peer=${UP_ADDRS[n - 1]}
  if ((m > 0)); then peer=${UP_FARM_ADDRS[0]}; fi
  if [[ $peer != "${UP_ADDRS[0]}" ]] && ! probe_ssh "$peer" msrs-node0; then
    die "up: node0 cannot reach $peer across $BRIDGE although the root namespace can; is" \
      "br_netfilter loaded with an iptables FORWARD policy of DROP? (sysctl" \
      "net.bridge.bridge-nf-call-iptables=0 or an ACCEPT rule for $BRIDGE fixes it)"
  fi
}

# up, last: cluster.env, whose existence says "the cluster is up".
write_cluster_env() {
  local dir=$1
  {
    echo "# Test cluster, generated by tests/cluster/cluster.sh up. Source it: . $dir/cluster.env"
    echo "CLUSTER_DIR=$dir"
    echo "CLUSTER_HOSTS=${#UP_ADDRS[@]}"
    echo "CLUSTER_ADDRS=\"${UP_ADDRS[*]}\""
    echo "FARM_HOSTS=${#UP_FARM_ADDRS[@]}"
    echo "FARM_ADDRS=\"${UP_FARM_ADDRS[*]}\""
    echo "CLUSTER_SH=$SCRIPT_PATH"
  } >"$dir/cluster.env"
}

cmd_up() {
  local dir='' n='' m=0 i
  while (($#)); do
    case $1 in
      --dir) dir=${2:?--dir needs a value}; shift 2 ;;
      --hosts) n=${2:?--hosts needs a value}; shift 2 ;;
      --farm) m=${2:?--farm needs a value}; shift 2 ;;
      *) usage >&2; die "up: unknown argument '$1'" ;;
    esac
  done
  # Every check that can fail comes before anything changes.
  require_root_and_tools
  # Each host's rc is bind-mounted over root's ~/.bashrc (see hostinit.sh), which must exist.
  [[ -e $HOME/.bashrc ]] || touch "$HOME/.bashrc"
  [[ -n $dir ]] || die "up: --dir DIR is required"
  [[ $n =~ ^[0-9]{1,4}$ ]] || die "up: --hosts must be 1..$MAX_HOSTS"
  [[ $m =~ ^[0-9]{1,5}$ ]] || die "up: --farm must be 0..$MAX_FARM"
  n=$((10#$n)) m=$((10#$m)) # base 10 even with a leading zero
  ((n >= 1 && n <= MAX_HOSTS)) || die "up: --hosts must be 1..$MAX_HOSTS"
  ((m <= MAX_FARM)) || die "up: --farm must be 0..$MAX_FARM"
  dir=$(canonical_dir "$dir")
  check_dir_usable "$dir"
  check_root_not_locked
  UP_ADDRS=() UP_FARM_ADDRS=()
  for ((i = 0; i < n; i++)); do UP_ADDRS+=("$(node_addr "$i")"); done
  mapfile -t UP_FARM_ADDRS < <(farm_addrs "$m")

  take_lock
  log "up: removing any earlier cluster"
  teardown_network
  # Root without the capabilities (an unprivileged container) fails here; say so plainly.
  local err
  if ! err=$(ip netns add msrs-probe 2>&1); then
    die "up: root, but cannot create a network namespace ($err); a container needs" \
      "--privileged (CAP_SYS_ADMIN and CAP_NET_ADMIN) for the test cluster"
  fi
  ip netns del msrs-probe
  rm -f "$dir/cluster.env"
  # sshd's privilege-separation directory: `sshd -t` (while the configs are written) and sshd
  # itself refuse to run without it, and nothing creates it on a machine without systemd (/run is
  # an empty tmpfs after every boot). The hosts share the root filesystem, so one is enough.
  mkdir -p /run/sshd
  chmod 0755 /run/sshd

  up_files "$dir"
  up_network
  up_start "$dir"
  write_cluster_env "$dir"
  log "up: $n host(s) ready: ${UP_ADDRS[*]}$( ((m > 0)) &&
    echo "; farm: ${UP_FARM_ADDRS[0]}..${UP_FARM_ADDRS[m - 1]}")"
  log "up: try: ssh -F $dir/ssh_config node0 hostname"
}

# ---------------------------------------------------------------------------------------------
# Per-host subcommands.

# host_command ARGS...: the common prologue of the per-host subcommands: exactly one host
# argument, root and tools, and the host resolved (HOST_NS, HOST_VETH, HOST_NAME).
host_command() {
  if (($# != 1)); then
    usage >&2
    die "want exactly one host (index or 'farm')"
  fi
  require_root_and_tools
  resolve_host "$1"
}

cmd_pids() {
  host_command "$@"
  ns_pids "$HOST_NS"
}

# "pid cmdline" for every process of the host; "[comm]" when the command line is empty.
cmd_ps() {
  host_command "$@"
  local pid cmdline
  for pid in $(ns_pids "$HOST_NS"); do
    cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || continue
    cmdline=${cmdline% }
    if [[ -z $cmdline ]]; then
      cmdline="[$(cat "/proc/$pid/comm" 2>/dev/null)]" || continue
    fi
    echo "$pid $cmdline"
  done
}

# cut/heal: the root-side veth goes down/up. Packets to and from the host vanish: no FIN, no RST;
# established connections hang, new ones time out (for as long as the cut lasts: the neighbour
# entries are static, see add_static_neighbours). After heal, the connections resume.
cmd_link() {
  local state=$1
  shift
  host_command "$@"
  take_lock
  ip link set "$HOST_VETH" "$state"
  log "$HOST_NAME: link $HOST_VETH $state"
}

cmd_sshd_stop() {
  host_command "$@"
  take_lock
  local pids
  for _ in $(seq 50); do
    pids=$(ns_sshd_pids "$HOST_NS")
    if [[ -z $pids ]]; then
      log "$HOST_NAME: sshd stopped"
      return 0
    fi
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  die "$HOST_NAME: sshd processes survive SIGKILL: $(ns_sshd_pids "$HOST_NS" | tr '\n' ' ')"
}

# Asks the host's init to start sshd again (same config, same host key) and waits until it
# listens. Listening is read from the host's own /proc/net/tcp, so this works on a cut host too.
cmd_sshd_start() {
  host_command "$@"
  take_lock
  local init deadline
  if ns_listens_22 "$HOST_NS"; then
    log "$HOST_NAME: sshd already listening"
    return 0
  fi
  init=$(ns_init_pid "$HOST_NS") || die "$HOST_NAME: the host's init is gone; run 'cluster.sh up' again"
  kill -USR1 "$init"
  deadline=$((SECONDS + WAIT_SECONDS))
  until ns_listens_22 "$HOST_NS"; do
    ((SECONDS < deadline)) || die "$HOST_NAME: sshd does not listen after ${WAIT_SECONDS} s"
    sleep 0.1
  done
  log "$HOST_NAME: sshd started"
}

# slowrc I SECONDS: from the next login on, host I's login shell takes SECONDS before it runs
# any command (0: clean again). The rc file is found through the host's init's arguments.
# burnrc I CPU_SECONDS: the same, but the rc burns CPU_SECONDS of CPU.
cmd_slowrc() {
  local kind=${RC_KIND:-}
  (($# == 2)) || die "slowrc/burnrc/countrc/envrc want a host and one more argument"
  local seconds=$2
  if [[ $kind == count ]]; then
    [[ $seconds =~ ^/tmp/[A-Za-z0-9._/-]+$ ]] || die "countrc: '$seconds' is not a path under /tmp"
  elif [[ $kind == exports ]]; then
    [[ $seconds =~ ^([A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9._/-]*( |$))+$ ]] ||
      die "envrc: '$seconds' is not NAME=VALUE words (values of letters, digits, . _ / -)"
  else
    [[ $seconds =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "slowrc: '$seconds' is not a number of seconds"
  fi
  host_command "$1"
  local init config
  init=$(ns_init_pid "$HOST_NS") || die "$HOST_NAME: the host's init is gone"
  config=$(tr '\0' '\n' <"/proc/$init/cmdline" | tail -n 1)
  [[ -f $config ]] || die "$HOST_NAME: cannot find the host's directory (from $config)"
  write_rc "$(dirname "$config")/bashrc" "$seconds" "$kind"
  if [[ $kind == count ]]; then
    log "$HOST_NAME: login rc counts logins in $seconds"
  elif [[ $kind == exports ]]; then
    log "$HOST_NAME: login rc exports $seconds"
  else
    log "$HOST_NAME: login rc takes $seconds s${kind:+ of CPU}"
  fi
}

# throttle I PERCENT: a CPU cgroup of its own for host I's sshd processes (cgroup v1's cpu
# controller, else v2's cpu.max), with a quota of PERCENT % of one CPU; sessions opened from then
# on are forked by that sshd and inherit it. 0: every process of the cgroup back to the root, the
# cgroup removed.
cmd_throttle() {
  (($# == 2)) || die "throttle wants a host and a percentage"
  [[ $2 =~ ^[0-9]+$ ]] || die "throttle: '$2' is not a whole percentage"
  host_command "$1"
  local percent=$2 root=/sys/fs/cgroup/cpu quota=cpu.cfs_quota_us v2=0 pid
  if [[ ! -f $root/cpu.cfs_quota_us ]]; then
    root=/sys/fs/cgroup quota=cpu.max v2=1
    [[ -f $root/cgroup.controllers ]] || die "throttle: no cgroup CPU controller on this machine"
  fi
  local group=$root/msrs-throttle-$HOST_NAME
  if ((percent == 0)); then
    if [[ -d $group ]]; then
      while read -r pid; do
        echo "$pid" >"$root/cgroup.procs" 2>/dev/null || true
      done <"$group/cgroup.procs"
      rmdir "$group" 2>/dev/null || true
    fi
    log "$HOST_NAME: no CPU quota"
    return 0
  fi
  mkdir -p "$group"
  if ((v2)); then
    echo "$((percent * 1000)) 100000" >"$group/$quota"
  else
    echo 100000 >"$group/cpu.cfs_period_us"
    echo "$((percent * 1000))" >"$group/$quota"
  fi
  for pid in $(ns_sshd_pids "$HOST_NS"); do echo "$pid" >"$group/cgroup.procs"; done
  log "$HOST_NAME: sshd and what it starts get $percent% of one CPU"
}

cmd_status() {
  (($# == 0)) || die "status takes no arguments"
  require_root_and_tools
  local ns link addrs count listening
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    echo "bridge $BRIDGE $(ip -o -4 addr show dev "$BRIDGE" | awk '{ print $4 }' | tr '\n' ' ')"
  fi
  local any=0
  for ns in $(list_cluster_ns | sort -V); do
    any=1
    case $ns in
      msrs-farm) link=msrs-vf ;;
      *) link=msrs-v${ns#msrs-node} ;;
    esac
    addrs=$(ip -n "$ns" -o -4 addr show dev eth0 2>/dev/null | awk '{ sub(/\/.*/, "", $4); print $4 }')
    count=$(echo "$addrs" | grep -c . || true)
    if ((count > 1)); then addrs="$count addresses $(echo "$addrs" | head -n1)..$(echo "$addrs" | tail -n1)"; fi
    listening=no
    if ns_listens_22 "$ns"; then listening=yes; fi
    printf '%-11s link %-4s addr %-32s sshd-listening %-3s procs %s\n' "${ns#msrs-}" \
      "$(if ip -o link show "$link" 2>/dev/null | grep -q ',UP'; then echo up; else echo down; fi)" \
      "${addrs//$'\n'/ }" "$listening" "$(ns_pids "$ns" | grep -c . || true)"
  done
  ((any)) || echo "no cluster is up"
}

# slurm-up / slurm-down --dir DIR: tests/cluster/slurm.sh up|down DIR.
cmd_slurm() {
  local what=$1
  shift
  if (($# != 2)) || [[ $1 != --dir ]]; then
    usage >&2
    die "slurm-$what: want --dir DIR"
  fi
  exec bash "$(dirname "${BASH_SOURCE[0]}")/slurm.sh" "$what" "$(canonical_dir "$2")"
}

main() {
  local cmd=${1:-}
  (($#)) && shift
  case $cmd in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    pids) cmd_pids "$@" ;;
    ps) cmd_ps "$@" ;;
    cut) cmd_link down "$@" ;;
    heal) cmd_link up "$@" ;;
    sshd-stop) cmd_sshd_stop "$@" ;;
    sshd-start) cmd_sshd_start "$@" ;;
    status) cmd_status "$@" ;;
    slowrc) cmd_slowrc "$@" ;;
    burnrc) RC_KIND=burn cmd_slowrc "$@" ;;
    countrc) RC_KIND=count cmd_slowrc "$@" ;;
    envrc) RC_KIND=exports cmd_slowrc "$@" ;;
    throttle) cmd_throttle "$@" ;;
    slurm-up | slurm-down) cmd_slurm "${cmd#slurm-}" "$@" ;;
    -h | --help | help) usage ;;
    *)
      usage >&2
      exit 2
      ;;
  esac
}

main "$@"
