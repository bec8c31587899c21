#!/bin/sh
# The defaults of a process's environment (Process::env_defaults, plan.h), in front of its command
# when it has some (exec_env, command.h). Each NAME=VALUE argument before "--" is set only where
# the environment has no NAME (one set, even empty, stays), the host's login environment
# included: torchrun, started on a host, keeps what that host's own environment sets. A VALUE of
# "$OTHER" is OTHER's value at that point (empty when unset). The names are the launcher's own
# (plan.cc), never a user's. Then execs the rest, which keeps this pid; it forks nothing. Its own
# two variables are unset before.
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
  msrun_ssh_name=${1%%=*}
  msrun_ssh_value=${1#*=}
  case $msrun_ssh_value in
    \$*) eval "msrun_ssh_value=\${${msrun_ssh_value#\$}-}" ;;
  esac
  if eval "[ -z \"\${$msrun_ssh_name+x}\" ]"; then
    eval "$msrun_ssh_name=\$msrun_ssh_value"
    export "${msrun_ssh_name?}"
  fi
  shift
done
unset msrun_ssh_name msrun_ssh_value
shift
exec "$@"
