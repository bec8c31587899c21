#!/usr/bin/env python3
"""Launcher CPU against the size and kind of known_hosts, two binaries alternating.

  bench/known_hosts.py --a OLD_BINARY --b NEW_BINARY [--hosts 128] [--extra 2000] [--reps 5]

Launches /bin/true on --hosts farm addresses with three known_hosts files: the cluster's own,
the same with --extra lines for other hosts, and that one hashed with `ssh-keygen -H` (what
HashKnownHosts yes writes). Prints medians (min-max) of the launcher CPU and wall time.
"""

import argparse
import os
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log  # noqa: E402


def known_hosts_files(cluster, work, extra):
    own = os.path.join(cluster.dir, "known_hosts")
    lines = open(own).read().splitlines()
    key = lines[0].split(None, 1)[1]
    big = os.path.join(work, "known_hosts.big")
    with open(big, "w") as f:
        f.write("".join(f"10.{i // 250}.{i % 250}.1 {key}\n" for i in range(extra)))
        f.write("\n".join(lines) + "\n")
    hashed = os.path.join(work, "known_hosts.hashed")
    shutil.copy(big, hashed)
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", hashed], check=True, capture_output=True)
    os.remove(hashed + ".old")
    return {"own": own, f"plain+{extra}": big, f"hashed+{extra}": hashed}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--a", required=True, help="msrun-ssh binary A (before)")
    p.add_argument("--b", required=True, help="msrun-ssh binary B (after)")
    p.add_argument("--hosts", type=int, default=128)
    p.add_argument("--extra", type=int, default=2000, help="known_hosts lines for other hosts")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--work", default="/tmp/msrun-bench")
    p.add_argument("--no-up", action="store_true", help="use the cluster already in --work/cluster")
    p.add_argument("--keep-cluster", action="store_true")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    common.raise_nofile()
    cluster = common.Cluster(os.path.join(args.work, "cluster"), 4, args.hosts)
    results = {}
    try:
        if not args.no_up:
            cluster.up()
        files = known_hosts_files(cluster, args.work, args.extra)
        time.sleep(1)
        baseline = len(common.netns_pids("msrs-farm"))
        addrs = cluster.farm_addrs[:args.hosts]
        tomls = {}
        for name, path in files.items():
            tomls[name] = cluster.write_toml(os.path.join(args.work, f"kh-{name}.toml"), addrs, 1)
            text = open(tomls[name]).read().replace(os.path.join(cluster.dir, "known_hosts"), path)
            open(tomls[name], "w").write(text)
        runs = os.path.join(args.work, "runs-kh")
        for rep in range(args.reps):
            for name in files:
                for label, binary in ((("A", args.a), ("B", args.b)) if rep % 2 == 0
                                      else (("B", args.b), ("A", args.a))):
                    log_dir = os.path.join(runs, f"{rep}-{name}-{label}")
                    os.makedirs(log_dir)
                    r = common.run_measured([binary, "--hostfile", tomls[name], "--log_dir",
                                             log_dir, "/bin/true"], timeout_s=180)
                    common.wait_settled("msrs-farm", baseline)
                    results.setdefault((name, label), []).append(r)
                    log(f"{name:14} {label} cpu {r['cpu'] * 1000:8.1f} ms wall {r['wall']:.2f} s "
                        f"rc {r['rc']}")
    finally:
        if not args.keep_cluster:
            cluster.down()
        shutil.rmtree(os.path.join(args.work, "runs-kh"), ignore_errors=True)
    print(f"\n| known_hosts | binary | launcher CPU, ms ({args.hosts} hosts) | wall, s |")
    print("|---|---|---|---|")
    for (name, label), rs in results.items():
        cpu = common.summarize([r["cpu"] * 1000 for r in rs])
        wall = common.summarize([r["wall"] for r in rs])
        print(f"| {name} | {label} | {cpu['median']:.0f} ({cpu['min']:.0f}–{cpu['max']:.0f}) | "
              f"{wall['median']:.2f} ({wall['min']:.2f}–{wall['max']:.2f}) |")
    return 0 if all(r["rc"] == 0 for rs in results.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
