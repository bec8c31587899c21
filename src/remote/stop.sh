#!/bin/sh
# `msrun-ssh stop` on one host (sent after sweep.sh): ends job $1 with a grace of $2 steps of
# 0.2 s between SIGTERM and SIGKILL, then removes the job's stack-dump directory.
G=$2
teardown "$G"
forget_stacks
echo "msrun-ssh-stop: done"
