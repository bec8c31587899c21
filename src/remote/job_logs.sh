#!/bin/sh
# `msrun-ssh logs` on one host (sent after sweep.sh, whose J is job $1): prints the log $2 of one
# process of the detached job. With $3 = follow it goes on printing what is appended to the log,
# every half second, until no process of the job is left on the host, and then prints the rest:
# the end is checked before each read, so the last read holds everything the job wrote. A log
# that shrinks (truncated) is read again from its start. The launcher keeps the channel's stdin
# open: its end (EOF: the launcher stopped, was interrupted or lost) ends the loop at once, so no
# reader outlives its `msrun-ssh logs`.
log=$2
if [ "$3" != follow ]; then
  exec cat -- "$log"
fi
off=0
while :; do
  [ -n "$(pids)" ] || over=1
  size=$(wc -c < "$log" 2>/dev/null) || size=0
  [ "$size" -lt "$off" ] && off=0
  if [ "$size" -gt "$off" ]; then
    tail -c "+$((off + 1))" -- "$log" | head -c "$((size - off))"
    off=$size
  fi
  [ -n "$over" ] && exit 0
  if command -v timeout >/dev/null 2>&1; then
    timeout 0.5 cat >/dev/null
    [ $? -eq 124 ] || exit 0
  else
    sleep 0.5
  fi
done
