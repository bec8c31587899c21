"""--timeout and --hang_timeout on the cluster: exit 124, the cause said, nothing left."""
import os
import re
import time

from harness import check, job, read, run, wait_no_leftovers


def test_timeout_ends_the_job_with_124():
    start = time.monotonic()
    code, out, err, _ = run([job("sleeper.py")], extra=["--timeout", "3"], timeout=60)
    took = time.monotonic() - start
    check(code == 124, f"exit {code}: {err.decode()[-2000:]}")
    check(b"timed out: the job ran for its --timeout of 3 s" in err, f"{err.decode()[-1500:]}")
    # Python processes print their stacks on the SIGABRT that ends them.
    check(re.search(rb"rank 3\s+killed by SIGABRT \(timed out\)", err), "summary says timed out")
    check(b"--- Python stacks of scheduler, ranks 0-5 (7 processes)" in err, f"{err.decode()[-3000:]}")
    check(took < 15, f"took {took:.1f} s")
    wait_no_leftovers(2)


def test_silent_job_is_a_hang():
    # sleeper.py prints one line per process, then sleeps for minutes without a word.
    start = time.monotonic()
    code, out, err, _ = run([job("sleeper.py")], extra=["--hang_timeout", "2"], timeout=60)
    took = time.monotonic() - start
    check(code == 124, f"exit {code}: {err.decode()[-2000:]}")
    check(b"hang: no process printed anything for 2 s (--hang_timeout)" in err,
          f"{err.decode()[-1500:]}")
    check(took < 15, f"took {took:.1f} s")
    wait_no_leftovers(2)


def test_hang_shows_every_ranks_stack_and_the_odd_one_out():
    start = time.monotonic()
    code, out, err, logs = run([job("hang.py"), "--stuck", "2"], extra=["--hang_timeout", "3"],
                               timeout=60)
    took = time.monotonic() - start
    check(code == 124, f"exit {code}: {err.decode()[-3000:]}")
    check(took < 15, f"took {took:.1f} s")
    text = err.decode()
    stacks = text[text.find("--- Python stacks"):]
    # The stuck rank, alone, with its function, file and line.
    check(re.search(r"--- Python stacks of rank 2 on 198\.18\.1\.11 ---\n"
                    r"Current thread 0x[0-9a-f]+ \(most recent call first\):\n"
                    r"  File \".*/hang\.py\", line \d+ in wait_for_peer\n", stacks),
          f"rank 2's stack: {stacks}")
    # The others (the scheduler too: it runs the same code): one stack, shown once, under their
    # rank set.
    check(re.search(r"--- Python stacks of scheduler, ranks 0-1,3-5 \(6 processes\), e\.g\. "
                    r"scheduler on 198\.18\.1\.10 ---\n", stacks), f"the others: {stacks}")
    check(stacks.count(" in collective\n") == 1, f"shown once: {stacks}")
    check(b"Fatal Python error: Aborted" in read(os.path.join(logs, "worker_2.log")),
          "the raw dump is in rank 2's log")
    files = [n for n in os.listdir(logs) if re.fullmatch(r"stacks-\d{8}-\d{6}\.txt", n)]
    check(len(files) == 1, f"one stacks file: {os.listdir(logs)}")
    saved = read(os.path.join(logs, files[0])).decode()
    check("--- Python stacks of rank 2 on 198.18.1.11 ---\n" in saved and
          " in wait_for_peer\n" in saved and saved.count(" in collective\n") == 1,
          f"the stacks file holds the grouped stacks: {saved}")
    wait_no_leftovers(2)
