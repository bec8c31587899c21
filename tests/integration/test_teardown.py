"""Nothing left behind: fail-fast, signals, lost hosts, watchdog, detached jobs."""
import json
import os
import re
import signal
import subprocess
import time

from harness import (addresses, binary, check, cluster, hosts_file, interrupt, job, launch,
                     leftovers, marked_processes, run, tmpdir, wait_clean, wait_for, running)

HEARTBEAT = 1.0


def _running(n):
    return lambda: running("sleeper.py") >= n


def test_fail_fast_rank3_exit7():
    start = time.monotonic()
    code, out, err, _ = run([job("sleeper.py"), "--fail_rank", "3", "--fail_code", "7",
                             "--delay", "2"], timeout=60)
    took = time.monotonic() - start
    check(code == 7, f"exit {code}, expected 7: {err.decode()[-2000:]}")
    check(took < 10, f"took {took:.1f} s")
    check(re.search(rb"198\.18\.1\.11\s+rank 3\s+exit 7", err), "summary names rank 3")
    wait_clean(2)


def _started_pids(log_dir):
    """{log file name: the pid its process printed} for the job's 7 processes (sleeper.py)."""
    pids = {}
    for name in ["scheduler.log"] + [f"worker_{r}.log" for r in range(6)]:
        try:
            with open(os.path.join(log_dir, name)) as f:
                m = re.search(r"started pid (\d+)", f.read())
        except FileNotFoundError:
            m = None
        if m:
            pids[name] = m.group(1)
    return pids


def _signal_test(sig, expected):
    p, log_dir = launch([job("sleeper.py")])
    err, took = interrupt(p, sig, 15, lambda: wait_for(lambda: len(_started_pids(log_dir)) == 7,
                                                       15, "all 7 processes"))
    check(p.returncode == expected, f"exit {p.returncode}, expected {expected}: {err.decode()[-2000:]}")
    check(took < 10, f"took {took:.1f} s")
    wait_clean(2)
    # The launcher's log says what each host's teardown ended: every process of the job (each
    # printed its pid), on its host.
    with open(os.path.join(log_dir, "msrun-ssh.log")) as f:
        log = f.read()
    ended = set(re.findall(r"(198\.18\.1\.\d+): the watchdog ended (\d+) SIGTERM ", log))
    with open(os.path.join(log_dir, "summary.json")) as f:
        hosts = {row["process"]: row["host"] for row in json.load(f)["processes"]}
    pids = _started_pids(log_dir)
    for process, host in hosts.items():
        pid = pids["scheduler.log" if process == "scheduler" else f"worker_{process.split()[1]}.log"]
        check((host, pid) in ended, f"{process} ({host} pid {pid}) not said ended: {log[-3000:]}")


def test_sigint_tears_down():
    _signal_test(signal.SIGINT, 130)


def test_sigterm_tears_down():
    _signal_test(signal.SIGTERM, 143)


def test_a_hangup_under_nohup_is_ignored():
    """`nohup msrun-ssh ... &` and the terminal closed: the job runs on (SIGHUP, ignored by nohup,
    was blocked for the signalfd and read there: the job was torn down with 129)."""
    log_dir = os.path.join(tmpdir(), "nohup-logs")
    cmd = ["nohup", binary(), "--hostfile", hosts_file(), "--log_dir", log_dir, "--heartbeat", "1",
           "--connect_timeout", "5", job("ticker.py"), "3"]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=tmpdir())
    try:
        first = p.stdout.readline()
        check(b"tick 0" in first, f"first line {first!r}")
        p.send_signal(signal.SIGHUP)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    check(p.returncode == 0, f"exit {p.returncode}: {err.decode()[-2000:]}")
    check(b"rank 5 tick 2" in first + out, f"the job did not run to its end: {out[-1000:]!r}")
    wait_clean(2)


