#!/bin/sh
# Sent after sweep.sh when a worker of job $1 failed and is started again in place
# (--restart_policy process): ends what its failed run left on this host (a grandchild in a
# session of its own still holding the run's output open, so that its channel never closes),
# with a grace of $2 steps of 0.2 s between SIGTERM and SIGKILL. The rest of the arguments are the
# run's own NAME=VALUE words (MS_ROLE=MS_WORKER RANK_ID=3, or RANK=3): a process of the job is
# the failed run's only when its environment holds every one of them. Prints what it signalled.
G=$2
shift 2
# The words one per line, read back without splitting at blanks or globbing ("RANK=x y *").
M=$(printf '%s\n' "$@")
NL='
'
# sweep.sh's find_pids, narrowed to the failed run's processes.
find_pids() {
  P=
  hits=$(grep -lz -e "^MSRUN_SSH_JOB[=]$J\$" /proc/[0-9]*/environ 2>/dev/null)
  grc=$?
  if [ $grc -eq 126 ] || { [ $grc -eq 2 ] && [ -z "$hits" ]; }; then  # as sweep.sh's find_pids
    hits=$(printf '%s\n' /proc/[0-9]*/environ | xargs grep -lz -e "^MSRUN_SSH_JOB[=]$J\$" 2>/dev/null)
  fi
  for f in $hits; do
    mine=1
    set -f
    ifs=$IFS IFS=$NL
    for m in $M; do grep -qzxF -e "$m" "$f" 2>/dev/null || { mine=0; break; }; done
    IFS=$ifs
    set +f
    [ "$mine" = 1 ] || continue
    p=${f#/proc/}
    P="$P ${p%/environ}"
  done
}
teardown "$G" </dev/null
echo "msrun-ssh-leftovers: done"
