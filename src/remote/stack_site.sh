#!/bin/sh
# The start of every process of a job (process_command, command.h; sent after stack_dir.sh):
# makes its Python processes dump their stacks on demand (stack_site.py), then execs the process's
# command, which keeps this pid, with the environment it was given (no variable of its own). $1:
# the text of stack_site.py, or "" when the watchdog has made the job's directory (stack_dir.sh)
# before the processes start, as in an attached run; the rest: the command. This normally forks
# nothing. The command gets MSRUN_SSH_STACK_DIR=DIR and DIR first on PYTHONPATH, after what the
# environment had there. When the directory or the file cannot be made (or, with "", is not
# there), it gets neither: it runs as it would without stack dumps. A TORCHELASTIC_ERROR_FILE of
# @msrun-ssh-job-dir@/NAME (kJobDirToken, plan.h) becomes DIR/NAME, or is unset without the
# directory; stack_site.py relays that file when the process exits.
if stack_site "$MSRUN_SSH_JOB" "$1"; then
  # shellcheck disable=SC2154 # _ms_d: set by stack_site (stack_dir.sh, sent in front of this)
  MSRUN_SSH_STACK_DIR=$_ms_d
  PYTHONPATH=$_ms_d${PYTHONPATH:+:$PYTHONPATH}
  export MSRUN_SSH_STACK_DIR PYTHONPATH
  case ${TORCHELASTIC_ERROR_FILE-} in
    @msrun-ssh-job-dir@/*)
      TORCHELASTIC_ERROR_FILE=$_ms_d/${TORCHELASTIC_ERROR_FILE#@msrun-ssh-job-dir@/}
      export TORCHELASTIC_ERROR_FILE ;;
  esac
else
  case ${TORCHELASTIC_ERROR_FILE-} in @msrun-ssh-job-dir@/*) unset TORCHELASTIC_ERROR_FILE ;; esac
fi
shift
exec "$@"
