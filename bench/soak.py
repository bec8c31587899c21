#!/usr/bin/env python3
"""Soak test of msrun-ssh: the same flooding job, back to back, on 64 farm hosts x 4 processes.

Every process prints --lines numbered lines of ~100 bytes as fast as it can (every 1000th on
stderr), then "rank R done N". After each run the script checks:
  - every per-rank log holds exactly the expected number of lines, and its last stdout line is the
    "done" line (no line lost, none cut);
  - nothing is left running in the farm (its process count is back to the baseline);
and records the launcher's peak descriptor count (sampled every 20 ms) and peak RSS (VmHWM), so
growth between runs shows. Exit 0 only when every run passed and nothing grew.

  bench/soak.py                       # 64 hosts x 4 processes, 8 runs, total bounded to 10 min
  bench/soak.py --runs 3 --lines 20000
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

FLOOD = r"""#!/bin/sh
# Soak-test job: N numbered lines (every 1000th on stderr), then a "done" line.
[ "$MS_ROLE" = MS_SCHED ] && { echo "scheduler up"; exit 0; }
exec awk -v r="$RANK_ID" -v n="$1" 'BEGIN {
  pad = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
  for (i = 1; i <= n; i++) {
    if (i % 1000 == 0) printf "rank %d err %d %s\n", r, i, pad > "/dev/stderr"
    else printf "rank %d line %d %s\n", r, i, pad
  }
  printf "rank %d done %d\n", r, n
}'
"""


def check_log(path, rank, lines):
    """Returns None when the log is complete, else what is wrong."""
    expected = lines + 1
    count = 0
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 22)
            if not chunk:
                break
            count += chunk.count(b"\n")
        f.seek(max(0, size - 4096))
        tail = f.read().splitlines()
    if count != expected:
        return f"{count} lines, expected {expected}"
    stdout_tail = [t for t in tail if b" err " not in t]
    want = f"rank {rank} done {lines}".encode()
    if not stdout_tail or stdout_tail[-1] != want:
        return f"last stdout line {stdout_tail[-1:]!r}, expected {want!r}"
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--hosts", type=int, default=64)
    p.add_argument("--procs", type=int, default=4, help="processes per host")
    p.add_argument("--lines", type=int, default=150000, help="lines per process and run")
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--max-minutes", type=float, default=10, help="no new run starts after this")
    p.add_argument("--timeout", type=float, default=240, help="per run, seconds")
    p.add_argument("--msrun", default=common.DEFAULT_MSRUN)
    p.add_argument("--work", default="/tmp/msrun-soak", help="scratch directory (wiped)")
    p.add_argument("--out", default="/tmp/msrun-soak-results")
    p.add_argument("--keep-cluster", action="store_true")
    p.add_argument("--no-up", action="store_true")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("soak.py needs root (the test cluster uses network namespaces)", file=sys.stderr)
        return 77
    common.raise_nofile()
    os.makedirs(args.work, exist_ok=True)
    os.chmod(args.work, 0o755)
    msrun = os.path.join(args.work, "msrun-ssh")
    shutil.copy2(args.msrun, msrun)
    prog = os.path.join(args.work, "flood.sh")
    with open(prog, "w") as f:
        f.write(FLOOD)
    os.chmod(prog, 0o755)
    cluster = common.Cluster(os.path.join(args.work, "cluster"), 1, args.hosts)
    results = {"machine": common.tool_versions(msrun), "hosts": args.hosts, "procs": args.procs,
               "lines": args.lines, "runs": []}
    ok = True
    t_start = time.monotonic()
    try:
        if not args.no_up:
            cluster.up()
        toml = cluster.write_toml(os.path.join(args.work, "soak.toml"), cluster.farm_addrs,
                                  args.procs)
        time.sleep(1)
        base = len(common.netns_pids("msrs-farm"))
        log(f"farm baseline: {base} processes")
        for run in range(args.runs):
            if time.monotonic() - t_start > args.max_minutes * 60:
                log(f"time budget of {args.max_minutes} min used up after {run} runs")
                break
            log_dir = os.path.join(args.work, "logs")
            shutil.rmtree(log_dir, ignore_errors=True)
            os.makedirs(log_dir, mode=0o700)
            argv = [msrun, "--hostfile", toml, "--log_dir", log_dir, prog, str(args.lines)]
            # The console (GBs of prefixed lines) goes to /dev/null; msrun-ssh.log keeps the
            # launcher's messages and summary, and is saved when a run goes wrong.
            r = common.run_measured(argv, stdout=None, timeout_s=args.timeout, sample="root")
            r["leftover"] = common.wait_settled("msrs-farm", base, max_wait_s=30)
            bad = []
            total = 0
            nprocs = args.hosts * args.procs
            for rank in range(nprocs):
                path = os.path.join(log_dir, f"worker_{rank}.log")
                if not os.path.exists(path):
                    bad.append(f"worker_{rank}.log missing")
                    continue
                total += os.path.getsize(path)
                why = check_log(path, rank, args.lines)
                if why:
                    bad.append(f"worker_{rank}.log: {why}")
            r.update(run=run, bytes=total, bad=bad[:10], bad_count=len(bad))
            r["ok"] = r["rc"] == 0 and not r["timeout"] and not bad and r["leftover"] == 0
            ok = ok and r["ok"]
            if not r["ok"]:
                os.makedirs(args.out, exist_ok=True)
                shutil.copy2(os.path.join(log_dir, "msrun-ssh.log"),
                             os.path.join(args.out, f"msrun-ssh.run{run}.log"))
            results["runs"].append(r)
            log(f"run {run}: rc {r['rc']} wall {r['wall']:.1f}s {total / 1e6:.0f} MB "
                f"{total / 1e6 / r['wall']:.1f} MB/s cpu {r['cpu']:.1f}s fd_peak {r['fd_peak']} "
                f"peak RSS {r['root_peak_kb'] / 1024:.1f}MB "
                f"left {r['leftover']} bad logs {len(bad)} {bad[:3]}")
            common.save_json(os.path.join(args.out, "soak.json"), results)
            if not cluster.alive():
                log("the cluster vanished under the soak test: stopping")
                ok = False
                break
    finally:
        if not args.keep_cluster:
            cluster.down()
        if ok:  # GBs: kept only when something went wrong
            shutil.rmtree(os.path.join(args.work, "logs"), ignore_errors=True)
    runs = results["runs"]
    if len(runs) >= 2:
        fds = {r["fd_peak"] for r in runs}
        rss = [r["root_peak_kb"] for r in runs]
        grew = len(fds) > 1 or max(rss[1:]) > rss[0] * 1.10 + 2048
        results["growth"] = {"fd_peaks": sorted(fds), "rss_first_kb": rss[0],
                             "rss_max_later_kb": max(rss[1:]), "grew": grew}
        ok = ok and not grew
    results["ok"] = ok
    common.save_json(os.path.join(args.out, "soak.json"), results)
    print_table(results)
    return 0 if ok else 1


def print_table(results):
    print(f"\nsoak: {results['hosts']} hosts x {results['procs']} processes, "
          f"{results['lines']} lines each per run\n")
    print("| run | exit | wall, s | MB logged | MB/s | launcher CPU, s | peak fds | peak RSS, MB "
          "| farm processes left | bad logs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results["runs"]:
        print(f"| {r['run']} | {r['rc']} | {r['wall']:.1f} | {r['bytes'] / 1e6:.0f} | "
              f"{r['bytes'] / 1e6 / r['wall']:.1f} | {r['cpu']:.1f} | {r['fd_peak']} | "
              f"{r['root_peak_kb'] / 1024:.1f} | {r['leftover']} | "
              f"{r['bad_count']} |")
    print(f"\ngrowth: {results.get('growth')}; ok: {results['ok']}")


if __name__ == "__main__":
    sys.exit(main())
