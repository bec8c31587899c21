#!/usr/bin/env bash
# test_cluster.sh - end-to-end checks of the test cluster itself (tests/cluster/cluster.sh).
#
# usage: test_cluster.sh [basic|gone|must-fail]       (default: basic)
#   basic      ctest cluster.basic: the cluster made by `cluster.sh up` (in $MSRUN_SSH_CLUSTER_DIR)
#              behaves as the integration tests assume: distinct hosts reachable with only the
#              generated files, cut/heal and sshd-stop/sshd-start do what they say.
#   gone       ctest cluster.gone (runs after `cluster.sh down`): no msrs-* namespace or link left.
#   must-fail  ctest cluster.harness_fails (WILL_FAIL): one check with a wrong expectation, to
#              prove that a failing check really fails the test.
# Exit status: 0 all checks passed, 1 a check failed (message on stderr), 77 skipped (not root, or
# no cluster is up), loudly.
#
# Every remote command goes through `ssh -F $DIR/ssh_config nodeI` and is bounded by `timeout`;
# every wait is bounded by a deadline.
set -euo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
readonly CLUSTER_SCRIPT=$HERE/cluster.sh
readonly SSH_TIMEOUT=20       # seconds for any single ssh command
readonly HEAL_SECONDS=10      # how long a healed / restarted host may take to answer again
readonly MARKER_SLEEP=4321    # `sleep 4321` marks the session process that must survive sshd-stop

# cluster.sh through bash: works even where the executable bit got lost.
cluster() { bash "$CLUSTER_SCRIPT" "$@"; }

step() { printf '\n== %s\n' "$*"; }
ok() { printf '   ok: %s\n' "$*"; }
fail() {
  printf '\nFAIL: %s\n' "$*" >&2
  exit 1
}
skip() {
  local stars
  stars=$(printf '*%.0s' {1..78})
  printf '\n%s\n*** SKIP: %s\n%s\n\n' "$stars" "$*" "$stars" >&2
  exit 77
}

# check DESCRIPTION ACTUAL EXPECTED: prints what is checked; fails the test on a mismatch.
check_eq() {
  if [[ $2 == "$3" ]]; then
    ok "$1: $2"
  else
    fail "$1: got '$2', want '$3'"
  fi
}

require_root() {
  [[ $(id -u) -eq 0 ]] || skip "cluster tests need root (running as uid $(id -u)); run ctest as root"
}

# Loads $DIR/cluster.env, or skips (loudly) when no cluster is up.
load_cluster() {
  require_root
  DIR=${MSRUN_SSH_CLUSTER_DIR:-}
  [[ -n $DIR ]] || skip "MSRUN_SSH_CLUSTER_DIR is not set (ctest sets it; by hand: export it" \
    "to the --dir given to 'cluster.sh up')"
  [[ -r $DIR/cluster.env ]] || skip "no cluster is up: $DIR/cluster.env is missing (did" \
    "'cluster.sh up --dir $DIR --hosts 3' run and succeed?)"
  # shellcheck source=/dev/null
  . "$DIR/cluster.env"
  [[ -e /run/netns/msrs-node0 ]] || skip "no cluster is up: $DIR/cluster.env exists but there is" \
    "no namespace msrs-node0 (stale dir of an earlier run?)"
  ((CLUSTER_HOSTS >= 2)) || fail "these checks need at least 2 hosts, the cluster has $CLUSTER_HOSTS"
}

# remote HOST COMMAND...: ssh with nothing but the generated files.
remote() {
  local host=$1
  shift
  timeout "$SSH_TIMEOUT" ssh -F "$DIR/ssh_config" "$host" "$@"
}

# answers HOST: true if HOST runs a command within a 2 s connect timeout.
answers() { timeout 10 ssh -F "$DIR/ssh_config" -o ConnectTimeout=2 "$1" true 2>/dev/null; }

# wait_answers HOST: polls (bounded by HEAL_SECONDS) until HOST answers.
wait_answers() {
  local deadline=$((SECONDS + HEAL_SECONDS))
  until answers "$1"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
}

