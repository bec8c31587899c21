"""Shared helpers of the integration tests: run msrun-ssh against the namespace cluster and look
at what is left on every host.

Every test is a function `test_*` in a module of this folder; `run.py MODULE FUNCTION` runs one.
The cluster comes from tests/cluster (ctest fixture "cluster"); its directory is in
MSRUN_SSH_CLUSTER_DIR. Without root or without the cluster, tests exit 77 (ctest: skipped) with a
loud reason. Every wait here is bounded.
"""
import os
import re
import signal
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "cluster"))
import idlers  # noqa: E402
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))
JOBS = os.path.join(HERE, "jobs")
SKIP = 77


class Skip(Exception):
    pass


def cluster_dir():
    d = os.environ.get("MSRUN_SSH_CLUSTER_DIR", "")
    if os.geteuid() != 0:
        raise Skip("SKIP: integration tests need root (network namespaces, sshd)")
    if not d or not os.path.exists(os.path.join(d, "hosts.toml")):
        raise Skip(f"SKIP: no test cluster at MSRUN_SSH_CLUSTER_DIR={d!r} (cluster.up skipped?)")
    return d


def binary():
    b = os.environ.get("MSRUN_SSH_BIN", "")
    if not b or not os.access(b, os.X_OK):
        raise AssertionError(f"MSRUN_SSH_BIN={b!r} is not an executable")
    return os.path.abspath(b)  # the tests run it from other directories


def cluster_script():
    return os.path.join(SOURCE_DIR, "tests", "cluster", "cluster.sh")


def cluster(*args, check=True):
    """Runs tests/cluster/cluster.sh with the given subcommand."""
    return subprocess.run(["bash", cluster_script(), *map(str, args)], check=check,
                          capture_output=True, text=True, timeout=60)


def hosts_file(**overrides):
    """The cluster's host file, or a copy of it with [defaults] keys replaced."""
    src = os.path.join(cluster_dir(), "hosts.toml")
    if not overrides:
        return src
    return copy_hosts_file(**overrides)


def copy_hosts_file(**overrides):
    """A private copy of the cluster's host file (safe to change), [defaults] keys replaced."""
    text = open(os.path.join(cluster_dir(), "hosts.toml")).read()
    for key, value in overrides.items():
        line = f"{key} = {value}"
        if re.search(rf"^{key} = .*$", text, flags=re.M):
            text = re.sub(rf"^{key} = .*$", lambda _: line, text, flags=re.M)
        else:
            text = text.replace("[defaults]\n", f"[defaults]\n{line}\n", 1)
    fd, path = tempfile.mkstemp(suffix=".toml", dir=tmpdir())
    os.write(fd, text.encode())
    os.close(fd)
    return path


_TMP = None


def tmpdir():
    """A scratch directory under /tmp (shared with the hosts: same file system)."""
    global _TMP
    if _TMP is None:
        _TMP = tempfile.mkdtemp(prefix="msrun-ssh-it-", dir="/tmp")
        os.chmod(_TMP, 0o755)
    return _TMP


def remove_tmpdir():
    """Removes the scratch directory (a passing test's; a failing test's is kept to be read)."""
    global _TMP
    if _TMP is not None:
        shutil.rmtree(_TMP, ignore_errors=True)
        _TMP = None


def addresses():
    d = cluster_dir()
    env = open(os.path.join(d, "cluster.env")).read()
    m = re.search(r'CLUSTER_ADDRS="([^"]*)"', env)
    return m.group(1).split()


def launch(args, hostfile=None, stdin=subprocess.DEVNULL, log_dir=None, extra=(), env=None):
    """Starts msrun-ssh (not waiting), in this process's environment with `env`'s variables set
    over it. Returns (Popen, log_dir)."""
    log_dir = log_dir or tempfile.mkdtemp(prefix="logs-", dir=tmpdir())
    cmd = [binary(), "--hostfile", hostfile or hosts_file(), "--log_dir", log_dir,
           "--heartbeat", "1", "--kill_grace", "2", "--connect_timeout", "5", *extra, *args]
    p = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         cwd=tmpdir(), env=dict(os.environ, **(env or {})))
    return p, log_dir


def run(args, timeout=120, **kw):
    """Runs msrun-ssh to its end. Returns (exit code, stdout bytes, stderr bytes, log_dir)."""
    p, log_dir = launch(args, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"msrun-ssh did not finish in {timeout} s:\n{err.decode(errors='replace')[-3000:]}")
    return p.returncode, out, err, log_dir


def job(name):
    return os.path.join(JOBS, name)


# The command line of the idle processes a busy host runs beside the job (tests/cluster/idlers.py,
# the fault campaign's --busy): left out of every look at the hosts' processes.
BUSY_HOST_IDLER = idlers.COMMAND.encode()


