#!/bin/sh
# Starts the launch agent with perl. The user's login shell runs this itself (agent_command puts
# `set -- LOADER IDLE` in front of it; login shells are POSIX-like, docs/choices.md), so the
# agent costs its host no sh of its own. $1: a loader that reads agent.pl from stdin and runs it;
# $2: the agent's idle limit in seconds. Away from the user's Perl module settings: PERL5LIB,
# PERL5OPT and PERLLIB are unset for perl and handed to it as arguments ("" when unset, else "="
# and the value), and the agent sets them again for the commands it starts, which get the whole
# environment the login shell made. Without perl it exits 97 before writing anything: the
# launcher then runs this host's commands on channels of their own.
if command -v perl >/dev/null 2>&1; then
  MSRUN_SSH_A=${PERL5LIB+"=$PERL5LIB"} MSRUN_SSH_B=${PERL5OPT+"=$PERL5OPT"}
  MSRUN_SSH_C=${PERLLIB+"=$PERLLIB"}
  unset PERL5LIB PERL5OPT PERLLIB
  exec perl -e "$1" "$2" "$MSRUN_SSH_A" "$MSRUN_SSH_B" "$MSRUN_SSH_C"
fi
echo "msrun-ssh-agent: no perl on this host" >&2
exit 97
