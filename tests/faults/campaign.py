#!/usr/bin/env python3
"""The seeded, randomized fault campaign (issue #37, docs/reliability.md) on the test cluster.

Each trial draws, from the seed and its number, a job shape (hosts, processes per host, contract,
launch agent, restarts), a fault and a moment, runs tests/integration/jobs/chatter.py (numbered
lines, a grandchild in its own session) under msrun-ssh, injects the fault at that moment, and
then checks the invariants:
  1. no process of the job is left on any host within a bounded time;
  2. the exit status is the documented one for that fault (FAULTS below, docs/reliability.md);
  3. every rank's log holds its lines in order without a gap (each attempt from 0), the console
     shows the same lines in the same order (or says how many it did not show), and a job that
     ends well has every rank's last line; after SIGKILL of the launcher the logs hold every line
     the console showed;
  4. nothing is left in /tmp (stack directories) or in the log directory (.tmp files) that the
     job does not document.
A failing trial prints its seed, its number and the command that runs it alone; the campaign goes
on and exits 1 at the end. With the test cluster up (tests/cluster/cluster.sh up --dir DIR
--hosts 3), as root:

  MSRUN_SSH_CLUSTER_DIR=DIR MSRUN_SSH_BIN=build/msrun-ssh \\
    python3 tests/faults/campaign.py --seed 1 --trials 300
  ... --seed 1 --first 17 --trials 1        # trial 17 of seed 1 alone
  ... --seed 1 --trials 30 --faults stop,log_full  # only these faults
  ... --seed 1 --trials 80 --busy 1000 --burn 1      # busy hosts, a loaded machine

--busy N gives every host N idle processes of its own for the whole campaign (each sweep and
sampler there reads them all), as on a node running thousands of other processes; --burn K
keeps K CPUs busy with loops at the launcher's priority, as on a loaded node.

CI runs a short slice (ctest: faults.campaign_slice).
"""
import argparse
import glob
import json
import os
import pty
import random
import re
import select
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "cluster"))
sys.dont_write_bytecode = True
import harness  # noqa: E402
import idlers  # noqa: E402
from harness import addresses, binary, cluster, job, marked_processes, tmpdir  # noqa: E402

HEARTBEAT = 1.0
SECONDS = 6.0  # each rank prints for that long
LINE = re.compile(rb"^rank (\S+) line (\d+)$")
CONSOLE = re.compile(rb"^\[(\S+)@[\d.]+(?: a(\d+))?\] rank (\S+) line (\d+)$")
ATTEMPT_LOG = re.compile(r"\.attempt(\d+)\.log$")
ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")
IN_PLACE = re.compile(rb"^----- msrun-ssh: process restart \d+ of \d+: ")
GAP = re.compile(rb"\[msrun-ssh: \d+ bytes of this log are missing here: ")
NOT_SHOWN = re.compile(rb"lines not shown \(the console fell behind\)")

# fault -> where it is injected, and the exit statuses it may end with (docs/reliability.md).
# "ok" below: the job ends as without the fault.
FAULTS = {
    "sigint": "SIGINT to the launcher: 130",
    "sigterm": "SIGTERM to the launcher: 143",
    "sigkill": "SIGKILL of the launcher: the watchdogs end the job within 3 heartbeats",
    "cut": "the host cut off from the network (healed after the trial): 255",
    "sshd": "the host's sshd killed (started again after the trial): 255",
    "stop_procs": "the host's processes stopped (SIGSTOP) for 2 s, then continued: ok",
    "kill_rank": "a process killed (SIGKILL): 137, or ok after a restart",
    "kill_watchdog": "the host's watchdog killed (SIGKILL): 255, or ok after a restart",
    "slow_rc": "the host's login rc takes 3 s: ok",
    "pipe_pause": "the launcher's stdout pipe not read for 4 s: ok",
    "log_full": "the log directory's file system (a 1 MB tmpfs) full for 2 s: ok",
    "ctrl_s": "the console, a terminal, stopped by Ctrl-S for 4 s, then Ctrl-Q: ok",
    "stop": "`msrun-ssh stop --job ID` from another terminal: 143",
}
# "login_rc": the victim's login rc takes 3 s and the fault comes inside it; "teardown": the
# launcher is interrupted (SIGINT) once lines flow and the fault comes while it tears down.
MOMENTS = ["connecting", "login_rc", "starting", "running", "teardown", "backoff"]
# A detached job (--join=False): the launcher starts it and returns; "running" is then after the
# launcher's end, once the ranks' logs show lines. Its faults and moments (a detached job has no
# console, no restarts and no watchdog).
# (Not the full log disk: a detached process writes its log itself, and what it does when the
# write fails is its own affair.)
DETACHED_FAULTS = {"sigint", "sigterm", "sigkill", "cut", "sshd", "stop_procs", "kill_rank",
                   "slow_rc", "stop"}
