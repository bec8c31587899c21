"""Benchmark of `msrun-ssh sync` against pdcp -r (pdsh), clush --copy and a parallel rsync -a
(pdsh -R exec running one rsync over ssh per host), on namespace hosts that each have a private
tmpfs (/srv/msrs-private, see tests/cluster/cluster.sh), so that every host really gets its copy.

Two scenarios per size, each tool measured `--reps` times, the tools' order rotated every rep:
  first    a first copy of a tree of 1,000 files, 50 MB in all, into an empty destination
  resync   the same tree again after one file changed (every tool had a full copy before)
and one for msrun-ssh alone, after its re-sync in every rep, `--pairs` times:
  launch   a launch of /bin/true on every host (`--ppn` processes per host) with `--sync` after
           one file changed, paired with the same launch without `--sync` (the order
           alternating): what `--sync` adds to a job's start, where the sync rides the job's own
           connections (and, with 2 processes per host or more, its launch agents)
Every run is checked: the changed file's content and the file count on the first and last host.
Reported: wall time, the launcher's CPU (with its children) and the machine's busy CPU (/proc/stat:
the hosts' sshd and receivers share this machine).

Two tools keep their connections from the first copy to the re-sync: msrun-ssh-kept
(`msrun-ssh sync --persist 600`: a keeper process holds them, and starts the next sync's host
programs ahead) and rsync-kept (rsync over ssh with ControlMaster=auto, ControlPersist=600). Their
keepers' CPU during a run is added to the launcher's; what they do between the runs (msrun-ssh's
programs started ahead) is in `settle_machine_cpu` of sync.json: the machine's busy CPU during the
`--settle` seconds (default 3, every tool) between a first copy and its re-sync. Each first copy
starts with no keeper.

    python3 bench/sync.py --msrun build-rel/msrun-ssh --sizes 16,64 --reps 3 --out /tmp/sync-bench
`--tools` limits the tools (msrun-ssh,pdcp,clush,rsync,msrun-ssh-kept,rsync-kept). Needs root, pdsh, clush, rsync (bench/run.sh --sync installs them).
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log  # noqa: E402

TOOLS = ["msrun-ssh", "pdcp", "clush", "rsync", "msrun-ssh-kept", "rsync-kept"]
# The tools that keep their connections from the first copy to the re-sync, and the words of the
# command line of the process that keeps them (it outlives the command; its CPU is added).
KEEPERS = {"msrun-ssh-kept": " --persist ", "rsync-kept": "/kept/cm-"}  # ssh: "ssh: PATH [mux]"
PERSIST_S = 600
FILES, FILE_BYTES = 1000, 50 * 1000
DEST = "/srv/msrs-private/bench"
FANOUT = 64


def make_tree(root):
    shutil.rmtree(root, ignore_errors=True)
    for i in range(FILES):
        d = os.path.join(root, f"d{i // 100:02}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:04}.bin"), "wb") as f:
            f.write(os.urandom(FILE_BYTES))


def control_dir(args):
    d = os.path.join(args.out, "kept")  # the keeper's socket ($XDG_RUNTIME_DIR), ssh's ControlPath
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def argv(tool, args, cluster, addrs, toml, tree):
    hosts = ",".join(addrs)
    if tool == "msrun-ssh":
        return [args.msrun, "sync", "--hostfile", toml, "--fanout", str(FANOUT), tree, DEST]
    if tool == "msrun-ssh-kept":
        return [args.msrun, "sync", "--hostfile", toml, "--fanout", str(FANOUT), "--persist",
                str(PERSIST_S), tree, DEST]
    if tool == "pdcp":  # copies TREE into DEST/<tree's name>
        return ["pdcp", "-R", "ssh", "-f", str(FANOUT), "-w", hosts, "-r", tree, DEST]
    if tool == "clush":
        return ["clush", "-f", str(FANOUT), "-w", hosts, "-o", f"-F {cluster.ssh_config}",
                "--copy", tree, "--dest", DEST]
    if tool in ("rsync", "rsync-kept"):
        ssh = f"ssh -F {cluster.ssh_config}"
        if tool == "rsync-kept":
            ssh += (f" -o ControlMaster=auto -o ControlPersist={PERSIST_S}"
                    f" -o ControlPath={control_dir(args)}/cm-%C")
        return ["pdsh", "-R", "exec", "-f", str(FANOUT), "-w", hosts, "rsync", "-a", "--delete",
                "-e", ssh, tree + "/", f"%h:{DEST}/tree/"]
    raise ValueError(tool)


def copied_root(tool):
    """Where a tool's copy of the tree lands on a host."""
    return DEST if tool.startswith("msrun-ssh") else f"{DEST}/tree"


def on_hosts(cluster, addrs, command):
    env = dict(os.environ, PDSH_SSH_ARGS_APPEND=f"-F {cluster.ssh_config}")
    subprocess.run(["pdsh", "-R", "ssh", "-f", str(FANOUT), "-w", ",".join(addrs), command],
                   env=env, check=True, timeout=300, stdout=subprocess.DEVNULL)


