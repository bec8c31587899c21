"""Nothing escapes a teardown while one host's login rc is still running (conda init, module load):
Ctrl-C, SIGTERM, a failing worker, SIGKILL of the launcher and a cut host, each while node1's
processes (with --agent=False, one channel and one rc per process) or its launch agent (the
default: one rc per host) are still inside a 4-second rc. Afterwards every host's process list
must hold nothing but the host's own processes (harness.leftovers), not only no marked process.
"""
import glob
import json
import os
import re
import signal
import tempfile
import time

from harness import (check, cluster, hosts_file, interrupt, job, launch, leftovers,
                     marked_processes, run, running, tmpdir, wait_for, wait_no_leftovers)

HEARTBEAT = 1.0
SLOW = 1      # the host with the slow rc
RC = 4        # seconds its rc takes
FAST = 5      # processes on the other two hosts: the scheduler and 2 workers on node0, 2 on node2


def _fast_running():
    return running("sleeper.py") >= FAST


def _in_rc():
    """node1's processes are login shells still in the rc: the rc's sleep runs there."""
    return any(ns == f"msrs-node{SLOW}" and cmd == f"sleep {RC}" for ns, _, cmd in leftovers())


def _with_slow_rc(body):
    check(not leftovers(), f"hosts not clean before the test: {leftovers()}")
    cluster("slowrc", SLOW, RC)
    try:
        body()
    finally:
        cluster("slowrc", SLOW, 0)
        cluster("heal", SLOW, check=False)


def _start_and_wait_for_rc(args=()):
    """With a channel per process: node1's processes sit in their own rc after its watchdog's."""
    p, log_dir = launch([job("sleeper.py"), *args], extra=["--agent=False"])
    # node1's watchdog passes its rc first (4 s), then every process starts; the fast hosts' run
    # at once, node1's sit in the rc for 4 s more.
    try:
        wait_for(_fast_running, 3 * RC, "the processes of the fast hosts")
        # node1's processes were started with the fast ones; under load their login shells may
        # take a moment to reach the rc's sleep (well inside its RC seconds).
        wait_for(_in_rc, 1.5, "node1's processes in their rc")
    except BaseException:
        p.kill()  # a launcher left running would keep its job going into the next tests
        raise
    return p, log_dir


def _signal_test(sig, expected):
    def body():
        p, _ = _start_and_wait_for_rc()

        def inside_the_rc():
            time.sleep(1)  # well inside the rc
            check(_in_rc(), "node1's processes left their rc too early for this test")
        err, took = interrupt(p, sig, 30, inside_the_rc)
        check(p.returncode == expected,
              f"exit {p.returncode}, expected {expected}: {err.decode()[-2000:]}")
        check(took < 10, f"teardown took {took:.1f} s")
        wait_no_leftovers(2)
        # Still nothing once the rc would have ended: nothing was waiting to exec.
        time.sleep(RC)
        check(not leftovers(), f"started after the teardown: {leftovers()}")
    _with_slow_rc(body)


def test_sigint_while_in_rc():
    _signal_test(signal.SIGINT, 130)


def test_sigterm_while_in_rc():
    _signal_test(signal.SIGTERM, 143)


def test_failing_worker_while_in_rc():
    def body():
        # rank 0 (node0) fails 1 s after it starts, while node1's processes are in their rc.
        p, _ = _start_and_wait_for_rc(["--fail_rank", "0", "--fail_code", "9", "--delay", "1"])
        out, err = p.communicate(timeout=40)
        check(p.returncode == 9, f"exit {p.returncode}: {err.decode()[-2000:]}")
        wait_no_leftovers(2)
        time.sleep(RC)
        check(not leftovers(), f"started after the teardown: {leftovers()}")
    _with_slow_rc(body)


def test_sigkill_of_the_launcher_while_in_rc():
    def body():
        p, _ = _start_and_wait_for_rc()
        time.sleep(1)
        p.kill()
        p.wait(5)
        # Each watchdog: 2 heartbeats at most to notice, its teardown, one second of late sweeps.
        took = wait_no_leftovers(3 * HEARTBEAT + 2.5)
        time.sleep(RC)
        check(not leftovers(), f"started after the teardown: {leftovers()}")
        print(f"hosts clean {took:.1f} s after SIGKILL of the launcher")
    _with_slow_rc(body)


def test_cut_of_the_slow_host_while_in_rc():
    def body():
        p, _ = _start_and_wait_for_rc()
        try:
            time.sleep(0.5)
            cluster("cut", SLOW)
            # The cut-off host ends its processes by itself (2 heartbeats of silence), rc or not.
            wait_for(lambda: not [x for x in leftovers() if x[0] == f"msrs-node{SLOW}"],
                     3 * HEARTBEAT + 2.5, "the cut-off host to clean itself")
            out, err = p.communicate(timeout=30)
            check(p.returncode == 255, f"exit {p.returncode}: {err.decode()[-1500:]}")
            check(re.search(rb"host 198\.18\.1\.11 lost", err), f"not named: {err.decode()[-1500:]}")
        finally:
            if p.poll() is None:
                p.kill()
        cluster("heal", SLOW)
        wait_no_leftovers(5)
        time.sleep(RC)
        check(not leftovers(), f"started after the teardown: {leftovers()}")
    _with_slow_rc(body)


