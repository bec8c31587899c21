#!/bin/sh
# The keeper of one detached process (detached_command, command.h), started by setsid with the
# stem of the process's state files ($1: <log dir>/.msrun-ssh/<job id>/<rank>) and the process's
# command after it. The command runs in an inner sh that writes its own pid to $1.pid and execs
# the command (which keeps that pid); once it ends, its exit status (128+N after signal N) goes to
# $1.exit. The trap lets the keeper outlive a SIGTERM, SIGINT or SIGHUP sent to its process group
# (stop), so that the status is still written; the command gets those signals at their defaults (a
# caught signal is reset by exec).
# (_ms_s, _ms_j: names no environment holds; the command inherits the keeper's.)
_ms_s=$1
shift
trap : TERM INT HUP
# The keeper's own stderr goes nowhere: a shell says "Terminated" when its child was killed (dash
# on the command's stderr), and the log must hold only what the process wrote. The command gets the
# log back as its stderr (fd 3) first thing, so that its shell's own errors (no such program) are
# in the log.
exec 3>&2 2>/dev/null
# The job id, from the stem.
_ms_j=${_ms_s%/*}
_ms_j=${_ms_j##*/}
# The command and everything it starts carry the job's marker (set here, not on the command line
# after the keeper's: a sweep takes a process whose command line holds the word MSRUN_SSH_JOB=ID for
# one of the job's, and stop's SIGKILL would end the keeper before it wrote the status) and the
# keeper's pid in their environment.
# shellcheck disable=SC2016
MSRUN_SSH_JOB=$_ms_j MSRUN_SSH_KEEPER=$$ sh -c 'exec 2>&3 3>&-; echo $$ > "$0.pid"; exec "$@"' "$_ms_s" "$@"
rc=$?
# What the command left behind (a child in a session of its own, a daemon) ends with it, as the
# end of an attached job takes it along: SIGTERM, up to 2 s, SIGKILL. Then the status: a process
# "ended" leaves nothing running. Zombies have an empty environ and count as gone.
# (Past what one exec carries, some 30,000 processes, xargs hands the paths to several greps, as
# in sweep.sh's find_pids.)
# The environ files of the processes whose environment holds the line $1 (a grep pattern).
holding() {
  hits=$(grep -lz "$1" /proc/[0-9]*/environ 2>/dev/null)
  grc=$?
  if [ $grc -eq 126 ] || { [ $grc -eq 2 ] && [ -z "$hits" ]; }; then
    hits=$(printf '%s\n' /proc/[0-9]*/environ | xargs grep -lz "$1" 2>/dev/null)
  fi
  printf '%s' "$hits"
}
left() {
  # shellcheck disable=SC2046 # the words are paths
  printf '%s\n' $(holding "^MSRUN_SSH_KEEPER[=]$$\$") | sed 's,^/proc/,,;s,/.*,,'
}
sig=TERM i=0
while [ -n "$(left)" ] && [ "$i" -le 10 ]; do
  [ "$i" -eq 10 ] && sig=KILL
  for p in $(left); do kill -"$sig" "$p" 2>/dev/null; done
  [ "$i" -eq 0 ] || sleep 0.2
  i=$((i+1))
done
# The last of the job's processes on this host to end removes the job's stack-dump directory
# (stack_dir.sh), as an attached job's watchdog does: the keeper whose process (and leftovers) went
# last finds no process of the job here any more.
if [ -z "$(holding "^MSRUN_SSH_JOB[=]$_ms_j\$")" ]; then
  d=${TMPDIR:-/tmp}/msrun-ssh-stacks-$_ms_j
  if [ -d "$d" ] && [ ! -L "$d" ] && [ -O "$d" ]; then rm -rf -- "$d"; fi
fi
echo $rc > "$_ms_s.exit"
