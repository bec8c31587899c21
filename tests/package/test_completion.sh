#!/usr/bin/env bash
# The bash completion (completions/msrun-ssh.bash) against a built binary, without a cluster:
#   test_completion.sh MSRUN_SSH_BINARY COMPLETION_SCRIPT
# Sets COMP_WORDS / COMP_CWORD as bash does, calls the completion function and checks COMPREPLY:
# commands, option names by command (from the binary), values, job ids from a temporary
# XDG_STATE_HOME, host files, and nothing but files after a run's TASK_SCRIPT.
set -euo pipefail
bin=$(realpath "$1")
script=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/state/msrun-ssh/jobs" "$tmp/work/logs"
touch "$tmp/state/msrun-ssh/jobs/20261129-154501-3fa9c2.json" \
  "$tmp/state/msrun-ssh/jobs/20261130-080000-000001.json" "$tmp/state/msrun-ssh/jobs/notes.txt" \
  "$tmp/work/hosts.toml" "$tmp/work/hosts.txt" "$tmp/work/train.py"
export XDG_STATE_HOME=$tmp/state
cd "$tmp/work"
# shellcheck source=/dev/null
source "$script"
failures=0

# expect "WORD ... (the words typed, the last one being completed)" "EXPECTED COMPREPLY, sorted"
expect() {
  local -a words
  read -r -a words <<<"$1"
  [[ $1 == *" " ]] && words+=("")
  COMP_WORDS=("$bin" "${words[@]}")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _msrun_ssh
  local got
  got=$(printf '%s\n' "${COMPREPLY[@]}" | sed '/^$/d' | sort | tr '\n' ' ')
  if [[ "${got% }" != "$2" ]]; then
    echo "FAIL: msrun-ssh $1<TAB>: got \"${got% }\", want \"$2\"" >&2
    failures=$((failures + 1))
  else
    echo "ok: msrun-ssh $1<TAB> -> $2"
  fi
}

expect " " "check list logs stack status stop sync top"
expect "st" "stack status stop"
expect "--host" "--host_failures_to_exclude --hostfile"
expect "--hostfile=h.toml --dry" "--dry_run"
expect "stop --jo" "--job"
expect "stop --ju" "--jump_fanout"
expect "stop --job " "20261129-154501-3fa9c2 20261130-080000-000001"
expect "stop --job 2026113" "20261130-080000-000001"
expect "stack --job " "20261129-154501-3fa9c2 20261130-080000-000001"
expect "top --job " "20261129-154501-3fa9c2 20261130-080000-000001"
expect "top --on" "--once"
expect "stop --hostfile h.toml --job = " "20261129-154501-3fa9c2 20261130-080000-000001"
expect "--hostfile " "auto hosts.toml hosts.txt logs lsf pbs slurm train.py"
expect "--hostfile hosts.t" "hosts.toml hosts.txt"
expect "--log_dir " "logs"
expect "--contract " "msrun torch"
expect "--strict_host_key_checking a" "accept-new"
expect "--join " "False True"
expect "--dry_run = " "False True"
expect "--bind_numa tr" "train.py"
expect "--import" ""
expect "check --im" "--import"
expect "--hostfile hosts.toml tr" "train.py"
expect "--hostfile hosts.toml train.py --host" ""
expect "--hostfile hosts.toml train.py --epochs 3 h" "hosts.toml hosts.txt"
if ((failures)); then
  echo "test_completion: $failures failures" >&2
  exit 1
fi
echo "test_completion: all passed"