def on_host(cluster, addr, command):
    return subprocess.run(["ssh", "-F", cluster.ssh_config, addr, command], capture_output=True,
                          text=True, timeout=60).stdout


def verify(cluster, addrs, tool, changed_rel, changed_text):
    root = copied_root(tool)
    for a in (addrs[0], addrs[-1]):
        n = on_host(cluster, a, f"find {root} -type f -name 'f*.bin' | wc -l").strip()
        got = on_host(cluster, a, f"head -c 40 {root}/{changed_rel}")
        if n != str(FILES) or got != changed_text[:40]:
            return f"{a}: {n} files, changed file {got!r}"
    return ""


def run_tool(tool, args, cluster, addrs, toml, tree):
    env = {"PDSH_SSH_ARGS_APPEND": f"-F {cluster.ssh_config}",
           "XDG_RUNTIME_DIR": control_dir(args)}
    keep = (KEEPERS[tool],) if tool in KEEPERS else ()
    before = common.cpu_of(common.kept_children(keep)) if keep else 0
    kept = common.kept_children(keep) if keep else []
    r = common.run_measured(argv(tool, args, cluster, addrs, toml, tree), env=env,
                            timeout_s=600, keep=keep)
    if keep:  # the keepers' CPU during the run is the tool's too
        r["keeper_cpu"] = common.cpu_of(kept) - before
        r["cpu"] += r["keeper_cpu"]
    return r


def end_keepers(tool):
    """Ends what keeps a tool's connections (before a first copy, and at the end)."""
    if tool not in KEEPERS:
        return
    for pid in common.kept_children((KEEPERS[tool],)):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    common.reap_orphans(10, ())


def launch_argv(args, toml, tree, with_sync):
    sync = [f"--sync={tree}", "--sync_dest", DEST] if with_sync else []
    return [args.msrun, "--hostfile", toml, "--fanout", str(FANOUT), "--log_dir",
            os.path.join(args.out, "launch-logs"), *sync, "/bin/true"]


def bench_launch(args, cluster, addrs, tree, rep, results):
    """`--pairs` launches with --sync after one changed file, each paired with one without."""
    n = str(len(addrs))
    toml = cluster.write_toml(os.path.join(args.out, f"hosts{n}x{args.ppn}.toml"), addrs,
                              args.ppn)
    for i in range(args.pairs):
        pair = {}
        for with_sync in ((True, False) if i % 2 == 0 else (False, True)):
            if with_sync:
                rel, text = change_one(tree, 1000 + rep * args.pairs + i)
            r = common.run_measured(launch_argv(args, toml, tree, with_sync), timeout_s=600)
            r["bad"] = "rc" if r["rc"] != 0 else (
                verify(cluster, addrs, "msrun-ssh", rel, text) if with_sync else "")
            pair["sync" if with_sync else "plain"] = r
        for key, r in pair.items():
            results.setdefault("launch_" + key, {}).setdefault(n, {}).setdefault(
                "msrun-ssh", []).append(r)
        log(f"{n:>3} hosts launch pair {rep}.{i}: with --sync {pair['sync']['wall']:.2f}s, "
            f"without {pair['plain']['wall']:.2f}s, machine CPU {pair['sync']['machine_cpu']:.1f} "
            f"/ {pair['plain']['machine_cpu']:.1f}s {pair['sync']['bad']}{pair['plain']['bad']}")


def change_one(tree, rep):
    rel = "d05/f0500.bin"
    text = f"changed in rep {rep} " + "x" * 100
    with open(os.path.join(tree, rel), "w") as f:
        f.write(text)
    return rel, text


def bench_size(args, cluster, n, results):
    addrs = cluster.node_addrs[:n]
    toml = cluster.write_toml(os.path.join(args.out, f"hosts{n}.toml"), addrs, 1)
    tree = os.path.join(args.out, "tree")
    for rep in range(args.reps):
        order = args.tools[rep % len(args.tools):] + args.tools[:rep % len(args.tools)]
        for tool in order:
            make_tree(tree)
            rel, text = change_one(tree, rep)
            end_keepers(tool)
            on_hosts(cluster, addrs, f"rm -rf {DEST} && mkdir -p {DEST}")
            first = run_tool(tool, args, cluster, addrs, toml, tree)
            first["bad"] = verify(cluster, addrs, tool, rel, text) if first["rc"] == 0 else "rc"
            rel, text = change_one(tree, rep + 100)
            busy0 = common.machine_busy_s()
            time.sleep(args.settle)
            settle_cpu = common.machine_busy_s() - busy0
            resync = run_tool(tool, args, cluster, addrs, toml, tree)
            resync["settle_machine_cpu"] = settle_cpu
            end_keepers(tool)
            resync["bad"] = verify(cluster, addrs, tool, rel, text) if resync["rc"] == 0 else "rc"
            for key, r in (("first", first), ("resync", resync)):
                results.setdefault(key, {}).setdefault(str(n), {}).setdefault(tool, []).append(r)
                log(f"{n:3} hosts {key:6} rep {rep} {tool:9} wall {r['wall']:6.2f}s "
                    f"cpu {r['cpu']:6.2f}s machine {r['machine_cpu']:6.1f}s rc {r['rc']} "
                    f"{r['bad']}")
            if tool == "msrun-ssh" and args.pairs:
                bench_launch(args, cluster, addrs, tree, rep, results)


