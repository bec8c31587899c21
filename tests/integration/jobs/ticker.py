"""Test job for the job subcommands: prints "rank R tick N" once a second for SECONDS seconds
(default 20), then exits 0. Usage: ticker.py [SECONDS]"""
import os
import sys
import time

seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
rank = os.environ.get("RANK_ID", "-1")
for n in range(seconds):
    print(f"rank {rank} tick {n}", flush=True)
    time.sleep(1)
