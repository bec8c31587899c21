#!/bin/sh
# `msrun-ssh stop` on one host (sent after sweep.sh): ends job $1 with a grace of $2 steps of
# 0.2 s between SIGTERM and SIGKILL.
G=$2
teardown "$G"
echo "msrun-ssh-stop: done"
