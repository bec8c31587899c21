"""Test job for restarts. Rank FAIL_RANK exits FAIL_CODE in the attempts listed in FAIL_ATTEMPTS
("1,3", or "all"); every other process runs RUN seconds and prints "done" (attempt 1 runs RUN_FIRST seconds when given); the
workers of rank STUBBORN_RANKS ("2,3") ignore SIGTERM in attempt 1. First each process
prints how many processes of earlier attempts of the job are still alive on its host, found by
their MSRUN_SSH_JOB marker (attempt k > 1 runs as job "<id>-k"). Usage:
    flaky.py [--fail_rank R] [--fail_code C] [--fail_attempts LIST] [--run S] [--run_first S]
             [--stubborn_ranks LIST]
"""
import argparse
import os
import signal
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--fail_rank", type=int, default=-1)
ap.add_argument("--fail_code", type=int, default=3)
ap.add_argument("--fail_attempts", default="1")
ap.add_argument("--run", type=float, default=1.0)
ap.add_argument("--run_first", type=float, default=None)
ap.add_argument("--stubborn_ranks", default="")
a = ap.parse_args()

attempt = int(os.environ.get("MSRUN_SSH_ATTEMPT", "0"))
job = os.environ["MSRUN_SSH_JOB"]
rank = int(os.environ.get("RANK_ID", "-1"))
role = os.environ.get("MS_ROLE", "")
if role == "MS_WORKER" and attempt <= 1 and str(rank) in a.stubborn_ranks.split(","):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
base = job if attempt <= 1 else job.rsplit("-", 1)[0]
earlier = {(base if k == 1 else f"{base}-{k}").encode() for k in range(1, attempt)}
alive = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        continue
    if any(e.startswith(b"MSRUN_SSH_JOB=") and e[14:] in earlier for e in env):
        alive += 1
print(f"attempt {attempt} {role} rank {rank} earlier-alive {alive}", flush=True)
failing = a.fail_attempts == "all" or str(attempt) in a.fail_attempts.split(",")
if role == "MS_WORKER" and rank == a.fail_rank and failing:
    time.sleep(0.5)
    print(f"rank {rank} exits {a.fail_code} in attempt {attempt}", file=sys.stderr, flush=True)
    sys.exit(a.fail_code)
time.sleep(a.run_first if attempt <= 1 and a.run_first is not None else a.run)
print("done", flush=True)
