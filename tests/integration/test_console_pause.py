"""The user's terminal never ends a healthy job (issue #36), on the namespace cluster.

Six launchers at once, each with its own interference, while their jobs print steadily:
  - a real terminal (tmux, an interactive bash) stopped with Ctrl-S during the start-up, and
    another one while the job runs, each for PAUSE_S, then Ctrl-Q;
  - Ctrl-Z on a running job, `fg` PAUSE_S later; Ctrl-Z, then `bg` a few seconds later;
  - a pipe whose reader reads nothing for PAUSE_S (as `| less` until the user scrolls);
  - a pipe read at 400 KB/s;
  - and a launcher stopped by SIGSTOP (as a debugger does) for 10 s, then continued.
Every job must end as without the interference (exit 0, every rank's log byte for byte), the
console must say how many lines it did not show where it dropped some, a suspended job's processes
must really be stopped on the hosts (and the launcher too), nothing may be left on any host, and
no host may be called lost (the SIGSTOP'd launcher's job is ended by its watchdogs, and the
launcher says exactly that). PAUSE_S is 120 (MSRUN_SSH_TEST_PAUSE_S changes it): far over
everything the launcher waits for at --heartbeat 1 (the watchdogs give up after 2 s, a silent
host is lost after 4 s, a starved one after 60 s, --connect_timeout is 5 s). They run at once so
that the suite waits for PAUSE_S once, not six times."""
import json
import os
import re
import signal
import subprocess
import threading
import time

from harness import (Pane, binary, check, hosts_file, job, launcher_pid, marked_processes, quoted,
                     state_of, tmpdir, wait_for, wait_no_leftovers)

PAUSE_S = float(os.environ.get("MSRUN_SSH_TEST_PAUSE_S", "120"))
MARKER = re.compile(rb"msrun-ssh: \.\.\. ([\d,]+) lines not shown \(the console fell behind\); "
                    rb"the logs have them")
PREFIXED = re.compile(rb"^\[(sched|\d+)@198\.18\.1\.\d+\] ")
COMMON = ["--heartbeat", "1", "--kill_grace", "2", "--connect_timeout", "5"]


def expected_log(tag, rank, lines):
    body = b"".join(b"%-79s\n" % (b"%s rank %s line %d" % (tag.encode(), rank.encode(), i))
                    for i in range(lines))
    return body + b"%s rank %s done\n" % (tag.encode(), rank.encode())


def check_logs(name, logs, tag, lines):
    """Every rank's log holds exactly what it printed."""
    names = sorted(n for n in os.listdir(logs) if n.endswith(".log") and n != "msrun-ssh.log")
    workers = [n for n in names if n.startswith("worker_")]
    check("scheduler.log" in names and len(workers) >= 2, f"{name}: logs {names}")
    for n in names:
        with open(os.path.join(logs, n), "rb") as f:
            got = f.read()
        # The scheduler's RANK_ID is the contract's (msrun gives it one too); a worker's is its own.
        first = re.match(rb"\S+ rank (\S+) ", got)
        rank = first.group(1).decode() if first and n == "scheduler.log" else \
            n[len("worker_"):-len(".log")]
        check(got == expected_log(tag, rank, lines),
              f"{name}: {n} is not what rank {rank} printed ({len(got)} bytes)")


def check_summary(name, logs, max_seconds=None):
    with open(os.path.join(logs, "summary.json")) as f:
        summary = json.load(f)
    check(summary["exit_status"] == 0, f"{name}: summary.json: {summary['exit_status']}")
    if max_seconds is not None:
        slow = [(p["process"], p["seconds"]) for p in summary["processes"]
                if p["seconds"] > max_seconds]
        check(not slow, f"{name}: processes ran longer than {max_seconds} s: {slow}")


def command(tag, logs, lines, seconds):
    return [binary(), "--hostfile", hosts_file(), "--log_dir", logs, *COMMON,
            job("steady.py"), tag, str(lines), str(seconds)]