DETACHED_MOMENTS = {"connecting", "login_rc", "starting", "running"}


class Trial:
    def __init__(self, seed, number, faults=None):
        rng = random.Random(f"{seed}/{number}")
        self.seed, self.number = seed, number
        self.hosts = rng.choice([2, 3])
        self.ppn = rng.choice([1, 2])
        self.contract = rng.choice(["msrun", "torch"])
        self.agent = rng.choice(["auto", "True", "False"])
        self.fault = rng.choice(sorted(faults or FAULTS))
        self.moment = rng.choice(MOMENTS)
        self.restarts = 1 if self.moment == "backoff" else rng.choice([0, 0, 1])
        self.victim = rng.randrange(self.hosts)
        self.delay = rng.uniform(0.0, 1.0)
        # Drawn last, so that a seed's earlier draws stay what they were before it came.
        self.policy = rng.choice(["job", "process"]) if self.restarts else "job"
        self.detached = (rng.random() < 0.35 and self.fault in DETACHED_FAULTS
                         and self.moment in DETACHED_MOMENTS)
        if self.detached:
            self.restarts, self.policy = 0, "job"
        # In-place recovery is MindSpore's: refused with the torch contract (exit 2).
        if self.contract == "torch":
            self.policy = "job"

    def describe(self):
        return (f"{self.hosts} hosts x {self.ppn}, {self.contract}, agent {self.agent}, "
                + ("detached, " if self.detached else "") +
                f"restarts {self.restarts} ({self.policy}); {self.fault} on host {self.victim} while "
                f"{self.moment} (+{self.delay:.2f} s)")

    def expected(self, applied, restarted):
        """The exit statuses this trial may end with."""
        f = self.fault
        if self.moment == "teardown":  # the interrupt decides; a SIGKILL still ends it at once
            # (unless the teardown was over first: a short job's takes well under a second)
            return {-9, 130} if f == "sigkill" and applied else {130, -signal.SIGINT}
        if not applied:
            return {0}
        if self.detached:
            # The launcher's own: a signal or `stop` before it printed the id stops the job
            # (130/143); after that it has started the job and exits 0 (its processes' statuses
            # are checked apart, Runner.check_detached). A lost host fails the start (255) unless
            # every process there had started.
            return {"sigint": {0, 130, -signal.SIGINT}, "sigterm": {0, 143, -signal.SIGTERM},
                    "stop": {0, 143}, "sigkill": {0, -9}, "cut": {0, 255},
                    "sshd": {0, 255}}.get(f, {0})
        # A signal before the launcher has set up its handlers (before it connects: it has started
        # nothing anywhere) ends it the default way, which a shell shows as the same 130 / 143.
        if f == "sigint":
            return {130, -signal.SIGINT}
        if f in ("sigterm", "stop"):
            return {143, -signal.SIGTERM}
        if f == "sigkill":
            return {-9}
        if f == "kill_watchdog":  # the host itself is fine: a restart runs the job again
            # (in place, only a failed worker is started again: a lost host ends the job)
            return {0} if self.restarts and self.policy == "job" else {255}
        if f in ("cut", "sshd"):  # the host stays unreachable: a restart cannot reach it either
            return {255}
        if f == "kill_rank":
            return {0} if self.restarts else {137}
        return {0}


