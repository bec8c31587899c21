#!/bin/sh
# The front of sync's programs on a host (sync_manifest.py, sync_apply.py): runs the python code $1
# with python3 and the arguments after it. Without python3 it says so, on stdout as the
# programs' JSON error line and on stderr, and exits 127.
C=$1
shift
if command -v python3 >/dev/null 2>&1; then exec python3 -c "$C" "$@"; fi
echo '{"error": "python3 not found on the host (sync needs it)"}'
echo "msrun-ssh sync: python3 not found on the host" >&2
exit 127
