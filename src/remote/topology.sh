#!/bin/sh
# The topology probe (topology.h): prints "allowed: CPUS" (the CPUs this shell may run on), then
# "format: hwloc-xml" and hwloc's XML export, or, without lstopo, "format: sysfs" and the sysfs
# files it needs as grep -H lines (PATH:VALUE). sysfs is read with grep -H, one process for all
# CPUs: shell `read` does one-byte reads, which some kernels answer with nothing for the binary
# node/cpulist attribute. Exits 0.
#
# topology_probe_command() sends it as one line, its lines joined by "; ", through any login shell
# and any later quoting. So: one complete command per line (long lines on purpose), and no single
# quote, backslash, exclamation mark or line break inside a command.
# With npu-smi (Ascend hosts): its table (NPU, chip, Bus-Id) and its chip map (NPU, chip, logic
# id) first, each line prefixed, before the "allowed:" line (topology.h: the logic ids are not in
# PCI order). Each call gets 5 s (a wedged driver hangs npu-smi; the probe has 20 s in all).
if command -v npu-smi >/dev/null 2>&1; then t=; command -v timeout >/dev/null 2>&1 && t="timeout -k 1 5"; $t npu-smi info 2>/dev/null | head -n 400 | sed "s/^/npu-info: /"; $t npu-smi info -m 2>/dev/null | head -n 400 | sed "s/^/npu-map: /"; fi
a=$(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status 2>/dev/null)
test -n "$a" || a=$(cat /sys/devices/system/cpu/online)
echo "allowed: $a"
for t in lstopo-no-graphics hwloc-ls lstopo; do command -v "$t" >/dev/null 2>&1 || continue; x=$("$t" --disallowed --of xml - 2>/dev/null) || x=$("$t" --whole-system --of xml - 2>/dev/null) || x=$("$t" --of xml - 2>/dev/null) || x=; test -n "$x" || continue; echo "format: hwloc-xml"; printf %s "$x"; echo; exit 0; done
echo "format: sysfs"
s=/sys/devices/system
grep -H "" "$s"/cpu/online "$s"/cpu/cpu[0-9]*/topology/core_id "$s"/cpu/cpu[0-9]*/topology/physical_package_id "$s"/node/node[0-9]*/cpulist 2>/dev/null
grep -l -e 0x19e5 -e 0x10de -e 0x1002 /sys/bus/pci/devices/*/vendor 2>/dev/null | while read -r f; do d=${f%/vendor}; grep -H "" "$d"/vendor "$d"/class "$d"/numa_node 2>/dev/null; done
exit 0
