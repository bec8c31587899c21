#!/usr/bin/env python3
"""Regenerates the hwloc XML topologies used by tests/unit/topology_test.cc and allocate_test.cc.

Each file is what `lstopo-no-graphics --of xml` (hwloc 2.9) prints for a synthetic description that
stands for a real server, with Linux CPU numbering (hyper-thread siblings numbered after all first
threads: core c has PUs c and c + cores), plus the accelerators such a server carries, injected as
PCI devices under a host bridge of the NUMA node they are attached to (hwloc's synthetic backend
has no I/O objects). Run from anywhere: python3 tests/data/topology/generate.py
"""
import os
import subprocess
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n'

NPU_910B = "1200 [19e5:d802] [19e5:6000] 00"  # Huawei Ascend 910B, processing accelerator
GPU_A100 = "0302 [10de:20b0] [10de:134f] a1"  # NVIDIA A100 SXM4, 3D controller
NIC_CX6 = "0200 [15b3:101b] [15b3:0007] 00"  # Mellanox ConnectX-6, must be ignored


def synthetic_xml(description):
    out = subprocess.run(["lstopo-no-graphics", "--input", description, "--of", "xml", "-"],
                         check=True, capture_output=True, text=True).stdout
    return ET.fromstring(out.split("\n", 2)[2])


def numa_parent(root, node):
    for parent in root.iter("object"):
        for child in parent.findall("object"):
            if child.get("type") == "NUMANode" and child.get("os_index") == str(node):
                return parent
    raise KeyError(node)


def add_pci(root, node, bus, pci_type, gp):
    """One host bridge per device, as on servers where every accelerator has its own root port."""
    bridge = ET.SubElement(numa_parent(root, node), "object", {
        "type": "Bridge", "gp_index": str(gp), "bridge_type": "0-1", "depth": "0",
        "bridge_pci": "0000:[%02x-%02x]" % (bus, bus)})
    ET.SubElement(bridge, "object", {
        "type": "PCIDev", "gp_index": str(gp + 1), "pci_busid": "0000:%02x:00.0" % bus,
        "pci_type": pci_type, "pci_link_speed": "0.000000"})


def bitmap(cpus):
    """hwloc's bitmap text: comma-separated 32-bit words, most significant first."""
    value = sum(1 << c for c in cpus)
    words = []
    while True:
        words.append("0x%08x" % (value & 0xFFFFFFFF))
        value >>= 32
        if not value:
            break
    return ",".join(reversed(words))


def write(name, root):
    ET.indent(root, "  ")
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        f.write(HEADER + ET.tostring(root, encoding="unicode") + "\n")


def linux_pus(cores, threads):
    """indexes= interleaving giving PU P#c + k*cores to thread k of core c."""
    return "pu:%d(indexes=%d*%d:1*%d)" % (threads, threads, cores, threads)


def devices(root, placement, pci_type, gp=100000):
    for node, bus in placement:
        add_pci(root, node, bus, pci_type, gp)
        gp += 2


def main():
    # (a) Atlas-800-class NPU server: 2 sockets, 2 NUMA nodes per socket, 24 cores per node,
    # 2 threads (96 cores / 192 PUs); 8 Ascend NPUs, 2 per NUMA node, plus a NIC.
    root = synthetic_xml("pack:2 numa:2 core:24 " + linux_pus(96, 2))
    devices(root, [(0, 0x01), (0, 0x02), (1, 0x41), (1, 0x42), (2, 0x81), (2, 0x82),
                   (3, 0xc1), (3, 0xc2)], NPU_910B)
    devices(root, [(0, 0x05)], NIC_CX6, gp=100100)
    write("npu_2s4n_96c192t.xml", root)

    # (b) The same kind of server seen from a container: 2 sockets, one NUMA node each, 24 cores,
    # 2 threads; 8 NPUs, 4 per node; the cgroup cpuset allows 4-11,52-59 (8 cores of node 0 with
    # their siblings). Exported as `lstopo --disallowed` prints it there: every object, with the
    # allowed set in allowed_cpuset.
    root = synthetic_xml("pack:2 numa:1 core:24 " + linux_pus(48, 2))
    devices(root, [(0, 0x01), (0, 0x02), (0, 0x03), (0, 0x04), (1, 0x81), (1, 0x82),
                   (1, 0x83), (1, 0x84)], NPU_910B)
    root.find("object").set("allowed_cpuset", bitmap(list(range(4, 12)) + list(range(52, 60))))
    root.find("object").set("allowed_nodeset", "0x00000001")
    write("npu_2s2n_48c96t_container.xml", root)

    # (d) GPU server: 2 sockets, one NUMA node each, 32 cores, 2 threads (64 cores / 128 PUs);
    # 8 A100, 4 per socket.
    root = synthetic_xml("pack:2 numa:1 core:32 " + linux_pus(64, 2))
    devices(root, [(0, 0x07), (0, 0x0f), (0, 0x47), (0, 0x4e), (1, 0x87), (1, 0x90),
                   (1, 0xb7), (1, 0xbd)], GPU_A100)
    write("gpu_2s2n_64c128t.xml", root)

    # (c) small VM: one NUMA node, 4 cores, 2 threads; no accelerator.
    write("vm_1n_4c8t.xml", synthetic_xml("numa:1 core:4 " + linux_pus(4, 2)))

    # (e) CPU-only server: 2 sockets, one NUMA node each, 16 cores, 2 threads.
    write("cpu_2s2n_32c64t.xml", synthetic_xml("pack:2 numa:1 core:16 " + linux_pus(32, 2)))


def sysfs_sample():
    """What the probe's sysfs branch prints on a Kunpeng 920 NPU server (4 sockets of 48 cores, no
    SMT, one NUMA node per socket, 8 Ascend NPUs two per node, Huawei NICs that must be ignored),
    in the order grep -H prints it."""
    sysd = "/sys/devices/system"
    lines = ["allowed: 0-191", "format: sysfs", sysd + "/cpu/online:0-191"]
    cpus = sorted(range(192), key=str)  # the shell sorts cpu10 before cpu2
    lines += ["%s/cpu/cpu%d/topology/core_id:%d" % (sysd, c, c % 48) for c in cpus]
    lines += ["%s/cpu/cpu%d/topology/physical_package_id:%d" % (sysd, c, c // 48) for c in cpus]
    lines += ["%s/node/node%d/cpulist:%d-%d" % (sysd, n, 48 * n, 48 * n + 47) for n in range(4)]
    pci = [("0000:01:00.0", "0x19e5", "0x120000", 0), ("0000:02:00.0", "0x19e5", "0x120000", 0),
           ("0000:41:00.0", "0x19e5", "0x120000", 1), ("0000:42:00.0", "0x19e5", "0x120000", 1),
           ("0000:81:00.0", "0x19e5", "0x120000", 2), ("0000:82:00.0", "0x19e5", "0x120000", 2),
           ("0000:BD:00.0", "0x19e5", "0x020000", 3),  # Hi1822 NIC
           ("0000:c1:00.0", "0x19e5", "0x120000", 3), ("0000:c2:00.0", "0x19e5", "0x120000", 3)]
    for bus, vendor, klass, node in sorted(pci, key=lambda p: p[0].lower(), reverse=True):
        base = "/sys/bus/pci/devices/" + bus
        lines += [base + "/vendor:" + vendor, base + "/class:" + klass,
                  base + "/numa_node:%d" % node]
    with open(os.path.join(HERE, "sysfs_kunpeng_4n_192c_8npu.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sysfs_sample()
    main()
