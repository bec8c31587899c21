#!/usr/bin/env python3
"""Benchmarks of msrun-ssh against pdsh (-R ssh), ClusterShell's clush and Open MPI's mpirun.

Brings up the test cluster itself (tests/cluster/cluster.sh: 4 namespace hosts + a farm of 128
addresses served by one sshd), runs the tools alternately (every repetition runs each tool once
per configuration, in a rotating order), takes the cluster down, and writes results.json and
results.md into --out. See docs/benchmarks.md for what is measured and why.

  bench/bench.py                          # everything, 5 repetitions
  bench/bench.py --suite launch --reps 7 --sizes 1,16,64,128
  bench/bench.py --suite relay --tools msrun-ssh,mpirun
  bench/bench.py --suite login --reps 3 --login-sizes 16,64 --login-ppn 1,8
  bench/bench.py --plot docs/benchmarks    # also draw docs/benchmarks-launch.png (matplotlib)
  bench/bench.py --suite memory --mem-sizes 64,512 --tools msrun-ssh,libssh-floor
                                          # peak RSS per host against libssh's own floor
  bench/bench.py --suite launch,login --tools msrun-ssh,pdsh,libssh-floor
                                          # start-up CPU against one bare login per host

Needs root (network namespaces), a release build of msrun-ssh (--msrun), pdsh, clush, mpirun.
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

TOOLS = ["msrun-ssh", "pdsh", "clush", "mpirun"]
# msrun-ssh with a console option, measured like msrun-ssh itself (--tools may name them).
VARIANTS = {"msrun-ssh+gather": ["--output", "gather"], "msrun-ssh+timestamps": ["--timestamps"],
            "msrun-ssh+log_timestamps": ["--log_timestamps"],
            # a channel (and a login rc) per process, as before the launch agent
            "msrun-ssh+no_agent": ["--agent=False"],
            # the launch agent also on hosts with one process (auto, the default, skips those)
            "msrun-ssh+agent": ["--agent=True"],
            # without the hosts' samplers (straggler events, top): what --watch costs
            "msrun-ssh+no_watch": ["--watch=False"]}


# Not a launcher: one authenticated libssh session and one open channel per host, nothing else
# (libssh_floor.cc); the memory suite's floor for any libssh launcher. In the launch and login
# suites it runs the program on every host at once and waits for it: the start-up floor (machine
# CPU) of any launcher that logs in once per host over libssh.
FLOOR = "libssh-floor"


def is_msrun(tool):
    return tool == "msrun-ssh" or tool in VARIANTS
FANOUT = 64
LINE = b"x" * 99 + b"\n"  # 100-byte lines for the relay

# Open MPI's rsh agent. All farm addresses are one namespace (one hostname, one /tmp), where the
# orteds' session directories (/tmp/ompi.<hostname>.<uid>/jf.<job>/...) collide and orte_init fails
# ("A call to mkdir was unable to create the desired directory"); each orted gets its own TMPDIR.
# Its cost (one dash per ssh that mpirun starts) is counted in mpirun's CPU; see docs/benchmarks.md.
OMPI_AGENT = r"""#!/bin/sh
# Called by mpirun / orted as: ompi-ssh.sh -F SSH_CONFIG HOST ORTED_WORDS...
cfg=$2 host=$3
shift 3
exec ssh -F "$cfg" "$host" "TMPDIR=/tmp/ompi-bench/$host; export TMPDIR; mkdir -p \$TMPDIR;" "$@"
"""


class Tools:
    """Builds each tool's command line. `addrs`: the hosts; `program`: what runs on each."""

    def __init__(self, cluster, msrun, work, floor=None, msrun_args=(), msrun_env=None):
        self.c = cluster
        self.msrun = msrun
        # Options and environment given to every msrun-ssh run (bench/ab.py).
        self.msrun_args = list(msrun_args)
        self.msrun_env = dict(msrun_env or {})
        self.floor = floor
        self.work = work
        self.ompi_agent = os.path.join(work, "ompi-ssh.sh")
        with open(self.ompi_agent, "w") as f:
            f.write(OMPI_AGENT)
        os.chmod(self.ompi_agent, 0o755)

    def env(self, tool):
        if tool == "pdsh":
            return {"PDSH_SSH_ARGS_APPEND": f"-F {self.c.ssh_config}"}
        if is_msrun(tool):
            return dict(self.msrun_env)
        return {}

    @staticmethod
    def shell_program(program, ppn):
        """What pdsh, clush and the libssh floor run on a host: its `ppn` processes, from one
        remote shell."""
        return f"for i in $(seq {ppn}); do {program} & done; wait" if ppn > 1 else program

    def floor_env(self, program, ppn):
        """The libssh floor as a launcher (launch and login suites): every host at once runs the
        program and is waited for (libssh_floor.cc, FLOOR_COMMAND)."""
        return {"FLOOR_COMMAND": self.shell_program(program, ppn)}

    def argv(self, tool, addrs, program, log_dir, toml, ppn=1):
        """`ppn` processes of `program` per host: msrun-ssh's host file says so (toml), mpirun
        gets HOST:ppn, and pdsh/clush run one remote shell per host that starts them all."""
        if tool == FLOOR:
            return [self.floor, os.path.join(self.c.dir, "id_ed25519"),
                    os.path.join(self.c.dir, "known_hosts"), "1", *addrs]
        if is_msrun(tool):
            return [self.msrun, "--hostfile", toml, "--log_dir", log_dir, "--fanout", str(FANOUT),
                    *self.msrun_args, *VARIANTS.get(tool, []), program]
        if tool in ("pdsh", "clush"):
            program = self.shell_program(program, ppn)
        if tool == "pdsh":
            return ["pdsh", "-R", "ssh", "-f", str(FANOUT), "-w", ",".join(addrs), program]
        if tool == "clush":
            return ["clush", "-f", str(FANOUT), "-w", ",".join(addrs), "-o",
                    f"-F {self.c.ssh_config}", program]
        if tool == "mpirun":
            # Open MPI's default tree spawn is kept: it is the design we compare with. The OOB
            # channel is pinned to the cluster's range so that nothing is tried elsewhere.
            argv = ["mpirun", "--allow-run-as-root", "--oversubscribe",
                    "--host", ",".join(f"{a}:{ppn}" for a in addrs),
                    "-np", str(len(addrs) * ppn),
                    "--mca", "plm_rsh_agent", self.ompi_agent,
                    "--mca", "plm_rsh_args", f"-F {self.c.ssh_config}",
                    "--mca", "plm_rsh_num_concurrent", str(FANOUT),
                    "--mca", "oob_tcp_if_include", "198.18.0.0/16",
                    "--mca", "btl_tcp_if_include", "198.18.0.0/16"]
            if log_dir:
                argv += ["--output-filename", log_dir]
            return argv + [program]
        raise ValueError(tool)


