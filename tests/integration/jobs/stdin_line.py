"""Test job: rank 1 says it waits, reads one line of its stdin and prints it; the others end."""
import os
import sys

if os.environ.get("RANK_ID") == "1":
    print("rank 1 waits for a line", flush=True)
    print(f"rank 1 got {sys.stdin.readline().strip()!r}", flush=True)
