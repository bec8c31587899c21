"""Whole-job restarts (--max_restarts): attempts, their logs, their processes, and signals; and
in-place process recovery (--restart_policy process): a killed worker started again alone."""
import contextlib
import glob
import json
import os
import re
import signal
import subprocess
import time

from harness import (SOURCE_DIR, addresses, check, cluster, cluster_dir, host_processes,
                     interrupt, job, launch, marked_processes, read, run, running, tmpdir,
                     wait_clean, wait_for, wait_no_leftovers)

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "stdlib_ddp", "train.py")


def _logs(log_dir, pattern):
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(log_dir, pattern)))


def test_worker_failing_in_the_first_attempt_only():
    code, out, err, logs = run([job("flaky.py"), "--fail_rank", "3", "--fail_attempts", "1"],
                               extra=["--max_restarts", "2", "--restart_backoff", "0.5"])
    check(code == 0, f"exit {code}: {err.decode()[-2000:]}")
    check(b"attempt 1 of 3 failed (rank 3 on 198.18.1.11 failed: exit 3); restarting the whole "
          b"job in 0.5 s" in err, f"no restart said: {err.decode()[-2000:]}")
    # Both attempts' logs are complete: attempt 1's moved aside, attempt 2's under msrun's names.
    check(_logs(logs, "*.attempt1.log") == ["scheduler.attempt1.log"] +
          [f"worker_{r}.attempt1.log" for r in range(6)], f"{os.listdir(logs)}")
    check(b"rank 3 exits 3 in attempt 1" in read(os.path.join(logs, "worker_3.attempt1.log")),
          "attempt 1's failure is in its log")
    for name in ["scheduler.log"] + [f"worker_{r}.log" for r in range(6)]:
        text = read(os.path.join(logs, name))
        # No process of attempt 1 was alive on its host when attempt 2's started.
        check(re.search(rb"^attempt 2 MS_\w+ rank \d+ earlier-alive 0$", text, re.M),
              f"{name}: {text[-500:]}")
        check(text.rstrip().endswith(b"done"), f"{name} incomplete: {text[-300:]}")
    check(re.search(rb"^\[3@198\.18\.1\.11 a2\] attempt 2 ", out, re.M), "console names attempt 2")
    check(b"attempt 2: exit 0" in err, "the attempts are summed up")
    wait_no_leftovers(2)


def test_worker_failing_every_time_ends_with_its_status_after_every_attempt():
    code, out, err, logs = run([job("flaky.py"), "--fail_rank", "1", "--fail_code", "5",
                                "--fail_attempts", "all"],
                               extra=["--max_restarts", "2", "--restart_backoff", "0.2"])
    check(code == 5, f"exit {code}: {err.decode()[-2000:]}")
    for k in (1, 2, 3):
        check(f"attempt {k}: exit 5 (rank 1 on 198.18.1.10 failed: exit 5)".encode() in err,
              f"attempt {k} not named: {err.decode()[-2000:]}")
    check(b"attempt 3 failed; no restart left (--max_restarts=2)" in err, "the end is said")
    check(_logs(logs, "worker_1*.log") ==
          ["worker_1.attempt1.log", "worker_1.attempt2.log", "worker_1.log"], f"{os.listdir(logs)}")
    wait_no_leftovers(2)


def test_a_missing_workdir_is_not_restarted():
    """A host whose workdir does not exist fails the job before any process starts (exit 2); a
    restart would meet it again, so there is none (it was restarted --max_restarts times, each
    after its back-off)."""
    a = addresses()
    hostfile = os.path.join(tmpdir(), "no_workdir.toml")
    d = cluster_dir()
    open(hostfile, "w").write(
        f'[defaults]\nidentity_file = "{d}/id_ed25519"\nknown_hosts = "{d}/known_hosts"\n'
        f'local_worker_num = 1\n\n[[hosts]]\naddress = "{a[0]}"\nworkdir = "/tmp"\n\n'
        f'[[hosts]]\naddress = "{a[1]}"\nworkdir = "/nonexistent/msrun-ssh-workdir"\n')
    code, out, err, logs = run([job("reached.py")], hostfile=hostfile,
                               extra=["--max_restarts", "2", "--restart_backoff", "0.2"])
    check(code == 2, f"exit {code}: {err.decode()[-2000:]}")
    check(b"/nonexistent/msrun-ssh-workdir does not exist on" in err, err.decode()[-2000:])
    check(b"restarting" not in err and b"attempt 2" not in err,
          f"restarted: {err.decode()[-2000:]}")
    wait_no_leftovers(2)


