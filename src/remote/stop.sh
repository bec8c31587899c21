#!/bin/sh
# `msrun-ssh stop` on one host (sent after sweep.sh): ends job $1 with a grace of $2 steps of
# 0.2 s between SIGTERM and SIGKILL, then removes the job's stack-dump directory. $3 (default 1):
# the job's attempts; those from the second on run as $1-2, $1-3, ... and are ended too.
G=$2 JOBS=$J n=2
while [ "$n" -le "${3:-1}" ]; do JOBS="$JOBS $J-$n"; n=$((n + 1)); done
teardown "$G"
forget_stacks
echo "msrun-ssh-stop: done"