# Root-namespace pids of host I's processes whose comm is sshd.
sshd_pids_of() {
  local pid
  for pid in $(cluster pids "$1"); do
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == sshd ]] && echo "$pid"
  done
  return 0
}

# If a check fails half-way, do not leave host 1 cut or without sshd for the tests that follow in
# the same fixture.
restore_host1() {
  cluster heal 1 >/dev/null 2>&1 || true
  cluster sshd-start 1 >/dev/null 2>&1 || true
}

# What one host says about itself: hostname, pid and net namespace, the command line of its pid 1
# and the pid of its sshd listener, both as seen inside the host. Sent on stdin, so the remote
# shell (which also sources ~/.bashrc) gets no quoting puzzles.
# shellcheck disable=SC2016  # expanded by the remote shell
readonly PROBE_SCRIPT='
hostname
readlink /proc/self/ns/pid
readlink /proc/self/ns/net
tr "\0" " " </proc/1/cmdline; echo
for p in /proc/[0-9]*; do
  [[ $(tr "\0" " " 2>/dev/null <"$p/cmdline") == "sshd: "*"[listener]"* ]] && echo "${p#/proc/}"
done
true
'

check_files() {
  step "generated files in $DIR"
  local n=$CLUSTER_HOSTS f
  for f in id_ed25519 id_ed25519.pub authorized_keys known_hosts ssh_config hosts.toml; do
    [[ -s $DIR/$f ]] || fail "$DIR/$f is missing or empty"
  done
  ok "id_ed25519(.pub) authorized_keys known_hosts ssh_config hosts.toml exist"
  check_eq "mode of id_ed25519" "$(stat -c %a "$DIR/id_ed25519")" 600
  check_eq "known_hosts lines (hosts + farm addresses)" "$(grep -c . "$DIR/known_hosts")" \
    "$((n + FARM_HOSTS))"
  check_eq "[[hosts]] tables in hosts.toml" "$(grep -c '^\[\[hosts\]\]$' "$DIR/hosts.toml")" "$n"
  check_eq "addresses in hosts.toml" \
    "$(sed -n 's/^address = "\(.*\)"$/\1/p' "$DIR/hosts.toml" | tr '\n' ' ')" "$CLUSTER_ADDRS "
}

check_hosts_distinct() {
  local i out name pidns netns init sshd_pid local_pidns lines outer nspid
  local -A seen_pidns=() seen_netns=()
  local_pidns=$(readlink /proc/self/ns/pid)
  for ((i = 0; i < CLUSTER_HOSTS; i++)); do
    step "node$i: log in with ssh -F $DIR/ssh_config node$i (key, known_hosts, StrictHostKeyChecking)"
    out=$(remote "node$i" bash -s <<<"$PROBE_SCRIPT") || fail "ssh node$i failed (exit $?)"
    mapfile -t lines <<<"$out"
    name=${lines[0]:-} pidns=${lines[1]:-} netns=${lines[2]:-} init=${lines[3]:-}
    sshd_pid=${lines[4]:-}
    check_eq "hostname of node$i" "$name" "node$i"
    [[ $pidns != "$local_pidns" ]] || fail "node$i shares the test's pid namespace $pidns"
    [[ -z ${seen_pidns[$pidns]:-} ]] || fail "node$i shares pid namespace $pidns with ${seen_pidns[$pidns]}"
    [[ -z ${seen_netns[$netns]:-} ]] || fail "node$i shares net namespace $netns with ${seen_netns[$netns]}"
    seen_pidns[$pidns]=node$i seen_netns[$netns]=node$i
    ok "own pid namespace $pidns and net namespace $netns"
    [[ $init == "bash $DIR/hostinit.sh node$i "* ]] ||
      fail "node$i: pid 1 inside the host is '$init', want the host's hostinit.sh"
    ok "pid 1 inside node$i is its init: $init"
    # The listener as the root namespace sees it: its NSpid line must be "<outer> <inner>".
    outer=$(cluster ps "$i" | awk '/^[0-9]+ sshd: .*\[listener\]/ { print $1; exit }')
    [[ -n $outer ]] || fail "cluster.sh ps $i shows no sshd listener"
    nspid=$(awk '$1 == "NSpid:" { $1 = ""; print substr($0, 2) }' "/proc/$outer/status")
    check_eq "NSpid of node$i's sshd listener (outside inside)" "$nspid" "$outer $sshd_pid"
    # A fresh host runs sshd as pid 2; after sshd-start the pid grows (each login's ~/.bashrc may
    # fork a lot), so "small" means: far below the root namespace's pid, and below 10000.
    if [[ ! $sshd_pid =~ ^[0-9]+$ ]] || ((sshd_pid >= 10000 || sshd_pid == outer)); then
      fail "node$i: sshd's pid inside the host is '$sshd_pid' (outside: $outer), want a small one"
    fi
    ok "sshd is pid $sshd_pid inside node$i, pid $outer outside"
  done
}

