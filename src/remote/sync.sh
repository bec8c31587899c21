#!/bin/sh
# The front of sync's program on a host (sync.py): runs the python code $1 with python3 and the
# arguments after it, isolated from the user's Python settings (-I: no PYTHON* variables, no user
# site, no current directory on the path, where a json.py of the user's would shadow the
# library's; -S: no site module, a faster start; the program uses the standard library only).
# Without python3 it says so, on stdout as the program's JSON error line and on stderr, and exits
# 127.
C=$1
shift
if command -v python3 >/dev/null 2>&1; then exec python3 -I -S -c "$C" "$@"; fi
echo '{"error": "python3 not found on the host (sync needs it)"}'
echo "msrun-ssh sync: python3 not found on the host" >&2
exit 127