def fresh_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, mode=0o700)
    return path


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def rotated(tools, rep):
    k = rep % len(tools)
    return tools[k:] + tools[:k]


def one_run(args, tools, tool, addrs, program, toml, *, relay=False, sample=None, tag="", ppn=1):
    """One measured run; retried (bounded) when the cluster vanished under it."""
    for _ in range(3):
        # A new directory per run, all removed at the end of the batch: deleting the last run's
        # files right before the next run would make ext4 (without journal, as on the benchmark
        # VM) scan the recently deleted inodes on every file creation.
        args.run_seq = getattr(args, "run_seq", 0) + 1
        run_dir = fresh_dir(os.path.join(args.work, "runs", str(args.run_seq)))
        log_dir = os.path.join(run_dir, "logs")
        if tool != "mpirun":
            os.makedirs(log_dir, mode=0o700)
        out = os.path.join(run_dir, "out.txt")
        # pdsh and clush: their output file is the log. msrun-ssh and mpirun write per-rank log
        # files themselves; in the relay their console goes to /dev/null.
        stdout_file = None if relay and (is_msrun(tool) or tool == "mpirun") else out
        uses_logs = is_msrun(tool) or (relay and tool == "mpirun")
        argv = tools.argv(tool, addrs, program, log_dir if uses_logs else None, toml, ppn)
        env = tools.env(tool)
        if tool == FLOOR and not sample:  # the memory suite samples the floor's serial mode
            env = tools.floor_env(program, ppn)
        r = common.run_measured(argv, env=env, stdout=stdout_file,
                                timeout_s=args.timeout, sample=sample)
        r["leftover"] = common.wait_settled(args.settle_ns, args.baseline.get(args.settle_ns, 0))
        if relay:
            if is_msrun(tool):
                r["bytes"] = sum(os.path.getsize(os.path.join(log_dir, f))
                                 for f in os.listdir(log_dir) if f.startswith("worker_"))
            elif tool == "mpirun":
                r["bytes"] = dir_bytes(log_dir)
            else:
                r["bytes"] = os.path.getsize(out) if os.path.exists(out) else 0
        r["ok"] = r["rc"] == 0 and not r["timeout"]
        if not r["ok"]:
            tail = ""
            for f in (out, os.path.join(log_dir, "msrun-ssh.log")):
                if os.path.exists(f):
                    with open(f, "rb") as fh:
                        fh.seek(max(0, os.path.getsize(f) - 600))
                        tail += fh.read().decode(errors="replace")
            log(f"  {tool} {tag} FAILED rc={r['rc']} timeout={r['timeout']}: {tail[-800:]}")
        if relay:  # 200 MB each run: not kept
            shutil.rmtree(run_dir, ignore_errors=True)
        if r["ok"]:
            return r
        if args.cluster.alive():
            return r
        log("  the cluster vanished (someone else's `up`?): bringing ours back, then retrying")
        args.cluster.up()
        args.baseline = baseline(args)
    return r


