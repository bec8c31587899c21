#!/bin/sh
# `msrun-ssh stack` on one host (see stacks.h): the stack of every process of job $1 there,
# without stopping any. $2: seconds to wait for the Python dumps; $3: the bound of one gdb run.
# A process of the job is one whose environment (/proc/PID/environ) holds MSRUN_SSH_JOB=$1, as
# the sweep finds them once started (sweep.sh), or $1-K: the job's attempt K after a restart
# (--max_restarts; no generated id is another's with -K after it). Past what one exec carries
# (some 30,000 processes) xargs hands their paths to several greps. A Python process that
# imported stack_site.py has its dump file MSRUN_SSH_STACK_DIR/<host name>.<pid>.stack and
# catches SIGUSR2 (SigCgt in /proc/PID/status: a process that does not would die of it): it gets
# SIGUSR2 and appends every thread's stack to that file; what was appended is read once the file
# has grown and stopped growing, or after $2 seconds. The others, and a process whose dump did
# not come, get a native backtrace from gdb when gdb and timeout are installed: as many at once
# as the host has CPUs (at least 2), none started once $3 s have passed since the first, each
# bounded by what is left of them, so that the host answers within the launcher's bound (many
# forked workers' gdbs at once took longer than it, and the whole answer was lost).
# Prints, one line each (the output grammar of stacks.h):
#   host NAME                           the host's own name
#   gdb yes|no                          whether native backtraces can be taken here
#   proc PID RANK STATE WCHAN COMMAND   per process: RANK "sched", the rank, or "-"; WCHAN "-"
#   py LINE / native LINE / note TEXT   its Python stack, native stack, what is missing
#   end                                 at the end
J=$1 W=${2:-2} G=${3:-10}
n=; read -r n < /proc/sys/kernel/hostname 2>/dev/null || n=$(uname -n)
g=no
command -v gdb >/dev/null 2>&1 && command -v timeout >/dev/null 2>&1 && g=yes
echo "host $n"
echo "gdb $g"
tmp=$(mktemp -d 2>/dev/null) || tmp=
trap '[ -n "$tmp" ] && rm -rf -- "$tmp"' EXIT
m="^MSRUN_SSH_JOB[=]$J\\(-[0-9][0-9]*\\)\\{0,1\\}\$"
hits=$(grep -lz "$m" /proc/[0-9]*/environ 2>/dev/null)
grc=$?
if [ $grc -eq 126 ] || { [ $grc -eq 2 ] && [ -z "$hits" ]; }; then  # as sweep.sh's find_pids
  hits=$(printf '%s\n' /proc/[0-9]*/environ | xargs grep -lz "$m" 2>/dev/null)
fi
# shellcheck disable=SC2086 # the words are paths
pids=$(printf '%s\n' $hits | sed 's,^/proc/,,;s,/environ$,,' | sort -n)
# "RANK DIR" of process $1: its rank from its environment, its dump directory.
rank_dir() {
  tr '\000' '\n' 2>/dev/null < "/proc/$1/environ" | awk '
    { k = substr($0, 1, index($0, "=") - 1); v[k] = substr($0, length(k) + 2) }
    END {
      r = v["MS_ROLE"] == "MS_SCHED" ? "sched" : v["RANK_ID"] != "" ? v["RANK_ID"] : \
          v["RANK"] != "" ? v["RANK"] : v["MS_NODE_ID"] != "" ? v["MS_NODE_ID"] : "-"
      print r " " v["MSRUN_SSH_STACK_DIR"]
    }'
}
# Whether process $1 catches SIGUSR2 (signal 12: bit 11 of SigCgt).
catches_usr2() {
  m=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null)
  [ ${#m} -ge 4 ] || return 1
  m=${m#"${m%????}"}
  [ $((0x$m >> 11 & 1)) = 1 ]
}
size() { wc -c < "$1" 2>/dev/null || echo 0; }
# Signal every Python process that can dump; "PID:FILE:SIZE_BEFORE" each.
asked=
for p in $pids; do
  d=$(rank_dir "$p"); d=${d#* }
  f=$d/$n.$p.stack
  if [ -z "$d" ] || [ ! -f "$f" ] || ! catches_usr2 "$p"; then continue; fi
  b=$(size "$f")
  kill -USR2 "$p" 2>/dev/null && asked="$asked $p:$f:$b"
done
# Wait until every dump has grown and then kept its size for a tenth of a second, or W seconds.
i=0 last=
while [ -n "$asked" ] && [ "$i" -lt $((W * 10)) ]; do
  sleep 0.1
  i=$((i + 1))
  now='' ready=yes
  for a in $asked; do
    b=${a##*:} f=${a#*:}; f=${f%:*}
    s=$(size "$f")
    now="$now $s"
    [ "$s" -gt "$b" ] || ready=no
  done
  [ "$ready" = yes ] && [ "$now" = "$last" ] && break
  last=$now
done
# The Python dump of process $1 since it was asked for (nothing: none came).
dump() {
  for a in $asked; do
    [ "${a%%:*}" = "$1" ] || continue
    b=${a##*:} f=${a#*:}; f=${f%:*}
    [ "$(size "$f")" -gt "$b" ] && tail -c +$((b + 1)) "$f"
  done
}
# Native backtraces of the processes without a Python dump into $tmp, in waves of P.
if [ "$g" = yes ] && [ -n "$tmp" ]; then
  P=$(nproc 2>/dev/null) && [ "$P" -ge 2 ] 2>/dev/null || P=2
  t0=$(date +%s) k=0
  for p in $pids; do
    [ -n "$(dump "$p" | head -c 1)" ] && continue
    left=$((${G%.*} - ($(date +%s) - t0)))
    if [ "$left" -lt 1 ]; then : > "$tmp/$p.late"; continue; fi
    timeout -k 2 "$left" gdb -batch -nx -p "$p" -iex 'set debuginfod enabled off' \
      -ex 'thread apply all bt' > "$tmp/$p.gdb" 2>&1 < /dev/null &
    k=$((k + 1))
    if [ "$k" -ge "$P" ]; then
      wait
      k=0
    fi
  done
  wait
fi
# The native backtrace of process $1, or a note on why there is none.
native() {
  if [ "$g" != yes ]; then echo "note no native stack tool (gdb is not installed)"; return; fi
  if [ -e "$tmp/$1.late" ]; then echo "note no native stack: not taken within $G s"; return; fi
  if grep -q '^#[0-9]' "$tmp/$1.gdb" 2>/dev/null; then
    grep -E '^(Thread [0-9]|#[0-9])' "$tmp/$1.gdb" | sed 's/^/native /'
    return
  fi
  e=$(grep -v '^[[:space:]]*$' "$tmp/$1.gdb" 2>/dev/null | tail -n 1)
  echo "note no native stack: gdb gave none${e:+ ($e)}"
}
for p in $pids; do
  r=$(rank_dir "$p"); r=${r%% *}
  st=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d ' ' -f 1)
  w=$(cat "/proc/$p/wchan" 2>/dev/null)
  [ -n "$w" ] && [ "$w" != 0 ] || w=-
  c=$(cat "/proc/$p/comm" 2>/dev/null)
  echo "proc $p ${r:--} ${st:-?} $w $c"
  s=$(dump "$p")
  if [ -n "$s" ]; then printf '%s\n' "$s" | sed 's/^/py /'; continue; fi
  case " $asked " in
    *" $p:"*) echo "note no Python stack: no dump within $W s" ;;
    *) echo "note no Python stack: not a Python process with stack dumps" ;;
  esac
  native "$p"
done
echo end
