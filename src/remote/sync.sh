#!/bin/sh
# The front of sync's program on a host: runs the Perl program $1 (sync.pl) with perl when the
# host has it, else the Python program $2 (sync.py) with python3, with the arguments after them.
# Either may be "" (not offered). perl runs away from the user's Perl settings (PERL5LIB,
# PERL5OPT, PERLLIB, PERL_UNICODE, PERLIO: sync starts no command that would need them); python3
# with -I (no PYTHON* variables, no user site, no current directory on the path, where a json.py
# of the user's would shadow the library's) and -S (no site module, a faster start). Without
# either it says so, on stdout as the program's JSON error line and on stderr, and exits 127.
P=$1 Y=$2
shift 2
if [ -n "$P" ] && command -v perl >/dev/null 2>&1; then
  unset PERL5LIB PERL5OPT PERLLIB PERL_UNICODE PERLIO
  exec perl -e "$P" -- "$@"
fi
if [ -n "$Y" ] && command -v python3 >/dev/null 2>&1; then exec python3 -I -S -c "$Y" "$@"; fi
echo '{"error": "neither perl nor python3 found on the host (sync needs one)"}'
echo "msrun-ssh sync: neither perl nor python3 found on the host" >&2
exit 127
