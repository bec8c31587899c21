"""--timeout and --hang_timeout on the cluster: exit 124, the cause said, nothing left."""
import re
import time

from harness import check, job, run, wait_no_leftovers


def test_timeout_ends_the_job_with_124():
    start = time.monotonic()
    code, out, err, _ = run([job("sleeper.py")], extra=["--timeout", "3"], timeout=60)
    took = time.monotonic() - start
    check(code == 124, f"exit {code}: {err.decode()[-2000:]}")
    check(b"timed out: the job ran for its --timeout of 3 s" in err, f"{err.decode()[-1500:]}")
    check(re.search(rb"rank 3\s+killed by SIGTERM \(timed out\)", err), "summary says timed out")
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
