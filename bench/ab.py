#!/usr/bin/env python3
"""A/B comparison of two msrun-ssh binaries (before / after an optimisation), alternating runs.

  bench/ab.py --a /tmp/msrun-ssh.before --b build-rel/msrun-ssh --suite relay,launch --reps 9
  bench/ab.py --a OLD --b NEW --b-args='--watch=False --agent=False'   # same choices as OLD
  bench/ab.py --a OLD --b NEW --b-env PATH=/nonexistent   # B finds no ssh client: libssh's parser
  bench/ab.py --a OLD --b NEW --suite launch --sizes 64 --ppn 8   # 8 processes per host
  bench/ab.py --a OLD --b NEW --suite launch --sizes 64 --clutter 3000   # a busy host's processes
  bench/ab.py --a OLD --b NEW --suite launch --sizes 64 --login-rc-cpu 0.3   # a conda-like rc

Uses the same cluster, workloads and measurement as bench.py (relay: 4 hosts x 50 MB; launch:
/bin/true on --sizes farm hosts, --ppn per host). Prints medians (min-max) of wall time,
launcher CPU and the whole machine's busy CPU (/proc/stat: the hosts' side too), and B/A.
"""

import argparse
import os
import shutil
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import common  # noqa: E402
from common import log  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--a", required=True, help="msrun-ssh binary A (before)")
    p.add_argument("--b", required=True, help="msrun-ssh binary B (after)")
    p.add_argument("--suite", default="relay,launch")
    p.add_argument("--sizes", default="64,128")
    p.add_argument("--a-args", default="", help="options given to every run of A (split on blanks)")
    p.add_argument("--b-args", default="", help="options given to every run of B (split on blanks)")
    p.add_argument("--a-env", default="", help="NAME=VALUE ... set for every run of A")
    p.add_argument("--b-env", default="", help="NAME=VALUE ... set for every run of B")
    p.add_argument("--ppn", type=int, default=1, help="launch: processes per host")
    p.add_argument("--clutter", type=int, default=0,
                   help="launch: idle processes on the farm, as on a busy host (its watchdogs "
                        "sweep them)")
    p.add_argument("--login-rc-cpu", type=float, default=0,
                   help="launch: CPU seconds every farm host's login rc burns (0: a clean rc)")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--relay-mb", type=int, default=50)
    p.add_argument("--work", default="/tmp/msrun-bench")
    p.add_argument("--timeout", type=float, default=180)
    p.add_argument("--keep-cluster", action="store_true")
    p.add_argument("--no-up", action="store_true")
    args = p.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    os.makedirs(args.work, exist_ok=True)
    os.chmod(args.work, 0o755)
    bins = {}
    for name, path in (("A", args.a), ("B", args.b)):
        bins[name] = os.path.join(args.work, f"msrun-ssh-{name}")
        shutil.copy2(path, bins[name])
    common.raise_nofile()
    args.cluster = common.Cluster(os.path.join(args.work, "cluster"), 4, max(sizes))
    results = {}
    clutter = None
    try:
        if not args.no_up:
            args.cluster.up()
        if args.clutter:
            clutter = args.cluster.clutter(args.clutter)
        if args.login_rc_cpu:
            args.cluster.login_rc(args.login_rc_cpu)
        args.baseline = bench.baseline(args)
        prog, per_proc = bench.make_relay_program(args.work, args.relay_mb)
        relay_toml = args.cluster.write_toml(os.path.join(args.work, "nodes4.toml"),
                                             args.cluster.node_addrs[:4], 1)
        tomls = {n: args.cluster.write_toml(os.path.join(args.work, f"farm{n}.toml"),
                                            args.cluster.farm_addrs[:n], args.ppn)
                 for n in sizes}
        for rep in range(args.reps):
            for name in (("A", "B") if rep % 2 == 0 else ("B", "A")):
                extra = (args.a_args if name == "A" else args.b_args).split()
                env = dict(kv.split("=", 1) for kv in (args.a_env if name == "A" else args.b_env).split())
                tools = bench.Tools(args.cluster, bins[name], args.work, msrun_args=extra,
                                    msrun_env=env)
                if "relay" in args.suite:
                    args.settle_ns = "msrs-node0"
                    r = bench.one_run(args, tools, "msrun-ssh", args.cluster.node_addrs[:4], prog,
                                      relay_toml, relay=True, tag=f"relay {name}")
                    r["payload"] = 4 * per_proc
                    r["ok"] = r["ok"] and r.get("bytes") == r["payload"]
                    results.setdefault(("relay", name), []).append(r)
                    log(f"relay {name} wall {r['wall']:.3f} cpu/GB "
                        f"{r['cpu'] / (r['payload'] / 1e9):.3f} ok {r['ok']}")
                if "launch" in args.suite:
                    args.settle_ns = "msrs-farm"
                    for n in sizes:
                        r = bench.one_run(args, tools, "msrun-ssh", args.cluster.farm_addrs[:n],
                                          "/bin/true", tomls[n], tag=f"launch {name} {n}",
                                          ppn=args.ppn)
                        results.setdefault((f"launch{n}", name), []).append(r)
                        log(f"launch {n} {name} wall {r['wall']:.3f} cpu/host "
                            f"{r['cpu'] * 1000 / n:.3f} ms machine {r['machine_cpu']:.2f} s "
                            f"ok {r['ok']}")
    finally:
        if args.login_rc_cpu:
            args.cluster.login_rc(0)
        if clutter:
            args.cluster.end_clutter(clutter)
        if not args.keep_cluster:
            args.cluster.down()
        shutil.rmtree(os.path.join(args.work, "runs"), ignore_errors=True)
    print(f"\n{args.reps} runs each, alternating (A B, B A, ...), median (min-max)\n")
    print("| workload | binary | wall, s | launcher CPU | machine CPU, s |")
    print("|---|---|---|---|---|")
    medians = {}
    for (what, name), rs in sorted(results.items()):
        rs = [r for r in rs if r["ok"]]
        wall = common.summarize([r["wall"] for r in rs])
        machine = common.summarize([r["machine_cpu"] for r in rs])
        if what == "relay":
            cpu = common.summarize([r["cpu"] / (r["payload"] / 1e9) for r in rs])
            unit = "s/GB"
        else:
            n = int(what[6:])
            cpu = common.summarize([r["cpu"] * 1000 / n for r in rs])
            unit = "ms/host"
        medians[(what, name)] = (wall, machine)
        print(f"| {what} | {name} | {bench.fmt_stat(wall, 1, 3)} | "
              f"{bench.fmt_stat(cpu, 1, 3)} {unit} | {bench.fmt_stat(machine, 1, 2)} |")
    for what in sorted({w for w, _ in medians}):
        a, b = medians.get((what, "A")), medians.get((what, "B"))
        if a and b and a[0] and b[0]:
            print(f"| {what} | B/A | {b[0]['median'] / a[0]['median']:.3f}x | | "
                  f"{b[1]['median'] / a[1]['median']:.3f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
