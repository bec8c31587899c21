"""--events on the namespace cluster (issue #18): a failing job, a cut host and a Ctrl-C each
produce the documented event sequence (docs/events.md), every line valid against the schema, and
<log_dir>/summary.json holds the summary."""
import json
import os
import signal

from harness import (addresses, check, cluster, interrupt, job, launch, run,
                     tmpdir, wait_clean, wait_for, running)

# docs/events.md: the fields every type carries.
SCHEMA = {
    "job": {"job_id", "hosts", "workers", "master", "log_dir", "max_restarts"},
    "attempt": {"attempt", "job_id"},
    "start_failed": {"exit_status", "reason"},
    "host_connected": {"host"},
    "watchdog_ready": {"host", "name", "pid"},
    "process_started": {"host", "process", "rank", "log"},
    "process_exited": {"host", "process", "exit_status", "signal"},
    "teardown": {"reason", "exit_status"},
    "host_lost": {"host", "reason"},
    "process_ended": {"host", "process", "rank", "status", "exit_status", "failed", "seconds"},
    "summary": {"attempt", "exit_status", "cause", "interrupted", "processes", "root_cause",
                "torn_down"},
    "end": {"exit_status", "attempts"},
}
PROCESSES = 7  # 3 hosts x 2 workers + the scheduler


def events_of(path):
    """Every line parsed and checked against SCHEMA; returns the events."""
    events = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            e = json.loads(line)
            check(e.get("version") == 1, f"line {n}: version {e.get('version')}")
            check(isinstance(e.get("time"), str) and e["time"].endswith("Z"), f"line {n}: time")
            want = SCHEMA.get(e.get("type"))
            check(want is not None, f"line {n}: unknown type {e.get('type')}")
            missing = want - set(e)
            check(not missing, f"line {n} ({e['type']}): missing {missing}")
            events.append(e)
    return events


def check_frame(events, exit_status):
    """What every attached run emits: job, attempt, hosts, watchdogs, processes, summary, end."""
    types = [e["type"] for e in events]
    check(types[:2] == ["job", "attempt"], f"starts with {types[:2]}")
    check(types.count("host_connected") == 3 and types.count("watchdog_ready") == 3,
          f"hosts / watchdogs: {types}")
    check(types.count("process_started") == PROCESSES, f"{types.count('process_started')} started")
    check(types.count("process_ended") == PROCESSES, f"{types.count('process_ended')} ended")
    check(types[-2:] == ["summary", "end"], f"ends with {types[-2:]}")
    check(events[-1]["exit_status"] == exit_status, f"end: {events[-1]}")
    return types


def test_events_of_a_failing_job():
    path = os.path.join(tmpdir(), "fail.jsonl")
    code, out, err, logs = run([job("sleeper.py"), "--fail_rank", "3", "--fail_code", "7",
                                "--delay", "2"], extra=["--events", path], timeout=60)
    check(code == 7, f"exit {code}: {err.decode()[-1500:]}")
    events = events_of(path)
    types = check_frame(events, 7)
    first_exit = next(e for e in events if e["type"] == "process_exited")
    check(first_exit["process"] == "rank 3" and first_exit["exit_status"] == 7, f"{first_exit}")
    teardown = types.index("teardown")
    check(types.index("process_exited") < teardown, "the failure comes before the teardown")
    check("rank 3" in events[teardown]["reason"], f"teardown: {events[teardown]}")
    summary = events[-2]
    check(summary["root_cause"]["process"] == "rank 3", f"root cause: {summary['root_cause']}")
    with open(os.path.join(logs, "summary.json")) as f:
        saved = json.load(f)
    check(saved["root_cause"]["process"] == "rank 3" and saved["exit_status"] == 7,
          f"summary.json: {saved.get('root_cause')}")
    wait_clean(2)


def test_events_of_a_cut_host():
    path = os.path.join(tmpdir(), "cut.jsonl")
    victim = 1
    p, _ = launch([job("sleeper.py")], extra=["--events", path])
    try:
        wait_for(lambda: running("sleeper.py") >= PROCESSES,
                 15, "all processes")
        cluster("cut", victim)
        _, err = p.communicate(timeout=30)
    finally:
        cluster("heal", victim)
        if p.poll() is None:
            p.kill()
    check(p.returncode == 255, f"exit {p.returncode}: {err.decode()[-1500:]}")
    events = events_of(path)
    types = check_frame(events, 255)
    lost = [e for e in events if e["type"] == "host_lost"]
    check(len(lost) == 1 and lost[0]["host"] == addresses()[victim], f"host_lost: {lost}")
    teardown = events[types.index("teardown")]
    check(addresses()[victim] in teardown["reason"], f"teardown: {teardown}")
    check(types.index("host_lost") < types.index("teardown"), "host_lost before the teardown")
    wait_clean(5)


def test_events_of_a_ctrl_c():
    path = os.path.join(tmpdir(), "int.jsonl")
    p, _ = launch([job("sleeper.py")], extra=["--events", path])
    interrupt(p, signal.SIGINT, 15, lambda: wait_for(
        lambda: running("sleeper.py") >= PROCESSES, 15,
        "all processes"))
    check(p.returncode == 130, f"exit {p.returncode}")
    events = events_of(path)
    types = check_frame(events, 130)
    check(types.count("teardown") == 1, f"{types.count('teardown')} teardowns")
    check(events[types.index("teardown")]["reason"] == "received SIGINT",
          f"{events[types.index('teardown')]}")
    check(events[-2]["interrupted"] is True, f"summary: {events[-2]}")
    wait_clean(2)
