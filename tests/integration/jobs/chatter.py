"""Test job of the fault campaign (tests/faults/campaign.py): prints "rank R line N" (N from 0)
every INTERVAL seconds for SECONDS seconds, then "rank R done", and exits 0. Each process also
starts a grandchild (`sleep`) in its own session, which the job's end must take along.
Usage: chatter.py [SECONDS] [INTERVAL]"""
import os
import subprocess
import sys
import time

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 8
interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
rank = os.environ.get("RANK_ID", os.environ.get("RANK", "sched"))
if os.environ.get("MS_ROLE") == "MS_SCHED":
    rank = "sched"
subprocess.Popen(["sleep", str(seconds + 120)], start_new_session=True)
start = time.monotonic()
n = 0
while time.monotonic() - start < seconds:
    print(f"rank {rank} line {n}", flush=True)
    n += 1
    time.sleep(interval)
print(f"rank {rank} done", flush=True)
