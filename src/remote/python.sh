#!/bin/sh
# The front of the master-port tests of `msrun-ssh check` (listen.sh and connect.sh follow it):
# runs python code ($C) with the first interpreter found among the arguments after the first
# five, under timeout when the host has it. Arguments: L (timeout of the whole command, s), C
# (code); A B D: the code's three arguments. Continues only when no interpreter is found.
L=$1 C=$2 A=$3 B=$4 D=$5; shift 5
# shellcheck disable=SC2093 # on purpose: the first interpreter found replaces the shell
for p in "$@"; do
  command -v "$p" >/dev/null 2>&1 || continue
  if command -v timeout >/dev/null 2>&1; then exec timeout -k 2 "$L" "$p" -c "$C" "$A" "$B" "$D"; fi
  exec "$p" -c "$C" "$A" "$B" "$D"
done
