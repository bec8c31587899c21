"""Test job: prints COUNT lines "rank R line I", one every DELAY seconds (default 5 x 0.4 s)."""
import os
import sys
import time

count = int(sys.argv[1]) if len(sys.argv) > 1 else 5
delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.4
rank = os.environ.get("RANK_ID", "sched")
for i in range(count):
    print(f"rank {rank} line {i}", flush=True)
    time.sleep(delay)
