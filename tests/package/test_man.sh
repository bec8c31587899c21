#!/usr/bin/env bash
# The man page the build writes (msrun-ssh --man), without a cluster:  test_man.sh MSRUN_SSH_1
# groff finds no problem in it (-ww: every warning), and man(1) renders it with its sections and
# options.
set -euo pipefail
page=$1
warnings=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
if [[ -n $warnings ]]; then
  printf 'test_man: groff warns about %s:\n%s\n' "$page" "$warnings" >&2
  exit 1
fi
text=$(MANWIDTH=100 man -l "$page" 2>&1)
for want in NAME SYNOPSIS DESCRIPTION COMMANDS OPTIONS "EXIT STATUS" FILES ENVIRONMENT \
  "SEE ALSO" "--hostfile FILE" "--job ID" "--strict_host_key_checking yes|accept-new|no" \
  "XDG_STATE_HOME" "NO_COLOR"; do
  if ! grep -qF -- "$want" <<<"$text"; then
    printf 'test_man: "%s" is not in man -l %s:\n%s\n' "$want" "$page" "$text" >&2
    exit 1
  fi
done
echo "test_man: $page renders without warnings"