@contextlib.contextmanager
def _lost_with_its_processes(victim, keeper, logs):
    """Host `victim` is lost with attempt 1's processes running: its `keeper` (the launch agent,
    msrun-ssh-agent, or the watchdog, msrun-ssh-watchdog) is frozen, so that nothing there tears
    the job down, and the host is cut, so that the launcher takes it for lost at once (a host
    whose TCP still answers gets 60 s), then healed before attempt 2 connects. The keeper goes on
    (SIGCONT) when the block ends, whatever happened in it."""
    address = addresses()[victim]
    stopped = [pid for _, pid, cmd in host_processes(f"msrs-node{victim}")
               if cmd == keeper or (keeper != cmd and f" {keeper} " in cmd)]
    try:
        check(len(stopped) == 1, f"node{victim}'s {keeper}: {stopped}")
        os.kill(int(stopped[0]), signal.SIGSTOP)
        cluster("cut", victim)
        try:
            wait_for(lambda: f"host {address} lost".encode()
                     in read(os.path.join(logs, "msrun-ssh.log")), 30, "the host lost")
        finally:
            cluster("heal", victim)
        yield
    finally:
        for pid in stopped:  # if still there, it goes on: its launcher may be gone, it tears down
            try:
                os.kill(int(pid), signal.SIGCONT)
            except ProcessLookupError:
                pass


def test_a_restart_ends_what_the_attempt_before_left_on_a_host_it_lost():
    """A host lost during attempt 1 with its processes running (its agent stopped: no heartbeat
    comes back, and nothing there tears the job down) is back for attempt 2: what attempt 1 left
    there is ended before attempt 2 starts, and said; attempt 2's processes there find none of it
    (flaky.py counts the live processes of earlier attempts on its host)."""
    victim = 1
    addrs = addresses()
    p, logs = launch([job("flaky.py"), "--run_first", "120", "--run", "1"],
                     extra=["--max_restarts", "1", "--restart_backoff", "0.5"])
    try:
        wait_for(lambda: running("flaky.py") >= 1 + 2 * len(addrs), 20, "attempt 1's processes")
        with _lost_with_its_processes(victim, "msrun-ssh-agent", logs):
            out, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
    text = err.decode(errors="replace")
    check(p.returncode == 0, f"exit {p.returncode}: {text[-2500:]}")
    check(f"host {addrs[victim]} lost" in text, f"the loss is not said: {text[-2500:]}")
    check(re.search(rf"msrun-ssh: {re.escape(addrs[victim])}: killed \d+ SIGTERM .*flaky\.py.*, "
                    r"left by an earlier attempt", text), f"nothing ended is said: {text[-2500:]}")
    for rank in (2 * victim, 2 * victim + 1):
        check(re.search(rf"attempt 2 MS_WORKER rank {rank} earlier-alive 0\b".encode(), out, re.M),
              f"rank {rank} found attempt 1's processes: {out.decode(errors='replace')[-2500:]}")
    wait_clean(5)


def _ctrl_c_while_an_earlier_attempt_is_ended(agent):
    """Attempt 2 ends what attempt 1 left on a host lost during it: SIGTERM, the grace, SIGKILL.
    Here those processes ignore SIGTERM and the grace is 60 s. A Ctrl-C meanwhile ends the grace
    at once (SIGKILL, as a second Ctrl-C does in a teardown) and the launcher exits 130 with
    nothing started; before, it waited out the whole grace. `agent`: --agent's value; the
    victim's launch agent (True), or its watchdog (False), is frozen so that attempt 1's processes
    outlive the loss of their host."""
    victim = 1
    addrs = addresses()
    ranks = f"{2 * victim},{2 * victim + 1}"
    p, logs = launch([job("flaky.py"), "--run_first", "120", "--run", "1", "--stubborn_ranks",
                      ranks],
                     extra=["--max_restarts", "1", "--restart_backoff", "0.5", "--kill_grace",
                            "60", "--agent", agent])
    took = None
    try:
        wait_for(lambda: running("flaky.py") >= 1 + 2 * len(addrs), 20, "attempt 1's processes")
        keeper = "msrun-ssh-agent" if agent == "True" else "msrun-ssh-watchdog"
        with _lost_with_its_processes(victim, keeper, logs):
            wait_for(lambda: any("msrun-ssh-stop" in cmd
                                 for _, _, cmd in host_processes(f"msrs-node{victim}")), 60,
                     "attempt 2 ending attempt 1's processes on the victim")
            start = time.monotonic()
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=90)
            took = time.monotonic() - start
            # Checked before the frozen keeper goes on (it would end them too, after its grace).
            left = [cmd for _, _, cmd in marked_processes(f"msrs-node{victim}")
                    if "flaky.py" in cmd]
    finally:
        if p.poll() is None:
            p.kill()
    text = err.decode(errors="replace")
    check(p.returncode == 130, f"exit {p.returncode}: {text[-2500:]}")
    check(took < 8, f"the launcher ended {took:.1f} s after Ctrl-C: {text[-2500:]}")
    check("interrupted while preparing the hosts; nothing was started" in text, text[-2500:])
    check(len(re.findall(rf"msrun-ssh: {re.escape(addrs[victim])}: killed \d+ SIGKILL "
                         r".*flaky\.py.*, left by an earlier attempt", text)) == 2,
          f"the two stubborn workers' SIGKILL is not said: {text[-2500:]}")
    check(not left, f"attempt 1's processes still run on the victim: {left}")
    check(b"attempt 2 " not in out, f"attempt 2 started: {out.decode(errors='replace')[-1500:]}")
    wait_clean(10)


