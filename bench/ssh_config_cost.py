#!/usr/bin/env python3
"""What reading the ssh config as OpenSSH reads it (`ssh -G`, docs/ssh.md) adds to a start.

  bench/ssh_config_cost.py --msrun BINARY [--hosts 512] [--reps 3] [--ways W,W]

Launches /bin/true on --hosts farm addresses (one process per host), three ways in turn, each
repetition in a rotating order:
  no-ssh-client  the launcher finds no `ssh` (PATH holds none): libssh reads the config itself,
                 no `ssh -G` at all: the baseline;
  one-host-block a config of one `Host *` block: every name is matched by the same Host lines,
                 so one `ssh -G` stands for all of them;
  match-host     a config with a `Match host *` line: names are grouped as under Host lines,
                 one `ssh -G` for all;
  match-user     a config with a `Match user` line: the user is the same for every name the
                 same Host lines match, so names are grouped as under Host lines, one `ssh -G`;
  match-exec-h   a config with a `Match exec` whose command names the host (%h): every name is
                 asked on its own (--hosts `ssh -G`s, two per CPU at a time), the worst case,
                 and what ssh itself runs on every connection it makes with that config.
Prints, per way, the medians (min-max) of the wall time, the launcher's CPU (itself and every
local process it started: the `ssh -G`s) and the machine's busy CPU (/proc/stat: the farm's sshd
and shells share the 2 CPUs), and each way's wall time over the baseline's of the same
repetition. Needs root (the farm is network namespaces); brings the cluster up and down itself.
"""

import argparse
import os
import shutil
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log  # noqa: E402

# ConnectTimeout 10 is the launcher's own default: the configs change nothing but how they are
# read.
CONFIGS = {
    "one-host-block": "Host *\n  ConnectTimeout 10\n",
    "match-host": "Match host *\n  ConnectTimeout 10\n",
    "match-user": "Match user root\n  ConnectTimeout 10\n",
    "match-exec-h": "Match exec \"test %h != none\"\n  ConnectTimeout 10\n",
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--msrun", required=True, help="the msrun-ssh binary (a Release build)")
    p.add_argument("--hosts", type=int, default=512)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--work", default="/tmp/msrun-bench")
    p.add_argument("--no-up", action="store_true", help="use the cluster already in --work/cluster")
    p.add_argument("--keep-cluster", action="store_true")
    p.add_argument("--ways", default=",".join(CONFIGS),
                   help="the configs to pair with no-ssh-client (default: all)")
    args = p.parse_args()
    msrun = os.path.abspath(args.msrun)
    os.makedirs(args.work, exist_ok=True)
    common.raise_nofile()
    cluster = common.Cluster(os.path.join(args.work, "cluster"), 4, args.hosts)
    no_ssh = os.path.join(args.work, "path-without-ssh")  # an empty directory as PATH
    os.makedirs(no_ssh, exist_ok=True)
    ways = ["no-ssh-client", *args.ways.split(",")]
    if any(w not in CONFIGS for w in ways[1:]):
        p.error(f"--ways: one of {', '.join(CONFIGS)}")
    results = {}
    runs = os.path.join(args.work, "runs-ssh-config")
    shutil.rmtree(runs, ignore_errors=True)  # what an interrupted run left
    try:
        if not args.no_up:
            cluster.up()
        time.sleep(1)
        baseline = len(common.netns_pids("msrs-farm"))
        toml = cluster.write_toml(os.path.join(args.work, "ssh-config-cost.toml"),
                                  cluster.farm_addrs[:args.hosts], 1)
        configs = {}
        for name, text in CONFIGS.items():
            configs[name] = os.path.join(args.work, f"ssh-config-cost.{name}")
            open(configs[name], "w").write(text)
        for rep in range(args.reps):
            k = rep % len(ways)
            for way in ways[k:] + ways[:k]:
                log_dir = os.path.join(runs, f"{rep}-{way}")
                os.makedirs(log_dir)
                # One farm sshd serves all the hosts on this machine's 2 CPUs: a heartbeat waits
                # for it behind hundreds of logins, longer than the default watchdog limit (2 x 5 s).
                argv = [msrun, "--hostfile", toml, "--log_dir", log_dir, "--heartbeat", "30"]
                env = None
                if way == "no-ssh-client":
                    env = {"PATH": no_ssh}
                    argv += ["--ssh_config", configs["one-host-block"]]
                else:
                    argv += ["--ssh_config", configs[way]]
                r = common.run_measured(argv + ["/bin/true"], env=env, timeout_s=300)
                common.wait_settled("msrs-farm", baseline)
                results.setdefault(way, []).append(r)
                log(f"rep {rep} {way:15} wall {r['wall']:6.2f} s  launcher cpu {r['cpu']:6.2f} s"
                    f"  machine cpu {r['machine_cpu']:6.2f} s  rc {r['rc']}")
    finally:
        if not args.keep_cluster:
            cluster.down()
        shutil.rmtree(runs, ignore_errors=True)

    def fmt(values, digits=2):
        s = common.summarize(values)
        return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"

    base = results["no-ssh-client"]
    print(f"\n| {args.hosts} hosts × /bin/true | wall, s | launcher CPU, s | machine CPU, s "
          "| wall / baseline's (paired) |")
    print("|---|---|---|---|---|")
    for way in ways:
        rs = results[way]
        ratio = [r["wall"] / b["wall"] for r, b in zip(rs, base)]
        print(f"| {way} | {fmt([r['wall'] for r in rs])} | {fmt([r['cpu'] for r in rs])} | "
              f"{fmt([r['machine_cpu'] for r in rs])} | {fmt(ratio, 3)} |")
    return 0 if all(r["rc"] == 0 for rs in results.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