# The remote shell sources root's ~/.bashrc: it must neither fail nor print on stdout (which would
# corrupt any protocol spoken over the channel). Stray stderr is reported, not fatal.
check_shell_and_sftp() {
  step "node0: a remote command prints nothing on stdout (~/.bashrc is sourced)"
  local out err rc=0
  err=$(mktemp)
  out=$(remote node0 true 2>"$err") || rc=$?
  check_eq "exit status of 'ssh node0 true'" "$rc" 0
  check_eq "stdout of 'ssh node0 true'" "$out" ""
  if [[ -s $err ]]; then printf '   warning: stderr of ssh node0 true: %s\n' "$(cat "$err")"; fi
  rm -f "$err"

  step "node0: sftp subsystem (internal-sftp)"
  out=$(printf 'pwd\n' | timeout "$SSH_TIMEOUT" sftp -F "$DIR/ssh_config" -b - node0 2>&1) ||
    fail "sftp node0 failed: $out"
  [[ $out == *"Remote working directory: /root"* ]] || fail "unexpected sftp output: $out"
  ok "sftp pwd: /root"
}

check_pids_ps() {
  step "cluster.sh pids 0 / ps 0 list node0's processes"
  local pids listing
  pids=$(cluster pids 0)
  [[ -n $pids ]] || fail "cluster.sh pids 0 printed nothing"
  [[ ! $pids =~ [^0-9$'\n'] ]] || fail "cluster.sh pids 0 printed more than pids: $pids"
  ok "$(echo "$pids" | wc -l) pids"
  listing=$(cluster ps 0)
  grep -Eq '^[0-9]+ sshd: /usr/sbin/sshd -D -e -f [^ ]+/node0/sshd_config' <<<"$listing" ||
    fail "cluster.sh ps 0 shows no sshd listener: $listing"
  ok "ps shows node0's sshd listener"
}

check_cut_heal() {
  step "cut 1: node1 stops answering (ssh -o ConnectTimeout=2 fails), the others do not"
  cluster cut 1
  if answers node1; then fail "node1 still answers after 'cluster.sh cut 1'"; fi
  ok "node1 does not answer"
  answers node0 || fail "node0 stopped answering when node1 was cut"
  ok "node0 still answers"

  step "heal 1: node1 answers again within ${HEAL_SECONDS} s"
  cluster heal 1
  wait_answers node1 || fail "node1 does not answer ${HEAL_SECONDS} s after 'cluster.sh heal 1'"
  ok "node1 answers"
}