def test_sigkill_watchdog_cleans_within_3_heartbeats():
    p, _ = launch([job("sleeper.py")])
    wait_for(_running(7), 15, "all 7 processes")
    p.kill()
    p.wait(5)
    took = wait_clean(3 * HEARTBEAT + 1.5)
    print(f"hosts clean {took:.1f} s after SIGKILL of the launcher")


def _killed_watchdog_test(agent, sig=signal.SIGKILL):
    """Host 1's watchdog is killed while the job runs (its host and connection are fine): the
    job ends with 255 naming it, and what the ranks there left in sessions of their own (chatter.py's
    grandchildren, which no channel reaches) is ended by `stop`'s program, sent in the watchdog's
    place. Through the launch agent the watchdog is the agent itself, the ranks' parent: with it
    go the ranks' channels, and `stop` runs on a channel of its own.

    With SIGTERM (what Slurm sends a step it ends) the watchdog kills its host's processes itself
    and says so: the job ends with 143, as if the launcher had got the SIGTERM."""
    victim = 1
    p, _ = launch([job("chatter.py"), "30"], extra=["--agent", agent])
    try:
        wait_for(lambda: running("chatter.py") >= 7, 20, "all 7 processes")
        # This job's watchdog (the id is its argument): one of the job before may still be
        # finishing its last sweep
        env = open(f"/proc/{chatter_on(victim)}/environ", "rb").read().decode(errors="replace")
        job_id = [v[len("MSRUN_SSH_JOB="):] for v in env.split("\0")
                  if v.startswith("MSRUN_SSH_JOB=")]
        if agent == "True":
            rank = chatter_on(victim)
            parent = int(open(f"/proc/{rank}/stat").read().rsplit(")", 1)[1].split()[1])
            dogs = [parent] if cmdline(parent).startswith("msrun-ssh-agent") else []
        else:
            dogs = [int(pid) for ns, pid, cmd in watchdogs_on(f"msrs-node{victim}")
                    if job_id and f" {job_id[0]} " in cmd]
        check(dogs, "no watchdog of the job found on host 1")
        os.kill(dogs[0], sig)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    expected, said = (255, "ended unexpectedly") if sig == signal.SIGKILL else (
        143, "received SIGTERM (the job was ended there from outside); stopping the job")
    check(p.returncode == expected,
          f"exit {p.returncode}, expected {expected}: {err.decode()[-2000:]}")
    check(f"msrun-ssh: the watchdog on {addresses()[victim]} {said}".encode() in err,
          err.decode()[-1500:])
    wait_clean(5)


def test_a_watchdog_killed_during_the_teardown_leaves_its_host_swept():
    """Host 1's watchdog is killed in the middle of the teardown's grace (Ctrl-C, every process
    ignoring SIGTERM): what its host's processes left in sessions of their own is ended by
    `stop`'s program, sent in its place, as when it dies while the job runs. Found by the fault
    campaign (seed 20261209, trial 11): a rank's grandchild was left, and the launcher could not
    confirm the end (254)."""
    victim = 1
    p, _ = launch([job("stubborn.py")], extra=["--agent", "False", "--kill_grace", "4"])
    try:
        wait_for(lambda: running("stubborn.py") >= 7 and running("sleep 300") >= 7, 20,
                 "all 7 processes and their sleeps")
        env = open(f"/proc/{_pid_of('stubborn.py', victim)}/environ", "rb").read().decode(
            errors="replace")
        job_id = [v[len("MSRUN_SSH_JOB="):] for v in env.split("\0")
                  if v.startswith("MSRUN_SSH_JOB=")]
        dogs = [int(pid) for ns, pid, cmd in watchdogs_on(f"msrs-node{victim}")
                if job_id and f" {job_id[0]} " in cmd]
        check(dogs, "no watchdog of the job found on host 1")
        p.send_signal(signal.SIGINT)
        time.sleep(1.5)  # inside the 4 s grace: every process ignored its SIGTERM
        check(running("sleep 300") >= 7, "the grandchildren did not wait for the grace")
        os.kill(dogs[0], signal.SIGKILL)
        out, err = p.communicate(timeout=40)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    check(p.returncode == 130, f"exit {p.returncode}, expected 130: {err.decode()[-2000:]}")
    wait_clean(5)


