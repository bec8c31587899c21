"""Test job for a teardown that takes its whole grace: every process ignores SIGTERM, and so does
the `sleep` it starts in a session of its own (a grandchild no channel reaches), so that only a
SIGKILL after the grace ends them. Prints "rank R up" once both run. Usage: stubborn.py
"""
import os
import signal
import subprocess
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the sleep through its exec
subprocess.Popen(["sleep", "300"], start_new_session=True)
print(f"rank {os.environ.get('RANK_ID', 'sched')} up", flush=True)
time.sleep(120)
sys.exit(0)