def launch_table(results, sizes):
    """The launches with and without --sync, and the pairs' differences."""
    lines = ["| hosts | launch with --sync after one changed file: wall s (launcher CPU s, machine "
             "CPU s) | the same launch without --sync | what --sync added: wall s, machine CPU s "
             "(median of the pairs' differences [min-max]) |", "|---|---|---|---|"]
    for n in sizes:
        runs = {k: results.get("launch_" + k, {}).get(str(n), {}).get("msrun-ssh", [])
                for k in ("sync", "plain")}
        pairs = [(a, b) for a, b in zip(runs["sync"], runs["plain"])
                 if a["rc"] == 0 and b["rc"] == 0 and not a["bad"] and not b["bad"]]
        if not pairs:
            if runs["sync"]:
                lines.append(f"| {n} | failed ({len(runs['sync'])} pairs) | | |")
            continue
        cells = []
        for side in (0, 1):
            w = common.summarize([p[side]["wall"] for p in pairs])
            c = common.summarize([p[side]["cpu"] for p in pairs])
            m = common.summarize([p[side]["machine_cpu"] for p in pairs])
            cells.append(f"{w['median']:.2f} [{w['min']:.2f}-{w['max']:.2f}] "
                         f"({c['median']:.2f}, {m['median']:.1f})")
        dw = common.summarize([a["wall"] - b["wall"] for a, b in pairs])
        dm = common.summarize([a["machine_cpu"] - b["machine_cpu"] for a, b in pairs])
        cells.append(f"**{dw['median']:.2f}** [{dw['min']:.2f}-{dw['max']:.2f}], "
                     f"{dm['median']:.1f} ({len(pairs)}/{len(runs['sync'])} pairs ok)")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(results, key, sizes, tools=TOOLS):
    head = "| tool | " + " | ".join(f"{n} hosts: wall s (launcher CPU s, machine CPU s)"
                                     for n in sizes) + " |"
    lines = [head, "|---|" + "---|" * len(sizes)]
    for tool in tools:
        cells = []
        for n in sizes:
            rs = [r for r in results.get(key, {}).get(str(n), {}).get(tool, [])
                  if r["rc"] == 0 and not r["bad"]]
            all_runs = results.get(key, {}).get(str(n), {}).get(tool, [])
            if not rs:
                cells.append(f"failed ({len(all_runs)} runs)")
                continue
            w = common.summarize([r["wall"] for r in rs])
            c = common.summarize([r["cpu"] for r in rs])
            m = common.summarize([r["machine_cpu"] for r in rs])
            cells.append(f"{w['median']:.2f} [{w['min']:.2f}-{w['max']:.2f}] "
                         f"({c['median']:.2f}, {m['median']:.1f}) {len(rs)}/{len(all_runs)} ok")
        lines.append(f"| {tool} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--msrun", default=common.DEFAULT_MSRUN)
    ap.add_argument("--sizes", default="16,64")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="/tmp/msrun-bench/sync")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--pairs", type=int, default=3,
                    help="launches with and without --sync per rep (0: none)")
    ap.add_argument("--ppn", type=int, default=1, help="processes per host in the launches")
    ap.add_argument("--keep-cluster", action="store_true")
    ap.add_argument("--settle", type=float, default=3,
                    help="seconds between a first copy (and its check) and the re-sync, for every "
                         "tool: the time a user takes to change a file")
    args = ap.parse_args()
    args.tools = args.tools.split(",")
    unknown = set(args.tools) - set(TOOLS)
    if unknown:
        ap.error(f"unknown tools: {', '.join(sorted(unknown))}")
    sizes = [int(s) for s in args.sizes.split(",")]
    os.makedirs(args.out, exist_ok=True)
    common.raise_nofile()
    cluster = common.Cluster(os.path.join(args.out, "cluster"), max(sizes), 0)
    cluster.up()
    results = {}
    try:
        for n in sizes:
            bench_size(args, cluster, n, results)
    finally:
        if not args.keep_cluster:
            cluster.down()
    common.save_json(os.path.join(args.out, "sync.json"), results)
    text = (f"First copy of {FILES} files, {FILES * FILE_BYTES // 1000000} MB (median [min-max] "
            f"of wall seconds; launcher and machine CPU medians):\n\n"
            + table(results, "first", sizes, args.tools)
            + "\n\nRe-sync after one file changed:\n\n"
            + table(results, "resync", sizes, args.tools) + "\n")
    if args.pairs and "msrun-ssh" in args.tools:
        text += (f"\nA launch of /bin/true ({args.ppn} per host) with and without --sync (after "
                 "one changed file), paired:\n\n" + launch_table(results, sizes) + "\n")
    with open(os.path.join(args.out, "sync.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
