"""Whole-job restarts (--max_restarts): attempts, their logs, their processes, and signals."""
import glob
import os
import re
import signal

from harness import check, interrupt, job, launch, read, run, wait_for, wait_no_leftovers


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
