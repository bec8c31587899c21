#!/bin/sh
# Starts the launch agent with perl ($1: a loader that reads agent.pl from stdin and runs it; $2
# the agent's idle limit in seconds), away from the user's Perl module settings: PERL5LIB,
# PERL5OPT and PERLLIB are unset for perl and
# handed to it as arguments ("" when unset, else "=" and the value), and the agent sets them again
# for the commands it starts, which get the whole environment the login shell made. Without perl
# it exits 97 before writing anything: the launcher then runs this host's commands on channels of
# their own.
if command -v perl >/dev/null 2>&1; then
  A=${PERL5LIB+=$PERL5LIB} B=${PERL5OPT+=$PERL5OPT} C=${PERLLIB+=$PERLLIB}
  unset PERL5LIB PERL5OPT PERLLIB
  exec perl -e "$1" "$2" "$A" "$B" "$C"
fi
echo "msrun-ssh-agent: no perl on this host" >&2
exit 97