def test_sigint_while_the_watchdog_is_in_rc():
    def body():
        p, _ = launch([job("sleeper.py")])
        # Connected, node1's watchdog inside its rc: no process has been started anywhere.
        err, _ = interrupt(p, signal.SIGINT, 30, lambda: wait_for(
            lambda: any(ns == f"msrs-node{SLOW}" and cmd == f"sleep {RC}"
                        for ns, _, cmd in leftovers()), 10, "node1's watchdog in its rc"))
        check(p.returncode == 130, f"exit {p.returncode}: {err.decode()[-1500:]}")
        check(not marked_processes(), "a process was started")
        wait_no_leftovers(2)
    _with_slow_rc(body)


# --- With the launch agent (the default): a host's rc runs once, in front of its agent ------------

def test_sigint_while_a_detached_start_is_in_rc():
    """Ctrl-C while a detached job starts (--agent=False: the fast hosts' processes run, node1's
    sit in their rc): the launcher stops what did start on every host, says so, and exits 130;
    nothing starts after it, and the job's record no longer says it is starting."""
    def body():
        state = tempfile.mkdtemp(prefix="state-", dir=tmpdir())
        p, _ = launch([job("sleeper.py")], extra=["--agent=False", "--join=False"],
                      env={"XDG_STATE_HOME": state})
        try:
            wait_for(_fast_running, 3 * RC, "the processes of the fast hosts")
            wait_for(_in_rc, 1.5, "node1's processes in their rc")
        except BaseException:
            p.kill()
            raise
        err, _ = interrupt(p, signal.SIGINT, 40)
        check(p.returncode == 130, f"exit {p.returncode}, expected 130: {err.decode()[-2000:]}")
        check(b"interrupted while starting job" in err, f"not said: {err.decode()[-2000:]}")
        wait_no_leftovers(3)
        time.sleep(RC)
        check(not leftovers(), f"started after the stop: {leftovers()}")
        records = [json.load(open(f)) for f in glob.glob(f"{state}/msrun-ssh/jobs/*.json")]
        check(len(records) == 1 and records[0]["starting"] is False,
              f"records {[(r['id'], r.get('starting')) for r in records]}")
    _with_slow_rc(body)


def _agent_in_rc():
    return any(ns == f"msrs-node{SLOW}" and cmd == f"sleep {RC}" for ns, _, cmd in leftovers())


def _every_process_after_one_rc(extra, wait_s, while_running=lambda: None):
    """Starts sleeper.py with `extra`; every process (3 + 2 + 2) must run within one rc of the
    start (2 * RC). Calls while_running(), then Ctrl-C: exit 130 and nothing left. Returns the
    launcher's stderr."""
    start = time.monotonic()
    p, _ = launch([job("sleeper.py")], extra=extra)
    try:
        wait_for(lambda: running("sleeper.py") >= 7, wait_s, "every process")
        took = time.monotonic() - start
        check(took < 2 * RC, f"the processes ran {took:.1f} s after the start")
        while_running()
        err, _ = interrupt(p, signal.SIGINT, 30)
        text = err.decode(errors="replace")
        check(p.returncode == 130, f"exit {p.returncode}: {text[-1500:]}")
    finally:
        if p.poll() is None:
            p.kill()
    wait_no_leftovers(2)
    print(f"every process running {took:.1f} s after the start (rc {RC} s)")
    return text


def test_agent_pays_the_rc_once_per_host():
    # Every process runs one rc after the start, not two: with a channel per process node1's
    # would wait for its watchdog's rc and then their own.
    def no_second_rc():
        rcs = [x for x in leftovers() if x[0] == f"msrs-node{SLOW}" and x[2] == f"sleep {RC}"]
        check(not rcs, f"an rc runs again on node1: {rcs}")
    _with_slow_rc(lambda: _every_process_after_one_rc((), RC + 6, no_second_rc))


def test_sync_and_the_binding_probe_ride_the_agent():
    """--sync and --bind_core run their commands through the launch agents: node1 pays its rc once
    for the sync, the topology probe, the watchdog and its processes, not once for each step (a
    step on a channel of its own would pay another)."""
    proj = os.path.join(tmpdir(), "slowrc-proj")
    os.makedirs(proj, exist_ok=True)
    with open(os.path.join(proj, "data.txt"), "w") as f:
        f.write("synced\n")

    def body():
        extra = ["--sync=slowrc-proj", "--sync_dest", f"/srv/msrs-private/rc{time.time():.0f}",
                 "--bind_core=True"]
        text = _every_process_after_one_rc(extra, 3 * RC + 6)
        check(re.search(r"sync: \S+: 1 files, 7 bytes sent", text), f"no sync line: {text}")
    _with_slow_rc(body)


