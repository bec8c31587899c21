"""Test job for --output gather: every worker prints the same epoch lines at the same wall-clock
moments (all hosts share this machine's clock), one line of its own, and a progress bar on stderr
redrawn with '\r' (as tqdm does). The scheduler prints nothing. What a worker writes is exactly
expected_output(rank), so that the test can compare the logs byte for byte.
Usage: progress.py EPOCHS [START]
START is the wall-clock second (time.time()) at which every worker begins its first epoch, given by
the test so that all workers share it; a worker that starts after it fails. Without START a worker
begins 2 s after it starts (for a single worker). Every write is due at a time counted from START,
so that a late wakeup under load delays that one write and is not carried into the next.
"""
import os
import sys
import time


def expected_output(rank, epochs):
    """(stdout, stderr) bytes of worker `rank`."""
    out = "".join(f"Epoch {e} done\n" for e in range(1, epochs + 1)) + f"rank {rank} finished\n"
    bar = "".join(f"\r{p:3d}%|{'#' * (p // 10):<10}|" for p in range(0, 101, 10)) + "\n"
    return out.encode(), (bar * epochs).encode()


def main():
    epochs = int(sys.argv[1])
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        return
    rank = int(os.environ["RANK_ID"])
    t0 = float(sys.argv[2]) if len(sys.argv) > 2 else time.time() + 2
    late = time.time() - t0
    if late > 0:
        sys.exit(f"progress.py: rank {rank} started {late:.2f} s after the common start")
    out, err = expected_output(rank, epochs)
    bars = err.decode().split("\n")

    def at(due):
        time.sleep(max(0.0, t0 + due - time.time()))

    for e in range(epochs):
        pieces = bars[e].split("\r")[1:]
        for i, piece in enumerate(pieces):
            at(2.5 * e + 0.12 * i)
            sys.stderr.write("\r" + piece)
            sys.stderr.flush()
        at(2.5 * e + 0.12 * len(pieces))
        sys.stderr.write("\n")
        sys.stderr.flush()
        sys.stdout.write(f"Epoch {e + 1} done\n")
        sys.stdout.flush()
    sys.stdout.write(f"rank {rank} finished\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
