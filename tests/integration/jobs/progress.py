"""Test job for --output gather: every worker prints the same epoch lines at the same wall-clock
moments (all hosts share this machine's clock), one line of its own, and a progress bar on stderr
redrawn with '\r' (as tqdm does). The scheduler prints nothing. What a worker writes is exactly
expected_output(rank), so that the test can compare the logs byte for byte.
Usage: progress.py EPOCHS
"""
import math
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
    out, err = expected_output(rank, epochs)
    bars = err.decode().split("\n")
    # Every worker starts its epochs at the same moment: the next even second, 2 s on.
    t0 = math.ceil(time.time() / 2) * 2 + 2
    for e in range(epochs):
        time.sleep(max(0.0, t0 + 2.5 * e - time.time()))
        for piece in bars[e].split("\r")[1:]:
            sys.stderr.write("\r" + piece)
            sys.stderr.flush()
            time.sleep(0.12)
        sys.stderr.write("\n")
        sys.stderr.flush()
        sys.stdout.write(f"Epoch {e + 1} done\n")
        sys.stdout.flush()
    sys.stdout.write(f"rank {rank} finished\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