def test_ctrl_c_while_an_earlier_attempt_is_ended_kills_what_it_left_at_once():
    _ctrl_c_while_an_earlier_attempt_is_ended("True")


def test_ctrl_c_while_an_earlier_attempt_is_ended_without_the_agent():
    _ctrl_c_while_an_earlier_attempt_is_ended("False")


def test_ctrl_c_during_the_backoff_ends_at_once():
    p, logs = launch([job("flaky.py"), "--fail_rank", "0", "--fail_attempts", "all"],
                     extra=["--max_restarts", "3", "--restart_backoff", "60"])
    log = os.path.join(logs, "msrun-ssh.log")
    err, took = interrupt(p, signal.SIGINT, 10, lambda: wait_for(
        lambda: os.path.exists(log) and b"restarting the whole job in 60 s" in read(log), 30,
        "the back-off"))
    check(p.returncode == 130, f"exit {p.returncode}: {err.decode()[-1500:]}")
    check(took < 2, f"took {took:.1f} s")
    check(b"interrupted during the restart back-off" in err, "said")
    wait_no_leftovers(2)


def _pythons():
    """The root-namespace pids of the job's Python processes (the example's), on every host."""
    return {pid for _, pid, cmd in marked_processes() if "train.py" in cmd and "python" in cmd}


def test_process_policy_starts_a_killed_worker_again_alone_and_the_weights_agree():
    events = os.path.join(tmpdir(), "recovery-events.jsonl")
    p, logs = launch([EXAMPLE, "--epochs", "3", "--steps", "20", "--sleep", "0.2"],
                     extra=["--restart_policy", "process", "--max_restarts", "1",
                            "--cluster_time_out", "60", "--events", events])
    try:
        log4 = os.path.join(logs, "worker_4.log")
        wait_for(lambda: os.path.exists(log4) and b"epoch: 1, step: 5," in read(log4), 60,
                 "rank 4 at epoch 1, step 5")
        before = _pythons()
        check(len(before) == 7, f"the scheduler and 6 workers: {before}")
        # Rank 4 (on node2) dies of SIGKILL: its pid in its host's pid namespace is in its log.
        pid = re.search(rb"^rank 4: node \d+, device \d+, pid (\d+),", read(log4), re.M).group(1)
        subprocess.run(["ssh", "-F", os.path.join(cluster_dir(), "ssh_config"), "node2", "kill",
                        "-KILL", pid.decode()], check=True, timeout=20)
        wait_for(lambda: b"rank 4: rejoined the job; resuming after step" in read(log4), 60,
                 "rank 4's rejoin")
        # Every other process is the one that started: none was restarted.
        after = _pythons()
        check(len(after) == 7 and len(before & after) == 6, f"before {before}, after {after}")
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    err = err.decode(errors="replace")
    check(p.returncode == 0, f"exit {p.returncode}: {err[-2000:]}")
    restarted = [e for e in map(json.loads, open(events)) if e["type"] == "process_restarted"]
    check(len(restarted) == 1 and restarted[0]["rank"] == 4 and
          restarted[0]["signal"] == "KILL", f"events: {restarted}")
    check(not [e for e in map(json.loads, open(events)) if e["type"] == "teardown"], "teardown")
    text = read(log4).decode()
    check("----- msrun-ssh: process restart 1 of 1: rank 4 on 198.18.1.12 failed: killed by "
          "SIGKILL; started again in place -----" in text, text[-2000:])
    check(re.search(r"process restarts \(1 of --max_restarts=1\):\n  restart 1: rank 4 on "
                    r"198\.18\.1\.12 failed: killed by SIGKILL", err), err[-2000:])
    # The survivors started once; every rank ends with the same weights.
    weights = set()
    for rank in range(6):
        text = read(os.path.join(logs, f"worker_{rank}.log")).decode()
        starts = len(re.findall(r"^rank \d+: node \d+, device \d+, pid ", text, re.M))
        check(starts == (2 if rank == 4 else 1), f"worker_{rank}.log starts {starts} times")
        weights.update(re.findall(r"^rank \d+: final weights (.*)$", text, re.M))
    check(len(weights) == 1, f"the ranks' final weights differ: {weights}")
    check(read(os.path.join(logs, "scheduler.log")).rstrip().endswith(
        b"weights identical on all ranks"), "the scheduler's verdict")
    wait_no_leftovers(2)


