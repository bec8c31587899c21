#!/bin/sh
# The start of every process of a job (process_command, command.h): makes its Python processes
# dump their stacks on demand (stack_site.py), then execs the process's command, which keeps this
# pid. $1: the text of stack_site.py; the rest: the command. The job's directory on the host is
# ${TMPDIR:-/tmp}/msrun-ssh-stacks-$MSRUN_SSH_JOB, made 0700; one that exists already must be a
# directory of this user's, not a link (nobody else can have put a sitecustomize.py there).
# sitecustomize.py is written under a name of its own and renamed, so that processes starting at
# the same time never read half of it. The command gets MSRUN_SSH_STACK_DIR=DIR and DIR first on
# PYTHONPATH, after what the environment had there. When the directory or the file cannot be
# made, it gets neither: it runs as it would without stack dumps.
s=$1
shift
d=${TMPDIR:-/tmp}/msrun-ssh-stacks-$MSRUN_SSH_JOB
if { mkdir -m 700 "$d" 2>/dev/null || { [ -d "$d" ] && [ ! -L "$d" ] && [ -O "$d" ]; }; } &&
  printf '%s' "$s" > "$d/.sitecustomize.$$" 2>/dev/null &&
  mv -f "$d/.sitecustomize.$$" "$d/sitecustomize.py" 2>/dev/null; then
  MSRUN_SSH_STACK_DIR=$d
  PYTHONPATH=$d${PYTHONPATH:+:$PYTHONPATH}
  export MSRUN_SSH_STACK_DIR PYTHONPATH
fi
exec "$@"
