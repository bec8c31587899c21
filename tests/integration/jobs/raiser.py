"""Test job for the failure report: rank ROOT raises OSError after DELAY seconds; every other
worker waits and, when the teardown's SIGTERM reaches it, raises ValueError naming its rank (as
ranks do when a peer dies under them). The scheduler just waits. Usage:
    raiser.py [--root R] [--delay S]
"""
import argparse
import os
import signal
import time

ap = argparse.ArgumentParser()
ap.add_argument("--root", type=int, default=3)
ap.add_argument("--delay", type=float, default=1.0)
a = ap.parse_args()
rank = int(os.environ.get("RANK_ID", "-1"))
worker = os.environ.get("MS_ROLE") == "MS_WORKER"


def load_shard():
    raise OSError(f"rank {rank}: cannot read shard {rank}: disk full")


def on_term(signum, frame):
    raise ValueError(f"rank {rank}: peer lost while waiting in step {100 + rank}")


print(f"rank {rank} up", flush=True)
if worker and rank == a.root:
    time.sleep(a.delay)
    load_shard()
if worker:
    signal.signal(signal.SIGTERM, on_term)
time.sleep(120)