def _host_processes(ns_prefix):
    """Every live process of the hosts whose namespace starts with ns_prefix:
    (ns, pid, cmdline with spaces, environ bytes), zombies left out."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        ns = line.split()[0] if line.strip() else ""
        if not ns.startswith(ns_prefix):
            continue
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                              text=True).stdout.split()
        for pid in pids:
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").strip()
                if cmd == BUSY_HOST_IDLER:  # neither the job's nor a leftover: not read further
                    continue
                env = open(f"/proc/{pid}/environ", "rb").read()
                state = open(f"/proc/{pid}/stat", "rb").read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != b"Z":
                yield ns, pid, cmd.decode(errors="replace"), env


def host_processes(ns_prefix):
    """Every live process of the hosts whose namespace starts with ns_prefix: [(ns, pid, cmdline)]."""
    return [(ns, pid, cmd) for ns, pid, cmd, _ in _host_processes(ns_prefix)]


def marked_processes(ns_prefix="msrs-"):
    """Processes in any host namespace that carry a job marker: [(ns, pid, cmdline)]."""
    return [(ns, pid, cmd) for ns, pid, cmd, env in _host_processes(ns_prefix)
            if b"MSRUN_SSH_JOB=" in env]


def running(script):
    """How many marked processes run `script` (a word of their command line, e.g. "sleeper.py")."""
    return len([x for x in marked_processes() if script in x[2]])


# A host's own processes, which are not the job's: its init, the init's timer, sshd (listener and
# per-connection processes), the `unshare` that started the init, and slurmd while the test Slurm
# is up (test_slurm.py).
_HOST_INFRA = re.compile(
    r"^(unshare |bash \S+/hostinit\.sh |sleep 3600$|sshd: |/usr/sbin/sshd |/usr/sbin/slurmd )")


def leftovers(ns_prefix="msrs-node"):
    """Every process on any host that is not the host's own: job processes, their children, shells
    still in their login rc and what the rc started, watchdogs. [(ns, pid, cmdline)]"""
    return [(ns, pid, cmd) for ns, pid, cmd, _ in _host_processes(ns_prefix)
            if not _HOST_INFRA.match(cmd)]


def _wait_until_none(find, timeout, what):
    start = time.monotonic()
    while True:
        left = find()
        if not left:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} after {timeout} s: {left}")
        time.sleep(0.2)


def wait_clean(timeout):
    """Waits until no marked process is left on any host; returns seconds taken or raises."""
    return _wait_until_none(marked_processes, timeout, "processes left")


def wait_no_leftovers(timeout):
    """Waits until no host runs anything but its own processes; returns seconds taken or raises."""
    return _wait_until_none(leftovers, timeout, "left on the hosts")


def interrupt(p, sig, timeout, ready=lambda: None):
    """Runs `ready()` while the launcher `p` runs, sends it `sig` and waits (bounded) for its end.
    Returns (stderr bytes, seconds from the signal to the end); `p` is killed if anything fails."""
    try:
        ready()
        start = time.monotonic()
        p.send_signal(sig)
        _, err = p.communicate(timeout=timeout)
        return err, time.monotonic() - start
    finally:
        if p.poll() is None:
            p.kill()


def wait_for(predicate, timeout, what):
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)
    return time.monotonic() - start


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def restore_cluster():
    """Heals every host a test may have cut; never raises."""
    try:
        for i in range(len(addresses())):
            cluster("heal", i, check=False)
    except Exception:  # noqa: BLE001 - best effort after a test
        pass


def launcher_pid(logs):
    """The pid of this build's msrun-ssh whose command line names `logs`, or None."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0] == binary().encode() and logs.encode() in argv:
            return int(pid)
    return None


def state_of(pid):
    """The state letter of process `pid` ("T": stopped), or "gone"."""
    try:
        return chr(open(f"/proc/{pid}/stat", "rb").read().rsplit(b")", 1)[1].split()[0][0])
    except OSError:
        return "gone"


class Pane:
    """An interactive bash in a tmux pane (job control on: Ctrl-Z, `fg`), everything drawn kept in
    a file; it starts in the test's scratch directory."""

    def __init__(self, name):
        if not shutil.which("tmux"):
            raise AssertionError("tmux is not installed (the CI installs it)")
        self.session = f"msrs-{name}-{os.getpid()}"
        self.raw = os.path.join(tmpdir(), f"{name}.pane")
        subprocess.run(["tmux", "new-session", "-d", "-s", self.session, "-x", "200", "-y", "50",
                        "env", "TERM=xterm", "PS1=$ ", "bash", "--norc", "--noprofile", "-i"],
                       check=True, timeout=10)
        subprocess.run(["tmux", "pipe-pane", "-t", self.session, "-o", f"cat >> {self.raw}"],
                       check=True, timeout=10)
        self.type(f"cd {tmpdir()}")

    def keys(self, *keys):
        subprocess.run(["tmux", "send-keys", "-t", self.session, *keys], check=True, timeout=10)

    def type(self, line):
        self.keys("-l", line)
        self.keys("Enter")

    def drawn(self):
        try:
            with open(self.raw, "rb") as f:
                return f.read()
        except OSError:
            return b""

    def exit_status(self, timeout):
        wait_for(lambda: re.search(rb"EXIT=\d+", self.drawn()), timeout, f"{self.session} to end")
        return int(re.search(rb"EXIT=(\d+)", self.drawn()).group(1))

    def close(self):
        subprocess.run(["tmux", "kill-session", "-t", self.session], timeout=10)


def quoted(argv):
    return " ".join("'" + a.replace("'", "'\\''") + "'" for a in argv)