def job_states(tag):
    """The state letter of every process of the job running steady.py TAG, on every host."""
    states = []
    for _, pid, cmd in marked_processes():
        if f" {tag} " not in f" {cmd} ":
            continue
        try:
            stat = open(f"/proc/{pid}/stat", "rb").read()
            states.append(chr(stat.rsplit(b")", 1)[1].split()[0][0]))
        except OSError:
            pass
    return states


def ctrl_s(name, during_start):
    """Ctrl-S for PAUSE_S, at the start-up or while the job prints; then Ctrl-Q."""
    tag, lines = name, 12000
    logs = os.path.join(tmpdir(), f"{name}-logs")
    pane = Pane(name)
    try:
        pane.type(quoted(command(tag, logs, lines, 25)) + "; echo EXIT=$?")
        if during_start:
            time.sleep(0.3)
        else:
            wait_for(lambda: b"rank 0 line 100" in pane.drawn(), 60, f"{name}: output")
        pane.keys("C-s")
        time.sleep(2)
        frozen = len(pane.drawn())
        time.sleep(PAUSE_S - 2)
        # The terminal really was stopped: nothing reached it meanwhile.
        check(len(pane.drawn()) == frozen, f"{name}: Ctrl-S did not stop the terminal")
        pane.keys("C-q")
        code = pane.exit_status(120)
        drawn = pane.drawn()
    finally:
        pane.close()
    check(code == 0, f"{name}: exit {code}:\n{drawn[-3000:]!r}")
    check(MARKER.search(drawn), f"{name}: no line says what the console did not show:\n"
                                f"{drawn[-3000:]!r}")
    check(b" lost" not in drawn, f"{name}: a host called lost:\n{drawn[-3000:]!r}")
    check_logs(name, logs, tag, lines)
    check_summary(name, logs)


def ctrl_z(name, then):
    """Ctrl-Z on the running job; `fg` after PAUSE_S, or `bg` after 5 s."""
    tag, lines = name, 3000
    logs = os.path.join(tmpdir(), f"{name}-logs")
    pane = Pane(name)
    try:
        pane.type(quoted(command(tag, logs, lines, 20)))
        wait_for(lambda: b"rank 0 line 100" in pane.drawn(), 60, f"{name}: output")
        pane.keys("C-z")
        wait_for(lambda: b"Stopped" in pane.drawn(), 20, f"{name}: the shell's Stopped")
        pid = launcher_pid(logs)
        check(pid and state_of(pid) == "T", f"{name}: the launcher is not stopped: {pid}")
        states = job_states(tag)
        check(states and all(s == "T" for s in states),
              f"{name}: the job's processes are not all stopped on the hosts: {states}")
        check(b"`fg` or `bg` resumes it" in pane.drawn(), f"{name}: {pane.drawn()[-2000:]!r}")
        wait = PAUSE_S if then == "fg" else 5
        time.sleep(wait)
        check(all(s == "T" for s in job_states(tag)), f"{name}: processes ran while suspended")
        pane.type("fg; echo EXIT=$?" if then == "fg" else "bg; wait %1; echo EXIT=$?")
        code = pane.exit_status(120)
        drawn = pane.drawn()
    finally:
        pane.close()
    check(code == 0, f"{name}: exit {code}:\n{drawn[-3000:]!r}")
    check(re.search(rb"resumed after \d+\.\d s suspended: the job goes on", drawn),
          f"{name}: no resumed line:\n{drawn[-3000:]!r}")
    check(b" lost" not in drawn, f"{name}: a host called lost:\n{drawn[-3000:]!r}")
    check_logs(name, logs, tag, lines)
    check_summary(name, logs)


