"""`msrun-ssh check` on the namespace cluster (issue: cluster acceptance report).

Every test runs check with --json and asserts the exact host + check that must fail, and that
nothing else failed. Each run uses its own master port, so that a job of another test on the same
cluster cannot make the port look busy. The hosts share this machine's file system: per-host
workdirs are distinct directories under the test's scratch directory.
"""
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import time

from harness import (addresses, binary, check, cluster, cluster_dir, hosts_file, tmpdir,
                     wait_no_leftovers)

SCRIPT = "import sys\nprint('hello from', sys.argv)\n"


def free_port():
    return random.randint(20000, 29999)


def run_check(args, hostfile=None, timeout=120):
    """Runs `msrun-ssh check` from the scratch dir. Returns (exit code, stdout str, stderr str)."""
    cmd = [binary(), "check", "--hostfile", hostfile or hosts_file(), "--connect_timeout", "5",
           *args]
    p = subprocess.run(cmd, cwd=tmpdir(), capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def check_json(args, hostfile=None):
    port = free_port()
    code, out, err = run_check(["--json", "--master_port", str(port), *args], hostfile)
    try:
        doc = json.loads(out)
    except ValueError:
        raise AssertionError(f"exit {code}, no JSON on stdout:\n{out[-2000:]}\n{err[-2000:]}")
    return code, doc, port


def failures(doc):
    """{(address, check)} of every failed check."""
    return {(host, name) for host, h in doc["hosts"].items()
            for name, c in h["checks"].items() if c["status"] == "fail"}


def status(doc, host, name):
    return doc["hosts"][host]["checks"][name]["status"]


def detail(doc, host, name):
    return doc["hosts"][host]["checks"][name]["detail"]


def expect_only(code, doc, expected):
    """The failed checks are exactly `expected` (a set of (address, check)); exit 1 (0 if none)."""
    got = failures(doc)
    report = json.dumps(doc, indent=1)[-6000:]
    check(got == set(expected), f"failed checks {sorted(got)}, expected {sorted(expected)}:\n{report}")
    check(code == (1 if expected else 0), f"exit {code} with failures {sorted(got)}")


def hostfile_with(per_host, extra_hosts=(), defaults=None):
    """A copy of the cluster's host file; per_host[i] is a list of TOML lines added to host i's
    entry, extra_hosts are additional addresses, defaults replaces [defaults] keys."""
    text = open(hosts_file(**(defaults or {}))).read()
    out = []
    index = -1
    for line in text.splitlines():
        out.append(line)
        if line.startswith("address = "):
            index += 1
            out.extend(per_host.get(index, []))
    for addr in extra_hosts:
        out += ["", "[[hosts]]", f'address = "{addr}"']
    path = os.path.join(tmpdir(), f"check-{random.getrandbits(32):08x}.toml")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return path


def per_host_workdirs(name, under=None):
    """Creates DIR/h0, h1, ... under the scratch dir (or UNDER); returns their paths."""
    base = os.path.join(under or tmpdir(), name)
    dirs = []
    for i in range(len(addresses())):
        d = os.path.join(base, f"h{i}")
        os.makedirs(d, exist_ok=True)
        dirs.append(d)
    return dirs


def leftovers():
    """Processes of any check command still alive on a host: [(ns, pid, cmdline)]."""
    found = []
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for ns in (l.split()[0] for l in out.splitlines() if l.startswith("msrs-")):
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        for pid in pids.split():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if re.search(r"msrun-ssh-(check|listen|connect|net|perf)", cmd):
                found.append((ns, pid, cmd[:200]))
    return found


def assert_nothing_left(workdirs):
    deadline = time.monotonic() + 5
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    check(not leftovers(), f"processes left on the hosts: {leftovers()}")
    for d in workdirs:
        left = [n for n in os.listdir(d) if n.startswith(".msrun-ssh-check")]
        check(not left, f"files left in {d}: {left}")


# ---- tests ------------------------------------------------------------------------------------

def test_healthy_cluster_passes():
    dirs = per_host_workdirs("healthy")
    for d in dirs:
        with open(os.path.join(d, "job.py"), "w") as f:
            f.write(SCRIPT)
    shutil.copy(os.path.join(dirs[0], "job.py"), os.path.join(tmpdir(), "job.py"))
    hf = hostfile_with({i: [f'workdir = "{d}"'] for i, d in enumerate(dirs)})
    code, doc, port = check_json(["job.py", "--import", "json"], hf)
    expect_only(code, doc, set())
    addrs = addresses()
    check(list(doc["hosts"]) == addrs, f"hosts {list(doc['hosts'])}")
    check(doc["master"] == f"{addrs[0]}:{port}", f"master {doc['master']}")
    for a in addrs:
        for name in ["reachable", "authenticated", "host_key", "os", "numa", "python",
                     "import:json", "script", "workdir", "clock", "disk", "master_port", "route"]:
            check(status(doc, a, name) == "pass", f"{a} {name}: {doc['hosts'][a]['checks'][name]}")
    check(doc["hosts"][addrs[0]]["checks"]["route"]["value"] == "local", "master route")
    check(doc["hosts"][addrs[1]]["checks"]["route"]["value"] == "eth0", "node1 route")
    check("same as the launcher's copy" in detail(doc, addrs[2], "script"), "script detail")
    assert_nothing_left(dirs)

    # The terminal form: summary line first, one row per host, exit 0.
    code, out, err = run_check(["--master_port", str(free_port())], hf)
    check(code == 0, f"exit {code}: {out}\n{err}")
    lines = out.splitlines()
    check(re.match(r"^check: 3 hosts, \d+ passed, 0 failed, \d+ warnings?", lines[0]), lines[0])
    check(lines[2].split()[:4] == ["host", "reach", "auth", "hostkey"], lines[2])
    for a in addrs:
        check(any(l.startswith(a) for l in lines), f"no row for {a}:\n{out}")
    assert_nothing_left(dirs)


def test_script_differs_on_one_host():
    dirs = per_host_workdirs("script")
    for i, d in enumerate(dirs):
        with open(os.path.join(d, "job.py"), "w") as f:
            f.write(SCRIPT + ("# edited on host 1\n" if i == 1 else ""))
    with open(os.path.join(tmpdir(), "job.py"), "w") as f:
        f.write(SCRIPT)
    os.remove(os.path.join(dirs[2], "job.py"))
    hf = hostfile_with({i: [f'workdir = "{d}"'] for i, d in enumerate(dirs)})
    code, doc, _ = check_json(["job.py"], hf)
    a = addresses()
    expect_only(code, doc, {(a[1], "script"), (a[2], "script")})
    check("differs from the launcher's" in detail(doc, a[1], "script"), detail(doc, a[1], "script"))
    check("not found" in detail(doc, a[2], "script"), detail(doc, a[2], "script"))
    check(status(doc, a[0], "script") == "pass", "host 0 script")


def test_missing_python_module():
    mods = os.path.join(tmpdir(), "mods")
    os.makedirs(mods, exist_ok=True)
    with open(os.path.join(mods, "msrs_check_mod.py"), "w") as f:
        f.write("VALUE = 1\n")
    env = [f'env = {{ PYTHONPATH = "{mods}" }}']
    hf = hostfile_with({0: env, 2: env})
    code, doc, _ = check_json(["--import", "msrs_check_mod", "--import", "no_such_module_xyz",
                               "--import", "json"], hf)
    a = addresses()
    expect_only(code, doc, {(a[1], "import:msrs_check_mod")} |
                {(x, "import:no_such_module_xyz") for x in a})
    check("No module named 'msrs_check_mod'" in detail(doc, a[1], "import:msrs_check_mod"),
          detail(doc, a[1], "import:msrs_check_mod"))
    for x in a:
        check(status(doc, x, "import:json") == "pass", f"{x} import:json")


def test_master_port_occupied():
    a = addresses()
    port = free_port()
    squatter = subprocess.Popen(
        ["ip", "netns", "exec", "msrs-node0", "python3", "-c",
         "import socket, sys, time\n"
         "s = socket.socket(); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)\n"
         "print('ready', flush=True); time.sleep(60)\n", a[0], str(port)],
        stdout=subprocess.PIPE)
    try:
        check(squatter.stdout.readline().strip() == b"ready", "the squatter did not bind")
        code, out, err = run_check(["--json", "--master_port", str(port)])
        doc = json.loads(out)
    finally:
        squatter.kill()
        squatter.wait()
    expect_only(code, doc, {(a[0], "master_port")})
    check("in use" in detail(doc, a[0], "master_port"), detail(doc, a[0], "master_port"))
    for x in a[1:]:
        check(status(doc, x, "master_port") == "skip", f"{x} master_port")
    assert_nothing_left([])


def test_unreachable_host():
    lost = "198.18.1.99"
    hf = hostfile_with({}, extra_hosts=[lost])
    start = time.monotonic()
    code, doc, _ = check_json([], hf)
    took = time.monotonic() - start
    expect_only(code, doc, {(lost, "reachable")})
    for name, c in doc["hosts"][lost]["checks"].items():
        if name != "reachable":
            check(c["status"] == "skip", f"{lost} {name}: {c}")
    for x in addresses():
        check(status(doc, x, "reachable") == "pass", f"{x} reachable")
        check(status(doc, x, "master_port") == "pass", f"{x} master_port")
    check(took < 30, f"check took {took:.1f} s with --connect_timeout 5")


def test_unknown_host_key():
    a = addresses()
    known = os.path.join(tmpdir(), "known_hosts_partial")
    lines = open(os.path.join(cluster_dir(), "known_hosts")).read().splitlines()
    with open(known, "w") as f:
        f.write("\n".join(l for l in lines if not l.startswith(a[2] + " ")) + "\n")
    hf = hostfile_with({}, defaults={"known_hosts": f'"{known}"'})
    code, doc, _ = check_json([], hf)
    expect_only(code, doc, {(a[2], "host_key")})
    check(status(doc, a[2], "reachable") == "pass", "reachable")
    check(status(doc, a[2], "authenticated") == "skip", "authenticated")
    check(f"ssh-keyscan -p 22 {a[2]} >> {known}" in detail(doc, a[2], "host_key"),
          detail(doc, a[2], "host_key"))


def test_unwritable_workdir():
    dirs = per_host_workdirs("unwritable")
    blocker = os.path.join(tmpdir(), "unwritable", "a-file")
    with open(blocker, "w") as f:
        f.write("not a directory\n")
    bad = os.path.join(blocker, "h1")
    hf = hostfile_with({0: [f'workdir = "{dirs[0]}"'], 1: [f'workdir = "{bad}"'],
                        2: [f'workdir = "{dirs[2]}"']})
    code, doc, _ = check_json([], hf)
    a = addresses()
    expect_only(code, doc, {(a[1], "workdir")})
    check(bad in detail(doc, a[1], "workdir"), detail(doc, a[1], "workdir"))
    check(status(doc, a[1], "disk") == "skip", "disk on the bad host")
    assert_nothing_left([dirs[0], dirs[2]])


# ---- check --perf -----------------------------------------------------------------------------

def perf_statuses(doc):
    return {a: h["checks"]["perf"]["status"] for a, h in doc["hosts"].items()}


def test_perf_names_the_throttled_host_only():
    """Host 1's sshd, and with it everything started over ssh, gets 15% of one CPU (a cgroup CPU
    quota): check --perf fails that host and only it, names its CPU against the median, times
    the workdir and a --perf_path on every host and leaves no file there; without the quota every
    host passes. The directories are on the machine's tmpfs: the simulated hosts share one disk,
    and their concurrent write+fsync timings on it (beside whatever else the machine writes) say
    nothing about the hosts, so a disk verdict there would be noise."""
    addrs = addresses()
    shm = tempfile.mkdtemp(prefix="msrun-ssh-it-perf-", dir="/dev/shm")
    os.chmod(shm, 0o755)
    try:
        perf_on_a_throttled_host(addrs, shm)
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def perf_on_a_throttled_host(addrs, shm):
    dirs = per_host_workdirs("perf", shm)
    data = os.path.join(shm, "perf-data")
    os.makedirs(data, exist_ok=True)
    hf = hostfile_with({i: [f'workdir = "{d}"'] for i, d in enumerate(dirs)})
    cluster("throttle", 1, 15)
    try:
        code, doc, _ = check_json(["--perf", "--perf_seconds", "0.5", "--perf_path", data], hf)
    finally:
        cluster("throttle", 1, 0)
    expect_only(code, doc, {(addrs[1], "perf")})
    why = detail(doc, addrs[1], "perf")
    check(re.search(r"CPU at \S+ \S+ per CPU \((numpy|python)\): below 0.5 x the median", why), why)
    hosts = {h["address"]: h for h in doc["perf"]["hosts"]}
    check(set(hosts) == set(addrs), f"hosts measured: {sorted(hosts)}")
    for a, h in hosts.items():
        paths = [d["path"] for d in h["disks"]]
        check(len(paths) == 2 and paths[1] == data and all("write_mbps" in d for d in h["disks"]),
              f"{a}: disks {h['disks']}")
        check(h["cpus"] >= 1 and len(h["cpu_each"]) >= 1, f"{a}: {h}")
    for d in dirs + [data]:
        left = [n for n in os.listdir(d) if n.startswith(".msrun-ssh-perf")]
        check(not left, f"files left in {d}: {left}")
    assert_nothing_left([])
    code, doc, _ = check_json(["--perf", "--perf_seconds", "0.5"], hf)
    expect_only(code, doc, set())
    check(set(perf_statuses(doc).values()) == {"pass"}, f"perf verdicts {perf_statuses(doc)}")


# ---- check --net ------------------------------------------------------------------------------

def listening_ports():
    """{namespace: sorted listening TCP sockets} of every host namespace."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    ports = {}
    for ns in (l.split()[0] for l in out.splitlines() if l.startswith("msrs-")):
        ss = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn"], capture_output=True,
                            text=True, timeout=10).stdout
        ports[ns] = sorted(l.split()[3] for l in ss.splitlines() if l.strip())
    return ports


def net_statuses(doc):
    return {a: h["checks"]["net"]["status"] for a, h in doc["hosts"].items()}


def test_net_names_the_throttled_host_only():
    addrs = addresses()
    before = listening_ports()
    code, doc, _ = check_json(["--net", "--net_seconds", "0.5"])
    expect_only(code, doc, set())
    check(set(net_statuses(doc).values()) == {"pass"}, f"net verdicts {net_statuses(doc)}")
    n = doc["net"]
    check(n["rounds"] == 3 and len(n["links"]) == 2 * 3, f"3 hosts, all pairs: {n}")
    check(all(l.get("gbps", 0) > 0.2 for l in n["links"]) or n["retested"] > 0, f"links {n}")
    assert_nothing_left([])
    # Traffic towards host 2 goes through a 50 Mbit/s token bucket on its root-side veth.
    veth = "msrs-v2"
    subprocess.run(["tc", "qdisc", "add", "dev", veth, "root", "tbf", "rate", "50mbit", "burst",
                    "32kbit", "latency", "400ms"], check=True, timeout=10)
    try:
        code, doc, _ = check_json(["--net", "--net_seconds", "0.5"])
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", veth, "root"], timeout=10)
    expect_only(code, doc, {(addrs[2], "net")})
    why = detail(doc, addrs[2], "net")
    check("receives at 0.0" in why and "below 0.5 x the median" in why, why)
    slow = [l for l in doc["net"]["links"] if l.get("gbps", 99) < 0.1]
    check(slow and all(l["to"] == addrs[2] for l in slow), f"slow links {slow}")
    assert_nothing_left([])
    check(listening_ports() == before, f"listening sockets changed: {before} -> {listening_ports()}")


def test_net_ring_of_16_farm_hosts_is_bounded_and_leaves_nothing():
    farm = os.path.join(cluster_dir(), "farm.toml")
    if not os.path.exists(farm):
        raise AssertionError("the test cluster has no farm (cluster.sh up --farm 16)")
    before = listening_ports()
    start = time.monotonic()
    code, doc, _ = check_json(["--net", "--net_pairs", "ring"], farm)
    took = time.monotonic() - start
    check(len(doc["hosts"]) == 16, f"{len(doc['hosts'])} farm hosts")
    n = doc["net"]
    check(n["rounds"] == 2 and len(n["links"]) == 2 * 16, f"ring of 16: {n['rounds']} rounds")
    check(all("gbps" in l for l in n["links"]), f"failed links {n['links']}")
    check(set(net_statuses(doc).values()) <= {"pass", "warn"}, f"verdicts {net_statuses(doc)}")
    # Bound: 2 rounds x (2 x 1 s + start-up), plus the probes; 60 s even on a loaded 2-CPU machine.
    check(took < 60, f"check --net took {took:.1f} s")
    assert_nothing_left([])
    check(listening_ports() == before, f"listening sockets changed: {before} -> {listening_ports()}")


# ---- check --net=collective --------------------------------------------------------------------

def allreduce_statuses(doc):
    return {a: h["checks"]["allreduce"]["status"] for a, h in doc["hosts"].items()}


def test_net_collective_passes_on_every_host_and_leaves_nothing():
    # One worker per host: rank r runs on host r. Both contracts: the scheduler is the hub, or
    # rank 0 on the master port.
    hf = hosts_file(local_worker_num="1")
    before = listening_ports()
    for contract in ["msrun", "torch"]:
        code, doc, _ = check_json(["--net=collective", "--net_seconds", "0.3", "--contract",
                                   contract], hf)
        expect_only(code, doc, set())
        check(set(allreduce_statuses(doc).values()) == {"pass"},
              f"{contract}: allreduce verdicts {allreduce_statuses(doc)}")
        c = doc["net"]["collective"]
        check(c["ran"] and c["exit_status"] == 0 and c["log_dir"] == "", f"{contract}: {c}")
        check(sorted(c["ranks"]) == ["0", "1", "2"], f"{contract}: per-rank times {c['ranks']}")
        check(0 < c["seconds"] < 60, f"{contract}: took {c['seconds']} s")
        wait_no_leftovers(10)
        assert_nothing_left([])
    check(listening_ports() == before, f"listening sockets changed: {before} -> {listening_ports()}")
    # The other spelling, in the table form: the column is there.
    code, out, err = run_check(["--net", "collective", "--net_seconds", "0.3", "--master_port",
                                str(free_port())], hf)
    check(code == 0 and "allreduce" in out.splitlines()[2], f"exit {code}:\n{out}\n{err}")
    wait_no_leftovers(10)


def test_net_collective_fails_on_the_host_of_the_failing_rank():
    # The documented test hook: allreduce.py's rank 2 (the last host's only worker) exits 1 at once.
    addrs = addresses()
    hf = hosts_file(local_worker_num="1")
    code, doc, _ = check_json(["--net=collective", "--net_seconds", "0.3", "--env",
                               "MSRUN_SSH_ALLREDUCE_FAIL_RANK=2"], hf)
    expect_only(code, doc, {(addrs[2], "allreduce")})
    why = detail(doc, addrs[2], "allreduce")
    check("rank 2" in why and "told to fail" in why, why)
    for x in addrs[:2]:
        check(status(doc, x, "allreduce") == "skip", f"{x}: {detail(doc, x, 'allreduce')}")
    c = doc["net"]["collective"]
    check(c["failed_hosts"] == [addrs[2]] and c["exit_status"] != 0, f"collective {c}")
    check(c["log_dir"] and f"logs in {c['log_dir']}" in why, why)
    check(os.path.exists(os.path.join(c["log_dir"], "console.log")), f"kept logs {c['log_dir']}")
    shutil.rmtree(c["log_dir"])
    wait_no_leftovers(10)
    assert_nothing_left([])