def _pid_of(program, host):
    """The pid of a process of the job running `program` on host `host`."""
    return next(pid for ns, pid, cmd in marked_processes() if ns == f"msrs-node{host}" and
                program in cmd)


def cmdline(pid):
    """The command line of `pid`, its words joined by blanks ("" once it is gone)."""
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def chatter_on(host):
    """The pid of a chatter.py of the job on host `host`."""
    return _pid_of("chatter.py", host)


def watchdogs_on(ns):
    """The watchdogs running on host namespace `ns`: [(ns, pid, cmdline)]."""
    return [x for x in leftovers(ns) if "msrun-ssh-watchdog" in x[2]]


def test_a_killed_watchdog_s_host_is_swept_in_its_place():
    _killed_watchdog_test("False")


def test_a_killed_watchdog_s_host_is_swept_in_its_place_through_the_agent():
    _killed_watchdog_test("True")


def test_a_sigterm_to_a_watchdog_ends_the_job_with_143():
    _killed_watchdog_test("False", signal.SIGTERM)


def test_a_sigterm_to_a_watchdog_ends_the_job_with_143_through_the_agent():
    _killed_watchdog_test("True", signal.SIGTERM)


def _lost_host_test(break_host, repair_host):
    victim = 1
    addr = addresses()[victim]
    p, _ = launch([job("sleeper.py")])
    try:
        wait_for(_running(7), 15, "all 7 processes")
        start = time.monotonic()
        break_host(victim)
        # The cut-off host cleans itself within 3 heartbeats, while still cut off.
        wait_for(lambda: not [x for x in marked_processes() if x[0] == f"msrs-node{victim}"],
                 3 * HEARTBEAT + 0.5, "the lost host to clean itself")
        took_self = time.monotonic() - start
        out, err = p.communicate(timeout=20)
        took = time.monotonic() - start
        check(p.returncode not in (0, None), f"exit {p.returncode}")
        check(took < 2 * HEARTBEAT + 2 + HEARTBEAT + 2, f"launcher took {took:.1f} s")
        check(re.search(rf"host {re.escape(addr)} lost".encode(), err), f"not named: {err.decode()[-1500:]}")
        wait_clean(5)
        print(f"lost host clean after {took_self:.1f} s; launcher exited after {took:.1f} s")
    finally:
        repair_host(victim)
        if p.poll() is None:
            p.kill()


def test_cut_host():
    _lost_host_test(lambda i: cluster("cut", i), lambda i: cluster("heal", i))


def test_sshd_killed():
    _lost_host_test(lambda i: cluster("sshd-stop", i), lambda i: cluster("sshd-start", i))


def test_detached_job_and_stop():
    start = time.monotonic()
    code, out, err, _ = run([job("sleeper.py"), "--sleep", "120"], extra=["--join=False"],
                            log_dir="msrun_detached")
    took = time.monotonic() - start
    check(code == 0, f"exit {code}: {err.decode()}")
    check(took < 10, f"launcher took {took:.1f} s to return")
    job_id = out.decode().strip()
    check(re.fullmatch(r"[0-9a-z-]+", job_id), f"job id {job_id!r}")
    time.sleep(2)
    check(running("sleeper.py") == 7, "7 processes running")
    check(os.path.exists("/tmp/msrun_detached/worker_5.log"), "detached log on the host")
    stop = subprocess.run([binary(), "stop", "--hostfile", hosts_file(), "--job", job_id,
                           "--kill_grace", "2"], capture_output=True, timeout=60)
    check(stop.returncode == 0, f"stop exit {stop.returncode}: {stop.stderr.decode()}")
    check(len(re.findall(rb"killed \d+ SIGTERM", stop.stdout)) >= 7, f"stop output: {stop.stdout.decode()}")
    wait_clean(3)