check_sshd_stop_start() {
  step "sshd-stop 1: every sshd of node1 dies (listener and per-connection); its sessions' processes survive"
  # A live session, so that there is a per-connection sshd to kill.
  timeout "$SSH_TIMEOUT" ssh -F "$DIR/ssh_config" node1 "exec sleep $MARKER_SLEEP" </dev/null \
    >/dev/null 2>&1 &
  local session=$! deadline=$((SECONDS + 10)) sleeper
  until sleeper=$(cluster ps 1 | awk -v c="sleep $MARKER_SLEEP" '$0 ~ c { print $1 }') &&
    [[ -n $sleeper ]]; do
    ((SECONDS < deadline)) || fail "the session's 'sleep $MARKER_SLEEP' never appeared on node1"
    sleep 0.2
  done
  local before
  before=$(sshd_pids_of 1 | wc -l)
  ((before >= 2)) || fail "want a listener and a per-connection sshd on node1, found $before sshd"
  ok "$before sshd processes on node1 before"
  cluster sshd-stop 1
  check_eq "sshd processes on node1 after sshd-stop" "$(sshd_pids_of 1 | wc -l)" 0
  wait "$session" || true # the client saw its connection die
  kill -0 "$sleeper" 2>/dev/null || fail "the session's 'sleep $MARKER_SLEEP' died with sshd"
  ok "the session's process (pid $sleeper) survives, reparented to the host's init"
  if answers node1; then fail "node1 still answers ssh after sshd-stop"; fi
  ok "node1 refuses ssh"
  kill "$sleeper" 2>/dev/null || true

  step "sshd-start 1: node1 answers again, with the same host key (StrictHostKeyChecking yes)"
  cluster sshd-start 1
  wait_answers node1 || fail "node1 does not answer after 'cluster.sh sshd-start 1'"
  check_eq "hostname of node1" "$(remote node1 hostname)" node1
}

check_status() {
  step "cluster.sh status lists every host with sshd listening"
  local listing i
  listing=$(cluster status)
  for ((i = 0; i < CLUSTER_HOSTS; i++)); do
    grep -Eq "^node$i +link up +addr $(printf '198.18.1.%d' $((10 + i))) +sshd-listening yes" \
      <<<"$listing" || fail "status line of node$i is missing or wrong: $listing"
  done
  ok "$CLUSTER_HOSTS hosts up and listening"
}

test_basic() {
  load_cluster
  trap restore_host1 EXIT
  check_files
  check_hosts_distinct
  check_shell_and_sftp
  check_pids_ps
  check_cut_heal
  check_sshd_stop_start
  check_status
  printf '\nPASS: cluster of %s hosts in %s\n' "$CLUSTER_HOSTS" "$DIR"
}

test_gone() {
  require_root
  step "no msrs-* network namespace is left"
  local left
  left=$(ip netns list | awk '$1 ~ /^msrs-/ { print $1 }' | tr '\n' ' ')
  [[ -z $left ]] || fail "namespaces left after cluster.sh down: $left"
  ok "ip netns list shows none"
  step "no msrs-* link is left in the root namespace"
  left=$(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); if ($2 ~ /^msrs-/) print $2 }' |
    tr '\n' ' ')
  [[ -z $left ]] || fail "links left after cluster.sh down: $left"
  ok "ip link shows none"
  if [[ -n ${MSRUN_SSH_CLUSTER_DIR:-} ]]; then
    step "$MSRUN_SSH_CLUSTER_DIR was emptied"
    [[ ! -e $MSRUN_SSH_CLUSTER_DIR/cluster.env ]] || fail "$MSRUN_SSH_CLUSTER_DIR/cluster.env is left"
    ok "no cluster.env"
  fi
  printf '\nPASS: nothing of the cluster is left\n'
}

# A real check with a wrong expectation: must exit 1 (ctest inverts it with WILL_FAIL).
test_must_fail() {
  load_cluster
  step "deliberately wrong expectation: node0 calls itself node-that-does-not-exist"
  check_eq "hostname of node0" "$(remote node0 hostname)" node-that-does-not-exist
}

case ${1:-basic} in
  basic) test_basic ;;
  gone) test_gone ;;
  must-fail) test_must_fail ;;
  *)
    echo "usage: test_cluster.sh [basic|gone|must-fail]" >&2
    exit 2
    ;;
esac