def baseline(args):
    time.sleep(1)
    return {ns: len(common.netns_pids(ns)) for ns in ("msrs-farm", "msrs-node0")}


# ------------------------------------------------------------------------------------------------


def bench_launch(args, tools, results, sample=None, key="launch", sizes=None):
    sizes = sizes or args.sizes
    tomls = {n: args.cluster.write_toml(os.path.join(args.work, f"farm{n}.toml"),
                                        args.cluster.farm_addrs[:n], 1) for n in sizes}
    runs = results.setdefault(key, {})
    args.settle_ns = "msrs-farm"
    reps = args.mem_reps if sample else args.reps
    for rep in range(reps):
        for n in sizes:
            for tool in rotated(args.tools, rep + n):
                r = one_run(args, tools, tool, args.cluster.farm_addrs[:n], "/bin/true", tomls[n],
                            sample=sample, tag=f"{key} n={n} rep={rep}")
                runs.setdefault(tool, {}).setdefault(str(n), []).append(r)
                extra = f" tree_peak={r.get('tree_peak_kb', 0) / 1024:.1f}MB" if sample else ""
                log(f"{key} rep {rep} n={n:3} {tool:9} wall {r['wall']:.3f}s cpu "
                    f"{r['cpu'] * 1000 / n:7.2f} ms/host (waited {r['own_cpu'] * 1000 / n:6.2f}) "
                    f"machine {r['machine_cpu']:.2f}s "
                    f"orphans {r['orphans']:3} maxrss {r['maxrss_kb'] / 1024:.1f}MB"
                    f"{extra} left {r['leftover']}{'' if r['ok'] else ' FAILED'}")
        common.save_json(os.path.join(args.out, "results.json"), results)


def bench_login(args, tools, results):
    """Start-up under a real login rc: every farm address's rc burns --login-rc-cpu seconds of CPU
    (as `conda init` does), then `ppn` processes of /bin/true per host start, on --login-sizes
    hosts; the tools alternate run by run."""
    runs = results.setdefault("login", {"rc_cpu_s": args.login_rc_cpu, "runs": {}})["runs"]
    args.settle_ns = "msrs-farm"
    args.cluster.login_rc(args.login_rc_cpu)
    try:
        for rep in range(args.reps):
            for n in args.login_sizes:
                for ppn in args.login_ppn:
                    addrs = args.cluster.farm_addrs[:n]
                    toml = args.cluster.write_toml(
                        os.path.join(args.work, f"login{n}x{ppn}.toml"), addrs, ppn)
                    for tool in rotated(args.tools, rep + n + ppn):
                        r = one_run(args, tools, tool, addrs, "/bin/true", toml, ppn=ppn,
                                    tag=f"login n={n} ppn={ppn} rep={rep}")
                        runs.setdefault(tool, {}).setdefault(f"{n}x{ppn}", []).append(r)
                        log(f"login rep {rep} n={n:3} ppn={ppn} {tool:9} wall {r['wall']:.2f}s "
                            f"launcher cpu {r['cpu']:.2f}s machine cpu {r['machine_cpu']:.1f}s"
                            f"{'' if r['ok'] else ' FAILED'}")
            common.save_json(os.path.join(args.out, "results.json"), results)
    finally:
        args.cluster.login_rc(0)


