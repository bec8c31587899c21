# shellcheck shell=bash
# Bash completion for msrun-ssh: commands, options, host files, job ids and option values.
#
# The options and what their values are (FILE, DIR, ID, BOOL, a|b|c choices) come from the binary
# being completed, `msrun-ssh --complete-options COMMAND` (one "NAME [METAVAR]" per line, from the
# table that also makes --help and the man page), so they never go stale. Job ids are the names of
# the job records, ${XDG_STATE_HOME:-~/.local/state}/msrun-ssh/jobs/<ID>.json.

_msrun_ssh_commands="check stop list status logs stack sync top"

# Prints the ids of the recorded jobs, one per line.
_msrun_ssh_job_ids() {
  local f
  for f in "${XDG_STATE_HOME:-$HOME/.local/state}"/msrun-ssh/jobs/*.json; do
    [[ -e $f ]] || continue
    f=${f##*/}
    printf '%s\n' "${f%.json}"
  done
}

# _msrun_ssh_values METAVAR CUR: COMPREPLY becomes the values matching CUR that an option whose
# value is METAVAR ("FILE", "BOOL|JSON|FILE", "yes|accept-new|no", ...) may take.
_msrun_ssh_values() {
  local cur=$2 part words=() files=
  local -a parts
  IFS='|' read -r -a parts <<<"$1"
  for part in "${parts[@]}"; do
    case $part in
      BOOL) words+=(True False) ;;
      ID) mapfile -t -O "${#words[@]}" words < <(_msrun_ssh_job_ids) ;;
      FILE | PATH) files=f ;;
      DIR) files=${files:-d} ;;
      [a-z]*) words+=("$part") ;;
    esac
  done
  mapfile -t COMPREPLY < <(compgen -W "${words[*]}" -- "$cur")
  if [[ -n $files ]]; then
    compopt -o filenames 2>/dev/null || true  # (fails outside a completion)
    mapfile -t -O "${#COMPREPLY[@]}" COMPREPLY < <(compgen -"$files" -- "$cur")
  fi
}

_msrun_ssh() {
  local cur=${COMP_WORDS[COMP_CWORD]} cword=$COMP_CWORD cmd=run first=1 bin=${COMP_WORDS[0]}
  local name meta opt='' j w
  local -A metas=()
  COMPREPLY=()
  if ((cword == 1)) && [[ $cur != -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$_msrun_ssh_commands" -- "$cur")
    return
  fi
  if [[ " $_msrun_ssh_commands " == *" ${COMP_WORDS[1]} "* ]]; then
    cmd=${COMP_WORDS[1]}
    first=2
  fi
  [[ $bin == \~/* ]] && bin=$HOME/${bin#\~/}
  while read -r name meta; do
    metas[$name]=$meta
  done < <("$bin" --complete-options "$cmd" 2>/dev/null)

  # Which word is the current one: an option's value, or (for a run) a word of the task?
  # "--name=value" reaches us as three words: --name, =, value.
  j=$first
  while ((j < cword)); do
    w=${COMP_WORDS[j]}
    if [[ ${COMP_WORDS[j + 1]-} == = ]]; then
      ((j += 3))
    elif [[ $w == -* ]]; then
      [[ -n ${metas[$w]-} ]] && ((j++))
      ((j++))
    elif [[ $cmd == run ]]; then
      # TASK_SCRIPT: every word after it belongs to the task.
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
      return
    else
      ((j++))
    fi
  done
  w=${COMP_WORDS[cword - 1]}
  if [[ $cur == = ]]; then
    opt=$w
    cur=
  elif [[ $w == = ]]; then
    opt=${COMP_WORDS[cword - 2]}
  elif [[ $w == --* && -n ${metas[$w]-} ]]; then
    opt=$w
  fi
  if [[ $opt == --* && -n ${metas[$opt]+known} ]]; then
    # A flag takes a boolean only after "=" (--dry_run=False).
    meta=${metas[$opt]-}
    _msrun_ssh_values "${meta:-BOOL}" "$cur"
    return
  fi
  mapfile -t COMPREPLY < <(compgen -W "${!metas[*]}" -- "$cur")
  [[ $cur == -* ]] || mapfile -t -O "${#COMPREPLY[@]}" COMPREPLY < <(compgen -f -- "$cur")
}

complete -F _msrun_ssh msrun-ssh
