"""The straggler watch (#38, docs/slow-nodes.md) on the namespace cluster: a synchronous job
(jobs/lockstep.py: every worker computes, then waits at a barrier) with one host held to 15% of
one CPU by a cgroup quota on its sshd (cluster.sh throttle) gets a `straggler` event naming that
host and its ranks, and no other; once the quota is lifted, `straggler_cleared`. A job whose ranks
print unevenly but run at the same speed gets none. The samplers end with the job."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from harness import (addresses, binary, check, cluster, job, launch, marked_processes, run,
                     tmpdir, wait_for, wait_no_leftovers)

SLOW = 1


def _events(path):
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path, encoding="utf-8", errors="replace"):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def _wait_event(path, kind, timeout, p):
    end = time.monotonic() + timeout
    while time.monotonic() < end and p.poll() is None:
        found = [e for e in _events(path) if e.get("type") == kind]
        if found:
            return found
        time.sleep(0.25)
    return [e for e in _events(path) if e.get("type") == kind]


def test_a_throttled_host_is_named_a_straggler_then_cleared():
    addrs = addresses()
    events = os.path.join(tmpdir(), "watch-events.jsonl")
    cluster("throttle", SLOW, 15)
    p = None
    try:
        p, log_dir = launch([job("lockstep.py"), "90", "0.05"], extra=["--events", events])
        try:
            first = _wait_event(events, "process_started", 30, p)
            check(first, "the job did not start")
            t0 = time.monotonic()
            raised = _wait_event(events, "straggler", 20, p)
            took = time.monotonic() - t0
            check(raised, f"no straggler event within 20 s: {_events(events)[-5:]}")
            r = raised[0]
            check(r["host"] == addrs[SLOW] and sorted(r["ranks"]) == ["2", "3"],
                  f"the straggler named {r}, expected {addrs[SLOW]} ranks 2, 3")
            check(r["demand"] >= 0.5 and r["demand"] >= 3 * r["median"], f"{r}")
        finally:
            cluster("throttle", SLOW, 0)
        cleared = _wait_event(events, "straggler_cleared", 30, p)
        check(cleared and cleared[0]["host"] == addrs[SLOW], f"not cleared: {_events(events)[-5:]}")
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        cluster("throttle", SLOW, 0)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
    check(p.returncode == 130, f"exit {p.returncode}: {err.decode()[-1500:]}")
    every = [e for e in _events(events) if e.get("type") == "straggler"]
    check(len(every) == 1, f"straggler events {every}")
    check(f"straggler: {addrs[SLOW]} (ranks 2, 3)".encode() in err, err.decode()[-1500:])
    summary = json.load(open(os.path.join(log_dir, "summary.json")))
    s = summary["stragglers"]
    check(len(s) == 1 and s[0]["host"] == addrs[SLOW] and s[0]["until_s"] is not None, f"{s}")
    print(f"straggler named {took:.1f} s after the start")
    wait_no_leftovers(5)


def test_uneven_output_at_an_even_speed_raises_nothing():
    events = os.path.join(tmpdir(), "watch-even.jsonl")
    code, _, err, log_dir = run([job("lockstep.py"), "15", "0.05", "0", "2"],
                                extra=["--events", events], timeout=90)
    check(code == 0, f"exit {code}: {err.decode()[-1500:]}")
    kinds = [e["type"] for e in _events(events)]
    check("straggler" not in kinds, f"a straggler in an even job: {_events(events)}")
    summary = json.load(open(os.path.join(log_dir, "summary.json")))
    check(summary["stragglers"] == [], f"{summary['stragglers']}")
    chatty = open(os.path.join(log_dir, "worker_2.log")).read().count("says")
    quiet = open(os.path.join(log_dir, "worker_3.log")).read().count("says")
    check(chatty > 1000 and quiet == 0, f"rank 2 said {chatty} lines, rank 3 {quiet}")
    wait_no_leftovers(5)


def _screen(session):
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                          text=True, timeout=10).stdout


def test_top_in_a_terminal_shows_every_host_and_rank():
    """`msrun-ssh top` in a real terminal (tmux) from another "terminal" than the job's: its screen,
    refreshed each second, has every host and every rank with its CPU, lines per second and step
    (lockstep.py prints "step N"), and the straggler; it ends by itself when the job ends."""
    if not shutil.which("tmux"):
        raise AssertionError("tmux is not installed (the CI installs it)")
    addrs = addresses()
    state = tempfile.mkdtemp(prefix="state-", dir=tmpdir())
    cluster("throttle", SLOW, 15)
    p = None
    session = f"msrs-top-{os.getpid()}"
    try:
        p, _ = launch([job("lockstep.py"), "25", "0.05"], env={"XDG_STATE_HOME": state})
        # `top` without --job finds the newest running job: once its record is written (a `top`
        # typed before that says there is no running job; under the sanitizers that is seconds)
        records = os.path.join(state, "msrun-ssh", "jobs")
        wait_for(lambda: os.path.isdir(records) and
                 any(n.endswith(".json") for n in os.listdir(records)), 60, "the job's record")
        top = f"XDG_STATE_HOME={state} {binary()} top"
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", "env",
                        "TERM=xterm", "bash", "--norc", "--noprofile", "-c",
                        f"{top}; echo TOP-EXIT=$?; sleep 60"], check=True, timeout=10)
        def ready():
            s = _screen(session)
            return all(f" {r} " in s for r in "012345") and "steps/s" in s
        # (the first screen once every process has started: under the sanitizers that can take a
        # while)
        wait_for(ready, 90, "top's screen with every rank")
        end = time.monotonic() + 30
        while "STRAGGLER" not in _screen(session) and time.monotonic() < end:
            time.sleep(0.5)
        screen = _screen(session)
        check("STRAGGLER" in screen, f"no straggler on top's screen within 30 s:\n{screen}")
        check(f"msrun-ssh top: job" in screen, screen)
        for a in addrs:
            check(a in screen, f"{a} not on the screen:\n{screen}")
        slow = [l for l in screen.splitlines() if l.startswith(addrs[SLOW])]
        check(slow and "STRAGGLER" in slow[0], f"the straggler's row:\n{screen}")
        others = [l for l in screen.splitlines() if l.startswith(addrs[0]) or l.startswith(addrs[2])]
        check(others and all("STRAGGLER" not in l for l in others), screen)
        rank0 = [l for l in screen.splitlines() if re.match(r"^\s+0 ", l)]
        check(rank0 and re.search(r"\d+\s+\d+\.\d+\s*$", rank0[0]), f"rank 0's step rate:\n{screen}")
        check(all(len(l) <= 120 for l in screen.splitlines()), "wider than the terminal")
    finally:
        cluster("throttle", SLOW, 0)
        if p is not None:
            p.send_signal(signal.SIGINT)
            try:
                p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    wait_for(lambda: "TOP-EXIT=0" in _screen(session), 15, "top to end with the job")
    subprocess.run(["tmux", "kill-session", "-t", session], timeout=10)
    wait_no_leftovers(5)


def test_top_of_a_detached_job_over_its_own_connections():
    """A detached job has no launcher left: `top --job ID --once` connects to its hosts, runs a
    sampler on each and prints every rank with its CPU; after the job ends, `top` says so and
    exits 0, and nothing of it is left on the hosts."""
    state = tempfile.mkdtemp(prefix="state-", dir=tmpdir())
    env = dict(os.environ, XDG_STATE_HOME=state)
    code, out, err, _ = run([job("lockstep.py"), "12", "0.05"], extra=["--join=False"],
                            env={"XDG_STATE_HOME": state})
    check(code == 0, f"detached start exit {code}: {err.decode()[-1500:]}")
    job_id = out.decode().strip()
    r = subprocess.run([binary(), "top", "--job", job_id, "--once"], capture_output=True,
                       timeout=60, env=env, cwd=tmpdir())
    check(r.returncode == 0, f"top exit {r.returncode}: {r.stderr.decode()[-1500:]}")
    screen = r.stdout.decode()
    check(f"msrun-ssh top: job {job_id}" in screen, screen)
    for a in addresses():
        check(a in screen, f"{a} not on the screen:\n{screen}")
    rows = [l for l in screen.splitlines() if re.match(r"^\s+(\d+|sched) 198\.", l)]
    check(len(rows) == 7, f"7 processes (scheduler and 6 ranks), got:\n{screen}")
    check(all(re.match(r"^\s+\S+ \S+\s+\d+", l) for l in rows), f"a rank without its CPU:\n{screen}")
    wait_for(lambda: not [p for p in marked_processes() if "lockstep.py" in p[2]], 40,
             "the detached job to end")
    r = subprocess.run([binary(), "top", "--job", job_id], capture_output=True, timeout=60,
                       env=env, cwd=tmpdir())
    check(r.returncode == 0 and b"no process of it is left" in r.stdout,
          f"top after the end: exit {r.returncode}: {r.stdout.decode()[-500:]} "
          f"{r.stderr.decode()[-500:]}")
    wait_no_leftovers(5)
