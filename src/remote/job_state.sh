#!/bin/sh
# `msrun-ssh status` and `list` on one host (sent after sweep.sh, whose J is job $1): how each
# process of the detached job is doing. Arguments after the job: per process its rank word
# ("sched" or the global rank), the stem of its state files (detached.sh) and its log. Prints
#   hz TICKS_PER_SECOND
#   alive N                                  processes of the job alive on the host (any kind)
#   proc RANK PID STATE STATUS TICKS LAST    per process: STATE alive, ended or unknown; STATUS
#                                            its exit status or -; TICKS its user+system CPU time
#                                            (alive ones) or -; LAST the last line of its log, at
#                                            most 200 bytes, the part after its last CR
# A pid counts as the process's while its environment still carries the job's marker.
shift
echo "hz $(getconf CLK_TCK 2>/dev/null || echo 100)"
echo "alive $(pids | grep -c .)"
while [ $# -ge 3 ]; do
  rank=$1 stem=$2 log=$3
  shift 3
  pid=$(cat -- "$stem.pid" 2>/dev/null) || pid=-
  [ -n "$pid" ] || pid=-
  status=$(cat -- "$stem.exit" 2>/dev/null) || status=-
  [ -n "$status" ] || status=-
  state=unknown ticks=-
  # Its status first: once written the process has ended, whatever now runs under its pid (another
  # process of the job may have been given it).
  if [ "$status" != - ]; then
    state=ended
  elif [ "$pid" != - ] && grep -qz "^MSRUN_SSH_JOB[=]$J\$" "/proc/$pid/environ" 2>/dev/null; then
    state=alive
    ticks=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{ print $12 + $13 }')
    [ -n "$ticks" ] || ticks=-
  fi
  last=$(tail -n 1 -- "$log" 2>/dev/null | tr '\r' '\n' | grep -v '^$' | tail -n 1 | cut -b 1-200)
  echo "proc $rank $pid $state $status $ticks $last"
done
