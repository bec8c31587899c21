#!/bin/sh
# The per-host probe of `msrun-ssh check` (see check.h): prints `key=value` lines about the host.
# Run as `/bin/sh -c SCRIPT msrun-ssh-check WORKDIR PYTHON SCRIPT MASTER_IP [MODULE...]`. The clock
# is read first, between "sync=1" and the launcher's answer to it (one byte, then EOF, on stdin),
# so that the launcher's write and the line's arrival bracket the reading within one round trip;
# bash's $EPOCHREALTIME reads it without starting a process after the byte came (date needs one,
# which skews the reading late), date is the fallback. The EOF also means that nothing later in
# the probe can wait for input. `t` bounds every program that could hang (a dead NFS mount under
# df, a wedged driver under npu-smi); `one` keeps a value on one line. Lines never depend on the
# user's locale for their keys.
W=$1 PY=$2 S=$3 M=$4
shift 4
if command -v timeout >/dev/null 2>&1; then t() { timeout -k 2 "$@"; }
else t() { shift; "$@"; }; fi
bash -c '[ -n "$EPOCHREALTIME" ] || exit 9
  echo sync=1; read -r -t 10 _; echo "clock=$EPOCHREALTIME"' 2>/dev/null
r=$?
if [ "$r" = 9 ] || [ "$r" = 127 ]; then
  echo "sync=1"
  t 10 head -c 1 >/dev/null
  echo "clock=$(date +%s.%N)"
fi
one() { tr '\n\r\t' '   ' | sed 's/  */ /g;s/^ //;s/ $//'; }
last() { grep -v '^[[:space:]]*$' | tail -n 1 | one; }
first() { grep -v '^[[:space:]]*$' | head -n 1 | one; }
sha() {
  t 30 sha256sum -- "$1" || t 30 shasum -a 256 -- "$1" || t 30 openssl dgst -sha256 -r -- "$1"
}
# shellcheck source=/dev/null # the host's file, not part of the probe
echo "os=$( (. /etc/os-release 2>/dev/null; printf '%s\n' "${PRETTY_NAME:-$NAME}") | one)"
echo "kernel=$(uname -srm 2>/dev/null | one)"
echo "cpus_allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$$/status 2>/dev/null)"
k=0
for n in /sys/devices/system/node/node[0-9]*; do
  [ -d "$n" ] || continue
  echo "numa=${n##*/node} $(cat "$n/cpulist" 2>/dev/null)"
  k=$((k+1))
done
echo "numa_nodes=$k"
echo "bind_tools=$(for b in taskset numactl; do command -v "$b" >/dev/null 2>&1 && printf '%s ' "$b"; done)"
if command -v npu-smi >/dev/null 2>&1; then
  o=$(t 20 npu-smi info -l 2>&1); r=$?
  echo "npu=$r $(printf '%s\n' "$o" | grep -c 'NPU ID')"
  [ "$r" = 0 ] || echo "npu_error=$(printf '%s\n' "$o" | first)"
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  o=$(t 20 nvidia-smi -L 2>&1); r=$?
  echo "gpu=$r $(printf '%s\n' "$o" | grep -c '^GPU [0-9]')"
  [ "$r" = 0 ] || echo "gpu_error=$(printf '%s\n' "$o" | first)"
fi
echo "devices_probed=1"
if cd -- "$W" 2>/dev/null; then
  # A name no other host can hold at the same moment: workdirs are often one NFS directory of
  # every node, whose process ids repeat.
  if f=$(mktemp ./.msrun-ssh-check.XXXXXXXX 2>&1); then
    rm -f -- "$f"
    echo "workdir=writable"
  else
    echo "workdir=unwritable $(printf '%s\n' "$f" | sed 's/^.*: //' | one)"
  fi
  echo "disk_kb=$(t 10 df -Pk . 2>/dev/null | awk 'NR==2 {print $4}')"
else
  if [ ! -e "$W" ]; then echo "workdir=missing"
  elif [ ! -d "$W" ]; then echo "workdir=notdir"
  else echo "workdir=noaccess"; fi
  cd / || :
fi
if [ -n "$S" ]; then
  if [ -d "$S" ]; then echo "script=notfile"
  elif [ ! -e "$S" ]; then echo "script=missing"
  elif [ ! -r "$S" ]; then echo "script=unreadable"
  else
    h=$(sha "$S" 2>/dev/null | sed -n '1{s/^\\//;s/[[:space:]].*//;p;}')
    if [ -n "$h" ]; then echo "script_sha256=$h"; else echo "script=nohash"; fi
  fi
fi
if p=$(command -v "$PY" 2>/dev/null) && [ -n "$p" ]; then
  echo "python_path=$p"
  v=$(t 30 "$PY" -c 'import sys; print("%d.%d.%d" % tuple(sys.version_info[:3]))' 2>&1); r=$?
  if [ "$r" = 0 ]; then
    echo "python_version=$(printf '%s\n' "$v" | grep '^[0-9][0-9.]*$' | tail -n 1)"
  else
    echo "python_error=exit $r: $(printf '%s\n' "$v" | last)"
  fi
  for m in "$@"; do
    e=$(t 60 "$PY" -c 'import importlib, sys; importlib.import_module(sys.argv[1])' "$m" 2>&1)
    r=$?
    if [ "$r" = 0 ]; then echo "import_ok=$m"
    elif [ "$r" = 124 ]; then echo "import_fail=$m timed out after 60 s"
    else echo "import_fail=$m $(printf '%s\n' "$e" | last)"; fi
  done
else
  echo "python_path="
fi
IP=
for c in ip /sbin/ip /usr/sbin/ip; do
  if command -v "$c" >/dev/null 2>&1; then IP=$c; break; fi
done
if [ -n "$IP" ]; then echo "route=$(t 5 "$IP" route get "$M" 2>&1 | head -n 1 | one)"
else echo "route_error=no ip command"; fi
# What `msrun-ssh stack` can use here (stack.sh): gdb, with timeout to bound it, and whether
# ptrace lets this user attach to the job's processes.
g=$(command -v gdb 2>/dev/null) && command -v timeout >/dev/null 2>&1 || g=
echo "stack_gdb=$g"
echo "ptrace_scope=$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null)"
echo "uid=$(id -u 2>/dev/null)"
echo "end=ok"
