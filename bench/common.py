"""Shared helpers of the msrun-ssh benchmarks (bench.py) and soak test (soak.py).

Everything here is bounded: every child runs under a timeout (its whole process group is killed
when it passes), every wait loop has a deadline. Network traffic goes only to the test cluster's
addresses (198.18.0.0/16) through tests/cluster/cluster.sh.
"""

import ctypes
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "cluster"))
import idlers  # noqa: E402
from idlers import netns_pids  # noqa: E402,F401 (the benchmarks' common.netns_pids)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER_SH = os.path.join(REPO, "tests", "cluster", "cluster.sh")
DEFAULT_MSRUN = os.path.join(REPO, "build-rel", "msrun-ssh")


def log(msg):
    print(time.strftime("%H:%M:%S ") + msg, flush=True)


# ------------------------------------------------------------------------------------------------
# The test cluster. Its namespace names (msrs-*) are machine-global: one cluster per machine.


def namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def cluster_exists():
    return any(ns.startswith("msrs-") for ns in namespaces())


def wait_for_no_cluster(max_wait_s=600, poll_s=30):
    """Waits (bounded) until nobody else's test cluster is up. False: still there at the end."""
    deadline = time.monotonic() + max_wait_s
    while cluster_exists():
        if time.monotonic() >= deadline:
            return False
        log(f"a test cluster is up (someone else's?): waiting {poll_s} s")
        time.sleep(poll_s)
    return True


