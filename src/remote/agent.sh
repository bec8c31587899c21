#!/bin/sh
# Starts the launch agent (agent.py, given as $1; $2 its idle limit in seconds) with python3, isolated from the user's Python
# settings (-I: no PYTHON* variables, no user site; -S: no site module, a faster start). The
# agent's commands still get the whole environment the login shell made. Without python3 it
# exits 97 before writing anything: the launcher then runs this host's commands on channels of
# their own.
if command -v python3 >/dev/null 2>&1; then exec python3 -I -S -c "$1" "$2"; fi
echo "msrun-ssh-agent: no python3 on this host" >&2
exit 97
