#!/bin/sh
# The watchdog of one job on one host (sent after sweep.sh): reads one control byte at a time
# from the launcher (see command.h). Arguments: the job id (J, read by sweep.sh); T: silence
# (seconds) after which the launcher counts as gone; G and L: grace steps of 0.2 s for a
# requested teardown and for a teardown after losing the launcher; W: the host's workdir ("": none
# to check). Over the launch agent the agent is the watchdog itself (agent.pl), with the same
# protocol: this script runs over a channel of its own.
# SIGPIPE is ignored so that echoing to a launcher that vanished cannot kill the watchdog first.
# Before the ready line it makes the job's stack-dump directory (stack_dir.sh; $S, set in front of
# this script, is stack_site.py's text), so that the processes find it made.
# The ready line carries the host's own name (uname -n, read without a fork) for {hostname}.
# After losing the launcher nobody else can end a command whose exec request sshd took just
# before the connection died (its shell may appear after the first sweep): the watchdog sweeps
# four more times over one second before it exits. With the launcher alive, the launcher ends
# such late commands itself (SSH "signal" requests) and waits until every channel has closed.
# Over a channel of its own, the silence T is waited out in two reads, 3/4 and 1/4 of it: when
# this host was too starved of CPU to run the first read while the launcher's bytes came, they wait
# in the pipe and the second read, a new process, finds them at once; a launcher that is really
# gone costs no extra time.
T=$2 G=$3 L=$4 W=${5-}
# get: the next control byte in c ("" once the launcher counts as gone): dd, twice under timeout
# (see above); get_untimed: the same with no time limit.
# T comes as "S.mmm" (command.cc); 0 would mean "no limit" to timeout, so neither part is 0.
# The milliseconds are padded to 3 digits by arithmetic, without a subshell.
ms=$((${T%.*} * 1000 + 1${T#*.} - 1000))
t2=$((ms / 4 + (ms < 8))) t1=$((ms - ms / 4 + (ms < 8)))
f1=$((t1 % 1000 + 1000)) f2=$((t2 % 1000 + 1000))
T1=$((t1 / 1000)).${f1#1} T2=$((t2 / 1000)).${f2#1}
get() {
  c=$(timeout "$T1" dd bs=1 count=1 2>/dev/null) ||
    c=$(timeout "$T2" dd bs=1 count=1 2>/dev/null) || c=
}
get_untimed() { c=$(dd bs=1 count=1 2>/dev/null) || c=; }
trap '' PIPE HUP
# SIGTERM to the watchdog itself (a batch system ending the job step it runs in, as Slurm does at
# `scancel` under --transport srun, then SIGKILL after KillWait; a host shutting down): nobody
# will watch this host's processes any more, so they are killed at once, grandchildren that left
# the step's process tree too. (sh runs the trap once the read in progress returns: its `timeout`
# and `dd` get the same SIGTERM from a step's end.) The line comes first, so that the launcher
# reads it before the processes' ends the kill brings, and takes them for what they are.
trap 'echo "msrun-ssh-watchdog: terminated"; signal_all KILL; forget_stacks; exit 0' TERM
n=; read -r n < /proc/sys/kernel/hostname 2>/dev/null || n=$(uname -n)
# The host's workdir (W) is said missing before anything starts, not as each process's cd error:
# a directory this user may enter (tested, not entered: no subshell).
if [ -n "$W" ] && ! { [ -d "$W" ] && [ -x "$W" ]; }; then
  echo "msrun-ssh-watchdog: no workdir"; exit 0
fi
stack_site "$J" "$S" first || :
echo "msrun-ssh-watchdog: ready $$ $n"
c=
while :; do
  [ -n "$c" ] || get
  case "$c" in
    h) echo h ;;
    # Ctrl-Z on the launcher: every process of the job stops; the launcher stops next, so its
    # silence is expected. A heartbeat the launcher sent before it stopped is answered and the job
    # stays stopped. The next other byte (no time limit: a suspended job waits for `fg`) resumes
    # the processes first; 'r' goes on as before, any other byte is handled as such (the end of
    # stdin, a killed launcher, tears the job down).
    z) signal_quiet STOP; echo "msrun-ssh-watchdog: paused"
       c=h
       while [ "$c" = h ]; do
         get_untimed
         [ "$c" = h ] && echo h
       done
       signal_quiet CONT
       [ "$c" = r ] && { echo "msrun-ssh-watchdog: resumed"; c=; }
       continue ;;
    q|k) teardown "$G"; forget_stacks; echo "msrun-ssh-watchdog: done"; exit 0 ;;
    a) abort_pythons; teardown "$G"; forget_stacks; echo "msrun-ssh-watchdog: done"; exit 0 ;;
    K) signal_all KILL; forget_stacks; echo "msrun-ssh-watchdog: done"; exit 0 ;;
    *) echo "msrun-ssh-watchdog: launcher lost"; teardown "$L"
       for _ in 1 2 3 4; do sleep 0.25; signal_all KILL; done; forget_stacks; exit 0 ;;
  esac
  c=
done
