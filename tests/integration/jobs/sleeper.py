"""Test job: rank FAIL_RANK exits FAIL_CODE after DELAY seconds; every other process sleeps.

Each process also starts a grandchild (`sleep`) in its own session, so tests can check that
grandchildren that left the process group are ended too. Usage:
    sleeper.py [--fail_rank R] [--fail_code C] [--delay S] [--sleep S]
"""
import argparse
import os
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--fail_rank", type=int, default=-1)
ap.add_argument("--fail_code", type=int, default=1)
ap.add_argument("--delay", type=float, default=2.0)
ap.add_argument("--sleep", type=float, default=300.0)
a = ap.parse_args()

rank = int(os.environ.get("RANK_ID", "-1"))
role = os.environ.get("MS_ROLE", "")
subprocess.Popen(["sleep", str(a.sleep + 60)], start_new_session=True)
print(f"{role} rank {rank} started pid {os.getpid()}", flush=True)
if role == "MS_WORKER" and rank == a.fail_rank:
    time.sleep(a.delay)
    print(f"rank {rank} exits {a.fail_code}", file=sys.stderr, flush=True)
    sys.exit(a.fail_code)
time.sleep(a.sleep)