def hostfile(t):
    d = harness.cluster_dir()
    text = open(os.path.join(d, "hosts.toml")).read()
    # The cluster's host file with the first `t.hosts` hosts and `t.ppn` processes each.
    head, _, rest = text.partition("[[hosts]]")
    blocks = ["[[hosts]]" + b for b in rest.split("[[hosts]]")][:t.hosts]
    head = re.sub(r"^local_worker_num = .*$", "", head, flags=re.M)
    head = head.replace("[defaults]\n", f"[defaults]\nlocal_worker_num = {t.ppn}\n", 1)
    path = os.path.join(tmpdir(), f"campaign-{t.seed}-{t.number}.toml")
    open(path, "w").write(head + "".join(blocks))
    return path


def processes_on(host_index, word):
    ns = f"msrs-node{host_index}"
    return [int(pid) for n, pid, cmd in marked_processes() if n == ns and word in cmd]


def is_worker(pid):
    """Whether job process `pid` is a worker (a rank), not msrun's scheduler."""
    try:
        return b"MS_ROLE=MS_SCHED" not in open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return False


def ranks_on(t, host_index):
    """The job's processes on the host that a killed rank stands for: under --restart_policy
    process only workers (a failed scheduler is never started again in place)."""
    pids = processes_on(host_index, "chatter.py")
    return [p for p in pids if is_worker(p)] if t.policy == "process" else pids


def watchdog_pids(host_index):
    """The host's watchdogs: watchdog.sh's shells, and the launch agents (each is its job's
    watchdog there; a child of an agent between its fork and its exec carries its name too)."""
    found = [int(pid) for n, pid, cmd in harness.leftovers(f"msrs-node{host_index}")
             if "msrun-ssh-watchdog" in cmd or cmd.strip() == "msrun-ssh-agent"]
    return [pid for pid in found if parent_of(pid) not in found]


def parent_of(pid):
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def signal_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


