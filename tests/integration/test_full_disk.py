"""Nothing lost without a word (issue #37): --log_dir on a 2 MB tmpfs that fills up. The job goes
on and exits as it would, the console keeps every line, each log that misses bytes is named at
once and again in the summary and summary.json, no temporary file is left behind, and a log goes
on (after a line saying how many bytes are missing there) when space comes back."""
import contextlib
import json
import os
import re
import subprocess
import tempfile
import threading
import time

from harness import check, job, run, tmpdir, wait_no_leftovers


@contextlib.contextmanager
def _small_disk(size="2m"):
    d = tempfile.mkdtemp(prefix="small-disk-", dir=tmpdir())
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", d],
                   check=True, timeout=30)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", d], timeout=30)


def test_a_full_log_disk_is_said_at_once_and_in_the_summary_and_the_job_goes_on():
    with _small_disk() as disk:
        logs = os.path.join(disk, "logs")
        code, out, err, _ = run([job("lines.py"), "20000", "0"], log_dir=logs, timeout=300)
        text = err.decode(errors="replace")
        check(code == 0, f"exit {code}: {text[-3000:]}")
        # Every line of every process (the scheduler and 6 workers) reached the console.
        n = len(re.findall(rb"^\[[^]]*\] rank \d+ line \d+$", out, re.M))
        check(n == 7 * 20000, f"{n} of {7 * 20000} lines on the console")
        warned = re.findall(r"warning: cannot write (\S+): No space left on device; it holds (\d+) "
                            r"bytes", text)
        check(warned, f"no warning naming a log: {text[-3000:]}")
        named = re.findall(r"--- incomplete log: (\S+) \(.*\) misses (\d+) bytes \(No space left "
                           r"on device\); it holds (\d+) bytes ---", text)
        check({w[0] for w in warned} == {n[0] for n in named}, f"{warned} / {named}")
        for path, missing, holds in named:
            check(os.path.getsize(path) == int(holds), f"{path}: {os.path.getsize(path)} bytes, "
                  f"the summary says {holds}")
        check(not [n for n in os.listdir(logs) if n.endswith(".tmp")],
              f"a temporary file is left: {os.listdir(logs)}")
        # summary.json, when there was room for it, names the same logs.
        path = os.path.join(logs, "summary.json")
        if os.path.exists(path):
            summary = json.load(open(path))
            check({g["path"] for g in summary["incomplete_logs"]} == {n[0] for n in named},
                  f"summary.json: {summary['incomplete_logs']}")
    wait_no_leftovers(5)


def test_the_launcher_logs_own_write_errors_are_said_once_at_the_end():
    # msrun-ssh.log on a device that takes nothing (/dev/full: every flush fails). Its log
    # library printed each error itself, from the event loop straight to stderr, past the
    # console thread ("[*** LOG ERROR #0001 ***] ..."); now the end says it once.
    logs = os.path.join(tmpdir(), "full-launcher-log")
    os.makedirs(logs)
    os.symlink("/dev/full", os.path.join(logs, "msrun-ssh.log"))
    code, out, err, _ = run([job("lines.py"), "100", "0"], log_dir=logs, timeout=300)
    text = err.decode(errors="replace")
    check(code == 0, f"exit {code}: {text[-3000:]}")
    check("LOG ERROR" not in text, f"the log library wrote to stderr: {text[-3000:]}")
    said = re.findall(r"^msrun-ssh: warning: \S*msrun-ssh\.log misses messages: .*No space left "
                      r"on device$", text, re.M)
    check(len(said) == 1, f"said {len(said)} times: {text[-3000:]}")
    n = len(re.findall(rb"^\[[^]]*\] rank \d+ line \d+$", out, re.M))
    check(n == 7 * 100, f"{n} of {7 * 100} lines on the console")
    wait_no_leftovers(5)


def test_a_log_goes_on_with_a_marker_when_space_comes_back():
    with _small_disk() as disk:
        filler = os.path.join(disk, "filler")
        # All but ~8 KiB taken: the logs fill up within the first second of output.
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k", "count=510"],
                       check=True, capture_output=True, timeout=30)
        freed = threading.Timer(4.0, lambda: os.remove(filler))
        freed.start()
        try:
            logs = os.path.join(disk, "logs")
            code, out, err, _ = run([job("lines.py"), "160", "0.05"], log_dir=logs, timeout=120)
        finally:
            freed.cancel()
        text = err.decode(errors="replace")
        check(code == 0, f"exit {code}: {text[-3000:]}")
        check("warning: cannot write" in text and "is written again" in text, text[-3000:])
        resumed = 0
        for name in os.listdir(logs):
            if not name.startswith("worker_"):
                continue
            log = open(os.path.join(logs, name)).read()
            m = re.search(r"\[msrun-ssh: (\d+) bytes of this log are missing here: No space left "
                          r"on device\]\n", log)
            if m:
                resumed += 1
                check(log.endswith("line 159\n"), f"{name} does not go on to the end: {log[-200:]}")
        check(resumed > 0, f"no log marks its gap: {os.listdir(logs)}")
    wait_no_leftovers(5)


def test_on_log_error_stop_ends_the_job_with_exit_1():
    with _small_disk() as disk:
        logs = os.path.join(disk, "logs")
        code, out, err, _ = run([job("lines.py"), "200000", "0"], log_dir=logs, timeout=300,
                                extra=["--on_log_error", "stop"])
        text = err.decode(errors="replace")
        check(code == 1, f"exit {code}: {text[-3000:]}")
        check(re.search(r"cannot write \S+\.log: No space left on device "
                        r"\(--on_log_error=stop\); stopping the job on every host", text),
              text[-3000:])
    wait_no_leftovers(5)
