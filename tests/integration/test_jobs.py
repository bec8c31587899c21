"""Jobs you can find again (#21): records, list, status, logs --follow and stop --job on a
detached job. Every test points XDG_STATE_HOME into its own scratch directory."""
import json
import os
import re
import signal
import subprocess
import tempfile
import time

from harness import (addresses, binary, check, cluster, job, launch, marked_processes, run, tmpdir,
                     wait_clean, wait_for)


def _state_env():
    env = dict(os.environ)
    env["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="state-", dir=tmpdir())
    return env


def _start(env, seconds=20, task=None):
    """Starts `task` (default: ticker.py SECONDS) detached with `env`; returns its job id."""
    code, out, err, _ = run(task or [job("ticker.py"), str(seconds)], extra=["--join=False"],
                            log_dir="msrun_jobs", env={"XDG_STATE_HOME": env["XDG_STATE_HOME"]})
    check(code == 0, f"detached start exit {code}: {err.decode()}")
    job_id = out.decode().strip()
    check(re.fullmatch(r"[0-9a-z-]+", job_id), f"job id {job_id!r}")
    record = os.path.join(env["XDG_STATE_HOME"], "msrun-ssh", "jobs", job_id + ".json")
    check(os.path.exists(record), f"no record {record}")
    return job_id


def _tool(env, *args, timeout=60):
    return subprocess.run([binary(), *args], env=env, capture_output=True, timeout=timeout,
                          cwd=tmpdir())


def _status(env, job_id):
    r = _tool(env, "status", "--job", job_id, "--json")
    check(r.returncode == 0, f"status exit {r.returncode}: {r.stderr.decode()}")
    return json.loads(r.stdout)


def _tickers():
    return [p for p in marked_processes() if "ticker.py" in p[2]]


def _stop(env, job_id):
    _tool(env, "stop", "--job", job_id, "--kill_grace", "1")


def test_list_shows_a_detached_job():
    env = _state_env()
    job_id = _start(env)
    try:
        r = _tool(env, "list", "--json")
        check(r.returncode == 0, f"list exit {r.returncode}: {r.stderr.decode()}")
        jobs = json.loads(r.stdout)
        mine = [j for j in jobs if j["id"] == job_id]
        check(len(mine) == 1, f"job not listed: {jobs}")
        check(mine[0]["state"].startswith("running"), f"state {mine[0]['state']}")
        check(mine[0]["processes"] == 7, f"processes {mine[0]}")
        table = _tool(env, "list").stdout.decode()
        check(job_id in table, f"not in the table: {table}")
    finally:
        _stop(env, job_id)
        wait_clean(5)


def test_status_alive_then_a_killed_rank():
    env = _state_env()
    job_id = _start(env)
    try:
        wait_for(lambda: len(_tickers()) == 7, 15, "7 tickers")
        procs = _status(env, job_id)["processes"]
        check(len(procs) == 7, f"{len(procs)} processes: {procs}")
        check(all(p["state"] == "alive" and p["pid"] for p in procs), f"not all alive: {procs}")
        # Kill rank 2's process on its host (the namespace pid as this machine sees it).
        victim = [p for p in _tickers()
                  if re.search(rb"(^|\0)RANK_ID=2(\0|$)", open(f"/proc/{p[1]}/environ", "rb").read())]
        check(len(victim) == 1, f"rank 2 not found once: {victim}")
        os.kill(int(victim[0][1]), signal.SIGTERM)
        def rank2_ended():
            p = [x for x in _status(env, job_id)["processes"] if x["rank"] == 2][0]
            return p["state"] in ("exited", "killed") and p["exit_status"] == 143
        wait_for(rank2_ended, 10, "rank 2 shown ended with status 143")
        others = [x for x in _status(env, job_id)["processes"] if x["rank"] != 2]
        check(all(x["state"] == "alive" for x in others), f"others: {others}")
        check(any(x["cpu_seconds"] is not None for x in others), "no CPU time")
        check(any(x["last_line"].startswith("rank ") for x in others), "no last line")
    finally:
        _stop(env, job_id)
        wait_clean(5)


def test_logs_follow_until_the_end():
    env = _state_env()
    job_id = _start(env, seconds=6)
    p = subprocess.Popen([binary(), "logs", "--job", job_id, "--follow"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmpdir())
    try:
        start = time.monotonic()
        first = p.stdout.readline()
        check(re.match(rb"\[(\d+|sched)@[0-9.]+\] ", first), f"first line {first!r}")
        check(time.monotonic() - start < 8, "the first line came late")
        out, err = p.communicate(timeout=30)
        out = first + out
        check(p.returncode == 0, f"logs exit {p.returncode}: {err.decode()}")
        check(re.search(rb"\[3@[0-9.]+\] rank 3 tick 5\n", out), f"last tick missing: {out[-500:]}")
        check(time.monotonic() - start < 20, "logs --follow did not end with the job")
        once = _tool(env, "logs", "--job", job_id, "--rank", "3")
        check(once.returncode == 0, f"logs --rank 3 exit {once.returncode}")
        lines = once.stdout.decode().splitlines()
        check(lines and all(re.match(r"\[3@[0-9.]+\] rank 3 tick \d+$", l) for l in lines),
              f"rank 3's log: {lines}")
    finally:
        if p.poll() is None:
            p.kill()
        _stop(env, job_id)
        wait_clean(5)


def test_logs_follow_ctrl_c_or_its_readers_end_leaves_nothing():
    """Ctrl-C ends `logs --follow` (130); so does the end of its reader, as `tail -f | head -1`
    ends once head has (141, SIGPIPE's status; it followed for ever, its remote readers too)."""
    env = _state_env()
    job_id = _start(env, seconds=60)
    p = subprocess.Popen([binary(), "logs", "--job", job_id, "--follow"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmpdir())
    piped = subprocess.Popen([binary(), "logs", "--job", job_id, "--follow"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmpdir())
    try:
        p.stdout.readline()
        piped.stdout.readline()
        piped.stdout.close()
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=10)
        check(p.returncode == 130, f"exit {p.returncode}")
        try:
            piped.wait(timeout=10)
        except subprocess.TimeoutExpired:
            check(False, "logs --follow went on after its reader ended")
        check(piped.returncode == 141, f"exit {piped.returncode} (128 + SIGPIPE expected)")
        # Each reader sees its stdin end within its next half-second read; a loaded host may take
        # longer to run it, never forever.
        deadline = time.monotonic() + 10
        while True:
            left = subprocess.run(["pgrep", "-f", "msrun-ssh-logs"], capture_output=True).stdout
            if not left.strip() or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        check(not left.strip(), f"remote log readers left after 10 s: {left}")
    finally:
        for q in (p, piped):
            if q.poll() is None:
                q.kill()
        _stop(env, job_id)
        wait_clean(5)


def test_stop_by_job_id_alone():
    env = _state_env()
    job_id = _start(env, seconds=120)
    wait_for(lambda: len(_tickers()) == 7, 15, "7 tickers")
    r = _tool(env, "stop", "--job", job_id, "--kill_grace", "2")
    check(r.returncode == 0, f"stop exit {r.returncode}: {r.stderr.decode()}")
    check(len(re.findall(rb"killed \d+ SIGTERM", r.stdout)) >= 7, f"stop: {r.stdout.decode()}")
    wait_clean(3)
    check(not _tickers(), "tickers left")
    procs = _status(env, job_id)["processes"]
    check(all(x["state"] != "alive" for x in procs), f"still alive: {procs}")


def test_stop_with_a_host_cut_off_stops_every_other_host_and_names_it():
    """A node died (often why a job is stopped): `stop` ends the job on every host it reaches,
    names the one it cannot reach and exits 255. It used to stop nothing anywhere."""
    env = _state_env()
    job_id = _start(env, seconds=120)
    wait_for(lambda: len(_tickers()) == 7, 15, "7 tickers")
    cluster("cut", 2)
    try:
        r = _tool(env, "stop", "--job", job_id, "--kill_grace", "1", "--connect_timeout", "3")
        check(r.returncode == 255, f"stop exit {r.returncode}: {r.stderr.decode()}")
        check(f"{addresses()[2]}: ".encode() in r.stderr and b"not stopped there" in r.stderr,
              f"the cut host is not named: {r.stderr.decode()}")
        check(f"signals sent on 2 of 3 hosts".encode() in r.stdout, r.stdout.decode())
        wait_for(lambda: not [t for t in _tickers() if t[0] != "msrs-node2"], 10,
                 "the reached hosts' tickers to end")
        check([t for t in _tickers() if t[0] == "msrs-node2"], "the cut host's tickers are gone")
    finally:
        cluster("heal", 2)
    r = _tool(env, "stop", "--job", job_id, "--kill_grace", "1")
    check(r.returncode == 0, f"stop after the heal: exit {r.returncode}: {r.stderr.decode()}")
    wait_clean(5)
    check(not _tickers(), "tickers left")


def test_stop_of_an_attached_job_ends_it_as_sigterm_would():
    """`stop --job ID` from another terminal on an attached job: its launcher tears the job down
    everywhere and exits 143, and a restart budget restarts nothing (docs/restarts.md)."""
    env = _state_env()
    p, _ = launch([job("ticker.py"), "120"], extra=["--max_restarts", "2"],
                  env={"XDG_STATE_HOME": env["XDG_STATE_HOME"]})
    try:
        wait_for(lambda: len(_tickers()) == 7, 20, "7 tickers")
        records = [f for f in os.listdir(os.path.join(env["XDG_STATE_HOME"], "msrun-ssh", "jobs"))
                   if f.endswith(".json")]  # (beside it: the job's .top, for msrun-ssh top)
        check(len(records) == 1, f"records {records}")
        job_id = records[0][:-len(".json")]
        r = _tool(env, "stop", "--job", job_id, "--kill_grace", "2")
        check(r.returncode == 0, f"stop exit {r.returncode}: {r.stderr.decode()}")
        check(f"job {job_id}: its launcher ended (exit 143)".encode() in r.stdout,
              f"stop: {r.stdout.decode()}")
        out, err = p.communicate(timeout=30)
        check(p.returncode == 143, f"launcher exit {p.returncode}: {err.decode()[-2000:]}")
        check(b"restart" not in err, f"a restart after stop: {err.decode()[-2000:]}")
        wait_clean(3)
        check(not _tickers(), "tickers left")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_unknown_job_is_a_usage_error():
    env = _state_env()
    r = _tool(env, "status", "--job", "no-such-job")
    check(r.returncode == 2, f"exit {r.returncode}")
    check(b"no job no-such-job in " + env["XDG_STATE_HOME"].encode() in r.stderr, r.stderr.decode())
