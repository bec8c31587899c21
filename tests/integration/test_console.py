"""The console's views on the namespace cluster (issue #18): --output gather prints the lines all
ranks share once under their rank set, shows progress bars without flooding or tearing them, and
keeps the per-rank logs byte-exact; --timestamps stamps console lines."""
import os
import re
import sys
import time

from harness import check, job, read, run

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs"))
from progress import expected_output  # noqa: E402

EPOCHS = 3
BAR = re.compile(r"^ {0,2}\d{1,3}%\|#{0,10} *\|$")


def test_gather_prints_shared_lines_once_and_keeps_logs_raw():
    # One start for every worker, far enough on for the launch of 6 processes on 3 hosts: the
    # workers' own starts can lie seconds apart on a loaded machine.
    start = f"{time.time() + 5:.3f}"
    code, out, err, logs = run([job("progress.py"), str(EPOCHS), start], extra=["--output", "gather"])
    check(code == 0, f"exit {code}: {err.decode(errors='replace')[-2000:]}")
    lines = out.decode().splitlines()
    for e in range(1, EPOCHS + 1):
        shared = [l for l in lines if l.endswith(f"] Epoch {e} done")]
        check(len(shared) == 1, f"epoch {e}: {len(shared)} console lines, want one: {shared}")
        check(shared[0].startswith("[0-5@"), f"epoch {e}: not under ranks 0-5: {shared[0]}")
    for rank in range(6):
        own = [l for l in lines if l.endswith(f"rank {rank} finished")]
        check(own and own[0].startswith(f"[{rank}@"), f"rank {rank}: its own line: {own}")
    # Progress bars: complete redraws only, a bounded number of them, never a '\r' or a torn bar.
    bars = [re.sub(r"^\[.*? err\] ", "", l) for l in err.decode().splitlines() if "%|" in l]
    check(bars, "no progress bar on the console")
    for b in bars:
        check("\r" not in b and BAR.match(b), f"torn progress line on the console: {b!r}")
    # Each rank redraws 11 times per epoch; the console shows at most about one a second, plus
    # the final state of each bar.
    check(len(bars) < 6 * EPOCHS * 11 / 2, f"{len(bars)} progress lines: the bars flood the console")
    for rank in range(6):
        want_out, want_err = expected_output(rank, EPOCHS)
        log = read(os.path.join(logs, f"worker_{rank}.log"))
        # Both streams go to one log, each line whole; the stderr bytes and the stdout bytes each
        # come in order.
        check(len(log) == len(want_out) + len(want_err), f"rank {rank}: log has {len(log)} bytes")
        log_lines = re.findall(rb"[^\n]*\n", log)  # split at newlines only: bars hold '\r'
        check(b"".join(l for l in log_lines if b"%|" in l) == want_err,
              f"rank {rank}: the progress bars in the log are not byte-exact")
        check(b"".join(l for l in log_lines if b"%|" not in l) == want_out,
              f"rank {rank}: the log's stdout lines are not byte-exact")


def test_timestamps_stamp_console_lines():
    code, out, err, logs = run([job("progress.py"), "1"], extra=["--timestamps", "--tail_worker_log", "0"])
    check(code == 0, f"exit {code}: {err.decode(errors='replace')[-2000:]}")
    stamp = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \[0@")
    lines = out.decode().splitlines()
    check(lines and all(stamp.match(l) for l in lines), f"unstamped console lines: {lines[:5]}")
    check(not re.search(rb"\d{4}-\d\d-\d\dT", read(os.path.join(logs, "worker_0.log"))),
          "the log got timestamps without --log_timestamps")
