"""Test job of the straggler watch (test_watch.py): a synchronous job. Every worker burns WORK
seconds of CPU per step, then waits (asleep) at a barrier until every worker is there, and prints
"step N"; the scheduler (MS_ROLE=MS_SCHED, msrun's contract) is the barrier. SECONDS after the
first step, or STEPS steps, the workers print "done" and exit 0. Rank CHATTY (if given) prints 50
more lines per step: more output, the same speed.
Usage: lockstep.py [SECONDS] [WORK] [STEPS] [CHATTY]"""
import os
import socket
import sys
import time

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30
work = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
steps = int(sys.argv[3]) if len(sys.argv) > 3 and int(sys.argv[3]) > 0 else 1 << 30
chatty = sys.argv[4] if len(sys.argv) > 4 else None
host, port = os.environ["MS_SCHED_HOST"], int(os.environ["MS_SCHED_PORT"])
workers = int(os.environ["MS_WORKER_NUM"])


def serve():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(workers)
    peers = [s.accept()[0] for _ in range(workers)]
    while True:
        for p in peers:  # everybody at the barrier (or gone: the job is over)
            if not p.recv(1):
                return
        for p in peers:
            p.sendall(b"g")


def work_and_wait():
    deadline = time.monotonic() + 60
    while True:
        try:
            c = socket.create_connection((host, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    c.settimeout(None)
    rank = os.environ.get("RANK_ID", "?")
    start, n = time.monotonic(), 0
    while n < steps and time.monotonic() - start < seconds:
        until = time.process_time() + work
        while time.process_time() < until:
            pass
        # The scheduler ends once a worker has left (its time was up): a step of ours it never
        # read comes back as a reset (a race of the job's end, not a failure).
        try:
            c.sendall(b"s")
            if not c.recv(1):
                break
        except (ConnectionResetError, BrokenPipeError):
            break
        print(f"rank {rank} step {n}", flush=True)
        if rank == chatty:
            print("\n".join(f"rank {rank} says {i} at step {n}" for i in range(50)), flush=True)
        n += 1
    print(f"rank {rank} done", flush=True)


if os.environ.get("MS_ROLE") == "MS_SCHED":
    serve()
else:
    work_and_wait()