def test_sigkill_of_the_launcher_while_the_agent_is_in_rc():
    def body():
        p, _ = launch([job("sleeper.py")])
        try:
            wait_for(_agent_in_rc, 10, "node1's agent in its rc")
            p.kill()
            p.wait(5)
        finally:
            if p.poll() is None:
                p.kill()
        # Nothing was started anywhere; node1's rc ends, its agent finds its stdin closed and
        # goes. The fast hosts' watchdogs see their stdin end.
        wait_no_leftovers(RC + 3 * HEARTBEAT + 2.5)
        check(not marked_processes(), "a process was started")
    _with_slow_rc(body)


def test_cut_of_the_slow_host_while_its_agent_is_in_rc():
    def body():
        p, _ = launch([job("sleeper.py")])
        try:
            wait_for(_agent_in_rc, 10, "node1's agent in its rc")
            cluster("cut", SLOW)
            out, err = p.communicate(timeout=40)
            check(p.returncode == 255, f"exit {p.returncode}: {err.decode()[-1500:]}")
            check(b"198.18.1.11" in err, f"not named: {err.decode()[-1500:]}")
            # The cut-off host never hears from the launcher again: after its rc, its agent waits
            # 2 heartbeats for a command and ends itself.
            wait_for(lambda: not [x for x in leftovers() if x[0] == f"msrs-node{SLOW}"],
                     RC + 2 * HEARTBEAT + 3, "the cut-off host to clean itself")
        finally:
            if p.poll() is None:
                p.kill()
        cluster("heal", SLOW)
        wait_no_leftovers(5)
        check(not marked_processes(), "a process was started")
    _with_slow_rc(body)


# --- How many logins a job start costs each host: exactly one, whatever its process count ---------

def _logins_per_host(args, extra=(), hostfile=None, env=None):
    """Runs msrun-ssh with every host's rc counting its logins; returns (exit code, stderr text,
    [logins of host 0, 1, 2])."""
    counts = [os.path.join(tmpdir(), f"rc-count-{i}-{time.time_ns()}") for i in range(3)]
    for i, path in enumerate(counts):
        cluster("countrc", i, path)
    try:
        code, _, err, _ = run(args, extra=extra, hostfile=hostfile, env=env)
    finally:
        for i in range(3):
            cluster("slowrc", i, 0)
    logins = [len(open(p).read().splitlines()) if os.path.exists(p) else 0 for p in counts]
    return code, err.decode(errors="replace"), logins


def test_one_login_per_host_at_one_process_per_host():
    # torch: one process per host, no scheduler.
    code, err, logins = _logins_per_host(
        [job("show.py")], extra=["--contract", "torch", "--bind_core=True"],
        hostfile=hosts_file(local_worker_num="1"))
    check(code == 0, f"exit {code}: {err[-1500:]}")
    check(logins == [1, 1, 1], f"logins per host {logins}, expected one each")


def test_one_login_per_host_with_the_sync_and_several_processes():
    proj = os.path.join(tmpdir(), "rc-count-proj")
    os.makedirs(proj, exist_ok=True)
    with open(os.path.join(proj, "data.txt"), "w") as f:
        f.write("synced\n")
    code, err, logins = _logins_per_host(
        [job("show.py")], extra=["--sync=rc-count-proj", "--sync_dest",
                                 f"/srv/msrs-private/rccount{time.time_ns()}", "--bind_core=True",
                                 "--worker_log_name", "w-{hostname}"])
    check(code == 0, f"exit {code}: {err[-1500:]}")
    check(logins == [1, 1, 1], f"logins per host {logins}, expected one each")


def test_one_login_per_host_for_a_detached_start():
    state = tempfile.mkdtemp(prefix="state-", dir=tmpdir())
    code, err, logins = _logins_per_host(
        [job("show.py")], extra=["--join=False", "--worker_log_name", "w-{hostname}"],
        env={"XDG_STATE_HOME": state})
    check(code == 0, f"exit {code}: {err[-1500:]}")
    check(logins == [1, 1, 1], f"logins per host {logins}, expected one each")


def test_the_fast_hosts_agents_wait_for_the_slow_hosts_rc():
    """node1's rc takes 4 s, twice the launch agents' idle limit (2 heartbeats): the other hosts'
    agents, done with their topology probe at once, wait for node1's (the launcher's no-op frames
    keep them) and then run their processes."""
    _with_slow_rc(lambda: _every_process_after_one_rc(["--bind_core=True"], RC + 6))