class Runner:
    """One trial: the launcher, its console read on the side, the fault, the checks."""

    def __init__(self, t):
        self.t = t
        self.problems = []
        self.applied = False
        self.restarted = False
        self.log_dir = os.path.join(tmpdir(), f"campaign-logs-{t.seed}-{t.number}")
        self.console = b""
        self.err = b""
        self.err_ended = False
        self.disk = None
        self.tty = None
        self.code = None
        # Job records (docs/jobs.md) where `stop` finds them, away from the user's own.
        self.env = dict(os.environ, XDG_STATE_HOME=os.path.join(tmpdir(), "campaign-state"))

    def fail(self, why):
        self.problems.append(why)

    def launch(self):
        t = self.t
        if t.fault == "log_full":  # the log directory on a file system of its own, 1 MB
            self.disk = os.path.join(tmpdir(), f"campaign-disk-{t.seed}-{t.number}")
            os.makedirs(self.disk)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs",
                            self.disk], check=True, timeout=30)
            self.log_dir = os.path.join(self.disk, "logs")
        argv = [binary(), "--hostfile", hostfile(t), "--log_dir", self.log_dir,
                "--heartbeat", str(HEARTBEAT), "--kill_grace", "2", "--connect_timeout", "8",
                "--agent", t.agent, "--contract", t.contract]
        if t.detached:
            argv += ["--join=False"]
        if t.restarts:
            argv += ["--max_restarts", str(t.restarts), "--restart_backoff", "2",
                     "--restart_policy", t.policy]
        argv += [job("chatter.py"), str(SECONDS)]
        if t.fault == "ctrl_s":  # the console a terminal: stdout and stderr on a pty
            self.tty, slave = pty.openpty()
            self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                                      cwd=tmpdir(), env=self.env)
            os.close(slave)
            self.out_fd = self.tty
        else:
            self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, cwd=tmpdir(), env=self.env)
            self.out_fd = self.p.stdout.fileno()
        # A signal that comes between the fork and the exec reaches Python's own handler in the
        # child and is lost: the launcher exists once it runs its binary (bounded).
        exe, end = os.path.realpath(binary()), time.monotonic() + 5
        while time.monotonic() < end:
            try:
                if os.readlink(f"/proc/{self.p.pid}/exe") == exe:
                    break
            except OSError:
                pass
            time.sleep(0.001)
        self.started = time.monotonic()

    def read_some(self, seconds):
        """Reads the launcher's console for up to `seconds` (non-blocking pieces); False at its
        end."""
        end = time.monotonic() + seconds
        if self.tty is None and self.p.stdout.closed:  # read to its end (a detached launcher)
            time.sleep(seconds)
            return False
        # The launcher's messages (stderr: a pipe, unless the console is a terminal) are read too,
        # so that a trial can wait for one of them; the rest comes at its end.
        err_fd = None if self.tty is not None or self.err_ended else self.p.stderr.fileno()
        while time.monotonic() < end:
            fds = [self.out_fd] + ([err_fd] if err_fd is not None else [])
            r, _, _ = select.select(fds, [], [], max(0.0, min(0.1, end - time.monotonic())))
            if err_fd in r:
                chunk = os.read(err_fd, 65536)
                self.err += chunk
                if not chunk:
                    self.err_ended, err_fd = True, None
            if self.out_fd in r:
                try:
                    chunk = os.read(self.out_fd, 65536)
                except OSError:  # a pty whose other side is closed
                    chunk = b""
                if not chunk:
                    return False
                self.console += chunk
        return True

    def wait_for_message(self, text, timeout):
        """Reads the console until the launcher's messages hold `text` (bounded); False if not."""
        end = time.monotonic() + timeout
        while text not in self.err and time.monotonic() < end:
            if not self.read_some(0.1):
                break
        return text in self.err

    def shown(self):
        """The console's lines as a terminal shows them: without colours, each line what its last
        carriage return left (the status line is redrawn over and over)."""
        if self.tty is None:
            return self.console
        text = ANSI.sub(b"", self.console).replace(b"\r\n", b"\n")
        return b"\n".join(line.rsplit(b"\r", 1)[-1] for line in text.split(b"\n"))

    def wait_for_lines(self, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if re.search(rb"\] rank \S+ line \d+\n", self.shown()):
                return True
            if not self.read_some(0.2):
                return False
        return False

    def inject(self):
        t, v = self.t, self.t.victim
        f = t.fault
        if f in ("sigint", "sigterm", "sigkill") and self.p.poll() is not None:
            return  # a detached start already over: nothing to signal
        if f == "sigint":
            self.p.send_signal(signal.SIGINT)
        elif f == "sigterm":
            self.p.send_signal(signal.SIGTERM)
        elif f == "sigkill":
            self.p.kill()
        elif f == "cut":
            cluster("cut", v)
        elif f == "sshd":
            cluster("sshd-stop", v)
        elif f == "stop_procs":
            pids = processes_on(v, "chatter.py")
            if not pids:
                return
            signal_all(pids, signal.SIGSTOP)
            self.read_some(2)
            signal_all(processes_on(v, "chatter.py"), signal.SIGCONT)
        elif f == "kill_rank":
            pids = ranks_on(t, v)
            if not pids:
                return
            signal_all(pids[:1], signal.SIGKILL)
        elif f == "kill_watchdog":
            pids = watchdog_pids(v)
            if not pids:
                return
            signal_all(pids[:1], signal.SIGKILL)
        elif f == "pipe_pause":
            time.sleep(4)
        elif f == "log_full":
            filler = os.path.join(self.disk, "filler")
            subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"],
                           capture_output=True, timeout=30)
            self.read_some(2)
            os.remove(filler)
        elif f == "ctrl_s":
            os.write(self.tty, b"\x13")
            time.sleep(4)  # the terminal shows nothing while stopped
            os.write(self.tty, b"\x11")
        elif f == "stop":
            return self.stop()
        self.applied = True

    def stop(self):
        """`msrun-ssh stop --job ID` with the id from the job's record (none yet: nothing to
        stop by id, the fault is not applied)."""
        records = glob.glob(os.path.join(self.env["XDG_STATE_HOME"], "msrun-ssh", "jobs", "*.json"))
        ids = []
        for path in records:
            try:
                r = json.load(open(path))
            except (OSError, ValueError):
                continue
            if r.get("launcher_pid") == self.p.pid:
                ids.append(r["id"])
        if not ids:
            return
        r = subprocess.run([binary(), "stop", "--job", ids[-1], "--kill_grace", "2"],
                           capture_output=True, timeout=60, env=self.env)
        if r.returncode != 0:
            self.fail(f"stop exit {r.returncode}: {r.stderr.decode(errors='replace')[-1500:]}")
        self.applied = True

    def run(self):
        t = self.t
        if t.fault == "slow_rc" or t.moment == "login_rc":
            cluster("slowrc", t.victim, 3)
            self.applied = t.fault == "slow_rc"
        try:
            self.launch()
            if t.moment == "connecting":
                time.sleep(t.delay * 0.3)
            elif t.moment == "login_rc":
                self.read_some(0.5 + t.delay * 2)  # inside the victim's 3 s rc
            elif t.moment == "teardown":
                self.wait_for_lines(30)
                self.p.send_signal(signal.SIGINT)
                self.read_some(0.1 + t.delay * 0.5)
            elif t.moment == "starting":
                self.read_some(0.5 + t.delay)
            elif t.moment == "running" and t.detached:
                self.finish_launcher()
                self.wait_for_logged_lines(30)
                time.sleep(t.delay * 2)
            elif t.moment == "running":
                self.wait_for_lines(30)
                self.read_some(t.delay * 2)
            elif t.moment == "backoff":
                # A first failure starts the restart back-off (2 s); the fault comes inside it,
                # once the launcher says it began (the attempt's teardown comes first, and takes
                # longer on a busy machine). In place (--restart_policy process) there is no
                # back-off: the fault comes once the process was started again.
                self.wait_for_lines(30)
                pids = ranks_on(t, t.victim)
                if pids:
                    signal_all(pids[:1], signal.SIGKILL)
                    self.restarted = True
                    self.wait_for_message(b"started again in place" if t.policy == "process"
                                          else b"restarting the whole job in", 30)
                self.read_some(0.2 + t.delay)
            if t.fault != "slow_rc":
                self.inject()
            self.finish()
        finally:
            p = getattr(self, "p", None)  # none when the launcher could not be started
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
            self.repair()
        try:
            self.check_hosts()
            self.check_output()
            self.check_files()
        finally:
            if self.tty is not None:
                os.close(self.tty)
            if self.disk:
                subprocess.run(["umount", "-l", self.disk], timeout=30)
        return self.problems

    def finish(self):
        if self.code is None:
            self.finish_launcher()
        if self.t.detached:
            self.check_detached()

    def finish_launcher(self):
        # Everything the launcher prints until it ends (bounded).
        end = time.monotonic() + 120
        while self.p.poll() is None and time.monotonic() < end:
            if not self.read_some(0.5):
                break
        if self.tty is not None:  # stderr is on the terminal too
            try:  # the pty may say its end a moment before the process has ended
                self.p.wait(timeout=max(1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.fail("the launcher did not end within 120 s")
                self.p.kill()
                self.p.wait()
            while self.read_some(0.5):
                pass
            self.console = self.shown()
        else:
            try:
                rest, err = self.p.communicate(timeout=max(1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.fail("the launcher did not end within 120 s")
                self.p.kill()
                rest, err = self.p.communicate()
            self.console += rest or b""
            self.err += err or b""
        self.code = self.p.returncode
        if t_ok := self.t.expected(self.applied, self.restarted):
            # A kill_rank in the back-off trial is the back-off's own failure: the restart that
            # follows must end well.
            if self.t.moment == "backoff" and self.restarted and self.t.fault in (
                    "stop_procs", "kill_rank", "slow_rc", "pipe_pause"):
                t_ok = {0, 137} if self.t.fault == "kill_rank" else {0}
            if self.code not in t_ok:
                self.fail(f"exit {self.code}, expected {sorted(t_ok)}: "
                          f"{self.err.decode(errors='replace')[-1500:]}")

    def wait_for_logged_lines(self, timeout):
        """A detached job: waits until a rank's log holds a line."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for path in glob.glob(os.path.join(self.log_dir, "*.log")):
                if LINE.match(harness.read(path).split(b"\n", 1)[0]):
                    return True
            time.sleep(0.1)
        return False

    def check_detached(self):
        """A detached job after its launcher's end: when it started (exit 0), every process ends
        by itself (bounded) with the status its fault gives it, its log ends with its last line
        when it exited 0, and `logs --job ID` shows each log's lines (checked as the console by
        check_output) while the hosts can be reached."""
        if self.code != 0:
            return
        job_id = self.console.decode(errors="replace").strip().rsplit("\n", 1)[-1]
        state = os.path.join(self.log_dir, ".msrun-ssh", job_id)
        want = self.t.hosts * self.t.ppn + (1 if self.t.contract == "msrun" else 0)  # + scheduler
        end = time.monotonic() + SECONDS + 60
        while time.monotonic() < end:
            pids = glob.glob(os.path.join(state, "*.pid"))
            if len(pids) == want and all(os.path.exists(p[:-4] + ".exit") for p in pids):
                break
            time.sleep(0.2)
        else:
            self.fail(f"detached job {job_id}: not every process ended within {SECONDS + 60} s "
                      f"({sorted(os.listdir(state)) if os.path.isdir(state) else 'no ' + state})")
            return
        statuses = {}
        for path in glob.glob(os.path.join(state, "*.exit")):
            statuses[os.path.basename(path)[:-5]] = int(open(path).read().strip() or -1)
        f = self.t.fault if self.applied else None
        ok = {"kill_rank": {0, 137}, "stop": {0, 143}}.get(f, {0})
        if any(v not in ok for v in statuses.values()) or (
                f == "kill_rank" and sorted(statuses.values()).count(137) != 1):
            self.fail(f"detached job {job_id}: exit statuses {statuses}, expected of {sorted(ok)}"
                      + (" (one 137)" if f == "kill_rank" else ""))
        for path in glob.glob(os.path.join(self.log_dir, "*.log")):
            text = harness.read(path)
            m = LINE.match(text.split(b"\n", 1)[0])
            if m and statuses.get(m.group(1).decode()) == 0 and \
                    not text.rstrip().endswith(b"done"):
                self.fail(f"{os.path.basename(path)} exited 0 but does not end with its last line")
        if f in ("cut", "sshd"):
            return
        r = subprocess.run([binary(), "logs", "--job", job_id], capture_output=True, timeout=60,
                           env=self.env, cwd=tmpdir())
        if r.returncode != 0:
            self.fail(f"logs --job {job_id}: exit {r.returncode}: {r.stderr.decode()[-800:]}")
        self.console, self.err = r.stdout, self.err + r.stderr

    def repair(self):
        t = self.t
        if t.fault == "cut":
            cluster("heal", t.victim, check=False)
        elif t.fault == "sshd":
            cluster("sshd-start", t.victim, check=False)
        if t.fault == "slow_rc" or t.moment == "login_rc":
            cluster("slowrc", t.victim, 0, check=False)

    def check_hosts(self):
        try:
            # (a detached job's processes on a host it could not stop end by themselves)
            harness.wait_no_leftovers(3 * HEARTBEAT + 12 + (SECONDS if self.t.detached else 0))
        except AssertionError as e:
            self.fail(f"left on the hosts: {e}")

    def rank_logs(self):
        """{path: [(rank, line number, after a gap marker)]} of the per-rank logs, and
        {path: attempt} (None: the last)."""
        logs, attempts = {}, {}
        for path in glob.glob(os.path.join(self.log_dir, "*.log")):
            if os.path.basename(path) == "msrun-ssh.log":
                continue
            m = ATTEMPT_LOG.search(path)
            attempts[path] = int(m.group(1)) if m else None
            logs[path] = []
            marked = restart = False
            for line in harness.read(path).splitlines():
                m = LINE.match(line)
                if m:
                    logs[path].append((m.group(1), int(m.group(2)), marked, restart))
                    marked = restart = False
                elif GAP.search(line):
                    marked = True
                elif IN_PLACE.match(line):
                    restart = True
        return logs, attempts

    def check_output(self):
        logs, attempts = self.rank_logs()
        said = self.console + self.err
        shown = {}
        for line in self.console.splitlines():
            m = CONSOLE.match(line)
            if m:
                shown.setdefault((m.group(3), int(m.group(2) or 1)), []).append(int(m.group(4)))
        last = max([a for (_, a) in shown] + [a + 1 for a in attempts.values() if a] + [1])
        by_attempt = {}
        for path, lines in logs.items():
            # One attempt per file: its lines from 0, in order, without a gap; where a write
            # failed, a gap after the line that marks it, or at the end of a log said to be
            # incomplete, and the failure said on the console.
            name = os.path.basename(path)
            gaps = any(marked for _, _, marked, _ in lines)
            cut = f"--- incomplete log: {path} ".encode() in said
            if (gaps or cut) and f"cannot write {path}".encode() not in said:
                self.fail(f"{name}: bytes missing, and no warning names it")
            due = 0
            for rank, n, marked, restart in lines:
                if restart:  # a worker started again in place goes on in the same log, from 0
                    due = 0
                if n != due and not (marked and n > due):
                    self.fail(f"{name}: line {n} where {due} was due")
                    break
                due = n + 1
            for rank, n, _, _ in lines:
                by_attempt.setdefault((rank, attempts[path] or last), []).append(n)
        dropped = NOT_SHOWN.search(said)
        for key, seq in shown.items():
            full = by_attempt.get(key, [])
            what = f"rank {key[0].decode()} (attempt {key[1]})"
            if self.t.fault == "log_full":
                # The console keeps every line (unless it says it dropped some); the log holds
                # them but for its gaps.
                # (from 0 again after a worker was started again in place)
                runs = [[]]
                for n in seq:
                    if n == 0 and runs[-1]:
                        runs.append([])
                    runs[-1].append(n)
                if not dropped and any(r != list(range(len(r))) for r in runs):
                    self.fail(f"{what}: the console misses lines")
                it = iter(seq)
                if not all(any(n == m for m in it) for n in full):
                    self.fail(f"{what}: the log holds lines the console lacks, or out of order")
            elif self.t.fault == "sigkill" or dropped:
                it = iter(full)
                if not all(any(n == m for m in it) for n in seq):
                    self.fail(f"{what}: the console shows lines its log lacks")
            elif seq != full:
                self.fail(f"{what}: console {len(seq)} lines, log {len(full)}")
        if self.code == 0 and not self.t.detached:  # (a detached job's: check_detached)
            for path, attempt in attempts.items():
                if attempt is None and not harness.read(path).rstrip().endswith(b"done"):
                    self.fail(f"{os.path.basename(path)} does not end with its last line")

    def check_files(self):
        for path in glob.glob(os.path.join(self.log_dir, "**", "*.tmp"), recursive=True):
            self.fail(f"left behind: {path}")
        new = set(glob.glob("/tmp/msrun-ssh-stacks-*")) - self.stacks_before
        if new:
            self.fail(f"stack directories left in /tmp: {sorted(new)}")


def make_hosts_busy(count):
    """`count` idle processes on every host of the cluster, in its pid namespace, as the other
    processes of a busy node (tests/cluster/idlers.py), which the harness leaves out of its looks at
    the hosts. Returns the Popens whose process groups end them (end_groups)."""
    procs, idle = [], 0
    try:
        for index in range(len(addresses())):
            proc, gained = idlers.start(f"msrs-node{index}", count)
            procs.append(proc)
            idle += gained
    except BaseException:  # those of the hosts before are not left behind
        end_groups(procs)
        raise
    print(f"campaign: {idle} idle processes on the {len(procs)} hosts", flush=True)
    return procs


def burn(count):
    """`count` CPU-bound loops at this process's priority, as the other load of a busy node."""
    return [subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True)
            for _ in range(count)]


def end_groups(procs):
    for proc in procs:
        idlers.end(proc)


def clean_hosts():
    """Before a trial: the hosts hold nothing but their own processes. What an earlier failed
    trial left (it was reported there) is killed, so that one finding does not fail the rest."""
    try:
        harness.wait_no_leftovers(30)
    except AssertionError:
        signal_all([int(pid) for _, pid, _ in harness.leftovers()], signal.SIGKILL)
        harness.wait_no_leftovers(10)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--first", type=int, default=0, help="the number of the first trial")
    p.add_argument("--max-minutes", type=float, default=0, help="stop starting trials after it")
    p.add_argument("--faults", default="",
                   help="draw only these faults (comma-separated; default: all)")
    p.add_argument("--busy", type=int, default=0, metavar="N",
                   help="N idle processes on every host for the whole campaign")
    p.add_argument("--burn", type=int, default=0, metavar="K",
                   help="K CPU-bound loops beside the campaign")
    args = p.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    if any(f not in FAULTS for f in faults):
        p.error(f"--faults: of {', '.join(sorted(FAULTS))}")
    try:
        harness.cluster_dir()
    except harness.Skip as e:
        print(e, file=sys.stderr)
        return harness.SKIP
    load = (make_hosts_busy(args.busy) if args.busy > 0 else []) + burn(args.burn)
    try:
        code = run_trials(args, faults)
    finally:
        end_groups(load)
    if code == 0:
        harness.remove_tmpdir()  # a failed trial's logs and host files are kept to be read
    return code


def run_trials(args, faults):
    start = time.monotonic()
    failed = []
    counts = {}
    ran = 0
    for number in range(args.first, args.first + args.trials):
        if args.max_minutes and time.monotonic() - start > args.max_minutes * 60:
            break
        t = Trial(args.seed, number, faults)
        clean_hosts()
        r = Runner(t)
        r.stacks_before = set(glob.glob("/tmp/msrun-ssh-stacks-*"))
        t0 = time.monotonic()
        problems = r.run()
        ran += 1
        key = (t.fault, t.moment)
        counts[key] = counts.get(key, 0) + 1
        status = ("ok" if r.applied else "ok (nothing to act on)") if not problems else "FAILED"
        print(f"trial {number:4d} {status:22} exit {r.code!s:>4} {time.monotonic() - t0:5.1f} s  "
              f"{t.describe()}", flush=True)
        if problems:
            failed.append(number)
            for why in problems:
                print(f"    {why}", flush=True)
            print(f"    again: MSRUN_SSH_CLUSTER_DIR={harness.cluster_dir()} "
                  f"MSRUN_SSH_BIN={binary()} python3 {os.path.relpath(__file__)} "
                  f"--seed {args.seed} --first {number} --trials 1"
                  + (f" --faults {args.faults}" if faults else ""), flush=True)
    print(f"campaign: seed {args.seed}, {ran} trials, {len(failed)} failed "
          f"({time.monotonic() - start:.0f} s); fault x moment: "
          + ", ".join(f"{f}/{m} {n}" for (f, m), n in sorted(counts.items()))
          + (f"; {args.busy} idle processes per host" if args.busy > 0 else "")
          + (f"; {args.burn} CPU loops beside it" if args.burn > 0 else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
