#!/bin/sh
# The connection test to the master port of `msrun-ssh check` (sent after python.sh, which runs
# connect.py to $A port $B within $D seconds). Without python, bash's /dev/tcp does the same (its
# messages end in ": REASON").
if command -v bash >/dev/null 2>&1 && command -v timeout >/dev/null 2>&1; then
  # shellcheck disable=SC2016 # $0 and $1 are the inner bash's: "$A" and "$B"
  e=$(timeout "$D" bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$A" "$B" 2>&1); r=$?
  if [ "$r" = 0 ]; then echo "reach=ok"
  elif [ "$r" = 124 ]; then echo "reach=fail timed out after $D s"
  else echo "reach=fail $(printf '%s\n' "$e" | tail -n 1 | sed 's/.*: //')"; fi
  exit 0
fi
echo "reach=untested no python or bash on this host"
