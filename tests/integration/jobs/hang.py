"""Test job for hangs: every process prints one line, then blocks without a word. Rank STUCK
blocks in wait_for_peer() (socket.recv on a socket nobody writes to); the others block in
collective() (waiting on an event nobody sets), as ranks do in an all-reduce that waits for the
stuck one. With --seconds S they block for S seconds only, then print "rank R done" and exit 0;
with --child each first starts a `sleep` child (a process of the job that is not Python).
Usage: hang.py [--stuck R] [--seconds S] [--child]
"""
import argparse
import os
import socket
import subprocess
import threading

ap = argparse.ArgumentParser()
ap.add_argument("--stuck", type=int, default=2)
ap.add_argument("--seconds", type=float, default=None)
ap.add_argument("--child", action="store_true")
a = ap.parse_args()
rank = int(os.environ.get("RANK_ID", "-1"))
worker = os.environ.get("MS_ROLE") == "MS_WORKER"


def wait_for_peer():
    a_end, _b_end = socket.socketpair()
    a_end.settimeout(a.seconds)
    try:
        a_end.recv(1)
    except socket.timeout:
        pass


def collective():
    threading.Event().wait(a.seconds)


child = subprocess.Popen(["sleep", str(a.seconds or 3600)]) if a.child else None
print(f"rank {rank} up", flush=True)
if worker and rank == a.stuck:
    wait_for_peer()
else:
    collective()
if child:
    child.wait()
print(f"rank {rank} done", flush=True)