def test_process_policy_ends_what_the_failed_run_left_before_starting_it_again():
    """A worker whose grandchild (a session of its own) still holds its output when it dies: its
    channel would never close. The launcher ends what the failed run left on its host (that rank's
    processes only), starts it again in place, and the job ends well; nothing is left."""
    p, logs = launch([job("chatter.py"), "8", "0.1"],
                     extra=["--restart_policy", "process", "--max_restarts", "1"])
    try:
        log4 = os.path.join(logs, "worker_4.log")
        wait_for(lambda: os.path.exists(log4) and b"rank 4 line 5\n" in read(log4), 30,
                 "rank 4 at line 5")
        chatters = [(ns, pid, cmd) for ns, pid, cmd in marked_processes()
                    if "chatter.py" in cmd and "python" in cmd]
        sleeps = {pid for _, pid, cmd in marked_processes() if cmd.startswith("sleep")}
        rank4 = [pid for ns, pid, _ in chatters if ns == "msrs-node2" and
                 b"RANK_ID=4" in open(f"/proc/{pid}/environ", "rb").read().split(b"\0")]
        check(len(rank4) == 1 and len(sleeps) == 7, f"rank 4: {rank4}, grandchildren {sleeps}")
        os.kill(int(rank4[0]), signal.SIGKILL)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    err = err.decode(errors="replace")
    check(p.returncode == 0, f"exit {p.returncode}: {err[-2000:]}")
    check("process restart 1 of 1: rank 4 on 198.18.1.12 failed: killed by SIGKILL; started "
          "again in place" in err, err[-2000:])
    text = read(log4).decode()
    check(text.endswith("rank 4 done\n"), f"the restarted run did not finish: {text[-300:]}")
    wait_no_leftovers(5)


def test_process_policy_restarts_in_place_on_a_connection_at_sshds_max_sessions():
    """Without the agent every process is a channel: a host of a scheduler and 8 workers uses 10
    with its watchdog, sshd's MaxSessions. An in-place restart opens a channel for the failed
    run's leftovers, then one for the run again, each as soon as the one before it closed: the
    open must reach sshd after the session it replaces is freed there."""
    one = os.path.join(tmpdir(), "one-host.toml")
    text = open(os.path.join(cluster_dir(), "hosts.toml")).read()
    text = text.split("[[hosts]]")[0].replace("local_worker_num = 2", "local_worker_num = 8")
    open(one, "w").write(text + f'[[hosts]]\naddress = "{addresses()[0]}"\n')
    flag = os.path.join(tmpdir(), "rank3-failed")
    script = os.path.join(tmpdir(), "fail_once.py")
    open(script, "w").write(
        "import os, sys, time\n"
        "if os.environ['MS_ROLE'] == 'MS_WORKER' and os.environ['RANK_ID'] == '3' and "
        f"not os.path.exists({flag!r}):\n"
        f"    open({flag!r}, 'w').close()\n"
        "    time.sleep(0.5)\n"
        "    sys.exit(3)\n"
        "time.sleep(3)\n"
        "print('done', flush=True)\n")
    code, out, err, logs = run([script], hostfile=one,
                               extra=["--agent", "False", "--restart_policy", "process",
                                      "--max_restarts", "1"])
    err = err.decode(errors="replace")
    check(code == 0, f"exit {code}: {err[-2000:]}")
    check("process restart 1 of 1: rank 3 on 198.18.1.10 failed: exit 3; started again in place"
          in err, err[-2000:])
    check(read(os.path.join(logs, "worker_3.log")).rstrip().endswith(b"done"), "rank 3's rerun")
    wait_no_leftovers(5)
