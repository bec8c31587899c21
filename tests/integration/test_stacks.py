"""Stacks on demand (#17): `msrun-ssh stack --job ID` on a running detached job, and Ctrl-\\
(SIGQUIT) on an attached one, print every rank's stack, grouped, without ending anything: the job
goes on to finish with status 0 and its output complete; a host without gdb still shows every
process's /proc state."""
import json
import os
import re
import signal
import tempfile

from harness import (check, cluster_dir, job, launch, marked_processes, tmpdir, wait_clean,
                     wait_for)
from test_jobs import _start, _state_env, _tool

SECONDS = 25


def _host_rc(i):
    """Host i's login rc (tests/cluster: bind-mounted over ~/.bashrc in its namespace)."""
    path = os.path.join(cluster_dir(), f"node{i}", "bashrc")
    check(os.path.exists(path), f"no rc file {path}")
    return path


def _path_without_gdb():
    """A directory of links to every program of /usr/bin and /bin but gdb."""
    d = tempfile.mkdtemp(prefix="nogdb-", dir=tmpdir())
    os.chmod(d, 0o755)
    for src in ("/usr/bin", "/bin"):
        for name in os.listdir(src):
            target = os.path.join(d, name)
            if not name.startswith("gdb") and not os.path.lexists(target):
                os.symlink(os.path.join(src, name), target)
    return d


def test_stack_of_a_detached_job_shows_every_rank_and_the_job_goes_on():
    env = _state_env()
    # Rank 2 stuck in wait_for_peer, the others in collective, each with a sleep child.
    job_id = _start(env, task=[job("hang.py"), "--stuck", "2", "--seconds", str(SECONDS),
                               "--child"])
    rc = _host_rc(1)
    saved = open(rc).read()
    try:
        # 7 Python processes and their 7 sleep children.
        wait_for(lambda: len(marked_processes()) >= 14, 20, "the job's 14 processes")
        # From now on, host 1's login shell finds no gdb.
        with open(rc, "a") as f:
            f.write(f"\nexport PATH={_path_without_gdb()}\n")
        r = _tool(env, "stack", "--job", job_id, "--log_dir", tmpdir())
        out = r.stdout.decode()
        check(r.returncode == 0, f"stack exit {r.returncode}: {r.stderr.decode()}\n{out}")
        check(f"stacks of job {job_id}: 14 processes on 3 hosts\n" in out, out)
        # Rank 2 alone, with its function, file and line; the others once, under their rank set.
        check(re.search(r"--- Python stacks of rank 2 \(pid \d+\) on 198\.18\.1\.11 ---\n"
                        r"(Thread .*\n)?Current thread 0x[0-9a-f]+ \(most recent call first\):\n"
                        r"  File \".*/hang\.py\", line \d+ in wait_for_peer\n", out),
              f"rank 2's stack: {out}")
        check(re.search(r"--- Python stacks of scheduler, ranks 0-1,3-5 \(6 processes\), e\.g\. "
                        r"(scheduler|rank \d) \(pid \d+\) on 198\.18\.1\.1[02] ---\n", out), f"the others: {out}")
        check(out.count(" in collective\n") == 1, f"shown once: {out}")
        # Every rank is listed with its /proc state; the sleep children are not Python.
        for rank in range(6):
            check(re.search(rf"  rank {rank} \(pid \d+\) S \(sleeping\) wchan \S+ python3: "
                            r"Python stack\n", out), f"rank {rank}'s line: {out}")
        # Host 1 has no gdb: it says so, and its sleep children still show their /proc state.
        check(re.search(r"host 198\.18\.1\.11 \(node1\): \d+ processes, no native stack tool\n",
                        out), f"host 1's line: {out}")
        check(re.search(r"  rank \d \(pid \d+\) S \(sleeping\) wchan \S+ sleep: no stack \(no "
                        r"Python stack: not a Python process with stack dumps; no native stack "
                        r"tool \(gdb is not installed\)\)\n", out), f"host 1's sleep: {out}")
        # The other hosts have gdb: their sleep children get a native stack.
        check(re.search(r"--- native stacks of .*on 198\.18\.1\.10 ---\n", out), f"native: {out}")
        saved_files = [n for n in os.listdir(tmpdir()) if re.fullmatch(r"stacks-\d{8}-\d{6}\.txt", n)]
        check(saved_files, f"no stacks file in {tmpdir()}")

        # The job goes on to its end: every process exits 0 with its output complete.
        def ended():
            r = _tool(env, "status", "--job", job_id, "--json")
            procs = json.loads(r.stdout)["processes"]
            return all(p["state"] != "alive" for p in procs) and procs
        wait_for(ended, SECONDS + 20, "the job's end")
        procs = json.loads(_tool(env, "status", "--job", job_id, "--json").stdout)["processes"]
        check(all(p["state"] == "exited" and p["exit_status"] == 0 for p in procs),
              f"not all exit 0: {procs}")
        logs = _tool(env, "logs", "--job", job_id).stdout.decode()
        for rank in range(6):
            check(f"rank {rank} up\n" in logs and f"rank {rank} done\n" in logs,
                  f"rank {rank}'s log: {logs}")
    finally:
        with open(rc, "w") as f:
            f.write(saved)
        _tool(env, "stop", "--job", job_id, "--kill_grace", "1")
        wait_clean(5)


def test_ctrl_backslash_on_an_attached_job_dumps_every_rank_and_the_job_goes_on():
    seconds = 12
    p, log_dir = launch([job("hang.py"), "--stuck", "2", "--seconds", str(seconds)])
    try:
        # The scheduler and 6 workers are up: each printed its first line, so it waits where the
        # dump should find it.
        logs = ["scheduler.log"] + [f"worker_{rank}.log" for rank in range(6)]

        def up(name):
            path = os.path.join(log_dir, name)
            return os.path.exists(path) and " up\n" in open(path).read()
        wait_for(lambda: all(up(n) for n in logs), 20, "the job's 7 processes up")
        p.send_signal(signal.SIGQUIT)
        out, err = p.communicate(timeout=seconds + 30)
    finally:
        if p.poll() is None:
            p.kill()
    out, err = out.decode(), err.decode()
    check(p.returncode == 0, f"exit {p.returncode}: {err}")
    check("msrun-ssh: stacks: asking 3 hosts for every process's stack; the job goes on\n" in err,
          err)
    check(re.search(r"stacks of job \S+: 7 processes on 3 hosts\n", err), err)
    check(re.search(r"--- Python stacks of rank 2 \(pid \d+\) on 198\.18\.1\.11 ---\n"
                    r"(Thread .*\n)?Current thread 0x[0-9a-f]+ \(most recent call first\):\n"
                    r"  File \".*/hang\.py\", line \d+ in wait_for_peer\n", err),
          f"rank 2's stack: {err}")
    check(re.search(r"--- Python stacks of scheduler, ranks 0-1,3-5 \(6 processes\)", err),
          f"the others once: {err}")
    saved = [n for n in os.listdir(log_dir) if re.fullmatch(r"stacks-\d{8}-\d{6}\.txt", n)]
    check(len(saved) == 1 and f"the stacks are also in {log_dir}/{saved[0]}" in err,
          f"stacks file in {log_dir}: {err}")
    # The dump ended nothing: every rank went on to its last line, its log complete.
    for rank in range(6):
        check(f"rank {rank} done" in out, f"rank {rank}'s end: {out}")
        log = open(os.path.join(log_dir, f"worker_{rank}.log")).read()
        check(log == f"rank {rank} up\nrank {rank} done\n", f"worker_{rank}.log: {log!r}")
    wait_clean(5)
