#!/bin/sh
# Shared by the watchdog and `stop` (sent in front of watchdog.sh or stop.sh): finds and signals
# every process of job $J (the program's first argument) on this host. While waiting out the
# grace, teardown keeps reading the launcher: 'K' (a second Ctrl-C) ends the wait at once,
# heartbeats are still echoed; once stdin is closed it simply sleeps.
#
# A process of the job is found in either of its two lives (docs/architecture.md, "Teardown"):
#  - started: /proc/PID/environ, the environment it was started with, holds MSRUN_SSH_JOB=$J
#    (grandchildren that left the process group too). grep -z reads it as NUL separated records.
#  - still in the user's login shell (its rc can take seconds: conda, module load), before the
#    `exec env` of its command: the shell has no marker in its environment yet, but its command
#    line holds the command string, and with it 'MSRUN_SSH_JOB=$J' (quoted: the exact spelling of
#    process_command). What the rc started runs in the shell's process group.
# Every pid found is signalled as a process group when it leads one (sshd makes each command a
# session leader, so that reaches the rc's children), else alone. One grep reads both files of
# every process. The [=] keeps the pattern from matching grep's own command line; the watchdog
# and `stop` carry neither spelling; zombies have an empty environ and count as gone.
# (Over the launch agent the agent is the watchdog and sweeps in Perl: agent.pl.)
# JOBS (stop.sh sets it): the ids swept, when more than $J (a restarted job's attempts).
J=$1 JOBS=
CMDLINES='/proc/[0-9]*/cmdline'

# Sets P to the pids of the job's processes, found by one grep in this shell (a fork and an exec
# per sweep, nothing more): the environments of every process for the marker, CMDLINES (if any)
# for its quoted spelling. A pid may come twice. On a host of some 30,000 processes their paths
# are more than one exec may carry (E2BIG: status 126, or 2 with nothing found in older ash
# shells, which give 2 for any exec error): xargs then hands them to as many greps as they need.
find_pids() {
  P=
  set --
  for j in ${JOBS:-$J}; do
    set -- "$@" -e "^MSRUN_SSH_JOB[=]$j\$"
    [ -z "$CMDLINES" ] || set -- "$@" -e "'MSRUN_SSH_JOB[=]$j'"
  done
  # shellcheck disable=SC2086 # CMDLINES: a pattern, or nothing
  hits=$(grep -lz "$@" /proc/[0-9]*/environ $CMDLINES 2>/dev/null)
  grc=$?
  if [ $grc -eq 126 ] || { [ $grc -eq 2 ] && [ -z "$hits" ]; }; then
    # shellcheck disable=SC2086
    hits=$(printf '%s\n' /proc/[0-9]*/environ $CMDLINES | xargs grep -lz "$@" 2>/dev/null)
  fi
  for f in $hits; do
    f=${f#/proc/}
    P="$P ${f%%/*}"
  done
}
# The same pids, one per line.
pids() {
  find_pids
  for p in $P; do echo "$p"; done
}
# Signals ($1: TERM, KILL) every process of the job but this shell; prints "killed PID SIGNAME
# COMMAND" per process signalled and adds its pid to SIGNALLED; status 0 when it signalled one.
signal_all() {
  found=1
  find_pids
  for p in $P; do
    [ "$p" = "$$" ] && continue
    c=$(tr '\000' ' ' 2>/dev/null < "/proc/$p/cmdline")
    { kill -"$1" -"$p" || kill -"$1" "$p"; } 2>/dev/null && {
      found=0; SIGNALLED="$SIGNALLED $p"; echo "killed $p SIG$1 $c"
    }
  done
  return $found
}
# The State of status file $1 in s ("" once it is gone); the name in a stat file may hold a
# newline, a status file's is escaped.
state_of() {
  s=
  { while read -r k s; do [ "$k" = State: ] && break; done < "$1"; } 2>/dev/null
}
# Status 0 when process $1 has ended: gone, or a zombie whose threads have all ended. A process's
# environ reads empty (find_pids sees it no more) from the moment the kernel lets go of its
# memory, before it closes its files: one of many GB holds its sockets (the torch master's port)
# and devices for some hundreds of ms more; a thread left after its main thread ended holds them
# as long as it runs.
ended() {
  for t in /proc/"$1"/task/*/status; do
    state_of "$t"
    case $s in ''|Z*|X*) ;; *) return 1 ;; esac
  done
}
ended_all() {
  for p in $SIGNALLED; do ended "$p" || return 1; done
}
# SIGKILL to each process in SIGNALLED that the last find_pids did not see and whose main thread
# is a zombie while another runs on; a line "killed PID SIGKILL" for each. (Only then: a pid
# freed and taken again by another process meanwhile has a main thread of its own.)
kill_unseen() {
  for p in $SIGNALLED; do
    case " $P " in *" $p "*) continue ;; esac
    state_of "/proc/$p/status"
    case $s in Z*) ended "$p" || { kill -KILL "$p" 2>/dev/null && echo "killed $p SIGKILL"; } ;; esac
  done
}
# Sends $1 (STOP, CONT) to every process of the job but this shell, saying nothing: a suspension.
signal_quiet() {
  find_pids
  for p in $P; do
    [ "$p" = "$$" ] || kill -"$1" -"$p" 2>/dev/null || kill -"$1" "$p" 2>/dev/null || :
  done
}
# Every process of the job that leads its process group (what sshd started, not its children)
# and runs Python gets SIGABRT: with PYTHONFAULTHANDLER=1 it prints every thread's stack to its
# stderr and ends. One second for them to write, then the usual teardown.
abort_pythons() {
  find_pids
  for p in $P; do
    [ "$p" = "$$" ] && continue
    kill -0 -"$p" 2>/dev/null || continue
    case "$(readlink "/proc/$p/exe" 2>/dev/null)" in *python*) kill -ABRT "$p" 2>/dev/null ;; esac
  done
  sleep 1
}
# Up to $1 steps of $3 s (default 0.2) while $2 (a function) succeeds, reading the launcher
# meanwhile: heartbeats are echoed, 'K' (a second Ctrl-C) ends the wait with status 1. Once stdin
# is closed it simply sleeps.
waiting() {
  i=0
  while [ "$i" -lt "$1" ] && $2; do
    c=$(timeout "${3:-0.2}" dd bs=1 count=1 2>/dev/null); rc=$?
    case "$c" in
      K) return 1 ;;
      h) echo h ;;
      *) i=$((i+1)); [ $rc -eq 0 ] && sleep "${3:-0.2}" ;;
    esac
  done
  return 0
}
living() { find_pids; [ -n "$P" ] || ! ended_all; }
ending() { ! ended_all; }
# SIGTERM, then up to $1 steps of 0.2 s while any process of the job lives, then SIGKILL (also to
# a process signalled that lives on unseen), then up to 5 s until every process signalled has
# ended (ended_all), unless 'K' came.
teardown() {
  SIGNALLED=
  signal_all TERM || return 0
  waiting "$1" living || { signal_all KILL; return 0; }
  signal_all KILL
  kill_unseen
  waiting 100 ending 0.05 || :  # 5 s; what SIGKILL ended is mostly gone within milliseconds
}
# Removes the job's stack-dump directory on this host (stack_site.sh) once its processes are
# gone; a link in its place is not followed, nor a directory of that name that is another user's.
forget_stacks() {
  for j in ${JOBS:-$J}; do
    d=${TMPDIR:-/tmp}/msrun-ssh-stacks-$j
    if [ -d "$d" ] && [ ! -L "$d" ] && [ -O "$d" ]; then rm -rf -- "$d"; fi
  done
}
