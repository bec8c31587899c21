#!/bin/sh
# A stand-in for Slurm's srun in the unit tests (srun_test.cc): accepts exactly the options
# srun_argv gives (each required), records its argv (NUL-separated) in $FAKE_SRUN_LOG, and runs
# `/bin/sh -c COMMAND` here as the "step": in a session of its own, with srun's stdin. Like srun
# it forwards SIGUSR1/SIGUSR2 to the step, turns SIGTERM/SIGHUP/SIGQUIT into a SIGKILL of the whole
# step and exits with the step's status (128+N after signal N). The node name steers it:
# down*: srun's error for a node outside the allocation, exit 1; slow*: the step never starts.
[ -n "$FAKE_SRUN_LOG" ] && printf '%s\0' "$0" "$@" >"$FAKE_SRUN_LOG"
if [ -z "$SLURM_JOB_ID" ]; then
  echo "srun: error: fake srun: SLURM_JOB_ID is not set" >&2
  exit 1
fi
need=0 node=
for a; do
  case $a in
    --nodes=1 | --ntasks=1 | --ntasks-per-node=1 | --overlap | --cpu-bind=none | \
      --export=ALL | --kill-on-bad-exit=1 | --unbuffered | --quiet) need=$((need + 1)) ;;
    --nodelist=?*) node=${a#--nodelist=} ;;
    -*) echo "srun: unrecognized option '$a'" >&2; exit 1 ;;
    *) break ;;
  esac
  shift
done
if [ "$need" != 9 ] || [ -z "$node" ] || [ $# != 3 ] || [ "$1" != /bin/sh ] || [ "$2" != -c ]; then
  echo "srun: error: fake srun: unexpected arguments" >&2
  exit 1
fi
case $node in
  down*)
    echo "srun: error: Unable to create step for job $SLURM_JOB_ID: Invalid node name specified" >&2
    exit 1 ;;
  slow*)
    exec sleep 30 ;;
esac
pid='' got=''
trap 'got=1; [ -n "$pid" ] && kill -KILL -"$pid" 2>/dev/null' TERM HUP QUIT
trap 'got=1; [ -n "$pid" ] && kill -USR1 -"$pid" 2>/dev/null' USR1
trap 'got=1; [ -n "$pid" ] && kill -USR2 -"$pid" 2>/dev/null' USR2
# An asynchronous command's stdin is /dev/null before its own redirections: keep srun's as 9.
exec 9<&0
setsid /bin/sh -c "$3" <&9 9<&- &
pid=$!
s=
while [ -z "$s" ]; do
  got=
  wait "$pid"
  s=$?
  # A signal interrupted the wait: the step's own end is still to come.
  [ -n "$got" ] && s=
done
exit "$s"