def make_relay_program(work, mb):
    data = os.path.join(work, "relay-lines.txt")
    lines = mb * 1000 * 1000 // len(LINE)
    with open(data, "wb") as f:
        chunk = LINE * 10000
        for _ in range(lines // 10000):
            f.write(chunk)
        f.write(LINE * (lines % 10000))
    prog = os.path.join(work, "relay.sh")
    with open(prog, "w") as f:
        f.write("#!/bin/sh\n# msrun-ssh starts a scheduler too: it prints nothing.\n"
                f"[ \"$MS_ROLE\" = MS_SCHED ] && exit 0\nexec cat {data}\n")
    os.chmod(prog, 0o755)
    os.chmod(work, 0o755)
    return prog, lines * len(LINE)


def bench_relay(args, tools, results):
    work = args.work
    prog, per_proc = make_relay_program(work, args.relay_mb)
    addrs = args.cluster.node_addrs[:4]
    toml = args.cluster.write_toml(os.path.join(work, "nodes4.toml"), addrs, 1)
    runs = results.setdefault("relay", {})
    args.settle_ns = "msrs-node0"
    for rep in range(args.reps):
        for tool in rotated(args.tools, rep):
            r = one_run(args, tools, tool, addrs, prog, toml, relay=True, tag=f"relay rep={rep}")
            r["payload"] = 4 * per_proc
            # Every byte must have reached the logs (pdsh and clush add a host prefix per line).
            # --log_timestamps adds a stamp to every line: at least the payload, like pdsh's prefix.
            exact = (is_msrun(tool) and tool != "msrun-ssh+log_timestamps") or tool == "mpirun"
            complete = (r.get("bytes", 0) == r["payload"] if exact
                        else r.get("bytes", 0) >= r["payload"])
            if r["ok"] and not complete:
                log(f"  {tool} relay rep={rep}: logged {r.get('bytes', 0)} of {r['payload']} bytes")
            r["ok"] = r["ok"] and complete
            runs.setdefault(tool, []).append(r)
            log(f"relay rep {rep} {tool:9} wall {r['wall']:.2f}s machine {r['machine_cpu']:.2f}s "
                f"{r['payload'] / 1e6 / r['wall']:6.1f} MB/s cpu {r['cpu'] / (r['payload'] / 1e9):6.2f}"
                f" s/GB logged {r.get('bytes', 0) / 1e6:.1f} MB{'' if r['ok'] else ' FAILED'}")
        common.save_json(os.path.join(args.out, "results.json"), results)


def bench_check(args, results):
    """`msrun-ssh check` on the first 64 farm addresses (exit status recorded, not required)."""
    n = min(64, len(args.cluster.farm_addrs))
    toml = args.cluster.write_toml(os.path.join(args.work, f"check{n}.toml"),
                                   args.cluster.farm_addrs[:n], 1)
    runs = results.setdefault("check", {"hosts": n, "runs": []})["runs"]
    args.settle_ns = "msrs-farm"
    for rep in range(args.reps):
        run_dir = fresh_dir(os.path.join(args.work, "runs", f"check{rep}"))
        out = os.path.join(run_dir, "check.txt")
        r = common.run_measured([args.msrun_copy, "check", "--hostfile", toml], stdout=out,
                                timeout_s=args.timeout)
        r["leftover"] = common.wait_settled(args.settle_ns, args.baseline.get(args.settle_ns, 0))
        with open(out, errors="replace") as f:
            r["output"] = f.read()[-3000:]
        runs.append(r)
        log(f"check rep {rep} n={n} wall {r['wall']:.3f}s cpu {r['cpu']:.3f}s rc {r['rc']}")
    common.save_json(os.path.join(args.out, "results.json"), results)


# ------------------------------------------------------------------------------------------------
# Tables.


def fmt_stat(s, scale=1.0, digits=2):
    if not s:
        return "—"
    return (f"{s['median'] * scale:.{digits}f} ({s['min'] * scale:.{digits}f}–"
            f"{s['max'] * scale:.{digits}f})")


def ok_runs(runs, tool, n):
    """The successful runs of `tool` on `n` hosts."""
    return [r for r in runs[tool].get(str(n), []) if r["ok"]]


def size_cells(runs, tool, sizes, value, scale, digits):
    """One table cell per host count: median (min–max) of value(run, n) over the good runs."""
    return [fmt_stat(common.summarize([value(r, n) for r in ok_runs(runs, tool, n)]), scale, digits)
            for n in sizes]


def launch_tables(results, key="launch"):
    runs = results.get(key, {})
    sizes = sorted({int(n) for t in runs.values() for n in t})
    if not sizes:
        return ""
    lines = []
    for title, fn, scale, digits in [
        ("wall time, s", lambda r, n: r["wall"], 1, 3),
        ("launcher CPU (user+sys, with children) per host, ms", lambda r, n: r["cpu"] / n, 1000, 2),
        ("machine-wide CPU during the run (/proc/stat: launcher, hosts' sshd and processes), s",
         lambda r, n: r.get("machine_cpu"), 1, 2),
    ]:
        lines.append(f"\n{title}: median (min–max)\n")
        lines.append("| tool | " + " | ".join(f"{n} hosts" for n in sizes) + " |")
        lines.append("|---|" + "---|" * len(sizes))
        for tool in TOOLS + list(VARIANTS) + [FLOOR]:
            if tool not in runs:
                continue
            cells = size_cells(runs, tool, sizes, fn, scale, digits)
            lines.append(f"| {tool} | " + " | ".join(cells) + " |")
        if "CPU" in title and "mpirun" in runs:
            cells = size_cells(runs, "mpirun", sizes, lambda r, n: r["own_cpu"] / n, scale, digits)
            lines.append("| mpirun, wait4 only (its ssh children that it did not wait for left "
                         "out) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def login_table(results):
    login = results.get("login")
    if not login:
        return ""
    runs = login["runs"]
    configs = sorted({c for t in runs.values() for c in t},
                     key=lambda c: tuple(int(x) for x in c.split("x")))
    lines = [f"\nstart-up under a login rc burning {login['rc_cpu_s']} s of CPU, /bin/true x "
             "processes per host: wall s / machine-wide CPU s, median (min–max)\n",
             "| tool | " + " | ".join(f"{c.split('x')[0]} hosts x {c.split('x')[1]}" for c in configs)
             + " |", "|---|" + "---|" * len(configs)]
    for tool in TOOLS + list(VARIANTS) + [FLOOR]:
        if tool not in runs:
            continue
        cells = []
        for c in configs:
            rs = [r for r in runs[tool].get(c, []) if r["ok"]]
            wall = common.summarize([r["wall"] for r in rs])
            busy = common.summarize([r.get("machine_cpu") for r in rs])
            cells.append(f"{fmt_stat(wall, 1, 2)} / {fmt_stat(busy, 1, 1)}")
        lines.append(f"| {tool} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def memory_table(results):
    runs = results.get("memory", {})
    sizes = sorted({int(n) for t in runs.values() for n in t})
    if not sizes:
        return ""
    lines = ["\npeak RSS, MB, median (min–max): the launcher process (VmHWM) / its whole local "
             "process tree (sum of VmRSS, sampled every 20 ms)\n",
             "| tool | " + " | ".join(f"{n} hosts" for n in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    slopes = {}
    for tool in TOOLS + list(VARIANTS) + [FLOOR]:
        if tool not in runs:
            continue
        cells = []
        for n in sizes:
            rs = ok_runs(runs, tool, n)
            a = common.summarize([r["root_peak_kb"] for r in rs])
            b = common.summarize([r["tree_peak_kb"] for r in rs])
            cells.append(f"{fmt_stat(a, 1 / 1024, 1)} / {fmt_stat(b, 1 / 1024, 1)}")
        lines.append(f"| {tool} | " + " | ".join(cells) + " |")
        lo, hi = sizes[0], sizes[-1]
        a = common.summarize([r["root_peak_kb"] for r in ok_runs(runs, tool, lo)])
        b = common.summarize([r["root_peak_kb"] for r in ok_runs(runs, tool, hi)])
        if hi > lo and a and b:
            slopes[tool] = (b["median"] - a["median"]) / (hi - lo)
    if slopes:
        lines.append(f"\nthe launcher's peak RSS per host from {sizes[0]} to {sizes[-1]} hosts "
                     "(difference of the medians / difference of the host counts):\n")
        for tool, kb in slopes.items():
            ratio = f" ({kb / slopes[FLOOR]:.2f}× the libssh floor)" if slopes.get(FLOOR) else ""
            lines.append(f"- {tool}: {kb:.1f} KB/host{ratio}")
    return "\n".join(lines)


def relay_table(results):
    runs = results.get("relay", {})
    if not runs:
        return ""
    lines = ["\nrelay, 4 hosts x 1 process x 50 MB of 100-byte lines, logs written: median (min–max)\n",
             "| tool | wall, s | MB/s | launcher CPU, s per GB | machine-wide CPU, s | logged MB |",
             "|---|---|---|---|---|---|"]
    for tool in TOOLS + list(VARIANTS):
        rs = [r for r in runs.get(tool, []) if r["ok"]]
        if not rs:
            continue
        wall = common.summarize([r["wall"] for r in rs])
        mbs = common.summarize([r["payload"] / 1e6 / r["wall"] for r in rs])
        cpu = common.summarize([r["cpu"] / (r["payload"] / 1e9) for r in rs])
        logged = common.summarize([r["bytes"] / 1e6 for r in rs])
        busy = common.summarize([r.get("machine_cpu") for r in rs])
        lines.append(f"| {tool} | {fmt_stat(wall, 1, 2)} | {fmt_stat(mbs, 1, 1)} | "
                     f"{fmt_stat(cpu, 1, 2)} | {fmt_stat(busy, 1, 2)} | {fmt_stat(logged, 1, 1)} |")
    return "\n".join(lines)


def plot(results, prefix):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results.get("launch", {})
    if not runs:
        log("no launch results: no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for tool in TOOLS:
        if tool not in runs:
            continue
        sizes = sorted(int(n) for n in runs[tool])
        for ax, fn, scale in [(axes[0], lambda r, n: r["wall"], 1),
                              (axes[1], lambda r, n: r["cpu"] / n, 1000)]:
            med, lo, hi = [], [], []
            for n in sizes:
                s = common.summarize([fn(r, n) for r in ok_runs(runs, tool, n)])
                med.append(s["median"] * scale)
                lo.append((s["median"] - s["min"]) * scale)
                hi.append((s["max"] - s["median"]) * scale)
            ax.errorbar(sizes, med, yerr=[lo, hi], marker="o", capsize=3, label=tool)
        if tool == "mpirun":
            # What wait4 alone reports: mpirun and the ssh children it waited for (it leaves most
            # of them to exit after it). Shown because it is the usual way to measure it.
            own = [common.summarize([r["own_cpu"] / n for r in ok_runs(runs, tool, n)])
                   for n in sizes]
            axes[1].plot(sizes, [o["median"] * 1000 for o in own], linestyle="--", marker="x",
                         color="tab:red", alpha=0.6, label="mpirun, wait4 only")
    axes[0].set_title("launch wall time (one /bin/true per host)")
    axes[0].set_ylabel("seconds")
    axes[1].set_title("launcher CPU (user+sys, with children) per host")
    axes[1].set_ylabel("ms per host")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("hosts")
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 16, 64, 128])
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.text(0.01, 0.01, "median of the runs, bars: min-max; " + results.get("machine", {}).get(
        "cpu", "") + f", {results.get('machine', {}).get('nproc', '?')} CPUs", fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = prefix + "-launch.png"
    fig.savefig(path, dpi=110)
    log(f"plot written: {path}")


def check_table(results):
    c = results.get("check")
    if not c:
        return ""
    rs = [r for r in c["runs"] if not r["timeout"]]
    wall = common.summarize([r["wall"] for r in rs])
    cpu = common.summarize([r["cpu"] for r in rs])
    codes = sorted({r["rc"] for r in c["runs"]})
    return (f"\nmsrun-ssh check on {c['hosts']} farm hosts: wall {fmt_stat(wall, 1, 3)} s, "
            f"launcher CPU {fmt_stat(cpu, 1, 3)} s, exit status {codes}\n")


def write_markdown(args, results):
    text = ["# msrun-ssh benchmark results", "", "```"]
    for k, v in results.get("machine", {}).items():
        text.append(f"{k}: {v}")
    text += ["```", launch_tables(results), login_table(results), memory_table(results),
             relay_table(results), check_table(results), ""]
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(text))
    print("\n".join(text))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--suite", default="launch,memory,relay,check",
                   help="comma list of launch, memory, relay, check, login (default: all but "
                        "login, which takes long)")
    p.add_argument("--tools", default=",".join(TOOLS))
    p.add_argument("--sizes", default="1,16,64,128", help="launch: host counts")
    p.add_argument("--mem-sizes", default="16,64,128")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--mem-reps", type=int, default=5)
    p.add_argument("--login-sizes", default="16,64", help="login: host counts")
    p.add_argument("--login-ppn", default="1,8", help="login: processes per host")
    p.add_argument("--login-rc-cpu", type=float, default=0.3,
                   help="login: CPU seconds the login rc burns")
    p.add_argument("--relay-mb", type=int, default=50, help="MB printed by each of the 4 processes")
    p.add_argument("--msrun", default=common.DEFAULT_MSRUN)
    p.add_argument("--floor", default=os.path.join(common.REPO, "build-rel", "bench", "libssh_floor"),
                   help=f"the {FLOOR} program (cmake --build build-rel --target libssh_floor)")
    p.add_argument("--work", default="/tmp/msrun-bench", help="scratch directory (wiped)")
    p.add_argument("--out", default="/tmp/msrun-bench-results", help="results.json, results.md")
    p.add_argument("--timeout", type=float, default=180, help="per run, seconds")
    p.add_argument("--keep-cluster", action="store_true", help="do not take the cluster down")
    p.add_argument("--clutter", type=int, default=0,
                   help="idle processes on the farm for the whole run, as on a busy host")
    p.add_argument("--no-up", action="store_true", help="use the cluster already in --work/cluster")
    p.add_argument("--plot", metavar="PREFIX", help="draw PREFIX-launch.png from the results")
    p.add_argument("--replot", action="store_true", help="only redraw/retable --out/results.json")
    args = p.parse_args()
    args.tools = [t for t in args.tools.split(",") if t]
    args.sizes = [int(n) for n in args.sizes.split(",")]
    args.mem_sizes = [int(n) for n in args.mem_sizes.split(",")]
    args.login_sizes = [int(n) for n in args.login_sizes.split(",")]
    args.login_ppn = [int(n) for n in args.login_ppn.split(",")]
    suites = args.suite.split(",")

    if args.replot:
        import json
        with open(os.path.join(args.out, "results.json")) as f:
            results = json.load(f)
        write_markdown(args, results)
        if args.plot:
            plot(results, args.plot)
        return 0

    if os.geteuid() != 0:
        print("bench.py needs root (the test cluster uses network namespaces)", file=sys.stderr)
        return 77
    for t in args.tools:
        exe = args.msrun if is_msrun(t) else args.floor if t == FLOOR else t
        if not shutil.which(exe):
            print(f"bench.py: {exe} not found", file=sys.stderr)
            return 2
    common.raise_nofile()
    # A private copy: a rebuild during the run must not change the binary under measurement.
    os.makedirs(args.work, exist_ok=True)
    os.chmod(args.work, 0o755)
    msrun_copy = args.msrun_copy = os.path.join(args.work, "msrun-ssh")
    shutil.copy2(args.msrun, msrun_copy)
    results = {"machine": common.tool_versions(msrun_copy), "started": time.ctime(),
               "reps": args.reps, "fanout": FANOUT}
    os.makedirs(args.out, exist_ok=True)
    args.cluster = common.Cluster(os.path.join(args.work, "cluster"), 4,
                                  max(args.sizes + args.mem_sizes + args.login_sizes))
    tools = Tools(args.cluster, msrun_copy, args.work, os.path.abspath(args.floor))
    clutter = None
    try:
        if not args.no_up:
            args.cluster.up()
        if args.clutter:
            clutter = args.cluster.clutter(args.clutter)
            results["machine"]["clutter"] = f"{args.clutter} idle processes on the farm"
        args.baseline = baseline(args)
        if "launch" in suites:
            bench_launch(args, tools, results)
        if "memory" in suites:
            bench_launch(args, tools, results, sample="tree", key="memory", sizes=args.mem_sizes)
        if "relay" in suites:
            bench_relay(args, tools, results)
        if "check" in suites:
            bench_check(args, results)
        if "login" in suites:
            bench_login(args, tools, results)
    finally:
        if clutter:
            args.cluster.end_clutter(clutter)
        if not args.keep_cluster:
            args.cluster.down()
        shutil.rmtree(os.path.join(args.work, "runs"), ignore_errors=True)
        common.save_json(os.path.join(args.out, "results.json"), results)
    write_markdown(args, results)
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