def pipe(name, reader):
    tag = name
    lines, seconds = (12000, 25) if reader == "paused" else (50000, 0)
    logs = os.path.join(tmpdir(), f"{name}-logs")
    p = subprocess.Popen(command(tag, logs, lines, seconds), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmpdir())
    err = []
    t = threading.Thread(target=lambda: err.append(p.stderr.read()))
    try:
        if reader == "paused":
            time.sleep(PAUSE_S)  # nobody reads stdout or stderr meanwhile
            t.start()
            out = p.stdout.read()
        else:
            t.start()
            out = b""
            while True:  # 400 KB/s
                chunk = p.stdout.read1(40000)
                if not chunk:
                    break
                out += chunk
                time.sleep(0.1)
        code = p.wait(timeout=120)
        t.join(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    errors = err[0] if err else b""
    check(code == 0, f"{name}: exit {code}:\n{errors[-3000:]!r}")
    check(MARKER.search(errors), f"{name}: no line says what was not shown:\n{errors[-2000:]!r}")
    check(b" lost" not in errors, f"{name}: a host called lost:\n{errors[-3000:]!r}")
    torn = [l for l in out.splitlines() if not PREFIXED.match(l)]
    check(not torn, f"{name}: console lines torn or without prefix: {torn[:3]!r}")
    check_logs(name, logs, tag, lines)
    # The console's pace is not the job's: 28 MB at 400 KB/s would take 70 s.
    check_summary(name, logs, max_seconds=40 if reader == "slow" else None)


def sigstop(name):
    """SIGSTOP to the launcher (as a debugger does) for 10 s, far over the watchdogs' 2 s: they end
    the job on their hosts, and the launcher, continued, says so and blames no host."""
    tag = name
    logs = os.path.join(tmpdir(), f"{name}-logs")
    p = subprocess.Popen(command(tag, logs, 3000, 60), stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmpdir())
    try:
        wait_for(lambda: len(job_states(tag)) >= 3, 60, f"{name}: the job's processes")
        time.sleep(1)
        p.send_signal(signal.SIGSTOP)
        time.sleep(10)
        p.send_signal(signal.SIGCONT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    check(p.returncode == 255, f"{name}: exit {p.returncode}: {err[-2000:]!r}")
    check(re.search(rb"the launcher itself stood still for \d+\.\d s", err),
          f"{name}: the stall is not told: {err[-2000:]!r}")
    check(re.search(rb"(the watchdog on 198\.18\.1\.\d+ ended the job there|was ended by its "
                    rb"watchdog \([^)]*\)): it heard nothing from the launcher for 2 s \(the "
                    rb"launcher stood still for", err),
          f"{name}: the watchdogs' end is not told: {err[-2000:]!r}")
    check(b" lost" not in err.replace(b"launcher lost", b""),
          f"{name}: a host called lost: {err[-2000:]!r}")


def test_a_stopped_paused_or_slow_console_never_ends_a_healthy_job():
    scenarios = {
        "ctrl-s-start": lambda: ctrl_s("ctrl-s-start", True),
        "ctrl-s-running": lambda: ctrl_s("ctrl-s-running", False),
        "ctrl-z-fg": lambda: ctrl_z("ctrl-z-fg", "fg"),
        "ctrl-z-bg": lambda: ctrl_z("ctrl-z-bg", "bg"),
        "pipe-paused": lambda: pipe("pipe-paused", "paused"),
        "pipe-slow": lambda: pipe("pipe-slow", "slow"),
        "sigstop": lambda: sigstop("sigstop"),
    }
    failures = {}

    def run(name, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - every scenario's failure is reported
            failures[name] = f"{type(e).__name__}: {e}"

    threads = [threading.Thread(target=run, args=item) for item in scenarios.items()]
    for t in threads:
        t.start()
        time.sleep(0.5)
    for t in threads:
        t.join(timeout=PAUSE_S + 400)
    check(not any(t.is_alive() for t in threads), "a scenario did not end")
    check(not failures, "\n".join(f"{k}: {v}" for k, v in sorted(failures.items())))
    wait_no_leftovers(30)