class Cluster:
    """Our cluster: `hosts` namespace hosts (node0..) and a farm of `farm` addresses."""

    def __init__(self, directory, hosts, farm):
        self.dir = os.path.abspath(directory)
        self.hosts = hosts
        self.farm = farm
        self.ssh_config = os.path.join(self.dir, "ssh_config")
        self.node_addrs = [f"198.18.1.{10 + i}" for i in range(hosts)]
        self.farm_addrs = [f"198.18.{2 + k // 254}.{1 + k % 254}" for k in range(farm)]

    def up(self, max_wait_s=600):
        if not wait_for_no_cluster(max_wait_s):
            raise RuntimeError("another test cluster stayed up for 10 minutes; not touching it")
        os.makedirs(self.dir, exist_ok=True)
        log(f"cluster up: {self.hosts} hosts + farm of {self.farm} in {self.dir}")
        subprocess.run(["bash", CLUSTER_SH, "up", "--dir", self.dir, "--hosts", str(self.hosts),
                        "--farm", str(self.farm)], check=True, timeout=600,
                       stdout=subprocess.DEVNULL)

    def down(self):
        log("cluster down")
        subprocess.run(["bash", CLUSTER_SH, "down", "--dir", self.dir], timeout=300,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def alive(self):
        """Still ours: the farm and our last node exist and our cluster.env is there."""
        ns = namespaces()
        return ("msrs-farm" in ns and f"msrs-node{self.hosts - 1}" in ns
                and os.path.exists(os.path.join(self.dir, "cluster.env")))

    def login_rc(self, cpu_seconds):
        """Every farm address's login rc burns cpu_seconds of CPU from the next login on (0:
        clean again); see `cluster.sh burnrc`."""
        subprocess.run(["bash", CLUSTER_SH, "burnrc", "farm", str(cpu_seconds)], check=True,
                       timeout=60, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def clutter(self, count, max_wait_s=120):
        """Starts `count` idle processes on the farm, in its pid namespace (where the farm's
        watchdogs sweep), as the other processes of a busy host (tests/cluster/idlers.py);
        returns the Popen whose process group ends them (end_clutter)."""
        proc, gained = idlers.start("msrs-farm", count, max_wait_s)
        log(f"clutter: {gained} idle processes on the farm")
        return proc

    @staticmethod
    def end_clutter(proc):
        idlers.end(proc)

    def write_toml(self, path, addrs, workers, extra=""):
        with open(path, "w") as f:
            f.write("[defaults]\nuser = \"root\"\nport = 22\n")
            f.write(f"identity_file = \"{self.dir}/id_ed25519\"\n")
            f.write(f"known_hosts = \"{self.dir}/known_hosts\"\n")
            f.write(f"workdir = \"/tmp\"\nlocal_worker_num = {workers}\n{extra}")
            for a in addrs:
                f.write(f"\n[[hosts]]\naddress = \"{a}\"\n")
        return path


def wait_settled(ns, baseline, max_wait_s=20):
    """Waits until namespace `ns` holds no more processes than `baseline` (sessions of the last
    run still ending). Returns the number left over after the wait."""
    deadline = time.monotonic() + max_wait_s
    while True:
        extra = len(netns_pids(ns)) - baseline
        if extra <= 0 or time.monotonic() >= deadline:
            return max(extra, 0)
        time.sleep(0.2)


# ------------------------------------------------------------------------------------------------
# Running one measured command.


def _descendants(root):
    """pids of `root` and all its descendants (from /proc/*/stat)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _status_kb(pid, field="VmRSS:"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _rss_kb(pid):
    return _status_kb(pid)


def _fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class Sampler(threading.Thread):
    """Samples, every `period` s, the summed RSS of a process tree (local processes only), the
    root process's peak RSS since its exec (VmHWM: exact, whenever it happened) and its descriptor
    count; keeps the peaks. (wait4's ru_maxrss is no use for this: it includes the time before the
    child's exec, when it was a copy of this Python process.)"""

    def __init__(self, pid, period=0.02, tree=True):
        super().__init__(daemon=True)
        self.pid, self.period, self.tree = pid, period, tree
        self.stop = threading.Event()
        self.tree_peak_kb = 0
        self.root_peak_kb = 0
        self.fd_peak = 0
        self.samples = 0

    def run(self):
        # Until the child has exec'd, it is a copy of this Python process: nothing to count yet.
        # (Its command line tells: the executable may be python3 again, clush is a script.)
        with open("/proc/self/cmdline", "rb") as f:
            me = f.read()
        while not self.stop.is_set():
            try:
                with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                    if f.read() != me:
                        break
            except OSError:
                return
            self.stop.wait(0.001)
        while not self.stop.is_set():
            root = _status_kb(self.pid, "VmHWM:")
            total = sum(_rss_kb(p) for p in _descendants(self.pid)) if self.tree else root
            self.root_peak_kb = max(self.root_peak_kb, root)
            self.tree_peak_kb = max(self.tree_peak_kb, total)
            self.fd_peak = max(self.fd_peak, _fd_count(self.pid))
            self.samples += 1
            self.stop.wait(self.period)


_subreaper = False


def become_subreaper():
    """Orphans of a launcher (mpirun leaves its ssh children behind when it exits) are reparented
    to us, so that we reap them and getrusage(RUSAGE_CHILDREN) counts their CPU too."""
    global _subreaper
    if not _subreaper:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_CHILD_SUBREAPER = 36
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
        _subreaper = True


def _our_children():
    me = os.getpid()
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        kids.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kept_children(keep):
    """Our children whose command line holds one of the strings `keep`."""
    return [k for k in _our_children() if any(w in cmdline(k) for w in keep)]


def cpu_of(pids):
    """user + sys seconds of the processes `pids` so far (/proc/PID/stat; gone ones count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def reap_orphans(max_wait_s=10, keep=()):
    """Reaps what the launcher left behind (reparented to us); kills what is still running after
    `max_wait_s`, except processes meant to outlive it (their command line holds one of the
    strings `keep`: a connection keeper). Returns how many there were."""
    deadline = time.monotonic() + max_wait_s
    count = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return count
        if pid:
            count += 1
            continue
        if keep and len(kept_children(keep)) == len(_our_children()):
            return count
        if time.monotonic() >= deadline:
            for k in set(_our_children()) - set(kept_children(keep)):
                try:
                    os.kill(k, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5
        time.sleep(0.02)


def machine_busy_s():
    """CPU seconds the whole machine has spent busy since boot (/proc/stat: user, nice, system,
    irq, softirq, steal; not idle or iowait). On one machine the simulated hosts share the CPUs
    with the launcher, so the difference over a run is what bounds its wall time."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    assert fields[0] == "cpu"
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def run_measured(argv, *, env=None, stdout=None, timeout_s=300, sample=None, keep=()):
    """Runs argv in its own process group and measures it. Returns:
      wall       seconds from fork to the launcher's exit
      cpu        user+sys seconds of the launcher and of every local process it started, orphans
                 included (we are their subreaper): getrusage(RUSAGE_CHILDREN) before and after
      user, sys  the same, split
      own_cpu    user+sys from wait4 (the launcher and the descendants it waited for itself)
      machine_cpu  busy CPU seconds of the whole machine from fork to exit (/proc/stat): the
                 launcher, the simulated hosts' sshd and processes, and anything else running
      maxrss_kb  ru_maxrss from wait4: the peak RSS of the largest single process of the tree
      rc, timeout, orphans
    and, with `sample` ("tree" or "root"), sampled peaks (see Sampler). On timeout the whole group
    is killed. Processes whose command line holds one of the strings `keep` may outlive the
    launcher (a connection keeper it forked); their CPU is not in `cpu`."""
    become_subreaper()
    reap_orphans(1, keep)
    full_env = dict(os.environ)
    full_env.update(env or {})
    out = open(stdout, "wb") if stdout else subprocess.DEVNULL
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0 = machine_busy_s()
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    timed_out = threading.Event()

    def kill():
        timed_out.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    sampler = None
    if sample:
        sampler = Sampler(proc.pid, tree=(sample == "tree"))
        sampler.start()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    machine_cpu = machine_busy_s() - busy0
    timer.cancel()
    if sampler:
        sampler.stop.set()
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if stdout:
        out.close()
    # Anything the launcher left in its group (it should leave nothing) is not ours to keep.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    orphans = reap_orphans(keep=keep)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    user = ru1.ru_utime - ru0.ru_utime
    sys_ = ru1.ru_stime - ru0.ru_stime
    r = {"wall": wall, "user": user, "sys": sys_, "cpu": user + sys_,
         "own_cpu": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss,
         "machine_cpu": machine_cpu,
         "rc": proc.returncode, "timeout": timed_out.is_set(), "orphans": orphans}
    if sampler:
        r.update(tree_peak_kb=sampler.tree_peak_kb, root_peak_kb=sampler.root_peak_kb,
                 fd_peak=sampler.fd_peak, samples=sampler.samples)
    return r


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# ------------------------------------------------------------------------------------------------
# Statistics and output.


def summarize(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def save_json(path, data):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def tool_versions(msrun):
    def first_line(argv):
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            text = (r.stdout + r.stderr).strip().splitlines()
            return text[0] if text else "?"
        except (OSError, subprocess.TimeoutExpired):
            return "not installed"

    def dpkg(pkg):
        try:
            r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True,
                               text=True, timeout=30)
            return r.stdout.strip() or "?"
        except (OSError, subprocess.TimeoutExpired):
            return "?"

    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        rev = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        rev = "?"
    return {
        "source": rev,
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "kernel": os.uname().release,
        "msrun-ssh": first_line([msrun, "--version"]),
        "pdsh": first_line(["pdsh", "-V"]),
        "clush": first_line(["clush", "--version"]),
        "mpirun": first_line(["mpirun", "--version"]),
        "openssh": first_line(["ssh", "-V"]),
        "libssh": dpkg("libssh-4"),
        "openssh-server": dpkg("openssh-server"),
        "python3": first_line(["python3", "--version"]),
    }
