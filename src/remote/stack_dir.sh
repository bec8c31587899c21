#!/bin/sh
# Shared by stack_site.sh (every process of a job) and the watchdog (once per host, before the
# processes start, so that they find it made): stack_site JOB TEXT makes the job's stack-dump
# directory on this host, ${TMPDIR:-/tmp}/msrun-ssh-stacks-JOB (in $_ms_d), 0700, with TEXT as
# its sitecustomize.py; status 0 when both are there. A directory that exists already must be this
# user's and not a link (nobody else can then have put a sitecustomize.py there): when it holds
# the file, only shell builtins ran. sitecustomize.py is written under a name of its own and
# renamed, so that processes starting at the same time never read half of it; the watchdog ($3
# "first": no process of the job starts before its ready line) writes it in place, one exec less
# per host. An empty TEXT (the processes of an attached run, whose watchdog made the directory
# before they start) only finds the directory made: it makes nothing. The variable's name is one a
# process's own environment will not hold: stack_site.sh execs the process with what it has.
stack_site() {
  _ms_d=${TMPDIR:-/tmp}/msrun-ssh-stacks-$1
  { [ -d "$_ms_d" ] && [ ! -L "$_ms_d" ] && [ -O "$_ms_d" ] &&
    [ -f "$_ms_d/sitecustomize.py" ]; } ||
    { [ -n "$2" ] &&
      { mkdir -m 700 "$_ms_d" 2>/dev/null ||
        { [ -d "$_ms_d" ] && [ ! -L "$_ms_d" ] && [ -O "$_ms_d" ]; }; } &&
      if [ "${3-}" = first ]; then
        printf '%s' "$2" > "$_ms_d/sitecustomize.py" 2>/dev/null
      else
        printf '%s' "$2" > "$_ms_d/.sitecustomize.$$" 2>/dev/null &&
          mv -f "$_ms_d/.sitecustomize.$$" "$_ms_d/sitecustomize.py" 2>/dev/null
      fi; }
}
